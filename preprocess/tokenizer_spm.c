/* tokenizer_spm.c - SentencePiece models: the piece table, the checks SentencePiece makes when it
 * loads a model, the tries the encoders search, the model's identity (name, end-of-sequence id,
 * hash), and decoding ids back to text as SentencePiece's DecodeIds does.
 *
 * The pieces are split as SentencePiece splits them: NORMAL, USER_DEFINED and UNUSED pieces are
 * what text can be segmented into (the `pieces` trie; UNUSED ones are skipped by the search);
 * CONTROL, UNKNOWN and BYTE pieces are reserved (never matched in text; <0xNN> bytes come only from
 * byte fallback). USER_DEFINED pieces also form the normaliser's prefix matcher, which keeps them
 * out of normalisation.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "tokenizer_internal.h"
#include "tokenizer_spm_internal.h"

/* ---- the double-array trie ----------------------------------------------------------------- */

typedef struct trie_key {
    const uint8_t *p;
    uint32_t len;
    int32_t value, index;
    float score;
} trie_key;

static int key_cmp(const void *a, const void *b) {
    const trie_key *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

typedef struct trie_job {
    uint32_t node, lo, hi, depth;
} trie_job;

/* The units being placed, with a doubly linked list of the free ones (check -1), so that finding
 * room for a node's children visits free units only. */
typedef struct trie_units {
    ig_spm_unit *u;
    int32_t *next_free, *prev_free; /* -1: none */
    size_t cap;
    int32_t head, tail; /* of the free list; -1: empty */
} trie_units;

/* Grows to at least need units; the new ones are free, at the end of the list. */
static int units_grow(trie_units *t, size_t need) {
    if (need <= t->cap) return 0;
    size_t c = t->cap ? t->cap : 1024;
    while (c < need) c *= 2;
    if (c > (size_t)INT32_MAX) return -1;
    ig_spm_unit *nu = realloc(t->u, c * sizeof *nu);
    if (nu) t->u = nu;
    int32_t *nf = realloc(t->next_free, c * sizeof *nf);
    if (nf) t->next_free = nf;
    int32_t *pf = realloc(t->prev_free, c * sizeof *pf);
    if (pf) t->prev_free = pf;
    if (!nu || !nf || !pf) return -1;
    for (size_t i = t->cap; i < c; i++) {
        t->u[i] = (ig_spm_unit){0, -1, -1, 0.0f};
        t->prev_free[i] = t->tail;
        t->next_free[i] = -1;
        if (t->tail >= 0)
            t->next_free[t->tail] = (int32_t)i;
        else
            t->head = (int32_t)i;
        t->tail = (int32_t)i;
    }
    t->cap = c;
    return 0;
}

static void units_take(trie_units *t, size_t i, int32_t check) {
    int32_t p = t->prev_free[i], n = t->next_free[i];
    if (p >= 0)
        t->next_free[p] = n;
    else
        t->head = n;
    if (n >= 0)
        t->prev_free[n] = p;
    else
        t->tail = p;
    t->u[i].check = check;
}

ig_status ig_spm_trie_build(ig_spm_trie *t, const uint8_t *arena, const uint32_t *off,
                            const uint32_t *len, const uint8_t *take, const int32_t *values,
                            const float *scores, size_t n, ig_err *err) {
    t->u = NULL;
    t->n = 0;
    size_t nk = 0;
    for (size_t i = 0; i < n; i++) nk += !take || take[i];
    if (nk == 0) return IG_OK;
    trie_key *k = malloc(nk * sizeof *k);
    trie_job *q = NULL;
    trie_units tu = {NULL, NULL, NULL, 0, -1, -1};
    size_t qcap = 0, qn = 0, qh = 0, used = 1;
    ig_status st = IG_OK;
    if (!k) goto nomem;
    nk = 0;
    for (size_t i = 0; i < n; i++)
        if (!take || take[i])
            k[nk++] = (trie_key){arena + off[i], len[i], values ? values[i] : (int32_t)i,
                                 (int32_t)i, scores ? scores[i] : 0.0f};
    qsort(k, nk, sizeof *k, key_cmp);
    for (size_t i = 1; i < nk; i++)
        if (key_cmp(&k[i - 1], &k[i]) == 0) {
            st = ig_err_set(err, IG_ERR_FORMAT, "pieces %d and %d are the same string",
                            k[i - 1].index < k[i].index ? k[i - 1].index : k[i].index,
                            k[i - 1].index < k[i].index ? k[i].index : k[i - 1].index);
            goto done;
        }
    if (units_grow(&tu, 1024) != 0) goto nomem;
    units_take(&tu, 0, -2); /* the root */
    qcap = 1024;
    if (!(q = malloc(qcap * sizeof *q))) goto nomem;
    q[qn++] = (trie_job){0, 0, (uint32_t)nk, 0};
    while (qh < qn) {
        trie_job j = q[qh++];
        uint32_t lo = j.lo;
        if (k[lo].len == j.depth) { /* the key ending here */
            tu.u[j.node].value = k[lo].value;
            tu.u[j.node].score = k[lo].score;
            lo++;
        }
        if (lo == j.hi) continue;
        /* the children's labels: the bytes at depth over the (sorted) keys */
        int labels[256], nl = 0;
        for (uint32_t i = lo; i < j.hi; i++) {
            int c = k[i].p[j.depth];
            if (nl == 0 || labels[nl - 1] != c) labels[nl++] = c;
        }
        /* the first free unit p for the first child at which every child's unit is free */
        int32_t base = 0;
        for (int32_t p = tu.head;; p = tu.next_free[p]) {
            if (p < 0) { /* no room: more units (they join the list's end) */
                size_t old = tu.cap;
                if (units_grow(&tu, tu.cap + 256) != 0) goto nomem;
                p = (int32_t)old;
            }
            if (p < labels[0]) continue;
            base = p - labels[0];
            if (units_grow(&tu, (size_t)base + 257) != 0) goto nomem;
            int ok = 1;
            for (int l = 1; l < nl && ok; l++) ok = tu.u[base + labels[l]].check == -1;
            if (ok) break;
        }
        tu.u[j.node].base = base;
        for (int l = 0; l < nl; l++) {
            size_t c = (size_t)(base + labels[l]);
            units_take(&tu, c, (int32_t)j.node);
            if (c + 1 > used) used = c + 1;
        }
        /* one job per child, over its range of keys */
        if (qn + (size_t)nl > qcap) {
            while (qn + (size_t)nl > qcap) qcap *= 2;
            trie_job *nq = realloc(q, qcap * sizeof *nq);
            if (!nq) goto nomem;
            q = nq;
        }
        uint32_t a = lo;
        for (int l = 0; l < nl; l++) {
            uint32_t b = a;
            while (b < j.hi && k[b].p[j.depth] == labels[l]) b++;
            q[qn++] = (trie_job){(uint32_t)(base + labels[l]), a, b, j.depth + 1};
            a = b;
        }
        /* finished jobs are not needed again: keep the queue short */
        if (qh > 65536 && qh * 2 > qn) {
            memmove(q, q + qh, (qn - qh) * sizeof *q);
            qn -= qh;
            qh = 0;
        }
    }
    t->u = tu.u;
    t->n = (uint32_t)used;
    tu.u = NULL;
    goto done;
nomem:
    st = ig_err_set(err, IG_ERR_NOMEM, "out of memory building the piece index");
done:
    free(k);
    free(q);
    free(tu.u);
    free(tu.next_free);
    free(tu.prev_free);
    return st;
}

void ig_spm_trie_free(ig_spm_trie *t) {
    free(t->u);
    t->u = NULL;
    t->n = 0;
}

/* ---- the model ------------------------------------------------------------------------------ */

ig_spm *ig_spm_new(void) {
    ig_spm *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->model_type = IG_SPM_UNIGRAM;
    m->unk_id = m->eos_id = -1;
    ig_spm_norm *ns[2] = {&m->norm, &m->denorm};
    for (int i = 0; i < 2; i++) {
        ns[i]->add_dummy_prefix = ns[i]->remove_extra_whitespaces = ns[i]->escape_whitespaces = 1;
        ns[i]->charsmap_at = SIZE_MAX;
    }
    return m;
}

void ig_spm_free(ig_spm *m) {
    if (!m) return;
    free(m->off);
    free(m->len);
    free(m->score);
    free(m->type);
    free(m->arena);
    free(m->unk_surface);
    free(m->unk_piece);
    free(m->bos_piece);
    free(m->eos_piece);
    free(m->pad_piece);
    ig_spm_norm_free(&m->norm);
    ig_spm_norm_free(&m->denorm);
    ig_spm_trie_free(&m->pieces);
    ig_spm_trie_free(&m->viterbi);
    ig_spm_trie_free(&m->reserved);
    ig_spm_trie_free(&m->user);
    free(m->specials);
    free(m);
}

ig_status ig_spm_add_piece(ig_spm *m, const void *bytes, size_t len, float score, int type,
                           const char *where, ig_err *err) {
    size_t id = m->n_pieces;
    if (id >= IG_TOK_ID_LIMIT)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: more than 2^24 pieces", where);
    if (len > (1u << 20))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: a piece of %zu bytes (at most 1 MiB)", where,
                          len);
    if ((id & (id - 1)) == 0) { /* 0, 1, 2, 4, ...: grow the per-piece arrays */
        size_t cap = id ? 2 * id : 1;
        uint32_t *o = realloc(m->off, cap * sizeof *o);
        if (o) m->off = o;
        uint32_t *l = realloc(m->len, cap * sizeof *l);
        if (l) m->len = l;
        float *s = realloc(m->score, cap * sizeof *s);
        if (s) m->score = s;
        uint8_t *t = realloc(m->type, cap);
        if (t) m->type = t;
        if (!o || !l || !s || !t)
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", where);
    }
    if (!m->arena || m->arena_len + len > m->arena_cap) {
        size_t cap = m->arena_cap ? m->arena_cap : 1 << 16;
        while (cap < m->arena_len + len) cap *= 2;
        if (cap > UINT32_MAX)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: the pieces add up to more than 4 GB", where);
        uint8_t *a = realloc(m->arena, cap);
        if (!a) return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", where);
        m->arena = a;
        m->arena_cap = cap;
    }
    if (len) memcpy(m->arena + m->arena_len, bytes, len);
    m->off[id] = (uint32_t)m->arena_len;
    m->len[id] = (uint32_t)len;
    m->score[id] = score;
    m->type[id] = (uint8_t)type;
    m->arena_len += len;
    m->n_pieces++;
    return IG_OK;
}

