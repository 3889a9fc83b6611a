/* store.c - the parameter store of a model part (store.h): its plan from the tensor table (the
 * gradient buckets in the order the backward finishes them, the flat layout, ZeRO's pieces,
 * ZeRO-2's working slots, ZeRO-3's windows), its backend buffers, where each tensor's values are,
 * ZeRO-3's gathers of a layer before it is used, and host copies.
 */
#include "store.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

struct ig_store {
    ig_ctx *ctx;
    ig_backend *be;
    size_t as;                /* bytes per act element */
    ig_model_tensor *tensors; /* the part's table (the model's; offsets set here) */
    size_t n_tensors;
    ig_part part;      /* what the part holds, its data-parallel group, its ZeRO stage */
    uint64_t n_params; /* elements of the flat layout (tensors, bucket padding included) */
    void *params;      /* [params_elems] act type */
    void *grads;       /* [n_grads] act type */
    float *master;     /* fp32 master weights when the act type is bf16 ([master_elems]) */
    uint64_t params_elems, master_elems;
    /* the master weights are this rank's ZeRO pieces, at the moments' offsets (ZeRO-1, 2 and 3
     * over more than one rank: updated where the moments are); else the flat layout whole */
    int master_pieces;
    void **param_at; /* [n_tensors]: where each tensor's parameters are */
    /* ZeRO-3 */
    int zero3;
    uint64_t resident_elems, win_elems;
    void *win[2];            /* the windows */
    int win_layer[2];        /* the layer each holds (-1: none) */
    int last_win;            /* the window of the layer used last (-1: none yet) */
    ig_comm_req *win_req[2]; /* its all-gather in flight */
    size_t *layer_bucket;    /* [l1 - l0]: the bucket of each layer */
    double gather_wait_s;    /* seconds waited for all-gathers (reset by the reader) */
    ig_bucket *buckets;      /* in the order the backward finishes them */
    size_t n_buckets;
    uint64_t n_moments;  /* elements of the AdamW moments: n_params, or this rank's ZeRO pieces */
    uint64_t *goff;      /* [n_tensors]: where each tensor's gradient is (elements into grads) */
    int *gslot;          /* per bucket: 0, 1, or -1 (ZeRO-2) */
    uint64_t slot_elems; /* elements of a working slot */
    uint64_t tied_elems; /* elements of the tied buckets' region (ZeRO-2) */
    uint64_t n_grads;    /* elements of grads */
};

ig_comm_type ig_store_comm_type(const ig_store *s) {
    return s->as == 2 ? IG_COMM_BF16 : IG_COMM_F32;
}

/* ---- where a tensor's values are kept -------------------------------------------------------- */

/* The bucket of table index t. */
static const ig_bucket *bucket_of(const ig_store *s, size_t t) {
    for (size_t i = 0; i < s->n_buckets; i++)
        if (t >= s->buckets[i].t0 && t < s->buckets[i].t1) return &s->buckets[i];
    return NULL;
}

enum { HELD_PARAMS, HELD_MASTER };
/* Calls fn for each run of tensor t's elements this rank keeps in the parameter buffer
 * (HELD_PARAMS) or in the master weights (HELD_MASTER): flat elements [a, a + n), stored at `at`
 * (backend memory). Whole, or this rank's piece of it: the master weights' under any ZeRO stage
 * over several ranks, the parameters' of a layer's bucket under ZeRO-3. */
typedef ig_status (*held_fn)(ig_store *s, size_t t, uint64_t a, uint64_t n, void *at, void *user,
                             ig_err *err);
