#!/usr/bin/python3
"""make_t5_goldens.py - golden features of two tiny random T5 encoders from PyTorch, for the T5
family's tests (tests/test_t5.c) and the benchmark's peer (tools/bench/t5_peer_torch.py imports
the model from here).

An encoder written here in torch, module for module as transformers' modeling_t5 builds
T5EncoderModel (transformers is not installed: this is an independent implementation of the same
computation):
  T5LayerNorm      weight * (x * rsqrt(mean(x^2) + eps)): no mean taken out, no bias
  T5Attention      q, k, v, o without biases; scores q . k with no 1/sqrt(d_kv) scaling, plus the
                   relative position bias of block 0 (an Embedding(buckets, heads) of the
                   bidirectional bucket of key position - query position), which every block
                   reuses, plus the padding mask ((1 - mask) * the dtype's lowest value on the
                   keys); softmax; the weighted values; o
  T5DenseGatedActDense  wo(gelu_new(wi_0 x) * wi_1 x)          (feed_forward_proj gated-gelu)
  T5DenseActDense       wo(relu(wi x))                         (feed_forward_proj relu)
  T5Block          x + attention(norm(x)), then x + ff(norm(x))
  T5Stack          shared embedding, the blocks, final_layer_norm (dropout: none, eval)
gelu_new is 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). The bucket is computed as
transformers computes it (the log in float32).

Two cases, each a Hugging Face model directory next to this script, with its tokenizer:
  gated/  T5 v1.1: 3 layers, d_model 48, 4 heads of d_kv 8 (n_head d_kv = 32, not d_model), d_ff
          80, 32 buckets up to distance 20, vocabulary 320, stored as a T5ForConditionalGeneration
          file (an encoder-decoder: shared.weight and its tied encoder.embed_tokens.weight, a
          one-layer decoder and lm_head, which the encoder does not use)
  relu/   T5 v1.0: 2 layers, d_model 32, 4 heads of 8, d_ff 64, 16 buckets (config.json leaves
          relative_attention_max_distance out: 128, as older configs do), vocabulary 320, stored as
          a T5EncoderModel file whose embedding is named encoder.embed_tokens.weight
  CASE/config.json, CASE/model.safetensors (F32), CASE/spiece.model (tests/data/spm/
          unigram_rules_300.model: 300 pieces, eos 2)
  CASE/expected.safetensors
      ids.K         I32 [L_K]     caption K's ids: SentencePiece's, then the eos id
      features.K    F32 [L_K, D]  its features, from one padded batch of all the captions
  CASE/captions.txt the captions, one a line (the first is empty: eos alone)
The features are computed in float64 (the truth the fp32 kernels are measured against) and stored
as float32; the script checks that each caption alone gives its batched features (float64, 1e-12).
Weights: from a torch.Generator with a fixed seed per case, normal with transformers' T5 stds
(factor 1), the norms' weights 1 + 0.2 normal (not 1: they must be applied).

Run with Debian's python3, python3-torch (torch 1.13) and python3-sentencepiece:
    /usr/bin/python3 tests/data/golden/t5/make_t5_goldens.py
"""
import json
import math
import os
import shutil
import struct

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
SPM = os.path.join(HERE, "..", "..", "spm", "unigram_rules_300.model")
CAPTIONS = [
    "",
    "A red fox.",
    "A small cat sits on the red mat, looking at the sea.",
    "Two dogs run along a wide sandy beach at sunset while waves roll in; a child in a yellow "
    "coat follows them, laughing, and a kite drifts above.",
]
CASES = [  # folder, seed, shape, how the file is stored
    ("gated", 20261201, dict(L=3, C=48, NH=4, dkv=8, F=80, buckets=32, max_distance=20, V=320,
                             ffn="gated-gelu", eps=1e-6), "t5-for-conditional-generation"),
    ("relu", 20261202, dict(L=2, C=32, NH=4, dkv=8, F=64, buckets=16, max_distance=None, V=320,
                            ffn="relu", eps=1e-6), "t5-encoder-embed-tokens"),
]


# ---- the model --------------------------------------------------------------------------------

def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


class T5LayerNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.variance_epsilon = eps

    def forward(self, x):
        # transformers takes the variance in float32 whatever x's type; here it is taken in x's
        # (float64 for the goldens, float32 for the benchmark's peer)
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


class T5DenseActDense(nn.Module):
    def __init__(self, C, F):
        super().__init__()
        self.wi = nn.Linear(C, F, bias=False)
        self.wo = nn.Linear(F, C, bias=False)

    def forward(self, x):
        return self.wo(torch.relu(self.wi(x)))


class T5DenseGatedActDense(nn.Module):
    def __init__(self, C, F):
        super().__init__()
        self.wi_0 = nn.Linear(C, F, bias=False)
        self.wi_1 = nn.Linear(C, F, bias=False)
        self.wo = nn.Linear(F, C, bias=False)

    def forward(self, x):
        return self.wo(gelu_new(self.wi_0(x)) * self.wi_1(x))