int32_t ig_spm_piece_to_id(const ig_spm *m, const uint8_t *s, size_t n) {
    int32_t id = ig_spm_trie_find(&m->reserved, s, n);
    if (id < 0) id = ig_spm_trie_find(&m->pieces, s, n);
    return id < 0 ? m->unk_id : id;
}

/* The byte of a piece "<0xNN>" (upper-case hex, as SentencePiece writes them), or -1. */
static int piece_byte(const uint8_t *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        int c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Builds a trie of the pieces whose type is in types (a bit per type); duplicates are refused
 * naming the file. */
static ig_status build_trie(ig_spm *m, ig_spm_trie *t, unsigned types, const int32_t *values,
                            const char *where, ig_err *err) {
    uint8_t *take = malloc(m->n_pieces ? m->n_pieces : 1);
    if (!take) return ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", where);
    for (size_t i = 0; i < m->n_pieces; i++) take[i] = (types >> m->type[i]) & 1u;
    ig_err e = {0};
    ig_status st =
        ig_spm_trie_build(t, m->arena, m->off, m->len, take, values, m->score, m->n_pieces, &e);
    free(take);
    if (st == IG_ERR_FORMAT)
        return ig_err_set(err, st, "%s: %s (SentencePiece refuses a piece defined twice)", where,
                          e.msg);
    if (st != IG_OK) return ig_err_set(err, st, "%s: %s", where, e.msg);
    return IG_OK;
}

/* What the ids mean and how text becomes them: the model type, every piece (bytes, score, type)
 * and the normaliser (character map and white-space rules). A .model file and the tokenizer.json
 * converted from it hash alike. */
static uint64_t model_hash(const ig_spm *m) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return 0;
    XXH3_64bits_reset(h);
    const char *magic = "ingot-spm-1";
    XXH3_64bits_update(h, magic, strlen(magic));
    uint32_t head[4] = {(uint32_t)m->model_type, (uint32_t)m->byte_fallback, (uint32_t)m->ws_suffix,
                        (uint32_t)m->n_pieces};
    XXH3_64bits_update(h, head, sizeof head);
    for (size_t i = 0; i < m->n_pieces; i++) {
        uint32_t bits;
        memcpy(&bits, &m->score[i], sizeof bits);
        uint32_t rec[3] = {m->len[i], bits, m->type[i]};
        XXH3_64bits_update(h, rec, sizeof rec);
        XXH3_64bits_update(h, m->arena + m->off[i], m->len[i]);
    }
    const ig_spm_norm *ns[2] = {&m->norm, &m->denorm};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !(m->has_denorm && m->denorm.charsmap_len)) break;
        uint32_t rec[4] = {(uint32_t)ns[k]->charsmap_len, (uint32_t)ns[k]->add_dummy_prefix,
                           (uint32_t)ns[k]->remove_extra_whitespaces,
                           (uint32_t)ns[k]->escape_whitespaces};
        XXH3_64bits_update(h, rec, sizeof rec);
        if (ns[k]->charsmap_len) XXH3_64bits_update(h, ns[k]->charsmap, ns[k]->charsmap_len);
    }
    uint64_t v = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return v;
}

