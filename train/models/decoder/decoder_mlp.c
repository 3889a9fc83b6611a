/* decoder_mlp.c - the decoder's MLP, a replaceable piece (decoder.h's dec_mlp): its tensors, the
 * activations it keeps, its forward up to the row-parallel projection and its backward to the
 * input's gradient. Two today, chosen by the preset:
 *   gelu   (GPT-2): fch = h @ W_fc; fch_gelu = gelu(fch + b_fc); out = fch_gelu @ W_proj + b_proj
 *   swiglu (Llama): gate = h @ W_gate; up = h @ W_up; act = silu(gate) * up; out = act @ W_down
 * The first layers are column-parallel (each rank its F / tp columns), the projection
 * row-parallel (tp_layers.h). A mixture-of-experts MLP would be a third piece here.
 */
#include "decoder.h"

#include <math.h>

#include "family/tp_layers.h"

/* The layer's MLP width, F (model.ffn_hidden). */
static int64_t width(const ig_model_config *c) {
    return dec_own(c).ffn_hidden;
}

/* A linear layer's weight [out, in], stored as the preset's layout says, cut by columns (col:
 * its output's) or rows (its input's) under tensor parallelism. */
static ig_tensor_spec linear(const dec_preset *pre, int64_t out, int64_t in, int col, float std) {
    int io = pre->layout == IG_W_IN_OUT;
    ig_tensor_spec t = {.ndim = 2,
                        .shape = {io ? in : out, io ? out : in},
                        .place = IG_PLACE_LAYER,
                        .split_dim = col ? (io ? 1 : 0) : (io ? 0 : 1),
                        .decay = 1,
                        .init = IG_INIT_NORMAL,
                        .std = std};
    return t;
}

static float residual_std(const ig_model_config *c, const dec_preset *pre) {
    return pre->scaled_init ? (float)(0.02 / sqrt(2.0 * c->n_layer)) : 0.02f;
}

/* ---- gelu: fc (with its bias fused into the activation), then the projection ---------------- */

enum { GELU_FC_W, GELU_FC_B, GELU_PROJ_W, GELU_PROJ_B };

static void gelu_tensor(const ig_model_config *c, const dec_preset *pre, int k, ig_tensor_spec *t) {
    int64_t C = c->d_model, F = width(c);
    switch (k) {
    case GELU_FC_W:
        *t = linear(pre, F, C, 1, 0.02f);
        break;
    case GELU_FC_B:
        *t = (ig_tensor_spec){
            .ndim = 1, .shape = {F}, .place = IG_PLACE_LAYER, .split_dim = 0, .init = IG_INIT_ZERO};
        break;
    case GELU_PROJ_W:
        *t = linear(pre, C, F, 0, residual_std(c, pre));
        break;
    default: /* the row-parallel projection's bias: whole, added once */
        *t = (ig_tensor_spec){.ndim = 1,
                              .shape = {C},
                              .place = IG_PLACE_LAYER,
                              .split_dim = -1,
                              .init = IG_INIT_ZERO};
        break;
    }
}

static ig_status gelu_forward(ig_model *m, int l, const void *h, void *const *acts, void *out,
                              int N, int all, ig_err *err) {
    const dec_state *x = dec_of(m);
    ig_w_layout lay = x->pre->layout;
    ig_kernel_matmul_forward(m->be, acts[0], h, dec_param(m, l, DEC_MLP0 + GELU_FC_W), lay, NULL, N,
                             m->cfg.d_model, x->Fl);
    ig_kernel_gelu_bias_forward(m->be, acts[1], acts[0], dec_param(m, l, DEC_MLP0 + GELU_FC_B), N,
                                x->Fl);
    if (!all) return IG_OK;
    return ig_tp_row_linear(m, out, acts[1], dec_param(m, l, DEC_MLP0 + GELU_PROJ_W), lay,
                            dec_param(m, l, DEC_MLP0 + GELU_PROJ_B),
                            ig_model_scratch(m, x->partial), N, x->Fl, m->cfg.d_model, err);
}

