/* vae.c - the VAE family (model.arch vae): Stable Diffusion's autoencoder, diffusers'
 * AutoencoderKL exactly, applied to each frame of a clip (a 2-D VAE), trained by the VAE objective
 * (objectives/vae.c: the reconstruction's L1 distance plus vae.kl_weight x the KL term). Its keys
 * and shape, its layout checks, costs and memory, its manifest fields and its descriptor; the
 * network's pieces are in vae_net.c, the passes in vae_pass.c, the staging in vae_input.c,
 * diffusers' files in vae_hf.c.
 *
 * The architecture (vae.h has the layers): encoder conv_in 3x3 -> per block layers_per_block
 * ResnetBlock2D (GroupNorm(groups, eps 1e-6) + SiLU, conv 3x3, GroupNorm + SiLU, conv 3x3, a 1x1
 * shortcut where the channels change) and a downsample after every block but the last -> the mid
 * block (resnet, single-head self-attention over the frame's positions, resnet) -> GroupNorm +
 * SiLU -> conv_out to 2 latent channels x 2 -> quant_conv 1x1: mean | logvar, the latent's
 * posterior. The decoder: post_quant_conv 1x1 -> conv_in -> mid block -> the blocks in reverse
 * with layers_per_block + 1 resnets and a nearest 2x upsample + conv after every block but the
 * last -> GroupNorm + SiLU -> conv_out to RGB.
 *
 * Its model.n_layer, n_head and d_model are derived from the blocks (2 blocks + 2 mid layers, one
 * head, the last block's channels) and its seq_len is the pixels of the largest clip (the
 * objective's fit sets it): whatever the configuration gives for them is replaced.
 *
 * Parallelism: data parallel with ZeRO 0-3 (the blocks are the stage driver's layers: ZeRO-3
 * gathers a block at a time) and recomputation (full: a block from its input; selective: the
 * attention's core). Tensor parallelism is refused here (check_layout: a convolution's channels
 * are not cut), and so are pipeline stages and Ulysses' sequence parallelism (the objective's
 * check_layout: the loss has a term in the middle of the model; frames are not sequences).
 */
#include "vae.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hf.h"

/* ---- keys and shape -------------------------------------------------------------------------- */

static const ig_cfg_key vae_keys[] = {
    {.path = "model.block_out_channels",
     .type = IG_CFG_LIST,
     .default_val = "128,256,512,512",
     .help = "vae: each block's channels, from the first (the full-resolution one); a block but "
             "the last halves the frame's sides (Stable Diffusion's: [128, 256, 512, 512], 8x)",
     .flag = "",
     .offset = offsetof(vae_shape, blocks_list),
     .size = sizeof(((vae_shape *)0)->blocks_list),
     .count_offset = offsetof(vae_shape, n_blocks_list)},
    IG_OWN_KEY("model.layers_per_block", IG_CFG_INT, vae_shape, layers, "2", 1, VAE_MAX_LPB,
               "vae: ResNet blocks per encoder block (the decoder's have one more)"),
    IG_OWN_KEY("model.latent_channels", IG_CFG_INT, vae_shape, latent, "4", 1, 64,
               "vae: the latent's channels (the encoder gives a mean and a log-variance each)"),
    IG_OWN_KEY("model.norm_groups", IG_CFG_INT, vae_shape, groups, "32", 1, 1024,
               "vae: GroupNorm's groups (they divide every block's channels)"),
    IG_OWN_KEY("model.scaling_factor", IG_CFG_FLOAT, vae_shape, scaling, "0.18215", 1e-6, 1e6,
               "vae: what a latent model multiplies the latents by (recorded, config.json's "
               "scaling_factor)"),
    IG_OWN_KEY("model.shift_factor", IG_CFG_FLOAT, vae_shape, shift, "0", -1e6, 1e6,
               "vae: what a latent model subtracts from the latents first (shift_factor)"),
};

