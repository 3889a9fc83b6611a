/* cpu_bf16.c - the CPU backend with bf16 act tensors (train.dtype bf16 on the CPU): an ops table
 * over the fp32 one. Every kernel here widens its bf16 tensors to fp32 (exact), runs the fp32
 * kernel of the table below it (the fast or the reference one), and rounds each output once to
 * bf16 (ig_backend_bf16_from_f32: to nearest, ties to even). These are the CUDA backend's rounding
 * points: its kernels read bf16, compute in fp32 and round each output once (backend.h), an
 * accumulated gradient too (dw = bf16(dw + the call's fp32 sum)); so a CPU bf16 run is the
 * oracle a GPU bf16 run is checked against. Normalisation statistics, lse, losses, the master
 * weights and the optimizer's moments stay fp32, as there.
 *
 * Two kernels do more than wrap: the residual + norm forwards are the add (rounded: the residual
 * as stored) and then the norm of that stored residual, as the CUDA kernels compute them; and the
 * embedding's kernels widen only the rows of wte the tokens hit (the vocabulary's size is not an
 * argument), handing the fp32 kernel the tokens renumbered over those rows. The fast backend's
 * matmul is not widened: it is oneDNN's bf16 GEMM with fp32 accumulation on bf16 operands
 * (cpu_matmul_bf16.c, the same rounding points), which needs a CPU with bf16 instructions
 * (cpu_backend.c refuses bf16 on one without); the reference backend's widens like every other
 * kernel (the same maths, a sum of exact products in another order). AdamW, the sum of squares
 * and the scaling of whole buffers (every gradient at once) are the fast fp32 kernels' loops
 * reading bf16 themselves (cpu_optimizer.c), the same bits without an fp32 copy of the buffer.
 *
 * The attention kernels and DiT's per-sample ones are in cpu_bf16_attention.c, on this file's
 * frame (cpu_internal.h: ig_bf_frame).
 *
 * Scratch: the widened tensors of one call come from one arena kept by the backend (grown to the
 * largest call's need, counted as workspace), so that a step does not map and fault in fresh
 * pages for every kernel. The conversions run on the pool; they are elementwise, so their bits do
 * not depend on the threads.
 */
#include <stdlib.h>

#include "cpu_internal.h"

/* ---- conversions ----------------------------------------------------------------------------- */

IG_CPU_CLONES static void widen_run(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ig_bf16_to_f32(src[i]);
}

IG_CPU_CLONES static void narrow_run(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ig_bf16_from_f32(src[i]);
}

typedef struct conv_job {
    void *dst;
    const void *src;
    int narrow;
} conv_job;

static void conv_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    const conv_job *j = arg;
    if (j->narrow)
        narrow_run((uint16_t *)j->dst + b, (const float *)j->src + b, e - b);
    else
        widen_run((float *)j->dst + b, (const uint16_t *)j->src + b, e - b);
}

#define CONV_GRAIN ((size_t)1 << 15)

void ig_bf_convert(ig_backend *be, void *dst, const void *src, size_t n, int narrow) {
    conv_job j = {dst, src, narrow};
    if (n <= CONV_GRAIN)
        conv_chunk(&j, 0, n, 0);
    else
        ig_parallel_range(be->ctx, n, CONV_GRAIN, conv_chunk, &j);
}

/* ---- one call's scratch ---------------------------------------------------------------------- */

struct ig_cpu_bf16 {
    ig_backend_ops ops;         /* the backend's table: these kernels */
    const ig_backend_ops *base; /* the fp32 table */
    float *arena;               /* [cap] */
    size_t cap;
};

const ig_backend_ops *ig_bf_begin(ig_bf_frame *f, ig_backend *be) {
    ig_cpu_impl *impl = be->impl;
    *f = (ig_bf_frame){.be = be, .x = impl->bf16};
    return f->x->base;
}

float *ig_bf_take(ig_bf_frame *f, size_t n) {
    n = (n + 15) & ~(size_t)15; /* 64-byte aligned pieces */
    f->total += n;
    if (f->used + n <= f->x->cap) {
        float *p = f->x->arena + f->used;
        f->used += n;
        return p;
    }
    if (f->n_extra == IG_BF_EXTRA) {
        ig_backend_raise(f->be, IG_ERR_INTERNAL, "cpu bf16: too many tensors in one kernel call");
        f->failed = 1;
        return NULL;
    }
    float *p = ig_cpu_scratch(f->be, n * sizeof(float), "cpu bf16 kernel");
    if (!p) {
        f->failed = 1;
        return NULL;
    }
    f->extra[f->n_extra++] = p;
    return p;
}

/* src widened into scratch (NULL stays NULL) */
float *ig_bf_in(ig_bf_frame *f, const void *src, size_t n) {
    if (!src || f->failed) return NULL;
    float *p = ig_bf_take(f, n ? n : 1);
    if (p) ig_bf_convert(f->be, p, src, n, 0);
    return p;
}

