/* comm_nccl.c - the NCCL backend of the communicator: collectives and point to point over device
 * buffers, one GPU per process. Built when CUDA, NCCL and MPI are all found (comm_nonccl.c
 * otherwise), into the CUDA module libingot_cuda.so, which the program loads at the first
 * ig_comm_nccl_create (comm_nccl_host.c); the only file of ingot that includes nccl.h.
 *
 * Bootstrap without MPI calls here: the local rank comes from ig_comm_split_local of the world
 * communicator (MPI_Comm_split_type in comm_mpi.c), the device is that local rank, and rank 0's
 * ncclUniqueId reaches every rank through the world's ig_comm_bcast. Before each collective step
 * of the bootstrap the ranks agree (ig_comm_all_ok) that all of them can go on, so a rank that
 * fails makes every rank fail instead of leaving the others waiting.
 *
 * Operations are queued on the communicator's stream (its own, or one given with
 * ig_comm_nccl_set_stream). A blocking operation synchronises the stream before returning; a
 * non-blocking one records a CUDA event that ig_comm_wait / ig_comm_test ask about. Inside a
 * group (ncclGroupStart .. ncclGroupEnd) operations are only recorded, so their requests carry no
 * event: waiting for one synchronises the stream, after the group's end. Every NCCL and CUDA
 * result is checked and turned into an ig_status with the library's message.
 */
#include "../comm_internal.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <string.h>

typedef struct nccl_impl {
    ncclComm_t comm;
    int device;
    cudaStream_t own;    /* created here */
    cudaStream_t stream; /* where operations go: own, or the caller's */
    float *one;          /* a device float for the barrier */
} nccl_impl;

static const ig_comm_ops nccl_ops;

static nccl_impl *impl_of(const ig_comm *c) {
    return (nccl_impl *)c->impl;
}

static ig_status nccl_fail(ig_err *err, const ig_comm *c, ncclResult_t rc, const char *what) {
    const char *last =
        c && impl_of(c) && impl_of(c)->comm ? ncclGetLastError(impl_of(c)->comm) : NULL;
    return ig_err_set(err, rc == ncclSystemError ? IG_ERR_IO : IG_ERR_INTERNAL,
                      "NCCL %s failed: %s%s%s", what, ncclGetErrorString(rc),
                      last && *last ? ": " : "", last && *last ? last : "");
}

