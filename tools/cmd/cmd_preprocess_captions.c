/* cmd_preprocess_captions.c - `ingot preprocess captions`: the captions of clip shards to a
 * caption-feature shard with a frozen text encoder (a T5), for a DiT to attend to (PixArt-alpha's
 * way). Thin over ig_preprocess_captions with the encoder of cmd_text_encoder.c; dispatched from
 * `ingot preprocess`. Under mpirun the ranks split the clips and rank 0 writes the shard list. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "cmd_text_encoder.h"
#include "comm/comm.h"

const char ig_usage_preprocess_captions[] =
    "usage: ingot preprocess captions --clips PREFIX --text-encoder DIR --output-prefix OUT\n"
    "                                 [--tokenizer FILE] [--caption-len N] [--dtype fp32|bf16]\n"
    "                                 [--batch N] [--device cpu|cuda] [--force]\n"
    "\n"
    "Encodes the caption of every clip of the clip shards with a frozen text encoder, as\n"
    "PixArt-alpha and Open-Sora condition their DiTs (model.cond caption with\n"
    "data.caption_features: OUT), into a caption-feature shard: OUT.feat (each clip's features\n"
    "[L, D], L its caption's tokens: no padding stored), OUT.fidx (the index) and OUT.json (the\n"
    "encoder that made them, the clips they belong to, checksums). The features are the\n"
    "encoder's last hidden state (T5EncoderModel's, after the final layer norm). A caption is\n"
    "the text the clip shard keeps of its video (the manifest's text column), tokenized by the\n"
    "encoder's tokenizer with the end-of-sequence token T5 is fed (</s>) and cut to N tokens\n"
    "keeping it (the first N - 1 and </s>, as Hugging Face's tokenizers truncate); the clips of\n"
    "one video share its caption, stored once. A clip without a caption gets none: a DiT trains\n"
    "it with its null caption. On the CPU the features are the same bits for any --batch and\n"
    "--threads.\n"
    "\n"
    "options:\n"
    "  --clips PREFIX      the clip shards (a prefix or a list, OUT of ingot preprocess video);\n"
    "                      repeat it for several, in the order training lists them (data.path)\n"
    "  --text-encoder DIR  a Hugging Face T5 encoder directory: config.json (model_type t5),\n"
    "                      model.safetensors or its shards, spiece.model or tokenizer.json\n"
    "  --tokenizer FILE    the tokenizer (default: the encoder directory's)\n"
    "  --caption-len N     tokens a caption keeps, </s> included (default 120, PixArt-alpha's;\n"
    "                      300 for Open-Sora 1.2-style configs)\n"
    "  --dtype D           fp32 (default) or bf16 (half the bytes; rounded to nearest even)\n"
    "  --batch N           captions encoded at once (default 8)\n"
    "  --device D          cpu (fp32, the default) or cuda (bf16)\n"
    "  --output-prefix OUT where to write (the directory must exist)\n"
    "  --force             replace an existing complete output\n"
    "  --threads N, --quiet, --verbose\n"
    "\n"
    "Memory: before anything is loaded it says what the encoder takes - its weights, 4 bytes a\n"
    "parameter in fp32 on the CPU (T5-XXL's encoder, 4.76 billion parameters, 19.05 GB; XL's\n"
    "4.9 GB; base's 0.44 GB) or 2 in bf16 on a GPU, the activations of N captions of the caption\n"
    "length, and the largest tensor twice while loading (1.05 GB for XXL) - and refuses what\n"
    "does not fit the memory free now, with the figures.\n"
    "\n"
    "The run marker OUT.incomplete, --force, and a killed run behave as for preprocess text (a\n"
    "rerun removes what a killed run left and starts again). Under mpirun -np K the ranks split\n"
    "the clips into K equal runs, each writes OUT_rRRRR, and rank 0 writes OUT.shards.json: one\n"
    "output, read as one.\n"
    "\n"
    "examples:\n"
    "  ingot preprocess captions --clips out/clips --text-encoder tests/data/golden/t5/gated \\\n"
    "      --output-prefix out/clips-t5 --caption-len 32\n"
    "  mpirun -np 4 ingot preprocess captions --clips out/clips --text-encoder t5-v1_1-xxl \\\n"
    "      --output-prefix out/clips-t5 --dtype bf16 --device cuda\n";

static const ig_command captions_cmd = {"preprocess captions", "", ig_usage_preprocess_captions,
                                        NULL};

enum {
    OPT_CLIPS = 256,
    OPT_ENCODER,
    OPT_TOKENIZER,
    OPT_CAPLEN,
    OPT_DTYPE,
    OPT_BATCH,
    OPT_DEVICE,
    OPT_OUTPUT,
    OPT_FORCE,
    OPT_THREADS,
    OPT_QUIET,
    OPT_VERBOSE,
};

static const struct option long_opts[] = {
    {"clips", required_argument, NULL, OPT_CLIPS},
    {"text-encoder", required_argument, NULL, OPT_ENCODER},
    {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"caption-len", required_argument, NULL, OPT_CAPLEN},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"output-prefix", required_argument, NULL, OPT_OUTPUT},
    {"force", no_argument, NULL, OPT_FORCE},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {NULL, 0, NULL, 0},
};

typedef struct pc_args {
    const char **clips;
    size_t n_clips;
    const char *encoder, *tokenizer, *output;
    uint64_t caption_len, batch;
    int device, force;
    ig_feature_dtype dtype;
    ig_common_flags flags;
} pc_args;

/* --caption-len, --batch: a whole number in [1, hi] */
static int parse_count(const char *opt, const char *s, uint64_t hi, uint64_t *out) {
    if (!ig_cmd_parse_u64(&captions_cmd, opt, s, out)) return 0;
    if (*out >= 1 && *out <= hi) return 1;
    ig_cmd_usage_error(&captions_cmd, "%s must be in [1, %llu], got %s", opt,
                       (unsigned long long)hi, s);
    return 0;
}

