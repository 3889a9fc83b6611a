/* t5.c - the T5 encoder family (model.arch t5): its keys and shape, its tensors with Hugging
 * Face's names, the activations of an encoding, its config.json, and the descriptor. Used frozen:
 * its objective is encode (objectives/encode_model.h), which nothing trains; ingot uses it through
 * train.h's ig_text_encoder (ingot encode-text) from a Hugging Face directory.
 *
 * The model is transformers' T5EncoderModel: shared (the token embedding, [V, C]); per block
 * x += o(Attention(layer_norm(x))), x += DenseReluDense(layer_norm(x)); encoder.final_layer_norm.
 * T5's layer norm is RMSNorm (no mean, no bias, the variance in fp32), its attention has no
 * 1/sqrt(d) scaling and adds a bidirectional bucketed relative position bias (key position -
 * query position), a table [buckets, n_head] kept in block 0 only and shared by every block, plus
 * a mask of the padded keys. DenseReluDense is wo(gelu_new(wi_0 x) * wi_1 x) with feed_forward_proj
 * gated-gelu (v1.1) or wo(relu(wi x)) with relu (v1.0). n_head x d_kv need not be d_model (T5
 * 11B's 128 heads of 128 over d_model 1024).
 *
 * Files: a T5EncoderModel directory, or a T5ForConditionalGeneration one read for its encoder
 * (every decoder.* tensor and lm_head ignored); shared.weight, or encoder.embed_tokens.weight (the
 * same tensor, tied) where shared.weight is absent; one model.safetensors or the shards of a
 * model.safetensors.index.json (formats/hf.h), in F32, BF16 or F16. q, k and v are one tensor here
 * (their rows one after the other, so one matrix product fills the packed rows attention reads),
 * three in the file.
 *
 * One process: no tensor or pipeline parallelism (an encoder of 4.8 billion parameters fits one
 * GPU in bf16).
 */
#include "t5.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hf.h"

static const ig_op t5_ops[] = {
    IG_OP_ENCODER_FORWARD, IG_OP_RMSNORM_FORWARD,  IG_OP_RESIDUAL_RMSNORM_FORWARD,
    IG_OP_MATMUL_FORWARD,  IG_OP_T5_POSITION_BIAS, IG_OP_ATTENTION_BIAS_FORWARD,
    IG_OP_GEGLU_FORWARD,   IG_OP_RELU_FORWARD,
};

/* ---- keys and shape -------------------------------------------------------------------------- */

static const char *const ffns[] = {"gated-gelu", "relu", NULL};

static const ig_cfg_key t5_keys[] = {
    IG_OWN_KEY("model.d_kv", IG_CFG_INT, t5_shape, d_kv, "64", 1, 65536,
               "t5: a head's width (n_head x d_kv may differ from d_model)"),
    IG_OWN_KEY("model.d_ff", IG_CFG_INT, t5_shape, d_ff, "2048", 1, 1 << 20,
               "t5: the feed-forward's width"),
    IG_OWN_KEY("model.relative_attention_num_buckets", IG_CFG_INT, t5_shape, buckets, "32", 4, 4096,
               "t5: the relative position buckets (half for each direction)"),
    IG_OWN_KEY("model.relative_attention_max_distance", IG_CFG_INT, t5_shape, max_distance, "128",
               2, 1 << 20, "t5: the distance past which positions share the last bucket"),
    {.path = "model.feed_forward_proj",
     .type = IG_CFG_ENUM,
     .default_val = "gated-gelu",
     .help = "t5: the feed-forward: gated-gelu (T5 v1.1: wo(gelu_new(wi_0 x) * wi_1 x)) or relu "
             "(T5 v1.0: wo(relu(wi x)))",
     .flag = "",
     .offset = offsetof(t5_shape, ffn),
     .size = sizeof(((t5_shape *)0)->ffn),
     .is_signed = 1,
     .choices = ffns},
};

static int64_t inner(const ig_model_config *c) {
    return (int64_t)c->n_head * t5_own(c).d_kv;
}

