/* video_shard_reader.c - opens a frame shard read-only (both files mapped, the whole index
 * validated on open), reads clips (copied, or decompressed with zstd), and the complete check
 * behind `ingot verify`: structure, manifest, the checksums of both files and of every clip, and
 * the caption shard.
 */
#include <inttypes.h>
#include <stdio.h>
#include <zstd.h>

#include "video_shard_internal.h"

struct ig_video_shard {
    ig_ctx *ctx;
    char *prefix;
    ig_mapped_file frames, clips;
    ig_clips_header h;
    ig_video_shard_meta meta;
    int has_meta;
};

void ig_video_shard_close(ig_video_shard *s) {
    if (!s) return;
    ig_mapped_file_close(&s->frames);
    ig_mapped_file_close(&s->clips);
    ig_video_shard_meta_clear(&s->meta);
    free(s->prefix);
    ig_free(s->ctx, s);
}

/* The manifest must describe the index it sits beside. */
static ig_status check_meta(const ig_video_shard *s, ig_err *err) {
    const ig_video_shard_meta *m = &s->meta;
    const char *what = NULL;
    if (m->clips != s->h.clips)
        what = "clips";
    else if (m->frames != s->h.frames)
        what = "frames";
    else if (m->frames_bytes != s->frames.size)
        what = "frames_bytes";
    else if (m->clips_bytes != s->clips.size)
        what = "clips_bytes";
    else if (m->clips_version && m->clips_version != s->h.version)
        what = "clips_version";
    else if (m->zstd != (s->h.compression == 1))
        what = "compression";
    else if (m->n_sources != s->h.sources)
        what = "sources";
    else if (m->n_buckets != s->h.buckets)
        what = "buckets";
    else if (m->caption_documents != s->h.captions)
        what = "caption_documents";
    if (!what) return IG_OK;
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s.json: \"%s\" does not match %s.clips (the manifest describes other "
                      "data; rebuild the shard)",
                      s->prefix, what, s->prefix);
}

ig_status ig_video_shard_open(ig_video_shard **out, ig_ctx *ctx, const char *prefix, ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    *out = NULL;
    ig_video_shard *s = ig_alloc(ctx, sizeof *s);
    if (!s) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->prefix = strdup(prefix);
    char *fp = ig_shard_path(NULL, prefix, ".frames"), *cp = ig_shard_path(NULL, prefix, ".clips");
    char *jp = ig_shard_path(NULL, prefix, ".json");
    ig_status st = IG_OK;
    char base[4096] = "";
    if (!s->prefix || !fp || !cp || !jp) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else if (!ig_file_exists(cp) || !ig_file_exists(fp)) {
        st = ig_err_set(err, IG_ERR_NOT_FOUND,
                        "%s: no such frame shard (%s is missing; a frame shard is PREFIX.frames + "
                        "PREFIX.clips, give the PREFIX without extension)",
                        prefix, ig_file_exists(cp) ? fp : cp);
    } else if (ig_run_marker_covering(prefix, base, sizeof base)) {
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s belongs to the output %s of an unfinished preprocess run "
                        "(%s.incomplete exists): the run was killed or is still going; rerun it",
                        prefix, base, base);
    }
    if (st == IG_OK) st = ig_mapped_file_open(&s->clips, cp, err);
    if (st == IG_OK) st = ig_mapped_file_open(&s->frames, fp, err);
    if (st == IG_OK)
        st = ig_clips_validate(s->clips.data, s->clips.size, s->frames.size, cp, &s->h, err);
    if (st == IG_OK && ig_file_exists(jp)) {
        st = ig_video_shard_meta_read(&s->meta, prefix, err);
        s->has_meta = st == IG_OK;
        if (st == IG_OK) st = check_meta(s, err);
        if (st == IG_OK && s->meta.output[0]) {
            const char *slash = strrchr(prefix, '/');
            int dl = slash ? (int)(slash - prefix) + 1 : 0;
            snprintf(base, sizeof base, "%.*s%s", dl, prefix, s->meta.output);
            if (ig_run_marker_exists(base))
                st = ig_err_set(err, IG_ERR_FORMAT,
                                "%s belongs to the output %s of an unfinished preprocess run "
                                "(%s.incomplete exists): the run was killed or is still going; "
                                "rerun it",
                                prefix, base, base);
        }
    }
    free(fp);
    free(cp);
    free(jp);
    if (st != IG_OK) {
        ig_video_shard_close(s);
        return st;
    }
    *out = s;
    return IG_OK;
}

