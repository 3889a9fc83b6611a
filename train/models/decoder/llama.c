/* llama.c - the decoder's Llama preset (model.arch llama: Llama 2/3's architecture, as Hugging
 * Face's LlamaForCausalLM): RMSNorm (computed in fp32) before attention and before the MLP, rotary
 * positions in the rotate-half convention (model.rope_theta), grouped-query attention
 * (model.n_kv_heads), a SwiGLU MLP (model.ffn_hidden: by default 2/3 * 4 * d_model up to a
 * multiple of 256), no biases, a final RMSNorm and an untied output layer (model.tie_embeddings:
 * false); its keys, names and files.
 *
 * Weights are stored as nn.Linear stores them, [out, in] (y = x @ W^T), so Hugging Face's tensors
 * are copied, not transposed; q, k and v are one tensor here (their rows one after the other),
 * so that one matmul fills the packed [q heads | k heads | v heads] rows attention reads.
 */
#include "decoder.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hf.h"
#include "family/lm.h"

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

/* The embedding, the layers, the final norm and the output layer (when untied), with
 * transformers' names; q, k and v fused into one qkv_proj. */
const dec_preset dec_llama = {
    .norm = DEC_RMSNORM,
    .rotary = 1,
    .mlp = &dec_mlp_swiglu,
    .bias = 0,
    .layout = IG_W_OUT_IN,
    .scaled_init = 0,
    .names = {.embed = "model.embed_tokens.weight",
              .pos = NULL,
              .layer = {[DEC_NORM1_W] = "model.layers.%d.input_layernorm.weight",
                        [DEC_QKV_W] = "model.layers.%d.self_attn.qkv_proj.weight",
                        [DEC_PROJ_W] = "model.layers.%d.self_attn.o_proj.weight",
                        [DEC_NORM2_W] = "model.layers.%d.post_attention_layernorm.weight",
                        [DEC_MLP0] = "model.layers.%d.mlp.gate_proj.weight",
                        [DEC_MLP0 + 1] = "model.layers.%d.mlp.up_proj.weight",
                        [DEC_MLP0 + 2] = "model.layers.%d.mlp.down_proj.weight"},
              .norm_w = "model.norm.weight",
              .norm_b = NULL,
              .head = "lm_head.weight"},
    .ops = llama_ops,
    .n_ops = sizeof llama_ops / sizeof llama_ops[0],
};

/* ---- keys and shape -------------------------------------------------------------------------- */

static const ig_cfg_key llama_keys[] = {
    IG_OWN_KEY("model.n_kv_heads", IG_CFG_INT, dec_shape, n_kv_heads, "0", 0, 4096,
               "llama: key/value heads of grouped-query attention (dividing n_head); 0: n_head"),
    IG_OWN_KEY("model.ffn_hidden", IG_CFG_INT, dec_shape, ffn_hidden, "0", 0, 1048576,
               "llama: the SwiGLU MLP's width; 0: 2/3 x 4 x d_model up to a multiple of 256"),
    IG_OWN_KEY("model.rope_theta", IG_CFG_FLOAT, dec_shape, rope_theta, "10000", 1, 1e12,
               "llama: the base of the rotary position embedding"),
    IG_OWN_KEY("model.tie_embeddings", IG_CFG_BOOL, dec_shape, tie_embeddings, "false", 0, 0,
               "llama: the output layer is the input embedding (Llama 3.2 1B/3B)"),
};

static ig_status llama_check(ig_model_config *c, ig_err *err) {
    ig_status st = dec_check_common(c, 1, err);
    if (st != IG_OK) return st;
    dec_shape o = dec_own(c);
    if (o.n_kv_heads == 0) o.n_kv_heads = c->n_head;
    if (o.n_kv_heads < 0 || c->n_head % o.n_kv_heads)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.n_kv_heads (%d) must divide model.n_head (%d): each key/value "
                          "head serves n_head / n_kv_heads query heads",
                          o.n_kv_heads, c->n_head);
    if (o.ffn_hidden == 0) {
        int64_t f = (int64_t)8 * c->d_model / 3; /* 2/3 * 4 * C, then up to a multiple of 256 */
        o.ffn_hidden = (int)((f + 255) / 256 * 256);
    }
    if (o.ffn_hidden < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.ffn_hidden must be > 0, got %d",
                          o.ffn_hidden);
    if (c->vocab_size > (1 << 30))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.vocab_size %d is above 2^30",
                          c->vocab_size);
    if (c->norm_eps == 0) c->norm_eps = 1e-5;
    if (o.rope_theta == 0) o.rope_theta = 10000;
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.norm_eps %g: need 0 < eps < 1",
                          c->norm_eps);
    if (!(o.rope_theta >= 1 && o.rope_theta <= 1e12))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.rope_theta %g: need 1 <= theta <= 1e12",
                          o.rope_theta);
    o.tie_embeddings = o.tie_embeddings != 0;
    c->padded_vocab = (c->vocab_size + 127) / 128 * 128;
    /* every tensor's elements must be addressable with 32-bit kernel arguments */
    int64_t hs = c->d_model / c->n_head, q = (int64_t)(c->n_head + 2 * o.n_kv_heads) * hs;
    if (q * c->d_model > INT32_MAX || (int64_t)o.ffn_hidden * c->d_model > INT32_MAX ||
        (uint64_t)c->padded_vocab * (uint64_t)c->d_model > (uint64_t)1 << 40)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.d_model %d is too large", c->d_model);
    ig_own_set_dec_shape(c, &o);
    return IG_OK;
}

