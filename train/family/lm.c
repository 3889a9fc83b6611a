/* lm.c - what the language-model families (decoders over token ids) share (lm.h): what a stage
 * passes on, and the memory of a generation session with its key/value cache.
 */
#include "lm.h"

#include <string.h>

void ig_lm_stage_io(ig_model *m, int slot, uint64_t encoded, uint64_t output, uint64_t dres,
                    ig_stage_io *io) {
    m->slot = slot;
    memset(io, 0, sizeof *io);
    io->n = 1;
    io->in[0] = ig_model_act(m, encoded);
    io->out[0] = m->part.last ? NULL : ig_model_act(m, output);
    io->grad[0] = ig_model_scratch(m, dres);
    uint64_t N = (uint64_t)m->B * (uint64_t)m->T;
    io->elems[0] = (m->part.sp ? N / (uint64_t)m->part.tp : N) * (uint64_t)m->cfg.d_model;
}

/* ---- generation ------------------------------------------------------------------------------ */

ig_status ig_lm_gen_alloc(ig_lm_gen *g, ig_model *m, int Tmax, uint64_t kv_row, uint64_t act,
                          uint64_t f32, ig_err *err) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->Tmax = Tmax;
    g->kv_row = kv_row;
    if (!(m->part.first && m->part.last && m->part.tp == 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "generation needs the whole model");
    uint64_t T = (uint64_t)Tmax, L = (uint64_t)m->cfg.n_layer, as = m->as;
    uint64_t Vp = (uint64_t)m->cfg.padded_vocab;
    ig_status st = ig_backend_alloc(m->be, (size_t)(2 * L * T * kv_row * as), &g->kv, err);
    if (st == IG_OK) st = ig_backend_alloc(m->be, (size_t)((act + Vp) * as), &g->act, err);
    if (st == IG_OK)
        st = ig_backend_alloc(m->be, (size_t)((f32 ? f32 : 1) * sizeof(float)), (void **)&g->f32,
                              err);
    if (st == IG_OK)
        st = ig_backend_alloc(m->be, (size_t)(T * sizeof(int32_t)), (void **)&g->tok, err);
    if (st == IG_OK && !(g->host = ig_alloc(m->ctx, (size_t)Vp * sizeof(float))))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st != IG_OK) {
        ig_lm_gen_release(g);
        return ig_err_prefix(err, st, "the key/value cache of %d positions", Tmax);
    }
    g->logits = (char *)g->act + act * as;
    return IG_OK;
}

void ig_lm_gen_release(ig_lm_gen *g) {
    if (!g->m) return;
    ig_backend *be = g->m->be;
    ig_backend_release(be, g->kv);
    ig_backend_release(be, g->act);
    ig_backend_release(be, g->f32);
    ig_backend_release(be, g->tok);
    ig_free(g->m->ctx, g->host);
    g->kv = g->act = NULL, g->f32 = g->host = NULL, g->tok = NULL;
}

void *ig_lm_gen_cache(const ig_lm_gen *g, int l, int v) {
    uint64_t cache = (uint64_t)g->Tmax * g->kv_row * g->m->as;
    return (char *)g->kv + (uint64_t)(2 * l + v) * cache;
}

ig_status ig_lm_gen_tokens(ig_lm_gen *g, const int32_t *tokens, int n, ig_err *err) {
    return ig_backend_upload(g->m->be, g->tok, tokens, (size_t)n * sizeof(int32_t), err);
}

ig_status ig_lm_kv_append(ig_model *m, const void *qkv, int n, int pos0,
                          const ig_attention_shape *s, void *q, void *kc, void *vc, ig_err *err) {
    size_t as = m->as, qrow = (size_t)s->n_head * (size_t)s->head_size * as;
    size_t kvrow = (size_t)s->n_kv_head * (size_t)s->head_size * as, row = qrow + 2 * kvrow;
    ig_status st = IG_OK;
    for (int t = 0; t < n && st == IG_OK; t++) {
        const char *src = (const char *)qkv + (size_t)t * row;
        st = ig_backend_copy(m->be, (char *)q + (size_t)t * qrow, src, qrow, err);
        if (st == IG_OK)
            st = ig_backend_copy(m->be, (char *)kc + (size_t)(pos0 + t) * kvrow, src + qrow, kvrow,
                                 err);
        if (st == IG_OK)
            st = ig_backend_copy(m->be, (char *)vc + (size_t)(pos0 + t) * kvrow, src + qrow + kvrow,
                                 kvrow, err);
    }
    return st;
}

ig_status ig_lm_gen_logits(ig_lm_gen *g, const void *hn, int n, const void *head,
                           const float **logits, ig_err *err) {
    ig_model *m = g->m;
    int C = m->cfg.d_model, Vp = m->cfg.padded_vocab;
    ig_kernel_matmul_forward(m->be, g->logits, (const char *)hn + (size_t)(n - 1) * C * m->as, head,
                             IG_W_OUT_IN, NULL, 1, C, Vp);
    ig_status st = ig_backend_sync(m->be, err);
    if (st == IG_OK) st = ig_backend_download_f32(m->be, g->host, g->logits, (size_t)Vp, err);
    *logits = g->host;
    return st;
}
