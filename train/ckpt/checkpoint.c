/* checkpoint.c - checkpoints (DESIGN 3.3) of a model of any family: RUN_DIR/ckpt/step_NNNNNNNN/
 * holds manifest.json (the family and its shape, every tensor with its tags, the configuration,
 * the layout, the step, the loader's consumed samples, the seed, and every file with its size and
 * xxh3, the whole manifest checksummed) and one pair of safetensors shards per model-parallel rank
 * (tp x pp): model-rNNNNN (the parameters of its part, under their global names) and
 * optim-rNNNNN (the AdamW moments, exp_avg.NAME and exp_avg_sq.NAME). The data-parallel replicas
 * hold the same parameters, so replica 0 writes them; with ZeRO the moments' pieces are gathered
 * on it first.
 *
 * A checkpoint is written under a temporary directory name, fsync'd and renamed when every rank
 * has written its files, so a run killed (or failing on any rank) while saving leaves the
 * previous checkpoint the latest one; only the newest ckpt.keep are kept, and what killed
 * processes left is removed. Loading reads any layout into any part: each tensor is assembled
 * whole from the parts the saving layout cut it into (where its placement tag says they are), and
 * this rank's part of it taken out, so a run resumes under another tp, pp, dp or ZeRO stage, and
 * `ckpt export` merges. Every file a rank reads is verified (size and xxh3) first: a truncated,
 * altered or missing file is refused with its name, never loaded; an edited manifest is refused
 * by its checksum. Version 1 manifests (GPT-2 only, before model families) are read as well.
 */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "family/family.h"
#include "formats/hf.h"
#include "formats/safetensors.h"

enum { MANIFEST_MAX = 64 << 20 }; /* bytes of a manifest.json ingot reads */

static const char *const place_names[] = {"layer", "first", "last", "tied"}; /* ig_place */
/* the optimizer's states in the optim shards, by ig_optim_read_pieces' which */
static const char *const state_prefix[] = {"exp_avg.", "exp_avg_sq.", "ema."};

/* the files of model-parallel rank r = pp_rank * tp + tp_rank */
static void shard_name(char *out, size_t cap, int optim, int r) {
    snprintf(out, cap, "%s-r%05d.safetensors", optim ? "optim" : "model", r);
}

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

/* This host's name, as it goes into temporary names (no '.' or '/'). */
static void host_name(char *out, size_t cap) {
    if (gethostname(out, cap - 1) != 0) snprintf(out, cap, "host");
    out[cap - 1] = '\0';
    for (char *p = out; *p; p++)
        if (*p == '.' || *p == '/') *p = '_';
}

int ig_ckpt_remove_stale(const char *run_dir) {
    char ckdir[4096], host[256];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", run_dir);
    host_name(host, sizeof host);
    DIR *d = opendir(ckdir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        /* .step_N.tmp.HOST.PID (an unfinished save), step_N.old.HOST.PID (a replaced one) */
        const char *tag = strstr(e->d_name, ".tmp.");
        if (!tag || strncmp(e->d_name, ".step_", 6) != 0) tag = strstr(e->d_name, ".old.");
        if (!tag || (strncmp(e->d_name, ".step_", 6) != 0 && strncmp(e->d_name, "step_", 5) != 0))
            continue;
        const char *h = tag + 5, *dot = strrchr(h, '.');
        if (!dot || (size_t)(dot - h) != strlen(host) || strncmp(h, host, strlen(host)) != 0)
            continue; /* another host's: it cannot be told from here whether it is alive */
        char *end = NULL;
        long pid = strtol(dot + 1, &end, 10);
        if (!end || *end || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* still running */
        char p[8400];
        snprintf(p, sizeof p, "%s/%s", ckdir, e->d_name);
        remove_dir(p);
        removed++;
    }
    closedir(d);
    return removed;
}

/* ---- the manifest ---------------------------------------------------------------------------- */

static void hex(uint64_t v, char out[17]) {
    ig_hash64_hex(v, out);
}

/* The checksum of a manifest: xxh3 of its members but "checksum", serialised compactly with
 * sorted keys (whatever the file's whitespace). */
static uint64_t manifest_checksum(json_t *root) {
    json_t *copy = json_copy(root);
    if (!copy) return 0;
    json_object_del(copy, "checksum");
    char *text = json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(copy);
    uint64_t h = text ? ig_xxh3_64(text, strlen(text)) : 0;
    free(text);
    return h;
}

/* The model's shape and family as a manifest stores them. */
static json_t *model_json(const ig_model_config *c, ig_err *err) {
    json_t *o = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i}", "n_layer", c->n_layer, "n_head", c->n_head,
                          "d_model", c->d_model, "seq_len", c->seq_len, "vocab_size", c->vocab_size,
                          "padded_vocab", c->padded_vocab);
    const ig_family *f = ig_family_of(c->arch);
    if (o && f && f->to_json(c, o, err) != IG_OK) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Every tensor of the whole model with its tags (whatever part this rank holds). */
static json_t *tensors_json(const ig_model_config *c) {
    const ig_family *f = ig_family_of(c->arch);
    ig_part whole = {.tp = 1, .l0 = 0, .l1 = c->n_layer, .first = 1, .last = 1};
    size_t n = f->tensors(c, &whole, NULL, 0);
    ig_tensor_spec *specs = calloc(n ? n : 1, sizeof *specs);
    json_t *arr = json_array();
    if (!specs || !arr) {
        free(specs);
        json_decref(arr);
        return NULL;
    }
    f->tensors(c, &whole, specs, n);
    for (size_t i = 0; i < n; i++) {
        const ig_tensor_spec *s = &specs[i];
        json_t *shape = json_array(), *blocks = json_array();
        for (int d = 0; d < s->ndim; d++) json_array_append_new(shape, json_integer(s->shape[d]));
        for (int k = 0; k < (s->n_blocks > 1 ? s->n_blocks : 0); k++)
            json_array_append_new(blocks, json_integer(s->block[k]));
        json_array_append_new(arr, json_pack("{s:s,s:o,s:s,s:i,s:i,s:o}", "name", s->name, "shape",
                                             shape, "place", place_names[s->place], "layer",
                                             s->place == IG_PLACE_LAYER ? s->layer : -1,
                                             "split_dim", s->split_dim, "blocks", blocks));
    }
    free(specs);
    return arr;
}

