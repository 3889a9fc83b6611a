/* cpu_rope.c - rotary position embedding (RoPE, Hugging Face's rotate-half convention), forward
 * and its transpose (the backward), in place on the query and key heads of packed qkv rows.
 *
 * Row (b, t) is at position p = pos0 + t. With half = hs / 2, inv_i = 1 / theta^(float(2i) / hs)
 * and angle = (float)p * inv_i in fp32, as transformers computes them (so a model trained there
 * sees the same angles), and c, s the cosine and sine of that angle:
 *   forward:  (x_i, x_{i+half}) -> (x_i c - x_{i+half} s, x_{i+half} c + x_i s)
 *   backward: (g_i, g_{i+half}) -> (g_i c + g_{i+half} s, g_{i+half} c - g_i s)
 *
 * Reference: per row, head and i, the angle's cosine and sine in double and the rotation in
 * double, rounded once. Fast: the cosines and sines of the T positions in a table (computed in
 * double, rounded to fp32; threaded over positions), then the rows on the pool, each rotated in
 * fp32 (two products and a sum, as torch's q * cos + rotate_half(q) * sin). Every element is
 * computed alone: the bits never depend on the thread count.
 *
 * Shapes: qkv, dqkv [B, T, (n_head + 2 n_kv_head) hs]; the first n_head + n_kv_head heads of a row
 * (queries, then keys) are rotated, the n_kv_head value heads are not.
 */
#include <math.h>

#include "cpu_internal.h"

/* ---- reference ------------------------------------------------------------------------------- */

static void ref_rope(float *x, int B, int T, int NH, int NKV, int hs, int pos0, float theta,
                     int dir) {
    int half = hs / 2, heads = NH + NKV;
    size_t R = (size_t)(NH + 2 * NKV) * hs;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < heads; h++) {
                float *v = x + ((size_t)b * T + t) * R + (size_t)h * hs;
                for (int i = 0; i < half; i++) {
                    float inv = 1.0f / powf(theta, (float)(2 * i) / (float)hs);
                    float angle = (float)(pos0 + t) * inv;
                    double c = cos((double)angle), s = sin((double)angle) * dir;
                    double a = v[i], e = v[i + half];
                    v[i] = (float)(a * c - e * s);
                    v[i + half] = (float)(e * c + a * s);
                }
            }
}

void ig_cpu_ref_rope_forward(ig_backend *be, void *qkv, int B, int T, int n_head, int n_kv_head,
                             int hs, int pos0, float theta) {
    (void)be;
    ref_rope(qkv, B, T, n_head, n_kv_head, hs, pos0, theta, 1);
}

/* the transpose: the rotation by -angle */
void ig_cpu_ref_rope_backward(ig_backend *be, void *dqkv, int B, int T, int n_head, int n_kv_head,
                              int hs, int pos0, float theta) {
    (void)be;
    ref_rope(dqkv, B, T, n_head, n_kv_head, hs, pos0, theta, -1);
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct rope_job {
    float *x;
    float *cs;        /* [T][2][half]: cos, then sin, of position pos0 + t */
    const float *inv; /* [half] */
    int T, heads, hs, pos0;
    size_t R;
    float dir; /* 1: forward, -1: backward (the sines negated) */
} rope_job;

static void rope_table_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    rope_job *j = arg;
    int half = j->hs / 2;
    for (size_t t = b; t < e; t++) {
        float *c = j->cs + t * 2 * half, *s = c + half;
        for (int i = 0; i < half; i++) {
            float angle = (float)(j->pos0 + (int)t) * j->inv[i];
            c[i] = (float)cos((double)angle);
            s[i] = (float)sin((double)angle) * j->dir;
        }
    }
}

IG_CPU_CLONES
static void rope_rows_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    rope_job *j = arg;
    int half = j->hs / 2;
    for (size_t r = b; r < e; r++) {
        const float *c = j->cs + (r % (size_t)j->T) * 2 * half, *s = c + half;
        for (int h = 0; h < j->heads; h++) {
            float *x = j->x + r * j->R + (size_t)h * j->hs, *y = x + half;
            for (int i = 0; i < half; i++) {
                float a = x[i], d = y[i];
                x[i] = a * c[i] - d * s[i];
                y[i] = d * c[i] + a * s[i];
            }
        }
    }
}

static void rope_run(ig_backend *be, float *x, int B, int T, int NH, int NKV, int hs, int pos0,
                     float theta, float dir, const char *what) {
    size_t rows = (size_t)B * T, half = (size_t)hs / 2;
    if (rows == 0) return;
    float *scratch = ig_cpu_scratch(be, ((size_t)T * 2 * half + half) * sizeof(float), what);
    if (!scratch) return;
    float *inv = scratch + (size_t)T * 2 * half;
    ig_backend_rope_inv_freq(inv, hs, theta);
    rope_job j = {.x = x,
                  .cs = scratch,
                  .inv = inv,
                  .T = T,
                  .heads = NH + NKV,
                  .hs = hs,
                  .pos0 = pos0,
                  .R = (size_t)(NH + 2 * NKV) * hs,
                  .dir = dir};
    ig_parallel_range(be->ctx, (size_t)T, ig_cpu_chunk((size_t)T, 64, 1), rope_table_chunk, &j);
    ig_parallel_range(be->ctx, rows, ig_cpu_chunk(rows, 64, 1), rope_rows_chunk, &j);
    ig_cpu_scratch_free(be, scratch);
}

void ig_cpu_rope_forward(ig_backend *be, void *qkv, int B, int T, int n_head, int n_kv_head, int hs,
                         int pos0, float theta) {
    rope_run(be, qkv, B, T, n_head, n_kv_head, hs, pos0, theta, 1.0f, "rope_forward");
}

void ig_cpu_rope_backward(ig_backend *be, void *dqkv, int B, int T, int n_head, int n_kv_head,
                          int hs, int pos0, float theta) {
    rope_run(be, dqkv, B, T, n_head, n_kv_head, hs, pos0, theta, -1.0f, "rope_backward");
}
