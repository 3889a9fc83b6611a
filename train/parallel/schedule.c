/* schedule.c - the micro-batches of a step through this rank's part of a model of any family (its
 * stage operations, family.h): one after the other on a single stage, or PipeDream-Flush's 1F1B
 * over the pipeline stages (Narayanan et al. 2021, as Megatron-LM runs it): stage s first runs
 * min(pp - s - 1, M) forwards (warm-up), then alternates one forward and one backward, then runs
 * the remaining backwards; it keeps the activations of at most pp - s micro-batches. What crosses a
 * boundary (the family's stage io: one tensor or several) goes to the next stage, and its gradient
 * to the previous one, by MPI point to point. Every send is non-blocking and waited for only before
 * its buffer is written again, and receives block, which in this order cannot deadlock.
 *
 * Every rank reads every micro-batch of its data-parallel rank from the feed (the middle stages
 * need the document ids for attention masks; reading is cheap), so the stages stay in step.
 */
#include "schedule.h"

#include "family/family.h"
#include "stage.h"

enum { TAG_ACT = 11, TAG_GRAD = 12 };

enum { MAX_IO = 4 };

typedef struct sched {
    ig_model *m;
    ig_layout *lo;
    ig_feed *feed;
    float grad_scale; /* 0: forward only */
    int slots;
    ig_comm_req **act_send;         /* per slot and boundary tensor: the output's send in flight */
    ig_comm_req *grad_send[MAX_IO]; /* the input gradients' sends in flight */
    ig_sched_sums sums;
} sched;

static ig_status forward_one(sched *s, int i, ig_err *err) {
    ig_pulse_tick(s->lo->pulse);
    ig_model *m = s->m;
    const ig_family *f = m->fam;
    ig_layout *lo = s->lo;
    int slot = i % s->slots;
    ig_micro_batch b;
    ig_status st = ig_feed_next(s->feed, &b, err);
    if (st != IG_OK) return st;
    /* the slot's outputs may still be on their way to the next stage */
    ig_comm_req **sends = s->act_send + (size_t)slot * MAX_IO;
    for (int k = 0; k < MAX_IO && st == IG_OK; k++) {
        st = ig_comm_wait(sends[k], err);
        sends[k] = NULL;
    }
    if (st == IG_OK) st = f->objective->stage(m, slot, &b, s->grad_scale, NULL, err);
    ig_stage_io io;
    if (st == IG_OK) f->stage_io(m, slot, &io);
    for (int k = 0; st == IG_OK && !ig_layout_first(lo) && k < io.n; k++) {
        ig_comm_req *r = NULL;
        st = ig_group_irecv(&lo->pp_g, io.in[k], (size_t)io.elems[k], ig_model_comm_type(m),
                            lo->pp_rank - 1, TAG_ACT + 2 * k, &r, err);
        if (st == IG_OK) st = ig_comm_wait(r, err);
    }
    if (st == IG_OK) st = ig_stage_forward(m, slot, s->grad_scale > 0, err);
    if (st == IG_OK) st = ig_backend_sync(m->be, err);
    if (st != IG_OK) return st;
    if (ig_layout_last(lo)) {
        double loss = 0;
        if ((st = f->objective->loss(m, slot, &loss, err)) != IG_OK) return st;
        int T = m->slot_T[slot];
        double rows = (double)m->slot_B[slot] * (double)T;
        s->sums.loss += loss;
        s->sums.tokens += rows;
        s->sums.flops += rows * f->flops_per_token(&m->cfg, T);
        return IG_OK;
    }
    for (int k = 0; st == IG_OK && k < io.n; k++)
        st = ig_group_isend(&lo->pp_g, io.out[k], (size_t)io.elems[k], ig_model_comm_type(m),
                            lo->pp_rank + 1, TAG_ACT + 2 * k, &sends[k], err);
    return st;
}

