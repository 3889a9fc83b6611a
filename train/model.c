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

#include "family.h"
#include "optimizer.h"

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
    return m->st.n_params;
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

/* ---- where a tensor's values are kept -------------------------------------------------------- */

/* The bucket of table index t. */
static const ig_bucket *bucket_of(const ig_model *m, size_t t) {
    for (size_t i = 0; i < m->st.n_buckets; i++)
        if (t >= m->st.buckets[i].t0 && t < m->st.buckets[i].t1) return &m->st.buckets[i];
    return NULL;
}

enum { HELD_PARAMS, HELD_MASTER };
/* Calls fn for each run of tensor t's elements this rank keeps in the parameter buffer
 * (HELD_PARAMS) or in the master weights (HELD_MASTER): flat elements [a, a + n), stored at `at`
 * (backend memory). Whole, or with ZeRO-3 this rank's piece of it (the master weights always,
 * the parameters of a layer's bucket). */
typedef ig_status (*held_fn)(ig_model *m, size_t t, uint64_t a, uint64_t n, void *at, void *user,
                             ig_err *err);
static ig_status held_runs(ig_model *m, size_t t, int which, held_fn fn, void *user, ig_err *err) {
    const ig_model_tensor *x = &m->tensors[t];
    const ig_bucket *b = bucket_of(m, t);
    uint64_t elem = which == HELD_MASTER ? sizeof(float) : m->as;
    char *base = which == HELD_MASTER ? (char *)m->st.master : (char *)m->st.params;
    if (!b || !base) return IG_OK;
    if (!m->st.zero3 || (which == HELD_PARAMS && b->whole != UINT64_MAX)) {
        uint64_t whole = which == HELD_MASTER ? b->off : b->whole;
        return fn(m, t, x->offset, x->numel, base + (whole + (x->offset - b->off)) * elem, user,
                  err);
    }
    uint64_t s = b->n / (uint64_t)m->part.dp, lo = b->off + s * (uint64_t)m->part.dp_rank;
    uint64_t a = x->offset > lo ? x->offset : lo;
    uint64_t e = x->offset + x->numel < lo + s ? x->offset + x->numel : lo + s;
    if (a >= e) return IG_OK;
    uint64_t piece = which == HELD_MASTER ? b->moff : b->poff;
    return fn(m, t, a, e - a, base + (piece + (a - lo)) * elem, user, err);
}

/* The held runs of a tensor from a host copy: of the tensor alone, or of the flat layout (flat). */
typedef struct upload_src {
    const float *f;
    int flat, which;
} upload_src;

static ig_status upload_run(ig_model *m, size_t t, uint64_t a, uint64_t n, void *at, void *user,
                            ig_err *err) {
    const upload_src *u = user;
    const float *src = u->f + (u->flat ? a : a - m->tensors[t].offset);
    if (u->which == HELD_PARAMS) return ig_backend_upload_f32(m->be, at, src, (size_t)n, err);
    return ig_backend_upload(m->be, at, src, (size_t)n * sizeof(float), err);
}

static ig_status upload_tensor(ig_model *m, size_t t, const float *f, int flat, ig_err *err) {
    upload_src u = {f, flat, HELD_PARAMS};
    ig_status st = held_runs(m, t, HELD_PARAMS, upload_run, &u, err);
    u.which = HELD_MASTER;
    return st == IG_OK ? held_runs(m, t, HELD_MASTER, upload_run, &u, err) : st;
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
        st = upload_tensor(m, i, host, 0, err);
    }
    ig_free(ctx, host);
    return st;
}

/* Where each tensor's parameters are while nothing is gathered: at their place in the buffer, or
 * (a ZeRO-3 layer's) nowhere; and the two windows' places. */
static void point_params(ig_model *m) {
    ig_store *s = &m->st;
    for (size_t i = 0; i < s->n_buckets; i++) {
        const ig_bucket *b = &s->buckets[i];
        for (size_t t = b->t0; t < b->t1; t++)
            s->param_at[t] =
                b->whole == UINT64_MAX
                    ? NULL
                    : (char *)s->params + (b->whole + m->tensors[t].offset - b->off) * m->as;
    }
    for (int w = 0; w < 2; w++)
        s->win[w] = s->zero3 ? (char *)s->params +
                                   (s->params_elems - (uint64_t)(2 - w) * s->win_elems) * m->as
                             : NULL;
}

