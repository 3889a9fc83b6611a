/* bpe.c - byte-pair merging and the encoder: pre-tokens are looked up whole first (most are one
 * token), then in the encoder's cache, and only then merged.
 *
 * Merging repeatedly joins the adjacent pair with the lowest priority, leftmost first, which is
 * both GPT-2's encoder.py / Hugging Face BPE over merge ranks and tiktoken's byte_pair_merge over
 * token ranks. Short pieces use a flat array scan (fast for the usual few bytes); long ones (runs
 * of symbols in code, long words in some scripts) use a linked list and a min-heap, O(n log n).
 */
#include <stdlib.h>
#include <string.h>

#include "preprocess/tokenizer_internal.h"

#define SMALL_PIECE 64 /* array scan below this many bytes, heap above */
#define NO_RANK     UINT32_MAX

static int scratch_reserve(ig_bpe_scratch *sc, size_t n) {
    if (n <= sc->cap) return 1;
    size_t cap = sc->cap ? sc->cap : 256;
    while (cap < n) cap *= 2;
    uint32_t *id = realloc(sc->id, cap * sizeof *id);
    if (id) sc->id = id;
    int32_t *next = realloc(sc->next, cap * sizeof *next);
    if (next) sc->next = next;
    int32_t *prev = realloc(sc->prev, cap * sizeof *prev);
    if (prev) sc->prev = prev;
    if (!id || !next || !prev) return 0;
    sc->cap = cap;
    return 1;
}

void ig_bpe_scratch_free(ig_bpe_scratch *sc) {
    free(sc->id);
    free(sc->next);
    free(sc->prev);
    free(sc->heap);
    memset(sc, 0, sizeof *sc);
}

static inline uint32_t pair_rank(const ig_tokenizer *t, uint32_t l, uint32_t r, uint32_t *merged) {
    const ig_pair_slot *p = ig_pair_find(t, l, r);
    if (!p) return NO_RANK;
    *merged = p->id;
    return p->rank;
}

static size_t merge_small(const ig_tokenizer *t, ig_bpe_scratch *sc, const uint8_t *s, size_t n) {
    uint32_t *id = sc->id;
    uint32_t rank[SMALL_PIECE], res[SMALL_PIECE];
    uint8_t next[SMALL_PIECE]; /* linked list over the parts; n marks the end */
    for (size_t i = 0; i < n; i++) id[i] = t->byte_id[s[i]], next[i] = (uint8_t)(i + 1);
    for (size_t i = 0; i + 1 < n; i++) rank[i] = pair_rank(t, id[i], id[i + 1], &res[i]);
    rank[n - 1] = NO_RANK;
    size_t m = n;
    while (m > 1) {
        uint32_t best = NO_RANK;
        size_t k = 0, kprev = n;
        for (size_t i = 0, prev = n; i < n; prev = i, i = next[i])
            if (rank[i] < best) best = rank[i], k = i, kprev = prev;
        if (best == NO_RANK) break;
        size_t j = next[k];
        id[k] = res[k];
        next[k] = next[j];
        m--;
        if (kprev < n) rank[kprev] = pair_rank(t, id[kprev], id[k], &res[kprev]);
        rank[k] = next[k] < n ? pair_rank(t, id[k], id[next[k]], &res[k]) : NO_RANK;
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i = next[i]) id[o++] = id[i];
    return o;
}

/* min-heap of (rank << 32 | position): the lowest rank, then the leftmost position */
static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = v;
    return top;
}

static size_t merge_large(const ig_tokenizer *t, ig_bpe_scratch *sc, const uint8_t *s, size_t n) {
    if (sc->heap_cap < 3 * n) { /* n - 1 initial pairs and at most two per merge */
        uint64_t *h = realloc(sc->heap, 3 * n * sizeof *h);
        if (!h) return 0;
        sc->heap = h;
        sc->heap_cap = 3 * n;
    }
    uint32_t *id = sc->id;
    int32_t *next = sc->next, *prev = sc->prev;
    uint64_t *heap = sc->heap;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = t->byte_id[s[i]];
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    uint32_t merged;
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = pair_rank(t, id[i], id[i + 1], &merged);
        if (r != NO_RANK) heap_push(heap, &hn, (uint64_t)r << 32 | i);
    }
    size_t m = n;
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        uint32_t r = (uint32_t)(top >> 32);
        int32_t i = (int32_t)(uint32_t)top;
        int32_t j = next[i];
        /* stale entries: i was absorbed (prev/next no longer consistent) or its pair changed */
        if (id[i] == IG_NO_TOKEN || j < 0 || pair_rank(t, id[i], id[j], &merged) != r) continue;
        id[i] = merged;
        id[j] = IG_NO_TOKEN;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        m--;
        if (prev[i] >= 0) {
            uint32_t pr = pair_rank(t, id[prev[i]], id[i], &merged);
            if (pr != NO_RANK) heap_push(heap, &hn, (uint64_t)pr << 32 | (uint32_t)prev[i]);
        }
        if (next[i] >= 0) {
            uint32_t nr = pair_rank(t, id[i], id[next[i]], &merged);
            if (nr != NO_RANK) heap_push(heap, &hn, (uint64_t)nr << 32 | (uint32_t)i);
        }
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) id[k++] = id[i];
    (void)m;
    return k;
}

size_t ig_bpe_merge(const ig_tokenizer *t, ig_bpe_scratch *sc, const uint8_t *s, size_t n,
                    const uint32_t **out_ids) {
    if (n == 0 || n > INT32_MAX / 2 || !scratch_reserve(sc, n)) return 0;
    *out_ids = sc->id;
    return n < SMALL_PIECE ? merge_small(t, sc, s, n) : merge_large(t, sc, s, n);
}
