#!/usr/bin/python3
"""make_dit_goldens.py - golden values of a tiny random video DiT from PyTorch, for the DiT
family's tests (model.arch: dit; read as tests/test_train.c reads tests/data/golden/gpt/): the
class-conditional model here (tests/data/golden/dit/), with --caption its caption-conditioned
variant (tests/data/golden/dit_caption/, described after the class model), and with --features
the caption variant on caption features (tests/data/golden/dit_features/, described last).

Writes, next to this script, for a model of hidden size D 32, 4 heads (head size 8), depth 2,
patch [pt, ph, pw] = [2, 2, 2], 3 channels, 5 classes (+ the null class), and two micro-batches of
two shapes, "a" (B 2, F 4, H 8, W 8: 2 x 4 x 4 = 32 tokens a clip) and "b" (B 3, F 2, H 4, W 12:
1 x 2 x 6 = 12 tokens a clip):
  init.safetensors        the initial parameters (DiT's state_dict names; nn.Linear weights
                          [out, in]):
                            x_embedder.proj.weight [D, 3, pt, ph, pw], x_embedder.proj.bias [D]
                            t_embedder.mlp.0.weight [D, 256], t_embedder.mlp.0.bias [D]
                            t_embedder.mlp.2.weight [D, D], t_embedder.mlp.2.bias [D]
                            y_embedder.embedding_table.weight [num_classes + 1, D]
                            blocks.{i}.attn.qkv.weight [3D, D], blocks.{i}.attn.qkv.bias [3D]
                            blocks.{i}.attn.proj.weight [D, D], blocks.{i}.attn.proj.bias [D]
                            blocks.{i}.mlp.fc1.weight [4D, D], blocks.{i}.mlp.fc1.bias [4D]
                            blocks.{i}.mlp.fc2.weight [D, 4D], blocks.{i}.mlp.fc2.bias [D]
                            blocks.{i}.adaLN_modulation.1.weight [6D, D], .bias [6D]
                            final_layer.adaLN_modulation.1.weight [2D, D], .bias [2D]
                            final_layer.linear.weight [pt ph pw 3, D], .bias [pt ph pw 3]
  config.json             ingot's DiT config (model_type "ingot-dit")
  K_clips.bin             micro-batch K's clips: uint8 [B, F, H, W, 3] (channels last), raw
  K_expected.safetensors
      noise                F32 [B, F, H, W, 3]  the rectified-flow noise eps
      t                    F32 [B]  the flow times, in (0, 1)
      labels               I32 [B]  class labels; 5 (num_classes) is the null class
      loss                 F32 [1]  the loss of the initial model on the micro-batch
      grad.NAME            F32, for every parameter: the gradient of that loss (this micro-batch
                           alone, from the initial weights)
Everything is computed in float64 (the truth the fp32 kernels are measured against) from the
float32 values stored (weights, noise, t), and stored as float32.

The model is Peebles & Xie's DiT (facebookresearch/DiT models.py) with a 3-D patch embedding
(OpenDiT's video DiT), trained by rectified flow (SD3, Open-Sora 2.0):
  x0 = clip / 127.5 - 1;  x_t = (1 - t) x0 + t eps;  target = eps - x0;
  v = model(x_t, 1000 t, label);  loss = mean over all B F H W 3 elements of (v - target)^2.
  Patch embedding: Conv3d(3, D, kernel = stride = [pt, ph, pw], bias) over x_t as [B, 3, F, H, W];
    tokens in (t, h, w) order, Tp = (F/pt)(H/ph)(W/pw) tokens of D each.
  Positions (fixed, added to the tokens, computed per shape): with
    sincos(n, p) = [sin(p w_0) .. sin(p w_{n/2-1}) | cos(p w_0) .. cos(p w_{n/2-1})],
    w_k = 10000^(-k / (n/2)) (DiT's get_1d_sincos_pos_embed_from_grid of embed_dim n),
    the token at (ti, hi, wi) gets [sincos(D/2, wi) | sincos(D/2, hi)] (DiT's 2-D table: the first
    half from the w index) + sincos(D, ti) (the 1-D table over the frame-token index).
  Conditioning: t_freq = [cos(1000 t f_k) | sin(1000 t f_k)], f_k = exp(-ln(10000) k / 128),
    k < 128; t_emb = Linear(D, D)(SiLU(Linear(256, D)(t_freq))); c = t_emb + embedding_table[label].
  Blocks (adaLN-Zero): shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp =
    chunk(Linear(D, 6D)(SiLU(c)), 6);  x += gate_msa Attn(LN(x)(1 + scale_msa) + shift_msa);
    x += gate_mlp MLP(LN(x)(1 + scale_mlp) + shift_mlp), each per sample, broadcast over its
    tokens; LN has no affine, eps 1e-6. Attn: qkv = Linear(D, 3D) cut q | k | v, each [D] cut
    into heads of 8; softmax(q k^T / sqrt(8)) v over all the clip's tokens (no mask); proj
    Linear(D, D). MLP: fc2(gelu_tanh(fc1(x))), fc1 Linear(D, 4D), fc2 Linear(4D, D).
  Final layer: shift, scale = chunk(Linear(D, 2D)(SiLU(c)), 2); Linear(D, pt ph pw 3)(LN(x)(1 +
    scale) + shift); each token's vector in (pt, ph, pw, c) order, unpatchified to [B, F, H, W, 3]
    (pixel (ti pt + i, hi ph + j, wi pw + k, c) = element ((i ph + j) pw + k) 3 + c of token
    (ti, hi, wi)).
Initial values: every weight and bias normal(0, 0.02), NOT DiT's zero initialisation of the adaLN
and final layers (under it half the gradients would be zero), from a torch.Generator with seed
20261126, drawn in the order of the names above; then, from the same generator, per micro-batch
(a, then b): the clips (randint 0..255), the noise (normal), t = sigmoid(normal) (logit-normal)
and the labels (randint 0..4, then the last sample's label set to 5, the null class, so that the
table's last row has a gradient). No label dropout: the labels are used as stored.

The gradients are small where the gates scale them (largest elements: the blocks' 4e-6..3e-4,
the final layer's up to 7e-2): compare them per tensor relative to the tensor's norm, as
tests/test_train.c does. The time embedding's arguments reach 1000 radians: computed in float32
they alone move t_embedder.mlp.2.weight's gradient by 6e-6 relative.

Verification (--check, run when the files were made): a second implementation in numpy with
explicit loops (each token's patch gathered and unpatchified element by element, every position
and timestep frequency from math.sin / math.cos / math.exp, LayerNorm, softmax per head and
query, SiLU and GELU from their formulas) gives the same loss to 1e-12 (it gave 2e-16 and 0),
and its central finite differences (h 1e-6, float64) agree with the gradients, within 1e-9 + 1e-6
|grad|, for the largest element and two random elements of every tensor in both micro-batches
(186 in all; largest difference 2.8e-10); the files are read back with a reader of the format
and compared with what was computed.

The caption variant (--caption; PixArt-alpha's / Open-Sora's cross-attention DiT) writes the same
files to ../dit_caption/ for the same model and micro-batch shapes but for these differences:
  config.json             adds "cond": "caption", "vocab_size": 50, "caption_len": 6,
                          "caption_dropout_prob": 0.1 and has "num_classes": 0.
  init.safetensors        y_embedder.embedding_table.weight is the token table [vocab_size + 1, D]
                          (row 50 the null token), and each block adds
                            blocks.{i}.cross_attn.q_linear.weight [D, D], .bias [D]
                            blocks.{i}.cross_attn.kv_linear.weight [2D, D], .bias [2D]
                            blocks.{i}.cross_attn.proj.weight [D, D], .bias [D]
                          (PixArt-alpha's cross-attention names) in this order: the embedders
                          as above, then per block adaLN_modulation.1, attn.qkv, attn.proj,
                          cross_attn.q_linear, cross_attn.kv_linear, cross_attn.proj, mlp.fc1,
                          mlp.fc2 (each weight then bias), then the final layer's four.
  K_expected.safetensors  caption_tokens I32 [B, 6] and caption_lens I32 [B] in place of labels
                          (noise, t, caption_tokens, caption_lens, loss, grad.NAME).
  Captions: caption_len = 6 token slots of which the first L (1 <= L <= 6) are valid; the slots
    from L on are padding, any id < 50 (here they keep their random draws): they are embedded but
    masked out as keys, so they change nothing. A dropped caption (for guidance) is [50] with L 1.
    y[j] = embedding_table[tok[j]] + sincos(D, j), j < 6 (the 1-D table of the positions).
  Conditioning: c = t_emb alone (no label).
  Blocks: after x += gate_msa Attn(...) and before the MLP branch, x += CrossAttn(x, y), with no
    norm and no gate (PixArt's x = x + self.cross_attn(x, y, mask)): q = Linear(D, D)(x) (q_linear)
    cut into heads of 8; k | v = Linear(D, 2D)(y) (kv_linear: the k rows, then the v rows, heads
    contiguous within each, as in qkv); per head softmax(q k^T / sqrt(8)) over the sample's first
    L keys only, times v; heads concatenated; proj Linear(D, D).
  Initial values: normal(0, 0.02) as above from a generator of seed 20261127, in the order above;
    per micro-batch (a, then b) the clips, noise and t as above, then the caption tokens
    (randint 0..49, [B, 6]); the lengths are fixed: a [2, 5], b [6, 3, 1] with b's last sample the
    null caption (its first token set to 50).
  Every generation also recomputes each micro-batch with the padding ids zeroed and redrawn (the
  same loss and every gradient, bit for bit) and with every slot a key (another loss: the mask
  matters). --check runs the loop implementation with cross-attention over the first L keys only
  (the padding slots never read; every caption position from math.sin / math.cos), checks that
  treating all 6 slots as keys moves its loss, takes the finite differences of every tensor as
  above (258 in all; largest difference 2.3e-10), and again with h 1e-4 for the largest element
  of each tensor whose gradient is below 1e-5 everywhere (the cross-attention's q_linear: its
  softmax is nearly uniform at these weights, |grad| <= 6e-7), within 1e-4 relative (20; at most
  3.6e-6); the files, config.json included, are read back and compared.

The features variant (--features; PixArt-alpha's conditioning on a frozen T5's features) writes
the same files to ../dit_features/ for the caption variant's model but for these differences:
  config.json             the caption variant's without "vocab_size", with "caption_channels": 12
                          (the features' width DT; unlike D, so that a transpose would show).
  init.safetensors        PixArt's caption embedder in the token table's place:
                            y_embedder.y_proj.fc1.weight [D, DT], .bias [D]
                            y_embedder.y_proj.fc2.weight [D, D], .bias [D]
                            y_embedder.y_embedding [CAP_LEN, DT]  (the null caption)
  K_expected.safetensors  caption_features F32 [B, 6, DT] and caption_lens I32 [B] in place of
                          the tokens (noise, t, caption_features, caption_lens, loss, grad.NAME).
  Captions: the first L rows of a clip's features are its caption, the rows from L on padding
    (they keep their random draws: projected, but masked out as keys); L 0 is the null caption:
    every row is replaced by y_embedding (PixArt's token_drop, torch.where) and all 6 are keys.
    y = fc2(gelu_tanh(fc1(rows))) (timm's Mlp as PixArt's y_proj), no positions. Lengths: a
    [0, 5], b [6, 2, 0]: a null caption in each micro-batch, so that y_embedding has a gradient.
  Initial values: from a generator of seed 20261128, in the order above; the five caption
    embedder tensors normal(0, 0.3) (with 0.02 the caption's keys would be so alike that neither
    the mask nor the null caption would move the loss), the rest normal(0, 0.02); per
    micro-batch the clips, noise and t as above, then the features (normal, [B, 6, DT]).
  Each generation recomputes each micro-batch with the padding rows (and the null caption's
  rows) zeroed and redrawn: the same loss and gradients bit for bit; every row a key: another
  loss. --check runs the loop implementation (the caption embedder row by row; the null caption's
  6 rows from y_embedding) as above: the same loss to 2.2e-16, every row a key moves it (1.4e-4
  and 4.0e-5), 282 finite differences within 1e-9 + 1e-6 |grad| (largest difference 3.5e-10),
  and 21 more with h 1e-4 (12 tensors; at most 4.3e-7 relative).

Run with Debian's python3 and python3-torch (torch 1.13):
The latents variant (--latents; the DiT on a VAE's latents, as PixArt, Open-Sora and OpenDiT
train it) writes the class model's files to ../dit_latents/ but for these differences:
  config.json             "in_channels": 4 (the VAE's latent channels) and "vae": the VAE the
                          latents came from (a made-up identity; scaling_factor 0.18215,
                          shift_factor 0.1, downsample 8).
  init.safetensors        x_embedder.proj.weight [D, 4, pt, ph, pw], final_layer.linear [pt ph pw
                          4, D] and its bias.
  K_expected.safetensors  moments F32 [B, F, H, W, 8] (a latent shard's values: the 4 means, then
                          the 4 log-variances) before noise, t, labels, loss and grad.NAME; noise
                          is [B, F, H, W, 4]; there is no K_clips.bin.
  x0 = scaling_factor (mean - shift_factor), the posterior's mean (z = mean: what validation,
    ingot eval and a noise file use; training draws z = mean + exp(logvar / 2) eps' instead, the
    logvar halves only there), then as above.
  Initial values: from a generator of seed 20261129, normal(0, 0.02) in the class model's order;
    per micro-batch the means (normal(0, 5): a latent's scale before the scaling factor), the
    log-variances (normal(-4, 1)), noise, t and labels as above.
  --check runs the loop implementation on the same x0 (186 finite differences as above).

Run with Debian's python3 and python3-torch (torch 1.13):
  /usr/bin/python3 make_dit_goldens.py [--caption | --features | --latents] [--check]
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

D, NH, DEPTH, PATCH, IN_CH, NUM_CLASSES = 32, 4, 2, (2, 2, 2), 3, 5
FREQ, NORM_EPS, MLP_RATIO = 256, 1e-6, 4
SEED = 20261126
CASES = [("a", dict(B=2, F=4, H=8, W=8)), ("b", dict(B=3, F=2, H=4, W=12))]
HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = {"model_type": "ingot-dit", "architectures": ["DiT"], "hidden_size": D, "depth": DEPTH,
          "num_heads": NH, "mlp_ratio": float(MLP_RATIO), "patch_size": list(PATCH),
          "in_channels": IN_CH, "num_classes": NUM_CLASSES, "class_dropout_prob": 0.1,
          "learn_sigma": False, "norm_eps": NORM_EPS, "torch_dtype": "float32"}

# the caption variant (--caption): the same model and micro-batch shapes, conditioned on captions
VOCAB, CAP_LEN = 50, 6  # token ids 0..49, VOCAB (50) the null token; 6 token slots a caption
CAPTION_SEED = 20261127
CAPTION_DIR = os.path.join(os.path.dirname(HERE), "dit_caption")
# per micro-batch: the caption lengths L, and the sample given the null caption (or None)
CAPTIONS = {"a": ([2, 5], None), "b": ([6, 3, 1], 2)}
# the features variant (--features): the caption model attending to a frozen text encoder's
# features [CAP_LEN, DT] through PixArt-alpha's caption embedder instead of a token table
DT = 12  # the features' width (PixArt's caption_channels), unlike D so that a transpose shows
FEATURE_SEED = 20261128
FEATURE_DIR = os.path.join(os.path.dirname(HERE), "dit_features")
FEATURES = {"a": [0, 5], "b": [6, 2, 0]}  # per micro-batch the lengths L (0: the null caption)
CAPTION_CONFIG = {"model_type": "ingot-dit", "architectures": ["DiT"], "hidden_size": D,
                  "depth": DEPTH, "num_heads": NH, "mlp_ratio": float(MLP_RATIO),
                  "patch_size": list(PATCH), "in_channels": IN_CH, "cond": "caption",
                  "vocab_size": VOCAB, "caption_len": CAP_LEN, "caption_dropout_prob": 0.1,
                  "num_classes": 0, "class_dropout_prob": 0.1, "learn_sigma": False,
                  "norm_eps": NORM_EPS, "torch_dtype": "float32"}
FEATURE_CONFIG = dict(CAPTION_CONFIG, caption_channels=DT)
del FEATURE_CONFIG["vocab_size"]
# the latents variant (--latents): the class model on a VAE's latents of LATENT_CH channels
LATENT_CH, SCALING, SHIFT = 4, 0.18215, 0.1
LATENT_SEED = 20261129
LATENT_DIR = os.path.join(os.path.dirname(HERE), "dit_latents")
LATENT_CONFIG = dict(CONFIG, in_channels=LATENT_CH,
                     vae={"describe": "a made-up VAE (tests/data/golden/dit/make_dit_goldens.py)",
                          "weights_xxh3": "0123456789abcdef", "latent_channels": LATENT_CH,
                          "downsample": 8, "scaling_factor": SCALING, "shift_factor": SHIFT})


def names(caption=False, features=False):
    """(name, shape) in DiT's state_dict order (the caption variant: adaLN_modulation first in
    each block, then attn, cross_attn, mlp; the features variant is the caption one with PixArt's
    caption embedder in the token table's place)."""
    pt, ph, pw = PATCH
    out_dim = pt * ph * pw * IN_CH
    out = [("x_embedder.proj.weight", (D, IN_CH, pt, ph, pw)), ("x_embedder.proj.bias", (D,)),
           ("t_embedder.mlp.0.weight", (D, FREQ)), ("t_embedder.mlp.0.bias", (D,)),
           ("t_embedder.mlp.2.weight", (D, D)), ("t_embedder.mlp.2.bias", (D,))]
    if features:
        out += [("y_embedder.y_proj.fc1.weight", (D, DT)), ("y_embedder.y_proj.fc1.bias", (D,)),
                ("y_embedder.y_proj.fc2.weight", (D, D)), ("y_embedder.y_proj.fc2.bias", (D,)),
                ("y_embedder.y_embedding", (CAP_LEN, DT))]
    else:
        out += [("y_embedder.embedding_table.weight", ((VOCAB if caption else NUM_CLASSES) + 1, D))]
    for i in range(DEPTH):
        p = "blocks.%d." % i
        if caption:
            out += [(p + "adaLN_modulation.1.weight", (6 * D, D)),
                    (p + "adaLN_modulation.1.bias", (6 * D,)),
                    (p + "attn.qkv.weight", (3 * D, D)), (p + "attn.qkv.bias", (3 * D,)),
                    (p + "attn.proj.weight", (D, D)), (p + "attn.proj.bias", (D,)),
                    (p + "cross_attn.q_linear.weight", (D, D)),
                    (p + "cross_attn.q_linear.bias", (D,)),
                    (p + "cross_attn.kv_linear.weight", (2 * D, D)),
                    (p + "cross_attn.kv_linear.bias", (2 * D,)),
                    (p + "cross_attn.proj.weight", (D, D)), (p + "cross_attn.proj.bias", (D,)),
                    (p + "mlp.fc1.weight", (MLP_RATIO * D, D)),
                    (p + "mlp.fc1.bias", (MLP_RATIO * D,)),
                    (p + "mlp.fc2.weight", (D, MLP_RATIO * D)), (p + "mlp.fc2.bias", (D,))]
            continue
        out += [(p + "attn.qkv.weight", (3 * D, D)), (p + "attn.qkv.bias", (3 * D,)),
                (p + "attn.proj.weight", (D, D)), (p + "attn.proj.bias", (D,)),
                (p + "mlp.fc1.weight", (MLP_RATIO * D, D)), (p + "mlp.fc1.bias", (MLP_RATIO * D,)),
                (p + "mlp.fc2.weight", (D, MLP_RATIO * D)), (p + "mlp.fc2.bias", (D,)),
                (p + "adaLN_modulation.1.weight", (6 * D, D)),
                (p + "adaLN_modulation.1.bias", (6 * D,))]
    out += [("final_layer.adaLN_modulation.1.weight", (2 * D, D)),
            ("final_layer.adaLN_modulation.1.bias", (2 * D,)),
            ("final_layer.linear.weight", (out_dim, D)), ("final_layer.linear.bias", (out_dim,))]
    return out


