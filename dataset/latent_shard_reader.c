/* latent_shard_reader.c - opens a latent shard read-only (both files mapped, the whole index
 * validated on open), reads a clip's moments as fp32, and the complete check behind `ingot
 * verify`: structure, manifest, the checksums of both files and of every clip, the caption shard.
 */
#include <inttypes.h>
#include <stdio.h>

#include "latent_shard_internal.h"

struct ig_latent_shard {
    ig_ctx *ctx;
    char *prefix;
    ig_mapped_file data, index;
    ig_latent_header h;
    ig_latent_shard_meta meta;
    int has_meta;
};

void ig_latent_shard_close(ig_latent_shard *s) {
    if (!s) return;
    ig_mapped_file_close(&s->data);
    ig_mapped_file_close(&s->index);
    ig_latent_shard_meta_clear(&s->meta);
    free(s->prefix);
    ig_free(s->ctx, s);
}

/* The manifest must describe the index it sits beside. */
static ig_status check_meta(const ig_latent_shard *s, ig_err *err) {
    const ig_latent_shard_meta *m = &s->meta;
    const char *what = NULL;
    if (m->clips != s->h.clips)
        what = "clips";
    else if (m->frames != s->h.frames)
        what = "frames";
    else if (m->data_bytes != s->data.size)
        what = "data_bytes";
    else if (m->index_bytes != s->index.size)
        what = "index_bytes";
    else if (m->dtype != s->h.dtype)
        what = "dtype";
    else if (m->channels != s->h.channels)
        what = "channels";
    else if (m->n_sources != s->h.sources)
        what = "sources";
    else if (m->n_buckets != s->h.buckets)
        what = "buckets";
    else if (m->caption_documents != s->h.captions)
        what = "caption_documents";
    if (!what) return IG_OK;
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s.json: \"%s\" does not match %s.lclips (the manifest describes other "
                      "data; rebuild the shard)",
                      s->prefix, what, s->prefix);
}

static ig_status unfinished(ig_err *err, const char *prefix, const char *base) {
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s belongs to the output %s of an unfinished preprocess run "
                      "(%s.incomplete exists): the run was killed or is still going; rerun it",
                      prefix, base, base);
}

ig_status ig_latent_shard_open(ig_latent_shard **out, ig_ctx *ctx, const char *prefix,
                               ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    *out = NULL;
    ig_latent_shard *s = ig_alloc(ctx, sizeof *s);
    if (!s) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->prefix = strdup(prefix);
    char *dp = ig_shard_path(NULL, prefix, ".latents"),
         *ip = ig_shard_path(NULL, prefix, ".lclips");
    char *jp = ig_shard_path(NULL, prefix, ".json");
    ig_status st = IG_OK;
    char base[4096] = "";
    if (!s->prefix || !dp || !ip || !jp) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else if (!ig_file_exists(ip) || !ig_file_exists(dp)) {
        st = ig_err_set(err, IG_ERR_NOT_FOUND,
                        "%s: no such latent shard (%s is missing; a latent shard is "
                        "PREFIX.latents + PREFIX.lclips, give the PREFIX without extension)",
                        prefix, ig_file_exists(ip) ? dp : ip);
    } else if (ig_run_marker_covering(prefix, base, sizeof base)) {
        st = unfinished(err, prefix, base);
    }
    if (st == IG_OK) st = ig_mapped_file_open(&s->index, ip, err);
    if (st == IG_OK) st = ig_mapped_file_open(&s->data, dp, err);
    if (st == IG_OK)
        st = ig_latent_validate(s->index.data, s->index.size, s->data.size, ip, &s->h, err);
    if (st == IG_OK && ig_file_exists(jp)) {
        st = ig_latent_shard_meta_read(&s->meta, prefix, err);
        s->has_meta = st == IG_OK;
        if (st == IG_OK) st = check_meta(s, err);
        if (st == IG_OK && s->meta.output[0]) {
            const char *slash = strrchr(prefix, '/');
            int dl = slash ? (int)(slash - prefix) + 1 : 0;
            snprintf(base, sizeof base, "%.*s%s", dl, prefix, s->meta.output);
            if (ig_run_marker_exists(base)) st = unfinished(err, prefix, base);
        }
    }
    free(dp);
    free(ip);
    free(jp);
    if (st != IG_OK) {
        ig_latent_shard_close(s);
        return st;
    }
    *out = s;
    return IG_OK;
}

const char *ig_latent_shard_prefix(const ig_latent_shard *s) {
    return s->prefix;
}
uint64_t ig_latent_shard_clips(const ig_latent_shard *s) {
    return s->h.clips;
}
uint64_t ig_latent_shard_frames(const ig_latent_shard *s) {
    return s->h.frames;
}
uint32_t ig_latent_shard_dtype(const ig_latent_shard *s) {
    return s->h.dtype;
}
uint32_t ig_latent_shard_channels(const ig_latent_shard *s) {
    return s->h.channels;
}
const ig_latent_shard_meta *ig_latent_shard_meta_get(const ig_latent_shard *s) {
    return s->has_meta ? &s->meta : NULL;
}

