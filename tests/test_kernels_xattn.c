/* test_kernels_xattn.c - unit tests of DiT's cross-attention kernels (kernels/): image rows
 * attending to their sample's caption keys (PixArt-alpha), forward and backward, on the CPU
 * backend (fast against reference; the CUDA kernels are held to the reference in
 * test_cuda_kernels.c).
 *
 * The shapes go where such kernels go wrong: samples of one row; rows_per_sample 7, 33, 65, 100,
 * 150, 1000 (none a multiple of the 64-row chunk; 1000 spans many chunks); slices that start and
 * end mid-sample (row0 > 0); Tk 1 .. 130 (one, two and three key blocks of 64); klen 1, Tk and
 * mixed per sample; 1 to 4 heads of 1, 7, 8 and 64 channels (64: the register-blocked loops). For
 * each: fast against reference (out, lse, dq, dkv); the key rows at or past klen, the samples of
 * no row, left exactly as they were in dkv; the same bits on 1, 2, 3 and 8 pool threads.
 *
 * Also: the forward by hand in double on a few rows; the backward against central finite
 * differences of L = sum(out * w) for random w, in double (h = 1e-6 on a double forward written
 * here: 1e-5 of the gradient's scale) and through the kernels' own fp32 forward (h = 1e-2,
 * check_fd), for q and kv, keys past klen and other samples getting exactly 0; the += of dkv:
 * two calls on the rows split at a chunk boundary (64 rows from a sample's first row, or a
 * sample's start) give the bits of one call (fast kernels), split elsewhere the same within 1e-6
 * of the scale (both backends); N = 0 writes nothing; a klen outside 1 .. Tk is refused; the
 * table's names and the trace.
 *
 * Tolerances (max |fast - ref| over max |ref| of the tensor): 1e-5 (fp32 online softmax and
 * fp32 sums of up to a thousand rows against double).
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/kernels_fixture.h"

/* ---- shapes ---------------------------------------------------------------------------------- */

/* B samples of rps rows and Tk caption keys, a slice of N rows from global row row0, NH heads of
 * hs; klen by mode: 0 all 1, 1 all Tk, 2 mixed (Tk, 1, and in between) */
typedef struct xcase {
    int B, rps, Tk, NH, hs, row0, N, mode;
    char name[128];
} xcase;

static xcase make_case(int B, int rps, int Tk, int NH, int hs, int row0, int N, int mode) {
    xcase k = {B, rps, Tk, NH, hs, row0, N, mode, {0}};
    snprintf(k.name, sizeof k.name, "B=%d rps=%d Tk=%d NH=%d hs=%d row0=%d N=%d klen %s", B, rps,
             Tk, NH, hs, row0, N,
             mode == 0   ? "1"
             : mode == 1 ? "Tk"
                         : "mixed");
    return k;
}

static size_t nq(const xcase *k) {
    return (size_t)k->N * k->NH * k->hs;
}
static size_t nkv(const xcase *k) {
    return (size_t)k->B * k->Tk * 2 * k->NH * k->hs;
}

static void klen_fill(int32_t *klen, const xcase *k) {
    for (int b = 0; b < k->B; b++)
        klen[b] = k->mode == 0   ? 1
                  : k->mode == 1 ? k->Tk
                  : b == 0       ? k->Tk
                  : b == 1       ? 1
                                 : 1 + (b * 37 + k->Tk / 2) % k->Tk;
}

/* the element i of kv [B, Tk, 2C] is a key of a sample of the slice below its klen */
static int kv_touched(const xcase *k, const int32_t *klen, size_t i) {
    size_t R = (size_t)2 * k->NH * k->hs;
    int b = (int)(i / R / k->Tk), j = (int)(i / R % k->Tk);
    int s0 = k->row0 / k->rps, s1 = (k->row0 + k->N - 1) / k->rps;
    return b >= s0 && b <= s1 && j < klen[b];
}

