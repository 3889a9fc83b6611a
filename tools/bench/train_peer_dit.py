#!/usr/bin/env python3
"""train_peer_dit.py - PyTorch's training step for the video DiT (model.arch: dit), as the peer of
ingot's DiT training benchmarks: Peebles & Xie's DiT (facebookresearch/DiT models.py) with a 3-D
patch embedding (OpenDiT's video DiT), written directly in torch modules, trained by rectified flow
with DiT's optimiser, on a micro-batch of random clips with torch.set_num_threads(threads).

The model (the one tests/data/golden/dit/make_dit_goldens.py states, with DiT's initialisation):
Conv3d(3, D, kernel = stride = patch) over x_t as [B, 3, F, H, W], tokens in (t, h, w) order, plus
fixed sin-cos positions (DiT's 2-D table over (h, w), the first half of the channels from the w
index, plus a 1-D table over the frame-token index); the conditioning c = TimestepEmbedder(1000 t)
(256 frequencies, Linear, SiLU, Linear) + the label table of num_classes + 1 rows (the last is the
null class; labels dropped to it with probability 0.1 each step, as DiT trains for classifier-free
guidance); adaLN-Zero blocks (LayerNorm without affine, eps 1e-6; shift, scale, gate of attention
and MLP from Linear(D, 6D)(SiLU(c)); attention with a q|k|v Linear and an output projection, no
mask; MLP 4D with tanh GELU); the final adaLN layer and Linear(D, pt ph pw 3), unpatchified to
[B, F, H, W, 3]. DiT's initialisation: xavier_uniform for every Linear (biases 0) and for the
patch embedding seen as a matrix, normal(0, 0.02) for the label table and the timestep MLP's
weights, and zeros for every adaLN modulation Linear and for the final Linear (adaLN-Zero).

The loss is rectified flow (SD3, Open-Sora 2.0): x0 = clip / 127.5 - 1, t = sigmoid(normal)
(logit-normal), x_t = (1 - t) x0 + t eps, loss = mean((model(x_t, 1000 t, label) - (eps - x0))^2).
The noise, t and the label dropout of step s come from a generator seeded by (--seed, s), drawn on
the device; the clips and labels are drawn once. With --latents C the clips are a latent shard's
moments instead (C means, then C log-variances, drawn once) and each step draws the latent from
the posterior on the device, x0 = 0.18215 (mean + exp(logvar / 2) eps'), with C channels in the
patch embedding and the final layer (ingot's DiT on latent shards, bench_train --latents C). AdamW as DiT trains: lr 1e-4, betas 0.9/0.999,
eps 1e-8, weight decay 0, no gradient clipping unless --clip is given (then clip_grad_norm_).

Threads: Debian's torch does its GEMMs in OpenBLAS (pthreads); OPENBLAS_NUM_THREADS and
OMP_NUM_THREADS are set to --threads before torch is loaded, as train_peer_torch.py does.
Attention is scaled_dot_product_attention (non-causal) wherever this torch has it, CPU included;
torch 1.13 has none: scores, softmax, weighted sum.

These modules hold DiT's state_dict names; loaded in float64 with tests/data/golden/dit's
init.safetensors (num_classes 5, hidden 32, depth 2, 4 heads, patch 2,2,2) they reproduced the
golden losses and every gradient of both micro-batches to 3e-8 relative (the float32 storage),
with the timestep frequencies computed in float64 as the golden does (here they are float32, as
in DiT: 6e-6 relative on t_embedder.mlp.2.weight's gradient).

A step is: zero the gradients, draw the step's noise, forward + backward, (clip,) AdamW.

    python3 train_peer_dit.py [--threads 2] [--batch 4] [--frames 8] [--size 32x32] \
        [--patch 1,2,2] [--hidden 384] [--depth 12] [--heads 6] [--steps 5] [--warmup 2]
    python3 train_peer_dit.py --batch 2 --frames 4 --size 16x16 --hidden 64 --depth 2 --heads 4 \
        --steps 3 --warmup 1
    python3 train_peer_dit.py --device cuda --dtype bf16 --compile --batch 16

The default is DiT-S/2's blocks (hidden 384, depth 12, 6 heads) with patch 1,2,2 on 8-frame
32 x 32 clips, batch 4: 8 x 16 x 16 = 2048 tokens a clip, 32.9M parameters (--num-classes 1000).
On torch 1.13's CPU (manual attention keeps every layer's [B, heads, 2048, 2048] scores) one step
of it peaked at 9.7 GB resident and took 2.5 minutes on 2 shared cores: use a smaller shape there.
On a GPU: cuda:0, bf16 autocast with --dtype bf16 (fp32 weights and AdamW state), fused AdamW
where this torch has it, torch.compile with --compile where this torch has it; the step is timed
between CUDA synchronisations and the memory is torch.cuda.max_memory_allocated.

On the CPU with --autocast bf16 (bench_train --arch dit --dtype bf16's peer): the same step under
torch.autocast("cpu", dtype=torch.bfloat16) around forward + loss (fp32 weights and AdamW state);
Debian's torch 1.13 sends its bf16 Linears and matmuls to oneDNN 2.6's matmul primitive (AMX
brgemm here) instead of OpenBLAS.

Prints one machine-readable line, "train_peer_dit k=v ...": the shape and parameter count, the
median step time (and min / max), clips/s and tokens/s, the process's peak resident memory
(getrusage; the interpreter and torch included, and the same at start for reference) and the
first and last losses. Run one shape per process: the peak memory is the process's.
"""
import argparse
import math
import os
import resource
import statistics
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--size", default="32x32", help="HxW of the clips")
    ap.add_argument("--patch", default="1,2,2", help="pt,ph,pw")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--depth", type=int, default=12)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--clip", type=float, default=0.0, help="max gradient norm (0: none, as DiT)")
    ap.add_argument("--latents", type=int, default=0,
                    help="C: the DiT on a VAE's latents of C channels (each clip's latent drawn "
                         "from its posterior every step, x0 = 0.18215 z), 0: RGB pixels")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch >= 2)")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: torch.autocast(device, torch.bfloat16) around forward + loss, fp32 "
                         "master weights (as --dtype bf16; the summary line says autocast=bf16)")
    a = ap.parse_args()
    if a.autocast == "bf16":
        a.dtype = "bf16"
    try:
        a.H, a.W = (int(v) for v in a.size.lower().split("x"))
        a.pt, a.ph, a.pw = (int(v) for v in a.patch.split(","))
    except ValueError:
        ap.error("--size is HxW and --patch is pt,ph,pw (positive integers)")
    if min(a.H, a.W, a.pt, a.ph, a.pw, a.frames, a.batch, a.hidden, a.depth, a.heads) < 1:
        ap.error("every size must be positive")
    if a.frames % a.pt or a.H % a.ph or a.W % a.pw:
        ap.error("--frames, H and W must be multiples of the patch %s" % a.patch)
    if a.hidden % 4 or a.hidden % a.heads:
        ap.error("--hidden must be a multiple of 4 (the 2-D sin-cos table) and of --heads")
    if a.threads < 1 or a.steps < 1 or a.warmup < 0 or a.num_classes < 1:
        ap.error("--threads, --steps and --num-classes must be positive, --warmup not negative")
    return a


