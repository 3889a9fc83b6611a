/* feed_clips.c - the feed's source of clip micro-batches (feed_internal.h): the bucketed clip
 * loader over frame shards, or latent shards of them (data.path lists their prefixes; a
 * micro-batch is train.micro_batch clips of one shape, or a bucket's batch; of latents, their
 * posterior's moments and the VAE they came from), with each clip's caption tokens when the model
 * reads captions - or, with data.caption_features, each clip's caption features from the feature
 * shards made of these clips (refused when they were made of others); what the shards say (their
 * captions' tokenizer or encoder, the shapes they come in). A clip stream does not depend on the
 * run's length: a checkpoint's stream is this one when its key is.
 */
#include "feed_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct clips {
    ig_clip_dataset *ds;
    ig_clip_loader *cl;
    ig_clip_batch cb;
    int32_t *captions, *caption_lens; /* [B, caption_len], [B] */
    size_t captions_cap;
    ig_feature_dataset *fd; /* data.caption_features (NULL: none) */
    float *features;        /* [B, caption_len, D] the micro-batch's caption features */
    size_t features_cap;
    ig_clip_shape *shapes; /* [IG_FEED_MAX_SHAPES] */
} clips;

/* data.caption_features: the features of the clips of data.path, clip for clip. */
static ig_status open_features(ig_feed *f, clips *k, ig_err *err) {
    const ig_train_config *t = f->t;
    if (!t->caption_features || !*t->caption_features) return IG_OK;
    const char *fp = t->caption_features;
    ig_status st = ig_feature_dataset_open(&k->fd, f->ctx, &fp, 1, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "data.caption_features");
    char names[1024] = "";
    for (size_t i = 0; i < t->data.n_path && strlen(names) < sizeof names - 300; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? " " : "",
                 t->data.path[i]);
    st = ig_feature_dataset_match(k->fd, k->ds, fp, names, err);
    return st == IG_OK ? IG_OK : ig_err_prefix(err, st, "data.caption_features");
}

/* data.path of clips: prefixes only (a blend of clip shards by weight is not a thing the clip
 * loader does). */
static ig_status cl_open(ig_feed *f, ig_err *err) {
    const ig_train_config *t = f->t;
    clips *k = ig_calloc(f->ctx, 1, sizeof *k);
    if (!k) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    f->src = k;
    for (size_t i = 0; i < t->data.n_path; i++) {
        char *end = NULL;
        strtod(t->data.path[i], &end);
        if (end != t->data.path[i] && *end == '\0')
            return ig_err_set(err, IG_ERR_CONFIG,
                              "data.path: %s is a number: clip shards are listed as prefixes "
                              "only (the clip loader does not blend them by weight)",
                              t->data.path[i]);
    }
    ig_status st = ig_clip_dataset_open_any(&k->ds, f->ctx, t->data.path, t->data.n_path, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "data");
    if (ig_clip_dataset_clips(k->ds) == 0)
        return ig_err_set(err, IG_ERR_CONFIG, "data: the clip shards hold no clips");
    return open_features(f, k, err);
}

static void cl_close(ig_feed *f) {
    clips *k = f->src;
    if (!k) return;
    ig_clip_loader_free(k->cl);
    ig_clip_dataset_close(k->ds);
    ig_feature_dataset_close(k->fd);
    ig_free(f->ctx, k->features);
    ig_free(f->ctx, k->captions);
    ig_free(f->ctx, k->caption_lens);
    ig_free(f->ctx, k->shapes);
    ig_free(f->ctx, k);
}

static ig_status cl_start(ig_feed *f, const ig_loader_state *start, int dp, int rank, int accum,
                          ig_err *err) {
    clips *k = f->src;
    ig_clip_loader_free(k->cl);
    k->cl = NULL;
    ig_clip_loader_opts o = ig_clip_loader_opts_default();
    o.dataset = k->ds;
    o.seed = f->t->data.seed;
    o.batch_size = (uint32_t)f->t->micro_batch;
    o.shuffle = !f->o.valid;
    o.dp = (uint32_t)dp;
    o.rank = (uint32_t)rank;
    o.grad_accum = (uint32_t)accum;
    if (f->o.valid) o.prefetch_threads = 1;
    return ig_clip_loader_create(&k->cl, f->ctx, &o, start, err);
}

