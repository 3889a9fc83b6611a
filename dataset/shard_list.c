/* shard_list.c - PREFIX.shards.json: one manifest over the shards of a sharded or multi-process
 * preprocess run, so that the whole output can be named by one prefix. Entries hold names
 * relative to the list's directory, so the files can be moved together. */
#include "dataset/dataset.h"

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

/* Loads and checks the list at path; *root is the parsed JSON, *shards its array. */
static ig_status load_list(const char *path, json_t **root, json_t **shards, ig_err *err) {
    json_error_t je;
    *root = json_load_file(path, 0, &je);
    if (!*root)
        return ig_err_set(err, IG_ERR_FORMAT, "%s:%d:%d: malformed shard list: %s", path, je.line,
                          je.column, je.text);
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
    size_t i;
    json_t *e;
    json_array_foreach(*shards, i, e) {
        json_t *p = json_object_get(e, "prefix");
        if (!json_is_string(p) || !*json_string_value(p) || strchr(json_string_value(p), '/'))
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: shards[%zu].prefix must be a file name prefix (no '/')", path,
                              i);
        if (!json_is_integer(json_object_get(e, "documents")) ||
            !json_is_integer(json_object_get(e, "tokens")) ||
            !json_is_string(json_object_get(e, "bin_xxh3")))
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: shards[%zu] needs documents, tokens and bin_xxh3", path, i);
    }
    return IG_OK;
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
    char **list = NULL;
    size_t n = 0;
    json_t *root = NULL, *shards = NULL;
    ig_status st = load_list(path, &root, &shards, err);
    if (st == IG_OK) st = ig_shard_list_expand(prefix, &list, &n, err);
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        if ((st = ig_shard_verify(ctx, list[i], err)) != IG_OK) break;
        ig_manifest m = {0};
        if ((st = ig_manifest_read(&m, list[i], err)) != IG_OK) break;
        json_t *e = json_array_get(shards, i);
        char bin[17];
        hex64(m.bin_xxh3, bin);
        if ((uint64_t)json_integer_value(json_object_get(e, "documents")) != m.documents ||
            (uint64_t)json_integer_value(json_object_get(e, "tokens")) != m.tokens ||
            strcmp(json_string_value(json_object_get(e, "bin_xxh3")), bin) != 0)
            st = ig_err_set(err, IG_ERR_CHECKSUM,
                            "%s: shard %s is not the one the list recorded (documents, tokens or "
                            "checksum differ): it was replaced after the list was written",
                            path, list[i]);
        ig_manifest_clear(&m);
        *n_shards = i + 1;
    }
    ig_shard_list_free(list, n);
    json_decref(root);
    free(path);
    return st;
}
