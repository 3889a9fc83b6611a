/* test_kernels_dit.c - unit tests of DiT's (adaLN-Zero) compute kernels (kernels/): the
 * LayerNorm fused with the per-sample modulation, the gated residual, SiLU and the MSE loss, on
 * the CPU backend (fast against reference; the CUDA kernels are held to the reference in
 * test_cuda_kernels.c).
 *
 * The per-sample layout is where such kernels go wrong (OpenDiT's Triton kernel indexes shift and
 * scale by block, wrong for a batch above 1), so the row kernels run over every combination of
 * B = 1, 3, 5 samples, rows_per_sample 1, 7, 33, 130 (none a multiple of a chunk or a tile), C 1,
 * 7, 64, 96, per-sample vectors with ld = C (matrices of their own) and ld = 6C (column offsets
 * into one [B, 6C] modulation, as DiT's), and a slice of the rows that starts at global row 0 or
 * in the middle of a sample (row0 > 0, a rank's slice, ending mid-sample too), plus long samples
 * that span many chunks. For each: fast against reference; the fast forward and input gradient
 * bit for bit against the plain LayerNorm kernels run sample by sample with w = 1 + scale[b] and
 * b = shift[b]; the per-sample sums against sums taken here in double over the global rows; the
 * per-sample rows outside the slice's samples and the columns outside the vectors left alone; the
 * same bits on 1, 2, 3 and 8 pool threads.
 *
 * Also: the modulated LayerNorm by hand in double on a few rows; each backward against central
 * finite differences, in double (h = 1e-6 on a double forward written here: 1e-5 of the
 * gradient's scale) and through the kernels' own fp32 forward (h = 1e-2, check_fd); in-place
 * forms (out = res, dinp = dout, dpred = pred); N = 0; the table's names and the trace.
 *
 * Tolerances (max |fast - ref| over max |ref| of the tensor): 1e-5 for the LayerNorm and the
 * per-sample sums (fp32 rows against double), 1e-6 for the elementwise kernels (fp32 against
 * double).
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/kernels_fixture.h"

#define DIT_EPS 1e-6f /* DiT's LayerNorm eps */

/* ---- the per-sample layout ------------------------------------------------------------------- */

/* One shape: B samples of rps rows, a slice of N rows from global row row0, C channels; the
 * per-sample vectors shift, scale, gate at element offsets of one buffer of nmod elements: three
 * [B, C] matrices (ld = C) or the columns 3C, 4C, 5C of a [B, 6C] modulation (ld = 6C). */
typedef struct dcase {
    int B, rps, C, ld, row0, N;
    size_t nmod, o_shift, o_scale, o_gate;
    char name[96];
} dcase;

static dcase make_case(int B, int rps, int C, int wide, int mid) {
    dcase k = {.B = B, .rps = rps, .C = C};
    if (wide) {
        k.ld = 6 * C;
        k.nmod = (size_t)B * 6 * C;
        k.o_shift = 3 * (size_t)C, k.o_scale = 4 * (size_t)C, k.o_gate = 5 * (size_t)C;
    } else {
        k.ld = C;
        k.nmod = 3 * (size_t)B * C;
        k.o_shift = 0, k.o_scale = (size_t)B * C, k.o_gate = 2 * (size_t)B * C;
    }
    int total = B * rps;
    k.row0 = mid ? rps / 2 + (B > 2 ? rps : 0) : 0; /* mid-sample, and past sample 0 when B > 2 */
    k.N = mid ? total - k.row0 - rps / 3 : total;   /* ending mid-sample too */
    snprintf(k.name, sizeof k.name, "B=%d rps=%d C=%d ld=%d row0=%d N=%d", B, rps, C, k.ld, k.row0,
             k.N);
    return k;
}

/* the samples of the slice, and sample s's local rows [*lo, *hi) */
static int first_sample(const dcase *k) {
    return k->row0 / k->rps;
}
static int last_sample(const dcase *k) {
    return (k->row0 + k->N - 1) / k->rps;
}
static void span(const dcase *k, int s, int *lo, int *hi) {
    int g0 = s * k->rps, g1 = g0 + k->rps;
    *lo = g0 > k->row0 ? g0 - k->row0 : 0;
    *hi = g1 - k->row0 < k->N ? g1 - k->row0 : k->N;
}

/* element i of the per-sample buffer belongs to the vector at offset o of one of the slice's
 * samples */
static int touched(const dcase *k, size_t o, size_t i) {
    for (int s = first_sample(k); s <= last_sample(k); s++) {
        size_t at = o + (size_t)s * k->ld;
        if (i >= at && i < at + (size_t)k->C) return 1;
    }
    return 0;
}

/* every element outside the vectors at offsets o1 (and o2, when not (size_t)-1) of the slice's
 * samples is as it was */
static void check_untouched(const dcase *k, const float *now, const float *was, size_t o1,
                            size_t o2, const char *what) {
    for (size_t i = 0; i < k->nmod; i++) {
        if (touched(k, o1, i) || (o2 != (size_t)-1 && touched(k, o2, i))) continue;
        if (memcmp(now + i, was + i, sizeof *now))
            fail_msg("%s (%s): element %zu outside the slice's vectors changed", what, k->name, i);
    }
}

/* ---- the modulated LayerNorm ----------------------------------------------------------------- */

