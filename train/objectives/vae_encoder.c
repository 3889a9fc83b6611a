/* vae_encoder.c - a VAE's encoder used frozen (train.h's ig_vae_encoder): ingot preprocess latents
 * opens one to store every clip's posterior once. What it takes is planned from the files' shape
 * and held against what is free before anything is loaded, as the text encoder's is; its identity
 * (recorded in every latent shard) is the xxh3 of its parameters, so a checkpoint and its export
 * are the same VAE.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vae_use.h"

struct ig_vae_encoder {
    ig_model *m;
    ig_vae_encoder_opts o;
    int C, downsample;
};

enum { MAX_BATCH = 4096 };

static ig_vae_encoder_opts with_defaults(const ig_vae_encoder_opts *o) {
    ig_vae_encoder_opts d = o ? *o : (ig_vae_encoder_opts){0};
    if (d.batch == 0) d.batch = 4;
    return d;
}

static ig_part whole(const ig_model_config *c) {
    return (ig_part){.tp = 1, .l0 = 0, .l1 = c->n_layer, .first = 1, .last = 1, .inference = 1};
}

ig_status ig_vae_encoder_plan(ig_ctx *ctx, const char *path, const ig_vae_encoder_opts *o,
                              size_t act_size, ig_vae_encoder_memory *out, ig_model_config *shape,
                              ig_err *err) {
    ig_vae_encoder_opts d = with_defaults(o);
    memset(out, 0, sizeof *out);
    if (d.batch < 1 || d.batch > MAX_BATCH || d.height < 1 || d.width < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a VAE encoder for %d frames of %dx%d: need 1 to %d frames of at least "
                          "1x1",
                          d.batch, d.height, d.width, MAX_BATCH);
    ig_model_config c;
    ig_status st = ig_model_read_shape(ctx, path, &c, err);
    if (st != IG_OK) return st;
    const ig_family *f = ig_family_of(c.arch);
    if (!f || f->objective != &ig_objective_vae)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s holds a %s model (%s), not a VAE: give a VAE's run, checkpoint or "
                          "export (model.arch vae)",
                          path, f ? f->arch : "?", f ? f->what : "?");
    int h, w, C;
    if ((st = ig_model_vae_latent_shape(&c, d.height, d.width, &h, &w, &C, err)) != IG_OK)
        return ig_err_prefix(err, st, "%s", path);
    ig_part p = whole(&c);
    ig_model *m = NULL;
    if ((st = ig_model_plan(&m, ctx, &c, d.batch, d.height * d.width, &p, act_size, err)) != IG_OK)
        return st;
    ig_part_memory pm;
    ig_model_memory(m, &pm);
    uint64_t big = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const ig_model_tensor *t = &m->tensors[i];
        uint64_t g = (uint64_t)t->global_shape[0] * (uint64_t)t->global_shape[1];
        big = g > big ? g : big;
    }
    uint64_t params = ig_model_buffer_elems(m);
    ig_model_free(m);
    out->weights = pm.params + pm.master;
    out->acts = pm.acts;
    out->device = out->weights + out->acts;
    uint64_t load = 2 * big * sizeof(float), hash = params * sizeof(float);
    out->host = load > hash ? load : hash;
    if (shape) *shape = c;
    return IG_OK;
}

static ig_status check_memory(ig_backend *be, const char *path, const ig_vae_encoder_opts *o,
                              const ig_vae_encoder_memory *mem, ig_err *err) {
    char what[1400], fix[300];
    double GB = 1e9;
    const char *type = ig_backend_act_size(be) == 2 ? "bf16" : "fp32";
    snprintf(what, sizeof what,
             "the VAE %s (weights %.3f GB in %s, activations %.3f GB for %d frames of %dx%d, "
             "%.3f GB on the host)",
             path, (double)mem->weights / GB, type, (double)mem->acts / GB, o->batch, o->height,
             o->width, (double)mem->host / GB);
    snprintf(fix, sizeof fix,
             "encode fewer frames at once (--batch), on a machine with more memory, or on a GPU");
    if (ig_backend_kind_of(be) == IG_BACKEND_CPU)
        return ig_memory_check(mem->device + mem->host, what, fix, err);
    ig_backend_memory bm;
    ig_backend_memory_info(be, &bm);
    if (bm.device_free && mem->device > bm.device_free)
        return ig_err_set(err, IG_ERR_NOMEM, "%s needs %.3f GB on %s, which has %.3f GB free: %s",
                          what, (double)mem->device / GB,
                          bm.device_what ? bm.device_what : "the GPU", (double)bm.device_free / GB,
                          fix);
    return ig_memory_check(mem->host, what, fix, err);
}

ig_status ig_vae_encoder_open(ig_vae_encoder **out, ig_ctx *ctx, ig_backend *be, const char *path,
                              const ig_vae_encoder_opts *o, ig_err *err) {
    *out = NULL;
    ig_vae_encoder_opts d = with_defaults(o);
    ig_vae_encoder_memory mem;
    ig_model_config c;
    ig_status st = ig_vae_encoder_plan(ctx, path, &d, ig_backend_act_size(be), &mem, &c, err);
    if (st == IG_OK) st = check_memory(be, path, &d, &mem, err);
    if (st != IG_OK) return st;
    ig_vae_encoder *e = ig_calloc(ctx, 1, sizeof *e);
    if (!e) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    e->o = d;
    int h = 0, w = 0;
    st = ig_model_vae_latent_shape(&c, d.height, d.width, &h, &w, &e->C, err);
    e->downsample = h ? d.height / h : 1;
    if (st == IG_OK)
        st = ig_model_open(&e->m, ctx, be, path, d.batch, d.height * d.width, NULL, err);
    if (st == IG_OK) st = ig_model_check_finite(e->m, err);
    if (st != IG_OK) {
        ig_vae_encoder_free(e);
        return ig_err_prefix(err, st, "%s", path);
    }
    *out = e;
    return IG_OK;
}

void ig_vae_encoder_free(ig_vae_encoder *e) {
    if (!e) return;
    ig_ctx *ctx = e->m ? e->m->ctx : NULL;
    ig_model_free(e->m);
    ig_free(ctx, e);
}

const ig_model_config *ig_vae_encoder_shape(const ig_vae_encoder *e) {
    return &e->m->cfg;
}

void ig_vae_encoder_factors(const ig_vae_encoder *e, int *C, int *downsample, double *scaling,
                            double *shift) {
    *C = e->C;
    *downsample = e->downsample;
    ig_vae_model_of(e->m)->factors(&e->m->cfg, scaling, shift);
}

ig_status ig_vae_encoder_identity(ig_vae_encoder *e, uint64_t *xxh3, ig_err *err) {
    return ig_model_params_xxh3(e->m, xxh3, err);
}

ig_status ig_vae_encoder_encode(ig_vae_encoder *e, const uint8_t *frames, int N, int H, int W,
                                float *moments, ig_err *err) {
    if (H > e->o.height || W > e->o.width)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "frames of %dx%d: the VAE encoder was opened for at most %dx%d", H, W,
                          e->o.height, e->o.width);
    return ig_model_vae_encode(e->m, frames, N, H, W, moments, err);
}
