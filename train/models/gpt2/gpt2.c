/* gpt2.c - the GPT-2 family: its shape and checks, the table of named global tensors (Hugging
 * Face's names and layouts, Conv1D weights [in, out]) with their tags, the activations of a
 * micro-batch, and its Hugging Face files (GPT2LMHeadModel). The passes are in gpt2_pass.c.
 *
 * The architecture is GPT-2's: learned positions, pre-LayerNorm blocks, tanh-GeLU, tied input and
 * output embeddings, the vocabulary padded to a multiple of 128 (the padded logits are ignored by
 * the loss), no dropout. Tensor parallelism (Megatron's): c_attn and c_fc by output columns
 * (c_attn in its q, k, v blocks, so each rank holds whole heads), the two c_proj by input rows
 * (their biases whole, added once), wte by vocabulary rows; LayerNorms and wpe whole.
 */
#include "gpt2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../hf.h"

/* ---- the shape ---------------------------------------------------------------------------------
 */

static ig_status gpt2_check(ig_model_config *c, ig_err *err) {
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
    if (c->d_model % c->n_head)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.n_head (%d) must divide model.d_model (%d): each head gets "
                          "d_model / n_head channels",
                          c->n_head, c->d_model);
    if (c->vocab_size > (1 << 30))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.vocab_size %d is above 2^30",
                          c->vocab_size);
    if (c->norm_eps == 0) c->norm_eps = 1e-5;
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.norm_eps %g: need 0 < eps < 1",
                          c->norm_eps);
    c->padded_vocab = (c->vocab_size + 127) / 128 * 128;
    /* GPT-2's fixed parts, so that two shapes compare equal field by field */
    c->n_kv_heads = c->n_head;
    c->ffn_hidden = 4 * c->d_model;
    c->rope_theta = 0;
    c->tie_embeddings = 1;
    /* every tensor's elements must be addressable with 32-bit kernel arguments */
    uint64_t big = (uint64_t)c->padded_vocab * (uint64_t)c->d_model;
    if ((uint64_t)4 * c->d_model * (uint64_t)c->d_model > INT32_MAX || big > (uint64_t)1 << 40)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.d_model %d is too large", c->d_model);
    return IG_OK;
}

