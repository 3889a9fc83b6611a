/* fuzz_features.c - libFuzzer target for the caption-feature index validator (dataset/
 * feature_shard_format.c), which every caption-feature shard goes through on open.
 *
 * Input: 8 bytes of little-endian PREFIX.feat length, then the PREFIX.fidx bytes. The validator
 * must never read outside the buffer (ASan) nor overflow (UBSan); when it accepts an index, every
 * invariant the reader relies on must hold (each clip's values inside the data, every byte of it
 * some clip's), or this target aborts. The seed corpus (tests/fuzz/corpus/fuzz_features/) holds
 * small shards' indexes in this form: fp32 and bf16, captions of several lengths, none, repeats.
 */
#include <stdint.h>
#include <stdlib.h>

#include "dataset/feature_shard_internal.h"

static void check(int ok) {
    if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    uint64_t feat_len = ig_le_u64(data);
    size_t len = size - 8;
    uint8_t *copy = malloc(len ? len : 1); /* exact size: ASan sees any read past the end */
    if (!copy) return 0;
    memcpy(copy, data + 8, len);
    ig_feat_header h;
    ig_err err = {0};
    ig_status st = ig_feat_validate(copy, len, feat_len, "f.fidx", &h, &err);
    check(st == IG_OK || st == IG_ERR_FORMAT || st == IG_ERR_UNSUPPORTED);
    check(st == IG_OK || err.msg[0] != '\0');
    if (st == IG_OK) {
        check(len == IG_FEAT_HEADER_BYTES + h.clips * IG_FEAT_RECORD_BYTES);
        check(h.first_clip + h.clips <= h.data_clips && h.feat_bytes == feat_len);
        size_t vb = ig_feat_value_bytes(h.dtype);
        check(vb == 2 || vb == 4);
        uint64_t end = 0;
        for (uint64_t i = 0; i < h.clips; i++) {
            ig_feat_record r =
                ig_feat_decode_record(copy + IG_FEAT_HEADER_BYTES + i * IG_FEAT_RECORD_BYTES);
            uint64_t bytes = (uint64_t)r.len * h.width * vb;
            check(r.len <= h.caption_len);
            check(r.offset <= feat_len && bytes <= feat_len - r.offset);
            if (r.offset == end) end += bytes; /* new values; else a repeat of earlier ones */
            check(r.offset + bytes <= end);
        }
        check(end == feat_len);
    }
    free(copy);
    return 0;
}
