/* bench_kernels.c - the CPU compute backend (kernels/cpu/) at the trainer's shapes, with every
 * figure a ratio against a reference measured in the same run (DESIGN 7):
 *   - GEMM: the backend's matmul (oneDNN, single-threaded per chunk on the context's pool) on a
 *     large square sgemm at 1 and 2 threads (its peak), then at GPT-2 small's shapes (C = 768,
 *     N = B*T = 4*64 and 4*256, OC = 768, 2304, 3072, the MLP projection 3072 -> 768 and the lm
 *     head 50304 x 768) against the candidate libraries with their own threads, each loaded with
 *     dlopen when installed: OpenBLAS (pthreads), BLIS (OpenMP) and oneDNN (OpenMP);
 *   - memory-bound kernels (encoder, LayerNorm, GeLU, cross-entropy, AdamW, sum of squares,
 *     scale; Llama's RMSNorm, SwiGLU and RoPE): the bytes they must move, per second, over
 *     memcpy's bandwidth at the same thread count and footprint (a memcpy of half those bytes);
 *   - attention forward and backward, multi-head (GPT-2 small's 12 heads) and grouped-query (12
 *     query heads over 4 key/value heads): useful FLOP/s (causal) over the GEMM peak;
 *   - DiT's adaLN-Zero kernels at DiT-S/2's shapes (B 8 samples of 8 x 16 x 16 / (2 x 2) = 512
 *     tokens, C 384): the fused LayerNorm + modulation forward and backward against the unfused
 *     sequence they replace (LayerNorm without affine through ig_kernel_layernorm_forward /
 *     _backward with w = 1 and b = 0, the multiply by 1 + scale, the add of shift, the per-sample
 *     sums and the gradient through the multiply as plain loops on the pool, as the separate
 *     passes of PyTorch's x * (1 + scale) + shift) as the ratio of times, and each fused kernel
 *     (with the gated residual) as bytes moved over memcpy bandwidth; runs taken in turns, each
 *     from memory (the caches emptied before it).
 *
 *   - bf16 (the CPU backend's bf16 matmul, kernels/cpu/cpu_matmul_bf16.c, on oneDNN's bf16 GEMM:
 *     AMX or AVX512-BF16): its peak on a 2048^3 GEMM at 1 and 2 threads next to the sgemm's, one
 *     library call alone, the dW tile's beta 1 (sum post-op) against beta 0, and the matmul
 *     forward + backward at GPT-2 small's shapes (N = 4 x 256 and 4 x 1024) in bf16 against fp32.
 *
 *   bench_kernels [threads=2] [dit|bf16]   (best of 3 runs after a warm-up, for every figure but
 *                                           DiT's: best of 20 taken in turns; "dit": the DiT
 *                                           figures only; "bf16": the GEMM peaks and bf16 only)
 *
 * Ends with one machine-readable line "kernels_summary k=v ..." (the DiT figures alone:
 * "kernels_dit_summary k=v ...", the bf16 ones "kernels_bf16_summary k=v ...").
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_internal.h" /* the bf16 GEMM, which no public entry reaches yet */

static ig_ctx *make_ctx(int threads) {
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = threads;
    ig_ctx *ctx = NULL;
    ig_err err = {0};
    if (ig_ctx_create(&ctx, &o, &err) != IG_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        exit(1);
    }
    return ctx;
}

static ig_backend *make_backend(ig_ctx *ctx) {
    ig_backend *be = NULL;
    ig_err err = {0};
    ig_backend_opts o = ig_backend_opts_default();
    if (ig_backend_create(&be, ctx, &o, &err) != IG_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        exit(1);
    }
    return be;
}

static float *buf(ig_backend *be, size_t n, float lo, float hi, uint64_t seed) {
    void *p = NULL;
    ig_err err = {0};
    if (ig_backend_alloc(be, n * sizeof(float), &p, &err) != IG_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        exit(1);
    }
    float *x = p;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
    return x;
}

/* ---- timing: best of REPS runs of a closure, after a warm-up --------------------------------- */

typedef void (*bench_fn)(void *arg);

#define REPS 3

static double best_of(bench_fn fn, void *arg) {
    fn(arg); /* warm: caches, page faults, JIT */
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = ig_now();
        fn(arg);
        double dt = ig_now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

/* ---- memcpy bandwidth on the pool ------------------------------------------------------------ */

typedef struct copy_arg {
    ig_ctx *ctx;
    char *dst;
    const char *src;
    size_t n;
} copy_arg;

static void copy_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    copy_arg *c = arg;
    memcpy(c->dst + b, c->src + b, e - b);
}

static void copy_run(void *arg) {
    copy_arg *c = arg;
    ig_parallel_range(c->ctx, c->n, (c->n + 15) / 16, copy_chunk, c);
}

/* GB/s of memcpy of n bytes, counting bytes read plus bytes written (a kernel that moves B bytes
 * is compared with a memcpy of B / 2: the same footprint, in the same caches) */
static double memcpy_gbs(ig_ctx *ctx, size_t n) {
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) exit(1);
    memset(a, 1, n), memset(b, 2, n);
    copy_arg c = {ctx, b, a, n};
    double t = best_of(copy_run, &c);
    free(a), free(b);
    return 2.0 * (double)n / t / 1e9;
}

/* ---- GEMM: the backend's, and the candidates' through dlopen --------------------------------- */

typedef struct mm_arg {
    ig_backend *be;
    float *out, *inp, *w, *bias;
    ig_w_layout layout;
    int N, C, OC;
} mm_arg;

static void mm_run(void *arg) {
    mm_arg *m = arg;
    ig_kernel_matmul_forward(m->be, m->out, m->inp, m->w, m->layout, m->bias, m->N, m->C, m->OC);
}

/* GFLOP/s of the backend's matmul on an S x S x S sgemm */
static double square_gflops(ig_backend *be, int S) {
    float *a = buf(be, (size_t)S * S, -1, 1, 1), *b = buf(be, (size_t)S * S, -1, 1, 2);
    float *c = buf(be, (size_t)S * S, 0, 0, 3);
    mm_arg m = {be, c, a, b, NULL, IG_W_IN_OUT, S, S, S};
    double g = 2.0 * S * S * S / best_of(mm_run, &m) / 1e9;
    ig_backend_release(be, a), ig_backend_release(be, b), ig_backend_release(be, c);
    return g;
}

/* cblas_sgemm's signature (OpenBLAS, BLIS) and oneDNN's */
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                             const float *, int64_t, float, float *, int64_t);

