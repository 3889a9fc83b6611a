/* test_train_dit.c - unit tests of the DiT family (model.arch dit) on one process: the loss and
 * every gradient of a tiny class-conditional video DiT against PyTorch's float64 goldens, and of
 * its caption variants (caption tokens; caption features through PixArt's caption embedder)
 * (tests/data/golden/dit/make_dit_goldens.py: two micro-batches of two clip shapes, B 2 and 3,
 * given noise, times and labels) on the fast and the reference CPU kernels, both shapes through
 * one model; the same bits for any thread count; the prediction put back in place (the loss
 * recomputed from it); the draws (noise, time, label dropout) keyed and reproducible; patches that
 * do not divide a clip refused with the numbers; the Hugging Face-style export (the patch
 * embedding as a [D, 3, pt, ph, pw] convolution) read back to the same predictions; the loss on
 * a frame shard with a noise file's noise and times (ingot eval --noise) equal to PyTorch's.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"
#include "train/formats/safetensors.h"
#include "train/train.h"

/* A golden micro-batch: its clips and PyTorch's values. */
typedef struct dit_case {
    const char *name; /* "a" or "b" */
    int B, F, H, W;
} dit_case;

static const dit_case cases[] = {{"a", 2, 4, 8, 8}, {"b", 3, 2, 4, 12}};
enum { MAX_B = 3, MAX_T = 32 };

/* the golden set: dit/ (class-conditional), dit_caption/ (a cross-attention to captions),
 * dit_features/ (to caption features through PixArt's caption embedder) or dit_latents/ (the class
 * model on a VAE's latents: 4 channels, x0 = scaling (mean - shift)) */
static const char *golden_dir = "dit";

static const char *golden(const char *name) {
    return igt_fmt("%s/tests/data/golden/%s/%s", igt_source_dir(), golden_dir, name);
}

typedef struct fixture {
    ig_ctx *ctx;
    ig_backend *be;
    ig_model *m;
} fixture;

