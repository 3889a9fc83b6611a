/* cpu_internal.h - private to kernels/cpu/: the CPU backend's kernels, two of each operation.
 *
 * ig_cpu_ref_*: the reference kernels. Plain loops in the order the maths is written, double
 * accumulation for every sum, single-threaded, no library: obviously correct and slow. They are
 * what the fast kernels (and later the CUDA ones) are checked against.
 *
 * ig_cpu_*: the fast kernels. Threaded through the context's pool (ig_parallel_range) over
 * chunks that depend on the sizes only, each output element computed by exactly one chunk in an
 * order fixed by the sizes, and partial results combined in a fixed order: the same bits for any
 * thread count. GEMMs go to oneDNN (cpu_gemm.c), called single-threaded on each chunk.
 *
 * Each has the signature of its entry in ig_backend_ops (backend_internal.h); their act tensors
 * are fp32. A backend with bf16 act tensors runs them through cpu_bf16.c's table, which widens
 * its tensors for them and rounds their outputs.
 */
#ifndef INGOT_KERNELS_CPU_INTERNAL_H
#define INGOT_KERNELS_CPU_INTERNAL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../backend_internal.h"

/* Hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time (GCC's
 * target_clones). Floating-point contraction is off (ISO C mode) and no loop below is a
 * vectorised reduction, so every clone gives the same bits. Not under the sanitizers: their
 * runtimes are not up yet when the dynamic loader runs the clones' resolvers. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) &&                             \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define IG_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define IG_CPU_CLONES
#endif

/* Helpers of the hot loops are always inlined, so that they are compiled for the caller's clone
 * (a helper left out of line would run the baseline code). */
#if defined(__GNUC__)
#define IG_CPU_INLINE static inline __attribute__((always_inline))
#else
#define IG_CPU_INLINE static inline
#endif

/* exp(x) in float, written so that loops over it vectorise (libm's expf is a call per element):
 * 2^n p(r) with r = x - n ln2 in [-ln2/2, ln2/2] (ln2 split in two for an exact product) and p
 * the degree-7 Taylor polynomial; at most 1e-7 relative error (1 ulp) over the float range. 0 for
 * x below -87.3 (e^-87.3 is the smallest normal float) and for -inf, e^88.7 for anything larger
 * than 88.7, NaN for NaN. */
IG_CPU_INLINE float ig_cpu_expf(float x) {
    float c = x > -87.3f ? x : -87.3f; /* NaN goes to -87.3 here, and is put back below */
    c = c < 88.7f ? c : 88.7f;
    float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
    float r = c - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union {
        int32_t i;
        float f;
    } s = {((int32_t)n + 127) * (1 << 23)};
    float y = p * s.f;
    y = x > -87.3f ? y : 0.0f;
    return x == x ? y : x;
}

/* Fixed 16-lane reductions with GCC/clang vector types (lowered to whatever the clone's ISA
 * has): the lanes are part of the arithmetic, so the result is the same on every CPU. Vectors
 * never cross a function boundary (that would change the ABI between clones). */
typedef float ig_cpu_f16 __attribute__((vector_size(64)));
typedef double ig_cpu_d16 __attribute__((vector_size(128)));
typedef int32_t ig_cpu_i16 __attribute__((vector_size(64)));

/* max of x[0..n), n >= 1: 16 lanes over the multiples of 16, then the lanes in order, then the
 * tail; NaNs are skipped (as by a > m ? a : m) */
IG_CPU_INLINE float ig_cpu_max(const float *x, int n) {
    float m = x[0];
    int c = 0;
    if (n >= 16) {
        ig_cpu_f16 mv, v;
        memcpy(&mv, x, sizeof mv);
        for (c = 16; c + 16 <= n; c += 16) {
            memcpy(&v, x + c, sizeof v);
            ig_cpu_i16 gt = v > mv; /* -1 where v wins */
            ig_cpu_i16 a, b;
            memcpy(&a, &v, sizeof a), memcpy(&b, &mv, sizeof b);
            a = (a & gt) | (b & ~gt);
            memcpy(&mv, &a, sizeof mv);
        }
        m = mv[0];
        for (int k = 1; k < 16; k++) m = mv[k] > m ? mv[k] : m;
    }
    for (; c < n; c++) m = x[c] > m ? x[c] : m;
    return m;
}

