/* json_fields.c - the JSON fields of ingot's manifests (json_fields.h). */
#include "json_fields.h"

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