ARGS = parse_args()
# before torch loads OpenBLAS and OpenMP, which read them once
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SDPA = hasattr(F, "scaled_dot_product_attention")
FREQ, NORM_EPS, CLASS_DROPOUT = 256, 1e-6, 0.1


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def sincos(n, pos):
    """[len(pos), n]: [sin(p w_k) | cos(p w_k)], w_k = 10000^(-k / (n/2)), k < n/2."""
    omega = 1.0 / 10000.0 ** (torch.arange(n // 2, dtype=torch.float64) / (n / 2.0))
    ang = torch.outer(pos.to(torch.float64), omega)
    return torch.cat([ang.sin(), ang.cos()], dim=1)


def pos_table(D, ft, fh, fw):
    """[ft fh fw, D] in (t, h, w) token order: DiT's 2-D table (w first) + a 1-D one over t."""
    hh, ww = torch.meshgrid(torch.arange(fh), torch.arange(fw), indexing="ij")
    spatial = torch.cat([sincos(D // 2, ww.reshape(-1)), sincos(D // 2, hh.reshape(-1))], dim=1)
    temporal = sincos(D, torch.arange(ft))
    return (temporal[:, None, :] + spatial[None, :, :]).reshape(ft * fh * fw, D).float()


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    def __init__(self, D):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(FREQ, D), nn.SiLU(), nn.Linear(D, D))
        half = FREQ // 2
        self.register_buffer("freqs", torch.exp(-math.log(10000.0) * torch.arange(half) / half))

    def forward(self, tm):
        args = tm.float()[:, None] * self.freqs[None]
        return self.mlp(torch.cat([torch.cos(args), torch.sin(args)], dim=-1))


class Attention(nn.Module):
    def __init__(self, D, heads):
        super().__init__()
        self.heads, self.hs = heads, D // heads
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(x).reshape(B, T, 3, self.heads, self.hs).permute(2, 0, 3, 1, 4)
        if SDPA:
            y = F.scaled_dot_product_attention(q, k, v)
        else:  # torch 1.13: scores, softmax, weighted sum
            y = F.softmax((q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs)), dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class Mlp(nn.Module):
    def __init__(self, D):
        super().__init__()
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class DiTBlock(nn.Module):
    def __init__(self, D, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(D, elementwise_affine=False, eps=NORM_EPS)
        self.attn = Attention(D, heads)
        self.norm2 = nn.LayerNorm(D, elementwise_affine=False, eps=NORM_EPS)
        self.mlp = Mlp(D)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(D, 6 * D))

    def forward(self, x, c):
        sh1, sc1, g1, sh2, sc2, g2 = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(modulate(self.norm1(x), sh1, sc1))
        return x + g2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), sh2, sc2))


class FinalLayer(nn.Module):
    def __init__(self, D, out):
        super().__init__()
        self.norm_final = nn.LayerNorm(D, elementwise_affine=False, eps=NORM_EPS)
        self.linear = nn.Linear(D, out)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(D, 2 * D))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class LabelEmbedder(nn.Module):
    def __init__(self, num_classes, D):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + 1, D)  # the last row: the null class


