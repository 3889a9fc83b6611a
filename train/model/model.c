/* model.c - a model of any family on a compute backend: the tensor table built from the family's
 * specs (each tensor's part under tensor parallelism, its tags), the initial values drawn from
 * (seed, name, index), the parameter store (one backend allocation each for parameters, gradients
 * and fp32 master weights, the gradient buckets of data parallelism, ZeRO-2's gradient slots),
 * the activation memory the family plans, and the whole model's passes on one process.
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family/family.h"

/* ---- the tensor table ------------------------------------------------------------------------ */

static void add_tensor(ig_model *m, const ig_tensor_spec *sp, uint64_t *at) {
    size_t i = m->n_tensors++;
    ig_model_tensor *t = &m->tensors[i];
    m->specs[i] = *sp;
    t->name = m->specs[i].name;
    t->ndim = sp->ndim;
    t->global_shape[0] = sp->shape[0];
    t->global_shape[1] = sp->ndim > 1 ? sp->shape[1] : 1;
    t->shape[0] = t->global_shape[0];
    t->shape[1] = t->global_shape[1];
    t->split_dim = sp->split_dim;
    t->parts = t->split_dim >= 0 ? m->part.tp : 1;
    t->part = t->parts > 1 ? m->part.tp_rank : 0;
    t->n_blocks = sp->n_blocks > 1 ? sp->n_blocks : 1;
    if (sp->n_blocks > 1)
        memcpy(t->block, sp->block, sizeof t->block);
    else if (t->split_dim >= 0)
        t->block[0] = t->global_shape[t->split_dim];
    if (t->split_dim >= 0) t->shape[t->split_dim] /= t->parts;
    t->numel = (uint64_t)t->shape[0] * (uint64_t)t->shape[1];
    t->offset = *at;
    t->decay = sp->decay;
    t->place = sp->place;
    t->layer = sp->layer;
    t->tp_partial = m->part.sp && sp->sp_partial;
    *at += t->numel;
}

ig_tensor_spec *ig_spec_add(ig_spec_list *l, const char *fmt, int layer,
                            const ig_tensor_spec *tmpl) {
    ig_tensor_spec *s = l->out && l->n < l->cap ? &l->out[l->n] : NULL;
    l->n++;
    if (!s) return NULL;
    *s = *tmpl;
    snprintf(s->name, sizeof s->name, fmt, layer);
    s->layer = layer;
    if (s->ndim < 2) s->shape[1] = 1;
    return s;
}

void ig_tensor_runs(const ig_model_tensor *t, ig_tensor_run_fn fn, void *user) {
    uint64_t G0 = (uint64_t)t->global_shape[0], G1 = (uint64_t)t->global_shape[1];
    uint64_t q = (uint64_t)t->part, p = (uint64_t)t->parts;
    if (t->split_dim < 0) {
        fn(user, 0, 0, G0 * G1);
        return;
    }
    /* block k starts at start[k] of the split dimension; its slice of width w[k] at start[k] +
     * q w[k] of the whole, at lstart[k] of the part */
    uint64_t start[IG_MAX_BLOCKS], lstart[IG_MAX_BLOCKS], w[IG_MAX_BLOCKS], s = 0, ls = 0;
    int nb = t->n_blocks;
    for (int k = 0; k < nb; k++) {
        start[k] = s, lstart[k] = ls;
        w[k] = (uint64_t)t->block[k] / p;
        s += (uint64_t)t->block[k], ls += w[k];
    }
    if (t->split_dim == 0) {
        for (int k = 0; k < nb; k++)
            fn(user, (start[k] + q * w[k]) * G1, lstart[k] * G1, w[k] * G1);
    } else {
        for (uint64_t r = 0; r < G0; r++)
            for (int k = 0; k < nb; k++)
                fn(user, r * G1 + start[k] + q * w[k], r * ls + lstart[k], w[k]);
    }
}

