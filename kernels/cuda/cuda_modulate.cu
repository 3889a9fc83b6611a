/* cuda_modulate.cu - DiT's adaLN-Zero kernels on the GPU: LayerNorm without affine parameters
 * fused with the per-sample modulation, out = LN(x) * (1 + scale[b]) + shift[b], and the gated
 * residual add, out = res + gate[b] * x, with their backwards; fp32 arithmetic for both act types,
 * no atomics. Row r is of sample b = (row0 + r) / rps; per-sample vectors are ld apart.
 *
 * Forward and the input gradient of the modulated LayerNorm: one warp per row (8 rows per block),
 * as cuda_layernorm.cu (two passes for the mean and the variance, butterfly warp sums), with the
 * row's sample's scale and shift in place of the weight and bias.
 *
 * The per-sample sums (dshift, dscale, dgate) are cut into tiles by sample: a tile is up to
 * MOD_TILE_ROWS rows of one sample (counted from the sample's first row in this slice) by 32
 * columns, so no tile ever holds rows of two samples, wherever a sample starts or ends (a slice
 * starting or ending mid-sample, a sample not a multiple of the tile). A block sums its tile in 8
 * row-lanes added in order. When a sample fits in one tile (rows_per_sample or N <= the tile), the
 * block adds its sum to the gradient itself; otherwise it writes an fp32 partial and a second
 * kernel adds each sample's partials in tile order. Either way the order is fixed by the sizes.
 *
 * Shapes: inp, out, res, x, dout, dinp, dx [N, C]; shift, scale, gate and their gradients [B, ld];
 * mean, rstd [N].
 */
#include "cuda_internal.h"

#define MOD_ROWS      8 /* rows (warps) per block of the row kernels */
#define MOD_COLS_X    32
#define MOD_COLS_Y    8
#define MOD_TILE_ROWS 64 /* rows of one sample per tile of the per-sample sums */

__device__ __forceinline__ size_t sample_of(int row0, int rps, size_t r) {
    return ((size_t)row0 + r) / (size_t)rps;
}

/* ---- forward --------------------------------------------------------------------------------- */

template <typename T>
__global__ void mod_forward_kernel(T *out, float *mean, float *rstd, const T *inp, const T *shift,
                                   const T *scale, int ld, int N, int C, int row0, int rps,
                                   float eps) {
    int row = blockIdx.x * MOD_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return; /* a whole warp leaves together: no block-wide sync below */
    size_t off = (size_t)row * C, b = sample_of(row0, rps, (size_t)row);
    const T *x = inp + off, *sh = shift + b * ld, *sc = scale + b * ld;
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
        o[c] = from_f<T>((to_f(x[c]) - m) * r * (1.0f + to_f(sc[c])) + to_f(sh[c]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

void cu_layernorm_modulate_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                   const void *inp, const void *shift, const void *scale, int ld,
                                   int N, int C, int row0, int rows_per_sample, float eps) {
    cu_impl *cu = cu_enter(be);
    if (N == 0) return;
    unsigned grid = cu_blocks((size_t)N, MOD_ROWS);
    if (be->act_type == IG_ACT_BF16)
        mod_forward_kernel<<<grid, MOD_ROWS * 32, 0, cu->stream>>>(
            (bf16 *)out, mean, rstd, (const bf16 *)inp, (const bf16 *)shift, (const bf16 *)scale,
            ld, N, C, row0, rows_per_sample, eps);
    else
        mod_forward_kernel<<<grid, MOD_ROWS * 32, 0, cu->stream>>>(
            (float *)out, mean, rstd, (const float *)inp, (const float *)shift,
            (const float *)scale, ld, N, C, row0, rows_per_sample, eps);
    cu_launched(be, "layernorm_modulate_forward");
}

template <typename T>
__global__ void gate_forward_kernel(T *out, const T *res, const T *x, const T *gate, int ld, int C,
                                    int row0, int rps, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t row = i / C, c = i % C;
    const T *g = gate + sample_of(row0, rps, row) * ld;
    out[i] = from_f<T>(to_f(res[i]) + to_f(g[c]) * to_f(x[i]));
}

void cu_gate_residual_forward(ig_backend *be, void *out, const void *res, const void *x,
                              const void *gate, int ld, int N, int C, int row0,
                              int rows_per_sample) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)N * C;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        gate_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)out, (const bf16 *)res, (const bf16 *)x, (const bf16 *)gate, ld, C, row0,
            rows_per_sample, n);
    else
        gate_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)out, (const float *)res, (const float *)x, (const float *)gate, ld, C, row0,
            rows_per_sample, n);
    cu_launched(be, "gate_residual_forward");
}

/* ---- per-sample sums ------------------------------------------------------------------------- */

/* The tiling of the samples of rows [0, N): samples s0 .. s0 + nsamp - 1, tps tiles each. */
typedef struct sample_tiles {
    size_t s0;
    int nsamp, tps;
} sample_tiles;

