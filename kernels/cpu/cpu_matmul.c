/* cpu_matmul.c - the matmul (Conv1D / Linear) forward and backward on the CPU, and the column
 * sums the bias gradients share.
 *
 * Reference: triple loops with double sums. Fast: oneDNN's sgemm (cpu_gemm.c) on fixed tiles of
 * the output: a grid of gr x gc = 16 tiles (multiples of 64 rows and columns), each one
 * single-threaded sgemm on the pool. Each tile packs its rows of A and its columns of B, so the
 * grid is the one that packs least (gc copies of A and gr of B): cutting one dimension only into
 * 16 packed the other operand 16 times, which held the backward's GEMMs at 0.7-0.85 of the
 * library's speed (bench_train). Every output element comes from one library call whose shape
 * depends on the sizes only, so the bits are the same for any thread count; the bias is written
 * into the output before the sgemm adds to it (beta = 1).
 *
 * Shapes: inp [N, C], out [N, OC], W [C, OC] (IG_W_IN_OUT) or [OC, C] (IG_W_OUT_IN), bias [OC].
 * The bf16 matmul (cpu_matmul_bf16.c) shares the grid (ig_cpu_gemm_grid) and the column sums.
 */
#include <stdatomic.h>

#include "cpu_internal.h"

#define GEMM_PARTS 16 /* chunks per GEMM: enough to balance 2-8 threads */
#define GEMM_ALIGN 64 /* chunk sizes are multiples of this many rows or columns */
#define COLSUM_W   64 /* columns per chunk of a column sum */

/* ---- reference ------------------------------------------------------------------------------- */

static float w_at(const float *w, ig_w_layout layout, int c, int o, int C, int OC) {
    return layout == IG_W_IN_OUT ? w[(size_t)c * OC + o] : w[(size_t)o * C + c];
}

void ig_cpu_ref_matmul_forward(ig_backend *be, void *out_, const void *inp_, const void *w_,
                               ig_w_layout layout, const void *bias_, int N, int C, int OC) {
    (void)be;
    float *out = out_;
    const float *inp = inp_, *w = w_, *bias = bias_;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++)
                acc += (double)inp[(size_t)n * C + c] * w_at(w, layout, c, o, C, OC);
            out[(size_t)n * OC + o] = (float)acc;
        }
}

void ig_cpu_ref_matmul_backward(ig_backend *be, void *dinp_, void *dw_, void *dbias_,
                                const void *dout_, const void *inp_, const void *w_,
                                ig_w_layout layout, int N, int C, int OC) {
    (void)be;
    float *dinp = dinp_, *dw = dw_, *dbias = dbias_;
    const float *dout = dout_, *inp = inp_, *w = w_;
    if (dinp)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int o = 0; o < OC; o++)
                    acc += (double)dout[(size_t)n * OC + o] * w_at(w, layout, c, o, C, OC);
                dinp[(size_t)n * C + c] = (float)acc;
            }
    for (int c = 0; c < C; c++)
        for (int o = 0; o < OC; o++) {
            double acc = 0;
            for (int n = 0; n < N; n++)
                acc += (double)inp[(size_t)n * C + c] * dout[(size_t)n * OC + o];
            size_t i = layout == IG_W_IN_OUT ? (size_t)c * OC + o : (size_t)o * C + c;
            dw[i] = (float)(dw[i] + acc);
        }
    if (dbias)
        for (int o = 0; o < OC; o++) {
            double acc = 0;
            for (int n = 0; n < N; n++) acc += dout[(size_t)n * OC + o];
            dbias[o] = (float)(dbias[o] + acc);
        }
}

/* ---- fast: chunked GEMM ---------------------------------------------------------------------- */

/* C[M, N] = op(A) @ op(B) (+ bias[N] broadcast over rows, or + beta * C), cut into a grid of
 * tiles. */
typedef struct gemm_job {
    ig_cpu_mm_gemm g; /* the shapes, transposes and strides (ig_cpu_matmul_gemm) */
    const float *A, *B;
    float beta;
    float *C;
    const float *bias;     /* NULL, or [N]: written into C first, then beta = 1 */
    size_t rchunk, cchunk; /* rows and columns per tile */
    size_t ncols;          /* tiles per row of the grid */
    atomic_int failed;
} gemm_job;