/* ---- ZeRO-3: the layers' windows ------------------------------------------------------------ */

/* Waits for window w's all-gather in flight, if any (counted as waiting). */
static ig_status settle_window(ig_model *m, int w, ig_err *err) {
    ig_store *s = &m->st;
    if (!s->win_req[w]) return IG_OK;
    double t0 = ig_now();
    ig_status st = ig_comm_wait(s->win_req[w], err);
    s->gather_wait_s += ig_now() - t0;
    s->win_req[w] = NULL;
    return st;
}

/* Empties window w: its layer's tensors are nowhere again. */
static ig_status evict(ig_model *m, int w, ig_err *err) {
    ig_store *s = &m->st;
    ig_status st = settle_window(m, w, err);
    int l = s->win_layer[w];
    if (l >= 0 && s->param_at) {
        const ig_bucket *b = &s->buckets[s->layer_bucket[l - m->part.l0]];
        for (size_t t = b->t0; t < b->t1; t++) s->param_at[t] = NULL;
    }
    s->win_layer[w] = -1;
    return st;
}

/* Starts the all-gather of layer l's pieces into window w (emptied first; the kernels queued on
 * its old contents done). */
static ig_status gather_into(ig_model *m, int w, int l, ig_err *err) {
    ig_store *s = &m->st;
    ig_status st = evict(m, w, err);
    if (st == IG_OK) st = ig_backend_sync(m->be, err);
    if (st != IG_OK) return st;
    const ig_bucket *b = &s->buckets[s->layer_bucket[l - m->part.l0]];
    st = ig_group_iallgather(m->part.dpg, (char *)s->params + b->poff * m->as, s->win[w],
                             (size_t)(b->n / (uint64_t)m->part.dp), ig_model_comm_type(m),
                             &s->win_req[w], err);
    if (st != IG_OK) return ig_err_prefix(err, st, "ZeRO-3: gathering layer %d", l);
    s->win_layer[w] = l;
    s->gathers++;
    return IG_OK;
}

int ig_zero3_windows(int win[2], int *last, int l, int next, int prefetch, int fetch[2]) {
    int w = win[0] == l ? 0 : win[1] == l ? 1 : -1;
    fetch[0] = fetch[1] = -1;
    if (w < 0) { /* not prefetched: into the window the last layer used did not take */
        w = *last >= 0 ? 1 - *last : 0;
        win[w] = l;
        fetch[0] = w;
    }
    *last = w;
    if (prefetch && next >= 0 && next != l && win[1 - w] != next) {
        win[1 - w] = next;
        fetch[1] = 1 - w;
    }
    return w;
}

ig_status ig_model_use_layer(ig_model *m, int l, int next, ig_err *err) {
    ig_store *s = &m->st;
    if (!s->zero3) return IG_OK;
    if (l < m->part.l0 || l >= m->part.l1 || next >= m->part.l1 || next < -1 ||
        (next >= 0 && next < m->part.l0))
        return ig_err_set(err, IG_ERR_INTERNAL, "ZeRO-3: layer %d (next %d) is not held here", l,
                          next);
    int win[2] = {s->win_layer[0], s->win_layer[1]}, fetch[2];
    int w = ig_zero3_windows(win, &s->last_win, l, next, m->part.prefetch, fetch);
    ig_status st = IG_OK;
    if (fetch[0] >= 0 && (st = gather_into(m, w, l, err)) != IG_OK) return st;
    if ((st = settle_window(m, w, err)) != IG_OK) return st;
    const ig_bucket *b = &s->buckets[s->layer_bucket[l - m->part.l0]];
    for (size_t t = b->t0; t < b->t1; t++)
        s->param_at[t] = (char *)s->win[w] + (m->tensors[t].offset - b->off) * m->as;
    if (fetch[1] >= 0) st = gather_into(m, fetch[1], next, err);
    return st;
}

ig_status ig_model_params_changed(ig_model *m, ig_err *err) {
    ig_status st = IG_OK;
    for (int w = 0; m->st.zero3 && w < 2; w++) {
        ig_status e = evict(m, w, err);
        if (st == IG_OK) st = e;
    }
    return st;
}

