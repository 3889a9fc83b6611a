/* vae_hf.c - diffusers' files of an AutoencoderKL: config.json (read strictly: every field ingot
 * cannot honour is refused, naming it; written with the fields from_pretrained reads) and the
 * tensors of diffusion_pytorch_model.safetensors: diffusers' names, convolution weights [out, in,
 * kh, kw] (ingot holds them [out, kh, kw, in], the channels-last layout its kernels take: the
 * import and the export transpose), the attention's fused q | k | v as three tensors, each under
 * its current name (to_q, to_k, to_v, to_out.0) or the older one (query, key, value, proj_attn,
 * before diffusers 0.14).
 */
#include "vae.h"

#include <stdio.h>
#include <string.h>

#include "formats/hf.h"

/* the fields ingot reads or may pass over (the others are refused) */
static const char *const known[] = {"_class_name",
                                    "_diffusers_version",
                                    "_name_or_path",
                                    "in_channels",
                                    "out_channels",
                                    "down_block_types",
                                    "up_block_types",
                                    "block_out_channels",
                                    "layers_per_block",
                                    "act_fn",
                                    "latent_channels",
                                    "norm_num_groups",
                                    "sample_size",
                                    "scaling_factor",
                                    "shift_factor",
                                    "latents_mean",
                                    "latents_std",
                                    "force_upcast",
                                    "use_quant_conv",
                                    "use_post_quant_conv",
                                    "mid_block_add_attention",
                                    NULL};

/* key's list: n strings, each want */
static ig_status block_types(json_t *o, const char *file, const char *key, const char *want, int n,
                             ig_err *err) {
    json_t *a = json_object_get(o, key);
    if (!a) return IG_OK; /* diffusers' default is one block; block_out_channels says how many */
    if (!json_is_array(a) || json_array_size(a) != (size_t)n)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: \"%s\" must list %d blocks, as block_out_channels does", file, key,
                          n);
    for (int k = 0; k < n; k++) {
        const char *s = json_string_value(json_array_get(a, (size_t)k));
        if (!s || strcmp(s, want))
            return ig_err_set(err, IG_ERR_UNSUPPORTED,
                              "%s: \"%s\" block %d is %s%s%s: ingot's VAE has %s blocks only", file,
                              key, k, s ? "\"" : "", s ? s : "not a string", s ? "\"" : "", want);
    }
    return IG_OK;
}

/* a boolean field that must be true (what ingot's VAE computes) */
static ig_status must_be_true(json_t *o, const char *file, const char *key, const char *why,
                              ig_err *err) {
    int v = 1;
    ig_status st = ig_hf_get_bool(o, file, key, 1, &v, err);
    if (st == IG_OK && !v)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: \"%s\" false: ingot's VAE always has %s",
                          file, key, why);
    return st;
}

ig_status vae_hf_config(json_t *o, const char *file, ig_model_config *out, int32_t *eod,
                        ig_err *err) {
    vae_shape d;
    memset(&d, 0, sizeof d);
    *eod = -1;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        int ok = 0;
        for (int k = 0; known[k] && !ok; k++) ok = !strcmp(key, known[k]);
        if (!ok)
            return ig_err_set(err, IG_ERR_UNSUPPORTED,
                              "%s: field \"%s\": ingot's AutoencoderKL cannot honour it (remove it "
                              "if it changes nothing)",
                              file, key);
    }
    const char *cls = json_string_value(json_object_get(o, "_class_name"));
    if (!cls || strcmp(cls, "AutoencoderKL"))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"_class_name\" must be \"AutoencoderKL\"",
                          file);
    int64_t in = 3, outc = 3, lpb = 1, lat = 4, groups = 32, sample = 0;
    ig_status st = vae_read_blocks(o, file, "block_out_channels", &d, err);
    if (st == IG_OK) st = ig_hf_get_int(o, file, "in_channels", NULL, 3, 3, 0, 3, &in, err);
    if (st == IG_OK) st = ig_hf_get_int(o, file, "out_channels", NULL, 3, 3, 0, 3, &outc, err);
    if (st == IG_OK)
        st = ig_hf_get_int(o, file, "layers_per_block", NULL, 1, VAE_MAX_LPB, 0, 1, &lpb, err);
    if (st == IG_OK) st = ig_hf_get_int(o, file, "latent_channels", NULL, 1, 64, 0, 4, &lat, err);
    if (st == IG_OK)
        st = ig_hf_get_int(o, file, "norm_num_groups", NULL, 1, 1024, 0, 32, &groups, err);
    if (st == IG_OK) /* passed over: only diffusers' tiling reads it */
        st = ig_hf_get_int(o, file, "sample_size", NULL, 1, 1 << 20, 0, 32, &sample, err);
    if (st == IG_OK) st = ig_hf_get_float(o, file, "scaling_factor", 0, 0.18215, &d.scaling, err);
    if (st == IG_OK) st = ig_hf_get_float(o, file, "shift_factor", 0, 0, &d.shift, err);
    if (st == IG_OK) st = block_types(o, file, "down_block_types", "DownEncoderBlock2D", d.nb, err);
    if (st == IG_OK) st = block_types(o, file, "up_block_types", "UpDecoderBlock2D", d.nb, err);
    const char *act = json_string_value(json_object_get(o, "act_fn"));
    if (st == IG_OK && json_object_get(o, "act_fn") && (!act || strcmp(act, "silu")))
        st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                        "%s: \"act_fn\" %s%s%s: ingot's VAE computes SiLU (\"silu\") only", file,
                        act ? "\"" : "", act ? act : "not a string", act ? "\"" : "");
    static const char *const stats[] = {"latents_mean", "latents_std"};
    for (int k = 0; k < 2 && st == IG_OK; k++) {
        json_t *s = json_object_get(o, stats[k]);
        if (s && !json_is_null(s))
            st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                            "%s: \"%s\" is given: ingot's latent models scale by scaling_factor "
                            "and shift_factor only",
                            file, stats[k]);
    }
    int upcast = 0;
    if (st == IG_OK) /* passed over: a pipeline's dtype hint */
        st = ig_hf_get_bool(o, file, "force_upcast", 1, &upcast, err);
    if (st == IG_OK) st = must_be_true(o, file, "use_quant_conv", "quant_conv", err);
    if (st == IG_OK) st = must_be_true(o, file, "use_post_quant_conv", "post_quant_conv", err);
    if (st == IG_OK)
        st = must_be_true(o, file, "mid_block_add_attention", "its mid blocks' attention", err);
    if (st != IG_OK) return st;
    d.layers = (int)lpb, d.latent = (int)lat, d.groups = (int)groups;
    out->norm_eps = VAE_EPS;
    ig_own_set_vae_shape(out, &d);
    return IG_OK;
}

