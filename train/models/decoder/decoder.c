/* decoder.c - the decoder family's common part (decoder.h): the checks every preset shares, the
 * table of named global tensors with their tags (names and layouts the preset's), the parameters
 * and FLOPs counted from it, the activations of a micro-batch, and the family's state.
 *
 * The architecture: an embedding of the tokens (plus learned positions, or rotary ones applied to
 * q and k), layers of pre-norm attention (causal, grouped-query: n_kv_heads key/value heads, each
 * serving a consecutive group of query heads) and pre-norm MLP with residual adds, a final norm,
 * and the output layer (the embedding when tied); the vocabulary padded to a multiple of 128 (the
 * padded logits are ignored by the loss), no dropout. Tensor parallelism (Megatron's): q|k|v and
 * the MLP's input layers by output columns (q|k|v in its three blocks, so each rank holds whole
 * heads and whole key/value groups), the attention's and the MLP's projections by input rows (their
 * biases whole, added once), the embedding and the output layer by vocabulary rows; norms and
 * learned positions whole.
 */
#include "decoder.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- the shape ------------------------------------------------------------------------------- */

ig_status dec_check_common(ig_model_config *c, int even_heads, ig_err *err) {
    struct {
        const char *name;
        int v;
    } pos[] = {{"n_layer", c->n_layer},
               {"n_head", c->n_head},
               {"d_model", c->d_model},
               {"seq_len", c->seq_len},
               {"vocab_size", c->vocab_size}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG, "model.%s must be > 0, got %d", pos[i].name,
                              pos[i].v);
    if (even_heads && (c->d_model % c->n_head || (c->d_model / c->n_head) % 2))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.n_head (%d) must divide model.d_model (%d) into heads of an even "
                          "size (the rotary embedding turns pairs of channels)",
                          c->n_head, c->d_model);
    if (!even_heads && c->d_model % c->n_head)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.n_head (%d) must divide model.d_model (%d): each head gets "
                          "d_model / n_head channels",
                          c->n_head, c->d_model);
    return IG_OK;
}