static ig_status parse_blocks(vae_shape *d, ig_err *err) {
    if (d->n_blocks_list == 0) return IG_OK; /* parsed already (a checked shape) */
    if (d->n_blocks_list > VAE_MAX_BLOCKS)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.block_out_channels: %zu blocks; ingot's VAE takes 1 to %d",
                          d->n_blocks_list, VAE_MAX_BLOCKS);
    for (size_t k = 0; k < d->n_blocks_list; k++) {
        char *end = NULL;
        long v = strtol(d->blocks_list[k], &end, 10);
        if (!end || end == d->blocks_list[k] || *end || v < 1 || v > 8192)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "model.block_out_channels: \"%s\" is not a whole number in "
                              "[1, 8192]",
                              d->blocks_list[k]);
        d->ch[k] = (int)v;
    }
    d->nb = (int)d->n_blocks_list;
    d->blocks_list = NULL; /* parsed: a checked shape holds no pointer into the configuration */
    d->n_blocks_list = 0;
    return IG_OK;
}

static ig_status vae_check(ig_model_config *c, ig_err *err) {
    vae_shape d = vae_own(c);
    ig_status st = parse_blocks(&d, err);
    if (st != IG_OK) return st;
    if (d.nb < 1 || d.nb > VAE_MAX_BLOCKS)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.block_out_channels: give 1 to %d blocks' channels, e.g. [128, "
                          "256, 512, 512]",
                          VAE_MAX_BLOCKS);
    if (d.layers < 1 || d.layers > VAE_MAX_LPB)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.layers_per_block %d: need 1 .. %d",
                          d.layers, VAE_MAX_LPB);
    if (d.latent < 1 || d.latent > 64)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.latent_channels %d: need 1 .. 64",
                          d.latent);
    if (d.groups < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "model.norm_groups %d: need 1 or more",
                          d.groups);
    for (int k = 0; k < d.nb; k++)
        if (d.ch[k] < 1 || d.ch[k] % d.groups)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "model.norm_groups %d does not divide block %d's %d channels "
                              "(model.block_out_channels): GroupNorm cuts a pixel's channels into "
                              "equal groups",
                              d.groups, k, d.ch[k]);
    if (!(d.scaling > 0) || !isfinite(d.shift))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.scaling_factor %g, model.shift_factor %g: need > 0 and finite",
                          d.scaling, d.shift);
    if (c->vocab_size != 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.vocab_size %d: a VAE reads frames, not tokens (leave it out)",
                          c->vocab_size);
    c->n_layer = 2 * d.nb + 2, c->n_head = 1, c->d_model = d.ch[d.nb - 1];
    if (c->norm_eps == 0) c->norm_eps = VAE_EPS;
    if (c->norm_eps != VAE_EPS)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.norm_eps %g: diffusers' AutoencoderKL's GroupNorms use 1e-6 "
                          "(leave it out)",
                          c->norm_eps);
    if (c->seq_len <= 0) c->seq_len = 1; /* the pixels of the largest clip, set by the trainer */
    c->padded_vocab = 0;
    ig_own_set_vae_shape(c, &d);
    return IG_OK;
}

static const char *vae_differs(const ig_model_config *a, const ig_model_config *b) {
    vae_shape x = vae_own(a), y = vae_own(b);
    if (x.nb != y.nb || memcmp(x.ch, y.ch, sizeof x.ch)) return "model.block_out_channels";
    if (x.layers != y.layers) return "model.layers_per_block";
    if (x.latent != y.latent) return "model.latent_channels";
    if (x.groups != y.groups) return "model.norm_groups";
    if (x.scaling != y.scaling) return "model.scaling_factor";
    if (x.shift != y.shift) return "model.shift_factor";
    return "";
}

