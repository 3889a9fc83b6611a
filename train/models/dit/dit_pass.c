/* dit_pass.c - the DiT's forward and backward passes over one micro-batch of clips as calls of
 * the backend's operation table and of the tensor-parallel layers (tp_layers.h).
 *
 * First stage: c = Linear(SiLU(Linear(freq))) (+ the label's row of the class table); the tokens
 * x = patches @ W_x^T + b_x + positions. Every stage: s = SiLU(c), then per block:
 *   mod = s @ W_ada^T + b_ada                  [B, 6C]: shift, scale, gate (attention), (MLP)
 *   h1 = LN(x) (1 + scale_msa) + shift_msa     (the fused LayerNorm + modulation)
 *   qkv = h1 @ Wqkv^T + b; atty = attention(qkv) (not causal); attproj = atty @ Wproj^T + b
 *   res2 = x + gate_msa attproj                (the fused gated residual)
 *   h2 = LN(res2) (1 + scale_mlp) + shift_mlp; fch = h2 @ Wfc1^T; fch_gelu = gelu(fch + b)
 *   fcproj = fch_gelu @ Wfc2^T + b; res3 = res2 + gate_mlp fcproj
 * Last stage: modf = s @ W_fada^T + b (shift, scale); hf = LN(x) (1 + scale) + shift;
 * pred = hf @ W_f^T + b_f; the squared errors against the target, whose gradient replaces pred.
 *
 * A clip's rows are its tokens; a sample's modulation applies to its rows only (the kernels take
 * the rows' first global index and the rows per clip). Tensor parallelism and sequence
 * parallelism as GPT-2's (gpt2_pass.c) for attention and the MLP; the modulation, the gates and
 * the final layer work on this rank's rows (all of them without sp). The backward sums the
 * modulation's gradient over each block's rows, takes the adaLN projection's gradients and adds
 * its input's gradient into that of SiLU(c); at the end of the stage that becomes c's gradient,
 * added to what the next stage sent (c goes to every stage), and on the first stage it flows
 * into the time MLP and the class table. The caption's rows [B Tk, C] come from the first stage
 * too: the caption tokens' embedding table, or the caption embedder of their features
 * (dit_caption.c); their gradient, summed over the stages' blocks, flows back into either.
 *
 * Recomputation (train.recompute; the places of dit.c's layout): with selective the backward runs
 * attention's forward again from the kept q|k|v (and, with Ulysses, its all-to-all back to this
 * rank's rows) before the projection's backward needs its output, and the cross-attention's from
 * the kept q and k|v likewise; with full it runs block l's forward again from its kept input
 * after ig_store_use_layer(l), up to fcproj (the block's output res3 is kept: the next block's
 * input). Every recomputed buffer comes from the forward's kernels on the same inputs (a block
 * has no fused residual norm across blocks), so it has the forward's bits, on any backend;
 * collectives inside a recomputed block run again, on every rank in the same order.
 */
#include "dit.h"

#include <string.h>

#include "family/tp_layers.h"

/* slot activations or a block's places (family.h), scratch, fp32 likewise */
#define A(off) ig_model_at(m, off)
#define S(off) ig_model_scratch(m, off)
#define F(off) ig_model_at_f32(m, off)

static void *P(const ig_model *m, int l, int which) {
    return ig_model_param(m, dit_lt(m, l, which));
}
static void *G(const ig_model *m, int l, int which) {
    return ig_model_grad(m, dit_lt(m, l, which));
}
/* one of the six [B, C] vectors of a block's modulation (or its gradient) */
static void *MOD(const ig_model *m, void *mod, int k) {
    return (char *)mod + (size_t)k * (size_t)m->cfg.d_model * m->as;
}

static int usp_of(const ig_model *m) {
    return m->part.usp > 1 ? m->part.usp : 1;
}

/* attention over every row of the micro-batch, of this rank's heads (tp, then Ulysses' share) */
static ig_attention_shape attn_shape(const ig_model *m, int B, int T) {
    int NHl = m->cfg.n_head / (m->part.tp * usp_of(m));
    return (ig_attention_shape){.B = B,
                                .T = T,
                                .n_head = NHl,
                                .n_kv_head = NHl,
                                .head_size = m->cfg.d_model / m->cfg.n_head,
                                .causal = 0};
}

