/* encode_model.h - what the encode objective (encode.c) asks of a family used frozen to encode
 * text (a T5 encoder, train/models/t5/): the width of its features and the encoding of a batch of
 * captions. On the families' side of the wall (a family's descriptor names ig_objective_encode and
 * points for_objective at its ig_encode_model).
 *
 * The objective has nothing to train: ingot train refuses such a family (ig_train_config_check:
 * an objective without a stage), ingot plan has nothing to plan, and its use is train.h's
 * ig_text_encoder (encode.c), which opens the model for inference and checks every caption before
 * the family sees it.
 */
#ifndef INGOT_OBJECTIVES_ENCODE_MODEL_H
#define INGOT_OBJECTIVES_ENCODE_MODEL_H

#include "family/objective.h"

extern const ig_objective ig_objective_encode;

typedef struct ig_encode_model {
    /* D: the width of a token's features */
    int (*width)(const ig_model_config *c);
    /* Encodes B captions (1 <= B <= m->B): caption b is lens[b] ids at ids[b] (1 <= lens[b] <=
     * m->T, every id below the model's vocabulary: checked by the caller); its features, fp32
     * [lens[b], width] on the host, go to out[b]. A caption's features may not depend on the other
     * captions of the call (each gets what it gets alone). */
    ig_status (*encode)(ig_model *m, int B, const int32_t *const *ids, const int *lens,
                        float *const *out, ig_err *err);
} ig_encode_model;

#endif
