/* cuda_attention.cu - self-attention on the GPU, fused: scale, causal and document masks and an
 * online softmax in one kernel, no [T, T] matrix ever stored; its backward in two kernels
 * without atomics; and the KV-cache form for sampling. Causal or not, multi-head or grouped-query
 * (query head h reads key/value head h / g, g = n_head / n_kv_head).
 *
 * The design is the simplest flash attention: one thread per query (or per key in the backward)
 * keeps its own row, K and V (or Q and dO) tiles are staged in shared memory and read by every
 * thread of the block at the same address (broadcasts: no bank conflicts), and all arithmetic is
 * fp32 in a fixed order. A block is (b, h, 64 queries); it walks the key tiles of 32 keys its
 * queries can see (causal: up to its last query; else all). Per visible key a thread computes the
 * score s = scale * q.k, and keeps the running max m, sum l and output o of the online softmax
 * (rescaled by exp(m_old - m_new) when the max grows); at the end out = o / l and
 * lse = m + log(l). The query row and the accumulator are padded to the head-size bound D of the
 * template (32, 64 or 128; padding columns are zero), so every loop has a compile-time length.
 * CUDA cores, not tensor cores: simple and exact; cuda_attention_gemm.cu is the tensor-core path
 * (cuBLAS) that bench_cuda measures against it.
 *
 * Backward (dS = P (dP - Dt), Dt = dO_t . O_t, P = exp(s - lse)):
 *   dkdv: a block per (b, key/value head j, 64 keys), a thread per key s; for each of j's g
 *         query heads in order, the query tiles from the block's first key (causal; else from 0)
 *         to T; dv_s += P dO_t, dk_s += dS q_t (scaled at the end): the group's sum in one order.
 *   dq:   a block per (b, h, 64 queries), a thread per query t; key tiles up to its last query
 *         (causal; else all); dq_t += dS k_s (scaled at the end).
 * Each gradient element has one writer and one order of additions: deterministic.
 *
 * Masks: key s is visible to query t when (not causal, or s <= t) and, with doc,
 * doc[b, s] == doc[b, t].
 * Shapes (NH query heads, NKV key/value heads, C = NH hs, R = C + 2 NKV hs): qkv, dqkv [B, T, R]
 * (the NH query heads, then NKV key heads, then NKV value heads); out, dout [B, T, C];
 * lse [B, NH, T]; doc [B, T]. Cached: q, out [B, Tq, C]; k, v [B, Tmax, NKV hs].
 */
#include <math.h>

#include "cuda_internal.h"

#define ATT_BQ       64 /* queries (or keys, in dkdv) per block: one thread each */
#define ATT_BK       32 /* keys (or queries, in dkdv) per staged tile */
#define SMEM_DEFAULT (48 * 1024)

/* ---- forward --------------------------------------------------------------------------------- */