ig_status ig_model_read_pieces(ig_model *m, float *out, ig_err *err) {
    ig_store *s = &m->st;
    if (!m->part.zero)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "the parameters are not sharded (no ZeRO)");
    ig_status st = IG_OK;
    for (size_t i = 0; st == IG_OK && i < s->n_buckets; i++) {
        const ig_bucket *b = &s->buckets[i];
        uint64_t n = b->n / (uint64_t)m->part.dp;
        if (s->master)
            st = ig_backend_download(m->be, out + b->moff,
                                     s->master + (s->zero3 ? b->moff : b->poff),
                                     (size_t)n * sizeof(float), err);
        else
            st = ig_backend_download_f32(m->be, out + b->moff, (char *)s->params + b->poff * m->as,
                                         (size_t)n, err);
    }
    return st;
}

/* ---- the gradient buckets -------------------------------------------------------------------- */

static int tied(const ig_model_tensor *t) {
    return t->place == IG_PLACE_TIED;
}

/* Whether tensor t's gradient becomes final with group g on this part (ig_model_ready). */
static int in_group(const ig_model *m, const ig_model_tensor *t, int g, int pass) {
    if (g == IG_GRADS_HEAD) /* the head's own tensors, then a tied one when not also first */
        return pass == 0 ? t->place == IG_PLACE_LAST : tied(t) && !m->part.first;
    if (g == IG_GRADS_EMBEDDING)
        return pass == 0 && (t->place == IG_PLACE_FIRST || (tied(t) && m->part.first));
    return pass == 0 && t->place == IG_PLACE_LAYER && t->layer == g;
}

/* Calls fn(user, t0, t1) for the runs of consecutive tensors of group g, in the order their
 * gradients become final. */
static ig_status group_runs(const ig_model *m, int g,
                            ig_status (*fn)(void *, size_t, size_t, ig_err *), void *user,
                            ig_err *err) {
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < m->n_tensors;) {
            if (!in_group(m, &m->tensors[i], g, pass)) {
                i++;
                continue;
            }
            size_t j = i + 1;
            while (j < m->n_tensors && in_group(m, &m->tensors[j], g, pass)) j++;
            ig_status st = fn(user, i, j, err);
            if (st != IG_OK) return st;
            i = j;
        }
    return IG_OK;
}

ig_status ig_model_ready(ig_model *m, int group, ig_err *err) {
    return m->ready ? group_runs(m, group, m->ready, m->ready_user, err) : IG_OK;
}

typedef struct bucket_list {
    ig_bucket *b;
    size_t n, cap;
    int tied_sum; /* pp > 1: a tied tensor is a bucket of its own */
    const ig_model *m;
} bucket_list;

/* Appends the runs [t0, t1) of one group as buckets (a tied tensor alone, flagged when summed
 * between stages), in reverse table order: the order the backward finishes a group's tensors. */
static ig_status add_runs(void *user, size_t t0, size_t t1, ig_err *err) {
    bucket_list *L = user;
    size_t end = t1;
    while (end > t0) {
        size_t begin = end - 1;
        int tie = tied(&L->m->tensors[begin]);
        while (begin > t0 && !tie && !tied(&L->m->tensors[begin - 1])) begin--;
        if (L->n == L->cap) return ig_err_set(err, IG_ERR_INTERNAL, "too many gradient buckets");
        L->b[L->n++] = (ig_bucket){.t0 = begin, .t1 = end, .tied = tie && L->tied_sum};
        end = begin;
    }
    return IG_OK;
}

/* Where each bucket's parameters are in the parameter buffer (ig_store): its flat place, or with
 * ZeRO-3 the first and last stage's buckets whole and packed, then this rank's pieces of the
 * layers' buckets (one per layer), then the two windows. */
