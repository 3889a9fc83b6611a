/* flow_use.c - a rectified-flow model used (train.h): its loss on clip shards (ingot eval), at a
 * grid of times with keyed noise through the trainer's validation feed, or with the noise and
 * times of a file, and its sampler (ingot sample): videos by Euler steps of the flow from noise to
 * clips, with classifier-free guidance.
 */
#include "flow.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the loss on clips ----------------------------------------------------------------------- */

static ig_status need_clips(const ig_model *m, ig_err *err) {
    if (ig_flow_model_of(m)) return IG_OK;
    return ig_err_set(err, IG_ERR_INVALID_ARG, "%s models read %s, not clips", m->fam->arch,
                      m->fam->objective->input);
}

/* The data against the model as a run's start checks it (its family's fit on a copy of its
 * shape: the labels a class-conditioned model takes, the captions' vocabulary), silently. */
static ig_status check_data(const ig_model *m, ig_data_facts *facts, ig_err *err) {
    ig_model_config c = m->cfg;
    facts->ctx = NULL;
    return m->fam->fit ? m->fam->fit(&c, facts, err) : IG_OK;
}

/* The grid: the trainer's validation feed over the shards. */
static ig_status eval_grid(ig_model *m, ig_ctx *ctx, const ig_clip_eval_opts *o,
                           ig_clip_eval_result *res, ig_err *err) {
    ig_train_config t;
    memset(&t, 0, sizeof t);
    t.model = m->cfg; /* its conditioning: the captions to read */
    t.data.path = o->prefixes;
    t.data.n_path = o->n;
    t.data.seed = (uint32_t)o->seed;
    t.caption_features = o->caption_features;
    t.micro_batch = o->micro_batch;
    t.eval_timesteps = o->timesteps;
    t.flow_shift = 1;
    ig_feed *f = NULL;
    ig_feed_opts fo = {.input = ig_objective_flow.input,
                       .valid = 1,
                       .repeats = o->timesteps,
                       .caption_len = ig_flow_model_of(m)->caption_len(&m->cfg)};
    ig_data_facts facts;
    ig_status st = ig_feed_open(&f, ctx, &t, &fo, err);
    if (st == IG_OK) st = ig_feed_facts(f, &facts, err);
    if (st == IG_OK) st = check_data(m, &facts, err);
    if (st == IG_OK) st = ig_feed_start(f, NULL, 1, 0, 1, err);
    int K = o->timesteps;
    double sum = 0, *at = res->loss_at;
    for (int64_t i = 0; st == IG_OK && i < (int64_t)o->batches * K; i++) {
        ig_micro_batch mb;
        double l = 0;
        if ((st = ig_feed_next(f, &mb, err)) != IG_OK) break;
        if ((st = ig_flow_micro_loss(m, &mb, &l, err)) != IG_OK) break;
        at[i % K] += l / o->batches;
        sum += l;
        if (i % K == 0) res->clips += (uint64_t)mb.clips->n;
    }
    ig_feed_close(f);
    res->loss = sum / ((double)o->batches * K);
    return st;
}

/* A noise file's values are finite: a NaN or infinity would give a loss of nan (exit 0), so the
 * first one is named, tensor and element. */
static ig_status finite_noise(const char *file, const float *noise, uint64_t N, uint64_t F,
                              uint64_t H, uint64_t W, uint64_t C, const float *t, ig_err *err) {
    for (uint64_t n = 0; n < N; n++)
        if (!isfinite(t[n]))
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: tensor \"t\" element [%llu] is %g: times are finite, in [0, 1]",
                              file, (unsigned long long)n, (double)t[n]);
    uint64_t total = N * F * H * W * C;
    for (uint64_t i = 0; i < total; i++) {
        if (isfinite(noise[i])) continue;
        uint64_t c = i % C, x = i / C % W, y = i / C / W % H, f = i / C / W / H % F,
                 n = i / C / W / H / F;
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: tensor \"noise\" element [%llu, %llu, %llu, %llu, %llu] is %g: "
                          "noise must be finite",
                          file, (unsigned long long)n, (unsigned long long)f, (unsigned long long)y,
                          (unsigned long long)x, (unsigned long long)c, (double)noise[i]);
    }
    return IG_OK;
}