static void modulate_case(fixture *f, const dcase *k, uint64_t seed) {
    int N = k->N, C = k->C, ld = k->ld;
    size_t n = (size_t)N * C;
    float *x = talloc(f, n), *mod = talloc(f, k->nmod);
    fill(x, n, seed, -2, 3);
    fill(mod, k->nmod, seed + 1, -1, 1);
    const float *sh = mod + k->o_shift, *sc = mod + k->o_scale;
    float *o1 = talloc(f, n), *o2 = talloc(f, n), *m1 = talloc(f, N), *m2 = talloc(f, N);
    float *r1 = talloc(f, N), *r2 = talloc(f, N);
    ig_kernel_layernorm_modulate_forward(f->ref, o1, m1, r1, x, sh, sc, ld, N, C, k->row0, k->rps,
                                         DIT_EPS);
    ig_kernel_layernorm_modulate_forward(FAST(f), o2, m2, r2, x, sh, sc, ld, N, C, k->row0, k->rps,
                                         DIT_EPS);
    check_close(o2, o1, n, 1e-5, k->name);
    check_close(m2, m1, N, 1e-5, k->name);
    check_close(r2, r1, N, 1e-5, k->name);

    /* sample by sample, the plain LayerNorm with w = 1 + scale[s], b = shift[s]: the same bits */
    float *w = talloc(f, C), *bb = talloc(f, C), *o3 = talloc(f, n), *m3 = talloc(f, N);
    float *r3 = talloc(f, N);
    for (int s = first_sample(k); s <= last_sample(k); s++) {
        int lo, hi;
        span(k, s, &lo, &hi);
        for (int c = 0; c < C; c++)
            w[c] = 1.0f + sc[(size_t)s * ld + c], bb[c] = sh[(size_t)s * ld + c];
        ig_kernel_layernorm_forward(FAST(f), o3 + (size_t)lo * C, m3 + lo, r3 + lo,
                                    x + (size_t)lo * C, w, bb, hi - lo, C, DIT_EPS);
    }
    check_same(o3, o2, n * 4, "layernorm_modulate_forward = layernorm_forward per sample");
    check_same(m3, m2, (size_t)N * 4, "layernorm_modulate_forward mean");
    check_same(r3, r2, (size_t)N * 4, "layernorm_modulate_forward rstd");

    /* backward from the fast forward's statistics, accumulating into nonzero gradients */
    float *dout = talloc(f, n), *di0 = talloc(f, n), *dm0 = talloc(f, k->nmod);
    fill(dout, n, seed + 2, -1, 1);
    fill(di0, n, seed + 3, -1, 1);
    fill(dm0, k->nmod, seed + 4, -1, 1);
    float *di1 = tdup(f, di0, n), *dm1 = tdup(f, dm0, k->nmod);
    float *di2 = tdup(f, di0, n), *dm2 = tdup(f, dm0, k->nmod);
    ig_kernel_layernorm_modulate_backward(f->ref, di1, dm1 + k->o_shift, dm1 + k->o_scale, dout, x,
                                          sc, ld, m2, r2, N, C, k->row0, k->rps);
    ig_kernel_layernorm_modulate_backward(FAST(f), di2, dm2 + k->o_shift, dm2 + k->o_scale, dout, x,
                                          sc, ld, m2, r2, N, C, k->row0, k->rps);
    check_close(di2, di1, n, 1e-5, k->name);
    check_close(dm2, dm1, k->nmod, 1e-5, k->name);
    check_untouched(k, dm1, dm0, k->o_shift, k->o_scale, "layernorm_modulate_backward reference");
    check_untouched(k, dm2, dm0, k->o_shift, k->o_scale, "layernorm_modulate_backward");

    /* the per-sample sums, taken here in double over the global rows of the slice */
    double *want = calloc(k->nmod, sizeof *want);
    for (size_t i = 0; i < k->nmod; i++) want[i] = dm0[i];
    for (int g = k->row0; g < k->row0 + N; g++) {
        int r = g - k->row0, s = g / k->rps;
        for (int c = 0; c < C; c++) {
            double d = dout[(size_t)r * C + c], xh = (x[(size_t)r * C + c] - (double)m2[r]) * r2[r];
            want[k->o_shift + (size_t)s * ld + c] += d;
            want[k->o_scale + (size_t)s * ld + c] += d * xh;
        }
    }
    float *wantf = talloc(f, k->nmod);
    for (size_t i = 0; i < k->nmod; i++) wantf[i] = (float)want[i];
    check_close(dm2, wantf, k->nmod, 1e-5, "layernorm_modulate_backward per-sample sums");
    free(want);

    /* the input gradient sample by sample through the plain LayerNorm backward: the same bits */
    float *di3 = tdup(f, di0, n), *dw = talloc(f, C), *db = talloc(f, C);
    for (int s = first_sample(k); s <= last_sample(k); s++) {
        int lo, hi;
        span(k, s, &lo, &hi);
        for (int c = 0; c < C; c++) w[c] = 1.0f + sc[(size_t)s * ld + c];
        ig_kernel_layernorm_backward(FAST(f), di3 + (size_t)lo * C, dw, db, dout + (size_t)lo * C,
                                     x + (size_t)lo * C, w, m2 + lo, r2 + lo, hi - lo, C);
    }
    check_same(di3, di2, n * 4, "layernorm_modulate_backward dinp = layernorm_backward per sample");

    /* the same bits on any thread count */
    for (int t = 0; t < NTHREADS; t++) {
        float *o4 = talloc(f, n), *m4 = talloc(f, N), *r4 = talloc(f, N);
        float *di4 = tdup(f, di0, n), *dm4 = tdup(f, dm0, k->nmod);
        ig_kernel_layernorm_modulate_forward(f->fast[t], o4, m4, r4, x, sh, sc, ld, N, C, k->row0,
                                             k->rps, DIT_EPS);
        check_same(o4, o2, n * 4, "layernorm_modulate_forward threads");
        check_same(m4, m2, (size_t)N * 4, "layernorm_modulate_forward mean threads");
        check_same(r4, r2, (size_t)N * 4, "layernorm_modulate_forward rstd threads");
        ig_kernel_layernorm_modulate_backward(f->fast[t], di4, dm4 + k->o_shift, dm4 + k->o_scale,
                                              dout, x, sc, ld, m2, r2, N, C, k->row0, k->rps);
        check_same(di4, di2, n * 4, "layernorm_modulate_backward dinp threads");
        check_same(dm4, dm2, k->nmod * 4, "layernorm_modulate_backward dshift/dscale threads");
        tfree(f, o4), tfree(f, m4), tfree(f, r4), tfree(f, di4), tfree(f, dm4);
    }
    float *all[] = {x,  mod,  o1,  o2,  m1,  m2,  r1,  r2,  w,   bb,    o3, m3,
                    r3, dout, di0, dm0, di1, dm1, di2, dm2, di3, wantf, dw, db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static const int case_B[] = {1, 3, 5}, case_rps[] = {1, 7, 33, 130}, case_C[] = {1, 7, 64, 96};

static void test_modulate(void **state) {
    fixture *f = *state;
    uint64_t seed = 1000;
    for (int bi = 0; bi < 3; bi++)
        for (int ri = 0; ri < 4; ri++)
            for (int ci = 0; ci < 4; ci++)
                for (int wide = 0; wide < 2; wide++)
                    for (int mid = 0; mid < 2; mid++) {
                        dcase k = make_case(case_B[bi], case_rps[ri], case_C[ci], wide, mid);
                        modulate_case(f, &k, seed += 10);
                    }
    /* long samples: each spans many chunks of rows (and the chunks are more than the least) */
    dcase k = make_case(3, 1000, 7, 1, 1);
    modulate_case(f, &k, 77);
    k = make_case(2, 2900, 40, 0, 1);
    modulate_case(f, &k, 78);
}

/* a few rows by hand, in double: the slice rows 3 .. 12 of 3 samples of 5 rows (local row 2 is
 * sample 1's first), C = 7, the vectors in a [3, 6C] modulation */
static void test_modulate_by_hand(void **state) {
    fixture *f = *state;
    dcase k = make_case(3, 5, 7, 1, 0);
    k.row0 = 3, k.N = 10;
    int N = k.N, C = k.C;
    size_t n = (size_t)N * C;
    float *x = talloc(f, n), *mod = talloc(f, k.nmod), *o = talloc(f, n);
    float *m = talloc(f, N), *r = talloc(f, N);
    fill(x, n, 5, -3, 2);
    fill(mod, k.nmod, 6, -1, 1);
    for (int fast = 0; fast < 2; fast++) {
        ig_kernel_layernorm_modulate_forward(fast ? FAST(f) : f->ref, o, m, r, x, mod + k.o_shift,
                                             mod + k.o_scale, k.ld, N, C, k.row0, k.rps, DIT_EPS);
        int rows[] = {0, 1, 2, 6, 7, 9};
        for (int i = 0; i < 6; i++) {
            int row = rows[i], s = (k.row0 + row) / k.rps;
            const float *xr = x + (size_t)row * C;
            double mean = 0, var = 0;
            for (int c = 0; c < C; c++) mean += xr[c];
            mean /= C;
            for (int c = 0; c < C; c++) var += (xr[c] - mean) * (xr[c] - mean);
            var /= C;
            double rstd = 1 / sqrt(var + 1e-6);
            assert_true(fabs(m[row] - mean) < 1e-6);
            assert_true(fabs(r[row] - rstd) < 1e-6 * rstd);
            for (int c = 0; c < C; c++) {
                double shv = mod[k.o_shift + (size_t)s * k.ld + c];
                double scv = mod[k.o_scale + (size_t)s * k.ld + c];
                double want = (xr[c] - mean) * rstd * (1 + scv) + shv;
                if (fabs(o[(size_t)row * C + c] - want) > 1e-5 * (1 + fabs(want)))
                    fail_msg("row %d col %d (%s): %.9g, by hand %.9g", row, c,
                             fast ? "fast" : "reference", o[(size_t)row * C + c], want);
            }
        }
    }
    tfree(f, x), tfree(f, mod), tfree(f, o), tfree(f, m), tfree(f, r);
}

/* L = sum(modulated LN(x) * dout) in double, for the finite differences */
static double mod_loss_d(const dcase *k, const double *x, const double *mod, const float *dout) {
    double L = 0;
    int C = k->C;
    for (int row = 0; row < k->N; row++) {
        int s = (k->row0 + row) / k->rps;
        const double *xr = x + (size_t)row * C;
        double mean = 0, var = 0;
        for (int c = 0; c < C; c++) mean += xr[c];
        mean /= C;
        for (int c = 0; c < C; c++) var += (xr[c] - mean) * (xr[c] - mean);
        double rstd = 1 / sqrt(var / C + (double)DIT_EPS);
        for (int c = 0; c < C; c++) {
            double y = (xr[c] - mean) * rstd * (1 + mod[k->o_scale + (size_t)s * k->ld + c]) +
                       mod[k->o_shift + (size_t)s * k->ld + c];
            L += y * dout[(size_t)row * C + c];
        }
    }
    return L;
}

/* The backward against finite differences of L = sum(out * dout): in double on a double forward
 * written here (every element), and through the kernels' own fp32 forward (FD_PROBE elements of
 * each input). The slice starts and ends mid-sample; the gradients start at 0. */
static void test_modulate_fd(void **state) {
    fixture *f = *state;
    dcase k = make_case(3, 5, 7, 1, 0);
    k.row0 = 3, k.N = 10;
    int N = k.N, C = k.C;
    size_t n = (size_t)N * C;
    float *x = talloc(f, n), *mod = talloc(f, k.nmod), *dout = talloc(f, n), *o = talloc(f, n);
    float *m = talloc(f, N), *r = talloc(f, N);
    fill(x, n, 7, -2, 2);
    fill(mod, k.nmod, 8, -1, 1);
    fill(dout, n, 9, -1, 1);
    double *xd = malloc(n * sizeof *xd), *md = malloc(k.nmod * sizeof *md);
    for (size_t i = 0; i < n; i++) xd[i] = x[i];
    for (size_t i = 0; i < k.nmod; i++) md[i] = mod[i];
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *gi = talloc(f, n), *gm = talloc(f, k.nmod);
        ig_kernel_layernorm_modulate_forward(be, o, m, r, x, mod + k.o_shift, mod + k.o_scale, k.ld,
                                             N, C, k.row0, k.rps, DIT_EPS);
        ig_kernel_layernorm_modulate_backward(be, gi, gm + k.o_shift, gm + k.o_scale, dout, x,
                                              mod + k.o_scale, k.ld, m, r, N, C, k.row0, k.rps);
        /* in double: every element of x and of the modulation (the gate's columns and the others
         * get 0 both ways) */
        double *targets[2] = {xd, md};
        float *grads[2] = {gi, gm};
        size_t sizes[2] = {n, k.nmod};
        for (int t = 0; t < 2; t++) {
            double scale = max_abs(grads[t], sizes[t]);
            for (size_t i = 0; i < sizes[t]; i++) {
                double keep = targets[t][i], h = 1e-6;
                targets[t][i] = keep + h;
                double lp = mod_loss_d(&k, xd, md, dout);
                targets[t][i] = keep - h;
                double lm = mod_loss_d(&k, xd, md, dout);
                targets[t][i] = keep;
                double num = (lp - lm) / (2 * h);
                if (fabs(grads[t][i] - num) > 1e-5 * scale + 1e-6)
                    fail_msg("layernorm_modulate %s[%zu] (%s): backward %.9g, finite differences "
                             "%.9g",
                             t ? "dmod" : "dinp", i, fast ? "fast" : "reference", grads[t][i], num);
            }
        }
        /* through the kernel's own forward */
        float *inputs[2] = {x, mod};
        const char *names[2] = {"layernorm_modulate dinp (own forward)",
                                "layernorm_modulate dmod (own forward)"};
        for (int t = 0; t < 2; t++) {
            double scale = max_abs(grads[t], sizes[t]);
            for (int p = 0; p < FD_PROBE; p++) {
                size_t i = (size_t)p * 7919 % sizes[t];
                if (t == 1 && !touched(&k, k.o_shift, i) && !touched(&k, k.o_scale, i))
                    i = k.o_scale + (size_t)k.ld + (size_t)p % C; /* sample 1's scale */
                float keep = inputs[t][i];
                inputs[t][i] = keep + FD_H;
                ig_kernel_layernorm_modulate_forward(be, o, m, r, x, mod + k.o_shift,
                                                     mod + k.o_scale, k.ld, N, C, k.row0, k.rps,
                                                     DIT_EPS);
                double lp = dot_d(o, dout, n);
                inputs[t][i] = keep - FD_H;
                ig_kernel_layernorm_modulate_forward(be, o, m, r, x, mod + k.o_shift,
                                                     mod + k.o_scale, k.ld, N, C, k.row0, k.rps,
                                                     DIT_EPS);
                double lm = dot_d(o, dout, n);
                inputs[t][i] = keep;
                check_fd(grads[t][i], (lp - lm) / (2 * FD_H), scale, names[t], i);
            }
        }
        tfree(f, gi), tfree(f, gm);
    }
    free(xd), free(md);
    tfree(f, x), tfree(f, mod), tfree(f, dout), tfree(f, o), tfree(f, m), tfree(f, r);
}

/* ---- the gated residual ---------------------------------------------------------------------- */

static void gate_case(fixture *f, const dcase *k, uint64_t seed) {
    int N = k->N, C = k->C, ld = k->ld;
    size_t n = (size_t)N * C;
    float *res = talloc(f, n), *x = talloc(f, n), *mod = talloc(f, k->nmod);
    fill(res, n, seed, -2, 2);
    fill(x, n, seed + 1, -3, 3);
    fill(mod, k->nmod, seed + 2, -1, 1);
    const float *g = mod + k->o_gate;
    float *o1 = talloc(f, n), *o2 = talloc(f, n);
    ig_kernel_gate_residual_forward(f->ref, o1, res, x, g, ld, N, C, k->row0, k->rps);
    ig_kernel_gate_residual_forward(FAST(f), o2, res, x, g, ld, N, C, k->row0, k->rps);
    check_close(o2, o1, n, 1e-6, k->name);
    for (int row = 0; row < N; row++) { /* the fast kernel is the plain fp32 expression */
        const float *gs = g + (size_t)((k->row0 + row) / k->rps) * ld;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)row * C + c;
            float want = res[i] + gs[c] * x[i];
            if (memcmp(&want, o2 + i, 4)) fail_msg("gate_residual_forward (%s) at %zu", k->name, i);
        }
    }
    float *io = tdup(f, res, n); /* out = res, the residual stream in place */
    ig_kernel_gate_residual_forward(FAST(f), io, io, x, g, ld, N, C, k->row0, k->rps);
    check_same(io, o2, n * 4, "gate_residual_forward in place");
    memcpy(io, res, n * 4);
    ig_kernel_gate_residual_forward(f->ref, io, io, x, g, ld, N, C, k->row0, k->rps);
    check_same(io, o1, n * 4, "gate_residual_forward (reference) in place");

    /* backward: dx overwritten (it starts as garbage), dgate accumulated */
    float *dout = talloc(f, n), *dm0 = talloc(f, k->nmod);
    float *dx1 = talloc(f, n), *dx2 = talloc(f, n);
    fill(dout, n, seed + 3, -1, 1);
    fill(dm0, k->nmod, seed + 4, -1, 1);
    for (size_t i = 0; i < n; i++) dx1[i] = dx2[i] = NAN;
    float *dm1 = tdup(f, dm0, k->nmod), *dm2 = tdup(f, dm0, k->nmod);
    ig_kernel_gate_residual_backward(f->ref, dx1, dm1 + k->o_gate, dout, x, g, ld, N, C, k->row0,
                                     k->rps);
    ig_kernel_gate_residual_backward(FAST(f), dx2, dm2 + k->o_gate, dout, x, g, ld, N, C, k->row0,
                                     k->rps);
    check_close(dx2, dx1, n, 1e-6, k->name);
    check_close(dm2, dm1, k->nmod, 1e-5, k->name);
    check_untouched(k, dm1, dm0, k->o_gate, (size_t)-1, "gate_residual_backward reference");
    check_untouched(k, dm2, dm0, k->o_gate, (size_t)-1, "gate_residual_backward");
    double *want = calloc(k->nmod, sizeof *want);
    for (size_t i = 0; i < k->nmod; i++) want[i] = dm0[i];
    for (int gr = k->row0; gr < k->row0 + N; gr++) {
        int row = gr - k->row0, s = gr / k->rps;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)row * C + c;
            want[k->o_gate + (size_t)s * ld + c] += (double)dout[i] * x[i];
            float dxw = dout[i] * g[(size_t)s * ld + c];
            if (memcmp(&dxw, dx2 + i, 4))
                fail_msg("gate_residual_backward dx (%s) at %zu", k->name, i);
        }
    }
    float *wantf = talloc(f, k->nmod);
    for (size_t i = 0; i < k->nmod; i++) wantf[i] = (float)want[i];
    check_close(dm2, wantf, k->nmod, 1e-5, "gate_residual_backward per-sample sums");
    free(want);
    for (int t = 0; t < NTHREADS; t++) {
        float *o4 = talloc(f, n), *dx4 = talloc(f, n), *dm4 = tdup(f, dm0, k->nmod);
        ig_kernel_gate_residual_forward(f->fast[t], o4, res, x, g, ld, N, C, k->row0, k->rps);
        check_same(o4, o2, n * 4, "gate_residual_forward threads");
        ig_kernel_gate_residual_backward(f->fast[t], dx4, dm4 + k->o_gate, dout, x, g, ld, N, C,
                                         k->row0, k->rps);
        check_same(dx4, dx2, n * 4, "gate_residual_backward dx threads");
        check_same(dm4, dm2, k->nmod * 4, "gate_residual_backward dgate threads");
        tfree(f, o4), tfree(f, dx4), tfree(f, dm4);
    }
    float *all[] = {res, x, mod, o1, o2, io, dout, dm0, dx1, dx2, dm1, dm2, wantf};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static void test_gate_residual(void **state) {
    fixture *f = *state;
    uint64_t seed = 5000;
    for (int bi = 0; bi < 3; bi++)
        for (int ri = 0; ri < 4; ri++)
            for (int ci = 0; ci < 4; ci++)
                for (int wide = 0; wide < 2; wide++)
                    for (int mid = 0; mid < 2; mid++) {
                        dcase k = make_case(case_B[bi], case_rps[ri], case_C[ci], wide, mid);
                        gate_case(f, &k, seed += 10);
                    }
    dcase k = make_case(3, 1000, 7, 1, 1);
    gate_case(f, &k, 97);
    k = make_case(2, 2900, 40, 0, 1);
    gate_case(f, &k, 98);
}

