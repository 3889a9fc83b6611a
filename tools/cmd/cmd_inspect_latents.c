/* cmd_inspect_latents.c - `ingot inspect` and `ingot verify` for latent shards (the output of
 * `ingot preprocess latents`): a summary (clips, the latent shapes and how many clips each, the
 * dtype, the VAE that encoded them, captions, labels), one clip (its latent and pixel shape, where
 * it came from) and its stored mean | logvar as raw float32; and the complete check. cmd_inspect.c
 * and cmd_verify.c hand latent shards here. Thin over dataset.h.
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "dataset/dataset.h"

/* The shards of a prefix (a latent shard or a list of them), opened. */
typedef struct latents {
    ig_latent_shard **s;
    size_t n;
    uint64_t clips;
} latents;

static void latents_close(latents *l) {
    for (size_t i = 0; i < l->n; i++) ig_latent_shard_close(l->s[i]);
    free(l->s);
}

static ig_status latents_open(latents *l, ig_ctx *ctx, const char *prefix, ig_err *err) {
    memset(l, 0, sizeof *l);
    char **list = NULL;
    size_t n = 0;
    ig_status st = ig_latent_list_expand(prefix, &list, &n, err);
    if (st == IG_OK && !(l->s = calloc(n, sizeof *l->s)))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        st = ig_latent_shard_open(&l->s[i], ctx, list[i], err);
        if (st == IG_OK) l->n++, l->clips += ig_latent_shard_clips(l->s[i]);
        if (st == IG_OK && !ig_latent_shard_meta_get(l->s[i]))
            st = ig_err_set(err, IG_ERR_NOT_FOUND, "%s.json: missing (an unfinished shard)",
                            list[i]);
    }
    ig_shard_list_free(list, n);
    return st;
}

typedef struct shape_count {
    uint32_t f, h, w;
    uint64_t clips;
} shape_count;

