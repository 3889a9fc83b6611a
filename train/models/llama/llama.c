/* llama.c - the Llama family (Llama 2/3's architecture, as Hugging Face's LlamaForCausalLM): its
 * keys and shape, the table of tensors with their tags, the activations of a micro-batch, and its
 * Hugging Face files. The passes are in llama_pass.c.
 *
 * The architecture: RMSNorm (model.norm_eps, computed in fp32) before attention and before the
 * MLP, rotary positions in the rotate-half convention (model.rope_theta), grouped-query attention
 * (model.n_kv_heads key/value heads, each serving a consecutive group of query heads), a SwiGLU
 * MLP (model.ffn_hidden: by default 2/3 * 4 * d_model up to a multiple of 256), no biases, a final
 * RMSNorm and an untied output layer (model.tie_embeddings: false); the vocabulary padded to a
 * multiple of 128 (the padded logits are ignored by the loss).
 *
 * Weights are stored as nn.Linear stores them, [out, in] (y = x @ W^T), so Hugging Face's tensors
 * are copied, not transposed; q, k and v are one tensor here (their rows one after the other),
 * so that one matmul fills the packed [q heads | k heads | v heads] rows attention reads. Tensor
 * parallelism (Megatron's): q|k|v by rows in its three blocks (each rank holds n_head / tp query
 * heads and n_kv_heads / tp key/value heads: whole groups), gate and up by rows, o_proj and
 * down_proj by columns (row-parallel layers), the embedding and the output layer by vocabulary
 * rows; the norms whole.
 */
#include "llama.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../hf.h"

/* ---- keys and shape ----------------------------------------------------------------------------
 */

static const ig_cfg_key llama_keys[] = {
    IG_MODEL_KEY("model.n_kv_heads", IG_CFG_INT, n_kv_heads, "0", 0, 4096,
                 "llama: key/value heads of grouped-query attention (dividing n_head); 0: n_head"),
    IG_MODEL_KEY("model.ffn_hidden", IG_CFG_INT, ffn_hidden, "0", 0, 1048576,
                 "llama: the SwiGLU MLP's width; 0: 2/3 x 4 x d_model up to a multiple of 256"),
    IG_MODEL_KEY("model.rope_theta", IG_CFG_FLOAT, rope_theta, "10000", 1, 1e12,
                 "llama: the base of the rotary position embedding"),
    IG_MODEL_KEY("model.tie_embeddings", IG_CFG_BOOL, tie_embeddings, "false", 0, 0,
                 "llama: the output layer is the input embedding (Llama 3.2 1B/3B)"),
};

static ig_status llama_check(ig_model_config *c, ig_err *err) {
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
    if (c->d_model % c->n_head || (c->d_model / c->n_head) % 2)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.n_head (%d) must divide model.d_model (%d) into heads of an even "
                          "size (the rotary embedding turns pairs of channels)",
                          c->n_head, c->d_model);
    if (c->n_kv_heads == 0) c->n_kv_heads = c->n_head;
    if (c->n_kv_heads < 0 || c->n_head % c->n_kv_heads)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.n_kv_heads (%d) must divide model.n_head (%d): each key/value "
                          "head serves n_head / n_kv_heads query heads",
                          c->n_kv_heads, c->n_head);
    if (c->ffn_hidden == 0) {
        int64_t f = (int64_t)8 * c->d_model / 3; /* 2/3 * 4 * C, then up to a multiple of 256 */
        c->ffn_hidden = (int)((f + 255) / 256 * 256);
    }
    if (c->ffn_hidden < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.ffn_hidden must be > 0, got %d",
                          c->ffn_hidden);
    if (c->vocab_size > (1 << 30))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.vocab_size %d is above 2^30",
                          c->vocab_size);
    if (c->norm_eps == 0) c->norm_eps = 1e-5;
    if (c->rope_theta == 0) c->rope_theta = 10000;
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.norm_eps %g: need 0 < eps < 1",
                          c->norm_eps);
    if (!(c->rope_theta >= 1 && c->rope_theta <= 1e12))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.rope_theta %g: need 1 <= theta <= 1e12",
                          c->rope_theta);
    c->tie_embeddings = c->tie_embeddings != 0;
    c->padded_vocab = (c->vocab_size + 127) / 128 * 128;
    /* every tensor's elements must be addressable with 32-bit kernel arguments */
    int64_t hs = c->d_model / c->n_head, q = (int64_t)(c->n_head + 2 * c->n_kv_heads) * hs;
    if (q * c->d_model > INT32_MAX || (int64_t)c->ffn_hidden * c->d_model > INT32_MAX ||
        (uint64_t)c->padded_vocab * (uint64_t)c->d_model > (uint64_t)1 << 40)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.d_model %d is too large", c->d_model);
    return IG_OK;
}

