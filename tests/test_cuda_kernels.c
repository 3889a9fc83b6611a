/* test_cuda_kernels.c - the CUDA backend (kernels/cuda/) against the CPU reference kernels, on a
 * device (label "cuda": ctest -L cuda). Without one every case is skipped with the reason and
 * the program exits 77 (ctest: skipped); the cases that need no device (refusals before any
 * device is touched) still run first.
 *
 * Every kernel gets the same random inputs on the CPU reference backend and on two CUDA backends,
 * fp32 (IG_ACT_F32) and bf16 (IG_ACT_BF16). For bf16 the inputs are rounded to bf16 on the host
 * first, so both sides see the same numbers and only the arithmetic differs. Tolerances are
 * max |gpu - ref| over max |ref| of the tensor ("relative to the tensor's scale"):
 *   fp32: 1e-4 (fp32 sums in another order against the reference's double sums; cuBLASLt runs
 *         in fp32 without TF32); the encoder (forward and backward) bit for bit
 *   bf16: 2e-2 (each output rounded to 8 bits of mantissa, 2^-9 relative, plus intermediate
 *         roundings, e.g. attention's P in the GEMM path)
 * Attention: multi-head, grouped-query and multi-query, causal or not, with and without
 * documents, on both paths (fused and GEMM). DiT's adaLN-Zero kernels (modulated LayerNorm, gated
 * residual, SiLU, MSE) over slices that start and end mid-sample, with the per-sample vectors at
 * column offsets of a [B, 6C] modulation, samples of one tile, of many and of one row. DiT's
 * cross-attention to the caption over such slices, klen 1, Tk and between, head sizes 1 to 100,
 * samples whose dkv sums take one tile (added at once) or several (partials, then their sum), the
 * keys past klen and the samples of no row left as they were, bit for bit. Determinism:
 * the same inputs run twice give the same bits, for every kernel, both act types and both attention
 * paths. Every operation is in the table; the trace reports each call. Out of memory: IG_ERR_NOMEM
 * naming the bytes asked for and what is free. The model: a tiny GPT trained 20 steps on the GPU
 * (fp32) gives the CPU's losses to 1e-3, and a checkpoint written from the GPU loads on the CPU
 * with the same parameters and moments. The weights' moving average (EMA) gives the CPU's bits.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/backend_internal.h"
#include "train/train.h"

/* ---- fixture: the device, the CPU reference, CUDA fp32 and bf16 ------------------------------ */

typedef struct fixture {
    int device;                    /* 1 when a CUDA device is usable */
    char why[IG_ERR_MSG_MAX + 64]; /* why not */
    ig_ctx *ctx;
    ig_backend *ref;    /* the CPU reference */
    ig_backend *cpu;    /* the CPU fast kernels (AdamW's bits) */
    ig_backend *gpu[2]; /* [0] fp32, [1] bf16 */
} fixture;

static fixture fx; /* the test program's state (not the library's) */

static void open_fixture(void) {
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 2;
    if (ig_ctx_create(&fx.ctx, &co, &err) != IG_OK) return;
    ig_backend_opts o = ig_backend_opts_default();
    o.reference = 1;
    if (ig_backend_create(&fx.ref, fx.ctx, &o, &err) != IG_OK) return;
    o.reference = 0;
    if (ig_backend_create(&fx.cpu, fx.ctx, &o, &err) != IG_OK) return;
    ig_cuda_info ci;
    ig_cuda_query(&ci);
    if (!ci.compiled) {
        snprintf(fx.why, sizeof fx.why, "no CUDA device: CUDA is not in this build");
        return;
    }
    for (int i = 0; i < 2; i++) {
        o = ig_backend_opts_default();
        o.kind = IG_BACKEND_CUDA;
        o.act_type = i ? IG_ACT_BF16 : IG_ACT_F32;
        if (ig_backend_create(&fx.gpu[i], fx.ctx, &o, &err) != IG_OK) {
            snprintf(fx.why, sizeof fx.why, "%s", err.msg);
            return;
        }
    }
    fx.device = 1;
}

static void close_fixture(void) {
    for (int i = 0; i < 2; i++) ig_backend_free(fx.gpu[i]);
    ig_backend_free(fx.cpu);
    ig_backend_free(fx.ref);
    ig_ctx_free(fx.ctx);
}

#define REQUIRE_DEVICE()                                                                           \
    do {                                                                                           \
        if (!fx.device) {                                                                          \
            print_message("skipped: %s\n", fx.why);                                                \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

#define NAMES(g) ((g) == fx.gpu[1] ? "bf16" : "fp32")

/* ---- tensors on both sides ------------------------------------------------------------------- */

/* A tensor of n elements: host values h (bf16-rounded for a bf16 act tensor), the same on the
 * CPU reference (cpu) and on the GPU backend g (gpu). act: the GPU tensor has the act type
 * (else fp32, like LayerNorm statistics and AdamW moments). */
typedef struct pair {
    size_t n;
    int act;
    float *h, *cpu;
    void *gpu;
} pair;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* xorshift64*: in [-1, 1) */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (float)((double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0 * 2 -
                   1);
}

static int is_bf16(ig_backend *g) {
    return ig_backend_act_type(g) == IG_ACT_BF16;
}

static pair mk(ig_backend *g, size_t n, int act, float scale) {
    pair p = {n, act, calloc(n ? n : 1, sizeof(float)), NULL, NULL};
    for (size_t i = 0; i < n; i++) {
        float x = urand() * scale;
        p.h[i] = act && is_bf16(g) ? ig_backend_bf16_to_f32(ig_backend_bf16_from_f32(x)) : x;
    }
    ig_err err = {0};
    void *c = NULL;
    assert_int_equal(ig_backend_alloc(fx.ref, n * sizeof(float), &c, &err), IG_OK);
    p.cpu = c;
    memcpy(p.cpu, p.h, n * sizeof(float));
    size_t es = act ? ig_backend_act_size(g) : sizeof(float);
    assert_int_equal(ig_backend_alloc(g, n * es, &p.gpu, &err), IG_OK);
    if (act)
        assert_int_equal(ig_backend_upload_f32(g, p.gpu, p.h, n, &err), IG_OK);
    else
        assert_int_equal(ig_backend_upload(g, p.gpu, p.h, n * sizeof(float), &err), IG_OK);
    return p;
}

static void drop(ig_backend *g, pair *p) {
    ig_backend_release(fx.ref, p->cpu);
    ig_backend_release(g, p->gpu);
    free(p->h);
    memset(p, 0, sizeof *p);
}

/* int32 ids in [0, hi) on both sides: *cpu and *gpu */
static void mk_ids(ig_backend *g, size_t n, int hi, int32_t **cpu, int32_t **gpu) {
    ig_err err = {0};
    void *c = NULL, *d = NULL;
    assert_int_equal(ig_backend_alloc(fx.ref, n * 4, &c, &err), IG_OK);
    assert_int_equal(ig_backend_alloc(g, n * 4, &d, &err), IG_OK);
    int32_t *h = c;
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)((urand() + 1) * 0.5f * hi) % hi;
    assert_int_equal(ig_backend_upload(g, d, h, n * 4, &err), IG_OK);
    *cpu = c;
    *gpu = d;
}

/* The GPU tensor as fp32 on the host (freshly allocated: free it). */
static float *fetch(ig_backend *g, const pair *p) {
    ig_err err = {0};
    if (ig_backend_sync(g, &err) != IG_OK) fail_msg("%s backend: %s", NAMES(g), err.msg);
    float *out = calloc(p->n ? p->n : 1, sizeof(float));
    if (p->act)
        assert_int_equal(ig_backend_download_f32(g, out, p->gpu, p->n, &err), IG_OK);
    else
        assert_int_equal(ig_backend_download(g, out, p->gpu, p->n * sizeof(float), &err), IG_OK);
    return out;
}

static double tol_of(ig_backend *g) {
    return is_bf16(g) ? 2e-2 : 1e-4;
}

/* max |gpu - cpu| / max |cpu| <= tol, else fails naming the tensor, the backend and the worst
 * element. */
static void check_tol(ig_backend *g, const char *what, const pair *p, double tol) {
    float *got = fetch(g, p);
    double scale = 0, worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < p->n; i++) scale = fmax(scale, fabs(p->cpu[i]));
    for (size_t i = 0; i < p->n; i++) {
        double d = fabs((double)got[i] - p->cpu[i]);
        if (!(d <= worst)) worst = d, at = i; /* NaN counts as worst */
    }
    if (!(worst <= tol * (scale > 0 ? scale : 1)))
        fail_msg("%s (%s): max |gpu - cpu| %.3g at %zu (gpu %.6g, cpu %.6g) over a scale of %.3g: "
                 "above %.1g",
                 what, NAMES(g), worst, at, got[at], p->cpu[at], scale, tol);
    free(got);
}

static void check(ig_backend *g, const char *what, const pair *p) {
    check_tol(g, what, p, tol_of(g));
}

/* ---- kernels against the reference ----------------------------------------------------------- */

static void test_encoder(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int B = 3, T = 17, C = 40, V = 11; /* few tokens: many repeats in the backward */
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        pair wte = mk(g, (size_t)V * C, 1, 1), wpe = mk(g, (size_t)T * C, 1, 1);
        pair out = mk(g, (size_t)B * T * C, 1, 0), dout = mk(g, (size_t)B * T * C, 1, 1);
        pair dwte = mk(g, (size_t)V * C, 1, 1), dwpe = mk(g, (size_t)T * C, 1, 1);
        int32_t *tc, *tg;
        mk_ids(g, (size_t)B * T, V, &tc, &tg);
        ig_kernel_encoder_forward(fx.ref, out.cpu, tc, wte.cpu, wpe.cpu, B, T, C);
        ig_kernel_encoder_forward(g, out.gpu, tg, wte.gpu, wpe.gpu, B, T, C);
        ig_kernel_encoder_backward(fx.ref, dwte.cpu, dwpe.cpu, dout.cpu, tc, B, T, C);
        ig_kernel_encoder_backward(g, dwte.gpu, dwpe.gpu, dout.gpu, tg, B, T, C);
        double tol = is_bf16(g) ? tol_of(g) : 0.0; /* fp32: the reference's bits */
        check_tol(g, "encoder_forward", &out, tol);
        check_tol(g, "encoder_backward dwte", &dwte, tol);
        check_tol(g, "encoder_backward dwpe", &dwpe, tol);
        pair *ps[] = {&wte, &wpe, &out, &dout, &dwte, &dwpe};
        for (size_t i = 0; i < 6; i++) drop(g, ps[i]);
        ig_backend_release(fx.ref, tc);
        ig_backend_release(g, tg);
    }
}

