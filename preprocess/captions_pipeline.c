/* captions_pipeline.c - ingot preprocess captions (ig_preprocess_captions): the captions' texts
 * of clip shards to a caption-feature shard through the feature stage (caption_features.c), clip
 * for clip. Under several ranks each takes an equal run of the clips (the shards' clips end to end)
 * and writes OUT_rRRRR; the output's life - run marker, --force, cleanup after a failure, one
 * commit and one list for all ranks - is the other pipelines' (output.c).
 */
#include "captions_internal.h"
#include "output_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const feature_exts[] = {".feat", ".fidx", NULL};

void ig_captions_stats_clear(ig_captions_stats *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_shard_prefixes; i++) free(st->shard_prefixes[i]);
    free(st->shard_prefixes);
    memset(st, 0, sizeof *st);
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* This rank's clips, [c0, c1): an equal run of the clip data, in order. */
static void my_clips(uint64_t n, int rank, int world, uint64_t *c0, uint64_t *c1) {
    *c0 = n * (uint64_t)rank / (uint64_t)world;
    *c1 = n * (uint64_t)(rank + 1) / (uint64_t)world;
}

/* Clips [c0, c1) of cd through the stage, a run per video (the clips of one source in one shard
 * share its caption). */
static ig_status add_clips(ig_feature_stage *fs, const ig_clip_dataset *cd, uint64_t c0,
                           uint64_t c1, ig_progress *progress, ig_err *err) {
    ig_status st = IG_OK;
    for (uint64_t g = c0; st == IG_OK && g < c1;) {
        size_t k, k2;
        ig_clip_info c = ig_clip_dataset_info(cd, g, &k, NULL);
        uint64_t end = g + 1;
        while (end < c1 && ig_clip_dataset_info(cd, end, &k2, NULL).source == c.source && k2 == k)
            end++;
        const char *text;
        size_t len;
        char what[4200];
        snprintf(what, sizeof what, "clip %" PRIu64 " (%s, video %s)", g,
                 ig_video_shard_prefix(ig_clip_dataset_shard(cd, k)),
                 c.source < ig_video_shard_meta_get(ig_clip_dataset_shard(cd, k))->n_sources
                     ? ig_video_shard_meta_get(ig_clip_dataset_shard(cd, k))->sources[c.source]
                     : "?");
        st = ig_clip_dataset_text(cd, g, &text, &len, err);
        if (st == IG_OK) st = ig_feature_stage_add(fs, text, len, end - g, what, err);
        if (progress) ig_progress_add(progress, end - g);
        g = end;
    }
    return st;
}

/* This rank's shard: the stage over its clips, then finished (manifest last). */
static ig_status write_shard(ig_ctx *ctx, const ig_captions_opts *o, const ig_clip_dataset *cd,
                             const char *prefix, uint64_t c0, uint64_t c1, ig_captions_stats *st,
                             ig_err *err) {
    ig_feature_stage *fs = NULL;
    ig_progress *progress = NULL;
    ig_status s = ig_feature_stage_create(&fs, ctx, o->features, prefix, c0,
                                          ig_clip_dataset_clips(cd), ig_clip_dataset_key(cd), err);
    if (s == IG_OK && o->progress) {
        ig_progress_opts po = ig_progress_opts_default();
        po.label = "preprocess captions";
        po.unit = "clips";
        po.total = c1 - c0;
        s = ig_progress_create(&progress, &po, err);
    }
    if (s == IG_OK) s = add_clips(fs, cd, c0, c1, progress, err);
    if (s == IG_OK)
        s = ig_feature_stage_finish(fs, o->clips, o->n_clips, base_name(o->output_prefix), st, err);
    ig_progress_finish(progress);
    ig_feature_stage_free(fs);
    return s;
}

static ig_status check_opts(const ig_captions_opts *o, ig_err *err) {
    if (!o->n_clips) return ig_err_set(err, IG_ERR_INVALID_ARG, "no clip shards given");
    if (!o->output_prefix || !*o->output_prefix)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "no output prefix given");
    if (!o->features) return ig_err_set(err, IG_ERR_INVALID_ARG, "no encoder given");
    return ig_caption_features_check(o->features, err);
}

ig_status ig_preprocess_captions(ig_ctx *ctx, const ig_captions_opts *o, ig_captions_stats *stats,
                                 ig_err *err) {
    ig_captions_stats local;
    ig_captions_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof *st);
    double t0 = ig_now();
    int rank = o->comm ? ig_comm_rank(o->comm) : 0, world = o->comm ? ig_comm_size(o->comm) : 1;
    static const char *const no_keys[] = {""};
    ig_output_spec spec = {.prefix = o->output_prefix,
                           .keys = no_keys,
                           .n_keys = 1,
                           .data_exts = feature_exts,
                           .overwrite = o->overwrite,
                           .write_list = ig_feature_list_write,
                           .remove_shard = ig_feature_shard_remove};
    ig_clip_dataset *cd = NULL;
    char *prefix = NULL;
    ig_status s = check_opts(o, err);
    if (s == IG_OK) s = ig_clip_dataset_open(&cd, ctx, o->clips, o->n_clips, err);
    if (s == IG_OK && (world > 1 ? asprintf(&prefix, "%s_r%04d", o->output_prefix, rank) < 0
                                 : !(prefix = strdup(o->output_prefix))))
        prefix = NULL;
    if (s == IG_OK && (!prefix || !(st->shard_prefixes = calloc(1, sizeof *st->shard_prefixes))))
        s = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (world > 1) { /* nothing of the output is touched before every rank opened the clips */
        int all_ok = 0;
        ig_err cerr = {0};
        ig_status cs = ig_comm_all_ok(o->comm, s == IG_OK, &all_ok, &cerr);
        if (s == IG_OK && cs != IG_OK) s = cs, *err = cerr;
        if (s == IG_OK && !all_ok)
            s = ig_err_set(err, IG_ERR_CANCELLED, "another rank failed; see its message");
    }
    uint64_t c0 = 0, c1 = 0;
    if (s == IG_OK) my_clips(ig_clip_dataset_clips(cd), rank, world, &c0, &c1);
    if (s == IG_OK && world > 1 &&
        (s = ig_output_prepare_ranks(ctx, o->comm, &spec, err)) == IG_OK) {
        s = write_shard(ctx, o, cd, prefix, c0, c1, st, err);
        if (s == IG_OK) st->shard_prefixes[st->n_shard_prefixes++] = prefix, prefix = NULL;
        /* all or nothing: rank 0 lists every rank's shard and commits, or every rank removes its
         * own */
        ig_err lerr = {0};
        ig_status ls = ig_output_commit_ranks(ctx, o->comm, &spec, s == IG_OK,
                                              (const char *const *)st->shard_prefixes,
                                              st->n_shard_prefixes, s == IG_OK ? err : &lerr);
        if (s == IG_OK) s = ls;
    } else if (s == IG_OK && world == 1 && (s = ig_output_prepare(ctx, &spec, err)) == IG_OK) {
        s = write_shard(ctx, o, cd, prefix, c0, c1, st, err);
        /* the one commit point: the marker goes once the shard is in place */
        if (s == IG_OK) s = ig_output_commit(&spec, err);
        if (s != IG_OK) ig_output_discard(ctx, &spec);
        if (s == IG_OK) st->shard_prefixes[st->n_shard_prefixes++] = prefix, prefix = NULL;
    }
    free(prefix);
    ig_clip_dataset_close(cd);
    st->seconds = ig_now() - t0;
    return s;
}
