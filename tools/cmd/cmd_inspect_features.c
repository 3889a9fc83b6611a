/* cmd_inspect_features.c - `ingot inspect` and `ingot verify` for caption-feature shards (the
 * output of `ingot preprocess captions`): a summary (clips, captions, tokens, the encoder, bytes),
 * one clip's caption length and, with --features FILE, its features as raw float32 [L, D]; and the
 * complete check. cmd_inspect.c and cmd_verify.c hand feature shards here. Thin over dataset.h. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "dataset/dataset.h"
#include "kernels/backend.h"

int ig_cmd_features_target(int argc, char **argv) {
    const char *t = ig_cmd_inspect_target(argc, argv);
    return t && ig_feature_shard_is(t);
}

static void summary(const ig_feature_dataset *ds, const char *prefix, int as_json) {
    const ig_feature_meta *m = ig_feature_dataset_meta(ds);
    uint64_t clips = ig_feature_dataset_clips(ds), captioned = 0, tokens = 0, cut = 0, bytes = 0;
    char **list = NULL;
    size_t n = 0;
    ig_err err = {0};
    if (ig_feature_list_expand(prefix, &list, &n, &err) == IG_OK)
        for (size_t k = 0; k < n; k++) {
            ig_feature_meta sm;
            if (ig_feature_meta_read(&sm, list[k], &err) != IG_OK) continue;
            captioned += sm.captioned, tokens += sm.tokens, cut += sm.cut, bytes += sm.feat_bytes;
            ig_feature_meta_clear(&sm);
        }
    ig_shard_list_free(list, n);
    char wx[17], tx[17], kx[17];
    ig_hash64_hex(m->encoder.weights_xxh3, wx);
    ig_hash64_hex(m->encoder.tokenizer_hash, tx);
    ig_hash64_hex(m->clip_key, kx);
    if (as_json) {
        json_t *o = json_pack(
            "{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:I,s:{s:s,s:I,s:s,s:s,s:s},s:s}", "prefix",
            prefix, "shards", (json_int_t)n, "clips", (json_int_t)clips, "captioned",
            (json_int_t)captioned, "tokens", (json_int_t)tokens, "cut", (json_int_t)cut,
            "caption_len", (json_int_t)m->caption_len, "width", (json_int_t)m->width, "dtype",
            ig_feature_dtype_name(m->dtype), "feat_bytes", (json_int_t)bytes, "encoder", "describe",
            m->encoder.describe, "width", (json_int_t)m->encoder.width, "weights_xxh3", wx,
            "tokenizer", m->encoder.tokenizer, "tokenizer_hash", tx, "clip_key", kx);
        char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        if (text) puts(text);
        free(text);
        json_decref(o);
        return;
    }
    char b[32];
    ig_format_bytes((double)bytes, b, sizeof b);
    printf("caption features: %s (%zu shard%s)\n", prefix, n, n == 1 ? "" : "s");
    printf("clips:       %" PRIu64 ", %" PRIu64 " with a caption (the others: the null caption)\n",
           clips, captioned);
    printf("tokens:      %" PRIu64 " (at most %u a caption, </s> included; %" PRIu64 " cut)\n",
           tokens, m->caption_len, cut);
    printf("features:    %u a token, %s, %s\n", m->width, ig_feature_dtype_name(m->dtype), b);
    printf("encoder:     %s\n", m->encoder.describe);
    printf("             weights xxh3 %s, tokenizer %s (hash %s)\n", wx, m->encoder.tokenizer, tx);
    printf("clip data:   %" PRIu64 " clips, key %s, made from", m->data_clips, kx);
    for (size_t i = 0; i < m->n_sources; i++) printf(" %s", m->sources[i]);
    printf("\n");
}

/* Clip g's caption length, and with out its features as float32 [L, D]. */
static int clip_detail(const ig_feature_dataset *ds, uint64_t g, const char *out, int force,
                       int as_json) {
    if (g >= ig_feature_dataset_clips(ds))
        return ig_cmd_failf("--clip %" PRIu64 " is out of range: the features cover %" PRIu64
                            " clips (0 .. %" PRIu64 ")",
                            g, ig_feature_dataset_clips(ds), ig_feature_dataset_clips(ds) - 1);
    const ig_feature_meta *m = ig_feature_dataset_meta(ds);
    const void *v = NULL;
    uint32_t L = 0;
    ig_err err = {0};
    if (ig_feature_dataset_clip(ds, g, &v, &L, &err) != IG_OK) return ig_cmd_fail(&err);
    size_t n = (size_t)L * m->width;
    float *f = malloc(n ? n * sizeof *f : 1);
    if (!f) return ig_cmd_failf("out of memory for clip %" PRIu64 "'s features", g);
    if (m->dtype == IG_FEATURES_BF16) {
        uint16_t *h = malloc(n ? n * sizeof *h : 1);
        if (h) memcpy(h, v, n * sizeof *h), ig_backend_bf16_to_f32_n(f, h, n);
        free(h);
    } else if (n) {
        memcpy(f, v, n * sizeof *f); /* little-endian as stored, as this machine */
    }
    int rc = IG_EXIT_OK;
    if (out && ig_write_file_atomic(out, f, n * sizeof *f, force, &err) != IG_OK)
        rc = ig_cmd_fail(&err);
    if (rc == IG_EXIT_OK && as_json) {
        json_t *o = json_pack("{s:I,s:I,s:I}", "clip", (json_int_t)g, "tokens", (json_int_t)L,
                              "width", (json_int_t)m->width);
        if (o && out) json_object_set_new(o, "features", json_string(out));
        char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        if (text) puts(text);
        free(text);
        json_decref(o);
    } else if (rc == IG_EXIT_OK) {
        if (L)
            printf("clip %" PRIu64 ": a caption of %u tokens, %u features each\n", g, L, m->width);
        else
            printf("clip %" PRIu64 ": no caption (a DiT trains it with its null caption)\n", g);
        if (out)
            printf("  wrote %s: float32 [%u, %u] (numpy.fromfile('%s', '<f4').reshape(%u, %u))\n",
                   out, L, m->width, out, L, m->width);
    }
    free(f);
    return rc;
}

