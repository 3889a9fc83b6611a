/* parallel.c - the layout of a training run over its processes (parallel.h): the checks every rank
 * makes before any work, the groups split from the world, and the counted collectives the model
 * and the trainer talk through. */
#include "parallel.h"
#include "family/family.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- counted collectives --------------------------------------------------------------------- */

static uint64_t ring(const ig_group *g, uint64_t bytes) {
    return g->size > 1 ? bytes * (uint64_t)(g->size - 1) / (uint64_t)g->size : 0;
}

/* The communicator for the group's memory, ordered after the kernels that wrote it: a device
 * backend queues its kernels, and NCCL runs on a stream of its own, which waits for them there
 * (the host goes on queueing the backward's next kernels: the overlap). */
static ig_status ready(ig_group *g, ig_comm **c, ig_err *err) {
    *c = g->dev ? g->dev : g->comm;
    if (!g->dev) return IG_OK;
    void *stream = ig_comm_nccl_stream(g->dev);
    return stream ? ig_backend_fence(g->be, stream, err) : ig_backend_sync(g->be, err);
}

/* A group of one: recv = send, on the group's memory. */
static ig_status self_copy(ig_group *g, void *recv, const void *send, size_t bytes, ig_err *err) {
    if (recv == send || !bytes) return IG_OK;
    if (g->be) return ig_backend_copy(g->be, recv, send, bytes, err);
    memmove(recv, send, bytes);
    return IG_OK;
}

ig_status ig_group_allreduce(ig_group *g, void *buf, size_t n, ig_comm_type t, ig_comm_op op,
                             ig_err *err) {
    ig_pulse_tick(g->pulse);
    if (g->size == 1 || n == 0) return IG_OK;
    g->bytes += 2 * ring(g, (uint64_t)n * ig_comm_type_size(t));
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_allreduce(c, buf, buf, n, t, op, err);
}

ig_status ig_group_allgather(ig_group *g, const void *send, void *recv, size_t n, ig_comm_type t,
                             ig_err *err) {
    ig_pulse_tick(g->pulse);
    size_t es = ig_comm_type_size(t);
    if (g->size == 1) return self_copy(g, recv, send, n * es, err);
    g->bytes += ring(g, (uint64_t)n * es * (uint64_t)g->size);
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_allgather(c, send, recv, n, t, err);
}

ig_status ig_group_reduce_scatter(ig_group *g, const void *send, void *recv, size_t n,
                                  ig_comm_type t, ig_err *err) {
    ig_pulse_tick(g->pulse);
    size_t es = ig_comm_type_size(t);
    if (g->size == 1) return self_copy(g, recv, send, n * es, err);
    g->bytes += ring(g, (uint64_t)n * es * (uint64_t)g->size);
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_reduce_scatter(c, send, recv, n, t, IG_COMM_SUM, err);
}

ig_status ig_group_bcast(ig_group *g, void *buf, size_t n, ig_comm_type t, int root, ig_err *err) {
    ig_pulse_tick(g->pulse);
    if (g->size == 1) return IG_OK;
    if (g->rank == root) g->bytes += (uint64_t)n * ig_comm_type_size(t);
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_bcast(c, buf, n, t, root, err);
}

ig_status ig_group_alltoall(ig_group *g, const void *send, void *recv, size_t n, ig_comm_type t,
                            ig_err *err) {
    ig_pulse_tick(g->pulse);
    size_t es = ig_comm_type_size(t);
    if (g->size == 1) return self_copy(g, recv, send, n * es, err);
    g->bytes += (uint64_t)n * es * (uint64_t)(g->size - 1); /* a block to every other rank */
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_alltoall(c, send, recv, n, t, err);
}

ig_status ig_group_iallreduce(ig_group *g, void *buf, size_t n, ig_comm_type t, ig_comm_req **req,
                              ig_err *err) {
    ig_pulse_tick(g->pulse);
    *req = NULL;
    if (g->size == 1 || n == 0) return IG_OK;
    g->bytes += 2 * ring(g, (uint64_t)n * ig_comm_type_size(t));
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_iallreduce(c, buf, buf, n, t, IG_COMM_SUM, req, err);
}

ig_status ig_group_ireduce_scatter(ig_group *g, const void *send, void *recv, size_t n,
                                   ig_comm_type t, ig_comm_req **req, ig_err *err) {
    ig_pulse_tick(g->pulse);
    *req = NULL;
    if (g->size == 1) return self_copy(g, recv, send, n * ig_comm_type_size(t), err);
    g->bytes += ring(g, (uint64_t)n * ig_comm_type_size(t) * (uint64_t)g->size);
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_ireduce_scatter(c, send, recv, n, t, IG_COMM_SUM, req, err);
}

