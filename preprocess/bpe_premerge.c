/* bpe_premerge.c - the merges inside a character made before the merge loop, where that is exact.
 *
 * Text in most scripts but Latin takes two or three bytes a character, and merging a word of it
 * starts with the merges inside each character: Cyrillic 'а' (0xD0 0xB0) is one token long before
 * the word's letters join. On the 96-language UDHR those are half of o200k_base's merge steps.
 * Here a character (a "segment": two or three UTF-8 bytes, or a piece's leading space and the
 * character after it) starts the merge as the tokens BPE makes of it alone (or, for three bytes,
 * after its first merge alone) when the vocabulary shows that BPE of the whole piece passes
 * through that state too. Ids are the same either way; fewer merges are left to make.
 *
 * Why that is exact. Let G0 (g's bytes), G1, ..., Gf be the states BPE of segment g alone passes
 * through. g may start as Gp when every merge up to Gp ranks at most R (the highest of them) and
 * every later one of g above R (nothing is later when p = f), and no pair of the vocabulary joins
 * a token on the left edge of any of G0..Gp to a token ending with the byte before g, nor one on
 * their right edge to a token starting with the byte after g, at rank R or below. In BPE of the
 * piece, then, while g has not reached Gp it has a merge of its own of rank <= R waiting, so every
 * merge made meanwhile ranks <= R; none crosses g's edges (the token beside g, whatever it has
 * grown into, still ends with the byte before g, so those rank above R), and g's own merges come
 * in g's own order. Started from Gp instead, a merge of rank <= R elsewhere is still the lowest
 * (all g offers there ranks above R), and nothing above R is made in the first run before g has
 * reached Gp, when both runs hold the same sequence. So both make the same merges, and the same
 * holds for every segment of the piece, one after the other. (A tie, broken leftmost first,
 * cannot fall between a merge of g and one across its edge: the latter ranks strictly above R.)
 *
 * What the vocabulary says about an edge is gathered once, at load (ig_tok_build_segments): for
 * each token that can be a segment's left edge, every (last byte of a left partner, rank) of its
 * pairs, and for the right edge every (first byte of a right partner, rank). A segment's entry
 * (its states, and which neighbouring bytes allow them) is made the first time a merge meets it
 * and shared by every thread; a thread that finds it being made by another merges the bytes as
 * they are, which gives the same ids.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

#define SEG2      2048 /* two-byte segments: the lead's 5 bits and the continuation's 6 */
#define SEG_COUNT (SEG2 + 65536)

/* A character's entry, three cache lines: what a character inside a piece reads first (its
 * tokens and where they may start), then its first merge alone and where that may start (a
 * three-byte character whose whole merge is ruled out beside these bytes), then a piece's leading
 * space with the character. A byte beside a character indexes a mask as prev_bit / next_bit say:
 * in UTF-8 only an ASCII or a continuation byte comes before a character, and only an ASCII or a
 * lead byte after one; any other byte (invalid UTF-8) never lets it start merged. */
struct ig_seg {
    uint8_t n;    /* tokens of the segment alone; 0: it never starts merged */
    uint8_t n1;   /* tokens after its first merge, when that may start alone; 0: never */
    uint8_t n_sp; /* tokens of ' ' + segment at a piece's start; 0: never */
    uint8_t unused[5];
    uint32_t ids[2];
    uint64_t ok_prev[3], ok_next[3]; /* bit: the tokens may start beside that byte */
    uint32_t ids1[2];
    uint64_t pad1;
    uint64_t ok_prev1[3], ok_next1[3];
    uint32_t sp_ids[3];
    uint32_t pad2;
    uint64_t sp_ok_next[3];
    uint64_t pad3[3];
};
_Static_assert(sizeof(struct ig_seg) == 192 && offsetof(struct ig_seg, ids1) == 64 &&
                   offsetof(struct ig_seg, sp_ids) == 128,
               "a segment's entry is three cache lines");

/* Every segment's slot in index: SEG_EMPTY, SEG_BUILDING, or its entry's number + SEG_FIRST.
 * Entries are taken from one array in the order characters are first met, so a text's few
 * thousand characters share a few hundred pages (indexed by code point, a language's
 * characters would spread over the whole table, a page fault each). */
enum { SEG_EMPTY = 0, SEG_BUILDING = 1, SEG_FIRST = 2 };

struct ig_seg_table {
    /* every token that can be a character's left (side 0) or right (side 1) edge, with the bytes
     * and ranks of its pairs across that edge: token id's records end at edge_off[side][id] */
    uint32_t *edge_off[2];
    uint64_t *edge_rec[2];
    _Atomic uint32_t index[SEG_COUNT];
    _Atomic uint32_t used;  /* entries taken */
    struct ig_seg *entries; /* [SEG_COUNT], on cache lines */
    void *mem;              /* entries' allocation */
};

