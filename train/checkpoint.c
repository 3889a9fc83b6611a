/* checkpoint.c - checkpoints (DESIGN 3.3): RUN_DIR/ckpt/step_NNNNNNNN/ holds manifest.json (the
 * configuration, the layout, the step, the loader's consumed samples, the seed, and every file
 * with its size and xxh3) and one pair of safetensors shards per model-parallel rank (tp x pp):
 * model-rNNNNN (the parameters of its part, under their global names) and optim-rNNNNN (the
 * AdamW moments, exp_avg.NAME and exp_avg_sq.NAME). The data-parallel replicas hold the same
 * parameters, so replica 0 writes them; with ZeRO the moments' pieces are gathered on it first.
 *
 * A checkpoint is written under a temporary directory name, fsync'd and renamed when every rank
 * has written its files, so a run killed (or failing on any rank) while saving leaves the
 * previous checkpoint the latest one; only the newest ckpt.keep are kept. Loading reads any
 * layout into any part: each tensor is assembled whole from the parts the saving layout cut it
 * into, and this rank's part of it taken out, so a run resumes under another tp, pp, dp or ZeRO
 * stage, and `ckpt export` merges. Every file a rank reads is verified (size and xxh3) first: a
 * truncated, altered or missing file is refused with its name, never loaded.
 */
#include "gpt_internal.h"
#include "train_internal.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"

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
    json_t *root = json_pack(
        "{s:s,s:i,s:I,s:I,s:s,s:f,s:o,s:I,s:I,s:{s:i,s:i,s:i,s:i,s:b,s:o},s:s,s:s,s:o,s:s}",
        "format", IG_CKPT_FORMAT, "version", IG_CKPT_VERSION, "step", (json_int_t)info->step,
        "consumed_samples", (json_int_t)info->loader.consumed_samples, "index_key", k, "loss",
        isfinite(info->loss) ? info->loss : 0.0, "model", model_json(&info->model), "seed",
        (json_int_t)info->seed, "eod_id", (json_int_t)info->eod_id, "layout", "tp", lo->tp, "pp",
        lo->pp, "dp", lo->dp, "zero", lo->zero, "sp", lo->sp, "stage_layers", stages, "config_hash",
        ch, "config", config_text ? config_text : "", "files", arr, "tool_version",
        "ingot " IG_VERSION_STRING);
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

/* The full AdamW moments of this rank's part (n_params each), on data-parallel rank 0: with ZeRO
 * every replica's pieces are gathered there and put back at their places in the buckets. Other
 * ranks get NULLs. */
static ig_status gather_moments(ig_ctx *ctx, ig_gpt *m, const ig_layout *lo, float **mo, float **vo,
                                ig_err *err) {
    *mo = *vo = NULL;
    uint64_t n = m->n_params;
    int root = lo->dp_rank == 0;
    float *full[2] = {NULL, NULL}, *mine = NULL;
    ig_status st = IG_OK;
    if (root)
        for (int k = 0; k < 2 && st == IG_OK; k++)
            if (!(full[k] = ig_alloc_aligned(ctx, n * sizeof(float), IG_ALIGN_KERNEL)))
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory for a checkpoint of %.1f MB",
                                (double)n * 4e-6);
    if (lo->zero == 0 || lo->dp == 1) {
        if (root && st == IG_OK) st = ig_gpt_read(m, IG_GPT_ADAM_M, full[0], err);
        if (root && st == IG_OK) st = ig_gpt_read(m, IG_GPT_ADAM_V, full[1], err);
    } else {
        uint64_t nm = m->n_moments;
        if (!(mine = ig_alloc(ctx, nm * sizeof(float))))
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (int k = 0; k < 2; k++) {
            if (st == IG_OK) st = ig_gpt_read(m, k ? IG_GPT_ADAM_V : IG_GPT_ADAM_M, mine, err);
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
                for (size_t bi = 0; bi < m->n_buckets; bi++) {
                    const ig_gpt_bucket *b = &m->buckets[bi];
                    uint64_t sz = b->n / (uint64_t)lo->dp;
                    for (int r = 0; r < lo->dp; r++)
                        memcpy(full[k] + b->off + (uint64_t)r * sz,
                               pieces + (uint64_t)r * nm + b->moff, sz * sizeof(float));
                }
            }
            ig_free(ctx, all);
        }
        ig_free(ctx, mine);
    }
    if (st != IG_OK) {
        ig_free(ctx, full[0]);
        ig_free(ctx, full[1]);
        return st;
    }
    *mo = full[0], *vo = full[1];
    return IG_OK;
}