static ig_status backward_one(sched *s, int i, int last, const ig_sched_hooks *h, ig_err *err) {
    ig_pulse_tick(s->lo->pulse);
    ig_model *m = s->m;
    const ig_family *f = m->fam;
    ig_layout *lo = s->lo;
    int slot = i % s->slots;
    /* the gradient buffers: the last sends from them must be out before they are written */
    ig_status st = IG_OK;
    for (int k = 0; k < MAX_IO && st == IG_OK; k++) {
        st = ig_comm_wait(s->grad_send[k], err);
        s->grad_send[k] = NULL;
    }
    if (st == IG_OK && h && h->backward_begin) st = h->backward_begin(h->user, last, err);
    ig_stage_io io;
    f->stage_io(m, slot, &io);
    for (int k = 0; st == IG_OK && !ig_layout_last(lo) && k < io.n; k++) {
        ig_comm_req *r = NULL;
        st = ig_group_irecv(&lo->pp_g, io.grad[k], (size_t)io.elems[k], ig_model_comm_type(m),
                            lo->pp_rank + 1, TAG_GRAD + 2 * k, &r, err);
        if (st == IG_OK) st = ig_comm_wait(r, err);
    }
    if (st == IG_OK) {
        m->ready = h ? h->ready : NULL;
        m->ready_user = h ? h->user : NULL;
        st = ig_stage_backward(m, slot, err);
        m->ready = NULL;
        m->ready_user = NULL;
    }
    if (st != IG_OK || ig_layout_first(lo)) return st;
    for (int k = 0; st == IG_OK && k < io.n; k++)
        st = ig_group_isend(&lo->pp_g, io.grad[k], (size_t)io.elems[k], ig_model_comm_type(m),
                            lo->pp_rank - 1, TAG_GRAD + 2 * k, &s->grad_send[k], err);
    return st;
}

static ig_status drain(sched *s, ig_status st, ig_err *err) {
    for (int k = 0; k < s->slots * MAX_IO; k++) {
        ig_err e;
        ig_status w = ig_comm_wait(s->act_send[k], st == IG_OK ? err : &e);
        if (st == IG_OK) st = w;
    }
    for (int k = 0; k < MAX_IO; k++) {
        ig_err e;
        ig_status w = ig_comm_wait(s->grad_send[k], st == IG_OK ? err : &e);
        if (st == IG_OK) st = w;
    }
    return st;
}

ig_status ig_sched_run(ig_model *m, ig_layout *lo, ig_feed *feed, int micro_batches,
                       float grad_scale, const ig_sched_hooks *hooks, ig_sched_sums *sums,
                       ig_err *err) {
    ig_comm_req *sends[64 * MAX_IO] = {0};
    sched s = {.m = m,
               .lo = lo,
               .feed = feed,
               .grad_scale = grad_scale,
               .slots = m->part.slots,
               .act_send = sends};
    if (lo->pp > 1) {
        if (s.slots > 64)
            return ig_err_set(err, IG_ERR_UNSUPPORTED, "more than 64 micro-batches in flight");
    }
    int M = micro_batches, train = grad_scale > 0;
    ig_status st = IG_OK;
    if (!train) { /* forward only: one micro-batch at a time down the pipeline */
        for (int i = 0; st == IG_OK && i < M; i++) st = forward_one(&s, i, err);
    } else {
        for (int k = 0, f = 0, b = 0; st == IG_OK && k < 2 * M; k++) {
            if (ig_sched_is_forward(lo->pp, lo->pp_rank, M, k))
                st = forward_one(&s, f++, err);
            else {
                st = backward_one(&s, b, b == M - 1, hooks, err);
                b++;
            }
        }
    }
    st = drain(&s, st, err);
    *sums = s.sums;
    return st;
}

int ig_sched_is_forward(int pp, int pp_rank, int M, int k) {
    int warm = pp - pp_rank - 1;
    if (warm > M) warm = M;
    if (k < warm) return 1;
    if (k < warm + 2 * (M - warm)) return (k - warm) % 2 == 0;
    return 0;
}

int ig_sched_slots(const ig_layout *lo) {
    if (lo->pp == 1) return 1;
    int in_flight = lo->pp - lo->pp_rank;
    return in_flight < lo->accum ? in_flight : lo->accum;
}