class T5LayerFF(nn.Module):
    def __init__(self, s):
        super().__init__()
        dense = T5DenseGatedActDense if s["ffn"] == "gated-gelu" else T5DenseActDense
        self.DenseReluDense = dense(s["C"], s["F"])
        self.layer_norm = T5LayerNorm(s["C"], s["eps"])

    def forward(self, x):
        return x + self.DenseReluDense(self.layer_norm(x))


def relative_position_bucket(rel, num_buckets, max_distance):
    """The bidirectional bucket of rel = key position - query position (a long tensor)."""
    num_buckets //= 2
    bucket = (rel > 0).to(torch.long) * num_buckets
    n = torch.abs(rel)
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(n.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return bucket + torch.where(n < max_exact, n, large)


class T5Attention(nn.Module):
    def __init__(self, s, has_bias):
        super().__init__()
        self.NH, self.dkv = s["NH"], s["dkv"]
        self.buckets, self.max_distance = s["buckets"], s["max_distance"] or 128
        inner = self.NH * self.dkv
        self.q = nn.Linear(s["C"], inner, bias=False)
        self.k = nn.Linear(s["C"], inner, bias=False)
        self.v = nn.Linear(s["C"], inner, bias=False)
        self.o = nn.Linear(inner, s["C"], bias=False)
        if has_bias:
            self.relative_attention_bias = nn.Embedding(self.buckets, self.NH)

    def compute_bias(self, T):
        pos = torch.arange(T, dtype=torch.long)
        rel = pos[None, :] - pos[:, None]  # key - query
        b = relative_position_bucket(rel, self.buckets, self.max_distance)
        return self.relative_attention_bias(b).permute(2, 0, 1).unsqueeze(0)  # [1, NH, T, T]

    def forward(self, x, mask, position_bias):
        B, T, _ = x.shape

        def heads(y):
            return y.view(B, T, self.NH, self.dkv).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = torch.matmul(q, k.transpose(3, 2))
        if position_bias is None:
            position_bias = self.compute_bias(T).to(x.dtype) + mask
        w = torch.softmax(scores + position_bias, dim=-1)
        out = torch.matmul(w, v).transpose(1, 2).reshape(B, T, self.NH * self.dkv)
        return self.o(out), position_bias


class T5LayerSelfAttention(nn.Module):
    def __init__(self, s, has_bias):
        super().__init__()
        self.SelfAttention = T5Attention(s, has_bias)
        self.layer_norm = T5LayerNorm(s["C"], s["eps"])

    def forward(self, x, mask, position_bias):
        y, position_bias = self.SelfAttention(self.layer_norm(x), mask, position_bias)
        return x + y, position_bias


class T5Block(nn.Module):
    def __init__(self, s, has_bias):
        super().__init__()
        self.layer = nn.ModuleList([T5LayerSelfAttention(s, has_bias), T5LayerFF(s)])

    def forward(self, x, mask, position_bias):
        x, position_bias = self.layer[0](x, mask, position_bias)
        return self.layer[1](x), position_bias


class T5Stack(nn.Module):
    def __init__(self, s, shared):
        super().__init__()
        self.embed_tokens = shared
        self.block = nn.ModuleList([T5Block(s, i == 0) for i in range(s["L"])])
        self.final_layer_norm = T5LayerNorm(s["C"], s["eps"])

    def forward(self, ids, attention_mask):
        x = self.embed_tokens(ids)
        m = attention_mask[:, None, None, :].to(x.dtype)
        mask = (1.0 - m) * torch.finfo(x.dtype).min
        position_bias = None
        for blk in self.block:
            x, position_bias = blk(x, mask, position_bias)
        return self.final_layer_norm(x)


class T5EncoderModel(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.shared = nn.Embedding(s["V"], s["C"])
        self.encoder = T5Stack(s, self.shared)

    def forward(self, ids, attention_mask):
        return self.encoder(ids, attention_mask)


def init_weights(model, s, gen):
    """transformers' T5 initialisation (factor 1), norms 1 + 0.2 normal."""
    C, F, dkv, NH = s["C"], s["F"], s["dkv"], s["NH"]
    std = {"q": (C * dkv) ** -0.5, "k": C ** -0.5, "v": C ** -0.5, "o": (NH * dkv) ** -0.5,
           "wi": C ** -0.5, "wi_0": C ** -0.5, "wi_1": C ** -0.5, "wo": F ** -0.5,
           "relative_attention_bias": C ** -0.5, "shared": 1.0}
    with torch.no_grad():
        for name, p in model.named_parameters():
            parts = name.split(".")
            if parts[-2] in ("layer_norm", "final_layer_norm"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            else:
                p.copy_(std[parts[-2]] * torch.randn(p.shape, generator=gen, dtype=torch.float64))


def encode(model, batch, dtype=torch.float64):
    """Features of each caption (a list of id lists) from one padded batch: [L_k, C] each."""
    T = max(len(x) for x in batch)
    ids = torch.zeros(len(batch), T, dtype=torch.long)
    mask = torch.zeros(len(batch), T, dtype=dtype)
    for b, x in enumerate(batch):
        ids[b, :len(x)] = torch.tensor(x, dtype=torch.long)
        mask[b, :len(x)] = 1
    with torch.no_grad():
        out = model(ids, mask)
    return [out[b, :len(x)] for b, x in enumerate(batch)]


# ---- files ------------------------------------------------------------------------------------

def save(path, tensors):
    """A safetensors file: tensors in the order given (name -> float32 or int32 tensor)."""
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        kind = "I32" if t.dtype == torch.int32 else "F32"
        data = t.numpy().astype("<i4" if kind == "I32" else "<f4").tobytes()
        header[name] = {"dtype": kind, "shape": list(t.shape), "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def config_of(s, stored):
    c = {"model_type": "t5", "vocab_size": s["V"], "d_model": s["C"], "d_kv": s["dkv"],
         "d_ff": s["F"], "num_layers": s["L"], "num_heads": s["NH"],
         "relative_attention_num_buckets": s["buckets"], "layer_norm_epsilon": s["eps"],
         "feed_forward_proj": s["ffn"], "dropout_rate": 0.1, "initializer_factor": 1.0,
         "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float32",
         "transformers_version": "4.40.0"}
    if s["max_distance"]:
        c["relative_attention_max_distance"] = s["max_distance"]
    if stored == "t5-for-conditional-generation":
        c.update({"architectures": ["T5ForConditionalGeneration"], "num_decoder_layers": 1,
                  "is_encoder_decoder": True, "tie_word_embeddings": False, "use_cache": True,
                  "decoder_start_token_id": 0, "dense_act_fn": "gelu_new", "is_gated_act": True})
    else:
        c.update({"architectures": ["T5EncoderModel"], "is_encoder_decoder": False,
                  "use_cache": False})
    return c


def weights_of(model, s, stored, gen):
    """The file's tensors: the encoder's, as the stored kind of file names them."""
    enc = {k: v.float() for k, v in model.state_dict().items() if not k.startswith("encoder.embed")}
    if stored == "t5-encoder-embed-tokens":
        enc["encoder.embed_tokens.weight"] = enc.pop("shared.weight")
        return enc
    # an encoder-decoder file: the tied copy, and a one-layer decoder and head nobody reads here
    C, I, F = s["C"], s["NH"] * s["dkv"], s["F"]
    enc["encoder.embed_tokens.weight"] = enc["shared.weight"].clone()
    extra = {"decoder.embed_tokens.weight": (s["V"], C),
             "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight":
                 (s["buckets"], s["NH"]),
             "decoder.block.0.layer.0.layer_norm.weight": (C,),
             "decoder.block.0.layer.1.EncDecAttention.q.weight": (I, C),
             "decoder.block.0.layer.1.EncDecAttention.o.weight": (C, I),
             "decoder.block.0.layer.2.DenseReluDense.wi_0.weight": (F, C),
             "decoder.block.0.layer.2.DenseReluDense.wo.weight": (C, F),
             "decoder.final_layer_norm.weight": (C,), "lm_head.weight": (s["V"], C)}
    for k, shape in extra.items():
        enc[k] = torch.randn(shape, generator=gen, dtype=torch.float64).float()
    return enc


def make(folder, seed, s, stored, sp):
    out = os.path.join(HERE, folder)
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    model = T5EncoderModel(s).double().eval()
    init_weights(model, s, gen)
    # the model computes from the weights the file holds (float32), in float64
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.float().double())
    batch = [sp.encode(c) + [sp.eos_id()] for c in CAPTIONS]
    feats = encode(model, batch)
    for k, x in enumerate(batch):
        alone = encode(model, [x])[0]
        assert torch.allclose(alone, feats[k], rtol=0, atol=1e-12), (folder, k)
    save(os.path.join(out, "model.safetensors"), weights_of(model, s, stored, gen))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config_of(s, stored), f, indent=2)
        f.write("\n")
    shutil.copyfile(SPM, os.path.join(out, "spiece.model"))
    exp = {}
    for k, x in enumerate(batch):
        exp["ids.%d" % k] = torch.tensor(x, dtype=torch.int32)
        exp["features.%d" % k] = feats[k].float()
    save(os.path.join(out, "expected.safetensors"), exp)
    with open(os.path.join(out, "captions.txt"), "w") as f:
        f.write("".join(c + "\n" for c in CAPTIONS))
    print(folder, [len(x) for x in batch], "max |feature| %.3f" % max(float(t.abs().max())
                                                                     for t in feats))


def main():
    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=SPM)
    for folder, seed, s, stored in CASES:
        make(folder, seed, s, stored, sp)


if __name__ == "__main__":
    main()
