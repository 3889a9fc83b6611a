/* cuda_gelu.cu - bias + GeLU (tanh approximation, GPT-2's "gelu_new") forward and backward on the
 * GPU: one fused elementwise pass each, recomputing gelu' from the saved pre-activation.
 *
 * gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
 * gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 * tanhf is the accurate library function (not tanh.approx), so the fp32 backend stays within
 * 1e-4 of the CPU reference.
 *
 * The bias gradient is the deterministic column sum of the dinp just written
 * (cu_column_sums_add, cuda_matmul.cu): dbias += column sums of dinp, as backend.h says.
 *
 * Shapes: inp, out, dout, dinp [N, C]; bias, dbias [C].
 */
#include "cuda_internal.h"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

template <typename T>
__global__ void gelu_forward_kernel(T *out, const T *inp, const T *bias, size_t n, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_f(inp[i]) + to_f(bias[i % (size_t)C]);
    float t = tanhf(GELU_K * (x + GELU_A * x * x * x));
    out[i] = from_f<T>(0.5f * x * (1.0f + t));
}

template <typename T>
__global__ void gelu_backward_kernel(T *dinp, const T *dout, const T *inp, const T *bias, size_t n,
                                     int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_f(inp[i]) + to_f(bias[i % (size_t)C]);
    float t = tanhf(GELU_K * (x + GELU_A * x * x * x));
    float g =
        0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * x * x);
    dinp[i] = from_f<T>(to_f(dout[i]) * g);
}

void cu_gelu_bias_forward(ig_backend *be, void *out, const void *inp, const void *bias, int N,
                          int C) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)N * C;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        gelu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)out, (const bf16 *)inp, (const bf16 *)bias, n, C);
    else
        gelu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)out, (const float *)inp, (const float *)bias, n, C);
    cu_launched(be, "gelu_bias_forward");
}

void cu_gelu_bias_backward(ig_backend *be, void *dinp, void *dbias, const void *dout,
                           const void *inp, const void *bias, int N, int C) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)N * C;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        gelu_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, (const bf16 *)bias, n, C);
    else
        gelu_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)dinp, (const float *)dout, (const float *)inp, (const float *)bias, n, C);
    if (!cu_launched(be, "gelu_bias_backward")) return;
    cu_column_sums_add(be, dbias, dinp, N, C, "gelu_bias_backward (dbias)");
}