/* The noise file's clips 0 .. N - 1, micro_batch at a time (of latents, each the mean of its
 * posterior: the noise file fixes every draw). */
static ig_status eval_noise(ig_model *m, ig_ctx *ctx, const ig_clip_eval_opts *o,
                            ig_clip_eval_result *res, ig_err *err) {
    ig_st_file *nf = NULL;
    ig_clip_dataset *ds = NULL;
    uint64_t C = (uint64_t)ig_flow_model_of(m)->channels(&m->cfg);
    ig_status st = ig_st_file_open(&nf, ctx, o->noise_file, err);
    const ig_st_tensor *noise = st == IG_OK ? ig_st_file_find(nf, "noise") : NULL;
    const ig_st_tensor *times = st == IG_OK ? ig_st_file_find(nf, "t") : NULL;
    if (st == IG_OK && (!noise || !times || ig_st_tensor_ndim(noise) != 5 ||
                        ig_st_tensor_shape(noise)[4] != C || ig_st_tensor_ndim(times) != 1 ||
                        ig_st_tensor_shape(times)[0] != ig_st_tensor_shape(noise)[0]))
        st = ig_err_set(
            err, IG_ERR_FORMAT, "%s: needs tensors noise [N, F, H, W, %llu] and t [N] (F32)%s",
            o->noise_file, (unsigned long long)C,
            C == 3 ? "" : " (the model's latent channels; F, H, W in latent positions)");
    uint64_t N = 0, F = 0, H = 0, W = 0;
    if (st == IG_OK) {
        const uint64_t *sh = ig_st_tensor_shape(noise);
        N = sh[0], F = sh[1], H = sh[2], W = sh[3];
        if (N == 0)
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: tensor \"noise\" holds no clips ([0, %llu, %llu, %llu, %llu]): "
                            "there is no loss to compute",
                            o->noise_file, (unsigned long long)F, (unsigned long long)H,
                            (unsigned long long)W, (unsigned long long)C);
    }
    if (st == IG_OK) {
        st = ig_clip_dataset_open_any(&ds, ctx, o->prefixes, o->n, err);
        ig_data_facts facts;
        memset(&facts, 0, sizeof facts);
        if (st == IG_OK) ig_clip_facts(ds, &facts);
        if (st == IG_OK) st = check_data(m, &facts, err);
    }
    if (st == IG_OK && N > ig_clip_dataset_clips(ds))
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "%s holds noise for %llu clips; the shards hold %llu", o->noise_file,
                        (unsigned long long)N, (unsigned long long)ig_clip_dataset_clips(ds));
    for (uint64_t g = 0; st == IG_OK && g < N; g++) {
        ig_clip_info c = ig_clip_dataset_info(ds, g, NULL, NULL);
        if (c.frames != F || c.height != H || c.width != W)
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "clip %llu is %u frames of %ux%u, the noise's %llu of %llux%llu: a "
                            "noise file covers clips of one shape",
                            (unsigned long long)g, c.frames, c.height, c.width,
                            (unsigned long long)F, (unsigned long long)H, (unsigned long long)W);
    }
    const ig_latent_vae *vae = st == IG_OK ? ig_clip_dataset_vae(ds) : NULL;
    uint64_t per = F * H * W * C, B = (uint64_t)(o->micro_batch < m->B ? o->micro_batch : m->B);
    /* what a clip reads: its RGB24 bytes, or its moments (2C fp32 a position) */
    uint64_t clip_bytes = vae ? F * H * W * 2 * C * sizeof(float) : per;
    float *all_noise = NULL, *all_t = NULL;
    uint8_t *frames = NULL;
    uint32_t *labels = NULL;
    size_t Tk = (size_t)ig_flow_model_of(m)->caption_len(&m->cfg);
    int32_t *caps = ig_alloc(ctx, (B * Tk > 0 ? B * Tk : 1) * sizeof(int32_t));
    int32_t *lens = ig_alloc(ctx, B * sizeof(int32_t));
    if (!caps || !lens) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK && (!(all_noise = ig_alloc(ctx, (N * per > 0 ? N * per : 1) * sizeof(float))) ||
                        !(all_t = ig_alloc(ctx, (N ? N : 1) * sizeof(float))) ||
                        !(frames = ig_alloc(ctx, B * clip_bytes)) ||
                        !(labels = ig_alloc(ctx, B * sizeof(uint32_t)))))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory for %s", o->noise_file);
    if (st == IG_OK) st = ig_st_tensor_to_f32(noise, all_noise, N * per, err);
    if (st == IG_OK) st = ig_st_tensor_to_f32(times, all_t, N, err);
    if (st == IG_OK) st = finite_noise(o->noise_file, all_noise, N, F, H, W, C, all_t, err);
    double sum = 0;
    for (uint64_t g0 = 0; st == IG_OK && g0 < N; g0 += B) {
        uint64_t n = N - g0 < B ? N - g0 : B;
        for (uint64_t k = 0; st == IG_OK && k < n; k++) {
            labels[k] = ig_clip_dataset_info(ds, g0 + k, NULL, NULL).label;
            st = ig_clip_dataset_read(ds, g0 + k, frames + k * clip_bytes, clip_bytes, err);
            size_t len = 0;
            if (st == IG_OK && Tk)
                st = ig_clip_dataset_caption(ds, g0 + k, caps + k * Tk, Tk, &len, err);
            lens[k] = (int32_t)(len < Tk ? len : Tk);
        }
        ig_clip_input in = {.frames = vae ? NULL : frames,
                            .latents = vae ? (const float *)(void *)frames : NULL,
                            .latent_scale = vae ? vae->scaling_factor : 0,
                            .latent_shift = vae ? vae->shift_factor : 0,
                            .latent_mean = 1,
                            .B = (int)n,
                            .F = (int)F,
                            .H = (int)H,
                            .W = (int)W,
                            .labels = labels,
                            .captions = Tk ? caps : NULL,
                            .caption_lens = lens,
                            .noise = all_noise + g0 * per,
                            .t = all_t + g0,
                            .shift = 1};
        double l = 0;
        if (st == IG_OK) st = ig_model_clips_loss(m, &in, 0.0f, &l, err);
        sum += l * (double)n;
    }
    res->clips = N;
    res->loss = N ? sum / (double)N : NAN;
    ig_free(ctx, all_noise);
    ig_free(ctx, all_t);
    ig_free(ctx, frames);
    ig_free(ctx, labels);
    ig_free(ctx, caps);
    ig_free(ctx, lens);
    ig_clip_dataset_close(ds);
    ig_st_file_free(nf);
    return st;
}

