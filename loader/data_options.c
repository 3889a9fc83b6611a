/* data_options.c - the configuration keys of the data a stream reads ("data:" in a config file:
 * Megatron's --data-path, --seed, --split and the blend surplus), bound to ig_data_config, and
 * their resolution into ig_data_opts. Shared by `ingot blend`, `ingot samples` and the trainer,
 * so that the same words mean the same data everywhere. */
#include "loader/loader.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const parts[] = {"train", "valid", "test", NULL}; /* = ig_split_part */

const ig_cfg_key ig_data_keys[] = {
    {"data.path", IG_CFG_LIST, "",
     "shard prefixes: P alone, or weights and prefixes W1 P1 W2 P2 ... (Megatron's --data-path)",
     "data-path", IG_CFG_FIELD_(ig_data_config, path), 0, offsetof(ig_data_config, n_path), NULL, 0,
     0},
    IG_KEY_INT("data.seed", ig_data_config, seed, "1234", 0, 4294967295.0,
               "shuffle seed (numpy RandomState, as Megatron's --seed)"),
    IG_KEY_STRING("data.split", ig_data_config, split, "1,0,0",
                  "train,valid,test weights over each prefix's documents (e.g. 969,30,1)"),
    IG_KEY_ENUM("data.split_index", ig_data_config, part, "train", parts,
                "the part of the split to use: train, valid or test"),
    IG_KEY_FLOAT("data.surplus", ig_data_config, surplus, "0.005", 0, 10,
                 "extra fraction each blended source is built for (Megatron's surplus)"),
    IG_KEY_STRING("data.cache_dir", ig_data_config, cache_dir, "",
                  "save built sample indices there and reuse them (\"\": build in memory)"),
    IG_KEY_BOOL("data.allow_mixed", ig_data_config, allow_mixed, "false",
                "blend shards made with different tokenizers"),
};
const size_t ig_data_n_keys = sizeof ig_data_keys / sizeof ig_data_keys[0];

void ig_data_resolved_free(ig_data_resolved *r) {
    free(r->prefixes);
    free(r->weights);
    memset(r, 0, sizeof *r);
}

ig_status ig_data_config_resolve(const ig_data_config *c, uint32_t seq_len, uint64_t num_samples,
                                 ig_data_resolved *out, ig_err *err) {
    memset(out, 0, sizeof *out);
    size_t n = c->n_path;
    out->prefixes = calloc(n ? n : 1, sizeof *out->prefixes);
    out->weights = calloc(n ? n : 1, sizeof *out->weights);
    if (!out->prefixes || !out->weights) {
        ig_data_resolved_free(out);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    ig_data_opts *o = &out->opts;
    *o = ig_data_opts_default();
    size_t k = 0;
    int weighted = 0;
    ig_status st = ig_data_parse_paths((char *const *)c->path, n, out->prefixes, out->weights, &k,
                                       &weighted, err);
    if (st == IG_OK && (st = ig_split_parse(&o->split, c->split, err)) != IG_OK)
        ig_err_prefix(err, st, "data.split");
    if (st != IG_OK) {
        ig_data_resolved_free(out);
        return st;
    }
    o->prefixes = out->prefixes;
    o->weights = weighted ? out->weights : NULL;
    o->n = k;
    o->seq_len = seq_len;
    o->num_samples = num_samples;
    o->seed = c->seed;
    o->part = (ig_split_part)c->part;
    o->surplus = c->surplus;
    o->cache_dir = c->cache_dir && *c->cache_dir ? c->cache_dir : NULL;
    o->allow_mixed = c->allow_mixed;
    out->weighted = weighted;
    return IG_OK;
}
