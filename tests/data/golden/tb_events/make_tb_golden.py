#!/usr/bin/python3
"""make_tb_golden.py - builds the golden TensorBoard event file of test_tb_events from the format's
specification alone (no ingot code; neither tensorboard nor tensorflow is in Debian, and this
machine cannot reach PyPI). Only the standard library's struct module is used.

The file is what TensorFlow's EventFileWriter writes for these events:
  - TFRecord framing per record: u64 LE length | u32 LE masked CRC32C of the 8 length bytes |
    data | u32 LE masked CRC32C of the data; masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8
    (CRC32C computed below bit by bit, reflected polynomial 0x82F63B78);
  - data: a serialized tensorflow.Event (proto3): wall_time = 1 (double), step = 2 (int64),
    file_version = 3 (string) for the first record, summary = 5 (Summary: repeated value = 1,
    Value: tag = 1 (string), simple_value = 2 (float)) for the others. As the protobuf library
    serializes proto3: fields in number order; wall_time and step (no presence) omitted when
    their bits are zero; oneof members (file_version, summary, simple_value) always written;
    negative int64 as a 10-byte two's-complement varint.

Run from the checkout:  /usr/bin/python3 tests/data/golden/tb_events/make_tb_golden.py
"""
import os
import struct

START = 1700000000.0
HOST = "golden"
# (tag, step, value, wall_time); test_tb_events.c writes the same through ig_tb_writer
SCALARS = [
    ("train/loss", 1, 2.5, 1700000001.25),
    ("train/loss", 2, 0.0, 1700000002.5),
    ("train/lr", 0, 6e-4, 1700000002.5),
    ("eval/loss", -3, -1.0e30, 1700000003.0),
    ("g\u00fcltig/\u00e9t\u00e9", 1 << 40, 1e-45, 0.0),
    ("nan", 5, float("nan"), 1700000004.0),
    ("x" * 200, 300, float("inf"), 1700000005.0),
]


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(v):
    v &= (1 << 64) - 1  # int64 two's complement
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(number, wire_type):
    return varint((number << 3) | wire_type)


def length_delimited(number, payload):
    return field(number, 2) + varint(len(payload)) + payload


def event(wall_time, step, what):
    out = b""
    if struct.pack("<d", wall_time) != b"\0" * 8:
        out += field(1, 1) + struct.pack("<d", wall_time)
    if step != 0:
        out += field(2, 0) + varint(step)
    return out + what


def scalar_summary(tag, value):
    v = length_delimited(1, tag.encode("utf-8")) + field(2, 5) + struct.pack("<f", value)
    return length_delimited(5, length_delimited(1, v))


def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(crc32c(n))) + data + struct.pack("<I", masked(crc32c(data)))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    blob = record(event(START, 0, length_delimited(3, b"brain.Event:2")))
    for tag, step, value, wall in SCALARS:
        blob += record(event(wall, step, scalar_summary(tag, value)))
    name = "events.out.tfevents.%d.%s" % (int(START), HOST)
    with open(os.path.join(here, name), "wb") as f:
        f.write(blob)
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    print("%s: %d bytes" % (name, len(blob)))


if __name__ == "__main__":
    main()