class PatchEmbed3D(nn.Module):
    def __init__(self, patch, D, C=3):
        super().__init__()
        self.proj = nn.Conv3d(C, D, kernel_size=patch, stride=patch)


class VideoDiT(nn.Module):
    def __init__(self, a):
        super().__init__()
        D = a.hidden
        self.patch = (a.pt, a.ph, a.pw)
        self.grid = (a.frames // a.pt, a.H // a.ph, a.W // a.pw)
        C = a.latents or 3
        self.x_embedder = PatchEmbed3D(self.patch, D, C)
        self.t_embedder = TimestepEmbedder(D)
        self.y_embedder = LabelEmbedder(a.num_classes, D)
        self.register_buffer("pos_embed", pos_table(D, *self.grid)[None])
        self.blocks = nn.ModuleList([DiTBlock(D, a.heads) for _ in range(a.depth)])
        self.final_layer = FinalLayer(D, a.pt * a.ph * a.pw * C)
        for m in self.modules():  # DiT's initialize_weights
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        w = self.x_embedder.proj.weight.data
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.normal_(self.y_embedder.embedding_table.weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[0].weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[2].weight, std=0.02)
        for m in [b.adaLN_modulation[-1] for b in self.blocks] + [
                self.final_layer.adaLN_modulation[-1], self.final_layer.linear]:
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, xt, tm, labels):
        """xt [B, F, H, W, 3] -> v [B, F, H, W, 3]."""
        B, Fr, H, W, C = xt.shape
        (ft, fh, fw), (pt, ph, pw) = self.grid, self.patch
        x = self.x_embedder.proj(xt.permute(0, 4, 1, 2, 3)).flatten(2).transpose(1, 2)
        x = x + self.pos_embed
        c = self.t_embedder(tm) + self.y_embedder.embedding_table(labels)
        for block in self.blocks:
            x = block(x, c)
        y = self.final_layer(x, c).reshape(B, ft, fh, fw, pt, ph, pw, C)
        return y.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(B, Fr, H, W, C)


