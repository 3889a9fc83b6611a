/* tokenizer_tiktoken.c - loading .tiktoken rank files. A .tiktoken file is one "BASE64 RANK" line
 * per token; the encoding's pattern and special tokens are not in the file and come from the
 * table below (as tiktoken's own registry defines them).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

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

ig_status ig_tok_load_tiktoken(ig_tokenizer **out, ig_ctx *ctx, const char *path,
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
    if (!enc) {
        ig_err_set(err, IG_ERR_INVALID_ARG,
                   "%s: unknown tiktoken encoding '%s': expected r50k_base (or gpt2), "
                   "cl100k_base or o200k_base (name the file so, or name the encoding)",
                   path, encoding);
        return ig_err_fix(err, "tiktoken_encoding", "NAME");
    }
    ig_mapped_file mf = {0};
    ig_status st = ig_mapped_file_open(&mf, path, err);
    if (st != IG_OK) return st;
    if (mf.size > IG_TOK_FILE_MAX) {
        char a[32], b[32];
        st = ig_err_set(
            err, IG_ERR_INVALID_ARG,
            "%s is %s, more than the %s ingot reads of a tokenizer file: is it the right "
            "file?",
            path, ig_format_bytes((double)mf.size, a, sizeof a),
            ig_format_bytes((double)IG_TOK_FILE_MAX, b, sizeof b));
        ig_mapped_file_close(&mf);
        return st;
    }
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
        /* the rank: decimal digits only; a large one is out of range, not malformed */
        size_t r0 = (size_t)(sp - s) + 1, k = r0;
        uint64_t rank = 0;
        for (; k < len && s[k] >= '0' && s[k] <= '9'; k++)
            rank = rank > UINT64_MAX / 10 - 1 ? UINT64_MAX : rank * 10 + (uint64_t)(s[k] - '0');
        if (k == r0 || k < len) {
            st = ig_err_set(err, IG_ERR_FORMAT, "%s:%zu: expected a decimal rank after the token",
                            path, line);
            goto done;
        }
        if (rank >= enc->n_ranks) {
            ig_err_set(err, IG_ERR_FORMAT,
                       "%s:%zu: rank %.*s is outside %s's ranks 0..%zu: is this file of another "
                       "encoding?",
                       path, line, (int)(k - r0 > 40 ? 40 : k - r0), (const char *)s + r0,
                       enc->name, enc->n_ranks - 1);
            st = ig_err_fix(err, "tiktoken_encoding", "NAME");
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
        ig_err_set(err, IG_ERR_FORMAT,
                   "%s: %zu ranks, but %s has %zu: the file is truncated or of another encoding",
                   path, n_tokens, enc->name, enc->n_ranks);
        st = ig_err_fix(err, "tiktoken_encoding", "NAME");
        goto done;
    }
    for (size_t i = 0; i < 6 && enc->specials[i].text; i++) {
        st = ig_tok_set(t, enc->specials[i].id, enc->specials[i].text,
                        strlen(enc->specials[i].text), 1, path, err);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "special token %s of %s", enc->specials[i].text, enc->name);
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
