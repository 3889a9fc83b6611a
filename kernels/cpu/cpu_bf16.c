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

static void convert(ig_backend *be, void *dst, const void *src, size_t n, int narrow) {
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

/* A kernel call's widened tensors: carved from the arena; past its end, from blocks of their own
 * (freed at the end of the call, and the arena grown to the call's total for the next). */
#define FRAME_EXTRA 16
typedef struct frame {
    ig_backend *be;
    struct ig_cpu_bf16 *x;
    size_t used, total;
    void *extra[FRAME_EXTRA];
    int n_extra, failed;
} frame;

static const ig_backend_ops *begin(frame *f, ig_backend *be) {
    ig_cpu_impl *impl = be->impl;
    *f = (frame){.be = be, .x = impl->bf16};
    return f->x->base;
}

static float *take(frame *f, size_t n) {
    n = (n + 15) & ~(size_t)15; /* 64-byte aligned pieces */
    f->total += n;
    if (f->used + n <= f->x->cap) {
        float *p = f->x->arena + f->used;
        f->used += n;
        return p;
    }
    if (f->n_extra == FRAME_EXTRA) {
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
static float *in(frame *f, const void *src, size_t n) {
    if (!src || f->failed) return NULL;
    float *p = take(f, n ? n : 1);
    if (p) convert(f->be, p, src, n, 0);
    return p;
}

/* scratch for an output the kernel overwrites whole (NULL stays NULL) */
static float *out(frame *f, const void *dst, size_t n) {
    if (!dst || f->failed) return NULL;
    return take(f, n ? n : 1);
}

/* the fp32 result rounded into dst (either NULL: nothing) */
static void put(frame *f, void *dst, const float *src, size_t n) {
    if (dst && src && !f->failed) convert(f->be, dst, src, n, 1);
}

/* Frees the call's extra blocks and grows the arena to the call's total. */
static void end(frame *f) {
    for (int i = 0; i < f->n_extra; i++) ig_cpu_scratch_free(f->be, f->extra[i]);
    if (f->n_extra && !f->failed) {
        struct ig_cpu_bf16 *x = f->x;
        ig_cpu_scratch_free(f->be, x->arena);
        x->arena = ig_cpu_scratch(f->be, f->total * sizeof(float), "cpu bf16 arena");
        x->cap = x->arena ? f->total : 0;
    }
}

/* 1 when the call may go on: every tensor widened */
#define READY(f) (!(f).failed)

/* ---- the embedding: the rows of wte the tokens hit ------------------------------------------ */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The distinct tokens >= 0 in rows[0..*G) (ascending) and each position's row among them in
 * local[] (-1 for a token < 0); NULL after raising on the backend. */
static int32_t *hit_rows(frame *f, const int32_t *tokens, size_t N, int32_t **rows, size_t *G) {
    int32_t *local = (int32_t *)take(f, N);
    int32_t *r = (int32_t *)take(f, N);
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

static void rows_widen(frame *f, float *dst, const void *src, const int32_t *rows, size_t G,
                       int C) {
    for (size_t g = 0; g < G; g++)
        convert(f->be, dst + g * C, (const uint16_t *)src + (size_t)rows[g] * C, (size_t)C, 0);
}

static void bf_encoder_forward(ig_backend *be, void *o, const int32_t *tokens, const void *wte,
                               const void *wpe, int B, int T, int C) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t N = (size_t)B * T, G = 0;
    int32_t *rows = NULL, *local = hit_rows(&f, tokens, N, &rows, &G);
    float *wte_f = take(&f, G * C), *wpe_f = in(&f, wpe, (size_t)T * C), *o_f = out(&f, o, N * C);
    if (READY(f)) {
        rows_widen(&f, wte_f, wte, rows, G, C);
        k->encoder_forward(be, o_f, local, wte_f, wpe_f, B, T, C);
        put(&f, o, o_f, N * C);
    }
    end(&f);
}

static void bf_encoder_backward(ig_backend *be, void *dwte, void *dwpe, const void *dout,
                                const int32_t *tokens, int B, int T, int C) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t N = (size_t)B * T, G = 0;
    int32_t *rows = NULL, *local = hit_rows(&f, tokens, N, &rows, &G);
    float *dwte_f = take(&f, G * C), *dwpe_f = in(&f, dwpe, (size_t)T * C);
    float *dout_f = in(&f, dout, N * C);
    if (READY(f)) {
        rows_widen(&f, dwte_f, dwte, rows, G, C);
        k->encoder_backward(be, dwte_f, dwpe_f, dout_f, local, B, T, C);
        for (size_t g = 0; g < G; g++)
            put(&f, (uint16_t *)dwte + (size_t)rows[g] * C, dwte_f + g * C, (size_t)C);
        put(&f, dwpe, dwpe_f, (size_t)T * C);
    }
    end(&f);
}

/* ---- normalisations -------------------------------------------------------------------------- */

static void bf_layernorm_forward(ig_backend *be, void *o, float *mean, float *rstd, const void *inp,
                                 const void *w, const void *b, int N, int C, float eps) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * C;
    float *inp_f = in(&f, inp, n), *w_f = in(&f, w, C), *b_f = in(&f, b, C), *o_f = out(&f, o, n);
    if (READY(f)) {
        k->layernorm_forward(be, o_f, mean, rstd, inp_f, w_f, b_f, N, C, eps);
        put(&f, o, o_f, n);
    }
    end(&f);
}

static void bf_add(ig_backend *be, void *o, const void *a, const void *b, size_t n) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    float *a_f = in(&f, a, n), *b_f = in(&f, b, n), *o_f = out(&f, o, n);
    if (READY(f)) {
        k->add(be, o_f, a_f, b_f, n);
        put(&f, o, o_f, n);
    }
    end(&f);
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
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * C;
    float *dinp_f = in(&f, dinp, n), *dw_f = in(&f, dw, C), *db_f = in(&f, db, C);
    float *dout_f = in(&f, dout, n), *inp_f = in(&f, inp, n), *w_f = in(&f, w, C);
    if (READY(f)) {
        k->layernorm_backward(be, dinp_f, dw_f, db_f, dout_f, inp_f, w_f, mean, rstd, N, C);
        put(&f, dinp, dinp_f, n), put(&f, dw, dw_f, C), put(&f, db, db_f, C);
    }
    end(&f);
}

