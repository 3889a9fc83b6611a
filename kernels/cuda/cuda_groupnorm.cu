/* cuda_groupnorm.cu - GroupNorm over NHWC rows, optionally fused with SiLU, forward and backward
 * on the GPU, without atomics (the CPU kernels' plan, cpu_groupnorm.c, with blocks for chunks):
 *
 * Forward: (1) a block per (sample, chunk of GN_ROWS rows): each thread takes channels c, c + 128,
 * ... and sums x and x^2 over the chunk's rows in double (a warp reads 32 consecutive channels of a
 * row: coalesced) into partials [N, chunks, C, 2]; (2) a thread per (sample, group): the partials
 * in chunk order, then the group's channels in order: mean, var = E[x^2] - mean^2 in double (exact
 * enough for fp32 data whose mean is within 10^4 standard deviations of 0), rstd = 1 / sqrt(var +
 * eps), kept in fp32 (the mean's low part too, in scratch); (3) elementwise: y = ((x - mean) -
 * mean_lo) rstd w + b, out = y or silu(y), rounded once.
 * Backward, with dy = dout (or dout silu'(y), y recomputed) and xhat = (x - mean) rstd: (1) per
 * (sample, chunk), per channel, sums of dy xhat and of dy in double; (2) a thread per (sample,
 * group): each channel's sums over the chunks in order (kept for dw, db), then the group's
 * mean(dxhat) and mean(dxhat xhat), dxhat = dy w; (3) a thread per channel: dw += its sums over
 * the samples in order, db likewise; (4) elementwise: dinp += rstd (dxhat - mean(dxhat) - xhat
 * mean(dxhat xhat)). The chunks depend on the sizes only: the same bits on every run. expf is the
 * accurate library function.
 *
 * Shapes: inp, out, dout, dinp [N, HW, C]; w, b, dw, db [C]; mean, rstd [N, G].
 */
#include "cuda_internal.h"

#define GN_THREADS 128

/* rows per chunk: 64, or more for a long image (at most 4096 chunks a sample: a grid's y) */
static int gn_rows(int HW) {
    int rows = 64;
    while ((HW + rows - 1) / rows > 4096) rows *= 2;
    return rows;
}

/* y = (x - m) r w + b, and its dy from d (silu: d silu'(y)) */
__device__ __forceinline__ float gn_dy(float d, float y, int silu) {
    if (!silu) return d;
    float s = 1.0f / (1.0f + expf(-y));
    return d * (s * (1.0f + y * (1.0f - s)));
}

/* ---- forward --------------------------------------------------------------------------------- */

template <typename T>
__global__ void gn_stats_kernel(double *part, const T *x, int HW, int C, int rows) {
    int n = blockIdx.y, k = blockIdx.x, chunks = gridDim.x;
    int r0 = k * rows, r1 = r0 + rows < HW ? r0 + rows : HW;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        double s = 0, ss = 0;
        for (int r = r0; r < r1; r++) {
            double v = to_f(x[((size_t)n * HW + r) * C + c]);
            s += v;
            ss += v * v;
        }
        double *p = part + (((size_t)n * chunks + k) * C + c) * 2;
        p[0] = s, p[1] = ss;
    }
}

__global__ void gn_stats_finish_kernel(float *mean, float *mean_lo, float *rstd, const double *part,
                                       int N, int HW, int C, int G, int chunks, float eps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; /* n * G + g */
    if (i >= N * G) return;
    int n = i / G, g = i % G, Cg = C / G;
    double s = 0, ss = 0;
    for (int k = 0; k < chunks; k++)
        for (int c = g * Cg; c < (g + 1) * Cg; c++) {
            const double *p = part + (((size_t)n * chunks + k) * C + c) * 2;
            s += p[0], ss += p[1];
        }
    double M = (double)HW * Cg, m = s / M, var = ss / M - m * m;
    mean[i] = (float)m;
    mean_lo[i] = (float)(m - (double)(float)m); /* x - m = (x - mean) - mean_lo, nearly exact */
    rstd[i] = (float)(1.0 / sqrt((var > 0 ? var : 0.0) + (double)eps));
}

