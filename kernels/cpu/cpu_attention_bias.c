/* cpu_attention_bias.c - T5's attention pieces on the CPU: the relative position bias from the
 * bucket table, and self-attention with an additive bias [n_head, T, T] and a key padding mask
 * (klen), forward only (the encoder is used frozen).
 *
 * Position bias: bias[h, i, j] = table[bucket(j - i), h] with ig_t5_relative_position_bucket
 * (backend_host.c, transformers' function in its own arithmetic). The reference calls it for
 * every element; the fast kernel once per distance, then copies rows on the pool: the same bits.
 *
 * Attention, reference: for each (b, h, t), three passes over the visible keys (max, sum of
 * exponentials, weighted values) in double, score = scale q.k + bias. Fast: the tiling of
 * cpu_attention.c's forward (a work item is (b, h, block of 64 queries); it walks the key blocks
 * below klen[b] with an online softmax, nothing of size T x T stored), the bias added to each tile
 * of scores before its maximum is taken. The query rows are scaled first (q * scale, then the dot
 * products), as cpu_attention.c does: with T5's scale 1 that is q itself. A query's numbers never
 * depend on its neighbours or the thread count.
 *
 * Shapes (NH query heads, NKV key/value heads, hs the head size, R = (NH + 2 NKV) hs): qkv [B, T,
 * R]; out [B, T, NH hs]; lse [B, NH, T]; bias [NH, T, T]; klen [B]; table [num_buckets, NH].
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"

#define AB_BR 64          /* queries per block */
#define AB_BC IG_CPU_TILE /* keys per block: 64 */

/* ---- position bias --------------------------------------------------------------------------- */

void ig_cpu_ref_t5_position_bias(ig_backend *be, void *bias_, const void *table_, int T, int NH,
                                 int num_buckets, int max_distance, int bidirectional) {
    (void)be;
    float *bias = bias_;
    const float *table = table_;
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) {
                int k =
                    ig_t5_relative_position_bucket(j - i, bidirectional, num_buckets, max_distance);
                bias[((size_t)h * T + i) * T + j] = table[(size_t)k * NH + h];
            }
}

typedef struct pb_job {
    float *bias;
    const float *table;
    const int *bucket; /* [2T - 1]: the bucket of distance j - i at (T - 1) + j - i */
    int T, NH;
} pb_job;

static void pb_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    pb_job *j = arg;
    for (size_t r = b; r < e; r++) { /* row r = h T + i */
        int h = (int)(r / (size_t)j->T), i = (int)(r % (size_t)j->T);
        float *row = j->bias + r * j->T;
        const int *bk = j->bucket + (j->T - 1) - i;
        for (int c = 0; c < j->T; c++) row[c] = j->table[(size_t)bk[c] * j->NH + h];
    }
}

void ig_cpu_t5_position_bias(ig_backend *be, void *bias, const void *table, int T, int NH,
                             int num_buckets, int max_distance, int bidirectional) {
    int *bucket = ig_cpu_scratch(be, (2 * (size_t)T - 1) * sizeof(int), "t5_position_bias");
    if (!bucket) return;
    for (int d = -(T - 1); d <= T - 1; d++)
        bucket[d + T - 1] =
            ig_t5_relative_position_bucket(d, bidirectional, num_buckets, max_distance);
    pb_job j = {.bias = bias, .table = table, .bucket = bucket, .T = T, .NH = NH};
    size_t rows = (size_t)NH * T;
    ig_parallel_range(be->ctx, rows, ig_cpu_chunk(rows, 64, 1), pb_chunk, &j);
    ig_cpu_scratch_free(be, bucket);
}

/* ---- attention: shared ----------------------------------------------------------------------- */

/* 1 when every klen is in 1 .. T (or klen is NULL); else raises and returns 0 */
static int klen_ok(ig_backend *be, const int32_t *klen, int B, int T, const char *what) {
    for (int b = 0; klen && b < B; b++)
        if (klen[b] < 1 || klen[b] > T) {
            ig_backend_raise(be, IG_ERR_INVALID_ARG,
                             "%s: klen[%d] = %d: a sequence has between 1 and T = %d real keys",
                             what, b, (int)klen[b], T);
            return 0;
        }
    return 1;
}

