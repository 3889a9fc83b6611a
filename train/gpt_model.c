/* gpt_model.c - GPT-2 on a compute backend: the table of named global tensors (Hugging Face's
 * names and layouts), their initialisation from (seed, name, index), one backend allocation each
 * for parameters, gradients and the AdamW moments, and the activations of one micro-batch.
 *
 * The architecture is GPT-2's: learned positions, pre-LayerNorm blocks, tanh-GeLU, tied input and
 * output embeddings, the vocabulary padded to a multiple of 128 (the padded logits are ignored by
 * the loss), no dropout. The forward and backward passes are in gpt_pass.c.
 */
#include "gpt_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ig_status ig_gpt_config_check(ig_gpt_config *c, ig_err *err) {
    struct {
        const char *name;
        int v;
    } pos[] = {{"n_layer", c->n_layer},
               {"n_head", c->n_head},
               {"d_model", c->d_model},
               {"seq_len", c->seq_len},
               {"vocab_size", c->vocab_size}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG, "model.%s must be > 0, got %d", pos[i].name,
                              pos[i].v);
    if (c->d_model % c->n_head)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.n_head (%d) must divide model.d_model (%d): each head gets "
                          "d_model / n_head channels",
                          c->n_head, c->d_model);
    if (c->vocab_size > (1 << 30))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.vocab_size %d is above 2^30",
                          c->vocab_size);
    c->padded_vocab = (c->vocab_size + 127) / 128 * 128;
    /* every tensor's elements must be addressable with 32-bit kernel arguments */
    uint64_t big = (uint64_t)c->padded_vocab * (uint64_t)c->d_model;
    if ((uint64_t)4 * c->d_model * (uint64_t)c->d_model > INT32_MAX || big > (uint64_t)1 << 40)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.d_model %d is too large", c->d_model);
    return IG_OK;
}

uint64_t ig_gpt_num_params(const ig_gpt_config *c) {
    uint64_t C = (uint64_t)c->d_model, L = (uint64_t)c->n_layer;
    uint64_t per_layer =
        2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
    return (uint64_t)c->padded_vocab * C + (uint64_t)c->seq_len * C + L * per_layer + 2 * C;
}

double ig_gpt_flops_per_token(const ig_gpt_config *c, int T) {
    /* matmul parameters (no embeddings' gather, but the tied lm head) and attention: per token a
     * forward pass costs 2 flops per matmul weight and 2 * 2 * T * C for the scores and the
     * weighted sum of each layer, of which causality keeps about half; training costs 3x */
    double C = c->d_model, L = c->n_layer;
    double matmul = L * 12.0 * C * C + (double)c->padded_vocab * C;
    return 2.0 * matmul + L * 2.0 * (double)T * C;
}

/* ---- the tensor table ------------------------------------------------------------------------ */

static void add_tensor(ig_gpt *m, const char *fmt, int layer, int ndim, int64_t d0, int64_t d1,
                       int decay, ig_gpt_init init) {
    ig_gpt_tensor *t = &m->tensors[m->n_tensors];
    ig_gpt_param_info *pi = &m->info[m->n_tensors];
    snprintf(pi->name, sizeof pi->name, fmt, layer);
    t->name = pi->name;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 1;
    t->numel = (uint64_t)d0 * (uint64_t)(ndim > 1 ? d1 : 1);
    t->offset = m->n_params;
    t->decay = decay;
    pi->init = init;
    m->n_params += t->numel;
    m->n_tensors++;
}

