/* cuda_matmul.cu - the matmul (Conv1D / Linear) forward and backward through cuBLASLt, and the
 * deterministic column sums behind every bias gradient.
 *
 * cuBLASLt is column-major; a row-major [R, K] matrix is the column-major [K, R] matrix with
 * leading dimension K, its transpose. So each row-major product below is written as its
 * transpose, column-major (m, n, k are the column-major sizes):
 *   forward   out[N, OC] = inp[N, C] @ W:      out^T[OC, N] = W'[OC, C] @ inp^T[C, N]
 *             IN_OUT: W [C, OC] is col-major [OC, C] (no transpose); OUT_IN: W [OC, C] is
 *             col-major [C, OC] (transposed). The bias is the BIAS epilogue (a vector of m = OC
 *             rows broadcast over the N columns), when it is 16-byte aligned; otherwise the bias
 *             rows are written into out first and the GEMM adds to them (beta = 1).
 *   dinp      dinp[N, C] = dout[N, OC] @ W^T:  dinp^T[C, N] = W''[C, OC] @ dout^T[OC, N]
 *             IN_OUT: col-major W is [OC, C] (transposed); OUT_IN: [C, OC] (no transpose).
 *   dW        IN_OUT: dW[C, OC] += inp^T @ dout:  dW^T[OC, C] += dout^T[OC, N] @ inp[N, C]
 *             (inp is col-major [C, N]: transposed); OUT_IN: dW[OC, C] += dout^T @ inp:
 *             dW^T[C, OC] += inp^T[C, N] @ dout[N, OC] (dout col-major [OC, N]: transposed).
 * Inputs are the act type (bf16 or fp32), compute and scale are fp32 (CUBLAS_COMPUTE_32F: no TF32,
 * so the fp32 backend matches the CPU to 1e-4), outputs the act type.
 *
 * Determinism: cuBLAS gives the same bits on every run on the same GPU model and library
 * version (its documented reproducibility; the heuristic picks the same algorithm for the same
 * shapes and alignments). Bias gradients never use the BGRADB epilogue (it overwrites, and +=
 * is wanted) but cu_column_sums_add: chunks of cu_colsum_rows(N) rows per block into fp32
 * partials, then one thread per column adds the partials in chunk order.
 */
#include "cuda_internal.h"

/* Largest power of two (<= 256) dividing a (an address or a byte offset): the alignment
 * cuBLASLt may assume. */
static uint32_t alignment_of(uintptr_t a) {
    uint32_t al = 256;
    while (al > 1 && a % al) al /= 2;
    return al;
}

static size_t type_size(cudaDataType_t t) {
    return t == CUDA_R_16BF ? 2 : 4;
}

/* ---- the cuBLASLt call ------------------------------------------------------------------------
 */

int cu_gemm_run(ig_backend *be, const cu_gemm *g, const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    if (g->m <= 0 || g->n <= 0) return 1;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    int ok = 1;
#define LT(call) (ok = ok && cu_blas_ok(be, (call), what))
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (ok) LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    if (ok) LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (ok && g->bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = g->d;
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (ok)
            LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                              sizeof bt));
        if (ok)
            LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                              sizeof g->bias));
    }
    /* stored shapes: A is [m, k] or, transposed, [k, m]; B is [k, n] or [n, k]; D is [m, n] */
    if (ok)
        LT(cublasLtMatrixLayoutCreate(&la, g->ab, g->transa ? g->k : g->m, g->transa ? g->m : g->k,
                                      g->lda));
    if (ok)
        LT(cublasLtMatrixLayoutCreate(&lb, g->ab, g->transb ? g->n : g->k, g->transb ? g->k : g->n,
                                      g->ldb));
    if (ok) LT(cublasLtMatrixLayoutCreate(&ld, g->d, g->m, g->n, g->ldd));
    if (ok && g->batch > 1) {
        int32_t bc = g->batch;
        int64_t sa = g->stride_a, sb = g->stride_b, sd = g->stride_d;
        cublasLtMatrixLayoutAttribute_t count = CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT;
        cublasLtMatrixLayoutAttribute_t stride = CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET;
        LT(cublasLtMatrixLayoutSetAttribute(la, count, &bc, sizeof bc));
        if (ok) LT(cublasLtMatrixLayoutSetAttribute(lb, count, &bc, sizeof bc));
        if (ok) LT(cublasLtMatrixLayoutSetAttribute(ld, count, &bc, sizeof bc));
        if (ok) LT(cublasLtMatrixLayoutSetAttribute(la, stride, &sa, sizeof sa));
        if (ok) LT(cublasLtMatrixLayoutSetAttribute(lb, stride, &sb, sizeof sb));
        if (ok) LT(cublasLtMatrixLayoutSetAttribute(ld, stride, &sd, sizeof sd));
    }
    if (ok) LT(cublasLtMatmulPreferenceCreate(&pref));
    if (ok)
        LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &cu->lt_ws_bytes, sizeof cu->lt_ws_bytes));
    /* tell the heuristic how aligned the pointers really are (views into a larger buffer may
     * be less aligned than cudaMalloc's 256 bytes), batch strides included */
    uint32_t al[3] = {alignment_of((uintptr_t)g->A), alignment_of((uintptr_t)g->B),
                      alignment_of((uintptr_t)g->D)};
    if (g->batch > 1) {
        uint32_t s[3] = {alignment_of((uintptr_t)g->stride_a * type_size(g->ab)),
                         alignment_of((uintptr_t)g->stride_b * type_size(g->ab)),
                         alignment_of((uintptr_t)g->stride_d * type_size(g->d))};
        for (int i = 0; i < 3; i++) al[i] = s[i] < al[i] ? s[i] : al[i];
    }
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t *vals[4] = {&al[0], &al[1], &al[2], &al[2]};
    for (int i = 0; i < 4 && ok; i++)
        LT(cublasLtMatmulPreferenceSetAttribute(pref, which[i], vals[i], sizeof(uint32_t)));
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    if (ok) LT(cublasLtMatmulAlgoGetHeuristic(cu->lt, op, la, lb, ld, ld, pref, 1, &h, &found));
    if (ok && found == 0) {
        ig_backend_raise(be, IG_ERR_UNSUPPORTED,
                         "%s: cuBLASLt has no algorithm for a %dx%dx%d GEMM (batch %d, "
                         "transa %d, transb %d, alignments %u/%u/%u)",
                         what, g->m, g->n, g->k, g->batch, g->transa, g->transb, al[0], al[1],
                         al[2]);
        ok = 0;
    }
    if (ok)
        LT(cublasLtMatmul(cu->lt, op, &g->alpha, g->A, la, g->B, lb, &g->beta, g->D, ld, g->D, ld,
                          &h.algo, cu->lt_ws, cu->lt_ws_bytes, cu->stream));
