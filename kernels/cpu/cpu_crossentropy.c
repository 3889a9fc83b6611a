/* cpu_crossentropy.c - softmax and cross-entropy over the vocabulary, forward and backward fused:
 * each row's max and sum of exponentials are taken, its loss written, and (when dloss is given)
 * its logits overwritten by their gradient, all while the row is in cache; no probability tensor
 * exists. Padded columns (V <= j < Vp) are never read, and get a zero gradient.
 *
 * Rows are independent: the fast kernel runs them on the pool, each reduced in 16 fixed lanes
 * (ig_cpu_max, ig_cpu_sum_exp: the sum in double, the exponentials by the vectorisable
 * ig_cpu_expf), so a row's bits do not depend on which thread took it or on the CPU.
 *
 * Shapes: logits [N, Vp], targets [N] in [0, V), losses [N], dloss NULL or [N].
 */
#include <math.h>

#include "cpu_internal.h"

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_crossentropy(ig_backend *be, float *losses, void *logits_, const int32_t *targets,
                             const float *dloss, int N, int V, int Vp) {
    (void)be;
    float *logits = logits_;
    for (int i = 0; i < N; i++) {
        float *x = logits + (size_t)i * Vp;
        double m = -INFINITY, s = 0;
        for (int j = 0; j < V; j++)
            if (x[j] > m) m = x[j];
        for (int j = 0; j < V; j++) s += exp((double)x[j] - m);
        double lse = m + log(s);
        losses[i] = (float)(lse - x[targets[i]]);
        if (!dloss) continue;
        for (int j = 0; j < V; j++) {
            double p = exp((double)x[j] - lse);
            x[j] = (float)(dloss[i] * (p - (j == targets[i] ? 1.0 : 0.0)));
        }
        for (int j = V; j < Vp; j++) x[j] = 0.0f;
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct ce_job {
    float *losses, *logits;
    const int32_t *targets;
    const float *dloss;
    int V, Vp;
} ce_job;

IG_CPU_CLONES
static void ce_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    ce_job *j = arg;
    int V = j->V;
    for (size_t i = b; i < e; i++) {
        float *x = j->logits + i * j->Vp;
        float m = ig_cpu_max(x, V);
        double sum = ig_cpu_sum_exp(x, V, m, NULL, 0.0f);

        int t = j->targets[i];
        double lse = m + log(sum);
        j->losses[i] = (float)(lse - x[t]);
        if (!j->dloss) continue;
        float dl = j->dloss[i], scale = (float)(dl / sum);
        ig_cpu_sum_exp(x, V, m, x, scale);
        x[t] -= dl;
        for (int c = V; c < j->Vp; c++) x[c] = 0.0f;
    }
}

void ig_cpu_crossentropy(ig_backend *be, float *losses, void *logits, const int32_t *targets,
                         const float *dloss, int N, int V, int Vp) {
    ce_job j = {losses, logits, targets, dloss, V, Vp};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 256, 1), ce_chunk, &j);
}