static int cmp_special_len(const void *a, const void *b, void *user) {
    const ig_spm *m = user;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (m->len[x] != m->len[y]) return m->len[x] > m->len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static ig_status check_pieces(ig_spm *m, const char *where, ig_err *err) {
    if (m->model_type == IG_SPM_WORD || m->model_type == IG_SPM_CHAR)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: a SentencePiece model of type %s: ingot reads UNIGRAM and BPE "
                          "models only",
                          where, m->model_type == IG_SPM_WORD ? "WORD" : "CHAR");
    if (m->n_pieces == 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: the model has no pieces", where);
    int byte_seen[256] = {0};
    for (size_t i = 0; i < m->n_pieces; i++) {
        const uint8_t *p = m->arena + m->off[i];
        size_t n = m->len[i];
        if (n == 0)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: piece %zu is empty (SentencePiece refuses empty pieces)", where,
                              i);
        if (memchr(p, '\0', n))
            return ig_err_set(err, IG_ERR_FORMAT, "%s: piece %zu contains a NUL byte", where, i);
        if (m->type[i] == IG_SPM_UNKNOWN) {
            if (m->unk_id >= 0)
                return ig_err_set(err, IG_ERR_FORMAT,
                                  "%s: pieces %d and %zu are both of type UNKNOWN (a model has "
                                  "one)",
                                  where, m->unk_id, i);
            m->unk_id = (int32_t)i;
        }
        if (m->type[i] == IG_SPM_BYTE) {
            if (!m->byte_fallback)
                return ig_err_set(err, IG_ERR_FORMAT,
                                  "%s: piece %zu '%.*s' is a BYTE piece, but the trainer spec "
                                  "says byte_fallback is false",
                                  where, i, (int)(n < 64 ? n : 64), (const char *)p);
            int b = piece_byte(p, n);
            if (b < 0)
                return ig_err_set(err, IG_ERR_FORMAT,
                                  "%s: BYTE piece %zu is '%.*s', expected <0x00> .. <0xFF>", where,
                                  i, (int)(n < 64 ? n : 64), (const char *)p);
            byte_seen[b] = 1;
        }
    }
    if (m->unk_id < 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: no piece has type UNKNOWN (SentencePiece needs an unknown piece, "
                          "<unk>)",
                          where);
    if (m->byte_fallback)
        for (int b = 0; b < 256; b++)
            if (!byte_seen[b])
                return ig_err_set(err, IG_ERR_FORMAT,
                                  "%s: byte_fallback is true but there is no BYTE piece <0x%02X> "
                                  "(it needs all 256)",
                                  where, b);
    return IG_OK;
}

ig_status ig_spm_finish(ig_tokenizer **out, ig_ctx *ctx, ig_spm *m, const char *where,
                        ig_err *err) {
    *out = NULL;
    ig_status st = check_pieces(m, where, err);
    const unsigned normal = 1u << IG_SPM_NORMAL | 1u << IG_SPM_USER_DEFINED | 1u << IG_SPM_UNUSED;
    const unsigned reserved = 1u << IG_SPM_CONTROL | 1u << IG_SPM_UNKNOWN | 1u << IG_SPM_BYTE;
    if (st == IG_OK) st = build_trie(m, &m->pieces, normal, NULL, where, err);
    if (st == IG_OK) st = build_trie(m, &m->reserved, reserved, NULL, where, err);
    if (st == IG_OK) st = build_trie(m, &m->user, 1u << IG_SPM_USER_DEFINED, NULL, where, err);
    if (st == IG_OK && m->model_type == IG_SPM_UNIGRAM) {
        int32_t *v = malloc(m->n_pieces * sizeof *v);
        if (!v) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", where);
        for (size_t i = 0; v && i < m->n_pieces; i++)
            v[i] = m->type[i] == IG_SPM_USER_DEFINED ? -2 - (int32_t)i : (int32_t)i;
        if (st == IG_OK)
            st = build_trie(m, &m->viterbi, 1u << IG_SPM_NORMAL | 1u << IG_SPM_USER_DEFINED, v,
                            where, err);
        free(v);
    }
    if (st == IG_OK && !m->pieces.u)
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: the model has no NORMAL, USER_DEFINED or UNUSED piece to segment "
                        "text into",
                        where);
    if (st == IG_OK) st = ig_spm_norm_init(&m->norm, &m->user, where, err);
    if (st == IG_OK && m->has_denorm) st = ig_spm_norm_init(&m->denorm, NULL, where, err);
    if (st != IG_OK) {
        ig_spm_free(m);
        return st;
    }
    m->min_score = FLT_MAX;
    m->max_score = FLT_MIN; /* as SentencePiece: not -FLT_MAX */
    for (size_t i = 0; i < m->n_pieces; i++)
        if (m->type[i] == IG_SPM_NORMAL) {
            if (m->score[i] < m->min_score) m->min_score = m->score[i];
            if (m->score[i] > m->max_score) m->max_score = m->score[i];
        }
    for (int b = 0; b < 256; b++) {
        char p[8];
        snprintf(p, sizeof p, "<0x%02X>", b);
        int32_t id = ig_spm_trie_find(&m->reserved, (const uint8_t *)p, 6);
        m->byte_id[b] = id >= 0 && m->type[id] == IG_SPM_BYTE ? id : -1;
    }
    const char *eos = m->eos_piece && *m->eos_piece ? m->eos_piece : "</s>";
    int32_t eid = ig_spm_piece_to_id(m, (const uint8_t *)eos, strlen(eos));
    m->eos_id = eid >= 0 && m->type[eid] == IG_SPM_CONTROL ? eid : -1;
    m->specials = malloc(m->n_pieces * sizeof *m->specials);
    ig_tokenizer *t = calloc(1, sizeof *t);
    if (!m->specials || !t) {
        free(t);
        ig_spm_free(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", where);
    }
    for (size_t i = 0; i < m->n_pieces; i++)
        if (m->type[i] == IG_SPM_CONTROL || m->type[i] == IG_SPM_UNKNOWN)
            m->specials[m->n_specials++] = (uint32_t)i;
    qsort_r(m->specials, m->n_specials, sizeof *m->specials, cmp_special_len, m);
    t->ctx = ctx;
    t->spm = m;
    snprintf(t->name, sizeof t->name, "sentencepiece-%s",
             m->model_type == IG_SPM_BPE ? "bpe" : "unigram");
    t->vocab_size = m->n_pieces;
    t->eod = m->eos_id;
    t->hash = model_hash(m);
    *out = t;
    return IG_OK;
}

/* ---- decoding -------------------------------------------------------------------------------- */

typedef struct out_buf {
    char **buf;
    size_t *len, *cap;
} out_buf;

static int put(out_buf *o, const void *s, size_t n) {
    if (*o->len + n > *o->cap) {
        size_t c = *o->cap ? *o->cap : 256;
        while (c < *o->len + n) c *= 2;
        char *nb = realloc(*o->buf, c);
        if (!nb) return -1;
        *o->buf = nb;
        *o->cap = c;
    }
    if (n) memcpy(*o->buf + *o->len, s, n);
    *o->len += n;
    return 0;
}

/* A piece's text with every U+2581 as a space. */
static int put_piece(out_buf *o, const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const uint8_t *f = n - i >= 3 ? memmem(s + i, n - i, "\xE2\x96\x81", 3) : NULL;
        size_t run = f ? (size_t)(f - (s + i)) : n - i;
        if (put(o, s + i, run) != 0) return -1;
        i += run;
        if (f) {
            if (put(o, " ", 1) != 0) return -1;
            i += 3;
        }
    }
    return 0;
}