/* Data-parallel rank 0 of each model-parallel rank writes its two files into dir. */
static ig_status write_part(ig_ctx *ctx, ig_gpt *m, const ig_layout *lo, const char *dir,
                            const float *mom, const float *var, file_rec out[2], ig_err *err) {
    uint64_t n = m->n_params;
    int r = lo->pp_rank * lo->tp + lo->tp_rank;
    float *host = ig_alloc_aligned(ctx, n * sizeof(float), IG_ALIGN_KERNEL);
    if (!host)
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory for a checkpoint of %.1f MB",
                          (double)n * 4e-6);
    char p[8192];
    for (int k = 0; k < 2; k++) {
        memset(&out[k], 0, sizeof out[k]);
        shard_name(out[k].name, sizeof out[k].name, k, r);
        out[k].tp_rank = lo->tp_rank, out[k].pp_rank = lo->pp_rank;
    }
    ig_status st = ig_gpt_read(m, IG_GPT_PARAMS, host, err);
    if (st == IG_OK) {
        snprintf(p, sizeof p, "%s/%s", dir, out[0].name);
        st = write_shard(ctx, m, p, "", host, &out[0].xxh3, err);
    }
    ig_free(ctx, host);
    /* the moments go into one file: exp_avg.NAME and exp_avg_sq.NAME, as torch's AdamW names
     * them, one after the other */
    ig_st_writer *w = NULL;
    snprintf(p, sizeof p, "%s/%s", dir, out[1].name);
    if (st == IG_OK) st = ig_st_writer_create(&w, ctx, p, 0, err);
    for (int which = 0; st == IG_OK && which < 2; which++)
        for (size_t i = 0; st == IG_OK && i < ig_gpt_num_tensors(m); i++) {
            const ig_gpt_tensor *t = ig_gpt_tensor_at(m, i);
            char name[300];
            snprintf(name, sizeof name, "%s.%s", which ? "exp_avg_sq" : "exp_avg", t->name);
            uint64_t shape[2] = {(uint64_t)t->shape[0], (uint64_t)t->shape[1]};
            st = ig_st_writer_add(w, name, IG_ST_F32, shape, t->ndim,
                                  (which ? var : mom) + t->offset, err);
        }
    if (st == IG_OK)
        st = ig_st_writer_commit(w, &out[1].xxh3, err);
    else
        ig_st_writer_abort(w);
    for (int k = 0; st == IG_OK && k < 2; k++) {
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, out[k].name);
        if (stat(p, &sb) != 0) st = ig_err_errno(err, errno, "cannot stat %s", p);
        out[k].bytes = (uint64_t)sb.st_size;
    }
    return st;
}

/* Whether every rank of the layout got through (collective); a failed rank keeps its message. */
static ig_status everyone_ok(const ig_layout *lo, ig_status st, const char *what, ig_err *err) {
    if (lo->world == 1) return st;
    int all = 0;
    ig_err e2;
    ig_status cs = ig_comm_all_ok(lo->world_g.comm, st == IG_OK, &all, st == IG_OK ? err : &e2);
    if (st != IG_OK) return st;
    if (cs != IG_OK) return cs;
    return all ? IG_OK
               : ig_err_set(err, IG_ERR_IO, "%s failed on another rank (its message says why)",
                            what);
}

