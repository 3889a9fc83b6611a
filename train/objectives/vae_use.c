/* vae_use.c - a VAE used (train.h): ingot eval on clip shards, either eval.batches micro-batches
 * from the first clip with the posterior's noise keyed by the seed (as the trainer's validation
 * draws it with data.seed), or clips 0 .. N - 1 with the noise of a file (to compare with a
 * PyTorch implementation of the same weights). It reports the loss's two terms, the
 * reconstruction's L1 distance and the KL term, and the reconstructions' PSNR against the clips.
 *
 * PSNR = 10 log10(255^2 / MSE), the MSE over every value of the clips evaluated on the 8-bit
 * scale, each reconstruction mapped back as a video would be written ((x' + 1) 127.5 clamped to
 * [0, 255], not rounded). The loss line is reconstruction + w x kl with w vae.kl_weight's default
 * (1e-6): the trainer's validation loss of a run that kept it; both terms are printed.
 */
#include "vae_use.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_KL_WEIGHT 1e-6 /* vae.kl_weight's default */

/* what an evaluation adds up */
typedef struct eval_sums {
    double rec, kl, loss; /* the micro-batches' terms, each x its weight */
    double weight;        /* micro-batches, or clips with a noise file */
    double se, values;    /* squared errors on the 8-bit scale, and their count */
    uint64_t clips;
} eval_sums;

/* the reconstruction of frames (n values) into the squared errors */
static ig_status add_psnr(ig_model *m, const uint8_t *frames, size_t n, float *buf, eval_sums *s,
                          ig_err *err) {
    ig_status st = ig_model_vae_reconstruction(m, buf, err);
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        double p = ((double)buf[i] + 1.0) * 127.5;
        p = p < 0 ? 0 : p > 255 ? 255 : p;
        double d = p - (double)frames[i];
        s->se += d * d;
    }
    s->values += (double)n;
    return st;
}

static void add_terms(eval_sums *s, const ig_vae_terms *t, double w) {
    s->rec += t->reconstruction * w;
    s->kl += t->kl * w;
    s->loss += t->loss * w;
    s->weight += w;
}

/* eval.batches micro-batches through the trainer's validation feed */
static ig_status eval_feed(ig_model *m, ig_ctx *ctx, const ig_eval_opts *o, float *buf,
                           eval_sums *s, ig_err *err) {
    ig_train_config t;
    memset(&t, 0, sizeof t);
    t.model = m->cfg;
    t.data = *o->data;
    t.micro_batch = o->micro_batch;
    t.vae_kl_weight = EVAL_KL_WEIGHT;
    ig_feed *f = NULL;
    ig_feed_opts fo = {.input = ig_objective_vae.input, .valid = 1, .repeats = 1};
    ig_status st = ig_feed_open(&f, ctx, &t, &fo, err);
    if (st == IG_OK) st = ig_feed_start(f, NULL, 1, 0, 1, err);
    for (int i = 0; st == IG_OK && i < o->batches; i++) {
        ig_micro_batch mb;
        ig_vae_terms vt;
        if ((st = ig_feed_next(f, &mb, err)) != IG_OK) break;
        st = ig_objective_vae.stage(m, 0, &mb, 0.0f, NULL, err);
        if (st == IG_OK) st = ig_stage_forward(m, 0, 0, err);
        if (st == IG_OK) st = ig_backend_sync(m->be, err);
        if (st == IG_OK) st = ig_vae_terms_of(m, 0, &vt, err);
        const ig_clip_batch *b = mb.clips;
        size_t n = (size_t)b->n * b->frames_per_clip * b->height * b->width * 3;
        if (st == IG_OK) st = add_psnr(m, b->frames, n, buf, s, err);
        if (st == IG_OK) add_terms(s, &vt, 1.0);
        s->clips += b->n;
    }
    ig_feed_close(f);
    return st;
}

