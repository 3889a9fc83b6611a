/* cmd_preprocess_video.c - `ingot preprocess video`: a manifest of videos to a frame shard with
 * captions, a manifest and a report (or, --probe-only, Open-Sora's info CSV). Thin over
 * ig_preprocess_video; dispatched from `ingot preprocess`. Under mpirun the ranks split the
 * manifest and rank 0 writes the shard list and the report. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "cmd_text_encoder.h"
#include "comm/comm.h"
#include "preprocess/preprocess.h"

const char ig_usage_preprocess_video[] =
    "usage: ingot preprocess video --manifest M.csv --output-prefix OUT --frames T [options]\n"
    "\n"
    "Decodes the videos of an Open-Sora manifest (path,text[,start,end,...]) into a frame\n"
    "shard: OUT.frames + OUT.clips + OUT.json, the captions' text OUT.texts (what preprocess\n"
    "captions encodes), a caption token shard OUT.captions with --tokenizer, the captions'\n"
    "features OUT.features with --text-encoder, and OUT.report.csv (a row per video: status, "
    "reason, clips, frames, decode\n"
    "seconds). Each clip is T frames of RGB24, seeked to and decoded alone (never the whole\n"
    "file), taken by presentation time. Bad videos (missing, empty, truncated, corrupt, not a\n"
    "video, too short, too slow, too large for memory) are skipped and reported; an allocation\n"
    "that fails for one video skips it (out_of_memory), the run goes on. The output is\n"
    "byte-identical for any --workers (with --max-video-memory given).\n"
    "\n"
    "input:\n"
    "  --manifest M            .csv (header row; relative paths are relative to M) or .jsonl\n"
    "clips:\n"
    "  --frames T              frames per clip (with --buckets: the bucket's)\n"
    "  --stride S              every S-th frame (default 1)\n"
    "  --fps F                 or frames at F per second, by presentation time (VFR-safe)\n"
    "  --size HxW              cover-crop and scale every clip to H x W (default: as decoded)\n"
    "  --buckets Y.yaml        or Open-Sora resolution x frames buckets (see "
    "configs/buckets.yaml)\n"
    "  --clips-per-video K     clips from each video, spread over it (default 1)\n"
    "  --seed N                clip starts and bucket draws (default 1234)\n"
    "output:\n"
    "  --output-prefix OUT     where to write (the directory must exist)\n"
    "  --compress zstd[:L]     compress each clip with zstd (level L, default 3)\n"
    "  --tokenizer T           tokenize the text column into OUT.captions (a token shard):\n"
    "                          tokenizer.json, .tiktoken, or a SentencePiece .model (T5's\n"
    "                          spiece.model)\n"
    "  --tiktoken-encoding E   for a .tiktoken file (default: from its name)\n"
    "  --text-encoder DIR      also encode every clip's caption with this frozen T5 (a Hugging\n"
    "                          Face directory) into the caption-feature shard OUT.features, as\n"
    "                          'ingot preprocess captions --clips OUT' would (see its --help: the\n"
    "                          tokenizer is the directory's, </s> appended; what the encoder\n"
    "                          takes is said first, and what does not fit is refused)\n"
    "  --caption-len N         with --text-encoder: tokens a caption keeps (default 120)\n"
    "  --features-dtype D      with --text-encoder: fp32 (default) or bf16\n"
    "  --probe-only            only probe: write OUT.info.csv (num_frames, height, width,\n"
    "                          aspect_ratio, resolution, fps, rotation, vfr, codec, ...)\n"
    "  --force                 replace an existing complete output\n"
    "run:\n"
    "  --workers N             videos decoded at once (default: all cores)\n"
    "  --decoder-threads N     FFmpeg threads per video (default: cores / workers, or / videos\n"
    "                          when fewer: one video gets every core)\n"
    "  --timeout SECONDS       time limit per video (default 120; 0: none)\n"
    "  --max-video-memory SIZE memory one video may take while decoded, its clips as RGB and\n"
    "                          the decoder's frames (e.g. 4GB; default: the memory available\n"
    "                          at the start / (2 x workers)); a larger one is skipped as\n"
    "                          too_large with its figures. Give it for the same output on\n"
    "                          every machine\n"
    "  --strict                the first bad video stops the run (exit 1)\n"
    "  --quiet, --verbose      less or more output (--verbose shows FFmpeg's messages)\n"
    "\n"
    "examples:\n"
    "  ingot preprocess video --manifest videos.csv --output-prefix out/clips --frames 16 \\\n"
    "      --stride 2 --size 256x256 --tokenizer data/gpt2\n"
    "  ingot preprocess video --manifest videos.csv --output-prefix out/os --buckets \\\n"
    "      configs/buckets.yaml --fps 8 --clips-per-video 2 --compress zstd\n"
    "  ingot preprocess video --manifest videos.csv --output-prefix out/info --probe-only\n"
    "  ingot preprocess video --manifest data/video/manifest.csv --output-prefix out/clips \\\n"
    "      --frames 4 --size 16x16 --text-encoder tests/data/golden/t5/gated --caption-len 32\n"
    "  mpirun -np 4 ingot preprocess video --manifest videos.csv --output-prefix out/v --frames "
    "8\n";

static const ig_command video_cmd = {"preprocess video", "", ig_usage_preprocess_video, NULL};

enum {
    OPT_MANIFEST = 256,
    OPT_OUTPUT,
    OPT_FRAMES,
    OPT_STRIDE,
    OPT_FPS,
    OPT_SIZE,
    OPT_BUCKETS,
    OPT_CLIPS,
    OPT_SEED,
    OPT_COMPRESS,
    OPT_TOKENIZER,
    OPT_TIKTOKEN,
    OPT_PROBE,
    OPT_FORCE,
    OPT_WORKERS,
    OPT_DEC_THREADS,
    OPT_TIMEOUT,
    OPT_MAX_MEMORY,
    OPT_STRICT,
    OPT_QUIET,
    OPT_VERBOSE,
    OPT_TEXT_ENCODER,
    OPT_CAPTION_LEN,
    OPT_FEATURES_DTYPE,
};

static const struct option long_opts[] = {
    {"manifest", required_argument, NULL, OPT_MANIFEST},
    {"output-prefix", required_argument, NULL, OPT_OUTPUT},
    {"frames", required_argument, NULL, OPT_FRAMES},
    {"stride", required_argument, NULL, OPT_STRIDE},
    {"fps", required_argument, NULL, OPT_FPS},
    {"size", required_argument, NULL, OPT_SIZE},
    {"buckets", required_argument, NULL, OPT_BUCKETS},
    {"clips-per-video", required_argument, NULL, OPT_CLIPS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"compress", required_argument, NULL, OPT_COMPRESS},
    {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"tiktoken-encoding", required_argument, NULL, OPT_TIKTOKEN},
    {"probe-only", no_argument, NULL, OPT_PROBE},
    {"force", no_argument, NULL, OPT_FORCE},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"decoder-threads", required_argument, NULL, OPT_DEC_THREADS},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"max-video-memory", required_argument, NULL, OPT_MAX_MEMORY},
    {"strict", no_argument, NULL, OPT_STRICT},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {"text-encoder", required_argument, NULL, OPT_TEXT_ENCODER},
    {"caption-len", required_argument, NULL, OPT_CAPTION_LEN},
    {"features-dtype", required_argument, NULL, OPT_FEATURES_DTYPE},
    {NULL, 0, NULL, 0},
};

typedef struct pv_args {
    ig_video_opts o;
    const char *tokenizer, *tiktoken, *buckets;
    const char *text_encoder; /* --text-encoder: the captions' features too */
    uint32_t caption_len;
    ig_feature_dtype features_dtype;
    ig_common_flags flags;
} pv_args;

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    if (!s || !*s || *s == ' ') return 0;
    double v = strtod(s, &end);
    if (*end || !(v >= lo && v <= hi)) return 0;
    *out = v;
    return 1;
}