/* scratch for an output the kernel overwrites whole (NULL stays NULL) */
float *ig_bf_out(ig_bf_frame *f, const void *dst, size_t n) {
    if (!dst || f->failed) return NULL;
    return ig_bf_take(f, n ? n : 1);
}

/* the fp32 result rounded into dst (either NULL: nothing) */
void ig_bf_put(ig_bf_frame *f, void *dst, const float *src, size_t n) {
    if (dst && src && !f->failed) ig_bf_convert(f->be, dst, src, n, 1);
}

/* Frees the call's extra blocks and grows the arena to the call's total. */
void ig_bf_end(ig_bf_frame *f) {
    for (int i = 0; i < f->n_extra; i++) ig_cpu_scratch_free(f->be, f->extra[i]);
    if (f->n_extra && !f->failed) {
        struct ig_cpu_bf16 *x = f->x;
        ig_cpu_scratch_free(f->be, x->arena);
        x->arena = ig_cpu_scratch(f->be, f->total * sizeof(float), "cpu bf16 arena");
        x->cap = x->arena ? f->total : 0;
    }
}

/* ---- the embedding: the rows of wte the tokens hit ------------------------------------------ */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The distinct tokens >= 0 in rows[0..*G) (ascending) and each position's row among them in
 * local[] (-1 for a token < 0); NULL after raising on the backend. */
static int32_t *hit_rows(ig_bf_frame *f, const int32_t *tokens, size_t N, int32_t **rows,
                         size_t *G) {
    int32_t *local = (int32_t *)ig_bf_take(f, N);
    int32_t *r = (int32_t *)ig_bf_take(f, N);
    uint64_t *order = ig_cpu_scratch(f->be, (N ? N : 1) * sizeof *order, "encoder (bf16)");
    if (!local || !r || !order) {
        f->failed = 1;
        ig_cpu_scratch_free(f->be, order);
        return NULL;
    }
    size_t kept = 0;
    for (size_t i = 0; i < N; i++) {
        local[i] = -1;
        if (tokens[i] >= 0) order[kept++] = (uint64_t)(uint32_t)tokens[i] << 32 | i;
    }
    qsort(order, kept, sizeof *order, cmp_u64);
    size_t g = 0;
    for (size_t i = 0; i < kept; i++) {
        int32_t tok = (int32_t)(order[i] >> 32);
        if (g == 0 || r[g - 1] != tok) r[g++] = tok;
        local[order[i] & 0xffffffffu] = (int32_t)(g - 1);
    }
    ig_cpu_scratch_free(f->be, order);
    *rows = r, *G = g;
    return local;
}

static void rows_widen(ig_bf_frame *f, float *dst, const void *src, const int32_t *rows, size_t G,
                       int C) {
    for (size_t g = 0; g < G; g++)
        ig_bf_convert(f->be, dst + g * C, (const uint16_t *)src + (size_t)rows[g] * C, (size_t)C,
                      0);
}

static void bf_encoder_forward(ig_backend *be, void *o, const int32_t *tokens, const void *wte,
                               const void *wpe, int B, int T, int C) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t N = (size_t)B * T, G = 0;
    int32_t *rows = NULL, *local = hit_rows(&f, tokens, N, &rows, &G);
    float *wte_f = ig_bf_take(&f, G * C), *wpe_f = ig_bf_in(&f, wpe, (size_t)T * C),
          *o_f = ig_bf_out(&f, o, N * C);
    if (IG_BF_READY(f)) {
        rows_widen(&f, wte_f, wte, rows, G, C);
        k->encoder_forward(be, o_f, local, wte_f, wpe_f, B, T, C);
        ig_bf_put(&f, o, o_f, N * C);
    }
    ig_bf_end(&f);
}

static void bf_encoder_backward(ig_backend *be, void *dwte, void *dwpe, const void *dout,
                                const int32_t *tokens, int B, int T, int C) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t N = (size_t)B * T, G = 0;
    int32_t *rows = NULL, *local = hit_rows(&f, tokens, N, &rows, &G);
    float *dwte_f = ig_bf_take(&f, G * C), *dwpe_f = ig_bf_in(&f, dwpe, (size_t)T * C);
    float *dout_f = ig_bf_in(&f, dout, N * C);
    if (IG_BF_READY(f)) {
        rows_widen(&f, dwte_f, dwte, rows, G, C);
        k->encoder_backward(be, dwte_f, dwpe_f, dout_f, local, B, T, C);
        for (size_t g = 0; g < G; g++)
            ig_bf_put(&f, (uint16_t *)dwte + (size_t)rows[g] * C, dwte_f + g * C, (size_t)C);
        ig_bf_put(&f, dwpe, dwpe_f, (size_t)T * C);
    }
    ig_bf_end(&f);
}

/* ---- normalisations -------------------------------------------------------------------------- */

