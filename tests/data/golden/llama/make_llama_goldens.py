#!/usr/bin/python3
"""make_llama_goldens.py - golden values of two tiny random Llamas from PyTorch, for the Llama
family's tests (read as tests/test_train.c reads tests/data/golden/gpt/).

Writes, into a folder per case next to this script (tiny/, tied/: each a Hugging Face model
directory, config.json beside the weights), for the case "tiny" (untied: L 2, 4 query heads, 2 key/value heads,
hidden 32, head size 8, intermediate 64, T 16, vocab 100, B 2) and for the case "tied" (tied
embeddings: L 2, 2 query heads, 2 key/value heads, hidden 16, head size 8, intermediate 40, T 8,
vocab 50, B 2):
  CASE/init.safetensors   the initial parameters (Hugging Face LlamaForCausalLM names; nn.Linear
                          weights [out, in]: q_proj [NH * hs, C], k_proj and v_proj [NKV * hs, C],
                          o_proj [C, NH * hs], gate_proj and up_proj [F, C], down_proj [C, F];
                          embed_tokens and lm_head [V, C]; a tied model stores no lm_head.weight,
                          as save_pretrained drops it)
  CASE/config.json        the config as transformers writes it for LlamaForCausalLM
  CASE/tokens.bin         the micro-batch: int32 little-endian [B, T + 1] (inputs [:, :T],
                          targets [:, 1:])
  CASE/expected.safetensors
      loss                 [1]  the mean cross-entropy of the initial model over all B * T targets
      grad.NAME            the gradient of that loss for every parameter
      loss_step1..3        the loss before each of 3 AdamW steps
      grad_norm_step1..3   the global gradient norm before clipping, each step
      param.NAME           every parameter after the 3 steps
Everything is computed in float64 (the truth the fp32 kernels are measured against) and stored
as float32. The model is Llama as LlamaForCausalLM defines it: token embedding, no positions
added; per layer h += o_proj(attention(input_layernorm(h))), h += down_proj(silu(gate_proj(a)) *
up_proj(a)) with a = post_attention_layernorm(h); then model.norm and lm_head. RMSNorm is
x * rsqrt(mean(x^2) + eps) * w (eps 1e-5). Rotary embeddings in the rotate_half convention: with
inv_freq[i] = 1 / theta^(2i / hs) (i < hs / 2, theta 10000) and positions 0..T-1, the angle of
position t is t * inv_freq repeated twice ([hs]), and x -> x * cos + rotate_half(x) * sin, where
rotate_half(x) = cat(-x[hs/2:], x[:hs/2]); q and k are rotated per head, v is not. Grouped-query
attention: key/value head j serves query heads j * g .. j * g + g - 1 (g = NH / NKV, repeat_kv);
causal softmax with scale 1 / sqrt(hs). No biases, no dropout; the cross-entropy is over all V
logits. With tied embeddings lm_head.weight is model.embed_tokens.weight itself, so the golden
grad.model.embed_tokens.weight is the sum of both uses (the rows gathered by the input tokens plus
the output projection's h^T dlogits), and that one matrix counts once in the gradient norm.
Initial values: normal(0, 0.02) for every matrix, 1 + 0.1 * normal for the RMSNorm weights (not 1:
their gradients matter), from a torch.Generator with a fixed seed per case; the tokens from the same
generator. AdamW as torch.optim.AdamW (lr 1e-2, betas 0.9/0.95, eps 1e-8) with weight decay 0.1 on
the 2-d parameters only, after torch.nn.utils.clip_grad_norm_ (max norm 1.0).

Run with Debian's python3 and python3-torch (torch 1.13): /usr/bin/python3 make_llama_goldens.py
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

LR, BETAS, EPS, WD, CLIP = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0
NORM_EPS, THETA = 1e-5, 10000.0
CASES = [  # folder, config file, seed, shape
    ("tiny", "config.json", 20261124,
     dict(L=2, NH=4, NKV=2, C=32, F=64, T=16, V=100, B=2, tie=False)),
    ("tied", "config.json", 20261125,
     dict(L=2, NH=2, NKV=2, C=16, F=40, T=8, V=50, B=2, tie=True)),
]
HERE = os.path.dirname(os.path.abspath(__file__))


def names(s):
    """(name, shape) in LlamaForCausalLM's parameter order."""
    C, F_, hs = s["C"], s["F"], s["C"] // s["NH"]
    out = [("model.embed_tokens.weight", (s["V"], C))]
    for l in range(s["L"]):
        p = "model.layers.%d." % l
        out += [(p + "self_attn.q_proj.weight", (s["NH"] * hs, C)),
                (p + "self_attn.k_proj.weight", (s["NKV"] * hs, C)),
                (p + "self_attn.v_proj.weight", (s["NKV"] * hs, C)),
                (p + "self_attn.o_proj.weight", (C, s["NH"] * hs)),
                (p + "mlp.gate_proj.weight", (F_, C)), (p + "mlp.up_proj.weight", (F_, C)),
                (p + "mlp.down_proj.weight", (C, F_)),
                (p + "input_layernorm.weight", (C,)), (p + "post_attention_layernorm.weight", (C,))]
    out += [("model.norm.weight", (C,))]
    if not s["tie"]:
        out += [("lm_head.weight", (s["V"], C))]
    return out


