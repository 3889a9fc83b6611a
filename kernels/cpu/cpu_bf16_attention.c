/* cpu_bf16_attention.c - the CPU backend's bf16 kernels (cpu_bf16.c's table, see there) of
 * attention and of the rows DiT works on in samples: self-attention (causal or not, documents,
 * grouped-query), over a KV cache, with T5's bias and its position bias, cross-attention to a
 * sample's caption, and DiT's modulated LayerNorm and gated residual. Each widens its tensors,
 * runs the fp32 kernel and rounds every output once; where a slice of rows touches samples b0 ..
 * b0 + nb - 1, only those samples' per-sample tensors are widened and written back.
 */
#include "cpu_internal.h"

/* ---- attention ------------------------------------------------------------------------------- */

static size_t qkv_elems(const ig_attention_shape *s) {
    return (size_t)s->B * s->T * (s->n_head + 2 * s->n_kv_head) * s->head_size;
}
static size_t heads_elems(const ig_attention_shape *s) {
    return (size_t)s->B * s->T * s->n_head * s->head_size;
}

static void bf_attention_forward(ig_backend *be, void *o, float *lse, const void *qkv,
                                 const int32_t *doc, const ig_attention_shape *s) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    float *qkv_f = ig_bf_in(&f, qkv, qkv_elems(s)), *o_f = ig_bf_out(&f, o, heads_elems(s));
    if (IG_BF_READY(f)) {
        k->attention_forward(be, o_f, lse, qkv_f, doc, s);
        ig_bf_put(&f, o, o_f, heads_elems(s));
    }
    ig_bf_end(&f);
}

static void bf_attention_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                                  const void *o, const float *lse, const int32_t *doc,
                                  const ig_attention_shape *s) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t nq = qkv_elems(s), nh = heads_elems(s);
    float *dout_f = ig_bf_in(&f, dout, nh), *qkv_f = ig_bf_in(&f, qkv, nq),
          *o_f = ig_bf_in(&f, o, nh);
    float *dqkv_f = ig_bf_out(&f, dqkv, nq);
    if (IG_BF_READY(f)) {
        k->attention_backward(be, dqkv_f, dout_f, qkv_f, o_f, lse, doc, s);
        ig_bf_put(&f, dqkv, dqkv_f, nq);
    }
    ig_bf_end(&f);
}

static void bf_attention_cached(ig_backend *be, void *o, const void *q, const void *kc,
                                const void *vc, int pos0, int Tmax, const ig_attention_shape *s) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t nh = heads_elems(s), nkv = (size_t)s->B * Tmax * s->n_kv_head * s->head_size;
    float *q_f = ig_bf_in(&f, q, nh), *k_f = ig_bf_in(&f, kc, nkv), *v_f = ig_bf_in(&f, vc, nkv);
    float *o_f = ig_bf_out(&f, o, nh);
    if (IG_BF_READY(f)) {
        k->attention_cached(be, o_f, q_f, k_f, v_f, pos0, Tmax, s);
        ig_bf_put(&f, o, o_f, nh);
    }
    ig_bf_end(&f);
}

static void bf_attention_bias_forward(ig_backend *be, void *o, float *lse, const void *qkv,
                                      const void *bias, const int32_t *klen,
                                      const ig_attention_shape *s) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    float *qkv_f = ig_bf_in(&f, qkv, qkv_elems(s)), *o_f = ig_bf_out(&f, o, heads_elems(s));
    float *bias_f = ig_bf_in(&f, bias, (size_t)s->n_head * s->T * s->T);
    if (IG_BF_READY(f)) {
        k->attention_bias_forward(be, o_f, lse, qkv_f, bias_f, klen, s);
        ig_bf_put(&f, o, o_f, heads_elems(s));
    }
    ig_bf_end(&f);
}

static void bf_t5_position_bias(ig_backend *be, void *bias, const void *table, int T, int n_head,
                                int num_buckets, int max_distance, int bidirectional) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t nb = (size_t)n_head * T * T;
    float *t_f = ig_bf_in(&f, table, (size_t)num_buckets * n_head), *b_f = ig_bf_out(&f, bias, nb);
    if (IG_BF_READY(f)) {
        k->t5_position_bias(be, b_f, t_f, T, n_head, num_buckets, max_distance, bidirectional);
        ig_bf_put(&f, bias, b_f, nb);
    }
    ig_bf_end(&f);
}

