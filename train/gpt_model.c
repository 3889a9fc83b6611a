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

typedef struct tensor_spec {
    const char *fmt;
    int layer, ndim;
    int64_t d0, d1; /* global shape */
    int decay;
    ig_gpt_init init;
    int split_dim, blocks; /* how tensor parallelism cuts it (-1: not) */
    int tp_partial;        /* replicated, gradient shared out under sequence parallelism */
} tensor_spec;

static void add_tensor(ig_gpt *m, const tensor_spec *sp) {
    ig_gpt_tensor *t = &m->tensors[m->n_tensors];
    ig_gpt_param_info *pi = &m->info[m->n_tensors];
    snprintf(pi->name, sizeof pi->name, sp->fmt, sp->layer);
    t->name = pi->name;
    t->ndim = sp->ndim;
    t->global_shape[0] = sp->d0;
    t->global_shape[1] = sp->ndim > 1 ? sp->d1 : 1;
    t->shape[0] = t->global_shape[0];
    t->shape[1] = t->global_shape[1];
    int tp = m->part.tp;
    t->split_dim = sp->split_dim;
    t->blocks = sp->blocks ? sp->blocks : 1;
    t->parts = t->split_dim >= 0 ? tp : 1;
    t->part = t->parts > 1 ? m->part.tp_rank : 0;
    if (t->split_dim >= 0) t->shape[t->split_dim] /= t->parts;
    t->numel = (uint64_t)t->shape[0] * (uint64_t)t->shape[1];
    t->offset = m->n_params;
    t->decay = sp->decay;
    t->tp_partial = m->part.sp && sp->tp_partial;
    pi->init = sp->init;
    m->n_params += t->numel;
    m->n_tensors++;
}

/* Hugging Face GPT-2's state_dict order and names; Conv1D weights are [in, out]. Tensor
 * parallelism (Megatron's): c_attn and c_fc by output columns (c_attn in its q, k, v blocks, so
 * each rank holds whole heads), the two c_proj by input rows (their biases whole, added once), wte
 * by vocabulary rows; LayerNorms and wpe whole. */
static void build_table(ig_gpt *m) {
    const ig_gpt_config *c = &m->cfg;
    const ig_gpt_part *p = &m->part;
    int64_t C = c->d_model;
    m->t_wte = m->t_wpe = m->t_layer0 = m->t_lnf = -1;
    if (p->first || p->last) {
        m->t_wte = (int)m->n_tensors;
        add_tensor(m, &(tensor_spec){"transformer.wte.weight", 0, 2, c->padded_vocab, C, 1,
                                     IG_INIT_EMBEDDING, 0, 1, 0});
    }
    if (p->first) {
        m->t_wpe = (int)m->n_tensors;
        add_tensor(m, &(tensor_spec){"transformer.wpe.weight", 0, 2, c->seq_len, C, 1,
                                     IG_INIT_NORMAL, -1, 1, 0});
    }
    m->t_layer0 = (int)m->n_tensors;
    for (int l = p->l0; l < p->l1; l++) {
        const tensor_spec layer[L_COUNT] = {
            {"transformer.h.%d.ln_1.weight", l, 1, C, 0, 0, IG_INIT_ONE, -1, 1, 1},
            {"transformer.h.%d.ln_1.bias", l, 1, C, 0, 0, IG_INIT_ZERO, -1, 1, 1},
            {"transformer.h.%d.attn.c_attn.weight", l, 2, C, 3 * C, 1, IG_INIT_NORMAL, 1, 3, 0},
            {"transformer.h.%d.attn.c_attn.bias", l, 1, 3 * C, 0, 0, IG_INIT_ZERO, 0, 3, 0},
            {"transformer.h.%d.attn.c_proj.weight", l, 2, C, C, 1, IG_INIT_RESIDUAL, 0, 1, 0},
            {"transformer.h.%d.attn.c_proj.bias", l, 1, C, 0, 0, IG_INIT_ZERO, -1, 1, 0},
            {"transformer.h.%d.ln_2.weight", l, 1, C, 0, 0, IG_INIT_ONE, -1, 1, 1},
            {"transformer.h.%d.ln_2.bias", l, 1, C, 0, 0, IG_INIT_ZERO, -1, 1, 1},
            {"transformer.h.%d.mlp.c_fc.weight", l, 2, C, 4 * C, 1, IG_INIT_NORMAL, 1, 1, 0},
            {"transformer.h.%d.mlp.c_fc.bias", l, 1, 4 * C, 0, 0, IG_INIT_ZERO, 0, 1, 0},
            {"transformer.h.%d.mlp.c_proj.weight", l, 2, 4 * C, C, 1, IG_INIT_RESIDUAL, 0, 1, 0},
            {"transformer.h.%d.mlp.c_proj.bias", l, 1, C, 0, 0, IG_INIT_ZERO, -1, 1, 0},
        };
        for (int k = 0; k < L_COUNT; k++) add_tensor(m, &layer[k]);
    }
    if (p->last) {
        m->t_lnf = (int)m->n_tensors;
        add_tensor(m,
                   &(tensor_spec){"transformer.ln_f.weight", 0, 1, C, 0, 0, IG_INIT_ONE, -1, 1, 1});
        add_tensor(m,
                   &(tensor_spec){"transformer.ln_f.bias", 0, 1, C, 0, 0, IG_INIT_ZERO, -1, 1, 1});
    }
}