/* What a writer reports of a file it wrote. */
typedef struct file_rec {
    char name[64];
    uint64_t bytes, xxh3;
    int32_t tp_rank, pp_rank;
} file_rec;

static ig_status write_manifest(const char *dir, const ig_ckpt_info *info, const ig_config *cfg,
                                const ig_layout *lo, const file_rec *files, size_t n, ig_err *err) {
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
        hex(files[i].xxh3, h);
        json_array_append_new(arr,
                              json_pack("{s:s,s:I,s:s,s:i,s:i}", "name", files[i].name, "bytes",
                                        (json_int_t)files[i].bytes, "xxh3", h, "tp_rank",
                                        files[i].tp_rank, "pp_rank", files[i].pp_rank));
    }
    json_t *stages = json_array();
    for (int i = 0; i <= lo->pp; i++)
        json_array_append_new(stages, json_integer(lo->stage_layers[i]));
    json_t *model = model_json(&info->model, err);
    if (!model) {
        json_decref(arr);
        json_decref(stages);
        free(config_text);
        return err && err->status != IG_OK ? err->status
                                           : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    const ig_family *fam = ig_family_of(info->model.arch);
    json_t *root = json_pack(
        "{s:s,s:i,s:I,s:I,s:I,s:s,s:f,s:s,s:o,s:o,s:I,s:I,s:{s:i,s:i,s:i,s:i,s:b,s:o},s:s,s:s,s:o,"
        "s:s}",
        "format", IG_CKPT_FORMAT, "version", IG_CKPT_VERSION, "step", (json_int_t)info->step,
        "consumed_samples", (json_int_t)info->loader.consumed_samples, "train_samples",
        (json_int_t)info->train_samples, "index_key", k, "loss",
        isfinite(info->loss) ? info->loss : 0.0, "arch", fam->arch, "model", model, "tensors",
        tensors_json(&info->model), "seed", (json_int_t)info->seed, "eod_id",
        (json_int_t)info->eod_id, "layout", "tp", lo->tp, "pp", lo->pp, "dp", lo->dp, "zero",
        lo->zero, "sp", lo->sp, "stage_layers", stages, "config_hash", ch, "config",
        config_text ? config_text : "", "files", arr, "tool_version", "ingot " IG_VERSION_STRING);
    free(config_text);
    if (!root) return ig_err_set(err, IG_ERR_NOMEM, "cannot build %s/manifest.json", dir);
    if (info->ema_decay > 0) json_object_set_new(root, "ema_decay", json_real(info->ema_decay));
    if (info->global_batch > 0)
        json_object_set_new(root, "global_batch", json_integer((json_int_t)info->global_batch));
    char sum[17];
    hex(manifest_checksum(root), sum);
    json_object_set_new(root, "checksum", json_string(sum));
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (!text) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    char path[8192];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    ig_status st = ig_write_file_atomic(path, text, strlen(text), 0, err);
    free(text);
    return st;
}

/* A manifest read once, with where it came from. */
typedef struct manifest {
    char dir[4096], path[4200];
    json_t *root;
} manifest;

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

static ig_status manifest_open(manifest *mf, const char *dir, ig_err *err) {
    memset(mf, 0, sizeof *mf);
    snprintf(mf->dir, sizeof mf->dir, "%s", dir);
    snprintf(mf->path, sizeof mf->path, "%s/manifest.json", dir);
    if (!ig_file_exists(mf->path))
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s: no manifest.json: not a checkpoint, or one that was not finished",
                          dir);
    ig_status st =
        ig_json_load_file(mf->path, MANIFEST_MAX, "a checkpoint's manifest", &mf->root, err);
    if (st != IG_OK) return st;
    if (!json_is_object(mf->root)) {
        json_decref(mf->root);
        mf->root = NULL;
        return ig_err_set(err, IG_ERR_FORMAT, "%s: not a JSON object", mf->path);
    }
    return IG_OK;
}

static void manifest_close(manifest *mf) {
    json_decref(mf->root);
    mf->root = NULL;
}

/* The name of the first key of object o (checked when an object) not in names[n], or NULL. */
static const char *key_outside(json_t *o, const char *const *names, size_t n) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        size_t i = 0;
        while (i < n && strcmp(key, names[i]) != 0) i++;
        if (i == n) return key;
    }
    return NULL;
}

/* A manifest that says version 1 holds only what the version-1 writers wrote (top level, model,
 * layout and file entries): version 2 added the checksum, and a version-2 manifest relabelled 1
 * with its checksum deleted would otherwise pass with an edited step or sample count. */
static ig_status v1_fields(json_t *root, const char *path, ig_err *err) {
    static const char *const top[] = {
        "format", "version", "step",   "consumed_samples", "index_key", "loss",  "model",
        "seed",   "eod_id",  "layout", "config_hash",      "config",    "files", "tool_version"};
    static const char *const model[] = {"n_layer", "n_head",     "d_model",
                                        "seq_len", "vocab_size", "padded_vocab"};
    static const char *const layout[] = {"tp", "pp", "dp", "zero", "sp", "stage_layers"};
    static const char *const file[] = {"name", "bytes", "xxh3", "tp_rank", "pp_rank"};
    const char *bad = key_outside(root, top, sizeof top / sizeof top[0]), *where = "";
    json_t *o = json_object_get(root, "model");
    if (!bad && json_is_object(o)) bad = key_outside(o, model, 6), where = "\"model\".";
    o = json_object_get(root, "layout");
    if (!bad && json_is_object(o)) bad = key_outside(o, layout, 6), where = "\"layout\".";
    json_t *files = json_object_get(root, "files");
    for (size_t i = 0; !bad && i < json_array_size(files); i++) {
        json_t *f = json_array_get(files, i);
        if (json_is_object(f)) bad = key_outside(f, file, 5), where = "a file's ";
    }
    if (!bad) return IG_OK;
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s: says \"version\": 1 but holds %s\"%s\", which version-1 manifests "
                      "never held: a later manifest relabelled (from version 2 on a manifest is "
                      "checksummed), and the checkpoint cannot be trusted",
                      path, where, bad);
}

