/* cuda_attention_gemm.cu - self-attention on the GPU as cuBLASLt batched GEMMs (tensor cores)
 * around a fused scale-mask-softmax: the path that stores the [T, T] scores, kept to be measured
 * against the fused kernels of cuda_attention.cu (bench_cuda) and chosen with
 * IG_CUDA_ATTENTION=gemm. Same semantics, lse included: causal or not, document masks,
 * grouped-query attention.
 *
 * Forward, per (b, h) as one batch of B * NH matrices:
 *   q, k, v are copied out of qkv into [B, NH, T, hs] (the GEMMs need one stride per batch; with
 *   grouped-query attention a key/value head is copied once for each of its g query heads);
 *   S = scale * q k^T (fp32, [T, T]); a block per row applies the causal and document masks and
 *   the softmax, writes lse and P = exp(S - lse) (0 where masked) in the act type;
 *   O = P v, copied back into out [B, T, C].
 * Backward: S and P are recomputed from q, k and lse; dv = P^T dO; dP = dO v^T (fp32, in S's
 *   place); dS = P (dP - Dt) * scale (in P's place, Dt = dO_t . O_t); dq = dS k; dk = dS^T q
 *   (per query head); dq copied back into dqkv, dk and dv summed over each key/value head's g
 *   query heads in head order (fp32) as they are copied back.
 * The full [T, T] products are computed (the masked half is multiplied too): simple, and what the
 * tensor cores do fastest. Scratch: B NH T T (4 + act size) bytes plus seven [B, T, C] tensors.
 *
 * Column-major, every [T, hs] row-major head matrix X is the col-major [hs, T] matrix with
 * leading dimension hs, and a row-major [T, T] matrix M is col-major M^T with leading dimension T:
 *   S^T[s, t] = K Q^T:    A = k (transposed), B = q;        m = n = T, k = hs
 *   O^T[d, t] = V^T P^T:  A = v, B = P;                     m = hs, n = T, k = T
 *   dV^T = dO^T P:        A = dO, B = P (transposed);       m = hs, n = T, k = T
 *   dQ^T = K^T dS^T, dK^T = Q^T dS: as O and dV with k, q and dS.
 */
#include <math.h>

#include "cuda_internal.h"

/* x [B, T, ...] rows (row stride `rs`; the heads start at `part`) -> y [B, NH, T, hs]: query
 * head h of y is head h / g of x (g > 1: a key/value head copied for each of its query heads) */
template <typename T>
__global__ void heads_out_kernel(T *y, const T *x, size_t rs, size_t part, int B, int T_, int NH,
                                 int hs, int g) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T_ * hs) return;
    int d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T_), h = (int)(r / T_ % NH), b = (int)(r / T_ / NH);
    y[i] = x[((size_t)b * T_ + t) * rs + part + (size_t)(h / g) * hs + d];
}

/* y [B, NH, T, hs] -> x's head j = the sum of y's heads j*g .. j*g+g-1 in order (fp32; g = 1 is a
 * copy), for the NH / g heads of x */
template <typename T>
__global__ void heads_in_kernel(T *x, const T *y, size_t rs, size_t part, int B, int T_, int NH,
                                int hs, int g) {
    int NX = NH / g;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NX * T_ * hs) return;
    int d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T_), j = (int)(r / T_ % NX), b = (int)(r / T_ / NX);
    T *dst = x + ((size_t)b * T_ + t) * rs + part + (size_t)j * hs + d;
    const T *src = y + (((size_t)b * NH + (size_t)j * g) * T_ + t) * hs + d;
    if (g == 1) {
        *dst = *src;
        return;
    }
    float acc = to_f(src[0]);
    for (int k = 1; k < g; k++) acc += to_f(src[(size_t)k * T_ * hs]);
    *dst = from_f<T>(acc);
}

