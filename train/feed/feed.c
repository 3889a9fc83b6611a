/* feed.c - the trainer's micro-batches from the source an objective reads (feed.h): opening it by
 * name, the repeats of a validation micro-batch, and where each micro-batch is in the stream. The
 * sources are feed_tokens.c and feed_clips.c; a new kind of data is a source here and a line in
 * the list below.
 */
#include "feed_internal.h"

#include <string.h>

static const ig_feed_source *const sources[] = {&ig_feed_tokens, &ig_feed_clips};

ig_status ig_feed_open(ig_feed **out, ig_ctx *ctx, const ig_train_config *t, const ig_feed_opts *o,
                       ig_err *err) {
    *out = NULL;
    const ig_feed_source *src = NULL;
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++)
        if (o->input && strcmp(sources[i]->name, o->input) == 0) src = sources[i];
    if (!src)
        return ig_err_set(err, IG_ERR_INTERNAL, "no data source reads \"%s\"",
                          o->input ? o->input : "");
    ig_feed *f = ig_calloc(ctx, 1, sizeof *f);
    if (!f) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    f->ctx = ctx;
    f->t = t;
    f->o = *o;
    if (f->o.repeats < 1) f->o.repeats = 1;
    f->source = src;
    f->bo = (ig_batch_opts){0, 0, -1};
    ig_status st = src->open(f, err);
    if (st != IG_OK) {
        ig_feed_close(f);
        return st;
    }
    *out = f;
    return IG_OK;
}

void ig_feed_close(ig_feed *f) {
    if (!f) return;
    f->source->close(f);
    ig_free(f->ctx, f);
}

ig_status ig_feed_start(ig_feed *f, const ig_loader_state *start, int dp, int rank, int accum,
                        ig_err *err) {
    if (f->o.valid) dp = 1, rank = 0, accum = 1, start = NULL;
    f->repeat = f->o.repeats; /* the next call reads */
    return f->source->start(f, start, dp, rank, accum, err);
}

void ig_feed_set_batch_opts(ig_feed *f, const ig_batch_opts *bo) {
    f->bo = *bo;
}

ig_status ig_feed_next(ig_feed *f, ig_micro_batch *out, ig_err *err) {
    if (f->repeat >= f->o.repeats) {
        memset(&f->cur, 0, sizeof f->cur);
        ig_status st = f->source->next(f, &f->cur, err);
        if (st != IG_OK) return st;
        f->cur.t = f->t;
        f->cur.valid = f->o.valid;
        f->cur.repeats = f->o.repeats;
        f->repeat = 0;
    }
    f->cur.repeat = f->repeat++;
    *out = f->cur;
    return IG_OK;
}

ig_loader_state ig_feed_state(const ig_feed *f) {
    return f->source->state(f);
}

uint64_t ig_feed_key(const ig_feed *f) {
    return f->source->key(f);
}

int ig_feed_repeats(const ig_feed *f) {
    return f->o.repeats;
}

ig_status ig_feed_facts(ig_feed *f, ig_data_facts *out, ig_err *err) {
    memset(out, 0, sizeof *out);
    out->eod = -1;
    out->ctx = f->o.valid ? NULL : f->ctx; /* the training feed's fit speaks */
    return f->source->facts(f, out, err);
}

ig_status ig_feed_resume(ig_feed *f, const ig_feed_then *then, ig_loader_state *start,
                         int *rebuilt, char *said, size_t cap, ig_err *err) {
    *rebuilt = 0;
    if (cap) said[0] = '\0';
    return f->source->resume(f, then, start, rebuilt, said, cap, err);
}

int64_t ig_feed_global_batch(const ig_train_config *t) {
    return t->global_batch ? t->global_batch : t->micro_batch;
}
