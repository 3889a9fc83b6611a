/* tokenizer_hf.c - loading the Hugging Face forms of a byte-level BPE tokenizer: tokenizer.json
 * (BPE model with a ByteLevel pre-tokenizer; merges as "a b" strings or [a, b] arrays) and the
 * vocab.json + merges.txt pair of GPT-2's encoder.py.
 *
 * Vocabulary keys are byte-level strings: each byte is written as one code point of GPT-2's
 * bytes_to_unicode table (printable Latin-1 bytes as themselves, the others as U+0100...), which
 * is inverted here to get the token's bytes. Merges become pair entries whose priority is the
 * merge's position. In the vocab.json + merges.txt form, tokens that are neither a single byte nor
 * the result of a merge (GPT-2's <|endoftext|>) are the special tokens, which is what the
 * tokenizer.json form lists as added_tokens, so both forms give the same tokenizer and hash.
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer_internal.h"
#include "tokenizer_spm_internal.h"

/* Split patterns of a Sequence[Split, ByteLevel(use_regex=false)] pre-tokenizer that we know. */
static const char k_pat_cl100k[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_pat_o200k[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'"
    "s|"
    "'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{"
    "Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/"
    "]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char k_pat_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Code point -> byte of GPT-2's bytes_to_unicode (-1: not a byte-level character). */
static void byte_decoder(int16_t dec[324]) {
    for (int i = 0; i < 324; i++) dec[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        dec[printable ? b : 256 + extra++] = (int16_t)b;
    }
}

/* Byte-level string -> bytes; returns the length or -1 when s is not byte-level. */
static long decode_byte_level(const int16_t dec[324], const char *s, size_t n, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t l =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (l <= 0 || cp < 0 || cp >= 324 || dec[cp] < 0) return -1;
        out[o++] = (uint8_t)dec[cp];
        i += (size_t)l;
    }
    return (long)o;
}

typedef struct merge_src {
    const char *a, *b;
    size_t alen, blen;
} merge_src;

/* Sets every vocabulary token (byte-level keys; raw text when a key is not byte-level). */
static ig_status set_vocab(ig_tokenizer *t, json_t *vocab, json_t *added, const char *where,
                           ig_err *err) {
    int16_t dec[324];
    byte_decoder(dec);
    const char *key;
    json_t *val;
    uint8_t *buf = NULL;
    size_t cap = 0;
    ig_status st = IG_OK;
    json_object_foreach(vocab, key, val) {
        /* checked before any narrowing: an id of 2^32 + 5 must not become 5 */
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= (json_int_t)IG_TOK_ID_LIMIT) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: vocabulary entry \"%s\": expected an integer id in [0, 2^24)",
                            where, key);
            break;
        }
        size_t klen = strlen(key);
        if (klen + 1 > cap) {
            cap = 2 * klen + 64;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
                break;
            }
            buf = nb;
        }
        long n = decode_byte_level(dec, key, klen, buf);
        const void *bytes = buf;
        if (n <= 0) bytes = key, n = (long)klen;
        st = ig_tok_set(t, (uint32_t)json_integer_value(val), bytes, (size_t)n, 0, where, err);
        if (st != IG_OK) break;
    }
    free(buf);
    if (st != IG_OK || !added) return st;
    size_t i;
    json_t *tok;
    json_array_foreach(added, i, tok) {
        json_t *id = json_object_get(tok, "id"), *content = json_object_get(tok, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (json_int_t)IG_TOK_ID_LIMIT || !json_is_string(content))
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: added_tokens[%zu]: expected an object with an integer \"id\" "
                              "in [0, 2^24) and a string \"content\"",
                              where, i);
        uint32_t tid = (uint32_t)json_integer_value(id);
        const char *c = json_string_value(content);
        size_t clen = json_string_length(content);
        if (tid < t->vocab_size && t->tok_len[tid] != IG_NO_TOKEN) {
            if (t->tok_len[tid] != clen || memcmp(t->arena + t->tok_off[tid], c, clen) != 0)
                return ig_err_set(
                    err, IG_ERR_FORMAT,
                    "%s: added token \"%s\" has id %u, which the vocabulary gives to another token",
                    where, c, tid);
            t->is_special[tid] = 1;
        } else {
            st = ig_tok_set(t, tid, c, clen, 1, where, err);
            if (st != IG_OK) return st;
        }
    }
    return IG_OK;
}

