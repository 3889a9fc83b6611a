/* latent_shard_writer.c - writes a latent shard: each clip's moments (converted to the shard's
 * dtype) stream into PREFIX.latents, their records into PREFIX.lclips after a placeholder header,
 * and the frame table into an anonymous spill file that finish appends after the records, so
 * memory does not grow with the clips. finish writes the real header, checksums and commits
 * both files, data first; the caller writes the manifest last.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "latent_shard_internal.h"

struct ig_latent_shard_writer {
    ig_ctx *ctx;
    char *prefix;
    ig_latent_shard_writer_opts o;
    ig_atomic_file *data, *index;
    FILE *table; /* the frame table, until finish */
    ig_xxh3_stream *hash;
    void *buf; /* one clip in the dtype */
    size_t buf_cap;
    uint64_t n_clips, n_frames, bytes;
    uint32_t max_source, max_caption, max_bucket; /* largest + 1 seen (0: none) */
};

/* fp32 -> bf16, rounded to nearest even, NaN kept a (quiet) NaN: torch's .to(torch.bfloat16).
 * kernels/ has the same conversion for the backends; dataset/ does not depend on kernels/. */
static uint16_t bf16_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void ig_latent_shard_writer_abort(ig_latent_shard_writer *w) {
    if (!w) return;
    ig_atomic_file_abort(w->data);
    ig_atomic_file_abort(w->index);
    if (w->table) fclose(w->table);
    ig_xxh3_stream_free(w->hash);
    free(w->buf);
    free(w->prefix);
    ig_free(w->ctx, w);
}

ig_status ig_latent_shard_writer_create(ig_latent_shard_writer **out, ig_ctx *ctx,
                                        const char *prefix, const ig_latent_shard_writer_opts *opts,
                                        ig_err *err) {
    *out = NULL;
    ig_latent_shard_writer_opts o = opts ? *opts : (ig_latent_shard_writer_opts){0};
    if (!o.dtype) o.dtype = IG_LATENT_F32;
    if (!ig_latent_dtype_size(o.dtype) || o.channels < 2 || o.channels % 2 ||
        o.channels > IG_LAT_MAX_CHANNELS)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: a latent shard of dtype %u and %u channels: need fp32 or bf16 and "
                          "an even number of channels in [2, %u]",
                          prefix, o.dtype, o.channels, IG_LAT_MAX_CHANNELS);
    ig_latent_shard_writer *w = ig_alloc(ctx, sizeof *w);
    if (!w) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->o = o;
    w->prefix = strdup(prefix);
    w->hash = ig_xxh3_stream_create();
    char *dp = ig_shard_path(NULL, prefix, ".latents"),
         *ip = ig_shard_path(NULL, prefix, ".lclips");
    char *jp = ig_shard_path(NULL, prefix, ".json");
    ig_status st = IG_OK;
    if (!w->prefix || !w->hash || !dp || !ip || !jp) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else if (!o.overwrite && ig_file_exists(jp)) {
        st = ig_err_set(err, IG_ERR_EXISTS, "%s exists", jp);
        ig_err_fix(err, "overwrite", NULL);
    } else {
        if (o.overwrite) remove(jp); /* no manifest may describe the old data meanwhile */
        st = ig_atomic_file_create(&w->data, dp, o.overwrite, err);
        if (st == IG_OK) st = ig_atomic_file_create(&w->index, ip, o.overwrite, err);
        if (st == IG_OK && !(w->table = tmpfile()))
            st = ig_err_errno(err, errno, "%s: cannot create a temporary file", prefix);
        uint8_t zero[IG_LAT_HEADER_BYTES] = {0};
        if (st == IG_OK) st = ig_atomic_file_write(w->index, zero, sizeof zero, err);
    }
    free(dp);
    free(ip);
    free(jp);
    if (st != IG_OK) {
        ig_latent_shard_writer_abort(w);
        return st;
    }
    *out = w;
    return IG_OK;
}

/* The moments in the shard's dtype: fp32 as they are (little-endian hosts), bf16 converted. */
static ig_status convert(ig_latent_shard_writer *w, const float *m, uint64_t n, const void **out,
                         ig_err *err) {
    if (w->o.dtype == IG_LATENT_F32) {
        *out = m;
        return IG_OK;
    }
    size_t need = (size_t)n * 2;
    if (need > w->buf_cap) {
        void *b = realloc(w->buf, need);
        if (!b) return ig_err_set(err, IG_ERR_NOMEM, "out of memory converting a clip to bf16");
        w->buf = b;
        w->buf_cap = need;
    }
    uint8_t *p = w->buf;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h = bf16_of(m[i]);
        p[2 * i] = (uint8_t)h;
        p[2 * i + 1] = (uint8_t)(h >> 8);
    }
    *out = w->buf;
    return IG_OK;
}

