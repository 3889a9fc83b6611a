/* cuda_attention_bias.cu - T5's attention pieces on the GPU: the relative position bias from the
 * bucket table, and self-attention with an additive bias [n_head, T, T] and a key padding mask,
 * forward only (the encoder is used frozen).
 *
 * Position bias: the buckets of the 2T - 1 distances are computed on the host by
 * ig_t5_relative_position_bucket (backend_host.c: torch's arithmetic, the CPU's bits; the
 * device's logf could round a boundary distance the other way), copied to the device, and a
 * thread per element gathers bias[h, i, j] = table[bucket(j - i), h].
 *
 * Attention: the GEMM path of cuda_attention_gemm.cu (T5's sequences are short: 120 to 300
 * tokens): q, k, v copied out of qkv into [B, NH, T, hs] (a key/value head copied for each of its
 * query heads); S = scale q k^T (cuBLASLt, fp32 [T, T] per head); a block per row adds the bias,
 * keeps the keys below klen[b] (and at or before the query when causal), and writes lse and
 * P = exp(S + bias - lse) (0 elsewhere) in the act type; O = P v; O copied into out [B, T, C].
 * Sequences go in chunks whose scratch stays within ATT_BIAS_SCRATCH bytes (at least one
 * sequence). klen outside 1 .. T is clamped (the kernels cannot report it; the CPU backend
 * refuses it).
 *
 * Column-major GEMMs as in cuda_attention_gemm.cu: S^T = K Q^T (A = k transposed, B = q), O^T =
 * V^T P^T (A = v, B = P).
 */
#include <math.h>
#include <stdlib.h>

#include "cuda_internal.h"

#define ATT_BIAS_SCRATCH ((size_t)256 << 20)

/* ---- position bias --------------------------------------------------------------------------- */

template <typename T>
__global__ void t5_bias_kernel(T *bias, const T *table, const int *bucket, int T_, int NH) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)NH * T_ * T_) return;
    int j = (int)(i % T_), t = (int)(i / T_ % T_), h = (int)(i / T_ / T_);
    bias[i] = table[(size_t)bucket[T_ - 1 + j - t] * NH + h];
}

void cu_t5_position_bias(ig_backend *be, void *bias, const void *table, int T, int n_head,
                         int num_buckets, int max_distance, int bidirectional) {
    cu_impl *cu = cu_enter(be);
    const char *what = "t5_position_bias";
    size_t nb = 2 * (size_t)T - 1;
    int *host = (int *)ig_calloc(be->ctx, nb, sizeof(int));
    if (!host) {
        ig_backend_raise(be, IG_ERR_NOMEM, "%s: out of host memory", what);
        return;
    }
    for (int d = -(T - 1); d <= T - 1; d++)
        host[d + T - 1] =
            ig_t5_relative_position_bucket(d, bidirectional, num_buckets, max_distance);
    int *dev = (int *)cu_scratch(be, nb * sizeof(int), what);
    /* from pageable memory: the call returns once the bytes are staged, host may go */
    int ok =
        dev &&
        cu_ok(be, cudaMemcpyAsync(dev, host, nb * sizeof(int), cudaMemcpyHostToDevice, cu->stream),
              what);
    ig_free(be->ctx, host);
    if (!ok) return;
    size_t n = (size_t)n_head * T * T;
    if (be->act_type == IG_ACT_BF16)
        t5_bias_kernel<bf16><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)bias, (const bf16 *)table, dev, T, n_head);
    else
        t5_bias_kernel<float><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)bias, (const float *)table, dev, T, n_head);
    cu_launched(be, what);
}

/* ---- attention ------------------------------------------------------------------------------- */

/* y [B, NH, T, hs] = the heads of x [B, T, R] starting at `part`, query head h reading head h/g */
template <typename T>
__global__ void ab_heads_out_kernel(T *y, const T *x, size_t R, size_t part, int B, int T_, int NH,
                                    int hs, int g) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T_ * hs) return;
    int d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T_), h = (int)(r / T_ % NH), b = (int)(r / T_ / NH);
    y[i] = x[((size_t)b * T_ + t) * R + part + (size_t)(h / g) * hs + d];
}

/* out [B, T, NH hs] = o [B, NH, T, hs] */
template <typename T>
__global__ void ab_heads_in_kernel(T *out, const T *o, int B, int T_, int NH, int hs) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T_ * hs) return;
    int d = (int)(i % hs);
    size_t r = i / hs;
    int t = (int)(r % T_), h = (int)(r / T_ % NH), b = (int)(r / T_ / NH);
    out[((size_t)b * T_ + t) * NH * hs + (size_t)h * hs + d] = o[i];
}

