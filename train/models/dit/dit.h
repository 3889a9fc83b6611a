/* dit.h - private to train/models/dit/: the DiT family's state shared by its model file (dit.c:
 * the shape, the table, the memory plan, the Hugging Face files), its pass file (dit_pass.c:
 * forward and backward) and its input file (dit_input.c: a micro-batch of clips staged as
 * patches, positions, times and targets, and the prediction put back in place).
 */
#ifndef INGOT_DIT_H
#define INGOT_DIT_H

#include "family/family.h"
#include "objectives/flow_model.h"

/* model.cond */
enum { DIT_COND_NONE = 0, DIT_COND_CLASS, DIT_COND_CAPTION };

/* The DiT's own configuration (its model.* keys, in ig_model_config.own). */
typedef struct dit_shape {
    int patch[3];            /* [pt, ph, pw]: frames, rows, columns of a patch */
    const char **patch_list; /* model.patch as configured: parsed into patch by the check, then
                                NULL (a checked shape holds no pointer) */
    size_t n_patch_list;
    int cond;               /* DIT_COND_* */
    int num_classes;        /* cond class: labels 0 .. num_classes - 1 (num_classes: none) */
    double class_dropout;   /* cond class: a label replaced by none while training */
    int caption_len;        /* cond caption: the caption tokens a clip attends to (the model's
                               vocab_size is the caption tokenizer's; id vocab_size the null one) */
    double caption_dropout; /* cond caption: a caption replaced by the null one while training */
    /* cond caption with caption features (PixArt-alpha's way; 0: caption tokens): their width
     * D_text, and the encoder that made those it was trained on (its line, cut to fit, and its
     * weights' and tokenizer's hashes: caption-feature shards' ig_feature_encoder) */
    int caption_channels;
    uint64_t enc_weights, enc_tokenizer;
    char enc_describe[160];
    /* the values of a clip's position (model.in_channels: 3 of RGB pixels, a VAE's latent
     * channels; 0 until the data says) and, of a model of latents, the VAE they came from (its
     * weights' hash: 0 for pixels; scaling and shift, x0 = scaling (z - shift); pixels per
     * latent position; its line, cut) */
    int in_channels;
    uint64_t vae_weights;
    double vae_scaling, vae_shift;
    int vae_downsample;
    char vae_describe[128];
} dit_shape;
IG_DEFINE_OWN(dit_shape)
static inline dit_shape dit_own(const ig_model_config *c) {
    return IG_OWN_GET(dit_shape, c);
}

/* The tensors of the first stage, in the table's order (the embedding table of the labels or the
 * caption tokens only with cond class or caption; with caption features PixArt's caption embedder
 * in its place: y_proj's fc1 and fc2, and the null caption y_embedding). */
enum { DIT_X_W, DIT_X_B, DIT_T0_W, DIT_T0_B, DIT_T2_W, DIT_T2_B, DIT_Y, DIT_PER_FIRST };
enum { DIT_YF1_W = DIT_Y, DIT_YF1_B, DIT_YF2_W, DIT_YF2_B, DIT_YEMB };

/* The tensors of a block, in the table's order. */
enum {
    DIT_ADA_W, /* adaLN_modulation.1 [6D, D]: shift, scale, gate of attention, then of the MLP */
    DIT_ADA_B,
    DIT_QKV_W, /* attn.qkv [3D, D], column-parallel in its q, k, v blocks */
    DIT_QKV_B,
    DIT_PROJ_W, /* attn.proj [D, D], row-parallel */
    DIT_PROJ_B,
    DIT_FC1_W, /* mlp.fc1 [4D, D], column-parallel */
    DIT_FC1_B,
    DIT_FC2_W, /* mlp.fc2 [D, 4D], row-parallel */
    DIT_FC2_B,
    DIT_PER_LAYER,
    /* with cond caption, the cross-attention to the caption (PixArt-alpha's) after these */
    DIT_XQ_W = DIT_PER_LAYER, /* cross_attn.q_linear [D, D], column-parallel */
    DIT_XQ_B,
    DIT_XKV_W, /* cross_attn.kv_linear [2D, D], column-parallel in its k, v blocks */
    DIT_XKV_B,
    DIT_XPROJ_W, /* cross_attn.proj [D, D], row-parallel */
    DIT_XPROJ_B,
    DIT_PER_LAYER_CAPTION
};

/* The tensors of the last stage. */
enum { DIT_F_ADA_W, DIT_F_ADA_B, DIT_F_W, DIT_F_B, DIT_PER_LAST };

