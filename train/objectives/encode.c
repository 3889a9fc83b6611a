/* encode.c - the encode objective (encode_model.h): a family used frozen to encode text (T5's
 * encoder, as PixArt-alpha and Open-Sora condition on), which has nothing to optimise. Its
 * descriptor has no stage, loss or fit: ingot train refuses the family up front
 * (ig_train_config_check), ingot plan has nothing to plan (plannable), ingot eval nothing to
 * evaluate. What it has is its use (train.h's ig_text_encoder): the encoder opened from a Hugging
 * Face directory for inference - its memory held against what is free before anything is loaded
 * - and batches of captions encoded, every caption and id checked first.
 */
#include <stdlib.h>
#include <string.h>

#include "encode_model.h"
#include "family/family.h"
#include "formats/hf.h"

static ig_status encode_plannable(const ig_model_config *c, ig_err *err) {
    const ig_family *f = ig_family_of(c->arch);
    return ig_err_set(err, IG_ERR_CONFIG,
                      "model.arch %s is used frozen (%s): ingot does not train it, so there is no "
                      "training to plan; what encoding takes: ingot encode-text --help",
                      f ? f->arch : "?", f ? f->what : "?");
}

const ig_objective ig_objective_encode = {.name = "encode",
                                          .input = "text",
                                          .sampler = NULL,
                                          .units = "captions",
                                          .shapes_vary = 1,
                                          .plannable = encode_plannable};

/* ---- the encoder (train.h) --------------------------------------------------------------------
 */

struct ig_text_encoder {
    ig_model *m;
    const ig_encode_model *em;
    ig_text_encoder_opts o;
    char path[4096];       /* the directory it was opened from */
    uint64_t weights_xxh3; /* its identity (0: not computed yet) */
};

ig_text_encoder_opts ig_text_encoder_opts_default(void) {
    return (ig_text_encoder_opts){.max_batch = 8, .max_len = 512};
}

enum { MAX_BATCH = 4096, MAX_LEN = 1 << 16 };

static ig_status check_opts(const ig_text_encoder_opts *o, ig_err *err) {
    if (o->max_batch < 1 || o->max_batch > MAX_BATCH || o->max_len < 1 || o->max_len > MAX_LEN)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a text encoder for %d captions of %d tokens: need 1 to %d captions of "
                          "1 to %d tokens",
                          o->max_batch, o->max_len, MAX_BATCH, MAX_LEN);
    return IG_OK;
}

/* The inference part a text encoder is opened as (ig_model_open's). */
static ig_part whole(const ig_model_config *c) {
    return (ig_part){.tp = 1, .l0 = 0, .l1 = c->n_layer, .first = 1, .last = 1, .inference = 1};
}

ig_status ig_text_encoder_plan(ig_ctx *ctx, const char *path, const ig_text_encoder_opts *o,
                               size_t act_size, ig_text_encoder_memory *out, ig_model_config *shape,
                               ig_err *err) {
    ig_text_encoder_opts d = o ? *o : ig_text_encoder_opts_default();
    memset(out, 0, sizeof *out);
    ig_model_config c;
    ig_status st = check_opts(&d, err);
    if (st == IG_OK) st = ig_model_read_shape(ctx, path, &c, err);
    if (st != IG_OK) return st;
    const ig_family *f = ig_family_of(c.arch);
    if (f->objective != &ig_objective_encode)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s holds a %s model (%s), not a text encoder: give a T5 encoder's "
                          "Hugging Face directory",
                          path, f->arch, f->what);
    ig_part p = whole(&c);
    ig_model *m = NULL;
    if ((st = ig_model_plan(&m, ctx, &c, d.max_batch, d.max_len, &p, act_size, err)) != IG_OK)
        return st;
    ig_part_memory pm;
    ig_model_memory(m, &pm);
    uint64_t big = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const ig_model_tensor *t = &m->tensors[i];
        uint64_t g = (uint64_t)t->global_shape[0] * (uint64_t)t->global_shape[1];
        big = g > big ? g : big;
    }
    ig_model_free(m);
    out->weights = pm.params + pm.master;
    out->acts = pm.acts;
    out->device = out->weights + out->acts;
    out->host = 2 * big * sizeof(float); /* ig_hf_load's buffers: a tensor whole and its part */
    if (shape) *shape = c;
    return IG_OK;
}

/* What the encoder takes against what is free, before anything is loaded. */
static ig_status check_memory(ig_ctx *ctx, ig_backend *be, const char *path,
                              const ig_text_encoder_opts *o, const ig_model_config *c,
                              const ig_text_encoder_memory *mem, ig_err *err) {
    char what[1200], fix[400];
    double GB = 1e9;
    const char *type = ig_backend_act_size(be) == 2 ? "bf16" : "fp32";
    snprintf(what, sizeof what,
             "the text encoder %s (%s weights %.2f GB in %s, activations %.2f GB for %d captions "
             "of %d tokens, %.2f GB to load)",
             path, ig_family_of(c->arch)->arch, (double)mem->weights / GB, type,
             (double)mem->acts / GB, o->max_batch, o->max_len, (double)mem->host / GB);
    snprintf(fix, sizeof fix,
             "encode on a machine with more memory, or on a GPU in bf16 (half the weights), or "
             "fewer or shorter captions at once");
    if (ig_backend_kind_of(be) == IG_BACKEND_CPU)
        return ig_memory_check(mem->device + mem->host, what, fix, err);
    ig_backend_memory bm;
    ig_backend_memory_info(be, &bm);
    if (bm.device_free && mem->device > bm.device_free)
        return ig_err_set(err, IG_ERR_NOMEM, "%s needs %.2f GB on %s, which has %.2f GB free: %s",
                          what, (double)mem->device / GB,
                          bm.device_what ? bm.device_what : "the GPU", (double)bm.device_free / GB,
                          fix);
    return ig_memory_check(mem->host, what, fix, err);
}