/* Hugging Face GPT-2's state_dict order and names; Conv1D weights are [in, out]. */
static void build_table(ig_gpt *m) {
    const ig_gpt_config *c = &m->cfg;
    int64_t C = c->d_model;
    add_tensor(m, "transformer.wte.weight", 0, 2, c->padded_vocab, C, 1, IG_INIT_EMBEDDING);
    add_tensor(m, "transformer.wpe.weight", 0, 2, c->seq_len, C, 1, IG_INIT_NORMAL);
    for (int l = 0; l < c->n_layer; l++) {
        add_tensor(m, "transformer.h.%d.ln_1.weight", l, 1, C, 0, 0, IG_INIT_ONE);
        add_tensor(m, "transformer.h.%d.ln_1.bias", l, 1, C, 0, 0, IG_INIT_ZERO);
        add_tensor(m, "transformer.h.%d.attn.c_attn.weight", l, 2, C, 3 * C, 1, IG_INIT_NORMAL);
        add_tensor(m, "transformer.h.%d.attn.c_attn.bias", l, 1, 3 * C, 0, 0, IG_INIT_ZERO);
        add_tensor(m, "transformer.h.%d.attn.c_proj.weight", l, 2, C, C, 1, IG_INIT_RESIDUAL);
        add_tensor(m, "transformer.h.%d.attn.c_proj.bias", l, 1, C, 0, 0, IG_INIT_ZERO);
        add_tensor(m, "transformer.h.%d.ln_2.weight", l, 1, C, 0, 0, IG_INIT_ONE);
        add_tensor(m, "transformer.h.%d.ln_2.bias", l, 1, C, 0, 0, IG_INIT_ZERO);
        add_tensor(m, "transformer.h.%d.mlp.c_fc.weight", l, 2, C, 4 * C, 1, IG_INIT_NORMAL);
        add_tensor(m, "transformer.h.%d.mlp.c_fc.bias", l, 1, 4 * C, 0, 0, IG_INIT_ZERO);
        add_tensor(m, "transformer.h.%d.mlp.c_proj.weight", l, 2, 4 * C, C, 1, IG_INIT_RESIDUAL);
        add_tensor(m, "transformer.h.%d.mlp.c_proj.bias", l, 1, C, 0, 0, IG_INIT_ZERO);
    }
    add_tensor(m, "transformer.ln_f.weight", 0, 1, C, 0, 0, IG_INIT_ONE);
    add_tensor(m, "transformer.ln_f.bias", 0, 1, C, 0, 0, IG_INIT_ZERO);
}

size_t ig_gpt_num_tensors(const ig_gpt *m) {
    return m->n_tensors;
}
const ig_gpt_tensor *ig_gpt_tensor_at(const ig_gpt *m, size_t i) {
    return i < m->n_tensors ? &m->tensors[i] : NULL;
}
const ig_gpt_tensor *ig_gpt_tensor_find(const ig_gpt *m, const char *name) {
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}
const ig_gpt_config *ig_gpt_shape(const ig_gpt *m) {
    return &m->cfg;
}

/* ---- initialisation ------------------------------------------------------------------------- */

/* GPT-2's initialisation (Hugging Face _init_weights, nanoGPT, llm.c): weights and embeddings
 * normal(0, 0.02), the residual projections normal(0, 0.02 / sqrt(2 n_layer)), biases 0,
 * LayerNorm weights 1; the padded vocabulary rows 0. Element i of tensor NAME is drawn from
 * (seed, NAME, i): any slice of any tensor can be drawn alone, by any rank. */
ig_status ig_gpt_init_host(const ig_gpt *m, ig_ctx *ctx, uint64_t seed, float *host) {
    const ig_gpt_config *c = &m->cfg;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const ig_gpt_tensor *t = &m->tensors[i];
        float *p = host + t->offset;
        ig_rng_key key = ig_rng_key_make(seed, t->name);
        switch (m->info[i].init) {
        case IG_INIT_ZERO:
            memset(p, 0, t->numel * sizeof *p);
            break;
        case IG_INIT_ONE:
            for (uint64_t k = 0; k < t->numel; k++) p[k] = 1.0f;
            break;
        case IG_INIT_NORMAL:
            ig_rng_fill_normal(ctx, key, 0, t->numel, 0.0f, 0.02f, p);
            break;
        case IG_INIT_RESIDUAL:
            ig_rng_fill_normal(ctx, key, 0, t->numel, 0.0f, (float)(0.02 / sqrt(2.0 * c->n_layer)),
                               p);
            break;
        case IG_INIT_EMBEDDING: {
            uint64_t real = (uint64_t)c->vocab_size * (uint64_t)c->d_model;
            ig_rng_fill_normal(ctx, key, 0, real, 0.0f, 0.02f, p);
            memset(p + real, 0, (t->numel - real) * sizeof *p);
            break;
        }
        }
    }
    return IG_OK;
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* Lays out the activations of a B x T micro-batch: offsets in elements of the act type (act) or
 * of fp32 (f32) or int32 (i32), in three buffers. */
