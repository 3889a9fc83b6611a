#!/usr/bin/python3
"""t5_peer_torch.py - PyTorch's side of bench_t5: captions per second of a PyTorch T5 encoder (the
goldens' model, tests/data/golden/t5/make_t5_goldens.py, module for module as transformers'
T5EncoderModel) on the weights and captions bench_t5 wrote to DIR, in float32, in padded batches
with the attention mask (as a transformers user encodes captions), with the same number of threads
(torch.set_num_threads). Debian's python3-torch does its matrix products in Debian's OpenBLAS.

usage: t5_peer_torch.py --dir DIR [--threads N] [--batch B] [--seconds S]

Also compares caption 0's features with ingot's (DIR/features0.f32): max |ingot - torch| over
max |torch|. Output: `t5_peer threads=N captions_per_s=X max_rel_diff=Y`.
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "data", "golden", "t5"))
import make_t5_goldens as g  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").copy()).reshape(
            t["shape"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    s = dict(L=cfg["num_layers"], C=cfg["d_model"], NH=cfg["num_heads"], dkv=cfg["d_kv"],
             F=cfg["d_ff"], buckets=cfg["relative_attention_num_buckets"],
             max_distance=cfg["relative_attention_max_distance"], V=cfg["vocab_size"],
             ffn=cfg["feed_forward_proj"], eps=cfg["layer_norm_epsilon"])
    model = g.T5EncoderModel(s).float().eval()
    w = read_safetensors(os.path.join(a.dir, "model.safetensors"))
    # ingot's export fuses nothing into the file: q, k, v are separate, as transformers' are
    missing = model.load_state_dict(w, strict=False)
    assert not missing.unexpected_keys, missing.unexpected_keys
    assert all(k == "encoder.embed_tokens.weight" for k in missing.missing_keys), missing
    caps = [[int(t) for t in line.split()] for line in open(os.path.join(a.dir, "captions.txt"))]
    best, start, passes, feats = 1e30, time.time(), 0, None
    while passes < 2 or time.time() - start < a.seconds:
        t0 = time.time()
        out = []
        for i in range(0, len(caps), a.batch):
            out += g.encode(model, caps[i:i + a.batch], dtype=torch.float32)
        best = min(best, time.time() - t0)
        feats = out
        passes += 1
    ingot = np.fromfile(os.path.join(a.dir, "features0.f32"), dtype="<f4").reshape(
        feats[0].shape)
    ref = feats[0].numpy()
    diff = float(np.abs(ingot - ref).max() / np.abs(ref).max())
    print("PyTorch %s T5 encoder (the goldens' model, float32), %d captions, batches of %d, %d "
          "threads: %.2f captions/s; caption 0 against ingot's: %.2g of the scale"
          % (torch.__version__, len(caps), a.batch, a.threads, len(caps) / best, diff))
    print("t5_peer threads=%d captions_per_s=%.3f max_rel_diff=%.3g"
          % (a.threads, len(caps) / best, diff))


if __name__ == "__main__":
    main()