static ig_status held_runs(ig_store *s, size_t t, int which, held_fn fn, void *user, ig_err *err) {
    const ig_model_tensor *x = &s->tensors[t];
    const ig_bucket *b = bucket_of(s, t);
    uint64_t elem = which == HELD_MASTER ? sizeof(float) : s->as;
    char *base = which == HELD_MASTER ? (char *)s->master : (char *)s->params;
    if (!b || !base) return IG_OK;
    if (which == HELD_MASTER ? !s->master_pieces : b->whole != UINT64_MAX) {
        uint64_t whole = which == HELD_MASTER ? b->off : b->whole;
        return fn(s, t, x->offset, x->numel, base + (whole + (x->offset - b->off)) * elem, user,
                  err);
    }
    uint64_t n = b->n / (uint64_t)s->part.dp, lo = b->off + n * (uint64_t)s->part.dp_rank;
    uint64_t a = x->offset > lo ? x->offset : lo;
    uint64_t e = x->offset + x->numel < lo + n ? x->offset + x->numel : lo + n;
    if (a >= e) return IG_OK;
    uint64_t piece = which == HELD_MASTER ? b->moff : b->poff;
    return fn(s, t, a, e - a, base + (piece + (a - lo)) * elem, user, err);
}

/* The held runs of a tensor from a host copy: of the tensor alone, or of the flat layout (flat). */
typedef struct upload_src {
    const float *f;
    int flat, which;
} upload_src;

static ig_status upload_run(ig_store *s, size_t t, uint64_t a, uint64_t n, void *at, void *user,
                            ig_err *err) {
    const upload_src *u = user;
    const float *src = u->f + (u->flat ? a : a - s->tensors[t].offset);
    if (u->which == HELD_PARAMS) return ig_backend_upload_f32(s->be, at, src, (size_t)n, err);
    return ig_backend_upload(s->be, at, src, (size_t)n * sizeof(float), err);
}

ig_status ig_store_upload_tensor(ig_store *s, size_t t, const float *f, int flat, ig_err *err) {
    upload_src u = {f, flat, HELD_PARAMS};
    ig_status st = held_runs(s, t, HELD_PARAMS, upload_run, &u, err);
    u.which = HELD_MASTER;
    return st == IG_OK ? held_runs(s, t, HELD_MASTER, upload_run, &u, err) : st;
}

/* What this rank keeps of every tensor in the parameters (HELD_PARAMS) or the master weights
 * (HELD_MASTER), from a host copy of the flat layout. */
static ig_status upload_held(ig_store *s, int which, const float *flat, ig_err *err) {
    upload_src u = {flat, 1, which};
    ig_status st = IG_OK;
    for (size_t t = 0; st == IG_OK && t < s->n_tensors; t++)
        st = held_runs(s, t, which, upload_run, &u, err);
    return st;
}

/* Where each tensor's parameters are while nothing is gathered: at their place in the buffer, or
 * (a ZeRO-3 layer's) nowhere; and the two windows' places. */
static void point_params(ig_store *s) {
    for (size_t i = 0; i < s->n_buckets; i++) {
        const ig_bucket *b = &s->buckets[i];
        for (size_t t = b->t0; t < b->t1; t++)
            s->param_at[t] =
                b->whole == UINT64_MAX
                    ? NULL
                    : (char *)s->params + (b->whole + s->tensors[t].offset - b->off) * s->as;
    }
    for (int w = 0; w < 2; w++)
        s->win[w] = s->zero3 ? (char *)s->params +
                                   (s->params_elems - (uint64_t)(2 - w) * s->win_elems) * s->as
                             : NULL;
}

/* ---- ZeRO-3: the layers' windows ------------------------------------------------------------ */

/* Waits for window w's all-gather in flight, if any (counted as waiting). */
static ig_status settle_window(ig_store *s, int w, ig_err *err) {
    if (!s->win_req[w]) return IG_OK;
    double t0 = ig_now();
    ig_status st = ig_comm_wait(s->win_req[w], err);
    s->gather_wait_s += ig_now() - t0;
    s->win_req[w] = NULL;
    return st;
}

