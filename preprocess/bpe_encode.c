/* bpe_encode.c - ig_encoder (one per thread: merge scratch space and bounded caches of
 * pre-tokens' ids), ig_piece_cache (merged pieces, also shared by several threads' encoders),
 * encoding with and without special tokens, and decoding.
 *
 * Short pieces (1 to 16 bytes: nearly every word, number, space and run of punctuation) go
 * through a direct-mapped table of 64-byte slots, each holding a piece's bytes and its ids: a hit
 * costs one cache line and no call, where the vocabulary lookup touches three (the hash table,
 * the token's bytes, its whole_ok flag) and merging far more. A miss takes the slow path
 * below and overwrites the slot. The table is 2 MB: at 4 MB a twentieth of the pieces of a 51
 * MB mix of languages and code missed rather than a tenth, but end to end the two were level and
 * a fresh encoder's round over the 96-language UDHR was 1.5-3% slower (the larger table pushed
 * the vocabulary's and the merges' tables out of the caches). Its lines are prefetched a few
 * pieces ahead (encode_ordinary), so a hit rarely waits for memory. Single bytes go through it
 * too: one path for every short piece costs less than the branch that told them apart.
 *
 * The slow path looks a piece up whole in the vocabulary (most pieces are one token), else in the
 * caches of merged pieces (ig_piece_cache: one shared by the threads' encoders, if given, and the
 * encoder's own), else merges it. A cache maps a pre-token's bytes to its ids; it holds 131072
 * pieces (18 MB at most): the five shared corpora (4.7 MB of English, 96 languages, C, emoji)
 * have about 70000 distinct pieces that need merging, and a smaller cache emptied itself every
 * few hundred KB of the multilingual text, merging them again. The encoder's own is emptied when
 * full, so memory stays bounded.
 *
 * With only their own caches, T threads merge every piece that needs merging T times: on a 51 MB
 * mix of languages and code, 68,700 merges (17 ms) in each thread's encoder, one thread or two.
 * A shared cache makes it once per run. It is insert-only and lock-free: a piece's record (its byte
 * length, its ids, its bytes) is written to an arena at an offset taken with one atomic add, then
 * published by a compare-and-swap of its slot in an open-addressing table (release; readers load
 * slots with acquire), so a reader either finds a slot empty or finds a whole record behind it. The
 * slot word is the record's offset with 32 bits of the piece's hash (never zero), so a probe reads
 * the record only when those bits agree. Two threads that merge the same piece at once both write a
 * record; the second finds the first's in the slot it tries and leaves its own unused. Nothing is
 * removed: once the arena or half of the table is used, the cache only answers, and each encoder's
 * own cache takes the pieces it no longer adds. Ids are the merge's exact output, so an encoder
 * gives the same ids with a shared cache as without. An encoder's own cache is the same table, used
 * by one thread, and emptied when full (cache_clear). A hit reads two cache lines (the slot, the
 * record with the ids beside the bytes), where a table of wider slots and separate arenas for the
 * bytes and the ids read three (a one-thread run on that mix: 1.6-3.3% faster).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "tokenizer_spm_internal.h"

#define CACHE_MAX_PIECE 128 /* longer pieces are merged every time */

#define SHORT_BITS    15 /* 32768 slots of 64 bytes: 2 MB */
#define SHORT_MAX_LEN 16
#define SHORT_MAX_IDS 11

/* A short piece and its ids; len 0: empty. One cache line. */
typedef struct short_slot {
    uint64_t k0, k1; /* the piece's bytes, zero-padded to 16 */
    uint8_t len, nids;
    uint16_t unused;
    uint32_t ids[SHORT_MAX_IDS];
} short_slot;
_Static_assert(sizeof(short_slot) == 64, "a short slot is one cache line");

#define WORDS_PER_PIECE 32 /* arena words (4 bytes) per piece of capacity */

