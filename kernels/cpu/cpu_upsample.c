/* cpu_upsample.c - nearest-neighbour 2x upsampling over NHWC images (the VAE decoder's
 * Upsample2D), forward and backward.
 *
 * Forward: every input pixel's C channels copied to the 2 x 2 output pixels it covers. Backward:
 * each input pixel's gradient is the sum of those four pixels' gradients, in the order (0,0),
 * (0,1), (1,0), (1,1); the reference adds them in double and rounds once, the fast kernel in fp32
 * (so the two agree to an ulp or two, not to the bit). Fast: chunks of input rows on the pool,
 * each element written by one chunk: the same bits for any thread count.
 *
 * Shapes: inp, dinp [N, H, W, C]; out, dout [N, 2H, 2W, C].
 */
#include "cpu_internal.h"

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_upsample2x_forward(ig_backend *be, void *out_, const void *inp_, int N, int H,
                                   int W, int C) {
    (void)be;
    float *out = out_;
    const float *inp = inp_;
    for (int n = 0; n < N; n++)
        for (int y = 0; y < 2 * H; y++)
            for (int x = 0; x < 2 * W; x++)
                for (int c = 0; c < C; c++)
                    out[(((size_t)n * 2 * H + y) * 2 * W + x) * C + c] =
                        inp[(((size_t)n * H + y / 2) * W + x / 2) * C + c];
}

void ig_cpu_ref_upsample2x_backward(ig_backend *be, void *dinp_, const void *dout_, int N, int H,
                                    int W, int C) {
    (void)be;
    float *dinp = dinp_;
    const float *dout = dout_;
    for (int n = 0; n < N; n++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                for (int c = 0; c < C; c++) {
                    double s = 0;
                    for (int dy = 0; dy < 2; dy++)
                        for (int dx = 0; dx < 2; dx++)
                            s += dout[(((size_t)n * 2 * H + 2 * y + dy) * 2 * W + 2 * x + dx) * C +
                                      c];
                    dinp[(((size_t)n * H + y) * W + x) * C + c] = (float)s;
                }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct up_job {
    float *dst;
    const float *src;
    int W, C;
} up_job;

/* input rows [b, e) of all samples (row r = n H + y): its two output rows */
IG_CPU_CLONES
static void up_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    up_job *j = arg;
    size_t C = (size_t)j->C, in_row = (size_t)j->W * C;
    for (size_t r = b; r < e; r++) {
        const float *x = j->src + r * in_row;
        float *o = j->dst + 2 * r * 2 * in_row; /* output row 2y of the same sample */
        for (int w = 0; w < j->W; w++) {
            memcpy(o + (2 * (size_t)w) * C, x + (size_t)w * C, C * sizeof *o);
            memcpy(o + (2 * (size_t)w + 1) * C, x + (size_t)w * C, C * sizeof *o);
        }
        memcpy(o + 2 * in_row, o, 2 * in_row * sizeof *o);
    }
}

void ig_cpu_upsample2x_forward(ig_backend *be, void *out, const void *inp, int N, int H, int W,
                               int C) {
    up_job j = {.dst = out, .src = inp, .W = W, .C = C};
    size_t rows = (size_t)N * H;
    ig_parallel_range(be->ctx, rows, ig_cpu_chunk(rows, 64, 1), up_fwd_chunk, &j);
}

IG_CPU_CLONES
static void up_bwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    up_job *j = arg;
    size_t C = (size_t)j->C, in_row = (size_t)j->W * C;
    for (size_t r = b; r < e; r++) {
        float *d = j->dst + r * in_row;
        const float *g0 = j->src + 2 * r * 2 * in_row, *g1 = g0 + 2 * in_row;
        for (int w = 0; w < j->W; w++) {
            const float *a = g0 + 2 * (size_t)w * C, *bb = a + C, *c0 = g1 + 2 * (size_t)w * C,
                        *c1 = c0 + C;
            float *o = d + (size_t)w * C;
            for (size_t c = 0; c < C; c++) o[c] = ((a[c] + bb[c]) + c0[c]) + c1[c];
        }
    }
}

void ig_cpu_upsample2x_backward(ig_backend *be, void *dinp, const void *dout, int N, int H, int W,
                                int C) {
    up_job j = {.dst = dinp, .src = dout, .W = W, .C = C};
    size_t rows = (size_t)N * H;
    ig_parallel_range(be->ctx, rows, ig_cpu_chunk(rows, 64, 1), up_bwd_chunk, &j);
}
