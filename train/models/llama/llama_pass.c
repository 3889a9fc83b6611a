/* llama_pass.c - Llama's forward and backward passes over one micro-batch as calls of the
 * backend's operation table and of the tensor-parallel layers (tp_layers.h), and generation with
 * a KV cache through the same layer forward.
 *
 * Per layer (pre-norm; the residual add is fused into the RMSNorm that follows it):
 *   h1 = RMSNorm(res_in); qkv = h1 @ Wqkv^T; rotary embedding of q and k (in place);
 *   atty = attention(qkv) (grouped-query, causal); attproj = atty @ Wo^T; res2 = res_in + attproj;
 *   h2 = RMSNorm(res2); gate = h2 @ Wg^T, up = h2 @ Wu^T; act = silu(gate) * up;
 *   mlp = act @ Wd^T; res3 = res2 + mlp (done by the next RMSNorm).
 * The head: hn = RMSNorm(res3 of the last layer); logits = hn @ W_head^T (the embedding when
 * tied); the fused softmax cross-entropy leaves the logits' gradient in place of the logits.
 *
 * Tensor parallelism as GPT-2's (gpt2_pass.c): q|k|v, gate and up column-parallel, o_proj and
 * down_proj row-parallel, the embedding and the head vocabulary-parallel; the rotary embedding
 * and attention work on a rank's own heads (whole key/value groups). gate and up share their
 * input, so the input's gradient is the sum of theirs (added before the reduction). Sequence
 * parallelism: the norms and residual adds on this rank's 1/tp of the token rows.
 *
 * Recomputation (train.recompute; the places of llama.c's layout), as GPT-2's (gpt2_pass.c): with
 * selective the backward runs attention's forward again from the kept qkv (after the rotary
 * embedding) just before it needs atty and lse; with full it runs layer l's forward again from
 * its kept input after ig_model_use_layer(l), up to act (the down projection's output is not
 * needed), with the forward's kernels on the same inputs. The fused residual add of the forward
 * (res3 = res2 + mlp of layer l - 1, then RMSNorm(res3)) becomes rmsnorm_forward of the kept
 * res3, which both backends compute as the fused form's norm of the stored sum (cpu_rmsnorm.c:
 * the same row code; cuda_rmsnorm.cu: the same kernel, the residual argument only choosing the
 * pointer it reads): the same bits, in bf16 too.
 */
#include "llama.h"

#include <string.h>

#include "../../tp_layers.h"

/* slot activations or a layer's places (family.h), scratch, fp32 likewise */
#define A(off)  ig_model_at(m, off)
#define S(off)  ig_model_scratch(m, off)
#define F(off)  ig_model_at_f32(m, off)
#define FS(off) ig_model_scratch_f32(m, off)

static void *P(const ig_model *m, int l, int which) {
    return ig_model_param(m, llama_lt(m, l, which));
}
static void *G(const ig_model *m, int l, int which) {
    return ig_model_grad(m, llama_lt(m, l, which));
}

/* ---- one layer's forward, for training and for generation ------------------------------------ */

typedef struct layer_bufs {
    void *h1, *h1_full, *qkv, *atty, *attproj, *res2, *h2, *h2_full, *gate, *up, *act, *mlp, *res3;
    float *rstd1, *lse, *rstd2;
} layer_bufs;

/* How attention runs: over the micro-batch (kc NULL; docs or NULL), or the n new rows at
 * positions pos0.. over the layer's caches kc, vc [Tmax, NKV hs] (q: [n, NH hs] scratch). */
typedef struct attn_ctx {
    const int32_t *docs;
    void *kc, *vc, *q;
    int pos0, Tmax;
} attn_ctx;

static layer_bufs slot_bufs(const ig_model *m, const llama_layer_acts *y) {
    return (layer_bufs){A(y->h1),      A(y->h1_full), A(y->qkv), A(y->atty),
                        A(y->attproj), A(y->res2),    A(y->h2),  A(y->h2_full),
                        A(y->gate),    A(y->up),      A(y->act), A(y->mlp),
                        A(y->res3),    F(y->rstd1),   F(y->lse), F(y->rstd2)};
}

