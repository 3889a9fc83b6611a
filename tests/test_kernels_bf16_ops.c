/* test_kernels_bf16_ops.c - the CPU backend's bf16 kernels (kernels/cpu/cpu_bf16.c) against their
 * definition: each is the fp32 kernel on the widened bf16 inputs with every act output rounded
 * once to bf16 (an accumulated one, dw += ..., rounded once after the call's sum), which are the
 * CUDA backend's rounding points. So every act output must be, bit for bit, the rounding of what
 * the fp32 backend computes from the same (bf16-representable) inputs, and every fp32 output
 * (mean, rstd, lse, losses, master weights, moments) the fp32 backend's bits; the fused residual
 * + norm forwards norm the residual as stored, rounded. Every kernel but the matmul (oneDNN's
 * bf16 GEMM: test_kernels_bf16.c), on shapes that reach the adapter's bookkeeping: tokens hitting
 * a row twice and another rank's (< 0), DiT rows that start and end mid-sample, caption keys of
 * the samples a slice touches, the losses' logits in more than one block of rows, aliased
 * outputs, GQA attention with document masks, the KV cache, T5's position bias. Skipped, with the
 * reason, on a CPU without bf16 instructions (the backend refuses bf16 there).
 */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "tests/kernels_fixture.h"

typedef struct bfx {
    ig_ctx *ctx;
    ig_backend *b32, *b16;
} bfx;

static int bf_setup(void **state) {
    bfx *x = calloc(1, sizeof *x);
    ig_err err = {0};
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 2;
    o.spin_us = 0;
    if (!x || ig_ctx_create(&x->ctx, &o, &err) != IG_OK) return -1;
    ig_backend_opts bo = ig_backend_opts_default();
    if (ig_backend_create(&x->b32, x->ctx, &bo, &err) != IG_OK) return -1;
    bo.act_type = IG_ACT_BF16;
    if (ig_cpu_has_bf16() && ig_backend_create(&x->b16, x->ctx, &bo, &err) != IG_OK) return -1;
    *state = x;
    return 0;
}

static int bf_teardown(void **state) {
    bfx *x = *state;
    ig_backend_free(x->b16);
    ig_backend_free(x->b32);
    ig_ctx_free(x->ctx);
    free(x);
    return 0;
}