static void bf_rmsnorm_forward(ig_backend *be, void *o, float *rstd, const void *inp, const void *w,
                               int N, int C, float eps) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * C;
    float *inp_f = in(&f, inp, n), *w_f = in(&f, w, C), *o_f = out(&f, o, n);
    if (READY(f)) {
        k->rmsnorm_forward(be, o_f, rstd, inp_f, w_f, N, C, eps);
        put(&f, o, o_f, n);
    }
    end(&f);
}

static void bf_residual_rmsnorm_forward(ig_backend *be, void *residual, void *o, float *rstd,
                                        const void *a, const void *b, const void *w, int N, int C,
                                        float eps) {
    bf_add(be, residual, a, b, (size_t)N * C);
    bf_rmsnorm_forward(be, o, rstd, residual, w, N, C, eps);
}

static void bf_rmsnorm_backward(ig_backend *be, void *dinp, void *dw, const void *dout,
                                const void *inp, const void *w, const float *rstd, int N, int C) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * C;
    float *dinp_f = in(&f, dinp, n), *dw_f = in(&f, dw, C), *dout_f = in(&f, dout, n);
    float *inp_f = in(&f, inp, n), *w_f = in(&f, w, C);
    if (READY(f)) {
        k->rmsnorm_backward(be, dinp_f, dw_f, dout_f, inp_f, w_f, rstd, N, C);
        put(&f, dinp, dinp_f, n), put(&f, dw, dw_f, C);
    }
    end(&f);
}

static void bf_groupnorm_forward(ig_backend *be, void *o, float *mean, float *rstd, const void *inp,
                                 const void *w, const void *b, int N, int HW, int C, int G,
                                 float eps, int silu) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * HW * C;
    float *inp_f = in(&f, inp, n), *w_f = in(&f, w, C), *b_f = in(&f, b, C), *o_f = out(&f, o, n);
    if (READY(f)) {
        k->groupnorm_forward(be, o_f, mean, rstd, inp_f, w_f, b_f, N, HW, C, G, eps, silu);
        put(&f, o, o_f, n);
    }
    end(&f);
}

static void bf_groupnorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                                  const void *inp, const void *w, const void *b, const float *mean,
                                  const float *rstd, int N, int HW, int C, int G, int silu) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * HW * C;
    float *dinp_f = in(&f, dinp, n), *dw_f = in(&f, dw, C), *db_f = in(&f, db, C);
    float *dout_f = in(&f, dout, n), *inp_f = in(&f, inp, n), *w_f = in(&f, w, C);
    float *b_f = in(&f, b, C);
    if (READY(f)) {
        k->groupnorm_backward(be, dinp_f, dw_f, db_f, dout_f, inp_f, w_f, b_f, mean, rstd, N, HW, C,
                              G, silu);
        put(&f, dinp, dinp_f, n), put(&f, dw, dw_f, C), put(&f, db, db_f, C);
    }
    end(&f);
}

