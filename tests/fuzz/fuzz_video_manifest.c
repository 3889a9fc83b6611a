/* fuzz_video_manifest.c - libFuzzer target for the video manifest parser (preprocess/
 * video_manifest.c): Open-Sora CSV (quoted fields, newlines in quotes) and JSON lines. The first
 * byte picks the format. Every parse must end in IG_OK or IG_ERR_FORMAT with a message, and an
 * accepted manifest must hold entries with a path, sane times and a label in range (or none). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "preprocess/preprocess.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *text = malloc(size); /* exact size: no NUL to lean on */
    if (!text) return 0;
    memcpy(text, data + 1, size - 1);
    ig_video_manifest m;
    ig_err err = {0};
    ig_status st = ig_video_manifest_parse(&m, text, size - 1, data[0] & 1, "dir/m.csv", &err);
    if (st != IG_OK && (st != IG_ERR_FORMAT || !err.msg[0])) abort();
    for (size_t i = 0; st == IG_OK && i < m.n; i++) {
        const ig_video_entry *e = &m.entries[i];
        if (!e->path || !e->path[0] || !e->text || e->start < 0 ||
            (e->end >= 0 && e->end <= e->start) ||
            (e->label != IG_CLIP_NONE && e->label > IG_CLIP_LABEL_MAX))
            abort();
    }
    if (st == IG_OK) ig_video_manifest_clear(&m);
    free(text);
    return 0;
}
