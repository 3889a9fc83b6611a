#!/usr/bin/python3
"""make_sampling_goldens.py - golden files for ingot's GPT sample index, splits and blends.

How the goldens were made
-------------------------
    /usr/bin/python3 tests/data/golden/make_sampling_goldens.py tests/data/golden/sampling

with Debian's python3-numpy (1.24.2 when they were made; any numpy whose legacy RandomState is
unchanged gives the same bytes). The script needs numpy only: it re-implements, in plain numpy
and Python, the index-building logic of Megatron-Core as an oracle independent of ingot's C code.
The logic follows NVIDIA/Megatron-LM (megatron/core/datasets):
  - gpt_dataset.py @ 002398e7f3b35027db313aa4cf8e8b23b64a0885: _get_num_tokens_per_epoch,
    _get_num_epochs, separate_final_epoch (threshold 0.80), _build_document_index,
    _build_shuffle_index (add_extra_token_to_sequence = True, drop_last_partial_sequence = True);
  - helpers.cpp @ 298c71d28a8875303fe5ea2a7c505f060f247f5f: build_sample_idx,
    build_blending_indices;
  - blended_megatron_dataset_builder.py @ 00caa53af30912914981c86f39db123961678bbd:
    _get_size_per_split_per_dataset (surplus = mid_level_dataset_surplus = 0.005), the blend size
    sum(ceil(N * w)), the split bookends int(round(b * num_elements));
  - blended_megatron_dataset_config.py / utils.py @ 00caa53a...: parse_and_normalize_split,
    convert_split_vector_to_split_matrix, normalize.
The random generator is numpy's own legacy numpy.random.RandomState (MT19937), exactly as
Megatron-Core uses it: RandomState(seed).shuffle(...) on the int32 document index and on the
uint32 (int64 when large) shuffle index.

Output (all little-endian, no headers): DIR/golden.json describes every case and names raw
arrays DIR/<case>.<array>.<i16|i32|i64>. Regenerate only when the Megatron logic changes.
"""
import json
import math
import os
import re
import sys

import numpy


# ---- Megatron-Core logic, re-implemented ---------------------------------------------------------

def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def split_matrix(split_str):
    split = list(map(float, re.findall(r"[.0-9]+", split_str)))
    split = split + [0.0 for _ in range(3 - len(split))]
    split = normalize(split)
    expansion = [0.0]
    for s in split:
        expansion.append(expansion[-1] + s)
    matrix = []
    for a, b in zip(expansion[:-1], expansion[1:]):
        matrix.append(None if b <= a else (a, b))
    return matrix


def split_range(matrix, part, num_elements):
    if matrix[part] is None:
        return None
    beg = int(round(matrix[part][0] * float(num_elements)))
    end = int(round(matrix[part][1] * float(num_elements)))
    return beg, end


def num_epochs_for(tokens_per_epoch, seq_len, num_samples):
    num_epochs = 1
    num_tokens = tokens_per_epoch
    requested = num_samples * seq_len + 1
    while num_tokens < requested:
        num_epochs += 1
        num_tokens += tokens_per_epoch
    return num_epochs


def build_document_index(documents, num_epochs, rs, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1).astype(numpy.int32)
        rs.shuffle(document_index)
        return document_index
    first = build_document_index(documents, num_epochs - 1, rs, False)
    last = build_document_index(documents, 1, rs, False)
    return numpy.concatenate((first, last))


def build_sample_idx(sizes, document_index, seq_len, num_epochs, tokens_per_epoch):
    num_samples = (num_epochs * tokens_per_epoch - 1) // seq_len
    out = numpy.zeros((num_samples + 1, 2), dtype=numpy.int64)
    k, d, off = 1, 0, 0
    while k <= num_samples:
        remaining = seq_len + 1
        while remaining != 0:
            doc_len = int(sizes[document_index[d]]) - off
            remaining -= doc_len
            if remaining <= 0:
                off += remaining + doc_len - 1
                remaining = 0
            else:
                if d == len(document_index) - 1:
                    assert k == num_samples
                    off = int(sizes[document_index[d]]) - 1
                    break
                d += 1
                off = 0
        out[k, 0] = d
        out[k, 1] = off
        k += 1
    return out


def build_shuffle_index(num_samples, total_size, rs):
    dtype_ = numpy.uint32
    if total_size >= (numpy.iinfo(numpy.uint32).max - 1):
        dtype_ = numpy.int64
    first = numpy.arange(start=0, stop=num_samples, step=1, dtype=dtype_)
    rs.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(start=num_samples, stop=total_size, step=1, dtype=dtype_)
    rs.shuffle(last)
    return numpy.concatenate((first, last))