static ig_status t5_check(ig_model_config *c, ig_err *err) {
    t5_shape o = t5_own(c);
    struct {
        const char *name;
        int v;
    } pos[] = {{"n_layer", c->n_layer},       {"n_head", c->n_head}, {"d_model", c->d_model},
               {"vocab_size", c->vocab_size}, {"d_kv", o.d_kv},      {"d_ff", o.d_ff}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG, "model.%s must be > 0, got %d", pos[i].name,
                              pos[i].v);
    if (o.buckets < 4 || o.buckets % 2)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.relative_attention_num_buckets %d: need an even number >= 4 (half "
                          "of them for each direction)",
                          o.buckets);
    if (o.max_distance <= o.buckets / 4)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.relative_attention_max_distance %d: need more than %d, the "
                          "distances of the exact buckets (a quarter of %d)",
                          o.max_distance, o.buckets / 4, o.buckets);
    if (o.ffn != T5_GATED_GELU && o.ffn != T5_RELU)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.feed_forward_proj: gated-gelu or relu");
    if (c->norm_eps == 0) c->norm_eps = 1e-6;
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.norm_eps %g: need 0 < eps < 1",
                          c->norm_eps);
    if (c->seq_len <= 0) c->seq_len = 512; /* n_positions: unused (positions are relative) */
    /* every tensor's elements addressable with the kernels' 32-bit sizes */
    int64_t C = c->d_model, I = inner(c), F = o.d_ff;
    if (3 * I * C > INT32_MAX || F * C > INT32_MAX || (int64_t)o.buckets * c->n_head > INT32_MAX ||
        (uint64_t)c->vocab_size * (uint64_t)C > (uint64_t)1 << 40)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a T5 of d_model %d, %d heads of %d, d_ff %d is too large", c->d_model,
                          c->n_head, o.d_kv, o.d_ff);
    c->padded_vocab = c->vocab_size;
    return IG_OK;
}

static const char *t5_differs(const ig_model_config *a, const ig_model_config *b) {
    const t5_shape x = t5_own(a), y = t5_own(b);
    return x.d_kv != y.d_kv                   ? "model.d_kv"
           : x.d_ff != y.d_ff                 ? "model.d_ff"
           : x.buckets != y.buckets           ? "model.relative_attention_num_buckets"
           : x.max_distance != y.max_distance ? "model.relative_attention_max_distance"
           : x.ffn != y.ffn                   ? "model.feed_forward_proj"
                                              : "";
}

static ig_status t5_check_layout(const ig_model_config *c, int tp, ig_err *err) {
    (void)c;
    if (tp != 1)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d: a T5 encoder runs on one process (no tensor "
                          "parallelism)",
                          tp);
    return IG_OK;
}

static uint64_t t5_num_params(const ig_model_config *c) {
    const t5_shape o = t5_own(c);
    uint64_t C = (uint64_t)c->d_model, I = (uint64_t)inner(c), F = (uint64_t)o.d_ff;
    uint64_t layer = 2 * C + 4 * I * C + (o.ffn == T5_GATED_GELU ? 3 : 2) * F * C;
    return (uint64_t)c->vocab_size * C + (uint64_t)o.buckets * (uint64_t)c->n_head + C +
           (uint64_t)c->n_layer * layer;
}

static void t5_describe(const ig_model_config *c, char *buf, size_t cap) {
    const t5_shape o = t5_own(c);
    snprintf(buf, cap, ", d_kv %d, d_ff %d, %s, %d relative buckets up to %d, vocabulary %d",
             o.d_kv, o.d_ff, ffns[o.ffn], o.buckets, o.max_distance, c->vocab_size);
}

/* 2 flops per weight of the matrix products, and 4 T I per layer for attention's scores and
 * weighted sum over T keys (the embedding is a lookup) */
static double t5_flops_per_token(const ig_model_config *c, int T) {
    const t5_shape o = t5_own(c);
    double C = c->d_model, I = (double)inner(c), F = o.d_ff, L = c->n_layer;
    return L * (2.0 * (4.0 * I * C + (o.ffn == T5_GATED_GELU ? 3.0 : 2.0) * F * C) +
                4.0 * (double)T * I);
}

static ig_comm_micro t5_comm_micro(const ig_model_config *c, const ig_part *p, int B, int T,
                                   uint64_t e, int recompute) {
    (void)c, (void)p, (void)B, (void)T, (void)e, (void)recompute;
    return (ig_comm_micro){0, 0, 0}; /* one process */
}

/* ---- the tensors ----------------------------------------------------------------------------- */

/* Initial values (a model made here for tests and benchmarks, not for training): transformers'
 * T5 initialisation with factor 1, except that q, k and v are one tensor, drawn with the std that
 * gives q . k unit scale: (d_model^2 d_kv)^-1/4 */
