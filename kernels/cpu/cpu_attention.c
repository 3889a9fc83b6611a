/* cpu_attention.c - self-attention with the scale (1/sqrt(hs), or the shape's scale when it is
 * not 0), mask and softmax fused, forward and backward:
 * causal (GPT-2, Llama) or not (DiT), multi-head or grouped-query (n_kv_head key/value heads, each
 * serving g = n_head / n_kv_head consecutive query heads), with optional document masking; and
 * the KV-cache form for sampling.
 *
 * Reference: for each (b, h, t), three passes over the keys (max, sum of exponentials, weighted
 * values) in double, recomputing the dot products each time; the backward recomputes the
 * probabilities from lse the same way. No [T, T] matrix either, and no scratch.
 *
 * Fast: the flash-attention tiling. A work item is (b, h, block of ATT_BR queries); it walks the
 * key blocks of ATT_BC keys that its queries can see, keeping a running max, sum and output per
 * query (the online softmax), and writes out and lse = max + log(sum). Nothing of size T x T is
 * ever stored. The backward is split in two passes so that every gradient element has exactly
 * one writer, without atomics: pass 1 walks each key block's queries and produces dK and dV,
 * pass 2 walks each query block's keys and produces dQ (both recompute P = exp(S - lse)). With
 * grouped-query attention a pass-1 item is a key block of one key/value head, and it walks the
 * query blocks of its g query heads one head after the other, in head order, summing their dK and
 * dV in the same accumulators: the sum over the group has one order, whatever the threads. Tiles
 * are kept transposed where that makes the inner loops run along contiguous memory: every dot
 * product and weighted sum is vectorised across independent outputs and adds its terms in a fixed
 * order (for head size 64 the 64 sums of a row stay in registers, two rows per pass over a tile),
 * and row maxima and sums use fixed 16 lanes. A query's numbers never depend on its neighbours,
 * on the thread count, or on the CPU's vector width.
 *
 * Masks: key s is visible to query t when (not causal, or s <= t) and, with doc, doc[b, s] ==
 * doc[b, t]. A key block whose documents cannot meet the query block's (disjoint id ranges) is
 * skipped; without causality every query walks every key block.
 *
 * Shapes (NH query heads, NKV key/value heads, hs the head size, R = (NH + 2 NKV) hs): qkv, dqkv
 * [B, T, R] (the NH query heads, then the NKV key heads, then the NKV value heads, each hs
 * contiguous); out, dout [B, T, NH hs]; lse [B, NH, T]; doc [B, T]. Cached: q, out [B, Tq, NH hs];
 * k, v [B, Tmax, NKV hs]. Query head h reads key/value head h / g.
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

#define ATT_BR 64          /* queries per block */
#define ATT_BC IG_CPU_TILE /* keys per block: 64 */

/* ---- reference ------------------------------------------------------------------------------- */

/* One head's view of q, k, v rows: row i of x is x + i * stride. */
typedef struct head_view {
    const float *q, *k, *v;
    size_t q_stride, kv_stride;
    const int32_t *doc; /* NULL, or this sequence's [T] ids */
    int hs;
    int causal; /* else every key of the sequence is a candidate */
    int nk;     /* keys in the sequence */
    double scale;
} head_view;

static int visible(const head_view *hv, int tq, int s) {
    return (!hv->causal || s <= tq) && (!hv->doc || hv->doc[s] == hv->doc[tq]);
}

/* the keys query tq may see are below this */
static int key_end(const head_view *hv, int tq) {
    return hv->causal ? tq + 1 : hv->nk;
}

static double ref_score(const head_view *hv, int i, int s) {
    const float *q = hv->q + (size_t)i * hv->q_stride, *k = hv->k + (size_t)s * hv->kv_stride;
    double d = 0;
    for (int c = 0; c < hv->hs; c++) d += (double)q[c] * k[c];
    return d * hv->scale;
}

/* out row i (query at position tq) and its lse */
static void ref_attend(const head_view *hv, int i, int tq, float *out, float *lse) {
    double m = -INFINITY, l = 0;
    int end = key_end(hv, tq);
    for (int s = 0; s < end; s++)
        if (visible(hv, tq, s)) {
            double x = ref_score(hv, i, s);
            if (x > m) m = x;
        }
    for (int s = 0; s < end; s++)
        if (visible(hv, tq, s)) l += exp(ref_score(hv, i, s) - m);
    for (int c = 0; c < hv->hs; c++) {
        double o = 0;
        for (int s = 0; s < end; s++)
            if (visible(hv, tq, s))
                o += exp(ref_score(hv, i, s) - m) / l * hv->v[(size_t)s * hv->kv_stride + c];
        out[c] = (float)o;
    }
    if (lse) *lse = (float)(m + log(l));
}

