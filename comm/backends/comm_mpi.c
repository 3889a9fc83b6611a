/* comm_mpi.c - the MPI backend of the communicator (OpenMPI on these machines; any MPI-3
 * library works). The only file of ingot that includes mpi.h.
 *
 * Errors: every communicator made here has MPI_ERRORS_RETURN, and every call's result is turned
 * into an ig_status with MPI's own message, so a failing transport is reported, not aborted on.
 * Counts: MPI counts are ints; element counts above 2^30 are sent in pieces where the operation
 * allows (broadcast, all-reduce, send/receive) and refused where it does not. */
#include "../comm_internal.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <string.h>

#define CHUNK ((size_t)1 << 30)

typedef struct mpi_impl {
    MPI_Comm comm;
    int finalize; /* the world communicator of a process whose MPI this backend initialised */
} mpi_impl;

static MPI_Comm comm_of(const ig_comm *c) {
    return ((const mpi_impl *)c->impl)->comm;
}

static ig_status mpi_fail(ig_err *err, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return ig_err_set(err, IG_ERR_IO, "MPI %s failed: %s", what, msg);
}

#define CHECK(call, what)                                                                          \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) return mpi_fail(err, rc_, what);                                   \
    } while (0)

static MPI_Datatype mpi_type(ig_comm_type t) {
    switch (t) {
    case IG_COMM_U8:
        return MPI_UINT8_T;
    case IG_COMM_I32:
        return MPI_INT32_T;
    case IG_COMM_I64:
        return MPI_INT64_T;
    case IG_COMM_U64:
        return MPI_UINT64_T;
    case IG_COMM_F32:
        return MPI_FLOAT;
    case IG_COMM_BF16: /* moved as 16-bit words; summed by bf16_sum (reduce_op) */
        return MPI_UINT16_T;
    case IG_COMM_F64:
    default:
        return MPI_DOUBLE;
    }
}

static MPI_Op mpi_op(ig_comm_op op) {
    return op == IG_COMM_MAX ? MPI_MAX : op == IG_COMM_MIN ? MPI_MIN : MPI_SUM;
}

static ig_status fits_int(size_t n, const char *what, ig_err *err) {
    if (n > (size_t)INT_MAX)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "MPI %s of %zu elements: more than 2^31-1", what,
                          n);
    return IG_OK;
}

static const ig_comm_ops mpi_ops;

/* MPI has no bf16 arithmetic: bf16 moves as 16-bit words and is summed by an operation of ours,
 * which adds each pair in fp32 and rounds the sum to bf16 (core's ig_bf16_from_f32), as NCCL's
 * bf16 sum does; max and min of bf16 are not needed and refused. Made at the first bf16 sum (MPI
 * is up by then) and freed by MPI_Finalize. */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = ig_bf16_from_f32(ig_bf16_to_f32(a[i]) + ig_bf16_to_f32(b[i]));
}

static MPI_Op bf16_sum_op = MPI_OP_NULL;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;
static void bf16_make(void) {
    if (MPI_Op_create(bf16_sum, 1, &bf16_sum_op) != MPI_SUCCESS) bf16_sum_op = MPI_OP_NULL;
}

/* The MPI operation of op over type t into *out, or an error naming `what`. */
static ig_status reduce_op(ig_comm_type t, ig_comm_op op, MPI_Op *out, const char *what,
                           ig_err *err) {
    *out = MPI_OP_NULL; /* set on every path: gcc -O3 cannot see that a refusal returns an error */
    if (t != IG_COMM_BF16) {
        *out = mpi_op(op);
        return IG_OK;
    }
    if (op != IG_COMM_SUM)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "MPI %s of bf16: only a sum is defined", what);
    pthread_once(&bf16_once, bf16_make);
    if (bf16_sum_op == MPI_OP_NULL)
        return ig_err_set(err, IG_ERR_IO, "MPI %s of bf16: MPI_Op_create failed", what);
    *out = bf16_sum_op;
    return IG_OK;
}

