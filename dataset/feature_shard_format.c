/* feature_shard_format.c - the bytes of PREFIX.fidx (feature_shard_internal.h): encoding, decoding
 * and the validator every caption-feature shard goes through on open, so that the accessors can
 * trust the records afterwards.
 */
#include <inttypes.h>

#include "feature_shard_internal.h"

size_t ig_feat_value_bytes(uint32_t dtype) {
    return dtype == IG_FEATURES_F32 ? 4 : dtype == IG_FEATURES_BF16 ? 2 : 0;
}

void ig_feat_encode_header(uint8_t out[IG_FEAT_HEADER_BYTES], const ig_feat_header *h) {
    memcpy(out, IG_FEAT_MAGIC, IG_FEAT_MAGIC_LEN);
    ig_put_le_u32(out + 8, IG_FEAT_VERSION);
    ig_put_le_u32(out + 12, IG_FEAT_RECORD_BYTES);
    ig_put_le_u64(out + 16, h->clips);
    ig_put_le_u64(out + 24, h->first_clip);
    ig_put_le_u64(out + 32, h->data_clips);
    ig_put_le_u64(out + 40, h->clip_key);
    ig_put_le_u64(out + 48, h->feat_bytes);
    ig_put_le_u32(out + 56, h->dtype);
    ig_put_le_u32(out + 60, h->width);
    ig_put_le_u32(out + 64, h->caption_len);
    ig_put_le_u32(out + 68, 0);
}

void ig_feat_encode_record(uint8_t out[IG_FEAT_RECORD_BYTES], const ig_feat_record *r) {
    ig_put_le_u64(out, r->offset);
    ig_put_le_u32(out + 8, r->len);
    ig_put_le_u32(out + 12, 0);
    ig_put_le_u64(out + 16, r->xxh3);
}

ig_feat_record ig_feat_decode_record(const uint8_t *p) {
    return (ig_feat_record){
        .offset = ig_le_u64(p), .len = ig_le_u32(p + 8), .xxh3 = ig_le_u64(p + 16)};
}

static ig_status bad(ig_err *err, const char *name, uint64_t clip, const char *what) {
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s: clip %" PRIu64 " (record %" PRIu64 "): %s (the index is damaged; make "
                      "the features again with ingot preprocess captions)",
                      name, clip, clip, what);
}

/* Record i against the one before it (prev; NULL for the first) and the end of the values so
 * far; *end moves past its values when they are new. */
static ig_status check_record(const ig_feat_record *r, const ig_feat_record *prev, uint64_t i,
                              const ig_feat_header *h, uint64_t *end, const char *name,
                              ig_err *err) {
    if (r->len > h->caption_len) return bad(err, name, i, "more tokens than the caption length");
    if (r->len == 0) {
        if (r->offset != *end || r->xxh3 != 0)
            return bad(err, name, i, "no caption, but an offset or a checksum");
        return IG_OK;
    }
    if (prev && prev->len && r->offset == prev->offset) { /* the previous clip's caption again */
        if (r->len != prev->len || r->xxh3 != prev->xxh3)
            return bad(err, name, i, "repeats the previous clip's values with another length");
        return IG_OK;
    }
    if (r->offset != *end) return bad(err, name, i, "its values are not where the previous end");
    uint64_t bytes = (uint64_t)r->len * h->width * ig_feat_value_bytes(h->dtype);
    if (bytes > h->feat_bytes - *end) return bad(err, name, i, "its values end past the data");
    *end += bytes;
    return IG_OK;
}

ig_status ig_feat_validate(const uint8_t *fidx, size_t len, uint64_t feat_len, const char *name,
                           ig_feat_header *h, ig_err *err) {
    memset(h, 0, sizeof *h);
    if (len < IG_FEAT_HEADER_BYTES || memcmp(fidx, IG_FEAT_MAGIC, IG_FEAT_MAGIC_LEN) != 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: not a caption-feature index (bad magic or shorter than its header)",
                          name);
    h->version = ig_le_u32(fidx + 8);
    uint32_t rec = ig_le_u32(fidx + 12), reserved = ig_le_u32(fidx + 68);
    h->clips = ig_le_u64(fidx + 16);
    h->first_clip = ig_le_u64(fidx + 24);
    h->data_clips = ig_le_u64(fidx + 32);
    h->clip_key = ig_le_u64(fidx + 40);
    h->feat_bytes = ig_le_u64(fidx + 48);
    h->dtype = ig_le_u32(fidx + 56);
    h->width = ig_le_u32(fidx + 60);
    h->caption_len = ig_le_u32(fidx + 64);
    if (h->version != IG_FEAT_VERSION)
        return ig_err_set(err, h->version > IG_FEAT_VERSION ? IG_ERR_UNSUPPORTED : IG_ERR_FORMAT,
                          "%s: index version %u; this ingot reads version %d%s", name, h->version,
                          IG_FEAT_VERSION, h->version > IG_FEAT_VERSION ? " (upgrade ingot)" : "");
    if (rec != IG_FEAT_RECORD_BYTES || reserved != 0 || !ig_feat_value_bytes(h->dtype) ||
        h->width < 1 || h->width > IG_FEAT_MAX_WIDTH || h->caption_len < 1 ||
        h->caption_len > IG_FEAT_MAX_LEN)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: header fields (record size %u, dtype %u, width %u, caption length "
                          "%u) are not valid (the index is damaged)",
                          name, rec, h->dtype, h->width, h->caption_len);
    if (h->first_clip > h->data_clips || h->clips > h->data_clips - h->first_clip)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: clips %" PRIu64 " .. %" PRIu64
                          " are not within the clip data's %" PRIu64 " (the index is damaged)",
                          name, h->first_clip, h->first_clip + h->clips, h->data_clips);
    if (h->feat_bytes != feat_len)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: the index describes %" PRIu64 " bytes of features, the data file "
                          "holds %" PRIu64 " (a file is truncated or from another shard)",
                          name, h->feat_bytes, feat_len);
    uint64_t body = len - IG_FEAT_HEADER_BYTES;
    if (h->clips > body / IG_FEAT_RECORD_BYTES || body != h->clips * IG_FEAT_RECORD_BYTES)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: %zu bytes, but the header describes %" PRIu64
                          " clips (truncated or damaged)",
                          name, len, h->clips);
    const uint8_t *recs = fidx + IG_FEAT_HEADER_BYTES;
    uint64_t end = 0;
    ig_feat_record prev = {0};
    for (uint64_t i = 0; i < h->clips; i++) {
        const uint8_t *p = recs + i * IG_FEAT_RECORD_BYTES;
        if (ig_le_u32(p + 12)) return bad(err, name, i, "reserved bytes are not zero");
        ig_feat_record r = ig_feat_decode_record(p);
        ig_status st = check_record(&r, i ? &prev : NULL, i, h, &end, name, err);
        if (st != IG_OK) return st;
        prev = r;
    }
    if (end != h->feat_bytes)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: the clips cover %" PRIu64 " bytes of features, the header says "
                          "%" PRIu64 " (the index is damaged)",
                          name, end, h->feat_bytes);
    return IG_OK;
}
