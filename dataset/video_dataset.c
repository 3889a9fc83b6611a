/* video_dataset.c - frame shards as one collection: shard lists over several frame shards
 * (PREFIX.shards.json, "format": "ingot-video-shard-list", written by a multi-rank preprocess) and
 * the clip dataset that opens one or more prefixes as one run of clips, with their captions (their
 * tokens and their texts) - or, opened with ig_clip_dataset_open_any, latent shards (a VAE's
 * posterior of such clips) as the same run of clips in latent positions.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>

#include "json_fields.h"
#include "list_internal.h"
#include "video_shard_internal.h"

static const ig_list_kind video_list = {"ingot-video-shard-list", 1, "frames_xxh3"};

/* ---- lists (list_json.c's, with the frame shards' entries) ----------------------------------- */

static size_t dir_len(const char *path) {
    return ig_list_dir_len(path);
}

ig_status ig_video_list_write(const char *prefix, const char *const *shards, size_t n,
                              int overwrite, ig_err *err) {
    if (n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "a shard list needs shards");
    size_t dl = dir_len(prefix);
    json_t *arr = json_array();
    uint64_t clips = 0, frames = 0;
    ig_status st = arr ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        if ((st = ig_list_check_member(prefix, shards[i], err)) != IG_OK) break;
        ig_video_shard_meta m;
        if ((st = ig_video_shard_meta_read(&m, shards[i], err)) != IG_OK) break;
        clips += m.clips;
        frames += m.frames;
        char fx[17], cx[17];
        ig_hash64_hex(m.frames_xxh3, fx);
        ig_hash64_hex(m.clips_xxh3, cx);
        json_array_append_new(arr,
                              json_pack("{s:s,s:I,s:I,s:s,s:s}", "prefix", shards[i] + dl, "clips",
                                        (json_int_t)m.clips, "frames", (json_int_t)m.frames,
                                        "frames_xxh3", fx, "clips_xxh3", cx));
        ig_video_shard_meta_clear(&m);
    }
    if (st != IG_OK) {
        json_decref(arr);
        return st;
    }
    json_t *totals =
        json_pack("{s:I,s:I}", "clips", (json_int_t)clips, "frames", (json_int_t)frames);
    return ig_list_write(&video_list, prefix, totals, arr, overwrite, err);
}

ig_status ig_video_list_expand(const char *prefix, char ***out, size_t *n, ig_err *err) {
    return ig_list_expand(&video_list, prefix, out, n, err);
}

static ig_status video_entry(const char *shard, uint64_t *clips, uint64_t *sum, ig_err *err) {
    ig_video_shard_meta m;
    ig_status st = ig_video_shard_meta_read(&m, shard, err);
    *clips = m.clips;
    *sum = m.frames_xxh3;
    ig_video_shard_meta_clear(&m);
    return st;
}

ig_status ig_video_list_verify(ig_ctx *ctx, const char *prefix, size_t *n_shards, ig_err *err) {
    return ig_list_verify(&video_list, ctx, prefix, ig_video_shard_verify, video_entry, n_shards,
                          err);
}

/* ---- the clip dataset ------------------------------------------------------------------------ */

static size_t shard_of(const ig_clip_dataset *ds, uint64_t g);

struct ig_clip_dataset {
    ig_ctx *ctx;
    ig_video_shard **shards;           /* frame shards, or NULL entries in a dataset of latents */
    ig_latent_shard **lat;             /* latent shards (NULL: frames) */
    ig_clip_bucket *lat_buckets;       /* latents: the bucket table in latent positions (owned) */
    uint64_t source_key, source_clips; /* latents: the clips they were made of (0: unknown) */
    int mixed_sources;                 /* latents made of several clip datasets */
    ig_shard **captions;               /* [n] or NULL entries */
    ig_shard **texts; /* [n] the caption texts, or NULL entries (shards made before them) */
    uint64_t *first;  /* [n + 1] global index of each shard's first clip */
    size_t n;
    const ig_clip_bucket *buckets;
    size_t n_buckets;
    uint64_t key;
};

