/* tokenizer_internal.h - private to preprocess/: the in-memory form of a byte-level BPE tokenizer
 * shared by the loaders (tokenizer_load.c, tokenizer_hf.c), the pre-tokenizers (pretokenize.c)
 * and the encoder (bpe.c).
 *
 * Every tokenizer form is converted to one representation: token id -> bytes, bytes -> id, and a
 * pair table (left id, right id) -> (priority, merged id). For Hugging Face merges the priority
 * is the merge's line; for tiktoken ranks it is the rank of the merged bytes, with one pair entry
 * for every split of a token into two tokens, which makes the pair-based merge loop exactly
 * tiktoken's byte_pair_merge.
 */
#ifndef INGOT_TOKENIZER_INTERNAL_H
#define INGOT_TOKENIZER_INTERNAL_H

#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "preprocess/preprocess.h"

/* Pre-tokenization schemes: the split patterns of GPT-2 (r50k_base), cl100k_base and o200k_base. */
typedef enum ig_pattern { IG_PAT_GPT2 = 0, IG_PAT_CL100K, IG_PAT_O200K } ig_pattern;

/* Per-code-point class bits (one byte per code point in ig_pretok.cls). */
enum {
    IG_CL_L = 1,     /* \p{L}: Lu Ll Lt Lm Lo */
    IG_CL_N = 2,     /* \p{N}: Nd Nl No */
    IG_CL_WS = 4,    /* \s: Unicode White_Space (PropList.txt) */
    IG_CL_UP = 8,    /* o200k [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
    IG_CL_LO = 16,   /* o200k [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
    IG_CL_CRLF = 32, /* \r or \n */
};
#define IG_CP_LIMIT 0x110000u

typedef struct ig_pretok {
    ig_pattern pattern;
    uint8_t *cls; /* [IG_CP_LIMIT] class bits, built at load from utf8proc + White_Space */
} ig_pretok;

ig_status ig_pretok_init(ig_pretok *pt, ig_pattern pattern, ig_err *err);
void ig_pretok_free(ig_pretok *pt);
/* The end of the pre-token that starts at s[i] (i < n); the text ends at n. */
size_t ig_pretok_next(const ig_pretok *pt, const uint8_t *s, size_t i, size_t n);
/* The ends of up to max consecutive pre-tokens from s[i] (text ending at n) into ends; returns how
 * many (0 only when i == n). One call per run of pieces keeps the per-piece dispatch out of the
 * encoder's loop. */
size_t ig_pretok_split(const ig_pretok *pt, const uint8_t *s, size_t i, size_t n, size_t *ends,
                       size_t max);
const char *ig_pattern_name(ig_pattern p);

/* bytes -> id: open addressing over ids; tag is the high half of the hash. A slot also holds the
 * token's length and where its bytes are (tok_len[id], tok_off[id]): a lookup reads the slot and
 * the bytes, not two more arrays first. */
typedef struct ig_bmap_slot {
    uint32_t id; /* UINT32_MAX: empty */
    uint32_t tag;
    uint32_t len;
    uint32_t off;
} ig_bmap_slot;

/* (left, right) -> (priority, merged id) */
typedef struct ig_pair_slot {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
    uint32_t rank;
    uint32_t id;
} ig_pair_slot;

typedef struct ig_special_tok {
    uint32_t id;
    const uint8_t *bytes; /* into ig_tokenizer.arena */
    uint32_t len;
} ig_special_tok;

#define IG_NO_TOKEN UINT32_MAX
/* Token ids are below 2^24: room for any real vocabulary (o200k_base has 200019 ids), while an id
 * mistyped into a file cannot make the loader allocate gigabytes for its per-id tables. */
#define IG_TOK_ID_LIMIT ((uint32_t)1 << 24)
/* The largest tokenizer file read (tokenizer.json, vocab.json, merges.txt, .tiktoken): o200k's
 * files are a few MB, so this only stops the wrong file (a disk image, /dev/zero) early. */
#define IG_TOK_FILE_MAX ((size_t)256 << 20)

