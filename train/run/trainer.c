/* trainer.c - the training loop, for a model of any family: loader -> forward -> loss -> backward
 * -> gradient accumulation -> gradient reduction -> clip -> AdamW -> metrics, with validation and
 * checkpoints, on one process or on every rank of a tp x dp x pp layout (parallel.h: this rank's
 * part of the model, the 1F1B schedule in schedule.c, the reductions and ZeRO in optimizer.c). Rank
 * 0 writes the logs, the metrics and the run directory; the loss it reports is the global one, the
 * same on every rank.
 *
 * Everything a step depends on is in a checkpoint: the parameters, the AdamW moments, the step
 * (which gives the learning rate) and the loader's consumed samples (which give the data). The
 * initial weights and the data order are counter-based and keyed, there is no other random state,
 * and every kernel is deterministic, so a resumed run repeats the losses of an uninterrupted one
 * bit for bit.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "family/family.h"
#include "feed/feed.h"
#include "family/objective.h"
#include "formats/hf.h"
#include "metrics.h"
#include "plan/plan.h"
#include "watchdog.h"

typedef struct run {
    ig_ctx *ctx;
    const ig_train_opts *o;
    const ig_train_config *t;
    FILE *log;
    ig_backend *be;
    ig_model *model;
    ig_model_config shape;
    int B, T;               /* the largest micro-batch: samples (clips), and tokens of one */
    ig_feed *train, *valid; /* the training and validation micro-batches */
    ig_metrics *metrics;
    ig_batch_opts batch;
    int accum;         /* micro-batches per step on this data-parallel rank */
    double peak_flops; /* the backend's GEMM throughput, measured at the start */
    ig_comm *world;    /* NULL: one process */
    ig_layout lo;
    ig_optim *optim;
    ig_plan_memory plan;     /* this rank's estimate (ingot plan's), checked before allocating */
    uint64_t state_bytes;    /* the model state the backend counted as it was allocated */
    ig_watchdog *dog;        /* several ranks: none waits forever */
    ig_pulse pulse;          /* the run's progress, which the watchdog reads */
    int writer;              /* rank 0: logs, metrics, the run directory */
    int64_t first;           /* the first step to run */
    ig_loader_state start;   /* where the data resumes (resume) */
    char resumed_from[4096]; /* the checkpoint resumed from ("" for a fresh run) */
} run;

/* ---- setup ----------------------------------------------------------------------------------- */

/* The samples the training data's index is built for: every step's global batch. */
static uint64_t train_samples(const ig_train_config *t) {
    int gb = t->global_batch ? t->global_batch : t->micro_batch;
    return (uint64_t)t->steps * (uint64_t)gb;
}

/* The training data, and the validation data with eval.every, as the objective reads them. */
static ig_status open_data(run *r, ig_err *err) {
    const ig_train_config *t = r->t;
    const ig_objective *obj = ig_objective_of(&t->model);
    ig_feed_opts o = {.input = obj->input,
                      .samples = train_samples(t),
                      .repeats = 1,
                      .caption_len = obj->caption_len ? obj->caption_len(&t->model) : 0};
    ig_status st = ig_feed_open(&r->train, r->ctx, t, &o, err);
    if (st == IG_OK && t->eval_every > 0) {
        o.valid = 1;
        o.samples = (uint64_t)t->eval_batches * (uint64_t)t->micro_batch;
        o.repeats = obj->eval_repeats(t);
        st = ig_feed_open(&r->valid, r->ctx, t, &o, err);
    }
    return st;
}

/* Model FLOP/s the backend's GEMM reaches: the reference of the MFU. [4S, S] @ [S, 4S] -> [4S, 4S]
 * (the shape of an MLP's first matmul), best of three after a warm-up. */
static double measure_peak(run *r) {
    enum { S = 768 };
    void *a = NULL, *w = NULL, *o = NULL;
    size_t as = ig_backend_act_size(r->be);
    double best = 0;
    if (ig_backend_alloc(r->be, (size_t)S * 4 * S * as, &a, NULL) == IG_OK &&
        ig_backend_alloc(r->be, (size_t)S * 4 * S * as, &w, NULL) == IG_OK &&
        ig_backend_alloc(r->be, (size_t)S * 16 * S * as, &o, NULL) == IG_OK) {
        for (int rep = 0; rep < 4; rep++) {
            double t0 = ig_now();
            ig_kernel_matmul_forward(r->be, o, a, w, IG_W_IN_OUT, NULL, 4 * S, S, 4 * S);
            ig_backend_sync(r->be, NULL);
            double dt = ig_now() - t0;
            double f = 2.0 * 4 * S * (double)S * 4 * S / dt;
            if (rep > 0 && f > best) best = f; /* the first is a warm-up */
        }
    }
    ig_backend_release(r->be, a);
    ig_backend_release(r->be, w);
    ig_backend_release(r->be, o);
    return best;
}

/* ---- one step -------------------------------------------------------------------------------- */

/* The loss summed over this rank's micro-batches, added up over the world: only the last stage
 * has losses, and of it only tensor-parallel and Ulysses rank 0 count (every tp rank has the same;
 * the family sums the sequence ranks' parts), and for validation, which every replica runs on the
 * same data, only dp rank 0. */
