#!/usr/bin/python3
"""make_gpt_goldens.py - golden values of a tiny random GPT-2 from PyTorch, for tests/test_train.c.

Writes, next to this script:
  tiny_init.safetensors   the initial parameters (Hugging Face GPT-2 names, Conv1D [in, out]
                          weights, wte of vocab_size rows) and config.json beside it
  tiny_tokens.bin         the micro-batch: int32 little-endian [B, T + 1] (inputs [:, :T],
                          targets [:, 1:])
  tiny_expected.safetensors
      loss                 [1]  the mean cross-entropy of the initial model on the batch
      grad.NAME            the gradient of that loss for every parameter
      loss_step1..3        the loss before each of 3 AdamW steps
      grad_norm_step1..3   the global gradient norm before clipping, each step
      param.NAME           every parameter after the 3 steps
Everything is computed in float64 (the truth the fp32 kernels are measured against) and stored
as float32. The model is GPT-2: learned positions, pre-LayerNorm (eps 1e-5), tanh GeLU, tied
embeddings, no dropout; AdamW as torch.optim.AdamW with weight decay on the 2-d parameters only,
after torch.nn.utils.clip_grad_norm_.

Run with Debian's python3 and python3-torch (torch 1.13): /usr/bin/python3 make_gpt_goldens.py
"""
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

L, NH, C, T, V, B = 2, 2, 32, 16, 100, 2
LR, BETAS, EPS, WD, CLIP = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0
HERE = os.path.dirname(os.path.abspath(__file__))


def names():
    out = [("transformer.wte.weight", (V, C)), ("transformer.wpe.weight", (T, C))]
    for l in range(L):
        p = "transformer.h.%d." % l
        out += [(p + "ln_1.weight", (C,)), (p + "ln_1.bias", (C,)),
                (p + "attn.c_attn.weight", (C, 3 * C)), (p + "attn.c_attn.bias", (3 * C,)),
                (p + "attn.c_proj.weight", (C, C)), (p + "attn.c_proj.bias", (C,)),
                (p + "ln_2.weight", (C,)), (p + "ln_2.bias", (C,)),
                (p + "mlp.c_fc.weight", (C, 4 * C)), (p + "mlp.c_fc.bias", (4 * C,)),
                (p + "mlp.c_proj.weight", (4 * C, C)), (p + "mlp.c_proj.bias", (C,))]
    out += [("transformer.ln_f.weight", (C,)), ("transformer.ln_f.bias", (C,))]
    return out


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


def forward(p, tokens):
    x, y = tokens[:, :T], tokens[:, 1:]
    h = p["transformer.wte.weight"][x] + p["transformer.wpe.weight"][torch.arange(T)]
    hs = C // NH
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        q = "transformer.h.%d." % l
        a = F.layer_norm(h, (C,), p[q + "ln_1.weight"], p[q + "ln_1.bias"], 1e-5)
        qkv = a @ p[q + "attn.c_attn.weight"] + p[q + "attn.c_attn.bias"]
        qq, kk, vv = qkv.split(C, dim=2)
        qq = qq.view(B, T, NH, hs).transpose(1, 2)
        kk = kk.view(B, T, NH, hs).transpose(1, 2)
        vv = vv.view(B, T, NH, hs).transpose(1, 2)
        att = (qq @ kk.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ vv).transpose(1, 2).reshape(B, T, C)
        h = h + o @ p[q + "attn.c_proj.weight"] + p[q + "attn.c_proj.bias"]
        a = F.layer_norm(h, (C,), p[q + "ln_2.weight"], p[q + "ln_2.bias"], 1e-5)
        m = F.gelu(a @ p[q + "mlp.c_fc.weight"] + p[q + "mlp.c_fc.bias"], approximate="tanh")
        h = h + m @ p[q + "mlp.c_proj.weight"] + p[q + "mlp.c_proj.bias"]
    h = F.layer_norm(h, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], 1e-5)
    logits = h @ p["transformer.wte.weight"].T
    return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


def main():
    rng = np.random.RandomState(20261123)
    init = []
    for name, shape in names():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
            a = 1.0 + 0.1 * rng.randn(*shape)  # not 1: the LayerNorm weights' gradients matter
        elif name.endswith(".bias"):
            a = 0.02 * rng.randn(*shape)
        else:
            a = 0.05 * rng.randn(*shape)
        init.append((name, a.astype(np.float32)))
    tokens = rng.randint(0, V, size=(B, T + 1)).astype(np.int32)

    write_safetensors(os.path.join(HERE, "tiny_init.safetensors"), init)
    with open(os.path.join(HERE, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "n_layer": L, "n_head": NH, "n_embd": C, "n_positions": T,
                   "vocab_size": V, "activation_function": "gelu_new"}, f, indent=2)
        f.write("\n")
    with open(os.path.join(HERE, "tiny_tokens.bin"), "wb") as f:
        f.write(tokens.astype("<i4").tobytes())

    # the initial values as the test sees them: float32, then computed in float64
    p = {n: torch.tensor(a.astype(np.float64), requires_grad=True) for n, a in init}
    tk = torch.tensor(tokens.astype(np.int64))
    loss = forward(p, tk)
    loss.backward()
    out = [("loss", np.array([loss.item()], dtype=np.float32))]
    out += [("grad." + n, p[n].grad.numpy().astype(np.float32)) for n, _ in init]

    params = [p[n] for n, _ in init]
    for t in params:
        t.grad = None
    decay = [p[n] for n, s in names() if len(s) == 2]
    no_decay = [p[n] for n, s in names() if len(s) == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}], lr=LR, betas=BETAS, eps=EPS)
    for step in range(1, 4):
        opt.zero_grad()
        loss = forward(p, tk)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        out.append(("loss_step%d" % step, np.array([loss.item()], dtype=np.float32)))
        out.append(("grad_norm_step%d" % step, np.array([norm.item()], dtype=np.float32)))
    out += [("param." + n, p[n].detach().numpy().astype(np.float32)) for n, _ in init]
    write_safetensors(os.path.join(HERE, "tiny_expected.safetensors"), out)
    print("loss %.6f, norms %s" % (out[0][1][0], [o[1][0] for o in out if o[0].startswith("grad_norm")]))


if __name__ == "__main__":
    main()
