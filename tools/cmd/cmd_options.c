/* cmd_options.c - command lines from configuration tables: every flag of a command is a key of an
 * ig_cfg_key table (its own, a library module's, the common one), so `--workers 4`, `threads: 4`
 * in a --config file and `--set threads=4` fill the same field through the same checks. The
 * getopt table is built from the keys; nothing is written twice.
 *
 * Order: the --config file first (wherever it is on the line), then the flags and --set in the
 * order given, each overriding what came before; then every table is bound into its struct.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

const ig_cfg_key ig_cmd_common_keys[] = {
    IG_KEY_INT("threads", ig_common_flags, threads, "0", 0, 1024,
               "threads this command may use, all of them together; 0: one per CPU"),
    IG_KEY_BOOL("quiet", ig_common_flags, quiet, "false", "less output: no progress bar"),
    IG_KEY_BOOL("verbose", ig_common_flags, verbose, "false", "more output: debug messages"),
};
const size_t ig_cmd_n_common_keys = sizeof ig_cmd_common_keys / sizeof ig_cmd_common_keys[0];

enum { OPT_CONFIG = 0x7000, OPT_SET, OPT_KEY0 = 0x8000 };

/* The flags of every key (and the aliases, and --config / --set when allowed) as getopt's table. */
static struct option *build_options(const ig_config *cfg, const ig_cmd_spec *spec, char **names) {
    size_t n = ig_config_n_keys(cfg), m = 0;
    struct option *o = calloc(n + spec->n_aliases + 3, sizeof *o);
    if (!o) return NULL;
    for (size_t i = 0; i < n; i++) {
        const ig_cfg_key *k = ig_config_key(cfg, i);
        char buf[128];
        const char *f = ig_config_flag_name(k, buf, sizeof buf);
        if (!f) continue;
        names[i] = strdup(f);
        if (!names[i]) {
            free(o);
            return NULL;
        }
        o[m++] = (struct option){names[i],
                                 k->type == IG_CFG_BOOL ? optional_argument : required_argument,
                                 NULL, OPT_KEY0 + (int)i};
    }
    for (size_t a = 0; a < spec->n_aliases; a++) {
        const ig_cfg_key *k = ig_config_key_of_flag(cfg, spec->aliases[a][1]);
        for (size_t i = 0; k && i < n; i++)
            if (ig_config_key(cfg, i) == k)
                o[m++] =
                    (struct option){spec->aliases[a][0],
                                    k->type == IG_CFG_BOOL ? optional_argument : required_argument,
                                    NULL, OPT_KEY0 + (int)i};
    }
    if (spec->config) {
        o[m++] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
        o[m++] = (struct option){"set", required_argument, NULL, OPT_SET};
    }
    return o;
}

int ig_cmd_parse(const ig_command *cmd, int argc, char **argv, const ig_cmd_spec *spec,
                 ig_config **cfg_out, int *first_positional) {
    *cfg_out = NULL;
    ig_err err = {0};
    ig_config *cfg = NULL;
    ig_status st = IG_OK;
    for (size_t t = 0; t < spec->n_tables && st == IG_OK; t++)
        st = t == 0 ? ig_config_create(&cfg, spec->tables[0].keys, spec->tables[0].n, &err)
                    : ig_config_add_keys(cfg, spec->tables[t].keys, spec->tables[t].n, &err);
    if (st != IG_OK) {
        ig_config_free(cfg);
        return ig_cmd_fail(&err);
    }
    size_t n = ig_config_n_keys(cfg);
    char **names = calloc(n + 1, sizeof *names);
    struct option *opts = names ? build_options(cfg, spec, names) : NULL;
    int rc = -1;
    if (!opts) rc = ig_cmd_failf("out of memory");

    /* pass 1: the config file, whose values the flags then override */
    opterr = 0;
    optind = 1;
    int c;
    while (rc < 0 && (c = ig_cmd_getopt(argc, argv, ":", opts)) != -1) {
        if (c == OPT_CONFIG && (st = ig_config_load_file(cfg, optarg, &err)) != IG_OK)
            rc = ig_cmd_fail(&err);
        else if (c == ':' || c == '?')
            rc = ig_cmd_bad_option(cmd, c, argv);
    }
    /* pass 2: flags and --set, in order */
    optind = 1;
    while (rc < 0 && (c = ig_cmd_getopt(argc, argv, ":", opts)) != -1) {
        if (c == OPT_CONFIG) continue;
        if (c == OPT_SET) {
            if ((st = ig_config_set(cfg, optarg, &err)) != IG_OK) rc = ig_cmd_fail(&err);
            continue;
        }
        if (c < OPT_KEY0 || c >= OPT_KEY0 + (int)n) {
            rc = ig_cmd_bad_option(cmd, c, argv);
            break;
        }
        const ig_cfg_key *k = ig_config_key(cfg, (size_t)(c - OPT_KEY0));
        char flag[160], buf[128];
        snprintf(flag, sizeof flag, "--%s", ig_config_flag_name(k, buf, sizeof buf));
        const char *value = optarg ? optarg : (k->type == IG_CFG_BOOL ? "true" : "");
        if (ig_config_set_text(cfg, k->path, value, flag, 1, &err) != IG_OK)
            rc = ig_cmd_usage_error(cmd, "%s", err.msg);
    }
    for (size_t t = 0; rc < 0 && t < spec->n_tables; t++)
        if (spec->tables[t].dst && ig_config_bind(cfg, spec->tables[t].keys, spec->tables[t].n,
                                                  spec->tables[t].dst, &err) != IG_OK)
            rc = ig_cmd_fail(&err);
    for (size_t i = 0; names && i < n; i++) free(names[i]);
    free(names);
    free(opts);
    if (rc >= 0) {
        ig_config_free(cfg);
        return rc;
    }
    *first_positional = optind;
    *cfg_out = cfg;
    return -1;
}
