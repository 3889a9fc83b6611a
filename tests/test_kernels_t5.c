/* test_kernels_t5.c - unit tests of the kernels a T5 v1.1 encoder adds (kernels/): the relative
 * position buckets and bias, attention with a bias and a key padding mask (and the attention
 * shape's scale), GeGLU; and whether T5's layer norm is ig_kernel_rmsnorm_forward. CPU backend:
 * fast against reference; the CUDA kernels are held to the reference in test_cuda_conv.c.
 *
 * Buckets: ig_t5_relative_position_bucket against transformers' _relative_position_bucket run by
 * torch (tests/data/golden/kernels/make_vae_t5_goldens.py) for every distance in [-300, 300] and
 * six configurations, bidirectional or not: exactly. The bias op against the function, on both
 * backends, bit for bit, and against the golden's bias.
 *
 * Attention with bias: fast against reference over T of 1, 7, 64, 65 (one and two key blocks),
 * 130 and 200, head sizes 4, 24 and 64, grouped-query heads, causal or not, with and without a
 * bias, klen all T, 1 and mixed, scale 1 (T5's) and the default; the same bits on any thread
 * count; without bias and mask the same bits as ig_kernel_attention_forward (it is the same
 * tiling); padded query rows attend only the real keys; a klen outside 1 .. T is refused, nothing
 * written. The golden: a small T5 attention (bias from the bucket table, no scaling, a padded
 * second sequence) computed by torch. The scale field: 0 and the default's own value give the same
 * bits in every existing attention kernel; another scale matches the reference.
 *
 * T5's layer norm: torch's weight * (x * rsqrt(mean(x^2) + eps)) in float32 against
 * ig_kernel_rmsnorm_forward, both backends (within 1e-6 of the scale: the same computation).
 * GeGLU: fast against reference, finite differences, the golden (gelu_new(gate) * up and its
 * gradients by autograd), in place. ReLU (T5 v1.0): fast = reference, in place, NaN kept.
 *
 * Tolerances: max |fast - ref| over max |ref| of the tensor: 1e-5 for the attention (fp32 online
 * softmax against double), 1e-6 for GeGLU's output and dup, 1e-5 for dgate (its fp32 sigmoid
 * form of tanh' loses a few bits, as gelu_bias_backward's); the goldens 1e-5 (torch's float32),
 * T5's layer norm 1e-6.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/data/golden/kernels/vae_t5_golden.h"
#include "tests/kernels_fixture.h"

/* ---- buckets and the position bias ----------------------------------------------------------- */

static void test_buckets(void **state) {
    (void)state;
    int span = G_BUCKET_SPAN, n = 2 * span + 1;
    for (int k = 0; k < G_BUCKET_CONFIGS; k++) {
        int nb = g_bucket_configs[3 * k], md = g_bucket_configs[3 * k + 1],
            bd = g_bucket_configs[3 * k + 2];
        for (int r = -span; r <= span; r++) {
            int want = g_buckets[k * n + r + span],
                got = ig_t5_relative_position_bucket(r, bd, nb, md);
            if (got != want)
                fail_msg("bucket(%d; buckets %d, max_distance %d, bidirectional %d) = %d, torch %d",
                         r, nb, md, bd, got, want);
        }
    }
    /* T5's defaults by hand: 16 buckets a direction, 8 exact */
    assert_int_equal(ig_t5_relative_position_bucket(0, 1, 32, 128), 0);
    assert_int_equal(ig_t5_relative_position_bucket(-7, 1, 32, 128), 7);
    assert_int_equal(ig_t5_relative_position_bucket(7, 1, 32, 128), 23);
    assert_int_equal(ig_t5_relative_position_bucket(1000, 1, 32, 128), 31);
    assert_int_equal(ig_t5_relative_position_bucket(-1000, 1, 32, 128), 15);
    assert_int_equal(ig_t5_relative_position_bucket(5, 0, 32, 128), 0);
}