static void gemm_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    gemm_job *j = arg;
    for (size_t ci = b; ci < e; ci++) {
        size_t r = ci / j->ncols, c = ci % j->ncols;
        size_t r0 = r * j->rchunk, r1 = r0 + j->rchunk, c0 = c * j->cchunk, c1 = c0 + j->cchunk;
        if (r1 > (size_t)j->g.M) r1 = (size_t)j->g.M;
        if (c1 > (size_t)j->g.N) c1 = (size_t)j->g.N;
        const float *A = j->g.ta ? j->A + r0 : j->A + r0 * (size_t)j->g.lda;
        const float *B = j->g.tb ? j->B + c0 * (size_t)j->g.ldb : j->B + c0;
        float *C = j->C + r0 * (size_t)j->g.ldc + c0;
        float beta = j->beta;
        if (j->bias) {
            for (size_t rr = r0; rr < r1; rr++)
                for (size_t cc = c0; cc < c1; cc++) j->C[rr * (size_t)j->g.ldc + cc] = j->bias[cc];
            beta = 1.0f;
        }
        if (ig_cpu_sgemm(j->g.ta, j->g.tb, (int)(r1 - r0), (int)(c1 - c0), j->g.K, A, j->g.lda, B,
                         j->g.ldb, beta, C, j->g.ldc) != 0)
            atomic_store_explicit(&j->failed, 1, memory_order_relaxed);
    }
}

/* the grid gr x gc = GEMM_PARTS that packs the fewest elements: gc copies of A [M, K] and gr of
 * B [K, N] (a function of the sizes only) */
void ig_cpu_gemm_grid(int M, int N, int K, size_t *rchunk, size_t *cchunk) {
    double best = 0;
    size_t gr_best = GEMM_PARTS;
    for (size_t gc = 1; gc <= GEMM_PARTS; gc *= 2) {
        size_t gr = GEMM_PARTS / gc;
        double cost = (double)gc * M * K + (double)gr * K * N;
        if (gc == 1 || cost < best) best = cost, gr_best = gr;
    }
    *rchunk = ig_cpu_chunk((size_t)M, gr_best, GEMM_ALIGN);
    *cchunk = ig_cpu_chunk((size_t)N, GEMM_PARTS / gr_best, GEMM_ALIGN);
}

static void gemm_run(ig_backend *be, gemm_job *j, const char *what) {
    if (j->g.M <= 0 || j->g.N <= 0) return;
    ig_cpu_gemm_grid(j->g.M, j->g.N, j->g.K, &j->rchunk, &j->cchunk);
    size_t nrows = ((size_t)j->g.M + j->rchunk - 1) / j->rchunk;
    j->ncols = ((size_t)j->g.N + j->cchunk - 1) / j->cchunk;
    atomic_init(&j->failed, 0);
    ig_parallel_range(be->ctx, nrows * j->ncols, 1, gemm_chunk, j);
    if (atomic_load(&j->failed))
        ig_backend_raise(be, IG_ERR_INTERNAL, "%s: the GEMM library refused a %dx%dx%d sgemm", what,
                         j->g.M, j->g.N, j->g.K);
}

ig_cpu_mm_gemm ig_cpu_matmul_gemm(ig_cpu_mm which, ig_w_layout layout, int N, int C, int OC) {
    int in_out = layout == IG_W_IN_OUT;
    switch (which) {
    case IG_MM_OUT: /* out[N, OC] = inp[N, C] @ W (IN_OUT: W [C, OC]; OUT_IN: W^T, W [OC, C]) */
        return (ig_cpu_mm_gemm){0, !in_out, N, OC, C, C, in_out ? OC : C, OC, IG_MM_INP, IG_MM_W};
    case IG_MM_DINP: /* dinp[N, C] = dout[N, OC] @ W^T: W^T is [OC, C] */
        return (ig_cpu_mm_gemm){0, in_out, N, C, OC, OC, in_out ? OC : C, C, IG_MM_DOUT, IG_MM_W};
    case IG_MM_DW:
    default:
        if (in_out) /* dW[C, OC] += inp^T @ dout */
            return (ig_cpu_mm_gemm){1, 0, C, OC, N, C, OC, OC, IG_MM_INP, IG_MM_DOUT};
        /* dW[OC, C] += dout^T @ inp */
        return (ig_cpu_mm_gemm){1, 0, OC, C, N, OC, C, C, IG_MM_DOUT, IG_MM_INP};
    }
}

