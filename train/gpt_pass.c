/* gpt_pass.c - GPT-2's forward and backward passes over one micro-batch, as calls of the backend's
 * operation table, and the optimizer step over the parameter buffer.
 *
 * Per layer (pre-LayerNorm; the residual add is fused into the LayerNorm that follows it):
 *   ln1 = LN(res_in); qkv = ln1 @ Wqkv + b; atty = attention(qkv); attproj = atty @ Wproj + b;
 *   res2 = res_in + attproj, ln2 = LN(res2); fch = ln2 @ Wfc; fch_gelu = gelu(fch + bfc);
 *   fcproj = fch_gelu @ Wfcproj + b; res3 = res2 + fcproj (done by the next LayerNorm).
 * The head: lnf = LN(res3 of the last layer); logits = lnf @ wte^T (tied); the fused softmax
 * cross-entropy leaves the logits' gradient in place of the logits.
 */
#include "gpt_internal.h"

#include <math.h>
#include <string.h>

enum { T_WTE = 0, T_WPE = 1, T_LAYER0 = 2, T_PER_LAYER = 12 };
enum {
    L_LN1W,
    L_LN1B,
    L_QKVW,
    L_QKVB,
    L_PROJW,
    L_PROJB,
    L_LN2W,
    L_LN2B,
    L_FCW,
    L_FCB,
    L_FCPW,
    L_FCPB
};

static void *act(const ig_gpt *m, uint64_t off) {
    return (char *)m->act + off * m->as;
}
static float *f32(const ig_gpt *m, uint64_t off) {
    return m->f32 + off;
}
static void *param(const ig_gpt *m, size_t t) {
    return (char *)m->params + m->tensors[t].offset * m->as;
}
static void *grad(const ig_gpt *m, size_t t) {
    return (char *)m->grads + m->tensors[t].offset * m->as;
}
static size_t lt(int l, int which) {
    return T_LAYER0 + (size_t)l * T_PER_LAYER + (size_t)which;
}
static size_t t_lnf(const ig_gpt *m, int bias) {
    return T_LAYER0 + (size_t)m->cfg.n_layer * T_PER_LAYER + (size_t)bias;
}

/* The residual stream into layer l. */
static uint64_t res_in(const ig_gpt *m, int l) {
    return l == 0 ? m->acts.encoded : m->acts.layer[l - 1].res3;
}

/* Stages one micro-batch on the backend: inputs, targets, document ids; the mask of counted
 * positions (host, h_f32[N..2N)) and, for a backward pass (grad_scale > 0), each row's loss
 * gradient. *counted: the number of counted rows. */
static ig_status stage(ig_gpt *m, const int32_t *tokens, int B, int T, const ig_gpt_batch_opts *o,
                       float grad_scale, uint64_t *counted, ig_err *err) {
    uint64_t N = (uint64_t)B * (uint64_t)T;
    int32_t *in = m->h_i32, *tg = m->h_i32 + N, *doc = m->h_i32 + 2 * N;
    float *dloss = m->h_f32 + N; /* the mask: 1 for a counted row */
    int32_t eod = o ? o->eod_id : -1;
    uint64_t count = 0;
    for (int b = 0; b < B; b++) {
        const int32_t *row = tokens + (size_t)b * (size_t)(T + 1);
        int32_t d = 0;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * (size_t)T + (size_t)t;
            if (row[t] < 0 || row[t] >= m->cfg.vocab_size || row[t + 1] < 0 ||
                row[t + 1] >= m->cfg.vocab_size)
                return ig_err_set(err, IG_ERR_INVALID_ARG,
                                  "token %d at row %d, position %d is outside the model's "
                                  "vocabulary of %d",
                                  row[t] < 0 || row[t] >= m->cfg.vocab_size ? row[t] : row[t + 1],
                                  b, row[t] < 0 || row[t] >= m->cfg.vocab_size ? t : t + 1,
                                  m->cfg.vocab_size);
            in[i] = row[t];
            tg[i] = row[t + 1];
            doc[i] = d;
            if (eod >= 0 && row[t] == eod) d++; /* the next token starts a new document */
            int masked = o && o->eod_mask_loss && eod >= 0 && row[t] == eod;
            dloss[i] = masked ? 0.0f : 1.0f;
            count += !masked;
        }
    }
    *counted = count;
    ig_status st = ig_backend_upload(m->be, m->i32, m->h_i32, 3 * N * sizeof(int32_t), err);
    if (st != IG_OK || !(grad_scale > 0)) return st;
    /* d(mean loss)/d(loss_i) = 1 / count for a counted row, scaled; staged in the losses' place
     * (the mask stays for mean_loss) */
    float g = count ? grad_scale / (float)count : 0.0f, *scaled = m->h_f32;
    for (uint64_t i = 0; i < N; i++) scaled[i] = dloss[i] * g;
    return ig_backend_upload(m->be, f32(m, m->acts.dloss), scaled, N * sizeof(float), err);
}

