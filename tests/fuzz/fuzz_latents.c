/* fuzz_latents.c - libFuzzer target for the latent shard index validator (dataset/
 * latent_shard_format.c), which every latent shard goes through on open.
 *
 * Input: 8 bytes of little-endian PREFIX.latents length, then the PREFIX.lclips bytes. The
 * validator must never read outside the buffer (ASan) nor overflow (UBSan); when it accepts an
 * index, every invariant the reader relies on must hold, or this target aborts. The seed corpus
 * (tests/fuzz/corpus/fuzz_latents/) holds small shards' indices in this form (fp32, bf16, empty).
 */
#include <stdint.h>
#include <stdlib.h>

#include "dataset/latent_shard_internal.h"

static void check(int ok) {
    if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    uint64_t data_len = ig_le_u64(data);
    size_t len = size - 8;
    uint8_t *copy = malloc(len ? len : 1); /* exact size: ASan sees any read past the end */
    if (!copy) return 0;
    memcpy(copy, data + 8, len);
    ig_latent_header h;
    ig_err err = {0};
    ig_status st = ig_latent_validate(copy, len, data_len, "f.lclips", &h, &err);
    check(st == IG_OK || st == IG_ERR_FORMAT || st == IG_ERR_UNSUPPORTED);
    check(st == IG_OK || err.msg[0] != '\0');
    if (st == IG_OK) {
        check(len == IG_LAT_HEADER_BYTES + h.clips * IG_LAT_RECORD_BYTES +
                         h.frames * IG_CLIPS_FRAME_BYTES);
        check(ig_latent_dtype_size(h.dtype) && h.channels >= 2 && h.channels % 2 == 0);
        uint64_t end = 0, nf = 0;
        for (uint64_t i = 0; i < h.clips; i++) {
            ig_latent_info c =
                ig_latent_decode_record(copy + IG_LAT_HEADER_BYTES + i * IG_LAT_RECORD_BYTES);
            check(c.offset == end && c.first_frame == nf);
            check(c.frames >= 1 && c.h >= 1 && c.w >= 1 && c.h <= c.height && c.w <= c.width);
            check(c.stored_bytes == (uint64_t)c.frames * c.h * c.w * h.channels *
                                        ig_latent_dtype_size(h.dtype));
            check(c.stored_bytes <= IG_LAT_MAX_CLIP);
            check(c.source < h.sources);
            check(c.caption == IG_CLIP_NONE || c.caption < h.captions);
            check(c.bucket == IG_CLIP_NONE || c.bucket < h.buckets);
            check(c.label == IG_CLIP_NONE || c.label <= IG_CLIP_LABEL_MAX);
            end += c.stored_bytes;
            nf += c.frames;
            check(end <= data_len && nf <= h.frames);
        }
        check(end == data_len && nf == h.frames);
    }
    free(copy);
    return 0;
}