struct ig_tokenizer {
    ig_ctx *ctx;
    char name[32];
    ig_pattern pattern;
    int from_ranks; /* 1: tiktoken ranks (whole-piece lookup is the rule); 0: merges */
    ig_pretok pt;
    uint8_t *arena; /* bytes of every token */
    size_t arena_len, arena_cap;
    uint32_t *tok_off;   /* [vocab_size] */
    uint32_t *tok_len;   /* [vocab_size]; IG_NO_TOKEN: no such id */
    uint8_t *whole_ok;   /* [vocab_size] 1: a piece equal to this token's bytes encodes to it */
    uint8_t *is_special; /* [vocab_size] */
    size_t vocab_size;
    ig_bmap_slot *bmap; /* ordinary tokens only */
    size_t bmap_mask;
    ig_pair_slot *pairs;
    size_t pairs_mask, n_pairs;
    /* The same table in 8 bytes a pair, left | right << 21 | merged << 42 (UINT64_MAX: empty),
     * where every merged id is its pair's rank (tiktoken's ranks) and every id is below
     * IG_PAIR8_ID_LIMIT: built by ig_tok_finish, which then frees pairs and sets pairs_mask to
     * this table's size less one. Half the bytes a pair, and up to 7/8 full rather than half, so
     * o200k's table (446,189 pairs) is 4 MB rather than 16 and its probes stay in the outer cache
     * far more often (at 8 MB a cold round over the UDHR was 4% slower; a pair is found a few
     * slots from home, eight to a cache line). NULL: pairs is the table. */
    uint64_t *pairs8;
    /* A filter of the pairs that merge: two bits of one word per pair, a word for four pairs (512
     * KB at most, so it stays in the CPU's own cache where the table does not). Three of four
     * lookups that miss a thread's pair cache are of pairs that do not merge; this answers nearly
     * all of them without touching the table (of random pairs that do not merge, 4.1% get through
     * for o200k, 1.4% for cl100k; at 1 MB 1.1% got through for o200k, but a cold round over the
     * UDHR was 1-2% slower). */
    uint64_t *pair_filter;
    unsigned pair_filter_bits; /* log2 of its words */
    uint32_t byte_id[256];
    /* [65536] the pair of single-byte tokens (a, b) at a << 8 | b, as (rank << 32 | merged id);
     * UINT64_MAX: no such pair. Built by ig_tok_finish; every merge starts with these. */
    uint64_t *byte_pairs;
    /* Characters merged before the merge loop (bpe_premerge.c): the pairs across every token
     * that can be a character's edge, and the characters' entries, made on first use by any
     * thread. NULL: merges start from bytes. */
    struct ig_seg_table *segs;
    ig_special_tok *specials;
    size_t n_specials;
    int32_t eod;
    uint64_t hash;
    /* A SentencePiece model (tokenizer_spm_internal.h): the fields above other than ctx, name,
     * vocab_size, eod and hash are unused, and the encoder and decoder hand over to it. */
    struct ig_spm *spm;
};

/* ---- building (tokenizer_build.c) ---- */

/* Starts an empty tokenizer; tokens are then added by id. */
ig_status ig_tok_begin(ig_tokenizer **out, ig_ctx *ctx, ig_pattern pattern, int from_ranks,
                       ig_err *err);
/* Sets token id's bytes (ordinary or special). A second definition of an id is a format error. */
ig_status ig_tok_set(ig_tokenizer *t, uint32_t id, const void *bytes, size_t len, int special,
                     const char *where, ig_err *err);
/* Builds the bytes -> id map over the ordinary tokens set so far. */
ig_status ig_tok_index(ig_tokenizer *t, const char *where, ig_err *err);
/* Adds merge (left, right) -> merged with the given priority; an existing pair keeps the first. */
ig_status ig_tok_add_pair(ig_tokenizer *t, uint32_t left, uint32_t right, uint32_t rank,
                          uint32_t merged, ig_err *err);
