#!/usr/bin/env python3
"""vae_peer_torch.py - the PyTorch peer of tools/bench/bench_vae.c: Stable Diffusion's VAE
(sd-vae-ft-ema's shape: block_out_channels [128, 256, 512, 512], 2 layers a block, 32 groups,
latent 4; 83,653,863 parameters) as the AutoencoderKL of the goldens
(tests/data/golden/vae/make_vae_goldens.py, written from diffusers' structure), in fp32 on the CPU
with torch.set_num_threads(threads), encoding frames of SIZE x SIZE under torch.no_grad():
frames/s over --frames frames in batches of --batch after a warm-up batch, and the peak RSS of the
process while it encodes (sampled every millisecond from /proc/self/statm by a thread; the model's
weights included).

With --dir DIR it first writes the model's random weights (torch's default initialisation, seed 0)
as diffusers' files (config.json, diffusion_pytorch_model.safetensors) for bench_vae to load, the
frames it encodes (frames.bin, uint8 [N, SIZE, SIZE, 3]) and the moments of the first frame
(moments.bin, float32 [h, w, 8], NHWC), so that both programs encode the same frames with the
same weights and bench_vae can check that it computes the same thing.

What torch runs: Debian's torch 1.13 does its convolutions through MKL-DNN (oneDNN 2.6.3, the same
library as ingot's CPU backend: aten::mkldnn_convolution with oneDNN's own OpenMP threads), its
GEMMs (the attention's) through OpenBLAS, GroupNorm and SiLU as separate ATen kernels. --format
channels_last runs the model and the frames in NHWC (ingot's layout), default NCHW.

    python3 vae_peer_torch.py [--threads 2] [--size 256] [--frames 2] [--batch 1] [--dir DIR]

With --train it times training steps instead (--steps after a warm-up step): the loss of
tests/data/golden/vae (mean |decode(z) - x| + 1e-6 x the mean KL term, z from the noise it writes
to DIR/noise.bin, float32 [N, h, w, 4]) over --batch frames, backward, and torch.optim.AdamW (lr
1e-4, weight decay 0); it prints the first step's loss (bench_vae --train computes the same from
the same files) and the step time.

Prints one line "vae_peer_torch k=v ...".
"""
import argparse
import importlib.util
import json
import os
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--size", type=int, default=256)
ap.add_argument("--frames", type=int, default=2)
ap.add_argument("--batch", type=int, default=1)
ap.add_argument("--dir", default="")
ap.add_argument("--format", choices=["nchw", "channels_last"], default="nchw")
ap.add_argument("--train", action="store_true")
ap.add_argument("--steps", type=int, default=3)
args = ap.parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402 (after the thread variables)
import torch  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(0)
HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "goldens", os.path.join(HERE, "..", "..", "tests", "data", "golden", "vae", "make_vae_goldens.py"))
G = importlib.util.module_from_spec(spec)
spec.loader.exec_module(G)

BLOCKS, LAYERS, LATENT, GROUPS = [128, 256, 512, 512], 2, 4, 32
model = G.AutoencoderKL(BLOCKS, LAYERS, LATENT, GROUPS).float().eval()
n_params = sum(p.numel() for p in model.parameters())
S, N, B = args.size, args.frames, args.batch
g = torch.Generator().manual_seed(1)
frames = torch.randint(0, 256, (N, S, S, 3), generator=g, dtype=torch.uint8)


def to_x(f):
    x = (f.float() / 127.5 - 1.0).permute(0, 3, 1, 2)
    return x.contiguous(memory_format=torch.channels_last) if args.format == "channels_last" \
        else x.contiguous()


if args.format == "channels_last":
    model = model.to(memory_format=torch.channels_last)

if args.dir:
    os.makedirs(args.dir, exist_ok=True)
    config = {"_class_name": "AutoencoderKL", "act_fn": "silu", "block_out_channels": BLOCKS,
              "down_block_types": ["DownEncoderBlock2D"] * 4,
              "up_block_types": ["UpDecoderBlock2D"] * 4, "in_channels": 3, "out_channels": 3,
              "latent_channels": LATENT, "layers_per_block": LAYERS, "norm_num_groups": GROUPS,
              "sample_size": S}
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(config, f)
    G.write_safetensors(os.path.join(args.dir, "diffusion_pytorch_model.safetensors"),
                        [(n, "F32", p.detach().contiguous().numpy())
                         for n, p in model.named_parameters()])
    frames.numpy().tofile(os.path.join(args.dir, "frames.bin"))
    with torch.no_grad():
        mo = model.moments(to_x(frames[:1]))
    mo.permute(0, 2, 3, 1).contiguous().numpy().astype(np.float32).tofile(
        os.path.join(args.dir, "moments.bin"))


if args.train:
    h = w = S // 8
    eps = torch.randn((N, h, w, LATENT), generator=g)
    if args.dir:
        eps.numpy().tofile(os.path.join(args.dir, "noise.bin"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    G.KL_WEIGHT = 1e-6

    def step(i):
        x = to_x(frames[i:i + B])
        e = eps[i:i + B].permute(0, 3, 1, 2).contiguous()
        loss = G.loss_of(model, x, e, LATENT)[0]
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        return loss.item()

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


peak = [0]
running = [True]


def sample():
    while running[0]:
        peak[0] = max(peak[0], rss())
        time.sleep(0.001)


if args.train:
    first = step(0)  # warm-up: the first step (its loss is the one bench_vae checks)
    base = rss()
    t = threading.Thread(target=sample)
    t.start()
    t0 = time.perf_counter()
    for k in range(args.steps):
        step((k * B) % N)
    dt = (time.perf_counter() - t0) / args.steps
    running[0] = False
    t.join()
    print(f"vae_peer_torch torch={torch.__version__} threads={args.threads} format={args.format} "
          f"train=1 size={S} batch={B} params={n_params} step_s={dt:.4f} loss1={first:.9f} "
          f"rss_peak_mib={max(peak[0], base) / 2**20:.1f}")
    sys.exit(0)

with torch.no_grad():
    model.moments(to_x(frames[:B]))  # warm-up (oneDNN's primitives, the allocator's caches)
    base = rss()
    t = threading.Thread(target=sample)
    t.start()
    t0 = time.perf_counter()
    for i in range(0, N, B):
        model.moments(to_x(frames[i:i + B]))
    dt = time.perf_counter() - t0
    running[0] = False
    t.join()
print(f"vae_peer_torch torch={torch.__version__} threads={args.threads} format={args.format} "
      f"size={S} frames={N} batch={B} params={n_params} frames_s={N / dt:.4f} "
      f"rss_peak_mib={max(peak[0], base) / 2**20:.1f} rss_before_mib={base / 2**20:.1f}")
