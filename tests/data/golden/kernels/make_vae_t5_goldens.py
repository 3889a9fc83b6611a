#!/usr/bin/python3
"""make_vae_t5_goldens.py - golden values for tests/test_kernels_conv.c and test_kernels_t5.c from
torch (Debian's python3-torch 1.13, CPU, float32 as PyTorch runs these layers), written as a C
header (vae_t5_golden.h beside this script). The tests need no Python; rerun this only to
regenerate:

    /usr/bin/python3 tests/data/golden/kernels/make_vae_t5_goldens.py   (Debian's python3)

What is computed, each by torch's own modules and functions (nothing of ingot's):
  - torch.nn.functional.conv2d (weights [OC, C, KH, KW]) on NCHW tensors, for three convolutions
    of the VAE's kinds: 3x3 stride 1 padding 1; the downsample (F.pad right and bottom by one,
    then 3x3 stride 2 without padding, as diffusers' Downsample2D); a 1x1 shortcut without bias.
    The forward, then autograd's gradients of sum(out * dout) (input, weight, bias). The C arrays
    are NHWC and OHWI (permuted here).
  - torch.nn.GroupNorm(G, C, eps=1e-6) with and without SiLU after it (F.silu): out, and the
    gradients of sum(out * dout) for the input, weight and bias.
  - F.interpolate(scale_factor=2, mode="nearest") and its input gradient.
  - T5 (a re-implementation of transformers' T5Attention math, written here from its definition):
    the relative position buckets of _relative_position_bucket for every distance in [-300, 300]
    in several configurations; self-attention without scaling, plus the bucketed position bias
    from a table, plus the key padding mask as (1 - mask) * finfo.min, softmax in float32; T5's
    layer norm (the variance of x in float32, x * rsqrt(var + eps), times the weight); and the
    gated FFN's gelu_new(gate) * up (transformers' NewGELUActivation formula) with its gradients.
Every input is drawn from numpy's RandomState(2024) as float32.
"""
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
rng = np.random.RandomState(2024)


