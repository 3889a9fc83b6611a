/* cpu_encoder.c - the embedding: token (wte) plus position (wpe) rows, and the gradient's
 * scatter-add back into them.
 *
 * The backward is deterministic without atomics by partitioning the work by destination row:
 * the (b, t) positions are sorted by token (stable, so (b, t) order within a token), and each
 * chunk of distinct tokens adds its positions' rows in that order. Every element of dwte thus sees
 * the same additions in the same order as the reference's sequential loop: the fast kernel gives
 * the reference's bits, for any thread count. dwpe is partitioned by position the same way.
 *
 * Shapes: tokens [B, T] (int32, in [0, V), or < 0 for a token of another tensor-parallel rank's
 * vocabulary slice: no wte row), wte [V, C], wpe [maxT >= T, C] or NULL (forward: no position
 * rows), out [B, T, C].
 */
#include <stdlib.h>

#include "cpu_internal.h"

/* ---- reference ------------------------------------------------------------------------------- */

void ig_cpu_ref_encoder_forward(ig_backend *be, void *out_, const int32_t *tokens, const void *wte_,
                                const void *wpe_, int B, int T, int C) {
    (void)be;
    float *out = out_;
    const float *wte = wte_, *wpe = wpe_;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int32_t tok = tokens[b * T + t];
            const float *te = tok >= 0 ? wte + (size_t)tok * C : NULL;
            const float *pe = wpe ? wpe + (size_t)t * C : NULL;
            float *o = out + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) o[c] = (te ? te[c] : 0.0f) + (pe ? pe[c] : 0.0f);
        }
}

void ig_cpu_ref_encoder_backward(ig_backend *be, void *dwte_, void *dwpe_, const void *dout_,
                                 const int32_t *tokens, int B, int T, int C) {
    (void)be;
    float *dwte = dwte_, *dwpe = dwpe_;
    const float *dout = dout_;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            int32_t tok = tokens[b * T + t];
            if (dwpe) {
                float *pe = dwpe + (size_t)t * C;
                for (int c = 0; c < C; c++) pe[c] += d[c];
            }
            if (tok < 0) continue;
            float *te = dwte + (size_t)tok * C;
            for (int c = 0; c < C; c++) te[c] += d[c];
        }
}

/* ---- fast ------------------------------------------------------------------------------------ */

typedef struct enc_job {
    float *out;
    const int32_t *tokens;
    const float *wte, *wpe, *dout;
    float *dwte, *dwpe;
    int B, T, C;
    const uint64_t *order;  /* backward: (token << 32 | position), sorted */
    const uint32_t *starts; /* backward: first entry of each distinct token in order, + end */
} enc_job;

IG_CPU_CLONES
static void enc_fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    enc_job *j = arg;
    int C = j->C;
    for (size_t i = b; i < e; i++) {
        int32_t tok = j->tokens[i];
        float *o = j->out + i * C;
        if (tok >= 0 && j->wpe) {
            const float *te = j->wte + (size_t)tok * C;
            const float *pe = j->wpe + (size_t)(i % (size_t)j->T) * C;
            for (int c = 0; c < C; c++) o[c] = te[c] + pe[c];
        } else if (tok >= 0) {
            memcpy(o, j->wte + (size_t)tok * C, (size_t)C * sizeof *o);
        } else if (j->wpe) {
            memcpy(o, j->wpe + (size_t)(i % (size_t)j->T) * C, (size_t)C * sizeof *o);
        } else {
            memset(o, 0, (size_t)C * sizeof *o);
        }
    }
}

void ig_cpu_encoder_forward(ig_backend *be, void *out, const int32_t *tokens, const void *wte,
                            const void *wpe, int B, int T, int C) {
    enc_job j = {.out = out, .tokens = tokens, .wte = wte, .wpe = wpe, .B = B, .T = T, .C = C};
    size_t N = (size_t)B * T;
    ig_parallel_range(be->ctx, N, ig_cpu_chunk(N, 64, 4), enc_fwd_chunk, &j);
}

/* dwte rows: one chunk of distinct tokens, each token's positions in (b, t) order */
IG_CPU_CLONES
static void enc_bwd_wte_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    enc_job *j = arg;
    int C = j->C;
    for (size_t g = b; g < e; g++) {
        uint32_t first = j->starts[g], last = j->starts[g + 1];
        float *te = j->dwte + (size_t)(j->order[first] >> 32) * C;
        for (uint32_t k = first; k < last; k++) {
            const float *d = j->dout + (size_t)(uint32_t)j->order[k] * C;
            for (int c = 0; c < C; c++) te[c] += d[c];
        }
    }
}

/* dwpe rows: one chunk of positions t, summing over b in order */
IG_CPU_CLONES
static void enc_bwd_wpe_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    enc_job *j = arg;
    int C = j->C;
    for (size_t t = b; t < e; t++) {
        float *pe = j->dwpe + t * C;
        for (int bb = 0; bb < j->B; bb++) {
            const float *d = j->dout + ((size_t)bb * j->T + t) * C;
            for (int c = 0; c < C; c++) pe[c] += d[c];
        }
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void ig_cpu_encoder_backward(ig_backend *be, void *dwte, void *dwpe, const void *dout,
                             const int32_t *tokens, int B, int T, int C) {
    size_t N = (size_t)B * T;
    if (N == 0) return;
    /* sort (token, position) pairs: the position breaks ties, so the order is (b, t) per token */
    uint64_t *order =
        ig_cpu_scratch(be, N * sizeof *order + (N + 1) * sizeof(uint32_t), "encoder_backward");
    if (!order) return;
    uint32_t *starts = (uint32_t *)(order + N);
    /* tokens < 0 (another rank's) are left out */
    size_t kept = 0;
    for (size_t i = 0; i < N; i++)
        if (tokens[i] >= 0) order[kept++] = (uint64_t)(uint32_t)tokens[i] << 32 | i;
    qsort(order, kept, sizeof *order, cmp_u64);
    size_t groups = 0;
    for (size_t i = 0; i < kept; i++)
        if (i == 0 || order[i] >> 32 != order[i - 1] >> 32) starts[groups++] = (uint32_t)i;
    starts[groups] = (uint32_t)kept;

    enc_job j = {.dout = dout,
                 .dwte = dwte,
                 .dwpe = dwpe,
                 .B = B,
                 .T = T,
                 .C = C,
                 .order = order,
                 .starts = starts};
    ig_parallel_range(be->ctx, groups, ig_cpu_chunk(groups, 64, 1), enc_bwd_wte_chunk, &j);
    if (dwpe) /* NULL: a model without learned positions */
        ig_parallel_range(be->ctx, (size_t)T, ig_cpu_chunk((size_t)T, 64, 1), enc_bwd_wpe_chunk,
                          &j);
    ig_cpu_scratch_free(be, order);
}