/* the rows this rank holds of the slot's micro-batch: how many, and the first's global index */
static void rows(const ig_model *m, int slot, int *N, int *Nl, int *row0) {
    *N = m->slot_B[slot] * m->slot_T[slot];
    *Nl = m->part.sp ? *N / m->part.tp : *N / usp_of(m);
    *row0 = (m->part.sp ? m->part.tp_rank : m->part.usp_rank) * *Nl;
}

static ig_status embed_forward(ig_model *m, int B, int Nl, ig_err *err) {
    ig_backend *be = m->be;
    const dit_state *x = dit_of(m);
    int C = m->cfg.d_model;
    ig_kernel_matmul_forward(be, A(x->th), A(x->freq), ig_model_param(m, dit_ft(m, DIT_T0_W)),
                             IG_W_OUT_IN, ig_model_param(m, dit_ft(m, DIT_T0_B)), B, DIT_FREQ, C);
    ig_kernel_silu_forward(be, A(x->tsilu), A(x->th), (size_t)B * (size_t)C);
    ig_kernel_matmul_forward(be, A(x->cond), A(x->tsilu), ig_model_param(m, dit_ft(m, DIT_T2_W)),
                             IG_W_OUT_IN, ig_model_param(m, dit_ft(m, DIT_T2_B)), B, C, C);
    if (dit_own(&m->cfg).cond == DIT_COND_CLASS) {
        ig_kernel_encoder_forward(be, A(x->yemb), ig_model_i32(m, 0),
                                  ig_model_param(m, dit_ft(m, DIT_Y)), NULL, 1, B, C);
        ig_kernel_add(be, A(x->cond), A(x->cond), A(x->yemb), (size_t)B * (size_t)C);
    }
    if (x->Dt) { /* the caption's features through the caption embedder (dit_caption.c) */
        ig_status st = dit_caption_embed_forward(m, B, err);
        if (st != IG_OK) return st;
    } else if (x->Tk) /* the caption's token embeddings plus their positions */
        ig_kernel_encoder_forward(be, A(x->ycap), ig_model_i32(m, (uint64_t)m->B),
                                  ig_model_param(m, dit_ft(m, DIT_Y)), A(x->cappos), B, x->Tk, C);
    ig_kernel_matmul_forward(be, A(x->encoded), A(x->patches),
                             ig_model_param(m, dit_ft(m, DIT_X_W)), IG_W_OUT_IN,
                             ig_model_param(m, dit_ft(m, DIT_X_B)), Nl, x->P, C);
    ig_kernel_add(be, A(x->encoded), A(x->encoded), A(x->pos), (size_t)Nl * (size_t)C);
    return IG_OK;
}

/* The rows of the cross-attention (the tensor-parallel layers' rows: every row with Megatron's sp,
 * this rank's with Ulysses') and the first one's global index. */
static int cross_row0(const ig_model *m, int row0) {
    return m->part.sp ? 0 : row0;
}

/* The cross-attention's core: catt and clse from q and k|v (Ng rows). */
static void cross_core(ig_model *m, const dit_layer_acts *y, int Ng, int row0, int T) {
    const dit_state *x = dit_of(m);
    int C = m->cfg.d_model;
    ig_kernel_cross_attention_forward(m->be, A(y->catt), F(y->clse), A(y->cq), A(y->ckv),
                                      ig_model_i32(m, 0), Ng, cross_row0(m, row0), T, x->Tk,
                                      m->cfg.n_head / m->part.tp, C / m->cfg.n_head);
}

/* Block l's cross-attention to the caption: res2b = res2 + proj(CrossAttn(q(res2), kv(y))). */
static ig_status cross_forward(ig_model *m, int l, const dit_layer_acts *y, int B, int T, int N,
                               int Nl, int row0, ig_err *err) {
    ig_backend *be = m->be;
    const dit_state *x = dit_of(m);
    int C = m->cfg.d_model, Cl = x->Cl, Ng = m->part.sp ? N : Nl;
    const void *q_in = NULL;
    ig_status st = ig_tp_gather(m, A(y->res2), A(y->res2_full), N, C, &q_in, err);
    if (st != IG_OK) return st;
    ig_kernel_matmul_forward(be, A(y->cq), q_in, P(m, l, DIT_XQ_W), IG_W_OUT_IN, P(m, l, DIT_XQ_B),
                             Ng, C, Cl);
    ig_kernel_matmul_forward(be, A(y->ckv), A(x->ycap), P(m, l, DIT_XKV_W), IG_W_OUT_IN,
                             P(m, l, DIT_XKV_B), B * x->Tk, C, 2 * Cl);
    cross_core(m, y, Ng, row0, T);
    st = ig_tp_row_linear(m, A(y->cproj), A(y->catt), P(m, l, DIT_XPROJ_W), IG_W_OUT_IN,
                          P(m, l, DIT_XPROJ_B), S(x->partial), Ng, Cl, C, err);
    if (st == IG_OK) ig_kernel_add(be, A(y->res2b), A(y->res2), A(y->cproj), (size_t)Nl * C);
    return st;
}

