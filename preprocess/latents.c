/* latents.c - `ingot preprocess latents`: every clip of frame shards through a VAE's encoder into
 * a latent shard (dataset.h), the posterior's mean and log-variance stored per clip so that
 * training can draw a fresh latent each time it reads one (PixArt's choice). Everything the
 * source clip carried comes along: source, caption (the token documents, renumbered into this
 * output's caption shard), bucket, label, rates and the source frames.
 *
 * Clips are encoded one at a time, in order, a clip's frames in passes from its first frame: a
 * clip's latents depend on it alone, so one process and any number of ranks store the same
 * values. Ranks take contiguous shares of the clips. The output's lifecycle - run marker, refusal,
 * cleanup, one commit for all ranks - is output.c's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output_internal.h"
#include "preprocess.h"

static const char *const latent_data_exts[] = {".latents",      ".lclips",        ".captions.bin",
                                               ".captions.idx", ".captions.json", NULL};

void ig_latent_stats_clear(ig_latent_stats *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_shard_prefixes; i++) free(st->shard_prefixes[i]);
    free(st->shard_prefixes);
    memset(st, 0, sizeof *st);
}

typedef struct lpipe {
    ig_ctx *ctx;
    const ig_latent_opts *o;
    ig_latent_stats *st;
    int rank, world;
    char **list; /* the source shards */
    size_t n_list;
    ig_clip_dataset *ds;
    uint64_t begin, end;     /* this rank's clips */
    uint64_t most_pixels;    /* of the largest clip: frames x height x width */
    uint64_t *source_offset; /* [shards]: where each shard's sources start in ours */
    ig_latent_shard_meta meta;
    ig_manifest cap_meta; /* the first source caption shard's manifest (tokenizer) */
    int captions;         /* the clips have captions */
    char *base;           /* this rank's shard: OUT or OUT_rRRRR */
    ig_output_spec spec;
} lpipe;

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static void pipe_free(lpipe *p) {
    ig_clip_dataset_close(p->ds);
    ig_shard_list_free(p->list, p->n_list);
    free(p->source_offset);
    p->meta.buckets = NULL; /* the clip dataset's */
    p->meta.n_buckets = 0;
    ig_latent_shard_meta_clear(&p->meta);
    ig_manifest_clear(&p->cap_meta);
    free(p->base);
}

/* Opens the clips and gathers what the manifest carries over: sources (each shard's after the
 * previous ones'), the bucket table, the caption shards' tokenizer. */
static ig_status open_clips(lpipe *p, uint64_t *buffers, uint32_t *max_h, uint32_t *max_w,
                            ig_err *err) {
    ig_status s = ig_video_list_expand(p->o->clips, &p->list, &p->n_list, err);
    if (s == IG_OK)
        s = ig_clip_dataset_open(&p->ds, p->ctx, (const char *const *)p->list, p->n_list, err);
    if (s != IG_OK) return s;
    size_t n = ig_clip_dataset_num_shards(p->ds), total = 0;
    for (size_t k = 0; k < n; k++)
        total += ig_video_shard_meta_get(ig_clip_dataset_shard(p->ds, k))->n_sources;
    p->source_offset = calloc(n, sizeof *p->source_offset);
    p->meta.sources = calloc(total ? total : 1, sizeof *p->meta.sources);
    if (!p->source_offset || !p->meta.sources)
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < n; k++) {
        const ig_video_shard *vs = ig_clip_dataset_shard(p->ds, k);
        const ig_video_shard_meta *m = ig_video_shard_meta_get(vs);
        p->source_offset[k] = p->meta.n_sources;
        for (size_t i = 0; i < m->n_sources; i++, p->meta.n_sources++)
            if (!(p->meta.sources[p->meta.n_sources] = strdup(m->sources[i])))
                return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        if (m->captions[0] && !p->captions) {
            const char *pre = ig_video_shard_prefix(vs);
            char cp[4096];
            snprintf(cp, sizeof cp, "%.*s%s", (int)(base_name(pre) - pre), pre, m->captions);
            if ((s = ig_manifest_read(&p->cap_meta, cp, err)) != IG_OK) return s;
            p->captions = 1;
        }
    }
    p->meta.buckets = (ig_clip_bucket *)ig_clip_dataset_buckets(p->ds, &p->meta.n_buckets);
    /* the largest frame and clip over every rank's clips: every rank opens the same encoder */
    uint64_t most = 0, clips = ig_clip_dataset_clips(p->ds);
    *max_h = *max_w = 0;
    for (uint64_t g = 0; g < clips; g++) {
        ig_clip_info c = ig_clip_dataset_info(p->ds, g, NULL, NULL);
        if (c.height > *max_h) *max_h = c.height;
        if (c.width > *max_w) *max_w = c.width;
        uint64_t px = (uint64_t)c.frames * c.height * c.width;
        if (px > most) most = px;
    }
    if (clips == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: no clips to encode", p->o->clips);
    /* a clip's RGB and its moments in fp32, taken as 3 values a pixel (SD's VAE stores 8 values
     * an 8x8 patch) until the encoder says its channels and downsampling; the encoder's own memory
     * is its plan's */
    p->most_pixels = most;
    *buffers = most * 3 + most * 3 * sizeof(float);
    p->begin = clips * (uint64_t)p->rank / (uint64_t)p->world;
    p->end = clips * (uint64_t)(p->rank + 1) / (uint64_t)p->world;
    return IG_OK;
}

