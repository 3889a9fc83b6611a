/* tokenizer_spm_hf.c - a Hugging Face tokenizer.json whose model is Unigram (T5's, and what
 * transformers' SentencePiece converters write), read as the SentencePiece model it was converted
 * from, so that it gives the same ids (and the same hash) as that .model file.
 *
 * What maps to what:
 *   model.vocab [[piece, score], ...]   the pieces and scores, in id order
 *   model.unk_id                        the UNKNOWN piece
 *   model.byte_fallback                 byte fallback; its <0xNN> pieces are BYTE pieces
 *   added_tokens (special: true)        CONTROL pieces (<pad>, </s>, T5's <extra_id_N>)
 *   added_tokens (special: false)       USER_DEFINED pieces
 *   normalizer Precompiled              the precompiled character map (base64)
 *   normalizer Strip / Replace(" {2,}") SentencePiece's remove_extra_whitespaces (as the
 *     in a Sequence, or a WhitespaceSplit  converters write it)
 *     pre-tokenizer
 *   pre_tokenizer Metaspace             spaces escaped as its replacement (it must be U+2581);
 *                                       add_prefix_space / prepend_scheme: the dummy prefix
 * The post-processor (T5's TemplateProcessing appending </s>) and the decoder are not applied:
 * encoding gives the text's ids, and an end-of-sequence id is the caller's to add.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"
#include "tokenizer_spm_internal.h"

static int b64_val(int c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with '=' padding -> out (at least 3 * n / 4 bytes); the length, or -1. */
static long b64_decode(const char *s, size_t n, uint8_t *out) {
    if (n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0, pad++;
            } else {
                if (pad || (v[k] = b64_val((unsigned char)s[i + k])) < 0) return -1;
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

static const char *type_of(json_t *o) {
    return json_string_value(json_object_get(o, "type"));
}

/* A Precompiled normalizer's character map into ns. */
static ig_status precompiled(json_t *n, ig_spm_norm *ns, const char *path, ig_err *err) {
    json_t *cm = json_object_get(n, "precompiled_charsmap");
    if (json_is_null(cm) || !cm) return IG_OK; /* identity */
    const char *s = json_string_value(cm);
    if (!s)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: normalizer Precompiled: expected \"precompiled_charsmap\" to be a "
                          "base64 string",
                          path);
    size_t len = json_string_length(cm);
    free(ns->charsmap);
    ns->charsmap = malloc(len / 4 * 3 + 3);
    if (!ns->charsmap) return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", path);
    long got = b64_decode(s, len, ns->charsmap);
    if (got < 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: normalizer Precompiled: \"precompiled_charsmap\" is not valid "
                          "base64",
                          path);
    ns->charsmap_len = (size_t)got;
    snprintf(ns->name, sizeof ns->name, "Precompiled");
    return IG_OK;
}

/* Whether a Replace normalizer is the converters' collapse of space runs: " {2,}" -> " " or
 * U+2581. */
static int is_space_collapse(json_t *n) {
    const char *re = json_string_value(json_object_get(json_object_get(n, "pattern"), "Regex"));
    const char *content = json_string_value(json_object_get(n, "content"));
    return re && content && strcmp(re, " {2,}") == 0 &&
           (strcmp(content, " ") == 0 || strcmp(content, "\xE2\x96\x81") == 0);
}

static ig_status normalizer(json_t *n, ig_spm *m, int *collapse, const char *path, ig_err *err) {
    if (!n || json_is_null(n)) return IG_OK;
    const char *t = type_of(n);
    if (t && strcmp(t, "Precompiled") == 0) return precompiled(n, &m->norm, path, err);
    if (t && strcmp(t, "Sequence") == 0) {
        size_t i;
        json_t *item;
        json_array_foreach(json_object_get(n, "normalizers"), i, item) {
            const char *it = type_of(item);
            if (it && strcmp(it, "Precompiled") == 0) {
                ig_status st = precompiled(item, &m->norm, path, err);
                if (st != IG_OK) return st;
            } else if (it && strcmp(it, "Strip") == 0) {
                *collapse = 1; /* SentencePiece strips both ends when it collapses runs */
            } else if (it && strcmp(it, "Replace") == 0 && is_space_collapse(item)) {
                *collapse = 1;
            } else {
                return ig_err_set(err, IG_ERR_UNSUPPORTED,
                                  "%s: normalizer.normalizers[%zu] (%s) is not one ingot reads in "
                                  "a Unigram tokenizer.json: expected Precompiled, Strip (right) "
                                  "or Replace(\" {2,}\")",
                                  path, i, it ? it : "no type");
            }
        }
        return IG_OK;
    }
    return ig_err_set(err, IG_ERR_UNSUPPORTED,
                      "%s: normalizer %s is not one ingot reads in a Unigram tokenizer.json: "
                      "expected Precompiled or a Sequence of Precompiled, Strip and Replace",
                      path, t ? t : "without a type");
}

/* Metaspace: escaping and the dummy prefix; WhitespaceSplit: extra white space removed. */
static ig_status metaspace(json_t *p, ig_spm *m, int *split, int *seen, const char *path,
                           ig_err *err) {
    const char *t = type_of(p);
    if (t && strcmp(t, "WhitespaceSplit") == 0) {
        *split = 1;
        return IG_OK;
    }
    if (!t || strcmp(t, "Metaspace") != 0)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: pre_tokenizer %s is not one ingot reads in a Unigram "
                          "tokenizer.json: expected Metaspace, or WhitespaceSplit and Metaspace",
                          path, t ? t : "without a type");
    const char *rep = json_string_value(json_object_get(p, "replacement"));
    if (rep && strcmp(rep, "\xE2\x96\x81") != 0)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: pre_tokenizer Metaspace has replacement \"%s\": ingot reads "
                          "SentencePiece's U+2581 only",
                          path, rep);
    const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
    json_t *aps = json_object_get(p, "add_prefix_space");
    if (scheme)
        m->norm.add_dummy_prefix = strcmp(scheme, "never") != 0;
    else
        m->norm.add_dummy_prefix = !aps || json_is_true(aps);
    *seen = 1;
    return IG_OK;
}

