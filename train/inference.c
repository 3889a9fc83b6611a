/* inference.c - using a model: opening one from a checkpoint or a Hugging Face export, its mean
 * loss over a data stream (ingot eval), exporting a checkpoint, and generating text with a KV
 * cache (ingot sample).
 *
 * Generation keeps, per layer, the keys and values of every position so far ([Tmax, C] each):
 * the prompt goes through the model at once, then each new token alone, attending over the
 * cache (ig_kernel_attention_cached). The draws are keyed by (seed, position), so the same seed
 * gives the same text.
 */
#include "gpt_internal.h"
#include "train_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

ig_status ig_model_open(ig_gpt **out, ig_ctx *ctx, ig_backend *be, const char *path, int B, int T,
                        int32_t *eod_id, ig_err *err) {
    *out = NULL;
    if (eod_id) *eod_id = -1;
    char dir[4096], man[4200];
    ig_status rs = ig_ckpt_resolve(path, dir, sizeof dir, err);
    if (rs != IG_OK) return rs;
    path = dir;
    snprintf(man, sizeof man, "%s/manifest.json", path);
    ig_gpt_config shape;
    ig_status st;
    if (ig_file_exists(man)) { /* a checkpoint */
        ig_ckpt_info info;
        if ((st = ig_ckpt_read_info(ctx, path, 0, &info, err)) != IG_OK) return st;
        shape = info.model;
        if (T <= 0 || T > shape.seq_len) T = shape.seq_len;
        if ((st = ig_gpt_create(out, ctx, be, &shape, B, T, info.seed, err)) != IG_OK) return st;
        st = ig_ckpt_load(ctx, path, *out, 0, &info, err);
        if (eod_id) *eod_id = info.eod_id;
    } else {
        int32_t eod = -1;
        if ((st = ig_hf_read_config(ctx, path, &shape, &eod, err)) != IG_OK) return st;
        if (T <= 0 || T > shape.seq_len) T = shape.seq_len;
        if ((st = ig_gpt_create(out, ctx, be, &shape, B, T, 0, err)) != IG_OK) return st;
        st = ig_hf_load(ctx, *out, path, err);
        if (eod_id) *eod_id = eod;
    }
    if (st != IG_OK) {
        ig_gpt_free(*out);
        *out = NULL;
    }
    return st;
}

ig_status ig_ckpt_export(ig_ctx *ctx, const char *ckpt_dir, const char *out_dir, int overwrite,
                         ig_err *err) {
    ig_ckpt_info info;
    ig_status st = ig_ckpt_read_info(ctx, ckpt_dir, 1, &info, err);
    if (st != IG_OK) return st;
    ig_backend *be = NULL;
    ig_gpt *m = NULL;
    ig_backend_opts bo = ig_backend_opts_default();
    st = ig_backend_create(&be, ctx, &bo, err);
    if (st == IG_OK) st = ig_gpt_create(&m, ctx, be, &info.model, 1, 1, info.seed, err);
    if (st == IG_OK) st = ig_ckpt_load(ctx, ckpt_dir, m, 0, &info, err);
    if (st == IG_OK) st = ig_hf_export(ctx, m, info.eod_id, out_dir, overwrite, err);
    ig_gpt_free(m);
    ig_backend_free(be);
    return st;
}

ig_status ig_model_eval(ig_gpt *m, ig_ctx *ctx, const ig_data_opts *data, int B, int batches,
                        double *loss, ig_err *err) {
    *loss = NAN;
    if (data->seq_len > (uint32_t)m->T)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a sequence length of %u is more than the model's %d positions",
                          data->seq_len, m->T);
    ig_data_stream *ds = NULL;
    ig_loader *ld = NULL;
    ig_status st = ig_data_stream_open(&ds, ctx, data, err);
    if (st == IG_OK) {
        ig_loader_opts lo = ig_loader_opts_default();
        lo.make_block = ig_data_stream_make_block;
        lo.block_user = ds;
        lo.micro_batch = (uint32_t)B;
        lo.prefetch_threads = 1;
        st = ig_loader_create(&ld, ctx, &lo, NULL, err);
    }
    double sum = 0;
    for (int b = 0; st == IG_OK && b < batches; b++) {
        ig_batch batch;
        double l = 0;
        if ((st = ig_loader_next(ld, &batch, err)) == IG_OK)
            st = ig_gpt_forward(m, batch.tokens, (int)batch.micro_batch, (int)batch.seq_len, NULL,
                                &l, NULL, err);
        sum += l;
    }
    if (st == IG_OK) *loss = sum / batches;
    ig_loader_free(ld);
    ig_data_stream_close(ds);
    return st;
}

