/* cuda_layernorm.cu - LayerNorm forward (alone, and with the residual add fused in front) and
 * backward on the GPU, as torch.nn.LayerNorm (biased variance, the model's eps added in fp32),
 * without atomics.
 *
 * Forward and the input gradient: one warp per row (8 rows per block of 256 threads); a lane
 * takes columns lane, lane + 32, ... and the warp's sums are a fixed butterfly (warp_sum), so a
 * row's statistics have the same bits on every run. The mean and the variance are two passes
 * over the row (the second re-reads it from L1/L2), in fp32. With the residual fused, the sum
 * a + b_in is rounded to the act type and stored first, and the LayerNorm is of the stored
 * values (what a separate residual kernel followed by LayerNorm would see).
 *
 * The weight and bias gradients are column sums over all N rows: blocks of 32 columns x a chunk
 * of cu_colsum_rows(N) rows write fp32 partials (8 row-lanes added in order), then
 * cu_column_sums_finish adds each column's partials in chunk order to dw and db.
 *
 * Shapes: inp, out, residual, a, b_in, dout, dinp [N, C]; w, b, dw, db [C]; mean, rstd [N].
 */
#include "cuda_internal.h"

#define LN_ROWS   8 /* rows (warps) per block */
#define LN_COLS_X 32
#define LN_COLS_Y 8

template <typename T>
__global__ void ln_forward_kernel(T *out, float *mean, float *rstd, const T *inp, T *residual,
                                  const T *a, const T *b_in, const T *w, const T *b, int N, int C,
                                  float eps) {
    int row = blockIdx.x * LN_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return; /* a whole warp leaves together: no block-wide sync below */
    size_t off = (size_t)row * C;
    const T *x = inp + off;
    if (residual) { /* residual = a + b_in, rounded to T; then the LayerNorm of what was stored */
        for (int c = lane; c < C; c += 32)
            residual[off + c] = from_f<T>(to_f(a[off + c]) + to_f(b_in[off + c]));
        __syncwarp();
        x = residual + off;
    }
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += to_f(x[c]);
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = to_f(x[c]) - m;
        v += d * d;
    }
    float r = 1.0f / sqrtf(warp_sum(v) / (float)C + eps);
    T *o = out + off;
    for (int c = lane; c < C; c += 32)
        o[c] = from_f<T>((to_f(x[c]) - m) * r * to_f(w[c]) + to_f(b[c]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

template <typename T>
static void ln_forward(ig_backend *be, T *out, float *mean, float *rstd, const T *inp, T *residual,
                       const T *a, const T *b_in, const T *w, const T *b, int N, int C, float eps,
                       const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    ln_forward_kernel<T><<<cu_blocks((size_t)N, LN_ROWS), LN_ROWS * 32, 0, cu->stream>>>(
        out, mean, rstd, inp, residual, a, b_in, w, b, N, C, eps);
    cu_launched(be, what);
}

void cu_layernorm_forward(ig_backend *be, void *out, float *mean, float *rstd, const void *inp,
                          const void *w, const void *b, int N, int C, float eps) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        ln_forward<bf16>(be, (bf16 *)out, mean, rstd, (const bf16 *)inp, NULL, NULL, NULL,
                         (const bf16 *)w, (const bf16 *)b, N, C, eps, "layernorm_forward");
    else
        ln_forward<float>(be, (float *)out, mean, rstd, (const float *)inp, NULL, NULL, NULL,
                          (const float *)w, (const float *)b, N, C, eps, "layernorm_forward");
}

void cu_residual_layernorm_forward(ig_backend *be, void *residual, void *out, float *mean,
                                   float *rstd, const void *a, const void *b_in, const void *w,
                                   const void *b, int N, int C, float eps) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        ln_forward<bf16>(be, (bf16 *)out, mean, rstd, NULL, (bf16 *)residual, (const bf16 *)a,
                         (const bf16 *)b_in, (const bf16 *)w, (const bf16 *)b, N, C, eps,
                         "residual_layernorm_forward");
    else
        ln_forward<float>(be, (float *)out, mean, rstd, NULL, (float *)residual, (const float *)a,
                          (const float *)b_in, (const float *)w, (const float *)b, N, C, eps,
                          "residual_layernorm_forward");
}