static void summary(const latents *l, const char *prefix, int as_json) {
    const ig_latent_shard_meta *m0 = ig_latent_shard_meta_get(l->s[0]);
    uint64_t frames = 0, bytes = 0, labelled = 0, captioned = 0;
    shape_count shapes[64];
    size_t ns = 0, more = 0;
    for (size_t k = 0; k < l->n; k++) {
        const ig_latent_shard_meta *m = ig_latent_shard_meta_get(l->s[k]);
        frames += m->frames;
        bytes += m->data_bytes;
        for (uint64_t i = 0; i < m->clips; i++) {
            ig_latent_info c = ig_latent_shard_clip(l->s[k], i);
            labelled += c.label != IG_CLIP_NONE;
            captioned += c.caption != IG_CLIP_NONE;
            size_t j = 0;
            while (j < ns && !(shapes[j].f == c.frames && shapes[j].h == c.h && shapes[j].w == c.w))
                j++;
            if (j == ns && ns < 64) shapes[ns++] = (shape_count){c.frames, c.h, c.w, 0};
            if (j < ns)
                shapes[j].clips++;
            else
                more++;
        }
    }
    const ig_latent_vae *v = &m0->vae;
    char wx[17];
    ig_hash64_hex(v->weights_xxh3, wx);
    if (as_json) {
        json_t *o =
            json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:s,s:I,s:I}", "prefix", prefix, "format",
                      "ingot-latent-shard", "shards", (json_int_t)l->n, "clips",
                      (json_int_t)l->clips, "frames", (json_int_t)frames, "bytes",
                      (json_int_t)bytes, "dtype", ig_latent_dtype_name(m0->dtype), "channels",
                      (json_int_t)m0->channels, "latent_channels", (json_int_t)v->latent_channels);
        json_object_set_new(o, "vae",
                            json_pack("{s:s,s:s,s:s,s:I,s:f,s:f}", "path", v->path, "describe",
                                      v->describe, "weights_xxh3", wx, "downsample",
                                      (json_int_t)v->downsample, "scaling_factor",
                                      v->scaling_factor, "shift_factor", v->shift_factor));
        json_t *arr = json_array();
        for (size_t j = 0; j < ns; j++)
            json_array_append_new(
                arr, json_pack("{s:I,s:I,s:I,s:I,s:I}", "frames", (json_int_t)shapes[j].f, "h",
                               (json_int_t)shapes[j].h, "w", (json_int_t)shapes[j].w, "channels",
                               (json_int_t)m0->channels, "clips", (json_int_t)shapes[j].clips));
        json_object_set_new(o, "shapes", arr);
        json_object_set_new(o, "labelled_clips", json_integer((json_int_t)labelled));
        json_object_set_new(o, "captioned_clips", json_integer((json_int_t)captioned));
        json_object_set_new(o, "clips_source", json_string(m0->clips_source));
        char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
        if (text) puts(text);
        free(text);
        json_decref(o);
        return;
    }
    char bb[32];
    ig_format_bytes((double)bytes, bb, sizeof bb);
    printf("%s: latent shard (%zu shard%s)\n", prefix, l->n, l->n == 1 ? "" : "s");
    printf("  clips      %" PRIu64 " (from %s)\n", l->clips, m0->clips_source);
    printf("  frames     %" PRIu64 "\n", frames);
    printf("  latents    %s, %u channels a position: %u means then %u log-variances; %s\n",
           ig_latent_dtype_name(m0->dtype), m0->channels, v->latent_channels, v->latent_channels,
           bb);
    for (size_t j = 0; j < ns; j++)
        printf("  shape      [%u, %u, %u, %u]: %" PRIu64 " clips\n", shapes[j].f, shapes[j].h,
               shapes[j].w, m0->channels, shapes[j].clips);
    if (more) printf("  shape      (%zu clips of further shapes)\n", more);
    printf("  vae        %s: %s\n", v->path, v->describe);
    printf("  vae        weights xxh3 %s, downsampling %u, scaling_factor %g, shift_factor %g\n",
           wx, v->downsample, v->scaling_factor, v->shift_factor);
    printf("  captions   %" PRIu64 " clips%s\n", captioned, m0->captions[0] ? "" : " (none)");
    printf("  labels     %" PRIu64 " clips\n", labelled);
    for (size_t i = 0; i < m0->n_buckets; i++)
        printf("  bucket     %-22s %ux%ux%u pixels\n", m0->buckets[i].name, m0->buckets[i].frames,
               m0->buckets[i].height, m0->buckets[i].width);
}

