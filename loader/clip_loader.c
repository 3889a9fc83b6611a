/* clip_loader.c - the clip loader (loader.h): frame (or latent) shards as micro-batches of one
 * shape each, Open-Sora's VariableVideoBatchSampler over ingot's infinite loader.
 *
 * The loader's stream is made of micro-batches ("units"): unit i of epoch b is a group's
 * micro-batch, and a sample of the stream is that whole micro-batch, written by get_bytes as a
 * small header (group, clips, shape), the clip ids, their labels and caption documents, and the
 * clips' frames (or latents' moments). The loader's prefetch
 * threads read the clips; its proxy sampler deals units to ranks; its state (consumed samples)
 * counts units, so resuming, also at another dp, is exact.
 */
#include "loader/loader.h"

#include <stdlib.h>
#include <string.h>

#define HEADER_BYTES 32 /* u32 bucket, n, frames, height, width, group; u64 reserved */
/* A unit: the header, u64 clip ids [most], u32 labels [most], u32 caption documents [most] (most:
 * the largest batch of any group), then the frames from frames_at (64-byte aligned). */

typedef struct group {
    uint32_t bucket; /* IG_CLIP_NONE: a shape group */
    uint32_t frames, height, width, batch;
    uint64_t *clips; /* dataset order */
    uint64_t n, units;
} group;

typedef struct clip_stream {
    ig_ctx *ctx;
    ig_clip_loader_opts o;
    group *g;
    size_t n_groups;
    uint64_t units;     /* per epoch */
    uint64_t total;     /* clips per epoch, padding included */
    size_t labels_at;   /* where the labels start in a unit (the captions follow: most of each) */
    size_t captions_at; /* where the caption documents start */
    size_t frames_at;   /* where the frames start in a unit */
    size_t unit_bytes;  /* the largest unit */
    uint64_t key;
} clip_stream;

typedef struct clip_block {
    const clip_stream *cs;
    uint64_t *order;    /* [total]: every group's clips, shuffled and padded, group after group */
    uint64_t *first;    /* [units]: the unit's first entry of order */
    uint32_t *group_of; /* [units] */
} clip_block;

struct ig_clip_loader {
    ig_loader *ld;
    clip_stream cs;
};

ig_clip_loader_opts ig_clip_loader_opts_default(void) {
    return (ig_clip_loader_opts){.seed = 1234,
                                 .batch_size = 1,
                                 .shuffle = 1,
                                 .dp = 1,
                                 .grad_accum = 1,
                                 .prefetch_threads = 2,
                                 .prefetch_depth = 4};
}

/* ---- an epoch ---------------------------------------------------------------------------------
 */

static ig_rng_key epoch_key(uint64_t seed, uint64_t epoch, uint64_t what) {
    uint64_t in[3] = {seed, epoch, what};
    return ig_rng_key_make(ig_xxh3_64(in, sizeof in), "ingot-clip-loader");
}

/* Fisher-Yates over v[n] with counter-based draws: the same order on every rank and thread. */
static void shuffle(uint64_t *v, uint64_t n, ig_rng_key key) {
    for (uint64_t i = n; i > 1; i--) {
        uint32_t w[4];
        ig_rng_u32x4(key, i, w);
        uint64_t r = ((uint64_t)w[0] << 32 | w[1]) % i, t = v[i - 1];
        v[i - 1] = v[r];
        v[r] = t;
    }
}

static void block_free(void *self) {
    clip_block *b = self;
    if (!b) return;
    ig_ctx *ctx = b->cs->ctx;
    ig_free(ctx, b->order);
    ig_free(ctx, b->first);
    ig_free(ctx, b->group_of);
    ig_free(ctx, b);
}

static uint64_t block_units(void *self) {
    return ((const clip_block *)self)->cs->units;
}

