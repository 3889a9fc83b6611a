/* test_t5.c - the T5 encoder family (train/models/t5/) through train.h's ig_text_encoder, against
 * an independent PyTorch T5 encoder (tests/data/golden/t5/make_t5_goldens.py: module for module
 * as transformers' T5EncoderModel, in float64):
 *  - the goldens: T5 v1.1 (gated-gelu; n_head x d_kv != d_model; stored as an encoder-decoder
 *    T5ForConditionalGeneration file) and T5 v1.0 (relu; the embedding named
 *    encoder.embed_tokens.weight; relative_attention_max_distance left to its default), four
 *    captions of 1, 8, 28 and 89 tokens (one past a 64-key tile) in one padded batch: every
 *    caption's features within 1e-5 of torch's (max |ingot - torch| over max |torch|), on the fast
 *    and on the reference kernels;
 *  - each caption gets the features it gets alone, bit for bit: alone, in the batch, in another
 *    order, in batches of 2 (the encoder's max_batch) and on 1, 2 and 3 threads;
 *  - the directory's tokenizer (its spiece.model through ig_tokenizer_load) gives the goldens' ids;
 *  - a sharded directory (model.safetensors.index.json and two shards) gives the single file's
 *    bits; a broken index (a tensor placed in the wrong shard, a shard tensor it does not list, a
 *    shard outside the directory, a missing shard, a missing tensor) is refused, naming it;
 *  - config.json fields ingot cannot honour are refused, named (feed_forward_proj gated-silu,
 *    dense_act_fn against feed_forward_proj, is_decoder, a missing d_kv);
 *  - memory: a T5-XXL config.json (no weights) plans 19.0 GB of fp32 weights (9.5 in bf16), and
 *    opening it where 2 GB are free is refused with the figures before any weight is looked for;
 *  - ids outside the vocabulary, empty and too long captions, and a directory that holds another
 *    family are refused before anything is computed;
 *  - a T5 made here (ig_model_config_parse, random weights) exported as a Hugging Face directory
 *    (its config.json as transformers writes a T5EncoderModel's) opens as an encoder.
 */
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "preprocess/preprocess.h"
#include "train/train.h"

enum { NCAP = 4 };

typedef struct golden {
    ig_st_file *f;
    int32_t *ids[NCAP];
    int lens[NCAP];
    const float *want[NCAP]; /* [lens, D] */
    int D;
} golden;

static const char *dir_of(const char *name) {
    return igt_fmt("%s/tests/data/golden/t5/%s", igt_source_dir(), name);
}

static void golden_open(golden *g, const char *name) {
    ig_err err = {0};
    memset(g, 0, sizeof *g);
    if (ig_st_file_open(&g->f, NULL, igt_fmt("%s/expected.safetensors", dir_of(name)), &err))
        fail_msg("%s", err.msg);
    for (int k = 0; k < NCAP; k++) {
        const ig_st_tensor *ids = ig_st_file_find(g->f, igt_fmt("ids.%d", k));
        const ig_st_tensor *fe = ig_st_file_find(g->f, igt_fmt("features.%d", k));
        assert_non_null(ids), assert_non_null(fe);
        g->lens[k] = (int)ig_st_tensor_numel(ids);
        g->ids[k] = malloc((size_t)g->lens[k] * sizeof(int32_t));
        memcpy(g->ids[k], ig_st_tensor_data(ids), (size_t)g->lens[k] * sizeof(int32_t));
        g->want[k] = ig_st_tensor_data(fe);
        g->D = (int)ig_st_tensor_shape(fe)[1];
    }
}

static void golden_close(golden *g) {
    for (int k = 0; k < NCAP; k++) free(g->ids[k]);
    ig_st_file_free(g->f);
}

typedef struct enc_env {
    ig_ctx *ctx;
    ig_backend *be;
} enc_env;

static void env_open(enc_env *e, int threads, int reference) {
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = threads;
    co.log_level = IG_LOG_ERROR;
    if (ig_ctx_create(&e->ctx, &co, &err)) fail_msg("%s", err.msg);
    ig_backend_opts bo = ig_backend_opts_default();
    bo.reference = reference;
    if (ig_backend_create(&e->be, e->ctx, &bo, &err)) fail_msg("%s", err.msg);
}