/* A block per row (b, h, t): masks, max, sum, lse, P. With recompute, lse is read, not written. */
template <typename T>
__global__ void softmax_kernel(T *P, float *lse, const float *S, const int32_t *doc, int T_, int NH,
                               int causal, int recompute) {
    __shared__ float red[32];
    size_t row = blockIdx.x; /* (b * NH + h) * T + t */
    int t = (int)(row % T_), b = (int)(row / T_ / NH);
    const float *s = S + row * T_;
    T *p = P + row * T_;
    const int32_t *dc = doc ? doc + (size_t)b * T_ : NULL;
    int mydoc = dc ? dc[t] : 0;
    int end = causal ? t + 1 : T_; /* the keys it may see are below this */
    float l;
    if (!recompute) {
        float m = -INFINITY;
        for (int j = threadIdx.x; j < end; j += blockDim.x)
            if (!dc || dc[j] == mydoc) m = fmaxf(m, s[j]);
        m = block_max(m, red);
        float sum = 0.0f;
        for (int j = threadIdx.x; j < end; j += blockDim.x)
            if (!dc || dc[j] == mydoc) sum += expf(s[j] - m);
        sum = block_sum(sum, red);
        l = m + logf(sum);
        if (threadIdx.x == 0) lse[row] = l;
    } else {
        l = lse[row];
    }
    for (int j = threadIdx.x; j < T_; j += blockDim.x)
        p[j] = from_f<T>(j < end && (!dc || dc[j] == mydoc) ? expf(s[j] - l) : 0.0f);
}

/* dS = P (dP - Dt) * scale, in place over P (dP in S) */
template <typename T>
__global__ void dsoftmax_kernel(T *P, const float *dP, const float *Dt, size_t n, int T_,
                                float scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    P[i] = from_f<T>(to_f(P[i]) * (dP[i] - Dt[i / T_]) * scale);
}

/* The scratch of one call, carved into 256-byte aligned pieces. */
typedef struct gemm_scratch {
    void *q, *k, *v, *o; /* [B, NH, T, hs] act: o is dO in the backward */
    void *dq, *dk, *dv;  /* backward */
    float *S;            /* [B NH, T, T] fp32 */
    void *P;             /* [B NH, T, T] act */
    float *Dt;           /* [B NH T] */
} gemm_scratch;

static int carve(ig_backend *be, gemm_scratch *g, int B, int T_, int C, int NH, int backward,
                 const char *what) {
    size_t as = ig_backend_act_size(be), btc = cu_round256((size_t)B * T_ * C * as);
    size_t tt = (size_t)B * NH * T_ * T_;
    size_t sbytes = cu_round256(tt * sizeof(float)), pbytes = cu_round256(tt * as);
    size_t dbytes = cu_round256((size_t)B * NH * T_ * sizeof(float));
    size_t total = (backward ? 7 : 4) * btc + sbytes + pbytes + (backward ? dbytes : 0);
    char *s = (char *)cu_scratch(be, total, what);
    if (!s) return 0;
    g->q = s, s += btc;
    g->k = s, s += btc;
    g->v = s, s += btc;
    g->o = s, s += btc;
    if (backward) {
        g->dq = s, s += btc;
        g->dk = s, s += btc;
        g->dv = s, s += btc;
    }
    g->S = (float *)s, s += sbytes;
    g->P = s, s += pbytes;
    g->Dt = backward ? (float *)s : NULL;
    return 1;
}

/* One batched GEMM over the B * NH heads. */
static int heads_gemm(ig_backend *be, int transa, int transb, int m, int n, int k, const void *A,
                      long long lda, long long sa, const void *Bm, long long ldb, long long sb,
                      void *D, long long ldd, long long sd, int d_f32, float alpha, int batch,
                      const char *what) {
    cu_gemm g = {};
    g.transa = transa, g.transb = transb;
    g.m = m, g.n = n, g.k = k;
    g.A = A, g.lda = lda, g.stride_a = sa;
    g.B = Bm, g.ldb = ldb, g.stride_b = sb;
    g.D = D, g.ldd = ldd, g.stride_d = sd;
    g.ab = cu_act_type(be);
    g.d = d_f32 ? CUDA_R_32F : cu_act_type(be);
    g.alpha = alpha, g.beta = 0.0f;
    g.batch = batch;
    return cu_gemm_run(be, &g, what);
}