template <typename T, int D>
__global__ void __launch_bounds__(ATT_BQ)
    att_forward_kernel(T *out, float *lse, const T *qkv, const int32_t *doc, int T_, int NH,
                       int NKV, int hs, int causal, float scale) {
    extern __shared__ float sm[];
    float *Qs = sm;                     /* [ATT_BQ][D + 1]: this block's queries, scaled */
    float *Ks = Qs + ATT_BQ * (D + 1);  /* [ATT_BK][D] */
    float *Vs = Ks + ATT_BK * D;        /* [ATT_BK][D] */
    int *ds = (int *)(Vs + ATT_BK * D); /* [ATT_BK]: the key tile's document ids */
    int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * ATT_BQ, tid = threadIdx.x;
    int t = q0 + tid, C = NH * hs, kvh = h / (NH / NKV);
    size_t rs = (size_t)(NH + 2 * NKV) * hs;
    const T *base = qkv + (size_t)b * T_ * rs + (size_t)h * hs;
    const T *kbase = qkv + (size_t)b * T_ * rs + (size_t)(NH + kvh) * hs;
    const T *vbase = kbase + (size_t)NKV * hs;
    for (int i = tid; i < ATT_BQ * D; i += ATT_BQ) {
        int r = i / D, d = i % D, tq = q0 + r;
        Qs[r * (D + 1) + d] = tq < T_ && d < hs ? to_f(base[tq * rs + d]) * scale : 0.0f;
    }
    int mydoc = doc && t < T_ ? doc[(size_t)b * T_ + t] : 0;
    float m = -INFINITY, l = 0.0f, o[D];
#pragma unroll
    for (int d = 0; d < D; d++) o[d] = 0.0f;
    const float *q = Qs + tid * (D + 1);
    int kend = causal ? min(T_, q0 + ATT_BQ) : T_;
    for (int k0 = 0; k0 < kend; k0 += ATT_BK) {
        __syncthreads(); /* the previous tile is used up (and the queries are staged) */
        for (int i = tid; i < ATT_BK * D; i += ATT_BQ) {
            int r = i / D, d = i % D, s = k0 + r;
            int ok = s < T_ && d < hs;
            Ks[i] = ok ? to_f(kbase[s * rs + d]) : 0.0f;
            Vs[i] = ok ? to_f(vbase[s * rs + d]) : 0.0f;
        }
        if (tid < ATT_BK) ds[tid] = doc && k0 + tid < T_ ? doc[(size_t)b * T_ + k0 + tid] : 0;
        __syncthreads();
        if (t >= T_) continue;
        /* the keys of this tile it may see: s <= t (causal), else all of the tile's */
        int nk = causal ? min(ATT_BK, t - k0 + 1) : min(ATT_BK, T_ - k0);
        for (int c = 0; c < nk; c++) {
            if (doc && ds[c] != mydoc) continue;
            online_softmax_key<D>(q, Ks + c * D, Vs + c * D, m, l, o);
        }
    }
    if (t >= T_) return;
    float inv = 1.0f / l;
    T *orow = out + ((size_t)b * T_ + t) * C + (size_t)h * hs;
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < hs) orow[d] = from_f<T>(o[d] * inv);
    lse[((size_t)b * NH + h) * T_ + t] = m + logf(l);
}

/* ---- backward -------------------------------------------------------------------------------- */

/* Dt[b, h, t] = dout_t . out_t over the head's hs channels */
template <typename T>
__global__ void att_dot_kernel(float *Dt, const T *dout, const T *out, int B, int T_, int C, int NH,
                               int hs) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* (b * NH + h) * T + t */
    if (i >= (size_t)B * NH * T_) return;
    int t = (int)(i % T_), h = (int)(i / T_ % NH), b = (int)(i / T_ / NH);
    size_t off = ((size_t)b * T_ + t) * C + (size_t)h * hs;
    float s = 0.0f;
    for (int d = 0; d < hs; d++) s += to_f(dout[off + d]) * to_f(out[off + d]);
    Dt[i] = s;
}

