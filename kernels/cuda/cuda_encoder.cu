/* cuda_encoder.cu - the embedding on the GPU: token (wte) plus position (wpe) rows, and the
 * gradient's scatter-add back into them, deterministic and without atomics.
 *
 * Backward, dwte: the positions are sorted by token with CUB's radix sort (stable, so each
 * token's positions stay in (b, t) order); one block per sorted entry that starts a run of equal
 * tokens adds that run's dout rows, in order, to the token's row of dwte (channels across the
 * block's threads). Every element of dwte thus receives exactly the additions of the CPU
 * reference's sequential loop, in the same order, starting from its old value: in fp32 the bits
 * are the reference's; in bf16 the sum is kept in fp32 and rounded once.
 * dwpe: one thread per (t, c) adds dout[b, t, c] for b = 0, 1, ... in order.
 *
 * Shapes: tokens [B, T] (int32, in [0, V), or < 0 for another tensor-parallel rank's token: no
 * wte row, and skipped by the backward), wte [V, C], wpe [maxT >= T, C] or NULL (forward: no
 * position rows), out, dout [B, T, C].
 */
#include <cub/device/device_radix_sort.cuh>

#include "cuda_internal.h"

template <typename T>
__global__ void encoder_forward_kernel(T *out, const int32_t *tokens, const T *wte, const T *wpe,
                                       size_t n, int T_, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    size_t row = i / (size_t)C;
    int c = (int)(i % (size_t)C), t = (int)(row % (size_t)T_);
    int32_t tok = tokens[row];
    float te = tok >= 0 ? to_f(wte[(size_t)tok * C + c]) : 0.0f;
    float pe = wpe ? to_f(wpe[(size_t)t * C + c]) : 0.0f;
    out[i] = from_f<T>(te + pe);
}

void cu_encoder_forward(ig_backend *be, void *out, const int32_t *tokens, const void *wte,
                        const void *wpe, int B, int T, int C) {
    cu_impl *cu = cu_enter(be);
    size_t n = (size_t)B * T * C;
    if (n == 0) return;
    if (be->act_type == IG_ACT_BF16)
        encoder_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)out, tokens, (const bf16 *)wte, (const bf16 *)wpe, n, T, C);
    else
        encoder_forward_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)out, tokens, (const float *)wte, (const float *)wpe, n, T, C);
    cu_launched(be, "encoder_forward");
}

__global__ void iota_kernel(int32_t *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

/* Block i handles the run of equal tokens that starts at sorted entry i (other blocks leave). */
template <typename T>
__global__ void encoder_backward_wte_kernel(T *dwte, const T *dout, const int32_t *tok_sorted,
                                            const int32_t *pos_sorted, int N, int C) {
    int i = blockIdx.x;
    int tok = tok_sorted[i];
    if (tok < 0 || (i > 0 && tok_sorted[i - 1] == tok)) return; /* another rank's token */
    int end = i + 1;
    while (end < N && tok_sorted[end] == tok) end++;
    T *row = dwte + (size_t)tok * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = to_f(row[c]);
        for (int j = i; j < end; j++) acc += to_f(dout[(size_t)pos_sorted[j] * C + c]);
        row[c] = from_f<T>(acc);
    }
}

template <typename T>
__global__ void encoder_backward_wpe_kernel(T *dwpe, const T *dout, int B, int T_, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* t * C + c */
    if (i >= (size_t)T_ * C) return;
    float acc = to_f(dwpe[i]);
    for (int b = 0; b < B; b++) acc += to_f(dout[(size_t)b * T_ * C + i]);
    dwpe[i] = from_f<T>(acc);
}

void cu_encoder_backward(ig_backend *be, void *dwte, void *dwpe, const void *dout,
                         const int32_t *tokens, int B, int T, int C) {
    cu_impl *cu = cu_enter(be);
    const char *what = "encoder_backward";
    int N = B * T;
    if (N == 0 || C == 0) return;
    /* scratch: sorted tokens [N], positions [N] and sorted positions [N], then CUB's storage */
    size_t temp = 0;
    if (!cu_ok(be,
               cub::DeviceRadixSort::SortPairs(NULL, temp, (const int32_t *)NULL, (int32_t *)NULL,
                                               (const int32_t *)NULL, (int32_t *)NULL, N, 0, 32,
                                               cu->stream),
               "encoder_backward (radix sort size)"))
        return;
    size_t arr = cu_round256((size_t)N * sizeof(int32_t));
    char *s = (char *)cu_scratch(be, 3 * arr + cu_round256(temp), what);
    if (!s) return;
    int32_t *tok_sorted = (int32_t *)s, *pos = (int32_t *)(s + arr);
    int32_t *pos_sorted = (int32_t *)(s + 2 * arr);
    void *cub_temp = s + 3 * arr;
    iota_kernel<<<cu_blocks((size_t)N, 256), 256, 0, cu->stream>>>(pos, N);
    if (!cu_launched(be, what)) return;
    if (!cu_ok(be,
               cub::DeviceRadixSort::SortPairs(cub_temp, temp, tokens, tok_sorted, pos, pos_sorted,
                                               N, 0, 32, cu->stream),
               "encoder_backward (radix sort)"))
        return;
    size_t tc = (size_t)T * C;
    if (be->act_type == IG_ACT_BF16) {
        encoder_backward_wte_kernel<<<N, 128, 0, cu->stream>>>((bf16 *)dwte, (const bf16 *)dout,
                                                               tok_sorted, pos_sorted, N, C);
        if (!cu_launched(be, what)) return;
        if (dwpe) /* NULL: a model without learned positions */
            encoder_backward_wpe_kernel<<<cu_blocks(tc, 256), 256, 0, cu->stream>>>(
                (bf16 *)dwpe, (const bf16 *)dout, B, T, C);
    } else {
        encoder_backward_wte_kernel<<<N, 128, 0, cu->stream>>>((float *)dwte, (const float *)dout,
                                                               tok_sorted, pos_sorted, N, C);
        if (!cu_launched(be, what)) return;
        if (dwpe)
            encoder_backward_wpe_kernel<<<cu_blocks(tc, 256), 256, 0, cu->stream>>>(
                (float *)dwpe, (const float *)dout, B, T, C);
    }
    cu_launched(be, what);
}