/* out: the heads of x [B, T, ...] into y [B, NH, T, hs] (head h from head h / g); else (y is the
 * [B, T, ...] tensor here, x the heads) back, each of y's NH / g heads the sum of g of x's */
template <typename T>
static int heads_copy(ig_backend *be, T *y, const T *x, size_t rs, size_t part, int B, int T_,
                      int NH, int hs, int g, int out, const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    size_t n = (size_t)B * NH * T_ * hs;
    if (out)
        heads_out_kernel<T>
            <<<cu_blocks(n, 256), 256, 0, cu->stream>>>(y, x, rs, part, B, T_, NH, hs, g);
    else
        heads_in_kernel<T>
            <<<cu_blocks(n / g, 256), 256, 0, cu->stream>>>(y, x, rs, part, B, T_, NH, hs, g);
    return cu_launched(be, what);
}

/* S = scale q k^T for every head (fp32) */
static int scores(ig_backend *be, const gemm_scratch *g, int B, int T_, int NH, int hs, float scale,
                  const char *what) {
    long long th = (long long)T_ * hs, tt = (long long)T_ * T_;
    return heads_gemm(be, 1, 0, T_, T_, hs, g->k, hs, th, g->q, hs, th, g->S, T_, tt, 1, scale,
                      B * NH, what);
}

template <typename T>
static void gemm_forward(ig_backend *be, T *out, float *lse, const T *qkv, const int32_t *doc,
                         const ig_attention_shape *sh) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "attention_forward (gemm)";
    int B = sh->B, T_ = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    int C = NH * hs, g = NH / NKV;
    gemm_scratch gs;
    if (!carve(be, &gs, B, T_, C, NH, 0, what)) return;
    size_t rs = (size_t)(NH + 2 * NKV) * hs, kpart = (size_t)C, vpart = kpart + (size_t)NKV * hs;
    if (!heads_copy<T>(be, (T *)gs.q, qkv, rs, 0, B, T_, NH, hs, 1, 1, what) ||
        !heads_copy<T>(be, (T *)gs.k, qkv, rs, kpart, B, T_, NH, hs, g, 1, what) ||
        !heads_copy<T>(be, (T *)gs.v, qkv, rs, vpart, B, T_, NH, hs, g, 1, what) ||
        !scores(be, &gs, B, T_, NH, hs, cu_attention_scale(sh), what))
        return;
    softmax_kernel<T><<<(unsigned)((size_t)B * NH * T_), 256, 0, cu->stream>>>(
        (T *)gs.P, lse, gs.S, doc, T_, NH, sh->causal, 0);
    if (!cu_launched(be, what)) return;
    long long th = (long long)T_ * hs, tt = (long long)T_ * T_;
    if (!heads_gemm(be, 0, 0, hs, T_, T_, gs.v, hs, th, gs.P, T_, tt, gs.o, hs, th, 0, 1.0f, B * NH,
                    what))
        return;
    heads_copy<T>(be, out, (const T *)gs.o, (size_t)C, 0, B, T_, NH, hs, 1, 0, what);
}

