/* cmd_schemas.c - the configuration schemas of the ingot program, by name: each is the tables of
 * keys its command binds (see cmd_options.c), so `ingot config check --schema preprocess F`
 * checks F exactly as `ingot preprocess text --config F` would read it. */
#include <string.h>

#include "cmd_schemas.h"
#include "preprocess/preprocess.h"
#include "train/train.h"

const char *const ig_schema_names[] = {"preprocess", "train", NULL};

int ig_schema_get(const char *name, ig_schema *out) {
    memset(out, 0, sizeof *out);
    ig_cmd_table *t = out->tables;
    if (strcmp(name, "preprocess") == 0) {
        t[0] = (ig_cmd_table){ig_cmd_common_keys, ig_cmd_n_common_keys, NULL};
        t[1] = (ig_cmd_table){ig_preprocess_keys, ig_preprocess_n_keys, NULL};
        t[2] = (ig_cmd_table){ig_preprocess_cli_keys, ig_preprocess_n_cli_keys, NULL};
        out->n_tables = 3;
    } else if (strcmp(name, "train") == 0) {
        t[0] = (ig_cmd_table){ig_cmd_common_keys, ig_cmd_n_common_keys, NULL};
        const ig_cfg_key *keys[IG_SCHEMA_MAX_TABLES - 2];
        size_t counts[IG_SCHEMA_MAX_TABLES - 2];
        int binds[IG_SCHEMA_MAX_TABLES - 2];
        size_t n = ig_train_key_tables(keys, counts, binds, IG_SCHEMA_MAX_TABLES - 2);
        if (n > IG_SCHEMA_MAX_TABLES - 2) n = IG_SCHEMA_MAX_TABLES - 2; /* cannot happen */
        for (size_t i = 0; i < n; i++) t[1 + i] = (ig_cmd_table){keys[i], counts[i], NULL};
        t[1 + n] = (ig_cmd_table){ig_data_keys, ig_data_n_keys, NULL};
        out->n_tables = 2 + n;
    } else {
        return 0;
    }
    out->name = name;
    return 1;
}

ig_status ig_schema_config(const ig_schema *s, ig_config **out, ig_err *err) {
    *out = NULL;
    ig_config *cfg = NULL;
    ig_status st = IG_OK;
    for (size_t t = 0; t < s->n_tables && st == IG_OK; t++)
        st = t == 0 ? ig_config_create(&cfg, s->tables[0].keys, s->tables[0].n, err)
                    : ig_config_add_keys(cfg, s->tables[t].keys, s->tables[t].n, err);
    if (st != IG_OK) {
        ig_config_free(cfg);
        return st;
    }
    *out = cfg;
    return IG_OK;
}
