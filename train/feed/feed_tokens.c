/* feed_tokens.c - the feed's source of token micro-batches (feed_internal.h): the blended, split
 * data stream over token shards (data.*) through the distributed loader; what the shards'
 * manifests say (their vocabulary, their end-of-document id); and whether a checkpoint's data is
 * this stream's.
 */
#include "feed_internal.h"

#include <string.h>

typedef struct tokens {
    ig_data_resolved data;
    ig_data_stream *ds;
    ig_loader *ld;
} tokens;

static ig_status open_stream(ig_ctx *ctx, const ig_train_config *t, int valid, uint64_t samples,
                             tokens *k, ig_err *err) {
    ig_data_config c = t->data;
    if (valid) c.part = IG_SPLIT_VALID;
    ig_status st = ig_data_config_resolve(&c, (uint32_t)t->model.seq_len, samples, &k->data, err);
    if (st == IG_OK) st = ig_data_stream_open(&k->ds, ctx, &k->data.opts, err);
    if (st == IG_OK) return IG_OK;
    if (!valid) return ig_err_prefix(err, st, "data");
    return ig_err_prefix(err, st,
                         "eval.every needs a validation split (e.g. data.split: \"98,2,0\")");
}

static void close_stream(tokens *k) {
    ig_loader_free(k->ld);
    ig_data_stream_close(k->ds);
    ig_data_resolved_free(&k->data);
    memset(k, 0, sizeof *k);
}

static ig_status tk_open(ig_feed *f, ig_err *err) {
    tokens *k = ig_calloc(f->ctx, 1, sizeof *k);
    if (!k) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    f->src = k;
    return open_stream(f->ctx, f->t, f->o.valid, f->o.samples, k, err);
}

static void tk_close(ig_feed *f) {
    tokens *k = f->src;
    if (!k) return;
    close_stream(k);
    ig_free(f->ctx, k);
}

static ig_status tk_start(ig_feed *f, const ig_loader_state *start, int dp, int rank, int accum,
                          ig_err *err) {
    tokens *k = f->src;
    ig_loader_free(k->ld);
    k->ld = NULL;
    ig_loader_opts lo = ig_loader_opts_default();
    lo.make_block = ig_data_stream_make_block;
    lo.block_user = k->ds;
    lo.micro_batch = (uint32_t)f->t->micro_batch;
    lo.grad_accum = (uint32_t)accum;
    lo.dp = (uint32_t)dp;
    lo.rank = (uint32_t)rank;
    if (f->o.valid) lo.prefetch_threads = 1;
    return ig_loader_create(&k->ld, f->ctx, &lo, start, err);
}

static ig_status tk_next(ig_feed *f, ig_micro_batch *out, ig_err *err) {
    tokens *k = f->src;
    ig_batch b;
    ig_status st = ig_loader_next(k->ld, &b, err);
    if (st != IG_OK) return st;
    out->tokens = b.tokens;
    out->B = (int)b.micro_batch;
    out->T = (int)b.seq_len;
    out->bo = &f->bo;
    out->unit = b.micro_index;
    return IG_OK;
}

static ig_loader_state tk_state(const ig_feed *f) {
    const tokens *k = f->src;
    return k->ld ? ig_loader_state_get(k->ld) : (ig_loader_state){0};
}

static uint64_t tk_key(const ig_feed *f) {
    return ig_data_stream_key(((const tokens *)f->src)->ds);
}

/* the largest vocabulary and the first end-of-document id the shards' manifests give */
static ig_status tk_facts(ig_feed *f, ig_data_facts *out, ig_err *err) {
    (void)err;
    tokens *k = f->src;
    for (size_t s = 0; k->ds && s < ig_data_stream_num_sources(k->ds); s++) {
        const ig_dataset *d = ig_data_stream_dataset(k->ds, s);
        for (size_t i = 0; i < ig_dataset_num_shards(d); i++) {
            const ig_manifest *m = ig_shard_manifest(ig_dataset_shard(d, i));
            if (!m) continue;
            if (m->vocab_size > (uint64_t)out->vocab) out->vocab = (int)m->vocab_size;
            if (out->eod < 0) out->eod = (int32_t)m->eod_id;
        }
    }
    return IG_OK;
}