static void test_position_bias(void **state) {
    fixture *f = *state;
    int cfg[][5] = {
        {7, 3, 32, 128, 1}, {300, 2, 32, 128, 1}, {65, 4, 20, 100, 0}, {1, 1, 16, 32, 1}};
    for (int k = 0; k < 4; k++) {
        int T = cfg[k][0], NH = cfg[k][1], nb = cfg[k][2], md = cfg[k][3], bd = cfg[k][4];
        size_t n = (size_t)NH * T * T;
        float *table = talloc(f, (size_t)nb * NH), *b1 = talloc(f, n), *b2 = talloc(f, n);
        fill(table, (size_t)nb * NH, 600 + k, -2, 2);
        ig_kernel_t5_position_bias(f->ref, b1, table, T, NH, nb, md, bd);
        ig_kernel_t5_position_bias(FAST(f), b2, table, T, NH, nb, md, bd);
        check_same(b2, b1, n * 4, "t5_position_bias");
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i += 1 + T / 17)
                for (int j = 0; j < T; j += 1 + T / 13)
                    assert_true(
                        b1[((size_t)h * T + i) * T + j] ==
                        table[(size_t)ig_t5_relative_position_bucket(j - i, bd, nb, md) * NH + h]);
        for (int t = 0; t < NTHREADS; t++) {
            ig_kernel_t5_position_bias(f->fast[t], b2, table, T, NH, nb, md, bd);
            check_same(b2, b1, n * 4, "t5_position_bias threads");
        }
        tfree(f, table), tfree(f, b1), tfree(f, b2);
    }
}

/* ---- attention with bias and key mask -------------------------------------------------------- */

typedef struct acase {
    int B, T, NH, NKV, hs, causal, bias, kmode; /* kmode: 0 NULL, 1 all T, 2 all 1, 3 mixed */
    float scale;
} acase;

static void klen_of(const acase *k, int32_t *klen) {
    for (int b = 0; b < k->B; b++)
        klen[b] = k->kmode == 1   ? k->T
                  : k->kmode == 2 ? 1
                                  : (b % 3 == 0   ? k->T
                                     : b % 3 == 1 ? 1 + k->T / 3
                                                  : 1 + b % k->T);
}