/* ---- matmul and convolution ------------------------------------------------------------------ */

static void bf_matmul_forward(ig_backend *be, void *o, const void *inp, const void *w,
                              ig_w_layout layout, const void *bias, int N, int C, int OC) {
    if (!be->opts.reference) {
        ig_cpu_bf16_matmul_forward(be, o, inp, w, layout, bias, N, C, OC);
        return;
    }
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t no = (size_t)N * OC;
    float *inp_f = in(&f, inp, (size_t)N * C), *w_f = in(&f, w, (size_t)C * OC);
    float *bias_f = in(&f, bias, OC), *o_f = out(&f, o, no);
    if (READY(f)) {
        k->matmul_forward(be, o_f, inp_f, w_f, layout, bias_f, N, C, OC);
        put(&f, o, o_f, no);
    }
    end(&f);
}

static void bf_matmul_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                               const void *inp, const void *w, ig_w_layout layout, int N, int C,
                               int OC) {
    if (!be->opts.reference) {
        ig_cpu_bf16_matmul_backward(be, dinp, dw, dbias, dout, inp, w, layout, N, C, OC);
        return;
    }
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t ni = (size_t)N * C, nw = (size_t)C * OC;
    float *dinp_f = out(&f, dinp, ni), *dw_f = in(&f, dw, nw), *dbias_f = in(&f, dbias, OC);
    float *dout_f = in(&f, dout, (size_t)N * OC), *inp_f = in(&f, inp, ni);
    float *w_f = dinp ? in(&f, w, nw) : NULL; /* w is read for dinp only */
    if (READY(f)) {
        k->matmul_backward(be, dinp_f, dw_f, dbias_f, dout_f, inp_f, w_f, layout, N, C, OC);
        put(&f, dinp, dinp_f, ni), put(&f, dw, dw_f, nw), put(&f, dbias, dbias_f, OC);
    }
    end(&f);
}

static void bf_conv2d_forward(ig_backend *be, void *o, const void *inp, const void *w,
                              const void *bias, const ig_conv2d_shape *s) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t ni = (size_t)s->N * s->H * s->W * s->C, nw = (size_t)s->OC * s->KH * s->KW * s->C;
    size_t no = (size_t)s->N * ig_conv2d_out_h(s) * ig_conv2d_out_w(s) * s->OC;
    float *inp_f = in(&f, inp, ni), *w_f = in(&f, w, nw), *bias_f = in(&f, bias, s->OC);
    float *o_f = out(&f, o, no);
    if (READY(f)) {
        k->conv2d_forward(be, o_f, inp_f, w_f, bias_f, s);
        put(&f, o, o_f, no);
    }
    end(&f);
}

static void bf_conv2d_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                               const void *inp, const void *w, const ig_conv2d_shape *s) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t ni = (size_t)s->N * s->H * s->W * s->C, nw = (size_t)s->OC * s->KH * s->KW * s->C;
    size_t no = (size_t)s->N * ig_conv2d_out_h(s) * ig_conv2d_out_w(s) * s->OC;
    float *dinp_f = out(&f, dinp, ni), *dw_f = in(&f, dw, nw), *dbias_f = in(&f, dbias, s->OC);
    float *dout_f = in(&f, dout, no), *inp_f = in(&f, inp, ni), *w_f = in(&f, w, nw);
    if (READY(f)) {
        k->conv2d_backward(be, dinp_f, dw_f, dbias_f, dout_f, inp_f, w_f, s);
        put(&f, dinp, dinp_f, ni), put(&f, dw, dw_f, nw), put(&f, dbias, dbias_f, s->OC);
    }
    end(&f);
}

/* ---- activations ----------------------------------------------------------------------------- */

static void bf_gelu_bias_forward(ig_backend *be, void *o, const void *inp, const void *bias, int N,
                                 int C) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * C;
    float *inp_f = in(&f, inp, n), *bias_f = in(&f, bias, C), *o_f = out(&f, o, n);
    if (READY(f)) {
        k->gelu_bias_forward(be, o_f, inp_f, bias_f, N, C);
        put(&f, o, o_f, n);
    }
    end(&f);
}