/* ---- attention: reference -------------------------------------------------------------------- */

void ig_cpu_ref_attention_bias_forward(ig_backend *be, void *out_, float *lse, const void *qkv_,
                                       const void *bias_, const int32_t *klen,
                                       const ig_attention_shape *sh) {
    if (!klen_ok(be, klen, sh->B, sh->T, "attention_bias_forward")) return;
    float *out = out_;
    const float *qkv = qkv_, *bias = bias_;
    int B = sh->B, T = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    size_t C = (size_t)NH * hs, R = (size_t)(NH + 2 * NKV) * hs;
    double scale = sh->scale != 0 ? (double)sh->scale : 1.0 / sqrt((double)hs);
    double *sc = malloc((size_t)T * sizeof *sc);
    if (!sc) {
        ig_backend_raise(be, IG_ERR_NOMEM, "attention_bias_forward (reference): out of memory");
        return;
    }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int kvh = h / (NH / NKV), kl = klen ? klen[b] : T;
            const float *base = qkv + (size_t)b * T * R;
            for (int t = 0; t < T; t++) {
                const float *q = base + (size_t)t * R + (size_t)h * hs;
                int end = sh->causal && t + 1 < kl ? t + 1 : kl;
                double m = -INFINITY, l = 0;
                for (int s = 0; s < end; s++) {
                    const float *k = base + (size_t)s * R + C + (size_t)kvh * hs;
                    double d = 0;
                    for (int c = 0; c < hs; c++) d += (double)q[c] * k[c];
                    sc[s] = d * scale + (bias ? bias[((size_t)h * T + t) * T + s] : 0.0);
                    m = sc[s] > m ? sc[s] : m;
                }
                for (int s = 0; s < end; s++) l += exp(sc[s] - m);
                float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int c = 0; c < hs; c++) {
                    double acc = 0;
                    for (int s = 0; s < end; s++)
                        acc += exp(sc[s] - m) / l *
                               base[(size_t)s * R + C + (size_t)(NKV + kvh) * hs + c];
                    o[c] = (float)acc;
                }
                if (lse) lse[((size_t)b * NH + h) * T + t] = (float)(m + log(l));
            }
        }
    free(sc);
}

/* ---- attention: fast ------------------------------------------------------------------------- */

typedef struct ab_job {
    const float *qkv, *bias;
    const int32_t *klen;
    float *out, *lse;
    int B, T, NH, NKV, g, hs, causal, nqb;
    size_t R, C;
    float scale;
    float *scratch;
    size_t scratch_floats; /* per worker */
} ab_job;