static void layout_acts(ig_gpt *m) {
    const ig_gpt_config *c = &m->cfg;
    uint64_t N = (uint64_t)m->B * (uint64_t)m->T, C = (uint64_t)c->d_model;
    uint64_t a = 0, f = 0;
    ig_gpt_acts *x = &m->acts;
    x->encoded = a, a += N * C;
    for (int l = 0; l < c->n_layer; l++) {
        ig_gpt_layer_acts *y = &x->layer[l];
        y->ln1 = a, a += N * C;
        y->ln1_mean = f, f += N;
        y->ln1_rstd = f, f += N;
        y->qkv = a, a += N * 3 * C;
        y->atty = a, a += N * C;
        y->lse = f, f += N * (uint64_t)c->n_head;
        y->attproj = a, a += N * C;
        y->res2 = a, a += N * C;
        y->ln2 = a, a += N * C;
        y->ln2_mean = f, f += N;
        y->ln2_rstd = f, f += N;
        y->fch = a, a += N * 4 * C;
        y->fch_gelu = a, a += N * 4 * C;
        y->fcproj = a, a += N * C;
        y->res3 = a, a += N * C;
    }
    x->lnf = a, a += N * C;
    x->lnf_mean = f, f += N;
    x->lnf_rstd = f, f += N;
    x->logits = a, a += N * (uint64_t)c->padded_vocab;
    /* backward scratch */
    x->dres = a, a += N * C;
    x->dln = a, a += N * C;
    x->datty = a, a += N * C;
    x->dqkv = a, a += N * 3 * C;
    x->dfcg = a, a += N * 4 * C;
    x->dfch = a, a += N * 4 * C;
    x->losses = f, f += N;
    x->dloss = f, f += N;
    x->n_act = a;
    x->n_f32 = f;
    x->n_i32 = 3 * N; /* tokens, targets, document ids */
}