/* The view of query head h of sequence b in packed qkv rows (training: Tq == Tk == T). */
static head_view qkv_view(const float *qkv, const int32_t *doc, const ig_attention_shape *sh, int b,
                          int h) {
    int NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size, kvh = h / (NH / NKV);
    size_t R = (size_t)(NH + 2 * NKV) * hs;
    const float *base = qkv + (size_t)b * sh->T * R;
    head_view hv = {base + (size_t)h * hs,
                    base + (size_t)(NH + kvh) * hs,
                    base + (size_t)(NH + NKV + kvh) * hs,
                    R,
                    R,
                    doc ? doc + (size_t)b * sh->T : NULL,
                    hs,
                    sh->causal,
                    sh->T,
                    sh->scale != 0 ? (double)sh->scale : 1.0 / sqrt((double)hs)};
    return hv;
}

void ig_cpu_ref_attention_forward(ig_backend *be, void *out_, float *lse, const void *qkv,
                                  const int32_t *doc, const ig_attention_shape *sh) {
    (void)be;
    float *out = out_;
    int B = sh->B, T = sh->T, NH = sh->n_head, hs = sh->head_size;
    size_t C = (size_t)NH * hs;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            head_view hv = qkv_view(qkv, doc, sh, b, h);
            for (int t = 0; t < T; t++)
                ref_attend(&hv, t, t, out + ((size_t)b * T + t) * C + (size_t)h * hs,
                           lse + ((size_t)b * NH + h) * T + t);
        }
}

void ig_cpu_ref_attention_cached(ig_backend *be, void *out_, const void *q_, const void *k_,
                                 const void *v_, int pos0, int Tmax, const ig_attention_shape *sh) {
    (void)be;
    float *out = out_;
    const float *q = q_, *k = k_, *v = v_;
    int B = sh->B, Tq = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    size_t C = (size_t)NH * hs, Ckv = (size_t)NKV * hs;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t kv = (size_t)b * Tmax * Ckv + (size_t)(h / (NH / NKV)) * hs;
            head_view hv = {q + (size_t)b * Tq * C + (size_t)h * hs,
                            k + kv,
                            v + kv,
                            C,
                            Ckv,
                            NULL,
                            hs,
                            1,
                            Tmax,
                            sh->scale != 0 ? (double)sh->scale : 1.0 / sqrt((double)hs)};
            for (int i = 0; i < Tq; i++)
                ref_attend(&hv, i, pos0 + i, out + ((size_t)b * Tq + i) * C + (size_t)h * hs, NULL);
        }
}

/* dq = scale sum_s dS[t,s] k_s, dk_s = scale sum_t dS[t,s] q_t, dv_s = sum_t P[t,s] dout_t, with
 * P = exp(score - lse) and dS = P (dout_t . v_s - D_t), D_t = dout_t . out_t */
void ig_cpu_ref_attention_backward(ig_backend *be, void *dqkv_, const void *dout_, const void *qkv,
                                   const void *out_, const float *lse, const int32_t *doc,
                                   const ig_attention_shape *sh) {
    (void)be;
    float *dqkv = dqkv_;
    const float *dout = dout_, *out = out_;
    int B = sh->B, T = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    size_t C = (size_t)NH * hs, R = (size_t)(NH + 2 * NKV) * hs;
    memset(dqkv, 0, (size_t)B * T * R * sizeof *dqkv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) { /* a key/value head's gradient: its query heads in order */
            head_view hv = qkv_view(qkv, doc, sh, b, h);
            int kvh = h / (NH / NKV);
            float *dq = dqkv + (size_t)b * T * R + (size_t)h * hs;
            float *dk = dqkv + (size_t)b * T * R + (size_t)(NH + kvh) * hs;
            float *dv = dqkv + (size_t)b * T * R + (size_t)(NH + NKV + kvh) * hs;
            for (int t = 0; t < T; t++) {
                const float *go = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                const float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
                double D = 0;
                for (int c = 0; c < hs; c++) D += (double)go[c] * o[c];
                double l = lse[((size_t)b * NH + h) * T + t];
                const float *qt = hv.q + (size_t)t * hv.q_stride;
                int end = key_end(&hv, t);
                for (int s = 0; s < end; s++) {
                    if (!visible(&hv, t, s)) continue;
                    double p = exp(ref_score(&hv, t, s) - l), dp = 0;
                    const float *ks = hv.k + (size_t)s * hv.kv_stride;
                    const float *vs = hv.v + (size_t)s * hv.kv_stride;
                    for (int c = 0; c < hs; c++) dp += (double)go[c] * vs[c];
                    double ds = p * (dp - D) * hv.scale;
                    float *dqt = dq + (size_t)t * R, *dks = dk + (size_t)s * R,
                          *dvs = dv + (size_t)s * R;
                    for (int c = 0; c < hs; c++) {
                        dqt[c] = (float)(dqt[c] + ds * ks[c]);
                        dks[c] = (float)(dks[c] + ds * qt[c]);
                        dvs[c] = (float)(dvs[c] + p * go[c]);
                    }
                }
            }
        }
}

