/* comm.h - the public API of ingot's communicator: the one interface every multi-process part of
 * ingot (the preprocess commit protocol, the trainer's tensor, pipeline and data parallelism)
 * talks through. Backends: a single-process one (always), MPI (when ingot is built with MPI and
 * started by mpirun, srun or another PMI launcher) and NCCL for device buffers (when ingot is
 * built with CUDA, NCCL and MPI: ig_comm_nccl_create, at the end of this header).
 *
 * A communicator is a group of processes ("ranks", 0 .. size-1). Collectives must be called by
 * every rank of the group, in the same order, with matching counts. Every call checks its
 * result: a failure of the transport is an ig_status with the backend's message, never an abort.
 * Buffers are host memory (device memory for an NCCL communicator); counts are in elements of
 * the given type.
 *
 * Thread-safety: one thread at a time per communicator (the trainer's main thread).
 */
#ifndef INGOT_COMM_H
#define INGOT_COMM_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ig_comm_type {
    IG_COMM_U8 = 0,
    IG_COMM_I32,
    IG_COMM_I64,
    IG_COMM_U64,
    IG_COMM_F32,
    IG_COMM_F64,
    IG_COMM_BF16, /* summed in fp32 pairwise, each sum rounded to bf16 (MPI: an op of ours) */
    IG_COMM_TYPE_COUNT
} ig_comm_type;

typedef enum ig_comm_op { IG_COMM_SUM = 0, IG_COMM_MAX, IG_COMM_MIN, IG_COMM_OP_COUNT } ig_comm_op;

size_t ig_comm_type_size(ig_comm_type t); /* bytes per element; 0 for an unknown type */

typedef struct ig_comm ig_comm;

/* The communicator of every process of this job. Started by a launcher (mpirun, srun --mpi=pmix,
 * ...: found from its environment), it is an MPI communicator over all of them, and MPI is
 * initialised here; otherwise it is a single-process communicator (size 1, no MPI). A launcher's
 * job with more than one process in a build without MPI is IG_ERR_UNSUPPORTED, with a message
 * saying so. ig_comm_free of the world communicator finalises MPI: free every communicator split
 * from it first.
 *
 * command names what this process runs ("train", "preprocess text", ...): the first collective
 * compares it between the ranks, so that one mpirun starting different commands (which would wait
 * in each other's collectives forever) is refused on every rank, naming both. */
ig_status ig_comm_world(ig_comm **out, ig_ctx *ctx, const char *command, ig_err *err);

/* A communicator of this process alone (size 1), whatever the launcher. */
ig_status ig_comm_single(ig_comm **out, ig_ctx *ctx, ig_err *err);

/* Frees c (and, for the world communicator, shuts the backend down). NULL is a no-op. */
void ig_comm_free(ig_comm *c);

int ig_comm_rank(const ig_comm *c);
int ig_comm_size(const ig_comm *c);
const char *ig_comm_backend(const ig_comm *c); /* "single", "mpi" or "nccl" */

/* The launcher's view of this process without starting a communicator: *rank and *size from its
 * environment (0 and 1 when not launched by one). For logs and for splitting work before MPI is
 * needed. */
void ig_comm_launch_info(int *rank, int *size);

/* Splits c into groups (MPI_Comm_split): ranks passing the same color form one communicator,
 * ordered by key (ties by rank in c). Collective over c. Free the result with ig_comm_free. */
ig_status ig_comm_split(ig_comm *c, int color, int key, ig_comm **out, ig_err *err);

/* The ranks of c on this node (those that can share memory: MPI_Comm_split_type with
 * MPI_COMM_TYPE_SHARED), ordered by their rank in c; its rank is this process's local rank.
 * Collective over c. A single-process communicator gives a group of one. */
ig_status ig_comm_split_local(ig_comm *c, ig_comm **out, ig_err *err);

ig_status ig_comm_barrier(ig_comm *c, ig_err *err);

/* buf[0..count) of root is copied to every rank's buf. */
ig_status ig_comm_bcast(ig_comm *c, void *buf, size_t count, ig_comm_type type, int root,
                        ig_err *err);

/* recv[i] = op over ranks of send[i], on every rank. send == recv reduces in place. The result is
 * the same on every rank (bit for bit). */
ig_status ig_comm_allreduce(ig_comm *c, const void *send, void *recv, size_t count,
                            ig_comm_type type, ig_comm_op op, ig_err *err);

/* recv[r*count .. (r+1)*count) = rank r's send[0..count), on every rank. In place when send is
 * this rank's own place in recv (send == recv + rank * count elements). */
ig_status ig_comm_allgather(ig_comm *c, const void *send, void *recv, size_t count,
                            ig_comm_type type, ig_err *err);

/* Each rank's send[0..size*count) is reduced elementwise over ranks; rank r receives the part
 * [r*count, (r+1)*count) of the result in recv[0..count). */
ig_status ig_comm_reduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                 ig_comm_type type, ig_comm_op op, ig_err *err);

/* All-to-all: send and recv are [size][count]; send[p*count .. (p+1)*count) goes to rank p, and
 * recv[q*count .. (q+1)*count) is what rank q sent to this rank (MPI_Alltoall; Ulysses sequence
 * parallelism's exchange of sequence shards for head shards). count elements go to EACH peer.
 * send and recv must not overlap (IG_ERR_INVALID_ARG): there is no in-place form. */