/* Empties window w: its layer's tensors are nowhere again. */
static ig_status evict(ig_store *s, int w, ig_err *err) {
    ig_status st = settle_window(s, w, err);
    int l = s->win_layer[w];
    if (l >= 0 && s->param_at) {
        const ig_bucket *b = &s->buckets[s->layer_bucket[l - s->part.l0]];
        for (size_t t = b->t0; t < b->t1; t++) s->param_at[t] = NULL;
    }
    s->win_layer[w] = -1;
    return st;
}

/* Starts the all-gather of layer l's pieces into window w (emptied first; the kernels queued on
 * its old contents done). */
static ig_status gather_into(ig_store *s, int w, int l, ig_err *err) {
    ig_status st = evict(s, w, err);
    if (st == IG_OK) st = ig_backend_sync(s->be, err);
    if (st != IG_OK) return st;
    const ig_bucket *b = &s->buckets[s->layer_bucket[l - s->part.l0]];
    st = ig_group_iallgather(s->part.dpg, (char *)s->params + b->poff * s->as, s->win[w],
                             (size_t)(b->n / (uint64_t)s->part.dp), ig_store_comm_type(s),
                             &s->win_req[w], err);
    if (st != IG_OK) return ig_err_prefix(err, st, "ZeRO-3: gathering layer %d", l);
    s->win_layer[w] = l;
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

ig_status ig_store_use_layer(ig_store *s, int l, int next, ig_err *err) {
    if (!s->zero3) return IG_OK;
    if (l < s->part.l0 || l >= s->part.l1 || next >= s->part.l1 || next < -1 ||
        (next >= 0 && next < s->part.l0))
        return ig_err_set(err, IG_ERR_INTERNAL, "ZeRO-3: layer %d (next %d) is not held here", l,
                          next);
    int win[2] = {s->win_layer[0], s->win_layer[1]}, fetch[2];
    int w = ig_zero3_windows(win, &s->last_win, l, next, s->part.prefetch, fetch);
    ig_status st = IG_OK;
    if (fetch[0] >= 0 && (st = gather_into(s, w, l, err)) != IG_OK) return st;
    if ((st = settle_window(s, w, err)) != IG_OK) return st;
    const ig_bucket *b = &s->buckets[s->layer_bucket[l - s->part.l0]];
    for (size_t t = b->t0; t < b->t1; t++)
        s->param_at[t] = (char *)s->win[w] + (s->tensors[t].offset - b->off) * s->as;
    if (fetch[1] >= 0) st = gather_into(s, fetch[1], next, err);
    return st;
}

ig_status ig_store_params_changed(ig_store *s, ig_err *err) {
    ig_status st = IG_OK;
    for (int w = 0; s->zero3 && w < 2; w++) {
        ig_status e = evict(s, w, err);
        if (st == IG_OK) st = e;
    }
    return st;
}

ig_status ig_store_read_pieces(ig_store *s, float *out, ig_err *err) {
    if (!s->part.zero)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "the parameters are not sharded (no ZeRO)");
    ig_status st = IG_OK;
    for (size_t i = 0; st == IG_OK && i < s->n_buckets; i++) {
        const ig_bucket *b = &s->buckets[i];
        uint64_t n = b->n / (uint64_t)s->part.dp;
        if (s->master)
            st = ig_backend_download(s->be, out + b->moff, ig_store_master_piece(s, b),
                                     (size_t)n * sizeof(float), err);
        else
            st = ig_backend_download_f32(s->be, out + b->moff, (char *)s->params + b->poff * s->as,
                                         (size_t)n, err);
    }
    return st;
}

/* ---- the gradient buckets -------------------------------------------------------------------- */

static int tied(const ig_model_tensor *t) {
    return t->place == IG_PLACE_TIED;
}

