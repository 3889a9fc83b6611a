/* test_train.c - unit tests of the trainer's models: for GPT-2 and for Llama (untied with
 * grouped-query attention, and tied), the loss, every parameter's gradient and the parameters
 * after 3 AdamW steps with clipping, against golden values computed by PyTorch in float64
 * (tests/data/golden/gpt/make_gpt_goldens.py, tests/data/golden/llama/make_llama_goldens.py) on
 * the fast and the reference CPU kernels; the same bits for any thread count; initial weights
 * keyed by (seed, name, index); a tiny model overfitting one batch; the learning-rate schedules;
 * Hugging Face import and export round trips.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend_internal.h"
#include "preprocess/preprocess.h"
#include "train/formats/safetensors.h"
#include "train/train.h"

enum { L = 2, NH = 2, C = 32, T = 16, V = 100, B = 2 };

/* A golden case: a Hugging Face model directory (its config.json says the shape) with its
 * initial weights, a micro-batch of B x T tokens and PyTorch's expected values. */
typedef struct golden_case {
    const char *dir; /* under tests/data/golden */
    const char *init, *tokens, *expected;
    int B, T;
} golden_case;

static const golden_case gpt2_tiny = {
    "gpt", "tiny_init.safetensors", "tiny_tokens.bin", "tiny_expected.safetensors", 2, 16};
static const golden_case llama_tiny = {
    "llama/tiny", "init.safetensors", "tokens.bin", "expected.safetensors", 2, 16};
static const golden_case llama_tied = {
    "llama/tied", "init.safetensors", "tokens.bin", "expected.safetensors", 2, 8};

static const char *golden_in(const golden_case *g, const char *name) {
    return igt_fmt("%s/tests/data/golden/%s/%s", igt_source_dir(), g->dir, name);
}
static const char *golden(const char *name) {
    return golden_in(&gpt2_tiny, name);
}

static ig_model_config tiny(void) {
    ig_model_config c = {.n_layer = L, .n_head = NH, .d_model = C, .seq_len = T, .vocab_size = V};
    ig_err err = {0};
    assert_int_equal(ig_model_config_check(&c, &err), IG_OK);
    return c;
}

typedef struct fixture {
    const golden_case *g;
    ig_ctx *ctx;
    ig_backend *be;
    ig_model *m;
    ig_optimizer *opt;
    int32_t tokens[64 * 64];
    ig_st_file *expected;
} fixture;