/* Rank mode: derives the pair table from every split of every token (after ig_tok_index). */
ig_status ig_tok_pairs_from_ranks(ig_tokenizer *t, ig_err *err);
/* The edges of characters merged before the merge loop (bpe_premerge.c), after the pair table is
 * complete; ig_tok_free_segments frees them. */
ig_status ig_tok_build_segments(ig_tokenizer *t, ig_err *err);
void ig_tok_free_segments(ig_tokenizer *t);
/* Checks single bytes, computes whole_ok, the end-of-document id and the hash, and builds the
 * characters' edges (ig_tok_build_segments). */
ig_status ig_tok_finish(ig_tokenizer *t, const char *where, ig_err *err);
/* ig_tokenizer_free (public) frees a tokenizer at any stage of building. */

/* Loaders of the Hugging Face forms (tokenizer_hf.c). */
ig_status ig_tok_load_hf_json(ig_tokenizer **out, ig_ctx *ctx, const char *path, ig_err *err);
ig_status ig_tok_load_vocab_merges(ig_tokenizer **out, ig_ctx *ctx, const char *vocab_path,
                                   const char *merges_path, ig_err *err);
/* The .tiktoken loader (tokenizer_tiktoken.c); encoding NULL: from the file name. */
ig_status ig_tok_load_tiktoken(ig_tokenizer **out, ig_ctx *ctx, const char *path,
                               const char *encoding, ig_err *err);

/* ---- BPE (bpe.c) ---- */

/* A direct-mapped cache of pair-table lookups (hits and misses) in front of the shared pair
 * table, which for the tiktoken encodings holds millions of entries and misses the CPU caches. */
#define IG_PAIR_CACHE_BITS 13
typedef struct ig_pair_cache_slot {
    uint64_t key;  /* left << 32 | right; UINT64_MAX: empty */
    uint32_t rank; /* UINT32_MAX: no such pair */
    uint32_t id;
} ig_pair_cache_slot;

/* Scratch space for merging one piece; zero-initialise (then set ctx), free with
 * ig_bpe_scratch_free. One per thread: it also holds that thread's pair cache. */
typedef struct ig_bpe_scratch {
    ig_ctx *ctx; /* allocates the arrays (NULL: malloc) */
    uint32_t *id;
    int32_t *next, *prev;
    uint64_t *heap; /* (rank << 32 | position) */
    size_t cap, heap_cap;
    ig_pair_cache_slot *pair_cache; /* [1 << IG_PAIR_CACHE_BITS] */
} ig_bpe_scratch;

/* Pieces an encoder has merged (not found in a cache), for tests. */
size_t ig_encoder_merges(const ig_encoder *e);

/* Merges s[0..n) (n >= 1) into ids written to *out_ids (scratch-owned, valid until the next call)
 * and returns their count, or 0 when out of memory. */
size_t ig_bpe_merge(const ig_tokenizer *t, ig_bpe_scratch *sc, const uint8_t *s, size_t n,
                    const uint32_t **out_ids);
void ig_bpe_scratch_free(ig_bpe_scratch *sc);
/* The elements a merge of s[0..n) starts from (after ig_tok_build_segments): each character whose
 * own merges BPE of the piece would make first, as their tokens, every other byte as itself.
 * Writes ids to id[] and, when byte is not NULL, each element's byte (-1: a character's token) to
 * byte[]; returns their count (at most n). */
size_t ig_bpe_premerge(const ig_tokenizer *t, const uint8_t *s, size_t n, uint32_t *id,
                       int16_t *byte);

/* 64-bit hash of a byte string used by the maps. */
static inline uint64_t ig_tok_hash_bytes(const void *s, size_t n) {
    return XXH3_64bits(s, n);
}

/* Looks up an ordinary token's id by its bytes, given h = ig_tok_hash_bytes(s, len) (after
 * ig_tok_index). IG_NO_TOKEN when absent. */
