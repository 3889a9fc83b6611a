/* dit_latent.c - the latents' side of the DiT: a DiT trains on what its data holds, RGB pixels of
 * frame shards or a VAE's latents of latent shards (PixArt's, Open-Sora's and OpenDiT's way: a
 * 256x256 frame is 32x32x4 to the transformer). Its patch embedding and final layer take
 * model.in_channels values a position, and a model of latents records the VAE they came from (its
 * weights' hash, scaling and shift factors, downsampling and line) so that a checkpoint, an export
 * and ingot sample know which decoder turns its output into video and how: z = x0 / scaling +
 * shift. The objective draws the latents from the posterior (objectives/flow.c); this file fits
 * the shape to the data and keeps the record.
 */
#include "dit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hf.h"

/* The data's values against the shape: model.in_channels 0 takes the data's (3 of pixels, the
 * VAE's latent channels); a model that recorded a VAE takes only that VAE's latents, and a model
 * of pixels no latents. */
ig_status dit_fit_values(dit_shape *d, const ig_data_facts *f, ig_err *err) {
    const ig_latent_vae *v = f->latents;
    int C = f->channels > 0 ? f->channels : 3;
    if (d->vae_weights && !v)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "the model was trained on the latents of a VAE (%s) and the data are "
                          "frame shards (pixels): give latent shards of that VAE (ingot "
                          "preprocess latents --vae ...)",
                          d->vae_describe[0] ? d->vae_describe : "unnamed");
    if (v && d->vae_weights &&
        (d->vae_weights != v->weights_xxh3 || d->vae_scaling != v->scaling_factor ||
         d->vae_shift != v->shift_factor))
        return ig_err_set(err, IG_ERR_CONFIG,
                          "the model was trained on the latents of another VAE (%s, scaling %g, "
                          "shift %g) than the data's (%s, scaling %g, shift %g): give latent "
                          "shards made with the model's VAE",
                          d->vae_describe[0] ? d->vae_describe : "unnamed", d->vae_scaling,
                          d->vae_shift, v->path, v->scaling_factor, v->shift_factor);
    if (d->in_channels > 0 && d->in_channels != C)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.in_channels %d, and the data hold %d values a position (%s): set "
                          "model.in_channels %d, or 0 to take the data's",
                          d->in_channels, C,
                          v ? "the latent channels of their VAE" : "RGB pixels of frame shards", C);
    d->in_channels = C;
    if (!v) return IG_OK;
    d->vae_weights = v->weights_xxh3;
    d->vae_scaling = v->scaling_factor;
    d->vae_shift = v->shift_factor;
    d->vae_downsample = (int)v->downsample;
    memcpy(d->vae_describe, v->describe, sizeof d->vae_describe - 1);
    d->vae_describe[sizeof d->vae_describe - 1] = 0;
    return IG_OK;
}

int dit_latents(const ig_model_config *c, ig_latent_vae *out) {
    dit_shape d = dit_own(c);
    if (out) {
        memset(out, 0, sizeof *out);
        if (d.vae_weights) {
            snprintf(out->describe, sizeof out->describe, "%s", d.vae_describe);
            out->weights_xxh3 = d.vae_weights;
            out->latent_channels = (uint32_t)dit_channels(c);
            out->downsample = (uint32_t)d.vae_downsample;
            out->scaling_factor = d.vae_scaling;
            out->shift_factor = d.vae_shift;
        }
    }
    return d.vae_weights != 0;
}

const char *dit_vae_differs(const dit_shape *x, const dit_shape *y) {
    int cx = x->in_channels > 0 ? x->in_channels : 3, cy = y->in_channels > 0 ? y->in_channels : 3;
    if (cx != cy) return "model.in_channels";
    if (x->vae_weights != y->vae_weights || x->vae_scaling != y->vae_scaling ||
        x->vae_shift != y->vae_shift || x->vae_downsample != y->vae_downsample)
        return "the latents' VAE (data.path)";
    return "";
}

/* ---- in a checkpoint's and an export's config ------------------------------------------------ */

/* "vae": {"describe", "weights_xxh3", "latent_channels", "downsample", "scaling_factor",
 * "shift_factor"} beside "in_channels", for a model of latents (nothing for one of pixels) */
void dit_vae_to_json(const dit_shape *d, json_t *o) {
    if (!d->vae_weights) return;
    char h[17];
    ig_hash64_hex(d->vae_weights, h);
    json_t *v = json_pack("{s:s,s:s,s:i,s:i,s:f,s:f}", "describe", d->vae_describe, "weights_xxh3",
                          h, "latent_channels", d->in_channels, "downsample", d->vae_downsample,
                          "scaling_factor", d->vae_scaling, "shift_factor", d->vae_shift);
    if (v) json_object_set_new(o, "vae", v);
}

ig_status dit_vae_from_json(json_t *o, const char *file, dit_shape *d, ig_err *err) {
    int64_t in = 0;
    ig_status st = ig_hf_get_int(o, file, "in_channels", NULL, 1, 1024, 0, 3, &in, err);
    if (st != IG_OK) return st;
    d->in_channels = (int)in;
    d->vae_weights = 0, d->vae_scaling = d->vae_shift = 0, d->vae_downsample = 0;
    memset(d->vae_describe, 0, sizeof d->vae_describe);
    json_t *v = json_object_get(o, "vae");
    if (!v || json_is_null(v)) return IG_OK;
    char where[600];
    snprintf(where, sizeof where, "%s (vae)", file);
    json_t *s = json_object_get(v, "describe"), *w = json_object_get(v, "weights_xxh3");
    const char *hex = json_string_value(w);
    char *end = NULL;
    if (!json_is_object(v) || (s && !json_is_string(s)) || !hex || strlen(hex) != 16 ||
        strspn(hex, "0123456789abcdef") != 16)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: \"vae\" must be an object with \"weights_xxh3\" (16 lowercase hex "
                          "digits) and a \"describe\" string",
                          file);
    d->vae_weights = strtoull(hex, &end, 16);
    if (s) strncpy(d->vae_describe, json_string_value(s), sizeof d->vae_describe - 1);
    int64_t ch = 0, f = 0;
    if ((st = ig_hf_get_int(v, where, "latent_channels", NULL, 1, 1024, 1, 0, &ch, err)) ||
        (st = ig_hf_get_int(v, where, "downsample", NULL, 1, 1 << 12, 1, 0, &f, err)) ||
        (st = ig_hf_get_positive(v, where, "scaling_factor", 1, &d->vae_scaling, err)) ||
        (st = ig_hf_get_float(v, where, "shift_factor", 0, 0, &d->vae_shift, err)))
        return st;
    if (ch != in)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: \"vae\".\"latent_channels\" %lld and \"in_channels\" %lld differ",
                          file, (long long)ch, (long long)in);
    d->vae_downsample = (int)f;
    return IG_OK;
}
