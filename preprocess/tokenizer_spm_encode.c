/* tokenizer_spm_encode.c - encoding text with a SentencePiece model, exactly as SentencePiece's
 * Encode gives ids: normalise (tokenizer_spm_norm.c), segment the normalised text, then turn the
 * segments into ids.
 *
 * Unigram models: the Viterbi search of SentencePiece's optimized encoder. From each character
 * start, every piece of the vocabulary that the text continues with is a candidate edge, scored
 * by its log probability (a user-defined piece by length * max_score - 0.1, which makes it win; an
 * unused piece is never an edge); a character that no single piece covers is an unknown edge
 * scored min_score - 10. The best score per end position is kept in float, first found winning
 * ties, with the same evaluation order and float/double arithmetic as SentencePiece (a piece's
 * edge is added in double, an unknown one in float), so that near-ties come out the same: two
 * segmentations of "000" into "0" + "00" and "00" + "0" differ only in rounding.
 *
 * BPE models: the text split into characters (user-defined symbols whole and frozen), then
 * adjacent symbols merged while their concatenation is a piece, the highest score first (leftmost
 * on ties); merges into unused pieces are undone afterwards, as SentencePiece does.
 *
 * Then, as SentencePiece: an unknown segment becomes its <0xNN> byte pieces when the model has
 * byte fallback, and otherwise consecutive unknown segments become one unknown id.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "tokenizer_spm_internal.h"

#define UNK_PENALTY 10.0f /* SentencePiece's kUnkPenalty */

typedef struct bpe_pair {
    float score;
    int32_t left, right;
    uint32_t size;
    int32_t node; /* the merged piece's unit in the pieces trie */
} bpe_pair;

/* The best segmentation of the text up to a position: its score, where its last piece starts
 * (-1: none yet) and that piece's id. */
typedef struct best_node {
    float score;
    int32_t from, id;
} best_node;

typedef struct rev_merge {
    uint32_t start, len, left_len; /* the piece at text[start .. start + len) */
} rev_merge;

struct ig_spm_encoder {
    const ig_spm *m;
    ig_ctx *ctx;
    ig_spm_buf norm; /* the normalised text of the segment being encoded */
    best_node *best; /* unigram: per end position, the best path ending there */
    /* the segmentation: pieces as (start, end, id), in order */
    uint32_t *seg_start, *seg_end;
    int32_t *seg_id;
    size_t n_seg;
    size_t cap; /* of the arrays above: normalised bytes + 1 */
    /* BPE */
    int32_t *sym_prev, *sym_next;
    uint32_t *sym_start, *sym_len;
    uint8_t *sym_freeze;
    int32_t *sym_node; /* the symbol's unit in the pieces trie; -1: no piece starts with it */
    bpe_pair *heap;
    size_t heap_n, heap_cap;
    rev_merge *revs;
    size_t n_revs, revs_cap;
    uint32_t *stack;
    size_t stack_cap;
    size_t *special_at; /* [n_specials] next occurrence during one encode (SIZE_MAX: none) */
};

ig_status ig_spm_encoder_create(ig_spm_encoder **out, const ig_spm *m, ig_ctx *ctx, ig_err *err) {
    *out = NULL;
    ig_spm_encoder *e = ig_calloc(ctx, 1, sizeof *e);
    if (!e) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating an encoder");
    e->m = m;
    e->ctx = ctx;
    e->norm.ctx = ctx;
    e->special_at = ig_calloc(ctx, m->n_specials ? m->n_specials : 1, sizeof *e->special_at);
    if (!e->special_at) {
        ig_spm_encoder_free(e);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating an encoder");
    }
    *out = e;
    return IG_OK;
}