static size_t t5_tensors(const ig_model_config *c, const ig_part *p, ig_tensor_spec *out,
                         size_t cap) {
    const t5_shape o = t5_own(c);
    int64_t C = c->d_model, I = inner(c), F = o.d_ff;
    ig_spec_list l = {out, 0, cap};
    ig_tensor_spec t = {.ndim = 2, .split_dim = -1, .init = IG_INIT_NORMAL, .decay = 1};
    float sc = (float)(1.0 / sqrt((double)C)), sf = (float)(1.0 / sqrt((double)F));
    if (p->first) {
        t.place = IG_PLACE_FIRST;
        t.shape[0] = c->vocab_size, t.shape[1] = C, t.std = 1.0f;
        ig_spec_add(&l, "shared.weight", 0, &t);
        t.shape[0] = o.buckets, t.shape[1] = c->n_head, t.std = sc;
        ig_spec_add(&l, "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", 0,
                    &t);
    }
    ig_tensor_spec norm = {.ndim = 1, .split_dim = -1, .init = IG_INIT_ONE, .shape = {C, 1}};
    norm.place = t.place = IG_PLACE_LAYER;
    const char *pre = "encoder.block.%d.layer.";
    char name[96];
    for (int k = p->l0; k < p->l1; k++) {
#define ADD(suffix, tmpl)                                                                          \
    (snprintf(name, sizeof name, "%s%s", pre, suffix), ig_spec_add(&l, name, k, tmpl))
        ADD("0.layer_norm.weight", &norm);
        t.shape[0] = 3 * I, t.shape[1] = C, t.std = (float)pow((double)C * C * o.d_kv, -0.25);
        ADD("0.SelfAttention.qkv.weight", &t);
        t.shape[0] = C, t.shape[1] = I, t.std = (float)(1.0 / sqrt((double)I));
        ADD("0.SelfAttention.o.weight", &t);
        ADD("1.layer_norm.weight", &norm);
        t.shape[0] = F, t.shape[1] = C, t.std = sc;
        if (o.ffn == T5_GATED_GELU) {
            ADD("1.DenseReluDense.wi_0.weight", &t);
            ADD("1.DenseReluDense.wi_1.weight", &t);
        } else {
            ADD("1.DenseReluDense.wi.weight", &t);
        }
        t.shape[0] = C, t.shape[1] = F, t.std = sf;
        ADD("1.DenseReluDense.wo.weight", &t);
#undef ADD
    }
    if (p->last) {
        norm.place = IG_PLACE_LAST;
        ig_spec_add(&l, "encoder.final_layer_norm.weight", 0, &norm);
    }
    return l.n;
}

/* ---- the activations ------------------------------------------------------------------------- */

static void layout(const ig_model_config *c, int B, int T, t5_state *x, ig_act_sizes *out) {
    const t5_shape o = t5_own(c);
    uint64_t N = (uint64_t)B * (uint64_t)T, C = (uint64_t)c->d_model, I = (uint64_t)inner(c);
    uint64_t F = (uint64_t)o.d_ff, gated = o.ffn == T5_GATED_GELU;
    uint64_t a = 0, f = 0, i = 0;
    x->per_layer = gated ? 7 : 6;
    x->x = ig_act_take(&a, N * C);
    x->h = ig_act_take(&a, N * C);
    x->qkv = ig_act_take(&a, N * 3 * I);
    x->att = ig_act_take(&a, N * I);
    x->out = ig_act_take(&a, N * C);
    x->f1 = ig_act_take(&a, N * F);
    x->f2 = ig_act_take(&a, gated * N * F);
    x->f3 = ig_act_take(&a, gated * N * F);
    x->bias = ig_act_take(&a, (uint64_t)c->n_head * T * T);
    x->rstd = ig_act_take(&f, N);
    x->ids = ig_act_take(&i, N);
    x->klen = ig_act_take(&i, (uint64_t)B);
    *out = (ig_act_sizes){.act = a, .f32 = f, .i32 = i};
}

static void t5_plan(const ig_model_config *c, const ig_part *p, int B, int T, ig_act_sizes *out) {
    (void)p;
    t5_state x;
    layout(c, B, T, &x, out);
}

static ig_status t5_create(ig_model *m, ig_err *err) {
    t5_state *x = ig_calloc(m->ctx, 1, sizeof *x);
    if (!x) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_act_sizes a;
    layout(&m->cfg, m->B, m->T, x, &a);
    m->fs = x;
    return IG_OK;
}

static void t5_destroy(ig_model *m) {
    ig_free(m->ctx, m->fs);
    m->fs = NULL;
}

/* ---- config.json and checkpoint manifests ---------------------------------------------------- */

/* The family's own fields of a config.json or a manifest's "model" object (the same names: d_kv
 * and d_ff required, the others at transformers' defaults, feed_forward_proj relu as there) */