static void forward(ig_gpt *m, int B, int T, const ig_gpt_batch_opts *o, int with_grad) {
    ig_backend *be = m->be;
    const ig_gpt_config *c = &m->cfg;
    const ig_gpt_acts *x = &m->acts;
    int N = B * T, C = c->d_model, NH = c->n_head;
    const int32_t *in = m->i32, *tg = m->i32 + (size_t)N, *doc = m->i32 + 2 * (size_t)N;
    const int32_t *docs = o && o->doc_attention && o->eod_id >= 0 ? doc : NULL;
    ig_kernel_encoder_forward(be, act(m, x->encoded), in, param(m, T_WTE), param(m, T_WPE), B, T,
                              C);
    for (int l = 0; l < c->n_layer; l++) {
        const ig_gpt_layer_acts *y = &x->layer[l];
        if (l == 0) {
            ig_kernel_layernorm_forward(be, act(m, y->ln1), f32(m, y->ln1_mean),
                                        f32(m, y->ln1_rstd), act(m, x->encoded),
                                        param(m, lt(l, L_LN1W)), param(m, lt(l, L_LN1B)), N, C);
        } else {
            const ig_gpt_layer_acts *p = &x->layer[l - 1];
            ig_kernel_residual_layernorm_forward(
                be, act(m, p->res3), act(m, y->ln1), f32(m, y->ln1_mean), f32(m, y->ln1_rstd),
                act(m, p->res2), act(m, p->fcproj), param(m, lt(l, L_LN1W)),
                param(m, lt(l, L_LN1B)), N, C);
        }
        ig_kernel_matmul_forward(be, act(m, y->qkv), act(m, y->ln1), param(m, lt(l, L_QKVW)),
                                 IG_W_IN_OUT, param(m, lt(l, L_QKVB)), N, C, 3 * C);
        ig_kernel_attention_forward(be, act(m, y->atty), f32(m, y->lse), act(m, y->qkv), docs, B, T,
                                    C, NH);
        ig_kernel_matmul_forward(be, act(m, y->attproj), act(m, y->atty), param(m, lt(l, L_PROJW)),
                                 IG_W_IN_OUT, param(m, lt(l, L_PROJB)), N, C, C);
        ig_kernel_residual_layernorm_forward(
            be, act(m, y->res2), act(m, y->ln2), f32(m, y->ln2_mean), f32(m, y->ln2_rstd),
            act(m, res_in(m, l)), act(m, y->attproj), param(m, lt(l, L_LN2W)),
            param(m, lt(l, L_LN2B)), N, C);
        ig_kernel_matmul_forward(be, act(m, y->fch), act(m, y->ln2), param(m, lt(l, L_FCW)),
                                 IG_W_IN_OUT, NULL, N, C, 4 * C);
        ig_kernel_gelu_bias_forward(be, act(m, y->fch_gelu), act(m, y->fch), param(m, lt(l, L_FCB)),
                                    N, 4 * C);
        ig_kernel_matmul_forward(be, act(m, y->fcproj), act(m, y->fch_gelu),
                                 param(m, lt(l, L_FCPW)), IG_W_IN_OUT, param(m, lt(l, L_FCPB)), N,
                                 4 * C, C);
    }
    const ig_gpt_layer_acts *last = &x->layer[c->n_layer - 1];
    ig_kernel_residual_layernorm_forward(be, act(m, last->res3), act(m, x->lnf),
                                         f32(m, x->lnf_mean), f32(m, x->lnf_rstd),
                                         act(m, last->res2), act(m, last->fcproj),
                                         param(m, t_lnf(m, 0)), param(m, t_lnf(m, 1)), N, C);
    ig_kernel_matmul_forward(be, act(m, x->logits), act(m, x->lnf), param(m, T_WTE), IG_W_OUT_IN,
                             NULL, N, C, c->padded_vocab);
    ig_kernel_crossentropy(be, f32(m, x->losses), act(m, x->logits), tg,
                           with_grad ? f32(m, x->dloss) : NULL, N, c->vocab_size, c->padded_vocab);
}