/* The clip's caption as a document of our caption shard: the source (shard, caption) of the
 * clip before is the same document (the clips of a video are consecutive), else a new one. */
typedef struct captions {
    ig_shard_writer *w;
    size_t last_shard;
    uint32_t last_caption, docs;
    int32_t *buf;
    size_t cap;
} captions;

static ig_status caption_of(lpipe *p, captions *c, uint64_t g, size_t shard, uint32_t caption,
                            uint32_t *out, ig_err *err) {
    *out = IG_CLIP_NONE;
    if (caption == IG_CLIP_NONE) return IG_OK;
    if (c->docs && shard == c->last_shard && caption == c->last_caption) {
        *out = c->docs - 1;
        return IG_OK;
    }
    size_t len = 0;
    ig_status s = ig_clip_dataset_caption(p->ds, g, c->buf, c->cap, &len, err);
    if (s == IG_OK && len > c->cap) {
        int32_t *b = realloc(c->buf, len * sizeof *b);
        if (!b) return ig_err_set(err, IG_ERR_NOMEM, "out of memory for a caption");
        c->buf = b;
        c->cap = len;
        s = ig_clip_dataset_caption(p->ds, g, c->buf, c->cap, &len, err);
    }
    if (s == IG_OK) s = ig_shard_writer_add_document(c->w, c->buf, len, err);
    if (s != IG_OK) return s;
    c->last_shard = shard;
    c->last_caption = caption;
    *out = c->docs++;
    return IG_OK;
}