/* L = sum((res + gate * x) * dout): finite differences of x and the gate, in double and through
 * the kernel's own forward; res's gradient is dout itself */
static void test_gate_residual_fd(void **state) {
    fixture *f = *state;
    dcase k = make_case(3, 5, 7, 1, 0);
    k.row0 = 3, k.N = 10;
    int N = k.N, C = k.C;
    size_t n = (size_t)N * C;
    float *res = talloc(f, n), *x = talloc(f, n), *mod = talloc(f, k.nmod), *dout = talloc(f, n);
    float *o = talloc(f, n);
    fill(res, n, 11, -1, 1), fill(x, n, 12, -2, 2), fill(mod, k.nmod, 13, -1, 1);
    fill(dout, n, 14, -1, 1);
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *gx = talloc(f, n), *gm = talloc(f, k.nmod);
        ig_kernel_gate_residual_backward(be, gx, gm + k.o_gate, dout, x, mod + k.o_gate, k.ld, N, C,
                                         k.row0, k.rps);
        float *inputs[3] = {x, mod, res};
        float *grads[3] = {gx, gm, dout};
        size_t sizes[3] = {n, k.nmod, n};
        for (int t = 0; t < 3; t++) {
            double scale = max_abs(grads[t], sizes[t]);
            for (size_t i = 0; i < sizes[t]; i++) {
                /* in double: L is linear in each input */
                double lp = 0, lm = 0, h = 1e-6;
                for (int sign = 0; sign < 2; sign++) {
                    double L = 0, dh = sign ? -h : h;
                    for (int row = 0; row < N; row++) {
                        int s = (k.row0 + row) / k.rps;
                        for (int c = 0; c < C; c++) {
                            size_t e = (size_t)row * C + c, gi = k.o_gate + (size_t)s * k.ld + c;
                            double rv = res[e] + (t == 2 && e == i ? dh : 0);
                            double xv = x[e] + (t == 0 && e == i ? dh : 0);
                            double gv = mod[gi] + (t == 1 && gi == i ? dh : 0);
                            L += (rv + gv * xv) * dout[e];
                        }
                    }
                    *(sign ? &lm : &lp) = L;
                }
                double num = (lp - lm) / (2 * h);
                if (fabs(grads[t][i] - num) > 1e-5 * scale + 1e-6)
                    fail_msg("gate_residual d%s[%zu]: backward %.9g, finite differences %.9g",
                             t == 0   ? "x"
                             : t == 1 ? "mod"
                                      : "res",
                             i, grads[t][i], num);
            }
            for (int p = 0; p < FD_PROBE; p++) { /* the kernel's own forward */
                size_t i = (size_t)p * 7919 % sizes[t];
                float keep = inputs[t][i];
                inputs[t][i] = keep + FD_H;
                ig_kernel_gate_residual_forward(be, o, res, x, mod + k.o_gate, k.ld, N, C, k.row0,
                                                k.rps);
                double lp = dot_d(o, dout, n);
                inputs[t][i] = keep - FD_H;
                ig_kernel_gate_residual_forward(be, o, res, x, mod + k.o_gate, k.ld, N, C, k.row0,
                                                k.rps);
                double lm = dot_d(o, dout, n);
                inputs[t][i] = keep;
                check_fd(grads[t][i], (lp - lm) / (2 * FD_H), scale, "gate_residual (own forward)",
                         i);
            }
        }
        tfree(f, gx), tfree(f, gm);
    }
    tfree(f, res), tfree(f, x), tfree(f, mod), tfree(f, dout), tfree(f, o);
}