void ig_gpt_tensor_runs(const ig_gpt_tensor *t, ig_gpt_run_fn fn, void *user) {
    uint64_t G0 = (uint64_t)t->global_shape[0], G1 = (uint64_t)t->global_shape[1];
    uint64_t b = (uint64_t)t->blocks, q = (uint64_t)t->part, p = (uint64_t)t->parts;
    if (t->split_dim < 0) {
        fn(user, 0, 0, G0 * G1);
    } else if (t->split_dim == 0) {
        uint64_t bk = G0 / b, w = bk / p;
        for (uint64_t k = 0; k < b; k++) fn(user, (k * bk + q * w) * G1, k * w * G1, w * G1);
    } else {
        uint64_t bk = G1 / b, w = bk / p;
        for (uint64_t r = 0; r < G0; r++)
            for (uint64_t k = 0; k < b; k++)
                fn(user, r * G1 + k * bk + q * w, r * b * w + k * w, w);
    }
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

typedef struct init_run {
    ig_ctx *ctx;
    ig_rng_key key;
    float *out;
    ig_gpt_init init;
    float std;
    uint64_t real; /* IG_INIT_EMBEDDING: the global elements of real vocabulary rows */
} init_run;

static void init_one_run(void *user, uint64_t global, uint64_t local, uint64_t n) {
    init_run *r = user;
    float *p = r->out + local;
    switch (r->init) {
    case IG_INIT_ZERO:
        memset(p, 0, n * sizeof *p);
        break;
    case IG_INIT_ONE:
        for (uint64_t k = 0; k < n; k++) p[k] = 1.0f;
        break;
    case IG_INIT_NORMAL:
    case IG_INIT_RESIDUAL:
        ig_rng_fill_normal(r->ctx, r->key, global, n, 0.0f, r->std, p);
        break;
    case IG_INIT_EMBEDDING: {
        uint64_t drawn = global >= r->real ? 0 : (r->real - global < n ? r->real - global : n);
        if (drawn) ig_rng_fill_normal(r->ctx, r->key, global, drawn, 0.0f, r->std, p);
        memset(p + drawn, 0, (n - drawn) * sizeof *p);
        break;
    }
    }
}

/* GPT-2's initialisation (Hugging Face _init_weights, nanoGPT, llm.c): weights and embeddings
 * normal(0, 0.02), the residual projections normal(0, 0.02 / sqrt(2 n_layer)), biases 0,
 * LayerNorm weights 1; the padded vocabulary rows 0. Element i of tensor NAME is drawn from
 * (seed, NAME, i): any slice of any tensor can be drawn alone, by any rank. */
/* Tensor i's initial values into out[numel]. */
static void init_tensor(const ig_gpt *m, ig_ctx *ctx, uint64_t seed, size_t i, float *out) {
    const ig_gpt_config *c = &m->cfg;
    const ig_gpt_tensor *t = &m->tensors[i];
    init_run r = {
        .ctx = ctx,
        .key = ig_rng_key_make(seed, t->name),
        .out = out,
        .init = m->info[i].init,
        .std = m->info[i].init == IG_INIT_RESIDUAL ? (float)(0.02 / sqrt(2.0 * c->n_layer)) : 0.02f,
        .real = (uint64_t)c->vocab_size * (uint64_t)c->d_model};
    ig_gpt_tensor_runs(t, init_one_run, &r);
}

ig_status ig_gpt_init_host(const ig_gpt *m, ig_ctx *ctx, uint64_t seed, float *host) {
    for (size_t i = 0; i < m->n_tensors; i++)
        init_tensor(m, ctx, seed, i, host + m->tensors[i].offset);
    return IG_OK;
}

/* The initial weights, drawn one tensor at a time on the host and uploaded (the largest tensor's
 * size in host memory, not the model's: a 124M model used to peak at 475 MiB more while built). */
static ig_status init_params(ig_gpt *m, ig_ctx *ctx, uint64_t seed, ig_err *err) {
    uint64_t big = 1;
    for (size_t i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].numel > big) big = m->tensors[i].numel;
    float *host = ig_alloc_aligned(ctx, big * sizeof(float), IG_ALIGN_KERNEL);
    if (!host)
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory for %.1f MB of initial weights",
                          (double)big * 4e-6);
    ig_status st = IG_OK;
    for (size_t i = 0; i < m->n_tensors && st == IG_OK; i++) {
        const ig_gpt_tensor *t = &m->tensors[i];
        init_tensor(m, ctx, seed, i, host);
        if (m->master)
            st = ig_backend_upload(m->be, m->master + t->offset, host, t->numel * sizeof(float),
                                   err);
        if (st == IG_OK)
            st = ig_backend_upload_f32(m->be, (char *)m->params + t->offset * m->as, host, t->numel,
                                       err);
    }
    ig_free(ctx, host);
    return st;
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* Lays out the activations of a B x T micro-batch: per slot, offsets in elements of the act type
 * (act) and of fp32 (f32); then the scratch the slots share. */