static ig_attention_shape attn_shape(const ig_model *m, int B, int T) {
    return (ig_attention_shape){.B = B,
                                .T = T,
                                .n_head = m->cfg.n_head / m->part.tp,
                                .n_kv_head = m->cfg.n_kv_heads / m->part.tp,
                                .head_size = llama_hs(&m->cfg),
                                .causal = 1};
}

static ig_status attention(ig_model *m, const layer_bufs *y, const attn_ctx *ac, int B, int T,
                           ig_err *err) {
    ig_attention_shape s = attn_shape(m, B, T);
    int hs = s.head_size, NH = s.n_head, NKV = s.n_kv_head;
    ig_kernel_rope_forward(m->be, y->qkv, B, T, NH, NKV, hs, ac->kc ? ac->pos0 : 0,
                           (float)m->cfg.rope_theta);
    if (!ac->kc) {
        ig_kernel_attention_forward(m->be, y->atty, y->lse, y->qkv, ac->docs, &s);
        return IG_OK;
    }
    ig_status st = ig_lm_kv_append(m, y->qkv, T, ac->pos0, &s, ac->q, ac->kc, ac->vc, err);
    if (st == IG_OK)
        ig_kernel_attention_cached(m->be, y->atty, ac->q, ac->kc, ac->vc, ac->pos0, ac->Tmax, &s);
    return st;
}

/* Layer l on B x T rows from its normed input y->h1 on; res_in is its input. Without `all` it
 * stops before the down projection (what a recomputation for the backward needs). */
static ig_status layer_rest(ig_model *m, int l, const layer_bufs *y, const void *res_in,
                            const attn_ctx *ac, int B, int T, int all, ig_err *err) {
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const llama_state *x = llama_of(m);
    int N = B * T, Nl = p->sp ? N / p->tp : N, C = m->cfg.d_model;
    float eps = (float)m->cfg.norm_eps;
    ig_status st;
    const void *h1 = NULL, *h2 = NULL;
    if ((st = ig_tp_gather(m, y->h1, y->h1_full, N, C, &h1, err)) != IG_OK) return st;
    ig_kernel_matmul_forward(be, y->qkv, h1, P(m, l, LLAMA_QKV), IG_W_OUT_IN, NULL, N, C, x->Ql);
    if ((st = attention(m, y, ac, B, T, err)) != IG_OK) return st;
    st = ig_tp_row_linear(m, y->attproj, y->atty, P(m, l, LLAMA_O), IG_W_OUT_IN, NULL,
                          S(x->partial), N, x->Hl, C, err);
    if (st != IG_OK) return st;
    ig_kernel_residual_rmsnorm_forward(be, y->res2, y->h2, y->rstd2, res_in, y->attproj,
                                       P(m, l, LLAMA_MLP_NORM), Nl, C, eps);
    if ((st = ig_tp_gather(m, y->h2, y->h2_full, N, C, &h2, err)) != IG_OK) return st;
    ig_kernel_matmul_forward(be, y->gate, h2, P(m, l, LLAMA_GATE), IG_W_OUT_IN, NULL, N, C, x->Fl);
    ig_kernel_matmul_forward(be, y->up, h2, P(m, l, LLAMA_UP), IG_W_OUT_IN, NULL, N, C, x->Fl);
    ig_kernel_swiglu_forward(be, y->act, y->gate, y->up, N, x->Fl);
    if (!all) return IG_OK;
    return ig_tp_row_linear(m, y->mlp, y->act, P(m, l, LLAMA_DOWN), IG_W_OUT_IN, NULL,
                            S(x->partial), N, x->Fl, C, err);
}

/* Layer l on B x T rows: res_in is prev's res3 (the fused residual add writes it) or, for the
 * stage's first layer (prev NULL), the stage's input. */