/* The manifest's own checks and what it says of the checkpoint. */
static ig_status manifest_info(const manifest *mf, ig_ckpt_info *info, ig_err *err) {
    memset(info, 0, sizeof *info);
    json_t *root = mf->root;
    const char *path = mf->path;
    json_t *fmt = json_object_get(root, "format"), *model = json_object_get(root, "model");
    json_t *layout = json_object_get(root, "layout");
    int64_t v = 0, x[5] = {0};
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), IG_CKPT_FORMAT) != 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"format\" must be \"%s\"", path,
                          IG_CKPT_FORMAT);
    ig_status st = get_int(root, "version", path, &v, err);
    if (st != IG_OK) return st;
    if (v != 1 && v != IG_CKPT_VERSION)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: checkpoint version %lld (this ingot reads versions 1 to %d)", path,
                          (long long)v, IG_CKPT_VERSION);
    info->version = (int)v;
    if (v == 1 && (st = v1_fields(root, path, err)) != IG_OK) return st;
    if (v >= 2) { /* the whole manifest is checksummed: an edited value is refused */
        uint64_t want = 0;
        if ((st = get_hex(root, "checksum", path, &want, err)) != IG_OK) return st;
        if (manifest_checksum(root) != want)
            return ig_err_set(err, IG_ERR_CHECKSUM,
                              "%s: its checksum does not match its contents: the manifest was "
                              "edited or is damaged, and the checkpoint cannot be trusted",
                              path);
    }
    if ((st = get_int(root, "step", path, &info->step, err)) != IG_OK) return st;
    if (info->step < 0) return ig_err_set(err, IG_ERR_FORMAT, "%s: \"step\" must be >= 0", path);
    /* a checkpoint directory's name says its step */
    const char *base = strrchr(mf->dir, '/');
    base = base ? base + 1 : mf->dir;
    int64_t named = 0;
    if (step_dir_name(base, &named) && named != info->step)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: \"step\" is %lld but the directory is %s: the manifest was edited "
                          "or the directory renamed",
                          path, (long long)info->step, base);
    if ((st = get_int(root, "consumed_samples", path, &v, err)) != IG_OK) return st;
    if (v < 0) return ig_err_set(err, IG_ERR_FORMAT, "%s: \"consumed_samples\" must be >= 0", path);
    info->loader.consumed_samples = (uint64_t)v;
    if ((st = get_hex(root, "index_key", path, &info->loader.index_key, err)) != IG_OK) return st;
    if (info->version >= 2) {
        if ((st = get_int(root, "train_samples", path, &v, err)) != IG_OK) return st;
        info->train_samples = v > 0 ? (uint64_t)v : 0;
        /* the run's global batch: recorded since issue 26 */
        if (json_object_get(root, "global_batch")) {
            if ((st = get_int(root, "global_batch", path, &v, err)) != IG_OK) return st;
            if (v < 1 || v > INT32_MAX)
                return ig_err_set(err, IG_ERR_FORMAT, "%s: \"global_batch\" %lld is out of range",
                                  path, (long long)v);
            info->global_batch = v;
        }
    }
    if ((st = get_int(root, "seed", path, &v, err)) != IG_OK) return st;
    info->seed = (uint64_t)v;
    if ((st = get_int(root, "eod_id", path, &v, err)) != IG_OK) return st;
    info->eod_id = (int32_t)v;
    if ((st = get_hex(root, "config_hash", path, &info->config_hash, err)) != IG_OK) return st;
    /* the family: version 1 knew only GPT-2 */
    const ig_family *fam = ig_family_find("gpt2");
    if (info->version >= 2) {
        const char *arch = json_string_value(json_object_get(root, "arch"));
        if (!arch) return ig_err_set(err, IG_ERR_FORMAT, "%s: \"arch\" must be a string", path);
        if (!(fam = ig_family_find(arch)))
            return ig_err_set(err, IG_ERR_UNSUPPORTED,
                              "%s: a model of family \"%s\", which this ingot does not know", path,
                              arch);
    }
    if (!json_is_object(model))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"model\" must be an object", path);
    static const char *const mk[] = {"n_layer", "n_head", "d_model", "seq_len", "vocab_size"};
    for (int i = 0; i < 5; i++) {
        if ((st = get_int(model, mk[i], path, &x[i], err)) != IG_OK) return st;
        /* a family that reads no tokens has no vocabulary (its check says whether it needs one) */
        int lo = i == 4 ? 0 : 1;
        if (x[i] < lo || x[i] > INT32_MAX)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: \"model\".%s %lld is out of range", path,
                              mk[i], (long long)x[i]);
    }
    ig_model_config *c = &info->model;
    c->arch = ig_family_index(fam);
    c->n_layer = (int)x[0], c->n_head = (int)x[1], c->d_model = (int)x[2];
    c->seq_len = (int)x[3], c->vocab_size = (int)x[4];
    if ((st = fam->from_json(model, c, path, err)) != IG_OK) return st;
    if ((st = fam->check(c, err)) != IG_OK) return ig_err_prefix(err, st, "%s", path);
    if (json_is_object(layout)) {
        int64_t tp = 1, pp = 1, dp = 1;
        get_int(layout, "tp", path, &tp, NULL);
        get_int(layout, "pp", path, &pp, NULL);
        get_int(layout, "dp", path, &dp, NULL);
        if (tp < 1 || pp < 1 || dp < 1 || tp > 65536 || pp > 65536 || dp > 1 << 24)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: \"layout\" tp %lld pp %lld dp %lld", path,
                              (long long)tp, (long long)pp, (long long)dp);
        info->tp = (int)tp, info->pp = (int)pp, info->dp = (int)dp;
    } else {
        info->tp = info->pp = info->dp = 1;
    }
    json_t *loss = json_object_get(root, "loss");
    info->loss = json_is_number(loss) ? json_number_value(loss) : 0;
    json_t *ema = json_object_get(root, "ema_decay");
    info->ema_decay = json_is_number(ema) ? json_number_value(ema) : 0;
    if (!(info->ema_decay >= 0 && info->ema_decay < 1))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"ema_decay\" %g is not in [0, 1)", path,
                          info->ema_decay);
    return IG_OK;
}

