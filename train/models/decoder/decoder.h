/* decoder.h - private to train/models/decoder/: the decoder family, one causal transformer with
 * options (Megatron-Core's one GPT model with layer specs): the norm (LayerNorm or RMSNorm), the
 * positions (learned or rotary), the MLP (a replaceable piece: tanh-GeLU or SwiGLU), grouped-query
 * attention, biases or none, the weights' layout ([in, out] as GPT-2's Conv1D, or [out, in] as
 * nn.Linear), a tied or untied head. model.arch gpt2 and llama are presets of it (gpt2.c,
 * llama.c: their options, tensor names and Hugging Face files); decoder.c holds the shape's
 * common checks, the tensor table and the activations, decoder_pass.c the passes, decoder_mlp.c
 * the MLPs, decoder_gen.c generation with a key/value cache.
 */
#ifndef INGOT_DECODER_H
#define INGOT_DECODER_H

#include "family/lm.h"
#include "objectives/next_token_model.h"

enum { DEC_LAYERNORM = 0, DEC_RMSNORM };

/* The decoder's own configuration (its model.* keys, in ig_model_config.own; the gpt2 preset fixes
 * them, llama's keys set them). */
typedef struct dec_shape {
    int n_kv_heads;     /* key/value heads of grouped-query attention; 0: n_head */
    int ffn_hidden;     /* the MLP's width; 0: the preset's */
    double rope_theta;  /* the rotary base; 0: 10000 */
    int tie_embeddings; /* the output layer is the input embedding */
} dec_shape;
IG_DEFINE_OWN(dec_shape)
static inline dec_shape dec_own(const ig_model_config *c) {
    return IG_OWN_GET(dec_shape, c);
}

/* A layer's tensors by role (dec_state.role maps each to its index within the layer, -1 when the
 * preset has none). The MLP's roles are the MLP piece's (decoder_mlp.c). */
enum {
    DEC_NORM1_W,
    DEC_NORM1_B,
    DEC_QKV_W,
    DEC_QKV_B,
    DEC_PROJ_W,
    DEC_PROJ_B,
    DEC_NORM2_W,
    DEC_NORM2_B,
    DEC_MLP0, /* the MLP's first tensor; its others follow */
    DEC_ROLES = DEC_MLP0 + 4
};

/* The names a preset gives the tensors (printf formats of the layer index for a layer's). */
typedef struct dec_names {
    const char *embed, *pos;      /* pos NULL: no learned positions */
    const char *layer[DEC_ROLES]; /* NULL: the preset has no such tensor */
    const char *norm_w, *norm_b;  /* the final norm */
    const char *head;             /* the untied output layer */
} dec_names;

typedef struct dec_mlp dec_mlp;

/* A preset: the options model.arch fixes. */
typedef struct dec_preset {
    int norm;           /* DEC_LAYERNORM (weight and bias) or DEC_RMSNORM (weight) */
    int rotary;         /* rotary positions (model.rope_theta) instead of learned ones */
    const dec_mlp *mlp; /* the MLP piece */
    int bias;           /* the linear layers have biases */
    ig_w_layout layout; /* how the linear layers' weights are stored */
    int scaled_init;    /* the residual projections' std is 0.02 / sqrt(2 L) (GPT-2's) */
    dec_names names;
    const ig_op *ops; /* the backend operations the options need */
    size_t n_ops;
} dec_preset;

/* Places (family.h: offsets within a slot, or in the scratch's recomputed region; which are kept
 * per slot depends on train.recompute) of one layer's activations. N = B * T rows; Nl = N / tp
 * with sequence parallelism (else N); Ql = (NH + 2 NKV) hs / tp; Hl = NH hs / tp. */
typedef struct dec_layer_acts {
    uint64_t n1, n1_full;  /* [Nl, C], [N, C] sp: the attention's normed input */
    uint64_t mean1, rstd1; /* fp32 [Nl] each (mean: LayerNorm only) */
    uint64_t qkv;          /* [N, Ql] (after the rotary embedding) */
    uint64_t atty;         /* [N, Hl] attention output, heads concatenated */
    uint64_t lse;          /* fp32 [B, NH / tp, T] */
    uint64_t attproj;      /* [Nl, C] */
    uint64_t res2;         /* [Nl, C] residual after attention */
    uint64_t n2, n2_full;  /* [Nl, C], [N, C] sp */
    uint64_t mean2, rstd2; /* fp32 [Nl] each */
    uint64_t mlp[3];       /* the MLP's own (decoder_mlp.c) */
    uint64_t mlp_out;      /* [Nl, C] */
    uint64_t res3;         /* [Nl, C] residual after the MLP (the layer's output) */
} dec_layer_acts;