/* Adds the merges as pairs (priority = position); marks merged ids in `reached` when not NULL. */
static ig_status add_merges(ig_tokenizer *t, json_t *vocab, const merge_src *m, size_t n,
                            const char *where, int line_base, uint8_t *reached, ig_err *err) {
    char *cat = NULL;
    size_t cap = 0;
    ig_status st = IG_OK;
    for (size_t i = 0; i < n && st == IG_OK; i++) {
        size_t len = m[i].alen + m[i].blen;
        if (len + 1 > cap) {
            cap = 2 * len + 64;
            char *nc = realloc(cat, cap);
            if (!nc) {
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
                break;
            }
            cat = nc;
        }
        memcpy(cat, m[i].a, m[i].alen);
        memcpy(cat + m[i].alen, m[i].b, m[i].blen);
        json_t *ja = json_object_getn(vocab, m[i].a, m[i].alen);
        json_t *jb = json_object_getn(vocab, m[i].b, m[i].blen);
        json_t *jc = json_object_getn(vocab, cat, len);
        const char *missing = NULL;
        size_t mlen = 0;
        if (!ja)
            missing = m[i].a, mlen = m[i].alen;
        else if (!jb)
            missing = m[i].b, mlen = m[i].blen;
        else if (!jc)
            missing = cat, mlen = len;
        if (missing) {
            if (line_base)
                st = ig_err_set(err, IG_ERR_FORMAT,
                                "%s:%zu: merge '%.*s %.*s' refers to token '%.*s', which is not in "
                                "the vocabulary",
                                where, i + (size_t)line_base, (int)m[i].alen, m[i].a,
                                (int)m[i].blen, m[i].b, (int)mlen, missing);
            else
                st = ig_err_set(err, IG_ERR_FORMAT,
                                "%s: model.merges[%zu] '%.*s %.*s' refers to token '%.*s', which "
                                "is not in model.vocab",
                                where, i, (int)m[i].alen, m[i].a, (int)m[i].blen, m[i].b, (int)mlen,
                                missing);
            break;
        }
        uint32_t merged = (uint32_t)json_integer_value(jc);
        st = ig_tok_add_pair(t, (uint32_t)json_integer_value(ja), (uint32_t)json_integer_value(jb),
                             (uint32_t)i, merged, err);
        if (reached && merged < t->vocab_size) reached[merged] = 1;
    }
    free(cat);
    return st;
}

static ig_status pre_tokenizer_pattern(json_t *pre, const char *path, ig_pattern *out,
                                       ig_err *err) {
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (type && strcmp(type, "ByteLevel") == 0) {
        if (json_is_true(json_object_get(pre, "add_prefix_space")))
            return ig_err_set(err, IG_ERR_UNSUPPORTED,
                              "%s: pre_tokenizer ByteLevel with add_prefix_space: true is not "
                              "supported (expected false, as GPT-2)",
                              path);
        json_t *ur = json_object_get(pre, "use_regex");
        if (ur && json_is_false(ur))
            return ig_err_set(
                err, IG_ERR_UNSUPPORTED,
                "%s: pre_tokenizer ByteLevel without a split pattern is not supported", path);
        *out = IG_PAT_GPT2;
        return IG_OK;
    }
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(pre, "pretokenizers");
        json_t *split = json_array_get(list, 0), *bl = json_array_get(list, 1);
        const char *pat =
            json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
        const char *t0 = json_string_value(json_object_get(split, "type"));
        const char *t1 = json_string_value(json_object_get(bl, "type"));
        /* as cl100k/o200k tokenizer.json files have it: the Split isolates the matches (not
         * removed, not inverted), and ByteLevel only maps bytes (use_regex false: Hugging Face
         * would split again with GPT-2's pattern otherwise) */
        const char *behavior = json_string_value(json_object_get(split, "behavior"));
        int plain_split = (!behavior || !strcmp(behavior, "Isolated")) &&
                          !json_is_true(json_object_get(split, "invert"));
        int bytes_only = json_is_false(json_object_get(bl, "use_regex"));
        if (json_array_size(list) == 2 && pat && t0 && t1 && !strcmp(t0, "Split") &&
            !strcmp(t1, "ByteLevel") && !json_is_true(json_object_get(bl, "add_prefix_space")) &&
            (!plain_split || !bytes_only))
            return ig_err_set(err, IG_ERR_UNSUPPORTED,
                              "%s: pre_tokenizer Split must have behavior \"Isolated\" and no "
                              "invert, and the ByteLevel after it \"use_regex\": false",
                              path);
        if (json_array_size(list) == 2 && pat && t0 && t1 && !strcmp(t0, "Split") &&
            !strcmp(t1, "ByteLevel") && !json_is_true(json_object_get(bl, "add_prefix_space"))) {
            if (!strcmp(pat, k_pat_cl100k)) return *out = IG_PAT_CL100K, IG_OK;
            if (!strcmp(pat, k_pat_o200k)) return *out = IG_PAT_O200K, IG_OK;
            if (!strcmp(pat, k_pat_gpt2)) return *out = IG_PAT_GPT2, IG_OK;
        }
    }
    return ig_err_set(err, IG_ERR_UNSUPPORTED,
                      "%s: unsupported pre_tokenizer: expected ByteLevel (GPT-2) or a Sequence of "
                      "a Split with the cl100k/o200k pattern and ByteLevel",
                      path);
}