static void bf_gelu_bias_backward(ig_backend *be, void *dinp, void *dbias, const void *dout,
                                  const void *inp, const void *bias, int N, int C) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * C;
    float *dinp_f = out(&f, dinp, n), *dbias_f = in(&f, dbias, C), *dout_f = in(&f, dout, n);
    float *inp_f = in(&f, inp, n), *bias_f = in(&f, bias, C);
    if (READY(f)) {
        k->gelu_bias_backward(be, dinp_f, dbias_f, dout_f, inp_f, bias_f, N, C);
        put(&f, dinp, dinp_f, n), put(&f, dbias, dbias_f, C);
    }
    end(&f);
}

/* SwiGLU's and GeGLU's forwards and backwards: one shape */
typedef void (*glu_fwd)(ig_backend *, void *, const void *, const void *, int, int);
typedef void (*glu_bwd)(ig_backend *, void *, void *, const void *, const void *, const void *, int,
                        int);

static void glu_forward(ig_backend *be, glu_fwd fn, void *o, const void *gate, const void *up,
                        int N, int F) {
    frame f;
    begin(&f, be);
    size_t n = (size_t)N * F;
    float *g_f = in(&f, gate, n), *u_f = in(&f, up, n), *o_f = out(&f, o, n);
    if (READY(f)) {
        fn(be, o_f, g_f, u_f, N, F);
        put(&f, o, o_f, n);
    }
    end(&f);
}

static void glu_backward(ig_backend *be, glu_bwd fn, void *dgate, void *dup, const void *dout,
                         const void *gate, const void *up, int N, int F) {
    frame f;
    begin(&f, be);
    size_t n = (size_t)N * F;
    float *dout_f = in(&f, dout, n), *g_f = in(&f, gate, n), *u_f = in(&f, up, n);
    float *dg_f = out(&f, dgate, n), *du_f = out(&f, dup, n);
    if (READY(f)) {
        fn(be, dg_f, du_f, dout_f, g_f, u_f, N, F);
        put(&f, dgate, dg_f, n), put(&f, dup, du_f, n);
    }
    end(&f);
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
    frame f;
    begin(&f, be);
    float *inp_f = in(&f, inp, n), *o_f = out(&f, o, n);
    if (READY(f)) {
        fn(be, o_f, inp_f, n);
        put(&f, o, o_f, n);
    }
    end(&f);
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
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    float *dout_f = in(&f, dout, n), *inp_f = in(&f, inp, n), *dinp_f = out(&f, dinp, n);
    if (READY(f)) {
        k->silu_backward(be, dinp_f, dout_f, inp_f, n);
        put(&f, dinp, dinp_f, n);
    }
    end(&f);
}

static void bf_rope(ig_backend *be, int backward, void *qkv, int B, int T, int n_head,
                    int n_kv_head, int hs, int pos0, float theta) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)B * T * (n_head + 2 * n_kv_head) * hs;
    float *x = in(&f, qkv, n);
    if (READY(f)) {
        (backward ? k->rope_backward : k->rope_forward)(be, x, B, T, n_head, n_kv_head, hs, pos0,
                                                        theta);
        put(&f, qkv, x, n);
    }
    end(&f);
}

static void bf_rope_forward(ig_backend *be, void *qkv, int B, int T, int n_head, int n_kv_head,
                            int hs, int pos0, float theta) {
    bf_rope(be, 0, qkv, B, T, n_head, n_kv_head, hs, pos0, theta);
}

static void bf_rope_backward(ig_backend *be, void *dqkv, int B, int T, int n_head, int n_kv_head,
                             int hs, int pos0, float theta) {
    bf_rope(be, 1, dqkv, B, T, n_head, n_kv_head, hs, pos0, theta);
}

/* ---- attention ------------------------------------------------------------------------------- */

static size_t qkv_elems(const ig_attention_shape *s) {
    return (size_t)s->B * s->T * (s->n_head + 2 * s->n_kv_head) * s->head_size;
}
static size_t heads_elems(const ig_attention_shape *s) {
    return (size_t)s->B * s->T * s->n_head * s->head_size;
}

static void bf_attention_forward(ig_backend *be, void *o, float *lse, const void *qkv,
                                 const int32_t *doc, const ig_attention_shape *s) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    float *qkv_f = in(&f, qkv, qkv_elems(s)), *o_f = out(&f, o, heads_elems(s));
    if (READY(f)) {
        k->attention_forward(be, o_f, lse, qkv_f, doc, s);
        put(&f, o, o_f, heads_elems(s));
    }
    end(&f);
}