/* dinp += (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)) * rstd, dnorm = w * dout */
template <typename T>
__global__ void ln_backward_rows_kernel(T *dinp, const T *dout, const T *inp, const T *w,
                                        const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * LN_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    const T *x = inp + off, *d = dout + off;
    float m = mean[row], r = rstd[row], s1 = 0.0f, s2 = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dnorm = to_f(w[c]) * to_f(d[c]), xhat = (to_f(x[c]) - m) * r;
        s1 += dnorm;
        s2 += dnorm * xhat;
    }
    float dmean = warp_sum(s1) / (float)C, dnmean = warp_sum(s2) / (float)C;
    cu_row_update(dinp + off, C, lane, [&](int c, float old) {
        float dnorm = to_f(w[c]) * to_f(d[c]), xhat = (to_f(x[c]) - m) * r;
        return old + (dnorm - dmean - xhat * dnmean) * r;
    });
}

/* partials of dw (dout * xhat) and db (dout) over one chunk of rows, 32 columns per block */
template <typename T>
__global__ void ln_backward_cols_kernel(float *pw, float *pb, const T *dout, const T *inp,
                                        const float *mean, const float *rstd, int N, int C,
                                        int rows) {
    __shared__ float sw[LN_COLS_Y][LN_COLS_X], sb[LN_COLS_Y][LN_COLS_X];
    int c = blockIdx.x * LN_COLS_X + threadIdx.x;
    int r0 = blockIdx.y * rows, r1 = min(r0 + rows, N);
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += LN_COLS_Y) {
            size_t i = (size_t)r * C + c;
            float d = to_f(dout[i]);
            aw += d * ((to_f(inp[i]) - mean[r]) * rstd[r]);
            ab += d;
        }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < LN_COLS_Y; y++) tw += sw[y][threadIdx.x], tb += sb[y][threadIdx.x];
        pw[(size_t)blockIdx.y * C + c] = tw;
        pb[(size_t)blockIdx.y * C + c] = tb;
    }
}

template <typename T>
static void ln_backward(ig_backend *be, T *dinp, T *dw, T *db, const T *dout, const T *inp,
                        const T *w, const float *mean, const float *rstd, int N, int C) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "layernorm_backward";
    int rows = cu_colsum_rows(N), chunks = (N + rows - 1) / rows;
    size_t pbytes = cu_round256((size_t)chunks * C * sizeof(float));
    char *scratch = (char *)cu_scratch(be, 2 * pbytes, what);
    if (!scratch) return;
    float *pw = (float *)scratch, *pb = (float *)(scratch + pbytes);
    ln_backward_rows_kernel<T><<<cu_blocks((size_t)N, LN_ROWS), LN_ROWS * 32, 0, cu->stream>>>(
        dinp, dout, inp, w, mean, rstd, N, C);
    if (!cu_launched(be, what)) return;
    dim3 grid(cu_blocks((size_t)C, LN_COLS_X), (unsigned)chunks), block(LN_COLS_X, LN_COLS_Y);
    ln_backward_cols_kernel<T>
        <<<grid, block, 0, cu->stream>>>(pw, pb, dout, inp, mean, rstd, N, C, rows);
    if (!cu_launched(be, what)) return;
    cu_column_sums_finish(be, dw, db, pw, pb, chunks, C, what);
}

void cu_layernorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                           const void *inp, const void *w, const float *mean, const float *rstd,
                           int N, int C) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        ln_backward<bf16>(be, (bf16 *)dinp, (bf16 *)dw, (bf16 *)db, (const bf16 *)dout,
                          (const bf16 *)inp, (const bf16 *)w, mean, rstd, N, C);
    else
        ln_backward<float>(be, (float *)dinp, (float *)dw, (float *)db, (const float *)dout,
                           (const float *)inp, (const float *)w, mean, rstd, N, C);
}