def rand(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


out_lines = []


def arr(name, a, ctype="float"):
    a = np.asarray(a)
    if ctype == "float":
        vals = ", ".join("%.9ef" % float(x) for x in a.astype(np.float32).ravel())
    else:
        vals = ", ".join("%d" % int(x) for x in a.ravel())
    out_lines.append("static const %s %s[] = {%s};\n" % (ctype, name, vals))


def define(name, v):
    out_lines.append("#define %s %s\n" % (name, v))


# ---- convolutions --------------------------------------------------------------------------------

CONVS = [
    # name, N, H, W, C, OC, K, stride, (top, left, bottom, right) as ingot's, bias, pre-pad
    ("conv3", 2, 7, 6, 5, 4, 3, 1, (1, 1, 1, 1), True),
    ("down", 1, 8, 7, 6, 3, 3, 2, (0, 0, 1, 1), True),
    ("short", 2, 5, 4, 7, 5, 1, 1, (0, 0, 0, 0), False),
]
for name, N, H, W, C, OC, K, S, pad, has_bias in CONVS:
    up = name.upper()
    x = rand(N, H, W, C)
    w = rand(OC, C, K, K, lo=-0.5, hi=0.5)  # torch's layout
    b = rand(OC)
    xt = torch.tensor(x).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    wt = torch.tensor(w).requires_grad_(True)
    bt = torch.tensor(b).requires_grad_(True) if has_bias else None
    top, left, bottom, right = pad
    xp = F.pad(xt, (left, right, top, bottom))  # diffusers' Downsample2D pads like this
    y = F.conv2d(xp, wt, bt, stride=S)
    OH, OW = y.shape[2], y.shape[3]
    dout = rand(N, OH, OW, OC)
    (y * torch.tensor(dout).permute(0, 3, 1, 2)).sum().backward()
    define("G_%s_DIMS" % up, "%d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d, %d" %
           (N, H, W, C, OC, K, K, S, top, left, bottom, right))
    define("G_%s_OH" % up, OH)
    define("G_%s_OW" % up, OW)
    arr("g_%s_x" % name, x)
    arr("g_%s_w" % name, np.transpose(w, (0, 2, 3, 1)))  # OHWI
    arr("g_%s_b" % name, b if has_bias else np.zeros(OC, np.float32))
    arr("g_%s_out" % name, y.detach().permute(0, 2, 3, 1).numpy())
    arr("g_%s_dout" % name, dout)
    arr("g_%s_dx" % name, xt.grad.permute(0, 2, 3, 1).numpy())
    arr("g_%s_dw" % name, np.transpose(wt.grad.numpy(), (0, 2, 3, 1)))
    arr("g_%s_db" % name, bt.grad.numpy() if has_bias else np.zeros(OC, np.float32))

# ---- GroupNorm (+ SiLU) ----------------------------------------------------------------------------

GN_N, GN_H, GN_W, GN_C, GN_G = 2, 3, 5, 8, 4
define("G_GN_DIMS", "%d, %d, %d, %d" % (GN_N, GN_H * GN_W, GN_C, GN_G))
x = rand(GN_N, GN_H, GN_W, GN_C, lo=-2, hi=3)
x[1] += 5.0  # sample 1 off-centre: the variance of values far from 0
gw = rand(GN_C, lo=0.5, hi=1.5)
gb = rand(GN_C)
dout = rand(GN_N, GN_H, GN_W, GN_C)
arr("g_gn_x", x)
arr("g_gn_w", gw)
arr("g_gn_b", gb)
arr("g_gn_dout", dout)
for silu in (0, 1):
    gn = torch.nn.GroupNorm(GN_G, GN_C, eps=1e-6)
    with torch.no_grad():
        gn.weight.copy_(torch.tensor(gw))
        gn.bias.copy_(torch.tensor(gb))
    xt = torch.tensor(x).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
    y = gn(xt)
    if silu:
        y = F.silu(y)
    (y * torch.tensor(dout).permute(0, 3, 1, 2)).sum().backward()
    tag = "gn%d" % silu
    arr("g_%s_out" % tag, y.detach().permute(0, 2, 3, 1).numpy())
    arr("g_%s_dx" % tag, xt.grad.permute(0, 2, 3, 1).numpy())
    arr("g_%s_dw" % tag, gn.weight.grad.numpy())
    arr("g_%s_db" % tag, gn.bias.grad.numpy())
    xg = torch.tensor(x).permute(0, 3, 1, 2).reshape(GN_N, GN_G, -1)
    arr("g_%s_mean" % tag, xg.mean(-1).numpy())

# ---- nearest 2x upsampling -------------------------------------------------------------------------

UP = (2, 3, 4, 5)
define("G_UP_DIMS", "%d, %d, %d, %d" % UP)
x = rand(*UP)
xt = torch.tensor(x).permute(0, 3, 1, 2).contiguous().requires_grad_(True)
y = F.interpolate(xt, scale_factor=2.0, mode="nearest")
dout = rand(UP[0], 2 * UP[1], 2 * UP[2], UP[3])
(y * torch.tensor(dout).permute(0, 3, 1, 2)).sum().backward()
arr("g_up_x", x)
arr("g_up_out", y.detach().permute(0, 2, 3, 1).numpy())
arr("g_up_dout", dout)
arr("g_up_dx", xt.grad.permute(0, 2, 3, 1).numpy())

# ---- T5 --------------------------------------------------------------------------------------------


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    """transformers' T5Attention._relative_position_bucket, restated from its definition"""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).to(torch.long) * num_buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(max_distance / max_exact) *
                         (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rel, large)