static ig_status place_params(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    ig_store *s = &m->st;
    uint64_t dp = (uint64_t)p->dp, r = (uint64_t)p->dp_rank;
    for (size_t i = 0; i < s->n_buckets; i++) {
        ig_bucket *b = &s->buckets[i];
        const ig_model_tensor *t = &m->tensors[b->t0];
        b->layer = t->place == IG_PLACE_LAYER ? t->layer : -1;
        for (size_t k = b->t0; k < b->t1; k++)
            if (m->tensors[k].place != t->place || m->tensors[k].layer != t->layer) b->layer = -1;
        b->whole = b->off;
        b->poff = b->off + r * (b->n / dp);
    }
    s->params_elems = s->n_params;
    s->master_elems = s->n_params;
    s->win_layer[0] = s->win_layer[1] = s->last_win = -1;
    if (!s->zero3) return IG_OK;
    uint64_t at = 0, win = 0;
    int layers = p->l1 - p->l0;
    s->layer_bucket = ig_calloc(m->ctx, (size_t)layers, sizeof *s->layer_bucket);
    if (!s->layer_bucket) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (int l = 0; l < layers; l++) s->layer_bucket[l] = SIZE_MAX;
    for (size_t i = s->n_buckets; i-- > 0;) { /* table order */
        ig_bucket *b = &s->buckets[i];
        if (b->layer >= 0) continue;
        b->whole = at;
        b->poff = at + r * (b->n / dp);
        at += (b->n + 15) / 16 * 16;
    }
    s->resident_elems = at;
    for (size_t i = s->n_buckets; i-- > 0;) {
        ig_bucket *b = &s->buckets[i];
        if (b->layer < 0) continue;
        size_t *lb = &s->layer_bucket[b->layer - p->l0];
        if (*lb != SIZE_MAX)
            return ig_err_set(err, IG_ERR_INTERNAL, "ZeRO-3: layer %d's tensors are not adjacent",
                              b->layer);
        *lb = i;
        b->whole = UINT64_MAX; /* gathered into a window when used */
        b->poff = at;
        at += (b->n / dp + 15) / 16 * 16;
        if (b->n > win) win = b->n;
    }
    s->win_elems = (win + 15) / 16 * 16;
    s->params_elems = at + 2 * s->win_elems;
    s->master_elems = s->n_moments;
    return IG_OK;
}

/* The gradient buckets, in the order the backward finishes their tensors (the head, the layers
 * from the last, the embeddings), each a run of whole tensors adjacent in the table merged up to
 * about bucket_elems; a tied tensor alone when pipeline stages share it. Then the tensors'
 * offsets: packed, or with data parallelism each bucket 16-element aligned and padded to a
 * multiple of dp (so that it splits into dp equal pieces). */