static sample_tiles tiles_of(int N, int row0, int rps) {
    sample_tiles t;
    t.s0 = (size_t)row0 / (size_t)rps;
    t.nsamp = (int)(((size_t)row0 + (size_t)N - 1) / (size_t)rps - t.s0 + 1);
    int most = rps < N ? rps : N; /* the most rows a sample has in the slice */
    t.tps = (most + MOD_TILE_ROWS - 1) / MOD_TILE_ROWS;
    return t;
}

/* One tile (blockIdx.x: sample s0 + t / tps, its tile t % tps; blockIdx.y: 32 columns). LN 0:
 * a0 = sum of dout * x (the gate's); LN 1: a0 = sum of dout, a1 = sum of dout * xhat (shift's and
 * scale's). With partials (p0) the tile's sums go to p0/p1 [tiles, C]; without, they are added to
 * g0/g1 (one tile per sample). */
template <typename T, int LN>
__global__ void sample_sums_kernel(float *p0, float *p1, T *g0, T *g1, const T *dout, const T *x,
                                   const float *mean, const float *rstd, int ld, int N, int C,
                                   int row0, int rps, sample_tiles st) {
    __shared__ float s0m[MOD_COLS_Y][MOD_COLS_X], s1m[MOD_COLS_Y][MOD_COLS_X];
    int c = blockIdx.y * MOD_COLS_X + threadIdx.x;
    size_t t = blockIdx.x, s = st.s0 + t / st.tps;
    int k = (int)(t % st.tps);
    /* the sample's rows in this slice, then the tile's */
    size_t g0r = s * (size_t)rps, g1r = g0r + (size_t)rps;
    size_t lo = g0r > (size_t)row0 ? g0r - (size_t)row0 : 0;
    size_t hi = g1r - (size_t)row0 < (size_t)N ? g1r - (size_t)row0 : (size_t)N;
    size_t r0 = lo + (size_t)k * MOD_TILE_ROWS,
           r1 = r0 + MOD_TILE_ROWS < hi ? r0 + MOD_TILE_ROWS : hi;
    float a0 = 0.0f, a1 = 0.0f;
    if (c < C)
        for (size_t r = r0 + threadIdx.y; r < r1; r += MOD_COLS_Y) {
            size_t i = r * C + c;
            float d = to_f(dout[i]);
            if constexpr (LN) {
                a0 += d;
                a1 += d * ((to_f(x[i]) - mean[r]) * rstd[r]);
            } else {
                a0 += d * to_f(x[i]);
            }
        }
    s0m[threadIdx.y][threadIdx.x] = a0;
    s1m[threadIdx.y][threadIdx.x] = a1;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    float t0 = 0.0f, t1 = 0.0f;
    for (int y = 0; y < MOD_COLS_Y; y++) t0 += s0m[y][threadIdx.x], t1 += s1m[y][threadIdx.x];
    if (p0) {
        p0[t * C + c] = t0;
        if constexpr (LN) p1[t * C + c] = t1;
    } else {
        T *d0 = g0 + s * ld + c;
        *d0 = from_f<T>(to_f(*d0) + t0);
        if constexpr (LN) {
            T *d1 = g1 + s * ld + c;
            *d1 = from_f<T>(to_f(*d1) + t1);
        }
    }
}

/* g[s] += the sum of sample s's partials, in tile order (one thread per sample and column) */
template <typename T>
__global__ void sample_sums_finish_kernel(T *g0, T *g1, const float *p0, const float *p1, int ld,
                                          int C, sample_tiles st) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)st.nsamp * C) return;
    size_t si = i / C, c = i % C, s = st.s0 + si;
    float t0 = 0.0f, t1 = 0.0f;
    for (int k = 0; k < st.tps; k++) {
        size_t at = (si * st.tps + k) * C + c;
        t0 += p0[at];
        if (p1) t1 += p1[at];
    }
    g0[s * ld + c] = from_f<T>(to_f(g0[s * ld + c]) + t0);
    if (p1) g1[s * ld + c] = from_f<T>(to_f(g1[s * ld + c]) + t1);
}

/* The per-sample sums of a backward into g0 (and g1 when LN); 0 after raising an error. */
template <typename T, int LN>
static int sample_sums(ig_backend *be, T *g0, T *g1, const T *dout, const T *x, const float *mean,
                       const float *rstd, int ld, int N, int C, int row0, int rps,
                       const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    sample_tiles st = tiles_of(N, row0, rps);
    size_t tiles = (size_t)st.nsamp * st.tps;
    dim3 grid((unsigned)tiles, cu_blocks((size_t)C, MOD_COLS_X)), block(MOD_COLS_X, MOD_COLS_Y);
    float *p0 = NULL, *p1 = NULL;
    if (st.tps > 1) {
        size_t pbytes = cu_round256(tiles * C * sizeof(float));
        char *scratch = (char *)cu_scratch(be, LN ? 2 * pbytes : pbytes, what);
        if (!scratch) return 0;
        p0 = (float *)scratch;
        p1 = LN ? (float *)(scratch + pbytes) : NULL;
    }
    sample_sums_kernel<T, LN><<<grid, block, 0, cu->stream>>>(p0, p1, g0, g1, dout, x, mean, rstd,
                                                              ld, N, C, row0, rps, st);
    if (!cu_launched(be, what)) return 0;
    if (!p0) return 1;
    size_t n = (size_t)st.nsamp * C;
    sample_sums_finish_kernel<T>
        <<<cu_blocks(n, 256), 256, 0, cu->stream>>>(g0, g1, p0, p1, ld, C, st);
    return cu_launched(be, what);
}