/* ---- generation --------------------------------------------------------------------------------
 */

ig_sample_opts ig_sample_opts_default(void) {
    return (ig_sample_opts){.max_tokens = 64,
                            .temperature = 1.0f,
                            .top_k = 0,
                            .top_p = 1.0f,
                            .seed = 1234,
                            .stop_id = -1};
}

/* The buffers of one generation: per layer the key and value caches, and the activations of up to
 * Tmax positions (a prefill of the whole prompt is the largest step). */
typedef struct gen {
    ig_gpt *m;
    ig_backend *be;
    int Tmax, C, NH, V, Vp;
    size_t as;
    void *kv;  /* [L][2][Tmax, C] */
    void *act; /* the per-step activations below, [Tmax, *] each */
    float *f32;
    void *res[2], *ln, *qkv, *q, *atty, *attproj, *res2, *fch, *fchg, *fcproj, *logits;
    float *mean, *rstd;
    int32_t *tok; /* [Tmax] */
    char *host;   /* staging: a qkv block [Tmax, 3C] and a row of logits */
} gen;

static void *at(void *base, uint64_t elems, size_t as) {
    return (char *)base + elems * as;
}

static ig_status gen_alloc(gen *g, ig_err *err) {
    const ig_gpt_config *c = &g->m->cfg;
    uint64_t T = (uint64_t)g->Tmax, C = (uint64_t)g->C;
    uint64_t per = T * C;
    ig_status st =
        ig_backend_alloc(g->be, (size_t)(2 * (uint64_t)c->n_layer * per * g->as), &g->kv, err);
    /* res x2, ln, q, atty, attproj, res2, fcproj: C; qkv: 3C; fch, fchg: 4C; logits: one row */
    uint64_t n_act = per * 8 + per * 3 + per * 8 + (uint64_t)g->Vp;
    if (st == IG_OK) st = ig_backend_alloc(g->be, (size_t)(n_act * g->as), &g->act, err);
    if (st == IG_OK)
        st = ig_backend_alloc(g->be, (size_t)(2 * T * sizeof(float)), (void **)&g->f32, err);
    if (st == IG_OK)
        st = ig_backend_alloc(g->be, (size_t)(T * sizeof(int32_t)), (void **)&g->tok, err);
    if (st != IG_OK) return st;
    uint64_t o = 0;
    void **c1[] = {&g->res[0], &g->res[1],  &g->ln,   &g->q,
                   &g->atty,   &g->attproj, &g->res2, &g->fcproj};
    for (size_t i = 0; i < sizeof c1 / sizeof c1[0]; i++) *c1[i] = at(g->act, o, g->as), o += per;
    g->qkv = at(g->act, o, g->as), o += 3 * per;
    g->fch = at(g->act, o, g->as), o += 4 * per;
    g->fchg = at(g->act, o, g->as), o += 4 * per;
    g->logits = at(g->act, o, g->as);
    g->mean = g->f32;
    g->rstd = g->f32 + T;
    size_t host_bytes = (size_t)(T * 3 * C * g->as);
    if (host_bytes < (size_t)g->Vp * sizeof(float)) host_bytes = (size_t)g->Vp * sizeof(float);
    g->host = ig_alloc(g->m->ctx, host_bytes);
    if (!g->host) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    return IG_OK;
}

static void gen_free(gen *g) {
    ig_backend_release(g->be, g->kv);
    ig_backend_release(g->be, g->act);
    ig_backend_release(g->be, g->f32);
    ig_backend_release(g->be, g->tok);
    ig_free(g->m->ctx, g->host);
}