static ig_status wrap(ig_comm **out, ig_ctx *ctx, MPI_Comm comm, int finalize, ig_err *err) {
    int rank, size;
    CHECK(MPI_Comm_rank(comm, &rank), "Comm_rank");
    CHECK(MPI_Comm_size(comm, &size), "Comm_size");
    mpi_impl *m = ig_calloc(ctx, 1, sizeof *m);
    ig_comm *c = m ? ig_comm_alloc(ctx, &mpi_ops, rank, size) : NULL;
    if (!c) {
        ig_free(ctx, m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a communicator");
    }
    m->comm = comm;
    m->finalize = finalize;
    c->impl = m;
    c->is_world = finalize;
    *out = c;
    return IG_OK;
}

int ig_comm_mpi_available(void) {
    return 1;
}

ig_status ig_comm_mpi_world(ig_comm **out, ig_ctx *ctx, ig_err *err) {
    *out = NULL;
    int inited = 0, provided = 0, ours = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "initialisation");
        ours = 1;
    }
    MPI_Comm world;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        ig_status st = mpi_fail(err, rc, "Comm_dup");
        if (ours) MPI_Finalize();
        return st;
    }
    ig_status st = wrap(out, ctx, world, ours, err);
    if (st != IG_OK) {
        MPI_Comm_free(&world);
        if (ours) MPI_Finalize();
    }
    return st;
}

static void mpi_destroy(ig_comm *c) {
    mpi_impl *m = c->impl;
    if (!m) return;
    MPI_Comm_free(&m->comm);
    if (m->finalize) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    ig_free(c->ctx, m);
    c->impl = NULL;
}

static ig_status mpi_split(ig_comm *c, int color, int key, ig_comm **out, ig_err *err) {
    MPI_Comm sub;
    CHECK(MPI_Comm_split(comm_of(c), color, key, &sub), "Comm_split");
    int rc = MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&sub);
        return mpi_fail(err, rc, "Comm_set_errhandler");
    }
    ig_status st = wrap(out, c->ctx, sub, 0, err);
    if (st != IG_OK) MPI_Comm_free(&sub);
    return st;
}

static ig_status mpi_split_local(ig_comm *c, ig_comm **out, ig_err *err) {
    MPI_Comm sub;
    CHECK(MPI_Comm_split_type(comm_of(c), MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &sub),
          "Comm_split_type");
    int rc = MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
        MPI_Comm_free(&sub);
        return mpi_fail(err, rc, "Comm_set_errhandler");
    }
    ig_status st = wrap(out, c->ctx, sub, 0, err);
    if (st != IG_OK) MPI_Comm_free(&sub);
    return st;
}

static ig_status mpi_barrier(ig_comm *c, ig_err *err) {
    CHECK(MPI_Barrier(comm_of(c)), "barrier");
    return IG_OK;
}

static ig_status mpi_bcast(ig_comm *c, void *buf, size_t count, ig_comm_type t, int root,
                           ig_err *err) {
    size_t es = ig_comm_elem_size(t);
    for (size_t at = 0; at < count || (count == 0 && at == 0); at += CHUNK) {
        size_t n = count - at < CHUNK ? count - at : CHUNK;
        CHECK(MPI_Bcast((char *)buf + at * es, (int)n, mpi_type(t), root, comm_of(c)), "broadcast");
        if (count == 0) break;
    }
    return IG_OK;
}

static ig_status mpi_allreduce(ig_comm *c, const void *send, void *recv, size_t count,
                               ig_comm_type t, ig_comm_op op, ig_err *err) {
    MPI_Op mop;
    ig_status st = reduce_op(t, op, &mop, "all-reduce", err);
    if (st != IG_OK) return st;
    size_t es = ig_comm_elem_size(t);
    for (size_t at = 0; at < count; at += CHUNK) {
        size_t n = count - at < CHUNK ? count - at : CHUNK;
        const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + at * es;
        CHECK(MPI_Allreduce(s, (char *)recv + at * es, (int)n, mpi_type(t), mop, comm_of(c)),
              "all-reduce");
    }
    return IG_OK;
}

/* An all-gather whose send is this rank's own place in recv runs in place (MPI_IN_PLACE: MPI
 * forbids overlapping buffers otherwise). */
static const void *gather_send(ig_comm *c, const void *send, void *recv, size_t count,
                               ig_comm_type t) {
    const char *own = (const char *)recv + (size_t)c->rank * count * ig_comm_elem_size(t);
    return send == own ? MPI_IN_PLACE : send;
}

static ig_status mpi_allgather(ig_comm *c, const void *send, void *recv, size_t count,
                               ig_comm_type t, ig_err *err) {
    ig_status st = fits_int(count * (size_t)c->size, "all-gather", err);
    if (st != IG_OK) return st;
    CHECK(MPI_Allgather(gather_send(c, send, recv, count, t), (int)count, mpi_type(t), recv,
                        (int)count, mpi_type(t), comm_of(c)),
          "all-gather");
    return IG_OK;
}

