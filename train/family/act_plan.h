/* act_plan.h - private to train/, for the families: the activation planner. A family's plan
 * places each activation of a micro-batch (per slot, kept from the forward to the backward) or of
 * a layer (kept, or in the scratch region a recomputation reuses, as train.recompute says), and
 * its passes reach a place through ig_model_at.
 */
#ifndef INGOT_TRAIN_ACT_PLAN_H
#define INGOT_TRAIN_ACT_PLAN_H

#include "model/model.h"

/* A plan gives each activation of a layer a place: an offset within the slot (kept from the
 * forward to the backward), or, tagged IG_ACT_SCRATCH, an offset within the scratch the slots
 * share, in a region of one layer's worth that every layer reuses (what the backward recomputes
 * under train.recompute; ig_part.recompute). Which one depends on the activation's kind:
 *   IG_ACT_BOUNDARY  a layer's output, the next layer's input: always kept
 *   IG_ACT_LAYER     anything else a layer computes (GEMM outputs, norms, statistics): kept
 *                    unless full, which runs the layer's forward again from its kept input
 *   IG_ACT_CORE      the attention core's output and its log-sum-exp: kept only with none
 *                    (selective recomputes them from the kept q|k|v, Korthikanti et al. 2022)
 * Every offset, kept or not, is a multiple of IG_ACT_ALIGN elements (256 bytes of bf16), so that
 * every act-typed buffer is 256-byte aligned whatever the mode: cuBLASLt picks its algorithm by
 * the operands' alignment (cuda_matmul.cu), and a GEMM must pick the same one in every mode for
 * the modes to give the same bits. */
#define IG_ACT_SCRATCH ((uint64_t)1 << 63)
#define IG_ACT_ALIGN   128

typedef enum ig_act_kind { IG_ACT_BOUNDARY = 0, IG_ACT_LAYER, IG_ACT_CORE } ig_act_kind;

/* A plan being laid out: the slot's elements so far (act type, fp32), and the recomputed region's
 * for the layer being laid out, and its largest over the layers. */
typedef struct ig_act_plan {
    int recompute; /* ig_recompute */
    uint64_t act, f32;
    uint64_t layer_act, layer_f32;
    uint64_t region_act, region_f32;
} ig_act_plan;

/* n elements at *at (rounded up to IG_ACT_ALIGN); returns where they start. */
static inline uint64_t ig_act_take(uint64_t *at, uint64_t n) {
    uint64_t o = *at;
    *at += (n + IG_ACT_ALIGN - 1) / IG_ACT_ALIGN * IG_ACT_ALIGN;
    return o;
}
/* whether an activation of kind k is kept per slot under recompute r */
static inline int ig_act_kept(int r, ig_act_kind k) {
    return k == IG_ACT_BOUNDARY || r == IG_RECOMPUTE_NONE ||
           (r == IG_RECOMPUTE_SELECTIVE && k == IG_ACT_LAYER);
}
/* The place of a layer's activation of n act elements (fp32: ig_act_place_f32) of kind k. */
static inline uint64_t ig_act_place(ig_act_plan *pl, ig_act_kind k, uint64_t n) {
    if (ig_act_kept(pl->recompute, k)) return ig_act_take(&pl->act, n);
    uint64_t o = ig_act_take(&pl->layer_act, n);
    if (pl->layer_act > pl->region_act) pl->region_act = pl->layer_act;
    return o | IG_ACT_SCRATCH;
}
static inline uint64_t ig_act_place_f32(ig_act_plan *pl, ig_act_kind k, uint64_t n) {
    if (ig_act_kept(pl->recompute, k)) return ig_act_take(&pl->f32, n);
    uint64_t o = ig_act_take(&pl->layer_f32, n);
    if (pl->layer_f32 > pl->region_f32) pl->region_f32 = pl->layer_f32;
    return o | IG_ACT_SCRATCH;
}
/* The next layer's recomputed activations start over at the region's start. */
static inline void ig_act_next_layer(ig_act_plan *pl) {
    pl->layer_act = pl->layer_f32 = 0;
}
/* The backend pointer of a place: the slot's (m->slot) or the scratch's. */
static inline void *ig_model_at(const ig_model *m, uint64_t place) {
    return place & IG_ACT_SCRATCH ? ig_model_scratch(m, place & ~IG_ACT_SCRATCH)
                                  : ig_model_act(m, place);
}
static inline float *ig_model_at_f32(const ig_model *m, uint64_t place) {
    return place & IG_ACT_SCRATCH ? ig_model_scratch_f32(m, place & ~IG_ACT_SCRATCH)
                                  : ig_model_f32(m, place);
}

#endif
