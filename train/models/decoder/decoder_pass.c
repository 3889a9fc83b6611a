/* decoder_pass.c - the decoder's forward and backward over one micro-batch, as the pieces the stage
 * driver (stage.c) runs, in calls of the backend's operation table and of the tensor-parallel
 * layers (tp_layers.h); generation (decoder_gen.c) runs the same layer forward.
 *
 * Per layer (pre-norm; the residual add is fused into the norm that follows it):
 *   n1 = norm(res_in); qkv = n1 @ Wqkv (+ b); rotary positions on q and k (rotary presets);
 *   atty = attention(qkv) (causal, grouped-query); attproj = atty @ Wproj (+ b);
 *   res2 = res_in + attproj, n2 = norm(res2); mlp_out = MLP(n2) (decoder_mlp.c);
 *   res3 = res2 + mlp_out (done by the next norm).
 * The head: hn = norm(res3 of the last layer); logits = hn @ W_head^T (the embedding when tied);
 * the fused softmax cross-entropy leaves the logits' gradient in place of the logits.
 *
 * Tensor parallelism: each rank computes its heads and its share of the MLP from the whole input
 * (column-parallel q|k|v and MLP inputs, row-parallel projections); the embedding and the head are
 * vocabulary-parallel. Sequence parallelism: the norms and residual adds work on this rank's 1/tp
 * of the token rows; the gathered inputs are kept for the weight gradients (no second all-gather
 * in the backward), and the norms' gradients, taken over this rank's rows, are partial (summed by
 * the optimizer).
 *
 * Recomputation (train.recompute; the places of decoder.c's layout): with selective the attention
 * core's output and lse live in the scratch and the backward runs attention's forward again from
 * the kept qkv (after the rotary embedding) just before it needs them; with full a slot keeps only
 * each layer's input and the backward runs the layer's forward again from it, up to the MLP's
 * activations (its projection's output is not needed by the backward). Both call the same kernels
 * on the same inputs as the forward, so the recomputed buffers, and the losses and weights, are
 * the same bits as with none. The one kernel that differs: the forward normalises layer l's input
 * with the residual add fused in (res3 = res2 + mlp_out of layer l - 1, then norm(res3)), which
 * the recomputation cannot repeat (res2 and mlp_out are not kept); it takes the plain norm of the
 * kept res3. Both backends compute the fused form as "store the sum, then the plain norm of the
 * stored values": on the CPU the same row function on the stored row (cpu_layernorm.c,
 * cpu_rmsnorm.c), on CUDA the same kernel, whose residual argument only chooses which pointer the
 * norm reads, so the bf16 sum is rounded before the statistics either way. Tensor-parallel
 * collectives inside a recomputed layer run again, on every rank in the same order.
 */
#include "decoder_pass.h"

#include "family/tp_layers.h"

/* slot activations or a layer's places (family.h), scratch, fp32 likewise */
#define A(off)  ig_model_at(m, off)
#define S(off)  ig_model_scratch(m, off)
#define F(off)  ig_model_at_f32(m, off)
#define FS(off) ig_model_scratch_f32(m, off)

#define P(l, r) dec_param(m, l, r)
#define G(l, r) dec_grad(m, l, r)

/* ---- the norms ------------------------------------------------------------------------------- */

void dec_norm(ig_model *m, void *out, float *mean, float *rstd, const void *in, const void *w,
              const void *b, int rows) {
    float eps = (float)m->cfg.norm_eps;
    if (dec_of(m)->pre->norm == DEC_LAYERNORM)
        ig_kernel_layernorm_forward(m->be, out, mean, rstd, in, w, b, rows, m->cfg.d_model, eps);
    else
        ig_kernel_rmsnorm_forward(m->be, out, rstd, in, w, rows, m->cfg.d_model, eps);
}

