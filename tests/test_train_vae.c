/* test_train_vae.c - unit tests of the VAE family (model.arch vae: diffusers' AutoencoderKL, per
 * frame) on one process, against an independent PyTorch AutoencoderKL in float64
 * (tests/data/golden/vae/make_vae_goldens.py): for a two-block model (a) and a three-block one
 * whose channels change (b: shortcut convolutions, two resnets a block, diffusers' older
 * attention names, a log-variance channel past the clamp), the encoder's moments, the decoder's
 * frames of a given z, the loss's two terms and the loss with given noise, and every parameter's
 * gradient, on the fast and the reference CPU kernels, within 1e-5 of each tensor's largest
 * magnitude; the clamped channel's gradient exactly 0. Then: the recomputation modes and thread
 * counts give the same bits; the noise drawn is keyed (same key, same loss; another, another);
 * frames the downsampling does not divide, a bad config.json field, an inconsistent shape are
 * refused naming what; the export is diffusers' (convolutions [out, in, kh, kw], to_q / to_k /
 * to_v) and reads back to the same weights; and a file of Stable Diffusion's VAE's shape
 * (sd-vae-ft-ema: [128, 256, 512, 512], 2 layers a block, 32 groups), written here from a list
 * of diffusers' names of its own, loads with its 83,653,863 parameters, each convolution
 * transposed and the older attention names taken. With IG_VAE_SD_DIR set, that directory is
 * left there for tests/cli/vae.sh.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"
#include "train/formats/safetensors.h"
#include "train/train.h"

typedef struct vae_case {
    const char *name;
    int B, F, H, W, h, w, C;
} vae_case;

static const vae_case cases[] = {{"a", 2, 2, 8, 8, 4, 4, 4}, {"b", 1, 3, 8, 12, 2, 3, 3}};

static const char *golden(const vae_case *c, const char *file) {
    return igt_fmt("%s/tests/data/golden/vae/%s/%s", igt_source_dir(), c->name, file);
}

typedef struct fixture {
    ig_ctx *ctx;
    ig_backend *be;
    ig_model *m;
} fixture;

static void open_model(fixture *f, const vae_case *c, int threads, int reference, int recompute) {
    memset(f, 0, sizeof *f);
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = threads;
    ig_err err = {0};
    assert_int_equal(ig_ctx_create(&f->ctx, &co, &err), IG_OK);
    ig_backend_opts bo = ig_backend_opts_default();
    bo.reference = reference;
    if (ig_backend_create(&f->be, f->ctx, &bo, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_model_config shape;
    int32_t eod;
    if (ig_hf_read_config(f->ctx, golden(c, ""), &shape, &eod, &err) != IG_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(ig_model_archs[shape.arch], "vae");
    if (ig_model_create_recompute(&f->m, f->ctx, f->be, &shape, c->B, c->F * c->H * c->W, 1,
                                  recompute, &err) != IG_OK)
        fail_msg("%s", err.msg);
    if (ig_hf_load(f->ctx, f->m, golden(c, ""), &err) != IG_OK) fail_msg("%s", err.msg);
}

static void close_model(fixture *f) {
    ig_model_free(f->m);
    ig_backend_free(f->be);
    ig_ctx_free(f->ctx);
}

/* a golden set's frames, noise and expected values */
typedef struct golden_set {
    uint8_t *frames;
    float *noise;
    ig_st_file *expected;
    double kl_weight;
} golden_set;

static float *tensor_f32(const ig_st_file *f, const char *name, size_t n) {
    const ig_st_tensor *t = ig_st_file_find(f, name);
    if (!t) fail_msg("golden tensor %s is missing", name);
    float *out = malloc(n * sizeof *out);
    assert_int_equal(ig_st_tensor_to_f32(t, out, n, NULL), IG_OK);
    return out;
}

static void read_set(const fixture *f, const vae_case *c, golden_set *g) {
    memset(g, 0, sizeof *g);
    size_t len = 0;
    g->frames = (uint8_t *)igt_read(golden(c, "clips.bin"), &len);
    assert_int_equal(len, (size_t)c->B * c->F * c->H * c->W * 3);
    ig_err err = {0};
    if (ig_st_file_open(&g->expected, f->ctx, golden(c, "expected.safetensors"), &err) != IG_OK)
        fail_msg("%s", err.msg);
    g->noise = tensor_f32(g->expected, "noise", (size_t)c->B * c->F * c->h * c->w * c->C);
    memcpy(&g->kl_weight, ig_st_tensor_data(ig_st_file_find(g->expected, "kl_weight")), 8);
}

static void free_set(golden_set *g) {
    free(g->frames);
    free(g->noise);
    ig_st_file_free(g->expected);
}