struct ig_piece_cache {
    ig_ctx *ctx;
    const ig_tokenizer *tok;
    _Atomic uint64_t *slots; /* [mask + 1]: tag << 32 | arena word offset; 0: empty */
    size_t mask, max_pieces;
    uint32_t *arena; /* records: klen | nids << 16, ids[nids], bytes[klen] (padded to words) */
    size_t arena_words;
    _Atomic size_t used_words, pieces;
    atomic_int full;
    int owned; /* one encoder's own: its thread alone adds, without locked instructions */
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
    c->slots = ig_alloc(ctx, n_slots * sizeof *c->slots);
    c->arena = ig_alloc(ctx, c->arena_words * sizeof *c->arena);
    if (!c->slots || !c->arena) {
        ig_piece_cache_free(c);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a piece cache");
    }
    /* written now, not at the first pieces: a fresh encoder's first text pays no page faults */
    memset((void *)c->slots, 0, n_slots * sizeof *c->slots);
    *out = c;
    return IG_OK;
}

void ig_piece_cache_free(ig_piece_cache *c) {
    if (!c) return;
    ig_free(c->ctx, (void *)c->slots);
    ig_free(c->ctx, c->arena);
    ig_free(c->ctx, c);
}

static inline int cache_empty(const ig_piece_cache *c) {
    return atomic_load_explicit(&c->pieces, memory_order_relaxed) == 0;
}

/* Empties c: only while no other thread uses it (an encoder's own cache, when full). */
static void cache_clear(ig_piece_cache *c) {
    memset((void *)c->slots, 0, (c->mask + 1) * sizeof *c->slots);
    atomic_store_explicit(&c->used_words, 0, memory_order_relaxed);
    atomic_store_explicit(&c->pieces, 0, memory_order_relaxed);
    atomic_store_explicit(&c->full, 0, memory_order_relaxed);
}

static inline void cache_prefetch(const ig_piece_cache *c, uint64_t h) {
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

/* The ids of the n bytes s (n <= CACHE_MAX_PIECE; h: ig_tok_hash_bytes) into *ids, and their
 * count; 0 when absent. */
static inline size_t cache_find(const ig_piece_cache *c, const uint8_t *s, size_t n, uint64_t h,
                                const uint32_t **ids) {
    uint32_t tag = tag_of(h);
    for (size_t i = (size_t)h & c->mask;; i = (i + 1) & c->mask) {
        uint64_t w = atomic_load_explicit(&c->slots[i], memory_order_acquire);
        if (w == 0) return 0;
        size_t m;
        if ((uint32_t)(w >> 32) == tag && record_holds(c, (uint32_t)w, s, n, ids, &m)) return m;
    }
}

/* Adds the piece: 1 when it is in the cache (now or before), 0 when the cache is full or the
 * piece too long. */
static int cache_add(ig_piece_cache *c, const uint8_t *s, size_t n, uint64_t h, const uint32_t *ids,
                     size_t m) {
    if (n > CACHE_MAX_PIECE || m == 0 || m > 0xFFFFu) return 0;
    if (atomic_load_explicit(&c->full, memory_order_relaxed)) return 0;
    size_t words = 1 + m + (n + 3) / 4, off, no;
    if (c->owned) { /* a locked add is a tenth of a cold piece's merge */
        off = atomic_load_explicit(&c->used_words, memory_order_relaxed);
        no = atomic_load_explicit(&c->pieces, memory_order_relaxed);
        atomic_store_explicit(&c->used_words, off + words, memory_order_relaxed);
        atomic_store_explicit(&c->pieces, no + 1, memory_order_relaxed);
    } else {
        off = atomic_fetch_add_explicit(&c->used_words, words, memory_order_relaxed);
        no = atomic_fetch_add_explicit(&c->pieces, 1, memory_order_relaxed);
    }
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
        if (c->owned) { /* the piece was looked up and not found: the first empty slot */
            if (atomic_load_explicit(&c->slots[i], memory_order_relaxed) != 0) continue;
            atomic_store_explicit(&c->slots[i], w, memory_order_relaxed);
            return 1;
        }
        if (atomic_compare_exchange_strong_explicit(&c->slots[i], &seen, w, memory_order_release,
                                                    memory_order_acquire))
            return 1;
        const uint32_t *had;
        size_t hm;
        if ((uint32_t)(seen >> 32) == tag && record_holds(c, (uint32_t)seen, s, n, &had, &hm))
            return 1; /* another thread added it first */
    }
}