static void open_model(fixture *f, int threads, int reference) {
    memset(f, 0, sizeof *f);
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = threads;
    ig_err err = {0};
    assert_int_equal(ig_ctx_create(&f->ctx, &co, &err), IG_OK);
    ig_backend_opts bo = ig_backend_opts_default();
    bo.reference = reference;
    if (ig_backend_create(&f->be, f->ctx, &bo, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_model_config c;
    int32_t eod;
    if (ig_hf_read_config(f->ctx, golden(""), &c, &eod, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_string_equal(ig_model_archs[c.arch], "dit");
    if (ig_model_create(&f->m, f->ctx, f->be, &c, MAX_B, MAX_T, 1234, &err) != IG_OK)
        fail_msg("%s", err.msg);
    if (ig_hf_load(f->ctx, f->m, golden("init.safetensors"), &err) != IG_OK)
        fail_msg("%s", err.msg);
}

static void close_model(fixture *f) {
    ig_model_free(f->m);
    ig_backend_free(f->be);
    ig_ctx_free(f->ctx);
}

/* A golden micro-batch's inputs and expected values. */
typedef struct golden_batch {
    const dit_case *c;
    uint8_t *frames;
    float *noise, t[MAX_B];
    uint32_t labels[MAX_B];
    int caption;                              /* the caption set */
    int32_t captions[MAX_B * 6], lens[MAX_B]; /* its caption tokens (6 slots) and lengths */
    float *features;                          /* the features set: [B, 6, 12] (lengths 0: null) */
    float *moments; /* the latents set: [B, F, H, W, 8] the means, then the log-variances */
    double scaling, shift;
    ig_st_file *expected;
    double loss;
} golden_batch;

static void read_batch(fixture *f, const dit_case *c, golden_batch *g) {
    memset(g, 0, sizeof *g);
    g->c = c;
    ig_err err = {0};
    ig_latent_vae vae;
    int latent = ig_model_latents(ig_model_shape(f->m), &vae),
        C = ig_model_clip_channels(ig_model_shape(f->m));
    size_t len = 0, n = (size_t)c->B * c->F * c->H * c->W * (size_t)C;
    if (ig_st_file_open(&g->expected, f->ctx, golden(igt_fmt("%s_expected.safetensors", c->name)),
                        &err) != IG_OK)
        fail_msg("%s", err.msg);
    if (latent) { /* the latents set: a latent shard's values and the model's VAE's factors */
        g->moments = malloc(2 * n * sizeof *g->moments);
        assert_int_equal(
            ig_st_tensor_to_f32(ig_st_file_find(g->expected, "moments"), g->moments, 2 * n, NULL),
            IG_OK);
        g->scaling = vae.scaling_factor, g->shift = vae.shift_factor;
    } else {
        g->frames = (uint8_t *)igt_read(golden(igt_fmt("%s_clips.bin", c->name)), &len);
        assert_int_equal(len, n);
    }
    g->noise = malloc(n * sizeof *g->noise);
    assert_int_equal(ig_st_tensor_to_f32(ig_st_file_find(g->expected, "noise"), g->noise, n, NULL),
                     IG_OK);
    assert_int_equal(
        ig_st_tensor_to_f32(ig_st_file_find(g->expected, "t"), g->t, (uint64_t)c->B, NULL), IG_OK);
    const ig_st_tensor *lt = ig_st_file_find(g->expected, "labels");
    const ig_st_tensor *ct = ig_st_file_find(g->expected, "caption_tokens");
    const ig_st_tensor *ft = ig_st_file_find(g->expected, "caption_features");
    if (ft) { /* the features set: the rows past a length are padding, length 0 the null caption */
        size_t nf = (size_t)c->B * 6 * 12;
        assert_int_equal(ig_st_tensor_numel(ft), nf);
        g->features = malloc(nf * sizeof *g->features);
        assert_int_equal(ig_st_tensor_to_f32(ft, g->features, nf, NULL), IG_OK);
        memcpy(g->lens, ig_st_tensor_data(ig_st_file_find(g->expected, "caption_lens")),
               (size_t)c->B * sizeof(int32_t));
    } else if (ct) { /* the caption set: the null caption is token 50 alone, length 0 here */
        g->caption = 1;
        memcpy(g->captions, ig_st_tensor_data(ct), (size_t)c->B * 6 * sizeof(int32_t));
        memcpy(g->lens, ig_st_tensor_data(ig_st_file_find(g->expected, "caption_lens")),
               (size_t)c->B * sizeof(int32_t));
        for (int b = 0; b < c->B; b++)
            if (g->lens[b] == 1 && g->captions[b * 6] == 50) g->lens[b] = 0;
    } else {
        assert_non_null(lt);
        int32_t l32[MAX_B];
        memcpy(l32, ig_st_tensor_data(lt), (size_t)c->B * sizeof(int32_t));
        for (int b = 0; b < c->B; b++) g->labels[b] = (uint32_t)l32[b];
    }
    float loss;
    assert_int_equal(ig_st_tensor_to_f32(ig_st_file_find(g->expected, "loss"), &loss, 1, NULL),
                     IG_OK);
    g->loss = loss;
}

static void free_batch(golden_batch *g) {
    free(g->frames);
    free(g->noise);
    free(g->features);
    free(g->moments);
    ig_st_file_free(g->expected);
}

static ig_clip_input input_of(const golden_batch *g) {
    return (ig_clip_input){.frames = g->frames,
                           .latents = g->moments,
                           .latent_scale = g->scaling,
                           .latent_shift = g->shift,
                           .latent_mean = 1, /* the posterior's mean, as eval and --noise */
                           .B = g->c->B,
                           .F = g->c->F,
                           .H = g->c->H,
                           .W = g->c->W,
                           .labels = g->caption || g->features ? NULL : g->labels,
                           .captions = g->caption ? g->captions : NULL,
                           .features = g->features,
                           .caption_lens = g->caption || g->features ? g->lens : NULL,
                           .noise = g->noise,
                           .t = g->t,
                           .shift = 1};
}

/* ||got - want|| / ||want|| of tensor t's gradient against golden grad.NAME */
static double grad_error(const golden_batch *g, const float *buf, const ig_model_tensor *t,
                         double *norm) {
    const ig_st_tensor *x = ig_st_file_find(g->expected, igt_fmt("grad.%s", t->name));
    if (!x) fail_msg("golden grad.%s is missing", t->name);
    assert_int_equal(ig_st_tensor_numel(x), t->numel);
    float *want = malloc(t->numel * sizeof *want);
    assert_int_equal(ig_st_tensor_to_f32(x, want, t->numel, NULL), IG_OK);
    double d = 0, s = 0;
    for (uint64_t i = 0; i < t->numel; i++) {
        double e = (double)buf[t->offset + i] - want[i];
        d += e * e;
        s += (double)want[i] * want[i];
    }
    free(want);
    *norm = sqrt(s);
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* Both micro-batches through one model: the loss and every gradient within 1e-5 of PyTorch's. */
static void check_goldens(int reference) {
    fixture f;
    open_model(&f, 2, reference);
    ig_err err = {0};
    uint64_t n = ig_model_buffer_elems(f.m);
    float *grads = malloc(n * sizeof *grads);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        golden_batch g;
        read_batch(&f, &cases[k], &g);
        ig_clip_input in = input_of(&g);
        double loss = 0;
        assert_int_equal(ig_model_zero_grads(f.m, &err), IG_OK);
        if (ig_model_clips_loss(f.m, &in, 1.0f, &loss, &err) != IG_OK) fail_msg("%s", err.msg);
        if (fabs(loss - g.loss) > 1e-5 * fabs(g.loss))
            fail_msg("%s: loss %.9g, PyTorch %.9g", g.c->name, loss, g.loss);
        assert_int_equal(ig_model_read(f.m, IG_MODEL_GRADS, grads, &err), IG_OK);
        for (size_t i = 0; i < ig_model_num_tensors(f.m); i++) {
            const ig_model_tensor *t = ig_model_tensor_at(f.m, i);
            double norm = 0, e = grad_error(&g, grads, t, &norm);
            if (e > 1e-5)
                fail_msg("%s: %s: gradient off by %.3g (relative; norm %.3g)", g.c->name, t->name,
                         e, norm);
            assert_true(norm > 0); /* every tensor is reached: a zero gradient would not pass */
        }
        /* the forward alone gives the same loss */
        double loss2 = 0;
        assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &loss2, &err), IG_OK);
        assert_true(loss2 == loss);
        free_batch(&g);
    }
    free(grads);
    close_model(&f);
}

static void test_golden_gradients(void **state) {
    (void)state;
    check_goldens(0);
}

static void test_golden_gradients_reference(void **state) {
    (void)state;
    check_goldens(1);
}

/* The caption model (a cross-attention to 6 caption slots, lengths 1 .. 6 and the null caption):
 * the same, fast and reference kernels. */
static void test_caption_goldens(void **state) {
    (void)state;
    golden_dir = "dit_caption";
    check_goldens(0);
    check_goldens(1);
    golden_dir = "dit";
}

/* The latents model (the class model on 4-channel latents, x0 = 0.18215 (mean - 0.1) of the
 * latent shard's means): the same, fast and reference kernels. Training draws z from the
 * posterior instead: mean + exp(logvar / 2) eps', eps' the keyed normal of ("ingot flow latent",
 * seed, micro-batch, sample) - the same loss, bit for bit, as the mean path given those z as means
 * (with log-variances whose exp(logvar / 2) is zero); another micro-batch draws other z; the
 * frames of a pixel model are refused, and so are latents given to one. */
static void test_latent_goldens(void **state) {
    (void)state;
    golden_dir = "dit_latents";
    check_goldens(0);
    check_goldens(1);
    fixture f;
    open_model(&f, 2, 0);
    golden_batch g;
    read_batch(&f, &cases[0], &g);
    ig_clip_input in = input_of(&g);
    in.latent_mean = 0, in.seed = 77, in.key = 5;
    ig_err err = {0};
    double drawn = 0, again = 0, other = 0, mean = 0, given = 0;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &drawn, &err), IG_OK);
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &again, &err), IG_OK);
    assert_true(drawn == again); /* keyed: the same micro-batch draws the same */
    in.key = 6;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &other, &err), IG_OK);
    assert_true(other != drawn);
    in.key = 5, in.latent_mean = 1;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &mean, &err), IG_OK);
    assert_true(mean != drawn);
    /* the draw, made here: each sample's eps' keyed by (seed, key, b) */
    const dit_case *c = g.c;
    size_t per = (size_t)c->F * c->H * c->W * 4;
    float *z = malloc(2 * per * (size_t)c->B * sizeof *z), *eps = malloc(per * sizeof *eps);
    for (int b = 0; b < c->B; b++) {
        uint64_t k[3] = {77, 5, (uint64_t)b};
        ig_rng_fill_normal(f.ctx, ig_rng_key_make(ig_xxh3_64(k, sizeof k), "ingot flow latent"), 0,
                           per, 0.0f, 1.0f, eps);
        for (size_t e = 0; e < per; e++) {
            const float *mom = g.moments + ((size_t)b * per + e / 4 * 4) * 2;
            float *out = z + ((size_t)b * per + e / 4 * 4) * 2;
            out[e % 4] = mom[e % 4] + expf(0.5f * mom[4 + e % 4]) * eps[e];
            out[4 + e % 4] = -1000.0f; /* exp(-500) is 0 in float */
        }
    }
    in.latents = z;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &given, &err), IG_OK);
    assert_true(given == drawn);
    /* what a model of latents is given: latents, not frames */
    uint8_t frames[2 * 4 * 8 * 8 * 4] = {0};
    in.latents = NULL, in.frames = frames;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &given, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "frames given to a model of latents"));
    in.frames = NULL, in.latents = g.moments, in.latent_scale = 0;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &given, &err), IG_ERR_INVALID_ARG);
    free(z);
    free(eps);
    free_batch(&g);
    close_model(&f);
    golden_dir = "dit";
    open_model(&f, 2, 0);
    read_batch(&f, &cases[0], &g);
    in = input_of(&g);
    in.frames = NULL, in.latents = g.noise, in.latent_scale = 1;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &given, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "latents given to a model of pixels"));
    free_batch(&g);
    close_model(&f);
}

