/* hf.c - Hugging Face model directories for every family: reading a config.json (the family from
 * its model_type, the shape from the family's hf_config), importing a model.safetensors into a
 * model (each tensor assembled whole from the file's pieces, then this rank's part taken out, so a
 * part of any layout can start from a released model; every tensor of the file must be used, so
 * a config.json that says fewer layers than the file holds is caught), and exporting a whole
 * model as a directory transformers' from_pretrained loads. No family is named here.
 */
#include "hf.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "family/family.h"
#include "safetensors.h"

enum { HF_CONFIG_MAX = 1 << 20 }; /* bytes of a config.json ingot reads */

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int exists_in(const char *dir, const char *name) {
    char p[4352];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return ig_file_exists(p);
}

/* A family's weights file in a directory (a diffusers model's is not model.safetensors). */
static const char *weights_name(const ig_family *f) {
    return f && f->hf_weights ? f->hf_weights : "model.safetensors";
}

void ig_hf_paths(const char *path, char *st, char *cfg, size_t cap) {
    if (is_dir(path)) {
        /* as transformers looks: the single file first, then a sharded model's index; else the
         * first family's weights file the directory holds (a diffusers model's) */
        snprintf(st, cap, "%s/model.safetensors", path);
        if (!ig_file_exists(st) && exists_in(path, "model.safetensors.index.json"))
            snprintf(st, cap, "%s/model.safetensors.index.json", path);
        for (int i = 0; !ig_file_exists(st) && ig_family_of(i); i++) {
            const char *w = ig_family_of(i)->hf_weights;
            char alt[4200];
            snprintf(alt, sizeof alt, "%s/%s", path, w ? w : "model.safetensors");
            if (w && ig_file_exists(alt)) snprintf(st, cap, "%s", alt);
        }
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

/* ---- config.json fields ---------------------------------------------------------------------- */

ig_status ig_hf_get_int(json_t *o, const char *file, const char *key, const char *alt, int64_t lo,
                        int64_t hi, int required, int64_t dflt, int64_t *out, ig_err *err) {
    json_t *v = json_object_get(o, key);
    const char *name = key;
    if (!v && alt) v = json_object_get(o, alt), name = alt;
    if (!v || json_is_null(v)) {
        if (required) return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" is missing", file, key);
        *out = dflt;
        return IG_OK;
    }
    if (!json_is_integer(v))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" must be an integer", file, name);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" is %lld, outside [%lld, %lld]", file,
                          name, (long long)x, (long long)lo, (long long)hi);
    *out = (int64_t)x;
    return IG_OK;
}

ig_status ig_hf_get_float(json_t *o, const char *file, const char *key, int required, double dflt,
                          double *out, ig_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" is missing", file, key);
        *out = dflt;
        return IG_OK;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" must be a number", file, key);
    *out = json_number_value(v);
    return IG_OK;
}

ig_status ig_hf_get_positive(json_t *o, const char *file, const char *key, double dflt, double *out,
                             ig_err *err) {
    ig_status st = ig_hf_get_float(o, file, key, 0, dflt, out, err);
    if (st == IG_OK && !(*out > 0))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: \"%s\" is %g: it must be greater than 0 (leave the key out for "
                          "the default, %g)",
                          file, key, *out, dflt);
    return st;
}

ig_status ig_hf_get_bool(json_t *o, const char *file, const char *key, int dflt, int *out,
                         ig_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return IG_OK;
    }
    if (!json_is_boolean(v))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" must be true or false", file, key);
    *out = json_is_true(v);
    return IG_OK;
}

/* ---- the shape ------------------------------------------------------------------------------- */

/* The model_types the families read, as "gpt2, llama, ingot-dit and t5" (the one list's), or
 * with classes the diffusers classes (_class_name). */
static const char *hf_name(const ig_family *f, int classes) {
    return classes ? f->hf_class_name : f->hf_model_type;
}

static void known_types(char *buf, size_t cap, int classes) {
    int n = 0;
    for (int i = 0; ig_family_of(i); i++) n += hf_name(ig_family_of(i), classes) != NULL;
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0, j = 0; ig_family_of(i) && k < cap; i++) {
        const char *t = hf_name(ig_family_of(i), classes);
        if (!t) continue;
        k += (size_t)snprintf(buf + k, cap - k, "%s%s",
                              j == 0       ? ""
                              : j == n - 1 ? " and "
                                           : ", ",
                              t);
        j++;
    }
}

