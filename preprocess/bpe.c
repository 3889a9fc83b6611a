/* bpe.c - byte-pair merging and the encoder: pre-tokens are looked up whole first (most are one
 * token), then in the encoder's cache, and only then merged.
 *
 * Merging repeatedly joins the adjacent pair with the lowest priority, leftmost first, which is
 * both GPT-2's encoder.py / Hugging Face BPE over merge ranks and tiktoken's byte_pair_merge over
 * token ranks. Short pieces use a flat array scan (fast for the usual few bytes); long ones (runs
 * of symbols in code, long words in some scripts) use a linked list and a min-heap, O(n log n).
 *
 * Pair lookups dominate merging. The first ones (single bytes) come from the tokenizer's dense
 * byte-pair table; the rest go through a small per-thread cache, since the shared pair table of a
 * tiktoken encoding is tens of MB and each probe there is a cache miss. A piece with characters of
 * two or three bytes starts from those characters' own tokens where that is exact
 * (bpe_premerge.c), which halves the merges of most scripts but Latin.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

#define SMALL_PIECE 64 /* array scan below this many bytes, heap above */
#define NO_RANK     UINT32_MAX

#define PAIR_CACHE_SLOTS ((size_t)1 << IG_PAIR_CACHE_BITS)

static int scratch_reserve(ig_bpe_scratch *sc, size_t n) {
    if (!sc->pair_cache) {
        sc->pair_cache = ig_alloc(sc->ctx, PAIR_CACHE_SLOTS * sizeof *sc->pair_cache);
        if (!sc->pair_cache) return 0;
        memset(sc->pair_cache, 0xFF, PAIR_CACHE_SLOTS * sizeof *sc->pair_cache);
    }
    if (n <= sc->cap) return 1;
    size_t cap = sc->cap ? sc->cap : 256;
    while (cap < n) cap *= 2;
    uint32_t *id = ig_realloc(sc->ctx, sc->id, cap * sizeof *id);
    if (id) sc->id = id;
    int32_t *next = ig_realloc(sc->ctx, sc->next, cap * sizeof *next);
    if (next) sc->next = next;
    int32_t *prev = ig_realloc(sc->ctx, sc->prev, cap * sizeof *prev);
    if (prev) sc->prev = prev;
    if (!id || !next || !prev) return 0;
    sc->cap = cap;
    return 1;
}

void ig_bpe_scratch_free(ig_bpe_scratch *sc) {
    ig_ctx *ctx = sc->ctx;
    ig_free(ctx, sc->id);
    ig_free(ctx, sc->next);
    ig_free(ctx, sc->prev);
    ig_free(ctx, sc->heap);
    ig_free(ctx, sc->pair_cache);
    memset(sc, 0, sizeof *sc);
    sc->ctx = ctx;
}

/* Inlined into every loop that looks pairs up (not left to the compiler, which calls it). */
static inline __attribute__((always_inline)) uint32_t
pair_rank(const ig_tokenizer *t, ig_bpe_scratch *sc, uint32_t l, uint32_t r, uint32_t *merged) {
    uint64_t key = (uint64_t)l << 32 | r;
    ig_pair_cache_slot *c =
        &sc->pair_cache[(key * 0x9E3779B97F4A7C15ull) >> (64 - IG_PAIR_CACHE_BITS)];
    if (c->key != key) {
        c->key = key;
        c->rank = ig_pair_rank(t, l, r, &c->id);
    }
    *merged = c->id;
    return c->rank;
}

/* The rank of the pair of single bytes (a, b), and its merged id. */
static inline uint32_t byte_pair_rank(const ig_tokenizer *t, uint8_t a, uint8_t b,
                                      uint32_t *merged) {
    uint64_t v = t->byte_pairs[(size_t)a << 8 | b];
    *merged = (uint32_t)v;
    return (uint32_t)(v >> 32);
}

/* Whether s[0..n) has a byte that starts a two- or three-byte character (ig_bpe_premerge). */
static inline int has_segment(const uint8_t *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] >= 0xC2 && s[i] <= 0xEF) return 1;
    return 0;
}

/* The first index of the lowest of r[0..m) (m >= 1). Four running minima keep the loop free of
 * a single dependency chain; the index is found by a second, usually short, pass. */
static inline size_t first_min(const uint32_t *r, size_t m, uint32_t *min) {
    if (m < 8) { /* the usual short piece */
        size_t k = 0;
        for (size_t i = 1; i < m; i++)
            if (r[i] < r[k]) k = i;
        *min = r[k];
        return k;
    }
    uint32_t a = r[0], b = a, c = a, d = a;
    size_t i = 1;
    for (; i + 4 <= m; i += 4) {
        a = r[i] < a ? r[i] : a;
        b = r[i + 1] < b ? r[i + 1] : b;
        c = r[i + 2] < c ? r[i + 2] : c;
        d = r[i + 3] < d ? r[i + 3] : d;
    }
    for (; i < m; i++) a = r[i] < a ? r[i] : a;
    a = b < a ? b : a;
    c = d < c ? d : c;
    a = c < a ? c : a;
    *min = a;
    size_t k = 0;
    while (r[k] != a) k++;
    return k;
}

