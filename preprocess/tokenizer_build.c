/* tokenizer_build.c - building the in-memory tokenizer (tokenizer_internal.h) that every loader
 * fills: tokens by id, the bytes -> id map, the merge pair table, and the final checks, hash and
 * whole-piece flags. The loaders (tokenizer_hf.c, tokenizer_tiktoken.c) call in here; nothing
 * here calls a loader.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tokenizer_internal.h"
#include "tokenizer_spm_internal.h"

/* A table probed at random (the bytes -> id map, the pair table: tens of MB for the tiktoken
 * encodings), on 2 MB pages where the kernel gives them (Linux's transparent huge pages in their
 * madvise mode): with 4 KB pages nearly every probe also misses the TLB, and a page walk under
 * virtualisation costs several memory accesses more. Freed with free(). */
static void *big_table(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    if (bytes < huge) return malloc(bytes);
    void *p = NULL;
    if (posix_memalign(&p, huge, (bytes + huge - 1) & ~(huge - 1)) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, (bytes + huge - 1) & ~(huge - 1), MADV_HUGEPAGE); /* a hint: may fail */
#endif
    return p;
}

/* ---- building ------------------------------------------------------------------------------ */

ig_status ig_tok_begin(ig_tokenizer **out, ig_ctx *ctx, ig_pattern pattern, int from_ranks,
                       ig_err *err) {
    *out = NULL;
    ig_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return ig_err_set(err, IG_ERR_NOMEM, "out of memory loading a tokenizer");
    t->ctx = ctx;
    t->pattern = pattern;
    t->from_ranks = from_ranks;
    t->eod = -1;
    snprintf(t->name, sizeof t->name, "%s", ig_pattern_name(pattern));
    ig_status st = ig_pretok_init(&t->pt, pattern, err);
    if (st != IG_OK) {
        free(t);
        return st;
    }
    *out = t;
    return IG_OK;
}

static ig_status grow_ids(ig_tokenizer *t, size_t need, ig_err *err) {
    if (need <= t->vocab_size) return IG_OK;
    size_t cap = t->vocab_size ? t->vocab_size : 1024;
    while (cap < need) cap *= 2;
    uint32_t *off = realloc(t->tok_off, cap * sizeof *off);
    if (off) t->tok_off = off;
    uint32_t *len = realloc(t->tok_len, cap * sizeof *len);
    if (len) t->tok_len = len;
    uint8_t *sp = realloc(t->is_special, cap);
    if (sp) t->is_special = sp;
    if (!off || !len || !sp) return ig_err_set(err, IG_ERR_NOMEM, "out of memory (vocabulary)");
    for (size_t i = t->vocab_size; i < cap; i++) t->tok_len[i] = IG_NO_TOKEN, t->is_special[i] = 0;
    t->vocab_size = cap; /* trimmed to max id + 1 in ig_tok_finish */
    return IG_OK;
}

ig_status ig_tok_set(ig_tokenizer *t, uint32_t id, const void *bytes, size_t len, int special,
                     const char *where, ig_err *err) {
    if (id >= IG_TOK_ID_LIMIT)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: token id %u is out of range", where, id);
    if (len == 0 || len > (1u << 20))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: token %u has %s bytes", where, id,
                          len ? "too many" : "no");
    ig_status st = grow_ids(t, (size_t)id + 1, err);
    if (st != IG_OK) return st;
    if (t->tok_len[id] != IG_NO_TOKEN)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: token id %u is defined twice", where, id);
    if (t->arena_len + len > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap * 2 : 1 << 20;
        while (cap < t->arena_len + len) cap *= 2;
        if (cap > UINT32_MAX)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: vocabulary too large", where);
        uint8_t *a = realloc(t->arena, cap);
        if (!a) return ig_err_set(err, IG_ERR_NOMEM, "out of memory (vocabulary)");
        t->arena = a;
        t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, bytes, len);
    t->tok_off[id] = (uint32_t)t->arena_len;
    t->tok_len[id] = (uint32_t)len;
    t->is_special[id] = (uint8_t)(special != 0);
    t->arena_len += len;
    return IG_OK;
}

