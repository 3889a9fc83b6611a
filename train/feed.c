/* feed.c - the trainer's micro-batches from either loader (feed.h): the token loader over the
 * data stream, or the clip loader over frame shards with the draws' keys and the validation grid.
 */
#include "feed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ig_feed {
    ig_ctx *ctx;
    const ig_train_config *t;
    ig_input_kind kind;
    int valid;
    /* tokens */
    ig_data_resolved data;
    ig_data_stream *ds;
    ig_loader *ld;
    ig_batch_opts bo;
    /* clips */
    ig_clip_dataset *clips;
    ig_clip_loader *cl;
    ig_clip_batch cb; /* the micro-batch given (validation: again for each time of the grid) */
    int repeat, repeats;
    float *times; /* [the largest batch] the grid's time of the repeat (validation) */
    size_t times_cap;
    int32_t *captions, *caption_lens; /* model.cond caption: [B, caption_len], [B] */
    size_t captions_cap;
    ig_clip_input in;
};

/* The validation draws are keyed apart from training's (which key by the micro-batch index). */
#define VALID_KEY ((uint64_t)1 << 63)

static ig_status open_tokens(ig_feed *f, uint64_t samples, ig_err *err) {
    const ig_train_config *t = f->t;
    ig_data_config c = t->data;
    if (f->valid) c.part = IG_SPLIT_VALID;
    ig_status st = ig_data_config_resolve(&c, (uint32_t)t->model.seq_len, samples, &f->data, err);
    if (st == IG_OK) st = ig_data_stream_open(&f->ds, f->ctx, &f->data.opts, err);
    if (st == IG_OK) return IG_OK;
    if (!f->valid) return ig_err_prefix(err, st, "data");
    return ig_err_prefix(err, st,
                         "eval.every needs a validation split (e.g. data.split: \"98,2,0\")");
}

ig_status ig_clip_labels_check(ig_ctx *ctx, const ig_clip_dataset *ds, int num_classes, int warn,
                               ig_err *err) {
    uint64_t n = ig_clip_dataset_clips(ds), g = 0;
    uint32_t top = 0;
    size_t top_shard = 0;
    uint64_t top_clip = 0;
    int any = 0;
    for (size_t k = 0; k < ig_clip_dataset_num_shards(ds); k++) {
        const ig_video_shard *sh = ig_clip_dataset_shard(ds, k);
        uint64_t clips = ig_video_shard_clips(sh), none = 0;
        for (uint64_t i = 0; i < clips && g < n; i++, g++) {
            uint32_t y = ig_video_shard_clip(sh, i).label;
            if (y == IG_CLIP_NONE) {
                none++;
            } else if (!any || y > top) {
                any = 1, top = y, top_shard = k, top_clip = i;
            }
        }
        if (clips && none == clips)
            return ig_err_set(err, IG_ERR_CONFIG,
                              "model.cond class: the clip shard %s holds no labels (%llu clips, "
                              "none labelled: made from a manifest without a 'label' column, or "
                              "before labels): make it with labels, or train it with model.cond "
                              "none",
                              ig_video_shard_prefix(sh), (unsigned long long)clips);
        if (none && warn)
            ig_warn(ctx,
                    "%s: %llu of %llu clips have no label: they train as the null class, as "
                    "dropped labels do",
                    ig_video_shard_prefix(sh), (unsigned long long)none, (unsigned long long)clips);
    }
    if (any && top >= (uint32_t)num_classes)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.cond class: the clip shard %s holds label %u (its clip %llu, the "
                          "largest of the data), and model.num_classes %d takes labels 0 .. %d: "
                          "set model.num_classes: %llu or more, or remake the shards",
                          ig_video_shard_prefix(ig_clip_dataset_shard(ds, top_shard)), top,
                          (unsigned long long)top_clip, num_classes, num_classes - 1,
                          (unsigned long long)top + 1);
    return IG_OK;
}

/* data.path of clips: prefixes only (a blend of clip shards by weight is not a thing the clip
 * loader does). */
