/* metrics.c - what a run reports per step: RUN_DIR/metrics.jsonl, one JSON object per line
 * (appended, so a resumed run continues the file), and with log.tensorboard the same scalars as
 * TensorBoard event files under RUN_DIR/tb/ (tb_events.c). Every write is checked: a full disk
 * stops the run instead of silently losing its record. */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tb_events.h"

struct ig_metrics {
    ig_ctx *ctx;
    FILE *jsonl;
    char path[4096];
    ig_tb_writer *tb;
};

/* The step of a record ("{\"step\":N,..."), or -1. */
static long long record_step(const char *line) {
    long long s = -1;
    return sscanf(line, "{\"step\":%lld", &s) == 1 ? s : -1;
}

/* Keeps the records of steps <= upto in path (a resumed run writes the later ones again), through
 * an atomic rewrite (a link to the file is written through). */
static ig_status truncate_records(const char *path, int64_t upto, ig_err *err) {
    FILE *in = fopen(path, "r");
    if (!in) return errno == ENOENT ? IG_OK : ig_err_errno(err, errno, "cannot open %s", path);
    ig_atomic_file *af = NULL;
    ig_status st = ig_atomic_file_create(&af, path, 1, err);
    if (st != IG_OK) {
        fclose(in);
        return st;
    }
    FILE *out = ig_atomic_file_stream(af);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int dropped = 0;
    while ((n = getline(&line, &cap, in)) > 0) {
        long long s = record_step(line);
        if (s > (long long)upto) {
            dropped = 1;
            continue;
        }
        if (fwrite(line, 1, (size_t)n, out) != (size_t)n) break;
    }
    free(line);
    int bad = ferror(in) || ferror(out);
    fclose(in);
    if (bad || !dropped) {
        ig_atomic_file_abort(af);
        return bad ? ig_err_errno(err, errno, "cannot rewrite %s", path) : IG_OK;
    }
    return ig_atomic_file_commit(af, err);
}

ig_status ig_metrics_open(ig_metrics **out, ig_ctx *ctx, const char *run_dir, int tensorboard,
                          int64_t resume_step, ig_err *err) {
    *out = NULL;
    ig_metrics *m = ig_calloc(ctx, 1, sizeof *m);
    if (!m) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    m->ctx = ctx;
    snprintf(m->path, sizeof m->path, "%s/metrics.jsonl", run_dir);
    /* appended to: a regular file or none (a pipe would block the open, a device swallow it) */
    ig_status cst = ig_output_check(m->path, 1, err);
    if (cst != IG_OK) {
        ig_free(ctx, m);
        return cst;
    }
    if (resume_step >= 0) {
        ig_status st = truncate_records(m->path, resume_step, err);
        if (st != IG_OK) {
            ig_free(ctx, m);
            return st;
        }
    }
    m->jsonl = fopen(m->path, "a");
    if (!m->jsonl) {
        ig_status st = ig_err_errno(err, errno, "cannot open %s", m->path);
        ig_free(ctx, m);
        return st;
    }
    if (tensorboard) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/tb", run_dir);
        ig_status st = ig_tb_writer_create(&m->tb, ctx, dir, NULL, err);
        if (st != IG_OK) {
            fclose(m->jsonl);
            ig_free(ctx, m);
            return st;
        }
    }
    *out = m;
    return IG_OK;
}

/* A JSON number (JSON has no NaN or infinity: those become null). */
static void put_num(FILE *f, const char *key, double v) {
    if (isfinite(v))
        fprintf(f, ",\"%s\":%.17g", key, v);
    else
        fprintf(f, ",\"%s\":null", key);
}

static ig_status flush_line(ig_metrics *m, ig_err *err) {
    if (fflush(m->jsonl) != 0 || ferror(m->jsonl))
        return ig_err_errno(err, errno, "cannot write %s", m->path);
    return IG_OK;
}

static ig_status tb_scalar(ig_metrics *m, const char *tag, int64_t step, double v, ig_err *err) {
    if (!m->tb) return IG_OK;
    return ig_tb_writer_add_scalar(m->tb, tag, step, (float)v, ig_tb_wall_time(), err);
}

ig_status ig_metrics_step(ig_metrics *m, int64_t step, double loss, double lr, double grad_norm,
                          double tokens_per_s, double mfu, const char *extra, ig_err *err) {
    fprintf(m->jsonl, "{\"step\":%lld", (long long)step);
    put_num(m->jsonl, "loss", loss);
    put_num(m->jsonl, "lr", lr);
    put_num(m->jsonl, "grad_norm", grad_norm);
    put_num(m->jsonl, "tokens_per_s", tokens_per_s);
    put_num(m->jsonl, "mfu", mfu);
    if (extra) fputs(extra, m->jsonl);
    fputs("}\n", m->jsonl);
    ig_status st = flush_line(m, err);
    if (st == IG_OK) st = tb_scalar(m, "loss", step, loss, err);
    if (st == IG_OK) st = tb_scalar(m, "lr", step, lr, err);
    if (st == IG_OK) st = tb_scalar(m, "grad_norm", step, grad_norm, err);
    if (st == IG_OK && m->tb) st = ig_tb_writer_flush(m->tb, err);
    return st;
}

ig_status ig_metrics_val(ig_metrics *m, int64_t step, double val_loss, ig_err *err) {
    fprintf(m->jsonl, "{\"step\":%lld", (long long)step);
    put_num(m->jsonl, "val_loss", val_loss);
    fputs("}\n", m->jsonl);
    ig_status st = flush_line(m, err);
    if (st == IG_OK) st = tb_scalar(m, "val_loss", step, val_loss, err);
    if (st == IG_OK && m->tb) st = ig_tb_writer_flush(m->tb, err);
    return st;
}

ig_status ig_metrics_close(ig_metrics *m, ig_err *err) {
    if (!m) return IG_OK;
    ig_status st = IG_OK;
    if (m->tb) st = ig_tb_writer_close(m->tb, err);
    if (fclose(m->jsonl) != 0 && st == IG_OK)
        st = ig_err_errno(err, errno, "cannot write %s", m->path);
    ig_free(m->ctx, m);
    return st;
}
