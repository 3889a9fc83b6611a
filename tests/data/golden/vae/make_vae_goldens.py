#!/usr/bin/python3
"""make_vae_goldens.py - golden values of two tiny random AutoencoderKLs from PyTorch, for the VAE
family's tests (model.arch vae; tests/test_train_vae.c).

An AutoencoderKL written here from diffusers' structure (diffusers is not installed; torch 1.13,
Debian's python3-torch), module for module so that its state_dict has diffusers' names:
  ResnetBlock2D     norm1 GroupNorm(groups, cin, eps 1e-6) -> SiLU -> conv1 3x3 -> norm2 -> SiLU ->
                    (dropout 0) -> conv2 3x3; conv_shortcut 1x1 when cin != cout; out = x + h
  Downsample2D      F.pad(x, (0, 1, 0, 1)) (right and bottom by one) -> conv 3x3 stride 2, no
                    padding
  Upsample2D        F.interpolate(scale_factor 2, mode "nearest") -> conv 3x3
  Attention         (the mid block's; heads = 1, dim_head = C) group_norm GroupNorm(groups, C, eps
                    1e-6) over the [B, C, H, W] input, then the h w positions as rows: q, k, v =
                    to_q, to_k, to_v (Linear C->C with bias); softmax(q k^T / sqrt(C)) v; to_out.0
                    (Linear with bias); + the input (residual_connection, rescale 1)
  DownEncoderBlock2D  layers_per_block resnets, a downsampler unless the last block
  UpDecoderBlock2D    layers_per_block + 1 resnets, an upsampler unless the last block
  UNetMidBlock2D    resnets.0, attentions.0, resnets.1
  Encoder           conv_in 3x3 -> down blocks -> mid block -> conv_norm_out -> SiLU -> conv_out to
                    2 latent channels (double_z)
  Decoder           conv_in 3x3 -> mid block -> up blocks (channels reversed; block i's first resnet
                    takes block i-1's channels) -> conv_norm_out -> SiLU -> conv_out to 3
  AutoencoderKL     quant_conv 1x1 (2C -> 2C) after the encoder, post_quant_conv 1x1 (C -> C) before
                    the decoder
The loss (Open-Sora's VAE training without GAN or perceptual terms): x = frames / 127.5 - 1 (each
frame an image), moments = quant_conv(encoder(x)), mean | logvar = its channel halves, logvar
clamped to [-30, 20], z = mean + exp(logvar / 2) eps, rec = decoder(post_quant_conv(z)),
  loss = mean |rec - x| + kl_weight * mean 0.5 (mean^2 + exp(logvar) - 1 - logvar),
the means over every element.

Two configurations, each in its folder (a/, b/):
  a   block_out_channels [8, 8], layers_per_block 1, latent 4, groups 4: two blocks, no shortcut;
      2 clips of 2 frames of 8x8 (latents 4x4); attention names to_q/to_k/to_v/to_out.0
  b   block_out_channels [8, 16, 16], layers_per_block 2, latent 3, groups 4: three blocks whose
      channels change (conv_shortcut in the encoder's block 1 and the decoder's block 2); 1 clip of
      3 frames of 8x12 (latents 2x3); written with diffusers' older attention names (query, key,
      value, proj_attn); quant_conv's bias of the last log-variance channel is -45, so that
      channel is clamped (its gradient is 0 there)
Files of each:
  config.json                           diffusers' AutoencoderKL config
  diffusion_pytorch_model.safetensors   the initial weights, diffusers' names and shapes (convs
                                        [out, in, kh, kw])
  clips.bin                             uint8 [B, F, H, W, 3], the frames
  expected.safetensors                  noise F32 [B, F, h, w, C] (eps); moments [B F, h, w, 2C]
                                        (quant_conv's output, NHWC); z [B F, h, w, C]; decoded
                                        [B F, H, W, 3] (the decoder of z); l1, kl, loss F32 [1];
                                        kl_weight F64 [1]
  grads.safetensors                     every parameter's gradient of the loss, under the
                                        parameter's name and shape (so it loads as a model)
Values: weights uniform in +-1/sqrt(fan_in) (torch's default bound) and GroupNorm's affine 1 +-
0.2, 0 +- 0.2 uniform, from torch.Generator seeds 20261201 (a) and 20261202 (b), then the frames
(randint 0..255) and eps (normal). Everything is computed in float64 from the float32 values
stored, and stored as float32; kl_weight is 0.1 so that the KL term's gradient is well above
rounding.

--check runs a second implementation in numpy with loops (convolutions by their sums, GroupNorm,
attention's softmax per query, nearest upsampling by index) on the stored weights and compares the
moments, the decoded frames and the loss (1e-12), takes central finite differences (h 1e-6) of the
loss for the largest element and two random ones of every parameter against the gradients, and
reads the files back.

Run: /usr/bin/python3 make_vae_goldens.py [--check]
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
EPS = 1e-6
KL_WEIGHT = 0.1
CONFIGS = {
    "a": dict(blocks=[8, 8], layers=1, latent=4, groups=4, B=2, F=2, H=8, W=8, seed=20261201,
              old_names=False, clamp=False),
    "b": dict(blocks=[8, 16, 16], layers=2, latent=3, groups=4, B=1, F=3, H=8, W=12,
              seed=20261202, old_names=True, clamp=True),
}


class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout, groups):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=EPS, affine=True)
        self.conv1 = nn.Conv2d(cin, cout, 3, 1, 1)
        self.norm2 = nn.GroupNorm(groups, cout, eps=EPS, affine=True)
        self.dropout = nn.Dropout(0.0)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1, 1, 0) if cin != cout else None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(x)
        return x + h


class Attention(nn.Module):
    def __init__(self, C, groups):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, C, eps=EPS, affine=True)
        self.to_q = nn.Linear(C, C)
        self.to_k = nn.Linear(C, C)
        self.to_v = nn.Linear(C, C)
        self.to_out = nn.ModuleList([nn.Linear(C, C), nn.Dropout(0.0)])

    def forward(self, x):
        B, C, H, W = x.shape
        h = self.group_norm(x).view(B, C, H * W).transpose(1, 2)
        q, k, v = self.to_q(h), self.to_k(h), self.to_v(h)
        a = torch.softmax(q @ k.transpose(1, 2) * C ** -0.5, dim=-1) @ v
        a = self.to_out[1](self.to_out[0](a))
        return a.transpose(1, 2).reshape(B, C, H, W) + x


class Downsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 2, 0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class DownEncoderBlock2D(nn.Module):
    def __init__(self, cin, cout, layers, groups, down):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock2D(cin if j == 0 else cout, cout, groups) for j in range(layers)])
        self.downsamplers = nn.ModuleList([Downsample2D(cout)]) if down else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](x)
        return x


class UpDecoderBlock2D(nn.Module):
    def __init__(self, cin, cout, layers, groups, up):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock2D(cin if j == 0 else cout, cout, groups) for j in range(layers)])
        self.upsamplers = nn.ModuleList([Upsample2D(cout)]) if up else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x)
        return x


class UNetMidBlock2D(nn.Module):
    def __init__(self, C, groups):
        super().__init__()
        self.resnets = nn.ModuleList([ResnetBlock2D(C, C, groups), ResnetBlock2D(C, C, groups)])
        self.attentions = nn.ModuleList([Attention(C, groups)])

    def forward(self, x):
        return self.resnets[1](self.attentions[0](self.resnets[0](x)))


class Encoder(nn.Module):
    def __init__(self, blocks, layers, latent, groups):
        super().__init__()
        self.conv_in = nn.Conv2d(3, blocks[0], 3, 1, 1)
        self.down_blocks = nn.ModuleList()
        for i, c in enumerate(blocks):
            prev = blocks[i - 1] if i else blocks[0]
            self.down_blocks.append(
                DownEncoderBlock2D(prev, c, layers, groups, i < len(blocks) - 1))
        self.mid_block = UNetMidBlock2D(blocks[-1], groups)
        self.conv_norm_out = nn.GroupNorm(groups, blocks[-1], eps=EPS, affine=True)
        self.conv_out = nn.Conv2d(blocks[-1], 2 * latent, 3, 1, 1)

    def forward(self, x):
        x = self.conv_in(x)
        for b in self.down_blocks:
            x = b(x)
        x = self.mid_block(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class Decoder(nn.Module):
    def __init__(self, blocks, layers, latent, groups):
        super().__init__()
        rev = list(reversed(blocks))
        self.conv_in = nn.Conv2d(latent, rev[0], 3, 1, 1)
        self.mid_block = UNetMidBlock2D(rev[0], groups)
        self.up_blocks = nn.ModuleList()
        for i, c in enumerate(rev):
            prev = rev[i - 1] if i else rev[0]
            self.up_blocks.append(UpDecoderBlock2D(prev, c, layers + 1, groups, i < len(rev) - 1))
        self.conv_norm_out = nn.GroupNorm(groups, blocks[0], eps=EPS, affine=True)
        self.conv_out = nn.Conv2d(blocks[0], 3, 3, 1, 1)

    def forward(self, z):
        x = self.mid_block(self.conv_in(z))
        for b in self.up_blocks:
            x = b(x)
        return self.conv_out(F.silu(self.conv_norm_out(x)))


class AutoencoderKL(nn.Module):
    def __init__(self, blocks, layers, latent, groups):
        super().__init__()
        self.encoder = Encoder(blocks, layers, latent, groups)
        self.decoder = Decoder(blocks, layers, latent, groups)
        self.quant_conv = nn.Conv2d(2 * latent, 2 * latent, 1)
        self.post_quant_conv = nn.Conv2d(latent, latent, 1)

    def moments(self, x):
        return self.quant_conv(self.encoder(x))

    def decode(self, z):
        return self.decoder(self.post_quant_conv(z))


def loss_of(model, x, eps, latent):
    """The loss and its parts; everything in the model's dtype."""
    mo = model.moments(x)
    mean, logvar = mo[:, :latent], mo[:, latent:]
    logvar = torch.clamp(logvar, -30.0, 20.0)
    z = mean + torch.exp(0.5 * logvar) * eps
    rec = model.decode(z)
    l1 = (rec - x).abs().mean()
    kl = (0.5 * (mean ** 2 + torch.exp(logvar) - 1.0 - logvar)).mean()
    return l1 + KL_WEIGHT * kl, l1, kl, mo, z, rec


