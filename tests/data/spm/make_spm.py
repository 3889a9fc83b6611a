#!/usr/bin/env python3
"""make_spm.py - SentencePiece models and their reference ids for test_tokenizer_spm.

Trains small SentencePiece models with Debian's `spm_train` on the team's shared corpora
(../shared/data/text/*.txt), and writes, from SentencePiece itself, the ids that ingot must
reproduce:

  MODEL.model                  the models (spm_train, --num_threads=1: the same bytes every run;
                               *_unused_4k: two of them with some pieces made UNUSED here)
  unigram_nfkc_8k.tokenizer.json  a Hugging Face tokenizer.json (Unigram) converted from
                               unigram_nfkc_8k.model by this script
  sample.txt                   a few hundred hard lines (one text per line, as spm_encode reads)
  sample_docs.jsonl            documents with newlines, tabs and carriage returns
  ref/MODEL.sample.json        per line of sample.txt its ids and its decoded text, per document
                               of sample_docs.jsonl the same
  ref/MODEL.corpora.bin.zst    per line of every shared corpus (text/NAME.txt): its id count and
                               a 16-bit check of its ids, and per corpus the count of lines and
                               ids and a 64-bit check of all its ids (format below)
  ../../fuzz/corpus/fuzz_spm/  small models, the seeds of tests/fuzz/fuzz_spm.c (a mode byte, then
                               the file)

Every id is computed twice, by `spm_encode --output_format=id` and by python3-sentencepiece
(`SentencePieceProcessor.encode` of the line's bytes), and the script stops if they differ
anywhere. Run it from the checkout with Debian's packages (the tests need neither):

    apt-get install -y sentencepiece python3-sentencepiece zstd
    /usr/bin/python3 tests/data/spm/make_spm.py [SHARED_DATA_DIR]

The checks are FNV-1a over 32-bit words: h = (h ^ id) * 16777619 mod 2^32 from 2166136261 for a
line (the 16-bit check is (h ^ h >> 16) & 0xFFFF), and h = (h ^ id) * 1099511628211 mod 2^64 from
14695981039346656037 over every id of a corpus followed by 0xFFFFFFFF per line. The .bin (little
endian) is "IGSPMREF", u32 version 1, u32 corpora, then per corpus: u8 name length, the name, u32
lines, u64 ids, u64 stream check, and per line a LEB128 id count and a u16 check.
"""
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
CORPORA = ["tinyshakespeare", "udhr_multilingual", "c_code", "emoji_test", "edge_cases"]

# (name, spm_train options). The corpus is the five shared .txt files concatenated.
MODELS = [
    ("unigram_nfkc_8k", ["--model_type=unigram", "--vocab_size=8000",
                         "--normalization_rule_name=nmt_nfkc",
                         "--user_defined_symbols=<sep>,<cls>,[MASK],http://,\u2581the\u2581",
                         "--control_symbols=<ctrl>"]),
    ("unigram_bytefb_4k", ["--model_type=unigram", "--vocab_size=4000",
                           "--normalization_rule_name=nmt_nfkc_cf", "--byte_fallback=true",
                           "--character_coverage=0.98"]),
    ("unigram_identity_4k", ["--model_type=unigram", "--vocab_size=4000",
                             "--normalization_rule_name=identity",
                             "--remove_extra_whitespaces=false", "--character_coverage=0.98"]),
    ("unigram_t5_32k", ["--model_type=unigram", "--vocab_size=32000", "--pad_id=0", "--eos_id=1",
                        "--unk_id=2", "--bos_id=-1"]),
    ("bpe_4k", ["--model_type=bpe", "--vocab_size=4000", "--normalization_rule_name=identity",
                "--remove_extra_whitespaces=false", "--byte_fallback=true", "--split_digits=true",
                "--character_coverage=0.98"]),
]
# A tiny model with the user's own normalisation and denormalisation rules (a small character
# map, also a fuzz seed), trained on tinyshakespeare alone; and unigram_identity_4k and bpe_4k with
# some pieces made UNUSED (write_unused). Only sample.txt and sample_docs.jsonl are checked with
# these three.
RULES = "41\t61\n42\t62\nFF21\t61\n2160\t49\n2161\t49 49\n3000\t20\n"  # A->a B->b Ａ->a Ⅰ Ⅱ, U+3000
DERULES = "61\t41\n"  # a -> A after decoding