ig_status ig_tok_index(ig_tokenizer *t, const char *where, ig_err *err) {
    size_t n = 0;
    for (size_t id = 0; id < t->vocab_size; id++)
        if (t->tok_len[id] != IG_NO_TOKEN && !t->is_special[id]) n++;
    size_t cap = 1024;
    while (cap < 2 * n) cap *= 2;
    free(t->bmap);
    t->bmap = big_table(cap * sizeof *t->bmap);
    if (!t->bmap) return ig_err_set(err, IG_ERR_NOMEM, "out of memory (vocabulary index)");
    memset(t->bmap, 0xFF, cap * sizeof *t->bmap);
    t->bmap_mask = cap - 1;
    for (size_t id = 0; id < t->vocab_size; id++) {
        if (t->tok_len[id] == IG_NO_TOKEN || t->is_special[id]) continue;
        const uint8_t *b = t->arena + t->tok_off[id];
        uint32_t len = t->tok_len[id];
        uint32_t dup = ig_tok_lookup(t, b, len);
        if (dup != IG_NO_TOKEN)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: tokens %u and %zu have the same bytes",
                              where, dup, id);
        uint64_t h = ig_tok_hash_bytes(b, len);
        size_t i = (size_t)h & t->bmap_mask;
        while (t->bmap[i].id != IG_NO_TOKEN) i = (i + 1) & t->bmap_mask;
        t->bmap[i] = (ig_bmap_slot){(uint32_t)id, (uint32_t)(h >> 32), len, t->tok_off[id]};
    }
    return IG_OK;
}

static ig_status pairs_reserve(ig_tokenizer *t, size_t n, ig_err *err) {
    size_t cap = 1024;
    while (cap < 2 * n) cap *= 2;
    if (t->pairs && cap <= t->pairs_mask + 1) return IG_OK;
    ig_pair_slot *old = t->pairs;
    size_t old_cap = old ? t->pairs_mask + 1 : 0;
    t->pairs = big_table(cap * sizeof *t->pairs);
    if (!t->pairs) {
        t->pairs = old;
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory (merge table)");
    }
    memset(t->pairs, 0xFF, cap * sizeof *t->pairs);
    t->pairs_mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].key == UINT64_MAX) continue;
        size_t j = (size_t)((old[i].key * 0x9E3779B97F4A7C15ull) >> 20) & t->pairs_mask;
        while (t->pairs[j].key != UINT64_MAX) j = (j + 1) & t->pairs_mask;
        t->pairs[j] = old[i];
    }
    free(old);
    return IG_OK;
}

ig_status ig_tok_add_pair(ig_tokenizer *t, uint32_t left, uint32_t right, uint32_t rank,
                          uint32_t merged, ig_err *err) {
    if (!t->pairs || 2 * (t->n_pairs + 1) > t->pairs_mask + 1) {
        ig_status st = pairs_reserve(t, t->n_pairs ? 2 * t->n_pairs : 65536, err);
        if (st != IG_OK) return st;
    }
    uint64_t key = (uint64_t)left << 32 | right;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->pairs_mask;
    for (;; i = (i + 1) & t->pairs_mask) {
        if (t->pairs[i].key == key) return IG_OK; /* the first (lowest) priority wins */
        if (t->pairs[i].key == UINT64_MAX) break;
    }
    t->pairs[i].key = key;
    t->pairs[i].rank = rank;
    t->pairs[i].id = merged;
    t->n_pairs++;
    return IG_OK;
}

ig_status ig_tok_pairs_from_ranks(ig_tokenizer *t, ig_err *err) {
    for (size_t id = 0; id < t->vocab_size; id++) {
        uint32_t len = t->tok_len[id];
        if (len == IG_NO_TOKEN || len < 2 || t->is_special[id]) continue;
        const uint8_t *b = t->arena + t->tok_off[id];
        for (uint32_t k = 1; k < len; k++) {
            uint32_t l = ig_tok_lookup(t, b, k);
            if (l == IG_NO_TOKEN) continue;
            uint32_t r = ig_tok_lookup(t, b + k, len - k);
            if (r == IG_NO_TOKEN) continue;
            ig_status st = ig_tok_add_pair(t, l, r, (uint32_t)id, (uint32_t)id, err);
            if (st != IG_OK) return st;
        }
    }
    return IG_OK;
}