template <typename T>
__global__ void gn_apply_kernel(T *out, const T *x, const float *mean, const float *mean_lo,
                                const float *rstd, const T *w, const T *b, size_t n, int HW, int C,
                                int G, int silu) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int c = (int)(i % C), s = (int)(i / C / HW), g = s * G + c / (C / G);
    float y = ((to_f(x[i]) - mean[g]) - mean_lo[g]) * rstd[g] * to_f(w[c]) + to_f(b[c]);
    out[i] = from_f<T>(silu ? y / (1.0f + expf(-y)) : y);
}

template <typename T>
static void gn_forward(ig_backend *be, T *out, float *mean, float *rstd, const T *x, const T *w,
                       const T *b, int N, int HW, int C, int G, float eps, int silu) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "groupnorm_forward";
    int rows = gn_rows(HW), chunks = (HW + rows - 1) / rows;
    size_t pb = cu_round256((size_t)N * chunks * C * 2 * sizeof(double));
    char *p = (char *)cu_scratch(be, pb + (size_t)N * G * sizeof(float), what);
    if (!p) return;
    double *part = (double *)p;
    float *mean_lo = (float *)(p + pb);
    gn_stats_kernel<T><<<dim3(chunks, N), GN_THREADS, 0, cu->stream>>>(part, x, HW, C, rows);
    if (!cu_launched(be, what)) return;
    gn_stats_finish_kernel<<<cu_blocks((size_t)N * G, 128), 128, 0, cu->stream>>>(
        mean, mean_lo, rstd, part, N, HW, C, G, chunks, eps);
    if (!cu_launched(be, what)) return;
    size_t n = (size_t)N * HW * C;
    gn_apply_kernel<T><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(out, x, mean, mean_lo, rstd, w, b,
                                                                  n, HW, C, G, silu);
    cu_launched(be, what);
}

void cu_groupnorm_forward(ig_backend *be, void *out, float *mean, float *rstd, const void *inp,
                          const void *w, const void *b, int N, int HW, int C, int G, float eps,
                          int silu) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        gn_forward<bf16>(be, (bf16 *)out, mean, rstd, (const bf16 *)inp, (const bf16 *)w,
                         (const bf16 *)b, N, HW, C, G, eps, silu);
    else
        gn_forward<float>(be, (float *)out, mean, rstd, (const float *)inp, (const float *)w,
                          (const float *)b, N, HW, C, G, eps, silu);
}

/* ---- backward -------------------------------------------------------------------------------- */

template <typename T>
__global__ void gn_bwd_sums_kernel(double *part, const T *dout, const T *x, const T *w, const T *b,
                                   const float *mean, const float *rstd, int HW, int C, int G,
                                   int rows, int silu) {
    int n = blockIdx.y, k = blockIdx.x, chunks = gridDim.x;
    int r0 = k * rows, r1 = r0 + rows < HW ? r0 + rows : HW;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        int g = n * G + c / (C / G);
        float m = mean[g], rs = rstd[g], wc = to_f(w[c]), bc = silu ? to_f(b[c]) : 0.0f;
        double a = 0, s = 0;
        for (int r = r0; r < r1; r++) {
            size_t i = ((size_t)n * HW + r) * C + c;
            float xh = (to_f(x[i]) - m) * rs, dy = gn_dy(to_f(dout[i]), xh * wc + bc, silu);
            a += (double)dy * xh;
            s += dy;
        }
        double *p = part + (((size_t)n * chunks + k) * C + c) * 2;
        p[0] = a, p[1] = s;
    }
}

/* per (n, g): each channel's sums over the chunks (into sums [N, C, 2]), then k1 = mean(dxhat),
 * k2 = mean(dxhat xhat) over the group */
template <typename T>
__global__ void gn_bwd_group_kernel(double *sums, float *k1, float *k2, const double *part,
                                    const T *w, int N, int HW, int C, int G, int chunks) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * G) return;
    int n = i / G, g = i % G, Cg = C / G;
    double s1 = 0, s2 = 0;
    for (int c = g * Cg; c < (g + 1) * Cg; c++) {
        double a = 0, s = 0;
        for (int k = 0; k < chunks; k++) {
            const double *p = part + (((size_t)n * chunks + k) * C + c) * 2;
            a += p[0], s += p[1];
        }
        sums[((size_t)n * C + c) * 2] = a, sums[((size_t)n * C + c) * 2 + 1] = s;
        double wc = to_f(w[c]);
        s1 += s * wc, s2 += a * wc;
    }
    double M = (double)HW * Cg;
    k1[i] = (float)(s1 / M), k2[i] = (float)(s2 / M);
}