/* A byte's bit in a mask of the bytes before (after) a character; -1: none (invalid UTF-8). */
static inline int prev_bit(uint8_t b) {
    return b < 0xC0 ? b : -1;
}
static inline int next_bit(uint8_t b) {
    return b < 0x80 ? b : b >= 0xC0 ? b - 0x40 : -1;
}

static inline int is_cont(uint8_t b) {
    return (b & 0xC0) == 0x80;
}

/* The length of the segment a lead byte starts (2 or 3), else 0. */
static inline size_t seg_len(uint8_t b) {
    return b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : 0;
}

/* ---- the edges, at load ------------------------------------------------------------------- */

/* Whether token bytes p[0..n) can be a segment's left edge: a lead byte and up to the rest of its
 * character. */
static int left_edge(const uint8_t *p, size_t n) {
    size_t k = seg_len(p[0]);
    if (k == 0 || n > k) return 0;
    for (size_t i = 1; i < n; i++)
        if (!is_cont(p[i])) return 0;
    return 1;
}

enum { EDGE_LEFT = 1, EDGE_RIGHT = 2 };

typedef struct edge_tmp {
    uint64_t *rec; /* token << 40 | byte << 32 | rank */
    size_t n, cap;
} edge_tmp;

static int edge_add(edge_tmp *e, uint32_t tok, uint8_t byte, uint32_t rank) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 4096;
        uint64_t *r = realloc(e->rec, cap * sizeof *r);
        if (!r) return 0;
        e->rec = r;
        e->cap = cap;
    }
    e->rec[e->n++] = (uint64_t)tok << 40 | (uint64_t)byte << 32 | rank;
    return 1;
}

/* Each side's records grouped by token (a counting sort) into tab (vs: the vocabulary's size). */
static int edge_group(struct ig_seg_table *tab, size_t vs, int side, const edge_tmp *e) {
    uint32_t *off = calloc(vs + 1, sizeof *off);
    uint64_t *rec = malloc((e->n ? e->n : 1) * sizeof *rec);
    if (!off || !rec) {
        free(off);
        free(rec);
        return 0;
    }
    for (size_t i = 0; i < e->n; i++) off[e->rec[i] >> 40]++;
    uint32_t sum = 0;
    for (size_t i = 0; i <= vs; i++) {
        uint32_t c = off[i];
        off[i] = sum;
        sum += c;
    }
    for (size_t i = 0; i < e->n; i++) rec[off[e->rec[i] >> 40]++] = e->rec[i] & 0xFFFFFFFFFFull;
    tab->edge_off[side] = off; /* each start has moved to its token's end */
    tab->edge_rec[side] = rec;
    return 1;
}

ig_status ig_tok_build_segments(ig_tokenizer *t, ig_err *err) {
    size_t vs = t->vocab_size;
    /* per token: which edges it can be, its first and last byte (small arrays the walk over the
     * pair table reads instead of the tokens' bytes) */
    uint8_t *flag = calloc(vs ? vs : 1, 1), *first = calloc(vs ? vs : 1, 1),
            *last = calloc(vs ? vs : 1, 1);
    edge_tmp e[2] = {{0}, {0}};
    /* calloc: the entries' zeroed pages cost nothing until touched */
    struct ig_seg_table *tab = calloc(1, sizeof *tab);
    if (tab) tab->mem = calloc(SEG_COUNT + 1, sizeof *tab->entries);
    int ok = flag && first && last && tab && tab->mem;
    for (size_t id = 0; ok && id < vs; id++) {
        size_t n = t->tok_len[id];
        if (n == IG_NO_TOKEN || n == 0) continue;
        const uint8_t *p = t->arena + t->tok_off[id];
        first[id] = p[0];
        last[id] = p[n - 1];
        flag[id] = (uint8_t)((left_edge(p, n) ? EDGE_LEFT : 0) |
                             (n <= 4 && is_cont(p[n - 1]) ? EDGE_RIGHT : 0));
    }
    size_t cap = t->pairs_mask + 1;
    for (size_t i = 0; ok && i < cap; i++) {
        uint32_t l, r, rank;
        if (!ig_pair_at(t, i, &l, &r, &rank)) continue;
        /* r on a left edge: l ends with the byte before; l on a right edge: r starts with the
         * byte after */
        if ((flag[r] & EDGE_LEFT) && !edge_add(&e[0], r, last[l], rank)) ok = 0;
        if ((flag[l] & EDGE_RIGHT) && !edge_add(&e[1], l, first[r], rank)) ok = 0;
    }
    for (int side = 0; ok && side < 2; side++) ok = edge_group(tab, vs, side, &e[side]);
    if (ok) {
        tab->entries = (struct ig_seg *)(((uintptr_t)tab->mem + 63) & ~(uintptr_t)63);
        t->segs = tab;
    } else if (tab) {
        t->segs = tab; /* freed below with what it holds */
        ig_tok_free_segments(t);
    }
    free(flag);
    free(first);
    free(last);
    free(e[0].rec);
    free(e[1].rec);
    if (!ok) return ig_err_set(err, IG_ERR_NOMEM, "out of memory (segment edges)");
    return IG_OK;
}