#undef LT
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return ok;
}

/* ---- bias rows (the fallback for an unaligned bias) ------------------------------------------ */

template <typename T> __global__ void bias_rows_kernel(T *out, const T *bias, size_t n, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bias[i % (size_t)OC];
}

/* ---- the operations -------------------------------------------------------------------------- */

void cu_matmul_forward(ig_backend *be, void *out, const void *inp, const void *w,
                       ig_w_layout layout, const void *bias, int N, int C, int OC) {
    cu_impl *cu = cu_enter(be);
    if (N == 0 || OC == 0) return;
    cudaDataType_t t = cu_act_type(be);
    cu_gemm g = {};
    g.transa = layout == IG_W_OUT_IN;
    g.transb = 0;
    g.m = OC, g.n = N, g.k = C;
    g.A = w, g.lda = layout == IG_W_OUT_IN ? C : OC;
    g.B = inp, g.ldb = C;
    g.D = out, g.ldd = OC;
    g.ab = t, g.d = t;
    g.alpha = 1.0f, g.beta = 0.0f;
    g.batch = 1;
    if (bias && alignment_of((uintptr_t)bias) >= 16) {
        g.bias = bias;
    } else if (bias) {
        size_t n = (size_t)N * OC;
        if (t == CUDA_R_16BF)
            bias_rows_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((bf16 *)out,
                                                                        (const bf16 *)bias, n, OC);
        else
            bias_rows_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((float *)out,
                                                                        (const float *)bias, n, OC);
        if (!cu_launched(be, "matmul_forward (bias rows)")) return;
        g.beta = 1.0f;
    }
    if (C == 0) { /* no terms: out is the bias (or 0) */
        if (!bias)
            cu_ok(be, cudaMemsetAsync(out, 0, (size_t)N * OC * ig_backend_act_size(be), cu->stream),
                  "matmul_forward (zero)");
        else if (g.bias) { /* the epilogue was to add it: write the rows instead */
            size_t n = (size_t)N * OC;
            if (t == CUDA_R_16BF)
                bias_rows_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
                    (bf16 *)out, (const bf16 *)bias, n, OC);
            else
                bias_rows_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
                    (float *)out, (const float *)bias, n, OC);
            cu_launched(be, "matmul_forward (bias rows)");
        }
        return;
    }
    cu_gemm_run(be, &g, "matmul_forward");
}