/* Whether tensor t's gradient becomes final with group g on this part (ig_model_ready). */
static int in_group(const ig_store *s, const ig_model_tensor *t, int g, int pass) {
    if (g == IG_GRADS_HEAD) /* the head's own tensors, then a tied one when not also first */
        return pass == 0 ? t->place == IG_PLACE_LAST : tied(t) && !s->part.first;
    if (g == IG_GRADS_EMBEDDING)
        return pass == 0 && (t->place == IG_PLACE_FIRST || (tied(t) && s->part.first));
    return pass == 0 && t->place == IG_PLACE_LAYER && t->layer == g;
}

/* Calls fn(user, t0, t1) for the runs of consecutive tensors of group g, in the order their
 * gradients become final. */
ig_status ig_store_group_runs(const ig_store *s, int g,
                              ig_status (*fn)(void *, size_t, size_t, ig_err *), void *user,
                              ig_err *err) {
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < s->n_tensors;) {
            if (!in_group(s, &s->tensors[i], g, pass)) {
                i++;
                continue;
            }
            size_t j = i + 1;
            while (j < s->n_tensors && in_group(s, &s->tensors[j], g, pass)) j++;
            ig_status st = fn(user, i, j, err);
            if (st != IG_OK) return st;
            i = j;
        }
    return IG_OK;
}

typedef struct bucket_list {
    ig_bucket *b;
    size_t n, cap;
    int tied_sum; /* pp > 1: a tied tensor is a bucket of its own */
    const ig_store *s;
} bucket_list;

/* Appends the runs [t0, t1) of one group as buckets (a tied tensor alone, flagged when summed
 * between stages), in reverse table order: the order the backward finishes a group's tensors. */
static ig_status add_runs(void *user, size_t t0, size_t t1, ig_err *err) {
    bucket_list *L = user;
    size_t end = t1;
    while (end > t0) {
        size_t begin = end - 1;
        int tie = tied(&L->s->tensors[begin]);
        while (begin > t0 && !tie && !tied(&L->s->tensors[begin - 1])) begin--;
        if (L->n == L->cap) return ig_err_set(err, IG_ERR_INTERNAL, "too many gradient buckets");
        L->b[L->n++] = (ig_bucket){.t0 = begin, .t1 = end, .tied = tie && L->tied_sum};
        end = begin;
    }
    return IG_OK;
}

/* Where each bucket's parameters are in the parameter buffer (ig_store): its flat place, or with
 * ZeRO-3 the first and last stage's buckets whole and packed, then this rank's pieces of the
 * layers' buckets (one per layer), then the two windows. */
static ig_status place_params(ig_store *s, ig_err *err) {
    const ig_part *p = &s->part;
    uint64_t dp = (uint64_t)p->dp, r = (uint64_t)p->dp_rank;
    for (size_t i = 0; i < s->n_buckets; i++) {
        ig_bucket *b = &s->buckets[i];
        const ig_model_tensor *t = &s->tensors[b->t0];
        b->layer = t->place == IG_PLACE_LAYER ? t->layer : -1;
        for (size_t k = b->t0; k < b->t1; k++)
            if (s->tensors[k].place != t->place || s->tensors[k].layer != t->layer) b->layer = -1;
        b->whole = b->off;
        b->poff = b->off + r * (b->n / dp);
    }
    s->params_elems = s->n_params;
    s->master_pieces = p->zero > 0 && dp > 1;
    s->master_elems = s->master_pieces ? s->n_moments : s->n_params;
    s->win_layer[0] = s->win_layer[1] = s->last_win = -1;
    if (!s->zero3) return IG_OK;
    uint64_t at = 0, win = 0;
    int layers = p->l1 - p->l0;
    s->layer_bucket = ig_calloc(s->ctx, (size_t)layers, sizeof *s->layer_bucket);
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
    return IG_OK;
}

/* The gradient buckets, in the order the backward finishes their tensors (the head, the layers
 * from the last, the embeddings), each a run of whole tensors adjacent in the table merged up to
 * about bucket_elems; a tied tensor alone when pipeline stages share it. Then the tensors'
 * offsets: packed, or with data parallelism each bucket 16-element aligned and padded to a
 * multiple of dp (so that it splits into dp equal pieces). */
