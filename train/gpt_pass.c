/* gpt_pass.c - GPT-2's forward and backward passes over one micro-batch, as calls of the backend's
 * operation table and of the tensor-parallel group, and the optimizer step over the parameter
 * buffer.
 *
 * Per layer (pre-LayerNorm; the residual add is fused into the LayerNorm that follows it):
 *   ln1 = LN(res_in); qkv = ln1 @ Wqkv + b; atty = attention(qkv); attproj = atty @ Wproj + b;
 *   res2 = res_in + attproj, ln2 = LN(res2); fch = ln2 @ Wfc; fch_gelu = gelu(fch + bfc);
 *   fcproj = fch_gelu @ Wfcproj + b; res3 = res2 + fcproj (done by the next LayerNorm).
 * The head: lnf = LN(res3 of the last layer); logits = lnf @ wte^T (tied); the fused softmax
 * cross-entropy leaves the logits' gradient in place of the logits.
 *
 * Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): each rank computes its heads and its
 * quarter of the MLP from the whole input; the row-parallel c_proj outputs are partial sums,
 * all-reduced over the group (the bias added by rank 0 only, so once), and the input gradients
 * of the column-parallel layers are all-reduced in the backward. The embedding and the head are
 * vocabulary-parallel: each rank looks up and scores its slice of the rows, the embedding's
 * partial sums are all-reduced, and the cross-entropy takes the row maximum and then [sum of
 * exponentials; target logit] over the group (two all-reduces).
 *
 * Sequence parallelism (Korthikanti et al. 2022): the LayerNorms and residual adds work on this
 * rank's 1/tp of the token rows; an all-gather assembles the rows before each column-parallel
 * layer, and a reduce-scatter replaces each all-reduce, leaving every rank its rows of the sum.
 * The gathered inputs are kept for the weight gradients (no second all-gather in the backward),
 * and the LayerNorms' gradients, taken over this rank's rows, are partial (summed by the
 * trainer). The bytes are those of tensor parallelism alone: an all-reduce is a reduce-scatter
 * plus an all-gather.
 */
#include "gpt_internal.h"

#include <math.h>
#include <string.h>

/* slot activations (offsets within the slot), scratch (absolute), fp32 likewise */
static void *A(const ig_gpt *m, uint64_t off) {
    return (char *)m->act + ((uint64_t)m->slot * m->acts.n_act + off) * m->as;
}
static void *S(const ig_gpt *m, uint64_t off) {
    return (char *)m->act + off * m->as;
}
static float *F(const ig_gpt *m, uint64_t off) {
    return m->f32 + (uint64_t)m->slot * m->acts.n_f32 + off;
}
static float *FS(const ig_gpt *m, uint64_t off) {
    return m->f32 + off;
}
/* the slot's token ids (0), targets (1), document ids (2) */
static int32_t *I(const ig_gpt *m, int which) {
    return m->i32 + ((uint64_t)m->slot * 3 + (uint64_t)which) * (uint64_t)m->N;
}
static void *param(const ig_gpt *m, size_t t) {
    return (char *)m->params + m->tensors[t].offset * m->as;
}
static void *grad(const ig_gpt *m, size_t t) {
    return (char *)m->grads + m->goff[t] * m->as;
}
static void *P(const ig_gpt *m, int l, int which) {
    return param(m, ig_gpt_lt(m, l, which));
}
static void *G(const ig_gpt *m, int l, int which) {
    return grad(m, ig_gpt_lt(m, l, which));
}

/* ---- the tensor-parallel group on backend memory --------------------------------------------- */

typedef enum { TP_SUM, TP_MAX, TP_GATHER, TP_SCATTER } tp_op;

/* A collective of the tensor-parallel group over backend buffers, once the kernels before it have
 * finished. n: elements in all (SUM, MAX), or per rank (GATHER: send [n] -> recv [tp n]; SCATTER:
 * send [tp n] -> recv [n]). */
