/* cpu_silu.c - SiLU, silu(x) = x / (1 + e^-x): DiT applies it to the conditioning (timestep +
 * class embeddings) before the adaLN modulation's linear layer, and inside the timestep
 * embedder's MLP. The backward recomputes from the input:
 *   dinp = dout * silu'(x),  silu'(x) = s (1 + x (1 - s)),  s = 1 / (1 + e^-x)
 *
 * Elementwise: the fast kernels go over fixed chunks on the pool with the vectorisable
 * ig_cpu_expf; every element is computed alone, so the bits never depend on the thread count.
 * Each element is read before it is written (dinp may be dout).
 *
 * Shapes: inp, out, dout, dinp [n].
 */
#include <math.h>

#include "cpu_internal.h"

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_silu_forward(ig_backend *be, void *out_, const void *inp_, size_t n) {
    (void)be;
    float *out = out_;
    const float *inp = inp_;
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (float)(x / (1.0 + exp(-x)));
    }
}

void ig_cpu_ref_silu_backward(ig_backend *be, void *dinp_, const void *dout_, const void *inp_,
                              size_t n) {
    (void)be;
    float *dinp = dinp_;
    const float *dout = dout_, *inp = inp_;
    for (size_t i = 0; i < n; i++) {
        double d = dout[i], x = inp[i];
        double s = 1.0 / (1.0 + exp(-x));
        dinp[i] = (float)(d * s * (1.0 + x * (1.0 - s)));
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct silu_job {
    float *out;
    const float *inp, *dout;
} silu_job;

IG_CPU_CLONES
static void silu_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    silu_job *j = arg;
    for (size_t i = b; i < e; i++) {
        float x = j->inp[i];
        j->out[i] = x / (1.0f + ig_cpu_expf(-x));
    }
}

void ig_cpu_silu_forward(ig_backend *be, void *out, const void *inp, size_t n) {
    silu_job j = {.out = out, .inp = inp};
    ig_parallel_range(be->ctx, n, ig_cpu_chunk(n, 64, 4096), silu_fwd_chunk, &j);
}

IG_CPU_CLONES
static void silu_bwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    silu_job *j = arg;
    for (size_t i = b; i < e; i++) {
        float d = j->dout[i], x = j->inp[i];
        float s = 1.0f / (1.0f + ig_cpu_expf(-x));
        j->out[i] = d * (s * (1.0f + x * (1.0f - s)));
    }
}

void ig_cpu_silu_backward(ig_backend *be, void *dinp, const void *dout, const void *inp, size_t n) {
    silu_job j = {.out = dinp, .inp = inp, .dout = dout};
    ig_parallel_range(be->ctx, n, ig_cpu_chunk(n, 64, 4096), silu_bwd_chunk, &j);
}
