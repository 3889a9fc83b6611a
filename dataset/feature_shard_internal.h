/* feature_shard_internal.h - private to dataset/: the byte layout of a caption-feature shard's
 * index, PREFIX.fidx, and the validator the reader and the fuzz target share.
 *
 *   header (72 bytes)   magic "IGFEATS\0" · u32 version · u32 record bytes (24) · u64 clips ·
 *                       u64 first clip (the index of its first clip in the clip data) ·
 *                       u64 clips of the clip data · u64 the clip data's key
 *                       (ig_clip_dataset_key) · u64 bytes of PREFIX.feat · u32 dtype (1 fp32,
 *                       2 bf16) · u32 width D · u32 caption length (the most tokens of a clip) ·
 *                       u32 reserved (0)
 *   records[clips]      u64 offset of its values in PREFIX.feat · u32 tokens L (0: no caption) ·
 *                       u32 reserved (0) · u64 xxh3 of its L x D values        (24 bytes)
 *
 * All little-endian and packed. A record's values either follow the previous record's (its
 * offset is where they end) or are the previous record's again (the same offset, tokens and
 * checksum: the clips of one video share its caption, stored once); a clip without a caption has
 * L 0, checksum 0 and the offset where the values so far end. Every byte of PREFIX.feat belongs to
 * exactly one record.
 */
#ifndef INGOT_FEATURE_SHARD_INTERNAL_H
#define INGOT_FEATURE_SHARD_INTERNAL_H

#include "shard_internal.h"

#define IG_FEAT_MAGIC        "IGFEATS\0"
#define IG_FEAT_MAGIC_LEN    8
#define IG_FEAT_VERSION      1
#define IG_FEAT_HEADER_BYTES 72
#define IG_FEAT_RECORD_BYTES 24
#define IG_FEAT_MAX_WIDTH    65536u /* D */
#define IG_FEAT_MAX_LEN      65536u /* tokens of a caption */

/* The manifest's format name and version (PREFIX.json), and the list's. */
#define IG_FEAT_MANIFEST_FORMAT  "ingot-caption-features"
#define IG_FEAT_MANIFEST_VERSION 1
#define IG_FEAT_LIST_FORMAT      "ingot-caption-features-list"
#define IG_FEAT_LIST_VERSION     1

typedef struct ig_feat_header {
    uint32_t version;
    uint64_t clips, first_clip, data_clips, clip_key, feat_bytes;
    uint32_t dtype, width, caption_len;
} ig_feat_header;

typedef struct ig_feat_record {
    uint64_t offset;
    uint32_t len;
    uint64_t xxh3;
} ig_feat_record;

void ig_feat_encode_header(uint8_t out[IG_FEAT_HEADER_BYTES], const ig_feat_header *h);
void ig_feat_encode_record(uint8_t out[IG_FEAT_RECORD_BYTES], const ig_feat_record *r);
ig_feat_record ig_feat_decode_record(const uint8_t *p);

/* Bytes of a value of the dtype (0 for an unknown code). */
size_t ig_feat_value_bytes(uint32_t dtype);

/* Checks a whole PREFIX.fidx held in memory against the size of PREFIX.feat: magic, version,
 * record size, the header's fields (dtype, width, caption length, the clips within the clip
 * data), the records against the buffer's size, and every record (tokens at most the caption
 * length, values contiguous or a repeat of the previous clip's, within the data, covering it
 * whole). Never reads outside fidx[0..len). IG_OK and *h filled, or IG_ERR_FORMAT
 * (IG_ERR_UNSUPPORTED for a newer version) naming the file, the field and the clip. */
ig_status ig_feat_validate(const uint8_t *fidx, size_t len, uint64_t feat_len, const char *name,
                           ig_feat_header *h, ig_err *err);

#endif