/* Parses the JSON file at path (ig_json_load_file); errors say whether it could not be opened
 * (and why) or where it is malformed, and what it should have been. */
static ig_status load_json(const char *path, const char *what, json_t **out, ig_err *err) {
    ig_err e = {0};
    ig_status st = ig_json_load_file(path, IG_TOK_FILE_MAX, what, out, &e);
    if (st == IG_OK || st == IG_ERR_FORMAT) {
        if (err && st != IG_OK) *err = e;
        return st;
    }
    return ig_err_set(err, st, "%s (expected %s)", e.msg, what);
}

ig_status ig_tok_load_hf_json(ig_tokenizer **out, ig_ctx *ctx, const char *path, ig_err *err) {
    *out = NULL;
    json_t *root = NULL;
    ig_status lst = load_json(path, "a Hugging Face tokenizer.json", &root, err);
    if (lst != IG_OK) return lst;
    ig_tokenizer *t = NULL;
    merge_src *ms = NULL;
    ig_status st;
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (mtype && strcmp(mtype, "Unigram") == 0) { /* T5's: a SentencePiece model */
        st = ig_tok_load_spm_hf(out, ctx, path, root, err);
        json_decref(root);
        return st;
    }
    if (!json_is_object(model) || (mtype && strcmp(mtype, "BPE") != 0) || !json_is_object(vocab) ||
        !json_is_array(merges)) {
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: expected a BPE model: \"model\" with a \"vocab\" object and a "
                        "\"merges\" array%s%s",
                        path, mtype ? "; found model type " : "", mtype ? mtype : "");
        goto done;
    }
    /* BPE options that change the encoding and that ingot does not implement */
    json_t *dropout = json_object_get(model, "dropout");
    const char *csp = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *ews = json_string_value(json_object_get(model, "end_of_word_suffix"));
    const char *unsupported =
        dropout && !json_is_null(dropout) &&
                !(json_is_number(dropout) && json_number_value(dropout) == 0.0)
            ? "dropout"
        : csp && *csp                                           ? "continuing_subword_prefix"
        : ews && *ews                                           ? "end_of_word_suffix"
        : json_is_true(json_object_get(model, "byte_fallback")) ? "byte_fallback"
        : json_is_true(json_object_get(model, "ignore_merges")) ? "ignore_merges"
                                                                : NULL;
    if (unsupported) {
        st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                        "%s: model.%s is set, which ingot does not support (GPT-2, cl100k and "
                        "o200k leave it unset)",
                        path, unsupported);
        goto done;
    }
    json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm)) {
        st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                        "%s: a normalizer is not supported (expected \"normalizer\": null)", path);
        goto done;
    }
    ig_pattern pat = IG_PAT_GPT2;
    if ((st = pre_tokenizer_pattern(json_object_get(root, "pre_tokenizer"), path, &pat, err)) !=
        IG_OK)
        goto done;
    if ((st = ig_tok_begin(&t, ctx, pat, 0, err)) != IG_OK) goto done;
    json_t *added = json_object_get(root, "added_tokens");
    if ((st = set_vocab(t, vocab, json_is_array(added) ? added : NULL, path, err)) != IG_OK)
        goto done;
    size_t n = json_array_size(merges);
    ms = calloc(n ? n : 1, sizeof *ms);
    if (!ms) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            const char *sp = strchr(s, ' ');
            if (sp && !strchr(sp + 1, ' ') && sp != s && sp[1]) {
                ms[i] = (merge_src){s, sp + 1, (size_t)(sp - s), strlen(sp + 1)};
                continue;
            }
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
            ms[i] = (merge_src){json_string_value(a), json_string_value(b), json_string_length(a),
                                json_string_length(b)};
            continue;
        }
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: model.merges[%zu]: expected \"left right\" or [\"left\", \"right\"]",
                        path, i);
        goto done;
    }
    if ((st = add_merges(t, vocab, ms, n, path, 0, NULL, err)) != IG_OK) goto done;
    if ((st = ig_tok_index(t, path, err)) != IG_OK) goto done;
    st = ig_tok_finish(t, path, err);