/* gcc makes a call to memmove of each loop that shifts an array by one below (three a merge step,
 * of a few elements each); kept as loops, a cold round of o200k over the UDHR is 6% faster. */
#if defined(__GNUC__) && !defined(__clang__)
#define SHIFTS_INLINE __attribute__((optimize("no-tree-loop-distribute-patterns")))
#else
#define SHIFTS_INLINE
#endif

/* Arrays kept compact (merged parts are removed by shifting): the scan for the lowest rank is a
 * tight pass over contiguous memory rather than a walk along a linked list. */
SHIFTS_INLINE static size_t merge_small(const ig_tokenizer *t, ig_bpe_scratch *sc, const uint8_t *s,
                                        size_t n) {
    uint32_t *id = sc->id;
    uint32_t rank[SMALL_PIECE], res[SMALL_PIECE]; /* of the pair (id[i], id[i + 1]) */
    size_t m = n;
    if (t->segs && has_segment(s, n)) {
        int16_t byte[SMALL_PIECE];
        m = ig_bpe_premerge(t, s, n, id, byte);
        for (size_t i = 0; i + 1 < m; i++)
            rank[i] = byte[i] >= 0 && byte[i + 1] >= 0
                          ? byte_pair_rank(t, (uint8_t)byte[i], (uint8_t)byte[i + 1], &res[i])
                          : pair_rank(t, sc, id[i], id[i + 1], &res[i]);
    } else {
        for (size_t i = 0; i < n; i++) id[i] = t->byte_id[s[i]];
        for (size_t i = 0; i + 1 < n; i++) rank[i] = byte_pair_rank(t, s[i], s[i + 1], &res[i]);
    }
    while (m > 1) {
        uint32_t best;
        size_t k = first_min(rank, m - 1, &best);
        if (best == NO_RANK) break;
        id[k] = res[k];
        for (size_t i = k + 1; i + 1 < m; i++) id[i] = id[i + 1];
        for (size_t i = k + 1; i + 2 < m; i++) rank[i] = rank[i + 1], res[i] = res[i + 1];
        m--;
        if (k > 0) rank[k - 1] = pair_rank(t, sc, id[k - 1], id[k], &res[k - 1]);
        if (k + 1 < m) rank[k] = pair_rank(t, sc, id[k], id[k + 1], &res[k]);
    }
    return m;
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
        uint64_t *h = ig_realloc(sc->ctx, sc->heap, 3 * n * sizeof *h);
        if (!h) return 0;
        sc->heap = h;
        sc->heap_cap = 3 * n;
    }
    uint32_t *id = sc->id;
    int32_t *next = sc->next, *prev = sc->prev;
    uint64_t *heap = sc->heap;
    size_t hn = 0, m = n;
    uint32_t merged;
    if (t->segs && has_segment(s, n)) {
        m = ig_bpe_premerge(t, s, n, id, NULL);
        for (size_t i = 0; i + 1 < m; i++) {
            uint32_t r = pair_rank(t, sc, id[i], id[i + 1], &merged);
            if (r != NO_RANK) heap_push(heap, &hn, (uint64_t)r << 32 | i);
        }
    } else {
        for (size_t i = 0; i < n; i++) id[i] = t->byte_id[s[i]];
        for (size_t i = 0; i + 1 < n; i++) {
            uint32_t r = byte_pair_rank(t, s[i], s[i + 1], &merged);
            if (r != NO_RANK) heap_push(heap, &hn, (uint64_t)r << 32 | i);
        }
    }
    for (size_t i = 0; i < m; i++) {
        next[i] = i + 1 < m ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        uint32_t r = (uint32_t)(top >> 32);
        int32_t i = (int32_t)(uint32_t)top;
        int32_t j = next[i];
        /* stale entries: i was absorbed (prev/next no longer consistent) or its pair changed */
        if (id[i] == IG_NO_TOKEN || j < 0 || pair_rank(t, sc, id[i], id[j], &merged) != r) continue;
        id[i] = merged;
        id[j] = IG_NO_TOKEN;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        m--;
        if (prev[i] >= 0) {
            uint32_t pr = pair_rank(t, sc, id[prev[i]], id[i], &merged);
            if (pr != NO_RANK) heap_push(heap, &hn, (uint64_t)pr << 32 | (uint32_t)prev[i]);
        }
        if (next[i] >= 0) {
            uint32_t nr = pair_rank(t, sc, id[i], id[next[i]], &merged);
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