static ig_status tp_coll(ig_gpt *m, tp_op op, const void *send, void *recv, uint64_t n,
                         ig_comm_type type, ig_err *err) {
    ig_status st = ig_backend_sync(m->be, err);
    if (st != IG_OK) return st;
    ig_group *g = m->part.tpg;
    switch (op) {
    case TP_SUM:
    case TP_MAX:
        return ig_group_allreduce(g, recv, (size_t)n, type,
                                  op == TP_SUM ? IG_COMM_SUM : IG_COMM_MAX, err);
    case TP_GATHER:
        return ig_group_allgather(g, send, recv, (size_t)n, type, err);
    case TP_SCATTER:
        return ig_group_reduce_scatter(g, send, recv, (size_t)n, type, err);
    }
    return IG_ERR_INTERNAL;
}

static ig_comm_type act_type(const ig_gpt *m) {
    return ig_gpt_comm_type(m);
}

/* rows gathered over the group (sp): [Nl, C] -> [N, C]; else the rows themselves */
static ig_status gathered(ig_gpt *m, const void *rows, void *full, int N, const void **out,
                          ig_err *err) {
    if (!m->part.sp) {
        *out = rows;
        return IG_OK;
    }
    *out = full;
    uint64_t per = (uint64_t)(N / m->part.tp) * (uint64_t)m->cfg.d_model;
    return tp_coll(m, TP_GATHER, rows, full, per, act_type(m), err);
}

/* a partial sum over the group [N, C] into this rank's rows: all-reduced in place into out
 * (which is the partial buffer), or reduce-scattered from partial into out (sp) */
static ig_status reduced(ig_gpt *m, void *partial, void *out, int N, ig_err *err) {
    uint64_t C = (uint64_t)m->cfg.d_model;
    if (m->part.sp)
        return tp_coll(m, TP_SCATTER, partial, out, (uint64_t)(N / m->part.tp) * C, act_type(m),
                       err);
    return tp_coll(m, TP_SUM, partial, partial, (uint64_t)N * C, act_type(m), err);
}

/* ---- staging --------------------------------------------------------------------------------- */

ig_status ig_gpt_stage_batch(ig_gpt *m, int slot, const int32_t *tokens, int B, int T,
                             const ig_gpt_batch_opts *o, float grad_scale, uint64_t *counted,
                             ig_err *err) {
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
    uint64_t N = (uint64_t)B * (uint64_t)T, stride = (uint64_t)m->N;
    int32_t *in = m->h_i32 + (uint64_t)slot * 3 * stride, *tg = in + stride, *doc = tg + stride;
    float *dloss = m->h_f32 + ((uint64_t)slot * 2 + 1) * stride; /* the mask: 1 for a counted row */
    int32_t eod = o ? o->eod_id : -1;
    int32_t v0 = m->part.tp_rank * m->Vl, vl = m->Vl, tp = m->part.tp;
    m->doc_attention = o && o->doc_attention && eod >= 0;
    uint64_t count = 0;
    for (int b = 0; b < B; b++) {
        const int32_t *row = tokens + (size_t)b * (size_t)(T + 1);
        int32_t d = 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * (size_t)T + (size_t)t;
            int32_t x = row[t], y = row[t + 1];
            if (x < 0 || x >= m->cfg.vocab_size || y < 0 || y >= m->cfg.vocab_size) {
                int bad_x = x < 0 || x >= m->cfg.vocab_size;
                return ig_err_set(err, IG_ERR_INVALID_ARG,
                                  "token %d at row %d, position %d is outside the model's "
                                  "vocabulary of %d",
                                  bad_x ? x : y, b, bad_x ? t : t + 1, m->cfg.vocab_size);
            }
            /* this rank's vocabulary rows [v0, v0 + vl); -1 for another rank's */
            in[i] = tp == 1 ? x : (x >= v0 && x < v0 + vl ? x - v0 : -1);
            tg[i] = tp == 1 ? y : (y >= v0 && y < v0 + vl ? y - v0 : -1);
            doc[i] = d;
            if (eod >= 0 && x == eod) d++; /* the next token starts a new document */
            int masked = o && o->eod_mask_loss && eod >= 0 && x == eod;
            dloss[i] = masked ? 0.0f : 1.0f;
            count += !masked;
        }
    }
    if (counted) *counted = count;
    int32_t *dev = m->i32 + (uint64_t)slot * 3 * stride;
    ig_status st = IG_OK;
    for (int k = 0; k < 3 && st == IG_OK; k++)
        st = ig_backend_upload(m->be, dev + (uint64_t)k * stride, in + (uint64_t)k * stride,
                               N * sizeof(int32_t), err);
    if (st != IG_OK || !m->part.last || !(grad_scale > 0)) return st;
    /* d(mean loss)/d(loss_i) = 1 / count for a counted row, scaled; uploaded into the slot's dloss
     * (the host mask stays for the loss) */
    float g = count ? grad_scale / (float)count : 0.0f;
    float *scaled = m->h_f32 + (uint64_t)slot * 2 * stride;
    for (uint64_t i = 0; i < N; i++) scaled[i] = dloss[i] * g;
    return ig_backend_upload(m->be, F(m, m->acts.dloss), scaled, N * sizeof(float), err);
}