static ig_status plan_buckets(ig_store *s, ig_err *err) {
    const ig_part *p = &s->part;
    bucket_list L = {.cap = s->n_tensors + 4, .tied_sum = p->pp > 1, .s = s};
    L.b = ig_calloc(s->ctx, L.cap, sizeof *L.b);
    if (!L.b) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    s->buckets = L.b;
    ig_status st = IG_OK;
    if (p->last) st = ig_store_group_runs(s, IG_GRADS_HEAD, add_runs, &L, err);
    for (int l = p->l1 - 1; st == IG_OK && l >= p->l0; l--)
        st = ig_store_group_runs(s, l, add_runs, &L, err);
    if (st == IG_OK && p->first) st = ig_store_group_runs(s, IG_GRADS_EMBEDDING, add_runs, &L, err);
    if (st != IG_OK) return st;
    /* ZeRO-3 gathers a layer's bucket before the layer runs: one bucket per layer, never merged */
    s->zero3 = p->zero >= 3 && p->dp > 1;
    /* merge neighbours (a bucket and the one finished after it, just before it in the table) */
    size_t w = 0;
    for (size_t i = 0; i < L.n; i++) {
        ig_bucket b = s->buckets[i];
        if (w > 0 && !s->zero3) {
            ig_bucket *last = &s->buckets[w - 1];
            uint64_t n = s->tensors[last->t1 - 1].offset + s->tensors[last->t1 - 1].numel -
                         s->tensors[b.t0].offset;
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
            s->tensors[t].offset = at;
            at += s->tensors[t].numel;
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
    if ((st = place_params(s, err)) != IG_OK) return st;
    /* where the gradients are */
    s->goff = ig_calloc(s->ctx, s->n_tensors ? s->n_tensors : 1, sizeof *s->goff);
    s->gslot = ig_calloc(s->ctx, s->n_buckets ? s->n_buckets : 1, sizeof *s->gslot);
    if (!s->goff || !s->gslot) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t t = 0; t < s->n_tensors; t++) s->goff[t] = s->tensors[t].offset;
    s->n_grads = s->n_params;
    if (p->zero >= 2 && dp > 1) {
        uint64_t own = 0, big = 0;
        int k = 0;
        for (size_t i = 0; i < s->n_buckets; i++) {
            const ig_bucket *b = &s->buckets[i];
            int has_tied = 0;
            for (size_t t = b->t0; t < b->t1; t++) has_tied |= tied(&s->tensors[t]);
            s->gslot[i] = has_tied ? -1 : (k++ & 1);
            if (!has_tied && b->n > big) big = b->n;
        }
        s->slot_elems = (big + 15) / 16 * 16;
        /* the tied buckets' region first, each at its own place; then the two slots */
        for (size_t i = 0; i < s->n_buckets; i++) {
            const ig_bucket *b = &s->buckets[i];
            if (s->gslot[i] >= 0) continue;
            for (size_t t = b->t0; t < b->t1; t++)
                s->goff[t] = own + (s->tensors[t].offset - b->off);
            own += (b->n + 15) / 16 * 16;
        }
        s->tied_elems = own;
        for (size_t i = 0; i < s->n_buckets; i++) {
            const ig_bucket *b = &s->buckets[i];
            if (s->gslot[i] < 0) continue;
            uint64_t at0 = own + (uint64_t)s->gslot[i] * s->slot_elems;
            for (size_t t = b->t0; t < b->t1; t++)
                s->goff[t] = at0 + (s->tensors[t].offset - b->off);
        }
        s->n_grads = own + 2 * s->slot_elems;
    }
    return IG_OK;
}

/* ---- the store's life ------------------------------------------------------------------------ */

ig_status ig_store_plan(ig_store **out, ig_ctx *ctx, ig_model_tensor *tensors, size_t n,
                        const ig_part *p, size_t act_size, ig_err *err) {
    *out = NULL;
    ig_store *s = ig_calloc(ctx, 1, sizeof *s);
    if (!s) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    s->ctx = ctx;
    s->as = act_size;
    s->tensors = tensors;
    s->n_tensors = n;
    s->part = *p;
    ig_status st = plan_buckets(s, err);
    if (st != IG_OK) {
        ig_store_free(s);
        return st;
    }
    /* a part opened for inference is never updated: no gradients, and no fp32 master weights
     * beside bf16 parameters (a frozen T5-XXL in bf16 takes 9.5 GB, not 9.5 + 19) */
    if (s->part.inference) s->n_grads = 0, s->master_elems = 0;
    *out = s;
    return IG_OK;
}

ig_status ig_store_alloc(ig_store *s, ig_backend *be, ig_err *err) {
    s->be = be;
    s->param_at = ig_calloc(s->ctx, s->n_tensors ? s->n_tensors : 1, sizeof *s->param_at);
    if (!s->param_at) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    struct {
        void **p;
        uint64_t bytes;
        const char *what;
    } bufs[] = {
        {(void **)&s->master, s->as == sizeof(float) ? 0 : s->master_elems * sizeof(float),
         "fp32 master weights"},
        {&s->params, s->params_elems * s->as, "parameters"},
        {&s->grads, s->n_grads * s->as, "gradients"},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (!bufs[i].bytes) continue;
        ig_status st = ig_backend_alloc(be, (size_t)bufs[i].bytes, bufs[i].p, err);
        if (st != IG_OK)
            return ig_err_prefix(err, st, "the model's %s (%.1f MB)", bufs[i].what,
                                 (double)bufs[i].bytes / 1e6);
    }
    point_params(s);
    return IG_OK;
}

void ig_store_free(ig_store *s) {
    if (!s) return;
    ig_store_params_changed(s, NULL); /* no all-gather left in flight */
    void *bufs[] = {s->params, s->grads, s->master};
    for (size_t i = 0; s->be && i < sizeof bufs / sizeof bufs[0]; i++)
        ig_backend_release(s->be, bufs[i]);
    ig_free(s->ctx, s->buckets);
    ig_free(s->ctx, s->goff);
    ig_free(s->ctx, s->gslot);
    ig_free(s->ctx, s->layer_bucket);
    ig_free(s->ctx, s->param_at);
    ig_free(s->ctx, s);
}

void ig_store_sizes_of(const ig_store *s, ig_store_sizes *out) {
    *out = (ig_store_sizes){.flat = s->n_params,
                            .params = s->params_elems,
                            .master = s->as == sizeof(float) ? 0 : s->master_elems,
                            .grads = s->n_grads,
                            .moments = s->n_moments};
}

int ig_store_zero(const ig_store *s) {
    return s->part.zero;
}

int ig_store_zero3(const ig_store *s) {
    return s->zero3;
}

int ig_store_pieces_only(const ig_store *s) {
    return s->zero3 || (s->master_pieces && s->as != sizeof(float) && s->master_elems > 0);
}

size_t ig_store_n_buckets(const ig_store *s) {
    return s->n_buckets;
}

const ig_bucket *ig_store_bucket(const ig_store *s, size_t b) {
    return &s->buckets[b];
}

void *ig_store_param(const ig_store *s, size_t t) {
    return s->param_at[t];
}

void *ig_store_grad(const ig_store *s, size_t t) {
    return (char *)s->grads + s->goff[t] * s->as;
}

void *ig_store_params_at(const ig_store *s, uint64_t e) {
    return (char *)s->params + e * s->as;
}

void *ig_store_grads_at(const ig_store *s, uint64_t e) {
    return (char *)s->grads + e * s->as;
}

float *ig_store_master_at(const ig_store *s, uint64_t e) {
    return s->master ? s->master + e : NULL;
}

void *ig_store_param_piece(const ig_store *s, const ig_bucket *b) {
    return (char *)s->params + b->poff * s->as;
}

float *ig_store_master_piece(const ig_store *s, const ig_bucket *b) {
    return s->master ? s->master + (s->master_pieces ? b->moff : b->poff) : NULL;
}

int ig_store_grad_region(const ig_store *s, size_t b) {
    return s->gslot[b];
}

uint64_t ig_store_slot_elems(const ig_store *s) {
    return s->slot_elems;
}

double ig_store_take_gather_wait(ig_store *s) {
    double w = s->gather_wait_s;
    s->gather_wait_s = 0;
    return w;
}

/* ---- host copies ---------------------------------------------------------------------------- */

static ig_status grads_sharded(ig_err *err) {
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "the gradients are sharded (ZeRO-2): no copy of them is kept whole");
}