typedef struct dec_state {
    const dec_preset *pre;
    int N, Nl, Ql, Hl, Fl, Vl; /* rows, rows held (sp), this rank's q|k|v, heads, MLP, vocabulary */
    int t_embed, t_pos, t_layer0, t_norm, t_head; /* table indices; -1 when not held */
    int per_layer;                                /* tensors of a layer */
    int role[DEC_ROLES];                          /* each role's index within a layer, or -1 */
    /* per slot */
    uint64_t encoded;        /* [Nl, C] the stage's input */
    dec_layer_acts *layer;   /* [l1 - l0] */
    uint64_t output;         /* [Nl, C] a middle stage's output */
    uint64_t hn, hn_full;    /* the final norm: [Nl, C], [N, C] sp */
    uint64_t mean_n, rstd_n; /* fp32 [Nl] */
    uint64_t logits;         /* [N, Vl]; the backward overwrites them with their gradient */
    /* scratch shared by the slots */
    uint64_t dres, dres_full, dln, dpartial, dtmp, partial, datty, dqkv, dmlp[3]; /* act */
    uint64_t rowmax, stats;                                                       /* fp32 */
} dec_state;

/* The MLP piece: its tensors, activations and passes (decoder_mlp.c). Its input is the layer's
 * normed n2 (gathered over the tensor-parallel group with sp), its output the row-parallel
 * projection into mlp_out. */
struct dec_mlp {
    int n_tensors;         /* its roles DEC_MLP0 .. */
    int n_weights;         /* of them, matrices of F x C (the FLOPs) */
    int n_acts, n_scratch; /* its activations per layer (act type, [N, Fl] each) and scratch */
    int second_input;      /* two column-parallel layers read the input: a scratch [N, C] for the
                              second one's input gradient (dec_state.dtmp) */
    unsigned bias_mask;    /* bit k: its role k is a bias (absent when the preset has none) */
    /* the tensor of role k (0 ..): [out, in] with out the MLP's width (col) or the model's (row) */
    void (*tensor)(const ig_model_config *c, const dec_preset *pre, int k, ig_tensor_spec *t);
    /* forward from the normed input h [N, C]: up to its activations; all: and the projection
     * into out [Nl, C] */
    ig_status (*forward)(ig_model *m, int l, const void *h, void *const *acts, void *out, int N,
                         int all, ig_err *err);
    /* backward from dout [N, C] (the output's gradient, gathered): the input's gradient into
     * dinput [N, C] (a column-parallel target, ig_tp_dinput_target) */
    void (*backward)(ig_model *m, int l, const void *dout, const void *h, void *const *acts,
                     void *dinput, int N);
};

extern const dec_mlp dec_mlp_gelu, dec_mlp_swiglu;

static inline dec_state *dec_of(const ig_model *m) {
    return (dec_state *)m->fs;
}
/* The index of the tensor of role `role` of layer l (a global layer index). */
static inline size_t dec_lt(const ig_model *m, int l, int role) {
    const dec_state *x = dec_of(m);
    return (size_t)x->t_layer0 + (size_t)(l - m->part.l0) * (size_t)x->per_layer +
           (size_t)x->role[role];
}
static inline void *dec_param(const ig_model *m, int l, int role) {
    return dec_of(m)->role[role] < 0 ? NULL : ig_model_param(m, dec_lt(m, l, role));
}
static inline void *dec_grad(const ig_model *m, int l, int role) {
    return dec_of(m)->role[role] < 0 ? NULL : ig_model_grad(m, dec_lt(m, l, role));
}
static inline int dec_hs(const ig_model_config *c) {
    return c->d_model / c->n_head;
}

/* decoder.c: what gpt2.c and llama.c build their families from */
const dec_preset *dec_preset_of(const ig_model_config *c);
ig_status dec_check_layout(const ig_model_config *c, int tp, ig_err *err);
uint64_t dec_num_params(const ig_model_config *c);
double dec_flops_per_token(const ig_model_config *c, int T);
size_t dec_tensors(const ig_model_config *c, const ig_part *p, ig_tensor_spec *out, size_t cap);
void dec_plan(const ig_model_config *c, const ig_part *p, int B, int T, ig_act_sizes *out);
ig_status dec_create(ig_model *m, ig_err *err);
void dec_destroy(ig_model *m);
const char *dec_differs(const ig_model_config *a, const ig_model_config *b);
/* ", N positions, vocabulary V (Vp padded)": what every preset's description starts with; returns
 * its length (gpt2's whole description, which llama's continues) */
size_t dec_describe_tokens(const ig_model_config *c, char *buf, size_t cap);
void dec_describe(const ig_model_config *c, char *buf, size_t cap);
ig_comm_micro dec_comm_micro(const ig_model_config *c, const ig_part *p, int B, int T, uint64_t e,
                             int recompute);
/* the checks every preset shares (positive sizes, heads dividing d_model, the vocabulary);
 * even_heads: the rotary embedding turns pairs of channels */
ig_status dec_check_common(ig_model_config *c, int even_heads, ig_err *err);

/* decoder_pass.c */
extern const ig_stage_hooks dec_stage;
void dec_stage_io(ig_model *m, int slot, ig_stage_io *io);

/* decoder_gen.c */
ig_status dec_gen_open(ig_model *m, int Tmax, void **session, ig_err *err);
ig_status dec_gen_feed(void *session, const int32_t *tokens, int n, int pos0, const float **logits,
                       ig_err *err);
void dec_gen_close(void *session);

/* the presets (gpt2.c, llama.c) */
extern const dec_preset dec_gpt2, dec_llama;

#endif