template <typename T, int D>
__global__ void __launch_bounds__(ATT_BQ)
    att_dkdv_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dt,
                    const int32_t *doc, int T_, int NH, int NKV, int hs, int causal, float scale) {
    extern __shared__ float sm[];
    float *Ks = sm;                    /* [ATT_BQ][D + 1]: this block's keys */
    float *Vs = Ks + ATT_BQ * (D + 1); /* [ATT_BQ][D + 1]: and values */
    float *Qt = Vs + ATT_BQ * (D + 1); /* [ATT_BK][D]: a tile of queries */
    float *dOt = Qt + ATT_BK * D;      /* [ATT_BK][D]: their output gradients */
    float *Lt = dOt + ATT_BK * D;      /* [ATT_BK]: lse */
    float *Dtt = Lt + ATT_BK;          /* [ATT_BK]: Dt */
    int *dt = (int *)(Dtt + ATT_BK);   /* [ATT_BK]: document ids */
    int b = blockIdx.z, kvh = blockIdx.y, k0 = blockIdx.x * ATT_BQ, tid = threadIdx.x;
    int s = k0 + tid, C = NH * hs, g = NH / NKV;
    size_t rs = (size_t)(NH + 2 * NKV) * hs;
    const T *kbase = qkv + (size_t)b * T_ * rs + (size_t)(NH + kvh) * hs;
    const T *vbase = kbase + (size_t)NKV * hs;
    for (int i = tid; i < ATT_BQ * D; i += ATT_BQ) {
        int r = i / D, d = i % D, sk = k0 + r;
        int ok = sk < T_ && d < hs;
        Ks[r * (D + 1) + d] = ok ? to_f(kbase[sk * rs + d]) : 0.0f;
        Vs[r * (D + 1) + d] = ok ? to_f(vbase[sk * rs + d]) : 0.0f;
    }
    int mydoc = doc && s < T_ ? doc[(size_t)b * T_ + s] : 0;
    float dk[D], dv[D];
#pragma unroll
    for (int d = 0; d < D; d++) dk[d] = dv[d] = 0.0f;
    const float *k = Ks + tid * (D + 1), *v = Vs + tid * (D + 1);
    /* the query heads of this key/value head in order; causal: queries t >= s, from the first
     * key on */
    for (int h = kvh * g; h < (kvh + 1) * g; h++) {
        size_t bh = (size_t)b * NH + h;
        const T *qbase = qkv + (size_t)b * T_ * rs + (size_t)h * hs;
        const T *gbase = dout + (size_t)b * T_ * C + (size_t)h * hs;
        for (int t0 = causal ? k0 : 0; t0 < T_; t0 += ATT_BK) {
            __syncthreads();
            for (int i = tid; i < ATT_BK * D; i += ATT_BQ) {
                int r = i / D, d = i % D, tq = t0 + r;
                int ok = tq < T_ && d < hs;
                Qt[i] = ok ? to_f(qbase[tq * rs + d]) : 0.0f;
                dOt[i] = ok ? to_f(gbase[(size_t)tq * C + d]) : 0.0f;
            }
            if (tid < ATT_BK) {
                int tq = t0 + tid;
                Lt[tid] = tq < T_ ? lse[bh * T_ + tq] : 0.0f;
                Dtt[tid] = tq < T_ ? Dt[bh * T_ + tq] : 0.0f;
                dt[tid] = doc && tq < T_ ? doc[(size_t)b * T_ + tq] : 0;
            }
            __syncthreads();
            if (s >= T_) continue;
            for (int r = 0; r < ATT_BK; r++) {
                int tq = t0 + r;
                if ((causal && tq < s) || tq >= T_ || (doc && dt[r] != mydoc)) continue;
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
    }
    if (s >= T_) return;
    T *row = dqkv + ((size_t)b * T_ + s) * rs + (size_t)(NH + kvh) * hs;
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < hs) {
            row[d] = from_f<T>(dk[d] * scale);
            row[(size_t)NKV * hs + d] = from_f<T>(dv[d]);
        }
}

template <typename T, int D>
__global__ void __launch_bounds__(ATT_BQ)
    att_dq_kernel(T *dqkv, const T *dout, const T *qkv, const float *lse, const float *Dt,
                  const int32_t *doc, int T_, int NH, int NKV, int hs, int causal, float scale) {
    extern __shared__ float sm[];
    float *Qs = sm;                     /* [ATT_BQ][D + 1]: this block's queries */
    float *dOs = Qs + ATT_BQ * (D + 1); /* [ATT_BQ][D + 1]: and their output gradients */
    float *Kt = dOs + ATT_BQ * (D + 1); /* [ATT_BK][D]: a tile of keys */
    float *Vt = Kt + ATT_BK * D;        /* [ATT_BK][D]: and values */
    int *dt = (int *)(Vt + ATT_BK * D); /* [ATT_BK]: document ids */
    int b = blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * ATT_BQ, tid = threadIdx.x;
    int t = q0 + tid, C = NH * hs, kvh = h / (NH / NKV);
    size_t rs = (size_t)(NH + 2 * NKV) * hs, bh = (size_t)b * NH + h;
    const T *base = qkv + (size_t)b * T_ * rs + (size_t)h * hs;
    const T *kbase = qkv + (size_t)b * T_ * rs + (size_t)(NH + kvh) * hs;
    const T *vbase = kbase + (size_t)NKV * hs;
    const T *gbase = dout + (size_t)b * T_ * C + (size_t)h * hs;
    for (int i = tid; i < ATT_BQ * D; i += ATT_BQ) {
        int r = i / D, d = i % D, tq = q0 + r;
        int ok = tq < T_ && d < hs;
        Qs[r * (D + 1) + d] = ok ? to_f(base[tq * rs + d]) : 0.0f;
        dOs[r * (D + 1) + d] = ok ? to_f(gbase[(size_t)tq * C + d]) : 0.0f;
    }
    int mydoc = doc && t < T_ ? doc[(size_t)b * T_ + t] : 0;
    float myl = t < T_ ? lse[bh * T_ + t] : 0.0f, myD = t < T_ ? Dt[bh * T_ + t] : 0.0f;
    float dq[D];
#pragma unroll
    for (int d = 0; d < D; d++) dq[d] = 0.0f;
    const float *q = Qs + tid * (D + 1), *g = dOs + tid * (D + 1);
    int kend = causal ? min(T_, q0 + ATT_BQ) : T_;
    for (int k0 = 0; k0 < kend; k0 += ATT_BK) {
        __syncthreads();
        for (int i = tid; i < ATT_BK * D; i += ATT_BQ) {
            int r = i / D, d = i % D, s = k0 + r;
            int ok = s < T_ && d < hs;
            Kt[i] = ok ? to_f(kbase[s * rs + d]) : 0.0f;
            Vt[i] = ok ? to_f(vbase[s * rs + d]) : 0.0f;
        }
        if (tid < ATT_BK) dt[tid] = doc && k0 + tid < T_ ? doc[(size_t)b * T_ + k0 + tid] : 0;
        __syncthreads();
        if (t >= T_) continue;
        int nk = causal ? min(ATT_BK, t - k0 + 1) : min(ATT_BK, T_ - k0);
        for (int c = 0; c < nk; c++) {
            if (doc && dt[c] != mydoc) continue;
            const float *k = Kt + c * D, *v = Vt + c * D;
            float sc = 0.0f, dp = 0.0f;
#pragma unroll
            for (int d = 0; d < D; d++) {
                sc += q[d] * k[d];
                dp += g[d] * v[d];
            }
            float p = expf(sc * scale - myl);
            float dsc = p * (dp - myD);
#pragma unroll
            for (int d = 0; d < D; d++) dq[d] += dsc * k[d];
        }
    }
    if (t >= T_) return;
    T *row = dqkv + ((size_t)b * T_ + t) * rs + (size_t)h * hs;
#pragma unroll
    for (int d = 0; d < D; d++)
        if (d < hs) row[d] = from_f<T>(dq[d] * scale);
}

/* ---- launching ------------------------------------------------------------------------------- */

/* cu_smem_allow and cu_head_bound (cuda_internal.h): cuda_cross_attention.cu launches with them
 * too */
int cu_smem_allow(ig_backend *be, const void *kernel, size_t bytes, const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    if (bytes > cu->smem_optin) {
        ig_backend_raise(be, IG_ERR_UNSUPPORTED,
                         "%s: needs %zu bytes of shared memory per block, the device allows %zu",
                         what, bytes, cu->smem_optin);
        return 0;
    }
    if (bytes <= SMEM_DEFAULT) return 1;
    return cu_ok(
        be, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes),
        what);
}