struct ig_encoder {
    const ig_tokenizer *tok;
    ig_spm_encoder *spm; /* a SentencePiece model's encoder (then nothing below is used) */
    ig_bpe_scratch sc;
    ig_piece_cache *own;    /* merged pieces, emptied when full */
    ig_piece_cache *shared; /* merged pieces shared with other threads' encoders (or NULL) */
    size_t *special_at;     /* [n_specials] next occurrence (SIZE_MAX: none) during one encode */
    short_slot *shorts;     /* [1 << SHORT_BITS], 64-byte aligned */
    size_t merges;
};

ig_status ig_encoder_create(ig_encoder **out, const ig_tokenizer *tok, ig_err *err) {
    *out = NULL;
    ig_ctx *ctx = tok->ctx;
    ig_encoder *e = ig_calloc(ctx, 1, sizeof *e);
    if (!e) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating an encoder");
    e->tok = tok;
    if (tok->spm) {
        ig_status st = ig_spm_encoder_create(&e->spm, tok->spm, ctx, err);
        if (st != IG_OK) {
            ig_free(ctx, e);
            return st;
        }
        *out = e;
        return IG_OK;
    }
    e->sc.ctx = ctx;
    ig_status st = ig_piece_cache_create(&e->own, tok, 0, err);
    if (st != IG_OK) {
        ig_encoder_free(e);
        return st;
    }
    e->own->owned = 1;
    e->special_at = ig_calloc(ctx, tok->n_specials ? tok->n_specials : 1, sizeof *e->special_at);
    e->shorts = ig_alloc_aligned(ctx, sizeof(short_slot) << SHORT_BITS, 64);
    if (!e->special_at || !e->shorts) {
        ig_encoder_free(e);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating an encoder");
    }
    memset(e->shorts, 0, sizeof(short_slot) << SHORT_BITS);
    *out = e;
    return IG_OK;
}

void ig_encoder_free(ig_encoder *e) {
    if (!e) return;
    ig_ctx *ctx = e->tok->ctx;
    ig_spm_encoder_free(e->spm);
    ig_bpe_scratch_free(&e->sc);
    ig_piece_cache_free(e->own);
    ig_free(ctx, e->special_at);
    ig_free(ctx, e->shorts);
    ig_free(ctx, e);
}

ig_status ig_encoder_share(ig_encoder *e, ig_piece_cache *cache, ig_err *err) {
    if (cache && cache->tok != e->tok)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "the piece cache was made for another tokenizer than the encoder's");
    e->shared = cache;
    return IG_OK;
}

size_t ig_encoder_merges(const ig_encoder *e) {
    return e->merges;
}

static ig_status grow_out(ig_tokens *out, size_t need) {
    size_t cap = out->cap ? out->cap : 256;
    while (cap < need) cap *= 2;
    return ig_tokens_reserve(out, cap);
}

/* A piece that is not one whole token (h: its ig_tok_hash_bytes): from the shared cache or the
 * encoder's own, else merged (and cached: in the shared one while it has room, else in its own,
 * emptied when full). */
static ig_status encode_merged(ig_encoder *e, const uint8_t *s, size_t n, uint64_t h,
                               ig_tokens *out) {
    const uint32_t *ids;
    size_t m = 0;
    if (n <= CACHE_MAX_PIECE) {
        if (e->shared) m = cache_find(e->shared, s, n, h, &ids);
        if (!m && !cache_empty(e->own)) m = cache_find(e->own, s, n, h, &ids);
        if (m) {
            memcpy(out->ids + out->n, ids, m * sizeof(uint32_t));
            out->n += m;
            return IG_OK;
        }
    }
    m = ig_bpe_merge(e->tok, &e->sc, s, n, &ids);
    if (m == 0) return IG_ERR_NOMEM;
    e->merges++;
    memcpy(out->ids + out->n, ids, m * sizeof(uint32_t));
    out->n += m;
    if (n > CACHE_MAX_PIECE || (e->shared && cache_add(e->shared, s, n, h, ids, m))) return IG_OK;
    if (!cache_add(e->own, s, n, h, ids, m)) {
        cache_clear(e->own);
        cache_add(e->own, s, n, h, ids, m);
    }
    return IG_OK;
}