static ig_status layer_forward(ig_model *m, int l, const layer_bufs *y, const layer_bufs *prev,
                               void *input, const attn_ctx *ac, int B, int T, ig_err *err) {
    const ig_part *p = &m->part;
    int N = B * T, Nl = p->sp ? N / p->tp : N, C = m->cfg.d_model;
    float eps = (float)m->cfg.norm_eps;
    void *res_in = prev ? prev->res3 : input;
    if (!prev)
        ig_kernel_rmsnorm_forward(m->be, y->h1, y->rstd1, res_in, P(m, l, LLAMA_ATTN_NORM), Nl, C,
                                  eps);
    else
        ig_kernel_residual_rmsnorm_forward(m->be, prev->res3, y->h1, y->rstd1, prev->res2,
                                           prev->mlp, P(m, l, LLAMA_ATTN_NORM), Nl, C, eps);
    return layer_rest(m, l, y, res_in, ac, B, T, 1, err);
}

/* Full recomputation: layer l's forward again from its kept input res_in, up to what its backward
 * reads (the norm of the stored res_in: what the fused form computed, see the header). */
static ig_status layer_recompute(ig_model *m, int l, const layer_bufs *y, const void *res_in,
                                 const attn_ctx *ac, int B, int T, ig_err *err) {
    const ig_part *p = &m->part;
    int N = B * T, Nl = p->sp ? N / p->tp : N;
    ig_kernel_rmsnorm_forward(m->be, y->h1, y->rstd1, res_in, P(m, l, LLAMA_ATTN_NORM), Nl,
                              m->cfg.d_model, (float)m->cfg.norm_eps);
    return layer_rest(m, l, y, res_in, ac, B, T, 0, err);
}

/* ---- the stage's pieces (the stage driver, stage.c, runs them) -------------------------------
 */

/* the slot's micro-batch: rows, rows held (sp), document ids for attention (or NULL) */
typedef struct dims {
    int B, T, N, Nl, C;
    const int32_t *docs;
} dims;

static dims dims_of(const ig_model *m) {
    const ig_part *p = &m->part;
    dims d = {.B = m->slot_B[m->slot], .T = m->slot_T[m->slot], .C = m->cfg.d_model};
    d.N = d.B * d.T;
    d.Nl = p->sp ? d.N / p->tp : d.N;
    d.docs = m->doc_attention ? ig_model_i32(m, 2 * (uint64_t)llama_of(m)->N) : NULL;
    return d;
}

/* the vocabulary-parallel embedding: a partial sum over the ranks */
static ig_status llama_embed_forward(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    const llama_state *x = llama_of(m);
    dims d = dims_of(m);
    void *dst = p->sp ? S(x->partial) : A(x->encoded);
    ig_kernel_encoder_forward(m->be, dst, ig_model_i32(m, 0),
                              ig_model_param(m, (size_t)x->t_embed), NULL, d.B, d.T, d.C);
    if (p->tp > 1) return ig_tp_reduce(m, dst, A(x->encoded), d.N, d.C, err);
    return IG_OK;
}

static ig_status llama_layer_fwd(ig_model *m, int l, ig_err *err) {
    const llama_state *x = llama_of(m);
    dims d = dims_of(m);
    attn_ctx ac = {.docs = d.docs};
    layer_bufs y = slot_bufs(m, &x->layer[l - m->part.l0]), prev;
    if (l > m->part.l0) prev = slot_bufs(m, &x->layer[l - 1 - m->part.l0]);
    return layer_forward(m, l, &y, l > m->part.l0 ? &prev : NULL, A(x->encoded), &ac, d.B, d.T,
                         err);
}

/* a middle stage's output: the last layer's residual add, which the next norm would have fused */
static ig_status llama_stage_output(ig_model *m, ig_err *err) {
    (void)err;
    const llama_state *x = llama_of(m);
    dims d = dims_of(m);
    layer_bufs last = slot_bufs(m, &x->layer[m->part.l1 - 1 - m->part.l0]);
    ig_kernel_add(m->be, A(x->output), last.res2, last.mlp, (size_t)d.Nl * (size_t)d.C);
    return IG_OK;
}