ig_status ig_comm_alltoall(ig_comm *c, const void *send, void *recv, size_t count,
                           ig_comm_type type, ig_err *err);

/* Point to point: count elements to / from rank peer of c with a tag (>= 0). Blocking. */
ig_status ig_comm_send(ig_comm *c, const void *buf, size_t count, ig_comm_type type, int peer,
                       int tag, ig_err *err);
ig_status ig_comm_recv(ig_comm *c, void *buf, size_t count, ig_comm_type type, int peer, int tag,
                       ig_err *err);

/* ---- non-blocking forms: start now, wait later (to overlap communication with compute) ---- */

/* A request in flight. The buffers it names must stay valid and untouched (the send buffer
 * unchanged, the receive buffer unread) until ig_comm_wait returns. */
typedef struct ig_comm_req ig_comm_req;

ig_status ig_comm_iallreduce(ig_comm *c, const void *send, void *recv, size_t count,
                             ig_comm_type type, ig_comm_op op, ig_comm_req **req, ig_err *err);
ig_status ig_comm_iallgather(ig_comm *c, const void *send, void *recv, size_t count,
                             ig_comm_type type, ig_comm_req **req, ig_err *err);
ig_status ig_comm_ireduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                  ig_comm_type type, ig_comm_op op, ig_comm_req **req, ig_err *err);
ig_status ig_comm_ialltoall(ig_comm *c, const void *send, void *recv, size_t count,
                            ig_comm_type type, ig_comm_req **req, ig_err *err);
ig_status ig_comm_isend(ig_comm *c, const void *buf, size_t count, ig_comm_type type, int peer,
                        int tag, ig_comm_req **req, ig_err *err);
ig_status ig_comm_irecv(ig_comm *c, void *buf, size_t count, ig_comm_type type, int peer, int tag,
                        ig_comm_req **req, ig_err *err);
/* Waits for req to complete and frees it (also on failure). NULL is a no-op returning IG_OK. */
ig_status ig_comm_wait(ig_comm_req *req, ig_err *err);
/* Whether req has completed (*done); does not free it. Drives progress in MPI. */
ig_status ig_comm_test(ig_comm_req *req, int *done, ig_err *err);

/* Whether every rank passes ok != 0: a logical AND over c (collective). */
ig_status ig_comm_all_ok(ig_comm *c, int ok, int *all_ok, ig_err *err);

/* Gathers every rank's bytes on root: *out (root only, NULL elsewhere; allocated through the
 * context the communicator was made with, free with ig_free) holds rank 0's
 * bytes, then rank 1's, ...; lens (root only; may be NULL) receives size lengths. */
ig_status ig_comm_gather_bytes(ig_comm *c, const void *data, size_t len, int root, void **out,
                               size_t *out_len, size_t *lens, ig_err *err);

/* ---- groups: several non-blocking operations started together ---- */

/* Between begin and end, the non-blocking operations of c are only recorded; end starts them as
 * one (NCCL's ncclGroupStart / ncclGroupEnd: e.g. a send and a receive to the same peer that
 * would deadlock one after the other). Blocking operations are refused inside a group, and its
 * requests may be waited for only after end. On the single and MPI backends (whose non-blocking
 * operations already start at once) both are no-ops. Groups do not nest. */
ig_status ig_comm_group_begin(ig_comm *c, ig_err *err);
ig_status ig_comm_group_end(ig_comm *c, ig_err *err);

/* ---- NCCL: collectives over device buffers (comm/backends/comm_nccl.c) ---- */

/* An NCCL communicator over the ranks of world (an MPI or single-process communicator), one GPU
 * per process: the device is this process's local rank (ig_comm_split_local), and a node needs
 * as many visible GPUs as it has ranks. Rank 0's NCCL unique id reaches the others through
 * world's broadcast (the bootstrap: MPI only there). Collective over world; every rank learns
 * whether all succeeded, so a failure on one rank is an error on all of them.
 *
 * Its operations take device pointers on that device and are queued on the communicator's own
 * CUDA stream (ig_comm_nccl_set_stream to use another); a blocking operation returns when its
 * result is in place, a non-blocking one when ig_comm_wait says so. Buffers written by kernels
 * must be complete before the call (ig_backend_sync). Tags of point-to-point operations are not
 * matched (NCCL has none): messages between two ranks arrive in the order they were sent.
 * ig_comm_gather_bytes (host memory) is IG_ERR_UNSUPPORTED: use world. ig_comm_split gives
 * another NCCL communicator (ncclCommSplit) on the same device. Without NCCL in the build:
 * IG_ERR_UNSUPPORTED. Free it before world. */
ig_status ig_comm_nccl_create(ig_comm **out, ig_comm *world, ig_err *err);

/* 1 when this build has the NCCL backend. */
int ig_comm_nccl_available(void);

/* The CUDA device of an NCCL communicator (-1 for other backends). */
int ig_comm_nccl_device(const ig_comm *c);

/* The cudaStream_t an NCCL communicator queues its operations on (NULL for other backends). */
void *ig_comm_nccl_stream(const ig_comm *c);

/* Queues c's operations on stream (a cudaStream_t of c's device; NULL: c's own stream again).
 * The stream is borrowed: it must outlive its use by c. IG_ERR_INVALID_ARG for a communicator
 * that is not NCCL's. */
ig_status ig_comm_nccl_set_stream(ig_comm *c, void *stream, ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_COMM_H */
