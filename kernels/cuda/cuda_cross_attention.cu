/* cuda_cross_attention.cu - DiT's cross-attention to the caption on the GPU (PixArt-alpha's):
 * query row r of N is of sample b = (row0 + r) / rps and attends, in every head, to the first
 * klen[b] of the sample's Tk keys; no causality, scale 1/sqrt(hs). fp32 arithmetic for both act
 * types, no atomics.
 *
 * The design is cuda_attention.cu's (the simplest flash attention, one thread per query row or
 * per key, tiles staged in shared memory and read at one address by every thread, the row and
 * the accumulators padded to the head-size bound D), over cuda_modulate.cu's sample tiles: a tile
 * is up to `rows` rows of one sample, counted from the sample's first row in this slice, so no
 * block ever holds rows of two samples (two samples' keys), wherever a sample starts or ends.
 *   forward: a block per (tile of XA_BQ rows, head), a thread per row: the online softmax over
 *            key tiles of XA_BK keys up to klen[b]; out = o / l, lse = m + log(l).
 *   dq:      the same blocks; dq = scale sum_j dS k_j over the keys in order.
 *   dkdv:    a block per (tile of the dkv sums, head, XA_BQ keys), a thread per key: the tile's
 *            rows in order, dv += P dO, dk += dS q (scaled at the end). When every sample has one
 *            tile here the block adds its sums to dkv itself; otherwise it writes fp32 partials and
 *            a second kernel adds each sample's partials to dkv's value in tile order and rounds
 *            once. A tile of the sums is 128 rows, or more for a long sample (at most 8 tiles a
 *            sample: the partials are [tiles, Tk, 2C] fp32), a function of the sizes alone.
 * Each gradient element has one writer and one order of additions: run to run the same bits.
 * klen is read on the device, clamped to 1 .. Tk (the CPU backend refuses one outside).
 *
 * Shapes (NH heads of hs, C = NH hs, R = 2C): q, out, dout, dq [N, C]; kv, dkv [B, Tk, R] (key head
 * h at h hs, value head h at C + h hs); lse [N, NH]; Dt [NH, N] (cu_attention_rowdots' layout with
 * one sequence of N rows).
 */
#include <math.h>

#include "cuda_internal.h"

#define XA_BQ        64  /* rows (or keys, in dkdv) per block: one thread each */
#define XA_BK        32  /* keys (or rows, in dkdv) per staged tile */
#define XA_SUM_ROWS  128 /* rows per tile of the dkv sums, at least */
#define XA_SUM_TILES 8   /* tiles of the dkv sums per sample, at most (once rows grow) */

/* The tiling of the samples of rows [0, N): samples s0 .. s0 + nsamp - 1, tps tiles of `rows`
 * rows each (the last of a sample, and any past its rows in the slice, shorter or empty). */
typedef struct xa_tiles {
    size_t s0;
    int nsamp, tps, rows;
} xa_tiles;

static xa_tiles tiles_of(int N, int row0, int rps, int rows) {
    xa_tiles t;
    t.s0 = (size_t)row0 / (size_t)rps;
    t.nsamp = (int)(((size_t)row0 + (size_t)N - 1) / (size_t)rps - t.s0 + 1);
    int most = rps < N ? rps : N; /* the most rows a sample has in the slice */
    t.tps = (int)(((size_t)most + rows - 1) / rows);
    t.rows = rows;
    return t;
}

/* Tile `tile`: its sample *s and local rows [*r0, *r1) (empty when r0 >= r1). */
static __device__ __forceinline__ void tile_rows(const xa_tiles &t, size_t tile, int N, int row0,
                                                 int rps, size_t *s, size_t *r0, size_t *r1) {
    *s = t.s0 + tile / t.tps;
    size_t g0 = *s * (size_t)rps, g1 = g0 + (size_t)rps;
    size_t lo = g0 > (size_t)row0 ? g0 - (size_t)row0 : 0;
    size_t hi = g1 - (size_t)row0 < (size_t)N ? g1 - (size_t)row0 : (size_t)N;
    *r0 = lo + tile % t.tps * (size_t)t.rows;
    *r1 = *r0 + t.rows < hi ? *r0 + t.rows : hi;
}

static __device__ __forceinline__ int klen_of(const int32_t *klen, size_t s, int Tk) {
    int k = klen[s];
    return k < 1 ? 1 : k > Tk ? Tk : k;
}

/* ---- forward --------------------------------------------------------------------------------- */