static void env_close(enc_env *e) {
    ig_backend_free(e->be);
    ig_ctx_free(e->ctx);
}

static ig_text_encoder *open_enc(enc_env *e, const char *path, int batch, int len) {
    ig_err err = {0};
    ig_text_encoder_opts o = ig_text_encoder_opts_default();
    o.max_batch = batch, o.max_len = len;
    ig_text_encoder *enc = NULL;
    if (ig_text_encoder_open(&enc, e->ctx, e->be, path, &o, &err)) fail_msg("%s", err.msg);
    return enc;
}

/* features of captions order[0..n) of g (into out[k] for caption k) */
static void encode_some(ig_text_encoder *enc, const golden *g, const int *order, int n,
                        float **out) {
    const int32_t *ids[NCAP];
    int lens[NCAP];
    float *dst[NCAP];
    for (int i = 0; i < n; i++)
        ids[i] = g->ids[order[i]], lens[i] = g->lens[order[i]], dst[i] = out[order[i]];
    ig_err err = {0};
    if (ig_text_encoder_encode(enc, (size_t)n, ids, lens, dst, &err)) fail_msg("%s", err.msg);
}

static float **alloc_out(const golden *g) {
    float **out = calloc(NCAP, sizeof *out);
    for (int k = 0; k < NCAP; k++) out[k] = calloc((size_t)g->lens[k] * g->D, sizeof(float));
    return out;
}

static void free_out(float **out) {
    for (int k = 0; k < NCAP; k++) free(out[k]);
    free(out);
}

static void check_golden(const golden *g, float **out, const char *what) {
    for (int k = 0; k < NCAP; k++) {
        size_t n = (size_t)g->lens[k] * g->D;
        double worst = 0, scale = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)out[k][i] - g->want[k][i]);
            worst = d > worst ? d : worst;
            scale = fabs(g->want[k][i]) > scale ? fabs(g->want[k][i]) : scale;
        }
        if (!(worst <= 1e-5 * scale))
            fail_msg("%s: caption %d (%d tokens): max |ingot - torch| %.3g, %.3g of the scale",
                     what, k, g->lens[k], worst, worst / scale);
    }
}

static void same_out(const golden *g, float **a, float **b, const char *what) {
    for (int k = 0; k < NCAP; k++)
        if (memcmp(a[k], b[k], (size_t)g->lens[k] * g->D * sizeof(float)))
            fail_msg("%s: caption %d differs", what, k);
}

/* ---- the goldens ----------------------------------------------------------------------------- */

static void golden_case(const char *name) {
    golden g;
    golden_open(&g, name);
    for (int reference = 0; reference < 2; reference++) {
        enc_env e;
        env_open(&e, 2, reference);
        ig_text_encoder *enc = open_enc(&e, dir_of(name), NCAP, 128);
        assert_int_equal(ig_text_encoder_width(enc), g.D);
        assert_string_equal(ig_model_archs[ig_text_encoder_shape(enc)->arch], "t5");
        float **out = alloc_out(&g);
        int order[NCAP] = {0, 1, 2, 3};
        encode_some(enc, &g, order, NCAP, out);
        check_golden(&g, out, igt_fmt("%s (%s kernels)", name, reference ? "reference" : "fast"));
        free_out(out);
        ig_text_encoder_free(enc);
        env_close(&e);
    }
    golden_close(&g);
}

static void test_golden_gated(void **state) {
    (void)state;
    golden_case("gated");
}

static void test_golden_relu(void **state) {
    (void)state;
    golden_case("relu");
}

/* ---- each caption gets what it gets alone ---------------------------------------------------- */

