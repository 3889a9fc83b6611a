/* dit.c - the DiT family (Peebles & Xie's Diffusion Transformer with a 3-D patch embedding, as
 * OpenDiT's and Open-Sora's video DiTs): its keys and shape, the table of tensors with their tags,
 * the activations of a micro-batch, and its Hugging Face-style files. The passes are in
 * dit_pass.c, the staging of a micro-batch of clips in dit_input.c.
 *
 * The architecture: a clip [F, H, W, C] (C = 3: RGB pixels; or a VAE's latents, C its latent
 * channels: dit_latent.c) is cut into patches of model.patch [pt, ph, pw] (a 3-D convolution with
 * kernel = stride, as a linear layer of the patch's C pt ph pw values, channel first), tokens in
 * (t, h, w) order, plus fixed sin-cos positions; the conditioning c is the
 * embedding of the flow's time (256 frequencies, Linear, SiLU, Linear) plus, with model.cond
 * class, a learned embedding of the clip's label (a null row for classifier-free guidance); with
 * model.cond caption, c is the time's alone and each block attends to the clip's caption after its
 * self-attention (PixArt-alpha's and Open-Sora's cross-attention: x += proj(CrossAttn(q(x),
 * kv(y))), no norm, no gate), y the caption tokens' learned embeddings plus fixed 1-D sin-cos
 * positions, over its first caption_len tokens, a null token standing for no caption - or, with
 * caption features (data.caption_features: a frozen T5's, PixArt-alpha's way), y = PixArt's
 * caption embedder of the clip's features (Linear(D_text, D), tanh-GeLU, Linear(D, D): y_proj,
 * dit_caption.c) over their rows, the padding masked, a learned [caption_len, D_text] y_embedding
 * standing for no caption (all its rows attended). Each
 * block is adaLN-Zero: SiLU(c) -> Linear(D, 6D) gives a shift, a scale and a gate for attention
 * and for the MLP; x += gate * Attn(LN(x) (1 + scale) + shift), x += gate * MLP(...), LayerNorm
 * without affine parameters (model.norm_eps, 1e-6), non-causal multi-head attention, MLP 4D with
 * tanh-GeLU. The final layer: adaLN shift and scale, Linear(D, pt ph pw C), each token's vector in
 * (pt, ph, pw, c) order. Initialisation as DiT's: the adaLN projections and the final linear layer
 * zero, the other linear layers Xavier-uniform, the time MLP and the label table normal(0, 0.02).
 *
 * Tensor parallelism (Megatron's): qkv and fc1 column-parallel, proj and fc2 row-parallel. The
 * adaLN projections are replicated: they act on one row per clip (SiLU(c)), B x D x 6D
 * multiply-adds against the blocks' B x T x 12 D^2, so cutting them would add a collective per
 * block to save nothing; every tensor-parallel rank computes the same modulation from the same c.
 * With sequence parallelism each rank's modulation gradients come from its own token rows (a
 * partial sum, summed over the group like the norms'), and so do the patch embedding's and the
 * final layer's. Under pipeline parallelism c travels with the tokens to every stage and its
 * gradient back; the embedders on the first stage receive the sum over all the blocks.
 */
#include "dit.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hf.h"

/* ---- keys and shape -------------------------------------------------------------------------- */

static const char *const conds[] = {"none", "class", "caption", NULL};

static const ig_cfg_key dit_keys[] = {
    {.path = "model.patch",
     .type = IG_CFG_LIST,
     .default_val = "1,2,2",
     .help = "dit: a patch's frames, rows and columns [pt, ph, pw] (the 3-D patch embedding's "
             "kernel and stride)",
     .flag = "",
     .offset = offsetof(dit_shape, patch_list),
     .size = sizeof(((dit_shape *)0)->patch_list),
     .count_offset = offsetof(dit_shape, n_patch_list)},
    {.path = "model.cond",
     .type = IG_CFG_ENUM,
     .default_val = "none",
     .help = "dit: the conditioning: none; class (a label per video from the manifest's label "
             "column, with a null class for classifier-free guidance); or caption (the clip's "
             "caption tokens through a cross-attention in every block, a null caption for "
             "guidance; model.vocab_size: the caption shards' tokenizer's)",
     .flag = "",
     .offset = offsetof(dit_shape, cond),
     .size = sizeof(((dit_shape *)0)->cond),
     .is_signed = 1,
     .choices = conds},
    IG_OWN_KEY("model.num_classes", IG_CFG_INT, dit_shape, num_classes, "0", 0, 1 << 24,
               "dit: the classes of model.cond class (labels 0 .. num_classes - 1)"),
    IG_OWN_KEY("model.class_dropout", IG_CFG_FLOAT, dit_shape, class_dropout, "0.1", 0, 1,
               "dit: the probability that a label is replaced by the null class while training "
               "(classifier-free guidance)"),
    IG_OWN_KEY("model.caption_len", IG_CFG_INT, dit_shape, caption_len, "32", 1, 4096,
               "dit: model.cond caption: the caption tokens a clip attends to (longer captions "
               "are cut)"),
    IG_OWN_KEY("model.caption_dropout", IG_CFG_FLOAT, dit_shape, caption_dropout, "0.1", 0, 1,
               "dit: the probability that a caption is replaced by the null one while training "
               "(classifier-free guidance)"),
    IG_OWN_KEY("model.caption_channels", IG_CFG_INT, dit_shape, caption_channels, "0", 0, 65536,
               "dit: model.cond caption with data.caption_features: the features' width D_text "
               "(PixArt's caption_channels; 0: the features' own, which training reads from their "
               "manifest); the captions go through PixArt's caption embedder (y_proj: Linear, "
               "tanh-GeLU, Linear) and the null caption is a learned [caption_len, D_text] "
               "y_embedding"),
    IG_OWN_KEY("model.in_channels", IG_CFG_INT, dit_shape, in_channels, "0", 0, 1024,
               "dit: the values of a clip's position the patch embedding takes: 3 for RGB pixels "
               "(frame shards), a VAE's latent channels for latent shards (ingot preprocess "
               "latents); 0: the data's"),
};

static ig_status parse_patch(dit_shape *c, ig_err *err) {
    if (c->n_patch_list == 0) return IG_OK;
    if (c->n_patch_list != 3)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.patch: %zu values; give three, [frames, rows, columns]",
                          c->n_patch_list);
    for (int k = 0; k < 3; k++) {
        char *end = NULL;
        long v = strtol(c->patch_list[k], &end, 10);
        if (!end || end == c->patch_list[k] || *end || v < 1 || v > 64)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "model.patch: \"%s\" is not a whole number in [1, 64]",
                              c->patch_list[k]);
        c->patch[k] = (int)v;
    }
    c->patch_list = NULL; /* parsed: a checked shape holds no pointer into the configuration */
    c->n_patch_list = 0;
    return IG_OK;
}

