/* shard_list.c - PREFIX.shards.json: one manifest over the shards of a sharded or multi-process
 * preprocess run, so that the whole output can be named by one prefix. Entries hold names
 * relative to the list's directory, so the files can be moved together. */
#include "json_fields.h"
#include "shard_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_FORMAT  "ingot-shard-list"
#define LIST_VERSION 1

static char *list_path(const char *prefix) {
    size_t n = strlen(prefix) + sizeof ".shards.json";
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s.shards.json", prefix);
    return p;
}

/* Length of the directory part of path, including its slash (0 for a bare name). */
static size_t dir_len(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) + 1 : 0;
}

static void hex64(uint64_t v, char out[17]) {
    ig_hash64_hex(v, out);
}

ig_status ig_shard_list_write(const char *prefix, const char *const *shards, size_t n,
                              int overwrite, ig_err *err) {
    if (n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "a shard list needs shards");
    size_t dl = dir_len(prefix);
    json_t *root = json_object(), *arr = json_array();
    uint64_t docs = 0, toks = 0;
    ig_status st = IG_OK;
    for (size_t i = 0; i < n && st == IG_OK; i++) {
        if (dir_len(shards[i]) != dl || strncmp(shards[i], prefix, dl) != 0) {
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "shard %s is not in the directory of the list %s", shards[i], prefix);
            break;
        }
        ig_manifest m = {0};
        if ((st = ig_manifest_read(&m, shards[i], err)) != IG_OK) break;
        docs += m.documents;
        toks += m.tokens;
        char bin[17], idx[17];
        hex64(m.bin_xxh3, bin);
        hex64(m.idx_xxh3, idx);
        json_array_append_new(arr,
                              json_pack("{s:s,s:I,s:I,s:s,s:s}", "prefix", shards[i] + dl,
                                        "documents", (json_int_t)m.documents, "tokens",
                                        (json_int_t)m.tokens, "bin_xxh3", bin, "idx_xxh3", idx));
        if (i == 0) {
            char th[17];
            hex64(m.tokenizer_hash, th);
            json_object_set_new(root, "tokenizer", json_string(m.tokenizer));
            json_object_set_new(root, "tokenizer_hash", json_string(th));
        }
        ig_manifest_clear(&m);
    }
    if (st == IG_OK) {
        json_object_set_new(root, "format", json_string(LIST_FORMAT));
        json_object_set_new(root, "version", json_integer(LIST_VERSION));
        json_object_set_new(root, "documents", json_integer((json_int_t)docs));
        json_object_set_new(root, "tokens", json_integer((json_int_t)toks));
        json_object_set_new(root, "shards", arr);
        arr = NULL;
        char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
        char *path = list_path(prefix);
        if (!text || !path)
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        else
            st = ig_write_file_atomic(path, text, strlen(text), overwrite, err);
        free(text);
        free(path);
    }
    json_decref(arr);
    json_decref(root);
    return st;
}

void ig_shard_list_free(char **list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) free(list[i]);
    free(list);
}

/* 1 when v is a JSON string of exactly 16 lowercase hex digits (as written). */
static int is_hex16(json_t *v) {
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    return s && strlen(s) == 16 && strspn(s, "0123456789abcdef") == 16;
}

static int is_count(json_t *v) {
    return json_is_integer(v) && json_integer_value(v) >= 0;
}

/* Loads and checks the list at path; *root is the parsed JSON, *shards its array. Every entry is
 * a distinct file-name prefix with counts and 16-hex-digit checksums, and the list's totals are
 * the sums of its entries'. */
static ig_status load_list(const char *path, json_t **root, json_t **shards, ig_err *err) {
    ig_status rs = ig_json_load_file(path, IG_JSON_FILE_MAX, "a shard list", root, err);
    if (rs != IG_OK) return rs;
    json_t *fmt = json_object_get(*root, "format"), *ver = json_object_get(*root, "version");
    *shards = json_object_get(*root, "shards");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), LIST_FORMAT) != 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"format\" must be \"%s\"", path, LIST_FORMAT);
    if (!json_is_integer(ver) || json_integer_value(ver) != LIST_VERSION)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: shard list version %lld is not supported (this ingot reads %d)",
                          path, json_is_integer(ver) ? (long long)json_integer_value(ver) : -1LL,
                          LIST_VERSION);
    if (!json_is_array(*shards) || json_array_size(*shards) == 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"shards\" must be a non-empty array", path);
    json_t *th = json_object_get(*root, "tokenizer_hash");
    if (th && !is_hex16(th))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: \"tokenizer_hash\" must be 16 lowercase hex digits (the list is "
                          "damaged; rewrite it with a rerun or `ingot merge`)",
                          path);
    json_t *tok = json_object_get(*root, "tokenizer");
    if (tok && !json_is_string(tok))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"tokenizer\" must be a string", path);
    json_t *jd = json_object_get(*root, "documents"), *jt = json_object_get(*root, "tokens");
    if (!is_count(jd) || !is_count(jt))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: \"documents\" and \"tokens\" must be non-negative integers", path);
    /* entries: well formed, each prefix once (a repeated shard would be read twice) */
    json_t *seen = json_object();
    if (!seen) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    uint64_t docs = 0, toks = 0;
    ig_status st = IG_OK;
    size_t i;
    json_t *e;
    json_array_foreach(*shards, i, e) {
        json_t *p = json_object_get(e, "prefix");
        if (!json_is_string(p) || !*json_string_value(p) || strchr(json_string_value(p), '/')) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: shards[%zu].prefix must be a file name prefix (no '/')", path, i);
            break;
        }
        json_t *d = json_object_get(e, "documents"), *t = json_object_get(e, "tokens");
        json_t *bx = json_object_get(e, "bin_xxh3"), *ix = json_object_get(e, "idx_xxh3");
        if (!is_count(d) || !is_count(t) || !is_hex16(bx) || (ix && !is_hex16(ix))) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: shards[%zu] needs documents and tokens (non-negative integers) "
                            "and bin_xxh3 (16 lowercase hex digits; idx_xxh3 too, when present)",
                            path, i);
            break;
        }
        const char *name = json_string_value(p);
        json_t *before = json_object_get(seen, name);
        if (before) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: shards[%lld] and shards[%zu] are both %s: a shard may be listed "
                            "once (the list is damaged)",
                            path, (long long)json_integer_value(before), i, name);
            break;
        }
        json_object_set_new(seen, name, json_integer((json_int_t)i));
        docs += (uint64_t)json_integer_value(d);
        toks += (uint64_t)json_integer_value(t);
    }
    json_decref(seen);
    if (st != IG_OK) return st;
    if (docs != (uint64_t)json_integer_value(jd) || toks != (uint64_t)json_integer_value(jt))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: the list says %lld documents and %lld tokens but its shards add up "
                          "to %llu and %llu (the list is damaged)",
                          path, (long long)json_integer_value(jd),
                          (long long)json_integer_value(jt), (unsigned long long)docs,
                          (unsigned long long)toks);
    return IG_OK;
}