/* Its backward: dres holds res2b's gradient and gets res2's; the caption's gradient (partial
 * over the tensor-parallel ranks) is added to dyl. */
static ig_status cross_backward(ig_model *m, int l, const dit_layer_acts *y, int B, int T, int N,
                                int Nl, int row0, ig_err *err) {
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const dit_state *x = dit_of(m);
    int C = m->cfg.d_model, Cl = x->Cl, Ng = p->sp ? N : Nl, BK = B * x->Tk;
    void *dres = S(x->dres), *dl = NULL;
    const void *dfull = NULL;
    ig_status st = ig_tp_gather(m, dres, S(x->dres_full), N, C, &dfull, err);
    if (st != IG_OK) return st;
    if (p->recompute == IG_RECOMPUTE_SELECTIVE) cross_core(m, y, Ng, row0, T);
    ig_kernel_matmul_backward(be, S(x->dcatt), G(m, l, DIT_XPROJ_W), G(m, l, DIT_XPROJ_B), dfull,
                              A(y->catt), P(m, l, DIT_XPROJ_W), IG_W_OUT_IN, Ng, Cl, C);
    ig_backend_zero(be, S(x->dckv), (size_t)BK * 2 * (size_t)Cl * m->as, NULL);
    ig_kernel_cross_attention_backward(be, S(x->dcq), S(x->dckv), S(x->dcatt), A(y->cq), A(y->ckv),
                                       A(y->catt), F(y->clse), ig_model_i32(m, 0), Ng,
                                       cross_row0(m, row0), T, x->Tk, m->cfg.n_head / p->tp,
                                       C / m->cfg.n_head);
    ig_kernel_matmul_backward(be, S(x->dytmp), G(m, l, DIT_XKV_W), G(m, l, DIT_XKV_B), S(x->dckv),
                              A(x->ycap), P(m, l, DIT_XKV_W), IG_W_OUT_IN, BK, C, 2 * Cl);
    ig_kernel_add(be, S(x->dyl), S(x->dyl), S(x->dytmp), (size_t)BK * (size_t)C);
    const void *in = p->sp ? A(y->res2_full) : A(y->res2);
    ig_kernel_matmul_backward(be, ig_tp_dinput_target(m, S(x->dpartial), S(x->dln)),
                              G(m, l, DIT_XQ_W), G(m, l, DIT_XQ_B), S(x->dcq), in,
                              P(m, l, DIT_XQ_W), IG_W_OUT_IN, Ng, C, Cl);
    if ((st = ig_tp_dinput_reduce(m, S(x->dpartial), S(x->dln), Ng, C, &dl, err)) != IG_OK)
        return st;
    ig_kernel_add(be, dres, dres, dl, (size_t)Nl * (size_t)C);
    return IG_OK;
}

/* The attention core of block l: its output (Ulysses: in the heads' layout, then back to this
 * rank's rows, atty) and lse from the kept q|k|v. */
static ig_status attn_core(ig_model *m, const dit_layer_acts *y, const ig_attention_shape *shape,
                           int Nl, ig_err *err) {
    const dit_state *x = dit_of(m);
    int u = usp_of(m);
    void *att = u > 1 ? A(y->atty_h) : A(y->atty);
    ig_kernel_attention_forward(m->be, att, F(y->lse), A(y->qkv), NULL, shape);
    if (u > 1) return ig_usp_to_rows(m, att, A(y->atty), S(x->pack), Nl, 1, x->Cl, err);
    return IG_OK;
}

/* Block l on this rank's rows of the slot's micro-batch from its input res. Without `all` it
 * stops before the gated residual that makes res3 (a recomputation for the backward: res3 is
 * kept, the next block's input). */