/* ---- fast: tiles ----------------------------------------------------------------------------- */

typedef struct att_job {
    /* inputs: row i of q is q + b * q_bstride + i * q_stride + h * hs (likewise out); row s of k
     * is k + b * kv_bstride + s * kv_stride + (h / g) * hs (likewise v) */
    const float *q, *k, *v, *dout, *o;
    size_t q_bstride, kv_bstride, q_stride, kv_stride, o_bstride, o_stride;
    float *out, *lse, *dq, *dk, *dv;     /* dq/dk/dv rows use q_stride/kv_stride */
    const int32_t *doc;                  /* NULL or [B, T] (training only: Tq == Tmax == T) */
    float *D;                            /* backward: [B, NH, T] dout . out */
    int B, NH, NKV, g, hs, Tq, Tk, pos0; /* query i is at position pos0 + i; Tk keys in a row */
    int causal;                          /* else every query sees all Tk keys */
    float scale;
    int nqb, nkb; /* query and key blocks per (b, h) */
    float *scratch;
    size_t scratch_floats; /* per worker */
} att_job;

/* Document id range of positions [p0, p1) of sequence b; without doc, everything is 0. */
static void doc_range(const att_job *j, int b, int p0, int p1, int32_t *lo, int32_t *hi) {
    *lo = 0, *hi = 0;
    if (!j->doc) return;
    const int32_t *d = j->doc + (size_t)b * j->Tk;
    *lo = *hi = d[p0];
    for (int p = p0 + 1; p < p1; p++) {
        if (d[p] < *lo) *lo = d[p];
        if (d[p] > *hi) *hi = d[p];
    }
}

/* Qs[r][d] = scale * q[i0 + r][d] for nr rows (and dO rows when dout is given) */
IG_CPU_INLINE void load_q(const att_job *j, int b, int h, int i0, int nr, float *Qs, float *dO) {
    int hs = j->hs;
    for (int r = 0; r < nr; r++) {
        const float *q = j->q + b * j->q_bstride + (size_t)(i0 + r) * j->q_stride + (size_t)h * hs;
        for (int d = 0; d < hs; d++) Qs[r * hs + d] = q[d] * j->scale;
        if (dO) {
            const float *g =
                j->dout + b * j->o_bstride + (size_t)(i0 + r) * j->o_stride + (size_t)h * hs;
            memcpy(dO + r * hs, g, (size_t)hs * sizeof *g);
        }
    }
}

/* x[c][d] rows (when x is not NULL) and xT[d][c] (transposed, ATT_BC wide, zero past nc; when
 * xT is not NULL) of nc keys from key j0, of k or v of key/value head kvh */
IG_CPU_INLINE void load_kv(const att_job *j, const float *src, int b, int kvh, int j0, int nc,
                           float *x, float *xT) {
    int hs = j->hs;
    for (int c = 0; c < nc; c++) {
        const float *s =
            src + b * j->kv_bstride + (size_t)(j0 + c) * j->kv_stride + (size_t)kvh * hs;
        if (x) memcpy(x + c * hs, s, (size_t)hs * sizeof *s);
        if (xT)
            for (int d = 0; d < hs; d++) xT[d * ATT_BC + c] = s[d];
    }
    if (xT && nc < ATT_BC)
        for (int d = 0; d < hs; d++) memset(xT + d * ATT_BC + nc, 0, (size_t)(ATT_BC - nc) * 4);
}