def init_weights(model, g):
    """torch's default bound for convolutions and linear layers; GroupNorm's affine near 1, 0."""
    for name, p in model.named_parameters():
        with torch.no_grad():
            if ".norm" in name or "group_norm" in name or "conv_norm_out" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                p.copy_(base + (torch.rand(p.shape, generator=g, dtype=torch.float64) * 2 - 1)
                        * 0.2)
            else:
                wname = name[: -len("bias")] + "weight" if name.endswith("bias") else name
                w = dict(model.named_parameters())[wname]
                fan_in = w[0].numel()
                bound = fan_in ** -0.5
                p.copy_((torch.rand(p.shape, generator=g, dtype=torch.float64) * 2 - 1) * bound)
            p.copy_(p.float().double())  # the float32 values the files hold


def file_name(name, old):
    """diffusers' current attention names, or the older ones"""
    if not old:
        return name
    for cur, was in (("to_q.", "query."), ("to_k.", "key."), ("to_v.", "value."),
                     ("to_out.0.", "proj_attn.")):
        name = name.replace(".attentions.0." + cur, ".attentions.0." + was)
    return name


def write_safetensors(path, tensors):
    """tensors: [(name, dtype "F32"/"F64", numpy array)] in order"""
    header, blobs, off = {}, [], 0
    for name, dt, a in tensors:
        a = np.ascontiguousarray(a, dtype=np.float32 if dt == "F32" else np.float64)
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        dt = np.float32 if t["dtype"] == "F32" else np.float64
        out[name] = np.frombuffer(data[b:e], dtype=dt).reshape(t["shape"])
    return out