/* sum of x[0..n) in float: 16 lanes over the multiples of 16, then the lanes in order, then the
 * tail (a fixed order, and no chain of n dependent additions) */
IG_CPU_INLINE float ig_cpu_sum(const float *x, int n) {
    ig_cpu_f16 acc = {0}, v;
    int c = 0;
    for (; c + 16 <= n; c += 16) {
        memcpy(&v, x + c, sizeof v);
        acc += v;
    }
    float s = 0;
    for (int k = 0; k < 16; k++) s += acc[k];
    for (; c < n; c++) s += x[c];
    return s;
}

/* sum of exp(x[i] - sub) for i < n, in double: 16 lanes over the multiples of 16, then the lanes
 * in order, then the tail; with y not NULL, y[i] = exp(x[i] - sub) * mul as well */
IG_CPU_INLINE double ig_cpu_sum_exp(const float *x, int n, float sub, float *y, float mul) {
    ig_cpu_d16 acc = {0};
    int c = 0;
    for (; c + 16 <= n; c += 16) {
        float e[16];
        for (int k = 0; k < 16; k++) e[k] = ig_cpu_expf(x[c + k] - sub);
        ig_cpu_f16 v;
        memcpy(&v, e, sizeof v);
        acc += __builtin_convertvector(v, ig_cpu_d16);
        if (y)
            for (int k = 0; k < 16; k++) y[c + k] = e[k] * mul;
    }
    double s = 0;
    for (int k = 0; k < 16; k++) s += acc[k];
    for (; c < n; c++) {
        float e = ig_cpu_expf(x[c] - sub);
        s += e;
        if (y) y[c] = e * mul;
    }
    return s;
}

/* The row statistics of the normalisations, in double: 8 lanes over the multiples of 8, the tail
 * in lane 0, then the lanes added in lane order (a fixed order, the same on every CPU). */
#define IG_CPU_LANES 8

/* sum of x[0..C) */
IG_CPU_INLINE double ig_cpu_lane_sum_d(const float *x, int C) {
    double s[IG_CPU_LANES] = {0};
    int c = 0;
    for (; c + IG_CPU_LANES <= C; c += IG_CPU_LANES)
        for (int k = 0; k < IG_CPU_LANES; k++) s[k] += x[c + k];
    for (; c < C; c++) s[0] += x[c];
    double t = 0;
    for (int k = 0; k < IG_CPU_LANES; k++) t += s[k];
    return t;
}

/* sum of (x[c] - m)^2 over c < C */
IG_CPU_INLINE double ig_cpu_lane_sqdev_d(const float *x, float m, int C) {
    double s[IG_CPU_LANES] = {0};
    int c = 0;
    for (; c + IG_CPU_LANES <= C; c += IG_CPU_LANES)
        for (int k = 0; k < IG_CPU_LANES; k++) {
            double d = (double)x[c + k] - m;
            s[k] += d * d;
        }
    for (; c < C; c++) s[0] += ((double)x[c] - m) * ((double)x[c] - m);
    double t = 0;
    for (int k = 0; k < IG_CPU_LANES; k++) t += s[k];
    return t;
}

/* acc[0..64) += sum over i < n, in order, of coef[i * cs] * rows[i * rs + 0..64): the row of
 * 64 accumulators stays in four 16-lane registers for the whole sum. Each lane does what the plain
 * loop `for i: acc[k] += coef[i * cs] * rows[i * rs + k]` does, so the bits are the same. */
IG_CPU_INLINE void ig_cpu_acc64(float *acc, const float *coef, size_t cs, const float *rows,
                                size_t rs, int n) {
    ig_cpu_f16 a0, a1, a2, a3, v;
    memcpy(&a0, acc, sizeof a0), memcpy(&a1, acc + 16, sizeof a1);
    memcpy(&a2, acc + 32, sizeof a2), memcpy(&a3, acc + 48, sizeof a3);
    for (int i = 0; i < n; i++) {
        float c = coef[(size_t)i * cs];
        const float *r = rows + (size_t)i * rs;
        memcpy(&v, r, sizeof v), a0 += c * v;
        memcpy(&v, r + 16, sizeof v), a1 += c * v;
        memcpy(&v, r + 32, sizeof v), a2 += c * v;
        memcpy(&v, r + 48, sizeof v), a3 += c * v;
    }
    memcpy(acc, &a0, sizeof a0), memcpy(acc + 16, &a1, sizeof a1);
    memcpy(acc + 32, &a2, sizeof a2), memcpy(acc + 48, &a3, sizeof a3);
}