void ig_clip_dataset_close(ig_clip_dataset *ds) {
    if (!ds) return;
    for (size_t i = 0; i < ds->n; i++) {
        if (ds->lat)
            ig_latent_shard_close(ds->lat[i]);
        else
            ig_video_shard_close(ds->shards[i]);
        ig_shard_close(ds->captions[i]);
        ig_shard_close(ds->texts[i]);
    }
    free(ds->shards);
    free(ds->lat);
    free(ds->lat_buckets);
    free(ds->captions);
    free(ds->texts);
    free(ds->first);
    ig_free(ds->ctx, ds);
}

static int same_buckets(const ig_clip_bucket *a, size_t na, const ig_clip_bucket *b, size_t nb) {
    if (na != nb) return 0;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].name, b[i].name) || a[i].frames != b[i].frames ||
            a[i].height != b[i].height || a[i].width != b[i].width ||
            a[i].batch_size != b[i].batch_size)
            return 0;
    return 1;
}

/* The token shard named `name` in the manifest of the frame shard prefix (its caption tokens or
 * texts), opened into *out with one document per caption; nothing when name is "". */
static ig_status open_beside(ig_clip_dataset *ds, const char *prefix, const char *name,
                             uint64_t documents, ig_shard **out, ig_err *err) {
    if (!name[0]) return IG_OK;
    size_t dl = dir_len(prefix);
    char path[4096];
    snprintf(path, sizeof path, "%.*s%s", (int)dl, prefix, name);
    ig_status st = ig_shard_open(out, ds->ctx, path, err);
    if (st == IG_OK && ig_shard_documents(*out) != documents)
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: the shard has %" PRIu64 " documents, the manifest of %s says %" PRIu64
                        " (one a caption)",
                        path, ig_shard_documents(*out), prefix, documents);
    return st;
}

/* room for shard k (every per-shard array, its entries NULL) */
static ig_status grow(ig_clip_dataset *ds, int latent, ig_err *err) {
    size_t k = ds->n;
    ig_video_shard **ns = realloc(ds->shards, (k + 1) * sizeof *ns);
    if (ns) ds->shards = ns, ns[k] = NULL;
    ig_latent_shard **nl = latent ? realloc(ds->lat, (k + 1) * sizeof *nl) : NULL;
    if (nl) ds->lat = nl, nl[k] = NULL;
    ig_shard **nc = realloc(ds->captions, (k + 1) * sizeof *nc);
    if (nc) ds->captions = nc, nc[k] = NULL;
    ig_shard **nt = realloc(ds->texts, (k + 1) * sizeof *nt);
    if (nt) ds->texts = nt, nt[k] = NULL;
    uint64_t *nf = realloc(ds->first, (k + 2) * sizeof *nf);
    if (nf) ds->first = nf;
    if (!ns || (latent && !nl) || !nc || !nt || !nf)
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    return IG_OK;
}

static ig_status add_shard(ig_clip_dataset *ds, const char *prefix, ig_err *err) {
    size_t k = ds->n;
    ig_status st = grow(ds, 0, err);
    if (st != IG_OK) return st;
    if ((st = ig_video_shard_open(&ds->shards[k], ds->ctx, prefix, err)) != IG_OK) return st;
    ds->n++;
    const ig_video_shard_meta *m = ig_video_shard_meta_get(ds->shards[k]);
    if (!m)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s.json: missing (a clip dataset needs complete shards)", prefix);
    const ig_video_shard_meta *m0 = ig_video_shard_meta_get(ds->shards[0]);
    if (k > 0 && !same_buckets(m->buckets, m->n_buckets, m0->buckets, m0->n_buckets))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s has another bucket table than %s: shards of one dataset must be made "
                          "with the same buckets",
                          prefix, ig_video_shard_prefix(ds->shards[0]));
    if ((st = open_beside(ds, prefix, m->captions, m->caption_documents, &ds->captions[k], err)) !=
            IG_OK ||
        (st = open_beside(ds, prefix, m->texts, m->n_sources, &ds->texts[k], err)) != IG_OK)
        return st;
    if (ds->texts[k] && ig_shard_dtype(ds->texts[k]) != IG_DTYPE_U8)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s%s: a caption text shard holds bytes (uint8), this one %s: rebuild "
                          "the shard",
                          prefix, ".texts", ig_dtype_name(ig_shard_dtype(ds->texts[k])));
    ds->first[k + 1] = ds->first[k] + ig_video_shard_clips(ds->shards[k]);
    ds->key = ig_clip_key_next(ds->key, m);
    return IG_OK;
}