static ig_status gpt2_check_layout(const ig_model_config *c, int tp, ig_err *err) {
    if (c->n_head % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide model.n_head %d (each rank gets whole "
                          "heads)",
                          tp, c->n_head);
    if (c->padded_vocab % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide the padded vocabulary of %d rows (a "
                          "multiple of 128): use a tp that divides 128",
                          tp, c->padded_vocab);
    return IG_OK;
}

static uint64_t gpt2_num_params(const ig_model_config *c) {
    uint64_t C = (uint64_t)c->d_model, L = (uint64_t)c->n_layer;
    uint64_t per_layer =
        2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C);
    return (uint64_t)c->padded_vocab * C + (uint64_t)c->seq_len * C + L * per_layer + 2 * C;
}

static double gpt2_flops_per_token(const ig_model_config *c, int T) {
    /* matmul parameters (no embeddings' gather, but the tied lm head) and attention: per token a
     * forward pass costs 2 flops per matmul weight and 2 * 2 * T * C for the scores and the
     * weighted sum of each layer, of which causality keeps about half */
    double C = c->d_model, L = c->n_layer;
    double matmul = L * 12.0 * C * C + (double)c->padded_vocab * C;
    return 2.0 * matmul + L * 2.0 * (double)T * C;
}

/* ---- the tensor table --------------------------------------------------------------------------
 */

/* Hugging Face GPT-2's state_dict order and names: wte and wpe, the layers, ln_f. Conv1D weights
 * are [in, out]: c_attn and c_fc are cut by output columns (dimension 1; c_attn in its q, k, v
 * blocks), the two c_proj by input rows (dimension 0); their biases follow the columns or are
 * whole (added once). The LayerNorms are whole, their gradients partial under sp. */
static size_t gpt2_tensors(const ig_model_config *c, const ig_part *p, ig_tensor_spec *out,
                           size_t cap) {
    ig_spec_list tb = {out, 0, cap};
    int64_t C = c->d_model;
    float s = 0.02f, sr = (float)(0.02 / sqrt(2.0 * c->n_layer)); /* residual projections */
    const ig_place L = IG_PLACE_LAYER;
    if (p->first || p->last)
        ig_spec_add(&tb, "transformer.wte.weight", 0,
                    &(ig_tensor_spec){.ndim = 2,
                                      .shape = {c->padded_vocab, C},
                                      .place = IG_PLACE_TIED,
                                      .split_dim = 0,
                                      .decay = 1,
                                      .init = IG_INIT_NORMAL_ROWS,
                                      .std = s,
                                      .init_rows = c->vocab_size});
    if (p->first)
        ig_spec_add(&tb, "transformer.wpe.weight", 0,
                    &(ig_tensor_spec){.ndim = 2,
                                      .shape = {c->seq_len, C},
                                      .place = IG_PLACE_FIRST,
                                      .split_dim = -1,
                                      .decay = 1,
                                      .init = IG_INIT_NORMAL,
                                      .std = s});
    const ig_tensor_spec ln_w = {
        .ndim = 1, .shape = {C}, .place = L, .split_dim = -1, .init = IG_INIT_ONE, .sp_partial = 1};
    const ig_tensor_spec ln_b = {.ndim = 1,
                                 .shape = {C},
                                 .place = L,
                                 .split_dim = -1,
                                 .init = IG_INIT_ZERO,
                                 .sp_partial = 1};
    const ig_tensor_spec qkv_w = {.ndim = 2,
                                  .shape = {C, 3 * C},
                                  .place = L,
                                  .split_dim = 1,
                                  .n_blocks = 3,
                                  .block = {C, C, C},
                                  .decay = 1,
                                  .init = IG_INIT_NORMAL,
                                  .std = s};
    const ig_tensor_spec qkv_b = {.ndim = 1,
                                  .shape = {3 * C},
                                  .place = L,
                                  .split_dim = 0,
                                  .n_blocks = 3,
                                  .block = {C, C, C},
                                  .init = IG_INIT_ZERO};
    const ig_tensor_spec proj_w = {.ndim = 2,
                                   .shape = {C, C},
                                   .place = L,
                                   .split_dim = 0,
                                   .decay = 1,
                                   .init = IG_INIT_NORMAL,
                                   .std = sr};
    const ig_tensor_spec out_b = {
        .ndim = 1, .shape = {C}, .place = L, .split_dim = -1, .init = IG_INIT_ZERO};
    const ig_tensor_spec fc_w = {.ndim = 2,
                                 .shape = {C, 4 * C},
                                 .place = L,
                                 .split_dim = 1,
                                 .decay = 1,
                                 .init = IG_INIT_NORMAL,
                                 .std = s};
    const ig_tensor_spec fc_b = {
        .ndim = 1, .shape = {4 * C}, .place = L, .split_dim = 0, .init = IG_INIT_ZERO};
    const ig_tensor_spec fcp_w = {.ndim = 2,
                                  .shape = {4 * C, C},
                                  .place = L,
                                  .split_dim = 0,
                                  .decay = 1,
                                  .init = IG_INIT_NORMAL,
                                  .std = sr};
    for (int l = p->l0; l < p->l1; l++) {
        ig_spec_add(&tb, "transformer.h.%d.ln_1.weight", l, &ln_w);
        ig_spec_add(&tb, "transformer.h.%d.ln_1.bias", l, &ln_b);
        ig_spec_add(&tb, "transformer.h.%d.attn.c_attn.weight", l, &qkv_w);
        ig_spec_add(&tb, "transformer.h.%d.attn.c_attn.bias", l, &qkv_b);
        ig_spec_add(&tb, "transformer.h.%d.attn.c_proj.weight", l, &proj_w);
        ig_spec_add(&tb, "transformer.h.%d.attn.c_proj.bias", l, &out_b);
        ig_spec_add(&tb, "transformer.h.%d.ln_2.weight", l, &ln_w);
        ig_spec_add(&tb, "transformer.h.%d.ln_2.bias", l, &ln_b);
        ig_spec_add(&tb, "transformer.h.%d.mlp.c_fc.weight", l, &fc_w);
        ig_spec_add(&tb, "transformer.h.%d.mlp.c_fc.bias", l, &fc_b);
        ig_spec_add(&tb, "transformer.h.%d.mlp.c_proj.weight", l, &fcp_w);
        ig_spec_add(&tb, "transformer.h.%d.mlp.c_proj.bias", l, &out_b);
    }
    if (p->last) {
        ig_tensor_spec w = ln_w, b = ln_b;
        w.place = b.place = IG_PLACE_LAST;
        ig_spec_add(&tb, "transformer.ln_f.weight", 0, &w);
        ig_spec_add(&tb, "transformer.ln_f.bias", 0, &b);
    }
    return tb.n;
}

/* ---- activations -------------------------------------------------------------------------------
 */

/* Lays out the activations of a B x T micro-batch: per slot, offsets in elements of the act type
 * and of fp32; then the scratch the slots share, starting with the region of one layer's worth
 * that the layers' recomputed activations reuse (train.recompute; family.h's places). x->layer
 * may be NULL (sizes only).
 *
 * What a slot keeps per layer: with none every activation below; with selective all but the
 * attention core's output atty and its lse (recomputed from qkv before attention's backward);
 * with full only res3, the next layer's input (the stage's first layer's input is encoded), and
 * the last layer's on the last stage (ln_f's input): the backward runs the layer's forward again
 * from its input into the region. */
static void layout(const ig_model_config *c, const ig_part *p, int B, int T, gpt2_state *x,
                   ig_act_sizes *out) {
    uint64_t N = (uint64_t)B * (uint64_t)T, Nl = p->sp ? N / (uint64_t)p->tp : N;
    uint64_t C = (uint64_t)c->d_model, Cl = C / (uint64_t)p->tp, sp = (uint64_t)(p->sp != 0);
    uint64_t Vl = (uint64_t)c->padded_vocab / (uint64_t)p->tp;
    ig_act_plan pl = {.recompute = p->recompute};
    const ig_act_kind K = IG_ACT_LAYER, CORE = IG_ACT_CORE;
    x->encoded = ig_act_take(&pl.act, Nl * C);
    for (int l = p->l0; l < p->l1; l++) {
        gpt2_layer_acts tmp, *y = x->layer ? &x->layer[l - p->l0] : &tmp;
        ig_act_next_layer(&pl);
        y->ln1 = ig_act_place(&pl, K, Nl * C);
        y->ln1_mean = ig_act_place_f32(&pl, K, Nl);
        y->ln1_rstd = ig_act_place_f32(&pl, K, Nl);
        y->ln1_full = ig_act_place(&pl, K, sp * N * C);
        y->qkv = ig_act_place(&pl, K, N * 3 * Cl);
        y->atty = ig_act_place(&pl, CORE, N * Cl);
        y->lse = ig_act_place_f32(&pl, CORE, N * (uint64_t)(c->n_head / p->tp));
        y->attproj = ig_act_place(&pl, K, Nl * C);
        y->res2 = ig_act_place(&pl, K, Nl * C);
        y->ln2 = ig_act_place(&pl, K, Nl * C);
        y->ln2_mean = ig_act_place_f32(&pl, K, Nl);
        y->ln2_rstd = ig_act_place_f32(&pl, K, Nl);
        y->ln2_full = ig_act_place(&pl, K, sp * N * C);
        y->fch = ig_act_place(&pl, K, N * 4 * Cl);
        y->fch_gelu = ig_act_place(&pl, K, N * 4 * Cl);
        y->fcproj = ig_act_place(&pl, K, Nl * C);
        /* a middle stage's last layer has no res3 (its output is `output`) */
        y->res3 = ig_act_place(&pl, l + 1 < p->l1 || p->last ? IG_ACT_BOUNDARY : K, Nl * C);
    }
    if (!p->last) x->output = ig_act_take(&pl.act, Nl * C);
    if (p->last) {
        x->lnf = ig_act_take(&pl.act, Nl * C);
        x->lnf_mean = ig_act_take(&pl.f32, Nl);
        x->lnf_rstd = ig_act_take(&pl.f32, Nl);
        x->lnf_full = ig_act_take(&pl.act, sp * N * C);
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
    x->partial = ig_act_take(&a, sp * N * C);   /* a row-parallel layer's output, unreduced (sp) */
    x->datty = ig_act_take(&a, N * Cl);
    x->dqkv = ig_act_take(&a, N * 3 * Cl);
    x->dfcg = ig_act_take(&a, N * 4 * Cl);
    x->dfch = ig_act_take(&a, N * 4 * Cl);
    x->rowmax = ig_act_take(&f, tpx * N);
    x->stats = ig_act_take(&f, tpx * 2 * N);
    out->scratch_act = a;
    out->scratch_f32 = f;
}

static void gpt2_plan(const ig_model_config *c, const ig_part *p, int B, int T, ig_act_sizes *out) {
    gpt2_state x = {0};
    layout(c, p, B, T, &x, out);
}

static ig_status gpt2_create(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    gpt2_state *x = ig_calloc(m->ctx, 1, sizeof *x);
    if (x) x->layer = ig_calloc(m->ctx, (size_t)(p->l1 - p->l0), sizeof *x->layer);
    if (!x || !x->layer) {
        if (x) ig_free(m->ctx, x);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    ig_act_sizes sizes;
    layout(&m->cfg, p, m->B, m->T, x, &sizes);
    x->N = m->B * m->T;
    x->Nl = p->sp ? x->N / p->tp : x->N;
    x->Cl = m->cfg.d_model / p->tp;
    x->Vl = m->cfg.padded_vocab / p->tp;
    x->t_wte = x->t_wpe = x->t_layer0 = x->t_lnf = -1;
    for (size_t i = 0; i < m->n_tensors; i++) {
        const char *n = m->tensors[i].name;
        if (!strcmp(n, "transformer.wte.weight")) x->t_wte = (int)i;
        if (!strcmp(n, "transformer.wpe.weight")) x->t_wpe = (int)i;
        if (!strcmp(n, "transformer.ln_f.weight")) x->t_lnf = (int)i;
        if (x->t_layer0 < 0 && m->tensors[i].place == IG_PLACE_LAYER) x->t_layer0 = (int)i;
    }
    m->fs = x;
    return IG_OK;
}

static void gpt2_destroy(ig_model *m) {
    gpt2_state *x = gpt2_of(m);
    ig_free(m->ctx, x->layer);
    ig_free(m->ctx, x);
    m->fs = NULL;
}

/* ---- checkpoint manifests ------------------------------------------------------------------- */

static ig_status gpt2_to_json(const ig_model_config *c, json_t *model, ig_err *err) {
    (void)err;
    json_object_set_new(model, "norm_eps", json_real(c->norm_eps));
    return IG_OK;
}

static ig_status gpt2_from_json(json_t *model, ig_model_config *c, const char *file, ig_err *err) {
    return ig_hf_get_float(model, file, "norm_eps", 0, 1e-5, &c->norm_eps, err); /* v1: none */
}

/* ---- Hugging Face GPT2LMHeadModel ------------------------------------------------------------ */

static ig_status gpt2_hf_config(json_t *o, const char *file, ig_model_config *out, int32_t *eod,
                                ig_err *err) {
    int64_t v[5] = {0}, e = -1, inner = 0;
    static const char *const keys[][2] = {{"n_layer", "num_hidden_layers"},
                                          {"n_head", "num_attention_heads"},
                                          {"n_embd", "hidden_size"},
                                          {"n_positions", "n_ctx"},
                                          {"vocab_size", NULL}};
    ig_status st = IG_OK;
    for (int i = 0; i < 5 && st == IG_OK; i++)
        st = ig_hf_get_int(o, file, keys[i][0], keys[i][1], 1, 1 << 30, 1, 0, &v[i], err);
    if (st == IG_OK)
        st = ig_hf_get_int(o, file, "eos_token_id", NULL, -1, INT32_MAX, 0, -1, &e, err);
    if (st == IG_OK)
        st = ig_hf_get_positive(o, file, "layer_norm_epsilon", 1e-5, &out->norm_eps, err);
    if (st == IG_OK) st = ig_hf_get_int(o, file, "n_inner", NULL, 1, 1 << 30, 0, 0, &inner, err);
    int tie = 1, by_layer = 0, cross = 0, scale = 1;
    if (st == IG_OK) st = ig_hf_get_bool(o, file, "tie_word_embeddings", 1, &tie, err);
    if (st == IG_OK)
        st = ig_hf_get_bool(o, file, "scale_attn_by_inverse_layer_idx", 0, &by_layer, err);
    if (st == IG_OK) st = ig_hf_get_bool(o, file, "add_cross_attention", 0, &cross, err);
    if (st == IG_OK) st = ig_hf_get_bool(o, file, "scale_attn_weights", 1, &scale, err);
    if (st != IG_OK) return st;
    const char *a = json_string_value(json_object_get(o, "activation_function"));
    if (json_object_get(o, "activation_function") && !a)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"activation_function\" must be a string", file);
    if (a && strcmp(a, "gelu_new") != 0 && strcmp(a, "gelu_pytorch_tanh") != 0)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: activation_function '%s': ingot's GPT-2 uses the tanh GeLU "
                          "(gelu_new)",
                          file, a);
    const char *no = !tie       ? "tie_word_embeddings false (an untied output layer)"
                     : by_layer ? "scale_attn_by_inverse_layer_idx true"
                     : cross    ? "add_cross_attention true"
                     : !scale   ? "scale_attn_weights false"
                     : inner && inner != 4 * v[2] ? "n_inner other than 4 x n_embd"
                                                  : NULL;
    if (no)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: %s: ingot's GPT-2 cannot compute that model", file, no);
    out->n_layer = (int)v[0], out->n_head = (int)v[1], out->d_model = (int)v[2];
    out->seq_len = (int)v[3], out->vocab_size = (int)v[4];
    *eod = e >= 0 && e < v[4] ? (int32_t)e : -1;
    return IG_OK;
}

static json_t *gpt2_hf_write_config(const ig_model_config *c, int32_t eod) {
    return json_pack(
        "{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:f,s:f,s:f,s:f,s:f,s:b,s:s,s:i,s:i}",
        "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", c->vocab_size,
        "n_positions", c->seq_len, "n_ctx", c->seq_len, "n_embd", c->d_model, "n_layer", c->n_layer,
        "n_head", c->n_head, "activation_function", "gelu_new", "layer_norm_epsilon", c->norm_eps,
        "initializer_range", 0.02, "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0,
        "tie_word_embeddings", 1, "torch_dtype", "float32", "bos_token_id",
        eod >= 0 ? eod : c->vocab_size - 1, "eos_token_id", eod >= 0 ? eod : c->vocab_size - 1);
}

/* A tensor is stored under its own name ("transformer.X", or plain "X" in files converted from
 * the original checkpoints, as the hub's gpt2); wte has vocab_size rows there. */
static size_t gpt2_hf_pieces(const ig_model_config *c, const ig_tensor_spec *t, ig_hf_piece *out,
                             size_t cap) {
    if (cap < 1) return 0;
    snprintf(out->name, sizeof out->name, "%s", t->name);
    snprintf(out->alt, sizeof out->alt, "%s",
             strncmp(t->name, "transformer.", 12) == 0 ? t->name + 12 : "");
    out->row0 = 0;
    out->rows = strcmp(t->name, "transformer.wte.weight") == 0 ? c->vocab_size : t->shape[0];
    return 1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* the causal-mask buffers older transformers saved */
static int gpt2_hf_ignored(const char *name) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

/* A model.safetensors without config.json: the shape from wte and wpe, the heads from ingot's
 * metadata; IG_ERR_NOT_FOUND when the file has no GPT-2 embeddings (another family's). */
static ig_status gpt2_hf_from_tensors(const ig_st_file *f, const char *file, ig_model_config *out,
                                      ig_err *err) {
    const ig_st_tensor *wte = ig_st_file_find(f, "transformer.wte.weight");
    const ig_st_tensor *wpe = ig_st_file_find(f, "transformer.wpe.weight");
    if (!wte) wte = ig_st_file_find(f, "wte.weight");
    if (!wpe) wpe = ig_st_file_find(f, "wpe.weight");
    if (!wte || !wpe || ig_st_tensor_ndim(wte) != 2 || ig_st_tensor_ndim(wpe) != 2)
        return ig_err_set(err, IG_ERR_NOT_FOUND, "%s: no GPT-2 embeddings (wte.weight, wpe.weight)",
                          file);
    const char *heads = ig_st_file_metadata(f, "n_head");
    if (!heads)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s: the number of heads is unknown: put the model's config.json beside "
                          "it",
                          file);
    char *end = NULL;
    long h = strtol(heads, &end, 10);
    if (!*heads || !end || *end || h < 1 || h > 4096)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: metadata n_head \"%s\" is not a number of heads",
                          file, heads);
    out->vocab_size = (int)ig_st_tensor_shape(wte)[0];
    out->d_model = (int)ig_st_tensor_shape(wte)[1];
    out->seq_len = (int)ig_st_tensor_shape(wpe)[0];
    out->n_head = (int)h;
    int l = 0;
    char name[128];
    for (;; l++) {
        snprintf(name, sizeof name, "transformer.h.%d.ln_1.weight", l);
        const ig_st_tensor *x = ig_st_file_find(f, name);
        if (!x) x = ig_st_file_find(f, name + 12);
        if (!x) break;
    }
    out->n_layer = l;
    return IG_OK;
}

