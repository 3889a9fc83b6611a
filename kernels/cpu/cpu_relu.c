/* cpu_relu.c - ReLU, the activation of T5 v1.0's feed-forward ("relu": wo(relu(wi(x)))), forward
 * only (the encoder that uses it is frozen). out = inp where inp >= 0 or inp is NaN (torch.relu
 * keeps a NaN), else 0; written as x < 0 ? 0 : x, which does both.
 *
 * Reference: one loop. Fast: fixed chunks on the pool; every element alone, so the bits never
 * depend on the thread count, and out may be inp.
 *
 * Shapes: inp, out [n].
 */
#include "cpu_internal.h"

void ig_cpu_ref_relu_forward(ig_backend *be, void *out_, const void *inp_, size_t n) {
    (void)be;
    float *out = out_;
    const float *inp = inp_;
    for (size_t i = 0; i < n; i++) out[i] = inp[i] < 0 ? 0.0f : inp[i];
}

typedef struct relu_job {
    float *out;
    const float *inp;
} relu_job;

IG_CPU_CLONES
static void relu_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    relu_job *j = arg;
    for (size_t i = b; i < e; i++) {
        float x = j->inp[i];
        j->out[i] = x < 0 ? 0.0f : x;
    }
}

void ig_cpu_relu_forward(ig_backend *be, void *out, const void *inp, size_t n) {
    relu_job j = {.out = out, .inp = inp};
    ig_parallel_range(be->ctx, n, ig_cpu_chunk(n, 64, 4096), relu_fwd_chunk, &j);
}
