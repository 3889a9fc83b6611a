#!/usr/bin/env python3
"""train_peer_llmc.py - llm.c's CPU trainer (karpathy/llm.c, train_gpt2.c) as a peer of
tools/bench/bench_train.c (issue 9, section 7). tools/bench/run.sh compiles train_gpt2.c from the
checkout LLMC_DIR points at (nothing of llm.c is in this repository); this script makes the files
that trainer opens, in its binary formats, then times its steps:

  - gpt2_124M.bin: a GPT-2 small checkpoint with random weights (header of 256 int32: magic
    20240326, version 3, max_seq_len 1024, vocab_size 50257, num_layers 12, num_heads 12,
    channels 768, padded_vocab_size 50304; then every parameter as float32 in llm.c's order: wte,
    wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb, lnfw,
    lnfb), drawn as GPT-2 initialises them;
  - dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin: token shards of random valid ids
    (header of 256 int32: magic 20240520, version 1, token count; then uint16 tokens).
No tokenizer file: llm.c then prints ids when it samples, which it does only at step 20, after the
steps timed here.

train_gpt2.c's step is forward, zero_grad, backward, AdamW (its own hyperparameters: lr 1e-4, no
weight decay, no clipping), B = 4 and T = 64 fixed in its main(); it prints "step N: train loss L
(took X ms)". The first `warmup` steps are dropped, the next `steps` kept, then the process is
stopped (its 41 steps would include two rounds of sampling).

    python3 train_peer_llmc.py --bin BUILD/llmc-peer/train_gpt2 --dir BUILD/llmc-peer \
        [--threads 2] [--steps 5] [--warmup 2]

Prints one machine-readable line, "train_peer_llmc k=v ...": the median step time, tokens/s and
the trainer's peak resident memory (getrusage of the child).
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys

import numpy as np

MAX_T, V, L, NH, C, VP = 1024, 50257, 12, 12, 768, 50304
B, T = 4, 64  # fixed in train_gpt2.c's main()


def param_shapes():
    """(name, element count, init) in llm.c's order (fill_in_parameter_sizes)."""
    return [
        ("wte", VP * C, "embedding"), ("wpe", MAX_T * C, "normal"),
        ("ln1w", L * C, "one"), ("ln1b", L * C, "zero"),
        ("qkvw", L * 3 * C * C, "normal"), ("qkvb", L * 3 * C, "zero"),
        ("attprojw", L * C * C, "residual"), ("attprojb", L * C, "zero"),
        ("ln2w", L * C, "one"), ("ln2b", L * C, "zero"),
        ("fcw", L * 4 * C * C, "normal"), ("fcb", L * 4 * C, "zero"),
        ("fcprojw", L * C * 4 * C, "residual"), ("fcprojb", L * C, "zero"),
        ("lnfw", C, "one"), ("lnfb", C, "zero"),
    ]


def checkpoint_header():
    h = np.zeros(256, dtype=np.int32)
    h[:8] = [20240326, 3, MAX_T, V, L, NH, C, VP]
    return h


def write_checkpoint(path):
    rng = np.random.default_rng(1234)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(checkpoint_header().tobytes())
        for name, n, init in param_shapes():
            if init == "zero":
                x = np.zeros(n, dtype=np.float32)
            elif init == "one":
                x = np.ones(n, dtype=np.float32)
            else:
                std = 0.02 / np.sqrt(2 * L) if init == "residual" else 0.02
                x = (rng.standard_normal(n, dtype=np.float32) * np.float32(std)).astype(np.float32)
                if init == "embedding":
                    x[V * C:] = 0  # the padded vocabulary rows
            f.write(x.tobytes())
    os.replace(tmp, path)


def checkpoint_ok(path):
    n = sum(s for _, s, _ in param_shapes())
    try:
        if os.path.getsize(path) != 1024 + 4 * n:
            return False
        with open(path, "rb") as f:
            return np.array_equal(np.frombuffer(f.read(1024), dtype=np.int32), checkpoint_header())
    except OSError:
        return False


def write_tokens(path, ntok, seed):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    h = np.zeros(256, dtype=np.int32)
    h[:3] = [20240520, 1, ntok]
    tokens = np.random.default_rng(seed).integers(0, V, ntok, dtype=np.uint16)
    with open(path + ".tmp", "wb") as f:
        f.write(h.tobytes())
        f.write(tokens.tobytes())
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the compiled train_gpt2")
    ap.add_argument("--dir", required=True, help="where its files are made and it runs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    ckpt = os.path.join(a.dir, "gpt2_124M.bin")
    if not checkpoint_ok(ckpt):
        write_checkpoint(ckpt)
    data = os.path.join(a.dir, "dev", "data", "tinyshakespeare")
    for split, seed in (("train", 1), ("val", 2)):
        path = os.path.join(data, f"tiny_shakespeare_{split}.bin")
        if not os.path.exists(path):
            write_tokens(path, 65536, seed)

    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    cmd = [os.path.abspath(a.bin)]
    if subprocess.run(["sh", "-c", "command -v stdbuf"], capture_output=True).returncode == 0:
        cmd = ["stdbuf", "-oL"] + cmd  # its printf lines as they come, through the pipe
    p = subprocess.Popen(cmd, cwd=a.dir, env=env, stdout=subprocess.PIPE, text=True)
    step_re = re.compile(r"^step (\d+): train loss ([-+.\deE]+) \(took ([\d.]+) ms\)")
    times, losses, tail = [], [], []
    for line in p.stdout:
        tail = (tail + [line.rstrip()])[-5:]
        m = step_re.match(line)
        if not m:
            continue
        losses.append(float(m.group(2)))
        if int(m.group(1)) >= a.warmup:
            times.append(float(m.group(3)) / 1000.0)
        if len(times) >= a.steps:
            break
    if p.poll() is None:
        p.kill()
    p.wait()
    if len(times) < a.steps:
        print("train_peer_llmc: llm.c stopped before %d steps; its last lines:\n%s"
              % (a.warmup + a.steps, "\n".join(tail)), file=sys.stderr)
        return 1
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    step = statistics.median(times)
    print(f"train_peer_llmc B={B} T={T} threads={a.threads} step_s={step:.3f} "
          f"step_min={min(times):.3f} step_max={max(times):.3f} steps={a.steps} "
          f"tok_s={B * T / step:.1f} rss_mib={rss:.0f} loss_first={losses[0]:.3f} "
          f"loss_last={losses[-1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
