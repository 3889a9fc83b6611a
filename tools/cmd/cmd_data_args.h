/* cmd_data_args.h - private to the ingot program: the data arguments that `ingot blend` and
 * `ingot samples` share: the loader module's data keys (data.path = Megatron's --data-path, seed,
 * split, split_index, surplus, cache_dir, allow_mixed), the sample count and sequence length,
 * and the common flags; the positional arguments W1 P1 W2 P2 ... join data.path. */
#ifndef INGOT_CMD_DATA_ARGS_H
#define INGOT_CMD_DATA_ARGS_H

#include "cmd.h"
#include "loader/loader.h"

/* The usage lines of the data options. */
#define IG_DATA_USAGE                                                                              \
    "data (as Megatron's --data-path, --seq-length, --seed, --split):\n"                           \
    "  W1 P1 W2 P2 ...         shard prefixes with their weights (a blend), or one prefix P\n"     \
    "                          alone (no blend: exactly Megatron's GPTDataset); also\n"            \
    "                          --data-path ITEM (repeated) or data.path in a config\n"             \
    "  --seq-len L             tokens per sample (a sample holds L + 1); required\n"               \
    "  --samples N             samples of the blend (or the dataset); required\n"                  \
    "  --seed S                shuffle seed (numpy RandomState; default 1234)\n"                   \
    "  --split A,B,C           train,valid,test weights over each prefix's documents\n"            \
    "                          (default 1,0,0)\n"                                                  \
    "  --split-index P         the part to use: train (default), valid or test\n"                  \
    "  --surplus X             extra fraction each blended source is built for (default 0.005)\n"  \
    "  --cache-dir D           save built indices in D and reuse them\n"                           \
    "  --allow-mixed           blend shards made with different tokenizers\n"                      \
    "  --threads N             threads for building the indices (one source each; default: all\n"  \
    "                          cores)\n"                                                           \
    "  --config FILE, --set K=V  the same settings from a YAML file (section data:)\n"             \
    "  --quiet, --verbose      less or more logging\n"

typedef struct ig_data_args {
    ig_data_config dc;
    uint32_t seq_len;
    uint64_t samples;
    ig_common_flags flags;
    ig_data_resolved r; /* r.opts: what to open */
    const char **path;  /* data.path and the positional arguments (owned array) */
    ig_config *cfg;     /* the strings point into it */
} ig_data_args;

/* Parses the command line: the data keys, the common flags and the command's own tables (extra,
 * n_extra), then resolves the data. Returns -1 on success, else the exit code after printing
 * why. Free with ig_data_args_free, also after a failure. */
int ig_data_args_parse(const ig_command *cmd, int argc, char **argv, ig_data_args *a,
                       const ig_cmd_table *extra, size_t n_extra);
void ig_data_args_free(ig_data_args *a);
/* The part name of the split ("train", ...). */
const char *ig_data_args_part(const ig_data_args *a);

/* The keys of the data arguments' own table (data.seq_len, data.samples), for the schemas. */
extern const ig_cfg_key ig_data_cli_keys[];
extern const size_t ig_data_n_cli_keys;

#endif
