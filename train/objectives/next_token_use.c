/* next_token_use.c - a next-token model used (train.h): its mean loss over a data stream (ingot
 * eval) and its sampler, text generated through the family's KV-cache session (ingot sample): the
 * prompt goes through the model at once, then each new token alone. The draws are keyed by (seed,
 * position), so the same seed gives the same text.
 */
#include "family/family.h"
#include "next_token_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* ingot eval: eval.batches micro-batches of the token shards, from the start of their stream. */
ig_status ig_next_token_evaluate(ig_ctx *ctx, ig_backend *be, const char *path,
                                 const ig_eval_opts *o, ig_eval_result *res, ig_err *err) {
    if ((o->noise_file && *o->noise_file) || o->weights == IG_WEIGHTS_EMA)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "--noise and --weights ema are for a diffusion model's clips");
    ig_model *m = NULL;
    ig_data_resolved dr = {0};
    ig_status st =
        ig_model_open_weights(&m, ctx, be, path, o->micro_batch, o->seq_len, o->weights, NULL, err);
    if (st == IG_OK && (st = ig_model_check_finite(m, err)) != IG_OK)
        ig_err_prefix(err, st, "%s: its weights are not finite", path);
    int T = m ? ig_model_shape(m)->seq_len : 0;
    if (st == IG_OK && o->seq_len > T)
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "--seq-len %d is more than the model's %d positions", o->seq_len, T);
    if (st == IG_OK) {
        ig_data_config dc = *o->data;
        uint32_t L = (uint32_t)(o->seq_len ? o->seq_len : T);
        st = ig_data_config_resolve(&dc, L, (uint64_t)o->batches * (uint64_t)o->micro_batch, &dr,
                                    err);
    }
    if (st == IG_OK)
        st = ig_model_eval(m, ctx, &dr.opts, o->micro_batch, o->batches, &res->loss, err);
    if (st == IG_OK)
        snprintf(res->what, sizeof res->what, "%d micro-batches of %d x %u tokens", o->batches,
                 o->micro_batch, dr.opts.seq_len);
    ig_data_resolved_free(&dr);
    ig_model_free(m);
    return st;
}

/* ---- generation ------------------------------------------------------------------------------ */

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
