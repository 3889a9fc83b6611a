/* cpu_cross_attention.c - cross-attention from a diffusion transformer's image tokens to its
 * sample's caption tokens (PixArt-alpha's), forward and backward. Query row r of N is of sample
 * b = (row0 + r) / rps and attends, in every head, to the first klen[b] of the sample's Tk keys;
 * no causality, scale 1/sqrt(hs).
 *
 * Reference: for each (row, head) the scores in double, then their max, the sum of exponentials
 * and the weighted values (cpu_attention.c's three passes). The backward recomputes the
 * probabilities from lse; dq row by row, and a sample's dk and dv summed over its rows of the
 * call in double, rows in order, added to dkv once.
 *
 * Fast: cpu_attention.c's tiles. The rows are cut into chunks of up to XA_ROWS rows of one
 * sample, counted from the sample's first global row (chunk k of sample b is its global rows
 * b rps + 64k .. b rps + 64k + 63) and cut where the slice starts and ends: chunks never depend on
 * the thread count, and a slice that starts at a chunk boundary has the chunks of the whole.
 *   forward: an item is (chunk, head): the online softmax over blocks of XA_KEYS keys up to
 *            klen[b], out = O / l and lse = m + log(l);
 *   backward: D = dout . out per (row, head), then, so that every gradient element has one writer
 *            (no atomics): dq, an item (chunk, head) walking its key blocks; dkv, an item
 *            (sample, head, key block) walking the sample's chunks in order. A chunk's dk and dv
 *            are summed over its rows, in order, into fp32 accumulators from 0, and added to a
 *            running value that starts as dkv's own: the order backend.h promises.
 * Every dot product and weighted sum adds its terms in one order fixed by the sizes; a row's
 * numbers never depend on its neighbours, the thread count or the CPU's vector width.
 *
 * Shapes (NH heads of hs, C = NH hs, R = 2C): q, out, dout, dq [N, C]; kv, dkv [B, Tk, R] (key
 * head h at h hs, value head h at C + h hs); lse and D [N, NH]; klen [B].
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

#define XA_ROWS 64          /* query rows per chunk, all of one sample */
#define XA_KEYS IG_CPU_TILE /* keys per block: 64 */

/* the sample of local row r */
static inline size_t sample_of(int row0, int rps, size_t r) {
    return ((size_t)row0 + r) / (size_t)rps;
}

/* klen of every sample of the slice within 1 .. Tk; else IG_ERR_INVALID_ARG is raised (the kernel
 * then writes nothing) */
static int klen_ok(ig_backend *be, const int32_t *klen, int N, int row0, int rps, int Tk,
                   const char *what) {
    size_t s0 = sample_of(row0, rps, 0), s1 = sample_of(row0, rps, (size_t)N - 1);
    for (size_t s = s0; s <= s1; s++)
        if (klen[s] < 1 || klen[s] > Tk) {
            ig_backend_raise(be, IG_ERR_INVALID_ARG,
                             "%s: klen[%zu] = %d, outside 1 .. Tk = %d (a caption has at least one "
                             "token and at most Tk)",
                             what, s, (int)klen[s], Tk);
            return 0;
        }
    return 1;
}

/* ---- reference ------------------------------------------------------------------------------- */

/* sc[j] = scale * q . k_j for j < n, k_j = k + j * R */
static void ref_scores(double *sc, const float *q, const float *k, size_t R, int n, int hs,
                       double scale) {
    for (int j = 0; j < n; j++) {
        double d = 0;
        for (int c = 0; c < hs; c++) d += (double)q[c] * k[(size_t)j * R + c];
        sc[j] = d * scale;
    }
}

