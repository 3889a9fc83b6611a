/* checkpoint.c - checkpoints (DESIGN 3.3): RUN_DIR/ckpt/step_NNNNNNNN/ holds manifest.json (the
 * configuration, the layout, the step, the loader's consumed samples, the seed, and every file
 * with its size and xxh3) and per-rank safetensors shards of the parameters and of the AdamW
 * moments. A checkpoint is written under a temporary directory name, fsync'd and renamed when
 * complete, so a run killed while saving leaves the previous checkpoint the latest one; only the
 * newest ckpt.keep are kept. Loading verifies every checksum first: a truncated, altered or
 * missing file is refused with its name, never loaded.
 */
#include "train_internal.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"

#define MODEL_FILE "model-r00000.safetensors"
#define OPTIM_FILE "optim-r00000.safetensors"

/* ---- names and directories ------------------------------------------------------------------ */

static int step_dir_name(const char *name, int64_t *step) {
    if (strncmp(name, "step_", 5) != 0 || strlen(name) != 13 || strspn(name + 5, "0123456789") != 8)
        return 0;
    *step = strtoll(name + 5, NULL, 10);
    return 1;
}

/* Removes a checkpoint directory, best effort (a leftover is pruned again on the next save). */
static void remove_dir(const char *dir) {
    ig_err ignored;
    ig_remove_tree(dir, &ignored);
}

static ig_status fsync_dir(const char *dir, ig_err *err) {
    char probe[8192];
    snprintf(probe, sizeof probe, "%s/.", dir);
    return ig_fsync_parent_dir(probe, err);
}

/* ---- saving ---------------------------------------------------------------------------------- */

static void hex(uint64_t v, char out[17]) {
    ig_hash64_hex(v, out);
}

/* Writes one safetensors shard of n_params floats (the model's tensors, names prefixed). */
static ig_status write_shard(ig_ctx *ctx, const ig_gpt *m, const char *path, const char *prefix,
                             const float *data, uint64_t *xxh3, ig_err *err) {
    ig_st_writer *w = NULL;
    ig_status st = ig_st_writer_create(&w, ctx, path, 0, err);
    if (st != IG_OK) return st;
    for (size_t i = 0; st == IG_OK && i < ig_gpt_num_tensors(m); i++) {
        const ig_gpt_tensor *t = ig_gpt_tensor_at(m, i);
        char name[256];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        uint64_t shape[2] = {(uint64_t)t->shape[0], (uint64_t)t->shape[1]};
        st = ig_st_writer_add(w, name, IG_ST_F32, shape, t->ndim, data + t->offset, err);
    }
    if (st == IG_OK) st = ig_st_writer_set_metadata(w, "format", "pt", err);
    if (st != IG_OK) {
        ig_st_writer_abort(w);
        return st;
    }
    return ig_st_writer_commit(w, xxh3, err);
}

static json_t *model_json(const ig_gpt_config *c) {
    return json_pack("{s:i,s:i,s:i,s:i,s:i,s:i}", "n_layer", c->n_layer, "n_head", c->n_head,
                     "d_model", c->d_model, "seq_len", c->seq_len, "vocab_size", c->vocab_size,
                     "padded_vocab", c->padded_vocab);
}

static ig_status write_manifest(const char *dir, const ig_ckpt_info *info, const ig_config *cfg,
                                const char *const *files, const uint64_t *sizes,
                                const uint64_t *sums, size_t n, ig_err *err) {
    char h[17], k[17], ch[17];
    hex(info->loader.index_key, k);
    hex(info->config_hash, ch);
    char *config_text = NULL;
    size_t config_len = 0;
    if (cfg) {
        FILE *f = open_memstream(&config_text, &config_len);
        if (f) {
            ig_config_dump(cfg, f, NULL);
            fclose(f);
        }
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        hex(sums[i], h);
        json_array_append_new(arr, json_pack("{s:s,s:I,s:s}", "name", files[i], "bytes",
                                             (json_int_t)sizes[i], "xxh3", h));
    }
    json_t *root = json_pack(
        "{s:s,s:i,s:I,s:I,s:s,s:f,s:o,s:I,s:I,s:{s:i,s:i,s:i},s:s,s:s,s:o,s:s}", "format",
        IG_CKPT_FORMAT, "version", IG_CKPT_VERSION, "step", (json_int_t)info->step,
        "consumed_samples", (json_int_t)info->loader.consumed_samples, "index_key", k, "loss",
        isfinite(info->loss) ? info->loss : 0.0, "model", model_json(&info->model), "seed",
        (json_int_t)info->seed, "eod_id", (json_int_t)info->eod_id, "layout", "tp", info->tp, "pp",
        info->pp, "dp", info->dp, "config_hash", ch, "config", config_text ? config_text : "",
        "files", arr, "tool_version", "ingot " IG_VERSION_STRING);
    free(config_text);
    if (!root) return ig_err_set(err, IG_ERR_NOMEM, "cannot build %s/manifest.json", dir);
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (!text) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    char path[8192];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    ig_status st = ig_write_file_atomic(path, text, strlen(text), 0, err);
    free(text);
    return st;
}