static ig_status global_sums(run *r, ig_sched_sums *s, int count_dp, ig_err *err) {
    int counts = ig_layout_last(&r->lo) && r->lo.tp_rank == 0 && r->lo.usp_rank == 0 &&
                 (count_dp || r->lo.dp_rank == 0);
    double v[3] = {s->loss, s->tokens, s->flops};
    if (!counts) v[0] = v[1] = v[2] = 0.0;
    ig_status st = ig_group_allreduce(&r->lo.world_g, v, 3, IG_COMM_F64, IG_COMM_SUM, err);
    *s = (ig_sched_sums){v[0], v[1], v[2]};
    return st;
}

/* The validation loss: eval.batches micro-batches from the start of the validation data (of
 * clips: each at every time of the grid), on every replica. */
static ig_status validate(run *r, double *val_loss, ig_err *err) {
    int n = (int)r->t->eval_batches * ig_feed_repeats(r->valid);
    ig_sched_sums sums = {0};
    ig_status st = ig_feed_start(r->valid, NULL, 1, 0, 1, err);
    if (st == IG_OK) st = ig_sched_run(r->model, &r->lo, r->valid, n, 0.0f, NULL, &sums, err);
    if (st == IG_OK) st = global_sums(r, &sums, 0, err);
    *val_loss = sums.loss / (double)n;
    return st;
}

/* The run diverged at step (0-based): a message with the step, what is not finite, the settings
 * that cause it, and the checkpoint to resume from (only finite ones are ever written). */
static ig_status diverged(run *r, int64_t step, const char *what, ig_err *err) {
    const ig_train_config *t = r->t;
    char ckpt[4096] = "", from[4200] = "";
    if (ig_ckpt_latest(t->run_dir, ckpt, sizeof ckpt, NULL) == IG_OK)
        snprintf(from, sizeof from,
                 "resume from %s (the last checkpoint; every checkpoint "
                 "written holds finite weights)",
                 ckpt);
    else
        snprintf(from, sizeof from, "no checkpoint was written yet: start over");
    return ig_err_set(err, IG_ERR_FORMAT,
                      "step %lld: %s: the run diverged; lower optim.lr (now %g), set "
                      "optim.grad_clip (now %g) or a longer optim.warmup (now %lld), and %s",
                      (long long)step + 1, what, t->lr, t->grad_clip, (long long)t->warmup, from);
}

/* Every rank's parameters are finite after the update of step (0-based), or the run stops before
 * anything is saved of them. */
static ig_status check_finite(run *r, int64_t step, ig_err *err) {
    ig_err e = {0};
    ig_status st = ig_model_check_finite(r->model, &e);
    int32_t bad = st != IG_OK;
    ig_status cs = ig_group_allreduce(&r->lo.world_g, &bad, 1, IG_COMM_I32, IG_COMM_MAX, err);
    if (cs != IG_OK) return cs;
    if (!bad) return IG_OK;
    char what[IG_ERR_MSG_MAX + 64];
    snprintf(what, sizeof what, "the parameters are not finite after the optimizer's update (%s)",
             st != IG_OK ? e.msg : "on another rank");
    return diverged(r, step, what, err);
}

static ig_status train_step(run *r, int64_t step, ig_sched_sums *sums, double *loss, double *norm,
                            double *lr, ig_err *err) {
    const ig_train_config *t = r->t;
    int M = r->accum, dp = r->lo.dp;
    ig_status st = ig_optim_begin(r->optim, err);
    /* each micro-batch's mean loss weighs 1 / (micro-batches per step over all replicas) */
    if (st == IG_OK)
        st = ig_sched_run(r->model, &r->lo, r->train, M, 1.0f / (float)(M * dp),
                          ig_optim_hooks(r->optim), sums, err);
    if (st == IG_OK) st = ig_optim_reduce(r->optim, err);
    if (st == IG_OK) st = global_sums(r, sums, 1, err);
    if (st != IG_OK) return st;
    *loss = sums->loss / (double)(M * dp);
    if ((st = ig_optim_norm(r->optim, norm, err)) != IG_OK) return st;
    if (!isfinite(*loss) || !isfinite(*norm)) {
        char what[64];
        snprintf(what, sizeof what, "the %s is %s", isfinite(*loss) ? "gradient norm" : "loss",
                 isfinite(*loss) ? (isnan(*norm) ? "NaN" : "infinite")
                                 : (isnan(*loss) ? "NaN" : "infinite"));
        return diverged(r, step, what, err);
    }
    /* torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1 */
    float scale = 1.0f;
    if (t->grad_clip > 0) {
        double coef = t->grad_clip / (*norm + 1e-6);
        if (coef < 1.0) scale = (float)coef;
    }
    *lr = ig_train_lr(t, step);
    ig_adamw_hparams h = {(float)*lr, (float)t->beta1, (float)t->beta2, (float)t->eps,
                          (float)t->weight_decay};
    return ig_optim_step(r->optim, (int)(step + 1), &h, scale, err);
}