void ig_cpu_ref_cross_attention_forward(ig_backend *be, void *out_, float *lse, const void *q_,
                                        const void *kv_, const int32_t *klen, int N, int row0,
                                        int rows_per_sample, int Tk, int n_head, int head_size) {
    const char *what = "cross_attention_forward";
    if (N <= 0 || !klen_ok(be, klen, N, row0, rows_per_sample, Tk, what)) return;
    float *out = out_;
    const float *q = q_, *kv = kv_;
    int NH = n_head, hs = head_size;
    size_t C = (size_t)NH * hs, R = 2 * C;
    double scale = 1.0 / sqrt((double)hs);
    double *sc = ig_cpu_scratch(be, (size_t)Tk * sizeof *sc, what);
    if (!sc) return;
    for (int r = 0; r < N; r++) {
        size_t b = sample_of(row0, rows_per_sample, (size_t)r);
        int kl = klen[b];
        for (int h = 0; h < NH; h++) {
            const float *k = kv + b * Tk * R + (size_t)h * hs, *v = k + C;
            ref_scores(sc, q + (size_t)r * C + (size_t)h * hs, k, R, kl, hs, scale);
            double m = -INFINITY, l = 0;
            for (int j = 0; j < kl; j++) m = sc[j] > m ? sc[j] : m;
            for (int j = 0; j < kl; j++) l += exp(sc[j] - m);
            float *o = out + (size_t)r * C + (size_t)h * hs;
            for (int c = 0; c < hs; c++) {
                double acc = 0;
                for (int j = 0; j < kl; j++) acc += exp(sc[j] - m) / l * v[(size_t)j * R + c];
                o[c] = (float)acc;
            }
            lse[(size_t)r * NH + h] = (float)(m + log(l));
        }
    }
    ig_cpu_scratch_free(be, sc);
}

/* With P = exp(score - lse) and dS = P (dout . v_j - D), D = dout . out: dq = scale sum_j dS k_j,
 * dk_j = scale sum_rows dS q, dv_j = sum_rows P dout. */
void ig_cpu_ref_cross_attention_backward(ig_backend *be, void *dq_, void *dkv_, const void *dout_,
                                         const void *q_, const void *kv_, const void *out_,
                                         const float *lse, const int32_t *klen, int N, int row0,
                                         int rows_per_sample, int Tk, int n_head, int head_size) {
    const char *what = "cross_attention_backward";
    if (N <= 0 || !klen_ok(be, klen, N, row0, rows_per_sample, Tk, what)) return;
    float *dq = dq_, *dkv = dkv_;
    const float *dout = dout_, *q = q_, *kv = kv_, *out = out_;
    int NH = n_head, hs = head_size, rps = rows_per_sample;
    size_t C = (size_t)NH * hs, R = 2 * C;
    double scale = 1.0 / sqrt((double)hs);
    /* p and dS of a (row, head); the sample's dk and dv sums [Tk, R]; a row's dq */
    double *p = ig_cpu_scratch(be, ((size_t)2 * Tk + (size_t)Tk * R + hs) * sizeof *p, what);
    if (!p) return;
    double *ds = p + Tk, *acc = ds + Tk, *dqa = acc + (size_t)Tk * R;
    size_t s0 = sample_of(row0, rps, 0), s1 = sample_of(row0, rps, (size_t)N - 1);
    for (size_t b = s0; b <= s1; b++) {
        /* the sample's local rows [lo, hi) */
        size_t g0 = b * (size_t)rps, g1 = g0 + (size_t)rps;
        size_t lo = g0 > (size_t)row0 ? g0 - (size_t)row0 : 0;
        size_t hi = g1 - (size_t)row0 < (size_t)N ? g1 - (size_t)row0 : (size_t)N;
        int kl = klen[b];
        const float *keys = kv + b * Tk * R;
        memset(acc, 0, (size_t)kl * R * sizeof *acc);
        for (size_t r = lo; r < hi; r++)
            for (int h = 0; h < NH; h++) {
                size_t at = r * C + (size_t)h * hs;
                const float *qr = q + at, *go = dout + at, *o = out + at;
                const float *k = keys + (size_t)h * hs, *v = k + C;
                double D = 0;
                for (int c = 0; c < hs; c++) D += (double)go[c] * o[c];
                ref_scores(p, qr, k, R, kl, hs, scale);
                double l = lse[r * NH + h];
                for (int j = 0; j < kl; j++) {
                    double dp = 0;
                    for (int c = 0; c < hs; c++) dp += (double)go[c] * v[(size_t)j * R + c];
                    p[j] = exp(p[j] - l);
                    ds[j] = p[j] * (dp - D);
                }
                for (int c = 0; c < hs; c++) dqa[c] = 0;
                for (int j = 0; j < kl; j++) {
                    double *ak = acc + (size_t)j * R + (size_t)h * hs, *av = ak + C;
                    for (int c = 0; c < hs; c++) {
                        dqa[c] += ds[j] * k[(size_t)j * R + c];
                        ak[c] += ds[j] * scale * qr[c];
                        av[c] += p[j] * go[c];
                    }
                }
                for (int c = 0; c < hs; c++) dq[at + c] = (float)(dqa[c] * scale);
            }
        float *d = dkv + b * Tk * R;
        for (size_t i = 0; i < (size_t)kl * R; i++) d[i] = (float)(d[i] + acc[i]);
    }
    ig_cpu_scratch_free(be, p);
}

