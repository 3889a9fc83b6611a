/* cuda_internal.h - private to kernels/cuda/: the CUDA backend's state, its error checks, the
 * fp32/bf16 element helpers the kernels share, and the kernels of each .cu file.
 *
 * State. Everything the backend holds lives in one cu_impl (be->impl): the device, the stream
 * every kernel and copy is queued on, the cuBLASLt handle and its workspace, and a grow-only
 * device scratch buffer that one operation at a time carves up (stream order makes the reuse
 * safe: the next operation's kernels start after the previous one's). No globals.
 *
 * Errors. Kernels return nothing (backend.h): a launch or library call that fails raises its
 * message on the backend (ig_backend_raise), and the next ig_backend_sync returns it. A kernel
 * that cannot get its scratch memory raises IG_ERR_NOMEM and writes nothing.
 *
 * Types. Act tensors are float (IG_ACT_F32) or __nv_bfloat16 (IG_ACT_BF16); kernels are templates
 * over the act type T, load with to_f, compute in fp32 and store with from_f<T> (round to nearest
 * even). Every reduction goes in a fixed order over a launch configuration fixed by the sizes:
 * no atomics, so two runs give the same bits.
 */
#ifndef INGOT_KERNELS_CUDA_INTERNAL_H
#define INGOT_KERNELS_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../backend_internal.h"

typedef __nv_bfloat16 bf16;

/* The backend's state (be->impl). */
typedef struct cu_impl {
    int device;
    int sm_count;
    size_t smem_optin;   /* the most dynamic shared memory a block may ask for */
    cudaStream_t stream; /* every kernel, copy and library call of the backend */
    cublasLtHandle_t lt;
    void *lt_ws; /* cuBLASLt workspace */
    size_t lt_ws_bytes;
    void *scratch; /* device scratch of one operation at a time (grow-only) */
    size_t scratch_bytes;
    void *host; /* host staging for fp32 <-> bf16 conversions */
    size_t host_bytes;
    ig_attention_path attention; /* IG_CUDA_ATTENTION */
    void *cudnn; /* the cuDNN handle (cuda_conv.cu), made at the first convolution; NULL before */
} cu_impl;

/* The module's libraries in words (device.cu): the ig_cuda_backend_module's describe. */
void cu_describe_libraries(char *buf, size_t cap);

/* ---- host helpers (backend_cuda.cu) ---------------------------------------------------------- */

/* Makes be's device current for this thread and returns its state: the first line of every
 * operation (a thread may drive backends on several devices). */
cu_impl *cu_enter(ig_backend *be);

/* Raise e on be (when it is not cudaSuccess) with what failed; returns 1 when e was cudaSuccess. */
int cu_ok(ig_backend *be, cudaError_t e, const char *what);
/* After a kernel launch: cu_ok of cudaGetLastError(). */
int cu_launched(ig_backend *be, const char *what);
/* A cuBLASLt status: 1 when CUBLAS_STATUS_SUCCESS, else raised with the library's words. */
int cu_blas_ok(ig_backend *be, cublasStatus_t s, const char *what);

/* The status a CUDA error maps to (out of memory, a bad launch: a bug, anything else: the
 * device failed). */
ig_status cu_status(cudaError_t e);

/* Device scratch of at least `bytes` for the operation `what` (256-byte aligned), valid until the
 * next call; NULL after raising IG_ERR_NOMEM (the operation then writes nothing). */
void *cu_scratch(ig_backend *be, size_t bytes, const char *what);

/* Rounds n up to a multiple of 256 bytes (for carving the scratch into aligned pieces). */
static inline size_t cu_round256(size_t n) {
    return (n + 255) / 256 * 256;
}

/* The scores' scale of an attention shape: its scale, or 1/sqrt(hs) when that is 0 (computed as
 * the kernels did before the field existed: the same bits). */
static inline float cu_attention_scale(const ig_attention_shape *s) {
    return s->scale != 0.0f ? s->scale : 1.0f / sqrtf((float)s->head_size);
}