BUCKET_CONFIGS = [(32, 128, 1), (32, 128, 0), (64, 256, 1), (16, 32, 1), (20, 100, 1), (48, 200, 0)]
define("G_BUCKET_SPAN", 300)
define("G_BUCKET_CONFIGS", len(BUCKET_CONFIGS))
arr("g_bucket_configs", np.array(BUCKET_CONFIGS).ravel(), "int")
rel = torch.arange(-300, 301)
arr("g_buckets", np.concatenate([t5_bucket(rel, bd, nb, md).numpy()
                                 for nb, md, bd in BUCKET_CONFIGS]), "int")

# attention: B sequences of T, NH heads of hs, keys masked past klen[b], bias from a table
B, T, NH, HS, NB, MD = 2, 9, 3, 4, 32, 128
klen = np.array([9, 5], np.int32)
define("G_T5_DIMS", "%d, %d, %d, %d, %d, %d" % (B, T, NH, HS, NB, MD))
arr("g_t5_klen", klen, "int")
qkv = rand(B, T, 3 * NH * HS, lo=-1.5, hi=1.5)
table = rand(NB, NH, lo=-2, hi=2)
arr("g_t5_qkv", qkv)
arr("g_t5_table", table)
C = NH * HS
q = torch.tensor(qkv[:, :, :C]).view(B, T, NH, HS).transpose(1, 2)
k = torch.tensor(qkv[:, :, C:2 * C]).view(B, T, NH, HS).transpose(1, 2)
v = torch.tensor(qkv[:, :, 2 * C:]).view(B, T, NH, HS).transpose(1, 2)
ctx = torch.arange(T)[:, None]
mem = torch.arange(T)[None, :]
bk = t5_bucket(mem - ctx, True, NB, MD)  # [T, T]
pos = torch.nn.functional.embedding(bk, torch.tensor(table))  # [T, T, NH]
pos = pos.permute(2, 0, 1).unsqueeze(0)  # [1, NH, T, T]
arr("g_t5_bias", pos[0].numpy())
mask = torch.tensor((np.arange(T)[None, :] < klen[:, None]).astype(np.float32))  # [B, T]
ext = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min
scores = torch.matmul(q, k.transpose(3, 2))  # no 1/sqrt(d)
scores += pos + ext
attn = F.softmax(scores.float(), dim=-1).type_as(scores)
o = torch.matmul(attn, v).transpose(1, 2).contiguous().view(B, T, C)
arr("g_t5_out", o.numpy())

# T5's layer norm against ingot's RMSNorm
RN, RC = 5, 16
x = rand(RN, RC, lo=-3, hi=3)
w = rand(RC, lo=0.5, hi=1.5)
xt = torch.tensor(x)
var = xt.to(torch.float32).pow(2).mean(-1, keepdim=True)
rms = torch.tensor(w) * (xt * torch.rsqrt(var + 1e-6))
define("G_RMS_DIMS", "%d, %d" % (RN, RC))
arr("g_rms_x", x)
arr("g_rms_w", w)
arr("g_rms_out", rms.numpy())

# gated-gelu: gelu_new(gate) * up and its gradients
GN_, GF = 4, 9
gate = rand(GN_, GF, lo=-4, hi=4)
upv = rand(GN_, GF, lo=-2, hi=2)
dout = rand(GN_, GF)
gt = torch.tensor(gate).requires_grad_(True)
ut = torch.tensor(upv).requires_grad_(True)
gelu_new = 0.5 * gt * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (gt + 0.044715 * torch.pow(gt, 3.0))))
y = gelu_new * ut
(y * torch.tensor(dout)).sum().backward()
define("G_GEGLU_DIMS", "%d, %d" % (GN_, GF))
arr("g_geglu_gate", gate)
arr("g_geglu_up", upv)
arr("g_geglu_dout", dout)
arr("g_geglu_out", y.detach().numpy())
arr("g_geglu_dgate", gt.grad.numpy())
arr("g_geglu_dup", ut.grad.numpy())

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "vae_t5_golden.h"), "w") as f:
    f.write("/* vae_t5_golden.h - generated by make_vae_t5_goldens.py (torch %s): do not edit. */\n"
            % torch.__version__)
    f.write("/* clang-format off */\n")
    f.writelines(out_lines)
