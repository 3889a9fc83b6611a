/* stage.c - the stage driver (stage.h): one micro-batch through this rank's part of a model of any
 * family, as calls of the family's hooks (family.h's ig_stage_hooks) in the one order every family
 * shares:
 *   forward:  embed (first stage) -> begin -> for each layer: gather it (ZeRO-3), run it ->
 *             the head and the loss (last stage) or the boundary's output (a middle stage)
 *   backward: begin -> the head's backward (last stage), ready(head) -> for each layer from the
 *             last: gather it, rerun its forward (full recomputation), its backward, ready(layer)
 *             -> end -> the embedding's backward (first stage), ready(embedding) -> synchronise
 * A family's hooks never loop over layers, gather or announce gradients themselves: what the
 * ZeRO-3 windows, the gradient buckets and the planner count is what this file does.
 */
#include "stage.h"

#include "family/family.h"

void ig_stage_layer_order(int fwd, int l0, int l1, int i, int *l, int *next) {
    int n = l1 - l0;
    *l = fwd ? l0 + i : l1 - 1 - i;
    *next = i + 1 < n ? (fwd ? *l + 1 : *l - 1) : -1;
}

ig_status ig_stage_forward(ig_model *m, int slot, int with_grad, ig_err *err) {
    const ig_stage_hooks *h = m->fam->stage;
    const ig_part *p = &m->part;
    m->slot = slot;
    ig_status st = IG_OK;
    if (p->first && (st = h->embed_forward(m, err)) != IG_OK) return st;
    if (h->begin && (st = h->begin(m, err)) != IG_OK) return st;
    for (int i = 0; i < p->l1 - p->l0; i++) {
        int l, next;
        ig_stage_layer_order(1, p->l0, p->l1, i, &l, &next);
        if ((st = ig_store_use_layer(m->st, l, next, err)) != IG_OK) return st;
        if ((st = h->layer_forward(m, l, err)) != IG_OK) return st;
    }
    if (!p->last) return h->stage_output ? h->stage_output(m, err) : IG_OK;
    return h->head_forward(m, with_grad, err);
}

ig_status ig_stage_backward(ig_model *m, int slot, ig_err *err) {
    const ig_stage_hooks *h = m->fam->stage;
    const ig_part *p = &m->part;
    m->slot = slot;
    ig_status st = IG_OK;
    if (h->backward_begin && (st = h->backward_begin(m, err)) != IG_OK) return st;
    if (p->last) {
        if ((st = h->head_backward(m, err)) != IG_OK) return st;
        if ((st = ig_model_ready(m, IG_GRADS_HEAD, err)) != IG_OK) return st;
    }
    for (int i = 0; i < p->l1 - p->l0; i++) {
        int l, next;
        ig_stage_layer_order(0, p->l0, p->l1, i, &l, &next);
        if ((st = ig_store_use_layer(m->st, l, next, err)) != IG_OK) return st;
        if (p->recompute == IG_RECOMPUTE_FULL && (st = h->layer_recompute(m, l, err)) != IG_OK)
            return st;
        if ((st = h->layer_backward(m, l, err)) != IG_OK) return st;
        if ((st = ig_model_ready(m, l, err)) != IG_OK) return st;
    }
    if (h->backward_end && (st = h->backward_end(m, err)) != IG_OK) return st;
    if (p->first) {
        if ((st = h->embed_backward(m, err)) != IG_OK) return st;
        if ((st = ig_model_ready(m, IG_GRADS_EMBEDDING, err)) != IG_OK) return st;
    }
    return ig_backend_sync(m->be, err);
}