/* The features model (PixArt's caption embedder of [6, 12] features, lengths 0 .. 6, a null
 * caption y_embedding in each micro-batch, padding rows that must not count): the same, fast and
 * reference kernels; the padding rows changed, the same bits. */
static void test_feature_goldens(void **state) {
    (void)state;
    golden_dir = "dit_features";
    check_goldens(0);
    check_goldens(1);
    fixture f;
    open_model(&f, 2, 0);
    golden_batch g;
    read_batch(&f, &cases[1], &g); /* lengths [6, 2, 0] */
    ig_clip_input in = input_of(&g);
    ig_err err = {0};
    double a = 0, b = 0, c = 0;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &a, &err), IG_OK);
    for (int j = 2; j < 6; j++)
        for (int k = 0; k < 12; k++) g.features[(1 * 6 + j) * 12 + k] = 1e30f;
    for (int k = 0; k < 6 * 12; k++) g.features[2 * 6 * 12 + k] = -7.0f;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &b, &err), IG_OK);
    assert_true(a == b);
    /* the null caption is y_embedding, not zero features: giving sample 2 its rows moves it */
    g.lens[2] = 6;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &c, &err), IG_OK);
    assert_true(c != a);
    /* a features model is not given tokens, nor a token model features */
    in.features = NULL;
    in.captions = g.captions;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &c, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "give the captions' features"));
    assert_int_equal(ig_model_caption_features(ig_model_shape(f.m), NULL), 12);
    free_batch(&g);
    close_model(&f);
    golden_dir = "dit";
}