static ig_vae_input input_of(const vae_case *c, const golden_set *g) {
    return (ig_vae_input){.frames = g->frames,
                          .B = c->B,
                          .F = c->F,
                          .H = c->H,
                          .W = c->W,
                          .noise = g->noise,
                          .kl_weight = g->kl_weight};
}

/* max |got - want| over max |want| within tol */
static void check_close(const float *got, const float *want, size_t n, double tol,
                        const char *what) {
    double worst = 0, scale = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= worst)) worst = d, at = i;
    }
    if (!(worst <= tol * scale))
        fail_msg("%s: max |ingot - torch| %.3g at %zu (%.9g, torch %.9g) over a scale of %.3g",
                 what, worst, at, got[at], want[at], scale);
}

static void check_scalar(double got, const golden_set *g, const char *name) {
    float want;
    assert_int_equal(ig_st_tensor_to_f32(ig_st_file_find(g->expected, name), &want, 1, NULL),
                     IG_OK);
    if (!(fabs(got - want) <= 1e-5 * fabs(want)))
        fail_msg("%s: ingot %.9g, torch %.9g", name, got, (double)want);
}

/* every tensor's gradient against the golden grads (loaded as a model of the same shape) */
static void check_grads(fixture *f, const vae_case *c) {
    ig_err err = {0};
    ig_model *want = NULL;
    if (ig_model_create(&want, f->ctx, f->be, ig_model_shape(f->m), 1, 64, 1, &err) != IG_OK)
        fail_msg("%s", err.msg);
    if (ig_hf_load(f->ctx, want, golden(c, "grads.safetensors"), &err) != IG_OK)
        fail_msg("%s", err.msg);
    uint64_t n = ig_model_buffer_elems(f->m);
    float *got = malloc(n * sizeof *got), *ref = malloc(n * sizeof *ref);
    assert_int_equal(ig_model_read(f->m, IG_MODEL_GRADS, got, &err), IG_OK);
    assert_int_equal(ig_model_read(want, IG_MODEL_PARAMS, ref, &err), IG_OK);
    for (size_t i = 0; i < ig_model_num_tensors(f->m); i++) {
        const ig_model_tensor *t = ig_model_tensor_at(f->m, i);
        check_close(got + t->offset, ref + t->offset, t->numel, 1e-5,
                    igt_fmt("%s: grad %s", c->name, t->name));
    }
    if (!strcmp(c->name, "b")) { /* the clamped log-variance channel: no gradient through it */
        const ig_model_tensor *t = ig_model_tensor_find(f->m, "quant_conv.bias");
        assert_non_null(t);
        assert_true(got[t->offset + 2 * (uint64_t)c->C - 1] == 0.0f);
        assert_true(got[t->offset + (uint64_t)c->C - 1] != 0.0f); /* its mean's has one */
    }
    free(got);
    free(ref);
    ig_model_free(want);
}

