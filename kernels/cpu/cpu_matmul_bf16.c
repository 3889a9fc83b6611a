/* cpu_matmul_bf16.c - the matmul (Conv1D / Linear) forward and backward on bf16 tensors, through
 * oneDNN's bf16 GEMM (cpu_gemm.c: its matmul primitive, on AMX or AVX512-BF16), for the CPU
 * backend's bf16 act type (cpu_bf16.c calls these instead of widening the operands to fp32).
 *
 * The GEMMs read the bf16 operands where they lie (a transposed operand in place) and sum the
 * exact products in fp32. Each is cut into cpu_matmul.c's grid of tiles (ig_cpu_gemm_grid, a
 * function of the sizes only); a tile is one single-threaded library call into a fp32 tile of
 * the worker's scratch, then finished on the same thread while it is in cache: the bias added
 * (forward) or the old gradient (dw), and each element rounded once to bf16. Every output element
 * comes from one library call whose shape depends on the sizes only, so the bits are the same
 * for any thread count. The operands are not copied: where a tile's block of B (or of a
 * transposed A) is not dense, oneDNN 2.6 runs its gemm kernel instead of its AMX brgemm, but
 * copying the block dense first (brgemm then) made the whole call slower, forward and dW alike
 * (measured at GPT-2 small's shapes on one thread; both kernels copy the operands into their own
 * blocked layout, so the copy was likely paid twice). The old dw is added after the GEMM rather
 * than by its sum post-op (beta 1): one pass over the tile instead of two (widening dw into the
 * tile first), the same rounding, and the post-op slowed a 256 x 384 dW tile's GEMM by 8-20% in
 * four runs of bench_kernels out of five on the (loaded) development machine. dbias sums dout's
 * columns in double in row order (ig_cpu_column_sums_add_bf16), as the fp32 matmul.
 *
 * Shapes: inp [N, C], out [N, OC], W [C, OC] (IG_W_IN_OUT) or [OC, C] (IG_W_OUT_IN), bias [OC].
 */
#include <stdatomic.h>

#include "cpu_internal.h"

/* what a tile's fp32 sums become */
enum { FIN_SET, FIN_BIAS, FIN_ADD };

typedef struct bf16_job {
    ig_cpu_mm_gemm g; /* the shapes, transposes and strides (ig_cpu_matmul_gemm) */
    const uint16_t *A, *B;
    uint16_t *C;          /* bf16 [M, N], row stride ldc */
    int finish;           /* FIN_*: C = bf16(sums), bf16(sums + bias[col]), bf16(C + sums) */
    const uint16_t *bias; /* FIN_BIAS: [N] */
    size_t rchunk, cchunk, ncols;
    const ig_cpu_gemm_bf16_plan *plan[2][2]; /* [last row of tiles][last column of tiles] */
    char *scratch;                           /* per worker: worker_bytes */
    size_t tile_bytes, worker_bytes;         /* the fp32 tile, then the library's scratchpad */
    atomic_int failed;
} bf16_job;

IG_CPU_CLONES
static void finish_rows(const bf16_job *j, float *T, size_t r0, size_t r1, size_t c0, size_t nc) {
    for (size_t r = r0; r < r1; r++) {
        float *t = T + (r - r0) * j->cchunk;
        uint16_t *dst = j->C + r * (size_t)j->g.ldc + c0;
        if (j->finish == FIN_BIAS)
            for (size_t k = 0; k < nc; k++) t[k] = t[k] + ig_bf16_to_f32(j->bias[c0 + k]);
        else if (j->finish == FIN_ADD)
            for (size_t k = 0; k < nc; k++) t[k] = ig_bf16_to_f32(dst[k]) + t[k];
        ig_backend_bf16_from_f32_n(dst, t, nc);
    }
}

static void bf16_chunk(void *arg, size_t b, size_t e, int worker) {
    bf16_job *j = arg;
    char *mine = j->scratch + (size_t)worker * j->worker_bytes;
    float *T = (float *)mine;
    for (size_t ci = b; ci < e; ci++) {
        size_t r = ci / j->ncols, c = ci % j->ncols;
        size_t r0 = r * j->rchunk, r1 = r0 + j->rchunk, c0 = c * j->cchunk, c1 = c0 + j->cchunk;
        if (r1 > (size_t)j->g.M) r1 = (size_t)j->g.M;
        if (c1 > (size_t)j->g.N) c1 = (size_t)j->g.N;
        const uint16_t *A = j->g.ta ? j->A + r0 : j->A + r0 * (size_t)j->g.lda;
        const uint16_t *B = j->g.tb ? j->B + c0 * (size_t)j->g.ldb : j->B + c0;
        const ig_cpu_gemm_bf16_plan *p = j->plan[r1 - r0 != j->rchunk][c1 - c0 != j->cchunk];
        if (j->g.K <= 0) /* an empty sum */
            memset(T, 0, j->tile_bytes);
        else if (ig_cpu_gemm_bf16(p, A, B, T, mine + j->tile_bytes) != 0) {
            atomic_store_explicit(&j->failed, 1, memory_order_relaxed);
            continue;
        }
        finish_rows(j, T, r0, r1, c0, c1 - c0);
    }
}

