/* cpu_optimizer.c - what the optimizer step needs: fused AdamW, the sum of squares behind the
 * global gradient norm, scaling, and the weights' moving average (EMA).
 *
 * AdamW. The reference follows backend.h's formula in double, element by element; the fast
 * kernel follows torch.optim.AdamW's own order of float operations (torch 1.13,
 * _single_tensor_adamw: decay p by (1 - lr wd) first, then m, v, and p += -lr/bc1 * m / (sqrt(v) /
 * sqrt(bc2) + eps), scalars computed in double as Python does), chunked on the pool. Elementwise,
 * so its bits never depend on the thread count.
 *
 * Sum of squares. Fixed chunks of at least 64 Ki elements (at most 4096 of them), each summed in
 * 8 double lanes, then the partial sums added in chunk order: deterministic.
 *
 * Shapes: params, master, grads, m, v [n].
 */
#include <math.h>

#include "cpu_internal.h"

#define SS_MIN_CHUNK  ((size_t)1 << 16)
#define SS_MAX_CHUNKS 4096
#define SS_LANES      8

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_adamw(ig_backend *be, void *params_, float *master, const void *grads_, float *m,
                      float *v, size_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, float grad_scale, int step) {
    (void)be;
    float *params = params_;
    const float *grads = grads_;
    double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
    for (size_t i = 0; i < n; i++) {
        double g = (double)grads[i] * grad_scale;
        double mi = beta1 * (double)m[i] + (1.0 - beta1) * g;
        double vi = beta2 * (double)v[i] + (1.0 - beta2) * g * g;
        m[i] = (float)mi;
        v[i] = (float)vi;
        double p = master ? master[i] : params[i];
        p -= lr * ((mi / bc1) / (sqrt(vi / bc2) + eps) + weight_decay * p);
        if (master) master[i] = (float)p;
        params[i] = (float)p;
    }
}

