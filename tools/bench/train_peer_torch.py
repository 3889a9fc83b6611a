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
    python3 train_peer_torch.py --device cuda --dtype bf16 --compile --batch 16 --seq 1024

On a GPU (bench_cuda's peer, `make bench-cuda`): the same model and step on cuda:0, in bf16
autocast (fp32 weights, AdamW state and reductions, as ingot's CUDA backend keeps them) with
PyTorch's fused attention (scaled_dot_product_attention, causal) and fused AdamW where this torch
has them, compiled with torch.compile when --compile is given and this torch has it; the step is
timed between CUDA synchronisations and the memory is torch.cuda.max_memory_allocated.

On the CPU with --autocast bf16 (bench_train --dtype bf16's peer, `make bench-bf16`): the same
step under torch.autocast("cpu", dtype=torch.bfloat16) around forward + loss, the weights, their
gradients and AdamW's state in fp32 as autocast keeps them. Debian's torch 1.13 then sends its
matmuls and Linears in bf16 to oneDNN 2.6's matmul primitive (DNNL_VERBOSE=1 shows
brg:avx512_core_amx_bf16 on this machine's AMX), where in fp32 they go to OpenBLAS's sgemm.

With --arch llama: the same step for a Llama written directly in torch modules as Hugging Face's
LlamaForCausalLM computes it (token embedding only, pre-RMSNorm blocks with the norm in fp32,
rotary embeddings in the rotate_half convention on q and k, grouped-query attention with
--n-kv-heads key/value heads each serving heads / n_kv_heads query heads, SiLU-gated MLP
down(silu(gate(x)) * up(x)) of --ffn-hidden, no biases, final RMSNorm, lm_head untied unless
--tie), HF's initialisation (normal 0.02 for every matrix, RMSNorm weights 1), the same AdamW
(decay on the 2-d parameters) and clipping. Its shape: --layers --heads --width --vocab (default
12, 12, 768, 50304: GPT-2 small's size) and --n-kv-heads --ffn-hidden --rope-theta --norm-eps
(default 4, 2048, 10000, 1e-5). Attention is scaled_dot_product_attention (causal) wherever this
torch has it, CPU included, the key/value heads repeated to the query heads first; torch 1.13 has
none: scores, causal mask, softmax, weighted sum. The shape options belong to --arch llama only.

    python3 train_peer_torch.py --arch llama --layers 2 --heads 4 --n-kv-heads 2 --width 64 \
        --ffn-hidden 172 --vocab 1000 --batch 2 --seq 32 --steps 3 --warmup 1

Prints one machine-readable line, "train_peer_torch k=v ...": the median step time, tokens/s and
the process's peak resident memory (getrusage; the interpreter and torch included, and the same
at start for reference); with --arch llama also the arch, its shape and its parameter count.
Run one shape per process: the peak memory is the process's.
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
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch >= 2)")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: torch.autocast(device, torch.bfloat16) around forward + loss, fp32 "
                         "master weights (as --dtype bf16; the summary line says autocast=bf16)")
    ap.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2")
    llama = {"layers": (int, 12), "heads": (int, 12), "width": (int, 768), "vocab": (int, 50304),
             "n_kv_heads": (int, 4), "ffn_hidden": (int, 2048), "rope_theta": (float, 10000.0),
             "norm_eps": (float, 1e-5)}
    for name, (kind, _) in llama.items():
        ap.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                        help="--arch llama only (default %s)" % llama[name][1])
    ap.add_argument("--tie", action="store_true", help="--arch llama only: lm_head = embedding")
    a = ap.parse_args()
    if a.autocast == "bf16":
        a.dtype = "bf16"
    given = [n for n in llama if getattr(a, n) is not None] + (["tie"] if a.tie else [])
    if a.arch == "gpt2" and given:
        ap.error("--%s: a Llama shape option; GPT-2's shape is fixed (add --arch llama)"
                 % given[0].replace("_", "-"))
    for name, (_, default) in llama.items():
        if getattr(a, name) is None:
            setattr(a, name, default)
    if a.arch == "llama":
        if a.width % a.heads or (a.width // a.heads) % 2:
            ap.error("--width must be --heads times an even head size")
        if a.n_kv_heads < 1 or a.heads % a.n_kv_heads:
            ap.error("--heads must be a multiple of --n-kv-heads")
        if min(a.layers, a.ffn_hidden, a.vocab) < 1:
            ap.error("--layers, --ffn-hidden and --vocab must be positive")
    return a


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
        if ARGS.device == "cuda" and hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.attn_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
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
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied embeddings
        return F.cross_entropy(logits.view(-1, PADDED_VOCAB), targets.view(-1))


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps) * w, in fp32 as LlamaRMSNorm (torch 1.13 has no nn.RMSNorm)."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.nh, self.nkv, self.hs = a.heads, a.n_kv_heads, a.width // a.heads
        self.input_layernorm = RMSNorm(a.width, a.norm_eps)
        self.q_proj = nn.Linear(a.width, self.nh * self.hs, bias=False)
        self.k_proj = nn.Linear(a.width, self.nkv * self.hs, bias=False)
        self.v_proj = nn.Linear(a.width, self.nkv * self.hs, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hs, a.width, bias=False)
        self.post_attention_layernorm = RMSNorm(a.width, a.norm_eps)
        self.gate_proj = nn.Linear(a.width, a.ffn_hidden, bias=False)
        self.up_proj = nn.Linear(a.width, a.ffn_hidden, bias=False)
        self.down_proj = nn.Linear(a.ffn_hidden, a.width, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.nh, self.hs).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.nkv, self.hs).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.nkv, self.hs).transpose(1, 2)
        cos, sin = cos[:T].to(q.dtype), sin[:T].to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        g = self.nh // self.nkv  # key/value head j serves query heads j*g .. j*g+g-1
        if g > 1:
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13: scores, causal mask, softmax, weighted sum
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
            att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        x = x + self.o_proj(y.transpose(1, 2).contiguous().view(B, T, self.nh * self.hs))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.vocab, self.tie = a.vocab, a.tie
        self.embed_tokens = nn.Embedding(a.vocab, a.width)
        self.layers = nn.ModuleList([LlamaBlock(a) for _ in range(a.layers)])
        self.norm = RMSNorm(a.width, a.norm_eps)
        self.lm_head = None if a.tie else nn.Linear(a.width, a.vocab, bias=False)
        hs = a.width // a.heads
        inv_freq = 1.0 / a.rope_theta ** (torch.arange(0, hs, 2).float() / hs)  # [hs/2]
        ang = torch.outer(torch.arange(a.seq).float(), inv_freq)
        ang = torch.cat((ang, ang), dim=-1)  # [T, hs]
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())
        self.register_buffer("mask", torch.tril(torch.ones(a.seq, a.seq)).view(1, 1, a.seq, a.seq))
        for p in self.parameters():  # Hugging Face's Llama initialisation (initializer_range 0.02)
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        x = self.embed_tokens(idx)
        for block in self.layers:
            x = block(x, self.cos, self.sin, self.mask)
        x = self.norm(x)
        logits = x @ self.embed_tokens.weight.t() if self.tie else self.lm_head(x)
        return F.cross_entropy(logits.reshape(-1, self.vocab).float(), targets.reshape(-1))


