/* test_cuda_conv.c - the CUDA backend's VAE and T5 kernels (kernels/cuda/: cuda_conv.cu,
 * cuda_groupnorm.cu, cuda_upsample.cu, cuda_geglu.cu, cuda_relu.cu, cuda_attention_bias.cu) against
 * the CPU reference kernels, on a device (label "cuda": ctest -L cuda). Without one every case is
 * skipped with the reason and the program exits 77 (ctest: skipped). A file of its own beside
 * test_cuda_kernels.c (which is over the project's file size already), with the same fixture and
 * conventions: the same random inputs on the CPU reference and on two CUDA backends, fp32 and bf16
 * (for bf16 the inputs are rounded to bf16 on the host first, so only the arithmetic differs);
 * max |gpu - ref| over max |ref| of each tensor within 1e-4 (fp32: cuDNN without TF32 and fp32
 * sums in another order against the reference's double) or 2e-2 (bf16).
 *
 * Convolutions: 3x3 padding 1, the downsample (padding only bottom and right: padded by hand
 * around cuDNN's symmetric padding), 1x1 with stride 1 and 2, odd sizes, channels off 8;
 * forward with and without bias, the backward's dinp (overwritten), dw and dbias (added to).
 * GroupNorm with and without SiLU: out, mean, rstd, and the backward from the GPU's statistics.
 * Upsampling, GeGLU, T5's position bias (the gather: bit for bit) and attention with bias and key
 * mask (mixed klen, causal, grouped-query heads, scale 1). The VAE's training loss (the L1 term,
 * the posterior's sample and KL term with log-variances past the clamp, their backward) and its
 * mid-block attention (one head of 512 channels: the GEMM path). Every new operation is in the
 * CUDA table, and two runs give the same bits.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

/* ---- fixture: the device, the CPU reference, CUDA fp32 and bf16 ------------------------------ */