static ig_status block_get(void *self, uint64_t i, void *out, ig_err *err) {
    const clip_block *b = self;
    const clip_stream *cs = b->cs;
    const group *g = &cs->g[b->group_of[i]];
    uint8_t *o = out;
    uint32_t hdr[8] = {g->bucket, g->batch, g->frames, g->height, g->width, b->group_of[i], 0, 0};
    memcpy(o, hdr, sizeof hdr);
    size_t clip = (size_t)ig_clip_dataset_clip_bytes(cs->o.dataset, g->frames, g->height, g->width);
    for (uint32_t k = 0; k < g->batch; k++) {
        uint64_t id = b->order[b->first[i] + k];
        ig_clip_info c = ig_clip_dataset_info(cs->o.dataset, id, NULL, NULL);
        memcpy(o + HEADER_BYTES + 8 * k, &id, 8);
        memcpy(o + cs->labels_at + 4 * k, &c.label, 4);
        memcpy(o + cs->captions_at + 4 * k, &c.caption, 4);
        ig_status st =
            ig_clip_dataset_read(cs->o.dataset, id, o + cs->frames_at + k * clip, clip, err);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}

static ig_status make_block(void *user, uint64_t epoch, ig_sample_source *out, ig_err *err) {
    const clip_stream *cs = user;
    ig_ctx *ctx = cs->ctx;
    clip_block *b = ig_calloc(ctx, 1, sizeof *b);
    if (b) {
        b->cs = cs;
        b->order = ig_calloc(ctx, cs->total ? cs->total : 1, sizeof *b->order);
        b->first = ig_calloc(ctx, cs->units, sizeof *b->first);
        b->group_of = ig_calloc(ctx, cs->units, sizeof *b->group_of);
    }
    if (!b || !b->order || !b->first || !b->group_of) {
        block_free(b);
        return ig_err_set(err, IG_ERR_NOMEM, "clip loader: out of memory for an epoch");
    }
    uint64_t at = 0, u = 0;
    for (size_t k = 0; k < cs->n_groups; k++) {
        const group *g = &cs->g[k];
        uint64_t *v = b->order + at, kept = g->units * g->batch;
        /* shuffle all of the group, then take whole batches: padding repeats its first clips */
        uint64_t *tmp = ig_calloc(ctx, g->n, sizeof *tmp);
        if (!tmp) {
            block_free(b);
            return ig_err_set(err, IG_ERR_NOMEM, "clip loader: out of memory for an epoch");
        }
        memcpy(tmp, g->clips, g->n * sizeof *tmp);
        if (cs->o.shuffle) shuffle(tmp, g->n, epoch_key(cs->o.seed, epoch, k + 1));
        for (uint64_t i = 0; i < kept; i++) v[i] = tmp[i % g->n];
        ig_free(ctx, tmp);
        for (uint64_t i = 0; i < g->units; i++, u++) {
            b->first[u] = at + i * g->batch;
            b->group_of[u] = (uint32_t)k;
        }
        at += kept;
    }
    if (cs->o.shuffle) { /* the micro-batches of all groups, in one order */
        uint64_t *perm = ig_calloc(ctx, cs->units, sizeof *perm);
        uint64_t *f = ig_calloc(ctx, cs->units, sizeof *f);
        uint32_t *gr = ig_calloc(ctx, cs->units, sizeof *gr);
        if (!perm || !f || !gr) {
            ig_free(ctx, perm), ig_free(ctx, f), ig_free(ctx, gr);
            block_free(b);
            return ig_err_set(err, IG_ERR_NOMEM, "clip loader: out of memory for an epoch");
        }
        for (uint64_t i = 0; i < cs->units; i++) perm[i] = i;
        shuffle(perm, cs->units, epoch_key(cs->o.seed, epoch, 0));
        for (uint64_t i = 0; i < cs->units; i++)
            f[i] = b->first[perm[i]], gr[i] = b->group_of[perm[i]];
        ig_free(ctx, b->first);
        ig_free(ctx, b->group_of);
        ig_free(ctx, perm);
        b->first = f;
        b->group_of = gr;
    }
    *out = (ig_sample_source){.num_samples = block_units,
                              .free = block_free,
                              .self = b,
                              .key = cs->key,
                              .sample_bytes = cs->unit_bytes,
                              .get_bytes = block_get};
    return IG_OK;
}

/* ---- groups -----------------------------------------------------------------------------------
 */

static void stream_clear(clip_stream *cs) {
    for (size_t k = 0; k < cs->n_groups; k++) ig_free(cs->ctx, cs->g[k].clips);
    ig_free(cs->ctx, cs->g);
    memset(cs, 0, sizeof *cs);
}

static ig_status add_clip(clip_stream *cs, const ig_clip_info *c, uint64_t id, uint32_t batch,
                          ig_err *err) {
    size_t k = 0;
    for (; k < cs->n_groups; k++) {
        const group *g = &cs->g[k];
        if (c->bucket != IG_CLIP_NONE ? g->bucket == c->bucket
                                      : g->bucket == IG_CLIP_NONE && g->frames == c->frames &&
                                            g->height == c->height && g->width == c->width)
            break;
    }
    if (k == cs->n_groups) {
        group *ng = ig_realloc(cs->ctx, cs->g, (k + 1) * sizeof *ng);
        if (!ng) return ig_err_set(err, IG_ERR_NOMEM, "clip loader: out of memory");
        cs->g = ng;
        cs->g[k] = (group){c->bucket, c->frames, c->height, c->width, batch, NULL, 0, 0};
        cs->n_groups++;
    }
    group *g = &cs->g[k];
    if ((g->n & (g->n - 1)) == 0) { /* grow at powers of two */
        uint64_t *nc = ig_realloc(cs->ctx, g->clips, (g->n ? 2 * g->n : 1) * sizeof *nc);
        if (!nc) return ig_err_set(err, IG_ERR_NOMEM, "clip loader: out of memory");
        g->clips = nc;
    }
    g->clips[g->n++] = id;
    return IG_OK;
}

static ig_status build_groups(clip_stream *cs, ig_err *err) {
    const ig_clip_dataset *ds = cs->o.dataset;
    size_t nb = 0;
    const ig_clip_bucket *bk = ig_clip_dataset_buckets(ds, &nb);
    uint64_t n = ig_clip_dataset_clips(ds);
    if (n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "clip loader: the dataset has no clips");
    for (uint64_t id = 0; id < n; id++) {
        ig_clip_info c = ig_clip_dataset_info(ds, id, NULL, NULL);
        uint32_t batch =
            c.bucket != IG_CLIP_NONE && c.bucket < nb ? bk[c.bucket].batch_size : cs->o.batch_size;
        ig_status st = add_clip(cs, &c, id, batch, err);
        if (st != IG_OK) return st;
    }
    uint64_t key_in[6] = {ig_clip_dataset_key(ds),   cs->o.seed,
                          cs->o.batch_size,          (uint64_t)cs->o.shuffle,
                          (uint64_t)cs->o.drop_last, cs->n_groups};
    cs->key = ig_xxh3_64(key_in, sizeof key_in);
    uint32_t most = 1;
    for (size_t k = 0; k < cs->n_groups; k++) {
        group *g = &cs->g[k];
        g->units = cs->o.drop_last ? g->n / g->batch : (g->n + g->batch - 1) / g->batch;
        cs->units += g->units;
        cs->total += g->units * g->batch;
        if (g->batch > most) most = g->batch;
        uint64_t more[2] = {cs->key, (uint64_t)g->batch << 32 | g->bucket};
        cs->key = ig_xxh3_64(more, sizeof more);
    }
    if (cs->units == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "clip loader: no group has a whole micro-batch of clips (drop_last with "
                          "batch sizes larger than the groups)");
    cs->labels_at = HEADER_BYTES + 8 * (size_t)most;
    cs->captions_at = cs->labels_at + 4 * (size_t)most;
    cs->frames_at = (cs->captions_at + 4 * (size_t)most + 63) / 64 * 64;
    for (size_t k = 0; k < cs->n_groups; k++) {
        const group *g = &cs->g[k];
        size_t bytes = cs->frames_at + (size_t)g->batch * (size_t)ig_clip_dataset_clip_bytes(
                                                              ds, g->frames, g->height, g->width);
        if (bytes > cs->unit_bytes) cs->unit_bytes = bytes;
    }
    return IG_OK;
}

/* ---- the loader ----------------------------------------------------------------------------- */

ig_status ig_clip_loader_create(ig_clip_loader **out, ig_ctx *ctx, const ig_clip_loader_opts *opts,
                                const ig_loader_state *start, ig_err *err) {
    *out = NULL;
    if (!opts || !opts->dataset)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "clip loader: a dataset is required");
    if (opts->batch_size < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "clip loader: batch_size must be >= 1");
    ig_clip_loader *l = ig_calloc(ctx, 1, sizeof *l);
    if (!l) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    l->cs.ctx = ctx;
    l->cs.o = *opts;
    ig_status st = build_groups(&l->cs, err);
    if (st == IG_OK) {
        ig_loader_opts lo = ig_loader_opts_default();
        lo.make_block = make_block;
        lo.block_user = &l->cs;
        lo.micro_batch = 1; /* a sample of the stream is a whole micro-batch of clips */
        lo.grad_accum = opts->grad_accum;
        lo.dp = opts->dp;
        lo.rank = opts->rank;
        lo.prefetch_threads = opts->prefetch_threads;
        lo.prefetch_depth = opts->prefetch_depth;
        st = ig_loader_create(&l->ld, ctx, &lo, start, err);
    }
    if (st != IG_OK) {
        ig_clip_loader_free(l);
        return st;
    }
    *out = l;
    return IG_OK;
}

