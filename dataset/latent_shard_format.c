/* latent_shard_format.c - the bytes of PREFIX.lclips (latent_shard_internal.h): encoding,
 * decoding and the validator every latent shard goes through on open, so that the accessors can
 * trust the records afterwards.
 */
#include <inttypes.h>

#include "latent_shard_internal.h"

void ig_latent_encode_header(uint8_t out[IG_LAT_HEADER_BYTES], const ig_latent_header *h) {
    memset(out, 0, IG_LAT_HEADER_BYTES);
    memcpy(out, IG_LAT_MAGIC, IG_LAT_MAGIC_LEN);
    ig_put_le_u32(out + 8, IG_LAT_VERSION);
    ig_put_le_u32(out + 12, IG_LAT_RECORD_BYTES);
    ig_put_le_u64(out + 16, h->clips);
    ig_put_le_u64(out + 24, h->frames);
    ig_put_le_u64(out + 32, h->data_bytes);
    ig_put_le_u32(out + 40, h->dtype);
    ig_put_le_u32(out + 44, h->channels);
    ig_put_le_u32(out + 48, h->sources);
    ig_put_le_u32(out + 52, h->buckets);
    ig_put_le_u32(out + 56, h->captions);
}

void ig_latent_encode_record(uint8_t out[IG_LAT_RECORD_BYTES], const ig_latent_info *c) {
    memset(out, 0, IG_LAT_RECORD_BYTES);
    ig_put_le_u64(out, c->offset);
    ig_put_le_u64(out + 8, c->stored_bytes);
    const uint32_t u[] = {c->frames,  c->h,       c->w,      c->height,  c->width,
                          c->fps_num, c->fps_den, c->source, c->caption, c->bucket,
                          c->label,   c->tb_num,  c->tb_den};
    for (size_t k = 0; k < sizeof u / sizeof u[0]; k++) ig_put_le_u32(out + 16 + 4 * k, u[k]);
    /* 68: reserved u32 */
    ig_put_le_u64(out + 72, (uint64_t)c->start_pts);
    ig_put_le_u64(out + 80, c->first_frame);
    ig_put_le_u64(out + 88, c->source_clip);
    ig_put_le_u64(out + 96, c->xxh3);
    /* 104: reserved u64 */
}

ig_latent_info ig_latent_decode_record(const uint8_t *p) {
    ig_latent_info c;
    c.offset = ig_le_u64(p);
    c.stored_bytes = ig_le_u64(p + 8);
    uint32_t *u[] = {&c.frames, &c.h,       &c.w,      &c.height, &c.width,  &c.fps_num, &c.fps_den,
                     &c.source, &c.caption, &c.bucket, &c.label,  &c.tb_num, &c.tb_den};
    for (size_t k = 0; k < sizeof u / sizeof u[0]; k++) *u[k] = ig_le_u32(p + 16 + 4 * k);
    c.start_pts = ig_le_i64(p + 72);
    c.first_frame = ig_le_u64(p + 80);
    c.source_clip = ig_le_u64(p + 88);
    c.xxh3 = ig_le_u64(p + 96);
    return c;
}

static ig_status bad(ig_err *err, const char *name, uint64_t clip, const char *what) {
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s: clip %" PRIu64 ": %s (the index is damaged; rebuild the shard)", name,
                      clip, what);
}

static ig_status check_record(const ig_latent_info *c, uint64_t i, const ig_latent_header *h,
                              uint64_t end, uint64_t frames_so_far, const char *name, ig_err *err) {
    if (c->frames < 1 || c->frames > IG_CLIPS_MAX_FRAMES) return bad(err, name, i, "frames");
    if (c->h < 1 || c->w < 1 || c->height < c->h || c->width < c->w ||
        c->height > IG_CLIPS_MAX_SIDE || c->width > IG_CLIPS_MAX_SIDE)
        return bad(err, name, i, "a latent or pixel size out of range");
    uint64_t bytes =
        (uint64_t)c->frames * c->h * c->w * h->channels * ig_latent_dtype_size(h->dtype);
    if (bytes > IG_LAT_MAX_CLIP) return bad(err, name, i, "larger than 64 GiB");
    if (c->stored_bytes != bytes) return bad(err, name, i, "stored size does not fit its shape");
    if (c->fps_num < 1 || c->fps_den < 1 || c->tb_num < 1 || c->tb_den < 1)
        return bad(err, name, i, "a frame rate or time base of zero");
    if (c->offset != end) return bad(err, name, i, "offset is not where the previous clip ends");
    if (c->stored_bytes > h->data_bytes - end) return bad(err, name, i, "ends past the data");
    if (c->source >= h->sources) return bad(err, name, i, "source out of range");
    if (c->caption != IG_CLIP_NONE && c->caption >= h->captions)
        return bad(err, name, i, "caption out of range");
    if (c->bucket != IG_CLIP_NONE && c->bucket >= h->buckets)
        return bad(err, name, i, "bucket out of range");
    if (c->label != IG_CLIP_NONE && c->label > IG_CLIP_LABEL_MAX)
        return bad(err, name, i, "label out of range");
    if (c->first_frame != frames_so_far)
        return bad(err, name, i, "frame table entry is not where the previous clip's end");
    if (c->frames > h->frames - frames_so_far) return bad(err, name, i, "frames past the table");
    return IG_OK;
}