/* The loss and the gradients of micro-batch b at 1 and 3 threads: the same bits. */
static void test_deterministic_threads(void **state) {
    (void)state;
    float *g[2] = {NULL, NULL};
    double loss[2];
    uint64_t n = 0;
    for (int k = 0; k < 2; k++) {
        fixture f;
        open_model(&f, k ? 3 : 1, 0);
        golden_batch gb;
        read_batch(&f, &cases[1], &gb);
        ig_clip_input in = input_of(&gb);
        ig_err err = {0};
        assert_int_equal(ig_model_zero_grads(f.m, &err), IG_OK);
        assert_int_equal(ig_model_clips_loss(f.m, &in, 1.0f, &loss[k], &err), IG_OK);
        n = ig_model_buffer_elems(f.m);
        g[k] = malloc(n * sizeof(float));
        assert_int_equal(ig_model_read(f.m, IG_MODEL_GRADS, g[k], &err), IG_OK);
        free_batch(&gb);
        close_model(&f);
    }
    assert_true(loss[0] == loss[1]);
    assert_memory_equal(g[0], g[1], n * sizeof(float));
    free(g[0]);
    free(g[1]);
}

/* The prediction for x_t, put back in [B, F, H, W, 3]: the loss recomputed from it on the host
 * is the golden loss (the unpatchify is the patchify's inverse, in PyTorch's order). */
