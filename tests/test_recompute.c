/* test_recompute.c - activation recomputation (train.recompute: none, selective, full) on one
 * process, for GPT-2, Llama (grouped-query, untied, document masks), a class-conditioned DiT and
 * a caption-conditioned one (the cross-attention), on the fast and the reference CPU kernels:
 *   - the same bits: two steps of two micro-batches each, staged into two slots and run as the
 *     1F1B schedule runs them (forward 0, forward 1, backward 0, backward 1: the slots share the
 *     scratch, and a slot's recomputation comes after the other slot's forward), then AdamW with
 *     clipping; the losses, the gradients of the last step and the weights after it are
 *     memcmp-equal to none's under selective and full;
 *   - the plan: a slot's activation bytes strictly decrease none > selective > full; a layer
 *     more adds to a slot exactly one [rows, C] tensor under full (its input: nothing else, no
 *     statistics), what none adds less the attention core (output and lse) under selective, and
 *     the recomputed layer's region is in the scratch, once, whatever the number of layers.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/family/family.h"
#include "train/objectives/flow.h"
#include "train/parallel/stage.h"
#include "train/train.h"

enum { STEPS = 2, MB = 2, MAX_ROWS = 64 * 64 };

/* A model and what it trains on: a language model's B x T tokens (doc: with document masks, the
 * end-of-document id 0), or a DiT's B clips of F x H x W. */
typedef struct workload {
    const char *name;
    ig_model_config c;
    int B, T, doc;
    int F, H, W; /* dit */
    int caption; /* dit: conditioned on captions (else on classes) */
} workload;

/* What a run gives: every micro-batch's loss, the last step's gradients, the final weights, and
 * the model's activation plan. */
typedef struct outcome {
    double loss[STEPS][MB];
    float *grads, *params;
    uint64_t n;
    ig_act_sizes acts;
} outcome;

static const char *const mode_names[] = {"none", "selective", "full"};

static ig_model_config parsed(const char *yaml) {
    ig_model_config c;
    ig_err err = {0};
    if (ig_model_config_parse(&c, yaml, &err) != IG_OK) fail_msg("%s: %s", yaml, err.msg);
    return c;
}

static workload gpt2_load(void) {
    return (workload){.name = "gpt2",
                      .c = parsed("arch: gpt2, n_layer: 3, n_head: 2, d_model: 32, seq_len: 16, "
                                  "vocab_size: 100"),
                      .B = 2,
                      .T = 16};
}

static workload llama_load(void) {
    return (workload){.name = "llama",
                      .c = parsed("arch: llama, n_layer: 3, n_head: 4, n_kv_heads: 2, d_model: 32, "
                                  "ffn_hidden: 48, seq_len: 16, vocab_size: 100"),
                      .B = 2,
                      .T = 16,
                      .doc = 1};
}

