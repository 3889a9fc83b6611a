#!/usr/bin/env python3
"""hf_check.py - an exported model's loss outside ingot against `ingot eval`'s (issue 12, section 5).

    python3 tools/bench/hf_check.py --ingot build/ingot --model EXPORT_DIR --data PREFIX \
        [--seq-len L] [--batches K] [--micro-batch B] [--impl auto|transformers|torch] \
        [--dtype fp32|bf16] [--tol 1e-4]

EXPORT_DIR is what `ingot ckpt export` wrote (config.json + model.safetensors); config.json's
model_type picks the family: "gpt2" (also when absent) or "llama". The script runs
`ingot eval EXPORT_DIR --data PREFIX ...`, takes the very micro-batches eval reads from
`ingot samples --tokens` (the same stream: K * B samples, seed 1234, the whole split, one rank),
and computes their mean cross-entropy with
  - transformers: GPT2LMHeadModel or LlamaForCausalLM .from_pretrained(EXPORT_DIR) (the proof
    that a released tool reads the export), or
  - torch: the family's forward written here from the safetensors file and config.json alone (for
    machines without transformers, such as Debian's python3-torch 1.13). GPT-2: pre-LayerNorm,
    learned positions, tanh GeLU, tied head. Llama as LlamaForCausalLM computes it: RMSNorm in
    fp32, rotary embeddings (rotate_half, fp32 angles), grouped-query attention (repeat_kv),
    softmax in fp32, SiLU-gated MLP, tied or untied lm_head; no rope_scaling.
--impl auto takes transformers when it can be imported. --dtype: the peer's weights and matmuls,
fp32 (default) or bf16 (as from_pretrained(torch_dtype=torch.bfloat16) runs; the cross-entropy
is taken over fp32 logits either way; a bf16 peer needs a looser --tol). The torch path reads
F32, BF16 and F16 tensors. Prints one line "hf_check impl=... ingot=X peer=Y rel=R" and exits 1
when the relative difference is above --tol.
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
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
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


def load_safetensors(path, torch, dtype):
    """{name: tensor in dtype}; GPT-2's "transformer." prefix dropped."""
    kinds = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] not in kinds:
            sys.exit(f"hf_check: {name} is {t['dtype']}; the torch path reads F32, BF16 and F16")
        lo, hi = t["data_offsets"]
        x = torch.frombuffer(bytearray(blob[base + lo:base + hi]), dtype=kinds[t["dtype"]])
        x = x.to(dtype)
        out[name[len("transformer."):] if name.startswith("transformer.") else name] = \
            x.reshape(t["shape"]) if t["shape"] else x.reshape(())
    return out


def torch_dtype(torch, name):
    return torch.bfloat16 if name == "bf16" else torch.float32


def torch_loss_fn(model_dir, dtype):
    """GPT-2 (pre-LayerNorm, learned positions, tanh GeLU, tied head; Conv1D weights [in, out])."""
    import torch
    import torch.nn.functional as F
    cfg = json.load(open(f"{model_dir}/config.json"))
    w = load_safetensors(f"{model_dir}/model.safetensors", torch, torch_dtype(torch, dtype))
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
        logits = (ln(x, "ln_f") @ w["wte.weight"].t()).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()

    return loss


def llama_torch_loss_fn(model_dir, dtype):
    """Llama as LlamaForCausalLM (eager attention) computes it; nn.Linear weights [out, in]."""
    import torch
    import torch.nn.functional as F
    cfg = json.load(open(f"{model_dir}/config.json"))
    if cfg.get("rope_scaling"):
        sys.exit(f"hf_check: {model_dir}/config.json has rope_scaling; the torch path has none")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        sys.exit(f"hf_check: {model_dir}/config.json asks for biases; the torch path has none")
    dt = torch_dtype(torch, dtype)
    w = load_safetensors(f"{model_dir}/model.safetensors", torch, dt)
    C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
    NKV = cfg.get("num_key_value_heads") or NH
    hs = cfg.get("head_dim") or C // NH
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) \
        else w["lm_head.weight"]
    inv_freq = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=torch.int64).float() / hs)  # [hs/2]

    def rms(x, name):  # in fp32, as LlamaRMSNorm; the weight multiplies in the model's dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return w[name] * xf.to(x.dtype)

    def rotate_half(x):
        return torch.cat((-x[..., hs // 2:], x[..., :hs // 2]), dim=-1)

    def loss(tokens):
        idx = torch.tensor(tokens, dtype=torch.long)
        x_in, y = idx[:, :-1], idx[:, 1:]
        B, T = x_in.shape
        ang = torch.outer(torch.arange(T).float(), inv_freq)
        ang = torch.cat((ang, ang), dim=-1)  # [T, hs]
        cos, sin = ang.cos().to(dt), ang.sin().to(dt)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        x = w["model.embed_tokens.weight"][x_in]  # [B, T, C]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            a = rms(x, p + "input_layernorm.weight")
            q = F.linear(a, w[p + "self_attn.q_proj.weight"]).view(B, T, NH, hs).transpose(1, 2)
            k = F.linear(a, w[p + "self_attn.k_proj.weight"]).view(B, T, NKV, hs).transpose(1, 2)
            v = F.linear(a, w[p + "self_attn.v_proj.weight"]).view(B, T, NKV, hs).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(NH // NKV, dim=1)  # query head h reads key/value head h // g
            v = v.repeat_interleave(NH // NKV, dim=1)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1, dtype=torch.float32)
            o = (att.to(dt) @ v).transpose(1, 2).reshape(B, T, NH * hs)
            x = x + F.linear(o, w[p + "self_attn.o_proj.weight"])
            a = rms(x, p + "post_attention_layernorm.weight")
            m = F.silu(F.linear(a, w[p + "mlp.gate_proj.weight"])) * \
                F.linear(a, w[p + "mlp.up_proj.weight"])
            x = x + F.linear(m, w[p + "mlp.down_proj.weight"])
        logits = F.linear(rms(x, "model.norm.weight"), head).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()

    return loss


def transformers_loss_fn(model_dir, family, dtype):
    import torch
    if family == "llama":
        from transformers import LlamaForCausalLM as Model
    else:
        from transformers import GPT2LMHeadModel as Model
    model = Model.from_pretrained(model_dir, torch_dtype=torch_dtype(torch, dtype)).eval()

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
    family = cfg.get("model_type", "gpt2")
    if family not in ("gpt2", "llama"):
        sys.exit(f"hf_check: {a.model}/config.json: model_type {family!r}; known: gpt2, llama")
    L = a.seq_len or cfg["n_positions" if family == "gpt2" else "max_position_embeddings"]
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
    if impl == "transformers":
        fn = transformers_loss_fn(a.model, family, a.dtype)
    elif family == "llama":
        fn = llama_torch_loss_fn(a.model, a.dtype)
    else:
        fn = torch_loss_fn(a.model, a.dtype)
    batches = ingot_batches(a, L)
    peer = sum(fn(b) for b in batches) / len(batches)
    rel = abs(ingot - peer) / max(abs(peer), 1e-12)
    print(f"hf_check impl={impl} model={family} dtype={a.dtype} batches={a.batches}x{a.micro_batch}x{L} ingot={ingot:.6f} "
          f"peer={peer:.6f} rel={rel:.2e} tol={a.tol:g}")
    return 0 if rel <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