def flow_loss(model, clips, labels, noise, t, drop, num_classes, eps_z=None):
    if eps_z is None:
        x0 = clips.float() / 127.5 - 1.0
    else:  # a latent drawn from the posterior (mean | logvar), scaled as SD's VAE's
        mean, logvar = clips.chunk(2, dim=-1)
        x0 = 0.18215 * (mean + torch.exp(0.5 * logvar) * eps_z)
    tb = t[:, None, None, None, None]
    xt = (1.0 - tb) * x0 + tb * noise
    y = torch.where(drop, torch.full_like(labels, num_classes), labels)
    v = model(xt, 1000.0 * t, y)
    return F.mse_loss(v.float(), noise - x0)


def main():
    a = ARGS
    rss0 = rss_mib()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("train_peer_dit: skipped: torch sees no CUDA device")
        return 0
    dev = torch.device(a.device)
    model = VideoDiT(a).to(dev)
    fused = 0
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.0, fused=cuda)
        fused = int(cuda)
    except TypeError:  # a torch without fused AdamW
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.0)
    step_model, compiled = model, 0
    if a.compile and hasattr(torch, "compile"):
        step_model, compiled = torch.compile(model), 1
    g = torch.Generator().manual_seed(a.seed)
    shape = (a.batch, a.frames, a.H, a.W, a.latents or 3)
    if a.latents:  # a latent shard's moments: means of a latent's scale, log-variances near -8
        mean = 5.0 * torch.rand(shape, generator=g) - 2.5
        clips = torch.cat([mean, torch.rand(shape, generator=g) - 8.5], dim=-1).to(dev)
    else:
        clips = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).to(dev)
    labels = torch.randint(0, a.num_classes, (a.batch,), generator=g).to(dev)
    gs = torch.Generator(device=dev)
    bf16 = a.dtype == "bf16"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times, losses = [], []
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        gs.manual_seed(a.seed * 1000003 + i)  # the step's noise: keyed by (seed, step)
        noise = torch.randn(shape, generator=gs, device=dev)
        t = torch.sigmoid(torch.randn((a.batch,), generator=gs, device=dev))
        drop = torch.rand((a.batch,), generator=gs, device=dev) < CLASS_DROPOUT
        eps_z = torch.randn(shape, generator=gs, device=dev) if a.latents else None
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=bf16):
            loss = flow_loss(step_model, clips, labels, noise, t, drop, a.num_classes, eps_z)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        sync()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= a.warmup:
            times.append(dt)
    step = statistics.median(times)
    tokens = (a.frames // a.pt) * (a.H // a.ph) * (a.W // a.pw)
    n = sum(p.numel() for p in model.parameters())
    mem = f" mem_mib={torch.cuda.max_memory_allocated() / 2**20:.0f}" if cuda else ""
    ac = " autocast=bf16" if a.autocast == "bf16" else ""
    print(f"train_peer_dit{ac} device={a.device} dtype={a.dtype} compile={compiled} "
          f"fused_adamw={fused} attn={'sdpa' if SDPA else 'manual'} "
          f"B={a.batch} F={a.frames} H={a.H} W={a.W} C={a.latents or 3} patch={a.pt},{a.ph},{a.pw} "
          f"D={a.hidden} depth={a.depth} heads={a.heads} "
          f"classes={a.num_classes} tokens={tokens} params={n} clip={a.clip:g} threads={a.threads} "
          f"step_s={step:.4f} step_min={min(times):.4f} step_max={max(times):.4f} steps={a.steps} "
          f"clips_s={a.batch / step:.2f} tok_s={a.batch * tokens / step:.1f} "
          f"rss_mib={rss_mib():.0f} rss_start_mib={rss0:.0f} "
          f"loss_first={losses[0]:.4f} loss_last={losses[-1]:.4f}{mem} torch={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