/* ig_cpu_acc64 on two accumulator rows at once (acc0 with coef0, acc1 with coef1) over the same
 * rows, which are then loaded once for both: eight registers of sums. */
IG_CPU_INLINE void ig_cpu_acc64x2(float *acc0, float *acc1, const float *coef0, const float *coef1,
                                  size_t cs, const float *rows, size_t rs, int n) {
    ig_cpu_f16 a0, a1, a2, a3, b0, b1, b2, b3, v;
    memcpy(&a0, acc0, sizeof a0), memcpy(&a1, acc0 + 16, sizeof a1);
    memcpy(&a2, acc0 + 32, sizeof a2), memcpy(&a3, acc0 + 48, sizeof a3);
    memcpy(&b0, acc1, sizeof b0), memcpy(&b1, acc1 + 16, sizeof b1);
    memcpy(&b2, acc1 + 32, sizeof b2), memcpy(&b3, acc1 + 48, sizeof b3);
    for (int i = 0; i < n; i++) {
        float c = coef0[(size_t)i * cs], d = coef1[(size_t)i * cs];
        const float *r = rows + (size_t)i * rs;
        memcpy(&v, r, sizeof v), a0 += c * v, b0 += d * v;
        memcpy(&v, r + 16, sizeof v), a1 += c * v, b1 += d * v;
        memcpy(&v, r + 32, sizeof v), a2 += c * v, b2 += d * v;
        memcpy(&v, r + 48, sizeof v), a3 += c * v, b3 += d * v;
    }
    memcpy(acc0, &a0, sizeof a0), memcpy(acc0 + 16, &a1, sizeof a1);
    memcpy(acc0 + 32, &a2, sizeof a2), memcpy(acc0 + 48, &a3, sizeof a3);
    memcpy(acc1, &b0, sizeof b0), memcpy(acc1 + 16, &b1, sizeof b1);
    memcpy(acc1 + 32, &b2, sizeof b2), memcpy(acc1 + 48, &b3, sizeof b3);
}

/* ---- attention tiles (cpu_attention.c, cpu_cross_attention.c) ------------------------------- */

/* Keys per block of the fused attention kernels: the width of a transposed key tile and of a row of
 * scores (the 64 lanes of ig_cpu_acc64). */
#define IG_CPU_TILE 64

/* S[r][c] = A[r] . BT[:, c] for nr x nc (BT transposed, IG_CPU_TILE wide, zero past nc; S rows
 * IG_CPU_TILE apart), each a sum over d < hs in order */
IG_CPU_INLINE void ig_cpu_tile_dot(float *S, const float *A, const float *BT, int nr, int nc,
                                   int hs) {
    int r = 0;
    for (; r + 2 <= nr; r += 2) {
        float acc[2][IG_CPU_TILE] = {{0}};
        ig_cpu_acc64x2(acc[0], acc[1], A + r * hs, A + (r + 1) * hs, 1, BT, IG_CPU_TILE, hs);
        memcpy(S + r * IG_CPU_TILE, acc[0], (size_t)nc * sizeof(float));
        memcpy(S + (r + 1) * IG_CPU_TILE, acc[1], (size_t)nc * sizeof(float));
    }
    for (; r < nr; r++) {
        float acc[IG_CPU_TILE] = {0};
        ig_cpu_acc64(acc, A + r * hs, 1, BT, IG_CPU_TILE, hs);
        memcpy(S + r * IG_CPU_TILE, acc, (size_t)nc * sizeof *acc);
    }
}

/* acc[0..hs) += sum over i < n, in order, of coef[i * cs] * rows[i * hs + 0..hs): registers for
 * hs = 64 (every GPT-2 size), the plain loop otherwise; the same bits either way */
IG_CPU_INLINE void ig_cpu_acc_rows(float *acc, const float *coef, size_t cs, const float *rows,
                                   int hs, int n) {
    if (hs == 64) {
        ig_cpu_acc64(acc, coef, cs, rows, 64, n);
        return;
    }
    for (int i = 0; i < n; i++) {
        float c = coef[(size_t)i * cs];
        const float *r = rows + (size_t)i * hs;
        for (int d = 0; d < hs; d++) acc[d] += c * r[d];
    }
}