static void bf_layernorm_forward(ig_backend *be, void *o, float *mean, float *rstd, const void *inp,
                                 const void *w, const void *b, int N, int C, float eps) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * C;
    float *inp_f = ig_bf_in(&f, inp, n), *w_f = ig_bf_in(&f, w, C), *b_f = ig_bf_in(&f, b, C),
          *o_f = ig_bf_out(&f, o, n);
    if (IG_BF_READY(f)) {
        k->layernorm_forward(be, o_f, mean, rstd, inp_f, w_f, b_f, N, C, eps);
        ig_bf_put(&f, o, o_f, n);
    }
    ig_bf_end(&f);
}

static void bf_add(ig_backend *be, void *o, const void *a, const void *b, size_t n) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    float *a_f = ig_bf_in(&f, a, n), *b_f = ig_bf_in(&f, b, n), *o_f = ig_bf_out(&f, o, n);
    if (IG_BF_READY(f)) {
        k->add(be, o_f, a_f, b_f, n);
        ig_bf_put(&f, o, o_f, n);
    }
    ig_bf_end(&f);
}

/* the residual rounded as stored, then the norm of it (the CUDA kernels' order) */
static void bf_residual_layernorm_forward(ig_backend *be, void *residual, void *o, float *mean,
                                          float *rstd, const void *a, const void *b_in,
                                          const void *w, const void *b, int N, int C, float eps) {
    bf_add(be, residual, a, b_in, (size_t)N * C);
    bf_layernorm_forward(be, o, mean, rstd, residual, w, b, N, C, eps);
}

static void bf_layernorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                                  const void *inp, const void *w, const float *mean,
                                  const float *rstd, int N, int C) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * C;
    float *dinp_f = ig_bf_in(&f, dinp, n), *dw_f = ig_bf_in(&f, dw, C), *db_f = ig_bf_in(&f, db, C);
    float *dout_f = ig_bf_in(&f, dout, n), *inp_f = ig_bf_in(&f, inp, n), *w_f = ig_bf_in(&f, w, C);
    if (IG_BF_READY(f)) {
        k->layernorm_backward(be, dinp_f, dw_f, db_f, dout_f, inp_f, w_f, mean, rstd, N, C);
        ig_bf_put(&f, dinp, dinp_f, n), ig_bf_put(&f, dw, dw_f, C), ig_bf_put(&f, db, db_f, C);
    }
    ig_bf_end(&f);
}

static void bf_rmsnorm_forward(ig_backend *be, void *o, float *rstd, const void *inp, const void *w,
                               int N, int C, float eps) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * C;
    float *inp_f = ig_bf_in(&f, inp, n), *w_f = ig_bf_in(&f, w, C), *o_f = ig_bf_out(&f, o, n);
    if (IG_BF_READY(f)) {
        k->rmsnorm_forward(be, o_f, rstd, inp_f, w_f, N, C, eps);
        ig_bf_put(&f, o, o_f, n);
    }
    ig_bf_end(&f);
}

static void bf_residual_rmsnorm_forward(ig_backend *be, void *residual, void *o, float *rstd,
                                        const void *a, const void *b, const void *w, int N, int C,
                                        float eps) {
    bf_add(be, residual, a, b, (size_t)N * C);
    bf_rmsnorm_forward(be, o, rstd, residual, w, N, C, eps);
}

static void bf_rmsnorm_backward(ig_backend *be, void *dinp, void *dw, const void *dout,
                                const void *inp, const void *w, const float *rstd, int N, int C) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * C;
    float *dinp_f = ig_bf_in(&f, dinp, n), *dw_f = ig_bf_in(&f, dw, C),
          *dout_f = ig_bf_in(&f, dout, n);
    float *inp_f = ig_bf_in(&f, inp, n), *w_f = ig_bf_in(&f, w, C);
    if (IG_BF_READY(f)) {
        k->rmsnorm_backward(be, dinp_f, dw_f, dout_f, inp_f, w_f, rstd, N, C);
        ig_bf_put(&f, dinp, dinp_f, n), ig_bf_put(&f, dw, dw_f, C);
    }
    ig_bf_end(&f);
}

static void bf_groupnorm_forward(ig_backend *be, void *o, float *mean, float *rstd, const void *inp,
                                 const void *w, const void *b, int N, int HW, int C, int G,
                                 float eps, int silu) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * HW * C;
    float *inp_f = ig_bf_in(&f, inp, n), *w_f = ig_bf_in(&f, w, C), *b_f = ig_bf_in(&f, b, C),
          *o_f = ig_bf_out(&f, o, n);
    if (IG_BF_READY(f)) {
        k->groupnorm_forward(be, o_f, mean, rstd, inp_f, w_f, b_f, N, HW, C, G, eps, silu);
        ig_bf_put(&f, o, o_f, n);
    }
    ig_bf_end(&f);
}