static void attn_case(fixture *f, const acase *k, uint64_t seed) {
    char name[192];
    snprintf(name, sizeof name,
             "attention_bias B=%d T=%d NH=%d NKV=%d hs=%d causal=%d bias=%d "
             "klen mode %d scale %g",
             k->B, k->T, k->NH, k->NKV, k->hs, k->causal, k->bias, k->kmode, (double)k->scale);
    ig_attention_shape s = {.B = k->B,
                            .T = k->T,
                            .n_head = k->NH,
                            .n_kv_head = k->NKV,
                            .head_size = k->hs,
                            .causal = k->causal,
                            .scale = k->scale};
    size_t R = (size_t)(k->NH + 2 * k->NKV) * k->hs, C = (size_t)k->NH * k->hs;
    size_t nqkv = (size_t)k->B * k->T * R, nout = (size_t)k->B * k->T * C,
           nl = (size_t)k->B * k->NH * k->T, nb = (size_t)k->NH * k->T * k->T;
    float *qkv = talloc(f, nqkv), *bias = talloc(f, nb);
    fill(qkv, nqkv, seed, -1.5f, 1.5f), fill(bias, nb, seed + 1, -3, 3);
    int32_t *klen = k->kmode ? ialloc(f, k->B) : NULL;
    if (klen) klen_of(k, klen);
    float *o1 = talloc(f, nout), *o2 = talloc(f, nout), *l1 = talloc(f, nl), *l2 = talloc(f, nl);
    const float *bp = k->bias ? bias : NULL;
    ig_kernel_attention_bias_forward(f->ref, o1, l1, qkv, bp, klen, &s);
    ig_kernel_attention_bias_forward(FAST(f), o2, l2, qkv, bp, klen, &s);
    check_close(o2, o1, nout, 1e-5, name);
    check_close(l2, l1, nl, 1e-5, name);
    /* query rows past klen attend the real keys only: rerun with the padded keys' k and v changed
     */
    if (klen) {
        float *q2 = tdup(f, qkv, nqkv), *o3 = talloc(f, nout);
        for (int b = 0; b < k->B; b++)
            for (int t = klen[b]; t < k->T; t++)
                for (size_t c = C; c < R; c++) q2[((size_t)b * k->T + t) * R + c] += 1.0f;
        ig_kernel_attention_bias_forward(FAST(f), o3, NULL, q2, bp, klen, &s);
        for (int b = 0; b < k->B; b++) /* every query row (padded ones included): the same bits */
            check_same(o3 + (size_t)b * k->T * C, o2 + (size_t)b * k->T * C, (size_t)k->T * C * 4,
                       "attention_bias: keys past klen ignored");
        tfree(f, q2), tfree(f, o3);
    }
    for (int t = 0; t < NTHREADS; t++) {
        float *o4 = talloc(f, nout), *l4 = talloc(f, nl);
        ig_kernel_attention_bias_forward(f->fast[t], o4, l4, qkv, bp, klen, &s);
        check_same(o4, o2, nout * 4, "attention_bias threads");
        check_same(l4, l2, nl * 4, "attention_bias lse threads");
        tfree(f, o4), tfree(f, l4);
    }
    /* no bias, no mask: ig_kernel_attention_forward's bits */
    if (!k->bias && (k->kmode == 0 || k->kmode == 1)) {
        float *o5 = talloc(f, nout), *l5 = talloc(f, nl);
        ig_kernel_attention_forward(FAST(f), o5, l5, qkv, NULL, &s);
        check_same(o5, o2, nout * 4, "attention_bias without bias = attention_forward");
        check_same(l5, l2, nl * 4, "attention_bias without bias = attention_forward (lse)");
        tfree(f, o5), tfree(f, l5);
    }
    ig_err err = {0};
    assert_int_equal(ig_backend_sync(FAST(f), &err), IG_OK);
    assert_int_equal(ig_backend_sync(f->ref, &err), IG_OK);
    tfree(f, qkv), tfree(f, bias), tfree(f, o1), tfree(f, o2), tfree(f, l1), tfree(f, l2);
    if (klen) tfree(f, klen);
}

