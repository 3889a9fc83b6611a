/* test_kernels_vae.c - unit tests of the VAE's training-loss kernels (kernels/: ig_kernel_l1, the
 * reconstruction term; ig_kernel_posterior_forward / _backward, the posterior's sample with its
 * log-variance clamp and KL term) on the CPU backend: the fast kernels against the plain reference
 * ones, by hand, the same bits on 1, 2, 3 and 8 pool threads, in place where allowed, and every
 * gradient against central finite differences (in double from the formulas, h 1e-6; and through
 * the kernels' own forward, h 1e-2, check_fd). The clamp: a log-variance below -30 or above 20
 * samples and costs as the bound and gets no gradient; at a bound exactly it gets one (torch's
 * clamp). The CUDA kernels are held to the reference in test_cuda_conv.c.
 *
 * Tolerances: 1e-6 of the tensor's scale, fast (fp32 elementwise, libm's expf) against reference
 * (double), and for the row sums (double both).
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/kernels_fixture.h"

/* ---- L1 -------------------------------------------------------------------------------------- */

static void l1_case(fixture *f, int N, int K, uint64_t seed) {
    size_t n = (size_t)N * K;
    float gs = 1024.0f / (float)n;
    float *p = talloc(f, n), *t = talloc(f, n), *l1 = talloc(f, N), *l2 = talloc(f, N);
    float *g1 = talloc(f, n), *g2 = talloc(f, n);
    fill(p, n, seed, -2, 2), fill(t, n, seed + 1, -2, 2);
    for (size_t i = 0; i < n; i += 7) t[i] = p[i]; /* equal: sign 0 */
    ig_kernel_l1(f->ref, l1, g1, p, t, N, K, gs);
    ig_kernel_l1(FAST(f), l2, g2, p, t, N, K, gs);
    check_close(l2, l1, N, 1e-6, "l1 losses");
    check_same(g2, g1, n * 4, "l1 dpred (a sign times the scale)");
    for (int i = 0; i < N; i++) { /* by hand */
        double s = 0;
        for (int k = 0; k < K; k++) {
            size_t at = (size_t)i * K + k;
            double d = (double)p[at] - t[at];
            s += fabs(d);
            float want = d > 0 ? gs : d < 0 ? -gs : 0.0f;
            if (g2[at] != want) fail_msg("l1 dpred[%zu] = %g, want %g", at, g2[at], want);
        }
        assert_true(fabs(l2[i] - s) <= 1e-6 * s + 1e-12);
    }
    /* without dpred: the losses alone, pred untouched; in place: dpred = pred */
    float *keep = tdup(f, p, n), *l3 = talloc(f, N), *io = tdup(f, p, n);
    ig_kernel_l1(FAST(f), l3, NULL, p, t, N, K, gs);
    check_same(l3, l2, (size_t)N * 4, "l1 without dpred");
    check_same(p, keep, n * 4, "l1 without dpred leaves pred");
    ig_kernel_l1(FAST(f), l3, io, io, t, N, K, gs);
    check_same(io, g2, n * 4, "l1 in place");
    check_same(l3, l2, (size_t)N * 4, "l1 in place losses");
    memcpy(io, p, n * 4);
    ig_kernel_l1(f->ref, l3, io, io, t, N, K, gs);
    check_same(io, g1, n * 4, "l1 (reference) in place");
    for (int th = 0; th < NTHREADS; th++) {
        float *l4 = talloc(f, N), *g4 = talloc(f, n);
        ig_kernel_l1(f->fast[th], l4, g4, p, t, N, K, gs);
        check_same(l4, l2, (size_t)N * 4, "l1 losses threads");
        check_same(g4, g2, n * 4, "l1 dpred threads");
        tfree(f, l4), tfree(f, g4);
    }
    float *all[] = {p, t, l1, l2, g1, g2, keep, l3, io};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static void test_l1(void **state) {
    fixture *f = *state;
    l1_case(f, 37, 3, 10);   /* a pixel's RGB per row (the VAE's) */
    l1_case(f, 5, 1, 11);    /* a column */
    l1_case(f, 3, 1031, 12); /* long rows, ragged lanes */
    l1_case(f, 5000, 3, 13); /* many chunks of rows */
    /* finite differences of grad_scale * sum(losses) through the kernels' own losses (no element
     * within h of its target: |x| is smooth there) */
    int N = 4, K = 9;
    size_t n = (size_t)N * K;
    float gs = 3.0f / (float)n;
    float *p = talloc(f, n), *t = talloc(f, n), *l = talloc(f, N), *g = talloc(f, n);
    fill(p, n, 14, -2, 2), fill(t, n, 15, -2, 2);
    for (size_t i = 0; i < n; i++)
        if (fabs(p[i] - t[i]) < 0.1) p[i] = t[i] + 0.5f;
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        ig_kernel_l1(be, l, g, p, t, N, K, gs);
        double scale = max_abs(g, n);
        for (size_t i = 0; i < n; i++) {
            float keep = p[i];
            p[i] = keep + FD_H;
            ig_kernel_l1(be, l, NULL, p, t, N, K, gs);
            double lp = 0;
            for (int r = 0; r < N; r++) lp += gs * (double)l[r];
            p[i] = keep - FD_H;
            ig_kernel_l1(be, l, NULL, p, t, N, K, gs);
            double lm = 0;
            for (int r = 0; r < N; r++) lm += gs * (double)l[r];
            p[i] = keep;
            check_fd(g[i], (lp - lm) / (2 * FD_H), scale, "l1 (own losses)", i);
        }
    }
    tfree(f, p), tfree(f, t), tfree(f, l), tfree(f, g);
}