/* masked entries of S become -INFINITY: query r at position pq0 + r, key c at position j0 + c */
IG_CPU_INLINE void tile_mask(const att_job *j, int b, float *S, int pq0, int nr, int j0, int nc) {
    const int32_t *doc = j->doc ? j->doc + (size_t)b * j->Tk : NULL;
    /* no documents, and every key before every query (or no causality): nothing masked */
    if (!doc && (!j->causal || j0 + nc - 1 <= pq0)) return;
    for (int r = 0; r < nr; r++) {
        int tq = pq0 + r;
        float *s = S + r * ATT_BC;
        if (j->causal)
            for (int c = tq - j0 + 1 > 0 ? tq - j0 + 1 : 0; c < nc; c++)
                s[c] = -INFINITY; /* future */
        if (doc)
            for (int c = 0; c < nc; c++) s[c] = doc[j0 + c] != doc[tq] ? -INFINITY : s[c];
    }
}

/* ---- fast forward ---------------------------------------------------------------------------- */

IG_CPU_CLONES
static void att_fwd_item(void *arg, size_t item, int worker) {
    att_job *j = arg;
    int hs = j->hs;
    int qb = (int)(item % j->nqb), h = (int)(item / j->nqb % j->NH),
        b = (int)(item / j->nqb / j->NH);
    int i0 = qb * ATT_BR, nr = j->Tq - i0 < ATT_BR ? j->Tq - i0 : ATT_BR, kvh = h / j->g;
    int pq0 = j->pos0 + i0;
    int last = j->causal ? pq0 + nr - 1 : j->Tk - 1; /* the last key any of these queries sees */
    float *Qs = j->scratch + (size_t)worker * j->scratch_floats;
    float *kT = Qs + ATT_BR * hs, *V = kT + hs * ATT_BC, *O = V + ATT_BC * hs;
    float *S = O + ATT_BR * hs, *m = S + ATT_BR * ATT_BC, *l = m + ATT_BR;
    load_q(j, b, h, i0, nr, Qs, NULL);
    for (int r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0;
    memset(O, 0, (size_t)nr * hs * sizeof *O);
    int32_t qlo, qhi;
    doc_range(j, b, pq0, pq0 + nr, &qlo, &qhi);
    for (int j0 = 0; j0 <= last; j0 += ATT_BC) {
        int nc = last + 1 - j0 < ATT_BC ? last + 1 - j0 : ATT_BC;
        int32_t klo, khi;
        doc_range(j, b, j0, j0 + nc, &klo, &khi);
        if (khi < qlo || klo > qhi) continue; /* no document in common */
        load_kv(j, j->k, b, kvh, j0, nc, NULL, kT);
        load_kv(j, j->v, b, kvh, j0, nc, V, NULL);
        ig_cpu_tile_dot(S, Qs, kT, nr, nc, hs);
        tile_mask(j, b, S, pq0, nr, j0, nc);
        for (int r = 0; r < nr; r++) {
            float *s = S + r * ATT_BC, bm = ig_cpu_max(s, nc);
            if (!(bm > -INFINITY)) { /* nothing visible in this block */
                for (int c = 0; c < nc; c++) s[c] = 0;
                continue;
            }
            float mnew = bm > m[r] ? bm : m[r];
            float alpha = ig_cpu_expf(m[r] - mnew);
            for (int c = 0; c < nc; c++) s[c] = ig_cpu_expf(s[c] - mnew); /* masked: 0 */
            float sum = ig_cpu_sum(s, nc);
            l[r] = l[r] * alpha + sum;
            m[r] = mnew;
            float *o = O + r * hs;
            for (int d = 0; d < hs; d++) o[d] *= alpha;
        }
        ig_cpu_acc_rows_n(O, S, ATT_BC, 1, V, hs, nc, nr); /* O += P V */
    }
    for (int r = 0; r < nr; r++) {
        float *dst = j->out + b * j->o_bstride + (size_t)(i0 + r) * j->o_stride + (size_t)h * hs;
        float inv = 1.0f / l[r];
        for (int d = 0; d < hs; d++) dst[d] = O[r * hs + d] * inv;
        if (j->lse) j->lse[((size_t)b * j->NH + h) * j->Tq + i0 + r] = m[r] + logf(l[r]);
    }
}

static void att_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    for (size_t i = b; i < e; i++) att_fwd_item(arg, i, worker);
}