int cu_head_bound(ig_backend *be, int hs, const char *what) {
    if (hs <= 32) return 32;
    if (hs <= 64) return 64;
    if (hs <= 128) return 128;
    ig_backend_raise(be, IG_ERR_UNSUPPORTED,
                     "%s: head size %d: the CUDA attention supports head sizes up to 128", what,
                     hs);
    return 0;
}

template <typename T, int D>
static void forward(ig_backend *be, T *out, float *lse, const T *qkv, const int32_t *doc,
                    const ig_attention_shape *sh) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "attention_forward";
    size_t bytes = ((size_t)ATT_BQ * (D + 1) + 2 * ATT_BK * D + ATT_BK) * sizeof(float);
    if (!cu_smem_allow(be, (const void *)att_forward_kernel<T, D>, bytes, what)) return;
    int hs = sh->head_size;
    dim3 grid(cu_blocks((size_t)sh->T, ATT_BQ), sh->n_head, sh->B);
    att_forward_kernel<T, D>
        <<<grid, ATT_BQ, bytes, cu->stream>>>(out, lse, qkv, doc, sh->T, sh->n_head, sh->n_kv_head,
                                              hs, sh->causal, cu_attention_scale(sh));
    cu_launched(be, what);
}

template <typename T, int D>
static void backward(ig_backend *be, T *dqkv, const T *dout, const T *qkv, const T *out,
                     const float *lse, const int32_t *doc, const ig_attention_shape *sh) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "attention_backward";
    int B = sh->B, T_ = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    float scale = cu_attention_scale(sh);
    size_t nd = (size_t)B * NH * T_;
    float *Dt = (float *)cu_scratch(be, nd * sizeof(float), what);
    if (!Dt) return;
    cu_attention_rowdots(be, Dt, dout, out, B, T_, NH * hs, NH);
    size_t bytes = ((size_t)2 * ATT_BQ * (D + 1) + 2 * ATT_BK * D + 3 * ATT_BK) * sizeof(float);
    if (!cu_smem_allow(be, (const void *)att_dkdv_kernel<T, D>, bytes, what)) return;
    dim3 kgrid(cu_blocks((size_t)T_, ATT_BQ), NKV, B); /* per key/value head */
    att_dkdv_kernel<T, D><<<kgrid, ATT_BQ, bytes, cu->stream>>>(dqkv, dout, qkv, lse, Dt, doc, T_,
                                                                NH, NKV, hs, sh->causal, scale);
    if (!cu_launched(be, what)) return;
    bytes = ((size_t)2 * ATT_BQ * (D + 1) + 2 * ATT_BK * D + ATT_BK) * sizeof(float);
    if (!cu_smem_allow(be, (const void *)att_dq_kernel<T, D>, bytes, what)) return;
    dim3 qgrid(cu_blocks((size_t)T_, ATT_BQ), NH, B); /* per query head */
    att_dq_kernel<T, D><<<qgrid, ATT_BQ, bytes, cu->stream>>>(dqkv, dout, qkv, lse, Dt, doc, T_, NH,
                                                              NKV, hs, sh->causal, scale);
    cu_launched(be, what);
}