static void test_predict_in_place(void **state) {
    (void)state;
    fixture f;
    open_model(&f, 2, 0);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        golden_batch g;
        read_batch(&f, &cases[k], &g);
        const dit_case *c = g.c;
        size_t per = (size_t)c->F * c->H * c->W * 3, n = (size_t)c->B * per;
        float *xt = malloc(n * sizeof *xt), *v = malloc(n * sizeof *v);
        for (size_t i = 0; i < n; i++) {
            float t = g.t[i / per], x0 = (float)g.frames[i] / 127.5f - 1.0f;
            xt[i] = (1.0f - t) * x0 + t * g.noise[i];
        }
        ig_clip_input in = input_of(&g);
        in.frames = NULL;
        in.noise = NULL;
        in.xt = xt;
        ig_err err = {0};
        if (ig_model_clips_predict(f.m, &in, v, &err) != IG_OK) fail_msg("%s", err.msg);
        double sum = 0;
        for (size_t i = 0; i < n; i++) {
            double target = (double)g.noise[i] - ((double)g.frames[i] / 127.5 - 1.0);
            sum += (v[i] - target) * (v[i] - target);
        }
        double loss = sum / (double)n;
        if (fabs(loss - g.loss) > 1e-5 * g.loss)
            fail_msg("%s: the loss from the prediction is %.9g, PyTorch's %.9g", c->name, loss,
                     g.loss);
        /* a loss needs clips; a prediction x_t */
        assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &loss, &err), IG_ERR_INVALID_ARG);
        free(xt);
        free(v);
        free_batch(&g);
    }
    close_model(&f);
}

/* The draws: keyed by (seed, key), the same twice; another key, another loss; label dropout at
 * probability 0 changes nothing and near 1 is the null class everywhere. */