/* ---- SiLU ------------------------------------------------------------------------------------ */

static void test_silu(void **state) {
    fixture *f = *state;
    size_t n = 100003; /* several chunks and a ragged end */
    float *x = talloc(f, n), *o1 = talloc(f, n), *o2 = talloc(f, n);
    fill(x, n, 40, -12, 12);
    float special[] = {0.0f, -0.0f, 100.0f, -100.0f, -88.0f, 89.0f, 1e-30f, -1e-30f};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) x[i * 977] = special[i];
    ig_kernel_silu_forward(f->ref, o1, x, n);
    ig_kernel_silu_forward(FAST(f), o2, x, n);
    check_close(o2, o1, n, 1e-6, "silu_forward");
    for (size_t i = 0; i < n; i++)
        if (!isfinite(o2[i])) fail_msg("silu_forward(%g) = %g", x[i], o2[i]);
    /* by hand: silu(1) = 1 / (1 + e^-1), silu(-2) = -2 / (1 + e^2) */
    {
        float v[2] = {1.0f, -2.0f}, *dv = tdup(f, v, 2), *ov = talloc(f, 2);
        for (int fast = 0; fast < 2; fast++) {
            ig_kernel_silu_forward(fast ? FAST(f) : f->ref, ov, dv, 2);
            assert_true(fabs(ov[0] - 0.7310585786300049) < 1e-7);
            assert_true(fabs(ov[1] - -0.2384058440442351) < 1e-7);
        }
        tfree(f, dv), tfree(f, ov);
    }
    float *dout = talloc(f, n), *d1 = talloc(f, n), *d2 = talloc(f, n);
    fill(dout, n, 41, -1, 1);
    ig_kernel_silu_backward(f->ref, d1, dout, x, n);
    ig_kernel_silu_backward(FAST(f), d2, dout, x, n);
    check_close(d2, d1, n, 1e-6, "silu_backward");
    float *io = tdup(f, dout, n); /* dinp = dout */
    ig_kernel_silu_backward(FAST(f), io, io, x, n);
    check_same(io, d2, n * 4, "silu_backward in place");
    memcpy(io, dout, n * 4);
    ig_kernel_silu_backward(f->ref, io, io, x, n);
    check_same(io, d1, n * 4, "silu_backward (reference) in place");
    for (int t = 0; t < NTHREADS; t++) {
        float *o4 = talloc(f, n), *d4 = talloc(f, n);
        ig_kernel_silu_forward(f->fast[t], o4, x, n);
        check_same(o4, o2, n * 4, "silu_forward threads");
        ig_kernel_silu_backward(f->fast[t], d4, dout, x, n);
        check_same(d4, d2, n * 4, "silu_backward threads");
        tfree(f, o4), tfree(f, d4);
    }
    /* finite differences of L = sum(silu(x) * dout): in double, and the kernels' own forward */
    size_t m = 50;
    float *xs = talloc(f, m), *os = talloc(f, m), *ds = talloc(f, m), *gs = talloc(f, m);
    fill(xs, m, 42, -6, 6), fill(ds, m, 43, -1, 1);
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        ig_kernel_silu_backward(be, gs, ds, xs, m);
        double scale = max_abs(gs, m);
        for (size_t i = 0; i < m; i++) {
            double h = 1e-6, xp = xs[i] + h, xm = xs[i] - h;
            double num = (xp / (1 + exp(-xp)) - xm / (1 + exp(-xm))) / (2 * h) * ds[i];
            if (fabs(gs[i] - num) > 1e-5 * scale + 1e-6)
                fail_msg("silu dinp[%zu]: backward %.9g, finite differences %.9g", i, gs[i], num);
            float keep = xs[i];
            xs[i] = keep + FD_H;
            ig_kernel_silu_forward(be, os, xs, m);
            double lp = dot_d(os, ds, m);
            xs[i] = keep - FD_H;
            ig_kernel_silu_forward(be, os, xs, m);
            double lm = dot_d(os, ds, m);
            xs[i] = keep;
            check_fd(gs[i], (lp - lm) / (2 * FD_H), scale, "silu (own forward)", i);
        }
    }
    float *all[] = {x, o1, o2, dout, d1, d2, io, xs, os, ds, gs};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