/* A file of a checkpoint against its manifest entry: present, of its size and (verify) xxh3. */
static ig_status check_file(const char *dir, const char *name, int64_t bytes, uint64_t sum,
                            int verify, ig_err *err) {
    char fp[8192];
    snprintf(fp, sizeof fp, "%s/%s", dir, name);
    struct stat sb;
    if (stat(fp, &sb) != 0)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s is missing: the checkpoint %s is incomplete or damaged", fp, dir);
    if ((int64_t)sb.st_size != bytes)
        return ig_err_set(err, IG_ERR_CHECKSUM,
                          "%s has %lld bytes but the manifest records %lld: the file was "
                          "truncated or replaced",
                          fp, (long long)sb.st_size, (long long)bytes);
    if (!verify) return IG_OK;
    uint64_t got = 0;
    ig_status st = ig_file_xxh3(fp, &got, err);
    if (st != IG_OK) return st;
    if (got != sum) {
        char a[17], b[17];
        hex(got, a);
        hex(sum, b);
        return ig_err_set(err, IG_ERR_CHECKSUM,
                          "%s: xxh3 is %s but the manifest records %s: the file was altered or is "
                          "corrupt",
                          fp, a, b);
    }
    return IG_OK;
}

/* Checks every file the manifest lists (with verify, or only the one named `only`, its xxh3);
 * *model_bytes (may be NULL) gets the bytes of the listed model-r* files. */
static ig_status check_files(const manifest *mf, int verify, const char *only,
                             uint64_t *model_bytes, ig_err *err) {
    if (model_bytes) *model_bytes = 0;
    json_t *files = json_object_get(mf->root, "files");
    if (!json_is_array(files) || json_array_size(files) == 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"files\" must be a non-empty array", mf->path);
    size_t i;
    json_t *f;
    int found = 0;
    json_array_foreach(files, i, f) {
        const char *name = json_string_value(json_object_get(f, "name"));
        int64_t bytes = 0;
        uint64_t sum = 0;
        if (!name || strchr(name, '/') || !*name)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: files[%zu].name must be a file name",
                              mf->path, i);
        if (only && strcmp(name, only) != 0) continue;
        found = 1;
        ig_status st = get_int(f, "bytes", mf->path, &bytes, err);
        if (st == IG_OK) st = get_hex(f, "xxh3", mf->path, &sum, err);
        if (st == IG_OK) st = check_file(mf->dir, name, bytes, sum, verify || only, err);
        if (st != IG_OK) return st;
        if (model_bytes && !strncmp(name, "model-r", 7)) *model_bytes += (uint64_t)bytes;
    }
    if (only && !found)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s does not list %s: the checkpoint was saved under another layout "
                          "than its manifest says, or is damaged",
                          mf->path, only);
    return IG_OK;
}

/* The model a manifest describes must be the one its files hold (fp32 parameters), or a manifest
 * naming a huge model would have it allocated before any file is read. */
static ig_status check_size(const manifest *mf, const ig_ckpt_info *info, uint64_t model_bytes,
                            ig_err *err) {
    uint64_t need = ig_model_num_params(&info->model) * sizeof(float);
    if (need <= model_bytes) return IG_OK;
    char a[32], b[32];
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s describes a model of %s of parameters, but its model files hold %s: the "
                      "manifest is not this checkpoint's",
                      mf->path, ig_format_bytes((double)need, a, sizeof a),
                      ig_format_bytes((double)model_bytes, b, sizeof b));
}

ig_status ig_ckpt_read_info(ig_ctx *ctx, const char *dir, int verify, ig_ckpt_info *info,
                            ig_err *err) {
    (void)ctx;
    memset(info, 0, sizeof *info);
    manifest mf;
    uint64_t model_bytes = 0;
    ig_status st = manifest_open(&mf, dir, err);
    if (st == IG_OK) st = manifest_info(&mf, info, err);
    if (st == IG_OK) st = check_files(&mf, verify, NULL, &model_bytes, err);
    if (st == IG_OK) st = check_size(&mf, info, model_bytes, err);
    manifest_close(&mf);
    return st;
}

/* ---- saving ---------------------------------------------------------------------------------- */