static ig_status cuda_fail(ig_err *err, cudaError_t e, const char *what) {
    return ig_err_set(err, e == cudaErrorMemoryAllocation ? IG_ERR_NOMEM : IG_ERR_IO,
                      "NCCL communicator: %s: %s (%s)", what, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

#define NCHECK(c, call, what)                                                                      \
    do {                                                                                           \
        ncclResult_t rc_ = (call);                                                                 \
        if (rc_ != ncclSuccess) return nccl_fail(err, (c), rc_, what);                             \
    } while (0)
#define CCHECK(call, what)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) return cuda_fail(err, e_, what);                                    \
    } while (0)

static ncclDataType_t nccl_type(ig_comm_type t) {
    switch (t) {
    case IG_COMM_U8:
        return ncclUint8;
    case IG_COMM_I32:
        return ncclInt32;
    case IG_COMM_I64:
        return ncclInt64;
    case IG_COMM_U64:
        return ncclUint64;
    case IG_COMM_F32:
        return ncclFloat32;
    case IG_COMM_BF16:
        return ncclBfloat16;
    case IG_COMM_F64:
    default:
        return ncclFloat64;
    }
}

static ncclRedOp_t nccl_op(ig_comm_op op) {
    return op == IG_COMM_MAX ? ncclMax : op == IG_COMM_MIN ? ncclMin : ncclSum;
}

/* Makes c's device current (operations may come from a thread that used another). */
static ig_status enter(const ig_comm *c, ig_err *err) {
    CCHECK(cudaSetDevice(impl_of(c)->device), "cudaSetDevice");
    return IG_OK;
}

/* After a blocking operation was queued: wait for it. */
static ig_status finish(const ig_comm *c, const char *what, ig_err *err) {
    cudaError_t e = cudaStreamSynchronize(impl_of(c)->stream);
    if (e != cudaSuccess) return cuda_fail(err, e, what);
    ncclResult_t async = ncclSuccess;
    NCHECK(c, ncclCommGetAsyncError(impl_of(c)->comm, &async), "CommGetAsyncError");
    if (async != ncclSuccess) return nccl_fail(err, c, async, what);
    return IG_OK;
}

/* ---- creation -------------------------------------------------------------------------------- */

static void nccl_destroy(ig_comm *c) {
    nccl_impl *m = impl_of(c);
    if (!m) return;
    cudaSetDevice(m->device);
    if (m->stream) cudaStreamSynchronize(m->stream);
    if (m->comm) ncclCommDestroy(m->comm);
    cudaFree(m->one);
    if (m->own) cudaStreamDestroy(m->own);
    ig_free(c->ctx, m);
    c->impl = NULL;
}

/* The state of a communicator on device over an initialised NCCL comm (taken over). */
static ig_status wrap(ig_comm **out, ig_ctx *ctx, ncclComm_t comm, int device, ig_err *err) {
    int rank = 0, size = 1;
    nccl_impl *m = ig_calloc(ctx, 1, sizeof *m);
    ig_comm *c = m ? ig_comm_alloc(ctx, &nccl_ops, 0, 1) : NULL;
    if (!c) {
        ig_free(ctx, m);
        ncclCommDestroy(comm);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a communicator");
    }
    m->comm = comm;
    m->device = device;
    c->impl = m;
    ig_status st = IG_OK;
    ncclResult_t rc = ncclCommUserRank(comm, &rank);
    if (rc == ncclSuccess) rc = ncclCommCount(comm, &size);
    if (rc != ncclSuccess) st = nccl_fail(err, c, rc, "CommUserRank");
    cudaError_t e = cudaSuccess;
    if (st == IG_OK) e = cudaStreamCreateWithFlags(&m->own, cudaStreamNonBlocking);
    if (st == IG_OK && e == cudaSuccess) e = cudaMalloc((void **)&m->one, sizeof(float));
    if (st == IG_OK && e != cudaSuccess) st = cuda_fail(err, e, "creating its stream");
    if (st != IG_OK) {
        ig_comm_free(c);
        return st;
    }
    m->stream = m->own;
    c->rank = rank;
    c->size = size;
    *out = c;
    return IG_OK;
}

/* ig_comm_nccl_create's work (comm.h), reached through the module's entry at the end. */
static ig_status nccl_create(ig_comm **out, ig_comm *world, ig_err *err) {
    *out = NULL;
    /* the device: this process's local rank */
    ig_comm *local = NULL;
    ig_status st = ig_comm_split_local(world, &local, err);
    if (st != IG_OK) return st;
    int lrank = ig_comm_rank(local), lsize = ig_comm_size(local), n = 0, ok = 1;
    ig_comm_free(local);
    char why[512] = "";
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < lsize) {
        snprintf(why, sizeof why,
                 "rank %d: %d processes on this node need one GPU each, %d %s visible%s%s",
                 ig_comm_rank(world), lsize, e == cudaSuccess ? n : 0,
                 (e == cudaSuccess ? n : 0) == 1 ? "is" : "are", e != cudaSuccess ? ": " : "",
                 e != cudaSuccess ? cudaGetErrorString(e) : "");
        cudaGetLastError();
        ok = 0;
    }
    if (ok && (e = cudaSetDevice(lrank)) != cudaSuccess) {
        snprintf(why, sizeof why, "rank %d: cudaSetDevice(%d): %s", ig_comm_rank(world), lrank,
                 cudaGetErrorString(e));
        ok = 0;
    }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t rc = ncclSuccess;
    if (ok && ig_comm_rank(world) == 0 && (rc = ncclGetUniqueId(&id)) != ncclSuccess) {
        snprintf(why, sizeof why, "rank 0: ncclGetUniqueId: %s", ncclGetErrorString(rc));
        ok = 0;
    }
    int all = 0;
    ig_err agree = {0};
    if ((st = ig_comm_all_ok(world, ok, &all, &agree)) != IG_OK) {
        *err = agree;
        return st;
    }
    if (!all)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "NCCL communicator: %s",
                          ok ? "another rank could not start (its error says why)" : why);
    st = ig_comm_bcast(world, &id, sizeof id, IG_COMM_U8, 0, err);
    if (st != IG_OK) return st;
    ncclComm_t comm = NULL;
    rc = ncclCommInitRank(&comm, ig_comm_size(world), id, ig_comm_rank(world));
    if (rc != ncclSuccess) return nccl_fail(err, NULL, rc, "CommInitRank");
    return wrap(out, world->ctx, comm, lrank, err);
}