static void bf_attention_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                                  const void *o, const float *lse, const int32_t *doc,
                                  const ig_attention_shape *s) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t nq = qkv_elems(s), nh = heads_elems(s);
    float *dout_f = in(&f, dout, nh), *qkv_f = in(&f, qkv, nq), *o_f = in(&f, o, nh);
    float *dqkv_f = out(&f, dqkv, nq);
    if (READY(f)) {
        k->attention_backward(be, dqkv_f, dout_f, qkv_f, o_f, lse, doc, s);
        put(&f, dqkv, dqkv_f, nq);
    }
    end(&f);
}

static void bf_attention_cached(ig_backend *be, void *o, const void *q, const void *kc,
                                const void *vc, int pos0, int Tmax, const ig_attention_shape *s) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t nh = heads_elems(s), nkv = (size_t)s->B * Tmax * s->n_kv_head * s->head_size;
    float *q_f = in(&f, q, nh), *k_f = in(&f, kc, nkv), *v_f = in(&f, vc, nkv);
    float *o_f = out(&f, o, nh);
    if (READY(f)) {
        k->attention_cached(be, o_f, q_f, k_f, v_f, pos0, Tmax, s);
        put(&f, o, o_f, nh);
    }
    end(&f);
}

static void bf_attention_bias_forward(ig_backend *be, void *o, float *lse, const void *qkv,
                                      const void *bias, const int32_t *klen,
                                      const ig_attention_shape *s) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    float *qkv_f = in(&f, qkv, qkv_elems(s)), *o_f = out(&f, o, heads_elems(s));
    float *bias_f = in(&f, bias, (size_t)s->n_head * s->T * s->T);
    if (READY(f)) {
        k->attention_bias_forward(be, o_f, lse, qkv_f, bias_f, klen, s);
        put(&f, o, o_f, heads_elems(s));
    }
    end(&f);
}

static void bf_t5_position_bias(ig_backend *be, void *bias, const void *table, int T, int n_head,
                                int num_buckets, int max_distance, int bidirectional) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t nb = (size_t)n_head * T * T;
    float *t_f = in(&f, table, (size_t)num_buckets * n_head), *b_f = out(&f, bias, nb);
    if (READY(f)) {
        k->t5_position_bias(be, b_f, t_f, T, n_head, num_buckets, max_distance, bidirectional);
        put(&f, bias, b_f, nb);
    }
    end(&f);
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
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t C = (size_t)n_head * hs, nq = (size_t)N * C, row = (size_t)Tk * 2 * C;
    float *q_f = in(&f, q, nq), *o_f = out(&f, o, nq);
    float *kv_f = in(&f, (const uint16_t *)kv + (size_t)b0 * row, (size_t)nb * row);
    if (READY(f)) {
        k->cross_attention_forward(be, o_f, lse, q_f, kv_f, klen + b0, N, row0 - b0 * rps, rps, Tk,
                                   n_head, hs);
        put(&f, o, o_f, nq);
    }
    end(&f);
}

static void bf_cross_attention_backward(ig_backend *be, void *dq, void *dkv, const void *dout,
                                        const void *q, const void *kv, const void *o,
                                        const float *lse, const int32_t *klen, int N, int row0,
                                        int rps, int Tk, int n_head, int hs) {
    if (N <= 0) return;
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t C = (size_t)n_head * hs, nq = (size_t)N * C, row = (size_t)Tk * 2 * C;
    float *dout_f = in(&f, dout, nq), *q_f = in(&f, q, nq), *o_f = in(&f, o, nq);
    uint16_t *dkv_at = (uint16_t *)dkv + (size_t)b0 * row;
    float *kv_f = in(&f, (const uint16_t *)kv + (size_t)b0 * row, (size_t)nb * row);
    float *dkv_f = in(&f, dkv_at, (size_t)nb * row), *dq_f = out(&f, dq, nq);
    if (READY(f)) {
        k->cross_attention_backward(be, dq_f, dkv_f, dout_f, q_f, kv_f, o_f, lse, klen + b0, N,
                                    row0 - b0 * rps, rps, Tk, n_head, hs);
        put(&f, dq, dq_f, nq), put(&f, dkv_at, dkv_f, (size_t)nb * row);
    }
    end(&f);
}

/* ---- DiT's modulation and gates: per-sample vectors [B, ld] from sample b0 on ---------------- */