/* The family and shape of a parsed config.json. */
static ig_status shape_of(json_t *o, const char *file, ig_model_config *out, int32_t *eod,
                          ig_err *err) {
    json_t *mt = json_object_get(o, "model_type");
    char known[256], classes[256];
    known_types(known, sizeof known, 0);
    known_types(classes, sizeof classes, 1);
    if (!json_is_object(o)) return ig_err_set(err, IG_ERR_FORMAT, "%s: not a JSON object", file);
    /* a diffusers config.json: no model_type, its class's name */
    json_t *cls = json_object_get(o, "_class_name");
    const ig_family *f = NULL;
    for (int i = 0; !json_is_string(mt) && json_is_string(cls) && ig_family_of(i); i++) {
        const char *c = ig_family_of(i)->hf_class_name;
        if (c && !strcmp(c, json_string_value(cls))) f = ig_family_of(i);
    }
    if (!json_is_string(mt) && json_is_string(cls) && !f)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: \"_class_name\" \"%s\": of diffusers' models ingot reads %s (and "
                          "%s models by \"model_type\")",
                          file, json_string_value(cls), classes, known);
    if (!json_is_string(mt) && !f)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: no \"model_type\": ingot reads %s models (config.json as its "
                          "exports write it) and diffusers' %s (\"_class_name\")",
                          file, known, classes);
    if (!f) f = ig_family_of_hf(json_string_value(mt));
    if (!f)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: model_type \"%s\": ingot reads %s models",
                          file, json_string_value(mt), known);
    memset(out, 0, sizeof *out);
    out->arch = ig_family_index(f);
    ig_status st = f->hf_config(o, file, out, eod, err);
    if (st != IG_OK) return st;
    st = f->check(out, err);
    return st == IG_OK ? IG_OK : ig_err_prefix(err, st, "%s", file);
}

ig_status ig_hf_read_config(ig_ctx *ctx, const char *path, ig_model_config *out, int32_t *eod,
                            ig_err *err) {
    char st_path[4096], cfg_path[4096];
    ig_hf_paths(path, st_path, cfg_path, sizeof st_path);
    memset(out, 0, sizeof *out);
    *eod = -1;
    if (ig_file_exists(cfg_path)) {
        json_t *o = NULL;
        ig_status st = ig_json_load_file(cfg_path, HF_CONFIG_MAX, "a model's config.json", &o, err);
        if (st == IG_OK) st = shape_of(o, cfg_path, out, eod, err);
        json_decref(o);
        return st;
    }
    /* no config.json: the shape from the tensors (a family that can tell, from one file) */
    ig_st_file *f = NULL;
    size_t n = strlen(st_path), k = strlen(".index.json");
    if (n >= k && !strcmp(st_path + n - k, ".index.json"))
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s: no config.json beside it: put the model's config.json beside it",
                          st_path);
    ig_status st = ig_st_file_open(&f, ctx, st_path, err);
    if (st != IG_OK) return st;
    st = ig_err_set(err, IG_ERR_NOT_FOUND,
                    "%s: no config.json beside it, and its tensors do not say the model's shape: "
                    "put the model's config.json beside it",
                    st_path);
    for (int a = 0; ig_family_of(a); a++) {
        const ig_family *fam = ig_family_of(a);
        if (!fam->hf_from_tensors) continue;
        memset(out, 0, sizeof *out);
        out->arch = a;
        ig_err e2 = {0};
        if (fam->hf_from_tensors(f, st_path, out, &e2) == IG_OK) {
            st = fam->check(out, err);
            if (st != IG_OK) ig_err_prefix(err, st, "%s", st_path);
            break;
        }
        if (e2.status != IG_ERR_NOT_FOUND) { /* this family's file, and something wrong in it */
            if (err) *err = e2;
            st = e2.status;
            break;
        }
    }
    ig_st_file_free(f);
    return st;
}

/* ---- import ---------------------------------------------------------------------------------- */

enum { MAX_PIECES = 8 };

/* The file's tensor of piece pc with the shape a tensor of cols columns (ndim dimensions) needs,
 * or an error naming it. */