/* The fp32 job of one of the matmul's GEMMs into C (beta 0: overwritten, 1: added to). */
static void matmul_gemm(ig_backend *be, ig_cpu_mm which, ig_w_layout layout, int N, int C, int OC,
                        const float *const operands[3], float *dst, float beta, const float *bias,
                        const char *what) {
    ig_cpu_mm_gemm g = ig_cpu_matmul_gemm(which, layout, N, C, OC);
    gemm_job j = {
        .g = g, .A = operands[g.a], .B = operands[g.b], .beta = beta, .C = dst, .bias = bias};
    gemm_run(be, &j, what);
}

void ig_cpu_matmul_forward(ig_backend *be, void *out, const void *inp, const void *w,
                           ig_w_layout layout, const void *bias, int N, int C, int OC) {
    const float *ops[3] = {inp, w, NULL};
    matmul_gemm(be, IG_MM_OUT, layout, N, C, OC, ops, out, 0.0f, bias, "matmul_forward");
}

void ig_cpu_matmul_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                            const void *inp, const void *w, ig_w_layout layout, int N, int C,
                            int OC) {
    const float *ops[3] = {inp, w, dout};
    if (dinp)
        matmul_gemm(be, IG_MM_DINP, layout, N, C, OC, ops, dinp, 0.0f, NULL,
                    "matmul_backward (dinp)");
    matmul_gemm(be, IG_MM_DW, layout, N, C, OC, ops, dw, 1.0f, NULL, "matmul_backward (dW)");
    if (dbias) ig_cpu_column_sums_add(be, dbias, dout, N, OC);
}

/* ---- column sums (bias gradients) ------------------------------------------------------------ */

typedef struct colsum_job {
    float *acc;
    const float *x;
    uint16_t *acc16; /* bf16: acc16 and x16 instead of acc and x */
    const uint16_t *x16;
    int N, C;
} colsum_job;

IG_CPU_CLONES
static void colsum_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    colsum_job *j = arg;
    for (size_t ci = b; ci < e; ci++) {
        int c0 = (int)ci * COLSUM_W, w = j->C - c0 < COLSUM_W ? j->C - c0 : COLSUM_W;
        double s[COLSUM_W] = {0};
        if (j->x16)
            for (int n = 0; n < j->N; n++) {
                const uint16_t *row = j->x16 + (size_t)n * j->C + c0;
                for (int k = 0; k < w; k++) s[k] += ig_bf16_to_f32(row[k]);
            }
        else
            for (int n = 0; n < j->N; n++) {
                const float *row = j->x + (size_t)n * j->C + c0;
                for (int k = 0; k < w; k++) s[k] += row[k];
            }
        if (j->acc16)
            for (int k = 0; k < w; k++) {
                uint16_t *a = &j->acc16[c0 + k];
                *a = ig_backend_bf16_from_f32((float)(ig_backend_bf16_to_f32(*a) + s[k]));
            }
        else
            for (int k = 0; k < w; k++) j->acc[c0 + k] = (float)(j->acc[c0 + k] + s[k]);
    }
}

void ig_cpu_column_sums_add(ig_backend *be, float *acc, const float *x, int N, int C) {
    colsum_job j = {.acc = acc, .x = x, .N = N, .C = C};
    ig_parallel_range(be->ctx, ((size_t)C + COLSUM_W - 1) / COLSUM_W, 1, colsum_chunk, &j);
}

void ig_cpu_column_sums_add_bf16(ig_backend *be, uint16_t *acc, const uint16_t *x, int N, int C) {
    colsum_job j = {.acc16 = acc, .x16 = x, .N = N, .C = C};
    ig_parallel_range(be->ctx, ((size_t)C + COLSUM_W - 1) / COLSUM_W, 1, colsum_chunk, &j);
}
