/* optimizer.c - what happens to the gradients after the backward, for a model of any family:
 * reduction over the data-parallel replicas in buckets started while the backward still runs, the
 * tied tensors' sum between the first and the last pipeline stage, the sequence-parallel norm
 * gradients' sum over the tensor-parallel group, the global gradient norm, and AdamW with its
 * moments - on the whole buffers, or with ZeRO on this rank's 1/dp piece of each bucket followed
 * by an all-gather of the parameters.
 *
 * Buckets (store.c) are runs of whole tensors in the order the backward finishes them, each
 * padded to a multiple of dp; rank r of the dp group owns piece r (n / dp elements) of every
 * bucket. With zero 0 every rank all-reduces and updates everything; zero 1 all-reduces and
 * updates its pieces (moments, and the fp32 master weights of bf16 parameters, for the pieces
 * only: store.c keeps them so), then all-gathers the parameters' pieces. With zero 2 the gradients
 * are sharded too: the backward of every micro-batch writes a bucket's gradients into one of two
 * working slots (store.c), and as soon as the bucket is done they are reduce-scattered and added to
 * this rank's pieces (a buffer of n_moments elements), and the slot is cleared for the bucket after
 * next - so a rank holds 1/dp of the gradients plus two buckets (and the tied embedding, which
 * the head starts early), at the price of a reduce-scatter per micro-batch rather than one
 * all-reduce per step (DeepSpeed's ZeRO-2 makes the same trade).
 *
 * The gradient norm counts each element of the global model once: every rank its pieces (the
 * reduced gradients are the same on every replica), of those only the tensors split by tensor
 * parallelism or, for a replicated one, on tensor-parallel rank 0, and a tied tensor on the first
 * stage; the sums of squares are then added over the world.
 */
#include "optimizer.h"

#include <math.h>
#include <string.h>

struct ig_optimizer {
    ig_model *m;
    ig_layout *lo;
    ig_layout own; /* the layout of one process (ig_optimizer_create) */
    ig_ctx *ctx;
    float *adam_m, *adam_v; /* [n_moments] on the model's backend */
    float *ema;             /* [n_moments] the weights' moving average, or NULL */
    double ema_decay;       /* as configured (the kernel takes it as a float) */
    void *gshard;           /* zero 2: this rank's reduced gradient pieces [n_moments] (act type) */
    ig_comm_req **reqs;     /* per bucket: the reduction in flight */
    size_t *bucket_of;      /* per tensor: its bucket */
    size_t *pending;        /* per bucket: tensors not yet final in this backward */
    int *launched;          /* per bucket */
    int final;              /* this backward is the step's last on this rank */
    /* zero 2: per working region (0: the tied embedding's, 1 and 2: the slots) the bucket whose
     * reduce-scatter is in flight from it (-1: none) into piece[region] */
    long inflight[3];
    void *piece[3];
    double wait_s; /* seconds spent waiting for reductions after the backward */
    ig_sched_hooks hooks;
};

static void *at(const ig_model *m, void *base, uint64_t elems) {
    return (char *)base + elems * m->as;
}

/* The elements of the model's store (its flat layout, gradients, moments). */
static ig_store_sizes sizes_of(const ig_model *m) {
    ig_store_sizes z;
    ig_store_sizes_of(m->st, &z);
    return z;
}

static int sharded_grads(const ig_optim *o) {
    return o->gshard != NULL;
}

static ig_status backward_begin(void *user, int last, ig_err *err);
static ig_status ready_fn(void *user, size_t t0, size_t t1, ig_err *err);

/* ZeRO-2: the elements of the pieces the reductions in flight land in (optimizer.c's regions: the
 * tied embedding's, then the two working slots'). */