ig_status dec_check_layout(const ig_model_config *c, int tp, ig_err *err) {
    const dec_shape o = dec_own(c);
    if (c->n_head % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide model.n_head %d (each rank gets whole "
                          "%sheads)",
                          tp, c->n_head, o.n_kv_heads != c->n_head ? "query " : "");
    if (o.n_kv_heads % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide model.n_kv_heads %d (each rank gets "
                          "whole key/value heads with their query heads): use a tp that divides "
                          "%d",
                          tp, o.n_kv_heads, o.n_kv_heads);
    if (o.ffn_hidden % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide model.ffn_hidden %d (each rank gets "
                          "ffn_hidden / tp columns of the MLP)",
                          tp, o.ffn_hidden);
    if (c->padded_vocab % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide the padded vocabulary of %d rows (a "
                          "multiple of 128): use a tp that divides 128",
                          tp, c->padded_vocab);
    return IG_OK;
}

const char *dec_differs(const ig_model_config *a, const ig_model_config *b) {
    dec_shape x = dec_own(a), y = dec_own(b);
    if (x.n_kv_heads != y.n_kv_heads) return "model.n_kv_heads";
    if (x.ffn_hidden != y.ffn_hidden) return "model.ffn_hidden";
    if (x.rope_theta != y.rope_theta) return "model.rope_theta";
    if (x.tie_embeddings != y.tie_embeddings) return "model.tie_embeddings";
    return "";
}

size_t dec_describe_tokens(const ig_model_config *c, char *buf, size_t cap) {
    int n = snprintf(buf, cap, ", %d positions, vocabulary %d (%d padded)", c->seq_len,
                     c->vocab_size, c->padded_vocab);
    return n > 0 ? (size_t)n : 0;
}

void dec_describe(const ig_model_config *c, char *buf, size_t cap) {
    dec_describe_tokens(c, buf, cap);
}

/* ---- what the passes send (plan_comm.c's accounting) -------------------------------------------
 * Per micro-batch of B x T (N = B T token rows, C the width, e bytes per act element, t
 * tensor-parallel ranks; the Megatron-LM layers of tp_layers.c): each layer's two column-then-row-
 * parallel blocks reduce an [N, C] partial sum forward and the blocks' input gradient backward - an
 * all-reduce each, or with sequence parallelism an all-gather before and a reduce-scatter after
 * (the same bytes, halved twice); the first stage's vocabulary-parallel embedding reduces its
 * output (and with sp gathers its gradient back), the last stage's head reduces its input's
 * gradient (with sp: gathers its input) and the cross-entropy all-reduces its row maxima and
 * [sum of exponentials; target logit] in fp32. Full recomputation runs each layer's forward, with
 * its collectives, again in the backward. A stage sends its residual stream [N (/ t with sp), C]
 * forward and its gradient back. */
ig_comm_micro dec_comm_micro(const ig_model_config *c, const ig_part *p, int B, int T, uint64_t e,
                             int recompute) {
    uint64_t N = (uint64_t)B * (uint64_t)T, C = (uint64_t)c->d_model;
    uint64_t X = N * C * e, nl = (uint64_t)(p->l1 - p->l0);
    int t = p->tp;
    uint64_t tp = 0;
    if (t > 1) {
        uint64_t ce = ig_allreduce_bytes(t, N * 4) + ig_allreduce_bytes(t, 2 * N * 4);
        if (!p->sp) {
            uint64_t r = ig_allreduce_bytes(t, X);
            tp = (p->first ? r : 0) + nl * 2 * r + (p->last ? ce + r : 0) + nl * 2 * r;
            if (recompute == IG_RECOMPUTE_FULL) tp += nl * r; /* up to the MLP's output */
        } else {
            uint64_t g = ig_ring_bytes(t, X); /* an all-gather or a reduce-scatter of the rows */
            tp = (p->first ? 2 * g : 0) + nl * 8 * g + (p->last ? ce + 2 * g : 0);
            if (recompute == IG_RECOMPUTE_FULL) tp += nl * 3 * g; /* gather, scatter, gather */
        }
    }
    uint64_t io = (p->sp ? N / (uint64_t)t : N) * C * e;
    return (ig_comm_micro){
        .tp = tp,
        .sp = 0,
        .pp = p->pp > 1 ? ((p->last ? 0 : io) + (p->first ? 0 : io)) : 0};
}

/* ---- the tensor table ------------------------------------------------------------------------ */

/* A layer's tensor of role r (DEC_*), or 0 when the preset has none. */
static int layer_tensor(const ig_model_config *c, const dec_preset *pre, int r,
                        ig_tensor_spec *t) {
    const dec_shape o = dec_own(c);
    if (!pre->names.layer[r]) return 0;
    int64_t C = c->d_model, hs = dec_hs(c), NH = c->n_head, NKV = o.n_kv_heads;
    int64_t Q = (NH + 2 * NKV) * hs, H = NH * hs;
    int io = pre->layout == IG_W_IN_OUT;
    const ig_tensor_spec norm_w = {.ndim = 1,
                                   .shape = {C},
                                   .place = IG_PLACE_LAYER,
                                   .split_dim = -1,
                                   .init = IG_INIT_ONE,
                                   .sp_partial = 1};
    switch (r) {
    case DEC_NORM1_W:
    case DEC_NORM2_W:
        *t = norm_w;
        return 1;
    case DEC_NORM1_B:
    case DEC_NORM2_B:
        *t = norm_w;
        t->init = IG_INIT_ZERO;
        return 1;
    case DEC_QKV_W: /* column-parallel in its q, k, v blocks */
        *t = (ig_tensor_spec){.ndim = 2,
                              .shape = {io ? C : Q, io ? Q : C},
                              .place = IG_PLACE_LAYER,
                              .split_dim = io ? 1 : 0,
                              .n_blocks = 3,
                              .block = {NH * hs, NKV * hs, NKV * hs},
                              .decay = 1,
                              .init = IG_INIT_NORMAL,
                              .std = 0.02f};
        return 1;
    case DEC_QKV_B:
        *t = (ig_tensor_spec){.ndim = 1,
                              .shape = {Q},
                              .place = IG_PLACE_LAYER,
                              .split_dim = 0,
                              .n_blocks = 3,
                              .block = {NH * hs, NKV * hs, NKV * hs},
                              .init = IG_INIT_ZERO};
        return 1;
    case DEC_PROJ_W: /* row-parallel */
        *t = (ig_tensor_spec){.ndim = 2,
                              .shape = {io ? H : C, io ? C : H},
                              .place = IG_PLACE_LAYER,
                              .split_dim = io ? 0 : 1,
                              .decay = 1,
                              .init = IG_INIT_NORMAL,
                              .std = pre->scaled_init ? (float)(0.02 / sqrt(2.0 * c->n_layer))
                                                      : 0.02f};
        return 1;
    case DEC_PROJ_B: /* whole, added once */
        *t = (ig_tensor_spec){
            .ndim = 1, .shape = {C}, .place = IG_PLACE_LAYER, .split_dim = -1, .init = IG_INIT_ZERO};
        return 1;
    default:
        pre->mlp->tensor(c, pre, r - DEC_MLP0, t);
        return 1;
    }
}

/* The embedding (and learned positions), the layers in order, the final norm and the output
 * layer when untied: the order of the parameter buffer. Initial values as the Hugging Face models
 * draw them: normal(0, 0.02) (GPT-2's residual projections 0.02 / sqrt(2 L)), norms 1, biases 0. */
size_t dec_tensors(const ig_model_config *c, const ig_part *p, ig_tensor_spec *out, size_t cap) {
    const dec_shape o = dec_own(c);
    const dec_preset *pre = dec_preset_of(c);
    const dec_names *nm = &pre->names;
    ig_spec_list tb = {out, 0, cap};
    int64_t C = c->d_model;
    int tied = o.tie_embeddings;
    const ig_tensor_spec vocab = {.ndim = 2,
                                  .shape = {c->padded_vocab, C},
                                  .split_dim = 0,
                                  .decay = 1,
                                  .init = IG_INIT_NORMAL_ROWS,
                                  .std = 0.02f,
                                  .init_rows = c->vocab_size};
    if (p->first || (tied && p->last)) {
        ig_tensor_spec e = vocab;
        e.place = tied ? IG_PLACE_TIED : IG_PLACE_FIRST;
        ig_spec_add(&tb, nm->embed, 0, &e);
    }
    if (p->first && nm->pos)
        ig_spec_add(&tb, nm->pos, 0,
                    &(ig_tensor_spec){.ndim = 2,
                                      .shape = {c->seq_len, C},
                                      .place = IG_PLACE_FIRST,
                                      .split_dim = -1,
                                      .decay = 1,
                                      .init = IG_INIT_NORMAL,
                                      .std = 0.02f});
    for (int l = p->l0; l < p->l1; l++)
        for (int r = 0; r < DEC_ROLES; r++) {
            ig_tensor_spec t;
            if (layer_tensor(c, pre, r, &t)) ig_spec_add(&tb, nm->layer[r], l, &t);
        }
    if (p->last) {
        ig_tensor_spec w = {.ndim = 1,
                            .shape = {C},
                            .place = IG_PLACE_LAST,
                            .split_dim = -1,
                            .init = IG_INIT_ONE,
                            .sp_partial = 1},
                       b = w;
        b.init = IG_INIT_ZERO;
        ig_spec_add(&tb, nm->norm_w, 0, &w);
        if (nm->norm_b) ig_spec_add(&tb, nm->norm_b, 0, &b);
        ig_tensor_spec h = vocab;
        h.place = IG_PLACE_LAST;
        if (!tied) ig_spec_add(&tb, nm->head, 0, &h);
    }
    return tb.n;
}

/* The parameters: the table of the whole model, counted (the padded vocabulary rows included). */
uint64_t dec_num_params(const ig_model_config *c) {
    ig_part whole = {.tp = 1, .l0 = 0, .l1 = c->n_layer, .first = 1, .last = 1};
    uint64_t n = 0;
    /* one layer's tensors, counted once and multiplied, then the others */
    ig_part one = whole;
    one.l1 = c->n_layer > 0 ? 1 : 0;
    one.first = one.last = 0;
    ig_tensor_spec t[DEC_ROLES];
    size_t k = dec_tensors(c, &one, t, DEC_ROLES);
    for (size_t i = 0; i < k; i++)
        n += (uint64_t)t[i].shape[0] * (uint64_t)(t[i].ndim > 1 ? t[i].shape[1] : 1);
    n *= (uint64_t)c->n_layer;
    ig_part ends = whole;
    ends.l1 = 0;
    ig_tensor_spec e[8];
    k = dec_tensors(c, &ends, e, 8);
    for (size_t i = 0; i < k; i++)
        n += (uint64_t)e[i].shape[0] * (uint64_t)(e[i].ndim > 1 ? e[i].shape[1] : 1);
    return n;
}

/* 2 flops per matmul weight (the output layer's included, the embedding's gather not) and
 * 2 * 2 * T * (NH hs) for the scores and the weighted sum of each layer, of which causality keeps
 * about half (PaLM's accounting) */
double dec_flops_per_token(const ig_model_config *c, int T) {
    const dec_shape o = dec_own(c);
    const dec_preset *pre = dec_preset_of(c);
    double C = c->d_model, L = c->n_layer, F = o.ffn_hidden, hs = C / c->n_head;
    double Q = (c->n_head + 2.0 * o.n_kv_heads) * hs, H = c->n_head * hs;
    double mlp = pre->mlp->n_weights * F * C;
    double matmul = L * (Q * C + H * C + mlp) + (double)c->padded_vocab * C;
    return 2.0 * matmul + L * 2.0 * (double)T * H;
}

/* ---- activations ----------------------------------------------------------------------------- */

/* Lays out the activations of a B x T micro-batch: per slot, offsets in elements of the act type
 * and of fp32; then the scratch the slots share, starting with the region of one layer's worth
 * that the layers' recomputed activations reuse (train.recompute; family.h's places). x->layer
 * may be NULL (sizes only).
 *
 * What a slot keeps per layer: with none every activation below; with selective all but the
 * attention core's output atty and its lse (recomputed from qkv before attention's backward);
 * with full only res3, the next layer's input (the stage's first layer's input is encoded), and
 * the last layer's on the last stage (the final norm's input): the backward runs the layer's
 * forward again from its input into the region. */
static void layout(const ig_model_config *c, const ig_part *p, int B, int T, dec_state *x,
                   ig_act_sizes *out) {
    const dec_shape o = dec_own(c);
    const dec_preset *pre = dec_preset_of(c);
    const dec_mlp *mlp = pre->mlp;
    int ln = pre->norm == DEC_LAYERNORM;
    uint64_t N = (uint64_t)B * (uint64_t)T, tp = (uint64_t)p->tp, Nl = p->sp ? N / tp : N;
    uint64_t C = (uint64_t)c->d_model, sp = (uint64_t)(p->sp != 0), hs = (uint64_t)dec_hs(c);
    uint64_t Ql = ((uint64_t)c->n_head + 2 * (uint64_t)o.n_kv_heads) * hs / tp;
    uint64_t Hl = (uint64_t)c->n_head * hs / tp, Fl = (uint64_t)o.ffn_hidden / tp;
    uint64_t Vl = (uint64_t)c->padded_vocab / tp;
    ig_act_plan pl = {.recompute = p->recompute};
    const ig_act_kind K = IG_ACT_LAYER, CORE = IG_ACT_CORE;
    x->encoded = ig_act_take(&pl.act, Nl * C);
    for (int l = p->l0; l < p->l1; l++) {
        dec_layer_acts tmp, *y = x->layer ? &x->layer[l - p->l0] : &tmp;
        ig_act_next_layer(&pl);
        y->n1 = ig_act_place(&pl, K, Nl * C);
        y->mean1 = ln ? ig_act_place_f32(&pl, K, Nl) : 0;
        y->rstd1 = ig_act_place_f32(&pl, K, Nl);
        y->n1_full = ig_act_place(&pl, K, sp * N * C);
        y->qkv = ig_act_place(&pl, K, N * Ql);
        y->atty = ig_act_place(&pl, CORE, N * Hl);
        y->lse = ig_act_place_f32(&pl, CORE, N * ((uint64_t)c->n_head / tp));
        y->attproj = ig_act_place(&pl, K, Nl * C);
        y->res2 = ig_act_place(&pl, K, Nl * C);
        y->n2 = ig_act_place(&pl, K, Nl * C);
        y->mean2 = ln ? ig_act_place_f32(&pl, K, Nl) : 0;
        y->rstd2 = ig_act_place_f32(&pl, K, Nl);
        y->n2_full = ig_act_place(&pl, K, sp * N * C);
        for (int k = 0; k < mlp->n_acts; k++) y->mlp[k] = ig_act_place(&pl, K, N * Fl);
        y->mlp_out = ig_act_place(&pl, K, Nl * C);
        /* a middle stage's last layer has no res3 (its output is `output`) */
        y->res3 = ig_act_place(&pl, l + 1 < p->l1 || p->last ? IG_ACT_BOUNDARY : K, Nl * C);
    }
    if (!p->last) x->output = ig_act_take(&pl.act, Nl * C);
    if (p->last) {
        x->hn = ig_act_take(&pl.act, Nl * C);
        x->mean_n = ln ? ig_act_take(&pl.f32, Nl) : 0;
        x->rstd_n = ig_act_take(&pl.f32, Nl);
        x->hn_full = ig_act_take(&pl.act, sp * N * C);
        x->logits = ig_act_take(&pl.act, N * Vl);
    }
    out->act = pl.act;
    out->f32 = pl.f32;
    out->i32 = 3 * N;
    out->io_f32 = 2 * N;
    /* scratch: the recomputed layer's region, then the backward's buffers */
    uint64_t tpx = (uint64_t)(p->tp > 1), a = pl.region_act, f = pl.region_f32;
    x->dres = ig_act_take(&a, Nl * C);
    x->dres_full = ig_act_take(&a, sp * N * C);
    x->dln = ig_act_take(&a, Nl * C);
    x->dpartial = ig_act_take(&a, tpx * N * C); /* a column-parallel layer's input gradient */
    x->dtmp = mlp->second_input ? ig_act_take(&a, N * C) : 0; /* the MLP's second input share */
    x->partial = ig_act_take(&a, sp * N * C); /* a row-parallel layer's output, unreduced (sp) */
    x->datty = ig_act_take(&a, N * Hl);
    x->dqkv = ig_act_take(&a, N * Ql);
    for (int k = 0; k < mlp->n_scratch; k++) x->dmlp[k] = ig_act_take(&a, N * Fl);
    x->rowmax = ig_act_take(&f, tpx * N);
    x->stats = ig_act_take(&f, tpx * 2 * N);
    out->scratch_act = a;
    out->scratch_f32 = f;
}

void dec_plan(const ig_model_config *c, const ig_part *p, int B, int T, ig_act_sizes *out) {
    dec_state x = {0};
    layout(c, p, B, T, &x, out);
}

ig_status dec_create(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    const ig_model_config *c = &m->cfg;
    const dec_shape o = dec_own(c);
    dec_state *x = ig_calloc(m->ctx, 1, sizeof *x);
    if (x) x->layer = ig_calloc(m->ctx, (size_t)(p->l1 - p->l0), sizeof *x->layer);
    if (!x || !x->layer) {
        if (x) ig_free(m->ctx, x);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    const dec_preset *pre = x->pre = dec_preset_of(c);
    ig_act_sizes sizes;
    layout(c, p, m->B, m->T, x, &sizes);
    int hs = dec_hs(c);
    x->N = m->B * m->T;
    x->Nl = p->sp ? x->N / p->tp : x->N;
    x->Ql = (c->n_head + 2 * o.n_kv_heads) * hs / p->tp;
    x->Hl = c->n_head * hs / p->tp;
    x->Fl = o.ffn_hidden / p->tp;
    x->Vl = c->padded_vocab / p->tp;
    x->per_layer = 0;
    for (int r = 0; r < DEC_ROLES; r++) {
        ig_tensor_spec t;
        x->role[r] = layer_tensor(c, pre, r, &t) ? x->per_layer++ : -1;
    }
    x->t_embed = x->t_pos = x->t_layer0 = x->t_norm = x->t_head = -1;
    const dec_names *nm = &pre->names;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const char *n = m->tensors[i].name;
        if (!strcmp(n, nm->embed)) x->t_embed = (int)i;
        if (nm->pos && !strcmp(n, nm->pos)) x->t_pos = (int)i;
        if (!strcmp(n, nm->norm_w)) x->t_norm = (int)i;
        if (nm->head && !strcmp(n, nm->head)) x->t_head = (int)i;
        if (x->t_layer0 < 0 && m->tensors[i].place == IG_PLACE_LAYER) x->t_layer0 = (int)i;
    }
    if (o.tie_embeddings) x->t_head = x->t_embed; /* the output layer is the embedding */
    m->fs = x;
    return IG_OK;
}

void dec_destroy(ig_model *m) {
    dec_state *x = dec_of(m);
    ig_free(m->ctx, x->layer);
    ig_free(m->ctx, x);
    m->fs = NULL;
}

/* The preset of a shape's model.arch (its descriptor's). */
const dec_preset *dec_preset_of(const ig_model_config *c) {
    return ig_family_of(c->arch)->preset;
}
