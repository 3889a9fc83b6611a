/* tokenizer_load.c - building the in-memory tokenizer (tokenizer_internal.h), loading .tiktoken
 * rank files, choosing the loader from a path, and the tokenizer's accessors.
 *
 * A .tiktoken file is one "BASE64 RANK" line per token; the encoding's pattern and special tokens
 * are not in the file and come from the table below (as tiktoken's own registry defines them).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "preprocess/tokenizer_internal.h"

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
    t->bmap = malloc(cap * sizeof *t->bmap);
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
        t->bmap[i].id = (uint32_t)id;
        t->bmap[i].tag = (uint32_t)(h >> 32);
    }
    return IG_OK;
}

static ig_status pairs_reserve(ig_tokenizer *t, size_t n, ig_err *err) {
    size_t cap = 1024;
    while (cap < 2 * n) cap *= 2;
    if (t->pairs && cap <= t->pairs_mask + 1) return IG_OK;
    ig_pair_slot *old = t->pairs;
    size_t old_cap = old ? t->pairs_mask + 1 : 0;
    t->pairs = malloc(cap * sizeof *t->pairs);
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
    return IG_OK;
}

/* ---- .tiktoken ----------------------------------------------------------------------------- */

typedef struct tiktoken_encoding {
    const char *name;
    ig_pattern pattern;
    size_t n_ranks; /* the file holds ranks 0..n_ranks-1, one per line */
    struct {
        const char *text;
        uint32_t id;
    } specials[6];
} tiktoken_encoding;

static const tiktoken_encoding k_encodings[] = {
    {"r50k_base", IG_PAT_GPT2, 50256, {{"<|endoftext|>", 50256}}},
    {"gpt2", IG_PAT_GPT2, 50256, {{"<|endoftext|>", 50256}}},
    {"cl100k_base",
     IG_PAT_CL100K,
     100256,
     {{"<|endoftext|>", 100257},
      {"<|fim_prefix|>", 100258},
      {"<|fim_middle|>", 100259},
      {"<|fim_suffix|>", 100260},
      {"<|endofprompt|>", 100276}}},
    {"o200k_base", IG_PAT_O200K, 199998, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
};

static int b64_val(uint8_t c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Decodes standard base64 (with '=' padding) s[0..n) into out; returns the length or -1. */
static long b64_decode(const uint8_t *s, size_t n, uint8_t *out) {
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0, pad++;
            } else {
                if (pad) return -1;
                if ((v[k] = b64_val(s[i + k])) < 0) return -1;
            }
        }
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
    }
    return (long)o;
}

static ig_status load_tiktoken(ig_tokenizer **out, ig_ctx *ctx, const char *path,
                               const char *encoding, ig_err *err) {
    char guess[64] = "";
    if (!encoding) {
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        const char *dot = strstr(base, ".tiktoken");
        size_t n = dot ? (size_t)(dot - base) : strlen(base);
        if (n >= sizeof guess) n = sizeof guess - 1;
        memcpy(guess, base, n);
        guess[n] = 0;
        encoding = guess;
    }
    const tiktoken_encoding *enc = NULL;
    for (size_t i = 0; i < sizeof k_encodings / sizeof k_encodings[0]; i++)
        if (strcmp(k_encodings[i].name, encoding) == 0) enc = &k_encodings[i];
    if (!enc)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: unknown tiktoken encoding '%s': expected r50k_base (or gpt2), "
                          "cl100k_base or o200k_base (name the file so, or pass "
                          "--tiktoken-encoding NAME)",
                          path, encoding);
    ig_mapped_file mf = {0};
    ig_status st = ig_mapped_file_open(&mf, path, err);
    if (st != IG_OK) return st;
    ig_tokenizer *t = NULL;
    st = ig_tok_begin(&t, ctx, enc->pattern, 1, err);
    if (st != IG_OK) goto done;
    snprintf(t->name, sizeof t->name, "%s", strcmp(enc->name, "gpt2") ? enc->name : "r50k_base");
    size_t line = 0, n_tokens = 0;
    uint8_t buf[1024];
    for (size_t pos = 0; pos < mf.size;) {
        const uint8_t *s = mf.data + pos;
        const uint8_t *nl = memchr(s, '\n', mf.size - pos);
        size_t len = nl ? (size_t)(nl - s) : mf.size - pos;
        pos += len + (nl != NULL);
        line++;
        if (len && s[len - 1] == '\r') len--;
        if (len == 0) continue;
        const uint8_t *sp = memchr(s, ' ', len);
        long blen = -1;
        if (sp && (size_t)(sp - s) <= 4 * (sizeof buf / 3))
            blen = b64_decode(s, (size_t)(sp - s), buf);
        if (blen <= 0) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s:%zu: expected 'BASE64_TOKEN RANK' with a valid base64 token", path,
                            line);
            goto done;
        }
        uint64_t rank = 0;
        size_t k = (size_t)(sp - s) + 1;
        if (k >= len) rank = UINT64_MAX;
        for (; k < len && rank < (1u << 30); k++) {
            if (s[k] < '0' || s[k] > '9') {
                rank = UINT64_MAX;
                break;
            }
            rank = rank * 10 + (uint64_t)(s[k] - '0');
        }
        if (rank >= (1u << 30)) {
            st = ig_err_set(err, IG_ERR_FORMAT, "%s:%zu: expected a decimal rank after the token",
                            path, line);
            goto done;
        }
        if (rank >= enc->n_ranks) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s:%zu: rank %llu is outside %s's ranks 0..%zu: is this file of "
                            "another encoding? (pass --tiktoken-encoding NAME)",
                            path, line, (unsigned long long)rank, enc->name, enc->n_ranks - 1);
            goto done;
        }
        char where[1100];
        snprintf(where, sizeof where, "%s:%zu", path, line);
        st = ig_tok_set(t, (uint32_t)rank, buf, (size_t)blen, 0, where, err);
        if (st != IG_OK) goto done;
        n_tokens++;
    }
    if (n_tokens == 0) {
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: no tokens: expected 'BASE64_TOKEN RANK' lines",
                        path);
        goto done;
    }
    if (n_tokens != enc->n_ranks) {
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: %zu ranks, but %s has %zu: the file is truncated or of another "
                        "encoding (pass --tiktoken-encoding NAME)",
                        path, n_tokens, enc->name, enc->n_ranks);
        goto done;
    }
    for (size_t i = 0; i < 6 && enc->specials[i].text; i++) {
        st = ig_tok_set(t, enc->specials[i].id, enc->specials[i].text,
                        strlen(enc->specials[i].text), 1, path, err);
        if (st != IG_OK) {
            ig_err_prefix(err, "special token %s of %s: ", enc->specials[i].text, enc->name);
            goto done;
        }
    }
    if ((st = ig_tok_index(t, path, err)) != IG_OK) goto done;
    if ((st = ig_tok_pairs_from_ranks(t, err)) != IG_OK) goto done;
    st = ig_tok_finish(t, path, err);