/* A latent shard: its clips in latent positions, its captions beside it, the same VAE and buckets
 * as the first shard's. */
static ig_status add_latent(ig_clip_dataset *ds, const char *prefix, ig_err *err) {
    size_t k = ds->n;
    ig_status st = grow(ds, 1, err);
    if (st != IG_OK) return st;
    if ((st = ig_latent_shard_open(&ds->lat[k], ds->ctx, prefix, err)) != IG_OK) return st;
    ds->n++;
    const ig_latent_shard_meta *m = ig_latent_shard_meta_get(ds->lat[k]);
    if (!m)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s.json: missing (a clip dataset needs complete shards)", prefix);
    const ig_latent_shard_meta *m0 = ig_latent_shard_meta_get(ds->lat[0]);
    const char *p0 = ig_latent_shard_prefix(ds->lat[0]);
    if (k > 0 && !same_buckets(m->buckets, m->n_buckets, m0->buckets, m0->n_buckets))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s has another bucket table than %s: shards of one dataset must be made "
                          "with the same buckets",
                          prefix, p0);
    if (k > 0 && (m->vae.weights_xxh3 != m0->vae.weights_xxh3 ||
                  m->vae.scaling_factor != m0->vae.scaling_factor ||
                  m->vae.shift_factor != m0->vae.shift_factor))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s holds the latents of another VAE than %s (%s, the first's %s): "
                          "latents of one dataset come from one VAE",
                          prefix, p0, m->vae.path, m0->vae.path);
    /* latents of several clip datasets train together; caption features serve one */
    if (k > 0 && (m->clips_key != m0->clips_key || m->source_clips != m0->source_clips))
        ds->mixed_sources = 1;
    if ((st = open_beside(ds, prefix, m->captions, m->caption_documents, &ds->captions[k], err)) !=
        IG_OK)
        return st;
    ds->first[k + 1] = ds->first[k] + ig_latent_shard_clips(ds->lat[k]);
    uint64_t in[4] = {ds->key, m->data_xxh3, m->index_xxh3, m->clips};
    ds->key = ig_xxh3_64(in, sizeof in);
    return IG_OK;
}

uint64_t ig_clip_key_next(uint64_t key, const ig_video_shard_meta *m) {
    uint64_t in[4] = {key, m->frames_xxh3, m->clips_xxh3, m->clips};
    return ig_xxh3_64(in, sizeof in);
}

/* the latents' bucket table: the pixel buckets over the VAE's downsampling */
static ig_status latent_buckets(ig_clip_dataset *ds, ig_err *err) {
    const ig_latent_shard_meta *m0 = ig_latent_shard_meta_get(ds->lat[0]);
    ds->source_key = ds->mixed_sources ? 0 : m0->clips_key;
    ds->source_clips = ds->mixed_sources ? 0 : m0->source_clips;
    ds->n_buckets = m0->n_buckets;
    if (!m0->n_buckets) return IG_OK;
    ds->lat_buckets = calloc(m0->n_buckets, sizeof *ds->lat_buckets);
    if (!ds->lat_buckets) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    uint32_t f = m0->vae.downsample;
    for (size_t i = 0; i < m0->n_buckets; i++) {
        ds->lat_buckets[i] = m0->buckets[i];
        ds->lat_buckets[i].height /= f;
        ds->lat_buckets[i].width /= f;
    }
    ds->buckets = ds->lat_buckets;
    return IG_OK;
}

