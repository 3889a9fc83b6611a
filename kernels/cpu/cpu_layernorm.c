/* cpu_layernorm.c - LayerNorm forward (alone, and with the residual add fused in front) and
 * backward, as torch.nn.LayerNorm (biased variance; the eps the model gives, added in double as
 * ig_cpu_eps reads it: GPT-2's 1e-5f is 1e-5, the bits these kernels always gave).
 *
 * Fast forward and the input gradient go row by row on the pool (a row's statistics are summed
 * in double, in 8 lanes combined in a fixed order). The weight and bias gradients are column sums
 * over all rows: a second pass cuts the columns into chunks, each summing its columns over the
 * rows in row order, in double. No chunk ever depends on the thread count.
 *
 * Shapes: inp, out, residual, a, b_in, dout, dinp [N, C]; w, b, dw, db [C]; mean, rstd [N].
 */
#include <math.h>

#include "cpu_internal.h"

#define LN_LANES 8
#define LN_COLS  64 /* columns per chunk of the weight-gradient pass */

/* ---- reference ------------------------------------------------------------------------------- */

static void ref_ln_row(float *out, float *mean, float *rstd, const float *x, const float *w,
                       const float *b, int C, double eps) {
    double m = 0, v = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) v += ((double)x[c] - m) * ((double)x[c] - m);
    v /= C;
    double s = 1.0 / sqrt(v + eps);
    for (int c = 0; c < C; c++) out[c] = (float)(((double)x[c] - m) * s * w[c] + b[c]);
    *mean = (float)m;
    *rstd = (float)s;
}

void ig_cpu_ref_layernorm_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                  const void *inp, const void *w, const void *b, int N, int C,
                                  float eps) {
    (void)be;
    double e = ig_cpu_eps(eps);
    for (int n = 0; n < N; n++)
        ref_ln_row((float *)out + (size_t)n * C, mean + n, rstd + n,
                   (const float *)inp + (size_t)n * C, w, b, C, e);
}

void ig_cpu_ref_residual_layernorm_forward(ig_backend *be, void *residual, void *out, float *mean,
                                           float *rstd, const void *a, const void *b_in,
                                           const void *w, const void *b, int N, int C, float eps) {
    float *r = residual;
    const float *x = a, *y = b_in;
    for (size_t i = 0; i < (size_t)N * C; i++) r[i] = x[i] + y[i];
    ig_cpu_ref_layernorm_forward(be, out, mean, rstd, residual, w, b, N, C, eps);
}

void ig_cpu_ref_layernorm_backward(ig_backend *be, void *dinp_, void *dw_, void *db_,
                                   const void *dout_, const void *inp_, const void *w_,
                                   const float *mean, const float *rstd, int N, int C) {
    (void)be;
    float *dinp = dinp_, *dw = dw_, *db = db_;
    const float *dout = dout_, *inp = inp_, *w = w_;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        double m = mean[n], s = rstd[n], dmean = 0, dnmean = 0;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * s, dnorm = (double)w[c] * d[c];
            dmean += dnorm;
            dnmean += dnorm * xhat;
        }
        dmean /= C;
        dnmean /= C;
        float *di = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * s, dnorm = (double)w[c] * d[c];
            di[c] = (float)(di[c] + (dnorm - dmean - xhat * dnmean) * s);
        }
    }
    for (int c = 0; c < C; c++) {
        double sw = 0, sb = 0;
        for (int n = 0; n < N; n++) {
            double xhat = (inp[(size_t)n * C + c] - (double)mean[n]) * rstd[n];
            sw += dout[(size_t)n * C + c] * xhat;
            sb += dout[(size_t)n * C + c];
        }
        dw[c] = (float)(dw[c] + sw);
        db[c] = (float)(db[c] + sb);
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct ln_job {
    float *out, *residual, *mean, *rstd, *dinp, *dw, *db;
    const float *inp, *a, *b_in, *w, *b, *dout;
    const float *cmean, *crstd;
    double eps; /* forward: ig_cpu_eps of the model's */
    int N, C;
} ln_job;

IG_CPU_INLINE void ln_row(float *out, float *mean, float *rstd, const float *x, const float *w,
                          const float *b, int C, double eps) {
    double md = ig_cpu_lane_sum_d(x, C) / C;
    float m = (float)md;
    double v = ig_cpu_lane_sqdev_d(x, m, C) / C;
    float s = (float)(1.0 / sqrt(v + eps));
    for (int c = 0; c < C; c++) out[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m;
    *rstd = s;
}

IG_CPU_CLONES
static void ln_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    ln_job *j = arg;
    int C = j->C;
    for (size_t n = b; n < e; n++) {
        const float *x = j->inp + n * C;
        if (j->residual) { /* residual = a + b_in, then its LayerNorm */
            float *r = j->residual + n * C;
            const float *p = j->a + n * C, *q = j->b_in + n * C;
            for (int c = 0; c < C; c++) r[c] = p[c] + q[c];
            x = r;
        }
        ln_row(j->out + n * C, j->mean + n, j->rstd + n, x, j->w, j->b, C, j->eps);
    }
}

void ig_cpu_layernorm_forward(ig_backend *be, void *out, float *mean, float *rstd, const void *inp,
                              const void *w, const void *b, int N, int C, float eps) {
    ln_job j = {.out = out,
                .mean = mean,
                .rstd = rstd,
                .inp = inp,
                .w = w,
                .b = b,
                .eps = ig_cpu_eps(eps),
                .N = N,
                .C = C};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), ln_fwd_chunk, &j);
}