ig_status ig_text_encoder_open(ig_text_encoder **out, ig_ctx *ctx, ig_backend *be, const char *path,
                               const ig_text_encoder_opts *o, ig_err *err) {
    *out = NULL;
    ig_text_encoder_opts d = o ? *o : ig_text_encoder_opts_default();
    ig_text_encoder_memory mem;
    ig_model_config c;
    ig_status st = ig_text_encoder_plan(ctx, path, &d, ig_backend_act_size(be), &mem, &c, err);
    if (st == IG_OK) st = check_memory(ctx, be, path, &d, &c, &mem, err);
    if (st != IG_OK) return st;
    ig_text_encoder *e = ig_calloc(ctx, 1, sizeof *e);
    if (!e) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    e->o = d;
    snprintf(e->path, sizeof e->path, "%s", path);
    st = ig_model_open(&e->m, ctx, be, path, d.max_batch, d.max_len, NULL, err);
    if (st == IG_OK) st = ig_model_check_finite(e->m, err);
    if (st != IG_OK) {
        ig_text_encoder_free(e);
        return ig_err_prefix(err, st, "%s", path);
    }
    e->em = e->m->fam->for_objective;
    *out = e;
    return IG_OK;
}

void ig_text_encoder_free(ig_text_encoder *e) {
    if (!e) return;
    ig_ctx *ctx = e->m ? e->m->ctx : NULL;
    ig_model_free(e->m);
    ig_free(ctx, e);
}

const ig_model_config *ig_text_encoder_shape(const ig_text_encoder *e) {
    return &e->m->cfg;
}

int ig_text_encoder_width(const ig_text_encoder *e) {
    return e->em->width(&e->m->cfg);
}

static int by_name(const void *a, const void *b) {
    return strcmp(ig_st_tensor_name(*(const ig_st_tensor *const *)a),
                  ig_st_tensor_name(*(const ig_st_tensor *const *)b));
}

ig_status ig_text_encoder_identity(ig_text_encoder *e, uint64_t *weights_xxh3, ig_err *err) {
    if (e->weights_xxh3) {
        *weights_xxh3 = e->weights_xxh3;
        return IG_OK;
    }
    ig_hf_weights *w = NULL;
    char stp[4096], cfg[4096];
    ig_hf_paths(e->path, stp, cfg, sizeof stp);
    ig_status st = ig_hf_weights_open(&w, e->m->ctx, stp, err);
    size_t n = st == IG_OK ? ig_hf_weights_count(w) : 0, used = 0;
    const ig_st_tensor **t = st == IG_OK ? ig_calloc(e->m->ctx, n ? n : 1, sizeof *t) : NULL;
    ig_xxh3_stream *h = st == IG_OK ? ig_xxh3_stream_create() : NULL;
    if (st == IG_OK && (!t || !h)) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    /* the tensors it reads (a file's others - the decoder, a tied copy - are the family's to
     * ignore), by name: the same however the files cut them */
    const ig_family *f = e->m->fam;
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        const ig_st_tensor *x = ig_hf_weights_tensor(w, i);
        if (!(f->hf_ignored && f->hf_ignored(ig_st_tensor_name(x)))) t[used++] = x;
    }
    if (st == IG_OK) qsort(t, used, sizeof *t, by_name);
    for (size_t i = 0; st == IG_OK && i < used; i++) {
        const char *name = ig_st_tensor_name(t[i]),
                   *dtype = ig_st_dtype_name(ig_st_tensor_dtype(t[i]));
        uint64_t nd = (uint64_t)ig_st_tensor_ndim(t[i]);
        ig_xxh3_stream_update(h, name, strlen(name) + 1);
        ig_xxh3_stream_update(h, dtype, strlen(dtype) + 1);
        ig_xxh3_stream_update(h, &nd, sizeof nd);
        ig_xxh3_stream_update(h, ig_st_tensor_shape(t[i]), nd * sizeof(uint64_t));
        ig_xxh3_stream_update(h, ig_st_tensor_data(t[i]), ig_st_tensor_bytes(t[i]));
    }
    if (st == IG_OK) {
        e->weights_xxh3 = ig_xxh3_stream_digest(h);
        if (!e->weights_xxh3) e->weights_xxh3 = 1; /* 0 means unknown */
        *weights_xxh3 = e->weights_xxh3;
    }
    ig_xxh3_stream_free(h);
    ig_free(e->m->ctx, t);
    ig_hf_weights_free(w);
    return st;
}

ig_status ig_text_encoder_encode(ig_text_encoder *e, size_t n, const int32_t *const *ids,
                                 const int *lens, float *const *out, ig_err *err) {
    int V = e->m->cfg.vocab_size;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] < 1 || lens[i] > e->o.max_len)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "caption %zu has %d tokens: the encoder was opened for 1 to %d", i,
                              lens[i], e->o.max_len);
        for (int k = 0; k < lens[i]; k++)
            if (ids[i][k] < 0 || ids[i][k] >= V)
                return ig_err_set(err, IG_ERR_INVALID_ARG,
                                  "caption %zu: token %d is id %d, outside the encoder's "
                                  "vocabulary of %d: the ids come from another tokenizer than "
                                  "the encoder's",
                                  i, k, (int)ids[i][k], V);
    }
    for (size_t i = 0; i < n; i += (size_t)e->o.max_batch) {
        int B = n - i < (size_t)e->o.max_batch ? (int)(n - i) : e->o.max_batch;
        ig_status st = e->em->encode(e->m, B, ids + i, lens + i, out + i, err);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}