template <typename T, int D>
__global__ void __launch_bounds__(XA_BQ)
    xa_forward_kernel(T *out, float *lse, const T *q, const T *kv, const int32_t *klen, int N,
                      int row0, int rps, int Tk, int NH, int hs, float scale, xa_tiles tl) {
    extern __shared__ float sm[];
    float *Qs = sm;                   /* [XA_BQ][D + 1]: this block's rows, scaled */
    float *Ks = Qs + XA_BQ * (D + 1); /* [XA_BK][D] */
    float *Vs = Ks + XA_BK * D;       /* [XA_BK][D] */
    int h = blockIdx.y, tid = threadIdx.x;
    size_t s, r0, r1;
    tile_rows(tl, blockIdx.x, N, row0, rps, &s, &r0, &r1);
    if (r0 >= r1) return; /* the whole block: a tile past the sample's rows */
    int nr = (int)(r1 - r0), kl = klen_of(klen, s, Tk);
    size_t C = (size_t)NH * hs, R = 2 * C;
    const T *kbase = kv + s * Tk * R + (size_t)h * hs, *vbase = kbase + C;
    for (int i = tid; i < XA_BQ * D; i += XA_BQ) {
        int r = i / D, d = i % D;
        Qs[r * (D + 1) + d] =
            r < nr && d < hs ? to_f(q[(r0 + r) * C + (size_t)h * hs + d]) * scale : 0.0f;
    }
    float m = -INFINITY, l = 0.0f, o[D];
#pragma unroll
    for (int d = 0; d < D; d++) o[d] = 0.0f;
    const float *qr = Qs + tid * (D + 1);
    for (int k0 = 0; k0 < kl; k0 += XA_BK) {
        __syncthreads(); /* the previous tile is used up (and the rows are staged) */
        for (int i = tid; i < XA_BK * D; i += XA_BQ) {
            int r = i / D, d = i % D, j = k0 + r;
            int ok = j < kl && d < hs;
            Ks[i] = ok ? to_f(kbase[(size_t)j * R + d]) : 0.0f;
            Vs[i] = ok ? to_f(vbase[(size_t)j * R + d]) : 0.0f;
        }
        __syncthreads();
        if (tid >= nr) continue;
        int nk = min(XA_BK, kl - k0);
        for (int c = 0; c < nk; c++) online_softmax_key<D>(qr, Ks + c * D, Vs + c * D, m, l, o);
    }
    if (tid >= nr) return;
    size_t row = r0 + tid;
    float inv = 1.0f / l;
    T *orow = out + row * C + (size_t)h * hs;
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < hs) orow[d] = from_f<T>(o[d] * inv);
    lse[row * NH + h] = m + logf(l);
}

/* ---- backward -------------------------------------------------------------------------------- */

template <typename T, int D>
__global__ void __launch_bounds__(XA_BQ)
    xa_dq_kernel(T *dq, const T *dout, const T *q, const T *kv, const float *lse, const float *Dt,
                 const int32_t *klen, int N, int row0, int rps, int Tk, int NH, int hs, float scale,
                 xa_tiles tl) {
    extern __shared__ float sm[];
    float *Qs = sm;                    /* [XA_BQ][D + 1]: this block's rows */
    float *dOs = Qs + XA_BQ * (D + 1); /* [XA_BQ][D + 1]: and their output gradients */
    float *Kt = dOs + XA_BQ * (D + 1); /* [XA_BK][D]: a tile of keys */
    float *Vt = Kt + XA_BK * D;        /* [XA_BK][D]: and values */
    int h = blockIdx.y, tid = threadIdx.x;
    size_t s, r0, r1;
    tile_rows(tl, blockIdx.x, N, row0, rps, &s, &r0, &r1);
    if (r0 >= r1) return;
    int nr = (int)(r1 - r0), kl = klen_of(klen, s, Tk);
    size_t C = (size_t)NH * hs, R = 2 * C;
    const T *kbase = kv + s * Tk * R + (size_t)h * hs, *vbase = kbase + C;
    for (int i = tid; i < XA_BQ * D; i += XA_BQ) {
        int r = i / D, d = i % D;
        int ok = r < nr && d < hs;
        size_t at = (r0 + r) * C + (size_t)h * hs + d;
        Qs[r * (D + 1) + d] = ok ? to_f(q[at]) : 0.0f;
        dOs[r * (D + 1) + d] = ok ? to_f(dout[at]) : 0.0f;
    }
    size_t row = r0 + tid;
    float myl = tid < nr ? lse[row * NH + h] : 0.0f;
    float myD = tid < nr ? Dt[(size_t)h * N + row] : 0.0f;
    float acc[D];
#pragma unroll
    for (int d = 0; d < D; d++) acc[d] = 0.0f;
    const float *qr = Qs + tid * (D + 1), *g = dOs + tid * (D + 1);
    for (int k0 = 0; k0 < kl; k0 += XA_BK) {
        __syncthreads();
        for (int i = tid; i < XA_BK * D; i += XA_BQ) {
            int r = i / D, d = i % D, j = k0 + r;
            int ok = j < kl && d < hs;
            Kt[i] = ok ? to_f(kbase[(size_t)j * R + d]) : 0.0f;
            Vt[i] = ok ? to_f(vbase[(size_t)j * R + d]) : 0.0f;
        }
        __syncthreads();
        if (tid >= nr) continue;
        int nk = min(XA_BK, kl - k0);
        for (int c = 0; c < nk; c++) {
            const float *k = Kt + c * D, *v = Vt + c * D;
            float sc = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < D; d++) {
                sc += qr[d] * k[d];
                dp += g[d] * v[d];
            }
            float p = expf(sc * scale - myl);
            float dsc = p * (dp - myD);
#pragma unroll
            for (int d = 0; d < D; d++) acc[d] += dsc * k[d];
        }
    }
    if (tid >= nr) return;
    T *drow = dq + row * C + (size_t)h * hs;
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < hs) drow[d] = from_f<T>(acc[d] * scale);
}