ig_status ig_model_eval_clips(ig_model *m, ig_ctx *ctx, const ig_clip_eval_opts *o,
                              ig_clip_eval_result *res, ig_err *err) {
    memset(res, 0, sizeof *res);
    res->loss = NAN;
    ig_status st = need_clips(m, err);
    if (st != IG_OK) return st;
    if (o->n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "no clip shards to evaluate on");
    if (o->noise_file && *o->noise_file && ig_model_caption_features(&m->cfg, NULL))
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: a model of caption features is evaluated on the grid of times, "
                          "not with a noise file",
                          o->noise_file);
    if (o->noise_file && *o->noise_file) return eval_noise(m, ctx, o, res, err);
    if (o->timesteps < 1 || o->timesteps > IG_EVAL_MAX_TIMES || o->batches < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%d times, %d micro-batches: need 1 .. %d, >= 1",
                          o->timesteps, o->batches, IG_EVAL_MAX_TIMES);
    res->n_times = o->timesteps;
    return eval_grid(m, ctx, o, res, err);
}

/* ingot eval: room for the shards' largest micro-batch and clip, then the grid or the noise
 * file. */
ig_status ig_flow_evaluate(ig_ctx *ctx, ig_backend *be, const char *path, const ig_eval_opts *o,
                           ig_eval_result *res, ig_err *err) {
    ig_model_config shape;
    ig_model *m = NULL;
    ig_status st = ig_model_read_shape(ctx, path, &shape, err);
    int B = o->micro_batch, T = 1;
    ig_clip_dataset *ds = NULL;
    if (st == IG_OK) st = ig_clip_dataset_open_any(&ds, ctx, o->data->path, o->data->n_path, err);
    size_t nb = 0;
    const ig_clip_bucket *bk = ds ? ig_clip_dataset_buckets(ds, &nb) : NULL;
    for (uint64_t g = 0; st == IG_OK && g < ig_clip_dataset_clips(ds); g++) {
        ig_clip_info c = ig_clip_dataset_info(ds, g, NULL, NULL);
        int tok = 0;
        if (c.bucket != IG_CLIP_NONE && c.bucket < nb && (int)bk[c.bucket].batch_size > B)
            B = (int)bk[c.bucket].batch_size;
        st = ig_model_clip_tokens(&shape, (int)c.frames, (int)c.height, (int)c.width, &tok, err);
        if (st != IG_OK) ig_err_prefix(err, st, "clip %llu", (unsigned long long)g);
        if (tok > T) T = tok;
    }
    ig_clip_dataset_close(ds);
    if (st == IG_OK) st = ig_model_open_weights(&m, ctx, be, path, B, T, o->weights, NULL, err);
    if (st == IG_OK && (st = ig_model_check_finite(m, err)) != IG_OK)
        ig_err_prefix(err, st, "%s: its weights are not finite", path);
    ig_clip_eval_opts co = {.prefixes = o->data->path,
                            .n = o->data->n_path,
                            .micro_batch = o->micro_batch,
                            .batches = o->batches,
                            .timesteps = o->timesteps,
                            .seed = o->data->seed,
                            .noise_file = o->noise_file,
                            .caption_features = o->caption_features};
    ig_clip_eval_result *r = st == IG_OK ? ig_calloc(ctx, 1, sizeof *r) : NULL;
    if (st == IG_OK && !r) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) st = ig_model_eval_clips(m, ctx, &co, r, err);
    if (st == IG_OK) {
        if (r->n_times)
            snprintf(res->what, sizeof res->what, "%llu clips, each at %d times",
                     (unsigned long long)r->clips, r->n_times);
        else
            snprintf(res->what, sizeof res->what, "%llu clips with the noise and times of %s",
                     (unsigned long long)r->clips, o->noise_file);
        for (int k = 0; k < r->n_times && res->n_lines < IG_EVAL_MAX_LINES; k++)
            snprintf(res->lines[res->n_lines++], IG_EVAL_LINE, "t %.4f loss %.6f",
                     (k + 0.5) / r->n_times, r->loss_at[k]);
        res->loss = r->loss;
    }
    ig_free(ctx, r);
    ig_model_free(m);
    return st;
}