static ig_status plan_buckets(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    ig_store *s = &m->st;
    bucket_list L = {.cap = m->n_tensors + 4, .tied_sum = p->pp > 1, .m = m};
    L.b = ig_calloc(m->ctx, L.cap, sizeof *L.b);
    if (!L.b) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    s->buckets = L.b;
    ig_status st = IG_OK;
    if (p->last) st = group_runs(m, IG_GRADS_HEAD, add_runs, &L, err);
    for (int l = p->l1 - 1; st == IG_OK && l >= p->l0; l--)
        st = group_runs(m, l, add_runs, &L, err);
    if (st == IG_OK && p->first) st = group_runs(m, IG_GRADS_EMBEDDING, add_runs, &L, err);
    if (st != IG_OK) return st;
    /* ZeRO-3 gathers a layer's bucket before the layer runs: one bucket per layer, never merged */
    s->zero3 = p->zero >= 3 && p->dp > 1;
    /* merge neighbours (a bucket and the one finished after it, just before it in the table) */
    size_t w = 0;
    for (size_t i = 0; i < L.n; i++) {
        ig_bucket b = s->buckets[i];
        if (w > 0 && !s->zero3) {
            ig_bucket *last = &s->buckets[w - 1];
            uint64_t n = m->tensors[last->t1 - 1].offset + m->tensors[last->t1 - 1].numel -
                         m->tensors[b.t0].offset;
            if (!last->tied && !b.tied && b.t1 == last->t0 && n <= p->bucket_elems) {
                last->t0 = b.t0;
                continue;
            }
        }
        s->buckets[w++] = b;
    }
    s->n_buckets = w;
    /* offsets, in table order (the buckets' reverse) */
    uint64_t at = 0, dp = (uint64_t)(p->dp > 0 ? p->dp : 1);
    for (size_t i = s->n_buckets; i-- > 0;) {
        ig_bucket *b = &s->buckets[i];
        if (dp > 1) at = (at + 15) / 16 * 16;
        b->off = at;
        for (size_t t = b->t0; t < b->t1; t++) {
            m->tensors[t].offset = at;
            at += m->tensors[t].numel;
        }
        b->n = (at - b->off + dp - 1) / dp * dp;
        at = b->off + b->n;
    }
    s->n_params = at;
    /* ZeRO: this rank's pieces of the moments, in table order */
    uint64_t moff = 0;
    for (size_t i = s->n_buckets; i-- > 0;) {
        s->buckets[i].moff = moff;
        moff += s->buckets[i].n / dp;
    }
    s->n_moments = p->zero ? moff : s->n_params;
    if ((st = place_params(m, err)) != IG_OK) return st;
    /* where the gradients are */
    s->goff = ig_calloc(m->ctx, m->n_tensors ? m->n_tensors : 1, sizeof *s->goff);
    s->gslot = ig_calloc(m->ctx, s->n_buckets ? s->n_buckets : 1, sizeof *s->gslot);
    if (!s->goff || !s->gslot) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t t = 0; t < m->n_tensors; t++) s->goff[t] = m->tensors[t].offset;
    s->n_grads = s->n_params;
    if (p->zero >= 2 && dp > 1) {
        uint64_t own = 0, big = 0;
        int k = 0;
        for (size_t i = 0; i < s->n_buckets; i++) {
            const ig_bucket *b = &s->buckets[i];
            int has_tied = 0;
            for (size_t t = b->t0; t < b->t1; t++) has_tied |= tied(&m->tensors[t]);
            s->gslot[i] = has_tied ? -1 : (k++ & 1);
            if (!has_tied && b->n > big) big = b->n;
        }
        s->slot_elems = (big + 15) / 16 * 16;
        /* the tied buckets' region first, each at its own place; then the two slots */
        for (size_t i = 0; i < s->n_buckets; i++) {
            const ig_bucket *b = &s->buckets[i];
            if (s->gslot[i] >= 0) continue;
            for (size_t t = b->t0; t < b->t1; t++)
                s->goff[t] = own + (m->tensors[t].offset - b->off);
            own += (b->n + 15) / 16 * 16;
        }
        s->tied_elems = own;
        for (size_t i = 0; i < s->n_buckets; i++) {
            const ig_bucket *b = &s->buckets[i];
            if (s->gslot[i] < 0) continue;
            uint64_t at0 = own + (uint64_t)s->gslot[i] * s->slot_elems;
            for (size_t t = b->t0; t < b->t1; t++)
                s->goff[t] = at0 + (m->tensors[t].offset - b->off);
        }
        s->n_grads = own + 2 * s->slot_elems;
    }
    return IG_OK;
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
    memset(out, 0, sizeof *out);
    out->params = m->st.params_elems * as;
    out->master = as == sizeof(float) ? 0 : m->st.master_elems * sizeof(float);
    out->grads = m->part.inference ? 0 : m->st.n_grads * as;
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
    if ((st = plan_buckets(m, err)) != IG_OK) {
        ig_model_free(m);
        return st;
    }
    fam->plan(&c, &p, B, T, &m->acts);
    *out = m;
    return IG_OK;
}

ig_status ig_model_estimate(ig_ctx *ctx, const ig_model_config *cfg, int B, int T,
                            const ig_part *part, size_t act_size, int ema, ig_part_memory *out,
                            ig_err *err) {
    memset(out, 0, sizeof *out);
    if (act_size != 2 && act_size != 4)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%zu bytes per activation: need 2 or 4",
                          act_size);
    ig_model *m = NULL;
    ig_status st = plan_part(&m, ctx, cfg, B, T, part, act_size, err);
    if (st != IG_OK) return st;
    part_bytes(m, out);
    if (!m->part.inference) ig_optim_estimate(m, ema, out);
    ig_model_free(m);
    return IG_OK;
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
        {(void **)&m->st.master, mem.master, "fp32 master weights"},
        {&m->st.params, mem.params, "parameters"},
        {&m->st.grads, mem.grads, "gradients"},
        {&m->act, mem.acts - f32 - i32, "activations"},
        {(void **)&m->f32, f32, "normalisation statistics and losses"},
        {(void **)&m->i32, i32, "token ids"},
    };
    if (m->part.inference) m->st.n_grads = 0; /* no gradients */
    m->st.param_at = ig_calloc(ctx, m->n_tensors ? m->n_tensors : 1, sizeof *m->st.param_at);
    if (!m->st.param_at) {
        ig_model_free(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
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
    point_params(m);
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
    ig_model_params_changed(m, NULL); /* no all-gather left in flight */
    void *bufs[] = {m->st.params, m->st.grads, m->act, m->st.master, m->f32, m->i32};
    for (size_t i = 0; m->be && i < sizeof bufs / sizeof bufs[0]; i++)
        ig_backend_release(m->be, bufs[i]);
    ig_free(m->ctx, m->tensors);
    ig_free(m->ctx, m->specs);
    ig_free(m->ctx, m->st.buckets);
    ig_free(m->ctx, m->st.goff);
    ig_free(m->ctx, m->st.gslot);
    ig_free(m->ctx, m->st.layer_bucket);
    ig_free(m->ctx, m->st.param_at);
    ig_free(m->ctx, m->slot_B);
    ig_free(m->ctx, m->slot_T);
    ig_free(m->ctx, m->h_i32);
    ig_free(m->ctx, m->h_f32);
    ig_free(m->ctx, m);
}

/* ---- host copies ---------------------------------------------------------------------------- */

static ig_status grads_sharded(ig_err *err) {
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "the gradients are sharded (ZeRO-2): no copy of them is kept whole");
}

