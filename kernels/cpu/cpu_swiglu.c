/* cpu_swiglu.c - SwiGLU, Llama's MLP activation: out = silu(gate) * up, silu(x) = x / (1 + e^-x),
 * and its backward, which recomputes from gate and up instead of keeping another tensor:
 *   dgate = dout * up * silu'(gate),  silu'(x) = s (1 + x (1 - s)),  s = 1 / (1 + e^-x)
 *   dup   = dout * silu(gate)
 *
 * Elementwise: the fast kernels go over chunks of rows on the pool with the vectorisable
 * ig_cpu_expf (libm's expf is a call per element); every element is computed alone, so the bits
 * never depend on the thread count. Each element's inputs are read before its outputs are
 * written: dgate or dup may be dout.
 *
 * Shapes: gate, up, out, dout, dgate, dup [N, F].
 */
#include <math.h>

#include "cpu_internal.h"

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_swiglu_forward(ig_backend *be, void *out_, const void *gate_, const void *up_,
                               int N, int F) {
    (void)be;
    float *out = out_;
    const float *gate = gate_, *up = up_;
    for (size_t i = 0; i < (size_t)N * F; i++) {
        double x = gate[i];
        out[i] = (float)(x / (1.0 + exp(-x)) * up[i]);
    }
}

void ig_cpu_ref_swiglu_backward(ig_backend *be, void *dgate_, void *dup_, const void *dout_,
                                const void *gate_, const void *up_, int N, int F) {
    (void)be;
    float *dgate = dgate_, *dup = dup_;
    const float *dout = dout_, *gate = gate_, *up = up_;
    for (size_t i = 0; i < (size_t)N * F; i++) {
        double d = dout[i], x = gate[i], u = up[i];
        double s = 1.0 / (1.0 + exp(-x));
        dgate[i] = (float)(d * u * s * (1.0 + x * (1.0 - s)));
        dup[i] = (float)(d * x * s);
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct swiglu_job {
    float *out, *dgate, *dup;
    const float *gate, *up, *dout;
    int F;
} swiglu_job;

IG_CPU_CLONES
static void swiglu_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    swiglu_job *j = arg;
    for (size_t i = b * j->F; i < e * j->F; i++) {
        float x = j->gate[i];
        j->out[i] = x / (1.0f + ig_cpu_expf(-x)) * j->up[i];
    }
}

void ig_cpu_swiglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N,
                           int F) {
    swiglu_job j = {.out = out, .gate = gate, .up = up, .F = F};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), swiglu_fwd_chunk, &j);
}

IG_CPU_CLONES
static void swiglu_bwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    swiglu_job *j = arg;
    for (size_t i = b * j->F; i < e * j->F; i++) {
        float d = j->dout[i], x = j->gate[i], u = j->up[i];
        float s = 1.0f / (1.0f + ig_cpu_expf(-x));
        j->dgate[i] = d * u * (s * (1.0f + x * (1.0f - s)));
        j->dup[i] = d * (x * s);
    }
}

void ig_cpu_swiglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout,
                            const void *gate, const void *up, int N, int F) {
    swiglu_job j = {.dgate = dgate, .dup = dup, .dout = dout, .gate = gate, .up = up, .F = F};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), swiglu_bwd_chunk, &j);
}