/* ---- MSE ------------------------------------------------------------------------------------- */

static void mse_case(fixture *f, int N, int K, uint64_t seed) {
    size_t n = (size_t)N * K;
    float gs = 1024.0f / (float)n; /* a loss scale over the elements: the mean's gradient */
    float *p = talloc(f, n), *t = talloc(f, n), *l1 = talloc(f, N), *l2 = talloc(f, N);
    float *g1 = talloc(f, n), *g2 = talloc(f, n);
    fill(p, n, seed, -2, 2), fill(t, n, seed + 1, -2, 2);
    ig_kernel_mse(f->ref, l1, g1, p, t, N, K, gs);
    ig_kernel_mse(FAST(f), l2, g2, p, t, N, K, gs);
    check_close(l2, l1, N, 1e-6, "mse losses");
    check_close(g2, g1, n, 1e-6, "mse dpred");
    for (int i = 0; i < N; i++) { /* by hand */
        double s = 0;
        for (int k = 0; k < K; k++) {
            double d = (double)p[(size_t)i * K + k] - t[(size_t)i * K + k];
            s += d * d;
            double gw = 2.0 * gs * d, gv = g2[(size_t)i * K + k];
            assert_true(fabs(gv - gw) <= 1e-6 * fabs(gw) + 1e-12);
        }
        assert_true(fabs(l2[i] - s) <= 1e-6 * s + 1e-12);
    }
    /* without dpred: the losses alone, pred untouched */
    float *keep = tdup(f, p, n), *l3 = talloc(f, N);
    ig_kernel_mse(FAST(f), l3, NULL, p, t, N, K, gs);
    check_same(l3, l2, (size_t)N * 4, "mse without dpred");
    check_same(p, keep, n * 4, "mse without dpred leaves pred");
    ig_kernel_mse(f->ref, l3, NULL, p, t, N, K, gs);
    check_same(l3, l1, (size_t)N * 4, "mse (reference) without dpred");
    /* in place: dpred = pred */
    float *io = tdup(f, p, n);
    ig_kernel_mse(FAST(f), l3, io, io, t, N, K, gs);
    check_same(io, g2, n * 4, "mse in place");
    check_same(l3, l2, (size_t)N * 4, "mse in place losses");
    memcpy(io, p, n * 4);
    ig_kernel_mse(f->ref, l3, io, io, t, N, K, gs);
    check_same(io, g1, n * 4, "mse (reference) in place");
    for (int th = 0; th < NTHREADS; th++) {
        float *l4 = talloc(f, N), *g4 = talloc(f, n);
        ig_kernel_mse(f->fast[th], l4, g4, p, t, N, K, gs);
        check_same(l4, l2, (size_t)N * 4, "mse losses threads");
        check_same(g4, g2, n * 4, "mse dpred threads");
        tfree(f, l4), tfree(f, g4);
    }
    float *all[] = {p, t, l1, l2, g1, g2, keep, l3, io};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static void test_mse(void **state) {
    fixture *f = *state;
    mse_case(f, 37, 16, 50);  /* DiT-S/2's 4 channels x 2 x 2 patch per token */
    mse_case(f, 5, 1, 51);    /* a column */
    mse_case(f, 3, 1031, 52); /* one row per sample, ragged lanes */
    mse_case(f, 1000, 7, 53); /* many chunks of rows */

    /* dpred is the gradient of grad_scale * sum(losses): finite differences in double and through
     * the kernel's own losses */
    int N = 4, K = 9;
    size_t n = (size_t)N * K;
    float gs = 3.0f / (float)n;
    float *p = talloc(f, n), *t = talloc(f, n), *l = talloc(f, N), *g = talloc(f, n);
    fill(p, n, 54, -2, 2), fill(t, n, 55, -2, 2);
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        ig_kernel_mse(be, l, g, p, t, N, K, gs);
        double scale = max_abs(g, n);
        for (size_t i = 0; i < n; i++) {
            double h = 1e-6, dp = (double)p[i] + h - t[i], dm = (double)p[i] - h - t[i];
            double num = gs * (dp * dp - dm * dm) / (2 * h);
            if (fabs(g[i] - num) > 1e-5 * scale + 1e-6)
                fail_msg("mse dpred[%zu]: %.9g, finite differences %.9g", i, g[i], num);
            float keep = p[i];
            p[i] = keep + FD_H;
            ig_kernel_mse(be, l, NULL, p, t, N, K, gs);
            double lp = 0;
            for (int r = 0; r < N; r++) lp += gs * (double)l[r];
            p[i] = keep - FD_H;
            ig_kernel_mse(be, l, NULL, p, t, N, K, gs);
            double lm = 0;
            for (int r = 0; r < N; r++) lm += gs * (double)l[r];
            p[i] = keep;
            check_fd(g[i], (lp - lm) / (2 * FD_H), scale, "mse (own losses)", i);
        }
    }
    tfree(f, p), tfree(f, t), tfree(f, l), tfree(f, g);
}

