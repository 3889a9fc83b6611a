/* cuda_silu.cu - SiLU (DiT's conditioning and timestep MLP) forward and backward on the GPU: one
 * elementwise pass each, in fp32 whatever the act type, the backward recomputing from the input.
 *   out = x / (1 + e^-x);  dinp = dout * s (1 + x (1 - s)), s = 1 / (1 + e^-x)
 * expf is the accurate library function (not __expf). Each element is read before it is written:
 * dinp may be dout.
 *
 * Shapes: inp, out, dout, dinp [n].
 */
#include "cuda_internal.h"

template <typename T> __global__ void silu_forward_kernel(T *out, const T *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_f(inp[i]);
    out[i] = from_f<T>(x / (1.0f + expf(-x)));
}

template <typename T>
__global__ void silu_backward_kernel(T *dinp, const T *dout, const T *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float d = to_f(dout[i]), x = to_f(inp[i]);
    float s = 1.0f / (1.0f + expf(-x));
    dinp[i] = from_f<T>(d * (s * (1.0f + x * (1.0f - s))));
}

void cu_silu_forward(ig_backend *be, void *out, const void *inp, size_t n) {
    cu_impl *cu = cu_enter(be);
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        silu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((bf16 *)out,
                                                                       (const bf16 *)inp, n);
    else
        silu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((float *)out,
                                                                       (const float *)inp, n);
    cu_launched(be, "silu_forward");
}

void cu_silu_backward(ig_backend *be, void *dinp, const void *dout, const void *inp, size_t n) {
    cu_impl *cu = cu_enter(be);
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        silu_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, n);
    else
        silu_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)dinp, (const float *)dout, (const float *)inp, n);
    cu_launched(be, "silu_backward");
}