void dec_norm_residual(ig_model *m, void *res, void *out, float *mean, float *rstd, const void *a,
                       const void *x, const void *w, const void *b, int rows) {
    float eps = (float)m->cfg.norm_eps;
    if (dec_of(m)->pre->norm == DEC_LAYERNORM)
        ig_kernel_residual_layernorm_forward(m->be, res, out, mean, rstd, a, x, w, b, rows,
                                             m->cfg.d_model, eps);
    else
        ig_kernel_residual_rmsnorm_forward(m->be, res, out, rstd, a, x, w, rows, m->cfg.d_model,
                                           eps);
}

static void norm_backward(ig_model *m, void *dinp, void *dw, void *db, const void *dout,
                          const void *inp, const void *w, const float *mean, const float *rstd,
                          int rows) {
    if (dec_of(m)->pre->norm == DEC_LAYERNORM)
        ig_kernel_layernorm_backward(m->be, dinp, dw, db, dout, inp, w, mean, rstd, rows,
                                     m->cfg.d_model);
    else
        ig_kernel_rmsnorm_backward(m->be, dinp, dw, dout, inp, w, rstd, rows, m->cfg.d_model);
}

/* ---- one layer's forward, for training and for generation ------------------------------------ */

dec_bufs dec_slot_bufs(const ig_model *m, int l) {
    const dec_state *x = dec_of(m);
    const dec_layer_acts *y = &x->layer[l - m->part.l0];
    int ln = x->pre->norm == DEC_LAYERNORM;
    dec_bufs b = {.n1 = A(y->n1),
                  .n1_full = A(y->n1_full),
                  .qkv = A(y->qkv),
                  .atty = A(y->atty),
                  .attproj = A(y->attproj),
                  .res2 = A(y->res2),
                  .n2 = A(y->n2),
                  .n2_full = A(y->n2_full),
                  .mlp_out = A(y->mlp_out),
                  .res3 = A(y->res3),
                  .mean1 = ln ? F(y->mean1) : NULL,
                  .rstd1 = F(y->rstd1),
                  .lse = F(y->lse),
                  .mean2 = ln ? F(y->mean2) : NULL,
                  .rstd2 = F(y->rstd2)};
    for (int k = 0; k < x->pre->mlp->n_acts; k++) b.mlp[k] = A(y->mlp[k]);
    return b;
}

static ig_attention_shape attn_shape(const ig_model *m, int B, int T) {
    return (ig_attention_shape){.B = B,
                                .T = T,
                                .n_head = m->cfg.n_head / m->part.tp,
                                .n_kv_head = dec_own(&m->cfg).n_kv_heads / m->part.tp,
                                .head_size = dec_hs(&m->cfg),
                                .causal = 1};
}

static ig_status attention(ig_model *m, const dec_bufs *y, const dec_attn *ac, int B, int T,
                           ig_err *err) {
    ig_attention_shape s = attn_shape(m, B, T);
    if (dec_of(m)->pre->rotary)
        ig_kernel_rope_forward(m->be, y->qkv, B, T, s.n_head, s.n_kv_head, s.head_size,
                               ac->kc ? ac->pos0 : 0, (float)dec_own(&m->cfg).rope_theta);
    if (!ac->kc) {
        ig_kernel_attention_forward(m->be, y->atty, y->lse, y->qkv, ac->docs, &s);
        return IG_OK;
    }
    ig_status st = ig_lm_kv_append(m, y->qkv, T, ac->pos0, &s, ac->q, ac->kc, ac->vc, err);
    if (st == IG_OK)
        ig_kernel_attention_cached(m->be, y->atty, ac->q, ac->kc, ac->vc, ac->pos0, ac->Tmax, &s);
    return st;
}

/* Layer l on B x T rows from its normed input y->n1 on; res_in is its input. Without `all` it
 * stops before the MLP's projection (what a recomputation for the backward needs). */