/* clips 0 .. N - 1 with the noise of o->noise_file, micro_batch at a time */
static ig_status eval_noise(ig_model *m, ig_ctx *ctx, const ig_eval_opts *o, float *buf,
                            eval_sums *s, ig_err *err) {
    ig_st_file *nf = NULL;
    ig_clip_dataset *ds = NULL;
    const char *file = o->noise_file;
    ig_status st = ig_st_file_open(&nf, ctx, file, err);
    const ig_st_tensor *noise = st == IG_OK ? ig_st_file_find(nf, "noise") : NULL;
    if (st == IG_OK && (!noise || ig_st_tensor_ndim(noise) != 5))
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: needs a tensor noise [N, F, h, w, C] (F32): the posterior's eps of "
                        "clips 0 .. N - 1",
                        file);
    const uint64_t *sh = st == IG_OK ? ig_st_tensor_shape(noise) : NULL;
    uint64_t N = sh ? sh[0] : 0;
    if (st == IG_OK && N == 0)
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: tensor \"noise\" holds no clips", file);
    if (st == IG_OK) st = ig_clip_dataset_open(&ds, ctx, o->data->path, o->data->n_path, err);
    if (st == IG_OK && N > ig_clip_dataset_clips(ds))
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "%s holds noise for %llu clips; the shards hold %llu", file,
                        (unsigned long long)N, (unsigned long long)ig_clip_dataset_clips(ds));
    ig_clip_info c0 = {0};
    int h = 0, w = 0, C = 0;
    if (st == IG_OK) {
        c0 = ig_clip_dataset_info(ds, 0, NULL, NULL);
        st = ig_model_vae_latent_shape(&m->cfg, (int)c0.height, (int)c0.width, &h, &w, &C, err);
    }
    if (st == IG_OK && (sh[1] != c0.frames || sh[2] != (uint64_t)h || sh[3] != (uint64_t)w ||
                        sh[4] != (uint64_t)C))
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s: tensor \"noise\" is [%llu, %llu, %llu, %llu, %llu]; clip 0's latents "
                        "are [%u, %d, %d, %d] (%u frames of %ux%u)",
                        file, (unsigned long long)sh[0], (unsigned long long)sh[1],
                        (unsigned long long)sh[2], (unsigned long long)sh[3],
                        (unsigned long long)sh[4], c0.frames, h, w, C, c0.frames, c0.height,
                        c0.width);
    for (uint64_t g = 1; st == IG_OK && g < N; g++) {
        ig_clip_info c = ig_clip_dataset_info(ds, g, NULL, NULL);
        if (c.frames != c0.frames || c.height != c0.height || c.width != c0.width)
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "clip %llu is %u frames of %ux%u, clip 0 %u of %ux%u: a noise file "
                            "covers clips of one shape",
                            (unsigned long long)g, c.frames, c.height, c.width, c0.frames,
                            c0.height, c0.width);
    }
    uint64_t per = (uint64_t)c0.frames * c0.height * c0.width * 3, lat = sh ? sh[1] * h * w * C : 0;
    uint64_t B = (uint64_t)(o->micro_batch < m->B ? o->micro_batch : m->B);
    float *eps = NULL;
    uint8_t *frames = NULL;
    if (st == IG_OK &&
        (!(eps = ig_alloc(ctx, N * lat * sizeof(float))) || !(frames = ig_alloc(ctx, B * per))))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory for %s", file);
    if (st == IG_OK) st = ig_st_tensor_to_f32(noise, eps, N * lat, err);
    for (uint64_t i = 0; st == IG_OK && i < N * lat; i++)
        if (!isfinite(eps[i]))
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s: tensor \"noise\" element %llu is %g: noise must be finite", file,
                            (unsigned long long)i, (double)eps[i]);
    for (uint64_t g0 = 0; st == IG_OK && g0 < N; g0 += B) {
        uint64_t n = N - g0 < B ? N - g0 : B;
        for (uint64_t k = 0; st == IG_OK && k < n; k++)
            st = ig_clip_dataset_read(ds, g0 + k, frames + k * per, per, err);
        ig_vae_input in = {.frames = frames,
                           .B = (int)n,
                           .F = (int)c0.frames,
                           .H = (int)c0.height,
                           .W = (int)c0.width,
                           .noise = eps + g0 * lat,
                           .kl_weight = EVAL_KL_WEIGHT};
        ig_vae_terms vt;
        if (st == IG_OK) st = ig_model_vae_loss(m, &in, 0.0f, &vt, err);
        if (st == IG_OK) st = add_psnr(m, frames, (size_t)(n * per), buf, s, err);
        if (st == IG_OK) add_terms(s, &vt, (double)n);
        s->clips += n;
    }
    ig_free(ctx, eps);
    ig_free(ctx, frames);
    ig_clip_dataset_close(ds);
    ig_st_file_free(nf);
    return st;
}

