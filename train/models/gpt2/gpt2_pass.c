/* gpt2_pass.c - GPT-2's forward and backward passes over one micro-batch as calls of the
 * backend's operation table and of the tensor-parallel layers (tp_layers.h), and generation with
 * a KV cache through the same layer forward.
 *
 * Per layer (pre-LayerNorm; the residual add is fused into the LayerNorm that follows it):
 *   ln1 = LN(res_in); qkv = ln1 @ Wqkv + b; atty = attention(qkv); attproj = atty @ Wproj + b;
 *   res2 = res_in + attproj, ln2 = LN(res2); fch = ln2 @ Wfc; fch_gelu = gelu(fch + bfc);
 *   fcproj = fch_gelu @ Wfcproj + b; res3 = res2 + fcproj (done by the next LayerNorm).
 * The head: lnf = LN(res3 of the last layer); logits = lnf @ wte^T (tied); the fused softmax
 * cross-entropy leaves the logits' gradient in place of the logits.
 *
 * Tensor parallelism: each rank computes its heads and its quarter of the MLP from the whole
 * input; c_attn and c_fc are column-parallel, the two c_proj row-parallel, the embedding and the
 * head vocabulary-parallel. Sequence parallelism: the LayerNorms and residual adds work on this
 * rank's 1/tp of the token rows; the gathered inputs are kept for the weight gradients (no second
 * all-gather in the backward), and the LayerNorms' gradients, taken over this rank's rows, are
 * partial (summed by the optimizer).
 *
 * Recomputation (train.recompute; the places of gpt2.c's layout): with selective the attention
 * core's output and lse live in the scratch and the backward runs attention's forward again from
 * the kept qkv just before it needs them; with full a slot keeps only each layer's input and the
 * backward runs the layer's forward again from it (after ig_model_use_layer(l)), up to fch_gelu
 * (fcproj is not needed by the backward). Both call the same kernels on the same inputs as the
 * forward, so the recomputed buffers, and the losses and weights, are the same bits as with none.
 * The one kernel that differs: the forward normalises layer l's input with the residual add fused
 * in (res3 = res2 + fcproj of layer l - 1, then LN(res3)), which the recomputation cannot repeat
 * (res2 and fcproj are not kept); it takes layernorm_forward of the kept res3. Both backends
 * compute the fused form as "store the sum, then the plain LayerNorm of the stored values": on the
 * CPU the same row function on the stored row (cpu_layernorm.c), on CUDA the same kernel, whose
 * residual argument only chooses which pointer the LayerNorm reads (cuda_layernorm.cu), so the
 * bf16 sum is rounded before the statistics either way. Tensor-parallel collectives inside a
 * recomputed layer run again, on every rank in the same order.
 *
 * Generation runs the same layer forward on the new positions' rows, with attention over a cache
 * of every position's keys and values so far ([Tmax, C] per layer): the new rows' keys and values
 * are copied into it on the backend (no host round trip), and only the last row gets logits.
 */
#include "gpt2.h"

#include <string.h>

#include "../../tp_layers.h"

/* slot activations or a layer's places (family.h), scratch, fp32 likewise */
#define A(off)  ig_model_at(m, off)
#define S(off)  ig_model_scratch(m, off)
#define F(off)  ig_model_at_f32(m, off)
#define FS(off) ig_model_scratch_f32(m, off)

static void *P(const ig_model *m, int l, int which) {
    return ig_model_param(m, gpt2_lt(m, l, which));
}
static void *G(const ig_model *m, int l, int which) {
    return ig_model_grad(m, gpt2_lt(m, l, which));
}

/* ---- one layer's forward, for training and for generation ------------------------------------ */

/* The buffers of one layer's forward. */
typedef struct layer_bufs {
    void *ln1, *ln1_full, *qkv, *atty, *attproj, *res2, *ln2, *ln2_full, *fch, *fch_gelu, *fcproj;
    void *res3;
    float *ln1_mean, *ln1_rstd, *lse, *ln2_mean, *ln2_rstd;
} layer_bufs;

/* How attention runs: over the micro-batch (kc NULL; docs: document ids or NULL), or the n new
 * rows at positions pos0.. over the layer's caches kc, vc [Tmax, C] (q: [n, C] scratch). */
