/* cpu_groupnorm.c - GroupNorm over NHWC rows, optionally fused with SiLU (the VAE's ResNet
 * blocks), forward and backward.
 *
 * Per sample n and group g (channels g*Cg .. g*Cg+Cg-1 of every one of the HW rows, M = HW Cg
 * elements): mean, var (biased), rstd = 1 / sqrt(var + eps); xhat = (x - mean) rstd; y = xhat
 * w[c] + b[c]; out = y, or silu(y) = y / (1 + e^-y). Backward, with dy = dout (or dout * silu'(y),
 * silu'(y) = s (1 + y (1 - s)), s = 1 / (1 + e^-y), y recomputed), dxhat = dy w[c]:
 *   dx = rstd (dxhat - mean_g(dxhat) - xhat mean_g(dxhat xhat)),  dw[c] += sum dy xhat,
 *   db[c] += sum dy.
 *
 * Reference: the group's sums in double in row order (two passes: the mean, then the squared
 * deviations), each output in double rounded once.
 *
 * Fast: three passes over rows, each cut into chunks of rows of one sample (a function of the sizes
 * only): (1) per chunk, per channel, sums in double (forward: of x and x^2; backward: of dy xhat
 * and dy) into a partial row of C; (2) on the calling thread, the chunks' partials added in chunk
 * order, then a group's channels in channel order: the statistics (var = E[x^2] - mean^2, in
 * double: exact enough for fp32 data whose mean is within 10^4 standard deviations of 0), and in
 * the backward the group's two sums and the per-channel dw, db (samples in order); (3) per chunk,
 * the output rows (forward: x - mean as (x - hi) - lo, the double mean split in two floats, so an
 * input far from 0 loses nothing to the mean's rounding) or dx added to dinp. Channels are the
 * inner loop everywhere (contiguous, vectorised across channels, never a reduction across lanes):
 * the same bits for any thread count and on every CPU.
 *
 * Shapes: inp, out, dout, dinp [N, HW, C]; w, b, dw, db [C]; mean, rstd [N, G].
 */
#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"

/* ---- reference ------------------------------------------------------------------------------- */

static double ref_silu_grad(double y) {
    double s = 1.0 / (1.0 + exp(-y));
    return s * (1.0 + y * (1.0 - s));
}

void ig_cpu_ref_groupnorm_forward(ig_backend *be, void *out_, float *mean, float *rstd,
                                  const void *inp_, const void *w_, const void *b_, int N, int HW,
                                  int C, int G, float eps, int silu) {
    (void)be;
    float *out = out_;
    const float *inp = inp_, *w = w_, *b = b_;
    int Cg = C / G;
    double e = ig_cpu_eps(eps), M = (double)HW * Cg;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            const float *x = inp + (size_t)n * HW * C + (size_t)g * Cg;
            double s = 0, ss = 0;
            for (int r = 0; r < HW; r++)
                for (int c = 0; c < Cg; c++) s += x[(size_t)r * C + c];
            double m = s / M;
            for (int r = 0; r < HW; r++)
                for (int c = 0; c < Cg; c++) {
                    double d = x[(size_t)r * C + c] - m;
                    ss += d * d;
                }
            double rs = 1.0 / sqrt(ss / M + e);
            mean[n * G + g] = (float)m;
            rstd[n * G + g] = (float)rs;
            float *o = out + (size_t)n * HW * C + (size_t)g * Cg;
            for (int r = 0; r < HW; r++)
                for (int c = 0; c < Cg; c++) {
                    int ch = g * Cg + c;
                    double y = (x[(size_t)r * C + c] - m) * rs * w[ch] + b[ch];
                    o[(size_t)r * C + c] = (float)(silu ? y / (1.0 + exp(-y)) : y);
                }
        }
}