int ig_cmd_inspect_features(const ig_command *cmd, int argc, char **argv) {
    static const char *const files[2] = {"features", NULL};
    ig_inspect_args a;
    int rc = ig_cmd_inspect_args(cmd, argc, argv, files, 0, "caption-feature shard", &a);
    if (rc >= 0) return rc;
    const char *prefix = a.prefix;
    ig_err err = {0};
    ig_feature_dataset *ds = NULL;
    if (ig_feature_dataset_open(&ds, NULL, &prefix, 1, &err) != IG_OK) return ig_cmd_fail(&err);
    rc = IG_EXIT_OK;
    if (a.have_clip)
        rc = clip_detail(ds, a.clip, a.file[0], a.force, a.as_json);
    else
        summary(ds, prefix, a.as_json);
    ig_feature_dataset_close(ds);
    return rc;
}

int ig_cmd_verify_features(ig_ctx *ctx, const char *prefix, int quiet) {
    ig_err err = {0};
    size_t n = 0;
    ig_feature_dataset *ds = NULL;
    if (ig_feature_list_verify(ctx, prefix, &n, &err) != IG_OK ||
        ig_feature_dataset_open(&ds, ctx, &prefix, 1, &err) != IG_OK) {
        fprintf(stderr, "%s: FAILED: %s\n", prefix, err.msg);
        return 1;
    }
    if (!quiet)
        printf("%s: ok (caption features, %zu shard%s, %" PRIu64 " clips of %u features a token, "
               "%s)\n",
               prefix, n, n == 1 ? "" : "s", ig_feature_dataset_clips(ds),
               ig_feature_dataset_meta(ds)->width, ig_feature_dataset_meta(ds)->encoder.describe);
    ig_feature_dataset_close(ds);
    return 0;
}
