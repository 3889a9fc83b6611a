#!/usr/bin/python3
"""make_safetensors_golden.py - builds the golden safetensors files of test_safetensors from the
format's specification alone (no ingot code, no safetensors package: it is not in Debian and
this machine cannot reach PyPI). Only the standard library's json and struct modules are used.

What it reproduces is what the reference library (huggingface/safetensors, the Rust crate behind
the Python package) writes, as its serializer `prepare` and `Metadata::serialize` do:
  - tensors sorted by dtype, descending in the reference's Dtype order, then by name;
  - data_offsets back to back from 0 in that order;
  - header = serde_json compact JSON: "__metadata__" first (when given), then each tensor as
    {"dtype":..,"shape":[..],"data_offsets":[b,e]}; strings escaped as serde_json does
    (json.dumps(ensure_ascii=False) escapes the same characters the same way);
  - header padded with spaces to a multiple of 8 bytes; u64 little-endian header length first;
  - then the tensors' bytes in order.

Tensor bytes: F32/BF16/F16/F64 tensors hold the values below; every other tensor holds the byte
pattern (13 * i + len(name)) & 0xFF, which the C test recomputes.

Run from the checkout:  /usr/bin/python3 tests/data/golden/safetensors/make_safetensors_golden.py
"""
import json
import os
import struct

# The reference's Dtype enum order (its writer sorts by it, descending) and bits per element.
DTYPES = [
    ("BOOL", 8), ("F4", 4), ("F6_E2M3", 6), ("F6_E3M2", 6), ("U8", 8), ("I8", 8),
    ("F8_E5M2", 8), ("F8_E4M3", 8), ("F8_E8M0", 8), ("F8_E4M3FNUZ", 8), ("F8_E5M2FNUZ", 8),
    ("I16", 16), ("U16", 16), ("F16", 16), ("BF16", 16), ("I32", 32), ("U32", 32), ("F32", 32),
    ("C64", 64), ("F64", 64), ("I64", 64), ("U64", 64),
]
RANK = {name: i for i, (name, _) in enumerate(DTYPES)}
BITS = dict(DTYPES)

VALUES = [-1.5, -0.5, 0.0, 0.25, 1.0, 2.75]  # exact in F32, BF16 and F16


def pattern(name, nbytes):
    return bytes((13 * i + len(name.encode("utf-8"))) & 0xFF for i in range(nbytes))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def f32_bits(v):
    return struct.unpack("<I", struct.pack("<f", v))[0]


def values_bytes(dtype, values):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    if dtype == "F64":
        return struct.pack("<%dd" % len(values), *values)
    if dtype == "BF16":  # the values are exact in bf16: the top half of the f32 bits
        return b"".join(struct.pack("<H", f32_bits(v) >> 16) for v in values)
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    raise ValueError(dtype)


# (name, dtype, shape, values or None for the byte pattern)
MIXED = [
    ("wte", "F32", [2, 3], VALUES),
    ("wte.bf16", "BF16", [2, 3], VALUES),
    ("wte.f16", "F16", [3, 2], VALUES),
    ("scalar", "F32", [], [3.25]),
    ("empty", "F32", [0, 3], []),
    ("none", "I64", [0], None),
    ("f64", "F64", [2], [1e-300, -2.5]),
    ("ids", "I64", [3], None),
    ("u64", "U64", [1, 1], None),
    ("c64", "C64", [2], None),
    ("i32", "I32", [2, 2], None),
    ("u32", "U32", [3], None),
    ("i16", "I16", [4], None),
    ("u16", "U16", [1], None),
    ("i8", "I8", [5], None),
    ("u8", "U8", [7], None),
    ("mask", "BOOL", [3], None),
    ("f8a", "F8_E5M2", [2], None),
    ("f8b", "F8_E4M3", [2], None),
    ("f8c", "F8_E8M0", [1], None),
    ("f8d", "F8_E4M3FNUZ", [1], None),
    ("f8e", "F8_E5M2FNUZ", [1], None),
    ("f4", "F4", [2, 3], None),
    ("f6a", "F6_E2M3", [4], None),
    ("f6b", "F6_E3M2", [8], None),
    ('we"ird\\name\n\t\x01\x7f/é', "U8", [2], None),
    ("h.0.attn.c_attn.weight", "F32", [2, 6], [0.5 * i - 2 for i in range(12)]),
]
MIXED_METADATA = {"format": "pt"}


def serialize(tensors, metadata):
    order = sorted(tensors, key=lambda t: (-RANK[t[1]], t[0].encode("utf-8")))
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    data = b""
    for name, dtype, shape, values in order:
        nbytes = numel(shape) * BITS[dtype] // 8
        blob = values_bytes(dtype, values) if values is not None else pattern(name, nbytes)
        assert len(blob) == nbytes, name
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + nbytes]}
        data += blob
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    files = {
        "mixed.safetensors": serialize(MIXED, MIXED_METADATA),
        "empty.safetensors": serialize([], None),
    }
    for name, blob in files.items():
        with open(os.path.join(here, name), "wb") as f:
            f.write(blob)
        print("%s: %d bytes" % (name, len(blob)))


if __name__ == "__main__":
    main()