/* The per-sample vectors are C elements every ld of one [B, ld] matrix (mod's six, and their
 * gradients': dshift and dscale are two columns of blocks of one matrix, so their rows interleave).
 * Each is widened into a matrix of its own of nb rows of C, which the fp32 kernel is given with ld
 * C, and an output is rounded back into its own C elements of each row only. */
static float *vin(frame *f, const void *p, int b0, int nb, int ld, int C) {
    if (!p || f->failed) return NULL;
    float *v = take(f, (size_t)nb * C);
    for (int b = 0; v && b < nb; b++)
        convert(f->be, v + (size_t)b * C, (const uint16_t *)p + (size_t)(b0 + b) * ld, (size_t)C,
                0);
    return v;
}

static void vput(frame *f, void *p, const float *v, int b0, int nb, int ld, int C) {
    for (int b = 0; p && v && !f->failed && b < nb; b++)
        convert(f->be, (uint16_t *)p + (size_t)(b0 + b) * ld, v + (size_t)b * C, (size_t)C, 1);
}

static void bf_layernorm_modulate_forward(ig_backend *be, void *o, float *mean, float *rstd,
                                          const void *inp, const void *shift, const void *scale,
                                          int ld, int N, int C, int row0, int rps, float eps) {
    if (N <= 0) return;
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t n = (size_t)N * C;
    float *inp_f = in(&f, inp, n), *o_f = out(&f, o, n);
    float *sh_f = vin(&f, shift, b0, nb, ld, C), *sc_f = vin(&f, scale, b0, nb, ld, C);
    if (READY(f)) {
        k->layernorm_modulate_forward(be, o_f, mean, rstd, inp_f, sh_f, sc_f, C, N, C,
                                      row0 - b0 * rps, rps, eps);
        put(&f, o, o_f, n);
    }
    end(&f);
}

static void bf_layernorm_modulate_backward(ig_backend *be, void *dinp, void *dshift, void *dscale,
                                           const void *dout, const void *inp, const void *scale,
                                           int ld, const float *mean, const float *rstd, int N,
                                           int C, int row0, int rps) {
    if (N <= 0) return;
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t n = (size_t)N * C;
    float *dinp_f = in(&f, dinp, n), *dout_f = in(&f, dout, n), *inp_f = in(&f, inp, n);
    float *sc_f = vin(&f, scale, b0, nb, ld, C);
    float *dsh_f = vin(&f, dshift, b0, nb, ld, C), *dsc_f = vin(&f, dscale, b0, nb, ld, C);
    if (READY(f)) {
        k->layernorm_modulate_backward(be, dinp_f, dsh_f, dsc_f, dout_f, inp_f, sc_f, C, mean, rstd,
                                       N, C, row0 - b0 * rps, rps);
        put(&f, dinp, dinp_f, n);
        vput(&f, dshift, dsh_f, b0, nb, ld, C), vput(&f, dscale, dsc_f, b0, nb, ld, C);
    }
    end(&f);
}

static void bf_gate_residual_forward(ig_backend *be, void *o, const void *res, const void *x,
                                     const void *gate, int ld, int N, int C, int row0, int rps) {
    if (N <= 0) return;
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t n = (size_t)N * C;
    float *res_f = in(&f, res, n), *x_f = in(&f, x, n), *o_f = out(&f, o, n);
    float *g_f = vin(&f, gate, b0, nb, ld, C);
    if (READY(f)) {
        k->gate_residual_forward(be, o_f, res_f, x_f, g_f, C, N, C, row0 - b0 * rps, rps);
        put(&f, o, o_f, n);
    }
    end(&f);
}

static void bf_gate_residual_backward(ig_backend *be, void *dx, void *dgate, const void *dout,
                                      const void *x, const void *gate, int ld, int N, int C,
                                      int row0, int rps) {
    if (N <= 0) return;
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    int b0, nb = samples_of(N, row0, rps, &b0);
    size_t n = (size_t)N * C;
    float *dout_f = in(&f, dout, n), *x_f = in(&f, x, n), *dx_f = out(&f, dx, n);
    float *g_f = vin(&f, gate, b0, nb, ld, C), *dg_f = vin(&f, dgate, b0, nb, ld, C);
    if (READY(f)) {
        k->gate_residual_backward(be, dx_f, dg_f, dout_f, x_f, g_f, C, N, C, row0 - b0 * rps, rps);
        put(&f, dx, dx_f, n), vput(&f, dgate, dg_f, b0, nb, ld, C);
    }
    end(&f);
}