size_t ig_model_num_tensors(const ig_model *m) {
    return m->n_tensors;
}
const ig_model_tensor *ig_model_tensor_at(const ig_model *m, size_t i) {
    return i < m->n_tensors ? &m->tensors[i] : NULL;
}
const ig_model_tensor *ig_model_tensor_find(const ig_model *m, const char *name) {
    for (size_t i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}
const ig_model_config *ig_model_shape(const ig_model *m) {
    return &m->cfg;
}
ig_backend *ig_model_backend(const ig_model *m) {
    return m->be;
}
uint64_t ig_model_buffer_elems(const ig_model *m) {
    ig_store_sizes ss;
    ig_store_sizes_of(m->st, &ss);
    return ss.flat;
}

int ig_tensor_stage(const ig_model_tensor *t, const int *stage_layers, int pp) {
    switch (t->place) {
    case IG_PLACE_FIRST:
    case IG_PLACE_TIED:
        return 0;
    case IG_PLACE_LAST:
        return pp - 1;
    case IG_PLACE_LAYER:
        for (int s = 0; s < pp; s++)
            if (t->layer >= stage_layers[s] && t->layer < stage_layers[s + 1]) return s;
        return -1;
    }
    return -1;
}

/* ---- initialisation ------------------------------------------------------------------------- */

typedef struct init_run {
    ig_ctx *ctx;
    ig_rng_key key;
    float *out;
    ig_init init;
    float std;
    uint64_t real; /* IG_INIT_NORMAL_ROWS: the global elements of the drawn rows */
} init_run;

static void init_one_run(void *user, uint64_t global, uint64_t local, uint64_t n) {
    init_run *r = user;
    float *p = r->out + local;
    switch (r->init) {
    case IG_INIT_ZERO:
        memset(p, 0, n * sizeof *p);
        break;
    case IG_INIT_ONE:
        for (uint64_t k = 0; k < n; k++) p[k] = 1.0f;
        break;
    case IG_INIT_NORMAL:
        ig_rng_fill_normal(r->ctx, r->key, global, n, 0.0f, r->std, p);
        break;
    case IG_INIT_UNIFORM:
        for (uint64_t k = 0; k < n; k++)
            p[k] = (float)((2.0 * ig_rng_uniform(r->key, global + k) - 1.0) * (double)r->std);
        break;
    case IG_INIT_NORMAL_ROWS: {
        uint64_t drawn = global >= r->real ? 0 : (r->real - global < n ? r->real - global : n);
        if (drawn) ig_rng_fill_normal(r->ctx, r->key, global, drawn, 0.0f, r->std, p);
        memset(p + drawn, 0, (n - drawn) * sizeof *p);
        break;
    }
    }
}

void ig_model_init_tensor(const ig_model *m, ig_ctx *ctx, uint64_t seed, size_t i, float *out) {
    const ig_model_tensor *t = &m->tensors[i];
    const ig_tensor_spec *sp = &m->specs[i];
    init_run r = {.ctx = ctx,
                  .key = ig_rng_key_make(seed, t->name),
                  .out = out,
                  .init = sp->init,
                  .std = sp->std,
                  .real = (uint64_t)sp->init_rows * (uint64_t)t->global_shape[1]};
    ig_tensor_runs(t, init_one_run, &r);
}

/* The initial weights, drawn one tensor at a time on the host and uploaded (the largest tensor's
 * size in host memory, not the model's). */
static ig_status init_params(ig_model *m, ig_ctx *ctx, uint64_t seed, ig_err *err) {
    uint64_t big = 1;
    for (size_t i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].numel > big) big = m->tensors[i].numel;
    float *host = ig_alloc_aligned(ctx, big * sizeof(float), IG_ALIGN_KERNEL);
    if (!host)
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory for %.1f MB of initial weights",
                          (double)big * 4e-6);
    ig_status st = IG_OK;
    for (size_t i = 0; i < m->n_tensors && st == IG_OK; i++) {
        ig_model_init_tensor(m, ctx, seed, i, host);
        st = ig_store_upload_tensor(m->st, i, host, 0, err);
    }
    ig_free(ctx, host);
    return st;
}

/* ---- the gradient groups --------------------------------------------------------------------- */

ig_status ig_model_ready(ig_model *m, int group, ig_err *err) {
    return m->ready ? ig_store_group_runs(m->st, group, m->ready, m->ready_user, err) : IG_OK;
}

/* ---- creating and freeing -------------------------------------------------------------------- */

ig_status ig_model_create(ig_model **out, ig_ctx *ctx, ig_backend *be, const ig_model_config *cfg,
                          int B, int T, uint64_t seed, ig_err *err) {
    return ig_model_create_part(out, ctx, be, cfg, B, T, seed, NULL, err);
}

/* The bytes of each buffer of a planned part (what create_part allocates). */
static void part_bytes(const ig_model *m, ig_part_memory *out) {
    const ig_act_sizes *a = &m->acts;
    uint64_t S = (uint64_t)m->part.slots, as = m->as;
    ig_store_sizes ss;
    ig_store_sizes_of(m->st, &ss);
    memset(out, 0, sizeof *out);
    out->params = ss.params * as;
    out->master = ss.master * sizeof(float);
    out->grads = ss.grads * as;
    out->acts_slot = a->act * as + (a->f32 + a->io_f32) * sizeof(float) + a->i32 * sizeof(int32_t);
    out->acts = S * out->acts_slot + a->scratch_act * as + a->scratch_f32 * sizeof(float);
}

/* The host side of a part: the checked shape, the tensor table, the store's layout and the
 * activation plan; no backend memory (m->be is NULL). */
