/* flow.c - the rectified-flow objective (objective.h), as SD3 and Open-Sora 2.0 train their
 * diffusion models: x0 = clip / 127.5 - 1, x_t = (1 - t) x0 + t eps, the model predicts the
 * velocity eps - x0 under the mean squared error. t is logit-normal (the sigmoid of a standard
 * normal) and shifted (diffusion.shift), eps standard normal, and a label or a caption is dropped
 * to the null one with the model's dropout probability, each from a counter-based generator keyed
 * by (data.seed, the micro-batch's index in the stream, the sample), so that any layout and any
 * resume draw the same. Validation stages each micro-batch at every time of the grid
 * (k + 0.5) / eval.timesteps with noise keyed apart from training's. The family makes of x_t and
 * the target what its passes read (ig_flow_model: a DiT cuts them in patches). Of latent shards
 * (a VAE's posterior of the clips, PixArt's and Open-Sora's way), x0 = scaling (z - shift) with
 * z = mean + exp(logvar / 2) eps' drawn, keyed as the rest, each time a clip is read (z = mean
 * for validation). Evaluation and the sampler are in flow_use.c.
 */
#include "flow.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* The validation draws are keyed apart from training's (which key by the micro-batch index). */
#define VALID_KEY ((uint64_t)1 << 63)

/* what the objective keeps for a model between micro-batches (m->os): host buffers of the largest
 * micro-batch seen */
typedef struct flow_state {
    size_t values, clips, tokens;
    float *xt, *target, *noise, *t;
    int32_t *labels, *lens;
} flow_state;

static void release(ig_model *m) {
    flow_state *s = m->os;
    if (!s) return;
    float *f[] = {s->xt, s->target, s->noise, s->t};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) ig_free(m->ctx, f[i]);
    ig_free(m->ctx, s->labels);
    ig_free(m->ctx, s->lens);
    ig_free(m->ctx, s);
    m->os = NULL;
}

static ig_status state_for(ig_model *m, size_t clips, size_t values, flow_state **out,
                           ig_err *err) {
    flow_state *s = m->os;
    if (!s && !(s = m->os = ig_calloc(m->ctx, 1, sizeof *s)))
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    *out = s;
    if (s->values >= values && s->clips >= clips) return IG_OK;
    size_t v = values > s->values ? values : s->values, c = clips > s->clips ? clips : s->clips;
    float **f[] = {&s->xt, &s->target, &s->noise};
    for (size_t i = 0; i < 3; i++) {
        ig_free(m->ctx, *f[i]);
        *f[i] = ig_alloc(m->ctx, v * sizeof(float));
    }
    ig_free(m->ctx, s->t);
    ig_free(m->ctx, s->labels);
    ig_free(m->ctx, s->lens);
    s->t = ig_alloc(m->ctx, c * sizeof(float));
    s->labels = ig_alloc(m->ctx, c * sizeof(int32_t));
    s->lens = ig_alloc(m->ctx, c * sizeof(int32_t));
    s->values = v, s->clips = c;
    if (!s->xt || !s->target || !s->noise || !s->t || !s->labels || !s->lens) {
        release(m);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory for a micro-batch of clips");
    }
    return IG_OK;
}

/* the draws of sample b: a key of their own per (seed, key, b) and purpose */
static ig_rng_key sample_key(const ig_clip_input *in, int b, const char *what) {
    uint64_t k[3] = {in->seed, in->key, (uint64_t)b};
    return ig_rng_key_make(ig_xxh3_64(k, sizeof k), what);
}

/* Sample b's caption: its length after the cut to the model's caption length and the dropout (0:
 * the null caption), its ids checked against the vocabulary (its features need no check). */
static ig_status caption_len_of(const ig_model *m, const ig_clip_input *in, int b, int Tk,
                                double dropout, int32_t *len, ig_err *err) {
    int V = m->cfg.vocab_size, n = 0;
    if ((in->captions || in->features) && in->caption_lens) {
        n = in->caption_lens[b] < 0 ? 0 : in->caption_lens[b] > Tk ? Tk : in->caption_lens[b];
        for (int j = 0; !in->features && j < n; j++) {
            int32_t id = in->captions[(size_t)b * (size_t)Tk + (size_t)j];
            if (id < 0 || id >= V)
                return ig_err_set(err, IG_ERR_INVALID_ARG,
                                  "caption token %d of clip %d is outside the model's vocabulary "
                                  "of %d",
                                  id, b, V);
        }
    }
    if (in->drop_labels && dropout > 0 &&
        ig_rng_uniform(sample_key(in, b, "ingot flow caption"), 0) < dropout)
        n = 0;
    *len = n;
    return IG_OK;
}