FNV32_BASIS, FNV32_PRIME = 2166136261, 16777619
FNV64_BASIS, FNV64_PRIME = 14695981039346656037, 1099511628211


def line_check(ids):
    h = FNV32_BASIS
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFF)) * FNV32_PRIME) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & 0xFFFF


def leb128(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def lines_of(data):
    """The lines spm_encode reads (std::getline: split at \\n, a last line without one counts)."""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return parts


def spm_encode(model, path):
    out = subprocess.run(["spm_encode", "--model", model, "--output_format=id"],
                         stdin=open(path, "rb"), capture_output=True, check=True).stdout
    return [[int(x) for x in l.split()] for l in lines_of(out)]


def sample_lines(shared):
    """Hard cases by hand, then lines of every corpus (all scripts of the UDHR, emoji, code)."""
    L = [
        b"", b" ", b"   ", b"\t", b"\t\t  \t", b"Hello world", b"  leading and trailing  ",
        b"many     spaces \t\t and\ttabs", b"line with a carriage return\r", b"\r\r\r",
        b"a\x00b NUL \x00\x00", b"controls \x01\x02\x1b[0m\x7f\x1f end", b"\x0b\x0c vertical tab, form feed",
        "U+0085 \u0085 NBSP \u00a0 en\u2002em\u2003thin\u2009hair\u200a ideo\u3000graphic".encode(),
        "zero\u200bwidth \ufeffBOM\u200d\u200c joiners \u2028\u2029 separators".encode(),
        "NFKC: \ufb01 \ufb02 \u2460 \u00b2 \u00bd \uff71\uff72\uff73 \uff21\uff22\uff23 \u3300 \u337b \u210c".encode(),
        "more NFKC: \u2126 \u212a \u212b \ufdfa \u01c5 \u33a1 \u2163 \u00aa \u00ba \u2075 \u2082".encode(),
        "case: \u00c0\u00c9\u00ce \u03a3\u0391\u03a3 stra\u00dfe \u1e9e \u0130stanbul \ufb00 \u0149 \u01f0".encode(),
        "combining: e\u0301 n\u0303 A\u030a \u00c5 \u1100\u1161\u11a8 \uac01 \u0915\u094d\u0937".encode(),
        "\u2581".encode(), "a\u2581b".encode(), "\u2581\u2581 x \u2581".encode(), " \u2581 ".encode(),
        b"<sep>", b"x<sep>y <sep><sep> <cls>[MASK] http://example.com/a?b=c",
        " the the\u2581the\u2581 \u2581the\u2581x".encode(), b"</s> <s> <unk> <pad> <ctrl> <0x41>",
        "unknown: \U00013000\U00013001 \U00010330\U00010331 \ua9b2\ua98f \u16a0\u16a2".encode(),
        "\U00013000\U00013001\U00013002\U00013003 \U00013000 x\U00013000y".encode(),
        "emoji: \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 \U0001f1ef\U0001f1f5 "
        "\U0001f44d\U0001f3fd 1\ufe0f\u20e3 \u2764\ufe0f".encode(),
        b"invalid: \xff\xfe \xc3 x \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf \x80\x80",
        b"\xff", b"\xe2\x96", b"caf\xc3\xa9 \xc3\xa9t\xc3\xa9",
        b"digits 12345 3.14159 1,000,000 0x1F 2024-05-06", b"a" * 400,
        b"pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious",
        "mixed: Hello \u043c\u0438\u0440 \u4e16\u754c \u0645\u0631\u062d\u0628\u0627 "
        "\u05e9\u05dc\u05d5\u05dd \u0928\u092e\u0938\u094d\u0924\u0947 \u3053\u3093\u306b\u3061\u306f".encode(),
        b"int main(void) {\treturn 0; }   // comment", b"\t\tif (x == y) { /* nested */ }",
        "\u00a0\u00a0leading NBSP and trailing ideographic\u3000\u3000".encode(),
        "fullwidth\uff01\uff1f\uff08\uff09 \uff10\uff11\uff12".encode(),
    ]
    texts = {}
    for c in CORPORA:
        texts[c] = lines_of(open(os.path.join(shared, "text", c + ".txt"), "rb").read())
    # every language of the UDHR (a document each): its first long line, cut at 120 bytes (at a
    # character)
    with open(os.path.join(shared, "text", "udhr_multilingual.jsonl"), encoding="utf-8") as f:
        for doc in f:
            long = [l for l in json.loads(doc)["text"].split("\n") if len(l.encode()) > 60]
            if long:
                cut = long[min(1, len(long) - 1)].encode()[:120]
                while cut and (cut[-1] & 0xC0) == 0x80:
                    cut = cut[:-1]
                if cut and cut[-1] >= 0xC0:
                    cut = cut[:-1]
                L.append(cut)
    L += [l for l in texts["emoji_test"] if b"\xe2\x80\x8d" in l][:20]  # ZWJ sequences
    L += [l for l in texts["emoji_test"] if b"skin tone" in l][:6]
    L += [l for l in texts["c_code"] if l.startswith(b"\t")][:15]
    edge = [l for l in texts["edge_cases"] if any(b >= 0x80 or b < 0x20 for b in l)]
    L += edge[:100]
    seen, out = set(), []
    for l in L:
        if l not in seen:
            seen.add(l)
            out.append(l)
    return out


def sample_docs(shared):
    docs = [
        "two\nlines", "\n\nleading newlines", "trailing newline\n", "tabs\tand\r\nCRLF\r\n",
        "paragraph one.\n\nparagraph two.\n", "  \n  \n", "</s>\n<sep>\n\u2581\n",
    ]
    with open(os.path.join(shared, "text", "edge_cases.jsonl"), encoding="utf-8") as f:
        edge = [json.loads(l)["text"] for l in f]
    docs += [d for d in edge if "\n" in d or "\r" in d][:20]
    with open(os.path.join(shared, "text", "tinyshakespeare.jsonl"), encoding="utf-8") as f:
        docs += [json.loads(l)["text"] for l in f][:10]
    return docs


def read_model_proto(path):
    """The fields write_tokenizer_json needs, read from the protobuf by hand (no protobuf module)."""
    data = open(path, "rb").read()

    def varint(b, i):
        x = s = 0
        while True:
            c = b[i]
            i += 1
            x |= (c & 0x7F) << s
            s += 7
            if c < 0x80:
                return x, i

    def fields(b):
        i = 0
        while i < len(b):
            tag, i = varint(b, i)
            f, wt = tag >> 3, tag & 7
            if wt == 0:
                v, i = varint(b, i)
            elif wt == 1:
                v, i = b[i:i + 8], i + 8
            elif wt == 5:
                v, i = b[i:i + 4], i + 4
            elif wt == 2:
                n, i = varint(b, i)
                v, i = b[i:i + n], i + n
            else:
                raise ValueError("wire type %d" % wt)
            yield f, v

    pieces, norm, trainer = [], {}, {}
    for f, v in fields(data):
        if f == 1:
            p = {"piece": b"", "score": 0.0, "type": 1}
            for pf, pv in fields(v):
                if pf == 1:
                    p["piece"] = pv
                elif pf == 2:
                    p["score"] = struct.unpack("<f", pv)[0]
                elif pf == 3:
                    p["type"] = pv
            pieces.append(p)
        elif f == 2:
            for tf, tv in fields(v):
                trainer[tf] = tv
        elif f == 3:
            for nf, nv in fields(v):
                norm[nf] = nv
    return pieces, norm, trainer


def pb_varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def write_unused(src, dst):
    """src with every piece id % 7 == 3 of type NORMAL and at least two characters made UNUSED:
    SentencePiece never segments text into an unused piece (BPE undoes merges into one)."""
    data = open(src, "rb").read()
    pieces, _, _ = read_model_proto(src)
    out = bytearray()
    for i, p in enumerate(pieces):
        t = p["type"]
        if i % 7 == 3 and t == 1 and len(p["piece"].decode()) >= 2:
            t = 5
        msg = (b"\x0a" + pb_varint(len(p["piece"])) + p["piece"] + b"\x15" +
               struct.pack("<f", p["score"]) + b"\x18" + pb_varint(t))
        out += b"\x0a" + pb_varint(len(msg)) + msg
    # the other fields as they are: they follow the pieces in a serialized ModelProto
    i = 0
    while i < len(data):
        start = i
        tag, i = read_varint(data, i)
        n, i = read_varint(data, i)
        i += n
        if tag >> 3 != 1:
            out += data[start:i]
    open(dst, "wb").write(out)


def read_varint(b, i):
    x = s = 0
    while True:
        c = b[i]
        i += 1
        x |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return x, i


def write_tokenizer_json(model_path, out_path):
    pieces, norm, trainer = read_model_proto(model_path)
    unk_id = next(i for i, p in enumerate(pieces) if p["type"] == 2)
    added = []
    for i, p in enumerate(pieces):
        if p["type"] in (2, 3, 4):  # unknown and control: special; user-defined: not
            added.append({"id": i, "content": p["piece"].decode(), "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": p["type"] != 4})
    charsmap = norm.get(2, b"")
    norms = []
    if charsmap:
        norms.append({"type": "Precompiled",
                      "precompiled_charsmap": base64.b64encode(charsmap).decode()})
    if norm.get(4, 1):  # remove_extra_whitespaces
        norms += [{"type": "Strip", "strip_left": False, "strip_right": True},
                  {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]
    add_prefix = bool(norm.get(3, 1))
    meta = {"type": "Metaspace", "replacement": "\u2581",
            "prepend_scheme": "always" if add_prefix else "never", "split": True}
    eos = next((i for i, p in enumerate(pieces) if p["piece"] == b"</s>"), None)
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": norms} if norms else None,
        "pre_tokenizer": meta,
        "post_processor": None if eos is None else {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}},
                     {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [eos], "tokens": ["</s>"]}}},
        "decoder": {"type": "Metaspace", "replacement": "\u2581",
                    "prepend_scheme": "always" if add_prefix else "never", "split": True},
        "model": {"type": "Unigram", "unk_id": unk_id,
                  "vocab": [[p["piece"].decode(), p["score"]] for p in pieces],
                  "byte_fallback": bool(trainer.get(35, 0))},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=None, separators=(",", ":"))


