/* trainer.c - the training loop: loader -> forward -> loss -> backward -> gradient accumulation ->
 * clip -> AdamW -> metrics, with validation and checkpoints.
 *
 * Everything a step depends on is in a checkpoint: the parameters, the AdamW moments, the step
 * (which gives the learning rate) and the loader's consumed samples (which give the data). The
 * initial weights and the data order are counter-based and keyed, there is no other random state,
 * and every kernel is deterministic, so a resumed run repeats the losses of an uninterrupted one
 * bit for bit.
 */
#include "train_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct run {
    ig_ctx *ctx;
    const ig_train_opts *o;
    const ig_train_config *t;
    FILE *log;
    ig_backend *be;
    ig_gpt *model;
    ig_gpt_config shape;
    ig_data_resolved train_data, val_data;
    ig_data_stream *train_ds, *val_ds;
    ig_loader *loader;
    ig_metrics *metrics;
    ig_gpt_batch_opts batch;
    int accum;         /* micro-batches per step */
    double peak_flops; /* the backend's GEMM throughput, measured at the start */
} run;

/* ---- setup ----------------------------------------------------------------------------------- */

/* The vocabulary and end-of-document id the shards were made with (their manifests). */
static ig_status data_vocab(const ig_data_stream *ds, int *vocab, int32_t *eod, ig_err *err) {
    *vocab = 0;
    *eod = -1;
    for (size_t k = 0; k < ig_data_stream_num_sources(ds); k++) {
        const ig_dataset *d = ig_data_stream_dataset(ds, k);
        for (size_t s = 0; s < ig_dataset_num_shards(d); s++) {
            const ig_manifest *m = ig_shard_manifest(ig_dataset_shard(d, s));
            if (!m) continue;
            if (m->vocab_size > (uint64_t)*vocab) *vocab = (int)m->vocab_size;
            if (*eod < 0) *eod = (int32_t)m->eod_id;
        }
    }
    if (*vocab == 0)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.vocab_size: the shards have no manifest to take it from; set it");
    return IG_OK;
}

static ig_status open_data(run *r, ig_err *err) {
    const ig_train_config *t = r->t;
    int gb = t->global_batch ? t->global_batch : t->micro_batch;
    uint64_t samples = (uint64_t)t->steps * (uint64_t)gb;
    ig_status st =
        ig_data_config_resolve(&t->data, (uint32_t)t->seq_len, samples, &r->train_data, err);
    if (st == IG_OK) st = ig_data_stream_open(&r->train_ds, r->ctx, &r->train_data.opts, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "data");
    if (t->eval_every > 0) {
        ig_data_config v = t->data;
        v.part = IG_SPLIT_VALID;
        uint64_t vs = (uint64_t)t->eval_batches * (uint64_t)t->micro_batch;
        st = ig_data_config_resolve(&v, (uint32_t)t->seq_len, vs, &r->val_data, err);
        if (st == IG_OK) st = ig_data_stream_open(&r->val_ds, r->ctx, &r->val_data.opts, err);
        if (st != IG_OK)
            return ig_err_prefix(err, st,
                                 "eval.every needs a validation split (e.g. data.split: "
                                 "\"98,2,0\")");
    }
    return IG_OK;
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

static ig_status make_loader(run *r, const ig_loader_state *start, ig_err *err) {
    ig_loader_opts lo = ig_loader_opts_default();
    lo.make_block = ig_data_stream_make_block;
    lo.block_user = r->train_ds;
    lo.micro_batch = (uint32_t)r->t->micro_batch;
    lo.grad_accum = (uint32_t)r->accum;
    lo.dp = 1;
    lo.rank = 0;
    return ig_loader_create(&r->loader, r->ctx, &lo, start, err);
}

/* ---- one step -------------------------------------------------------------------------------- */

static ig_status validate(run *r, double *val_loss, ig_err *err) {
    ig_loader_opts lo = ig_loader_opts_default();
    lo.make_block = ig_data_stream_make_block;
    lo.block_user = r->val_ds;
    lo.micro_batch = (uint32_t)r->t->micro_batch;
    lo.prefetch_threads = 1;
    ig_loader *ld = NULL;
    ig_status st = ig_loader_create(&ld, r->ctx, &lo, NULL, err);
    double sum = 0;
    for (int64_t b = 0; st == IG_OK && b < r->t->eval_batches; b++) {
        ig_batch batch;
        double loss = 0;
        if ((st = ig_loader_next(ld, &batch, err)) == IG_OK)
            st = ig_gpt_forward(r->model, batch.tokens, (int)batch.micro_batch, r->t->seq_len,
                                &r->batch, &loss, NULL, err);
        sum += loss;
    }
    ig_loader_free(ld);
    *val_loss = sum / (double)r->t->eval_batches;
    return st;
}

static ig_status train_step(run *r, int64_t step, double *loss, double *norm, double *lr,
                            ig_err *err) {
    const ig_train_config *t = r->t;
    ig_status st = ig_gpt_zero_grads(r->model, err);
    double sum = 0;
    for (int m = 0; st == IG_OK && m < r->accum; m++) {
        ig_batch b;
        double l = 0;
        if ((st = ig_loader_next(r->loader, &b, err)) != IG_OK) break;
        st = ig_gpt_forward_backward(r->model, b.tokens, (int)b.micro_batch, t->seq_len, &r->batch,
                                     1.0f / (float)r->accum, &l, NULL, err);
        sum += l;
    }
    if (st != IG_OK) return st;
    *loss = sum / r->accum;
    if ((st = ig_gpt_grad_norm(r->model, norm, err)) != IG_OK) return st;
    if (!isfinite(*loss) || !isfinite(*norm))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "step %lld: the %s is %s: the run diverged; lower optim.lr (now %g), set "
                          "optim.grad_clip (now %g) or a longer optim.warmup, and resume from the "
                          "last checkpoint",
                          (long long)step + 1, isfinite(*loss) ? "gradient norm" : "loss",
                          isfinite(*loss) ? (isnan(*norm) ? "NaN" : "infinite")
                                          : (isnan(*loss) ? "NaN" : "infinite"),
                          t->lr, t->grad_clip);
    /* torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1 */
    float scale = 1.0f;
    if (t->grad_clip > 0) {
        double coef = t->grad_clip / (*norm + 1e-6);
        if (coef < 1.0) scale = (float)coef;
    }
    *lr = ig_train_lr(t, step);
    return ig_gpt_adamw(r->model, (int)(step + 1), (float)*lr, (float)t->beta1, (float)t->beta2,
                        (float)t->eps, (float)t->weight_decay, scale, err);
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
                         .loader = ig_loader_state_get(r->loader),
                         .model = r->shape,
                         .seed = r->t->seed,
                         .eod_id = r->batch.eod_id,
                         .config_hash = r->o->config ? ig_config_hash(r->o->config) : 0,
                         .tp = 1,
                         .pp = 1,
                         .dp = 1,
                         .loss = loss};
    ig_status st = ig_ckpt_save(r->ctx, r->model, &info, r->o->config, r->t->run_dir,
                                r->t->ckpt_keep, res->checkpoint, sizeof res->checkpoint, err);
    if (st == IG_OK && !r->o->quiet) fprintf(r->log, "checkpoint: %s\n", res->checkpoint);
    return st;
}