typedef struct attn_ctx {
    const int32_t *docs;
    void *kc, *vc, *q;
    int pos0, Tmax;
} attn_ctx;

static layer_bufs slot_bufs(const ig_model *m, const gpt2_layer_acts *y) {
    return (layer_bufs){
        A(y->ln1),      A(y->ln1_full), A(y->qkv), A(y->atty),     A(y->attproj), A(y->res2),
        A(y->ln2),      A(y->ln2_full), A(y->fch), A(y->fch_gelu), A(y->fcproj),  A(y->res3),
        F(y->ln1_mean), F(y->ln1_rstd), F(y->lse), F(y->ln2_mean), F(y->ln2_rstd)};
}

/* GPT-2's attention: multi-head (every head its own keys and values), causal. */
static ig_attention_shape attn_shape(const ig_model *m, int B, int T) {
    int NHl = m->cfg.n_head / m->part.tp;
    return (ig_attention_shape){.B = B,
                                .T = T,
                                .n_head = NHl,
                                .n_kv_head = NHl,
                                .head_size = m->cfg.d_model / m->cfg.n_head,
                                .causal = 1};
}

static ig_status attention(ig_model *m, const layer_bufs *y, const attn_ctx *ac, int B, int T,
                           ig_err *err) {
    ig_attention_shape s = attn_shape(m, B, T);
    if (!ac->kc) {
        ig_kernel_attention_forward(m->be, y->atty, y->lse, y->qkv, ac->docs, &s);
        return IG_OK;
    }
    ig_status st = ig_lm_kv_append(m, y->qkv, T, ac->pos0, &s, ac->q, ac->kc, ac->vc, err);
    if (st == IG_OK)
        ig_kernel_attention_cached(m->be, y->atty, ac->q, ac->kc, ac->vc, ac->pos0, ac->Tmax, &s);
    return st;
}

/* Layer l on B x T rows (N in all, Nl held) from its normed input y->ln1 on; res_in is its
 * input. Without `all` it stops before the MLP's output projection (what a recomputation for the
 * backward needs). */
static ig_status layer_rest(ig_model *m, int l, const layer_bufs *y, const void *res_in,
                            const attn_ctx *ac, int B, int T, int all, ig_err *err) {
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    int N = B * T, Nl = p->sp ? N / p->tp : N;
    int C = m->cfg.d_model, Cl = gpt2_of(m)->Cl;
    float eps = (float)m->cfg.norm_eps;
    ig_status st;
    const void *ln1 = NULL, *ln2 = NULL;
    if ((st = ig_tp_gather(m, y->ln1, y->ln1_full, N, C, &ln1, err)) != IG_OK) return st;
    ig_kernel_matmul_forward(be, y->qkv, ln1, P(m, l, GPT2_QKVW), IG_W_IN_OUT, P(m, l, GPT2_QKVB),
                             N, C, 3 * Cl);
    if ((st = attention(m, y, ac, B, T, err)) != IG_OK) return st;
    st = ig_tp_row_linear(m, y->attproj, y->atty, P(m, l, GPT2_PROJW), IG_W_IN_OUT,
                          P(m, l, GPT2_PROJB), S(gpt2_of(m)->partial), N, Cl, C, err);
    if (st != IG_OK) return st;
    ig_kernel_residual_layernorm_forward(be, y->res2, y->ln2, y->ln2_mean, y->ln2_rstd, res_in,
                                         y->attproj, P(m, l, GPT2_LN2W), P(m, l, GPT2_LN2B), Nl, C,
                                         eps);
    if ((st = ig_tp_gather(m, y->ln2, y->ln2_full, N, C, &ln2, err)) != IG_OK) return st;
    ig_kernel_matmul_forward(be, y->fch, ln2, P(m, l, GPT2_FCW), IG_W_IN_OUT, NULL, N, C, 4 * Cl);
    ig_kernel_gelu_bias_forward(be, y->fch_gelu, y->fch, P(m, l, GPT2_FCB), N, 4 * Cl);
    if (!all) return IG_OK;
    return ig_tp_row_linear(m, y->fcproj, y->fch_gelu, P(m, l, GPT2_FCPW), IG_W_IN_OUT,
                            P(m, l, GPT2_FCPB), S(gpt2_of(m)->partial), N, 4 * Cl, C, err);
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
        ig_kernel_layernorm_forward(m->be, y->ln1, y->ln1_mean, y->ln1_rstd, res_in,
                                    P(m, l, GPT2_LN1W), P(m, l, GPT2_LN1B), Nl, C, eps);
    else
        ig_kernel_residual_layernorm_forward(m->be, prev->res3, y->ln1, y->ln1_mean, y->ln1_rstd,
                                             prev->res2, prev->fcproj, P(m, l, GPT2_LN1W),
                                             P(m, l, GPT2_LN1B), Nl, C, eps);
    return layer_rest(m, l, y, res_in, ac, B, T, 1, err);
}

