/* bench_conv.c - the VAE's kernels on the CPU backend (kernels/cpu/) at Stable Diffusion's VAE
 * shapes (256x256 frames: the encoder's and decoder's 3x3 convolutions at 256x256x128 and
 * 64x64x512, a 1x1 shortcut at 128x128x256, the downsample), every figure a ratio against a
 * reference measured in the same run (DESIGN 7):
 *   - conv2d forward and backward (input and weight gradients, the bias's): useful GFLOP/s
 *     (2 N OH OW OC C KH KW per direction; the backward does two) over the GEMM peak of the same
 *     backend and threads (its matmul on a 2048^3 sgemm, measured next to each row: the machine
 *     may be shared);
 *   - GroupNorm + SiLU forward and backward and nearest 2x upsampling: the bytes they must move
 *     per second over memcpy's bandwidth at the same threads and footprint.
 * PyTorch's F.conv2d on the same shapes and threads is tools/bench/conv_peer_torch.py (run.sh puts
 * the two side by side).
 *
 *   bench_conv [threads=2] [--quick]   (best of 3 runs after a warm-up; --quick: one run, the
 *                                       small shapes only)
 *
 * Ends with one machine-readable line "conv_summary k=v ...".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/backend.h"

static void die(const char *what, const ig_err *err) {
    fprintf(stderr, "bench_conv: %s: %s\n", what, err->msg);
    exit(1);
}

static float *buf(ig_backend *be, size_t n, float lo, float hi, uint64_t seed) {
    void *p = NULL;
    ig_err err = {0};
    if (ig_backend_alloc(be, n * sizeof(float), &p, &err) != IG_OK) die("alloc", &err);
    float *x = p;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
    return x;
}

typedef void (*bench_fn)(void *arg);
static int reps = 3;

static double best_of(bench_fn fn, void *arg) {
    fn(arg); /* warm: page faults, the primitives made */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = ig_now();
        fn(arg);
        double dt = ig_now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

/* ---- references: the GEMM peak, memcpy ------------------------------------------------------- */

typedef struct mm_arg {
    ig_backend *be;
    float *a, *b, *c;
    int S;
} mm_arg;

static void mm_run(void *arg) {
    mm_arg *m = arg;
    ig_kernel_matmul_forward(m->be, m->c, m->a, m->b, IG_W_IN_OUT, NULL, m->S, m->S, m->S);
}

static double gemm_peak(ig_backend *be, int S) {
    mm_arg m = {be, buf(be, (size_t)S * S, -1, 1, 1), buf(be, (size_t)S * S, -1, 1, 2),
                buf(be, (size_t)S * S, 0, 0, 3), S};
    double g = 2.0 * S * S * S / best_of(mm_run, &m) / 1e9;
    ig_backend_release(be, m.a), ig_backend_release(be, m.b), ig_backend_release(be, m.c);
    return g;
}

typedef struct copy_arg {
    ig_ctx *ctx;
    char *dst;
    const char *src;
    size_t n;
} copy_arg;

static void copy_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    copy_arg *c = arg;
    memcpy(c->dst + b, c->src + b, e - b);
}

static void copy_run(void *arg) {
    copy_arg *c = arg;
    ig_parallel_range(c->ctx, c->n, (c->n + 15) / 16, copy_chunk, c);
}

/* GB/s of a memcpy of n bytes on the pool, bytes read plus written */
static double memcpy_gbs(ig_ctx *ctx, size_t n) {
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) exit(1);
    memset(a, 1, n), memset(b, 2, n);
    copy_arg c = {ctx, b, a, n};
    double t = best_of(copy_run, &c);
    free(a), free(b);
    return 2.0 * (double)n / t / 1e9;
}

/* ---- convolutions ---------------------------------------------------------------------------- */

typedef struct conv_arg {
    ig_backend *be;
    ig_conv2d_shape s;
    float *x, *w, *b, *out, *dout, *dx, *dw, *db;
} conv_arg;

static void conv_fwd(void *arg) {
    conv_arg *c = arg;
    ig_kernel_conv2d_forward(c->be, c->out, c->x, c->w, c->b, &c->s);
}

static void conv_bwd(void *arg) {
    conv_arg *c = arg;
    ig_kernel_conv2d_backward(c->be, c->dx, c->dw, c->db, c->dout, c->x, c->w, &c->s);
}

typedef struct conv_row {
    const char *name;
    int N, H, W, C, OC, K, S, pt, pl, pb, pr;
} conv_row;