double ig_cpu_ref_sum_squares(ig_backend *be, const void *x_, size_t n) {
    (void)be;
    const float *x = x_;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

void ig_cpu_ref_scale(ig_backend *be, void *x_, size_t n, float s) {
    (void)be;
    float *x = x_;
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* the moving average of one element, as both kernels compute it */
static inline float ema_of(float e, float w, float decay) {
    return decay == 0.0f ? w : decay * e + (1.0f - decay) * w;
}

void ig_cpu_ref_ema(ig_backend *be, float *ema, const float *master, const void *params, size_t n,
                    float decay) {
    (void)be;
    const float *w = master ? master : params;
    for (size_t i = 0; i < n; i++) ema[i] = ema_of(ema[i], w[i], decay);
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct opt_job {
    float *params, *master, *m, *v, *x;
    const float *grads;
    /* bf16 act tensors (cpu_bf16.c's table): read and written here, widened and rounded element
     * by element, instead of params, grads and x: the fp32 kernel's arithmetic in its order */
    uint16_t *params16, *x16;
    const uint16_t *grads16;
    float decay, b1, one_b1, b2, one_b2, bc2_sqrt, eps, neg_step, grad_scale, s;
    size_t chunk;
    double *partial;
} opt_job;

IG_CPU_CLONES
static void adamw_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    opt_job *j = arg;
    float *p = j->master ? j->master : j->params;
    for (size_t i = b; i < e; i++) {
        float g = (j->grads16 ? ig_bf16_to_f32(j->grads16[i]) : j->grads[i]) * j->grad_scale;
        float pi = (p ? p[i] : ig_bf16_to_f32(j->params16[i])) * j->decay;
        float mi = j->m[i] * j->b1 + j->one_b1 * g;
        float vi = j->v[i] * j->b2 + j->one_b2 * (g * g);
        float denom = sqrtf(vi) / j->bc2_sqrt + j->eps;
        pi = pi + j->neg_step * (mi / denom);
        j->m[i] = mi;
        j->v[i] = vi;
        if (p) p[i] = pi;
        if (j->params16)
            j->params16[i] = ig_bf16_from_f32(pi);
        else if (j->master)
            j->params[i] = pi;
    }
}

static void adamw(ig_backend *be, int bf16, void *params, float *master, const void *grads,
                  float *m, float *v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int step) {
    /* torch's scalars: Python floats (double), cast to float where they meet a float tensor */
    double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
    opt_job j = {.params = bf16 ? NULL : params,
                 .params16 = bf16 ? params : NULL,
                 .master = master,
                 .m = m,
                 .v = v,
                 .grads = bf16 ? NULL : grads,
                 .grads16 = bf16 ? grads : NULL,
                 .decay = (float)(1.0 - (double)lr * weight_decay),
                 .b1 = beta1,
                 .one_b1 = (float)(1.0 - beta1),
                 .b2 = beta2,
                 .one_b2 = (float)(1.0 - beta2),
                 .bc2_sqrt = (float)sqrt(bc2),
                 .eps = eps,
                 .neg_step = (float)(-(lr / bc1)),
                 .grad_scale = grad_scale};
    ig_parallel_range(be->ctx, n, ig_cpu_chunk(n, 64, 1024), adamw_chunk, &j);
}

void ig_cpu_adamw(ig_backend *be, void *params, float *master, const void *grads, float *m,
                  float *v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int step) {
    adamw(be, 0, params, master, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
          step);
}

void ig_cpu_bf16_adamw(ig_backend *be, void *params, float *master, const void *grads, float *m,
                       float *v, size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, int step) {
    adamw(be, 1, params, master, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, grad_scale,
          step);
}

static size_t ss_chunk(size_t n) {
    size_t c = (n + SS_MAX_CHUNKS - 1) / SS_MAX_CHUNKS;
    return c < SS_MIN_CHUNK ? SS_MIN_CHUNK : c;
}

IG_CPU_CLONES
static void ss_chunk_fn(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    opt_job *j = arg;
    const float *x = j->grads;
    const uint16_t *h = j->grads16;
    double s[SS_LANES] = {0};
    size_t i = b;
    if (h) {
        for (; i + SS_LANES <= e; i += SS_LANES)
            for (int k = 0; k < SS_LANES; k++) {
                double v = ig_bf16_to_f32(h[i + k]);
                s[k] += v * v;
            }
        for (; i < e; i++) s[0] += (double)ig_bf16_to_f32(h[i]) * ig_bf16_to_f32(h[i]);
    } else {
        for (; i + SS_LANES <= e; i += SS_LANES)
            for (int k = 0; k < SS_LANES; k++) s[k] += (double)x[i + k] * x[i + k];
        for (; i < e; i++) s[0] += (double)x[i] * x[i];
    }
    double t = 0;
    for (int k = 0; k < SS_LANES; k++) t += s[k];
    j->partial[b / j->chunk] = t;
}

static double sum_squares(ig_backend *be, int bf16, const void *x, size_t n) {
    double partial[SS_MAX_CHUNKS];
    opt_job j = {.grads = bf16 ? NULL : x,
                 .grads16 = bf16 ? x : NULL,
                 .chunk = ss_chunk(n),
                 .partial = partial};
    size_t chunks = (n + j.chunk - 1) / j.chunk;
    ig_parallel_range(be->ctx, n, j.chunk, ss_chunk_fn, &j);
    double s = 0;
    for (size_t c = 0; c < chunks; c++) s += partial[c];
    return s;
}

double ig_cpu_sum_squares(ig_backend *be, const void *x, size_t n) {
    return sum_squares(be, 0, x, n);
}

double ig_cpu_bf16_sum_squares(ig_backend *be, const void *x, size_t n) {
    return sum_squares(be, 1, x, n);
}

IG_CPU_CLONES
static void scale_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    opt_job *j = arg;
    if (j->x16)
        for (size_t i = b; i < e; i++)
            j->x16[i] = ig_bf16_from_f32(ig_bf16_to_f32(j->x16[i]) * j->s);
    else
        for (size_t i = b; i < e; i++) j->x[i] *= j->s;
}

void ig_cpu_scale(ig_backend *be, void *x, size_t n, float s) {
    opt_job j = {.x = x, .s = s};
    ig_parallel_range(be->ctx, n, ig_cpu_chunk(n, 64, 4096), scale_chunk, &j);
}

void ig_cpu_bf16_scale(ig_backend *be, void *x, size_t n, float s) {
    opt_job j = {.x16 = x, .s = s};
    ig_parallel_range(be->ctx, n, ig_cpu_chunk(n, 64, 4096), scale_chunk, &j);
}

IG_CPU_CLONES
static void ema_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    opt_job *j = arg;
    for (size_t i = b; i < e; i++) j->x[i] = ema_of(j->x[i], j->grads[i], j->s);
}

void ig_cpu_ema(ig_backend *be, float *ema, const float *master, const void *params, size_t n,
                float decay) {
    opt_job j = {.x = ema, .grads = master ? master : params, .s = decay};
    ig_parallel_range(be->ctx, n, ig_cpu_chunk(n, 64, 4096), ema_chunk, &j);
}
