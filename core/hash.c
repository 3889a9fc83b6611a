/* hash.c - thin wrappers over libxxhash's XXH3, so that callers need not include xxhash.h. */
#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

uint64_t ig_xxh3_64(const void *data, size_t len) {
    return XXH3_64bits(data, len);
}

ig_hash128 ig_xxh3_128(const void *data, size_t len) {
    XXH128_hash_t h = XXH3_128bits(data, len);
    return (ig_hash128){h.low64, h.high64};
}

struct ig_xxh3_stream {
    XXH3_state_t *state;
};

ig_xxh3_stream *ig_xxh3_stream_create(void) {
    ig_xxh3_stream *s = malloc(sizeof *s);
    if (!s) return NULL;
    s->state = XXH3_createState();
    if (!s->state) {
        free(s);
        return NULL;
    }
    XXH3_64bits_reset(s->state);
    return s;
}

void ig_xxh3_stream_update(ig_xxh3_stream *s, const void *data, size_t len) {
    XXH3_64bits_update(s->state, data, len);
}

uint64_t ig_xxh3_stream_digest(const ig_xxh3_stream *s) {
    return XXH3_64bits_digest(s->state);
}

void ig_xxh3_stream_copy(ig_xxh3_stream *dst, const ig_xxh3_stream *src) {
    XXH3_copyState(dst->state, src->state);
}

void ig_xxh3_stream_free(ig_xxh3_stream *s) {
    if (!s) return;
    XXH3_freeState(s->state);
    free(s);
}

void ig_hash64_hex(uint64_t h, char out[17]) {
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

ig_status ig_file_xxh3(const char *path, uint64_t *out, ig_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ig_err_errno(err, errno, "cannot open %s", path);
    ig_xxh3_stream *s = ig_xxh3_stream_create();
    char *buf = malloc(1 << 20);
    if (!s || !buf) {
        fclose(f);
        ig_xxh3_stream_free(s);
        free(buf);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory hashing %s", path);
    }
    size_t n;
    while ((n = fread(buf, 1, 1 << 20, f)) > 0) ig_xxh3_stream_update(s, buf, n);
    int bad = ferror(f);
    int e = errno;
    fclose(f);
    *out = ig_xxh3_stream_digest(s);
    ig_xxh3_stream_free(s);
    free(buf);
    if (bad) return ig_err_errno(err, e, "cannot read %s", path);
    return IG_OK;
}