static void bf_groupnorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                                  const void *inp, const void *w, const void *b, const float *mean,
                                  const float *rstd, int N, int HW, int C, int G, int silu) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * HW * C;
    float *dinp_f = ig_bf_in(&f, dinp, n), *dw_f = ig_bf_in(&f, dw, C), *db_f = ig_bf_in(&f, db, C);
    float *dout_f = ig_bf_in(&f, dout, n), *inp_f = ig_bf_in(&f, inp, n), *w_f = ig_bf_in(&f, w, C);
    float *b_f = ig_bf_in(&f, b, C);
    if (IG_BF_READY(f)) {
        k->groupnorm_backward(be, dinp_f, dw_f, db_f, dout_f, inp_f, w_f, b_f, mean, rstd, N, HW, C,
                              G, silu);
        ig_bf_put(&f, dinp, dinp_f, n), ig_bf_put(&f, dw, dw_f, C), ig_bf_put(&f, db, db_f, C);
    }
    ig_bf_end(&f);
}

/* ---- matmul and convolution ------------------------------------------------------------------ */

static void bf_matmul_forward(ig_backend *be, void *o, const void *inp, const void *w,
                              ig_w_layout layout, const void *bias, int N, int C, int OC) {
    if (!be->opts.reference) {
        ig_cpu_bf16_matmul_forward(be, o, inp, w, layout, bias, N, C, OC);
        return;
    }
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t no = (size_t)N * OC;
    float *inp_f = ig_bf_in(&f, inp, (size_t)N * C), *w_f = ig_bf_in(&f, w, (size_t)C * OC);
    float *bias_f = ig_bf_in(&f, bias, OC), *o_f = ig_bf_out(&f, o, no);
    if (IG_BF_READY(f)) {
        k->matmul_forward(be, o_f, inp_f, w_f, layout, bias_f, N, C, OC);
        ig_bf_put(&f, o, o_f, no);
    }
    ig_bf_end(&f);
}

static void bf_matmul_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                               const void *inp, const void *w, ig_w_layout layout, int N, int C,
                               int OC) {
    if (!be->opts.reference) {
        ig_cpu_bf16_matmul_backward(be, dinp, dw, dbias, dout, inp, w, layout, N, C, OC);
        return;
    }
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t ni = (size_t)N * C, nw = (size_t)C * OC;
    float *dinp_f = ig_bf_out(&f, dinp, ni), *dw_f = ig_bf_in(&f, dw, nw),
          *dbias_f = ig_bf_in(&f, dbias, OC);
    float *dout_f = ig_bf_in(&f, dout, (size_t)N * OC), *inp_f = ig_bf_in(&f, inp, ni);
    float *w_f = dinp ? ig_bf_in(&f, w, nw) : NULL; /* w is read for dinp only */
    if (IG_BF_READY(f)) {
        k->matmul_backward(be, dinp_f, dw_f, dbias_f, dout_f, inp_f, w_f, layout, N, C, OC);
        ig_bf_put(&f, dinp, dinp_f, ni), ig_bf_put(&f, dw, dw_f, nw),
            ig_bf_put(&f, dbias, dbias_f, OC);
    }
    ig_bf_end(&f);
}

static void bf_conv2d_forward(ig_backend *be, void *o, const void *inp, const void *w,
                              const void *bias, const ig_conv2d_shape *s) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t ni = (size_t)s->N * s->H * s->W * s->C, nw = (size_t)s->OC * s->KH * s->KW * s->C;
    size_t no = (size_t)s->N * ig_conv2d_out_h(s) * ig_conv2d_out_w(s) * s->OC;
    float *inp_f = ig_bf_in(&f, inp, ni), *w_f = ig_bf_in(&f, w, nw),
          *bias_f = ig_bf_in(&f, bias, s->OC);
    float *o_f = ig_bf_out(&f, o, no);
    if (IG_BF_READY(f)) {
        k->conv2d_forward(be, o_f, inp_f, w_f, bias_f, s);
        ig_bf_put(&f, o, o_f, no);
    }
    ig_bf_end(&f);
}

static void bf_conv2d_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                               const void *inp, const void *w, const ig_conv2d_shape *s) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t ni = (size_t)s->N * s->H * s->W * s->C, nw = (size_t)s->OC * s->KH * s->KW * s->C;
    size_t no = (size_t)s->N * ig_conv2d_out_h(s) * ig_conv2d_out_w(s) * s->OC;
    float *dinp_f = ig_bf_out(&f, dinp, ni), *dw_f = ig_bf_in(&f, dw, nw),
          *dbias_f = ig_bf_in(&f, dbias, s->OC);
    float *dout_f = ig_bf_in(&f, dout, no), *inp_f = ig_bf_in(&f, inp, ni),
          *w_f = ig_bf_in(&f, w, nw);
    if (IG_BF_READY(f)) {
        k->conv2d_backward(be, dinp_f, dw_f, dbias_f, dout_f, inp_f, w_f, s);
        ig_bf_put(&f, dinp, dinp_f, ni), ig_bf_put(&f, dw, dw_f, nw),
            ig_bf_put(&f, dbias, dbias_f, s->OC);
    }
    ig_bf_end(&f);
}

/* ---- activations ----------------------------------------------------------------------------- */

