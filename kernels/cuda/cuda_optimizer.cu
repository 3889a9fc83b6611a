/* cuda_optimizer.cu - what the optimizer step needs, on the GPU: fused AdamW on fp32 master
 * weights (or fp32 parameters in place), the sum of squares behind the global gradient norm,
 * and scaling.
 *
 * AdamW follows the CPU fast kernel's (torch.optim.AdamW's) order of float operations, each
 * written with a round-to-nearest intrinsic (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn) so
 * that nvcc cannot contract them into fused multiply-adds: in fp32 the GPU gives the CPU fast
 * kernel's bits. The moments and the master copy are fp32; with a master copy the bf16 (or fp32)
 * parameters receive its value rounded to nearest even. Elementwise: deterministic.
 *
 * Sum of squares: the same fixed chunks as the CPU kernel (at least 64 Ki elements, at most 4096
 * of them), one block per chunk summing in double (per-thread strided sums, then a fixed
 * warp-and-block reduction), the partial sums copied to the host and added in chunk order.
 * Synchronous, as backend.h says.
 *
 * Shapes: params, master, grads, m, v [n]; x [n].
 */
#include <math.h>

#include "cuda_internal.h"

#define SS_MIN_CHUNK  ((size_t)1 << 16)
#define SS_MAX_CHUNKS 4096
#define SS_THREADS    256

typedef struct adamw_args {
    float decay, b1, one_b1, b2, one_b2, bc2_sqrt, eps, neg_step, grad_scale;
} adamw_args;

template <typename T>
__global__ void adamw_kernel(T *params, float *master, const T *grads, float *m, float *v, size_t n,
                             adamw_args a) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = __fmul_rn(to_f(grads[i]), a.grad_scale);
    float p = master ? master[i] : to_f(params[i]);
    p = __fmul_rn(p, a.decay);
    float mi = __fadd_rn(__fmul_rn(m[i], a.b1), __fmul_rn(a.one_b1, g));
    float vi = __fadd_rn(__fmul_rn(v[i], a.b2), __fmul_rn(a.one_b2, __fmul_rn(g, g)));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
    p = __fadd_rn(p, __fmul_rn(a.neg_step, __fdiv_rn(mi, denom)));
    m[i] = mi;
    v[i] = vi;
    if (master) master[i] = p;
    params[i] = from_f<T>(p);
}

void cu_adamw(ig_backend *be, void *params, float *master, const void *grads, float *m, float *v,
              size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
              float grad_scale, int step) {
    cu_impl *cu = cu_enter(be);
    if (n == 0) return;
    /* torch's scalars: Python floats (double), cast to float where they meet a float tensor */
    double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
    adamw_args a;
    a.decay = (float)(1.0 - (double)lr * weight_decay);
    a.b1 = beta1;
    a.one_b1 = (float)(1.0 - beta1);
    a.b2 = beta2;
    a.one_b2 = (float)(1.0 - beta2);
    a.bc2_sqrt = (float)sqrt(bc2);
    a.eps = eps;
    a.neg_step = (float)(-(lr / bc1));
    a.grad_scale = grad_scale;
    if (be->act_type == IG_ACT_BF16)
        adamw_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((bf16 *)params, master,
                                                                (const bf16 *)grads, m, v, n, a);
    else
        adamw_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((float *)params, master,
                                                                (const float *)grads, m, v, n, a);
    cu_launched(be, "adamw");
}

template <typename T>
__global__ void sum_squares_kernel(double *partial, const T *x, size_t n, size_t chunk) {
    __shared__ double red[SS_THREADS / 32];
    size_t b = (size_t)blockIdx.x * chunk, e = b + chunk < n ? b + chunk : n;
    double s = 0.0;
    for (size_t i = b + threadIdx.x; i < e; i += SS_THREADS) {
        double d = to_f(x[i]);
        s += d * d;
    }
    s = warp_sum_d(s);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < SS_THREADS / 32; w++) t += red[w];
        partial[blockIdx.x] = t;
    }
}

double cu_sum_squares(ig_backend *be, const void *x, size_t n) {
    cu_impl *cu = cu_enter(be);
    const char *what = "sum_squares";
    size_t chunk = (n + SS_MAX_CHUNKS - 1) / SS_MAX_CHUNKS;
    if (chunk < SS_MIN_CHUNK) chunk = SS_MIN_CHUNK;
    size_t chunks = (n + chunk - 1) / chunk;
    double *partial = (double *)cu_scratch(be, chunks * sizeof(double), what);
    if (!partial) return NAN;
    if (be->act_type == IG_ACT_BF16)
        sum_squares_kernel<<<(unsigned)chunks, SS_THREADS, 0, cu->stream>>>(
            partial, (const bf16 *)x, n, chunk);
    else
        sum_squares_kernel<<<(unsigned)chunks, SS_THREADS, 0, cu->stream>>>(
            partial, (const float *)x, n, chunk);
    if (!cu_launched(be, what)) return NAN;
    double host[SS_MAX_CHUNKS];
    if (!cu_ok(be,
               cudaMemcpyAsync(host, partial, chunks * sizeof(double), cudaMemcpyDeviceToHost,
                               cu->stream),
               what) ||
        !cu_ok(be, cudaStreamSynchronize(cu->stream), what))
        return NAN;
    double s = 0.0;
    for (size_t c = 0; c < chunks; c++) s += host[c];
    return s;
}

template <typename T> __global__ void scale_kernel(T *x, size_t n, float s) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = from_f<T>(__fmul_rn(to_f(x[i]), s));
}

void cu_scale(ig_backend *be, void *x, size_t n, float s) {
    cu_impl *cu = cu_enter(be);
    if (be->act_type == IG_ACT_BF16)
        scale_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((bf16 *)x, n, s);
    else
        scale_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((float *)x, n, s);
    cu_launched(be, "scale");
}

/* as the CPU's: decay e + (1 - decay) w, each product rounded, then the sum (no fused multiply-add)
 */
template <typename T> __global__ void ema_kernel(float *ema, const T *w, size_t n, float decay) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_f(w[i]);
    ema[i] = decay == 0.0f ? x : __fadd_rn(__fmul_rn(decay, ema[i]), __fmul_rn(1.0f - decay, x));
}

void cu_ema(ig_backend *be, float *ema, const float *master, const void *params, size_t n,
            float decay) {
    cu_impl *cu = cu_enter(be);
    if (master)
        ema_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(ema, master, n, decay);
    else if (be->act_type == IG_ACT_BF16)
        ema_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(ema, (const bf16 *)params, n, decay);
    else
        ema_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(ema, (const float *)params, n, decay);
    cu_launched(be, "ema");
}

template <typename T> __global__ void add_kernel(T *out, const T *a, const T *b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = from_f<T>(__fadd_rn(to_f(a[i]), to_f(b[i])));
}

void cu_add(ig_backend *be, void *out, const void *a, const void *b, size_t n) {
    cu_impl *cu = cu_enter(be);
    if (be->act_type == IG_ACT_BF16)
        add_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((bf16 *)out, (const bf16 *)a,
                                                              (const bf16 *)b, n);
    else
        add_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((float *)out, (const float *)a,
                                                              (const float *)b, n);
    cu_launched(be, "add");
}
