/* test_gpt_index.c - the GPT sample index, splits, blends and index cache (dataset/) against
 * golden files made by numpy.
 *
 * The goldens in tests/data/golden/sampling/ were made by
 *     /usr/bin/python3 tests/data/golden/make_sampling_goldens.py
 * with Debian's python3-numpy: that script re-implements Megatron-Core's index building (the
 * commits are in its header) in numpy, using numpy's own RandomState, so it is an oracle
 * independent of this C code. golden.json describes each case; the arrays are raw little-endian
 * files beside it. Besides the goldens: the token contents of samples read from real shards
 * against a naive flattening, error messages for bad input, and the index cache (reuse,
 * invalidation, corruption, and four processes building at once).
 */
#include "testutil.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "dataset/sampling_internal.h"

static ig_ctx *g_ctx;
static json_t *g_golden;
static char g_dir[4096];

static int setup(void **state) {
    (void)state;
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 2;
    o.log_level = IG_LOG_ERROR;
    ig_err err = {0};
    if (ig_ctx_create(&g_ctx, &o, &err) != IG_OK) return -1;
    snprintf(g_dir, sizeof g_dir, "%s/tests/data/golden/sampling", igt_source_dir());
    json_error_t je;
    char path[4200];
    snprintf(path, sizeof path, "%s/golden.json", g_dir);
    g_golden = json_load_file(path, 0, &je);
    if (!g_golden) {
        fprintf(stderr, "%s:%d: %s\n", path, je.line, je.text);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    json_decref(g_golden);
    ig_ctx_free(g_ctx);
    return 0;
}

/* Reads golden array `name` (elements of elem_size bytes); *n gets the element count. */
static void *load_array(const char *name, size_t elem_size, uint64_t *n) {
    size_t len = 0;
    char *buf = igt_read(igt_fmt("%s/%s", g_dir, name), &len);
    assert_int_equal(len % elem_size, 0);
    *n = len / elem_size;
    return buf;
}

static uint64_t jint(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    assert_non_null(v);
    if (json_is_string(v)) return strtoull(json_string_value(v), NULL, 10);
    return (uint64_t)json_integer_value(v);
}

static double hexf(json_t *v) {
    return strtod(json_string_value(v), NULL);
}

/* ---- numpy's generator ---------------------------------------------------------------------- */

static void test_mt19937_raw_and_interval(void **state) {
    (void)state;
    json_t *cases = json_object_get(g_golden, "mt");
    size_t i;
    json_t *c;
    assert_true(json_array_size(cases) >= 5);
    json_array_foreach(cases, i, c) {
        ig_mt19937 mt;
        ig_mt19937_seed(&mt, (uint32_t)jint(c, "seed"));
        json_t *raw = json_object_get(c, "raw");
        for (size_t k = 0; k < json_array_size(raw); k++)
            assert_int_equal(ig_mt19937_next32(&mt), json_integer_value(json_array_get(raw, k)));
        ig_mt19937_seed(&mt, (uint32_t)jint(c, "seed"));
        size_t m;
        json_t *iv;
        json_array_foreach(json_object_get(c, "intervals"), m, iv) {
            uint64_t max = jint(iv, "max");
            json_t *vals = json_object_get(iv, "values");
            for (size_t k = 0; k < json_array_size(vals); k++) {
                uint64_t want = strtoull(json_string_value(json_array_get(vals, k)), NULL, 10);
                assert_true(ig_mt19937_interval(&mt, max) == want);
            }
        }
    }
}

static void test_shuffle_matches_numpy(void **state) {
    (void)state;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g_golden, "shuffle"), i, c) {
        uint64_t n = jint(c, "n"), got_n;
        int32_t *want = load_array(json_string_value(json_object_get(c, "file")), 4, &got_n);
        assert_int_equal(got_n, n);
        int32_t *a32 = malloc(n * 4);
        int64_t *a64 = malloc(n * 8);
        for (uint64_t k = 0; k < n; k++) a32[k] = (int32_t)k, a64[k] = (int64_t)k;
        ig_mt19937 mt;
        ig_mt19937_seed(&mt, (uint32_t)jint(c, "seed"));
        ig_mt19937_shuffle_i32(&mt, a32, n);
        ig_mt19937_seed(&mt, (uint32_t)jint(c, "seed"));
        ig_mt19937_shuffle_i64(&mt, a64, n);
        for (uint64_t k = 0; k < n; k++) {
            assert_int_equal(a32[k], want[k]);
            assert_int_equal(a64[k], want[k]);
        }
        free(a32);
        free(a64);
        free(want);
    }
}

