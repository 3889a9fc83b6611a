/* layout_check.c - the checks of a training layout that need no communicator (parallel.h's
 * ig_layout_check): parallel.tp, pp, sp, sp_mode / sp_size, zero and pipeline_layers against the
 * number of processes, the model's family (heads, vocabulary) and the batch. The planner (plan.c)
 * asks it about layouts no process runs yet, so that it lists only what ig_layout_create accepts;
 * the messages are ig_layout_create's, with the numbers and the key to change.
 */
#include "family/family.h"
#include "parallel.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ig_status refuse(ig_err *err, const char *fmt, ...) IG_PRINTF(2, 3);
static ig_status refuse(ig_err *err, const char *fmt, ...) {
    char msg[IG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ig_err_set(err, IG_ERR_CONFIG, "%s", msg);
}

static ig_status stage_layers(ig_layout *l, const ig_train_config *t, int n_layer, ig_err *err) {
    l->stage_layers = ig_calloc(l->ctx, (size_t)l->pp + 1, sizeof(int));
    if (!l->stage_layers) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (t->n_pipeline_layers == 0) {
        if (n_layer % l->pp)
            return refuse(err,
                          "parallel.pp %d does not divide model.n_layer %d: each pipeline stage "
                          "gets n_layer / pp layers (or list them in parallel.pipeline_layers)",
                          l->pp, n_layer);
        for (int s = 0; s <= l->pp; s++) l->stage_layers[s] = s * (n_layer / l->pp);
        return IG_OK;
    }
    if ((int)t->n_pipeline_layers != l->pp)
        return refuse(err, "parallel.pipeline_layers lists %zu stages, but parallel.pp is %d",
                      t->n_pipeline_layers, l->pp);
    int sum = 0;
    for (int s = 0; s < l->pp; s++) {
        char *end = NULL;
        long v = strtol(t->pipeline_layers[s], &end, 10);
        if (!end || *end || v < 1 || v > n_layer)
            return refuse(err,
                          "parallel.pipeline_layers: stage %d has \"%s\" layers; each stage needs "
                          "at least 1 and at most model.n_layer %d, and the stages add up to %d",
                          s, t->pipeline_layers[s], n_layer, n_layer);
        l->stage_layers[s] = sum;
        sum += (int)v;
    }
    if (sum != n_layer)
        return refuse(err, "parallel.pipeline_layers adds up to %d layers, but model.n_layer is %d",
                      sum, n_layer);
    l->stage_layers[l->pp] = sum;
    return IG_OK;
}

ig_status ig_layout_check(ig_layout *l, const ig_train_config *t, const ig_model_config *shape,
                          ig_err *err) {
    l->tp = t->tp > 0 ? t->tp : 1; /* 0: a config struct filled by hand */
    l->pp = t->pp > 0 ? t->pp : 1;
    l->sp = t->sp;
    l->zero = t->zero;
    l->usp = t->sp_mode == 1 && t->sp_size > 1 ? t->sp_size : 1;
    int64_t mp = (int64_t)l->tp * l->pp * l->usp; /* up to 4096^3: not an int */
    if (mp > l->world || l->world % mp)
        return refuse(err,
                      "%d processes cannot be split into parallel.tp %d x parallel.pp %d%s = %lld "
                      "ranks per model replica: start a multiple of %lld",
                      l->world, l->tp, l->pp, l->usp > 1 ? " x parallel.sp_size (ulysses)" : "",
                      (long long)mp, (long long)mp);
    l->dp = (int)(l->world / mp);
    if (t->dp && t->dp != l->dp)
        return refuse(err,
                      "parallel.dp %d does not match the %d processes started: world %d / "
                      "(tp %d x pp %d x sp_size %d) = %d",
                      t->dp, l->world, l->world, l->tp, l->pp, l->usp, l->dp);
    const ig_family *fam = ig_family_of(shape->arch);
    ig_status st = fam ? fam->check_layout(shape, l->tp, err)
                       : refuse(err, "model.arch %d is not a known family", shape->arch);
    if (st != IG_OK) return st;
    if (t->sp_mode == 0 && t->sp_size > 1)
        return refuse(err,
                      "parallel.sp_size %d is Ulysses' (parallel.sp_mode: ulysses); "
                      "Megatron's sequence parallelism shards over the tp ranks "
                      "(parallel.sp: true)",
                      t->sp_size);
    if (t->sp_mode == 1 && l->sp)
        return refuse(err, "parallel.sp (Megatron's sequence parallelism) and parallel.sp_mode "
                           "ulysses are two ways of cutting the sequence: choose one");
    if (l->usp > 1 && !fam->ulysses)
        return refuse(err,
                      "parallel.sp_mode ulysses is built for model.arch dit (a diffusion "
                      "transformer's long token sequences), not %s: use parallel.sp (Megatron's)",
                      fam->arch);
    if (l->usp > 1 && shape->n_head % (l->tp * l->usp))
        return refuse(err,
                      "parallel.sp_mode ulysses: model.n_head %d is not divisible by parallel.tp "
                      "%d x parallel.sp_size %d = %d (each rank attends over whole heads)",
                      shape->n_head, l->tp, l->usp, l->tp * l->usp);
    if (l->sp && l->tp < 2)
        return refuse(err, "parallel.sp needs parallel.tp > 1 (sequence parallelism shards what "
                           "tensor parallelism replicates)");
    if (fam->objective->check_layout &&
        (st = fam->objective->check_layout(t, shape, l->tp, l->sp, err)) != IG_OK)
        return st;
    int64_t gb = t->global_batch ? t->global_batch : t->micro_batch;
    int64_t per = (int64_t)t->micro_batch * l->dp; /* samples a step takes at least */
    if (per > gb || gb % per)
        return refuse(err,
                      "train.global_batch %lld is not a multiple of train.micro_batch %d x dp %d = "
                      "%lld: each data-parallel rank runs global_batch / (micro_batch x dp) "
                      "micro-batches per step",
                      (long long)gb, t->micro_batch, l->dp, (long long)per);
    l->accum = (int)(gb / per);
    st = stage_layers(l, t, shape->n_layer, err);
    if (st != IG_OK) return st;
    l->l0 = l->stage_layers[l->pp_rank];
    l->l1 = l->stage_layers[l->pp_rank + 1];
    return IG_OK;
}