static void backward(ig_gpt *m, int B, int T, const ig_gpt_batch_opts *o) {
    ig_backend *be = m->be;
    const ig_gpt_config *c = &m->cfg;
    const ig_gpt_acts *x = &m->acts;
    int N = B * T, C = c->d_model, NH = c->n_head;
    const int32_t *in = m->i32, *doc = m->i32 + 2 * (size_t)N;
    const int32_t *docs = o && o->doc_attention && o->eod_id >= 0 ? doc : NULL;
    size_t as = m->as;
    /* the head: logits hold their gradient; dres starts at 0 and gathers the residual stream's */
    ig_kernel_matmul_backward(be, act(m, x->dln), grad(m, T_WTE), NULL, act(m, x->logits),
                              act(m, x->lnf), param(m, T_WTE), IG_W_OUT_IN, N, C, c->padded_vocab);
    ig_backend_zero(be, act(m, x->dres), (size_t)N * (size_t)C * as, NULL);
    const ig_gpt_layer_acts *last = &x->layer[c->n_layer - 1];
    ig_kernel_layernorm_backward(be, act(m, x->dres), grad(m, t_lnf(m, 0)), grad(m, t_lnf(m, 1)),
                                 act(m, x->dln), act(m, last->res3), param(m, t_lnf(m, 0)),
                                 f32(m, x->lnf_mean), f32(m, x->lnf_rstd), N, C);
    for (int l = c->n_layer - 1; l >= 0; l--) {
        const ig_gpt_layer_acts *y = &x->layer[l];
        /* res3 = res2 + fcproj: dres is the gradient of both */
        ig_kernel_matmul_backward(be, act(m, x->dfcg), grad(m, lt(l, L_FCPW)),
                                  grad(m, lt(l, L_FCPB)), act(m, x->dres), act(m, y->fch_gelu),
                                  param(m, lt(l, L_FCPW)), IG_W_IN_OUT, N, 4 * C, C);
        ig_kernel_gelu_bias_backward(be, act(m, x->dfch), grad(m, lt(l, L_FCB)), act(m, x->dfcg),
                                     act(m, y->fch), param(m, lt(l, L_FCB)), N, 4 * C);
        ig_kernel_matmul_backward(be, act(m, x->dln), grad(m, lt(l, L_FCW)), NULL, act(m, x->dfch),
                                  act(m, y->ln2), param(m, lt(l, L_FCW)), IG_W_IN_OUT, N, C, 4 * C);
        ig_kernel_layernorm_backward(be, act(m, x->dres), grad(m, lt(l, L_LN2W)),
                                     grad(m, lt(l, L_LN2B)), act(m, x->dln), act(m, y->res2),
                                     param(m, lt(l, L_LN2W)), f32(m, y->ln2_mean),
                                     f32(m, y->ln2_rstd), N, C);
        /* res2 = res_in + attproj: dres is the gradient of both */
        ig_kernel_matmul_backward(be, act(m, x->datty), grad(m, lt(l, L_PROJW)),
                                  grad(m, lt(l, L_PROJB)), act(m, x->dres), act(m, y->atty),
                                  param(m, lt(l, L_PROJW)), IG_W_IN_OUT, N, C, C);
        ig_kernel_attention_backward(be, act(m, x->dqkv), act(m, x->datty), act(m, y->qkv),
                                     act(m, y->atty), f32(m, y->lse), docs, B, T, C, NH);
        ig_kernel_matmul_backward(be, act(m, x->dln), grad(m, lt(l, L_QKVW)),
                                  grad(m, lt(l, L_QKVB)), act(m, x->dqkv), act(m, y->ln1),
                                  param(m, lt(l, L_QKVW)), IG_W_IN_OUT, N, C, 3 * C);
        ig_kernel_layernorm_backward(be, act(m, x->dres), grad(m, lt(l, L_LN1W)),
                                     grad(m, lt(l, L_LN1B)), act(m, x->dln), act(m, res_in(m, l)),
                                     param(m, lt(l, L_LN1W)), f32(m, y->ln1_mean),
                                     f32(m, y->ln1_rstd), N, C);
    }
    ig_kernel_encoder_backward(be, grad(m, T_WTE), grad(m, T_WPE), act(m, x->dres), in, B, T, C);
}

