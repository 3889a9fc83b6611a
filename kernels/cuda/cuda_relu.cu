/* cuda_relu.cu - ReLU (T5 v1.0's feed-forward activation) forward on the GPU: one elementwise pass,
 * out = x < 0 ? 0 : x in the act type (a NaN stays NaN, as torch.relu). Each element is read
 * before it is written: out may be inp.
 *
 * Shapes: inp, out [n].
 */
#include "cuda_internal.h"

template <typename T> __global__ void relu_forward_kernel(T *out, const T *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_f(inp[i]);
    out[i] = x < 0.0f ? from_f<T>(0.0f) : inp[i];
}

void cu_relu_forward(ig_backend *be, void *out, const void *inp, size_t n) {
    cu_impl *cu = cu_enter(be);
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        relu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((bf16 *)out,
                                                                       (const bf16 *)inp, n);
    else
        relu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((float *)out,
                                                                       (const float *)inp, n);
    cu_launched(be, "relu_forward");
}