/* every element of dkv outside the slice's samples' first klen keys is as it was, bit for bit */
static void check_untouched(const xcase *k, const int32_t *klen, const float *now, const float *was,
                            const char *what) {
    for (size_t i = 0; i < nkv(k); i++)
        if (!kv_touched(k, klen, i) && memcmp(now + i, was + i, sizeof *now))
            fail_msg("%s (%s): dkv element %zu (a key past klen or of another sample) changed",
                     what, k->name, i);
}

/* ---- fast against reference ------------------------------------------------------------------ */

static void xattn_case(fixture *f, const xcase *k, uint64_t seed) {
    int N = k->N, C = k->NH * k->hs;
    size_t n = nq(k), m = nkv(k), nl = (size_t)N * k->NH;
    float *q = talloc(f, n), *kv = talloc(f, m), *o1 = talloc(f, n), *o2 = talloc(f, n);
    float *l1 = talloc(f, nl), *l2 = talloc(f, nl);
    int32_t *klen = ialloc(f, (size_t)k->B);
    klen_fill(klen, k);
    fill(q, n, seed, -1.5f, 1.5f);
    fill(kv, m, seed + 1, -1.5f, 1.5f);
    ig_kernel_cross_attention_forward(f->ref, o1, l1, q, kv, klen, N, k->row0, k->rps, k->Tk, k->NH,
                                      k->hs);
    ig_kernel_cross_attention_forward(FAST(f), o2, l2, q, kv, klen, N, k->row0, k->rps, k->Tk,
                                      k->NH, k->hs);
    check_close(o2, o1, n, 1e-5, k->name);
    check_close(l2, l1, nl, 1e-5, k->name);
    if (k->mode == 0) /* one key: out is its value head */
        for (int r = 0; r < N; r++) {
            int b = (k->row0 + r) / k->rps;
            for (int c = 0; c < C; c++)
                assert_true(fabs(o2[(size_t)r * C + c] - kv[(size_t)b * k->Tk * 2 * C + C + c]) <
                            1e-6);
        }

    /* the backward from the fast forward's out and lse on both sides, dkv accumulating into
     * nonzero values, dq overwritten over garbage */
    float *dout = talloc(f, n), *dkv0 = talloc(f, m);
    fill(dout, n, seed + 2, -1, 1);
    fill(dkv0, m, seed + 3, -1, 1);
    float *dq1 = talloc(f, n), *dq2 = talloc(f, n);
    fill(dq1, n, seed + 4, -9, 9), fill(dq2, n, seed + 5, -9, 9);
    float *dkv1 = tdup(f, dkv0, m), *dkv2 = tdup(f, dkv0, m);
    ig_kernel_cross_attention_backward(f->ref, dq1, dkv1, dout, q, kv, o2, l2, klen, N, k->row0,
                                       k->rps, k->Tk, k->NH, k->hs);
    ig_kernel_cross_attention_backward(FAST(f), dq2, dkv2, dout, q, kv, o2, l2, klen, N, k->row0,
                                       k->rps, k->Tk, k->NH, k->hs);
    check_close(dq2, dq1, n, 1e-5, k->name);
    check_close(dkv2, dkv1, m, 1e-6, k->name); /* on dkv0's scale */
    /* the gradient alone, from dkv = 0 */
    float *g1 = talloc(f, m), *g2 = talloc(f, m);
    ig_kernel_cross_attention_backward(f->ref, dq1, g1, dout, q, kv, o2, l2, klen, N, k->row0,
                                       k->rps, k->Tk, k->NH, k->hs);
    ig_kernel_cross_attention_backward(FAST(f), dq2, g2, dout, q, kv, o2, l2, klen, N, k->row0,
                                       k->rps, k->Tk, k->NH, k->hs);
    check_close(g2, g1, m, 1e-5, k->name);
    check_untouched(k, klen, dkv1, dkv0, "cross_attention_backward reference");
    check_untouched(k, klen, dkv2, dkv0, "cross_attention_backward");

    ig_err err = {0};
    assert_int_equal(ig_backend_sync(FAST(f), &err), IG_OK);
    assert_int_equal(ig_backend_sync(f->ref, &err), IG_OK);

    for (int t = 0; t < NTHREADS; t++) {
        float *o3 = talloc(f, n), *l3 = talloc(f, nl), *dq3 = talloc(f, n),
              *dkv3 = tdup(f, dkv0, m);
        ig_kernel_cross_attention_forward(f->fast[t], o3, l3, q, kv, klen, N, k->row0, k->rps,
                                          k->Tk, k->NH, k->hs);
        check_same(o3, o2, n * 4, "cross_attention_forward threads");
        check_same(l3, l2, nl * 4, "cross_attention_forward lse threads");
        ig_kernel_cross_attention_backward(f->fast[t], dq3, dkv3, dout, q, kv, o2, l2, klen, N,
                                           k->row0, k->rps, k->Tk, k->NH, k->hs);
        check_same(dq3, dq2, n * 4, "cross_attention_backward dq threads");
        check_same(dkv3, dkv2, m * 4, "cross_attention_backward dkv threads");
        tfree(f, o3), tfree(f, l3), tfree(f, dq3), tfree(f, dkv3);
    }
    float *all[] = {q, kv, o1, o2, l1, l2, dout, dkv0, dq1, dq2, dkv1, dkv2, g1, g2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    tfree(f, klen);
}

static void test_xattn_shapes(void **state) {
    fixture *f = *state;
    /* B, rps, Tk, NH, hs, row0, N */
    static const int shapes[][7] = {
        {7, 1, 5, 2, 8, 0, 7},          /* samples of one row */
        {7, 1, 5, 2, 8, 2, 4},          /* ... a slice of them */
        {3, 100, 70, 3, 8, 0, 300},     /* two key blocks, a ragged chunk per sample */
        {3, 100, 70, 3, 8, 37, 222},    /* mid-sample start and end */
        {4, 33, 9, 4, 1, 50, 70},       /* head size 1 */
        {2, 150, 130, 1, 64, 70, 200},  /* head size 64, three key blocks */
        {3, 65, 64, 2, 64, 0, 195},     /* a key block exactly, a chunk and a row */
        {2, 1000, 17, 4, 8, 500, 1300}, /* long samples: many chunks */
        {5, 7, 3, 3, 7, 3, 29},         /* odd head size */
        {3, 33, 1, 2, 8, 10, 80},       /* one key */
    };
    uint64_t seed = 100;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int mode = 0; mode < 3; mode++) {
            const int *v = shapes[s];
            xcase k = make_case(v[0], v[1], v[2], v[3], v[4], v[5], v[6], mode);
            xattn_case(f, &k, seed += 10);
        }
}