static void layout_acts(ig_gpt *m) {
    const ig_gpt_config *c = &m->cfg;
    const ig_gpt_part *p = &m->part;
    uint64_t N = (uint64_t)m->N, Nl = (uint64_t)m->Nl, C = (uint64_t)c->d_model;
    uint64_t Cl = (uint64_t)m->Cl, sp = (uint64_t)(p->sp != 0);
    uint64_t a = 0, f = 0;
    ig_gpt_acts *x = &m->acts;
    x->encoded = a, a += Nl * C;
    for (int l = p->l0; l < p->l1; l++) {
        ig_gpt_layer_acts *y = &x->layer[l - p->l0];
        y->ln1 = a, a += Nl * C;
        y->ln1_mean = f, f += Nl;
        y->ln1_rstd = f, f += Nl;
        y->ln1_full = a, a += sp * N * C;
        y->qkv = a, a += N * 3 * Cl;
        y->atty = a, a += N * Cl;
        y->lse = f, f += N * (uint64_t)(c->n_head / p->tp);
        y->attproj = a, a += Nl * C;
        y->res2 = a, a += Nl * C;
        y->ln2 = a, a += Nl * C;
        y->ln2_mean = f, f += Nl;
        y->ln2_rstd = f, f += Nl;
        y->ln2_full = a, a += sp * N * C;
        y->fch = a, a += N * 4 * Cl;
        y->fch_gelu = a, a += N * 4 * Cl;
        y->fcproj = a, a += Nl * C;
        y->res3 = a, a += Nl * C;
    }
    if (!p->last) x->output = a, a += Nl * C;
    if (p->last) {
        x->lnf = a, a += Nl * C;
        x->lnf_mean = f, f += Nl;
        x->lnf_rstd = f, f += Nl;
        x->lnf_full = a, a += sp * N * C;
        x->logits = a, a += N * (uint64_t)m->Vl;
        x->losses = f, f += N;
        x->dloss = f, f += N;
    }
    x->n_act = a;
    x->n_f32 = f;
    /* scratch */
    a = x->n_act * (uint64_t)p->slots;
    f = x->n_f32 * (uint64_t)p->slots;
    uint64_t tpx = (uint64_t)(p->tp > 1);
    x->dres = a, a += Nl * C;
    x->dres_full = a, a += sp * N * C;
    x->dln = a, a += Nl * C;
    x->dpartial = a, a += tpx * N * C; /* a column-parallel layer's input gradient, unreduced */
    x->partial = a, a += sp * N * C;   /* a row-parallel layer's output, unreduced (sp) */
    x->datty = a, a += N * Cl;
    x->dqkv = a, a += N * 3 * Cl;
    x->dfcg = a, a += N * 4 * Cl;
    x->dfch = a, a += N * 4 * Cl;
    x->rowmax = f, f += tpx * N;
    x->stats = f, f += tpx * 2 * N;
    x->act_total = a;
    x->f32_total = f;
}