/* The samples rows row0 .. row0 + N - 1 touch: [*b0, b0 + *nb). The per-sample tensors are widened
 * from sample b0 on, and the kernel is given the rows renumbered from b0's first (row0 - b0 rps:
 * the same place in each sample, so the same chunks and bits). */
static int samples_of(int N, int row0, int rps, int *b0) {
    *b0 = row0 / rps;
    return (row0 + N - 1) / rps - *b0 + 1;
}

static void bf_cross_attention_forward(ig_backend *be, void *o, float *lse, const void *q,
                                       const void *kv, const int32_t *klen, int N, int row0,
                                       int rps, int Tk, int n_head, int hs) {
    if (N <= 0) return;
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t C = (size_t)n_head * hs, nq = (size_t)N * C, row = (size_t)Tk * 2 * C;
    float *q_f = ig_bf_in(&f, q, nq), *o_f = ig_bf_out(&f, o, nq);
    float *kv_f = ig_bf_in(&f, (const uint16_t *)kv + (size_t)b0 * row, (size_t)nb * row);
    if (IG_BF_READY(f)) {
        k->cross_attention_forward(be, o_f, lse, q_f, kv_f, klen + b0, N, row0 - b0 * rps, rps, Tk,
                                   n_head, hs);
        ig_bf_put(&f, o, o_f, nq);
    }
    ig_bf_end(&f);
}

static void bf_cross_attention_backward(ig_backend *be, void *dq, void *dkv, const void *dout,
                                        const void *q, const void *kv, const void *o,
                                        const float *lse, const int32_t *klen, int N, int row0,
                                        int rps, int Tk, int n_head, int hs) {
    if (N <= 0) return;
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t C = (size_t)n_head * hs, nq = (size_t)N * C, row = (size_t)Tk * 2 * C;
    float *dout_f = ig_bf_in(&f, dout, nq), *q_f = ig_bf_in(&f, q, nq), *o_f = ig_bf_in(&f, o, nq);
    uint16_t *dkv_at = (uint16_t *)dkv + (size_t)b0 * row;
    float *kv_f = ig_bf_in(&f, (const uint16_t *)kv + (size_t)b0 * row, (size_t)nb * row);
    float *dkv_f = ig_bf_in(&f, dkv_at, (size_t)nb * row), *dq_f = ig_bf_out(&f, dq, nq);
    if (IG_BF_READY(f)) {
        k->cross_attention_backward(be, dq_f, dkv_f, dout_f, q_f, kv_f, o_f, lse, klen + b0, N,
                                    row0 - b0 * rps, rps, Tk, n_head, hs);
        ig_bf_put(&f, dq, dq_f, nq), ig_bf_put(&f, dkv_at, dkv_f, (size_t)nb * row);
    }
    ig_bf_end(&f);
}

/* ---- DiT's modulation and gates: per-sample vectors [B, ld] from sample b0 on ---------------- */

/* The per-sample vectors are C elements every ld of one [B, ld] matrix (mod's six, and their
 * gradients': dshift and dscale are two columns of blocks of one matrix, so their rows interleave).
 * Each is widened into a matrix of its own of nb rows of C, which the fp32 kernel is given with ld
 * C, and an output is rounded back into its own C elements of each row only. */
static float *vin(ig_bf_frame *f, const void *p, int b0, int nb, int ld, int C) {
    if (!p || f->failed) return NULL;
    float *v = ig_bf_take(f, (size_t)nb * C);
    for (int b = 0; v && b < nb; b++)
        ig_bf_convert(f->be, v + (size_t)b * C, (const uint16_t *)p + (size_t)(b0 + b) * ld,
                      (size_t)C, 0);
    return v;
}

static void vput(ig_bf_frame *f, void *p, const float *v, int b0, int nb, int ld, int C) {
    for (int b = 0; p && v && !f->failed && b < nb; b++)
        ig_bf_convert(f->be, (uint16_t *)p + (size_t)(b0 + b) * ld, v + (size_t)b * C, (size_t)C,
                      1);
}