void ig_tok_free_segments(ig_tokenizer *t) {
    struct ig_seg_table *tab = t->segs;
    if (!tab) return;
    for (int s = 0; s < 2; s++) {
        free(tab->edge_off[s]);
        free(tab->edge_rec[s]);
    }
    free(tab->mem);
    free(tab);
    t->segs = NULL;
}

/* ---- a segment's entry, on first use ------------------------------------------------------- */

/* Clears in mask the bytes that a pair of token tok on edge side (0: left, 1: right) joins at rank
 * <= max_rank. Token id's records end at off[id] and start at off[id - 1] (0 for id 0): the
 * counting sort left each start at its token's end. */
static void forbid(const ig_tokenizer *t, int side, uint32_t tok, uint32_t max_rank,
                   uint64_t mask[3]) {
    const uint32_t *off = t->segs->edge_off[side];
    const uint64_t *rec = t->segs->edge_rec[side];
    for (uint32_t i = tok ? off[tok - 1] : 0; i < off[tok]; i++) {
        uint8_t b = (uint8_t)(rec[i] >> 32);
        int bit = side == 0 ? prev_bit(b) : next_bit(b);
        if ((uint32_t)rec[i] <= max_rank && bit >= 0) mask[bit >> 6] &= ~(1ull << (bit & 63));
    }
}

/* BPE of a segment alone, every state it passes through. */
typedef struct alone {
    size_t f;          /* merges made */
    uint32_t rank[3];  /* of merge j */
    uint32_t el[4][4]; /* el[j]: the tokens after j merges ... */
    size_t m[4];       /* ... and their count */
} alone;

static void bpe_alone(const ig_tokenizer *t, const uint8_t *g, size_t k, alone *a) {
    a->f = 0;
    a->m[0] = k;
    for (size_t i = 0; i < k; i++) a->el[0][i] = t->byte_id[g[i]];
    for (size_t j = 0; a->m[j] > 1; j++) {
        const uint32_t *el = a->el[j];
        size_t m = a->m[j], at = 0;
        uint32_t best = UINT32_MAX, best_id = 0, merged;
        for (size_t i = 0; i + 1 < m; i++) {
            uint32_t r = ig_pair_rank(t, el[i], el[i + 1], &merged);
            if (r < best) best = r, best_id = merged, at = i;
        }
        if (best == UINT32_MAX) break;
        uint32_t *next = a->el[j + 1];
        for (size_t i = 0, o = 0; i < m; i++) {
            if (i == at + 1) continue;
            next[o++] = i == at ? best_id : el[i];
        }
        a->m[j + 1] = m - 1;
        a->rank[j] = best;
        a->f = j + 1;
    }
}

/* The masks of the bytes beside which states 0..p of a may start merged, all merges up to p
 * ranking at most max_rank: no edge token of those states joins a neighbour ending (starting)
 * with that byte at max_rank or below. ok_prev NULL: the left edge is a piece's start. */
static void edge_masks(const ig_tokenizer *t, const alone *a, size_t p, uint32_t max_rank,
                       uint64_t *ok_prev, uint64_t *ok_next) {
    for (int w = 0; w < 3; w++) {
        if (ok_prev) ok_prev[w] = ~0ull;
        ok_next[w] = ~0ull;
    }
    for (size_t j = 0; j <= p; j++) {
        if (ok_prev && (j == 0 || a->el[j][0] != a->el[j - 1][0]))
            forbid(t, 0, a->el[j][0], max_rank, ok_prev);
        size_t last = a->m[j] - 1;
        if (j == 0 || a->el[j][last] != a->el[j - 1][a->m[j - 1] - 1])
            forbid(t, 1, a->el[j][last], max_rank, ok_next);
    }
}

static uint32_t max_rank_to(const alone *a, size_t p) {
    uint32_t r = 0;
    for (size_t j = 0; j < p; j++)
        if (a->rank[j] > r) r = a->rank[j];
    return r;
}

