/* cmd_merge.c - `ingot merge --output OUT IN...`: concatenates token shards into one, as Megatron's
 * merge_datasets.py does, streaming and with 64-bit pointers. Thin over ig_shard_merge. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include "cmd.h"
#include "dataset/dataset.h"

const char ig_usage_merge[] =
    "usage: ingot merge --output OUT [--force] [--allow-mixed] [--threads N] IN...\n"
    "\n"
    "Concatenates the token shards IN... (each a PREFIX of PREFIX.bin + PREFIX.idx) into\n"
    "OUT.bin + OUT.idx + OUT.json, in the order given: documents keep their order, document\n"
    "indices are shifted, pointers are recomputed (64-bit: outputs beyond 4 GiB are fine).\n"
    "Every input is validated before anything is written, and its .bin is checked against its\n"
    "manifest's checksum as it is copied; the output appears only when complete. Shards of\n"
    "different dtypes cannot be merged. Shards made with different tokenizers (by their\n"
    "manifests) are refused unless --force or --allow-mixed.\n"
    "\n"
    "options:\n"
    "  --output OUT     output prefix (required)\n"
    "  --force          overwrite an existing OUT, and merge shards of different tokenizers\n"
    "  --allow-mixed    merge shards of different tokenizers (without overwriting)\n"
    "  --threads N      threads in all (default: one per CPU): inputs are opened, checked\n"
    "                   against their checksums and copied to their places in OUT several\n"
    "                   at once (64 inputs mapped at a time); OUT is the same bytes for any N\n"
    "  --quiet          no summary line\n"
    "\n"
    "examples:\n"
    "  ingot merge --output out/all_text_document out/part_00000 out/part_00001\n"
    "  ingot merge --force --output out/all out/web out/books\n"
    "  ingot merge --threads 2 --output out/all out/web\n";

int ig_cmd_merge(const ig_command *cmd, int argc, char **argv) {
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},  {"force", no_argument, NULL, 'f'},
        {"allow-mixed", no_argument, NULL, 'm'},   {"quiet", no_argument, NULL, 'q'},
        {"threads", required_argument, NULL, 'T'}, {NULL, 0, NULL, 0},
    };
    const char *out = NULL;
    ig_merge_opts mo = {0};
    ig_common_flags flags = {.threads = 0};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = ig_cmd_getopt(argc, argv, ":", longopts)) != -1) {
        switch (c) {
        case 'o':
            out = optarg;
            break;
        case 'f':
            mo.overwrite = mo.allow_mixed = 1;
            break;
        case 'm':
            mo.allow_mixed = 1;
            break;
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
    if (!out || !*out) return ig_cmd_usage_error(cmd, "--output OUT is required");
    if (optind >= argc) return ig_cmd_usage_error(cmd, "expected at least one input shard");
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    if (ig_cmd_ctx(&ctx, &flags, &err) != IG_OK) return ig_cmd_fail(&err);
    /* inputs may name shard lists (PREFIX.shards.json): each stands for its shards */
    char **inputs = NULL;
    size_t n = 0;
    int rc = IG_EXIT_OK;
    for (int i = optind; i < argc && rc == IG_EXIT_OK; i++) {
        char **list = NULL;
        size_t n_list = 0;
        if (ig_shard_list_expand(argv[i], &list, &n_list, &err) != IG_OK) {
            rc = ig_cmd_fail(&err);
            break;
        }
        char **grown = realloc(inputs, (n + n_list) * sizeof *grown);
        if (!grown) {
            ig_shard_list_free(list, n_list);
            rc = ig_cmd_failf("out of memory");
            break;
        }
        inputs = grown;
        memcpy(inputs + n, list, n_list * sizeof *list);
        n += n_list;
        free(list);
    }
    ig_shard *s = NULL;
    if (rc != IG_EXIT_OK) {
        /* reported above */
    } else if (ig_shard_merge(ctx, (const char *const *)inputs, n, out, &mo, &err) != IG_OK ||
               ig_shard_open(&s, ctx, out, &err) != IG_OK) {
        rc = ig_cmd_fail(&err);
    } else if (!flags.quiet) {
        char b[32];
        printf("merged %zu shard%s into %s: %" PRIu64 " docs, %" PRIu64 " tokens, %s\n", n,
               n == 1 ? "" : "s", out, ig_shard_documents(s), ig_shard_tokens(s),
               ig_format_bytes((double)ig_shard_bin_bytes(s), b, sizeof b));
    }
    ig_shard_close(s);
    ig_shard_list_free(inputs, n);
    ig_ctx_free(ctx);
    return rc;
}
