/* lm.c - what the language-model families (gpt2, llama: decoders over token ids) share, so that
 * none of it is written twice: the micro-batch staged into a slot of the model's memory and its
 * loss (every language model reads its tokens, its vocabulary slice and its loss mask the same
 * way), what a stage passes on, and the memory of a generation session with its key/value cache.
 *
 * Slot memory (int32): [N] input ids, [N] targets, [N] document ids, N = the model's B x T rows;
 * with tensor parallelism an id or target outside this rank's vocabulary rows [v0, v0 + Vl) is
 * -1 (another rank looks it up, or scores it). io fp32: [N] per-row losses, [N] their gradients.
 * Host staging: [N] losses, then [N] the mask of counted rows.
 */
#include "family.h"

#include <string.h>

ig_status ig_lm_stage_batch(ig_model *m, int slot, const ig_stage_input *si, float grad_scale,
                            uint64_t *counted, ig_err *err) {
    const int32_t *tokens = si->tokens;
    int B = si->B, T = si->T;
    const ig_batch_opts *o = si->bo;
    if (!tokens || B <= 0 || T <= 0 || B > m->B || T > m->T || slot < 0 || slot >= m->part.slots)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a micro-batch of %d x %d tokens does not fit the model's %d x %d", B, T,
                          m->B, m->T);
    if (m->part.sp && ((int64_t)B * T) % m->part.tp)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "sequence parallelism: %d x %d tokens do not split into %d equal parts",
                          B, T, m->part.tp);
    m->slot = slot;
    m->slot_B[slot] = B;
    m->slot_T[slot] = T;
    uint64_t N = (uint64_t)B * (uint64_t)T, stride = (uint64_t)m->B * (uint64_t)m->T;
    int32_t *in = m->h_i32 + (uint64_t)slot * m->acts.i32, *tg = in + stride, *doc = tg + stride;
    float *host = m->h_f32 + (uint64_t)slot * m->acts.io_f32;
    float *mask = host + stride; /* 1 for a counted row */
    int32_t eod = o ? o->eod_id : -1;
    int32_t vl = m->cfg.padded_vocab / m->part.tp, v0 = m->part.tp_rank * vl, tp = m->part.tp;
    int V = m->cfg.vocab_size;
    m->doc_attention = o && o->doc_attention && eod >= 0;
    uint64_t count = 0;
    for (int b = 0; b < B; b++) {
        const int32_t *row = tokens + (size_t)b * (size_t)(T + 1);
        int32_t d = 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * (size_t)T + (size_t)t;
            int32_t x = row[t], y = row[t + 1];
            if (x < 0 || x >= V || y < 0 || y >= V) {
                int bad_x = x < 0 || x >= V;
                return ig_err_set(err, IG_ERR_INVALID_ARG,
                                  "token %d at row %d, position %d is outside the model's "
                                  "vocabulary of %d",
                                  bad_x ? x : y, b, bad_x ? t : t + 1, V);
            }
            in[i] = tp == 1 ? x : (x >= v0 && x < v0 + vl ? x - v0 : -1);
            tg[i] = tp == 1 ? y : (y >= v0 && y < v0 + vl ? y - v0 : -1);
            doc[i] = d;
            if (eod >= 0 && x == eod) d++; /* the next token starts a new document */
            int masked = o && o->eod_mask_loss && eod >= 0 && x == eod;
            mask[i] = masked ? 0.0f : 1.0f;
            count += !masked;
        }
    }
    if (counted) *counted = count;
    int32_t *dev = m->i32 + (uint64_t)slot * m->acts.i32;
    ig_status st = IG_OK;
    for (int k = 0; k < 3 && st == IG_OK; k++)
        st = ig_backend_upload(m->be, dev + (uint64_t)k * stride, in + (uint64_t)k * stride,
                               N * sizeof(int32_t), err);
    if (st != IG_OK || !m->part.last || !(grad_scale > 0)) return st;
    /* d(mean loss)/d(loss_i) = 1 / count for a counted row, scaled; uploaded into the slot's
     * gradient of the losses (the host mask stays for the loss) */
    float g = count ? grad_scale / (float)count : 0.0f;
    for (uint64_t i = 0; i < N; i++) host[i] = mask[i] * g;
    return ig_backend_upload(m->be, ig_model_io_f32(m, stride), host, N * sizeof(float), err);
}

ig_status ig_lm_loss(ig_model *m, int slot, double *loss, ig_err *err) {
    m->slot = slot;
    int N = m->slot_B[slot] * m->slot_T[slot];
    uint64_t stride = (uint64_t)m->B * (uint64_t)m->T;
    float *losses = m->h_f32 + (uint64_t)slot * m->acts.io_f32, *mask = losses + stride;
    ig_status st =
        ig_backend_download(m->be, losses, ig_model_io_f32(m, 0), (size_t)N * sizeof(float), err);
    if (st != IG_OK) return st;
    double sum = 0;
    uint64_t n = 0;
    for (int i = 0; i < N; i++)
        if (mask[i] != 0.0f) sum += losses[i], n++;
    *loss = n ? sum / (double)n : 0.0;
    return IG_OK;
}

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

/* ---- generation -------------------------------------------------------------------------------
 */

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