static ig_status open_clips(ig_feed *f, ig_err *err) {
    const ig_train_config *t = f->t;
    for (size_t i = 0; i < t->data.n_path; i++) {
        char *end = NULL;
        strtod(t->data.path[i], &end);
        if (end != t->data.path[i] && *end == '\0')
            return ig_err_set(err, IG_ERR_CONFIG,
                              "data.path: %s is a number: clip shards are listed as prefixes "
                              "only (the clip loader does not blend them by weight)",
                              t->data.path[i]);
    }
    ig_status st = ig_clip_dataset_open(&f->clips, f->ctx, t->data.path, t->data.n_path, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "data");
    if (ig_clip_dataset_clips(f->clips) == 0)
        return ig_err_set(err, IG_ERR_CONFIG, "data: the clip shards hold no clips");
    /* (num_classes < 1 is the model's check to refuse, with its own message) */
    if (t->model.cond == IG_COND_CLASS && t->model.num_classes > 0 &&
        (st = ig_clip_labels_check(f->ctx, f->clips, t->model.num_classes, !f->valid, err)) !=
            IG_OK)
        return ig_err_prefix(err, st, "data");
    f->repeats = f->valid ? t->eval_timesteps : 1;
    if (f->repeats < 1) f->repeats = 1;
    return IG_OK;
}

ig_status ig_feed_open(ig_feed **out, ig_ctx *ctx, const ig_train_config *t, ig_input_kind kind,
                       int valid, uint64_t samples, ig_err *err) {
    *out = NULL;
    ig_feed *f = ig_calloc(ctx, 1, sizeof *f);
    if (!f) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    f->ctx = ctx;
    f->t = t;
    f->kind = kind;
    f->valid = valid;
    f->repeats = 1;
    ig_status st = kind == IG_INPUT_CLIPS ? open_clips(f, err) : open_tokens(f, samples, err);
    if (st != IG_OK) {
        ig_feed_close(f);
        return st;
    }
    *out = f;
    return IG_OK;
}

void ig_feed_close(ig_feed *f) {
    if (!f) return;
    ig_loader_free(f->ld);
    ig_data_stream_close(f->ds);
    ig_data_resolved_free(&f->data);
    ig_clip_loader_free(f->cl);
    ig_clip_dataset_close(f->clips);
    ig_free(f->ctx, f->times);
    ig_free(f->ctx, f->captions);
    ig_free(f->ctx, f->caption_lens);
    ig_free(f->ctx, f);
}

ig_status ig_feed_start(ig_feed *f, const ig_loader_state *start, int dp, int rank, int accum,
                        ig_err *err) {
    const ig_train_config *t = f->t;
    if (f->valid) dp = 1, rank = 0, accum = 1, start = NULL;
    ig_loader_free(f->ld);
    ig_clip_loader_free(f->cl);
    f->ld = NULL;
    f->cl = NULL;
    f->repeat = f->repeats; /* the next call reads */
    if (f->kind == IG_INPUT_CLIPS) {
        ig_clip_loader_opts o = ig_clip_loader_opts_default();
        o.dataset = f->clips;
        o.seed = t->data.seed;
        o.batch_size = (uint32_t)t->micro_batch;
        o.shuffle = !f->valid;
        o.dp = (uint32_t)dp;
        o.rank = (uint32_t)rank;
        o.grad_accum = (uint32_t)accum;
        if (f->valid) o.prefetch_threads = 1;
        return ig_clip_loader_create(&f->cl, f->ctx, &o, start, err);
    }
    ig_loader_opts lo = ig_loader_opts_default();
    lo.make_block = ig_data_stream_make_block;
    lo.block_user = f->ds;
    lo.micro_batch = (uint32_t)t->micro_batch;
    lo.grad_accum = (uint32_t)accum;
    lo.dp = (uint32_t)dp;
    lo.rank = (uint32_t)rank;
    if (f->valid) lo.prefetch_threads = 1;
    return ig_loader_create(&f->ld, f->ctx, &lo, start, err);
}

void ig_feed_set_batch_opts(ig_feed *f, const ig_batch_opts *bo) {
    f->bo = *bo;
}

/* The captions' tokens of the batch's clips (model.cond caption), cut to caption_len. */
static ig_status read_captions(ig_feed *f, const ig_clip_batch *b, ig_err *err) {
    size_t Tk = (size_t)f->t->model.caption_len;
    if (f->captions_cap < b->n) {
        ig_free(f->ctx, f->captions);
        ig_free(f->ctx, f->caption_lens);
        f->captions = ig_alloc(f->ctx, b->n * Tk * sizeof(int32_t));
        f->caption_lens = ig_alloc(f->ctx, b->n * sizeof(int32_t));
        f->captions_cap = f->captions && f->caption_lens ? b->n : 0;
        if (!f->captions_cap) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < b->n; i++) {
        size_t len = 0;
        ig_status st =
            ig_clip_dataset_caption(f->clips, b->clips[i], f->captions + i * Tk, Tk, &len, err);
        if (st != IG_OK) return st;
        f->caption_lens[i] = (int32_t)(len < Tk ? len : Tk);
    }
    return IG_OK;
}

