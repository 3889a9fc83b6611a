/* cpu_geglu.c - GeGLU, T5 v1.1's gated FFN activation ("gated-gelu"): out = gelu(gate) * up with
 * the tanh approximation of GeLU (transformers' "gelu_new", as cpu_gelu.c), and its backward,
 * which recomputes from gate and up:
 *   gelu(x) = 0.5 x (1 + tanh(v)), v = sqrt(2/pi) (x + 0.044715 x^3)
 *   dgate = dout * up * gelu'(gate),  dup = dout * gelu(gate)
 *   gelu'(x) = 0.5 (1 + tanh(v)) + 0.5 x (1 - tanh(v)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 *
 * Reference: in double with libm's tanh. Fast: 0.5 (1 + tanh(v)) as sigmoid(2v) = 1 / (1 +
 * exp(-2v)) with the vectorisable ig_cpu_expf (as cpu_gelu.c), chunks of rows on the pool; every
 * element alone, so the bits never depend on the thread count. Each element's inputs are read
 * before its outputs are written: dgate or dup may be dout.
 *
 * Shapes: gate, up, out, dout, dgate, dup [N, F].
 */
#include <math.h>

#include "cpu_internal.h"

#define GEGLU_K 0.7978845608028654 /* sqrt(2 / pi) */
#define GEGLU_A 0.044715

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_geglu_forward(ig_backend *be, void *out_, const void *gate_, const void *up_, int N,
                              int F) {
    (void)be;
    float *out = out_;
    const float *gate = gate_, *up = up_;
    for (size_t i = 0; i < (size_t)N * F; i++) {
        double x = gate[i];
        out[i] = (float)(0.5 * x * (1.0 + tanh(GEGLU_K * (x + GEGLU_A * x * x * x))) * up[i]);
    }
}

void ig_cpu_ref_geglu_backward(ig_backend *be, void *dgate_, void *dup_, const void *dout_,
                               const void *gate_, const void *up_, int N, int F) {
    (void)be;
    float *dgate = dgate_, *dup = dup_;
    const float *dout = dout_, *gate = gate_, *up = up_;
    for (size_t i = 0; i < (size_t)N * F; i++) {
        double d = dout[i], x = gate[i], u = up[i];
        double t = tanh(GEGLU_K * (x + GEGLU_A * x * x * x));
        double g =
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GEGLU_K * (1.0 + 3.0 * GEGLU_A * x * x);
        dgate[i] = (float)(d * u * g);
        dup[i] = (float)(d * 0.5 * x * (1.0 + t));
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct geglu_job {
    float *out, *dgate, *dup;
    const float *gate, *up, *dout;
    int F;
} geglu_job;

IG_CPU_CLONES
static void geglu_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    geglu_job *j = arg;
    for (size_t i = b * j->F; i < e * j->F; i++) {
        float x = j->gate[i];
        float v = (float)GEGLU_K * (x + (float)GEGLU_A * x * x * x);
        j->out[i] = x / (1.0f + ig_cpu_expf(-2.0f * v)) * j->up[i];
    }
}

void ig_cpu_geglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N,
                          int F) {
    geglu_job j = {.out = out, .gate = gate, .up = up, .F = F};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), geglu_fwd_chunk, &j);
}

IG_CPU_CLONES
static void geglu_bwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    geglu_job *j = arg;
    for (size_t i = b * j->F; i < e * j->F; i++) {
        float d = j->dout[i], x = j->gate[i], u = j->up[i];
        /* sg = 0.5 (1 + tanh(v)) = sigmoid(2v); 0.5 (1 - tanh(v)^2) = 2 sg (1 - sg) */
        float v = (float)GEGLU_K * (x + (float)GEGLU_A * x * x * x);
        float sg = 1.0f / (1.0f + ig_cpu_expf(-2.0f * v));
        float g = sg + 2.0f * x * sg * (1.0f - sg) * (float)GEGLU_K *
                           (1.0f + 3.0f * (float)GEGLU_A * x * x);
        j->dgate[i] = d * u * g;
        j->dup[i] = d * (x * sg);
    }
}

void ig_cpu_geglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout,
                           const void *gate, const void *up, int N, int F) {
    geglu_job j = {.dgate = dgate, .dup = dup, .dout = dout, .gate = gate, .up = up, .F = F};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), geglu_bwd_chunk, &j);
}
