/* cpu_modulate.c - DiT's adaLN-Zero kernels: LayerNorm without affine parameters fused with the
 * per-sample modulation, out = LN(x) * (1 + scale[b]) + shift[b], and the gated residual add,
 * out = res + gate[b] * x, with their backwards. Row r is of sample b = (row0 + r) / rps, and the
 * per-sample vectors are ld elements apart (backend.h).
 *
 * Backward of the modulated LayerNorm, with xhat = (x - mean) * rstd, dnorm = dout * (1 + scale):
 *   dx = rstd (dnorm - mean_c(dnorm) - xhat mean_c(dnorm xhat))   (added to dinp)
 *   dshift[b] = sum over b's rows of dout,   dscale[b] = sum over b's rows of dout * xhat.
 * Of the gated residual: dx = dout * gate[b], dgate[b] = sum over b's rows of dout * x.
 *
 * Fast kernels: rows on the pool in fixed chunks (a function of N alone). The forward and the
 * input gradient go row by row as in cpu_layernorm.c, with the same arithmetic: they give the bits
 * of ig_cpu_layernorm_forward / _backward with w = 1 + scale[b] and b = shift[b]. The per-sample
 * sums are taken in the same pass (dout and x are read once): a chunk sums the rows of each of its
 * samples in double, in row order; a sample that lies wholly in the chunk is added to its gradient
 * there, and a sample that a chunk boundary cuts (only a chunk's first and last can be) leaves its
 * part in the chunk's scratch slot, the parts then added on the calling thread in chunk order.
 * Nothing depends on the thread count, wherever the samples start and end.
 *
 * Shapes: inp, out, res, x, dout, dinp, dx [N, C]; shift, scale, gate and their gradients [B, ld]
 * (C of each row used); mean, rstd [N].
 */
#include <math.h>

#include "cpu_internal.h"

#define MOD_MIN_ROWS 16 /* rows per chunk of the backward, at least: bounds the scratch slots */

/* the sample of local row r */
static inline size_t sample_of(int row0, int rps, size_t r) {
    return ((size_t)row0 + r) / (size_t)rps;
}

/* the local rows [*lo, *hi) of sample s, within [0, N) (s holds at least one of them) */
static inline void sample_span(int row0, int rps, int N, size_t s, size_t *lo, size_t *hi) {
    size_t g0 = s * (size_t)rps, g1 = g0 + (size_t)rps;
    *lo = g0 > (size_t)row0 ? g0 - (size_t)row0 : 0;
    *hi = g1 - (size_t)row0 < (size_t)N ? g1 - (size_t)row0 : (size_t)N;
}

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_layernorm_modulate_forward(ig_backend *be, void *out_, float *mean, float *rstd,
                                           const void *inp_, const void *shift_, const void *scale_,
                                           int ld, int N, int C, int row0, int rows_per_sample,
                                           float eps) {
    (void)be;
    float *out = out_;
    const float *inp = inp_, *shift = shift_, *scale = scale_;
    double e = ig_cpu_eps(eps);
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        size_t b = sample_of(row0, rows_per_sample, (size_t)n);
        const float *sh = shift + b * ld, *sc = scale + b * ld;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += ((double)x[c] - m) * ((double)x[c] - m);
        v /= C;
        double r = 1.0 / sqrt(v + e);
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (float)(((double)x[c] - m) * r * (1.0 + sc[c]) + sh[c]);
        mean[n] = (float)m;
        rstd[n] = (float)r;
    }
}

