/* video_shard_internal.h - private to dataset/: the byte layout of a frame shard's index,
 * PREFIX.clips (DESIGN 3.2), and the validator the reader and the fuzz target share.
 *
 *   header (64 bytes)   magic "IGCLIPS\0" · u32 version · u32 record bytes (96) · u64 clips ·
 *                       u64 frame entries · u64 bytes of PREFIX.frames · u32 compression (0 raw,
 *                       1 zstd) · u32 sources · u32 buckets · u32 captions · u64 reserved (0)
 *   records[clips]      u64 offset · u64 stored bytes · u32 frames · u32 height · u32 width ·
 *                       u32 fps_num · u32 fps_den · u32 source · u32 caption · u32 bucket ·
 *                       i64 start_pts · u32 tb_num · u32 tb_den · u64 first frame entry ·
 *                       u64 xxh3 of the stored bytes · u32 label · u32 reserved (0) ·
 *                       u64 reserved (0)                                          (96 bytes)
 *   frame table[frames] i64 pts · u64 source frame index                         (16 bytes)
 *
 * All little-endian and packed; the header makes every array 8-byte aligned in the file.
 *
 * Versions: 2 (written) added the label, a class id (<= IG_CLIP_LABEL_MAX) or IG_CLIP_NONE, in
 * what version 1 reserved; the layout and sizes are otherwise the same. Version 1 (still read)
 * has the 16 reserved bytes zero, and its clips read with label IG_CLIP_NONE.
 */
#ifndef INGOT_VIDEO_SHARD_INTERNAL_H
#define INGOT_VIDEO_SHARD_INTERNAL_H

#include "shard_internal.h"

#define IG_CLIPS_MAGIC        "IGCLIPS\0"
#define IG_CLIPS_MAGIC_LEN    8
#define IG_CLIPS_VERSION      2 /* written; IG_CLIPS_VERSION_MIN .. this one are read */
#define IG_CLIPS_VERSION_MIN  1
#define IG_CLIPS_HEADER_BYTES 64
#define IG_CLIPS_RECORD_BYTES 96
#define IG_CLIPS_FRAME_BYTES  16
#define IG_CLIPS_MAX_SIDE     16384u              /* height and width */
#define IG_CLIPS_MAX_FRAMES   65536u              /* frames per clip */
#define IG_CLIPS_MAX_RAW      ((uint64_t)1 << 36) /* 64 GiB of RGB per clip */

/* The manifest's format name and version (PREFIX.json). */
#define IG_VIDEO_MANIFEST_FORMAT  "ingot-video-shard"
#define IG_VIDEO_MANIFEST_VERSION 1

typedef struct ig_clips_header {
    uint32_t version;
    uint64_t clips, frames, frames_bytes;
    uint32_t compression, sources, buckets, captions;
} ig_clips_header;

/* The header and records of the current version (IG_CLIPS_VERSION); a record is decoded as the
 * header's version lays it out (version 1: label IG_CLIP_NONE). */
void ig_clips_encode_header(uint8_t out[IG_CLIPS_HEADER_BYTES], const ig_clips_header *h);
void ig_clips_encode_record(uint8_t out[IG_CLIPS_RECORD_BYTES], const ig_clip_info *c);
ig_clip_info ig_clips_decode_record(const uint8_t *p, uint32_t version);
void ig_clips_encode_frame(uint8_t out[IG_CLIPS_FRAME_BYTES], const ig_clip_frame *f);
ig_clip_frame ig_clips_decode_frame(const uint8_t *p);

/* The raw (decoded) bytes of a clip: frames x height x width x 3 (fields already validated). */
static inline uint64_t ig_clip_raw_bytes(const ig_clip_info *c) {
    return (uint64_t)c->frames * c->height * c->width * 3;
}

/* Checks a whole PREFIX.clips held in memory against the size of PREFIX.frames: magic, version
 * (IG_CLIPS_VERSION_MIN .. IG_CLIPS_VERSION), record size, counts against the buffer size, every
 * record and the frame table (see video_shard_format.c). Never reads outside clips[0..len). IG_OK
 * and *h filled, or IG_ERR_FORMAT (IG_ERR_UNSUPPORTED for a newer version) naming the file, field
 * and clip. */
ig_status ig_clips_validate(const uint8_t *clips, size_t len, uint64_t frames_len, const char *name,
                            ig_clips_header *h, ig_err *err);

#endif