static void test_draws_keyed(void **state) {
    (void)state;
    fixture f;
    open_model(&f, 2, 0);
    golden_batch g;
    read_batch(&f, &cases[0], &g);
    ig_err err = {0};
    ig_clip_input in = input_of(&g);
    in.noise = NULL;
    in.t = NULL;
    in.seed = 7;
    in.key = 41;
    double a = 0, b = 0, c = 0;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &a, &err), IG_OK);
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &b, &err), IG_OK);
    assert_true(a == b);
    in.key = 42;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &c, &err), IG_OK);
    assert_true(c != a);
    in.key = 41;
    in.seed = 8;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &c, &err), IG_OK);
    assert_true(c != a);
    /* dropout: the model's class_dropout is 0.1 (config.json); with given noise and times the
     * loss moves only through the labels */
    ig_clip_input d = input_of(&g);
    double given = 0, nolabels = 0, dropped = 0;
    assert_int_equal(ig_model_clips_loss(f.m, &d, 0.0f, &given, &err), IG_OK);
    d.labels = NULL;
    assert_int_equal(ig_model_clips_loss(f.m, &d, 0.0f, &nolabels, &err), IG_OK);
    assert_true(nolabels != given);
    /* the labels are [4, null]: a key that drops the first (probability 0.1) gives the null-class
     * loss, one that does not the given one; both among the first 2000 keys */
    d.labels = g.labels;
    d.drop_labels = 1;
    int seen_all = 0, seen_none = 0;
    for (uint64_t key = 0; key < 2000 && !(seen_all && seen_none); key++) {
        d.key = key;
        assert_int_equal(ig_model_clips_loss(f.m, &d, 0.0f, &dropped, &err), IG_OK);
        seen_all |= dropped == nolabels;
        seen_none |= dropped == given;
    }
    assert_true(seen_all && seen_none);
    free_batch(&g);
    close_model(&f);
}

/* Clips that patches do not divide, or too large for the model, are refused with the numbers. */
static void test_refusals(void **state) {
    (void)state;
    fixture f;
    open_model(&f, 1, 0);
    ig_err err = {0};
    int tok = 0;
    const ig_model_config *c = ig_model_shape(f.m);
    assert_int_equal(ig_model_clip_tokens(c, 4, 8, 8, &tok, &err), IG_OK);
    assert_int_equal(tok, 32);
    assert_int_equal(ig_model_clip_tokens(c, 5, 8, 8, &tok, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "5 frames of 8x8 are not cut into whole patches of [2, 2, 2]"));
    assert_int_equal(ig_model_clip_tokens(c, 4, 8, 9, &tok, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "columns"));
    uint8_t frames[4 * 8 * 16 * 3] = {0};
    ig_clip_input in = {.frames = frames, .B = 1, .F = 4, .H = 8, .W = 16, .shift = 1};
    double loss;
    assert_int_equal(ig_model_clips_loss(f.m, &in, 0.0f, &loss, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "does not fit the model's 3 x 32"));
    /* a language model's entry point */
    int32_t tokens[4] = {0};
    assert_int_equal(ig_model_forward(f.m, tokens, 1, 3, NULL, &loss, NULL, &err),
                     IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "dit models read clips, not tokens"));
    close_model(&f);
}

/* Export: DiT's names, the patch embedding as a convolution's [D, 3, pt, ph, pw], config.json
 * ingot-dit; opened again, the same predictions bit for bit. */