static int parse_args(int argc, char **argv, pc_args *a) {
    a->caption_len = 120;
    a->batch = 8;
    a->dtype = IG_FEATURES_F32;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = ig_cmd_getopt(argc, argv, ":", long_opts)) != -1) {
        switch (c) {
        case OPT_CLIPS: {
            const char **n = realloc(a->clips, (a->n_clips + 1) * sizeof *n);
            if (!n) return ig_cmd_failf("out of memory");
            a->clips = n;
            a->clips[a->n_clips++] = optarg;
            break;
        }
        case OPT_ENCODER:
            a->encoder = optarg;
            break;
        case OPT_TOKENIZER:
            a->tokenizer = optarg;
            break;
        case OPT_CAPLEN:
            if (!parse_count("--caption-len", optarg, 65536, &a->caption_len)) return IG_EXIT_USAGE;
            break;
        case OPT_BATCH:
            if (!parse_count("--batch", optarg, 4096, &a->batch)) return IG_EXIT_USAGE;
            break;
        case OPT_DTYPE:
            if (strcmp(optarg, "fp32") && strcmp(optarg, "bf16"))
                return ig_cmd_usage_error(&captions_cmd, "--dtype is fp32 or bf16, got '%s'",
                                          optarg);
            a->dtype = strcmp(optarg, "fp32") ? IG_FEATURES_BF16 : IG_FEATURES_F32;
            break;
        case OPT_DEVICE:
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                return ig_cmd_usage_error(&captions_cmd, "--device is cpu or cuda, got '%s'",
                                          optarg);
            a->device = strcmp(optarg, "cpu") != 0;
            break;
        case OPT_OUTPUT:
            a->output = optarg;
            break;
        case OPT_FORCE:
            a->force = 1;
            break;
        case OPT_THREADS:
            if (!ig_cmd_parse_threads(&captions_cmd, optarg, &a->flags)) return IG_EXIT_USAGE;
            break;
        case OPT_QUIET:
            a->flags.quiet = 1;
            break;
        case OPT_VERBOSE:
            a->flags.verbose = 1;
            break;
        default:
            return ig_cmd_bad_option(&captions_cmd, c, argv);
        }
    }
    if (optind < argc)
        return ig_cmd_usage_error(&captions_cmd, "unexpected argument '%s'", argv[optind]);
    if (!a->n_clips) return ig_cmd_usage_error(&captions_cmd, "no input: give --clips PREFIX");
    if (!a->encoder)
        return ig_cmd_usage_error(&captions_cmd, "no encoder: give --text-encoder DIR");
    if (!a->output) return ig_cmd_usage_error(&captions_cmd, "no output: give --output-prefix OUT");
    return -1;
}

static void print_summary(const ig_captions_stats *st, int rank, int world) {
    char who[32] = "";
    if (world > 1) snprintf(who, sizeof who, "rank %d: ", rank);
    double secs = st->seconds > 1e-9 ? st->seconds : 1e-9;
    printf("%s%llu clips in %.2f s: %llu with a caption, %llu captions encoded (%.1f a second, "
           "%llu tokens, %llu cut)\n",
           who, (unsigned long long)st->clips, st->seconds, (unsigned long long)st->captioned,
           (unsigned long long)st->encoded, (double)st->encoded / secs,
           (unsigned long long)st->tokens, (unsigned long long)st->cut);
    for (size_t i = 0; i < st->n_shard_prefixes; i++)
        printf("%s  %s\n", who, st->shard_prefixes[i]);
}

int ig_cmd_preprocess_captions(const ig_command *cmd, int argc, char **argv) {
    (void)cmd;
    if (argc < 2)
        return ig_cmd_usage_error(&captions_cmd,
                                  "give --clips, --text-encoder and --output-prefix");
    pc_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) {
        free(a.clips);
        return rc;
    }
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_comm *comm = NULL;
    ig_cmd_text_encoder te = {0};
    ig_captions_stats st = {0};
    ig_status s = ig_cmd_ctx(&ctx, &a.flags, &err);
    if (s == IG_OK) s = ig_comm_world(&comm, ctx, "preprocess captions", &err);
    int world = comm ? ig_comm_size(comm) : 1, rank = comm ? ig_comm_rank(comm) : 0;
    if (s == IG_OK)
        s = ig_cmd_text_encoder_open(&te, ctx, a.encoder, a.tokenizer, a.device, (int)a.batch,
                                     (int)a.caption_len, a.dtype, a.flags.quiet || rank > 0, &err);
    if (s == IG_OK) {
        ig_captions_opts o = {.clips = a.clips,
                              .n_clips = a.n_clips,
                              .output_prefix = a.output,
                              .features = &te.fo,
                              .overwrite = a.force,
                              .progress = !a.flags.quiet,
                              .comm = comm};
        s = ig_preprocess_captions(ctx, &o, &st, &err);
    }
    if (s == IG_OK && !a.flags.quiet) print_summary(&st, rank, world);
    ig_captions_stats_clear(&st);
    ig_cmd_text_encoder_close(&te);
    free(a.clips);
    /* report before the communicator goes: mpirun may end the other processes once one exits
     * non-zero */
    rc = s == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    fflush(stdout);
    fflush(stderr);
    ig_comm_free(comm);
    ig_ctx_free(ctx);
    return rc;
}
