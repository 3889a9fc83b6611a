#!/usr/bin/env python3
"""conv_peer_torch.py - PyTorch's 2-D convolutions on the shapes of tools/bench/bench_conv.c (Stable
Diffusion's VAE at 256x256 frames), the peer of ingot's conv2d kernels: torch.nn.functional.conv2d
forward, and its backward (input, weight and bias gradients through autograd), fp32 on the CPU
with torch.set_num_threads(threads), in PyTorch's default NCHW and in channels_last (NHWC, ingot's
layout).

Which kernel torch runs: its autograd profiler's op names for one forward and backward are printed
(Debian's torch 1.13 is built with MKL-DNN, oneDNN 2.6.3, the same library as ingot's CPU backend:
for fp32 tensors of these sizes its conv2d dispatches to aten::mkldnn_convolution, which runs
oneDNN's convolution primitives with oneDNN's own OpenMP threads).

    python3 conv_peer_torch.py [--threads 2] [--reps 3] [--quick]

Prints, per shape and memory format, one machine-readable line "conv_peer_torch k=v ...": the
shape, the best forward and backward times of --reps after a warm-up, and the useful GFLOP/s
(2 N OH OW OC C KH KW per direction, two directions in the backward), as bench_conv counts them.
"""
import argparse
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--quick", action="store_true")
args = ap.parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))

import torch  # noqa: E402 (after the thread variables)
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(0)

ROWS = [  # name, N, H, W, C, OC, K, stride, (top, left, bottom, right): bench_conv.c's keys
    ("c3_256", 1, 256, 256, 128, 128, 3, 1, (1, 1, 1, 1)),
    ("c3_64", 1, 64, 64, 512, 512, 3, 1, (1, 1, 1, 1)),
    ("c1_128", 1, 128, 128, 256, 256, 1, 1, (0, 0, 0, 0)),
    ("down_256", 1, 256, 256, 128, 128, 3, 2, (0, 0, 1, 1)),
]
if args.quick:
    ROWS = [("c3_32", 1, 32, 32, 64, 64, 3, 1, (1, 1, 1, 1))]


def best(fn):
    fn()
    t = 1e30
    for _ in range(args.reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def conv(x, w, b, S, pad):
    top, left, bottom, right = pad
    if top == bottom and left == right:
        return F.conv2d(x, w, b, stride=S, padding=(top, left))
    return F.conv2d(F.pad(x, (left, right, top, bottom)), w, b, stride=S)  # diffusers' downsample


print("torch %s, %d threads, mkldnn %s (%s)" % (torch.__version__, torch.get_num_threads(),
      torch.backends.mkldnn.is_available(), torch.backends.mkldnn.enabled))
for name, N, H, W, C, OC, K, S, pad in ROWS:
    for fmt in ("nchw", "nhwc"):
        mf = torch.channels_last if fmt == "nhwc" else torch.contiguous_format
        x = torch.randn(N, C, H, W).to(memory_format=mf).requires_grad_(True)
        w = (torch.randn(OC, C, K, K) * 0.05).to(memory_format=mf).requires_grad_(True)
        b = torch.randn(OC).requires_grad_(True)
        with torch.no_grad():
            y0 = conv(x, w, b, S, pad)
        dout = torch.randn_like(y0)
        OH, OW = y0.shape[2], y0.shape[3]
        flops = 2.0 * N * OH * OW * OC * C * K * K

        def fwd():
            with torch.no_grad():
                conv(x, w, b, S, pad)

        y = conv(x, w, b, S, pad)

        def bwd():
            x.grad = w.grad = b.grad = None
            torch.autograd.grad(y, (x, w, b), dout, retain_graph=True)

        tf, tb = best(fwd), best(bwd)
        if fmt == "nhwc" and name == ROWS[0][0]:
            with torch.autograd.profiler.profile() as prof:
                yy = conv(x, w, b, S, pad)
                torch.autograd.grad(yy, (x, w, b), dout)
            ops = sorted({e.name for e in prof.function_events if "conv" in e.name})
            print("torch's convolution ops (channels_last): " + ", ".join(ops))
        print("conv_peer_torch name=%s format=%s fwd_ms=%.2f bwd_ms=%.2f fwd_gflops=%.1f "
              "bwd_gflops=%.1f" % (name, fmt, tf * 1e3, tb * 1e3, flops / tf / 1e9,
                                   2 * flops / tb / 1e9))
        sys.stdout.flush()
