/* cuda_rmsnorm.cu - RMSNorm (Llama's) forward, alone and with the residual add fused in front,
 * and backward on the GPU, in fp32 whatever the act type, without atomics: the LayerNorm kernels'
 * plan (cuda_layernorm.cu) without the mean and the bias.
 *
 * Forward and the input gradient: one warp per row (8 rows per block of 256 threads); a lane
 * takes columns lane, lane + 32, ... and the warp's sums are a fixed butterfly (warp_sum).
 * rstd = 1 / sqrt(mean(x^2) + eps), out = x * rstd * w rounded once. With the residual fused, the
 * sum a + b is rounded to the act type and stored first, and the norm is of the stored values.
 * Backward: dx = rstd (dnorm - xhat mean(dnorm xhat)), xhat = x rstd, dnorm = w dout.
 *
 * The weight gradient is a column sum over all N rows: blocks of 32 columns x a chunk of
 * cu_colsum_rows(N) rows write fp32 partials (8 row-lanes added in order), then
 * cu_column_sums_finish adds each column's partials in chunk order to dw.
 *
 * Shapes: inp, out, residual, a, b, dout, dinp [N, C]; w, dw [C]; rstd [N].
 */
#include "cuda_internal.h"

#define RMS_ROWS   8 /* rows (warps) per block */
#define RMS_COLS_X 32
#define RMS_COLS_Y 8

template <typename T>
__global__ void rms_forward_kernel(T *out, float *rstd, const T *inp, T *residual, const T *a,
                                   const T *b, const T *w, int N, int C, float eps) {
    int row = blockIdx.x * RMS_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return; /* a whole warp leaves together: no block-wide sync below */
    size_t off = (size_t)row * C;
    const T *x = inp + off;
    if (residual) { /* residual = a + b, rounded to T; then the norm of what was stored */
        for (int c = lane; c < C; c += 32)
            residual[off + c] = from_f<T>(to_f(a[off + c]) + to_f(b[off + c]));
        __syncwarp();
        x = residual + off;
    }
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = to_f(x[c]);
        s += v * v;
    }
    float r = 1.0f / sqrtf(warp_sum(s) / (float)C + eps);
    T *o = out + off;
    for (int c = lane; c < C; c += 32) o[c] = from_f<T>(to_f(x[c]) * r * to_f(w[c]));
    if (lane == 0) rstd[row] = r;
}

template <typename T>
static void rms_forward(ig_backend *be, T *out, float *rstd, const T *inp, T *residual, const T *a,
                        const T *b, const T *w, int N, int C, float eps, const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    rms_forward_kernel<T><<<cu_blocks((size_t)N, RMS_ROWS), RMS_ROWS * 32, 0, cu->stream>>>(
        out, rstd, inp, residual, a, b, w, N, C, eps);
    cu_launched(be, what);
}

void cu_rmsnorm_forward(ig_backend *be, void *out, float *rstd, const void *inp, const void *w,
                        int N, int C, float eps) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        rms_forward<bf16>(be, (bf16 *)out, rstd, (const bf16 *)inp, NULL, NULL, NULL,
                          (const bf16 *)w, N, C, eps, "rmsnorm_forward");
    else
        rms_forward<float>(be, (float *)out, rstd, (const float *)inp, NULL, NULL, NULL,
                           (const float *)w, N, C, eps, "rmsnorm_forward");
}

void cu_residual_rmsnorm_forward(ig_backend *be, void *residual, void *out, float *rstd,
                                 const void *a, const void *b, const void *w, int N, int C,
                                 float eps) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        rms_forward<bf16>(be, (bf16 *)out, rstd, NULL, (bf16 *)residual, (const bf16 *)a,
                          (const bf16 *)b, (const bf16 *)w, N, C, eps, "residual_rmsnorm_forward");
    else
        rms_forward<float>(be, (float *)out, rstd, NULL, (float *)residual, (const float *)a,
                           (const float *)b, (const float *)w, N, C, eps,
                           "residual_rmsnorm_forward");
}

/* dinp += (dnorm - xhat * mean(dnorm * xhat)) * rstd, dnorm = w * dout, xhat = x * rstd */
template <typename T>
__global__ void rms_backward_rows_kernel(T *dinp, const T *dout, const T *inp, const T *w,
                                         const float *rstd, int N, int C) {
    int row = blockIdx.x * RMS_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    const T *x = inp + off, *d = dout + off;
    float r = rstd[row], s = 0.0f;
    for (int c = lane; c < C; c += 32) s += (to_f(w[c]) * to_f(d[c])) * (to_f(x[c]) * r);
    float dnx = warp_sum(s) / (float)C;
    cu_row_update(dinp + off, C, lane, [&](int c, float old) {
        float dnorm = to_f(w[c]) * to_f(d[c]), xhat = to_f(x[c]) * r;
        return old + (dnorm - xhat * dnx) * r;
    });
}

/* partials of dw (dout * xhat) over one chunk of rows, 32 columns per block */
template <typename T>
__global__ void rms_backward_cols_kernel(float *pw, const T *dout, const T *inp, const float *rstd,
                                         int N, int C, int rows) {
    __shared__ float sw[RMS_COLS_Y][RMS_COLS_X];
    int c = blockIdx.x * RMS_COLS_X + threadIdx.x;
    int r0 = blockIdx.y * rows, r1 = min(r0 + rows, N);
    float aw = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += RMS_COLS_Y) {
            size_t i = (size_t)r * C + c;
            aw += to_f(dout[i]) * (to_f(inp[i]) * rstd[r]);
        }
    sw[threadIdx.y][threadIdx.x] = aw;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f;
        for (int y = 0; y < RMS_COLS_Y; y++) tw += sw[y][threadIdx.x];
        pw[(size_t)blockIdx.y * C + c] = tw;
    }
}

template <typename T>
static void rms_backward(ig_backend *be, T *dinp, T *dw, const T *dout, const T *inp, const T *w,
                         const float *rstd, int N, int C) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "rmsnorm_backward";
    int rows = cu_colsum_rows(N), chunks = (N + rows - 1) / rows;
    float *pw = (float *)cu_scratch(be, (size_t)chunks * C * sizeof(float), what);
    if (!pw) return;
    rms_backward_rows_kernel<T><<<cu_blocks((size_t)N, RMS_ROWS), RMS_ROWS * 32, 0, cu->stream>>>(
        dinp, dout, inp, w, rstd, N, C);
    if (!cu_launched(be, what)) return;
    dim3 grid(cu_blocks((size_t)C, RMS_COLS_X), (unsigned)chunks), block(RMS_COLS_X, RMS_COLS_Y);
    rms_backward_cols_kernel<T><<<grid, block, 0, cu->stream>>>(pw, dout, inp, rstd, N, C, rows);
    if (!cu_launched(be, what)) return;
    cu_column_sums_finish(be, dw, NULL, pw, NULL, chunks, C, what);
}

void cu_rmsnorm_backward(ig_backend *be, void *dinp, void *dw, const void *dout, const void *inp,
                         const void *w, const float *rstd, int N, int C) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        rms_backward<bf16>(be, (bf16 *)dinp, (bf16 *)dw, (const bf16 *)dout, (const bf16 *)inp,
                           (const bf16 *)w, rstd, N, C);
    else
        rms_backward<float>(be, (float *)dinp, (float *)dw, (const float *)dout, (const float *)inp,
                            (const float *)w, rstd, N, C);
}