/* Where a block's six modulation vectors are in its [B, 6D] rows (DiT's chunk order). */
enum { MOD_SHIFT_MSA, MOD_SCALE_MSA, MOD_GATE_MSA, MOD_SHIFT_MLP, MOD_SCALE_MLP, MOD_GATE_MLP };

#define DIT_FREQ 256 /* the timestep embedding's frequencies (cos | sin) */

/* Places (family.h: offsets in elements within a slot, or in the scratch's recomputed region;
 * which are kept per slot depends on train.recompute) of one block's activations. N = B * T rows;
 * Nl the rows a rank holds: N / tp with Megatron's sequence parallelism, N / usp with Ulysses',
 * else N; Ng the rows of the tensor-parallel layers (N with Megatron's sp, else Nl); C = d_model,
 * Cl = C / tp. */
typedef struct dit_layer_acts {
    uint64_t mod;                       /* [B, 6C] the modulation */
    uint64_t h1, h1_full, mean1, rstd1; /* [Nl, C], [N, C] sp, fp32 [Nl] x2: LN(x)(1+scale)+shift */
    uint64_t qkv;                       /* [Ng, 3Cl]; Ulysses: [N, 3Cl / usp] */
    uint64_t atty;                      /* [Ng, Cl] */
    uint64_t atty_h;                    /* Ulysses: [N, Cl / usp], attention's output */
    uint64_t lse;                       /* fp32 [B, NH / tp, T] */
    uint64_t attproj;                   /* [Nl, C] */
    uint64_t res2;                      /* [Nl, C] x + gate_msa attproj */
    uint64_t res2_full;                 /* captions with sp: [N, C], the gathered q input */
    /* cond caption: res2b = res2 + proj(CrossAttn(q_linear(res2), kv_linear(y))) */
    uint64_t cq, ckv, catt, clse; /* [Ng, Cl], [B Tk, 2Cl], [Ng, Cl], fp32 [Ng, NH / tp] */
    uint64_t cproj, res2b;        /* [Nl, C] x2 */
    uint64_t h2, h2_full, mean2, rstd2;
    uint64_t fch, fch_gelu; /* [N, 4Cl] before and after gelu(+ bias) */
    uint64_t fcproj;        /* [Nl, C] */
    uint64_t res3;          /* [Nl, C] res2 + gate_mlp fcproj: the block's output */
} dit_layer_acts;

typedef struct dit_state {
    int N, Nl, Cl, P;                /* P = 3 pt ph pw: a patch's values */
    int Tk, per_layer;               /* caption tokens (0 without captions); tensors of a block */
    int t_first0, t_layer0, t_last0; /* table indices; -1 when not held */
    /* per slot */
    uint64_t patches;          /* [Nl, P] the first stage's input rows (x_t cut in patches) */
    uint64_t pos;              /* [Nl, C] their sin-cos positions */
    uint64_t freq;             /* [B, 256] the times' frequencies */
    uint64_t th, tsilu, yemb;  /* [B, C]: the time MLP's hidden before and after SiLU; labels' */
    uint64_t encoded;          /* [Nl, C] the stage's input tokens */
    uint64_t cond;             /* [B, C] c = t_emb + y_emb: the stage's input conditioning */
    uint64_t silu_c;           /* [B, C] SiLU(c), the adaLN projections' input */
    dit_layer_acts *layer;     /* [l1 - l0] */
    uint64_t modf;             /* [B, 2C] the final layer's shift and scale */
    uint64_t hf, meanf, rstdf; /* [Nl, C], fp32 [Nl] x2 */
    uint64_t pred;             /* [Nl, P] the velocity (then its gradient) */
    uint64_t target;           /* [Nl, P] eps - x0 */
    uint64_t dcond;            /* [B, C] the gradient of cond (received from the next stage) */
    /* cond caption: the caption's embeddings y [B Tk, C] (the first stage makes them; they
     * travel with the tokens), their gradient (received), and the fixed positions [Tk, C] */
    uint64_t ycap, dycap, cappos;
    /* caption features (first stage): the features [B Tk, Dt] (a null caption's rows the
     * y_embedding), y_proj.fc1's output [B Tk, C] before and after gelu */
    uint64_t cfeat, cfc1, cgelu;
    /* scratch shared by the slots */
    uint64_t dres, dres_full, dln, dpartial, partial, dx, datty, dqkv, dfcg, dfch, dmod, dsilu;
    uint64_t dtmp, rows3, pack, datty_h;
    uint64_t dcq, dckv, dcatt, dyl, dytmp; /* cond caption */
    uint64_t dcfeat;                       /* caption features: [B Tk, Dt] their gradient */
    /* host staging: [N, P] patches and targets, [N, C] positions, [B, 256] frequencies */
    float *h_patches, *h_target, *h_pos, *h_freq;
    double *h_row;           /* [C] a position's row, in double */
    int32_t *h_labels;       /* [B] labels; with captions [B] lengths, then [B, Tk] token ids */
    int Dt;                  /* caption features: their width (0: none) */
    float *h_feat;           /* [B, Tk, Dt] a micro-batch's caption features */
    unsigned char *h_null;   /* [slots, B] per slot, which samples have the null caption */
    float *h_cappos;         /* [Tk, C] the caption's positions */
    int pos_F, pos_H, pos_W; /* the shape h_pos holds (computed once per shape) */
    /* per slot (at most 64: the schedule's bound): the loss scale, whether there is a target
     * (not a prediction of a given x_t), the clips' frames, rows and columns */
    float grad_scale[64];
    int has_target[64];
    int shape[64][3];
} dit_state;