template <typename T>
static void gemm_backward(ig_backend *be, T *dqkv, const T *dout, const T *qkv, const T *out,
                          const float *lse, const int32_t *doc, const ig_attention_shape *sh) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "attention_backward (gemm)";
    int B = sh->B, T_ = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    int C = NH * hs, g = NH / NKV;
    gemm_scratch gs;
    if (!carve(be, &gs, B, T_, C, NH, 1, what)) return;
    size_t rs = (size_t)(NH + 2 * NKV) * hs, kpart = (size_t)C, vpart = kpart + (size_t)NKV * hs;
    size_t tt = (size_t)B * NH * T_ * T_;
    long long th = (long long)T_ * hs, tts = (long long)T_ * T_;
    int bh = B * NH;
    if (!heads_copy<T>(be, (T *)gs.q, qkv, rs, 0, B, T_, NH, hs, 1, 1, what) ||
        !heads_copy<T>(be, (T *)gs.k, qkv, rs, kpart, B, T_, NH, hs, g, 1, what) ||
        !heads_copy<T>(be, (T *)gs.v, qkv, rs, vpart, B, T_, NH, hs, g, 1, what) ||
        !heads_copy<T>(be, (T *)gs.o, dout, (size_t)C, 0, B, T_, NH, hs, 1, 1, what) ||
        !scores(be, &gs, B, T_, NH, hs, cu_attention_scale(sh), what))
        return;
    cu_attention_rowdots(be, gs.Dt, dout, out, B, T_, C, NH);
    softmax_kernel<T><<<(unsigned)((size_t)bh * T_), 256, 0, cu->stream>>>(
        (T *)gs.P, (float *)lse, gs.S, doc, T_, NH, sh->causal, 1);
    if (!cu_launched(be, what)) return;
    /* dV = P^T dO */
    if (!heads_gemm(be, 0, 1, hs, T_, T_, gs.o, hs, th, gs.P, T_, tts, gs.dv, hs, th, 0, 1.0f, bh,
                    what))
        return;
    /* dP = dO v^T (into S) */
    if (!heads_gemm(be, 1, 0, T_, T_, hs, gs.v, hs, th, gs.o, hs, th, gs.S, T_, tts, 1, 1.0f, bh,
                    what))
        return;
    dsoftmax_kernel<T><<<cu_blocks(tt, 256), 256, 0, cu->stream>>>((T *)gs.P, gs.S, gs.Dt, tt, T_,
                                                                   cu_attention_scale(sh));
    if (!cu_launched(be, what)) return;
    /* dQ = dS k, dK = dS^T q */
    if (!heads_gemm(be, 0, 0, hs, T_, T_, gs.k, hs, th, gs.P, T_, tts, gs.dq, hs, th, 0, 1.0f, bh,
                    what) ||
        !heads_gemm(be, 0, 1, hs, T_, T_, gs.q, hs, th, gs.P, T_, tts, gs.dk, hs, th, 0, 1.0f, bh,
                    what))
        return;
    /* dq per query head; dk and dv summed over each key/value head's query heads */
    if (!heads_copy<T>(be, dqkv, (const T *)gs.dq, rs, 0, B, T_, NH, hs, 1, 0, what) ||
        !heads_copy<T>(be, dqkv, (const T *)gs.dk, rs, kpart, B, T_, NH, hs, g, 0, what))
        return;
    heads_copy<T>(be, dqkv, (const T *)gs.dv, rs, vpart, B, T_, NH, hs, g, 0, what);
}

void cu_attention_gemm_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                               const int32_t *doc, const ig_attention_shape *s) {
    cu_enter(be);
    if (s->B == 0 || s->T == 0) return;
    if (be->act_type == IG_ACT_BF16)
        gemm_forward<bf16>(be, (bf16 *)out, lse, (const bf16 *)qkv, doc, s);
    else
        gemm_forward<float>(be, (float *)out, lse, (const float *)qkv, doc, s);
}

void cu_attention_gemm_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                                const void *out, const float *lse, const int32_t *doc,
                                const ig_attention_shape *s) {
    cu_enter(be);
    if (s->B == 0 || s->T == 0) return;
    if (be->act_type == IG_ACT_BF16)
        gemm_backward<bf16>(be, (bf16 *)dqkv, (const bf16 *)dout, (const bf16 *)qkv,
                            (const bf16 *)out, lse, doc, s);
    else
        gemm_backward<float>(be, (float *)dqkv, (const float *)dout, (const float *)qkv,
                             (const float *)out, lse, doc, s);
}
