/* vae.h - private to train/models/vae/: the VAE family's state shared by its files - vae.c (keys,
 * shape, the descriptor), vae_net.c (the network as a list of its pieces with their tensors and
 * activations: the tensor table and the memory plan both come from it), vae_pass.c (forward and
 * backward), vae_input.c (staging, the loss's sums, encode and decode) and vae_hf.c (diffusers'
 * files).
 *
 * The network is diffusers' AutoencoderKL, exactly; channels last (NHWC), a frame's pixels its
 * rows. The stage driver's "layers" are its blocks, so that ZeRO-3 gathers a block at a time and
 * full recomputation keeps a block's input only: for nb = len(block_out_channels),
 *   layer l < nb         the encoder's down block l (its resnets, then a downsample unless last)
 *   layer nb             the encoder's mid block (resnet, attention, resnet), conv_norm_out + SiLU,
 *                        conv_out, quant_conv: the posterior's moments; then its sample z (and the
 *                        KL term's rows)
 *   layer nb + 1         post_quant_conv, the decoder's conv_in and mid block
 *   layer nb + 2 + i     the decoder's up block i (layers_per_block + 1 resnets, then nearest 2x
 *                        upsampling and a conv unless last)
 * the first stage's "embedding" the encoder's conv_in, the last stage's "head" the decoder's
 * conv_norm_out + SiLU, conv_out and the L1 loss.
 */
#ifndef INGOT_VAE_H
#define INGOT_VAE_H

#include "family/family.h"
#include "objectives/vae_model.h"

#define VAE_MAX_BLOCKS 8 /* len(block_out_channels) */
#define VAE_MAX_LPB    6 /* layers_per_block */
#define VAE_MAX_RES    (VAE_MAX_LPB + 1)
#define VAE_MAX_LAYERS (2 * VAE_MAX_BLOCKS + 2)
#define VAE_EPS        1e-6 /* every GroupNorm's (diffusers' resnet_eps and norm eps) */

/* The VAE's own configuration (its model.* keys, in ig_model_config.own). */
typedef struct vae_shape {
    const char **blocks_list; /* model.block_out_channels as configured: parsed into ch by the
                                 check, then NULL (a checked shape holds no pointer) */
    size_t n_blocks_list;
    int ch[VAE_MAX_BLOCKS]; /* block_out_channels */
    int nb;                 /* blocks */
    int layers;             /* layers_per_block */
    int latent;             /* latent_channels */
    int groups;             /* norm_num_groups */
    double scaling, shift;  /* scaling_factor, shift_factor */
} vae_shape;
IG_DEFINE_OWN(vae_shape)
static inline vae_shape vae_own(const ig_model_config *c) {
    return IG_OWN_GET(vae_shape, c);
}

/* ---- the network's pieces ----------------------------------------------------------------------
 * Tensor indices are the table's (every tensor held: the family runs on whole models only, see
 * check_layout). Places are family.h's (offsets in a slot or the recomputed region), fp32 ones
 * prefixed f_. */

typedef struct vae_conv {
    int w, b; /* weight [cout, k k cin] (OHWI), bias [cout] */
    int cin, cout, k, stride;
    int pad_end; /* 1: the downsample's (none before, one after: bottom, right); 0: k / 2 each side
                  */
} vae_conv;

typedef struct vae_norm {
    int w, b; /* GroupNorm's weight and bias [C] */
} vae_norm;

/* ResnetBlock2D: out = shortcut(x) + conv2(GN+SiLU(conv1(GN+SiLU(x)))) */
typedef struct vae_resnet {
    int cin, cout;
    vae_norm n1, n2;
    vae_conv c1, c2, sc;          /* sc.w < 0: no shortcut (cin == cout) */
    uint64_t n1a, c1a, n2a, outa; /* [P, cin], [P, cout] x 3 */
    uint64_t sca;                 /* for inference: the shortcut's output (else the scratch's t1) */
    uint64_t f_m1, f_r1, f_m2, f_r2;
} vae_resnet;

/* The mid block's single-head attention: out = x + to_out(softmax(q k^T / sqrt(C)) v), q | k | v
 * = Linear(GroupNorm(x)) (one fused [3C, C] weight) */
typedef struct vae_attn {
    int C;
    vae_norm gn;
    int qkv_w, qkv_b, out_w, out_b;
    uint64_t gna, f_m, f_r, qkva, atta, f_lse, outa;
} vae_attn;

enum { VAE_DOWN = 0, VAE_ENC_MID, VAE_DEC_MID, VAE_UP };