template <typename T>
static void forward_t(ig_backend *be, void *out, float *lse, const void *qkv, const int32_t *doc,
                      const ig_attention_shape *sh) {
    switch (cu_head_bound(be, sh->head_size, "attention_forward")) {
    case 32:
        forward<T, 32>(be, (T *)out, lse, (const T *)qkv, doc, sh);
        break;
    case 64:
        forward<T, 64>(be, (T *)out, lse, (const T *)qkv, doc, sh);
        break;
    case 128:
        forward<T, 128>(be, (T *)out, lse, (const T *)qkv, doc, sh);
        break;
    default:
        break;
    }
}

template <typename T>
static void backward_t(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                       const void *out, const float *lse, const int32_t *doc,
                       const ig_attention_shape *sh) {
    switch (cu_head_bound(be, sh->head_size, "attention_backward")) {
    case 32:
        backward<T, 32>(be, (T *)dqkv, (const T *)dout, (const T *)qkv, (const T *)out, lse, doc,
                        sh);
        break;
    case 64:
        backward<T, 64>(be, (T *)dqkv, (const T *)dout, (const T *)qkv, (const T *)out, lse, doc,
                        sh);
        break;
    case 128:
        backward<T, 128>(be, (T *)dqkv, (const T *)dout, (const T *)qkv, (const T *)out, lse, doc,
                         sh);
        break;
    default:
        break;
    }
}

void cu_attention_rowdots(ig_backend *be, float *Dt, const void *dout, const void *out, int B,
                          int T, int C, int NH) {
    cu_impl *cu = (cu_impl *)be->impl;
    size_t nd = (size_t)B * NH * T;
    if (be->act_type == IG_ACT_BF16)
        att_dot_kernel<bf16><<<cu_blocks(nd, 256), 256, 0, cu->stream>>>(
            Dt, (const bf16 *)dout, (const bf16 *)out, B, T, C, NH, C / NH);
    else
        att_dot_kernel<float><<<cu_blocks(nd, 256), 256, 0, cu->stream>>>(
            Dt, (const float *)dout, (const float *)out, B, T, C, NH, C / NH);
    cu_launched(be, "attention_backward (dout . out)");
}