static int parse_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out) {
    uint64_t v;
    if (!ig_cmd_parse_u64(&video_cmd, opt, s, &v)) return 0;
    if (v < lo || v > hi) {
        ig_cmd_usage_error(&video_cmd, "%s must be in [%u, %u], got %s", opt, lo, hi, s);
        return 0;
    }
    *out = (uint32_t)v;
    return 1;
}

static int parse_args(int argc, char **argv, pv_args *a) {
    a->o = ig_video_opts_default();
    a->caption_len = 120;
    a->features_dtype = IG_FEATURES_F32;
    int have_caption_opt = 0;
    opterr = 0;
    optind = 1;
    int c, have_stride = 0;
    uint32_t u;
    while ((c = ig_cmd_getopt(argc, argv, ":", long_opts)) != -1) {
        switch (c) {
        case OPT_MANIFEST:
            a->o.manifest = optarg;
            break;
        case OPT_OUTPUT:
            a->o.output_prefix = optarg;
            break;
        case OPT_FRAMES:
            if (!parse_u32("--frames", optarg, 1, 65536, &a->o.frames)) return IG_EXIT_USAGE;
            break;
        case OPT_STRIDE:
            if (!parse_u32("--stride", optarg, 1, 1000000, &a->o.stride)) return IG_EXIT_USAGE;
            have_stride = 1;
            break;
        case OPT_FPS:
            if (!parse_double(optarg, 1e-3, 1000, &a->o.fps))
                return ig_cmd_usage_error(&video_cmd, "--fps expects a rate in (0, 1000], got '%s'",
                                          optarg);
            break;
        case OPT_SIZE: {
            unsigned h, w;
            char tail;
            if (sscanf(optarg, "%ux%u%c", &h, &w, &tail) != 2 || !h || !w || h > 16384 || w > 16384)
                return ig_cmd_usage_error(&video_cmd, "--size expects HxW (e.g. 256x256), got '%s'",
                                          optarg);
            a->o.height = h;
            a->o.width = w;
            break;
        }
        case OPT_BUCKETS:
            a->buckets = optarg;
            break;
        case OPT_CLIPS:
            if (!parse_u32("--clips-per-video", optarg, 1, 64, &a->o.clips_per_video))
                return IG_EXIT_USAGE;
            break;
        case OPT_SEED:
            if (!ig_cmd_parse_u64(&video_cmd, "--seed", optarg, &a->o.seed)) return IG_EXIT_USAGE;
            break;
        case OPT_COMPRESS: {
            int level = 3;
            if (strncmp(optarg, "zstd", 4) != 0 ||
                (optarg[4] && (optarg[4] != ':' || sscanf(optarg + 5, "%d", &level) != 1 ||
                               level < 1 || level > 19)))
                return ig_cmd_usage_error(
                    &video_cmd, "--compress expects zstd or zstd:LEVEL (1..19), got '%s'", optarg);
            a->o.zstd_level = level;
            break;
        }
        case OPT_TOKENIZER:
            a->tokenizer = optarg;
            break;
        case OPT_TIKTOKEN:
            a->tiktoken = optarg;
            break;
        case OPT_PROBE:
            a->o.probe_only = 1;
            break;
        case OPT_FORCE:
            a->o.overwrite = 1;
            break;
        case OPT_WORKERS:
            if (!parse_u32("--workers", optarg, 1, 256, &u)) return IG_EXIT_USAGE;
            a->o.workers = (int)u;
            break;
        case OPT_DEC_THREADS:
            if (!parse_u32("--decoder-threads", optarg, 1, 64, &u)) return IG_EXIT_USAGE;
            a->o.decoder_threads = (int)u;
            break;
        case OPT_TIMEOUT:
            if (!parse_double(optarg, 0, 1e6, &a->o.timeout_s))
                return ig_cmd_usage_error(&video_cmd, "--timeout expects seconds, got '%s'",
                                          optarg);
            break;
        case OPT_MAX_MEMORY: {
            ig_err e = {0};
            if (ig_parse_size(optarg, &a->o.max_video_memory, &e) != IG_OK ||
                a->o.max_video_memory == 0)
                return ig_cmd_usage_error(&video_cmd,
                                          "--max-video-memory expects a size such as 4GB or "
                                          "512MiB, got '%s'",
                                          optarg);
            break;
        }
        case OPT_STRICT:
            a->o.strict = 1;
            break;
        case OPT_QUIET:
            a->flags.quiet = 1;
            break;
        case OPT_VERBOSE:
            a->flags.verbose = 1;
            break;
        case OPT_TEXT_ENCODER:
            a->text_encoder = optarg;
            break;
        case OPT_CAPTION_LEN:
            if (!parse_u32("--caption-len", optarg, 1, 65536, &a->caption_len))
                return IG_EXIT_USAGE;
            have_caption_opt = 1;
            break;
        case OPT_FEATURES_DTYPE:
            if (strcmp(optarg, "fp32") && strcmp(optarg, "bf16"))
                return ig_cmd_usage_error(&video_cmd, "--features-dtype is fp32 or bf16, got '%s'",
                                          optarg);
            a->features_dtype = strcmp(optarg, "fp32") ? IG_FEATURES_BF16 : IG_FEATURES_F32;
            have_caption_opt = 1;
            break;
        default:
            return ig_cmd_bad_option(&video_cmd, c, argv);
        }
    }
    if (optind < argc)
        return ig_cmd_usage_error(&video_cmd, "unexpected argument '%s'", argv[optind]);
    if (!a->o.manifest) return ig_cmd_usage_error(&video_cmd, "no input: give --manifest M.csv");
    if (!a->o.output_prefix)
        return ig_cmd_usage_error(&video_cmd, "no output: give --output-prefix OUT");
    if (have_caption_opt && !a->text_encoder)
        return ig_cmd_usage_error(&video_cmd,
                                  "--caption-len and --features-dtype go with --text-encoder DIR");
    if (a->o.probe_only) return -1;
    if (have_stride && a->o.fps > 0)
        return ig_cmd_usage_error(&video_cmd, "give --stride or --fps, not both");
    if (a->buckets && (a->o.frames || a->o.height))
        return ig_cmd_usage_error(&video_cmd,
                                  "--buckets sets the frames and size: drop --frames and --size");
    if (!a->buckets && !a->o.frames)
        return ig_cmd_usage_error(&video_cmd, "give --frames T (or --buckets)");
    return -1;
}