static void free_arrays(ig_spm_encoder *e) {
    ig_ctx *c = e->ctx;
    ig_free(c, e->best);
    ig_free(c, e->seg_start), ig_free(c, e->seg_end), ig_free(c, e->seg_id);
    ig_free(c, e->sym_prev), ig_free(c, e->sym_next), ig_free(c, e->sym_start);
    ig_free(c, e->sym_len), ig_free(c, e->sym_freeze), ig_free(c, e->sym_node);
    e->best = NULL, e->seg_id = e->sym_prev = e->sym_next = e->sym_node = NULL;
    e->seg_start = e->seg_end = e->sym_start = e->sym_len = NULL;
    e->sym_freeze = NULL;
    e->cap = 0;
}

void ig_spm_encoder_free(ig_spm_encoder *e) {
    if (!e) return;
    free_arrays(e);
    ig_free(e->ctx, e->norm.p);
    ig_free(e->ctx, e->heap);
    ig_free(e->ctx, e->revs);
    ig_free(e->ctx, e->stack);
    ig_free(e->ctx, e->special_at);
    ig_free(e->ctx, e);
}

/* Room for a normalised text of n bytes in the per-position arrays. */
static int arrays_reserve(ig_spm_encoder *e, size_t n) {
    if (n + 1 <= e->cap) return 0;
    size_t cap = e->cap ? e->cap : 1024;
    while (cap < n + 1) cap *= 2;
    free_arrays(e);
    ig_ctx *c = e->ctx;
    e->best = ig_alloc(c, cap * sizeof *e->best);
    e->seg_start = ig_alloc(c, cap * sizeof *e->seg_start);
    e->seg_end = ig_alloc(c, cap * sizeof *e->seg_end);
    e->seg_id = ig_alloc(c, cap * sizeof *e->seg_id);
    if (e->m->model_type == IG_SPM_BPE) {
        e->sym_prev = ig_alloc(c, cap * sizeof *e->sym_prev);
        e->sym_next = ig_alloc(c, cap * sizeof *e->sym_next);
        e->sym_start = ig_alloc(c, cap * sizeof *e->sym_start);
        e->sym_len = ig_alloc(c, cap * sizeof *e->sym_len);
        e->sym_freeze = ig_alloc(c, cap);
        e->sym_node = ig_alloc(c, cap * sizeof *e->sym_node);
    }
    if (!e->best || !e->seg_start || !e->seg_end || !e->seg_id ||
        (e->m->model_type == IG_SPM_BPE && (!e->sym_prev || !e->sym_next || !e->sym_start ||
                                            !e->sym_len || !e->sym_freeze || !e->sym_node))) {
        free_arrays(e);
        return -1;
    }
    e->cap = cap;
    return 0;
}

/* ---- unigram ----------------------------------------------------------------------------------
 */

static void unigram_segment(ig_spm_encoder *e, const uint8_t *s, size_t n) {
    const ig_spm *m = e->m;
    const ig_spm_unit *u = m->viterbi.u;
    const uint32_t nu = m->viterbi.n;
    const float unk_score = m->min_score - UNK_PENALTY;
    best_node *b = e->best;
    for (size_t i = 0; i <= n; i++) b[i].from = -1;
    b[0].score = 0;
    for (size_t pos = 0; pos < n;) {
        const float till = b[pos].from >= 0 || pos == 0 ? b[pos].score : 0.0f;
        size_t mblen = ig_spm_char_len(s[pos]);
        if (mblen > n - pos) mblen = n - pos;
        int single = 0;
        uint32_t cur = 0;
        for (size_t k = pos; k < n; k++) {
            uint32_t next = (uint32_t)(u[cur].base + (int32_t)s[k]);
            if (next >= nu || u[next].check != (int32_t)cur) break;
            cur = next;
            int32_t v = u[cur].value;
            if (v == -1) continue;
            size_t end = k + 1, length = end - pos;
            /* SentencePiece's score is `user ? length * max_score - 0.1 : piece score`: a
             * double either way (the conditional's common type), and so is the sum */
            double sc = v >= 0 ? (double)u[cur].score
                               : (double)((float)length * m->max_score) - 0.1; /* user-defined */
            double cand = sc + (double)till;
            if (b[end].from < 0 || cand > (double)b[end].score) {
                b[end].score = (float)cand;
                b[end].from = (int32_t)pos;
                b[end].id = v >= 0 ? v : -2 - v;
            }
            if (length == mblen) single = 1;
        }
        if (!single) {
            size_t end = pos + mblen;
            float cand = unk_score + till;
            if (b[end].from < 0 || cand > b[end].score) {
                b[end].score = cand;
                b[end].from = (int32_t)pos;
                b[end].id = m->unk_id;
            }
        }
        pos += mblen;
    }
    /* back from the end, then in order */
    size_t k = 0;
    for (size_t end = n; end > 0; end = (size_t)b[end].from) k++;
    e->n_seg = k;
    for (size_t end = n; end > 0; end = (size_t)b[end].from) {
        k--;
        e->seg_end[k] = (uint32_t)end;
        e->seg_start[k] = (uint32_t)b[end].from;
        e->seg_id[k] = b[end].id;
    }
}