ig_status ig_gpt_create(ig_gpt **out, ig_ctx *ctx, ig_backend *be, const ig_gpt_config *cfg, int B,
                        int T, uint64_t seed, ig_err *err) {
    *out = NULL;
    ig_gpt_config c = *cfg;
    ig_status st = ig_gpt_config_check(&c, err);
    if (st != IG_OK) return st;
    if (B <= 0 || T <= 0 || T > c.seq_len)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "micro-batches of %d x %d tokens: need B >= 1 and 1 <= T <= seq_len %d",
                          B, T, c.seq_len);
    if ((uint64_t)B * (uint64_t)T > INT32_MAX / 4)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "micro-batches of %d x %d tokens are too large",
                          B, T);
    size_t n_tensors = 4 + 12 * (size_t)c.n_layer;
    ig_gpt *m = ig_calloc(ctx, 1, sizeof *m);
    if (!m) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    m->ctx = ctx;
    m->be = be;
    m->cfg = c;
    m->B = B;
    m->T = T;
    m->tensors = ig_calloc(ctx, n_tensors, sizeof *m->tensors);
    m->info = ig_calloc(ctx, n_tensors, sizeof *m->info);
    m->acts.layer = ig_calloc(ctx, (size_t)c.n_layer, sizeof *m->acts.layer);
    if (!m->tensors || !m->info || !m->acts.layer) {
        ig_gpt_free(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    build_table(m);
    layout_acts(m);
    size_t as = m->as = ig_backend_act_size(be);
    uint64_t N = (uint64_t)B * (uint64_t)T;
    m->h_i32 = ig_alloc(ctx, 3 * N * sizeof(int32_t));
    m->h_f32 = ig_alloc(ctx, 2 * N * sizeof(float));
    if (!m->h_i32 || !m->h_f32) {
        ig_gpt_free(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    struct {
        void **p;
        uint64_t bytes;
        const char *what;
    } bufs[] = {
        {&m->params, m->n_params * as, "parameters"},
        {&m->grads, m->n_params * as, "gradients"},
        {(void **)&m->adam_m, m->n_params * sizeof(float), "AdamW first moments"},
        {(void **)&m->adam_v, m->n_params * sizeof(float), "AdamW second moments"},
        {&m->act, m->acts.n_act * as, "activations"},
        {(void **)&m->f32, m->acts.n_f32 * sizeof(float), "LayerNorm statistics and losses"},
        {(void **)&m->i32, m->acts.n_i32 * sizeof(int32_t), "token ids"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        st = ig_backend_alloc(be, (size_t)bufs[i].bytes, bufs[i].p, err);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "the model's %s (%.1f MB)", bufs[i].what,
                          (double)bufs[i].bytes / 1e6);
            ig_gpt_free(m);
            return st;
        }
    }
    /* initial weights, drawn on the host and uploaded */
    float *host = ig_alloc_aligned(ctx, m->n_params * sizeof(float), IG_ALIGN_KERNEL);
    if (!host) {
        ig_gpt_free(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory for %.1f MB of initial weights",
                          (double)m->n_params * 4e-6);
    }
    ig_gpt_init_host(m, ctx, seed, host);
    st = ig_backend_upload_f32(be, m->params, host, m->n_params, err);
    ig_free(ctx, host);
    if (st != IG_OK) {
        ig_gpt_free(m);
        return st;
    }
    *out = m;
    return IG_OK;
}

void ig_gpt_free(ig_gpt *m) {
    if (!m) return;
    void *bufs[] = {m->params, m->grads, m->adam_m, m->adam_v, m->act, m->f32, m->i32};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ig_backend_release(m->be, bufs[i]);
    ig_free(m->ctx, m->tensors);
    ig_free(m->ctx, m->info);
    ig_free(m->ctx, m->acts.layer);
    ig_free(m->ctx, m->h_i32);
    ig_free(m->ctx, m->h_f32);
    ig_free(m->ctx, m);
}

/* ---- host copies ---------------------------------------------------------------------------- */

ig_status ig_gpt_read(ig_gpt *m, ig_gpt_buffer which, float *out, ig_err *err) {
    switch (which) {
    case IG_GPT_PARAMS:
        return ig_backend_download_f32(m->be, out, m->params, m->n_params, err);
    case IG_GPT_GRADS:
        return ig_backend_download_f32(m->be, out, m->grads, m->n_params, err);
    case IG_GPT_ADAM_M:
        return ig_backend_download(m->be, out, m->adam_m, m->n_params * sizeof(float), err);
    case IG_GPT_ADAM_V:
        return ig_backend_download(m->be, out, m->adam_v, m->n_params * sizeof(float), err);
    }
    return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown model buffer %d", (int)which);
}

ig_status ig_gpt_write(ig_gpt *m, ig_gpt_buffer which, const float *in, ig_err *err) {
    switch (which) {
    case IG_GPT_PARAMS:
        return ig_backend_upload_f32(m->be, m->params, in, m->n_params, err);
    case IG_GPT_GRADS:
        return ig_backend_upload_f32(m->be, m->grads, in, m->n_params, err);
    case IG_GPT_ADAM_M:
        return ig_backend_upload(m->be, m->adam_m, in, m->n_params * sizeof(float), err);
    case IG_GPT_ADAM_V:
        return ig_backend_upload(m->be, m->adam_v, in, m->n_params * sizeof(float), err);
    }
    return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown model buffer %d", (int)which);
}
