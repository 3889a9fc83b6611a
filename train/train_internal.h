/* train_internal.h - private to train/: the run's metrics (metrics.c) and Hugging Face GPT-2
 * files (hf_io.c), shared by the training loop (trainer.c) and the tools built on the trainer
 * (export, eval, sample: inference.c). */
#ifndef INGOT_TRAIN_INTERNAL_H
#define INGOT_TRAIN_INTERNAL_H

#include <stdio.h>

#include "train/train.h"

/* ---- metrics ------------------------------------------------------------------------------- */

typedef struct ig_metrics ig_metrics;

/* RUN_DIR/metrics.jsonl (appended: a resumed run continues it) and, with tensorboard, event files
 * under RUN_DIR/tb/. */
ig_status ig_metrics_open(ig_metrics **out, ig_ctx *ctx, const char *run_dir, int tensorboard,
                          ig_err *err);
/* One line {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu"} (and the same scalars). */
ig_status ig_metrics_step(ig_metrics *m, int64_t step, double loss, double lr, double grad_norm,
                          double tokens_per_s, double mfu, ig_err *err);
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

#endif
