/* feature_shard_writer.c - writes a caption-feature shard: each clip's values stream into
 * PREFIX.feat under a temporary name; the records (24 bytes a clip) stay in memory and go into
 * PREFIX.fidx at finish, which commits the data first and the index second; the caller writes the
 * manifest last, so that no manifest describes data that is not there.
 */
#include <inttypes.h>
#include <stdio.h>

#include "feature_shard_internal.h"

struct ig_feature_shard_writer {
    ig_ctx *ctx;
    char *prefix;
    ig_feature_shard_writer_opts o;
    ig_atomic_file *feat;
    ig_xxh3_stream *hash;
    ig_feat_record *recs; /* [n, cap] */
    uint64_t n, cap, bytes;
};

void ig_feature_shard_writer_abort(ig_feature_shard_writer *w) {
    if (!w) return;
    ig_atomic_file_abort(w->feat);
    ig_xxh3_stream_free(w->hash);
    free(w->recs);
    free(w->prefix);
    ig_free(w->ctx, w);
}

ig_status ig_feature_shard_writer_create(ig_feature_shard_writer **out, ig_ctx *ctx,
                                         const char *prefix,
                                         const ig_feature_shard_writer_opts *opts, ig_err *err) {
    *out = NULL;
    const ig_feature_shard_writer_opts *o = opts;
    if (!ig_feat_value_bytes(o->dtype) || o->width < 1 || o->width > IG_FEAT_MAX_WIDTH ||
        o->caption_len < 1 || o->caption_len > IG_FEAT_MAX_LEN || o->first_clip > o->data_clips)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: features of dtype %d, width %u, caption length %u from clip %" PRIu64
                          " of %" PRIu64 ": need fp32 or bf16, a width of 1 to %u, a caption "
                          "length of 1 to %u and a clip within the data",
                          prefix, (int)o->dtype, o->width, o->caption_len, o->first_clip,
                          o->data_clips, IG_FEAT_MAX_WIDTH, IG_FEAT_MAX_LEN);
    ig_feature_shard_writer *w = ig_alloc(ctx, sizeof *w);
    if (!w) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->o = *o;
    w->prefix = strdup(prefix);
    w->hash = ig_xxh3_stream_create();
    char *fp = ig_shard_path(NULL, prefix, ".feat"), *jp = ig_shard_path(NULL, prefix, ".json");
    ig_status st = IG_OK;
    if (!w->prefix || !w->hash || !fp || !jp) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else if (!o->overwrite && ig_file_exists(jp)) {
        st = ig_err_set(err, IG_ERR_EXISTS, "%s exists", jp);
        ig_err_fix(err, "overwrite", NULL);
    } else {
        if (o->overwrite) remove(jp); /* no manifest may describe the old data meanwhile */
        st = ig_atomic_file_create(&w->feat, fp, o->overwrite, err);
    }
    free(fp);
    free(jp);
    if (st != IG_OK) {
        ig_feature_shard_writer_abort(w);
        return st;
    }
    *out = w;
    return IG_OK;
}

ig_status ig_feature_shard_writer_add(ig_feature_shard_writer *w, const void *values, uint32_t len,
                                      int repeat, ig_err *err) {
    if (w->n == w->cap) {
        uint64_t cap = w->cap ? 2 * w->cap : 1024;
        ig_feat_record *r = realloc(w->recs, cap * sizeof *r);
        if (!r) return ig_err_set(err, IG_ERR_NOMEM, "out of memory for the feature records");
        w->recs = r, w->cap = cap;
    }
    ig_feat_record r = {.offset = w->bytes, .len = len, .xxh3 = 0};
    if (repeat) {
        if (w->n == 0 || w->recs[w->n - 1].len == 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "%s: clip %" PRIu64 " repeats the previous clip's caption, which "
                              "has none",
                              w->prefix, w->n);
        r = w->recs[w->n - 1];
    } else if (len) {
        if (len > w->o.caption_len)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "%s: clip %" PRIu64 " has %u tokens, past the caption length %u",
                              w->prefix, w->n, len, w->o.caption_len);
        size_t bytes = (size_t)len * w->o.width * ig_feat_value_bytes(w->o.dtype);
        r.xxh3 = ig_xxh3_64(values, bytes);
        ig_status st = ig_atomic_file_write(w->feat, values, bytes, err);
        if (st != IG_OK) return st;
        ig_xxh3_stream_update(w->hash, values, bytes);
        w->bytes += bytes;
    }
    w->recs[w->n++] = r;
    return IG_OK;
}

