/* feature_shard_reader.c - opens a caption-feature shard read-only (both files mapped, the index
 * validated whole and checked against the manifest on open), gives a clip's values, and the
 * complete check behind `ingot verify`: structure, manifest, the checksums of both files and of
 * every clip's values.
 */
#include <inttypes.h>
#include <stdio.h>

#include "feature_shard_internal.h"

struct ig_feature_shard {
    ig_ctx *ctx;
    char *prefix;
    ig_mapped_file feat, fidx;
    ig_feat_header h;
    ig_feature_meta meta;
    int has_meta;
};

void ig_feature_shard_close(ig_feature_shard *s) {
    if (!s) return;
    ig_mapped_file_close(&s->feat);
    ig_mapped_file_close(&s->fidx);
    ig_feature_meta_clear(&s->meta);
    free(s->prefix);
    ig_free(s->ctx, s);
}

/* The manifest must describe the index it sits beside (and the index be the one it hashed). */
static ig_status check_meta(const ig_feature_shard *s, ig_err *err) {
    const ig_feature_meta *m = &s->meta;
    const ig_feat_header *h = &s->h;
    const char *what = m->clips != h->clips               ? "clips"
                       : m->first_clip != h->first_clip   ? "first_clip"
                       : m->data_clips != h->data_clips   ? "data_clips"
                       : m->clip_key != h->clip_key       ? "clip_key"
                       : m->caption_len != h->caption_len ? "caption_len"
                       : m->width != h->width             ? "width"
                       : m->encoder.width != h->width     ? "encoder.width"
                       : (uint32_t)m->dtype != h->dtype   ? "dtype"
                       : m->feat_bytes != s->feat.size    ? "feat_bytes"
                       : m->fidx_bytes != s->fidx.size    ? "fidx_bytes"
                                                          : NULL;
    if (what)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s.json: \"%s\" does not match %s.fidx (the manifest describes other "
                          "data; make the features again)",
                          s->prefix, what, s->prefix);
    if (ig_xxh3_64(s->fidx.data, s->fidx.size) != m->fidx_xxh3)
        return ig_err_set(err, IG_ERR_CHECKSUM,
                          "%s.fidx: its xxh3 is not the one the manifest records (the index was "
                          "modified or is damaged; make the features again)",
                          s->prefix);
    return IG_OK;
}

/* A shard of an output whose run has not finished (its marker, or the manifest's output's). */
static ig_status unfinished(const char *prefix, const char *output, ig_err *err) {
    char base[4096] = "";
    int covered = ig_run_marker_covering(prefix, base, sizeof base);
    if (!covered && output && output[0]) {
        const char *slash = strrchr(prefix, '/');
        int dl = slash ? (int)(slash - prefix) + 1 : 0;
        snprintf(base, sizeof base, "%.*s%s", dl, prefix, output);
        covered = ig_run_marker_exists(base);
    }
    if (!covered) return IG_OK;
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s belongs to the output %s of an unfinished preprocess run "
                      "(%s.incomplete exists): the run was killed or is still going; rerun it",
                      prefix, base, base);
}

ig_status ig_feature_shard_open(ig_feature_shard **out, ig_ctx *ctx, const char *prefix,
                                ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    *out = NULL;
    ig_feature_shard *s = ig_alloc(ctx, sizeof *s);
    if (!s) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->prefix = strdup(prefix);
    char *fp = ig_shard_path(NULL, prefix, ".feat"), *ip = ig_shard_path(NULL, prefix, ".fidx");
    char *jp = ig_shard_path(NULL, prefix, ".json");
    ig_status st = IG_OK;
    if (!s->prefix || !fp || !ip || !jp)
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    else if (!ig_file_exists(ip) || !ig_file_exists(fp))
        st = ig_err_set(err, IG_ERR_NOT_FOUND,
                        "%s: no such caption-feature shard (%s is missing; a caption-feature "
                        "shard is PREFIX.feat + PREFIX.fidx, give the PREFIX without extension)",
                        prefix, ig_file_exists(ip) ? fp : ip);
    if (st == IG_OK) st = unfinished(prefix, NULL, err);
    if (st == IG_OK) st = ig_mapped_file_open(&s->fidx, ip, err);
    if (st == IG_OK) st = ig_mapped_file_open(&s->feat, fp, err);
    if (st == IG_OK)
        st = ig_feat_validate(s->fidx.data, s->fidx.size, s->feat.size, ip, &s->h, err);
    if (st == IG_OK && ig_file_exists(jp)) {
        st = ig_feature_meta_read(&s->meta, prefix, err);
        s->has_meta = st == IG_OK;
        if (st == IG_OK) st = check_meta(s, err);
        if (st == IG_OK) st = unfinished(prefix, s->meta.output, err);
    }
    free(fp);
    free(ip);
    free(jp);
    if (st != IG_OK) {
        ig_feature_shard_close(s);
        return st;
    }
    *out = s;
    return IG_OK;
}

