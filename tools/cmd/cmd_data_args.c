/* cmd_data_args.c - the data arguments shared by `ingot blend` and `ingot samples`
 * (cmd_data_args.h). */
#include <stdlib.h>
#include <string.h>

#include "cmd_data_args.h"

const ig_cfg_key ig_data_cli_keys[] = {
    IG_KEY_INT("data.seq_len", ig_data_args, seq_len, "0", 0, 1073741824.0,
               "tokens per sample (a sample holds seq_len + 1); required"),
    IG_KEY_INT("data.samples", ig_data_args, samples, "0", 0, 9.2e18,
               "samples of the blend (or of the dataset); required"),
};
const size_t ig_data_n_cli_keys = sizeof ig_data_cli_keys / sizeof ig_data_cli_keys[0];

void ig_data_args_free(ig_data_args *a) {
    ig_data_resolved_free(&a->r);
    free(a->path);
    ig_config_free(a->cfg);
    memset(a, 0, sizeof *a);
}

const char *ig_data_args_part(const ig_data_args *a) {
    return ig_split_part_name(a->r.opts.part);
}

int ig_data_args_parse(const ig_command *cmd, int argc, char **argv, ig_data_args *a,
                       const ig_cmd_table *extra, size_t n_extra) {
    memset(a, 0, sizeof *a);
    ig_cmd_table tables[8] = {
        {ig_cmd_common_keys, ig_cmd_n_common_keys, &a->flags},
        {ig_data_keys, ig_data_n_keys, &a->dc},
        {ig_data_cli_keys, ig_data_n_cli_keys, a},
    };
    size_t n_tables = 3;
    for (size_t i = 0; i < n_extra && n_tables < 8; i++) tables[n_tables++] = extra[i];
    ig_cmd_spec spec = {tables, n_tables, NULL, 0, 1};
    int first = 0;
    int rc = ig_cmd_parse(cmd, argc, argv, &spec, &a->cfg, &first);
    if (rc >= 0) return rc;
    if (a->seq_len == 0) return ig_cmd_usage_error(cmd, "--seq-len is required");
    if (a->seq_len < 2)
        return ig_cmd_usage_error(cmd, "--seq-len must be in [2, 2^30], got %u", a->seq_len);
    if (a->samples == 0) return ig_cmd_usage_error(cmd, "--samples is required (>= 1)");
    /* the positional arguments follow data.path */
    size_t n = a->dc.n_path + (size_t)(argc - first);
    a->path = calloc(n ? n : 1, sizeof *a->path);
    if (!a->path) return ig_cmd_failf("out of memory");
    for (size_t i = 0; i < a->dc.n_path; i++) a->path[i] = a->dc.path[i];
    for (int i = first; i < argc; i++) a->path[a->dc.n_path++] = argv[i];
    a->dc.path = a->path;
    ig_err err = {0};
    if (ig_data_config_resolve(&a->dc, a->seq_len, a->samples, &a->r, &err) != IG_OK)
        return ig_cmd_usage_error(cmd, "%s", err.msg);
    return -1;
}