static ig_status dit_check(ig_model_config *c, ig_err *err) {
    dit_shape d = dit_own(c);
    struct {
        const char *name;
        int v;
    } pos[] = {{"n_layer", c->n_layer}, {"n_head", c->n_head}, {"d_model", c->d_model}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v <= 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG, "model.%s must be > 0, got %d", pos[i].name,
                              pos[i].v);
    if (c->d_model % c->n_head)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.n_head (%d) must divide model.d_model (%d)", c->n_head,
                          c->d_model);
    if (c->d_model % 4)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.d_model %d: dit needs a multiple of 4 (the sin-cos positions "
                          "give each of the rows and columns half the channels, as sin | cos)",
                          c->d_model);
    if (c->d_model > 16384)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.d_model %d is too large", c->d_model);
    ig_status st = parse_patch(&d, err);
    if (st != IG_OK) return st;
    if (d.patch[0] == 0 && d.patch[1] == 0 && d.patch[2] == 0)
        d.patch[0] = 1, d.patch[1] = 2, d.patch[2] = 2;
    for (int k = 0; k < 3; k++)
        if (d.patch[k] < 1 || d.patch[k] > 64)
            return ig_err_set(err, IG_ERR_INVALID_ARG, "model.patch [%d, %d, %d]: each in [1, 64]",
                              d.patch[0], d.patch[1], d.patch[2]);
    if (d.cond != DIT_COND_NONE && d.cond != DIT_COND_CLASS && d.cond != DIT_COND_CAPTION)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.cond %d is not none, class or caption",
                          d.cond);
    if (d.in_channels < 0 || d.in_channels > 1024)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.in_channels %d: need 0 .. 1024",
                          d.in_channels);
    if (d.caption_channels < 0 || d.caption_channels > 65536)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.caption_channels %d: need 0 .. 65536",
                          d.caption_channels);
    if (d.cond == DIT_COND_CAPTION && d.caption_channels > 0) c->vocab_size = 0; /* no tokens */
    if (d.cond == DIT_COND_CAPTION && !d.caption_channels &&
        (c->vocab_size < 1 || c->vocab_size > (1 << 30)))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.cond caption needs model.vocab_size, the caption tokenizer's "
                          "vocabulary (training takes it from the caption shards' manifests), "
                          "got %d; or, for caption features (data.caption_features), "
                          "model.caption_channels",
                          c->vocab_size);
    if (d.cond == DIT_COND_CAPTION && (d.caption_len < 1 || d.caption_len > 4096))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.caption_len %d: need 1 .. 4096",
                          d.caption_len);
    if (!(d.caption_dropout >= 0 && d.caption_dropout < 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.caption_dropout %g: need 0 <= p < 1",
                          d.caption_dropout);
    if (d.cond == DIT_COND_CLASS && d.num_classes < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.cond class needs model.num_classes (the labels of the "
                          "manifest's label column are 0 .. num_classes - 1)");
    if (d.num_classes < 0 || d.num_classes > (1 << 24))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.num_classes %d: need 0 .. 2^24",
                          d.num_classes);
    if (!(d.class_dropout >= 0 && d.class_dropout < 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.class_dropout %g: need 0 <= p < 1",
                          d.class_dropout);
    if (c->norm_eps == 0) c->norm_eps = 1e-6;
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.norm_eps %g: need 0 < eps < 1",
                          c->norm_eps);
    if (c->seq_len <= 0) c->seq_len = 1; /* the tokens of the largest clip, set by the trainer */
    if (d.cond != DIT_COND_CAPTION) c->vocab_size = 0, d.caption_len = 0, d.caption_dropout = 0;
    if (d.cond != DIT_COND_CAPTION || !d.caption_channels) {
        d.caption_channels = 0;
        d.enc_weights = d.enc_tokenizer = 0;
        memset(d.enc_describe, 0, sizeof d.enc_describe);
    }
    c->padded_vocab = c->vocab_size; /* the caption table has one more row, the null token */
    if (d.cond != DIT_COND_CLASS) d.num_classes = 0, d.class_dropout = 0;
    ig_own_set_dit_shape(c, &d);
    return IG_OK;
}

static ig_status dit_check_layout(const ig_model_config *c, int tp, ig_err *err) {
    if (c->n_head % tp)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d does not divide model.n_head %d (each rank gets whole "
                          "heads)",
                          tp, c->n_head);
    return IG_OK;
}

ig_status dit_clip_tokens(const ig_model_config *c, int F, int H, int W, int *tokens, ig_err *err) {
    const dit_shape d = dit_own(c);
    const int *p = d.patch;
    if (F < 1 || H < 1 || W < 1 || F % p[0] || H % p[1] || W % p[2])
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%d frames of %dx%d are not cut into whole patches of [%d, %d, %d] "
                          "(model.patch: frames, rows, columns): %s",
                          F, H, W, p[0], p[1], p[2],
                          F % p[0]   ? "the frames are not a multiple of the patch's"
                          : H % p[1] ? "the rows are not a multiple of the patch's"
                                     : "the columns are not a multiple of the patch's");
    int64_t t = (int64_t)(F / p[0]) * (H / p[1]) * (W / p[2]);
    if (t > (1 << 24))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%d frames of %dx%d make %lld tokens, too many",
                          F, H, W, (long long)t);
    *tokens = (int)t;
    return IG_OK;
}

static uint64_t dit_num_params(const ig_model_config *c) {
    const dit_shape d = dit_own(c);
    uint64_t C = (uint64_t)c->d_model, L = (uint64_t)c->n_layer, P = (uint64_t)dit_patch_values(c);
    uint64_t table = d.cond == DIT_COND_CLASS     ? (uint64_t)d.num_classes + 1
                     : d.cond == DIT_COND_CAPTION ? (uint64_t)c->vocab_size + 1
                                                  : 0;
    uint64_t Dt = (uint64_t)d.caption_channels, Tk = (uint64_t)d.caption_len;
    if (Dt) table = 0; /* caption features: PixArt's caption embedder in the table's place */
    uint64_t first = P * C + C + DIT_FREQ * C + C + C * C + C + table * C;
    if (Dt) first += Dt * C + C + C * C + C + Tk * Dt;
    uint64_t block = 6 * C * C + 6 * C + 3 * C * C + 3 * C + C * C + C + 8 * C * C + 5 * C;
    if (d.cond == DIT_COND_CAPTION) block += 4 * C * C + 4 * C; /* the cross-attention */
    uint64_t last = 2 * C * C + 2 * C + P * C + P;
    return first + L * block + last;
}

static void dit_describe_cond(const ig_model_config *c, char *buf, size_t cap);

static void dit_describe(const ig_model_config *c, char *buf, size_t cap) {
    const dit_shape d = dit_own(c);
    dit_describe_cond(c, buf, cap);
    size_t n = strlen(buf);
    if (d.vae_weights && n < cap)
        snprintf(buf + n, cap - n, "; on %d-channel latents of a VAE (%s)", dit_channels(c),
                 d.vae_describe[0] ? d.vae_describe : "unnamed");
}

