/* list_json.c - lists of ingot's own shards (list_internal.h): written, expanded and verified
 * the same way for frame shards and caption-feature shards, whose entries differ only in the
 * checksum they carry.
 */
#include <inttypes.h>
#include <stdio.h>

#include "json_fields.h"
#include "list_internal.h"

size_t ig_list_dir_len(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? (size_t)(slash - path) + 1 : 0;
}

int ig_list_is(const ig_list_kind *k, const char *prefix) {
    char *list = ig_shard_path(NULL, prefix, ".shards.json");
    int yes = 0;
    if (list && ig_file_exists(list)) {
        json_t *o = NULL;
        ig_err ignored;
        ig_json_load_file(list, IG_JSON_FILE_MAX, "a shard list", &o, &ignored);
        json_t *f = json_object_get(o, "format");
        yes = json_is_string(f) && !strcmp(json_string_value(f), k->format);
        json_decref(o);
    }
    free(list);
    return yes;
}

ig_status ig_list_check_member(const char *prefix, const char *shard, ig_err *err) {
    size_t dl = ig_list_dir_len(prefix);
    if (ig_list_dir_len(shard) != dl || strncmp(shard, prefix, dl) != 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "shard %s is not in the directory of the list %s", shard, prefix);
    return IG_OK;
}

ig_status ig_list_write(const ig_list_kind *k, const char *prefix, json_t *totals, json_t *entries,
                        int overwrite, ig_err *err) {
    json_t *root = totals;
    ig_status st = root && entries ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) {
        json_object_set_new(root, "format", json_string(k->format));
        json_object_set_new(root, "version", json_integer(k->version));
        json_object_set_new(root, "shards", entries);
        entries = NULL;
        char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
        char *path = ig_shard_path(NULL, prefix, ".shards.json");
        st = text && path ? ig_write_file_atomic(path, text, strlen(text), overwrite, err)
                          : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        free(text);
        free(path);
    }
    json_decref(entries);
    json_decref(root);
    return st;
}

/* Loads and checks the list at path (which exists): *root holds it, *shards its array. */
static ig_status load_list(const ig_list_kind *k, const char *path, json_t **root, json_t **shards,
                           ig_err *err) {
    ig_status rs = ig_json_load_file(path, IG_JSON_FILE_MAX, "a shard list", root, err);
    if (rs != IG_OK) return rs;
    json_t *fmt = json_object_get(*root, "format"), *ver = json_object_get(*root, "version");
    *shards = json_object_get(*root, "shards");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), k->format) != 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"format\" must be \"%s\"", path, k->format);
    if (!json_is_integer(ver) || json_integer_value(ver) != k->version)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: this ingot reads version %d", path,
                          k->version);
    if (!json_is_array(*shards) || json_array_size(*shards) == 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"shards\" must be a non-empty array", path);
    size_t i;
    json_t *e;
    json_array_foreach(*shards, i, e) {
        json_t *p = json_object_get(e, "prefix");
        if (!json_is_string(p) || !*json_string_value(p) || strchr(json_string_value(p), '/') ||
            !json_is_integer(json_object_get(e, "clips")) ||
            !json_is_string(json_object_get(e, k->checksum)))
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: shards[%zu] needs a prefix (a file name), clips and %s", path, i,
                              k->checksum);
    }
    return IG_OK;
}

ig_status ig_list_expand(const ig_list_kind *k, const char *prefix, char ***out, size_t *n,
                         ig_err *err) {
    *out = NULL;
    *n = 0;
    char base[4096];
    if (ig_run_marker_covering(prefix, base, sizeof base))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s is output of an unfinished preprocess run (%s.incomplete exists): "
                          "the run was killed or is still going; rerun it",
                          prefix, base);
    char *path = ig_shard_path(NULL, prefix, ".shards.json");
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    char **list = NULL;
    size_t cnt = 1;
    ig_status st = IG_OK;
    json_t *root = NULL, *shards = NULL;
    if (!ig_file_exists(path)) {
        list = calloc(1, sizeof *list);
        if (!list || !(list[0] = strdup(prefix)))
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else if ((st = load_list(k, path, &root, &shards, err)) == IG_OK) {
        cnt = json_array_size(shards);
        size_t dl = ig_list_dir_len(prefix);
        list = calloc(cnt, sizeof *list);
        if (!list) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (size_t i = 0; st == IG_OK && i < cnt; i++) {
            const char *name =
                json_string_value(json_object_get(json_array_get(shards, i), "prefix"));
            size_t len = dl + strlen(name) + 1;
            if (!(list[i] = malloc(len)))
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            else
                snprintf(list[i], len, "%.*s%s", (int)dl, prefix, name);
        }
    }
    json_decref(root);
    free(path);
    if (st != IG_OK) {
        ig_shard_list_free(list, list ? cnt : 0);
        return st;
    }
    *out = list;
    *n = cnt;
    return IG_OK;
}

ig_status ig_list_verify(const ig_list_kind *k, ig_ctx *ctx, const char *prefix,
                         ig_list_verify_fn verify, ig_list_entry_fn entry, size_t *n_shards,
                         ig_err *err) {
    *n_shards = 0;
    char **list = NULL;
    size_t n = 0;
    ig_status st = ig_list_expand(k, prefix, &list, &n, err);
    char *path = ig_shard_path(NULL, prefix, ".shards.json");
    json_t *root = NULL, *shards = NULL;
    int listed = path && ig_file_exists(path);
    if (st == IG_OK && listed) st = load_list(k, path, &root, &shards, err);
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        if ((st = verify(ctx, list[i], err)) != IG_OK) break;
        *n_shards = i + 1;
        if (!listed) continue;
        uint64_t clips = 0, sum = 0;
        if ((st = entry(list[i], &clips, &sum, err)) != IG_OK) break;
        json_t *e = json_array_get(shards, i);
        char hex[17];
        ig_hash64_hex(sum, hex);
        if ((uint64_t)json_integer_value(json_object_get(e, "clips")) != clips ||
            strcmp(json_string_value(json_object_get(e, k->checksum)), hex) != 0)
            st = ig_err_set(err, IG_ERR_CHECKSUM,
                            "%s: shard %s is not the one the list recorded (clips or checksum "
                            "differ): it was replaced after the list was written",
                            path, list[i]);
    }
    json_decref(root);
    free(path);
    ig_shard_list_free(list, n);
    return st;
}
