/* decoder_gen.c - generation with a key/value cache through the decoder's own layer forward
 * (decoder_pass.h): the new positions' rows run through every layer, attention reading a cache of
 * every position's keys and values so far ([Tmax, NKV hs] per layer; the new rows' are copied in
 * on the backend, no host round trip), and only the last row gets logits.
 */
#include "decoder_pass.h"

/* A session: the caches, two sets of layer buffers of Tmax rows that the layers take turns in,
 * the stage's input, the final norm and the query scratch. */
typedef struct gen {
    ig_lm_gen base;
    dec_bufs set[2];
    void *input, *hn, *q;
    float *mean_n, *rstd_n;
} gen;

void dec_gen_close(void *session) {
    gen *g = session;
    if (!g) return;
    ig_lm_gen_release(&g->base);
    ig_free(g->base.m->ctx, g);
}

ig_status dec_gen_open(ig_model *m, int Tmax, void **session, ig_err *err) {
    *session = NULL;
    const dec_state *x = dec_of(m);
    int ln = x->pre->norm == DEC_LAYERNORM, nm = x->pre->mlp->n_acts;
    gen *g = ig_calloc(m->ctx, 1, sizeof *g);
    if (!g) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    uint64_t T = (uint64_t)Tmax, C = (uint64_t)m->cfg.d_model, as = m->as;
    uint64_t KV = (uint64_t)dec_own(&m->cfg).n_kv_heads * (uint64_t)dec_hs(&m->cfg);
    uint64_t Q = (uint64_t)x->Ql, H = (uint64_t)x->Hl, Fh = (uint64_t)x->Fl;
    /* per set: n1, attproj, res2, n2, mlp_out, res3: C; qkv: Q; atty: H; the MLP's: F each; then
     * input, hn: C; q: H. fp32: per set the two norms' statistics, then the final norm's */
    uint64_t act = 2 * T * (6 * C + Q + H + (uint64_t)nm * Fh) + T * (2 * C + H);
    uint64_t stats = ln ? 2 : 1;
    ig_status st = ig_lm_gen_alloc(&g->base, m, Tmax, KV, act, 5 * stats * T, err);
    if (st != IG_OK) {
        g->base.m = m;
        dec_gen_close(g);
        return st;
    }
    char *a = g->base.act;
    float *f = g->base.f32;
#define TAKE(n) (a += (n)*T * as, (void *)(a - (n)*T * as))
    for (int k = 0; k < 2; k++) {
        dec_bufs *y = &g->set[k];
        y->n1 = TAKE(C), y->qkv = TAKE(Q), y->atty = TAKE(H), y->attproj = TAKE(C);
        y->res2 = TAKE(C), y->n2 = TAKE(C);
        for (int j = 0; j < nm; j++) y->mlp[j] = TAKE(Fh);
        y->mlp_out = TAKE(C), y->res3 = TAKE(C);
        if (ln) y->mean1 = f, f += T;
        y->rstd1 = f, f += T;
        if (ln) y->mean2 = f, f += T;
        y->rstd2 = f, f += T;
        y->lse = NULL;
    }
    g->input = TAKE(C), g->hn = TAKE(C), g->q = TAKE(H);
#undef TAKE
    if (ln) g->mean_n = f, f += T;
    g->rstd_n = f;
    *session = g;
    return IG_OK;
}

ig_status dec_gen_feed(void *session, const int32_t *tokens, int n, int pos0, const float **logits,
                       ig_err *err) {
    gen *g = session;
    ig_model *m = g->base.m;
    const dec_state *x = dec_of(m);
    int C = m->cfg.d_model, L = m->cfg.n_layer, ln = x->pre->norm == DEC_LAYERNORM;
    if (n < 1 || pos0 < 0 || pos0 + n > g->base.Tmax)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%d tokens at position %d do not fit %d", n,
                          pos0, g->base.Tmax);
    ig_status st = ig_lm_gen_tokens(&g->base, tokens, n, err);
    if (st != IG_OK) return st;
    /* positions pos0 .. : the encoder adds pos[t] for t < n, so learned positions start at row
     * pos0 */
    const char *pos = x->t_pos >= 0 ? ig_model_param(m, (size_t)x->t_pos) : NULL;
    ig_kernel_encoder_forward(m->be, g->input, g->base.tok, ig_model_param(m, (size_t)x->t_embed),
                              pos ? pos + (size_t)pos0 * (size_t)C * m->as : NULL, 1, n, C);
    for (int l = 0; l < L && st == IG_OK; l++) {
        dec_attn ac = {.kc = ig_lm_gen_cache(&g->base, l, 0),
                       .vc = ig_lm_gen_cache(&g->base, l, 1),
                       .q = g->q,
                       .pos0 = pos0,
                       .Tmax = g->base.Tmax};
        st = dec_layer_forward(m, l, &g->set[l & 1], l ? &g->set[(l - 1) & 1] : NULL, g->input,
                               &ac, 1, n, err);
    }
    if (st != IG_OK) return st;
    const dec_bufs *last = &g->set[(L - 1) & 1];
    size_t norm = (size_t)x->t_norm;
    dec_norm_residual(m, last->res3, g->hn, g->mean_n, g->rstd_n, last->res2, last->mlp_out,
                      ig_model_param(m, norm), ln ? ig_model_param(m, norm + 1) : NULL, n);
    return ig_lm_gen_logits(&g->base, g->hn, n, ig_model_param(m, (size_t)x->t_head), logits, err);
}