static void print_summary(const ig_video_stats *st, const ig_video_opts *o, int rank, int world) {
    char who[32] = "", bytes[32];
    if (world > 1) snprintf(who, sizeof who, "rank %d: ", rank);
    double secs = st->seconds > 1e-9 ? st->seconds : 1e-9;
    printf("%s%s %llu videos in %.2f s: %llu used, %llu skipped", who,
           o->probe_only ? "probed" : "preprocessed", (unsigned long long)st->videos, st->seconds,
           (unsigned long long)st->used, (unsigned long long)st->skipped);
    const char *sep = " (";
    for (int r = 1; r < IG_VIDEO_REASON_COUNT; r++)
        if (st->by_reason[r]) {
            printf("%s%s %llu", sep, ig_video_reason_str((ig_video_reason)r),
                   (unsigned long long)st->by_reason[r]);
            sep = ", ";
        }
    printf("%s\n", sep[0] == ',' ? ")" : "");
    if (st->by_reason[IG_VIDEO_TOO_LARGE]) {
        char lim[32];
        ig_format_bytes((double)st->max_video_memory, lim, sizeof lim);
        printf("%s%llu video%s more memory than the per-video limit of %s: raise it with "
               "--max-video-memory (see %s.report.csv)\n",
               who, (unsigned long long)st->by_reason[IG_VIDEO_TOO_LARGE],
               st->by_reason[IG_VIDEO_TOO_LARGE] == 1 ? " needs" : "s need", lim, o->output_prefix);
    }
    if (o->probe_only) {
        printf("%s  %s.info.csv\n", who, o->output_prefix);
        return;
    }
    ig_format_bytes((double)st->bytes, bytes, sizeof bytes);
    printf("%s%llu clips, %llu frames (%s): %.1f frames/s\n", who, (unsigned long long)st->clips,
           (unsigned long long)st->frames, bytes, (double)st->frames / secs);
    for (size_t i = 0; i < st->n_shard_prefixes; i++)
        printf("%s  %s\n", who, st->shard_prefixes[i]);
    if (o->features)
        printf("%scaption features: %llu captions encoded (%llu cut to %d tokens)%s%s%s\n", who,
               (unsigned long long)st->captions_encoded, (unsigned long long)st->captions_cut,
               o->features->caption_len, rank == 0 ? ": " : "", rank == 0 ? o->output_prefix : "",
               rank == 0 ? ".features" : "");
    if (rank == 0) printf("%sreport: %s.report.csv\n", who, o->output_prefix);
}

