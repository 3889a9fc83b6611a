/* metrics.h - private to train/: what a run reports per step (metrics.c): RUN_DIR/metrics.jsonl
 * and, with log.tensorboard, TensorBoard event files under RUN_DIR/tb/. */
#ifndef INGOT_TRAIN_METRICS_H
#define INGOT_TRAIN_METRICS_H

#include "core/core.h"

typedef struct ig_metrics ig_metrics;

/* RUN_DIR/metrics.jsonl (appended: a resumed run continues it; resume_step >= 0 first drops the
 * records of later steps, which the resumed run writes again, so each step has one) and, with
 * tensorboard, event files under RUN_DIR/tb/. */
ig_status ig_metrics_open(ig_metrics **out, ig_ctx *ctx, const char *run_dir, int tensorboard,
                          int64_t resume_step, ig_err *err);
/* One line {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu"} (and the same scalars);
 * extra (may be NULL or "") is more members, ",\"key\":value...", appended as they are. */
ig_status ig_metrics_step(ig_metrics *m, int64_t step, double loss, double lr, double grad_norm,
                          double tokens_per_s, double mfu, const char *extra, ig_err *err);
/* {"step", "val_loss"}. */
ig_status ig_metrics_val(ig_metrics *m, int64_t step, double val_loss, ig_err *err);
ig_status ig_metrics_close(ig_metrics *m, ig_err *err); /* NULL is a no-op */

#endif
