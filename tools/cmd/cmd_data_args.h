/* cmd_data_args.h - private to the ingot program: the data arguments that `ingot blend` and
 * `ingot samples` share (Megatron's --data-path list, --seq-len, --samples, --seed, --split,
 * --split-index, --cache-dir, --allow-mixed), parsed into ig_data_opts. */
#ifndef INGOT_CMD_DATA_ARGS_H
#define INGOT_CMD_DATA_ARGS_H

#include <getopt.h>

#include "cmd.h"
#include "loader/loader.h"

/* getopt_long values of the data options; commands number their own options from
 * IG_DATA_OPT_END. */
enum {
    IG_DATA_OPT_SEQ_LEN = 0x1000,
    IG_DATA_OPT_SAMPLES,
    IG_DATA_OPT_SEED,
    IG_DATA_OPT_SPLIT,
    IG_DATA_OPT_SPLIT_INDEX,
    IG_DATA_OPT_SURPLUS,
    IG_DATA_OPT_CACHE_DIR,
    IG_DATA_OPT_ALLOW_MIXED,
    IG_DATA_OPT_THREADS,
    IG_DATA_OPT_QUIET,
    IG_DATA_OPT_VERBOSE,
    IG_DATA_OPT_END
};

/* Entries for a struct option table (followed by the command's own). */
#define IG_DATA_LONG_OPTS                                                                          \
    {"seq-len", required_argument, NULL, IG_DATA_OPT_SEQ_LEN},                                     \
        {"samples", required_argument, NULL, IG_DATA_OPT_SAMPLES},                                 \
        {"seed", required_argument, NULL, IG_DATA_OPT_SEED},                                       \
        {"split", required_argument, NULL, IG_DATA_OPT_SPLIT},                                     \
        {"split-index", required_argument, NULL, IG_DATA_OPT_SPLIT_INDEX},                         \
        {"surplus", required_argument, NULL, IG_DATA_OPT_SURPLUS},                                 \
        {"cache-dir", required_argument, NULL, IG_DATA_OPT_CACHE_DIR},                             \
        {"allow-mixed", no_argument, NULL, IG_DATA_OPT_ALLOW_MIXED},                               \
        {"threads", required_argument, NULL, IG_DATA_OPT_THREADS},                                 \
        {"quiet", no_argument, NULL, IG_DATA_OPT_QUIET}, {                                         \
        "verbose", no_argument, NULL, IG_DATA_OPT_VERBOSE                                          \
    }

/* The usage lines of the data options. */
#define IG_DATA_USAGE                                                                              \
    "data (as Megatron's --data-path, --seq-length, --seed, --split):\n"                           \
    "  W1 P1 W2 P2 ...         shard prefixes with their weights (a blend), or one prefix P\n"     \
    "                          alone (no blend: exactly Megatron's GPTDataset)\n"                  \
    "  --seq-len L             tokens per sample (a sample holds L + 1); required\n"               \
    "  --samples N             samples of the blend (or the dataset); required\n"                  \
    "  --seed S                shuffle seed (numpy RandomState; default 1234)\n"                   \
    "  --split A,B,C           train,valid,test weights over each prefix's documents\n"            \
    "                          (default 1,0,0)\n"                                                  \
    "  --split-index I         the part to use: 0|train (default), 1|valid, 2|test\n"              \
    "  --surplus X             extra fraction each blended source is built for (default 0.005)\n"  \
    "  --cache-dir D           save built indices in D and reuse them\n"                           \
    "  --allow-mixed           blend shards made with different tokenizers\n"                      \
    "  --threads N             index-building threads (default: all cores)\n"                      \
    "  --quiet, --verbose      less or more logging\n"

typedef struct ig_data_args {
    ig_data_opts o;
    const char *split_text; /* as given, for display; "1,0,0" by default */
    int have_seq_len, have_samples;
    int weighted;
    const char **prefixes; /* owned array, strings point into argv */
    double *weights;       /* owned */
    ig_common_flags flags;
} ig_data_args;

void ig_data_args_init(ig_data_args *a);
void ig_data_args_free(ig_data_args *a);
/* Handles one getopt_long result. Returns 1 when c was a data option, 0 when it is not one, and
 * IG_EXIT_USAGE (after printing the usage error) when its value is wrong. */
int ig_data_args_option(const ig_command *cmd, ig_data_args *a, int c, const char *value);
/* Takes the positional arguments (the data paths) and checks the required options. Returns 0,
 * or an exit code after printing why. */
int ig_data_args_finish(const ig_command *cmd, ig_data_args *a, int n, char **args);
/* The part name of the split ("train", ...). */
const char *ig_data_args_part(const ig_data_args *a);

#endif