typedef struct lib {
    const char *name;
    void *h;
    cblas_sgemm_fn cblas;
    dnnl_sgemm_fn dnnl;
    void (*set_threads)(int);       /* openblas_set_num_threads, omp_set_num_threads */
    void (*set_threads_long)(long); /* bli_thread_set_num_threads */
} lib;

/* Each library is opened with RTLD_DEEPBIND so that its own BLAS symbols win over any other's. */
static void lib_open(lib *l, const char *name, const char *const *paths) {
    memset(l, 0, sizeof *l);
    l->name = name;
    for (int i = 0; paths[i] && !l->h; i++)
        l->h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!l->h) return;
    if (!strcmp(name, "oneDNN")) {
        l->dnnl = (dnnl_sgemm_fn)dlsym(l->h, "dnnl_sgemm");
        l->set_threads = (void (*)(int))dlsym(l->h, "omp_set_num_threads");
    } else {
        l->cblas = (cblas_sgemm_fn)dlsym(l->h, "cblas_sgemm");
        l->set_threads = (void (*)(int))dlsym(l->h, "openblas_set_num_threads");
        l->set_threads_long = (void (*)(long))dlsym(l->h, "bli_thread_set_num_threads");
    }
    if ((!l->cblas && !l->dnnl) || (!l->set_threads && !l->set_threads_long)) {
        dlclose(l->h);
        l->h = NULL;
    }
}

typedef struct lib_arg {
    lib *l;
    int threads;
    mm_arg *m;
} lib_arg;

static void lib_run(void *arg) {
    lib_arg *a = arg;
    mm_arg *m = a->m;
    lib *l = a->l;
    if (l->set_threads) l->set_threads(a->threads);
    if (l->set_threads_long) l->set_threads_long(a->threads);
    int tb = m->layout == IG_W_OUT_IN, ldb = tb ? m->C : m->OC;
    if (l->dnnl)
        l->dnnl('N', tb ? 'T' : 'N', m->N, m->OC, m->C, 1.0f, m->inp, m->C, m->w, ldb, 0.0f, m->out,
                m->OC);
    else /* CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112 */
        l->cblas(101, 111, tb ? 112 : 111, m->N, m->OC, m->C, 1.0f, m->inp, m->C, m->w, ldb, 0.0f,
                 m->out, m->OC);
    if (l->set_threads) l->set_threads(1); /* idle threads must not spin into the next figure */
    if (l->set_threads_long) l->set_threads_long(1);
}

/* ---- bf16: oneDNN's bf16 GEMM (the CPU backend's bf16 matmul) next to the sgemm ---------------
 */

/* n bf16 values uniform in [lo, hi) in a buffer of the backend */
static uint16_t *buf16(ig_backend *be, size_t n, float lo, float hi, uint64_t seed) {
    void *p = NULL;
    ig_err err = {0};
    if (ig_backend_alloc(be, n * sizeof(uint16_t), &p, &err) != IG_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        exit(1);
    }
    uint16_t *x = p;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ig_backend_bf16_from_f32(lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0)));
    }
    return x;
}

/* a matmul forward, or forward and backward (dinp, dW, dbias), in fp32 through the backend or in
 * bf16 through ig_cpu_bf16_matmul_* */
typedef struct bmm_arg {
    ig_backend *be;
    int bf16, backward;
    void *out, *inp, *w, *bias, *dout, *dinp, *dw, *dbias;
    ig_w_layout layout;
    int N, C, OC;
} bmm_arg;

static void bmm_run(void *arg) {
    bmm_arg *m = arg;
    if (m->bf16) {
        ig_cpu_bf16_matmul_forward(m->be, m->out, m->inp, m->w, m->layout, m->bias, m->N, m->C,
                                   m->OC);
        if (m->backward)
            ig_cpu_bf16_matmul_backward(m->be, m->dinp, m->dw, m->dbias, m->dout, m->inp, m->w,
                                        m->layout, m->N, m->C, m->OC);
    } else {
        ig_kernel_matmul_forward(m->be, m->out, m->inp, m->w, m->layout, m->bias, m->N, m->C,
                                 m->OC);
        if (m->backward)
            ig_kernel_matmul_backward(m->be, m->dinp, m->dw, m->dbias, m->dout, m->inp, m->w,
                                      m->layout, m->N, m->C, m->OC);
    }
    ig_err err = {0};
    if (ig_backend_sync(m->be, &err) != IG_OK) {
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        exit(1);
    }
}

/* The buffers of m for its sizes, in its type (random inputs, zeroed outputs). */
static void bmm_alloc(bmm_arg *m, int bias) {
    size_t nin = (size_t)m->N * m->C, nout = (size_t)m->N * m->OC, nw = (size_t)m->C * m->OC;
    if (m->bf16) {
        m->inp = buf16(m->be, nin, -1, 1, 41), m->w = buf16(m->be, nw, -1, 1, 42);
        m->dout = buf16(m->be, nout, -1, 1, 43), m->out = buf16(m->be, nout, 0, 0, 44);
        m->dinp = buf16(m->be, nin, 0, 0, 45), m->dw = buf16(m->be, nw, 0, 0, 46);
        m->bias = bias ? buf16(m->be, (size_t)m->OC, -1, 1, 47) : NULL;
        m->dbias = bias ? buf16(m->be, (size_t)m->OC, 0, 0, 48) : NULL;
    } else {
        m->inp = buf(m->be, nin, -1, 1, 41), m->w = buf(m->be, nw, -1, 1, 42);
        m->dout = buf(m->be, nout, -1, 1, 43), m->out = buf(m->be, nout, 0, 0, 44);
        m->dinp = buf(m->be, nin, 0, 0, 45), m->dw = buf(m->be, nw, 0, 0, 46);
        m->bias = bias ? buf(m->be, (size_t)m->OC, -1, 1, 47) : NULL;
        m->dbias = bias ? buf(m->be, (size_t)m->OC, 0, 0, 48) : NULL;
    }
}

static void bmm_free(bmm_arg *m) {
    void *p[] = {m->inp, m->w, m->dout, m->out, m->dinp, m->dw, m->bias, m->dbias};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) ig_backend_release(m->be, p[i]);
}

/* GFLOP/s of the bf16 matmul forward on an S x S x S GEMM (W in layout) */
static double square_gflops_bf16(ig_backend *be, int S, ig_w_layout layout) {
    bmm_arg m = {.be = be, .bf16 = 1, .layout = layout, .N = S, .C = S, .OC = S};
    bmm_alloc(&m, 0);
    double g = 2.0 * S * S * S / best_of(bmm_run, &m) / 1e9;
    bmm_free(&m);
    return g;
}

/* one plan of ig_cpu_gemm_bf16 run on the calling thread */
typedef struct plan_arg {
    const ig_cpu_gemm_bf16_plan *p;
    const uint16_t *A, *B;
    float *C;
    void *pad;
} plan_arg;

