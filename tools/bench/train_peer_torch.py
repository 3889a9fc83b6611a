#!/usr/bin/env python3
"""train_peer_torch.py - PyTorch's training step for the model bench_train times, as the peer of
tools/bench/bench_train.c (issue 9, section 7): GPT-2 small written directly in torch (12 layers,
12 heads, 768 wide, 1024 learned positions, pre-LayerNorm blocks, tanh GeLU, tied input and output
embeddings over the vocabulary padded to 50304 rows, fp32, no dropout; GPT-2's initialisation),
AdamW with configs/gpt2-small.yaml's hyperparameters (lr 6e-4, betas 0.9/0.95, eps 1e-8, weight
decay 0.1 on matrices and embeddings only) and gradient clipping at 1.0, on a micro-batch of random
valid tokens with torch.set_num_threads(threads).

Threads: Debian's torch does its GEMMs in OpenBLAS (pthreads), which starts its own threads (one
per core) whatever torch.set_num_threads says; OPENBLAS_NUM_THREADS (and OMP_NUM_THREADS) are set
to the same count before torch is loaded, so that every part of the step runs on `threads`.

A step is what bench_train times: zero the gradients, forward + backward, clip (the gradient
norm), AdamW. The loss is the cross-entropy over all 50304 logit columns (nanoGPT's choice; the 47
padded columns never hold a target, ingot's kernel skips them: the same work within 0.1%).

    python3 train_peer_torch.py [--threads 2] [--batch 4] [--seq 64] [--steps 5] [--warmup 2]

Prints one machine-readable line, "train_peer_torch k=v ...": the median step time, tokens/s and
the process's peak resident memory (getrusage; the interpreter and torch included, and the same
at start for reference). Run one shape per process: the peak memory is the process's.
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
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    return ap.parse_args()


ARGS = parse_args()
# before torch loads OpenBLAS and OpenMP, which read them once
os.environ["OPENBLAS_NUM_THREADS"] = str(ARGS.threads)
os.environ["OMP_NUM_THREADS"] = str(ARGS.threads)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

VOCAB, PADDED_VOCAB, POSITIONS, LAYERS, HEADS, WIDTH = 50257, 50304, 1024, 12, 12, 768


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH)
        self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
        self.attn_proj = nn.Linear(WIDTH, WIDTH)
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.c_fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.mlp_proj = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x, mask):
        B, T, C = x.shape
        hs = C // HEADS
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, HEADS, hs).transpose(1, 2)
        k = k.view(B, T, HEADS, hs).transpose(1, 2)
        v = v.view(B, T, HEADS, hs).transpose(1, 2)
        # torch 1.13 has no fused attention on the CPU: scores, causal mask, softmax, weighted sum
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(PADDED_VOCAB, WIDTH)
        self.wpe = nn.Embedding(POSITIONS, WIDTH)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH)
        mask = torch.tril(torch.ones(POSITIONS, POSITIONS)).view(1, 1, POSITIONS, POSITIONS)
        self.register_buffer("mask", mask)
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * LAYERS))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)
        with torch.no_grad():
            self.wte.weight[VOCAB:].zero_()

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied embeddings
        return F.cross_entropy(logits.view(-1, PADDED_VOCAB), targets.view(-1))


def main():
    a = ARGS
    rss0 = rss_mib()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = GPT()
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (a.batch, a.seq + 1), generator=g)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    times, losses = [], []
    for i in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= a.warmup:
            times.append(dt)
    step = statistics.median(times)
    print(f"train_peer_torch B={a.batch} T={a.seq} threads={a.threads} step_s={step:.3f} "
          f"step_min={min(times):.3f} step_max={max(times):.3f} steps={a.steps} "
          f"tok_s={a.batch * a.seq / step:.1f} rss_mib={rss_mib():.0f} rss_start_mib={rss0:.0f} "
          f"loss_first={losses[0]:.3f} loss_last={losses[-1]:.3f} torch={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