static ig_status layer_rest(ig_model *m, int l, const dec_bufs *y, const void *res_in,
                            const dec_attn *ac, int B, int T, int all, ig_err *err) {
    const ig_part *p = &m->part;
    const dec_state *x = dec_of(m);
    ig_w_layout lay = x->pre->layout;
    int N = B * T, Nl = p->sp ? N / p->tp : N, C = m->cfg.d_model;
    ig_status st;
    const void *n1 = NULL, *n2 = NULL;
    if ((st = ig_tp_gather(m, y->n1, y->n1_full, N, C, &n1, err)) != IG_OK) return st;
    ig_kernel_matmul_forward(m->be, y->qkv, n1, P(l, DEC_QKV_W), lay, P(l, DEC_QKV_B), N, C, x->Ql);
    if ((st = attention(m, y, ac, B, T, err)) != IG_OK) return st;
    st = ig_tp_row_linear(m, y->attproj, y->atty, P(l, DEC_PROJ_W), lay, P(l, DEC_PROJ_B),
                          S(x->partial), N, x->Hl, C, err);
    if (st != IG_OK) return st;
    dec_norm_residual(m, y->res2, y->n2, y->mean2, y->rstd2, res_in, y->attproj, P(l, DEC_NORM2_W),
                      P(l, DEC_NORM2_B), Nl);
    if ((st = ig_tp_gather(m, y->n2, y->n2_full, N, C, &n2, err)) != IG_OK) return st;
    return x->pre->mlp->forward(m, l, n2, y->mlp, y->mlp_out, N, all, err);
}

ig_status dec_layer_forward(ig_model *m, int l, const dec_bufs *y, const dec_bufs *prev,
                            void *input, const dec_attn *ac, int B, int T, ig_err *err) {
    const ig_part *p = &m->part;
    int N = B * T, Nl = p->sp ? N / p->tp : N;
    void *res_in = prev ? prev->res3 : input;
    if (!prev)
        dec_norm(m, y->n1, y->mean1, y->rstd1, res_in, P(l, DEC_NORM1_W), P(l, DEC_NORM1_B), Nl);
    else
        dec_norm_residual(m, prev->res3, y->n1, y->mean1, y->rstd1, prev->res2, prev->mlp_out,
                          P(l, DEC_NORM1_W), P(l, DEC_NORM1_B), Nl);
    return layer_rest(m, l, y, res_in, ac, B, T, 1, err);
}

/* ---- the stage's pieces (the stage driver, stage.c, runs them) ------------------------------- */

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
    d.docs = m->doc_attention ? ig_model_i32(m, 2 * (uint64_t)dec_of(m)->N) : NULL;
    return d;
}

/* the vocabulary-parallel embedding (and learned positions, on tensor-parallel rank 0): a partial
 * sum over the ranks */
static ig_status embed_forward(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    const dec_state *x = dec_of(m);
    dims d = dims_of(m);
    const void *pos = x->t_pos >= 0 && p->tp_rank == 0 ? ig_model_param(m, (size_t)x->t_pos) : NULL;
    void *dst = p->sp ? S(x->partial) : A(x->encoded);
    ig_kernel_encoder_forward(m->be, dst, ig_model_i32(m, 0), ig_model_param(m, (size_t)x->t_embed),
                              pos, d.B, d.T, d.C);
    if (p->tp > 1) return ig_tp_reduce(m, dst, A(x->encoded), d.N, d.C, err);
    return IG_OK;
}

static ig_status layer_fwd(ig_model *m, int l, ig_err *err) {
    const dec_state *x = dec_of(m);
    dims d = dims_of(m);
    dec_attn ac = {.docs = d.docs};
    dec_bufs y = dec_slot_bufs(m, l), prev;
    if (l > m->part.l0) prev = dec_slot_bufs(m, l - 1);
    return dec_layer_forward(m, l, &y, l > m->part.l0 ? &prev : NULL, A(x->encoded), &ac, d.B, d.T,
                             err);
}

/* a middle stage's output: the last layer's residual add, which the next norm would have fused */
static ig_status stage_output(ig_model *m, ig_err *err) {
    (void)err;
    dims d = dims_of(m);
    dec_bufs last = dec_slot_bufs(m, m->part.l1 - 1);
    ig_kernel_add(m->be, A(dec_of(m)->output), last.res2, last.mlp_out, (size_t)d.Nl * (size_t)d.C);
    return IG_OK;
}