static ig_status find_piece(const ig_hf_weights *f, const char *file, const ig_hf_piece *pc,
                            int ndim, uint64_t cols, const ig_st_tensor **out, ig_err *err) {
    const ig_st_tensor *x = ig_hf_weights_find(f, pc->name);
    if (!x && pc->alt[0]) x = ig_hf_weights_find(f, pc->alt);
    *out = x;
    if (!x) return ig_err_set(err, IG_ERR_FORMAT, "%s: tensor '%s' is missing", file, pc->name);
    const uint64_t *sh = ig_st_tensor_shape(x);
    if (pc->ndim > 0) { /* a shape of its own */
        int same = ig_st_tensor_ndim(x) == pc->ndim;
        char want[160];
        size_t n = 0;
        for (int k = 0; k < pc->ndim; k++) {
            same = same && sh[k] == (uint64_t)pc->shape[k];
            n += (size_t)snprintf(want + n, sizeof want - n, "%s%lld", k ? ", " : "",
                                  (long long)pc->shape[k]);
        }
        if (!same)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: tensor '%s' is not [%s] as the model needs",
                              file, ig_st_tensor_name(x), want);
        return IG_OK;
    }
    if (ig_st_tensor_ndim(x) != ndim || sh[0] != (uint64_t)pc->rows || (ndim > 1 && sh[1] != cols))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: tensor '%s' is not [%lld%s%llu] as the model needs", file,
                          ig_st_tensor_name(x), (long long)pc->rows, ndim > 1 ? ", " : "",
                          ndim > 1 ? (unsigned long long)cols : 0ULL);
    return IG_OK;
}

ig_status ig_hf_check(ig_ctx *ctx, const char *path, const ig_model_config *cfg, ig_err *err) {
    char st_path[4096], cfg_path[4096];
    ig_hf_paths(path, st_path, cfg_path, sizeof st_path);
    const ig_family *fam = ig_family_of(cfg->arch);
    if (!fam || !fam->hf_pieces)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s models have no Hugging Face form",
                          fam ? fam->arch : "?");
    ig_hf_weights *f = NULL;
    ig_status st = ig_hf_weights_open(&f, ctx, st_path, err);
    if (st != IG_OK) return st;
    size_t nf = ig_hf_weights_count(f);
    ig_part whole = {.tp = 1, .l0 = 0, .l1 = cfg->n_layer, .first = 1, .last = 1};
    size_t n = fam->tensors(cfg, &whole, NULL, 0);
    ig_tensor_spec *specs = NULL;
    char *used = NULL;
    if (n > nf) /* before the table is made: a config.json of 100000 layers costs nothing */
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: the model its config.json describes (%d layers) has %zu tensors, and "
                        "the file holds %zu: the config.json is not this file's",
                        st_path, cfg->n_layer, n, nf);
    if (st == IG_OK && (!(specs = ig_calloc(ctx, n ? n : 1, sizeof *specs)) ||
                        !(used = ig_calloc(ctx, nf ? nf : 1, 1))))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) fam->tensors(cfg, &whole, specs, n);
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        ig_hf_piece pieces[MAX_PIECES] = {0};
        size_t np = fam->hf_pieces(cfg, &specs[i], pieces, MAX_PIECES);
        for (size_t k = 0; st == IG_OK && k < np; k++) {
            const ig_st_tensor *x = NULL;
            st = find_piece(f, st_path, &pieces[k], specs[i].ndim, (uint64_t)specs[i].shape[1], &x,
                            err);
            for (size_t j = 0; st == IG_OK && j < nf; j++)
                if (ig_hf_weights_tensor(f, j) == x) used[j] = 1;
        }
    }
    for (size_t j = 0; st == IG_OK && j < nf; j++) {
        const char *name = ig_st_tensor_name(ig_hf_weights_tensor(f, j));
        if (!used[j] && !(fam->hf_ignored && fam->hf_ignored(name)))
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: tensor '%s' is not part of the model (%d layers, d_model %d): the "
                            "file holds a larger model than its config.json says, or another one",
                            st_path, name, cfg->n_layer, cfg->d_model);
    }
    ig_free(ctx, specs);
    ig_free(ctx, used);
    ig_hf_weights_free(f);
    return st;
}

/* A piece's values between the file's order of dimensions (pc->shape) and the tensor's (the file's
 * dimensions taken in pc->order): to_file 0 reads the file's src into the tensor's dst, 1 the
 * tensor's src into the file's dst. */
