/* fuzz_buckets.c - libFuzzer target for the bucket config parser (preprocess/video_buckets.c,
 * YAML through libfyaml) and the assignment: any input ends in IG_OK or IG_ERR_CONFIG with a
 * message; an accepted table has buckets of positive sizes in multiples of 16, and assignment
 * only returns their indices. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "preprocess/preprocess.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ig_video_buckets *b = NULL;
    ig_err err = {0};
    ig_status st = ig_video_buckets_parse(&b, (const char *)data, size, "b.yaml", &err);
    if (st != IG_OK) {
        if ((st != IG_ERR_CONFIG && st != IG_ERR_NOMEM) || !err.msg[0]) abort();
        return 0;
    }
    size_t n = ig_video_buckets_count(b);
    for (size_t i = 0; i < n; i++) {
        const ig_video_bucket *x = ig_video_buckets_get(b, i);
        if (!x->frames || !x->height || !x->width || !x->batch_size || x->height % 16 ||
            x->width % 16)
            abort();
    }
    for (uint64_t k = 0; k < 8; k++) {
        int64_t a = ig_video_buckets_assign(b, 1 + k * 40, 720, 1280, 1, k);
        if (a >= (int64_t)n || a < -1) abort();
    }
    ig_video_buckets_free(b);
    return 0;
}
