/* video_shard_meta.c - a frame shard's manifest, PREFIX.json ("format": "ingot-video-shard"):
 * counts, sizes and xxh3 of both files, the version of PREFIX.clips (since that index's version
 * 2; the manifest's own format is unchanged, and older manifests without it still read), the source
 * videos, the bucket table, the caption shard, the caption text shard (since the texts were kept:
 * older manifests have no "texts" and still read), how the clips were sampled and which preprocess
 * output the shard belongs to. Hashes are 16 hex digits (JSON numbers lose precision past 2^53).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>

#include "json_fields.h"
#include "video_shard_internal.h"

void ig_video_shard_meta_clear(ig_video_shard_meta *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_sources; i++) free(m->sources[i]);
    free(m->sources);
    free(m->buckets);
    memset(m, 0, sizeof *m);
}

ig_status ig_video_shard_meta_write(const ig_video_shard_meta *m, const char *prefix, int overwrite,
                                    ig_err *err) {
    json_t *o = json_object(), *src = ig_json_sources(m->sources, m->n_sources),
           *bk = ig_json_buckets(m->buckets, m->n_buckets);
    int bad = !o || !src || !bk;
    if (!bad) {
        bad |= json_object_set_new(o, "format", json_string(IG_VIDEO_MANIFEST_FORMAT));
        bad |= json_object_set_new(o, "format_version", json_integer(IG_VIDEO_MANIFEST_VERSION));
        bad |= json_object_set_new(o, "clips", json_integer((json_int_t)m->clips));
        bad |= json_object_set_new(o, "frames", json_integer((json_int_t)m->frames));
        bad |= json_object_set_new(o, "raw_bytes", json_integer((json_int_t)m->raw_bytes));
        bad |= json_object_set_new(o, "compression", json_string(m->zstd ? "zstd" : "none"));
        bad |= json_object_set_new(o, "frames_bytes", json_integer((json_int_t)m->frames_bytes));
        bad |= json_object_set_new(o, "clips_bytes", json_integer((json_int_t)m->clips_bytes));
        bad |= json_object_set_new(o, "frames_xxh3", ig_json_hex64(m->frames_xxh3));
        bad |= json_object_set_new(o, "clips_xxh3", ig_json_hex64(m->clips_xxh3));
        if (m->clips_version)
            bad |= json_object_set_new(o, "clips_version", json_integer(m->clips_version));
        bad |= json_object_set_new(o, "captions", json_string(m->captions));
        bad |= json_object_set_new(o, "caption_documents",
                                   json_integer((json_int_t)m->caption_documents));
        if (m->texts[0]) bad |= json_object_set_new(o, "texts", json_string(m->texts));
        bad |= json_object_set_new(o, "sampling", json_string(m->sampling));
        bad |= json_object_set_new(o, "buckets", bk);
        bk = NULL;
        bad |= json_object_set_new(o, "sources", src);
        src = NULL;
        if (m->output[0]) bad |= json_object_set_new(o, "output", json_string(m->output));
        bad |= json_object_set_new(o, "tool_version", json_string(m->tool_version));
    }
    ig_status st =
        bad ? ig_err_set(err, IG_ERR_NOMEM, "out of memory writing the manifest of %s", prefix)
            : ig_json_write_manifest(o, prefix, overwrite, err);
    json_decref(o);
    json_decref(src);
    json_decref(bk);
    return st;
}

/* ---- reading ---- */

static ig_status from_json(ig_video_shard_meta *m, json_t *o, const char *path, ig_err *err) {
    char comp[16];
    ig_status st =
        ig_json_check_format(o, path, IG_VIDEO_MANIFEST_FORMAT, IG_VIDEO_MANIFEST_VERSION, err);
    if (st || (st = ig_json_get_u64(o, path, "clips", &m->clips, err)) ||
        (st = ig_json_get_u64(o, path, "frames", &m->frames, err)) ||
        (st = ig_json_get_u64(o, path, "raw_bytes", &m->raw_bytes, err)) ||
        (st = ig_json_get_str(o, path, "compression", comp, sizeof comp, err)) ||
        (st = ig_json_get_u64(o, path, "frames_bytes", &m->frames_bytes, err)) ||
        (st = ig_json_get_u64(o, path, "clips_bytes", &m->clips_bytes, err)) ||
        (st = ig_json_get_hex(o, path, "frames_xxh3", &m->frames_xxh3, err)) ||
        (st = ig_json_get_hex(o, path, "clips_xxh3", &m->clips_xxh3, err)) ||
        (st = ig_json_get_str(o, path, "captions", m->captions, sizeof m->captions, err)) ||
        (st = ig_json_get_u64(o, path, "caption_documents", &m->caption_documents, err)) ||
        (st = ig_json_get_str(o, path, "sampling", m->sampling, sizeof m->sampling, err)) ||
        (st = ig_json_get_str(o, path, "tool_version", m->tool_version, sizeof m->tool_version,
                              err)))
        return st;
    if (json_object_get(o, "clips_version") &&
        (st = ig_json_get_u32(o, path, "clips_version", &m->clips_version, err)) != IG_OK)
        return st;
    if (strcmp(comp, "zstd") && strcmp(comp, "none"))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: compression = \"%s\": expected zstd or none",
                          path, comp);
    m->zstd = !strcmp(comp, "zstd");
    if (strchr(m->captions, '/'))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: captions must be a file-name prefix", path);
    if (json_object_get(o, "texts") &&
        (st = ig_json_get_str(o, path, "texts", m->texts, sizeof m->texts, err)) != IG_OK)
        return st;
    if (strchr(m->texts, '/'))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: texts must be a file-name prefix", path);
    if ((st = ig_json_get_output(o, path, m->output, sizeof m->output, err)) != IG_OK) return st;
    if ((st = ig_json_get_sources(o, path, &m->sources, &m->n_sources, err)) != IG_OK) return st;
    return ig_json_get_buckets(o, path, &m->buckets, &m->n_buckets, err);
}

ig_status ig_video_shard_meta_read(ig_video_shard_meta *m, const char *prefix, ig_err *err) {
    memset(m, 0, sizeof *m);
    json_t *o = NULL;
    char *path = NULL;
    ig_status st = ig_json_load_manifest(prefix, &o, &path, err);
    if (st == IG_OK) st = from_json(m, o, path, err);
    json_decref(o);
    if (st != IG_OK) ig_video_shard_meta_clear(m);
    free(path);
    return st;
}

int ig_video_shard_is(const char *prefix) {
    char *clips = ig_shard_path(NULL, prefix, ".clips"),
         *list = ig_shard_path(NULL, prefix, ".shards.json");
    int yes = clips && ig_file_exists(clips);
    if (!yes && list && ig_file_exists(list)) {
        json_t *o = NULL;
        ig_err ignored;
        ig_json_load_file(list, IG_JSON_FILE_MAX, "a shard list", &o, &ignored);
        json_t *f = json_object_get(o, "format");
        yes = json_is_string(f) && !strcmp(json_string_value(f), "ingot-video-shard-list");
        json_decref(o);
    }
    free(clips);
    free(list);
    return yes;
}