/* ---- by hand --------------------------------------------------------------------------------- */

/* out and lse of row r's head h in double, the keys of kv [B, Tk, 2C] */
static void by_hand(const float *q, const float *kv, const int32_t *klen, int r, int h, int row0,
                    int rps, int Tk, int NH, int hs, double *out, double *lse) {
    int C = NH * hs, b = (row0 + r) / rps, kl = klen[b];
    double sc[64], m = -INFINITY, l = 0;
    for (int j = 0; j < kl; j++) {
        const float *kr = kv + ((size_t)b * Tk + j) * 2 * C + (size_t)h * hs;
        double d = 0;
        for (int c = 0; c < hs; c++) d += (double)q[(size_t)r * C + (size_t)h * hs + c] * kr[c];
        sc[j] = d / sqrt((double)hs);
        m = sc[j] > m ? sc[j] : m;
    }
    for (int j = 0; j < kl; j++) l += exp(sc[j] - m);
    for (int c = 0; c < hs; c++) {
        double o = 0;
        for (int j = 0; j < kl; j++)
            o += exp(sc[j] - m) / l * kv[((size_t)b * Tk + j) * 2 * C + C + (size_t)h * hs + c];
        out[c] = o;
    }
    *lse = m + log(l);
}

/* rows 3 .. 12 of 4 samples of 5 rows (local row 2 is sample 1's first), Tk 6, klen 6, 2, 4, 1 */
static void test_xattn_by_hand(void **state) {
    fixture *f = *state;
    int B = 4, rps = 5, Tk = 6, NH = 2, hs = 3, row0 = 3, N = 10, C = NH * hs;
    float *q = talloc(f, (size_t)N * C), *kv = talloc(f, (size_t)B * Tk * 2 * C);
    float *o = talloc(f, (size_t)N * C), *l = talloc(f, (size_t)N * NH);
    int32_t *klen = ialloc(f, B);
    klen[0] = 6, klen[1] = 2, klen[2] = 4, klen[3] = 1;
    fill(q, (size_t)N * C, 5, -2, 2);
    fill(kv, (size_t)B * Tk * 2 * C, 6, -2, 2);
    for (int fast = 0; fast < 2; fast++) {
        ig_kernel_cross_attention_forward(fast ? FAST(f) : f->ref, o, l, q, kv, klen, N, row0, rps,
                                          Tk, NH, hs);
        int rows[] = {0, 1, 2, 6, 7, 9};
        for (int i = 0; i < 6; i++)
            for (int h = 0; h < NH; h++) {
                int r = rows[i];
                double want[3], wl;
                by_hand(q, kv, klen, r, h, row0, rps, Tk, NH, hs, want, &wl);
                for (int c = 0; c < hs; c++) {
                    float got = o[(size_t)r * C + (size_t)h * hs + c];
                    if (fabs(got - want[c]) > 1e-6 * (1 + fabs(want[c])))
                        fail_msg("row %d head %d col %d (%s): %.9g, by hand %.9g", r, h, c,
                                 fast ? "fast" : "reference", got, want[c]);
                }
                float gl = l[(size_t)r * NH + h];
                if (fabs(gl - wl) > 1e-6 * (1 + fabs(wl)))
                    fail_msg("row %d head %d lse (%s): %.9g, by hand %.9g", r, h,
                             fast ? "fast" : "reference", gl, wl);
            }
    }
    tfree(f, q), tfree(f, kv), tfree(f, o), tfree(f, l), tfree(f, klen);
}