json_t *vae_hf_write_config(const ig_model_config *c, int32_t eod) {
    const vae_shape d = vae_own(c);
    (void)eod;
    json_t *ch = json_array(), *down = json_array(), *up = json_array();
    for (int k = 0; k < d.nb; k++) {
        json_array_append_new(ch, json_integer(d.ch[k]));
        json_array_append_new(down, json_string("DownEncoderBlock2D"));
        json_array_append_new(up, json_string("UpDecoderBlock2D"));
    }
    return json_pack("{s:s,s:s,s:s,s:i,s:i,s:o,s:o,s:o,s:i,s:i,s:i,s:f,s:f,s:b,s:b,s:b,s:b}",
                     "_class_name", "AutoencoderKL", "_diffusers_version", "0.30.0", "act_fn",
                     "silu", "in_channels", 3, "out_channels", 3, "block_out_channels", ch,
                     "down_block_types", down, "up_block_types", up, "layers_per_block", d.layers,
                     "latent_channels", d.latent, "norm_num_groups", d.groups, "scaling_factor",
                     d.scaling, "shift_factor", d.shift, "force_upcast", 1, "use_quant_conv", 1,
                     "use_post_quant_conv", 1, "mid_block_add_attention", 1);
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* name with its tail `from` replaced by `to` */
static void retail(char *out, size_t cap, const char *name, const char *from, const char *to) {
    snprintf(out, cap, "%.*s%s", (int)(strlen(name) - strlen(from)), name, to);
}

size_t vae_hf_pieces(const ig_model_config *c, const ig_tensor_spec *t, ig_hf_piece *out,
                     size_t cap) {
    (void)c;
    static const char *const qkv[3][2] = {{"to_q", "query"}, {"to_k", "key"}, {"to_v", "value"}};
    int weight = ends_with(t->name, ".weight");
    const char *tail = weight ? "to_qkv.weight" : "to_qkv.bias";
    if (ends_with(t->name, tail)) { /* three tensors of C rows */
        if (cap < 3) return 3;
        int64_t C = t->shape[0] / 3;
        for (int k = 0; k < 3; k++) {
            char cur[32], old[32];
            snprintf(cur, sizeof cur, "%s.%s", qkv[k][0], weight ? "weight" : "bias");
            snprintf(old, sizeof old, "%s.%s", qkv[k][1], weight ? "weight" : "bias");
            memset(&out[k], 0, sizeof out[k]);
            retail(out[k].name, sizeof out[k].name, t->name, tail, cur);
            retail(out[k].alt, sizeof out[k].alt, t->name, tail, old);
            out[k].row0 = k * C, out[k].rows = C;
        }
        return 3;
    }
    if (cap < 1) return 1;
    memset(&out[0], 0, sizeof out[0]);
    snprintf(out[0].name, sizeof out[0].name, "%s", t->name);
    out[0].rows = t->shape[0];
    tail = weight ? "to_out.0.weight" : "to_out.0.bias";
    if (ends_with(t->name, tail))
        retail(out[0].alt, sizeof out[0].alt, t->name, tail,
               weight ? "proj_attn.weight" : "proj_attn.bias");
    else if (weight && t->ndim == 2) { /* a convolution: [out, in, k, k] there */
        int k =
            ends_with(t->name, "conv_shortcut.weight") || ends_with(t->name, "quant_conv.weight")
                ? 1
                : 3;
        int64_t cin = t->shape[1] / (k * k);
        out[0].ndim = 4, out[0].perm = 1;
        out[0].shape[0] = t->shape[0], out[0].shape[1] = cin, out[0].shape[2] = k,
        out[0].shape[3] = k;
        out[0].order[0] = 0, out[0].order[1] = 2, out[0].order[2] = 3, out[0].order[3] = 1;
    }
    return 1;
}
