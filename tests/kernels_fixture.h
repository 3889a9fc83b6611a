/* kernels_fixture.h - what the CPU kernel tests share (tests/test_kernels.c, test_kernels_dit.c):
 * the fixture of a reference backend and the fast backend on 1, 2, 3 and 8 pool threads, buffers
 * allocated through the backend (host memory on the CPU, read and written directly), seeded random
 * fills, and the comparisons with their tolerances' conventions:
 *   check_close  max |a - b| over max |b| (b the reference) <= tol: "relative to the tensor's
 *                scale"
 *   check_same   bit for bit
 *   check_fd     an analytic gradient against a central finite difference of a loss summed in
 *                double over an fp32 forward (h = FD_H): within 2e-3 of the gradient's scale plus
 *                2e-3 absolute
 * Compiled into each of those test programs (tests/tests.cmake), not into igtest.
 */
#ifndef INGOT_TESTS_KERNELS_FIXTURE_H
#define INGOT_TESTS_KERNELS_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#define NTHREADS 4
extern const int thread_counts[NTHREADS]; /* 1, 2, 3, 8 */

typedef struct fixture {
    ig_ctx *ctx[NTHREADS];
    ig_backend *fast[NTHREADS]; /* the fast backend on 1, 2, 3, 8 threads */
    ig_backend *ref;            /* the reference backend (on ctx[0]) */
} fixture;

/* cmocka group setup and teardown: *state is the fixture */
int setup(void **state);
int teardown(void **state);

/* the fast backend on 2 threads: the one compared with the reference */
#define FAST(f) ((f)->fast[1])

/* buffers of n floats (or int32) from the backend, zeroed; tdup copies x */
float *talloc(fixture *f, size_t n);
int32_t *ialloc(fixture *f, size_t n);
void tfree(fixture *f, void *p);
float *tdup(fixture *f, const float *x, size_t n);

/* uniform in [lo, hi), from a 64-bit LCG keyed by seed */
void fill(float *x, size_t n, uint64_t seed, float lo, float hi);

double max_abs(const float *x, size_t n);
/* max |a - b| / max |b| (b the reference) must be <= tol */
void check_close(const float *a, const float *b, size_t n, double tol, const char *what);
void check_same(const void *a, const void *b, size_t bytes, const char *what);
/* finite-difference check: analytic gradient at index i against (L(x+h) - L(x-h)) / 2h */
void check_fd(double analytic, double numeric, double scale, const char *what, size_t i);
/* sum of a[i] * b[i] in double */
double dot_d(const float *a, const float *b, size_t n);

#define FD_H     1e-2f
#define FD_PROBE 12 /* elements of each input probed by finite differences */

#endif
