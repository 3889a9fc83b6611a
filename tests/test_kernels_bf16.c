/* test_kernels_bf16.c - the CPU backend's bf16 matmul (kernels/cpu/cpu_matmul_bf16.c, through
 * oneDNN's bf16 GEMM in cpu_gemm.c): forward and backward at several shapes (both weight layouts,
 * with and without bias and dinp, rows not a multiple of 64, small and GPT-2 small's), dw and
 * dbias accumulating over two calls with one rounding per call, the same bits for 1, 2 and 8 pool
 * threads and from run to run (with the operands at other addresses), one rounding per output
 * where two would differ (by hand), the scratch given back,
 * and the reference backend's refusal. Skipped, with the reason, on a CPU without AVX512-BF16 or
 * AMX-BF16.
 *
 * The oracle: the widened bf16 inputs summed in double (the reference kernels' sums, written
 * here as dot products of contiguous rows so that GPT-2's shapes take a second), rounded to fp32
 * then to bf16 as ig_cpu_ref_matmul_* on widened inputs followed by one rounding would be.
 * Tolerance, per element: within 1 bf16 ulp of the oracle's rounding. Why 1 ulp: products of
 * bf16 values are exact in fp32, so the kernel and the oracle sum the same numbers and differ only
 * in the fp32 rounding of the kernel's sums (in the library's order); that error is far below a
 * bf16 ulp unless the exact sum sits near a rounding boundary of bf16, where the two roundings
 * may fall on either side: one ulp. Where the terms cancel (an output much smaller than the sum of
 * the magnitudes of its terms) the fp32 error can pass one ulp of the small result; such an
 * element must instead be within the rigorous bound of recursive fp32 summation, gamma_n S + half
 * an ulp of the result (n terms, S the sum of their magnitudes, gamma_n = n u / (1 - n u), u =
 * 2^-24), and the test prints how many took that path. dbias: bit-identical to the oracle (both
 * sum dout's columns in double in row order).
 */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/backend_internal.h"
#include "kernels/cpu/cpu_internal.h"
#include "tests/kernels_fixture.h"

