/* inference.c - using a model of any family: its shape on disk, opening one from a checkpoint or
 * a Hugging Face export, and exporting a checkpoint. What a model is then used for - its loss on
 * data (ingot eval), its samples (ingot sample) - is its objective's (objectives/).
 */
#include "ckpt/checkpoint.h"
#include "family/family.h"
#include "formats/hf.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

const char *const ig_weights_names[] = {"default", "raw", "ema", NULL};

ig_status ig_model_open(ig_model **out, ig_ctx *ctx, ig_backend *be, const char *path, int B, int T,
                        int32_t *eod_id, ig_err *err) {
    return ig_model_open_weights(out, ctx, be, path, B, T, IG_WEIGHTS_DEFAULT, eod_id, err);
}

/* The micro-batch's T against the model's positions: at most seq_len, 0 meaning all of them (a
 * family that computes its positions takes any T). */
static int positions(const ig_model_config *c, int T) {
    const ig_family *f = ig_family_of(c->arch);
    if (T > 0 && f && f->any_length) return T;
    return T <= 0 || T > c->seq_len ? c->seq_len : T;
}

ig_status ig_model_open_weights(ig_model **out, ig_ctx *ctx, ig_backend *be, const char *path,
                                int B, int T, ig_weights weights, int32_t *eod_id, ig_err *err) {
    *out = NULL;
    if (eod_id) *eod_id = -1;
    char dir[4096], man[4200];
    ig_status st = ig_ckpt_resolve(path, dir, sizeof dir, err);
    if (st != IG_OK) return st;
    path = dir;
    snprintf(man, sizeof man, "%s/manifest.json", path);
    ig_model_config shape;
    /* parameters and activations: no gradients */
    ig_part inference = {.tp = 1, .l0 = 0, .first = 1, .last = 1, .inference = 1};
    if (ig_file_exists(man)) { /* a checkpoint */
        ig_ckpt_info info;
        if ((st = ig_ckpt_read_info(ctx, path, 0, &info, err)) != IG_OK) return st;
        shape = info.model;
        inference.l1 = shape.n_layer;
        T = positions(&shape, T);
        if ((st = ig_model_create_part(out, ctx, be, &shape, B, T, info.seed, &inference, err)) !=
            IG_OK)
            return st;
        st = ig_ckpt_load_weights(ctx, path, *out, NULL, weights, &info, err);
        if (eod_id) *eod_id = info.eod_id;
    } else {
        int32_t eod = -1;
        if (weights == IG_WEIGHTS_EMA)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "%s is an exported model: it holds one set of weights (the EMA "
                              "or the raw ones are chosen by ckpt export --weights)",
                              path);
        if ((st = ig_hf_read_config(ctx, path, &shape, &eod, err)) != IG_OK) return st;
        inference.l1 = shape.n_layer;
        T = positions(&shape, T);
        /* the file's tensors against config.json before anything is allocated */
        if ((st = ig_hf_check(ctx, path, &shape, err)) != IG_OK) return st;
        if ((st = ig_model_create_part(out, ctx, be, &shape, B, T, 0, &inference, err)) != IG_OK)
            return st;
        st = ig_hf_load(ctx, *out, path, err);
        if (eod_id) *eod_id = eod;
    }
    if (st != IG_OK) {
        ig_model_free(*out);
        *out = NULL;
    }
    return st;
}

ig_status ig_ckpt_export(ig_ctx *ctx, const char *ckpt_dir, const char *out_dir, int overwrite,
                         ig_weights weights, ig_err *err) {
    ig_ckpt_info info;
    ig_status st = ig_ckpt_read_info(ctx, ckpt_dir, 1, &info, err);
    if (st != IG_OK) return st;
    ig_backend *be = NULL;
    ig_model *m = NULL;
    ig_backend_opts bo = ig_backend_opts_default();
    ig_part inference = {.tp = 1, .l1 = info.model.n_layer, .first = 1, .last = 1, .inference = 1};
    st = ig_backend_create(&be, ctx, &bo, err);
    if (st == IG_OK)
        st = ig_model_create_part(&m, ctx, be, &info.model, 1, 1, info.seed, &inference, err);
    if (st == IG_OK) st = ig_ckpt_load_weights(ctx, ckpt_dir, m, NULL, weights, &info, err);
    if (st == IG_OK) st = ig_hf_export(ctx, m, info.eod_id, out_dir, overwrite, err);
    ig_model_free(m);
    ig_backend_free(be);
    return st;
}

ig_status ig_model_read_shape(ig_ctx *ctx, const char *path, ig_model_config *out, ig_err *err) {
    char dir[4096], man[4200];
    ig_status st = ig_ckpt_resolve(path, dir, sizeof dir, err);
    if (st != IG_OK) return st;
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    if (ig_file_exists(man)) {
        ig_ckpt_info info;
        st = ig_ckpt_read_info(ctx, dir, 0, &info, err);
        if (st == IG_OK) *out = info.model;
        return st;
    }
    int32_t eod;
    return ig_hf_read_config(ctx, dir, out, &eod, err);
}

ig_status ig_model_evaluate(ig_ctx *ctx, ig_backend *be, const char *path, const ig_eval_opts *o,
                            ig_eval_result *res, ig_err *err) {
    memset(res, 0, sizeof *res);
    ig_model_config shape;
    ig_status st = ig_model_read_shape(ctx, path, &shape, err);
    if (st != IG_OK) return st;
    const ig_objective *obj = ig_objective_of(&shape);
    if (!obj || !obj->evaluate)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: its models are not evaluated on data",
                          path);
    return obj->evaluate(ctx, be, path, o, res, err);
}
