/* cpu_mse.c - the squared error per row, DiT's loss on the predicted noise, and its gradient in the
 * same pass: losses[i] = sum over row i of (pred - target)^2 (in double, rounded once), and when
 * asked dpred = grad_scale * 2 * (pred - target). The caller turns the per-row sums into the mean
 * (and gives grad_scale = loss scale / elements).
 *
 * Fast: rows on the pool; a row's sum in 8 double lanes added in lane order (a fixed order), the
 * gradient elementwise in fp32, so the bits never depend on the thread count. Each element is
 * read before its gradient is written: dpred may be pred.
 *
 * Shapes: pred, target, dpred [N, K]; losses [N].
 */
#include "cpu_internal.h"

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_mse(ig_backend *be, float *losses, void *dpred_, const void *pred_,
                    const void *target_, int N, int K, float grad_scale) {
    (void)be;
    float *dpred = dpred_;
    const float *pred = pred_, *target = target_;
    for (int i = 0; i < N; i++) {
        double s = 0;
        for (int k = 0; k < K; k++) {
            size_t at = (size_t)i * K + k;
            double d = (double)pred[at] - target[at];
            s += d * d;
            if (dpred) dpred[at] = (float)(2.0 * grad_scale * d);
        }
        losses[i] = (float)s;
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct mse_job {
    float *losses, *dpred;
    const float *pred, *target;
    float g2; /* 2 * grad_scale */
    int K;
} mse_job;

IG_CPU_CLONES
static void mse_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    mse_job *j = arg;
    int K = j->K;
    for (size_t i = b; i < e; i++) {
        const float *p = j->pred + i * K, *t = j->target + i * K;
        float *dp = j->dpred ? j->dpred + i * K : NULL;
        double s[IG_CPU_LANES] = {0};
        int k = 0;
        for (; k + IG_CPU_LANES <= K; k += IG_CPU_LANES)
            for (int l = 0; l < IG_CPU_LANES; l++) {
                double d = (double)p[k + l] - t[k + l];
                s[l] += d * d;
            }
        for (; k < K; k++) {
            double d = (double)p[k] - t[k];
            s[0] += d * d;
        }
        if (dp) /* after the sums: dp may be p */
            for (k = 0; k < K; k++) dp[k] = j->g2 * (p[k] - t[k]);
        double tot = 0;
        for (int l = 0; l < IG_CPU_LANES; l++) tot += s[l];
        j->losses[i] = (float)tot;
    }
}

void ig_cpu_mse(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
                int N, int K, float grad_scale) {
    mse_job j = {.losses = losses,
                 .dpred = dpred,
                 .pred = pred,
                 .target = target,
                 .g2 = 2.0f * grad_scale,
                 .K = K};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), mse_chunk, &j);
}
