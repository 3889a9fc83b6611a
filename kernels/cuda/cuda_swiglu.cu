/* cuda_swiglu.cu - SwiGLU (Llama's MLP activation) forward and backward on the GPU: one fused
 * elementwise pass each, in fp32 whatever the act type, recomputing from gate and up.
 *   out = silu(gate) * up, silu(x) = x / (1 + e^-x)
 *   dgate = dout * up * s (1 + x (1 - s)), s = 1 / (1 + e^-x);  dup = dout * silu(gate)
 * expf is the accurate library function (not __expf). Each element's inputs are read before its
 * outputs are written: dgate or dup may be dout.
 *
 * Shapes: gate, up, out, dout, dgate, dup [N, F].
 */
#include "cuda_internal.h"

template <typename T>
__global__ void swiglu_forward_kernel(T *out, const T *gate, const T *up, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_f(gate[i]);
    out[i] = from_f<T>(x / (1.0f + expf(-x)) * to_f(up[i]));
}

template <typename T>
__global__ void swiglu_backward_kernel(T *dgate, T *dup, const T *dout, const T *gate, const T *up,
                                       size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float d = to_f(dout[i]), x = to_f(gate[i]), u = to_f(up[i]);
    float s = 1.0f / (1.0f + expf(-x));
    dgate[i] = from_f<T>(d * u * (s * (1.0f + x * (1.0f - s))));
    dup[i] = from_f<T>(d * (x * s));
}

void cu_swiglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N, int F) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)N * F;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        swiglu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)out, (const bf16 *)gate, (const bf16 *)up, n);
    else
        swiglu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)out, (const float *)gate, (const float *)up, n);
    cu_launched(be, "swiglu_forward");
}

void cu_swiglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout, const void *gate,
                        const void *up, int N, int F) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)N * F;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        swiglu_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)dgate, (bf16 *)dup, (const bf16 *)dout, (const bf16 *)gate, (const bf16 *)up,
            n);
    else
        swiglu_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)dgate, (float *)dup, (const float *)dout, (const float *)gate,
            (const float *)up, n);
    cu_launched(be, "swiglu_backward");
}
