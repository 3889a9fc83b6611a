/* schedule.h - private to train/: the micro-batches of a step through this rank's part of a model
 * of any family, one after the other on a single stage or in the 1F1B order over the pipeline
 * stages (schedule.c). */
#ifndef INGOT_TRAIN_SCHEDULE_H
#define INGOT_TRAIN_SCHEDULE_H

#include "feed/feed.h"
#include "model/model.h"

/* What the schedule tells its listener (the optimizer) during a step's backwards. */
typedef struct ig_sched_hooks {
    /* before each backward; last: the step's last on this rank */
    ig_status (*backward_begin)(void *user, int last, ig_err *err);
    ig_ready_fn ready; /* tensors [t0, t1) whose gradient of this backward is final */
    void *user;
} ig_sched_hooks;

/* What a run of micro-batches adds up to on this rank: the sum of their mean losses (on the
 * last stage; 0 elsewhere), their tokens (rows: a clip's patches) and their forward FLOPs. */
typedef struct ig_sched_sums {
    double loss, tokens, flops;
} ig_sched_sums;

/* Runs micro_batches micro-batches from feed through this rank's part of the model: forward only
 * when grad_scale is 0 (validation), else forward and backward with each micro-batch's loss scaled
 * by grad_scale, in the 1F1B order when there are pipeline stages. hooks (may be NULL) hear of
 * each backward and of its final gradients. */
ig_status ig_sched_run(ig_model *m, ig_layout *lo, ig_feed *feed, int micro_batches,
                       float grad_scale, const ig_sched_hooks *hooks, ig_sched_sums *sums,
                       ig_err *err);
/* Whether the k-th (0 .. 2 M - 1) of a training step's operations on stage pp_rank of pp, M
 * micro-batches, is a forward (1) or a backward (0): the 1F1B order ig_sched_run follows -
 * min(pp - pp_rank - 1, M) forwards, then a forward and a backward in turn, then the backwards
 * left. */
int ig_sched_is_forward(int pp, int pp_rank, int M, int k);
/* The micro-batches whose activations a stage keeps at once under 1F1B. */
int ig_sched_slots(const ig_layout *lo);

#endif
