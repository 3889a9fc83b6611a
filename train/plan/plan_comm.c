/* plan_comm.c - what one rank sends per step in each group of its layout, counted as parallel.h's
 * ring accounting counts what the code sends (an all-reduce of n bytes over g ranks: 2 (g - 1) /
 * g n; an all-gather or reduce-scatter of n bytes in all: (g - 1) / g n; an all-to-all: the blocks
 * to the g - 1 others; a send: n), call by call, so that log.comm_stats measures these figures
 * (tests/mpi/train_plan.sh). What a micro-batch's passes send over tp, Ulysses' sp and pp is the
 * family's to say (family.h's comm_micro: its layers' collectives and what crosses its stage
 * boundary); the step's, from the tensor table and the optimizer:
 * dp (dp x Ulysses ranks): the gradients' all-reduce after the last backward (ZeRO 0, 1), ZeRO's
 * all-gather of the updated parameters (1, 2), ZeRO-2's reduce-scatter after every backward, and
 * ZeRO-3's gathers of each layer before its forward and its backward (first and last stage
 * tensors kept gathered: all-gathered after the update); the tensors' elements from the table
 * (bucket padding, under dp elements a bucket, left out).
 * emb: the tied embedding's gradient summed between the first and the last stage (its ZeRO-2
 * piece). With sp, the norms' partial gradients are all-reduced over tp before each reduction.
 */
#include "family/family.h"
#include "plan.h"
#include "parallel/schedule.h"
#include "parallel/stage.h"

#include <string.h>

/* parallel.h's ring accounting */
static uint64_t ring(int g, uint64_t bytes) {
    return ig_ring_bytes(g, bytes);
}
static uint64_t allreduce(int g, uint64_t bytes) {
    return ig_allreduce_bytes(g, bytes);
}

/* The part's tensors, summed: elements of the layers' and of the others, the tied one's, and the
 * all-reduces of the sequence-parallel partial gradients (bytes). */
typedef struct table_sums {
    uint64_t layer, other, tied, partial_bytes;
} table_sums;

static ig_status sum_table(ig_ctx *ctx, const ig_family *fam, const ig_model_config *c,
                           const ig_part *p, size_t as, table_sums *out, ig_err *err) {
    memset(out, 0, sizeof *out);
    size_t n = fam->tensors(c, p, NULL, 0);
    ig_tensor_spec *specs = ig_calloc(ctx, n ? n : 1, sizeof *specs);
    if (!specs) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    n = fam->tensors(c, p, specs, n);
    for (size_t i = 0; i < n; i++) {
        const ig_tensor_spec *s = &specs[i];
        uint64_t numel = (uint64_t)s->shape[0] * (uint64_t)(s->ndim == 2 ? s->shape[1] : 1);
        if (s->split_dim >= 0) numel /= (uint64_t)p->tp;
        if (s->place == IG_PLACE_LAYER)
            out->layer += numel;
        else
            out->other += numel;
        if (s->place == IG_PLACE_TIED) out->tied += numel;
        if (p->sp && s->sp_partial) out->partial_bytes += allreduce(p->tp, numel * as);
    }
    ig_free(ctx, specs);
    return IG_OK;
}

/* ZeRO-3's layer gathers in a step on the rank: the stage driver's calls of ig_store_use_layer
 * (ig_stage_layer_order: each layer before its forward and before its backward, the next one
 * named) over the schedule's order of forwards and backwards, the windows chosen as
 * ig_store_use_layer chooses them, from empty (the update empties them). A window that still holds
 * a layer saves its gather: a backward right after a forward finds its last two layers, a forward
 * after a backward its first two. Prefetching changes when a gather starts, not how many. */
static uint64_t zero3_gathers(const ig_layout *lo, int l0, int l1, int M) {
    int win[2] = {-1, -1}, last = -1, fetch[2];
    uint64_t n = 0;
    for (int k = 0; k < 2 * M; k++) {
        int fwd = ig_sched_is_forward(lo->pp, lo->pp_rank, M, k);
        for (int i = 0; i < l1 - l0; i++) {
            int l, next;
            ig_stage_layer_order(fwd, l0, l1, i, &l, &next);
            ig_zero3_windows(win, &last, l, next, 1, fetch);
            n += (uint64_t)(fetch[0] >= 0) + (uint64_t)(fetch[1] >= 0);
        }
    }
    return n;
}

ig_status ig_plan_comm(ig_ctx *ctx, const ig_plan_rank_in *in, const ig_part *p, ig_plan_sent *out,
                       ig_err *err) {
    memset(out, 0, sizeof *out);
    const ig_family *fam = ig_family_of(in->shape->arch);
    table_sums ts;
    ig_status st = sum_table(ctx, fam, in->shape, p, in->act_size, &ts, err);
    if (st != IG_OK) return st;
    uint64_t m = (uint64_t)(in->lo->accum > 0 ? in->lo->accum : 1), e = in->act_size;
    ig_comm_micro cm = fam->comm_micro(in->shape, p, in->B, in->T, e, in->recompute);
    uint64_t micro[3] = {cm.tp, cm.sp, cm.pp};
    int d = p->dp, zero = p->zero;
    int sharded = zero >= 2 && d > 1; /* the gradients reduce-scattered after every backward */
    /* the norms' partial gradients, before each launch of their buckets' reduction */
    uint64_t partial = ts.partial_bytes * (sharded ? m : 1);
    out->bytes[IG_PLAN_TP] = m * micro[0] + partial;
    out->bytes[IG_PLAN_SP] = m * micro[1];
    out->bytes[IG_PLAN_PP] = m * micro[2];
    uint64_t W = (ts.layer + ts.other) * e;
    if (d > 1) {
        if (zero <= 1) out->dp_reduce = allreduce(d, W);
        if (zero == 1 || zero == 2) out->dp_gather = ring(d, W);
        if (zero == 2) out->dp_micro = ring(d, W);
        if (zero >= 3) {
            uint64_t nl = (uint64_t)(p->l1 - p->l0), layer = nl ? ts.layer / nl : 0;
            out->dp_micro = ring(d, W);
            out->dp_gather = ring(d, ts.other * e);
            out->dp_layers = zero3_gathers(in->lo, p->l0, p->l1, (int)m) * ring(d, layer * e);
        }
    }
    out->bytes[IG_PLAN_DP] = out->dp_reduce + out->dp_gather + m * out->dp_micro + out->dp_layers;
    if (p->pp > 1 && ts.tied) {
        uint64_t n = (ts.tied + (uint64_t)d - 1) / (uint64_t)d * (uint64_t)d;
        out->bytes[IG_PLAN_EMB] = allreduce(2, (sharded ? n / (uint64_t)d : n) * e);
    }
    return IG_OK;
}