/* One tile's sums for XA_BQ keys of head h: into part [tiles, Tk, R] (fp32) when part is not
 * NULL, else added to dkv (one tile per sample). Empty tiles write zero partials. */
template <typename T, int D>
__global__ void __launch_bounds__(XA_BQ)
    xa_dkdv_kernel(T *dkv, float *part, const T *dout, const T *q, const T *kv, const float *lse,
                   const float *Dt, const int32_t *klen, int N, int row0, int rps, int Tk, int NH,
                   int hs, float scale, xa_tiles tl) {
    extern __shared__ float sm[];
    float *Ks = sm;                   /* [XA_BQ][D + 1]: this block's keys */
    float *Vs = Ks + XA_BQ * (D + 1); /* [XA_BQ][D + 1]: and values */
    float *Qt = Vs + XA_BQ * (D + 1); /* [XA_BK][D]: a tile of rows */
    float *dOt = Qt + XA_BK * D;      /* [XA_BK][D]: their output gradients */
    float *Lt = dOt + XA_BK * D;      /* [XA_BK]: lse */
    float *Dtt = Lt + XA_BK;          /* [XA_BK]: Dt */
    int h = blockIdx.y, k0 = blockIdx.z * XA_BQ, tid = threadIdx.x;
    size_t tile = blockIdx.x, s, r0, r1;
    tile_rows(tl, tile, N, row0, rps, &s, &r0, &r1);
    int kl = klen_of(klen, s, Tk), key = k0 + tid;
    if (k0 >= kl) return; /* the whole block: keys past klen get nothing */
    size_t C = (size_t)NH * hs, R = 2 * C;
    const T *kbase = kv + s * Tk * R + (size_t)h * hs, *vbase = kbase + C;
    for (int i = tid; i < XA_BQ * D; i += XA_BQ) {
        int r = i / D, d = i % D, j = k0 + r;
        int ok = j < kl && d < hs;
        Ks[r * (D + 1) + d] = ok ? to_f(kbase[(size_t)j * R + d]) : 0.0f;
        Vs[r * (D + 1) + d] = ok ? to_f(vbase[(size_t)j * R + d]) : 0.0f;
    }
    float dk[D], dv[D];
#pragma unroll
    for (int d = 0; d < D; d++) dk[d] = dv[d] = 0.0f;
    const float *k = Ks + tid * (D + 1), *v = Vs + tid * (D + 1);
    for (size_t t0 = r0; t0 < r1; t0 += XA_BK) {
        __syncthreads();
        int nrr = (int)(r1 - t0 < XA_BK ? r1 - t0 : XA_BK);
        for (int i = tid; i < XA_BK * D; i += XA_BQ) {
            int r = i / D, d = i % D;
            int ok = r < nrr && d < hs;
            size_t at = (t0 + r) * C + (size_t)h * hs + d;
            Qt[i] = ok ? to_f(q[at]) : 0.0f;
            dOt[i] = ok ? to_f(dout[at]) : 0.0f;
        }
        if (tid < XA_BK) {
            Lt[tid] = tid < nrr ? lse[(t0 + tid) * NH + h] : 0.0f;
            Dtt[tid] = tid < nrr ? Dt[(size_t)h * N + t0 + tid] : 0.0f;
        }
        __syncthreads();
        if (key >= kl) continue;
        for (int r = 0; r < nrr; r++) { /* the rows in order */
            const float *qr = Qt + r * D, *gr = dOt + r * D;
            float sc = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < D; d++) sc += qr[d] * k[d];
            float p = expf(sc * scale - Lt[r]);
#pragma unroll
            for (int d = 0; d < D; d++) {
                dv[d] += p * gr[d];
                dp += gr[d] * v[d];
            }
            float dsc = p * (dp - Dtt[r]);
#pragma unroll
            for (int d = 0; d < D; d++) dk[d] += dsc * qr[d];
        }
    }
    if (key >= kl) return;
    if (part) {
        float *pr = part + (tile * Tk + key) * R + (size_t)h * hs;
#pragma unroll
        for (int d = 0; d < D; d++)
            if (d < hs) {
                pr[d] = dk[d] * scale;
                pr[C + d] = dv[d];
            }
    } else {
        T *row = dkv + (s * Tk + key) * R + (size_t)h * hs;
#pragma unroll
        for (int d = 0; d < D; d++)
            if (d < hs) {
                row[d] = from_f<T>(to_f(row[d]) + dk[d] * scale);
                row[C + d] = from_f<T>(to_f(row[C + d]) + dv[d]);
            }
    }
}