static void permute(float *dst, const float *src, const ig_hf_piece *pc, int to_file) {
    int n = pc->ndim;
    uint64_t stride[5], idx[5] = {0}, total = 1;
    for (int d = n - 1; d >= 0; d--) {
        stride[d] = total;
        total *= (uint64_t)pc->shape[d];
    }
    for (uint64_t i = 0; i < total; i++) { /* i: the tensor's element, its index idx */
        uint64_t off = 0;
        for (int k = 0; k < n; k++) off += idx[k] * stride[pc->order[k]];
        if (to_file)
            dst[off] = src[i];
        else
            dst[i] = src[off];
        for (int k = n - 1; k >= 0 && ++idx[k] == (uint64_t)pc->shape[pc->order[k]]; k--)
            idx[k] = 0;
    }
}

typedef struct part_copy {
    float *dst;
    const float *whole;
} part_copy;

static void take_run(void *user, uint64_t global, uint64_t local, uint64_t n) {
    part_copy *c = user;
    memcpy(c->dst + local, c->whole + global, n * sizeof(float));
}

ig_status ig_hf_match(ig_ctx *ctx, const char *path, const ig_model_config *cfg, ig_err *err) {
    char st_path[4096], cfg_path[4096];
    ig_hf_paths(path, st_path, cfg_path, sizeof st_path);
    /* a config.json beside the file must describe this model */
    if (ig_file_exists(cfg_path)) {
        ig_model_config have;
        int32_t eod;
        ig_status st = ig_hf_read_config(ctx, path, &have, &eod, err);
        if (st != IG_OK) return st;
        const char *d = ig_model_config_differs(&have, cfg);
        if (*d) {
            char a[256], b[256];
            return ig_err_set(err, IG_ERR_CONFIG,
                              "%s describes another model than the configuration's (%s "
                              "differs): %s; the configuration asks for %s",
                              cfg_path, d, ig_model_describe(&have, a, sizeof a),
                              ig_model_describe(cfg, b, sizeof b));
        }
    }
    /* every tensor there with its shape, and none left over */
    return ig_hf_check(ctx, path, cfg, err);
}

ig_status ig_hf_load(ig_ctx *ctx, ig_model *m, const char *path, ig_err *err) {
    char st_path[4096], cfg_path[4096];
    ig_hf_paths(path, st_path, cfg_path, sizeof st_path);
    const ig_family *fam = m->fam;
    ig_status st = ig_hf_match(ctx, path, &m->cfg, err);
    if (st != IG_OK) return st;
    /* one tensor at a time: the largest tensor whole, and its part when it is split, on the host
     * (not a copy of the whole model beside the model) */
    uint64_t big = 1;
    for (size_t i = 0; i < m->n_tensors; i++) {
        uint64_t g =
            (uint64_t)m->tensors[i].global_shape[0] * (uint64_t)m->tensors[i].global_shape[1];
        if (g > big) big = g;
    }
    ig_hf_weights *f = NULL;
    float *whole = ig_alloc_aligned(ctx, big * sizeof(float), IG_ALIGN_KERNEL);
    float *part = ig_alloc_aligned(ctx, big * sizeof(float), IG_ALIGN_KERNEL);
    if (!whole || !part) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", st_path);
    if (st == IG_OK) st = ig_hf_weights_open(&f, ctx, st_path, err);
    if (st == IG_OK) st = ig_store_params_changed(m->st, err);
    for (size_t i = 0; st == IG_OK && i < m->n_tensors; i++) {
        const ig_model_tensor *t = &m->tensors[i];
        uint64_t cols = (uint64_t)t->global_shape[1];
        ig_hf_piece pieces[MAX_PIECES] = {0};
        size_t np = fam->hf_pieces(&m->cfg, &m->specs[i], pieces, MAX_PIECES);
        memset(whole, 0, (size_t)((uint64_t)t->global_shape[0] * cols * sizeof(float)));
        for (size_t k = 0; st == IG_OK && k < np; k++) {
            const ig_st_tensor *x = NULL;
            uint64_t n = (uint64_t)pieces[k].rows * cols;
            float *at = whole + (uint64_t)pieces[k].row0 * cols, *tmp = NULL;
            st = find_piece(f, st_path, &pieces[k], t->ndim, cols, &x, err);
            if (st == IG_OK && pieces[k].perm && !(tmp = ig_alloc(ctx, n * sizeof(float))))
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", st_path);
            if (st == IG_OK) st = ig_st_tensor_to_f32(x, tmp ? tmp : at, n, err);
            if (st == IG_OK && tmp) permute(at, tmp, &pieces[k], 0);
            ig_free(ctx, tmp);
        }
        if (st != IG_OK) break;
        part_copy c = {part, whole};
        ig_tensor_runs(t, take_run, &c);
        st = ig_store_upload_tensor(m->st, i, part, 0, err);
    }
    ig_hf_weights_free(f);
    ig_free(ctx, whole);
    ig_free(ctx, part);
    return st;
}

