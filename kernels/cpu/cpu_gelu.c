/* cpu_gelu.c - bias + GeLU (tanh approximation, GPT-2's "gelu_new") forward, and its backward,
 * which recomputes gelu' from the saved pre-activation instead of keeping another tensor.
 *
 * gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
 * gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 *
 * The fast kernels compute 0.5 (1 + tanh(u)) as sigmoid(2u) = 1 / (1 + exp(-2u)) with the
 * vectorisable ig_cpu_expf (no cancellation near 0, and libm's tanhf is a call per element).
 * The fast backward goes over chunks of columns, each computing its dinp columns row by row and
 * summing them (in double, in row order) into dbias: one pass, and the bias gradient's order never
 * depends on the thread count.
 *
 * Shapes: inp, out, dout, dinp [N, C]; bias, dbias [C].
 */
#include <math.h>

#include "cpu_internal.h"

#define GELU_K    0.7978845608028654 /* sqrt(2 / pi) */
#define GELU_A    0.044715
#define GELU_COLS 64

/* ---- reference ------------------------------------------------------------------------------- */

static double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(GELU_K * (x + GELU_A * x * x * x)));
}

static double ref_gelu_grad(double x) {
    double t = tanh(GELU_K * (x + GELU_A * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_A * x * x);
}

void ig_cpu_ref_gelu_bias_forward(ig_backend *be, void *out_, const void *inp_, const void *bias_,
                                  int N, int C) {
    (void)be;
    float *out = out_;
    const float *inp = inp_, *bias = bias_;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            out[i] = (float)ref_gelu((double)inp[i] + bias[c]);
        }
}

void ig_cpu_ref_gelu_bias_backward(ig_backend *be, void *dinp_, void *dbias_, const void *dout_,
                                   const void *inp_, const void *bias_, int N, int C) {
    (void)be;
    float *dinp = dinp_, *dbias = dbias_;
    const float *dout = dout_, *inp = inp_, *bias = bias_;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            dinp[i] = (float)(dout[i] * ref_gelu_grad((double)inp[i] + bias[c]));
        }
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += dinp[(size_t)n * C + c];
        dbias[c] = (float)(dbias[c] + s);
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct gelu_job {
    float *out, *dinp, *dbias;
    const float *inp, *bias, *dout;
    int N, C;
} gelu_job;

IG_CPU_CLONES
static void gelu_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    gelu_job *j = arg;
    int C = j->C;
    for (size_t n = b; n < e; n++) {
        const float *x = j->inp + n * C;
        float *o = j->out + n * C;
        for (int c = 0; c < C; c++) { /* 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)) */
            float v = x[c] + j->bias[c];
            float u = (float)GELU_K * (v + (float)GELU_A * v * v * v);
            o[c] = v / (1.0f + ig_cpu_expf(-2.0f * u));
        }
    }
}

void ig_cpu_gelu_bias_forward(ig_backend *be, void *out, const void *inp, const void *bias, int N,
                              int C) {
    gelu_job j = {.out = out, .inp = inp, .bias = bias, .N = N, .C = C};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), gelu_fwd_chunk, &j);
}

IG_CPU_CLONES
static void gelu_bwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    gelu_job *j = arg;
    int C = j->C;
    for (size_t ci = b; ci < e; ci++) {
        int c0 = (int)ci * GELU_COLS, cw = C - c0 < GELU_COLS ? C - c0 : GELU_COLS;
        double s[GELU_COLS] = {0};
        const float *bias = j->bias + c0;
        for (int n = 0; n < j->N; n++) {
            size_t off = (size_t)n * C + c0;
            const float *x = j->inp + off, *d = j->dout + off;
            float *di = j->dinp + off;
            for (int k = 0; k < cw; k++) {
                /* with sg = 0.5 (1 + tanh(u)) = sigmoid(2u): 0.5 (1 - tanh(u)^2) = 2 sg (1 - sg) */
                float v = x[k] + bias[k];
                float u = (float)GELU_K * (v + (float)GELU_A * v * v * v);
                float sg = 1.0f / (1.0f + ig_cpu_expf(-2.0f * u));
                float g = sg + 2.0f * v * sg * (1.0f - sg) * (float)GELU_K *
                                   (1.0f + 3.0f * (float)GELU_A * v * v);
                di[k] = d[k] * g;
                s[k] += di[k];
            }
        }
        for (int k = 0; k < cw; k++) j->dbias[c0 + k] = (float)(j->dbias[c0 + k] + s[k]);
    }
}

void ig_cpu_gelu_bias_backward(ig_backend *be, void *dinp, void *dbias, const void *dout,
                               const void *inp, const void *bias, int N, int C) {
    gelu_job j = {
        .dinp = dinp, .dbias = dbias, .dout = dout, .inp = inp, .bias = bias, .N = N, .C = C};
    ig_parallel_range(be->ctx, ((size_t)C + GELU_COLS - 1) / GELU_COLS, 1, gelu_bwd_chunk, &j);
}