/* ---- BPE ------------------------------------------------------------------------------------- */

/* a before b in the agenda: higher score, then the leftmost */
static inline int pair_before(const bpe_pair *a, const bpe_pair *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int heap_push(ig_spm_encoder *e, bpe_pair p) {
    if (e->heap_n == e->heap_cap) {
        size_t cap = e->heap_cap ? 2 * e->heap_cap : 1024;
        bpe_pair *h = ig_realloc(e->ctx, e->heap, cap * sizeof *h);
        if (!h) return -1;
        e->heap = h;
        e->heap_cap = cap;
    }
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &e->heap[parent])) break;
        e->heap[i] = e->heap[parent];
        i = parent;
    }
    e->heap[i] = p;
    return 0;
}

static bpe_pair heap_pop(ig_spm_encoder *e) {
    bpe_pair top = e->heap[0], x = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_before(&e->heap[c + 1], &e->heap[c])) c++;
        if (!pair_before(&e->heap[c], &x)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n) e->heap[i] = x;
    return top;
}

/* The pair (left, right) of adjacent symbols, when their concatenation is a piece. */
static int maybe_add_pair(ig_spm_encoder *e, const uint8_t *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0 || e->sym_freeze[left] || e->sym_freeze[right]) return 0;
    const ig_spm *m = e->m;
    uint32_t start = e->sym_start[left], size = e->sym_len[left] + e->sym_len[right];
    /* the concatenation in the trie: from the left symbol's unit on, over the right's bytes */
    int32_t node = e->sym_node[left];
    if (node < 0) return 0; /* no piece starts with the left symbol */
    const ig_spm_unit *u = m->pieces.u;
    for (uint32_t k = e->sym_start[right], end = k + e->sym_len[right]; k < end; k++) {
        uint32_t next = (uint32_t)(u[node].base + (int32_t)s[k]);
        if (next >= m->pieces.n || u[next].check != node) return 0;
        node = (int32_t)next;
    }
    int32_t id = u[node].value;
    if (id < 0) return 0;
    if (heap_push(e, (bpe_pair){u[node].score, left, right, size, node}) != 0) return -1;
    if (m->type[id] == IG_SPM_UNUSED) { /* remembered to undo it afterwards */
        if (e->n_revs == e->revs_cap) {
            size_t cap = e->revs_cap ? 2 * e->revs_cap : 64;
            rev_merge *r = ig_realloc(e->ctx, e->revs, cap * sizeof *r);
            if (!r) return -1;
            e->revs = r;
            e->revs_cap = cap;
        }
        e->revs[e->n_revs++] = (rev_merge){start, size, e->sym_len[left]};
    }
    return 0;
}

/* The last split recorded for a piece with the bytes s[start .. start + len) (SentencePiece keeps
 * one per string: the last), or NULL. */
static const rev_merge *find_rev(const ig_spm_encoder *e, const uint8_t *s, uint32_t start,
                                 uint32_t len) {
    for (size_t i = e->n_revs; i-- > 0;) {
        const rev_merge *r = &e->revs[i];
        if (r->len == len && memcmp(s + r->start, s + start, len) == 0) return r;
    }
    return NULL;
}