/* A test hook: IG_FAULT_NAN=S makes one parameter NaN after step S's update (as a diverging
 * optimizer would), so that the checks before a checkpoint can be seen to catch it. */
static void inject_nan(run *r, int64_t step) {
    const char *v = getenv("IG_FAULT_NAN");
    long long s = -1;
    if (!v || sscanf(v, "%lld", &s) != 1 || s != (long long)step + 1) return;
    float nan = NAN;
    ig_backend_upload_f32(r->be, ig_store_params_at(r->model->st, 0), &nan, 1, NULL);
}

/* ---- the loop -------------------------------------------------------------------------------- */

static void format_eta(double s, char *buf, size_t cap) {
    if (!(s >= 0) || s > 1e8)
        snprintf(buf, cap, "?");
    else if (s >= 3600)
        snprintf(buf, cap, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else if (s >= 60)
        snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, cap, "%.0fs", s);
}

static ig_status checkpoint(run *r, int64_t step, double loss, ig_train_result *res, ig_err *err) {
    ig_ckpt_info info = {.step = step,
                         .loader = ig_feed_state(r->train),
                         .train_samples = train_samples(r->t),
                         .global_batch =
                             r->t->global_batch ? r->t->global_batch : r->t->micro_batch,
                         .model = r->shape,
                         .seed = r->t->seed,
                         .eod_id = r->batch.eod_id,
                         .config_hash = r->o->config ? ig_config_hash(r->o->config) : 0,
                         .tp = r->lo.tp,
                         .pp = r->lo.pp,
                         .dp = r->lo.dp,
                         .loss = loss};
    ig_status st =
        ig_ckpt_save_part(r->ctx, r->model, r->optim, &r->lo, &info, r->o->config, r->t->run_dir,
                          r->t->ckpt_keep, res->checkpoint, sizeof res->checkpoint, err);
    if (st == IG_OK && r->writer && !r->o->quiet)
        fprintf(r->log, "checkpoint: %s\n", res->checkpoint);
    return st;
}

static void comm_reset(run *r) {
    ig_group *gs[] = {&r->lo.tp_g,  &r->lo.pp_g, &r->lo.dp_g,
                      &r->lo.emb_g, &r->lo.sp_g, &r->lo.world_g};
    for (size_t g = 0; g < sizeof gs / sizeof gs[0]; g++) gs[g]->bytes = 0;
}

/* The bytes this rank sent in each group since the last call ("" without log.comm_stats), as a
 * JSON member for metrics.jsonl (every rank's figures, gathered on rank 0) and a short form for
 * the step line (the largest over the ranks). */
static ig_status comm_stats(run *r, char *json, size_t jcap, char *line, size_t lcap, ig_err *err) {
    json[0] = line[0] = '\0';
    ig_group *gs[] = {&r->lo.tp_g, &r->lo.pp_g, &r->lo.dp_g, &r->lo.emb_g, &r->lo.sp_g};
    enum { NG = 5, NV = NG + 2 };
    uint64_t mine[NV];
    for (int g = 0; g < NG; g++) mine[g] = gs[g]->bytes, gs[g]->bytes = 0;
    /* and the microseconds this rank waited for the data-parallel reductions after its backward
     * (what the overlap with the backward did not hide), and for ZeRO-3's all-gathers */
    mine[NG] = (uint64_t)(ig_optim_wait_seconds(r->optim) * 1e6);
    mine[NG + 1] = (uint64_t)(ig_store_take_gather_wait(r->model->st) * 1e6);
    r->lo.world_g.bytes = 0;
    if (!r->t->comm_stats) return IG_OK;
    int W = r->lo.world;
    uint64_t *all = ig_calloc(r->ctx, (size_t)W * NV, sizeof *all);
    if (!all) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = ig_group_allgather(&r->lo.world_g, mine, all, NV, IG_COMM_U64, err);
    size_t jn = 0, ln = 0;
    jn += (size_t)snprintf(json + jn, jcap - jn, ",\"comm_bytes\":{");
    ln += (size_t)snprintf(line + ln, lcap - ln, " | comm MB");
    for (int g = 0; st == IG_OK && g < NG; g++) {
        uint64_t mx = 0;
        jn += (size_t)snprintf(json + jn, jcap > jn ? jcap - jn : 0, "%s\"%s\":[", g ? "," : "",
                               gs[g]->name);
        for (int k = 0; k < W; k++) {
            uint64_t v = all[(size_t)k * NV + (size_t)g];
            if (v > mx) mx = v;
            jn += (size_t)snprintf(json + jn, jcap > jn ? jcap - jn : 0, "%s%llu", k ? "," : "",
                                   (unsigned long long)v);
        }
        jn += (size_t)snprintf(json + jn, jcap > jn ? jcap - jn : 0, "]");
        ln += (size_t)snprintf(line + ln, lcap > ln ? lcap - ln : 0, " %s %.2f", gs[g]->name,
                               (double)mx / 1e6);
    }
    uint64_t wait = 0, gwait = 0;
    for (int k = 0; k < W; k++) {
        if (all[(size_t)k * NV + NG] > wait) wait = all[(size_t)k * NV + NG];
        if (all[(size_t)k * NV + NG + 1] > gwait) gwait = all[(size_t)k * NV + NG + 1];
    }
    if (jn < jcap)
        jn += (size_t)snprintf(json + jn, jcap - jn, "},\"dp_wait_ms\":%.3f", (double)wait * 1e-3);
    if (ln < lcap)
        ln += (size_t)snprintf(line + ln, lcap - ln, " | dp wait %.1f ms", (double)wait * 1e-3);
    if (ig_store_zero3(r->model->st) && jn < jcap)
        snprintf(json + jn, jcap - jn, ",\"gather_wait_ms\":%.3f", (double)gwait * 1e-3);
    if (ig_store_zero3(r->model->st) && ln < lcap)
        snprintf(line + ln, lcap - ln, " | gather wait %.1f ms", (double)gwait * 1e-3);
    ig_free(r->ctx, all);
    return st;
}