/* Shard `name` (entry e of the list at path, whose JSON is root) is the one the list recorded: its
 * manifest's counts and checksums are the entry's, and its tokenizer the list's. */
static ig_status check_entry(const char *path, json_t *root, json_t *e, const char *name,
                             ig_err *err) {
    ig_manifest m = {0};
    ig_status st = ig_manifest_read(&m, name, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "%s: listed shard %s", path, name);
    char th[17];
    hex64(m.tokenizer_hash, th);
    json_t *lth = json_object_get(root, "tokenizer_hash");
    if (lth && strcmp(json_string_value(lth), th) != 0) {
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: tokenizer_hash = %s but shard %s was made with tokenizer hash %s "
                        "(the list is damaged, or names shards of another run)",
                        path, json_string_value(lth), name, th);
        ig_manifest_clear(&m);
        return st;
    }
    char bin[17], idx[17];
    hex64(m.bin_xxh3, bin);
    hex64(m.idx_xxh3, idx);
    json_t *ix = json_object_get(e, "idx_xxh3");
    if ((uint64_t)json_integer_value(json_object_get(e, "documents")) != m.documents ||
        (uint64_t)json_integer_value(json_object_get(e, "tokens")) != m.tokens ||
        strcmp(json_string_value(json_object_get(e, "bin_xxh3")), bin) != 0 ||
        (ix && strcmp(json_string_value(ix), idx) != 0))
        st = ig_err_set(err, IG_ERR_CHECKSUM,
                        "%s: shard %s is not the one the list recorded (documents, tokens or "
                        "checksums differ): it was replaced after the list was written, or the "
                        "list was edited",
                        path, name);
    ig_manifest_clear(&m);
    return st;
}

ig_status ig_shard_list_expand(const char *prefix, char ***out, size_t *n, ig_err *err) {
    *out = NULL;
    *n = 0;
    char base[4096];
    if (ig_run_marker_covering(prefix, base, sizeof base))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s is output of an unfinished preprocess run (%s.incomplete exists): "
                          "the run was killed or is still going; rerun it",
                          prefix, base);
    char *path = list_path(prefix);
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (!ig_file_exists(path)) {
        free(path);
        char **one = calloc(1, sizeof *one);
        if (one) one[0] = strdup(prefix);
        if (!one || !one[0]) {
            free(one);
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        }
        *out = one;
        *n = 1;
        return IG_OK;
    }
    json_t *root = NULL, *shards = NULL;
    ig_status st = load_list(path, &root, &shards, err);
    if (st == IG_OK) {
        size_t cnt = json_array_size(shards), dl = dir_len(prefix);
        char **list = calloc(cnt, sizeof *list);
        if (!list) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (size_t i = 0; st == IG_OK && i < cnt; i++) {
            const char *name =
                json_string_value(json_object_get(json_array_get(shards, i), "prefix"));
            size_t len = dl + strlen(name) + 1;
            list[i] = malloc(len);
            if (!list[i]) {
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
                break;
            }
            snprintf(list[i], len, "%.*s%s", (int)dl, prefix, name);
            st = check_entry(path, root, json_array_get(shards, i), list[i], err);
        }
        if (st == IG_OK) {
            *out = list;
            *n = cnt;
        } else {
            ig_shard_list_free(list, cnt);
        }
    }
    json_decref(root);
    free(path);
    return st;
}

ig_status ig_shard_list_verify(ig_ctx *ctx, const char *prefix, size_t *n_shards, ig_err *err) {
    *n_shards = 0;
    char *path = list_path(prefix);
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (!ig_file_exists(path)) {
        free(path);
        *n_shards = 1;
        return ig_shard_verify(ctx, prefix, err);
    }
    free(path);
    /* expand checks the list and that each shard is the one it recorded */
    char **list = NULL;
    size_t n = 0;
    ig_status st = ig_shard_list_expand(prefix, &list, &n, err);
    if (st == IG_OK) st = ig_shard_verify_many(ctx, list, n, n_shards, err);
    ig_shard_list_free(list, n);
    return st;
}