ig_status ig_latent_shard_writer_add(ig_latent_shard_writer *w, const ig_latent_info *c,
                                     const ig_clip_frame *frames, const float *moments,
                                     ig_err *err) {
    ig_latent_info r = *c;
    if (r.frames < 1 || r.frames > IG_CLIPS_MAX_FRAMES || r.h < 1 || r.w < 1 || r.height < r.h ||
        r.width < r.w || r.height > IG_CLIPS_MAX_SIDE || r.width > IG_CLIPS_MAX_SIDE)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: clip %" PRIu64 ": %u frames of %ux%u latents from %ux%u pixels do "
                          "not fit",
                          w->prefix, w->n_clips, r.frames, r.h, r.w, r.height, r.width);
    if (r.label != IG_CLIP_NONE && r.label > IG_CLIP_LABEL_MAX)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: clip %" PRIu64 ": label %u is past the largest class id %u",
                          w->prefix, w->n_clips, r.label, IG_CLIP_LABEL_MAX);
    uint64_t n = (uint64_t)r.frames * r.h * r.w * w->o.channels;
    uint64_t bytes = n * ig_latent_dtype_size(w->o.dtype);
    if (bytes > IG_LAT_MAX_CLIP)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: clip %" PRIu64 " is larger than 64 GiB",
                          w->prefix, w->n_clips);
    const void *data = NULL;
    ig_status st = convert(w, moments, n, &data, err);
    if (st != IG_OK) return st;
    r.offset = w->bytes;
    r.stored_bytes = bytes;
    r.first_frame = w->n_frames;
    r.xxh3 = ig_xxh3_64(data, (size_t)bytes);
    if ((st = ig_atomic_file_write(w->data, data, (size_t)bytes, err)) != IG_OK) return st;
    ig_xxh3_stream_update(w->hash, data, (size_t)bytes);
    uint8_t rec[IG_LAT_RECORD_BYTES];
    ig_latent_encode_record(rec, &r);
    if ((st = ig_atomic_file_write(w->index, rec, sizeof rec, err)) != IG_OK) return st;
    for (uint32_t f = 0; f < r.frames; f++) {
        uint8_t e[IG_CLIPS_FRAME_BYTES];
        ig_clips_encode_frame(e, &frames[f]);
        if (fwrite(e, 1, sizeof e, w->table) != sizeof e)
            return ig_err_errno(err, errno, "%s: writing the frame table", w->prefix);
    }
    w->n_clips++;
    w->n_frames += r.frames;
    w->bytes += bytes;
    if (r.source + 1 > w->max_source) w->max_source = r.source + 1;
    if (r.caption != IG_CLIP_NONE && r.caption + 1 > w->max_caption) w->max_caption = r.caption + 1;
    if (r.bucket != IG_CLIP_NONE && r.bucket + 1 > w->max_bucket) w->max_bucket = r.bucket + 1;
    return IG_OK;
}

uint64_t ig_latent_shard_writer_clips(const ig_latent_shard_writer *w) {
    return w->n_clips;
}

static ig_status copy_meta(ig_latent_shard_meta *out, const ig_latent_shard_meta *meta,
                           ig_err *err) {
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

ig_status ig_latent_shard_writer_finish(ig_latent_shard_writer *w, const ig_latent_shard_meta *meta,
                                        ig_latent_shard_meta *out, ig_err *err) {
    ig_status st = copy_meta(out, meta, err);
    if (st == IG_OK && (out->n_sources < w->max_source || out->n_buckets < w->max_bucket ||
                        out->caption_documents < w->max_caption))
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "%s: the clips name sources, buckets or captions the manifest lacks",
                        w->prefix);
    if (st == IG_OK && (out->n_sources > UINT32_MAX || out->n_buckets > UINT32_MAX ||
                        out->caption_documents > UINT32_MAX))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "%s: too many sources, buckets or captions",
                        w->prefix);
    if (st == IG_OK && fseek(w->table, 0, SEEK_SET) != 0)
        st = ig_err_errno(err, errno, "%s: rewinding the frame table", w->prefix);
    uint8_t buf[1 << 16];
    size_t n;
    while (st == IG_OK && (n = fread(buf, 1, sizeof buf, w->table)) > 0)
        st = ig_atomic_file_write(w->index, buf, n, err);
    if (st == IG_OK && ferror(w->table))
        st = ig_err_errno(err, errno, "%s: reading the frame table back", w->prefix);
    if (st == IG_OK) {
        ig_latent_header h = {.clips = w->n_clips,
                              .frames = w->n_frames,
                              .data_bytes = w->bytes,
                              .dtype = w->o.dtype,
                              .channels = w->o.channels,
                              .sources = (uint32_t)out->n_sources,
                              .buckets = (uint32_t)out->n_buckets,
                              .captions = (uint32_t)out->caption_documents};
        uint8_t hb[IG_LAT_HEADER_BYTES];
        ig_latent_encode_header(hb, &h);
        FILE *f = ig_atomic_file_stream(w->index);
        if (fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0 ||
            fwrite(hb, 1, sizeof hb, f) != sizeof hb || fflush(f) != 0)
            st = ig_err_errno(err, errno, "%s: writing the index header", w->prefix);
    }
    if (st == IG_OK) {
        out->index_bytes = IG_LAT_HEADER_BYTES + w->n_clips * IG_LAT_RECORD_BYTES +
                           w->n_frames * IG_CLIPS_FRAME_BYTES;
        st = ig_file_xxh3(ig_atomic_file_temp_path(w->index), &out->index_xxh3, err);
    }
    if (st == IG_OK) {
        out->clips = w->n_clips;
        out->frames = w->n_frames;
        out->dtype = w->o.dtype;
        out->channels = w->o.channels;
        out->data_bytes = w->bytes;
        out->data_xxh3 = ig_xxh3_stream_digest(w->hash);
        snprintf(out->tool_version, sizeof out->tool_version, "ingot %s", IG_VERSION_STRING);
        /* data first, index second: an index never describes data that is not there */
        ig_atomic_file *both[2] = {w->data, w->index};
        st = ig_atomic_files_commit(both, 2, err);
        w->data = w->index = NULL;
    }
    if (st != IG_OK) ig_latent_shard_meta_clear(out);
    ig_latent_shard_writer_abort(w);
    return st;
}