void ig_cpu_ref_layernorm_modulate_backward(ig_backend *be, void *dinp_, void *dshift_,
                                            void *dscale_, const void *dout_, const void *inp_,
                                            const void *scale_, int ld, const float *mean,
                                            const float *rstd, int N, int C, int row0,
                                            int rows_per_sample) {
    (void)be;
    float *dinp = dinp_, *dshift = dshift_, *dscale = dscale_;
    const float *dout = dout_, *inp = inp_, *scale = scale_;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        const float *sc = scale + sample_of(row0, rows_per_sample, (size_t)n) * ld;
        double m = mean[n], r = rstd[n], dmean = 0, dnmean = 0;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * r, dnorm = (1.0 + sc[c]) * d[c];
            dmean += dnorm;
            dnmean += dnorm * xhat;
        }
        dmean /= C;
        dnmean /= C;
        float *di = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * r, dnorm = (1.0 + sc[c]) * d[c];
            di[c] = (float)(di[c] + (dnorm - dmean - xhat * dnmean) * r);
        }
    }
    if (N == 0) return;
    size_t s0 = sample_of(row0, rows_per_sample, 0);
    size_t s1 = sample_of(row0, rows_per_sample, (size_t)N - 1);
    for (size_t s = s0; s <= s1; s++) {
        size_t lo, hi;
        sample_span(row0, rows_per_sample, N, s, &lo, &hi);
        for (int c = 0; c < C; c++) {
            double sb = 0, sw = 0;
            for (size_t n = lo; n < hi; n++) {
                double d = dout[n * C + c];
                sb += d;
                sw += d * ((inp[n * C + c] - (double)mean[n]) * rstd[n]);
            }
            dshift[s * ld + c] = (float)(dshift[s * ld + c] + sb);
            dscale[s * ld + c] = (float)(dscale[s * ld + c] + sw);
        }
    }
}

void ig_cpu_ref_gate_residual_forward(ig_backend *be, void *out_, const void *res_, const void *x_,
                                      const void *gate_, int ld, int N, int C, int row0,
                                      int rows_per_sample) {
    (void)be;
    float *out = out_;
    const float *res = res_, *x = x_, *gate = gate_;
    for (int n = 0; n < N; n++) {
        const float *g = gate + sample_of(row0, rows_per_sample, (size_t)n) * ld;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            out[i] = (float)(res[i] + (double)g[c] * x[i]);
        }
    }
}

void ig_cpu_ref_gate_residual_backward(ig_backend *be, void *dx_, void *dgate_, const void *dout_,
                                       const void *x_, const void *gate_, int ld, int N, int C,
                                       int row0, int rows_per_sample) {
    (void)be;
    float *dx = dx_, *dgate = dgate_;
    const float *dout = dout_, *x = x_, *gate = gate_;
    if (N == 0) return;
    size_t s0 = sample_of(row0, rows_per_sample, 0);
    size_t s1 = sample_of(row0, rows_per_sample, (size_t)N - 1);
    for (size_t s = s0; s <= s1; s++) { /* the sums first: dx is written after */
        size_t lo, hi;
        sample_span(row0, rows_per_sample, N, s, &lo, &hi);
        for (int c = 0; c < C; c++) {
            double sg = 0;
            for (size_t n = lo; n < hi; n++) sg += (double)dout[n * C + c] * x[n * C + c];
            dgate[s * ld + c] = (float)(dgate[s * ld + c] + sg);
        }
    }
    for (int n = 0; n < N; n++) {
        const float *g = gate + sample_of(row0, rows_per_sample, (size_t)n) * ld;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)n * C + c;
            dx[i] = (float)((double)dout[i] * g[c]);
        }
    }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct mod_job {
    float *out, *mean, *rstd, *dinp, *dx;
    float *sum0, *sum1; /* the per-sample gradients: dshift and dscale, or dgate (sum1 NULL) */
    const float *inp, *res, *x, *shift, *scale, *gate, *dout;
    const float *cmean, *crstd;
    double eps; /* forward: ig_cpu_eps of the model's */
    int N, C, ld, row0, rps;
    int nv;        /* vectors summed per sample: 2 (dshift, dscale) or 1 (dgate) */
    size_t chunk;  /* rows per chunk of the backward */
    double *slots; /* [chunks][2][nv * C]: the parts of a chunk's first and last sample */
} mod_job;

IG_CPU_CLONES
static void mod_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    mod_job *j = arg;
    int C = j->C;
    for (size_t n = b; n < e; n++) {
        const float *x = j->inp + n * C;
        size_t s = sample_of(j->row0, j->rps, n);
        const float *sh = j->shift + s * j->ld, *sc = j->scale + s * j->ld;
        float m = (float)(ig_cpu_lane_sum_d(x, C) / C);
        float r = (float)(1.0 / sqrt(ig_cpu_lane_sqdev_d(x, m, C) / C + j->eps));
        float *o = j->out + n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * (1.0f + sc[c]) + sh[c];
        j->mean[n] = m;
        j->rstd[n] = r;
    }
}