/* ---- finite differences ---------------------------------------------------------------------- */

/* L = sum(out * w) in double over the slice's rows */
static double loss_d(const xcase *k, const int32_t *klen, const double *q, const double *kv,
                     const float *w) {
    int C = k->NH * k->hs, hs = k->hs;
    double L = 0, sc[64];
    for (int r = 0; r < k->N; r++) {
        int b = (k->row0 + r) / k->rps, kl = klen[b];
        for (int h = 0; h < k->NH; h++) {
            const double *qr = q + (size_t)r * C + (size_t)h * hs;
            double m = -INFINITY, l = 0;
            for (int j = 0; j < kl; j++) {
                const double *kr = kv + ((size_t)b * k->Tk + j) * 2 * C + (size_t)h * hs;
                double d = 0;
                for (int c = 0; c < hs; c++) d += qr[c] * kr[c];
                sc[j] = d / sqrt((double)hs);
                m = sc[j] > m ? sc[j] : m;
            }
            for (int j = 0; j < kl; j++) l += exp(sc[j] - m);
            for (int c = 0; c < hs; c++) {
                double o = 0;
                for (int j = 0; j < kl; j++)
                    o += exp(sc[j] - m) / l *
                         kv[((size_t)b * k->Tk + j) * 2 * C + C + (size_t)h * hs + c];
                L += o * w[(size_t)r * C + (size_t)h * hs + c];
            }
        }
    }
    return L;
}

/* The backward against finite differences of L = sum(out * w): in double on the forward above
 * (every element of q and kv), and through the kernels' own fp32 forward (FD_PROBE elements of
 * each). A slice of 4 samples' rows from mid-sample 0 to mid-sample 2: sample 3 has no row, and
 * the keys past klen do not reach out; both get exactly 0 (dkv starts at 0). */