ig_status ig_spm_decode(const ig_tokenizer *t, const int32_t *ids, size_t n, int cont, char **buf,
                        size_t *len, size_t *cap, ig_err *err) {
    const ig_spm *m = t->spm;
    out_buf o = {buf, len, cap};
    size_t start = *len;
    int is_bos_ws = !cont, bos_ws_seen = 0;
    const ig_spm_norm *ns = &m->norm;
    for (size_t i = 0; i < n;) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= m->n_pieces)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "token id %d (at position %zu) is not in the vocabulary of %s "
                              "(ids 0..%zu)",
                              id, i, t->name, m->n_pieces - 1);
        const uint8_t *p = m->arena + m->off[id];
        size_t pn = m->len[id];
        int type = m->type[id];
        if (type == IG_SPM_BYTE) { /* a run of byte pieces: their bytes, as UTF-8 */
            size_t j = i;
            while (j < n && ids[j] >= 0 && (size_t)ids[j] < m->n_pieces &&
                   m->type[ids[j]] == IG_SPM_BYTE)
                j++;
            for (size_t k = i; k < j;) {
                uint8_t c[4];
                size_t nc = 0, l = 1;
                while (nc < 4 && k + nc < j)
                    c[nc] =
                        (uint8_t)piece_byte(m->arena + m->off[ids[k + nc]], m->len[ids[k + nc]]),
                    nc++;
                /* cont: the bytes as they are (a character may go on in the next call) */
                if (cont || ig_spm_utf8_valid(c, nc, &l)) {
                    if (put(&o, c, l) != 0) goto nomem;
                } else if (put(&o, "\xEF\xBF\xBD", 3) != 0) {
                    goto nomem;
                }
                k += l;
            }
            i = j;
            continue;
        }
        if (bos_ws_seen || *len > start) is_bos_ws = 0;
        bos_ws_seen = 0;
        if (type == IG_SPM_CONTROL) {
            /* invisible */
        } else if (type == IG_SPM_UNKNOWN) {
            const char *s = m->unk_surface ? m->unk_surface : " \xE2\x81\x87 ";
            if (put(&o, s, strlen(s)) != 0) goto nomem;
        } else {
            if (is_bos_ws && (ns->add_dummy_prefix || ns->remove_extra_whitespaces) && pn >= 3 &&
                memcmp(p, "\xE2\x96\x81", 3) == 0) {
                p += 3, pn -= 3;
                bos_ws_seen = !ns->remove_extra_whitespaces;
            }
            if (put_piece(&o, p, pn) != 0) goto nomem;
        }
        i++;
    }
    if (m->has_denorm && m->denorm.n_units && *len > start) {
        ig_spm_buf tmp = {0};
        static const ig_spm_trie none = {0};
        if (ig_spm_normalize(&m->denorm, &none, 0, (const uint8_t *)*buf + start, *len - start,
                             &tmp) != 0) {
            ig_free(NULL, tmp.p);
            goto nomem;
        }
        *len = start;
        int r = put(&o, tmp.p, tmp.n);
        ig_free(NULL, tmp.p);
        if (r != 0) goto nomem;
    }
    return IG_OK;
nomem:
    return ig_err_set(err, IG_ERR_NOMEM, "out of memory decoding %zu ids", n);
}
