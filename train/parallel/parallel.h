/* parallel.h - private to train/: where this process sits in a training run's 3D layout, and the
 * groups it talks to.
 *
 * World = tp x sp x dp x pp ranks, tp fastest, then sp (Ulysses' sequence ranks, 1 without), then
 * dp, then pp (Megatron's tp-dp-pp order): world rank r has tp rank r % tp, sp rank (r / tp) % sp,
 * dp rank (r / (tp sp)) % dp and pipeline stage r / (tp sp dp). Its groups come from
 * ig_comm_split: tp (the ranks of one stage of one model replica), sp (the Ulysses ranks that cut
 * one sequence between them: the all-to-alls), dp (the ranks a shard's gradients are reduced over
 * and ZeRO shards over: the replicas and, with Ulysses, their sequence ranks, whose gradients are
 * each a part of the micro-batch's), pp (the stages of one replica's shard), and emb (the first and
 * the last stage of a replica's shard, which both hold the tied embedding, when pp > 1).
 *
 * An ig_group wraps a communicator with a byte counter for --comm-stats: what this rank sends, as
 * the ring algorithms send it (an all-reduce of n bytes over g ranks: 2 (g - 1) / g n; a reduce-
 * scatter or all-gather of n bytes in all: (g - 1) / g n; a send: n), so that the figures can be
 * checked against the model's analytical volumes. A group of one rank sends nothing and makes no
 * call.
 *
 * Memory: world carries host memory only (losses, norms, checks); tp, dp, pp and emb carry the
 * model's backend memory. On a CPU backend both are MPI's. On a device backend
 * (ig_layout_attach_backend) those four groups also get an NCCL communicator over the same ranks,
 * split from an NCCL world with the same colours, whose stream waits for the backend's queued
 * kernels (ig_backend_fence) before each operation; the MPI communicator stays for host memory
 * (the checkpoint's gathers).
 */
#ifndef INGOT_TRAIN_PARALLEL_H
#define INGOT_TRAIN_PARALLEL_H

#include "kernels/backend.h"
#include "train/train.h"
#include "run/watchdog.h"

typedef struct ig_group {
    ig_comm *comm;  /* NULL when size == 1 */
    ig_comm *dev;   /* NCCL over the same ranks for backend memory on a device (NULL: comm) */
    ig_backend *be; /* whose memory the operations take (NULL: host memory) */
    int size, rank;
    const char *name; /* "tp", "dp", "pp", "emb", "sp", "world" */
    uint64_t bytes;   /* sent by this rank, ring accounting (reset by the reader) */
    ig_pulse *pulse;  /* ticked by every operation (may be NULL) */
} ig_group;

/* The ring accounting (what ig_group.bytes counts): what a rank sends in an all-gather or a
 * reduce-scatter of n bytes in all over g ranks, and in an all-reduce of n bytes. */
static inline uint64_t ig_ring_bytes(int g, uint64_t n) {
    return g > 1 ? n * (uint64_t)(g - 1) / (uint64_t)g : 0;
}
static inline uint64_t ig_allreduce_bytes(int g, uint64_t n) {
    return 2 * ig_ring_bytes(g, n);
}

/* Blocking collectives of a group (SUM unless op is given). counts are elements. */
ig_status ig_group_allreduce(ig_group *g, void *buf, size_t n, ig_comm_type t, ig_comm_op op,
                             ig_err *err);
/* recv [size * n] = every rank's send [n] in rank order. */
ig_status ig_group_allgather(ig_group *g, const void *send, void *recv, size_t n, ig_comm_type t,
                             ig_err *err);
/* recv [n] = rank's part of the sum of every rank's send [size * n]. */
ig_status ig_group_reduce_scatter(ig_group *g, const void *send, void *recv, size_t n,
                                  ig_comm_type t, ig_err *err);
ig_status ig_group_bcast(ig_group *g, void *buf, size_t n, ig_comm_type t, int root, ig_err *err);
/* recv [size][n] = from each rank its send block for this rank; send [size][n] (not in place). */
ig_status ig_group_alltoall(ig_group *g, const void *send, void *recv, size_t n, ig_comm_type t,
                            ig_err *err);

