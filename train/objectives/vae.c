/* vae.c - the VAE objective (objective.h), Open-Sora's VAE training without its GAN and perceptual
 * terms: each frame of a clip is encoded on its own, x = clip / 127.5 - 1; the posterior's sample
 * z = mean + exp(logvar / 2) eps (logvar clamped to [-30, 20]) is decoded, and the loss is
 *   mean |decode(z) - x| + vae.kl_weight x mean 0.5 (mean^2 + exp(logvar) - 1 - logvar),
 * the means over every element (of the frames; of the latents). eps is standard normal from a
 * counter-based generator keyed by (data.seed, the micro-batch's index in the stream, the clip), so
 * that any layout and any resume draw the same; validation draws keyed apart. The family stages
 * the frames and eps as its passes read them (vae_model.h). Its key vae.kl_weight is bound into
 * ig_train_config (vae_kl_weight). Evaluation is in vae_use.c.
 *
 * Layouts: the KL term is computed in the middle of the model and the L1 term at its end, so it
 * runs on one pipeline stage (parallel.pp 1); frames are images, not sequences (no Ulysses);
 * data parallelism with ZeRO 0-3 and recomputation as the family allows.
 */
#include "vae_use.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* the validation draws are keyed apart from training's (which key by the micro-batch index) */
#define VALID_KEY ((uint64_t)1 << 63)

/* what the objective keeps for a model between micro-batches (m->os): host buffers of the largest
 * micro-batch seen, and each slot's KL weight (the loss reads it) */
typedef struct vae_obj {
    size_t values, latents;
    float *x, *eps;
    double kl_weight[64];
} vae_obj;

static void release(ig_model *m) {
    vae_obj *s = m->os;
    if (!s) return;
    ig_free(m->ctx, s->x);
    ig_free(m->ctx, s->eps);
    ig_free(m->ctx, s);
    m->os = NULL;
}

static ig_status state_for(ig_model *m, size_t values, size_t latents, vae_obj **out, ig_err *err) {
    vae_obj *s = m->os;
    if (!s && !(s = m->os = ig_calloc(m->ctx, 1, sizeof *s)))
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    *out = s;
    if (s->values >= values && s->latents >= latents) return IG_OK;
    ig_free(m->ctx, s->x);
    ig_free(m->ctx, s->eps);
    s->values = values > s->values ? values : s->values;
    s->latents = latents > s->latents ? latents : s->latents;
    s->x = ig_alloc(m->ctx, s->values * sizeof(float));
    s->eps = ig_alloc(m->ctx, s->latents * sizeof(float));
    if (!s->x || !s->eps) {
        release(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory for a micro-batch of frames");
    }
    return IG_OK;
}

const ig_vae_model *ig_vae_model_of(const ig_model *m) {
    return m->fam->objective == &ig_objective_vae ? m->fam->for_objective : NULL;
}

ig_status ig_vae_stage_frames(ig_model *m, int slot, const ig_vae_input *in, float grad_scale,
                              ig_err *err) {
    const ig_vae_model *vm = ig_vae_model_of(m);
    if (!vm) return ig_err_set(err, IG_ERR_INVALID_ARG, "%s models are not VAEs", m->fam->arch);
    if (!in || !in->frames || in->B < 1 || in->F < 1 || slot < 0 || slot >= 64)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "a VAE reads clips: none given");
    int h = 0, w = 0, C = 0;
    ig_status st = vm->latent_shape(&m->cfg, in->H, in->W, &h, &w, &C, err);
    if (st != IG_OK) return st;
    size_t per = (size_t)in->F * (size_t)in->H * (size_t)in->W * 3;
    size_t lat = (size_t)in->F * (size_t)h * (size_t)w * (size_t)C;
    vae_obj *s = NULL;
    if ((st = state_for(m, (size_t)in->B * per, (size_t)in->B * lat, &s, err)) != IG_OK) return st;
    for (size_t e = 0; e < (size_t)in->B * per; e++) s->x[e] = (float)in->frames[e] / 127.5f - 1.0f;
    for (int b = 0; !in->noise && b < in->B; b++) {
        uint64_t k[3] = {in->seed, in->key, (uint64_t)b};
        ig_rng_fill_normal(m->ctx, ig_rng_key_make(ig_xxh3_64(k, sizeof k), "ingot vae noise"), 0,
                           lat, 0.0f, 1.0f, s->eps + (size_t)b * lat);
    }
    s->kl_weight[slot] = in->kl_weight;
    ig_vae_batch vb = {.B = in->B,
                       .F = in->F,
                       .H = in->H,
                       .W = in->W,
                       .x = s->x,
                       .eps = in->noise ? in->noise : s->eps,
                       .grad_scale = grad_scale,
                       .kl_weight = in->kl_weight};
    return vm->stage(m, slot, &vb, err);
}

