/* cuda_upsample.cu - nearest-neighbour 2x upsampling over NHWC images (the VAE decoder's
 * Upsample2D) forward and backward on the GPU: one thread per output element (forward: a copy)
 * or per input element (backward: the sum of its four output pixels' gradients in the order
 * (0,0), (0,1), (1,0), (1,1), in fp32, rounded once; overwritten).
 *
 * Shapes: inp, dinp [N, H, W, C]; out, dout [N, 2H, 2W, C].
 */
#include "cuda_internal.h"

template <typename T>
__global__ void up_forward_kernel(T *out, const T *inp, int N, int H, int W, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * 4 * H * W * C) return;
    int c = (int)(i % C);
    size_t r = i / C;
    int x = (int)(r % (2 * W)), y = (int)(r / (2 * W) % (2 * H)), n = (int)(r / (2 * W) / (2 * H));
    out[i] = inp[(((size_t)n * H + y / 2) * W + x / 2) * C + c];
}

template <typename T>
__global__ void up_backward_kernel(T *dinp, const T *dout, int N, int H, int W, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * H * W * C) return;
    int c = (int)(i % C);
    size_t r = i / C;
    int x = (int)(r % W), y = (int)(r / W % H), n = (int)(r / W / H);
    size_t row = (size_t)2 * W * C;
    const T *g = dout + (((size_t)n * 2 * H + 2 * y) * 2 * W + 2 * x) * C + c;
    dinp[i] = from_f<T>(((to_f(g[0]) + to_f(g[C])) + to_f(g[row])) + to_f(g[row + C]));
}

void cu_upsample2x_forward(ig_backend *be, void *out, const void *inp, int N, int H, int W, int C) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)N * 4 * H * W * C;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        up_forward_kernel<bf16>
            <<<cu_blocks(n, 256), 256, 0, cu->stream>>>((bf16 *)out, (const bf16 *)inp, N, H, W, C);
    else
        up_forward_kernel<float><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)out, (const float *)inp, N, H, W, C);
    cu_launched(be, "upsample2x_forward");
}

void cu_upsample2x_backward(ig_backend *be, void *dinp, const void *dout, int N, int H, int W,
                            int C) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)N * H * W * C;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        up_backward_kernel<bf16><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)dinp, (const bf16 *)dout, N, H, W, C);
    else
        up_backward_kernel<float><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)dinp, (const float *)dout, N, H, W, C);
    cu_launched(be, "upsample2x_backward");
}
