/* cmd_inspect_video.c - `ingot inspect` and `ingot verify` for frame shards (the output of
 * `ingot preprocess video`): a summary (clips, frames, buckets, bytes, labelled clips), one clip
 * as JSON (its source, size, label, source frame indices and timestamps, caption), its frames as
 * raw RGB24 or as a PNG contact sheet; and the complete check. cmd_inspect.c and cmd_verify.c hand
 * frame shards here. Thin over dataset.h and preprocess.h. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "dataset/dataset.h"
#include "preprocess/preprocess.h"

const char *ig_cmd_inspect_target(int argc, char **argv) {
    static const char *const with_value[] = {"--doc", "--tokenizer", "--clip",
                                             "--raw", "--png",       "--features"};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) return i + 1 < argc ? argv[i + 1] : NULL;
        if (argv[i][0] != '-') return argv[i];
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
            if (!strcmp(argv[i], with_value[k])) i++;
    }
    return NULL;
}

int ig_cmd_inspect_args(const ig_command *cmd, int argc, char **argv, const char *const files[2],
                        int tokenizer, const char *what, ig_inspect_args *a) {
    struct option longopts[9] = {
        {"json", no_argument, NULL, 'j'},          {"clip", required_argument, NULL, 'c'},
        {"force", no_argument, NULL, 'f'},         {"quiet", no_argument, NULL, 'q'},
        {"threads", required_argument, NULL, 'T'},
    };
    int n = 5; /* then this kind's own: --tokenizer, the clip's files */
    if (tokenizer) longopts[n++] = (struct option){"tokenizer", required_argument, NULL, 't'};
    for (int k = 0; k < 2 && files[k]; k++)
        longopts[n++] = (struct option){files[k], required_argument, NULL, '0' + k};
    longopts[n] = (struct option){NULL, 0, NULL, 0};
    memset(a, 0, sizeof *a);
    ig_common_flags flags = {.threads = 0}; /* accepted and checked; a summary is read on this
                                               thread alone */
    opterr = 0;
    optind = 1;
    int c;
    while ((c = ig_cmd_getopt(argc, argv, ":", longopts)) != -1) {
        switch (c) {
        case 'j':
            a->as_json = 1;
            break;
        case 'c':
            if (!ig_cmd_parse_u64(cmd, "--clip", optarg, &a->clip)) return IG_EXIT_USAGE;
            a->have_clip = 1;
            break;
        case 't':
            a->tokenizer = optarg;
            break;
        case '0':
        case '1':
            a->file[c - '0'] = optarg;
            break;
        case 'f':
            a->force = 1;
            break;
        case 'q':
            break;
        case 'T':
            if (!ig_cmd_parse_threads(cmd, optarg, &flags)) return IG_EXIT_USAGE;
            break;
        default:
            return ig_cmd_bad_option(cmd, c, argv);
        }
    }
    char msg[128];
    snprintf(msg, sizeof msg, "expected one %s PREFIX", what);
    if (optind + 1 != argc) return ig_cmd_usage_error(cmd, msg);
    a->prefix = argv[optind];
    if ((a->file[0] || a->file[1]) && !a->have_clip) {
        snprintf(msg, sizeof msg, "--%s%s%s need%s --clip K", files[0], files[1] ? " and --" : "",
                 files[1] ? files[1] : "", files[1] ? "" : "s");
        return ig_cmd_usage_error(cmd, msg);
    }
    /* the outputs are judged before anything is read */
    ig_err err = {0};
    for (int k = 0; k < 2; k++)
        if (a->file[k] && ig_output_check(a->file[k], a->force, &err) != IG_OK)
            return ig_cmd_fail(&err);
    if (ig_outputs_distinct(a->file, 2, &err) != IG_OK) return ig_cmd_fail(&err);
    return -1;
}

int ig_cmd_video_target(int argc, char **argv) {
    const char *t = ig_cmd_inspect_target(argc, argv);
    return t && ig_video_shard_is(t);
}

int ig_cmd_latent_target(int argc, char **argv) {
    const char *t = ig_cmd_inspect_target(argc, argv);
    return t && ig_latent_shard_is(t);
}

/* ---- inspect -------------------------------------------------------------------------------- */