void ig_clip_loader_free(ig_clip_loader *l) {
    if (!l) return;
    ig_loader_free(l->ld); /* first: its threads read the groups */
    ig_ctx *ctx = l->cs.ctx;
    stream_clear(&l->cs);
    ig_free(ctx, l);
}

ig_status ig_clip_loader_next(ig_clip_loader *l, ig_clip_batch *out, ig_err *err) {
    memset(out, 0, sizeof *out);
    ig_batch b;
    ig_status st = ig_loader_next(l->ld, &b, err);
    if (st != IG_OK) return st;
    const uint8_t *row = b.data;
    uint32_t hdr[8];
    memcpy(hdr, row, sizeof hdr);
    int latent = ig_clip_dataset_vae(l->cs.o.dataset) != NULL;
    *out = (ig_clip_batch){.frames = latent ? NULL : row + l->cs.frames_at,
                           .latents = latent ? (const float *)(row + l->cs.frames_at) : NULL,
                           .channels = ig_clip_dataset_channels(l->cs.o.dataset),
                           .clips = (const uint64_t *)(row + HEADER_BYTES),
                           .labels = (const uint32_t *)(row + l->cs.labels_at),
                           .captions = (const uint32_t *)(row + l->cs.captions_at),
                           .n = hdr[1],
                           .frames_per_clip = hdr[2],
                           .height = hdr[3],
                           .width = hdr[4],
                           .bucket = hdr[0],
                           .unit = b.sample_ids[0],
                           .step = b.step,
                           .micro_index = b.micro_index,
                           .micro = b.micro,
                           .rank = b.rank};
    return IG_OK;
}

ig_loader_state ig_clip_loader_state(const ig_clip_loader *l) {
    return ig_loader_state_get(l->ld);
}

uint64_t ig_clip_loader_epoch_batches(const ig_clip_loader *l) {
    return l->cs.units;
}
