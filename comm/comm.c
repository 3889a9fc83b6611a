/* comm.c - the communicator interface: argument checks, then the backend's operation. Which
 * backend the world communicator gets is decided here, from the launcher's environment. */
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>

size_t ig_comm_type_size(ig_comm_type t) {
    return ig_comm_elem_size(t);
}

static int env_int(const char *name, int *out) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > (1 << 24)) return 0;
    *out = (int)v;
    return 1;
}

/* The launcher's rank and size (OpenMPI's mpirun, or a PMI launcher: MPICH, Slurm's pmi2);
 * 0 when this process was not started by one. */
static int launched(int *rank, int *size) {
    if (env_int("OMPI_COMM_WORLD_SIZE", size) && env_int("OMPI_COMM_WORLD_RANK", rank)) return 1;
    if (env_int("PMI_SIZE", size) && env_int("PMI_RANK", rank)) return 1;
    int r;
    if (env_int("PMIX_RANK", &r)) { /* PMIx (srun --mpi=pmix): the size comes from MPI */
        *rank = r;
        *size = 0;
        return 1;
    }
    return 0;
}

void ig_comm_launch_info(int *rank, int *size) {
    int r = 0, s = 1;
    if (!launched(&r, &s) || s < 1 || r >= s) r = 0, s = 1;
    *rank = r;
    *size = s;
}

/* Every rank runs the same command (the first collective of the world). */
static ig_status agree_command(ig_comm *c, const char *command, ig_err *err) {
    enum { N = 64 };
    char mine[N] = {0};
    snprintf(mine, sizeof mine, "%s", command ? command : "");
    char *all = ig_alloc(c->ctx, (size_t)c->size * N);
    if (!all) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = ig_comm_allgather(c, mine, all, N, IG_COMM_U8, err);
    for (int r = 0; st == IG_OK && r < c->size; r++) {
        const char *theirs = all + (size_t)r * N;
        if (memcmp(theirs, mine, N) != 0)
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "rank %d of this mpirun runs `ingot %.*s` and rank %d `ingot %s`: "
                            "every rank of one launch must run the same command",
                            r, N - 1, theirs, c->rank, mine);
    }
    ig_free(c->ctx, all);
    return st;
}

ig_status ig_comm_world(ig_comm **out, ig_ctx *ctx, const char *command, ig_err *err) {
    *out = NULL;
    int rank = 0, size = 1;
    if (!launched(&rank, &size) || size == 1) return ig_comm_single(out, ctx, err);
    if (!ig_comm_mpi_available())
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "started by a launcher as rank %d of %d processes, but this ingot was "
                          "built without MPI: install libopenmpi-dev and rebuild (make build)",
                          rank, size);
    ig_status st = ig_comm_mpi_world(out, ctx, err);
    if (st == IG_OK && (st = agree_command(*out, command, err)) != IG_OK) {
        ig_comm_free(*out);
        *out = NULL;
    }
    return st;
}

void ig_comm_free(ig_comm *c) {
    if (!c) return;
    if (c->ops && c->ops->destroy) c->ops->destroy(c);
    ig_free(c->ctx, c);
}

int ig_comm_rank(const ig_comm *c) {
    return c->rank;
}
int ig_comm_size(const ig_comm *c) {
    return c->size;
}
const char *ig_comm_backend(const ig_comm *c) {
    return c->ops->name;
}

/* ---- checks ---------------------------------------------------------------------------------- */

static ig_status check_buf(const ig_comm *c, const char *what, const void *buf, size_t count,
                           ig_comm_type t, size_t times, ig_err *err) {
    size_t es = ig_comm_type_size(t), bytes;
    if (!es) return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: unknown element type %d", what, t);
    if (__builtin_mul_overflow(count, es, &bytes) || __builtin_mul_overflow(bytes, times, &bytes))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: %zu elements overflow the address space",
                          what, count);
    if (count && !buf)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: NULL buffer for %zu elements", what, count);
    (void)c;
    return IG_OK;
}

static ig_status check_rank(const ig_comm *c, const char *what, const char *role, int r,
                            ig_err *err) {
    if (r < 0 || r >= c->size)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: %s %d is not a rank of a group of %d", what,
                          role, r, c->size);
    return IG_OK;
}

static ig_status check_op(const char *what, ig_comm_op op, ig_err *err) {
    if ((unsigned)op >= IG_COMM_OP_COUNT)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: unknown reduction %d", what, op);
    return IG_OK;
}