static ig_status pre_tokenizer(json_t *p, ig_spm *m, int *split, const char *path, ig_err *err) {
    int seen = 0;
    ig_status st = IG_OK;
    const char *t = type_of(p);
    if (t && strcmp(t, "Sequence") == 0) {
        size_t i;
        json_t *item;
        json_array_foreach(json_object_get(p, "pretokenizers"), i, item) {
            if ((st = metaspace(item, m, split, &seen, path, err)) != IG_OK) return st;
        }
    } else if (p && !json_is_null(p)) {
        st = metaspace(p, m, split, &seen, path, err);
    }
    if (st == IG_OK && !seen)
        st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                        "%s: a Unigram tokenizer.json needs a Metaspace pre_tokenizer (spaces as "
                        "U+2581, as SentencePiece writes them)",
                        path);
    return st;
}

ig_status ig_tok_load_spm_hf(ig_tokenizer **out, ig_ctx *ctx, const char *path, json_t *root,
                             ig_err *err) {
    *out = NULL;
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *unk = json_object_get(model, "unk_id");
    ig_spm *m = ig_spm_new();
    if (!m) return ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", path);
    ig_status st = IG_OK;
    if (!json_is_array(vocab)) {
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: a Unigram model needs \"vocab\": an array of [piece, score] pairs",
                        path);
        goto fail;
    }
    if (!json_is_integer(unk) || json_integer_value(unk) < 0 ||
        (size_t)json_integer_value(unk) >= json_array_size(vocab)) {
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: model.unk_id must be the id of a piece of model.vocab (ingot needs an "
                        "unknown piece, as SentencePiece does)",
                        path);
        goto fail;
    }
    m->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    size_t i;
    json_t *v;
    char where[300];
    json_array_foreach(vocab, i, v) {
        json_t *p = json_array_get(v, 0), *sc = json_array_get(v, 1);
        if (json_array_size(v) != 2 || !json_is_string(p) || !json_is_number(sc)) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: model.vocab[%zu]: expected [piece, score] (a string and a "
                            "number)",
                            path, i);
            goto fail;
        }
        const char *ps = json_string_value(p);
        size_t pl = json_string_length(p);
        int type = IG_SPM_NORMAL;
        if (i == (size_t)json_integer_value(unk))
            type = IG_SPM_UNKNOWN;
        else if (m->byte_fallback && pl == 6 && memcmp(ps, "<0x", 3) == 0 && ps[5] == '>')
            type = IG_SPM_BYTE;
        snprintf(where, sizeof where, "%s: model.vocab[%zu]", path, i);
        if ((st = ig_spm_add_piece(m, ps, pl, (float)json_number_value(sc), type, where, err)) !=
            IG_OK)
            goto fail;
    }
    json_t *added = json_object_get(root, "added_tokens");
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id"), *content = json_object_get(v, "content");
        if (!json_is_integer(id) || !json_is_string(content)) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: added_tokens[%zu]: expected an integer \"id\" and a string "
                            "\"content\"",
                            path, i);
            goto fail;
        }
        json_int_t tid = json_integer_value(id);
        const char *c = json_string_value(content);
        size_t cl = json_string_length(content);
        if (tid < 0 || (size_t)tid >= m->n_pieces || m->len[tid] != cl ||
            memcmp(m->arena + m->off[tid], c, cl) != 0) {
            st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                            "%s: added_tokens[%zu] \"%s\" (id %lld) is not piece %lld of "
                            "model.vocab: ingot reads added tokens that are pieces of the "
                            "SentencePiece model",
                            path, i, c, (long long)tid, (long long)tid);
            goto fail;
        }
        if (m->type[tid] == IG_SPM_NORMAL)
            m->type[tid] =
                json_is_true(json_object_get(v, "special")) ? IG_SPM_CONTROL : IG_SPM_USER_DEFINED;
    }
    int collapse = 0, split = 0;
    m->norm.add_dummy_prefix = 1;
    if ((st = normalizer(json_object_get(root, "normalizer"), m, &collapse, path, err)) != IG_OK ||
        (st = pre_tokenizer(json_object_get(root, "pre_tokenizer"), m, &split, path, err)) != IG_OK)
        goto fail;
    m->norm.remove_extra_whitespaces = collapse || split;
    m->norm.escape_whitespaces = 1;
    m->model_type = IG_SPM_UNIGRAM;
    return ig_spm_finish(out, ctx, m, path, err);
fail:
    ig_spm_free(m);
    return st;
}