/* ingot eval: room for the shards' largest micro-batch and clip, then the feed or the noise
 * file */
ig_status ig_vae_evaluate(ig_ctx *ctx, ig_backend *be, const char *path, const ig_eval_opts *o,
                          ig_eval_result *res, ig_err *err) {
    ig_model_config shape;
    ig_model *m = NULL;
    ig_status st = ig_model_read_shape(ctx, path, &shape, err);
    int B = o->micro_batch;
    int64_t T = 1;
    ig_clip_dataset *ds = NULL;
    if (st == IG_OK) st = ig_clip_dataset_open(&ds, ctx, o->data->path, o->data->n_path, err);
    size_t nb = 0;
    const ig_clip_bucket *bk = ds ? ig_clip_dataset_buckets(ds, &nb) : NULL;
    for (uint64_t g = 0; st == IG_OK && g < ig_clip_dataset_clips(ds); g++) {
        ig_clip_info c = ig_clip_dataset_info(ds, g, NULL, NULL);
        int h = 0, w = 0, C = 0;
        if (c.bucket != IG_CLIP_NONE && c.bucket < nb && (int)bk[c.bucket].batch_size > B)
            B = (int)bk[c.bucket].batch_size;
        st = ig_model_vae_latent_shape(&shape, (int)c.height, (int)c.width, &h, &w, &C, err);
        if (st != IG_OK) ig_err_prefix(err, st, "clip %llu", (unsigned long long)g);
        if ((int64_t)c.frames * c.height * c.width > T) T = (int64_t)c.frames * c.height * c.width;
    }
    ig_clip_dataset_close(ds);
    if (st == IG_OK && T > (1 << 30))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "clips of %lld pixels: too large", (long long)T);
    if (st == IG_OK)
        st = ig_model_open_weights(&m, ctx, be, path, B, (int)T, o->weights, NULL, err);
    if (st == IG_OK && (st = ig_model_check_finite(m, err)) != IG_OK)
        ig_err_prefix(err, st, "%s: its weights are not finite", path);
    float *buf = st == IG_OK ? ig_alloc(ctx, (size_t)B * (size_t)T * 3 * sizeof(float)) : NULL;
    if (st == IG_OK && !buf) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    eval_sums s = {0};
    int noise = o->noise_file && *o->noise_file;
    if (st == IG_OK)
        st = noise ? eval_noise(m, ctx, o, buf, &s, err) : eval_feed(m, ctx, o, buf, &s, err);
    if (st == IG_OK) {
        char from[160];
        if (noise)
            snprintf(from, sizeof from, "with the noise of %s", o->noise_file);
        else
            snprintf(from, sizeof from, "in %d micro-batches, the noise keyed by seed %llu",
                     o->batches, (unsigned long long)o->data->seed);
        snprintf(res->what, sizeof res->what,
                 "%llu clips %s; a VAE of %llu parameters; loss = reconstruction + %g x kl",
                 (unsigned long long)s.clips, from,
                 (unsigned long long)ig_model_num_params(ig_model_shape(m)), EVAL_KL_WEIGHT);
        double mse = s.se / s.values;
        snprintf(res->lines[0], IG_EVAL_LINE, "reconstruction %.9g", s.rec / s.weight);
        snprintf(res->lines[1], IG_EVAL_LINE, "kl %.9g", s.kl / s.weight);
        snprintf(res->lines[2], IG_EVAL_LINE, "psnr %.4f", 10.0 * log10(255.0 * 255.0 / mse));
        res->n_lines = 3;
        res->loss = s.loss / s.weight;
    }
    ig_free(ctx, buf);
    ig_model_free(m);
    return st;
}
