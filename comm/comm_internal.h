/* comm_internal.h - private to comm/: the table of operations a communicator backend fills in,
 * and the constructors of the backends. comm.c checks every argument before it reaches a
 * backend, so backends may trust counts, types, roots and peers. */
#ifndef INGOT_COMM_INTERNAL_H
#define INGOT_COMM_INTERNAL_H

#include "comm.h"

typedef struct ig_comm_ops {
    const char *name;
    ig_status (*split)(ig_comm *c, int color, int key, ig_comm **out, ig_err *err);
    /* the node-local group (MPI_Comm_split_type shared) */
    ig_status (*split_local)(ig_comm *c, ig_comm **out, ig_err *err);
    ig_status (*barrier)(ig_comm *c, ig_err *err);
    ig_status (*bcast)(ig_comm *c, void *buf, size_t count, ig_comm_type t, int root, ig_err *err);
    ig_status (*allreduce)(ig_comm *c, const void *send, void *recv, size_t count, ig_comm_type t,
                           ig_comm_op op, ig_err *err);
    ig_status (*allgather)(ig_comm *c, const void *send, void *recv, size_t count, ig_comm_type t,
                           ig_err *err);
    ig_status (*reduce_scatter)(ig_comm *c, const void *send, void *recv, size_t count,
                                ig_comm_type t, ig_comm_op op, ig_err *err);
    /* send and recv [size][count], not overlapping */
    ig_status (*alltoall)(ig_comm *c, const void *send, void *recv, size_t count, ig_comm_type t,
                          ig_err *err);
    ig_status (*send)(ig_comm *c, const void *buf, size_t count, ig_comm_type t, int peer, int tag,
                      ig_err *err);
    ig_status (*recv)(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer, int tag,
                      ig_err *err);
    /* root receives the concatenation into out (malloc'd) and the lengths into lens[size] */
    ig_status (*gather_bytes)(ig_comm *c, const void *data, size_t len, int root, void **out,
                              size_t *out_len, size_t *lens, ig_err *err);
    /* non-blocking forms: fill req (allocated by comm.c, req->impl for the backend) */
    ig_status (*iallreduce)(ig_comm *c, const void *send, void *recv, size_t count, ig_comm_type t,
                            ig_comm_op op, ig_comm_req *req, ig_err *err);
    ig_status (*iallgather)(ig_comm *c, const void *send, void *recv, size_t count, ig_comm_type t,
                            ig_comm_req *req, ig_err *err);
    ig_status (*ireduce_scatter)(ig_comm *c, const void *send, void *recv, size_t count,
                                 ig_comm_type t, ig_comm_op op, ig_comm_req *req, ig_err *err);
    ig_status (*ialltoall)(ig_comm *c, const void *send, void *recv, size_t count, ig_comm_type t,
                           ig_comm_req *req, ig_err *err);
    ig_status (*isend)(ig_comm *c, const void *buf, size_t count, ig_comm_type t, int peer, int tag,
                       ig_comm_req *req, ig_err *err);
    ig_status (*irecv)(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer, int tag,
                       ig_comm_req *req, ig_err *err);
    ig_status (*wait)(ig_comm_req *req, ig_err *err); /* frees req->impl */
    ig_status (*test)(ig_comm_req *req, int *done, ig_err *err);
    /* groups of non-blocking operations; NULL: nothing to do (comm.c tracks nesting) */
    ig_status (*group_begin)(ig_comm *c, ig_err *err);
    ig_status (*group_end)(ig_comm *c, ig_err *err);
    void (*destroy)(ig_comm *c); /* frees impl (and shuts the backend down for the world) */
    /* a device backend's device, stream and stream setting (ig_comm_nccl_device, ..._stream,
     * ..._set_stream); NULL for host backends */
    int (*device)(const ig_comm *c);
    void *(*stream)(const ig_comm *c);
    ig_status (*set_stream)(ig_comm *c, void *stream, ig_err *err);
} ig_comm_ops;

struct ig_comm_req {
    ig_comm *comm;
    const char *what; /* "all-reduce", ... for messages */
    int done;         /* completed (the single backend completes at once) */
    void *impl;       /* the backend's request state */
};

struct ig_comm {
    const ig_comm_ops *ops;
    ig_ctx *ctx;
    int rank, size;
    int is_world; /* freeing it shuts the backend down */
    int in_group; /* between ig_comm_group_begin and ig_comm_group_end */
    void *impl;   /* the backend's state */
};

/* Allocates a communicator shell through ctx (NULL on failure). Inline, with the element sizes,
 * so that the backends need nothing from comm.c (which calls them). */
static inline ig_comm *ig_comm_alloc(ig_ctx *ctx, const ig_comm_ops *ops, int rank, int size) {
    ig_comm *c = (ig_comm *)ig_calloc(ctx, 1, sizeof *c);
    if (!c) return NULL;
    c->ops = ops;
    c->ctx = ctx;
    c->rank = rank;
    c->size = size;
    return c;
}

static inline size_t ig_comm_elem_size(ig_comm_type t) {
    static const size_t sizes[IG_COMM_TYPE_COUNT] = {1, 4, 8, 8, 4, 8, 2};
    return (unsigned)t < IG_COMM_TYPE_COUNT ? sizes[t] : 0;
}

/* The NCCL backend is built into ingot's CUDA module, libingot_cuda.so (with the CUDA backend),
 * which the program loads at the first ig_comm_nccl_create (backends/comm_nccl_host.c), so that
 * NCCL and the CUDA runtime are loaded only by the processes that use them. The module exports
 * one object of this type, IG_COMM_NCCL_ENTRY; the sizes and version let the program refuse a
 * module of another build, whose tables would not match these. */
#define IG_COMM_NCCL_ENTRY "ig_comm_nccl_entry"
typedef struct ig_comm_nccl_module {
    ig_module_stamp stamp; /* its build: ops_size sizeof(ig_comm_ops), obj_size sizeof(struct
                              ig_comm) */
    ig_status (*create)(ig_comm **out, ig_comm *world, ig_err *err); /* ig_comm_nccl_create's */
} ig_comm_nccl_module;

/* The MPI backend (backends/comm_mpi.c, or backends/comm_nompi.c without MPI): initialises MPI
 * when needed and returns the world communicator. */
ig_status ig_comm_mpi_world(ig_comm **out, ig_ctx *ctx, ig_err *err);
/* 1 when this build has the MPI backend. */
int ig_comm_mpi_available(void);

#endif