const char *ig_feature_shard_prefix(const ig_feature_shard *s) {
    return s->prefix;
}
uint64_t ig_feature_shard_clips(const ig_feature_shard *s) {
    return s->h.clips;
}
uint64_t ig_feature_shard_first_clip(const ig_feature_shard *s) {
    return s->h.first_clip;
}
const ig_feature_meta *ig_feature_shard_meta(const ig_feature_shard *s) {
    return s->has_meta ? &s->meta : NULL;
}

ig_status ig_feature_shard_clip(const ig_feature_shard *s, uint64_t i, const void **values,
                                uint32_t *len, int verify, ig_err *err) {
    *values = NULL;
    *len = 0;
    if (i >= s->h.clips)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: clip %" PRIu64 " is out of range (%" PRIu64 " clips)", s->prefix, i,
                          s->h.clips);
    ig_feat_record r =
        ig_feat_decode_record(s->fidx.data + IG_FEAT_HEADER_BYTES + i * IG_FEAT_RECORD_BYTES);
    if (r.len == 0) return IG_OK;
    const uint8_t *p = s->feat.data + r.offset;
    size_t bytes = (size_t)r.len * s->h.width * ig_feat_value_bytes(s->h.dtype);
    if (verify && ig_xxh3_64(p, bytes) != r.xxh3)
        return ig_err_set(err, IG_ERR_CHECKSUM,
                          "%s.feat: clip %" PRIu64 "'s features do not match their checksum (the "
                          "file was modified or is damaged; make the features again)",
                          s->prefix, i);
    *values = p;
    *len = r.len;
    return IG_OK;
}

ig_status ig_feature_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    ig_feature_shard *s = NULL;
    ig_status st = ig_feature_shard_open(&s, ctx, prefix, err);
    if (st != IG_OK) return st;
    if (!s->has_meta) {
        ig_feature_meta m;
        st = ig_feature_meta_read(&m, prefix, err); /* the "manifest missing" message */
        ig_feature_meta_clear(&m);
        if (st == IG_OK) st = ig_err_set(err, IG_ERR_NOT_FOUND, "%s.json: missing", prefix);
    }
    if (st == IG_OK && ig_xxh3_64(s->feat.data, s->feat.size) != s->meta.feat_xxh3)
        st = ig_err_set(err, IG_ERR_CHECKSUM,
                        "%s.feat: its xxh3 is not the one the manifest records (the file was "
                        "modified or is damaged; make the features again)",
                        prefix);
    for (uint64_t i = 0; st == IG_OK && i < s->h.clips; i++) {
        const void *v;
        uint32_t len;
        st = ig_feature_shard_clip(s, i, &v, &len, 1, err);
    }
    uint64_t captioned = 0, tokens = 0;
    for (uint64_t i = 0; st == IG_OK && i < s->h.clips; i++) {
        ig_feat_record r =
            ig_feat_decode_record(s->fidx.data + IG_FEAT_HEADER_BYTES + i * IG_FEAT_RECORD_BYTES);
        captioned += r.len > 0;
        tokens += r.len;
    }
    if (st == IG_OK && (captioned != s->meta.captioned || tokens != s->meta.tokens))
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s.json: %" PRIu64 " captions of %" PRIu64
                        " tokens, the index holds %" PRIu64 " of %" PRIu64
                        " (the manifest describes other data; make the features "
                        "again)",
                        prefix, s->meta.captioned, s->meta.tokens, captioned, tokens);
    ig_feature_shard_close(s);
    return st;
}

void ig_feature_shard_remove(const char *prefix) {
    static const char *const exts[] = {".json", ".fidx", ".feat"};
    for (size_t i = 0; i < 3; i++) {
        char *p = ig_shard_path(NULL, prefix, exts[i]);
        if (p) remove(p);
        free(p);
    }
}