void ig_cpu_ref_groupnorm_backward(ig_backend *be, void *dinp_, void *dw_, void *db_,
                                   const void *dout_, const void *inp_, const void *w_,
                                   const void *b_, const float *mean, const float *rstd, int N,
                                   int HW, int C, int G, int silu) {
    (void)be;
    float *dinp = dinp_, *dw = dw_, *db = db_;
    const float *dout = dout_, *inp = inp_, *w = w_, *b = b_;
    int Cg = C / G;
    double M = (double)HW * Cg;
    double *sw = calloc((size_t)C * 2, sizeof *sw); /* dw, db sums over every sample */
    if (!sw) {
        ig_backend_raise(be, IG_ERR_NOMEM, "groupnorm_backward (reference): out of memory");
        return;
    }
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            size_t base = (size_t)n * HW * C + (size_t)g * Cg;
            double m = mean[n * G + g], rs = rstd[n * G + g], s1 = 0, s2 = 0;
            for (int r = 0; r < HW; r++)
                for (int c = 0; c < Cg; c++) {
                    size_t i = base + (size_t)r * C + c;
                    int ch = g * Cg + c;
                    double xh = (inp[i] - m) * rs, dy = dout[i];
                    if (silu) dy *= ref_silu_grad(xh * w[ch] + b[ch]);
                    s1 += dy * w[ch];
                    s2 += dy * w[ch] * xh;
                    sw[ch] += dy * xh;
                    sw[C + ch] += dy;
                }
            for (int r = 0; r < HW; r++)
                for (int c = 0; c < Cg; c++) {
                    size_t i = base + (size_t)r * C + c;
                    int ch = g * Cg + c;
                    double xh = (inp[i] - m) * rs, dy = dout[i];
                    if (silu) dy *= ref_silu_grad(xh * w[ch] + b[ch]);
                    dinp[i] = (float)(dinp[i] + rs * (dy * w[ch] - s1 / M - xh * s2 / M));
                }
        }
    for (int c = 0; c < C; c++) {
        dw[c] = (float)(dw[c] + sw[c]);
        db[c] = (float)(db[c] + sw[C + c]);
    }
    free(sw);
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct gn_job {
    const float *inp, *w, *b, *dout;
    float *out, *dinp;
    int N, HW, C, G, Cg, silu;
    int rows, chunks;  /* rows per chunk, chunks per sample */
    double *part;      /* [N * chunks, 2C]: per chunk, two sums per channel */
    float *gmean, *sc; /* [N, C]: each channel's group mean; rstd (forward: rstd * w) */
    float *k1, *k2;    /* backward [N, C]: the group's mean(dxhat), mean(dxhat xhat) */
    float *row;        /* backward: per worker, a row's xhat and dy [2C] */
} gn_job;

/* the rows [r0, r1) of sample n of item it */
static void gn_rows(const gn_job *j, size_t it, int *n, int *r0, int *r1) {
    *n = (int)(it / (size_t)j->chunks);
    *r0 = (int)(it % (size_t)j->chunks) * j->rows;
    *r1 = *r0 + j->rows < j->HW ? *r0 + j->rows : j->HW;
}

IG_CPU_CLONES
static void gn_stats_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    gn_job *j = arg;
    int C = j->C;
    for (size_t it = b; it < e; it++) {
        int n, r0, r1;
        gn_rows(j, it, &n, &r0, &r1);
        double *s = j->part + it * 2 * (size_t)C, *ss = s + C;
        for (int c = 0; c < C; c++) s[c] = 0, ss[c] = 0;
        for (int r = r0; r < r1; r++) {
            const float *x = j->inp + ((size_t)n * j->HW + r) * C;
            for (int c = 0; c < C; c++) {
                double v = x[c];
                s[c] += v;
                ss[c] += v * v;
            }
        }
    }
}

IG_CPU_CLONES
static void gn_apply_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    gn_job *j = arg;
    int C = j->C;
    for (size_t it = b; it < e; it++) {
        int n, r0, r1;
        gn_rows(j, it, &n, &r0, &r1);
        const float *restrict m = j->gmean + (size_t)n * C, *restrict sc = j->sc + (size_t)n * C;
        const float *restrict bias = j->b;
        const float *restrict lo = j->k1 + (size_t)n * C; /* the mean's low part */
        for (int r = r0; r < r1; r++) {
            size_t off = ((size_t)n * j->HW + r) * C;
            const float *restrict x = j->inp + off;
            float *restrict o = j->out + off;
            if (j->silu)
                for (int c = 0; c < C; c++) {
                    float y = ((x[c] - m[c]) - lo[c]) * sc[c] + bias[c];
                    o[c] = y / (1.0f + ig_cpu_expf(-y));
                }
            else
                for (int c = 0; c < C; c++) o[c] = ((x[c] - m[c]) - lo[c]) * sc[c] + bias[c];
        }
    }
}