static void summary(const ig_clip_dataset *ds, const char *prefix, int as_json) {
    size_t nb = 0, n = ig_clip_dataset_num_shards(ds);
    const ig_clip_bucket *b = ig_clip_dataset_buckets(ds, &nb);
    uint64_t clips = ig_clip_dataset_clips(ds), frames = 0, bytes = 0, raw = 0, sources = 0;
    uint64_t labelled = 0, classes = 0; /* clips with a label; the largest label + 1 */
    uint64_t *per_bucket = calloc(nb + 1, sizeof *per_bucket);
    for (size_t k = 0; k < n; k++) {
        const ig_video_shard *s = ig_clip_dataset_shard(ds, k);
        const ig_video_shard_meta *m = ig_video_shard_meta_get(s);
        frames += ig_video_shard_frames(s);
        bytes += ig_video_shard_bytes(s);
        raw += m->raw_bytes;
        sources += m->n_sources;
    }
    for (uint64_t g = 0; per_bucket && g < clips; g++) {
        ig_clip_info c = ig_clip_dataset_info(ds, g, NULL, NULL);
        per_bucket[c.bucket == IG_CLIP_NONE ? nb : c.bucket]++;
        if (c.label != IG_CLIP_NONE) {
            labelled++;
            if ((uint64_t)c.label + 1 > classes) classes = (uint64_t)c.label + 1;
        }
    }
    const ig_video_shard_meta *m0 = ig_video_shard_meta_get(ig_clip_dataset_shard(ds, 0));
    if (as_json) {
        json_t *o =
            json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:s,s:s}", "prefix", prefix, "format",
                      "ingot-video-shard", "shards", (json_int_t)n, "clips", (json_int_t)clips,
                      "frames", (json_int_t)frames, "sources", (json_int_t)sources, "bytes",
                      (json_int_t)bytes, "raw_bytes", (json_int_t)raw, "compression",
                      m0->zstd ? "zstd" : "none", "sampling", m0->sampling);
        json_t *arr = json_array();
        for (size_t i = 0; i < nb && per_bucket; i++)
            json_array_append_new(
                arr, json_pack("{s:s,s:I,s:I,s:I,s:I,s:I}", "name", b[i].name, "frames",
                               (json_int_t)b[i].frames, "height", (json_int_t)b[i].height, "width",
                               (json_int_t)b[i].width, "batch_size", (json_int_t)b[i].batch_size,
                               "clips", (json_int_t)per_bucket[i]));
        json_object_set_new(o, "buckets", arr);
        json_object_set_new(o, "labelled_clips", json_integer((json_int_t)labelled));
        json_object_set_new(o, "label_classes", json_integer((json_int_t)classes));
        char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
        if (text) puts(text);
        free(text);
        json_decref(o);
    } else {
        char bb[32], rb[32];
        ig_format_bytes((double)bytes, bb, sizeof bb);
        ig_format_bytes((double)raw, rb, sizeof rb);
        printf("%s: frame shard (%zu shard%s)\n", prefix, n, n == 1 ? "" : "s");
        printf("  clips      %" PRIu64 " from %" PRIu64 " videos\n", clips, sources);
        printf("  frames     %" PRIu64 "\n", frames);
        printf("  bytes      %s stored (%s), %s of RGB24\n", bb, m0->zstd ? "zstd" : "raw", rb);
        printf("  sampling   %s\n", m0->sampling);
        printf("  captions   %s\n", m0->captions[0] ? m0->captions : "none");
        if (labelled)
            printf("  labels     %" PRIu64 " of %" PRIu64 " clips, classes 0 .. %" PRIu64 "\n",
                   labelled, clips, classes - 1);
        else
            printf("  labels     none\n");
        for (size_t i = 0; i < nb && per_bucket; i++)
            if (per_bucket[i])
                printf("  bucket     %-22s %ux%ux%u, batch %u: %" PRIu64 " clips\n", b[i].name,
                       b[i].frames, b[i].height, b[i].width, b[i].batch_size, per_bucket[i]);
    }
    free(per_bucket);
}

