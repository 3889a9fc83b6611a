/* video_shard_format.c - the bytes of PREFIX.clips (video_shard_internal.h): encoding, decoding
 * and the validator every frame shard goes through on open, so that the accessors can trust the
 * records afterwards.
 */
#include <inttypes.h>
#include <zstd.h>

#include "video_shard_internal.h"

static void put_u32(uint8_t **p, uint32_t v) {
    ig_put_le_u32(*p, v);
    *p += 4;
}
static void put_u64(uint8_t **p, uint64_t v) {
    ig_put_le_u64(*p, v);
    *p += 8;
}
static uint32_t get_u32(const uint8_t **p) {
    uint32_t v = ig_le_u32(*p);
    *p += 4;
    return v;
}
static uint64_t get_u64(const uint8_t **p) {
    uint64_t v = ig_le_u64(*p);
    *p += 8;
    return v;
}

void ig_clips_encode_header(uint8_t out[IG_CLIPS_HEADER_BYTES], const ig_clips_header *h) {
    uint8_t *p = out;
    memcpy(p, IG_CLIPS_MAGIC, IG_CLIPS_MAGIC_LEN);
    p += IG_CLIPS_MAGIC_LEN;
    put_u32(&p, IG_CLIPS_VERSION);
    put_u32(&p, IG_CLIPS_RECORD_BYTES);
    put_u64(&p, h->clips);
    put_u64(&p, h->frames);
    put_u64(&p, h->frames_bytes);
    put_u32(&p, h->compression);
    put_u32(&p, h->sources);
    put_u32(&p, h->buckets);
    put_u32(&p, h->captions);
    put_u64(&p, 0);
}

void ig_clips_encode_record(uint8_t out[IG_CLIPS_RECORD_BYTES], const ig_clip_info *c) {
    uint8_t *p = out;
    put_u64(&p, c->offset);
    put_u64(&p, c->stored_bytes);
    put_u32(&p, c->frames);
    put_u32(&p, c->height);
    put_u32(&p, c->width);
    put_u32(&p, c->fps_num);
    put_u32(&p, c->fps_den);
    put_u32(&p, c->source);
    put_u32(&p, c->caption);
    put_u32(&p, c->bucket);
    put_u64(&p, (uint64_t)c->start_pts);
    put_u32(&p, c->tb_num);
    put_u32(&p, c->tb_den);
    put_u64(&p, c->first_frame);
    put_u64(&p, c->xxh3);
    put_u32(&p, c->label);
    put_u32(&p, 0);
    put_u64(&p, 0);
}

ig_clip_info ig_clips_decode_record(const uint8_t *p, uint32_t version) {
    ig_clip_info c;
    c.offset = get_u64(&p);
    c.stored_bytes = get_u64(&p);
    c.frames = get_u32(&p);
    c.height = get_u32(&p);
    c.width = get_u32(&p);
    c.fps_num = get_u32(&p);
    c.fps_den = get_u32(&p);
    c.source = get_u32(&p);
    c.caption = get_u32(&p);
    c.bucket = get_u32(&p);
    c.start_pts = (int64_t)get_u64(&p);
    c.tb_num = get_u32(&p);
    c.tb_den = get_u32(&p);
    c.first_frame = get_u64(&p);
    c.xxh3 = get_u64(&p);
    c.label = version >= 2 ? get_u32(&p) : IG_CLIP_NONE;
    return c;
}

void ig_clips_encode_frame(uint8_t out[IG_CLIPS_FRAME_BYTES], const ig_clip_frame *f) {
    ig_put_le_u64(out, (uint64_t)f->pts);
    ig_put_le_u64(out + 8, f->index);
}

ig_clip_frame ig_clips_decode_frame(const uint8_t *p) {
    return (ig_clip_frame){.pts = ig_le_i64(p), .index = ig_le_u64(p + 8)};
}

static ig_status bad(ig_err *err, const char *name, uint64_t clip, const char *what) {
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s: clip %" PRIu64 ": %s (the index is damaged; rebuild the shard)", name,
                      clip, what);
}

