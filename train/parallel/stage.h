/* stage.h - private to train/: the stage driver (stage.c), the one place that runs a family's
 * layers over this rank's part of the model for one micro-batch - the embedding on the first
 * stage, the layers in order with ZeRO-3's gathers (ig_store_use_layer, the next layer named for
 * its prefetch), the head and the loss on the last stage; backward in reverse with full
 * recomputation's rerun of each layer, the gradient-ready groups in the order the buckets expect
 * (the head, the layers from the last, the embedding) - calling the family's per-layer hooks
 * (family.h's ig_stage_hooks). The planner replays the same order to count ZeRO-3's gathers.
 */
#ifndef INGOT_TRAIN_STAGE_H
#define INGOT_TRAIN_STAGE_H

#include "model/model.h"

/* The forward of the micro-batch staged in slot through this part (the loss on the last stage;
 * with_grad: and the loss's gradient). */
ig_status ig_stage_forward(ig_model *m, int slot, int with_grad, ig_err *err);
/* Its backward: gradients added to the parameters', ig_model_ready called as groups become final,
 * the input's gradient left where the family's stage io says; the backend synchronised. */
ig_status ig_stage_backward(ig_model *m, int slot, ig_err *err);

/* The layer a pass over [l0, l1) runs i-th (0 <= i < l1 - l0), forward (fwd) or backward, and the
 * one it runs after it (-1: none): what the driver tells ig_store_use_layer. */
void ig_stage_layer_order(int fwd, int l0, int l1, int i, int *l, int *next);

#endif
