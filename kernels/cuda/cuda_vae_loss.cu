/* cuda_vae_loss.cu - the VAE's training loss on the GPU: the reconstruction's absolute error per
 * row and its gradient, and the posterior's sample z = mean + exp(lv / 2) eps (lv the log-variance
 * clamped to [-30, 20]) with its KL term per row, and their backward (backend.h). One warp per row
 * (8 rows per block), as cuda_mse.cu: a lane takes elements lane, lane + 32, ... and sums in
 * double, the lanes added by a fixed butterfly (warp_sum_d), so a row's sum has the same bits on
 * every run; elementwise values in fp32, each element read before it is written.
 *
 * Shapes: l1: pred, target, dpred [N, K], losses [N]. posterior: moments, dmoments [N, 2C] (the C
 * means, then the C log-variances of a pixel), eps, z, dz [N, C], kl [N].
 */
#include "cuda_internal.h"

#define VL_ROWS 8 /* rows (warps) per block */
#define LV_MIN  (-30.0f)
#define LV_MAX  20.0f

template <typename T>
__global__ void l1_kernel(float *losses, T *dpred, const T *pred, const T *target, int N, int K,
                          float g) {
    int row = blockIdx.x * VL_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t off = (size_t)row * K;
    double s = 0.0;
    for (int k = lane; k < K; k += 32) {
        float d = to_f(pred[off + k]) - to_f(target[off + k]);
        s += fabs((double)d);
        if (dpred) dpred[off + k] = from_f<T>(d > 0 ? g : d < 0 ? -g : 0.0f);
    }
    s = warp_sum_d(s);
    if (lane == 0) losses[row] = (float)s;
}

template <typename T>
__global__ void posterior_forward_kernel(T *z, float *kl, const T *moments, const T *eps, int N,
                                         int C) {
    int row = blockIdx.x * VL_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const T *mean = moments + (size_t)row * 2 * C, *lvr = mean + C;
    double s = 0.0;
    for (int c = lane; c < C; c += 32) {
        float lv = fminf(fmaxf(to_f(lvr[c]), LV_MIN), LV_MAX), m = to_f(mean[c]);
        z[(size_t)row * C + c] = from_f<T>(m + expf(0.5f * lv) * to_f(eps[(size_t)row * C + c]));
        s += (double)(0.5f * (m * m + expf(lv) - 1.0f - lv));
    }
    s = warp_sum_d(s);
    if (lane == 0 && kl) kl[row] = (float)s;
}

template <typename T>
__global__ void posterior_backward_kernel(T *dmoments, const T *dz, const T *moments, const T *eps,
                                          int N, int C, float ks) {
    int row = blockIdx.x * VL_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const T *mean = moments + (size_t)row * 2 * C, *lvr = mean + C;
    T *dmean = dmoments + (size_t)row * 2 * C, *dlv = dmean + C;
    for (int c = lane; c < C; c += 32) {
        float lv = to_f(lvr[c]), g = to_f(dz[(size_t)row * C + c]);
        float e = to_f(eps[(size_t)row * C + c]);
        dmean[c] = from_f<T>(g + ks * to_f(mean[c]));
        dlv[c] = from_f<T>(lv >= LV_MIN && lv <= LV_MAX
                               ? g * e * 0.5f * expf(0.5f * lv) + ks * 0.5f * (expf(lv) - 1.0f)
                               : 0.0f);
    }
}

void cu_l1(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target, int N,
           int K, float grad_scale) {
    cu_impl *cu = cu_enter(be);
    unsigned grid = cu_blocks((size_t)N, VL_ROWS);
    if (be->act_type == IG_ACT_BF16)
        l1_kernel<<<grid, VL_ROWS * 32, 0, cu->stream>>>(losses, (bf16 *)dpred, (const bf16 *)pred,
                                                         (const bf16 *)target, N, K, grad_scale);
    else
        l1_kernel<<<grid, VL_ROWS * 32, 0, cu->stream>>>(
            losses, (float *)dpred, (const float *)pred, (const float *)target, N, K, grad_scale);
    cu_launched(be, "l1");
}

void cu_posterior_forward(ig_backend *be, void *z, float *kl, const void *moments, const void *eps,
                          int N, int C) {
    cu_impl *cu = cu_enter(be);
    unsigned grid = cu_blocks((size_t)N, VL_ROWS);
    if (be->act_type == IG_ACT_BF16)
        posterior_forward_kernel<<<grid, VL_ROWS * 32, 0, cu->stream>>>(
            (bf16 *)z, kl, (const bf16 *)moments, (const bf16 *)eps, N, C);
    else
        posterior_forward_kernel<<<grid, VL_ROWS * 32, 0, cu->stream>>>(
            (float *)z, kl, (const float *)moments, (const float *)eps, N, C);
    cu_launched(be, "posterior_forward");
}

void cu_posterior_backward(ig_backend *be, void *dmoments, const void *dz, const void *moments,
                           const void *eps, int N, int C, float kl_scale) {
    cu_impl *cu = cu_enter(be);
    unsigned grid = cu_blocks((size_t)N, VL_ROWS);
    if (be->act_type == IG_ACT_BF16)
        posterior_backward_kernel<<<grid, VL_ROWS * 32, 0, cu->stream>>>(
            (bf16 *)dmoments, (const bf16 *)dz, (const bf16 *)moments, (const bf16 *)eps, N, C,
            kl_scale);
    else
        posterior_backward_kernel<<<grid, VL_ROWS * 32, 0, cu->stream>>>(
            (float *)dmoments, (const float *)dz, (const float *)moments, (const float *)eps, N, C,
            kl_scale);
    cu_launched(be, "posterior_backward");
}