/* Any piece of two bytes or more (h: its ig_tok_hash_bytes): whole from the vocabulary, else from
 * the cache or merged. */
static ig_status encode_piece(ig_encoder *e, const uint8_t *s, size_t len, uint64_t h,
                              ig_tokens *out) {
    const ig_tokenizer *t = e->tok;
    uint32_t id = ig_tok_lookup_hashed(t, s, len, h);
    if (id != IG_NO_TOKEN && t->whole_ok[id]) {
        out->ids[out->n++] = (int32_t)id;
        return IG_OK;
    }
    return encode_merged(e, s, len, h, out);
}

/* Masks that keep the first len bytes of a little-endian word pair. */
static const uint64_t key_mask[SHORT_MAX_LEN + 1][2] = {
    {0, 0},
    {0xFFull, 0},
    {0xFFFFull, 0},
    {0xFFFFFFull, 0},
    {0xFFFFFFFFull, 0},
    {0xFFFFFFFFFFull, 0},
    {0xFFFFFFFFFFFFull, 0},
    {0xFFFFFFFFFFFFFFull, 0},
    {~0ull, 0},
    {~0ull, 0xFFull},
    {~0ull, 0xFFFFull},
    {~0ull, 0xFFFFFFull},
    {~0ull, 0xFFFFFFFFull},
    {~0ull, 0xFFFFFFFFFFull},
    {~0ull, 0xFFFFFFFFFFFFull},
    {~0ull, 0xFFFFFFFFFFFFFFull},
    {~0ull, ~0ull},
};

/* The bytes p[0..len) (1 <= len <= 16; avail bytes may be read from p) as two zero-padded words. */
static inline void short_key(const uint8_t *p, size_t len, size_t avail, uint64_t *k0,
                             uint64_t *k1) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (avail >= 16) { /* two loads and two masks: the bytes past the piece are cleared */
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, p + 8, 8);
        *k0 = a & key_mask[len][0];
        *k1 = b & key_mask[len][1];
        return;
    }
#endif
    uint8_t b[16] = {0};
    memcpy(b, p, len);
    memcpy(k0, b, 8);
    memcpy(k1, b + 8, 8);
}

static inline size_t short_index(uint64_t k0, uint64_t k1, size_t len) {
    uint64_t h = (k0 ^ (k1 * 0x9E3779B97F4A7C15ull) ^ len) * 0xBF58476D1CE4E5B9ull;
    return (size_t)(h >> (64 - SHORT_BITS));
}

/* Pieces are taken a run at a time (up to RUN_PIECES, from one ig_pretok_split), and each table
 * a piece will touch is prefetched some pieces ahead of its turn, so that the cache misses of
 * nearby pieces overlap instead of following one another: its short slot PREFETCH_SHORT pieces
 * ahead; the vocabulary's and the merged cache's slots PREFETCH_SLOW ahead, for a piece too long
 * for the short table or one its short slot (by then loaded) does not hold. Prefetches only move
 * lines into the caches: every piece is then looked up as if none had been made. */
#define RUN_PIECES     256
#define PREFETCH_SHORT 16
#define PREFETCH_SLOW  8

typedef struct run_piece {
    uint64_t k0, k1; /* a short piece's key */
    uint64_t hash;   /* its ig_tok_hash_bytes, once prefetch_slow computed it */
    uint32_t slot;   /* a short piece's slot */
    uint32_t hashed; /* 1: hash is set */
} run_piece;

/* Whether short slot c holds the piece of r (len bytes). */
static inline int slot_holds(const short_slot *c, const run_piece *r, size_t len) {
    return c->k0 == r->k0 && c->k1 == r->k1 && c->len == len;
}