static void test_attention_bias(void **state) {
    fixture *f = *state;
    acase cases[] = {
        {1, 1, 1, 1, 4, 0, 1, 1, 1.0f},   {2, 7, 3, 3, 4, 0, 1, 3, 1.0f},
        {3, 64, 2, 1, 24, 0, 1, 3, 1.0f}, {2, 65, 4, 2, 64, 0, 1, 3, 1.0f},
        {3, 130, 2, 2, 8, 0, 1, 3, 1.0f}, {1, 200, 2, 2, 64, 0, 1, 1, 1.0f},
        {2, 65, 2, 2, 64, 0, 0, 0, 0.0f}, {2, 130, 4, 1, 24, 1, 0, 1, 0.0f},
        {2, 70, 2, 2, 16, 1, 1, 3, 1.0f}, {4, 33, 2, 2, 8, 0, 1, 2, 1.0f},
        {2, 90, 3, 3, 32, 0, 0, 3, 0.5f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) attn_case(f, &cases[i], 700 + 10 * i);

    /* a klen outside 1 .. T: refused at the next sync, nothing written */
    ig_attention_shape s = {
        .B = 2, .T = 5, .n_head = 1, .n_kv_head = 1, .head_size = 4, .scale = 1.0f};
    float *qkv = talloc(f, 2 * 5 * 12), *o = talloc(f, 2 * 5 * 4);
    fill(qkv, 2 * 5 * 12, 790, -1, 1), fill(o, 2 * 5 * 4, 791, -1, 1);
    float *keep = tdup(f, o, 2 * 5 * 4);
    int32_t *klen = ialloc(f, 2);
    for (int bad = 0; bad < 2; bad++) {
        klen[0] = 3, klen[1] = bad ? 6 : 0;
        for (int fast = 0; fast < 2; fast++) {
            ig_backend *be = fast ? FAST(f) : f->ref;
            ig_kernel_attention_bias_forward(be, o, NULL, qkv, NULL, klen, &s);
            ig_err err = {0};
            assert_int_equal(ig_backend_sync(be, &err), IG_ERR_INVALID_ARG);
            assert_non_null(strstr(err.msg, "klen[1]"));
            check_same(o, keep, 2 * 5 * 4 * 4, "attention_bias with a bad klen writes nothing");
        }
    }
    tfree(f, qkv), tfree(f, o), tfree(f, keep), tfree(f, klen);
}

/* The shape's scale in the existing kernels: 0 and the default's own value give the same bits
 * (fast kernels); another value is applied (against the reference's). */
static void test_attention_scale(void **state) {
    fixture *f = *state;
    int B = 2, T = 70, NH = 4, NKV = 2, hs = 16;
    size_t R = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs;
    size_t nqkv = (size_t)B * T * R, nout = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = talloc(f, nqkv), *dout = talloc(f, nout);
    fill(qkv, nqkv, 800, -1, 1), fill(dout, nout, 801, -1, 1);
    float *o[3], *l[3], *d[3];
    for (int causal = 0; causal < 2; causal++) {
        float scales[3] = {0.0f, (float)(1.0 / sqrt((double)hs)), 1.0f};
        for (int v = 0; v < 3; v++) {
            ig_attention_shape s = {.B = B,
                                    .T = T,
                                    .n_head = NH,
                                    .n_kv_head = NKV,
                                    .head_size = hs,
                                    .causal = causal,
                                    .scale = scales[v]};
            o[v] = talloc(f, nout), l[v] = talloc(f, nl), d[v] = talloc(f, nqkv);
            ig_kernel_attention_forward(FAST(f), o[v], l[v], qkv, NULL, &s);
            ig_kernel_attention_backward(FAST(f), d[v], dout, qkv, o[v], l[v], NULL, &s);
        }
        check_same(o[1], o[0], nout * 4, "attention_forward: scale 0 = 1/sqrt(hs)");
        check_same(l[1], l[0], nl * 4, "attention_forward lse: scale 0 = 1/sqrt(hs)");
        check_same(d[1], d[0], nqkv * 4, "attention_backward: scale 0 = 1/sqrt(hs)");
        /* scale 1 against the reference */
        ig_attention_shape s1 = {.B = B,
                                 .T = T,
                                 .n_head = NH,
                                 .n_kv_head = NKV,
                                 .head_size = hs,
                                 .causal = causal,
                                 .scale = 1.0f};
        float *ro = talloc(f, nout), *rl = talloc(f, nl), *rd = talloc(f, nqkv);
        ig_kernel_attention_forward(f->ref, ro, rl, qkv, NULL, &s1);
        ig_kernel_attention_backward(f->ref, rd, dout, qkv, ro, rl, NULL, &s1);
        check_close(o[2], ro, nout, 1e-5, "attention_forward scale 1");
        check_close(l[2], rl, nl, 1e-5, "attention_forward scale 1 (lse)");
        check_close(d[2], rd, nqkv, 1e-5, "attention_backward scale 1");
        /* and attention_bias_forward without bias or mask with scale 1: the reference's */
        float *bo = talloc(f, nout);
        ig_kernel_attention_bias_forward(f->ref, bo, NULL, qkv, NULL, NULL, &s1);
        check_close(bo, ro, nout, 1e-6, "attention_bias_forward = attention_forward (reference)");
        /* the cached form (causal only): scale 1 for the last 5 queries */
        if (causal) {
            int Tq = 5, pos0 = T - Tq;
            size_t Ckv = (size_t)NKV * hs;
            float *q = talloc(f, (size_t)B * Tq * C), *kc = talloc(f, (size_t)B * T * Ckv),
                  *vc = talloc(f, (size_t)B * T * Ckv), *c1 = talloc(f, (size_t)B * Tq * C),
                  *c2 = talloc(f, (size_t)B * Tq * C);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++) {
                    const float *row = qkv + ((size_t)b * T + t) * R;
                    memcpy(kc + ((size_t)b * T + t) * Ckv, row + C, Ckv * 4);
                    memcpy(vc + ((size_t)b * T + t) * Ckv, row + C + Ckv, Ckv * 4);
                    if (t >= pos0) memcpy(q + ((size_t)b * Tq + t - pos0) * C, row, C * 4);
                }
            ig_attention_shape sc = s1;
            sc.T = Tq;
            ig_kernel_attention_cached(f->ref, c1, q, kc, vc, pos0, T, &sc);
            ig_kernel_attention_cached(FAST(f), c2, q, kc, vc, pos0, T, &sc);
            check_close(c2, c1, (size_t)B * Tq * C, 1e-5, "attention_cached scale 1");
            for (int b = 0; b < B; b++) /* the training forward's last rows */
                check_close(c1 + (size_t)b * Tq * C, ro + ((size_t)b * T + pos0) * C,
                            (size_t)Tq * C, 1e-6, "attention_cached scale 1 = forward");
            tfree(f, q), tfree(f, kc), tfree(f, vc), tfree(f, c1), tfree(f, c2);
        }
        tfree(f, ro), tfree(f, rl), tfree(f, rd), tfree(f, bo);
        for (int v = 0; v < 3; v++) tfree(f, o[v]), tfree(f, l[v]), tfree(f, d[v]);
    }
    tfree(f, qkv), tfree(f, dout);
}