/* ---- forward --------------------------------------------------------------------------------- */

/* A row-parallel layer (c_proj): out [Nl, C] = inp [N, K] @ W [K, C] summed over the group, the
 * bias added once (by rank 0). */
static ig_status row_parallel(ig_gpt *m, void *out, const void *inp, const void *w,
                              const void *bias, int N, int K, ig_err *err) {
    int C = m->cfg.d_model;
    if (m->part.tp == 1) {
        ig_kernel_matmul_forward(m->be, out, inp, w, IG_W_IN_OUT, bias, N, K, C);
        return IG_OK;
    }
    void *dst = m->part.sp ? S(m, m->acts.partial) : out;
    ig_kernel_matmul_forward(m->be, dst, inp, w, IG_W_IN_OUT, m->part.tp_rank == 0 ? bias : NULL, N,
                             K, C);
    return reduced(m, dst, out, N, err);
}

/* The vocabulary-parallel cross-entropy of the slot's logits [N, Vl]. */
static ig_status head_loss(ig_gpt *m, int N, int with_grad, ig_err *err) {
    const ig_gpt_acts *x = &m->acts;
    const int32_t *tg = I(m, 1);
    float *dloss = with_grad ? F(m, x->dloss) : NULL;
    int V = m->cfg.vocab_size, Vl = m->Vl;
    if (m->part.tp == 1) {
        ig_kernel_crossentropy(m->be, F(m, x->losses), A(m, x->logits), tg, dloss, N, V,
                               m->cfg.padded_vocab);
        return IG_OK;
    }
    int v0 = m->part.tp_rank * Vl;
    int valid = V <= v0 ? 0 : (V - v0 < Vl ? V - v0 : Vl);
    float *rowmax = FS(m, x->rowmax), *stats = FS(m, x->stats);
    ig_kernel_ce_max(m->be, rowmax, A(m, x->logits), N, valid, Vl);
    ig_status st = tp_coll(m, TP_MAX, rowmax, rowmax, (uint64_t)N, IG_COMM_F32, err);
    if (st != IG_OK) return st;
    ig_kernel_ce_sums(m->be, stats, A(m, x->logits), rowmax, tg, N, valid, Vl);
    if ((st = tp_coll(m, TP_SUM, stats, stats, 2 * (uint64_t)N, IG_COMM_F32, err)) != IG_OK)
        return st;
    ig_kernel_ce_finish(m->be, F(m, x->losses), A(m, x->logits), rowmax, stats, tg, dloss, N, valid,
                        Vl);
    return IG_OK;
}