def nhwc(t):
    return t.permute(0, 2, 3, 1).contiguous().numpy()


def make(key, cfg):
    d = os.path.join(HERE, key)
    os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(cfg["seed"])
    blocks, L, lat, G = cfg["blocks"], cfg["layers"], cfg["latent"], cfg["groups"]
    model = AutoencoderKL(blocks, L, lat, G).double()
    init_weights(model, g)
    if cfg["clamp"]:
        with torch.no_grad():
            model.quant_conv.bias[2 * lat - 1] = -45.0
    B, Fr, H, W = cfg["B"], cfg["F"], cfg["H"], cfg["W"]
    down = 2 ** (len(blocks) - 1)
    h, w = H // down, W // down
    frames = torch.randint(0, 256, (B, Fr, H, W, 3), generator=g, dtype=torch.int64)
    eps32 = torch.randn((B, Fr, h, w, lat), generator=g, dtype=torch.float64).float()
    x = (frames.double() / 127.5 - 1.0).reshape(B * Fr, H, W, 3).permute(0, 3, 1, 2)
    eps = eps32.double().reshape(B * Fr, h, w, lat).permute(0, 3, 1, 2)
    loss, l1, kl, mo, z, rec = loss_of(model, x, eps, lat)
    model.zero_grad()
    loss.backward()
    config = {"_class_name": "AutoencoderKL", "_diffusers_version": "0.30.0", "act_fn": "silu",
              "block_out_channels": blocks, "down_block_types": ["DownEncoderBlock2D"] * len(blocks),
              "up_block_types": ["UpDecoderBlock2D"] * len(blocks), "in_channels": 3,
              "out_channels": 3, "latent_channels": lat, "layers_per_block": L,
              "norm_num_groups": G, "sample_size": 32, "scaling_factor": 0.18215,
              "force_upcast": True}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    old = cfg["old_names"]
    params = [(file_name(n, old), "F32", p.detach().numpy()) for n, p in model.named_parameters()]
    write_safetensors(os.path.join(d, "diffusion_pytorch_model.safetensors"), params)
    grads = [(file_name(n, old), "F32", p.grad.numpy()) for n, p in model.named_parameters()]
    write_safetensors(os.path.join(d, "grads.safetensors"), grads)
    with open(os.path.join(d, "clips.bin"), "wb") as f:
        f.write(frames.numpy().astype(np.uint8).tobytes())
    with torch.no_grad():
        dec = model.decode(z)
    write_safetensors(os.path.join(d, "expected.safetensors"), [
        ("noise", "F32", eps32.numpy()), ("moments", "F32", nhwc(mo.detach())),
        ("z", "F32", nhwc(z.detach())), ("decoded", "F32", nhwc(dec)),
        ("l1", "F32", np.array([l1.item()])), ("kl", "F32", np.array([kl.item()])),
        ("loss", "F32", np.array([loss.item()])), ("kl_weight", "F64", np.array([KL_WEIGHT]))])
    n = sum(p.numel() for p in model.parameters())
    print(f"{key}: {n} parameters, loss {loss.item():.9f} (l1 {l1.item():.9f}, kl {kl.item():.9f})")
    return model, x, eps