static void vae_describe(const ig_model_config *c, char *buf, size_t cap) {
    const vae_shape d = vae_own(c);
    size_t n = (size_t)snprintf(buf, cap, "; blocks [");
    for (int k = 0; k < d.nb && n < cap; k++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%d", k ? ", " : "", d.ch[k]);
    if (n < cap)
        snprintf(buf + n, cap - n, "] x %d resnets, %d latent channels (%dx down), %d groups",
                 d.layers, d.latent, 1 << (d.nb - 1), d.groups);
}

static ig_status vae_check_layout(const ig_model_config *c, int tp, ig_err *err) {
    (void)c;
    if (tp > 1)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d: model.arch vae is not tensor-parallel (its convolutions "
                          "and GroupNorms are not cut over ranks; Megatron's sequence parallelism "
                          "needs tp too): train it data-parallel, with parallel.zero 1 to 3 for "
                          "memory",
                          tp);
    return IG_OK;
}

static uint64_t vae_num_params(const ig_model_config *c) {
    ig_tensor_spec *t = NULL;
    uint64_t sum = 0;
    ig_part whole = {.tp = 1, .l1 = c->n_layer, .first = 1, .last = 1};
    size_t k = vae_net_tensors(c, &whole, NULL, 0);
    if ((t = calloc(k ? k : 1, sizeof *t))) {
        vae_net_tensors(c, &whole, t, k);
        for (size_t i = 0; i < k; i++)
            sum += (uint64_t)t[i].shape[0] * (uint64_t)(t[i].ndim > 1 ? t[i].shape[1] : 1);
    }
    free(t);
    return sum;
}

/* per pixel of a clip (the trainer's tokens are the VAE's pixels) */
static double vae_flops_per_token(const ig_model_config *c, int T) {
    (void)T;
    return vae_net_flops(c);
}

/* nothing but the data-parallel reductions, which the planner adds */
static ig_comm_micro vae_comm_micro(const ig_model_config *c, const ig_part *p, int B, int T,
                                    uint64_t e, int recompute) {
    (void)c, (void)p, (void)B, (void)T, (void)e, (void)recompute;
    return (ig_comm_micro){0, 0, 0};
}

/* ---- activations ----------------------------------------------------------------------------- */

static void vae_plan(const ig_model_config *c, const ig_part *p, int B, int T, ig_act_sizes *out) {
    vae_net *n = malloc(sizeof *n); /* a few tens of kB: not on the stack */
    if (!n) {
        memset(out, 0, sizeof *out);
        return;
    }
    vae_net_layout(c, p, B, T, n, out);
    free(n);
}

static void vae_destroy(ig_model *m) {
    vae_state *x = vae_of(m);
    if (!x) return;
    ig_free(m->ctx, x);
    m->fs = NULL;
}

static ig_status vae_create(ig_model *m, ig_err *err) {
    const ig_part *p = &m->part;
    if (!(p->first && p->last && p->tp == 1 && p->l0 == 0 && p->l1 == m->cfg.n_layer))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "model.arch vae runs whole on each rank (no tensor or pipeline split)");
    vae_state *x = ig_calloc(m->ctx, 1, sizeof *x);
    if (!x) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    m->fs = x;
    ig_act_sizes sizes;
    vae_net_layout(&m->cfg, p, m->B, m->T, &x->net, &sizes);
    if ((size_t)x->net.n_tensors != m->n_tensors) {
        vae_destroy(m);
        return ig_err_set(err, IG_ERR_INTERNAL, "the VAE's net has %d tensors, its table %zu",
                          x->net.n_tensors, m->n_tensors);
    }
    return IG_OK;
}

/* ---- checkpoint manifests -------------------------------------------------------------------- */

static ig_status vae_to_json(const ig_model_config *c, json_t *model, ig_err *err) {
    const vae_shape d = vae_own(c);
    (void)err;
    json_t *ch = json_array();
    for (int k = 0; k < d.nb; k++) json_array_append_new(ch, json_integer(d.ch[k]));
    json_object_set_new(model, "block_out_channels", ch);
    json_object_set_new(model, "layers_per_block", json_integer(d.layers));
    json_object_set_new(model, "latent_channels", json_integer(d.latent));
    json_object_set_new(model, "norm_groups", json_integer(d.groups));
    json_object_set_new(model, "scaling_factor", json_real(d.scaling));
    json_object_set_new(model, "shift_factor", json_real(d.shift));
    json_object_set_new(model, "norm_eps", json_real(c->norm_eps));
    return IG_OK;
}