static size_t fwd_scratch(int hs) {
    return (size_t)(3 * ATT_BR + 2 * ATT_BC) * hs + ATT_BR * ATT_BC + 2 * ATT_BR;
}

static void att_forward_run(ig_backend *be, att_job *j, const char *what) {
    j->nqb = (j->Tq + ATT_BR - 1) / ATT_BR;
    j->scale = j->scale != 0 ? j->scale : (float)(1.0 / sqrt((double)j->hs)); /* 0: default */
    j->scratch_floats = fwd_scratch(j->hs);
    size_t items = (size_t)j->B * j->NH * j->nqb;
    if (items == 0) return;
    j->scratch = ig_cpu_scratch(be, (size_t)ig_ctx_threads(be->ctx) * j->scratch_floats * 4, what);
    if (!j->scratch) return;
    ig_parallel_range(be->ctx, items, 1, att_fwd_chunk, j);
    ig_cpu_scratch_free(be, j->scratch);
}

void ig_cpu_attention_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                              const int32_t *doc, const ig_attention_shape *sh) {
    const float *base = qkv;
    int T = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    size_t C = (size_t)NH * hs, R = (size_t)(NH + 2 * NKV) * hs;
    att_job j = {.q = base,
                 .k = base + C,
                 .v = base + C + (size_t)NKV * hs,
                 .q_bstride = (size_t)T * R,
                 .kv_bstride = (size_t)T * R,
                 .q_stride = R,
                 .kv_stride = R,
                 .o_bstride = (size_t)T * C,
                 .o_stride = C,
                 .out = out,
                 .lse = lse,
                 .doc = doc,
                 .B = sh->B,
                 .NH = NH,
                 .NKV = NKV,
                 .g = NH / NKV,
                 .hs = hs,
                 .Tq = T,
                 .Tk = T,
                 .pos0 = 0,
                 .causal = sh->causal,
                 .scale = sh->scale};
    att_forward_run(be, &j, "attention_forward");
}

void ig_cpu_attention_cached(ig_backend *be, void *out, const void *q, const void *k, const void *v,
                             int pos0, int Tmax, const ig_attention_shape *sh) {
    int Tq = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    size_t C = (size_t)NH * hs, Ckv = (size_t)NKV * hs;
    att_job j = {.q = q,
                 .k = k,
                 .v = v,
                 .q_bstride = (size_t)Tq * C,
                 .kv_bstride = (size_t)Tmax * Ckv,
                 .q_stride = C,
                 .kv_stride = Ckv,
                 .o_bstride = (size_t)Tq * C,
                 .o_stride = C,
                 .out = out,
                 .lse = NULL,
                 .doc = NULL,
                 .B = sh->B,
                 .NH = NH,
                 .NKV = NKV,
                 .g = NH / NKV,
                 .hs = hs,
                 .Tq = Tq,
                 .Tk = Tmax,
                 .pos0 = pos0,
                 .causal = 1,
                 .scale = sh->scale};
    att_forward_run(be, &j, "attention_cached");
}

/* ---- fast backward --------------------------------------------------------------------------- */

/* D[b, h, t] = dout . out for each query row */
static void att_D_chunk(void *arg, size_t b0, size_t e, int worker) {
    (void)worker;
    att_job *j = arg;
    int hs = j->hs;
    for (size_t i = b0; i < e; i++) {
        int t = (int)(i % j->Tq), h = (int)(i / j->Tq % j->NH), b = (int)(i / j->Tq / j->NH);
        size_t off = b * j->o_bstride + (size_t)t * j->o_stride + (size_t)h * hs;
        const float *g = j->dout + off, *o = j->o + off;
        double s = 0;
        for (int d = 0; d < hs; d++) s += (double)g[d] * o[d];
        j->D[i] = (float)s;
    }
}

/* P = exp(S - lse) (masked: 0) and dS = P (dP - D) for a tile; S holds the scores, dP the
 * products dO . V; P replaces S, dS replaces dP */