/* Blocks to cover n items with `per` items per block. */
static inline unsigned cu_blocks(size_t n, size_t per) {
    return (unsigned)((n + per - 1) / per);
}

/* ---- device helpers -------------------------------------------------------------------------- */

__device__ __forceinline__ float to_f(float x) {
    return x;
}
__device__ __forceinline__ float to_f(bf16 x) {
    return __bfloat162float(x);
}
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) {
    return x;
}
/* fp32 -> bf16, round to nearest even: the device side of ig_backend_bf16_from_f32
 * (backend_host.c), the same bits for every input: the hardware's conversion, except that every
 * NaN becomes 0x7FC0 (cvt.rn.bf16.f32 gives 0x7FFF). Every bf16 a kernel stores goes through it. */
__device__ __forceinline__ bf16 bf16_from_f(float x) {
    return isnan(x) ? __ushort_as_bfloat16((unsigned short)0x7fc0u) : __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) {
    return bf16_from_f(x);
}

/* Sum of v over a warp: a butterfly in a fixed pattern, the same bits on every lane and every
 * run. */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* A warp's read-modify-write of one row: di[c] = f(c, di[c]) for the columns c = lane, lane + 32,
 * ... of a row of C, eight columns at a time, every load of a group (di[c] and what f reads)
 * issued before the group's stores. Written as a plain loop, the compiler may not move the next
 * column's loads above a store through di (it might alias them), so a warp had one round trip to
 * memory in flight per column: the backward of LayerNorm ran 15 times slower than its forward on
 * an H200 (0.42 ms for 16384 x 768 bf16, 4% of the DRAM bandwidth). f does the same arithmetic on
 * the same values as that loop: the same bits. */
#define CU_ROW_GROUP 8
template <typename T, typename F>
__device__ __forceinline__ void cu_row_update(T *di, int C, int lane, F f) {
    for (int c0 = lane; c0 < C; c0 += 32 * CU_ROW_GROUP) {
        float v[CU_ROW_GROUP];
#pragma unroll
        for (int u = 0; u < CU_ROW_GROUP; u++)
            if (c0 + 32 * u < C) v[u] = f(c0 + 32 * u, to_f(di[c0 + 32 * u]));
#pragma unroll
        for (int u = 0; u < CU_ROW_GROUP; u++)
            if (c0 + 32 * u < C) di[c0 + 32 * u] = from_f<T>(v[u]);
    }
}

/* Sum (or max) of v over a block of blockDim.x threads (a multiple of 32, at most 1024): each
 * warp reduces, then warp 0 reduces the warps' results in warp order. Every thread gets the
 * result. shared: 32 floats of shared memory; the block must reach this call together. */
__device__ __forceinline__ float block_sum(float v, float *shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads(); /* shared may still be read by a previous call */
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nw ? shared[lane] : 0.0f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float *shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < nw ? shared[lane] : -INFINITY;
    return warp_max(v);
}

/* One key of an attention row's online softmax (Milakov and Gimelshein 2018; FlashAttention's
 * forward): the score q . k over D channels, and the row's running max m, its sum of exp(s - m)
 * l and its weighted sum of the values o[D] moved on by it, rescaled first when the score is a
 * new max. The self- and the cross-attention forward both go through here, key by key in order,
 * so that their bits do not depend on which kernel computed them. */
template <int D>
__device__ __forceinline__ void online_softmax_key(const float *q, const float *k, const float *v,
                                                   float &m, float &l, float (&o)[D]) {
    float sc = 0.0f;
#pragma unroll
    for (int d = 0; d < D; d++) sc += q[d] * k[d];
    if (sc > m) { /* a new max: rescale what was summed so far */
        float alpha = expf(m - sc);
        l *= alpha;
#pragma unroll
        for (int d = 0; d < D; d++) o[d] *= alpha;
        m = sc;
    }
    float p = expf(sc - m);
    l += p;
#pragma unroll
    for (int d = 0; d < D; d++) o[d] += p * v[d];
}