static void test_normalize_matches_numpy(void **state) {
    (void)state;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g_golden, "normalize"), i, c) {
        json_t *w = json_object_get(c, "weights"), *nw = json_object_get(c, "normalized");
        size_t n = json_array_size(w);
        double *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
        for (size_t k = 0; k < n; k++) in[k] = hexf(json_array_get(w, k));
        ig_normalize_weights(in, n, out);
        for (size_t k = 0; k < n; k++) {
            double want = hexf(json_array_get(nw, k));
            assert_memory_equal(&out[k], &want, sizeof want); /* bit for bit */
        }
        free(in);
        free(out);
    }
}

/* ---- splits --------------------------------------------------------------------------------- */

static void test_split_ranges(void **state) {
    (void)state;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g_golden, "split"), i, c) {
        ig_split sp;
        ig_err err = {0};
        const char *text = json_string_value(json_object_get(c, "split"));
        uint64_t n = jint(c, "n");
        assert_int_equal(ig_split_parse(&sp, text, &err), IG_OK);
        for (int p = 0; p < 3; p++) {
            json_t *r = json_array_get(json_object_get(c, "ranges"), (size_t)p);
            uint64_t b = 0, e = 0;
            ig_status st = ig_split_range(&sp, (ig_split_part)p, n, &b, &e, &err);
            if (json_is_null(r) || json_integer_value(json_array_get(r, 0)) ==
                                       json_integer_value(json_array_get(r, 1))) {
                assert_int_equal(st, IG_ERR_INVALID_ARG);
                assert_non_null(strstr(err.msg, ig_split_part_name((ig_split_part)p)));
                assert_non_null(strstr(err.msg, "empty"));
            } else {
                assert_int_equal(st, IG_OK);
                assert_int_equal(b, json_integer_value(json_array_get(r, 0)));
                assert_int_equal(e, json_integer_value(json_array_get(r, 1)));
            }
        }
    }
    ig_split sp;
    ig_err err = {0};
    assert_int_equal(ig_split_parse(&sp, "1,x", &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_split_parse(&sp, "0,0,0", &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_split_parse(&sp, "1,2,3,4", &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_split_parse(&sp, "-1,2", &err), IG_ERR_INVALID_ARG);
}

/* ---- GPT indices ---------------------------------------------------------------------------- */

static void check_gpt(const ig_gpt_index *idx, json_t *c) {
    uint64_t n, rows, m;
    assert_int_equal(ig_gpt_index_num_epochs(idx), jint(c, "num_epochs"));
    assert_int_equal(ig_gpt_index_tokens_per_epoch(idx), jint(c, "tokens_per_epoch"));
    assert_int_equal(ig_gpt_index_separate_final_epoch(idx),
                     json_is_true(json_object_get(c, "separate_final_epoch")));
    int32_t *doc = load_array(json_string_value(json_object_get(c, "document_index")), 4, &n);
    int64_t *smp = load_array(json_string_value(json_object_get(c, "sample_index")), 8, &rows);
    int64_t *shf = load_array(json_string_value(json_object_get(c, "shuffle_index")), 8, &m);
    uint64_t gn, grows, gm;
    const int32_t *gdoc = ig_gpt_index_document_index(idx, &gn);
    const int64_t *gsmp = ig_gpt_index_sample_index(idx, &grows);
    const int64_t *gshf = ig_gpt_index_shuffle_index(idx, &gm);
    assert_int_equal(gn, n);
    assert_int_equal(2 * grows, rows);
    assert_int_equal(gm, m);
    assert_memory_equal(gdoc, doc, n * 4);
    assert_memory_equal(gsmp, smp, rows * 8);
    assert_memory_equal(gshf, shf, m * 8);
    assert_int_equal(ig_gpt_index_num_samples(idx), m);
    free(doc);
    free(smp);
    free(shf);
}

static void test_gpt_goldens(void **state) {
    (void)state;
    size_t i;
    json_t *c;
    assert_true(json_array_size(json_object_get(g_golden, "gpt")) >= 5);
    json_array_foreach(json_object_get(g_golden, "gpt"), i, c) {
        uint64_t n;
        int32_t *lengths = load_array(json_string_value(json_object_get(c, "lengths")), 4, &n);
        ig_gpt_index_opts o = ig_gpt_index_opts_default();
        o.seq_len = (uint32_t)jint(c, "seq_len");
        o.num_samples = jint(c, "num_samples");
        o.seed = (uint32_t)jint(c, "seed");
        json_t *split = json_object_get(c, "split");
        if (json_is_string(split)) {
            ig_split sp;
            ig_err err = {0};
            assert_int_equal(ig_split_parse(&sp, json_string_value(split), &err), IG_OK);
            assert_int_equal(ig_split_range(&sp, (ig_split_part)jint(c, "part"), n, &o.seq_begin,
                                            &o.seq_end, &err),
                             IG_OK);
            assert_int_equal(o.seq_begin, jint(c, "seq_begin"));
            assert_int_equal(o.seq_end, jint(c, "seq_end"));
        }
        ig_gpt_index *idx = NULL;
        ig_err err = {0};
        assert_int_equal(ig_gpt_index_build(&idx, g_ctx, lengths, n, &o, &err), IG_OK);
        check_gpt(idx, c);
        /* Every sample's spans add up to seq_len + 1 tokens. */
        ig_token_span spans[64];
        for (uint64_t s = 0; s < ig_gpt_index_num_samples(idx); s++) {
            size_t k = ig_gpt_index_sample(idx, s, spans, 64);
            assert_true(k <= 64);
            uint64_t total = 0;
            for (size_t q = 0; q < k; q++) {
                assert_true(spans[q].offset + spans[q].length <= (uint64_t)lengths[spans[q].seq]);
                total += spans[q].length;
            }
            assert_int_equal(total, o.seq_len + 1);
        }
        ig_gpt_index_free(idx);
        free(lengths);
    }
}

static void test_blend_golden(void **state) {
    (void)state;
    json_t *c = json_array_get(json_object_get(g_golden, "blend"), 0);
    json_t *srcs = json_object_get(c, "sources");
    size_t n = json_array_size(srcs);
    ig_blend_source *bs = calloc(n, sizeof *bs);
    int32_t **lengths = calloc(n, sizeof *lengths);
    for (size_t k = 0; k < n; k++) {
        json_t *s = json_array_get(srcs, k);
        lengths[k] = load_array(json_string_value(json_object_get(s, "lengths")), 4, &bs[k].n_seqs);
        bs[k].seq_lengths = lengths[k];
        bs[k].weight = json_real_value(json_object_get(s, "weight"));
        bs[k].name = "golden";
    }
    ig_blend_opts o = ig_blend_opts_default();
    o.seq_len = (uint32_t)jint(c, "seq_len");
    o.num_samples = jint(c, "num_samples");
    o.seed = (uint32_t)jint(c, "seed");
    o.surplus = json_real_value(json_object_get(c, "surplus"));
    ig_err err = {0};
    assert_int_equal(ig_split_parse(&o.split, json_string_value(json_object_get(c, "split")), &err),
                     IG_OK);
    o.part = (ig_split_part)jint(c, "part");
    ig_blend *b = NULL;
    assert_int_equal(ig_blend_build(&b, g_ctx, bs, n, &o, &err), IG_OK);
    assert_int_equal(ig_blend_num_samples(b), jint(c, "size"));
    uint64_t m;
    int16_t *di = load_array(json_string_value(json_object_get(c, "dataset_index")), 2, &m);
    int64_t *dsi = load_array(json_string_value(json_object_get(c, "dataset_sample_index")), 8, &m);
    assert_int_equal(m, ig_blend_num_samples(b));
    assert_memory_equal(ig_blend_dataset_index(b), di, m * 2);
    assert_memory_equal(ig_blend_dataset_sample_index(b), dsi, m * 8);
    int repeated = 0;
    for (size_t k = 0; k < n; k++) {
        json_t *s = json_array_get(srcs, k);
        ig_blend_source_info in = ig_blend_source_stats(b, k);
        double w = hexf(json_object_get(s, "normalized"));
        assert_memory_equal(&in.weight, &w, sizeof w);
        assert_int_equal(in.target, jint(s, "target"));
        assert_int_equal(in.requested, jint(s, "requested"));
        assert_int_equal(in.drawn, jint(s, "used"));
        assert_int_equal(in.built, jint(s, "num_samples_built"));
        assert_int_equal(in.seq_begin, jint(s, "seq_begin"));
        assert_int_equal(in.seq_end, jint(s, "seq_end"));
        assert_true(fabs(in.achieved - in.weight) < 0.01);
        repeated += in.epochs > 1;
        check_gpt(ig_blend_source_index(b, k), s);
        uint32_t src;
        uint64_t smp;
        ig_blend_lookup(b, 5, &src, &smp);
        assert_int_equal(src, (uint32_t)di[5]);
        assert_int_equal(smp, (uint64_t)dsi[5]);
    }
    assert_true(repeated >= 1); /* the golden blend repeats a source: the warning path runs */
    ig_blend_free(b);
    free(di);
    free(dsi);
    for (size_t k = 0; k < n; k++) free(lengths[k]);
    free(lengths);
    free(bs);
}

/* The per-source sizing the README names: Megatron-Core core_v0.11 and later build source d for
 * ceil(ceil(N*w)*1.005) samples and blend sum(ceil(N*w)); core_v0.7-v0.10 built ceil(N*w*1.005)
 * and blended their sum. With N*w fractional the two differ: 1/3 and 2/3 of 1000. */
static void test_blend_sizing_version(void **state) {
    (void)state;
    static int32_t lengths[64];
    for (int i = 0; i < 64; i++) lengths[i] = 50 + i;
    ig_blend_source bs[2] = {{.weight = 1, .seq_lengths = lengths, .n_seqs = 64, .name = "a"},
                             {.weight = 2, .seq_lengths = lengths, .n_seqs = 64, .name = "b"}};
    ig_blend_opts o = ig_blend_opts_default();
    o.seq_len = 16;
    o.num_samples = 1000;
    ig_blend *b = NULL;
    ig_err err = {0};
    assert_int_equal(ig_blend_build(&b, g_ctx, bs, 2, &o, &err), IG_OK);
    ig_blend_source_info s0 = ig_blend_source_stats(b, 0), s1 = ig_blend_source_stats(b, 1);
    assert_int_equal(s0.target, 334);    /* ceil(333.33) */
    assert_int_equal(s1.target, 667);    /* ceil(666.67) */
    assert_int_equal(s0.requested, 336); /* ceil(334 * 1.005) = ceil(335.67); v0.10: 335 */
    assert_int_equal(s1.requested, 671); /* ceil(667 * 1.005) = ceil(670.34); v0.10: 670 */
    assert_int_equal(ig_blend_num_samples(b), 1001); /* 334 + 667; v0.10: 335 + 670 = 1005 */
    ig_blend_free(b);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void expect_gpt_error(const int32_t *lengths, uint64_t n, uint32_t seq_len, uint64_t samples,
                             const char *needle) {
    ig_gpt_index_opts o = ig_gpt_index_opts_default();
    o.seq_len = seq_len;
    o.num_samples = samples;
    o.name = "data/x";
    ig_gpt_index *idx = NULL;
    ig_err err = {0};
    assert_int_equal(ig_gpt_index_build(&idx, g_ctx, lengths, n, &o, &err), IG_ERR_INVALID_ARG);
    assert_null(idx);
    if (!strstr(err.msg, needle)) fail_msg("message \"%s\" lacks \"%s\"", err.msg, needle);
    assert_non_null(strstr(err.msg, "data/x"));
}

static void test_errors(void **state) {
    (void)state;
    int32_t lengths[4] = {10, 20, 30, 40};
    int32_t zeros[3] = {0, 0, 0};
    expect_gpt_error(lengths, 0, 8, 10, "empty");
    expect_gpt_error(zeros, 3, 8, 10, "empty");
    expect_gpt_error(lengths, 4, 100, 10, "longer than the data");
    expect_gpt_error(lengths, 4, 1, 10, "seq_len");
    expect_gpt_error(lengths, 4, 8, 0, "num_samples");
    /* sizes that would wrap 64-bit arithmetic are refused, never allocated short */
    int32_t ones[6] = {1, 1, 1, 1, 1, 1};
    expect_gpt_error(ones, 6, 2, 2305843009213693951ULL, "larger than memory can address");

    /* Blends: weights <= 0, and a split that leaves a part empty. */
    ig_blend_source bs[2] = {{.weight = 1.0, .seq_lengths = lengths, .n_seqs = 4, .name = "a"},
                             {.weight = 0.0, .seq_lengths = lengths, .n_seqs = 4, .name = "b"}};
    ig_blend_opts o = ig_blend_opts_default();
    o.seq_len = 8;
    o.num_samples = 10;
    ig_blend *b = NULL;
    ig_err err = {0};
    assert_int_equal(ig_blend_build(&b, g_ctx, bs, 2, &o, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "source 1 (b)")); /* numbered from 0, as blend prints them */
    assert_non_null(strstr(err.msg, "> 0"));
    bs[1].weight = -3;
    assert_int_equal(ig_blend_build(&b, g_ctx, bs, 2, &o, &err), IG_ERR_INVALID_ARG);
    bs[1].weight = NAN;
    assert_int_equal(ig_blend_build(&b, g_ctx, bs, 2, &o, &err), IG_ERR_INVALID_ARG);
    bs[1].weight = 2;
    assert_int_equal(ig_split_parse(&o.split, "969,30,1", &err), IG_OK);
    o.part = IG_SPLIT_TEST;
    assert_int_equal(ig_blend_build(&b, g_ctx, bs, 2, &o, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "test part empty"));
    assert_non_null(strstr(err.msg, "source 0 (a)"));
    o.part = IG_SPLIT_TRAIN;
    assert_int_equal(ig_blend_build(&b, g_ctx, bs, 0, &o, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_blend_build(&b, g_ctx, bs, 2, &o, &err), IG_OK);
    ig_blend_free(b);
}

/* ---- tokens from real shards ---------------------------------------------------------------- */

static int32_t token_at(uint64_t seq, uint64_t off) {
    return (int32_t)((seq * 131 + off * 7) % 50000);
}

static void test_read_from_shards(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *prefixes[2] = {strdup(igt_fmt("%s/a", dir)), strdup(igt_fmt("%s/b", dir))};
    uint64_t seq = 0;
    ig_err err = {0};
    for (int f = 0; f < 2; f++) {
        ig_shard_writer *w = NULL;
        ig_shard_writer_opts wo = ig_shard_writer_opts_default();
        assert_int_equal(ig_shard_writer_create(&w, g_ctx, prefixes[f], &wo, &err), IG_OK);
        for (int d = 0; d < 37 + 20 * f; d++, seq++) {
            int32_t ids[300];
            int len = (int)((seq * 53) % 250) + 1;
            for (int t = 0; t < len; t++) ids[t] = token_at(seq, (uint64_t)t);
            assert_int_equal(ig_shard_writer_add_document(w, ids, (size_t)len, &err), IG_OK);
        }
        assert_int_equal(ig_shard_writer_finish(w, NULL, &err), IG_OK);
    }
    ig_dataset *ds = NULL;
    assert_int_equal(ig_dataset_open(&ds, g_ctx, prefixes, 2, &err), IG_OK);
    assert_int_equal(ig_dataset_sequences(ds), seq);
    ig_gpt_index_opts o = ig_gpt_index_opts_default();
    o.seq_len = 64;
    o.num_samples = 500; /* several epochs */
    o.seed = 7;
    ig_gpt_index *idx = NULL;
    assert_int_equal(ig_gpt_index_build_dataset(&idx, g_ctx, ds, &o, &err), IG_OK);
    assert_true(ig_gpt_index_num_epochs(idx) > 1);

    /* Naive oracle: the documents flattened in document-index order; unshuffled sample j is
     * tokens [j*seq_len, j*seq_len + seq_len + 1) of that stream. */
    uint64_t n_doc;
    const int32_t *doc = ig_gpt_index_document_index(idx, &n_doc);
    const int32_t *len = ig_dataset_seq_lengths(ds);
    uint64_t total = 0;
    for (uint64_t d = 0; d < n_doc; d++) total += (uint64_t)len[doc[d]];
    int32_t *flat = malloc(total * sizeof *flat);
    uint64_t pos = 0;
    for (uint64_t d = 0; d < n_doc; d++)
        for (int32_t t = 0; t < len[doc[d]]; t++)
            flat[pos++] = token_at((uint64_t)doc[d], (uint64_t)t);
    const int64_t *shuffle = ig_gpt_index_shuffle_index(idx, NULL);
    int32_t out[65];
    for (uint64_t i = 0; i < ig_gpt_index_num_samples(idx); i++) {
        assert_int_equal(ig_gpt_index_read(idx, ds, i, out, &err), IG_OK);
        uint64_t j = (uint64_t)shuffle[i];
        assert_true(j * 64 + 65 <= total);
        assert_memory_equal(out, flat + j * 64, sizeof out);
    }
    assert_int_equal(ig_gpt_index_read(idx, ds, ig_gpt_index_num_samples(idx), out, &err),
                     IG_ERR_INVALID_ARG);

    /* A blend over the two shards as separate sources reads through each source's index. */
    ig_dataset *da = NULL, *db = NULL;
    assert_int_equal(ig_dataset_open(&da, g_ctx, &prefixes[0], 1, &err), IG_OK);
    assert_int_equal(ig_dataset_open(&db, g_ctx, &prefixes[1], 1, &err), IG_OK);
    ig_blend_source bs[2] = {{.weight = 0.3, .dataset = da}, {.weight = 0.7, .dataset = db}};
    ig_blend_opts bo = ig_blend_opts_default();
    bo.seq_len = 32;
    bo.num_samples = 200;
    ig_blend *b = NULL;
    assert_int_equal(ig_blend_build(&b, g_ctx, bs, 2, &bo, &err), IG_OK);
    for (uint64_t i = 0; i < ig_blend_num_samples(b); i++) {
        int32_t x[33], y[33];
        uint32_t src;
        uint64_t smp;
        assert_int_equal(ig_blend_read(b, i, x, &err), IG_OK);
        ig_blend_lookup(b, i, &src, &smp);
        assert_int_equal(
            ig_gpt_index_read(ig_blend_source_index(b, src), src ? db : da, smp, y, &err), IG_OK);
        assert_memory_equal(x, y, sizeof x);
    }
    ig_blend_free(b);
    ig_dataset_close(da);
    ig_dataset_close(db);
    free(flat);
    ig_gpt_index_free(idx);
    ig_dataset_close(ds);
    igt_rmtree(dir);
    free(dir);
    free((void *)prefixes[0]);
    free((void *)prefixes[1]);
}

/* ---- the index cache ------------------------------------------------------------------------ */

static int32_t *synthetic_lengths(uint64_t n, uint32_t seed) {
    int32_t *l = malloc(n * sizeof *l);
    ig_mt19937 mt;
    ig_mt19937_seed(&mt, seed);
    for (uint64_t i = 0; i < n; i++) l[i] = (int32_t)(1 + ig_mt19937_interval(&mt, 2000));
    return l;
}

static ig_gpt_index *build_cached(ig_ctx *ctx, const int32_t *l, uint64_t n, const char *dir,
                                  uint32_t seq_len, uint32_t seed) {
    ig_gpt_index_opts o = ig_gpt_index_opts_default();
    o.seq_len = seq_len;
    o.num_samples = 3000;
    o.seed = seed;
    o.cache_dir = dir;
    ig_gpt_index *idx = NULL;
    ig_err err = {0};
    if (ig_gpt_index_build(&idx, ctx, l, n, &o, &err) != IG_OK) fail_msg("%s", err.msg);
    return idx;
}

static void assert_same_index(const ig_gpt_index *a, const ig_gpt_index *b) {
    uint64_t na, nb, ra, rb;
    const int32_t *da = ig_gpt_index_document_index(a, &na),
                  *db = ig_gpt_index_document_index(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na * 4);
    const int64_t *sa = ig_gpt_index_sample_index(a, &ra), *sb = ig_gpt_index_sample_index(b, &rb);
    assert_int_equal(ra, rb);
    assert_memory_equal(sa, sb, ra * 16);
    assert_memory_equal(ig_gpt_index_shuffle_index(a, NULL), ig_gpt_index_shuffle_index(b, NULL),
                        ig_gpt_index_num_samples(a) * 8);
}

static void test_cache_reuse_and_invalidation(void **state) {
    (void)state;
    char *tmp = igt_mkdtemp();
    char *dir = strdup(igt_fmt("%s/cache/nested", tmp));
    int32_t *l = synthetic_lengths(500, 3);
    ig_gpt_index *a = build_cached(g_ctx, l, 500, dir, 128, 1234);
    assert_false(ig_gpt_index_from_cache(a));
    ig_gpt_index *b = build_cached(g_ctx, l, 500, dir, 128, 1234);
    assert_true(ig_gpt_index_from_cache(b));
    assert_int_equal(ig_gpt_index_key(a), ig_gpt_index_key(b));
    assert_same_index(a, b);

    /* Another seed or seq_len or data is another key, built anew. */
    ig_gpt_index *c = build_cached(g_ctx, l, 500, dir, 128, 99);
    assert_false(ig_gpt_index_from_cache(c));
    assert_true(ig_gpt_index_key(c) != ig_gpt_index_key(a));
    ig_gpt_index *d = build_cached(g_ctx, l, 500, dir, 96, 1234);
    assert_false(ig_gpt_index_from_cache(d));
    assert_true(ig_gpt_index_key(d) != ig_gpt_index_key(a));
    l[17]++;
    ig_gpt_index *e = build_cached(g_ctx, l, 500, dir, 128, 1234);
    assert_false(ig_gpt_index_from_cache(e));
    assert_true(ig_gpt_index_key(e) != ig_gpt_index_key(a));
    l[17]--;

    /* A damaged file is detected and rebuilt (the mapped one in b stays valid: the rebuild
     * replaces the file by rename). */
    char path[4096];
    assert_int_equal(ig_icache_path(path, sizeof path, dir, "gpt", ig_gpt_index_key(a), NULL, NULL),
                     IG_OK);
    size_t len;
    char *bytes = igt_read(path, &len);
    bytes[len / 2] ^= 0x40;
    igt_write(path, bytes, len);
    ig_gpt_index *f = build_cached(g_ctx, l, 500, dir, 128, 1234);
    assert_false(ig_gpt_index_from_cache(f));
    assert_same_index(a, f);
    igt_write(path, bytes, len / 3); /* truncated */
    ig_gpt_index *g = build_cached(g_ctx, l, 500, dir, 128, 1234);
    assert_false(ig_gpt_index_from_cache(g));
    ig_gpt_index *h = build_cached(g_ctx, l, 500, dir, 128, 1234);
    assert_true(ig_gpt_index_from_cache(h));
    assert_same_index(a, h);
    ig_icache_entry ent;
    ig_err err = {0};
    bytes[0] ^= 1; /* bad magic */
    igt_write(path, bytes, len);
    assert_int_equal(ig_icache_load(&ent, dir, "gpt", ig_gpt_index_key(a), &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, path));
    free(bytes);

    ig_gpt_index *list[] = {a, b, c, d, e, f, g, h};
    for (size_t k = 0; k < 8; k++) ig_gpt_index_free(list[k]);
    free(l);
    igt_rmtree(tmp);
    free(tmp);
    free(dir);
}

static void test_cache_concurrent_builders(void **state) {
    (void)state;
    char *tmp = igt_mkdtemp();
    const uint64_t n = 200000;
    int32_t *l = synthetic_lengths(n, 5);
    pid_t pids[4];
    for (int p = 0; p < 4; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            /* A fresh context: the parent's thread pool does not survive fork. */
            ig_ctx *ctx = NULL;
            ig_ctx_opts co = ig_ctx_opts_default();
            co.threads = 2;
            co.log_level = IG_LOG_OFF;
            if (ig_ctx_create(&ctx, &co, NULL) != IG_OK) _exit(10);
            ig_gpt_index_opts o = ig_gpt_index_opts_default();
            o.seq_len = 256;
            o.num_samples = 2000000;
            o.cache_dir = tmp;
            ig_gpt_index *idx = NULL;
            if (ig_gpt_index_build(&idx, ctx, l, n, &o, NULL) != IG_OK) _exit(11);
            int from_cache = ig_gpt_index_from_cache(idx);
            uint64_t rows;
            const int64_t *s = ig_gpt_index_sample_index(idx, &rows);
            uint64_t h =
                ig_xxh3_64(s, rows * 16) ^ ig_xxh3_64(ig_gpt_index_shuffle_index(idx, NULL),
                                                      ig_gpt_index_num_samples(idx) * 8);
            igt_write(igt_fmt("%s/hash.%d", tmp, p), &h, sizeof h);
            ig_gpt_index_free(idx);
            ig_ctx_free(ctx);
            _exit(from_cache ? 1 : 0);
        }
    }
    int built = 0;
    for (int p = 0; p < 4; p++) {
        int status = 0;
        assert_int_equal(waitpid(pids[p], &status, 0), pids[p]);
        assert_true(WIFEXITED(status));
        assert_true(WEXITSTATUS(status) <= 1);
        built += WEXITSTATUS(status) == 0;
    }
    assert_int_equal(built, 1); /* one builder; the others waited and mapped its file */
    ig_gpt_index_opts o = ig_gpt_index_opts_default();
    o.seq_len = 256;
    o.num_samples = 2000000;
    ig_gpt_index *ref = NULL;
    ig_err err = {0};
    assert_int_equal(ig_gpt_index_build(&ref, g_ctx, l, n, &o, &err), IG_OK);
    uint64_t rows;
    const int64_t *s = ig_gpt_index_sample_index(ref, &rows);
    uint64_t want = ig_xxh3_64(s, rows * 16) ^ ig_xxh3_64(ig_gpt_index_shuffle_index(ref, NULL),
                                                          ig_gpt_index_num_samples(ref) * 8);
    for (int p = 0; p < 4; p++) {
        size_t len;
        char *h = igt_read(igt_fmt("%s/hash.%d", tmp, p), &len);
        assert_int_equal(len, 8);
        assert_memory_equal(h, &want, 8);
        free(h);
    }
    /* One cache file, one lock file, four hashes: no temporaries left behind. */
    assert_int_equal(igt_count_entries(tmp), 6);
    ig_gpt_index_free(ref);
    free(l);
    igt_rmtree(tmp);
    free(tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mt19937_raw_and_interval),
        cmocka_unit_test(test_shuffle_matches_numpy),
        cmocka_unit_test(test_normalize_matches_numpy),
        cmocka_unit_test(test_split_ranges),
        cmocka_unit_test(test_gpt_goldens),
        cmocka_unit_test(test_blend_golden),
        cmocka_unit_test(test_blend_sizing_version),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_read_from_shards),
        cmocka_unit_test(test_cache_reuse_and_invalidation),
        cmocka_unit_test(test_cache_concurrent_builders),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
