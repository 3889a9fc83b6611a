#!/usr/bin/env python3
"""Writes tests/data/tokenizer/bytes/: a GPT-2-style byte-level BPE tokenizer with no merges
(vocab.json: the 256 bytes under GPT-2's byte-to-unicode mapping, then <|endoftext|> as 256;
merges.txt: the header only). Every byte is one token, so the vocabulary is 257 (128 x 3 padded):
small models for the multi-process training tests train fast on it."""
import json
import os


def bytes_to_unicode():
    # GPT-2's table (encoder.py): printable bytes map to themselves, the others to 256 + n
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bytes")
    os.makedirs(out, exist_ok=True)
    table = bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    vocab["<|endoftext|>"] = 256
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")


if __name__ == "__main__":
    main()