/* ---- the family ------------------------------------------------------------------------------ */

static const ig_op gpt2_ops[] = {
    IG_OP_ENCODER_FORWARD,
    IG_OP_ENCODER_BACKWARD,
    IG_OP_LAYERNORM_FORWARD,
    IG_OP_RESIDUAL_LAYERNORM_FORWARD,
    IG_OP_LAYERNORM_BACKWARD,
    IG_OP_MATMUL_FORWARD,
    IG_OP_MATMUL_BACKWARD,
    IG_OP_GELU_BIAS_FORWARD,
    IG_OP_GELU_BIAS_BACKWARD,
    IG_OP_ATTENTION_FORWARD,
    IG_OP_ATTENTION_BACKWARD,
    IG_OP_ATTENTION_CACHED,
    IG_OP_CROSSENTROPY,
    IG_OP_CE_MAX,
    IG_OP_CE_SUMS,
    IG_OP_CE_FINISH,
    IG_OP_ADD,
};

const ig_family ig_family_gpt2 = {
    .arch = "gpt2",
    .id = IG_ARCH_GPT2,
    .input = IG_INPUT_TOKENS,
    .what = "GPT-2: learned positions, LayerNorm, tanh-GeLU MLP, tied embeddings",
    .keys = NULL,
    .n_keys = 0,
    .ops = gpt2_ops,
    .n_ops = sizeof gpt2_ops / sizeof gpt2_ops[0],
    .check = gpt2_check,
    .check_layout = gpt2_check_layout,
    .num_params = gpt2_num_params,
    .flops_per_token = gpt2_flops_per_token,
    .tensors = gpt2_tensors,
    .plan = gpt2_plan,
    .create = gpt2_create,
    .destroy = gpt2_destroy,
    .stage_batch = ig_lm_stage_batch,
    .forward = gpt2_forward,
    .backward = gpt2_backward,
    .loss = ig_lm_loss,
    .stage_io = gpt2_stage_io,
    .to_json = gpt2_to_json,
    .from_json = gpt2_from_json,
    .hf_model_type = "gpt2",
    .hf_config = gpt2_hf_config,
    .hf_write_config = gpt2_hf_write_config,
    .hf_pieces = gpt2_hf_pieces,
    .hf_ignored = gpt2_hf_ignored,
    .hf_from_tensors = gpt2_hf_from_tensors,
    .gen_open = gpt2_gen_open,
    .gen_feed = gpt2_gen_feed,
    .gen_close = gpt2_gen_close,
};