static void plan_run(void *arg) {
    plan_arg *a = arg;
    if (ig_cpu_gemm_bf16(a->p, a->A, a->B, a->C, a->pad) != 0) {
        fprintf(stderr, "bench_kernels: the bf16 GEMM failed\n");
        exit(1);
    }
}

/* GFLOP/s of one library call of M x N x K on this thread (beta 0 or 1), and its kernel's name */
static double plan_gflops(ig_backend *be, int ta, int tb, int M, int N, int K, int beta,
                          const char **impl) {
    int lda = ta ? M : K, ldb = tb ? K : N;
    const ig_cpu_gemm_bf16_plan *p =
        ig_cpu_gemm_bf16_prepare(be, ta, tb, M, N, K, lda, ldb, N, beta, "bench");
    if (!p) {
        ig_err err = {0};
        ig_backend_sync(be, &err);
        fprintf(stderr, "bench_kernels: %s\n", err.msg);
        exit(1);
    }
    uint16_t *A = buf16(be, (size_t)M * K, -1, 1, 51);
    uint16_t *B = buf16(be, (size_t)K * N, -1, 1, 52);
    float *C = buf(be, (size_t)M * N, 0, 0, 53);
    void *pad = NULL;
    ig_err err = {0};
    if (ig_backend_alloc(be, ig_cpu_gemm_bf16_scratchpad(p) + 64, &pad, &err) != IG_OK) exit(1);
    plan_arg a = {p, A, B, C, pad};
    double g = 2.0 * M * N * K / best_of(plan_run, &a) / 1e9;
    *impl = ig_cpu_gemm_bf16_impl(p);
    ig_backend_release(be, A), ig_backend_release(be, B), ig_backend_release(be, C);
    ig_backend_release(be, pad);
    return g;
}

enum { B_PEAK_1T, B_PEAK_T, B_PEAK_T_OUTIN, B_LIB_1T, B_OVER_SGEMM, B_FWDBWD_GEO, B_COUNT };

/* The bf16 figures: the GEMM peak against the sgemm's (peak1, peakt: measured before), a library
 * call with beta 0 and 1 (the dW tile's sum), and the matmul forward + backward at GPT-2 small's
 * shapes in bf16 against fp32. */
static void bench_bf16(ig_backend *be1, ig_backend *bet, int threads, double peak1, double peakt,
                       double out[B_COUNT]) {
    if (!ig_cpu_has_bf16()) {
        printf("\nbf16: this CPU has neither AVX512-BF16 nor AMX-BF16: skipped\n");
        return;
    }
    int S = 2048;
    out[B_PEAK_1T] = square_gflops_bf16(be1, S, IG_W_IN_OUT);
    out[B_PEAK_T] = square_gflops_bf16(bet, S, IG_W_IN_OUT);
    out[B_PEAK_T_OUTIN] = square_gflops_bf16(bet, S, IG_W_OUT_IN);
    out[B_OVER_SGEMM] = out[B_PEAK_T] / peakt;
    const char *impl_ab = "?", *impl_ba = "?";
    double lib_ab = plan_gflops(be1, 0, 0, S, S, S, 0, &impl_ab);
    double lib_ba = plan_gflops(be1, 0, 1, S, S, S, 0, &impl_ba);
    out[B_LIB_1T] = lib_ab > lib_ba ? lib_ab : lib_ba;
    printf("\nbf16 GEMM peak (oneDNN's bf16 matmul primitive, %dx%dx%d):\n", S, S, S);
    printf("  backend bf16 matmul, W [in, out]: 1 thread %.1f GFLOP/s, %d threads %.1f GFLOP/s; "
           "W [out, in]: %d threads %.1f GFLOP/s\n",
           out[B_PEAK_1T], threads, out[B_PEAK_T], threads, out[B_PEAK_T_OUTIN]);
    printf("  one library call, 1 thread: B [K, N] %.1f GFLOP/s (%s), B [N, K] %.1f GFLOP/s (%s)\n",
           lib_ab, impl_ab, lib_ba, impl_ba);
    printf("  sgemm peak measured above: 1 thread %.1f, %d threads %.1f GFLOP/s; bf16 / fp32: "
           "%.2fx at 1 thread, %.2fx at %d threads\n",
           peak1, threads, peakt, out[B_PEAK_1T] / peak1, out[B_OVER_SGEMM], threads);
    /* the dW tile's old gradient: the sum post-op (beta 1) against beta 0 (the kernel adds after)
     */
    const char *i0 = "?", *i1 = "?";
    double b0 = plan_gflops(be1, 1, 0, 256, 384, 1024, 0, &i0);
    double b1 = plan_gflops(be1, 1, 0, 256, 384, 1024, 1, &i1);
    printf("  a dW tile (256x384, K 1024, A transposed), 1 thread: beta 0 %.1f GFLOP/s, beta 1 "
           "(sum post-op) %.1f GFLOP/s (%s)\n",
           b0, b1, i0);

    printf("\nmatmul forward + backward (dinp, dW, dbias), GPT-2 small shapes, %d threads: fp32 "
           "(backend) against bf16:\n",
           threads);
    printf("  %-30s %10s %10s %9s %9s %8s\n", "shape (N x C -> OC)", "fp32 ms", "bf16 ms",
           "fp32 GF/s", "bf16 GF/s", "speedup");
    int shapes[][3] = {{768, 2304, 0}, {768, 768, 0}, {768, 3072, 0}, {3072, 768, 0}};
    double geo = 0;
    int n = 0;
    for (int nb = 0; nb < 2; nb++) {
        int N = nb ? 4 * 1024 : 4 * 256;
        for (int s = 0; s < 4; s++) {
            bmm_arg f32 = {.be = bet, .backward = 1, .layout = IG_W_IN_OUT};
            f32.N = N, f32.C = shapes[s][0], f32.OC = shapes[s][1];
            bmm_arg b16 = f32;
            b16.bf16 = 1;
            bmm_alloc(&f32, 1), bmm_alloc(&b16, 1);
            double flops = 3 * 2.0 * N * f32.C * f32.OC;
            double t32 = best_of(bmm_run, &f32), t16 = best_of(bmm_run, &b16);
            char name[64];
            snprintf(name, sizeof name, "%d x %d -> %d", N, f32.C, f32.OC);
            printf("  %-30s %10.2f %10.2f %9.1f %9.1f %7.2fx\n", name, t32 * 1e3, t16 * 1e3,
                   flops / t32 / 1e9, flops / t16 / 1e9, t32 / t16);
            geo += log(t32 / t16), n++;
            bmm_free(&f32), bmm_free(&b16);
        }
    }
    out[B_FWDBWD_GEO] = exp(geo / n);
    printf("  geometric mean of the speedups: %.2fx\n", out[B_FWDBWD_GEO]);
}