static ig_status block_forward(ig_model *m, int l, const dit_layer_acts *y, const void *res,
                               int all, ig_err *err) {
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const dit_state *x = dit_of(m);
    int B = m->slot_B[m->slot], T = m->slot_T[m->slot], N, Nl, row0;
    rows(m, m->slot, &N, &Nl, &row0);
    int C = m->cfg.d_model, Cl = x->Cl, ld = 6 * C, u = usp_of(m);
    int Ng = p->sp ? N : Nl; /* rows of the tensor-parallel layers */
    float eps = (float)m->cfg.norm_eps;
    ig_attention_shape shape = attn_shape(m, B, T);
    ig_status st = IG_OK;
    const void *h = NULL;
    void *mod = A(y->mod);
    ig_kernel_matmul_forward(be, mod, A(x->silu_c), P(m, l, DIT_ADA_W), IG_W_OUT_IN,
                             P(m, l, DIT_ADA_B), B, C, 6 * C);
    ig_kernel_layernorm_modulate_forward(be, A(y->h1), F(y->mean1), F(y->rstd1), res,
                                         MOD(m, mod, MOD_SHIFT_MSA), MOD(m, mod, MOD_SCALE_MSA), ld,
                                         Nl, C, row0, T, eps);
    if ((st = ig_tp_gather(m, A(y->h1), A(y->h1_full), N, C, &h, err)) != IG_OK) return st;
    /* Ulysses: q|k|v of this rank's rows, then of every row for this rank's heads */
    void *qkv = u > 1 ? S(x->rows3) : A(y->qkv);
    ig_kernel_matmul_forward(be, qkv, h, P(m, l, DIT_QKV_W), IG_W_OUT_IN, P(m, l, DIT_QKV_B), Ng, C,
                             3 * Cl);
    if (u > 1 && (st = ig_usp_to_heads(m, qkv, A(y->qkv), S(x->pack), Nl, 3, Cl, err)) != IG_OK)
        return st;
    if ((st = attn_core(m, y, &shape, Nl, err)) != IG_OK) return st;
    st = ig_tp_row_linear(m, A(y->attproj), A(y->atty), P(m, l, DIT_PROJ_W), IG_W_OUT_IN,
                          P(m, l, DIT_PROJ_B), S(x->partial), Ng, Cl, C, err);
    if (st != IG_OK) return st;
    ig_kernel_gate_residual_forward(be, A(y->res2), res, A(y->attproj), MOD(m, mod, MOD_GATE_MSA),
                                    ld, Nl, C, row0, T);
    const void *mlp_in = A(y->res2);
    if (x->Tk) {
        if ((st = cross_forward(m, l, y, B, T, N, Nl, row0, err)) != IG_OK) return st;
        mlp_in = A(y->res2b);
    }
    ig_kernel_layernorm_modulate_forward(be, A(y->h2), F(y->mean2), F(y->rstd2), mlp_in,
                                         MOD(m, mod, MOD_SHIFT_MLP), MOD(m, mod, MOD_SCALE_MLP), ld,
                                         Nl, C, row0, T, eps);
    if ((st = ig_tp_gather(m, A(y->h2), A(y->h2_full), N, C, &h, err)) != IG_OK) return st;
    ig_kernel_matmul_forward(be, A(y->fch), h, P(m, l, DIT_FC1_W), IG_W_OUT_IN, NULL, Ng, C,
                             4 * Cl);
    ig_kernel_gelu_bias_forward(be, A(y->fch_gelu), A(y->fch), P(m, l, DIT_FC1_B), Ng, 4 * Cl);
    st = ig_tp_row_linear(m, A(y->fcproj), A(y->fch_gelu), P(m, l, DIT_FC2_W), IG_W_OUT_IN,
                          P(m, l, DIT_FC2_B), S(x->partial), Ng, 4 * Cl, C, err);
    if (st != IG_OK || !all) return st;
    ig_kernel_gate_residual_forward(be, A(y->res3), mlp_in, A(y->fcproj), MOD(m, mod, MOD_GATE_MLP),
                                    ld, Nl, C, row0, T);
    return IG_OK;
}

/* ---- the stage's pieces (the stage driver, stage.c, runs them) ------------------------------- */

static ig_status dit_embed_forward(ig_model *m, ig_err *err) {
    int N, Nl, row0;
    rows(m, m->slot, &N, &Nl, &row0);
    return embed_forward(m, m->slot_B[m->slot], Nl, err);
}

/* every stage: SiLU(c), the adaLN projections' input */
static ig_status dit_begin(ig_model *m, ig_err *err) {
    (void)err;
    const dit_state *x = dit_of(m);
    ig_kernel_silu_forward(m->be, A(x->silu_c), A(x->cond),
                           (size_t)m->slot_B[m->slot] * (size_t)m->cfg.d_model);
    return IG_OK;
}