static workload dit_load(int caption) {
    const char *c = caption ? "arch: dit, n_layer: 3, n_head: 4, d_model: 32, seq_len: 32, patch: "
                              "[2, 2, 2], cond: caption, vocab_size: 50, caption_len: 6, "
                              "caption_dropout: 0.1"
                            : "arch: dit, n_layer: 3, n_head: 4, d_model: 32, seq_len: 32, patch: "
                              "[2, 2, 2], cond: class, num_classes: 5, class_dropout: 0.1";
    /* 2 clips of 4 frames of 8 x 8: 2 x 4 x 4 = 32 tokens each */
    return (workload){.name = caption ? "dit caption" : "dit class",
                      .c = parsed(c),
                      .B = 2,
                      .T = 32,
                      .F = 4,
                      .H = 8,
                      .W = 8,
                      .caption = caption};
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* The micro-batch k of a run (the same for every mode) staged into slot. */
static void stage(ig_model *m, const workload *w, int slot, int k) {
    ig_err err = {0};
    uint64_t s = 0x5eed0000ull + (uint64_t)k;
    int B = w->B, T = w->T;
    ig_micro_batch in = {0};
    static int32_t tokens[MAX_ROWS], captions[64 * 8], lens[64];
    static uint8_t frames[64 * 4 * 8 * 8 * 3];
    static uint32_t labels[64];
    ig_batch_opts bo = {.eod_mask_loss = 0, .doc_attention = w->doc, .eod_id = w->doc ? 0 : -1};
    ig_clip_input clips = {0};
    if (w->F) {
        size_t n = (size_t)B * (size_t)w->F * (size_t)w->H * (size_t)w->W * 3;
        assert_true(n <= sizeof frames);
        for (size_t i = 0; i < n; i++) frames[i] = (uint8_t)lcg(&s);
        for (int b = 0; b < B; b++) {
            labels[b] = (uint32_t)(lcg(&s) % 6); /* 5: the null class */
            lens[b] = (int32_t)(lcg(&s) % 7);
            for (int j = 0; j < 6; j++) captions[b * 6 + j] = (int32_t)(lcg(&s) % 50);
        }
        clips = (ig_clip_input){.frames = frames,
                                .B = B,
                                .F = w->F,
                                .H = w->H,
                                .W = w->W,
                                .labels = !w->caption ? labels : NULL,
                                .captions = w->caption ? captions : NULL,
                                .caption_lens = w->caption ? lens : NULL,
                                .drop_labels = 1,
                                .seed = 7,
                                .key = (uint64_t)k,
                                .shift = 1};
        if (ig_flow_stage_clips(m, slot, &clips, 1.0f / MB, &err) != IG_OK)
            fail_msg("%s: stage: %s", w->name, err.msg);
        return;
    } else {
        for (int i = 0; i < B * (T + 1); i++) {
            uint64_t r = lcg(&s);
            /* about one token in eight ends a document */
            tokens[i] = w->doc && r % 8 == 0 ? 0 : (int32_t)(r % (uint64_t)w->c.vocab_size);
        }
        in = (ig_micro_batch){.tokens = tokens, .B = B, .T = T, .bo = &bo};
    }
    if (m->fam->objective->stage(m, slot, &in, 1.0f / MB, NULL, &err) != IG_OK)
        fail_msg("%s: stage: %s", w->name, err.msg);
}

/* Two steps of MB micro-batches under recompute mode r, on the fast or the reference kernels. */
static void train(const workload *w, int r, int reference, outcome *out) {
    memset(out, 0, sizeof *out);
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_model *m = NULL;
    ig_optimizer *opt = NULL;
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 2;
    assert_int_equal(ig_ctx_create(&ctx, &co, &err), IG_OK);
    ig_backend_opts bo = ig_backend_opts_default();
    bo.reference = reference;
    if (ig_backend_create(&be, ctx, &bo, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_part part = {
        .tp = 1, .l0 = 0, .l1 = w->c.n_layer, .first = 1, .last = 1, .slots = MB, .recompute = r};
    if (ig_model_create_part(&m, ctx, be, &w->c, w->B, w->T, 1234, &part, &err) != IG_OK ||
        ig_optimizer_create(&opt, ctx, m, &err) != IG_OK)
        fail_msg("%s: %s", w->name, err.msg);
    out->acts = m->acts;
    out->n = ig_model_buffer_elems(m);
    out->grads = malloc(out->n * sizeof(float));
    out->params = malloc(out->n * sizeof(float));
    assert_non_null(out->grads);
    assert_non_null(out->params);
    const ig_family *f = m->fam;
    for (int step = 0; step < STEPS; step++) {
        assert_int_equal(ig_model_zero_grads(m, &err), IG_OK);
        for (int k = 0; k < MB; k++) {
            stage(m, w, k, step * MB + k);
            if (ig_stage_forward(m, k, 1, &err) != IG_OK)
                fail_msg("%s: forward: %s", w->name, err.msg);
        }
        for (int k = 0; k < MB; k++) {
            if (ig_stage_backward(m, k, &err) != IG_OK)
                fail_msg("%s: backward: %s", w->name, err.msg);
            if (f->objective->loss(m, k, &out->loss[step][k], &err) != IG_OK)
                fail_msg("%s", err.msg);
            assert_true(isfinite(out->loss[step][k]) && out->loss[step][k] > 0);
        }
        double norm = 0;
        assert_int_equal(ig_model_grad_norm(m, &norm, &err), IG_OK);
        assert_true(norm > 0 && isfinite(norm));
        if (step == STEPS - 1)
            assert_int_equal(ig_model_read(m, IG_MODEL_GRADS, out->grads, &err), IG_OK);
        ig_adamw_hparams h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
        float clip = norm > 1.0 ? (float)(1.0 / norm) : 1.0f;
        assert_int_equal(ig_optimizer_step(opt, step + 1, &h, clip, &err), IG_OK);
    }
    assert_int_equal(ig_model_read(m, IG_MODEL_PARAMS, out->params, &err), IG_OK);
    ig_optimizer_free(opt);
    ig_model_free(m);
    ig_backend_free(be);
    ig_ctx_free(ctx);
}

static void release(outcome *o) {
    free(o->grads);
    free(o->params);
}

/* selective and full train to none's bits */
static void check_same_bits(const workload *w, int reference) {
    outcome base;
    train(w, IG_RECOMPUTE_NONE, reference, &base);
    for (int r = IG_RECOMPUTE_SELECTIVE; r <= IG_RECOMPUTE_FULL; r++) {
        outcome o;
        train(w, r, reference, &o);
        const char *k = reference ? "reference" : "fast";
        assert_int_equal(o.n, base.n);
        if (memcmp(o.loss, base.loss, sizeof o.loss))
            fail_msg("%s (%s kernels): %s: the losses differ from none's (%.9g vs %.9g)", w->name,
                     k, mode_names[r], o.loss[STEPS - 1][MB - 1], base.loss[STEPS - 1][MB - 1]);
        if (memcmp(o.grads, base.grads, base.n * sizeof(float)))
            fail_msg("%s (%s kernels): %s: the gradients differ from none's", w->name, k,
                     mode_names[r]);
        if (memcmp(o.params, base.params, base.n * sizeof(float)))
            fail_msg("%s (%s kernels): %s: the weights differ from none's", w->name, k,
                     mode_names[r]);
        release(&o);
    }
    release(&base);
}

/* ---- the plan -------------------------------------------------------------------------------- */

static uint64_t rounded(uint64_t n) {
    return (n + IG_ACT_ALIGN - 1) / IG_ACT_ALIGN * IG_ACT_ALIGN;
}

static ig_act_sizes plan_of(const workload *w, int n_layer, int r) {
    ig_model_config c = w->c;
    c.n_layer = n_layer;
    ig_part p = {
        .tp = 1, .l0 = 0, .l1 = n_layer, .first = 1, .last = 1, .slots = 1, .recompute = r};
    ig_act_sizes a;
    ig_family_of(c.arch)->plan(&c, &p, w->B, w->T, &a);
    return a;
}

static uint64_t slot_bytes(const ig_act_sizes *a) {
    return a->act * 4 + (a->f32 + a->io_f32 + a->i32) * 4;
}

/* The attention core of a layer of w: the output's elements and the log-sum-exp's (the caption's
 * cross-attention's too). */
static void core_of(const workload *w, uint64_t *act, uint64_t *f32) {
    uint64_t N = (uint64_t)w->B * (uint64_t)w->T, C = (uint64_t)w->c.d_model;
    uint64_t NH = (uint64_t)w->c.n_head, hs = C / NH;
    *act = rounded(N * NH * hs);
    *f32 = rounded(N * NH);
    if (w->caption) *act += rounded(N * C), *f32 += rounded(N * NH);
}

static void check_plan(const workload *w) {
    ig_act_sizes a[3][2];
    uint64_t N = (uint64_t)w->B * (uint64_t)w->T, C = (uint64_t)w->c.d_model;
    for (int r = 0; r < 3; r++)
        for (int k = 0; k < 2; k++) a[r][k] = plan_of(w, 2 + k, r);
    for (int k = 0; k < 2; k++) {
        if (!(slot_bytes(&a[0][k]) > slot_bytes(&a[1][k]) &&
              slot_bytes(&a[1][k]) > slot_bytes(&a[2][k])))
            fail_msg("%s, %d layers: a slot's bytes none %llu, selective %llu, full %llu", w->name,
                     2 + k, (unsigned long long)slot_bytes(&a[0][k]),
                     (unsigned long long)slot_bytes(&a[1][k]),
                     (unsigned long long)slot_bytes(&a[2][k]));
    }
    /* what one layer more adds to a slot */
    uint64_t d_act[3], d_f32[3], core_act, core_f32;
    for (int r = 0; r < 3; r++) {
        d_act[r] = a[r][1].act - a[r][0].act;
        d_f32[r] = a[r][1].f32 - a[r][0].f32;
        assert_int_equal(a[r][1].i32, a[r][0].i32);
        assert_int_equal(a[r][1].io_f32, a[r][0].io_f32);
    }
    core_of(w, &core_act, &core_f32);
    if (d_act[IG_RECOMPUTE_FULL] != rounded(N * C) || d_f32[IG_RECOMPUTE_FULL] != 0)
        fail_msg("%s: full keeps %llu elements and %llu floats per layer: expected one input of "
                 "%llu x %llu and nothing else",
                 w->name, (unsigned long long)d_act[2], (unsigned long long)d_f32[2],
                 (unsigned long long)N, (unsigned long long)C);
    if (d_act[IG_RECOMPUTE_SELECTIVE] != d_act[0] - core_act ||
        d_f32[IG_RECOMPUTE_SELECTIVE] != d_f32[0] - core_f32)
        fail_msg("%s: selective keeps %llu + %llu per layer; none %llu + %llu, the core %llu + "
                 "%llu",
                 w->name, (unsigned long long)d_act[1], (unsigned long long)d_f32[1],
                 (unsigned long long)d_act[0], (unsigned long long)d_f32[0],
                 (unsigned long long)core_act, (unsigned long long)core_f32);
    /* a layer keeps at least its GEMM outputs under none: far more than its input */
    assert_true(d_act[0] > 4 * rounded(N * C));
    /* the recomputed region is scratch, and one layer's worth whatever the layers */
    assert_int_equal(a[0][0].scratch_act, a[0][1].scratch_act);
    for (int r = 1; r < 3; r++) {
        assert_true(a[r][0].scratch_act > a[0][0].scratch_act);
        assert_int_equal(a[r][0].scratch_act, a[r][1].scratch_act);
        assert_int_equal(a[r][0].scratch_f32, a[r][1].scratch_f32);
    }
    /* selective's region is the core: none's scratch plus it */
    assert_int_equal(a[1][0].scratch_act, a[0][0].scratch_act + core_act);
    assert_int_equal(a[1][0].scratch_f32, a[0][0].scratch_f32 + core_f32);
}

/* ---- the tests ------------------------------------------------------------------------------- */

static void test_gpt2(void **state) {
    (void)state;
    workload w = gpt2_load();
    check_plan(&w);
    check_same_bits(&w, 0);
    check_same_bits(&w, 1);
    w.doc = 1; /* document masks */
    check_same_bits(&w, 0);
}

static void test_llama(void **state) {
    (void)state;
    workload w = llama_load();
    check_plan(&w);
    check_same_bits(&w, 0);
    check_same_bits(&w, 1);
    w.c = parsed("arch: llama, n_layer: 3, n_head: 4, n_kv_heads: 2, d_model: 32, ffn_hidden: 48, "
                 "seq_len: 16, vocab_size: 100, tie_embeddings: true");
    w.doc = 0;
    check_same_bits(&w, 0);
}

static void test_dit_class(void **state) {
    (void)state;
    workload w = dit_load(0);
    check_plan(&w);
    check_same_bits(&w, 0);
    check_same_bits(&w, 1);
}

static void test_dit_caption(void **state) {
    (void)state;
    workload w = dit_load(1);
    check_plan(&w);
    check_same_bits(&w, 0);
    check_same_bits(&w, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_dit_class),
        cmocka_unit_test(test_dit_caption),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