ig_status ig_group_iallgather(ig_group *g, const void *send, void *recv, size_t n, ig_comm_type t,
                              ig_comm_req **req, ig_err *err) {
    ig_pulse_tick(g->pulse);
    *req = NULL;
    if (g->size == 1) return self_copy(g, recv, send, n * ig_comm_type_size(t), err);
    g->bytes += ring(g, (uint64_t)n * ig_comm_type_size(t) * (uint64_t)g->size);
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_iallgather(c, send, recv, n, t, req, err);
}

ig_status ig_group_isend(ig_group *g, const void *buf, size_t n, ig_comm_type t, int peer, int tag,
                         ig_comm_req **req, ig_err *err) {
    ig_pulse_tick(g->pulse);
    g->bytes += (uint64_t)n * ig_comm_type_size(t);
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_isend(c, buf, n, t, peer, tag, req, err);
}

ig_status ig_group_irecv(ig_group *g, void *buf, size_t n, ig_comm_type t, int peer, int tag,
                         ig_comm_req **req, ig_err *err) {
    ig_pulse_tick(g->pulse);
    ig_comm *c;
    ig_status st = ready(g, &c, err);
    return st != IG_OK ? st : ig_comm_irecv(c, buf, n, t, peer, tag, req, err);
}

/* ---- the layout ------------------------------------------------------------------------------ */

/* Every rank must refuse together: a check that fails on some ranks only (a config read
 * differently) would leave the others in a collective. The checks below depend only on the
 * configuration, which the hash comparison makes the same everywhere, and on the world size. */
static ig_status refuse(ig_err *err, const char *fmt, ...) IG_PRINTF(2, 3);
static ig_status refuse(ig_err *err, const char *fmt, ...) {
    char msg[IG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ig_err_set(err, IG_ERR_CONFIG, "%s", msg);
}

static ig_status split(ig_layout *l, ig_comm *world, int color, int key, ig_group *g,
                       const char *name, ig_err *err) {
    g->name = name;
    g->bytes = 0;
    g->comm = NULL;
    g->pulse = l->pulse;
    ig_comm *c = NULL;
    ig_status st = ig_comm_split(world, color, key, &c, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "cannot form the %s group", name);
    g->size = ig_comm_size(c);
    g->rank = ig_comm_rank(c);
    if (g->size == 1)
        ig_comm_free(c);
    else
        g->comm = c;
    return IG_OK;
}

/* The colour and key of each of the tp, dp, pp, emb and sp groups in ig_comm_split: the colour is
 * the coordinates the group does not vary, the key the ones it does. */
enum { N_SPLIT = 5 };
static void split_plan(ig_layout *l, ig_group *gs[N_SPLIT], const char *names[N_SPLIT],
                       int color[N_SPLIT], int key[N_SPLIT]) {
    int tp = l->tp, dp = l->dp, usp = l->usp;
    int replica = l->dp_rank * usp + l->usp_rank; /* dp and sp coordinates together */
    gs[0] = &l->tp_g, names[0] = "tp";
    color[0] = l->pp_rank * dp * usp + replica, key[0] = l->tp_rank;
    gs[1] = &l->dp_g, names[1] = "dp";
    color[1] = l->pp_rank * tp + l->tp_rank, key[1] = replica;
    gs[2] = &l->pp_g, names[2] = "pp";
    color[2] = replica * tp + l->tp_rank, key[2] = l->pp_rank;
    /* the tied embedding's group: first and last stage; the middle stages split off alone */
    int in_emb = l->pp > 1 && (ig_layout_first(l) || ig_layout_last(l));
    gs[3] = &l->emb_g, names[3] = "emb";
    color[3] = in_emb ? replica * tp + l->tp_rank : dp * usp * tp + l->rank, key[3] = l->pp_rank;
    gs[4] = &l->sp_g, names[4] = "sp";
    color[4] = (l->pp_rank * dp + l->dp_rank) * tp + l->tp_rank, key[4] = l->usp_rank;
}

ig_status ig_layout_create(ig_layout *l, ig_ctx *ctx, ig_comm *world, const ig_train_config *t,
                           const ig_model_config *shape, uint64_t config_hash, ig_pulse *pulse,
                           ig_err *err) {
    memset(l, 0, sizeof *l);
    l->ctx = ctx;
    l->pulse = pulse;
    l->world = world ? ig_comm_size(world) : 1;
    l->rank = world ? ig_comm_rank(world) : 0;
    /* the same configuration everywhere: compared before anything else */
    if (l->world > 1) {
        uint64_t h[2] = {config_hash, config_hash};
        ig_status st = ig_comm_allreduce(world, &h[0], &h[0], 1, IG_COMM_U64, IG_COMM_MIN, err);
        if (st == IG_OK)
            st = ig_comm_allreduce(world, &h[1], &h[1], 1, IG_COMM_U64, IG_COMM_MAX, err);
        if (st != IG_OK) return st;
        if (h[0] != h[1])
            return refuse(err,
                          "the ranks were given different configurations (hash %016llx here, "
                          "%016llx and %016llx seen): start every rank with the same config and "
                          "--set overrides",
                          (unsigned long long)config_hash, (unsigned long long)h[0],
                          (unsigned long long)h[1]);
    }
    /* the layout's own checks (layout_check.c); the coordinates below need its dp */
    ig_status st = ig_layout_check(l, t, shape, err);
    if (st != IG_OK) return st;

    l->tp_rank = l->rank % l->tp;
    l->usp_rank = (l->rank / l->tp) % l->usp;
    l->dp_rank = (l->rank / (l->tp * l->usp)) % l->dp;
    l->pp_rank = l->rank / (l->tp * l->usp * l->dp);
    l->l0 = l->stage_layers[l->pp_rank];
    l->l1 = l->stage_layers[l->pp_rank + 1];
    if (!world) {
        l->world_g = l->tp_g = l->dp_g = l->pp_g = l->emb_g = l->sp_g = (ig_group){0};
        l->world_g.size = l->tp_g.size = l->dp_g.size = l->pp_g.size = l->emb_g.size = 1;
        l->sp_g.size = 1;
        l->world_g.name = "world", l->tp_g.name = "tp", l->dp_g.name = "dp";
        l->pp_g.name = "pp", l->emb_g.name = "emb", l->sp_g.name = "sp";
        return IG_OK;
    }
    l->world_g =
        (ig_group){l->world > 1 ? world : NULL, NULL, NULL, l->world, l->rank, "world", 0, pulse};
    ig_group *gs[N_SPLIT];
    const char *names[N_SPLIT];
    int color[N_SPLIT], key[N_SPLIT];
    split_plan(l, gs, names, color, key);
    for (int i = 0; i < N_SPLIT; i++)
        if ((st = split(l, world, color[i], key[i], gs[i], names[i], err)) != IG_OK) return st;
    return IG_OK;
}

ig_status ig_layout_attach_backend(ig_layout *l, ig_comm *world, ig_backend *be, ig_err *err) {
    ig_group *gs[N_SPLIT];
    const char *names[N_SPLIT];
    int color[N_SPLIT], key[N_SPLIT];
    split_plan(l, gs, names, color, key);
    int device = ig_backend_kind_of(be) != IG_BACKEND_CPU;
    for (int i = 0; i < N_SPLIT; i++) gs[i]->be = device ? be : NULL;
    if (!device || !world || l->world == 1) return IG_OK;
    ig_comm *nccl = NULL;
    ig_status st = ig_comm_nccl_create(&nccl, world, err);
    if (st != IG_OK)
        return ig_err_prefix(err, st, "the %s backend's collectives (NCCL)", ig_backend_name(be));
    /* the same colours as the MPI groups; every rank takes part in every split */
    for (int i = 0; i < N_SPLIT && st == IG_OK; i++) {
        ig_comm *c = NULL;
        st = ig_comm_split(nccl, color[i], key[i], &c, err);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "cannot form the %s group's NCCL communicator", names[i]);
        } else if (ig_comm_size(c) == 1) {
            ig_comm_free(c);
        } else {
            gs[i]->dev = c;
        }
    }
    ig_comm_free(nccl);
    return st;
}