/* block l's input: the previous block's output, or the stage's input tokens */
static const void *block_input(const ig_model *m, int l) {
    const dit_state *x = dit_of(m);
    return l > m->part.l0 ? A(x->layer[l - 1 - m->part.l0].res3) : A(x->encoded);
}

static ig_status dit_layer_fwd(ig_model *m, int l, ig_err *err) {
    return block_forward(m, l, &dit_of(m)->layer[l - m->part.l0], block_input(m, l), 1, err);
}

static ig_status dit_layer_recompute(ig_model *m, int l, ig_err *err) {
    return block_forward(m, l, &dit_of(m)->layer[l - m->part.l0], block_input(m, l), 0, err);
}

/* the final layer and the loss */
static ig_status dit_head_forward(ig_model *m, int with_grad, ig_err *err) {
    (void)err;
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const dit_state *x = dit_of(m);
    int slot = m->slot, B = m->slot_B[slot], T = m->slot_T[slot], N, Nl, row0;
    rows(m, slot, &N, &Nl, &row0);
    int C = m->cfg.d_model;
    float eps = (float)m->cfg.norm_eps;
    const void *res = A(x->layer[p->l1 - 1 - p->l0].res3);
    ig_kernel_matmul_forward(be, A(x->modf), A(x->silu_c),
                             ig_model_param(m, dit_lastt(m, DIT_F_ADA_W)), IG_W_OUT_IN,
                             ig_model_param(m, dit_lastt(m, DIT_F_ADA_B)), B, C, 2 * C);
    ig_kernel_layernorm_modulate_forward(be, A(x->hf), F(x->meanf), F(x->rstdf), res,
                                         MOD(m, A(x->modf), 0), MOD(m, A(x->modf), 1), 2 * C, Nl, C,
                                         row0, T, eps);
    ig_kernel_matmul_forward(be, A(x->pred), A(x->hf), ig_model_param(m, dit_lastt(m, DIT_F_W)),
                             IG_W_OUT_IN, ig_model_param(m, dit_lastt(m, DIT_F_B)), Nl, C, x->P);
    if (!x->has_target[slot]) return IG_OK;
    /* the mean over all N x P values of the micro-batch (every rank's rows) */
    float g = with_grad ? x->grad_scale[slot] / ((float)N * (float)x->P) : 0.0f;
    ig_kernel_mse(be, ig_model_io_f32(m, 0), with_grad ? A(x->pred) : NULL, A(x->pred),
                  A(x->target), Nl, x->P, g);
    return IG_OK;
}

/* c's gradient from SiLU(c)'s on the first stage: into the class table and the time MLP. */
static void embed_backward(ig_model *m, int B, int Nl) {
    ig_backend *be = m->be;
    const dit_state *x = dit_of(m);
    int C = m->cfg.d_model;
    void *dc = A(x->dcond), *dt = S(x->dtmp);
    ig_kernel_matmul_backward(be, NULL, ig_model_grad(m, dit_ft(m, DIT_X_W)),
                              ig_model_grad(m, dit_ft(m, DIT_X_B)), S(x->dres), A(x->patches),
                              ig_model_param(m, dit_ft(m, DIT_X_W)), IG_W_OUT_IN, Nl, x->P, C);
    if (dit_own(&m->cfg).cond == DIT_COND_CLASS)
        ig_kernel_encoder_backward(be, ig_model_grad(m, dit_ft(m, DIT_Y)), NULL, dc,
                                   ig_model_i32(m, 0), 1, B, C);
    if (x->Dt)
        dit_caption_embed_backward(m, B);
    else if (x->Tk)
        ig_kernel_encoder_backward(be, ig_model_grad(m, dit_ft(m, DIT_Y)), NULL, A(x->dycap),
                                   ig_model_i32(m, (uint64_t)m->B), B, x->Tk, C);
    ig_kernel_matmul_backward(be, dt, ig_model_grad(m, dit_ft(m, DIT_T2_W)),
                              ig_model_grad(m, dit_ft(m, DIT_T2_B)), dc, A(x->tsilu),
                              ig_model_param(m, dit_ft(m, DIT_T2_W)), IG_W_OUT_IN, B, C, C);
    ig_kernel_silu_backward(be, dt, dt, A(x->th), (size_t)B * (size_t)C);
    ig_kernel_matmul_backward(be, NULL, ig_model_grad(m, dit_ft(m, DIT_T0_W)),
                              ig_model_grad(m, dit_ft(m, DIT_T0_B)), dt, A(x->freq),
                              ig_model_param(m, dit_ft(m, DIT_T0_W)), IG_W_OUT_IN, B, DIT_FREQ, C);
}

