/* json_fields.c - the JSON fields of ingot's manifests (json_fields.h). */
#include "json_fields.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard_internal.h"

json_t *ig_json_hex64(uint64_t v) {
    char h[17];
    ig_hash64_hex(v, h);
    return json_string(h);
}

ig_status ig_json_missing(const char *path, const char *key, const char *type, ig_err *err) {
    return ig_err_set(err, IG_ERR_FORMAT, "%s: field \"%s\" is missing or not %s", path, key, type);
}

ig_status ig_json_get_u64(json_t *o, const char *path, const char *key, uint64_t *out,
                          ig_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return ig_json_missing(path, key, "a non-negative integer", err);
    *out = (uint64_t)json_integer_value(v);
    return IG_OK;
}

ig_status ig_json_get_u32(json_t *o, const char *path, const char *key, uint32_t *out,
                          ig_err *err) {
    uint64_t v = 0;
    ig_status st = ig_json_get_u64(o, path, key, &v, err);
    if (st == IG_OK && v > UINT32_MAX)
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" is too large", path, key);
    if (st == IG_OK) *out = (uint32_t)v;
    return st;
}

ig_status ig_json_get_str(json_t *o, const char *path, const char *key, char *out, size_t cap,
                          ig_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return ig_json_missing(path, key, "a string", err);
    const char *s = json_string_value(v);
    if (strlen(s) >= cap)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: field \"%s\" is longer than %zu bytes", path,
                          key, cap - 1);
    memcpy(out, s, strlen(s) + 1);
    return IG_OK;
}

ig_status ig_json_get_hex(json_t *o, const char *path, const char *key, uint64_t *out,
                          ig_err *err) {
    char hex[32];
    ig_status st = ig_json_get_str(o, path, key, hex, sizeof hex, err);
    if (st != IG_OK) return st;
    /* exactly 16 lowercase hex digits, as written: no sign, spaces or 0x (strtoull takes those) */
    if (strlen(hex) != 16 || strspn(hex, "0123456789abcdef") != 16)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: field \"%s\" = \"%s\" is not 16 hex digits",
                          path, key, hex);
    *out = strtoull(hex, NULL, 16);
    return IG_OK;
}

ig_status ig_json_write_manifest(json_t *o, const char *prefix, int overwrite, ig_err *err) {
    char *path = ig_shard_path(NULL, prefix, ".json");
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    ig_status st;
    if (!path || !text) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory writing the manifest of %s", prefix);
    } else {
        size_t len = strlen(text);
        text[len] = '\n'; /* replaces the NUL: the file ends with a newline */
        st = ig_write_file_atomic(path, text, len + 1, overwrite, err);
    }
    free(text);
    free(path);
    return st;
}

json_t *ig_json_sources(char *const *sources, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(sources[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

json_t *ig_json_buckets(const ig_clip_bucket *buckets, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        const ig_clip_bucket *b = &buckets[i];
        if (json_array_append_new(a, json_pack("{s:s,s:I,s:I,s:I,s:I}", "name", b->name, "frames",
                                               (json_int_t)b->frames, "height",
                                               (json_int_t)b->height, "width", (json_int_t)b->width,
                                               "batch_size", (json_int_t)b->batch_size))) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

ig_status ig_json_get_sources(json_t *o, const char *path, char ***out, size_t *n, ig_err *err) {
    json_t *src = json_object_get(o, "sources");
    if (!json_is_array(src)) return ig_json_missing(path, "sources", "an array of strings", err);
    size_t ns = json_array_size(src);
    if (!(*out = calloc(ns ? ns : 1, sizeof **out)))
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < ns; i++) {
        json_t *s = json_array_get(src, i);
        if (!json_is_string(s))
            return ig_err_set(err, IG_ERR_FORMAT, "%s: sources[%zu] is not a string", path, i);
        if (!((*out)[i] = strdup(json_string_value(s))))
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        (*n)++;
    }
    return IG_OK;
}

ig_status ig_json_get_buckets(json_t *o, const char *path, ig_clip_bucket **out, size_t *n,
                              ig_err *err) {
    json_t *bk = json_object_get(o, "buckets");
    if (!json_is_array(bk)) return ig_json_missing(path, "buckets", "an array", err);
    size_t nb = json_array_size(bk);
    if (!(*out = calloc(nb ? nb : 1, sizeof **out)))
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nb; i++) {
        json_t *b = json_array_get(bk, i);
        ig_clip_bucket *d = &(*out)[i];
        char where[64];
        snprintf(where, sizeof where, "%s (buckets[%zu])", path, i);
        ig_status st;
        if ((st = ig_json_get_str(b, where, "name", d->name, sizeof d->name, err)) ||
            (st = ig_json_get_u32(b, where, "frames", &d->frames, err)) ||
            (st = ig_json_get_u32(b, where, "height", &d->height, err)) ||
            (st = ig_json_get_u32(b, where, "width", &d->width, err)) ||
            (st = ig_json_get_u32(b, where, "batch_size", &d->batch_size, err)))
            return st;
        if (!d->frames || !d->height || !d->width || !d->batch_size)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: a size of zero", where);
        (*n)++;
    }
    return IG_OK;
}

ig_status ig_json_get_output(json_t *o, const char *path, char *out, size_t cap, ig_err *err) {
    json_t *v = json_object_get(o, "output");
    if (!v) return IG_OK;
    if (!json_is_string(v) || strchr(json_string_value(v), '/') ||
        strlen(json_string_value(v)) >= cap)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: output must be a file-name prefix", path);
    snprintf(out, cap, "%s", json_string_value(v));
    return IG_OK;
}

ig_status ig_json_load_manifest(const char *prefix, json_t **o, char **path, ig_err *err) {
    *o = NULL;
    if (!(*path = ig_shard_path(NULL, prefix, ".json")))
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (!ig_file_exists(*path))
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s: manifest missing (the shard was not finished: rerun the preprocess)",
                          *path);
    return ig_json_load_file(*path, IG_JSON_FILE_MAX, "a shard manifest", o, err);
}

ig_status ig_json_check_format(json_t *o, const char *path, const char *format, int version,
                               ig_err *err) {
    if (!json_is_object(o))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: expected a JSON object", path);
    char got[64];
    uint64_t v = 0;
    ig_status st = ig_json_get_str(o, path, "format", got, sizeof got, err);
    if (st != IG_OK) return st;
    if (strcmp(got, format) != 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: format = \"%s\" but expected \"%s\"", path, got,
                          format);
    if ((st = ig_json_get_u64(o, path, "format_version", &v, err)) != IG_OK) return st;
    if (v != (uint64_t)version)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: format_version = %" PRIu64 " but this ingot reads version %d "
                          "(upgrade ingot)",
                          path, v, version);
    return IG_OK;
}