def hf_config(s):
    """What LlamaConfig(...).save_pretrained writes (sorted keys, indent 2), less its version."""
    return {"architectures": ["LlamaForCausalLM"], "attention_bias": False,
            "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
            "head_dim": s["C"] // s["NH"], "hidden_act": "silu", "hidden_size": s["C"],
            "initializer_range": 0.02, "intermediate_size": s["F"],
            "max_position_embeddings": s["T"], "mlp_bias": False, "model_type": "llama",
            "num_attention_heads": s["NH"], "num_hidden_layers": s["L"],
            "num_key_value_heads": s["NKV"], "pretraining_tp": 1, "rms_norm_eps": NORM_EPS,
            "rope_scaling": None, "rope_theta": THETA, "tie_word_embeddings": s["tie"],
            "torch_dtype": "float32", "use_cache": True, "vocab_size": s["V"]}


def write_safetensors(path, tensors):
    """tensors: list of (name, float32 numpy array); the format's spec, stdlib only."""
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(p, tokens, s):
    B, T, C, V, NH, NKV = s["B"], s["T"], s["C"], s["V"], s["NH"], s["NKV"]
    hs, g = C // NH, NH // NKV
    x, y = tokens[:, :T], tokens[:, 1:]
    inv_freq = 1.0 / THETA ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)  # [hs/2]
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # [T, hs/2]
    ang = torch.cat((ang, ang), dim=-1)  # [T, hs]
    cos, sin = ang.cos(), ang.sin()
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    h = p["model.embed_tokens.weight"][x]  # [B, T, C]
    for l in range(s["L"]):
        q = "model.layers.%d." % l
        a = rms_norm(h, p[q + "input_layernorm.weight"])
        qq = (a @ p[q + "self_attn.q_proj.weight"].T).view(B, T, NH, hs).transpose(1, 2)
        kk = (a @ p[q + "self_attn.k_proj.weight"].T).view(B, T, NKV, hs).transpose(1, 2)
        vv = (a @ p[q + "self_attn.v_proj.weight"].T).view(B, T, NKV, hs).transpose(1, 2)
        qq = qq * cos + rotate_half(qq) * sin
        kk = kk * cos + rotate_half(kk) * sin
        kk = kk.repeat_interleave(g, dim=1)  # [B, NH, T, hs]: query head i reads kv head i // g
        vv = vv.repeat_interleave(g, dim=1)
        att = (qq @ kk.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ vv).transpose(1, 2).reshape(B, T, NH * hs)
        h = h + o @ p[q + "self_attn.o_proj.weight"].T
        a = rms_norm(h, p[q + "post_attention_layernorm.weight"])
        m = F.silu(a @ p[q + "mlp.gate_proj.weight"].T) * (a @ p[q + "mlp.up_proj.weight"].T)
        h = h + m @ p[q + "mlp.down_proj.weight"].T
    h = rms_norm(h, p["model.norm.weight"])
    head = p["model.embed_tokens.weight"] if s["tie"] else p["lm_head.weight"]
    logits = h @ head.T
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


def make(prefix, config_name, seed, s):
    gen = torch.Generator().manual_seed(seed)
    init = []
    for name, shape in names(s):
        a = torch.randn(shape, generator=gen, dtype=torch.float64)
        a = 1.0 + 0.1 * a if len(shape) == 1 else 0.02 * a  # 1-d: the RMSNorm weights
        init.append((name, a.numpy().astype(np.float32)))
    tokens = torch.randint(0, s["V"], (s["B"], s["T"] + 1), generator=gen).numpy().astype(np.int32)

    out_dir = os.path.join(HERE, prefix)
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "init.safetensors"), init)
    with open(os.path.join(out_dir, config_name), "w") as f:
        json.dump(hf_config(s), f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out_dir, "tokens.bin"), "wb") as f:
        f.write(tokens.astype("<i4").tobytes())

    # the initial values as the test sees them: float32, then computed in float64
    p = {n: torch.tensor(a.astype(np.float64), requires_grad=True) for n, a in init}
    tk = torch.tensor(tokens.astype(np.int64))
    loss = forward(p, tk, s)
    loss.backward()
    out = [("loss", np.array([loss.item()], dtype=np.float32))]
    out += [("grad." + n, p[n].grad.numpy().astype(np.float32)) for n, _ in init]

    params = [p[n] for n, _ in init]
    for t in params:
        t.grad = None
    decay = [p[n] for n, shape in names(s) if len(shape) == 2]
    no_decay = [p[n] for n, shape in names(s) if len(shape) == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)
    for step in range(1, 4):
        opt.zero_grad()
        loss = forward(p, tk, s)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        out.append(("loss_step%d" % step, np.array([loss.item()], dtype=np.float32)))
        out.append(("grad_norm_step%d" % step, np.array([norm.item()], dtype=np.float32)))
    out += [("param." + n, p[n].detach().numpy().astype(np.float32)) for n, _ in init]
    write_safetensors(os.path.join(out_dir, "expected.safetensors"), out)
    print("%s: loss %.6f, losses %s, norms %s" % (
        prefix, out[0][1][0], [o[1][0] for o in out if o[0].startswith("loss_step")],
        [o[1][0] for o in out if o[0].startswith("grad_norm")]))


def main():
    for prefix, config_name, seed, s in CASES:
        make(prefix, config_name, seed, s)


if __name__ == "__main__":
    main()