/* An adaLN projection's backward from its modulation's gradient dmod [B, k C]: its weights'
 * gradients, and its input's added to SiLU(c)'s. */
static void ada_backward(ig_model *m, size_t w, size_t b, int k, int B) {
    const dit_state *x = dit_of(m);
    int C = m->cfg.d_model;
    ig_kernel_matmul_backward(m->be, S(x->dtmp), ig_model_grad(m, w), ig_model_grad(m, b),
                              S(x->dmod), A(x->silu_c), ig_model_param(m, w), IG_W_OUT_IN, B, C,
                              k * C);
    ig_kernel_add(m->be, S(x->dsilu), S(x->dsilu), S(x->dtmp), (size_t)B * (size_t)C);
}

/* the gradients every stage sums into (SiLU(c)'s, the caption's) start at 0 */
static ig_status dit_backward_begin(ig_model *m, ig_err *err) {
    const dit_state *x = dit_of(m);
    int B = m->slot_B[m->slot];
    size_t as = m->as, BC = (size_t)B * (size_t)m->cfg.d_model;
    size_t BK = (size_t)B * (size_t)x->Tk * (size_t)m->cfg.d_model;
    ig_status st = ig_backend_zero(m->be, S(x->dsilu), BC * as, err);
    if (st == IG_OK && x->Tk) st = ig_backend_zero(m->be, S(x->dyl), BK * as, err);
    if (st == IG_OK && x->Tk && m->part.last)
        st = ig_backend_zero(m->be, A(x->dycap), BK * as, err);
    return st;
}

/* pred holds its gradient; dres and c's gradient start here */
static ig_status dit_head_backward(ig_model *m, ig_err *err) {
    (void)err;
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const dit_state *x = dit_of(m);
    int B = m->slot_B[m->slot], T = m->slot_T[m->slot], N, Nl, row0;
    rows(m, m->slot, &N, &Nl, &row0);
    int C = m->cfg.d_model;
    size_t as = m->as, BC = (size_t)B * (size_t)C;
    void *dres = S(x->dres), *dmod = S(x->dmod), *dln = S(x->dln);
    const void *res = A(x->layer[p->l1 - 1 - p->l0].res3);
    size_t fw = dit_lastt(m, DIT_F_W);
    ig_backend_zero(be, A(x->dcond), BC * as, NULL);
    ig_backend_zero(be, dres, (size_t)Nl * (size_t)C * as, NULL);
    ig_backend_zero(be, dmod, 2 * BC * as, NULL);
    ig_kernel_matmul_backward(be, dln, ig_model_grad(m, fw),
                              ig_model_grad(m, dit_lastt(m, DIT_F_B)), A(x->pred), A(x->hf),
                              ig_model_param(m, fw), IG_W_OUT_IN, Nl, C, x->P);
    ig_kernel_layernorm_modulate_backward(be, dres, MOD(m, dmod, 0), MOD(m, dmod, 1), dln, res,
                                          MOD(m, A(x->modf), 1), 2 * C, F(x->meanf), F(x->rstdf),
                                          Nl, C, row0, T);
    ada_backward(m, dit_lastt(m, DIT_F_ADA_W), dit_lastt(m, DIT_F_ADA_B), 2, B);
    return IG_OK;
}