void ig_cpu_residual_layernorm_forward(ig_backend *be, void *residual, void *out, float *mean,
                                       float *rstd, const void *a, const void *b_in, const void *w,
                                       const void *b, int N, int C, float eps) {
    ln_job j = {.out = out,
                .residual = residual,
                .mean = mean,
                .rstd = rstd,
                .a = a,
                .b_in = b_in,
                .w = w,
                .b = b,
                .eps = ig_cpu_eps(eps),
                .N = N,
                .C = C};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), ln_fwd_chunk, &j);
}

/* dinp rows */
IG_CPU_CLONES
static void ln_bwd_rows(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    ln_job *j = arg;
    int C = j->C;
    const float *w = j->w;
    for (size_t n = b; n < e; n++) {
        const float *x = j->inp + n * C, *d = j->dout + n * C;
        float m = j->cmean[n], s = j->crstd[n];
        double s1[LN_LANES] = {0}, s2[LN_LANES] = {0};
        int c = 0;
        for (; c + LN_LANES <= C; c += LN_LANES)
            for (int k = 0; k < LN_LANES; k++) {
                float dnorm = w[c + k] * d[c + k], xhat = (x[c + k] - m) * s;
                s1[k] += dnorm;
                s2[k] += dnorm * xhat;
            }
        for (; c < C; c++) {
            float dnorm = w[c] * d[c], xhat = (x[c] - m) * s;
            s1[0] += dnorm;
            s2[0] += dnorm * xhat;
        }
        double t1 = 0, t2 = 0;
        for (int k = 0; k < LN_LANES; k++) t1 += s1[k], t2 += s2[k];
        float dmean = (float)(t1 / C), dnmean = (float)(t2 / C);
        float *di = j->dinp + n * C;
        for (c = 0; c < C; c++) {
            float dnorm = w[c] * d[c], xhat = (x[c] - m) * s;
            di[c] += (dnorm - dmean - xhat * dnmean) * s;
        }
    }
}

/* dw, db: a chunk of columns, summed over the rows in row order */
IG_CPU_CLONES
static void ln_bwd_cols(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    ln_job *j = arg;
    int C = j->C;
    for (size_t ci = b; ci < e; ci++) {
        int c0 = (int)ci * LN_COLS, cw = C - c0 < LN_COLS ? C - c0 : LN_COLS;
        double sw[LN_COLS] = {0}, sb[LN_COLS] = {0};
        for (int n = 0; n < j->N; n++) {
            const float *x = j->inp + (size_t)n * C + c0, *d = j->dout + (size_t)n * C + c0;
            float m = j->cmean[n], s = j->crstd[n];
            for (int k = 0; k < cw; k++) {
                sw[k] += d[k] * ((x[k] - m) * s);
                sb[k] += d[k];
            }
        }
        for (int k = 0; k < cw; k++) {
            j->dw[c0 + k] = (float)(j->dw[c0 + k] + sw[k]);
            j->db[c0 + k] = (float)(j->db[c0 + k] + sb[k]);
        }
    }
}

void ig_cpu_layernorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                               const void *inp, const void *w, const float *mean, const float *rstd,
                               int N, int C) {
    ln_job j = {.dinp = dinp,
                .dw = dw,
                .db = db,
                .dout = dout,
                .inp = inp,
                .w = w,
                .cmean = mean,
                .crstd = rstd,
                .N = N,
                .C = C};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), ln_bwd_rows, &j);
    ig_parallel_range(be->ctx, ((size_t)C + LN_COLS - 1) / LN_COLS, 1, ln_bwd_cols, &j);
}