static void bf_gelu_bias_forward(ig_backend *be, void *o, const void *inp, const void *bias, int N,
                                 int C) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * C;
    float *inp_f = ig_bf_in(&f, inp, n), *bias_f = ig_bf_in(&f, bias, C),
          *o_f = ig_bf_out(&f, o, n);
    if (IG_BF_READY(f)) {
        k->gelu_bias_forward(be, o_f, inp_f, bias_f, N, C);
        ig_bf_put(&f, o, o_f, n);
    }
    ig_bf_end(&f);
}

static void bf_gelu_bias_backward(ig_backend *be, void *dinp, void *dbias, const void *dout,
                                  const void *inp, const void *bias, int N, int C) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * C;
    float *dinp_f = ig_bf_out(&f, dinp, n), *dbias_f = ig_bf_in(&f, dbias, C),
          *dout_f = ig_bf_in(&f, dout, n);
    float *inp_f = ig_bf_in(&f, inp, n), *bias_f = ig_bf_in(&f, bias, C);
    if (IG_BF_READY(f)) {
        k->gelu_bias_backward(be, dinp_f, dbias_f, dout_f, inp_f, bias_f, N, C);
        ig_bf_put(&f, dinp, dinp_f, n), ig_bf_put(&f, dbias, dbias_f, C);
    }
    ig_bf_end(&f);
}

/* SwiGLU's and GeGLU's forwards and backwards: one shape */
typedef void (*glu_fwd)(ig_backend *, void *, const void *, const void *, int, int);
typedef void (*glu_bwd)(ig_backend *, void *, void *, const void *, const void *, const void *, int,
                        int);

static void glu_forward(ig_backend *be, glu_fwd fn, void *o, const void *gate, const void *up,
                        int N, int F) {
    ig_bf_frame f;
    ig_bf_begin(&f, be);
    size_t n = (size_t)N * F;
    float *g_f = ig_bf_in(&f, gate, n), *u_f = ig_bf_in(&f, up, n), *o_f = ig_bf_out(&f, o, n);
    if (IG_BF_READY(f)) {
        fn(be, o_f, g_f, u_f, N, F);
        ig_bf_put(&f, o, o_f, n);
    }
    ig_bf_end(&f);
}

static void glu_backward(ig_backend *be, glu_bwd fn, void *dgate, void *dup, const void *dout,
                         const void *gate, const void *up, int N, int F) {
    ig_bf_frame f;
    ig_bf_begin(&f, be);
    size_t n = (size_t)N * F;
    float *dout_f = ig_bf_in(&f, dout, n), *g_f = ig_bf_in(&f, gate, n), *u_f = ig_bf_in(&f, up, n);
    float *dg_f = ig_bf_out(&f, dgate, n), *du_f = ig_bf_out(&f, dup, n);
    if (IG_BF_READY(f)) {
        fn(be, dg_f, du_f, dout_f, g_f, u_f, N, F);
        ig_bf_put(&f, dgate, dg_f, n), ig_bf_put(&f, dup, du_f, n);
    }
    ig_bf_end(&f);
}

static void bf_swiglu_forward(ig_backend *be, void *o, const void *gate, const void *up, int N,
                              int F) {
    ig_cpu_impl *impl = be->impl;
    glu_forward(be, impl->bf16->base->swiglu_forward, o, gate, up, N, F);
}

static void bf_swiglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout,
                               const void *gate, const void *up, int N, int F) {
    ig_cpu_impl *impl = be->impl;
    glu_backward(be, impl->bf16->base->swiglu_backward, dgate, dup, dout, gate, up, N, F);
}

static void bf_geglu_forward(ig_backend *be, void *o, const void *gate, const void *up, int N,
                             int F) {
    ig_cpu_impl *impl = be->impl;
    glu_forward(be, impl->bf16->base->geglu_forward, o, gate, up, N, F);
}

static void bf_geglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout,
                              const void *gate, const void *up, int N, int F) {
    ig_cpu_impl *impl = be->impl;
    glu_backward(be, impl->bf16->base->geglu_backward, dgate, dup, dout, gate, up, N, F);
}

/* SiLU's and ReLU's forwards: out = fn(inp) over n */
typedef void (*unary_fn)(ig_backend *, void *, const void *, size_t);
static void unary(ig_backend *be, unary_fn fn, void *o, const void *inp, size_t n) {
    ig_bf_frame f;
    ig_bf_begin(&f, be);
    float *inp_f = ig_bf_in(&f, inp, n), *o_f = ig_bf_out(&f, o, n);
    if (IG_BF_READY(f)) {
        fn(be, o_f, inp_f, n);
        ig_bf_put(&f, o, o_f, n);
    }
    ig_bf_end(&f);
}

static void bf_silu_forward(ig_backend *be, void *o, const void *inp, size_t n) {
    ig_cpu_impl *impl = be->impl;
    unary(be, impl->bf16->base->silu_forward, o, inp, n);
}

static void bf_relu_forward(ig_backend *be, void *o, const void *inp, size_t n) {
    ig_cpu_impl *impl = be->impl;
    unary(be, impl->bf16->base->relu_forward, o, inp, n);
}

