/* llama.h - private to train/models/llama/: the Llama family's state shared by its model file
 * (llama.c: the shape, the table, the memory plan, Hugging Face files) and its pass file
 * (llama_pass.c: forward, backward and generation).
 */
#ifndef INGOT_LLAMA_H
#define INGOT_LLAMA_H

#include "../../family.h"

/* The tensors of a layer, in the table's order. */
enum {
    LLAMA_ATTN_NORM, /* input_layernorm [C] */
    LLAMA_QKV,       /* q|k|v fused [(NH + 2 NKV) hs, C], column-parallel in its three blocks */
    LLAMA_O,         /* o_proj [C, NH hs], row-parallel */
    LLAMA_MLP_NORM,  /* post_attention_layernorm [C] */
    LLAMA_GATE,      /* gate_proj [F, C], column-parallel */
    LLAMA_UP,        /* up_proj [F, C], column-parallel */
    LLAMA_DOWN,      /* down_proj [C, F], row-parallel */
    LLAMA_PER_LAYER
};

/* Places (family.h: offsets in elements within a slot, or in the scratch's recomputed region; which
 * are kept per slot depends on train.recompute) of one layer's activations: act type for the
 * tensors, fp32 for the RMSNorm statistics and the log-sum-exp of attention. N = B * T rows; Nl = N
 * / tp with sequence parallelism (else N); Ql = (NH + 2 NKV) hs / tp; Hl = NH hs / tp; Fl = F / tp.
 */
typedef struct llama_layer_acts {
    uint64_t h1, h1_full, rstd1; /* [Nl, C], [N, C] sp, [Nl]: the attention's normed input */
    uint64_t qkv;                /* [N, Ql] after the rotary embedding */
    uint64_t atty;               /* [N, Hl] */
    uint64_t lse;                /* [B, NH / tp, T] */
    uint64_t attproj;            /* [Nl, C] */
    uint64_t res2;               /* [Nl, C] residual after attention */
    uint64_t h2, h2_full, rstd2; /* [Nl, C], [N, C] sp, [Nl] */
    uint64_t gate, up, act;      /* [N, Fl] each: act = silu(gate) * up */
    uint64_t mlp;                /* [Nl, C] */
    uint64_t res3;               /* [Nl, C] the layer's output */
} llama_layer_acts;

typedef struct llama_state {
    int N, Nl, Ql, Hl, Fl, Vl;
    int t_embed, t_layer0, t_norm, t_head; /* table indices; -1 when not held */
    /* per slot */
    uint64_t encoded;             /* [Nl, C] the stage's input */
    llama_layer_acts *layer;      /* [l1 - l0] */
    uint64_t output;              /* [Nl, C] a middle stage's output */
    uint64_t hn, hn_full, rstd_n; /* the final norm: [Nl, C], [N, C] sp, [Nl] */
    uint64_t logits;              /* [N, Vl] */
    /* scratch shared by the slots */
    uint64_t dres, dres_full, dln, dpartial, dtmp, partial, datty, dqkv, dact, dgate, dup; /* act */
    uint64_t rowmax, stats; /* fp32 */
} llama_state;

static inline llama_state *llama_of(const ig_model *m) {
    return (llama_state *)m->fs;
}
/* The index of the tensor of layer l (a global layer index) and kind (LLAMA_*). */
static inline size_t llama_lt(const ig_model *m, int l, int which) {
    return (size_t)llama_of(m)->t_layer0 + (size_t)(l - m->part.l0) * LLAMA_PER_LAYER +
           (size_t)which;
}
/* the head's size and its q|k|v rows */
static inline int llama_hs(const ig_model_config *c) {
    return c->d_model / c->n_head;
}

/* llama_pass.c */
extern const ig_stage_hooks llama_stage;
void llama_stage_io(ig_model *m, int slot, ig_stage_io *io);
ig_status llama_gen_open(ig_model *m, int Tmax, void **session, ig_err *err);
ig_status llama_gen_feed(void *session, const int32_t *tokens, int n, int pos0,
                         const float **logits, ig_err *err);
void llama_gen_close(void *session);

#endif