/* Whether any rank was asked to stop (each gets the signal from its launcher at its own moment;
 * they must stop after the same step). */
static ig_status stop_requested(run *r, int *stop, ig_err *err) {
    int32_t v = r->o->stop && *r->o->stop;
    ig_status st = ig_group_allreduce(&r->lo.world_g, &v, 1, IG_COMM_I32, IG_COMM_MAX, err);
    *stop = v != 0;
    return st;
}

static ig_status loop(run *r, int64_t first, ig_train_result *res, ig_err *err) {
    const ig_train_config *t = r->t;
    double t_start = ig_now(), loss = NAN;
    int64_t step = first;
    ig_status st = IG_OK;
    /* the step's extra JSON: every rank's bytes per group and its memory */
    size_t jcap = 1024 + (size_t)r->lo.world * 24 * 8;
    char *cjson = ig_alloc(r->ctx, jcap), cline[256], mline[256];
    if (!cjson) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    int device = ig_backend_kind_of(r->be) != IG_BACKEND_CPU;
    for (; step < t->steps; step++) {
        double t0 = ig_now(), norm = 0, lr = 0;
        ig_sched_sums sums = {0};
        /* armed through everything until the next step: the step, the stop check, validation and
         * the checkpoint all wait on other ranks */
        ig_watchdog_arm(r->dog, step);
        st = train_step(r, step, &sums, &loss, &norm, &lr, err);
        if (st != IG_OK) break;
        inject_nan(r, step);
        double dt = ig_now() - t0;
        /* per rank: the step's model FLOPs (3x the forward's) spread over the world */
        double tps = sums.tokens / dt, flops = 3.0 * sums.flops / (double)r->lo.world;
        double mfu = r->peak_flops > 0 ? flops / dt / r->peak_flops : 0;
        if ((st = comm_stats(r, cjson, jcap, cline, sizeof cline, err)) != IG_OK) break;
        /* every rank's peak against its estimate: the first step's in a line, each step's in
         * metrics.jsonl with log.memory_stats */
        size_t jn = strlen(cjson);
        mline[0] = '\0';
        if ((t->memory_stats || step == first) &&
            (st = ig_plan_memory_stats(&r->lo, r->be, &r->plan, r->state_bytes, device,
                                       t->memory_stats ? cjson + jn : NULL, jcap - jn, mline,
                                       sizeof mline, err)) != IG_OK)
            break;
        if (r->writer && (st = ig_metrics_step(r->metrics, step + 1, loss, lr, norm, tps, mfu,
                                               cjson, err)) != IG_OK)
            break;
        res->step = step + 1;
        res->loss = loss;
        if (r->writer && !r->o->quiet && ((step + 1) % t->log_every == 0 || step + 1 == t->steps)) {
            char eta[32];
            double per = (ig_now() - t_start) / (double)(step + 1 - first);
            format_eta(per * (double)(t->steps - step - 1), eta, sizeof eta);
            fprintf(r->log,
                    "step %lld/%lld | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | mfu "
                    "%.2f | %.0f ms | eta %s%s\n",
                    (long long)step + 1, (long long)t->steps, loss, lr, norm, tps, mfu, dt * 1e3,
                    eta, cline);
            fflush(r->log);
        }
        if (r->writer && !r->o->quiet && step == first) fprintf(r->log, "%s\n", mline);
        int last = step + 1 == t->steps, stop = 0;
        if ((st = stop_requested(r, &stop, err)) != IG_OK) break;
        if (t->eval_every > 0 && ((step + 1) % t->eval_every == 0 || last)) {
            double vl = 0;
            st = validate(r, &vl, err);
            if (st != IG_OK) break;
            res->val_loss = vl;
            if (!isfinite(vl)) {
                st = diverged(r, step,
                              isnan(vl) ? "the validation loss is NaN"
                                        : "the validation loss is infinite",
                              err);
                break;
            }
            if (r->writer && (st = ig_metrics_val(r->metrics, step + 1, vl, err)) != IG_OK) break;
            if (r->writer && !r->o->quiet)
                fprintf(r->log, "step %lld | val loss %.6f\n", (long long)step + 1, vl);
            comm_reset(r); /* not the next step's */
        }
        if (last || stop || (t->ckpt_every > 0 && (step + 1) % t->ckpt_every == 0)) {
            if ((st = check_finite(r, step, err)) != IG_OK) break;
            if ((st = checkpoint(r, step + 1, loss, res, err)) != IG_OK) break;
            comm_reset(r);
        }
        if (stop && !last) {
            res->stopped = 1;
            step++;
            break;
        }
    }
    ig_watchdog_disarm(r->dog);
    ig_free(r->ctx, cjson);
    return st;
}