static void bf_silu_backward(ig_backend *be, void *dinp, const void *dout, const void *inp,
                             size_t n) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    float *dout_f = ig_bf_in(&f, dout, n), *inp_f = ig_bf_in(&f, inp, n),
          *dinp_f = ig_bf_out(&f, dinp, n);
    if (IG_BF_READY(f)) {
        k->silu_backward(be, dinp_f, dout_f, inp_f, n);
        ig_bf_put(&f, dinp, dinp_f, n);
    }
    ig_bf_end(&f);
}

static void bf_rope(ig_backend *be, int backward, void *qkv, int B, int T, int n_head,
                    int n_kv_head, int hs, int pos0, float theta) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)B * T * (n_head + 2 * n_kv_head) * hs;
    float *x = ig_bf_in(&f, qkv, n);
    if (IG_BF_READY(f)) {
        (backward ? k->rope_backward : k->rope_forward)(be, x, B, T, n_head, n_kv_head, hs, pos0,
                                                        theta);
        ig_bf_put(&f, qkv, x, n);
    }
    ig_bf_end(&f);
}

static void bf_rope_forward(ig_backend *be, void *qkv, int B, int T, int n_head, int n_kv_head,
                            int hs, int pos0, float theta) {
    bf_rope(be, 0, qkv, B, T, n_head, n_kv_head, hs, pos0, theta);
}

static void bf_rope_backward(ig_backend *be, void *dqkv, int B, int T, int n_head, int n_kv_head,
                             int hs, int pos0, float theta) {
    bf_rope(be, 1, dqkv, B, T, n_head, n_kv_head, hs, pos0, theta);
}

static void bf_upsample2x_forward(ig_backend *be, void *o, const void *inp, int N, int H, int W,
                                  int C) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * H * W * C;
    float *inp_f = ig_bf_in(&f, inp, n), *o_f = ig_bf_out(&f, o, 4 * n);
    if (IG_BF_READY(f)) {
        k->upsample2x_forward(be, o_f, inp_f, N, H, W, C);
        ig_bf_put(&f, o, o_f, 4 * n);
    }
    ig_bf_end(&f);
}

static void bf_upsample2x_backward(ig_backend *be, void *dinp, const void *dout, int N, int H,
                                   int W, int C) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * H * W * C;
    float *dout_f = ig_bf_in(&f, dout, 4 * n), *dinp_f = ig_bf_out(&f, dinp, n);
    if (IG_BF_READY(f)) {
        k->upsample2x_backward(be, dinp_f, dout_f, N, H, W, C);
        ig_bf_put(&f, dinp, dinp_f, n);
    }
    ig_bf_end(&f);
}

/* ---- losses ---------------------------------------------------------------------------------- */

/* The losses' logits a block of rows at a time: every row is a computation of its own, so blocks
 * give the bits of one call, with a block's scratch (about 16 MB of fp32) instead of all the
 * logits' ([N, V]: the largest tensor of a language model's step). */
static int ce_rows(int N, int width) {
    long r = (1L << 22) / (width > 0 ? width : 1);
    return r < 1 ? 1 : r > N ? N : (int)r;
}
#define CE_BLOCKS(N, width)                                                                        \
    for (int r0 = 0, R = ce_rows(N, width), n = N < R ? N : R; r0 < N;                             \
         r0 += R, n = N - r0 < R ? N - r0 : R)

static void bf_crossentropy(ig_backend *be, float *losses, void *logits, const int32_t *targets,
                            const float *dloss, int N, int V, int Vp) {
    CE_BLOCKS(N, Vp) {
        ig_bf_frame f;
        const ig_backend_ops *k = ig_bf_begin(&f, be);
        uint16_t *l = (uint16_t *)logits + (size_t)r0 * Vp;
        float *l_f = ig_bf_in(&f, l, (size_t)n * Vp);
        if (IG_BF_READY(f)) {
            k->crossentropy(be, losses + r0, l_f, targets + r0, dloss ? dloss + r0 : NULL, n, V,
                            Vp);
            if (dloss) ig_bf_put(&f, l, l_f, (size_t)n * Vp);
        }
        ig_bf_end(&f);
    }
}

static void bf_ce_max(ig_backend *be, float *rowmax, const void *logits, int N, int Vvalid,
                      int Vl) {
    CE_BLOCKS(N, Vl) {
        ig_bf_frame f;
        const ig_backend_ops *k = ig_bf_begin(&f, be);
        float *l_f = ig_bf_in(&f, (const uint16_t *)logits + (size_t)r0 * Vl, (size_t)n * Vl);
        if (IG_BF_READY(f)) k->ce_max(be, rowmax + r0, l_f, n, Vvalid, Vl);
        ig_bf_end(&f);
    }
}

static void bf_ce_sums(ig_backend *be, float *stats, const void *logits, const float *rowmax,
                       const int32_t *targets, int N, int Vvalid, int Vl) {
    CE_BLOCKS(N, Vl) {
        ig_bf_frame f;
        const ig_backend_ops *k = ig_bf_begin(&f, be);
        float *l_f = ig_bf_in(&f, (const uint16_t *)logits + (size_t)r0 * Vl, (size_t)n * Vl);
        if (IG_BF_READY(f))
            k->ce_sums(be, stats + 2 * (size_t)r0, l_f, rowmax + r0, targets + r0, n, Vvalid, Vl);
        ig_bf_end(&f);
    }
}