typedef struct fixture {
    int device;                    /* 1 when a CUDA device is usable */
    char why[IG_ERR_MSG_MAX + 64]; /* why not */
    ig_ctx *ctx;
    ig_backend *ref;    /* the CPU reference */
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

/* n elements: host values h (bf16-rounded for a bf16 act tensor), the same on the CPU reference
 * (cpu) and on the GPU backend g (gpu); act: the GPU tensor has the act type (else fp32) */
typedef struct pair {
    size_t n;
    int act;
    float *h, *cpu;
    void *gpu;
} pair;

static uint64_t rng_state = 0x243f6a8885a308d3ull;
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
    assert_int_equal(ig_backend_alloc(fx.ref, (n ? n : 1) * sizeof(float), &c, &err), IG_OK);
    p.cpu = c;
    memcpy(p.cpu, p.h, n * sizeof(float));
    size_t es = act ? ig_backend_act_size(g) : sizeof(float);
    assert_int_equal(ig_backend_alloc(g, (n ? n : 1) * es, &p.gpu, &err), IG_OK);
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

/* the GPU tensor's bytes, twice the same (determinism) */
static void check_again(ig_backend *g, const pair *p, const float *first, const char *what) {
    float *now = fetch(g, p);
    if (memcmp(now, first, p->n * sizeof(float)))
        fail_msg("%s (%s): two runs differ", what, NAMES(g));
    free(now);
}

/* ---- the table ------------------------------------------------------------------------------- */

static void test_table(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    ig_op ops[] = {IG_OP_CONV2D_FORWARD,
                   IG_OP_CONV2D_BACKWARD,
                   IG_OP_GROUPNORM_FORWARD,
                   IG_OP_GROUPNORM_BACKWARD,
                   IG_OP_UPSAMPLE2X_FORWARD,
                   IG_OP_UPSAMPLE2X_BACKWARD,
                   IG_OP_GEGLU_FORWARD,
                   IG_OP_GEGLU_BACKWARD,
                   IG_OP_T5_POSITION_BIAS,
                   IG_OP_ATTENTION_BIAS_FORWARD,
                   IG_OP_RELU_FORWARD,
                   IG_OP_L1,
                   IG_OP_POSTERIOR_FORWARD,
                   IG_OP_POSTERIOR_BACKWARD};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
            if (!ig_backend_supports(fx.gpu[k], ops[i]))
                fail_msg("the CUDA backend lacks %s", ig_op_name(ops[i]));
}

/* ---- convolution ----------------------------------------------------------------------------- */

static void conv_case(ig_backend *g, int N, int H, int W, int C, int OC, int K, int S, int pt,
                      int pl, int pb, int pr) {
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
    char name[128];
    snprintf(name, sizeof name, "conv2d %dx%dx%dx%d -> %d %dx%d s%d pad %d,%d,%d,%d", N, H, W, C,
             OC, K, K, S, pt, pl, pb, pr);
    size_t ni = (size_t)N * H * W * C,
           no = (size_t)N * ig_conv2d_out_h(&s) * ig_conv2d_out_w(&s) * OC,
           nw = (size_t)OC * K * K * C;
    pair x = mk(g, ni, 1, 1), w = mk(g, nw, 1, 0.5f), b = mk(g, OC, 1, 1), out = mk(g, no, 1, 0);
    pair dout = mk(g, no, 1, 1), dx = mk(g, ni, 1, 3), dw = mk(g, nw, 1, 1), db = mk(g, OC, 1, 1);
    char what[192];
    for (int bias = 0; bias < 2; bias++) {
        ig_kernel_conv2d_forward(fx.ref, out.cpu, x.cpu, w.cpu, bias ? b.cpu : NULL, &s);
        ig_kernel_conv2d_forward(g, out.gpu, x.gpu, w.gpu, bias ? b.gpu : NULL, &s);
        snprintf(what, sizeof what, "%s forward%s", name, bias ? "" : " without bias");
        check(g, what, &out);
    }
    float *first = fetch(g, &out);
    ig_kernel_conv2d_forward(g, out.gpu, x.gpu, w.gpu, b.gpu, &s);
    check_again(g, &out, first, name);
    free(first);
    ig_kernel_conv2d_backward(fx.ref, dx.cpu, dw.cpu, db.cpu, dout.cpu, x.cpu, w.cpu, &s);
    ig_kernel_conv2d_backward(g, dx.gpu, dw.gpu, db.gpu, dout.gpu, x.gpu, w.gpu, &s);
    snprintf(what, sizeof what, "%s dinp", name);
    check(g, what, &dx);
    snprintf(what, sizeof what, "%s dw", name);
    check(g, what, &dw);
    snprintf(what, sizeof what, "%s dbias", name);
    check(g, what, &db);
    /* dinp skipped: dw accumulates again, dinp untouched */
    float *dx_keep = fetch(g, &dx);
    ig_kernel_conv2d_backward(fx.ref, NULL, dw.cpu, NULL, dout.cpu, x.cpu, w.cpu, &s);
    ig_kernel_conv2d_backward(g, NULL, dw.gpu, NULL, dout.gpu, x.gpu, w.gpu, &s);
    snprintf(what, sizeof what, "%s dw twice", name);
    check(g, what, &dw);
    check_again(g, &dx, dx_keep, "conv2d_backward without dinp leaves it");
    free(dx_keep);
    pair *ps[] = {&x, &w, &b, &out, &dout, &dx, &dw, &db};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) drop(g, ps[i]);
}

static void test_conv(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        conv_case(g, 2, 12, 10, 16, 24, 3, 1, 1, 1, 1, 1); /* the ResNet block's */
        conv_case(g, 1, 8, 7, 8, 16, 3, 2, 0, 0, 1, 1);    /* the downsample, a column unread */
        conv_case(g, 3, 6, 5, 24, 40, 1, 1, 0, 0, 0, 0);   /* the shortcut */
        conv_case(g, 1, 10, 9, 8, 8, 1, 2, 0, 0, 0, 0);    /* 1x1 stride 2 */
        conv_case(g, 2, 17, 13, 5, 3, 3, 1, 1, 1, 1, 1);   /* conv_in / conv_out's channels */
        conv_case(g, 1, 9, 11, 16, 8, 3, 2, 1, 1, 1, 1);   /* stride 2, symmetric padding */
        conv_case(g, 1, 6, 6, 8, 8, 3, 1, 2, 0, 0, 2);     /* other asymmetric padding */
    }
}

/* ---- GroupNorm, upsampling, GeGLU ------------------------------------------------------------ */