/* A micro-batch from the feed: training's noise keyed by its index, validation's apart. */
static ig_status vae_stage(ig_model *m, int slot, const ig_micro_batch *mb, float grad_scale,
                           uint64_t *counted, ig_err *err) {
    const ig_clip_batch *b = mb->clips;
    if (!b) return ig_err_set(err, IG_ERR_INVALID_ARG, "a VAE reads clips: none given");
    ig_vae_input in = {.frames = b->frames,
                       .B = (int)b->n,
                       .F = (int)b->frames_per_clip,
                       .H = (int)b->height,
                       .W = (int)b->width,
                       .seed = mb->t->data.seed,
                       .key = mb->valid ? VALID_KEY | mb->unit : mb->unit,
                       .kl_weight = mb->t->vae_kl_weight};
    if (counted) *counted = b->n;
    return ig_vae_stage_frames(m, slot, &in, grad_scale, err);
}

ig_status ig_vae_terms_of(ig_model *m, int slot, ig_vae_terms *out, ig_err *err) {
    const vae_obj *s = m->os;
    ig_vae_sums v;
    ig_status st = ig_vae_model_of(m)->sums(m, slot, &v, err);
    if (st != IG_OK) return st;
    out->reconstruction = v.l1 / v.l1_count;
    out->kl = v.kl / v.kl_count;
    out->loss = out->reconstruction + (s ? s->kl_weight[slot] : 0) * out->kl;
    return IG_OK;
}

static ig_status vae_loss(ig_model *m, int slot, double *loss, ig_err *err) {
    ig_vae_terms t = {0};
    ig_status st = ig_vae_terms_of(m, slot, &t, err);
    *loss = t.loss;
    return st;
}

/* Every shape of micro-batch the clips hold must be encoded (frames whose sides the downsampling
 * divides); the activations are planned for the most clips and the most pixels of one
 * (model.seq_len: the pixels of the largest clip). */
static ig_status vae_fit(ig_fit *fit, const ig_train_config *t, const ig_data_facts *facts,
                         ig_err *err) {
    const ig_family *fam = ig_family_of(fit->shape.arch);
    const ig_vae_model *vm = fam->for_objective;
    (void)t;
    ig_status st = ig_model_config_check(&fit->shape, err);
    if (st == IG_OK && facts->n_shapes > IG_FEED_MAX_SHAPES)
        st = ig_err_set(err, IG_ERR_CONFIG,
                        "data: the clips come in %zu shapes, more than %d: make them with buckets "
                        "(ingot preprocess video --buckets)",
                        facts->n_shapes, IG_FEED_MAX_SHAPES);
    int B = 0;
    int64_t T = 0;
    for (size_t i = 0; st == IG_OK && i < facts->n_shapes; i++) {
        const ig_clip_shape *sh = &facts->shapes[i];
        int h = 0, w = 0, C = 0;
        st = vm->latent_shape(&fit->shape, sh->H, sh->W, &h, &w, &C, err);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "data: clips of %d frames of %dx%d", sh->F, sh->H, sh->W);
            break;
        }
        int64_t px = (int64_t)sh->F * sh->H * sh->W;
        if (sh->B > B) B = sh->B;
        if (px > T) T = px;
    }
    if (st == IG_OK && T > (1 << 30))
        st = ig_err_set(err, IG_ERR_CONFIG, "data: clips of %lld pixels: too large", (long long)T);
    if (st != IG_OK) return st;
    fit->shape.seq_len = (int)T;
    fit->B = B;
    fit->T = (int)T;
    fit->bo = (ig_batch_opts){0, 0, -1};
    return ig_model_config_check(&fit->shape, err);
}