def train(tmp, name, opts, corpus):
    cmd = ["spm_train", "--input=" + corpus, "--model_prefix=" + name, "--num_threads=1",
           "--input_sentence_size=0", "--minloglevel=2"] + opts
    subprocess.run(cmd, cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.copy(os.path.join(tmp, name + ".model"), os.path.join(HERE, name + ".model"))


def check_same(a, b, what):
    if a != b:
        k = next(i for i in range(min(len(a), len(b))) if a[i] != b[i]) if len(a) == len(b) else -1
        sys.exit("make_spm.py: spm_encode and python3-sentencepiece differ on %s (line %d)" % (what, k))


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "IG_SHARED_DATA", os.path.join(HERE, "..", "..", "..", "..", "shared", "data"))
    for tool in ("spm_train", "spm_encode", "zstd"):
        if not shutil.which(tool):
            sys.exit("make_spm.py: %s is missing (apt-get install sentencepiece zstd)" % tool)
    os.makedirs(os.path.join(HERE, "ref"), exist_ok=True)
    tmp = tempfile.mkdtemp()
    try:
        corpus = "corpus.txt"  # the name spm_train records in the models
        with open(os.path.join(tmp, corpus), "wb") as out:
            for c in sorted(CORPORA):
                out.write(open(os.path.join(shared, "text", c + ".txt"), "rb").read())
                out.write(b"\n")
        models = [n for n, _ in MODELS]
        for name, opts in MODELS:
            print("training", name, flush=True)
            train(tmp, name, opts, corpus)
        # the tiny model with rules
        with open(os.path.join(tmp, "rules.tsv"), "w") as f:
            f.write(RULES)
        with open(os.path.join(tmp, "derules.tsv"), "w") as f:
            f.write(DERULES)
        shutil.copy(os.path.join(shared, "text", "tinyshakespeare.txt"), os.path.join(tmp, "ts.txt"))
        train(tmp, "unigram_rules_300", ["--model_type=unigram", "--vocab_size=300",
                                         "--normalization_rule_tsv=rules.tsv",
                                         "--denormalization_rule_tsv=derules.tsv"], "ts.txt")
        models.append("unigram_rules_300")
        # fuzz seeds (tests/fuzz/corpus/fuzz_spm/: a mode byte, then the file): small models
        with open(os.path.join(tmp, "small.txt"), "wb") as f:
            f.write(b"\n".join(lines_of(open(os.path.join(tmp, "ts.txt"), "rb").read())[:400]))
        seeds = os.path.join(HERE, "..", "..", "fuzz", "corpus", "fuzz_spm")
        os.makedirs(seeds, exist_ok=True)
        for seed, opts in (("tiny_unigram", ["--model_type=unigram", "--vocab_size=80",
                                             "--normalization_rule_name=identity",
                                             "--user_defined_symbols=<sep>"]),
                           ("tiny_bpe", ["--model_type=bpe", "--vocab_size=80",
                                         "--normalization_rule_name=identity",
                                         "--remove_extra_whitespaces=false"]),
                           ("tiny_bytefb", ["--model_type=unigram", "--vocab_size=330",
                                            "--byte_fallback=true", "--normalization_rule_tsv=rules.tsv"])):
            subprocess.run(["spm_train", "--input=small.txt", "--model_prefix=" + seed,
                            "--num_threads=1", "--minloglevel=2", "--hard_vocab_limit=false"] + opts,
                           cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            data = open(os.path.join(tmp, seed + ".model"), "rb").read()
            open(os.path.join(seeds, seed), "wb").write(b"\x00" + data)
            open(os.path.join(seeds, seed + "_by_contents"), "wb").write(b"\x01" + data)
        rules = open(os.path.join(HERE, "unigram_rules_300.model"), "rb").read()
        open(os.path.join(seeds, "rules"), "wb").write(b"\x00" + rules)
        for src, dst in (("unigram_identity_4k", "unigram_unused_4k"), ("bpe_4k", "bpe_unused_4k")):
            write_unused(os.path.join(HERE, src + ".model"), os.path.join(HERE, dst + ".model"))
            models.append(dst)
        write_tokenizer_json(os.path.join(HERE, "unigram_nfkc_8k.model"),
                             os.path.join(HERE, "unigram_nfkc_8k.tokenizer.json"))

        lines = sample_lines(shared)
        with open(os.path.join(HERE, "sample.txt"), "wb") as f:
            f.write(b"".join(l + b"\n" for l in lines))
        docs = sample_docs(shared)
        with open(os.path.join(HERE, "sample_docs.jsonl"), "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")

        summary = []
        for name in models:
            path = os.path.join(HERE, name + ".model")
            sp = spm.SentencePieceProcessor(model_file=path)
            ids = spm_encode(path, os.path.join(HERE, "sample.txt"))
            py = [sp.encode(l) for l in lines]
            check_same(ids, py, name + " sample.txt")
            ref = {"model": name + ".model", "eos_id": sp.eos_id(), "unk_id": sp.unk_id(),
                   "vocab_size": sp.get_piece_size(),
                   "lines": ids, "decoded": [sp.decode(i) for i in ids],
                   "docs": [sp.encode(d) for d in docs]}
            ref["docs_decoded"] = [sp.decode(i) for i in ref["docs"]]
            with open(os.path.join(HERE, "ref", name + ".sample.json"), "w", encoding="utf-8") as f:
                json.dump(ref, f, ensure_ascii=False, separators=(",", ":"))
                f.write("\n")
            if name in ("unigram_rules_300", "unigram_unused_4k", "bpe_unused_4k"):
                continue
            blob = bytearray(b"IGSPMREF" + struct.pack("<II", 1, len(CORPORA)))
            for c in CORPORA:
                txt = os.path.join(shared, "text", c + ".txt")
                ids = spm_encode(path, txt)
                py = [sp.encode(l) for l in lines_of(open(txt, "rb").read())]
                check_same(ids, py, "%s %s" % (name, c))
                h, total, body = FNV64_BASIS, 0, bytearray()
                for l in ids:
                    for i in l + [0xFFFFFFFF]:
                        h = ((h ^ i) * FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
                    total += len(l)
                    body += leb128(len(l)) + struct.pack("<H", line_check(l))
                blob += struct.pack("<B", len(c)) + c.encode() + struct.pack("<IQQ", len(ids), total, h)
                blob += body
                summary.append("%s %s: %d lines, %d ids, spm_encode = python" % (name, c, len(ids), total))
            raw = os.path.join(tmp, name + ".bin")
            with open(raw, "wb") as f:
                f.write(blob)
            subprocess.run(["zstd", "-19", "-q", "-f", raw, "-o",
                            os.path.join(HERE, "ref", name + ".corpora.bin.zst")], check=True)
        print("\n".join(summary))
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