static void dit_describe_cond(const ig_model_config *c, char *buf, size_t cap) {
    const dit_shape d = dit_own(c);
    if (d.cond == DIT_COND_CLASS)
        snprintf(buf, cap, "; patch %dx%dx%d, %d classes (dropout %g)", d.patch[0], d.patch[1],
                 d.patch[2], d.num_classes, d.class_dropout);
    else if (d.cond == DIT_COND_CAPTION && d.caption_channels)
        snprintf(buf, cap,
                 "; patch %dx%dx%d, caption features of %d tokens x %d (dropout %g) from %s",
                 d.patch[0], d.patch[1], d.patch[2], d.caption_len, d.caption_channels,
                 d.caption_dropout, d.enc_describe[0] ? d.enc_describe : "an unnamed encoder");
    else if (d.cond == DIT_COND_CAPTION)
        snprintf(buf, cap, "; patch %dx%dx%d, captions of %d tokens (vocabulary %d, dropout %g)",
                 d.patch[0], d.patch[1], d.patch[2], d.caption_len, c->vocab_size,
                 d.caption_dropout);
    else
        snprintf(buf, cap, "; patch %dx%dx%d, unconditional", d.patch[0], d.patch[1], d.patch[2]);
}

static double dit_flops_per_token(const ig_model_config *c, int T) {
    const dit_shape d = dit_own(c);
    /* 2 flops per weight of the blocks' linear layers, the patch embedding and the final layer,
     * and 4 T D per block for attention's scores and weighted sum (every key: not causal); the
     * adaLN projections and the time MLP act on one row per clip and are left out */
    double C = c->d_model, L = c->n_layer, P = dit_patch_values(c);
    double f = 2.0 * (L * 12.0 * C * C + 2.0 * P * C) + L * 4.0 * (double)T * C;
    /* captions: q_linear and proj per token, and the scores and weighted sum over the caption
     * (kv_linear acts on the caption's tokens, once per clip: left out) */
    if (d.cond == DIT_COND_CAPTION) f += L * (2.0 * 2.0 * C * C + 4.0 * d.caption_len * C);
    return f;
}

/* ---- the tensor table ------------------------------------------------------------------------ */

/* Xavier-uniform's bound for a [out, in] weight: sqrt(6 / (in + out)). */
static float xavier(int64_t out, int64_t in) {
    return (float)sqrt(6.0 / (double)(in + out));
}

static size_t dit_tensors(const ig_model_config *c, const ig_part *p, ig_tensor_spec *out,
                          size_t cap) {
    const dit_shape d = dit_own(c);
    ig_spec_list tb = {out, 0, cap};
    int64_t C = c->d_model, P = dit_patch_values(c);
    const ig_place L = IG_PLACE_LAYER, FI = IG_PLACE_FIRST, LA = IG_PLACE_LAST;
    /* replicated, and with sequence parallelism their gradients are partial sums over the rows */
    const ig_tensor_spec rep = {.ndim = 2, .split_dim = -1, .decay = 1, .sp_partial = 1};
    if (p->first) {
        ig_tensor_spec w = rep, b = rep;
        w.place = b.place = FI;
        b.ndim = 1, b.decay = 0, b.init = IG_INIT_ZERO;
        w.shape[0] = C, w.shape[1] = P, w.init = IG_INIT_UNIFORM, w.std = xavier(C, P);
        ig_spec_add(&tb, "x_embedder.proj.weight", 0, &w);
        b.shape[0] = C;
        ig_spec_add(&tb, "x_embedder.proj.bias", 0, &b);
        w.shape[1] = DIT_FREQ, w.init = IG_INIT_NORMAL, w.std = 0.02f;
        ig_spec_add(&tb, "t_embedder.mlp.0.weight", 0, &w);
        ig_spec_add(&tb, "t_embedder.mlp.0.bias", 0, &b);
        w.shape[1] = C;
        ig_spec_add(&tb, "t_embedder.mlp.2.weight", 0, &w);
        ig_spec_add(&tb, "t_embedder.mlp.2.bias", 0, &b);
        if (d.cond == DIT_COND_CAPTION && d.caption_channels) {
            /* PixArt's caption embedder and its null caption, initialised as PixArt does (y_proj
             * normal(0, 0.02), y_embedding randn / sqrt(D_text)); replicated, their gradient
             * from the caption's, summed over the tensor-parallel ranks by the pass */
            int64_t Dt = d.caption_channels;
            w.sp_partial = b.sp_partial = 0;
            w.shape[0] = C, w.shape[1] = Dt, w.std = 0.02f;
            ig_spec_add(&tb, "y_embedder.y_proj.fc1.weight", 0, &w);
            ig_spec_add(&tb, "y_embedder.y_proj.fc1.bias", 0, &b);
            w.shape[1] = C;
            ig_spec_add(&tb, "y_embedder.y_proj.fc2.weight", 0, &w);
            ig_spec_add(&tb, "y_embedder.y_proj.fc2.bias", 0, &b);
            w.shape[0] = d.caption_len, w.shape[1] = Dt, w.std = (float)(1.0 / sqrt((double)Dt));
            ig_spec_add(&tb, "y_embedder.y_embedding", 0, &w);
        } else if (d.cond == DIT_COND_CLASS || d.cond == DIT_COND_CAPTION) { /* a null row last */
            w.shape[0] = (d.cond == DIT_COND_CLASS ? d.num_classes : c->vocab_size) + 1;
            w.shape[1] = C;
            /* the captions' gradient is summed over the tensor-parallel ranks by the pass (it
             * comes through column-parallel layers), the labels' is partial under sp */
            w.sp_partial = d.cond == DIT_COND_CLASS;
            ig_spec_add(&tb, "y_embedder.embedding_table.weight", 0, &w);
        }
    }
    ig_tensor_spec ada = rep, ada_b = rep;
    ada.place = ada_b.place = L;
    ada.shape[0] = 6 * C, ada.shape[1] = C, ada.init = IG_INIT_ZERO;
    ada_b.ndim = 1, ada_b.shape[0] = 6 * C, ada_b.decay = 0, ada_b.init = IG_INIT_ZERO;
    const ig_tensor_spec qkv_w = {.ndim = 2,
                                  .shape = {3 * C, C},
                                  .place = L,
                                  .split_dim = 0,
                                  .n_blocks = 3,
                                  .block = {C, C, C},
                                  .decay = 1,
                                  .init = IG_INIT_UNIFORM,
                                  .std = xavier(3 * C, C)};
    const ig_tensor_spec qkv_b = {.ndim = 1,
                                  .shape = {3 * C},
                                  .place = L,
                                  .split_dim = 0,
                                  .n_blocks = 3,
                                  .block = {C, C, C},
                                  .init = IG_INIT_ZERO};
    const ig_tensor_spec proj_w = {.ndim = 2,
                                   .shape = {C, C},
                                   .place = L,
                                   .split_dim = 1,
                                   .decay = 1,
                                   .init = IG_INIT_UNIFORM,
                                   .std = xavier(C, C)};
    /* a row-parallel layer's bias: whole, its gradient taken from the gathered rows */
    const ig_tensor_spec out_b = {
        .ndim = 1, .shape = {C}, .place = L, .split_dim = -1, .init = IG_INIT_ZERO};
    const ig_tensor_spec fc1_w = {.ndim = 2,
                                  .shape = {4 * C, C},
                                  .place = L,
                                  .split_dim = 0,
                                  .decay = 1,
                                  .init = IG_INIT_UNIFORM,
                                  .std = xavier(4 * C, C)};
    const ig_tensor_spec fc1_b = {
        .ndim = 1, .shape = {4 * C}, .place = L, .split_dim = 0, .init = IG_INIT_ZERO};
    const ig_tensor_spec fc2_w = {.ndim = 2,
                                  .shape = {C, 4 * C},
                                  .place = L,
                                  .split_dim = 1,
                                  .decay = 1,
                                  .init = IG_INIT_UNIFORM,
                                  .std = xavier(C, 4 * C)};
    for (int l = p->l0; l < p->l1; l++) {
        ig_spec_add(&tb, "blocks.%d.adaLN_modulation.1.weight", l, &ada);
        ig_spec_add(&tb, "blocks.%d.adaLN_modulation.1.bias", l, &ada_b);
        ig_spec_add(&tb, "blocks.%d.attn.qkv.weight", l, &qkv_w);
        ig_spec_add(&tb, "blocks.%d.attn.qkv.bias", l, &qkv_b);
        ig_spec_add(&tb, "blocks.%d.attn.proj.weight", l, &proj_w);
        ig_spec_add(&tb, "blocks.%d.attn.proj.bias", l, &out_b);
        ig_spec_add(&tb, "blocks.%d.mlp.fc1.weight", l, &fc1_w);
        ig_spec_add(&tb, "blocks.%d.mlp.fc1.bias", l, &fc1_b);
        ig_spec_add(&tb, "blocks.%d.mlp.fc2.weight", l, &fc2_w);
        ig_spec_add(&tb, "blocks.%d.mlp.fc2.bias", l, &out_b);
        if (d.cond != DIT_COND_CAPTION) continue;
        /* the cross-attention: q and kv column-parallel (kv in its k and v blocks), proj
         * row-parallel */
        ig_tensor_spec q_w = proj_w, kv_w = qkv_w, kv_b = qkv_b, q_b = fc1_b, xp_w = proj_w;
        q_w.split_dim = 0, q_w.std = xavier(C, C);
        /* with caption features, zero as PixArt-alpha's (a block starts as if it read none) */
        if (d.caption_channels) xp_w.init = IG_INIT_ZERO;
        q_b.shape[0] = C;
        kv_w.shape[0] = kv_b.shape[0] = 2 * C, kv_w.n_blocks = kv_b.n_blocks = 2;
        kv_w.std = xavier(2 * C, C);
        ig_spec_add(&tb, "blocks.%d.cross_attn.q_linear.weight", l, &q_w);
        ig_spec_add(&tb, "blocks.%d.cross_attn.q_linear.bias", l, &q_b);
        ig_spec_add(&tb, "blocks.%d.cross_attn.kv_linear.weight", l, &kv_w);
        ig_spec_add(&tb, "blocks.%d.cross_attn.kv_linear.bias", l, &kv_b);
        ig_spec_add(&tb, "blocks.%d.cross_attn.proj.weight", l, &xp_w);
        ig_spec_add(&tb, "blocks.%d.cross_attn.proj.bias", l, &out_b);
    }
    if (p->last) {
        ig_tensor_spec w = ada, b = ada_b;
        w.place = b.place = LA;
        w.shape[0] = b.shape[0] = 2 * C;
        ig_spec_add(&tb, "final_layer.adaLN_modulation.1.weight", 0, &w);
        ig_spec_add(&tb, "final_layer.adaLN_modulation.1.bias", 0, &b);
        w.shape[0] = b.shape[0] = P;
        ig_spec_add(&tb, "final_layer.linear.weight", 0, &w);
        ig_spec_add(&tb, "final_layer.linear.bias", 0, &b);
    }
    return tb.n;
}