/* ---- the posterior --------------------------------------------------------------------------- */

/* z and KL of one element from the formulas, in double */
static double clampd(double v) {
    return v < -30 ? -30 : v > 20 ? 20 : v;
}

static void posterior_case(fixture *f, int N, int C, float ks, uint64_t seed) {
    size_t nm = (size_t)N * 2 * C, nz = (size_t)N * C;
    float *mo = talloc(f, nm), *eps = talloc(f, nz), *dz = talloc(f, nz);
    float *z1 = talloc(f, nz), *z2 = talloc(f, nz), *k1 = talloc(f, N), *k2 = talloc(f, N);
    float *d1 = talloc(f, nm), *d2 = talloc(f, nm);
    fill(mo, nm, seed, -3, 3), fill(eps, nz, seed + 1, -2, 2), fill(dz, nz, seed + 2, -1, 1);
    /* log-variances past the clamp, and at its bounds */
    float special[] = {-45.0f, 31.0f, -30.0f, 20.0f, -29.5f, 19.5f};
    for (size_t k = 0; k < sizeof special / sizeof *special && k < nz; k++) {
        size_t i = (k * 977) % nz, row = i / (size_t)C, c = i % (size_t)C;
        mo[row * 2 * C + C + c] = special[k];
    }
    ig_kernel_posterior_forward(f->ref, z1, k1, mo, eps, N, C);
    ig_kernel_posterior_forward(FAST(f), z2, k2, mo, eps, N, C);
    check_close(z2, z1, nz, 1e-6, "posterior z");
    check_close(k2, k1, N, 1e-6, "posterior kl");
    ig_kernel_posterior_backward(f->ref, d1, dz, mo, eps, N, C, ks);
    ig_kernel_posterior_backward(FAST(f), d2, dz, mo, eps, N, C, ks);
    check_close(d2, d1, nm, 1e-6, "posterior dmoments");
    for (int i = 0; i < N; i++) { /* by hand */
        double s = 0;
        for (int c = 0; c < C; c++) {
            double m = mo[(size_t)i * 2 * C + c], raw = mo[(size_t)i * 2 * C + C + c];
            double lv = clampd(raw), e = eps[(size_t)i * C + c], g = dz[(size_t)i * C + c];
            double zw = m + exp(0.5 * lv) * e;
            assert_true(fabs(z2[(size_t)i * C + c] - zw) <= 1e-6 * fabs(zw) + 1e-6);
            s += 0.5 * (m * m + exp(lv) - 1 - lv);
            double dm = g + ks * m, dl = raw >= -30 && raw <= 20 ? g * e * 0.5 * exp(0.5 * lv) +
                                                                       ks * 0.5 * (exp(lv) - 1)
                                                                 : 0.0;
            float gm = d2[(size_t)i * 2 * C + c], gl = d2[(size_t)i * 2 * C + C + c];
            if (fabs(gm - dm) > 1e-6 * fabs(dm) + 1e-6 || fabs(gl - dl) > 1e-5 * fabs(dl) + 1e-6)
                fail_msg("posterior backward [%d, %d] (logvar %g): %g %g, want %g %g", i, c, raw,
                         gm, gl, dm, dl);
            if (raw < -30 || raw > 20) assert_true(gl == 0.0f); /* past the clamp: none */
        }
        assert_true(fabs(k2[i] - s) <= 1e-6 * fabs(s) + 1e-6);
    }
    /* kl NULL: z alone, the same bits */
    float *z3 = talloc(f, nz);
    ig_kernel_posterior_forward(FAST(f), z3, NULL, mo, eps, N, C);
    check_same(z3, z2, nz * 4, "posterior without kl");
    for (int th = 0; th < NTHREADS; th++) {
        float *z4 = talloc(f, nz), *k4 = talloc(f, N), *d4 = talloc(f, nm);
        ig_kernel_posterior_forward(f->fast[th], z4, k4, mo, eps, N, C);
        ig_kernel_posterior_backward(f->fast[th], d4, dz, mo, eps, N, C, ks);
        check_same(z4, z2, nz * 4, "posterior z threads");
        check_same(k4, k2, (size_t)N * 4, "posterior kl threads");
        check_same(d4, d2, nm * 4, "posterior dmoments threads");
        tfree(f, z4), tfree(f, k4), tfree(f, d4);
    }
    float *all[] = {mo, eps, dz, z1, z2, k1, k2, d1, d2, z3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static void test_posterior(void **state) {
    fixture *f = *state;
    posterior_case(f, 37, 4, 1e-3f, 20);  /* SD's 4 latent channels */
    posterior_case(f, 5000, 4, 0.5f, 21); /* many chunks */
    posterior_case(f, 9, 33, 0.0f, 22);   /* ragged lanes, no KL gradient */
    posterior_case(f, 3, 16, 2.0f, 23);
}

/* L = sum(z * dz) + ks * sum(kl): the backward is its gradient, against central differences in
 * double (h 1e-6) and through each backend's own forward (h 1e-2) */
static void test_posterior_fd(void **state) {
    fixture *f = *state;
    int N = 3, C = 5;
    size_t nm = (size_t)N * 2 * C, nz = (size_t)N * C;
    float ks = 0.7f;
    float *mo = talloc(f, nm), *eps = talloc(f, nz), *dz = talloc(f, nz), *z = talloc(f, nz);
    float *kl = talloc(f, N), *g = talloc(f, nm);
    fill(mo, nm, 30, -2, 2), fill(eps, nz, 31, -2, 2), fill(dz, nz, 32, -1, 1);
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        ig_kernel_posterior_backward(be, g, dz, mo, eps, N, C, ks);
        double scale = max_abs(g, nm);
        for (size_t i = 0; i < nm; i++) {
            int row = (int)(i / (2 * (size_t)C)), c = (int)(i % (2 * (size_t)C));
            double num;
            { /* in double, from the formulas */
                double h = 1e-6, v[2];
                for (int s = 0; s < 2; s++) {
                    double x = mo[i] + (s ? -h : h), L = 0;
                    for (int k = 0; k < C; k++) {
                        double m = k == c ? x : mo[(size_t)row * 2 * C + k];
                        double lv = clampd(k + C == c ? x : mo[(size_t)row * 2 * C + C + k]);
                        double e = eps[(size_t)row * C + k];
                        L += (m + exp(0.5 * lv) * e) * dz[(size_t)row * C + k] +
                             ks * 0.5 * (m * m + exp(lv) - 1 - lv);
                    }
                    v[s] = L;
                }
                num = (v[0] - v[1]) / (2 * h);
            }
            if (fabs(g[i] - num) > 1e-5 * scale + 1e-6)
                fail_msg("posterior dmoments[%zu]: %.9g, finite differences %.9g", i, g[i], num);
            float keep = mo[i];
            double L[2];
            for (int s = 0; s < 2; s++) {
                mo[i] = keep + (s ? -FD_H : FD_H);
                ig_kernel_posterior_forward(be, z, kl, mo, eps, N, C);
                L[s] = dot_d(z, dz, nz);
                for (int r = 0; r < N; r++) L[s] += ks * (double)kl[r];
            }
            mo[i] = keep;
            check_fd(g[i], (L[0] - L[1]) / (2 * FD_H), scale, "posterior (own forward)", i);
        }
    }
    float *all[] = {mo, eps, dz, z, kl, g};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

/* the operations are named, in both CPU tables; N = 0 writes nothing */
static void test_vae_loss_table(void **state) {
    fixture *f = *state;
    struct {
        ig_op op;
        const char *name;
    } ops[] = {{IG_OP_L1, "l1"},
               {IG_OP_POSTERIOR_FORWARD, "posterior_forward"},
               {IG_OP_POSTERIOR_BACKWARD, "posterior_backward"}};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        assert_string_equal(ig_op_name(ops[i].op), ops[i].name);
        assert_true(ig_backend_supports(FAST(f), ops[i].op));
        assert_true(ig_backend_supports(f->ref, ops[i].op));
    }
    float *a = talloc(f, 16), *b = talloc(f, 16), *c = talloc(f, 16);
    fill(a, 16, 40, -1, 1);
    float *keep = tdup(f, a, 16);
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        ig_kernel_l1(be, a, a, b, c, 0, 3, 1.0f);
        ig_kernel_posterior_forward(be, a, a, b, c, 0, 4);
        ig_kernel_posterior_backward(be, a, b, c, b, 0, 4, 1.0f);
    }
    check_same(a, keep, 16 * 4, "nothing written for N = 0");
    tfree(f, a), tfree(f, b), tfree(f, c), tfree(f, keep);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_vae_loss_table),
                                       cmocka_unit_test(test_l1), cmocka_unit_test(test_posterior),
                                       cmocka_unit_test(test_posterior_fd)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