uint64_t ig_feature_shard_writer_clips(const ig_feature_shard_writer *w) {
    return w->n;
}

/* meta's encoder, sources and output into out, with what the writer counted */
static ig_status fill_meta(const ig_feature_shard_writer *w, const ig_feature_meta *meta,
                           ig_feature_meta *out, ig_err *err) {
    memset(out, 0, sizeof *out);
    if (meta) {
        out->encoder = meta->encoder;
        out->cut = meta->cut;
        snprintf(out->output, sizeof out->output, "%s", meta->output);
        if (meta->n_sources && !(out->sources = calloc(meta->n_sources, sizeof *out->sources)))
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (size_t i = 0; meta && i < meta->n_sources; i++, out->n_sources++)
            if (!(out->sources[i] = strdup(meta->sources[i])))
                return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    out->clips = w->n;
    out->first_clip = w->o.first_clip;
    out->data_clips = w->o.data_clips;
    out->clip_key = w->o.clip_key;
    out->caption_len = w->o.caption_len;
    out->width = w->o.width;
    out->dtype = w->o.dtype;
    for (uint64_t i = 0; i < w->n; i++) {
        out->captioned += w->recs[i].len > 0;
        out->tokens += w->recs[i].len;
    }
    out->feat_bytes = w->bytes;
    out->fidx_bytes = IG_FEAT_HEADER_BYTES + w->n * IG_FEAT_RECORD_BYTES;
    out->feat_xxh3 = ig_xxh3_stream_digest(w->hash);
    snprintf(out->tool_version, sizeof out->tool_version, "ingot %s", IG_VERSION_STRING);
    return IG_OK;
}

ig_status ig_feature_shard_writer_finish(ig_feature_shard_writer *w, const ig_feature_meta *meta,
                                         ig_feature_meta *out, ig_err *err) {
    ig_status st = IG_OK;
    memset(out, 0, sizeof *out);
    if (w->n > w->o.data_clips - w->o.first_clip)
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "%s: %" PRIu64 " clips from clip %" PRIu64 " pass the clip data's %" PRIu64,
                        w->prefix, w->n, w->o.first_clip, w->o.data_clips);
    if (st == IG_OK) st = fill_meta(w, meta, out, err);
    ig_atomic_file *idx = NULL;
    char *ip = ig_shard_path(NULL, w->prefix, ".fidx");
    if (st == IG_OK && !ip) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) st = ig_atomic_file_create(&idx, ip, w->o.overwrite, err);
    ig_xxh3_stream *ih = st == IG_OK ? ig_xxh3_stream_create() : NULL;
    if (st == IG_OK && !ih) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) {
        ig_feat_header h = {.clips = w->n,
                            .first_clip = w->o.first_clip,
                            .data_clips = w->o.data_clips,
                            .clip_key = w->o.clip_key,
                            .feat_bytes = w->bytes,
                            .dtype = (uint32_t)w->o.dtype,
                            .width = w->o.width,
                            .caption_len = w->o.caption_len};
        uint8_t hb[IG_FEAT_HEADER_BYTES];
        ig_feat_encode_header(hb, &h);
        ig_xxh3_stream_update(ih, hb, sizeof hb);
        st = ig_atomic_file_write(idx, hb, sizeof hb, err);
    }
    for (uint64_t i = 0; st == IG_OK && i < w->n; i++) {
        uint8_t rb[IG_FEAT_RECORD_BYTES];
        ig_feat_encode_record(rb, &w->recs[i]);
        ig_xxh3_stream_update(ih, rb, sizeof rb);
        st = ig_atomic_file_write(idx, rb, sizeof rb, err);
    }
    if (st == IG_OK) {
        out->fidx_xxh3 = ig_xxh3_stream_digest(ih);
        /* data first, index second: an index never describes data that is not there */
        ig_atomic_file *both[2] = {w->feat, idx};
        st = ig_atomic_files_commit(both, 2, err);
        w->feat = idx = NULL;
    }
    ig_atomic_file_abort(idx);
    ig_xxh3_stream_free(ih);
    free(ip);
    if (st != IG_OK) ig_feature_meta_clear(out);
    ig_feature_shard_writer_abort(w);
    return st;
}
