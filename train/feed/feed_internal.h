/* feed_internal.h - private to the feed (feed.c and its sources): a source of micro-batches. */
#ifndef INGOT_TRAIN_FEED_INTERNAL_H
#define INGOT_TRAIN_FEED_INTERNAL_H

#include "feed.h"

typedef struct ig_feed_source {
    const char *name; /* what an objective names as its input */
    /* reads the data of f->t as f->o says into f->src */
    ig_status (*open)(ig_feed *f, ig_err *err);
    void (*close)(ig_feed *f);
    ig_status (*start)(ig_feed *f, const ig_loader_state *start, int dp, int rank, int accum,
                       ig_err *err);
    /* a new micro-batch into out (the feed sets where it is in the stream) */
    ig_status (*next)(ig_feed *f, ig_micro_batch *out, ig_err *err);
    ig_loader_state (*state)(const ig_feed *f);
    uint64_t (*key)(const ig_feed *f);
    ig_status (*facts)(ig_feed *f, ig_data_facts *out, ig_err *err);
    ig_status (*resume)(ig_feed *f, const ig_feed_then *then, ig_loader_state *start,
                        int *rebuilt, char *said, size_t cap, ig_err *err);
} ig_feed_source;

/* The run's samples a step (train.global_batch, or one micro-batch). */
int64_t ig_feed_global_batch(const ig_train_config *t);

struct ig_feed {
    ig_ctx *ctx;
    const ig_train_config *t;
    ig_feed_opts o;
    const ig_feed_source *source;
    void *src;          /* the source's state */
    ig_batch_opts bo;   /* tokens' staging options */
    ig_micro_batch cur; /* the micro-batch given (again for each repeat) */
    int repeat;
};

extern const ig_feed_source ig_feed_tokens, ig_feed_clips;

#endif