static ig_status dit_layer_backward(ig_model *m, int l, ig_err *err) {
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const dit_state *x = dit_of(m);
    int slot = m->slot, B = m->slot_B[slot], T = m->slot_T[slot], N, Nl, row0;
    rows(m, slot, &N, &Nl, &row0);
    int C = m->cfg.d_model, Cl = x->Cl, ld = 6 * C, u = usp_of(m);
    int Ng = p->sp ? N : Nl;
    size_t as = m->as, BC = (size_t)B * (size_t)C;
    ig_attention_shape shape = attn_shape(m, B, T);
    void *dres = S(x->dres), *dx = S(x->dx), *dmod = S(x->dmod), *dpart = S(x->dpartial);
    void *dln = S(x->dln), *dl = NULL;
    const void *dfull = NULL, *in = NULL;
    ig_status st;
    const dit_layer_acts *y = &x->layer[l - p->l0];
    const void *res_in = block_input(m, l);
    void *mod = A(y->mod);
    ig_backend_zero(be, dmod, 6 * BC * as, NULL);
    /* res3 = res2 + gate_mlp fcproj: dres is res2's gradient too */
    ig_kernel_gate_residual_backward(be, dx, MOD(m, dmod, MOD_GATE_MLP), dres, A(y->fcproj),
                                     MOD(m, mod, MOD_GATE_MLP), ld, Nl, C, row0, T);
    if ((st = ig_tp_gather(m, dx, S(x->dres_full), N, C, &dfull, err)) != IG_OK) return st;
    ig_kernel_matmul_backward(be, S(x->dfcg), G(m, l, DIT_FC2_W), G(m, l, DIT_FC2_B), dfull,
                              A(y->fch_gelu), P(m, l, DIT_FC2_W), IG_W_OUT_IN, Ng, 4 * Cl, C);
    ig_kernel_gelu_bias_backward(be, S(x->dfch), G(m, l, DIT_FC1_B), S(x->dfcg), A(y->fch),
                                 P(m, l, DIT_FC1_B), Ng, 4 * Cl);
    in = p->sp ? A(y->h2_full) : A(y->h2);
    ig_kernel_matmul_backward(be, ig_tp_dinput_target(m, dpart, dln), G(m, l, DIT_FC1_W), NULL,
                              S(x->dfch), in, P(m, l, DIT_FC1_W), IG_W_OUT_IN, Ng, C, 4 * Cl);
    if ((st = ig_tp_dinput_reduce(m, dpart, dln, Ng, C, &dl, err)) != IG_OK) return st;
    ig_kernel_layernorm_modulate_backward(
        be, dres, MOD(m, dmod, MOD_SHIFT_MLP), MOD(m, dmod, MOD_SCALE_MLP), dl,
        x->Tk ? A(y->res2b) : A(y->res2), MOD(m, mod, MOD_SCALE_MLP), ld, F(y->mean2), F(y->rstd2),
        Nl, C, row0, T);
    /* res2b = res2 + the cross-attention's output */
    if (x->Tk && (st = cross_backward(m, l, y, B, T, N, Nl, row0, err)) != IG_OK) return st;
    /* res2 = res_in + gate_msa attproj */
    ig_kernel_gate_residual_backward(be, dx, MOD(m, dmod, MOD_GATE_MSA), dres, A(y->attproj),
                                     MOD(m, mod, MOD_GATE_MSA), ld, Nl, C, row0, T);
    if ((st = ig_tp_gather(m, dx, S(x->dres_full), N, C, &dfull, err)) != IG_OK) return st;
    if (p->recompute == IG_RECOMPUTE_SELECTIVE && (st = attn_core(m, y, &shape, Nl, err)) != IG_OK)
        return st;
    ig_kernel_matmul_backward(be, S(x->datty), G(m, l, DIT_PROJ_W), G(m, l, DIT_PROJ_B), dfull,
                              A(y->atty), P(m, l, DIT_PROJ_W), IG_W_OUT_IN, Ng, Cl, C);
    /* Ulysses: the output's gradient to every row of this rank's heads, and q|k|v's back */
    void *datt = u > 1 ? S(x->datty_h) : S(x->datty), *dq = u > 1 ? S(x->rows3) : S(x->dqkv);
    if (u > 1 && (st = ig_usp_to_heads(m, S(x->datty), datt, S(x->pack), Nl, 1, Cl, err)) != IG_OK)
        return st;
    ig_kernel_attention_backward(be, S(x->dqkv), datt, A(y->qkv), u > 1 ? A(y->atty_h) : A(y->atty),
                                 F(y->lse), NULL, &shape);
    if (u > 1 && (st = ig_usp_to_rows(m, S(x->dqkv), dq, S(x->pack), Nl, 3, Cl, err)) != IG_OK)
        return st;
    in = p->sp ? A(y->h1_full) : A(y->h1);
    ig_kernel_matmul_backward(be, ig_tp_dinput_target(m, dpart, dln), G(m, l, DIT_QKV_W),
                              G(m, l, DIT_QKV_B), dq, in, P(m, l, DIT_QKV_W), IG_W_OUT_IN, Ng, C,
                              3 * Cl);
    if ((st = ig_tp_dinput_reduce(m, dpart, dln, Ng, C, &dl, err)) != IG_OK) return st;
    ig_kernel_layernorm_modulate_backward(
        be, dres, MOD(m, dmod, MOD_SHIFT_MSA), MOD(m, dmod, MOD_SCALE_MSA), dl, res_in,
        MOD(m, mod, MOD_SCALE_MSA), ld, F(y->mean1), F(y->rstd1), Nl, C, row0, T);
    ada_backward(m, dit_lt(m, l, DIT_ADA_W), dit_lt(m, l, DIT_ADA_B), 6, B);
    return IG_OK;
}