ig_status ig_flow_stage_clips(ig_model *m, int slot, const ig_clip_input *in, float grad_scale,
                              ig_err *err) {
    const ig_flow_model *fm = ig_flow_model_of(m);
    const ig_model_config *c = &m->cfg;
    if (!fm)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s models read %s, not clips", m->fam->arch,
                          m->fam->objective->input);
    if (!in || (!in->frames && !in->latents && !in->xt) || in->B < 1 || in->F < 1 || in->H < 1 ||
        in->W < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s models read clips: none given",
                          m->fam->arch);
    int C = fm->channels(c), latent = fm->latents(c, NULL);
    if (!in->xt && in->latents && !latent)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "latents given to a model of pixels: it reads frame shards (%d values a "
                          "pixel)",
                          C);
    if (!in->xt && in->frames && latent)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "frames given to a model of latents (%d channels): give the latent "
                          "shards of the clips",
                          C);
    if (in->latents &&
        !(in->latent_scale > 0 && isfinite(in->latent_scale) && isfinite(in->latent_shift)))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "latents' scaling %g and shift %g: need > 0, finite", in->latent_scale,
                          in->latent_shift);
    int B = in->B, Tk = fm->caption_len(c), null = fm->null_class(c);
    int D = fm->caption_features ? fm->caption_features(c, NULL) : 0;
    if (in->features && !D)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "caption features given to a model that %s",
                          Tk ? "reads its captions' tokens" : "reads no captions");
    if (D && in->captions && !in->features)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "caption tokens given to a model of caption features (%d wide): give "
                          "the captions' features",
                          D);
    size_t per = (size_t)in->F * (size_t)in->H * (size_t)in->W * (size_t)C;
    flow_state *s = NULL;
    ig_status st = state_for(m, (size_t)B, (size_t)B * per, &s, err);
    if (st != IG_OK) return st;
    double pl = fm->dropout(c, 0), pc = fm->dropout(c, 1);
    int classes = ig_model_conditions(c) & IG_COND_LABEL;
    /* each sample's time, label, caption and noise */
    for (int b = 0; b < B; b++) {
        float t;
        if (in->t) {
            t = in->t[b];
            if (!(t >= 0 && t <= 1))
                return ig_err_set(err, IG_ERR_INVALID_ARG, "time %g of clip %d is not in [0, 1]",
                                  (double)t, b);
        } else {
            double z = ig_rng_normal(sample_key(in, b, "ingot flow time"), 0);
            double u = 1.0 / (1.0 + exp(-z)), sh = in->shift > 0 ? in->shift : 1.0;
            t = (float)(sh * u / (1.0 + (sh - 1.0) * u));
        }
        s->t[b] = t;
        int32_t y = null;
        /* the data's labels were checked at the start (the family's fit); the null class is the
         * model's own label, and a label past it is not a null class to train in silence */
        if (classes && in->labels && in->labels[b] != IG_CLIP_NONE) {
            if (in->labels[b] > (uint32_t)null)
                return ig_err_set(err, IG_ERR_INVALID_ARG,
                                  "clip %d has label %u, and the model's %d classes take labels "
                                  "0 .. %d (%d: the null class)",
                                  b, in->labels[b], null, null - 1, null);
            y = (int32_t)in->labels[b];
        }
        if (in->drop_labels && pl > 0 &&
            ig_rng_uniform(sample_key(in, b, "ingot flow label"), 0) < pl)
            y = null;
        s->labels[b] = y;
        s->lens[b] = 0;
        if (Tk && (st = caption_len_of(m, in, b, Tk, pc, &s->lens[b], err)) != IG_OK) return st;
        if (!in->xt && !in->noise)
            ig_rng_fill_normal(m->ctx, sample_key(in, b, "ingot flow noise"), 0, per, 0.0f, 1.0f,
                               s->noise + (size_t)b * per);
        /* a latent clip's draw from its posterior, in x_t's place until x0 is made */
        if (!in->xt && in->latents && !in->latent_mean)
            ig_rng_fill_normal(m->ctx, sample_key(in, b, "ingot flow latent"), 0, per, 0.0f, 1.0f,
                               s->xt + (size_t)b * per);
    }
    /* x_t and the velocity it is trained toward */
    const float *noise = in->noise ? in->noise : s->noise;
    if (!in->xt)
        for (int b = 0; b < B; b++) {
            float t = s->t[b];
            for (size_t e = (size_t)b * per; e < (size_t)(b + 1) * per; e++) {
                float x0, eps = noise[e];
                if (in->latents) {
                    size_t at = e / (size_t)C, ch = e % (size_t)C;
                    const float *mom = in->latents + at * 2 * (size_t)C;
                    float z = mom[ch];
                    if (!in->latent_mean) z += expf(0.5f * mom[(size_t)C + ch]) * s->xt[e];
                    x0 = (float)(in->latent_scale * ((double)z - in->latent_shift));
                } else {
                    x0 = (float)in->frames[e] / 127.5f - 1.0f;
                }
                s->xt[e] = (1.0f - t) * x0 + t * eps;
                s->target[e] = eps - x0;
            }
        }
    ig_flow_batch fb = {.B = B,
                        .F = in->F,
                        .H = in->H,
                        .W = in->W,
                        .xt = in->xt ? in->xt : s->xt,
                        .t = s->t,
                        .target = in->xt ? NULL : s->target,
                        .labels = s->labels,
                        .caption_lens = s->lens,
                        .captions = in->captions,
                        .features = in->features,
                        .grad_scale = grad_scale};
    return fm->stage(m, slot, &fb, err);
}