/* The piece's ig_tok_hash_bytes, computed once. */
static inline uint64_t piece_hash(run_piece *r, const uint8_t *p, size_t len) {
    if (!r->hashed) {
        r->hash = ig_tok_hash_bytes(p, len);
        r->hashed = 1;
    }
    return r->hash;
}

/* Stage two of piece k: the short piece whose slot does not hold it, or a long piece, has its
 * hash computed and the slots its slow path reads prefetched. */
static inline void prefetch_slow(ig_encoder *e, const uint8_t *s, size_t at, size_t len,
                                 run_piece *r) {
    if (len <= SHORT_MAX_LEN) {
        if (slot_holds(&e->shorts[r->slot], r, len)) return;
    }
    uint64_t h = piece_hash(r, s + at, len);
    __builtin_prefetch(&e->tok->bmap[(size_t)h & e->tok->bmap_mask]);
    if (e->shared) cache_prefetch(e->shared, h);
    if (!cache_empty(e->own)) cache_prefetch(e->own, h);
}

static ig_status encode_ordinary(ig_encoder *e, const uint8_t *s, size_t n, ig_tokens *out) {
    const ig_tokenizer *t = e->tok;
    size_t i = 0, ends[RUN_PIECES];
    run_piece run[RUN_PIECES];
    while (i < n) {
        size_t m = ig_pretok_split(&t->pt, s, i, n, ends, RUN_PIECES);
        /* room for the run's ids (one byte at least each), and a whole slot's ids copied at once */
        size_t span = ends[m - 1] - i;
        if (out->cap - out->n < span + SHORT_MAX_IDS &&
            grow_out(out, out->n + span + SHORT_MAX_IDS + (n - i) / 4) != IG_OK)
            return IG_ERR_NOMEM;
        for (size_t k = 0, at = i; k < m; at = ends[k++]) {
            size_t len = ends[k] - at;
            run_piece *r = &run[k];
            r->hashed = 0;
            if (len <= SHORT_MAX_LEN) {
                short_key(s + at, len, n - at, &r->k0, &r->k1);
                r->slot = (uint32_t)short_index(r->k0, r->k1, len);
                if (k < PREFETCH_SHORT) __builtin_prefetch(&e->shorts[r->slot]);
            }
        }
        for (size_t k = 0, at = i; k < m; at = ends[k++]) {
            if (k + PREFETCH_SHORT < m &&
                ends[k + PREFETCH_SHORT] - ends[k + PREFETCH_SHORT - 1] <= SHORT_MAX_LEN)
                __builtin_prefetch(&e->shorts[run[k + PREFETCH_SHORT].slot]);
            if (k + PREFETCH_SLOW < m) {
                size_t a = ends[k + PREFETCH_SLOW - 1], l = ends[k + PREFETCH_SLOW] - a;
                if (l >= 2) prefetch_slow(e, s, a, l, &run[k + PREFETCH_SLOW]);
            }
            size_t len = ends[k] - at;
            run_piece *r = &run[k];
            if (len <= SHORT_MAX_LEN) {
                short_slot *c = &e->shorts[r->slot];
                if (slot_holds(c, r, len)) {
                    memcpy(out->ids + out->n, c->ids, sizeof c->ids);
                    out->n += c->nids;
                } else {
                    size_t before = out->n;
                    ig_status st = IG_OK;
                    if (len == 1)
                        out->ids[out->n++] = (int32_t)t->byte_id[s[at]];
                    else
                        st = encode_piece(e, s + at, len, piece_hash(r, s + at, len), out);
                    if (st != IG_OK) return st;
                    size_t got = out->n - before;
                    if (got <= SHORT_MAX_IDS) {
                        c->k0 = r->k0;
                        c->k1 = r->k1;
                        c->len = (uint8_t)len;
                        c->nids = (uint8_t)got;
                        memcpy(c->ids, out->ids + before, got * sizeof(uint32_t));
                    }
                }
            } else {
                ig_status st = encode_piece(e, s + at, len, piece_hash(r, s + at, len), out);
                if (st != IG_OK) return st;
            }
        }
        i = ends[m - 1];
    }
    return IG_OK;
}