/* Removes every complete checkpoint but the newest keep, and what killed saves left. */
static void prune(const char *run_dir, const char *ckdir, int64_t keep) {
    ig_ckpt_remove_stale(run_dir);
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

/* Writes one safetensors shard of the model's tensors (names prefixed) from data (the model's
 * buffer layout). */
static ig_status write_tensors(ig_st_writer *w, const ig_model *m, const char *prefix,
                               const float *data, ig_err *err) {
    ig_status st = IG_OK;
    for (size_t i = 0; st == IG_OK && i < m->n_tensors; i++) {
        const ig_model_tensor *t = &m->tensors[i];
        char name[300];
        snprintf(name, sizeof name, "%s%s", prefix, t->name);
        uint64_t shape[2] = {(uint64_t)t->shape[0], (uint64_t)t->shape[1]};
        st = ig_st_writer_add(w, name, IG_ST_F32, shape, t->ndim, data + t->offset, err);
    }
    return st;
}

/* The optimizer's full states of this rank's part (n_params each: the AdamW moments, and the EMA
 * when kept), and its parameters (full[3]) when no rank keeps them whole (ZeRO-3, or the fp32
 * master weights of bf16 parameters under any ZeRO stage), on data-parallel rank 0: with ZeRO
 * every replica's pieces are gathered there and put back at their places in the buckets. Other
 * ranks get NULLs. */
static ig_status gather_states(ig_ctx *ctx, ig_model *m, ig_optim *o, const ig_layout *lo,
                               float *full[4], ig_err *err) {
    uint64_t n = ig_model_buffer_elems(m), nm = ig_optim_moment_elems(o);
    int root = lo->dp_g.rank == 0, ns = ig_optim_states(o);
    int want[4] = {ns > 0, ns > 1, ns > 2, ig_store_pieces_only(m->st)};
    float *mine = NULL;
    full[0] = full[1] = full[2] = full[3] = NULL;
    ig_status st = IG_OK;
    if (root)
        for (int k = 0; k < 4 && st == IG_OK; k++)
            if (want[k] &&
                !(full[k] = ig_alloc_aligned(ctx, (n ? n : 1) * sizeof(float), IG_ALIGN_KERNEL)))
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory for a checkpoint of %.1f MB",
                                (double)n * 4e-6);
    if (nm == n) {
        for (int k = 0; root && k < ns && st == IG_OK; k++)
            st = ig_optim_read_pieces(o, k, full[k], err);
    } else {
        if (!(mine = ig_alloc(ctx, (nm ? nm : 1) * sizeof(float))))
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (int k = 0; k < 4; k++) {
            if (!want[k]) continue;
            if (st == IG_OK)
                st = k == 3 ? ig_store_read_pieces(m->st, mine, err)
                            : ig_optim_read_pieces(o, k, mine, err);
            void *all = NULL;
            size_t got = 0;
            /* every rank takes part, even after a failure here (the others wait for it) */
            ig_err e2;
            ig_status gs = ig_comm_gather_bytes(lo->dp_g.comm, mine, nm * sizeof(float), 0, &all,
                                                &got, NULL, st == IG_OK ? err : &e2);
            if (st == IG_OK) st = gs;
            if (st == IG_OK && root) {
                const float *pieces = all;
                memset(full[k], 0, n * sizeof(float));
                for (size_t bi = 0; bi < ig_store_n_buckets(m->st); bi++) {
                    const ig_bucket *b = ig_store_bucket(m->st, bi);
                    uint64_t sz = b->n / (uint64_t)lo->dp_g.size;
                    for (int r = 0; r < lo->dp_g.size; r++)
                        memcpy(full[k] + b->off + (uint64_t)r * sz,
                               pieces + (uint64_t)r * nm + b->moff, sz * sizeof(float));
                }
            }
            ig_free(ctx, all);
        }
        ig_free(ctx, mine);
    }
    if (st != IG_OK)
        for (int k = 0; k < 4; k++) {
            ig_free(ctx, full[k]);
            full[k] = NULL;
        }
    return st;
}

static ig_status file_size(const char *dir, file_rec *r, ig_err *err) {
    char p[8192];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, r->name);
    if (stat(p, &sb) != 0) return ig_err_errno(err, errno, "cannot stat %s", p);
    r->bytes = (uint64_t)sb.st_size;
    return IG_OK;
}

/* Data-parallel rank 0 of each model-parallel rank writes its two files into dir. */
static ig_status write_part(ig_ctx *ctx, ig_model *m, const ig_layout *lo, const char *dir,
                            float *const states[4], file_rec out[2], ig_err *err) {
    uint64_t n = ig_model_buffer_elems(m);
    int r = lo->pp_rank * lo->tp + lo->tp_rank;
    /* the parameters: this rank's whole, or (ig_store_pieces_only) gathered with the states */
    float *host =
        states[3] ? NULL : ig_alloc_aligned(ctx, (n ? n : 1) * sizeof(float), IG_ALIGN_KERNEL);
    if (!host && !states[3])
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory for a checkpoint of %.1f MB",
                          (double)n * 4e-6);
    char p[8192];
    for (int k = 0; k < 2; k++) {
        memset(&out[k], 0, sizeof out[k]);
        shard_name(out[k].name, sizeof out[k].name, k, r);
        out[k].tp_rank = lo->tp_rank, out[k].pp_rank = lo->pp_rank;
    }
    ig_st_writer *w = NULL;
    ig_status st = host ? ig_model_read(m, IG_MODEL_PARAMS, host, err) : IG_OK;
    snprintf(p, sizeof p, "%s/%s", dir, out[0].name);
    if (st == IG_OK) st = ig_st_writer_create(&w, ctx, p, 0, err);
    if (st == IG_OK) st = write_tensors(w, m, "", host ? host : states[3], err);
    if (st == IG_OK) st = ig_st_writer_set_metadata(w, "format", "pt", err);
    if (st == IG_OK)
        st = ig_st_writer_commit(w, &out[0].xxh3, err);
    else
        ig_st_writer_abort(w);
    ig_free(ctx, host);
    /* the optimizer's state goes into one file: exp_avg.NAME and exp_avg_sq.NAME, as torch's
     * AdamW names them, then the EMA's ema.NAME when kept */
    w = NULL;
    snprintf(p, sizeof p, "%s/%s", dir, out[1].name);
    if (st == IG_OK) st = ig_st_writer_create(&w, ctx, p, 0, err);
    for (int k = 0; k < 3 && st == IG_OK; k++)
        if (states[k]) st = write_tensors(w, m, state_prefix[k], states[k], err);
    if (st == IG_OK)
        st = ig_st_writer_commit(w, &out[1].xxh3, err);
    else
        ig_st_writer_abort(w);
    for (int k = 0; st == IG_OK && k < 2; k++) st = file_size(dir, &out[k], err);
    return st;
}

/* Whether every rank of the layout got through (collective); a failed rank keeps its message. */
static ig_status everyone_ok(const ig_layout *lo, ig_status st, const char *what, ig_err *err) {
    return ig_all_ranks_ok(lo->world > 1 ? lo->world_g.comm : NULL, st, what, err);
}

/* The test hooks of a save at world rank `rank`, step `step`: IG_FAULT_STOP=R,S stops rank R
 * (SIGSTOP) as it starts saving step S; IG_FAULT_CKPT=R,S fails its write, as a full disk would;
 * IG_FAULT_CKPT_SLOW=R,S,SECONDS makes it that much longer, as a slow file system would. */
static int fault_at(const char *var, int rank, int64_t step, unsigned *secs) {
    const char *v = getenv(var);
    int r = -1;
    long long s = -1;
    unsigned t = 0;
    if (!v || sscanf(v, "%d,%lld,%u", &r, &s, &t) < 2 || r != rank || s != (long long)step)
        return 0;
    if (secs) *secs = t;
    return 1;
}