/* A block per row (b, h, t) of the chunk: bias, mask, max, sum, lse, P. */
template <typename T>
__global__ void ab_softmax_kernel(T *P, float *lse, const float *S, const T *bias,
                                  const int32_t *klen, int T_, int NH, int causal) {
    __shared__ float red[32];
    size_t row = blockIdx.x; /* (b * NH + h) * T + t */
    int t = (int)(row % T_), h = (int)(row / T_ % NH), b = (int)(row / T_ / NH);
    const float *s = S + row * T_;
    const T *bi = bias ? bias + ((size_t)h * T_ + t) * T_ : NULL;
    T *p = P + row * T_;
    int kl = klen ? klen[b] : T_;
    kl = kl < 1 ? 1 : kl > T_ ? T_ : kl;
    int end = causal && t + 1 < kl ? t + 1 : kl;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < end; j += blockDim.x)
        m = fmaxf(m, s[j] + (bi ? to_f(bi[j]) : 0.0f));
    m = block_max(m, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < end; j += blockDim.x)
        sum += expf(s[j] + (bi ? to_f(bi[j]) : 0.0f) - m);
    sum = block_sum(sum, red);
    float l = m + logf(sum);
    if (lse && threadIdx.x == 0) lse[row] = l;
    for (int j = threadIdx.x; j < T_; j += blockDim.x)
        p[j] = from_f<T>(j < end ? expf(s[j] + (bi ? to_f(bi[j]) : 0.0f) - l) : 0.0f);
}

/* one batched GEMM over `batch` heads (see the file's header for the mapping) */
static int ab_gemm(ig_backend *be, int transa, int m, int n, int k, const void *A, long long lda,
                   long long sa, const void *Bm, long long ldb, long long sb, void *D,
                   long long ldd, long long sd, int d_f32, float alpha, int batch,
                   const char *what) {
    cu_gemm g = {};
    g.transa = transa, g.transb = 0;
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

template <typename T>
static void ab_forward(ig_backend *be, T *out, float *lse, const T *qkv, const T *bias,
                       const int32_t *klen, const ig_attention_shape *sh) {
    cu_impl *cu = (cu_impl *)be->impl;
    const char *what = "attention_bias_forward";
    int B = sh->B, T_ = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    int C = NH * hs, g = NH / NKV;
    size_t R = (size_t)(NH + 2 * NKV) * hs, as = sizeof(T);
    size_t head = cu_round256((size_t)NH * T_ * hs * as); /* one sequence's q (or k, v, o) */
    size_t tt = (size_t)NH * T_ * T_;
    size_t per = 4 * head + cu_round256(tt * 4) + cu_round256(tt * as);
    int Bc = (int)(ATT_BIAS_SCRATCH / per);
    Bc = Bc < 1 ? 1 : Bc > B ? B : Bc;
    char *sc = (char *)cu_scratch(be, per * Bc, what);
    if (!sc) return;
    T *q = (T *)sc, *k = (T *)(sc + head * Bc), *v = (T *)(sc + 2 * head * Bc),
      *o = (T *)(sc + 3 * head * Bc);
    float *S = (float *)(sc + 4 * head * Bc);
    T *P = (T *)(sc + 4 * head * Bc + cu_round256(tt * 4) * Bc);
    long long th = (long long)T_ * hs, tts = (long long)T_ * T_;
    for (int b0 = 0; b0 < B; b0 += Bc) {
        int nb = B - b0 < Bc ? B - b0 : Bc, bh = nb * NH;
        const T *x = qkv + (size_t)b0 * T_ * R;
        size_t n = (size_t)bh * T_ * hs;
        ab_heads_out_kernel<T>
            <<<cu_blocks(n, 256), 256, 0, cu->stream>>>(q, x, R, 0, nb, T_, NH, hs, 1);
        ab_heads_out_kernel<T>
            <<<cu_blocks(n, 256), 256, 0, cu->stream>>>(k, x, R, (size_t)C, nb, T_, NH, hs, g);
        ab_heads_out_kernel<T><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            v, x, R, (size_t)C + (size_t)NKV * hs, nb, T_, NH, hs, g);
        if (!cu_launched(be, what)) return;
        if (!ab_gemm(be, 1, T_, T_, hs, k, hs, th, q, hs, th, S, T_, tts, 1, cu_attention_scale(sh),
                     bh, what))
            return;
        ab_softmax_kernel<T><<<(unsigned)((size_t)bh * T_), 128, 0, cu->stream>>>(
            P, lse ? lse + (size_t)b0 * NH * T_ : NULL, S, bias, klen ? klen + b0 : NULL, T_, NH,
            sh->causal);
        if (!cu_launched(be, what)) return;
        if (!ab_gemm(be, 0, hs, T_, T_, v, hs, th, P, T_, tts, o, hs, th, 0, 1.0f, bh, what))
            return;
        ab_heads_in_kernel<T><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(out + (size_t)b0 * T_ * C,
                                                                         o, nb, T_, NH, hs);
        if (!cu_launched(be, what)) return;
    }
}

void cu_attention_bias_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                               const void *bias, const int32_t *klen, const ig_attention_shape *s) {
    cu_enter(be);
    if (s->B == 0 || s->T == 0) return;
    if (be->act_type == IG_ACT_BF16)
        ab_forward<bf16>(be, (bf16 *)out, lse, (const bf16 *)qkv, (const bf16 *)bias, klen, s);
    else
        ab_forward<float>(be, (float *)out, lse, (const float *)qkv, (const float *)bias, klen, s);
}
