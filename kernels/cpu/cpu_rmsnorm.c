/* cpu_rmsnorm.c - RMSNorm forward (alone, and with the residual add fused in front) and backward,
 * as Llama's: out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps), no mean taken out and no
 * bias. The eps is the model's, added in double as ig_cpu_eps reads it (the decimal a config
 * wrote).
 *
 * Backward, with xhat = x * rstd and dnorm = w * dout:
 *   dx = rstd * (dnorm - xhat * mean_j(dnorm_j * xhat_j)),   dw = sum over rows of dout * xhat.
 *
 * Fast forward and the input gradient go row by row on the pool (a row's sums in double, in 8
 * lanes combined in a fixed order). The weight gradient is a column sum over all rows: a second
 * pass cuts the columns into chunks, each summing its columns over the rows in row order, in
 * double. No chunk ever depends on the thread count.
 *
 * Shapes: inp, out, residual, a, b, dout, dinp [N, C]; w, dw [C]; rstd [N].
 */
#include <math.h>

#include "cpu_internal.h"

#define RMS_LANES 8
#define RMS_COLS  64 /* columns per chunk of the weight-gradient pass */

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_rmsnorm_forward(ig_backend *be, void *out_, float *rstd, const void *inp_,
                                const void *w_, int N, int C, float eps) {
    (void)be;
    float *out = out_;
    const float *inp = inp_, *w = w_;
    double e = ig_cpu_eps(eps);
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        double r = 1.0 / sqrt(ss / C + e);
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (float)(x[c] * r * w[c]);
        rstd[n] = (float)r;
    }
}

void ig_cpu_ref_residual_rmsnorm_forward(ig_backend *be, void *residual, void *out, float *rstd,
                                         const void *a_, const void *b_, const void *w, int N,
                                         int C, float eps) {
    float *r = residual;
    const float *a = a_, *b = b_;
    for (size_t i = 0; i < (size_t)N * C; i++) r[i] = a[i] + b[i];
    ig_cpu_ref_rmsnorm_forward(be, out, rstd, residual, w, N, C, eps);
}

void ig_cpu_ref_rmsnorm_backward(ig_backend *be, void *dinp_, void *dw_, const void *dout_,
                                 const void *inp_, const void *w_, const float *rstd, int N,
                                 int C) {
    (void)be;
    float *dinp = dinp_, *dw = dw_;
    const float *dout = dout_, *inp = inp_, *w = w_;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        double r = rstd[n], dnx = 0;
        for (int c = 0; c < C; c++) dnx += (double)w[c] * d[c] * (x[c] * r);
        dnx /= C;
        float *di = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++)
            di[c] = (float)(di[c] + ((double)w[c] * d[c] - x[c] * r * dnx) * r);
    }
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int n = 0; n < N; n++)
            s += (double)dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
        dw[c] = (float)(dw[c] + s);
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct rms_job {
    float *out, *residual, *rstd, *dinp, *dw;
    const float *inp, *a, *b, *w, *dout;
    const float *crstd;
    double eps; /* forward: ig_cpu_eps of the model's */
    int N, C;
} rms_job;

/* sum of x[c]^2 in double, in RMS_LANES lanes added up in lane order */
IG_CPU_INLINE double lane_sumsq(const float *x, int C) {
    double s[RMS_LANES] = {0};
    int c = 0;
    for (; c + RMS_LANES <= C; c += RMS_LANES)
        for (int k = 0; k < RMS_LANES; k++) s[k] += (double)x[c + k] * x[c + k];
    for (; c < C; c++) s[0] += (double)x[c] * x[c];
    double t = 0;
    for (int k = 0; k < RMS_LANES; k++) t += s[k];
    return t;
}

IG_CPU_CLONES
static void rms_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    rms_job *j = arg;
    int C = j->C;
    for (size_t n = b; n < e; n++) {
        const float *x = j->inp + n * C;
        if (j->residual) { /* residual = a + b, then its RMSNorm */
            float *r = j->residual + n * C;
            const float *p = j->a + n * C, *q = j->b + n * C;
            for (int c = 0; c < C; c++) r[c] = p[c] + q[c];
            x = r;
        }
        float s = (float)(1.0 / sqrt(lane_sumsq(x, C) / C + j->eps));
        float *o = j->out + n * C;
        for (int c = 0; c < C; c++) o[c] = x[c] * s * j->w[c];
        j->rstd[n] = s;
    }
}

void ig_cpu_rmsnorm_forward(ig_backend *be, void *out, float *rstd, const void *inp, const void *w,
                            int N, int C, float eps) {
    rms_job j = {
        .out = out, .rstd = rstd, .inp = inp, .w = w, .eps = ig_cpu_eps(eps), .N = N, .C = C};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), rms_fwd_chunk, &j);
}

void ig_cpu_residual_rmsnorm_forward(ig_backend *be, void *residual, void *out, float *rstd,
                                     const void *a, const void *b, const void *w, int N, int C,
                                     float eps) {
    rms_job j = {.out = out,
                 .residual = residual,
                 .rstd = rstd,
                 .a = a,
                 .b = b,
                 .w = w,
                 .eps = ig_cpu_eps(eps),
                 .N = N,
                 .C = C};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), rms_fwd_chunk, &j);
}

/* dinp rows */
IG_CPU_CLONES
static void rms_bwd_rows(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    rms_job *j = arg;
    int C = j->C;
    const float *w = j->w;
    for (size_t n = b; n < e; n++) {
        const float *x = j->inp + n * C, *d = j->dout + n * C;
        float s = j->crstd[n];
        double acc[RMS_LANES] = {0};
        int c = 0;
        for (; c + RMS_LANES <= C; c += RMS_LANES)
            for (int k = 0; k < RMS_LANES; k++) acc[k] += (w[c + k] * d[c + k]) * (x[c + k] * s);
        for (; c < C; c++) acc[0] += (w[c] * d[c]) * (x[c] * s);
        double t = 0;
        for (int k = 0; k < RMS_LANES; k++) t += acc[k];
        float dnx = (float)(t / C);
        float *di = j->dinp + n * C;
        for (c = 0; c < C; c++) di[c] += (w[c] * d[c] - (x[c] * s) * dnx) * s;
    }
}

/* dw: a chunk of columns, summed over the rows in row order */
IG_CPU_CLONES
static void rms_bwd_cols(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    rms_job *j = arg;
    int C = j->C;
    for (size_t ci = b; ci < e; ci++) {
        int c0 = (int)ci * RMS_COLS, cw = C - c0 < RMS_COLS ? C - c0 : RMS_COLS;
        double sw[RMS_COLS] = {0};
        for (int n = 0; n < j->N; n++) {
            const float *x = j->inp + (size_t)n * C + c0, *d = j->dout + (size_t)n * C + c0;
            float s = j->crstd[n];
            for (int k = 0; k < cw; k++) sw[k] += d[k] * (x[k] * s);
        }
        for (int k = 0; k < cw; k++) j->dw[c0 + k] = (float)(j->dw[c0 + k] + sw[k]);
    }
}

void ig_cpu_rmsnorm_backward(ig_backend *be, void *dinp, void *dw, const void *dout,
                             const void *inp, const void *w, const float *rstd, int N, int C) {
    rms_job j = {
        .dinp = dinp, .dw = dw, .dout = dout, .inp = inp, .w = w, .crstd = rstd, .N = N, .C = C};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), rms_bwd_rows, &j);
    ig_parallel_range(be->ctx, ((size_t)C + RMS_COLS - 1) / RMS_COLS, 1, rms_bwd_cols, &j);
}
