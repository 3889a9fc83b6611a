/* cmd_text_encoder.h - private to the ingot program: a frozen text encoder opened for a command
 * (preprocess captions, preprocess video --text-encoder, sample --text-encoder), its memory stated
 * before anything is loaded, and wrapped as the preprocess module's ig_caption_encoder. */
#ifndef INGOT_CMD_TEXT_ENCODER_H
#define INGOT_CMD_TEXT_ENCODER_H

#include "preprocess/preprocess.h"
#include "train/train.h"

typedef struct ig_cmd_text_encoder {
    ig_backend *be;
    ig_text_encoder *enc;
    ig_tokenizer *tok;
    ig_caption_encoder ce;       /* the encoder as the shards record it, and its encoding */
    ig_caption_features_opts fo; /* ce, tok, the caption length and the dtype */
} ig_cmd_text_encoder;

/* Opens the encoder of the Hugging Face directory dir on the CPU (device 0, fp32) or a GPU (1,
 * bf16) for batch captions of caption_len tokens, with the tokenizer at tokenizer (NULL or "":
 * dir's own); prints what it takes unless quiet; computes its identity (the weights' hash). What
 * does not fit is refused before anything is loaded (ig_text_encoder_open). */
ig_status ig_cmd_text_encoder_open(ig_cmd_text_encoder *t, ig_ctx *ctx, const char *dir,
                                   const char *tokenizer, int device, int batch, int caption_len,
                                   ig_feature_dtype dtype, int quiet, ig_err *err);
void ig_cmd_text_encoder_close(ig_cmd_text_encoder *t);

/* The features of one text: its ids (end-of-sequence appended, cut to caption_len keeping it, as
 * the shards' captions are) encoded; *feat (malloc'd, [*len, width] fp32) and *len. */
ig_status ig_cmd_text_encoder_features(ig_cmd_text_encoder *t, const char *text, float **feat,
                                       int *len, ig_err *err);

#endif