/* ---- sampling -------------------------------------------------------------------------------- */

ig_video_sample_opts ig_video_sample_opts_default(void) {
    return (ig_video_sample_opts){.num = 1,
                                  .frames = 8,
                                  .height = 32,
                                  .width = 32,
                                  .steps = 50,
                                  .cfg = 4.0f,
                                  .label = -1,
                                  .seed = 1234,
                                  .shift = 1.0};
}

/* time i of the grid from 1 to 0, shifted as training shifts its times */
static double grid_time(int i, int steps, double s) {
    double u = 1.0 - (double)i / (double)steps;
    return s * u / (1.0 + (s - 1.0) * u);
}

/* The Euler steps from noise to clips: into rgb (RGB24) or values (x0 as the model makes it). */
static ig_status sample_clips(ig_model *m, ig_ctx *ctx, const ig_video_sample_opts *o, uint8_t *rgb,
                              float *values, ig_err *err) {
    ig_status st = need_clips(m, err);
    if (st != IG_OK) return st;
    const ig_model_config *c = &m->cfg;
    const ig_flow_model *fm = ig_flow_model_of(m);
    ig_latent_vae vae;
    if (rgb && fm->latents(c, &vae))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "the model makes the latents of a VAE (%s): decode them through it "
                          "(ingot sample --vae DIR)",
                          vae.describe[0] ? vae.describe : "unnamed");
    int tok = 0, conds = ig_model_conditions(c), classes = fm->null_class(c);
    if (o->num < 1 || o->steps < 1 || !(o->cfg >= 0) || !(o->shift > 0))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%d videos, %d steps, guidance %g, shift %g: need >= 1, >= 1, >= 0, > 0",
                          o->num, o->steps, (double)o->cfg, o->shift);
    if ((st = ig_model_clip_tokens(c, o->frames, o->height, o->width, &tok, err)) != IG_OK)
        return st;
    /* a model of caption features takes the prompt's features, a model of caption tokens its ids */
    int D = ig_model_caption_features(c, NULL);
    const void *prompt = D ? (const void *)o->prompt_features : (const void *)o->prompt;
    if (D && o->prompt && o->prompt_len > 0 && !o->prompt_features)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a prompt's tokens: the model attends to caption features (%d wide): "
                          "give the prompt's features from the encoder it was trained with",
                          D);
    if (!D && o->prompt_features && o->prompt_len > 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "a prompt's features: the model %s",
                          (conds & IG_COND_TEXT) ? "attends to caption tokens"
                                                 : "is not conditioned on captions");
    int cond = ((conds & IG_COND_LABEL) && o->label >= 0) ||
               ((conds & IG_COND_TEXT) && prompt && o->prompt_len > 0);
    if (o->label >= 0 && !(conds & IG_COND_LABEL))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "a label: the model is not class-conditional");
    if (prompt && o->prompt_len > 0 && !(conds & IG_COND_TEXT))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a prompt: the model is not conditioned on captions");
    if (o->label >= classes && cond)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "label %lld: the model has classes 0 .. %d",
                          (long long)o->label, classes - 1);
    int guided = cond && o->cfg != 1.0f, per_call = guided ? 2 : 1;
    if (m->B < per_call || tok > m->T)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "the model was opened for %d x %d: sampling needs %d x %d", m->B, m->T,
                          per_call, tok);
    int chunk = m->B / per_call; /* videos per call */
    size_t per = (size_t)o->frames * (size_t)o->height * (size_t)o->width * (size_t)fm->channels(c);
    float *x = ig_alloc(ctx, (size_t)chunk * per * sizeof(float));
    float *xin = ig_alloc(ctx, (size_t)per_call * chunk * per * sizeof(float));
    float *v = ig_alloc(ctx, (size_t)per_call * chunk * per * sizeof(float));
    float *t = ig_alloc(ctx, (size_t)per_call * chunk * sizeof(float));
    uint32_t *labels = ig_alloc(ctx, (size_t)per_call * chunk * sizeof(uint32_t));
    size_t Tk = fm->caption_len(c) ? (size_t)fm->caption_len(c) : 1;
    int32_t *caps = ig_calloc(ctx, (size_t)per_call * chunk * Tk, sizeof(int32_t));
    int32_t *lens = ig_calloc(ctx, (size_t)per_call * chunk, sizeof(int32_t));
    float *feats =
        D ? ig_calloc(ctx, (size_t)per_call * chunk * Tk * (size_t)D, sizeof(float)) : NULL;
    if (!x || !xin || !v || !t || !labels || !caps || !lens || (D && !feats))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    /* the prompt (cut to the model's caption length) for the guided videos; the null caption
     * (length 0) for the others */
    int plen =
        cond && (conds & IG_COND_TEXT) ? (o->prompt_len < (int)Tk ? o->prompt_len : (int)Tk) : 0;
    for (int b = 0; st == IG_OK && plen && b < chunk; b++) {
        if (D)
            memcpy(feats + (size_t)b * Tk * (size_t)D, o->prompt_features,
                   (size_t)plen * (size_t)D * sizeof(float));
        else
            for (int j = 0; j < plen; j++) caps[(size_t)b * Tk + (size_t)j] = o->prompt[j];
    }
    for (int v0 = 0; st == IG_OK && v0 < o->num; v0 += chunk) {
        int n = o->num - v0 < chunk ? o->num - v0 : chunk, B = per_call * n;
        for (int b = 0; b < n; b++) {
            uint64_t k[2] = {o->seed, (uint64_t)(v0 + b)};
            ig_rng_fill_normal(ctx, ig_rng_key_make(ig_xxh3_64(k, sizeof k), "ingot sample video"),
                               0, per, 0.0f, 1.0f, x + (size_t)b * per);
        }
        for (int b = 0; b < B; b++) {
            labels[b] = b < n && cond ? (uint32_t)o->label : IG_CLIP_NONE;
            lens[b] = b < n ? plen : 0;
        }
        for (int i = 0; st == IG_OK && i < o->steps; i++) {
            double t0 = grid_time(i, o->steps, o->shift), t1 = grid_time(i + 1, o->steps, o->shift);
            memcpy(xin, x, (size_t)n * per * sizeof(float));
            if (guided) memcpy(xin + (size_t)n * per, x, (size_t)n * per * sizeof(float));
            for (int b = 0; b < B; b++) t[b] = (float)t0;
            ig_clip_input in = {.B = B,
                                .F = o->frames,
                                .H = o->height,
                                .W = o->width,
                                .labels = labels,
                                .captions = D ? NULL : caps,
                                .features = feats,
                                .caption_lens = lens,
                                .t = t,
                                .xt = xin,
                                .shift = 1};
            if ((st = ig_model_clips_predict(m, &in, v, err)) != IG_OK) break;
            float dt = (float)(t0 - t1), g = o->cfg;
            for (size_t e = 0; e < (size_t)n * per; e++) {
                float ve = v[e];
                if (guided) {
                    float vn = v[(size_t)n * per + e];
                    ve = vn + g * (ve - vn);
                }
                x[e] -= dt * ve;
            }
            if (o->progress) o->progress(o->user, i + 1, o->steps);
        }
        for (size_t e = 0; st == IG_OK && rgb && e < (size_t)n * per; e++) {
            float p = (x[e] + 1.0f) * 127.5f;
            rgb[(size_t)v0 * per + e] = (uint8_t)(p <= 0 ? 0 : p >= 255 ? 255 : lrintf(p));
        }
        if (st == IG_OK && values)
            memcpy(values + (size_t)v0 * per, x, (size_t)n * per * sizeof(float));
    }
    ig_free(ctx, x);
    ig_free(ctx, xin);
    ig_free(ctx, v);
    ig_free(ctx, t);
    ig_free(ctx, labels);
    ig_free(ctx, caps);
    ig_free(ctx, feats);
    ig_free(ctx, lens);
    return st;
}

ig_status ig_model_sample_video(ig_model *m, ig_ctx *ctx, const ig_video_sample_opts *o,
                                uint8_t *out, ig_err *err) {
    return sample_clips(m, ctx, o, out, NULL, err);
}

ig_status ig_model_sample_values(ig_model *m, ig_ctx *ctx, const ig_video_sample_opts *o,
                                 float *out, ig_err *err) {
    return sample_clips(m, ctx, o, NULL, out, err);
}