static ig_status open_kind(ig_clip_dataset **out, ig_ctx *ctx, const char *const *prefixes,
                           size_t n, int any, ig_err *err) {
    *out = NULL;
    if (n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "no frame shards given");
    int latent = ig_latent_shard_is(prefixes[0]);
    for (size_t i = 0; i < n; i++) {
        int l = ig_latent_shard_is(prefixes[i]);
        if (l && !any)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "%s is a latent shard (a VAE's latents of clips): this wants "
                              "frame shards (ingot preprocess video's output), such as the clips "
                              "it was made of",
                              prefixes[i]);
        if (l != latent)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "%s is %s shard and %s %s: the clips of one dataset are all frames "
                              "or all latents",
                              prefixes[i], l ? "a latent" : "a frame", prefixes[0],
                              latent ? "a latent one" : "a frame one");
    }
    ig_clip_dataset *ds = ig_alloc(ctx, sizeof *ds);
    if (!ds) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(ds, 0, sizeof *ds);
    ds->ctx = ctx;
    ds->first = calloc(1, sizeof *ds->first);
    ig_status st = ds->first ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        char **list = NULL;
        size_t cnt = 0;
        st = latent ? ig_latent_list_expand(prefixes[i], &list, &cnt, err)
                    : ig_video_list_expand(prefixes[i], &list, &cnt, err);
        for (size_t j = 0; st == IG_OK && j < cnt; j++)
            st = latent ? add_latent(ds, list[j], err) : add_shard(ds, list[j], err);
        ig_shard_list_free(list, cnt);
    }
    if (st == IG_OK && latent) st = latent_buckets(ds, err);
    if (st != IG_OK) {
        ig_clip_dataset_close(ds);
        return st;
    }
    if (!latent) {
        const ig_video_shard_meta *m0 = ig_video_shard_meta_get(ds->shards[0]);
        ds->buckets = m0->buckets;
        ds->n_buckets = m0->n_buckets;
        ds->source_key = ds->key;
        ds->source_clips = ds->first[ds->n];
    }
    *out = ds;
    return IG_OK;
}

ig_status ig_clip_dataset_open(ig_clip_dataset **out, ig_ctx *ctx, const char *const *prefixes,
                               size_t n, ig_err *err) {
    return open_kind(out, ctx, prefixes, n, 0, err);
}

ig_status ig_clip_dataset_open_any(ig_clip_dataset **out, ig_ctx *ctx, const char *const *prefixes,
                                   size_t n, ig_err *err) {
    return open_kind(out, ctx, prefixes, n, 1, err);
}

uint64_t ig_clip_dataset_clips(const ig_clip_dataset *ds) {
    return ds->first[ds->n];
}
size_t ig_clip_dataset_num_shards(const ig_clip_dataset *ds) {
    return ds->n;
}
const ig_video_shard *ig_clip_dataset_shard(const ig_clip_dataset *ds, size_t k) {
    return ds->shards[k];
}
const char *ig_clip_dataset_shard_prefix(const ig_clip_dataset *ds, size_t k) {
    return ds->lat ? ig_latent_shard_prefix(ds->lat[k]) : ig_video_shard_prefix(ds->shards[k]);
}
uint64_t ig_clip_dataset_shard_clips(const ig_clip_dataset *ds, size_t k) {
    return ds->first[k + 1] - ds->first[k];
}
const ig_latent_vae *ig_clip_dataset_vae(const ig_clip_dataset *ds) {
    return ds->lat ? &ig_latent_shard_meta_get(ds->lat[0])->vae : NULL;
}
uint32_t ig_clip_dataset_channels(const ig_clip_dataset *ds) {
    return ds->lat ? ig_latent_shard_channels(ds->lat[0]) : 3;
}
uint64_t ig_clip_dataset_clip_bytes(const ig_clip_dataset *ds, uint32_t frames, uint32_t height,
                                    uint32_t width) {
    uint64_t at = (uint64_t)frames * height * width * ig_clip_dataset_channels(ds);
    return ds->lat ? at * sizeof(float) : at;
}
uint64_t ig_clip_dataset_source_key(const ig_clip_dataset *ds) {
    return ds->source_key;
}
uint64_t ig_clip_dataset_source_clips(const ig_clip_dataset *ds) {
    return ds->source_clips;
}
uint64_t ig_clip_dataset_source_clip(const ig_clip_dataset *ds, uint64_t g) {
    if (!ds->lat) return g;
    size_t k = shard_of(ds, g);
    return ig_latent_shard_clip(ds->lat[k], g - ds->first[k]).source_clip;
}
uint64_t ig_clip_dataset_key(const ig_clip_dataset *ds) {
    return ds->key;
}
uint64_t ig_clip_dataset_caption_vocab(const ig_clip_dataset *ds) {
    uint64_t v = 0;
    for (size_t k = 0; k < ds->n; k++) {
        const ig_manifest *m = ds->captions[k] ? ig_shard_manifest(ds->captions[k]) : NULL;
        if (m && m->vocab_size > v) v = m->vocab_size;
    }
    return v;
}
const ig_clip_bucket *ig_clip_dataset_buckets(const ig_clip_dataset *ds, size_t *n) {
    *n = ds->n_buckets;
    return ds->buckets;
}

