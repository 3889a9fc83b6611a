/* cpu_crossentropy.c - softmax and cross-entropy over the vocabulary, forward and backward fused:
 * each row's max and sum of exponentials are taken, its loss written, and (when dloss is given)
 * its logits overwritten by their gradient, all while the row is in cache; no probability tensor
 * exists. Padded columns (V <= j < Vp) are never read, and get a zero gradient.
 *
 * Rows are independent: the fast kernel runs them on the pool, each summed in fixed lanes (max in
 * 16 float lanes, the sum of exponentials in 8 double lanes), so a row's bits do not depend on
 * which thread took it.
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

#define CE_MAX_LANES 16
#define CE_SUM_LANES 8

IG_CPU_CLONES
static void ce_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    ce_job *j = arg;
    int V = j->V;
    for (size_t i = b; i < e; i++) {
        float *x = j->logits + i * j->Vp;
        float mx[CE_MAX_LANES];
        for (int k = 0; k < CE_MAX_LANES; k++) mx[k] = -INFINITY;
        int c = 0;
        for (; c + CE_MAX_LANES <= V; c += CE_MAX_LANES)
            for (int k = 0; k < CE_MAX_LANES; k++) mx[k] = x[c + k] > mx[k] ? x[c + k] : mx[k];
        for (; c < V; c++) mx[0] = x[c] > mx[0] ? x[c] : mx[0];
        float m = mx[0];
        for (int k = 1; k < CE_MAX_LANES; k++) m = mx[k] > m ? mx[k] : m;

        double s[CE_SUM_LANES] = {0};
        for (c = 0; c + CE_SUM_LANES <= V; c += CE_SUM_LANES)
            for (int k = 0; k < CE_SUM_LANES; k++) s[k] += expf(x[c + k] - m);
        for (; c < V; c++) s[0] += expf(x[c] - m);
        double sum = 0;
        for (int k = 0; k < CE_SUM_LANES; k++) sum += s[k];

        int t = j->targets[i];
        double lse = m + log(sum);
        j->losses[i] = (float)(lse - x[t]);
        if (!j->dloss) continue;
        float dl = j->dloss[i], scale = (float)(dl / sum);
        for (c = 0; c < V; c++) x[c] = expf(x[c] - m) * scale;
        x[t] -= dl;
        for (c = V; c < j->Vp; c++) x[c] = 0.0f;
    }
}

void ig_cpu_crossentropy(ig_backend *be, float *losses, void *logits, const int32_t *targets,
                         const float *dloss, int N, int V, int Vp) {
    ce_job j = {losses, logits, targets, dloss, V, Vp};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 256, 1), ce_chunk, &j);
}