/* ---- fast: the chunks ------------------------------------------------------------------------ */

/* A chunk: local rows lo .. lo + n - 1, all of sample b */
typedef struct xa_chunk {
    int lo, n;
    size_t b;
} xa_chunk;

/* The chunks of the slice in row order (counted when chunks is NULL); first[i] is the first chunk
 * of the slice's i-th sample (first[nsamp] the count). Returns the count. */
static size_t xa_plan(int N, int row0, int rps, xa_chunk *chunks, size_t *first) {
    size_t n = 0, s0 = sample_of(row0, rps, 0);
    for (size_t r = 0; r < (size_t)N;) {
        size_t g = (size_t)row0 + r, b = g / (size_t)rps, start = b * (size_t)rps;
        size_t e = start + ((g - start) / XA_ROWS + 1) * XA_ROWS; /* the chunk's end: global */
        e = e < start + (size_t)rps ? e : start + (size_t)rps;
        e = e - (size_t)row0 < (size_t)N ? e - (size_t)row0 : (size_t)N; /* local */
        if (chunks) {
            if (g == start || r == 0) first[b - s0] = n;
            chunks[n] = (xa_chunk){(int)r, (int)(e - r), b};
        }
        n++;
        r = e;
    }
    if (chunks) first[sample_of(row0, rps, (size_t)N - 1) - s0 + 1] = n;
    return n;
}

typedef struct xa_job {
    const float *q, *kv, *dout, *o, *clse;
    float *out, *lse, *dq, *dkv;
    const int32_t *klen;
    float *D;               /* backward: [N, NH] dout . out */
    const xa_chunk *chunks; /* the slice's, in row order */
    const size_t *first;    /* [nsamp + 1]: sample s0 + i has chunks first[i] .. first[i+1] - 1 */
    size_t s0, nchunks;
    int N, NH, hs, Tk, nkb; /* nkb: key blocks of a sample's Tk keys */
    size_t C, R;            /* NH hs, 2C */
    float scale;
    float *scratch;
    size_t scratch_floats; /* per worker */
} xa_job;

/* Qs[r][d] = scale * q[lo + r][d] of head h for nr rows (and dO rows when dO is not NULL) */
IG_CPU_INLINE void xa_load_q(const xa_job *j, int lo, int nr, int h, float *Qs, float *dO) {
    int hs = j->hs;
    for (int r = 0; r < nr; r++) {
        size_t at = (size_t)(lo + r) * j->C + (size_t)h * hs;
        for (int d = 0; d < hs; d++) Qs[r * hs + d] = j->q[at + d] * j->scale;
        if (dO) memcpy(dO + r * hs, j->dout + at, (size_t)hs * sizeof *dO);
    }
}

/* x[c][d] rows (when x is not NULL) and xT[d][c] (transposed, XA_KEYS wide, zero past nc; when xT
 * is not NULL) of keys j0 .. j0 + nc - 1 of sample b, from the kv columns at off (h hs for the key
 * head, C + h hs for the value head) */
IG_CPU_INLINE void xa_load_kv(const xa_job *j, size_t b, size_t off, int j0, int nc, float *x,
                              float *xT) {
    int hs = j->hs;
    for (int c = 0; c < nc; c++) {
        const float *s = j->kv + (b * j->Tk + (size_t)(j0 + c)) * j->R + off;
        if (x) memcpy(x + c * hs, s, (size_t)hs * sizeof *s);
        if (xT)
            for (int d = 0; d < hs; d++) xT[d * XA_KEYS + c] = s[d];
    }
    if (xT && nc < XA_KEYS)
        for (int d = 0; d < hs; d++) memset(xT + d * XA_KEYS + nc, 0, (size_t)(XA_KEYS - nc) * 4);
}

/* P = exp(S - lse) and dS = P (dP - D) for the rows lo .. lo + nr - 1 of head h: S holds the
 * scores and becomes P, dP holds dO . V and becomes dS */
IG_CPU_INLINE void xa_p_ds(const xa_job *j, int lo, int nr, int h, float *S, float *dP, int nc) {
    for (int r = 0; r < nr; r++) {
        size_t at = (size_t)(lo + r) * j->NH + h;
        float l = j->clse[at], D = j->D[at];
        float *s = S + r * XA_KEYS, *dp = dP + r * XA_KEYS;
        for (int c = 0; c < nc; c++) {
            float p = ig_cpu_expf(s[c] - l);
            s[c] = p;
            dp[c] = p * (dp[c] - D);
        }
    }
}

