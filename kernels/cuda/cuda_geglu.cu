/* cuda_geglu.cu - GeGLU (T5 v1.1's gated FFN: gelu_new(gate) * up) forward and backward on the
 * GPU: one fused elementwise pass each, in fp32 whatever the act type, recomputing from gate and
 * up (the formulas of cuda_gelu.cu):
 *   gelu(x) = 0.5 x (1 + tanh(v)), v = sqrt(2/pi) (x + 0.044715 x^3)
 *   dgate = dout * up * gelu'(gate),  dup = dout * gelu(gate)
 * tanhf is the accurate library function. Each element's inputs are read before its outputs are
 * written: dgate or dup may be dout.
 *
 * Shapes: gate, up, out, dout, dgate, dup [N, F].
 */
#include "cuda_internal.h"

#define GEGLU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GEGLU_A 0.044715f

template <typename T>
__global__ void geglu_forward_kernel(T *out, const T *gate, const T *up, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = to_f(gate[i]);
    float t = tanhf(GEGLU_K * (x + GEGLU_A * x * x * x));
    out[i] = from_f<T>(0.5f * x * (1.0f + t) * to_f(up[i]));
}

template <typename T>
__global__ void geglu_backward_kernel(T *dgate, T *dup, const T *dout, const T *gate, const T *up,
                                      size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float d = to_f(dout[i]), x = to_f(gate[i]), u = to_f(up[i]);
    float t = tanhf(GEGLU_K * (x + GEGLU_A * x * x * x));
    float g =
        0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GEGLU_K * (1.0f + 3.0f * GEGLU_A * x * x);
    dgate[i] = from_f<T>(d * u * g);
    dup[i] = from_f<T>(d * (0.5f * x * (1.0f + t)));
}

void cu_geglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N, int F) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)N * F;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        geglu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)out, (const bf16 *)gate, (const bf16 *)up, n);
    else
        geglu_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)out, (const float *)gate, (const float *)up, n);
    cu_launched(be, "geglu_forward");
}

void cu_geglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout, const void *gate,
                       const void *up, int N, int F) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)N * F;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        geglu_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)dgate, (bf16 *)dup, (const bf16 *)dout, (const bf16 *)gate, (const bf16 *)up,
            n);
    else
        geglu_backward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)dgate, (float *)dup, (const float *)dout, (const float *)gate,
            (const float *)up, n);
    cu_launched(be, "geglu_backward");
}