/* ---- activations ----------------------------------------------------------------------------- */

/* Lays out the activations of a micro-batch of B clips of T tokens: per slot, then the scratch,
 * which starts with the region of one block's worth that the blocks' recomputed activations reuse
 * (train.recompute; family.h's places). x->layer may be NULL (sizes only). A slot keeps per block:
 * with none every activation below; with selective all but the attention core's output (atty,
 * and atty_h with Ulysses), its lse, and the cross-attention's catt and clse; with full only
 * res3, the block's output (the next one's input, the stage's output or the final layer's
 * input), the stage's first block's input being encoded. */
static void layout(const ig_model_config *c, const ig_part *p, int B, int T, dit_state *x,
                   ig_act_sizes *out) {
    const dit_shape d = dit_own(c);
    uint64_t Bc = (uint64_t)B, N = Bc * (uint64_t)T, tp = (uint64_t)p->tp;
    uint64_t u = (uint64_t)(p->usp > 1 ? p->usp : 1), ul = (uint64_t)(u > 1);
    /* rows held (the norms, residuals, the final layer) and rows of the tensor-parallel layers:
     * Megatron's sp holds N / tp and gathers N; Ulysses holds and computes N / usp */
    uint64_t Nl = p->sp ? N / tp : N / u, Ng = p->sp ? N : Nl;
    uint64_t C = (uint64_t)c->d_model, Cl = C / tp;
    uint64_t sp = (uint64_t)(p->sp != 0), P = (uint64_t)dit_patch_values(c);
    uint64_t Tk = (uint64_t)(d.cond == DIT_COND_CAPTION ? d.caption_len : 0), BK = Bc * Tk;
    uint64_t NHl = (uint64_t)c->n_head / tp;
    ig_act_plan pl = {.recompute = p->recompute};
    const ig_act_kind K = IG_ACT_LAYER, CORE = IG_ACT_CORE;
    uint64_t *a = &pl.act, *f = &pl.f32;
    if (p->first) {
        x->patches = ig_act_take(a, Nl * P);
        x->pos = ig_act_take(a, Nl * C);
        x->freq = ig_act_take(a, Bc * DIT_FREQ);
        x->th = ig_act_take(a, Bc * C);
        x->tsilu = ig_act_take(a, Bc * C);
        x->yemb = ig_act_take(a, Bc * C);
    }
    x->encoded = ig_act_take(a, Nl * C);
    x->cond = ig_act_take(a, Bc * C);
    x->dcond = ig_act_take(a, Bc * C);
    x->silu_c = ig_act_take(a, Bc * C);
    x->ycap = ig_act_take(a, BK * C);
    x->dycap = ig_act_take(a, BK * C);
    x->cappos = ig_act_take(a, Tk * C);
    /* caption features: their rows and the caption embedder's hidden (0 otherwise: the token
     * model's layout is unchanged) */
    uint64_t Dt = (uint64_t)(d.cond == DIT_COND_CAPTION ? d.caption_channels : 0), fp = p->first;
    x->cfeat = ig_act_take(a, fp * BK * Dt);
    x->cfc1 = ig_act_take(a, (Dt ? fp : 0) * BK * C);
    x->cgelu = ig_act_take(a, (Dt ? fp : 0) * BK * C);
    for (int l = p->l0; l < p->l1; l++) {
        dit_layer_acts tmp, *y = x->layer ? &x->layer[l - p->l0] : &tmp;
        ig_act_next_layer(&pl);
        y->mod = ig_act_place(&pl, K, Bc * 6 * C);
        y->h1 = ig_act_place(&pl, K, Nl * C);
        y->h1_full = ig_act_place(&pl, K, sp * N * C);
        y->mean1 = ig_act_place_f32(&pl, K, Nl);
        y->rstd1 = ig_act_place_f32(&pl, K, Nl);
        y->qkv = ig_act_place(&pl, K, Ng * 3 * Cl); /* Ulysses: [N, 3 Cl / usp], its own heads */
        y->atty = ig_act_place(&pl, CORE, Ng * Cl);
        y->atty_h = ig_act_place(&pl, CORE, ul * Ng * Cl); /* Ulysses: [N, Cl / usp] */
        y->lse = ig_act_place_f32(&pl, CORE, N * ((uint64_t)c->n_head / (tp * u)));
        y->attproj = ig_act_place(&pl, K, Nl * C);
        y->res2 = ig_act_place(&pl, K, Nl * C);
        y->res2_full = ig_act_place(&pl, K, (Tk ? sp * N : 0) * C);
        y->cq = ig_act_place(&pl, K, (Tk ? Ng : 0) * Cl);
        y->ckv = ig_act_place(&pl, K, BK * 2 * Cl);
        y->catt = ig_act_place(&pl, CORE, (Tk ? Ng : 0) * Cl);
        y->clse = ig_act_place_f32(&pl, CORE, (Tk ? Ng : 0) * NHl);
        y->cproj = ig_act_place(&pl, K, (Tk ? Nl : 0) * C);
        y->res2b = ig_act_place(&pl, K, (Tk ? Nl : 0) * C);
        y->h2 = ig_act_place(&pl, K, Nl * C);
        y->h2_full = ig_act_place(&pl, K, sp * N * C);
        y->mean2 = ig_act_place_f32(&pl, K, Nl);
        y->rstd2 = ig_act_place_f32(&pl, K, Nl);
        y->fch = ig_act_place(&pl, K, Ng * 4 * Cl);
        y->fch_gelu = ig_act_place(&pl, K, Ng * 4 * Cl);
        y->fcproj = ig_act_place(&pl, K, Nl * C);
        y->res3 = ig_act_place(&pl, IG_ACT_BOUNDARY, Nl * C);
    }
    if (p->last) {
        x->modf = ig_act_take(a, Bc * 2 * C);
        x->hf = ig_act_take(a, Nl * C);
        x->meanf = ig_act_take(f, Nl);
        x->rstdf = ig_act_take(f, Nl);
        x->pred = ig_act_take(a, Nl * P);
        x->target = ig_act_take(a, Nl * P);
    }
    out->act = pl.act;
    out->f32 = pl.f32;
    out->i32 = Bc + BK; /* the labels (captions: their lengths), then the caption tokens */
    out->io_f32 = Nl;   /* each row's sum of squared errors */
    /* scratch: the recomputed block's region, then the backward's buffers */
    uint64_t tpx = (uint64_t)(p->tp > 1), sa = pl.region_act;
    a = &sa;
    x->dres = ig_act_take(a, Nl * C);
    x->dres_full = ig_act_take(a, sp * N * C);
    x->dln = ig_act_take(a, Nl * C);
    x->dpartial = ig_act_take(a, tpx * Ng * C); /* a column-parallel layer's input gradient */
    x->partial = ig_act_take(a, sp * N * C);    /* a row-parallel layer's output, unreduced (sp) */
    x->dx = ig_act_take(a, Nl * C);             /* a gated branch's output gradient */
    x->datty = ig_act_take(a, Ng * Cl);
    x->dqkv = ig_act_take(a, Ng * 3 * Cl);
    x->dfcg = ig_act_take(a, Ng * 4 * Cl);
    x->dfch = ig_act_take(a, Ng * 4 * Cl);
    x->rows3 = ig_act_take(a, ul * Ng * 3 * Cl); /* Ulysses: [Nl, 3 Cl] a row-sharded q|k|v */
    x->pack = ig_act_take(a, ul * Ng * 3 * Cl);  /* Ulysses: the all-to-alls' packed blocks */
    x->datty_h = ig_act_take(a, ul * Ng * Cl);
    x->dmod = ig_act_take(a, Bc * 6 * C);
    x->dsilu = ig_act_take(a, Bc * C);
    x->dtmp = ig_act_take(a, Bc * C);
    x->dcq = ig_act_take(a, (Tk ? Ng : 0) * Cl);
    x->dckv = ig_act_take(a, BK * 2 * Cl);
    x->dcatt = ig_act_take(a, (Tk ? Ng : 0) * Cl);
    x->dyl = ig_act_take(a, BK * C);
    x->dytmp = ig_act_take(a, BK * C);
    x->dcfeat = ig_act_take(a, fp * BK * Dt); /* the null caption's rows' gradient */
    out->scratch_act = sa;
    out->scratch_f32 = pl.region_f32;
}

