/* cuda_crossentropy.cu - softmax and cross-entropy over the vocabulary on the GPU, forward and
 * backward fused: one block per row takes the row's max and sum of exponentials (fp32, block
 * reductions in a fixed order), writes the loss and, when dloss is given, overwrites the logits
 * with their gradient dloss * (softmax - onehot) on the first V columns and 0 on the padded ones.
 * No probability tensor exists; the padded columns are never read.
 *
 * The vocabulary-parallel form (ce_max, ce_sums, ce_finish: backend.h) makes the same block per
 * row in three passes over this rank's slice of the columns, the group's all-reduces between them.
 *
 * Shapes: logits [N, Vp] (act type), targets [N] in [0, V), losses [N], dloss NULL or [N];
 * parallel: logits [N, Vl] of which Vvalid real, targets [N] in [0, Vvalid) or -1, rowmax [N],
 * stats [N, 2].
 */
#include "cuda_internal.h"

#define CE_THREADS 512

template <typename T>
__global__ void crossentropy_kernel(float *losses, T *logits, const int32_t *targets,
                                    const float *dloss, int V, int Vp) {
    __shared__ float red[32];
    size_t row = blockIdx.x;
    T *x = logits + row * (size_t)Vp;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, to_f(x[j]));
    m = block_max(m, red);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(to_f(x[j]) - m);
    s = block_sum(s, red);
    float lse = m + logf(s);
    int tgt = targets[row];
    float xt = to_f(x[tgt]);
    if (threadIdx.x == 0) losses[row] = lse - xt;
    if (!dloss) return;
    __syncthreads(); /* every read of x[tgt] is done before it is overwritten */
    float dl = dloss[row];
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(to_f(x[j]) - lse);
        x[j] = from_f<T>(dl * (p - (j == tgt ? 1.0f : 0.0f)));
    }
    for (int j = V + threadIdx.x; j < Vp; j += blockDim.x) x[j] = from_f<T>(0.0f);
}

void cu_crossentropy(ig_backend *be, float *losses, void *logits, const int32_t *targets,
                     const float *dloss, int N, int V, int Vp) {
    cu_impl *cu = cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        crossentropy_kernel<<<N, CE_THREADS, 0, cu->stream>>>(losses, (bf16 *)logits, targets,
                                                              dloss, V, Vp);
    else
        crossentropy_kernel<<<N, CE_THREADS, 0, cu->stream>>>(losses, (float *)logits, targets,
                                                              dloss, V, Vp);
    cu_launched(be, "crossentropy");
}

template <typename T>
__global__ void ce_max_kernel(float *rowmax, const T *logits, int Vvalid, int Vl) {
    __shared__ float red[32];
    size_t row = blockIdx.x;
    const T *x = logits + row * (size_t)Vl;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < Vvalid; j += blockDim.x) m = fmaxf(m, to_f(x[j]));
    m = block_max(m, red);
    if (threadIdx.x == 0) rowmax[row] = m;
}

template <typename T>
__global__ void ce_sums_kernel(float *stats, const T *logits, const float *rowmax,
                               const int32_t *targets, int Vvalid, int Vl) {
    __shared__ float red[32];
    size_t row = blockIdx.x;
    const T *x = logits + row * (size_t)Vl;
    float m = rowmax[row], s = 0.0f;
    for (int j = threadIdx.x; j < Vvalid; j += blockDim.x) s += expf(to_f(x[j]) - m);
    s = block_sum(s, red);
    if (threadIdx.x == 0) {
        int t = targets[row];
        stats[2 * row] = s;
        stats[2 * row + 1] = t >= 0 ? to_f(x[t]) : 0.0f;
    }
}

template <typename T>
__global__ void ce_finish_kernel(float *losses, T *logits, const float *rowmax, const float *stats,
                                 const int32_t *targets, const float *dloss, int Vvalid, int Vl) {
    size_t row = blockIdx.x;
    float lse = rowmax[row] + logf(stats[2 * row]);
    if (threadIdx.x == 0) losses[row] = lse - stats[2 * row + 1];
    if (!dloss) return;
    T *x = logits + row * (size_t)Vl;
    int tgt = targets[row];
    float dl = dloss[row];
    for (int j = threadIdx.x; j < Vvalid; j += blockDim.x) {
        float p = expf(to_f(x[j]) - lse);
        x[j] = from_f<T>(dl * (p - (j == tgt ? 1.0f : 0.0f)));
    }
    for (int j = Vvalid + threadIdx.x; j < Vl; j += blockDim.x) x[j] = from_f<T>(0.0f);
}

void cu_ce_max(ig_backend *be, float *rowmax, const void *logits, int N, int Vvalid, int Vl) {
    cu_impl *cu = cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        ce_max_kernel<<<N, CE_THREADS, 0, cu->stream>>>(rowmax, (const bf16 *)logits, Vvalid, Vl);
    else
        ce_max_kernel<<<N, CE_THREADS, 0, cu->stream>>>(rowmax, (const float *)logits, Vvalid, Vl);
    cu_launched(be, "ce_max");
}

void cu_ce_sums(ig_backend *be, float *stats, const void *logits, const float *rowmax,
                const int32_t *targets, int N, int Vvalid, int Vl) {
    cu_impl *cu = cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        ce_sums_kernel<<<N, CE_THREADS, 0, cu->stream>>>(stats, (const bf16 *)logits, rowmax,
                                                         targets, Vvalid, Vl);
    else
        ce_sums_kernel<<<N, CE_THREADS, 0, cu->stream>>>(stats, (const float *)logits, rowmax,
                                                         targets, Vvalid, Vl);
    cu_launched(be, "ce_sums");
}

void cu_ce_finish(ig_backend *be, float *losses, void *logits, const float *rowmax,
                  const float *stats, const int32_t *targets, const float *dloss, int N, int Vvalid,
                  int Vl) {
    cu_impl *cu = cu_enter(be);
    if (N == 0) return;
    if (be->act_type == IG_ACT_BF16)
        ce_finish_kernel<<<N, CE_THREADS, 0, cu->stream>>>(losses, (bf16 *)logits, rowmax, stats,
                                                           targets, dloss, Vvalid, Vl);
    else
        ce_finish_kernel<<<N, CE_THREADS, 0, cu->stream>>>(losses, (float *)logits, rowmax, stats,
                                                           targets, dloss, Vvalid, Vl);
    cu_launched(be, "ce_finish");
}
