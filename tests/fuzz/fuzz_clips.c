/* fuzz_clips.c - libFuzzer target for the frame shard index validator (dataset/
 * video_shard_format.c), which every frame shard goes through on open.
 *
 * Input: 8 bytes of little-endian PREFIX.frames length, then the PREFIX.clips bytes. The validator
 * must never read outside the buffer (ASan) nor overflow (UBSan); when it accepts an index, every
 * invariant the reader relies on must hold, or this target aborts. The seed corpus
 * (tests/fuzz/corpus/fuzz_clips/) holds a small shard's index in this form.
 */
#include <stdint.h>
#include <stdlib.h>

#include "dataset/video_shard_internal.h"

static void check(int ok) {
    if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    uint64_t frames_len = ig_le_u64(data);
    size_t len = size - 8;
    uint8_t *copy = malloc(len ? len : 1); /* exact size: ASan sees any read past the end */
    if (!copy) return 0;
    memcpy(copy, data + 8, len);
    ig_clips_header h;
    ig_err err = {0};
    ig_status st = ig_clips_validate(copy, len, frames_len, "f.clips", &h, &err);
    check(st == IG_OK || st == IG_ERR_FORMAT || st == IG_ERR_UNSUPPORTED);
    check(st == IG_OK || err.msg[0] != '\0');
    if (st == IG_OK) {
        check(len == IG_CLIPS_HEADER_BYTES + h.clips * IG_CLIPS_RECORD_BYTES +
                         h.frames * IG_CLIPS_FRAME_BYTES);
        uint64_t end = 0, nf = 0;
        for (uint64_t i = 0; i < h.clips; i++) {
            ig_clip_info c = ig_clips_decode_record(
                copy + IG_CLIPS_HEADER_BYTES + i * IG_CLIPS_RECORD_BYTES, h.version);
            check(c.offset == end && c.first_frame == nf);
            check(c.frames >= 1 && c.height >= 1 && c.width >= 1);
            check(ig_clip_raw_bytes(&c) <= IG_CLIPS_MAX_RAW);
            check(h.compression == 1 || c.stored_bytes == ig_clip_raw_bytes(&c));
            check(c.source < h.sources);
            check(c.label == IG_CLIP_NONE || c.label <= IG_CLIP_LABEL_MAX);
            check(h.version >= 2 || c.label == IG_CLIP_NONE);
            end += c.stored_bytes;
            nf += c.frames;
            check(end <= frames_len && nf <= h.frames);
        }
        check(end == frames_len && nf == h.frames);
    }
    free(copy);
    return 0;
}