/* Segment g (k bytes, a lead byte's whole character)'s entry, made if needed; NULL while another
 * thread makes it. Its whole merge, if it makes one; its first merge alone when that ranks below
 * the second (a state the merge of the piece passes through, by the same argument with the first
 * merge's rank: every later merge of g ranks above it); ' ' + g's whole merge. */
static const struct ig_seg *seg_entry(const ig_tokenizer *t, const uint8_t *g, size_t k) {
    size_t idx =
        k == 2 ? ((size_t)(g[0] & 0x1F) << 6 | (g[1] & 0x3F))
               : SEG2 + ((size_t)(g[0] & 0x0F) << 12 | (size_t)(g[1] & 0x3F) << 6 | (g[2] & 0x3F));
    struct ig_seg_table *tab = t->segs;
    _Atomic uint32_t *slot = &tab->index[idx];
    uint32_t v = atomic_load_explicit(slot, memory_order_acquire);
    if (v >= SEG_FIRST) return &tab->entries[v - SEG_FIRST];
    uint32_t expect = SEG_EMPTY;
    if (v != SEG_EMPTY ||
        !atomic_compare_exchange_strong_explicit(slot, &expect, SEG_BUILDING, memory_order_acquire,
                                                 memory_order_acquire))
        return expect >= SEG_FIRST ? &tab->entries[expect - SEG_FIRST] : NULL;
    /* one claim a slot, so never more entries than slots */
    uint32_t no = atomic_fetch_add_explicit(&tab->used, 1, memory_order_relaxed);
    struct ig_seg *e = &tab->entries[no];
    alone a;
    bpe_alone(t, g, k, &a);
    if (a.f > 0) {
        edge_masks(t, &a, a.f, max_rank_to(&a, a.f), e->ok_prev, e->ok_next);
        e->n = (uint8_t)a.m[a.f];
        memcpy(e->ids, a.el[a.f], e->n * sizeof e->ids[0]);
    }
    if (a.f == 2 && a.rank[0] < a.rank[1]) {
        edge_masks(t, &a, 1, a.rank[0], e->ok_prev1, e->ok_next1);
        e->n1 = (uint8_t)a.m[1];
        memcpy(e->ids1, a.el[1], e->n1 * sizeof e->ids1[0]);
    }
    uint8_t sp[4] = {' ', g[0], g[1], k == 3 ? g[2] : 0};
    bpe_alone(t, sp, k + 1, &a);
    if (a.f > 0) {
        edge_masks(t, &a, a.f, max_rank_to(&a, a.f), NULL, e->sp_ok_next);
        e->n_sp = (uint8_t)a.m[a.f];
        memcpy(e->sp_ids, a.el[a.f], e->n_sp * sizeof e->sp_ids[0]);
    }
    atomic_store_explicit(slot, no + SEG_FIRST, memory_order_release);
    return e;
}

static inline int allows(const uint64_t *mask, int bit) {
    return bit >= 0 && (int)((mask[bit >> 6] >> (bit & 63)) & 1);
}

size_t ig_bpe_premerge(const ig_tokenizer *t, const uint8_t *s, size_t n, uint32_t *id,
                       int16_t *byte) {
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        size_t k = seg_len(s[i]);
        if (k && i + k <= n && is_cont(s[i + 1]) && (k == 2 || is_cont(s[i + 2]))) {
            const struct ig_seg *e = seg_entry(t, s + i, k);
            int next_ok = i + k == n;
            if (e && i == 1 && s[0] == ' ' && e->n_sp &&
                (next_ok || allows(e->sp_ok_next, next_bit(s[i + k])))) {
                m = 0; /* the space is the segment's */
                for (size_t j = 0; j < e->n_sp; j++) {
                    if (byte) byte[m] = -1;
                    id[m++] = e->sp_ids[j];
                }
                i += k;
                continue;
            }
            int pb = i == 0 ? -2 : prev_bit(s[i - 1]), nb = next_ok ? -2 : next_bit(s[i + k]);
            const uint32_t *ids = NULL;
            size_t n_ids = 0;
            if (e && e->n && (pb == -2 || allows(e->ok_prev, pb)) &&
                (nb == -2 || allows(e->ok_next, nb)))
                ids = e->ids, n_ids = e->n;
            else if (e && e->n1 && (pb == -2 || allows(e->ok_prev1, pb)) &&
                     (nb == -2 || allows(e->ok_next1, nb)))
                ids = e->ids1, n_ids = e->n1;
            if (ids) {
                for (size_t j = 0; j < n_ids; j++) {
                    if (byte) byte[m] = -1;
                    id[m++] = ids[j];
                }
                i += k;
                continue;
            }
        }
        if (byte) byte[m] = s[i];
        id[m++] = t->byte_id[s[i]];
        i++;
    }
    return m;
}