static void test_export_round_trip(void **state) {
    (void)state;
    fixture f;
    open_model(&f, 2, 0);
    char *dir = igt_mkdtemp();
    ig_err err = {0};
    if (ig_hf_export(f.ctx, f.m, -1, dir, 0, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_st_file *st = NULL;
    assert_int_equal(ig_st_file_open(&st, f.ctx, igt_fmt("%s/model.safetensors", dir), &err),
                     IG_OK);
    const ig_st_tensor *x = ig_st_file_find(st, "x_embedder.proj.weight");
    assert_non_null(x);
    assert_int_equal(ig_st_tensor_ndim(x), 5);
    const uint64_t *sh = ig_st_tensor_shape(x);
    assert_true(sh[0] == 32 && sh[1] == 3 && sh[2] == 2 && sh[3] == 2 && sh[4] == 2);
    assert_non_null(ig_st_file_find(st, "y_embedder.embedding_table.weight"));
    assert_non_null(ig_st_file_find(st, "final_layer.linear.weight"));
    ig_st_file_free(st);
    char *cfg = igt_read(igt_fmt("%s/config.json", dir), NULL);
    assert_non_null(strstr(cfg, "\"model_type\": \"ingot-dit\""));
    free(cfg);
    ig_model *m2 = NULL;
    if (ig_model_open(&m2, f.ctx, f.be, dir, MAX_B, MAX_T, NULL, &err) != IG_OK)
        fail_msg("%s", err.msg);
    golden_batch g;
    read_batch(&f, &cases[1], &g);
    size_t n = (size_t)g.c->B * g.c->F * g.c->H * g.c->W * 3;
    float *xt = malloc(n * sizeof *xt), *v1 = malloc(n * sizeof *v1), *v2 = malloc(n * sizeof *v2);
    for (size_t i = 0; i < n; i++) xt[i] = g.noise[i];
    ig_clip_input in = input_of(&g);
    in.frames = NULL, in.noise = NULL, in.xt = xt;
    assert_int_equal(ig_model_clips_predict(f.m, &in, v1, &err), IG_OK);
    assert_int_equal(ig_model_clips_predict(m2, &in, v2, &err), IG_OK);
    assert_memory_equal(v1, v2, n * sizeof *v1);
    free(xt);
    free(v1);
    free(v2);
    free_batch(&g);
    ig_model_free(m2);
    igt_rmtree(dir);
    free(dir);
    close_model(&f);
}

/* The golden micro-batch's clips as a frame shard at prefix (one source, its labels: the golden
 * set's null class, label num_classes as DiT numbers it, is a clip without a label in a shard). */
static void write_shard(const char *prefix, const golden_batch *g, int num_classes) {
    uint32_t labels[MAX_B];
    for (int b = 0; b < g->c->B; b++)
        labels[b] = g->labels[b] < (uint32_t)num_classes ? g->labels[b] : IG_CLIP_NONE;
    igt_write_clip_shard(prefix, g->frames, g->c->B, g->c->F, g->c->H, g->c->W, labels);
}

/* ingot eval --noise: the shard's clips 0 .. N-1 with the file's noise and times give PyTorch's
 * loss of the same weights (in micro-batches of 2: the clips split 2 + 1); the grid mode repeats
 * itself; a file without the tensors is refused. */
static void test_eval_noise_file(void **state) {
    (void)state;
    fixture f;
    open_model(&f, 2, 0);
    golden_batch g;
    read_batch(&f, &cases[1], &g);
    char *dir = igt_mkdtemp();
    const char *prefix = igt_fmt("%s/clips", dir);
    write_shard(prefix, &g, 5); /* the goldens' config.json: num_classes 5 */
    const char *noise = igt_fmt("%s/noise.safetensors", dir);
    ig_err err = {0};
    ig_st_writer *w = NULL;
    uint64_t ns[5] = {3, 2, 4, 12, 3}, ts[1] = {3};
    assert_int_equal(ig_st_writer_create(&w, NULL, noise, 1, &err), IG_OK);
    assert_int_equal(ig_st_writer_add(w, "noise", IG_ST_F32, ns, 5, g.noise, &err), IG_OK);
    assert_int_equal(ig_st_writer_add(w, "t", IG_ST_F32, ts, 1, g.t, &err), IG_OK);
    assert_int_equal(ig_st_writer_commit(w, NULL, &err), IG_OK);
    const char *prefixes[] = {prefix};
    ig_clip_eval_opts o = {.prefixes = prefixes,
                           .n = 1,
                           .micro_batch = 2,
                           .batches = 1,
                           .timesteps = 3,
                           .seed = 5,
                           .noise_file = noise};
    ig_clip_eval_result *r = calloc(2, sizeof *r);
    if (ig_model_eval_clips(f.m, f.ctx, &o, &r[0], &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(r[0].clips, 3);
    if (fabs(r[0].loss - g.loss) > 1e-5 * g.loss)
        fail_msg("eval --noise: %.9g, PyTorch %.9g", r[0].loss, g.loss);
    /* the grid: 1 micro-batch of the shard's 2 first clips at t = 1/6, 1/2, 5/6, twice the same */
    o.noise_file = NULL;
    for (int k = 0; k < 2; k++)
        assert_int_equal(ig_model_eval_clips(f.m, f.ctx, &o, &r[k], &err), IG_OK);
    assert_int_equal(r[0].n_times, 3);
    assert_int_equal(r[0].clips, 2);
    assert_memory_equal(&r[0], &r[1], sizeof *r);
    double mean = (r[0].loss_at[0] + r[0].loss_at[1] + r[0].loss_at[2]) / 3;
    assert_true(fabs(mean - r[0].loss) <= 1e-12 * r[0].loss);
    assert_true(r[0].loss_at[0] != r[0].loss_at[2]);
    /* a noise file without t */
    assert_int_equal(ig_st_writer_create(&w, NULL, noise, 1, &err), IG_OK);
    assert_int_equal(ig_st_writer_add(w, "noise", IG_ST_F32, ns, 5, g.noise, &err), IG_OK);
    assert_int_equal(ig_st_writer_commit(w, NULL, &err), IG_OK);
    o.noise_file = noise;
    assert_int_equal(ig_model_eval_clips(f.m, f.ctx, &o, &r[0], &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "needs tensors noise [N, F, H, W, 3] and t [N]"));
    /* a NaN or infinity in the noise or the times gave "loss nan" and success: refused, naming
     * the tensor and the first bad element; and so is a file of no clips */
    size_t nv = 3 * 2 * 4 * 12 * 3;
    float *bad = malloc(nv * sizeof *bad), tb[3] = {g.t[0], g.t[1], g.t[2]};
    assert_non_null(bad);
    memcpy(bad, g.noise, nv * sizeof *bad);
    bad[(((1 * 2 + 1) * 4 + 2) * 12 + 5) * 3 + 2] = NAN; /* [1, 1, 2, 5, 2] */
    bad[nv - 1] = INFINITY;
    for (int k = 0; k < 3; k++) {
        if (k == 1) memcpy(bad, g.noise, nv * sizeof *bad), tb[2] = -INFINITY;
        uint64_t n0[5] = {k == 2 ? 0 : 3, 2, 4, 12, 3}, t0[1] = {k == 2 ? 0 : 3};
        assert_int_equal(ig_st_writer_create(&w, NULL, noise, 1, &err), IG_OK);
        assert_int_equal(ig_st_writer_add(w, "noise", IG_ST_F32, n0, 5, bad, &err), IG_OK);
        assert_int_equal(ig_st_writer_add(w, "t", IG_ST_F32, t0, 1, tb, &err), IG_OK);
        assert_int_equal(ig_st_writer_commit(w, NULL, &err), IG_OK);
        assert_int_equal(ig_model_eval_clips(f.m, f.ctx, &o, &r[0], &err), IG_ERR_FORMAT);
        const char *want[] = {"tensor \"noise\" element [1, 1, 2, 5, 2] is nan",
                              "tensor \"t\" element [2] is -inf",
                              "tensor \"noise\" holds no clips"};
        if (!strstr(err.msg, want[k])) fail_msg("%d: '%s' not in: %s", k, want[k], err.msg);
        assert_non_null(strstr(err.msg, noise));
    }
    free(bad);
    free(r);
    free_batch(&g);
    igt_rmtree(dir);
    free(dir);
    close_model(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_gradients), cmocka_unit_test(test_golden_gradients_reference),
        cmocka_unit_test(test_caption_goldens),  cmocka_unit_test(test_feature_goldens),
        cmocka_unit_test(test_latent_goldens),   cmocka_unit_test(test_deterministic_threads),
        cmocka_unit_test(test_predict_in_place), cmocka_unit_test(test_draws_keyed),
        cmocka_unit_test(test_refusals),         cmocka_unit_test(test_export_round_trip),
        cmocka_unit_test(test_eval_noise_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