static ig_status head_forward(ig_model *m, int with_grad, ig_err *err) {
    const dec_state *x = dec_of(m);
    dims d = dims_of(m);
    dec_bufs last = dec_slot_bufs(m, m->part.l1 - 1);
    int ln = x->pre->norm == DEC_LAYERNORM;
    size_t norm = (size_t)x->t_norm;
    dec_norm_residual(m, last.res3, A(x->hn), ln ? F(x->mean_n) : NULL, F(x->rstd_n), last.res2,
                      last.mlp_out, ig_model_param(m, norm),
                      ln ? ig_model_param(m, norm + 1) : NULL, d.Nl);
    const void *hn = NULL;
    ig_status st = ig_tp_gather(m, A(x->hn), A(x->hn_full), d.N, d.C, &hn, err);
    if (st != IG_OK) return st;
    ig_kernel_matmul_forward(m->be, A(x->logits), hn, ig_model_param(m, (size_t)x->t_head),
                             IG_W_OUT_IN, NULL, d.N, d.C, x->Vl);
    uint64_t rows = (uint64_t)x->N;
    return ig_tp_cross_entropy(m, ig_model_io_f32(m, 0), A(x->logits), ig_model_i32(m, rows),
                               with_grad ? ig_model_io_f32(m, rows) : NULL, FS(x->rowmax),
                               FS(x->stats), d.N, err);
}

/* the head: the logits hold their gradient; dres starts at 0 and gathers the residual stream's */
static ig_status head_backward(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    const dec_state *x = dec_of(m);
    dims d = dims_of(m);
    int ln = x->pre->norm == DEC_LAYERNORM;
    void *dres = S(x->dres), *dl = NULL, *dpart = S(x->dpartial), *dln = S(x->dln);
    size_t norm = (size_t)x->t_norm, head = (size_t)x->t_head;
    const dec_layer_acts *last = &x->layer[p->l1 - 1 - p->l0];
    const void *in = p->sp ? A(x->hn_full) : A(x->hn);
    ig_kernel_matmul_backward(m->be, ig_tp_dinput_target(m, dpart, dln), ig_model_grad(m, head),
                              NULL, A(x->logits), in, ig_model_param(m, head), IG_W_OUT_IN, d.N,
                              d.C, x->Vl);
    ig_status st = ig_tp_dinput_reduce(m, dpart, dln, d.N, d.C, &dl, err);
    if (st != IG_OK) return st;
    ig_backend_zero(m->be, dres, (size_t)d.Nl * (size_t)d.C * m->as, NULL);
    norm_backward(m, dres, ig_model_grad(m, norm), ln ? ig_model_grad(m, norm + 1) : NULL, dl,
                  A(last->res3), ig_model_param(m, norm), ln ? F(x->mean_n) : NULL, F(x->rstd_n),
                  d.Nl);
    return IG_OK;
}

/* layer l's input: the previous layer's res3, or the stage's input */
static const void *res_input(const ig_model *m, int l) {
    const dec_state *x = dec_of(m);
    return l > m->part.l0 ? A(x->layer[l - 1 - m->part.l0].res3) : A(x->encoded);
}

/* Full recomputation: layer l's forward again from its kept input, up to what its backward reads
 * (the norm of the stored input: what the fused form computed, see the header). */
static ig_status layer_recompute(ig_model *m, int l, ig_err *err) {
    dims d = dims_of(m);
    dec_attn ac = {.docs = d.docs};
    dec_bufs y = dec_slot_bufs(m, l);
    const void *res_in = res_input(m, l);
    dec_norm(m, y.n1, y.mean1, y.rstd1, res_in, P(l, DEC_NORM1_W), P(l, DEC_NORM1_B), d.Nl);
    return layer_rest(m, l, &y, res_in, &ac, d.B, d.T, 0, err);
}