static void test_batch_invariance(void **state) {
    (void)state;
    const char *names[] = {"gated", "relu"};
    for (int c = 0; c < 2; c++) {
        golden g;
        golden_open(&g, names[c]);
        float **alone = alloc_out(&g), **other = alloc_out(&g);
        enc_env e;
        env_open(&e, 2, 0);
        ig_text_encoder *enc = open_enc(&e, dir_of(names[c]), NCAP, 128);
        for (int k = 0; k < NCAP; k++) encode_some(enc, &g, &k, 1, alone);
        int orders[3][NCAP] = {{0, 1, 2, 3}, {3, 1, 0, 2}, {2, 3, 1, 0}};
        for (int o = 0; o < 3; o++) {
            encode_some(enc, &g, orders[o], NCAP, other);
            same_out(&g, alone, other, igt_fmt("%s: a batch in order %d", names[c], o));
        }
        int two[2] = {1, 3}; /* a batch whose longest is not the longest of all */
        encode_some(enc, &g, two, 2, other);
        for (int i = 0; i < 2; i++)
            assert_memory_equal(alone[two[i]], other[two[i]],
                                (size_t)g.lens[two[i]] * g.D * sizeof(float));
        ig_text_encoder_free(enc);
        env_close(&e);
        /* batches of 2 (the encoder's max_batch), on 1 and 3 threads */
        for (int threads = 1; threads <= 3; threads += 2) {
            env_open(&e, threads, 0);
            enc = open_enc(&e, dir_of(names[c]), 2, 128);
            encode_some(enc, &g, orders[1], NCAP, other);
            same_out(&g, alone, other, igt_fmt("%s: batches of 2, %d threads", names[c], threads));
            ig_text_encoder_free(enc);
            env_close(&e);
        }
        free_out(alone), free_out(other);
        golden_close(&g);
    }
}

/* ---- the directory's tokenizer --------------------------------------------------------------- */

static void test_tokenizer(void **state) {
    (void)state;
    golden g;
    golden_open(&g, "gated");
    ig_err err = {0};
    ig_tokenizer *tok = NULL;
    ig_encoder *te = NULL;
    if (ig_tokenizer_load(&tok, NULL, dir_of("gated"), NULL, &err)) fail_msg("%s", err.msg);
    assert_int_equal(ig_encoder_create(&te, tok, &err), IG_OK);
    char *text = igt_read(igt_fmt("%s/captions.txt", dir_of("gated")), NULL);
    char *line = text;
    for (int k = 0; k < NCAP; k++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        ig_tokens ids = {0};
        assert_int_equal(
            ig_encoder_encode(te, line, (size_t)(nl - line), IG_ENCODE_APPEND_EOS, &ids, &err),
            IG_OK);
        assert_int_equal((int)ids.n, g.lens[k]);
        assert_memory_equal(ids.ids, g.ids[k], ids.n * sizeof(int32_t));
        ig_tokens_free(&ids);
        line = nl + 1;
    }
    free(text);
    ig_encoder_free(te);
    ig_tokenizer_free(tok);
    golden_close(&g);
}

/* ---- sharded files --------------------------------------------------------------------------- */

/* dir/NAME: the tensors of src whose index i has i % 2 == which (all: which -1), except `skip` */
static void write_shard(const ig_st_file *src, const char *path, int which, const char *skip) {
    ig_err err = {0};
    ig_st_writer *w = NULL;
    assert_int_equal(ig_st_writer_create(&w, NULL, path, 1, &err), IG_OK);
    for (size_t i = 0; i < ig_st_file_count(src); i++) {
        const ig_st_tensor *t = ig_st_file_tensor(src, i);
        if ((which >= 0 && (int)(i % 2) != which) || (skip && !strcmp(skip, ig_st_tensor_name(t))))
            continue;
        assert_int_equal(ig_st_writer_add(w, ig_st_tensor_name(t), ig_st_tensor_dtype(t),
                                          ig_st_tensor_shape(t), ig_st_tensor_ndim(t),
                                          ig_st_tensor_data(t), &err),
                         IG_OK);
    }
    if (ig_st_writer_commit(w, NULL, &err)) fail_msg("%s", err.msg);
}

/* An index of src's tensors over shards a (even) and b (odd); `move` listed in b whatever its
 * shard, `extra` listed in a though absent, `drop` not listed. */
static void write_index(const ig_st_file *src, const char *path, const char *a, const char *b,
                        const char *move, const char *drop, const char *extra) {
    json_t *map = json_object();
    for (size_t i = 0; i < ig_st_file_count(src); i++) {
        const char *n = ig_st_tensor_name(ig_st_file_tensor(src, i));
        if (drop && !strcmp(n, drop)) continue;
        json_object_set_new(map, n, json_string((move && !strcmp(n, move)) || i % 2 ? b : a));
    }
    if (extra) json_object_set_new(map, extra, json_string(a));
    json_t *root = json_pack("{s:{s:i},s:o}", "metadata", "total_size", 0, "weight_map", map);
    assert_int_equal(json_dump_file(root, path, JSON_INDENT(2)), 0);
    json_decref(root);
}