/* ---- fused kernels --------------------------------------------------------------------------- */

typedef struct k_arg {
    ig_backend *be;
    int which;
    int B, T, C, NH, NKV, V, Vp;
    size_t n;
    float *a, *b, *c, *d, *e, *f, *g, *h;
    int32_t *tok;
    double sink;
} k_arg;

enum {
    K_ENC_F,
    K_ENC_B,
    K_LN_F,
    K_RLN_F,
    K_LN_B,
    K_GELU_F,
    K_GELU_B,
    K_CE,
    K_ADAMW,
    K_SUMSQ,
    K_SCALE,
    K_ATT_F,
    K_ATT_B,
    K_RMS_F,
    K_RRMS_F,
    K_RMS_B,
    K_SWIGLU_F,
    K_SWIGLU_B,
    K_ROPE_F,
    K_ROPE_B,
    K_GQA_F,
    K_GQA_B,
    K_COUNT
};

static void k_run(void *arg) {
    k_arg *k = arg;
    int N = k->B * k->T, C = k->C;
    ig_attention_shape mha = {.B = k->B,
                              .T = k->T,
                              .n_head = k->NH,
                              .n_kv_head = k->NH,
                              .head_size = C / k->NH,
                              .causal = 1};
    ig_attention_shape gqa = mha;
    gqa.n_kv_head = k->NKV;
    switch (k->which) {
    case K_ENC_F:
        ig_kernel_encoder_forward(k->be, k->a, k->tok, k->b, k->c, k->B, k->T, C);
        break;
    case K_ENC_B:
        ig_kernel_encoder_backward(k->be, k->b, k->c, k->a, k->tok, k->B, k->T, C);
        break;
    case K_LN_F:
        ig_kernel_layernorm_forward(k->be, k->b, k->e, k->f, k->a, k->g, k->h, N, C, 1e-5f);
        break;
    case K_RLN_F:
        ig_kernel_residual_layernorm_forward(k->be, k->c, k->b, k->e, k->f, k->a, k->d, k->g, k->h,
                                             N, C, 1e-5f);
        break;
    case K_LN_B:
        ig_kernel_layernorm_backward(k->be, k->c, k->g, k->h, k->d, k->a, k->g, k->e, k->f, N, C);
        break;
    case K_GELU_F:
        ig_kernel_gelu_bias_forward(k->be, k->b, k->a, k->g, N, 4 * C);
        break;
    case K_GELU_B:
        ig_kernel_gelu_bias_backward(k->be, k->c, k->g, k->d, k->a, k->g, N, 4 * C);
        break;
    case K_CE: /* the logits become their gradient: valid logits too, and as costly */
        ig_kernel_crossentropy(k->be, k->e, k->a, k->tok, k->f, N, k->V, k->Vp);
        break;
    case K_ADAMW:
        ig_kernel_adamw(k->be, k->a, NULL, k->b, k->c, k->d, k->n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f,
                        1.0f, 10);
        break;
    case K_SUMSQ:
        k->sink += ig_kernel_sum_squares(k->be, k->a, k->n);
        break;
    case K_SCALE:
        ig_kernel_scale(k->be, k->a, k->n, 1.0f);
        break;
    case K_ATT_F:
        ig_kernel_attention_forward(k->be, k->b, k->e, k->a, NULL, &mha);
        break;
    case K_ATT_B:
        ig_kernel_attention_backward(k->be, k->c, k->d, k->a, k->b, k->e, NULL, &mha);
        break;
    case K_RMS_F:
        ig_kernel_rmsnorm_forward(k->be, k->b, k->f, k->a, k->g, N, C, 1e-5f);
        break;
    case K_RRMS_F:
        ig_kernel_residual_rmsnorm_forward(k->be, k->c, k->b, k->f, k->a, k->d, k->g, N, C, 1e-5f);
        break;
    case K_RMS_B:
        ig_kernel_rmsnorm_backward(k->be, k->c, k->g, k->d, k->a, k->g, k->f, N, C);
        break;
    case K_SWIGLU_F:
        ig_kernel_swiglu_forward(k->be, k->b, k->a, k->c, N, 4 * C);
        break;
    case K_SWIGLU_B:
        ig_kernel_swiglu_backward(k->be, k->e, k->f, k->d, k->a, k->c, N, 4 * C);
        break;
    case K_ROPE_F:
        ig_kernel_rope_forward(k->be, k->a, k->B, k->T, k->NH, k->NKV, C / k->NH, 0, 10000.0f);
        break;
    case K_ROPE_B:
        ig_kernel_rope_backward(k->be, k->a, k->B, k->T, k->NH, k->NKV, C / k->NH, 0, 10000.0f);
        break;
    case K_GQA_F:
        ig_kernel_attention_forward(k->be, k->b, k->e, k->a, NULL, &gqa);
        break;
    case K_GQA_B:
        ig_kernel_attention_backward(k->be, k->c, k->d, k->a, k->b, k->e, NULL, &gqa);
        break;
    }
}

/* ---- DiT's adaLN-Zero kernels, fused and unfused ------------------------------------------- */

/* Rows of B samples of rps tokens, C channels; the modulation [B, 6C] holds shift | scale | gate
 * (| the MLP's three), as DiT's adaLN_modulation gives them. */
typedef struct dit_arg {
    ig_ctx *ctx;
    ig_backend *be;
    int which;
    int B, rps, N, C, ld;
    float *x, *res, *mod, *out, *y, *mean, *rstd, *ones, *zeros;
    float *dout, *dinp, *dmod, *dy, *dw, *db, *dx, *gout;
} dit_arg;

enum { D_MOD_F, D_MOD_B, D_UNF_F, D_UNF_B, D_GATE_F, D_GATE_B, D_COUNT };

#define DIT_COLS  64                  /* columns per item of the unfused per-sample sums */
#define DIT_REPS  20                  /* runs of each DiT figure, taken in turns */
#define DIT_EVICT ((size_t)128 << 20) /* bytes written between runs: 4x the last-level cache */

/* writes its chunk of the eviction buffer (dst) */
static void evict_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    copy_arg *c = arg;
    memset(c->dst + b, (int)(b & 0x7f), e - b);
}

/* unfused forward, after the LayerNorm: out = y * (1 + scale[b]), then out += shift[b] */
static void dit_mul_rows(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    dit_arg *d = arg;
    for (size_t n = b; n < e; n++) {
        const float *sc = d->mod + n / d->rps * d->ld + d->C, *y = d->y + n * d->C;
        float *o = d->out + n * d->C;
        for (int c = 0; c < d->C; c++) o[c] = y[c] * (1.0f + sc[c]);
    }
}

