/* video_shard_meta.c - a frame shard's manifest, PREFIX.json ("format": "ingot-video-shard"):
 * counts, sizes and xxh3 of both files, the source videos, the bucket table, the caption shard,
 * how the clips were sampled and which preprocess output the shard belongs to. Hashes are 16
 * hex digits (JSON numbers lose precision past 2^53).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>

#include "video_shard_internal.h"

void ig_video_shard_meta_clear(ig_video_shard_meta *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_sources; i++) free(m->sources[i]);
    free(m->sources);
    free(m->buckets);
    memset(m, 0, sizeof *m);
}

static json_t *hex(uint64_t v) {
    char h[17];
    ig_hash64_hex(v, h);
    return json_string(h);
}

ig_status ig_video_shard_meta_write(const ig_video_shard_meta *m, const char *prefix, int overwrite,
                                    ig_err *err) {
    json_t *o = json_object(), *src = json_array(), *bk = json_array();
    int bad = !o || !src || !bk;
    for (size_t i = 0; !bad && i < m->n_sources; i++)
        bad |= json_array_append_new(src, json_string(m->sources[i]));
    for (size_t i = 0; !bad && i < m->n_buckets; i++) {
        const ig_clip_bucket *b = &m->buckets[i];
        bad |= json_array_append_new(
            bk, json_pack("{s:s,s:I,s:I,s:I,s:I}", "name", b->name, "frames", (json_int_t)b->frames,
                          "height", (json_int_t)b->height, "width", (json_int_t)b->width,
                          "batch_size", (json_int_t)b->batch_size));
    }
    if (!bad) {
        bad |= json_object_set_new(o, "format", json_string(IG_VIDEO_MANIFEST_FORMAT));
        bad |= json_object_set_new(o, "format_version", json_integer(IG_VIDEO_MANIFEST_VERSION));
        bad |= json_object_set_new(o, "clips", json_integer((json_int_t)m->clips));
        bad |= json_object_set_new(o, "frames", json_integer((json_int_t)m->frames));
        bad |= json_object_set_new(o, "raw_bytes", json_integer((json_int_t)m->raw_bytes));
        bad |= json_object_set_new(o, "compression", json_string(m->zstd ? "zstd" : "none"));
        bad |= json_object_set_new(o, "frames_bytes", json_integer((json_int_t)m->frames_bytes));
        bad |= json_object_set_new(o, "clips_bytes", json_integer((json_int_t)m->clips_bytes));
        bad |= json_object_set_new(o, "frames_xxh3", hex(m->frames_xxh3));
        bad |= json_object_set_new(o, "clips_xxh3", hex(m->clips_xxh3));
        bad |= json_object_set_new(o, "captions", json_string(m->captions));
        bad |= json_object_set_new(o, "caption_documents",
                                   json_integer((json_int_t)m->caption_documents));
        bad |= json_object_set_new(o, "sampling", json_string(m->sampling));
        bad |= json_object_set_new(o, "buckets", bk);
        bk = NULL;
        bad |= json_object_set_new(o, "sources", src);
        src = NULL;
        if (m->output[0]) bad |= json_object_set_new(o, "output", json_string(m->output));
        bad |= json_object_set_new(o, "tool_version", json_string(m->tool_version));
    }
    char *text = bad ? NULL : json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    char *path = ig_shard_path(NULL, prefix, ".json");
    ig_status st;
    if (!text || !path) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory writing the manifest of %s", prefix);
    } else {
        size_t len = strlen(text);
        text[len] = '\n';
        st = ig_write_file_atomic(path, text, len + 1, overwrite, err);
    }
    free(text);
    free(path);
    json_decref(o);
    json_decref(src);
    json_decref(bk);
    return st;
}

/* ---- reading ---- */

static ig_status missing(const char *path, const char *key, const char *type, ig_err *err) {
    return ig_err_set(err, IG_ERR_FORMAT, "%s: field \"%s\" is missing or not %s", path, key, type);
}

static ig_status get_u64(json_t *o, const char *path, const char *key, uint64_t *out, ig_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return missing(path, key, "a non-negative integer", err);
    *out = (uint64_t)json_integer_value(v);
    return IG_OK;
}

static ig_status get_str(json_t *o, const char *path, const char *key, char *out, size_t cap,
                         ig_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return missing(path, key, "a string", err);
    const char *s = json_string_value(v);
    if (strlen(s) >= cap)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: field \"%s\" is longer than %zu bytes", path,
                          key, cap - 1);
    memcpy(out, s, strlen(s) + 1);
    return IG_OK;
}

static ig_status get_hex(json_t *o, const char *path, const char *key, uint64_t *out, ig_err *err) {
    char h[32];
    ig_status st = get_str(o, path, key, h, sizeof h, err);
    if (st != IG_OK) return st;
    if (strlen(h) != 16 || strspn(h, "0123456789abcdef") != 16)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: field \"%s\" = \"%s\" is not 16 hex digits",
                          path, key, h);
    *out = strtoull(h, NULL, 16);
    return IG_OK;
}

static ig_status get_u32(json_t *o, const char *path, const char *key, uint32_t *out, ig_err *err) {
    uint64_t v = 0;
    ig_status st = get_u64(o, path, key, &v, err);
    if (st == IG_OK && v > UINT32_MAX)
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" is too large", path, key);
    if (st == IG_OK) *out = (uint32_t)v;
    return st;
}