/* dkv[s, key, :] = dkv's value + sample s's tile partials in tile order, rounded once (one thread
 * per element of the slice's samples' keys below klen) */
template <typename T>
__global__ void xa_dkv_finish_kernel(T *dkv, const float *part, const int32_t *klen, int Tk,
                                     size_t R, xa_tiles tl) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)tl.nsamp * Tk * R) return;
    size_t col = i % R, key = i / R % Tk, si = i / R / Tk, s = tl.s0 + si;
    if ((int)key >= klen_of(klen, s, Tk)) return;
    T *at = dkv + (s * Tk + key) * R + col;
    float t = to_f(*at);
    for (int k = 0; k < tl.tps; k++) t += part[(((size_t)si * tl.tps + k) * Tk + key) * R + col];
    *at = from_f<T>(t);
}

/* ---- launching ------------------------------------------------------------------------------- */

/* Rows per tile of the dkv sums for samples of up to `most` rows in the slice: XA_SUM_ROWS,
 * doubled until a sample has at most XA_SUM_TILES tiles. */
static int sum_rows(int most) {
    int rows = XA_SUM_ROWS;
    while (((size_t)most + rows - 1) / rows > XA_SUM_TILES) rows *= 2;
    return rows;
}

template <typename T, int D>
static void forward(ig_backend *be, T *out, float *lse, const T *q, const T *kv,
                    const int32_t *klen, int N, int row0, int rps, int Tk, int NH, int hs) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "cross_attention_forward";
    size_t bytes = ((size_t)XA_BQ * (D + 1) + 2 * XA_BK * D) * sizeof(float);
    if (!cu_smem_allow(be, (const void *)xa_forward_kernel<T, D>, bytes, what)) return;
    xa_tiles tl = tiles_of(N, row0, rps, XA_BQ);
    dim3 grid((unsigned)((size_t)tl.nsamp * tl.tps), NH);
    xa_forward_kernel<T, D><<<grid, XA_BQ, bytes, cu->stream>>>(
        out, lse, q, kv, klen, N, row0, rps, Tk, NH, hs, 1.0f / sqrtf((float)hs), tl);
    cu_launched(be, what);
}