/* Non-blocking forms (*req NULL when the group is one rank: nothing to wait for). */
ig_status ig_group_iallreduce(ig_group *g, void *buf, size_t n, ig_comm_type t, ig_comm_req **req,
                              ig_err *err);
ig_status ig_group_ireduce_scatter(ig_group *g, const void *send, void *recv, size_t n,
                                   ig_comm_type t, ig_comm_req **req, ig_err *err);
ig_status ig_group_iallgather(ig_group *g, const void *send, void *recv, size_t n, ig_comm_type t,
                              ig_comm_req **req, ig_err *err);
ig_status ig_group_isend(ig_group *g, const void *buf, size_t n, ig_comm_type t, int peer, int tag,
                         ig_comm_req **req, ig_err *err);
ig_status ig_group_irecv(ig_group *g, void *buf, size_t n, ig_comm_type t, int peer, int tag,
                         ig_comm_req **req, ig_err *err);

/* The layout of a run, checked on every rank before any work. dp is the data-parallel replicas
 * (each reads its own micro-batches); the gradients are reduced over dp_g, dp x usp ranks. */
typedef struct ig_layout {
    int world, rank;
    int tp, pp, dp, sp, zero;
    int usp; /* Ulysses' sequence ranks (parallel.sp_size with sp_mode ulysses; else 1) */
    int tp_rank, dp_rank, pp_rank, usp_rank;
    int l0, l1;        /* this stage's layers [l0, l1) */
    int *stage_layers; /* [pp]: the first layer of each stage, then n_layer ([pp + 1]) */
    int accum;         /* micro-batches per step on each data-parallel rank */
    ig_group world_g, tp_g, dp_g, pp_g, emb_g, sp_g;
    ig_pulse *pulse; /* the run's (may be NULL) */
    ig_ctx *ctx;
} ig_layout;

/* The layout of t over world's ranks: refuses (IG_ERR_CONFIG, on every rank, with the numbers)
 * a world that tp x pp does not divide, a parallel.dp that is given and does not match, a tp the
 * model's family does not allow (heads, vocabulary), layers that pp does not divide (or a
 * parallel.pipeline_layers that does not add up to them), sp without tp > 1, a global batch that
 * micro_batch x dp does not divide, and a configuration that differs between ranks (config_hash
 * compared). world may be NULL (one process). pulse (may be NULL) hears of every collective. */
ig_status ig_layout_create(ig_layout *out, ig_ctx *ctx, ig_comm *world, const ig_train_config *t,
                           const ig_model_config *shape, uint64_t config_hash, ig_pulse *pulse,
                           ig_err *err);
/* The checks of ig_layout_create that need no communicator (layout_check.c), with its messages:
 * fills l's tp, pp, dp, sp, zero, usp, accum, stage_layers and this stage's l0, l1 from t for a
 * model of shape over l->world processes (l->ctx, l->world and the coordinates must be set; free
 * with ig_layout_free). The planner asks it about layouts that no process runs yet. */
ig_status ig_layout_check(ig_layout *l, const ig_train_config *t, const ig_model_config *shape,
                          ig_err *err);
/* Whether every rank of world got through a phase that can fail on some ranks only (files one
 * node cannot read, a full disk): collective; a rank that failed keeps its own message (st), the
 * others say that `what` failed on another rank. world NULL or of one rank: st. */
ig_status ig_all_ranks_ok(ig_comm *world, ig_status st, const char *what, ig_err *err);

/* The layout of one process training a model of n_layer layers alone. */
ig_status ig_layout_single(ig_layout *out, ig_ctx *ctx, int n_layer, ig_err *err);
void ig_layout_free(ig_layout *l);

/* Points the tp, dp, pp and emb groups at be's memory: on a device backend with more than one
 * process, creates their NCCL communicators (collective over the world; IG_ERR_UNSUPPORTED in a
 * build without NCCL). A CPU backend needs nothing more. */
ig_status ig_layout_attach_backend(ig_layout *l, ig_comm *world, ig_backend *be, ig_err *err);

/* Whether this rank has the embedding / the head (the first / the last stage). */
static inline int ig_layout_first(const ig_layout *l) {
    return l->pp_rank == 0;
}
static inline int ig_layout_last(const ig_layout *l) {
    return l->pp_rank == l->pp - 1;
}

#endif