/* ---- operations of each file (signatures of ig_backend_ops) ---------------------------------- */

/* cuda_encoder.cu */
void cu_encoder_forward(ig_backend *be, void *out, const int32_t *tokens, const void *wte,
                        const void *wpe, int B, int T, int C);
void cu_encoder_backward(ig_backend *be, void *dwte, void *dwpe, const void *dout,
                         const int32_t *tokens, int B, int T, int C);
/* cuda_layernorm.cu */
void cu_layernorm_forward(ig_backend *be, void *out, float *mean, float *rstd, const void *inp,
                          const void *w, const void *b, int N, int C, float eps);
void cu_residual_layernorm_forward(ig_backend *be, void *residual, void *out, float *mean,
                                   float *rstd, const void *a, const void *b_in, const void *w,
                                   const void *b, int N, int C, float eps);
void cu_layernorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                           const void *inp, const void *w, const float *mean, const float *rstd,
                           int N, int C);
/* cuda_rmsnorm.cu */
void cu_rmsnorm_forward(ig_backend *be, void *out, float *rstd, const void *inp, const void *w,
                        int N, int C, float eps);
void cu_residual_rmsnorm_forward(ig_backend *be, void *residual, void *out, float *rstd,
                                 const void *a, const void *b, const void *w, int N, int C,
                                 float eps);
void cu_rmsnorm_backward(ig_backend *be, void *dinp, void *dw, const void *dout, const void *inp,
                         const void *w, const float *rstd, int N, int C);
/* cuda_modulate.cu (DiT's adaLN-Zero) */
void cu_layernorm_modulate_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                   const void *inp, const void *shift, const void *scale, int ld,
                                   int N, int C, int row0, int rows_per_sample, float eps);
void cu_layernorm_modulate_backward(ig_backend *be, void *dinp, void *dshift, void *dscale,
                                    const void *dout, const void *inp, const void *scale, int ld,
                                    const float *mean, const float *rstd, int N, int C, int row0,
                                    int rows_per_sample);
void cu_gate_residual_forward(ig_backend *be, void *out, const void *res, const void *x,
                              const void *gate, int ld, int N, int C, int row0,
                              int rows_per_sample);
void cu_gate_residual_backward(ig_backend *be, void *dx, void *dgate, const void *dout,
                               const void *x, const void *gate, int ld, int N, int C, int row0,
                               int rows_per_sample);
/* cuda_matmul.cu */
void cu_matmul_forward(ig_backend *be, void *out, const void *inp, const void *w,
                       ig_w_layout layout, const void *bias, int N, int C, int OC);
void cu_matmul_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, ig_w_layout layout, int N, int C, int OC);
/* cuda_gelu.cu */
void cu_gelu_bias_forward(ig_backend *be, void *out, const void *inp, const void *bias, int N,
                          int C);
void cu_gelu_bias_backward(ig_backend *be, void *dinp, void *dbias, const void *dout,
                           const void *inp, const void *bias, int N, int C);
/* cuda_swiglu.cu */
void cu_swiglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N, int F);
void cu_swiglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout, const void *gate,
                        const void *up, int N, int F);
/* cuda_silu.cu */
void cu_silu_forward(ig_backend *be, void *out, const void *inp, size_t n);
void cu_silu_backward(ig_backend *be, void *dinp, const void *dout, const void *inp, size_t n);
/* cuda_relu.cu */
void cu_relu_forward(ig_backend *be, void *out, const void *inp, size_t n);
/* cuda_rope.cu */
void cu_rope_forward(ig_backend *be, void *qkv, int B, int T, int n_head, int n_kv_head, int hs,
                     int pos0, float theta);
void cu_rope_backward(ig_backend *be, void *dqkv, int B, int T, int n_head, int n_kv_head, int hs,
                      int pos0, float theta);