static int push_seg(ig_spm_encoder *e, uint32_t start, uint32_t end, int32_t id) {
    if (e->n_seg == e->cap) return -1; /* cannot happen: at most one segment per byte */
    e->seg_start[e->n_seg] = start;
    e->seg_end[e->n_seg] = end;
    e->seg_id[e->n_seg] = id;
    e->n_seg++;
    return 0;
}

/* Emits the segment s[start .. start + len), undoing merges into unused pieces. */
static int resegment(ig_spm_encoder *e, const uint8_t *s, uint32_t start, uint32_t len) {
    const ig_spm *m = e->m;
    size_t sp = 0;
    if (e->stack_cap < 2) {
        uint32_t *st = ig_realloc(e->ctx, e->stack, 64 * sizeof *st);
        if (!st) return -1;
        e->stack = st;
        e->stack_cap = 64;
    }
    e->stack[sp++] = start, e->stack[sp++] = len;
    while (sp) {
        uint32_t l = e->stack[--sp], st = e->stack[--sp];
        int32_t id = ig_spm_piece_to_id(m, s + st, l);
        const rev_merge *r = m->type[id] == IG_SPM_UNUSED ? find_rev(e, s, st, l) : NULL;
        if (!r) {
            if (push_seg(e, st, st + l, id) != 0) return -1;
            continue;
        }
        if (sp + 4 > e->stack_cap) {
            uint32_t *ns = ig_realloc(e->ctx, e->stack, 2 * e->stack_cap * sizeof *ns);
            if (!ns) return -1;
            e->stack = ns;
            e->stack_cap *= 2;
        }
        /* right pushed first: the left is emitted first */
        e->stack[sp++] = st + r->left_len, e->stack[sp++] = l - r->left_len;
        e->stack[sp++] = st, e->stack[sp++] = r->left_len;
    }
    return 0;
}

static int bpe_segment(ig_spm_encoder *e, const uint8_t *s, size_t n) {
    const ig_spm *m = e->m;
    size_t ns = 0;
    for (size_t i = 0; i < n; ns++) {
        size_t l = ig_spm_user_match(&m->user, s + i, n - i);
        e->sym_freeze[ns] = l > 0;
        if (!l) {
            l = ig_spm_char_len(s[i]);
            if (l > n - i) l = n - i;
        }
        e->sym_start[ns] = (uint32_t)i;
        e->sym_len[ns] = (uint32_t)l;
        int32_t node = 0; /* the symbol's unit in the pieces trie */
        for (size_t k = i; k < i + l && node >= 0; k++) {
            uint32_t next = (uint32_t)(m->pieces.u[node].base + (int32_t)s[k]);
            node = next < m->pieces.n && m->pieces.u[next].check == node ? (int32_t)next : -1;
        }
        e->sym_node[ns] = node;
        e->sym_prev[ns] = (int32_t)ns - 1;
        i += l;
        e->sym_next[ns] = i < n ? (int32_t)ns + 1 : -1;
    }
    e->heap_n = 0;
    e->n_revs = 0;
    e->n_seg = 0;
    if (ns == 0) return 0;
    for (size_t i = 1; i < ns; i++)
        if (maybe_add_pair(e, s, (int32_t)i - 1, (int32_t)i) != 0) return -1;
    while (e->heap_n) {
        bpe_pair top = heap_pop(e);
        int32_t l = top.left, r = top.right;
        if (e->sym_len[l] == 0 || e->sym_len[r] == 0 || e->sym_len[l] + e->sym_len[r] != top.size)
            continue; /* stale: one of them was merged since */
        e->sym_len[l] += e->sym_len[r];
        e->sym_node[l] = top.node;
        e->sym_next[l] = e->sym_next[r];
        if (e->sym_next[r] >= 0) e->sym_prev[e->sym_next[r]] = l;
        e->sym_len[r] = 0;
        if (maybe_add_pair(e, s, e->sym_prev[l], l) != 0 ||
            maybe_add_pair(e, s, l, e->sym_next[l]) != 0)
            return -1;
    }
    for (int32_t i = 0; i != -1; i = e->sym_next[i])
        if (resegment(e, s, e->sym_start[i], e->sym_len[i]) != 0) return -1;
    return 0;
}