static void expect_open_fails(enc_env *e, const char *dir, const char *needle) {
    ig_err err = {0};
    ig_text_encoder *enc = NULL;
    ig_status st = ig_text_encoder_open(&enc, e->ctx, e->be, dir, NULL, &err);
    if (st == IG_OK) fail_msg("%s opened; expected a refusal naming \"%s\"", dir, needle);
    if (!strstr(err.msg, needle)) fail_msg("expected \"%s\" in: %s", needle, err.msg);
}

static void test_sharded(void **state) {
    (void)state;
    golden g;
    golden_open(&g, "gated");
    ig_err err = {0};
    ig_st_file *src = NULL;
    if (ig_st_file_open(&src, NULL, igt_fmt("%s/model.safetensors", dir_of("gated")), &err))
        fail_msg("%s", err.msg);
    char *dir = igt_mkdtemp();
    char *cfg = igt_read(igt_fmt("%s/config.json", dir_of("gated")), NULL);
    igt_write(igt_fmt("%s/config.json", dir), cfg, strlen(cfg));
    const char *a = "model-00001-of-00002.safetensors", *b = "model-00002-of-00002.safetensors";
    write_shard(src, igt_fmt("%s/%s", dir, a), 0, NULL);
    write_shard(src, igt_fmt("%s/%s", dir, b), 1, NULL);
    const char *index = igt_fmt("%s/model.safetensors.index.json", dir);
    write_index(src, index, a, b, NULL, NULL, NULL);

    enc_env e;
    env_open(&e, 2, 0);
    float **one = alloc_out(&g), **sharded = alloc_out(&g);
    int order[NCAP] = {0, 1, 2, 3};
    ig_text_encoder *enc = open_enc(&e, dir_of("gated"), NCAP, 128);
    encode_some(enc, &g, order, NCAP, one);
    ig_text_encoder_free(enc);
    enc = open_enc(&e, dir, NCAP, 128);
    encode_some(enc, &g, order, NCAP, sharded);
    ig_text_encoder_free(enc);
    same_out(&g, one, sharded, "two shards against one file");

    /* a broken index */
    const char *t0 = ig_st_tensor_name(ig_st_file_tensor(src, 0));
    write_index(src, index, a, b, t0, NULL, NULL);
    expect_open_fails(&e, dir, "is not in model-00002-of-00002.safetensors, where the index says");
    write_index(src, index, a, b, NULL, t0, NULL);
    expect_open_fails(&e, dir, "which the index does not list");
    write_index(src, index, a, "../x.safetensors", NULL, NULL, NULL);
    expect_open_fails(&e, dir, "is not the name of a file beside the index");
    write_index(src, index, a, "model-00003.safetensors", NULL, NULL, NULL);
    expect_open_fails(&e, dir, "shard model-00003.safetensors");
    /* a tensor the encoder needs, in no shard */
    const char *need = "encoder.final_layer_norm.weight";
    write_shard(src, igt_fmt("%s/%s", dir, a), 0, need);
    write_shard(src, igt_fmt("%s/%s", dir, b), 1, need);
    write_index(src, index, a, b, NULL, need, NULL);
    expect_open_fails(&e, dir, "tensor 'encoder.final_layer_norm.weight' is missing");

    env_close(&e);
    free_out(one), free_out(sharded);
    free(cfg);
    ig_st_file_free(src);
    igt_rmtree(dir);
    free(dir);
    golden_close(&g);
}

/* ---- config.json ----------------------------------------------------------------------------- */

/* dir holds the golden relu model with config.json's key set to value (JSON text; NULL: removed) */
static void edit_config(const char *dir, const char *key, const char *value) {
    ig_err err = {0};
    json_t *o = NULL;
    assert_int_equal(
        ig_json_load_file(igt_fmt("%s/config.json", dir_of("relu")), 1 << 20, NULL, &o, &err),
        IG_OK);
    if (value)
        json_object_set_new(o, key, json_loads(value, JSON_DECODE_ANY, NULL));
    else
        json_object_del(o, key);
    assert_int_equal(json_dump_file(o, igt_fmt("%s/config.json", dir), 0), 0);
    json_decref(o);
}