done:
    free(ms);
    json_decref(root);
    if (st != IG_OK) {
        ig_tokenizer_free(t);
        return st;
    }
    *out = t;
    return IG_OK;
}

ig_status ig_tok_load_vocab_merges(ig_tokenizer **out, ig_ctx *ctx, const char *vocab_path,
                                   const char *merges_path, ig_err *err) {
    *out = NULL;
    json_t *vocab = NULL;
    ig_status lst = load_json(vocab_path, "a GPT-2 vocab.json (token -> id)", &vocab, err);
    if (lst != IG_OK) return lst;
    ig_tokenizer *t = NULL;
    merge_src *ms = NULL;
    uint8_t *reached = NULL;
    char *text = NULL;
    size_t text_len = 0;
    ig_status st;
    if (!json_is_object(vocab)) {
        st =
            ig_err_set(err, IG_ERR_FORMAT, "%s: expected a JSON object of token -> id", vocab_path);
        goto done;
    }
    if ((st = ig_read_file_max(merges_path, IG_TOK_FILE_MAX, &text, &text_len, err)) != IG_OK) {
        if (!ig_file_exists(merges_path))
            st = ig_err_set(err, IG_ERR_NOT_FOUND,
                            "%s: no such file: expected GPT-2 merges.txt beside %s", merges_path,
                            vocab_path);
        goto done;
    }
    if ((st = ig_tok_begin(&t, ctx, IG_PAT_GPT2, 0, err)) != IG_OK) goto done;
    if ((st = set_vocab(t, vocab, NULL, vocab_path, err)) != IG_OK) goto done;
    /* one merge per line after an optional "#version" line; a final newline ends the file */
    size_t n = 0, cap = 65536, line = 0, first_line = 0;
    ms = malloc(cap * sizeof *ms);
    if (!ms) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (size_t pos = 0; pos < text_len;) {
        char *s = text + pos;
        char *nl = memchr(s, '\n', text_len - pos);
        size_t len = nl ? (size_t)(nl - s) : text_len - pos;
        pos += len + (nl != NULL);
        line++;
        if (len && s[len - 1] == '\r') len--;
        if (len >= 8 && memcmp(s, "#version", 8) == 0) continue;
        char *sp = memchr(s, ' ', len);
        if (!sp || sp == s || (size_t)(sp - s) + 1 >= len ||
            memchr(sp + 1, ' ', len - (size_t)(sp - s) - 1)) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s:%zu: expected a merge: two tokens separated by one space",
                            merges_path, line);
            goto done;
        }
        if (n == cap) {
            merge_src *nm = realloc(ms, 2 * cap * sizeof *ms);
            if (!nm) {
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
                goto done;
            }
            ms = nm, cap *= 2;
        }
        if (n == 0) first_line = line;
        ms[n++] = (merge_src){s, sp + 1, (size_t)(sp - s), len - (size_t)(sp - s) - 1};
    }
    /* merges are contiguous lines from first_line: messages report first_line + index */
    reached = calloc(t->vocab_size ? t->vocab_size : 1, 1);
    if (!reached) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = add_merges(t, vocab, ms, n, merges_path, (int)(first_line ? first_line : 1), reached,
                         err)) != IG_OK)
        goto done;
    for (size_t id = 0; id < t->vocab_size; id++)
        if (t->tok_len[id] != IG_NO_TOKEN && t->tok_len[id] > 1 && !reached[id])
            t->is_special[id] = 1;
    if ((st = ig_tok_index(t, vocab_path, err)) != IG_OK) goto done;
    st = ig_tok_finish(t, vocab_path, err);
done:
    free(reached);
    free(ms);
    free(text);
    json_decref(vocab);
    if (st != IG_OK) {
        ig_tokenizer_free(t);
        return st;
    }
    *out = t;
    return IG_OK;
}