static ig_status loop(run *r, int64_t first, ig_train_result *res, ig_err *err) {
    const ig_train_config *t = r->t;
    int gb = t->global_batch ? t->global_batch : t->micro_batch;
    double tokens_per_step = (double)gb * t->seq_len;
    double flops_per_step = 3.0 * ig_gpt_flops_per_token(&r->shape, t->seq_len) * tokens_per_step;
    double t_start = ig_now(), loss = NAN;
    int64_t step = first;
    ig_status st = IG_OK;
    for (; step < t->steps; step++) {
        double t0 = ig_now(), norm = 0, lr = 0;
        if ((st = train_step(r, step, &loss, &norm, &lr, err)) != IG_OK) break;
        double dt = ig_now() - t0;
        double tps = tokens_per_step / dt,
               mfu = r->peak_flops > 0 ? flops_per_step / dt / r->peak_flops : 0;
        if ((st = ig_metrics_step(r->metrics, step + 1, loss, lr, norm, tps, mfu, err)) != IG_OK)
            break;
        res->step = step + 1;
        res->loss = loss;
        if (!r->o->quiet && ((step + 1) % t->log_every == 0 || step + 1 == t->steps)) {
            char eta[32];
            double per = (ig_now() - t_start) / (double)(step + 1 - first);
            format_eta(per * (double)(t->steps - step - 1), eta, sizeof eta);
            fprintf(r->log,
                    "step %lld/%lld | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | mfu "
                    "%.2f | %.0f ms | eta %s\n",
                    (long long)step + 1, (long long)t->steps, loss, lr, norm, tps, mfu, dt * 1e3,
                    eta);
            fflush(r->log);
        }
        int last = step + 1 == t->steps;
        int stop = r->o->stop && *r->o->stop;
        if (t->eval_every > 0 && ((step + 1) % t->eval_every == 0 || last)) {
            double vl = 0;
            if ((st = validate(r, &vl, err)) != IG_OK) break;
            res->val_loss = vl;
            if ((st = ig_metrics_val(r->metrics, step + 1, vl, err)) != IG_OK) break;
            if (!r->o->quiet)
                fprintf(r->log, "step %lld | val loss %.6f\n", (long long)step + 1, vl);
        }
        if (last || stop || (t->ckpt_every > 0 && (step + 1) % t->ckpt_every == 0))
            if ((st = checkpoint(r, step + 1, loss, res, err)) != IG_OK) break;
        if (stop && !last) {
            res->stopped = 1;
            step++;
            break;
        }
    }
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
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        ig_status st = ig_remove_tree(p, err);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}

static ig_status make_run_dir(const char *dir, ig_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return ig_err_errno(err, errno, "cannot create %s", path);
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return ig_err_errno(err, errno, "cannot create the run directory %s", path);
    return IG_OK;
}