static ig_status next_clips(ig_feed *f, ig_stage_input *out, ig_err *err) {
    if (f->repeat >= f->repeats) {
        ig_status st = ig_clip_loader_next(f->cl, &f->cb, err);
        if (st == IG_OK && f->t->model.cond == IG_COND_CAPTION) st = read_captions(f, &f->cb, err);
        if (st != IG_OK) return st;
        f->repeat = 0;
    }
    const ig_clip_batch *b = &f->cb;
    ig_clip_input *in = &f->in;
    *in = (ig_clip_input){.frames = b->frames,
                          .B = (int)b->n,
                          .F = (int)b->frames_per_clip,
                          .H = (int)b->height,
                          .W = (int)b->width,
                          .labels = b->labels,
                          .captions = f->t->model.cond == IG_COND_CAPTION ? f->captions : NULL,
                          .caption_lens = f->caption_lens,
                          .drop_labels = !f->valid,
                          .seed = f->t->data.seed,
                          .key = f->valid ? VALID_KEY | b->unit : b->unit,
                          .shift = f->t->flow_shift};
    if (f->valid) {
        if (f->times_cap < b->n) {
            float *p = ig_realloc(f->ctx, f->times, b->n * sizeof *p);
            if (!p) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            f->times = p;
            f->times_cap = b->n;
        }
        for (uint32_t i = 0; i < b->n; i++)
            f->times[i] = (float)(((double)f->repeat + 0.5) / (double)f->repeats);
        in->t = f->times;
    }
    f->repeat++;
    *out = (ig_stage_input){.clips = in};
    return IG_OK;
}

ig_status ig_feed_next(ig_feed *f, ig_stage_input *out, ig_err *err) {
    if (f->kind == IG_INPUT_CLIPS) return next_clips(f, out, err);
    ig_batch b;
    ig_status st = ig_loader_next(f->ld, &b, err);
    if (st != IG_OK) return st;
    *out = (ig_stage_input){
        .tokens = b.tokens, .B = (int)b.micro_batch, .T = (int)b.seq_len, .bo = &f->bo};
    return IG_OK;
}

ig_loader_state ig_feed_state(const ig_feed *f) {
    if (f->cl) return ig_clip_loader_state(f->cl);
    if (f->ld) return ig_loader_state_get(f->ld);
    return (ig_loader_state){0};
}

uint64_t ig_feed_key(const ig_feed *f) {
    if (f->kind == IG_INPUT_TOKENS) return ig_data_stream_key(f->ds);
    return ig_feed_state(f).index_key;
}

int ig_feed_repeats(const ig_feed *f) {
    return f->repeats;
}

ig_status ig_feed_vocab(const ig_feed *f, int *vocab, int32_t *eod, ig_err *err) {
    *vocab = 0;
    *eod = -1;
    for (size_t k = 0; f->ds && k < ig_data_stream_num_sources(f->ds); k++) {
        const ig_dataset *d = ig_data_stream_dataset(f->ds, k);
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

uint64_t ig_feed_caption_vocab(const ig_feed *f) {
    return f->clips ? ig_clip_dataset_caption_vocab(f->clips) : 0;
}

size_t ig_feed_shapes(const ig_feed *f, ig_clip_shape *out, size_t cap) {
    if (!f->clips) return 0;
    size_t nb = 0, n = 0;
    const ig_clip_bucket *bk = ig_clip_dataset_buckets(f->clips, &nb);
    uint64_t clips = ig_clip_dataset_clips(f->clips);
    for (uint64_t g = 0; g < clips; g++) {
        ig_clip_info c = ig_clip_dataset_info(f->clips, g, NULL, NULL);
        ig_clip_shape s = {(int)f->t->micro_batch, (int)c.frames, (int)c.height, (int)c.width};
        if (c.bucket != IG_CLIP_NONE && c.bucket < nb)
            s = (ig_clip_shape){(int)bk[c.bucket].batch_size, (int)bk[c.bucket].frames,
                                (int)bk[c.bucket].height, (int)bk[c.bucket].width};
        size_t i = 0;
        for (; i < n && i < cap; i++)
            if (!memcmp(&out[i], &s, sizeof s)) break;
        if (i < n) continue;
        if (n < cap) out[n] = s;
        n++;
    }
    return n;
}