/* A micro-batch from the feed: training draws everything; validation gives each clip the time
 * of its repeat on the grid, with noise keyed apart, and never drops a label. */
static ig_status flow_stage(ig_model *m, int slot, const ig_micro_batch *mb, float grad_scale,
                            uint64_t *counted, ig_err *err) {
    const ig_clip_batch *b = mb->clips;
    if (!b)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s models read clips: none given",
                          m->fam->arch);
    ig_clip_input in = {.frames = b->frames,
                        .latents = b->latents,
                        .latent_scale = mb->vae ? mb->vae->scaling_factor : 0,
                        .latent_shift = mb->vae ? mb->vae->shift_factor : 0,
                        .latent_mean = mb->valid,
                        .B = (int)b->n,
                        .F = (int)b->frames_per_clip,
                        .H = (int)b->height,
                        .W = (int)b->width,
                        .labels = b->labels,
                        .captions = mb->captions,
                        .caption_lens = mb->caption_lens,
                        .features = mb->features,
                        .drop_labels = !mb->valid,
                        .seed = mb->t->data.seed,
                        .key = mb->valid ? VALID_KEY | mb->unit : mb->unit,
                        .shift = mb->t->flow_shift};
    float *grid = NULL;
    if (mb->valid) {
        grid = ig_alloc(m->ctx, (b->n ? b->n : 1) * sizeof(float));
        if (!grid) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (uint32_t i = 0; i < b->n; i++)
            grid[i] = (float)(((double)mb->repeat + 0.5) / (double)mb->repeats);
        in.t = grid;
    }
    ig_status st = ig_flow_stage_clips(m, slot, &in, grad_scale, err);
    ig_free(m->ctx, grid);
    if (counted) *counted = b->n;
    return st;
}

static ig_status flow_loss(ig_model *m, int slot, double *loss, ig_err *err) {
    double sum = 0, count = 0;
    ig_status st = ig_flow_model_of(m)->squared_error(m, slot, &sum, &count, err);
    *loss = sum / count;
    return st;
}

/* Every shape of micro-batch the clips hold must be cut into tokens; the activations are planned
 * for the most clips and the most tokens of one (model.seq_len: the most tokens of a clip). */