IG_CPU_CLONES
static void ab_item(void *arg, size_t item, int worker) {
    ab_job *j = arg;
    int hs = j->hs, T = j->T;
    int qb = (int)(item % j->nqb), h = (int)(item / j->nqb % j->NH),
        b = (int)(item / j->nqb / j->NH);
    int i0 = qb * AB_BR, nr = T - i0 < AB_BR ? T - i0 : AB_BR, kvh = h / j->g;
    int kl = j->klen ? j->klen[b] : T;
    int last = j->causal && i0 + nr - 1 < kl - 1 ? i0 + nr - 1 : kl - 1; /* last key seen */
    float *Qs = j->scratch + (size_t)worker * j->scratch_floats;
    float *kT = Qs + AB_BR * hs, *V = kT + hs * AB_BC, *O = V + AB_BC * hs;
    float *S = O + AB_BR * hs, *m = S + AB_BR * AB_BC, *l = m + AB_BR;
    const float *base = j->qkv + (size_t)b * T * j->R;
    for (int r = 0; r < nr; r++) {
        const float *q = base + (size_t)(i0 + r) * j->R + (size_t)h * hs;
        for (int d = 0; d < hs; d++) Qs[r * hs + d] = q[d] * j->scale;
        m[r] = -INFINITY, l[r] = 0;
    }
    memset(O, 0, (size_t)nr * hs * sizeof *O);
    for (int j0 = 0; j0 <= last; j0 += AB_BC) {
        int nc = last + 1 - j0 < AB_BC ? last + 1 - j0 : AB_BC;
        for (int c = 0; c < nc; c++) {
            const float *k = base + (size_t)(j0 + c) * j->R + j->C + (size_t)kvh * hs;
            const float *v = k + (size_t)j->NKV * hs;
            for (int d = 0; d < hs; d++) kT[d * AB_BC + c] = k[d];
            memcpy(V + c * hs, v, (size_t)hs * sizeof *V);
        }
        if (nc < AB_BC)
            for (int d = 0; d < hs; d++) memset(kT + d * AB_BC + nc, 0, (size_t)(AB_BC - nc) * 4);
        ig_cpu_tile_dot(S, Qs, kT, nr, nc, hs);
        for (int r = 0; r < nr; r++) {
            float *s = S + r * AB_BC;
            if (j->bias) {
                const float *bb = j->bias + ((size_t)h * T + i0 + r) * T + j0;
                for (int c = 0; c < nc; c++) s[c] += bb[c];
            }
            if (j->causal)
                for (int c = i0 + r - j0 + 1 > 0 ? i0 + r - j0 + 1 : 0; c < nc; c++)
                    s[c] = -INFINITY; /* future */
            float bm = ig_cpu_max(s, nc);
            if (!(bm > -INFINITY)) { /* nothing visible in this block */
                for (int c = 0; c < nc; c++) s[c] = 0;
                continue;
            }
            float mnew = bm > m[r] ? bm : m[r];
            float alpha = ig_cpu_expf(m[r] - mnew);
            for (int c = 0; c < nc; c++) s[c] = ig_cpu_expf(s[c] - mnew); /* masked: 0 */
            l[r] = l[r] * alpha + ig_cpu_sum(s, nc);
            m[r] = mnew;
            float *o = O + r * hs;
            for (int d = 0; d < hs; d++) o[d] *= alpha;
        }
        ig_cpu_acc_rows_n(O, S, AB_BC, 1, V, hs, nc, nr); /* O += P V */
    }
    for (int r = 0; r < nr; r++) {
        float *dst = j->out + ((size_t)b * T + i0 + r) * j->C + (size_t)h * hs;
        float inv = 1.0f / l[r];
        for (int d = 0; d < hs; d++) dst[d] = O[r * hs + d] * inv;
        if (j->lse) j->lse[((size_t)b * j->NH + h) * T + i0 + r] = m[r] + logf(l[r]);
    }
}

static void ab_chunk(void *arg, size_t b, size_t e, int worker) {
    for (size_t i = b; i < e; i++) ab_item(arg, i, worker);
}

void ig_cpu_attention_bias_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                                   const void *bias, const int32_t *klen,
                                   const ig_attention_shape *sh) {
    const char *what = "attention_bias_forward";
    if (!klen_ok(be, klen, sh->B, sh->T, what)) return;
    int NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    ab_job j = {.qkv = qkv,
                .bias = bias,
                .klen = klen,
                .out = out,
                .lse = lse,
                .B = sh->B,
                .T = sh->T,
                .NH = NH,
                .NKV = NKV,
                .g = NH / NKV,
                .hs = hs,
                .causal = sh->causal,
                .nqb = (sh->T + AB_BR - 1) / AB_BR,
                .R = (size_t)(NH + 2 * NKV) * hs,
                .C = (size_t)NH * hs,
                .scale = sh->scale != 0 ? sh->scale : (float)(1.0 / sqrt((double)hs))};
    j.scratch_floats = (size_t)(3 * AB_BR + 2 * AB_BC) * hs + AB_BR * AB_BC + 2 * AB_BR;
    j.scratch = ig_cpu_scratch(be, (size_t)ig_ctx_threads(be->ctx) * j.scratch_floats * 4, what);
    if (!j.scratch) return;
    ig_parallel_range(be->ctx, (size_t)j.B * NH * j.nqb, 1, ab_chunk, &j);
    ig_cpu_scratch_free(be, j.scratch);
}
