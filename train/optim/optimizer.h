/* optimizer.h - private to train/: what happens to the gradients after the backward, on any
 * family's model (optimizer.c): the reduction over the data-parallel replicas in buckets started
 * while the backward runs, the tied tensors' sum between the first and the last stage, the
 * sequence-parallel norms' sum over the tensor-parallel group, the global gradient norm, and
 * AdamW with its moments (fp32) - the whole buffers, or with ZeRO this rank's pieces. */
#ifndef INGOT_TRAIN_OPTIMIZER_H
#define INGOT_TRAIN_OPTIMIZER_H

#include "parallel/schedule.h"

typedef struct ig_optimizer ig_optim;

/* The optimizer of m under layout lo (borrowed; NULL: one process, a layout of its own). */
ig_status ig_optim_create(ig_optim **out, ig_ctx *ctx, ig_model *m, ig_layout *lo, ig_err *err);
void ig_optim_free(ig_optim *o);
/* Adds to *mem what ig_optim_create (and ig_optim_ema_enable when ema) allocates for m: the
 * moments and the EMA (optim), ZeRO-2's reduced pieces and in-flight pieces (grads). m may be a
 * planned part without backend memory (ig_model_plan). */
void ig_optim_estimate(const ig_model *m, int ema, ig_part_memory *mem);
ig_status ig_optim_begin(ig_optim *o, ig_err *err); /* before a step's backwards */
const ig_sched_hooks *ig_optim_hooks(ig_optim *o);  /* for ig_sched_run */
/* every reduction done (after the backwards) */
ig_status ig_optim_reduce(ig_optim *o, ig_err *err);
double ig_optim_wait_seconds(const ig_optim *o);   /* of the last reduce: waiting, not overlapped */
uint64_t ig_optim_extra_bytes(const ig_optim *o);  /* ZeRO-2's gradient pieces and buffers */
uint64_t ig_optim_moment_elems(const ig_optim *o); /* elements of each moment this rank holds */
ig_status ig_optim_norm(ig_optim *o, double *norm, ig_err *err); /* global, on every rank */
ig_status ig_optim_step(ig_optim *o, int step, const ig_adamw_hparams *h, float grad_scale,
                        ig_err *err);
/* An exponential moving average of the weights (ema.decay), kept beside the moments: of the
 * whole buffer, or with ZeRO of exactly this rank's pieces (no communication; gathered only to
 * save), updated after each step from the fp32 master weights: ema = decay ema + (1 - decay) w.
 * enable allocates it; reset sets it to the weights as they are (the start of a run). */
ig_status ig_optim_ema_enable(ig_optim *o, double decay, ig_err *err);
ig_status ig_optim_ema_reset(ig_optim *o, ig_err *err);
double ig_optim_ema_decay(const ig_optim *o); /* 0: none kept */
/* The optimizer's state kept per parameter: the two AdamW moments, and the EMA when kept. */
enum { IG_OPTIM_EMA = 2 };
int ig_optim_states(const ig_optim *o); /* 2, or 3 with the EMA */
/* This rank's state `which` (IG_MOMENT_EXP_AVG, IG_MOMENT_EXP_AVG_SQ or IG_OPTIM_EMA; n_moments
 * elements: the whole buffer, or its ZeRO pieces in bucket order), to and from the host. */
ig_status ig_optim_read_pieces(ig_optim *o, int which, float *out, ig_err *err);
ig_status ig_optim_write_pieces(ig_optim *o, int which, const float *in, ig_err *err);
const ig_layout *ig_optim_layout(const ig_optim *o);

#endif