const char *ig_video_shard_prefix(const ig_video_shard *s) {
    return s->prefix;
}
uint64_t ig_video_shard_clips(const ig_video_shard *s) {
    return s->h.clips;
}
uint64_t ig_video_shard_frames(const ig_video_shard *s) {
    return s->h.frames;
}
uint64_t ig_video_shard_bytes(const ig_video_shard *s) {
    return s->frames.size;
}
int ig_video_shard_zstd(const ig_video_shard *s) {
    return s->h.compression == 1;
}
const ig_video_shard_meta *ig_video_shard_meta_get(const ig_video_shard *s) {
    return s->has_meta ? &s->meta : NULL;
}

ig_clip_info ig_video_shard_clip(const ig_video_shard *s, uint64_t i) {
    return ig_clips_decode_record(s->clips.data + IG_CLIPS_HEADER_BYTES + i * IG_CLIPS_RECORD_BYTES,
                                  s->h.version);
}

void ig_video_shard_clip_frames(const ig_video_shard *s, uint64_t i, ig_clip_frame *out) {
    ig_clip_info c = ig_video_shard_clip(s, i);
    const uint8_t *t = s->clips.data + IG_CLIPS_HEADER_BYTES + s->h.clips * IG_CLIPS_RECORD_BYTES +
                       c.first_frame * IG_CLIPS_FRAME_BYTES;
    for (uint32_t f = 0; f < c.frames; f++) out[f] = ig_clips_decode_frame(t + f * 16);
}

uint64_t ig_video_shard_clip_bytes(const ig_video_shard *s, uint64_t i) {
    ig_clip_info c = ig_video_shard_clip(s, i);
    return ig_clip_raw_bytes(&c);
}

ig_status ig_video_shard_read(const ig_video_shard *s, uint64_t i, void *out, size_t cap,
                              int verify, ig_err *err) {
    if (i >= s->h.clips)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: clip %" PRIu64 " is out of range (%" PRIu64 " clips)", s->prefix, i,
                          s->h.clips);
    ig_clip_info c = ig_video_shard_clip(s, i);
    uint64_t raw = ig_clip_raw_bytes(&c);
    if (cap < raw)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: clip %" PRIu64 " needs %" PRIu64 " bytes, the buffer has %zu",
                          s->prefix, i, raw, cap);
    const uint8_t *data = s->frames.data + c.offset;
    if (verify && ig_xxh3_64(data, c.stored_bytes) != c.xxh3)
        return ig_err_set(err, IG_ERR_CHECKSUM,
                          "%s.frames: clip %" PRIu64 " does not match its checksum (the file "
                          "was modified or is damaged; rebuild the shard)",
                          s->prefix, i);
    if (s->h.compression == 0) {
        memcpy(out, data, raw);
        return IG_OK;
    }
    size_t n = ZSTD_decompress(out, raw, data, c.stored_bytes);
    if (ZSTD_isError(n) || n != raw)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s.frames: clip %" PRIu64 " does not decompress to its %" PRIu64
                          " bytes (%s; the file is damaged: rebuild the shard)",
                          s->prefix, i, raw, ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short");
    return IG_OK;
}

static ig_status checksum(ig_err *err, const char *prefix, const char *ext, const ig_mapped_file *f,
                          uint64_t want) {
    uint64_t got = ig_xxh3_64(f->data, f->size);
    if (got == want) return IG_OK;
    char a[17], b[17];
    ig_hash64_hex(got, a);
    ig_hash64_hex(want, b);
    return ig_err_set(err, IG_ERR_CHECKSUM,
                      "%s%s: xxh3 is %s but the manifest records %s (the file was modified or is "
                      "damaged; rebuild the shard)",
                      prefix, ext, a, b);
}

