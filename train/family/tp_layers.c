/* tp_layers.c - the tensor-parallel layers (tp_layers.h): collectives of the model's tensor-
 * parallel group over backend buffers, each after the kernels that wrote them have finished. */
#include "tp_layers.h"

typedef enum { TP_SUM, TP_MAX, TP_GATHER, TP_SCATTER } tp_op;

/* A collective of the tensor-parallel group over backend buffers, once the kernels before it have
 * finished. n: elements in all (SUM, MAX), or per rank (GATHER: send [n] -> recv [tp n]; SCATTER:
 * send [tp n] -> recv [n]). */
static ig_status tp_coll(ig_model *m, tp_op op, const void *send, void *recv, uint64_t n,
                         ig_comm_type type, ig_err *err) {
    ig_status st = ig_backend_sync(m->be, err);
    if (st != IG_OK) return st;
    ig_group *g = m->part.tpg;
    switch (op) {
    case TP_SUM:
    case TP_MAX:
        return ig_group_allreduce(g, recv, (size_t)n, type,
                                  op == TP_SUM ? IG_COMM_SUM : IG_COMM_MAX, err);
    case TP_GATHER:
        return ig_group_allgather(g, send, recv, (size_t)n, type, err);
    case TP_SCATTER:
        return ig_group_reduce_scatter(g, send, recv, (size_t)n, type, err);
    }
    return IG_ERR_INTERNAL;
}

ig_status ig_tp_sum(ig_model *m, void *buf, uint64_t n, ig_err *err) {
    if (m->part.tp == 1) return IG_OK;
    return tp_coll(m, TP_SUM, buf, buf, n, ig_model_comm_type(m), err);
}

/* ---- Ulysses --------------------------------------------------------------------------------- */

ig_status ig_usp_to_heads(ig_model *m, const void *rows, void *heads, void *pack, int Nl,
                          int blocks, int W, ig_err *err) {
    int u = m->part.usp > 1 ? m->part.usp : 1;
    size_t as = m->as, w = (size_t)(W / u), row = (size_t)blocks * (size_t)W;
    size_t per = (size_t)Nl * (size_t)blocks * w; /* elements to each rank */
    void *dst = u > 1 ? pack : heads;
    ig_status st = IG_OK;
    /* pack [u][Nl][blocks][w]: for rank j, each row's j-th slice of every block */
    for (int j = 0; j < u && st == IG_OK; j++)
        for (int b = 0; b < blocks && st == IG_OK; b++)
            st = ig_backend_copy2d(m->be, (char *)dst + ((size_t)j * per + (size_t)b * w) * as,
                                   (size_t)blocks * w * as,
                                   (const char *)rows + ((size_t)b * W + (size_t)j * w) * as,
                                   row * as, w * as, (size_t)Nl, err);
    if (st != IG_OK || u == 1) return st;
    if ((st = ig_backend_sync(m->be, err)) != IG_OK) return st;
    /* from rank i its rows [i Nl, (i + 1) Nl): [u][Nl][blocks w] is [N][blocks w] */
    return ig_group_alltoall(m->part.uspg, pack, heads, per, ig_model_comm_type(m), err);
}

ig_status ig_usp_to_rows(ig_model *m, const void *heads, void *rows, void *pack, int Nl, int blocks,
                         int W, ig_err *err) {
    int u = m->part.usp > 1 ? m->part.usp : 1;
    size_t as = m->as, w = (size_t)(W / u), row = (size_t)blocks * (size_t)W;
    size_t per = (size_t)Nl * (size_t)blocks * w;
    const void *src = heads;
    ig_status st = IG_OK;
    if (u > 1) {
        /* to rank i its rows; from rank j this rank's rows of its slices */
        if ((st = ig_backend_sync(m->be, err)) != IG_OK) return st;
        st = ig_group_alltoall(m->part.uspg, heads, pack, per, ig_model_comm_type(m), err);
        src = pack;
    }
    for (int j = 0; j < u && st == IG_OK; j++)
        for (int b = 0; b < blocks && st == IG_OK; b++)
            st = ig_backend_copy2d(m->be, (char *)rows + ((size_t)b * W + (size_t)j * w) * as,
                                   row * as,
                                   (const char *)src + ((size_t)j * per + (size_t)b * w) * as,
                                   (size_t)blocks * w * as, w * as, (size_t)Nl, err);
    return st;
}

ig_status ig_tp_gather(ig_model *m, const void *rows, void *full, int N, int C, const void **out,
                       ig_err *err) {
    if (!m->part.sp) {
        *out = rows;
        return IG_OK;
    }
    *out = full;
    uint64_t per = (uint64_t)(N / m->part.tp) * (uint64_t)C;
    return tp_coll(m, TP_GATHER, rows, full, per, ig_model_comm_type(m), err);
}

ig_status ig_tp_reduce(ig_model *m, void *partial, void *out, int N, int C, ig_err *err) {
    if (m->part.sp)
        return tp_coll(m, TP_SCATTER, partial, out, (uint64_t)(N / m->part.tp) * (uint64_t)C,
                       ig_model_comm_type(m), err);
    return tp_coll(m, TP_SUM, partial, partial, (uint64_t)N * (uint64_t)C, ig_model_comm_type(m),
                   err);
}

ig_status ig_tp_row_linear(ig_model *m, void *out, const void *inp, const void *w,
                           ig_w_layout layout, const void *bias, void *partial, int N, int K,
                           int OC, ig_err *err) {
    if (m->part.tp == 1) {
        ig_kernel_matmul_forward(m->be, out, inp, w, layout, bias, N, K, OC);
        return IG_OK;
    }
    void *dst = m->part.sp ? partial : out;
    ig_kernel_matmul_forward(m->be, dst, inp, w, layout, m->part.tp_rank == 0 ? bias : NULL, N, K,
                             OC);
    return ig_tp_reduce(m, dst, out, N, OC, err);
}

void *ig_tp_dinput_target(const ig_model *m, void *partial, void *dst) {
    return m->part.tp > 1 ? partial : dst;
}

ig_status ig_tp_dinput_reduce(ig_model *m, void *partial, void *dst, int N, int C, void **out,
                              ig_err *err) {
    *out = ig_tp_dinput_target(m, partial, dst);
    if (m->part.tp == 1) return IG_OK;
    if (m->part.sp) *out = dst;
    return ig_tp_reduce(m, partial, *out, N, C, err);
}

ig_status ig_tp_cross_entropy(ig_model *m, float *losses, void *logits, const int32_t *targets,
                              const float *dloss, float *rowmax, float *stats, int N, ig_err *err) {
    int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab, tp = m->part.tp, Vl = Vp / tp;
    if (tp == 1) {
        ig_kernel_crossentropy(m->be, losses, logits, targets, dloss, N, V, Vp);
        return IG_OK;
    }
    int v0 = m->part.tp_rank * Vl;
    int valid = V <= v0 ? 0 : (V - v0 < Vl ? V - v0 : Vl);
    ig_kernel_ce_max(m->be, rowmax, logits, N, valid, Vl);
    ig_status st = tp_coll(m, TP_MAX, rowmax, rowmax, (uint64_t)N, IG_COMM_F32, err);
    if (st != IG_OK) return st;
    ig_kernel_ce_sums(m->be, stats, logits, rowmax, targets, N, valid, Vl);
    if ((st = tp_coll(m, TP_SUM, stats, stats, 2 * (uint64_t)N, IG_COMM_F32, err)) != IG_OK)
        return st;
    ig_kernel_ce_finish(m->be, losses, logits, rowmax, stats, targets, dloss, N, valid, Vl);
    return IG_OK;
}
