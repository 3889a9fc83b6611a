/* train_internal.h - private to train/: the run's metrics (metrics.c) and Hugging Face GPT-2
 * files (hf_io.c), shared by the training loop (trainer.c) and the tools built on the trainer
 * (export, eval, sample: inference.c). */
#ifndef INGOT_TRAIN_INTERNAL_H
#define INGOT_TRAIN_INTERNAL_H

#include <stdio.h>

#include "gpt_internal.h"
#include "train/train.h"

/* ---- metrics ------------------------------------------------------------------------------- */

typedef struct ig_metrics ig_metrics;

/* RUN_DIR/metrics.jsonl (appended: a resumed run continues it) and, with tensorboard, event files
 * under RUN_DIR/tb/. */
ig_status ig_metrics_open(ig_metrics **out, ig_ctx *ctx, const char *run_dir, int tensorboard,
                          ig_err *err);
/* One line {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu"} (and the same scalars);
 * extra (may be NULL or "") is more members, ",\"key\":value...", appended as they are. */
ig_status ig_metrics_step(ig_metrics *m, int64_t step, double loss, double lr, double grad_norm,
                          double tokens_per_s, double mfu, const char *extra, ig_err *err);
/* {"step", "val_loss"}. */
ig_status ig_metrics_val(ig_metrics *m, int64_t step, double val_loss, ig_err *err);
ig_status ig_metrics_close(ig_metrics *m, ig_err *err); /* NULL is a no-op */

/* ---- Hugging Face GPT-2 files -------------------------------------------------------------- */

/* Loads a Hugging Face GPT-2 model.safetensors (names "transformer.wte.weight" or "wte.weight",
 * Conv1D [in, out] weights, wte of vocab_size rows) into m's parameters: the padded vocabulary
 * rows are zeroed, the causal-mask buffers ("attn.bias", "attn.masked_bias") ignored. Every tensor
 * of the model must be there with the model's shape; errors name the tensor. */
ig_status ig_hf_load(ig_ctx *ctx, ig_gpt *m, const char *path, ig_err *err);
/* Reads the shape of a Hugging Face GPT-2 model: from config.json beside path when there is one
 * (and its eos_token_id into *eod, else -1), else from the tensors' shapes. */
ig_status ig_hf_read_config(ig_ctx *ctx, const char *path, ig_gpt_config *out, int32_t *eod,
                            ig_err *err);
/* Writes m as a Hugging Face GPT-2 directory: model.safetensors (tied lm_head not stored, padded
 * vocabulary rows dropped, __metadata__ {"format": "pt"}) and config.json. */
ig_status ig_hf_export(ig_ctx *ctx, ig_gpt *m, int32_t eod_id, const char *dir, int overwrite,
                       ig_err *err);

/* ---- the parallel step (schedule.c, optimizer.c) --------------------------------------------- */

/* Runs micro_batches micro-batches of B x T (T tokens each) from ld through this rank's part of
 * the model: forward only when grad_scale is 0 (validation), else forward and backward with each
 * micro-batch's loss scaled by grad_scale, in the 1F1B order when there are pipeline stages.
 * hooks (may be NULL) hear of each backward and of its final gradients. *loss_sum: the sum of
 * the micro-batches' mean losses (on the last stage; 0 elsewhere). */
typedef struct ig_sched_hooks {
    /* before each backward; last: the step's last on this rank */
    ig_status (*backward_begin)(void *user, int last, ig_err *err);
    ig_gpt_ready_fn ready; /* tensors whose gradient of this backward is final */
    void *user;
} ig_sched_hooks;
ig_status ig_sched_run(ig_gpt *m, ig_layout *lo, ig_loader *ld, const ig_gpt_batch_opts *bo, int T,
                       int micro_batches, float grad_scale, const ig_sched_hooks *hooks,
                       double *loss_sum, ig_err *err);
/* The micro-batches whose activations a stage keeps at once under 1F1B. */
int ig_sched_slots(const ig_layout *lo);

typedef struct ig_optim ig_optim;
ig_status ig_optim_create(ig_optim **out, ig_ctx *ctx, ig_gpt *m, ig_layout *lo, ig_err *err);
void ig_optim_free(ig_optim *o);
ig_status ig_optim_begin(ig_optim *o, ig_err *err); /* before a step's backwards */
const ig_sched_hooks *ig_optim_hooks(ig_optim *o);  /* for ig_sched_run */
ig_status ig_optim_ready_fn(void *user, size_t t0, size_t t1, ig_err *err); /* ig_gpt_ready_fn */
/* every reduction done (after the backwards) */
ig_status ig_optim_reduce(ig_optim *o, ig_err *err);
double ig_optim_wait_seconds(const ig_optim *o);  /* of the last reduce: waiting, not overlapped */
uint64_t ig_optim_extra_bytes(const ig_optim *o); /* ZeRO-2's gradient pieces and buffers */
ig_status ig_optim_norm(ig_optim *o, double *norm, ig_err *err); /* global, on every rank */
ig_status ig_optim_step(ig_optim *o, int step, float lr, float beta1, float beta2, float eps,
                        float weight_decay, float grad_scale, ig_err *err);

/* ---- the watchdog (watchdog.c) ----------------------------------------------------------------
 */

/* One unit of progress: a collective started, a micro-batch done (any thread). */
void ig_progress_tick(void);
/* This process works alone for a while (writing its checkpoint files: no collective to tick):
 * busy 1 before, 0 after. Its heartbeat says so, and neither its watchdog nor the others' end
 * the job meanwhile (for at most 4 timeouts: a write that never returns still ends it). */
void ig_progress_busy(int busy);

typedef struct ig_watchdog ig_watchdog;
/* Starts this rank's watchdog thread and its heartbeats in RUN_DIR/.heartbeat/. */
ig_status ig_watchdog_start(ig_watchdog **out, ig_ctx *ctx, const char *run_dir, int rank,
                            int world, double timeout, ig_err *err);
/* Between arm and disarm, timeout seconds without progress - here and on every rank whose
 * heartbeat this one reads - end the process (status 3) with a message naming the rank(s) that
 * stopped or fell behind. A rank still making progress (a slow checkpoint write elsewhere) keeps
 * the others waiting. */
void ig_watchdog_arm(ig_watchdog *w, int64_t step);
void ig_watchdog_disarm(ig_watchdog *w);
void ig_watchdog_stop(ig_watchdog *w); /* NULL is a no-op */

/* Saves the state of every rank's part (collective over the layout's world): see checkpoint.c. */
ig_status ig_ckpt_save_part(ig_ctx *ctx, ig_gpt *m, const ig_layout *lo, const ig_ckpt_info *info,
                            const ig_config *cfg, const char *run_dir, int64_t keep, char *path,
                            size_t cap, ig_err *err);

#endif