static void bf16_run(ig_backend *be, bf16_job *j, const char *what) {
    if (j->g.M <= 0 || j->g.N <= 0) return;
    ig_cpu_gemm_grid(j->g.M, j->g.N, j->g.K, &j->rchunk, &j->cchunk);
    size_t nrows = ((size_t)j->g.M + j->rchunk - 1) / j->rchunk;
    j->ncols = ((size_t)j->g.N + j->cchunk - 1) / j->cchunk;
    /* the tiles' shapes: full, and the last row and column of the grid where they are shorter */
    int rows[2] = {(int)j->rchunk, j->g.M - (int)((nrows - 1) * j->rchunk)};
    int cols[2] = {(int)j->cchunk, j->g.N - (int)((j->ncols - 1) * j->cchunk)};
    if (nrows == 1) rows[0] = rows[1];
    if (j->ncols == 1) cols[0] = cols[1];
    size_t pad = 0;
    if (j->g.K > 0)
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                j->plan[a][b] =
                    ig_cpu_gemm_bf16_prepare(be, j->g.ta, j->g.tb, rows[a], cols[b], j->g.K,
                                             j->g.lda, j->g.ldb, (int)j->cchunk, 0, what);
                if (!j->plan[a][b]) return;
                size_t s = ig_cpu_gemm_bf16_scratchpad(j->plan[a][b]);
                pad = s > pad ? s : pad;
            }
    j->tile_bytes = (j->rchunk * j->cchunk * sizeof(float) + 63) / 64 * 64;
    j->worker_bytes = j->tile_bytes + (pad + 63) / 64 * 64;
    j->scratch = ig_cpu_scratch(be, (size_t)ig_ctx_threads(be->ctx) * j->worker_bytes, what);
    if (!j->scratch) return;
    atomic_init(&j->failed, 0);
    ig_parallel_range(be->ctx, nrows * j->ncols, 1, bf16_chunk, j);
    if (atomic_load(&j->failed))
        ig_backend_raise(be, IG_ERR_INTERNAL, "%s: the GEMM library failed a %dx%dx%d bf16 GEMM",
                         what, j->g.M, j->g.N, j->g.K);
    ig_cpu_scratch_free(be, j->scratch);
}

/* The bf16 job of one of the matmul's GEMMs (ig_cpu_matmul_gemm, cpu_matmul.c) into C. */
static void matmul_gemm(ig_backend *be, ig_cpu_mm which, ig_w_layout layout, int N, int C, int OC,
                        const uint16_t *const operands[3], uint16_t *dst, int finish,
                        const uint16_t *bias, const char *what) {
    ig_cpu_mm_gemm g = ig_cpu_matmul_gemm(which, layout, N, C, OC);
    bf16_job j = {
        .g = g, .A = operands[g.a], .B = operands[g.b], .C = dst, .finish = finish, .bias = bias};
    bf16_run(be, &j, what);
}

void ig_cpu_bf16_matmul_forward(ig_backend *be, void *out, const void *inp, const void *w,
                                ig_w_layout layout, const void *bias, int N, int C, int OC) {
    const uint16_t *ops[3] = {inp, w, NULL};
    matmul_gemm(be, IG_MM_OUT, layout, N, C, OC, ops, out, bias ? FIN_BIAS : FIN_SET, bias,
                "bf16 matmul_forward");
}

void ig_cpu_bf16_matmul_backward(ig_backend *be, void *dinp, void *dw, void *dbias,
                                 const void *dout, const void *inp, const void *w,
                                 ig_w_layout layout, int N, int C, int OC) {
    const uint16_t *ops[3] = {inp, w, dout};
    if (dinp)
        matmul_gemm(be, IG_MM_DINP, layout, N, C, OC, ops, dinp, FIN_SET, NULL,
                    "bf16 matmul_backward (dinp)");
    matmul_gemm(be, IG_MM_DW, layout, N, C, OC, ops, dw, FIN_ADD, NULL,
                "bf16 matmul_backward (dW)");
    if (dbias) ig_cpu_column_sums_add_bf16(be, dbias, dout, N, OC);
}