/* ---- fast forward ---------------------------------------------------------------------------- */

IG_CPU_CLONES
static void xa_fwd_item(void *arg, size_t item, int worker) {
    xa_job *j = arg;
    int hs = j->hs, h = (int)(item % j->NH);
    xa_chunk ch = j->chunks[item / j->NH];
    int nr = ch.n, kl = j->klen[ch.b];
    float *Qs = j->scratch + (size_t)worker * j->scratch_floats;
    float *kT = Qs + XA_ROWS * hs, *V = kT + hs * XA_KEYS, *O = V + XA_KEYS * hs;
    float *S = O + XA_ROWS * hs, *m = S + XA_ROWS * XA_KEYS, *l = m + XA_ROWS;
    xa_load_q(j, ch.lo, nr, h, Qs, NULL);
    for (int r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0;
    memset(O, 0, (size_t)nr * hs * sizeof *O);
    for (int j0 = 0; j0 < kl; j0 += XA_KEYS) {
        int nc = kl - j0 < XA_KEYS ? kl - j0 : XA_KEYS;
        xa_load_kv(j, ch.b, (size_t)h * hs, j0, nc, NULL, kT);
        xa_load_kv(j, ch.b, j->C + (size_t)h * hs, j0, nc, V, NULL);
        ig_cpu_tile_dot(S, Qs, kT, nr, nc, hs);
        for (int r = 0; r < nr; r++) {
            float *s = S + r * XA_KEYS, bm = ig_cpu_max(s, nc);
            float mnew = bm > m[r] ? bm : m[r];
            float alpha = ig_cpu_expf(m[r] - mnew); /* 0 on the first block (m = -inf) */
            for (int c = 0; c < nc; c++) s[c] = ig_cpu_expf(s[c] - mnew);
            l[r] = l[r] * alpha + ig_cpu_sum(s, nc);
            m[r] = mnew;
            float *o = O + r * hs;
            for (int d = 0; d < hs; d++) o[d] *= alpha;
        }
        ig_cpu_acc_rows_n(O, S, XA_KEYS, 1, V, hs, nc, nr); /* O += P V */
    }
    for (int r = 0; r < nr; r++) {
        size_t row = (size_t)(ch.lo + r);
        float *dst = j->out + row * j->C + (size_t)h * hs, inv = 1.0f / l[r];
        for (int d = 0; d < hs; d++) dst[d] = O[r * hs + d] * inv;
        j->lse[row * j->NH + h] = m[r] + logf(l[r]);
    }
}

static void xa_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    for (size_t i = b; i < e; i++) xa_fwd_item(arg, i, worker);
}

/* The job's shape, its chunks (in scratch: *plan, freed by the caller) and per-worker scratch of
 * `floats` floats plus `extra` floats ahead of it (j->D); 0 after raising an error. */
static int xa_setup(ig_backend *be, xa_job *j, const int32_t *klen, int N, int row0, int rps,
                    int Tk, int NH, int hs, size_t floats, size_t extra, void **plan,
                    const char *what) {
    *plan = NULL;
    if (N <= 0 || !klen_ok(be, klen, N, row0, rps, Tk, what)) return 0;
    j->klen = klen;
    j->N = N, j->NH = NH, j->hs = hs, j->Tk = Tk;
    j->nkb = (Tk + XA_KEYS - 1) / XA_KEYS;
    j->C = (size_t)NH * hs, j->R = 2 * j->C;
    j->scale = (float)(1.0 / sqrt((double)hs));
    j->s0 = sample_of(row0, rps, 0);
    size_t nsamp = sample_of(row0, rps, (size_t)N - 1) - j->s0 + 1;
    j->nchunks = xa_plan(N, row0, rps, NULL, NULL);
    size_t cbytes = j->nchunks * sizeof(xa_chunk);
    char *p = ig_cpu_scratch(be, cbytes + (nsamp + 1) * sizeof(size_t), what);
    if (!p) return 0;
    j->chunks = (const xa_chunk *)p;
    j->first = (const size_t *)(p + cbytes);
    xa_plan(N, row0, rps, (xa_chunk *)p, (size_t *)(p + cbytes));
    j->scratch_floats = floats;
    j->D = ig_cpu_scratch(be, (extra + (size_t)ig_ctx_threads(be->ctx) * floats) * sizeof(float),
                          what);
    if (!j->D) {
        ig_cpu_scratch_free(be, p);
        return 0;
    }
    j->scratch = j->D + extra;
    *plan = p;
    return 1;
}