static void test_groupnorm(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    int shapes[][4] = {{2, 37, 64, 32}, {1, 300, 96, 32}, {3, 5, 8, 4}, {1, 5000, 16, 4}};
    for (int k = 0; k < 2; k++)
        for (int sh = 0; sh < 4; sh++)
            for (int silu = 0; silu < 2; silu++) {
                ig_backend *g = fx.gpu[k];
                int N = shapes[sh][0], HW = shapes[sh][1], C = shapes[sh][2], G = shapes[sh][3];
                size_t n = (size_t)N * HW * C;
                pair x = mk(g, n, 1, 2), w = mk(g, C, 1, 1), b = mk(g, C, 1, 1),
                     out = mk(g, n, 1, 0), mean = mk(g, (size_t)N * G, 0, 0),
                     rstd = mk(g, (size_t)N * G, 0, 0);
                char what[128];
                snprintf(what, sizeof what, "groupnorm N=%d HW=%d C=%d G=%d silu=%d", N, HW, C, G,
                         silu);
                ig_kernel_groupnorm_forward(fx.ref, out.cpu, mean.cpu, rstd.cpu, x.cpu, w.cpu,
                                            b.cpu, N, HW, C, G, 1e-6f, silu);
                ig_kernel_groupnorm_forward(g, out.gpu, mean.gpu, rstd.gpu, x.gpu, w.gpu, b.gpu, N,
                                            HW, C, G, 1e-6f, silu);
                check(g, what, &out);
                check_tol(g, what, &mean, 1e-5);
                check_tol(g, what, &rstd, 1e-5);
                /* backward from the GPU's statistics on both sides, into nonzero gradients */
                float *gm = fetch(g, &mean), *gr = fetch(g, &rstd);
                memcpy(mean.cpu, gm, (size_t)N * G * sizeof(float));
                memcpy(rstd.cpu, gr, (size_t)N * G * sizeof(float));
                free(gm), free(gr);
                pair dout = mk(g, n, 1, 1), dx = mk(g, n, 1, 1), dw = mk(g, C, 1, 1),
                     db = mk(g, C, 1, 1);
                ig_kernel_groupnorm_backward(fx.ref, dx.cpu, dw.cpu, db.cpu, dout.cpu, x.cpu, w.cpu,
                                             b.cpu, mean.cpu, rstd.cpu, N, HW, C, G, silu);
                ig_kernel_groupnorm_backward(g, dx.gpu, dw.gpu, db.gpu, dout.gpu, x.gpu, w.gpu,
                                             b.gpu, mean.gpu, rstd.gpu, N, HW, C, G, silu);
                check(g, "groupnorm_backward dinp", &dx);
                check(g, "groupnorm_backward dw", &dw);
                check(g, "groupnorm_backward db", &db);
                pair *ps[] = {&x, &w, &b, &out, &mean, &rstd, &dout, &dx, &dw, &db};
                for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) drop(g, ps[i]);
            }
}

static void test_upsample_geglu(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        int N = 2, H = 5, W = 7, C = 12;
        size_t n = (size_t)N * H * W * C;
        pair x = mk(g, n, 1, 1), out = mk(g, 4 * n, 1, 0), dout = mk(g, 4 * n, 1, 1),
             dx = mk(g, n, 1, 1);
        ig_kernel_upsample2x_forward(fx.ref, out.cpu, x.cpu, N, H, W, C);
        ig_kernel_upsample2x_forward(g, out.gpu, x.gpu, N, H, W, C);
        check_tol(g, "upsample2x_forward", &out, 0.0);
        ig_kernel_upsample2x_backward(fx.ref, dx.cpu, dout.cpu, N, H, W, C);
        ig_kernel_upsample2x_backward(g, dx.gpu, dout.gpu, N, H, W, C);
        check(g, "upsample2x_backward", &dx);
        pair *ps[] = {&x, &out, &dout, &dx};
        for (size_t i = 0; i < 4; i++) drop(g, ps[i]);

        int NR = 300, F = 72;
        size_t nf = (size_t)NR * F;
        pair gate = mk(g, nf, 1, 6), up = mk(g, nf, 1, 2), o = mk(g, nf, 1, 0);
        pair d = mk(g, nf, 1, 1), dg = mk(g, nf, 1, 1), du = mk(g, nf, 1, 1);
        ig_kernel_geglu_forward(fx.ref, o.cpu, gate.cpu, up.cpu, NR, F);
        ig_kernel_geglu_forward(g, o.gpu, gate.gpu, up.gpu, NR, F);
        check(g, "geglu_forward", &o);
        ig_kernel_geglu_backward(fx.ref, dg.cpu, du.cpu, d.cpu, gate.cpu, up.cpu, NR, F);
        ig_kernel_geglu_backward(g, dg.gpu, du.gpu, d.gpu, gate.gpu, up.gpu, NR, F);
        check(g, "geglu_backward dgate", &dg);
        check(g, "geglu_backward dup", &du);
        /* ReLU (T5 v1.0), in place on the gate's copy: exact in either type */
        ig_kernel_relu_forward(fx.ref, gate.cpu, gate.cpu, nf);
        ig_kernel_relu_forward(g, gate.gpu, gate.gpu, nf);
        check_tol(g, "relu_forward", &gate, 0.0);
        pair *qs[] = {&gate, &up, &o, &d, &dg, &du};
        for (size_t i = 0; i < 6; i++) drop(g, qs[i]);
    }
}