static void test_xattn_fd(void **state) {
    fixture *f = *state;
    xcase k = make_case(4, 5, 6, 2, 4, 3, 10, 2);
    int32_t *klen = ialloc(f, k.B);
    klen[0] = 6, klen[1] = 2, klen[2] = 4, klen[3] = 3;
    size_t n = nq(&k), m = nkv(&k), nl = (size_t)k.N * k.NH;
    float *q = talloc(f, n), *kv = talloc(f, m), *w = talloc(f, n), *o = talloc(f, n);
    float *l = talloc(f, nl), *o2 = talloc(f, n), *l2 = talloc(f, nl);
    fill(q, n, 7, -1.5f, 1.5f), fill(kv, m, 8, -1.5f, 1.5f), fill(w, n, 9, -1, 1);
    double *qd = malloc(n * sizeof *qd), *kvd = malloc(m * sizeof *kvd);
    for (size_t i = 0; i < n; i++) qd[i] = q[i];
    for (size_t i = 0; i < m; i++) kvd[i] = kv[i];
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *dq = talloc(f, n), *dkv = talloc(f, m);
        fill(dq, n, 10, -5, 5); /* overwritten */
        ig_kernel_cross_attention_forward(be, o, l, q, kv, klen, k.N, k.row0, k.rps, k.Tk, k.NH,
                                          k.hs);
        ig_kernel_cross_attention_backward(be, dq, dkv, w, q, kv, o, l, klen, k.N, k.row0, k.rps,
                                           k.Tk, k.NH, k.hs);
        float *grads[2] = {dq, dkv}, *inputs[2] = {q, kv};
        double *xd[2] = {qd, kvd};
        size_t sizes[2] = {n, m};
        for (int t = 0; t < 2; t++) {
            double scale = max_abs(grads[t], sizes[t]);
            for (size_t i = 0; i < sizes[t]; i++) {
                double h = 1e-6, keep = xd[t][i];
                xd[t][i] = keep + h;
                double lp = loss_d(&k, klen, qd, kvd, w);
                xd[t][i] = keep - h;
                double lm = loss_d(&k, klen, qd, kvd, w);
                xd[t][i] = keep;
                double num = (lp - lm) / (2 * h);
                if (t == 1 && !kv_touched(&k, klen, i)) {
                    if (grads[t][i] != 0.0f || fabs(num) > 1e-9)
                        fail_msg("dkv[%zu] (a key past klen or of sample 3): %.9g, finite "
                                 "differences %.9g: both must be 0",
                                 i, grads[t][i], num);
                    continue;
                }
                if (fabs(grads[t][i] - num) > 1e-5 * scale + 1e-6)
                    fail_msg("cross_attention d%s[%zu] (%s): backward %.9g, finite differences "
                             "%.9g",
                             t ? "kv" : "q", i, fast ? "fast" : "reference", grads[t][i], num);
            }
            for (int p = 0; p < FD_PROBE; p++) { /* the kernel's own forward */
                size_t i = (size_t)p * 7919 % sizes[t];
                float keep = inputs[t][i];
                inputs[t][i] = keep + FD_H;
                ig_kernel_cross_attention_forward(be, o2, l2, q, kv, klen, k.N, k.row0, k.rps, k.Tk,
                                                  k.NH, k.hs);
                double lp = dot_d(o2, w, n);
                inputs[t][i] = keep - FD_H;
                ig_kernel_cross_attention_forward(be, o2, l2, q, kv, klen, k.N, k.row0, k.rps, k.Tk,
                                                  k.NH, k.hs);
                double lm = dot_d(o2, w, n);
                inputs[t][i] = keep;
                check_fd(grads[t][i], (lp - lm) / (2 * FD_H), scale,
                         t ? "cross_attention dkv (own forward)"
                           : "cross_attention dq (own forward)",
                         i);
            }
        }
        tfree(f, dq), tfree(f, dkv);
    }
    free(qd), free(kvd);
    tfree(f, q), tfree(f, kv), tfree(f, w), tfree(f, o), tfree(f, l), tfree(f, o2), tfree(f, l2);
    tfree(f, klen);
}

