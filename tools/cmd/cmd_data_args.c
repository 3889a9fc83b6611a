/* cmd_data_args.c - the data arguments shared by `ingot blend` and `ingot samples` (data_args.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_data_args.h"

void ig_data_args_init(ig_data_args *a) {
    memset(a, 0, sizeof *a);
    a->o = ig_data_opts_default();
    a->split_text = "1,0,0";
}

void ig_data_args_free(ig_data_args *a) {
    free(a->prefixes);
    free(a->weights);
    a->prefixes = NULL;
    a->weights = NULL;
}

const char *ig_data_args_part(const ig_data_args *a) {
    return ig_split_part_name(a->o.part);
}

int ig_data_args_option(const ig_command *cmd, ig_data_args *a, int c, const char *value) {
    uint64_t v;
    ig_err e = {0};
    switch (c) {
    case IG_DATA_OPT_SEQ_LEN:
        if (!ig_cmd_parse_u64(cmd, "--seq-len", value, &v)) return IG_EXIT_USAGE;
        if (v < 2 || v > (1u << 30))
            return ig_cmd_usage_error(cmd, "--seq-len must be in [2, 2^30], got %s", value);
        a->o.seq_len = (uint32_t)v;
        a->have_seq_len = 1;
        return 1;
    case IG_DATA_OPT_SAMPLES:
        if (!ig_cmd_parse_u64(cmd, "--samples", value, &v)) return IG_EXIT_USAGE;
        if (v < 1) return ig_cmd_usage_error(cmd, "--samples must be >= 1");
        a->o.num_samples = v;
        a->have_samples = 1;
        return 1;
    case IG_DATA_OPT_SEED:
        if (!ig_cmd_parse_u64(cmd, "--seed", value, &v)) return IG_EXIT_USAGE;
        if (v > UINT32_MAX)
            return ig_cmd_usage_error(cmd, "--seed must be in [0, 2^32), got %s", value);
        a->o.seed = (uint32_t)v;
        return 1;
    case IG_DATA_OPT_SPLIT:
        if (ig_split_parse(&a->o.split, value, &e) != IG_OK)
            return ig_cmd_usage_error(cmd, "--split: %s", e.msg);
        a->split_text = value;
        return 1;
    case IG_DATA_OPT_SPLIT_INDEX:
        for (int p = 0; p < 3; p++)
            if (!strcmp(value, ig_split_part_name((ig_split_part)p)) ||
                (value[0] == '0' + p && !value[1])) {
                a->o.part = (ig_split_part)p;
                return 1;
            }
        return ig_cmd_usage_error(cmd, "--split-index expects 0|train, 1|valid or 2|test, got '%s'",
                                  value);
    case IG_DATA_OPT_SURPLUS: {
        char *end;
        errno = 0;
        double d = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(d) || d < 0 || d > 10)
            return ig_cmd_usage_error(cmd, "--surplus expects a number in [0, 10], got '%s'",
                                      value);
        a->o.surplus = d;
        return 1;
    }
    case IG_DATA_OPT_CACHE_DIR:
        a->o.cache_dir = value;
        return 1;
    case IG_DATA_OPT_ALLOW_MIXED:
        a->o.allow_mixed = 1;
        return 1;
    case IG_DATA_OPT_THREADS:
        if (!ig_cmd_parse_u64(cmd, "--threads", value, &v)) return IG_EXIT_USAGE;
        if (v > 1024) return ig_cmd_usage_error(cmd, "--threads must be <= 1024");
        a->flags.threads = (int)v;
        return 1;
    case IG_DATA_OPT_QUIET:
        a->flags.quiet = 1;
        return 1;
    case IG_DATA_OPT_VERBOSE:
        a->flags.verbose = 1;
        return 1;
    default:
        return 0;
    }
}

int ig_data_args_finish(const ig_command *cmd, ig_data_args *a, int n, char **args) {
    if (!a->have_seq_len) return ig_cmd_usage_error(cmd, "--seq-len is required");
    if (!a->have_samples) return ig_cmd_usage_error(cmd, "--samples is required");
    if (n < 1) return ig_cmd_usage_error(cmd, "no data: give a shard prefix, or W1 P1 W2 P2 ...");
    a->prefixes = calloc((size_t)n, sizeof *a->prefixes);
    a->weights = calloc((size_t)n, sizeof *a->weights);
    if (!a->prefixes || !a->weights) return ig_cmd_failf("out of memory");
    ig_err e = {0};
    size_t k;
    if (ig_data_parse_paths(args, (size_t)n, a->prefixes, a->weights, &k, &a->weighted, &e) !=
        IG_OK)
        return ig_cmd_usage_error(cmd, "%s", e.msg);
    a->o.prefixes = a->prefixes;
    a->o.weights = a->weighted ? a->weights : NULL;
    a->o.n = k;
    return 0;
}