static ig_status plan_part(ig_model **out, ig_ctx *ctx, const ig_model_config *cfg, int B, int T,
                           const ig_part *part, size_t as, ig_err *err) {
    *out = NULL;
    ig_model_config c = *cfg;
    ig_status st = ig_model_config_check(&c, err);
    if (st != IG_OK) return st;
    const ig_family *fam = ig_family_of(c.arch);
    if (B <= 0 || T <= 0 || (T > c.seq_len && !fam->any_length))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "micro-batches of %d x %d tokens: need B >= 1 and 1 <= T <= seq_len %d",
                          B, T, c.seq_len);
    if ((uint64_t)B * (uint64_t)T > INT32_MAX / 4)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "micro-batches of %d x %d tokens are too large",
                          B, T);
    ig_part p = part ? *part : (ig_part){.tp = 1, .l0 = 0, .l1 = c.n_layer, .first = 1, .last = 1};
    if (p.slots < 1) p.slots = 1;
    if (p.dp < 1) p.dp = 1;
    if (p.pp < 1) p.pp = 1;
    if (p.bucket_elems == 0) p.bucket_elems = UINT64_MAX;
    if (p.tp < 1 || p.tp_rank < 0 || p.tp_rank >= p.tp || p.l0 < 0 || p.l1 > c.n_layer ||
        p.l0 >= p.l1 || (p.sp && (p.tp < 2 || ((int64_t)B * T) % p.tp)))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a model part of tp %d (rank %d), layers [%d, %d) of %d, sp %d does not "
                          "fit %d x %d tokens",
                          p.tp, p.tp_rank, p.l0, p.l1, c.n_layer, p.sp, B, T);
    if ((st = fam->check_layout(&c, p.tp, err)) != IG_OK) return st;
    size_t n_tensors = fam->tensors(&c, &p, NULL, 0);
    ig_model *m = ig_calloc(ctx, 1, sizeof *m);
    if (!m) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    m->ctx = ctx;
    m->fam = fam;
    m->cfg = c;
    m->part = p;
    m->B = B;
    m->T = T;
    m->as = as;
    m->tensors = ig_calloc(ctx, n_tensors ? n_tensors : 1, sizeof *m->tensors);
    m->specs = ig_calloc(ctx, n_tensors ? n_tensors : 1, sizeof *m->specs);
    m->slot_B = ig_calloc(ctx, (size_t)p.slots, sizeof *m->slot_B);
    m->slot_T = ig_calloc(ctx, (size_t)p.slots, sizeof *m->slot_T);
    if (!m->tensors || !m->specs || !m->slot_B || !m->slot_T) {
        ig_model_free(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    /* the table: the family's specs, then each tensor's part */
    size_t got = fam->tensors(&c, &p, m->specs, n_tensors);
    uint64_t at = 0;
    for (size_t i = 0; i < got; i++) {
        ig_tensor_spec sp = m->specs[i];
        add_tensor(m, &sp, &at);
    }
    if ((st = ig_store_plan(&m->st, ctx, m->tensors, m->n_tensors, &m->part, as, err)) != IG_OK) {
        ig_model_free(m);
        return st;
    }
    fam->plan(&c, &p, B, T, &m->acts);
    *out = m;
    return IG_OK;
}

ig_status ig_model_plan(ig_model **out, ig_ctx *ctx, const ig_model_config *cfg, int B, int T,
                        const ig_part *part, size_t act_size, ig_err *err) {
    *out = NULL;
    if (act_size != 2 && act_size != 4)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%zu bytes per activation: need 2 or 4",
                          act_size);
    return plan_part(out, ctx, cfg, B, T, part, act_size, err);
}

void ig_model_memory(const ig_model *m, ig_part_memory *out) {
    part_bytes(m, out);
}

