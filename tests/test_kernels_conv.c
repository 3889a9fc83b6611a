/* test_kernels_conv.c - unit tests of the VAE's compute kernels (kernels/): 2-D convolution
 * forward and backward, GroupNorm (alone and fused with SiLU) forward and backward, nearest 2x
 * upsampling forward and backward, on the CPU backend: the fast kernels (oneDNN's convolutions,
 * the pool's chunks) against the plain reference ones; the CUDA kernels are held to the
 * reference in test_cuda_conv.c.
 *
 * Convolutions over the shapes where they go wrong: 3x3 padding 1 (the ResNet block's), the
 * downsample (3x3 stride 2, padding only bottom and right), 1x1 (the shortcut) with stride 1 and 2
 * (input rows no window reads), odd sizes, channels 3, 5, 13, 17 (not multiples of 16), outputs
 * that leave input rows and columns unread (the size rounded down), other asymmetric paddings, and
 * images tall enough to be cut into several bands of rows (the fast path's chunks; their halos in
 * the backward). For each: fast against reference (out, dinp, dw, dbias), dw and dbias added to
 * what they held and dinp overwritten, the bias optional, dinp skipped when NULL (dw's bits the
 * same), and the same bits on 1, 2, 3 and 8 pool threads. The backward against central finite
 * differences of L = sum(out * dout) through each backend's own forward (h = 1e-2, check_fd).
 * Goldens from torch.nn.functional.conv2d and autograd (tests/data/golden/kernels/
 * make_vae_t5_goldens.py): three convolutions of the VAE's kinds, every output and gradient.
 *
 * GroupNorm over groups of 1, 2, 3, 4 and 8 channels, one group and 32, samples of 1 to 1000 pixels
 * (one chunk of rows and many), inputs centred and off-centre by 100 standard deviations; with and
 * without SiLU: fast against reference (out, mean, rstd, dinp added to, dw, db), the same bits on
 * any thread count, the backward against finite differences in double (a double forward written
 * here, h = 1e-6), and torch.nn.GroupNorm's (+ F.silu's) outputs and gradients.
 *
 * Upsampling: the forward's copies bit for bit, the backward's sums of four against the
 * reference, torch's F.interpolate and its gradient, thread counts.
 *
 * Tolerances (max |fast - ref| over max |ref| of the tensor): 1e-5 for sums in fp32 against the
 * reference's double (a convolution's C KH KW terms, a weight gradient's N OH OW; GroupNorm's
 * gradients); 1e-6 for GroupNorm's output, fast against reference and against torch's (the spec:
 * torch's numerics within 1e-6 on fp32), 1e-5 for the other goldens.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/data/golden/kernels/vae_t5_golden.h"
#include "tests/kernels_fixture.h"

#define VAE_EPS 1e-6f /* the VAE's GroupNorm eps */

/* ---- convolution ----------------------------------------------------------------------------- */

static ig_conv2d_shape conv_shape(int N, int H, int W, int C, int OC, int K, int S, int pt, int pl,
                                  int pb, int pr) {
    ig_conv2d_shape s = {.N = N,
                         .H = H,
                         .W = W,
                         .C = C,
                         .OC = OC,
                         .KH = K,
                         .KW = K,
                         .stride = S,
                         .pad_top = pt,
                         .pad_left = pl,
                         .pad_bottom = pb,
                         .pad_right = pr};
    return s;
}

static size_t n_in(const ig_conv2d_shape *s) {
    return (size_t)s->N * s->H * s->W * s->C;
}
static size_t n_out(const ig_conv2d_shape *s) {
    return (size_t)s->N * ig_conv2d_out_h(s) * ig_conv2d_out_w(s) * s->OC;
}
static size_t n_w(const ig_conv2d_shape *s) {
    return (size_t)s->OC * s->KH * s->KW * s->C;
}

static void conv_name(const ig_conv2d_shape *s, char *buf, size_t cap) {
    snprintf(buf, cap, "conv %dx%dx%dx%d -> %d, %dx%d stride %d pad %d,%d,%d,%d", s->N, s->H, s->W,
             s->C, s->OC, s->KH, s->KW, s->stride, s->pad_top, s->pad_left, s->pad_bottom,
             s->pad_right);
}