/* The caption of clip g as text (tokenizer: given, else the caption shard's), or NULL. */
static char *caption_text(const ig_clip_dataset *ds, uint64_t g, const char *tok_path,
                          json_t **ids_out) {
    int32_t ids[4096];
    size_t len = 0;
    ig_err err = {0};
    if (ig_clip_dataset_caption(ds, g, ids, 4096, &len, &err) != IG_OK || len == 0) return NULL;
    if (len > 4096) len = 4096;
    *ids_out = json_array();
    for (size_t i = 0; i < len; i++) json_array_append_new(*ids_out, json_integer(ids[i]));
    size_t k;
    ig_clip_dataset_info(ds, g, &k, NULL);
    const ig_video_shard_meta *m = ig_video_shard_meta_get(ig_clip_dataset_shard(ds, k));
    char cp[4096];
    const char *pre = ig_video_shard_prefix(ig_clip_dataset_shard(ds, k));
    const char *slash = strrchr(pre, '/');
    snprintf(cp, sizeof cp, "%.*s%s", slash ? (int)(slash - pre) + 1 : 0, pre, m->captions);
    ig_manifest cm = {0};
    if (!tok_path && ig_manifest_read(&cm, cp, &err) == IG_OK && cm.tokenizer_path[0])
        tok_path = cm.tokenizer_path;
    ig_tokenizer *tok = NULL;
    char *text = NULL;
    size_t tl = 0, tc = 0;
    if (tok_path && ig_tokenizer_load(&tok, NULL, tok_path, NULL, &err) == IG_OK &&
        ig_tokenizer_decode(tok, ids, len, &text, &tl, &tc, &err) == IG_OK) {
        char *z = realloc(text, tl + 1);
        if (z) z[tl] = '\0';
        text = z;
    } else {
        free(text);
        text = NULL;
    }
    ig_tokenizer_free(tok);
    ig_manifest_clear(&cm);
    return text;
}

static int clip_detail(const ig_clip_dataset *ds, uint64_t g, const char *raw_path,
                       const char *png_path, int force, const char *tok_path, int as_json) {
    uint64_t n = ig_clip_dataset_clips(ds);
    if (g >= n && n == 0)
        return ig_cmd_failf("--clip %" PRIu64 " is out of range: the shard holds no clips", g);
    if (g >= n)
        return ig_cmd_failf("--clip %" PRIu64 " is out of range: the shard holds %" PRIu64
                            " clips (0 .. %" PRIu64 ")",
                            g, n, n - 1);
    size_t k;
    uint64_t local;
    ig_clip_info c = ig_clip_dataset_info(ds, g, &k, &local);
    const ig_video_shard *s = ig_clip_dataset_shard(ds, k);
    const ig_video_shard_meta *m = ig_video_shard_meta_get(s);
    ig_clip_frame *fr = calloc(c.frames, sizeof *fr);
    size_t raw = (size_t)c.frames * c.height * c.width * 3;
    uint8_t *px = raw_path || png_path ? malloc(raw) : NULL;
    if (!fr || ((raw_path || png_path) && !px)) {
        free(fr);
        return ig_cmd_failf("out of memory for clip %" PRIu64, g);
    }
    ig_video_shard_clip_frames(s, local, fr);
    ig_err err = {0};
    int rc = IG_EXIT_OK;
    if (px && ig_video_shard_read(s, local, px, raw, 1, &err) != IG_OK) rc = ig_cmd_fail(&err);
    json_t *ids = NULL;
    char *caption = rc == IG_EXIT_OK ? caption_text(ds, g, tok_path, &ids) : NULL;
    const char *source = c.source < m->n_sources ? m->sources[c.source] : "?";
    const char *bucket = c.bucket < m->n_buckets ? m->buckets[c.bucket].name : NULL;
    double tb = (double)c.tb_num / c.tb_den;
    if (rc == IG_EXIT_OK && raw_path) {
        rc = ig_write_file_atomic(raw_path, px, raw, force, &err) == IG_OK ? IG_EXIT_OK
                                                                           : ig_cmd_fail(&err);
    }
    if (rc == IG_EXIT_OK && png_path) {
        const char *slash = strrchr(source, '/');
        uint8_t *sheet = NULL;
        uint32_t sh, sw;
        if (ig_video_contact_sheet(px, c.frames, c.height, c.width, 8,
                                   caption ? caption : (slash ? slash + 1 : source), &sheet, &sh,
                                   &sw, &err) != IG_OK ||
            ig_video_write_png(png_path, sheet, sh, sw, force, &err) != IG_OK)
            rc = ig_cmd_fail(&err);
        free(sheet);
    }
    if (rc == IG_EXIT_OK && as_json) {
        json_t *idx = json_array(), *ts = json_array();
        for (uint32_t f = 0; f < c.frames; f++) {
            json_array_append_new(idx, json_integer((json_int_t)fr[f].index));
            json_array_append_new(ts, json_real((double)(fr[f].pts) * tb));
        }
        json_t *o =
            json_pack("{s:I,s:s,s:I,s:s,s:I,s:I,s:I,s:f,s:I,s:I}", "clip", (json_int_t)g, "shard",
                      ig_video_shard_prefix(s), "index_in_shard", (json_int_t)local, "source",
                      source, "frames", (json_int_t)c.frames, "height", (json_int_t)c.height,
                      "width", (json_int_t)c.width, "fps", (double)c.fps_num / c.fps_den,
                      "stored_bytes", (json_int_t)c.stored_bytes, "raw_bytes", (json_int_t)raw);
        json_object_set_new(o, "bucket", bucket ? json_string(bucket) : json_null());
        json_object_set_new(o, "label",
                            c.label != IG_CLIP_NONE ? json_integer(c.label) : json_null());
        char tbs[48];
        snprintf(tbs, sizeof tbs, "%u/%u", c.tb_num, c.tb_den);
        json_object_set_new(o, "time_base", json_string(tbs));
        json_object_set_new(o, "source_frames", idx);
        json_object_set_new(o, "timestamps", ts);
        json_object_set_new(o, "caption", caption ? json_string(caption) : json_null());
        json_object_set_new(o, "caption_ids", ids ? json_incref(ids) : json_null());
        char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
        if (text) puts(text);
        free(text);
        json_decref(o);
    } else if (rc == IG_EXIT_OK) {
        printf("clip %" PRIu64 " (clip %" PRIu64 " of shard %s)\n", g, local,
               ig_video_shard_prefix(s));
        printf("  source     %s\n", source);
        printf("  size       %u frames of %ux%u, %.3f fps%s%s\n", c.frames, c.height, c.width,
               (double)c.fps_num / c.fps_den, bucket ? ", bucket " : "", bucket ? bucket : "");
        if (c.label != IG_CLIP_NONE)
            printf("  label      %u\n", c.label);
        else
            printf("  label      (none)\n");
        printf("  frames    ");
        for (uint32_t f = 0; f < c.frames; f++)
            printf(" %" PRIu64 "@%.3fs", fr[f].index, (double)fr[f].pts * tb);
        printf("\n  caption    %s\n", caption ? caption : "(none)");
        if (raw_path)
            printf("  wrote %s (%u x %u x %u x 3 bytes)\n", raw_path, c.frames, c.height, c.width);
        if (png_path) printf("  wrote %s\n", png_path);
    }
    json_decref(ids);
    free(caption);
    free(fr);
    free(px);
    return rc;
}