/* ig_cpu_acc_rows for n_acc accumulator rows: acc + a * hs with coef + a * ca, in pairs where it
 * can */
IG_CPU_INLINE void ig_cpu_acc_rows_n(float *acc, const float *coef, size_t ca, size_t cs,
                                     const float *rows, int hs, int n, int n_acc) {
    int a = 0;
    if (hs == 64)
        for (; a + 2 <= n_acc; a += 2)
            ig_cpu_acc64x2(acc + a * 64, acc + (a + 1) * 64, coef + a * ca, coef + (a + 1) * ca, cs,
                           rows, 64, n);
    for (; a < n_acc; a++) ig_cpu_acc_rows(acc + a * hs, coef + a * ca, cs, rows, hs, n);
}

/* ---- helpers (cpu_backend.c, cpu_gemm.c) ----------------------------------------------------- */

/* Scratch for one kernel call: bytes from the context's allocator (64-byte aligned), or NULL
 * after raising IG_ERR_NOMEM on the backend (the kernel then returns without writing). Counted as
 * the backend's workspace (ig_backend_memory) until it is freed. */
void *ig_cpu_scratch(ig_backend *be, size_t bytes, const char *what);
void ig_cpu_scratch_free(ig_backend *be, void *p);

/* A normalisation's eps (a float, as a model config gives it) as the double that the kernels'
 * double sums add: the double nearest to the shortest decimal that reads back as eps (1e-5f ->
 * 1e-5), i.e. the number the config wrote, not the float's binary neighbour of it. */
double ig_cpu_eps(float eps);

/* The chunk size that cuts n items into about `parts` chunks, a multiple of `align` and at least
 * `align`: a function of n alone, so the chunks never depend on the thread count. */
size_t ig_cpu_chunk(size_t n, size_t parts, size_t align);

/* C[M, N] = op(A) @ op(B) + beta * C, row-major, on the calling thread only (oneDNN's sgemm with
 * one OpenMP thread, see cpu_gemm.c). ta: A is stored [K, M] (op = transpose), else [M, K]; tb: B
 * is stored [N, K], else [K, N]. Returns 0, or -1 when the library refused the call. */
int ig_cpu_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc);
/* Around every other call into oneDNN (its primitives: cpu_conv.c), on the thread that makes it:
 * enter sets that thread's OpenMP thread count to 1 and blocks the asynchronous signals, as
 * ig_cpu_sgemm does around its call; leave puts both back. A primitive created inside the frame
 * runs single-threaded wherever it is executed. */
typedef struct ig_cpu_dnnl_frame {
    sigset_t old;
    int threads;
} ig_cpu_dnnl_frame;
void ig_cpu_dnnl_enter(ig_cpu_dnnl_frame *f);
void ig_cpu_dnnl_leave(ig_cpu_dnnl_frame *f);

/* The CPU backend's state (be->impl of the fast backend; NULL for the reference): what the
 * convolutions and the bf16 GEMM keep between calls (cpu_conv.c, cpu_gemm.c: oneDNN's engine and
 * its primitives by shape), each made at its first call and freed with the backend. Touched only
 * by the thread that drives the backend; the backend's free calls ig_cpu_conv_cache_free and
 * ig_cpu_gemm_cache_free. */
typedef struct ig_cpu_impl {
    struct ig_cpu_conv_cache *conv;
    struct ig_cpu_gemm_cache *gemm; /* the bf16 GEMM's plans by shape (cpu_gemm.c) */
    struct ig_cpu_bf16 *bf16;       /* the bf16 table and its scratch (cpu_bf16.c); NULL in fp32 */
} ig_cpu_impl;
void ig_cpu_conv_cache_free(ig_backend *be);
void ig_cpu_gemm_cache_free(ig_backend *be);

/* ---- bf16 (cpu_gemm.c, cpu_matmul_bf16.c) -----------------------------------------------------
 */

/* 1 when the CPU has AVX512-BF16 or AMX-BF16 and the OS saves their registers (cpuid, xgetbv):
 * oneDNN's bf16 GEMM then runs on them. Without, oneDNN emulates bf16 on AVX-512 (slowly) or
 * refuses it (no AVX-512): callers refuse bf16 there. Any thread. */
int ig_cpu_has_bf16(void);