static void check_case(const vae_case *c, int reference) {
    fixture f;
    open_model(&f, c, 2, reference, IG_RECOMPUTE_NONE);
    golden_set g;
    read_set(&f, c, &g);
    ig_err err = {0};
    int N = c->B * c->F;
    size_t nm = (size_t)N * c->h * c->w * 2 * c->C, nz = (size_t)N * c->h * c->w * c->C;
    size_t nx = (size_t)N * c->H * c->W * 3;
    float *mo = malloc(nm * sizeof *mo), *dec = malloc(nx * sizeof *dec);
    if (ig_model_vae_encode(f.m, g.frames, N, c->H, c->W, mo, &err) != IG_OK)
        fail_msg("%s", err.msg);
    float *want = tensor_f32(g.expected, "moments", nm);
    check_close(mo, want, nm, 1e-5, igt_fmt("%s: moments", c->name));
    free(want);
    float *z = tensor_f32(g.expected, "z", nz);
    if (ig_model_vae_decode(f.m, z, N, c->h, c->w, dec, &err) != IG_OK) fail_msg("%s", err.msg);
    want = tensor_f32(g.expected, "decoded", nx);
    check_close(dec, want, nx, 1e-5, igt_fmt("%s: decoded", c->name));
    free(want);
    free(z);
    ig_vae_input in = input_of(c, &g);
    ig_vae_terms t;
    assert_int_equal(ig_model_zero_grads(f.m, &err), IG_OK);
    if (ig_model_vae_loss(f.m, &in, 1.0f, &t, &err) != IG_OK) fail_msg("%s", err.msg);
    check_scalar(t.reconstruction, &g, "l1");
    check_scalar(t.kl, &g, "kl");
    check_scalar(t.loss, &g, "loss");
    check_grads(&f, c);
    /* a forward alone: the same loss, and the reconstruction of the same z */
    ig_vae_terms t2;
    if (ig_model_vae_loss(f.m, &in, 0.0f, &t2, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_true(t2.loss == t.loss);
    assert_int_equal(ig_model_vae_reconstruction(f.m, dec, &err), IG_OK);
    want = tensor_f32(g.expected, "decoded", nx);
    check_close(dec, want, nx, 1e-5, igt_fmt("%s: the loss's reconstruction", c->name));
    free(want);
    free(mo);
    free(dec);
    free_set(&g);
    close_model(&f);
}

static void test_goldens(void **state) {
    (void)state;
    for (size_t k = 0; k < 2; k++) check_case(&cases[k], 0);
}

static void test_goldens_reference(void **state) {
    (void)state;
    for (size_t k = 0; k < 2; k++) check_case(&cases[k], 1);
}

/* the loss and every gradient of config b: the same bits whatever the recomputation mode and the
 * thread count */
static void loss_and_grads(const vae_case *c, int threads, int recompute, double *loss,
                           float **grads, uint64_t *n) {
    fixture f;
    open_model(&f, c, threads, 0, recompute);
    golden_set g;
    read_set(&f, c, &g);
    ig_vae_input in = input_of(c, &g);
    ig_vae_terms t;
    ig_err err = {0};
    assert_int_equal(ig_model_zero_grads(f.m, &err), IG_OK);
    if (ig_model_vae_loss(f.m, &in, 1.0f, &t, &err) != IG_OK) fail_msg("%s", err.msg);
    *loss = t.loss;
    *n = ig_model_buffer_elems(f.m);
    *grads = malloc(*n * sizeof **grads);
    assert_int_equal(ig_model_read(f.m, IG_MODEL_GRADS, *grads, &err), IG_OK);
    free_set(&g);
    close_model(&f);
}

static void test_recompute_threads(void **state) {
    (void)state;
    double l0, l;
    float *g0, *g;
    uint64_t n0, n;
    loss_and_grads(&cases[1], 2, IG_RECOMPUTE_NONE, &l0, &g0, &n0);
    const int modes[][2] = {{2, IG_RECOMPUTE_SELECTIVE}, {2, IG_RECOMPUTE_FULL}, {1, 0}, {3, 0}};
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        loss_and_grads(&cases[1], modes[k][0], modes[k][1], &l, &g, &n);
        assert_true(n == n0);
        if (l != l0 || memcmp(g, g0, n * sizeof *g))
            fail_msg("threads %d, recompute %d: another loss (%.17g, %.17g) or gradients",
                     modes[k][0], modes[k][1], l, l0);
        free(g);
    }
    free(g0);
    /* full recomputation keeps less */
    fixture a, b;
    open_model(&a, &cases[1], 1, 0, IG_RECOMPUTE_NONE);
    open_model(&b, &cases[1], 1, 0, IG_RECOMPUTE_FULL);
    ig_act_memory ma, mb;
    ig_model_act_memory(a.m, &ma);
    ig_model_act_memory(b.m, &mb);
    assert_true(mb.slot < ma.slot / 2);
    close_model(&a);
    close_model(&b);
}

/* the noise drawn from (seed, key, clip): the same draws give the same loss, others another */
static void test_draws_keyed(void **state) {
    (void)state;
    fixture f;
    open_model(&f, &cases[0], 2, 0, IG_RECOMPUTE_NONE);
    golden_set g;
    read_set(&f, &cases[0], &g);
    ig_vae_input in = input_of(&cases[0], &g);
    in.noise = NULL, in.seed = 7, in.key = 3;
    ig_vae_terms t1, t2, t3;
    ig_err err = {0};
    assert_int_equal(ig_model_vae_loss(f.m, &in, 0.0f, &t1, &err), IG_OK);
    assert_int_equal(ig_model_vae_loss(f.m, &in, 0.0f, &t2, &err), IG_OK);
    assert_true(t1.loss == t2.loss);
    in.key = 4;
    assert_int_equal(ig_model_vae_loss(f.m, &in, 0.0f, &t3, &err), IG_OK);
    assert_true(t3.reconstruction != t1.reconstruction);
    assert_true(t3.kl == t1.kl); /* the KL term does not depend on the noise */
    free_set(&g);
    close_model(&f);
}

static void expect_error(ig_status st, const ig_err *err, const char *needle) {
    assert_int_not_equal(st, IG_OK);
    if (!strstr(err->msg, needle)) fail_msg("message \"%s\" lacks \"%s\"", err->msg, needle);
}

static void test_refusals(void **state) {
    (void)state;
    fixture f;
    open_model(&f, &cases[1], 2, 0, IG_RECOMPUTE_NONE);
    ig_err err = {0};
    int h, w, C;
    /* b has 2 downsamplings: sides multiples of 4 */
    expect_error(ig_model_vae_latent_shape(ig_model_shape(f.m), 10, 8, &h, &w, &C, &err), &err,
                 "multiples of 4");
    uint8_t px[3 * 10 * 8] = {0};
    ig_vae_input in = {.frames = px, .B = 1, .F = 1, .H = 10, .W = 8};
    ig_vae_terms t;
    expect_error(ig_model_vae_loss(f.m, &in, 0.0f, &t, &err), &err, "frames of 10x8");
    /* too many pixels for the model's micro-batch */
    uint8_t *big = calloc(3 * 64 * 64, 1);
    in = (ig_vae_input){.frames = big, .B = 1, .F = 1, .H = 64, .W = 64};
    expect_error(ig_model_vae_loss(f.m, &in, 0.0f, &t, &err), &err, "do not fit");
    free(big);
    close_model(&f);
    /* shapes */
    ig_model_config c;
    expect_error(
        ig_model_config_parse(&c, "arch: vae, block_out_channels: [8, 12], norm_groups: 8", &err),
        &err, "model.norm_groups 8 does not divide block 1's 12 channels");
    expect_error(ig_model_config_parse(&c, "arch: vae, block_out_channels: [8, x]", &err), &err,
                 "model.block_out_channels");
    assert_int_equal(ig_model_config_parse(&c, "arch: vae, block_out_channels: [32, 64]", &err),
                     IG_OK);
    assert_int_equal(c.n_layer, 6);
    /* config.json fields ingot cannot honour */
    char *dir = igt_mkdtemp();
    char *text = igt_read(golden(&cases[0], "config.json"), NULL);
    static const struct {
        const char *from, *to, *needle;
    } bad[] = {
        {"\"act_fn\": \"silu\"", "\"act_fn\": \"gelu\"", "\"act_fn\" \"gelu\""},
        {"\"in_channels\": 3", "\"in_channels\": 4", "\"in_channels\" is 4"},
        {"\"force_upcast\": true", "\"force_upcast\": true, \"use_quant_conv\": false",
         "\"use_quant_conv\" false"},
        {"\"force_upcast\": true", "\"force_upcast\": true, \"latents_mean\": [0.1]",
         "\"latents_mean\" is given"},
        {"\"force_upcast\": true", "\"force_upcast\": true, \"norm_type\": \"spatial\"",
         "field \"norm_type\""},
        {"\"DownEncoderBlock2D\",", "\"DownEncoderBlock3D\",", "\"DownEncoderBlock3D\""},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char *at = strstr(text, bad[k].from);
        assert_non_null(at);
        const char *edited =
            igt_fmt("%.*s%s%s", (int)(at - text), text, bad[k].to, at + strlen(bad[k].from));
        igt_write(igt_fmt("%s/config.json", dir), edited, strlen(edited));
        int32_t eod;
        expect_error(ig_hf_read_config(NULL, dir, &c, &eod, &err), &err, bad[k].needle);
    }
    free(text);
    igt_rmtree(dir);
    free(dir);
}

/* diffusers' current name of a tensor of the older attention names (query, key, value, proj_attn)
 */
static const char *current_name(const char *name) {
    static const char *const old[][2] = {{".query.", ".to_q."},
                                         {".key.", ".to_k."},
                                         {".value.", ".to_v."},
                                         {".proj_attn.", ".to_out.0."}};
    for (int k = 0; k < 4; k++) {
        const char *at = strstr(name, old[k][0]);
        if (at)
            return igt_fmt("%.*s%s%s", (int)(at - name), name, old[k][1], at + strlen(old[k][0]));
    }
    return name;
}

/* the export: diffusers' names and shapes, read back to the same weights; opened for inference
 * it encodes and decodes as the model it came from */
static void test_export_round_trip(void **state) {
    (void)state;
    fixture f;
    open_model(&f, &cases[1], 2, 0, IG_RECOMPUTE_NONE);
    char *dir = igt_mkdtemp();
    ig_err err = {0};
    if (ig_hf_export(f.ctx, f.m, -1, dir, 0, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_st_file *st = NULL, *orig = NULL;
    assert_int_equal(
        ig_st_file_open(&st, f.ctx, igt_fmt("%s/diffusion_pytorch_model.safetensors", dir), &err),
        IG_OK);
    assert_int_equal(ig_st_file_open(&orig, f.ctx,
                                     golden(&cases[1], "diffusion_pytorch_model.safetensors"),
                                     &err),
                     IG_OK);
    /* every tensor as the original file holds it, under the current attention names (the
     * original has the older ones) */
    assert_int_equal(ig_st_file_count(st), ig_st_file_count(orig));
    for (size_t i = 0; i < ig_st_file_count(orig); i++) {
        const ig_st_tensor *o = ig_st_file_tensor(orig, i);
        const ig_st_tensor *e = ig_st_file_find(st, current_name(ig_st_tensor_name(o)));
        if (!e) fail_msg("the export lacks %s", current_name(ig_st_tensor_name(o)));
        assert_int_equal(ig_st_tensor_ndim(e), ig_st_tensor_ndim(o));
        assert_memory_equal(ig_st_tensor_shape(e), ig_st_tensor_shape(o),
                            (size_t)ig_st_tensor_ndim(o) * sizeof(uint64_t));
        assert_true(ig_st_tensor_bytes(e) == ig_st_tensor_bytes(o));
        assert_memory_equal(ig_st_tensor_data(e), ig_st_tensor_data(o), ig_st_tensor_bytes(o));
    }
    ig_st_file_free(st);
    ig_st_file_free(orig);
    char *cfg = igt_read(igt_fmt("%s/config.json", dir), NULL);
    assert_non_null(strstr(cfg, "\"_class_name\": \"AutoencoderKL\""));
    free(cfg);
    ig_model *m2 = NULL;
    if (ig_model_open(&m2, f.ctx, f.be, dir, 1, 3 * 8 * 12, NULL, &err) != IG_OK)
        fail_msg("%s", err.msg);
    uint64_t n = ig_model_buffer_elems(f.m);
    float *p1 = malloc(n * 4), *p2 = malloc(n * 4);
    assert_int_equal(ig_model_read(f.m, IG_MODEL_PARAMS, p1, &err), IG_OK);
    assert_int_equal(ig_model_read(m2, IG_MODEL_PARAMS, p2, &err), IG_OK);
    assert_memory_equal(p1, p2, n * 4);
    free(p1);
    free(p2);
    /* opened for inference (the layers' insides in one shared region): the same encoder's and
     * decoder's bits */
    const vae_case *c = &cases[1];
    golden_set g;
    read_set(&f, c, &g);
    int N = c->B * c->F;
    size_t nm = (size_t)N * c->h * c->w * 2 * c->C, nx = (size_t)N * c->H * c->W * 3;
    float *m1 = malloc(nm * 4), *m2v = malloc(nm * 4), *d1 = malloc(nx * 4), *d2 = malloc(nx * 4);
    float *z = tensor_f32(g.expected, "z", (size_t)N * c->h * c->w * c->C);
    assert_int_equal(ig_model_vae_encode(f.m, g.frames, N, c->H, c->W, m1, &err), IG_OK);
    assert_int_equal(ig_model_vae_encode(m2, g.frames, N, c->H, c->W, m2v, &err), IG_OK);
    assert_memory_equal(m1, m2v, nm * 4);
    assert_int_equal(ig_model_vae_decode(f.m, z, N, c->h, c->w, d1, &err), IG_OK);
    assert_int_equal(ig_model_vae_decode(m2, z, N, c->h, c->w, d2, &err), IG_OK);
    assert_memory_equal(d1, d2, nx * 4);
    free(m1), free(m2v), free(d1), free(d2), free(z);
    free_set(&g);
    ig_model_free(m2);
    igt_rmtree(dir);
    free(dir);
    close_model(&f);
}

/* the value of a labelled line of an evaluation */
static double eval_line(const ig_eval_result *r, const char *label) {
    for (size_t k = 0; k < r->n_lines; k++) {
        size_t n = strlen(label);
        if (!strncmp(r->lines[k], label, n) && r->lines[k][n] == ' ')
            return strtod(r->lines[k] + n + 1, NULL);
    }
    fail_msg("no line '%s'", label);
    return 0;
}

/* ingot eval of the golden model directory: with a noise file (clips 0 .. N-1, one a
 * micro-batch), PyTorch's terms; its loss the terms with vae.kl_weight's default; PSNR as its
 * formula from the reconstruction; the keyed noise of the validation feed reproducible, another
 * seed another; a noise file of another shape refused naming both */
static void test_eval(void **state) {
    (void)state;
    const vae_case *c = &cases[0];
    fixture f;
    open_model(&f, c, 2, 0, IG_RECOMPUTE_NONE);
    golden_set g;
    read_set(&f, c, &g);
    char *dir = igt_mkdtemp();
    const char *prefix = strdup(igt_fmt("%s/clips", dir)),
               *noise = strdup(igt_fmt("%s/noise.st", dir));
    igt_write_clip_shard(prefix, g.frames, c->B, c->F, c->H, c->W, NULL);
    ig_err err = {0};
    ig_st_writer *w = NULL;
    uint64_t ns[5] = {(uint64_t)c->B, (uint64_t)c->F, (uint64_t)c->h, (uint64_t)c->w,
                      (uint64_t)c->C};
    assert_int_equal(ig_st_writer_create(&w, NULL, noise, 1, &err), IG_OK);
    assert_int_equal(ig_st_writer_add(w, "noise", IG_ST_F32, ns, 5, g.noise, &err), IG_OK);
    assert_int_equal(ig_st_writer_commit(w, NULL, &err), IG_OK);
    const char *paths[] = {prefix};
    ig_data_config dc = {.path = paths, .n_path = 1, .seed = 5, .cache_dir = ""};
    ig_eval_opts o = {.data = &dc, .micro_batch = 1, .batches = 2, .noise_file = noise};
    ig_eval_result *r = calloc(3, sizeof *r);
    if (ig_model_evaluate(f.ctx, f.be, golden(c, ""), &o, &r[0], &err) != IG_OK)
        fail_msg("%s", err.msg);
    double rec = eval_line(&r[0], "reconstruction"), kl = eval_line(&r[0], "kl");
    float want[2];
    assert_int_equal(ig_st_tensor_to_f32(ig_st_file_find(g.expected, "l1"), &want[0], 1, NULL),
                     IG_OK);
    assert_int_equal(ig_st_tensor_to_f32(ig_st_file_find(g.expected, "kl"), &want[1], 1, NULL),
                     IG_OK);
    if (fabs(rec - want[0]) > 1e-5 * want[0] || fabs(kl - want[1]) > 1e-5 * want[1])
        fail_msg("eval --noise: reconstruction %.9g kl %.9g, torch %.9g %.9g", rec, kl, want[0],
                 want[1]);
    assert_true(fabs(r[0].loss - (rec + 1e-6 * kl)) <= 1e-6 * r[0].loss);
    assert_non_null(strstr(r[0].what, "2 clips with the noise of"));
    /* PSNR of the torch reconstruction of the same z, on the 8-bit scale */
    size_t nx = (size_t)c->B * c->F * c->H * c->W * 3;
    float *dec = tensor_f32(g.expected, "decoded", nx);
    double se = 0;
    for (size_t i = 0; i < nx; i++) {
        double p = ((double)dec[i] + 1) * 127.5;
        p = p < 0 ? 0 : p > 255 ? 255 : p;
        se += (p - g.frames[i]) * (p - g.frames[i]);
    }
    double psnr = 10 * log10(255.0 * 255.0 / (se / (double)nx));
    if (fabs(eval_line(&r[0], "psnr") - psnr) > 1e-3)
        fail_msg("psnr %.6f, torch's reconstruction %.6f", eval_line(&r[0], "psnr"), psnr);
    free(dec);
    /* the validation feed's keyed noise: twice the same, another seed another */
    o.noise_file = NULL;
    for (int k = 0; k < 2; k++)
        if (ig_model_evaluate(f.ctx, f.be, golden(c, ""), &o, &r[1 + k], &err) != IG_OK)
            fail_msg("%s", err.msg);
    assert_memory_equal(r[1].lines, r[2].lines, sizeof r[1].lines);
    assert_true(eval_line(&r[1], "kl") == kl); /* the KL term does not depend on the noise */
    dc.seed = 6;
    assert_int_equal(ig_model_evaluate(f.ctx, f.be, golden(c, ""), &o, &r[2], &err), IG_OK);
    assert_true(eval_line(&r[2], "reconstruction") != eval_line(&r[1], "reconstruction"));
    /* noise of another latent shape */
    ns[4] = 3;
    assert_int_equal(ig_st_writer_create(&w, NULL, noise, 1, &err), IG_OK);
    assert_int_equal(ig_st_writer_add(w, "noise", IG_ST_F32, ns, 5, g.noise, &err), IG_OK);
    assert_int_equal(ig_st_writer_commit(w, NULL, &err), IG_OK);
    o.noise_file = noise;
    expect_error(ig_model_evaluate(f.ctx, f.be, golden(c, ""), &o, &r[0], &err), &err,
                 "tensor \"noise\" is [2, 2, 4, 4, 3]; clip 0's latents are [2, 4, 4, 4]");
    free(r);
    free_set(&g);
    igt_rmtree(dir);
    free(dir);
    free((void *)prefix);
    free((void *)noise);
    close_model(&f);
}

/* ---- Stable Diffusion's VAE's shape ---------------------------------------------------------- */

/* a file tensor's value at element i: its own pattern, so a transposition shows */
static float sd_value(uint32_t tensor, uint64_t i) {
    return (float)((int)((i * 2654435761u + tensor * 97u) % 2001u) - 1000) * 1e-5f;
}

typedef struct sd_fill {
    uint32_t tensor;
} sd_fill;

static ig_status sd_fill_fn(void *user, uint64_t offset, void *dst, size_t len, ig_err *err) {
    (void)err;
    const sd_fill *s = user;
    float *out = dst;
    for (size_t k = 0; k < len / 4; k++) out[k] = sd_value(s->tensor, offset / 4 + k);
    return IG_OK;
}

typedef struct sd_writer {
    ig_st_writer *w;
    sd_fill fills[400];
    uint32_t n;
    uint64_t params;
} sd_writer;

static void sd_add(sd_writer *s, const char *name, int ndim, uint64_t a, uint64_t b, uint64_t c,
                   uint64_t d) {
    uint64_t shape[4] = {a, b, c, d};
    assert_true(s->n < 400);
    s->fills[s->n].tensor = s->n;
    ig_err err = {0};
    if (ig_st_writer_add_fill(s->w, name, IG_ST_F32, shape, ndim, sd_fill_fn, &s->fills[s->n],
                              &err) != IG_OK)
        fail_msg("%s", err.msg);
    uint64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    s->params += n;
    s->n++;
}

static void sd_conv(sd_writer *s, const char *prefix, uint64_t cin, uint64_t cout, uint64_t k) {
    sd_add(s, igt_fmt("%s.weight", prefix), 4, cout, cin, k, k);
    sd_add(s, igt_fmt("%s.bias", prefix), 1, cout, 0, 0, 0);
}

static void sd_norm(sd_writer *s, const char *prefix, uint64_t C) {
    sd_add(s, igt_fmt("%s.weight", prefix), 1, C, 0, 0, 0);
    sd_add(s, igt_fmt("%s.bias", prefix), 1, C, 0, 0, 0);
}

static void sd_resnet(sd_writer *s, const char *p, uint64_t cin, uint64_t cout) {
    char pre[96];
    snprintf(pre, sizeof pre, "%s", p);
    sd_norm(s, igt_fmt("%s.norm1", pre), cin);
    sd_conv(s, igt_fmt("%s.conv1", pre), cin, cout, 3);
    sd_norm(s, igt_fmt("%s.norm2", pre), cout);
    sd_conv(s, igt_fmt("%s.conv2", pre), cout, cout, 3);
    if (cin != cout) sd_conv(s, igt_fmt("%s.conv_shortcut", pre), cin, cout, 1);
}

/* the mid block, with the attention's older names (query, key, value, proj_attn) */
static void sd_mid(sd_writer *s, const char *side, uint64_t C) {
    sd_resnet(s, igt_fmt("%s.mid_block.resnets.0", side), C, C);
    sd_norm(s, igt_fmt("%s.mid_block.attentions.0.group_norm", side), C);
    static const char *const lin[] = {"query", "key", "value", "proj_attn"};
    for (int k = 0; k < 4; k++) {
        sd_add(s, igt_fmt("%s.mid_block.attentions.0.%s.weight", side, lin[k]), 2, C, C, 0, 0);
        sd_add(s, igt_fmt("%s.mid_block.attentions.0.%s.bias", side, lin[k]), 1, C, 0, 0, 0);
    }
    sd_resnet(s, igt_fmt("%s.mid_block.resnets.1", side), C, C);
}

/* sd-vae-ft-ema's config.json and a diffusion_pytorch_model.safetensors of its shapes in dir */
static uint64_t write_sd(ig_ctx *ctx, const char *dir, uint32_t *conv1_tensor) {
    static const char config[] =
        "{\n  \"_class_name\": \"AutoencoderKL\",\n  \"_diffusers_version\": \"0.4.2\",\n"
        "  \"act_fn\": \"silu\",\n  \"block_out_channels\": [128, 256, 512, 512],\n"
        "  \"down_block_types\": [\"DownEncoderBlock2D\", \"DownEncoderBlock2D\", "
        "\"DownEncoderBlock2D\", \"DownEncoderBlock2D\"],\n  \"in_channels\": 3,\n"
        "  \"latent_channels\": 4,\n  \"layers_per_block\": 2,\n  \"norm_num_groups\": 32,\n"
        "  \"out_channels\": 3,\n  \"sample_size\": 256,\n  \"up_block_types\": "
        "[\"UpDecoderBlock2D\", \"UpDecoderBlock2D\", \"UpDecoderBlock2D\", \"UpDecoderBlock2D\"]\n"
        "}\n";
    igt_write(igt_fmt("%s/config.json", dir), config, strlen(config));
    sd_writer s = {0};
    ig_err err = {0};
    if (ig_st_writer_create(&s.w, ctx, igt_fmt("%s/diffusion_pytorch_model.safetensors", dir), 1,
                            &err) != IG_OK)
        fail_msg("%s", err.msg);
    const uint64_t ch[4] = {128, 256, 512, 512};
    sd_conv(&s, "encoder.conv_in", 3, 128, 3);
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 2; j++) {
            if (i == 1 && j == 0) *conv1_tensor = s.n + 2; /* norm1's two, then conv1.weight */
            sd_resnet(&s, igt_fmt("encoder.down_blocks.%d.resnets.%d", i, j),
                      j ? ch[i] : ch[i ? i - 1 : 0], ch[i]);
        }
        if (i < 3)
            sd_conv(&s, igt_fmt("encoder.down_blocks.%d.downsamplers.0.conv", i), ch[i], ch[i], 3);
    }
    sd_mid(&s, "encoder", 512);
    sd_norm(&s, "encoder.conv_norm_out", 512);
    sd_conv(&s, "encoder.conv_out", 512, 8, 3);
    sd_conv(&s, "quant_conv", 8, 8, 1);
    sd_conv(&s, "post_quant_conv", 4, 4, 1);
    sd_conv(&s, "decoder.conv_in", 4, 512, 3);
    sd_mid(&s, "decoder", 512);
    for (int i = 0; i < 4; i++) {
        uint64_t c = ch[3 - i], prev = i ? ch[4 - i] : c;
        for (int j = 0; j < 3; j++)
            sd_resnet(&s, igt_fmt("decoder.up_blocks.%d.resnets.%d", i, j), j ? c : prev, c);
        if (i < 3) sd_conv(&s, igt_fmt("decoder.up_blocks.%d.upsamplers.0.conv", i), c, c, 3);
    }
    sd_norm(&s, "decoder.conv_norm_out", 128);
    sd_conv(&s, "decoder.conv_out", 128, 3, 3);
    if (ig_st_writer_commit(s.w, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    return s.params;
}

static void test_sd_shape(void **state) {
    (void)state;
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 2;
    assert_int_equal(ig_ctx_create(&ctx, &co, &err), IG_OK);
    ig_backend_opts bo = ig_backend_opts_default();
    assert_int_equal(ig_backend_create(&be, ctx, &bo, &err), IG_OK);
    const char *keep = getenv("IG_VAE_SD_DIR");
    char *dir = keep && *keep ? strdup(keep) : igt_mkdtemp();
    uint32_t conv1 = 0;
    uint64_t written = write_sd(ctx, dir, &conv1);
    assert_true(written == 83653863ull); /* sd-vae-ft-ema's count */
    ig_model_config c;
    int32_t eod;
    if (ig_hf_read_config(ctx, dir, &c, &eod, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_true(ig_model_num_params(&c) == 83653863ull);
    ig_model *m = NULL;
    if (ig_model_open(&m, ctx, be, dir, 1, 32 * 32, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_true(ig_model_num_params(ig_model_shape(m)) == 83653863ull);
    float *p = malloc(ig_model_buffer_elems(m) * sizeof *p);
    assert_int_equal(ig_model_read(m, IG_MODEL_PARAMS, p, &err), IG_OK);
    /* a convolution [256, 128, 3, 3] there, [256, 3, 3, 128] here */
    const ig_model_tensor *t =
        ig_model_tensor_find(m, "encoder.down_blocks.1.resnets.0.conv1.weight");
    assert_non_null(t);
    assert_true(t->shape[0] == 256 && t->shape[1] == 9 * 128);
    for (uint64_t o = 0; o < 256; o += 37)
        for (uint64_t kh = 0; kh < 3; kh++)
            for (uint64_t kw = 0; kw < 3; kw++)
                for (uint64_t ci = 0; ci < 128; ci += 13) {
                    float want = sd_value(conv1, ((o * 128 + ci) * 3 + kh) * 3 + kw);
                    float got = p[t->offset + ((o * 3 + kh) * 3 + kw) * 128 + ci];
                    if (got != want)
                        fail_msg("conv1 [%llu, %llu, %llu, %llu]: %g, the file's %g",
                                 (unsigned long long)o, (unsigned long long)kh,
                                 (unsigned long long)kw, (unsigned long long)ci, got, want);
                }
    /* "key" is the fused q | k | v's second third */
    const ig_model_tensor *qkv =
        ig_model_tensor_find(m, "decoder.mid_block.attentions.0.to_qkv.bias");
    assert_non_null(qkv);
    assert_true(qkv->shape[0] == 3 * 512);
    ig_st_file *f = NULL;
    assert_int_equal(
        ig_st_file_open(&f, ctx, igt_fmt("%s/diffusion_pytorch_model.safetensors", dir), &err),
        IG_OK);
    const ig_st_tensor *kb = ig_st_file_find(f, "decoder.mid_block.attentions.0.key.bias");
    assert_non_null(kb);
    assert_memory_equal(p + qkv->offset + 512, ig_st_tensor_data(kb), 512 * sizeof(float));
    ig_st_file_free(f);
    free(p);
    ig_model_free(m);
    if (!(keep && *keep)) igt_rmtree(dir);
    free(dir);
    ig_backend_free(be);
    ig_ctx_free(ctx);
}

int main(void) {
    if (getenv("IG_VAE_SD_DIR") && *getenv("IG_VAE_SD_DIR")) { /* tests/cli/vae.sh's file alone */
        const struct CMUnitTest sd[] = {cmocka_unit_test(test_sd_shape)};
        return cmocka_run_group_tests(sd, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens),
        cmocka_unit_test(test_goldens_reference),
        cmocka_unit_test(test_recompute_threads),
        cmocka_unit_test(test_draws_keyed),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_export_round_trip),
        cmocka_unit_test(test_eval),
        cmocka_unit_test(test_sd_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