enum { T_WTE = 0, T_WPE = 1, T_LAYER0 = 2, T_PER_LAYER = 12 };

static void *param(const gen *g, size_t t) {
    return at(g->m->params, g->m->tensors[t].offset, g->as);
}
static void *lparam(const gen *g, int l, int which) {
    return param(g, T_LAYER0 + (size_t)l * T_PER_LAYER + (size_t)which);
}

/* Runs tokens[0..n) at positions pos0.. through the model, filling the caches; leaves the logits
 * of the last position in g->logits. */
static ig_status step(gen *g, const int32_t *tokens, int n, int pos0, ig_err *err) {
    ig_backend *be = g->be;
    const ig_gpt_config *c = &g->m->cfg;
    int C = g->C;
    size_t as = g->as;
    ig_status st = ig_backend_upload(be, g->tok, tokens, (size_t)n * sizeof(int32_t), err);
    if (st != IG_OK) return st;
    /* positions pos0 .. : the encoder adds wpe[t] for t < n, so start wpe at row pos0 */
    ig_kernel_encoder_forward(be, g->res[0], g->tok, param(g, T_WTE),
                              at(param(g, T_WPE), (uint64_t)pos0 * (uint64_t)C, as), 1, n, C);
    ig_kernel_layernorm_forward(be, g->ln, g->mean, g->rstd, g->res[0], lparam(g, 0, 0),
                                lparam(g, 0, 1), n, C, 1e-5f);
    int cur = 0;
    for (int l = 0; l < c->n_layer; l++) {
        void *kc = at(g->kv, (uint64_t)(2 * l) * (uint64_t)g->Tmax * (uint64_t)C, as);
        void *vc = at(g->kv, (uint64_t)(2 * l + 1) * (uint64_t)g->Tmax * (uint64_t)C, as);
        ig_kernel_matmul_forward(be, g->qkv, g->ln, lparam(g, l, 2), IG_W_IN_OUT, lparam(g, l, 3),
                                 n, C, 3 * C);
        /* split qkv rows into q and the caches' new rows (through the host: a few rows) */
        size_t row = (size_t)C * as;
        if ((st = ig_backend_download(be, g->host, g->qkv, (size_t)n * 3 * row, err)) != IG_OK)
            return st;
        char *h = g->host;
        for (int part = 0; part < 3 && st == IG_OK; part++) {
            void *dst = part == 0 ? g->q : at(part == 1 ? kc : vc, (uint64_t)pos0 * C, as);
            for (int t = 0; t < n && st == IG_OK; t++)
                st = ig_backend_upload(be, (char *)dst + (size_t)t * row,
                                       h + ((size_t)t * 3 + (size_t)part) * row, row, err);
        }
        if (st != IG_OK) return st;
        ig_kernel_attention_cached(be, g->atty, g->q, kc, vc, pos0, g->Tmax,
                                   &(ig_attention_shape){.B = 1,
                                                         .T = n,
                                                         .n_head = g->NH,
                                                         .n_kv_head = g->NH,
                                                         .head_size = C / g->NH,
                                                         .causal = 1});
        ig_kernel_matmul_forward(be, g->attproj, g->atty, lparam(g, l, 4), IG_W_IN_OUT,
                                 lparam(g, l, 5), n, C, C);
        ig_kernel_residual_layernorm_forward(be, g->res2, g->ln, g->mean, g->rstd, g->res[cur],
                                             g->attproj, lparam(g, l, 6), lparam(g, l, 7), n, C,
                                             1e-5f);
        ig_kernel_matmul_forward(be, g->fch, g->ln, lparam(g, l, 8), IG_W_IN_OUT, NULL, n, C,
                                 4 * C);
        ig_kernel_gelu_bias_forward(be, g->fchg, g->fch, lparam(g, l, 9), n, 4 * C);
        ig_kernel_matmul_forward(be, g->fcproj, g->fchg, lparam(g, l, 10), IG_W_IN_OUT,
                                 lparam(g, l, 11), n, 4 * C, C);
        /* the next LayerNorm: ln_1 of the next layer, or ln_f */
        size_t wi = l + 1 < c->n_layer ? T_LAYER0 + (size_t)(l + 1) * T_PER_LAYER
                                       : T_LAYER0 + (size_t)c->n_layer * T_PER_LAYER;
        ig_kernel_residual_layernorm_forward(be, g->res[1 - cur], g->ln, g->mean, g->rstd, g->res2,
                                             g->fcproj, param(g, wi), param(g, wi + 1), n, C,
                                             1e-5f);
        cur = 1 - cur;
    }
    /* the logits of the last position only */
    ig_kernel_matmul_forward(be, g->logits, at(g->ln, (uint64_t)(n - 1) * (uint64_t)C, as),
                             param(g, T_WTE), IG_W_OUT_IN, NULL, 1, C, g->Vp);
    return ig_backend_sync(be, err);
}