/* Full recomputation: layer l's forward again from its kept input res_in, up to what its backward
 * reads (the LayerNorm of the stored res_in: what the fused form computed, see the header). */
static ig_status layer_recompute(ig_model *m, int l, const layer_bufs *y, const void *res_in,
                                 const attn_ctx *ac, int B, int T, ig_err *err) {
    const ig_part *p = &m->part;
    int N = B * T, Nl = p->sp ? N / p->tp : N;
    ig_kernel_layernorm_forward(m->be, y->ln1, y->ln1_mean, y->ln1_rstd, res_in, P(m, l, GPT2_LN1W),
                                P(m, l, GPT2_LN1B), Nl, m->cfg.d_model, (float)m->cfg.norm_eps);
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
    d.docs = m->doc_attention ? ig_model_i32(m, 2 * (uint64_t)gpt2_of(m)->N) : NULL;
    return d;
}

static ig_status gpt2_embed_forward(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    const gpt2_state *x = gpt2_of(m);
    dims d = dims_of(m);
    const void *wpe = p->tp_rank == 0 ? ig_model_param(m, (size_t)x->t_wpe) : NULL;
    void *dst = p->sp ? S(x->partial) : A(x->encoded);
    ig_kernel_encoder_forward(m->be, dst, ig_model_i32(m, 0), ig_model_param(m, (size_t)x->t_wte),
                              wpe, d.B, d.T, d.C);
    if (p->tp > 1) return ig_tp_reduce(m, dst, A(x->encoded), d.N, d.C, err);
    return IG_OK;
}

static ig_status gpt2_layer_fwd(ig_model *m, int l, ig_err *err) {
    const gpt2_state *x = gpt2_of(m);
    dims d = dims_of(m);
    attn_ctx ac = {.docs = d.docs};
    layer_bufs y = slot_bufs(m, &x->layer[l - m->part.l0]), prev;
    if (l > m->part.l0) prev = slot_bufs(m, &x->layer[l - 1 - m->part.l0]);
    return layer_forward(m, l, &y, l > m->part.l0 ? &prev : NULL, A(x->encoded), &ac, d.B, d.T,
                         err);
}

/* a middle stage's output: the last layer's residual add, which the next norm would have fused */
static ig_status gpt2_stage_output(ig_model *m, ig_err *err) {
    (void)err;
    const gpt2_state *x = gpt2_of(m);
    dims d = dims_of(m);
    layer_bufs last = slot_bufs(m, &x->layer[m->part.l1 - 1 - m->part.l0]);
    ig_kernel_add(m->be, A(x->output), last.res2, last.fcproj, (size_t)d.Nl * (size_t)d.C);
    return IG_OK;
}

