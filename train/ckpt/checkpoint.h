/* checkpoint.h - private to train/: checkpoints of a model of any family under a parallel layout
 * (checkpoint.c). */
#ifndef INGOT_TRAIN_CHECKPOINT_H
#define INGOT_TRAIN_CHECKPOINT_H

#include "optim/optimizer.h"

/* Saves the state of every rank's part (collective over the layout's world): each model-parallel
 * rank's parameters and moments, written by its data-parallel rank 0 (ZeRO's moment pieces are
 * gathered there first), and rank 0's manifest; into RUN_DIR/ckpt/step_NNNNNNNN, atomically.
 * pulse (may be NULL) is told while this rank works alone. */
ig_status ig_ckpt_save_part(ig_ctx *ctx, ig_model *m, ig_optim *o, const ig_layout *lo,
                            const ig_ckpt_info *info, const ig_config *cfg, const char *run_dir,
                            int64_t keep, char *path, size_t cap, ig_err *err);

/* ig_ckpt_load with the weights chosen: the parameters, or the EMA's (which must be there). */
ig_status ig_ckpt_load_weights(ig_ctx *ctx, const char *dir, ig_model *m, ig_optim *o,
                               ig_weights weights, ig_ckpt_info *info, ig_err *err);

/* Removes what killed processes of this host left in RUN_DIR/ckpt: unfinished checkpoint
 * directories (.step_N.tmp.HOST.PID) and replaced ones (step_N.old.HOST.PID) whose process is gone.
 * Best effort; returns how many were removed. */
int ig_ckpt_remove_stale(const char *run_dir);

#endif
