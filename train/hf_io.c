/* hf_io.c - Hugging Face GPT-2 files: importing a released model.safetensors to fine-tune it, and
 * exporting a model as a directory that transformers' GPT2LMHeadModel.from_pretrained loads
 * (model.safetensors + config.json). Names are Hugging Face's (DESIGN 3.3); Conv1D weights are
 * [in, out] on both sides, so tensors are copied, not transposed; the tied lm_head is not stored;
 * the padded vocabulary rows of wte are dropped on export and zeroed on import.
 */
#include "train_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "safetensors.h"

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The safetensors file and the config.json of a model path (a directory or the file). */
static void model_paths(const char *path, char *st, char *cfg, size_t cap) {
    if (is_dir(path)) {
        snprintf(st, cap, "%s/model.safetensors", path);
        snprintf(cfg, cap, "%s/config.json", path);
        return;
    }
    snprintf(st, cap, "%s", path);
    const char *slash = strrchr(path, '/');
    if (slash)
        snprintf(cfg, cap, "%.*s/config.json", (int)(slash - path), path);
    else
        snprintf(cfg, cap, "config.json");
}

/* The tensor of a model's name in a Hugging Face file: "transformer.X" or, in files converted
 * from the original checkpoints (the hub's gpt2), plain "X". */
static const ig_st_tensor *find_hf(const ig_st_file *f, const char *name) {
    const ig_st_tensor *t = ig_st_file_find(f, name);
    if (!t && strncmp(name, "transformer.", 12) == 0) t = ig_st_file_find(f, name + 12);
    return t;
}

static int64_t cfg_int(json_t *o, const char *a, const char *b) {
    json_t *v = json_object_get(o, a);
    if (!json_is_integer(v) && b) v = json_object_get(o, b);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

ig_status ig_hf_read_config(ig_ctx *ctx, const char *path, ig_gpt_config *out, int32_t *eod,
                            ig_err *err) {
    char st_path[4096], cfg_path[4096];
    model_paths(path, st_path, cfg_path, sizeof st_path);
    memset(out, 0, sizeof *out);
    *eod = -1;
    if (ig_file_exists(cfg_path)) {
        json_error_t je;
        json_t *o = json_load_file(cfg_path, 0, &je);
        if (!o)
            return ig_err_set(err, IG_ERR_FORMAT, "%s:%d:%d: malformed config: %s", cfg_path,
                              je.line, je.column, je.text);
        out->n_layer = (int)cfg_int(o, "n_layer", "num_hidden_layers");
        out->n_head = (int)cfg_int(o, "n_head", "num_attention_heads");
        out->d_model = (int)cfg_int(o, "n_embd", "hidden_size");
        out->seq_len = (int)cfg_int(o, "n_positions", "n_ctx");
        out->vocab_size = (int)cfg_int(o, "vocab_size", NULL);
        int64_t e = cfg_int(o, "eos_token_id", NULL);
        if (e >= 0 && e < out->vocab_size) *eod = (int32_t)e;
        json_t *act = json_object_get(o, "activation_function");
        const char *a = json_string_value(act);
        ig_status st = IG_OK;
        if (a && strcmp(a, "gelu_new") != 0 && strcmp(a, "gelu_pytorch_tanh") != 0)
            st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                            "%s: activation_function '%s': ingot's GPT-2 uses the tanh GeLU "
                            "(gelu_new)",
                            cfg_path, a);
        json_decref(o);
        if (st != IG_OK) return st;
        st = ig_gpt_config_check(out, err);
        return st == IG_OK ? IG_OK : ig_err_prefix(err, st, "%s", cfg_path);
    }
    /* no config.json: the shape from the tensors, the heads from ingot's metadata */
    ig_st_file *f = NULL;
    ig_status st = ig_st_file_open(&f, ctx, st_path, err);
    if (st != IG_OK) return st;
    const ig_st_tensor *wte = find_hf(f, "transformer.wte.weight");
    const ig_st_tensor *wpe = find_hf(f, "transformer.wpe.weight");
    const char *heads = ig_st_file_metadata(f, "n_head");
    if (!wte || !wpe || ig_st_tensor_ndim(wte) != 2 || ig_st_tensor_ndim(wpe) != 2) {
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: no GPT-2 embeddings (wte.weight, wpe.weight)",
                        st_path);
    } else if (!heads) {
        st = ig_err_set(err, IG_ERR_NOT_FOUND,
                        "%s: the number of heads is unknown: put the model's config.json beside "
                        "it",
                        st_path);
    } else {
        out->vocab_size = (int)ig_st_tensor_shape(wte)[0];
        out->d_model = (int)ig_st_tensor_shape(wte)[1];
        out->seq_len = (int)ig_st_tensor_shape(wpe)[0];
        out->n_head = atoi(heads);
        int l = 0;
        char name[128];
        for (;; l++) {
            snprintf(name, sizeof name, "transformer.h.%d.ln_1.weight", l);
            if (!find_hf(f, name)) break;
        }
        out->n_layer = l;
        st = ig_gpt_config_check(out, err);
        if (st != IG_OK) ig_err_prefix(err, st, "%s", st_path);
    }
    ig_st_file_free(f);
    return st;
}