static void dit_add_rows(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    dit_arg *d = arg;
    for (size_t n = b; n < e; n++) {
        const float *sh = d->mod + n / d->rps * d->ld;
        float *o = d->out + n * d->C;
        for (int c = 0; c < d->C; c++) o[c] += sh[c];
    }
}

/* unfused backward: dshift[b] += sum of dout, dscale[b] += sum of dout * y over b's rows (one item
 * per sample and DIT_COLS columns), and dy = dout * (1 + scale[b]) */
static void dit_sums(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    dit_arg *d = arg;
    int cchunks = (d->C + DIT_COLS - 1) / DIT_COLS;
    for (size_t it = b; it < e; it++) {
        int s = (int)it / cchunks, c0 = (int)it % cchunks * DIT_COLS;
        int cw = d->C - c0 < DIT_COLS ? d->C - c0 : DIT_COLS;
        double ssh[DIT_COLS] = {0}, ssc[DIT_COLS] = {0};
        for (int n = s * d->rps; n < (s + 1) * d->rps; n++) {
            const float *g = d->dout + (size_t)n * d->C + c0, *y = d->y + (size_t)n * d->C + c0;
            for (int k = 0; k < cw; k++) ssh[k] += g[k], ssc[k] += g[k] * y[k];
        }
        float *dsh = d->dmod + (size_t)s * d->ld + c0, *dsc = dsh + d->C;
        for (int k = 0; k < cw; k++) {
            dsh[k] = (float)(dsh[k] + ssh[k]);
            dsc[k] = (float)(dsc[k] + ssc[k]);
        }
    }
}

static void dit_dy_rows(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    dit_arg *d = arg;
    for (size_t n = b; n < e; n++) {
        const float *sc = d->mod + n / d->rps * d->ld + d->C, *g = d->dout + n * d->C;
        float *dy = d->dy + n * d->C;
        for (int c = 0; c < d->C; c++) dy[c] = g[c] * (1.0f + sc[c]);
    }
}

static void dit_run(void *arg) {
    dit_arg *d = arg;
    size_t rows = (size_t)d->N, grain = (rows + 63) / 64;
    int C = d->C, ld = d->ld;
    float *shift = d->mod, *scale = d->mod + C, *gate = d->mod + 2 * C;
    switch (d->which) {
    case D_MOD_F:
        ig_kernel_layernorm_modulate_forward(d->be, d->out, d->mean, d->rstd, d->x, shift, scale,
                                             ld, d->N, C, 0, d->rps, 1e-6f);
        break;
    case D_MOD_B:
        ig_kernel_layernorm_modulate_backward(d->be, d->dinp, d->dmod, d->dmod + C, d->dout, d->x,
                                              scale, ld, d->mean, d->rstd, d->N, C, 0, d->rps);
        break;
    case D_UNF_F:
        ig_kernel_layernorm_forward(d->be, d->y, d->mean, d->rstd, d->x, d->ones, d->zeros, d->N, C,
                                    1e-6f);
        ig_parallel_range(d->ctx, rows, grain, dit_mul_rows, d);
        ig_parallel_range(d->ctx, rows, grain, dit_add_rows, d);
        break;
    case D_UNF_B:
        ig_parallel_range(d->ctx, (size_t)d->B * ((C + DIT_COLS - 1) / DIT_COLS), 1, dit_sums, d);
        ig_parallel_range(d->ctx, rows, grain, dit_dy_rows, d);
        ig_kernel_layernorm_backward(d->be, d->dinp, d->dw, d->db, d->dy, d->x, d->ones, d->mean,
                                     d->rstd, d->N, C);
        break;
    case D_GATE_F:
        ig_kernel_gate_residual_forward(d->be, d->gout, d->res, d->out, gate, ld, d->N, C, 0,
                                        d->rps);
        break;
    case D_GATE_B:
        ig_kernel_gate_residual_backward(d->be, d->dx, d->dmod + 2 * C, d->dout, d->out, gate, ld,
                                         d->N, C, 0, d->rps);
        break;
    }
}

/* The DiT figures at 'threads' threads (ratio[D_*]: fused over memcpy; ratio[D_UNF_*]: unfused
 * time over fused time). */