static size_t shard_of(const ig_clip_dataset *ds, uint64_t g) {
    size_t lo = 0, hi = ds->n; /* last k with first[k] <= g */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (ds->first[mid] <= g)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

ig_clip_info ig_clip_dataset_info(const ig_clip_dataset *ds, uint64_t g, size_t *shard,
                                  uint64_t *local) {
    size_t k = shard_of(ds, g);
    if (shard) *shard = k;
    if (local) *local = g - ds->first[k];
    if (!ds->lat) return ig_video_shard_clip(ds->shards[k], g - ds->first[k]);
    ig_latent_info l = ig_latent_shard_clip(ds->lat[k], g - ds->first[k]);
    return (ig_clip_info){.offset = l.offset,
                          .stored_bytes = l.stored_bytes,
                          .frames = l.frames,
                          .height = l.h,
                          .width = l.w,
                          .fps_num = l.fps_num,
                          .fps_den = l.fps_den,
                          .source = l.source,
                          .caption = l.caption,
                          .bucket = l.bucket,
                          .label = l.label,
                          .start_pts = l.start_pts,
                          .tb_num = l.tb_num,
                          .tb_den = l.tb_den,
                          .first_frame = l.first_frame,
                          .xxh3 = l.xxh3};
}

ig_status ig_clip_dataset_read(const ig_clip_dataset *ds, uint64_t g, void *out, size_t cap,
                               ig_err *err) {
    if (g >= ig_clip_dataset_clips(ds))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "clip %" PRIu64 " is out of range (%" PRIu64 " clips)", g,
                          ig_clip_dataset_clips(ds));
    size_t k = shard_of(ds, g);
    if (ds->lat)
        return ig_latent_shard_read(ds->lat[k], g - ds->first[k], out, cap / sizeof(float), 0, err);
    return ig_video_shard_read(ds->shards[k], g - ds->first[k], out, cap, 0, err);
}

ig_status ig_clip_dataset_caption(const ig_clip_dataset *ds, uint64_t g, int32_t *out, size_t cap,
                                  size_t *len, ig_err *err) {
    *len = 0;
    size_t k;
    ig_clip_info c = ig_clip_dataset_info(ds, g, &k, NULL);
    const ig_shard *cs = ds->captions[k];
    if (!cs || c.caption == IG_CLIP_NONE) return IG_OK;
    /* one sequence per caption document */
    uint64_t seq = (uint64_t)ig_shard_doc_index(cs, c.caption);
    uint64_t n = (uint64_t)ig_shard_seq_length(cs, seq);
    *len = (size_t)n;
    return ig_shard_read_tokens(cs, seq, 0, n < cap ? n : cap, out, err);
}

ig_status ig_clip_dataset_text(const ig_clip_dataset *ds, uint64_t g, const char **text,
                               size_t *len, ig_err *err) {
    *text = "";
    *len = 0;
    if (g >= ig_clip_dataset_clips(ds))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "clip %" PRIu64 " is out of range (%" PRIu64 " clips)", g,
                          ig_clip_dataset_clips(ds));
    size_t k;
    ig_clip_info c = ig_clip_dataset_info(ds, g, &k, NULL);
    const ig_shard *ts = ds->texts[k];
    if (!ts && ds->lat)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s is a latent shard: its captions' text is in the frame shards it was "
                          "made of (%s)",
                          ig_latent_shard_prefix(ds->lat[k]),
                          ig_latent_shard_meta_get(ds->lat[k])->clips_source);
    if (!ts)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s keeps no caption text (made by an ingot before frame shards kept "
                          "their captions' text): make it again with ingot preprocess video",
                          ig_video_shard_prefix(ds->shards[k]));
    /* the source's document: its bytes are one sequence (none for an empty caption) */
    int64_t s0 = ig_shard_doc_index(ts, c.source), s1 = ig_shard_doc_index(ts, c.source + 1);
    if (s1 > s0) {
        *text = (const char *)ig_shard_bin(ts) + ig_shard_seq_pointer(ts, (uint64_t)s0);
        *len = (size_t)ig_shard_seq_length(ts, (uint64_t)s0);
    }
    return IG_OK;
}
