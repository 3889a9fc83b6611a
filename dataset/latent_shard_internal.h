/* latent_shard_internal.h - private to dataset/: the byte layout of a latent shard's index,
 * PREFIX.lclips (DESIGN 3.2's frame shard, with a VAE's posterior in place of the frames), and the
 * validator the reader and the fuzz target share.
 *
 *   header (64 bytes)   magic "IGLATNT\0" · u32 version (1) · u32 record bytes (112) · u64 clips ·
 *                       u64 frame entries · u64 bytes of PREFIX.latents · u32 dtype (1 fp32,
 *                       2 bf16) · u32 channels (2C: the C means, then the C log-variances) ·
 *                       u32 sources · u32 buckets · u32 captions · u32 reserved (0)
 *   records[clips]      u64 offset · u64 stored bytes · u32 frames · u32 h · u32 w · u32 height ·
 *                       u32 width · u32 fps_num · u32 fps_den · u32 source · u32 caption ·
 *                       u32 bucket · u32 label · u32 tb_num · u32 tb_den · u32 reserved (0) ·
 *                       i64 start_pts · u64 first frame entry · u64 source clip ·
 *                       u64 xxh3 of the stored bytes · u64 reserved (0)           (112 bytes)
 *   frame table[frames] i64 pts · u64 source frame index (as a frame shard's)   (16 bytes)
 *
 * All little-endian and packed; every array is 8-byte aligned in the file. A clip's data is
 * frames x h x w x channels values of the dtype, row-major, stored back to back in clip order.
 */
#ifndef INGOT_LATENT_SHARD_INTERNAL_H
#define INGOT_LATENT_SHARD_INTERNAL_H

#include "video_shard_internal.h"

#define IG_LAT_MAGIC        "IGLATNT\0"
#define IG_LAT_MAGIC_LEN    8
#define IG_LAT_VERSION      1
#define IG_LAT_HEADER_BYTES 64
#define IG_LAT_RECORD_BYTES 112
#define IG_LAT_MAX_CHANNELS 4096u
#define IG_LAT_MAX_CLIP     ((uint64_t)1 << 36) /* 64 GiB of latents per clip */

#define IG_LATENT_MANIFEST_FORMAT  "ingot-latent-shard"
#define IG_LATENT_MANIFEST_VERSION 1

typedef struct ig_latent_header {
    uint32_t version;
    uint64_t clips, frames, data_bytes;
    uint32_t dtype, channels, sources, buckets, captions;
} ig_latent_header;

void ig_latent_encode_header(uint8_t out[IG_LAT_HEADER_BYTES], const ig_latent_header *h);
void ig_latent_encode_record(uint8_t out[IG_LAT_RECORD_BYTES], const ig_latent_info *c);
ig_latent_info ig_latent_decode_record(const uint8_t *p);

/* Bytes of one value of a dtype (0: not a dtype). */
static inline size_t ig_latent_dtype_size(uint32_t dtype) {
    return dtype == IG_LATENT_F32 ? 4 : dtype == IG_LATENT_BF16 ? 2 : 0;
}

/* Checks a whole PREFIX.lclips held in memory against the size of PREFIX.latents: magic, version,
 * record size, dtype, channels, counts against the buffer size, every record (sizes, contiguous
 * offsets, indices in range, reserved bytes zero) and the frame table. Never reads outside
 * buf[0..len). IG_OK and *h filled, or IG_ERR_FORMAT (IG_ERR_UNSUPPORTED for a newer version)
 * naming the file, the field and the clip. */
ig_status ig_latent_validate(const uint8_t *buf, size_t len, uint64_t data_len, const char *name,
                             ig_latent_header *h, ig_err *err);

#endif