static ig_status read_own(json_t *o, const char *file, ig_model_config *c, ig_err *err) {
    t5_shape s = t5_own(c);
    int64_t v[4] = {0};
    static const char *const keys[] = {"d_kv", "d_ff", "relative_attention_num_buckets",
                                       "relative_attention_max_distance"};
    const int64_t dflt[] = {64, 2048, 32, 128}, lo[] = {1, 1, 4, 2};
    ig_status st = IG_OK;
    for (int k = 0; k < 4 && st == IG_OK; k++)
        st = ig_hf_get_int(o, file, keys[k], NULL, lo[k], 1 << 20, k < 2, dflt[k], &v[k], err);
    if (st == IG_OK)
        st = ig_hf_get_positive(o, file, "layer_norm_epsilon", 1e-6, &c->norm_eps, err);
    if (st != IG_OK) return st;
    /* transformers' T5Config: "gated-ACT" is gated, ACT alone is not; gated-gelu means gelu_new */
    json_t *fp = json_object_get(o, "feed_forward_proj");
    const char *ffn = json_is_string(fp) ? json_string_value(fp) : "relu";
    if (fp && !json_is_string(fp))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"feed_forward_proj\" must be a string", file);
    int gated = !strcmp(ffn, "gated-gelu") || !strcmp(ffn, "gated-gelu_new");
    if (!gated && strcmp(ffn, "relu"))
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: feed_forward_proj \"%s\": ingot's T5 computes gated-gelu (T5 v1.1) "
                          "and relu (T5 v1.0)",
                          file, ffn);
    /* what transformers derives from it, when a file states it too, must agree */
    const char *act = json_string_value(json_object_get(o, "dense_act_fn"));
    json_t *ga = json_object_get(o, "is_gated_act");
    if (act && strcmp(act, gated ? "gelu_new" : "relu"))
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: dense_act_fn \"%s\" with feed_forward_proj \"%s\": ingot's T5 "
                          "computes %s there",
                          file, act, ffn, gated ? "gelu_new" : "relu");
    if (json_is_boolean(ga) && json_is_true(ga) != gated)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: is_gated_act %s with feed_forward_proj \"%s\"", file,
                          json_is_true(ga) ? "true" : "false", ffn);
    s.d_kv = (int)v[0], s.d_ff = (int)v[1], s.buckets = (int)v[2], s.max_distance = (int)v[3];
    s.ffn = gated ? T5_GATED_GELU : T5_RELU;
    ig_own_set_t5_shape(c, &s);
    return IG_OK;
}

static ig_status t5_to_json(const ig_model_config *c, json_t *model, ig_err *err) {
    (void)err;
    const t5_shape s = t5_own(c);
    json_object_set_new(model, "d_kv", json_integer(s.d_kv));
    json_object_set_new(model, "d_ff", json_integer(s.d_ff));
    json_object_set_new(model, "relative_attention_num_buckets", json_integer(s.buckets));
    json_object_set_new(model, "relative_attention_max_distance", json_integer(s.max_distance));
    json_object_set_new(model, "layer_norm_epsilon", json_real(c->norm_eps));
    json_object_set_new(model, "feed_forward_proj", json_string(ffns[s.ffn]));
    return IG_OK;
}

static ig_status t5_from_json(json_t *model, ig_model_config *c, const char *file, ig_err *err) {
    return read_own(model, file, c, err);
}

/* transformers' T5Config, strictly: the sizes are required; a field that changes what the
 * encoder computes in a way ingot does not is refused, named */
static ig_status t5_hf_config(json_t *o, const char *file, ig_model_config *out, int32_t *eod,
                              ig_err *err) {
    int64_t v[4] = {0}, np = 0, e = -1;
    static const char *const keys[] = {"num_layers", "num_heads", "d_model", "vocab_size"};
    ig_status st = IG_OK;
    for (int k = 0; k < 4 && st == IG_OK; k++)
        st = ig_hf_get_int(o, file, keys[k], NULL, 1, 1 << 30, 1, 0, &v[k], err);
    if (st == IG_OK) st = ig_hf_get_int(o, file, "n_positions", NULL, 1, 1 << 30, 0, 512, &np, err);
    if (st == IG_OK) st = ig_hf_get_int(o, file, "eos_token_id", NULL, 0, 1 << 30, 0, -1, &e, err);
    if (st == IG_OK) st = read_own(o, file, out, err);
    if (st != IG_OK) return st;
    int dec = 0, scalable = 0;
    if ((st = ig_hf_get_bool(o, file, "is_decoder", 0, &dec, err)) != IG_OK ||
        (st = ig_hf_get_bool(o, file, "scalable_attention", 0, &scalable, err)) != IG_OK)
        return st;
    if (dec || scalable)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: %s true: ingot's T5 is the encoder, as T5EncoderModel computes it",
                          file, dec ? "is_decoder" : "scalable_attention");
    out->n_layer = (int)v[0], out->n_head = (int)v[1], out->d_model = (int)v[2];
    out->vocab_size = (int)v[3], out->seq_len = (int)np;
    *eod = e >= 0 && e < v[3] ? (int32_t)e : -1;
    return IG_OK;
}