/* ---- operations ------------------------------------------------------------------------------ */

ig_status ig_comm_split(ig_comm *c, int color, int key, ig_comm **out, ig_err *err) {
    *out = NULL;
    if (color < 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "comm split: color must be >= 0, got %d", color);
    return c->ops->split(c, color, key, out, err);
}

ig_status ig_comm_split_local(ig_comm *c, ig_comm **out, ig_err *err) {
    *out = NULL;
    return c->ops->split_local(c, out, err);
}

/* Blocking operations inside a group would wait for operations that start only at its end. */
static ig_status check_not_grouped(const ig_comm *c, const char *what, ig_err *err) {
    if (c->in_group)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s inside a group (ig_comm_group_begin): use the non-blocking form, "
                          "and wait after ig_comm_group_end",
                          what);
    return IG_OK;
}

ig_status ig_comm_group_begin(ig_comm *c, ig_err *err) {
    if (c->in_group)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "ig_comm_group_begin: groups do not nest");
    ig_status st = c->ops->group_begin ? c->ops->group_begin(c, err) : IG_OK;
    if (st == IG_OK) c->in_group = 1;
    return st;
}

ig_status ig_comm_group_end(ig_comm *c, ig_err *err) {
    if (!c->in_group)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "ig_comm_group_end without ig_comm_group_begin");
    c->in_group = 0;
    return c->ops->group_end ? c->ops->group_end(c, err) : IG_OK;
}

ig_status ig_comm_barrier(ig_comm *c, ig_err *err) {
    ig_status st = check_not_grouped(c, "barrier", err);
    return st != IG_OK ? st : c->ops->barrier(c, err);
}

ig_status ig_comm_bcast(ig_comm *c, void *buf, size_t count, ig_comm_type type, int root,
                        ig_err *err) {
    ig_status st = check_not_grouped(c, "broadcast", err);
    if (st == IG_OK) st = check_buf(c, "broadcast", buf, count, type, 1, err);
    if (st == IG_OK) st = check_rank(c, "broadcast", "root", root, err);
    return st != IG_OK ? st : c->ops->bcast(c, buf, count, type, root, err);
}

ig_status ig_comm_allreduce(ig_comm *c, const void *send, void *recv, size_t count,
                            ig_comm_type type, ig_comm_op op, ig_err *err) {
    ig_status st = check_not_grouped(c, "all-reduce", err);
    if (st == IG_OK) st = check_buf(c, "all-reduce", send, count, type, 1, err);
    if (st == IG_OK) st = check_buf(c, "all-reduce", recv, count, type, 1, err);
    if (st == IG_OK) st = check_op("all-reduce", op, err);
    return st != IG_OK ? st : c->ops->allreduce(c, send, recv, count, type, op, err);
}

ig_status ig_comm_allgather(ig_comm *c, const void *send, void *recv, size_t count,
                            ig_comm_type type, ig_err *err) {
    ig_status st = check_not_grouped(c, "all-gather", err);
    if (st == IG_OK) st = check_buf(c, "all-gather", send, count, type, 1, err);
    if (st == IG_OK) st = check_buf(c, "all-gather", recv, count, type, (size_t)c->size, err);
    return st != IG_OK ? st : c->ops->allgather(c, send, recv, count, type, err);
}

ig_status ig_comm_reduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                 ig_comm_type type, ig_comm_op op, ig_err *err) {
    ig_status st = check_not_grouped(c, "reduce-scatter", err);
    if (st == IG_OK) st = check_buf(c, "reduce-scatter", send, count, type, (size_t)c->size, err);
    if (st == IG_OK) st = check_buf(c, "reduce-scatter", recv, count, type, 1, err);
    if (st == IG_OK) st = check_op("reduce-scatter", op, err);
    return st != IG_OK ? st : c->ops->reduce_scatter(c, send, recv, count, type, op, err);
}

/* An all-to-all's buffers: [size][count] each, and apart (no backend has an in-place form). */
static ig_status check_alltoall(ig_comm *c, const void *send, void *recv, size_t count,
                                ig_comm_type type, ig_err *err) {
    ig_status st = check_buf(c, "all-to-all", send, count, type, (size_t)c->size, err);
    if (st == IG_OK) st = check_buf(c, "all-to-all", recv, count, type, (size_t)c->size, err);
    size_t bytes = count * ig_comm_type_size(type) * (size_t)c->size; /* checked above */
    uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv;
    if (st == IG_OK && bytes && s < r + bytes && r < s + bytes)
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "all-to-all: the send and receive buffers overlap (there is no in-place "
                        "all-to-all: give a separate receive buffer)");
    return st;
}