static void test_config(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    assert_int_equal(symlink(igt_fmt("%s/model.safetensors", dir_of("relu")),
                             igt_fmt("%s/model.safetensors", dir)),
                     0);
    enc_env e;
    env_open(&e, 1, 0);
    edit_config(dir, "feed_forward_proj", "\"gated-silu\"");
    expect_open_fails(&e, dir, "feed_forward_proj \"gated-silu\"");
    edit_config(dir, "dense_act_fn", "\"gelu_new\"");
    expect_open_fails(&e, dir, "dense_act_fn \"gelu_new\" with feed_forward_proj \"relu\"");
    edit_config(dir, "is_decoder", "true");
    expect_open_fails(&e, dir, "is_decoder true");
    edit_config(dir, "d_kv", NULL);
    expect_open_fails(&e, dir, "\"d_kv\" is missing");
    edit_config(dir, "d_ff", "96"); /* the file's wi is [64, 32] */
    expect_open_fails(&e, dir, "DenseReluDense.wi.weight' is not [96, 32]");
    edit_config(dir, "num_layers", "1"); /* the file holds block 1 too */
    expect_open_fails(&e, dir, "encoder.block.1.");
    edit_config(dir, "num_layers", "2"); /* as it was: opens */
    ig_text_encoder *enc = open_enc(&e, dir, 1, 8);
    ig_text_encoder_free(enc);
    /* another family's directory */
    expect_open_fails(&e, igt_fmt("%s/tests/data/golden/llama/tiny", igt_source_dir()),
                      "holds a llama model");
    env_close(&e);
    igt_rmtree(dir);
    free(dir);
}

/* ---- memory ---------------------------------------------------------------------------------- */

static const char xxl[] =
    "{\"architectures\": [\"T5EncoderModel\"], \"model_type\": \"t5\", \"d_ff\": 10240, "
    "\"d_kv\": 64, \"d_model\": 4096, \"num_heads\": 64, \"num_layers\": 24, \"vocab_size\": "
    "32128, \"relative_attention_num_buckets\": 32, \"relative_attention_max_distance\": 128, "
    "\"layer_norm_epsilon\": 1e-06, \"feed_forward_proj\": \"gated-gelu\", \"eos_token_id\": 1}";

static void test_memory(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    igt_write(igt_fmt("%s/config.json", dir), xxl, strlen(xxl));
    ig_err err = {0};
    ig_text_encoder_memory m;
    ig_model_config c;
    ig_text_encoder_opts o = ig_text_encoder_opts_default();
    assert_int_equal(ig_text_encoder_plan(NULL, dir, &o, 4, &m, &c, &err), IG_OK);
    /* 4,762,310,656 parameters: shared 131.6M, 24 blocks of 192.9M, the bias table, the norm */
    assert_true(ig_model_num_params(&c) == 4762310656ULL);
    assert_true(m.weights == 4762310656ULL * 4);
    assert_true(m.acts > 0 && m.device == m.weights + m.acts);
    assert_true(m.host >= 2ULL * 32128 * 4096 * 4);
    ig_text_encoder_memory h;
    assert_int_equal(ig_text_encoder_plan(NULL, dir, &o, 2, &h, NULL, &err), IG_OK);
    assert_true(h.weights == 4762310656ULL * 2); /* bf16: no fp32 master weights either */

    /* 2 GB free: refused with the figures, before the (absent) weights are looked for */
    char *root = igt_mkdtemp();
    assert_int_equal(mkdir(igt_fmt("%s/proc", root), 0755), 0);
    assert_int_equal(mkdir(igt_fmt("%s/proc/self", root), 0755), 0);
    const char *meminfo = "MemTotal: 4194304 kB\nMemAvailable: 2097152 kB\n";
    igt_write(igt_fmt("%s/proc/meminfo", root), meminfo, strlen(meminfo));
    assert_int_equal(setenv("IG_FAULT_MEMORY_ROOT", root, 1), 0);
    enc_env e;
    env_open(&e, 1, 0);
    expect_open_fails(&e, dir, "weights 19.05 GB in fp32");
    expect_open_fails(&e, dir, "GB this process can take now");
    unsetenv("IG_FAULT_MEMORY_ROOT");
    env_close(&e);
    igt_rmtree(root);
    free(root);
    igt_rmtree(dir);
    free(dir);
}