static ig_status check_record(const ig_clip_info *c, uint64_t i, const ig_clips_header *h,
                              uint64_t end, uint64_t frames_so_far, const char *name, ig_err *err) {
    if (c->frames < 1 || c->frames > IG_CLIPS_MAX_FRAMES) return bad(err, name, i, "frames");
    if (c->height < 1 || c->height > IG_CLIPS_MAX_SIDE || c->width < 1 ||
        c->width > IG_CLIPS_MAX_SIDE)
        return bad(err, name, i, "height or width out of range");
    uint64_t raw = ig_clip_raw_bytes(c);
    if (raw > IG_CLIPS_MAX_RAW) return bad(err, name, i, "larger than 64 GiB");
    if (c->fps_num < 1 || c->fps_den < 1 || c->tb_num < 1 || c->tb_den < 1)
        return bad(err, name, i, "a frame rate or time base of zero");
    if (c->offset != end) return bad(err, name, i, "offset is not where the previous clip ends");
    if (h->compression == 0 ? c->stored_bytes != raw
                            : c->stored_bytes < 1 || c->stored_bytes > ZSTD_compressBound(raw))
        return bad(err, name, i, "stored size does not fit its frames");
    if (c->stored_bytes > h->frames_bytes - end) return bad(err, name, i, "ends past the data");
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

ig_status ig_clips_validate(const uint8_t *clips, size_t len, uint64_t frames_len, const char *name,
                            ig_clips_header *h, ig_err *err) {
    memset(h, 0, sizeof *h);
    if (len < IG_CLIPS_HEADER_BYTES || memcmp(clips, IG_CLIPS_MAGIC, IG_CLIPS_MAGIC_LEN) != 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: not a frame shard index (bad magic or shorter than its header)",
                          name);
    const uint8_t *p = clips + IG_CLIPS_MAGIC_LEN;
    h->version = get_u32(&p);
    uint32_t rec = get_u32(&p);
    h->clips = get_u64(&p);
    h->frames = get_u64(&p);
    h->frames_bytes = get_u64(&p);
    h->compression = get_u32(&p);
    h->sources = get_u32(&p);
    h->buckets = get_u32(&p);
    h->captions = get_u32(&p);
    uint64_t reserved = get_u64(&p);
    if (h->version < IG_CLIPS_VERSION_MIN || h->version > IG_CLIPS_VERSION)
        return ig_err_set(err, h->version > IG_CLIPS_VERSION ? IG_ERR_UNSUPPORTED : IG_ERR_FORMAT,
                          "%s: index version %u; this ingot reads versions %d to %d%s", name,
                          h->version, IG_CLIPS_VERSION_MIN, IG_CLIPS_VERSION,
                          h->version > IG_CLIPS_VERSION ? " (upgrade ingot)" : "");
    if (rec != IG_CLIPS_RECORD_BYTES || reserved != 0 || h->compression > 1)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: header fields (record size %u, compression %u) are not valid", name,
                          rec, h->compression);
    if (h->frames_bytes != frames_len)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: the index describes %" PRIu64 " bytes of frames, the data file "
                          "holds %" PRIu64 " (a file is truncated or from another shard)",
                          name, h->frames_bytes, frames_len);
    uint64_t body = len - IG_CLIPS_HEADER_BYTES;
    if (h->clips > body / IG_CLIPS_RECORD_BYTES ||
        h->frames > (body - h->clips * IG_CLIPS_RECORD_BYTES) / IG_CLIPS_FRAME_BYTES ||
        body != h->clips * IG_CLIPS_RECORD_BYTES + h->frames * IG_CLIPS_FRAME_BYTES)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: %zu bytes, but the header describes %" PRIu64 " clips and %" PRIu64
                          " frames (truncated or damaged)",
                          name, len, h->clips, h->frames);
    const uint8_t *recs = clips + IG_CLIPS_HEADER_BYTES;
    const uint8_t *table = recs + h->clips * IG_CLIPS_RECORD_BYTES;
    uint64_t end = 0, nf = 0;
    for (uint64_t i = 0; i < h->clips; i++) {
        const uint8_t *r = recs + i * IG_CLIPS_RECORD_BYTES;
        /* the last 16 bytes: reserved in version 1; the label and 12 reserved bytes since 2 */
        if ((h->version < 2 && ig_le_u32(r + IG_CLIPS_RECORD_BYTES - 16)) ||
            ig_le_u32(r + IG_CLIPS_RECORD_BYTES - 12) || ig_le_u64(r + IG_CLIPS_RECORD_BYTES - 8))
            return bad(err, name, i, "reserved bytes are not zero");
        ig_clip_info c = ig_clips_decode_record(r, h->version);
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
    if (end != h->frames_bytes || nf != h->frames)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: the clips cover %" PRIu64 " bytes and %" PRIu64
                          " frames, the header says %" PRIu64 " and %" PRIu64,
                          name, end, nf, h->frames_bytes, h->frames);
    return IG_OK;
}