ig_status ig_comm_alltoall(ig_comm *c, const void *send, void *recv, size_t count,
                           ig_comm_type type, ig_err *err) {
    ig_status st = check_not_grouped(c, "all-to-all", err);
    if (st == IG_OK) st = check_alltoall(c, send, recv, count, type, err);
    return st != IG_OK ? st : c->ops->alltoall(c, send, recv, count, type, err);
}

static ig_status check_p2p(ig_comm *c, const char *what, const void *buf, size_t count,
                           ig_comm_type type, int peer, int tag, ig_err *err);

ig_status ig_comm_send(ig_comm *c, const void *buf, size_t count, ig_comm_type type, int peer,
                       int tag, ig_err *err) {
    ig_status st = check_not_grouped(c, "send", err);
    if (st == IG_OK) st = check_p2p(c, "send", buf, count, type, peer, tag, err);
    return st != IG_OK ? st : c->ops->send(c, buf, count, type, peer, tag, err);
}

ig_status ig_comm_recv(ig_comm *c, void *buf, size_t count, ig_comm_type type, int peer, int tag,
                       ig_err *err) {
    ig_status st = check_not_grouped(c, "receive", err);
    if (st == IG_OK) st = check_p2p(c, "receive", buf, count, type, peer, tag, err);
    return st != IG_OK ? st : c->ops->recv(c, buf, count, type, peer, tag, err);
}

/* ---- non-blocking ---------------------------------------------------------------------------- */

static ig_comm_req *new_req(ig_comm *c, const char *what, ig_err *err) {
    ig_comm_req *r = ig_calloc(c->ctx, 1, sizeof *r);
    if (!r) ig_err_set(err, IG_ERR_NOMEM, "out of memory starting a %s", what);
    if (r) r->comm = c, r->what = what;
    return r;
}

/* Starts one request: the checks are those of the blocking form; on failure *req is NULL. */
static ig_status start(ig_comm *c, ig_status st, ig_comm_req *r, ig_comm_req **req) {
    if (st != IG_OK) {
        if (r) ig_free(c->ctx, r);
        *req = NULL;
        return st;
    }
    *req = r;
    return IG_OK;
}

ig_status ig_comm_iallreduce(ig_comm *c, const void *send, void *recv, size_t count,
                             ig_comm_type type, ig_comm_op op, ig_comm_req **req, ig_err *err) {
    ig_status st = check_buf(c, "all-reduce", send, count, type, 1, err);
    if (st == IG_OK) st = check_buf(c, "all-reduce", recv, count, type, 1, err);
    if (st == IG_OK) st = check_op("all-reduce", op, err);
    ig_comm_req *r = st == IG_OK ? new_req(c, "all-reduce", err) : NULL;
    if (st == IG_OK && !r) st = IG_ERR_NOMEM;
    if (st == IG_OK) st = c->ops->iallreduce(c, send, recv, count, type, op, r, err);
    return start(c, st, r, req);
}

ig_status ig_comm_iallgather(ig_comm *c, const void *send, void *recv, size_t count,
                             ig_comm_type type, ig_comm_req **req, ig_err *err) {
    ig_status st = check_buf(c, "all-gather", send, count, type, 1, err);
    if (st == IG_OK) st = check_buf(c, "all-gather", recv, count, type, (size_t)c->size, err);
    ig_comm_req *r = st == IG_OK ? new_req(c, "all-gather", err) : NULL;
    if (st == IG_OK && !r) st = IG_ERR_NOMEM;
    if (st == IG_OK) st = c->ops->iallgather(c, send, recv, count, type, r, err);
    return start(c, st, r, req);
}

ig_status ig_comm_ireduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                  ig_comm_type type, ig_comm_op op, ig_comm_req **req,
                                  ig_err *err) {
    ig_status st = check_buf(c, "reduce-scatter", send, count, type, (size_t)c->size, err);
    if (st == IG_OK) st = check_buf(c, "reduce-scatter", recv, count, type, 1, err);
    if (st == IG_OK) st = check_op("reduce-scatter", op, err);
    ig_comm_req *r = st == IG_OK ? new_req(c, "reduce-scatter", err) : NULL;
    if (st == IG_OK && !r) st = IG_ERR_NOMEM;
    if (st == IG_OK) st = c->ops->ireduce_scatter(c, send, recv, count, type, op, r, err);
    return start(c, st, r, req);
}