typedef struct vae_layer {
    int kind;
    int level, out_level; /* resolution levels (pixels P0 / 4^level) of its input and output */
    int cin, cout;        /* channels of its input and output */
    int nres;
    vae_resnet res[VAE_MAX_RES]; /* mid blocks: res[0], the attention, res[1] */
    vae_attn attn;
    vae_conv resample; /* down- or upsampling's conv (w < 0: none) */
    uint64_t upa;      /* the upsampled [4P, c] */
    /* VAE_ENC_MID: conv_norm_out + SiLU, conv_out, quant_conv -> moments [P, 2 lat] */
    vae_norm nout;
    vae_conv conv_out, quant;
    uint64_t nouta, f_mo, f_ro, coa, momenta;
    /* VAE_DEC_MID: post_quant_conv, the decoder's conv_in */
    vae_conv post_quant, conv_in;
    uint64_t pqa, cia;
    uint64_t outa; /* the layer's output (kept: the next one's input) */
} vae_layer;

typedef struct vae_net {
    int nb, L, lat, G;
    vae_conv conv_in; /* the encoder's (the first stage's) */
    vae_layer layer[VAE_MAX_LAYERS];
    vae_norm head_norm; /* the decoder's conv_norm_out and conv_out (the last stage's) */
    vae_conv head_conv;
    int n_tensors;
    /* per slot: the frames [P0, 3], the noise [P_lat, lat], conv_in's output, the head's */
    uint64_t xa, epsa, e0a, hna, f_hm, f_hr, preda;
    /* scratch: the gradient's two buffers (the one a backward reads and the one it writes, then
     * swapped) and three temporaries, each the largest activation */
    uint64_t ga[2], t1, t2, t3;
    uint64_t big; /* elements of the largest activation */
} vae_net;

/* The net of a checked shape: its pieces and tensor indices (vae_net.c). */
void vae_net_build(const ig_model_config *c, vae_net *n);
/* Its activations for micro-batches of B clips of T pixels (every place of n set; sizes out). */
void vae_net_layout(const ig_model_config *c, const ig_part *p, int B, int T, vae_net *n,
                    ig_act_sizes *out);
/* The tensor table of the net (ig_family.tensors). */
size_t vae_net_tensors(const ig_model_config *c, const ig_part *p, ig_tensor_spec *out, size_t cap);
/* Forward FLOPs per pixel of the frame (the convolutions' and the attention's GEMMs). */
double vae_net_flops(const ig_model_config *c);

/* The family's state (m->fs). */
typedef struct vae_state {
    vae_net net;
    int g; /* which of net.ga holds the gradient flowing back */
    /* per slot (at most 64: the schedule's bound): the frames, their size, the loss's scales */
    int frames[64], H[64], W[64];
    float grad_scale[64];
    double kl_weight[64];
    int has_target[64];
    float *h_x; /* host staging: the frames (or the latents) in the act layout */
} vae_state;

static inline vae_state *vae_of(const ig_model *m) {
    return (vae_state *)m->fs;
}

/* vae_pass.c: the stage hooks, and the pieces a partial pass (encode, decode) runs */
extern const ig_stage_hooks vae_stage;
void vae_stage_io(ig_model *m, int slot, ig_stage_io *io);
ig_status vae_embed_fwd(ig_model *m, ig_err *err);
ig_status vae_layer_fwd(ig_model *m, int l, ig_err *err);
/* the decoder's head without the loss */
void vae_head_only(ig_model *m);

/* vae_input.c (objective.h's ig_vae_model) */
ig_status vae_latent_shape(const ig_model_config *c, int H, int W, int *h, int *w, int *C,
                           ig_err *err);
ig_status vae_stage_batch(ig_model *m, int slot, const ig_vae_batch *b, ig_err *err);
ig_status vae_sums(ig_model *m, int slot, ig_vae_sums *out, ig_err *err);
ig_status vae_reconstruction(ig_model *m, int slot, float *out, ig_err *err);
ig_status vae_encode(ig_model *m, const float *x, int N, int H, int W, float *moments, ig_err *err);
ig_status vae_decode(ig_model *m, const float *z, int N, int h, int w, float *out, ig_err *err);

/* vae.c: block_out_channels of a manifest or config.json (key) into d */
ig_status vae_read_blocks(json_t *o, const char *file, const char *key, vae_shape *d, ig_err *err);

/* vae_hf.c: diffusers' config.json and tensor names */
ig_status vae_hf_config(json_t *o, const char *file, ig_model_config *out, int32_t *eod,
                        ig_err *err);
json_t *vae_hf_write_config(const ig_model_config *c, int32_t eod);
size_t vae_hf_pieces(const ig_model_config *c, const ig_tensor_spec *t, ig_hf_piece *out,
                     size_t cap);

#endif