ig_status ig_store_read(ig_store *s, ig_model_buffer which, float *out, ig_err *err) {
    uint64_t n = s->n_params;
    switch (which) {
    case IG_MODEL_PARAMS: /* the master weights when there are (bf16 parameters round them) */
        if (s->zero3)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "the parameters are sharded (ZeRO-3): no rank holds them whole");
        if (s->master && s->master_pieces)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "the fp32 master weights are sharded (ZeRO-%d): no rank holds them "
                              "whole",
                              s->part.zero);
        if (s->master) return ig_backend_download(s->be, out, s->master, n * sizeof(float), err);
        return ig_backend_download_f32(s->be, out, s->params, n, err);
    case IG_MODEL_GRADS:
        if (!s->grads) return ig_err_set(err, IG_ERR_INVALID_ARG, "the model has no gradients");
        if (s->n_grads != n) return grads_sharded(err);
        return ig_backend_download_f32(s->be, out, s->grads, n, err);
    }
    return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown model buffer %d", (int)which);
}

ig_status ig_store_write(ig_store *s, ig_model_buffer which, const float *in, ig_err *err) {
    uint64_t n = s->n_params;
    switch (which) {
    case IG_MODEL_PARAMS: {
        /* what this rank keeps: the master weights whole or its pieces, the parameters whole
         * or (ZeRO-3) its pieces of the layers */
        ig_status st = ig_store_params_changed(s, err);
        if (st == IG_OK && s->master)
            st = s->master_pieces ? upload_held(s, HELD_MASTER, in, err)
                                  : ig_backend_upload(s->be, s->master, in, n * sizeof(float), err);
        if (st == IG_OK)
            st = s->zero3 ? upload_held(s, HELD_PARAMS, in, err)
                          : ig_backend_upload_f32(s->be, s->params, in, n, err);
        return st;
    }
    case IG_MODEL_GRADS:
        if (!s->grads) return ig_err_set(err, IG_ERR_INVALID_ARG, "the model has no gradients");
        if (s->n_grads != n) return grads_sharded(err);
        return ig_backend_upload_f32(s->be, s->grads, in, n, err);
    }
    return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown model buffer %d", (int)which);
}

static ig_status sum_squares_run(ig_store *s, size_t t, uint64_t a, uint64_t n, void *at,
                                 void *user, ig_err *err) {
    (void)t, (void)a, (void)err;
    *(double *)user += ig_kernel_sum_squares(s->be, at, (size_t)n);
    return IG_OK;
}

double ig_store_sum_squares(ig_store *s, size_t t) {
    double ss = 0;
    held_runs(s, t, HELD_PARAMS, sum_squares_run, &ss, NULL);
    return ss;
}

double ig_store_grad_sum_squares(ig_store *s) {
    return ig_kernel_sum_squares(s->be, s->grads, s->n_grads);
}

ig_status ig_store_zero_grads(ig_store *s, ig_err *err) {
    if (s->part.inference)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "a model opened for inference has no gradients");
    return ig_backend_zero(s->be, s->grads, s->n_grads * s->as, err);
}