static void bf_ce_finish(ig_backend *be, float *losses, void *logits, const float *rowmax,
                         const float *stats, const int32_t *targets, const float *dloss, int N,
                         int Vvalid, int Vl) {
    CE_BLOCKS(N, Vl) {
        ig_bf_frame f;
        const ig_backend_ops *k = ig_bf_begin(&f, be);
        uint16_t *l = (uint16_t *)logits + (size_t)r0 * Vl;
        float *l_f = ig_bf_in(&f, l, (size_t)n * Vl);
        if (IG_BF_READY(f)) {
            k->ce_finish(be, losses + r0, l_f, rowmax + r0, stats + 2 * (size_t)r0, targets + r0,
                         dloss ? dloss + r0 : NULL, n, Vvalid, Vl);
            if (dloss) ig_bf_put(&f, l, l_f, (size_t)n * Vl);
        }
        ig_bf_end(&f);
    }
}

/* MSE's and L1's shape: losses per row, dpred overwritten */
typedef void (*err_fn)(ig_backend *, float *, void *, const void *, const void *, int, int, float);
static void row_error(ig_backend *be, err_fn fn, float *losses, void *dpred, const void *pred,
                      const void *target, int N, int K, float grad_scale) {
    ig_bf_frame f;
    ig_bf_begin(&f, be);
    size_t n = (size_t)N * K;
    float *p_f = ig_bf_in(&f, pred, n), *t_f = ig_bf_in(&f, target, n),
          *d_f = ig_bf_out(&f, dpred, n);
    if (IG_BF_READY(f)) {
        fn(be, losses, d_f, p_f, t_f, N, K, grad_scale);
        ig_bf_put(&f, dpred, d_f, n);
    }
    ig_bf_end(&f);
}

static void bf_mse(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
                   int N, int K, float grad_scale) {
    ig_cpu_impl *impl = be->impl;
    row_error(be, impl->bf16->base->mse, losses, dpred, pred, target, N, K, grad_scale);
}

static void bf_l1(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
                  int N, int K, float grad_scale) {
    ig_cpu_impl *impl = be->impl;
    row_error(be, impl->bf16->base->l1, losses, dpred, pred, target, N, K, grad_scale);
}

static void bf_posterior_forward(ig_backend *be, void *z, float *kl, const void *moments,
                                 const void *eps, int N, int C) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * C;
    float *m_f = ig_bf_in(&f, moments, 2 * n), *e_f = ig_bf_in(&f, eps, n),
          *z_f = ig_bf_out(&f, z, n);
    if (IG_BF_READY(f)) {
        k->posterior_forward(be, z_f, kl, m_f, e_f, N, C);
        ig_bf_put(&f, z, z_f, n);
    }
    ig_bf_end(&f);
}

static void bf_posterior_backward(ig_backend *be, void *dmoments, const void *dz,
                                  const void *moments, const void *eps, int N, int C,
                                  float kl_scale) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    size_t n = (size_t)N * C;
    float *dz_f = ig_bf_in(&f, dz, n), *m_f = ig_bf_in(&f, moments, 2 * n),
          *e_f = ig_bf_in(&f, eps, n);
    float *dm_f = ig_bf_out(&f, dmoments, 2 * n);
    if (IG_BF_READY(f)) {
        k->posterior_backward(be, dm_f, dz_f, m_f, e_f, N, C, kl_scale);
        ig_bf_put(&f, dmoments, dm_f, 2 * n);
    }
    ig_bf_end(&f);
}

/* ---- the optimizer and whole-buffer operations ------------------------------------------------
 */

/* The parameters are written from the fp32 master (read from themselves only without one). */
static void bf_adamw(ig_backend *be, void *params, float *master, const void *grads, float *m,
                     float *v, size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, float grad_scale, int step) {
    if (!be->opts.reference) { /* the fast kernel reads and writes bf16 itself: no copies */
        ig_cpu_bf16_adamw(be, params, master, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
                          grad_scale, step);
        return;
    }
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    float *p_f = master ? ig_bf_out(&f, params, n) : ig_bf_in(&f, params, n),
          *g_f = ig_bf_in(&f, grads, n);
    if (IG_BF_READY(f)) {
        k->adamw(be, p_f, master, g_f, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
                 step);
        ig_bf_put(&f, params, p_f, n);
    }
    ig_bf_end(&f);
}

static double bf_sum_squares(ig_backend *be, const void *x, size_t n) {
    if (!be->opts.reference) return ig_cpu_bf16_sum_squares(be, x, n);
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    float *x_f = ig_bf_in(&f, x, n);
    double s = IG_BF_READY(f) ? k->sum_squares(be, x_f, n) : 0.0;
    ig_bf_end(&f);
    return s;
}