/* The meaning of the ids: every id's bytes and whether it is special. Not the merges, the
 * pattern or the name: shards whose ids mean the same bytes can be merged and blended, whichever
 * file form (tokenizer.json, vocab.json + merges.txt, r50k_base.tiktoken) made them. */
static void compute_hash(ig_tokenizer *t) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return;
    XXH3_64bits_reset(h);
    const char *magic = "ingot-vocab-1";
    XXH3_64bits_update(h, magic, strlen(magic));
    uint32_t vs = (uint32_t)t->vocab_size;
    XXH3_64bits_update(h, &vs, sizeof vs);
    for (size_t id = 0; id < t->vocab_size; id++) {
        uint32_t rec[3] = {(uint32_t)id, t->tok_len[id], t->is_special[id]};
        XXH3_64bits_update(h, rec, sizeof rec);
        if (t->tok_len[id] != IG_NO_TOKEN)
            XXH3_64bits_update(h, t->arena + t->tok_off[id], t->tok_len[id]);
    }
    t->hash = XXH3_64bits_digest(h);
    XXH3_freeState(h);
}

/* The pair table in 8-byte entries (tokenizer_internal.h: pairs8) where every merged id is its
 * pair's rank and every id of the vocabulary (any the encoder may look up) fits in 21 bits;
 * otherwise it stays as it is. */
static ig_status compact_pairs(ig_tokenizer *t, ig_err *err) {
    if (t->vocab_size >= IG_PAIR8_ID_LIMIT) return IG_OK;
    size_t cap = t->pairs_mask + 1;
    for (size_t i = 0; i < cap; i++) {
        const ig_pair_slot *p = &t->pairs[i];
        if (p->key == UINT64_MAX) continue;
        if (p->rank != p->id || p->id >= IG_PAIR8_ID_LIMIT || (p->key >> 32) >= IG_PAIR8_ID_LIMIT ||
            (uint32_t)p->key >= IG_PAIR8_ID_LIMIT)
            return IG_OK;
    }
    size_t cap8 = 1024; /* at most 7/8 full */
    while (cap8 / 8 * 7 < t->n_pairs) cap8 *= 2;
    size_t mask8 = cap8 - 1;
    uint64_t *p8 = big_table(cap8 * sizeof *p8);
    if (!p8) return ig_err_set(err, IG_ERR_NOMEM, "out of memory (merge table)");
    memset(p8, 0xFF, cap8 * sizeof *p8);
    for (size_t i = 0; i < cap; i++) {
        const ig_pair_slot *p = &t->pairs[i];
        if (p->key == UINT64_MAX) continue;
        uint64_t key = (p->key >> 32) | (uint64_t)(uint32_t)p->key << 21;
        size_t j = ig_pair8_home(key, mask8);
        while (p8[j] != UINT64_MAX) j = (j + 1) & mask8;
        p8[j] = key | (uint64_t)p->id << 42;
    }
    t->pairs_mask = mask8;
    free(t->pairs);
    t->pairs = NULL;
    t->pairs8 = p8;
    return IG_OK;
}

/* The filter of the pairs that merge (tokenizer_internal.h: pair_filter), over whichever table
 * holds them. */