/* ---- the weights' moving average ------------------------------------------------------------ */

/* ema = decay ema + (1 - decay) w in float, from the master weights or the parameters; decay 0
 * copies (over NaN too); the fast kernel's bits equal the reference's on every thread count. */
static void test_ema(void **state) {
    fixture *f = *state;
    size_t n = 70001; /* several chunks, a ragged end */
    float *w = talloc(f, n), *e0 = talloc(f, n), *want = talloc(f, n), *e = talloc(f, n);
    fill(w, n, 70, -3, 3), fill(e0, n, 71, -3, 3);
    float d = 0.999f;
    for (size_t i = 0; i < n; i++) want[i] = d * e0[i] + (1.0f - d) * w[i];
    memcpy(e, e0, n * sizeof *e);
    ig_kernel_ema(f->ref, e, w, NULL, n, d);
    check_same(e, want, n * sizeof *e, "ema (reference, master)");
    for (int k = 0; k < NTHREADS; k++) {
        memcpy(e, e0, n * sizeof *e);
        ig_kernel_ema(f->fast[k], e, NULL, w, n, d);
        check_same(e, want, n * sizeof *e, "ema (fast, parameters)");
    }
    for (size_t i = 0; i < n; i++) e[i] = NAN;
    ig_kernel_ema(FAST(f), e, w, NULL, n, 0.0f);
    check_same(e, w, n * sizeof *e, "ema with decay 0: the weights");
    tfree(f, w), tfree(f, e0), tfree(f, want), tfree(f, e);
}