/* rows per chunk: about 64 chunks over the N samples, whole multiples of 8 rows */
static void gn_chunks(gn_job *j) {
    size_t per = 64 / (size_t)j->N > 1 ? 64 / (size_t)j->N : 1;
    j->rows = (int)ig_cpu_chunk((size_t)j->HW, per, 8);
    j->chunks = (j->HW + j->rows - 1) / j->rows;
}

/* scratch for part, the four [N, C] float tables and the workers' rows; 0 after raising */
static int gn_scratch(ig_backend *be, gn_job *j, const char *what) {
    size_t items = (size_t)j->N * j->chunks, nc = (size_t)j->N * j->C;
    size_t rows = (size_t)ig_ctx_threads(be->ctx) * 2 * j->C;
    char *p = ig_cpu_scratch(
        be, items * 2 * j->C * sizeof(double) + (4 * nc + rows) * sizeof(float), what);
    if (!p) return 0;
    j->part = (double *)p;
    j->gmean = (float *)(p + items * 2 * j->C * sizeof(double));
    j->sc = j->gmean + nc, j->k1 = j->sc + nc, j->k2 = j->k1 + nc, j->row = j->k2 + nc;
    return 1;
}

void ig_cpu_groupnorm_forward(ig_backend *be, void *out, float *mean, float *rstd, const void *inp,
                              const void *w, const void *b, int N, int HW, int C, int G, float eps,
                              int silu) {
    gn_job j = {.inp = inp,
                .w = w,
                .b = b,
                .out = out,
                .N = N,
                .HW = HW,
                .C = C,
                .G = G,
                .Cg = C / G,
                .silu = silu};
    gn_chunks(&j);
    if (!gn_scratch(be, &j, "groupnorm_forward")) return;
    size_t items = (size_t)N * j.chunks;
    ig_parallel_range(be->ctx, items, 1, gn_stats_chunk, &j);
    double e = ig_cpu_eps(eps), M = (double)HW * j.Cg;
    for (int n = 0; n < N; n++)
        for (int g = 0; g < G; g++) {
            double s = 0, ss = 0;
            for (int k = 0; k < j.chunks; k++) {
                const double *p = j.part + ((size_t)n * j.chunks + k) * 2 * C + (size_t)g * j.Cg;
                for (int c = 0; c < j.Cg; c++) s += p[c], ss += p[C + c];
            }
            double m = s / M, var = ss / M - m * m;
            double rs = 1.0 / sqrt((var > 0 ? var : 0) + e);
            mean[n * G + g] = (float)m;
            rstd[n * G + g] = (float)rs;
            float hi = (float)m, lo = (float)(m - hi); /* x - m = (x - hi) - lo, nearly exact */
            for (int c = g * j.Cg; c < (g + 1) * j.Cg; c++) {
                j.gmean[(size_t)n * C + c] = hi;
                j.k1[(size_t)n * C + c] = lo;
                j.sc[(size_t)n * C + c] = (float)(rs * j.w[c]);
            }
        }
    ig_parallel_range(be->ctx, items, 1, gn_apply_chunk, &j);
    ig_cpu_scratch_free(be, j.part);
}

/* A row's xhat and dy (dout, times silu'(y) with silu), into xh and dy [C]. */
IG_CPU_INLINE void gn_row(const gn_job *j, int n, int r, float *restrict xh, float *restrict dy) {
    int C = j->C;
    size_t off = ((size_t)n * j->HW + r) * C;
    const float *restrict x = j->inp + off, *restrict d = j->dout + off;
    const float *restrict m = j->gmean + (size_t)n * C, *restrict rs = j->sc + (size_t)n * C;
    const float *restrict w = j->w, *restrict bias = j->b;
    for (int c = 0; c < C; c++) xh[c] = (x[c] - m[c]) * rs[c];
    if (!j->silu) {
        memcpy(dy, d, (size_t)C * sizeof *dy);
        return;
    }
    for (int c = 0; c < C; c++) {
        float y = xh[c] * w[c] + bias[c];
        float sg = 1.0f / (1.0f + ig_cpu_expf(-y));
        dy[c] = d[c] * (sg * (1.0f + y * (1.0f - sg)));
    }
}

