/* feed.h - private to train/: where the trainer's micro-batches come from, whatever the family
 * reads: token sequences from the blended, split data stream (a language model) or video clips
 * from frame shards through the bucketed clip loader (a diffusion model). The loop, the schedule,
 * validation and the checkpoints use this one interface; only feed.c knows the two loaders.
 *
 * Clips: data.path lists clip shard prefixes (no weights); a micro-batch is one of the clip
 * loader's (train.micro_batch clips of one shape, or a bucket's batch). Its draws (noise, time,
 * label dropout) are keyed by (data.seed, the micro-batch's index in the stream), so every layout
 * and every resume draws the same. The validation feed reads the same clips in dataset order and
 * gives each micro-batch eval.timesteps times, once at each time of the grid (k + 0.5) / n, with
 * noise keyed apart from training's: a loss that moves only when the model does.
 */
#ifndef INGOT_TRAIN_FEED_H
#define INGOT_TRAIN_FEED_H

#include "family.h"

typedef struct ig_feed ig_feed;

/* A shape of clip micro-batch the data holds: B clips of F x H x W. */
typedef struct ig_clip_shape {
    int B, F, H, W;
} ig_clip_shape;

/* Opens the training (valid 0) or validation data of configuration t for a family reading kind;
 * tokens: the index built for `samples` samples. Errors are prefixed for the user ("data", or
 * what validation needs). */
ig_status ig_feed_open(ig_feed **out, ig_ctx *ctx, const ig_train_config *t, ig_input_kind kind,
                       int valid, uint64_t samples, ig_err *err);
void ig_feed_close(ig_feed *f); /* NULL is a no-op */

/* Starts (or restarts) reading: this data-parallel rank's micro-batches, accum per step, from
 * start (NULL: the beginning); a validation feed reads from the beginning on one rank. */
ig_status ig_feed_start(ig_feed *f, const ig_loader_state *start, int dp, int rank, int accum,
                        ig_err *err);
/* tokens: the options every micro-batch is staged with (the end-of-document id, masks) */
void ig_feed_set_batch_opts(ig_feed *f, const ig_batch_opts *bo);
/* The next micro-batch (valid until the next call). */
ig_status ig_feed_next(ig_feed *f, ig_stage_input *out, ig_err *err);
/* What to save to resume, and the identity of the data (the index's key). */
ig_loader_state ig_feed_state(const ig_feed *f);
uint64_t ig_feed_key(const ig_feed *f);
/* Micro-batches the feed gives per micro-batch read (validation of clips: the grid's times). */
int ig_feed_repeats(const ig_feed *f);

/* model.cond class: every clip shard of ds must hold labels, each below num_classes; refused
 * naming the shard (and the largest label and its clip). Clips without a label in a shard with
 * labels train as the null class (with warn: said once per shard). ig_feed_open checks its
 * clips with it. */
ig_status ig_clip_labels_check(ig_ctx *ctx, const ig_clip_dataset *ds, int num_classes, int warn,
                               ig_err *err);

/* tokens: the vocabulary and end-of-document id the shards' manifests give */
ig_status ig_feed_vocab(const ig_feed *f, int *vocab, int32_t *eod, ig_err *err);
/* clips: the vocabulary of the caption shards' tokenizer (0: no captions) */
uint64_t ig_feed_caption_vocab(const ig_feed *f);
/* clips: the shapes of micro-batch the data holds, up to cap into out; returns how many */
size_t ig_feed_shapes(const ig_feed *f, ig_clip_shape *out, size_t cap);

#endif