done:
    ig_mapped_file_close(&mf);
    if (st != IG_OK) {
        ig_tokenizer_free(t);
        return st;
    }
    *out = t;
    return IG_OK;
}

/* ---- public -------------------------------------------------------------------------------- */

ig_tokenizer_opts ig_tokenizer_opts_default(void) {
    ig_tokenizer_opts o = {0};
    return o;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

ig_status ig_tokenizer_load(ig_tokenizer **out, ig_ctx *ctx, const char *path,
                            const ig_tokenizer_opts *opts, ig_err *err) {
    *out = NULL;
    if (!path || !*path) return ig_err_set(err, IG_ERR_INVALID_ARG, "no tokenizer path given");
    const char *encoding = opts ? opts->tiktoken_encoding : NULL;
    struct stat stt;
    if (stat(path, &stt) != 0)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "tokenizer %s: %s: expected a tokenizer.json, a directory holding "
                          "tokenizer.json or vocab.json + merges.txt, or a .tiktoken file",
                          path, strerror(errno));
    if (is_dir(path)) {
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/tokenizer.json", path);
        if (ig_file_exists(a)) return ig_tok_load_hf_json(out, ctx, a, err);
        snprintf(a, sizeof a, "%s/vocab.json", path);
        snprintf(b, sizeof b, "%s/merges.txt", path);
        if (ig_file_exists(a) && ig_file_exists(b))
            return ig_tok_load_vocab_merges(out, ctx, a, b, err);
        if (ig_file_exists(a) || ig_file_exists(b))
            return ig_err_set(err, IG_ERR_NOT_FOUND,
                              "tokenizer directory %s: %s is missing "
                              "(vocab.json and merges.txt go together)",
                              path, ig_file_exists(a) ? "merges.txt" : "vocab.json");
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "tokenizer directory %s holds neither tokenizer.json nor vocab.json + "
                          "merges.txt",
                          path);
    }
    if (encoding || ends_with(path, ".tiktoken"))
        return load_tiktoken(out, ctx, path, encoding, err);
    return ig_tok_load_hf_json(out, ctx, path, err);
}

void ig_tokenizer_free(ig_tokenizer *t) {
    if (!t) return;
    ig_pretok_free(&t->pt);
    free(t->arena);
    free(t->tok_off);
    free(t->tok_len);
    free(t->whole_ok);
    free(t->byte_pairs);
    free(t->is_special);
    free(t->bmap);
    free(t->pairs);
    free(t->specials);
    free(t);
}

size_t ig_tokenizer_vocab_size(const ig_tokenizer *t) {
    return t->vocab_size;
}
int32_t ig_tokenizer_eod(const ig_tokenizer *t) {
    return t->eod;
}
const char *ig_tokenizer_name(const ig_tokenizer *t) {
    return t->name;
}
uint64_t ig_tokenizer_hash(const ig_tokenizer *t) {
    return t->hash;
}