#define REQUIRE_BF16()                                                                             \
    do {                                                                                           \
        if (!ig_cpu_has_bf16()) {                                                                  \
            print_message("skipped: this CPU has neither AVX512-BF16 nor AMX-BF16 (cpuid), which " \
                          "the bf16 GEMM needs\n");                                                \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ---- bf16 buffers and the oracle --------------------------------------------------------------
 */

/* n bf16 values uniform in [lo, hi) (rounded), from the fixture's LCG */
static uint16_t *rand_bf16(size_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(x), assert_non_null(h);
    fill(x, n, seed, lo, hi);
    ig_backend_bf16_from_f32_n(h, x, n);
    free(x);
    return h;
}

static uint16_t *dup16(const uint16_t *x, size_t n) {
    uint16_t *p = malloc((n ? n : 1) * sizeof *p);
    assert_non_null(p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

static float *widen(const uint16_t *h, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    ig_backend_bf16_to_f32_n(x, h, n);
    return x;
}

/* x [R, Cc] transposed into a new [Cc, R] */
static float *transpose(const float *x, int R, int Cc) {
    size_t n = (size_t)R * Cc;
    float *t = malloc((n ? n : 1) * sizeof *t);
    assert_non_null(t);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) t[(size_t)c * R + r] = x[(size_t)r * Cc + c];
    return t;
}

/* sum[i, j] = A[i] . Bt[j] and mag[i, j] = |A[i]| . |Bt[j]| in double: A [M, K], Bt [N, K] */
static void oracle_gemm(double *sum, double *mag, const float *A, const float *Bt, int M, int N,
                        int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            const float *a = A + (size_t)i * K, *b = Bt + (size_t)j * K;
            double s = 0, m = 0;
            for (int k = 0; k < K; k++) {
                double p = (double)a[k] * b[k];
                s += p, m += fabs(p);
            }
            sum[(size_t)i * N + j] = s, mag[(size_t)i * N + j] = m;
        }
}

static int ordered(uint16_t h) {
    return h & 0x8000 ? -(int)(h & 0x7FFF) : (int)h;
}

/* got (bf16) against exact with mag the sum of its n terms' magnitudes: within 1 ulp of
 * bf16((float)exact), or within gamma_n mag + half an ulp of got. Returns the count of elements
 * that needed the second clause. */
static size_t check_bf16(const uint16_t *got, const double *exact, const double *mag, size_t count,
                         int n, const char *what) {
    double u = ldexp(1.0, -24), gamma = n * u / (1 - n * u);
    size_t cancelled = 0;
    for (size_t i = 0; i < count; i++) {
        uint16_t want = ig_backend_bf16_from_f32((float)exact[i]);
        if ((got[i] & 0x7F80) == 0x7F80 && (got[i] & 0x7F))
            fail_msg("%s[%zu]: NaN (0x%04x), want 0x%04x", what, i, got[i], want);
        if (abs(ordered(got[i]) - ordered(want)) <= 1) continue;
        double g = ig_backend_bf16_to_f32(got[i]);
        int e = 0;
        frexp(g, &e);
        double half_ulp = g != 0 ? ldexp(1.0, e - 9) : 0;
        if (fabs(g - exact[i]) <= gamma * mag[i] + half_ulp) {
            cancelled++;
            continue;
        }
        fail_msg("%s[%zu]: 0x%04x (%.9g) vs oracle 0x%04x (%.9g, exact %.12g): %d ulps, past "
                 "gamma_%d S = %.3g",
                 what, i, got[i], g, want, ig_backend_bf16_to_f32(want), exact[i],
                 abs(ordered(got[i]) - ordered(want)), n, gamma * mag[i]);
    }
    return cancelled;
}

/* ---- one forward and backward against the oracle --------------------------------------------- */

typedef struct mm_case {
    int N, C, OC;
    ig_w_layout layout;
    int bias, dinp;
} mm_case;

static void run_case(fixture *f, const mm_case *k, uint64_t seed) {
    ig_backend *be = FAST(f);
    int N = k->N, C = k->C, OC = k->OC, in_out = k->layout == IG_W_IN_OUT;
    size_t nin = (size_t)N * C, nout = (size_t)N * OC, nw = (size_t)C * OC;
    uint16_t *inp = rand_bf16(nin, seed, -1, 1), *w = rand_bf16(nw, seed + 1, -1, 1);
    uint16_t *bias = k->bias ? rand_bf16((size_t)OC, seed + 2, -1, 1) : NULL;
    uint16_t *dout = rand_bf16(nout, seed + 3, -1, 1);
    uint16_t *dw = rand_bf16(nw, seed + 4, -1, 1), *dbias = rand_bf16((size_t)OC, seed + 5, -1, 1);
    uint16_t *dw0 = dup16(dw, nw), *dbias0 = dup16(dbias, (size_t)OC);
    uint16_t *out = rand_bf16(nout, seed + 6, -1, 1), *dinp = rand_bf16(nin, seed + 7, -1, 1);
    float *fin = widen(inp, nin), *fw = widen(w, nw), *fdout = widen(dout, nout);
    /* W as [OC, C] rows (forward) and as [C, OC] rows (dinp) */
    float *w_oc_c = in_out ? transpose(fw, C, OC) : fw,
          *w_c_oc = in_out ? fw : transpose(fw, OC, C);
    size_t most = nout > nin ? nout : nin;
    most = most > nw ? most : nw;
    double *sum = malloc(most * sizeof *sum), *mag = malloc(most * sizeof *mag);
    assert_non_null(sum), assert_non_null(mag);
    char what[96];

    ig_cpu_bf16_matmul_forward(be, out, inp, w, k->layout, bias, N, C, OC);
    ig_cpu_bf16_matmul_backward(be, k->dinp ? dinp : NULL, dw, k->bias ? dbias : NULL, dout, inp, w,
                                k->layout, N, C, OC);
    ig_err err = {0};
    assert_int_equal(ig_backend_sync(be, &err), IG_OK);
    ig_backend_memory mem;
    ig_backend_memory_info(be, &mem);
    assert_int_equal(mem.workspace, 0); /* the scratch is given back */

    size_t cancelled = 0;
    oracle_gemm(sum, mag, fin, w_oc_c, N, OC, C);
    if (bias)
        for (size_t i = 0; i < nout; i++) {
            double b = ig_backend_bf16_to_f32(bias[i % (size_t)OC]);
            sum[i] += b, mag[i] += fabs(b);
        }
    snprintf(what, sizeof what, "forward %dx%d->%d %s%s", N, C, OC, in_out ? "in_out" : "out_in",
             bias ? " bias" : "");
    cancelled += check_bf16(out, sum, mag, nout, C + (bias != NULL), what);

    if (k->dinp) {
        oracle_gemm(sum, mag, fdout, w_c_oc, N, C, OC);
        snprintf(what, sizeof what, "dinp %dx%d->%d", N, C, OC);
        cancelled += check_bf16(dinp, sum, mag, nin, OC, what);
    }

    /* dW[c, o] = old + sum_n inp[n, c] dout[n, o], in W's layout */
    float *inT = transpose(fin, N, C), *doutT = transpose(fdout, N, OC);
    if (in_out)
        oracle_gemm(sum, mag, inT, doutT, C, OC, N);
    else
        oracle_gemm(sum, mag, doutT, inT, OC, C, N);
    for (size_t i = 0; i < nw; i++) {
        double old = ig_backend_bf16_to_f32(dw0[i]);
        sum[i] += old, mag[i] += fabs(old);
    }
    snprintf(what, sizeof what, "dw %dx%d->%d %s", N, C, OC, in_out ? "in_out" : "out_in");
    cancelled += check_bf16(dw, sum, mag, nw, N + 1, what);

    if (k->bias) { /* dbias: the oracle's own double sums in row order, bit for bit */
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int n = 0; n < N; n++) s += fdout[(size_t)n * OC + o];
            uint16_t want =
                ig_backend_bf16_from_f32((float)(ig_backend_bf16_to_f32(dbias0[o]) + s));
            if (dbias[o] != want)
                fail_msg("dbias %dx%d->%d [%d]: 0x%04x, want 0x%04x", N, C, OC, o, dbias[o], want);
        }
    } else {
        assert_memory_equal(dbias, dbias0, (size_t)OC * sizeof *dbias); /* untouched */
    }
    if (cancelled)
        print_message("  %dx%d->%d %s: %zu elements within the cancellation bound, not 1 ulp\n", N,
                      C, OC, in_out ? "in_out" : "out_in", cancelled);

    free(inT), free(doutT);
    if (in_out)
        free(w_oc_c);
    else
        free(w_c_oc);
    free(sum), free(mag), free(fin), free(fw), free(fdout);
    free(inp), free(w), free(bias), free(dout), free(dw), free(dbias), free(dw0), free(dbias0);
    free(out), free(dinp);
}