static void bf_scale(ig_backend *be, void *x, size_t n, float s) {
    if (!be->opts.reference) {
        ig_cpu_bf16_scale(be, x, n, s);
        return;
    }
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    float *x_f = ig_bf_in(&f, x, n);
    if (IG_BF_READY(f)) {
        k->scale(be, x_f, n, s);
        ig_bf_put(&f, x, x_f, n);
    }
    ig_bf_end(&f);
}

static void bf_ema(ig_backend *be, float *ema, const float *master, const void *params, size_t n,
                   float decay) {
    ig_bf_frame f;
    const ig_backend_ops *k = ig_bf_begin(&f, be);
    float *p_f = master ? NULL : ig_bf_in(&f, params, n);
    if (IG_BF_READY(f)) k->ema(be, ema, master, master ? params : p_f, n, decay);
    ig_bf_end(&f);
}

/* ---- the table --------------------------------------------------------------------------------
 */

#define BF16_KERNEL_OPS                                                                            \
    .encoder_forward = bf_encoder_forward, .encoder_backward = bf_encoder_backward,                \
    .layernorm_forward = bf_layernorm_forward,                                                     \
    .residual_layernorm_forward = bf_residual_layernorm_forward,                                   \
    .layernorm_backward = bf_layernorm_backward, .rmsnorm_forward = bf_rmsnorm_forward,            \
    .residual_rmsnorm_forward = bf_residual_rmsnorm_forward,                                       \
    .rmsnorm_backward = bf_rmsnorm_backward, .matmul_forward = bf_matmul_forward,                  \
    .matmul_backward = bf_matmul_backward, .gelu_bias_forward = bf_gelu_bias_forward,              \
    .gelu_bias_backward = bf_gelu_bias_backward, .swiglu_forward = bf_swiglu_forward,              \
    .swiglu_backward = bf_swiglu_backward, .rope_forward = bf_rope_forward,                        \
    .rope_backward = bf_rope_backward, .crossentropy = bf_crossentropy, .ce_max = bf_ce_max,       \
    .ce_sums = bf_ce_sums, .ce_finish = bf_ce_finish, .silu_forward = bf_silu_forward,             \
    .silu_backward = bf_silu_backward, .relu_forward = bf_relu_forward, .mse = bf_mse,             \
    .add = bf_add, .adamw = bf_adamw, .sum_squares = bf_sum_squares, .scale = bf_scale,            \
    .ema = bf_ema, .conv2d_forward = bf_conv2d_forward, .conv2d_backward = bf_conv2d_backward,     \
    .groupnorm_forward = bf_groupnorm_forward, .groupnorm_backward = bf_groupnorm_backward,        \
    .upsample2x_forward = bf_upsample2x_forward, .upsample2x_backward = bf_upsample2x_backward,    \
    .geglu_forward = bf_geglu_forward, .geglu_backward = bf_geglu_backward, .l1 = bf_l1,           \
    .posterior_forward = bf_posterior_forward, .posterior_backward = bf_posterior_backward

/* act tensors are bf16: host fp32 is rounded on the way in and widened on the way out */
static ig_status bf_upload_f32(ig_backend *be, void *dst, const float *src, size_t n, ig_err *err) {
    (void)err;
    ig_bf_convert(be, dst, src, n, 1);
    return IG_OK;
}

static ig_status bf_download_f32(ig_backend *be, float *dst, const void *src, size_t n,
                                 ig_err *err) {
    (void)err;
    ig_bf_convert(be, dst, src, n, 0);
    return IG_OK;
}

ig_status ig_cpu_bf16_setup(ig_backend *be, const ig_backend_ops *base, ig_err *err) {
    ig_cpu_impl *impl = be->impl;
    struct ig_cpu_bf16 *x = ig_calloc(be->ctx, 1, sizeof *x);
    if (!x) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the CPU backend");
    static const ig_backend_ops kernels = {BF16_KERNEL_OPS};
    x->ops = kernels; /* every kernel entry is ours; the memory entries are the base's */
    ig_cpu_bf16_attention_ops(&x->ops);
    x->ops.destroy = base->destroy, x->ops.alloc = base->alloc, x->ops.release = base->release;
    x->ops.upload = base->upload, x->ops.download = base->download, x->ops.zero = base->zero;
    x->ops.copy = base->copy, x->ops.copy2d = base->copy2d, x->ops.sync = base->sync;
    x->ops.fence = base->fence, x->ops.mem_info = base->mem_info;
    x->ops.upload_f32 = bf_upload_f32, x->ops.download_f32 = bf_download_f32;
    x->base = base;
    impl->bf16 = x;
    be->ops = &x->ops;
    return IG_OK;
}

void ig_cpu_bf16_free(ig_backend *be) {
    ig_cpu_impl *impl = be->impl;
    if (!impl || !impl->bf16) return;
    if (impl->bf16->arena) ig_cpu_scratch_free(be, impl->bf16->arena);
    ig_free(be->ctx, impl->bf16);
    impl->bf16 = NULL;
}