static int nccl_device(const ig_comm *c) {
    return impl_of(c)->device;
}

static void *nccl_stream(const ig_comm *c) {
    return (void *)impl_of(c)->stream;
}

static ig_status nccl_set_stream(ig_comm *c, void *stream, ig_err *err) {
    (void)err;
    nccl_impl *m = impl_of(c);
    m->stream = stream ? (cudaStream_t)stream : m->own;
    return IG_OK;
}

/* ---- blocking operations --------------------------------------------------------------------- */

static ig_status nccl_split(ig_comm *c, int color, int key, ig_comm **out, ig_err *err) {
    ig_status st = enter(c, err);
    if (st != IG_OK) return st;
    ncclComm_t sub = NULL;
    NCHECK(c, ncclCommSplit(impl_of(c)->comm, color, key, &sub, NULL), "CommSplit");
    return wrap(out, c->ctx, sub, impl_of(c)->device, err);
}

static ig_status nccl_split_local(ig_comm *c, ig_comm **out, ig_err *err) {
    (void)c, (void)out;
    return ig_err_set(err, IG_ERR_UNSUPPORTED,
                      "the node-local group of an NCCL communicator: split the MPI world instead");
}

static ig_status nccl_barrier(ig_comm *c, ig_err *err) {
    ig_status st = enter(c, err);
    if (st != IG_OK) return st;
    nccl_impl *m = impl_of(c);
    NCHECK(c, ncclAllReduce(m->one, m->one, 1, ncclFloat32, ncclSum, m->comm, m->stream),
           "barrier");
    return finish(c, "barrier", err);
}

static ig_status nccl_bcast(ig_comm *c, void *buf, size_t count, ig_comm_type t, int root,
                            ig_err *err) {
    ig_status st = enter(c, err);
    if (st != IG_OK) return st;
    nccl_impl *m = impl_of(c);
    NCHECK(c, ncclBroadcast(buf, buf, count, nccl_type(t), root, m->comm, m->stream), "broadcast");
    return finish(c, "broadcast", err);
}

/* Queues a collective (no waiting). */
static ig_status queue_allreduce(ig_comm *c, const void *send, void *recv, size_t count,
                                 ig_comm_type t, ig_comm_op op, ig_err *err) {
    nccl_impl *m = impl_of(c);
    NCHECK(c, ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), m->comm, m->stream),
           "all-reduce");
    return IG_OK;
}

static ig_status queue_allgather(ig_comm *c, const void *send, void *recv, size_t count,
                                 ig_comm_type t, ig_err *err) {
    nccl_impl *m = impl_of(c);
    NCHECK(c, ncclAllGather(send, recv, count, nccl_type(t), m->comm, m->stream), "all-gather");
    return IG_OK;
}

static ig_status queue_reduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                      ig_comm_type t, ig_comm_op op, ig_err *err) {
    nccl_impl *m = impl_of(c);
    NCHECK(c, ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), m->comm, m->stream),
           "reduce-scatter");
    return IG_OK;
}

/* NCCL has no all-to-all collective: one send and one receive per peer (this rank included),
 * started together as one group (nested in the caller's group, if any: NCCL counts the depth and
 * launches at the outermost end). The group is closed also when queueing fails. */
