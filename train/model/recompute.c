/* recompute.c - activation recomputation seen from the public API (train.h): a whole model made
 * with a recompute mode, and the activation memory a model allocated. The plan of what is kept
 * and what is recomputed is each family's (family.h's places; models/FAMILY/), the trainer's
 * parts get the mode through ig_part.recompute.
 */
#include "model.h"

#include <string.h>

ig_status ig_model_create_recompute(ig_model **out, ig_ctx *ctx, ig_backend *be,
                                    const ig_model_config *c, int B, int T, uint64_t seed,
                                    int recompute, ig_err *err) {
    *out = NULL;
    if (recompute < IG_RECOMPUTE_NONE || recompute > IG_RECOMPUTE_FULL)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "recompute %d: need 0 (none), 1 (selective) or 2 (full)", recompute);
    ig_part whole = {.tp = 1,
                     .l0 = 0,
                     .l1 = c->n_layer,
                     .first = 1,
                     .last = 1,
                     .slots = 1,
                     .recompute = recompute};
    return ig_model_create_part(out, ctx, be, c, B, T, seed, &whole, err);
}

void ig_model_act_memory(const ig_model *m, ig_act_memory *out) {
    const ig_act_sizes *a = &m->acts;
    memset(out, 0, sizeof *out);
    out->slot_act = a->act * m->as;
    out->slot_f32 = (a->f32 + a->io_f32) * sizeof(float);
    out->slot_i32 = a->i32 * sizeof(int32_t);
    out->slot = out->slot_act + out->slot_f32 + out->slot_i32;
    out->scratch = a->scratch_act * m->as + a->scratch_f32 * sizeof(float);
}