ig_status ig_train_run(ig_ctx *ctx, ig_comm *comm, const ig_train_opts *opts,
                       ig_train_result *result, ig_err *err) {
    ig_train_result local;
    ig_train_result *res = result ? result : &local;
    memset(res, 0, sizeof *res);
    res->val_loss = NAN;
    (void)comm;
    const ig_train_config *t = opts->cfg;
    ig_status st = ig_train_config_check(t, opts->config, err);
    if (st != IG_OK) return st;
    run r = {.ctx = ctx, .o = opts, .t = t, .log = opts->log ? opts->log : stdout};
    int gb = t->global_batch ? t->global_batch : t->micro_batch;
    r.accum = gb / t->micro_batch;
    int64_t first = 0;
    char ckpt[4096] = "";
    ig_ckpt_info info;

    if ((st = open_data(&r, err)) != IG_OK) goto done;
    int vocab = 0;
    int32_t eod = -1;
    if ((st = data_vocab(r.train_ds, &vocab, &eod, err)) != IG_OK && t->vocab_size == 0) goto done;
    st = IG_OK;
    if (t->vocab_size && vocab > t->vocab_size) {
        st = ig_err_set(err, IG_ERR_CONFIG,
                        "model.vocab_size %d is smaller than the shards' vocabulary of %d",
                        t->vocab_size, vocab);
        goto done;
    }
    r.shape = (ig_gpt_config){.n_layer = t->n_layer,
                              .n_head = t->n_head,
                              .d_model = t->d_model,
                              .seq_len = t->seq_len,
                              .vocab_size = t->vocab_size ? t->vocab_size : vocab};
    if ((st = ig_gpt_config_check(&r.shape, err)) != IG_OK) goto done;
    r.batch = (ig_gpt_batch_opts){t->eod_mask_loss, t->doc_attention, eod};
    if ((t->eod_mask_loss || t->doc_attention) && eod < 0) {
        st = ig_err_set(err, IG_ERR_CONFIG,
                        "train.eod_mask_loss and train.doc_attention need an end-of-document id, "
                        "and the shards' manifests name none");
        goto done;
    }
    if (!opts->resume && (st = clear_run_dir(t->run_dir, opts->overwrite, err)) != IG_OK) goto done;
    if ((st = make_run_dir(t->run_dir, err)) != IG_OK) goto done;

    ig_backend_opts bo = ig_backend_opts_default();
    if ((st = ig_backend_create(&r.be, ctx, &bo, err)) != IG_OK) goto done;
    st = ig_gpt_create(&r.model, ctx, r.be, &r.shape, t->micro_batch, t->seq_len, t->seed, err);
    if (st != IG_OK) goto done;

    ig_loader_state start = {0}, *startp = NULL;
    if (opts->resume) {
        if ((st = ig_ckpt_latest(t->run_dir, ckpt, sizeof ckpt, err)) != IG_OK) goto done;
        if ((st = ig_ckpt_load(ctx, ckpt, r.model, 1, &info, err)) != IG_OK) goto done;
        first = info.step;
        start = info.loader;
        startp = &start;
        if (!opts->quiet)
            fprintf(r.log, "resuming from %s (step %lld, %llu samples consumed)\n", ckpt,
                    (long long)first, (unsigned long long)start.consumed_samples);
    } else if (t->init_from && *t->init_from) {
        if ((st = ig_hf_load(ctx, r.model, t->init_from, err)) != IG_OK) goto done;
    }
    if ((st = make_loader(&r, startp, err)) != IG_OK) goto done;
    if ((st = ig_metrics_open(&r.metrics, ctx, t->run_dir, t->tensorboard, err)) != IG_OK)
        goto done;
    r.peak_flops = measure_peak(&r);
    if (!opts->quiet)
        fprintf(r.log,
                "model: %d layers, %d heads, d_model %d, %d positions, vocabulary %d (%d padded): "
                "%.2fM parameters on %s; %d x %d tokens per micro-batch, %d per step\n",
                r.shape.n_layer, r.shape.n_head, r.shape.d_model, r.shape.seq_len,
                r.shape.vocab_size, r.shape.padded_vocab, (double)ig_gpt_num_params(&r.shape) / 1e6,
                ig_backend_name(r.be), t->micro_batch, t->seq_len, r.accum);
    st = loop(&r, first, res, err);
    if (st == IG_OK && res->stopped && !opts->quiet)
        fprintf(r.log, "stopped after step %lld; resume with: ingot train CONFIG --resume %s\n",
                (long long)res->step, t->run_dir);
done:;
    ig_err cerr = {0};
    ig_status cs = ig_metrics_close(r.metrics, &cerr);
    if (st == IG_OK && cs != IG_OK) {
        st = cs;
        if (err) *err = cerr;
    }
    ig_loader_free(r.loader);
    ig_gpt_free(r.model);
    ig_backend_free(r.be);
    ig_data_stream_close(r.train_ds);
    ig_data_stream_close(r.val_ds);
    ig_data_resolved_free(&r.train_data);
    ig_data_resolved_free(&r.val_data);
    return st;
}