/* Encodes this rank's clips into its shard and writes its manifests (data first). */
static ig_status write_shard(lpipe *p, ig_err *err) {
    const ig_latent_opts *o = p->o;
    const ig_latent_vae *v = &p->meta.vae;
    ig_latent_shard_writer_opts wo = {.dtype = o->dtype ? o->dtype : IG_LATENT_F32,
                                      .channels = 2 * v->latent_channels};
    ig_latent_shard_writer *w = NULL;
    captions cw = {0};
    char *cp = NULL;
    ig_status s = ig_latent_shard_writer_create(&w, p->ctx, p->base, &wo, err);
    if (s == IG_OK && p->captions) {
        snprintf(p->meta.captions, sizeof p->meta.captions, "%s.captions", base_name(p->base));
        if (asprintf(&cp, "%s.captions", p->base) < 0) cp = NULL;
        ig_shard_writer_opts co = ig_shard_writer_opts_default();
        co.dtype = p->cap_meta.dtype;
        s = cp ? ig_shard_writer_create(&cw.w, p->ctx, cp, &co, err)
               : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    snprintf(p->meta.output, sizeof p->meta.output, "%s", base_name(o->output_prefix));
    snprintf(p->meta.clips_source, sizeof p->meta.clips_source, "%s", o->clips);
    p->meta.clips_key = ig_clip_dataset_key(p->ds);
    p->meta.source_clips = ig_clip_dataset_clips(p->ds);
    ig_progress *bar = NULL;
    if (s == IG_OK && o->progress) {
        ig_progress_opts po = ig_progress_opts_default();
        po.label = "latents";
        po.unit = "clips";
        po.total = p->end - p->begin;
        s = ig_progress_create(&bar, &po, err);
    }
    uint8_t *rgb = NULL;
    float *mom = NULL;
    ig_clip_frame *fr = NULL;
    size_t rgb_cap = 0, mom_cap = 0, fr_cap = 0;
    uint32_t f = v->downsample;
    for (uint64_t g = p->begin; s == IG_OK && g < p->end; g++) {
        size_t shard = 0;
        uint64_t local = 0;
        ig_clip_info c = ig_clip_dataset_info(p->ds, g, &shard, &local);
        if (c.height % f || c.width % f) {
            s = ig_err_set(err, IG_ERR_INVALID_ARG,
                           "%s: clip %" PRIu64 " is %ux%u, which the VAE's downsampling by %u "
                           "does not divide: cut the clips to multiples of %u (preprocess video "
                           "--size)",
                           o->clips, g, c.height, c.width, f, f);
            break;
        }
        size_t px = (size_t)c.frames * c.height * c.width;
        size_t nm = (size_t)c.frames * (c.height / f) * (c.width / f) * wo.channels;
        if (px * 3 > rgb_cap) {
            free(rgb);
            rgb_cap = px * 3;
            rgb = malloc(rgb_cap);
        }
        if (nm > mom_cap) {
            free(mom);
            mom_cap = nm;
            mom = malloc(mom_cap * sizeof *mom);
        }
        if (c.frames > fr_cap) {
            free(fr);
            fr_cap = c.frames;
            fr = malloc(fr_cap * sizeof *fr);
        }
        if (!rgb || !mom || !fr) {
            s = ig_err_set(err, IG_ERR_NOMEM, "out of memory for clip %" PRIu64, g);
            break;
        }
        ig_latent_info li = {.frames = c.frames,
                             .h = c.height / f,
                             .w = c.width / f,
                             .height = c.height,
                             .width = c.width,
                             .fps_num = c.fps_num,
                             .fps_den = c.fps_den,
                             .source = (uint32_t)(p->source_offset[shard] + c.source),
                             .caption = IG_CLIP_NONE, /* renumbered below */
                             .bucket = c.bucket,
                             .label = c.label,
                             .tb_num = c.tb_num,
                             .tb_den = c.tb_den,
                             .start_pts = c.start_pts,
                             .source_clip = g};
        ig_video_shard_clip_frames(ig_clip_dataset_shard(p->ds, shard), local, fr);
        s = ig_clip_dataset_read(p->ds, g, rgb, rgb_cap, err);
        if (s == IG_OK)
            s = o->encoder->encode(o->encoder->user, rgb, c.frames, c.height, c.width, mom, err);
        if (s == IG_OK && cw.w) s = caption_of(p, &cw, g, shard, c.caption, &li.caption, err);
        if (s == IG_OK) s = ig_latent_shard_writer_add(w, &li, fr, mom, err);
        if (s != IG_OK) break;
        for (size_t e = 0; e < nm; e++) /* the means: the first C of each position's 2C */
            if (e % wo.channels < wo.channels / 2) {
                double x = mom[e];
                p->st->means++, p->st->mean_sum += x, p->st->mean_sq += x * x;
            }
        p->st->clips++;
        p->st->frames += c.frames;
        p->st->bytes += (uint64_t)nm * (wo.dtype == IG_LATENT_F32 ? 4 : 2);
        ig_progress_add(bar, 1);
    }
    ig_progress_finish(bar);
    free(rgb);
    free(mom);
    free(fr);
    free(cw.buf);
    /* the data files, then the caption shard's manifest, then the latent shard's (last) */
    ig_manifest capm = {0}, capdone = {0};
    ig_latent_shard_meta done = {0};
    if (s == IG_OK && cw.w) {
        capm = p->cap_meta;
        capm.sources = NULL;
        capm.n_sources = 0;
        snprintf(capm.output, sizeof capm.output, "%s", p->meta.output);
        snprintf(capm.tool_version, sizeof capm.tool_version, "ingot %s", IG_VERSION_STRING);
        s = ig_manifest_add_source(&capm, o->clips, err);
        if (s == IG_OK) s = ig_shard_writer_finish_data(cw.w, &capm, &capdone, err);
        cw.w = NULL;
        p->meta.caption_documents = cw.docs;
    }
    ig_shard_writer_abort(cw.w);
    if (s == IG_OK) {
        s = ig_latent_shard_writer_finish(w, &p->meta, &done, err);
        w = NULL;
    }
    ig_latent_shard_writer_abort(w);
    if (s == IG_OK && cp && p->captions) s = ig_manifest_write(&capdone, cp, 0, err);
    if (s == IG_OK) s = ig_latent_shard_meta_write(&done, p->base, 0, err);
    ig_manifest_clear(&capm);
    ig_manifest_clear(&capdone);
    ig_latent_shard_meta_clear(&done);
    free(cp);
    if (s == IG_OK) {
        p->st->shard_prefixes = calloc(1, sizeof *p->st->shard_prefixes);
        if (!p->st->shard_prefixes) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        p->st->shard_prefixes[0] = p->base;
        p->st->n_shard_prefixes = 1;
        p->base = NULL;
    }
    return s;
}

static ig_status all_ok(const lpipe *p, ig_status s, ig_err *err) {
    if (p->world < 2) return s;
    int ok = 0;
    ig_err cerr = {0};
    ig_status cs = ig_comm_all_ok(p->o->comm, s == IG_OK, &ok, &cerr);
    if (s == IG_OK && cs != IG_OK) {
        *err = cerr;
        return cs;
    }
    if (s == IG_OK && !ok)
        return ig_err_set(err, IG_ERR_CANCELLED, "another rank failed; see its message");
    return s;
}

ig_status ig_preprocess_latents(ig_ctx *ctx, const ig_latent_opts *opts, ig_latent_stats *stats,
                                ig_err *err) {
    ig_latent_stats local;
    ig_latent_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    if (!opts->clips || !opts->output_prefix || !opts->encoder || !opts->encoder->open ||
        !opts->encoder->encode)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "latents: clips, output_prefix and an encoder "
                          "are required");
    if (opts->dtype && opts->dtype != IG_LATENT_F32 && opts->dtype != IG_LATENT_BF16)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "latents: dtype %u: fp32 (1) or bf16 (2)",
                          opts->dtype);
    double t0 = ig_now();
    lpipe p = {.ctx = ctx, .o = opts, .st = st, .rank = 0, .world = 1};
    if (opts->comm) {
        p.rank = ig_comm_rank(opts->comm);
        p.world = ig_comm_size(opts->comm);
    }
    static const char *const no_keys[] = {""};
    p.spec = (ig_output_spec){.prefix = opts->output_prefix,
                              .keys = no_keys,
                              .n_keys = 1,
                              .data_exts = latent_data_exts,
                              .overwrite = opts->overwrite,
                              .write_list = ig_latent_list_write,
                              .remove_shard = ig_latent_shard_remove};
    /* a bad prefix is refused before the clips are read and the VAE loaded; the output itself is
     * judged by ig_output_prepare, after the VAE's memory was found to fit */
    ig_status s = ig_output_prefix_check(opts->output_prefix, err);
    uint64_t buffers = 0;
    uint32_t mh = 0, mw = 0;
    if (s == IG_OK) s = open_clips(&p, &buffers, &mh, &mw, err);
    if (s == IG_OK) s = opts->encoder->open(opts->encoder->user, mh, mw, buffers, &p.meta.vae, err);
    if (s == IG_OK)
        snprintf(p.meta.vae.path, sizeof p.meta.vae.path, "%s",
                 opts->vae_path ? opts->vae_path : "");
    if (s == IG_OK && !p.meta.vae.downsample)
        s = ig_err_set(err, IG_ERR_INTERNAL, "the encoder gave no downsampling");
    if (s == IG_OK) { /* the moments' exact size, now that C and f are known */
        uint64_t f2 = (uint64_t)p.meta.vae.downsample * p.meta.vae.downsample;
        uint64_t exact =
            p.most_pixels * 3 + p.most_pixels / f2 * 2 * p.meta.vae.latent_channels * sizeof(float);
        if (exact > buffers)
            s = ig_memory_check(exact - buffers, "the largest clip's moments",
                                "encode on a machine with more memory", err);
    }
    st->vae = p.meta.vae;
    char rank[32] = "";
    if (p.world > 1) snprintf(rank, sizeof rank, "_r%04d", p.rank);
    if (s == IG_OK && asprintf(&p.base, "%s%s", opts->output_prefix, rank) < 0) {
        p.base = NULL;
        s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    s = all_ok(&p, s, err); /* nothing of the output is touched before every rank is ready */
    if (s == IG_OK && p.world > 1) {
        s = ig_output_prepare_ranks(ctx, opts->comm, &p.spec, err);
        if (s == IG_OK) {
            s = write_shard(&p, err);
            ig_err lerr = {0};
            ig_status ls = ig_output_commit_ranks(ctx, opts->comm, &p.spec, s == IG_OK,
                                                  (const char *const *)st->shard_prefixes,
                                                  st->n_shard_prefixes, s == IG_OK ? err : &lerr);
            if (s == IG_OK) s = ls;
            if (s != IG_OK && p.base) ig_latent_shard_remove(p.base);
        }
    } else if (s == IG_OK) {
        s = ig_output_prepare(ctx, &p.spec, err);
        if (s == IG_OK) {
            s = write_shard(&p, err);
            if (s == IG_OK) s = ig_output_commit(&p.spec, err); /* the one commit point */
            if (s != IG_OK) ig_output_discard(ctx, &p.spec);
        }
    }
    pipe_free(&p);
    st->seconds = ig_now() - t0;
    return s;
}
