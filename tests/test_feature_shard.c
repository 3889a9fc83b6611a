/* test_feature_shard.c - caption-feature shards (dataset/feature_shard_*.c, feature_meta.c): a
 * written shard reads back exactly (fp32 and bf16 bytes, captions of several lengths, none, and a
 * clip repeating the one before), verifies, and is refused with a message naming the file, the
 * field and the clip when any header or record field is damaged, a value changes, the manifest
 * describes other data or is missing, or a run marker covers it; lists of shards; the feature
 * dataset over the shards of one output (each where the one before ends, one encoder, the whole
 * clip data) and its match against clip shards (their caption texts read back too).
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"
#include "dataset/feature_shard_internal.h"

static char *g_dir;

/* the message says what it should */
#define expect_substr(msg, sub)                                                                    \
    do {                                                                                           \
        if (!strstr((msg), (sub))) fail_msg("expected \"%s\" in: %s", (sub), (msg));               \
    } while (0)
#define igt_exists(path) ig_file_exists(path)

static int setup(void **state) {
    (void)state;
    g_dir = igt_mkdtemp();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    igt_rmtree(g_dir);
    free(g_dir);
    return 0;
}

enum { W = 5, CAP = 6 };

/* the clips of a test shard: their tokens (0: none; -1: the previous clip's caption again) */
static const int lens[] = {3, -1, 0, 6, 1, 0, 2};
enum { N = sizeof lens / sizeof lens[0] };

static ig_feature_encoder encoder(void) {
    ig_feature_encoder e = {.width = W, .weights_xxh3 = 0x1234, .tokenizer_hash = 0x77};
    snprintf(e.describe, sizeof e.describe, "t5: 1 layers, 1 heads, d_model 5");
    snprintf(e.tokenizer, sizeof e.tokenizer, "sentencepiece-unigram");
    return e;
}

/* clip c's value j, distinct everywhere: whole numbers below 256 in magnitude, which bf16 holds */
static float value(int c, int j) {
    return (float)(c * 30 + j) - 100.0f;
}

/* Writes clips [first, first + n) of the lens above (a clip data of N clips, key 0xc1f) into
 * prefix in dtype (bf16: the values' high halves, exact for these), with its manifest. */