/* torch's T5 attention: bias from the bucket table, no scaling, the second sequence padded */
static void test_t5_golden(void **state) {
    fixture *f = *state;
    const int d[] = {G_T5_DIMS};
    int B = d[0], T = d[1], NH = d[2], hs = d[3], nb = d[4], md = d[5];
    size_t C = (size_t)NH * hs, nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    ig_attention_shape s = {
        .B = B, .T = T, .n_head = NH, .n_kv_head = NH, .head_size = hs, .scale = 1.0f};
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *qkv = tdup(f, g_t5_qkv, nqkv), *table = tdup(f, g_t5_table, (size_t)nb * NH);
        float *bias = talloc(f, (size_t)NH * T * T), *o = talloc(f, nout);
        int32_t *klen = ialloc(f, B);
        for (int b = 0; b < B; b++) klen[b] = g_t5_klen[b];
        ig_kernel_t5_position_bias(be, bias, table, T, NH, nb, md, 1);
        check_same(bias, g_t5_bias, (size_t)NH * T * T * 4, "t5_position_bias golden");
        ig_kernel_attention_bias_forward(be, o, NULL, qkv, bias, klen, &s);
        check_close(o, g_t5_out, nout, 1e-5,
                    fast ? "T5 attention golden (fast)" : "T5 attention golden (reference)");
        tfree(f, qkv), tfree(f, table), tfree(f, bias), tfree(f, o), tfree(f, klen);
    }
}

/* ---- T5's layer norm is RMSNorm -------------------------------------------------------------- */

static void test_t5_layernorm(void **state) {
    fixture *f = *state;
    const int d[] = {G_RMS_DIMS};
    int N = d[0], C = d[1];
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *x = tdup(f, g_rms_x, (size_t)N * C), *w = tdup(f, g_rms_w, C);
        float *o = talloc(f, (size_t)N * C), *r = talloc(f, N);
        ig_kernel_rmsnorm_forward(be, o, r, x, w, N, C, 1e-6f);
        check_close(o, g_rms_out, (size_t)N * C, 1e-6,
                    fast ? "T5LayerNorm = rmsnorm_forward (fast)"
                         : "T5LayerNorm = rmsnorm_forward (reference)");
        tfree(f, x), tfree(f, w), tfree(f, o), tfree(f, r);
    }
}