ig_status ig_encoder_encode(ig_encoder *e, const char *text, size_t len, int flags, ig_tokens *out,
                            ig_err *err) {
    const ig_tokenizer *t = e->tok;
    const uint8_t *s = (const uint8_t *)text;
    ig_status st = IG_OK;
    if ((flags & IG_ENCODE_APPEND_EOS) && t->eod < 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "the tokenizer (%s) has no end-of-sequence token to append", t->name);
    if (e->spm) {
        st = ig_spm_encode(e->spm, text, len, flags, out, err);
    } else if (!(flags & IG_ENCODE_ALLOW_SPECIAL) || t->n_specials == 0 || len == 0) {
        st = encode_ordinary(e, s, len, out);
    } else {
        for (size_t k = 0; k < t->n_specials; k++) {
            const uint8_t *f = memmem(s, len, t->specials[k].bytes, t->specials[k].len);
            e->special_at[k] = f ? (size_t)(f - s) : SIZE_MAX;
        }
        size_t pos = 0;
        for (;;) {
            /* the leftmost special token (the longest when several start there) */
            size_t best = SIZE_MAX, best_k = 0;
            for (size_t k = 0; k < t->n_specials; k++) {
                const ig_special_tok *sp = &t->specials[k];
                if (e->special_at[k] < pos) { /* overlapped by the last match: search again */
                    const uint8_t *f = memmem(s + pos, len - pos, sp->bytes, sp->len);
                    e->special_at[k] = f ? (size_t)(f - s) : SIZE_MAX;
                }
                size_t at = e->special_at[k];
                if (at < best ||
                    (at == best && at != SIZE_MAX && sp->len > t->specials[best_k].len))
                    best = at, best_k = k;
            }
            size_t seg_end = best == SIZE_MAX ? len : best;
            st = encode_ordinary(e, s + pos, seg_end - pos, out);
            if (st != IG_OK || best == SIZE_MAX) break;
            if ((st = ig_tokens_push(out, (int32_t)t->specials[best_k].id)) != IG_OK) break;
            pos = best + t->specials[best_k].len;
        }
    }
    if (st == IG_OK && (flags & IG_ENCODE_APPEND_EOS)) st = ig_tokens_push(out, t->eod);
    if (st == IG_ERR_NOMEM) return ig_err_set(err, st, "out of memory encoding %zu bytes", len);
    return st;
}

ig_status ig_tokenizer_decode(const ig_tokenizer *t, const int32_t *ids, size_t n, char **buf,
                              size_t *len, size_t *cap, ig_err *err) {
    if (t->spm) return ig_spm_decode(t, ids, n, 0, buf, len, cap, err);
    return ig_tokenizer_decode_next(t, ids, n, buf, len, cap, err);
}

ig_status ig_tokenizer_decode_next(const ig_tokenizer *t, const int32_t *ids, size_t n, char **buf,
                                   size_t *len, size_t *cap, ig_err *err) {
    if (t->spm) return ig_spm_decode(t, ids, n, 1, buf, len, cap, err);
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->vocab_size)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "token id %d (at position %zu) is not in the vocabulary of %s "
                              "(ids 0..%zu)",
                              id, i, t->name, t->vocab_size ? t->vocab_size - 1 : 0);
        if (t->tok_len[id] == IG_NO_TOKEN)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "token id %d (at position %zu) is unassigned in %s: no token has "
                              "that id",
                              id, i, t->name);
        uint32_t l = t->tok_len[id];
        if (*len + l > *cap) {
            size_t c = *cap ? *cap : 256;
            while (c < *len + l) c *= 2;
            char *nb = realloc(*buf, c);
            if (!nb) return ig_err_set(err, IG_ERR_NOMEM, "out of memory decoding %zu ids", n);
            *buf = nb;
            *cap = c;
        }
        memcpy(*buf + *len, t->arena + t->tok_off[id], l);
        *len += l;
    }
    return IG_OK;
}