#define REQUIRE(x)                                                                                 \
    do {                                                                                           \
        if (!(x)->b16) {                                                                           \
            print_message("skipped: this CPU has neither AVX512-BF16 nor AMX-BF16, and the CPU "   \
                          "backend refuses bf16 without them\n");                                  \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ---- tensors held twice: fp32 on b32, bf16 on b16, the same (bf16-representable) values -------
 */

#define MAX_T 64
typedef struct pair {
    float *f;    /* on the fp32 backend */
    uint16_t *h; /* on the bf16 backend */
    size_t n;
} pair;
static pair held[MAX_T];
static int n_held;

static pair *mk(bfx *x, size_t n, uint64_t seed, float lo, float hi) {
    assert_true(n_held < MAX_T);
    pair *p = &held[n_held++];
    ig_err err = {0};
    void *a = NULL, *b = NULL;
    assert_int_equal(ig_backend_alloc(x->b32, (n ? n : 1) * 4, &a, &err), IG_OK);
    assert_int_equal(ig_backend_alloc(x->b16, (n ? n : 1) * 2, &b, &err), IG_OK);
    p->f = a, p->h = b, p->n = n;
    fill(p->f, n, seed, lo, hi);
    for (size_t i = 0; i < n; i++) {
        p->h[i] = ig_bf16_from_f32(p->f[i]);
        p->f[i] = ig_bf16_to_f32(p->h[i]);
    }
    return p;
}

/* an fp32 buffer on each side (mean, rstd, lse, losses, moments) */
static void *held_f[2 * MAX_T];
static int n_held_f;
static float *mkf(bfx *x, size_t n, uint64_t seed, float lo, float hi, float **twin) {
    ig_err err = {0};
    void *a = NULL, *b = NULL;
    assert_true(n_held_f + 2 <= 2 * MAX_T);
    assert_int_equal(ig_backend_alloc(x->b32, (n ? n : 1) * 4, &a, &err), IG_OK);
    assert_int_equal(ig_backend_alloc(x->b16, (n ? n : 1) * 4, &b, &err), IG_OK);
    held_f[n_held_f++] = a, held_f[n_held_f++] = b;
    fill(a, n, seed, lo, hi);
    memcpy(b, a, n * 4);
    *twin = b;
    return a;
}

static int32_t *mki(bfx *x, const int32_t *v, size_t n) {
    ig_err err = {0};
    void *a = NULL;
    assert_int_equal(ig_backend_alloc(x->b32, (n ? n : 1) * 4, &a, &err), IG_OK);
    memcpy(a, v, n * 4);
    return a;
}

static void sync_both(bfx *x) {
    ig_err err = {0};
    assert_int_equal(ig_backend_sync(x->b32, &err), IG_OK);
    assert_int_equal(ig_backend_sync(x->b16, &err), IG_OK);
}

static void round_f(pair *p);
/* the bf16 side holds the rounding of the fp32 side, bit for bit; then the fp32 side is rounded
 * too, so that the kernels after take the same inputs on both sides */
static void same(bfx *x, pair *p, const char *what) {
    sync_both(x);
    for (size_t i = 0; i < p->n; i++)
        if (p->h[i] != ig_bf16_from_f32(p->f[i]))
            fail_msg("%s[%zu]: bf16 %04x, the rounding of fp32 %.9g is %04x", what, i, p->h[i],
                     (double)p->f[i], ig_bf16_from_f32(p->f[i]));
    round_f(p);
}

/* fp32 outputs: the same bits on both sides */
static void same_f(bfx *x, const float *a, const float *b, size_t n, const char *what) {
    sync_both(x);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0)
            fail_msg("%s[%zu]: %.9g (bf16 backend) against %.9g (fp32)", what, i, (double)b[i],
                     (double)a[i]);
}

/* the fp32 side's values rounded to bf16 (what the bf16 side stored and goes on from) */
static void round_f(pair *p) {
    for (size_t i = 0; i < p->n; i++) p->f[i] = ig_bf16_to_f32(ig_bf16_from_f32(p->f[i]));
}

static void release_all(bfx *x) {
    for (int i = 0; i < n_held; i++) {
        ig_backend_release(x->b32, held[i].f);
        ig_backend_release(x->b16, held[i].h);
    }
    for (int i = 0; i < n_held_f; i += 2) {
        ig_backend_release(x->b32, held_f[i]);
        ig_backend_release(x->b16, held_f[i + 1]);
    }
    n_held = n_held_f = 0;
}

#define F(p) ((p)->f)
#define H(p) ((p)->h)

/* ---- the tests ---------------------------------------------------------------------------------
 */

static void test_embedding(void **state) {
    bfx *x = *state;
    REQUIRE(x);
    int B = 2, T = 5, C = 24, V = 11;
    /* token 3 three times, another rank's (-1) once */
    int32_t tok[10] = {3, 7, 3, -1, 0, 10, 3, 2, 7, 5};
    int32_t *t = mki(x, tok, 10);
    pair *wte = mk(x, (size_t)V * C, 1, -1, 1), *wpe = mk(x, (size_t)T * C, 2, -1, 1);
    pair *out = mk(x, (size_t)B * T * C, 3, -1, 1);
    ig_kernel_encoder_forward(x->b32, F(out), t, F(wte), F(wpe), B, T, C);
    ig_kernel_encoder_forward(x->b16, H(out), t, H(wte), H(wpe), B, T, C);
    same(x, out, "encoder_forward");
    pair *dout = mk(x, (size_t)B * T * C, 4, -1, 1);
    pair *dwte = mk(x, (size_t)V * C, 5, -1, 1), *dwpe = mk(x, (size_t)T * C, 6, -1, 1);
    ig_kernel_encoder_backward(x->b32, F(dwte), F(dwpe), F(dout), t, B, T, C);
    ig_kernel_encoder_backward(x->b16, H(dwte), H(dwpe), H(dout), t, B, T, C);
    same(x, dwte, "encoder_backward dwte"), same(x, dwpe, "encoder_backward dwpe");
    /* no positions (Llama) */
    ig_kernel_encoder_forward(x->b32, F(out), t, F(wte), NULL, B, T, C);
    ig_kernel_encoder_forward(x->b16, H(out), t, H(wte), NULL, B, T, C);
    same(x, out, "encoder_forward without wpe");
    ig_backend_release(x->b32, t);
    release_all(x);
}

static void test_norms(void **state) {
    bfx *x = *state;
    REQUIRE(x);
    int N = 37, C = 48;
    size_t n = (size_t)N * C;
    float *m16, *r16, *m32 = mkf(x, N, 0, 0, 0, &m16), *r32 = mkf(x, N, 0, 0, 0, &r16);
    pair *inp = mk(x, n, 11, -2, 2), *w = mk(x, C, 12, 0.5f, 1.5f), *b = mk(x, C, 13, -1, 1);
    pair *out = mk(x, n, 14, 0, 0);
    ig_kernel_layernorm_forward(x->b32, F(out), m32, r32, F(inp), F(w), F(b), N, C, 1e-5f);
    ig_kernel_layernorm_forward(x->b16, H(out), m16, r16, H(inp), H(w), H(b), N, C, 1e-5f);
    same(x, out, "layernorm_forward"), same_f(x, m32, m16, N, "mean"),
        same_f(x, r32, r16, N, "rstd");
    pair *dout = mk(x, n, 15, -1, 1), *dinp = mk(x, n, 16, -1, 1);
    pair *dw = mk(x, C, 17, -1, 1), *db = mk(x, C, 18, -1, 1);
    ig_kernel_layernorm_backward(x->b32, F(dinp), F(dw), F(db), F(dout), F(inp), F(w), m32, r32, N,
                                 C);
    ig_kernel_layernorm_backward(x->b16, H(dinp), H(dw), H(db), H(dout), H(inp), H(w), m16, r16, N,
                                 C);
    same(x, dinp, "layernorm dinp"), same(x, dw, "layernorm dw"), same(x, db, "layernorm db");

    /* the residual rounded as stored, then its norm: on the fp32 side by hand */
    pair *a = mk(x, n, 19, -1, 1), *res = mk(x, n, 20, 0, 0);
    ig_kernel_add(x->b32, F(res), F(a), F(inp), n);
    sync_both(x);
    round_f(res);
    ig_kernel_layernorm_forward(x->b32, F(out), m32, r32, F(res), F(w), F(b), N, C, 1e-5f);
    ig_kernel_residual_layernorm_forward(x->b16, H(res), H(out), m16, r16, H(a), H(inp), H(w), H(b),
                                         N, C, 1e-5f);
    same(x, res, "residual"), same(x, out, "residual_layernorm_forward");
    same_f(x, r32, r16, N, "residual rstd");
    ig_kernel_rmsnorm_forward(x->b32, F(out), r32, F(res), F(w), N, C, 1e-6f);
    ig_kernel_residual_rmsnorm_forward(x->b16, H(res), H(out), r16, H(a), H(inp), H(w), N, C,
                                       1e-6f);
    same(x, out, "residual_rmsnorm_forward"), same_f(x, r32, r16, N, "rmsnorm rstd");
    ig_kernel_rmsnorm_backward(x->b32, F(dinp), F(dw), F(dout), F(res), F(w), r32, N, C);
    ig_kernel_rmsnorm_backward(x->b16, H(dinp), H(dw), H(dout), H(res), H(w), r16, N, C);
    same(x, dinp, "rmsnorm dinp"), same(x, dw, "rmsnorm dw");

    /* GroupNorm + SiLU over NHWC */
    int G = 4, HW = 6, Nimg = 3, Cg = 16;
    size_t ng = (size_t)Nimg * HW * Cg;
    float *gm16, *gr16, *gm32 = mkf(x, Nimg * G, 0, 0, 0, &gm16);
    float *gr32 = mkf(x, Nimg * G, 0, 0, 0, &gr16);
    pair *gi = mk(x, ng, 21, -2, 2), *gw = mk(x, Cg, 22, 0.5f, 1.5f), *gb = mk(x, Cg, 23, -1, 1);
    pair *go = mk(x, ng, 0, 0, 0), *gd = mk(x, ng, 24, -1, 1), *gdi = mk(x, ng, 25, -1, 1);
    pair *gdw = mk(x, Cg, 26, -1, 1), *gdb = mk(x, Cg, 27, -1, 1);
    ig_kernel_groupnorm_forward(x->b32, F(go), gm32, gr32, F(gi), F(gw), F(gb), Nimg, HW, Cg, G,
                                1e-6f, 1);
    ig_kernel_groupnorm_forward(x->b16, H(go), gm16, gr16, H(gi), H(gw), H(gb), Nimg, HW, Cg, G,
                                1e-6f, 1);
    same(x, go, "groupnorm_forward");
    ig_kernel_groupnorm_backward(x->b32, F(gdi), F(gdw), F(gdb), F(gd), F(gi), F(gw), F(gb), gm32,
                                 gr32, Nimg, HW, Cg, G, 1);
    ig_kernel_groupnorm_backward(x->b16, H(gdi), H(gdw), H(gdb), H(gd), H(gi), H(gw), H(gb), gm16,
                                 gr16, Nimg, HW, Cg, G, 1);
    same(x, gdi, "groupnorm dinp"), same(x, gdw, "groupnorm dw"), same(x, gdb, "groupnorm db");
    release_all(x);
}

static void test_activations(void **state) {
    bfx *x = *state;
    REQUIRE(x);
    int N = 19, Fh = 40;
    size_t n = (size_t)N * Fh;
    pair *inp = mk(x, n, 31, -3, 3), *bias = mk(x, Fh, 32, -1, 1), *out = mk(x, n, 0, 0, 0);
    pair *dout = mk(x, n, 33, -1, 1), *dinp = mk(x, n, 0, 0, 0), *dbias = mk(x, Fh, 34, -1, 1);
    ig_kernel_gelu_bias_forward(x->b32, F(out), F(inp), F(bias), N, Fh);
    ig_kernel_gelu_bias_forward(x->b16, H(out), H(inp), H(bias), N, Fh);
    same(x, out, "gelu_bias_forward");
    ig_kernel_gelu_bias_backward(x->b32, F(dinp), F(dbias), F(dout), F(inp), F(bias), N, Fh);
    ig_kernel_gelu_bias_backward(x->b16, H(dinp), H(dbias), H(dout), H(inp), H(bias), N, Fh);
    same(x, dinp, "gelu dinp"), same(x, dbias, "gelu dbias");
    pair *up = mk(x, n, 35, -2, 2), *dup = mk(x, n, 0, 0, 0);
    ig_kernel_swiglu_forward(x->b32, F(out), F(inp), F(up), N, Fh);
    ig_kernel_swiglu_forward(x->b16, H(out), H(inp), H(up), N, Fh);
    same(x, out, "swiglu_forward");
    ig_kernel_geglu_forward(x->b32, F(out), F(inp), F(up), N, Fh);
    ig_kernel_geglu_forward(x->b16, H(out), H(inp), H(up), N, Fh);
    same(x, out, "geglu_forward");
    ig_kernel_geglu_backward(x->b32, F(dinp), F(dup), F(dout), F(inp), F(up), N, Fh);
    ig_kernel_geglu_backward(x->b16, H(dinp), H(dup), H(dout), H(inp), H(up), N, Fh);
    same(x, dinp, "geglu dgate"), same(x, dup, "geglu dup");
    /* dgate written over dout, as the trainer may */
    ig_kernel_swiglu_backward(x->b32, F(dout), F(dup), F(dout), F(inp), F(up), N, Fh);
    ig_kernel_swiglu_backward(x->b16, H(dout), H(dup), H(dout), H(inp), H(up), N, Fh);
    same(x, dout, "swiglu dgate (over dout)"), same(x, dup, "swiglu dup");
    ig_kernel_silu_forward(x->b32, F(out), F(inp), n);
    ig_kernel_silu_forward(x->b16, H(out), H(inp), n);
    same(x, out, "silu_forward");
    ig_kernel_silu_backward(x->b32, F(dout), F(dout), F(inp), n);
    ig_kernel_silu_backward(x->b16, H(dout), H(dout), H(inp), n);
    same(x, dout, "silu_backward (in place)");
    ig_kernel_relu_forward(x->b32, F(out), F(inp), n);
    ig_kernel_relu_forward(x->b16, H(out), H(inp), n);
    same(x, out, "relu_forward");
    ig_kernel_add(x->b32, F(out), F(out), F(up), n);
    ig_kernel_add(x->b16, H(out), H(out), H(up), n);
    same(x, out, "add (in place)");
    ig_kernel_scale(x->b32, F(out), n, 0.37f);
    ig_kernel_scale(x->b16, H(out), n, 0.37f);
    same(x, out, "scale");
    double s32 = ig_kernel_sum_squares(x->b32, F(out), n);
    double s16 = ig_kernel_sum_squares(x->b16, H(out), n);
    sync_both(x);
    assert_true(s32 == s16);
    int Nu = 2, Hu = 3, Wu = 5, Cu = 8;
    size_t nu = (size_t)Nu * Hu * Wu * Cu;
    pair *ui = mk(x, nu, 36, -1, 1), *uo = mk(x, 4 * nu, 0, 0, 0), *ud = mk(x, 4 * nu, 37, -1, 1);
    ig_kernel_upsample2x_forward(x->b32, F(uo), F(ui), Nu, Hu, Wu, Cu);
    ig_kernel_upsample2x_forward(x->b16, H(uo), H(ui), Nu, Hu, Wu, Cu);
    same(x, uo, "upsample2x_forward");
    ig_kernel_upsample2x_backward(x->b32, F(ui), F(ud), Nu, Hu, Wu, Cu);
    ig_kernel_upsample2x_backward(x->b16, H(ui), H(ud), Nu, Hu, Wu, Cu);
    same(x, ui, "upsample2x_backward");
    ig_conv2d_shape cs = {.N = 2,
                          .H = 6,
                          .W = 5,
                          .C = 8,
                          .OC = 12,
                          .KH = 3,
                          .KW = 3,
                          .stride = 1,
                          .pad_top = 1,
                          .pad_left = 1,
                          .pad_bottom = 1,
                          .pad_right = 1};
    size_t ci = (size_t)cs.N * cs.H * cs.W * cs.C, cw = (size_t)cs.OC * 9 * cs.C;
    size_t co = (size_t)cs.N * ig_conv2d_out_h(&cs) * ig_conv2d_out_w(&cs) * cs.OC;
    pair *cin = mk(x, ci, 38, -1, 1), *cwt = mk(x, cw, 39, -0.3f, 0.3f),
         *cb = mk(x, cs.OC, 40, -1, 1);
    pair *cout = mk(x, co, 0, 0, 0), *cd = mk(x, co, 41, -1, 1), *cdi = mk(x, ci, 0, 0, 0);
    pair *cdw = mk(x, cw, 42, -1, 1), *cdb = mk(x, cs.OC, 43, -1, 1);
    ig_kernel_conv2d_forward(x->b32, F(cout), F(cin), F(cwt), F(cb), &cs);
    ig_kernel_conv2d_forward(x->b16, H(cout), H(cin), H(cwt), H(cb), &cs);
    same(x, cout, "conv2d_forward");
    ig_kernel_conv2d_backward(x->b32, F(cdi), F(cdw), F(cdb), F(cd), F(cin), F(cwt), &cs);
    ig_kernel_conv2d_backward(x->b16, H(cdi), H(cdw), H(cdb), H(cd), H(cin), H(cwt), &cs);
    same(x, cdi, "conv2d dinp"), same(x, cdw, "conv2d dw"), same(x, cdb, "conv2d dbias");
    release_all(x);
}

static void test_attention(void **state) {
    bfx *x = *state;
    REQUIRE(x);
    ig_attention_shape s = {
        .B = 2, .T = 13, .n_head = 4, .n_kv_head = 2, .head_size = 16, .causal = 1};
    size_t C = 64, rq = C + 2 * 32, nq = (size_t)s.B * s.T * rq, no = (size_t)s.B * s.T * C;
    int32_t docs[26];
    for (int i = 0; i < 26; i++) docs[i] = i % 13 < 6 ? 0 : 1;
    int32_t *doc = mki(x, docs, 26);
    pair *qkv = mk(x, nq, 51, -1, 1), *out = mk(x, no, 0, 0, 0), *dout = mk(x, no, 52, -1, 1);
    pair *dqkv = mk(x, nq, 0, 0, 0);
    float *l16, *l32 = mkf(x, (size_t)s.B * s.n_head * s.T, 0, 0, 0, &l16);
    ig_kernel_rope_forward(x->b32, F(qkv), s.B, s.T, 4, 2, 16, 3, 10000.0f);
    ig_kernel_rope_forward(x->b16, H(qkv), s.B, s.T, 4, 2, 16, 3, 10000.0f);
    same(x, qkv, "rope_forward");
    ig_kernel_attention_forward(x->b32, F(out), l32, F(qkv), doc, &s);
    ig_kernel_attention_forward(x->b16, H(out), l16, H(qkv), doc, &s);
    same(x, out, "attention_forward"), same_f(x, l32, l16, (size_t)s.B * s.n_head * s.T, "lse");
    ig_kernel_attention_backward(x->b32, F(dqkv), F(dout), F(qkv), F(out), l32, doc, &s);
    ig_kernel_attention_backward(x->b16, H(dqkv), H(dout), H(qkv), H(out), l16, doc, &s);
    same(x, dqkv, "attention_backward");
    ig_kernel_rope_backward(x->b32, F(dqkv), s.B, s.T, 4, 2, 16, 3, 10000.0f);
    ig_kernel_rope_backward(x->b16, H(dqkv), s.B, s.T, 4, 2, 16, 3, 10000.0f);
    same(x, dqkv, "rope_backward");
    /* a KV cache of 20 positions, 3 new queries at positions 5..7 */
    ig_attention_shape cs = s;
    cs.T = 3;
    int Tmax = 20;
    pair *q = mk(x, (size_t)s.B * 3 * C, 53, -1, 1),
         *kc = mk(x, (size_t)s.B * Tmax * 32, 54, -1, 1);
    pair *vc = mk(x, (size_t)s.B * Tmax * 32, 55, -1, 1), *co = mk(x, (size_t)s.B * 3 * C, 0, 0, 0);
    ig_kernel_attention_cached(x->b32, F(co), F(q), F(kc), F(vc), 5, Tmax, &cs);
    ig_kernel_attention_cached(x->b16, H(co), H(q), H(kc), H(vc), 5, Tmax, &cs);
    same(x, co, "attention_cached");
    /* T5: no scaling, a position bias, a key mask */
    ig_attention_shape ts = {
        .B = 2, .T = 9, .n_head = 4, .n_kv_head = 4, .head_size = 8, .causal = 0, .scale = 1.0f};
    int32_t kl[2] = {9, 6};
    int32_t *klen = mki(x, kl, 2);
    pair *table = mk(x, 32 * 4, 56, -1, 1), *bias = mk(x, 4 * 9 * 9, 0, 0, 0);
    ig_kernel_t5_position_bias(x->b32, F(bias), F(table), 9, 4, 32, 128, 1);
    ig_kernel_t5_position_bias(x->b16, H(bias), H(table), 9, 4, 32, 128, 1);
    same(x, bias, "t5_position_bias");
    pair *tq = mk(x, (size_t)2 * 9 * 96, 57, -1, 1), *to = mk(x, (size_t)2 * 9 * 32, 0, 0, 0);
    float *tl16, *tl32 = mkf(x, 2 * 4 * 9, 0, 0, 0, &tl16);
    ig_kernel_attention_bias_forward(x->b32, F(to), tl32, F(tq), F(bias), klen, &ts);
    ig_kernel_attention_bias_forward(x->b16, H(to), tl16, H(tq), H(bias), klen, &ts);
    same(x, to, "attention_bias_forward");
    ig_backend_release(x->b32, doc);
    ig_backend_release(x->b32, klen);
    release_all(x);
}

/* DiT's per-sample kernels on a slice of rows that starts and ends mid-sample: rows 5 .. 24 of
 * samples of 8 rows (samples 0 .. 3 touched of 5), and the caption keys of those samples */
static void test_dit_rows(void **state) {
    bfx *x = *state;
    REQUIRE(x);
    int N = 20, C = 32, row0 = 5, rps = 8, B = 5, ld = 6 * C;
    size_t n = (size_t)N * C, nm = (size_t)B * ld;
    float *m16, *r16, *m32 = mkf(x, N, 0, 0, 0, &m16), *r32 = mkf(x, N, 0, 0, 0, &r16);
    pair *inp = mk(x, n, 61, -2, 2), *mod = mk(x, nm, 62, -1, 1), *out = mk(x, n, 0, 0, 0);
    ig_kernel_layernorm_modulate_forward(x->b32, F(out), m32, r32, F(inp), F(mod), F(mod) + C, ld,
                                         N, C, row0, rps, 1e-6f);
    ig_kernel_layernorm_modulate_forward(x->b16, H(out), m16, r16, H(inp), H(mod), H(mod) + C, ld,
                                         N, C, row0, rps, 1e-6f);
    same(x, out, "layernorm_modulate_forward");
    pair *dout = mk(x, n, 63, -1, 1), *dinp = mk(x, n, 64, -1, 1), *dmod = mk(x, nm, 65, -1, 1);
    ig_kernel_layernorm_modulate_backward(x->b32, F(dinp), F(dmod), F(dmod) + C, F(dout), F(inp),
                                          F(mod) + C, ld, m32, r32, N, C, row0, rps);
    ig_kernel_layernorm_modulate_backward(x->b16, H(dinp), H(dmod), H(dmod) + C, H(dout), H(inp),
                                          H(mod) + C, ld, m16, r16, N, C, row0, rps);
    same(x, dinp, "modulate dinp"),
        same(x, dmod, "modulate dshift, dscale (and the rest untouched)");
    pair *res = mk(x, n, 66, -1, 1);
    ig_kernel_gate_residual_forward(x->b32, F(res), F(res), F(inp), F(mod) + 2 * C, ld, N, C, row0,
                                    rps);
    ig_kernel_gate_residual_forward(x->b16, H(res), H(res), H(inp), H(mod) + 2 * C, ld, N, C, row0,
                                    rps);
    same(x, res, "gate_residual_forward (in place)");
    pair *dx = mk(x, n, 0, 0, 0);
    ig_kernel_gate_residual_backward(x->b32, F(dx), F(dmod) + 2 * C, F(dout), F(inp),
                                     F(mod) + 2 * C, ld, N, C, row0, rps);
    ig_kernel_gate_residual_backward(x->b16, H(dx), H(dmod) + 2 * C, H(dout), H(inp),
                                     H(mod) + 2 * C, ld, N, C, row0, rps);
    same(x, dx, "gate dx"), same(x, dmod, "gate dgate");
    /* cross-attention to each touched sample's caption of Tk 7 keys, some masked */
    int Tk = 7, nh = 4, hs = 8;
    int32_t kl[5] = {7, 3, 5, 1, 6};
    int32_t *klen = mki(x, kl, 5);
    pair *kv = mk(x, (size_t)B * Tk * 2 * C, 67, -1, 1),
         *dkv = mk(x, (size_t)B * Tk * 2 * C, 68, -1, 1);
    pair *xo = mk(x, n, 0, 0, 0), *dq = mk(x, n, 0, 0, 0);
    float *xl16, *xl32 = mkf(x, (size_t)N * nh, 0, 0, 0, &xl16);
    ig_kernel_cross_attention_forward(x->b32, F(xo), xl32, F(inp), F(kv), klen, N, row0, rps, Tk,
                                      nh, hs);
    ig_kernel_cross_attention_forward(x->b16, H(xo), xl16, H(inp), H(kv), klen, N, row0, rps, Tk,
                                      nh, hs);
    same(x, xo, "cross_attention_forward"), same_f(x, xl32, xl16, (size_t)N * nh, "cross lse");
    ig_kernel_cross_attention_backward(x->b32, F(dq), F(dkv), F(dout), F(inp), F(kv), F(xo), xl32,
                                       klen, N, row0, rps, Tk, nh, hs);
    ig_kernel_cross_attention_backward(x->b16, H(dq), H(dkv), H(dout), H(inp), H(kv), H(xo), xl16,
                                       klen, N, row0, rps, Tk, nh, hs);
    same(x, dq, "cross dq"), same(x, dkv, "cross dkv (and the samples untouched)");
    ig_backend_release(x->b32, klen);
    release_all(x);
}

static void test_losses(void **state) {
    bfx *x = *state;
    REQUIRE(x);
    /* 100 rows of 50048 logits: more than one block of rows of the bf16 kernels */
    int N = 100, V = 50000, Vp = 50048;
    size_t n = (size_t)N * Vp;
    int32_t *tg = malloc(N * sizeof *tg);
    for (int i = 0; i < N; i++) tg[i] = (i * 7919) % V;
    int32_t *targets = mki(x, tg, N);
    pair *logits = mk(x, n, 71, -4, 4);
    float *ls16, *ls32 = mkf(x, N, 0, 0, 0, &ls16), *dl16, *dl32 = mkf(x, N, 72, 0, 1, &dl16);
    ig_kernel_crossentropy(x->b32, ls32, F(logits), targets, dl32, N, V, Vp);
    ig_kernel_crossentropy(x->b16, ls16, H(logits), targets, dl16, N, V, Vp);
    same_f(x, ls32, ls16, N, "crossentropy losses"), same(x, logits, "crossentropy dlogits");
    /* the vocabulary-parallel passes, over the valid 40000 of the slice */
    for (int i = 0; i < N; i++) tg[i] = i % 5 == 0 ? -1 : (i * 7919) % 40000;
    memcpy(targets, tg, N * sizeof *tg);
    pair *l2 = mk(x, n, 73, -4, 4);
    float *mx16, *mx32 = mkf(x, N, 0, 0, 0, &mx16), *st16, *st32 = mkf(x, 2 * N, 0, 0, 0, &st16);
    ig_kernel_ce_max(x->b32, mx32, F(l2), N, 40000, Vp);
    ig_kernel_ce_max(x->b16, mx16, H(l2), N, 40000, Vp);
    same_f(x, mx32, mx16, N, "ce_max");
    ig_kernel_ce_sums(x->b32, st32, F(l2), mx32, targets, N, 40000, Vp);
    ig_kernel_ce_sums(x->b16, st16, H(l2), mx16, targets, N, 40000, Vp);
    same_f(x, st32, st16, 2 * N, "ce_sums");
    ig_kernel_ce_finish(x->b32, ls32, F(l2), mx32, st32, targets, dl32, N, 40000, Vp);
    ig_kernel_ce_finish(x->b16, ls16, H(l2), mx16, st16, targets, dl16, N, 40000, Vp);
    same_f(x, ls32, ls16, N, "ce_finish losses"), same(x, l2, "ce_finish dlogits");
    free(tg);
    ig_backend_release(x->b32, targets);
    /* MSE and L1 (dpred over pred), the posterior */
    int R = 33, K = 12;
    pair *pred = mk(x, (size_t)R * K, 74, -1, 1), *tgt = mk(x, (size_t)R * K, 75, -1, 1);
    ig_kernel_mse(x->b32, ls32, F(pred), F(pred), F(tgt), R, K, 0.01f);
    ig_kernel_mse(x->b16, ls16, H(pred), H(pred), H(tgt), R, K, 0.01f);
    same_f(x, ls32, ls16, R, "mse losses"), same(x, pred, "mse dpred (over pred)");
    pair *p2 = mk(x, (size_t)R * K, 76, -1, 1), *d2 = mk(x, (size_t)R * K, 0, 0, 0);
    ig_kernel_l1(x->b32, ls32, F(d2), F(p2), F(tgt), R, K, 0.01f);
    ig_kernel_l1(x->b16, ls16, H(d2), H(p2), H(tgt), R, K, 0.01f);
    same_f(x, ls32, ls16, R, "l1 losses"), same(x, d2, "l1 dpred");
    int Cz = 4;
    pair *mom = mk(x, (size_t)R * 2 * Cz, 77, -3, 3), *eps = mk(x, (size_t)R * Cz, 78, -2, 2);
    pair *z = mk(x, (size_t)R * Cz, 0, 0, 0), *dz = mk(x, (size_t)R * Cz, 79, -1, 1);
    pair *dm = mk(x, (size_t)R * 2 * Cz, 0, 0, 0);
    ig_kernel_posterior_forward(x->b32, F(z), ls32, F(mom), F(eps), R, Cz);
    ig_kernel_posterior_forward(x->b16, H(z), ls16, H(mom), H(eps), R, Cz);
    same(x, z, "posterior z"), same_f(x, ls32, ls16, R, "posterior kl");
    ig_kernel_posterior_backward(x->b32, F(dm), F(dz), F(mom), F(eps), R, Cz, 0.01f);
    ig_kernel_posterior_backward(x->b16, H(dm), H(dz), H(mom), H(eps), R, Cz, 0.01f);
    same(x, dm, "posterior dmoments");
    release_all(x);
}

/* AdamW on the fp32 master: the parameters are the master rounded; the EMA of the master */
static void test_optimizer(void **state) {
    bfx *x = *state;
    REQUIRE(x);
    size_t n = 1000;
    pair *params = mk(x, n, 81, -1, 1), *grads = mk(x, n, 82, -1, 1);
    float *ma16, *ma32 = mkf(x, n, 0, 0, 0, &ma16), *m16, *m32 = mkf(x, n, 83, -0.1f, 0.1f, &m16);
    float *v16, *v32 = mkf(x, n, 84, 0, 0.01f, &v16), *e16, *e32 = mkf(x, n, 85, -1, 1, &e16);
    memcpy(ma32, params->f, n * 4), memcpy(ma16, params->f, n * 4);
    for (int step = 1; step <= 3; step++) {
        ig_kernel_adamw(x->b32, F(params), ma32, F(grads), m32, v32, n, 1e-2f, 0.9f, 0.95f, 1e-8f,
                        0.1f, 0.5f, step);
        ig_kernel_adamw(x->b16, H(params), ma16, H(grads), m16, v16, n, 1e-2f, 0.9f, 0.95f, 1e-8f,
                        0.1f, 0.5f, step);
        same(x, params, "adamw params (the master rounded)");
        same_f(x, ma32, ma16, n, "master"), same_f(x, m32, m16, n, "m"),
            same_f(x, v32, v16, n, "v");
    }
    ig_kernel_ema(x->b32, e32, ma32, F(params), n, 0.99f);
    ig_kernel_ema(x->b16, e16, ma16, H(params), n, 0.99f);
    same_f(x, e32, e16, n, "ema");
    /* every gradient at once: the norm's sum over several chunks of the pool, then the clip */
    pair *g = mk(x, 300001, 86, -1, 1);
    double s32 = ig_kernel_sum_squares(x->b32, F(g), g->n);
    double s16 = ig_kernel_sum_squares(x->b16, H(g), g->n);
    sync_both(x);
    assert_true(s32 == s16);
    ig_kernel_scale(x->b32, F(g), g->n, 0.123f);
    ig_kernel_scale(x->b16, H(g), g->n, 0.123f);
    same(x, g, "scale of a large buffer");
    release_all(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedding),   cmocka_unit_test(test_norms),
        cmocka_unit_test(test_activations), cmocka_unit_test(test_attention),
        cmocka_unit_test(test_dit_rows),    cmocka_unit_test(test_losses),
        cmocka_unit_test(test_optimizer),
    };
    return cmocka_run_group_tests(tests, bf_setup, bf_teardown);
}