IG_CPU_INLINE void tile_p_ds(const att_job *j, int b, int h, float *S, float *dP, int i0, int nr,
                             int j0, int nc) {
    const float *lse = j->lse + ((size_t)b * j->NH + h) * j->Tq + i0;
    const float *D = j->D + ((size_t)b * j->NH + h) * j->Tq + i0;
    for (int r = 0; r < nr; r++) {
        float *s = S + r * ATT_BC, *dp = dP + r * ATT_BC;
        for (int c = 0; c < nc; c++) {
            float p = ig_cpu_expf(s[c] - lse[r]); /* masked (-inf): 0 */
            s[c] = p;
            dp[c] = p * (dp[c] - D[r]);
        }
    }
}

/* pass 1: dK and dV of one key block of key/value head kvh, over the query blocks that see it,
 * of its g query heads in head order */
IG_CPU_CLONES
static void att_bwd_kv_item(void *arg, size_t item, int worker) {
    att_job *j = arg;
    int hs = j->hs;
    int kb = (int)(item % j->nkb), kvh = (int)(item / j->nkb % j->NKV),
        b = (int)(item / j->nkb / j->NKV);
    int j0 = kb * ATT_BC, nc = j->Tk - j0 < ATT_BC ? j->Tk - j0 : ATT_BC;
    float *kT = j->scratch + (size_t)worker * j->scratch_floats;
    float *vT = kT + hs * ATT_BC, *dK = vT + hs * ATT_BC, *dV = dK + ATT_BC * hs;
    float *Qs = dV + ATT_BC * hs, *dO = Qs + ATT_BR * hs, *S = dO + ATT_BR * hs;
    float *dP = S + ATT_BR * ATT_BC;
    load_kv(j, j->k, b, kvh, j0, nc, NULL, kT);
    load_kv(j, j->v, b, kvh, j0, nc, NULL, vT);
    memset(dK, 0, (size_t)ATT_BC * hs * sizeof *dK);
    memset(dV, 0, (size_t)ATT_BC * hs * sizeof *dV);
    int32_t klo, khi;
    doc_range(j, b, j0, j0 + nc, &klo, &khi);
    int first = j->causal ? j0 / ATT_BR * ATT_BR : 0; /* the first query block that sees a key */
    for (int h = kvh * j->g; h < (kvh + 1) * j->g; h++)
        for (int i0 = first; i0 < j->Tq; i0 += ATT_BR) {
            int nr = j->Tq - i0 < ATT_BR ? j->Tq - i0 : ATT_BR;
            int32_t qlo, qhi;
            doc_range(j, b, i0, i0 + nr, &qlo, &qhi);
            if (khi < qlo || klo > qhi) continue;
            load_q(j, b, h, i0, nr, Qs, dO);
            ig_cpu_tile_dot(S, Qs, kT, nr, nc, hs);
            tile_mask(j, b, S, i0, nr, j0, nc);
            ig_cpu_tile_dot(dP, dO, vT, nr, nc, hs);
            tile_p_ds(j, b, h, S, dP, i0, nr, j0, nc);
            ig_cpu_acc_rows_n(dV, S, 1, ATT_BC, dO, hs, nr, nc);  /* dV[c] += P[:, c]^T dO */
            ig_cpu_acc_rows_n(dK, dP, 1, ATT_BC, Qs, hs, nr, nc); /* dK[c] += dS[:, c]^T Qs */
        }
    for (int c = 0; c < nc; c++) {
        size_t off = b * j->kv_bstride + (size_t)(j0 + c) * j->kv_stride + (size_t)kvh * hs;
        memcpy(j->dk + off, dK + c * hs, (size_t)hs * sizeof *dK);
        memcpy(j->dv + off, dV + c * hs, (size_t)hs * sizeof *dV);
    }
}