/* ---- backward -------------------------------------------------------------------------------- */

/* dinp += (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)) * rstd, dnorm = (1 + scale) * dout */
template <typename T>
__global__ void mod_backward_rows_kernel(T *dinp, const T *dout, const T *inp, const T *scale,
                                         int ld, const float *mean, const float *rstd, int N, int C,
                                         int row0, int rps) {
    int row = blockIdx.x * MOD_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    const T *x = inp + off, *d = dout + off, *sc = scale + sample_of(row0, rps, (size_t)row) * ld;
    float m = mean[row], r = rstd[row], s1 = 0.0f, s2 = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dnorm = (1.0f + to_f(sc[c])) * to_f(d[c]), xhat = (to_f(x[c]) - m) * r;
        s1 += dnorm;
        s2 += dnorm * xhat;
    }
    float dmean = warp_sum(s1) / (float)C, dnmean = warp_sum(s2) / (float)C;
    cu_row_update(dinp + off, C, lane, [&](int c, float old) {
        float dnorm = (1.0f + to_f(sc[c])) * to_f(d[c]), xhat = (to_f(x[c]) - m) * r;
        return old + (dnorm - dmean - xhat * dnmean) * r;
    });
}

template <typename T>
static void mod_backward(ig_backend *be, T *dinp, T *dshift, T *dscale, const T *dout, const T *inp,
                         const T *scale, int ld, const float *mean, const float *rstd, int N, int C,
                         int row0, int rps) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "layernorm_modulate_backward";
    mod_backward_rows_kernel<T><<<cu_blocks((size_t)N, MOD_ROWS), MOD_ROWS * 32, 0, cu->stream>>>(
        dinp, dout, inp, scale, ld, mean, rstd, N, C, row0, rps);
    if (!cu_launched(be, what)) return;
    sample_sums<T, 1>(be, dshift, dscale, dout, inp, mean, rstd, ld, N, C, row0, rps, what);
}

void cu_layernorm_modulate_backward(ig_backend *be, void *dinp, void *dshift, void *dscale,
                                    const void *dout, const void *inp, const void *scale, int ld,
                                    const float *mean, const float *rstd, int N, int C, int row0,
                                    int rows_per_sample) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        mod_backward<bf16>(be, (bf16 *)dinp, (bf16 *)dshift, (bf16 *)dscale, (const bf16 *)dout,
                           (const bf16 *)inp, (const bf16 *)scale, ld, mean, rstd, N, C, row0,
                           rows_per_sample);
    else
        mod_backward<float>(be, (float *)dinp, (float *)dshift, (float *)dscale,
                            (const float *)dout, (const float *)inp, (const float *)scale, ld, mean,
                            rstd, N, C, row0, rows_per_sample);
}

template <typename T>
__global__ void gate_backward_kernel(T *dx, const T *dout, const T *gate, int ld, int C, int row0,
                                     int rps, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t row = i / C, c = i % C;
    dx[i] = from_f<T>(to_f(dout[i]) * to_f(gate[sample_of(row0, rps, row) * ld + c]));
}

template <typename T>
static void gate_backward(ig_backend *be, T *dx, T *dgate, const T *dout, const T *x, const T *gate,
                          int ld, int N, int C, int row0, int rps) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "gate_residual_backward";
    /* the sums first: they read dout and x, dx is written after */
    if (!sample_sums<T, 0>(be, dgate, (T *)NULL, dout, x, NULL, NULL, ld, N, C, row0, rps, what))
        return;
    size_t n = (size_t)N * C;
    gate_backward_kernel<T>
        <<<cu_blocks(n, 256), 256, 0, cu->stream>>>(dx, dout, gate, ld, C, row0, rps, n);
    cu_launched(be, what);
}

void cu_gate_residual_backward(ig_backend *be, void *dx, void *dgate, const void *dout,
                               const void *x, const void *gate, int ld, int N, int C, int row0,
                               int rows_per_sample) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        gate_backward<bf16>(be, (bf16 *)dx, (bf16 *)dgate, (const bf16 *)dout, (const bf16 *)x,
                            (const bf16 *)gate, ld, N, C, row0, rows_per_sample);
    else
        gate_backward<float>(be, (float *)dx, (float *)dgate, (const float *)dout, (const float *)x,
                             (const float *)gate, ld, N, C, row0, rows_per_sample);
}
