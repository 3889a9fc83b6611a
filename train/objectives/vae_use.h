/* vae_use.h - private to train/objectives/: what the VAE objective's files share (vae.c: the
 * draws, the staging and the loss; vae_use.c: evaluation). */
#ifndef INGOT_OBJECTIVES_VAE_USE_H
#define INGOT_OBJECTIVES_VAE_USE_H

#include "family/family.h"
#include "feed/feed.h"
#include "parallel/stage.h"
#include "vae_model.h"

/* Stages in's frames into slot (drawing the noise it does not give). */
ig_status ig_vae_stage_frames(ig_model *m, int slot, const ig_vae_input *in, float grad_scale,
                              ig_err *err);
/* The slot's loss terms after its forward (the KL weight it was staged with). */
ig_status ig_vae_terms_of(ig_model *m, int slot, ig_vae_terms *out, ig_err *err);
/* ingot eval of a VAE (vae_use.c). */
ig_status ig_vae_evaluate(ig_ctx *ctx, ig_backend *be, const char *path, const ig_eval_opts *o,
                          ig_eval_result *res, ig_err *err);

#endif