static ig_status mpi_reduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                    ig_comm_type t, ig_comm_op op, ig_err *err) {
    MPI_Op mop;
    ig_status st = reduce_op(t, op, &mop, "reduce-scatter", err);
    if (st == IG_OK) st = fits_int(count * (size_t)c->size, "reduce-scatter", err);
    if (st != IG_OK) return st;
    CHECK(MPI_Reduce_scatter_block(send, recv, (int)count, mpi_type(t), mop, comm_of(c)),
          "reduce-scatter");
    return IG_OK;
}

static ig_status mpi_alltoall(ig_comm *c, const void *send, void *recv, size_t count,
                              ig_comm_type t, ig_err *err) {
    ig_status st = fits_int(count * (size_t)c->size, "all-to-all", err);
    if (st != IG_OK) return st;
    CHECK(MPI_Alltoall(send, (int)count, mpi_type(t), recv, (int)count, mpi_type(t), comm_of(c)),
          "all-to-all");
    return IG_OK;
}

static ig_status mpi_send(ig_comm *c, const void *buf, size_t count, ig_comm_type t, int peer,
                          int tag, ig_err *err) {
    size_t es = ig_comm_elem_size(t);
    for (size_t at = 0; at < count || (count == 0 && at == 0); at += CHUNK) {
        size_t n = count - at < CHUNK ? count - at : CHUNK;
        CHECK(MPI_Send((const char *)buf + at * es, (int)n, mpi_type(t), peer, tag, comm_of(c)),
              "send");
        if (count == 0) break;
    }
    return IG_OK;
}

static ig_status mpi_recv(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer, int tag,
                          ig_err *err) {
    size_t es = ig_comm_elem_size(t);
    for (size_t at = 0; at < count || (count == 0 && at == 0); at += CHUNK) {
        size_t n = count - at < CHUNK ? count - at : CHUNK;
        MPI_Status status;
        CHECK(MPI_Recv((char *)buf + at * es, (int)n, mpi_type(t), peer, tag, comm_of(c), &status),
              "receive");
        int got = 0;
        CHECK(MPI_Get_count(&status, mpi_type(t), &got), "Get_count");
        if ((size_t)got != n)
            return ig_err_set(err, IG_ERR_IO,
                              "MPI receive from rank %d: %d elements arrived, %zu expected", peer,
                              got, n);
        if (count == 0) break;
    }
    return IG_OK;
}

