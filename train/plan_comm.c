/* plan_comm.c - what one rank sends per step in each group of its layout, counted as parallel.h's
 * ring accounting counts what the code sends (an all-reduce of n bytes over g ranks: 2 (g - 1) /
 * g n; an all-gather or reduce-scatter of n bytes in all: (g - 1) / g n; an all-to-all: the blocks
 * to the g - 1 others; a send: n), call by call, so that log.comm_stats measures these figures
 * (tests/mpi/train_plan.sh). Per micro-batch of B x T (N = B T token rows, C the width, e bytes
 * per act element, t tensor-parallel ranks):
 *
 * tp, a language model (the Megatron-LM layers of tp_layers.c): each layer's two column-then-row-
 * parallel blocks reduce an [N, C] partial sum forward and the blocks' input gradient backward - an
 * all-reduce each, or with sequence parallelism an all-gather before and a reduce-scatter after
 * (the same bytes, halved twice); the first stage's vocabulary-parallel embedding reduces its
 * output (and with sp gathers its gradient back), the last stage's head reduces its input's
 * gradient (with sp: gathers its input) and the cross-entropy all-reduces its row maxima and
 * [sum of exponentials; target logit] in fp32. Full recomputation runs each layer's forward, with
 * its collectives, again in the backward.
 * tp, a diffusion model (clips): the same per block over the rows of the tensor-parallel layers
 * (every row with sp, this Ulysses rank's without), three blocks with a caption's cross-attention,
 * whose input gradient (the caption's embeddings) is all-reduced once per micro-batch; the loss is
 * summed over the group (8 bytes) with sp.
 * sp (Ulysses): per layer, q|k|v to head shards and the output back, and their gradients: 8 x
 * [N / usp, C / t / usp] to each of the usp - 1 others; the loss summed (8 bytes).
 * pp: a stage sends what crosses its boundary (the family's stage io: a language model's residual
 * stream [N (/ t with sp), C]; a DiT's tokens, its conditioning [B, C] and the caption [B, Tk, C])
 * forward, and its gradient back.
 * dp (dp x Ulysses ranks): the gradients' all-reduce after the last backward (ZeRO 0, 1), ZeRO's
 * all-gather of the updated parameters (1, 2), ZeRO-2's reduce-scatter after every backward, and
 * ZeRO-3's gathers of each layer before its forward and its backward (first and last stage
 * tensors kept gathered: all-gathered after the update); the tensors' elements from the table
 * (bucket padding, under dp elements a bucket, left out).
 * emb: the tied embedding's gradient summed between the first and the last stage (its ZeRO-2
 * piece). With sp, the norms' partial gradients are all-reduced over tp before each reduction.
 */
#include "family.h"
#include "plan.h"
#include "schedule.h"
#include "stage.h"

#include <string.h>

static uint64_t ring(int g, uint64_t bytes) {
    return g > 1 ? bytes * (uint64_t)(g - 1) / (uint64_t)g : 0;
}
static uint64_t allreduce(int g, uint64_t bytes) {
    return 2 * ring(g, bytes);
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

/* ZeRO-3's layer gathers in a step on the rank: the stage driver's calls of ig_model_use_layer
 * (ig_stage_layer_order: each layer before its forward and before its backward, the next one
 * named) over the schedule's order of forwards and backwards, the windows chosen as
 * ig_model_use_layer chooses them, from empty (the update empties them). A window that still holds
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

/* Per micro-batch: tp (forward, backward, recomputation), sp and pp bytes of a language model. */
static void tokens_micro(const ig_plan_rank_in *in, const ig_part *p, uint64_t out[3]) {
    uint64_t e = in->act_size, N = (uint64_t)in->B * (uint64_t)in->T, C = in->shape->d_model;
    uint64_t X = N * C * e, nl = (uint64_t)(p->l1 - p->l0);
    int t = p->tp;
    uint64_t tp = 0;
    if (t > 1) {
        uint64_t ce = allreduce(t, N * 4) + allreduce(t, 2 * N * 4); /* fp32 max, then 2 sums */
        if (!p->sp) {
            uint64_t r = allreduce(t, X);
            tp = (p->first ? r : 0) + nl * 2 * r + (p->last ? ce + r : 0) + nl * 2 * r;
            if (in->recompute == IG_RECOMPUTE_FULL) tp += nl * r; /* up to the MLP's output */
        } else {
            uint64_t g = ring(t, X); /* an all-gather or a reduce-scatter of the rows */
            tp = (p->first ? 2 * g : 0) + nl * 8 * g + (p->last ? ce + 2 * g : 0);
            if (in->recompute == IG_RECOMPUTE_FULL) tp += nl * 3 * g; /* gather, scatter, gather */
        }
    }
    uint64_t io = (p->sp ? N / (uint64_t)t : N) * C * e;
    out[0] = tp;
    out[1] = 0;
    out[2] = p->pp > 1 ? ((p->last ? 0 : io) + (p->first ? 0 : io)) : 0;
}

/* The same for a diffusion model over clips. */
static void clips_micro(const ig_plan_rank_in *in, const ig_part *p, uint64_t out[3]) {
    const ig_model_config *c = in->shape;
    uint64_t e = in->act_size, B = (uint64_t)in->B, N = B * (uint64_t)in->T, C = c->d_model;
    int t = p->tp, u = p->usp > 1 ? p->usp : 1;
    uint64_t Nl = p->sp ? N / (uint64_t)t : N / (uint64_t)u, Ng = p->sp ? N : Nl;
    uint64_t Tk = c->cond == IG_COND_CAPTION ? (uint64_t)c->caption_len : 0;
    uint64_t blocks = 2 + (Tk ? 1 : 0), nl = (uint64_t)(p->l1 - p->l0);
    uint64_t tp = 0, sp = 0;
    if (t > 1) {
        uint64_t per = p->sp ? 2 * ring(t, N * C * e) : allreduce(t, Ng * C * e);
        tp = nl * blocks * 2 * per;
        if (in->recompute == IG_RECOMPUTE_FULL) tp += nl * blocks * per;
        if (Tk) tp += allreduce(t, B * Tk * C * e); /* the caption's gradient */
        if (p->last && p->sp) tp += allreduce(t, 8);
    }
    if (u > 1) {
        uint64_t unit = Nl * (C / (uint64_t)t / (uint64_t)u) * e * (uint64_t)(u - 1);
        sp = nl * 8 * unit + (p->last ? allreduce(u, 8) : 0);
        if (in->recompute == IG_RECOMPUTE_FULL) sp += nl * 4 * unit;
        if (in->recompute == IG_RECOMPUTE_SELECTIVE) sp += nl * unit; /* the core's output back */
    }
    uint64_t io = (Nl * C + B * C + B * Tk * C) * e;
    out[0] = tp;
    out[1] = sp;
    out[2] = p->pp > 1 ? ((p->last ? 0 : io) + (p->first ? 0 : io)) : 0;
}

ig_status ig_plan_comm(ig_ctx *ctx, const ig_plan_rank_in *in, const ig_part *p, ig_plan_sent *out,
                       ig_err *err) {
    memset(out, 0, sizeof *out);
    const ig_family *fam = ig_family_of(in->shape->arch);
    table_sums ts;
    ig_status st = sum_table(ctx, fam, in->shape, p, in->act_size, &ts, err);
    if (st != IG_OK) return st;
    uint64_t micro[3], m = (uint64_t)(in->lo->accum > 0 ? in->lo->accum : 1), e = in->act_size;
    if (fam->input == IG_INPUT_CLIPS)
        clips_micro(in, p, micro);
    else
        tokens_micro(in, p, micro);
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