/* The captions' features of the batch's clips (their first caption_len rows, as fp32; the rows
 * past a caption's are left as they are: the model reads caption_lens of them). */
static ig_status read_features(ig_feed *f, clips *k, ig_err *err) {
    const ig_clip_batch *b = &k->cb;
    const ig_feature_meta *m = ig_feature_dataset_meta(k->fd);
    size_t Tk = (size_t)f->o.caption_len, D = m->width, per = Tk * D;
    if (k->features_cap < b->n) {
        ig_free(f->ctx, k->features);
        k->features = ig_alloc(f->ctx, b->n * per * sizeof(float));
        k->features_cap = k->features ? b->n : 0;
        if (!k->features_cap)
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory for %u clips' caption features",
                              b->n);
    }
    for (uint32_t i = 0; i < b->n; i++) {
        const void *v = NULL;
        uint32_t L = 0;
        ig_status st = ig_feature_dataset_clip(
            k->fd, ig_clip_dataset_source_clip(k->ds, b->clips[i]), &v, &L, err);
        if (st != IG_OK) return st;
        size_t n = (L < Tk ? L : Tk) * D;
        float *out = k->features + i * per;
        if (n && m->dtype == IG_FEATURES_BF16)
            ig_backend_bf16_to_f32_n(out, v, n);
        else if (n)
            memcpy(out, v, n * sizeof(float)); /* little-endian, as stored */
        k->caption_lens[i] = (int32_t)(L < Tk ? L : Tk);
    }
    return IG_OK;
}