/* cuda_attention.cu (the fused path, the cached form, and the choice of path) */
void cu_attention_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                          const int32_t *doc, const ig_attention_shape *s);
void cu_attention_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                           const void *out, const float *lse, const int32_t *doc,
                           const ig_attention_shape *s);
void cu_attention_cached(ig_backend *be, void *out, const void *q, const void *k, const void *v,
                         int pos0, int Tmax, const ig_attention_shape *s);
/* Dt[b, h, t] = dout_t . out_t over head h's channels (fp32): the backward's row terms. */
void cu_attention_rowdots(ig_backend *be, float *Dt, const void *dout, const void *out, int B,
                          int T, int C, int NH);
/* Lets kernel use `bytes` of dynamic shared memory (above 48 KiB it must opt in); 0 after raising
 * an error. */
int cu_smem_allow(ig_backend *be, const void *kernel, size_t bytes, const char *what);
/* The largest head the fused attention kernels take: a larger one (the VAE's mid-block attention,
 * one head of 512 channels in Stable Diffusion's) runs on the GEMM path (cuda_attention_gemm.cu),
 * whatever IG_CUDA_ATTENTION says. */
#define CU_FUSED_HEAD_MAX 128
/* The fused kernels' head-size bound D for hs: 32, 64 or 128 (0: hs above 128, raised). */
int cu_head_bound(ig_backend *be, int hs, const char *what);
/* cuda_cross_attention.cu (DiT's cross-attention to the caption) */
void cu_cross_attention_forward(ig_backend *be, void *out, float *lse, const void *q,
                                const void *kv, const int32_t *klen, int N, int row0,
                                int rows_per_sample, int Tk, int n_head, int head_size);
void cu_cross_attention_backward(ig_backend *be, void *dq, void *dkv, const void *dout,
                                 const void *q, const void *kv, const void *out, const float *lse,
                                 const int32_t *klen, int N, int row0, int rows_per_sample, int Tk,
                                 int n_head, int head_size);
/* cuda_attention_gemm.cu (the GEMM path: cuBLASLt batched GEMMs and a fused softmax) */
void cu_attention_gemm_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                               const int32_t *doc, const ig_attention_shape *s);
void cu_attention_gemm_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                                const void *out, const float *lse, const int32_t *doc,
                                const ig_attention_shape *s);
/* cuda_crossentropy.cu */
void cu_crossentropy(ig_backend *be, float *losses, void *logits, const int32_t *targets,
                     const float *dloss, int N, int V, int Vp);
/* cuda_mse.cu */
void cu_mse(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target, int N,
            int K, float grad_scale);
/* cuda_vae_loss.cu (the VAE's L1 reconstruction term, its posterior's sample and KL term) */
void cu_l1(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target, int N,
           int K, float grad_scale);
void cu_posterior_forward(ig_backend *be, void *z, float *kl, const void *moments, const void *eps,
                          int N, int C);
void cu_posterior_backward(ig_backend *be, void *dmoments, const void *dz, const void *moments,
                           const void *eps, int N, int C, float kl_scale);
/* cuda_optimizer.cu */
void cu_adamw(ig_backend *be, void *params, float *master, const void *grads, float *m, float *v,
              size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
              float grad_scale, int step);
double cu_sum_squares(ig_backend *be, const void *x, size_t n);
void cu_scale(ig_backend *be, void *x, size_t n, float s);
void cu_ema(ig_backend *be, float *ema, const float *master, const void *params, size_t n,
            float decay);
void cu_ce_max(ig_backend *be, float *rowmax, const void *logits, int N, int Vvalid, int Vl);
void cu_ce_sums(ig_backend *be, float *stats, const void *logits, const float *rowmax,
                const int32_t *targets, int N, int Vvalid, int Vl);
void cu_ce_finish(ig_backend *be, float *losses, void *logits, const float *rowmax,
                  const float *stats, const int32_t *targets, const float *dloss, int N, int Vvalid,
                  int Vl);
