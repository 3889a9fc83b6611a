/* feed.h - private to train/: where the trainer's micro-batches come from, whatever the objective
 * reads. A feed reads one source (feed_internal.h's sources, each a file: feed_tokens.c, the
 * blended and split token stream of language models; feed_clips.c, the bucketed clip loader of
 * diffusion models), named by the objective (objective.h's input). The loop, the schedule,
 * validation, evaluation and the checkpoints use this one interface; the objective makes of each
 * micro-batch what its model reads.
 *
 * A micro-batch carries its index in the stream (the objective keys its draws by it, so every
 * layout and every resume draws the same) and, for validation, which of the objective's repeats of
 * it this is: a validation feed reads from the start, on one rank, and gives each micro-batch
 * `repeats` times (the grid of times of a diffusion model).
 */
#ifndef INGOT_TRAIN_FEED_H
#define INGOT_TRAIN_FEED_H

#include "family/objective.h"

typedef struct ig_feed ig_feed;

/* The most shapes of micro-batch a run's data may come in (ig_data_facts.shapes holds this many).
 */
enum { IG_FEED_MAX_SHAPES = 1024 };

typedef struct ig_feed_opts {
    const char *input; /* the source: an objective's input ("tokens", "clips") */
    int valid;         /* the validation data (a split of the tokens; the clips in order) */
    uint64_t samples;  /* tokens: the samples the data's index is built for */
    int repeats;       /* each micro-batch given this many times (1: once) */
    int caption_len;   /* clips: the caption tokens read with each clip (0: none) */
} ig_feed_opts;

/* Opens the data of configuration t as o says. Errors are prefixed for the user ("data", or what
 * validation needs); an unknown source is IG_ERR_INTERNAL. */
ig_status ig_feed_open(ig_feed **out, ig_ctx *ctx, const ig_train_config *t, const ig_feed_opts *o,
                       ig_err *err);
void ig_feed_close(ig_feed *f); /* NULL is a no-op */

/* Starts (or restarts) reading: this data-parallel rank's micro-batches, accum per step, from
 * start (NULL: the beginning); a validation feed reads from the beginning on one rank. */
ig_status ig_feed_start(ig_feed *f, const ig_loader_state *start, int dp, int rank, int accum,
                        ig_err *err);
/* the options every token micro-batch is staged with (the end-of-document id, masks) */
void ig_feed_set_batch_opts(ig_feed *f, const ig_batch_opts *bo);
/* The next micro-batch (valid until the next call). */
ig_status ig_feed_next(ig_feed *f, ig_micro_batch *out, ig_err *err);
/* What to save to resume, and the identity of the data (its index's key). */
ig_loader_state ig_feed_state(const ig_feed *f);
uint64_t ig_feed_key(const ig_feed *f);
/* Micro-batches the feed gives per micro-batch read. */
int ig_feed_repeats(const ig_feed *f);
/* What the data says (objective.h): the shards' vocabulary, their captions' tokenizer, the shapes
 * of micro-batch; valid while the feed is open. */
ig_status ig_feed_facts(ig_feed *f, ig_data_facts *out, ig_err *err);
/* What clip shards say of their captions, labels and values (caption_vocab, labels, latents and
 * channels of out; the rest untouched), as the clips source's facts give them. */
void ig_clip_facts(const ig_clip_dataset *ds, ig_data_facts *out);
/* What a checkpoint says of its run's data: its index key, the samples the index was built for
 * (0: unknown, version 1), the steps done, the samples (tokens) or micro-batches (clips) read, and
 * the run's train.global_batch (0: not recorded, before issue 26). */
typedef struct ig_feed_then {
    uint64_t key, samples, consumed;
    int64_t step, global_batch;
} ig_feed_then;

/* Resuming this feed's run from a checkpoint's: IG_OK when it goes on over the same data in the
 * same order, *start's key then this feed's; IG_ERR_CONFIG saying what changed otherwise. A token
 * stream whose run length changed is the same data when the index built for the saved length has
 * the saved key (*rebuilt 1: the run goes on from the consumed samples of the new index, as
 * Megatron's does when --train-iters grows); another global batch keeps the order of a token
 * stream only when train.steps x global_batch is the saved run's and what is left fits in the
 * index (a clip stream's order does not depend on it). What the user should hear (another global
 * batch) is written to said (cap bytes; "" when nothing). */
ig_status ig_feed_resume(ig_feed *f, const ig_feed_then *then, ig_loader_state *start, int *rebuilt,
                         char *said, size_t cap, ig_err *err);

#endif