/* pass 2: dQ of one query block, over the key blocks it sees */
IG_CPU_CLONES
static void att_bwd_q_item(void *arg, size_t item, int worker) {
    att_job *j = arg;
    int hs = j->hs;
    int qb = (int)(item % j->nqb), h = (int)(item / j->nqb % j->NH),
        b = (int)(item / j->nqb / j->NH);
    int i0 = qb * ATT_BR, nr = j->Tq - i0 < ATT_BR ? j->Tq - i0 : ATT_BR, kvh = h / j->g;
    int last = j->causal ? i0 + nr - 1 : j->Tk - 1;
    float *kT = j->scratch + (size_t)worker * j->scratch_floats;
    float *vT = kT + hs * ATT_BC, *K = vT + hs * ATT_BC, *dQ = K + ATT_BC * hs;
    float *Qs = dQ + ATT_BR * hs, *dO = Qs + ATT_BR * hs, *S = dO + ATT_BR * hs;
    float *dP = S + ATT_BR * ATT_BC;
    load_q(j, b, h, i0, nr, Qs, dO);
    memset(dQ, 0, (size_t)ATT_BR * hs * sizeof *dQ);
    int32_t qlo, qhi;
    doc_range(j, b, i0, i0 + nr, &qlo, &qhi);
    for (int j0 = 0; j0 <= last; j0 += ATT_BC) {
        int nc = last + 1 - j0 < ATT_BC ? last + 1 - j0 : ATT_BC;
        int32_t klo, khi;
        doc_range(j, b, j0, j0 + nc, &klo, &khi);
        if (khi < qlo || klo > qhi) continue;
        load_kv(j, j->k, b, kvh, j0, nc, K, kT);
        load_kv(j, j->v, b, kvh, j0, nc, NULL, vT);
        ig_cpu_tile_dot(S, Qs, kT, nr, nc, hs);
        tile_mask(j, b, S, i0, nr, j0, nc);
        ig_cpu_tile_dot(dP, dO, vT, nr, nc, hs);
        tile_p_ds(j, b, h, S, dP, i0, nr, j0, nc);
        ig_cpu_acc_rows_n(dQ, dP, ATT_BC, 1, K, hs, nc, nr); /* dQ[r] += dS[r, :] K */
    }
    for (int r = 0; r < nr; r++) {
        float *dst = j->dq + b * j->q_bstride + (size_t)(i0 + r) * j->q_stride + (size_t)h * hs;
        for (int d = 0; d < hs; d++) dst[d] = dQ[r * hs + d] * j->scale;
    }
}

static void att_bwd_kv_chunk(void *arg, size_t b, size_t e, int worker) {
    for (size_t i = b; i < e; i++) att_bwd_kv_item(arg, i, worker);
}

static void att_bwd_q_chunk(void *arg, size_t b, size_t e, int worker) {
    for (size_t i = b; i < e; i++) att_bwd_q_item(arg, i, worker);
}

void ig_cpu_attention_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                               const void *out, const float *lse, const int32_t *doc,
                               const ig_attention_shape *sh) {
    const float *base = qkv;
    float *dbase = dqkv;
    int B = sh->B, T = sh->T, NH = sh->n_head, NKV = sh->n_kv_head, hs = sh->head_size;
    size_t C = (size_t)NH * hs, Ckv = (size_t)NKV * hs, R = C + 2 * Ckv;
    size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    att_job j = {.q = base,
                 .k = base + C,
                 .v = base + C + Ckv,
                 .dout = dout,
                 .o = out,
                 .q_bstride = (size_t)T * R,
                 .kv_bstride = (size_t)T * R,
                 .q_stride = R,
                 .kv_stride = R,
                 .o_bstride = (size_t)T * C,
                 .o_stride = C,
                 .lse = (float *)lse,
                 .dq = dbase,
                 .dk = dbase + C,
                 .dv = dbase + C + Ckv,
                 .doc = doc,
                 .B = B,
                 .NH = NH,
                 .NKV = NKV,
                 .g = NH / NKV,
                 .hs = hs,
                 .Tq = T,
                 .Tk = T,
                 .pos0 = 0,
                 .causal = sh->causal};
    j.nqb = (T + ATT_BR - 1) / ATT_BR;
    j.nkb = (T + ATT_BC - 1) / ATT_BC;
    j.scale = sh->scale != 0 ? sh->scale : (float)(1.0 / sqrt((double)hs));
    j.scratch_floats = (size_t)(4 * ATT_BC + 2 * ATT_BR) * hs + 2 * ATT_BR * ATT_BC;
    size_t threads = (size_t)ig_ctx_threads(be->ctx);
    j.D = ig_cpu_scratch(be, (rows + threads * j.scratch_floats) * sizeof(float),
                         "attention_backward");
    if (!j.D) return;
    j.scratch = j.D + rows;
    ig_parallel_range(be->ctx, rows, ig_cpu_chunk(rows, 64, 16), att_D_chunk, &j);
    ig_parallel_range(be->ctx, (size_t)B * NKV * j.nkb, 1, att_bwd_kv_chunk, &j);
    ig_parallel_range(be->ctx, (size_t)B * NH * j.nqb, 1, att_bwd_q_chunk, &j);
    ig_cpu_scratch_free(be, j.D);
}
