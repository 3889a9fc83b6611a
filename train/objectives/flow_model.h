/* flow_model.h - what the rectified-flow objective (flow.c) asks of a family that it trains: the
 * family's ig_flow_model (its descriptor's for_objective) stages the objective's noisy clips as
 * its passes read them and gives back its prediction and squared errors. On the families' side of
 * the wall.
 */
#ifndef INGOT_OBJECTIVES_FLOW_MODEL_H
#define INGOT_OBJECTIVES_FLOW_MODEL_H

#include "family/objective.h"

extern const ig_objective ig_objective_flow;

/* A micro-batch of noisy clips as the objective made it: x_t [B, F, H, W, C] and its times, the
 * conditioning after dropout, and (training) the target eps - x0 in the same layout. */
typedef struct ig_flow_batch {
    int B, F, H, W;
    const float *xt;       /* [B, F, H, W, C] */
    const float *t;        /* [B] */
    const float *target;   /* [B, F, H, W, C], or NULL: a prediction, no loss */
    const int32_t *labels; /* [B] class ids after dropout; the null class is the model's own */
    /* [B] lengths and [B, caption_len] tokens of the captions after dropout (0: the null one) */
    const int32_t *caption_lens, *captions;
    /* or their features [B, caption_len, D] (a model of caption features; NULL otherwise) */
    const float *features;
    float grad_scale;
} ig_flow_batch;

typedef struct ig_flow_model {
    /* C: the values of a clip's position it reads (3 of RGB pixels; a VAE's latent channels),
     * and the VAE of the latents it was trained on (out may be NULL; 0: pixels) */
    int (*channels)(const ig_model_config *c);
    int (*latents)(const ig_model_config *c, ig_latent_vae *out);
    /* the tokens of a clip of F x H x W (refused with the numbers when it does not divide) */
    ig_status (*clip_tokens)(const ig_model_config *c, int F, int H, int W, int *tokens,
                             ig_err *err);
    /* the null class (the label of no class) and the caption's length (0: no captions) */
    int (*null_class)(const ig_model_config *c);
    int (*caption_len)(const ig_model_config *c);
    /* the width of the caption features it attends to, and the encoder of those it was trained
     * on (enc may be NULL); 0: it reads caption tokens, or none */
    int (*caption_features)(const ig_model_config *c, ig_feature_encoder *enc);
    /* the probabilities that a label or a caption is dropped while training */
    double (*dropout)(const ig_model_config *c, int caption);
    /* stages the batch into slot (the first stage its inputs, the last its target) */
    ig_status (*stage)(ig_model *m, int slot, const ig_flow_batch *b, ig_err *err);
    /* the slot's last prediction in the clips' layout [B, F, H, W, C] */
    ig_status (*prediction)(ig_model *m, int slot, float *out, ig_err *err);
    /* the slot's squared errors summed over every rank's rows, and how many values they are */
    ig_status (*squared_error)(ig_model *m, int slot, double *sum, double *count, ig_err *err);
} ig_flow_model;

/* The flow model interface of m's family (NULL: it is not trained by rectified flow). */
const ig_flow_model *ig_flow_model_of(const ig_model *m);

#endif