def gpt_indices(sizes, begin, end, seq_len, num_samples, seed):
    indices = numpy.arange(begin, end, dtype=numpy.int32)
    tokens_per_epoch = int(numpy.sum(sizes[indices]))
    num_epochs = num_epochs_for(tokens_per_epoch, seq_len, num_samples)
    separate = False
    sans = None
    if num_epochs > 1:
        sans = ((num_epochs - 1) * tokens_per_epoch - 1) // seq_len
        from_final = num_samples - sans
        per_epoch = (tokens_per_epoch - 1) // seq_len
        assert 0 <= from_final <= per_epoch + 1
        separate = from_final < int(0.80 * per_epoch)
    rs = numpy.random.RandomState(seed)
    doc = build_document_index(indices, num_epochs, rs, separate)
    sample = build_sample_idx(sizes, doc, seq_len, num_epochs, tokens_per_epoch)
    n = sample.shape[0] - 1
    shuffle = build_shuffle_index(sans if separate else n, n, rs)
    return dict(doc=doc, sample=sample, shuffle=shuffle, epochs=num_epochs,
                tokens_per_epoch=tokens_per_epoch, separate_final_epoch=separate)


def blend_sizes(weights, size, surplus):
    target = [int(math.ceil(size * w)) for w in weights]
    buffered = [int(math.ceil(math.ceil(size * w) * (1 + surplus))) for w in weights]
    return target, buffered


def build_blending_indices(weights, size):
    dataset_index = numpy.zeros(size, dtype=numpy.int16)
    dataset_sample_index = numpy.zeros(size, dtype=numpy.int64)
    current = [0] * len(weights)
    for s in range(size):
        sd = max(float(s), 1.0)
        best, best_err = 0, weights[0] * sd - float(current[0])
        for d in range(1, len(weights)):
            e = weights[d] * sd - float(current[d])
            if e > best_err:
                best, best_err = d, e
        dataset_index[s] = best
        dataset_sample_index[s] = current[best]
        current[best] += 1
    return dataset_index, dataset_sample_index


# ---- golden cases --------------------------------------------------------------------------------