static void llama_describe(const ig_model_config *c, char *buf, size_t cap) {
    dec_shape o = dec_own(c);
    size_t n = dec_describe_tokens(c, buf, cap);
    if (n < cap)
        snprintf(buf + n, cap - n, ", %d kv heads, ffn %d%s", o.n_kv_heads, o.ffn_hidden,
                 o.tie_embeddings ? ", tied embeddings" : "");
}

/* ---- checkpoint manifests ------------------------------------------------------------------- */

static ig_status llama_to_json(const ig_model_config *c, json_t *model, ig_err *err) {
    (void)err;
    dec_shape o = dec_own(c);
    json_object_set_new(model, "n_kv_heads", json_integer(o.n_kv_heads));
    json_object_set_new(model, "ffn_hidden", json_integer(o.ffn_hidden));
    json_object_set_new(model, "norm_eps", json_real(c->norm_eps));
    json_object_set_new(model, "rope_theta", json_real(o.rope_theta));
    json_object_set_new(model, "tie_embeddings", json_boolean(o.tie_embeddings));
    return IG_OK;
}

static ig_status llama_from_json(json_t *model, ig_model_config *c, const char *file, ig_err *err) {
    int64_t kv = 0, ffn = 0;
    dec_shape o = dec_own(c);
    ig_status st = ig_hf_get_int(model, file, "n_kv_heads", NULL, 1, 4096, 1, 0, &kv, err);
    if (st == IG_OK)
        st = ig_hf_get_int(model, file, "ffn_hidden", NULL, 1, INT32_MAX, 1, 0, &ffn, err);
    if (st == IG_OK) st = ig_hf_get_float(model, file, "norm_eps", 1, 0, &c->norm_eps, err);
    if (st == IG_OK) st = ig_hf_get_float(model, file, "rope_theta", 1, 0, &o.rope_theta, err);
    if (st == IG_OK) st = ig_hf_get_bool(model, file, "tie_embeddings", 0, &o.tie_embeddings, err);
    o.n_kv_heads = (int)kv;
    o.ffn_hidden = (int)ffn;
    ig_own_set_dec_shape(c, &o);
    return st;
}

/* ---- Hugging Face LlamaForCausalLM ----------------------------------------------------------- */

static ig_status llama_hf_config(json_t *o, const char *file, ig_model_config *out, int32_t *eod,
                                 ig_err *err) {
    int64_t v[6] = {0}, kv = 0, hd = 0, e = -1;
    dec_shape d = dec_own(out);
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
    if (st == IG_OK) st = ig_hf_get_positive(o, file, "rope_theta", 10000, &d.rope_theta, err);
    if (st == IG_OK) st = ig_hf_get_bool(o, file, "tie_word_embeddings", 0, &d.tie_embeddings, err);
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
    out->seq_len = (int)v[3], out->vocab_size = (int)v[4];
    d.ffn_hidden = (int)v[5];
    d.n_kv_heads = (int)kv;
    ig_own_set_dec_shape(out, &d);
    *eod = e >= 0 && e < v[4] ? (int32_t)e : -1;
    return IG_OK;
}

static json_t *llama_hf_write_config(const ig_model_config *c, int32_t eod) {
    const dec_shape o = dec_own(c);
    int32_t e = eod >= 0 ? eod : c->vocab_size - 1;
    return json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:i,s:b,s:s,s:b,s:b,s:f,s:s,"
                     "s:i,s:i}",
                     "architectures", "LlamaForCausalLM", "model_type", "llama", "vocab_size",
                     c->vocab_size, "hidden_size", c->d_model, "intermediate_size", o.ffn_hidden,
                     "num_hidden_layers", c->n_layer, "num_attention_heads", c->n_head,
                     "num_key_value_heads", o.n_kv_heads, "max_position_embeddings", c->seq_len,
                     "rms_norm_eps", c->norm_eps, "rope_theta", o.rope_theta, "head_dim", dec_hs(c),
                     "tie_word_embeddings", o.tie_embeddings, "hidden_act", "silu",
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
    const dec_shape o = dec_own(c);
    const char *qkv = strstr(t->name, "self_attn.qkv_proj.weight");
    if (qkv) {
        char name[128];
        int64_t hs = dec_hs(c), q = (int64_t)c->n_head * hs, kv = (int64_t)o.n_kv_heads * hs;
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

const ig_family ig_family_llama = {
    .arch = "llama",
    .what = "Llama: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases",
    .objective = &ig_objective_next_token,
    .preset = &dec_llama,
    .keys = llama_keys,
    .n_keys = sizeof llama_keys / sizeof llama_keys[0],
    .ops = llama_ops,
    .n_ops = sizeof llama_ops / sizeof llama_ops[0],
    .check = llama_check,
    .differs = dec_differs,
    .check_layout = dec_check_layout,
    .num_params = dec_num_params,
    .describe = llama_describe,
    .flops_per_token = dec_flops_per_token,
    .comm_micro = dec_comm_micro,
    .tensors = dec_tensors,
    .plan = dec_plan,
    .create = dec_create,
    .destroy = dec_destroy,
    .stage = &dec_stage,
    .stage_io = dec_stage_io,
    .to_json = llama_to_json,
    .from_json = llama_from_json,
    .hf_model_type = "llama",
    .hf_config = llama_hf_config,
    .hf_write_config = llama_hf_write_config,
    .hf_pieces = llama_hf_pieces,
    .hf_ignored = llama_hf_ignored,
    .hf_from_tensors = NULL,
    .gen_open = dec_gen_open,
    .gen_feed = dec_gen_feed,
    .gen_close = dec_gen_close,
};