template <typename T, int D>
static void backward(ig_backend *be, T *dq, T *dkv, const T *dout, const T *q, const T *kv,
                     const T *out, const float *lse, const int32_t *klen, int N, int row0, int rps,
                     int Tk, int NH, int hs) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "cross_attention_backward";
    float scale = 1.0f / sqrtf((float)hs);
    size_t C = (size_t)NH * hs, R = 2 * C;
    xa_tiles qt = tiles_of(N, row0, rps, XA_BQ);
    int most = rps < N ? rps : N;
    xa_tiles st = tiles_of(N, row0, rps, sum_rows(most));
    /* scratch: Dt [NH, N], then the partials [tiles, Tk, R] when a sample has several tiles */
    size_t dbytes = cu_round256((size_t)N * NH * sizeof(float));
    size_t stiles = (size_t)st.nsamp * st.tps;
    size_t pbytes = st.tps > 1 ? stiles * Tk * R * sizeof(float) : 0;
    char *scratch = (char *)cu_scratch(be, dbytes + pbytes, what);
    if (!scratch) return;
    float *Dt = (float *)scratch, *part = pbytes ? (float *)(scratch + dbytes) : NULL;
    cu_attention_rowdots(be, Dt, dout, out, 1, N, (int)C, NH);

    size_t bytes = ((size_t)2 * XA_BQ * (D + 1) + 2 * XA_BK * D) * sizeof(float);
    if (!cu_smem_allow(be, (const void *)xa_dq_kernel<T, D>, bytes, what)) return;
    dim3 qgrid((unsigned)((size_t)qt.nsamp * qt.tps), NH);
    xa_dq_kernel<T, D><<<qgrid, XA_BQ, bytes, cu->stream>>>(dq, dout, q, kv, lse, Dt, klen, N, row0,
                                                            rps, Tk, NH, hs, scale, qt);
    if (!cu_launched(be, what)) return;

    bytes = ((size_t)2 * XA_BQ * (D + 1) + 2 * XA_BK * D + 2 * XA_BK) * sizeof(float);
    if (!cu_smem_allow(be, (const void *)xa_dkdv_kernel<T, D>, bytes, what)) return;
    dim3 kgrid((unsigned)stiles, NH, cu_blocks((size_t)Tk, XA_BQ));
    xa_dkdv_kernel<T, D><<<kgrid, XA_BQ, bytes, cu->stream>>>(dkv, part, dout, q, kv, lse, Dt, klen,
                                                              N, row0, rps, Tk, NH, hs, scale, st);
    if (!cu_launched(be, what) || !part) return;
    size_t n = (size_t)st.nsamp * Tk * R;
    xa_dkv_finish_kernel<T><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(dkv, part, klen, Tk, R, st);
    cu_launched(be, what);
}

template <typename T>
static void forward_t(ig_backend *be, void *out, float *lse, const void *q, const void *kv,
                      const int32_t *klen, int N, int row0, int rps, int Tk, int NH, int hs) {
    switch (cu_head_bound(be, hs, "cross_attention_forward")) {
    case 32:
        forward<T, 32>(be, (T *)out, lse, (const T *)q, (const T *)kv, klen, N, row0, rps, Tk, NH,
                       hs);
        break;
    case 64:
        forward<T, 64>(be, (T *)out, lse, (const T *)q, (const T *)kv, klen, N, row0, rps, Tk, NH,
                       hs);
        break;
    case 128:
        forward<T, 128>(be, (T *)out, lse, (const T *)q, (const T *)kv, klen, N, row0, rps, Tk, NH,
                        hs);
        break;
    default:
        break;
    }
}

template <typename T>
static void backward_t(ig_backend *be, void *dq, void *dkv, const void *dout, const void *q,
                       const void *kv, const void *out, const float *lse, const int32_t *klen,
                       int N, int row0, int rps, int Tk, int NH, int hs) {
    switch (cu_head_bound(be, hs, "cross_attention_backward")) {
    case 32:
        backward<T, 32>(be, (T *)dq, (T *)dkv, (const T *)dout, (const T *)q, (const T *)kv,
                        (const T *)out, lse, klen, N, row0, rps, Tk, NH, hs);
        break;
    case 64:
        backward<T, 64>(be, (T *)dq, (T *)dkv, (const T *)dout, (const T *)q, (const T *)kv,
                        (const T *)out, lse, klen, N, row0, rps, Tk, NH, hs);
        break;
    case 128:
        backward<T, 128>(be, (T *)dq, (T *)dkv, (const T *)dout, (const T *)q, (const T *)kv,
                         (const T *)out, lse, klen, N, row0, rps, Tk, NH, hs);
        break;
    default:
        break;
    }
}

void cu_cross_attention_forward(ig_backend *be, void *out, float *lse, const void *q,
                                const void *kv, const int32_t *klen, int N, int row0,
                                int rows_per_sample, int Tk, int n_head, int head_size) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        forward_t<bf16>(be, out, lse, q, kv, klen, N, row0, rows_per_sample, Tk, n_head, head_size);
    else
        forward_t<float>(be, out, lse, q, kv, klen, N, row0, rows_per_sample, Tk, n_head,
                         head_size);
}

void cu_cross_attention_backward(ig_backend *be, void *dq, void *dkv, const void *dout,
                                 const void *q, const void *kv, const void *out, const float *lse,
                                 const int32_t *klen, int N, int row0, int rows_per_sample, int Tk,
                                 int n_head, int head_size) {
    cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        backward_t<bf16>(be, dq, dkv, dout, q, kv, out, lse, klen, N, row0, rows_per_sample, Tk,
                         n_head, head_size);
    else
        backward_t<float>(be, dq, dkv, dout, q, kv, out, lse, klen, N, row0, rows_per_sample, Tk,
                          n_head, head_size);
}
