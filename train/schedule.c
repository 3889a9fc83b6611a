/* schedule.c - the micro-batches of a step through this rank's part of the model: one after the
 * other on a single stage, or PipeDream-Flush's 1F1B over the pipeline stages (Narayanan et al.
 * 2021, as Megatron-LM runs it): stage s first runs min(pp - s - 1, M) forwards (warm-up), then
 * alternates one forward and one backward, then runs the remaining backwards; it keeps the
 * activations of at most pp - s micro-batches. Activations go to the next stage and gradients to
 * the previous one by MPI point to point. Every send is non-blocking and waited for only before
 * its buffer is written again, and receives block, which in this order cannot deadlock.
 *
 * Every rank reads every micro-batch of its data-parallel rank from the loader (the middle stages
 * need the document ids for attention masks; reading is cheap), so the stages stay in step.
 */
#include "gpt_internal.h"
#include "train_internal.h"

enum { TAG_ACT = 11, TAG_GRAD = 12 };

typedef struct sched {
    ig_gpt *m;
    ig_layout *lo;
    ig_loader *ld;
    const ig_gpt_batch_opts *bo;
    int T;
    float grad_scale; /* 0: forward only */
    int slots;
    ig_comm_req **act_send; /* per slot: the output's send in flight */
    ig_comm_req *grad_send; /* the input gradient's send in flight */
    double loss_sum;
    int counted_batches;
} sched;

static ig_status forward_one(sched *s, int i, ig_err *err) {
    ig_progress_tick();
    ig_gpt *m = s->m;
    ig_layout *lo = s->lo;
    int slot = i % s->slots;
    size_t n = (size_t)ig_gpt_stage_elems(m);
    ig_batch b;
    ig_status st = ig_loader_next(s->ld, &b, err);
    if (st != IG_OK) return st;
    /* the slot's output may still be on its way to the next stage */
    if ((st = ig_comm_wait(s->act_send[slot], err)) != IG_OK) return st;
    s->act_send[slot] = NULL;
    st = ig_gpt_stage_batch(m, slot, b.tokens, (int)b.micro_batch, s->T, s->bo, s->grad_scale, NULL,
                            err);
    if (st == IG_OK && !ig_layout_first(lo)) {
        ig_comm_req *r = NULL;
        st = ig_group_irecv(&lo->pp_g, ig_gpt_stage_input(m, slot), n, ig_gpt_comm_type(m),
                            lo->pp_rank - 1, TAG_ACT, &r, err);
        if (st == IG_OK) st = ig_comm_wait(r, err);
    }
    if (st == IG_OK) st = ig_gpt_stage_forward(m, slot, s->grad_scale > 0, err);
    if (st == IG_OK) st = ig_backend_sync(m->be, err);
    if (st != IG_OK) return st;
    if (ig_layout_last(lo)) {
        double loss = 0;
        if ((st = ig_gpt_stage_loss(m, slot, &loss, err)) != IG_OK) return st;
        s->loss_sum += loss;
        s->counted_batches++;
        return IG_OK;
    }
    return ig_group_isend(&lo->pp_g, ig_gpt_stage_output(m, slot), n, ig_gpt_comm_type(m),
                          lo->pp_rank + 1, TAG_ACT, &s->act_send[slot], err);
}

static ig_status backward_one(sched *s, int i, int last, const ig_sched_hooks *h, ig_err *err) {
    ig_progress_tick();
    ig_gpt *m = s->m;
    ig_layout *lo = s->lo;
    int slot = i % s->slots;
    size_t n = (size_t)ig_gpt_stage_elems(m);
    /* the gradient buffer: the last send from it must be out before it is written */
    ig_status st = ig_comm_wait(s->grad_send, err);
    if (st == IG_OK && h && h->backward_begin) st = h->backward_begin(h->user, last, err);
    s->grad_send = NULL;
    if (st == IG_OK && !ig_layout_last(lo)) {
        ig_comm_req *r = NULL;
        st = ig_group_irecv(&lo->pp_g, ig_gpt_stage_dgrad(m), n, ig_gpt_comm_type(m),
                            lo->pp_rank + 1, TAG_GRAD, &r, err);
        if (st == IG_OK) st = ig_comm_wait(r, err);
    }
    if (st == IG_OK)
        st = ig_gpt_stage_backward(m, slot, h ? h->ready : NULL, h ? h->user : NULL, err);
    if (st != IG_OK || ig_layout_first(lo)) return st;
    return ig_group_isend(&lo->pp_g, ig_gpt_stage_dgrad(m), n, ig_gpt_comm_type(m), lo->pp_rank - 1,
                          TAG_GRAD, &s->grad_send, err);
}

static ig_status drain(sched *s, ig_status st, ig_err *err) {
    for (int k = 0; k < s->slots; k++) {
        ig_err e;
        ig_status w = ig_comm_wait(s->act_send[k], st == IG_OK ? err : &e);
        if (st == IG_OK) st = w;
    }
    ig_err e;
    ig_status w = ig_comm_wait(s->grad_send, st == IG_OK ? err : &e);
    return st == IG_OK ? w : st;
}

ig_status ig_sched_run(ig_gpt *m, ig_layout *lo, ig_loader *ld, const ig_gpt_batch_opts *bo, int T,
                       int micro_batches, float grad_scale, const ig_sched_hooks *hooks,
                       double *loss_sum, ig_err *err) {
    *loss_sum = 0;
    ig_comm_req *sends[64] = {0};
    sched s = {.m = m,
               .lo = lo,
               .ld = ld,
               .bo = bo,
               .T = T,
               .grad_scale = grad_scale,
               .slots = m->part.slots,
               .act_send = sends};
    if (lo->pp > 1) {
        if (s.slots > (int)(sizeof sends / sizeof sends[0]))
            return ig_err_set(err, IG_ERR_UNSUPPORTED, "more than 64 micro-batches in flight");
    }
    int M = micro_batches, train = grad_scale > 0;
    ig_status st = IG_OK;
    if (!train) { /* forward only: one micro-batch at a time down the pipeline */
        for (int i = 0; st == IG_OK && i < M; i++) st = forward_one(&s, i, err);
    } else {
        int warm = lo->pp - lo->pp_rank - 1;
        if (warm > M) warm = M;
        int f = 0, b = 0;
        for (; st == IG_OK && f < warm; f++) st = forward_one(&s, f, err);
        for (; st == IG_OK && f < M; f++, b++) {
            st = forward_one(&s, f, err);
            if (st == IG_OK) st = backward_one(&s, b, b == M - 1, hooks, err);
        }
        for (; st == IG_OK && b < M; b++) st = backward_one(&s, b, b == M - 1, hooks, err);
    }
    st = drain(&s, st, err);
    *loss_sum = s.loss_sum;
    return st;
}

int ig_sched_slots(const ig_layout *lo) {
    if (lo->pp == 1) return 1;
    int in_flight = lo->pp - lo->pp_rank;
    return in_flight < lo->accum ? in_flight : lo->accum;
}