void ig_cpu_layernorm_modulate_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                       const void *inp, const void *shift, const void *scale,
                                       int ld, int N, int C, int row0, int rows_per_sample,
                                       float eps) {
    mod_job j = {.out = out,
                 .mean = mean,
                 .rstd = rstd,
                 .inp = inp,
                 .shift = shift,
                 .scale = scale,
                 .eps = ig_cpu_eps(eps),
                 .N = N,
                 .C = C,
                 .ld = ld,
                 .row0 = row0,
                 .rps = rows_per_sample};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), mod_fwd_chunk, &j);
}

IG_CPU_CLONES
static void gate_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    mod_job *j = arg;
    int C = j->C;
    for (size_t n = b; n < e; n++) {
        const float *g = j->gate + sample_of(j->row0, j->rps, n) * j->ld;
        const float *r = j->res + n * C, *x = j->x + n * C;
        float *o = j->out + n * C;
        for (int c = 0; c < C; c++) o[c] = r[c] + g[c] * x[c];
    }
}

void ig_cpu_gate_residual_forward(ig_backend *be, void *out, const void *res, const void *x,
                                  const void *gate, int ld, int N, int C, int row0,
                                  int rows_per_sample) {
    mod_job j = {.out = out,
                 .res = res,
                 .x = x,
                 .gate = gate,
                 .N = N,
                 .C = C,
                 .ld = ld,
                 .row0 = row0,
                 .rps = rows_per_sample};
    ig_parallel_range(be->ctx, (size_t)N, ig_cpu_chunk((size_t)N, 64, 1), gate_fwd_chunk, &j);
}

/* row n (of sample s) of the modulated LayerNorm's backward: dinp += its gradient, acc[0..C) +=
 * dout, acc[C..2C) += dout * xhat */
IG_CPU_INLINE void mod_bwd_row(const mod_job *j, size_t n, size_t s, double *acc) {
    int C = j->C;
    const float *x = j->inp + n * C, *d = j->dout + n * C, *sc = j->scale + s * j->ld;
    float m = j->cmean[n], r = j->crstd[n];
    double s1[IG_CPU_LANES] = {0}, s2[IG_CPU_LANES] = {0};
    int c = 0;
    for (; c + IG_CPU_LANES <= C; c += IG_CPU_LANES)
        for (int k = 0; k < IG_CPU_LANES; k++) {
            float dnorm = (1.0f + sc[c + k]) * d[c + k], xhat = (x[c + k] - m) * r;
            s1[k] += dnorm;
            s2[k] += dnorm * xhat;
        }
    for (; c < C; c++) {
        float dnorm = (1.0f + sc[c]) * d[c], xhat = (x[c] - m) * r;
        s1[0] += dnorm;
        s2[0] += dnorm * xhat;
    }
    double t1 = 0, t2 = 0;
    for (int k = 0; k < IG_CPU_LANES; k++) t1 += s1[k], t2 += s2[k];
    float dmean = (float)(t1 / C), dnmean = (float)(t2 / C);
    float *di = j->dinp + n * C;
    double *a0 = acc, *a1 = acc + C;
    for (c = 0; c < C; c++) {
        float dnorm = (1.0f + sc[c]) * d[c], xhat = (x[c] - m) * r;
        di[c] += (dnorm - dmean - xhat * dnmean) * r;
        a0[c] += d[c];
        a1[c] += (double)d[c] * xhat;
    }
}

/* row n (of sample s) of the gated residual's backward: dx = dout * gate, acc += dout * x */
IG_CPU_INLINE void gate_bwd_row(const mod_job *j, size_t n, size_t s, double *acc) {
    int C = j->C;
    const float *x = j->x + n * C, *d = j->dout + n * C, *g = j->gate + s * j->ld;
    float *dx = j->dx + n * C;
    for (int c = 0; c < C; c++) {
        float dv = d[c];
        acc[c] += (double)dv * x[c];
        dx[c] = dv * g[c];
    }
}

/* sample s's gradients += acc (rounded once) */
static void flush_sample(const mod_job *j, size_t s, const double *acc) {
    int C = j->C;
    float *g0 = j->sum0 + s * j->ld;
    for (int c = 0; c < C; c++) g0[c] = (float)(g0[c] + acc[c]);
    if (j->nv == 2) {
        float *g1 = j->sum1 + s * j->ld;
        for (int c = 0; c < C; c++) g1[c] = (float)(g1[c] + acc[C + c]);
    }
}

/* A chunk of rows [b, e) of a backward: each of its samples summed in row order into a slot (the
 * first one's part into slot 0 when it began in an earlier chunk, any other into slot 1), and
 * flushed at once when the chunk holds the whole sample. */