void ig_cpu_cross_attention_forward(ig_backend *be, void *out, float *lse, const void *q,
                                    const void *kv, const int32_t *klen, int N, int row0,
                                    int rows_per_sample, int Tk, int n_head, int head_size) {
    xa_job j = {.q = q, .kv = kv, .out = out, .lse = lse};
    size_t floats =
        (size_t)(2 * XA_ROWS + 2 * XA_KEYS) * head_size + XA_ROWS * XA_KEYS + 2 * XA_ROWS;
    void *plan;
    if (!xa_setup(be, &j, klen, N, row0, rows_per_sample, Tk, n_head, head_size, floats, 0, &plan,
                  "cross_attention_forward"))
        return;
    ig_parallel_range(be->ctx, j.nchunks * (size_t)n_head, 1, xa_fwd_chunk, &j);
    ig_cpu_scratch_free(be, j.D);
    ig_cpu_scratch_free(be, plan);
}

/* ---- fast backward --------------------------------------------------------------------------- */

/* D[r, h] = dout . out of row r's head h */
static void xa_D_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    xa_job *j = arg;
    int hs = j->hs;
    for (size_t i = b; i < e; i++) {
        size_t at = i / j->NH * j->C + i % j->NH * (size_t)hs;
        const float *g = j->dout + at, *o = j->o + at;
        double s = 0;
        for (int d = 0; d < hs; d++) s += (double)g[d] * o[d];
        j->D[i] = (float)s;
    }
}

/* dq of one chunk's rows in head h, over the key blocks of its sample */
IG_CPU_CLONES
static void xa_bwd_q_item(void *arg, size_t item, int worker) {
    xa_job *j = arg;
    int hs = j->hs, h = (int)(item % j->NH);
    xa_chunk ch = j->chunks[item / j->NH];
    int nr = ch.n, kl = j->klen[ch.b];
    float *Qs = j->scratch + (size_t)worker * j->scratch_floats;
    float *dO = Qs + XA_ROWS * hs, *dQ = dO + XA_ROWS * hs, *K = dQ + XA_ROWS * hs;
    float *kT = K + XA_KEYS * hs, *vT = kT + hs * XA_KEYS, *S = vT + hs * XA_KEYS;
    float *dP = S + XA_ROWS * XA_KEYS;
    xa_load_q(j, ch.lo, nr, h, Qs, dO);
    memset(dQ, 0, (size_t)nr * hs * sizeof *dQ);
    for (int j0 = 0; j0 < kl; j0 += XA_KEYS) {
        int nc = kl - j0 < XA_KEYS ? kl - j0 : XA_KEYS;
        xa_load_kv(j, ch.b, (size_t)h * hs, j0, nc, K, kT);
        xa_load_kv(j, ch.b, j->C + (size_t)h * hs, j0, nc, NULL, vT);
        ig_cpu_tile_dot(S, Qs, kT, nr, nc, hs);
        ig_cpu_tile_dot(dP, dO, vT, nr, nc, hs);
        xa_p_ds(j, ch.lo, nr, h, S, dP, nc);
        ig_cpu_acc_rows_n(dQ, dP, XA_KEYS, 1, K, hs, nc, nr); /* dQ[r] += dS[r, :] K */
    }
    for (int r = 0; r < nr; r++) {
        float *dst = j->dq + (size_t)(ch.lo + r) * j->C + (size_t)h * hs;
        for (int d = 0; d < hs; d++) dst[d] = dQ[r * hs + d] * j->scale;
    }
}

/* dk and dv of one key block of one sample's head h, over the sample's chunks in order: each
 * chunk's sums from 0, then added to the running value (dkv's own to begin with) */