static ig_status queue_alltoall(ig_comm *c, const void *send, void *recv, size_t count,
                                ig_comm_type t, ig_err *err) {
    nccl_impl *m = impl_of(c);
    size_t bytes = count * ig_comm_elem_size(t);
    NCHECK(c, ncclGroupStart(), "all-to-all: GroupStart");
    ncclResult_t rc = ncclSuccess;
    for (int p = 0; rc == ncclSuccess && p < c->size; p++) {
        rc = ncclSend((const char *)send + (size_t)p * bytes, count, nccl_type(t), p, m->comm,
                      m->stream);
        if (rc == ncclSuccess)
            rc = ncclRecv((char *)recv + (size_t)p * bytes, count, nccl_type(t), p, m->comm,
                          m->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    if (rc == ncclSuccess) rc = end;
    return rc == ncclSuccess ? IG_OK : nccl_fail(err, c, rc, "all-to-all");
}

static ig_status queue_p2p(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer, int recv,
                           ig_err *err) {
    nccl_impl *m = impl_of(c);
    if (recv)
        NCHECK(c, ncclRecv(buf, count, nccl_type(t), peer, m->comm, m->stream), "receive");
    else
        NCHECK(c, ncclSend(buf, count, nccl_type(t), peer, m->comm, m->stream), "send");
    return IG_OK;
}

static ig_status nccl_allreduce(ig_comm *c, const void *send, void *recv, size_t count,
                                ig_comm_type t, ig_comm_op op, ig_err *err) {
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_allreduce(c, send, recv, count, t, op, err);
    return st != IG_OK ? st : finish(c, "all-reduce", err);
}

static ig_status nccl_allgather(ig_comm *c, const void *send, void *recv, size_t count,
                                ig_comm_type t, ig_err *err) {
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_allgather(c, send, recv, count, t, err);
    return st != IG_OK ? st : finish(c, "all-gather", err);
}

static ig_status nccl_reduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                     ig_comm_type t, ig_comm_op op, ig_err *err) {
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_reduce_scatter(c, send, recv, count, t, op, err);
    return st != IG_OK ? st : finish(c, "reduce-scatter", err);
}

static ig_status nccl_alltoall(ig_comm *c, const void *send, void *recv, size_t count,
                               ig_comm_type t, ig_err *err) {
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_alltoall(c, send, recv, count, t, err);
    return st != IG_OK ? st : finish(c, "all-to-all", err);
}

static ig_status nccl_send(ig_comm *c, const void *buf, size_t count, ig_comm_type t, int peer,
                           int tag, ig_err *err) {
    (void)tag;
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_p2p(c, (void *)buf, count, t, peer, 0, err);
    return st != IG_OK ? st : finish(c, "send", err);
}

static ig_status nccl_recv(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer, int tag,
                           ig_err *err) {
    (void)tag;
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_p2p(c, buf, count, t, peer, 1, err);
    return st != IG_OK ? st : finish(c, "receive", err);
}

static ig_status nccl_gather_bytes(ig_comm *c, const void *data, size_t len, int root, void **out,
                                   size_t *out_len, size_t *lens, ig_err *err) {
    (void)c, (void)data, (void)len, (void)root, (void)out, (void)out_len, (void)lens;
    return ig_err_set(err, IG_ERR_UNSUPPORTED,
                      "gathering host bytes over an NCCL communicator: use the MPI world");
}

/* ---- non-blocking operations and groups ------------------------------------------------------ */

/* After an operation of req was queued: outside a group, an event marks its completion. */
static ig_status mark(ig_comm *c, ig_comm_req *req, ig_err *err) {
    req->impl = NULL;
    if (c->in_group) return IG_OK; /* queued at the group's end: wait syncs the stream */
    cudaEvent_t ev;
    CCHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
    cudaError_t e = cudaEventRecord(ev, impl_of(c)->stream);
    if (e != cudaSuccess) {
        cudaEventDestroy(ev);
        return cuda_fail(err, e, "cudaEventRecord");
    }
    req->impl = ev;
    return IG_OK;
}

static ig_status nccl_iallreduce(ig_comm *c, const void *send, void *recv, size_t count,
                                 ig_comm_type t, ig_comm_op op, ig_comm_req *req, ig_err *err) {
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_allreduce(c, send, recv, count, t, op, err);
    return st != IG_OK ? st : mark(c, req, err);
}

static ig_status nccl_iallgather(ig_comm *c, const void *send, void *recv, size_t count,
                                 ig_comm_type t, ig_comm_req *req, ig_err *err) {
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_allgather(c, send, recv, count, t, err);
    return st != IG_OK ? st : mark(c, req, err);
}

static ig_status nccl_ireduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                      ig_comm_type t, ig_comm_op op, ig_comm_req *req,
                                      ig_err *err) {
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_reduce_scatter(c, send, recv, count, t, op, err);
    return st != IG_OK ? st : mark(c, req, err);
}

static ig_status nccl_ialltoall(ig_comm *c, const void *send, void *recv, size_t count,
                                ig_comm_type t, ig_comm_req *req, ig_err *err) {
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_alltoall(c, send, recv, count, t, err);
    return st != IG_OK ? st : mark(c, req, err);
}