template <typename T>
__global__ void gn_bwd_params_kernel(T *dw, T *db, const double *sums, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double a = 0, s = 0;
    for (int n = 0; n < N; n++)
        a += sums[((size_t)n * C + c) * 2], s += sums[((size_t)n * C + c) * 2 + 1];
    dw[c] = from_f<T>(to_f(dw[c]) + (float)a);
    db[c] = from_f<T>(to_f(db[c]) + (float)s);
}

template <typename T>
__global__ void gn_bwd_dx_kernel(T *dinp, const T *dout, const T *x, const T *w, const T *b,
                                 const float *mean, const float *rstd, const float *k1,
                                 const float *k2, size_t n, int HW, int C, int G, int silu) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int c = (int)(i % C), s = (int)(i / C / HW), g = s * G + c / (C / G);
    float wc = to_f(w[c]), rs = rstd[g];
    float xh = (to_f(x[i]) - mean[g]) * rs;
    float dy = gn_dy(to_f(dout[i]), xh * wc + (silu ? to_f(b[c]) : 0.0f), silu);
    dinp[i] = from_f<T>(to_f(dinp[i]) + rs * (dy * wc - k1[g] - xh * k2[g]));
}

template <typename T>
static void gn_backward(ig_backend *be, T *dinp, T *dw, T *db, const T *dout, const T *x,
                        const T *w, const T *b, const float *mean, const float *rstd, int N, int HW,
                        int C, int G, int silu) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "groupnorm_backward";
    int rows = gn_rows(HW), chunks = (HW + rows - 1) / rows;
    size_t pb = cu_round256((size_t)N * chunks * C * 2 * sizeof(double));
    size_t sb = cu_round256((size_t)N * C * 2 * sizeof(double));
    size_t kb = cu_round256((size_t)N * G * sizeof(float));
    char *p = (char *)cu_scratch(be, pb + sb + 2 * kb, what);
    if (!p) return;
    double *part = (double *)p, *sums = (double *)(p + pb);
    float *k1 = (float *)(p + pb + sb), *k2 = (float *)(p + pb + sb + kb);
    gn_bwd_sums_kernel<T><<<dim3(chunks, N), GN_THREADS, 0, cu->stream>>>(
        part, dout, x, w, b, mean, rstd, HW, C, G, rows, silu);
    if (!cu_launched(be, what)) return;
    gn_bwd_group_kernel<T><<<cu_blocks((size_t)N * G, 128), 128, 0, cu->stream>>>(
        sums, k1, k2, part, w, N, HW, C, G, chunks);
    if (!cu_launched(be, what)) return;
    gn_bwd_params_kernel<T><<<cu_blocks((size_t)C, 128), 128, 0, cu->stream>>>(dw, db, sums, N, C);
    if (!cu_launched(be, what)) return;
    size_t n = (size_t)N * HW * C;
    gn_bwd_dx_kernel<T><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(dinp, dout, x, w, b, mean, rstd,
                                                                   k1, k2, n, HW, C, G, silu);
    cu_launched(be, what);
}

void cu_groupnorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                           const void *inp, const void *w, const void *b, const float *mean,
                           const float *rstd, int N, int HW, int C, int G, int silu) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        gn_backward<bf16>(be, (bf16 *)dinp, (bf16 *)dw, (bf16 *)db, (const bf16 *)dout,
                          (const bf16 *)inp, (const bf16 *)w, (const bf16 *)b, mean, rstd, N, HW, C,
                          G, silu);
    else
        gn_backward<float>(be, (float *)dinp, (float *)dw, (float *)db, (const float *)dout,
                           (const float *)inp, (const float *)w, (const float *)b, mean, rstd, N,
                           HW, C, G, silu);
}
