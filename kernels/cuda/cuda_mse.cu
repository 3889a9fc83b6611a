/* cuda_mse.cu - the squared error per row (DiT's loss on the predicted noise) and its gradient in
 * one pass on the GPU: one warp per row (8 rows per block); a lane takes elements lane, lane + 32,
 * ... and sums (pred - target)^2 in double, the warp's lanes added by a fixed butterfly
 * (warp_sum_d), so a row's loss has the same bits on every run. When dpred is given it is
 * overwritten by 2 grad_scale (pred - target), computed in fp32; each element is read before it is
 * written (dpred may be pred).
 *
 * Shapes: pred, target, dpred [N, K]; losses [N].
 */
#include "cuda_internal.h"

#define MSE_ROWS 8 /* rows (warps) per block */

template <typename T>
__global__ void mse_kernel(float *losses, T *dpred, const T *pred, const T *target, int N, int K,
                           float g2) {
    int row = blockIdx.x * MSE_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t off = (size_t)row * K;
    double s = 0.0;
    for (int k = lane; k < K; k += 32) {
        float p = to_f(pred[off + k]), t = to_f(target[off + k]);
        double d = (double)p - (double)t;
        s += d * d;
        if (dpred) dpred[off + k] = from_f<T>(g2 * (p - t));
    }
    s = warp_sum_d(s);
    if (lane == 0) losses[row] = (float)s;
}

void cu_mse(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target, int N,
            int K, float grad_scale) {
    cu_impl *cu = cu_enter(be);
    if (N == 0) return;
    unsigned grid = cu_blocks((size_t)N, MSE_ROWS);
    float g2 = 2.0f * grad_scale;
    if (be->act_type == IG_ACT_BF16)
        mse_kernel<<<grid, MSE_ROWS * 32, 0, cu->stream>>>(
            losses, (bf16 *)dpred, (const bf16 *)pred, (const bf16 *)target, N, K, g2);
    else
        mse_kernel<<<grid, MSE_ROWS * 32, 0, cu->stream>>>(
            losses, (float *)dpred, (const float *)pred, (const float *)target, N, K, g2);
    cu_launched(be, "mse");
}