/* A bf16 GEMM of one shape, made once and kept in the backend's state (oneDNN's matmul
 * primitive, see cpu_gemm.c): C[M, N] (fp32, row stride ldc) = op(A) @ op(B), or + C when beta,
 * with A and B bf16 (uint16_t bits), row-major: ta: A is stored [K, M] (row stride lda), else
 * [M, K]; tb: B is stored [N, K], else [K, N]. Products are exact in fp32 and summed in fp32.
 * prepare finds or makes the plan: on the thread that drives the backend (it touches ig_cpu_impl),
 * the fast backend only, M, N, K > 0; NULL after raising on the backend. The plan stays valid until
 * BF16_CACHE (32) other shapes have been prepared after it, or the backend is freed: prepare a
 * call's shapes, run them, then prepare the next call's. */
typedef struct ig_cpu_gemm_bf16_plan ig_cpu_gemm_bf16_plan;
const ig_cpu_gemm_bf16_plan *ig_cpu_gemm_bf16_prepare(ig_backend *be, int ta, int tb, int M, int N,
                                                      int K, int lda, int ldb, int ldc, int beta,
                                                      const char *what);
/* Bytes of library scratchpad a run of p needs (0: none). */
size_t ig_cpu_gemm_bf16_scratchpad(const ig_cpu_gemm_bf16_plan *p);
/* The library's name for the kernel behind p (e.g. "brg:avx512_core_amx"), for benchmarks. */
const char *ig_cpu_gemm_bf16_impl(const ig_cpu_gemm_bf16_plan *p);
/* Runs p on the calling thread alone (one OpenMP thread, the asynchronous signals blocked, as
 * ig_cpu_sgemm) with scratchpad (ig_cpu_gemm_bf16_scratchpad bytes, 64-byte aligned, this
 * thread's own). Any thread, and several at once on one plan. The bits depend on p's shape only,
 * not on the operands' addresses. 0, or -1 when the library failed. */
int ig_cpu_gemm_bf16(const ig_cpu_gemm_bf16_plan *p, const uint16_t *A, const uint16_t *B, float *C,
                     void *scratchpad);

/* The matmul of backend.h (ig_kernel_matmul_forward / _backward, the same shapes, layouts and
 * accumulation) with every act tensor bf16 (uint16_t bits: out, inp, w, bias, dinp, dw, dbias,
 * dout), for the fast backend only (be->impl; it raises IG_ERR_UNSUPPORTED on the reference
 * one). The GEMMs run on bf16 operands with fp32 sums (ig_cpu_gemm_bf16) on cpu_matmul.c's tile
 * grid (ig_cpu_gemm_grid), so the bits are the same for any thread count; each output is rounded
 * once, to nearest even (ig_backend_bf16_from_f32):
 *   out  = bf16(fp32 sum of products + bias)
 *   dinp = bf16(dout @ W^T in fp32), overwritten (skipped when dinp is NULL)
 *   dw   = bf16(dw + (inp^T @ dout in fp32)), one rounding per call
 *   dbias = bf16(dbias + column sums of dout in double, in row order) (skipped when NULL)
 * Scratch (ig_cpu_scratch, freed before returning): per pool thread, one fp32 tile of the grid
 * plus the library's scratchpad (a few MB at GPT-2 small's shapes). No alignment is asked of the
 * tensors, and none has to stay at its address between calls (plans are kept by shape). */
void ig_cpu_bf16_matmul_forward(ig_backend *be, void *out, const void *inp, const void *w,
                                ig_w_layout layout, const void *bias, int N, int C, int OC);
void ig_cpu_bf16_matmul_backward(ig_backend *be, void *dinp, void *dw, void *dbias,
                                 const void *dout, const void *inp, const void *w,
                                 ig_w_layout layout, int N, int C, int OC);

/* The tile grid of a chunked GEMM C[M, N] over K (cpu_matmul.c): rows and columns per tile, a
 * function of the sizes only. */
void ig_cpu_gemm_grid(int M, int N, int K, size_t *rchunk, size_t *cchunk);

/* The GEMMs of the matmul op (cpu_matmul.c), the same in fp32 and bf16: C[M, N] = op(A) @ op(B)
 * over K, A and B each one of the op's operands (inp, w, dout), row-major with the transposes and
 * strides of ig_cpu_sgemm; out (IG_MM_OUT: = inp @ W), dinp (IG_MM_DINP: = dout @ W^T) or the
 * weight's gradient in W's layout (IG_MM_DW: inp^T @ dout or dout^T @ inp). */