/* ---- bad captions ---------------------------------------------------------------------------- */

static void test_bad_captions(void **state) {
    (void)state;
    enc_env e;
    env_open(&e, 1, 0);
    ig_text_encoder *enc = open_enc(&e, dir_of("relu"), 2, 16);
    int32_t good[3] = {5, 6, 2}, bad[3] = {5, 320, 2}, neg[1] = {-1};
    float out0[3 * 32], out1[3 * 32];
    const int32_t *ids[2] = {good, bad};
    int lens[2] = {3, 3};
    float *outs[2] = {out0, out1};
    ig_err err = {0};
    assert_int_equal(ig_text_encoder_encode(enc, 2, ids, lens, outs, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "caption 1: token 1 is id 320, outside the encoder's "
                                    "vocabulary of 320"));
    ids[1] = neg, lens[1] = 1;
    assert_int_equal(ig_text_encoder_encode(enc, 2, ids, lens, outs, &err), IG_ERR_INVALID_ARG);
    lens[1] = 0;
    assert_int_equal(ig_text_encoder_encode(enc, 2, ids, lens, outs, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "caption 1 has 0 tokens: the encoder was opened for 1 to 16"));
    lens[1] = 17;
    assert_int_equal(ig_text_encoder_encode(enc, 2, ids, lens, outs, &err), IG_ERR_INVALID_ARG);
    ids[1] = good, lens[1] = 3;
    assert_int_equal(ig_text_encoder_encode(enc, 2, ids, lens, outs, &err), IG_OK);
    assert_memory_equal(out0, out1, sizeof out0); /* the same caption twice */
    ig_text_encoder_free(enc);
    env_close(&e);
}

/* ---- a T5 made here, exported ---------------------------------------------------------------- */

static void test_export(void **state) {
    (void)state;
    ig_err err = {0};
    ig_model_config c;
    if (ig_model_config_parse(&c,
                              "arch: t5, n_layer: 2, n_head: 2, d_model: 16, d_kv: 4, d_ff: 24, "
                              "vocab_size: 50, relative_attention_max_distance: 16, "
                              "feed_forward_proj: relu",
                              &err))
        fail_msg("%s", err.msg);
    enc_env e;
    env_open(&e, 1, 0);
    ig_model *m = NULL;
    assert_int_equal(ig_model_create(&m, e.ctx, e.be, &c, 1, 8, 7, &err), IG_OK);
    char *dir = igt_mkdtemp();
    const char *out = igt_fmt("%s/t5", dir);
    if (ig_hf_export(e.ctx, m, 1, out, 0, &err)) fail_msg("%s", err.msg);
    ig_model_free(m);
    char *cfg = igt_read(igt_fmt("%s/config.json", out), NULL);
    assert_non_null(strstr(cfg, "\"T5EncoderModel\""));
    assert_non_null(strstr(cfg, "\"feed_forward_proj\": \"relu\""));
    free(cfg);
    ig_text_encoder *enc = open_enc(&e, out, 1, 8);
    const ig_model_config *s = ig_text_encoder_shape(enc);
    assert_string_equal(ig_model_config_differs(s, &c), "");
    int32_t ids[3] = {4, 9, 1};
    const int32_t *pi = ids;
    int len = 3;
    float f[3 * 16], *pf = f;
    assert_int_equal(ig_text_encoder_encode(enc, 1, &pi, &len, &pf, &err), IG_OK);
    for (int i = 0; i < 3 * 16; i++) assert_true(isfinite(f[i]));
    ig_text_encoder_free(enc);
    env_close(&e);
    igt_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_gated),     cmocka_unit_test(test_golden_relu),
        cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_sharded),          cmocka_unit_test(test_config),
        cmocka_unit_test(test_memory),           cmocka_unit_test(test_bad_captions),
        cmocka_unit_test(test_export),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
