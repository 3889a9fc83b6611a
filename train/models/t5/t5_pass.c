/* t5_pass.c - the T5 encoder's forward (t5.h), as transformers' T5EncoderModel:
 *   x = shared[ids]
 *   bias[h, i, j] = table[bucket(j - i), h]                  (once: every block shares block 0's)
 *   per block:  x += o(Attention(RMSNorm(x; ln0)))            scores q.k + bias, no 1/sqrt(d),
 *                                                             the padded keys masked
 *               x += wo(gelu_new(wi_0 h) * wi_1 h) | wo(relu(wi h)),  h = RMSNorm(x; ln1)
 *   features = RMSNorm(x; final_layer_norm)
 * each residual add fused into the next norm (ig_kernel_residual_rmsnorm_forward, the norm of the
 * sum as stored, as transformers adds then normalises).
 *
 * A batch of B captions is padded to T, its longest: rows [b T, b T + T) of every [N, *] buffer
 * are caption b's, its first lens[b] real. Why each caption gets the bits it gets alone (on the
 * CPU): every matrix product is run on a caption's own real rows (a GEMM library picks its kernels
 * and blocking by the sizes, so rows of a larger product can round differently), the norms and
 * activations work row by row, the position bias depends on j - i only, and attention with the
 * key mask (klen) reads no key past a caption's length and tiles its queries and keys from the
 * caption's first row, as alone. Padded rows are never read by a real row; they hold whatever the
 * elementwise kernels make of the buffers' old values (finite: nothing but this forward writes
 * there).
 */
#include "t5.h"

#include <string.h>

/* caption b's rows of a buffer of rows of `width` act elements */
static void *rows(const ig_model *m, uint64_t place, int b, int T, int64_t width) {
    return (char *)ig_model_act(m, place) + (size_t)b * (size_t)T * (size_t)width * m->as;
}

/* out = in @ W^T (nn.Linear [out, in]) for every caption, on its real rows alone */
static void linear(ig_model *m, uint64_t out, uint64_t in, const void *w, int B, int T,
                   const int *lens, int C, int OC) {
    for (int b = 0; b < B; b++)
        ig_kernel_matmul_forward(m->be, rows(m, out, b, T, OC), rows(m, in, b, T, C), w,
                                 IG_W_OUT_IN, NULL, lens[b], C, OC);
}

/* The ids padded to T (id 0, T5's pad) and the lengths, into the slot's int32 memory. */
static ig_status stage(ig_model *m, int B, int T, const int32_t *const *ids, const int *lens,
                       ig_err *err) {
    const t5_state *x = t5_of(m);
    int32_t *h = m->h_i32, *hl = m->h_i32 + x->klen;
    memset(h, 0, (size_t)B * (size_t)T * sizeof *h);
    for (int b = 0; b < B; b++) {
        memcpy(h + (size_t)b * T, ids[b], (size_t)lens[b] * sizeof *h);
        hl[b] = lens[b];
    }
    ig_status st = ig_backend_upload(m->be, m->i32 + x->ids, h, (size_t)B * T * sizeof *h, err);
    return st == IG_OK ? ig_backend_upload(m->be, m->i32 + x->klen, hl, (size_t)B * sizeof *hl, err)
                       : st;
}

ig_status t5_encode(ig_model *m, int B, const int32_t *const *ids, const int *lens,
                    float *const *out, ig_err *err) {
    const t5_state *x = t5_of(m);
    const t5_shape o = t5_own(&m->cfg);
    ig_backend *be = m->be;
    int T = 0;
    for (int b = 0; b < B; b++) T = lens[b] > T ? lens[b] : T;
    if (B < 1 || B > m->B || T > m->T)
        return ig_err_set(
            err, IG_ERR_INVALID_ARG,
            "%d captions of up to %d tokens do not fit an encoder opened for %d of %d", B, T, m->B,
            m->T);
    m->slot = 0;
    ig_status st = stage(m, B, T, ids, lens, err);
    if (st != IG_OK) return st;
    int C = m->cfg.d_model, NH = m->cfg.n_head, I = NH * o.d_kv, F = o.d_ff, L = m->cfg.n_layer;
    int N = B * T, gated = o.ffn == T5_GATED_GELU;
    float eps = (float)m->cfg.norm_eps;
    void *xs = ig_model_act(m, x->x), *h = ig_model_act(m, x->h), *sub = ig_model_act(m, x->out);
    float *rstd = ig_model_f32(m, x->rstd);
    ig_kernel_encoder_forward(be, xs, m->i32 + x->ids, ig_model_param(m, 0), NULL, B, T, C);
    ig_kernel_t5_position_bias(be, ig_model_act(m, x->bias), ig_model_param(m, 1), T, NH, o.buckets,
                               o.max_distance, 1);
    ig_kernel_rmsnorm_forward(be, h, rstd, xs, t5_param(m, 0, T5_LN0), N, C, eps);
    ig_attention_shape as = {
        .B = B, .T = T, .n_head = NH, .n_kv_head = NH, .head_size = o.d_kv, .scale = 1.0f};
    for (int l = 0; l < L; l++) {
        linear(m, x->qkv, x->h, t5_param(m, l, T5_QKV), B, T, lens, C, 3 * I);
        ig_kernel_attention_bias_forward(be, ig_model_act(m, x->att), NULL, ig_model_act(m, x->qkv),
                                         ig_model_act(m, x->bias), m->i32 + x->klen, &as);
        linear(m, x->out, x->att, t5_param(m, l, T5_O), B, T, lens, I, C);
        ig_kernel_residual_rmsnorm_forward(be, xs, h, rstd, xs, sub, t5_param(m, l, T5_LN1), N, C,
                                           eps);
        linear(m, x->f1, x->h, t5_param(m, l, T5_WI), B, T, lens, C, F);
        if (gated) {
            linear(m, x->f2, x->h, t5_param(m, l, T5_WI1), B, T, lens, C, F);
            ig_kernel_geglu_forward(be, ig_model_act(m, x->f3), ig_model_act(m, x->f1),
                                    ig_model_act(m, x->f2), N, F);
            linear(m, x->out, x->f3, t5_param(m, l, T5_WO), B, T, lens, F, C);
        } else {
            void *f1 = ig_model_act(m, x->f1);
            ig_kernel_relu_forward(be, f1, f1, (size_t)N * (size_t)F);
            linear(m, x->out, x->f1, t5_param(m, l, T5_WI1), B, T, lens, F, C); /* wo */
        }
        /* the next block's first norm, or the final one */
        const void *w =
            l + 1 < L ? t5_param(m, l + 1, T5_LN0) : ig_model_param(m, m->n_tensors - 1);
        ig_kernel_residual_rmsnorm_forward(be, xs, h, rstd, xs, sub, w, N, C, eps);
    }
    for (int b = 0; b < B && st == IG_OK; b++)
        st = ig_backend_download_f32(be, out[b], rows(m, x->h, b, T, C),
                                     (size_t)lens[b] * (size_t)C, err);
    ig_status s2 = ig_backend_sync(be, err);
    return st != IG_OK ? st : s2;
}
