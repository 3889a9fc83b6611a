/* cpu_vae_loss.c - the VAE's training loss on the CPU: the reconstruction's absolute error per row
 * and its gradient in one pass (as cpu_mse.c does for the squared error), and the posterior's
 * sample z = mean + exp(lv / 2) eps with lv = clamp(logvar, -30, 20) together with its KL term
 * 0.5 (mean^2 + exp(lv) - 1 - lv) per row, and their backward (diffusers'
 * DiagonalGaussianDistribution.sample and .kl, torch's clamp gradient: the bounds pass it).
 *
 * Reference: plain loops in double, each value rounded once. Fast: rows on the pool in chunks that
 * depend on the sizes only; a row's sum in 8 double lanes added in lane order, elementwise values
 * in fp32, so the bits never depend on the thread count.
 *
 * Shapes: l1: pred, target, dpred [N, K], losses [N]. posterior: moments, dmoments [N, 2C] (the C
 * means, then the C log-variances of a pixel), eps, z, dz [N, C], kl [N].
 */
#include <math.h>

#include "cpu_internal.h"

#define LV_MIN (-30.0f) /* diffusers' clamp of the log-variance */
#define LV_MAX 20.0f

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_l1(ig_backend *be, float *losses, void *dpred_, const void *pred_,
                   const void *target_, int N, int K, float grad_scale) {
    (void)be;
    float *dpred = dpred_;
    const float *pred = pred_, *target = target_;
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int k = 0; k < K; k++) {
            size_t at = (size_t)i * K + k;
            double d = (double)pred[at] - target[at];
            s += fabs(d);
            if (dpred) dpred[at] = d > 0 ? grad_scale : d < 0 ? -grad_scale : 0.0f;
        }
        losses[i] = (float)s;
    }
}

void ig_cpu_ref_posterior_forward(ig_backend *be, void *z_, float *kl, const void *moments_,
                                  const void *eps_, int N, int C) {
    (void)be;
    float *z = z_;
    const float *mo = moments_, *eps = eps_;
    for (int i = 0; i < N; i++) {
        const float *mean = mo + (size_t)i * 2 * C, *lvr = mean + C;
        double s = 0;
        for (int c = 0; c < C; c++) {
            double lv = lvr[c] < LV_MIN ? LV_MIN : lvr[c] > LV_MAX ? LV_MAX : lvr[c];
            double m = mean[c];
            z[(size_t)i * C + c] = (float)(m + exp(0.5 * lv) * eps[(size_t)i * C + c]);
            s += 0.5 * (m * m + exp(lv) - 1.0 - lv);
        }
        if (kl) kl[i] = (float)s;
    }
}

void ig_cpu_ref_posterior_backward(ig_backend *be, void *dmoments_, const void *dz_,
                                   const void *moments_, const void *eps_, int N, int C,
                                   float kl_scale) {
    (void)be;
    float *dmo = dmoments_;
    const float *mo = moments_, *dz = dz_, *eps = eps_;
    for (int i = 0; i < N; i++) {
        const float *mean = mo + (size_t)i * 2 * C, *lvr = mean + C;
        float *dmean = dmo + (size_t)i * 2 * C, *dlv = dmean + C;
        for (int c = 0; c < C; c++) {
            double g = dz[(size_t)i * C + c], e = eps[(size_t)i * C + c], lv = lvr[c];
            dmean[c] = (float)(g + (double)kl_scale * mean[c]);
            dlv[c] = lv >= LV_MIN && lv <= LV_MAX
                         ? (float)(g * e * 0.5 * exp(0.5 * lv) + kl_scale * 0.5 * (exp(lv) - 1.0))
                         : 0.0f;
        }
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct l1_job {
    float *losses, *dpred;
    const float *pred, *target;
    float g;
    int K;
} l1_job;

IG_CPU_CLONES
static void l1_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    l1_job *j = arg;
    int K = j->K;
    for (size_t i = b; i < e; i++) {
        const float *p = j->pred + i * K, *t = j->target + i * K;
        double s[IG_CPU_LANES] = {0};
        int k = 0;
        for (; k + IG_CPU_LANES <= K; k += IG_CPU_LANES)
            for (int l = 0; l < IG_CPU_LANES; l++) s[l] += fabs((double)p[k + l] - t[k + l]);
        for (; k < K; k++) s[0] += fabs((double)p[k] - t[k]);
        if (j->dpred) { /* after the sums: dpred may be pred */
            float *dp = j->dpred + i * K, g = j->g;
            for (k = 0; k < K; k++) {
                float d = p[k] - t[k];
                dp[k] = d > 0 ? g : d < 0 ? -g : 0.0f;
            }
        }
        double tot = 0;
        for (int l = 0; l < IG_CPU_LANES; l++) tot += s[l];
        j->losses[i] = (float)tot;
    }
}

void ig_cpu_l1(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
               int N, int K, float grad_scale) {
    l1_job j = {
        .losses = losses, .dpred = dpred, .pred = pred, .target = target, .g = grad_scale, .K = K};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), l1_chunk, &j);
}

typedef struct posterior_job {
    float *out, *kl; /* z (forward) or dmoments (backward) */
    const float *moments, *eps, *dz;
    float kl_scale;
    int C;
} posterior_job;

static inline float clamp_lv(float v) {
    return v < LV_MIN ? LV_MIN : v > LV_MAX ? LV_MAX : v;
}

static void posterior_forward_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    posterior_job *j = arg;
    int C = j->C;
    for (size_t i = b; i < e; i++) {
        const float *mean = j->moments + i * 2 * C, *lvr = mean + C, *eps = j->eps + i * C;
        float *z = j->out + i * C;
        double s[IG_CPU_LANES] = {0};
        for (int c = 0; c < C; c++) {
            float lv = clamp_lv(lvr[c]), m = mean[c];
            z[c] = m + expf(0.5f * lv) * eps[c];
            s[c % IG_CPU_LANES] += (double)(0.5f * (m * m + expf(lv) - 1.0f - lv));
        }
        double tot = 0;
        for (int l = 0; l < IG_CPU_LANES; l++) tot += s[l];
        if (j->kl) j->kl[i] = (float)tot;
    }
}

void ig_cpu_posterior_forward(ig_backend *be, void *z, float *kl, const void *moments,
                              const void *eps, int N, int C) {
    posterior_job j = {.out = z, .kl = kl, .moments = moments, .eps = eps, .C = C};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), posterior_forward_chunk,
                      &j);
}

static void posterior_backward_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    posterior_job *j = arg;
    int C = j->C;
    float ks = j->kl_scale;
    for (size_t i = b; i < e; i++) {
        const float *mean = j->moments + i * 2 * C, *lvr = mean + C;
        const float *eps = j->eps + i * C, *dz = j->dz + i * C;
        float *dmean = j->out + i * 2 * C, *dlv = dmean + C;
        for (int c = 0; c < C; c++) {
            float lv = lvr[c], g = dz[c];
            dmean[c] = g + ks * mean[c];
            dlv[c] = lv >= LV_MIN && lv <= LV_MAX
                         ? g * eps[c] * 0.5f * expf(0.5f * lv) + ks * 0.5f * (expf(lv) - 1.0f)
                         : 0.0f;
        }
    }
}

void ig_cpu_posterior_backward(ig_backend *be, void *dmoments, const void *dz, const void *moments,
                               const void *eps, int N, int C, float kl_scale) {
    posterior_job j = {
        .out = dmoments, .moments = moments, .eps = eps, .dz = dz, .kl_scale = kl_scale, .C = C};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), posterior_backward_chunk,
                      &j);
}