/* ---- dkv accumulates ------------------------------------------------------------------------- */

/* the backward on rows [0, N) of the case, as one call (split = N) or two, [0, split) then
 * [split, N), into dq and dkv */
static void backward_split(ig_backend *be, const xcase *k, const int32_t *klen, float *dq,
                           float *dkv, const float *dout, const float *q, const float *kv,
                           const float *o, const float *l, int split) {
    size_t C = (size_t)k->NH * k->hs;
    int parts[3] = {0, split, k->N};
    for (int p = 0; p < 2; p++) {
        int a = parts[p], n = parts[p + 1] - a;
        ig_kernel_cross_attention_backward(be, dq + a * C, dkv, dout + a * C, q + a * C, kv,
                                           o + a * C, l + (size_t)a * k->NH, klen, n, k->row0 + a,
                                           k->rps, k->Tk, k->NH, k->hs);
    }
}

/* dkv += over calls: split at a chunk boundary the fast kernels give the bits of one call (and
 * the same on every thread count); split elsewhere, or on the reference, the same within 1e-6 of
 * the scale; two calls on the same rows add the gradient twice; the forward is row by row (a
 * split gives its bits). Slices of the whole batch and of rows from mid-sample. */
static void test_xattn_accumulate(void **state) {
    fixture *f = *state;
    for (int mid = 0; mid < 2; mid++) {
        /* 3 samples of 150 rows; mid: rows 20 .. 429 */
        xcase k =
            mid ? make_case(3, 150, 20, 2, 8, 20, 410, 2) : make_case(3, 150, 20, 2, 8, 0, 450, 2);
        int32_t *klen = ialloc(f, k.B);
        klen_fill(klen, &k);
        size_t n = nq(&k), m = nkv(&k), nl = (size_t)k.N * k.NH;
        float *q = talloc(f, n), *kv = talloc(f, m), *o = talloc(f, n), *l = talloc(f, nl);
        float *dout = talloc(f, n), *dkv0 = talloc(f, m);
        fill(q, n, 20 + mid, -1.5f, 1.5f), fill(kv, m, 22 + mid, -1.5f, 1.5f);
        fill(dout, n, 24 + mid, -1, 1), fill(dkv0, m, 26 + mid, -1, 1);
        ig_kernel_cross_attention_forward(FAST(f), o, l, q, kv, klen, k.N, k.row0, k.rps, k.Tk,
                                          k.NH, k.hs);
        /* the forward on two slices: the same bits */
        {
            float *o2 = talloc(f, n), *l2 = talloc(f, nl);
            int a = 77, C = k.NH * k.hs;
            ig_kernel_cross_attention_forward(FAST(f), o2, l2, q, kv, klen, a, k.row0, k.rps, k.Tk,
                                              k.NH, k.hs);
            ig_kernel_cross_attention_forward(FAST(f), o2 + (size_t)a * C, l2 + (size_t)a * k.NH,
                                              q + (size_t)a * C, kv, klen, k.N - a, k.row0 + a,
                                              k.rps, k.Tk, k.NH, k.hs);
            check_same(o2, o, n * 4, "cross_attention_forward on two slices");
            check_same(l2, l, nl * 4, "cross_attention_forward lse on two slices");
            tfree(f, o2), tfree(f, l2);
        }
        for (int ref = 0; ref < 2; ref++) {
            ig_backend *be = ref ? f->ref : FAST(f);
            float *dq1 = talloc(f, n), *dkv1 = tdup(f, dkv0, m);
            backward_split(be, &k, klen, dq1, dkv1, dout, q, kv, o, l, k.N);
            /* chunk boundaries (global rows): sample 0's first + 128 (mid-chunk from the
             * slice's first row when it starts at row 20), sample 1's first + 64, sample 2's
             * first; and elsewhere: mid-chunk */
            int splits[5] = {128 - k.row0, 150 + 64 - k.row0, 300 - k.row0, 100 - k.row0,
                             333 - k.row0};
            for (int s = 0; s < 5; s++) {
                int exact = s < 3 && !ref;
                for (int t = 0; t < (exact ? NTHREADS : 1); t++) {
                    ig_backend *bt = ref ? be : f->fast[t];
                    float *dq2 = talloc(f, n), *dkv2 = tdup(f, dkv0, m);
                    backward_split(bt, &k, klen, dq2, dkv2, dout, q, kv, o, l, splits[s]);
                    char what[96];
                    snprintf(what, sizeof what, "dkv over two calls split at local row %d (%s)",
                             splits[s], ref ? "reference" : "fast");
                    if (exact)
                        check_same(dkv2, dkv1, m * 4, what);
                    else
                        check_close(dkv2, dkv1, m, 1e-6, what);
                    check_same(dq2, dq1, n * 4, "dq over two calls");
                    check_untouched(&k, klen, dkv2, dkv0, what);
                    tfree(f, dq2), tfree(f, dkv2);
                }
            }
            /* dkv0 + the gradient from 0, and twice the gradient after two calls */
            float *g = talloc(f, m), *want = talloc(f, m), *dq3 = talloc(f, n);
            backward_split(be, &k, klen, dq3, g, dout, q, kv, o, l, k.N);
            for (size_t i = 0; i < m; i++) want[i] = dkv0[i] + g[i];
            check_close(dkv1, want, m, 1e-6, "dkv = dkv0 + the gradient");
            backward_split(be, &k, klen, dq3, g, dout, q, kv, o, l, k.N);
            for (size_t i = 0; i < m; i++) want[i] = 2 * (want[i] - dkv0[i]);
            check_close(g, want, m, 1e-6, "two calls: twice the gradient");
            tfree(f, g), tfree(f, want), tfree(f, dq3), tfree(f, dq1), tfree(f, dkv1);
        }
        float *all[] = {q, kv, o, l, dout, dkv0};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
        tfree(f, klen);
    }
}