IG_CPU_CLONES
static void bwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    mod_job *j = arg;
    size_t nvC = (size_t)j->nv * j->C;
    double *slot0 = j->slots + b / j->chunk * 2 * nvC, *slot1 = slot0 + nvC;
    for (size_t n = b; n < e;) {
        size_t s = sample_of(j->row0, j->rps, n), lo, hi;
        sample_span(j->row0, j->rps, j->N, s, &lo, &hi);
        size_t end = hi < e ? hi : e;
        double *acc = lo < b ? slot0 : slot1;
        memset(acc, 0, nvC * sizeof *acc);
        if (j->nv == 2)
            for (; n < end; n++) mod_bwd_row(j, n, s, acc);
        else
            for (; n < end; n++) gate_bwd_row(j, n, s, acc);
        if (lo >= b && hi <= e) flush_sample(j, s, acc);
    }
}

/* After the chunks: the parts of the samples that chunk boundaries cut, added in chunk order
 * (a run of consecutive parts of one sample summed into its first part), then flushed. */
static void bwd_combine(mod_job *j) {
    size_t nvC = (size_t)j->nv * j->C, chunks = ((size_t)j->N + j->chunk - 1) / j->chunk;
    double *run = NULL;
    size_t run_s = 0;
    for (size_t k = 0; k < chunks; k++) {
        size_t b = k * j->chunk, e = b + j->chunk < (size_t)j->N ? b + j->chunk : (size_t)j->N;
        size_t ends[2] = {sample_of(j->row0, j->rps, b), sample_of(j->row0, j->rps, e - 1)};
        for (int i = 0; i < 2; i++) {
            size_t s = ends[i], lo, hi;
            if (i == 1 && s == ends[0]) break; /* one sample in the chunk: seen */
            sample_span(j->row0, j->rps, j->N, s, &lo, &hi);
            if (lo >= b && hi <= e) continue; /* whole: flushed by the chunk */
            double *part = j->slots + k * 2 * nvC + (lo < b ? 0 : nvC);
            if (run && s == run_s) {
                for (size_t c = 0; c < nvC; c++) run[c] += part[c];
            } else {
                if (run) flush_sample(j, run_s, run);
                run = part;
                run_s = s;
            }
        }
    }
    if (run) flush_sample(j, run_s, run);
}

static void bwd_run(ig_backend *be, mod_job *j, const char *what) {
    j->chunk = ig_cpu_chunk((size_t)j->N, 64, MOD_MIN_ROWS);
    size_t chunks = ((size_t)j->N + j->chunk - 1) / j->chunk;
    j->slots = ig_cpu_scratch(be, chunks * 2 * (size_t)j->nv * j->C * sizeof(double), what);
    if (!j->slots) return;
    ig_parallel_range(be->ctx, (size_t)j->N, j->chunk, bwd_chunk, j);
    bwd_combine(j);
    ig_cpu_scratch_free(be, j->slots);
}

void ig_cpu_layernorm_modulate_backward(ig_backend *be, void *dinp, void *dshift, void *dscale,
                                        const void *dout, const void *inp, const void *scale,
                                        int ld, const float *mean, const float *rstd, int N, int C,
                                        int row0, int rows_per_sample) {
    mod_job j = {.dinp = dinp,
                 .sum0 = dshift,
                 .sum1 = dscale,
                 .dout = dout,
                 .inp = inp,
                 .scale = scale,
                 .cmean = mean,
                 .crstd = rstd,
                 .N = N,
                 .C = C,
                 .ld = ld,
                 .row0 = row0,
                 .rps = rows_per_sample,
                 .nv = 2};
    if (N > 0) bwd_run(be, &j, "layernorm_modulate_backward");
}

void ig_cpu_gate_residual_backward(ig_backend *be, void *dx, void *dgate, const void *dout,
                                   const void *x, const void *gate, int ld, int N, int C, int row0,
                                   int rows_per_sample) {
    mod_job j = {.dx = dx,
                 .sum0 = dgate,
                 .dout = dout,
                 .x = x,
                 .gate = gate,
                 .N = N,
                 .C = C,
                 .ld = ld,
                 .row0 = row0,
                 .rps = rows_per_sample,
                 .nv = 1};
    if (N > 0) bwd_run(be, &j, "gate_residual_backward");
}