static ig_status llama_head_forward(ig_model *m, int with_grad, ig_err *err) {
    ig_backend *be = m->be;
    const llama_state *x = llama_of(m);
    dims d = dims_of(m);
    layer_bufs last = slot_bufs(m, &x->layer[m->part.l1 - 1 - m->part.l0]);
    ig_kernel_residual_rmsnorm_forward(be, last.res3, A(x->hn), F(x->rstd_n), last.res2, last.mlp,
                                       ig_model_param(m, (size_t)x->t_norm), d.Nl, d.C,
                                       (float)m->cfg.norm_eps);
    const void *hn = NULL;
    ig_status st = ig_tp_gather(m, A(x->hn), A(x->hn_full), d.N, d.C, &hn, err);
    if (st != IG_OK) return st;
    ig_kernel_matmul_forward(be, A(x->logits), hn, ig_model_param(m, (size_t)x->t_head),
                             IG_W_OUT_IN, NULL, d.N, d.C, x->Vl);
    uint64_t rows = (uint64_t)x->N;
    return ig_tp_cross_entropy(m, ig_model_io_f32(m, 0), A(x->logits), ig_model_i32(m, rows),
                               with_grad ? ig_model_io_f32(m, rows) : NULL, FS(x->rowmax),
                               FS(x->stats), d.N, err);
}

static ig_status llama_head_backward(ig_model *m, ig_err *err) {
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const llama_state *x = llama_of(m);
    dims d = dims_of(m);
    void *dres = S(x->dres), *dl = NULL, *dpart = S(x->dpartial), *dln = S(x->dln);
    size_t norm = (size_t)x->t_norm, head = (size_t)x->t_head;
    const llama_layer_acts *last = &x->layer[p->l1 - 1 - p->l0];
    const void *in = p->sp ? A(x->hn_full) : A(x->hn);
    ig_kernel_matmul_backward(be, ig_tp_dinput_target(m, dpart, dln), ig_model_grad(m, head), NULL,
                              A(x->logits), in, ig_model_param(m, head), IG_W_OUT_IN, d.N, d.C,
                              x->Vl);
    ig_status st = ig_tp_dinput_reduce(m, dpart, dln, d.N, d.C, &dl, err);
    if (st != IG_OK) return st;
    ig_backend_zero(be, dres, (size_t)d.Nl * (size_t)d.C * m->as, NULL);
    ig_kernel_rmsnorm_backward(be, dres, ig_model_grad(m, norm), dl, A(last->res3),
                               ig_model_param(m, norm), F(x->rstd_n), d.Nl, d.C);
    return IG_OK;
}

/* layer l's input: the previous layer's res3, or the stage's input */
static const void *res_input(const ig_model *m, int l) {
    const llama_state *x = llama_of(m);
    return l > m->part.l0 ? A(x->layer[l - 1 - m->part.l0].res3) : A(x->encoded);
}

static ig_status llama_layer_recompute(ig_model *m, int l, ig_err *err) {
    dims d = dims_of(m);
    attn_ctx ac = {.docs = d.docs};
    layer_bufs yb = slot_bufs(m, &llama_of(m)->layer[l - m->part.l0]);
    return layer_recompute(m, l, &yb, res_input(m, l), &ac, d.B, d.T, err);
}