def main():
    a = ARGS
    rss0 = rss_mib()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("train_peer_torch: skipped: torch sees no CUDA device")
        return 0
    dev = torch.device(a.device)
    llama = a.arch == "llama"
    model = (Llama(a) if llama else GPT()).to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    fused = 0
    try:
        opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)
        fused = int(cuda)
    except TypeError:  # a torch without fused AdamW
        opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    step_model = model
    compiled = 0
    if a.compile and hasattr(torch, "compile"):
        step_model = torch.compile(model)
        compiled = 1
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, a.vocab if llama else VOCAB, (a.batch, a.seq + 1), generator=g)
    x, y = tokens[:, :-1].contiguous().to(dev), tokens[:, 1:].contiguous().to(dev)
    bf16 = a.dtype == "bf16"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    times, losses = [], []
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=bf16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        if i >= a.warmup:
            times.append(dt)
    step = statistics.median(times)
    mem = f" mem_mib={torch.cuda.max_memory_allocated() / 2**20:.0f}" if cuda else ""
    shape = ""
    if llama:
        n = sum(p.numel() for p in model.parameters())
        attn = "sdpa" if hasattr(F, "scaled_dot_product_attention") else "manual"
        shape = (f" arch=llama L={a.layers} heads={a.heads} kv_heads={a.n_kv_heads} C={a.width} "
                 f"ffn={a.ffn_hidden} V={a.vocab} rope_theta={a.rope_theta:g} "
                 f"norm_eps={a.norm_eps:g} tie={int(a.tie)} params={n} attn={attn}")
    ac = " autocast=bf16" if a.autocast == "bf16" else ""
    print(f"train_peer_torch{shape}{ac} device={a.device} dtype={a.dtype} compile={compiled} fused_adamw={fused} "
          f"B={a.batch} T={a.seq} threads={a.threads} step_s={step:.4f} "
          f"step_min={min(times):.3f} step_max={max(times):.3f} steps={a.steps} "
          f"tok_s={a.batch * a.seq / step:.1f} rss_mib={rss_mib():.0f} rss_start_mib={rss0:.0f} "
          f"loss_first={losses[0]:.3f} loss_last={losses[-1]:.3f}{mem} torch={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