/* Removes every complete checkpoint but the newest keep. */
static void prune(const char *ckdir, int64_t keep) {
    DIR *d = opendir(ckdir);
    if (!d) return;
    int64_t steps[4096];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        int64_t s;
        if (step_dir_name(e->d_name, &s)) steps[n++] = s;
    }
    closedir(d);
    /* sort descending; keep the first `keep` */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    for (size_t i = (size_t)(keep > 0 ? keep : 1); i < n; i++) {
        char p[8192];
        snprintf(p, sizeof p, "%s/step_%08lld", ckdir, (long long)steps[i]);
        remove_dir(p);
    }
}

ig_status ig_ckpt_save(ig_ctx *ctx, ig_gpt *m, const ig_ckpt_info *info, const ig_config *cfg,
                       const char *run_dir, int64_t keep, char *path, size_t cap, ig_err *err) {
    char ckdir[4096], tmp[4300], final[4300];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", run_dir);
    if (mkdir(ckdir, 0755) != 0 && errno != EEXIST)
        return ig_err_errno(err, errno, "cannot create %s", ckdir);
    snprintf(final, sizeof final, "%s/step_%08lld", ckdir, (long long)info->step);
    snprintf(tmp, sizeof tmp, "%s/.step_%08lld.tmp.%ld", ckdir, (long long)info->step,
             (long)getpid());
    remove_dir(tmp); /* a leftover of this very process id */
    if (mkdir(tmp, 0755) != 0) return ig_err_errno(err, errno, "cannot create %s", tmp);
    uint64_t n = ig_gpt_num_params(ig_gpt_shape(m));
    float *host = ig_alloc_aligned(ctx, n * sizeof(float), IG_ALIGN_KERNEL);
    ig_status st = host ? IG_OK
                        : ig_err_set(err, IG_ERR_NOMEM, "out of memory for a checkpoint of %.1f MB",
                                     (double)n * 4e-6);
    static const char *const files[] = {MODEL_FILE, OPTIM_FILE};
    uint64_t sizes[2] = {0, 0}, sums[2] = {0, 0};
    char p[8192];
    if (st == IG_OK) st = ig_gpt_read(m, IG_GPT_PARAMS, host, err);
    if (st == IG_OK) {
        snprintf(p, sizeof p, "%s/%s", tmp, MODEL_FILE);
        st = write_shard(ctx, m, p, "", host, &sums[0], err);
    }
    /* the moments go into one file: exp_avg.NAME and exp_avg_sq.NAME, as torch's AdamW names
     * them, one after the other */
    if (st == IG_OK) {
        ig_st_writer *w = NULL;
        float *v = ig_alloc_aligned(ctx, n * sizeof(float), IG_ALIGN_KERNEL);
        snprintf(p, sizeof p, "%s/%s", tmp, OPTIM_FILE);
        if (!v) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory for a checkpoint");
        if (st == IG_OK) st = ig_gpt_read(m, IG_GPT_ADAM_M, host, err);
        if (st == IG_OK) st = ig_gpt_read(m, IG_GPT_ADAM_V, v, err);
        if (st == IG_OK) st = ig_st_writer_create(&w, ctx, p, 0, err);
        for (int which = 0; st == IG_OK && which < 2; which++)
            for (size_t i = 0; st == IG_OK && i < ig_gpt_num_tensors(m); i++) {
                const ig_gpt_tensor *t = ig_gpt_tensor_at(m, i);
                char name[300];
                snprintf(name, sizeof name, "%s.%s", which ? "exp_avg_sq" : "exp_avg", t->name);
                uint64_t shape[2] = {(uint64_t)t->shape[0], (uint64_t)t->shape[1]};
                st = ig_st_writer_add(w, name, IG_ST_F32, shape, t->ndim,
                                      (which ? v : host) + t->offset, err);
            }
        if (st == IG_OK)
            st = ig_st_writer_commit(w, &sums[1], err);
        else
            ig_st_writer_abort(w);
        ig_free(ctx, v);
    }
    ig_free(ctx, host);
    for (int i = 0; st == IG_OK && i < 2; i++) {
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", tmp, files[i]);
        if (stat(p, &sb) != 0) st = ig_err_errno(err, errno, "cannot stat %s", p);
        sizes[i] = (uint64_t)sb.st_size;
    }
    if (st == IG_OK) st = write_manifest(tmp, info, cfg, files, sizes, sums, 2, err);
    if (st == IG_OK) st = fsync_dir(tmp, err);
    /* into place: a checkpoint of the same step (saved before a resume) is replaced only once the
     * new one is complete */
    if (st == IG_OK) {
        char old[4400] = "";
        struct stat sb;
        if (stat(final, &sb) == 0) {
            snprintf(old, sizeof old, "%s.old.%ld", final, (long)getpid());
            if (rename(final, old) != 0)
                st = ig_err_errno(err, errno, "cannot move the old %s aside", final);
        }
        if (st == IG_OK && rename(tmp, final) != 0)
            st = ig_err_errno(err, errno, "cannot rename %s to %s", tmp, final);
        if (st == IG_OK) st = fsync_dir(ckdir, err);
        if (old[0]) remove_dir(old);
    }
    if (st != IG_OK) {
        remove_dir(tmp);
        return st;
    }
    if (path) snprintf(path, cap, "%s", final);
    prune(ckdir, keep);
    return IG_OK;
}