static void dit_plan(const ig_model_config *c, const ig_part *p, int B, int T, ig_act_sizes *out) {
    dit_state x = {0};
    layout(c, p, B, T, &x, out);
}

static void dit_destroy(ig_model *m) {
    dit_state *x = dit_of(m);
    if (!x) return;
    ig_free(m->ctx, x->layer);
    ig_free(m->ctx, x->h_patches);
    ig_free(m->ctx, x->h_target);
    ig_free(m->ctx, x->h_pos);
    ig_free(m->ctx, x->h_freq);
    ig_free(m->ctx, x->h_labels);
    ig_free(m->ctx, x->h_cappos);
    ig_free(m->ctx, x->h_row);
    ig_free(m->ctx, x->h_feat);
    ig_free(m->ctx, x->h_null);
    ig_free(m->ctx, x);
    m->fs = NULL;
}

static ig_status dit_create(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    const ig_model_config *c = &m->cfg;
    const dit_shape d = dit_own(c);
    dit_state *x = ig_calloc(m->ctx, 1, sizeof *x);
    if (!x) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    m->fs = x;
    uint64_t N = (uint64_t)m->B * (uint64_t)m->T, C = (uint64_t)c->d_model;
    uint64_t P = (uint64_t)dit_patch_values(c);
    x->layer = ig_calloc(m->ctx, (size_t)(p->l1 - p->l0), sizeof *x->layer);
    x->h_patches = ig_alloc(m->ctx, N * P * sizeof(float));
    x->h_target = ig_alloc(m->ctx, N * P * sizeof(float));
    x->h_pos = ig_alloc(m->ctx, N * C * sizeof(float));
    x->h_freq = ig_alloc(m->ctx, (size_t)m->B * DIT_FREQ * sizeof(float));
    x->Tk = d.cond == DIT_COND_CAPTION ? d.caption_len : 0;
    x->per_layer = x->Tk ? DIT_PER_LAYER_CAPTION : DIT_PER_LAYER;
    size_t Tk = (size_t)x->Tk;
    x->h_labels = ig_alloc(m->ctx, (size_t)m->B * (1 + Tk) * sizeof(int32_t));
    x->h_cappos = ig_alloc(m->ctx, (Tk ? Tk : 1) * C * sizeof(float));
    x->h_row = ig_alloc(m->ctx, C * sizeof(double));
    x->Dt = x->Tk ? d.caption_channels : 0;
    size_t fb = (size_t)m->B * Tk * (size_t)x->Dt, slots = (size_t)(p->slots > 0 ? p->slots : 1);
    x->h_feat = ig_alloc(m->ctx, (fb ? fb : 1) * sizeof(float));
    x->h_null = ig_calloc(m->ctx, slots * (size_t)m->B, 1);
    if (!x->layer || !x->h_patches || !x->h_target || !x->h_pos || !x->h_freq || !x->h_labels ||
        !x->h_cappos || !x->h_row || !x->h_feat || !x->h_null) {
        dit_destroy(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    if (x->Tk && !x->Dt) dit_caption_positions(c, x->h_row, x->h_cappos);
    ig_act_sizes sizes;
    layout(c, p, m->B, m->T, x, &sizes);
    x->N = (int)N;
    x->Nl = p->sp ? x->N / p->tp : x->N / (p->usp > 1 ? p->usp : 1);
    x->Cl = c->d_model / p->tp;
    x->P = (int)P;
    x->t_first0 = x->t_layer0 = x->t_last0 = -1;
    for (size_t i = 0; i < m->n_tensors; i++) {
        ig_place pl = m->tensors[i].place;
        if (x->t_first0 < 0 && pl == IG_PLACE_FIRST) x->t_first0 = (int)i;
        if (x->t_layer0 < 0 && pl == IG_PLACE_LAYER) x->t_layer0 = (int)i;
        if (x->t_last0 < 0 && pl == IG_PLACE_LAST) x->t_last0 = (int)i;
    }
    return IG_OK;
}

/* ---- checkpoint manifests and config.json --------------------------------------------------- */

static json_t *patch_json(const ig_model_config *c) {
    const dit_shape d = dit_own(c);
    return json_pack("[i,i,i]", d.patch[0], d.patch[1], d.patch[2]);
}

static ig_status read_patch(json_t *o, const char *file, const char *key, dit_shape *c,
                            ig_err *err) {
    json_t *a = json_object_get(o, key);
    if (!json_is_array(a) || json_array_size(a) != 3)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" must be [frames, rows, columns]", file,
                          key);
    for (int k = 0; k < 3; k++) {
        json_t *v = json_array_get(a, (size_t)k);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 64)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" holds a value outside [1, 64]", file,
                              key);
        c->patch[k] = (int)json_integer_value(v);
    }
    c->patch_list = NULL;
    c->n_patch_list = 0;
    return IG_OK;
}

