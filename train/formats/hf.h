/* hf.h - private to train/: Hugging Face model directories (config.json + model.safetensors) for
 * every family, and the strict readers the families parse a config.json with. The family is
 * chosen by config.json's model_type; what a family's files hold is its hf_* hooks (family.h).
 */
#ifndef INGOT_TRAIN_HF_H
#define INGOT_TRAIN_HF_H

#include <jansson.h>

#include "model/model.h"
#include "safetensors.h"

/* The weights and the config.json of a model path (a directory or the weights' file): a
 * directory's weights are its model.safetensors, or where there is none its
 * model.safetensors.index.json (a sharded model); a file is the weights (a .safetensors, or an
 * index ending in .index.json). */
void ig_hf_paths(const char *path, char *st, char *cfg, size_t cap);

/* The weights of a model as one set of named tensors (hf_weights.c): one safetensors file, or
 * the shards its model.safetensors.index.json lists (path ends in .index.json), each validated and
 * held against the index (every tensor in the shard the index names, every shard tensor listed,
 * no name twice); errors name the index, the shard and the tensor. Read-only once open: any
 * thread may look up. The tensors belong to w. */
typedef struct ig_hf_weights ig_hf_weights;
ig_status ig_hf_weights_open(ig_hf_weights **out, ig_ctx *ctx, const char *path, ig_err *err);
void ig_hf_weights_free(ig_hf_weights *w); /* NULL is a no-op */
size_t ig_hf_weights_count(const ig_hf_weights *w);
/* The i-th tensor (i < count): the shards in the index's order, each in file order. */
const ig_st_tensor *ig_hf_weights_tensor(const ig_hf_weights *w, size_t i);
/* The tensor called name, or NULL. */
const ig_st_tensor *ig_hf_weights_find(const ig_hf_weights *w, const char *name);

/* Checks a model.safetensors (or a directory's) against a model of shape cfg before anything is
 * allocated for it: every tensor the model needs is there with its shape, and every tensor of the
 * file is one the model uses (or one its family ignores); errors name the tensor. */
ig_status ig_hf_check(ig_ctx *ctx, const char *path, const ig_model_config *cfg, ig_err *err);

/* The model of a Hugging Face path is one of shape cfg: its config.json (when there is one) says
 * so, naming what differs otherwise, and ig_hf_check holds for its tensors. */
ig_status ig_hf_match(ig_ctx *ctx, const char *path, const ig_model_config *cfg, ig_err *err);

/* config.json fields, strictly: key (or alt when key is absent; alt may be NULL) must be an
 * integer in [lo, hi] / a number / a boolean. When absent: *out = dflt, or with required an
 * error naming the file and the key. */
ig_status ig_hf_get_int(json_t *o, const char *file, const char *key, const char *alt, int64_t lo,
                        int64_t hi, int required, int64_t dflt, int64_t *out, ig_err *err);
ig_status ig_hf_get_float(json_t *o, const char *file, const char *key, int required, double dflt,
                          double *out, ig_err *err);
ig_status ig_hf_get_bool(json_t *o, const char *file, const char *key, int dflt, int *out,
                         ig_err *err);
/* A number that must be > 0 when given (an epsilon, rope_theta): 0 or less is refused, naming the
 * file and key (config.json has no "0 means the default"); absent: *out = dflt. */
ig_status ig_hf_get_positive(json_t *o, const char *file, const char *key, double dflt, double *out,
                             ig_err *err);

#endif