ig_status ig_ckpt_save_part(ig_ctx *ctx, ig_gpt *m, const ig_layout *lo, const ig_ckpt_info *info,
                            const ig_config *cfg, const char *run_dir, int64_t keep, char *path,
                            size_t cap, ig_err *err) {
    char ckdir[4096], tmp[4300] = "", final[4300];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", run_dir);
    snprintf(final, sizeof final, "%s/step_%08lld", ckdir, (long long)info->step);
    int lead = lo->rank == 0;
    ig_status st = IG_OK;
    /* a test hook: IG_FAULT_STOP=R,S stops world rank R (SIGSTOP) as it starts saving step S, while
     * the others wait for it in the checkpoint's collectives (between two steps) */
    const char *stop = getenv("IG_FAULT_STOP");
    int sr = -1;
    long long ss = -1;
    if (stop && sscanf(stop, "%d,%lld", &sr, &ss) == 2 && sr == lo->rank &&
        ss == (long long)info->step)
        raise(SIGSTOP);
    if (lead) {
        snprintf(tmp, sizeof tmp, "%s/.step_%08lld.tmp.%ld", ckdir, (long long)info->step,
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
    float *mom = NULL, *var = NULL;
    file_rec mine[2];
    memset(mine, 0, sizeof mine);
    int writer = lo->dp_rank == 0;
    st = gather_moments(ctx, m, lo, &mom, &var, err);
    ig_progress_busy(1); /* files of this rank's own: the others wait for it */
    if (st == IG_OK && writer) st = write_part(ctx, m, lo, tmp, mom, var, mine, err);
    /* test hooks for world rank R at step S: IG_FAULT_CKPT=R,S fails here, as a full disk would;
     * IG_FAULT_CKPT_SLOW=R,S,SECONDS writes that much longer, as a slow file system would */
    const char *fault = getenv("IG_FAULT_CKPT");
    int fr = -1;
    long long fs = -1;
    if (st == IG_OK && fault && sscanf(fault, "%d,%lld", &fr, &fs) == 2 && fr == lo->rank &&
        fs == (long long)info->step)
        st = ig_err_set(err, IG_ERR_IO,
                        "cannot write step %lld into %s: injected fault "
                        "(IG_FAULT_CKPT)",
                        fs, tmp);
    const char *slow = getenv("IG_FAULT_CKPT_SLOW");
    unsigned secs = 0;
    if (st == IG_OK && slow && sscanf(slow, "%d,%lld,%u", &fr, &fs, &secs) == 3 && fr == lo->rank &&
        fs == (long long)info->step)
        sleep(secs);
    ig_progress_busy(0);
    ig_free(ctx, mom);
    ig_free(ctx, var);
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
    if (lead) ig_progress_busy(1);
    if (st == IG_OK && lead) {
        st = write_manifest(tmp, info, cfg, lo, recs, nrec, err);
        if (st == IG_OK) st = fsync_dir(tmp, err);
        /* into place: a checkpoint of the same step (saved before a resume) is replaced only once
         * the new one is complete */
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
    }
    if (lead) ig_progress_busy(0);
    if (recs != mine) ig_free(ctx, recs);
    st = everyone_ok(lo, st, "committing the checkpoint", err);
    if (st != IG_OK) {
        if (lead) remove_dir(tmp);
        return st;
    }
    if (path) snprintf(path, cap, "%s", final);
    if (lead) {
        ig_progress_busy(1);
        prune(ckdir, keep);
        ig_progress_busy(0);
    }
    return IG_OK;
}

ig_status ig_ckpt_save(ig_ctx *ctx, ig_gpt *m, const ig_ckpt_info *info, const ig_config *cfg,
                       const char *run_dir, int64_t keep, char *path, size_t cap, ig_err *err) {
    int stages[2] = {0, ig_gpt_shape(m)->n_layer};
    ig_layout one = {.world = 1, .tp = 1, .pp = 1, .dp = 1, .stage_layers = stages};
    if (m->part.tp != 1 || !m->part.first || !m->part.last)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a model part is saved by every rank of its layout together");
    return ig_ckpt_save_part(ctx, m, &one, info, cfg, run_dir, keep, path, cap, err);
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

/* Verifies one file the manifest lists (size and xxh3); a file it does not list is refused. */
static ig_status verify_listed(const char *dir, const char *name, ig_err *err) {
    char path[8192];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root)
        return ig_err_set(err, IG_ERR_FORMAT, "%s:%d:%d: malformed manifest: %s", path, je.line,
                          je.column, je.text);
    ig_status st = ig_err_set(err, IG_ERR_NOT_FOUND,
                              "%s does not list %s: the checkpoint was saved under another "
                              "layout than its manifest says, or is damaged",
                              path, name);
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(root, "files"), i, f) {
        const char *n = json_string_value(json_object_get(f, "name"));
        if (!n || strcmp(n, name) != 0) continue;
        int64_t bytes = 0;
        uint64_t sum = 0;
        st = get_int(f, "bytes", path, &bytes, err);
        if (st == IG_OK) st = get_hex(f, "xxh3", path, &sum, err);
        if (st == IG_OK) st = check_file(dir, name, bytes, sum, 1, err);
        break;
    }
    json_decref(root);
    return st;
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
        st = check_file(dir, name, bytes, sum, verify, err);
    }
    json_decref(root);
    return st;
}