static void bf_upsample2x_forward(ig_backend *be, void *o, const void *inp, int N, int H, int W,
                                  int C) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * H * W * C;
    float *inp_f = in(&f, inp, n), *o_f = out(&f, o, 4 * n);
    if (READY(f)) {
        k->upsample2x_forward(be, o_f, inp_f, N, H, W, C);
        put(&f, o, o_f, 4 * n);
    }
    end(&f);
}

static void bf_upsample2x_backward(ig_backend *be, void *dinp, const void *dout, int N, int H,
                                   int W, int C) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * H * W * C;
    float *dout_f = in(&f, dout, 4 * n), *dinp_f = out(&f, dinp, n);
    if (READY(f)) {
        k->upsample2x_backward(be, dinp_f, dout_f, N, H, W, C);
        put(&f, dinp, dinp_f, n);
    }
    end(&f);
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
        frame f;
        const ig_backend_ops *k = begin(&f, be);
        uint16_t *l = (uint16_t *)logits + (size_t)r0 * Vp;
        float *l_f = in(&f, l, (size_t)n * Vp);
        if (READY(f)) {
            k->crossentropy(be, losses + r0, l_f, targets + r0, dloss ? dloss + r0 : NULL, n, V,
                            Vp);
            if (dloss) put(&f, l, l_f, (size_t)n * Vp);
        }
        end(&f);
    }
}

static void bf_ce_max(ig_backend *be, float *rowmax, const void *logits, int N, int Vvalid,
                      int Vl) {
    CE_BLOCKS(N, Vl) {
        frame f;
        const ig_backend_ops *k = begin(&f, be);
        float *l_f = in(&f, (const uint16_t *)logits + (size_t)r0 * Vl, (size_t)n * Vl);
        if (READY(f)) k->ce_max(be, rowmax + r0, l_f, n, Vvalid, Vl);
        end(&f);
    }
}

static void bf_ce_sums(ig_backend *be, float *stats, const void *logits, const float *rowmax,
                       const int32_t *targets, int N, int Vvalid, int Vl) {
    CE_BLOCKS(N, Vl) {
        frame f;
        const ig_backend_ops *k = begin(&f, be);
        float *l_f = in(&f, (const uint16_t *)logits + (size_t)r0 * Vl, (size_t)n * Vl);
        if (READY(f))
            k->ce_sums(be, stats + 2 * (size_t)r0, l_f, rowmax + r0, targets + r0, n, Vvalid, Vl);
        end(&f);
    }
}

static void bf_ce_finish(ig_backend *be, float *losses, void *logits, const float *rowmax,
                         const float *stats, const int32_t *targets, const float *dloss, int N,
                         int Vvalid, int Vl) {
    CE_BLOCKS(N, Vl) {
        frame f;
        const ig_backend_ops *k = begin(&f, be);
        uint16_t *l = (uint16_t *)logits + (size_t)r0 * Vl;
        float *l_f = in(&f, l, (size_t)n * Vl);
        if (READY(f)) {
            k->ce_finish(be, losses + r0, l_f, rowmax + r0, stats + 2 * (size_t)r0, targets + r0,
                         dloss ? dloss + r0 : NULL, n, Vvalid, Vl);
            if (dloss) put(&f, l, l_f, (size_t)n * Vl);
        }
        end(&f);
    }
}

/* MSE's and L1's shape: losses per row, dpred overwritten */
typedef void (*err_fn)(ig_backend *, float *, void *, const void *, const void *, int, int, float);
static void row_error(ig_backend *be, err_fn fn, float *losses, void *dpred, const void *pred,
                      const void *target, int N, int K, float grad_scale) {
    frame f;
    begin(&f, be);
    size_t n = (size_t)N * K;
    float *p_f = in(&f, pred, n), *t_f = in(&f, target, n), *d_f = out(&f, dpred, n);
    if (READY(f)) {
        fn(be, losses, d_f, p_f, t_f, N, K, grad_scale);
        put(&f, dpred, d_f, n);
    }
    end(&f);
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
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * C;
    float *m_f = in(&f, moments, 2 * n), *e_f = in(&f, eps, n), *z_f = out(&f, z, n);
    if (READY(f)) {
        k->posterior_forward(be, z_f, kl, m_f, e_f, N, C);
        put(&f, z, z_f, n);
    }
    end(&f);
}