/* ---- the table ------------------------------------------------------------------------------- */

typedef struct trace_log {
    int calls;
    ig_op ops[8];
} trace_log;

static void trace_hook(void *user, ig_op op, double seconds) {
    trace_log *t = user;
    if (t->calls < 8) t->ops[t->calls] = op;
    t->calls++;
    assert_true(seconds >= 0);
}

/* the operations are named, in both CPU tables, traced; N = 0 (or n = 0) writes nothing */
static void test_dit_table(void **state) {
    fixture *f = *state;
    struct {
        ig_op op;
        const char *name;
    } ops[] = {{IG_OP_LAYERNORM_MODULATE_FORWARD, "layernorm_modulate_forward"},
               {IG_OP_LAYERNORM_MODULATE_BACKWARD, "layernorm_modulate_backward"},
               {IG_OP_GATE_RESIDUAL_FORWARD, "gate_residual_forward"},
               {IG_OP_GATE_RESIDUAL_BACKWARD, "gate_residual_backward"},
               {IG_OP_SILU_FORWARD, "silu_forward"},
               {IG_OP_SILU_BACKWARD, "silu_backward"},
               {IG_OP_MSE, "mse"},
               {IG_OP_EMA, "ema"}};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        assert_string_equal(ig_op_name(ops[i].op), ops[i].name);
        assert_true(ig_backend_supports(FAST(f), ops[i].op));
        assert_true(ig_backend_supports(f->ref, ops[i].op));
    }
    float *a = talloc(f, 64), *b = talloc(f, 64), *c = talloc(f, 64), *st = talloc(f, 4);
    fill(a, 64, 60, -1, 1), fill(b, 64, 61, -1, 1);
    float *keep = tdup(f, a, 64);
    trace_log log = {0};
    ig_backend_set_trace(FAST(f), trace_hook, &log);
    ig_kernel_layernorm_modulate_forward(FAST(f), a, st, st, b, b, b, 8, 0, 8, 3, 5, DIT_EPS);
    ig_kernel_layernorm_modulate_backward(FAST(f), a, a, a, b, b, b, 8, st, st, 0, 8, 3, 5);
    ig_kernel_gate_residual_forward(FAST(f), a, b, b, b, 8, 0, 8, 3, 5);
    ig_kernel_gate_residual_backward(FAST(f), a, a, b, b, b, 8, 0, 8, 3, 5);
    ig_kernel_silu_forward(FAST(f), a, b, 0);
    ig_kernel_silu_backward(FAST(f), a, b, b, 0);
    ig_kernel_mse(FAST(f), st, a, b, c, 0, 8, 1.0f);
    ig_backend_set_trace(FAST(f), NULL, NULL);
    check_same(a, keep, 64 * 4, "nothing written for N = 0");
    assert_int_equal(log.calls, 7);
    for (int i = 0; i < 7; i++) assert_int_equal(log.ops[i], ops[i].op);
    tfree(f, a), tfree(f, b), tfree(f, c), tfree(f, st), tfree(f, keep);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dit_table),
        cmocka_unit_test(test_modulate),
        cmocka_unit_test(test_modulate_by_hand),
        cmocka_unit_test(test_modulate_fd),
        cmocka_unit_test(test_gate_residual),
        cmocka_unit_test(test_gate_residual_fd),
        cmocka_unit_test(test_silu),
        cmocka_unit_test(test_mse),
        cmocka_unit_test(test_ema),
    };
    return cmocka_run_group_tests_name("kernels_dit", tests, setup, teardown);
}