static ig_status read_cond(json_t *o, const char *file, dit_shape *c, ig_err *err) {
    json_t *v = json_object_get(o, "cond");
    if (!v || json_is_null(v)) {
        c->cond = c->num_classes > 0 ? DIT_COND_CLASS : DIT_COND_NONE;
        return IG_OK;
    }
    const char *s = json_string_value(v);
    for (int k = 0; s && k < 2; k++)
        if (!strcmp(s, conds[k])) {
            c->cond = k;
            return IG_OK;
        }
    if (s && !strcmp(s, conds[DIT_COND_CAPTION])) {
        c->cond = DIT_COND_CAPTION;
        return IG_OK;
    }
    return ig_err_set(err, IG_ERR_FORMAT, "%s: \"cond\" must be \"none\", \"class\" or \"caption\"",
                      file);
}

static ig_status dit_to_json(const ig_model_config *c, json_t *model, ig_err *err) {
    const dit_shape d = dit_own(c);
    (void)err;
    json_object_set_new(model, "patch", patch_json(c));
    json_object_set_new(model, "cond", json_string(conds[d.cond]));
    json_object_set_new(model, "num_classes", json_integer(d.num_classes));
    json_object_set_new(model, "class_dropout", json_real(d.class_dropout));
    json_object_set_new(model, "caption_len", json_integer(d.caption_len));
    json_object_set_new(model, "caption_dropout", json_real(d.caption_dropout));
    json_object_set_new(model, "norm_eps", json_real(c->norm_eps));
    json_object_set_new(model, "in_channels", json_integer(dit_channels(c)));
    dit_vae_to_json(&d, model);
    return dit_encoder_to_json(&d, model);
}

static ig_status dit_from_json(json_t *model, ig_model_config *c, const char *file, ig_err *err) {
    dit_shape d = dit_own(c);
    int64_t nc = 0;
    ig_status st = read_patch(model, file, "patch", &d, err);
    if (st == IG_OK)
        st = ig_hf_get_int(model, file, "num_classes", NULL, 0, 1 << 24, 1, 0, &nc, err);
    d.num_classes = (int)nc;
    if (st == IG_OK) st = read_cond(model, file, &d, err);
    if (st == IG_OK)
        st = ig_hf_get_float(model, file, "class_dropout", 1, 0, &d.class_dropout, err);
    int64_t tk = 0;
    if (st == IG_OK) st = ig_hf_get_int(model, file, "caption_len", NULL, 0, 4096, 0, 0, &tk, err);
    d.caption_len = (int)tk;
    if (st == IG_OK)
        st = ig_hf_get_float(model, file, "caption_dropout", 0, 0, &d.caption_dropout, err);
    if (st == IG_OK) st = ig_hf_get_float(model, file, "norm_eps", 1, 0, &c->norm_eps, err);
    if (st == IG_OK) st = dit_encoder_from_json(model, file, &d, err);
    if (st == IG_OK) st = dit_vae_from_json(model, file, &d, err);
    ig_own_set_dit_shape(c, &d);
    return st;
}

/* ingot's DiT config.json (model_type "ingot-dit"): DiT's constructor arguments */
static ig_status dit_hf_config(json_t *o, const char *file, ig_model_config *out, int32_t *eod,
                               ig_err *err) {
    int64_t v[3] = {0}, nc = 0;
    dit_shape d = dit_own(out);
    static const char *const keys[] = {"depth", "num_heads", "hidden_size"};
    ig_status st = IG_OK;
    for (int i = 0; i < 3 && st == IG_OK; i++)
        st = ig_hf_get_int(o, file, keys[i], NULL, 1, 1 << 20, 1, 0, &v[i], err);
    if (st == IG_OK) st = dit_vae_from_json(o, file, &d, err);
    if (st == IG_OK) st = ig_hf_get_int(o, file, "num_classes", NULL, 0, 1 << 24, 0, 0, &nc, err);
    if (st == IG_OK) st = read_patch(o, file, "patch_size", &d, err);
    d.num_classes = (int)nc;
    if (st == IG_OK) st = read_cond(o, file, &d, err);
    if (st == IG_OK)
        st = ig_hf_get_float(o, file, "class_dropout_prob", 0, 0.1, &d.class_dropout, err);
    int64_t tk = 0, vocab = 0;
    int caption = st == IG_OK && d.cond == DIT_COND_CAPTION;
    if (caption) st = ig_hf_get_int(o, file, "caption_len", NULL, 1, 4096, 1, 0, &tk, err);
    /* caption features: their width (PixArt's caption_channels) and encoder, no vocabulary */
    if (caption && st == IG_OK) st = dit_encoder_from_json(o, file, &d, err);
    if (caption && st == IG_OK && !d.caption_channels)
        st = ig_hf_get_int(o, file, "vocab_size", NULL, 1, 1 << 30, 1, 0, &vocab, err);
    if (caption && st == IG_OK)
        st = ig_hf_get_float(o, file, "caption_dropout_prob", 0, 0.1, &d.caption_dropout, err);
    d.caption_len = (int)tk, out->vocab_size = (int)vocab;
    if (st == IG_OK) st = ig_hf_get_positive(o, file, "norm_eps", 1e-6, &out->norm_eps, err);
    double ratio = 4;
    int sigma = 0;
    if (st == IG_OK) st = ig_hf_get_float(o, file, "mlp_ratio", 0, 4, &ratio, err);
    if (st == IG_OK) st = ig_hf_get_bool(o, file, "learn_sigma", 0, &sigma, err);
    if (st != IG_OK) return st;
    if (ratio != 4 || sigma)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: %s: ingot's DiT cannot compute that model",
                          file, sigma ? "learn_sigma true" : "mlp_ratio other than 4");
    int64_t mt = 0;
    if ((st = ig_hf_get_int(o, file, "max_tokens", NULL, 1, 1 << 30, 0, 0, &mt, err)) != IG_OK)
        return st;
    out->seq_len = (int)mt; /* 0: not recorded (an export before issue 26) */
    out->n_layer = (int)v[0], out->n_head = (int)v[1], out->d_model = (int)v[2];
    ig_own_set_dit_shape(out, &d);
    *eod = -1;
    return IG_OK;
}