/* ---- finding and reading -------------------------------------------------------------------- */

ig_status ig_ckpt_latest(const char *run_dir, char *path, size_t cap, ig_err *err) {
    char ckdir[4096];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", run_dir);
    DIR *d = opendir(ckdir);
    if (!d)
        return ig_err_set(err, IG_ERR_NOT_FOUND, "%s: no checkpoints to resume from (%s)", run_dir,
                          strerror(errno));
    int64_t best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s;
        char man[8192];
        snprintf(man, sizeof man, "%s/%s/manifest.json", ckdir, e->d_name);
        if (step_dir_name(e->d_name, &s) && s > best && ig_file_exists(man)) best = s;
    }
    closedir(d);
    if (best < 0)
        return ig_err_set(err, IG_ERR_NOT_FOUND, "%s: no complete checkpoint to resume from",
                          ckdir);
    snprintf(path, cap, "%s/step_%08lld", ckdir, (long long)best);
    return IG_OK;
}

ig_status ig_ckpt_resolve(const char *path, char *out, size_t cap, ig_err *err) {
    char man[4200], ck[4200];
    snprintf(man, sizeof man, "%s/manifest.json", path);
    snprintf(ck, sizeof ck, "%s/ckpt", path);
    struct stat sb;
    if (!ig_file_exists(man) && stat(ck, &sb) == 0 && S_ISDIR(sb.st_mode))
        return ig_ckpt_latest(path, out, cap, err);
    snprintf(out, cap, "%s", path);
    return IG_OK;
}

static ig_status get_int(json_t *o, const char *key, const char *file, int64_t *out, ig_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" must be an integer", file, key);
    *out = (int64_t)json_integer_value(v);
    return IG_OK;
}

static ig_status get_hex(json_t *o, const char *key, const char *file, uint64_t *out, ig_err *err) {
    json_t *v = json_object_get(o, key);
    const char *s = json_string_value(v);
    if (!s || strlen(s) != 16 || strspn(s, "0123456789abcdef") != 16)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" must be 16 hex digits", file, key);
    *out = strtoull(s, NULL, 16);
    return IG_OK;
}