/* The prefix of a shard the manifest names (the caption shard, the caption text shard) beside
 * this one, or NULL when it names none (name "") or out of memory. */
static char *beside(const ig_video_shard *s, const char *name) {
    if (!s->has_meta || !name[0]) return NULL;
    const char *slash = strrchr(s->prefix, '/');
    int dl = slash ? (int)(slash - s->prefix) + 1 : 0;
    size_t n = (size_t)dl + strlen(name) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%.*s%s", dl, s->prefix, name);
    return p;
}

/* A token shard the frame shard's manifest names (the captions' tokens, their texts): verified
 * whole, and one document per caption the manifest counts. */
static ig_status verify_beside(ig_ctx *ctx, const ig_video_shard *s, const char *name,
                               uint64_t documents, ig_err *err) {
    if (!s->has_meta || !name[0]) return IG_OK;
    char *path = beside(s, name);
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = ig_shard_verify(ctx, path, err);
    ig_shard *cs = NULL;
    if (st == IG_OK) st = ig_shard_open(&cs, ctx, path, err);
    if (st == IG_OK && ig_shard_documents(cs) != documents)
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: %" PRIu64 " documents, the manifest of %s says %" PRIu64
                        " (one a caption)",
                        path, ig_shard_documents(cs), s->prefix, documents);
    ig_shard_close(cs);
    free(path);
    return st;
}

ig_status ig_video_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    ig_video_shard *s;
    ig_status st = ig_video_shard_open(&s, ctx, prefix, err);
    if (st != IG_OK) return st;
    if (!s->has_meta) {
        ig_video_shard_meta m;
        st = ig_video_shard_meta_read(&m, prefix, err); /* the "manifest missing" message */
        ig_video_shard_meta_clear(&m);
        if (st == IG_OK) st = ig_err_set(err, IG_ERR_NOT_FOUND, "%s.json: missing", prefix);
    }
    if (st == IG_OK) st = checksum(err, prefix, ".clips", &s->clips, s->meta.clips_xxh3);
    if (st == IG_OK) st = checksum(err, prefix, ".frames", &s->frames, s->meta.frames_xxh3);
    for (uint64_t i = 0; st == IG_OK && i < s->h.clips; i++) {
        ig_clip_info c = ig_video_shard_clip(s, i);
        if (ig_xxh3_64(s->frames.data + c.offset, c.stored_bytes) != c.xxh3)
            st = ig_err_set(err, IG_ERR_CHECKSUM, "%s.frames: clip %" PRIu64 ": checksum differs",
                            prefix, i);
    }
    if (st == IG_OK && s->h.compression == 1 && s->h.clips) { /* every clip decompresses */
        uint64_t most = 0;
        for (uint64_t i = 0; i < s->h.clips; i++)
            if (ig_video_shard_clip_bytes(s, i) > most) most = ig_video_shard_clip_bytes(s, i);
        void *buf = malloc(most);
        if (!buf) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory verifying %s", prefix);
        for (uint64_t i = 0; st == IG_OK && i < s->h.clips; i++)
            st = ig_video_shard_read(s, i, buf, most, 0, err);
        free(buf);
    }
    if (st == IG_OK) st = verify_beside(ctx, s, s->meta.captions, s->meta.caption_documents, err);
    if (st == IG_OK) st = verify_beside(ctx, s, s->meta.texts, s->meta.n_sources, err);
    ig_video_shard_close(s);
    return st;
}

void ig_video_shard_remove(const char *prefix) {
    static const char *const exts[] = {".json", ".clips", ".frames"};
    for (size_t i = 0; i < 3; i++) {
        char *p = ig_shard_path(NULL, prefix, exts[i]);
        if (p) remove(p);
        free(p);
    }
    static const char *const beside_exts[] = {".captions", ".texts", ".features"};
    for (size_t i = 0; i < 3; i++) {
        char *p = ig_shard_path(NULL, prefix, beside_exts[i]);
        if (p && i < 2) ig_shard_remove(p);
        if (p && i == 2) ig_feature_shard_remove(p); /* made in the same run (--text-encoder) */
        free(p);
    }
}