ig_status ig_model_create_part(ig_model **out, ig_ctx *ctx, ig_backend *be,
                               const ig_model_config *cfg, int B, int T, uint64_t seed,
                               const ig_part *part, ig_err *err) {
    *out = NULL;
    ig_model *m = NULL;
    ig_status st = plan_part(&m, ctx, cfg, B, T, part, ig_backend_act_size(be), err);
    if (st != IG_OK) return st;
    const ig_family *fam = m->fam;
    if ((m->part.tp > 1 && !m->part.tpg) || (m->part.usp > 1 && !m->part.uspg)) {
        ig_model_free(m);
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a model part of tp %d, Ulysses sp %d needs its groups", m->part.tp,
                          m->part.usp);
    }
    for (size_t i = 0; i < fam->n_ops; i++)
        if (!ig_backend_supports(be, fam->ops[i])) {
            st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                            "the %s backend has no %s kernel, which %s models need: train them on "
                            "another backend (train.device)",
                            ig_backend_name(be), ig_op_name(fam->ops[i]), fam->arch);
            ig_model_free(m);
            return st;
        }
    m->be = be;
    uint64_t S = (uint64_t)m->part.slots;
    m->h_i32 = ig_alloc(ctx, (size_t)(S * m->acts.i32 * sizeof(int32_t)) + 1);
    m->h_f32 = ig_alloc(ctx, (size_t)(S * m->acts.io_f32 * sizeof(float)) + 1);
    if (!m->h_i32 || !m->h_f32) {
        ig_model_free(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    ig_part_memory mem;
    part_bytes(m, &mem);
    const ig_act_sizes *a = &m->acts;
    uint64_t f32 = (S * (a->f32 + a->io_f32) + a->scratch_f32) * sizeof(float);
    uint64_t i32 = S * a->i32 * sizeof(int32_t);
    struct {
        void **p;
        uint64_t bytes;
        const char *what;
    } bufs[] = {
        {&m->act, mem.acts - f32 - i32, "activations"},
        {(void **)&m->f32, f32, "normalisation statistics and losses"},
        {(void **)&m->i32, i32, "token ids"},
    };
    ig_backend_memory before, after;
    ig_backend_memory_info(be, &before);
    if ((st = ig_store_alloc(m->st, be, err)) != IG_OK) {
        ig_model_free(m);
        return st;
    }
    ig_backend_memory_info(be, &after);
    m->store_bytes = after.buffers - before.buffers;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (!bufs[i].bytes) continue;
        st = ig_backend_alloc(be, (size_t)bufs[i].bytes, bufs[i].p, err);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "the model's %s (%.1f MB)", bufs[i].what,
                          (double)bufs[i].bytes / 1e6);
            ig_model_free(m);
            return st;
        }
    }
    if ((st = fam->create(m, err)) != IG_OK || (st = init_params(m, ctx, seed, err)) != IG_OK) {
        ig_model_free(m);
        return st;
    }
    *out = m;
    return IG_OK;
}

void ig_model_free(ig_model *m) {
    if (!m) return;
    if (m->fs && m->fam) m->fam->destroy(m);
    if (m->os && m->fam && m->fam->objective->release) m->fam->objective->release(m);
    ig_store_free(m->st);
    void *bufs[] = {m->act, m->f32, m->i32};
    for (size_t i = 0; m->be && i < sizeof bufs / sizeof bufs[0]; i++)
        ig_backend_release(m->be, bufs[i]);
    ig_free(m->ctx, m->tensors);
    ig_free(m->ctx, m->specs);
    ig_free(m->ctx, m->slot_B);
    ig_free(m->ctx, m->slot_T);
    ig_free(m->ctx, m->h_i32);
    ig_free(m->ctx, m->h_f32);
    ig_free(m->ctx, m);
}

/* ---- host copies ---------------------------------------------------------------------------- */

ig_status ig_model_read(ig_model *m, ig_model_buffer which, float *out, ig_err *err) {
    return ig_store_read(m->st, which, out, err);
}

ig_status ig_model_write(ig_model *m, ig_model_buffer which, const float *in, ig_err *err) {
    return ig_store_write(m->st, which, in, err);
}

ig_status ig_model_params_xxh3(ig_model *m, uint64_t *xxh3, ig_err *err) {
    uint64_t n = ig_model_buffer_elems(m);
    float *p = ig_alloc(m->ctx, (size_t)(n ? n : 1) * sizeof *p);
    if (!p) return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading the model's weights");
    ig_status st = ig_model_read(m, IG_MODEL_PARAMS, p, err);
    if (st == IG_OK) *xxh3 = ig_xxh3_64(p, (size_t)n * sizeof *p);
    ig_free(m->ctx, p);
    return st;
}

ig_status ig_model_check_finite(ig_model *m, ig_err *err) {
    /* one sum of squares per tensor (of what this rank keeps of it): NaN or infinity in any
     * element makes it non-finite */
    for (size_t i = 0; i < m->n_tensors; i++) {
        double ss = ig_store_sum_squares(m->st, i);
        if (!isfinite(ss)) {
            ig_status st = ig_backend_sync(m->be, err);
            if (st != IG_OK) return st;
            return ig_err_set(err, IG_ERR_FORMAT, "%s holds %s values", m->tensors[i].name,
                              isnan(ss) ? "NaN" : "infinite");
        }
    }
    return ig_backend_sync(m->be, err);
}

ig_status ig_model_zero_grads(ig_model *m, ig_err *err) {
    return ig_store_zero_grads(m->st, err);
}

ig_status ig_model_grad_norm(ig_model *m, double *norm, ig_err *err) {
    double ss = ig_store_grad_sum_squares(m->st);
    ig_status st = ig_backend_sync(m->be, err);
    *norm = sqrt(ss);
    return st;
}