ig_status ig_ckpt_save_part(ig_ctx *ctx, ig_model *m, ig_optim *o, const ig_layout *lo,
                            const ig_ckpt_info *info, const ig_config *cfg, const char *run_dir,
                            int64_t keep, char *path, size_t cap, ig_err *err) {
    char ckdir[4096], tmp[4400] = "", final[4300], host[256];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", run_dir);
    snprintf(final, sizeof final, "%s/step_%08lld", ckdir, (long long)info->step);
    host_name(host, sizeof host);
    int lead = lo->rank == 0;
    ig_status st = IG_OK;
    if (fault_at("IG_FAULT_STOP", lo->rank, info->step, NULL)) raise(SIGSTOP);
    if (lead) {
        snprintf(tmp, sizeof tmp, "%s/.step_%08lld.tmp.%s.%ld", ckdir, (long long)info->step, host,
                 (long)getpid());
        if (mkdir(ckdir, 0755) != 0 && errno != EEXIST)
            st = ig_err_errno(err, errno, "cannot create %s", ckdir);
        remove_dir(tmp); /* a leftover of this very process id */
        if (st == IG_OK && mkdir(tmp, 0755) != 0)
            st = ig_err_errno(err, errno, "cannot create %s", tmp);
    }
    if ((st = everyone_ok(lo, st, "creating the checkpoint directory", err)) != IG_OK) return st;
    if (lo->world > 1 &&
        (st = ig_comm_bcast(lo->world_g.comm, tmp, sizeof tmp, IG_COMM_U8, 0, err)) != IG_OK)
        return st;
    float *states[4] = {NULL, NULL, NULL, NULL};
    file_rec mine[2];
    memset(mine, 0, sizeof mine);
    int writer = lo->dp_g.rank == 0;
    st = gather_states(ctx, m, o, lo, states, err);
    ig_pulse_busy(lo->pulse, 1); /* files of this rank's own: the others wait for it */
    if (st == IG_OK && writer) st = write_part(ctx, m, lo, tmp, states, mine, err);
    unsigned secs = 0;
    if (st == IG_OK && fault_at("IG_FAULT_CKPT", lo->rank, info->step, NULL))
        st = ig_err_set(err, IG_ERR_IO,
                        "cannot write step %lld into %s: injected fault "
                        "(IG_FAULT_CKPT)",
                        (long long)info->step, tmp);
    if (st == IG_OK && fault_at("IG_FAULT_CKPT_SLOW", lo->rank, info->step, &secs)) sleep(secs);
    ig_pulse_busy(lo->pulse, 0);
    for (int k = 0; k < 4; k++) ig_free(ctx, states[k]);
    st = everyone_ok(lo, st, "writing the checkpoint", err);
    /* the files' records, on rank 0 */
    file_rec *recs = NULL;
    size_t nrec = 0;
    if (st == IG_OK && lo->world > 1) {
        void *all = NULL;
        size_t len = 0;
        st = ig_comm_gather_bytes(lo->world_g.comm, mine, writer ? sizeof mine : 0, 0, &all, &len,
                                  NULL, err);
        recs = all, nrec = len / sizeof(file_rec);
    } else if (st == IG_OK) {
        recs = mine, nrec = 2;
    }
    if (lead) ig_pulse_busy(lo->pulse, 1);
    if (st == IG_OK && lead) {
        ig_ckpt_info saved = *info;
        saved.ema_decay = o ? ig_optim_ema_decay(o) : 0;
        st = write_manifest(tmp, &saved, cfg, lo, recs, nrec, err);
        if (st == IG_OK) st = fsync_dir(tmp, err);
        /* into place: a checkpoint of the same step (saved before a resume) is replaced only once
         * the new one is complete */
        if (st == IG_OK) {
            char old[4600] = "";
            struct stat sb;
            if (lstat(final, &sb) == 0 && !S_ISDIR(sb.st_mode))
                st = ig_err_set(err, IG_ERR_INVALID_ARG,
                                "%s is a %s where the checkpoint goes: ingot never replaces it; "
                                "move it away",
                                final, ig_file_kind(sb.st_mode));
            else if (lstat(final, &sb) == 0) {
                snprintf(old, sizeof old, "%s.old.%s.%ld", final, host, (long)getpid());
                if (rename(final, old) != 0)
                    st = ig_err_errno(err, errno, "cannot move the old %s aside", final);
            }
            if (st == IG_OK && rename(tmp, final) != 0)
                st = ig_err_errno(err, errno, "cannot rename %s to %s", tmp, final);
            if (st == IG_OK) st = fsync_dir(ckdir, err);
            if (old[0]) remove_dir(old);
        }
    }
    if (lead) ig_pulse_busy(lo->pulse, 0);
    if (recs != mine) ig_free(ctx, recs);
    st = everyone_ok(lo, st, "committing the checkpoint", err);
    if (st != IG_OK) {
        if (lead) remove_dir(tmp);
        return st;
    }
    if (path) snprintf(path, cap, "%s", final);
    if (lead) {
        ig_pulse_busy(lo->pulse, 1);
        prune(run_dir, ckdir, keep);
        ig_pulse_busy(lo->pulse, 0);
    }
    return IG_OK;
}

ig_status ig_ckpt_save(ig_ctx *ctx, ig_model *m, ig_optimizer *o, const ig_ckpt_info *info,
                       const ig_config *cfg, const char *run_dir, int64_t keep, char *path,
                       size_t cap, ig_err *err) {
    if (m->part.tp != 1 || !m->part.first || !m->part.last)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a model part is saved by every rank of its layout together");
    if (!o)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a checkpoint holds the optimizer's state: give the model's optimizer");
    ig_ckpt_info i2 = *info;
    i2.model = m->cfg;
    return ig_ckpt_save_part(ctx, m, o, ig_optim_layout(o), &i2, cfg, run_dir, keep, path, cap,
                             err);
}

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
    /* a run directory that has not written a checkpoint yet (not a model directory either) */
    char metrics[4200], cfg[4200], st[4200];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", path);
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    snprintf(st, sizeof st, "%s/model.safetensors", path);
    if (ig_file_exists(metrics) && !ig_file_exists(cfg) && !ig_file_exists(st))
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s is a run directory with no checkpoint yet (the first is written "
                          "after ckpt.every steps, or at the end of the run)",
                          path);
    snprintf(out, cap, "%s", path);
    return IG_OK;
}