static void bf_posterior_backward(ig_backend *be, void *dmoments, const void *dz,
                                  const void *moments, const void *eps, int N, int C,
                                  float kl_scale) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    size_t n = (size_t)N * C;
    float *dz_f = in(&f, dz, n), *m_f = in(&f, moments, 2 * n), *e_f = in(&f, eps, n);
    float *dm_f = out(&f, dmoments, 2 * n);
    if (READY(f)) {
        k->posterior_backward(be, dm_f, dz_f, m_f, e_f, N, C, kl_scale);
        put(&f, dmoments, dm_f, 2 * n);
    }
    end(&f);
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
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    float *p_f = master ? out(&f, params, n) : in(&f, params, n), *g_f = in(&f, grads, n);
    if (READY(f)) {
        k->adamw(be, p_f, master, g_f, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
                 step);
        put(&f, params, p_f, n);
    }
    end(&f);
}

static double bf_sum_squares(ig_backend *be, const void *x, size_t n) {
    if (!be->opts.reference) return ig_cpu_bf16_sum_squares(be, x, n);
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    float *x_f = in(&f, x, n);
    double s = READY(f) ? k->sum_squares(be, x_f, n) : 0.0;
    end(&f);
    return s;
}

static void bf_scale(ig_backend *be, void *x, size_t n, float s) {
    if (!be->opts.reference) {
        ig_cpu_bf16_scale(be, x, n, s);
        return;
    }
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    float *x_f = in(&f, x, n);
    if (READY(f)) {
        k->scale(be, x_f, n, s);
        put(&f, x, x_f, n);
    }
    end(&f);
}

static void bf_ema(ig_backend *be, float *ema, const float *master, const void *params, size_t n,
                   float decay) {
    frame f;
    const ig_backend_ops *k = begin(&f, be);
    float *p_f = master ? NULL : in(&f, params, n);
    if (READY(f)) k->ema(be, ema, master, master ? params : p_f, n, decay);
    end(&f);
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
    .rope_backward = bf_rope_backward, .attention_forward = bf_attention_forward,                  \
    .attention_backward = bf_attention_backward, .attention_cached = bf_attention_cached,          \
    .crossentropy = bf_crossentropy, .ce_max = bf_ce_max, .ce_sums = bf_ce_sums,                   \
    .ce_finish = bf_ce_finish, .layernorm_modulate_forward = bf_layernorm_modulate_forward,        \
    .layernorm_modulate_backward = bf_layernorm_modulate_backward,                                 \
    .gate_residual_forward = bf_gate_residual_forward,                                             \
    .gate_residual_backward = bf_gate_residual_backward, .silu_forward = bf_silu_forward,          \
    .silu_backward = bf_silu_backward, .relu_forward = bf_relu_forward, .mse = bf_mse,             \
    .add = bf_add, .adamw = bf_adamw, .sum_squares = bf_sum_squares, .scale = bf_scale,            \
    .ema = bf_ema, .conv2d_forward = bf_conv2d_forward, .conv2d_backward = bf_conv2d_backward,     \
    .groupnorm_forward = bf_groupnorm_forward, .groupnorm_backward = bf_groupnorm_backward,        \
    .upsample2x_forward = bf_upsample2x_forward, .upsample2x_backward = bf_upsample2x_backward,    \
    .geglu_forward = bf_geglu_forward, .geglu_backward = bf_geglu_backward,                        \
    .t5_position_bias = bf_t5_position_bias, .attention_bias_forward = bf_attention_bias_forward,  \
    .cross_attention_forward = bf_cross_attention_forward,                                         \
    .cross_attention_backward = bf_cross_attention_backward, .l1 = bf_l1,                          \
    .posterior_forward = bf_posterior_forward, .posterior_backward = bf_posterior_backward

/* act tensors are bf16: host fp32 is rounded on the way in and widened on the way out */
static ig_status bf_upload_f32(ig_backend *be, void *dst, const float *src, size_t n, ig_err *err) {
    (void)err;
    convert(be, dst, src, n, 1);
    return IG_OK;
}

static ig_status bf_download_f32(ig_backend *be, float *dst, const void *src, size_t n,
                                 ig_err *err) {
    (void)err;
    convert(be, dst, src, n, 0);
    return IG_OK;
}

ig_status ig_cpu_bf16_setup(ig_backend *be, const ig_backend_ops *base, ig_err *err) {
    ig_cpu_impl *impl = be->impl;
    struct ig_cpu_bf16 *x = ig_calloc(be->ctx, 1, sizeof *x);
    if (!x) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the CPU backend");
    static const ig_backend_ops kernels = {BF16_KERNEL_OPS};
    x->ops = kernels; /* every kernel entry is ours; the memory entries are the base's */
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
