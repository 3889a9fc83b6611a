/* gpt2.h - private to train/models/gpt2/: GPT-2's state shared by its model file (gpt2.c: the
 * table, the checks, the memory plan, Hugging Face files) and its pass file (gpt2_pass.c: forward,
 * backward and generation).
 */
#ifndef INGOT_GPT2_H
#define INGOT_GPT2_H

#include "../../family.h"

/* The tensors of a layer, in Hugging Face's order. */
enum {
    GPT2_LN1W,
    GPT2_LN1B,
    GPT2_QKVW,
    GPT2_QKVB,
    GPT2_PROJW,
    GPT2_PROJB,
    GPT2_LN2W,
    GPT2_LN2B,
    GPT2_FCW,
    GPT2_FCB,
    GPT2_FCPW,
    GPT2_FCPB,
    GPT2_PER_LAYER
};

/* Places (family.h: offsets in elements within a slot, or in the scratch's recomputed region) of
 * one layer's activations: act type for the tensors, fp32 for the LayerNorm statistics and the
 * log-sum-exp of attention. N = B * T rows; Nl = N / tp rows with sequence parallelism (else N);
 * Cl = C / tp. Which are kept per slot depends on train.recompute (gpt2.c's layout). */
typedef struct gpt2_layer_acts {
    uint64_t ln1, ln1_mean, ln1_rstd; /* [Nl, C], [Nl], [Nl] */
    uint64_t ln1_full;                /* [N, C] sp: ln1 gathered over the group */
    uint64_t qkv;                     /* [N, 3 Cl] */
    uint64_t atty;                    /* [N, Cl] attention output, heads concatenated */
    uint64_t lse;                     /* [B, NH / tp, T] */
    uint64_t attproj;                 /* [Nl, C] */
    uint64_t res2;                    /* [Nl, C] residual after attention */
    uint64_t ln2, ln2_mean, ln2_rstd; /* [Nl, C], [Nl], [Nl] */
    uint64_t ln2_full;                /* [N, C] sp */
    uint64_t fch;                     /* [N, 4 Cl] MLP pre-activation, without its bias */
    uint64_t fch_gelu;                /* [N, 4 Cl] */
    uint64_t fcproj;                  /* [Nl, C] */
    uint64_t res3;                    /* [Nl, C] residual after the MLP (the layer's output) */
} gpt2_layer_acts;

typedef struct gpt2_state {
    int N, Nl, Cl, Vl; /* rows, rows held (sp), channels and vocabulary rows of this rank */
    int t_wte, t_wpe, t_layer0, t_lnf; /* table indices; -1 when not held */
    /* per slot (offsets within the slot) */
    uint64_t encoded; /* [Nl, C] the stage's input: embeddings, or the previous stage's output */
    gpt2_layer_acts *layer;           /* [l1 - l0] */
    uint64_t output;                  /* [Nl, C] a middle stage's output (the last layer's res3) */
    uint64_t lnf, lnf_mean, lnf_rstd; /* [Nl, C], [Nl], [Nl] */
    uint64_t lnf_full;                /* [N, C] sp */
    uint64_t logits; /* [N, Vp / tp]; the backward overwrites them with their grads */
    /* scratch shared by the slots */
    uint64_t dres, dres_full, dln, dpartial, datty, dqkv, dfcg, dfch, partial; /* act */
    uint64_t rowmax, stats;                                                    /* fp32 */
} gpt2_state;

static inline gpt2_state *gpt2_of(const ig_model *m) {
    return (gpt2_state *)m->fs;
}
/* The index of the tensor of layer l (a global layer index) and kind (GPT2_*). */
static inline size_t gpt2_lt(const ig_model *m, int l, int which) {
    return (size_t)gpt2_of(m)->t_layer0 + (size_t)(l - m->part.l0) * GPT2_PER_LAYER + (size_t)which;
}

/* gpt2_pass.c */
extern const ig_stage_hooks gpt2_stage;
void gpt2_stage_io(ig_model *m, int slot, ig_stage_io *io);
ig_status gpt2_gen_open(ig_model *m, int Tmax, void **session, ig_err *err);
ig_status gpt2_gen_feed(void *session, const int32_t *tokens, int n, int pos0, const float **logits,
                        ig_err *err);
void gpt2_gen_close(void *session);

#endif
