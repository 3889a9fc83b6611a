/* video_shard_writer.c - writes a frame shard: clips stream into PREFIX.frames, their records into
 * PREFIX.clips after a placeholder header, and the frame table into an anonymous spill file
 * (it comes after the records), so that memory does not grow with the clips. finish appends
 * the table, writes the real header, checksums and commits both files; the caller writes the
 * manifest last. A clip's bytes may go out before its record (write_ahead: the video pipeline
 * writes a video's frames while it decodes them); they are cut back out when the clip does not
 * come (drop_ahead), the file's running checksum going back to a mark taken before them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <zstd.h>

#include "video_shard_internal.h"

struct ig_video_shard_writer {
    ig_ctx *ctx;
    char *prefix;
    ig_video_shard_writer_opts o;
    ig_atomic_file *frames, *clips;
    FILE *table; /* the frame table, until finish */
    ig_xxh3_stream *hash;
    ig_xxh3_stream *mark; /* hash as it was at mark_at, where writing ahead began */
    uint64_t mark_at;
    uint64_t ahead; /* bytes of PREFIX.frames past `bytes`, written ahead of their clips */
    uint64_t n_clips, n_frames, bytes, raw_bytes;
    uint32_t max_source, max_caption, max_bucket; /* largest + 1 seen (0: none) */
};

ig_status ig_clip_compress(const void *raw, size_t raw_bytes, int level, void **out,
                           size_t *out_bytes, ig_err *err) {
    size_t cap = ZSTD_compressBound(raw_bytes);
    void *buf = malloc(cap ? cap : 1);
    if (!buf) return ig_err_set(err, IG_ERR_NOMEM, "out of memory compressing a clip");
    size_t n = ZSTD_compress(buf, cap, raw, raw_bytes, level);
    if (ZSTD_isError(n)) {
        free(buf);
        return ig_err_set(err, IG_ERR_INTERNAL, "zstd: %s", ZSTD_getErrorName(n));
    }
    *out = buf;
    *out_bytes = n;
    return IG_OK;
}

void ig_video_shard_writer_abort(ig_video_shard_writer *w) {
    if (!w) return;
    ig_atomic_file_abort(w->frames);
    ig_atomic_file_abort(w->clips);
    if (w->table) fclose(w->table);
    ig_xxh3_stream_free(w->hash);
    ig_xxh3_stream_free(w->mark);
    free(w->prefix);
    ig_free(w->ctx, w);
}

ig_status ig_video_shard_writer_create(ig_video_shard_writer **out, ig_ctx *ctx, const char *prefix,
                                       const ig_video_shard_writer_opts *opts, ig_err *err) {
    *out = NULL;
    ig_video_shard_writer *w = ig_alloc(ctx, sizeof *w);
    if (!w) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    if (opts) w->o = *opts;
    w->prefix = strdup(prefix);
    w->hash = ig_xxh3_stream_create();
    w->mark = ig_xxh3_stream_create();
    char *fp = ig_shard_path(NULL, prefix, ".frames"), *cp = ig_shard_path(NULL, prefix, ".clips");
    char *jp = ig_shard_path(NULL, prefix, ".json");
    ig_status st = IG_OK;
    if (!w->prefix || !w->hash || !w->mark || !fp || !cp || !jp) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else if (!w->o.overwrite && ig_file_exists(jp)) {
        st = ig_err_set(err, IG_ERR_EXISTS, "%s exists", jp);
        ig_err_fix(err, "overwrite", NULL);
    } else {
        if (w->o.overwrite) remove(jp); /* no manifest may describe the old data meanwhile */
        st = ig_atomic_file_create(&w->frames, fp, w->o.overwrite, err);
        if (st == IG_OK) st = ig_atomic_file_create(&w->clips, cp, w->o.overwrite, err);
        if (st == IG_OK && !(w->table = tmpfile()))
            st = ig_err_errno(err, errno, "%s: cannot create a temporary file", prefix);
        uint8_t zero[IG_CLIPS_HEADER_BYTES] = {0};
        if (st == IG_OK) st = ig_atomic_file_write(w->clips, zero, sizeof zero, err);
    }
    free(fp);
    free(cp);
    free(jp);
    if (st != IG_OK) {
        ig_video_shard_writer_abort(w);
        return st;
    }
    *out = w;
    return IG_OK;
}