static void test_bf16_shapes(void **state) {
    REQUIRE_BF16();
    fixture *f = *state;
    static const mm_case cases[] = {
        {1, 1, 1, IG_W_IN_OUT, 1, 1},        {3, 5, 7, IG_W_OUT_IN, 0, 1},
        {37, 50, 70, IG_W_IN_OUT, 1, 0},     {37, 50, 70, IG_W_OUT_IN, 1, 1},
        {130, 96, 200, IG_W_IN_OUT, 0, 0},   {130, 96, 200, IG_W_OUT_IN, 1, 1},
        {65, 129, 300, IG_W_IN_OUT, 1, 1},   {200, 768, 100, IG_W_OUT_IN, 0, 1},
        {256, 768, 2304, IG_W_IN_OUT, 1, 1}, {256, 768, 2304, IG_W_OUT_IN, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(f, &cases[i], 100 + 10 * i);
}

/* ---- dw and dbias accumulate: one rounding per call -------------------------------------------
 */

static void test_bf16_accumulate(void **state) {
    REQUIRE_BF16();
    fixture *f = *state;
    ig_backend *be = FAST(f);
    int N = 70, C = 48, OC = 90;
    size_t nin = (size_t)N * C, nout = (size_t)N * OC, nw = (size_t)C * OC;
    for (int lay = 0; lay < 2; lay++) {
        ig_w_layout layout = lay ? IG_W_OUT_IN : IG_W_IN_OUT;
        uint16_t *inp = rand_bf16(nin, 1, -1, 1), *w = rand_bf16(nw, 2, -1, 1);
        uint16_t *dw = calloc(nw, 2), *dbias = calloc((size_t)OC, 2);
        assert_non_null(dw), assert_non_null(dbias);
        float *fin = widen(inp, nin);
        float *inT = transpose(fin, N, C);
        double *sum = malloc(nw * sizeof *sum), *mag = malloc(nw * sizeof *mag);
        assert_non_null(sum), assert_non_null(mag);
        for (int call = 0; call < 2; call++) {
            uint16_t *dout = rand_bf16(nout, 10 + (uint64_t)call, -1, 1);
            uint16_t *dw_before = dup16(dw, nw), *db_before = dup16(dbias, (size_t)OC);
            ig_cpu_bf16_matmul_backward(be, NULL, dw, dbias, dout, inp, w, layout, N, C, OC);
            ig_err err = {0};
            assert_int_equal(ig_backend_sync(be, &err), IG_OK);
            float *fd = widen(dout, nout), *fdT = transpose(fd, N, OC);
            if (layout == IG_W_IN_OUT)
                oracle_gemm(sum, mag, inT, fdT, C, OC, N);
            else
                oracle_gemm(sum, mag, fdT, inT, OC, C, N);
            for (size_t i = 0; i < nw; i++) { /* this call's sum onto what the last call left */
                double old = ig_backend_bf16_to_f32(dw_before[i]);
                sum[i] += old, mag[i] += fabs(old);
            }
            check_bf16(dw, sum, mag, nw, N + 1, call ? "dw, second call" : "dw, first call");
            for (int o = 0; o < OC; o++) {
                double s = 0;
                for (int n = 0; n < N; n++) s += fd[(size_t)n * OC + o];
                uint16_t want =
                    ig_backend_bf16_from_f32((float)(ig_backend_bf16_to_f32(db_before[o]) + s));
                if (dbias[o] != want)
                    fail_msg("dbias call %d [%d]: 0x%04x, want 0x%04x", call, o, dbias[o], want);
            }
            free(dout), free(dw_before), free(db_before), free(fd), free(fdT);
        }
        free(inp), free(w), free(dw), free(dbias), free(fin), free(inT), free(sum), free(mag);
    }
}

/* ---- the same bits for any thread count and from run to run -----------------------------------
 */

typedef struct mm_bits {
    uint16_t *out, *dinp, *dw, *dbias;
} mm_bits;

static mm_bits run_bits(ig_backend *be, const uint16_t *inp, const uint16_t *w,
                        const uint16_t *bias, const uint16_t *dout, ig_w_layout layout, int N,
                        int C, int OC) {
    size_t nw = (size_t)C * OC;
    mm_bits r = {calloc((size_t)N * OC, 2), calloc((size_t)N * C, 2), rand_bf16(nw, 77, -1, 1),
                 rand_bf16((size_t)OC, 78, -1, 1)};
    ig_cpu_bf16_matmul_forward(be, r.out, inp, w, layout, bias, N, C, OC);
    ig_cpu_bf16_matmul_backward(be, r.dinp, r.dw, r.dbias, dout, inp, w, layout, N, C, OC);
    ig_err err = {0};
    assert_int_equal(ig_backend_sync(be, &err), IG_OK);
    return r;
}

static void bits_free(mm_bits *r) {
    free(r->out), free(r->dinp), free(r->dw), free(r->dbias);
}

static void test_bf16_threads(void **state) {
    REQUIRE_BF16();
    fixture *f = *state;
    static const int shapes[][3] = {{300, 200, 520}, {4 * 64, 768, 768}, {100, 768, 2304}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int lay = 0; lay < 2; lay++) {
            int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
            ig_w_layout layout = lay ? IG_W_OUT_IN : IG_W_IN_OUT;
            size_t nin = (size_t)N * C, nout = (size_t)N * OC, nw = (size_t)C * OC;
            uint16_t *inp = rand_bf16(nin, 5 + s, -1, 1), *w = rand_bf16(nw, 6 + s, -1, 1);
            uint16_t *bias = rand_bf16((size_t)OC, 7, -1, 1);
            uint16_t *dout = rand_bf16(nout, 8 + s, -1, 1);
            mm_bits one = run_bits(f->fast[0], inp, w, bias, dout, layout, N, C, OC);
            int others[] = {1, 3}; /* 2 and 8 threads */
            for (int t = 0; t < 2; t++) {
                mm_bits r = run_bits(f->fast[others[t]], inp, w, bias, dout, layout, N, C, OC);
                check_same(r.out, one.out, nout * 2, "out, 1 thread vs more");
                check_same(r.dinp, one.dinp, nin * 2, "dinp, 1 thread vs more");
                check_same(r.dw, one.dw, nw * 2, "dw, 1 thread vs more");
                check_same(r.dbias, one.dbias, (size_t)OC * 2, "dbias, 1 thread vs more");
                bits_free(&r);
            }
            /* run to run, the operands at other addresses (one element off their alignment) */
            uint16_t *inp2 = malloc((nin + 1) * 2), *w2 = malloc((nw + 1) * 2);
            uint16_t *dout2 = malloc((nout + 1) * 2);
            assert_non_null(inp2), assert_non_null(w2), assert_non_null(dout2);
            memcpy(inp2 + 1, inp, nin * 2), memcpy(w2 + 1, w, nw * 2);
            memcpy(dout2 + 1, dout, nout * 2);
            mm_bits again = run_bits(FAST(f), inp2 + 1, w2 + 1, bias, dout2 + 1, layout, N, C, OC);
            check_same(again.out, one.out, nout * 2, "out, run to run");
            check_same(again.dinp, one.dinp, nin * 2, "dinp, run to run");
            check_same(again.dw, one.dw, nw * 2, "dw, run to run");
            bits_free(&again), bits_free(&one);
            free(inp2), free(w2), free(dout2), free(inp), free(w), free(bias), free(dout);
        }
}

/* ---- one rounding, by hand --------------------------------------------------------------------
 */

/* 1 + 2^-8 + 2^-16 rounds up to 1 + 2^-7 (0x3F81) in one step; rounded in two (the sum of the
 * products 2^-8 + 2^-16 to bf16 first: a tie, to even, 2^-8; then 1 + 2^-8: a tie, to even, 1.0)
 * it would be 0x3F80. */
static void test_bf16_one_rounding(void **state) {
    REQUIRE_BF16();
    fixture *f = *state;
    ig_backend *be = FAST(f);
    uint16_t one = 0x3F80, e8 = 0x3B80, e16 = 0x3780; /* 1, 2^-8, 2^-16 */
    assert_true(ig_backend_bf16_to_f32(e8) == 0x1p-8f && ig_backend_bf16_to_f32(e16) == 0x1p-16f);
    uint16_t inp[2] = {one, one}, w[2] = {e8, e16}, bias[1] = {one}, out[1] = {0};
    ig_cpu_bf16_matmul_forward(be, out, inp, w, IG_W_OUT_IN, bias, 1, 2, 1); /* 1 + 2^-8 + 2^-16 */
    /* dw[0] = 1 + inp^T dout over N = 2 rows: 1 + 2^-8 + 2^-16; dbias = 1 + the same */
    uint16_t x[2] = {one, one}, dout[2] = {e8, e16}, dw[1] = {one}, dbias[1] = {one}, dinp[2];
    uint16_t w1[1] = {one};
    ig_cpu_bf16_matmul_backward(be, dinp, dw, dbias, dout, x, w1, IG_W_IN_OUT, 2, 1, 1);
    ig_err err = {0};
    assert_int_equal(ig_backend_sync(be, &err), IG_OK);
    assert_int_equal(out[0], 0x3F81);
    assert_int_equal(dw[0], 0x3F81);
    assert_int_equal(dbias[0], 0x3F81);
    assert_int_equal(dinp[0], e8), assert_int_equal(dinp[1], e16); /* dout @ W^T, W = 1 */
}

/* ---- the reference backend has no bf16 GEMM ---------------------------------------------------
 */

static void test_bf16_reference_refuses(void **state) {
    fixture *f = *state;
    uint16_t a[4] = {0x3F80, 0x3F80, 0x3F80, 0x3F80}, out[4] = {0};
    ig_cpu_bf16_matmul_forward(f->ref, out, a, a, IG_W_IN_OUT, NULL, 2, 2, 2);
    ig_err err = {0};
    assert_int_equal(ig_backend_sync(f->ref, &err), IG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "fast CPU backend"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_shapes),
        cmocka_unit_test(test_bf16_accumulate),
        cmocka_unit_test(test_bf16_threads),
        cmocka_unit_test(test_bf16_one_rounding),
        cmocka_unit_test(test_bf16_reference_refuses),
    };
    return cmocka_run_group_tests_name("kernels_bf16", tests, setup, teardown);
}