/* ---- the table ------------------------------------------------------------------------------- */

typedef struct trace_log {
    int calls;
    ig_op ops[4];
} trace_log;

static void trace_hook(void *user, ig_op op, double seconds) {
    trace_log *t = user;
    if (t->calls < 4) t->ops[t->calls] = op;
    t->calls++;
    assert_true(seconds >= 0);
}

/* the operations are named, in both CPU tables, traced; N = 0 writes nothing; a klen outside
 * 1 .. Tk is refused at the next sync, nothing written */
static void test_xattn_table(void **state) {
    fixture *f = *state;
    assert_string_equal(ig_op_name(IG_OP_CROSS_ATTENTION_FORWARD), "cross_attention_forward");
    assert_string_equal(ig_op_name(IG_OP_CROSS_ATTENTION_BACKWARD), "cross_attention_backward");
    assert_true(IG_OP_CROSS_ATTENTION_BACKWARD < IG_OP_COUNT); /* ops may follow */
    ig_op ops[2] = {IG_OP_CROSS_ATTENTION_FORWARD, IG_OP_CROSS_ATTENTION_BACKWARD};
    for (int i = 0; i < 2; i++) {
        assert_true(ig_backend_supports(FAST(f), ops[i]));
        assert_true(ig_backend_supports(f->ref, ops[i]));
    }
    /* 2 samples of 3 rows, Tk 4, 2 heads of 4: every buffer big enough for all of it */
    int B = 2, rps = 3, Tk = 4, NH = 2, hs = 4, C = NH * hs;
    size_t n = (size_t)B * rps * C, m = (size_t)B * Tk * 2 * C;
    float *a = talloc(f, n), *l = talloc(f, (size_t)B * rps * NH), *dq = talloc(f, n);
    float *dkv = talloc(f, m), *in = talloc(f, m);
    fill(a, n, 60, -1, 1), fill(l, (size_t)B * rps * NH, 61, -1, 1), fill(dq, n, 62, -1, 1);
    fill(dkv, m, 63, -1, 1), fill(in, m, 64, -1, 1);
    float *ka = tdup(f, a, n), *kl = tdup(f, l, (size_t)B * rps * NH), *kdq = tdup(f, dq, n);
    float *kdkv = tdup(f, dkv, m);
    int32_t *klen = ialloc(f, B);
    klen[0] = 4, klen[1] = 2;
    trace_log log = {0};
    ig_backend_set_trace(FAST(f), trace_hook, &log);
    ig_kernel_cross_attention_forward(FAST(f), a, l, in, in, klen, 0, 3, rps, Tk, NH, hs);
    ig_kernel_cross_attention_backward(FAST(f), dq, dkv, in, in, in, in, l, klen, 0, 3, rps, Tk, NH,
                                       hs);
    ig_backend_set_trace(FAST(f), NULL, NULL);
    assert_int_equal(log.calls, 2);
    assert_int_equal(log.ops[0], IG_OP_CROSS_ATTENTION_FORWARD);
    assert_int_equal(log.ops[1], IG_OP_CROSS_ATTENTION_BACKWARD);
    for (int ref = 0; ref < 2; ref++) {
        ig_backend *be = ref ? f->ref : FAST(f);
        ig_kernel_cross_attention_forward(be, a, l, in, in, klen, 0, 3, rps, Tk, NH, hs);
        ig_kernel_cross_attention_backward(be, dq, dkv, in, in, in, in, l, klen, 0, 3, rps, Tk, NH,
                                           hs);
        /* klen 0 and Tk + 1, each of a sample of the slice */
        for (int bad = 0; bad < 2; bad++) {
            klen[1] = bad ? Tk + 1 : 0;
            ig_err err = {0};
            ig_kernel_cross_attention_forward(be, a, l, in, in, klen, 4, 1, rps, Tk, NH, hs);
            assert_int_equal(ig_backend_sync(be, &err), IG_ERR_INVALID_ARG);
            assert_non_null(strstr(err.msg, "cross_attention_forward: klen[1]"));
            ig_kernel_cross_attention_backward(be, dq, dkv, in, in, in, in, l, klen, 4, 1, rps, Tk,
                                               NH, hs);
            assert_int_equal(ig_backend_sync(be, &err), IG_ERR_INVALID_ARG);
            assert_non_null(strstr(err.msg, "cross_attention_backward: klen[1]"));
        }
        klen[1] = 2;
        /* a klen outside the slice's samples is not read: rows 0 .. 2 are sample 0's */
        klen[1] = -5;
        float *o = talloc(f, n), *ol = talloc(f, (size_t)B * rps * NH);
        ig_kernel_cross_attention_forward(be, o, ol, in, in, klen, 3, 0, rps, Tk, NH, hs);
        ig_err err = {0};
        assert_int_equal(ig_backend_sync(be, &err), IG_OK);
        klen[1] = 2;
        tfree(f, o), tfree(f, ol);
    }
    check_same(a, ka, n * 4, "nothing written for N = 0 or a bad klen: out");
    check_same(l, kl, (size_t)B * rps * NH * 4, "nothing written: lse");
    check_same(dq, kdq, n * 4, "nothing written: dq");
    check_same(dkv, kdkv, m * 4, "nothing written: dkv");
    float *all[] = {a, l, dq, dkv, in, ka, kl, kdq, kdkv};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    tfree(f, klen);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xattn_table),      cmocka_unit_test(test_xattn_by_hand),
        cmocka_unit_test(test_xattn_shapes),     cmocka_unit_test(test_xattn_fd),
        cmocka_unit_test(test_xattn_accumulate),
    };
    return cmocka_run_group_tests_name("kernels_xattn", tests, setup, teardown);
}