static inline dit_state *dit_of(const ig_model *m) {
    return (dit_state *)m->fs;
}
/* The index of tensor `which` of block l (a global layer index). */
static inline size_t dit_lt(const ig_model *m, int l, int which) {
    const dit_state *x = dit_of(m);
    return (size_t)x->t_layer0 + (size_t)(l - m->part.l0) * (size_t)x->per_layer + (size_t)which;
}
/* The first stage's tensor `which` (DIT_Y: only with cond class or caption). */
static inline size_t dit_ft(const ig_model *m, int which) {
    return (size_t)dit_of(m)->t_first0 + (size_t)which;
}
static inline size_t dit_lastt(const ig_model *m, int which) {
    return (size_t)dit_of(m)->t_last0 + (size_t)which;
}
/* C: the values of a clip's position (3 until the data says otherwise) */
static inline int dit_channels(const ig_model_config *c) {
    dit_shape d = dit_own(c);
    return d.in_channels > 0 ? d.in_channels : 3;
}
static inline int dit_patch_values(const ig_model_config *c) {
    dit_shape d = dit_own(c);
    return dit_channels(c) * d.patch[0] * d.patch[1] * d.patch[2];
}

/* dit_pass.c */
extern const ig_stage_hooks dit_stage;
void dit_stage_io(ig_model *m, int slot, ig_stage_io *io);
ig_status dit_squared_error(ig_model *m, int slot, double *sum, double *count, ig_err *err);
ig_comm_micro dit_comm_micro(const ig_model_config *c, const ig_part *p, int B, int T, uint64_t e,
                             int recompute);

/* dit_input.c: the rectified flow's batch staged as patches (objective.h's ig_flow_model) */
ig_status dit_flow_stage(ig_model *m, int slot, const ig_flow_batch *b, ig_err *err);
ig_status dit_output(ig_model *m, int slot, float *out, ig_err *err);
/* the caption's fixed positions [caption_len, C]: sincos(C, j), as the frames' (row: [C] scratch)
 */
void dit_caption_positions(const ig_model_config *c, double *row, float *out);

/* dit.c */
ig_status dit_clip_tokens(const ig_model_config *c, int F, int H, int W, int *tokens, ig_err *err);

/* dit_caption.c: the caption features' side of the model - PixArt's caption embedder's passes on
 * the first stage, the fit of a shape to the data's features and the encoder it records */
ig_status dit_caption_embed_forward(ig_model *m, int B, ig_err *err);
void dit_caption_embed_backward(ig_model *m, int B);
ig_status dit_fit_features(ig_model_config *c, dit_shape *d, const ig_data_facts *f, ig_err *err);
int dit_caption_features(const ig_model_config *c, ig_feature_encoder *enc);
ig_status dit_encoder_to_json(const dit_shape *d, json_t *o);
ig_status dit_encoder_from_json(json_t *o, const char *file, dit_shape *d, ig_err *err);

/* dit_latent.c: the latents' side - the fit of a shape to the data's values (pixels, or a VAE's
 * latents) and the VAE it records, in the checkpoint's and config.json's "vae" */
ig_status dit_fit_values(dit_shape *d, const ig_data_facts *f, ig_err *err);
int dit_latents(const ig_model_config *c, ig_latent_vae *out);
void dit_vae_to_json(const dit_shape *d, json_t *o);
ig_status dit_vae_from_json(json_t *o, const char *file, dit_shape *d, ig_err *err);
const char *dit_vae_differs(const dit_shape *x, const dit_shape *y);

#endif