ig_status ig_video_shard_writer_write_ahead(ig_video_shard_writer *w, const void *data, size_t len,
                                            ig_err *err) {
    if (len == 0) return IG_OK;
    if (w->ahead == 0) {
        ig_xxh3_stream_copy(w->mark, w->hash);
        w->mark_at = w->bytes;
    }
    ig_status st = ig_atomic_file_write(w->frames, data, len, err);
    if (st != IG_OK) return st;
    ig_xxh3_stream_update(w->hash, data, len);
    w->ahead += len;
    return IG_OK;
}

ig_status ig_video_shard_writer_drop_ahead(ig_video_shard_writer *w, ig_err *err) {
    if (w->ahead == 0) return IG_OK;
    if (w->mark_at != w->bytes) /* the mark is where writing ahead began */
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: bytes written ahead can be dropped only before a clip takes some",
                          w->prefix);
    ig_status st = ig_atomic_file_truncate(w->frames, w->bytes, err);
    if (st != IG_OK) return st;
    ig_xxh3_stream_copy(w->hash, w->mark);
    w->ahead = 0;
    return IG_OK;
}

uint64_t ig_video_shard_writer_ahead(const ig_video_shard_writer *w) {
    return w->ahead;
}

static ig_status add_clip(ig_video_shard_writer *w, const ig_clip_info *c,
                          const ig_clip_frame *frames, const void *data, size_t bytes,
                          const uint64_t *xxh3, ig_err *err) {
    ig_clip_info r = *c;
    uint64_t raw = (uint64_t)r.frames * r.height * r.width * 3;
    if (r.frames < 1 || r.frames > IG_CLIPS_MAX_FRAMES || r.height < 1 ||
        r.height > IG_CLIPS_MAX_SIDE || r.width < 1 || r.width > IG_CLIPS_MAX_SIDE ||
        (!w->o.zstd && bytes != raw) || (w->o.zstd && bytes == 0))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: clip %" PRIu64 ": %u frames of %ux%u in %zu bytes do not fit",
                          w->prefix, w->n_clips, r.frames, r.height, r.width, bytes);
    if (r.label != IG_CLIP_NONE && r.label > IG_CLIP_LABEL_MAX)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: clip %" PRIu64 ": label %u is past the largest class id %u",
                          w->prefix, w->n_clips, r.label, IG_CLIP_LABEL_MAX);
    r.offset = w->bytes;
    r.stored_bytes = bytes;
    r.first_frame = w->n_frames;
    r.xxh3 = xxh3 ? *xxh3 : ig_xxh3_64(data, bytes);
    /* the first bytes may have gone out already (write_ahead) */
    size_t done = w->ahead < bytes ? (size_t)w->ahead : bytes;
    ig_status st = IG_OK;
    if (done < bytes) {
        if (!data)
            return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: clip %" PRIu64 " has no data",
                              w->prefix, w->n_clips);
        const uint8_t *rest = (const uint8_t *)data + done;
        if ((st = ig_atomic_file_write(w->frames, rest, bytes - done, err)) != IG_OK) return st;
        ig_xxh3_stream_update(w->hash, rest, bytes - done);
    }
    w->ahead -= done;
    uint8_t rec[IG_CLIPS_RECORD_BYTES];
    ig_clips_encode_record(rec, &r);
    if ((st = ig_atomic_file_write(w->clips, rec, sizeof rec, err)) != IG_OK) return st;
    for (uint32_t f = 0; f < r.frames; f++) {
        uint8_t e[IG_CLIPS_FRAME_BYTES];
        ig_clips_encode_frame(e, &frames[f]);
        if (fwrite(e, 1, sizeof e, w->table) != sizeof e)
            return ig_err_errno(err, errno, "%s: writing the frame table", w->prefix);
    }
    w->n_clips++;
    w->n_frames += r.frames;
    w->bytes += bytes;
    w->raw_bytes += raw;
    if (r.source + 1 > w->max_source) w->max_source = r.source + 1;
    if (r.caption != IG_CLIP_NONE && r.caption + 1 > w->max_caption) w->max_caption = r.caption + 1;
    if (r.bucket != IG_CLIP_NONE && r.bucket + 1 > w->max_bucket) w->max_bucket = r.bucket + 1;
    return IG_OK;
}

ig_status ig_video_shard_writer_add(ig_video_shard_writer *w, const ig_clip_info *c,
                                    const ig_clip_frame *frames, const void *data, size_t bytes,
                                    ig_err *err) {
    return add_clip(w, c, frames, data, bytes, NULL, err);
}

ig_status ig_video_shard_writer_add_hashed(ig_video_shard_writer *w, const ig_clip_info *c,
                                           const ig_clip_frame *frames, const void *data,
                                           size_t bytes, uint64_t xxh3, ig_err *err) {
    return add_clip(w, c, frames, data, bytes, &xxh3, err);
}