ig_status ig_comm_ialltoall(ig_comm *c, const void *send, void *recv, size_t count,
                            ig_comm_type type, ig_comm_req **req, ig_err *err) {
    ig_status st = check_alltoall(c, send, recv, count, type, err);
    ig_comm_req *r = st == IG_OK ? new_req(c, "all-to-all", err) : NULL;
    if (st == IG_OK && !r) st = IG_ERR_NOMEM;
    if (st == IG_OK) st = c->ops->ialltoall(c, send, recv, count, type, r, err);
    return start(c, st, r, req);
}

static ig_status check_p2p(ig_comm *c, const char *what, const void *buf, size_t count,
                           ig_comm_type type, int peer, int tag, ig_err *err) {
    ig_status st = check_buf(c, what, buf, count, type, 1, err);
    if (st == IG_OK) st = check_rank(c, what, "peer", peer, err);
    if (st == IG_OK && peer == c->rank)
        st =
            ig_err_set(err, IG_ERR_INVALID_ARG, "%s: rank %d names itself as the peer", what, peer);
    if (st == IG_OK && tag < 0)
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "%s: tag %d < 0", what, tag);
    return st;
}

ig_status ig_comm_isend(ig_comm *c, const void *buf, size_t count, ig_comm_type type, int peer,
                        int tag, ig_comm_req **req, ig_err *err) {
    ig_status st = check_p2p(c, "send", buf, count, type, peer, tag, err);
    ig_comm_req *r = st == IG_OK ? new_req(c, "send", err) : NULL;
    if (st == IG_OK && !r) st = IG_ERR_NOMEM;
    if (st == IG_OK) st = c->ops->isend(c, buf, count, type, peer, tag, r, err);
    return start(c, st, r, req);
}

ig_status ig_comm_irecv(ig_comm *c, void *buf, size_t count, ig_comm_type type, int peer, int tag,
                        ig_comm_req **req, ig_err *err) {
    ig_status st = check_p2p(c, "receive", buf, count, type, peer, tag, err);
    ig_comm_req *r = st == IG_OK ? new_req(c, "receive", err) : NULL;
    if (st == IG_OK && !r) st = IG_ERR_NOMEM;
    if (st == IG_OK) st = c->ops->irecv(c, buf, count, type, peer, tag, r, err);
    return start(c, st, r, req);
}

ig_status ig_comm_wait(ig_comm_req *req, ig_err *err) {
    if (!req) return IG_OK;
    ig_comm *c = req->comm;
    ig_status st = c->ops->wait(req, err); /* also frees the backend's state */
    ig_free(c->ctx, req);
    return st;
}

ig_status ig_comm_test(ig_comm_req *req, int *done, ig_err *err) {
    if (!req || req->done) {
        *done = 1;
        return IG_OK;
    }
    return req->comm->ops->test(req, done, err);
}

ig_status ig_comm_all_ok(ig_comm *c, int ok, int *all_ok, ig_err *err) {
    int32_t v = ok ? 1 : 0, r = 0;
    ig_status st = ig_comm_allreduce(c, &v, &r, 1, IG_COMM_I32, IG_COMM_MIN, err);
    *all_ok = st == IG_OK && r == 1;
    return st;
}

ig_status ig_comm_gather_bytes(ig_comm *c, const void *data, size_t len, int root, void **out,
                               size_t *out_len, size_t *lens, ig_err *err) {
    *out = NULL;
    *out_len = 0;
    ig_status st = check_buf(c, "gather", data, len, IG_COMM_U8, 1, err);
    if (st == IG_OK) st = check_rank(c, "gather", "root", root, err);
    return st != IG_OK ? st : c->ops->gather_bytes(c, data, len, root, out, out_len, lens, err);
}

/* ---- a device backend's stream (NCCL's: ops in the CUDA module) ----------------------------- */

int ig_comm_nccl_device(const ig_comm *c) {
    return c && c->ops->device ? c->ops->device(c) : -1;
}

void *ig_comm_nccl_stream(const ig_comm *c) {
    return c && c->ops->stream ? c->ops->stream(c) : NULL;
}

ig_status ig_comm_nccl_set_stream(ig_comm *c, void *stream, ig_err *err) {
    if (!c || !c->ops->set_stream)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "ig_comm_nccl_set_stream: the communicator is %s's, not NCCL's",
                          c ? c->ops->name : "nobody");
    return c->ops->set_stream(c, stream, err);
}