static void gelu_backward(ig_model *m, int l, const void *dout, const void *h, void *const *acts,
                          void *dinput, int N) {
    const dec_state *x = dec_of(m);
    ig_w_layout lay = x->pre->layout;
    int C = m->cfg.d_model, Fl = x->Fl;
    void *dact = ig_model_scratch(m, x->dmlp[0]), *dfc = ig_model_scratch(m, x->dmlp[1]);
    ig_kernel_matmul_backward(m->be, dact, dec_grad(m, l, DEC_MLP0 + GELU_PROJ_W),
                              dec_grad(m, l, DEC_MLP0 + GELU_PROJ_B), dout, acts[1],
                              dec_param(m, l, DEC_MLP0 + GELU_PROJ_W), lay, N, Fl, C);
    ig_kernel_gelu_bias_backward(m->be, dfc, dec_grad(m, l, DEC_MLP0 + GELU_FC_B), dact, acts[0],
                                 dec_param(m, l, DEC_MLP0 + GELU_FC_B), N, Fl);
    ig_kernel_matmul_backward(m->be, dinput, dec_grad(m, l, DEC_MLP0 + GELU_FC_W), NULL, dfc, h,
                              dec_param(m, l, DEC_MLP0 + GELU_FC_W), lay, N, C, Fl);
}

const dec_mlp dec_mlp_gelu = {.n_tensors = 4,
                              .n_weights = 2,
                              .n_acts = 2,
                              .n_scratch = 2,
                              .second_input = 0,
                              .bias_mask = 1u << GELU_FC_B | 1u << GELU_PROJ_B,
                              .tensor = gelu_tensor,
                              .forward = gelu_forward,
                              .backward = gelu_backward};

/* ---- swiglu: gate and up, silu(gate) * up, then down ----------------------------------------- */

enum { SWIGLU_GATE, SWIGLU_UP, SWIGLU_DOWN };

static void swiglu_tensor(const ig_model_config *c, const dec_preset *pre, int k,
                          ig_tensor_spec *t) {
    int64_t C = c->d_model, F = width(c);
    *t =
        k == SWIGLU_DOWN ? linear(pre, C, F, 0, residual_std(c, pre)) : linear(pre, F, C, 1, 0.02f);
}

static ig_status swiglu_forward(ig_model *m, int l, const void *h, void *const *acts, void *out,
                                int N, int all, ig_err *err) {
    const dec_state *x = dec_of(m);
    ig_w_layout lay = x->pre->layout;
    int C = m->cfg.d_model;
    ig_kernel_matmul_forward(m->be, acts[0], h, dec_param(m, l, DEC_MLP0 + SWIGLU_GATE), lay, NULL,
                             N, C, x->Fl);
    ig_kernel_matmul_forward(m->be, acts[1], h, dec_param(m, l, DEC_MLP0 + SWIGLU_UP), lay, NULL, N,
                             C, x->Fl);
    ig_kernel_swiglu_forward(m->be, acts[2], acts[0], acts[1], N, x->Fl);
    if (!all) return IG_OK;
    return ig_tp_row_linear(m, out, acts[2], dec_param(m, l, DEC_MLP0 + SWIGLU_DOWN), lay, NULL,
                            ig_model_scratch(m, x->partial), N, x->Fl, C, err);
}

/* gate and up share their input: its gradient is the sum of theirs (up's into dtmp, added) */
static void swiglu_backward(ig_model *m, int l, const void *dout, const void *h, void *const *acts,
                            void *dinput, int N) {
    const dec_state *x = dec_of(m);
    ig_w_layout lay = x->pre->layout;
    int C = m->cfg.d_model, Fl = x->Fl;
    void *dact = ig_model_scratch(m, x->dmlp[0]), *dgate = ig_model_scratch(m, x->dmlp[1]);
    void *dup = ig_model_scratch(m, x->dmlp[2]), *dtmp = ig_model_scratch(m, x->dtmp);
    ig_kernel_matmul_backward(m->be, dact, dec_grad(m, l, DEC_MLP0 + SWIGLU_DOWN), NULL, dout,
                              acts[2], dec_param(m, l, DEC_MLP0 + SWIGLU_DOWN), lay, N, Fl, C);
    ig_kernel_swiglu_backward(m->be, dgate, dup, dact, acts[0], acts[1], N, Fl);
    ig_kernel_matmul_backward(m->be, dinput, dec_grad(m, l, DEC_MLP0 + SWIGLU_GATE), NULL, dgate, h,
                              dec_param(m, l, DEC_MLP0 + SWIGLU_GATE), lay, N, C, Fl);
    ig_kernel_matmul_backward(m->be, dtmp, dec_grad(m, l, DEC_MLP0 + SWIGLU_UP), NULL, dup, h,
                              dec_param(m, l, DEC_MLP0 + SWIGLU_UP), lay, N, C, Fl);
    ig_kernel_add(m->be, dinput, dinput, dtmp, (size_t)N * (size_t)C);
}

const dec_mlp dec_mlp_swiglu = {.n_tensors = 3,
                                .n_weights = 3,
                                .n_acts = 3,
                                .n_scratch = 3,
                                .second_input = 1,
                                .tensor = swiglu_tensor,
                                .forward = swiglu_forward,
                                .backward = swiglu_backward};
