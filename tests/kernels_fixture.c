/* kernels_fixture.c - the CPU kernel tests' shared fixture and helpers (kernels_fixture.h). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels_fixture.h"

const int thread_counts[NTHREADS] = {1, 2, 3, 8};

int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    ig_err err = {0};
    for (int i = 0; i < NTHREADS; i++) {
        ig_ctx_opts o = ig_ctx_opts_default();
        o.threads = thread_counts[i];
        o.spin_us = 0; /* the sanitizer builds share few cores */
        if (ig_ctx_create(&f->ctx[i], &o, &err) != IG_OK) return -1;
        ig_backend_opts bo = ig_backend_opts_default();
        if (ig_backend_create(&f->fast[i], f->ctx[i], &bo, &err) != IG_OK) return -1;
    }
    ig_backend_opts bo = ig_backend_opts_default();
    bo.reference = 1;
    if (ig_backend_create(&f->ref, f->ctx[0], &bo, &err) != IG_OK) return -1;
    *state = f;
    return 0;
}

int teardown(void **state) {
    fixture *f = *state;
    ig_backend_free(f->ref);
    for (int i = 0; i < NTHREADS; i++) {
        ig_backend_free(f->fast[i]);
        ig_ctx_free(f->ctx[i]);
    }
    free(f);
    return 0;
}

float *talloc(fixture *f, size_t n) {
    void *p = NULL;
    ig_err err = {0};
    assert_int_equal(ig_backend_alloc(f->ref, n * sizeof(float), &p, &err), IG_OK);
    return p;
}

int32_t *ialloc(fixture *f, size_t n) {
    void *p = NULL;
    ig_err err = {0};
    assert_int_equal(ig_backend_alloc(f->ref, n * sizeof(int32_t), &p, &err), IG_OK);
    return p;
}

void tfree(fixture *f, void *p) {
    ig_backend_release(f->ref, p);
}

float *tdup(fixture *f, const float *x, size_t n) {
    float *p = talloc(f, n);
    memcpy(p, x, n * sizeof *p);
    return p;
}

/* uniform in [lo, hi), from a 64-bit LCG keyed by seed */
void fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
}

double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* max |a - b| / max |b| (b the reference) must be <= tol */
void check_close(const float *a, const float *b, size_t n, double tol, const char *what) {
    double scale = max_abs(b, n), worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) fail_msg("%s: NaN at %zu", what, i);
        double d = fabs((double)a[i] - b[i]);
        if (d > worst) worst = d, at = i;
    }
    double rel = scale > 0 ? worst / scale : worst;
    if (rel > tol)
        fail_msg("%s: max error %.3g of scale %.3g (%.3g > %.3g) at %zu: %.9g vs %.9g", what, worst,
                 scale, rel, tol, at, a[at], b[at]);
}

void check_same(const void *a, const void *b, size_t bytes, const char *what) {
    if (memcmp(a, b, bytes) != 0) fail_msg("%s: not bit-identical", what);
}

/* finite-difference check: analytic gradient g at index i against (L(x+h) - L(x-h)) / 2h */
void check_fd(double analytic, double numeric, double scale, const char *what, size_t i) {
    double tol = 2e-3 * scale + 2e-3;
    if (fabs(analytic - numeric) > tol)
        fail_msg("%s[%zu]: backward %.6g, finite differences %.6g (tolerance %.3g)", what, i,
                 analytic, numeric, tol);
}

double dot_d(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}
