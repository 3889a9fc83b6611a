/* next_token_model.h - what the next-token objective (next_token.c) asks of a family that it
 * trains; on the families' side of the wall (a family's descriptor names ig_objective_next_token).
 *
 * A family it trains keeps, per slot, int32 [N] input ids (this rank's vocabulary slice: another
 * rank's -1), [N] targets (likewise), [N] document ids (N = the model's B x T rows), and io fp32
 * [N] per-row losses then [N] their gradients, which its head's cross-entropy fills and reads; and
 * m->doc_attention tells its attention to stay within documents (family/lm.h has the helpers the
 * decoders share).
 */
#ifndef INGOT_OBJECTIVES_NEXT_TOKEN_MODEL_H
#define INGOT_OBJECTIVES_NEXT_TOKEN_MODEL_H

#include "family/objective.h"

extern const ig_objective ig_objective_next_token;

#endif