/* a clip's pixels (the frames' sides must be multiples of the downsampling's) */
static ig_status vae_clip_tokens(const ig_model_config *c, int F, int H, int W, int *tokens,
                                 ig_err *err) {
    const ig_vae_model *vm = ig_family_of(c->arch)->for_objective;
    int h = 0, w = 0, C = 0;
    ig_status st = vm->latent_shape(c, H, W, &h, &w, &C, err);
    if (st == IG_OK && (F < 1 || (int64_t)F * H * W > (1 << 30)))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "%d frames of %dx%d: need 1 .. 2^30 pixels", F, H,
                        W);
    if (st == IG_OK) *tokens = F * H * W;
    return st;
}

static ig_status vae_check_layout(const ig_train_config *t, const ig_model_config *c, int tp,
                                  int sp, ig_err *err) {
    (void)c, (void)tp, (void)sp;
    if (t->pp > 1)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.pp %d: a VAE trains on one pipeline stage (its loss has a "
                          "term in the middle of the model, the KL of the encoder's posterior, and "
                          "one at its end): train it data-parallel, with parallel.zero 1 to 3 for "
                          "memory",
                          t->pp);
    if (t->sp_mode == 1 && t->sp_size > 1)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.sp_size %d: a VAE encodes frames, not sequences of tokens: it "
                          "has no sequence parallelism (train it data-parallel)",
                          t->sp_size);
    return IG_OK;
}

static int vae_repeats(const ig_train_config *t) {
    (void)t;
    return 1;
}

static const ig_cfg_key vae_obj_keys[] = {
    {.path = "vae.kl_weight",
     .type = IG_CFG_FLOAT,
     .default_val = "1e-6",
     .help = "vae: the KL term's weight in the loss, mean |x' - x| + w mean KL (Open-Sora's VAE "
             "training: 1e-6)",
     .flag = "",
     .offset = offsetof(ig_train_config, vae_kl_weight),
     .size = sizeof(((ig_train_config *)0)->vae_kl_weight),
     .is_signed = 1,
     .min = 0,
     .max = 1e6},
};

const ig_objective ig_objective_vae = {.name = "vae",
                                       .input = "clips",
                                       .sampler = NULL,
                                       .units = "clips",
                                       .shapes_vary = 1,
                                       .keys = vae_obj_keys,
                                       .n_keys = sizeof vae_obj_keys / sizeof vae_obj_keys[0],
                                       .fit = vae_fit,
                                       .clip_tokens = vae_clip_tokens,
                                       .check_layout = vae_check_layout,
                                       .eval_repeats = vae_repeats,
                                       .stage = vae_stage,
                                       .loss = vae_loss,
                                       .evaluate = ig_vae_evaluate,
                                       .release = release};

/* ---- a whole model on one process (train.h) -------------------------------------------------- */

static ig_status need_vae(const ig_model *m, ig_err *err) {
    if (ig_vae_model_of(m)) return IG_OK;
    return ig_err_set(err, IG_ERR_INVALID_ARG, "%s models are not VAEs (model.arch vae)",
                      m->fam->arch);
}

ig_status ig_model_vae_latent_shape(const ig_model_config *c, int H, int W, int *h, int *w, int *C,
                                    ig_err *err) {
    const ig_family *f = ig_family_of(c->arch);
    if (!f || f->objective != &ig_objective_vae)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s models are not VAEs (model.arch vae)",
                          f ? f->arch : "unknown");
    return ((const ig_vae_model *)f->for_objective)->latent_shape(c, H, W, h, w, C, err);
}

ig_status ig_model_vae_loss(ig_model *m, const ig_vae_input *in, float grad_scale,
                            ig_vae_terms *out, ig_err *err) {
    ig_status st = need_vae(m, err);
    if (st == IG_OK && !(grad_scale >= 0))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "grad_scale must be >= 0, got %g",
                        (double)grad_scale);
    if (st == IG_OK && grad_scale > 0 && m->part.inference)
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "a model opened for inference has no gradients");
    if (st == IG_OK && !(m->part.first && m->part.last && m->part.tp == 1))
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "this model is one rank's part: run it through the trainer's schedule");
    if (st == IG_OK) st = ig_vae_stage_frames(m, 0, in, grad_scale, err);
    if (st == IG_OK) st = ig_stage_forward(m, 0, grad_scale > 0, err);
    if (st == IG_OK && grad_scale > 0) st = ig_stage_backward(m, 0, err);
    if (st == IG_OK) st = ig_backend_sync(m->be, err);
    return st == IG_OK ? ig_vae_terms_of(m, 0, out, err) : st;
}