typedef struct cand {
    float p;
    int32_t id;
} cand;

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id; /* ties by id: deterministic */
}

/* Draws the next token from the logits of the first V entries. */
static int32_t draw(const float *logits, int V, const ig_sample_opts *o, int pos, cand *cs) {
    if (o->temperature <= 0) { /* greedy */
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    float mx = logits[0];
    for (int i = 1; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        cs[i].id = i;
        cs[i].p = expf((logits[i] - mx) / o->temperature);
        sum += cs[i].p;
    }
    for (int i = 0; i < V; i++) cs[i].p = (float)(cs[i].p / sum);
    qsort(cs, (size_t)V, sizeof *cs, cand_desc);
    int n = V;
    if (o->top_k > 0 && o->top_k < n) n = o->top_k;
    if (o->top_p > 0 && o->top_p < 1) {
        double acc = 0;
        for (int i = 0; i < n; i++) {
            acc += cs[i].p;
            if (acc >= o->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += cs[i].p;
    double u = ig_rng_uniform(ig_rng_key_make(o->seed, "ingot sample"), (uint64_t)pos) * total;
    for (int i = 0; i < n; i++) {
        u -= cs[i].p;
        if (u < 0) return cs[i].id;
    }
    return cs[n - 1].id;
}

ig_status ig_model_generate(ig_gpt *m, ig_ctx *ctx, const int32_t *prompt, size_t n_prompt,
                            const ig_sample_opts *o, int (*emit)(void *user, int32_t id),
                            void *user, size_t *n_out, ig_err *err) {
    (void)ctx;
    *n_out = 0;
    const ig_gpt_config *c = &m->cfg;
    if (n_prompt == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "an empty prompt: give at least one token");
    if (n_prompt >= (size_t)c->seq_len)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "the prompt has %zu tokens; the model has %d positions", n_prompt,
                          c->seq_len);
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab_size)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "prompt token %d is outside the model's vocabulary of %d", prompt[i],
                              c->vocab_size);
    gen g = {.m = m,
             .be = m->be,
             .Tmax = c->seq_len,
             .C = c->d_model,
             .NH = c->n_head,
             .V = c->vocab_size,
             .Vp = c->padded_vocab,
             .as = m->as};
    cand *cs = ig_alloc(m->ctx, (size_t)g.V * sizeof *cs);
    ig_status st = cs ? gen_alloc(&g, err) : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    float *logits = (float *)g.host;
    int pos = 0;
    if (st == IG_OK) st = step(&g, prompt, (int)n_prompt, 0, err);
    pos = (int)n_prompt;
    for (int k = 0; st == IG_OK && k < o->max_tokens && pos <= c->seq_len; k++) {
        if ((st = ig_backend_download_f32(g.be, logits, g.logits, (size_t)g.Vp, err)) != IG_OK)
            break;
        int32_t id = draw(logits, g.V, o, pos, cs);
        (*n_out)++;
        if ((emit && emit(user, id)) || id == o->stop_id || pos == c->seq_len) break;
        st = step(&g, &id, 1, pos, err);
        pos++;
    }
    gen_free(&g);
    ig_free(m->ctx, cs);
    return st;
}