/* block_out_channels of a manifest or config.json: a list of 1 to VAE_MAX_BLOCKS whole numbers */
ig_status vae_read_blocks(json_t *o, const char *file, const char *key, vae_shape *d, ig_err *err) {
    json_t *a = json_object_get(o, key);
    size_t n = json_array_size(a);
    if (!json_is_array(a) || n < 1 || n > VAE_MAX_BLOCKS)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" must be a list of 1 to %d channels", file,
                          key, VAE_MAX_BLOCKS);
    for (size_t k = 0; k < n; k++) {
        json_t *v = json_array_get(a, k);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 8192)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: \"%s\" holds a value outside [1, 8192]",
                              file, key);
        d->ch[k] = (int)json_integer_value(v);
    }
    d->nb = (int)n;
    d->blocks_list = NULL, d->n_blocks_list = 0;
    return IG_OK;
}

static ig_status vae_from_json(json_t *model, ig_model_config *c, const char *file, ig_err *err) {
    vae_shape d = vae_own(c);
    int64_t v[3] = {0};
    static const char *const keys[] = {"layers_per_block", "latent_channels", "norm_groups"};
    ig_status st = vae_read_blocks(model, file, "block_out_channels", &d, err);
    for (int i = 0; i < 3 && st == IG_OK; i++)
        st = ig_hf_get_int(model, file, keys[i], NULL, 1, 1024, 1, 0, &v[i], err);
    d.layers = (int)v[0], d.latent = (int)v[1], d.groups = (int)v[2];
    if (st == IG_OK) st = ig_hf_get_float(model, file, "scaling_factor", 1, 0, &d.scaling, err);
    if (st == IG_OK) st = ig_hf_get_float(model, file, "shift_factor", 1, 0, &d.shift, err);
    if (st == IG_OK) st = ig_hf_get_float(model, file, "norm_eps", 1, 0, &c->norm_eps, err);
    ig_own_set_vae_shape(c, &d);
    return st;
}

/* ---- the family ------------------------------------------------------------------------------ */

static const ig_op vae_ops[] = {
    IG_OP_CONV2D_FORWARD,
    IG_OP_CONV2D_BACKWARD,
    IG_OP_GROUPNORM_FORWARD,
    IG_OP_GROUPNORM_BACKWARD,
    IG_OP_UPSAMPLE2X_FORWARD,
    IG_OP_UPSAMPLE2X_BACKWARD,
    IG_OP_MATMUL_FORWARD,
    IG_OP_MATMUL_BACKWARD,
    IG_OP_ATTENTION_FORWARD,
    IG_OP_ATTENTION_BACKWARD,
    IG_OP_ADD,
    IG_OP_L1,
    IG_OP_POSTERIOR_FORWARD,
    IG_OP_POSTERIOR_BACKWARD,
};

static void vae_factors(const ig_model_config *c, double *scaling, double *shift) {
    const vae_shape d = vae_own(c);
    *scaling = d.scaling, *shift = d.shift;
}

static const ig_vae_model vae_model = {.latent_shape = vae_latent_shape,
                                       .factors = vae_factors,
                                       .stage = vae_stage_batch,
                                       .sums = vae_sums,
                                       .reconstruction = vae_reconstruction,
                                       .encode = vae_encode,
                                       .decode = vae_decode};

const ig_family ig_family_vae = {
    .arch = "vae",
    .what = "VAE: Stable Diffusion's autoencoder (diffusers' AutoencoderKL), per frame",
    .objective = &ig_objective_vae,
    .for_objective = &vae_model,
    .any_length = 1,
    .ema_default = 0,
    .keys = vae_keys,
    .n_keys = sizeof vae_keys / sizeof vae_keys[0],
    .ops = vae_ops,
    .n_ops = sizeof vae_ops / sizeof vae_ops[0],
    .check = vae_check,
    .differs = vae_differs,
    .check_layout = vae_check_layout,
    .num_params = vae_num_params,
    .describe = vae_describe,
    .flops_per_token = vae_flops_per_token,
    .comm_micro = vae_comm_micro,
    .tensors = vae_net_tensors,
    .plan = vae_plan,
    .create = vae_create,
    .destroy = vae_destroy,
    .stage = &vae_stage,
    .stage_io = vae_stage_io,
    .to_json = vae_to_json,
    .from_json = vae_from_json,
    .hf_class_name = "AutoencoderKL",
    .hf_weights = "diffusion_pytorch_model.safetensors",
    .hf_config = vae_hf_config,
    .hf_write_config = vae_hf_write_config,
    .hf_pieces = vae_hf_pieces,
};