/* A fresh run must not mix with an earlier one in the same directory: its checkpoints (which a
 * later --resume would pick), metrics.jsonl and TensorBoard events are removed with overwrite,
 * refused without. */
static ig_status clear_run_dir(const char *dir, int overwrite, ig_err *err) {
    static const char *const names[] = {"ckpt", "metrics.jsonl", "tb"};
    char p[4200];
    int found = -1;
    for (int i = 0; i < 3 && found < 0; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        struct stat sb;
        if (lstat(p, &sb) == 0) found = i;
    }
    if (found < 0) return IG_OK;
    if (!overwrite) {
        ig_err_set(err, IG_ERR_EXISTS,
                   "%s holds an earlier run (%s): resume it, or start over and replace it", dir,
                   names[found]);
        return ig_err_fix(err, "overwrite", NULL);
    }
    /* what is removed must be what a run writes there: the directories ckpt and tb, the file
     * metrics.jsonl (never a device, a pipe or a link standing in for one) */
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        struct stat sb;
        if (lstat(p, &sb) != 0) continue;
        int want_dir = i != 1;
        if (want_dir ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode))
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "%s is a %s where a run keeps its %s: ingot never removes it, even "
                              "with --force; move it away or choose another train.run_dir",
                              p, ig_file_kind(sb.st_mode), want_dir ? "directory" : "metrics file");
    }
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        ig_status st = ig_remove_tree(p, err);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}

/* Whether every rank got through a phase that can fail on some ranks only. */
static ig_status all_ranks_ok(run *r, ig_status st, const char *what, ig_err *err) {
    return ig_all_ranks_ok(r->world, st, what, err);
}

/* ---- setup ----------------------------------------------------------------------------------- */

/* The data (rank 0 first: it builds the index caches, which the others then read), and what the
 * model takes from it. */
static ig_status setup_data(run *r, ig_err *err) {
    const ig_train_config *t = r->t;
    int rank = r->world ? ig_comm_rank(r->world) : 0;
    ig_status st = IG_OK;
    /* busy: building an index can take long, and the others wait for it meanwhile */
    ig_pulse_busy(&r->pulse, 1);
    if (rank == 0) st = open_data(r, err);
    ig_pulse_busy(&r->pulse, 0);
    if (r->world && (st = all_ranks_ok(r, st, "opening the data", err)) == IG_OK && rank != 0) {
        ig_pulse_busy(&r->pulse, 1);
        st = open_data(r, err);
        ig_pulse_busy(&r->pulse, 0);
    }
    if ((st = all_ranks_ok(r, st, "opening the data", err)) != IG_OK) return st;
    /* a test hook: IG_FAULT_STOP_START=R stops world rank R (SIGSTOP) once the data is open, while
     * the others go on to the run's first collectives */
    const char *stop = getenv("IG_FAULT_STOP_START");
    if (stop && r->world && atoi(stop) == rank) raise(SIGSTOP);
    /* what the model takes from the data (a vocabulary, the longest clip), as its objective says */
    ig_data_facts facts;
    ig_fit fit = {.shape = t->model};
    if ((st = ig_feed_facts(r->train, &facts, err)) != IG_OK ||
        (st = ig_objective_of(&t->model)->fit(&fit, t, &facts, err)) != IG_OK)
        return st;
    r->shape = fit.shape;
    r->B = fit.B;
    r->T = fit.T;
    r->batch = fit.bo;
    ig_feed_set_batch_opts(r->train, &r->batch);
    if (r->valid) ig_feed_set_batch_opts(r->valid, &r->batch);
    /* model.init_from: its files against the configuration's model, before any work */
    if (!r->o->resume && t->init_from && *t->init_from &&
        (st = ig_hf_match(r->ctx, t->init_from, &r->shape, err)) != IG_OK)
        return ig_err_prefix(err, st, "model.init_from");
    return IG_OK;
}

/* The backend, before the run directory: a device that is not there leaves nothing behind. */
static ig_status setup_backend(run *r, ig_err *err) {
    const ig_train_config *t = r->t;
    ig_backend_opts bo = ig_backend_opts_default();
    bo.kind = t->device == 1 ? IG_BACKEND_CUDA : IG_BACKEND_CPU;
    bo.act_type = t->dtype == 2 || (t->dtype == 0 && t->device == 1) ? IG_ACT_BF16 : IG_ACT_F32;
    bo.device = 0;
    ig_status st = IG_OK;
    if (bo.kind == IG_BACKEND_CUDA && r->world) {
        /* one GPU per process: the node-local rank's, as the NCCL communicators choose it */
        ig_comm *node = NULL;
        st = ig_comm_split_local(r->world, &node, err);
        if (st == IG_OK) bo.device = ig_comm_rank(node);
        ig_comm_free(node);
    }
    if (st == IG_OK) st = ig_backend_create(&r->be, r->ctx, &bo, err);
    if (st != IG_OK) ig_err_prefix(err, st, "train.device %s", t->device == 1 ? "cuda" : "cpu");
    if ((st = all_ranks_ok(r, st, "creating the backend", err)) != IG_OK) return st;
    /* the groups that move the model's memory: NCCL on a device (itself all-or-nothing) */
    return ig_layout_attach_backend(&r->lo, r->world, r->be, err);
}