/* ---- GeGLU ----------------------------------------------------------------------------------- */

static void test_geglu(void **state) {
    fixture *f = *state;
    int shapes[][2] = {{1, 1}, {7, 33}, {64, 1024}, {3, 2817}};
    for (int k = 0; k < 4; k++) {
        int N = shapes[k][0], F = shapes[k][1];
        size_t n = (size_t)N * F;
        float *g = talloc(f, n), *u = talloc(f, n), *dout = talloc(f, n);
        fill(g, n, 900 + k, -6, 6), fill(u, n, 910 + k, -2, 2), fill(dout, n, 920 + k, -1, 1);
        float *o1 = talloc(f, n), *o2 = talloc(f, n), *dg1 = talloc(f, n), *dg2 = talloc(f, n),
              *du1 = talloc(f, n), *du2 = talloc(f, n);
        ig_kernel_geglu_forward(f->ref, o1, g, u, N, F);
        ig_kernel_geglu_forward(FAST(f), o2, g, u, N, F);
        check_close(o2, o1, n, 1e-6, "geglu_forward");
        ig_kernel_geglu_backward(f->ref, dg1, du1, dout, g, u, N, F);
        ig_kernel_geglu_backward(FAST(f), dg2, du2, dout, g, u, N, F);
        check_close(dg2, dg1, n, 1e-5, "geglu_backward dgate");
        check_close(du2, du1, n, 1e-6, "geglu_backward dup");
        /* in place: dgate = dout, then dup = dout */
        float *io = tdup(f, dout, n), *du3 = talloc(f, n);
        ig_kernel_geglu_backward(FAST(f), io, du3, io, g, u, N, F);
        check_same(io, dg2, n * 4, "geglu_backward dgate in place");
        check_same(du3, du2, n * 4, "geglu_backward dup beside");
        memcpy(io, dout, n * 4);
        ig_kernel_geglu_backward(FAST(f), du3, io, io, g, u, N, F);
        check_same(io, du2, n * 4, "geglu_backward dup in place");
        for (int t = 0; t < NTHREADS; t++) {
            ig_kernel_geglu_forward(f->fast[t], o1, g, u, N, F);
            check_same(o1, o2, n * 4, "geglu_forward threads");
        }
        float *all[] = {g, u, dout, o1, o2, dg1, dg2, du1, du2, io, du3};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    }
    /* finite differences through each backend's own forward, and torch's values */
    const int d[] = {G_GEGLU_DIMS};
    int N = d[0], F = d[1];
    size_t n = (size_t)N * F;
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *g = tdup(f, g_geglu_gate, n), *u = tdup(f, g_geglu_up, n),
              *dout = tdup(f, g_geglu_dout, n), *o = talloc(f, n), *dg = talloc(f, n),
              *du = talloc(f, n);
        ig_kernel_geglu_forward(be, o, g, u, N, F);
        ig_kernel_geglu_backward(be, dg, du, dout, g, u, N, F);
        check_close(o, g_geglu_out, n, 1e-6, "geglu golden out");
        check_close(dg, g_geglu_dgate, n, 1e-5, "geglu golden dgate");
        check_close(du, g_geglu_dup, n, 1e-6, "geglu golden dup");
        float *inputs[2] = {g, u}, *grads[2] = {dg, du};
        for (int t = 0; t < 2; t++) {
            double scale = max_abs(grads[t], n);
            for (size_t i = 0; i < n; i++) {
                float keep = inputs[t][i];
                inputs[t][i] = keep + FD_H;
                ig_kernel_geglu_forward(be, o, g, u, N, F);
                double lp = dot_d(o, dout, n);
                inputs[t][i] = keep - FD_H;
                ig_kernel_geglu_forward(be, o, g, u, N, F);
                double lm = dot_d(o, dout, n);
                inputs[t][i] = keep;
                check_fd(grads[t][i], (lp - lm) / (2 * FD_H), scale,
                         t ? "geglu dup" : "geglu dgate", i);
            }
        }
        tfree(f, g), tfree(f, u), tfree(f, dout), tfree(f, o), tfree(f, dg), tfree(f, du);
    }
}