static void test_layernorm(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int N = 37, C = 100;
    size_t nc = (size_t)N * C;
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        pair a = mk(g, nc, 1, 2), bi = mk(g, nc, 1, 1), w = mk(g, C, 1, 1), b = mk(g, C, 1, 1);
        pair res = mk(g, nc, 1, 0), out = mk(g, nc, 1, 0), mean = mk(g, N, 0, 0),
             rstd = mk(g, N, 0, 0);
        ig_kernel_residual_layernorm_forward(fx.ref, res.cpu, out.cpu, mean.cpu, rstd.cpu, a.cpu,
                                             bi.cpu, w.cpu, b.cpu, N, C, 1e-5f);
        ig_kernel_residual_layernorm_forward(g, res.gpu, out.gpu, mean.gpu, rstd.gpu, a.gpu, bi.gpu,
                                             w.gpu, b.gpu, N, C, 1e-5f);
        check(g, "residual_layernorm_forward residual", &res);
        check(g, "residual_layernorm_forward out", &out);
        check(g, "residual_layernorm_forward mean", &mean);
        check(g, "residual_layernorm_forward rstd", &rstd);
        /* the plain form, on a */
        ig_kernel_layernorm_forward(fx.ref, out.cpu, mean.cpu, rstd.cpu, a.cpu, w.cpu, b.cpu, N, C,
                                    1e-5f);
        ig_kernel_layernorm_forward(g, out.gpu, mean.gpu, rstd.gpu, a.gpu, w.gpu, b.gpu, N, C,
                                    1e-5f);
        check(g, "layernorm_forward out", &out);
        check(g, "layernorm_forward rstd", &rstd);
        /* backward: dinp, dw, db accumulate into nonzero values; the statistics are the GPU's
         * own, given to both sides */
        float *gm = fetch(g, &mean), *gr = fetch(g, &rstd);
        memcpy(mean.cpu, gm, N * sizeof(float));
        memcpy(rstd.cpu, gr, N * sizeof(float));
        free(gm), free(gr);
        pair dout = mk(g, nc, 1, 1), dinp = mk(g, nc, 1, 1), dw = mk(g, C, 1, 1),
             db = mk(g, C, 1, 1);
        ig_kernel_layernorm_backward(fx.ref, dinp.cpu, dw.cpu, db.cpu, dout.cpu, a.cpu, w.cpu,
                                     mean.cpu, rstd.cpu, N, C);
        ig_kernel_layernorm_backward(g, dinp.gpu, dw.gpu, db.gpu, dout.gpu, a.gpu, w.gpu, mean.gpu,
                                     rstd.gpu, N, C);
        check(g, "layernorm_backward dinp", &dinp);
        check(g, "layernorm_backward dw", &dw);
        check(g, "layernorm_backward db", &db);
        pair *ps[] = {&a, &bi, &w, &b, &res, &out, &mean, &rstd, &dout, &dinp, &dw, &db};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) drop(g, ps[i]);
    }
}

static void test_rmsnorm(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int N = 37, C = 100;
    size_t nc = (size_t)N * C;
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        pair a = mk(g, nc, 1, 2), bi = mk(g, nc, 1, 1), w = mk(g, C, 1, 1);
        pair res = mk(g, nc, 1, 0), out = mk(g, nc, 1, 0), rstd = mk(g, N, 0, 0);
        ig_kernel_residual_rmsnorm_forward(fx.ref, res.cpu, out.cpu, rstd.cpu, a.cpu, bi.cpu, w.cpu,
                                           N, C, 1e-5f);
        ig_kernel_residual_rmsnorm_forward(g, res.gpu, out.gpu, rstd.gpu, a.gpu, bi.gpu, w.gpu, N,
                                           C, 1e-5f);
        check(g, "residual_rmsnorm_forward residual", &res);
        check(g, "residual_rmsnorm_forward out", &out);
        check(g, "residual_rmsnorm_forward rstd", &rstd);
        /* the plain form, on a, with another eps */
        ig_kernel_rmsnorm_forward(fx.ref, out.cpu, rstd.cpu, a.cpu, w.cpu, N, C, 1e-2f);
        ig_kernel_rmsnorm_forward(g, out.gpu, rstd.gpu, a.gpu, w.gpu, N, C, 1e-2f);
        check(g, "rmsnorm_forward out", &out);
        check(g, "rmsnorm_forward rstd", &rstd);
        /* backward: dinp, dw accumulate into nonzero values; rstd is the GPU's own */
        float *gr = fetch(g, &rstd);
        memcpy(rstd.cpu, gr, N * sizeof(float));
        free(gr);
        pair dout = mk(g, nc, 1, 1), dinp = mk(g, nc, 1, 1), dw = mk(g, C, 1, 1);
        ig_kernel_rmsnorm_backward(fx.ref, dinp.cpu, dw.cpu, dout.cpu, a.cpu, w.cpu, rstd.cpu, N,
                                   C);
        ig_kernel_rmsnorm_backward(g, dinp.gpu, dw.gpu, dout.gpu, a.gpu, w.gpu, rstd.gpu, N, C);
        check(g, "rmsnorm_backward dinp", &dinp);
        check(g, "rmsnorm_backward dw", &dw);
        pair *ps[] = {&a, &bi, &w, &res, &out, &rstd, &dout, &dinp, &dw};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) drop(g, ps[i]);
    }
}

static void matmul_case(ig_backend *g, int N, int C, int OC, ig_w_layout layout, int with_bias) {
    pair inp = mk(g, (size_t)N * C, 1, 1), w = mk(g, (size_t)C * OC, 1, 1);
    pair bias = mk(g, (size_t)OC + 1, 1, 1); /* bias + 1: an unaligned bias (the fallback) */
    pair out = mk(g, (size_t)N * OC, 1, 0), dout = mk(g, (size_t)N * OC, 1, 1);
    pair dinp = mk(g, (size_t)N * C, 1, 1), dw = mk(g, (size_t)C * OC, 1, 1);
    pair dbias = mk(g, (size_t)OC, 1, 1);
    size_t as = ig_backend_act_size(g);
    for (int unaligned = 0; unaligned < (with_bias ? 2 : 1); unaligned++) {
        const float *bc = with_bias ? bias.cpu + unaligned : NULL;
        const void *bg = with_bias ? (const char *)bias.gpu + unaligned * as : NULL;
        ig_kernel_matmul_forward(fx.ref, out.cpu, inp.cpu, w.cpu, layout, bc, N, C, OC);
        ig_kernel_matmul_forward(g, out.gpu, inp.gpu, w.gpu, layout, bg, N, C, OC);
        check(g, "matmul_forward", &out);
    }
    ig_kernel_matmul_backward(fx.ref, dinp.cpu, dw.cpu, with_bias ? dbias.cpu : NULL, dout.cpu,
                              inp.cpu, w.cpu, layout, N, C, OC);
    ig_kernel_matmul_backward(g, dinp.gpu, dw.gpu, with_bias ? dbias.gpu : NULL, dout.gpu, inp.gpu,
                              w.gpu, layout, N, C, OC);
    check(g, "matmul_backward dinp", &dinp);
    check(g, "matmul_backward dw", &dw);
    check(g, "matmul_backward dbias", &dbias);
    /* dinp NULL: only dW accumulates */
    ig_kernel_matmul_backward(fx.ref, NULL, dw.cpu, NULL, dout.cpu, inp.cpu, w.cpu, layout, N, C,
                              OC);
    ig_kernel_matmul_backward(g, NULL, dw.gpu, NULL, dout.gpu, inp.gpu, w.gpu, layout, N, C, OC);
    check(g, "matmul_backward dw (no dinp)", &dw);
    pair *ps[] = {&inp, &w, &bias, &out, &dout, &dinp, &dw, &dbias};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) drop(g, ps[i]);
}

static void test_matmul(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    for (int k = 0; k < 2; k++)
        for (int layout = 0; layout < 2; layout++) {
            matmul_case(fx.gpu[k], 33, 48, 80, (ig_w_layout)layout, 1);
            matmul_case(fx.gpu[k], 300, 64, 192, (ig_w_layout)layout, 0); /* 2 bias chunks */
            matmul_case(fx.gpu[k], 5, 7, 3, (ig_w_layout)layout, 1);      /* odd leading dims */
        }
}

static void test_gelu(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int N = 300, C = 72;
    size_t nc = (size_t)N * C;
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        pair inp = mk(g, nc, 1, 3), bias = mk(g, C, 1, 1), out = mk(g, nc, 1, 0);
        pair dout = mk(g, nc, 1, 1), dinp = mk(g, nc, 1, 0), dbias = mk(g, C, 1, 1);
        ig_kernel_gelu_bias_forward(fx.ref, out.cpu, inp.cpu, bias.cpu, N, C);
        ig_kernel_gelu_bias_forward(g, out.gpu, inp.gpu, bias.gpu, N, C);
        check(g, "gelu_bias_forward", &out);
        ig_kernel_gelu_bias_backward(fx.ref, dinp.cpu, dbias.cpu, dout.cpu, inp.cpu, bias.cpu, N,
                                     C);
        ig_kernel_gelu_bias_backward(g, dinp.gpu, dbias.gpu, dout.gpu, inp.gpu, bias.gpu, N, C);
        check(g, "gelu_bias_backward dinp", &dinp);
        check(g, "gelu_bias_backward dbias", &dbias);
        pair *ps[] = {&inp, &bias, &out, &dout, &dinp, &dbias};
        for (size_t i = 0; i < 6; i++) drop(g, ps[i]);
    }
}