static void bf_layernorm_modulate_forward(ig_backend *be, void *o, float *mean, float *rstd,
                                          const void *inp, const void *shift, const void *scale,
                                          int ld, int N, int C, int row0, int rps, float eps) {
    if (N <= 0) return;
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t n = (size_t)N * C;
    float *inp_f = ig_bf_in(&f, inp, n), *o_f = ig_bf_out(&f, o, n);
    float *sh_f = vin(&f, shift, b0, nb, ld, C), *sc_f = vin(&f, scale, b0, nb, ld, C);
    if (IG_BF_READY(f)) {
        k->layernorm_modulate_forward(be, o_f, mean, rstd, inp_f, sh_f, sc_f, C, N, C,
                                      row0 - b0 * rps, rps, eps);
        ig_bf_put(&f, o, o_f, n);
    }
    ig_bf_end(&f);
}

static void bf_layernorm_modulate_backward(ig_backend *be, void *dinp, void *dshift, void *dscale,
                                           const void *dout, const void *inp, const void *scale,
                                           int ld, const float *mean, const float *rstd, int N,
                                           int C, int row0, int rps) {
    if (N <= 0) return;
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t n = (size_t)N * C;
    float *dinp_f = ig_bf_in(&f, dinp, n), *dout_f = ig_bf_in(&f, dout, n),
          *inp_f = ig_bf_in(&f, inp, n);
    float *sc_f = vin(&f, scale, b0, nb, ld, C);
    float *dsh_f = vin(&f, dshift, b0, nb, ld, C), *dsc_f = vin(&f, dscale, b0, nb, ld, C);
    if (IG_BF_READY(f)) {
        k->layernorm_modulate_backward(be, dinp_f, dsh_f, dsc_f, dout_f, inp_f, sc_f, C, mean, rstd,
                                       N, C, row0 - b0 * rps, rps);
        ig_bf_put(&f, dinp, dinp_f, n);
        vput(&f, dshift, dsh_f, b0, nb, ld, C), vput(&f, dscale, dsc_f, b0, nb, ld, C);
    }
    ig_bf_end(&f);
}

static void bf_gate_residual_forward(ig_backend *be, void *o, const void *res, const void *x,
                                     const void *gate, int ld, int N, int C, int row0, int rps) {
    if (N <= 0) return;
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t n = (size_t)N * C;
    float *res_f = ig_bf_in(&f, res, n), *x_f = ig_bf_in(&f, x, n), *o_f = ig_bf_out(&f, o, n);
    float *g_f = vin(&f, gate, b0, nb, ld, C);
    if (IG_BF_READY(f)) {
        k->gate_residual_forward(be, o_f, res_f, x_f, g_f, C, N, C, row0 - b0 * rps, rps);
        ig_bf_put(&f, o, o_f, n);
    }
    ig_bf_end(&f);
}

static void bf_gate_residual_backward(ig_backend *be, void *dx, void *dgate, const void *dout,
                                      const void *x, const void *gate, int ld, int N, int C,
                                      int row0, int rps) {
    if (N <= 0) return;
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t n = (size_t)N * C;
    float *dout_f = ig_bf_in(&f, dout, n), *x_f = ig_bf_in(&f, x, n), *dx_f = ig_bf_out(&f, dx, n);
    float *g_f = vin(&f, gate, b0, nb, ld, C), *dg_f = vin(&f, dgate, b0, nb, ld, C);
    if (IG_BF_READY(f)) {
        k->gate_residual_backward(be, dx_f, dg_f, dout_f, x_f, g_f, C, N, C, row0 - b0 * rps, rps);
        ig_bf_put(&f, dx, dx_f, n), vput(&f, dgate, dg_f, b0, nb, ld, C);
    }
    ig_bf_end(&f);
}

void ig_cpu_bf16_attention_ops(ig_backend_ops *t) {
    t->attention_forward = bf_attention_forward, t->attention_backward = bf_attention_backward;
    t->attention_cached = bf_attention_cached,
    t->attention_bias_forward = bf_attention_bias_forward;
    t->t5_position_bias = bf_t5_position_bias;
    t->cross_attention_forward = bf_cross_attention_forward;
    t->cross_attention_backward = bf_cross_attention_backward;
    t->layernorm_modulate_forward = bf_layernorm_modulate_forward;
    t->layernorm_modulate_backward = bf_layernorm_modulate_backward;
    t->gate_residual_forward = bf_gate_residual_forward;
    t->gate_residual_backward = bf_gate_residual_backward;
}