static ig_status mpi_gather_bytes(ig_comm *c, const void *data, size_t len, int root, void **out,
                                  size_t *out_len, size_t *lens, ig_err *err) {
    ig_status st = fits_int(len, "gather", err);
    if (st != IG_OK) return st;
    int mine = (int)len, *counts = NULL, *displs = NULL;
    int is_root = c->rank == root;
    if (is_root) {
        counts = ig_calloc(c->ctx, (size_t)c->size, sizeof *counts);
        displs = ig_calloc(c->ctx, (size_t)c->size, sizeof *displs);
        if (!counts || !displs) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    /* every rank takes part in both collectives, even after a local failure */
    int rc = MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, root, comm_of(c));
    if (rc != MPI_SUCCESS && st == IG_OK) st = mpi_fail(err, rc, "gather");
    size_t total = 0;
    char *all = NULL;
    if (is_root && st == IG_OK) {
        for (int r = 0; r < c->size; r++) {
            if (total + (size_t)counts[r] > (size_t)INT_MAX) {
                st = ig_err_set(err, IG_ERR_UNSUPPORTED, "MPI gather: more than 2^31-1 bytes");
                break;
            }
            displs[r] = (int)total;
            total += (size_t)counts[r];
        }
        all = st == IG_OK ? ig_alloc(c->ctx, total ? total : 1) : NULL;
        if (st == IG_OK && !all) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    if (is_root && st != IG_OK && counts) /* receive nothing, but stay in step with the others */
        for (int r = 0; r < c->size; r++) counts[r] = 0, displs[r] = 0;
    char dummy;
    rc = MPI_Gatherv(data ? data : &dummy, mine, MPI_UINT8_T, all ? all : &dummy, counts, displs,
                     MPI_UINT8_T, root, comm_of(c));
    if (rc != MPI_SUCCESS && st == IG_OK) st = mpi_fail(err, rc, "gather");
    if (is_root && st == IG_OK) {
        if (lens)
            for (int r = 0; r < c->size; r++) lens[r] = (size_t)counts[r];
        *out = all;
        *out_len = total;
        all = NULL;
    }
    ig_free(c->ctx, all);
    ig_free(c->ctx, counts);
    ig_free(c->ctx, displs);
    return st;
}

/* ---- non-blocking ---------------------------------------------------------------------------- */

/* A request's MPI requests: one per chunk of at most CHUNK elements. For a receive, the element
 * count each chunk expects (checked on completion). */
typedef struct mpi_req {
    int n;
    int recv;
    MPI_Datatype type;
    MPI_Request *r;
    int *expect;
} mpi_req;

static ig_status req_alloc(ig_comm *c, ig_comm_req *req, size_t count, int recv, ig_comm_type t,
                           ig_err *err) {
    size_t n = count == 0 ? 1 : (count + CHUNK - 1) / CHUNK;
    mpi_req *m = ig_calloc(c->ctx, 1, sizeof *m);
    if (m) m->r = ig_calloc(c->ctx, n, sizeof *m->r);
    if (m && recv) m->expect = ig_calloc(c->ctx, n, sizeof *m->expect);
    if (!m || !m->r || (recv && !m->expect)) {
        if (m) ig_free(c->ctx, m->r);
        ig_free(c->ctx, m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    m->recv = recv;
    m->type = mpi_type(t);
    for (size_t i = 0; i < n; i++) m->r[i] = MPI_REQUEST_NULL;
    req->impl = m;
    return IG_OK;
}

static void req_free(ig_comm *c, ig_comm_req *req) {
    mpi_req *m = req->impl;
    if (!m) return;
    for (int i = 0; i < m->n; i++)
        if (m->r[i] != MPI_REQUEST_NULL) MPI_Request_free(&m->r[i]);
    ig_free(c->ctx, m->r);
    ig_free(c->ctx, m->expect);
    ig_free(c->ctx, m);
    req->impl = NULL;
}

/* Frees the request after a failure to start one of its chunks. */
static ig_status start_failed(ig_comm *c, ig_comm_req *req, int rc, const char *what, ig_err *err) {
    mpi_req *m = req->impl;
    for (int i = 0; i < m->n; i++)
        if (m->r[i] != MPI_REQUEST_NULL) MPI_Cancel(&m->r[i]);
    req_free(c, req);
    return mpi_fail(err, rc, what);
}

static ig_status mpi_iallreduce(ig_comm *c, const void *send, void *recv, size_t count,
                                ig_comm_type t, ig_comm_op op, ig_comm_req *req, ig_err *err) {
    MPI_Op mop;
    ig_status st = reduce_op(t, op, &mop, "all-reduce", err);
    if (st == IG_OK) st = req_alloc(c, req, count, 0, t, err);
    if (st != IG_OK) return st;
    mpi_req *m = req->impl;
    size_t es = ig_comm_elem_size(t);
    for (size_t at = 0; at < count; at += CHUNK) {
        size_t n = count - at < CHUNK ? count - at : CHUNK;
        const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + at * es;
        int rc = MPI_Iallreduce(s, (char *)recv + at * es, (int)n, mpi_type(t), mop, comm_of(c),
                                &m->r[m->n]);
        if (rc != MPI_SUCCESS) return start_failed(c, req, rc, "all-reduce", err);
        m->n++;
    }
    if (count == 0) req->done = 1;
    return IG_OK;
}

static ig_status mpi_iallgather(ig_comm *c, const void *send, void *recv, size_t count,
                                ig_comm_type t, ig_comm_req *req, ig_err *err) {
    ig_status st = fits_int(count * (size_t)c->size, "all-gather", err);
    if (st == IG_OK) st = req_alloc(c, req, 0, 0, t, err);
    if (st != IG_OK) return st;
    mpi_req *m = req->impl;
    int rc = MPI_Iallgather(gather_send(c, send, recv, count, t), (int)count, mpi_type(t), recv,
                            (int)count, mpi_type(t), comm_of(c), &m->r[0]);
    if (rc != MPI_SUCCESS) return start_failed(c, req, rc, "all-gather", err);
    m->n = 1;
    return IG_OK;
}

static ig_status mpi_ireduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                     ig_comm_type t, ig_comm_op op, ig_comm_req *req, ig_err *err) {
    MPI_Op mop;
    ig_status st = reduce_op(t, op, &mop, "reduce-scatter", err);
    if (st == IG_OK) st = fits_int(count * (size_t)c->size, "reduce-scatter", err);
    if (st == IG_OK) st = req_alloc(c, req, 0, 0, t, err);
    if (st != IG_OK) return st;
    mpi_req *m = req->impl;
    int rc =
        MPI_Ireduce_scatter_block(send, recv, (int)count, mpi_type(t), mop, comm_of(c), &m->r[0]);
    if (rc != MPI_SUCCESS) return start_failed(c, req, rc, "reduce-scatter", err);
    m->n = 1;
    return IG_OK;
}

static ig_status mpi_ialltoall(ig_comm *c, const void *send, void *recv, size_t count,
                               ig_comm_type t, ig_comm_req *req, ig_err *err) {
    ig_status st = fits_int(count * (size_t)c->size, "all-to-all", err);
    if (st == IG_OK) st = req_alloc(c, req, 0, 0, t, err);
    if (st != IG_OK) return st;
    mpi_req *m = req->impl;
    int rc = MPI_Ialltoall(send, (int)count, mpi_type(t), recv, (int)count, mpi_type(t), comm_of(c),
                           &m->r[0]);
    if (rc != MPI_SUCCESS) return start_failed(c, req, rc, "all-to-all", err);
    m->n = 1;
    return IG_OK;
}

static ig_status mpi_ip2p(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer, int tag,
                          int recv, ig_comm_req *req, ig_err *err) {
    ig_status st = req_alloc(c, req, count, recv, t, err);
    if (st != IG_OK) return st;
    mpi_req *m = req->impl;
    size_t es = ig_comm_elem_size(t);
    for (size_t at = 0; at < count || (count == 0 && at == 0); at += CHUNK) {
        size_t n = count - at < CHUNK ? count - at : CHUNK;
        int rc = recv ? MPI_Irecv((char *)buf + at * es, (int)n, mpi_type(t), peer, tag, comm_of(c),
                                  &m->r[m->n])
                      : MPI_Isend((const char *)buf + at * es, (int)n, mpi_type(t), peer, tag,
                                  comm_of(c), &m->r[m->n]);
        if (rc != MPI_SUCCESS) return start_failed(c, req, rc, recv ? "receive" : "send", err);
        if (recv) m->expect[m->n] = (int)n;
        m->n++;
        if (count == 0) break;
    }
    return IG_OK;
}

static ig_status mpi_isend(ig_comm *c, const void *buf, size_t count, ig_comm_type t, int peer,
                           int tag, ig_comm_req *req, ig_err *err) {
    return mpi_ip2p(c, (void *)buf, count, t, peer, tag, 0, req, err);
}

static ig_status mpi_irecv(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer, int tag,
                           ig_comm_req *req, ig_err *err) {
    return mpi_ip2p(c, buf, count, t, peer, tag, 1, req, err);
}

static ig_status mpi_wait(ig_comm_req *req, ig_err *err) {
    mpi_req *m = req->impl;
    ig_status st = IG_OK;
    for (int i = 0; m && i < m->n; i++) {
        MPI_Status status;
        int rc = MPI_Wait(&m->r[i], &status);
        if (rc != MPI_SUCCESS && st == IG_OK) st = mpi_fail(err, rc, req->what);
        if (rc == MPI_SUCCESS && m->recv && st == IG_OK) {
            int got = 0;
            MPI_Get_count(&status, m->type, &got);
            if (got != m->expect[i])
                st = ig_err_set(err, IG_ERR_IO, "MPI receive: %d elements arrived, %d expected",
                                got, m->expect[i]);
        }
    }
    req->done = 1;
    req_free(req->comm, req);
    return st;
}

static ig_status mpi_test(ig_comm_req *req, int *done, ig_err *err) {
    mpi_req *m = req->impl;
    int flag = 1;
    if (m && m->n) {
        int rc = MPI_Testall(m->n, m->r, &flag, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, req->what);
    }
    *done = flag;
    return IG_OK;
}

static const ig_comm_ops mpi_ops = {
    .name = "mpi",
    .split = mpi_split,
    .split_local = mpi_split_local,
    .barrier = mpi_barrier,
    .bcast = mpi_bcast,
    .allreduce = mpi_allreduce,
    .allgather = mpi_allgather,
    .reduce_scatter = mpi_reduce_scatter,
    .alltoall = mpi_alltoall,
    .send = mpi_send,
    .recv = mpi_recv,
    .gather_bytes = mpi_gather_bytes,
    .iallreduce = mpi_iallreduce,
    .iallgather = mpi_iallgather,
    .ireduce_scatter = mpi_ireduce_scatter,
    .ialltoall = mpi_ialltoall,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .wait = mpi_wait,
    .test = mpi_test,
    .destroy = mpi_destroy,
};