static void test_swiglu(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int N = 300, F = 72;
    size_t nf = (size_t)N * F;
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        pair gate = mk(g, nf, 1, 6), up = mk(g, nf, 1, 2), out = mk(g, nf, 1, 0);
        pair dout = mk(g, nf, 1, 1), dgate = mk(g, nf, 1, 1), dup = mk(g, nf, 1, 1);
        ig_kernel_swiglu_forward(fx.ref, out.cpu, gate.cpu, up.cpu, N, F);
        ig_kernel_swiglu_forward(g, out.gpu, gate.gpu, up.gpu, N, F);
        check(g, "swiglu_forward", &out);
        ig_kernel_swiglu_backward(fx.ref, dgate.cpu, dup.cpu, dout.cpu, gate.cpu, up.cpu, N, F);
        ig_kernel_swiglu_backward(g, dgate.gpu, dup.gpu, dout.gpu, gate.gpu, up.gpu, N, F);
        check(g, "swiglu_backward dgate", &dgate);
        check(g, "swiglu_backward dup", &dup);
        /* in place: dgate is dout */
        ig_kernel_swiglu_backward(g, dout.gpu, dup.gpu, dout.gpu, gate.gpu, up.gpu, N, F);
        memcpy(dout.cpu, dgate.cpu, nf * sizeof(float));
        check(g, "swiglu_backward in place", &dout);
        pair *ps[] = {&gate, &up, &out, &dout, &dgate, &dup};
        for (size_t i = 0; i < 6; i++) drop(g, ps[i]);
    }
}

static void test_rope(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    /* B, T, n_head, n_kv_head, hs, pos0, theta: far positions too (the angles are the CPU's) */
    struct {
        int B, T, NH, NKV, hs, pos0;
        float theta;
    } cs[3] = {{2, 37, 4, 2, 64, 0, 10000.0f},
               {3, 5, 3, 3, 6, 8000, 500000.0f},
               {1, 70, 2, 1, 128, 7, 10000.0f}};
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < 3; c++) {
            ig_backend *g = fx.gpu[k];
            size_t n = (size_t)cs[c].B * cs[c].T * (cs[c].NH + 2 * cs[c].NKV) * cs[c].hs;
            pair x = mk(g, n, 1, 2);
            ig_kernel_rope_forward(fx.ref, x.cpu, cs[c].B, cs[c].T, cs[c].NH, cs[c].NKV, cs[c].hs,
                                   cs[c].pos0, cs[c].theta);
            ig_kernel_rope_forward(g, x.gpu, cs[c].B, cs[c].T, cs[c].NH, cs[c].NKV, cs[c].hs,
                                   cs[c].pos0, cs[c].theta);
            check(g, "rope_forward", &x);
            ig_kernel_rope_backward(fx.ref, x.cpu, cs[c].B, cs[c].T, cs[c].NH, cs[c].NKV, cs[c].hs,
                                    cs[c].pos0, cs[c].theta);
            ig_kernel_rope_backward(g, x.gpu, cs[c].B, cs[c].T, cs[c].NH, cs[c].NKV, cs[c].hs,
                                    cs[c].pos0, cs[c].theta);
            check(g, "rope_backward", &x);
            drop(g, &x);
        }
}

/* DiT's adaLN-Zero kernels over a slice of rows row0 .. row0 + N - 1 of samples of rps rows, the
 * per-sample vectors at columns 3C (shift), 4C (scale) and 5C (gate) of a [B, 6C] modulation:
 * the modulated LayerNorm forward and backward (with the GPU's own statistics on both sides), the
 * gated residual forward (also in place) and backward. The whole modulation gradient is compared,
 * so the vectors of samples outside the slice and the other columns must stay as they were. */
static void dit_case(ig_backend *g, int B, int rps, int C, int row0, int N) {
    int ld = 6 * C;
    size_t nc = (size_t)N * C, nm = (size_t)B * ld, as = ig_backend_act_size(g);
    pair x = mk(g, nc, 1, 2), mod = mk(g, nm, 1, 1), out = mk(g, nc, 1, 0);
    pair mean = mk(g, N, 0, 0), rstd = mk(g, N, 0, 0);
    void *sh = (char *)mod.gpu + 3 * (size_t)C * as, *sc = (char *)mod.gpu + 4 * (size_t)C * as;
    void *gt = (char *)mod.gpu + 5 * (size_t)C * as;
    ig_kernel_layernorm_modulate_forward(fx.ref, out.cpu, mean.cpu, rstd.cpu, x.cpu,
                                         mod.cpu + 3 * C, mod.cpu + 4 * C, ld, N, C, row0, rps,
                                         1e-6f);
    ig_kernel_layernorm_modulate_forward(g, out.gpu, mean.gpu, rstd.gpu, x.gpu, sh, sc, ld, N, C,
                                         row0, rps, 1e-6f);
    check(g, "layernorm_modulate_forward out", &out);
    check(g, "layernorm_modulate_forward mean", &mean);
    check(g, "layernorm_modulate_forward rstd", &rstd);
    float *gm = fetch(g, &mean), *gr = fetch(g, &rstd);
    memcpy(mean.cpu, gm, N * sizeof(float));
    memcpy(rstd.cpu, gr, N * sizeof(float));
    free(gm), free(gr);
    pair dout = mk(g, nc, 1, 1), dinp = mk(g, nc, 1, 1), dmod = mk(g, nm, 1, 1);
    void *dsh = (char *)dmod.gpu + 3 * (size_t)C * as, *dsc = (char *)dmod.gpu + 4 * (size_t)C * as;
    void *dgt = (char *)dmod.gpu + 5 * (size_t)C * as;
    ig_kernel_layernorm_modulate_backward(fx.ref, dinp.cpu, dmod.cpu + 3 * C, dmod.cpu + 4 * C,
                                          dout.cpu, x.cpu, mod.cpu + 4 * C, ld, mean.cpu, rstd.cpu,
                                          N, C, row0, rps);
    ig_kernel_layernorm_modulate_backward(g, dinp.gpu, dsh, dsc, dout.gpu, x.gpu, sc, ld, mean.gpu,
                                          rstd.gpu, N, C, row0, rps);
    check(g, "layernorm_modulate_backward dinp", &dinp);
    check(g, "layernorm_modulate_backward dshift/dscale", &dmod);
    /* the gated residual: out = res + gate * x, then in place on res */
    pair res = mk(g, nc, 1, 1), go = mk(g, nc, 1, 0), dx = mk(g, nc, 1, 1);
    ig_kernel_gate_residual_forward(fx.ref, go.cpu, res.cpu, x.cpu, mod.cpu + 5 * C, ld, N, C, row0,
                                    rps);
    ig_kernel_gate_residual_forward(g, go.gpu, res.gpu, x.gpu, gt, ld, N, C, row0, rps);
    check(g, "gate_residual_forward", &go);
    ig_kernel_gate_residual_forward(fx.ref, res.cpu, res.cpu, x.cpu, mod.cpu + 5 * C, ld, N, C,
                                    row0, rps);
    ig_kernel_gate_residual_forward(g, res.gpu, res.gpu, x.gpu, gt, ld, N, C, row0, rps);
    check(g, "gate_residual_forward in place", &res);
    ig_kernel_gate_residual_backward(fx.ref, dx.cpu, dmod.cpu + 5 * C, dout.cpu, x.cpu,
                                     mod.cpu + 5 * C, ld, N, C, row0, rps);
    ig_kernel_gate_residual_backward(g, dx.gpu, dgt, dout.gpu, x.gpu, gt, ld, N, C, row0, rps);
    check(g, "gate_residual_backward dx", &dx);
    check(g, "gate_residual_backward dgate", &dmod);
    pair *ps[] = {&x, &mod, &out, &mean, &rstd, &dout, &dinp, &dmod, &res, &go, &dx};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) drop(g, ps[i]);
}