static void conv_case(fixture *f, const ig_conv2d_shape *s, uint64_t seed) {
    char name[160], what[224];
    conv_name(s, name, sizeof name);
    size_t ni = n_in(s), no = n_out(s), nw = n_w(s);
    float *x = talloc(f, ni), *w = talloc(f, nw), *b = talloc(f, s->OC), *dout = talloc(f, no);
    fill(x, ni, seed, -1, 1), fill(w, nw, seed + 1, -0.5f, 0.5f), fill(b, s->OC, seed + 2, -1, 1);
    fill(dout, no, seed + 3, -1, 1);
    float *o1 = talloc(f, no), *o2 = talloc(f, no);
    ig_kernel_conv2d_forward(f->ref, o1, x, w, b, s);
    ig_kernel_conv2d_forward(FAST(f), o2, x, w, b, s);
    snprintf(what, sizeof what, "%s: forward", name);
    check_close(o2, o1, no, 1e-5, what);
    /* without bias */
    ig_kernel_conv2d_forward(f->ref, o1, x, w, NULL, s);
    ig_kernel_conv2d_forward(FAST(f), o2, x, w, NULL, s);
    snprintf(what, sizeof what, "%s: forward without bias", name);
    check_close(o2, o1, no, 1e-5, what);

    /* backward: dw and db accumulate into what they hold, dinp is overwritten (it holds NaN) */
    float *dw0 = talloc(f, nw), *db0 = talloc(f, s->OC);
    fill(dw0, nw, seed + 4, -1, 1), fill(db0, s->OC, seed + 5, -1, 1);
    float *di1 = talloc(f, ni), *di2 = talloc(f, ni);
    for (size_t i = 0; i < ni; i++) di1[i] = di2[i] = NAN;
    float *dw1 = tdup(f, dw0, nw), *dw2 = tdup(f, dw0, nw), *db1 = tdup(f, db0, s->OC),
          *db2 = tdup(f, db0, s->OC);
    ig_kernel_conv2d_backward(f->ref, di1, dw1, db1, dout, x, w, s);
    ig_kernel_conv2d_backward(FAST(f), di2, dw2, db2, dout, x, w, s);
    snprintf(what, sizeof what, "%s: dinp", name);
    check_close(di2, di1, ni, 1e-5, what);
    snprintf(what, sizeof what, "%s: dw", name);
    check_close(dw2, dw1, nw, 1e-5, what);
    snprintf(what, sizeof what, "%s: dbias", name);
    check_close(db2, db1, s->OC, 1e-5, what);
    /* the accumulation: dw - dw0 is the gradient alone (within the reference's rounding) */
    float *dwz = talloc(f, nw), *dbz = talloc(f, s->OC);
    ig_kernel_conv2d_backward(f->ref, NULL, dwz, dbz, dout, x, w, s);
    for (size_t i = 0; i < nw; i++) dwz[i] += dw0[i];
    for (int i = 0; i < s->OC; i++) dbz[i] += db0[i];
    snprintf(what, sizeof what, "%s: dw +=", name);
    check_close(dw1, dwz, nw, 1e-6, what);
    snprintf(what, sizeof what, "%s: dbias +=", name);
    check_close(db1, dbz, s->OC, 1e-6, what);

    /* dinp NULL: nothing else changes; dbias NULL: dw the same */
    float *dw3 = tdup(f, dw0, nw), *db3 = tdup(f, db0, s->OC);
    ig_kernel_conv2d_backward(FAST(f), NULL, dw3, db3, dout, x, w, s);
    snprintf(what, sizeof what, "%s: dw without dinp", name);
    check_same(dw3, dw2, nw * 4, what);
    check_same(db3, db2, (size_t)s->OC * 4, what);
    memcpy(dw3, dw0, nw * 4);
    ig_kernel_conv2d_backward(FAST(f), NULL, dw3, NULL, dout, x, w, s);
    snprintf(what, sizeof what, "%s: dw without dbias", name);
    check_same(dw3, dw2, nw * 4, what);

    /* the same bits on any thread count */
    ig_kernel_conv2d_forward(FAST(f), o2, x, w, b, s);
    for (int t = 0; t < NTHREADS; t++) {
        float *o4 = talloc(f, no), *di4 = talloc(f, ni), *dw4 = tdup(f, dw0, nw),
              *db4 = tdup(f, db0, s->OC);
        ig_kernel_conv2d_forward(f->fast[t], o4, x, w, b, s);
        ig_kernel_conv2d_backward(f->fast[t], di4, dw4, db4, dout, x, w, s);
        snprintf(what, sizeof what, "%s: %d threads", name, thread_counts[t]);
        check_same(o4, o2, no * 4, what);
        check_same(di4, di2, ni * 4, what);
        check_same(dw4, dw2, nw * 4, what);
        check_same(db4, db2, (size_t)s->OC * 4, what);
        tfree(f, o4), tfree(f, di4), tfree(f, dw4), tfree(f, db4);
    }
    ig_err err = {0};
    assert_int_equal(ig_backend_sync(FAST(f), &err), IG_OK);
    float *all[] = {x,   w,   b,   dout, o1,  o2,  dw0, db0, di1,
                    di2, dw1, dw2, db1,  db2, dwz, dbz, dw3, db3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static void test_conv(void **state) {
    fixture *f = *state;
    ig_conv2d_shape shapes[] = {
        conv_shape(1, 9, 7, 3, 5, 3, 1, 1, 1, 1, 1),     /* conv_in-like: 3 channels */
        conv_shape(2, 12, 10, 17, 19, 3, 1, 1, 1, 1, 1), /* channels off 16 */
        conv_shape(1, 8, 8, 16, 32, 3, 2, 0, 0, 1, 1),   /* the downsample */
        conv_shape(2, 9, 11, 13, 8, 3, 2, 0, 0, 1, 1),   /* odd downsample: a column unread */
        conv_shape(3, 6, 5, 24, 40, 1, 1, 0, 0, 0, 0),   /* the 1x1 shortcut */
        conv_shape(1, 10, 9, 8, 12, 1, 2, 0, 0, 0, 0),   /* 1x1 stride 2: odd rows unread */
        conv_shape(1, 70, 12, 32, 48, 3, 1, 1, 1, 1, 1), /* many bands of rows */
        conv_shape(2, 33, 17, 13, 21, 3, 2, 1, 1, 1, 1), /* stride 2 pad 1: a row unread */
        conv_shape(1, 5, 6, 4, 4, 3, 1, 2, 0, 0, 2),     /* other asymmetric padding */
        conv_shape(1, 40, 9, 5, 3, 3, 2, 0, 0, 1, 1),    /* conv_out-like: 3 outputs, bands */
        conv_shape(20, 4, 4, 8, 8, 3, 1, 1, 1, 1, 1),    /* more samples than chunks */
        conv_shape(1, 1, 1, 6, 7, 1, 1, 0, 0, 0, 0),     /* one pixel */
        conv_shape(1, 3, 3, 2, 70, 3, 1, 0, 0, 0, 0),    /* one output pixel, many channels */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) conv_case(f, &shapes[i], 100 + i);
}

/* L = sum(out * dout) through the backend's own forward: its gradients by finite differences */
static void test_conv_fd(void **state) {
    fixture *f = *state;
    ig_conv2d_shape ss[] = {conv_shape(2, 7, 6, 5, 4, 3, 2, 0, 0, 1, 1),
                            conv_shape(1, 6, 5, 3, 6, 3, 1, 1, 1, 1, 1)};
    for (int k = 0; k < 2; k++) {
        const ig_conv2d_shape *s = &ss[k];
        size_t ni = n_in(s), no = n_out(s), nw = n_w(s);
        float *x = talloc(f, ni), *w = talloc(f, nw), *b = talloc(f, s->OC), *dout = talloc(f, no);
        fill(x, ni, 200, -1, 1), fill(w, nw, 201, -1, 1), fill(b, s->OC, 202, -1, 1);
        fill(dout, no, 203, -1, 1);
        float *o = talloc(f, no);
        for (int fast = 0; fast < 2; fast++) {
            ig_backend *be = fast ? FAST(f) : f->ref;
            float *di = talloc(f, ni), *dw = talloc(f, nw), *db = talloc(f, s->OC);
            ig_kernel_conv2d_backward(be, di, dw, db, dout, x, w, s);
            float *inputs[3] = {x, w, b}, *grads[3] = {di, dw, db};
            size_t sizes[3] = {ni, nw, (size_t)s->OC};
            const char *names[3] = {"conv2d dinp", "conv2d dw", "conv2d dbias"};
            for (int t = 0; t < 3; t++) {
                double scale = max_abs(grads[t], sizes[t]);
                for (int p = 0; p < FD_PROBE; p++) {
                    size_t i = (size_t)p * 7919 % sizes[t];
                    float keep = inputs[t][i];
                    inputs[t][i] = keep + FD_H;
                    ig_kernel_conv2d_forward(be, o, x, w, b, s);
                    double lp = dot_d(o, dout, no);
                    inputs[t][i] = keep - FD_H;
                    ig_kernel_conv2d_forward(be, o, x, w, b, s);
                    double lm = dot_d(o, dout, no);
                    inputs[t][i] = keep;
                    check_fd(grads[t][i], (lp - lm) / (2 * FD_H), scale, names[t], i);
                }
            }
            tfree(f, di), tfree(f, dw), tfree(f, db);
        }
        tfree(f, x), tfree(f, w), tfree(f, b), tfree(f, dout), tfree(f, o);
    }
}

/* torch's F.conv2d and autograd on the VAE's three kinds of convolution */
static void conv_golden(fixture *f, const int *d, const float *gx, const float *gw, const float *gb,
                        int has_bias, const float *gout, const float *gdout, const float *gdx,
                        const float *gdw, const float *gdb, const char *name) {
    ig_conv2d_shape s =
        conv_shape(d[0], d[1], d[2], d[3], d[4], d[5], d[7], d[8], d[9], d[10], d[11]);
    size_t ni = n_in(&s), no = n_out(&s), nw = n_w(&s);
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *x = tdup(f, gx, ni), *w = tdup(f, gw, nw), *b = tdup(f, gb, s.OC);
        float *dout = tdup(f, gdout, no), *o = talloc(f, no), *di = talloc(f, ni),
              *dw = talloc(f, nw), *db = talloc(f, s.OC);
        ig_kernel_conv2d_forward(be, o, x, w, has_bias ? b : NULL, &s);
        ig_kernel_conv2d_backward(be, di, dw, has_bias ? db : NULL, dout, x, w, &s);
        char what[96];
        snprintf(what, sizeof what, "%s golden (%s): out", name, fast ? "fast" : "reference");
        check_close(o, gout, no, 1e-5, what);
        snprintf(what, sizeof what, "%s golden (%s): dinp", name, fast ? "fast" : "reference");
        check_close(di, gdx, ni, 1e-5, what);
        snprintf(what, sizeof what, "%s golden (%s): dw", name, fast ? "fast" : "reference");
        check_close(dw, gdw, nw, 1e-5, what);
        snprintf(what, sizeof what, "%s golden (%s): dbias", name, fast ? "fast" : "reference");
        check_close(db, gdb, s.OC, 1e-5, what);
        float *all[] = {x, w, b, dout, o, di, dw, db};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    }
}

static void test_conv_golden(void **state) {
    fixture *f = *state;
    const int conv3[] = {G_CONV3_DIMS}, down[] = {G_DOWN_DIMS}, shrt[] = {G_SHORT_DIMS};
    assert_int_equal(G_CONV3_OH * G_CONV3_OW,
                     ig_conv2d_out_h(&(ig_conv2d_shape){
                         .H = conv3[1], .KH = 3, .stride = 1, .pad_top = 1, .pad_bottom = 1}) *
                         G_CONV3_OW);
    ig_conv2d_shape ds = conv_shape(down[0], down[1], down[2], down[3], down[4], down[5], down[7],
                                    down[8], down[9], down[10], down[11]);
    assert_int_equal(ig_conv2d_out_h(&ds), G_DOWN_OH);
    assert_int_equal(ig_conv2d_out_w(&ds), G_DOWN_OW);
    conv_golden(f, conv3, g_conv3_x, g_conv3_w, g_conv3_b, 1, g_conv3_out, g_conv3_dout, g_conv3_dx,
                g_conv3_dw, g_conv3_db, "conv 3x3");
    conv_golden(f, down, g_down_x, g_down_w, g_down_b, 1, g_down_out, g_down_dout, g_down_dx,
                g_down_dw, g_down_db, "downsample");
    conv_golden(f, shrt, g_short_x, g_short_w, g_short_b, 0, g_short_out, g_short_dout, g_short_dx,
                g_short_dw, g_short_db, "1x1 shortcut");
}

/* ---- GroupNorm ------------------------------------------------------------------------------- */

static void gn_case(fixture *f, int N, int HW, int C, int G, int silu, float offset,
                    uint64_t seed) {
    char name[128], what[192];
    snprintf(name, sizeof name, "groupnorm N=%d HW=%d C=%d G=%d silu=%d offset=%g", N, HW, C, G,
             silu, offset);
    size_t n = (size_t)N * HW * C, ng = (size_t)N * G;
    float *x = talloc(f, n), *w = talloc(f, C), *b = talloc(f, C), *dout = talloc(f, n);
    fill(x, n, seed, -2 + offset, 2 + offset), fill(w, C, seed + 1, 0.5f, 1.5f);
    fill(b, C, seed + 2, -1, 1), fill(dout, n, seed + 3, -1, 1);
    float *o1 = talloc(f, n), *o2 = talloc(f, n), *m1 = talloc(f, ng), *m2 = talloc(f, ng),
          *r1 = talloc(f, ng), *r2 = talloc(f, ng);
    ig_kernel_groupnorm_forward(f->ref, o1, m1, r1, x, w, b, N, HW, C, G, VAE_EPS, silu);
    ig_kernel_groupnorm_forward(FAST(f), o2, m2, r2, x, w, b, N, HW, C, G, VAE_EPS, silu);
    snprintf(what, sizeof what, "%s: out", name);
    check_close(o2, o1, n, 1e-6, what);
    snprintf(what, sizeof what, "%s: mean", name);
    check_close(m2, m1, ng, 1e-6, what);
    snprintf(what, sizeof what, "%s: rstd", name);
    check_close(r2, r1, ng, 1e-5, what);

    /* backward from the reference's statistics, into nonzero gradients */
    float *di0 = talloc(f, n), *dw0 = talloc(f, C), *db0 = talloc(f, C);
    fill(di0, n, seed + 4, -1, 1), fill(dw0, C, seed + 5, -1, 1), fill(db0, C, seed + 6, -1, 1);
    float *di1 = tdup(f, di0, n), *di2 = tdup(f, di0, n), *dw1 = tdup(f, dw0, C),
          *dw2 = tdup(f, dw0, C), *db1 = tdup(f, db0, C), *db2 = tdup(f, db0, C);
    ig_kernel_groupnorm_backward(f->ref, di1, dw1, db1, dout, x, w, b, m1, r1, N, HW, C, G, silu);
    ig_kernel_groupnorm_backward(FAST(f), di2, dw2, db2, dout, x, w, b, m1, r1, N, HW, C, G, silu);
    snprintf(what, sizeof what, "%s: dinp", name);
    check_close(di2, di1, n, 1e-5, what);
    snprintf(what, sizeof what, "%s: dw", name);
    check_close(dw2, dw1, C, 1e-5, what);
    snprintf(what, sizeof what, "%s: db", name);
    check_close(db2, db1, C, 1e-5, what);

    for (int t = 0; t < NTHREADS; t++) {
        float *o4 = talloc(f, n), *m4 = talloc(f, ng), *r4 = talloc(f, ng), *di4 = tdup(f, di0, n),
              *dw4 = tdup(f, dw0, C), *db4 = tdup(f, db0, C);
        ig_kernel_groupnorm_forward(f->fast[t], o4, m4, r4, x, w, b, N, HW, C, G, VAE_EPS, silu);
        ig_kernel_groupnorm_backward(f->fast[t], di4, dw4, db4, dout, x, w, b, m1, r1, N, HW, C, G,
                                     silu);
        snprintf(what, sizeof what, "%s: %d threads", name, thread_counts[t]);
        check_same(o4, o2, n * 4, what);
        check_same(m4, m2, ng * 4, what);
        check_same(r4, r2, ng * 4, what);
        check_same(di4, di2, n * 4, what);
        check_same(dw4, dw2, (size_t)C * 4, what);
        check_same(db4, db2, (size_t)C * 4, what);
        tfree(f, o4), tfree(f, m4), tfree(f, r4), tfree(f, di4), tfree(f, dw4), tfree(f, db4);
    }
    float *all[] = {x,   w,   b,   dout, o1,  o2,  m1,  m2,  r1, r2,
                    di0, dw0, db0, di1,  di2, dw1, dw2, db1, db2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static void test_groupnorm(void **state) {
    fixture *f = *state;
    for (int silu = 0; silu < 2; silu++) {
        gn_case(f, 1, 7, 8, 2, silu, 0, 300);      /* 4 channels a group */
        gn_case(f, 2, 33, 24, 8, silu, 0, 301);    /* 3 */
        gn_case(f, 3, 130, 96, 32, silu, 0, 302);  /* 3, the VAE's 32 groups */
        gn_case(f, 1, 1000, 64, 32, silu, 0, 303); /* many chunks of rows */
        gn_case(f, 2, 5, 6, 6, silu, 0, 304);      /* one channel a group */
        gn_case(f, 1, 9, 5, 1, silu, 0, 305);      /* one group */
        gn_case(f, 2, 200, 16, 4, silu, 100, 306); /* far off-centre */
        gn_case(f, 70, 3, 8, 4, silu, 0, 307);     /* more samples than chunks */
    }
}

/* GroupNorm (+ SiLU) in double: the loss sum(out * dout) */
static double gn_loss_d(const double *x, const double *w, const double *b, const float *dout, int N,
                        int HW, int C, int G, int silu) {
    int Cg = C / G;
    double L = 0;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            double s = 0, ss = 0, M = (double)HW * Cg;
            for (int r = 0; r < HW; r++)
                for (int c = g * Cg; c < (g + 1) * Cg; c++) s += x[((size_t)n * HW + r) * C + c];
            double m = s / M;
            for (int r = 0; r < HW; r++)
                for (int c = g * Cg; c < (g + 1) * Cg; c++) {
                    double d = x[((size_t)n * HW + r) * C + c] - m;
                    ss += d * d;
                }
            double rs = 1.0 / sqrt(ss / M + 1e-6);
            for (int r = 0; r < HW; r++)
                for (int c = g * Cg; c < (g + 1) * Cg; c++) {
                    size_t i = ((size_t)n * HW + r) * C + c;
                    double y = (x[i] - m) * rs * w[c] + b[c];
                    L += (silu ? y / (1 + exp(-y)) : y) * dout[i];
                }
        }
    return L;
}

static void test_groupnorm_fd(void **state) {
    fixture *f = *state;
    int N = 2, HW = 6, C = 6, G = 3;
    size_t n = (size_t)N * HW * C;
    float *x = talloc(f, n), *w = talloc(f, C), *b = talloc(f, C), *dout = talloc(f, n);
    fill(x, n, 400, -2, 2), fill(w, C, 401, 0.5f, 1.5f), fill(b, C, 402, -1, 1);
    fill(dout, n, 403, -1, 1);
    double *xd = malloc(n * sizeof *xd), wd[6], bd[6];
    for (size_t i = 0; i < n; i++) xd[i] = x[i];
    for (int c = 0; c < C; c++) wd[c] = w[c], bd[c] = b[c];
    for (int silu = 0; silu < 2; silu++)
        for (int fast = 0; fast < 2; fast++) {
            ig_backend *be = fast ? FAST(f) : f->ref;
            float *o = talloc(f, n), *m = talloc(f, N * G), *r = talloc(f, N * G);
            float *di = talloc(f, n), *dw = talloc(f, C), *db = talloc(f, C);
            ig_kernel_groupnorm_forward(be, o, m, r, x, w, b, N, HW, C, G, VAE_EPS, silu);
            ig_kernel_groupnorm_backward(be, di, dw, db, dout, x, w, b, m, r, N, HW, C, G, silu);
            double *targets[3] = {xd, wd, bd};
            float *grads[3] = {di, dw, db};
            size_t sizes[3] = {n, (size_t)C, (size_t)C};
            for (int t = 0; t < 3; t++) {
                double scale = max_abs(grads[t], sizes[t]);
                for (size_t i = 0; i < sizes[t]; i++) {
                    double keep = targets[t][i], h = 1e-6;
                    targets[t][i] = keep + h;
                    double lp = gn_loss_d(xd, wd, bd, dout, N, HW, C, G, silu);
                    targets[t][i] = keep - h;
                    double lm = gn_loss_d(xd, wd, bd, dout, N, HW, C, G, silu);
                    targets[t][i] = keep;
                    double num = (lp - lm) / (2 * h);
                    if (fabs(grads[t][i] - num) > 1e-5 * scale + 1e-6)
                        fail_msg("groupnorm silu=%d %s[%zu] (%s): backward %.9g, finite "
                                 "differences %.9g",
                                 silu,
                                 t == 0   ? "dinp"
                                 : t == 1 ? "dw"
                                          : "db",
                                 i, fast ? "fast" : "reference", grads[t][i], num);
                }
            }
            tfree(f, o), tfree(f, m), tfree(f, r), tfree(f, di), tfree(f, dw), tfree(f, db);
        }
    free(xd);
    tfree(f, x), tfree(f, w), tfree(f, b), tfree(f, dout);
}

/* torch.nn.GroupNorm(4, 8, eps=1e-6) (+ F.silu) */
static void test_groupnorm_golden(void **state) {
    fixture *f = *state;
    const int d[] = {G_GN_DIMS};
    int N = d[0], HW = d[1], C = d[2], G = d[3];
    size_t n = (size_t)N * HW * C;
    const float *gout[2] = {g_gn0_out, g_gn1_out}, *gdx[2] = {g_gn0_dx, g_gn1_dx},
                *gdw[2] = {g_gn0_dw, g_gn1_dw}, *gdb[2] = {g_gn0_db, g_gn1_db};
    for (int silu = 0; silu < 2; silu++)
        for (int fast = 0; fast < 2; fast++) {
            ig_backend *be = fast ? FAST(f) : f->ref;
            float *x = tdup(f, g_gn_x, n), *w = tdup(f, g_gn_w, C), *b = tdup(f, g_gn_b, C),
                  *dout = tdup(f, g_gn_dout, n);
            float *o = talloc(f, n), *m = talloc(f, N * G), *r = talloc(f, N * G),
                  *di = talloc(f, n), *dw = talloc(f, C), *db = talloc(f, C);
            ig_kernel_groupnorm_forward(be, o, m, r, x, w, b, N, HW, C, G, VAE_EPS, silu);
            ig_kernel_groupnorm_backward(be, di, dw, db, dout, x, w, b, m, r, N, HW, C, G, silu);
            char what[96];
            snprintf(what, sizeof what, "groupnorm golden silu=%d (%s)", silu,
                     fast ? "fast" : "reference");
            check_close(o, gout[silu], n, 1e-6, what);
            check_close(m, g_gn0_mean, (size_t)N * G, 1e-6, what);
            check_close(di, gdx[silu], n, 1e-5, what);
            check_close(dw, gdw[silu], C, 1e-5, what);
            check_close(db, gdb[silu], C, 1e-5, what);
            float *all[] = {x, w, b, dout, o, m, r, di, dw, db};
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
        }
}

/* ---- upsampling ------------------------------------------------------------------------------ */

static void up_case(fixture *f, int N, int H, int W, int C, uint64_t seed) {
    size_t n = (size_t)N * H * W * C, n4 = 4 * n;
    float *x = talloc(f, n), *dout = talloc(f, n4), *o1 = talloc(f, n4), *o2 = talloc(f, n4);
    float *d1 = talloc(f, n), *d2 = talloc(f, n);
    fill(x, n, seed, -1, 1), fill(dout, n4, seed + 1, -1, 1);
    ig_kernel_upsample2x_forward(f->ref, o1, x, N, H, W, C);
    ig_kernel_upsample2x_forward(FAST(f), o2, x, N, H, W, C);
    check_same(o2, o1, n4 * 4, "upsample2x_forward");
    for (int y = 0; y < 2 * H; y++) /* sample N-1 by hand */
        for (int xx = 0; xx < 2 * W; xx++)
            for (int c = 0; c < C; c++)
                assert_true(o2[(((size_t)(N - 1) * 2 * H + y) * 2 * W + xx) * C + c] ==
                            x[(((size_t)(N - 1) * H + y / 2) * W + xx / 2) * C + c]);
    for (size_t i = 0; i < n; i++) d2[i] = NAN; /* overwritten */
    ig_kernel_upsample2x_backward(f->ref, d1, dout, N, H, W, C);
    ig_kernel_upsample2x_backward(FAST(f), d2, dout, N, H, W, C);
    check_close(d2, d1, n, 1e-6, "upsample2x_backward");
    for (int t = 0; t < NTHREADS; t++) {
        float *o4 = talloc(f, n4), *d4 = talloc(f, n);
        ig_kernel_upsample2x_forward(f->fast[t], o4, x, N, H, W, C);
        ig_kernel_upsample2x_backward(f->fast[t], d4, dout, N, H, W, C);
        check_same(o4, o2, n4 * 4, "upsample2x_forward threads");
        check_same(d4, d2, n * 4, "upsample2x_backward threads");
        tfree(f, o4), tfree(f, d4);
    }
    tfree(f, x), tfree(f, dout), tfree(f, o1), tfree(f, o2), tfree(f, d1), tfree(f, d2);
}

static void test_upsample(void **state) {
    fixture *f = *state;
    up_case(f, 1, 1, 1, 1, 500);
    up_case(f, 2, 3, 5, 7, 501);
    up_case(f, 1, 32, 17, 64, 502);
    up_case(f, 3, 70, 2, 3, 503);
    /* torch's F.interpolate(scale_factor=2, mode="nearest") and its gradient */
    const int d[] = {G_UP_DIMS};
    size_t n = (size_t)d[0] * d[1] * d[2] * d[3];
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *x = tdup(f, g_up_x, n), *dout = tdup(f, g_up_dout, 4 * n), *o = talloc(f, 4 * n),
              *di = talloc(f, n);
        ig_kernel_upsample2x_forward(be, o, x, d[0], d[1], d[2], d[3]);
        ig_kernel_upsample2x_backward(be, di, dout, d[0], d[1], d[2], d[3]);
        check_same(o, g_up_out, 4 * n * 4, "upsample2x_forward golden");
        check_close(di, g_up_dx, n, 1e-6, "upsample2x_backward golden");
        tfree(f, x), tfree(f, dout), tfree(f, o), tfree(f, di);
    }
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

/* the operations are named, in both CPU tables, traced; N = 0 writes nothing */
static void test_vae_table(void **state) {
    fixture *f = *state;
    struct {
        ig_op op;
        const char *name;
    } ops[] = {{IG_OP_CONV2D_FORWARD, "conv2d_forward"},
               {IG_OP_CONV2D_BACKWARD, "conv2d_backward"},
               {IG_OP_GROUPNORM_FORWARD, "groupnorm_forward"},
               {IG_OP_GROUPNORM_BACKWARD, "groupnorm_backward"},
               {IG_OP_UPSAMPLE2X_FORWARD, "upsample2x_forward"},
               {IG_OP_UPSAMPLE2X_BACKWARD, "upsample2x_backward"}};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        assert_string_equal(ig_op_name(ops[i].op), ops[i].name);
        assert_true(ig_backend_supports(FAST(f), ops[i].op));
        assert_true(ig_backend_supports(f->ref, ops[i].op));
    }
    float *a = talloc(f, 64), *b = talloc(f, 64), *st = talloc(f, 4);
    fill(a, 64, 60, -1, 1), fill(b, 64, 61, -1, 1);
    float *keep = tdup(f, a, 64);
    ig_conv2d_shape s = conv_shape(0, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0);
    trace_log log = {0};
    ig_backend_set_trace(FAST(f), trace_hook, &log);
    ig_kernel_conv2d_forward(FAST(f), a, b, b, b, &s);
    ig_kernel_conv2d_backward(FAST(f), a, a, a, b, b, b, &s);
    ig_kernel_groupnorm_forward(FAST(f), a, st, st, b, b, b, 0, 4, 4, 2, VAE_EPS, 1);
    ig_kernel_groupnorm_backward(FAST(f), a, a, a, b, b, b, b, st, st, 0, 4, 4, 2, 1);
    ig_kernel_upsample2x_forward(FAST(f), a, b, 0, 2, 2, 2);
    ig_kernel_upsample2x_backward(FAST(f), a, b, 0, 2, 2, 2);
    ig_backend_set_trace(FAST(f), NULL, NULL);
    check_same(a, keep, 64 * 4, "nothing written for N = 0");
    assert_int_equal(log.calls, 6);
    for (int i = 0; i < 6; i++) assert_int_equal(log.ops[i], ops[i].op);
    tfree(f, a), tfree(f, b), tfree(f, st), tfree(f, keep);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vae_table),        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_conv_fd),          cmocka_unit_test(test_conv_golden),
        cmocka_unit_test(test_groupnorm),        cmocka_unit_test(test_groupnorm_fd),
        cmocka_unit_test(test_groupnorm_golden), cmocka_unit_test(test_upsample),
    };
    return cmocka_run_group_tests_name("kernels_conv", tests, setup, teardown);
}