/* the forward's and the backward's GFLOP/s, and their fractions of the GEMM peak next to them */
static void conv_bench(ig_backend *be, const conv_row *r, int S_peak, double out[4]) {
    conv_arg c = {.be = be};
    c.s = (ig_conv2d_shape){.N = r->N,
                            .H = r->H,
                            .W = r->W,
                            .C = r->C,
                            .OC = r->OC,
                            .KH = r->K,
                            .KW = r->K,
                            .stride = r->S,
                            .pad_top = r->pt,
                            .pad_left = r->pl,
                            .pad_bottom = r->pb,
                            .pad_right = r->pr};
    int OH = ig_conv2d_out_h(&c.s), OW = ig_conv2d_out_w(&c.s);
    size_t ni = (size_t)r->N * r->H * r->W * r->C, no = (size_t)r->N * OH * OW * r->OC,
           nw = (size_t)r->OC * r->K * r->K * r->C;
    c.x = buf(be, ni, -1, 1, 10), c.w = buf(be, nw, -0.1f, 0.1f, 11),
    c.b = buf(be, r->OC, -1, 1, 12);
    c.out = buf(be, no, 0, 0, 13), c.dout = buf(be, no, -1, 1, 14), c.dx = buf(be, ni, 0, 0, 15);
    c.dw = buf(be, nw, 0, 0, 16), c.db = buf(be, r->OC, 0, 0, 17);
    double flops = 2.0 * r->N * OH * OW * r->OC * (double)r->C * r->K * r->K;
    double tf = best_of(conv_fwd, &c), pf = gemm_peak(be, S_peak);
    double tb = best_of(conv_bwd, &c), pb = gemm_peak(be, S_peak);
    ig_err err = {0};
    if (ig_backend_sync(be, &err) != IG_OK) die(r->name, &err);
    out[0] = flops / tf / 1e9, out[1] = out[0] / pf;
    out[2] = 2 * flops / tb / 1e9, out[3] = out[2] / pb;
    printf("  %-34s fwd %8.2f ms %7.1f GFLOP/s %.2f of peak | bwd %8.2f ms %7.1f GFLOP/s %.2f of "
           "peak\n",
           r->name, tf * 1e3, out[0], out[1], tb * 1e3, out[2], out[3]);
    float *all[] = {c.x, c.w, c.b, c.out, c.dout, c.dx, c.dw, c.db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ig_backend_release(be, all[i]);
}

/* ---- GroupNorm + SiLU, upsampling ------------------------------------------------------------ */

typedef struct gn_arg {
    ig_backend *be;
    int N, HW, C, G;
    float *x, *w, *b, *out, *mean, *rstd, *dout, *dx, *dw, *db;
} gn_arg;

static void gn_fwd(void *arg) {
    gn_arg *g = arg;
    ig_kernel_groupnorm_forward(g->be, g->out, g->mean, g->rstd, g->x, g->w, g->b, g->N, g->HW,
                                g->C, g->G, 1e-6f, 1);
}

static void gn_bwd(void *arg) {
    gn_arg *g = arg;
    ig_kernel_groupnorm_backward(g->be, g->dx, g->dw, g->db, g->dout, g->x, g->w, g->b, g->mean,
                                 g->rstd, g->N, g->HW, g->C, g->G, 1);
}

typedef struct up_arg {
    ig_backend *be;
    int N, H, W, C;
    float *x, *out;
} up_arg;

static void up_fwd(void *arg) {
    up_arg *u = arg;
    ig_kernel_upsample2x_forward(u->be, u->out, u->x, u->N, u->H, u->W, u->C);
}

static void up_bwd(void *arg) {
    up_arg *u = arg;
    ig_kernel_upsample2x_backward(u->be, u->x, u->out, u->N, u->H, u->W, u->C);
}

int main(int argc, char **argv) {
    int threads = 2, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1, reps = 1;
        else
            threads = atoi(argv[i]);
    }
    if (threads < 1) threads = 2;
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = threads;
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_err err = {0};
    if (ig_ctx_create(&ctx, &o, &err) != IG_OK) die("context", &err);
    if (ig_backend_create(&be, ctx, NULL, &err) != IG_OK) die("backend", &err);
    int S_peak = quick ? 512 : 2048;
    conv_row rows[] = {
        {"3x3 1x256x256x128 -> 128", 1, 256, 256, 128, 128, 3, 1, 1, 1, 1, 1},
        {"3x3 1x64x64x512 -> 512", 1, 64, 64, 512, 512, 3, 1, 1, 1, 1, 1},
        {"1x1 1x128x128x256 -> 256", 1, 128, 128, 256, 256, 1, 1, 0, 0, 0, 0},
        {"3x3 s2 down 1x256x256x128", 1, 256, 256, 128, 128, 3, 2, 0, 0, 1, 1},
    };
    conv_row small[] = {{"3x3 1x32x32x64 -> 64", 1, 32, 32, 64, 64, 3, 1, 1, 1, 1, 1}};
    conv_row *use = quick ? small : rows;
    int nrows = quick ? 1 : (int)(sizeof rows / sizeof *rows);
    printf("conv2d (oneDNN primitives, single-threaded per chunk of the pool), %d threads: useful "
           "GFLOP/s over the backend's GEMM peak (%d^3 sgemm)\n",
           threads, S_peak);
    double res[4][4] = {{0}};
    for (int i = 0; i < nrows; i++) conv_bench(be, &use[i], S_peak, res[i]);

    /* GroupNorm + SiLU at the decoder's 256x256x128 (32 groups); upsampling 128x128x256 */
    int HW = quick ? 64 * 64 : 256 * 256, C = 128;
    size_t n = (size_t)HW * C;
    gn_arg g = {be,
                1,
                HW,
                C,
                32,
                buf(be, n, -2, 2, 20),
                buf(be, C, 0.5f, 1.5f, 21),
                buf(be, C, -1, 1, 22),
                buf(be, n, 0, 0, 23),
                buf(be, 32, 0, 0, 24),
                buf(be, 32, 0, 0, 25),
                buf(be, n, -1, 1, 26),
                buf(be, n, 0, 0, 27),
                buf(be, C, 0, 0, 28),
                buf(be, C, 0, 0, 29)};
    double bw = memcpy_gbs(ctx, n * 4 * 2); /* the footprint of a forward: in + out */
    double tgf = best_of(gn_fwd, &g), tgb = best_of(gn_bwd, &g);
    /* bytes a kernel must move: forward reads x twice (statistics, then the output) and writes
     * out; backward reads x and dout twice each and reads and writes dinp */
    double gbf = 4.0 * n * 3 / tgf / 1e9, gbb = 4.0 * n * 6 / tgb / 1e9;
    int UH = quick ? 32 : 128, UC = quick ? 64 : 256;
    size_t un = (size_t)UH * UH * UC;
    up_arg u = {be, 1, UH, UH, UC, buf(be, un, -1, 1, 30), buf(be, 4 * un, 0, 0, 31)};
    double tuf = best_of(up_fwd, &u), tub = best_of(up_bwd, &u);
    double ubf = 4.0 * un * 5 / tuf / 1e9, ubb = 4.0 * un * 5 / tub / 1e9;
    if (ig_backend_sync(be, &err) != IG_OK) die("groupnorm", &err);
    printf("memory-bound kernels: bytes moved per second over memcpy's %.1f GB/s\n", bw);
    printf("  %-34s fwd %8.2f ms %.2f of memcpy | bwd %8.2f ms %.2f of memcpy\n",
           "groupnorm+silu 1x256x256x128 G=32", tgf * 1e3, gbf / bw, tgb * 1e3, gbb / bw);
    printf("  %-34s fwd %8.2f ms %.2f of memcpy | bwd %8.2f ms %.2f of memcpy\n",
           "upsample2x 1x128x128x256", tuf * 1e3, ubf / bw, tub * 1e3, ubb / bw);

    printf("conv_summary threads=%d", threads);
    const char *keys[4] = {"c3_256", "c3_64", "c1_128", "down_256"};
    for (int i = 0; i < nrows; i++)
        printf(" %s_fwd_gflops=%.1f %s_fwd_peak=%.3f %s_bwd_gflops=%.1f %s_bwd_peak=%.3f", keys[i],
               res[i][0], keys[i], res[i][1], keys[i], res[i][2], keys[i], res[i][3]);
    printf(" gn_fwd_memcpy=%.2f gn_bwd_memcpy=%.2f up_fwd_memcpy=%.2f up_bwd_memcpy=%.2f\n",
           gbf / bw, gbb / bw, ubf / bw, ubb / bw);
    float *all[] = {g.x, g.w, g.b, g.out, g.mean, g.rstd, g.dout, g.dx, g.dw, g.db, u.x, u.out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ig_backend_release(be, all[i]);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    return 0;
}
