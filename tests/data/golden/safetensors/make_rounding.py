#!/usr/bin/python3
"""make_rounding.py - reference fp32 -> bf16 and fp32 -> f16 conversions for test_safetensors,
made with PyTorch (Debian's python3-torch) and checked against numpy's float16.

Writes rounding.bin: records of <I f32 bits> <H bf16 bits> <H f16 bits>, little-endian, where
bf16 = torch.tensor(x).to(torch.bfloat16) and f16 = .to(torch.float16) (both round to nearest,
ties to even). The inputs: signed zeros, infinities, the largest and smallest normals and
subnormals of each format, values at and around every rounding tie of the two formats across
their exponent ranges, and 8192 random bit patterns (seeded). NaN is left out: PyTorch's own
paths disagree on its bf16 bits (the vectorised cast gives 0xFFFF, c10::BFloat16 0x7FC0), so
test_safetensors checks NaN by hand.

Run from the checkout:  /usr/bin/python3 tests/data/golden/safetensors/make_rounding.py
"""
import os
import random
import struct

import numpy as np
import torch


def inputs():
    bits = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF,
            0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x3F800000]
    for e in range(0, 255):
        for sign in (0, 0x80000000):
            base = sign | (e << 23)
            for m in (0, 1, 0x7FFF, 0x8000, 0x8001, 0x18000, 0x17FFF, 0xFFFF, 0x10000,
                      0xFFF, 0x1000, 0x1001, 0x3000, 0x2FFF, 0x1FFF, 0x7FFFFF, 0x7FF000,
                      0x7FE000, 0x400000, 0x401000):
                bits.append(base | m)
    rng = random.Random(20261122)
    for _ in range(8192):
        bits.append(rng.getrandbits(32))
    out = []
    for b in bits:
        if (b & 0x7F800000) == 0x7F800000 and (b & 0x7FFFFF):
            continue  # NaN
        out.append(b)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    bits = inputs()
    x = torch.tensor(np.array(bits, dtype=np.uint32).view(np.float32))
    bf16 = x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    f16 = x.to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    with np.errstate(over="ignore"):
        f16_np = x.numpy().astype(np.float16).view(np.uint16)
    assert (f16 == f16_np).all(), "torch and numpy disagree on float16"
    with open(os.path.join(here, "rounding.bin"), "wb") as f:
        for b, h1, h2 in zip(bits, bf16.tolist(), f16.tolist()):
            f.write(struct.pack("<IHH", b, h1, h2))
    print("rounding.bin: %d values" % len(bits))


if __name__ == "__main__":
    main()