ig_status ig_hf_load(ig_ctx *ctx, ig_gpt *m, const char *path, ig_err *err) {
    char st_path[4096], cfg_path[4096];
    model_paths(path, st_path, cfg_path, sizeof st_path);
    const ig_gpt_config *c = ig_gpt_shape(m);
    uint64_t n = ig_gpt_num_params(c);
    float *host = ig_alloc_aligned(ctx, n * sizeof(float), IG_ALIGN_KERNEL);
    if (!host) return ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", st_path);
    ig_st_file *f = NULL;
    ig_status st = ig_st_file_open(&f, ctx, st_path, err);
    for (size_t i = 0; st == IG_OK && i < ig_gpt_num_tensors(m); i++) {
        const ig_gpt_tensor *t = ig_gpt_tensor_at(m, i);
        const ig_st_tensor *x = find_hf(f, t->name);
        int is_wte = strcmp(t->name, "transformer.wte.weight") == 0;
        uint64_t rows = is_wte ? (uint64_t)c->vocab_size : (uint64_t)t->shape[0];
        if (!x) {
            st = ig_err_set(err, IG_ERR_FORMAT, "%s: tensor '%s' is missing", st_path, t->name);
            break;
        }
        const uint64_t *sh = ig_st_tensor_shape(x);
        if (ig_st_tensor_ndim(x) != t->ndim || sh[0] != rows ||
            (t->ndim > 1 && sh[1] != (uint64_t)t->shape[1])) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: tensor '%s' is not [%llu%s%lld] as the model needs", st_path,
                            ig_st_tensor_name(x), (unsigned long long)rows, t->ndim > 1 ? ", " : "",
                            t->ndim > 1 ? (long long)t->shape[1] : 0LL);
            break;
        }
        uint64_t numel = rows * (t->ndim > 1 ? (uint64_t)t->shape[1] : 1);
        st = ig_st_tensor_to_f32(x, host + t->offset, numel, err);
        if (st == IG_OK && numel < t->numel)
            memset(host + t->offset + numel, 0, (t->numel - numel) * sizeof(float));
    }
    ig_st_file_free(f);
    if (st == IG_OK) st = ig_gpt_write(m, IG_GPT_PARAMS, host, err);
    ig_free(ctx, host);
    return st;
}

static ig_status write_config(const ig_gpt_config *c, int32_t eod, const char *path, int overwrite,
                              ig_err *err) {
    json_t *o = json_pack(
        "{s:[s],s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:f,s:f,s:f,s:f,s:f,s:b,s:s,s:i,s:i}",
        "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", c->vocab_size,
        "n_positions", c->seq_len, "n_ctx", c->seq_len, "n_embd", c->d_model, "n_layer", c->n_layer,
        "n_head", c->n_head, "activation_function", "gelu_new", "layer_norm_epsilon", 1e-5,
        "initializer_range", 0.02, "resid_pdrop", 0.0, "embd_pdrop", 0.0, "attn_pdrop", 0.0,
        "tie_word_embeddings", 1, "torch_dtype", "float32", "bos_token_id",
        eod >= 0 ? eod : c->vocab_size - 1, "eos_token_id", eod >= 0 ? eod : c->vocab_size - 1);
    if (!o) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    size_t len = strlen(text);
    text[len] = '\n';
    ig_status st = ig_write_file_atomic(path, text, len + 1, overwrite, err);
    free(text);
    return st;
}

ig_status ig_hf_export(ig_ctx *ctx, ig_gpt *m, int32_t eod, const char *dir, int overwrite,
                       ig_err *err) {
    const ig_gpt_config *c = ig_gpt_shape(m);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ig_err_errno(err, errno, "cannot create %s", dir);
    uint64_t n = ig_gpt_num_params(c);
    float *host = ig_alloc_aligned(ctx, n * sizeof(float), IG_ALIGN_KERNEL);
    if (!host) return ig_err_set(err, IG_ERR_NOMEM, "out of memory exporting");
    ig_status st = ig_gpt_read(m, IG_GPT_PARAMS, host, err);
    char path[4200], heads[32];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(heads, sizeof heads, "%d", c->n_head);
    ig_st_writer *w = NULL;
    if (st == IG_OK) st = ig_st_writer_create(&w, ctx, path, overwrite, err);
    for (size_t i = 0; st == IG_OK && i < ig_gpt_num_tensors(m); i++) {
        const ig_gpt_tensor *t = ig_gpt_tensor_at(m, i);
        uint64_t shape[2] = {(uint64_t)t->shape[0], (uint64_t)t->shape[1]};
        if (strcmp(t->name, "transformer.wte.weight") == 0) shape[0] = (uint64_t)c->vocab_size;
        st = ig_st_writer_add(w, t->name, IG_ST_F32, shape, t->ndim, host + t->offset, err);
    }
    if (st == IG_OK) st = ig_st_writer_set_metadata(w, "format", "pt", err);
    if (st == IG_OK) st = ig_st_writer_set_metadata(w, "n_head", heads, err);
    if (st == IG_OK)
        st = ig_st_writer_commit(w, NULL, err);
    else
        ig_st_writer_abort(w);
    ig_free(ctx, host);
    if (st == IG_OK) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        st = write_config(c, eod, path, overwrite, err);
    }
    return st;
}
