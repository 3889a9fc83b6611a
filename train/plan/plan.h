/* plan.h - private to train/: the planner's view of one rank (plan.c, plan_comm.c) - the memory
 * its part takes by buffer and the bytes it sends per step in each group - for `ingot plan`'s
 * layouts and for the trainer's own estimate and refusal at the start of a run.
 */
#ifndef INGOT_TRAIN_PLAN_H
#define INGOT_TRAIN_PLAN_H

#include <stdio.h>

#include "model/model.h"

/* What one rank sends in a step, by group (the groups and the ring accounting of parallel.h, so
 * that --comm-stats measures the same figures), and the data-parallel bytes by when they go: once
 * per step (the all-reduce after the last backward, ZeRO's parameter all-gather after the update)
 * or with every micro-batch (ZeRO-2's reduce-scatters), or ZeRO-3's layer gathers. */
typedef struct ig_plan_sent {
    uint64_t bytes[IG_PLAN_GROUPS];
    /* bytes[IG_PLAN_DP] = dp_reduce + dp_gather + accum x dp_micro + dp_layers: the gradients'
     * all-reduce after the last backward, ZeRO's parameter all-gather after the update, what goes
     * with every micro-batch (ZeRO-2's and ZeRO-3's reduce-scatters) and ZeRO-3's gathers of the
     * layers over the step */
    uint64_t dp_reduce, dp_gather, dp_micro, dp_layers;
} ig_plan_sent;

/* A rank of a layout: lo's dimensions and coordinates (pp_rank, l0, l1; ig_layout_check's or the
 * run's), micro-batches of B x T, act_size bytes per act element. */
typedef struct ig_plan_rank_in {
    const ig_model_config *shape; /* checked (ig_model_config_check) */
    const ig_layout *lo;
    int B, T;
    size_t act_size;
    int recompute;         /* ig_recompute */
    int ema;               /* an EMA of the weights is kept */
    uint64_t bucket_bytes; /* parallel.bucket_size */
    int device;            /* 1: a CUDA device (its context, cuBLASLt and NCCL) */
} ig_plan_rank_in;

/* The memory of the rank by buffer - the model's through ig_model_memory and ig_optim_estimate, the
 * communicators' buffers and the workspace - and what it sends per step (sent may be NULL). */
ig_status ig_plan_rank(ig_ctx *ctx, const ig_plan_rank_in *in, ig_plan_memory *mem,
                       ig_plan_sent *sent, ig_err *err);

/* What the families' passes and the optimizer send per step from the part p (plan_comm.c), from
 * its tensor table (the tied embedding, the sequence-parallel norms' partial gradients, the
 * layers' parameters) and the family's kind of input. */
ig_status ig_plan_comm(ig_ctx *ctx, const ig_plan_rank_in *in, const ig_part *p, ig_plan_sent *out,
                       ig_err *err);

/* The part that rank of lo holds, without groups (the trainer's setup_model adds its own). */
ig_part ig_plan_part(const ig_plan_rank_in *in);

/* The allowances for what libraries take on a CUDA device (plan.c's header). */
enum { IG_PLAN_CUDA_CONTEXT_MIB = 512, IG_PLAN_CUBLASLT_MIB = 32, IG_PLAN_NCCL_COMM_MIB = 128 };

/* What of an estimate the backend itself allocates - what its accounting (ig_backend_memory)
 * measures: the model's and the optimizer's buffers, and on a device cuBLASLt's workspace. */
uint64_t ig_plan_backend_bytes(const ig_plan_memory *m, int device);

/* The trainer's run, for the check before it allocates. */
typedef struct ig_plan_check_in {
    ig_ctx *ctx;
    ig_comm *world; /* NULL: one process */
    ig_layout *lo;  /* the run's (this rank's coordinates) */
    ig_backend *be;
    const ig_train_config *t;
    const ig_model_config *shape; /* checked: the shards' vocabulary, a clip's tokens */
    int B, T;                     /* the largest micro-batch */
    int ema;
    int device;              /* a CUDA backend */
    const char *config_path; /* for the `ingot plan` line of the refusal (NULL: "CONFIG") */
} ig_plan_check_in;

/* This rank's estimate and the check of every rank's against what it may use
 * (train.memory_limit; or its CUDA device's free memory; or on the CPU what the process may take,
 * shared by the node's ranks). Collective over the world: when a rank would not fit, every rank
 * returns IG_ERR_CONFIG naming it, its estimate by buffer, and the fastest layouts of as many
 * processes that fit (the `ingot plan` command to see all). */
ig_status ig_plan_check_run(const ig_plan_check_in *in, ig_plan_memory *mem, ig_err *err);
/* The line at a run's start: the estimate by buffer beside what the backend holds. */
void ig_plan_print_run(FILE *log, const ig_plan_memory *m, ig_backend *be, int world);
/* Every rank's estimate of what its backend allocates, the backend's peak since the last reset
 * and the model state it counted (state: the bytes of the parameters, master weights, gradients
 * and optimizer state as they were allocated), gathered (collective over lo's world):
 * `,"memory":{"estimate":[...],"peak":[...],"state":[...]}` into json (NULL: not wanted) and a
 * sentence on the rank furthest from its estimate into line. */
ig_status ig_plan_memory_stats(ig_layout *lo, ig_backend *be, const ig_plan_memory *m,
                               uint64_t state, int device, char *json, size_t jcap, char *line,
                               size_t lcap, ig_err *err);

/* Up to n lines ("  tp 2 x pp 1 x dp 4, ZeRO-1, recompute none, micro-batch 2: 61.2 GB, 1.23 s
 * a step") naming the fastest layouts of p that fit, into buf. Returns how many it named. */
int ig_plan_suggest(const ig_plan *p, int n, char *buf, size_t cap);

#endif