static ig_status build_pair_filter(ig_tokenizer *t, ig_err *err) {
    unsigned bits = 6;
    while (bits < 16 && ((size_t)1 << bits) < t->n_pairs / 4) bits++;
    uint64_t *f = big_table(sizeof *f << bits);
    if (!f) return ig_err_set(err, IG_ERR_NOMEM, "out of memory (merge filter)");
    memset(f, 0, sizeof *f << bits);
    size_t cap = t->pairs_mask + 1;
    for (size_t i = 0; i < cap; i++) {
        uint32_t l, r, rank;
        if (!ig_pair_at(t, i, &l, &r, &rank)) continue;
        uint64_t h = ig_pair_filter_hash(l, r);
        f[h >> (64 - bits)] |= (1ull << (h & 63)) | (1ull << ((h >> 6) & 63));
    }
    t->pair_filter = f;
    t->pair_filter_bits = bits;
    return IG_OK;
}

ig_status ig_tok_finish(ig_tokenizer *t, const char *where, ig_err *err) {
    size_t vs = t->vocab_size;
    while (vs > 0 && t->tok_len[vs - 1] == IG_NO_TOKEN) vs--;
    t->vocab_size = vs;
    if (!t->bmap) {
        ig_status st = ig_tok_index(t, where, err);
        if (st != IG_OK) return st;
    }
    if (!t->pairs) {
        ig_status st = pairs_reserve(t, 1, err);
        if (st != IG_OK) return st;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        t->byte_id[b] = ig_tok_lookup(t, &byte, 1);
        if (t->byte_id[b] == IG_NO_TOKEN)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: the vocabulary has no token for byte 0x%02X; a byte-level BPE "
                              "vocabulary needs all 256 single bytes",
                              where, b);
    }
    t->byte_pairs = malloc(65536 * sizeof *t->byte_pairs);
    if (!t->byte_pairs) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t ab = 0; ab < 65536; ab++) {
        const ig_pair_slot *p = ig_pair_find(t, t->byte_id[ab >> 8], t->byte_id[ab & 255]);
        t->byte_pairs[ab] = p ? (uint64_t)p->rank << 32 | p->id : UINT64_MAX;
    }
    ig_status pst = compact_pairs(t, err);
    if (pst == IG_OK) pst = build_pair_filter(t, err);
    if (pst != IG_OK) return pst;
    size_t n_sp = 0;
    for (size_t id = 0; id < vs; id++) n_sp += t->is_special[id];
    t->specials = calloc(n_sp ? n_sp : 1, sizeof *t->specials);
    t->whole_ok = calloc(vs ? vs : 1, 1);
    if (!t->specials || !t->whole_ok) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t id = 0; id < vs; id++) {
        if (!t->is_special[id]) continue;
        ig_special_tok *s = &t->specials[t->n_specials++];
        s->id = (uint32_t)id;
        s->bytes = t->arena + t->tok_off[id];
        s->len = t->tok_len[id];
        if (s->len == 13 && memcmp(s->bytes, "<|endoftext|>", 13) == 0) t->eod = (int32_t)id;
    }
    /* Whole-piece lookup: tiktoken's rule for ranks; for merges only where BPE agrees. */
    ig_bpe_scratch sc = {0};
    for (size_t id = 0; id < vs; id++) {
        if (t->tok_len[id] == IG_NO_TOKEN || t->is_special[id]) continue;
        if (t->from_ranks || t->tok_len[id] == 1) {
            t->whole_ok[id] = 1;
            continue;
        }
        const uint32_t *ids;
        size_t n = ig_bpe_merge(t, &sc, t->arena + t->tok_off[id], t->tok_len[id], &ids);
        if (n == 0) {
            ig_bpe_scratch_free(&sc);
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        }
        t->whole_ok[id] = (n == 1 && ids[0] == id);
    }
    ig_bpe_scratch_free(&sc);
    compute_hash(t);
    return ig_tok_build_segments(t, err);
}

void ig_tokenizer_free(ig_tokenizer *t) {
    if (!t) return;
    ig_spm_free(t->spm);
    ig_pretok_free(&t->pt);
    free(t->arena);
    free(t->tok_off);
    free(t->tok_len);
    free(t->whole_ok);
    free(t->byte_pairs);
    free(t->is_special);
    free(t->bmap);
    free(t->pairs);
    free(t->pairs8);
    free(t->pair_filter);
    ig_tok_free_segments(t);
    free(t->specials);
    free(t);
}