ig_status ig_gpt_create(ig_gpt **out, ig_ctx *ctx, ig_backend *be, const ig_gpt_config *cfg, int B,
                        int T, uint64_t seed, ig_err *err) {
    return ig_gpt_create_part(out, ctx, be, cfg, B, T, seed, NULL, err);
}

/* The gradient buckets, in the order the backward finishes their tensors (gpt_pass.c: the head,
 * the layers from the last, the embedding), each a run of whole tensors adjacent in the table
 * merged up to about bucket_elems; the tied embedding alone when pipeline stages share it. Then
 * the tensors' offsets: packed, or with data parallelism each bucket 16-element aligned and
 * padded to a multiple of dp (so that it splits into dp equal pieces). */
static ig_status plan_buckets(ig_gpt *m, ig_err *err) {
    const ig_gpt_part *p = &m->part;
    size_t cap = 4 + (size_t)(p->l1 - p->l0);
    m->buckets = ig_calloc(m->ctx, cap, sizeof *m->buckets);
    if (!m->buckets) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    /* the runs, in finishing order */
    ig_gpt_bucket runs[4 + 1];
    size_t nr = 0, nb = 0;
    int emb = p->pp > 1;
    if (p->last) runs[nr++] = (ig_gpt_bucket){.t0 = (size_t)m->t_lnf, .t1 = (size_t)m->t_lnf + 2};
    if (p->last && !p->first)
        runs[nr++] = (ig_gpt_bucket){.t0 = (size_t)m->t_wte, .t1 = (size_t)m->t_wte + 1, .emb = 1};
    for (size_t i = 0; i < nr; i++) m->buckets[nb++] = runs[i];
    for (int l = p->l1 - 1; l >= p->l0; l--) {
        size_t t0 = ig_gpt_lt(m, l, 0);
        m->buckets[nb++] = (ig_gpt_bucket){.t0 = t0, .t1 = t0 + L_COUNT};
    }
    if (p->first) { /* wpe, then wte: each just before the previous in the table */
        m->buckets[nb++] = (ig_gpt_bucket){.t0 = 1, .t1 = 2};
        m->buckets[nb++] = (ig_gpt_bucket){.t0 = 0, .t1 = 1, .emb = emb};
    }
    /* merge neighbours (a bucket and the one finished after it, just before it in the table) */
    size_t w = 0;
    for (size_t i = 0; i < nb; i++) {
        ig_gpt_bucket b = m->buckets[i];
        if (w > 0) {
            ig_gpt_bucket *last = &m->buckets[w - 1];
            uint64_t n = m->tensors[last->t1 - 1].offset + m->tensors[last->t1 - 1].numel -
                         m->tensors[b.t0].offset;
            if (!last->emb && !b.emb && b.t1 == last->t0 && n <= p->bucket_elems) {
                last->t0 = b.t0;
                continue;
            }
        }
        m->buckets[w++] = b;
    }
    m->n_buckets = w;
    /* offsets, in table order (the buckets' reverse) */
    uint64_t at = 0, dp = (uint64_t)(p->dp > 0 ? p->dp : 1);
    for (size_t i = m->n_buckets; i-- > 0;) {
        ig_gpt_bucket *b = &m->buckets[i];
        if (dp > 1) at = (at + 15) / 16 * 16;
        b->off = at;
        for (size_t t = b->t0; t < b->t1; t++) {
            m->tensors[t].offset = at;
            at += m->tensors[t].numel;
        }
        b->n = (at - b->off + dp - 1) / dp * dp;
        at = b->off + b->n;
    }
    m->n_params = at;
    /* ZeRO: this rank's pieces of the moments, in table order */
    uint64_t moff = 0;
    for (size_t i = m->n_buckets; i-- > 0;) {
        m->buckets[i].moff = moff;
        moff += m->buckets[i].n / dp;
    }
    m->n_moments = p->zero ? moff : m->n_params;
    /* where the gradients are */
    m->goff = ig_calloc(m->ctx, m->n_tensors ? m->n_tensors : 1, sizeof *m->goff);
    m->gslot = ig_calloc(m->ctx, m->n_buckets ? m->n_buckets : 1, sizeof *m->gslot);
    if (!m->goff || !m->gslot) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t t = 0; t < m->n_tensors; t++) m->goff[t] = m->tensors[t].offset;
    m->n_grads = m->n_params;
    if (p->zero >= 2 && dp > 1) {
        uint64_t own = 0, big = 0;
        int k = 0;
        for (size_t i = 0; i < m->n_buckets; i++) {
            const ig_gpt_bucket *b = &m->buckets[i];
            int wte = m->t_wte >= 0 && b->t0 <= (size_t)m->t_wte && (size_t)m->t_wte < b->t1;
            m->gslot[i] = wte ? -1 : (k++ & 1);
            if (wte)
                own = b->n;
            else if (b->n > big)
                big = b->n;
        }
        m->slot_elems = (big + 15) / 16 * 16;
        own = (own + 15) / 16 * 16;
        for (size_t i = 0; i < m->n_buckets; i++) {
            const ig_gpt_bucket *b = &m->buckets[i];
            uint64_t base = m->gslot[i] < 0 ? 0 : own + (uint64_t)m->gslot[i] * m->slot_elems;
            for (size_t t = b->t0; t < b->t1; t++)
                m->goff[t] = base + (m->tensors[t].offset - b->off);
        }
        m->n_grads = own + 2 * m->slot_elems;
    }
    return IG_OK;
}