static void zero2_pieces(const ig_model *m, uint64_t sizes[3]) {
    uint64_t dp = (uint64_t)m->part.dp, tied = 0;
    for (size_t b = 0; b < ig_store_n_buckets(m->st); b++)
        if (ig_store_grad_region(m->st, b) < 0 && ig_store_bucket(m->st, b)->n > tied)
            tied = ig_store_bucket(m->st, b)->n;
    sizes[0] = tied / dp;
    sizes[1] = sizes[2] = ig_store_slot_elems(m->st) / dp;
}

void ig_optim_estimate(const ig_model *m, int ema, ig_part_memory *mem) {
    mem->optim += (uint64_t)(ema ? 3 : 2) * sizes_of(m).moments * sizeof(float);
    if (sizes_of(m).grads == sizes_of(m).flat) return;
    uint64_t sizes[3];
    zero2_pieces(m, sizes);
    mem->grads += (sizes_of(m).moments + sizes[0] + sizes[1] + sizes[2]) * m->as;
}

ig_status ig_optim_create(ig_optim **out, ig_ctx *ctx, ig_model *m, ig_layout *lo, ig_err *err) {
    *out = NULL;
    ig_optim *o = ig_calloc(ctx, 1, sizeof *o);
    if (!o) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    o->m = m, o->ctx = ctx;
    ig_status st = IG_OK;
    if (!lo) { /* one process: a layout of its own */
        if ((st = ig_layout_single(&o->own, ctx, m->cfg.n_layer, err)) != IG_OK) {
            ig_free(ctx, o);
            return st;
        }
        lo = &o->own;
    }
    o->lo = lo;
    o->hooks = (ig_sched_hooks){backward_begin, ready_fn, o};
    for (int r = 0; r < 3; r++) o->inflight[r] = -1;
    size_t nb = ig_store_n_buckets(m->st);
    o->reqs = ig_calloc(ctx, nb ? nb : 1, sizeof *o->reqs);
    o->pending = ig_calloc(ctx, nb ? nb : 1, sizeof *o->pending);
    o->launched = ig_calloc(ctx, nb ? nb : 1, sizeof *o->launched);
    o->bucket_of = ig_calloc(ctx, m->n_tensors ? m->n_tensors : 1, sizeof *o->bucket_of);
    if (!o->reqs || !o->pending || !o->launched || !o->bucket_of) {
        ig_optim_free(o);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    for (size_t b = 0; b < nb; b++)
        for (size_t t = ig_store_bucket(m->st, b)->t0; t < ig_store_bucket(m->st, b)->t1; t++)
            o->bucket_of[t] = b;
    /* the moments: the whole buffer, or this rank's ZeRO pieces */
    size_t mb = (size_t)(sizes_of(m).moments * sizeof(float));
    st = ig_backend_alloc(m->be, mb, (void **)&o->adam_m, err);
    if (st == IG_OK) st = ig_backend_alloc(m->be, mb, (void **)&o->adam_v, err);
    if (st != IG_OK) ig_err_prefix(err, st, "the AdamW moments (2 x %.1f MB)", (double)mb / 1e6);
    if (st == IG_OK && sizes_of(m).grads != sizes_of(m).flat) { /* ZeRO-2 (store.c sharded them) */
        uint64_t sizes[3];
        zero2_pieces(m, sizes);
        st = ig_backend_alloc(m->be, (size_t)(sizes_of(m).moments * m->as), &o->gshard, err);
        for (int r = 0; r < 3 && st == IG_OK; r++)
            if (sizes[r])
                st = ig_backend_alloc(m->be, (size_t)(sizes[r] * m->as), &o->piece[r], err);
    }
    if (st != IG_OK) {
        ig_optim_free(o);
        return st;
    }
    *out = o;
    return IG_OK;
}

void ig_optim_free(ig_optim *o) {
    if (!o) return;
    if (o->reqs)
        for (size_t b = 0; b < ig_store_n_buckets(o->m->st); b++) {
            ig_err ignored;
            ig_comm_wait(o->reqs[b], &ignored);
        }
    ig_backend_release(o->m->be, o->gshard);
    ig_backend_release(o->m->be, o->adam_m);
    ig_backend_release(o->m->be, o->adam_v);
    ig_backend_release(o->m->be, o->ema);
    for (int r = 0; r < 3; r++) ig_backend_release(o->m->be, o->piece[r]);
    if (o->lo == &o->own) ig_layout_free(&o->own);
    ig_free(o->ctx, o->reqs);
    ig_free(o->ctx, o->pending);
    ig_free(o->ctx, o->launched);
    ig_free(o->ctx, o->bucket_of);
    ig_free(o->ctx, o);
}

const ig_sched_hooks *ig_optim_hooks(ig_optim *o) {
    return &o->hooks;
}

static void reset_pending(ig_optim *o) {
    for (size_t b = 0; b < ig_store_n_buckets(o->m->st); b++) {
        o->pending[b] = ig_store_bucket(o->m->st, b)->t1 - ig_store_bucket(o->m->st, b)->t0;
        o->launched[b] = 0;
    }
}

ig_status ig_optim_begin(ig_optim *o, ig_err *err) {
    reset_pending(o);
    o->final = 0;
    o->wait_s = 0;
    ig_status st = ig_model_zero_grads(o->m, err);
    if (st == IG_OK && o->gshard)
        st = ig_backend_zero(o->m->be, o->gshard, (size_t)(sizes_of(o->m).moments * o->m->as), err);
    return st;
}

/* The sequence-parallel LayerNorm gradients of bucket b: each tensor-parallel rank has those of
 * its rows; summed over the group, so that every rank holds the whole. */
static ig_status sum_tp_partials(ig_optim *o, const ig_bucket *b, ig_err *err) {
    ig_model *m = o->m;
    for (size_t t = b->t0; t < b->t1; t++) {
        const ig_model_tensor *x = &m->tensors[t];
        if (!x->tp_partial) continue;
        ig_status st = ig_group_allreduce(&o->lo->tp_g, ig_store_grad(m->st, t), (size_t)x->numel,
                                          ig_model_comm_type(m), IG_COMM_SUM, err);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}

/* zero 2: the working region of bucket b (0: the embedding's, 1 and 2: the slots) */
static int region_of(const ig_optim *o, size_t b) {
    return ig_store_grad_region(o->m->st, b) + 1;
}

/* zero 2: waits for the reduce-scatter in flight from region r, adds its piece into this rank's
 * gradient pieces and clears the region for its next bucket. */
static ig_status settle(ig_optim *o, int r, ig_err *err) {
    if (o->inflight[r] < 0) return IG_OK;
    ig_model *m = o->m;
    size_t bi = (size_t)o->inflight[r];
    const ig_bucket *b = ig_store_bucket(m->st, bi);
    double t0 = ig_now();
    ig_status st = ig_comm_wait(o->reqs[bi], err);
    o->wait_s += ig_now() - t0;
    o->reqs[bi] = NULL;
    o->inflight[r] = -1;
    if (st != IG_OK) return st;
    uint64_t s = b->n / (uint64_t)o->lo->dp_g.size;
    ig_kernel_add(m->be, at(m, o->gshard, b->moff), at(m, o->gshard, b->moff), o->piece[r],
                  (size_t)s);
    return ig_backend_zero(m->be, ig_store_grad(m->st, b->t0), (size_t)(b->n * m->as), err);
}

/* Starts bucket b's reduction over the dp group. */
static ig_status launch(ig_optim *o, size_t bi, ig_err *err) {
    ig_model *m = o->m;
    ig_layout *lo = o->lo;
    const ig_bucket *b = ig_store_bucket(m->st, bi);
    o->launched[bi] = 1;
    ig_status st = ig_backend_sync(m->be, err);
    if (st == IG_OK && lo->sp) st = sum_tp_partials(o, b, err);
    if (st != IG_OK || lo->dp_g.size == 1) return st;
    void *g = ig_store_grad(m->st, b->t0);
    uint64_t s = b->n / (uint64_t)lo->dp_g.size;
    if (sharded_grads(o)) {
        int r = region_of(o, bi);
        if (o->inflight[r] >= 0) /* settled when the other slot's bucket started (below) */
            return ig_err_set(err, IG_ERR_INTERNAL, "ZeRO-2: bucket %zu's slot is still busy", bi);
        st = ig_group_ireduce_scatter(&lo->dp_g, g, o->piece[r], (size_t)s, ig_model_comm_type(m),
                                      &o->reqs[bi], err);
        o->inflight[r] = (long)bi;
        /* the backward goes on into the other slot: the bucket reduced from it lands first */
        if (st == IG_OK && r > 0) st = settle(o, 3 - r, err);
        return st;
    }
    st = ig_group_iallreduce(&lo->dp_g, g, (size_t)b->n, ig_model_comm_type(m), &o->reqs[bi], err);
    /* drive the reductions already under way (MPI progresses inside its calls) */
    for (size_t k = 0; st == IG_OK && k < bi; k++)
        if (o->reqs[k]) {
            int done = 0;
            st = ig_comm_test(o->reqs[k], &done, err);
        }
    return st;
}

static ig_status ready_fn(void *user, size_t t0, size_t t1, ig_err *err) {
    ig_optim *o = user;
    if (!o->final && !sharded_grads(o)) return IG_OK; /* reduced once, after the last backward */
    for (size_t t = t0; t < t1; t++) {
        size_t b = o->bucket_of[t];
        if (o->pending[b] > 0 && --o->pending[b] == 0) {
            ig_status st = launch(o, b, err);
            if (st != IG_OK) return st;
        }
    }
    return IG_OK;
}

static ig_status backward_begin(void *user, int last, ig_err *err) {
    ig_optim *o = user;
    ig_status st = IG_OK;
    /* zero 2: the previous backward's reductions land before this one writes the regions */
    for (int r = 0; r < 3 && st == IG_OK; r++) st = settle(o, r, err);
    reset_pending(o);
    o->final = last;
    return st;
}

ig_status ig_optim_reduce(ig_optim *o, ig_err *err) {
    ig_model *m = o->m;
    ig_layout *lo = o->lo;
    ig_status st = IG_OK;
    /* buckets the backward did not announce (no hooks): started now */
    if (!sharded_grads(o))
        for (size_t b = 0; st == IG_OK && b < ig_store_n_buckets(m->st); b++)
            if (!o->launched[b]) st = launch(o, b, err);
    double t0 = ig_now();
    for (int r = 0; r < 3 && st == IG_OK; r++) st = settle(o, r, err);
    for (size_t b = 0; b < ig_store_n_buckets(m->st); b++) {
        ig_status w = ig_comm_wait(o->reqs[b], err);
        o->reqs[b] = NULL;
        if (st == IG_OK) st = w;
    }
    o->wait_s += ig_now() - t0;
    if (st != IG_OK || lo->pp == 1) return st;
    /* a tied tensor (the embedding): the first stage's gradient (the input embedding) plus the
     * last's (the output layer), on both */
    for (size_t bi = 0; st == IG_OK && bi < ig_store_n_buckets(m->st); bi++) {
        const ig_bucket *b = ig_store_bucket(m->st, bi);
        if (!b->tied) continue;
        if (sharded_grads(o))
            st = ig_group_allreduce(&lo->emb_g, at(m, o->gshard, b->moff),
                                    (size_t)(b->n / (uint64_t)lo->dp_g.size), ig_model_comm_type(m),
                                    IG_COMM_SUM, err);
        else
            st = ig_group_allreduce(&lo->emb_g, ig_store_grads_at(m->st, b->off), (size_t)b->n,
                                    ig_model_comm_type(m), IG_COMM_SUM, err);
    }
    return st;
}

uint64_t ig_optim_extra_bytes(const ig_optim *o) {
    if (!o->gshard) return 0;
    uint64_t sizes[3];
    zero2_pieces(o->m, sizes);
    return (sizes_of(o->m).moments + sizes[0] + sizes[1] + sizes[2]) * o->m->as;
}

double ig_optim_wait_seconds(const ig_optim *o) {
    return o->wait_s;
}

/* This rank's piece of bucket b: elements [lo, hi) of the flat buffers. */
static void piece(const ig_optim *o, const ig_bucket *b, uint64_t *lo, uint64_t *hi) {
    uint64_t s = b->n / (uint64_t)o->lo->dp_g.size;
    *lo = b->off + s * (uint64_t)o->lo->dp_g.rank;
    *hi = *lo + s;
}

/* Where the reduced gradient of flat element e (in bucket b, in this rank's piece) is. */
static void *reduced_grad(const ig_optim *o, const ig_bucket *b, uint64_t e) {
    ig_model *m = o->m;
    if (o->gshard) {
        uint64_t lo, hi;
        piece(o, b, &lo, &hi);
        return at(m, o->gshard, b->moff + (e - lo));
    }
    return ig_store_grads_at(m->st, e);
}

static int counted_in_norm(const ig_optim *o, size_t t) {
    const ig_model *m = o->m;
    const ig_model_tensor *x = &m->tensors[t];
    if (x->parts == 1 && o->lo->tp_rank != 0) return 0; /* tp rank 0 counts replicated ones */
    if (x->place == IG_PLACE_TIED && !m->part.first) return 0; /* the first stage counts it */
    return 1;
}

ig_status ig_optim_norm(ig_optim *o, double *norm, ig_err *err) {
    ig_model *m = o->m;
    double ss = 0;
    for (size_t bi = 0; bi < ig_store_n_buckets(m->st); bi++) {
        const ig_bucket *b = ig_store_bucket(m->st, bi);
        uint64_t lo, hi;
        piece(o, b, &lo, &hi);
        for (size_t t = b->t0; t < b->t1; t++) {
            const ig_model_tensor *x = &m->tensors[t];
            uint64_t a = x->offset > lo ? x->offset : lo;
            uint64_t e = x->offset + x->numel < hi ? x->offset + x->numel : hi;
            if (a >= e || !counted_in_norm(o, t)) continue;
            ss += ig_kernel_sum_squares(m->be, reduced_grad(o, b, a), (size_t)(e - a));
        }
    }
    ig_status st = ig_backend_sync(m->be, err);
    if (st == IG_OK)
        st = ig_group_allreduce(&o->lo->world_g, &ss, 1, IG_COMM_F64, IG_COMM_SUM, err);
    *norm = sqrt(ss);
    return st;
}

/* AdamW over the whole buffers (no ZeRO): runs of consecutive tensors with the same decay,
 * adjacent in memory, go as one call. */
static ig_status adamw_whole(ig_optim *o, int step, const ig_adamw_hparams *h, float grad_scale,
                             ig_err *err) {
    ig_model *m = o->m;
    size_t i = 0;
    while (i < m->n_tensors) {
        size_t j = i;
        while (j + 1 < m->n_tensors && m->tensors[j + 1].decay == m->tensors[i].decay &&
               m->tensors[j + 1].offset == m->tensors[j].offset + m->tensors[j].numel)
            j++;
        uint64_t off = m->tensors[i].offset;
        uint64_t n = m->tensors[j].offset + m->tensors[j].numel - off;
        ig_kernel_adamw(m->be, ig_store_params_at(m->st, off), ig_store_master_at(m->st, off),
                        ig_store_grads_at(m->st, off), o->adam_m + off, o->adam_v + off, (size_t)n,
                        h->lr, h->beta1, h->beta2, h->eps,
                        m->tensors[i].decay ? h->weight_decay : 0.0f, grad_scale, step);
        i = j + 1;
    }
    return ig_backend_sync(m->be, err);
}

/* The EMA of this rank's weights (the whole buffer, or its pieces) moved toward them by decay (0:
 * set to them). */
static ig_status ema_update(ig_optim *o, float decay, ig_err *err) {
    ig_model *m = o->m;
    if (!o->ema) return IG_OK;
    ig_store_sizes z = sizes_of(m);
    if (z.moments == z.flat) {
        ig_kernel_ema(m->be, o->ema, ig_store_master_at(m->st, 0), ig_store_params_at(m->st, 0),
                      (size_t)z.flat, decay);
    } else {
        for (size_t bi = 0; bi < ig_store_n_buckets(m->st); bi++) {
            const ig_bucket *b = ig_store_bucket(m->st, bi);
            uint64_t plo, phi;
            piece(o, b, &plo, &phi);
            ig_kernel_ema(m->be, o->ema + b->moff, ig_store_master_piece(m->st, b),
                          ig_store_param_piece(m->st, b), (size_t)(phi - plo), decay);
        }
    }
    return ig_backend_sync(m->be, err);
}

ig_status ig_optim_ema_enable(ig_optim *o, double decay, ig_err *err) {
    if (!(decay > 0 && decay < 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "ema.decay %g: need 0 < decay < 1", decay);
    size_t mb = (size_t)(sizes_of(o->m).moments * sizeof(float));
    ig_status st = o->ema ? IG_OK : ig_backend_alloc(o->m->be, mb, (void **)&o->ema, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "the EMA of the weights (%.1f MB)", mb / 1e6);
    o->ema_decay = decay;
    return ema_update(o, 0.0f, err);
}

ig_status ig_optim_ema_reset(ig_optim *o, ig_err *err) {
    return ema_update(o, 0.0f, err);
}

double ig_optim_ema_decay(const ig_optim *o) {
    return o->ema ? o->ema_decay : 0.0;
}

int ig_optim_states(const ig_optim *o) {
    return o->ema ? 3 : 2;
}

static ig_status adamw_pieces(ig_optim *o, int step, const ig_adamw_hparams *h, float grad_scale,
                              ig_err *err);

ig_status ig_optim_step(ig_optim *o, int step, const ig_adamw_hparams *h, float grad_scale,
                        ig_err *err) {
    ig_layout *lo = o->lo;
    if (step < 1) return ig_err_set(err, IG_ERR_INVALID_ARG, "AdamW step %d: must be >= 1", step);
    ig_status st = ig_store_zero(o->m->st) == 0 || lo->dp_g.size == 1
                       ? adamw_whole(o, step, h, grad_scale, err)
                       : adamw_pieces(o, step, h, grad_scale, err);
    return st == IG_OK ? ema_update(o, (float)o->ema_decay, err) : st;
}

/* ZeRO: AdamW on this rank's pieces, then every piece back to every replica (ZeRO-3: of the
 * buckets kept whole). */
static ig_status adamw_pieces(ig_optim *o, int step, const ig_adamw_hparams *h, float grad_scale,
                              ig_err *err) {
    ig_model *m = o->m;
    ig_layout *lo = o->lo;
    /* ZeRO: AdamW on this rank's pieces, whose moments sit at the bucket's moff */
    for (size_t bi = 0; bi < ig_store_n_buckets(m->st); bi++) {
        const ig_bucket *b = ig_store_bucket(m->st, bi);
        uint64_t plo, phi;
        piece(o, b, &plo, &phi);
        for (size_t t = b->t0; t < b->t1; t++) {
            const ig_model_tensor *x = &m->tensors[t];
            uint64_t a = x->offset > plo ? x->offset : plo;
            uint64_t e = x->offset + x->numel < phi ? x->offset + x->numel : phi;
            if (a >= e) continue;
            uint64_t mo = b->moff + (a - plo);
            float *master = ig_store_master_piece(m->st, b);
            ig_kernel_adamw(m->be, at(m, ig_store_param_piece(m->st, b), a - plo),
                            master ? master + (a - plo) : NULL, reduced_grad(o, b, a),
                            o->adam_m + mo, o->adam_v + mo, (size_t)(e - a), h->lr, h->beta1,
                            h->beta2, h->eps, x->decay ? h->weight_decay : 0.0f, grad_scale, step);
        }
    }
    ig_status st = ig_backend_sync(m->be, err);
    /* every piece back to every replica: the buckets kept whole (with ZeRO-3 the first and the
     * last stage's; the layers' are gathered when they are used) */
    if (st == IG_OK) st = ig_store_params_changed(m->st, err);
    for (size_t bi = 0; st == IG_OK && bi < ig_store_n_buckets(m->st); bi++) {
        const ig_bucket *b = ig_store_bucket(m->st, bi);
        uint64_t plo, phi;
        piece(o, b, &plo, &phi);
        if (b->whole == UINT64_MAX) continue;
        st = ig_group_iallgather(&lo->dp_g, ig_store_param_piece(m->st, b),
                                 ig_store_params_at(m->st, b->whole), (size_t)(phi - plo),
                                 ig_model_comm_type(m), &o->reqs[bi], err);
    }
    for (size_t bi = 0; bi < ig_store_n_buckets(m->st); bi++) {
        ig_status w = ig_comm_wait(o->reqs[bi], err);
        o->reqs[bi] = NULL;
        if (st == IG_OK) st = w;
    }
    return st;
}

uint64_t ig_optim_moment_elems(const ig_optim *o) {
    return sizes_of(o->m).moments;
}

const ig_layout *ig_optim_layout(const ig_optim *o) {
    return o->lo;
}

static float *state_of(ig_optim *o, int which) {
    return which == IG_OPTIM_EMA ? o->ema : which == IG_MOMENT_EXP_AVG_SQ ? o->adam_v : o->adam_m;
}

ig_status ig_optim_read_pieces(ig_optim *o, int which, float *out, ig_err *err) {
    float *src = state_of(o, which);
    if (!src) return ig_err_set(err, IG_ERR_INVALID_ARG, "no EMA of the weights is kept");
    return ig_backend_download(o->m->be, out, src, (size_t)(sizes_of(o->m).moments * sizeof(float)),
                               err);
}

ig_status ig_optim_write_pieces(ig_optim *o, int which, const float *in, ig_err *err) {
    float *dst = state_of(o, which);
    if (!dst) return ig_err_set(err, IG_ERR_INVALID_ARG, "no EMA of the weights is kept");
    return ig_backend_upload(o->m->be, dst, in, (size_t)(sizes_of(o->m).moments * sizeof(float)),
                             err);
}

/* ---- the optimizer of one process (train.h) ------------------------------------------------- */

ig_status ig_optimizer_create(ig_optimizer **out, ig_ctx *ctx, ig_model *m, ig_err *err) {
    if (!(m->part.first && m->part.last && m->part.tp == 1 && m->part.dp <= 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a model part is optimized by the trainer's layout, not alone");
    return ig_optim_create(out, ctx, m, NULL, err);
}

void ig_optimizer_free(ig_optimizer *o) {
    ig_optim_free(o);
}

ig_status ig_optimizer_step(ig_optimizer *o, int step, const ig_adamw_hparams *h, float grad_scale,
                            ig_err *err) {
    return ig_optim_step(o, step, h, grad_scale, err);
}

ig_status ig_optimizer_read(ig_optimizer *o, ig_moment which, float *out, ig_err *err) {
    return ig_optim_read_pieces(o, which, out, err);
}

ig_status ig_optimizer_write(ig_optimizer *o, ig_moment which, const float *in, ig_err *err) {
    return ig_optim_write_pieces(o, which, in, err);
}