static void test_dit(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        /* B, rps, C, row0, N: mid-sample starts and ends; one tile per sample (the sums added at
         * once), a sample over several tiles (partials, then their sum), one row per sample, a
         * sample of exactly one tile */
        dit_case(g, 3, 130, 100, 65, 3 * 130 - 65 - 43);
        dit_case(g, 3, 33, 7, 20, 3 * 33 - 20 - 5);
        dit_case(g, 2, 700, 96, 100, 2 * 700 - 100 - 233);
        dit_case(g, 5, 1, 64, 2, 3);
        dit_case(g, 4, 64, 33, 0, 256);

        /* SiLU, with the backward in place (dinp = dout) */
        size_t n = 10000;
        pair x = mk(g, n, 1, 8), out = mk(g, n, 1, 0), dout = mk(g, n, 1, 1), dx = mk(g, n, 1, 0);
        ig_kernel_silu_forward(fx.ref, out.cpu, x.cpu, n);
        ig_kernel_silu_forward(g, out.gpu, x.gpu, n);
        check(g, "silu_forward", &out);
        ig_kernel_silu_backward(fx.ref, dx.cpu, dout.cpu, x.cpu, n);
        ig_kernel_silu_backward(g, dx.gpu, dout.gpu, x.gpu, n);
        check(g, "silu_backward", &dx);
        ig_kernel_silu_backward(fx.ref, dout.cpu, dout.cpu, x.cpu, n);
        ig_kernel_silu_backward(g, dout.gpu, dout.gpu, x.gpu, n);
        check(g, "silu_backward in place", &dout);
        pair *ps[] = {&x, &out, &dout, &dx};
        for (size_t i = 0; i < 4; i++) drop(g, ps[i]);

        /* MSE: with and without dpred, and in place (dpred = pred) */
        int Ks[2] = {16, 1000};
        for (int ki = 0; ki < 2; ki++) {
            int N = 37, K = Ks[ki];
            size_t nk = (size_t)N * K;
            float gs = 1024.0f / (float)nk;
            pair p = mk(g, nk, 1, 2), t = mk(g, nk, 1, 2), dp = mk(g, nk, 1, 0);
            pair l = mk(g, N, 0, 0);
            ig_kernel_mse(fx.ref, l.cpu, NULL, p.cpu, t.cpu, N, K, gs);
            ig_kernel_mse(g, l.gpu, NULL, p.gpu, t.gpu, N, K, gs);
            check(g, "mse losses (no dpred)", &l);
            check_tol(g, "mse pred untouched", &p, 0.0);
            ig_kernel_mse(fx.ref, l.cpu, dp.cpu, p.cpu, t.cpu, N, K, gs);
            ig_kernel_mse(g, l.gpu, dp.gpu, p.gpu, t.gpu, N, K, gs);
            check(g, "mse losses", &l);
            check(g, "mse dpred", &dp);
            ig_kernel_mse(fx.ref, l.cpu, p.cpu, p.cpu, t.cpu, N, K, gs);
            ig_kernel_mse(g, l.gpu, p.gpu, p.gpu, t.gpu, N, K, gs);
            check(g, "mse in place", &p);
            pair *qs[] = {&p, &t, &dp, &l};
            for (size_t i = 0; i < 4; i++) drop(g, qs[i]);
        }
    }
}

/* klen of B samples of Tk keys: Tk, 1, then in between (host side, as the CPU tests) */
static void xattn_klen(int32_t *klen, int B, int Tk) {
    for (int b = 0; b < B; b++) klen[b] = b == 0 ? Tk : b == 1 ? 1 : 1 + (b * 37 + Tk / 2) % Tk;
}

/* DiT's cross-attention over rows row0 .. row0 + N - 1 of samples of rps rows, Tk keys, NH heads
 * of hs: the forward, then the backward from the GPU's own out and lse (given to both sides) into
 * a nonzero dkv; the elements of dkv that no row reaches (keys past klen, samples of no row) are
 * as they were, bit for bit; a second backward gives the same bits. */
static void xattn_case(ig_backend *g, int B, int rps, int Tk, int NH, int hs, int row0, int N) {
    size_t C = (size_t)NH * hs, R = 2 * C, nq = (size_t)N * C, nkv = (size_t)B * Tk * R;
    size_t nl = (size_t)N * NH;
    char what[160], w2[200];
    snprintf(what, sizeof what, "cross_attention B=%d rps=%d Tk=%d NH=%d hs=%d row0=%d N=%d", B,
             rps, Tk, NH, hs, row0, N);
    pair q = mk(g, nq, 1, 1.5f), kv = mk(g, nkv, 1, 1.5f), out = mk(g, nq, 1, 0);
    pair lse = mk(g, nl, 0, 0);
    int32_t *kc = NULL, *kg = NULL;
    mk_ids(g, (size_t)B, 1, &kc, &kg);
    xattn_klen(kc, B, Tk);
    ig_err err = {0};
    assert_int_equal(ig_backend_upload(g, kg, kc, (size_t)B * 4, &err), IG_OK);
    ig_kernel_cross_attention_forward(fx.ref, out.cpu, lse.cpu, q.cpu, kv.cpu, kc, N, row0, rps, Tk,
                                      NH, hs);
    ig_kernel_cross_attention_forward(g, out.gpu, lse.gpu, q.gpu, kv.gpu, kg, N, row0, rps, Tk, NH,
                                      hs);
    snprintf(w2, sizeof w2, "%s: forward out", what);
    check(g, w2, &out);
    snprintf(w2, sizeof w2, "%s: forward lse", what);
    check(g, w2, &lse);
    float *go = fetch(g, &out), *gl = fetch(g, &lse);
    memcpy(out.cpu, go, nq * sizeof(float));
    memcpy(lse.cpu, gl, nl * sizeof(float));
    free(go), free(gl);
    pair dout = mk(g, nq, 1, 1), dq = mk(g, nq, 1, 1), dkv = mk(g, nkv, 1, 1);
    ig_kernel_cross_attention_backward(fx.ref, dq.cpu, dkv.cpu, dout.cpu, q.cpu, kv.cpu, out.cpu,
                                       lse.cpu, kc, N, row0, rps, Tk, NH, hs);
    ig_kernel_cross_attention_backward(g, dq.gpu, dkv.gpu, dout.gpu, q.gpu, kv.gpu, out.gpu,
                                       lse.gpu, kg, N, row0, rps, Tk, NH, hs);
    snprintf(w2, sizeof w2, "%s: backward dq", what);
    check(g, w2, &dq);
    snprintf(w2, sizeof w2, "%s: backward dkv", what);
    check(g, w2, &dkv);
    float *got = fetch(g, &dkv);
    int s0 = row0 / rps, s1 = (row0 + N - 1) / rps;
    for (size_t i = 0; i < nkv; i++) {
        int b = (int)(i / R / Tk), j = (int)(i / R % Tk);
        if (b >= s0 && b <= s1 && j < kc[b]) continue;
        if (memcmp(&got[i], &dkv.h[i], sizeof(float)))
            fail_msg("%s (%s): dkv element %zu (sample %d, key %d) changed: %g, was %g", what,
                     NAMES(g), i, b, j, got[i], dkv.h[i]);
    }
    /* run to run: the same inputs (dkv's first values again), the same bits */
    pair dq2 = mk(g, nq, 1, 0), dkv2 = mk(g, nkv, 1, 0);
    assert_int_equal(ig_backend_upload_f32(g, dkv2.gpu, dkv.h, nkv, &err), IG_OK);
    ig_kernel_cross_attention_backward(g, dq2.gpu, dkv2.gpu, dout.gpu, q.gpu, kv.gpu, out.gpu,
                                       lse.gpu, kg, N, row0, rps, Tk, NH, hs);
    float *a = fetch(g, &dq), *b2 = fetch(g, &dq2), *got2 = fetch(g, &dkv2);
    if (memcmp(a, b2, nq * sizeof(float)) || memcmp(got, got2, nkv * sizeof(float)))
        fail_msg("%s (%s): two backwards differ", what, NAMES(g));
    free(a), free(b2), free(got), free(got2);
    pair *ps[] = {&q, &kv, &out, &lse, &dout, &dq, &dkv, &dq2, &dkv2};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) drop(g, ps[i]);
    ig_backend_release(fx.ref, kc), ig_backend_release(g, kg);
}

static void test_cross_attention(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        /* B, rps, Tk, NH, hs, row0, N */
        xattn_case(g, 3, 100, 70, 3, 8, 37, 222);       /* mid-sample ends, two key blocks */
        xattn_case(g, 2, 700, 130, 2, 64, 100, 1067);   /* dkv sums over 6 tiles: partials */
        xattn_case(g, 5, 1, 5, 4, 32, 1, 3);            /* samples of one row */
        xattn_case(g, 2, 3000, 20, 1, 100, 1000, 4000); /* head size 100 (D 128); 512-row tiles */
        xattn_case(g, 3, 33, 9, 4, 1, 0, 99);           /* head size 1; one tile per sample */
        xattn_case(g, 3, 64, 1, 2, 16, 64, 128);        /* one key; samples of exactly one tile */
    }
}

/* A CUDA backend with the attention path IG_CUDA_ATTENTION=path (freed by the caller). */
static ig_backend *with_path(ig_act_type at, const char *path) {
    ig_backend_opts o = ig_backend_opts_default();
    o.kind = IG_BACKEND_CUDA;
    o.act_type = at;
    ig_backend *be = NULL;
    ig_err err = {0};
    setenv("IG_CUDA_ATTENTION", path, 1);
    ig_status st = ig_backend_create(&be, fx.ctx, &o, &err);
    unsetenv("IG_CUDA_ATTENTION");
    if (st != IG_OK) fail_msg("%s", err.msg);
    return be;
}

/* the shape of an attention call: NH query heads, NKV key/value heads of hs */
static ig_attention_shape att_shape(int B, int T, int NH, int NKV, int hs, int causal) {
    ig_attention_shape s = {
        .B = B, .T = T, .n_head = NH, .n_kv_head = NKV, .head_size = hs, .causal = causal};
    return s;
}

static void attention_case(ig_backend *g, int B, int T, int NH, int NKV, int hs, int causal,
                           int docs) {
    ig_attention_shape s = att_shape(B, T, NH, NKV, hs, causal);
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * hs, no = (size_t)B * T * NH * hs;
    size_t nl = (size_t)B * NH * T;
    char what[160];
    snprintf(what, sizeof what, "attention B=%d T=%d NH=%d NKV=%d hs=%d%s%s", B, T, NH, NKV, hs,
             causal ? " causal" : "", docs ? " documents" : "");
    pair qkv = mk(g, nqkv, 1, 1.5f), out = mk(g, no, 1, 0), lse = mk(g, nl, 0, 0);
    pair dout = mk(g, no, 1, 1), dqkv = mk(g, nqkv, 1, 1);
    int32_t *dc = NULL, *dg = NULL;
    if (docs) { /* three documents per row, boundaries at odd places */
        mk_ids(g, (size_t)B * T, 1, &dc, &dg);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) dc[b * T + t] = t < T / 3 + b ? 0 : t < 2 * T / 3 ? 1 : 2;
        ig_err err = {0};
        assert_int_equal(ig_backend_upload(g, dg, dc, (size_t)B * T * 4, &err), IG_OK);
    }
    ig_kernel_attention_forward(fx.ref, out.cpu, lse.cpu, qkv.cpu, dc, &s);
    ig_kernel_attention_forward(g, out.gpu, lse.gpu, qkv.gpu, dg, &s);
    char w2[200];
    snprintf(w2, sizeof w2, "%s: forward out", what);
    check(g, w2, &out);
    snprintf(w2, sizeof w2, "%s: forward lse", what);
    check(g, w2, &lse);
    /* the backward from the GPU's own forward: out and lse given to both sides */
    float *go = fetch(g, &out), *gl = fetch(g, &lse);
    memcpy(out.cpu, go, no * sizeof(float));
    memcpy(lse.cpu, gl, nl * sizeof(float));
    free(go), free(gl);
    ig_kernel_attention_backward(fx.ref, dqkv.cpu, dout.cpu, qkv.cpu, out.cpu, lse.cpu, dc, &s);
    ig_kernel_attention_backward(g, dqkv.gpu, dout.gpu, qkv.gpu, out.gpu, lse.gpu, dg, &s);
    snprintf(w2, sizeof w2, "%s: backward dqkv", what);
    check(g, w2, &dqkv);
    pair *ps[] = {&qkv, &out, &lse, &dout, &dqkv};
    for (size_t i = 0; i < 5; i++) drop(g, ps[i]);
    if (docs) ig_backend_release(fx.ref, dc), ig_backend_release(g, dg);
}