ig_status ig_gpt_create_part(ig_gpt **out, ig_ctx *ctx, ig_backend *be, const ig_gpt_config *cfg,
                             int B, int T, uint64_t seed, const ig_gpt_part *part, ig_err *err) {
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
    ig_gpt_part p =
        part ? *part : (ig_gpt_part){.tp = 1, .l0 = 0, .l1 = c.n_layer, .first = 1, .last = 1};
    if (p.slots < 1) p.slots = 1;
    if (p.dp < 1) p.dp = 1;
    if (p.pp < 1) p.pp = 1;
    if (p.bucket_elems == 0) p.bucket_elems = UINT64_MAX;
    if (p.tp < 1 || p.tp_rank < 0 || p.tp_rank >= p.tp || c.n_head % p.tp ||
        c.padded_vocab % p.tp || p.l0 < 0 || p.l1 > c.n_layer || p.l0 >= p.l1 ||
        (p.sp && (p.tp < 2 || ((int64_t)B * T) % p.tp)) || (p.tp > 1 && !p.tpg))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a model part of tp %d (rank %d), layers [%d, %d) of %d, sp %d does not "
                          "fit %d heads, a vocabulary of %d rows and %d x %d tokens",
                          p.tp, p.tp_rank, p.l0, p.l1, c.n_layer, p.sp, c.n_head, c.padded_vocab, B,
                          T);
    int L = p.l1 - p.l0;
    size_t n_tensors = 4 + (size_t)L_COUNT * (size_t)L;
    ig_gpt *m = ig_calloc(ctx, 1, sizeof *m);
    if (!m) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    m->ctx = ctx;
    m->be = be;
    m->cfg = c;
    m->part = p;
    m->B = B;
    m->T = T;
    m->N = B * T;
    m->Nl = p.sp ? m->N / p.tp : m->N;
    m->Cl = c.d_model / p.tp;
    m->Vl = c.padded_vocab / p.tp;
    m->tensors = ig_calloc(ctx, n_tensors, sizeof *m->tensors);
    m->info = ig_calloc(ctx, n_tensors, sizeof *m->info);
    m->acts.layer = ig_calloc(ctx, (size_t)L, sizeof *m->acts.layer);
    m->slot_B = ig_calloc(ctx, (size_t)p.slots, sizeof *m->slot_B);
    m->slot_T = ig_calloc(ctx, (size_t)p.slots, sizeof *m->slot_T);
    if (!m->tensors || !m->info || !m->acts.layer || !m->slot_B || !m->slot_T) {
        ig_gpt_free(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    build_table(m);
    if ((st = plan_buckets(m, err)) != IG_OK) {
        ig_gpt_free(m);
        return st;
    }
    layout_acts(m);
    size_t as = m->as = ig_backend_act_size(be);
    uint64_t N = (uint64_t)m->N, S = (uint64_t)p.slots;
    m->h_i32 = ig_alloc(ctx, S * 3 * N * sizeof(int32_t));
    m->h_f32 = ig_alloc(ctx, S * 2 * N * sizeof(float));
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
        {&m->grads, m->n_grads * as, "gradients"},
        {(void **)&m->adam_m, m->n_moments * sizeof(float), "AdamW first moments"},
        {(void **)&m->adam_v, m->n_moments * sizeof(float), "AdamW second moments"},
        {&m->act, m->acts.act_total * as, "activations"},
        {(void **)&m->f32, m->acts.f32_total * sizeof(float), "LayerNorm statistics and losses"},
        {(void **)&m->i32, S * 3 * N * sizeof(int32_t), "token ids"},
    };
    if (ig_backend_act_type(be) != IG_ACT_F32) /* bf16: AdamW updates fp32 master weights */
        st = ig_backend_alloc(be, (size_t)(m->n_params * sizeof(float)), (void **)&m->master, err);
    if (st != IG_OK) {
        ig_err_prefix(err, st, "the model's fp32 master weights (%.1f MB)",
                      (double)m->n_params * 4e-6);
        ig_gpt_free(m);
        return st;
    }
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        st = ig_backend_alloc(be, (size_t)bufs[i].bytes, bufs[i].p, err);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "the model's %s (%.1f MB)", bufs[i].what,
                          (double)bufs[i].bytes / 1e6);
            ig_gpt_free(m);
            return st;
        }
    }
    if ((st = init_params(m, ctx, seed, err)) != IG_OK) {
        ig_gpt_free(m);
        return st;
    }
    *out = m;
    return IG_OK;
}