static ig_status from_json(ig_video_shard_meta *m, json_t *o, const char *path, ig_err *err) {
    if (!json_is_object(o))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: expected a JSON object", path);
    char format[64], comp[16];
    uint64_t version = 0;
    ig_status st = get_str(o, path, "format", format, sizeof format, err);
    if (st == IG_OK && strcmp(format, IG_VIDEO_MANIFEST_FORMAT) != 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: format = \"%s\" but expected \"%s\"", path,
                          format, IG_VIDEO_MANIFEST_FORMAT);
    if (st == IG_OK) st = get_u64(o, path, "format_version", &version, err);
    if (st == IG_OK && version != IG_VIDEO_MANIFEST_VERSION)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: format_version = %" PRIu64 " but this ingot reads version %d "
                          "(upgrade ingot)",
                          path, version, IG_VIDEO_MANIFEST_VERSION);
    if (st || (st = get_u64(o, path, "clips", &m->clips, err)) ||
        (st = get_u64(o, path, "frames", &m->frames, err)) ||
        (st = get_u64(o, path, "raw_bytes", &m->raw_bytes, err)) ||
        (st = get_str(o, path, "compression", comp, sizeof comp, err)) ||
        (st = get_u64(o, path, "frames_bytes", &m->frames_bytes, err)) ||
        (st = get_u64(o, path, "clips_bytes", &m->clips_bytes, err)) ||
        (st = get_hex(o, path, "frames_xxh3", &m->frames_xxh3, err)) ||
        (st = get_hex(o, path, "clips_xxh3", &m->clips_xxh3, err)) ||
        (st = get_str(o, path, "captions", m->captions, sizeof m->captions, err)) ||
        (st = get_u64(o, path, "caption_documents", &m->caption_documents, err)) ||
        (st = get_str(o, path, "sampling", m->sampling, sizeof m->sampling, err)) ||
        (st = get_str(o, path, "tool_version", m->tool_version, sizeof m->tool_version, err)))
        return st;
    if (strcmp(comp, "zstd") && strcmp(comp, "none"))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: compression = \"%s\": expected zstd or none",
                          path, comp);
    m->zstd = !strcmp(comp, "zstd");
    if (strchr(m->captions, '/'))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: captions must be a file-name prefix", path);
    json_t *out = json_object_get(o, "output");
    if (out) {
        if (!json_is_string(out) || strchr(json_string_value(out), '/') ||
            strlen(json_string_value(out)) >= sizeof m->output)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: output must be a file-name prefix", path);
        snprintf(m->output, sizeof m->output, "%s", json_string_value(out));
    }
    json_t *src = json_object_get(o, "sources"), *bk = json_object_get(o, "buckets");
    if (!json_is_array(src)) return missing(path, "sources", "an array of strings", err);
    if (!json_is_array(bk)) return missing(path, "buckets", "an array", err);
    size_t ns = json_array_size(src), nb = json_array_size(bk);
    m->sources = calloc(ns ? ns : 1, sizeof *m->sources);
    m->buckets = calloc(nb ? nb : 1, sizeof *m->buckets);
    if (!m->sources || !m->buckets) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < ns; i++) {
        json_t *s = json_array_get(src, i);
        if (!json_is_string(s))
            return ig_err_set(err, IG_ERR_FORMAT, "%s: sources[%zu] is not a string", path, i);
        if (!(m->sources[i] = strdup(json_string_value(s))))
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        m->n_sources++;
    }
    for (size_t i = 0; i < nb; i++) {
        json_t *b = json_array_get(bk, i);
        ig_clip_bucket *d = &m->buckets[i];
        char where[64];
        snprintf(where, sizeof where, "%s (buckets[%zu])", path, i);
        if ((st = get_str(b, where, "name", d->name, sizeof d->name, err)) ||
            (st = get_u32(b, where, "frames", &d->frames, err)) ||
            (st = get_u32(b, where, "height", &d->height, err)) ||
            (st = get_u32(b, where, "width", &d->width, err)) ||
            (st = get_u32(b, where, "batch_size", &d->batch_size, err)))
            return st;
        if (!d->frames || !d->height || !d->width || !d->batch_size)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: a size of zero", where);
        m->n_buckets++;
    }
    return IG_OK;
}

ig_status ig_video_shard_meta_read(ig_video_shard_meta *m, const char *prefix, ig_err *err) {
    memset(m, 0, sizeof *m);
    char *path = ig_shard_path(NULL, prefix, ".json");
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st;
    if (!ig_file_exists(path)) {
        st = ig_err_set(err, IG_ERR_NOT_FOUND,
                        "%s: manifest missing (the shard was not finished: rerun the preprocess)",
                        path);
        free(path);
        return st;
    }
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        st = ig_err_set(err, IG_ERR_FORMAT, "%s:%d:%d: malformed manifest: %s", path, je.line,
                        je.column, je.text);
    } else {
        st = from_json(m, o, path, err);
        json_decref(o);
    }
    if (st != IG_OK) ig_video_shard_meta_clear(m);
    free(path);
    return st;
}

int ig_video_shard_is(const char *prefix) {
    char *clips = ig_shard_path(NULL, prefix, ".clips"),
         *list = ig_shard_path(NULL, prefix, ".shards.json");
    int yes = clips && ig_file_exists(clips);
    if (!yes && list && ig_file_exists(list)) {
        json_t *o = json_load_file(list, 0, NULL);
        json_t *f = json_object_get(o, "format");
        yes = json_is_string(f) && !strcmp(json_string_value(f), "ingot-video-shard-list");
        json_decref(o);
    }
    free(clips);
    free(list);
    return yes;
}