ig_status ig_ckpt_read_info(ig_ctx *ctx, const char *dir, int verify, ig_ckpt_info *info,
                            ig_err *err) {
    (void)ctx;
    memset(info, 0, sizeof *info);
    char path[8192];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (!ig_file_exists(path))
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s: no manifest.json: not a checkpoint, or one that was not finished",
                          dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return ig_err_set(err, IG_ERR_FORMAT, "%s:%d:%d: malformed manifest: %s", path, je.line,
                          je.column, je.text);
    ig_status st = IG_OK;
    json_t *fmt = json_object_get(root, "format"), *model = json_object_get(root, "model");
    json_t *files = json_object_get(root, "files"), *layout = json_object_get(root, "layout");
    int64_t v = 0, x[6] = {0};
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), IG_CKPT_FORMAT) != 0)
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: \"format\" must be \"%s\"", path, IG_CKPT_FORMAT);
    if (st == IG_OK && (st = get_int(root, "version", path, &v, err)) == IG_OK &&
        v != IG_CKPT_VERSION)
        st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                        "%s: checkpoint version %lld (this ingot reads version %d)", path,
                        (long long)v, IG_CKPT_VERSION);
    if (st == IG_OK) st = get_int(root, "step", path, &info->step, err);
    if (st == IG_OK && (st = get_int(root, "consumed_samples", path, &v, err)) == IG_OK)
        info->loader.consumed_samples = (uint64_t)v;
    if (st == IG_OK) st = get_hex(root, "index_key", path, &info->loader.index_key, err);
    if (st == IG_OK && (st = get_int(root, "seed", path, &v, err)) == IG_OK)
        info->seed = (uint64_t)v;
    if (st == IG_OK && (st = get_int(root, "eod_id", path, &v, err)) == IG_OK)
        info->eod_id = (int32_t)v;
    if (st == IG_OK) st = get_hex(root, "config_hash", path, &info->config_hash, err);
    static const char *const mk[] = {"n_layer", "n_head", "d_model", "seq_len", "vocab_size"};
    for (int i = 0; st == IG_OK && i < 5; i++)
        if (!json_is_object(model))
            st = ig_err_set(err, IG_ERR_FORMAT, "%s: \"model\" must be an object", path);
        else
            st = get_int(model, mk[i], path, &x[i], err);
    if (st == IG_OK) {
        info->model = (ig_gpt_config){(int)x[0], (int)x[1], (int)x[2], (int)x[3], (int)x[4], 0};
        st = ig_gpt_config_check(&info->model, err);
        if (st != IG_OK) ig_err_prefix(err, st, "%s", path);
    }
    if (st == IG_OK && json_is_object(layout)) {
        int64_t tp = 1, pp = 1, dp = 1;
        get_int(layout, "tp", path, &tp, NULL);
        get_int(layout, "pp", path, &pp, NULL);
        get_int(layout, "dp", path, &dp, NULL);
        info->tp = (int)tp, info->pp = (int)pp, info->dp = (int)dp;
    }
    json_t *loss = json_object_get(root, "loss");
    info->loss = json_is_number(loss) ? json_number_value(loss) : 0;
    if (st == IG_OK && (!json_is_array(files) || json_array_size(files) == 0))
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: \"files\" must be a non-empty array", path);
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) {
        if (st != IG_OK) break;
        const char *name = json_string_value(json_object_get(f, "name"));
        int64_t bytes = 0;
        uint64_t sum = 0;
        if (!name || strchr(name, '/') || !*name) {
            st = ig_err_set(err, IG_ERR_FORMAT, "%s: files[%zu].name must be a file name", path, i);
            break;
        }
        if ((st = get_int(f, "bytes", path, &bytes, err)) != IG_OK) break;
        if ((st = get_hex(f, "xxh3", path, &sum, err)) != IG_OK) break;
        char fp[8192];
        snprintf(fp, sizeof fp, "%s/%s", dir, name);
        struct stat sb;
        if (stat(fp, &sb) != 0) {
            st = ig_err_set(err, IG_ERR_NOT_FOUND,
                            "%s is missing: the checkpoint %s is incomplete or damaged", fp, dir);
        } else if ((int64_t)sb.st_size != bytes) {
            st = ig_err_set(err, IG_ERR_CHECKSUM,
                            "%s has %lld bytes but the manifest records %lld: the file was "
                            "truncated or replaced",
                            fp, (long long)sb.st_size, (long long)bytes);
        } else if (verify) {
            uint64_t got = 0;
            if ((st = ig_file_xxh3(fp, &got, err)) != IG_OK) break;
            if (got != sum) {
                char a[17], b[17];
                hex(got, a);
                hex(sum, b);
                st = ig_err_set(err, IG_ERR_CHECKSUM,
                                "%s: xxh3 is %s but the manifest records %s: the file was altered "
                                "or is corrupt",
                                fp, a, b);
            }
        }
    }
    json_decref(root);
    return st;
}