/* ---- loading: any layout into any part ------------------------------------------------------- */

/* The layout a checkpoint was saved under: tp, pp and the first layer of each stage. */
typedef struct saved_layout {
    int tp, pp;
    int *stage_layers; /* [pp + 1] */
} saved_layout;

static ig_status read_layout(ig_ctx *ctx, const manifest *mf, const ig_ckpt_info *info,
                             saved_layout *ly, ig_err *err) {
    ly->tp = info->tp;
    ly->pp = info->pp;
    ly->stage_layers = ig_calloc(ctx, (size_t)ly->pp + 1, sizeof(int));
    if (!ly->stage_layers) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    json_t *stages = json_object_get(json_object_get(mf->root, "layout"), "stage_layers");
    int L = info->model.n_layer;
    if (json_is_array(stages) && json_array_size(stages) == (size_t)ly->pp + 1) {
        for (int i = 0; i <= ly->pp; i++)
            ly->stage_layers[i] = (int)json_integer_value(json_array_get(stages, (size_t)i));
    } else if (L % ly->pp == 0) {
        for (int i = 0; i <= ly->pp; i++) ly->stage_layers[i] = i * (L / ly->pp);
    } else {
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"layout\" lacks the stages' layers", mf->path);
    }
    for (int i = 0; i < ly->pp; i++)
        if (ly->stage_layers[i] >= ly->stage_layers[i + 1] || ly->stage_layers[0] != 0 ||
            ly->stage_layers[ly->pp] != L)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: \"layout\".stage_layers is not a split of %d layers", mf->path,
                              L);
    return IG_OK;
}

/* Version 2: the manifest's record of tensor t (its global shape and placement) must be t's. */
static ig_status check_listed(const manifest *mf, const ig_model_tensor *t, ig_err *err) {
    json_t *arr = json_object_get(mf->root, "tensors"), *x;
    size_t i;
    json_array_foreach(arr, i, x) {
        const char *name = json_string_value(json_object_get(x, "name"));
        if (!name || strcmp(name, t->name) != 0) continue;
        json_t *shape = json_object_get(x, "shape");
        const char *place = json_string_value(json_object_get(x, "place"));
        int ok = json_is_array(shape) && json_array_size(shape) == (size_t)t->ndim && place &&
                 strcmp(place, place_names[t->place]) == 0;
        for (int d = 0; ok && d < t->ndim; d++)
            ok = json_integer_value(json_array_get(shape, (size_t)d)) == t->global_shape[d];
        if (!ok)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: tensor '%s' is recorded with another shape or placement than "
                              "the model's",
                              mf->path, t->name);
        return IG_OK;
    }
    return ig_err_set(err, IG_ERR_FORMAT, "%s does not list tensor '%s'", mf->path, t->name);
}

typedef struct open_files {
    ig_ctx *ctx;
    const manifest *mf;
    int n;
    ig_st_file **f; /* [2][tp * pp] */
} open_files;

/* The saved shard (optim: the moments) of model-parallel rank r, opened once and verified (size
 * and xxh3 against the manifest) the first time. */
static ig_status shard_file(open_files *of, int optim, int r, ig_st_file **out, ig_err *err) {
    size_t k = (size_t)optim * (size_t)of->n + (size_t)r;
    if (of->f[k]) {
        *out = of->f[k];
        return IG_OK;
    }
    char name[64], path[8192];
    shard_name(name, sizeof name, optim, r);
    snprintf(path, sizeof path, "%s/%s", of->mf->dir, name);
    ig_status st = check_files(of->mf, 1, name, NULL, err);
    if (st == IG_OK) st = ig_st_file_open(&of->f[k], of->ctx, path, err);
    *out = of->f[k];
    return st;
}

typedef struct copy_run {
    float *dst;
    const float *src;
    int to_global; /* src (a part) -> dst (the whole), else the reverse */
} copy_run;

static void copy_one_run(void *user, uint64_t global, uint64_t local, uint64_t n) {
    copy_run *c = user;
    if (c->to_global)
        memcpy(c->dst + global, c->src + local, n * sizeof(float));
    else
        memcpy(c->dst + local, c->src + global, n * sizeof(float));
}

/* Tensor t of the part (prefix "" for the parameters, "exp_avg." ...) from the saved shards into
 * host + t->offset: the whole tensor is assembled in whole[] from the saved parts, then this
 * part's runs taken out. */
static ig_status load_tensor(open_files *of, const saved_layout *ly, const ig_model_tensor *t,
                             int optim, const char *prefix, float *whole, float *part_buf,
                             float *host, ig_err *err) {
    int stage = ig_tensor_stage(t, ly->stage_layers, ly->pp);
    if (stage < 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: no stage of the saved layout holds %s",
                          of->mf->dir, t->name);
    char name[300];
    snprintf(name, sizeof name, "%s%s", prefix, t->name);
    int parts = t->split_dim >= 0 ? ly->tp : 1;
    for (int q = 0; q < parts; q++) {
        ig_st_file *f = NULL;
        ig_status st = shard_file(of, optim, stage * ly->tp + q, &f, err);
        if (st != IG_OK) return st;
        /* the saved part's shape */
        ig_model_tensor sv = *t;
        sv.parts = parts, sv.part = q;
        sv.shape[0] = sv.global_shape[0], sv.shape[1] = sv.global_shape[1];
        if (sv.split_dim >= 0) sv.shape[sv.split_dim] /= parts;
        uint64_t numel = (uint64_t)sv.shape[0] * (uint64_t)sv.shape[1];
        const ig_st_tensor *x = ig_st_file_find(f, name);
        char file[64];
        shard_name(file, sizeof file, optim, stage * ly->tp + q);
        if (!x)
            return ig_err_set(err, IG_ERR_FORMAT, "%s/%s: tensor '%s' is missing", of->mf->dir,
                              file, name);
        const uint64_t *shape = ig_st_tensor_shape(x);
        if (ig_st_tensor_ndim(x) != t->ndim || shape[0] != (uint64_t)sv.shape[0] ||
            (t->ndim > 1 && shape[1] != (uint64_t)sv.shape[1]))
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s/%s: tensor '%s' is not the [%lld, %lld] part the layout says",
                              of->mf->dir, file, name, (long long)sv.shape[0],
                              (long long)sv.shape[1]);
        if ((st = ig_st_tensor_to_f32(x, part_buf, numel, err)) != IG_OK) return st;
        copy_run c = {whole, part_buf, 1};
        ig_tensor_runs(&sv, copy_one_run, &c);
    }
    copy_run c = {host + t->offset, whole, 0};
    ig_tensor_runs(t, copy_one_run, &c);
    return IG_OK;
}

