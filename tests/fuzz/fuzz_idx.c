/* fuzz_idx.c - libFuzzer target for the .idx validator (dataset/shard_format.c), the parser every
 * token shard goes through on open.
 *
 * Input: 8 bytes of little-endian .bin length, then the .idx bytes. The validator must never read
 * outside the buffer (ASan) nor overflow (UBSan); when it accepts an index, every invariant the
 * reader relies on must hold, or this target aborts (a crash for libFuzzer). The seed corpus
 * (tests/fuzz/corpus/fuzz_idx/) holds the golden shard's index in this form.
 */
#include <stdint.h>
#include <stdlib.h>

#include "dataset/shard_internal.h"

static void check(int ok) {
    if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    uint64_t bin_len = ig_le_u64(data);
    const uint8_t *idx = data + 8;
    size_t idx_len = size - 8;
    /* the validator must not touch bytes past idx_len: give it an exact-size heap copy */
    uint8_t *copy = malloc(idx_len ? idx_len : 1);
    if (!copy) return 0;
    memcpy(copy, idx, idx_len);
    ig_idx_layout lay;
    ig_err err = {0};
    ig_status st = ig_shard_validate_idx(copy, idx_len, bin_len, "f.idx", "f.bin", &lay, &err);
    check(st == IG_OK || st == IG_ERR_FORMAT);
    check(st == IG_OK || err.msg[0] != '\0');
    if (st == IG_OK) {
        check(lay.itemsize == ig_dtype_size(lay.dtype) && lay.itemsize > 0);
        check(lay.d >= 1);
        check(ig_idx_file_size(lay.n, lay.d) == idx_len);
        uint64_t end = 0, tokens = 0;
        for (uint64_t i = 0; i < lay.n; i++) {
            int32_t len = ig_le_i32(copy + lay.lengths_off + 4 * i);
            int64_t p = ig_le_i64(copy + lay.pointers_off + 8 * i);
            check(len >= 0 && p >= 0 && (uint64_t)p == end);
            end += (uint64_t)len * lay.itemsize;
            check(end <= bin_len);
            tokens += (uint64_t)len;
        }
        check(end == bin_len && tokens == lay.tokens);
        int64_t prev = 0;
        for (uint64_t j = 0; j < lay.d; j++) {
            int64_t v = ig_le_i64(copy + lay.doc_index_off + 8 * j);
            check(v >= prev && (uint64_t)v <= lay.n && (j > 0 || v == 0));
            prev = v;
        }
        check((uint64_t)prev == lay.n);
    }
    free(copy);
    return 0;
}