static ig_status llama_check_layout(const ig_model_config *c, int tp, ig_err *err) {
    if (c->n_head % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide model.n_head %d (each rank gets whole "
                          "query heads)",
                          tp, c->n_head);
    if (c->n_kv_heads % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide model.n_kv_heads %d (each rank gets "
                          "whole key/value heads with their query heads): use a tp that divides "
                          "%d",
                          tp, c->n_kv_heads, c->n_kv_heads);
    if (c->ffn_hidden % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide model.ffn_hidden %d (each rank gets "
                          "ffn_hidden / tp columns of the MLP)",
                          tp, c->ffn_hidden);
    if (c->padded_vocab % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide the padded vocabulary of %d rows (a "
                          "multiple of 128): use a tp that divides 128",
                          tp, c->padded_vocab);
    return IG_OK;
}

static uint64_t llama_num_params(const ig_model_config *c) {
    uint64_t C = (uint64_t)c->d_model, L = (uint64_t)c->n_layer, F = (uint64_t)c->ffn_hidden;
    uint64_t hs = C / (uint64_t)c->n_head;
    uint64_t Q = ((uint64_t)c->n_head + 2 * (uint64_t)c->n_kv_heads) * hs;
    uint64_t per_layer = 2 * C + Q * C + (uint64_t)c->n_head * hs * C + 3 * F * C;
    uint64_t emb = (uint64_t)c->padded_vocab * C;
    return emb * (c->tie_embeddings ? 1 : 2) + L * per_layer + C;
}

static void llama_describe(const ig_model_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, ", %d kv heads, ffn %d%s", c->n_kv_heads, c->ffn_hidden,
             c->tie_embeddings ? ", tied embeddings" : "");
}

static double llama_flops_per_token(const ig_model_config *c, int T) {
    /* 2 flops per matmul weight (the output layer's included, the embedding's gather not) and
     * 2 * 2 * T * (NH hs) for the scores and the weighted sum of each layer, of which causality
     * keeps about half */
    double C = c->d_model, L = c->n_layer, F = c->ffn_hidden, hs = C / c->n_head;
    double Q = (c->n_head + 2.0 * c->n_kv_heads) * hs, H = c->n_head * hs;
    double matmul = L * (Q * C + H * C + 3.0 * F * C) + (double)c->padded_vocab * C;
    return 2.0 * matmul + L * 2.0 * (double)T * H;
}

/* ---- the tensor table --------------------------------------------------------------------------
 */

/* The embedding, the layers, the final norm and the output layer (when untied). Weights are
 * [out, in]: q|k|v, gate and up are cut by output rows (dimension 0; q|k|v in its three unequal
 * blocks), o_proj and down_proj by input columns (dimension 1); the embedding and the output layer
 * by vocabulary rows. The norms are whole, their gradients partial under sp. Initial values as
 * transformers' LlamaPreTrainedModel: normal(0, 0.02), the norms 1. */
static size_t llama_tensors(const ig_model_config *c, const ig_part *p, ig_tensor_spec *out,
                            size_t cap) {
    ig_spec_list tb = {out, 0, cap};
    int64_t C = c->d_model, F = c->ffn_hidden, hs = llama_hs(c);
    int64_t NH = c->n_head, NKV = c->n_kv_heads;
    const float s = 0.02f;
    const ig_place L = IG_PLACE_LAYER;
    int tied = c->tie_embeddings;
    const ig_tensor_spec vocab = {.ndim = 2,
                                  .shape = {c->padded_vocab, C},
                                  .split_dim = 0,
                                  .decay = 1,
                                  .init = IG_INIT_NORMAL_ROWS,
                                  .std = s,
                                  .init_rows = c->vocab_size};
    if (p->first || (tied && p->last)) {
        ig_tensor_spec e = vocab;
        e.place = tied ? IG_PLACE_TIED : IG_PLACE_FIRST;
        ig_spec_add(&tb, "model.embed_tokens.weight", 0, &e);
    }
    const ig_tensor_spec norm = {
        .ndim = 1, .shape = {C}, .place = L, .split_dim = -1, .init = IG_INIT_ONE, .sp_partial = 1};
    const ig_tensor_spec qkv = {.ndim = 2,
                                .shape = {(NH + 2 * NKV) * hs, C},
                                .place = L,
                                .split_dim = 0,
                                .n_blocks = 3,
                                .block = {NH * hs, NKV * hs, NKV * hs},
                                .decay = 1,
                                .init = IG_INIT_NORMAL,
                                .std = s};
    const ig_tensor_spec o = {.ndim = 2,
                              .shape = {C, NH * hs},
                              .place = L,
                              .split_dim = 1,
                              .decay = 1,
                              .init = IG_INIT_NORMAL,
                              .std = s};
    const ig_tensor_spec up = {.ndim = 2,
                               .shape = {F, C},
                               .place = L,
                               .split_dim = 0,
                               .decay = 1,
                               .init = IG_INIT_NORMAL,
                               .std = s};
    const ig_tensor_spec down = {.ndim = 2,
                                 .shape = {C, F},
                                 .place = L,
                                 .split_dim = 1,
                                 .decay = 1,
                                 .init = IG_INIT_NORMAL,
                                 .std = s};
    for (int l = p->l0; l < p->l1; l++) {
        ig_spec_add(&tb, "model.layers.%d.input_layernorm.weight", l, &norm);
        ig_spec_add(&tb, "model.layers.%d.self_attn.qkv_proj.weight", l, &qkv);
        ig_spec_add(&tb, "model.layers.%d.self_attn.o_proj.weight", l, &o);
        ig_spec_add(&tb, "model.layers.%d.post_attention_layernorm.weight", l, &norm);
        ig_spec_add(&tb, "model.layers.%d.mlp.gate_proj.weight", l, &up);
        ig_spec_add(&tb, "model.layers.%d.mlp.up_proj.weight", l, &up);
        ig_spec_add(&tb, "model.layers.%d.mlp.down_proj.weight", l, &down);
    }
    if (p->last) {
        ig_tensor_spec n = norm, h = vocab;
        n.place = h.place = IG_PLACE_LAST;
        ig_spec_add(&tb, "model.norm.weight", 0, &n);
        if (!tied) ig_spec_add(&tb, "lm_head.weight", 0, &h);
    }
    return tb.n;
}

/* ---- activations -------------------------------------------------------------------------------
 */

/* Lays out the activations of a B x T micro-batch: per slot, then the scratch, which starts with
 * the region of one layer's worth that the layers' recomputed activations reuse (train.recompute;
 * family.h's places). x->layer may be NULL (sizes only). A slot keeps per layer: with none every
 * activation below; with selective all but the attention core's output atty and its lse; with
 * full only res3, the next layer's input (and the last layer's on the last stage: the final
 * norm's input), the stage's first layer's input being encoded. */
static void layout(const ig_model_config *c, const ig_part *p, int B, int T, llama_state *x,
                   ig_act_sizes *out) {
    uint64_t N = (uint64_t)B * (uint64_t)T, tp = (uint64_t)p->tp, Nl = p->sp ? N / tp : N;
    uint64_t C = (uint64_t)c->d_model, sp = (uint64_t)(p->sp != 0), hs = (uint64_t)llama_hs(c);
    uint64_t Ql = ((uint64_t)c->n_head + 2 * (uint64_t)c->n_kv_heads) * hs / tp;
    uint64_t Hl = (uint64_t)c->n_head * hs / tp, Fl = (uint64_t)c->ffn_hidden / tp;
    uint64_t Vl = (uint64_t)c->padded_vocab / tp;
    ig_act_plan pl = {.recompute = p->recompute};
    const ig_act_kind K = IG_ACT_LAYER, CORE = IG_ACT_CORE;
    x->encoded = ig_act_take(&pl.act, Nl * C);
    for (int l = p->l0; l < p->l1; l++) {
        llama_layer_acts tmp, *y = x->layer ? &x->layer[l - p->l0] : &tmp;
        ig_act_next_layer(&pl);
        y->h1 = ig_act_place(&pl, K, Nl * C);
        y->h1_full = ig_act_place(&pl, K, sp * N * C);
        y->rstd1 = ig_act_place_f32(&pl, K, Nl);
        y->qkv = ig_act_place(&pl, K, N * Ql);
        y->atty = ig_act_place(&pl, CORE, N * Hl);
        y->lse = ig_act_place_f32(&pl, CORE, N * ((uint64_t)c->n_head / tp));
        y->attproj = ig_act_place(&pl, K, Nl * C);
        y->res2 = ig_act_place(&pl, K, Nl * C);
        y->h2 = ig_act_place(&pl, K, Nl * C);
        y->h2_full = ig_act_place(&pl, K, sp * N * C);
        y->rstd2 = ig_act_place_f32(&pl, K, Nl);
        y->gate = ig_act_place(&pl, K, N * Fl);
        y->up = ig_act_place(&pl, K, N * Fl);
        y->act = ig_act_place(&pl, K, N * Fl);
        y->mlp = ig_act_place(&pl, K, Nl * C);
        /* a middle stage's last layer has no res3 (its output is `output`) */
        y->res3 = ig_act_place(&pl, l + 1 < p->l1 || p->last ? IG_ACT_BOUNDARY : K, Nl * C);
    }
    if (!p->last) x->output = ig_act_take(&pl.act, Nl * C);
    if (p->last) {
        x->hn = ig_act_take(&pl.act, Nl * C);
        x->hn_full = ig_act_take(&pl.act, sp * N * C);
        x->rstd_n = ig_act_take(&pl.f32, Nl);
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
    x->dtmp = ig_act_take(&a, N * C);           /* up_proj's share of the MLP input's gradient */
    x->partial = ig_act_take(&a, sp * N * C);   /* a row-parallel layer's output, unreduced (sp) */
    x->datty = ig_act_take(&a, N * Hl);
    x->dqkv = ig_act_take(&a, N * Ql);
    x->dact = ig_act_take(&a, N * Fl);
    x->dgate = ig_act_take(&a, N * Fl);
    x->dup = ig_act_take(&a, N * Fl);
    x->rowmax = ig_act_take(&f, tpx * N);
    x->stats = ig_act_take(&f, tpx * 2 * N);
    out->scratch_act = a;
    out->scratch_f32 = f;
}

static void llama_plan(const ig_model_config *c, const ig_part *p, int B, int T,
                       ig_act_sizes *out) {
    llama_state x = {0};
    layout(c, p, B, T, &x, out);
}

static ig_status llama_create(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    const ig_model_config *c = &m->cfg;
    llama_state *x = ig_calloc(m->ctx, 1, sizeof *x);
    if (x) x->layer = ig_calloc(m->ctx, (size_t)(p->l1 - p->l0), sizeof *x->layer);
    if (!x || !x->layer) {
        if (x) ig_free(m->ctx, x);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    ig_act_sizes sizes;
    layout(c, p, m->B, m->T, x, &sizes);
    int hs = llama_hs(c);
    x->N = m->B * m->T;
    x->Nl = p->sp ? x->N / p->tp : x->N;
    x->Ql = (c->n_head + 2 * c->n_kv_heads) * hs / p->tp;
    x->Hl = c->n_head * hs / p->tp;
    x->Fl = c->ffn_hidden / p->tp;
    x->Vl = c->padded_vocab / p->tp;
    x->t_embed = x->t_layer0 = x->t_norm = x->t_head = -1;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const char *n = m->tensors[i].name;
        if (!strcmp(n, "model.embed_tokens.weight")) x->t_embed = (int)i;
        if (!strcmp(n, "model.norm.weight")) x->t_norm = (int)i;
        if (!strcmp(n, "lm_head.weight")) x->t_head = (int)i;
        if (x->t_layer0 < 0 && m->tensors[i].place == IG_PLACE_LAYER) x->t_layer0 = (int)i;
    }
    if (c->tie_embeddings) x->t_head = x->t_embed; /* the output layer is the embedding */
    m->fs = x;
    return IG_OK;
}

static void llama_destroy(ig_model *m) {
    llama_state *x = llama_of(m);
    ig_free(m->ctx, x->layer);
    ig_free(m->ctx, x);
    m->fs = NULL;
}

/* ---- checkpoint manifests ------------------------------------------------------------------- */

static ig_status llama_to_json(const ig_model_config *c, json_t *model, ig_err *err) {
    (void)err;
    json_object_set_new(model, "n_kv_heads", json_integer(c->n_kv_heads));
    json_object_set_new(model, "ffn_hidden", json_integer(c->ffn_hidden));
    json_object_set_new(model, "norm_eps", json_real(c->norm_eps));
    json_object_set_new(model, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(model, "tie_embeddings", json_boolean(c->tie_embeddings));
    return IG_OK;
}

static ig_status llama_from_json(json_t *model, ig_model_config *c, const char *file, ig_err *err) {
    int64_t kv = 0, ffn = 0;
    ig_status st = ig_hf_get_int(model, file, "n_kv_heads", NULL, 1, 4096, 1, 0, &kv, err);
    if (st == IG_OK)
        st = ig_hf_get_int(model, file, "ffn_hidden", NULL, 1, INT32_MAX, 1, 0, &ffn, err);
    if (st == IG_OK) st = ig_hf_get_float(model, file, "norm_eps", 1, 0, &c->norm_eps, err);
    if (st == IG_OK) st = ig_hf_get_float(model, file, "rope_theta", 1, 0, &c->rope_theta, err);
    if (st == IG_OK) st = ig_hf_get_bool(model, file, "tie_embeddings", 0, &c->tie_embeddings, err);
    c->n_kv_heads = (int)kv;
    c->ffn_hidden = (int)ffn;
    return st;
}

/* ---- Hugging Face LlamaForCausalLM ------------------------------------------------------------
 */

static ig_status llama_hf_config(json_t *o, const char *file, ig_model_config *out, int32_t *eod,
                                 ig_err *err) {
    int64_t v[6] = {0}, kv = 0, hd = 0, e = -1;
    static const char *const keys[] = {"num_hidden_layers", "num_attention_heads",
                                       "hidden_size",       "max_position_embeddings",
                                       "vocab_size",        "intermediate_size"};
    ig_status st = IG_OK;
    for (int i = 0; i < 6 && st == IG_OK; i++)
        st = ig_hf_get_int(o, file, keys[i], NULL, 1, 1 << 30, 1, 0, &v[i], err);
    if (st == IG_OK)
        st = ig_hf_get_int(o, file, "num_key_value_heads", NULL, 1, 1 << 20, 0, v[1], &kv, err);
    if (st == IG_OK) st = ig_hf_get_int(o, file, "head_dim", NULL, 1, 1 << 20, 0, 0, &hd, err);
    if (st == IG_OK) st = ig_hf_get_positive(o, file, "rms_norm_eps", 1e-6, &out->norm_eps, err);
    if (st == IG_OK) st = ig_hf_get_positive(o, file, "rope_theta", 10000, &out->rope_theta, err);
    if (st == IG_OK)
        st = ig_hf_get_bool(o, file, "tie_word_embeddings", 0, &out->tie_embeddings, err);
    int abias = 0, mbias = 0;
    if (st == IG_OK) st = ig_hf_get_bool(o, file, "attention_bias", 0, &abias, err);
    if (st == IG_OK) st = ig_hf_get_bool(o, file, "mlp_bias", 0, &mbias, err);
    /* eos_token_id: one id, or a list of them (Llama 3): the first ends a document */
    json_t *eos = json_object_get(o, "eos_token_id");
    if (st == IG_OK && json_is_array(eos) && json_array_size(eos) > 0) eos = json_array_get(eos, 0);
    if (st == IG_OK && json_is_integer(eos)) e = json_integer_value(eos);
    if (st != IG_OK) return st;
    const char *act = json_string_value(json_object_get(o, "hidden_act"));
    json_t *scaling = json_object_get(o, "rope_scaling");
    const char *no = act && strcmp(act, "silu") != 0 ? "hidden_act other than silu"
                     : scaling && !json_is_null(scaling)
                         ? "rope_scaling (a scaled rotary embedding)"
                     : abias                   ? "attention_bias true"
                     : mbias                   ? "mlp_bias true"
                     : hd && hd * v[1] != v[2] ? "head_dim other than hidden_size / heads"
                                               : NULL;
    if (no)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: %s: ingot's Llama cannot compute that model", file, no);
    out->n_layer = (int)v[0], out->n_head = (int)v[1], out->d_model = (int)v[2];
    out->seq_len = (int)v[3], out->vocab_size = (int)v[4], out->ffn_hidden = (int)v[5];
    out->n_kv_heads = (int)kv;
    *eod = e >= 0 && e < v[4] ? (int32_t)e : -1;
    return IG_OK;
}

static json_t *llama_hf_write_config(const ig_model_config *c, int32_t eod) {
    int32_t e = eod >= 0 ? eod : c->vocab_size - 1;
    return json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:i,s:b,s:s,s:b,s:b,s:f,s:s,"
                     "s:i,s:i}",
                     "architectures", "LlamaForCausalLM", "model_type", "llama", "vocab_size",
                     c->vocab_size, "hidden_size", c->d_model, "intermediate_size", c->ffn_hidden,
                     "num_hidden_layers", c->n_layer, "num_attention_heads", c->n_head,
                     "num_key_value_heads", c->n_kv_heads, "max_position_embeddings", c->seq_len,
                     "rms_norm_eps", c->norm_eps, "rope_theta", c->rope_theta, "head_dim",
                     llama_hs(c), "tie_word_embeddings", c->tie_embeddings, "hidden_act", "silu",
                     "attention_bias", 0, "mlp_bias", 0, "initializer_range", 0.02, "torch_dtype",
                     "float32", "bos_token_id", e, "eos_token_id", e);
}

static size_t piece(ig_hf_piece *out, size_t cap, size_t n, const char *name, int64_t row0,
                    int64_t rows) {
    if (n < cap) {
        snprintf(out[n].name, sizeof out[n].name, "%s", name);
        out[n].alt[0] = '\0';
        out[n].row0 = row0;
        out[n].rows = rows;
    }
    return n + 1;
}

/* q|k|v is three tensors there; the embedding and the output layer have vocab_size rows */
static size_t llama_hf_pieces(const ig_model_config *c, const ig_tensor_spec *t, ig_hf_piece *out,
                              size_t cap) {
    const char *qkv = strstr(t->name, "self_attn.qkv_proj.weight");
    if (qkv) {
        char name[128];
        int64_t hs = llama_hs(c), q = (int64_t)c->n_head * hs, kv = (int64_t)c->n_kv_heads * hs;
        int prefix = (int)(qkv - t->name);
        size_t n = 0;
        snprintf(name, sizeof name, "%.*sself_attn.q_proj.weight", prefix, t->name);
        n = piece(out, cap, n, name, 0, q);
        snprintf(name, sizeof name, "%.*sself_attn.k_proj.weight", prefix, t->name);
        n = piece(out, cap, n, name, q, kv);
        snprintf(name, sizeof name, "%.*sself_attn.v_proj.weight", prefix, t->name);
        return piece(out, cap, n, name, q + kv, kv);
    }
    int vocab = !strcmp(t->name, "model.embed_tokens.weight") || !strcmp(t->name, "lm_head.weight");
    return piece(out, cap, 0, t->name, 0, vocab ? c->vocab_size : t->shape[0]);
}

static int llama_hf_ignored(const char *name) {
    size_t n = strlen(name), k = strlen("rotary_emb.inv_freq");
    return n >= k && strcmp(name + n - k, "rotary_emb.inv_freq") == 0;
}

/* ---- the family ------------------------------------------------------------------------------ */

static const ig_op llama_ops[] = {
    IG_OP_ENCODER_FORWARD,
    IG_OP_ENCODER_BACKWARD,
    IG_OP_RMSNORM_FORWARD,
    IG_OP_RESIDUAL_RMSNORM_FORWARD,
    IG_OP_RMSNORM_BACKWARD,
    IG_OP_MATMUL_FORWARD,
    IG_OP_MATMUL_BACKWARD,
    IG_OP_SWIGLU_FORWARD,
    IG_OP_SWIGLU_BACKWARD,
    IG_OP_ROPE_FORWARD,
    IG_OP_ROPE_BACKWARD,
    IG_OP_ATTENTION_FORWARD,
    IG_OP_ATTENTION_BACKWARD,
    IG_OP_ATTENTION_CACHED,
    IG_OP_CROSSENTROPY,
    IG_OP_CE_MAX,
    IG_OP_CE_SUMS,
    IG_OP_CE_FINISH,
    IG_OP_ADD,
};

const ig_family ig_family_llama = {
    .arch = "llama",
    .id = IG_ARCH_LLAMA,
    .input = IG_INPUT_TOKENS,
    .what = "Llama: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases",
    .keys = llama_keys,
    .n_keys = sizeof llama_keys / sizeof llama_keys[0],
    .ops = llama_ops,
    .n_ops = sizeof llama_ops / sizeof llama_ops[0],
    .check = llama_check,
    .check_layout = llama_check_layout,
    .num_params = llama_num_params,
    .describe = llama_describe,
    .flops_per_token = llama_flops_per_token,
    .tensors = llama_tensors,
    .plan = llama_plan,
    .create = llama_create,
    .destroy = llama_destroy,
    .stage_batch = ig_lm_stage_batch,
    .forward = llama_forward,
    .backward = llama_backward,
    .loss = ig_lm_loss,
    .stage_io = llama_stage_io,
    .to_json = llama_to_json,
    .from_json = llama_from_json,
    .hf_model_type = "llama",
    .hf_config = llama_hf_config,
    .hf_write_config = llama_hf_write_config,
    .hf_pieces = llama_hf_pieces,
    .hf_ignored = llama_hf_ignored,
    .hf_from_tensors = NULL,
    .gen_open = llama_gen_open,
    .gen_feed = llama_gen_feed,
    .gen_close = llama_gen_close,
};