/* ---- loading: any layout into any part --------------------------------------------------------
 */

/* The layout a checkpoint was saved under: tp, pp and the first layer of each stage. */
typedef struct saved_layout {
    int tp, pp;
    int *stage_layers; /* [pp + 1] */
} saved_layout;

static ig_status read_layout(ig_ctx *ctx, const char *dir, const ig_ckpt_info *info,
                             saved_layout *ly, ig_err *err) {
    ly->tp = info->tp > 0 ? info->tp : 1;
    ly->pp = info->pp > 0 ? info->pp : 1;
    ly->stage_layers = ig_calloc(ctx, (size_t)ly->pp + 1, sizeof(int));
    if (!ly->stage_layers) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    char path[8192];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    json_t *stages = json_object_get(json_object_get(root, "layout"), "stage_layers");
    int L = info->model.n_layer;
    ig_status st = IG_OK;
    if (json_is_array(stages) && json_array_size(stages) == (size_t)ly->pp + 1) {
        for (int i = 0; i <= ly->pp; i++)
            ly->stage_layers[i] = (int)json_integer_value(json_array_get(stages, (size_t)i));
    } else if (L % ly->pp == 0) {
        for (int i = 0; i <= ly->pp; i++) ly->stage_layers[i] = i * (L / ly->pp);
    } else {
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: \"layout\" lacks the stages' layers", path);
    }
    for (int i = 0; st == IG_OK && i < ly->pp; i++)
        if (ly->stage_layers[i] >= ly->stage_layers[i + 1] || ly->stage_layers[0] != 0 ||
            ly->stage_layers[ly->pp] != L)
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: \"layout\".stage_layers is not a split of "
                            "%d layers",
                            path, L);
    json_decref(root);
    return st;
}

/* The stage of the saved layout that holds tensor NAME. */
static int saved_stage(const saved_layout *ly, const char *name) {
    int l = -1;
    if (sscanf(name, "transformer.h.%d.", &l) == 1) {
        for (int s = 0; s < ly->pp; s++)
            if (l >= ly->stage_layers[s] && l < ly->stage_layers[s + 1]) return s;
        return -1;
    }
    if (strncmp(name, "transformer.ln_f.", 17) == 0) return ly->pp - 1;
    return 0; /* wte, wpe: the first stage's */
}

typedef struct open_files {
    ig_ctx *ctx;
    const char *dir;
    int n;
    ig_st_file **f; /* [2][tp * pp] */
} open_files;

/* The saved shard (optim: the moments) of model-parallel rank r, opened once and verified (size
 * and xxh3 against the manifest) the first time. */
static ig_status shard_file(open_files *of, const ig_ckpt_info *info, int optim, int r,
                            ig_st_file **out, ig_err *err) {
    size_t k = (size_t)optim * (size_t)of->n + (size_t)r;
    if (of->f[k]) {
        *out = of->f[k];
        return IG_OK;
    }
    (void)info;
    char name[64], path[8192];
    shard_name(name, sizeof name, optim, r);
    snprintf(path, sizeof path, "%s/%s", of->dir, name);
    ig_status st = verify_listed(of->dir, name, err);
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
static ig_status load_tensor(open_files *of, const ig_ckpt_info *info, const saved_layout *ly,
                             const ig_gpt_tensor *t, int optim, const char *prefix, float *whole,
                             float *part_buf, float *host, ig_err *err) {
    int stage = saved_stage(ly, t->name);
    if (stage < 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: no stage of the saved layout holds %s", of->dir,
                          t->name);
    char name[300];
    snprintf(name, sizeof name, "%s%s", prefix, t->name);
    int parts = t->split_dim >= 0 ? ly->tp : 1;
    for (int q = 0; q < parts; q++) {
        ig_st_file *f = NULL;
        ig_status st = shard_file(of, info, optim, stage * ly->tp + q, &f, err);
        if (st != IG_OK) return st;
        /* the saved part's shape */
        ig_gpt_tensor sv = *t;
        sv.parts = parts, sv.part = q;
        sv.shape[0] = sv.global_shape[0], sv.shape[1] = sv.global_shape[1];
        if (sv.split_dim >= 0) sv.shape[sv.split_dim] /= parts;
        uint64_t numel = (uint64_t)sv.shape[0] * (uint64_t)sv.shape[1];
        const ig_st_tensor *x = ig_st_file_find(f, name);
        char file[64];
        shard_name(file, sizeof file, optim, stage * ly->tp + q);
        if (!x)
            return ig_err_set(err, IG_ERR_FORMAT, "%s/%s: tensor '%s' is missing", of->dir, file,
                              name);
        const uint64_t *shape = ig_st_tensor_shape(x);
        if (ig_st_tensor_ndim(x) != t->ndim || shape[0] != (uint64_t)sv.shape[0] ||
            (t->ndim > 1 && shape[1] != (uint64_t)sv.shape[1]))
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s/%s: tensor '%s' is not the [%lld, %lld] part the layout says",
                              of->dir, file, name, (long long)sv.shape[0], (long long)sv.shape[1]);
        if ((st = ig_st_tensor_to_f32(x, part_buf, numel, err)) != IG_OK) return st;
        copy_run c = {whole, part_buf, 1};
        ig_gpt_tensor_runs(&sv, copy_one_run, &c);
    }
    copy_run c = {host + t->offset, whole, 0};
    ig_gpt_tensor_runs(t, copy_one_run, &c);
    return IG_OK;
}

