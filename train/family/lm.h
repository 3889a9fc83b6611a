/* lm.h - private to train/, for the language-model families (decoders over token ids): what a
 * stage passes on and the memory of a generation session with its key/value cache, written once
 * (lm.c). How a token micro-batch is staged and its loss read is the next-token objective's
 * (objectives/next_token.c).
 */
#ifndef INGOT_TRAIN_LM_H
#define INGOT_TRAIN_LM_H

#include "family.h"

/* What a decoder's stage passes on: one residual stream of Nl x C (act offsets within the slot,
 * encoded and output; dres in the scratch). */
void ig_lm_stage_io(ig_model *m, int slot, uint64_t encoded, uint64_t output, uint64_t dres,
                    ig_stage_io *io);

/* A generation session's memory: per layer a key and a value cache of Tmax rows (kv_row elements
 * each), the family's activations (act elements, f32 floats), the fed tokens and a host row of
 * logits. A family's session struct starts with one. */
typedef struct ig_lm_gen {
    ig_model *m;
    int Tmax;
    uint64_t kv_row;
    void *kv, *act;
    float *f32, *host;
    int32_t *tok;
    void *logits; /* one row of padded_vocab, after the family's activations */
} ig_lm_gen;

ig_status ig_lm_gen_alloc(ig_lm_gen *g, ig_model *m, int Tmax, uint64_t kv_row, uint64_t act,
                          uint64_t f32, ig_err *err);
void ig_lm_gen_release(ig_lm_gen *g);
/* Layer l's key (v 0) or value (v 1) cache [Tmax, kv_row]. */
void *ig_lm_gen_cache(const ig_lm_gen *g, int l, int v);
/* Uploads the n tokens to feed. */
ig_status ig_lm_gen_tokens(ig_lm_gen *g, const int32_t *tokens, int n, ig_err *err);
/* The n new rows of packed qkv [(NH + 2 NKV) hs each, act type] at positions pos0..: their query
 * heads into q [n, NH hs] and their key and value heads into the caches kc, vc at rows pos0..,
 * queued on the backend (no host round trip). */
ig_status ig_lm_kv_append(ig_model *m, const void *qkv, int n, int pos0,
                          const ig_attention_shape *s, void *q, void *kc, void *vc, ig_err *err);
/* The logits of the last of n normed rows hn [n, C] through the output layer head [Vp, C]: into
 * the host row *logits. */
ig_status ig_lm_gen_logits(ig_lm_gen *g, const void *hn, int n, const void *head,
                           const float **logits, ig_err *err);

#endif