/* a T5EncoderModel's config.json, as transformers writes one */
static json_t *t5_hf_write_config(const ig_model_config *c, int32_t eod) {
    const t5_shape s = t5_own(c);
    return json_pack("{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:s,s:f,s:f,s:b,s:b,s:i,s:i,"
                     "s:s}",
                     "architectures", "T5EncoderModel", "model_type", "t5", "vocab_size",
                     c->vocab_size, "d_model", c->d_model, "d_kv", s.d_kv, "d_ff", s.d_ff,
                     "num_layers", c->n_layer, "num_heads", c->n_head,
                     "relative_attention_num_buckets", s.buckets, "relative_attention_max_distance",
                     s.max_distance, "layer_norm_epsilon", c->norm_eps, "feed_forward_proj",
                     ffns[s.ffn], "dropout_rate", 0.0, "initializer_factor", 1.0,
                     "is_encoder_decoder", 0, "use_cache", 0, "pad_token_id", 0, "eos_token_id",
                     eod >= 0 ? eod : 1, "torch_dtype", "float32");
}

/* q|k|v is three tensors there; shared.weight may be stored as its tied encoder.embed_tokens */
static size_t t5_hf_pieces(const ig_model_config *c, const ig_tensor_spec *t, ig_hf_piece *out,
                           size_t cap) {
    const char *qkv = strstr(t->name, "SelfAttention.qkv.weight");
    size_t n = qkv ? 3 : 1;
    for (size_t k = 0; k < n && k < cap; k++) {
        ig_hf_piece *p = &out[k];
        memset(p, 0, sizeof *p);
        if (qkv) {
            int64_t I = inner(c);
            snprintf(p->name, sizeof p->name, "%.*sSelfAttention.%c.weight", (int)(qkv - t->name),
                     t->name, "qkv"[k]);
            p->row0 = (int64_t)k * I, p->rows = I;
        } else {
            snprintf(p->name, sizeof p->name, "%s", t->name);
            if (!strcmp(t->name, "shared.weight"))
                snprintf(p->alt, sizeof p->alt, "encoder.embed_tokens.weight");
            p->rows = t->shape[0];
        }
    }
    return n;
}

/* an encoder-decoder file's decoder and head; the tied copy of shared.weight */
static int t5_hf_ignored(const char *name) {
    return !strncmp(name, "decoder.", 8) || !strcmp(name, "lm_head.weight") ||
           !strcmp(name, "encoder.embed_tokens.weight");
}

/* ---- the family ------------------------------------------------------------------------------ */

static int t5_width(const ig_model_config *c) {
    return c->d_model;
}

static const ig_encode_model t5_encode_model = {.width = t5_width, .encode = t5_encode};

const ig_family ig_family_t5 = {
    .arch = "t5",
    .what = "T5 v1.1 / v1.0 text encoder from Hugging Face files, used frozen to encode captions "
            "(ingot encode-text)",
    .objective = &ig_objective_encode,
    .for_objective = &t5_encode_model,
    .any_length = 1,
    .keys = t5_keys,
    .n_keys = sizeof t5_keys / sizeof t5_keys[0],
    .ops = t5_ops,
    .n_ops = sizeof t5_ops / sizeof t5_ops[0],
    .check = t5_check,
    .differs = t5_differs,
    .check_layout = t5_check_layout,
    .num_params = t5_num_params,
    .describe = t5_describe,
    .flops_per_token = t5_flops_per_token,
    .comm_micro = t5_comm_micro,
    .tensors = t5_tensors,
    .plan = t5_plan,
    .create = t5_create,
    .destroy = t5_destroy,
    .to_json = t5_to_json,
    .from_json = t5_from_json,
    .hf_model_type = "t5",
    .hf_config = t5_hf_config,
    .hf_write_config = t5_hf_write_config,
    .hf_pieces = t5_hf_pieces,
    .hf_ignored = t5_hf_ignored,
};