void cu_attention_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                          const int32_t *doc, const ig_attention_shape *s) {
    cu_enter(be);
    if (s->B == 0 || s->T == 0) return;
    if (be->act_type == IG_ACT_BF16)
        forward_t<bf16>(be, out, lse, qkv, doc, s);
    else
        forward_t<float>(be, out, lse, qkv, doc, s);
}

void cu_attention_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                           const void *out, const float *lse, const int32_t *doc,
                           const ig_attention_shape *s) {
    cu_enter(be);
    if (s->B == 0 || s->T == 0) return;
    if (be->act_type == IG_ACT_BF16)
        backward_t<bf16>(be, dqkv, dout, qkv, out, lse, doc, s);
    else
        backward_t<float>(be, dqkv, dout, qkv, out, lse, doc, s);
}

/* ---- the KV-cache form ----------------------------------------------------------------------- */

/* A block per (query i, head h, sequence b): the scores of its pos0 + i + 1 keys go to S (global
 * scratch), then their max, the exponentials and their sum (block reductions in a fixed order),
 * then each output channel is summed over the keys in order. Head h reads the caches' key/value
 * head h / (NH / NKV). */
template <typename T>
__global__ void att_cached_kernel(T *out, const T *q, const T *k, const T *v, float *S, int Tq,
                                  int pos0, int Tmax, int NH, int NKV, int hs, float scale) {
    __shared__ float red[32];
    int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int n = pos0 + i + 1, L = pos0 + Tq;
    size_t C = (size_t)NH * hs, Ckv = (size_t)NKV * hs;
    float *s = S + (((size_t)b * NH + h) * Tq + i) * L;
    const T *qr = q + ((size_t)b * Tq + i) * C + (size_t)h * hs;
    const T *kb = k + (size_t)b * Tmax * Ckv + (size_t)(h / (NH / NKV)) * hs;
    const T *vb = v + (size_t)b * Tmax * Ckv + (size_t)(h / (NH / NKV)) * hs;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float d = 0.0f;
        for (int c = 0; c < hs; c++) d += to_f(qr[c]) * to_f(kb[(size_t)j * Ckv + c]);
        d *= scale;
        s[j] = d;
        mx = fmaxf(mx, d);
    }
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float e = expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    sum = block_sum(sum, red);
    __syncthreads(); /* every exponential is in S */
    T *orow = out + ((size_t)b * Tq + i) * C + (size_t)h * hs;
    for (int c = threadIdx.x; c < hs; c += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < n; j++) o += s[j] * to_f(vb[(size_t)j * Ckv + c]);
        orow[c] = from_f<T>(o / sum);
    }
}

void cu_attention_cached(ig_backend *be, void *out, const void *q, const void *k, const void *v,
                         int pos0, int Tmax, const ig_attention_shape *sh) {
    cu_impl *cu = cu_enter(be);
    const char *what = "attention_cached";
    int B = sh->B, Tq = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    if (B == 0 || Tq == 0) return;
    size_t L = (size_t)pos0 + Tq;
    float *S = (float *)cu_scratch(be, (size_t)B * NH * Tq * L * sizeof(float), what);
    if (!S) return;
    dim3 grid(Tq, NH, B);
    float scale = cu_attention_scale(sh);
    if (be->act_type == IG_ACT_BF16)
        att_cached_kernel<<<grid, 128, 0, cu->stream>>>((bf16 *)out, (const bf16 *)q,
                                                        (const bf16 *)k, (const bf16 *)v, S, Tq,
                                                        pos0, Tmax, NH, NKV, hs, scale);
    else
        att_cached_kernel<<<grid, 128, 0, cu->stream>>>((float *)out, (const float *)q,
                                                        (const float *)k, (const float *)v, S, Tq,
                                                        pos0, Tmax, NH, NKV, hs, scale);
    cu_launched(be, what);
}