DTYPES = {np.dtype("float32"): ("F32", "<f4"), np.dtype("int32"): ("I32", "<i4")}


def write_safetensors(path, tensors):
    """tensors: list of (name, float32 or int32 numpy array); the format's spec, stdlib only."""
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in tensors:
        code, le = DTYPES[a.dtype]
        b = np.ascontiguousarray(a, dtype=le).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------------------------------------
# the model in float64 torch operations


def sincos(n, pos):
    """[len(pos), n]: [sin(p w_k) | cos(p w_k)], w_k = 10000^(-k / (n/2)), k < n/2."""
    omega = 1.0 / 10000.0 ** (torch.arange(n // 2, dtype=torch.float64) / (n / 2.0))
    ang = torch.outer(pos.to(torch.float64), omega)
    return torch.cat([ang.sin(), ang.cos()], dim=1)


def pos_table(ft, fh, fw):
    """[ft fh fw, D], tokens in (t, h, w) order: DiT's 2-D table over (h, w) + a 1-D one over t."""
    hh, ww = torch.meshgrid(torch.arange(fh), torch.arange(fw), indexing="ij")
    spatial = torch.cat([sincos(D // 2, ww.reshape(-1)), sincos(D // 2, hh.reshape(-1))], dim=1)
    temporal = sincos(D, torch.arange(ft))
    return (temporal[:, None, :] + spatial[None, :, :]).reshape(ft * fh * fw, D)


def timestep_embedding(tm):
    half = FREQ // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64) / half)
    args = tm[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def modulate(x, shift, scale):
    return x * (1 + scale[:, None, :]) + shift[:, None, :]


def layer_norm(x):
    return F.layer_norm(x, (D,), None, None, NORM_EPS)


def caption_keys(p, tokens, lens):
    """tokens [B, CAP_LEN], lens [B] -> the captions' embeddings y [B, CAP_LEN, D] (every slot)
    and the keys' mask [B, CAP_LEN] (True for the first L slots). Or, for features [B, CAP_LEN,
    DT] (floating point) in place of tokens, PixArt-alpha's CaptionEmbedder: the null caption
    y_embedding where L is 0 (token_drop's torch.where; every slot then a key), then y_proj =
    timm's Mlp(DT, D, D, GELU(approximate="tanh")): fc2(gelu(fc1(f))), no positions."""
    if tokens.is_floating_point():
        null = lens == 0
        f = torch.where(null[:, None, None], p["y_embedder.y_embedding"][None], tokens)
        h = F.gelu(F.linear(f, p["y_embedder.y_proj.fc1.weight"], p["y_embedder.y_proj.fc1.bias"]),
                   approximate="tanh")
        y = F.linear(h, p["y_embedder.y_proj.fc2.weight"], p["y_embedder.y_proj.fc2.bias"])
        return y, torch.arange(CAP_LEN)[None, :] < torch.where(null, torch.full_like(lens, CAP_LEN), lens)[:, None]
    y = p["y_embedder.embedding_table.weight"][tokens] + sincos(D, torch.arange(CAP_LEN))
    return y, torch.arange(CAP_LEN)[None, :] < lens[:, None]


def cross_attn(p, q, x, y, keep):
    """PixArt-alpha's MultiHeadCrossAttention: x [B, T, D] attends to y [B, CAP_LEN, D] where
    keep [B, CAP_LEN]; no norm, no gate (the block adds it as it is)."""
    B, T, _ = x.shape
    hs = D // NH
    qh = F.linear(x, p[q + "q_linear.weight"], p[q + "q_linear.bias"])
    qh = qh.reshape(B, T, NH, hs).transpose(1, 2)  # [B, NH, T, hs]
    kv = F.linear(y, p[q + "kv_linear.weight"], p[q + "kv_linear.bias"])
    kv = kv.reshape(B, CAP_LEN, 2, NH, hs).permute(2, 0, 3, 1, 4)  # [2, B, NH, CAP_LEN, hs]
    att = (qh @ kv[0].transpose(-2, -1)) / math.sqrt(hs)  # [B, NH, T, CAP_LEN]
    att = att.masked_fill(~keep[:, None, None, :], float("-inf"))
    o = (att.softmax(-1) @ kv[1]).transpose(1, 2).reshape(B, T, D)
    return F.linear(o, p[q + "proj.weight"], p[q + "proj.bias"])


def model(p, xt, tm, labels=None, caption=None):
    """xt [B, F, H, W, 3], tm [B] (model time, 1000 t), labels [B] or caption (tokens [B, CAP_LEN],
    lens [B]) -> v [B, F, H, W, 3]."""
    B, Fr, H, W, _ = xt.shape
    pt, ph, pw = PATCH
    ft, fh, fw = Fr // pt, H // ph, W // pw
    hs = D // NH
    x = F.conv3d(xt.permute(0, 4, 1, 2, 3), p["x_embedder.proj.weight"],
                 p["x_embedder.proj.bias"], stride=PATCH)  # [B, D, ft, fh, fw]
    x = x.flatten(2).transpose(1, 2) + pos_table(ft, fh, fw)  # [B, Tp, D]
    T = x.shape[1]
    te = F.linear(timestep_embedding(tm), p["t_embedder.mlp.0.weight"], p["t_embedder.mlp.0.bias"])
    te = F.linear(F.silu(te), p["t_embedder.mlp.2.weight"], p["t_embedder.mlp.2.bias"])
    if caption is None:
        c = te + p["y_embedder.embedding_table.weight"][labels]
    else:
        c = te
        y_cap, keep = caption_keys(p, *caption)
    for i in range(DEPTH):
        q = "blocks.%d." % i
        mod = F.linear(F.silu(c), p[q + "adaLN_modulation.1.weight"],
                       p[q + "adaLN_modulation.1.bias"])
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod.chunk(6, dim=1)
        a = modulate(layer_norm(x), shift_msa, scale_msa)
        qkv = F.linear(a, p[q + "attn.qkv.weight"], p[q + "attn.qkv.bias"])
        qkv = qkv.reshape(B, T, 3, NH, hs).permute(2, 0, 3, 1, 4)  # [3, B, NH, T, hs]
        att = (qkv[0] @ qkv[1].transpose(-2, -1)) / math.sqrt(hs)
        o = (att.softmax(-1) @ qkv[2]).transpose(1, 2).reshape(B, T, D)
        o = F.linear(o, p[q + "attn.proj.weight"], p[q + "attn.proj.bias"])
        x = x + gate_msa[:, None, :] * o
        if caption is not None:
            x = x + cross_attn(p, q + "cross_attn.", x, y_cap, keep)
        a = modulate(layer_norm(x), shift_mlp, scale_mlp)
        m = F.gelu(F.linear(a, p[q + "mlp.fc1.weight"], p[q + "mlp.fc1.bias"]), approximate="tanh")
        m = F.linear(m, p[q + "mlp.fc2.weight"], p[q + "mlp.fc2.bias"])
        x = x + gate_mlp[:, None, :] * m
    mod = F.linear(F.silu(c), p["final_layer.adaLN_modulation.1.weight"],
                   p["final_layer.adaLN_modulation.1.bias"])
    shift, scale = mod.chunk(2, dim=1)
    y = F.linear(modulate(layer_norm(x), shift, scale), p["final_layer.linear.weight"],
                 p["final_layer.linear.bias"])  # [B, Tp, pt ph pw 3]
    y = y.reshape(B, ft, fh, fw, pt, ph, pw, IN_CH).permute(0, 1, 4, 2, 5, 3, 6, 7)
    return y.reshape(B, Fr, H, W, IN_CH)


def x0_of(clips):
    """the clean sample: RGB24 clips to [-1, 1], or a latent shard's moments (float, the means
    then the log-variances) to scaling (mean - shift)"""
    if clips.dtype in (torch.uint8, np.uint8):
        return clips.astype(np.float64) / 127.5 - 1.0 if isinstance(clips, np.ndarray) else \
            clips.to(torch.float64) / 127.5 - 1.0
    mean = clips[..., :IN_CH]
    if isinstance(clips, np.ndarray):
        return SCALING * (mean.astype(np.float64) - SHIFT)
    return SCALING * (mean.to(torch.float64) - SHIFT)


def flow_loss(p, clips, noise, t, labels=None, caption=None):
    x0 = x0_of(clips)
    tb = t[:, None, None, None, None]
    xt = (1.0 - tb) * x0 + tb * noise
    v = model(p, xt, 1000.0 * t, labels, caption)
    return ((v - (noise - x0)) ** 2).mean()


def loss_and_grads(init, clips, noise, t, cond):
    """The loss (float) and every gradient (name -> float64 numpy) in float64 from the stored
    float32 values; cond: labels (int32 [B]) or a caption (tokens int32 [B, CAP_LEN], lens [B])."""
    p = {n: torch.tensor(a.astype(np.float64), requires_grad=True) for n, a in init}
    args = (torch.tensor(clips), torch.tensor(noise.astype(np.float64)),
            torch.tensor(t.astype(np.float64)))
    if isinstance(cond, tuple):
        kinds = [np.float64 if a.dtype == np.float32 else np.int64 for a in cond]
        loss = flow_loss(p, *args, caption=tuple(torch.tensor(a.astype(k))
                                                 for a, k in zip(cond, kinds)))
    else:
        loss = flow_loss(p, *args, labels=torch.tensor(cond.astype(np.int64)))
    loss.backward()
    return loss.item(), {n: p[n].grad.numpy().copy() for n, _ in init}


# ---------------------------------------------------------------------------------------------
# the check: a second implementation with explicit loops (numpy, float64), its finite
# differences, and the files read back


def loop_loss(p, clips, noise, t, labels=None, caption=None):
    B, Fr, H, W, C = noise.shape
    pt, ph, pw = PATCH
    ft, fh, fw = Fr // pt, H // ph, W // pw
    T, hs, P = ft * fh * fw, D // NH, pt * ph * pw * C
    x0 = x0_of(clips)
    xt = np.empty_like(x0)
    for b in range(B):
        xt[b] = (1.0 - t[b]) * x0[b] + t[b] * noise[b]

    def ln(v):
        mu = sum(v) / len(v)
        var = sum((e - mu) ** 2 for e in v) / len(v)
        return (v - mu) / math.sqrt(var + NORM_EPS)

    def silu(v):
        return v / (1.0 + np.exp(-v))

    def gelu(v):
        return 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))

    def lin(name, v):
        return p[name + ".weight"] @ v + p[name + ".bias"]

    wconv = p["x_embedder.proj.weight"].reshape(D, C * pt * ph * pw)  # (c, i, j, k) order
    total = 0.0
    for b in range(B):
        x = np.zeros((T, D))
        for ti in range(ft):
            for hi in range(fh):
                for wi in range(fw):
                    tok = (ti * fh + hi) * fw + wi
                    patch = []
                    for c in range(C):
                        for i in range(pt):
                            for j in range(ph):
                                for k in range(pw):
                                    patch.append(xt[b, ti * pt + i, hi * ph + j, wi * pw + k, c])
                    x[tok] = wconv @ np.array(patch) + p["x_embedder.proj.bias"]
                    for ch in range(D):
                        q4, half = D // 4, D // 2
                        if ch < half:  # the w index, [sin | cos] over D/4 frequencies
                            kk, pos = ch % q4, wi
                            f = math.sin if ch < q4 else math.cos
                        else:  # the h index
                            kk, pos = (ch - half) % q4, hi
                            f = math.sin if ch - half < q4 else math.cos
                        x[tok, ch] += f(pos * 10000.0 ** (-kk / q4))
                        kk = ch % half  # the frame-token index over all D channels
                        f = math.sin if ch < half else math.cos
                        x[tok, ch] += f(ti * 10000.0 ** (-kk / half))
        tm = 1000.0 * float(t[b])
        tf = np.zeros(FREQ)
        for k in range(FREQ // 2):
            a = tm * math.exp(-math.log(10000.0) * k / (FREQ // 2))
            tf[k], tf[FREQ // 2 + k] = math.cos(a), math.sin(a)
        cvec = lin("t_embedder.mlp.2", silu(lin("t_embedder.mlp.0", tf)))
        if caption is None:
            cvec = cvec + p["y_embedder.embedding_table.weight"][int(labels[b])]
        elif caption[0].dtype == np.float32:  # features: L rows (the null caption: all) by y_proj
            L = int(caption[1][b]) or CAP_LEN
            rows = p["y_embedder.y_embedding"] if int(caption[1][b]) == 0 else caption[0][b]
            ycap = np.array([lin("y_embedder.y_proj.fc2", gelu(lin("y_embedder.y_proj.fc1",
                                                                   rows[j].astype(np.float64))))
                             for j in range(L)])
        else:  # the caption's first L token embeddings + their 1-D positions; no more keys
            L = int(caption[1][b])
            ycap = np.zeros((L, D))
            for j in range(L):
                ycap[j] = p["y_embedder.embedding_table.weight"][int(caption[0][b, j])]
                for ch in range(D):
                    kk, half = ch % (D // 2), D // 2
                    f = math.sin if ch < half else math.cos
                    ycap[j, ch] += f(j * 10000.0 ** (-kk / half))
        for l in range(DEPTH):
            q = "blocks.%d." % l
            mod = lin(q + "adaLN_modulation.1", silu(cvec))
            sh1, sc1, g1 = mod[0:D], mod[D:2 * D], mod[2 * D:3 * D]
            sh2, sc2, g2 = mod[3 * D:4 * D], mod[4 * D:5 * D], mod[5 * D:6 * D]
            qkv = np.array([lin(q + "attn.qkv", ln(x[n]) * (1 + sc1) + sh1) for n in range(T)])
            o = np.zeros((T, D))
            for h in range(NH):
                qh = qkv[:, h * hs:(h + 1) * hs]
                kh = qkv[:, D + h * hs:D + (h + 1) * hs]
                vh = qkv[:, 2 * D + h * hs:2 * D + (h + 1) * hs]
                for n in range(T):
                    s = np.array([float(qh[n] @ kh[m]) for m in range(T)]) / math.sqrt(hs)
                    e = np.exp(s - s.max())
                    wts = e / e.sum()
                    for m in range(T):
                        o[n, h * hs:(h + 1) * hs] += wts[m] * vh[m]
            for n in range(T):
                x[n] = x[n] + g1 * lin(q + "attn.proj", o[n])
            if caption is not None:  # cross-attention over the L keys, added as it is
                qc = np.array([lin(q + "cross_attn.q_linear", x[n]) for n in range(T)])
                kv = np.array([lin(q + "cross_attn.kv_linear", ycap[m]) for m in range(L)])
                o = np.zeros((T, D))
                for h in range(NH):
                    for n in range(T):
                        s = np.array([float(qc[n, h * hs:(h + 1) * hs] @ kv[m, h * hs:(h + 1) * hs])
                                      for m in range(L)]) / math.sqrt(hs)
                        e = np.exp(s - s.max())
                        wts = e / e.sum()
                        for m in range(L):
                            o[n, h * hs:(h + 1) * hs] += wts[m] * kv[m, D + h * hs:D + (h + 1) * hs]
                for n in range(T):
                    x[n] = x[n] + lin(q + "cross_attn.proj", o[n])
            for n in range(T):
                a = ln(x[n]) * (1 + sc2) + sh2
                x[n] = x[n] + g2 * lin(q + "mlp.fc2", gelu(lin(q + "mlp.fc1", a)))
        mod = lin("final_layer.adaLN_modulation.1", silu(cvec))
        sh, sc = mod[:D], mod[D:]
        v = np.zeros((Fr, H, W, C))
        for ti in range(ft):
            for hi in range(fh):
                for wi in range(fw):
                    tok = (ti * fh + hi) * fw + wi
                    y = lin("final_layer.linear", ln(x[tok]) * (1 + sc) + sh)
                    assert len(y) == P
                    for i in range(pt):
                        for j in range(ph):
                            for k in range(pw):
                                for c in range(C):
                                    v[ti * pt + i, hi * ph + j, wi * pw + k, c] = \
                                        y[((i * ph + j) * pw + k) * C + c]
        target = noise[b] - x0[b]
        total += float(((v - target) ** 2).sum())
    return total / noise.size


def read_safetensors(path):
    """name -> numpy array, and the metadata; parsed from the format's spec."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n].decode())
    meta = header.pop("__metadata__", None)
    out, kinds = {}, {"F32": "<f4", "I32": "<i4"}
    for name, e in header.items():
        b, end = e["data_offsets"]
        a = np.frombuffer(data[8 + n + b:8 + n + end], dtype=kinds[e["dtype"]])
        out[name] = a.reshape(e["shape"])
    return out, meta


def check(init, cases, out, caption=False, features=False, latents=False):
    """cases: list of (name, s, clips, noise, t, cond, loss64, grads64 by name), cond the labels or
    (caption tokens, caption lengths); out: the files' folder."""
    rs = np.random.RandomState(7)
    p = {n: a.astype(np.float64) for n, a in init}
    back, meta = read_safetensors(os.path.join(out, "init.safetensors"))
    assert meta == {"format": "pt"} and list(back) == [n for n, _ in init]
    assert all(np.array_equal(back[n], a) for n, a in init)
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f) == (FEATURE_CONFIG if features else CAPTION_CONFIG if caption else
                                LATENT_CONFIG if latents else CONFIG)
    worst, worst_abs, count = 0.0, 0.0, 0
    small, worst_small = [], 0.0
    for k, s, clips, noise, t, cond, loss64, grads in cases:
        exp, _ = read_safetensors(os.path.join(out, k + "_expected.safetensors"))
        if latents:
            assert np.array_equal(exp.pop("moments"), clips)
        else:
            with open(os.path.join(out, k + "_clips.bin"), "rb") as f:
                raw = np.frombuffer(f.read(), dtype=np.uint8)
            assert np.array_equal(raw.reshape(clips.shape), clips)
        assert np.array_equal(exp["noise"], noise) and np.array_equal(exp["t"], t)
        cnames = (["caption_features", "caption_lens"] if features else
                  ["caption_tokens", "caption_lens"] if caption else ["labels"])
        assert list(exp) == ["noise", "t"] + cnames + ["loss"] + ["grad." + n for n, _ in init]
        for n, a in zip(cnames, cond if caption else (cond,)):
            assert np.array_equal(exp[n], a) and exp[n].dtype == a.dtype
        assert exp["loss"][0] == np.float32(loss64)
        for n, _ in init:
            assert np.array_equal(exp["grad." + n], grads[n].astype(np.float32))
        args = (clips, noise.astype(np.float64), t.astype(np.float64))
        kw = dict(caption=cond) if caption else dict(labels=cond)
        l2 = loop_loss(p, *args, **kw)
        print("%s: loop loss %.15f, torch %.15f, diff %.1e" % (k, l2, loss64, abs(l2 - loss64)))
        assert abs(l2 - loss64) < 1e-12, "loop implementation disagrees"
        if caption:  # the loop implementation reads no padding slot: the keys beyond L matter
            lf = loop_loss(p, *args, caption=(cond[0], np.full_like(cond[1], CAP_LEN)))
            print("%s: loop loss with every caption's 6 slots as keys %.15f (%.1e away)" % (
                k, lf, abs(lf - loss64)))
            assert abs(lf - loss64) > 1e-6
        hstep = 1e-6
        for n, shape in names(caption, features):
            g = grads[n].reshape(-1)
            picks = [int(np.argmax(np.abs(g)))] + list(rs.randint(0, g.size, 2))
            for idx in picks:
                w = p[n].reshape(-1)
                keep = w[idx]
                w[idx] = keep + hstep
                lp = loop_loss(p, *args, **kw)
                w[idx] = keep - hstep
                lm = loop_loss(p, *args, **kw)
                w[idx] = keep
                fd = (lp - lm) / (2 * hstep)
                err = abs(fd - g[idx])
                stored = float(exp["grad." + n].reshape(-1)[idx])
                assert err <= 1e-9 + 1e-6 * abs(g[idx]), (k, n, idx, fd, g[idx])
                assert abs(stored - fd) <= 1e-9 + 1e-6 * abs(fd), (k, n, idx, fd, stored)
                worst_abs = max(worst_abs, err)
                if abs(g[idx]) >= 1e-5:
                    worst = max(worst, err / abs(g[idx]))
                count += 1
        # the caption model's tensors whose gradients are all below 1e-5 (the cross-attention's
        # q_linear, |grad| <= 6e-7 as its softmax is nearly uniform at these weights, and a few
        # gated ones), where h 1e-6 leaves rounding of up to 4e-4 relative in the difference:
        # their largest element again with h 1e-4
        for n, shape in names(caption, features) if caption else []:
            g = grads[n].reshape(-1)
            idx = int(np.argmax(np.abs(g)))
            if abs(g[idx]) >= 1e-5:
                continue
            w, hbig = p[n].reshape(-1), 1e-4
            keep = w[idx]
            w[idx] = keep + hbig
            lp = loop_loss(p, *args, **kw)
            w[idx] = keep - hbig
            lm = loop_loss(p, *args, **kw)
            w[idx] = keep
            fd = (lp - lm) / (2 * hbig)
            stored = float(exp["grad." + n].reshape(-1)[idx])
            assert abs(fd - g[idx]) <= 1e-4 * abs(g[idx]), (k, n, idx, fd, g[idx])
            assert abs(stored - fd) <= 1e-4 * abs(fd), (k, n, idx, fd, stored)
            worst_small = max(worst_small, abs(fd - g[idx]) / abs(g[idx]))
            small.append(n)
    print("check: %d finite differences of the loop implementation agree with the gradients "
          "(largest difference %.1e; relative %.1e where |grad| >= 1e-5); the files read back "
          "equal" % (count, worst_abs, worst))
    if small:
        print("check: %d more with h 1e-4, the largest element of each tensor whose gradient is "
              "below 1e-5 (%d tensors: %s) agree to %.1e relative" % (
                  len(small), len(set(small)), ", ".join(sorted(set(small))), worst_small))


def main():
    global IN_CH
    features = "--features" in sys.argv[1:]
    caption = features or "--caption" in sys.argv[1:]
    latents = "--latents" in sys.argv[1:]
    if latents:
        IN_CH = LATENT_CH
    out_dir = (FEATURE_DIR if features else CAPTION_DIR if caption else
               LATENT_DIR if latents else HERE)
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(FEATURE_SEED if features else CAPTION_SEED if caption else
                                        LATENT_SEED if latents else SEED)
    config = (FEATURE_CONFIG if features else CAPTION_CONFIG if caption else
              LATENT_CONFIG if latents else CONFIG)
    init = []
    for name, shape in names(caption, features):
        # the caption embedder's at 0.3, so that the caption's keys and values are O(1) (as the
        # token variant's positions make them) and the mask and the null caption move the loss
        std = 0.3 if name.startswith("y_embedder.y_") else 0.02
        a = std * torch.randn(shape, generator=gen, dtype=torch.float64)
        init.append((name, a.numpy().astype(np.float32)))
    write_safetensors(os.path.join(out_dir, "init.safetensors"), init)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")

    done = []
    for k, s in CASES:
        B, Fr, H, W = s["B"], s["F"], s["H"], s["W"]
        if latents:  # a latent shard's moments: the means, then the log-variances
            mean = 5.0 * torch.randn((B, Fr, H, W, IN_CH), generator=gen, dtype=torch.float64)
            logvar = torch.randn((B, Fr, H, W, IN_CH), generator=gen, dtype=torch.float64) - 4.0
            clips = torch.cat([mean, logvar], dim=-1).numpy().astype(np.float32)
        else:
            clips = torch.randint(0, 256, (B, Fr, H, W, IN_CH),
                                  generator=gen).numpy().astype(np.uint8)
        noise = torch.randn((B, Fr, H, W, IN_CH), generator=gen, dtype=torch.float64)
        noise = noise.numpy().astype(np.float32)
        t = torch.sigmoid(torch.randn((B,), generator=gen, dtype=torch.float64))
        t = t.numpy().astype(np.float32)
        assert np.all(t > 0) and np.all(t < 1)
        if features:  # every row drawn; the rows from L on are padding and keep their draws
            tokens = torch.randn((B, CAP_LEN, DT), generator=gen, dtype=torch.float64)
            tokens = tokens.numpy().astype(np.float32)
            lens = np.array(FEATURES[k], dtype=np.int32)
            cond = (tokens, lens)
            named = [("caption_features", tokens), ("caption_lens", lens)]
        elif caption:  # every slot drawn; the slots from L on are padding and keep their draws
            tokens = torch.randint(0, VOCAB, (B, CAP_LEN), generator=gen).numpy().astype(np.int32)
            lens, null = CAPTIONS[k]
            lens = np.array(lens, dtype=np.int32)
            if null is not None:  # the null caption (dropped for guidance): [VOCAB], L 1
                assert lens[null] == 1
                tokens[null, 0] = VOCAB
            cond = (tokens, lens)
            named = [("caption_tokens", tokens), ("caption_lens", lens)]
        else:
            labels = torch.randint(0, NUM_CLASSES, (B,), generator=gen).numpy().astype(np.int32)
            labels[-1] = NUM_CLASSES  # the null class
            cond, named = labels, [("labels", labels)]
        if not latents:
            with open(os.path.join(out_dir, k + "_clips.bin"), "wb") as f:
                f.write(clips.tobytes())

        # the stored values as the test sees them: float32, then computed in float64
        loss, grads = loss_and_grads(init, clips, noise, t, cond)
        out = [("moments", clips)] if latents else []
        out += [("noise", noise), ("t", t)] + named + [("loss", np.array([loss], dtype=np.float32))]
        out += [("grad." + n, grads[n].astype(np.float32)) for n, _ in init]
        write_safetensors(os.path.join(out_dir, k + "_expected.safetensors"), out)
        norm = math.sqrt(sum(float((g ** 2).sum()) for g in grads.values()))
        if not caption:
            print("%s: B %d F %d H %d W %d, t %s, labels %s, loss %.6f, gradient norm %.6f" % (
                k, B, Fr, H, W, " ".join("%.4f" % v for v in t), labels.tolist(), loss, norm))
        else:
            print("%s: B %d F %d H %d W %d, t %s, caption lens %s, %s, loss %.6f, "
                  "gradient norm %.6f" % (k, B, Fr, H, W, " ".join("%.4f" % v for v in t),
                                          lens.tolist(), "features" if features else
                                          "tokens %s" % tokens.tolist(), loss, norm))
            # other ids in the padding slots (zeros; others drawn apart from gen): the same loss
            # and every gradient bit for bit; the mask matters (every slot a key: another loss).
            # Features: other padding rows, and other rows for the null caption (all of them
            # replaced by y_embedding), likewise
            pad = np.arange(CAP_LEN)[None, :] >= lens[:, None]
            rs = np.random.RandomState(11)
            redrawn = (rs.standard_normal(tokens.shape).astype(np.float32) if features else
                       rs.randint(0, VOCAB, tokens.shape))
            if features:
                pad = pad[:, :, None] | (lens == 0)[:, None, None]
            for alt in (np.zeros_like(tokens), redrawn):
                other = np.where(pad, alt, tokens).astype(tokens.dtype)
                assert not np.array_equal(other, tokens)
                l2, g2 = loss_and_grads(init, clips, noise, t, (other, lens))
                assert l2 == loss and all(np.array_equal(g2[n], grads[n]) for n in grads)
            lf, _ = loss_and_grads(init, clips, noise, t, (tokens, np.full_like(lens, CAP_LEN)))
            assert abs(lf - loss) > 1e-6
            print("%s: padding %s zeroed or redrawn: the same loss and gradients, bit for bit; "
                  "every slot a key: loss %.6f" % (k, "rows" if features else "ids", lf))
        done.append((k, s, clips, noise, t, cond, loss, grads))
    if "--check" in sys.argv[1:]:
        check(init, done, out_dir, caption, features, latents)


if __name__ == "__main__":
    main()