typedef enum ig_cpu_mm { IG_MM_OUT = 0, IG_MM_DINP, IG_MM_DW } ig_cpu_mm;
typedef enum ig_cpu_mm_operand { IG_MM_INP = 0, IG_MM_W, IG_MM_DOUT } ig_cpu_mm_operand;
typedef struct ig_cpu_mm_gemm {
    int ta, tb, M, N, K, lda, ldb, ldc;
    ig_cpu_mm_operand a, b;
} ig_cpu_mm_gemm;
ig_cpu_mm_gemm ig_cpu_matmul_gemm(ig_cpu_mm which, ig_w_layout layout, int N, int C, int OC);

/* bf16 act tensors (cpu_bf16.c): sets be->ops to kernels that widen their bf16 tensors, run
 * base's fp32 kernel and round each output once (the CUDA backend's rounding points). be->impl
 * exists. ig_cpu_bf16_free (NULL-safe) frees what setup made. */
ig_status ig_cpu_bf16_setup(ig_backend *be, const ig_backend_ops *base, ig_err *err);
void ig_cpu_bf16_free(ig_backend *be);

/* A bf16 kernel call's widened tensors (cpu_bf16.c; its kernels there and in
 * cpu_bf16_attention.c): begin gives the fp32 table; in widens a bf16 tensor into scratch, out
 * gives scratch for an output the fp32 kernel overwrites whole, take raw scratch (all NULL for a
 * NULL tensor, or after a failure, raised on the backend); the call goes on when IG_BF_READY;
 * put rounds an fp32 result into its bf16 tensor; end gives the scratch back. Scratch is one arena
 * kept by the backend, grown to the largest call's need; convert widens (narrow 0) or rounds n
 * elements on the pool. */
#define IG_BF_EXTRA 16
typedef struct ig_bf_frame {
    ig_backend *be;
    struct ig_cpu_bf16 *x;
    size_t used, total;       /* floats of the arena taken, and asked for in all */
    void *extra[IG_BF_EXTRA]; /* blocks past the arena's end, freed by end */
    int n_extra, failed;
} ig_bf_frame;
#define IG_BF_READY(f) (!(f).failed)
const ig_backend_ops *ig_bf_begin(ig_bf_frame *f, ig_backend *be);
float *ig_bf_take(ig_bf_frame *f, size_t n);
float *ig_bf_in(ig_bf_frame *f, const void *src, size_t n);
float *ig_bf_out(ig_bf_frame *f, const void *dst, size_t n);
void ig_bf_put(ig_bf_frame *f, void *dst, const float *src, size_t n);
void ig_bf_end(ig_bf_frame *f);
void ig_bf_convert(ig_backend *be, void *dst, const void *src, size_t n, int narrow);
/* cpu_bf16_attention.c's entries of the table: self-, cached, biased and cross-attention, T5's
 * position bias, DiT's modulation and gates */
void ig_cpu_bf16_attention_ops(ig_backend_ops *t);

/* The library's name and version, e.g. "oneDNN 2.6.3". */
const char *ig_cpu_gemm_library(char *buf, size_t cap);

/* ---- kernels: reference (ig_cpu_ref_*) and fast (ig_cpu_*) ----------------------------------- */

#define IG_CPU_DECLARE(name, ...)                                                                  \
    void ig_cpu_ref_##name(ig_backend *be, __VA_ARGS__);                                           \
    void ig_cpu_##name(ig_backend *be, __VA_ARGS__);

IG_CPU_DECLARE(encoder_forward, void *out, const int32_t *tokens, const void *wte, const void *wpe,
               int B, int T, int C)
IG_CPU_DECLARE(encoder_backward, void *dwte, void *dwpe, const void *dout, const int32_t *tokens,
               int B, int T, int C)
IG_CPU_DECLARE(layernorm_forward, void *out, float *mean, float *rstd, const void *inp,
               const void *w, const void *b, int N, int C, float eps)
IG_CPU_DECLARE(residual_layernorm_forward, void *residual, void *out, float *mean, float *rstd,
               const void *a, const void *b_in, const void *w, const void *b, int N, int C,
               float eps)