# ---- --check: loops in numpy ---------------------------------------------------------------------


def np_conv(x, w, b, stride, pad):
    """x [C, H, W], w [O, C, k, k]; pad (top, left, bottom, right)"""
    C, H, W = x.shape
    O, _, k, _ = w.shape
    xp = np.zeros((C, H + pad[0] + pad[2], W + pad[1] + pad[3]))
    xp[:, pad[0]:pad[0] + H, pad[1]:pad[1] + W] = x
    OH = (xp.shape[1] - k) // stride + 1
    OW = (xp.shape[2] - k) // stride + 1
    out = np.zeros((O, OH, OW))
    for i in range(OH):
        for j in range(OW):
            patch = xp[:, i * stride:i * stride + k, j * stride:j * stride + k]
            out[:, i, j] = np.tensordot(w, patch, axes=([1, 2, 3], [0, 1, 2])) + b
    return out


def np_gn(x, wt, bs, G):
    C = x.shape[0]
    out = np.empty_like(x)
    for g in range(G):
        s = x[g * C // G:(g + 1) * C // G]
        m, v = s.mean(), s.var()
        out[g * C // G:(g + 1) * C // G] = (s - m) / np.sqrt(v + EPS)
    return out * wt[:, None, None] + bs[:, None, None]


def silu(x):
    return x / (1 + np.exp(-x))


def np_resnet(P, pre, x, G):
    h = np_conv(silu(np_gn(x, P[pre + "norm1.weight"], P[pre + "norm1.bias"], G)),
                P[pre + "conv1.weight"], P[pre + "conv1.bias"], 1, (1, 1, 1, 1))
    h = np_conv(silu(np_gn(h, P[pre + "norm2.weight"], P[pre + "norm2.bias"], G)),
                P[pre + "conv2.weight"], P[pre + "conv2.bias"], 1, (1, 1, 1, 1))
    if pre + "conv_shortcut.weight" in P:
        x = np_conv(x, P[pre + "conv_shortcut.weight"], P[pre + "conv_shortcut.bias"], 1,
                    (0, 0, 0, 0))
    return x + h


def np_attn(P, pre, x, G, old):
    C, H, W = x.shape
    nm = (lambda s: {"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"}[s]
          if old else s)
    h = np_gn(x, P[pre + "group_norm.weight"], P[pre + "group_norm.bias"], G).reshape(C, H * W).T
    q = h @ P[pre + nm("to_q") + ".weight"].T + P[pre + nm("to_q") + ".bias"]
    k = h @ P[pre + nm("to_k") + ".weight"].T + P[pre + nm("to_k") + ".bias"]
    v = h @ P[pre + nm("to_v") + ".weight"].T + P[pre + nm("to_v") + ".bias"]
    out = np.zeros_like(q)
    for t in range(H * W):
        s = np.array([q[t] @ k[u] for u in range(H * W)]) / np.sqrt(C)
        p = np.exp(s - s.max())
        p /= p.sum()
        out[t] = sum(p[u] * v[u] for u in range(H * W))
    out = out @ P[pre + nm("to_out.0") + ".weight"].T + P[pre + nm("to_out.0") + ".bias"]
    return out.T.reshape(C, H, W) + x


def np_mid(P, side, x, G, old):
    x = np_resnet(P, side + ".mid_block.resnets.0.", x, G)
    x = np_attn(P, side + ".mid_block.attentions.0.", x, G, old)
    return np_resnet(P, side + ".mid_block.resnets.1.", x, G)


def np_moments(P, cfg, x):
    G, nb = cfg["groups"], len(cfg["blocks"])
    h = np_conv(x, P["encoder.conv_in.weight"], P["encoder.conv_in.bias"], 1, (1, 1, 1, 1))
    for i in range(nb):
        for j in range(cfg["layers"]):
            h = np_resnet(P, f"encoder.down_blocks.{i}.resnets.{j}.", h, G)
        if i < nb - 1:
            pre = f"encoder.down_blocks.{i}.downsamplers.0.conv."
            h = np_conv(h, P[pre + "weight"], P[pre + "bias"], 2, (0, 0, 1, 1))
    h = np_mid(P, "encoder", h, G, cfg["old_names"])
    h = silu(np_gn(h, P["encoder.conv_norm_out.weight"], P["encoder.conv_norm_out.bias"], G))
    h = np_conv(h, P["encoder.conv_out.weight"], P["encoder.conv_out.bias"], 1, (1, 1, 1, 1))
    return np_conv(h, P["quant_conv.weight"], P["quant_conv.bias"], 1, (0, 0, 0, 0))


def np_decode(P, cfg, z):
    G, nb = cfg["groups"], len(cfg["blocks"])
    h = np_conv(z, P["post_quant_conv.weight"], P["post_quant_conv.bias"], 1, (0, 0, 0, 0))
    h = np_conv(h, P["decoder.conv_in.weight"], P["decoder.conv_in.bias"], 1, (1, 1, 1, 1))
    h = np_mid(P, "decoder", h, G, cfg["old_names"])
    for i in range(nb):
        for j in range(cfg["layers"] + 1):
            h = np_resnet(P, f"decoder.up_blocks.{i}.resnets.{j}.", h, G)
        if i < nb - 1:
            h = h.repeat(2, axis=1).repeat(2, axis=2)
            pre = f"decoder.up_blocks.{i}.upsamplers.0.conv."
            h = np_conv(h, P[pre + "weight"], P[pre + "bias"], 1, (1, 1, 1, 1))
    h = silu(np_gn(h, P["decoder.conv_norm_out.weight"], P["decoder.conv_norm_out.bias"], G))
    return np_conv(h, P["decoder.conv_out.weight"], P["decoder.conv_out.bias"], 1, (1, 1, 1, 1))


def np_loss(P, cfg, x, eps):
    lat = cfg["latent"]
    l1s, kls, n1, nk, mos, recs = 0.0, 0.0, 0, 0, [], []
    for f in range(x.shape[0]):
        mo = np_moments(P, cfg, x[f])
        mean, lv = mo[:lat], np.clip(mo[lat:], -30.0, 20.0)
        z = mean + np.exp(0.5 * lv) * eps[f]
        rec = np_decode(P, cfg, z)
        l1s += np.abs(rec - x[f]).sum()
        n1 += rec.size
        kls += (0.5 * (mean ** 2 + np.exp(lv) - 1 - lv)).sum()
        nk += mean.size
        mos.append(mo)
        recs.append(rec)
    return l1s / n1 + KL_WEIGHT * kls / nk, np.array(mos), z


def check(key, cfg):
    d = os.path.join(HERE, key)
    P = {k: v.astype(np.float64) for k, v in
         read_safetensors(os.path.join(d, "diffusion_pytorch_model.safetensors")).items()}
    Gr = read_safetensors(os.path.join(d, "grads.safetensors"))
    E = read_safetensors(os.path.join(d, "expected.safetensors"))
    B, Fr, H, W = cfg["B"], cfg["F"], cfg["H"], cfg["W"]
    frames = np.fromfile(os.path.join(d, "clips.bin"), dtype=np.uint8).reshape(B * Fr, H, W, 3)
    x = (frames.astype(np.float64) / 127.5 - 1).transpose(0, 3, 1, 2)
    eps = E["noise"].astype(np.float64).reshape(B * Fr, *E["noise"].shape[2:]).transpose(0, 3, 1, 2)
    loss, mos, _ = np_loss(P, cfg, x, eps)
    assert abs(loss - float(E["loss"][0])) <= 1e-6 * abs(loss), (loss, E["loss"])
    dm = np.abs(mos.transpose(0, 2, 3, 1) - E["moments"]).max()
    assert dm <= 1e-6 * np.abs(E["moments"]).max(), dm
    rng = np.random.default_rng(7)
    worst = 0.0
    for name, grad in Gr.items():
        flat = np.abs(grad).ravel()
        picks = [int(flat.argmax())] + list(rng.integers(0, flat.size, 2))
        for i in picks:
            keep = P[name].ravel()[i]
            v = []
            for s in (1, -1):
                P[name].ravel()[i] = keep + s * 1e-6
                v.append(np_loss(P, cfg, x, eps)[0])
            P[name].ravel()[i] = keep
            num = (v[0] - v[1]) / 2e-6
            diff = abs(num - grad.ravel()[i])
            worst = max(worst, diff)
            assert diff <= 1e-8 + 1e-5 * abs(num) + 1e-5 * float(np.abs(grad).max()), \
                (name, i, num, grad.ravel()[i])
    print(f"{key}: checked: loss {loss:.12f}; finite differences of every tensor within "
          f"{worst:.2e}")


if __name__ == "__main__":
    for key, cfg in CONFIGS.items():
        make(key, cfg)
    if "--check" in sys.argv:
        for key, cfg in CONFIGS.items():
            check(key, cfg)