ig_status ig_model_vae_reconstruction(ig_model *m, float *out, ig_err *err) {
    ig_status st = need_vae(m, err);
    return st == IG_OK ? ig_vae_model_of(m)->reconstruction(m, 0, out, err) : st;
}

ig_status ig_model_vae_encode(ig_model *m, const uint8_t *frames, int N, int H, int W,
                              float *moments, ig_err *err) {
    ig_status st = need_vae(m, err);
    int h = 0, w = 0, C = 0;
    if (st == IG_OK) st = ig_model_vae_latent_shape(&m->cfg, H, W, &h, &w, &C, err);
    if (st != IG_OK || N <= 0) return st;
    /* a frame at a time into floats, as many as a pass takes */
    size_t per = (size_t)H * (size_t)W * 3;
    int chunk = (int)((uint64_t)m->B * (uint64_t)m->T / ((uint64_t)H * (uint64_t)W));
    if (chunk < 1) chunk = 1; /* the family refuses it, naming the sizes */
    if (chunk > N) chunk = N;
    float *x = ig_alloc(m->ctx, (size_t)chunk * per * sizeof(float));
    if (!x) return ig_err_set(err, IG_ERR_NOMEM, "out of memory for %d frames", chunk);
    size_t out_frame = (size_t)h * (size_t)w * 2 * (size_t)C;
    for (int f0 = 0; st == IG_OK && f0 < N; f0 += chunk) {
        int k = N - f0 < chunk ? N - f0 : chunk;
        for (size_t e = 0; e < (size_t)k * per; e++)
            x[e] = (float)frames[(size_t)f0 * per + e] / 127.5f - 1.0f;
        st = ig_vae_model_of(m)->encode(m, x, k, H, W, moments + (size_t)f0 * out_frame, err);
    }
    ig_free(m->ctx, x);
    return st;
}

ig_status ig_model_vae_decode(ig_model *m, const float *z, int N, int h, int w, float *out,
                              ig_err *err) {
    ig_status st = need_vae(m, err);
    return st == IG_OK ? ig_vae_model_of(m)->decode(m, z, N, h, w, out, err) : st;
}

ig_status ig_model_vae_decode_rgb(ig_model *m, const float *x0, int N, int H, int W, double scaling,
                                  double shift, uint8_t *rgb, ig_err *err) {
    ig_status st = need_vae(m, err);
    int h = 0, w = 0, C = 0;
    if (st == IG_OK && !(scaling > 0 && isfinite(scaling) && isfinite(shift)))
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "latents' scaling %g and shift %g: need > 0, finite", scaling, shift);
    if (st == IG_OK) st = ig_model_vae_latent_shape(&m->cfg, H, W, &h, &w, &C, err);
    const ig_vae_model *vm = ig_vae_model_of(m);
    if (st != IG_OK || N <= 0) return st;
    size_t zin = (size_t)h * (size_t)w * (size_t)C, px = (size_t)H * (size_t)W * 3;
    int chunk = (int)((uint64_t)m->B * (uint64_t)m->T / ((uint64_t)H * (uint64_t)W));
    if (chunk < 1) chunk = 1; /* the family refuses it, naming the sizes */
    if (chunk > N) chunk = N;
    float *z = ig_alloc(m->ctx, (size_t)chunk * zin * sizeof(float));
    float *out = ig_alloc(m->ctx, (size_t)chunk * px * sizeof(float));
    if (!z || !out) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory for %d frames", chunk);
    for (int f0 = 0; st == IG_OK && f0 < N; f0 += chunk) {
        int k = N - f0 < chunk ? N - f0 : chunk;
        for (size_t e = 0; e < (size_t)k * zin; e++)
            z[e] = (float)((double)x0[(size_t)f0 * zin + e] / scaling + shift);
        if ((st = vm->decode(m, z, k, h, w, out, err)) != IG_OK) break;
        for (size_t e = 0; e < (size_t)k * px; e++) {
            float p = (out[e] + 1.0f) * 127.5f;
            rgb[(size_t)f0 * px + e] = (uint8_t)(p <= 0 ? 0 : p >= 255 ? 255 : lrintf(p));
        }
    }
    ig_free(m->ctx, z);
    ig_free(m->ctx, out);
    return st;
}