static ig_status flow_fit(ig_fit *fit, const ig_train_config *t, const ig_data_facts *facts,
                          ig_err *err) {
    const ig_family *fam = ig_family_of(fit->shape.arch);
    const ig_flow_model *fm = fam->for_objective;
    ig_status st = fam->fit ? fam->fit(&fit->shape, facts, err) : IG_OK;
    if (st == IG_OK) st = ig_model_config_check(&fit->shape, err);
    if (st == IG_OK && facts->n_shapes > IG_FEED_MAX_SHAPES)
        st = ig_err_set(err, IG_ERR_CONFIG,
                        "data: the clips come in %zu shapes, more than %d: make them with buckets "
                        "(ingot preprocess video --buckets)",
                        facts->n_shapes, IG_FEED_MAX_SHAPES);
    int B = 0, T = 0;
    for (size_t i = 0; st == IG_OK && i < facts->n_shapes; i++) {
        const ig_clip_shape *sh = &facts->shapes[i];
        int tok = 0;
        st = fm->clip_tokens(&fit->shape, sh->F, sh->H, sh->W, &tok, err);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "data: clips of %d frames of %dx%d", sh->F, sh->H, sh->W);
            break;
        }
        if (sh->B > B) B = sh->B;
        if (tok > T) T = tok;
    }
    if (st != IG_OK) return st;
    (void)t;
    fit->shape.seq_len = T;
    fit->B = B;
    fit->T = T;
    fit->bo = (ig_batch_opts){0, 0, -1};
    return ig_model_config_check(&fit->shape, err);
}

static int flow_repeats(const ig_train_config *t) {
    return t->eval_timesteps > 0 ? t->eval_timesteps : 1;
}

/* a clip's tokens: the family's patches */
static ig_status flow_clip_tokens(const ig_model_config *c, int F, int H, int W, int *tokens,
                                  ig_err *err) {
    const ig_flow_model *fm = ig_family_of(c->arch)->for_objective;
    return fm->clip_tokens(c, F, H, W, tokens, err);
}

static int flow_caption_len(const ig_model_config *c) {
    const ig_family *fam = ig_family_of(c->arch);
    const ig_flow_model *fm = fam ? fam->for_objective : NULL;
    return fm ? fm->caption_len(c) : 0;
}

/* the flow's keys, bound into the training configuration */
#define FLOW_KEY(p, ty, F, def, lo, hi, h)                                                         \
    {                                                                                              \
        .path = (p), .type = (ty), .default_val = (def), .help = (h), .flag = "",                  \
        .offset = offsetof(ig_train_config, F), .size = sizeof(((ig_train_config *)0)->F),         \
        .is_signed = 1, .min = (lo), .max = (hi)                                                   \
    }

static const ig_cfg_key flow_keys[] = {
    FLOW_KEY("diffusion.shift", IG_CFG_FLOAT, flow_shift, "1", 1e-3, 1e3,
             "dit: the shift s of the flow's times, t' = s t / (1 + (s - 1) t) (1: none; > 1 puts "
             "more of them near the noise)"),
    FLOW_KEY("eval.timesteps", IG_CFG_INT, eval_timesteps, "5", 1, 1000,
             "dit: validation evaluates each clip at the times (k + 0.5) / n, k < n"),
    {.path = "data.caption_features",
     .type = IG_CFG_STRING,
     .default_val = "",
     .help = "dit: the caption features of the clips (ingot preprocess captions' output: a "
             "prefix or a list, made from the clips of data.path, clip for clip) that a "
             "model.cond caption DiT attends to through PixArt-alpha's caption embedder, instead "
             "of learning an embedding of the captions' tokens; \"\": none",
     .flag = "",
     .offset = offsetof(ig_train_config, caption_features),
     .size = sizeof(((ig_train_config *)0)->caption_features)},
    {.path = "model.clip",
     .type = IG_CFG_LIST,
     .default_val = "",
     .help = "dit: the clips' [frames, height, width] the run is planned for: ingot plan sizes "
             "it without --clip (ingot train reads the shapes from the shards, and says so when "
             "they hold clips of more tokens); [] none",
     .flag = "",
     .offset = offsetof(ig_train_config, clip_list),
     .size = sizeof(((ig_train_config *)0)->clip_list),
     .count_offset = offsetof(ig_train_config, n_clip_list)},
};

const ig_flow_model *ig_flow_model_of(const ig_model *m) {
    return m->fam->objective == &ig_objective_flow ? m->fam->for_objective : NULL;
}