static ig_status gpt2_head_forward(ig_model *m, int with_grad, ig_err *err) {
    ig_backend *be = m->be;
    const gpt2_state *x = gpt2_of(m);
    dims d = dims_of(m);
    layer_bufs last = slot_bufs(m, &x->layer[m->part.l1 - 1 - m->part.l0]);
    size_t lnf = (size_t)x->t_lnf;
    ig_kernel_residual_layernorm_forward(be, last.res3, A(x->lnf), F(x->lnf_mean), F(x->lnf_rstd),
                                         last.res2, last.fcproj, ig_model_param(m, lnf),
                                         ig_model_param(m, lnf + 1), d.Nl, d.C,
                                         (float)m->cfg.norm_eps);
    const void *lnf_in = NULL;
    ig_status st = ig_tp_gather(m, A(x->lnf), A(x->lnf_full), d.N, d.C, &lnf_in, err);
    if (st != IG_OK) return st;
    ig_kernel_matmul_forward(be, A(x->logits), lnf_in, ig_model_param(m, (size_t)x->t_wte),
                             IG_W_OUT_IN, NULL, d.N, d.C, x->Vl);
    uint64_t rows = (uint64_t)x->N;
    return ig_tp_cross_entropy(m, ig_model_io_f32(m, 0), A(x->logits), ig_model_i32(m, rows),
                               with_grad ? ig_model_io_f32(m, rows) : NULL, FS(x->rowmax),
                               FS(x->stats), d.N, err);
}

/* the head: the logits hold their gradient; dres starts at 0 and gathers the residual stream's */
static ig_status gpt2_head_backward(ig_model *m, ig_err *err) {
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const gpt2_state *x = gpt2_of(m);
    dims d = dims_of(m);
    void *dres = S(x->dres), *dl = NULL, *dpart = S(x->dpartial), *dln = S(x->dln);
    size_t lnf = (size_t)x->t_lnf, wte = (size_t)x->t_wte;
    const gpt2_layer_acts *last = &x->layer[p->l1 - 1 - p->l0];
    const void *in = p->sp ? A(x->lnf_full) : A(x->lnf);
    ig_kernel_matmul_backward(be, ig_tp_dinput_target(m, dpart, dln), ig_model_grad(m, wte), NULL,
                              A(x->logits), in, ig_model_param(m, wte), IG_W_OUT_IN, d.N, d.C,
                              x->Vl);
    ig_status st = ig_tp_dinput_reduce(m, dpart, dln, d.N, d.C, &dl, err);
    if (st != IG_OK) return st;
    ig_backend_zero(be, dres, (size_t)d.Nl * (size_t)d.C * m->as, NULL);
    ig_kernel_layernorm_backward(be, dres, ig_model_grad(m, lnf), ig_model_grad(m, lnf + 1), dl,
                                 A(last->res3), ig_model_param(m, lnf), F(x->lnf_mean),
                                 F(x->lnf_rstd), d.Nl, d.C);
    return IG_OK;
}

/* layer l's input: the previous layer's res3, or the stage's input */
static const void *res_input(const ig_model *m, int l) {
    const gpt2_state *x = gpt2_of(m);
    return l > m->part.l0 ? A(x->layer[l - 1 - m->part.l0].res3) : A(x->encoded);
}

static ig_status gpt2_layer_recompute(ig_model *m, int l, ig_err *err) {
    dims d = dims_of(m);
    attn_ctx ac = {.docs = d.docs};
    layer_bufs yb = slot_bufs(m, &gpt2_of(m)->layer[l - m->part.l0]);
    return layer_recompute(m, l, &yb, res_input(m, l), &ac, d.B, d.T, err);
}