IG_CPU_CLONES
static void gn_bwd_sums_chunk(void *arg, size_t b, size_t e, int worker) {
    gn_job *j = arg;
    int C = j->C;
    float *restrict xh = j->row + (size_t)worker * 2 * C, *restrict dy = xh + C;
    for (size_t it = b; it < e; it++) {
        int n, r0, r1;
        gn_rows(j, it, &n, &r0, &r1);
        double *restrict a = j->part + it * 2 * (size_t)C, *restrict bb = a + C;
        for (int c = 0; c < C; c++) a[c] = 0, bb[c] = 0; /* sum dy xhat, sum dy */
        for (int r = r0; r < r1; r++) {
            gn_row(j, n, r, xh, dy);
            for (int c = 0; c < C; c++) {
                a[c] += (double)dy[c] * xh[c];
                bb[c] += dy[c];
            }
        }
    }
}

IG_CPU_CLONES
static void gn_bwd_dx_chunk(void *arg, size_t b, size_t e, int worker) {
    gn_job *j = arg;
    int C = j->C;
    float *restrict xh = j->row + (size_t)worker * 2 * C, *restrict dy = xh + C;
    const float *restrict w = j->w;
    for (size_t it = b; it < e; it++) {
        int n, r0, r1;
        gn_rows(j, it, &n, &r0, &r1);
        const float *restrict rs = j->sc + (size_t)n * C, *restrict k1 = j->k1 + (size_t)n * C,
                              *restrict k2 = j->k2 + (size_t)n * C;
        for (int r = r0; r < r1; r++) {
            gn_row(j, n, r, xh, dy);
            float *restrict di = j->dinp + ((size_t)n * j->HW + r) * C;
            for (int c = 0; c < C; c++) di[c] += rs[c] * (dy[c] * w[c] - k1[c] - xh[c] * k2[c]);
        }
    }
}

void ig_cpu_groupnorm_backward(ig_backend *be, void *dinp, void *dw_, void *db_, const void *dout,
                               const void *inp, const void *w, const void *b, const float *mean,
                               const float *rstd, int N, int HW, int C, int G, int silu) {
    float *dw = dw_, *db = db_;
    gn_job j = {.inp = inp,
                .w = w,
                .b = b,
                .dout = dout,
                .dinp = dinp,
                .N = N,
                .HW = HW,
                .C = C,
                .G = G,
                .Cg = C / G,
                .silu = silu};
    gn_chunks(&j);
    if (!gn_scratch(be, &j, "groupnorm_backward")) return;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            int g = c / j.Cg;
            j.gmean[(size_t)n * C + c] = mean[n * G + g];
            j.sc[(size_t)n * C + c] = rstd[n * G + g];
        }
    size_t items = (size_t)N * j.chunks;
    ig_parallel_range(be->ctx, items, 1, gn_bwd_sums_chunk, &j);
    /* per (n, c): the chunks' sums in chunk order; per group: the two means; dw, db: samples in
     * order (the per-sample sums kept in part's first chunk row) */
    double M = (double)HW * j.Cg;
    for (int n = 0; n < N; n++) {
        double *acc = j.part + (size_t)n * j.chunks * 2 * C; /* chunk 0 of sample n */
        for (int k = 1; k < j.chunks; k++) {
            const double *p = acc + (size_t)k * 2 * C;
            for (int c = 0; c < 2 * C; c++) acc[c] += p[c];
        }
        for (int g = 0; g < G; g++) {
            double s1 = 0, s2 = 0;
            for (int c = g * j.Cg; c < (g + 1) * j.Cg; c++) {
                s1 += acc[C + c] * j.w[c];
                s2 += acc[c] * j.w[c];
            }
            for (int c = g * j.Cg; c < (g + 1) * j.Cg; c++) {
                j.k1[(size_t)n * C + c] = (float)(s1 / M);
                j.k2[(size_t)n * C + c] = (float)(s2 / M);
            }
        }
    }
    for (int c = 0; c < C; c++) {
        double sw = 0, sb = 0;
        for (int n = 0; n < N; n++) {
            const double *acc = j.part + (size_t)n * j.chunks * 2 * C;
            sw += acc[c], sb += acc[C + c];
        }
        dw[c] = (float)(dw[c] + sw);
        db[c] = (float)(db[c] + sb);
    }
    ig_parallel_range(be->ctx, items, 1, gn_bwd_dx_chunk, &j);
    ig_cpu_scratch_free(be, j.part);
}