const ig_objective ig_objective_flow = {.name = "rectified-flow",
                                        .input = "clips",
                                        .sampler = "video",
                                        .units = "clips",
                                        .shapes_vary = 1,
                                        .keys = flow_keys,
                                        .n_keys = sizeof flow_keys / sizeof flow_keys[0],
                                        .fit = flow_fit,
                                        .clip_tokens = flow_clip_tokens,
                                        .eval_repeats = flow_repeats,
                                        .caption_len = flow_caption_len,
                                        .stage = flow_stage,
                                        .loss = flow_loss,
                                        .evaluate = ig_flow_evaluate,
                                        .release = release};

/* ---- a whole model on one process (train.h) -------------------------------------------------- */

/* the flow model interface of c's family (NULL: not trained by rectified flow) */
static const ig_flow_model *flow_model_of_shape(const ig_model_config *c) {
    const ig_family *f = ig_family_of(c->arch);
    return f && f->objective == &ig_objective_flow ? f->for_objective : NULL;
}

int ig_model_caption_len(const ig_model_config *c) {
    const ig_flow_model *fm = flow_model_of_shape(c);
    return fm ? fm->caption_len(c) : 0;
}

int ig_model_caption_features(const ig_model_config *c, ig_feature_encoder *enc) {
    const ig_flow_model *fm = flow_model_of_shape(c);
    if (enc) memset(enc, 0, sizeof *enc);
    return fm && fm->caption_features ? fm->caption_features(c, enc) : 0;
}

int ig_model_clip_channels(const ig_model_config *c) {
    const ig_flow_model *fm = flow_model_of_shape(c);
    return fm ? fm->channels(c) : 0;
}

int ig_model_latents(const ig_model_config *c, ig_latent_vae *vae) {
    const ig_flow_model *fm = flow_model_of_shape(c);
    if (vae) memset(vae, 0, sizeof *vae);
    return fm ? fm->latents(c, vae) : 0;
}

static ig_status need_whole(const ig_model *m, ig_err *err) {
    if (m->part.tp == 1 && m->part.first && m->part.last) return IG_OK;
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "this model is one rank's part (tp %d, layers %d..%d): run it through the "
                      "trainer's schedule",
                      m->part.tp, m->part.l0, m->part.l1 - 1);
}

static ig_status clips_stage(ig_model *m, const ig_clip_input *in, float grad_scale, ig_err *err) {
    ig_status st = need_whole(m, err);
    if (st == IG_OK && !ig_flow_model_of(m))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "%s models read %s, not clips", m->fam->arch,
                        m->fam->objective->input);
    if (st == IG_OK && grad_scale > 0 && m->part.inference)
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "a model opened for inference has no gradients");
    if (st == IG_OK) st = ig_flow_stage_clips(m, 0, in, grad_scale, err);
    if (st == IG_OK) st = ig_stage_forward(m, 0, grad_scale > 0, err);
    return st;
}

ig_status ig_model_clips_loss(ig_model *m, const ig_clip_input *in, float grad_scale, double *loss,
                              ig_err *err) {
    if (!(grad_scale >= 0))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "grad_scale must be >= 0, got %g",
                          (double)grad_scale);
    if (in->xt) return ig_err_set(err, IG_ERR_INVALID_ARG, "a loss needs clips, not x_t");
    ig_status st = clips_stage(m, in, grad_scale, err);
    if (st == IG_OK && grad_scale > 0) st = ig_stage_backward(m, 0, err);
    if (st == IG_OK) st = ig_backend_sync(m->be, err);
    return st == IG_OK ? flow_loss(m, 0, loss, err) : st;
}

ig_status ig_model_clips_predict(ig_model *m, const ig_clip_input *in, float *v, ig_err *err) {
    if (!in->xt || !in->t)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "a prediction needs x_t and its times");
    ig_status st = clips_stage(m, in, 0.0f, err);
    if (st == IG_OK) st = ig_backend_sync(m->be, err);
    return st == IG_OK ? ig_flow_model_of(m)->prediction(m, 0, v, err) : st;
}

ig_status ig_flow_micro_loss(ig_model *m, const ig_micro_batch *mb, double *loss, ig_err *err) {
    ig_status st = need_whole(m, err);
    if (st == IG_OK) st = flow_stage(m, 0, mb, 0.0f, NULL, err);
    if (st == IG_OK) st = ig_stage_forward(m, 0, 0, err);
    if (st == IG_OK) st = ig_backend_sync(m->be, err);
    return st == IG_OK ? flow_loss(m, 0, loss, err) : st;
}