/* c's gradient: this stage's, through SiLU, added to the later stages'; the caption's: this
 * stage's, summed over the tensor-parallel ranks, added likewise */
static ig_status dit_backward_end(ig_model *m, ig_err *err) {
    ig_backend *be = m->be;
    const dit_state *x = dit_of(m);
    int B = m->slot_B[m->slot];
    size_t BC = (size_t)B * (size_t)m->cfg.d_model;
    size_t BK = (size_t)B * (size_t)x->Tk * (size_t)m->cfg.d_model;
    ig_kernel_silu_backward(be, S(x->dtmp), S(x->dsilu), A(x->cond), BC);
    ig_kernel_add(be, A(x->dcond), A(x->dcond), S(x->dtmp), BC);
    if (x->Tk) {
        ig_status st = ig_tp_sum(m, S(x->dyl), BK, err);
        if (st != IG_OK) return st;
        ig_kernel_add(be, A(x->dycap), A(x->dycap), S(x->dyl), BK);
    }
    return IG_OK;
}

static ig_status dit_embed_backward(ig_model *m, ig_err *err) {
    (void)err;
    int N, Nl, row0;
    rows(m, m->slot, &N, &Nl, &row0);
    embed_backward(m, m->slot_B[m->slot], Nl);
    return IG_OK;
}

const ig_stage_hooks dit_stage = {.embed_forward = dit_embed_forward,
                                  .begin = dit_begin,
                                  .layer_forward = dit_layer_fwd,
                                  .head_forward = dit_head_forward,
                                  .backward_begin = dit_backward_begin,
                                  .head_backward = dit_head_backward,
                                  .layer_recompute = dit_layer_recompute,
                                  .layer_backward = dit_layer_backward,
                                  .backward_end = dit_backward_end,
                                  .embed_backward = dit_embed_backward};

void dit_stage_io(ig_model *m, int slot, ig_stage_io *io) {
    const dit_state *x = dit_of(m);
    const ig_part *p = &m->part;
    m->slot = slot;
    int N, Nl, row0;
    rows(m, slot, &N, &Nl, &row0);
    uint64_t C = (uint64_t)m->cfg.d_model;
    memset(io, 0, sizeof *io);
    io->n = 2;
    io->in[0] = A(x->encoded);
    io->out[0] = p->last ? NULL : A(x->layer[p->l1 - 1 - p->l0].res3);
    io->grad[0] = S(x->dres);
    io->elems[0] = (uint64_t)Nl * C;
    io->in[1] = A(x->cond);
    io->out[1] = p->last ? NULL : A(x->cond);
    io->grad[1] = A(x->dcond);
    io->elems[1] = (uint64_t)m->slot_B[slot] * C;
    if (x->Tk) { /* the caption's embeddings go to every stage too */
        io->n = 3;
        io->in[2] = A(x->ycap);
        io->out[2] = p->last ? NULL : A(x->ycap);
        io->grad[2] = A(x->dycap);
        io->elems[2] = (uint64_t)m->slot_B[slot] * (uint64_t)x->Tk * C;
    }
}

ig_status dit_squared_error(ig_model *m, int slot, double *sum, double *count, ig_err *err) {
    const dit_state *x = dit_of(m);
    m->slot = slot;
    int N, Nl, row0;
    rows(m, slot, &N, &Nl, &row0);
    float *host = m->h_f32 + (uint64_t)slot * m->acts.io_f32;
    ig_status st =
        ig_backend_download(m->be, host, ig_model_io_f32(m, 0), (size_t)Nl * sizeof(float), err);
    if (st != IG_OK) return st;
    double s = 0;
    for (int i = 0; i < Nl; i++) s += host[i];
    /* with sequence parallelism each rank has its rows' squared errors: summed over the group */
    if (m->part.sp &&
        (st = ig_group_allreduce(m->part.tpg, &s, 1, IG_COMM_F64, IG_COMM_SUM, err)) != IG_OK)
        return st;
    if (usp_of(m) > 1 &&
        (st = ig_group_allreduce(m->part.uspg, &s, 1, IG_COMM_F64, IG_COMM_SUM, err)) != IG_OK)
        return st;
    *sum = s;
    *count = (double)N * (double)x->P;
    return IG_OK;
}