static void write_features(const char *prefix, int first, int n, ig_feature_dtype dtype) {
    ig_err err = {0};
    ig_feature_shard_writer *w = NULL;
    ig_feature_shard_writer_opts o = {.dtype = dtype,
                                      .width = W,
                                      .caption_len = CAP,
                                      .first_clip = (uint64_t)first,
                                      .data_clips = N,
                                      .clip_key = 0xc1f,
                                      .overwrite = 1};
    if (ig_feature_shard_writer_create(&w, NULL, prefix, &o, &err) != IG_OK)
        fail_msg("%s", err.msg);
    for (int c = first; c < first + n; c++) {
        int L = lens[c] < 0 && c == first ? 3 : lens[c]; /* a shard starts with its own values */
        float f[CAP * W];
        uint16_t h[CAP * W];
        for (int j = 0; j < (L > 0 ? L : 0) * W; j++) {
            f[j] = value(c, j);
            uint32_t u;
            memcpy(&u, &f[j], 4);
            h[j] = (uint16_t)(u >> 16);
        }
        const void *v = dtype == IG_FEATURES_F32 ? (const void *)f : (const void *)h;
        if (ig_feature_shard_writer_add(w, v, L < 0 ? 0 : (uint32_t)L, L < 0, &err) != IG_OK)
            fail_msg("%s", err.msg);
    }
    char *sources[] = {"clips"};
    ig_feature_meta meta = {.encoder = encoder(), .sources = sources, .n_sources = 1, .cut = 1};
    ig_feature_meta done;
    if (ig_feature_shard_writer_finish(w, &meta, &done, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_feature_meta_write(&done, prefix, 1, &err), IG_OK);
    ig_feature_meta_clear(&done);
}

static void check_roundtrip(ig_feature_dtype dtype) {
    const char *p = igt_fmt("%s/rt%d", g_dir, (int)dtype);
    write_features(p, 0, N, dtype);
    ig_err err = {0};
    if (ig_feature_shard_verify(NULL, p, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_feature_shard *s = NULL;
    assert_int_equal(ig_feature_shard_open(&s, NULL, p, &err), IG_OK);
    assert_int_equal(ig_feature_shard_clips(s), N);
    const ig_feature_meta *m = ig_feature_shard_meta(s);
    assert_non_null(m);
    assert_int_equal(m->captioned, 5);
    assert_int_equal(m->tokens, 3 + 3 + 6 + 1 + 2);
    assert_int_equal(m->cut, 1);
    assert_int_equal(m->width, W);
    assert_int_equal(m->dtype, dtype);
    assert_string_equal(m->encoder.describe, encoder().describe);
    assert_int_equal(m->encoder.weights_xxh3, 0x1234);
    size_t vb = dtype == IG_FEATURES_F32 ? 4 : 2;
    /* the repeat is stored once: 3 + 6 + 1 + 2 tokens of values */
    assert_int_equal(m->feat_bytes, (3 + 6 + 1 + 2) * W * vb);
    for (int c = 0; c < N; c++) {
        const void *v;
        uint32_t L;
        assert_int_equal(ig_feature_shard_clip(s, (uint64_t)c, &v, &L, 1, &err), IG_OK);
        int want = lens[c] < 0 ? 3 : lens[c], from = lens[c] < 0 ? c - 1 : c;
        assert_int_equal(L, want);
        if (!L) assert_null(v);
        for (int j = 0; j < want * W; j++) {
            float got;
            if (dtype == IG_FEATURES_F32) {
                memcpy(&got, (const char *)v + 4 * j, 4);
            } else {
                uint16_t h;
                memcpy(&h, (const char *)v + 2 * j, 2);
                uint32_t u = (uint32_t)h << 16;
                memcpy(&got, &u, 4);
            }
            assert_true(got == value(from, j));
        }
    }
    assert_int_equal(ig_feature_shard_clip(s, N, &(const void *){NULL}, &(uint32_t){0}, 0, &err),
                     IG_ERR_INVALID_ARG);
    ig_feature_shard_close(s);
    assert_true(ig_feature_shard_is(p));
    assert_false(ig_feature_shard_is(igt_fmt("%s/none", g_dir)));
}

static void test_roundtrip(void **state) {
    (void)state;
    check_roundtrip(IG_FEATURES_F32);
    check_roundtrip(IG_FEATURES_BF16);
}

/* What the writer refuses: a caption past the caption length, a repeat of no caption, more
 * clips than the clip data has from the first. */
static void test_writer_refusals(void **state) {
    (void)state;
    ig_err err = {0};
    ig_feature_shard_writer *w = NULL;
    ig_feature_shard_writer_opts o = {.dtype = IG_FEATURES_F32,
                                      .width = W,
                                      .caption_len = CAP,
                                      .first_clip = 1,
                                      .data_clips = 2,
                                      .overwrite = 1};
    const char *p = igt_fmt("%s/wr", g_dir);
    assert_int_equal(ig_feature_shard_writer_create(&w, NULL, p, &o, &err), IG_OK);
    float v[(CAP + 1) * W] = {0};
    assert_int_equal(ig_feature_shard_writer_add(w, v, CAP + 1, 0, &err), IG_ERR_INVALID_ARG);
    expect_substr(err.msg, "past the caption length 6");
    assert_int_equal(ig_feature_shard_writer_add(w, v, 0, 1, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_feature_shard_writer_add(w, v, 0, 0, &err), IG_OK);
    assert_int_equal(ig_feature_shard_writer_add(w, v, 0, 1, &err), IG_ERR_INVALID_ARG);
    expect_substr(err.msg, "which has none");
    assert_int_equal(ig_feature_shard_writer_add(w, v, 2, 0, &err), IG_OK);
    ig_feature_meta done;
    assert_int_equal(ig_feature_shard_writer_finish(w, NULL, &done, &err), IG_ERR_INVALID_ARG);
    expect_substr(err.msg, "pass the clip data's 2");
    assert_false(igt_exists(igt_fmt("%s.feat", p)));
    o.width = 0;
    assert_int_equal(ig_feature_shard_writer_create(&w, NULL, p, &o, &err), IG_ERR_INVALID_ARG);
}

/* A copy of the test shard whose .fidx has bytes [at, at + n) replaced by val (little-endian). */
static const char *damaged(const char *name, size_t at, size_t n, uint64_t val) {
    const char *p = igt_fmt("%s/%s", g_dir, name);
    write_features(p, 0, N, IG_FEATURES_F32);
    size_t len = 0;
    char *idx = igt_read(igt_fmt("%s.fidx", p), &len);
    for (size_t i = 0; i < n; i++) idx[at + i] = (char)(val >> (8 * i));
    igt_write(igt_fmt("%s.fidx", p), idx, len);
    free(idx);
    return p;
}

/* The index validated: each damage refused with what it is (the manifest removed so that the
 * index itself answers, not its checksum). */
static void test_index_refused(void **state) {
    (void)state;
    const size_t R = IG_FEAT_HEADER_BYTES; /* record 0 */
    const size_t R1 = R + IG_FEAT_RECORD_BYTES, R2 = R1 + IG_FEAT_RECORD_BYTES;
    const size_t R3 = R2 + IG_FEAT_RECORD_BYTES, R6 = R + 6 * IG_FEAT_RECORD_BYTES;
    struct {
        size_t at, n;
        uint64_t val;
        ig_status st;
        const char *says;
    } cases[] = {
        {0, 1, 'X', IG_ERR_FORMAT, "not a caption-feature index"},
        {8, 4, 2, IG_ERR_UNSUPPORTED, "index version 2; this ingot reads version 1 (upgrade"},
        {8, 4, 0, IG_ERR_FORMAT, "index version 0"},
        {12, 4, 32, IG_ERR_FORMAT, "record size 32"},
        {16, 8, N + 1, IG_ERR_FORMAT, "are not within the clip data's"},
        {24, 8, 1, IG_ERR_FORMAT, "clips 1 .. 8 are not within the clip data's 7"},
        {32, 8, 3, IG_ERR_FORMAT, "are not within the clip data's 3"},
        {48, 8, 7, IG_ERR_FORMAT, "the index describes 7 bytes of features"},
        {56, 4, 3, IG_ERR_FORMAT, "dtype 3"},
        {60, 4, 0, IG_ERR_FORMAT, "width 0"},
        {64, 4, 0, IG_ERR_FORMAT, "caption length 0"},
        {64, 4, 5, IG_ERR_FORMAT, "clip 3 (record 3): more tokens than the caption length"},
        {68, 4, 1, IG_ERR_FORMAT, "header fields"},
        {R + 12, 4, 1, IG_ERR_FORMAT, "clip 0 (record 0): reserved bytes are not zero"},
        {R + 0, 8, 4, IG_ERR_FORMAT, "clip 0 (record 0): its values are not where"},
        {R1 + 8, 4, 2, IG_ERR_FORMAT, "clip 1 (record 1): repeats the previous clip's values"},
        {R2 + 16, 8, 9, IG_ERR_FORMAT, "clip 2 (record 2): no caption, but an offset or"},
        {R6 + 8, 4, 6, IG_ERR_FORMAT, "clip 6 (record 6): its values end past the data"},
        {R3 + 0, 8, 0, IG_ERR_FORMAT, "clip 3 (record 3): its values are not where"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *p = damaged(igt_fmt("d%zu", k), cases[k].at, cases[k].n, cases[k].val);
        remove(igt_fmt("%s.json", p));
        ig_err err = {0};
        ig_feature_shard *s = NULL;
        ig_status st = ig_feature_shard_open(&s, NULL, p, &err);
        if (st != cases[k].st) fail_msg("case %zu: status %d, message %s", k, st, err.msg);
        expect_substr(err.msg, cases[k].says);
        expect_substr(err.msg, ".fidx");
        assert_null(s);
    }
    /* truncated: the records against the header */
    const char *p = damaged("trunc", 0, 0, 0);
    size_t len = 0;
    char *idx = igt_read(igt_fmt("%s.fidx", p), &len);
    igt_write(igt_fmt("%s.fidx", p), idx, len - 3);
    free(idx);
    remove(igt_fmt("%s.json", p));
    ig_err err = {0};
    ig_feature_shard *s = NULL;
    assert_int_equal(ig_feature_shard_open(&s, NULL, p, &err), IG_ERR_FORMAT);
    expect_substr(err.msg, "truncated or damaged");
    /* the data file shorter than the index says */
    p = damaged("short", 0, 0, 0);
    char *feat = igt_read(igt_fmt("%s.feat", p), &len);
    igt_write(igt_fmt("%s.feat", p), feat, len - 4);
    free(feat);
    assert_int_equal(ig_feature_shard_open(&s, NULL, p, &err), IG_ERR_FORMAT);
    expect_substr(err.msg, "a file is truncated or from another shard");
    remove(igt_fmt("%s.feat", p));
    assert_int_equal(ig_feature_shard_open(&s, NULL, p, &err), IG_ERR_NOT_FOUND);
    expect_substr(err.msg, "no such caption-feature shard");
}

/* A value changed: open does not hash the data, a checked read and verify refuse it; a manifest
 * that describes other data, or a changed index, is refused on open; verify needs the manifest;
 * a run marker over the output refuses the shard. */
static void test_checksums_and_manifest(void **state) {
    (void)state;
    const char *p = damaged("val", 0, 0, 0);
    size_t len = 0;
    char *feat = igt_read(igt_fmt("%s.feat", p), &len);
    feat[W * 4 * 3 + 1] ^= 1; /* clip 3's second value */
    igt_write(igt_fmt("%s.feat", p), feat, len);
    free(feat);
    ig_err err = {0};
    ig_feature_shard *s = NULL;
    assert_int_equal(ig_feature_shard_open(&s, NULL, p, &err), IG_OK);
    const void *v;
    uint32_t L;
    assert_int_equal(ig_feature_shard_clip(s, 0, &v, &L, 1, &err), IG_OK);
    assert_int_equal(ig_feature_shard_clip(s, 3, &v, &L, 0, &err), IG_OK);
    assert_int_equal(ig_feature_shard_clip(s, 3, &v, &L, 1, &err), IG_ERR_CHECKSUM);
    expect_substr(err.msg, "clip 3's features do not match their checksum");
    ig_feature_shard_close(s);
    assert_int_equal(ig_feature_shard_verify(NULL, p, &err), IG_ERR_CHECKSUM);
    expect_substr(err.msg, ".feat: its xxh3 is not the one the manifest records");

    /* the manifest against the index: each field */
    const char *fields[][2] = {{"\"clips\": 7", "\"clips\": 6"},
                               {"\"first_clip\": 0", "\"first_clip\": 1"},
                               {"\"caption_len\": 6", "\"caption_len\": 7"},
                               {"\"width\": 5", "\"width\": 4"},
                               {"\"dtype\": \"fp32\"", "\"dtype\": \"bf16\""}};
    const char *names[] = {"clips", "first_clip", "caption_len", "width", "dtype"};
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        p = damaged(igt_fmt("m%zu", k), 0, 0, 0);
        char *j = igt_read(igt_fmt("%s.json", p), &len);
        /* every occurrence (the width is the encoder's too) */
        char *at = strstr(j, fields[k][0]);
        if (!at) fail_msg("%s not in the manifest: %s", fields[k][0], j);
        for (; at; at = strstr(at, fields[k][0])) memcpy(at, fields[k][1], strlen(fields[k][1]));
        igt_write(igt_fmt("%s.json", p), j, len);
        free(j);
        assert_int_equal(ig_feature_shard_open(&s, NULL, p, &err), IG_ERR_FORMAT);
        expect_substr(err.msg, igt_fmt("\"%s\" does not match", names[k]));
    }
    /* the index changed in a way it validates (a record's checksum): its xxh3 refuses it */
    p = damaged("sum", IG_FEAT_HEADER_BYTES + 3 * IG_FEAT_RECORD_BYTES + 16, 1, 0x5a);
    assert_int_equal(ig_feature_shard_open(&s, NULL, p, &err), IG_ERR_CHECKSUM);
    expect_substr(err.msg, ".fidx: its xxh3 is not the one the manifest records");
    /* no manifest: opens, verify refuses */
    p = damaged("nomani", 0, 0, 0);
    remove(igt_fmt("%s.json", p));
    assert_int_equal(ig_feature_shard_verify(NULL, p, &err), IG_ERR_NOT_FOUND);
    expect_substr(err.msg, "manifest missing");
    /* a run marker */
    p = damaged("marked", 0, 0, 0);
    assert_int_equal(ig_run_marker_create(p, &err), IG_OK);
    assert_int_equal(ig_feature_shard_open(&s, NULL, p, &err), IG_ERR_FORMAT);
    expect_substr(err.msg, "unfinished preprocess run");
    assert_int_equal(ig_run_marker_remove(p, &err), IG_OK);
    assert_int_equal(ig_feature_shard_verify(NULL, p, &err), IG_OK);
    ig_feature_shard_remove(p);
    assert_false(igt_exists(igt_fmt("%s.fidx", p)));
    assert_false(igt_exists(igt_fmt("%s.json", p)));
}

/* Two shards of one output in a list: expanded in order, verified, read as one dataset; the
 * shards out of order, one missing, or of another encoder are refused naming them. */
static void test_lists_and_dataset(void **state) {
    (void)state;
    const char *a = igt_fmt("%s/out_r0000", g_dir);
    char *a_ = strdup(a);
    write_features(a_, 0, 4, IG_FEATURES_F32);
    const char *b = igt_fmt("%s/out_r0001", g_dir);
    char *b_ = strdup(b);
    write_features(b_, 4, N - 4, IG_FEATURES_F32);
    ig_err err = {0};
    const char *both[] = {a_, b_};
    const char *list = igt_fmt("%s/out", g_dir);
    char *list_ = strdup(list);
    if (ig_feature_list_write(list_, both, 2, 0, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_true(ig_feature_shard_is(list_));
    char **got = NULL;
    size_t n = 0;
    assert_int_equal(ig_feature_list_expand(list_, &got, &n, &err), IG_OK);
    assert_int_equal(n, 2);
    assert_string_equal(got[0], a_);
    assert_string_equal(got[1], b_);
    ig_shard_list_free(got, n);
    size_t ok = 0;
    if (ig_feature_list_verify(NULL, list_, &ok, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ok, 2);

    ig_feature_dataset *ds = NULL;
    const char *one[] = {list_};
    if (ig_feature_dataset_open(&ds, NULL, one, 1, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_feature_dataset_clips(ds), N);
    for (int c = 0; c < N; c++) {
        const void *v;
        uint32_t L;
        assert_int_equal(ig_feature_dataset_clip(ds, (uint64_t)c, &v, &L, &err), IG_OK);
        int want = lens[c] < 0 ? 3 : lens[c];
        assert_int_equal(L, want);
        if (L) {
            float f0;
            memcpy(&f0, v, 4);
            assert_true(f0 == value(lens[c] < 0 ? c - 1 : c, 0));
        }
    }
    ig_feature_dataset_close(ds);

    const char *rev[] = {b_, a_};
    assert_int_equal(ig_feature_dataset_open(&ds, NULL, rev, 2, &err), IG_ERR_INVALID_ARG);
    expect_substr(err.msg, "holds the features of clips 4 .. 6, but the shards before it end at "
                           "clip 0");
    assert_int_equal(ig_feature_dataset_open(&ds, NULL, both, 1, &err), IG_ERR_INVALID_ARG);
    expect_substr(err.msg, "hold the features of 4 clips, their clip data has 7");
    /* b remade by another encoder: refused with how they differ */
    ig_feature_meta m;
    assert_int_equal(ig_feature_meta_read(&m, b_, &err), IG_OK);
    m.encoder.weights_xxh3 = 0x999;
    assert_int_equal(ig_feature_meta_write(&m, b_, 1, &err), IG_OK);
    ig_feature_meta_clear(&m);
    assert_int_equal(ig_feature_dataset_open(&ds, NULL, both, 2, &err), IG_ERR_INVALID_ARG);
    expect_substr(err.msg, "different encoders (their weights (xxh3 0000000000000999 and "
                           "0000000000001234))");
    /* and the list no longer verifies: b's manifest is not what it recorded? (its data is) */
    write_features(b_, 4, N - 4, IG_FEATURES_BF16);
    assert_int_equal(ig_feature_list_verify(NULL, list_, &ok, &err), IG_ERR_CHECKSUM);
    expect_substr(err.msg, "is not the one the list recorded");
    assert_int_equal(ok, 2);
    free(a_);
    free(b_);
    free(list_);
}

/* Writes a frame shard of `clips` clips of one 2x2 frame, clip c from source c / 2, with the
 * captions' texts of its sources. */
static void write_clips(const char *prefix, uint32_t clips, const char *const *texts,
                        size_t n_texts) {
    ig_err err = {0};
    ig_video_shard_writer *w = NULL;
    ig_video_shard_writer_opts o = {.overwrite = 1};
    assert_int_equal(ig_video_shard_writer_create(&w, NULL, prefix, &o, &err), IG_OK);
    for (uint32_t c = 0; c < clips; c++) {
        ig_clip_info ci = {.frames = 1,
                           .height = 2,
                           .width = 2,
                           .fps_num = 1,
                           .fps_den = 1,
                           .source = c / 2,
                           .caption = IG_CLIP_NONE,
                           .bucket = IG_CLIP_NONE,
                           .label = IG_CLIP_NONE,
                           .tb_num = 1,
                           .tb_den = 1};
        uint8_t px[12] = {(uint8_t)c};
        ig_clip_frame fr = {0, 0};
        assert_int_equal(ig_video_shard_writer_add(w, &ci, &fr, px, sizeof px, &err), IG_OK);
    }
    ig_shard_writer *tw = NULL;
    ig_shard_writer_opts to = ig_shard_writer_opts_default();
    to.dtype = IG_DTYPE_U8;
    to.overwrite = 1;
    assert_int_equal(ig_shard_writer_create(&tw, NULL, igt_fmt("%s.texts", prefix), &to, &err),
                     IG_OK);
    char **src = calloc(n_texts, sizeof *src);
    for (size_t i = 0; i < n_texts; i++) {
        int32_t ids[64];
        size_t len = strlen(texts[i]);
        for (size_t j = 0; j < len; j++) ids[j] = (unsigned char)texts[i][j];
        assert_int_equal(ig_shard_writer_add_document(tw, ids, len, &err), IG_OK);
        src[i] = strdup(igt_fmt("v%zu.mp4", i));
    }
    ig_manifest tm = {.vocab_size = 256, .eod_id = -1};
    snprintf(tm.tokenizer, sizeof tm.tokenizer, "utf-8");
    assert_int_equal(ig_shard_writer_finish(tw, &tm, &err), IG_OK);
    ig_video_shard_meta meta = {.sources = src, .n_sources = n_texts};
    const char *slash = strrchr(prefix, '/');
    snprintf(meta.texts, sizeof meta.texts, "%s.texts", slash ? slash + 1 : prefix);
    ig_video_shard_meta done;
    assert_int_equal(ig_video_shard_writer_finish(w, &meta, &done, &err), IG_OK);
    assert_int_equal(ig_video_shard_meta_write(&done, prefix, 1, &err), IG_OK);
    ig_video_shard_meta_clear(&done);
    for (size_t i = 0; i < n_texts; i++) free(src[i]);
    free(src);
}

/* The features of a clip data match it and no other: a clip dataset's key and clips, as
 * ig_clip_key_next computes them before the shards can be opened. The clips' texts read back. */
static void test_match_clips(void **state) {
    (void)state;
    const char *texts[] = {"a red fox", "", "two cats"};
    char *cp = strdup(igt_fmt("%s/clips", g_dir));
    write_clips(cp, 6, texts, 3);
    ig_err err = {0};
    ig_clip_dataset *cd = NULL;
    const char *cps[] = {cp};
    assert_int_equal(ig_clip_dataset_open(&cd, NULL, cps, 1, &err), IG_OK);
    for (uint64_t g = 0; g < 6; g++) {
        const char *t;
        size_t len;
        assert_int_equal(ig_clip_dataset_text(cd, g, &t, &len, &err), IG_OK);
        assert_int_equal(len, strlen(texts[g / 2]));
        assert_memory_equal(t, texts[g / 2], len);
    }
    ig_video_shard_meta vm;
    assert_int_equal(ig_video_shard_meta_read(&vm, cp, &err), IG_OK);
    assert_int_equal(ig_clip_key_next(0, &vm), ig_clip_dataset_key(cd));
    ig_video_shard_meta_clear(&vm);

    /* features of 6 clips under this clip data's key match; the key of other clips does not */
    char *fp = strdup(igt_fmt("%s/feats", g_dir));
    for (int k = 0; k < 2; k++) {
        ig_feature_shard_writer *w = NULL;
        ig_feature_shard_writer_opts o = {.dtype = IG_FEATURES_F32,
                                          .width = 2,
                                          .caption_len = 4,
                                          .data_clips = 6,
                                          .clip_key = ig_clip_dataset_key(cd) + (uint64_t)k,
                                          .overwrite = 1};
        assert_int_equal(ig_feature_shard_writer_create(&w, NULL, fp, &o, &err), IG_OK);
        float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        for (int c = 0; c < 6; c++)
            assert_int_equal(ig_feature_shard_writer_add(w, v, c % 2 ? 0 : 4, 0, &err), IG_OK);
        ig_feature_meta meta = {.encoder = {.width = 2}}, done;
        assert_int_equal(ig_feature_shard_writer_finish(w, &meta, &done, &err), IG_OK);
        assert_int_equal(ig_feature_meta_write(&done, fp, 1, &err), IG_OK);
        ig_feature_meta_clear(&done);
        ig_feature_dataset *fd = NULL;
        const char *fps[] = {fp};
        if (ig_feature_dataset_open(&fd, NULL, fps, 1, &err) != IG_OK) fail_msg("%s", err.msg);
        ig_status st = ig_feature_dataset_match(fd, cd, "feats", "clips", &err);
        ig_feature_dataset_close(fd);
        if (k == 0) {
            assert_int_equal(st, IG_OK);
        } else {
            assert_int_equal(st, IG_ERR_CONFIG);
            expect_substr(err.msg, "the caption features feats were made from other clips than "
                                   "clips");
        }
    }
    ig_clip_dataset_close(cd);
    /* a frame shard made before the texts were kept */
    remove(igt_fmt("%s.texts.json", cp));
    ig_video_shard_meta m;
    assert_int_equal(ig_video_shard_meta_read(&m, cp, &err), IG_OK);
    m.texts[0] = '\0';
    assert_int_equal(ig_video_shard_meta_write(&m, cp, 1, &err), IG_OK);
    ig_video_shard_meta_clear(&m);
    assert_int_equal(ig_clip_dataset_open(&cd, NULL, cps, 1, &err), IG_OK);
    const char *t;
    size_t len;
    assert_int_equal(ig_clip_dataset_text(cd, 0, &t, &len, &err), IG_ERR_NOT_FOUND);
    expect_substr(err.msg, "keeps no caption text");
    ig_clip_dataset_close(cd);
    free(cp);
    free(fp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),         cmocka_unit_test(test_writer_refusals),
        cmocka_unit_test(test_index_refused),     cmocka_unit_test(test_checksums_and_manifest),
        cmocka_unit_test(test_lists_and_dataset), cmocka_unit_test(test_match_clips),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