def interval(rs, mx):
    """numpy's random_interval, through RandomState's raw MT19937 output (checked against
    RandomState.randint below)."""
    if mx == 0:
        return 0
    mask = mx
    for s in (1, 2, 4, 8, 16, 32):
        mask |= mask >> s
    while True:
        if mx <= 0xFFFFFFFF:
            v = int(rs._bit_generator.random_raw()) & mask
        else:
            hi = int(rs._bit_generator.random_raw())
            v = ((hi << 32) | int(rs._bit_generator.random_raw())) & mask
        if v <= mx:
            return v


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    files = []

    def save(case, name, arr, dtype):
        fname = f"{case}.{name}.{ {'int16': 'i16', 'int32': 'i32', 'int64': 'i64'}[dtype] }"
        numpy.ascontiguousarray(arr, dtype=numpy.dtype(dtype).newbyteorder("<")).tofile(
            os.path.join(out_dir, fname))
        files.append(fname)
        return fname

    golden = {"numpy_version": numpy.__version__, "mt": [], "shuffle": [], "normalize": [],
              "split": [], "gpt": [], "blend": []}

    # MT19937 raw outputs and bounded intervals.
    for seed in (0, 1, 42, 1234, 2**31, 2**32 - 1):
        rs = numpy.random.RandomState(seed)
        raw = [int(x) for x in rs._bit_generator.random_raw(16)]
        maxes = [1, 2, 5, 1000, 2**31 - 1, 2**32 - 1, 2**32, 2**40 + 12345, 2**63 - 1]
        rs1 = numpy.random.RandomState(seed)
        rs2 = numpy.random.RandomState(seed)
        iv = []
        for mx in maxes:
            a = [int(rs1.randint(0, mx + 1, dtype=numpy.uint64)) for _ in range(8)]
            b = [interval(rs2, mx) for _ in range(8)]
            assert a == b, (seed, mx)
            iv.append({"max": str(mx), "values": [str(v) for v in a]})
        golden["mt"].append({"seed": seed, "raw": raw, "intervals": iv})

    # Shuffles of arange(n), int32 and int64 give the same permutation.
    for seed, n in ((0, 1), (0, 2), (1234, 10), (7, 1000), (2**32 - 1, 3000)):
        a32 = numpy.arange(n, dtype=numpy.int32)
        numpy.random.RandomState(seed).shuffle(a32)
        a64 = numpy.arange(n, dtype=numpy.int64)
        numpy.random.RandomState(seed).shuffle(a64)
        assert (a32 == a64).all()
        golden["shuffle"].append({"seed": seed, "n": n,
                                  "file": save(f"shuffle_{seed}_{n}", "perm", a32, "int32")})

    # normalize (numpy's pairwise float64 sum), as hex floats.
    rs = numpy.random.RandomState(99)
    for n in (1, 3, 7, 8, 9, 20, 129, 300):
        w = (rs.random_sample(n) * 10.0 + 1e-3).tolist()
        golden["normalize"].append({"weights": [x.hex() for x in w],
                                    "normalized": [x.hex() for x in normalize(w)]})
    w = [0.37, 1.2, 2.9]
    golden["normalize"].append({"weights": [x.hex() for x in w],
                                "normalized": [x.hex() for x in normalize(w)]})

    # Splits.
    for s, n in (("969,30,1", 1000), ("969,30,1", 12345), ("98,2,0", 777), ("1", 10),
                 ("0.3,0.3,0.4", 3), ("99,1", 50), ("1,1,1", 1000000007), ("969,30,1", 10)):
        m = split_matrix(s)
        golden["split"].append({"split": s, "n": n,
                                "ranges": [split_range(m, p, n) for p in range(3)]})

    # GPT indices.
    def lengths(seed, n, lo, hi, zeros=0):
        r = numpy.random.RandomState(seed)
        x = r.randint(lo, hi, size=n).astype(numpy.int32)
        if zeros:
            x[r.choice(n, zeros, replace=False)] = 0
        return x

    gpt_cases = [
        # name, lengths, split (str or None), part, seq_len, num_samples, seed, expect_separate
        ("one_epoch", lengths(1, 500, 1, 300), None, 0, 64, 200, 1234, False),
        ("multi_epoch", lengths(2, 60, 5, 200), None, 0, 32, 550, 1234, False),
        ("separate_final", lengths(3, 80, 1, 120), None, 0, 16, 580, 1234, True),
        ("seed0_zeros", lengths(4, 300, 1, 90, zeros=20), None, 0, 31, 1200, 0, None),
        ("long_docs", lengths(5, 40, 500, 3000), None, 0, 128, 2000, 2**32 - 1, None),
        ("split_valid", lengths(6, 1000, 1, 60), "969,30,1", 1, 20, 300, 1234, None),
        ("split_train", lengths(6, 1000, 1, 60), "969,30,1", 0, 20, 1000, 5, None),
    ]
    seen_sep = set()
    for name, sizes, split, part, seq_len, ns, seed, expect in gpt_cases:
        begin, end = 0, len(sizes)
        if split is not None:
            begin, end = split_range(split_matrix(split), part, len(sizes))
        g = gpt_indices(sizes, begin, end, seq_len, ns, seed)
        if expect is not None:
            assert g["separate_final_epoch"] == expect, (name, g["epochs"])
        seen_sep.add(g["separate_final_epoch"])
        golden["gpt"].append({
            "name": name, "seq_len": seq_len, "num_samples": ns, "seed": seed,
            "split": split, "part": part, "seq_begin": begin, "seq_end": end,
            "num_epochs": g["epochs"], "tokens_per_epoch": g["tokens_per_epoch"],
            "separate_final_epoch": g["separate_final_epoch"],
            "lengths": save(name, "lengths", sizes, "int32"),
            "document_index": save(name, "document_index", g["doc"], "int32"),
            "sample_index": save(name, "sample_index", g["sample"], "int64"),
            "shuffle_index": save(name, "shuffle_index", g["shuffle"], "int64"),
        })
    assert seen_sep == {True, False}

    # A blend of three sources with odd weights, each split "969,30,1" (train part).
    raw_weights = [0.37, 1.2, 2.9]
    weights = normalize(raw_weights)
    size, seq_len, seed, surplus, split = 1500, 24, 1234, 0.005, "969,30,1"
    src_lengths = [lengths(10, 40, 1, 100), lengths(11, 300, 1, 100), lengths(12, 500, 1, 200)]
    target, buffered = blend_sizes(weights, size, surplus)
    blend_size = sum(target)
    di, dsi = build_blending_indices(weights, blend_size)
    sources = []
    for k, sizes in enumerate(src_lengths):
        begin, end = split_range(split_matrix(split), 0, len(sizes))
        g = gpt_indices(sizes, begin, end, seq_len, buffered[k], seed)
        used = int((di == k).sum())
        assert used <= g["sample"].shape[0] - 1
        sources.append({
            "weight": raw_weights[k], "normalized": weights[k].hex(), "target": target[k],
            "requested": buffered[k], "used": used, "seq_begin": begin, "seq_end": end,
            "num_epochs": g["epochs"], "num_samples_built": int(g["sample"].shape[0] - 1),
            "tokens_per_epoch": g["tokens_per_epoch"],
            "separate_final_epoch": g["separate_final_epoch"],
            "lengths": save(f"blend_src{k}", "lengths", sizes, "int32"),
            "document_index": save(f"blend_src{k}", "document_index", g["doc"], "int32"),
            "sample_index": save(f"blend_src{k}", "sample_index", g["sample"], "int64"),
            "shuffle_index": save(f"blend_src{k}", "shuffle_index", g["shuffle"], "int64"),
        })
    golden["blend"].append({
        "name": "three_sources", "num_samples": size, "seq_len": seq_len, "seed": seed,
        "surplus": surplus, "split": split, "part": 0, "size": blend_size, "sources": sources,
        "dataset_index": save("blend", "dataset_index", di, "int16"),
        "dataset_sample_index": save("blend", "dataset_sample_index", dsi, "int64"),
    })

    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(out_dir, x)) for x in files + ["golden.json"])
    print(f"wrote {len(files) + 1} files, {total} bytes, to {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         os.path.join(os.path.dirname(os.path.abspath(__file__)), "sampling"))