static void test_attention(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    const char *paths[2] = {"fused", "gemm"};
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 2; k++) {
            ig_backend *g = with_path(k ? IG_ACT_BF16 : IG_ACT_F32, paths[p]);
            attention_case(g, 2, 70, 2, 2, 32, 1, 0);  /* head size 32, a partial block */
            attention_case(g, 1, 130, 2, 2, 64, 1, 0); /* head size 64, three blocks */
            attention_case(g, 2, 45, 2, 2, 100, 1, 0); /* head size 100: padded to 128 */
            attention_case(g, 1, 9, 2, 2, 4, 1, 0);    /* head size 4 */
            attention_case(g, 2, 97, 2, 2, 32, 1, 1);  /* documents */
            /* grouped-query (groups of 2, and of n_head), causal or not, documents */
            attention_case(g, 2, 70, 4, 2, 32, 1, 0);
            attention_case(g, 2, 97, 6, 1, 64, 1, 1);
            attention_case(g, 2, 130, 4, 2, 64, 0, 0);
            attention_case(g, 3, 45, 4, 4, 32, 0, 1);
            attention_case(g, 2, 33, 8, 2, 128, 0, 1);
            ig_backend_free(g);
        }
}

static void test_attention_cached(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int B = 2, Tq = 5, pos0 = 11, Tmax = 20, hs = 32;
    int heads[3][2] = {{2, 2}, {4, 2}, {3, 1}}; /* multi-head, grouped-query, multi-query */
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < 3; c++) {
            ig_backend *g = fx.gpu[k];
            int NH = heads[c][0], NKV = heads[c][1];
            ig_attention_shape s = att_shape(B, Tq, NH, NKV, hs, 1);
            size_t C = (size_t)NH * hs, Ckv = (size_t)NKV * hs;
            pair q = mk(g, (size_t)B * Tq * C, 1, 1), kc = mk(g, (size_t)B * Tmax * Ckv, 1, 1);
            pair vc = mk(g, (size_t)B * Tmax * Ckv, 1, 1), out = mk(g, (size_t)B * Tq * C, 1, 0);
            ig_kernel_attention_cached(fx.ref, out.cpu, q.cpu, kc.cpu, vc.cpu, pos0, Tmax, &s);
            ig_kernel_attention_cached(g, out.gpu, q.gpu, kc.gpu, vc.gpu, pos0, Tmax, &s);
            check(g, "attention_cached", &out);
            pair *ps[] = {&q, &kc, &vc, &out};
            for (size_t i = 0; i < 4; i++) drop(g, ps[i]);
        }
}

static void test_crossentropy(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int N = 9, V = 1000, Vp = 1024;
    for (int k = 0; k < 2; k++)
        for (int with_grad = 0; with_grad < 2; with_grad++) {
            ig_backend *g = fx.gpu[k];
            pair logits = mk(g, (size_t)N * Vp, 1, 4), losses = mk(g, N, 0, 0);
            pair dloss = mk(g, N, 0, 1);
            dloss.cpu[3] = 0; /* a masked row */
            ig_err err = {0};
            assert_int_equal(ig_backend_upload(g, dloss.gpu, dloss.cpu, N * 4, &err), IG_OK);
            int32_t *tc, *tg;
            mk_ids(g, N, V, &tc, &tg);
            ig_kernel_crossentropy(fx.ref, losses.cpu, logits.cpu, tc, with_grad ? dloss.cpu : NULL,
                                   N, V, Vp);
            ig_kernel_crossentropy(g, losses.gpu, logits.gpu, tg, with_grad ? dloss.gpu : NULL, N,
                                   V, Vp);
            check(g, "crossentropy losses", &losses);
            check(g, with_grad ? "crossentropy dlogits" : "crossentropy logits (untouched)",
                  &logits);
            pair *ps[] = {&logits, &losses, &dloss};
            for (size_t i = 0; i < 3; i++) drop(g, ps[i]);
            ig_backend_release(fx.ref, tc);
            ig_backend_release(g, tg);
        }
}

/* The tensor-parallel pieces: the embedding with other ranks' tokens (-1) and no positions, the
 * cross-entropy's three passes over a slice of the vocabulary (stats from the reference, as the
 * all-reduces would bring them), and the elementwise add. */
/* backend memory to backend memory, as a group of one rank moves it */
static void test_copy(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    ig_err err = {0};
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        pair a = mk(g, 1000, 1, 1), b = mk(g, 1000, 1, 0);
        size_t es = ig_backend_act_size(g);
        assert_int_equal(ig_backend_copy(g, b.gpu, (char *)a.gpu + 10 * es, 990 * es, &err), IG_OK);
        assert_int_equal(ig_backend_copy(g, a.gpu, a.gpu, 1000 * es, &err), IG_OK);
        float *got = fetch(g, &b);
        assert_memory_equal(got, a.h + 10, 990 * sizeof(float));
        assert_true(got[990] == 0);
        free(got);
        drop(g, &a);
        drop(g, &b);
    }
}

static void test_parallel_pieces(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int B = 2, T = 9, C = 24, V = 13, N = B * T, Vl = 256, valid = 200;
    ig_err err = {0};
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        pair wte = mk(g, (size_t)V * C, 1, 1), out = mk(g, (size_t)N * C, 1, 0);
        pair dout = mk(g, (size_t)N * C, 1, 1), dwte = mk(g, (size_t)V * C, 1, 1);
        pair dwpe = mk(g, (size_t)T * C, 1, 1);
        int32_t *tc, *tg;
        mk_ids(g, (size_t)N, V, &tc, &tg);
        for (int i = 0; i < N; i += 3) tc[i] = -1; /* another rank's */
        assert_int_equal(ig_backend_upload(g, tg, tc, (size_t)N * 4, &err), IG_OK);
        ig_kernel_encoder_forward(fx.ref, out.cpu, tc, wte.cpu, NULL, B, T, C);
        ig_kernel_encoder_forward(g, out.gpu, tg, wte.gpu, NULL, B, T, C);
        ig_kernel_encoder_backward(fx.ref, dwte.cpu, dwpe.cpu, dout.cpu, tc, B, T, C);
        ig_kernel_encoder_backward(g, dwte.gpu, dwpe.gpu, dout.gpu, tg, B, T, C);
        double tol = is_bf16(g) ? tol_of(g) : 0.0;
        check_tol(g, "encoder_forward, other ranks' tokens", &out, tol);
        check_tol(g, "encoder_backward dwte, other ranks' tokens", &dwte, tol);

        pair logits = mk(g, (size_t)N * Vl, 1, 4), rowmax = mk(g, N, 0, 0);
        pair stats = mk(g, 2 * (size_t)N, 0, 0), losses = mk(g, N, 0, 0), dl = mk(g, N, 0, 1);
        int32_t *lc, *lg;
        mk_ids(g, (size_t)N, valid, &lc, &lg);
        for (int i = 0; i < N; i += 4) lc[i] = -1; /* the target is another rank's */
        assert_int_equal(ig_backend_upload(g, lg, lc, (size_t)N * 4, &err), IG_OK);
        ig_kernel_ce_max(fx.ref, rowmax.cpu, logits.cpu, N, valid, Vl);
        ig_kernel_ce_max(g, rowmax.gpu, logits.gpu, N, valid, Vl);
        check(g, "ce_max", &rowmax);
        /* the next passes from the reference's inputs, as the all-reduce hands them on */
        assert_int_equal(ig_backend_upload(g, rowmax.gpu, rowmax.cpu, (size_t)N * 4, &err), IG_OK);
        ig_kernel_ce_sums(fx.ref, stats.cpu, logits.cpu, rowmax.cpu, lc, N, valid, Vl);
        ig_kernel_ce_sums(g, stats.gpu, logits.gpu, rowmax.gpu, lg, N, valid, Vl);
        check(g, "ce_sums", &stats);
        assert_int_equal(ig_backend_upload(g, stats.gpu, stats.cpu, (size_t)N * 8, &err), IG_OK);
        ig_kernel_ce_finish(fx.ref, losses.cpu, logits.cpu, rowmax.cpu, stats.cpu, lc, dl.cpu, N,
                            valid, Vl);
        ig_kernel_ce_finish(g, losses.gpu, logits.gpu, rowmax.gpu, stats.gpu, lg, dl.gpu, N, valid,
                            Vl);
        check(g, "ce_finish losses", &losses);
        check(g, "ce_finish dlogits", &logits);

        pair a = mk(g, 1000, 1, 1), b = mk(g, 1000, 1, 1), sum = mk(g, 1000, 1, 0);
        ig_kernel_add(fx.ref, sum.cpu, a.cpu, b.cpu, 1000);
        ig_kernel_add(g, sum.gpu, a.gpu, b.gpu, 1000);
        check_tol(g, "add", &sum, is_bf16(g) ? tol_of(g) : 0.0);
        pair *ps[] = {&wte,   &out,    &dout, &dwte, &dwpe, &logits, &rowmax,
                      &stats, &losses, &dl,   &a,    &b,    &sum};
        for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) drop(g, ps[i]);
        ig_backend_release(fx.ref, tc), ig_backend_release(g, tg);
        ig_backend_release(fx.ref, lc), ig_backend_release(g, lg);
    }
}