ig_status ig_gpt_stage_forward(ig_gpt *m, int slot, int with_grad, ig_err *err) {
    ig_backend *be = m->be;
    const ig_gpt_part *p = &m->part;
    const ig_gpt_acts *x = &m->acts;
    m->slot = slot;
    int B = m->slot_B[slot], T = m->slot_T[slot], N = B * T, Nl = p->sp ? N / p->tp : N;
    int C = m->cfg.d_model, Cl = m->Cl, NHl = m->cfg.n_head / p->tp;
    const int32_t *docs = m->doc_attention ? I(m, 2) : NULL;
    ig_status st = IG_OK;
    if (p->first) {
        const void *wpe = p->tp_rank == 0 ? param(m, (size_t)m->t_wpe) : NULL;
        void *dst = p->sp ? S(m, x->partial) : A(m, x->encoded);
        ig_kernel_encoder_forward(be, dst, I(m, 0), param(m, (size_t)m->t_wte), wpe, B, T, C);
        if (p->tp > 1 && (st = reduced(m, dst, A(m, x->encoded), N, err)) != IG_OK) return st;
    }
    for (int l = p->l0; l < p->l1; l++) {
        const ig_gpt_layer_acts *y = &x->layer[l - p->l0];
        const ig_gpt_layer_acts *prev = l > p->l0 ? y - 1 : NULL;
        void *res_in = prev ? A(m, prev->res3) : A(m, x->encoded);
        if (!prev)
            ig_kernel_layernorm_forward(be, A(m, y->ln1), F(m, y->ln1_mean), F(m, y->ln1_rstd),
                                        res_in, P(m, l, L_LN1W), P(m, l, L_LN1B), Nl, C, 1e-5f);
        else
            ig_kernel_residual_layernorm_forward(be, A(m, prev->res3), A(m, y->ln1),
                                                 F(m, y->ln1_mean), F(m, y->ln1_rstd),
                                                 A(m, prev->res2), A(m, prev->fcproj),
                                                 P(m, l, L_LN1W), P(m, l, L_LN1B), Nl, C, 1e-5f);
        const void *ln1 = NULL, *ln2 = NULL;
        if ((st = gathered(m, A(m, y->ln1), A(m, y->ln1_full), N, &ln1, err)) != IG_OK) return st;
        ig_kernel_matmul_forward(be, A(m, y->qkv), ln1, P(m, l, L_QKVW), IG_W_IN_OUT,
                                 P(m, l, L_QKVB), N, C, 3 * Cl);
        ig_kernel_attention_forward(be, A(m, y->atty), F(m, y->lse), A(m, y->qkv), docs,
                                    &(ig_attention_shape){.B = B,
                                                          .T = T,
                                                          .n_head = NHl,
                                                          .n_kv_head = NHl,
                                                          .head_size = Cl / NHl,
                                                          .causal = 1});
        st = row_parallel(m, A(m, y->attproj), A(m, y->atty), P(m, l, L_PROJW), P(m, l, L_PROJB), N,
                          Cl, err);
        if (st != IG_OK) return st;
        ig_kernel_residual_layernorm_forward(be, A(m, y->res2), A(m, y->ln2), F(m, y->ln2_mean),
                                             F(m, y->ln2_rstd), res_in, A(m, y->attproj),
                                             P(m, l, L_LN2W), P(m, l, L_LN2B), Nl, C, 1e-5f);
        if ((st = gathered(m, A(m, y->ln2), A(m, y->ln2_full), N, &ln2, err)) != IG_OK) return st;
        ig_kernel_matmul_forward(be, A(m, y->fch), ln2, P(m, l, L_FCW), IG_W_IN_OUT, NULL, N, C,
                                 4 * Cl);
        ig_kernel_gelu_bias_forward(be, A(m, y->fch_gelu), A(m, y->fch), P(m, l, L_FCB), N, 4 * Cl);
        st = row_parallel(m, A(m, y->fcproj), A(m, y->fch_gelu), P(m, l, L_FCPW), P(m, l, L_FCPB),
                          N, 4 * Cl, err);
        if (st != IG_OK) return st;
    }
    const ig_gpt_layer_acts *last = &x->layer[p->l1 - 1 - p->l0];
    if (!p->last) {
        ig_kernel_add(be, A(m, x->output), A(m, last->res2), A(m, last->fcproj),
                      (size_t)Nl * (size_t)C);
        return IG_OK;
    }
    size_t lnf = (size_t)m->t_lnf;
    ig_kernel_residual_layernorm_forward(be, A(m, last->res3), A(m, x->lnf), F(m, x->lnf_mean),
                                         F(m, x->lnf_rstd), A(m, last->res2), A(m, last->fcproj),
                                         param(m, lnf), param(m, lnf + 1), Nl, C, 1e-5f);
    const void *lnf_in = NULL;
    if ((st = gathered(m, A(m, x->lnf), A(m, x->lnf_full), N, &lnf_in, err)) != IG_OK) return st;
    ig_kernel_matmul_forward(be, A(m, x->logits), lnf_in, param(m, (size_t)m->t_wte), IG_W_OUT_IN,
                             NULL, N, C, m->Vl);
    return head_loss(m, N, with_grad, err);
}

