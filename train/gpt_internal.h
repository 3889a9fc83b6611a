/* gpt_internal.h - private to train/: the GPT model's state (tensor table, backend buffers, the
 * layout of one micro-batch's activations), shared by gpt_model.c (table, memory, init) and
 * gpt_pass.c (forward and backward). */
#ifndef INGOT_GPT_INTERNAL_H
#define INGOT_GPT_INTERNAL_H

#include "train/train.h"

typedef enum ig_gpt_init {
    IG_INIT_ZERO = 0,
    IG_INIT_ONE,
    IG_INIT_NORMAL,    /* normal(0, 0.02) */
    IG_INIT_RESIDUAL,  /* normal(0, 0.02 / sqrt(2 n_layer)) */
    IG_INIT_EMBEDDING, /* normal(0, 0.02) on the vocabulary's rows, 0 on the padded ones */
} ig_gpt_init;

typedef struct ig_gpt_param_info {
    char name[64];
    ig_gpt_init init;
} ig_gpt_param_info;

/* Offsets (in elements) of one layer's activations: act type for the tensors, fp32 for the
 * LayerNorm statistics and the log-sum-exp of attention. N = B * T. */
typedef struct ig_gpt_layer_acts {
    uint64_t ln1, ln1_mean, ln1_rstd; /* [N, C], [N], [N] */
    uint64_t qkv;                     /* [N, 3C] */
    uint64_t atty;                    /* [N, C] attention output, heads concatenated */
    uint64_t lse;                     /* [B, NH, T] */
    uint64_t attproj;                 /* [N, C] */
    uint64_t res2;                    /* [N, C] residual after attention */
    uint64_t ln2, ln2_mean, ln2_rstd; /* [N, C], [N], [N] */
    uint64_t fch;                     /* [N, 4C] MLP pre-activation, without its bias */
    uint64_t fch_gelu;                /* [N, 4C] */
    uint64_t fcproj;                  /* [N, C] */
    uint64_t res3;                    /* [N, C] residual after the MLP (the layer's output) */
} ig_gpt_layer_acts;

typedef struct ig_gpt_acts {
    uint64_t encoded; /* [N, C] token + position embeddings */
    ig_gpt_layer_acts *layer;
    uint64_t lnf, lnf_mean, lnf_rstd; /* [N, C], [N], [N] */
    uint64_t logits;                  /* [N, Vp]; the backward overwrites them with their grads */
    /* backward scratch (act type) */
    uint64_t dres, dln, datty, dqkv, dfcg, dfch;
    uint64_t losses, dloss; /* [N] fp32 */
    uint64_t n_act, n_f32, n_i32;
} ig_gpt_acts;

struct ig_gpt {
    ig_ctx *ctx;
    ig_backend *be;
    ig_gpt_config cfg;
    int B, T; /* the largest micro-batch the activations hold */
    ig_gpt_tensor *tensors;
    ig_gpt_param_info *info;
    size_t n_tensors;
    uint64_t n_params;
    /* backend buffers */
    void *params, *grads; /* [n_params] act type */
    float *adam_m, *adam_v;
    void *act;    /* [acts.n_act] act type */
    float *f32;   /* [acts.n_f32] */
    int32_t *i32; /* tokens [N], targets [N], document ids [N] */
    ig_gpt_acts acts;
    size_t as; /* bytes per act element */
    /* host staging for one micro-batch */
    int32_t *h_i32; /* [3N]: the same three arrays as i32 */
    float *h_f32;   /* [2N]: losses, dloss */
};

/* Draws every tensor's initial values into host[n_params] (fp32, table order). */
ig_status ig_gpt_init_host(const ig_gpt *m, ig_ctx *ctx, uint64_t seed, float *host);

#endif