static void test_adamw(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    size_t n = 5000;
    for (int k = 0; k < 2; k++)
        for (int with_master = 0; with_master < 2; with_master++) {
            ig_backend *g = fx.gpu[k];
            if (is_bf16(g) && !with_master) continue; /* bf16 parameters need their master */
            pair p = mk(g, n, 1, 1), grads = mk(g, n, 1, 1), m = mk(g, n, 0, 0.1f);
            pair v = mk(g, n, 0, 0.1f);
            for (size_t i = 0; i < n; i++) v.cpu[i] = fabsf(v.cpu[i]), v.h[i] = v.cpu[i];
            ig_err err = {0};
            assert_int_equal(ig_backend_upload(g, v.gpu, v.h, n * 4, &err), IG_OK);
            pair master = mk(g, n, 0, 0);
            memcpy(master.cpu, p.h, n * 4);
            assert_int_equal(ig_backend_upload(g, master.gpu, p.h, n * 4, &err), IG_OK);
            for (int step = 1; step <= 3; step++) {
                ig_kernel_adamw(fx.ref, p.cpu, with_master ? master.cpu : NULL, grads.cpu, m.cpu,
                                v.cpu, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, step);
                ig_kernel_adamw(g, p.gpu, with_master ? (float *)master.gpu : NULL, grads.gpu,
                                (float *)m.gpu, (float *)v.gpu, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                                0.5f, step);
            }
            /* the reference keeps fp32 params; a bf16 GPU rounds the master into params */
            check_tol(g, "adamw params", &p, is_bf16(g) ? 1e-2 : 1e-5);
            check_tol(g, "adamw m", &m, 1e-5);
            check_tol(g, "adamw v", &v, 1e-5);
            if (with_master) check_tol(g, "adamw master", &master, 1e-5);
            pair *ps[] = {&p, &grads, &m, &v, &master};
            for (size_t i = 0; i < 5; i++) drop(g, ps[i]);
        }
}

static void test_sum_squares_and_scale(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    size_t sizes[] = {1, 1000, (size_t)3 << 18}; /* one chunk, and several */
    for (int k = 0; k < 2; k++)
        for (size_t si = 0; si < 3; si++) {
            ig_backend *g = fx.gpu[k];
            pair x = mk(g, sizes[si], 1, 1);
            double a = ig_kernel_sum_squares(fx.ref, x.cpu, x.n);
            double b = ig_kernel_sum_squares(g, x.gpu, x.n);
            if (!(fabs(a - b) <= 1e-12 * a))
                fail_msg("sum_squares (%s, n %zu): gpu %.17g, cpu %.17g", NAMES(g), x.n, b, a);
            ig_kernel_scale(fx.ref, x.cpu, x.n, 0.37f);
            ig_kernel_scale(g, x.gpu, x.n, 0.37f);
            check_tol(g, "scale", &x, is_bf16(g) ? 4e-3 : 0.0);
            drop(g, &x);
        }
}

/* The weights' moving average from the fp32 master weights and from the parameters (fp32 or
 * bf16): the CPU's bits (each product rounded, then the sum), and decay 0 copies. */
static void test_ema(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    size_t n = 100003;
    for (int k = 0; k < 2; k++)
        for (int with_master = 0; with_master < 2; with_master++) {
            ig_backend *g = fx.gpu[k];
            pair w = mk(g, n, 1, 1), master = mk(g, n, 0, 1), e = mk(g, n, 0, 1);
            for (int step = 0; step < 3; step++) {
                float d = step ? 0.999f : 0.0f;
                ig_kernel_ema(fx.ref, e.cpu, with_master ? master.cpu : NULL, w.cpu, n, d);
                ig_kernel_ema(g, (float *)e.gpu, with_master ? (float *)master.gpu : NULL, w.gpu, n,
                              d);
            }
            check_tol(g, with_master ? "ema (master)" : "ema (parameters)", &e, 0.0);
            pair *ps[] = {&w, &master, &e};
            for (size_t i = 0; i < 3; i++) drop(g, ps[i]);
        }
}

/* ---- determinism: every kernel twice, the same bits ------------------------------------------ */

/* Runs a small training-shaped sequence of kernels on g from seed and returns the raw bytes of
 * every output, back to back (free it). */