/* This rank's estimate, as ingot plan makes it, against what it may use: a run that does not fit
 * is refused on every rank before the run directory and the model are made. */
static ig_status check_memory(run *r, ig_err *err) {
    double ema = r->t->ema_decay < 0 ? ig_family_of(r->shape.arch)->ema_default : r->t->ema_decay;
    ig_plan_check_in in = {.ctx = r->ctx,
                           .world = r->world,
                           .lo = &r->lo,
                           .be = r->be,
                           .t = r->t,
                           .shape = &r->shape,
                           .B = r->B,
                           .T = r->T,
                           .ema = ema > 0,
                           .device = ig_backend_kind_of(r->be) != IG_BACKEND_CPU,
                           .config_path = r->o->config_path};
    return ig_plan_check_run(&in, &r->plan, err);
}

/* The run directory (rank 0), and the watchdog of every rank. */
static ig_status setup_run_dir(run *r, ig_err *err) {
    const ig_train_config *t = r->t;
    ig_status st = IG_OK;
    if (r->writer) {
        if (!r->o->resume) st = clear_run_dir(t->run_dir, r->o->overwrite, err);
        if (st == IG_OK) st = ig_mkdir_p(t->run_dir, err);
        if (st != IG_OK) ig_err_prefix(err, st, "the run directory");
        /* what killed saves of this host left (a whole checkpoint's size each) */
        if (st == IG_OK) ig_ckpt_remove_stale(t->run_dir);
    }
    return all_ranks_ok(r, st, "preparing the run directory", err);
}

/* Several ranks: the watchdog from the first collective on, armed through the start (a rank that
 * stops while the data is opened and indexed ends every rank within parallel.timeout, naming it).
 */
static ig_status start_watchdog(run *r, ig_err *err) {
    const ig_train_config *t = r->t;
    if (!r->world || !(t->timeout > 0)) return IG_OK;
    ig_status st = ig_watchdog_start(&r->dog, r->ctx, &r->pulse, t->run_dir, ig_comm_rank(r->world),
                                     ig_comm_size(r->world), t->timeout, err);
    if (st == IG_OK) ig_watchdog_arm(r->dog, -1);
    if (st == IG_OK && r->o->watched) r->o->watched(r->o->watched_user);
    return all_ranks_ok(r, st, "starting the watchdog", err);
}

/* The model part this rank holds in the layout, and its optimizer. */
static ig_status setup_model(run *r, ig_err *err) {
    const ig_layout *lo = &r->lo;
    size_t as = ig_backend_act_size(r->be);
    /* the part ingot plan sizes (check_memory's estimate), with this run's groups */
    ig_plan_rank_in in = {
        .lo = lo, .act_size = as, .recompute = r->t->recompute, .bucket_bytes = r->t->bucket_bytes};
    ig_part part = ig_plan_part(&in);
    part.tpg = (ig_group *)&lo->tp_g;
    part.uspg = (ig_group *)&lo->sp_g;
    part.dpg = (ig_group *)&lo->dp_g; /* dp x Ulysses sp: its gradients are reduced over them */
    part.prefetch = r->t->prefetch;
    ig_pulse_busy(&r->pulse, 1); /* drawing the initial weights: each rank on its own */
    ig_status st = ig_model_create_part(&r->model, r->ctx, r->be, &r->shape, r->B, r->T, r->t->seed,
                                        &part, err);
    /* the model state as the backend counts it: the store's buffers (parameters, fp32 master
     * weights, gradients) and the optimizer's (moments, ZeRO-2's reduced pieces, the EMA) */
    ig_backend_memory before, after;
    ig_backend_memory_info(r->be, &before);
    if (st == IG_OK) st = ig_optim_create(&r->optim, r->ctx, r->model, &r->lo, err);
    double ema = r->t->ema_decay < 0 ? ig_family_of(r->shape.arch)->ema_default : r->t->ema_decay;
    if (st == IG_OK && ema > 0) st = ig_optim_ema_enable(r->optim, ema, err);
    ig_backend_memory_info(r->be, &after);
    if (st == IG_OK) r->state_bytes = r->model->store_bytes + after.buffers - before.buffers;
    ig_pulse_busy(&r->pulse, 0);
    return all_ranks_ok(r, st, "creating the model", err);
}

/* A resumed run whose data's identity or global batch differs from the checkpoint's (the run's
 * length changed, most often): the feed says whether it goes on over the same data in the same
 * order (feed.h's ig_feed_resume), from the consumed samples of a rebuilt index when it is. */