ig_latent_info ig_latent_shard_clip(const ig_latent_shard *s, uint64_t i) {
    return ig_latent_decode_record(s->index.data + IG_LAT_HEADER_BYTES + i * IG_LAT_RECORD_BYTES);
}

void ig_latent_shard_clip_frames(const ig_latent_shard *s, uint64_t i, ig_clip_frame *out) {
    ig_latent_info c = ig_latent_shard_clip(s, i);
    const uint8_t *t = s->index.data + IG_LAT_HEADER_BYTES + s->h.clips * IG_LAT_RECORD_BYTES +
                       c.first_frame * IG_CLIPS_FRAME_BYTES;
    for (uint32_t f = 0; f < c.frames; f++)
        out[f] = ig_clips_decode_frame(t + (size_t)f * IG_CLIPS_FRAME_BYTES);
}

uint64_t ig_latent_shard_clip_values(const ig_latent_shard *s, uint64_t i) {
    ig_latent_info c = ig_latent_shard_clip(s, i);
    return (uint64_t)c.frames * c.h * c.w * s->h.channels;
}

ig_status ig_latent_shard_read(const ig_latent_shard *s, uint64_t i, float *out, size_t cap,
                               int verify, ig_err *err) {
    if (i >= s->h.clips)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: clip %" PRIu64 " is out of range (%" PRIu64 " clips)", s->prefix, i,
                          s->h.clips);
    ig_latent_info c = ig_latent_shard_clip(s, i);
    uint64_t n = ig_latent_shard_clip_values(s, i);
    if (cap < n)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: clip %" PRIu64 " has %" PRIu64 " values, the buffer %zu", s->prefix,
                          i, n, cap);
    const uint8_t *p = s->data.data + c.offset;
    if (verify && ig_xxh3_64(p, c.stored_bytes) != c.xxh3)
        return ig_err_set(err, IG_ERR_CHECKSUM,
                          "%s.latents: clip %" PRIu64 " does not match its checksum (the file "
                          "was modified or is damaged; rebuild the shard)",
                          s->prefix, i);
    for (uint64_t k = 0; k < n; k++) {
        uint32_t u = s->h.dtype == IG_LATENT_F32 ? ig_le_u32(p + 4 * k)
                                                 : (uint32_t)(p[2 * k] | p[2 * k + 1] << 8) << 16;
        memcpy(&out[k], &u, sizeof u);
    }
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

ig_status ig_latent_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    ig_latent_shard *s;
    ig_status st = ig_latent_shard_open(&s, ctx, prefix, err);
    if (st != IG_OK) return st;
    if (!s->has_meta) {
        ig_latent_shard_meta m;
        st = ig_latent_shard_meta_read(&m, prefix, err); /* the "manifest missing" message */
        ig_latent_shard_meta_clear(&m);
        if (st == IG_OK) st = ig_err_set(err, IG_ERR_NOT_FOUND, "%s.json: missing", prefix);
    }
    if (st == IG_OK) st = checksum(err, prefix, ".lclips", &s->index, s->meta.index_xxh3);
    if (st == IG_OK) st = checksum(err, prefix, ".latents", &s->data, s->meta.data_xxh3);
    for (uint64_t i = 0; st == IG_OK && i < s->h.clips; i++) {
        ig_latent_info c = ig_latent_shard_clip(s, i);
        if (ig_xxh3_64(s->data.data + c.offset, c.stored_bytes) != c.xxh3)
            st = ig_err_set(err, IG_ERR_CHECKSUM, "%s.latents: clip %" PRIu64 ": checksum differs",
                            prefix, i);
    }
    if (st == IG_OK && s->meta.captions[0]) {
        const char *slash = strrchr(prefix, '/');
        int dl = slash ? (int)(slash - prefix) + 1 : 0;
        char cap[4096];
        snprintf(cap, sizeof cap, "%.*s%s", dl, prefix, s->meta.captions);
        st = ig_shard_verify(ctx, cap, err);
        ig_shard *cs = NULL;
        if (st == IG_OK) st = ig_shard_open(&cs, ctx, cap, err);
        if (st == IG_OK && ig_shard_documents(cs) != s->meta.caption_documents)
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: %" PRIu64 " caption documents, the manifest of %s says %" PRIu64,
                            cap, ig_shard_documents(cs), prefix, s->meta.caption_documents);
        ig_shard_close(cs);
    }
    ig_latent_shard_close(s);
    return st;
}

void ig_latent_shard_remove(const char *prefix) {
    static const char *const exts[] = {".json", ".lclips", ".latents"};
    for (size_t i = 0; i < 3; i++) {
        char *p = ig_shard_path(NULL, prefix, exts[i]);
        if (p) remove(p);
        free(p);
    }
    char *cap = ig_shard_path(NULL, prefix, ".captions");
    if (cap) ig_shard_remove(cap);
    free(cap);
}