/* Reads the tensors of one shard (names prefixed) into host[n_params] in the model's order. */
static ig_status read_shard(ig_ctx *ctx, const ig_gpt *m, const char *path, const char *prefix,
                            float *host, ig_err *err) {
    ig_st_file *f = NULL;
    ig_status st = ig_st_file_open(&f, ctx, path, err);
    for (size_t i = 0; st == IG_OK && i < ig_gpt_num_tensors(m); i++) {
        const ig_gpt_tensor *t = ig_gpt_tensor_at(m, i);
        char name[300];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        const ig_st_tensor *x = ig_st_file_find(f, name);
        if (!x) {
            st = ig_err_set(err, IG_ERR_FORMAT, "%s: tensor '%s' is missing", path, name);
            break;
        }
        const uint64_t *shape = ig_st_tensor_shape(x);
        if (ig_st_tensor_ndim(x) != t->ndim || shape[0] != (uint64_t)t->shape[0] ||
            (t->ndim > 1 && shape[1] != (uint64_t)t->shape[1])) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: tensor '%s' has another shape than the model's [%lld, %lld]", path,
                            name, (long long)t->shape[0], (long long)t->shape[1]);
            break;
        }
        st = ig_st_tensor_to_f32(x, host + t->offset, t->numel, err);
    }
    ig_st_file_free(f);
    return st;
}

ig_status ig_ckpt_load(ig_ctx *ctx, const char *dir, ig_gpt *m, int optimizer, ig_ckpt_info *info,
                       ig_err *err) {
    ig_status st = ig_ckpt_read_info(ctx, dir, 1, info, err);
    if (st != IG_OK) return st;
    const ig_gpt_config *have = ig_gpt_shape(m), *want = &info->model;
    if (have->n_layer != want->n_layer || have->n_head != want->n_head ||
        have->d_model != want->d_model || have->seq_len != want->seq_len ||
        have->vocab_size != want->vocab_size)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s holds a model of %d layers, %d heads, d_model %d, %d positions, "
                          "vocabulary %d; the configuration asks for %d, %d, %d, %d, %d",
                          dir, want->n_layer, want->n_head, want->d_model, want->seq_len,
                          want->vocab_size, have->n_layer, have->n_head, have->d_model,
                          have->seq_len, have->vocab_size);
    if (info->tp * info->pp != 1)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s was saved under tp %d x pp %d: load it with as many ranks", dir,
                          info->tp, info->pp);
    uint64_t n = ig_gpt_num_params(have);
    float *host = ig_alloc_aligned(ctx, n * sizeof(float), IG_ALIGN_KERNEL);
    if (!host) return ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", dir);
    char p[8192];
    snprintf(p, sizeof p, "%s/%s", dir, MODEL_FILE);
    st = read_shard(ctx, m, p, "", host, err);
    if (st == IG_OK) st = ig_gpt_write(m, IG_GPT_PARAMS, host, err);
    if (st == IG_OK && optimizer) {
        snprintf(p, sizeof p, "%s/%s", dir, OPTIM_FILE);
        st = read_shard(ctx, m, p, "exp_avg.", host, err);
        if (st == IG_OK) st = ig_gpt_write(m, IG_GPT_ADAM_M, host, err);
        if (st == IG_OK) st = read_shard(ctx, m, p, "exp_avg_sq.", host, err);
        if (st == IG_OK) st = ig_gpt_write(m, IG_GPT_ADAM_V, host, err);
    }
    ig_free(ctx, host);
    return st;
}