/* The mean loss over the counted rows of the last forward pass. */
static ig_status mean_loss(ig_gpt *m, int N, double *loss, ig_err *err) {
    float *losses = m->h_f32, *dmask = m->h_f32 + N;
    ig_status st =
        ig_backend_download(m->be, losses, f32(m, m->acts.losses), (size_t)N * sizeof(float), err);
    if (st != IG_OK) return st;
    double sum = 0;
    uint64_t n = 0;
    for (int i = 0; i < N; i++)
        if (dmask[i] != 0.0f) sum += losses[i], n++;
    *loss = n ? sum / (double)n : 0.0;
    return IG_OK;
}

static ig_status check_batch(const ig_gpt *m, const int32_t *tokens, int B, int T, ig_err *err) {
    if (!tokens || B <= 0 || T <= 0 || B > m->B || T > m->T)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a micro-batch of %d x %d tokens does not fit the model's %d x %d", B, T,
                          m->B, m->T);
    return IG_OK;
}

ig_status ig_gpt_forward(ig_gpt *m, const int32_t *tokens, int B, int T, const ig_gpt_batch_opts *o,
                         double *loss, uint64_t *counted, ig_err *err) {
    uint64_t cnt = 0, N = (uint64_t)B * (uint64_t)T;
    ig_status st = check_batch(m, tokens, B, T, err);
    if (st == IG_OK) st = stage(m, tokens, B, T, o, 0.0f, &cnt, err);
    if (st != IG_OK) return st;
    forward(m, B, T, o, 0);
    if ((st = ig_backend_sync(m->be, err)) != IG_OK) return st;
    if (counted) *counted = cnt;
    return mean_loss(m, (int)N, loss, err);
}

ig_status ig_gpt_forward_backward(ig_gpt *m, const int32_t *tokens, int B, int T,
                                  const ig_gpt_batch_opts *o, float grad_scale, double *loss,
                                  uint64_t *counted, ig_err *err) {
    uint64_t cnt = 0;
    ig_status st = check_batch(m, tokens, B, T, err);
    if (st == IG_OK && !(grad_scale > 0))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "grad_scale must be > 0, got %g",
                        (double)grad_scale);
    if (st == IG_OK) st = stage(m, tokens, B, T, o, grad_scale, &cnt, err);
    if (st != IG_OK) return st;
    forward(m, B, T, o, 1);
    backward(m, B, T, o);
    if ((st = ig_backend_sync(m->be, err)) != IG_OK) return st;
    if (counted) *counted = cnt;
    return mean_loss(m, B * T, loss, err);
}

ig_status ig_gpt_zero_grads(ig_gpt *m, ig_err *err) {
    return ig_backend_zero(m->be, m->grads, m->n_params * m->as, err);
}

ig_status ig_gpt_grad_norm(ig_gpt *m, double *norm, ig_err *err) {
    double ss = ig_kernel_sum_squares(m->be, m->grads, m->n_params);
    ig_status st = ig_backend_sync(m->be, err);
    *norm = sqrt(ss);
    return st;
}

ig_status ig_gpt_adamw(ig_gpt *m, int step, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, ig_err *err) {
    if (step < 1) return ig_err_set(err, IG_ERR_INVALID_ARG, "AdamW step %d: must be >= 1", step);
    /* runs of consecutive tensors with the same decay go as one call */
    size_t i = 0;
    while (i < m->n_tensors) {
        size_t j = i;
        while (j + 1 < m->n_tensors && m->tensors[j + 1].decay == m->tensors[i].decay) j++;
        uint64_t off = m->tensors[i].offset;
        uint64_t n = m->tensors[j].offset + m->tensors[j].numel - off;
        ig_kernel_adamw(m->be, (char *)m->params + off * m->as, NULL,
                        (char *)m->grads + off * m->as, m->adam_m + off, m->adam_v + off, n, lr,
                        beta1, beta2, eps, m->tensors[i].decay ? weight_decay : 0.0f, grad_scale,
                        step);
        i = j + 1;
    }
    return ig_backend_sync(m->be, err);
}
