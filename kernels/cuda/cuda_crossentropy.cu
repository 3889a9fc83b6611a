/* cuda_crossentropy.cu - softmax and cross-entropy over the vocabulary on the GPU, forward and
 * backward fused: one block per row takes the row's max and sum of exponentials (fp32, block
 * reductions in a fixed order), writes the loss and, when dloss is given, overwrites the logits
 * with their gradient dloss * (softmax - onehot) on the first V columns and 0 on the padded ones.
 * No probability tensor exists; the padded columns are never read.
 *
 * Shapes: logits [N, Vp] (act type), targets [N] in [0, V), losses [N], dloss NULL or [N].
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
