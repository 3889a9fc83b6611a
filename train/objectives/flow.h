/* flow.h - private to train/objectives/: what the rectified-flow objective's files share (flow.c:
 * the draws, the staging and the loss; flow_use.c: evaluation and the sampler). */
#ifndef INGOT_OBJECTIVES_FLOW_H
#define INGOT_OBJECTIVES_FLOW_H

#include "family/family.h"
#include "flow_model.h"
#include "feed/feed.h"
#include "parallel/stage.h"

/* Stages the clips of in (drawing what it does not give: times, noise, dropout) into slot. */
ig_status ig_flow_stage_clips(ig_model *m, int slot, const ig_clip_input *in, float grad_scale,
                              ig_err *err);
/* ingot eval of a rectified-flow model (flow_use.c). */
ig_status ig_flow_evaluate(ig_ctx *ctx, ig_backend *be, const char *path, const ig_eval_opts *o,
                           ig_eval_result *res, ig_err *err);
/* A whole model's loss on a micro-batch from a (validation) feed, forward only. */
ig_status ig_flow_micro_loss(ig_model *m, const ig_micro_batch *mb, double *loss, ig_err *err);

#endif