static ig_status nccl_isend(ig_comm *c, const void *buf, size_t count, ig_comm_type t, int peer,
                            int tag, ig_comm_req *req, ig_err *err) {
    (void)tag;
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_p2p(c, (void *)buf, count, t, peer, 0, err);
    return st != IG_OK ? st : mark(c, req, err);
}

static ig_status nccl_irecv(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer, int tag,
                            ig_comm_req *req, ig_err *err) {
    (void)tag;
    ig_status st = enter(c, err);
    if (st == IG_OK) st = queue_p2p(c, buf, count, t, peer, 1, err);
    return st != IG_OK ? st : mark(c, req, err);
}

static ig_status nccl_wait(ig_comm_req *req, ig_err *err) {
    ig_comm *c = req->comm;
    cudaEvent_t ev = (cudaEvent_t)req->impl;
    req->impl = NULL;
    req->done = 1;
    ig_status st = enter(c, err);
    if (st != IG_OK) {
        if (ev) cudaEventDestroy(ev);
        return st;
    }
    if (!ev && c->in_group)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "waiting for a %s inside its group: call ig_comm_group_end first",
                          req->what);
    cudaError_t e = ev ? cudaEventSynchronize(ev) : cudaStreamSynchronize(impl_of(c)->stream);
    if (ev) cudaEventDestroy(ev);
    if (e != cudaSuccess) return cuda_fail(err, e, req->what);
    ncclResult_t async = ncclSuccess;
    NCHECK(c, ncclCommGetAsyncError(impl_of(c)->comm, &async), "CommGetAsyncError");
    return async == ncclSuccess ? IG_OK : nccl_fail(err, c, async, req->what);
}

static ig_status nccl_test(ig_comm_req *req, int *done, ig_err *err) {
    ig_comm *c = req->comm;
    *done = 0;
    if (!req->impl && c->in_group) return IG_OK; /* not started yet */
    ig_status st = enter(c, err);
    if (st != IG_OK) return st;
    cudaError_t e =
        req->impl ? cudaEventQuery((cudaEvent_t)req->impl) : cudaStreamQuery(impl_of(c)->stream);
    if (e == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: clear it */
        return IG_OK;
    }
    if (e != cudaSuccess) return cuda_fail(err, e, req->what);
    *done = 1;
    return IG_OK;
}

static ig_status nccl_group_begin(ig_comm *c, ig_err *err) {
    ig_status st = enter(c, err);
    if (st != IG_OK) return st;
    NCHECK(c, ncclGroupStart(), "GroupStart");
    return IG_OK;
}

static ig_status nccl_group_end(ig_comm *c, ig_err *err) {
    ig_status st = enter(c, err);
    if (st != IG_OK) return st;
    NCHECK(c, ncclGroupEnd(), "GroupEnd");
    return IG_OK;
}

static const ig_comm_ops nccl_ops = {
    .name = "nccl",
    .split = nccl_split,
    .split_local = nccl_split_local,
    .barrier = nccl_barrier,
    .bcast = nccl_bcast,
    .allreduce = nccl_allreduce,
    .allgather = nccl_allgather,
    .reduce_scatter = nccl_reduce_scatter,
    .alltoall = nccl_alltoall,
    .send = nccl_send,
    .recv = nccl_recv,
    .gather_bytes = nccl_gather_bytes,
    .iallreduce = nccl_iallreduce,
    .iallgather = nccl_iallgather,
    .ireduce_scatter = nccl_ireduce_scatter,
    .ialltoall = nccl_ialltoall,
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .wait = nccl_wait,
    .test = nccl_test,
    .group_begin = nccl_group_begin,
    .group_end = nccl_group_end,
    .destroy = nccl_destroy,
    .device = nccl_device,
    .stream = nccl_stream,
    .set_stream = nccl_set_stream,
};

/* The CUDA module's entry for the communicator (comm_internal.h): what comm_nccl_host.c finds by
 * name. */
__attribute__((visibility("default"))) const ig_comm_nccl_module ig_comm_nccl_entry = {
    .stamp = {IG_VERSION_STRING, sizeof(ig_comm_ops), sizeof(struct ig_comm)},
    .create = nccl_create,
};