static ig_status extend(run *r, const ig_ckpt_info *info, ig_err *err) {
    int rebuilt = 0;
    char said[512];
    ig_feed_then then = {.key = info->loader.index_key,
                         .samples = info->train_samples,
                         .consumed = info->loader.consumed_samples,
                         .step = info->step,
                         .global_batch = info->global_batch};
    ig_status st = ig_feed_resume(r->train, &then, &r->start, &rebuilt, said, sizeof said, err);
    if (st == IG_OK && *said && r->writer && !r->o->quiet) fprintf(r->log, "%s\n", said);
    if (st == IG_OK && rebuilt && r->writer && !r->o->quiet)
        fprintf(r->log,
                "train.steps is %lld now (%llu samples; the checkpoint's run had %llu): the "
                "data's index is rebuilt for them and the run goes on from sample %llu of it\n",
                (long long)r->t->steps, (unsigned long long)train_samples(r->t),
                (unsigned long long)info->train_samples,
                (unsigned long long)info->loader.consumed_samples);
    return st;
}

/* The starting point: the latest checkpoint (resume), a Hugging Face model (model.init_from), or
 * the initial weights; then the loader and the metrics. */
static ig_status restore(run *r, ig_err *err) {
    const ig_train_config *t = r->t;
    ig_loader_state *startp = NULL;
    ig_status st = IG_OK;
    int ema_loaded = 0;
    if (r->o->resume) {
        char ckpt[4096] = "";
        ig_ckpt_info info;
        st = ig_ckpt_latest(t->run_dir, ckpt, sizeof ckpt, err);
        ig_pulse_busy(&r->pulse, 1); /* reading its files: each rank on its own */
        if (st == IG_OK) st = ig_ckpt_load(r->ctx, ckpt, r->model, r->optim, &info, err);
        ig_pulse_busy(&r->pulse, 0);
        if ((st = all_ranks_ok(r, st, "loading the checkpoint", err)) != IG_OK) return st;
        r->first = info.step;
        r->start = info.loader;
        ema_loaded = info.ema_decay > 0;
        startp = &r->start;
        snprintf(r->resumed_from, sizeof r->resumed_from, "%s", ckpt);
        if (r->writer && !r->o->quiet)
            fprintf(r->log,
                    "resuming from %s (step %lld, %llu samples consumed, saved under tp %d "
                    "pp %d dp %d)\n",
                    ckpt, (long long)r->first, (unsigned long long)r->start.consumed_samples,
                    info.tp, info.pp, info.dp);
        st = r->first < t->steps ? extend(r, &info, err) : IG_OK;
        if ((st = all_ranks_ok(r, st, "resuming the data", err)) != IG_OK) return st;
    } else if (t->init_from && *t->init_from) {
        ig_pulse_busy(&r->pulse, 1);
        st = ig_hf_load(r->ctx, r->model, t->init_from, err);
        ig_pulse_busy(&r->pulse, 0);
        if ((st = all_ranks_ok(r, st, "loading model.init_from", err)) != IG_OK) return st;
    }
    /* the EMA starts from the weights the run starts from, unless the checkpoint kept one */
    if (ig_optim_ema_decay(r->optim) > 0 && !ema_loaded) st = ig_optim_ema_reset(r->optim, err);
    if (st == IG_OK) st = ig_feed_start(r->train, startp, r->lo.dp, r->lo.dp_rank, r->accum, err);
    if (st == IG_OK && r->writer)
        st = ig_metrics_open(&r->metrics, r->ctx, t->run_dir, t->tensorboard,
                             r->o->resume ? r->first : -1, err);
    return all_ranks_ok(r, st, "starting the loader and metrics", err);
}

/* What the run is: the model, the layout, the memory of rank 0. */
static void print_banner(run *r) {
    static const char *const zero_names[] = {"", ", ZeRO-1", ", ZeRO-2", ", ZeRO-3"};
    char shape[512];
    const ig_objective *obj = ig_objective_of(&r->shape);
    fprintf(r->log,
            "model: %s: %.2fM parameters on %s in %s; %d %s x %d tokens per micro-batch%s, %d "
            "micro-batches (%lld tokens) per step\n",
            ig_model_describe(&r->shape, shape, sizeof shape),
            (double)ig_model_num_params(&r->shape) / 1e6, ig_backend_name(r->be),
            ig_backend_act_size(r->be) == 2 ? "bf16 (fp32 master weights)" : "fp32", r->B,
            obj->units, r->T, obj->shapes_vary ? " (at most)" : "", r->accum * r->lo.dp,
            (long long)r->accum * r->lo.dp * r->B * r->T);
    char ulysses[64];
    snprintf(ulysses, sizeof ulysses, " x sp %d (ulysses)", r->lo.usp);
    if (r->lo.world > 1)
        fprintf(r->log,
                "layout: %d ranks = tp %d x pp %d x dp %d%s%s%s; %d micro-batches per step per "
                "replica\n",
                r->lo.world, r->lo.tp, r->lo.pp, r->lo.dp, r->lo.usp > 1 ? ulysses : "",
                r->lo.sp ? ", sequence parallel" : "", zero_names[r->lo.zero > 3 ? 0 : r->lo.zero],
                r->accum);
    const ig_model *m = r->model;
    const ig_act_sizes *a = &m->acts;
    double as = (double)m->as, MB = 1e-6, S = (double)m->part.slots;
    ig_store_sizes z;
    ig_store_sizes_of(m->st, &z);
    char master[64] = ""; /* bf16: this rank's fp32 master weights (its ZeRO pieces) */
    if (z.master)
        snprintf(master, sizeof master, ", fp32 master weights %.2f MB", z.master * 4 * MB);
    fprintf(r->log,
            "memory%s: parameters %.2f MB%s, gradients %.2f MB, AdamW moments %.2f MB, EMA %.2f "
            "MB, activations %.2f MB\n",
            r->lo.world > 1 ? " (rank 0)" : "", (double)z.params * as * MB, master,
            ((double)z.grads * as + (double)ig_optim_extra_bytes(r->optim)) * MB,
            2.0 * (double)ig_optim_moment_elems(r->optim) * 4 * MB,
            (ig_optim_states(r->optim) == 3 ? (double)ig_optim_moment_elems(r->optim) * 4 : 0) * MB,
            ((S * (double)a->act + (double)a->scratch_act) * as +
             (S * (double)(a->f32 + a->io_f32) + (double)a->scratch_f32) * 4) *
                MB);
}

