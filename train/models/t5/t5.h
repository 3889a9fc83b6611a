/* t5.h - private to train/models/t5/: the T5 encoder family (model.arch t5), T5 v1.1's (gated
 * tanh-GeLU feed-forward, as PixArt-alpha's and Open-Sora's T5-XXL) and v1.0's (ReLU) encoder as
 * Hugging Face's T5EncoderModel computes it, used frozen to encode captions (the encode objective,
 * objectives/encode_model.h). t5.c holds its keys, shape, tensors, activations and Hugging Face
 * files, t5_pass.c the forward.
 */
#ifndef INGOT_T5_H
#define INGOT_T5_H

#include "family/family.h"
#include "objectives/encode_model.h"

enum { T5_GATED_GELU = 0, T5_RELU }; /* feed_forward_proj: v1.1's and v1.0's */

/* The family's own configuration (ig_model_config.own), by Hugging Face's T5Config names. */
typedef struct t5_shape {
    int d_kv;         /* a head's width (n_head x d_kv need not be d_model) */
    int d_ff;         /* the feed-forward's width */
    int buckets;      /* relative_attention_num_buckets */
    int max_distance; /* relative_attention_max_distance */
    int ffn;          /* T5_GATED_GELU or T5_RELU (model.feed_forward_proj) */
} t5_shape;
IG_DEFINE_OWN(t5_shape)
static inline t5_shape t5_own(const ig_model_config *c) {
    return IG_OWN_GET(t5_shape, c);
}

/* A layer's tensors, in the table's order. */
enum {
    T5_LN0,  /* layer.0.layer_norm [C] */
    T5_QKV,  /* q, k, v [3 I, C] (I = n_head d_kv), one tensor: the packed rows attention reads */
    T5_O,    /* [C, I] */
    T5_LN1,  /* layer.1.layer_norm [C] */
    T5_WI,   /* gated: wi_0 [F, C] (the gate); relu: wi [F, C] */
    T5_WI1,  /* gated: wi_1 [F, C] (the linear half); relu: wo [C, F] */
    T5_WO,   /* gated: wo [C, F] */
    T5_ROLES /* the most tensors a layer has */
};

/* The places (elements of the one slot; fp32 and int32 apart) of an encoding of up to B captions
 * of T tokens: the rows of caption b are [b T, b T + T), the first lens[b] of them real. */
typedef struct t5_state {
    int per_layer;          /* tensors of a layer: 6 (relu) or 7 (gated) */
    uint64_t x, h;          /* [N, C] the residual stream, its norm */
    uint64_t qkv, att, out; /* [N, 3 I], [N, I], [N, C] (a sublayer's output) */
    uint64_t f1, f2, f3;    /* [N, F]: gate (relu: wi's), up, gelu(gate) * up */
    uint64_t bias;          /* [n_head, T, T] the relative position bias */
    uint64_t rstd;          /* fp32 [N] */
    uint64_t ids, klen;     /* int32 [N], [B] */
} t5_state;

static inline t5_state *t5_of(const ig_model *m) {
    return (t5_state *)m->fs;
}
/* Tensor indices: the embedding 0, the bias table 1, layer l's role r, the final norm last. */
static inline void *t5_param(const ig_model *m, int l, int role) {
    return ig_model_param(m, 2 + (size_t)l * (size_t)t5_of(m)->per_layer + (size_t)role);
}

/* t5_pass.c */
ig_status t5_encode(ig_model *m, int B, const int32_t *const *ids, const int *lens,
                    float *const *out, ig_err *err);

#endif