void cu_add(ig_backend *be, void *out, const void *a, const void *b, size_t n);
/* cuda_conv.cu (cuDNN: built when the toolkit has it, IG_HAVE_CUDNN) */
void cu_conv2d_forward(ig_backend *be, void *out, const void *inp, const void *w, const void *bias,
                       const ig_conv2d_shape *s);
void cu_conv2d_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, const ig_conv2d_shape *s);
/* Destroys the cuDNN handle, if one was made (cu_destroy). */
void cu_conv_free(cu_impl *cu);
/* cuda_groupnorm.cu */
void cu_groupnorm_forward(ig_backend *be, void *out, float *mean, float *rstd, const void *inp,
                          const void *w, const void *b, int N, int HW, int C, int G, float eps,
                          int silu);
void cu_groupnorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                           const void *inp, const void *w, const void *b, const float *mean,
                           const float *rstd, int N, int HW, int C, int G, int silu);
/* cuda_upsample.cu */
void cu_upsample2x_forward(ig_backend *be, void *out, const void *inp, int N, int H, int W, int C);
void cu_upsample2x_backward(ig_backend *be, void *dinp, const void *dout, int N, int H, int W,
                            int C);
/* cuda_geglu.cu */
void cu_geglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N, int F);
void cu_geglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout, const void *gate,
                       const void *up, int N, int F);
/* cuda_attention_bias.cu (T5's) */
void cu_t5_position_bias(ig_backend *be, void *bias, const void *table, int T, int n_head,
                         int num_buckets, int max_distance, int bidirectional);
void cu_attention_bias_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                               const void *bias, const int32_t *klen, const ig_attention_shape *s);

/* ---- shared pieces --------------------------------------------------------------------------- */

/* One cuBLASLt matmul in column-major terms (cuda_matmul.cu):
 * D[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] (+ bias[m] per column) + beta * D, batched over
 * `batch` matrices at the given strides (in elements). A and B have type ab, D has type d
 * (CUDA_R_32F or CUDA_R_16BF); compute and scale in fp32. bias (type d, or NULL) uses the BIAS
 * epilogue. Returns 1, or 0 after raising the library's error on be. */
typedef struct cu_gemm {
    int transa, transb;
    int m, n, k;
    const void *A;
    long long lda, stride_a;
    const void *B;
    long long ldb, stride_b;
    void *D;
    long long ldd, stride_d;
    cudaDataType_t ab, d;
    float alpha, beta;
    int batch;
    const void *bias;
} cu_gemm;
int cu_gemm_run(ig_backend *be, const cu_gemm *g, const char *what);

/* The cuBLASLt type of be's act tensors. */
cudaDataType_t cu_act_type(const ig_backend *be);

/* acc[c] += sum over the N rows of x[N, C] (act type), deterministically: fixed chunks of rows
 * summed into fp32 partials, then the partials added in chunk order (cuda_matmul.cu). The bias
 * gradients of matmul and GeLU. */
void cu_column_sums_add(ig_backend *be, void *acc, const void *x, int N, int C, const char *what);

/* The second stage of a column sum: acc[c] = acc[c] + sum_k partial[k * C + c] for k < chunks,
 * in k order, for `count` outputs side by side (acc[j], partial[j] for j < count: LayerNorm's dw
 * and db go together). */
/* Rows per chunk of a column sum: 256, or more for N above 2^21 rows (at most 8192 chunks, within
 * a grid's y limit). A function of N alone. */
static inline int cu_colsum_rows(int N) {
    int rows = 256;
    while ((N + rows - 1) / rows > 8192) rows *= 2;
    return rows;
}
void cu_column_sums_finish(ig_backend *be, void *acc0, void *acc1, const float *partial0,
                           const float *partial1, int chunks, int C, const char *what);

#endif /* INGOT_KERNELS_CUDA_INTERNAL_H */