ig_status ig_ckpt_load(ig_ctx *ctx, const char *dir, ig_gpt *m, int optimizer, ig_ckpt_info *info,
                       ig_err *err) {
    ig_status st = ig_ckpt_read_info(ctx, dir, 0, info, err);
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
    saved_layout ly = {0};
    if ((st = read_layout(ctx, dir, info, &ly, err)) != IG_OK) {
        ig_free(ctx, ly.stage_layers);
        return st;
    }
    open_files of = {.ctx = ctx, .dir = dir, .n = ly.tp * ly.pp};
    of.f = ig_calloc(ctx, 2 * (size_t)of.n, sizeof *of.f);
    /* the largest tensor, whole and as a saved part */
    uint64_t big = 0;
    for (size_t i = 0; i < m->n_tensors; i++) {
        uint64_t g =
            (uint64_t)m->tensors[i].global_shape[0] * (uint64_t)m->tensors[i].global_shape[1];
        if (g > big) big = g;
    }
    uint64_t n = m->n_params;
    float *whole = ig_alloc_aligned(ctx, big * sizeof(float), IG_ALIGN_KERNEL);
    float *part_buf = ig_alloc_aligned(ctx, big * sizeof(float), IG_ALIGN_KERNEL);
    float *host = ig_calloc(ctx, n ? n : 1, sizeof(float));
    if (!of.f || !whole || !part_buf || !host)
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", dir);
    for (size_t i = 0; st == IG_OK && i < m->n_tensors; i++)
        st = load_tensor(&of, info, &ly, &m->tensors[i], 0, "", whole, part_buf, host, err);
    if (st == IG_OK) st = ig_gpt_write(m, IG_GPT_PARAMS, host, err);
    for (int k = 0; optimizer && st == IG_OK && k < 2; k++) {
        const char *prefix = k ? "exp_avg_sq." : "exp_avg.";
        for (size_t i = 0; st == IG_OK && i < m->n_tensors; i++)
            st = load_tensor(&of, info, &ly, &m->tensors[i], 1, prefix, whole, part_buf, host, err);
        if (st != IG_OK) break;
        if (m->n_moments != m->n_params) { /* ZeRO: this rank's pieces only */
            int dp = m->part.dp, r = m->part.dp_rank;
            float *pieces = ig_alloc(ctx, m->n_moments * sizeof(float));
            if (!pieces) {
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory loading %s", dir);
                break;
            }
            for (size_t bi = 0; bi < m->n_buckets; bi++) {
                const ig_gpt_bucket *b = &m->buckets[bi];
                uint64_t sz = b->n / (uint64_t)dp;
                memcpy(pieces + b->moff, host + b->off + (uint64_t)r * sz, sz * sizeof(float));
            }
            st = ig_gpt_write(m, k ? IG_GPT_ADAM_V : IG_GPT_ADAM_M, pieces, err);
            ig_free(ctx, pieces);
        } else {
            st = ig_gpt_write(m, k ? IG_GPT_ADAM_V : IG_GPT_ADAM_M, host, err);
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