IG_CPU_DECLARE(layernorm_backward, void *dinp, void *dw, void *db, const void *dout,
               const void *inp, const void *w, const float *mean, const float *rstd, int N, int C)
IG_CPU_DECLARE(rmsnorm_forward, void *out, float *rstd, const void *inp, const void *w, int N,
               int C, float eps)
IG_CPU_DECLARE(residual_rmsnorm_forward, void *residual, void *out, float *rstd, const void *a,
               const void *b, const void *w, int N, int C, float eps)
IG_CPU_DECLARE(rmsnorm_backward, void *dinp, void *dw, const void *dout, const void *inp,
               const void *w, const float *rstd, int N, int C)
IG_CPU_DECLARE(matmul_forward, void *out, const void *inp, const void *w, ig_w_layout layout,
               const void *bias, int N, int C, int OC)
IG_CPU_DECLARE(matmul_backward, void *dinp, void *dw, void *dbias, const void *dout,
               const void *inp, const void *w, ig_w_layout layout, int N, int C, int OC)
IG_CPU_DECLARE(gelu_bias_forward, void *out, const void *inp, const void *bias, int N, int C)
IG_CPU_DECLARE(gelu_bias_backward, void *dinp, void *dbias, const void *dout, const void *inp,
               const void *bias, int N, int C)
IG_CPU_DECLARE(swiglu_forward, void *out, const void *gate, const void *up, int N, int F)
IG_CPU_DECLARE(swiglu_backward, void *dgate, void *dup, const void *dout, const void *gate,
               const void *up, int N, int F)
IG_CPU_DECLARE(rope_forward, void *qkv, int B, int T, int n_head, int n_kv_head, int hs, int pos0,
               float theta)
IG_CPU_DECLARE(rope_backward, void *dqkv, int B, int T, int n_head, int n_kv_head, int hs, int pos0,
               float theta)
IG_CPU_DECLARE(attention_forward, void *out, float *lse, const void *qkv, const int32_t *doc,
               const ig_attention_shape *s)
IG_CPU_DECLARE(attention_backward, void *dqkv, const void *dout, const void *qkv, const void *out,
               const float *lse, const int32_t *doc, const ig_attention_shape *s)
IG_CPU_DECLARE(attention_cached, void *out, const void *q, const void *k, const void *v, int pos0,
               int Tmax, const ig_attention_shape *s)
IG_CPU_DECLARE(crossentropy, float *losses, void *logits, const int32_t *targets,
               const float *dloss, int N, int V, int Vp)
IG_CPU_DECLARE(ce_max, float *rowmax, const void *logits, int N, int Vvalid, int Vl)
IG_CPU_DECLARE(ce_sums, float *stats, const void *logits, const float *rowmax,
               const int32_t *targets, int N, int Vvalid, int Vl)
IG_CPU_DECLARE(ce_finish, float *losses, void *logits, const float *rowmax, const float *stats,
               const int32_t *targets, const float *dloss, int N, int Vvalid, int Vl)
IG_CPU_DECLARE(layernorm_modulate_forward, void *out, float *mean, float *rstd, const void *inp,
               const void *shift, const void *scale, int ld, int N, int C, int row0,
               int rows_per_sample, float eps)
IG_CPU_DECLARE(layernorm_modulate_backward, void *dinp, void *dshift, void *dscale,
               const void *dout, const void *inp, const void *scale, int ld, const float *mean,
               const float *rstd, int N, int C, int row0, int rows_per_sample)
IG_CPU_DECLARE(gate_residual_forward, void *out, const void *res, const void *x, const void *gate,
               int ld, int N, int C, int row0, int rows_per_sample)
IG_CPU_DECLARE(gate_residual_backward, void *dx, void *dgate, const void *dout, const void *x,
               const void *gate, int ld, int N, int C, int row0, int rows_per_sample)
IG_CPU_DECLARE(silu_forward, void *out, const void *inp, size_t n)
IG_CPU_DECLARE(silu_backward, void *dinp, const void *dout, const void *inp, size_t n)
IG_CPU_DECLARE(relu_forward, void *out, const void *inp, size_t n)
IG_CPU_DECLARE(mse, float *losses, void *dpred, const void *pred, const void *target, int N, int K,
               float grad_scale)