/* Another global batch: the index is built for train.steps x global_batch samples, so unless
 * that product is the checkpoint's run's the order of the samples changes (refused); with it, the
 * run goes on in the same order when what is left of it fits in the index. A checkpoint that does
 * not record its global batch had consumed samples / steps. */
static ig_status global_batch_changed(ig_feed *f, const ig_feed_then *then, char *said,
                                      size_t cap, ig_err *err) {
    const ig_train_config *t = f->t;
    int64_t gb = ig_feed_global_batch(t), was = then->global_batch;
    uint64_t done = then->consumed, now = f->o.samples;
    if (!was && then->step > 0 && done % (uint64_t)then->step == 0)
        was = (int64_t)(done / (uint64_t)then->step);
    if (!was || was == gb) return IG_OK;
    if (then->samples && then->samples != now)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "train.global_batch is %lld now and the checkpoint's run had %lld: the "
                          "data's index would be built for %llu samples (train.steps %lld x %lld) "
                          "instead of its %llu, and the order of the samples would change: resume "
                          "with train.global_batch: %lld, or keep train.steps x "
                          "train.global_batch at %llu",
                          (long long)gb, (long long)was, (unsigned long long)now,
                          (long long)t->steps, (long long)gb, (unsigned long long)then->samples,
                          (long long)was, (unsigned long long)then->samples);
    uint64_t left = (uint64_t)(t->steps - then->step) * (uint64_t)gb;
    if (done + left > now)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "train.global_batch is %lld now and the checkpoint's run had %lld: the "
                          "%lld steps left from step %lld would read %llu samples past the %llu "
                          "consumed, more than the %llu of the data's index: resume with "
                          "train.global_batch: %lld",
                          (long long)gb, (long long)was, (long long)(t->steps - then->step),
                          (long long)then->step, (unsigned long long)left,
                          (unsigned long long)done, (unsigned long long)now, (long long)was);
    snprintf(said, cap,
             "train.global_batch is %lld now (the checkpoint's run had %lld): the run goes on from "
             "sample %llu in the same order, %lld samples a step",
             (long long)gb, (long long)was, (unsigned long long)done, (long long)gb);
    return IG_OK;
}

/* The stream's index depends on the samples it is built for (the run's length): a checkpoint saved
 * by a run of another length has another key. The data is the same when the index built for the
 * saved number of samples has the saved key: then the run goes on from the consumed samples of the
 * new index (a shuffle of all its samples, as Megatron's when --train-iters grows: the steps that
 * follow may read again samples that the first steps read, and skip others). */
static ig_status tk_resume(ig_feed *f, const ig_feed_then *then, ig_loader_state *start,
                           int *rebuilt, char *said, size_t cap, ig_err *err) {
    const ig_train_config *t = f->t;
    uint64_t now = f->o.samples, mine = tk_key(f), key = then->key, samples = then->samples;
    ig_status st = global_batch_changed(f, then, said, cap, err);
    if (st != IG_OK) return st;
    if (key == mine) return IG_OK;
    if (samples && samples != now) {
        tokens saved = {0};
        st = open_stream(f->ctx, t, 0, samples, &saved, err);
        uint64_t then_key = saved.ds ? ig_data_stream_key(saved.ds) : 0;
        close_stream(&saved);
        if (st != IG_OK) return ig_err_prefix(err, st, "the checkpoint's data");
        if (then_key == key) {
            start->index_key = mine;
            *rebuilt = 1;
            return IG_OK;
        }
    }
    if (!samples)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "the checkpoint's data index differs from this configuration's: "
                          "data.path, data.split, data.seed, model.seq_len or train.steps changed "
                          "since it was saved, or the shards did (a version-1 checkpoint does not "
                          "record its run's length: resume it with its own train.steps)");
    return ig_err_set(err, IG_ERR_CONFIG,
                      "the checkpoint was saved on other data than this configuration's: "
                      "data.path, data.split, data.seed or model.seq_len changed, or the shards "
                      "did (train.steps %lld: %llu samples%s)",
                      (long long)t->steps, (unsigned long long)now,
                      samples == now ? ", as the checkpoint's run" : "");
}

const ig_feed_source ig_feed_tokens = {.name = "tokens",
                                       .open = tk_open,
                                       .close = tk_close,
                                       .start = tk_start,
                                       .next = tk_next,
                                       .state = tk_state,
                                       .key = tk_key,
                                       .facts = tk_facts,
                                       .resume = tk_resume};
