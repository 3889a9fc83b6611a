/* comm_single.c - the single-process communicator: a group of one, where every collective is a
 * copy and there is no peer to talk to. What ingot uses when it is not started by a launcher, so
 * that code written against ig_comm runs unchanged in one process. */
#include "../comm_internal.h"

#include <string.h>

static ig_status single_split(ig_comm *c, int color, int key, ig_comm **out, ig_err *err) {
    (void)color;
    (void)key;
    return ig_comm_single(out, c->ctx, err);
}

static ig_status single_split_local(ig_comm *c, ig_comm **out, ig_err *err) {
    return ig_comm_single(out, c->ctx, err);
}

static ig_status single_barrier(ig_comm *c, ig_err *err) {
    (void)c;
    (void)err;
    return IG_OK;
}

static ig_status single_bcast(ig_comm *c, void *buf, size_t count, ig_comm_type t, int root,
                              ig_err *err) {
    (void)c, (void)buf, (void)count, (void)t, (void)root, (void)err;
    return IG_OK;
}

static ig_status single_allreduce(ig_comm *c, const void *send, void *recv, size_t count,
                                  ig_comm_type t, ig_comm_op op, ig_err *err) {
    (void)c, (void)op, (void)err;
    if (send != recv && count) memmove(recv, send, count * ig_comm_elem_size(t));
    return IG_OK;
}

static ig_status single_allgather(ig_comm *c, const void *send, void *recv, size_t count,
                                  ig_comm_type t, ig_err *err) {
    (void)c, (void)err; /* rank 0: in place when send == recv */
    if (send != recv && count) memmove(recv, send, count * ig_comm_elem_size(t));
    return IG_OK;
}

static ig_status single_reduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                       ig_comm_type t, ig_comm_op op, ig_err *err) {
    return single_allreduce(c, send, recv, count, t, op, err);
}

static ig_status single_alltoall(ig_comm *c, const void *send, void *recv, size_t count,
                                 ig_comm_type t, ig_err *err) {
    (void)c, (void)err; /* rank 0 sends its one part to itself; comm.c refused overlap */
    if (count) memcpy(recv, send, count * ig_comm_elem_size(t));
    return IG_OK;
}

/* comm.c refuses a peer that is not another rank of the group, and here there is none */
static ig_status single_p2p(ig_comm *c, ig_err *err) {
    (void)c;
    return ig_err_set(err, IG_ERR_INTERNAL, "point-to-point in a group of one");
}
static ig_status single_send(ig_comm *c, const void *buf, size_t count, ig_comm_type t, int peer,
                             int tag, ig_err *err) {
    (void)buf, (void)count, (void)t, (void)peer, (void)tag;
    return single_p2p(c, err);
}
static ig_status single_recv(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer, int tag,
                             ig_err *err) {
    (void)buf, (void)count, (void)t, (void)peer, (void)tag;
    return single_p2p(c, err);
}

static ig_status single_gather_bytes(ig_comm *c, const void *data, size_t len, int root, void **out,
                                     size_t *out_len, size_t *lens, ig_err *err) {
    (void)root;
    void *p = ig_alloc(c->ctx, len ? len : 1);
    if (!p) return ig_err_set(err, IG_ERR_NOMEM, "out of memory gathering %zu bytes", len);
    if (len) memcpy(p, data, len);
    *out = p;
    *out_len = len;
    if (lens) lens[0] = len;
    return IG_OK;
}

/* non-blocking: done at once */
static ig_status single_iallreduce(ig_comm *c, const void *send, void *recv, size_t count,
                                   ig_comm_type t, ig_comm_op op, ig_comm_req *req, ig_err *err) {
    req->done = 1;
    return single_allreduce(c, send, recv, count, t, op, err);
}
static ig_status single_iallgather(ig_comm *c, const void *send, void *recv, size_t count,
                                   ig_comm_type t, ig_comm_req *req, ig_err *err) {
    req->done = 1;
    return single_allgather(c, send, recv, count, t, err);
}
static ig_status single_ireduce_scatter(ig_comm *c, const void *send, void *recv, size_t count,
                                        ig_comm_type t, ig_comm_op op, ig_comm_req *req,
                                        ig_err *err) {
    req->done = 1;
    return single_reduce_scatter(c, send, recv, count, t, op, err);
}
static ig_status single_ialltoall(ig_comm *c, const void *send, void *recv, size_t count,
                                  ig_comm_type t, ig_comm_req *req, ig_err *err) {
    req->done = 1;
    return single_alltoall(c, send, recv, count, t, err);
}
static ig_status single_isend(ig_comm *c, const void *buf, size_t count, ig_comm_type t, int peer,
                              int tag, ig_comm_req *req, ig_err *err) {
    (void)req;
    return single_send(c, buf, count, t, peer, tag, err);
}
static ig_status single_irecv(ig_comm *c, void *buf, size_t count, ig_comm_type t, int peer,
                              int tag, ig_comm_req *req, ig_err *err) {
    (void)req;
    return single_recv(c, buf, count, t, peer, tag, err);
}
static ig_status single_wait(ig_comm_req *req, ig_err *err) {
    (void)req, (void)err;
    return IG_OK;
}
static ig_status single_test(ig_comm_req *req, int *done, ig_err *err) {
    (void)req, (void)err;
    *done = 1;
    return IG_OK;
}

static const ig_comm_ops single_ops = {
    .name = "single",
    .split = single_split,
    .split_local = single_split_local,
    .barrier = single_barrier,
    .bcast = single_bcast,
    .allreduce = single_allreduce,
    .allgather = single_allgather,
    .reduce_scatter = single_reduce_scatter,
    .alltoall = single_alltoall,
    .send = single_send,
    .recv = single_recv,
    .gather_bytes = single_gather_bytes,
    .iallreduce = single_iallreduce,
    .iallgather = single_iallgather,
    .ireduce_scatter = single_ireduce_scatter,
    .ialltoall = single_ialltoall,
    .isend = single_isend,
    .irecv = single_irecv,
    .wait = single_wait,
    .test = single_test,
    .destroy = NULL,
};

ig_status ig_comm_single(ig_comm **out, ig_ctx *ctx, ig_err *err) {
    *out = ig_comm_alloc(ctx, &single_ops, 0, 1);
    return *out ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a communicator");
}