static void open_case(fixture *f, const golden_case *g, int threads, int reference) {
    memset(f, 0, sizeof *f);
    f->g = g;
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = threads;
    ig_err err = {0};
    assert_int_equal(ig_ctx_create(&f->ctx, &co, &err), IG_OK);
    ig_backend_opts bo = ig_backend_opts_default();
    bo.reference = reference;
    if (ig_backend_create(&f->be, f->ctx, &bo, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_model_config c;
    int32_t eod;
    if (ig_hf_read_config(f->ctx, golden_in(g, ""), &c, &eod, &err) != IG_OK)
        fail_msg("%s", err.msg);
    if (ig_model_create(&f->m, f->ctx, f->be, &c, g->B, g->T, 1234, &err) != IG_OK)
        fail_msg("%s", err.msg);
    if (ig_optimizer_create(&f->opt, f->ctx, f->m, &err) != IG_OK) fail_msg("%s", err.msg);
    if (ig_hf_load(f->ctx, f->m, golden_in(g, g->init), &err) != IG_OK) fail_msg("%s", err.msg);
    size_t len;
    char *tok = igt_read(golden_in(g, g->tokens), &len);
    assert_int_equal(len, (size_t)g->B * (size_t)(g->T + 1) * sizeof(int32_t));
    memcpy(f->tokens, tok, len);
    free(tok);
    if (ig_st_file_open(&f->expected, f->ctx, golden_in(g, g->expected), &err) != IG_OK)
        fail_msg("%s", err.msg);
}

static void open_fixture(fixture *f, int threads, int reference) {
    open_case(f, &gpt2_tiny, threads, reference);
}

static void close_fixture(fixture *f) {
    ig_st_file_free(f->expected);
    ig_optimizer_free(f->opt);
    ig_model_free(f->m);
    ig_backend_free(f->be);
    ig_ctx_free(f->ctx);
}

static double expected_scalar(const fixture *f, const char *name) {
    const ig_st_tensor *t = ig_st_file_find(f->expected, name);
    if (!t) fail_msg("golden %s is missing", name);
    float v;
    assert_int_equal(ig_st_tensor_to_f32(t, &v, 1, NULL), IG_OK);
    return v;
}

/* The golden values prefix.NAME of tensor t (Llama's fused q|k|v: its three tensors, one after
 * the other): a malloc'd array, its length in *n. */
static float *golden_values(const fixture *f, const char *prefix, const ig_model_tensor *t,
                            uint64_t *n) {
    const char *fused = strstr(t->name, "qkv_proj");
    const char *parts[3] = {"q_proj", "k_proj", "v_proj"};
    int np = fused ? 3 : 1;
    float *out = NULL;
    *n = 0;
    for (int k = 0; k < np; k++) {
        const char *name = fused ? igt_fmt("%s%.*s%s%s", prefix, (int)(fused - t->name), t->name,
                                           parts[k], fused + strlen("qkv_proj"))
                                 : igt_fmt("%s%s", prefix, t->name);
        const ig_st_tensor *g = ig_st_file_find(f->expected, name);
        if (!g) fail_msg("golden %s is missing", name);
        uint64_t m = ig_st_tensor_numel(g);
        out = realloc(out, (*n + m) * sizeof *out);
        assert_int_equal(ig_st_tensor_to_f32(g, out + *n, m, NULL), IG_OK);
        *n += m;
    }
    return out;
}

/* ||got - want|| / ||want|| over tensor t of the model's buffer against golden prefix.NAME (the
 * golden vocabulary tensors have V rows; the padded rows must be 0). skip_lo..skip_hi: elements
 * left out. */
static double rel_error_skip(const fixture *f, const float *buf, const char *prefix,
                             const ig_model_tensor *t, uint64_t skip_lo, uint64_t skip_hi) {
    uint64_t n = 0;
    float *want = golden_values(f, prefix, t, &n);
    double d = 0, s = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (i >= skip_lo && i < skip_hi) continue;
        double e = (double)buf[t->offset + i] - want[i];
        d += e * e;
        s += (double)want[i] * want[i];
    }
    for (uint64_t i = n; i < t->numel; i++) assert_true(buf[t->offset + i] == 0.0f);
    free(want);
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

static double rel_error(const fixture *f, const float *buf, const char *prefix,
                        const ig_model_tensor *t) {
    return rel_error_skip(f, buf, prefix, t, 0, 0);
}

/* The loss and every gradient of the initial model, fast and reference kernels, within 1e-5
 * (relative, per tensor in L2) of PyTorch's float64 values. */
static void check_case_grads(const golden_case *g, int reference) {
    fixture f;
    open_case(&f, g, 2, reference);
    ig_err err = {0};
    double loss = 0;
    uint64_t counted = 0;
    assert_int_equal(ig_model_zero_grads(f.m, &err), IG_OK);
    if (ig_model_forward_backward(f.m, f.tokens, g->B, g->T, NULL, 1.0f, &loss, &counted, &err) !=
        IG_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(counted, g->B * g->T);
    double want = expected_scalar(&f, "loss");
    if (fabs(loss - want) > 1e-5 * fabs(want))
        fail_msg("%s: loss %.9g, PyTorch %.9g", g->dir, loss, want);
    uint64_t n = ig_model_buffer_elems(f.m);
    float *grads = malloc(n * sizeof *grads);
    assert_int_equal(ig_model_read(f.m, IG_MODEL_GRADS, grads, &err), IG_OK);
    for (size_t i = 0; i < ig_model_num_tensors(f.m); i++) {
        const ig_model_tensor *t = ig_model_tensor_at(f.m, i);
        double e = rel_error(&f, grads, "grad.", t);
        if (e > 1e-5) fail_msg("%s: %s: gradient off by %.3g (relative)", g->dir, t->name, e);
    }
    /* the forward alone gives the same loss */
    double loss2 = 0;
    assert_int_equal(ig_model_forward(f.m, f.tokens, g->B, g->T, NULL, &loss2, NULL, &err), IG_OK);
    assert_true(loss2 == loss);
    free(grads);
    close_fixture(&f);
}

static void check_loss_and_grads(int reference) {
    check_case_grads(&gpt2_tiny, reference);
}

static void test_golden_gradients(void **state) {
    (void)state;
    check_loss_and_grads(0);
}

static void test_golden_gradients_reference(void **state) {
    (void)state;
    check_loss_and_grads(1);
}

static void test_llama_golden_gradients(void **state) {
    (void)state;
    for (int reference = 0; reference < 2; reference++) {
        check_case_grads(&llama_tiny, reference);
        check_case_grads(&llama_tied, reference);
    }
}

/* 3 steps of AdamW with clipping: the losses, the norms and the final parameters. */
static void run_steps(fixture *f, int steps, double *losses, double *norms) {
    ig_err err = {0};
    for (int s = 1; s <= steps; s++) {
        double loss = 0, norm = 0;
        assert_int_equal(ig_model_zero_grads(f->m, &err), IG_OK);
        if (ig_model_forward_backward(f->m, f->tokens, f->g->B, f->g->T, NULL, 1.0f, &loss, NULL,
                                      &err) != IG_OK)
            fail_msg("%s", err.msg);
        assert_int_equal(ig_model_grad_norm(f->m, &norm, &err), IG_OK);
        double coef = 1.0 / (norm + 1e-6);
        float scale = coef < 1 ? (float)coef : 1.0f;
        ig_adamw_hparams h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
        assert_int_equal(ig_optimizer_step(f->opt, s, &h, scale, &err), IG_OK);
        losses[s - 1] = loss;
        norms[s - 1] = norm;
    }
}

static void check_case_adamw(const golden_case *g, int reference) {
    fixture f;
    open_case(&f, g, 2, reference);
    double losses[3], norms[3];
    run_steps(&f, 3, losses, norms);
    for (int s = 0; s < 3; s++) {
        double wl = expected_scalar(&f, igt_fmt("loss_step%d", s + 1));
        double wn = expected_scalar(&f, igt_fmt("grad_norm_step%d", s + 1));
        if (fabs(losses[s] - wl) > 1e-5 * fabs(wl) || fabs(norms[s] - wn) > 1e-5 * fabs(wn))
            fail_msg("%s: step %d: loss %.9g norm %.9g; PyTorch %.9g %.9g", g->dir, s + 1,
                     losses[s], norms[s], wl, wn);
    }
    uint64_t n = ig_model_buffer_elems(f.m);
    float *p = malloc(n * sizeof *p);
    ig_err err = {0};
    assert_int_equal(ig_model_read(f.m, IG_MODEL_PARAMS, p, &err), IG_OK);
    /* GPT-2's key bias: its gradient is 0 in exact arithmetic (softmax is shift-invariant: it adds
     * the same q.b to every score of a query), so AdamW's normalisation turns rounding noise
     * (1e-10 here, 1e-19 in PyTorch's float64) into steps of up to lr: those elements can only be
     * held to the steps' size. (Llama has no biases.) */
    for (size_t i = 0; i < ig_model_num_tensors(f.m); i++) {
        const ig_model_tensor *t = ig_model_tensor_at(f.m, i);
        int qkv_bias = strstr(t->name, "attn.c_attn.bias") != NULL;
        uint64_t C3 = qkv_bias ? (uint64_t)t->numel / 3 : 0;
        double e = rel_error_skip(&f, p, "param.", t, C3, 2 * C3);
        if (e > 1e-5) fail_msg("%s: %s after 3 steps: off by %.3g (relative)", g->dir, t->name, e);
        if (!qkv_bias) continue;
        uint64_t nw = 0;
        float *want = golden_values(&f, "param.", t, &nw);
        for (uint64_t j = C3; j < 2 * C3; j++)
            if (fabsf(p[t->offset + j] - want[j]) > 3 * 1e-2f)
                fail_msg("%s[%llu] after 3 steps: %g, PyTorch %g: more than 3 steps apart", t->name,
                         (unsigned long long)j, p[t->offset + j], want[j]);
        free(want);
    }
    free(p);
    close_fixture(&f);
}

static void test_golden_adamw(void **state) {
    (void)state;
    for (int reference = 0; reference < 2; reference++) check_case_adamw(&gpt2_tiny, reference);
}

static void test_llama_golden_adamw(void **state) {
    (void)state;
    for (int reference = 0; reference < 2; reference++) {
        check_case_adamw(&llama_tiny, reference);
        check_case_adamw(&llama_tied, reference);
    }
}

/* The same bits (losses, gradients, parameters after steps) for 1, 2 and 3 threads. */
static void test_deterministic_threads(void **state) {
    (void)state;
    const golden_case *cases[] = {&gpt2_tiny, &llama_tiny};
    for (int k = 0; k < 2; k++) {
        float *ref = NULL;
        double ref_loss[3];
        uint64_t n = 0;
        for (int threads = 1; threads <= 3; threads++) {
            fixture f;
            open_case(&f, cases[k], threads, 0);
            double losses[3], norms[3];
            run_steps(&f, 3, losses, norms);
            n = ig_model_buffer_elems(f.m);
            float *p = malloc(n * sizeof *p);
            assert_int_equal(ig_model_read(f.m, IG_MODEL_PARAMS, p, NULL), IG_OK);
            if (!ref) {
                ref = p;
                memcpy(ref_loss, losses, sizeof losses);
            } else {
                assert_memory_equal(ref, p, n * sizeof *p);
                assert_memory_equal(ref_loss, losses, sizeof losses);
                free(p);
            }
            close_fixture(&f);
        }
        free(ref);
    }
}

/* Initial weights: element i of tensor NAME is 0.02 * normal(seed, NAME, i) (0.02 / sqrt(2L) for
 * the residual projections), whatever the batch the model was made for; biases 0, LayerNorm 1,
 * padded vocabulary rows 0. */
static void test_init_keyed(void **state) {
    (void)state;
    ig_ctx *ctx;
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 2;
    assert_int_equal(ig_ctx_create(&ctx, &co, NULL), IG_OK);
    ig_backend *be;
    ig_backend_opts bo = ig_backend_opts_default();
    assert_int_equal(ig_backend_create(&be, ctx, &bo, NULL), IG_OK);
    ig_model_config c = tiny();
    ig_model *a, *b;
    assert_int_equal(ig_model_create(&a, ctx, be, &c, 2, 16, 77, NULL), IG_OK);
    assert_int_equal(ig_model_create(&b, ctx, be, &c, 1, 4, 77, NULL), IG_OK);
    uint64_t n = ig_model_buffer_elems(a);
    assert_int_equal(n, ig_model_num_params(&c)); /* one process: packed */
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    assert_int_equal(ig_model_read(a, IG_MODEL_PARAMS, pa, NULL), IG_OK);
    assert_int_equal(ig_model_read(b, IG_MODEL_PARAMS, pb, NULL), IG_OK);
    assert_memory_equal(pa, pb, n * sizeof *pa);
    const ig_model_tensor *w = ig_model_tensor_find(a, "transformer.h.1.attn.c_attn.weight");
    const ig_model_tensor *r = ig_model_tensor_find(a, "transformer.h.0.mlp.c_proj.weight");
    const ig_model_tensor *e = ig_model_tensor_find(a, "transformer.wte.weight");
    const ig_model_tensor *lb = ig_model_tensor_find(a, "transformer.ln_f.bias");
    const ig_model_tensor *lw = ig_model_tensor_find(a, "transformer.h.0.ln_2.weight");
    assert_non_null(w);
    ig_rng_key kw = ig_rng_key_make(77, w->name), kr = ig_rng_key_make(77, r->name);
    /* the standard deviation is a float: 0.02f, and 0.02 / sqrt(2 L) rounded to float */
    double sw = 0.02f, sr = (float)(0.02 / sqrt(2.0 * L));
    for (uint64_t i = 0; i < w->numel; i += 7)
        assert_true(pa[w->offset + i] == (float)(sw * ig_rng_normal(kw, i)));
    for (uint64_t i = 0; i < r->numel; i += 7)
        assert_true(pa[r->offset + i] == (float)(sr * ig_rng_normal(kr, i)));
    for (uint64_t i = (uint64_t)V * C; i < e->numel; i++) assert_true(pa[e->offset + i] == 0.0f);
    for (uint64_t i = 0; i < lb->numel; i++) assert_true(pa[lb->offset + i] == 0.0f);
    for (uint64_t i = 0; i < lw->numel; i++) assert_true(pa[lw->offset + i] == 1.0f);
    assert_int_equal(ig_model_num_tensors(a), 4 + 12 * L);
    assert_true(w->decay && e->decay && !lb->decay && !lw->decay);
    free(pa);
    free(pb);
    ig_model_free(a);
    ig_model_free(b);
    ig_backend_free(be);
    ig_ctx_free(ctx);
}

/* A tiny model learns one batch by heart. */
static void test_overfit_one_batch(void **state) {
    (void)state;
    fixture f;
    open_fixture(&f, 2, 0);
    ig_err err = {0};
    double first = 0, loss = 0;
    for (int s = 1; s <= 150; s++) {
        assert_int_equal(ig_model_zero_grads(f.m, &err), IG_OK);
        assert_int_equal(
            ig_model_forward_backward(f.m, f.tokens, B, T, NULL, 1.0f, &loss, NULL, &err), IG_OK);
        if (s == 1) first = loss;
        ig_adamw_hparams h = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.0f};
        assert_int_equal(ig_optimizer_step(f.opt, s, &h, 1.0f, &err), IG_OK);
    }
    if (!(loss < 0.05 && first > 4)) fail_msg("loss %.4f -> %.4f: did not overfit", first, loss);
    close_fixture(&f);
}

/* A family refuses a backend that lacks one of its operations, naming it; another family that
 * does not use it is unaffected. */
/* A family's own fields are its own: a shape made from model.* keys compares equal, byte for byte,
 * to the same shape made by hand (no other family's defaults ride along), a llama keeps its own
 * values, and shapes are compared key by key, the family's own keys last. */
static void test_own_fields(void **state) {
    (void)state;
    ig_model_config clean = {
        .n_layer = 2, .n_head = 2, .d_model = 32, .seq_len = 16, .vocab_size = 100};
    ig_model_config parsed, l, l2;
    ig_err err = {0};
    assert_int_equal(ig_model_config_check(&clean, &err), IG_OK);
    assert_int_equal(ig_model_config_parse(&parsed,
                                           "arch: gpt2, n_layer: 2, n_head: 2, d_model: 32, "
                                           "seq_len: 16, vocab_size: 100",
                                           &err),
                     IG_OK);
    assert_memory_equal(&clean, &parsed, sizeof clean);
    assert_string_equal(ig_model_config_differs(&clean, &parsed), "");
    const char *llama = "arch: llama, n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, "
                        "vocab_size: 100";
    char text[256];
    snprintf(text, sizeof text, "%s, rope_theta: 500000, ffn_hidden: 96", llama);
    assert_int_equal(ig_model_config_parse(&l, text, &err), IG_OK);
    assert_int_equal(ig_model_config_parse(&l2, llama, &err), IG_OK);
    assert_string_equal(ig_model_config_differs(&l, &l2), "model.ffn_hidden");
    assert_string_equal(ig_model_config_differs(&l, &clean), "model.arch");
    char d[512];
    assert_non_null(strstr(ig_model_describe(&l, d, sizeof d), "ffn 96"));
    /* a key of another family is refused, naming it */
    assert_int_equal(ig_model_config_parse(&l, "arch: gpt2, vocab_size: 100, n_kv_heads: 1", &err),
                     IG_ERR_CONFIG);
    assert_non_null(strstr(err.msg, "model.n_kv_heads is a key of model.arch llama"));
    assert_int_equal(ig_model_config_parse(&l, "arch: dit, bogus: 1", &err), IG_ERR_CONFIG);
}

static void test_family_needs_ops(void **state) {
    (void)state;
    ig_ctx *ctx;
    assert_int_equal(ig_ctx_create(&ctx, NULL, NULL), IG_OK);
    ig_backend *be;
    ig_err err = {0};
    assert_int_equal(ig_backend_create(&be, ctx, NULL, &err), IG_OK);
    const ig_backend_ops *keep = be->ops;
    ig_backend_ops partial = *keep;
    partial.rope_forward = NULL;
    be->ops = &partial;
    ig_model_config llama;
    assert_int_equal(ig_model_config_parse(&llama,
                                           "arch: llama, n_layer: 1, n_head: 2, d_model: 16, "
                                           "seq_len: 8, vocab_size: 50",
                                           &err),
                     IG_OK);
    ig_model *m = NULL;
    assert_int_equal(ig_model_create(&m, ctx, be, &llama, 1, 8, 1, &err), IG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg,
                           "the cpu backend has no rope_forward kernel, which llama models "
                           "need"));
    ig_model_config c = tiny();
    assert_int_equal(ig_model_create(&m, ctx, be, &c, 1, 8, 1, &err), IG_OK);
    ig_model_free(m);
    be->ops = keep;
    ig_backend_free(be);
    ig_ctx_free(ctx);
}

static void test_lr_schedules(void **state) {
    (void)state;
    ig_train_config t;
    memset(&t, 0, sizeof t);
    t.lr = 1.0;
    t.min_lr = 0.1;
    t.warmup = 10;
    t.steps = 110;
    t.decay_fraction = 0.2;
    t.schedule = IG_LR_COSINE;
    assert_true(fabs(ig_train_lr(&t, 0) - 0.1) < 1e-12); /* warmup: (step + 1) / warmup */
    assert_true(fabs(ig_train_lr(&t, 9) - 1.0) < 1e-12);
    assert_true(fabs(ig_train_lr(&t, 10) - 1.0) < 1e-12);  /* cosine starts at the peak */
    assert_true(fabs(ig_train_lr(&t, 60) - 0.55) < 1e-12); /* halfway: the mean */
    assert_true(fabs(ig_train_lr(&t, 110) - 0.1) < 1e-12);
    t.schedule = IG_LR_LINEAR;
    assert_true(fabs(ig_train_lr(&t, 60) - 0.55) < 1e-12);
    t.schedule = IG_LR_CONSTANT;
    assert_true(ig_train_lr(&t, 100) == 1.0);
    t.schedule = IG_LR_WSD; /* stable until the last 22 steps, then linear to min_lr */
    assert_true(ig_train_lr(&t, 87) == 1.0);
    assert_true(fabs(ig_train_lr(&t, 109) - 0.1) < 1e-12);
    assert_true(ig_train_lr(&t, 98) < 1.0 && ig_train_lr(&t, 98) > 0.1);
}

/* Hugging Face export -> import gives the same parameters, bit for bit, and the same loss. */
static void test_hf_round_trip(void **state) {
    (void)state;
    fixture f;
    open_fixture(&f, 2, 0);
    char *dir = igt_mkdtemp();
    ig_err err = {0};
    if (ig_hf_export(f.ctx, f.m, 50, igt_fmt("%s/hf", dir), 0, &err) != IG_OK)
        fail_msg("%s", err.msg);
    ig_model_config c;
    int32_t eod = -2;
    assert_int_equal(ig_hf_read_config(f.ctx, igt_fmt("%s/hf", dir), &c, &eod, &err), IG_OK);
    assert_int_equal(c.n_layer, L);
    assert_int_equal(c.n_head, NH);
    assert_int_equal(c.vocab_size, V);
    assert_int_equal(eod, 50);
    ig_model *m2;
    assert_int_equal(ig_model_create(&m2, f.ctx, f.be, &c, B, T, 9, &err), IG_OK);
    assert_int_equal(ig_hf_load(f.ctx, m2, igt_fmt("%s/hf/model.safetensors", dir), &err), IG_OK);
    uint64_t n = ig_model_buffer_elems(m2);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_int_equal(ig_model_read(f.m, IG_MODEL_PARAMS, a, NULL), IG_OK);
    assert_int_equal(ig_model_read(m2, IG_MODEL_PARAMS, b, NULL), IG_OK);
    assert_memory_equal(a, b, n * sizeof *a);
    /* the file: HF names, wte of V rows, no lm_head, format pt */
    ig_st_file *sf;
    assert_int_equal(ig_st_file_open(&sf, f.ctx, igt_fmt("%s/hf/model.safetensors", dir), &err),
                     IG_OK);
    const ig_st_tensor *wte = ig_st_file_find(sf, "transformer.wte.weight");
    assert_non_null(wte);
    assert_int_equal(ig_st_tensor_shape(wte)[0], V);
    assert_null(ig_st_file_find(sf, "lm_head.weight"));
    assert_string_equal(ig_st_file_metadata(sf, "format"), "pt");
    ig_st_file_free(sf);
    /* a model.safetensors alone is read from ingot's metadata, whose n_head must be a number:
     * "2abc" is refused (it was read as 2) */
    ig_st_file *src;
    assert_int_equal(ig_st_file_open(&src, f.ctx, igt_fmt("%s/hf/model.safetensors", dir), &err),
                     IG_OK);
    for (int k = 0; k < 2; k++) {
        const char *heads = k ? "2abc" : "2";
        ig_st_writer *w;
        const char *p = igt_fmt("%s/meta%d.safetensors", dir, k);
        assert_int_equal(ig_st_writer_create(&w, f.ctx, p, 0, &err), IG_OK);
        for (size_t i = 0; i < ig_st_file_count(src); i++) {
            const ig_st_tensor *x = ig_st_file_tensor(src, i);
            assert_int_equal(ig_st_writer_add(w, ig_st_tensor_name(x), ig_st_tensor_dtype(x),
                                              ig_st_tensor_shape(x), ig_st_tensor_ndim(x),
                                              ig_st_tensor_data(x), &err),
                             IG_OK);
        }
        assert_int_equal(ig_st_writer_set_metadata(w, "n_head", heads, &err), IG_OK);
        assert_int_equal(ig_st_writer_commit(w, NULL, &err), IG_OK);
        ig_model_config mc;
        int32_t e2;
        ig_status want = k ? IG_ERR_FORMAT : IG_OK;
        assert_int_equal(ig_hf_read_config(f.ctx, p, &mc, &e2, &err), want);
        if (k)
            assert_non_null(strstr(err.msg, "metadata n_head \"2abc\" is not a number of heads"));
        if (!k) assert_int_equal(mc.n_head, NH);
    }
    ig_st_file_free(src);
    /* exporting again over it needs overwrite */
    assert_int_equal(ig_hf_export(f.ctx, f.m, 50, igt_fmt("%s/hf", dir), 0, &err), IG_ERR_EXISTS);
    /* a file that lacks a tensor is refused with its name */
    assert_int_equal(ig_hf_load(f.ctx, m2, golden("tiny_expected.safetensors"), &err),
                     IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "transformer.wte.weight"));
    free(a);
    free(b);
    ig_model_free(m2);
    igt_rmtree(dir);
    free(dir);
    close_fixture(&f);
}