static ig_status layer_backward(ig_model *m, int l, ig_err *err) {
    const ig_part *p = &m->part;
    const dec_state *x = dec_of(m);
    ig_w_layout lay = x->pre->layout;
    dims d = dims_of(m);
    int N = d.N, Nl = d.Nl, C = d.C;
    ig_attention_shape shape = attn_shape(m, d.B, d.T);
    void *dres = S(x->dres), *dl = NULL, *dpart = S(x->dpartial), *dln = S(x->dln);
    const void *dfull = NULL;
    dec_bufs y = dec_slot_bufs(m, l);
    const void *res_in = res_input(m, l);
    ig_status st;
    /* res3 = res2 + mlp_out: dres is the gradient of both */
    if ((st = ig_tp_gather(m, dres, S(x->dres_full), N, C, &dfull, err)) != IG_OK) return st;
    x->pre->mlp->backward(m, l, dfull, p->sp ? y.n2_full : y.n2, y.mlp,
                          ig_tp_dinput_target(m, dpart, dln), N);
    if ((st = ig_tp_dinput_reduce(m, dpart, dln, N, C, &dl, err)) != IG_OK) return st;
    norm_backward(m, dres, G(l, DEC_NORM2_W), G(l, DEC_NORM2_B), dl, y.res2, P(l, DEC_NORM2_W),
                  y.mean2, y.rstd2, Nl);
    /* res2 = res_in + attproj: dres is the gradient of both */
    if ((st = ig_tp_gather(m, dres, S(x->dres_full), N, C, &dfull, err)) != IG_OK) return st;
    if (p->recompute == IG_RECOMPUTE_SELECTIVE) /* the attention core, from the kept qkv */
        ig_kernel_attention_forward(m->be, y.atty, y.lse, y.qkv, d.docs, &shape);
    ig_kernel_matmul_backward(m->be, S(x->datty), G(l, DEC_PROJ_W), G(l, DEC_PROJ_B), dfull, y.atty,
                              P(l, DEC_PROJ_W), lay, N, x->Hl, C);
    ig_kernel_attention_backward(m->be, S(x->dqkv), S(x->datty), y.qkv, y.atty, y.lse, d.docs,
                                 &shape);
    if (x->pre->rotary)
        ig_kernel_rope_backward(m->be, S(x->dqkv), d.B, d.T, shape.n_head, shape.n_kv_head,
                                shape.head_size, 0, (float)dec_own(&m->cfg).rope_theta);
    ig_kernel_matmul_backward(m->be, ig_tp_dinput_target(m, dpart, dln), G(l, DEC_QKV_W),
                              G(l, DEC_QKV_B), S(x->dqkv), p->sp ? y.n1_full : y.n1,
                              P(l, DEC_QKV_W), lay, N, C, x->Ql);
    if ((st = ig_tp_dinput_reduce(m, dpart, dln, N, C, &dl, err)) != IG_OK) return st;
    norm_backward(m, dres, G(l, DEC_NORM1_W), G(l, DEC_NORM1_B), dl, res_in, P(l, DEC_NORM1_W),
                  y.mean1, y.rstd1, Nl);
    return IG_OK;
}

static ig_status embed_backward(ig_model *m, ig_err *err) {
    const dec_state *x = dec_of(m);
    dims d = dims_of(m);
    const void *dfull = NULL;
    ig_status st = ig_tp_gather(m, S(x->dres), S(x->dres_full), d.N, d.C, &dfull, err);
    if (st != IG_OK) return st;
    ig_kernel_encoder_backward(m->be, ig_model_grad(m, (size_t)x->t_embed),
                               x->t_pos >= 0 ? ig_model_grad(m, (size_t)x->t_pos) : NULL, dfull,
                               ig_model_i32(m, 0), d.B, d.T, d.C);
    return IG_OK;
}

const ig_stage_hooks dec_stage = {.embed_forward = embed_forward,
                                  .layer_forward = layer_fwd,
                                  .stage_output = stage_output,
                                  .head_forward = head_forward,
                                  .head_backward = head_backward,
                                  .layer_recompute = layer_recompute,
                                  .layer_backward = layer_backward,
                                  .embed_backward = embed_backward};

void dec_stage_io(ig_model *m, int slot, ig_stage_io *io) {
    const dec_state *x = dec_of(m);
    ig_lm_stage_io(m, slot, x->encoded, x->output, x->dres, io);
}