void ig_gpt_free(ig_gpt *m) {
    if (!m) return;
    void *bufs[] = {m->params, m->grads, m->adam_m, m->adam_v, m->act, m->master, m->f32, m->i32};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ig_backend_release(m->be, bufs[i]);
    ig_free(m->ctx, m->tensors);
    ig_free(m->ctx, m->buckets);
    ig_free(m->ctx, m->goff);
    ig_free(m->ctx, m->gslot);
    ig_free(m->ctx, m->info);
    ig_free(m->ctx, m->acts.layer);
    ig_free(m->ctx, m->slot_B);
    ig_free(m->ctx, m->slot_T);
    ig_free(m->ctx, m->h_i32);
    ig_free(m->ctx, m->h_f32);
    ig_free(m->ctx, m);
}

static ig_status grads_sharded(ig_err *err) {
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "the gradients are sharded (ZeRO-2): no copy of them is kept whole");
}

/* ---- host copies ---------------------------------------------------------------------------- */

ig_status ig_gpt_read(ig_gpt *m, ig_gpt_buffer which, float *out, ig_err *err) {
    switch (which) {
    case IG_GPT_PARAMS: /* the master weights when there are (bf16 parameters round them) */
        if (m->master)
            return ig_backend_download(m->be, out, m->master, m->n_params * sizeof(float), err);
        return ig_backend_download_f32(m->be, out, m->params, m->n_params, err);
    case IG_GPT_GRADS:
        if (m->n_grads != m->n_params) return grads_sharded(err);
        return ig_backend_download_f32(m->be, out, m->grads, m->n_params, err);
    case IG_GPT_ADAM_M:
        return ig_backend_download(m->be, out, m->adam_m, m->n_moments * sizeof(float), err);
    case IG_GPT_ADAM_V:
        return ig_backend_download(m->be, out, m->adam_v, m->n_moments * sizeof(float), err);
    }
    return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown model buffer %d", (int)which);
}

ig_status ig_gpt_write(ig_gpt *m, ig_gpt_buffer which, const float *in, ig_err *err) {
    switch (which) {
    case IG_GPT_PARAMS: {
        ig_status st = IG_OK;
        if (m->master)
            st = ig_backend_upload(m->be, m->master, in, m->n_params * sizeof(float), err);
        return st == IG_OK ? ig_backend_upload_f32(m->be, m->params, in, m->n_params, err) : st;
    }
    case IG_GPT_GRADS:
        if (m->n_grads != m->n_params) return grads_sharded(err);
        return ig_backend_upload_f32(m->be, m->grads, in, m->n_params, err);
    case IG_GPT_ADAM_M:
        return ig_backend_upload(m->be, m->adam_m, in, m->n_moments * sizeof(float), err);
    case IG_GPT_ADAM_V:
        return ig_backend_upload(m->be, m->adam_v, in, m->n_moments * sizeof(float), err);
    }
    return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown model buffer %d", (int)which);
}
