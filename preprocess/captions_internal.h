/* captions_internal.h - private to preprocess/: the stage that turns a run of clips' captions into
 * a caption-feature shard, shared by ingot preprocess captions (captions_pipeline.c: the captions
 * of clip shards) and preprocess video (video_pipeline.c: the captions of the videos it has just
 * cut into clips).
 *
 * The clips come in runs that share a caption (the clips of one video): each run's text is
 * tokenized as it is added, its ids kept until max_batch captions are waiting, then they are
 * encoded in one call and every waiting run is written in order - the first clip of a run its
 * values, the others a repeat of them (stored once), a run without a caption none.
 */
#ifndef INGOT_CAPTIONS_INTERNAL_H
#define INGOT_CAPTIONS_INTERNAL_H

#include "preprocess.h"

typedef struct ig_feature_stage ig_feature_stage;

/* A stage writing PREFIX's feature shard: the clips it will be given are clips first_clip ..
 * of the clip data of data_clips clips and key clip_key. */
ig_status ig_feature_stage_create(ig_feature_stage **out, ig_ctx *ctx,
                                  const ig_caption_features_opts *o, const char *prefix,
                                  uint64_t first_clip, uint64_t data_clips, uint64_t clip_key,
                                  ig_err *err);
/* The next `clips` clips share the caption text[0..len) (len 0: none). Errors name `what` (the
 * clip or video the caption is of). */
ig_status ig_feature_stage_add(ig_feature_stage *s, const char *text, size_t len, uint64_t clips,
                               const char *what, ig_err *err);
/* Encodes and writes what waits, commits the shard's files and writes its manifest (sources: the
 * clips it was made from; output: the preprocess output it belongs to). Adds its counts to st
 * (clips, captioned, encoded, cut, tokens). */
ig_status ig_feature_stage_finish(ig_feature_stage *s, const char *const *sources, size_t n_sources,
                                  const char *output, ig_captions_stats *st, ig_err *err);
/* Frees s; a shard it did not finish is removed. NULL is a no-op. */
void ig_feature_stage_free(ig_feature_stage *s);

/* Checks the options against the encoder (a caption length it takes, a dtype it can round). */
ig_status ig_caption_features_check(const ig_caption_features_opts *o, ig_err *err);

#endif
