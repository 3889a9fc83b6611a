/* objective.h - private to train/: what a run optimises, apart from what it reads and from the
 * model family that computes it. An objective (train/objectives/) owns its random draws, the
 * staging of a micro-batch with its targets, the reading of its loss, its validation grid, its
 * evaluation and, where it has one, its sampler; it names the input it reads (a source of the feed:
 * feed.c) and asks the family what only the family knows (its ig_*_model below, family.h's
 * for_objective). next-token      (objectives/next_token.c): cross-entropy of each next token, over
 * token shards; sampled by generating text rectified-flow  (objectives/flow.c, flow_use.c): a
 * diffusion model's velocity x_t -> eps - x0 under squared error, over clip shards; sampled by
 * Euler steps to videos vae  (objectives/vae.c, vae_use.c): a VAE's L1 reconstruction of each frame
 * plus a weighted KL term, over clip shards; no sampler The trainer, the feed, the planner, the
 * layout checks and the commands ask the objective; none of them branches on the kind of input.
 */
#ifndef INGOT_TRAIN_OBJECTIVE_H
#define INGOT_TRAIN_OBJECTIVE_H

#include "model/model.h"

/* A micro-batch as the feed gives it, whatever its source: tokens [B, T + 1] with the options they
 * are staged with, or clips (with their captions' token ids when the model reads captions); where
 * it is in the stream (its draws' key) and, in validation, which of the objective's repeats of it
 * this is (the grid of times of a diffusion model). */
typedef struct ig_micro_batch {
    const int32_t *tokens; /* tokens: [B, T + 1] */
    int B, T;
    const ig_batch_opts *bo;
    const ig_clip_batch *clips;             /* clips */
    const int32_t *captions, *caption_lens; /* [n, caption_len], [n] (NULL: not read) */
    int caption_len;
    /* or the captions' features [n, caption_len, D] fp32 (data.caption_features; NULL: not
     * read), caption_lens their rows */
    const float *features;
    const ig_train_config *t; /* the configuration the feed reads by (the draws' seed, ...) */
    const ig_latent_vae *vae; /* clips of latent shards: the VAE that made them (NULL: frames) */
    uint64_t unit;            /* the micro-batch's index in the stream */
    int valid;                /* a validation micro-batch */
    int repeat, repeats;
} ig_micro_batch;

/* A shape of clip micro-batch the data holds: B clips of F x H x W. */
typedef struct ig_clip_shape {
    int B, F, H, W;
} ig_clip_shape;

/* Clips' labels, as the shards hold them (a class-conditioned model checks them: ig_clip_facts). */
typedef struct ig_label_facts {
    uint64_t labelled; /* clips with a label */
    uint32_t top;      /* the largest label (when labelled), in clip top_clip of shard top_shard */
    const char *top_shard;
    uint64_t top_clip;
    const char *bare_shard; /* the first shard none of whose bare_clips clips has a label (NULL:
                               every shard has labels) */
    uint64_t bare_clips;
    /* clips without a label in shards that have some, and the first such shard */
    uint64_t unlabelled;
    const char *unlabelled_shard;
} ig_label_facts;

/* What the data says, for completing a shape (ig_feed_facts). */
typedef struct ig_data_facts {
    int vocab;              /* tokens: the shards' vocabulary (0: no manifest says) */
    int32_t eod;            /* tokens: their end-of-document id (-1: none) */
    uint64_t caption_vocab; /* clips: their captions' tokenizer's vocabulary (0: no captions) */
    /* clips: the encoder that made their caption features (data.caption_features; NULL: none)
     * and the tokens they were cut to */
    const ig_feature_encoder *caption_encoder;
    int caption_features_len;
    /* clips: the values a position holds for the model (3: RGB pixels; latents: the VAE's C)
     * and, of latent shards, the VAE that made them (NULL: frames) */
    int channels;
    const ig_latent_vae *latents;
    const ig_clip_shape *shapes; /* clips: the shapes of micro-batch they come in */
    size_t n_shapes;
    ig_label_facts labels; /* clips: their labels */
    /* where a fit's warnings go (what it lets through: clips trained as the null class); NULL:
     * the data is checked, not trained on (eval), and nothing is said */
    ig_ctx *ctx;
} ig_data_facts;

/* What a run's shape and micro-batch come to once the data is known (an objective's fit). */
typedef struct ig_fit {
    ig_model_config shape; /* in: the configuration's; out: completed and checked */
    int B, T;              /* out: the largest micro-batch (samples or clips, tokens of one) */
    ig_batch_opts bo;      /* out: what token micro-batches are staged with */
} ig_fit;

typedef struct ig_objective {
    const char *name;    /* "next-token", "rectified-flow" (ig_model_objective) */
    const char *input;   /* the feed source it reads: "tokens", "clips" */
    const char *sampler; /* what sampling makes: "text", "video" (NULL: none) */
    const char *units;   /* what a micro-batch is counted in: "samples", "clips" */
    int shapes_vary;     /* its micro-batches come in several shapes (the largest is planned) */
    /* its own keys (beyond the trainer's), bound into ig_train_config */
    const ig_cfg_key *keys;
    size_t n_keys;
    /* The shape completed from the data (a vocabulary, the longest clip's tokens) and the largest
     * micro-batch; the trainer's configuration t (its micro_batch, its masks). */
    ig_status (*fit)(ig_fit *fit, const ig_train_config *t, const ig_data_facts *facts,
                     ig_err *err);
    /* The units of a micro-batch's T that a clip of F x H x W takes (its tokens, its pixels),
     * refused with the numbers when the model cannot take it; NULL: it reads no clips. */
    ig_status (*clip_tokens)(const ig_model_config *c, int F, int H, int W, int *tokens,
                             ig_err *err);
    /* What a layout must satisfy beyond the family's (token micro-batches split by sp); NULL:
     * nothing. */
    ig_status (*check_layout)(const ig_train_config *t, const ig_model_config *c, int tp, int sp,
                              ig_err *err);
    /* What planning needs that a configuration may leave to the data (NULL: nothing). */
    ig_status (*plannable)(const ig_model_config *c, ig_err *err);
    /* The validation grid: how many times each validation micro-batch is staged (1: once). */
    int (*eval_repeats)(const ig_train_config *t);
    /* What the feed reads per sample beyond the input itself (a caption's tokens: its length;
     * 0: nothing). */
    int (*caption_len)(const ig_model_config *c);
    /* Stages a micro-batch into slot with its draws and targets; the loss's gradient scaled by
     * grad_scale (0: a forward only). *counted (may be NULL): what the loss counts. */
    ig_status (*stage)(ig_model *m, int slot, const ig_micro_batch *in, float grad_scale,
                       uint64_t *counted, ig_err *err);
    /* The slot's mean loss after its forward (the last stage's). */
    ig_status (*loss)(ig_model *m, int slot, double *loss, ig_err *err);
    /* ingot eval (train.h's ig_model_evaluate): opens the model at path, evaluates it on o's data
     * into res. */
    ig_status (*evaluate)(ig_ctx *ctx, ig_backend *be, const char *path, const ig_eval_opts *o,
                          ig_eval_result *res, ig_err *err);
    /* Frees what it keeps for a model between micro-batches (m->os; NULL: nothing). */
    void (*release)(ig_model *m);
} ig_objective;

/* The objective of a shape's family. */
const ig_objective *ig_objective_of(const ig_model_config *c);

#endif