static inline uint32_t ig_tok_lookup_hashed(const ig_tokenizer *t, const uint8_t *s, size_t len,
                                            uint64_t h) {
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & t->bmap_mask;; i = (i + 1) & t->bmap_mask) {
        const ig_bmap_slot *b = &t->bmap[i];
        if (b->id == IG_NO_TOKEN) return IG_NO_TOKEN;
        if (b->tag == tag && b->len == len && memcmp(t->arena + b->off, s, len) == 0) return b->id;
    }
}

/* Looks up an ordinary token's id by its bytes (after ig_tok_index). IG_NO_TOKEN when absent. */
static inline uint32_t ig_tok_lookup(const ig_tokenizer *t, const uint8_t *s, size_t len) {
    return ig_tok_lookup_hashed(t, s, len, ig_tok_hash_bytes(s, len));
}

/* (left, right) in the 16-byte pair table; NULL when absent. */
static inline const ig_pair_slot *ig_pair_find(const ig_tokenizer *t, uint32_t l, uint32_t r) {
    uint64_t key = (uint64_t)l << 32 | r;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->pairs_mask;
    for (;;) {
        const ig_pair_slot *s = &t->pairs[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
        i = (i + 1) & t->pairs_mask;
    }
}

#define IG_PAIR8_ID_LIMIT (((uint32_t)1 << 21) - 1)
#define IG_PAIR8_KEY_MASK (((uint64_t)1 << 42) - 1)

/* The home slot of key (left | right << 21) in the 8-byte pair table of mask + 1 slots. */
static inline size_t ig_pair8_home(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

/* The filter's word for (left, right), and the two bits of it the pair sets. */
static inline uint64_t ig_pair_filter_hash(uint32_t l, uint32_t r) {
    uint64_t key = (uint64_t)l << 32 | r;
    return (key ^ (key >> 29)) * 0xBF58476D1CE4E5B9ull;
}

/* Slot i of whichever pair table holds the pairs (i <= pairs_mask): 0 when empty, else 1 with its
 * left and right ids and its rank. */
static inline int ig_pair_at(const ig_tokenizer *t, size_t i, uint32_t *l, uint32_t *r,
                             uint32_t *rank) {
    if (t->pairs8) {
        uint64_t v = t->pairs8[i];
        if (v == UINT64_MAX) return 0;
        *l = (uint32_t)(v & IG_PAIR8_ID_LIMIT);
        *r = (uint32_t)((v >> 21) & IG_PAIR8_ID_LIMIT);
        *rank = (uint32_t)(v >> 42); /* the merged id, which is the rank */
        return 1;
    }
    const ig_pair_slot *p = &t->pairs[i];
    if (p->key == UINT64_MAX) return 0;
    *l = (uint32_t)(p->key >> 32);
    *r = (uint32_t)p->key;
    *rank = p->rank;
    return 1;
}

/* The priority of merging (left, right) and the merged id (*merged); UINT32_MAX when the pair
 * does not merge. Either table, after ig_tok_finish. */
static inline uint32_t ig_pair_rank(const ig_tokenizer *t, uint32_t l, uint32_t r,
                                    uint32_t *merged) {
    if (t->pair_filter) {
        uint64_t h = ig_pair_filter_hash(l, r);
        uint64_t bits = (1ull << (h & 63)) | (1ull << ((h >> 6) & 63));
        if ((t->pair_filter[h >> (64 - t->pair_filter_bits)] & bits) != bits) {
            *merged = 0;
            return UINT32_MAX;
        }
    }
    if (t->pairs8) {
        uint64_t key = (uint64_t)l | (uint64_t)r << 21;
        size_t i = ig_pair8_home(key, t->pairs_mask);
        for (;;) {
            uint64_t v = t->pairs8[i];
            if ((v & IG_PAIR8_KEY_MASK) == key) { /* an empty slot's key is no pair's */
                *merged = (uint32_t)(v >> 42);
                return *merged;
            }
            if (v == UINT64_MAX) break;
            i = (i + 1) & t->pairs_mask;
        }
        *merged = 0;
        return UINT32_MAX;
    }
    const ig_pair_slot *p = ig_pair_find(t, l, r);
    *merged = p ? p->id : 0;
    return p ? p->rank : UINT32_MAX;
}

#endif
