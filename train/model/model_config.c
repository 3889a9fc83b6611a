/* model_config.c - a model's shape seen from outside its family (train.h): checking it, its
 * parameters, FLOPs and description, comparing two, making one from model.* keys, and what it is
 * trained for and conditioned on - each answered by the family the shape names (family.h) or its
 * objective (objective.h), never by reading a family's own fields here.
 */
#include "family/family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ig_status ig_model_config_check(ig_model_config *c, ig_err *err) {
    const ig_family *f = ig_family_of(c->arch);
    if (!f)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.arch %d is not a known family", c->arch);
    return f->check(c, err);
}

uint64_t ig_model_num_params(const ig_model_config *c) {
    const ig_family *f = ig_family_of(c->arch);
    return f ? f->num_params(c) : 0;
}

double ig_model_flops_per_token(const ig_model_config *c, int T) {
    const ig_family *f = ig_family_of(c->arch);
    return f ? f->flops_per_token(c, T) : 0;
}

char *ig_model_describe(const ig_model_config *c, char *buf, size_t cap) {
    const ig_family *f = ig_family_of(c->arch);
    size_t n = (size_t)snprintf(buf, cap, "%s: %d layers, %d heads, d_model %d", f ? f->arch : "?",
                                c->n_layer, c->n_head, c->d_model);
    if (f && f->describe && n < cap) f->describe(c, buf + n, cap - n);
    return buf;
}

const char *ig_model_config_differs(const ig_model_config *a, const ig_model_config *b) {
    if (a->arch != b->arch) return "model.arch";
    if (a->n_layer != b->n_layer) return "model.n_layer";
    if (a->n_head != b->n_head) return "model.n_head";
    if (a->d_model != b->d_model) return "model.d_model";
    const ig_family *f = ig_family_of(a->arch);
    if (a->seq_len != b->seq_len && !(f && f->any_length)) return "model.seq_len";
    if (a->vocab_size != b->vocab_size) return "model.vocab_size";
    if (a->norm_eps != b->norm_eps) return "model.norm_eps";
    return f && f->differs ? f->differs(a, b) : "";
}

int ig_model_conditions(const ig_model_config *c) {
    const ig_family *f = ig_family_of(c->arch);
    return f && f->conditions ? f->conditions(c) : 0;
}

const ig_objective *ig_objective_of(const ig_model_config *c) {
    const ig_family *f = ig_family_of(c->arch);
    return f ? f->objective : NULL;
}

ig_status ig_model_clip_tokens(const ig_model_config *c, int F, int H, int W, int *tokens,
                               ig_err *err) {
    const ig_family *f = ig_family_of(c->arch);
    if (!f || !f->objective->clip_tokens)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s models do not read clips",
                          f ? f->arch : "unknown");
    return f->objective->clip_tokens(c, F, H, W, tokens, err);
}

ig_model_io ig_model_io_of(const ig_model_config *c) {
    const ig_objective *o = ig_objective_of(c);
    if (!o) return (ig_model_io){"", "", "", NULL};
    return (ig_model_io){o->name, o->input, o->units, o->sampler};
}

ig_status ig_model_config_parse(ig_model_config *out, const char *yaml, ig_err *err) {
    memset(out, 0, sizeof *out);
    const ig_cfg_key *tables[IG_TRAIN_KEY_TABLES];
    size_t counts[IG_TRAIN_KEY_TABLES];
    int binds[IG_TRAIN_KEY_TABLES];
    size_t n = ig_train_key_tables(tables, counts, binds, IG_TRAIN_KEY_TABLES);
    ig_config *cfg = NULL;
    ig_status st = IG_OK;
    for (size_t i = 0; i < n && i < IG_TRAIN_KEY_TABLES && st == IG_OK; i++)
        st = i == 0 ? ig_config_create(&cfg, tables[0], counts[0], err)
                    : ig_config_add_keys(cfg, tables[i], counts[i], err);
    if (st == IG_OK) st = ig_config_add_keys(cfg, ig_data_keys, ig_data_n_keys, err);
    size_t len = strlen(yaml) + 16;
    char *text = malloc(len);
    if (st == IG_OK && !text) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) {
        snprintf(text, len, "model: {%s}", yaml);
        st = ig_config_load_string(cfg, text, strlen(text), "a model's keys", err);
    }
    ig_train_config t;
    memset(&t, 0, sizeof t);
    for (size_t i = 0; i < n && i < IG_TRAIN_KEY_TABLES && st == IG_OK; i++)
        if (binds[i]) st = ig_config_bind(cfg, tables[i], counts[i], &t, err);
    if (st == IG_OK) st = ig_train_config_resolve(&t, cfg, err);
    if (st == IG_OK) st = ig_model_config_check(&t.model, err);
    if (st == IG_OK) *out = t.model; /* checked: no pointer into cfg is left in it */
    free(text);
    ig_config_free(cfg);
    return st;
}
