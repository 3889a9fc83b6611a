/* inference.c - using a model of any family: opening one from a checkpoint or a Hugging Face
 * export, its mean loss over a data stream (ingot eval), exporting a checkpoint, and generating
 * text through the family's KV-cache session (ingot sample): the prompt goes through the model at
 * once, then each new token alone. The draws are keyed by (seed, position), so the same seed
 * gives the same text.
 */
#include "checkpoint.h"
#include "family.h"
#include "hf.h"
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const ig_weights_names[] = {"default", "raw", "ema", NULL};

ig_status ig_model_open(ig_model **out, ig_ctx *ctx, ig_backend *be, const char *path, int B, int T,
                        int32_t *eod_id, ig_err *err) {
    return ig_model_open_weights(out, ctx, be, path, B, T, IG_WEIGHTS_DEFAULT, eod_id, err);
}

/* The micro-batch's T against the model's positions: at most seq_len, 0 meaning all of them (a
 * family that computes its positions takes any T). */
static int positions(const ig_model_config *c, int T) {
    const ig_family *f = ig_family_of(c->arch);
    if (T > 0 && f && f->any_length) return T;
    return T <= 0 || T > c->seq_len ? c->seq_len : T;
}

ig_status ig_model_open_weights(ig_model **out, ig_ctx *ctx, ig_backend *be, const char *path,
                                int B, int T, ig_weights weights, int32_t *eod_id, ig_err *err) {
    *out = NULL;
    if (eod_id) *eod_id = -1;
    char dir[4096], man[4200];
    ig_status st = ig_ckpt_resolve(path, dir, sizeof dir, err);
    if (st != IG_OK) return st;
    path = dir;
    snprintf(man, sizeof man, "%s/manifest.json", path);
    ig_model_config shape;
    /* parameters and activations: no gradients */
    ig_part inference = {.tp = 1, .l0 = 0, .first = 1, .last = 1, .inference = 1};
    if (ig_file_exists(man)) { /* a checkpoint */
        ig_ckpt_info info;
        if ((st = ig_ckpt_read_info(ctx, path, 0, &info, err)) != IG_OK) return st;
        shape = info.model;
        inference.l1 = shape.n_layer;
        T = positions(&shape, T);
        if ((st = ig_model_create_part(out, ctx, be, &shape, B, T, info.seed, &inference, err)) !=
            IG_OK)
            return st;
        st = ig_ckpt_load_weights(ctx, path, *out, NULL, weights, &info, err);
        if (eod_id) *eod_id = info.eod_id;
    } else {
        int32_t eod = -1;
        if (weights == IG_WEIGHTS_EMA)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "%s is an exported model: it holds one set of weights (the EMA "
                              "or the raw ones are chosen by ckpt export --weights)",
                              path);
        if ((st = ig_hf_read_config(ctx, path, &shape, &eod, err)) != IG_OK) return st;
        inference.l1 = shape.n_layer;
        T = positions(&shape, T);
        /* the file's tensors against config.json before anything is allocated */
        if ((st = ig_hf_check(ctx, path, &shape, err)) != IG_OK) return st;
        if ((st = ig_model_create_part(out, ctx, be, &shape, B, T, 0, &inference, err)) != IG_OK)
            return st;
        st = ig_hf_load(ctx, *out, path, err);
        if (eod_id) *eod_id = eod;
    }
    if (st != IG_OK) {
        ig_model_free(*out);
        *out = NULL;
    }
    return st;
}

ig_status ig_ckpt_export(ig_ctx *ctx, const char *ckpt_dir, const char *out_dir, int overwrite,
                         ig_weights weights, ig_err *err) {
    ig_ckpt_info info;
    ig_status st = ig_ckpt_read_info(ctx, ckpt_dir, 1, &info, err);
    if (st != IG_OK) return st;
    ig_backend *be = NULL;
    ig_model *m = NULL;
    ig_backend_opts bo = ig_backend_opts_default();
    ig_part inference = {.tp = 1, .l1 = info.model.n_layer, .first = 1, .last = 1, .inference = 1};
    st = ig_backend_create(&be, ctx, &bo, err);
    if (st == IG_OK)
        st = ig_model_create_part(&m, ctx, be, &info.model, 1, 1, info.seed, &inference, err);
    if (st == IG_OK) st = ig_ckpt_load_weights(ctx, ckpt_dir, m, NULL, weights, &info, err);
    if (st == IG_OK) st = ig_hf_export(ctx, m, info.eod_id, out_dir, overwrite, err);
    ig_model_free(m);
    ig_backend_free(be);
    return st;
}

ig_status ig_model_eval(ig_model *m, ig_ctx *ctx, const ig_data_opts *data, int B, int batches,
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
            st = ig_model_forward(m, batch.tokens, (int)batch.micro_batch, (int)batch.seq_len, NULL,
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
    if (!(o->top_p > 0)) {
        n = 1; /* top-p 0: the most likely token alone */
    } else if (o->top_p < 1) {
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

ig_status ig_model_generate(ig_model *m, ig_ctx *ctx, const int32_t *prompt, size_t n_prompt,
                            const ig_sample_opts *o, int (*emit)(void *user, int32_t id),
                            void *user, size_t *n_out, ig_err *err) {
    (void)ctx;
    *n_out = 0;
    const ig_model_config *c = &m->cfg;
    const ig_family *fam = m->fam;
    if (!fam->gen_open)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s models do not generate tokens", fam->arch);
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
    void *session = NULL;
    cand *cs = ig_alloc(m->ctx, (size_t)c->vocab_size * sizeof *cs);
    ig_status st = cs ? fam->gen_open(m, c->seq_len, &session, err)
                      : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    const float *logits = NULL;
    if (st == IG_OK) st = fam->gen_feed(session, prompt, (int)n_prompt, 0, &logits, err);
    int pos = (int)n_prompt;
    for (int k = 0; st == IG_OK && k < o->max_tokens && pos <= c->seq_len; k++) {
        int32_t id = draw(logits, c->vocab_size, o, pos, cs);
        (*n_out)++;
        if ((emit && emit(user, id)) || id == o->stop_id || pos == c->seq_len) break;
        st = fam->gen_feed(session, &id, 1, pos, &logits, err);
        pos++;
    }
    if (session) fam->gen_close(session);
    ig_free(m->ctx, cs);
    return st;
}