/* Whether a key of the configuration was given by --set (or a flag): a resume needs them again. */
static int any_set(const ig_config *cfg) {
    for (size_t i = 0; cfg && i < ig_config_n_keys(cfg); i++) {
        const char *o = ig_config_origin(cfg, ig_config_key(cfg, i)->path);
        static const char *const own[] = {"--resume", "--force", "--quiet", "--verbose",
                                          "--threads"}; /* not the run's: this process's */
        int mine = 0;
        for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) mine |= !strcmp(o, own[k]);
        if (o[0] == '-' && !mine) return 1;
    }
    return 0;
}

ig_status ig_train_run(ig_ctx *ctx, ig_comm *comm, const ig_train_opts *opts,
                       ig_train_result *result, ig_err *err) {
    ig_train_result local;
    ig_train_result *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    res->val_loss = NAN;
    ig_train_config resolved = *opts->cfg; /* plugin / plugin_config into parallel.* */
    const ig_train_config *t = &resolved;
    ig_status st = ig_train_config_resolve(&resolved, opts->config, err);
    if (st == IG_OK) st = ig_train_config_check(t, opts->config, err);
    if (st != IG_OK) return st;
    run r = {.ctx = ctx, .o = opts, .t = t, .log = opts->log ? opts->log : stdout};
    r.world = comm && ig_comm_size(comm) > 1 ? comm : NULL;
    r.writer = !r.world || ig_comm_rank(r.world) == 0;
    r.lo.world = r.world ? ig_comm_size(r.world) : 1;
    if ((st = start_watchdog(&r, err)) != IG_OK || (st = setup_data(&r, err)) != IG_OK) goto done;
    /* the layout: the same checks on every rank, before any work */
    uint64_t hash = opts->config ? ig_config_hash(opts->config) : 0;
    st = ig_layout_create(&r.lo, ctx, r.world, t, &r.shape, hash, &r.pulse, err);
    if (st != IG_OK) goto done;
    r.accum = r.lo.accum;
    if ((st = setup_backend(&r, err)) != IG_OK || (st = check_memory(&r, err)) != IG_OK ||
        (st = setup_run_dir(&r, err)) != IG_OK || (st = setup_model(&r, err)) != IG_OK ||
        (st = restore(&r, err)) != IG_OK)
        goto done;
    if (r.first >= t->steps) { /* a finished run: nothing to do */
        res->step = r.first;
        res->loss = NAN;
        snprintf(res->checkpoint, sizeof res->checkpoint, "%s", r.resumed_from);
        if (r.writer && !opts->quiet)
            fprintf(r.log,
                    "%s finished at step %lld (train.steps %lld): nothing to do; raise "
                    "train.steps to train it further\n",
                    t->run_dir, (long long)r.first, (long long)t->steps);
        goto done;
    }
    if (r.writer) r.peak_flops = measure_peak(&r);
    if (r.writer && !opts->quiet) print_banner(&r);
    if (r.writer && !opts->quiet) ig_plan_print_run(r.log, &r.plan, r.be, r.lo.world);
    ig_backend_memory_reset_peak(r.be); /* the peak of the steps, not of the start */
    st = loop(&r, r.first, res, err);
    if (st == IG_OK && res->stopped && r.writer && !opts->quiet)
        fprintf(r.log, "stopped after step %lld; resume with: ingot train %s --resume %s%s\n",
                (long long)res->step, opts->config_path ? opts->config_path : "CONFIG", t->run_dir,
                any_set(opts->config) ? " (and this run's --set options)" : "");
done:;
    ig_err cerr = {0};
    ig_status cs = ig_metrics_close(r.metrics, &cerr);
    if (st == IG_OK && cs != IG_OK) {
        st = cs;
        if (err) *err = cerr;
    }
    ig_watchdog_stop(r.dog);
    ig_optim_free(r.optim);
    ig_model_free(r.model);
    ig_backend_free(r.be);
    ig_feed_close(r.train);
    ig_feed_close(r.valid);
    ig_layout_free(&r.lo);
    return st;
}