static ig_status gpt2_layer_backward(ig_model *m, int l, ig_err *err) {
    ig_backend *be = m->be;
    const ig_part *p = &m->part;
    const gpt2_state *x = gpt2_of(m);
    dims d = dims_of(m);
    int N = d.N, Nl = d.Nl, C = d.C, Cl = x->Cl;
    ig_attention_shape shape = attn_shape(m, d.B, d.T);
    void *dres = S(x->dres), *dl = NULL, *dpart = S(x->dpartial), *dln = S(x->dln);
    const void *dfull = NULL, *in = NULL;
    const gpt2_layer_acts *y = &x->layer[l - p->l0];
    const void *res_in = res_input(m, l);
    ig_status st;
    /* res3 = res2 + fcproj: dres is the gradient of both */
    if ((st = ig_tp_gather(m, dres, S(x->dres_full), N, C, &dfull, err)) != IG_OK) return st;
    ig_kernel_matmul_backward(be, S(x->dfcg), G(m, l, GPT2_FCPW), G(m, l, GPT2_FCPB), dfull,
                              A(y->fch_gelu), P(m, l, GPT2_FCPW), IG_W_IN_OUT, N, 4 * Cl, C);
    ig_kernel_gelu_bias_backward(be, S(x->dfch), G(m, l, GPT2_FCB), S(x->dfcg), A(y->fch),
                                 P(m, l, GPT2_FCB), N, 4 * Cl);
    in = p->sp ? A(y->ln2_full) : A(y->ln2);
    ig_kernel_matmul_backward(be, ig_tp_dinput_target(m, dpart, dln), G(m, l, GPT2_FCW), NULL,
                              S(x->dfch), in, P(m, l, GPT2_FCW), IG_W_IN_OUT, N, C, 4 * Cl);
    if ((st = ig_tp_dinput_reduce(m, dpart, dln, N, C, &dl, err)) != IG_OK) return st;
    ig_kernel_layernorm_backward(be, dres, G(m, l, GPT2_LN2W), G(m, l, GPT2_LN2B), dl, A(y->res2),
                                 P(m, l, GPT2_LN2W), F(y->ln2_mean), F(y->ln2_rstd), Nl, C);
    /* res2 = res_in + attproj: dres is the gradient of both */
    if ((st = ig_tp_gather(m, dres, S(x->dres_full), N, C, &dfull, err)) != IG_OK) return st;
    if (p->recompute == IG_RECOMPUTE_SELECTIVE) /* the attention core, from the kept qkv */
        ig_kernel_attention_forward(be, A(y->atty), F(y->lse), A(y->qkv), d.docs, &shape);
    ig_kernel_matmul_backward(be, S(x->datty), G(m, l, GPT2_PROJW), G(m, l, GPT2_PROJB), dfull,
                              A(y->atty), P(m, l, GPT2_PROJW), IG_W_IN_OUT, N, Cl, C);
    ig_kernel_attention_backward(be, S(x->dqkv), S(x->datty), A(y->qkv), A(y->atty), F(y->lse),
                                 d.docs, &shape);
    in = p->sp ? A(y->ln1_full) : A(y->ln1);
    ig_kernel_matmul_backward(be, ig_tp_dinput_target(m, dpart, dln), G(m, l, GPT2_QKVW),
                              G(m, l, GPT2_QKVB), S(x->dqkv), in, P(m, l, GPT2_QKVW), IG_W_IN_OUT,
                              N, C, 3 * Cl);
    if ((st = ig_tp_dinput_reduce(m, dpart, dln, N, C, &dl, err)) != IG_OK) return st;
    ig_kernel_layernorm_backward(be, dres, G(m, l, GPT2_LN1W), G(m, l, GPT2_LN1B), dl, res_in,
                                 P(m, l, GPT2_LN1W), F(y->ln1_mean), F(y->ln1_rstd), Nl, C);
    return IG_OK;
}

static ig_status gpt2_embed_backward(ig_model *m, ig_err *err) {
    const gpt2_state *x = gpt2_of(m);
    dims d = dims_of(m);
    const void *dfull = NULL;
    ig_status st = ig_tp_gather(m, S(x->dres), S(x->dres_full), d.N, d.C, &dfull, err);
    if (st != IG_OK) return st;
    ig_kernel_encoder_backward(m->be, ig_model_grad(m, (size_t)x->t_wte),
                               ig_model_grad(m, (size_t)x->t_wpe), dfull, ig_model_i32(m, 0), d.B,
                               d.T, d.C);
    return IG_OK;
}

const ig_stage_hooks gpt2_stage = {.embed_forward = gpt2_embed_forward,
                                   .layer_forward = gpt2_layer_fwd,
                                   .stage_output = gpt2_stage_output,
                                   .head_forward = gpt2_head_forward,
                                   .head_backward = gpt2_head_backward,
                                   .layer_recompute = gpt2_layer_recompute,
                                   .layer_backward = gpt2_layer_backward,
                                   .embed_backward = gpt2_embed_backward};

void gpt2_stage_io(ig_model *m, int slot, ig_stage_io *io) {
    const gpt2_state *x = gpt2_of(m);
    ig_lm_stage_io(m, slot, x->encoded, x->output, x->dres, io);
}