/* ---- backward -------------------------------------------------------------------------------- */

/* The gradient of a column-parallel layer's input: computed into the partial buffer and reduced
 * over the group into dln's rows (or, with one rank, straight into dln). Returns where it is. */
static void *col_input_grad(ig_gpt *m) {
    return m->part.tp > 1 ? S(m, m->acts.dpartial) : S(m, m->acts.dln);
}
static ig_status col_input_reduce(ig_gpt *m, int N, void **dl, ig_err *err) {
    *dl = col_input_grad(m);
    if (m->part.tp == 1) return IG_OK;
    if (m->part.sp) *dl = S(m, m->acts.dln);
    return reduced(m, S(m, m->acts.dpartial), *dl, N, err);
}

static ig_status ready_run(ig_gpt_ready_fn ready, void *user, size_t t0, size_t t1, ig_err *err) {
    return ready ? ready(user, t0, t1, err) : IG_OK;
}

ig_status ig_gpt_stage_backward(ig_gpt *m, int slot, ig_gpt_ready_fn ready, void *user,
                                ig_err *err) {
    ig_backend *be = m->be;
    const ig_gpt_part *p = &m->part;
    const ig_gpt_acts *x = &m->acts;
    m->slot = slot;
    int B = m->slot_B[slot], T = m->slot_T[slot], N = B * T, Nl = p->sp ? N / p->tp : N;
    int C = m->cfg.d_model, Cl = m->Cl, NHl = m->cfg.n_head / p->tp;
    const int32_t *docs = m->doc_attention ? I(m, 2) : NULL;
    size_t as = m->as;
    void *dres = S(m, x->dres), *dl = NULL;
    const void *dfull = NULL, *in = NULL;
    ig_status st = IG_OK;
    if (p->last) {
        /* the head: the logits hold their gradient; dres starts at 0 and gathers the residual
         * stream's */
        size_t lnf = (size_t)m->t_lnf;
        const ig_gpt_layer_acts *last = &x->layer[p->l1 - 1 - p->l0];
        in = p->sp ? A(m, x->lnf_full) : A(m, x->lnf);
        ig_kernel_matmul_backward(be, col_input_grad(m), grad(m, (size_t)m->t_wte), NULL,
                                  A(m, x->logits), in, param(m, (size_t)m->t_wte), IG_W_OUT_IN, N,
                                  C, m->Vl);
        if ((st = col_input_reduce(m, N, &dl, err)) != IG_OK) return st;
        ig_backend_zero(be, dres, (size_t)Nl * (size_t)C * as, NULL);
        ig_kernel_layernorm_backward(be, dres, grad(m, lnf), grad(m, lnf + 1), dl, A(m, last->res3),
                                     param(m, lnf), F(m, x->lnf_mean), F(m, x->lnf_rstd), Nl, C);
        if ((st = ready_run(ready, user, lnf, lnf + 2, err)) != IG_OK) return st;
        if (!p->first &&
            (st = ready_run(ready, user, (size_t)m->t_wte, (size_t)m->t_wte + 1, err)) != IG_OK)
            return st;
    }
    for (int l = p->l1 - 1; l >= p->l0; l--) {
        const ig_gpt_layer_acts *y = &x->layer[l - p->l0];
        const void *res_in = l > p->l0 ? A(m, (y - 1)->res3) : A(m, x->encoded);
        /* res3 = res2 + fcproj: dres is the gradient of both */
        if ((st = gathered(m, dres, S(m, x->dres_full), N, &dfull, err)) != IG_OK) return st;
        ig_kernel_matmul_backward(be, S(m, x->dfcg), G(m, l, L_FCPW), G(m, l, L_FCPB), dfull,
                                  A(m, y->fch_gelu), P(m, l, L_FCPW), IG_W_IN_OUT, N, 4 * Cl, C);
        ig_kernel_gelu_bias_backward(be, S(m, x->dfch), G(m, l, L_FCB), S(m, x->dfcg), A(m, y->fch),
                                     P(m, l, L_FCB), N, 4 * Cl);
        in = p->sp ? A(m, y->ln2_full) : A(m, y->ln2);
        ig_kernel_matmul_backward(be, col_input_grad(m), G(m, l, L_FCW), NULL, S(m, x->dfch), in,
                                  P(m, l, L_FCW), IG_W_IN_OUT, N, C, 4 * Cl);
        if ((st = col_input_reduce(m, N, &dl, err)) != IG_OK) return st;
        ig_kernel_layernorm_backward(be, dres, G(m, l, L_LN2W), G(m, l, L_LN2B), dl, A(m, y->res2),
                                     P(m, l, L_LN2W), F(m, y->ln2_mean), F(m, y->ln2_rstd), Nl, C);
        /* res2 = res_in + attproj: dres is the gradient of both */
        if ((st = gathered(m, dres, S(m, x->dres_full), N, &dfull, err)) != IG_OK) return st;
        ig_kernel_matmul_backward(be, S(m, x->datty), G(m, l, L_PROJW), G(m, l, L_PROJB), dfull,
                                  A(m, y->atty), P(m, l, L_PROJW), IG_W_IN_OUT, N, Cl, C);
        ig_kernel_attention_backward(be, S(m, x->dqkv), S(m, x->datty), A(m, y->qkv), A(m, y->atty),
                                     F(m, y->lse), docs,
                                     &(ig_attention_shape){.B = B,
                                                           .T = T,
                                                           .n_head = NHl,
                                                           .n_kv_head = NHl,
                                                           .head_size = Cl / NHl,
                                                           .causal = 1});
        in = p->sp ? A(m, y->ln1_full) : A(m, y->ln1);
        ig_kernel_matmul_backward(be, col_input_grad(m), G(m, l, L_QKVW), G(m, l, L_QKVB),
                                  S(m, x->dqkv), in, P(m, l, L_QKVW), IG_W_IN_OUT, N, C, 3 * Cl);
        if ((st = col_input_reduce(m, N, &dl, err)) != IG_OK) return st;
        ig_kernel_layernorm_backward(be, dres, G(m, l, L_LN1W), G(m, l, L_LN1B), dl, res_in,
                                     P(m, l, L_LN1W), F(m, y->ln1_mean), F(m, y->ln1_rstd), Nl, C);
        size_t t0 = ig_gpt_lt(m, l, 0);
        if ((st = ready_run(ready, user, t0, t0 + L_COUNT, err)) != IG_OK) return st;
    }
    if (p->first) {
        if ((st = gathered(m, dres, S(m, x->dres_full), N, &dfull, err)) != IG_OK) return st;
        ig_kernel_encoder_backward(be, grad(m, (size_t)m->t_wte), grad(m, (size_t)m->t_wpe), dfull,
                                   I(m, 0), B, T, C);
        /* wte and wpe are the table's first two tensors */
        if ((st = ready_run(ready, user, 0, 2, err)) != IG_OK) return st;
    }
    return ig_backend_sync(be, err);
}