/* ---- the VAE's loss and its mid-block attention ---------------------------------------------- */

/* the L1 term, the posterior's sample and KL term (log-variances past both clamps among them) and
 * their backward; single-head attention of 512 channels (the SD VAE's mid block: the GEMM path) */
static void test_vae_loss(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    for (int k = 0; k < 2; k++) {
        ig_backend *g = fx.gpu[k];
        int N = 300, K = 3, C = 4;
        size_t n = (size_t)N * K, nz = (size_t)N * C;
        pair p = mk(g, n, 1, 2), t = mk(g, n, 1, 2), l = mk(g, N, 0, 0), d = mk(g, n, 1, 0);
        ig_kernel_l1(fx.ref, l.cpu, d.cpu, p.cpu, t.cpu, N, K, 0.01f);
        ig_kernel_l1(g, l.gpu, d.gpu, p.gpu, t.gpu, N, K, 0.01f);
        check(g, "l1 losses", &l);
        check_tol(g, "l1 dpred", &d, 0.0); /* signs times the scale */
        pair mo = mk(g, 2 * nz, 1, 3), eps = mk(g, nz, 1, 2), z = mk(g, nz, 1, 0);
        pair kl = mk(g, N, 0, 0), dz = mk(g, nz, 1, 1), dm = mk(g, 2 * nz, 1, 0);
        float lv[] = {-45.0f, 31.0f, -30.0f, 20.0f};
        for (int i = 0; i < 4; i++) { /* the same values both sides (exact in bf16 too) */
            size_t at = (size_t)(i * 17) * 2 * C + (size_t)C + (size_t)i;
            mo.h[at] = mo.cpu[at] = lv[i];
        }
        ig_err err = {0};
        assert_int_equal(ig_backend_upload_f32(g, mo.gpu, mo.h, mo.n, &err), IG_OK);
        ig_kernel_posterior_forward(fx.ref, z.cpu, kl.cpu, mo.cpu, eps.cpu, N, C);
        ig_kernel_posterior_forward(g, z.gpu, kl.gpu, mo.gpu, eps.gpu, N, C);
        check(g, "posterior_forward z", &z);
        check(g, "posterior_forward kl", &kl);
        ig_kernel_posterior_backward(fx.ref, dm.cpu, dz.cpu, mo.cpu, eps.cpu, N, C, 0.3f);
        ig_kernel_posterior_backward(g, dm.gpu, dz.gpu, mo.gpu, eps.gpu, N, C, 0.3f);
        check(g, "posterior_backward", &dm);
        float *first = fetch(g, &dm);
        ig_kernel_posterior_backward(g, dm.gpu, dz.gpu, mo.gpu, eps.gpu, N, C, 0.3f);
        check_again(g, &dm, first, "posterior_backward");
        free(first);
        pair *ps[] = {&p, &t, &l, &d, &mo, &eps, &z, &kl, &dz, &dm};
        for (size_t i = 0; i < sizeof ps / sizeof *ps; i++) drop(g, ps[i]);

        int B = 2, T = 64, hs = 512;
        ig_attention_shape s = {.B = B, .T = T, .n_head = 1, .n_kv_head = 1, .head_size = hs};
        size_t rows = (size_t)B * T;
        pair qkv = mk(g, rows * 3 * hs, 1, 1), out = mk(g, rows * hs, 1, 0);
        pair lse = mk(g, rows, 0, 0), dout = mk(g, rows * hs, 1, 1),
             dqkv = mk(g, rows * 3 * hs, 1, 0);
        ig_kernel_attention_forward(fx.ref, out.cpu, lse.cpu, qkv.cpu, NULL, &s);
        ig_kernel_attention_forward(g, out.gpu, lse.gpu, qkv.gpu, NULL, &s);
        check(g, "attention_forward (head size 512)", &out);
        check(g, "attention_forward lse (head size 512)", &lse);
        ig_kernel_attention_backward(fx.ref, dqkv.cpu, dout.cpu, qkv.cpu, out.cpu, lse.cpu, NULL,
                                     &s);
        ig_kernel_attention_backward(g, dqkv.gpu, dout.gpu, qkv.gpu, out.gpu, lse.gpu, NULL, &s);
        check(g, "attention_backward (head size 512)", &dqkv);
        pair *qs[] = {&qkv, &out, &lse, &dout, &dqkv};
        for (size_t i = 0; i < sizeof qs / sizeof *qs; i++) drop(g, qs[i]);
    }
}