/* ---- ids --------------------------------------------------------------------------------------
 */

/* The segments as ids: unknown ones as byte pieces (byte fallback) or merged when consecutive. */
static int emit_ids(ig_spm_encoder *e, const uint8_t *s, ig_tokens *out) {
    const ig_spm *m = e->m;
    int prev_unk = 0;
    for (size_t k = 0; k < e->n_seg; k++) {
        int32_t id = e->seg_id[k];
        int unk = m->type[id] == IG_SPM_UNKNOWN;
        if (unk && m->byte_fallback) {
            for (uint32_t b = e->seg_start[k]; b < e->seg_end[k]; b++)
                if (ig_tokens_push(out, m->byte_id[s[b]]) != IG_OK) return -1;
        } else if (!(unk && prev_unk)) {
            if (ig_tokens_push(out, id) != IG_OK) return -1;
        }
        prev_unk = unk;
    }
    return 0;
}

/* Encodes one piece of text (no special tokens in it). */
static int encode_text(ig_spm_encoder *e, const uint8_t *text, size_t len, ig_tokens *out) {
    const ig_spm *m = e->m;
    if (len == 0) return 0;
    if (ig_spm_normalize(&m->norm, &m->user, m->ws_suffix, text, len, &e->norm) != 0) return -1;
    size_t n = e->norm.n;
    if (n == 0) return 0;
    if (n > INT32_MAX - 1 || arrays_reserve(e, n) != 0) return -1;
    if (m->model_type == IG_SPM_BPE) {
        if (bpe_segment(e, e->norm.p, n) != 0) return -1;
    } else {
        unigram_segment(e, e->norm.p, n);
    }
    if (ig_tokens_reserve(out, out->n + e->n_seg) != IG_OK) return -1;
    return emit_ids(e, e->norm.p, out);
}

ig_status ig_spm_encode(ig_spm_encoder *e, const char *text, size_t len, int flags, ig_tokens *out,
                        ig_err *err) {
    const ig_spm *m = e->m;
    const uint8_t *s = (const uint8_t *)text;
    int r = 0;
    if (!(flags & IG_ENCODE_ALLOW_SPECIAL) || m->n_specials == 0) {
        r = encode_text(e, s, len, out);
    } else {
        /* the control and unknown pieces' strings are their ids; the text between them is
         * encoded piece by piece (leftmost first, the longest where several start together) */
        for (size_t k = 0; k < m->n_specials; k++) {
            uint32_t id = m->specials[k];
            const uint8_t *f = memmem(s, len, m->arena + m->off[id], m->len[id]);
            e->special_at[k] = f ? (size_t)(f - s) : SIZE_MAX;
        }
        size_t pos = 0;
        for (;;) {
            size_t best = SIZE_MAX, best_k = 0;
            for (size_t k = 0; k < m->n_specials; k++) {
                uint32_t id = m->specials[k];
                if (e->special_at[k] < pos) { /* overlapped by the last match: search again */
                    const uint8_t *f =
                        memmem(s + pos, len - pos, m->arena + m->off[id], m->len[id]);
                    e->special_at[k] = f ? (size_t)(f - s) : SIZE_MAX;
                }
                /* specials are sorted longest first: the first at a position is the longest */
                if (e->special_at[k] < best) best = e->special_at[k], best_k = k;
            }
            size_t seg_end = best == SIZE_MAX ? len : best;
            if ((r = encode_text(e, s + pos, seg_end - pos, out)) != 0 || best == SIZE_MAX) break;
            uint32_t id = m->specials[best_k];
            if ((r = ig_tokens_push(out, (int32_t)id) != IG_OK ? -1 : 0) != 0) break;
            pos = best + m->len[id];
        }
    }
    if (r != 0) return ig_err_set(err, IG_ERR_NOMEM, "out of memory encoding %zu bytes", len);
    return IG_OK;
}