static json_t *dit_hf_write_config(const ig_model_config *c, int32_t eod) {
    const dit_shape d = dit_own(c);
    (void)eod;
    json_t *o = json_pack(
        "{s:s,s:[s],s:i,s:i,s:i,s:f,s:o,s:i,s:s,s:i,s:f,s:b,s:f,s:s}", "model_type", "ingot-dit",
        "architectures", "DiT", "hidden_size", c->d_model, "depth", c->n_layer, "num_heads",
        c->n_head, "mlp_ratio", 4.0, "patch_size", patch_json(c), "in_channels", dit_channels(c),
        "cond", conds[d.cond], "num_classes", d.num_classes, "class_dropout_prob", d.class_dropout,
        "learn_sigma", 0, "norm_eps", c->norm_eps, "torch_dtype", "float32");
    /* the tokens of the largest clip it was trained on (ingot sample warns past them) */
    if (o && c->seq_len > 1) json_object_set_new(o, "max_tokens", json_integer(c->seq_len));
    if (o) dit_vae_to_json(&d, o); /* a model of latents: the VAE that decodes them */
    if (o && d.cond == DIT_COND_CAPTION && d.caption_channels) {
        json_object_set_new(o, "caption_len", json_integer(d.caption_len));
        json_object_set_new(o, "caption_dropout_prob", json_real(d.caption_dropout));
        dit_encoder_to_json(&d, o);
    } else if (o && d.cond == DIT_COND_CAPTION) {
        json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
        json_object_set_new(o, "caption_len", json_integer(d.caption_len));
        json_object_set_new(o, "caption_dropout_prob", json_real(d.caption_dropout));
    }
    return o;
}

/* the patch embedding is a convolution there: [D, C, pt, ph, pw] */
static size_t dit_hf_pieces(const ig_model_config *c, const ig_tensor_spec *t, ig_hf_piece *out,
                            size_t cap) {
    const dit_shape d = dit_own(c);
    if (cap < 1) return 1;
    memset(&out[0], 0, sizeof out[0]);
    snprintf(out[0].name, sizeof out[0].name, "%s", t->name);
    out[0].rows = t->shape[0];
    if (!strcmp(t->name, "x_embedder.proj.weight")) {
        out[0].ndim = 5;
        out[0].shape[0] = c->d_model, out[0].shape[1] = dit_channels(c);
        for (int k = 0; k < 3; k++) out[0].shape[2 + k] = d.patch[k];
    }
    return 1;
}

/* ---- the family ------------------------------------------------------------------------------ */

static const ig_op dit_ops[] = {
    IG_OP_MATMUL_FORWARD,
    IG_OP_MATMUL_BACKWARD,
    IG_OP_GELU_BIAS_FORWARD,
    IG_OP_GELU_BIAS_BACKWARD,
    IG_OP_ATTENTION_FORWARD,
    IG_OP_ATTENTION_BACKWARD,
    IG_OP_ENCODER_FORWARD,
    IG_OP_ENCODER_BACKWARD,
    IG_OP_LAYERNORM_MODULATE_FORWARD,
    IG_OP_LAYERNORM_MODULATE_BACKWARD,
    IG_OP_GATE_RESIDUAL_FORWARD,
    IG_OP_GATE_RESIDUAL_BACKWARD,
    IG_OP_SILU_FORWARD,
    IG_OP_SILU_BACKWARD,
    IG_OP_MSE,
    IG_OP_ADD,
    IG_OP_CROSS_ATTENTION_FORWARD,
    IG_OP_CROSS_ATTENTION_BACKWARD,
};

/* ---- what the shape is compared by, completed from, conditioned on --------------------------- */

static const char *dit_differs(const ig_model_config *a, const ig_model_config *b) {
    dit_shape x = dit_own(a), y = dit_own(b);
    if (memcmp(x.patch, y.patch, sizeof x.patch)) return "model.patch";
    if (x.cond != y.cond) return "model.cond";
    if (x.num_classes != y.num_classes) return "model.num_classes";
    if (x.class_dropout != y.class_dropout) return "model.class_dropout";
    if (x.caption_len != y.caption_len) return "model.caption_len";
    if (x.caption_dropout != y.caption_dropout) return "model.caption_dropout";
    if (x.caption_channels != y.caption_channels) return "model.caption_channels";
    if (x.enc_weights != y.enc_weights || x.enc_tokenizer != y.enc_tokenizer ||
        strcmp(x.enc_describe, y.enc_describe))
        return "the caption features' encoder (data.caption_features)";
    return dit_vae_differs(&x, &y);
}

/* captions: the vocabulary of their tokenizer, from the caption shards */
/* model.cond class: every clip shard holds labels, each below model.num_classes; clips without a
 * label in a shard with labels train as the null class, as dropped labels do (said when
 * training). */
static ig_status dit_fit_labels(const dit_shape *d, const ig_data_facts *f, ig_err *err) {
    const ig_label_facts *L = &f->labels;
    if (L->bare_shard)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.cond class: the clip shard %s holds no labels (%llu clips, none "
                          "labelled: made from a manifest without a 'label' column, or before "
                          "labels): make it with labels, or train it with model.cond none",
                          L->bare_shard, (unsigned long long)L->bare_clips);
    if (L->labelled && L->top >= (uint32_t)d->num_classes)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.cond class: the clip shard %s holds label %u (its clip %llu, the "
                          "largest of the data), and model.num_classes %d takes labels 0 .. %d: "
                          "set model.num_classes: %llu or more, or remake the shards",
                          L->top_shard, L->top, (unsigned long long)L->top_clip, d->num_classes,
                          d->num_classes - 1, (unsigned long long)L->top + 1);
    if (L->unlabelled && f->ctx)
        ig_warn(f->ctx,
                "%llu clips of the data have no label (the first in %s): they train as the null "
                "class, as dropped labels do",
                (unsigned long long)L->unlabelled, L->unlabelled_shard);
    return IG_OK;
}