static int clip_detail(const latents *l, uint64_t g, const char *raw_path, int force, int as_json) {
    ig_err err = {0};
    if (g >= l->clips && l->clips == 0) {
        ig_err_set(&err, IG_ERR_INVALID_ARG, "--clip %" PRIu64 " is out of range: no clips", g);
        return ig_cmd_fail(&err);
    }
    if (g >= l->clips) {
        ig_err_set(&err, IG_ERR_INVALID_ARG,
                   "--clip %" PRIu64 " is out of range (%" PRIu64 " clips: 0 .. %" PRIu64 ")", g,
                   l->clips, l->clips - 1);
        return ig_cmd_fail(&err);
    }
    size_t k = 0;
    uint64_t i = g;
    while (i >= ig_latent_shard_clips(l->s[k])) i -= ig_latent_shard_clips(l->s[k++]);
    const ig_latent_shard *s = l->s[k];
    const ig_latent_shard_meta *m = ig_latent_shard_meta_get(s);
    ig_latent_info c = ig_latent_shard_clip(s, i);
    uint64_t n = ig_latent_shard_clip_values(s, i);
    int rc = IG_EXIT_OK;
    if (raw_path) {
        float *v = malloc((size_t)n * sizeof *v);
        if (!v) {
            ig_err_set(&err, IG_ERR_NOMEM, "out of memory for clip %" PRIu64, g);
            return ig_cmd_fail(&err);
        }
        ig_status st = ig_latent_shard_read(s, i, v, (size_t)n, 1, &err);
        if (st == IG_OK) st = ig_write_file_atomic(raw_path, v, (size_t)n * sizeof *v, force, &err);
        free(v);
        if (st != IG_OK) return ig_cmd_fail(&err);
    }
    const char *source = c.source < m->n_sources ? m->sources[c.source] : "?";
    const char *bucket =
        c.bucket != IG_CLIP_NONE && c.bucket < m->n_buckets ? m->buckets[c.bucket].name : "";
    if (as_json) {
        json_t *o = json_pack(
            "{s:I,s:s,s:[I,I,I,I],s:[I,I,I],s:I,s:s,s:I,s:s,s:I,s:I}", "clip", (json_int_t)g,
            "shard", ig_latent_shard_prefix(s), "latent_shape", (json_int_t)c.frames,
            (json_int_t)c.h, (json_int_t)c.w, (json_int_t)m->channels, "pixel_shape",
            (json_int_t)c.frames, (json_int_t)c.height, (json_int_t)c.width, "source_clip",
            (json_int_t)c.source_clip, "source", source, "start_pts", (json_int_t)c.start_pts,
            "bucket", bucket, "stored_bytes", (json_int_t)c.stored_bytes, "caption",
            c.caption == IG_CLIP_NONE ? (json_int_t)-1 : (json_int_t)c.caption);
        json_object_set_new(o, "label",
                            c.label == IG_CLIP_NONE ? json_null() : json_integer(c.label));
        char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) puts(text);
        free(text);
        json_decref(o);
    } else {
        printf("clip %" PRIu64 " (%s, clip %" PRIu64 ")\n", g, ig_latent_shard_prefix(s), i);
        printf("  latent     [%u, %u, %u, %u] %s (mean | logvar)\n", c.frames, c.h, c.w,
               m->channels, ig_latent_dtype_name(m->dtype));
        printf("  pixels     %u frames of %ux%u\n", c.frames, c.height, c.width);
        printf("  from       clip %" PRIu64 " of %s: %s, start pts %" PRId64 " (%u/%u s)\n",
               c.source_clip, m->clips_source, source, c.start_pts, c.tb_num, c.tb_den);
        if (*bucket) printf("  bucket     %s\n", bucket);
        if (c.label != IG_CLIP_NONE) printf("  label      %u\n", c.label);
        if (c.caption != IG_CLIP_NONE)
            printf("  caption    document %u of %s\n", c.caption, m->captions);
        if (raw_path)
            printf("  wrote %s (%u x %u x %u x %u float32)\n", raw_path, c.frames, c.h, c.w,
                   m->channels);
    }
    return rc;
}

int ig_cmd_inspect_latents(const ig_command *cmd, int argc, char **argv) {
    static const char *const files[2] = {"raw", NULL};
    ig_inspect_args a;
    int rc = ig_cmd_inspect_args(cmd, argc, argv, files, 0, "latent shard", &a);
    if (rc >= 0) return rc;
    const char *prefix = a.prefix;
    ig_err err = {0};
    latents l;
    if (latents_open(&l, NULL, prefix, &err) != IG_OK) {
        latents_close(&l);
        return ig_cmd_fail(&err);
    }
    rc = IG_EXIT_OK;
    if (a.have_clip)
        rc = clip_detail(&l, a.clip, a.file[0], a.force, a.as_json);
    else
        summary(&l, prefix, a.as_json);
    latents_close(&l);
    return rc;
}

int ig_cmd_verify_latents(ig_ctx *ctx, const char *prefix, int quiet) {
    ig_err err = {0};
    size_t n = 0;
    latents l = {0};
    if (ig_latent_list_verify(ctx, prefix, &n, &err) != IG_OK ||
        latents_open(&l, ctx, prefix, &err) != IG_OK) {
        fprintf(stderr, "%s: FAILED: %s\n", prefix, err.msg);
        latents_close(&l);
        return 1;
    }
    uint64_t frames = 0;
    for (size_t k = 0; k < l.n; k++) frames += ig_latent_shard_frames(l.s[k]);
    if (!quiet)
        printf("%s: ok (latent shard%s%zu shard%s, %" PRIu64 " clips, %" PRIu64 " frames)\n",
               prefix, n > 1 ? ": " : ", ", n, n == 1 ? "" : "s", l.clips, frames);
    latents_close(&l);
    return 0;
}