void *ig_gpt_stage_input(ig_gpt *m, int slot) {
    m->slot = slot;
    return A(m, m->acts.encoded);
}
void *ig_gpt_stage_output(ig_gpt *m, int slot) {
    m->slot = slot;
    return A(m, m->acts.output);
}
void *ig_gpt_stage_dgrad(ig_gpt *m) {
    return S(m, m->acts.dres);
}
uint64_t ig_gpt_stage_elems(const ig_gpt *m) {
    return (uint64_t)m->Nl * (uint64_t)m->cfg.d_model;
}

/* The mean loss over the counted rows of the slot's last forward pass. */
ig_status ig_gpt_stage_loss(ig_gpt *m, int slot, double *loss, ig_err *err) {
    m->slot = slot;
    int N = m->slot_B[slot] * m->slot_T[slot];
    uint64_t stride = (uint64_t)m->N;
    float *losses = m->h_f32 + (uint64_t)slot * 2 * stride, *dmask = losses + stride;
    ig_status st =
        ig_backend_download(m->be, losses, F(m, m->acts.losses), (size_t)N * sizeof(float), err);
    if (st != IG_OK) return st;
    double sum = 0;
    uint64_t n = 0;
    for (int i = 0; i < N; i++)
        if (dmask[i] != 0.0f) sum += losses[i], n++;
    *loss = n ? sum / (double)n : 0.0;
    return IG_OK;
}