ig_status ig_latent_validate(const uint8_t *buf, size_t len, uint64_t data_len, const char *name,
                             ig_latent_header *h, ig_err *err) {
    memset(h, 0, sizeof *h);
    if (len < IG_LAT_HEADER_BYTES || memcmp(buf, IG_LAT_MAGIC, IG_LAT_MAGIC_LEN) != 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: not a latent shard index (bad magic or shorter than its header)",
                          name);
    h->version = ig_le_u32(buf + 8);
    uint32_t rec = ig_le_u32(buf + 12);
    h->clips = ig_le_u64(buf + 16);
    h->frames = ig_le_u64(buf + 24);
    h->data_bytes = ig_le_u64(buf + 32);
    h->dtype = ig_le_u32(buf + 40);
    h->channels = ig_le_u32(buf + 44);
    h->sources = ig_le_u32(buf + 48);
    h->buckets = ig_le_u32(buf + 52);
    h->captions = ig_le_u32(buf + 56);
    uint32_t reserved = ig_le_u32(buf + 60);
    if (h->version != IG_LAT_VERSION)
        return ig_err_set(err, h->version > IG_LAT_VERSION ? IG_ERR_UNSUPPORTED : IG_ERR_FORMAT,
                          "%s: index version %u; this ingot reads version %d%s", name, h->version,
                          IG_LAT_VERSION, h->version > IG_LAT_VERSION ? " (upgrade ingot)" : "");
    if (rec != IG_LAT_RECORD_BYTES || reserved != 0 || !ig_latent_dtype_size(h->dtype) ||
        h->channels < 2 || h->channels % 2 || h->channels > IG_LAT_MAX_CHANNELS)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: header fields (record size %u, dtype %u, channels %u) are not "
                          "valid",
                          name, rec, h->dtype, h->channels);
    if (h->data_bytes != data_len)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: the index describes %" PRIu64 " bytes of latents, the data file "
                          "holds %" PRIu64 " (a file is truncated or from another shard)",
                          name, h->data_bytes, data_len);
    uint64_t body = len - IG_LAT_HEADER_BYTES;
    if (h->clips > body / IG_LAT_RECORD_BYTES ||
        h->frames > (body - h->clips * IG_LAT_RECORD_BYTES) / IG_CLIPS_FRAME_BYTES ||
        body != h->clips * IG_LAT_RECORD_BYTES + h->frames * IG_CLIPS_FRAME_BYTES)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: %zu bytes, but the header describes %" PRIu64 " clips and %" PRIu64
                          " frames (truncated or damaged)",
                          name, len, h->clips, h->frames);
    const uint8_t *recs = buf + IG_LAT_HEADER_BYTES;
    const uint8_t *table = recs + h->clips * IG_LAT_RECORD_BYTES;
    uint64_t end = 0, nf = 0;
    for (uint64_t i = 0; i < h->clips; i++) {
        const uint8_t *r = recs + i * IG_LAT_RECORD_BYTES;
        if (ig_le_u32(r + 68) || ig_le_u64(r + 104))
            return bad(err, name, i, "reserved bytes are not zero");
        ig_latent_info c = ig_latent_decode_record(r);
        ig_status st = check_record(&c, i, h, end, nf, name, err);
        if (st != IG_OK) return st;
        for (uint32_t f = 1; f < c.frames; f++) {
            ig_clip_frame a = ig_clips_decode_frame(table + (nf + f - 1) * IG_CLIPS_FRAME_BYTES);
            ig_clip_frame b = ig_clips_decode_frame(table + (nf + f) * IG_CLIPS_FRAME_BYTES);
            if (b.pts < a.pts || b.index < a.index)
                return bad(err, name, i, "its frames go back in time");
        }
        end += c.stored_bytes;
        nf += c.frames;
    }
    if (end != h->data_bytes || nf != h->frames)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: the clips cover %" PRIu64 " bytes and %" PRIu64
                          " frames, the header says %" PRIu64 " and %" PRIu64,
                          name, end, nf, h->data_bytes, h->frames);
    return IG_OK;
}

const char *ig_latent_dtype_name(uint32_t dtype) {
    return dtype == IG_LATENT_F32 ? "fp32" : dtype == IG_LATENT_BF16 ? "bf16" : "?";
}