/* A run whose loss turns NaN stops at that step with a hint, never continues; a model that does
 * not match the config is refused before any step. */
static void test_run_stops_on_nan(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_ctx *ctx;
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 2;
    assert_int_equal(ig_ctx_create(&ctx, &co, NULL), IG_OK);
    ig_err err = {0};
    /* a small shard of the bundled corpus */
    ig_tokenizer *tok;
    assert_int_equal(
        ig_tokenizer_load(&tok, ctx, igt_fmt("%s/data/gpt2", igt_source_dir()), NULL, &err), IG_OK);
    const char *in = igt_fmt("%s/data/tinyshakespeare.jsonl", igt_source_dir());
    char *shard = strdup(igt_fmt("%s/shk", dir));
    ig_preprocess_opts po = ig_preprocess_opts_default();
    po.inputs = &in;
    po.n_inputs = 1;
    po.output_prefix = shard;
    po.tokenizer = tok;
    if (ig_preprocess_text(ctx, &po, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    /* a model with one NaN weight, as a Hugging Face export */
    ig_backend *be;
    assert_int_equal(ig_backend_create(&be, ctx, NULL, &err), IG_OK);
    ig_model_config c = {
        .n_layer = 1, .n_head = 2, .d_model = 32, .seq_len = 16, .vocab_size = 50257};
    assert_int_equal(ig_model_config_check(&c, &err), IG_OK);
    ig_model *m;
    assert_int_equal(ig_model_create(&m, ctx, be, &c, 1, 16, 3, &err), IG_OK);
    uint64_t n = ig_model_buffer_elems(m);
    float *p = malloc(n * sizeof *p);
    assert_int_equal(ig_model_read(m, IG_MODEL_PARAMS, p, &err), IG_OK);
    p[ig_model_tensor_find(m, "transformer.ln_f.weight")->offset] = NAN;
    assert_int_equal(ig_model_write(m, IG_MODEL_PARAMS, p, &err), IG_OK);
    char *hf = strdup(igt_fmt("%s/nan", dir));
    assert_int_equal(ig_hf_export(ctx, m, 50256, hf, 0, &err), IG_OK);
    /* eval and sample refuse it: its weights are not finite, named */
    ig_model *opened = NULL;
    assert_int_equal(ig_model_open(&opened, ctx, be, hf, 1, 0, NULL, &err), IG_OK);
    /* a model opened for eval and sample holds parameters and activations only */
    assert_int_equal(ig_model_zero_grads(opened, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "a model opened for inference has no gradients"));
    assert_int_equal(ig_model_check_finite(opened, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "transformer.ln_f.weight holds NaN values"));
    ig_model_free(opened);

    ig_train_config t;
    memset(&t, 0, sizeof t);
    t.model.n_layer = 1, t.model.n_head = 2, t.model.d_model = 32, t.model.seq_len = 16;
    t.seed = 1;
    t.init_from = hf;
    const char *path[] = {shard};
    t.data = (ig_data_config){.path = path,
                              .n_path = 1,
                              .seed = 1234,
                              .split = "1,0,0",
                              .surplus = 0.005,
                              .cache_dir = ""};
    t.micro_batch = 2, t.steps = 5, t.lr = 1e-3, t.min_lr = 1e-4, t.beta1 = 0.9, t.beta2 = 0.95;
    t.eps = 1e-8, t.grad_clip = 1.0, t.eval_batches = 1, t.ckpt_keep = 1, t.log_every = 1;
    char *run = strdup(igt_fmt("%s/run", dir));
    t.run_dir = run;
    ig_train_opts o = {.cfg = &t, .quiet = 1};
    ig_train_result res;
    assert_int_equal(ig_train_run(ctx, NULL, &o, &res, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "step 1: the loss is NaN"));
    assert_non_null(strstr(err.msg, "optim.lr"));
    assert_int_equal(res.step, 0);
    /* a model of another shape than the config's is refused by its config.json, naming what
     * differs, before the run directory is looked at */
    t.model.d_model = 64;
    assert_int_equal(ig_train_run(ctx, NULL, &o, &res, &err), IG_ERR_CONFIG);
    assert_non_null(strstr(err.msg, "model.init_from"));
    assert_non_null(strstr(err.msg, "config.json describes another model"));
    assert_non_null(strstr(err.msg, "d_model"));
    /* the failed run left its metrics: a second run into the directory needs overwrite */
    t.model.d_model = 32;
    assert_int_equal(ig_train_run(ctx, NULL, &o, &res, &err), IG_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "holds an earlier run"));
    free(p);
    free(hf);
    free(run);
    free(shard);
    ig_model_free(m);
    ig_backend_free(be);
    ig_tokenizer_free(tok);
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_gradients),
        cmocka_unit_test(test_golden_gradients_reference),
        cmocka_unit_test(test_golden_adamw),
        cmocka_unit_test(test_deterministic_threads),
        cmocka_unit_test(test_llama_golden_gradients),
        cmocka_unit_test(test_llama_golden_adamw),
        cmocka_unit_test(test_init_keyed),
        cmocka_unit_test(test_overfit_one_batch),
        cmocka_unit_test(test_lr_schedules),
        cmocka_unit_test(test_family_needs_ops),
        cmocka_unit_test(test_own_fields),
        cmocka_unit_test(test_hf_round_trip),
        cmocka_unit_test(test_run_stops_on_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