/* ---- export ---------------------------------------------------------------------------------- */

static ig_status write_config(json_t *o, const char *path, int overwrite, ig_err *err) {
    if (!o) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps leaves room for its NUL: the newline takes it */
    ig_status st = ig_write_file_atomic(path, text, len + 1, overwrite, err);
    free(text);
    return st;
}

/* The temporary files a killed export left in dir (NAME.tmp.PID.N of the weights file and
 * config.json, whose process is gone), removed. */
static void remove_stale_temps(const char *dir, const char *weights) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char wt[256];
    snprintf(wt, sizeof wt, "%s.tmp.", weights);
    while ((e = readdir(d))) {
        const char *const names[] = {wt, "config.json.tmp."};
        for (int k = 0; k < 2; k++) {
            size_t n = strlen(names[k]);
            if (strncmp(e->d_name, names[k], n) != 0) continue;
            char *end = NULL;
            long pid = strtol(e->d_name + n, &end, 10);
            if (pid <= 0 || !end || *end != '.' || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
                continue;
            char p[4400];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
}

ig_status ig_hf_export(ig_ctx *ctx, ig_model *m, int32_t eod, const char *dir, int overwrite,
                       ig_err *err) {
    const ig_family *fam = m->fam;
    if (!fam->hf_pieces)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s models have no Hugging Face form",
                          fam->arch);
    if (!(m->part.first && m->part.last && m->part.tp == 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "only a whole model is exported");
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ig_err_errno(err, errno, "cannot create %s", dir);
    struct stat sb = {0};
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s is a %s, not a directory: an export is a directory of files; give "
                          "another --output",
                          dir, ig_file_kind(sb.st_mode));
    remove_stale_temps(dir, weights_name(fam));
    uint64_t n = ig_model_buffer_elems(m);
    float *host = ig_alloc_aligned(ctx, (n ? n : 1) * sizeof(float), IG_ALIGN_KERNEL);
    if (!host) return ig_err_set(err, IG_ERR_NOMEM, "out of memory exporting");
    ig_status st = ig_model_read(m, IG_MODEL_PARAMS, host, err);
    char path[4200], heads[32];
    snprintf(path, sizeof path, "%s/%s", dir, weights_name(fam));
    snprintf(heads, sizeof heads, "%d", m->cfg.n_head);
    ig_st_writer *w = NULL;
    if (st == IG_OK) st = ig_st_writer_create(&w, ctx, path, overwrite, err);
    for (size_t i = 0; st == IG_OK && i < m->n_tensors; i++) {
        const ig_model_tensor *t = &m->tensors[i];
        ig_hf_piece pieces[MAX_PIECES] = {0};
        size_t np = fam->hf_pieces(&m->cfg, &m->specs[i], pieces, MAX_PIECES);
        for (size_t k = 0; st == IG_OK && k < np; k++) {
            uint64_t shape[5] = {(uint64_t)pieces[k].rows, (uint64_t)t->shape[1]};
            int ndim = t->ndim;
            if (pieces[k].ndim > 0) {
                ndim = pieces[k].ndim;
                for (int d = 0; d < ndim; d++) shape[d] = (uint64_t)pieces[k].shape[d];
            }
            float *at = host + t->offset + (uint64_t)pieces[k].row0 * (uint64_t)t->shape[1];
            if (pieces[k].perm) { /* host is this export's copy: the file's order in place */
                uint64_t pn = (uint64_t)pieces[k].rows * (uint64_t)t->shape[1];
                float *tmp = ig_alloc(ctx, pn * sizeof(float));
                if (!tmp) {
                    st = ig_err_set(err, IG_ERR_NOMEM, "out of memory exporting");
                    break;
                }
                permute(tmp, at, &pieces[k], 1);
                memcpy(at, tmp, pn * sizeof(float));
                ig_free(ctx, tmp);
            }
            st = ig_st_writer_add(w, pieces[k].name, IG_ST_F32, shape, ndim, at, err);
        }
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
        st = write_config(fam->hf_write_config(&m->cfg, eod), path, overwrite, err);
    }
    return st;
}
