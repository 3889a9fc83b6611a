/* cpu_crossentropy.c - softmax and cross-entropy over the vocabulary, forward and backward fused:
 * each row's max and sum of exponentials are taken, its loss written, and (when dloss is given)
 * its logits overwritten by their gradient, all while the row is in cache; no probability tensor
 * exists. Padded columns (V <= j < Vp) are never read, and get a zero gradient.
 *
 * Rows are independent: the fast kernel runs them on the pool, each reduced in 16 fixed lanes
 * (ig_cpu_max, ig_cpu_sum_exp: the sum in double, the exponentials by the vectorisable
 * ig_cpu_expf), so a row's bits do not depend on which thread took it or on the CPU.
 *
 * The vocabulary-parallel form (ce_max, ce_sums, ce_finish) does the same per row in three passes
 * over this rank's slice of the columns, with the group's all-reduces between them (train/).
 *
 * Shapes: logits [N, Vp], targets [N] in [0, V), losses [N], dloss NULL or [N]; parallel: logits
 * [N, Vl] of which Vvalid real, targets [N] in [0, Vvalid) or -1, rowmax [N], stats [N, 2].
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

void ig_cpu_ref_ce_max(ig_backend *be, float *rowmax, const void *logits_, int N, int Vvalid,
                       int Vl) {
    (void)be;
    const float *logits = logits_;
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vl;
        float m = -INFINITY;
        for (int j = 0; j < Vvalid; j++)
            if (x[j] > m) m = x[j];
        rowmax[i] = m;
    }
}

void ig_cpu_ref_ce_sums(ig_backend *be, float *stats, const void *logits_, const float *rowmax,
                        const int32_t *targets, int N, int Vvalid, int Vl) {
    (void)be;
    const float *logits = logits_;
    for (int i = 0; i < N; i++) {
        const float *x = logits + (size_t)i * Vl;
        double s = 0;
        for (int j = 0; j < Vvalid; j++) s += exp((double)x[j] - rowmax[i]);
        stats[2 * i] = (float)s;
        stats[2 * i + 1] = targets[i] >= 0 ? x[targets[i]] : 0.0f;
    }
}

void ig_cpu_ref_ce_finish(ig_backend *be, float *losses, void *logits_, const float *rowmax,
                          const float *stats, const int32_t *targets, const float *dloss, int N,
                          int Vvalid, int Vl) {
    (void)be;
    float *logits = logits_;
    for (int i = 0; i < N; i++) {
        double lse = rowmax[i] + log((double)stats[2 * i]);
        losses[i] = (float)(lse - stats[2 * i + 1]);
        if (!dloss) continue;
        float *x = logits + (size_t)i * Vl;
        for (int j = 0; j < Vvalid; j++) {
            double p = exp((double)x[j] - lse);
            x[j] = (float)(dloss[i] * (p - (j == targets[i] ? 1.0 : 0.0)));
        }
        for (int j = Vvalid; j < Vl; j++) x[j] = 0.0f;
    }
}

void ig_cpu_ref_add(ig_backend *be, void *out_, const void *a_, const void *b_, size_t n) {
    (void)be;
    float *out = out_;
    const float *a = a_, *b = b_;
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
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

/* the vocabulary-parallel passes: rows on the pool, each reduced as ce_chunk reduces it */
typedef struct pce_job {
    float *losses, *logits, *rowmax, *stats;
    const int32_t *targets;
    const float *dloss;
    const float *a, *b;
    float *out;
    int Vvalid, Vl;
} pce_job;

IG_CPU_CLONES
static void pce_max_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    pce_job *j = arg;
    for (size_t i = b; i < e; i++)
        j->rowmax[i] = j->Vvalid ? ig_cpu_max(j->logits + i * j->Vl, j->Vvalid) : -INFINITY;
}

IG_CPU_CLONES
static void pce_sums_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    pce_job *j = arg;
    for (size_t i = b; i < e; i++) {
        const float *x = j->logits + i * j->Vl;
        double s = j->Vvalid ? ig_cpu_sum_exp(x, j->Vvalid, j->rowmax[i], NULL, 0.0f) : 0.0;
        j->stats[2 * i] = (float)s;
        j->stats[2 * i + 1] = j->targets[i] >= 0 ? x[j->targets[i]] : 0.0f;
    }
}

IG_CPU_CLONES
static void pce_finish_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    pce_job *j = arg;
    for (size_t i = b; i < e; i++) {
        double sum = j->stats[2 * i];
        float m = j->rowmax[i];
        j->losses[i] = (float)(m + log(sum) - j->stats[2 * i + 1]);
        if (!j->dloss) continue;
        float *x = j->logits + i * j->Vl;
        float dl = j->dloss[i], scale = (float)(dl / sum);
        if (j->Vvalid) ig_cpu_sum_exp(x, j->Vvalid, m, x, scale);
        if (j->targets[i] >= 0) x[j->targets[i]] -= dl;
        for (int c = j->Vvalid; c < j->Vl; c++) x[c] = 0.0f;
    }
}

void ig_cpu_ce_max(ig_backend *be, float *rowmax, const void *logits, int N, int Vvalid, int Vl) {
    pce_job j = {.logits = (float *)logits, .rowmax = rowmax, .Vvalid = Vvalid, .Vl = Vl};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 256, 1), pce_max_chunk, &j);
}

void ig_cpu_ce_sums(ig_backend *be, float *stats, const void *logits, const float *rowmax,
                    const int32_t *targets, int N, int Vvalid, int Vl) {
    pce_job j = {.logits = (float *)logits,
                 .rowmax = (float *)rowmax,
                 .stats = stats,
                 .targets = targets,
                 .Vvalid = Vvalid,
                 .Vl = Vl};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 256, 1), pce_sums_chunk, &j);
}

void ig_cpu_ce_finish(ig_backend *be, float *losses, void *logits, const float *rowmax,
                      const float *stats, const int32_t *targets, const float *dloss, int N,
                      int Vvalid, int Vl) {
    pce_job j = {.losses = losses,
                 .logits = logits,
                 .rowmax = (float *)rowmax,
                 .stats = (float *)stats,
                 .targets = targets,
                 .dloss = dloss,
                 .Vvalid = Vvalid,
                 .Vl = Vl};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 256, 1), pce_finish_chunk, &j);
}

IG_CPU_CLONES
static void add_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    pce_job *j = arg;
    for (size_t i = b; i < e; i++) j->out[i] = j->a[i] + j->b[i];
}

void ig_cpu_add(ig_backend *be, void *out, const void *a, const void *b, size_t n) {
    pce_job j = {.out = out, .a = a, .b = b};
    ig_parallel_range(be->ctx, n, ig_cpu_chunk(n, 64, 4096), add_chunk, &j);
}