static ig_status load_all(ig_ctx *ctx, const manifest *mf, const ig_ckpt_info *info, ig_model *m,
                          ig_optim *o, ig_weights weights, ig_err *err) {
    const ig_model_config *have = &m->cfg, *want = &info->model;
    const char *d = ig_model_config_differs(have, want);
    if (*d) {
        char a[256], b[256];
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s holds another model than the configuration's (%s differs): %s; the "
                          "configuration asks for %s",
                          mf->dir, d, ig_model_describe(want, a, sizeof a),
                          ig_model_describe(have, b, sizeof b));
    }
    ig_status st = IG_OK;
    for (size_t i = 0; info->version >= 2 && st == IG_OK && i < m->n_tensors; i++)
        st = check_listed(mf, &m->tensors[i], err);
    if (st != IG_OK) return st;
    saved_layout ly = {0};
    if ((st = read_layout(ctx, mf, info, &ly, err)) != IG_OK) {
        ig_free(ctx, ly.stage_layers);
        return st;
    }
    open_files of = {.ctx = ctx, .mf = mf, .n = ly.tp * ly.pp};
    of.f = ig_calloc(ctx, 2 * (size_t)of.n, sizeof *of.f);
    /* the largest tensor, whole and as a saved part */
    uint64_t big = 1;
    for (size_t i = 0; i < m->n_tensors; i++) {
        uint64_t g =
            (uint64_t)m->tensors[i].global_shape[0] * (uint64_t)m->tensors[i].global_shape[1];
        if (g > big) big = g;
    }
    uint64_t n = ig_model_buffer_elems(m);
    float *whole = ig_alloc_aligned(ctx, big * sizeof(float), IG_ALIGN_KERNEL);
    float *part_buf = ig_alloc_aligned(ctx, big * sizeof(float), IG_ALIGN_KERNEL);
    float *host = ig_calloc(ctx, n ? n : 1, sizeof(float));
    if (!of.f || !whole || !part_buf || !host)
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", mf->dir);
    /* the parameters, or the EMA of them (in the optim shards) */
    int ema = weights == IG_WEIGHTS_EMA || (weights == IG_WEIGHTS_DEFAULT && info->ema_decay > 0);
    if (st == IG_OK && ema && !(info->ema_decay > 0))
        st = ig_err_set(err, IG_ERR_NOT_FOUND,
                        "%s holds no EMA of the weights (its run had no ema.decay): take its "
                        "weights as they are (--weights raw)",
                        mf->dir);
    for (size_t i = 0; st == IG_OK && i < m->n_tensors; i++)
        st = load_tensor(&of, &ly, &m->tensors[i], ema, ema ? "ema." : "", whole, part_buf, host,
                         err);
    if (st == IG_OK) st = ig_model_write(m, IG_MODEL_PARAMS, host, err);
    /* the optimizer's states: the moments, and the EMA when both the run and the checkpoint keep
     * one (a run that keeps one and a checkpoint without: the trainer starts it from the
     * weights) */
    int states = o ? (ig_optim_states(o) == 3 && info->ema_decay > 0 ? 3 : 2) : 0;
    for (int k = 0; st == IG_OK && k < states; k++) {
        const char *prefix = state_prefix[k];
        for (size_t i = 0; st == IG_OK && i < m->n_tensors; i++)
            st = load_tensor(&of, &ly, &m->tensors[i], 1, prefix, whole, part_buf, host, err);
        if (st != IG_OK) break;
        uint64_t nm = ig_optim_moment_elems(o);
        if (nm != n) { /* ZeRO: this rank's pieces only */
            int dp = m->part.dp, r = m->part.dp_rank;
            float *pieces = ig_alloc(ctx, (nm ? nm : 1) * sizeof(float));
            if (!pieces) {
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", mf->dir);
                break;
            }
            for (size_t bi = 0; bi < ig_store_n_buckets(m->st); bi++) {
                const ig_bucket *b = ig_store_bucket(m->st, bi);
                uint64_t sz = b->n / (uint64_t)dp;
                memcpy(pieces + b->moff, host + b->off + (uint64_t)r * sz, sz * sizeof(float));
            }
            st = ig_optim_write_pieces(o, k, pieces, err);
            ig_free(ctx, pieces);
        } else {
            st = ig_optim_write_pieces(o, k, host, err);
        }
    }
    for (int i = 0; of.f && i < 2 * of.n; i++) ig_st_file_free(of.f[i]);
    ig_free(ctx, of.f);
    ig_free(ctx, whole);
    ig_free(ctx, part_buf);
    ig_free(ctx, host);
    ig_free(ctx, ly.stage_layers);
    return st;
}

ig_status ig_ckpt_load(ig_ctx *ctx, const char *dir, ig_model *m, ig_optimizer *o,
                       ig_ckpt_info *info, ig_err *err) {
    return ig_ckpt_load_weights(ctx, dir, m, o, o ? IG_WEIGHTS_RAW : IG_WEIGHTS_DEFAULT, info, err);
}

ig_status ig_ckpt_load_weights(ig_ctx *ctx, const char *dir, ig_model *m, ig_optim *o,
                               ig_weights weights, ig_ckpt_info *info, ig_err *err) {
    manifest mf;
    uint64_t model_bytes = 0;
    ig_status st = manifest_open(&mf, dir, err);
    if (st == IG_OK) st = manifest_info(&mf, info, err);
    if (st == IG_OK) st = check_files(&mf, 0, NULL, &model_bytes, err);
    if (st == IG_OK) st = check_size(&mf, info, model_bytes, err);
    if (st == IG_OK) st = load_all(ctx, &mf, info, m, o, weights, err);
    manifest_close(&mf);
    return st;
}