uint64_t ig_video_shard_writer_clips(const ig_video_shard_writer *w) {
    return w->n_clips;
}
uint64_t ig_video_shard_writer_bytes(const ig_video_shard_writer *w) {
    return w->bytes;
}

static ig_status copy_meta(ig_video_shard_meta *out, const ig_video_shard_meta *meta, ig_err *err) {
    memset(out, 0, sizeof *out);
    if (!meta) return IG_OK;
    *out = *meta;
    out->sources = NULL;
    out->buckets = NULL;
    out->n_sources = out->n_buckets = 0;
    if (meta->n_sources) {
        out->sources = calloc(meta->n_sources, sizeof *out->sources);
        if (!out->sources) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < meta->n_sources; i++, out->n_sources++)
            if (!(out->sources[i] = strdup(meta->sources[i])))
                return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    if (meta->n_buckets) {
        out->buckets = malloc(meta->n_buckets * sizeof *out->buckets);
        if (!out->buckets) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        memcpy(out->buckets, meta->buckets, meta->n_buckets * sizeof *out->buckets);
        out->n_buckets = meta->n_buckets;
    }
    return IG_OK;
}

ig_status ig_video_shard_writer_finish(ig_video_shard_writer *w, const ig_video_shard_meta *meta,
                                       ig_video_shard_meta *out, ig_err *err) {
    ig_status st = copy_meta(out, meta, err);
    if (st == IG_OK && w->ahead > 0)
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "%s: %" PRIu64 " bytes were written ahead of clips that never came",
                        w->prefix, w->ahead);
    if (st == IG_OK && (out->n_sources < w->max_source || out->n_buckets < w->max_bucket ||
                        out->caption_documents < w->max_caption))
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "%s: the clips name sources, buckets or captions the manifest lacks",
                        w->prefix);
    if (st == IG_OK && out->n_sources > UINT32_MAX)
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "%s: too many sources", w->prefix);
    /* the frame table after the records */
    if (st == IG_OK && fseek(w->table, 0, SEEK_SET) != 0)
        st = ig_err_errno(err, errno, "%s: rewinding the frame table", w->prefix);
    uint8_t buf[1 << 16];
    size_t n;
    while (st == IG_OK && (n = fread(buf, 1, sizeof buf, w->table)) > 0)
        st = ig_atomic_file_write(w->clips, buf, n, err);
    if (st == IG_OK && ferror(w->table))
        st = ig_err_errno(err, errno, "%s: reading the frame table back", w->prefix);
    if (st == IG_OK) {
        ig_clips_header h = {.clips = w->n_clips,
                             .frames = w->n_frames,
                             .frames_bytes = w->bytes,
                             .compression = w->o.zstd ? 1 : 0,
                             .sources = (uint32_t)out->n_sources,
                             .buckets = (uint32_t)out->n_buckets,
                             .captions = (uint32_t)out->caption_documents};
        uint8_t hb[IG_CLIPS_HEADER_BYTES];
        ig_clips_encode_header(hb, &h);
        FILE *f = ig_atomic_file_stream(w->clips);
        if (fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0 ||
            fwrite(hb, 1, sizeof hb, f) != sizeof hb || fflush(f) != 0)
            st = ig_err_errno(err, errno, "%s: writing the index header", w->prefix);
    }
    if (st == IG_OK) {
        out->clips_bytes = IG_CLIPS_HEADER_BYTES + w->n_clips * IG_CLIPS_RECORD_BYTES +
                           w->n_frames * IG_CLIPS_FRAME_BYTES;
        st = ig_file_xxh3(ig_atomic_file_temp_path(w->clips), &out->clips_xxh3, err);
    }
    if (st == IG_OK) {
        out->clips = w->n_clips;
        out->frames = w->n_frames;
        out->raw_bytes = w->raw_bytes;
        out->frames_bytes = w->bytes;
        out->frames_xxh3 = ig_xxh3_stream_digest(w->hash);
        out->clips_version = IG_CLIPS_VERSION;
        out->zstd = w->o.zstd;
        snprintf(out->tool_version, sizeof out->tool_version, "ingot %s", IG_VERSION_STRING);
        /* data first, index second: an index never describes data that is not there */
        ig_atomic_file *both[2] = {w->frames, w->clips};
        st = ig_atomic_files_commit(both, 2, err);
        w->frames = w->clips = NULL;
    }
    if (st != IG_OK) ig_video_shard_meta_clear(out);
    ig_video_shard_writer_abort(w);
    return st;
}