int ig_cmd_preprocess_video(const ig_command *cmd, int argc, char **argv) {
    (void)cmd;
    if (argc < 2) return ig_cmd_usage_error(&video_cmd, "give --manifest and --output-prefix");
    pv_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_comm *comm = NULL;
    ig_tokenizer *tok = NULL;
    ig_video_buckets *buckets = NULL;
    ig_video_stats st = {0};
    ig_cmd_text_encoder te = {0};
    ig_status s = ig_cmd_ctx(&ctx, &a.flags, &err);
    if (s == IG_OK) s = ig_comm_world(&comm, ctx, "preprocess video", &err);
    int world = comm ? ig_comm_size(comm) : 1, rank = comm ? ig_comm_rank(comm) : 0;
    if (s == IG_OK && a.tokenizer && !a.o.probe_only) {
        ig_tokenizer_opts to = ig_tokenizer_opts_default();
        to.tiktoken_encoding = a.tiktoken;
        s = ig_tokenizer_load(&tok, ctx, a.tokenizer, &to, &err);
    }
    if (s == IG_OK && a.buckets && !a.o.probe_only)
        s = ig_video_buckets_load(&buckets, a.buckets, &err);
    /* the encoder before any video: what does not fit is refused before the work starts */
    if (s == IG_OK && a.text_encoder && !a.o.probe_only) {
        s = ig_cmd_text_encoder_open(&te, ctx, a.text_encoder, NULL, 0, 8, (int)a.caption_len,
                                     a.features_dtype, a.flags.quiet || rank > 0, &err);
        a.o.features = &te.fo;
    }
    if (s == IG_OK) {
        a.o.tokenizer = tok;
        a.o.tokenizer_path = a.tokenizer;
        a.o.buckets = buckets;
        a.o.progress = !a.flags.quiet;
        a.o.comm = comm;
        s = ig_preprocess_video(ctx, &a.o, &st, &err);
    }
    if (s == IG_OK && !a.flags.quiet) print_summary(&st, &a.o, rank, world);
    ig_video_stats_clear(&st);
    ig_cmd_text_encoder_close(&te);
    ig_video_buckets_free(buckets);
    ig_tokenizer_free(tok);
    rc = s == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    fflush(stdout);
    fflush(stderr);
    ig_comm_free(comm);
    ig_ctx_free(ctx);
    return rc;
}