IG_CPU_CLONES
static void xa_bwd_kv_item(void *arg, size_t item, int worker) {
    xa_job *j = arg;
    int hs = j->hs;
    int kb = (int)(item % j->nkb), h = (int)(item / j->nkb % j->NH);
    size_t si = item / j->nkb / j->NH, b = j->s0 + si;
    int j0 = kb * XA_KEYS, kl = j->klen[b];
    if (j0 >= kl) return; /* keys past klen: nothing added */
    int nc = kl - j0 < XA_KEYS ? kl - j0 : XA_KEYS;
    float *kT = j->scratch + (size_t)worker * j->scratch_floats;
    float *vT = kT + hs * XA_KEYS, *tK = vT + hs * XA_KEYS, *tV = tK + XA_KEYS * hs;
    float *cK = tV + XA_KEYS * hs, *cV = cK + XA_KEYS * hs, *Qs = cV + XA_KEYS * hs;
    float *dO = Qs + XA_ROWS * hs, *S = dO + XA_ROWS * hs, *dP = S + XA_ROWS * XA_KEYS;
    xa_load_kv(j, b, (size_t)h * hs, j0, nc, NULL, kT);
    xa_load_kv(j, b, j->C + (size_t)h * hs, j0, nc, NULL, vT);
    float *dk = j->dkv + (b * j->Tk + (size_t)j0) * j->R + (size_t)h * hs, *dv = dk + j->C;
    for (int c = 0; c < nc; c++) {
        memcpy(tK + c * hs, dk + (size_t)c * j->R, (size_t)hs * sizeof *tK);
        memcpy(tV + c * hs, dv + (size_t)c * j->R, (size_t)hs * sizeof *tV);
    }
    size_t nkh = (size_t)nc * hs;
    for (size_t ci = j->first[si]; ci < j->first[si + 1]; ci++) {
        xa_chunk ch = j->chunks[ci];
        int nr = ch.n;
        xa_load_q(j, ch.lo, nr, h, Qs, dO);
        ig_cpu_tile_dot(S, Qs, kT, nr, nc, hs);
        ig_cpu_tile_dot(dP, dO, vT, nr, nc, hs);
        xa_p_ds(j, ch.lo, nr, h, S, dP, nc);
        memset(cK, 0, nkh * sizeof *cK);
        memset(cV, 0, nkh * sizeof *cV);
        ig_cpu_acc_rows_n(cV, S, 1, XA_KEYS, dO, hs, nr, nc);  /* dV[c] += P[:, c]^T dO */
        ig_cpu_acc_rows_n(cK, dP, 1, XA_KEYS, Qs, hs, nr, nc); /* dK[c] += dS[:, c]^T Qs */
        for (size_t i = 0; i < nkh; i++) tK[i] += cK[i], tV[i] += cV[i];
    }
    for (int c = 0; c < nc; c++) {
        memcpy(dk + (size_t)c * j->R, tK + c * hs, (size_t)hs * sizeof *tK);
        memcpy(dv + (size_t)c * j->R, tV + c * hs, (size_t)hs * sizeof *tV);
    }
}

static void xa_bwd_q_chunk(void *arg, size_t b, size_t e, int worker) {
    for (size_t i = b; i < e; i++) xa_bwd_q_item(arg, i, worker);
}

static void xa_bwd_kv_chunk(void *arg, size_t b, size_t e, int worker) {
    for (size_t i = b; i < e; i++) xa_bwd_kv_item(arg, i, worker);
}

void ig_cpu_cross_attention_backward(ig_backend *be, void *dq, void *dkv, const void *dout,
                                     const void *q, const void *kv, const void *out,
                                     const float *lse, const int32_t *klen, int N, int row0,
                                     int rows_per_sample, int Tk, int n_head, int head_size) {
    xa_job j = {.q = q, .kv = kv, .dout = dout, .o = out, .clse = lse, .dq = dq, .dkv = dkv};
    /* the larger of the two passes' scratch: kv's 6 tiles of keys, and 2 of rows, and 2 of scores
     */
    size_t floats = (size_t)(6 * XA_KEYS + 2 * XA_ROWS) * head_size + 2 * XA_ROWS * XA_KEYS;
    size_t rows = (size_t)N * n_head;
    void *plan;
    if (!xa_setup(be, &j, klen, N, row0, rows_per_sample, Tk, n_head, head_size, floats, rows,
                  &plan, "cross_attention_backward"))
        return;
    size_t nsamp = sample_of(row0, rows_per_sample, (size_t)N - 1) - j.s0 + 1;
    ig_parallel_range(be->ctx, rows, ig_cpu_chunk(rows, 64, 16), xa_D_chunk, &j);
    ig_parallel_range(be->ctx, j.nchunks * (size_t)n_head, 1, xa_bwd_q_chunk, &j);
    ig_parallel_range(be->ctx, nsamp * n_head * (size_t)j.nkb, 1, xa_bwd_kv_chunk, &j);
    ig_cpu_scratch_free(be, j.D);
    ig_cpu_scratch_free(be, plan);
}
