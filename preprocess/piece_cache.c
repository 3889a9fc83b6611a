/* piece_cache.c - merged pieces shared by the encoders of several threads (ig_piece_cache).
 *
 * Each encoder keeps its own cache of merged pieces (bpe_encode.c), so with T threads every
 * piece that needs merging is merged T times: on a 51 MB mix of languages and code, 68,700
 * merges (17 ms) in each thread's encoder, one thread or two. Sharing them makes it once per run.
 *
 * Insert-only and lock-free: a piece's record (its byte length, its ids, its bytes) is written to
 * an arena at an offset taken with one atomic add, then published by a compare-and-swap of its
 * slot in an open-addressing table (release; readers load slots with acquire), so a reader
 * either finds a slot empty or finds a whole record behind it. The slot word is the record's
 * offset with 32 bits of the piece's hash (never zero), so a probe reads the record only when
 * those bits agree. Two threads that merge the same piece at once both write a record; the
 * second finds the first's in the slot it tries and leaves its own unused. Nothing is removed:
 * once the arena or half of the table is used, the cache only answers, and each encoder's own
 * cache takes the pieces it no longer adds. Ids are the merge's exact output, so an encoder gives
 * the same ids with a shared cache as without.
 */
#include <stdatomic.h>
#include <string.h>

#include "tokenizer_internal.h"

#define MAX_PIECE_BYTES 128 /* longer pieces are not cached (as in an encoder's own cache) */
#define WORDS_PER_PIECE 32  /* arena words (4 bytes) per piece of capacity */

struct ig_piece_cache {
    ig_ctx *ctx;
    const ig_tokenizer *tok;
    _Atomic uint64_t *slots; /* [mask + 1]: tag << 32 | arena word offset; 0: empty */
    size_t mask, max_pieces;
    uint32_t *arena; /* records: klen | nids << 16, ids[nids], bytes[klen] (padded to words) */
    size_t arena_words;
    _Atomic size_t used_words, pieces;
    atomic_int full;
};

static inline uint32_t tag_of(uint64_t h) {
    return (uint32_t)(h >> 32) | 1u;
}

ig_status ig_piece_cache_create(ig_piece_cache **out, const ig_tokenizer *tok, size_t max_pieces,
                                ig_err *err) {
    *out = NULL;
    if (max_pieces == 0) max_pieces = IG_PIECE_CACHE_DEFAULT;
    if (max_pieces > ((size_t)1 << 24))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "a piece cache holds at most %zu pieces",
                          (size_t)1 << 24);
    ig_ctx *ctx = tok->ctx;
    ig_piece_cache *c = ig_calloc(ctx, 1, sizeof *c);
    if (!c) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a piece cache");
    c->ctx = ctx;
    c->tok = tok;
    c->max_pieces = max_pieces;
    size_t n_slots = 16;
    while (n_slots < 2 * max_pieces) n_slots *= 2;
    c->mask = n_slots - 1;
    c->arena_words = max_pieces * WORDS_PER_PIECE;
    c->slots = ig_calloc(ctx, n_slots, sizeof *c->slots);
    c->arena = ig_alloc(ctx, c->arena_words * sizeof *c->arena);
    if (!c->slots || !c->arena) {
        ig_piece_cache_free(c);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a piece cache");
    }
    *out = c;
    return IG_OK;
}

void ig_piece_cache_free(ig_piece_cache *c) {
    if (!c) return;
    ig_free(c->ctx, (void *)c->slots);
    ig_free(c->ctx, c->arena);
    ig_free(c->ctx, c);
}

const ig_tokenizer *ig_piece_cache_tokenizer(const ig_piece_cache *c) {
    return c->tok;
}

void ig_piece_cache_prefetch(const ig_piece_cache *c, uint64_t h) {
    __builtin_prefetch((const void *)&c->slots[(size_t)h & c->mask]);
}

/* Whether the record at off holds the n bytes s (its ids at *ids, *nids of them). */
static inline int record_holds(const ig_piece_cache *c, uint32_t off, const uint8_t *s, size_t n,
                               const uint32_t **ids, size_t *nids) {
    const uint32_t *r = c->arena + off;
    size_t klen = r[0] & 0xFFFFu, m = r[0] >> 16;
    if (klen != n || memcmp(r + 1 + m, s, n) != 0) return 0;
    *ids = r + 1;
    *nids = m;
    return 1;
}

size_t ig_piece_cache_find(const ig_piece_cache *c, const uint8_t *s, size_t n, uint64_t h,
                           const uint32_t **ids) {
    if (n > MAX_PIECE_BYTES) return 0;
    uint32_t tag = tag_of(h);
    for (size_t i = (size_t)h & c->mask;; i = (i + 1) & c->mask) {
        uint64_t w = atomic_load_explicit(&c->slots[i], memory_order_acquire);
        if (w == 0) return 0;
        size_t m;
        if ((uint32_t)(w >> 32) == tag && record_holds(c, (uint32_t)w, s, n, ids, &m)) return m;
    }
}

int ig_piece_cache_add(ig_piece_cache *c, const uint8_t *s, size_t n, uint64_t h,
                       const uint32_t *ids, size_t m) {
    if (n > MAX_PIECE_BYTES || m == 0 || m > 0xFFFFu) return 0;
    if (atomic_load_explicit(&c->full, memory_order_relaxed)) return 0;
    size_t words = 1 + m + (n + 3) / 4;
    size_t off = atomic_fetch_add_explicit(&c->used_words, words, memory_order_relaxed);
    size_t no = atomic_fetch_add_explicit(&c->pieces, 1, memory_order_relaxed);
    if (off + words > c->arena_words || no >= c->max_pieces) {
        atomic_store_explicit(&c->full, 1, memory_order_relaxed);
        return 0;
    }
    uint32_t *r = c->arena + off;
    r[0] = (uint32_t)n | (uint32_t)m << 16;
    memcpy(r + 1, ids, m * sizeof *ids);
    memcpy(r + 1 + m, s, n);
    uint32_t tag = tag_of(h);
    uint64_t w = (uint64_t)tag << 32 | off;
    for (size_t i = (size_t)h & c->mask;; i = (i + 1) & c->mask) {
        uint64_t seen = 0;
        if (atomic_compare_exchange_strong_explicit(&c->slots[i], &seen, w, memory_order_release,
                                                    memory_order_acquire))
            return 1;
        const uint32_t *had;
        size_t hm;
        if ((uint32_t)(seen >> 32) == tag && record_holds(c, (uint32_t)seen, s, n, &had, &hm))
            return 1; /* another thread added it first */
    }
}