static unsigned char *run_all(ig_backend *g, uint64_t seed, size_t *len) {
    rng_state = seed;
    int B = 2, T = 70, C = 64, NH = 2, V = 50, Vp = 128, N = B * T;
    size_t nc = (size_t)N * C;
    pair wte = mk(g, (size_t)Vp * C, 1, 1), wpe = mk(g, (size_t)T * C, 1, 1);
    pair x = mk(g, nc, 1, 0), ln = mk(g, nc, 1, 0), mean = mk(g, N, 0, 0), rstd = mk(g, N, 0, 0);
    pair w = mk(g, C, 1, 1), b = mk(g, C, 1, 1), wq = mk(g, (size_t)C * 3 * C, 1, 1);
    pair bq = mk(g, 3 * (size_t)C, 1, 1), qkv = mk(g, nc * 3, 1, 0), att = mk(g, nc, 1, 0);
    pair lse = mk(g, (size_t)B * NH * T, 0, 0), logits = mk(g, (size_t)N * Vp, 1, 0);
    pair losses = mk(g, N, 0, 0), dloss = mk(g, N, 0, 1), dqkv = mk(g, nc * 3, 1, 0);
    pair dln = mk(g, nc, 1, 0), dx = mk(g, nc, 1, 0), dwq = mk(g, (size_t)C * 3 * C, 1, 0);
    pair dbq = mk(g, 3 * (size_t)C, 1, 0), dw = mk(g, C, 1, 0), db = mk(g, C, 1, 0);
    pair dwte = mk(g, (size_t)Vp * C, 1, 0), dwpe = mk(g, (size_t)T * C, 1, 0);
    pair gl = mk(g, nc * 4, 1, 1), glo = mk(g, nc * 4, 1, 0), bias4 = mk(g, 4 * (size_t)C, 1, 1);
    /* Llama's kernels, and attention grouped-query (one key/value head) and non-causal over qkv
     * read as [B, T, (NH + 2) hs] rows */
    ig_attention_shape sq = att_shape(B, T, NH, 1, C / NH, 0);
    pair rrs = mk(g, N, 0, 0), rn = mk(g, nc, 1, 0), sw = mk(g, nc, 1, 0), dsg = mk(g, nc, 1, 0);
    pair dsu = mk(g, nc, 1, 0), drn = mk(g, nc, 1, 0), dwr = mk(g, C, 1, 0);
    pair att2 = mk(g, nc, 1, 0), lse2 = mk(g, (size_t)B * NH * T, 0, 0),
         dqkv2 = mk(g, nc * 3, 1, 0);
    /* DiT's kernels: rows 5 .. 144 of samples of 33 rows (0 .. 4), vectors in a [5, 6C]
     * modulation */
    int drps = 33, drow0 = 5, dB = (drow0 + N - 1) / drps + 1, dld = 6 * C;
    size_t as = ig_backend_act_size(g);
    pair dmod = mk(g, (size_t)dB * dld, 1, 1), dmo = mk(g, nc, 1, 0), dmm = mk(g, N, 0, 0);
    pair dmr = mk(g, N, 0, 0), dmi = mk(g, nc, 1, 0), ddm = mk(g, (size_t)dB * dld, 1, 0);
    pair dgo = mk(g, nc, 1, 0), dgx = mk(g, nc, 1, 0), dsl = mk(g, nc, 1, 0);
    pair dsd = mk(g, nc, 1, 0), dml = mk(g, N, 0, 0), dmp = mk(g, nc, 1, 0);
    /* cross-attention: the same rows 5 .. 144 as samples of 130 rows (0 and 1: sample 0's dkv
     * sums over two tiles), Tk 40 keys, klen 40 and 17; x as q (2 heads of 32) */
    int xrps = 130, xTk = 40, xB = 2;
    pair xkv = mk(g, (size_t)xB * xTk * 2 * C, 1, 1), xo = mk(g, nc, 1, 0);
    pair xl = mk(g, (size_t)N * NH, 0, 0), xdq = mk(g, nc, 1, 0);
    pair xdkv = mk(g, (size_t)xB * xTk * 2 * C, 1, 1);
#define DIT_AT(p, k) ((char *)(p).gpu + (size_t)(k)*C * as)
    int32_t *tc, *tg, *dc, *dg;
    mk_ids(g, N, V, &tc, &tg);
    mk_ids(g, N, 3, &dc, &dg);
    int32_t *xkc, *xkg;
    mk_ids(g, (size_t)xB, 1, &xkc, &xkg);
    xkc[0] = xTk, xkc[1] = 17;
    {
        ig_err err = {0};
        assert_int_equal(ig_backend_upload(g, xkg, xkc, (size_t)xB * 4, &err), IG_OK);
    }
    ig_kernel_encoder_forward(g, x.gpu, tg, wte.gpu, wpe.gpu, B, T, C);
    ig_kernel_layernorm_forward(g, ln.gpu, mean.gpu, rstd.gpu, x.gpu, w.gpu, b.gpu, N, C, 1e-5f);
    ig_kernel_matmul_forward(g, qkv.gpu, ln.gpu, wq.gpu, IG_W_IN_OUT, bq.gpu, N, C, 3 * C);
    ig_kernel_rope_forward(g, qkv.gpu, B, T, NH, NH, C / NH, 5, 10000.0f);
    ig_attention_shape sh = att_shape(B, T, NH, NH, C / NH, 1);
    ig_kernel_attention_forward(g, att.gpu, lse.gpu, qkv.gpu, dg, &sh);
    ig_kernel_attention_forward(g, att2.gpu, lse2.gpu, qkv.gpu, dg, &sq);
    ig_kernel_rmsnorm_forward(g, rn.gpu, rrs.gpu, x.gpu, w.gpu, N, C, 1e-5f);
    ig_kernel_swiglu_forward(g, sw.gpu, rn.gpu, ln.gpu, N, C);
    ig_kernel_swiglu_backward(g, dsg.gpu, dsu.gpu, sw.gpu, rn.gpu, ln.gpu, N, C);
    ig_kernel_rmsnorm_backward(g, drn.gpu, dwr.gpu, dsg.gpu, x.gpu, w.gpu, rrs.gpu, N, C);
    ig_kernel_gelu_bias_forward(g, glo.gpu, gl.gpu, bias4.gpu, N, 4 * C);
    ig_kernel_matmul_forward(g, logits.gpu, att.gpu, wte.gpu, IG_W_OUT_IN, NULL, N, C, Vp);
    ig_kernel_crossentropy(g, losses.gpu, logits.gpu, tg, dloss.gpu, N, V, Vp);
    ig_kernel_matmul_backward(g, dln.gpu, dwte.gpu, NULL, logits.gpu, att.gpu, wte.gpu, IG_W_OUT_IN,
                              N, C, Vp);
    ig_kernel_attention_backward(g, dqkv.gpu, dln.gpu, qkv.gpu, att.gpu, lse.gpu, dg, &sh);
    ig_kernel_attention_backward(g, dqkv2.gpu, dln.gpu, qkv.gpu, att2.gpu, lse2.gpu, dg, &sq);
    ig_kernel_rope_backward(g, dqkv.gpu, B, T, NH, NH, C / NH, 5, 10000.0f);
    ig_kernel_gelu_bias_backward(g, gl.gpu, bias4.gpu, glo.gpu, gl.gpu, bias4.gpu, N, 4 * C);
    ig_kernel_matmul_backward(g, dln.gpu, dwq.gpu, dbq.gpu, dqkv.gpu, ln.gpu, wq.gpu, IG_W_IN_OUT,
                              N, C, 3 * C);
    ig_kernel_layernorm_backward(g, dx.gpu, dw.gpu, db.gpu, dln.gpu, x.gpu, w.gpu, mean.gpu,
                                 rstd.gpu, N, C);
    ig_kernel_encoder_backward(g, dwte.gpu, dwpe.gpu, dx.gpu, tg, B, T, C);
    ig_kernel_silu_forward(g, dsl.gpu, x.gpu, nc);
    ig_kernel_layernorm_modulate_forward(g, dmo.gpu, dmm.gpu, dmr.gpu, x.gpu, DIT_AT(dmod, 0),
                                         DIT_AT(dmod, 1), dld, N, C, drow0, drps, 1e-6f);
    ig_kernel_gate_residual_forward(g, dgo.gpu, x.gpu, dmo.gpu, DIT_AT(dmod, 2), dld, N, C, drow0,
                                    drps);
    ig_kernel_mse(g, dml.gpu, dmp.gpu, dgo.gpu, ln.gpu, N, C, 1.0f / (float)nc);
    ig_kernel_gate_residual_backward(g, dgx.gpu, DIT_AT(ddm, 2), dmp.gpu, dmo.gpu, DIT_AT(dmod, 2),
                                     dld, N, C, drow0, drps);
    ig_kernel_layernorm_modulate_backward(g, dmi.gpu, DIT_AT(ddm, 0), DIT_AT(ddm, 1), dgx.gpu,
                                          x.gpu, DIT_AT(dmod, 1), dld, dmm.gpu, dmr.gpu, N, C,
                                          drow0, drps);
    ig_kernel_silu_backward(g, dsd.gpu, dmi.gpu, x.gpu, nc);
    ig_kernel_cross_attention_forward(g, xo.gpu, xl.gpu, x.gpu, xkv.gpu, xkg, N, drow0, xrps, xTk,
                                      NH, C / NH);
    ig_kernel_cross_attention_backward(g, xdq.gpu, xdkv.gpu, ln.gpu, x.gpu, xkv.gpu, xo.gpu, xl.gpu,
                                       xkg, N, drow0, xrps, xTk, NH, C / NH);
#undef DIT_AT
    double ss = ig_kernel_sum_squares(g, dwte.gpu, dwte.n);
    pair *outs[] = {&x,    &ln,   &mean,  &rstd, &qkv, &att, &lse, &logits, &losses,
                    &dqkv, &dln,  &dx,    &dwq,  &dbq, &dw,  &db,  &dwte,   &dwpe,
                    &gl,   &glo,  &rrs,   &rn,   &sw,  &dsg, &dsu, &drn,    &dwr,
                    &att2, &lse2, &dqkv2, &dmo,  &dmm, &dmr, &dmi, &ddm,    &dgo,
                    &dgx,  &dsl,  &dsd,   &dml,  &dmp, &xo,  &xl,  &xdq,    &xdkv};
    size_t n_outs = sizeof outs / sizeof outs[0], total = sizeof ss;
    for (size_t i = 0; i < n_outs; i++) total += outs[i]->n * sizeof(float);
    unsigned char *all = malloc(total), *at = all;
    memcpy(at, &ss, sizeof ss), at += sizeof ss;
    for (size_t i = 0; i < n_outs; i++) {
        float *h = fetch(g, outs[i]);
        memcpy(at, h, outs[i]->n * sizeof(float));
        at += outs[i]->n * sizeof(float);
        free(h);
    }
    pair *all_pairs[] = {&wte, &wpe, &x,   &ln,     &mean,   &rstd,  &w,    &b,     &wq,   &bq,
                         &qkv, &att, &lse, &logits, &losses, &dloss, &dqkv, &dln,   &dx,   &dwq,
                         &dbq, &dw,  &db,  &dwte,   &dwpe,   &gl,    &glo,  &bias4, &rrs,  &rn,
                         &sw,  &dsg, &dsu, &drn,    &dwr,    &att2,  &lse2, &dqkv2, &dmod, &dmo,
                         &dmm, &dmr, &dmi, &ddm,    &dgo,    &dgx,   &dsl,  &dsd,   &dml,  &dmp,
                         &xkv, &xo,  &xl,  &xdq,    &xdkv};
    for (size_t i = 0; i < sizeof all_pairs / sizeof all_pairs[0]; i++) drop(g, all_pairs[i]);
    ig_backend_release(fx.ref, tc), ig_backend_release(g, tg);
    ig_backend_release(fx.ref, dc), ig_backend_release(g, dg);
    ig_backend_release(fx.ref, xkc), ig_backend_release(g, xkg);
    *len = total;
    return all;
}

static void test_determinism(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    const char *paths[2] = {"fused", "gemm"};
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 2; k++) {
            ig_backend *g = with_path(k ? IG_ACT_BF16 : IG_ACT_F32, paths[p]);
            size_t l1, l2;
            unsigned char *a = run_all(g, 42, &l1), *b = run_all(g, 42, &l2);
            assert_int_equal(l1, l2);
            if (memcmp(a, b, l1) != 0)
                fail_msg("two runs of the same kernels differ (%s, attention %s)", NAMES(g),
                         paths[p]);
            free(a), free(b);
            ig_backend_free(g);
        }
}

/* ---- memory and refusals --------------------------------------------------------------------- */

static void test_out_of_memory(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    ig_backend *g = fx.gpu[1];
    void *p = NULL;
    ig_err err = {0};
    assert_int_equal(ig_backend_alloc(g, (size_t)1 << 50, &p, &err), IG_ERR_NOMEM);
    assert_null(p);
    assert_non_null(strstr(err.msg, "1125899906842624 bytes"));
    assert_non_null(strstr(err.msg, "free of"));
    /* the backend still works */
    assert_int_equal(ig_backend_alloc(g, 1024, &p, &err), IG_OK);
    assert_int_equal(ig_backend_sync(g, &err), IG_OK);
    ig_backend_release(g, p);
}

/* The CUDA table has every operation; the trace reports each call; bf16 stores give the host's
 * rounding, NaN included. */
typedef struct trace_count {
    int calls;
    ig_op last;
} trace_count;

static void count_trace(void *user, ig_op op, double seconds) {
    trace_count *t = user;
    t->calls++;
    t->last = op;
    assert_true(seconds >= 0);
}

static void test_table_trace_rounding(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    for (int k = 0; k < 2; k++)
        for (int op = 0; op < IG_OP_COUNT; op++)
            if (!ig_backend_supports(fx.gpu[k], (ig_op)op))
                fail_msg("the CUDA backend lacks %s", ig_op_name((ig_op)op));
    ig_backend *g = fx.gpu[1];
    trace_count tc = {0};
    ig_backend_set_trace(g, count_trace, &tc);
    pair x = mk(g, 1000, 1, 1);
    ig_kernel_scale(g, x.gpu, x.n, 1.0f);
    ig_kernel_add(g, x.gpu, x.gpu, x.gpu, x.n);
    ig_backend_set_trace(g, NULL, NULL);
    ig_kernel_scale(g, x.gpu, x.n, 1.0f);
    assert_int_equal(tc.calls, 2);
    assert_int_equal(tc.last, IG_OP_ADD);
    drop(g, &x);

    /* bf16 bits through a kernel: x * s rounded on the device = the host's rounding of the same
     * fp32 product; every NaN comes out as 0x7FC0 */
    uint16_t in[8] = {0x3f80, 0x3f81, 0xc2f7, 0x0001, 0x7f7f, 0x7fc0, 0xffc1, 0x7f81}, out[8];
    void *d = NULL;
    ig_err err = {0};
    assert_int_equal(ig_backend_alloc(g, sizeof in, &d, &err), IG_OK);
    assert_int_equal(ig_backend_upload(g, d, in, sizeof in, &err), IG_OK);
    float s = 1.0f / 3.0f;
    ig_kernel_scale(g, d, 8, s);
    assert_int_equal(ig_backend_download(g, out, d, sizeof out, &err), IG_OK);
    for (int i = 0; i < 8; i++) {
        uint16_t want = ig_backend_bf16_from_f32(ig_backend_bf16_to_f32(in[i]) * s);
        if (out[i] != want)
            fail_msg("bf16 %04x * 1/3: device %04x, host %04x", in[i], out[i], want);
    }
    assert_int_equal(out[6], 0x7fc0);
    ig_backend_release(g, d);
}