static ig_status llama_layer_backward(ig_model *m, int l, ig_err *err) {
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const llama_state *x = llama_of(m);
    dims d = dims_of(m);
    int B = d.B, T = d.T, N = d.N, Nl = d.Nl, C = d.C;
    ig_attention_shape shape = attn_shape(m, B, T);
    void *dres = S(x->dres), *dl = NULL, *dpart = S(x->dpartial), *dln = S(x->dln);
    const void *dfull = NULL, *in = NULL;
    const llama_layer_acts *y = &x->layer[l - p->l0];
    const void *res_in = res_input(m, l);
    ig_status st;
    /* res3 = res2 + mlp: dres is the gradient of both */
    if ((st = ig_tp_gather(m, dres, S(x->dres_full), N, C, &dfull, err)) != IG_OK) return st;
    ig_kernel_matmul_backward(be, S(x->dact), G(m, l, LLAMA_DOWN), NULL, dfull, A(y->act),
                              P(m, l, LLAMA_DOWN), IG_W_OUT_IN, N, x->Fl, C);
    ig_kernel_swiglu_backward(be, S(x->dgate), S(x->dup), S(x->dact), A(y->gate), A(y->up), N,
                              x->Fl);
    in = p->sp ? A(y->h2_full) : A(y->h2);
    void *dh2 = ig_tp_dinput_target(m, dpart, dln);
    ig_kernel_matmul_backward(be, dh2, G(m, l, LLAMA_GATE), NULL, S(x->dgate), in,
                              P(m, l, LLAMA_GATE), IG_W_OUT_IN, N, C, x->Fl);
    ig_kernel_matmul_backward(be, S(x->dtmp), G(m, l, LLAMA_UP), NULL, S(x->dup), in,
                              P(m, l, LLAMA_UP), IG_W_OUT_IN, N, C, x->Fl);
    ig_kernel_add(be, dh2, dh2, S(x->dtmp), (size_t)N * (size_t)C);
    if ((st = ig_tp_dinput_reduce(m, dpart, dln, N, C, &dl, err)) != IG_OK) return st;
    ig_kernel_rmsnorm_backward(be, dres, G(m, l, LLAMA_MLP_NORM), dl, A(y->res2),
                               P(m, l, LLAMA_MLP_NORM), F(y->rstd2), Nl, C);
    /* res2 = res_in + attproj: dres is the gradient of both */
    if ((st = ig_tp_gather(m, dres, S(x->dres_full), N, C, &dfull, err)) != IG_OK) return st;
    if (p->recompute == IG_RECOMPUTE_SELECTIVE) /* the attention core, from the kept qkv */
        ig_kernel_attention_forward(be, A(y->atty), F(y->lse), A(y->qkv), d.docs, &shape);
    ig_kernel_matmul_backward(be, S(x->datty), G(m, l, LLAMA_O), NULL, dfull, A(y->atty),
                              P(m, l, LLAMA_O), IG_W_OUT_IN, N, x->Hl, C);
    ig_kernel_attention_backward(be, S(x->dqkv), S(x->datty), A(y->qkv), A(y->atty), F(y->lse),
                                 d.docs, &shape);
    ig_kernel_rope_backward(be, S(x->dqkv), B, T, shape.n_head, shape.n_kv_head, shape.head_size,
                            0, (float)m->cfg.rope_theta);
    in = p->sp ? A(y->h1_full) : A(y->h1);
    ig_kernel_matmul_backward(be, ig_tp_dinput_target(m, dpart, dln), G(m, l, LLAMA_QKV), NULL,
                              S(x->dqkv), in, P(m, l, LLAMA_QKV), IG_W_OUT_IN, N, C, x->Ql);
    if ((st = ig_tp_dinput_reduce(m, dpart, dln, N, C, &dl, err)) != IG_OK) return st;
    ig_kernel_rmsnorm_backward(be, dres, G(m, l, LLAMA_ATTN_NORM), dl, res_in,
                               P(m, l, LLAMA_ATTN_NORM), F(y->rstd1), Nl, C);
    return IG_OK;
}

static ig_status llama_embed_backward(ig_model *m, ig_err *err) {
    const llama_state *x = llama_of(m);
    dims d = dims_of(m);
    const void *dfull = NULL;
    ig_status st = ig_tp_gather(m, S(x->dres), S(x->dres_full), d.N, d.C, &dfull, err);
    if (st != IG_OK) return st;
    ig_kernel_encoder_backward(m->be, ig_model_grad(m, (size_t)x->t_embed), NULL, dfull,
                               ig_model_i32(m, 0), d.B, d.T, d.C);
    return IG_OK;
}

const ig_stage_hooks llama_stage = {.embed_forward = llama_embed_forward,
                                    .layer_forward = llama_layer_fwd,
                                    .stage_output = llama_stage_output,
                                    .head_forward = llama_head_forward,
                                    .head_backward = llama_head_backward,
                                    .layer_recompute = llama_layer_recompute,
                                    .layer_backward = llama_layer_backward,
                                    .embed_backward = llama_embed_backward};

void llama_stage_io(ig_model *m, int slot, ig_stage_io *io) {
    const llama_state *x = llama_of(m);
    ig_lm_stage_io(m, slot, x->encoded, x->output, x->dres, io);
}

/* ---- generation -------------------------------------------------------------------------------
 */

/* A generation session: the key/value caches ([Tmax, NKV hs] each per layer), two sets of layer
 * buffers of Tmax rows the layers take turns in, the stage's input, the final norm and the query
 * scratch. */
typedef struct gen {
    ig_lm_gen base;
    layer_bufs set[2];
    void *input, *hn, *q;
    float *rstd_n;
} gen;