ig_status ig_all_ranks_ok(ig_comm *world, ig_status st, const char *what, ig_err *err) {
    if (!world || ig_comm_size(world) <= 1) return st;
    int all = 0;
    ig_err e2;
    ig_status cs = ig_comm_all_ok(world, st == IG_OK, &all, st == IG_OK ? err : &e2);
    if (st != IG_OK) return st;
    if (cs != IG_OK) return cs;
    if (!all)
        return ig_err_set(err, IG_ERR_IO, "%s failed on another rank (its message says why)", what);
    return IG_OK;
}

ig_status ig_layout_single(ig_layout *l, ig_ctx *ctx, int n_layer, ig_err *err) {
    memset(l, 0, sizeof *l);
    l->ctx = ctx;
    l->world = l->tp = l->pp = l->dp = l->usp = l->accum = 1;
    l->l1 = n_layer;
    l->stage_layers = ig_calloc(ctx, 2, sizeof(int));
    if (!l->stage_layers) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    l->stage_layers[1] = n_layer;
    ig_group *gs[] = {&l->world_g, &l->tp_g, &l->dp_g, &l->pp_g, &l->emb_g, &l->sp_g};
    const char *names[] = {"world", "tp", "dp", "pp", "emb", "sp"};
    for (int i = 0; i < 6; i++) *gs[i] = (ig_group){.size = 1, .name = names[i]};
    return IG_OK;
}

void ig_layout_free(ig_layout *l) {
    if (!l) return;
    ig_group *gs[] = {&l->tp_g, &l->dp_g, &l->pp_g, &l->emb_g, &l->sp_g};
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) {
        ig_comm_free(gs[i]->dev); /* before the MPI communicators NCCL's bootstrap used */
        ig_comm_free(gs[i]->comm);
        gs[i]->comm = gs[i]->dev = NULL;
    }
    ig_free(l->ctx, l->stage_layers);
    l->stage_layers = NULL;
}