IG_CPU_DECLARE(add, void *out, const void *a, const void *b, size_t n)
IG_CPU_DECLARE(adamw, void *params, float *master, const void *grads, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
               int step)
IG_CPU_DECLARE(scale, void *x, size_t n, float s)
IG_CPU_DECLARE(ema, float *ema, const float *master, const void *params, size_t n, float decay)
IG_CPU_DECLARE(cross_attention_forward, void *out, float *lse, const void *q, const void *kv,
               const int32_t *klen, int N, int row0, int rows_per_sample, int Tk, int n_head,
               int head_size)
IG_CPU_DECLARE(cross_attention_backward, void *dq, void *dkv, const void *dout, const void *q,
               const void *kv, const void *out, const float *lse, const int32_t *klen, int N,
               int row0, int rows_per_sample, int Tk, int n_head, int head_size)

IG_CPU_DECLARE(conv2d_forward, void *out, const void *inp, const void *w, const void *bias,
               const ig_conv2d_shape *s)
IG_CPU_DECLARE(conv2d_backward, void *dinp, void *dw, void *dbias, const void *dout,
               const void *inp, const void *w, const ig_conv2d_shape *s)
IG_CPU_DECLARE(groupnorm_forward, void *out, float *mean, float *rstd, const void *inp,
               const void *w, const void *b, int N, int HW, int C, int G, float eps, int silu)
IG_CPU_DECLARE(groupnorm_backward, void *dinp, void *dw, void *db, const void *dout,
               const void *inp, const void *w, const void *b, const float *mean, const float *rstd,
               int N, int HW, int C, int G, int silu)
IG_CPU_DECLARE(upsample2x_forward, void *out, const void *inp, int N, int H, int W, int C)
IG_CPU_DECLARE(upsample2x_backward, void *dinp, const void *dout, int N, int H, int W, int C)
IG_CPU_DECLARE(l1, float *losses, void *dpred, const void *pred, const void *target, int N, int K,
               float grad_scale)
IG_CPU_DECLARE(posterior_forward, void *z, float *kl, const void *moments, const void *eps, int N,
               int C)
IG_CPU_DECLARE(posterior_backward, void *dmoments, const void *dz, const void *moments,
               const void *eps, int N, int C, float kl_scale)
IG_CPU_DECLARE(geglu_forward, void *out, const void *gate, const void *up, int N, int F)
IG_CPU_DECLARE(geglu_backward, void *dgate, void *dup, const void *dout, const void *gate,
               const void *up, int N, int F)
IG_CPU_DECLARE(t5_position_bias, void *bias, const void *table, int T, int n_head, int num_buckets,
               int max_distance, int bidirectional)
IG_CPU_DECLARE(attention_bias_forward, void *out, float *lse, const void *qkv, const void *bias,
               const int32_t *klen, const ig_attention_shape *s)

double ig_cpu_ref_sum_squares(ig_backend *be, const void *x, size_t n);
double ig_cpu_sum_squares(ig_backend *be, const void *x, size_t n);

/* The optimizer's whole-buffer kernels on bf16 act tensors (params, grads, x: uint16_t bits), for
 * cpu_bf16.c's fast table: the fast fp32 kernels' loops and chunks reading bf16 and rounding what
 * they write, element by element, so the bits are those of the fp32 kernel on widened tensors
 * rounded once, without an fp32 copy of every gradient (cpu_optimizer.c). */
void ig_cpu_bf16_adamw(ig_backend *be, void *params, float *master, const void *grads, float *m,
                       float *v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, int step);
double ig_cpu_bf16_sum_squares(ig_backend *be, const void *x, size_t n);
void ig_cpu_bf16_scale(ig_backend *be, void *x, size_t n, float s);

/* Column sums of x [N, C] added to acc [C] (acc[c] += sum over rows in row order, in double),
 * threaded over chunks of columns: shared by the bias gradients. */
void ig_cpu_column_sums_add(ig_backend *be, float *acc, const float *x, int N, int C);
/* The same sums of bf16 x [N, C] added to bf16 acc [C]: acc[c] = bf16((float)(acc[c] + sum)),
 * the sum in double in row order (bf16 matmul's dbias). */
void ig_cpu_column_sums_add_bf16(ig_backend *be, uint16_t *acc, const uint16_t *x, int N, int C);

#endif /* INGOT_KERNELS_CPU_INTERNAL_H */