void cu_matmul_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, ig_w_layout layout, int N, int C, int OC) {
    cu_impl *cu = cu_enter(be);
    cudaDataType_t t = cu_act_type(be);
    int in_out = layout == IG_W_IN_OUT;
    if (dinp && N > 0 && C > 0) {
        if (OC == 0) {
            cu_ok(be, cudaMemsetAsync(dinp, 0, (size_t)N * C * ig_backend_act_size(be), cu->stream),
                  "matmul_backward (zero dinp)");
        } else {
            cu_gemm g = {};
            g.transa = in_out, g.transb = 0;
            g.m = C, g.n = N, g.k = OC;
            g.A = w, g.lda = in_out ? OC : C;
            g.B = dout, g.ldb = OC;
            g.D = dinp, g.ldd = C;
            g.ab = t, g.d = t, g.alpha = 1.0f, g.beta = 0.0f, g.batch = 1;
            if (!cu_gemm_run(be, &g, "matmul_backward (dinp)")) return;
        }
    }
    if (N > 0 && C > 0 && OC > 0) {
        cu_gemm g = {};
        if (in_out) { /* dW^T[OC, C] += dout^T[OC, N] @ inp[N, C] */
            g.transa = 0, g.transb = 1;
            g.m = OC, g.n = C, g.k = N;
            g.A = dout, g.lda = OC;
            g.B = inp, g.ldb = C;
            g.D = dw, g.ldd = OC;
        } else { /* dW^T[C, OC] += inp^T[C, N] @ dout[N, OC] */
            g.transa = 0, g.transb = 1;
            g.m = C, g.n = OC, g.k = N;
            g.A = inp, g.lda = C;
            g.B = dout, g.ldb = OC;
            g.D = dw, g.ldd = C;
        }
        g.ab = t, g.d = t, g.alpha = 1.0f, g.beta = 1.0f, g.batch = 1;
        if (!cu_gemm_run(be, &g, "matmul_backward (dW)")) return;
    }
    if (dbias && N > 0) cu_column_sums_add(be, dbias, dout, N, OC, "matmul_backward (dbias)");
}

/* ---- column sums ----------------------------------------------------------------------------- */

#define COLSUM_X 32 /* columns per block (one warp wide) */
#define COLSUM_Y 8  /* rows summed side by side in a block */

/* partial[chunk, c] = sum of x[r, c] over the chunk's rows: thread (x, y) sums rows y, y + 8, ...
 * of the chunk in order, then thread y = 0 adds the 8 row-sums in y order. */
template <typename T>
__global__ void colsum_partial_kernel(float *partial, const T *x, int N, int C, int rows) {
    __shared__ float s[COLSUM_Y][COLSUM_X];
    int c = blockIdx.x * COLSUM_X + threadIdx.x;
    int r0 = blockIdx.y * rows;
    int r1 = min(r0 + rows, N);
    float acc = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += COLSUM_Y) acc += to_f(x[(size_t)r * C + c]);
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
        for (int y = 0; y < COLSUM_Y; y++) t += s[y][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}

template <typename T>
__global__ void colsum_finish_kernel(T *acc0, T *acc1, const float *p0, const float *p1, int chunks,
                                     int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s0 = 0.0f, s1 = 0.0f;
    for (int k = 0; k < chunks; k++) {
        s0 += p0[(size_t)k * C + c];
        if (p1) s1 += p1[(size_t)k * C + c];
    }
    acc0[c] = from_f<T>(to_f(acc0[c]) + s0);
    if (acc1) acc1[c] = from_f<T>(to_f(acc1[c]) + s1);
}

void cu_column_sums_finish(ig_backend *be, void *acc0, void *acc1, const float *partial0,
                           const float *partial1, int chunks, int C, const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    if (be->act_type == IG_ACT_BF16)
        colsum_finish_kernel<<<cu_blocks((size_t)C, 256), 256, 0, cu->stream>>>(
            (bf16 *)acc0, (bf16 *)acc1, partial0, partial1, chunks, C);
    else
        colsum_finish_kernel<<<cu_blocks((size_t)C, 256), 256, 0, cu->stream>>>(
            (float *)acc0, (float *)acc1, partial0, partial1, chunks, C);
    cu_launched(be, what);
}

void cu_column_sums_add(ig_backend *be, void *acc, const void *x, int N, int C, const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    if (N <= 0 || C <= 0) return;
    int rows = cu_colsum_rows(N), chunks = (N + rows - 1) / rows;
    float *partial = (float *)cu_scratch(be, (size_t)chunks * C * sizeof(float), what);
    if (!partial) return;
    dim3 grid(cu_blocks((size_t)C, COLSUM_X), (unsigned)chunks), block(COLSUM_X, COLSUM_Y);
    if (be->act_type == IG_ACT_BF16)
        colsum_partial_kernel<<<grid, block, 0, cu->stream>>>(partial, (const bf16 *)x, N, C, rows);
    else
        colsum_partial_kernel<<<grid, block, 0, cu->stream>>>(partial, (const float *)x, N, C,
                                                              rows);
    if (!cu_launched(be, what)) return;
    cu_column_sums_finish(be, acc, NULL, partial, NULL, chunks, C, what);
}
