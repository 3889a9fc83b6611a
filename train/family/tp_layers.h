/* tp_layers.h - private to train/: the tensor-parallel layers every family builds its passes from
 * (Megatron-LM, Shoeybi et al. 2019; sequence parallelism, Korthikanti et al. 2022), over the
 * backend's memory and the model's tensor-parallel group:
 *   - a column-parallel layer computes its slice of the output columns from the whole input: with
 *     sequence parallelism the input rows are all-gathered first (ig_tp_gather), and in the
 *     backward its input gradient is a partial sum, reduced over the group (ig_tp_dinput_*);
 *   - a row-parallel layer computes a partial sum of the whole output from its slice of the input
 *     columns, all-reduced (or, with sequence parallelism, reduce-scattered to each rank's rows),
 *     the bias added once (ig_tp_row_linear);
 *   - the vocabulary-parallel embedding looks up its slice of the rows (a partial sum, reduced
 *     like a row-parallel output) and the vocabulary-parallel cross-entropy takes the row maximum
 *     and then [sum of exponentials; target logit] over the group (ig_tp_cross_entropy).
 * With one rank every function is the plain layer: no collective, no copy.
 */
#ifndef INGOT_TRAIN_TP_LAYERS_H
#define INGOT_TRAIN_TP_LAYERS_H

#include "model/model.h"

/* The rows [Nl, C] gathered over the group into full [N, C] with sequence parallelism (*out =
 * full); without it *out = rows. N: the micro-batch's rows. */
ig_status ig_tp_gather(ig_model *m, const void *rows, void *full, int N, int C, const void **out,
                       ig_err *err);
/* A partial sum [N, C] over the group into this rank's rows: all-reduced in place (out must then
 * be partial), or with sequence parallelism reduce-scattered from partial into out [Nl, C]. */
ig_status ig_tp_reduce(ig_model *m, void *partial, void *out, int N, int C, ig_err *err);
/* A row-parallel linear layer: out [Nl, OC] = inp [N, K] @ W (W this rank's K rows of the whole,
 * in layout), summed over the group, bias [OC] (may be NULL) added once. partial: [N, OC] scratch
 * for the unreduced sum (used with sequence parallelism only). */
ig_status ig_tp_row_linear(ig_model *m, void *out, const void *inp, const void *w,
                           ig_w_layout layout, const void *bias, void *partial, int N, int K,
                           int OC, ig_err *err);
/* The input gradient of a column-parallel layer: compute it into ig_tp_dinput_target(m, partial,
 * dst) (partial [N, C] scratch with tp > 1, else dst itself), then ig_tp_dinput_reduce leaves
 * this rank's rows of the sum in *out (dst with sequence parallelism or one rank, else partial). */
void *ig_tp_dinput_target(const ig_model *m, void *partial, void *dst);
ig_status ig_tp_dinput_reduce(ig_model *m, void *partial, void *dst, int N, int C, void **out,
                              ig_err *err);
/* The vocabulary-parallel cross-entropy of logits [N, Vl] (this rank's padded_vocab / tp columns,
 * the model's vocab_size real in all): losses [N] and, with dloss (may be NULL), the logits
 * overwritten by their gradient. targets: this rank's column of each row's target, or -1.
 * rowmax [N] and stats [2N] are fp32 scratch (used with tp > 1). */
ig_status ig_tp_cross_entropy(ig_model *m, float *losses, void *logits, const int32_t *targets,
                              const float *dloss, float *rowmax, float *stats, int N, ig_err *err);

/* A partial sum [n] over the group (a replicated input's gradient through column-parallel
 * layers), all-reduced in place, whatever the sequence parallelism. */
ig_status ig_tp_sum(ig_model *m, void *buf, uint64_t n, ig_err *err);

/* ---- Ulysses' sequence parallelism (DeepSpeed-Ulysses, Jacobs et al. 2023) -------------------
 * The usp ranks of the part's sequence group each hold Nl = N / usp consecutive token rows of the
 * micro-batch. Around attention, one all-to-all turns this rank's rows of every head into every
 * row of its 1/usp of the heads, and another turns them back. A row of `blocks` blocks of W
 * columns (q, k, v: 3 blocks of the rank's heads) becomes, per row of the micro-batch, this rank's
 * W / usp columns of each block (its heads, in order). With usp 1 these are plain copies. */

/* rows [Nl, blocks W] (this rank's rows) -> heads [N, blocks W / usp] (every row, this rank's
 * columns). pack: [Nl, blocks W] scratch. */
ig_status ig_usp_to_heads(ig_model *m, const void *rows, void *heads, void *pack, int Nl,
                          int blocks, int W, ig_err *err);
/* The reverse: heads [N, blocks W / usp] -> rows [Nl, blocks W]. */
ig_status ig_usp_to_rows(ig_model *m, const void *heads, void *rows, void *pack, int Nl, int blocks,
                         int W, ig_err *err);

#endif