/* ---- generation -------------------------------------------------------------------------------
 */

/* A generation session: the key/value caches ([Tmax, C] each per layer), two sets of layer buffers
 * of Tmax rows that the layers take turns in, the stage's input, the final LayerNorm and the query
 * scratch. */
typedef struct gen {
    ig_lm_gen base;
    layer_bufs set[2];
    void *input, *lnf, *q;
    float *lnf_mean, *lnf_rstd;
} gen;

void gpt2_gen_close(void *session) {
    gen *g = session;
    if (!g) return;
    ig_lm_gen_release(&g->base);
    ig_free(g->base.m->ctx, g);
}

ig_status gpt2_gen_open(ig_model *m, int Tmax, void **session, ig_err *err) {
    *session = NULL;
    gen *g = ig_calloc(m->ctx, 1, sizeof *g);
    if (!g) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    uint64_t T = (uint64_t)Tmax, C = (uint64_t)m->cfg.d_model, as = m->as;
    /* per set: ln1, atty, attproj, res2, ln2, fcproj, res3: C; qkv: 3C; fch, fch_gelu: 4C (18C);
     * then input, lnf, q: C. fp32: per set 4 rows of statistics, then lnf's 2 */
    ig_status st = ig_lm_gen_alloc(&g->base, m, Tmax, C, 2 * 18 * T * C + 3 * T * C, 10 * T, err);
    if (st != IG_OK) {
        g->base.m = m;
        gpt2_gen_close(g);
        return st;
    }
    char *a = g->base.act;
    float *f = g->base.f32;
#define TAKE(n) (a += (n)*T * C * as, (void *)(a - (n)*T * C * as))
    for (int k = 0; k < 2; k++) {
        layer_bufs *y = &g->set[k];
        y->ln1 = TAKE(1), y->qkv = TAKE(3), y->atty = TAKE(1), y->attproj = TAKE(1);
        y->res2 = TAKE(1), y->ln2 = TAKE(1), y->fch = TAKE(4), y->fch_gelu = TAKE(4);
        y->fcproj = TAKE(1), y->res3 = TAKE(1);
        y->ln1_mean = f, f += T;
        y->ln1_rstd = f, f += T;
        y->lse = NULL;
        y->ln2_mean = f, f += T;
        y->ln2_rstd = f, f += T;
    }
    g->input = TAKE(1), g->lnf = TAKE(1), g->q = TAKE(1);
#undef TAKE
    g->lnf_mean = f, f += T;
    g->lnf_rstd = f;
    *session = g;
    return IG_OK;
}

ig_status gpt2_gen_feed(void *session, const int32_t *tokens, int n, int pos0, const float **logits,
                        ig_err *err) {
    gen *g = session;
    ig_model *m = g->base.m;
    ig_backend *be = m->be;
    const gpt2_state *x = gpt2_of(m);
    int C = m->cfg.d_model, L = m->cfg.n_layer;
    if (n < 1 || pos0 < 0 || pos0 + n > g->base.Tmax)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%d tokens at position %d do not fit %d", n,
                          pos0, g->base.Tmax);
    ig_status st = ig_lm_gen_tokens(&g->base, tokens, n, err);
    if (st != IG_OK) return st;
    /* positions pos0 .. : the encoder adds wpe[t] for t < n, so start wpe at row pos0 */
    const char *wpe = ig_model_param(m, (size_t)x->t_wpe);
    ig_kernel_encoder_forward(be, g->input, g->base.tok, ig_model_param(m, (size_t)x->t_wte),
                              wpe + (size_t)pos0 * (size_t)C * m->as, 1, n, C);
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
    size_t lnf = (size_t)x->t_lnf;
    ig_kernel_residual_layernorm_forward(be, last->res3, g->lnf, g->lnf_mean, g->lnf_rstd,
                                         last->res2, last->fcproj, ig_model_param(m, lnf),
                                         ig_model_param(m, lnf + 1), n, C, (float)m->cfg.norm_eps);
    return ig_lm_gen_logits(&g->base, g->lnf, n, ig_model_param(m, (size_t)x->t_wte), logits, err);
}