/* The captions' tokens of the batch's clips, cut to caption_len. */
static ig_status read_captions(ig_feed *f, clips *k, ig_err *err) {
    const ig_clip_batch *b = &k->cb;
    size_t Tk = (size_t)f->o.caption_len;
    if (k->captions_cap < b->n) {
        ig_free(f->ctx, k->captions);
        ig_free(f->ctx, k->caption_lens);
        k->captions = ig_alloc(f->ctx, b->n * Tk * sizeof(int32_t));
        k->caption_lens = ig_alloc(f->ctx, b->n * sizeof(int32_t));
        k->captions_cap = k->captions && k->caption_lens ? b->n : 0;
        if (!k->captions_cap) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    if (k->fd) return read_features(f, k, err);
    for (uint32_t i = 0; i < b->n; i++) {
        size_t len = 0;
        ig_status st =
            ig_clip_dataset_caption(k->ds, b->clips[i], k->captions + i * Tk, Tk, &len, err);
        if (st != IG_OK) return st;
        k->caption_lens[i] = (int32_t)(len < Tk ? len : Tk);
    }
    return IG_OK;
}

static ig_status cl_next(ig_feed *f, ig_micro_batch *out, ig_err *err) {
    clips *k = f->src;
    ig_status st = ig_clip_loader_next(k->cl, &k->cb, err);
    if (st == IG_OK && f->o.caption_len > 0) st = read_captions(f, k, err);
    if (st != IG_OK) return st;
    out->clips = &k->cb;
    out->B = (int)k->cb.n;
    out->captions = f->o.caption_len > 0 && !k->fd ? k->captions : NULL;
    out->features = f->o.caption_len > 0 && k->fd ? k->features : NULL;
    out->caption_lens = f->o.caption_len > 0 ? k->caption_lens : NULL;
    out->caption_len = f->o.caption_len;
    out->unit = k->cb.unit;
    out->vae = ig_clip_dataset_vae(k->ds);
    return IG_OK;
}

static ig_loader_state cl_state(const ig_feed *f) {
    const clips *k = f->src;
    return k->cl ? ig_clip_loader_state(k->cl) : (ig_loader_state){0};
}

static uint64_t cl_key(const ig_feed *f) {
    return cl_state(f).index_key;
}

void ig_clip_facts(const ig_clip_dataset *ds, ig_data_facts *out) {
    out->caption_vocab = ig_clip_dataset_caption_vocab(ds);
    out->latents = ig_clip_dataset_vae(ds);
    out->channels = out->latents ? (int)out->latents->latent_channels : 3;
    ig_label_facts *L = &out->labels;
    memset(L, 0, sizeof *L);
    uint64_t n = ig_clip_dataset_clips(ds), g = 0;
    for (size_t k = 0; k < ig_clip_dataset_num_shards(ds); k++) {
        const char *prefix = ig_clip_dataset_shard_prefix(ds, k);
        uint64_t held = ig_clip_dataset_shard_clips(ds, k), none = 0;
        for (uint64_t i = 0; i < held && g < n; i++, g++) {
            uint32_t y = ig_clip_dataset_info(ds, g, NULL, NULL).label;
            if (y == IG_CLIP_NONE) {
                none++;
            } else if (L->labelled++ == 0 || y > L->top) {
                L->top = y, L->top_shard = prefix, L->top_clip = i;
            }
        }
        if (held && none == held && !L->bare_shard) {
            L->bare_shard = prefix;
            L->bare_clips = held;
        } else if (none && none < held) {
            if (!L->unlabelled_shard) L->unlabelled_shard = prefix;
            L->unlabelled += none;
        }
    }
}

/* the captions' tokenizer's vocabulary, the labels, and every shape of micro-batch the clips come
 * in (a bucket's batch and size, or train.micro_batch clips of a clip's size) */
static ig_status cl_facts(ig_feed *f, ig_data_facts *out, ig_err *err) {
    clips *k = f->src;
    if (!k->shapes && !(k->shapes = ig_alloc(f->ctx, IG_FEED_MAX_SHAPES * sizeof *k->shapes)))
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_clip_facts(k->ds, out);
    if (k->fd) {
        out->caption_encoder = &ig_feature_dataset_meta(k->fd)->encoder;
        out->caption_features_len = (int)ig_feature_dataset_meta(k->fd)->caption_len;
    }
    size_t nb = 0, n = 0;
    const ig_clip_bucket *bk = ig_clip_dataset_buckets(k->ds, &nb);
    uint64_t total = ig_clip_dataset_clips(k->ds);
    for (uint64_t g = 0; g < total; g++) {
        ig_clip_info c = ig_clip_dataset_info(k->ds, g, NULL, NULL);
        ig_clip_shape s = {(int)f->t->micro_batch, (int)c.frames, (int)c.height, (int)c.width};
        if (c.bucket != IG_CLIP_NONE && c.bucket < nb)
            s = (ig_clip_shape){(int)bk[c.bucket].batch_size, (int)bk[c.bucket].frames,
                                (int)bk[c.bucket].height, (int)bk[c.bucket].width};
        size_t i = 0;
        for (; i < n && i < IG_FEED_MAX_SHAPES; i++)
            if (!memcmp(&k->shapes[i], &s, sizeof s)) break;
        if (i < n) continue;
        if (n < IG_FEED_MAX_SHAPES) k->shapes[n] = s;
        n++;
    }
    out->shapes = k->shapes;
    out->n_shapes = n;
    return IG_OK;
}

/* The clip stream does not depend on the run's length or its global batch (the clip loader
 * checks the key as it resumes): another global batch is only said. */
static ig_status cl_resume(ig_feed *f, const ig_feed_then *then, ig_loader_state *start,
                           int *rebuilt, char *said, size_t cap, ig_err *err) {
    (void)start, (void)rebuilt, (void)err;
    int64_t gb = ig_feed_global_batch(f->t);
    if (then->global_batch && then->global_batch != gb)
        snprintf(said, cap,
                 "train.global_batch is %lld now (the checkpoint's run had %lld): the run goes on "
                 "from micro-batch %llu in the same order, %lld samples a step",
                 (long long)gb, (long long)then->global_batch, (unsigned long long)then->consumed,
                 (long long)gb);
    return IG_OK;
}

const ig_feed_source ig_feed_clips = {.name = "clips",
                                      .open = cl_open,
                                      .close = cl_close,
                                      .start = cl_start,
                                      .next = cl_next,
                                      .state = cl_state,
                                      .key = cl_key,
                                      .facts = cl_facts,
                                      .resume = cl_resume};