static void bench_dit(ig_ctx *ctx, ig_backend *be, int threads, double ratio[D_COUNT]) {
    int B = 8, rps = 8 * 16 * 16 / (2 * 2), C = 384, N = B * rps;
    size_t nc = (size_t)N * C;
    dit_arg d = {.ctx = ctx, .be = be, .B = B, .rps = rps, .N = N, .C = C, .ld = 6 * C};
    d.x = buf(be, nc, -2, 2, 40), d.res = buf(be, nc, -1, 1, 41), d.out = buf(be, nc, 0, 0, 42);
    d.y = buf(be, nc, 0, 0, 43), d.dout = buf(be, nc, -1, 1, 44), d.dinp = buf(be, nc, 0, 0, 45);
    d.dy = buf(be, nc, 0, 0, 46), d.dx = buf(be, nc, 0, 0, 47), d.gout = buf(be, nc, 0, 0, 56);
    d.mod = buf(be, (size_t)B * d.ld, -0.5f, 0.5f, 48),
    d.dmod = buf(be, (size_t)B * d.ld, 0, 0, 49);
    d.mean = buf(be, N, 0, 0, 50), d.rstd = buf(be, N, 1, 1, 51);
    d.ones = buf(be, C, 1, 1, 52), d.zeros = buf(be, C, 0, 0, 53);
    d.dw = buf(be, C, 0, 0, 54), d.db = buf(be, C, 0, 0, 55);
    /* bytes the fused kernels must move: LayerNorm+modulate forward reads x and writes out, its
     * backward reads dout and x and adds to dinp; the gated residual reads res and x and writes
     * gout (out of place here, so that it touches as many bytes as its memcpy), its backward reads
     * dout and x and writes dx */
    double bytes[D_COUNT] = {[D_MOD_F] = 2.0 * nc * 4,
                             [D_MOD_B] = 4.0 * nc * 4,
                             [D_GATE_F] = 3.0 * nc * 4,
                             [D_GATE_B] = 3.0 * nc * 4};
    int fused[4] = {D_MOD_F, D_MOD_B, D_GATE_F, D_GATE_B};
    /* Every figure here is the best of DIT_REPS runs taken in turns (each kernel, the unfused
     * sequences and the memcpy references one after another, DIT_REPS times): the load of a shared
     * machine changes by 2x over seconds, and a ratio must compare runs under the same load. The
     * tensors (6 MB each) fit in the last-level cache with what the previous run left there, so
     * every run starts from caches emptied by writing DIT_EVICT bytes: kernels and memcpy alike
     * read their inputs from memory. */
    char *evict = malloc(DIT_EVICT);
    if (!evict) exit(1);
    copy_arg ev = {ctx, evict, NULL, DIT_EVICT};
    copy_arg cp[4];
    for (int i = 0; i < 4; i++) {
        size_t n = (size_t)(bytes[fused[i]] / 2);
        char *a = malloc(n), *b = malloc(n);
        if (!a || !b) exit(1);
        memset(a, 1, n), memset(b, 2, n);
        cp[i] = (copy_arg){ctx, b, a, n};
    }
    d.which = D_MOD_F;
    dit_run(&d); /* the statistics for the backwards */
    double t[D_COUNT], tc[4];
    for (int w = 0; w < D_COUNT; w++) t[w] = 1e30;
    for (int i = 0; i < 4; i++) tc[i] = 1e30;
    for (int r = -1; r < DIT_REPS; r++) { /* r = -1: the warm-up */
        for (int w = 0; w < D_COUNT; w++) {
            d.which = w;
            ig_parallel_range(ctx, DIT_EVICT, DIT_EVICT / 16, evict_chunk, &ev);
            double t0 = ig_now();
            dit_run(&d);
            double dt = ig_now() - t0;
            if (r >= 0 && dt < t[w]) t[w] = dt;
        }
        for (int i = 0; i < 4; i++) {
            ig_parallel_range(ctx, DIT_EVICT, DIT_EVICT / 16, evict_chunk, &ev);
            double t0 = ig_now();
            copy_run(&cp[i]);
            double dt = ig_now() - t0;
            if (r >= 0 && dt < tc[i]) tc[i] = dt;
        }
    }
    const char *names[D_COUNT] = {[D_MOD_F] = "layernorm+modulate forward",
                                  [D_MOD_B] = "layernorm+modulate backward",
                                  [D_GATE_F] = "gate+residual forward",
                                  [D_GATE_B] = "gate+residual backward"};
    printf("\nDiT adaLN-Zero, DiT-S/2 shapes (B=%d samples of %d tokens, C=%d, mod [B, 6C]), %d "
           "threads: fused kernels as bytes moved over memcpy bandwidth; the unfused sequence "
           "(LayerNorm w=1 b=0 through the existing kernels, then the modulation's passes) as its "
           "time over the fused kernel's\n",
           B, rps, C, threads);
    for (int i = 0; i < 4; i++) {
        int w = fused[i];
        double gbs = bytes[w] / t[w] / 1e9, ref = 2.0 * (double)cp[i].n / tc[i] / 1e9;
        ratio[w] = gbs / ref;
        printf("  %-32s %8.3f ms  %7.1f GB/s     %.2f of memcpy (%.1f GB/s at %.0f MB)\n", names[w],
               t[w] * 1e3, gbs, ratio[w], ref, bytes[w] / 2 / 1e6);
    }
    ratio[D_UNF_F] = t[D_UNF_F] / t[D_MOD_F];
    ratio[D_UNF_B] = t[D_UNF_B] / t[D_MOD_B];
    printf("  unfused forward  (layernorm_forward + multiply + add)         %8.3f ms: %.2fx the "
           "fused kernel's time\n",
           t[D_UNF_F] * 1e3, ratio[D_UNF_F]);
    printf("  unfused backward (per-sample sums + dy + layernorm_backward)  %8.3f ms: %.2fx the "
           "fused kernel's time\n",
           t[D_UNF_B] * 1e3, ratio[D_UNF_B]);
    float *all[] = {d.x,    d.res,  d.out,  d.y,    d.dout,  d.dinp, d.dy, d.dx,  d.mod,
                    d.dmod, d.mean, d.rstd, d.ones, d.zeros, d.dw,   d.db, d.gout};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ig_backend_release(be, all[i]);
    for (int i = 0; i < 4; i++) free(cp[i].dst), free((void *)cp[i].src);
    free(evict);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1) threads = 1;
    int dit_only = argc > 2 && !strcmp(argv[2], "dit");
    int bf16_only = argc > 2 && !strcmp(argv[2], "bf16");
    ig_ctx *ctx1 = make_ctx(1), *ctxt = make_ctx(threads);
    ig_backend *be1 = make_backend(ctx1), *bet = make_backend(ctxt);

    /* ---- references ---- */
    size_t big_copy = (size_t)256 << 20;
    double bw1 = memcpy_gbs(ctx1, big_copy), bwt = memcpy_gbs(ctxt, big_copy);
    printf("memcpy of 256 MiB (read + write): 1 thread %.1f GB/s, %d threads %.1f GB/s (%.2fx)\n",
           bw1, threads, bwt, bwt / bw1);
    double dit[D_COUNT] = {0};
    if (dit_only) {
        bench_dit(ctxt, bet, threads, dit);
        printf("kernels_dit_summary memcpy_gbs=%.1f dit_mod_f=%.2f dit_mod_b=%.2f "
               "dit_unfused_f_over_fused=%.2f dit_unfused_b_over_fused=%.2f dit_gate_f=%.2f "
               "dit_gate_b=%.2f\n",
               bwt, dit[D_MOD_F], dit[D_MOD_B], dit[D_UNF_F], dit[D_UNF_B], dit[D_GATE_F],
               dit[D_GATE_B]);
        ig_backend_free(be1), ig_backend_free(bet);
        ig_ctx_free(ctx1), ig_ctx_free(ctxt);
        return 0;
    }

    int S = 2048;
    double peak1 = square_gflops(be1, S), peakt = square_gflops(bet, S);
    printf("GEMM peak (backend matmul, %dx%dx%d sgemm): 1 thread %.1f GFLOP/s, %d threads %.1f "
           "GFLOP/s (%.2fx)\n",
           S, S, S, peak1, threads, peakt, peakt / peak1);
    double bf[B_COUNT] = {0};
    bench_bf16(be1, bet, threads, peak1, peakt, bf);
    if (bf16_only) {
        printf("kernels_bf16_summary gemm_peak_1t=%.1f gemm_peak_%dt=%.1f bf16_peak_1t=%.1f "
               "bf16_peak_%dt=%.1f bf16_peak_outin_%dt=%.1f bf16_lib_1t=%.1f bf16_over_sgemm=%.2f "
               "bf16_fwdbwd_speedup=%.2f\n",
               peak1, threads, peakt, bf[B_PEAK_1T], threads, bf[B_PEAK_T], threads,
               bf[B_PEAK_T_OUTIN], bf[B_LIB_1T], bf[B_OVER_SGEMM], bf[B_FWDBWD_GEO]);
        ig_backend_free(be1), ig_backend_free(bet);
        ig_ctx_free(ctx1), ig_ctx_free(ctxt);
        return 0;
    }

    /* ---- GEMM at the trainer's shapes, against the candidate libraries ---- */
    static const char *const openblas_paths[] = {"libopenblas.so.0", "libopenblas.so", NULL};
    static const char *const blis_paths[] = {"libblis.so.4", "libblis.so", NULL};
    static const char *const dnnl_paths[] = {"libdnnl.so.2", "libdnnl.so", NULL};
    lib libs[3];
    lib_open(&libs[0], "OpenBLAS", openblas_paths);
    lib_open(&libs[1], "BLIS", blis_paths);
    lib_open(&libs[2], "oneDNN", dnnl_paths);
    printf("\nGEMM at GPT-2 small shapes, %d threads, GFLOP/s; candidates with their own threads, "
           "as a ratio to the backend:\n",
           threads);
    printf("%-28s %9s", "shape (N x C -> OC)", "backend");
    for (int i = 0; i < 3; i++) printf(" %16s", libs[i].h ? libs[i].name : "(absent)");
    printf("\n");
    int shapes[][4] = {
        {768, 2304, 0}, {768, 768, 0}, {768, 3072, 0}, {3072, 768, 0}, {768, 50304, 1}};
    double sum_ratio[3] = {0}, geo_backend = 0;
    int nshape = 0;
    for (int nb = 0; nb < 2; nb++) {
        int N = nb ? 4 * 256 : 4 * 64;
        for (int s = 0; s < 5; s++) {
            int C = shapes[s][0], OC = shapes[s][1];
            ig_w_layout lay = shapes[s][2] ? IG_W_OUT_IN : IG_W_IN_OUT;
            float *x = buf(bet, (size_t)N * C, -1, 1, 4), *w = buf(bet, (size_t)C * OC, -1, 1, 5);
            float *o = buf(bet, (size_t)N * OC, 0, 0, 6);
            mm_arg m = {bet, o, x, w, NULL, lay, N, C, OC};
            double f = 2.0 * N * C * OC;
            double ours = f / best_of(mm_run, &m) / 1e9;
            char name[64];
            snprintf(name, sizeof name, "%d x %d -> %d%s", N, C, OC,
                     shapes[s][2] ? " (lm head)" : "");
            printf("%-28s %9.1f", name, ours);
            geo_backend += log(ours / peakt);
            for (int i = 0; i < 3; i++) {
                if (!libs[i].h) {
                    printf(" %16s", "-");
                    continue;
                }
                lib_arg la = {&libs[i], threads, &m};
                double g = f / best_of(lib_run, &la) / 1e9;
                printf(" %8.1f (%.2fx)", g, g / ours);
                sum_ratio[i] += log(g / ours);
            }
            printf("\n");
            nshape++;
            ig_backend_release(bet, x), ig_backend_release(bet, w), ig_backend_release(bet, o);
        }
    }
    double gm[3];
    for (int i = 0; i < 3; i++) gm[i] = libs[i].h ? exp(sum_ratio[i] / nshape) : 0;
    printf("geometric mean over the shapes, candidate / backend: OpenBLAS %.2f, BLIS %.2f, oneDNN "
           "(own threads) %.2f; backend / its square peak %.2f\n",
           gm[0], gm[1], gm[2], exp(geo_backend / nshape));

    /* does a library's own threading give the same bits at 1 and 2 threads? (the backend's does,
     * by construction: its chunks depend on the sizes only) */
    for (int i = 0; i < 3; i++) {
        if (!libs[i].h) continue;
        int N = 1024, C = 3072, OC = 768;
        float *x = buf(bet, (size_t)N * C, -1, 1, 7), *w = buf(bet, (size_t)C * OC, -1, 1, 8);
        float *o1 = buf(bet, (size_t)N * OC, 0, 0, 9), *o2 = buf(bet, (size_t)N * OC, 0, 0, 9);
        mm_arg m1 = {bet, o1, x, w, NULL, IG_W_IN_OUT, N, C, OC}, m2 = m1;
        m2.out = o2;
        lib_arg a1 = {&libs[i], 1, &m1}, a2 = {&libs[i], 2, &m2};
        lib_run(&a1), lib_run(&a2);
        printf("%s with its own threads, 1 vs 2 threads (%dx%dx%d): %s\n", libs[i].name, N, C, OC,
               memcmp(o1, o2, (size_t)N * OC * 4) ? "different bits" : "same bits");
        ig_backend_release(bet, x), ig_backend_release(bet, w);
        ig_backend_release(bet, o1), ig_backend_release(bet, o2);
    }

    /* ---- fused kernels at B = 4, T = 256, GPT-2 small ---- */
    int B = 4, T = 256, C = 768, NH = 12, NKV = 4, V = 50257, Vp = 50304, N = B * T;
    size_t nc = (size_t)N * C, n4 = nc * 4, nopt = (size_t)16 << 20;
    size_t nrope = (size_t)N * (NH + NKV) * (C / NH); /* the rotated q and k heads */
    k_arg k = {.be = bet, .B = B, .T = T, .C = C, .NH = NH, .NKV = NKV, .V = V, .Vp = Vp};
    float *big[8];
    size_t bigsz = (size_t)N * Vp > nopt ? (size_t)N * Vp : nopt;
    for (int i = 0; i < 8; i++) big[i] = buf(bet, i < 4 ? bigsz : n4, -1, 1, 20 + (uint64_t)i);
    int32_t *tok = (int32_t *)buf(bet, (size_t)N, 0, 0, 30);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919) % V);
    struct {
        const char *name;
        int which;
        double bytes; /* what the kernel must read and write, at least */
        double flops; /* attention: useful (causal) FLOPs */
    } ks[] = {
        {"encoder forward", K_ENC_F, 3.0 * nc * 4, 0},
        {"encoder backward", K_ENC_B, 5.0 * nc * 4, 0},
        {"layernorm forward", K_LN_F, 2.0 * nc * 4, 0},
        {"residual+layernorm forward", K_RLN_F, 4.0 * nc * 4, 0},
        {"layernorm backward", K_LN_B, 4.0 * nc * 4, 0},
        {"bias+gelu forward (4C)", K_GELU_F, 2.0 * n4 * 4, 0},
        {"bias+gelu backward (4C)", K_GELU_B, 3.0 * n4 * 4, 0},
        {"crossentropy fwd+bwd (V 50257)", K_CE, 2.0 * N * (double)V * 4, 0},
        {"adamw (16 Mi params)", K_ADAMW, 7.0 * nopt * 4, 0},
        {"sum of squares (16 Mi)", K_SUMSQ, 1.0 * nopt * 4, 0},
        {"scale (16 Mi)", K_SCALE, 2.0 * nopt * 4, 0},
        {"attention forward", K_ATT_F, 0, 2.0 * B * NH * (double)T * T * (C / NH)},
        {"attention backward", K_ATT_B, 0, 5.0 * B * NH * (double)T * T * (C / NH)},
        {"rmsnorm forward", K_RMS_F, 2.0 * nc * 4, 0},
        {"residual+rmsnorm forward", K_RRMS_F, 4.0 * nc * 4, 0},
        {"rmsnorm backward", K_RMS_B, 4.0 * nc * 4, 0},
        {"swiglu forward (4C)", K_SWIGLU_F, 3.0 * n4 * 4, 0},
        {"swiglu backward (4C)", K_SWIGLU_B, 5.0 * n4 * 4, 0},
        {"rope forward (12 q + 4 kv heads)", K_ROPE_F, 2.0 * nrope * 4, 0},
        {"rope backward", K_ROPE_B, 2.0 * nrope * 4, 0},
        {"attention forward, GQA 12/4", K_GQA_F, 0, 2.0 * B * NH * (double)T * T * (C / NH)},
        {"attention backward, GQA 12/4", K_GQA_B, 0, 5.0 * B * NH * (double)T * T * (C / NH)},
    };
    printf("\nfused kernels, B=%d T=%d C=%d NH=%d, %d threads: memory-bound ones as bytes moved "
           "over memcpy bandwidth, attention as useful FLOP/s over the GEMM peak\n",
           B, T, C, NH, threads);
    double ratio[K_COUNT] = {0};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        k.which = ks[i].which;
        k.a = big[0], k.b = big[1], k.c = big[2], k.d = big[3];
        k.e = big[4], k.f = big[5], k.g = big[6], k.h = big[7];
        k.tok = tok;
        k.n = nopt;
        if (k.which == K_LN_F || k.which == K_RLN_F || k.which == K_LN_B || k.which == K_RMS_F ||
            k.which == K_RRMS_F || k.which == K_RMS_B)
            for (int r = 0; r < N; r++) big[5][r] = 1.0f; /* rstd */
        if (k.which == K_ADAMW)
            for (size_t j = 0; j < nopt; j++) big[3][j] = 1e-3f; /* v >= 0 */
        if (k.which == K_CE)
            for (int r = 0; r < N; r++) big[5][r] = 1.0f / N; /* dloss */
        if (k.which == K_ATT_B || k.which == K_GQA_B)         /* out and lse of the same shape */
            k_run(&(k_arg){.be = bet,
                           .which = k.which == K_ATT_B ? K_ATT_F : K_GQA_F,
                           .B = B,
                           .T = T,
                           .C = C,
                           .NH = NH,
                           .NKV = NKV,
                           .a = k.a,
                           .b = k.b,
                           .e = k.e});
        double t = best_of(k_run, &k);
        if (ks[i].flops > 0) { /* the peak again, measured next to it: the machine may be shared */
            double g = ks[i].flops / t / 1e9, ref = square_gflops(bet, 1024);
            ratio[k.which] = g / ref;
            printf("  %-32s %8.2f ms  %7.1f GFLOP/s  %.3f of GEMM peak (%.1f GFLOP/s, 1024^3 "
                   "sgemm just after)\n",
                   ks[i].name, t * 1e3, g, ratio[k.which], ref);
        } else {
            double gbs = ks[i].bytes / t / 1e9;
            double ref = memcpy_gbs(ctxt, (size_t)(ks[i].bytes / 2));
            ratio[k.which] = gbs / ref;
            printf("  %-32s %8.2f ms  %7.1f GB/s     %.2f of memcpy (%.1f GB/s at %.0f MB)\n",
                   ks[i].name, t * 1e3, gbs, ratio[k.which], ref, ks[i].bytes / 2 / 1e6);
        }
    }

    bench_dit(ctxt, bet, threads, dit);

    printf("kernels_summary gemm_peak_1t=%.1f gemm_peak_%dt=%.1f gemm_scaling=%.2f "
           "openblas_vs_backend=%.2f blis_vs_backend=%.2f onednn_own_threads_vs_backend=%.2f "
           "memcpy_gbs=%.1f enc_f=%.2f enc_b=%.2f ln_f=%.2f rln_f=%.2f ln_b=%.2f gelu_f=%.2f "
           "gelu_b=%.2f ce=%.2f adamw=%.2f sumsq=%.2f scale=%.2f attn_f_peak=%.3f "
           "attn_b_peak=%.3f rms_f=%.2f rrms_f=%.2f rms_b=%.2f swiglu_f=%.2f swiglu_b=%.2f "
           "rope_f=%.2f rope_b=%.2f gqa_f_peak=%.3f gqa_b_peak=%.3f dit_mod_f=%.2f dit_mod_b=%.2f "
           "dit_unfused_f_over_fused=%.2f dit_unfused_b_over_fused=%.2f dit_gate_f=%.2f "
           "dit_gate_b=%.2f bf16_peak_%dt=%.1f bf16_over_sgemm=%.2f bf16_fwdbwd_speedup=%.2f\n",
           peak1, threads, peakt, peakt / peak1, gm[0], gm[1], gm[2], bwt, ratio[K_ENC_F],
           ratio[K_ENC_B], ratio[K_LN_F], ratio[K_RLN_F], ratio[K_LN_B], ratio[K_GELU_F],
           ratio[K_GELU_B], ratio[K_CE], ratio[K_ADAMW], ratio[K_SUMSQ], ratio[K_SCALE],
           ratio[K_ATT_F], ratio[K_ATT_B], ratio[K_RMS_F], ratio[K_RRMS_F], ratio[K_RMS_B],
           ratio[K_SWIGLU_F], ratio[K_SWIGLU_B], ratio[K_ROPE_F], ratio[K_ROPE_B], ratio[K_GQA_F],
           ratio[K_GQA_B], dit[D_MOD_F], dit[D_MOD_B], dit[D_UNF_F], dit[D_UNF_B], dit[D_GATE_F],
           dit[D_GATE_B], threads, bf[B_PEAK_T], bf[B_OVER_SGEMM], bf[B_FWDBWD_GEO]);
    for (int i = 0; i < 8; i++) ig_backend_release(bet, big[i]);
    ig_backend_release(bet, tok);
    ig_backend_free(be1), ig_backend_free(bet);
    ig_ctx_free(ctx1), ig_ctx_free(ctxt);
    return 0;
}