int ig_cmd_inspect_video(const ig_command *cmd, int argc, char **argv) {
    static const char *const files[2] = {"raw", "png"};
    ig_inspect_args a;
    int rc = ig_cmd_inspect_args(cmd, argc, argv, files, 1, "frame shard", &a);
    if (rc >= 0) return rc;
    const char *prefix = a.prefix;
    ig_err err = {0};
    ig_clip_dataset *ds = NULL;
    if (ig_clip_dataset_open(&ds, NULL, &prefix, 1, &err) != IG_OK) return ig_cmd_fail(&err);
    rc = IG_EXIT_OK;
    if (a.have_clip)
        rc = clip_detail(ds, a.clip, a.file[0], a.file[1], a.force, a.tokenizer, a.as_json);
    else
        summary(ds, prefix, a.as_json);
    ig_clip_dataset_close(ds);
    return rc;
}

/* ---- verify --------------------------------------------------------------------------------- */

int ig_cmd_verify_video(ig_ctx *ctx, const char *prefix, int quiet) {
    ig_err err = {0};
    size_t n = 0;
    if (ig_video_list_verify(ctx, prefix, &n, &err) != IG_OK) {
        fprintf(stderr, "%s: FAILED: %s\n", prefix, err.msg);
        return 1;
    }
    ig_clip_dataset *ds = NULL;
    if (ig_clip_dataset_open(&ds, ctx, &prefix, 1, &err) != IG_OK) {
        fprintf(stderr, "%s: FAILED: %s\n", prefix, err.msg);
        return 1;
    }
    uint64_t frames = 0;
    for (size_t k = 0; k < ig_clip_dataset_num_shards(ds); k++)
        frames += ig_video_shard_frames(ig_clip_dataset_shard(ds, k));
    if (!quiet)
        printf("%s: ok (frame shard%s%zu shard%s, %" PRIu64 " clips, %" PRIu64 " frames)\n", prefix,
               n > 1 ? ": " : ", ", n, n == 1 ? "" : "s", ig_clip_dataset_clips(ds), frames);
    ig_clip_dataset_close(ds);
    return 0;
}