void llama_gen_close(void *session) {
    gen *g = session;
    if (!g) return;
    ig_lm_gen_release(&g->base);
    ig_free(g->base.m->ctx, g);
}

ig_status llama_gen_open(ig_model *m, int Tmax, void **session, ig_err *err) {
    *session = NULL;
    const llama_state *x = llama_of(m);
    gen *g = ig_calloc(m->ctx, 1, sizeof *g);
    if (!g) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    uint64_t T = (uint64_t)Tmax, C = (uint64_t)m->cfg.d_model, as = m->as;
    uint64_t KV = (uint64_t)m->cfg.n_kv_heads * (uint64_t)llama_hs(&m->cfg);
    uint64_t Q = (uint64_t)x->Ql, H = (uint64_t)x->Hl, Fh = (uint64_t)x->Fl;
    /* per set: h1, attproj, res2, h2, mlp, res3: C; qkv: Q; atty: H; gate, up, act: F; then
     * input, hn: C; q: H. fp32: per set 2 rows of statistics, then the final norm's */
    uint64_t act = 2 * T * (6 * C + Q + H + 3 * Fh) + T * (2 * C + H);
    ig_status st = ig_lm_gen_alloc(&g->base, m, Tmax, KV, act, 5 * T, err);
    if (st != IG_OK) {
        g->base.m = m;
        llama_gen_close(g);
        return st;
    }
    char *a = g->base.act;
    float *f = g->base.f32;
#define TAKE(n) (a += (n)*T * as, (void *)(a - (n)*T * as))
    for (int k = 0; k < 2; k++) {
        layer_bufs *y = &g->set[k];
        y->h1 = TAKE(C), y->qkv = TAKE(Q), y->atty = TAKE(H), y->attproj = TAKE(C);
        y->res2 = TAKE(C), y->h2 = TAKE(C), y->gate = TAKE(Fh), y->up = TAKE(Fh);
        y->act = TAKE(Fh), y->mlp = TAKE(C), y->res3 = TAKE(C);
        y->rstd1 = f, f += T;
        y->rstd2 = f, f += T;
        y->lse = NULL;
    }
    g->input = TAKE(C), g->hn = TAKE(C), g->q = TAKE(H);
#undef TAKE
    g->rstd_n = f;
    *session = g;
    return IG_OK;
}

ig_status llama_gen_feed(void *session, const int32_t *tokens, int n, int pos0,
                         const float **logits, ig_err *err) {
    gen *g = session;
    ig_model *m = g->base.m;
    ig_backend *be = m->be;
    const llama_state *x = llama_of(m);
    int C = m->cfg.d_model, L = m->cfg.n_layer;
    if (n < 1 || pos0 < 0 || pos0 + n > g->base.Tmax)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%d tokens at position %d do not fit %d", n,
                          pos0, g->base.Tmax);
    ig_status st = ig_lm_gen_tokens(&g->base, tokens, n, err);
    if (st != IG_OK) return st;
    ig_kernel_encoder_forward(be, g->input, g->base.tok, ig_model_param(m, (size_t)x->t_embed),
                              NULL, 1, n, C);
    for (int l = 0; l < L && st == IG_OK; l++) {
        attn_ctx ac = {.kc = ig_lm_gen_cache(&g->base, l, 0),
                       .vc = ig_lm_gen_cache(&g->base, l, 1),
                       .q = g->q,
                       .pos0 = pos0,
                       .Tmax = g->base.Tmax};
        st = layer_forward(m, l, &g->set[l & 1], l ? &g->set[(l - 1) & 1] : NULL, g->input, &ac, 1,
                           n, err);
    }
    if (st != IG_OK) return st;
    const layer_bufs *last = &g->set[(L - 1) & 1];
    ig_kernel_residual_rmsnorm_forward(be, last->res3, g->hn, g->rstd_n, last->res2, last->mlp,
                                       ig_model_param(m, (size_t)x->t_norm), n, C,
                                       (float)m->cfg.norm_eps);
    return ig_lm_gen_logits(&g->base, g->hn, n, ig_model_param(m, (size_t)x->t_head), logits, err);
}