/* ---- T5 -------------------------------------------------------------------------------------- */

static void test_t5_attention(void **state) {
    (void)state;
    REQUIRE_DEVICE();
    struct {
        int B, T, NH, NKV, hs, causal, bias;
    } cases[] = {{2, 7, 3, 3, 4, 0, 1},
                 {3, 120, 4, 4, 64, 0, 1},
                 {2, 65, 4, 2, 32, 1, 1},
                 {1, 300, 2, 2, 64, 0, 0}};
    for (int k = 0; k < 2; k++)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            ig_backend *g = fx.gpu[k];
            int B = cases[c].B, T = cases[c].T, NH = cases[c].NH, NKV = cases[c].NKV,
                hs = cases[c].hs;
            ig_attention_shape s = {.B = B,
                                    .T = T,
                                    .n_head = NH,
                                    .n_kv_head = NKV,
                                    .head_size = hs,
                                    .causal = cases[c].causal,
                                    .scale = 1.0f};
            size_t R = (size_t)(NH + 2 * NKV) * hs, C = (size_t)NH * hs;
            pair table = mk(g, (size_t)32 * NH, 1, 2), bias = mk(g, (size_t)NH * T * T, 1, 0);
            pair qkv = mk(g, (size_t)B * T * R, 1, 1), out = mk(g, (size_t)B * T * C, 1, 0);
            pair lse = mk(g, (size_t)B * NH * T, 0, 0);
            ig_kernel_t5_position_bias(fx.ref, bias.cpu, table.cpu, T, NH, 32, 128, 1);
            ig_kernel_t5_position_bias(g, bias.gpu, table.gpu, T, NH, 32, 128, 1);
            check_tol(g, "t5_position_bias", &bias, 0.0); /* a gather: the same bits */
            int32_t *kc = NULL, *kg = NULL;
            ig_err err = {0};
            assert_int_equal(ig_backend_alloc(fx.ref, (size_t)B * 4, (void **)&kc, &err), IG_OK);
            assert_int_equal(ig_backend_alloc(g, (size_t)B * 4, (void **)&kg, &err), IG_OK);
            for (int b = 0; b < B; b++) kc[b] = b == 0 ? T : 1 + (b * 37) % T;
            assert_int_equal(ig_backend_upload(g, kg, kc, (size_t)B * 4, &err), IG_OK);
            const void *bc = cases[c].bias ? bias.cpu : NULL, *bg = cases[c].bias ? bias.gpu : NULL;
            ig_kernel_attention_bias_forward(fx.ref, out.cpu, lse.cpu, qkv.cpu, bc, kc, &s);
            ig_kernel_attention_bias_forward(g, out.gpu, lse.gpu, qkv.gpu, bg, kg, &s);
            check(g, "attention_bias_forward out", &out);
            check(g, "attention_bias_forward lse", &lse);
            float *first = fetch(g, &out);
            ig_kernel_attention_bias_forward(g, out.gpu, lse.gpu, qkv.gpu, bg, kg, &s);
            check_again(g, &out, first, "attention_bias_forward");
            free(first);
            ig_backend_release(fx.ref, kc);
            ig_backend_release(g, kg);
            pair *ps[] = {&table, &bias, &qkv, &out, &lse};
            for (size_t i = 0; i < 5; i++) drop(g, ps[i]);
        }
}

int main(void) {
    open_fixture();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),        cmocka_unit_test(test_conv),
        cmocka_unit_test(test_groupnorm),    cmocka_unit_test(test_upsample_geglu),
        cmocka_unit_test(test_t5_attention), cmocka_unit_test(test_vae_loss),
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