/* Needs no device: refusals before one is touched, or the reason there is none. */
static void test_refusals(void **state) {
    (void)state;
    ig_cuda_info ci;
    ig_cuda_query(&ci);
    ig_backend_opts o = ig_backend_opts_default();
    o.kind = IG_BACKEND_CUDA;
    ig_backend *be = NULL;
    ig_err err = {0};
    if (!ci.compiled) {
        assert_int_equal(ig_backend_create(&be, fx.ctx, &o, &err), IG_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "not in this build"));
        return;
    }
    setenv("IG_CUDA_ATTENTION", "flash3", 1);
    assert_int_equal(ig_backend_create(&be, fx.ctx, &o, &err), IG_ERR_INVALID_ARG);
    unsetenv("IG_CUDA_ATTENTION");
    assert_non_null(strstr(err.msg, "IG_CUDA_ATTENTION=flash3"));
    if (!fx.device) {
        assert_int_equal(ig_backend_create(&be, fx.ctx, &o, &err), IG_ERR_UNSUPPORTED);
        assert_non_null(strstr(err.msg, "no CUDA device"));
        return;
    }
    o.device = 1 << 20;
    assert_int_equal(ig_backend_create(&be, fx.ctx, &o, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "does not exist"));
}

/* ---- the model on the GPU -------------------------------------------------------------------- */

enum { ML = 2, MNH = 2, MC = 64, MT = 32, MV = 97, MB = 4 };

/* A model and its optimizer on a backend. */
typedef struct gm {
    ig_model *m;
    ig_optimizer *o;
} gm;

static gm model_on(ig_backend *be) {
    ig_model_config c = {
        .n_layer = ML, .n_head = MNH, .d_model = MC, .seq_len = MT, .vocab_size = MV};
    gm g = {0};
    ig_err err = {0};
    if (ig_model_create(&g.m, fx.ctx, be, &c, MB, MT, 1234, &err) != IG_OK ||
        ig_optimizer_create(&g.o, fx.ctx, g.m, &err) != IG_OK)
        fail_msg("%s", err.msg);
    return g;
}

static void gm_free(gm g) {
    ig_optimizer_free(g.o);
    ig_model_free(g.m);
}

static void train_steps(gm g, const int32_t *tokens, int from, int to, double *losses) {
    ig_err err = {0};
    ig_adamw_hparams h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int s = from; s <= to; s++) {
        double loss = 0, norm = 0;
        if (ig_model_zero_grads(g.m, &err) != IG_OK ||
            ig_model_forward_backward(g.m, tokens, MB, MT, NULL, 1.0f, &loss, NULL, &err) !=
                IG_OK ||
            ig_model_grad_norm(g.m, &norm, &err) != IG_OK ||
            ig_optimizer_step(g.o, s, &h, norm > 1 ? (float)(1 / norm) : 1.0f, &err) != IG_OK)
            fail_msg("step %d: %s", s, err.msg);
        losses[s - 1] = loss;
    }
}

/* The parameters and both moments of a model, on the host. */
static void read_state(gm g, float *out[3], uint64_t n) {
    ig_err err = {0};
    assert_int_equal(ig_model_buffer_elems(g.m), n);
    assert_int_equal(ig_model_read(g.m, IG_MODEL_PARAMS, out[0], &err), IG_OK);
    assert_int_equal(ig_optimizer_read(g.o, IG_MOMENT_EXP_AVG, out[1], &err), IG_OK);
    assert_int_equal(ig_optimizer_read(g.o, IG_MOMENT_EXP_AVG_SQ, out[2], &err), IG_OK);
}

static void test_model_losses(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int32_t tokens[MB * (MT + 1)];
    rng_state = 7;
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
        tokens[i] = (int32_t)((urand() + 1) * 0.5f * MV) % MV;
    double cpu[20], gpu[20];
    gm mc = model_on(fx.cpu);
    train_steps(mc, tokens, 1, 20, cpu);
    gm_free(mc);
    for (int k = 0; k < 2; k++) {
        gm mg = model_on(fx.gpu[k]);
        train_steps(mg, tokens, 1, 20, gpu);
        gm_free(mg);
        /* relative: fp32 everywhere 1e-4 (issue 12); bf16 activations with fp32 master weights */
        double tol = k ? 5e-2 : 1e-4;
        for (int s = 0; s < 20; s++)
            if (!(fabs(gpu[s] - cpu[s]) <= tol * fabs(cpu[s])))
                fail_msg("step %d (%s): gpu loss %.6f, cpu %.6f", s + 1, NAMES(fx.gpu[k]), gpu[s],
                         cpu[s]);
        if (!(gpu[19] < gpu[0])) fail_msg("%s: the loss did not fall", NAMES(fx.gpu[k]));
        /* determinism: a second run on the GPU gives the same losses, bit for bit */
        double again[20];
        mg = model_on(fx.gpu[k]);
        train_steps(mg, tokens, 1, 20, again);
        gm_free(mg);
        for (int s = 0; s < 20; s++)
            if (again[s] != gpu[s])
                fail_msg("step %d (%s): a second GPU run gives %.9f, the first %.9f", s + 1,
                         NAMES(fx.gpu[k]), again[s], gpu[s]);
    }
}

/* A checkpoint written from the GPU loads on the CPU: the same parameters and moments. */
static void test_checkpoint_across_devices(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int32_t tokens[MB * (MT + 1)];
    rng_state = 8;
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++)
        tokens[i] = (int32_t)((urand() + 1) * 0.5f * MV) % MV;
    for (int k = 0; k < 2; k++) {
        gm mg = model_on(fx.gpu[k]);
        double losses[3];
        train_steps(mg, tokens, 1, 3, losses);
        char *dir = igt_mkdtemp(), path[4096];
        ig_ckpt_info info;
        memset(&info, 0, sizeof info);
        info.step = 3;
        info.model = *ig_model_shape(mg.m);
        info.seed = 1234;
        info.eod_id = -1;
        info.tp = info.pp = info.dp = 1;
        info.loss = losses[2];
        ig_err err = {0};
        if (ig_ckpt_save(fx.ctx, mg.m, mg.o, &info, NULL, dir, 1, path, sizeof path, &err) != IG_OK)
            fail_msg("%s", err.msg);
        gm mc = model_on(fx.cpu);
        ig_ckpt_info loaded;
        if (ig_ckpt_load(fx.ctx, path, mc.m, mc.o, &loaded, &err) != IG_OK) fail_msg("%s", err.msg);
        assert_int_equal(loaded.step, 3);
        uint64_t n = ig_model_buffer_elems(mg.m);
        float *a[3], *b[3];
        for (int i = 0; i < 3; i++) a[i] = malloc(n * 4), b[i] = malloc(n * 4);
        read_state(mg, a, n);
        read_state(mc, b, n);
        for (int i = 0; i < 3; i++) assert_memory_equal(a[i], b[i], n * 4);
        /* and resumes there: two more steps on each side give the same losses */
        double lg[5], lc[5];
        train_steps(mg, tokens, 4, 5, lg);
        train_steps(mc, tokens, 4, 5, lc);
        double tol = k ? 5e-2 : 1e-4;
        for (int s = 3; s < 5; s++)
            if (!(fabs(lg[s] - lc[s]) <= tol * fabs(lc[s])))
                fail_msg("resumed step %d (%s): gpu loss %.6f, cpu %.6f", s + 1, NAMES(fx.gpu[k]),
                         lg[s], lc[s]);
        /* the reverse: a checkpoint of the CPU model loads on the GPU */
        info.step = 5;
        info.loss = lc[4];
        if (ig_ckpt_save(fx.ctx, mc.m, mc.o, &info, NULL, dir, 1, path, sizeof path, &err) != IG_OK)
            fail_msg("%s", err.msg);
        gm mg2 = model_on(fx.gpu[k]);
        if (ig_ckpt_load(fx.ctx, path, mg2.m, mg2.o, &loaded, &err) != IG_OK)
            fail_msg("%s", err.msg);
        assert_int_equal(loaded.step, 5);
        read_state(mc, a, n);
        read_state(mg2, b, n);
        for (int i = 0; i < 3; i++) assert_memory_equal(a[i], b[i], n * 4);
        for (int i = 0; i < 3; i++) free(a[i]), free(b[i]);
        gm_free(mg2);
        gm_free(mc);
        gm_free(mg);
        igt_rmtree(dir);
        free(dir);
    }
}

int main(void) {
    open_fixture();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_cached),
        cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_dit),
        cmocka_unit_test(test_cross_attention),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_parallel_pieces),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sum_squares_and_scale),
        cmocka_unit_test(test_ema),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_table_trace_rounding),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_model_losses),
        cmocka_unit_test(test_checkpoint_across_devices),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    int device = fx.device;
    char why[sizeof fx.why];
    snprintf(why, sizeof why, "%s", fx.why);
    close_fixture();
    if (failed) return 1;
    if (!device) {
        printf("skipped: %s\n", why);
        return 77;
    }
    return 0;
}
