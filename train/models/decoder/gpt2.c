/* gpt2.c - the decoder's GPT-2 preset (model.arch gpt2): learned positions, pre-LayerNorm blocks,
 * tanh-GeLU MLP of 4 d_model, biases, tied input and output embeddings, Conv1D weights [in, out]
 * under Hugging Face GPT-2's names, and its files (GPT2LMHeadModel's config.json and
 * model.safetensors).
 */
#include "decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hf.h"
#include "family/lm.h"

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

/* Hugging Face GPT-2's state_dict names and order: wte and wpe, the layers, ln_f. */
const dec_preset dec_gpt2 = {
    .norm = DEC_LAYERNORM,
    .rotary = 0,
    .mlp = &dec_mlp_gelu,
    .bias = 1,
    .layout = IG_W_IN_OUT,
    .scaled_init = 1,
    .names = {.embed = "transformer.wte.weight",
              .pos = "transformer.wpe.weight",
              .layer = {[DEC_NORM1_W] = "transformer.h.%d.ln_1.weight",
                        [DEC_NORM1_B] = "transformer.h.%d.ln_1.bias",
                        [DEC_QKV_W] = "transformer.h.%d.attn.c_attn.weight",
                        [DEC_QKV_B] = "transformer.h.%d.attn.c_attn.bias",
                        [DEC_PROJ_W] = "transformer.h.%d.attn.c_proj.weight",
                        [DEC_PROJ_B] = "transformer.h.%d.attn.c_proj.bias",
                        [DEC_NORM2_W] = "transformer.h.%d.ln_2.weight",
                        [DEC_NORM2_B] = "transformer.h.%d.ln_2.bias",
                        [DEC_MLP0] = "transformer.h.%d.mlp.c_fc.weight",
                        [DEC_MLP0 + 1] = "transformer.h.%d.mlp.c_fc.bias",
                        [DEC_MLP0 + 2] = "transformer.h.%d.mlp.c_proj.weight",
                        [DEC_MLP0 + 3] = "transformer.h.%d.mlp.c_proj.bias"},
              .norm_w = "transformer.ln_f.weight",
              .norm_b = "transformer.ln_f.bias",
              .head = NULL},
    .ops = gpt2_ops,
    .n_ops = sizeof gpt2_ops / sizeof gpt2_ops[0],
};

/* ---- the shape ------------------------------------------------------------------------------- */

static ig_status gpt2_check(ig_model_config *c, ig_err *err) {
    ig_status st = dec_check_common(c, 0, err);
    if (st != IG_OK) return st;
    if (c->vocab_size > (1 << 30))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.vocab_size %d is above 2^30",
                          c->vocab_size);
    if (c->norm_eps == 0) c->norm_eps = 1e-5;
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.norm_eps %g: need 0 < eps < 1",
                          c->norm_eps);
    c->padded_vocab = (c->vocab_size + 127) / 128 * 128;
    /* GPT-2's fixed parts, so that two shapes compare equal field by field */
    dec_shape o = dec_own(c);
    o.n_kv_heads = c->n_head, o.ffn_hidden = 4 * c->d_model, o.rope_theta = 0, o.tie_embeddings = 1;
    ig_own_set_dec_shape(c, &o);
    /* every tensor's elements must be addressable with 32-bit kernel arguments */
    uint64_t big = (uint64_t)c->padded_vocab * (uint64_t)c->d_model;
    if ((uint64_t)4 * c->d_model * (uint64_t)c->d_model > INT32_MAX || big > (uint64_t)1 << 40)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.d_model %d is too large", c->d_model);
    return IG_OK;
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

const ig_family ig_family_gpt2 = {
    .arch = "gpt2",
    .what = "GPT-2: learned positions, LayerNorm, tanh-GeLU MLP, tied embeddings",
    .objective = &ig_objective_next_token,
    .preset = &dec_gpt2,
    .keys = NULL,
    .n_keys = 0,
    .ops = gpt2_ops,
    .n_ops = sizeof gpt2_ops / sizeof gpt2_ops[0],
    .check = gpt2_check,
    .differs = dec_differs,
    .check_layout = dec_check_layout,
    .num_params = dec_num_params,
    .describe = dec_describe,
    .flops_per_token = dec_flops_per_token,
    .comm_micro = dec_comm_micro,
    .tensors = dec_tensors,
    .plan = dec_plan,
    .create = dec_create,
    .destroy = dec_destroy,
    .stage = &dec_stage,
    .stage_io = dec_stage_io,
    .to_json = gpt2_to_json,
    .from_json = gpt2_from_json,
    .hf_model_type = "gpt2",
    .hf_config = gpt2_hf_config,
    .hf_write_config = gpt2_hf_write_config,
    .hf_pieces = gpt2_hf_pieces,
    .hf_ignored = gpt2_hf_ignored,
    .hf_from_tensors = gpt2_hf_from_tensors,
    .gen_open = dec_gen_open,
    .gen_feed = dec_gen_feed,
    .gen_close = dec_gen_close,
};