ig_status ig_model_read(ig_model *m, ig_model_buffer which, float *out, ig_err *err) {
    uint64_t n = m->st.n_params;
    switch (which) {
    case IG_MODEL_PARAMS: /* the master weights when there are (bf16 parameters round them) */
        if (m->st.zero3)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "the parameters are sharded (ZeRO-3): no rank holds them whole");
        if (m->st.master)
            return ig_backend_download(m->be, out, m->st.master, n * sizeof(float), err);
        return ig_backend_download_f32(m->be, out, m->st.params, n, err);
    case IG_MODEL_GRADS:
        if (!m->st.grads) return ig_err_set(err, IG_ERR_INVALID_ARG, "the model has no gradients");
        if (m->st.n_grads != n) return grads_sharded(err);
        return ig_backend_download_f32(m->be, out, m->st.grads, n, err);
    }
    return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown model buffer %d", (int)which);
}

ig_status ig_model_write(ig_model *m, ig_model_buffer which, const float *in, ig_err *err) {
    uint64_t n = m->st.n_params;
    switch (which) {
    case IG_MODEL_PARAMS: {
        ig_status st = ig_model_params_changed(m, err);
        if (m->st.zero3) { /* what this rank keeps of each tensor */
            for (size_t t = 0; st == IG_OK && t < m->n_tensors; t++)
                st = upload_tensor(m, t, in, 1, err);
            return st;
        }
        if (st == IG_OK && m->st.master)
            st = ig_backend_upload(m->be, m->st.master, in, n * sizeof(float), err);
        return st == IG_OK ? ig_backend_upload_f32(m->be, m->st.params, in, n, err) : st;
    }
    case IG_MODEL_GRADS:
        if (!m->st.grads) return ig_err_set(err, IG_ERR_INVALID_ARG, "the model has no gradients");
        if (m->st.n_grads != n) return grads_sharded(err);
        return ig_backend_upload_f32(m->be, m->st.grads, in, n, err);
    }
    return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown model buffer %d", (int)which);
}

static ig_status sum_squares_run(ig_model *m, size_t t, uint64_t a, uint64_t n, void *at,
                                 void *user, ig_err *err) {
    (void)t, (void)a, (void)err;
    *(double *)user += ig_kernel_sum_squares(m->be, at, (size_t)n);
    return IG_OK;
}

ig_status ig_model_check_finite(ig_model *m, ig_err *err) {
    /* one sum of squares per tensor (of what this rank keeps of it): NaN or infinity in any
     * element makes it non-finite */
    for (size_t i = 0; i < m->n_tensors; i++) {
        const ig_model_tensor *t = &m->tensors[i];
        double ss = 0;
        held_runs(m, i, HELD_PARAMS, sum_squares_run, &ss, NULL);
        if (!isfinite(ss)) {
            ig_status st = ig_backend_sync(m->be, err);
            if (st != IG_OK) return st;
            return ig_err_set(err, IG_ERR_FORMAT, "%s holds %s values", t->name,
                              isnan(ss) ? "NaN" : "infinite");
        }
    }
    return ig_backend_sync(m->be, err);
}

ig_status ig_model_zero_grads(ig_model *m, ig_err *err) {
    if (m->part.inference)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "a model opened for inference has no gradients");
    return ig_backend_zero(m->be, m->st.grads, m->st.n_grads * m->as, err);
}

ig_status ig_model_grad_norm(ig_model *m, double *norm, ig_err *err) {
    double ss = ig_kernel_sum_squares(m->be, m->st.grads, m->st.n_grads);
    ig_status st = ig_backend_sync(m->be, err);
    *norm = sqrt(ss);
    return st;
}
