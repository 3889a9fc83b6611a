/* cmd_verify.c - `ingot verify PREFIX...`: the complete check of token shards (structure, manifest,
 * xxh3 checksums). Prints "PREFIX: ok (N docs, T tokens)" per good shard and the exact problem
 * for each bad one; exit 1 when any fails. Thin over ig_shard_verify. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "dataset/dataset.h"

const char ig_usage_verify[] =
    "usage: ingot verify [--threads N] PREFIX...\n"
    "\n"
    "Checks each token shard PREFIX.bin + PREFIX.idx (or frame shard PREFIX.frames +\n"
    "PREFIX.clips, with its caption shard and every clip's checksum) completely: the index\n"
    "structure (magic,\n"
    "version, dtype, sizes, lengths, contiguous pointers, document indices), the manifest\n"
    "PREFIX.json (present, and describing exactly these files), the xxh3 checksums of both\n"
    "files, and every token id against the manifest's vocabulary. A shard list\n"
    "(PREFIX.shards.json) is checked entry by entry against its shards. A shard left by an\n"
    "interrupted run never passes. Prints 'PREFIX: ok (N docs, T tokens)' for each good shard\n"
    "and the problem for each bad one; the exit status is 1 when any shard fails.\n"
    "\n"
    "options:\n"
    "  --threads N      threads in all (default: one per CPU): the shards of a list are\n"
    "                   verified N at once, and a shard alone is hashed by one thread while\n"
    "                   the others check its token ids, piece by piece; the verdicts and\n"
    "                   messages are the same for any N\n"
    "  --quiet          print only the failures\n"
    "\n"
    "examples:\n"
    "  ingot verify out/corpus_text_document\n"
    "  ingot verify out/corpus_*.idx    (a .bin/.idx/.json extension is ignored)\n"
    "  ingot verify --threads 4 out/web  (every shard of the list out/web.shards.json)\n";

/* Accepts "x.bin", "x.idx" and "x.json" for the prefix "x" (so that shell globs work). */
static void strip_extension(char *arg) {
    static const char *const exts[] = {".bin",     ".idx",    ".json", ".frames", ".clips",
                                       ".latents", ".lclips", ".feat", ".fidx"};
    size_t n = strlen(arg);
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        size_t e = strlen(exts[i]);
        if (n > e && strcmp(arg + n - e, exts[i]) == 0) {
            arg[n - e] = '\0';
            return;
        }
    }
}

int ig_cmd_verify(const ig_command *cmd, int argc, char **argv) {
    static const struct option longopts[] = {
        {"quiet", no_argument, NULL, 'q'},
        {"threads", required_argument, NULL, 'T'},
        {NULL, 0, NULL, 0},
    };
    ig_common_flags flags = {.threads = 0};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = ig_cmd_getopt(argc, argv, ":", longopts)) != -1) {
        switch (c) {
        case 'q':
            flags.quiet = 1;
            break;
        case 'T':
            if (!ig_cmd_parse_threads(cmd, optarg, &flags)) return IG_EXIT_USAGE;
            break;
        default:
            return ig_cmd_bad_option(cmd, c, argv);
        }
    }
    if (optind >= argc) return ig_cmd_usage_error(cmd, "expected at least one shard PREFIX");
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    if (ig_cmd_ctx(&ctx, &flags, &err) != IG_OK) return ig_cmd_fail(&err);
    int failed = 0, total = argc - optind;
    for (int i = optind; i < argc; i++) {
        char *prefix = argv[i];
        strip_extension(prefix);
        ig_err_clear(&err);
        if (ig_video_shard_is(prefix)) { /* a frame shard (preprocess video) */
            failed += ig_cmd_verify_video(ctx, prefix, flags.quiet);
            continue;
        } else if (ig_latent_shard_is(prefix)) { /* a latent shard (preprocess latents) */
            failed += ig_cmd_verify_latents(ctx, prefix, flags.quiet);
            continue;
        } else if (ig_feature_shard_is(prefix)) { /* caption features (preprocess captions) */
            failed += ig_cmd_verify_features(ctx, prefix, flags.quiet);
            continue;
        }
        /* a shard list (PREFIX.shards.json) is verified shard by shard */
        size_t n_shards = 0;
        char **list = NULL;
        size_t n_list = 0;
        if (ig_shard_list_verify(ctx, prefix, &n_shards, &err) != IG_OK ||
            ig_shard_list_expand(prefix, &list, &n_list, &err) != IG_OK) {
            fprintf(stderr, "%s: FAILED: %s\n", prefix, err.msg);
            failed++;
            continue;
        }
        uint64_t docs = 0, toks = 0;
        for (size_t k = 0; k < n_list; k++) {
            ig_shard *s = NULL;
            if (ig_shard_open(&s, ctx, list[k], &err) != IG_OK) break;
            docs += ig_shard_documents(s);
            toks += ig_shard_tokens(s);
            ig_shard_close(s);
        }
        ig_shard_list_free(list, n_list);
        if (!flags.quiet && n_shards > 1)
            printf("%s: ok (%zu shards, %" PRIu64 " docs, %" PRIu64 " tokens)\n", prefix, n_shards,
                   docs, toks);
        else if (!flags.quiet)
            printf("%s: ok (%" PRIu64 " docs, %" PRIu64 " tokens)\n", prefix, docs, toks);
    }
    if (total > 1 && (failed || !flags.quiet))
        printf("verified %d shards: %d ok, %d failed\n", total, total - failed, failed);
    ig_ctx_free(ctx);
    return failed ? IG_EXIT_FAIL : IG_EXIT_OK;
}
