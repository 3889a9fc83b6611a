#!/usr/bin/env python3
"""hf_check.py - an exported model's loss outside ingot against `ingot eval`'s (issue 12, section 5).

    python3 tools/bench/hf_check.py --ingot build/ingot --model EXPORT_DIR --data PREFIX \
        [--seq-len L] [--batches K] [--micro-batch B] [--impl auto|transformers|torch] [--tol 1e-4]

EXPORT_DIR is what `ingot ckpt export` wrote (config.json + model.safetensors). The script runs
`ingot eval EXPORT_DIR --data PREFIX ...`, takes the very micro-batches eval reads from
`ingot samples --tokens` (the same stream: K * B samples, seed 1234, the whole split, one rank),
and computes their mean cross-entropy with
  - transformers: GPT2LMHeadModel.from_pretrained(EXPORT_DIR) (the proof that a released tool
    reads the export), or
  - torch: a GPT-2 forward written here from the safetensors file and config.json alone (for
    machines without transformers, such as Debian's python3-torch 1.13).
--impl auto takes transformers when it can be imported. Prints one line
"hf_check impl=... ingot=X peer=Y rel=R" and exits 1 when the relative difference is above --tol.
"""
import argparse
import json
import math
import struct
import subprocess
import sys


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ingot", default="build/ingot")
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq-len", type=int, default=0)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--impl", choices=["auto", "transformers", "torch"], default="auto")
    ap.add_argument("--tol", type=float, default=1e-4)
    return ap.parse_args()


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"hf_check: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def ingot_batches(a, L):
    out = run([a.ingot, "samples", "--quiet", "--seq-len", str(L),
               "--samples", str(a.batches * a.micro_batch), "--micro-batch", str(a.micro_batch),
               "--steps", str(a.batches), "--tokens", a.data])
    batches = []
    for line in out.splitlines():
        if "tokens=" not in line:
            continue
        rows = line.split("tokens=", 1)[1].split("|")
        batches.append([[int(t) for t in r.split()] for r in rows])
    if len(batches) != a.batches:
        sys.exit(f"hf_check: ingot samples gave {len(batches)} micro-batches, not {a.batches}")
    return batches


def load_safetensors(path, torch):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"hf_check: {name} is {t['dtype']}; the torch path reads F32 exports only")
        lo, hi = t["data_offsets"]
        x = torch.frombuffer(bytearray(blob[base + lo:base + hi]), dtype=torch.float32)
        out[name[len("transformer."):] if name.startswith("transformer.") else name] = \
            x.reshape(t["shape"]) if t["shape"] else x.reshape(())
    return out


def torch_loss_fn(model_dir):
    """GPT-2 (pre-LayerNorm, learned positions, tanh GeLU, tied head; Conv1D weights [in, out])."""
    import torch
    import torch.nn.functional as F
    cfg = json.load(open(f"{model_dir}/config.json"))
    w = load_safetensors(f"{model_dir}/model.safetensors", torch)
    H, eps = cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)

    def ln(x, p):
        return F.layer_norm(x, x.shape[-1:], w[p + ".weight"], w[p + ".bias"], eps)

    def loss(tokens):
        idx = torch.tensor(tokens, dtype=torch.long)
        x_in, y = idx[:, :-1], idx[:, 1:]
        B, T = x_in.shape
        x = w["wte.weight"][x_in] + w["wpe.weight"][:T]
        C = x.shape[-1]
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        for i in range(cfg["n_layer"]):
            p = f"h.{i}."
            qkv = ln(x, p + "ln_1") @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y_att = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + y_att @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            h = ln(x, p + "ln_2") @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"]
            h = F.gelu(h, approximate="tanh")
            x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        logits = ln(x, "ln_f") @ w["wte.weight"].t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()

    return loss


def transformers_loss_fn(model_dir):
    import torch
    from transformers import GPT2LMHeadModel
    model = GPT2LMHeadModel.from_pretrained(model_dir, torch_dtype=torch.float32).eval()

    def loss(tokens):
        idx = torch.tensor(tokens, dtype=torch.long)
        with torch.no_grad():
            logits = model(idx[:, :-1]).logits.float()
        y = idx[:, 1:]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1)).item()

    return loss


def main():
    a = parse_args()
    cfg = json.load(open(f"{a.model}/config.json"))
    L = a.seq_len or cfg["n_positions"]
    ev = run([a.ingot, "eval", a.model, "--data", a.data, "--seq-len", str(L),
              "--batches", str(a.batches), "--micro-batch", str(a.micro_batch), "--quiet"])
    ingot = float(ev.strip().splitlines()[-1].split()[1])
    impl = a.impl
    if impl == "auto":
        try:
            import transformers  # noqa: F401
            impl = "transformers"
        except ImportError:
            impl = "torch"
    fn = transformers_loss_fn(a.model) if impl == "transformers" else torch_loss_fn(a.model)
    batches = ingot_batches(a, L)
    peer = sum(fn(b) for b in batches) / len(batches)
    rel = abs(ingot - peer) / max(abs(peer), 1e-12)
    print(f"hf_check impl={impl} batches={a.batches}x{a.micro_batch}x{L} ingot={ingot:.6f} "
          f"peer={peer:.6f} rel={rel:.2e} tol={a.tol:g}")
    return 0 if rel <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