static ig_status dit_fit(ig_model_config *c, const ig_data_facts *f, ig_err *err) {
    dit_shape d = dit_own(c);
    ig_status st = dit_fit_values(&d, f, err);
    if (st != IG_OK) return st;
    ig_own_set_dit_shape(c, &d);
    if (d.cond != DIT_COND_CAPTION && f->caption_encoder)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "data.caption_features: a model of model.cond %s reads no captions: "
                          "set model.cond caption, or leave the features out",
                          conds[d.cond]);
    if (d.cond == DIT_COND_CLASS && d.num_classes > 0) return dit_fit_labels(&d, f, err);
    if (d.cond != DIT_COND_CAPTION) return IG_OK;
    if (f->caption_encoder || d.caption_channels) return dit_fit_features(c, &d, f, err);
    uint64_t cv = f->caption_vocab;
    if (cv == 0)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.cond caption: the clip shards have no captions (make them with "
                          "ingot preprocess video --tokenizer)");
    if (c->vocab_size == 0) c->vocab_size = (int)cv;
    if ((uint64_t)c->vocab_size < cv)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.vocab_size %d is smaller than the caption shards' vocabulary of "
                          "%llu",
                          c->vocab_size, (unsigned long long)cv);
    return IG_OK;
}

static int dit_conditions(const ig_model_config *c) {
    int cond = dit_own(c).cond;
    return cond == DIT_COND_CLASS ? IG_COND_LABEL : cond == DIT_COND_CAPTION ? IG_COND_TEXT : 0;
}

/* the null class: the class table's last row (num_classes; 0 without classes) */
static int dit_null_class(const ig_model_config *c) {
    return dit_own(c).num_classes;
}

static int dit_caption_len(const ig_model_config *c) {
    dit_shape d = dit_own(c);
    return d.cond == DIT_COND_CAPTION ? d.caption_len : 0;
}

static double dit_dropout(const ig_model_config *c, int caption) {
    dit_shape d = dit_own(c);
    return caption ? d.caption_dropout : d.class_dropout;
}

/* ---- what the passes send (plan_comm.c's accounting) -------------------------------------------
 * Per micro-batch of B clips of T tokens (N = B T rows, C the width, e bytes an act element, t
 * tensor-parallel ranks): tensor parallelism as the decoder's per block over the rows of the
 * tensor-parallel layers (every row with Megatron's sp, this Ulysses rank's without), three blocks
 * with a caption's cross-attention, whose input gradient (the caption's embeddings) is all-reduced
 * once per micro-batch; the loss is summed over the group (8 bytes) with sp. Ulysses: per layer,
 * q|k|v to head shards and the output back, and their gradients: 8 x [N / usp, C / t / usp] to
 * each of the usp - 1 others; the loss summed (8 bytes). A stage sends its tokens, its
 * conditioning [B, C] and the caption [B, Tk, C] forward, and their gradients back. */
ig_comm_micro dit_comm_micro(const ig_model_config *c, const ig_part *p, int Bi, int Ti, uint64_t e,
                             int recompute) {
    uint64_t B = (uint64_t)Bi, N = B * (uint64_t)Ti, C = (uint64_t)c->d_model;
    int t = p->tp, u = p->usp > 1 ? p->usp : 1;
    uint64_t Nl = p->sp ? N / (uint64_t)t : N / (uint64_t)u, Ng = p->sp ? N : Nl;
    uint64_t Tk = (uint64_t)dit_caption_len(c);
    uint64_t blocks = 2 + (Tk ? 1 : 0), nl = (uint64_t)(p->l1 - p->l0);
    uint64_t tp = 0, sp = 0;
    if (t > 1) {
        uint64_t per = p->sp ? 2 * ig_ring_bytes(t, N * C * e) : ig_allreduce_bytes(t, Ng * C * e);
        tp = nl * blocks * 2 * per;
        if (recompute == IG_RECOMPUTE_FULL) tp += nl * blocks * per;
        if (Tk) tp += ig_allreduce_bytes(t, B * Tk * C * e); /* the caption's gradient */
        if (p->last && p->sp) tp += ig_allreduce_bytes(t, 8);
    }
    if (u > 1) {
        uint64_t unit = Nl * (C / (uint64_t)t / (uint64_t)u) * e * (uint64_t)(u - 1);
        sp = nl * 8 * unit + (p->last ? ig_allreduce_bytes(u, 8) : 0);
        if (recompute == IG_RECOMPUTE_FULL) sp += nl * 4 * unit;
        if (recompute == IG_RECOMPUTE_SELECTIVE) sp += nl * unit; /* the core's output back */
    }
    uint64_t io = (Nl * C + B * C + B * Tk * C) * e;
    return (ig_comm_micro){
        .tp = tp, .sp = sp, .pp = p->pp > 1 ? ((p->last ? 0 : io) + (p->first ? 0 : io)) : 0};
}

/* ---- the family ------------------------------------------------------------------------------ */

static int dit_channels_of(const ig_model_config *c) {
    return dit_channels(c);
}

static const ig_flow_model dit_flow = {.channels = dit_channels_of,
                                       .latents = dit_latents,
                                       .clip_tokens = dit_clip_tokens,
                                       .null_class = dit_null_class,
                                       .caption_len = dit_caption_len,
                                       .caption_features = dit_caption_features,
                                       .dropout = dit_dropout,
                                       .stage = dit_flow_stage,
                                       .prediction = dit_output,
                                       .squared_error = dit_squared_error};

const ig_family ig_family_dit = {
    .arch = "dit",
    .what = "DiT: a video diffusion transformer (3-D patches, adaLN-Zero, rectified flow)",
    .objective = &ig_objective_flow,
    .for_objective = &dit_flow,
    .any_length = 1,
    .ulysses = 1,
    .ema_default = 0.9999,
    .keys = dit_keys,
    .n_keys = sizeof dit_keys / sizeof dit_keys[0],
    .ops = dit_ops,
    .n_ops = sizeof dit_ops / sizeof dit_ops[0],
    .check = dit_check,
    .differs = dit_differs,
    .fit = dit_fit,
    .conditions = dit_conditions,
    .check_layout = dit_check_layout,
    .num_params = dit_num_params,
    .describe = dit_describe,
    .flops_per_token = dit_flops_per_token,
    .comm_micro = dit_comm_micro,
    .tensors = dit_tensors,
    .plan = dit_plan,
    .create = dit_create,
    .destroy = dit_destroy,
    .stage = &dit_stage,
    .stage_io = dit_stage_io,
    .to_json = dit_to_json,
    .from_json = dit_from_json,
    .hf_model_type = "ingot-dit",
    .hf_config = dit_hf_config,
    .hf_write_config = dit_hf_write_config,
    .hf_pieces = dit_hf_pieces,
    .hf_ignored = NULL,
    .hf_from_tensors = NULL,
    .gen_open = NULL,
    .gen_feed = NULL,
    .gen_close = NULL,
};