/* ---- the whole model on one process ---------------------------------------------------------- */

static ig_status need_whole(const ig_gpt *m, ig_err *err) {
    if (m->part.tp == 1 && m->part.first && m->part.last) return IG_OK;
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "this model is one rank's part (tp %d, layers %d..%d): run it through the "
                      "trainer's schedule",
                      m->part.tp, m->part.l0, m->part.l1 - 1);
}

ig_status ig_gpt_forward(ig_gpt *m, const int32_t *tokens, int B, int T, const ig_gpt_batch_opts *o,
                         double *loss, uint64_t *counted, ig_err *err) {
    ig_status st = need_whole(m, err);
    if (st == IG_OK) st = ig_gpt_stage_batch(m, 0, tokens, B, T, o, 0.0f, counted, err);
    if (st == IG_OK) st = ig_gpt_stage_forward(m, 0, 0, err);
    if (st == IG_OK) st = ig_backend_sync(m->be, err);
    return st == IG_OK ? ig_gpt_stage_loss(m, 0, loss, err) : st;
}

ig_status ig_gpt_forward_backward(ig_gpt *m, const int32_t *tokens, int B, int T,
                                  const ig_gpt_batch_opts *o, float grad_scale, double *loss,
                                  uint64_t *counted, ig_err *err) {
    ig_status st = need_whole(m, err);
    if (st == IG_OK && !(grad_scale > 0))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "grad_scale must be > 0, got %g",
                        (double)grad_scale);
    if (st == IG_OK) st = ig_gpt_stage_batch(m, 0, tokens, B, T, o, grad_scale, counted, err);
    if (st == IG_OK) st = ig_gpt_stage_forward(m, 0, 1, err);
    if (st == IG_OK) st = ig_gpt_stage_backward(m, 0, NULL, NULL, err);
    return st == IG_OK ? ig_gpt_stage_loss(m, 0, loss, err) : st;
}

ig_status ig_gpt_zero_grads(ig_gpt *m, ig_err *err) {
    return ig_backend_zero(m->be, m->grads, m->n_grads * m->as, err);
}

ig_status ig_gpt_grad_norm(ig_gpt *m, double *norm, ig_err *err) {
    double ss = ig_kernel_sum_squares(m->be, m->grads, m->n_grads);
    ig_status st = ig_backend_sync(m->be, err);
    *norm = sqrt(ss);
    return st;
}

ig_status ig_gpt_adamw(ig_gpt *m, int step, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, ig_err *err) {
    if (step < 1) return ig_err_set(err, IG_ERR_INVALID_ARG, "AdamW step %d: must be >= 1", step);
    if (m->n_moments != m->n_params)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "the AdamW moments are sharded (ZeRO): step through the trainer");
    /* runs of consecutive tensors with the same decay, adjacent in memory, go as one call */
    size_t i = 0;
    while (i < m->n_tensors) {
        size_t j = i;
        while (j + 1 < m->n_tensors && m->tensors[j + 1].decay == m->tensors[i].decay &&
               m->tensors[j + 1].offset == m->tensors[j].offset + m->tensors[j].numel)
            j++;
        uint64_t off = m->tensors[i].offset;
        uint64_t n = m->tensors[j].offset + m->tensors[j].numel - off;
        ig_kernel_adamw(m->be, (char *)m->params + off * m->as, m->master ? m->master + off : NULL,
                        (char *)m->grads + off * m->as, m->adam_m + off, m->adam_v + off, n, lr,
                        beta1, beta2, eps, m->tensors[i].decay ? weight_decay : 0.0f, grad_scale,
                        step);
        i = j + 1;
    }
    return ig_backend_sync(m->be, err);
}