/* ---- the table ------------------------------------------------------------------------------- */

static void test_t5_table(void **state) {
    fixture *f = *state;
    struct {
        ig_op op;
        const char *name;
    } ops[] = {{IG_OP_GEGLU_FORWARD, "geglu_forward"},
               {IG_OP_GEGLU_BACKWARD, "geglu_backward"},
               {IG_OP_T5_POSITION_BIAS, "t5_position_bias"},
               {IG_OP_ATTENTION_BIAS_FORWARD, "attention_bias_forward"}};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        assert_string_equal(ig_op_name(ops[i].op), ops[i].name);
        assert_true(ig_backend_supports(FAST(f), ops[i].op));
        assert_true(ig_backend_supports(f->ref, ops[i].op));
    }
    /* empty calls write nothing */
    float *a = talloc(f, 16), *keep;
    fill(a, 16, 999, -1, 1);
    keep = tdup(f, a, 16);
    ig_attention_shape s = {.B = 0, .T = 4, .n_head = 1, .n_kv_head = 1, .head_size = 4};
    ig_kernel_attention_bias_forward(FAST(f), a, NULL, a, NULL, NULL, &s);
    ig_kernel_t5_position_bias(FAST(f), a, a, 0, 2, 32, 128, 1);
    ig_kernel_geglu_forward(FAST(f), a, a, a, 0, 4);
    ig_kernel_geglu_backward(FAST(f), a, keep + 8, a, a, a, 4, 0);
    check_same(a, keep, 16 * 4, "nothing written for empty calls");
    tfree(f, a), tfree(f, keep);
}

/* ReLU (T5 v1.0's FFN): fast = reference bit for bit on every thread count, in place, 0 below,
 * the input kept at and above 0, a NaN kept (torch.relu's). */
static void test_relu(void **state) {
    fixture *f = *state;
    size_t n = 100003;
    float *x = talloc(f, n), *r = talloc(f, n), *o = talloc(f, n);
    fill(x, n, 900, -3, 3);
    x[7] = NAN, x[8] = 0.0f, x[9] = -0.0f, x[10] = -INFINITY, x[11] = INFINITY;
    ig_kernel_relu_forward(f->ref, r, x, n);
    for (size_t i = 0; i < n; i++)
        if (i != 7 && r[i] != (x[i] > 0 ? x[i] : 0.0f))
            fail_msg("relu(%g) = %g at %zu", (double)x[i], (double)r[i], i);
    assert_true(isnan(r[7]));
    for (int t = 0; t < NTHREADS; t++) {
        ig_kernel_relu_forward(f->fast[t], o, x, n);
        check_same(o, r, n * 4, "relu_forward threads");
    }
    float *y = tdup(f, x, n);
    ig_kernel_relu_forward(FAST(f), y, y, n);
    check_same(y, r, n * 4, "relu_forward in place");
    tfree(f, x), tfree(f, r), tfree(f, o), tfree(f, y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_t5_table),
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_position_bias),
        cmocka_unit_test(test_attention_bias),
        cmocka_unit_test(test_attention_scale),
        cmocka_unit_test(test_t5_golden),
        cmocka_unit_test(test_t5_layernorm),
        cmocka_unit_test(test_geglu),
        cmocka_unit_test(test_relu),
    };
    return cmocka_run_group_tests_name("kernels_t5", tests, setup, teardown);
}
