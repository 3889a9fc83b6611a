/* fuzz_safetensors.c - libFuzzer target for the safetensors reader (train/formats/safetensors.c),
 * the parser every checkpoint and every imported Hugging Face model goes through on open.
 *
 * Input: a whole safetensors file. The reader must never read outside the buffer (ASan) nor
 * overflow (UBSan); when it accepts a file, every invariant the trainer relies on must hold, or
 * this target aborts (a crash for libFuzzer): the tensors, in file order, tile the data area
 * exactly; each one's bytes are its shape's product times its dtype's size; lookup by name finds
 * each; the fp32 copy works for F32/BF16/F16. The seed corpus (tests/fuzz/corpus/
 * fuzz_safetensors/) holds the golden files and a few small ones.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/formats/safetensors.h"

static void check(int ok) {
    if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the reader must not touch bytes past size: give it an exact-size heap copy */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    ig_st_file *f = NULL;
    ig_err err = {0};
    ig_status st = ig_st_file_open_memory(&f, NULL, copy, size, "f.safetensors", &err);
    check(st == IG_OK || st == IG_ERR_FORMAT || st == IG_ERR_UNSUPPORTED || st == IG_ERR_NOMEM);
    check(st == IG_OK || err.msg[0] != '\0');
    check((st == IG_OK) == (f != NULL));
    if (st == IG_OK) {
        uint64_t header = ig_st_file_header_len(f);
        check(header <= size - 8);
        const uint8_t *area = copy + 8 + header;
        uint64_t at = 0;
        for (size_t i = 0; i < ig_st_file_count(f); i++) {
            const ig_st_tensor *t = ig_st_file_tensor(f, i);
            check(ig_st_tensor_offset(t) == at);
            check((const uint8_t *)ig_st_tensor_data(t) == area + at);
            at += ig_st_tensor_bytes(t);
            check(at <= size - 8 - header);
            uint64_t numel = 1;
            for (int d = 0; d < ig_st_tensor_ndim(t); d++) numel *= ig_st_tensor_shape(t)[d];
            check(numel == ig_st_tensor_numel(t));
            check(numel * ig_st_dtype_bits(ig_st_tensor_dtype(t)) == 8 * ig_st_tensor_bytes(t));
            const ig_st_tensor *found = ig_st_file_find(f, ig_st_tensor_name(t));
            check(found != NULL && strcmp(ig_st_tensor_name(found), ig_st_tensor_name(t)) == 0);
            /* a zero-size tensor may share its name's lookup with no other: names are unique */
            check(found == t);
            ig_st_dtype dt = ig_st_tensor_dtype(t);
            if ((dt == IG_ST_F32 || dt == IG_ST_BF16 || dt == IG_ST_F16) && numel <= (1u << 20)) {
                float *out = malloc(numel ? numel * sizeof(float) : 1);
                if (out) {
                    check(ig_st_tensor_to_f32(t, out, numel, &err) == IG_OK);
                    free(out);
                }
            }
        }
        check(at == size - 8 - header);
        for (size_t i = 0; i < ig_st_file_metadata_count(f); i++) {
            const char *k, *v;
            ig_st_file_metadata_at(f, i, &k, &v);
            check(k && v && ig_st_file_metadata(f, k) != NULL);
        }
    }
    ig_st_file_free(f);
    free(copy);
    return 0;
}
