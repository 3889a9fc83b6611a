/* test_video_pipeline.c - `preprocess video` as a library (preprocess/video_*.c): the manifest
 * (CSV quoting, relative paths, times, labels, errors with file:line), Open-Sora 2.0's bucket
 * tables and assignment, clips whose frames equal the decoder's for the source frames they name (by
 * stride, and by time on a variable-frame-rate video), output byte-identical for any worker count,
 * every kind of bad file skipped with its reason (and strict stopping the run, leaving nothing),
 * the output lifecycle (refusal, overwrite), captions, compression, and the probe-only info CSV.
 * Test videos are made by the ffmpeg CLI at test time; without it those tests are skipped. */
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dataset/dataset.h"
#include "preprocess/preprocess.h"

static char *g_dir;
static int g_ffmpeg;
static ig_ctx *g_ctx;
static ig_tokenizer *g_gpt2;

#define FF "ffmpeg -nostdin -hide_banner -loglevel error -y "

static const char *vp(const char *name) {
    return igt_fmt("%s/%s", g_dir, name);
}

static int setup(void **state) {
    (void)state;
    g_dir = igt_mkdtemp();
    ig_err err = {0};
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 2;
    o.log_level = IG_LOG_ERROR;
    if (ig_ctx_create(&g_ctx, &o, &err) != IG_OK) return -1;
    if (ig_tokenizer_load(&g_gpt2, g_ctx, igt_fmt("%s/data/gpt2", igt_source_dir()), NULL, &err))
        return -1;
    g_ffmpeg = igt_run("ffmpeg -version", NULL) == 0;
    if (!g_ffmpeg) return 0;
    const char *cmds[] = {
        FF "-f lavfi -i testsrc2=size=64x48:rate=25:duration=1 -c:v libx264 -bf 2 -g 8 %s/a.mp4",
        FF "-f lavfi -i testsrc2=size=48x32:rate=25:duration=1 -c:v libvpx-vp9 -deadline "
           "realtime -cpu-used 8 %s/b.webm",
        FF "-f lavfi -i testsrc2=size=64x48:rate=25:duration=0.48 -vf "
           "setpts='N/25/TB+if(gte(N\\,5)\\,0.3/TB\\,0)' -fps_mode passthrough -c:v libx264 "
           "%s/vfr.mp4",
        FF "-f lavfi -i testsrc2=size=64x48:rate=25:duration=0.12 -c:v libx264 %s/short.mp4",
        FF "-f lavfi -i testsrc2=size=64x48:rate=25:duration=1.2 -c:v libx264 -g 10 %s/moov.mp4",
        FF "-f lavfi -i sine=frequency=440:duration=0.2 %s/audio.wav",
        FF "-f lavfi -i testsrc2=size=640x360:rate=25:duration=1.2 -c:v libx264 -g 10 "
           "%s/big.mp4",
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (igt_run(igt_fmt(cmds[i], g_dir), NULL) != 0) return -1;
    size_t n;
    uint8_t *d = (uint8_t *)igt_read(vp("moov.mp4"), &n);
    igt_write(vp("cut.mp4"), d, n * 6 / 10);
    for (size_t i = n / 3; i < n / 3 + n / 5; i++) d[i] = (uint8_t)(0xff - (i & 0x0f));
    igt_write(vp("corrupt.mp4"), d, n);
    free(d);
    /* damaged in its second half: a clip of its first 24 frames fails after its first chunks */
    d = (uint8_t *)igt_read(vp("big.mp4"), &n);
    for (size_t i = n * 6 / 10; i < n * 7 / 10; i++) d[i] = (uint8_t)(0xff - (i & 0x0f));
    igt_write(vp("big_corrupt.mp4"), d, n);
    free(d);
    igt_write(vp("empty.mp4"), "", 0);
    igt_write(vp("text.mp4"), "not a video\n", 12);
    mkdir(vp("dir.mp4"), 0755);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ig_tokenizer_free(g_gpt2);
    ig_ctx_free(g_ctx);
    igt_rmtree(g_dir);
    free(g_dir);
    return 0;
}

#define REQUIRE_FFMPEG()                                                                           \
    do {                                                                                           \
        if (!g_ffmpeg) {                                                                           \
            print_message("skipped: the ffmpeg CLI is not installed (tools/install-deps.sh)\n");   \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ---- manifest -------------------------------------------------------------------------------- */

static void test_manifest_csv(void **state) {
    (void)state;
    const char *csv = "\xef\xbb\xbfpath,num_frames,text,start,end\r\n"
                      "a.mp4,10,\"A cat, \"\"quoted\"\"\nover lines\",1.5,00:02.5\r\n"
                      "\r\n"
                      "/abs/b.mp4,3,plain,,\n";
    ig_video_manifest m;
    ig_err err = {0};
    assert_int_equal(ig_video_manifest_parse(&m, csv, strlen(csv), 0, "/data/set/m.csv", &err),
                     IG_OK);
    assert_int_equal(m.n, 2);
    assert_string_equal(m.entries[0].path, "/data/set/a.mp4");
    assert_string_equal(m.entries[0].text, "A cat, \"quoted\"\nover lines");
    assert_true(fabs(m.entries[0].start - 1.5) < 1e-12);
    assert_true(fabs(m.entries[0].end - 2.5) < 1e-12);
    assert_string_equal(m.entries[1].path, "/abs/b.mp4");
    assert_int_equal(m.entries[1].line, 5);
    assert_true(m.entries[1].end < 0);
    ig_video_manifest_clear(&m);
    const struct {
        const char *text, *want;
    } bad[] = {
        {"file,text\na.mp4,x\n", "m.csv:1: the header has no 'path' column"},
        {"path,text\na.mp4,x,y\n", "m.csv:2: 3 fields"},
        {"path,text\na.mp4,\"open\n", "m.csv:"},
        {"path,start\na.mp4,soon\n", "m.csv:2: column 'start' is not a time"},
        {"path,start,end\na.mp4,3,2\n", "m.csv:2: end (2 s) is not after start"},
        {"path\n", "lists no videos"},
        {"path,text\n\"\",x\n", "m.csv:2: the path is empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ig_err_clear(&err);
        assert_int_equal(
            ig_video_manifest_parse(&m, bad[i].text, strlen(bad[i].text), 0, "m.csv", &err),
            IG_ERR_FORMAT);
        if (!strstr(err.msg, bad[i].want)) fail_msg("'%s' not in '%s'", bad[i].want, err.msg);
    }
}

static void test_manifest_jsonl(void **state) {
    (void)state;
    const char *j = "{\"path\": \"v/a.mp4\", \"text\": \"hi\", \"start\": \"0:01\"}\n\n"
                    "{\"path\": \"b.mp4\", \"end\": 4}\n";
    ig_video_manifest m;
    ig_err err = {0};
    assert_int_equal(ig_video_manifest_parse(&m, j, strlen(j), 1, "d/m.jsonl", &err), IG_OK);
    assert_int_equal(m.n, 2);
    assert_string_equal(m.entries[0].path, "d/v/a.mp4");
    assert_true(fabs(m.entries[0].start - 1) < 1e-12);
    assert_string_equal(m.entries[1].text, "");
    assert_int_equal(m.entries[1].line, 3);
    ig_video_manifest_clear(&m);
    const char *bad = "{\"path\": 3}\n";
    assert_int_equal(ig_video_manifest_parse(&m, bad, strlen(bad), 1, "m.jsonl", &err),
                     IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "m.jsonl:1"));
}

/* The label column (CSV) or field (JSON lines): a class id per video, none when absent, empty
 * or null; anything but an integer 0 .. 2^31 - 2 refused with file:line and the value. */
static void test_manifest_labels(void **state) {
    (void)state;
    ig_video_manifest m;
    ig_err err = {0};
    const char *csv = "path,label,text\n"
                      "a.mp4,3,a cat\n"
                      "b.mp4,,no label\n"
                      "c.mp4, 0 ,spaces around\n"
                      "d.mp4,2147483646,the largest\n"
                      "e.mp4,007,leading zeros\n";
    assert_int_equal(ig_video_manifest_parse(&m, csv, strlen(csv), 0, "m.csv", &err), IG_OK);
    assert_int_equal(m.n, 5);
    const uint32_t want[5] = {3, IG_CLIP_NONE, 0, IG_CLIP_LABEL_MAX, 7};
    for (int i = 0; i < 5; i++) assert_int_equal(m.entries[i].label, want[i]);
    assert_string_equal(m.entries[0].text, "a cat");
    ig_video_manifest_clear(&m);
    /* no label column: no labels */
    const char *plain = "path,text\na.mp4,x\nb.mp4,y\n";
    assert_int_equal(ig_video_manifest_parse(&m, plain, strlen(plain), 0, "m.csv", &err), IG_OK);
    assert_int_equal(m.entries[0].label, IG_CLIP_NONE);
    assert_int_equal(m.entries[1].label, IG_CLIP_NONE);
    ig_video_manifest_clear(&m);
    const char *j = "{\"path\": \"a.mp4\", \"text\": \"hi\", \"label\": 12}\n"
                    "{\"path\": \"b.mp4\", \"label\": null}\n"
                    "{\"path\": \"c.mp4\"}\n"
                    "{\"path\": \"d.mp4\", \"label\": 0}\n";
    assert_int_equal(ig_video_manifest_parse(&m, j, strlen(j), 1, "m.jsonl", &err), IG_OK);
    assert_int_equal(m.n, 4);
    const uint32_t jwant[4] = {12, IG_CLIP_NONE, IG_CLIP_NONE, 0};
    for (int i = 0; i < 4; i++) assert_int_equal(m.entries[i].label, jwant[i]);
    ig_video_manifest_clear(&m);
    const struct {
        const char *text;
        int jsonl;
        const char *want;
    } bad[] = {
        {"path,label\na.mp4,1\nb.mp4,-1\n", 0, "m.csv:3: label '-1' is not a class id"},
        {"path,label\na.mp4,1.5\n", 0, "m.csv:2: label '1.5' is not a class id"},
        {"path,label\na.mp4,2147483647\n", 0, "m.csv:2: label '2147483647' is not a class id"},
        {"path,label\na.mp4,99999999999999999999999\n", 0,
         "m.csv:2: label '99999999999999999999999'"},
        {"path,label\na.mp4,cat\n", 0, "m.csv:2: label 'cat' is not a class id"},
        {"path,label\na.mp4,+3\n", 0, "m.csv:2: label '+3'"},
        {"path,label\na.mp4,1e3\n", 0, "m.csv:2: label '1e3'"},
        {"path,label\na.mp4,0x10\n", 0, "m.csv:2: label '0x10'"},
        {"path,label\na.mp4,3 4\n", 0, "m.csv:2: label '3 4'"},
        {"path,label,text\na.mp4,\"4\nfive\",x\n", 0, "m.csv:2: label '4\nfive'"},
        {"path,label,label\na.mp4,1,2\n", 0, "m.csv:1: column 'label' is named twice"},
        {"{\"path\": \"a.mp4\", \"label\": -1}\n", 1, "m.csv:1: \"label\" -1 is not a class id"},
        {"{\"path\": \"a.mp4\"}\n{\"path\": \"b.mp4\", \"label\": 1.0}\n", 1,
         "m.csv:2: \"label\" 1.0 is not a class id"},
        {"{\"path\": \"a.mp4\", \"label\": 2147483647}\n", 1, "m.csv:1: \"label\" 2147483647"},
        {"{\"path\": \"a.mp4\", \"label\": \"3\"}\n", 1, "m.csv:1: \"label\" \"3\""},
        {"{\"path\": \"a.mp4\", \"label\": true}\n", 1, "m.csv:1: \"label\" true"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ig_err_clear(&err);
        ig_status st = ig_video_manifest_parse(&m, bad[i].text, strlen(bad[i].text), bad[i].jsonl,
                                               "m.csv", &err);
        if (st != IG_ERR_FORMAT) fail_msg("case %zu: status %d", i, (int)st);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("case %zu: '%s' not in '%s'", i, bad[i].want, err.msg);
    }
}

/* A NUL byte in a manifest field used to cut the caption (or the path) short without a word:
 * refused with file:line and the column, as the reader refuses other bad fields; in JSON lines
 * both a raw NUL and "\u0000" are refused. */
static void test_manifest_nul(void **state) {
    (void)state;
    static const char caption[] = "path,text\na.mp4,a cat\0 and a dog\n";
    static const char quoted[] = "path,text\na.mp4,\"a cat\nand\0 a dog\"\n";
    static const char path[] = "text,path\nhi,a.mp4\0.txt\n";
    static const char other[] = "path,text,fps\na.mp4,hi,2\0\n";
    static const char header[] = "path,te\0xt\na.mp4,hi\n";
    static const char json_raw[] = "{\"path\": \"a.mp4\", \"text\": \"a cat\0 and a dog\"}\n";
    static const char json_esc[] =
        "{\"path\": \"a.mp4\"}\n{\"path\": \"b.mp4\", \"text\": \"a\\u0000b\"}\n";
    const struct {
        const char *text;
        size_t len;
        int jsonl;
        const char *want;
    } bad[] = {
        {caption, sizeof caption - 1, 0, "m.csv:2: field 2 ('text') holds a NUL byte"},
        {quoted, sizeof quoted - 1, 0, "m.csv:3: field 2 ('text') holds a NUL byte"},
        {path, sizeof path - 1, 0, "m.csv:2: field 2 ('path') holds a NUL byte"},
        {other, sizeof other - 1, 0, "m.csv:2: field 3 holds a NUL byte"},
        {header, sizeof header - 1, 0, "m.csv:1: the header holds a NUL byte"},
        {json_raw, sizeof json_raw - 1, 1, "m.csv:1:"},
        {json_esc, sizeof json_esc - 1, 1, "m.csv:2:"},
    };
    ig_video_manifest m;
    ig_err err = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ig_err_clear(&err);
        ig_status st =
            ig_video_manifest_parse(&m, bad[i].text, bad[i].len, bad[i].jsonl, "m.csv", &err);
        if (st != IG_ERR_FORMAT) {
            fail_msg("case %zu: status %d; caption '%s'", i, (int)st,
                     st == IG_OK && m.n ? m.entries[m.n - 1].text : err.msg);
        }
        if (!strstr(err.msg, bad[i].want))
            fail_msg("case %zu: '%s' not in '%s'", i, bad[i].want, err.msg);
    }
}

/* ---- buckets -------------------------------------------------------------------------------- */

/* Open-Sora 2.0's get_aspect_ratios_dict, computed by its own aspect.py */
static void test_bucket_tables(void **state) {
    (void)state;
    const char *yaml = "bucket_config:\n  \"256px\": {1: [1.0, 8]}\n  144p: {1: [1.0, 8]}\n";
    ig_video_buckets *b = NULL;
    ig_err err = {0};
    assert_int_equal(ig_video_buckets_parse(&b, yaml, strlen(yaml), "b.yaml", &err), IG_OK);
    const char *want =
        "256px/1/2.39:1 160x400,256px/1/2:1 176x368,256px/1/16:9 192x336,256px/1/9:16 336x192,"
        "256px/1/3:2 208x320,256px/1/4:3 224x288,256px/1/1:1 256x256,256px/1/1:2.39 400x160,"
        "256px/1/1:2 368x176,256px/1/2:3 320x208,256px/1/3:4 288x224,"
        "144p/1/2.39:1 128x288,144p/1/2:1 144x256,144p/1/9:16 256x144,144p/1/3:2 160x224,"
        "144p/1/4:3 176x208,144p/1/1:1 192x192,144p/1/1:2.39 288x128,144p/1/1:2 256x144,"
        "144p/1/16:9 144x256,144p/1/2:3 224x160,144p/1/3:4 208x176,";
    char got[2048] = "";
    for (size_t i = 0; i < ig_video_buckets_count(b); i++) {
        const ig_video_bucket *x = ig_video_buckets_get(b, i);
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s %ux%u,", x->name, x->height,
                 x->width);
        assert_int_equal(x->height % 16, 0);
        assert_int_equal(x->width % 16, 0);
    }
    assert_string_equal(got, want);
    ig_video_buckets_free(b);
    const char *bad[] = {"x: {1: [1, 2]}",
                         "256px: {0: [1, 2]}",
                         "256px: {8: [1.5, 2]}",
                         "256px: {8: [[1, 2], 2]}",
                         "256px: {8: [1, 0]}",
                         "256px: [1, 2]",
                         "256px: {8: [1, 2]}\n256px: {4: [1, 2]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ig_video_buckets_parse(&b, bad[i], strlen(bad[i]), "b.yaml", &err),
                         IG_ERR_CONFIG);
        assert_non_null(strstr(err.msg, "b.yaml:"));
    }
}

/* A bucket file is a settings file (ig_yaml_load_string): a NUL byte, a second document, anchors
 * and aliases, duplicate keys are refused with file:line:column. And every input of the fuzz
 * corpus replays with the fuzzer's checks: among them the one that leaked inside libfyaml (a run
 * of escaped single quotes), refused before libfyaml formats it, so that this test is clean under
 * LeakSanitizer (the ASan pass of make test). */
static void test_bucket_files_refused(void **state) {
    (void)state;
    ig_video_buckets *b = NULL;
    ig_err err = {0};
    static const char nul[] = "bucket_config:\n  \"256px\": {1: [1.0, 8]}\n\0  144p: {1: [1, 8]}\n";
    const struct {
        const char *yaml;
        size_t len;
        const char *want;
    } cases[] = {
        {nul, sizeof nul - 1, "b.yaml:3:1: a NUL byte"},
        {"256px: {1: [1.0, 8]}\n---\n144p: {1: [1.0, 8]}\n", 0, "b.yaml:2:1: a second YAML"},
        {"256px: &t {1: [1.0, 8]}\n144p: *t\n", 0, "b.yaml:1:8: an anchor (&t)"},
        {"256px: {1: [1.0, 8], 1: [1.0, 4]}\n", 0, "b.yaml:1:22: the key '1' is given twice"},
        {"{''''''''''''''''''''''''''''}", 0, "b.yaml:1:2: a single-quoted string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].yaml);
        assert_int_equal(ig_video_buckets_parse(&b, cases[i].yaml, len, "b.yaml", &err),
                         IG_ERR_CONFIG);
        if (!strstr(err.msg, cases[i].want)) fail_msg("case %zu: %s", i, err.msg);
        assert_null(b);
    }
    /* the fuzz corpus, with fuzz_buckets' checks */
    const char *dir = igt_fmt("%s/tests/fuzz/corpus/fuzz_buckets", igt_source_dir());
    DIR *d = opendir(dir);
    assert_non_null(d);
    int files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        size_t len = 0;
        char *text = igt_read(igt_fmt("%s/%s", dir, de->d_name), &len);
        ig_err_clear(&err);
        ig_status st = ig_video_buckets_parse(&b, text, len, de->d_name, &err);
        if (st != IG_OK && (st != IG_ERR_CONFIG || !err.msg[0]))
            fail_msg("%s: status %d: %s", de->d_name, (int)st, err.msg);
        for (size_t i = 0; st == IG_OK && i < ig_video_buckets_count(b); i++) {
            const ig_video_bucket *x = ig_video_buckets_get(b, i);
            assert_true(x->frames && x->height && x->width && x->batch_size);
            assert_int_equal(x->height % 16, 0);
        }
        if (!strcmp(de->d_name, "libfyaml_233_quotes"))
            assert_non_null(strstr(err.msg, "a single-quoted string with two escaped quotes"));
        ig_video_buckets_free(b);
        b = NULL;
        free(text);
        files++;
    }
    closedir(d);
    assert_true(files >= 3);
}

static void test_bucket_assign(void **state) {
    (void)state;
    /* 360p over 256px, longest frames first; q = 1 always skips to the shorter count */
    const char *yaml = "256px: {1: [1.0, 32], 16: [1.0, 8], 32: [[1.0, 1.0], 4]}\n"
                       "360p: {16: [0.0, 2]}\n";
    ig_video_buckets *b = NULL;
    ig_err err = {0};
    assert_int_equal(ig_video_buckets_parse(&b, yaml, strlen(yaml), "b.yaml", &err), IG_OK);
    /* a 640x360 video of 100 frames: 360p keeps nothing (p 0), 256px/32 is skipped (q 1), so
     * 256px/16 with the ratio nearest 360/640 (16:9, 192x336) */
    int64_t i = ig_video_buckets_assign(b, 100, 360, 640, 7, 0);
    assert_true(i >= 0);
    const ig_video_bucket *x = ig_video_buckets_get(b, (size_t)i);
    assert_string_equal(x->name, "256px/16/16:9");
    assert_int_equal(x->batch_size, 8);
    /* too few frames for any video bucket; an image takes the 1-frame bucket; too small: none */
    assert_int_equal(ig_video_buckets_assign(b, 10, 360, 640, 7, 0), -1);
    x = ig_video_buckets_get(b, (size_t)ig_video_buckets_assign(b, 1, 512, 512, 7, 0));
    assert_string_equal(x->name, "256px/1/1:1");
    assert_int_equal(ig_video_buckets_assign(b, 100, 100, 100, 7, 0), -1);
    ig_video_buckets_free(b);
    /* a keep probability of 0.5 takes about half, the same ones for the same seed */
    const char *half = "256px: {16: [0.5, 8]}\n";
    assert_int_equal(ig_video_buckets_parse(&b, half, strlen(half), "h.yaml", &err), IG_OK);
    int taken = 0, same = 1;
    for (uint64_t k = 0; k < 1000; k++) {
        int64_t a = ig_video_buckets_assign(b, 50, 256, 256, 42, k);
        taken += a >= 0;
        same &= a == ig_video_buckets_assign(b, 50, 256, 256, 42, k);
    }
    assert_true(same);
    assert_true(taken > 430 && taken < 570);
    ig_video_buckets_free(b);
}

/* ---- the pipeline --------------------------------------------------------------------------- */

static ig_status run(const char *manifest, const char *out, ig_video_opts *extra,
                     ig_video_stats *st, ig_err *err) {
    ig_video_opts o = extra ? *extra : ig_video_opts_default();
    o.manifest = manifest;
    o.output_prefix = out;
    ig_video_stats local = {0};
    ig_status s = ig_preprocess_video(g_ctx, &o, st ? st : &local, err);
    if (!st) ig_video_stats_clear(&local);
    return s;
}

static void write_manifest(const char *path, const char *const *rows, size_t n) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("path,text\n", f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s,caption %zu\n", rows[i], i);
    fclose(f);
}

/* Every clip's frames equal the decoder's own read of the source frames the clip names. */
static void check_clips_match_decoder(const char *out, uint32_t h, uint32_t w) {
    ig_clip_dataset *ds = NULL;
    ig_err err = {0};
    const char *pre[] = {out};
    assert_int_equal(ig_clip_dataset_open(&ds, NULL, pre, 1, &err), IG_OK);
    for (uint64_t g = 0; g < ig_clip_dataset_clips(ds); g++) {
        size_t k;
        uint64_t local;
        ig_clip_info c = ig_clip_dataset_info(ds, g, &k, &local);
        const ig_video_shard *s = ig_clip_dataset_shard(ds, k);
        ig_clip_frame fr[64];
        ig_video_shard_clip_frames(s, local, fr);
        size_t raw = (size_t)c.frames * c.height * c.width * 3;
        uint8_t *got = malloc(raw), *want = malloc(raw);
        assert_int_equal(ig_clip_dataset_read(ds, g, got, raw, &err), IG_OK);
        ig_video *v = NULL;
        const char *src = ig_video_shard_meta_get(s)->sources[c.source];
        assert_int_equal(ig_video_open(&v, NULL, src, NULL, NULL, &err), IG_OK);
        uint64_t idx[64];
        for (uint32_t f = 0; f < c.frames; f++) {
            idx[f] = fr[f].index;
            assert_int_equal(fr[f].pts, ig_video_frame_pts(v, idx[f]));
        }
        assert_int_equal(ig_video_read(v, idx, c.frames, h, w, want, NULL, &err), IG_OK);
        assert_memory_equal(got, want, raw);
        ig_video_close(v);
        free(got);
        free(want);
    }
    ig_clip_dataset_close(ds);
}

static void test_clips_by_stride(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    const char *rows[] = {"a.mp4", "b.webm"};
    write_manifest(vp("m1.csv"), rows, 2);
    ig_video_opts o = ig_video_opts_default();
    o.frames = 4;
    o.stride = 3;
    o.height = 24;
    o.width = 32;
    o.clips_per_video = 2;
    o.tokenizer = g_gpt2;
    ig_video_stats st = {0};
    ig_err err = {0};
    assert_int_equal(run(vp("m1.csv"), vp("s1"), &o, &st, &err), IG_OK);
    assert_int_equal(st.used, 2);
    assert_int_equal(st.clips, 4);
    assert_int_equal(st.frames, 16);
    ig_video_stats_clear(&st);
    assert_int_equal(ig_video_shard_verify(NULL, vp("s1"), &err), IG_OK);
    check_clips_match_decoder(vp("s1"), 24, 32);
    /* stride 3 from the drawn start; captions are the rows' texts */
    ig_clip_dataset *ds = NULL;
    const char *pre[] = {vp("s1")};
    assert_int_equal(ig_clip_dataset_open(&ds, NULL, pre, 1, &err), IG_OK);
    ig_clip_frame fr[4];
    ig_video_shard_clip_frames(ig_clip_dataset_shard(ds, 0), 1, fr);
    assert_int_equal(fr[3].index - fr[0].index, 9);
    int32_t ids[16];
    size_t len;
    assert_int_equal(ig_clip_dataset_caption(ds, 3, ids, 16, &len, &err), IG_OK);
    char *text = NULL;
    size_t tl = 0, tc = 0;
    assert_int_equal(ig_tokenizer_decode(g_gpt2, ids, len, &text, &tl, &tc, &err), IG_OK);
    assert_int_equal(tl, 9);
    assert_memory_equal(text, "caption 1", 9);
    free(text);
    ig_clip_dataset_close(ds);
}

/* Each video's label reaches every clip made from it; a video without one gives unlabelled
 * clips, and a skipped video's label goes nowhere. */
static void test_clips_carry_labels(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    const char *csv = "path,text,label\n"
                      "a.mp4,first,3\n"
                      "missing.mp4,gone,9\n"
                      "b.webm,second,\n"
                      "vfr.mp4,third,0\n";
    igt_write(vp("ml.csv"), csv, strlen(csv));
    ig_video_opts o = ig_video_opts_default();
    o.frames = 2;
    o.height = 16;
    o.width = 16;
    o.clips_per_video = 2;
    ig_video_stats st = {0};
    ig_err err = {0};
    assert_int_equal(run(vp("ml.csv"), vp("sl"), &o, &st, &err), IG_OK);
    assert_int_equal(st.used, 3);
    assert_int_equal(st.clips, 6);
    ig_video_stats_clear(&st);
    ig_video_shard *s = NULL;
    assert_int_equal(ig_video_shard_open(&s, NULL, vp("sl"), &err), IG_OK);
    const ig_video_shard_meta *m = ig_video_shard_meta_get(s);
    for (uint64_t c = 0; c < ig_video_shard_clips(s); c++) {
        ig_clip_info ci = ig_video_shard_clip(s, c);
        const char *src = m->sources[ci.source];
        uint32_t want = strstr(src, "a.mp4") ? 3 : strstr(src, "vfr.mp4") ? 0 : IG_CLIP_NONE;
        if (ci.label != want)
            fail_msg("clip %llu of %s: label %u", (unsigned long long)c, src, ci.label);
    }
    assert_int_equal(m->clips_version, 2);
    ig_video_shard_close(s);
    assert_int_equal(ig_video_shard_verify(NULL, vp("sl"), &err), IG_OK);
}

static void test_clips_by_time_vfr(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    /* frames at 0, .04, .08, .12, .16, .48, .52, ... s; before end = .55 s only a clip from
     * frame 0 fits, and at 10 fps the frames shown at 0, .1, .2, .3, .4, .5 s are 0, 2, 4, 4, 4,
     * 5 */
    const char *csv = "path,text,end\nvfr.mp4,x,0.55\n";
    igt_write(vp("m2.csv"), csv, strlen(csv));
    ig_video_opts o = ig_video_opts_default();
    o.frames = 6;
    o.fps = 10;
    ig_err err = {0};
    assert_int_equal(run(vp("m2.csv"), vp("s2"), &o, NULL, &err), IG_OK);
    ig_video_shard *s = NULL;
    assert_int_equal(ig_video_shard_open(&s, NULL, vp("s2"), &err), IG_OK);
    ig_clip_frame fr[6];
    ig_video_shard_clip_frames(s, 0, fr);
    const uint64_t want[6] = {0, 2, 4, 4, 4, 5};
    for (int j = 0; j < 6; j++) assert_int_equal(fr[j].index, want[j]);
    ig_clip_info c = ig_video_shard_clip(s, 0);
    assert_int_equal(c.fps_num, 10);
    assert_int_equal(c.fps_den, 1);
    ig_video_shard_close(s);
    check_clips_match_decoder(vp("s2"), 0, 0);
}

static void same_file(const char *a, const char *b) {
    size_t la, lb;
    char *x = igt_read(a, &la), *y = igt_read(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    free(x);
    free(y);
}

static void test_any_worker_count(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    const char *rows[] = {"a.mp4", "b.webm", "vfr.mp4", "a.mp4", "missing.mp4", "b.webm"};
    write_manifest(vp("m3.csv"), rows, 6);
    ig_video_opts o = ig_video_opts_default();
    o.frames = 3;
    o.stride = 2;
    o.height = 16;
    o.width = 16;
    o.clips_per_video = 3;
    o.tokenizer = g_gpt2;
    o.zstd_level = 3;
    ig_err err = {0};
    const int workers[] = {1, 3};
    for (int i = 0; i < 2; i++) {
        o.workers = workers[i];
        o.decoder_threads = workers[i];
        assert_int_equal(run(vp("m3.csv"), vp(igt_fmt("w%d", i)), &o, NULL, &err), IG_OK);
    }
    const char *exts[] = {".frames", ".clips", ".captions.bin", ".captions.idx"};
    for (int e = 0; e < 4; e++)
        same_file(vp(igt_fmt("w0%s", exts[e])), vp(igt_fmt("w1%s", exts[e])));
    assert_int_equal(ig_video_shard_verify(NULL, vp("w1"), &err), IG_OK);
}

static void test_bad_files_skipped(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    const char *rows[] = {"a.mp4",     "missing.mp4", "empty.mp4", "dir.mp4",     "text.mp4",
                          "audio.wav", "cut.mp4",     "short.mp4", "corrupt.mp4", "b.webm"};
    write_manifest(vp("m4.csv"), rows, 10);
    ig_video_opts o = ig_video_opts_default();
    o.frames = 8;
    o.stride = 3; /* corrupt.mp4: the one clip spans the damage */
    ig_video_stats st = {0};
    ig_err err = {0};
    assert_int_equal(run(vp("m4.csv"), vp("s4"), &o, &st, &err), IG_OK);
    assert_int_equal(st.videos, 10);
    assert_int_equal(st.used, 2);
    assert_int_equal(st.skipped, 8);
    assert_int_equal(st.by_reason[IG_VIDEO_MISSING], 1);
    assert_int_equal(st.by_reason[IG_VIDEO_EMPTY], 1);
    assert_int_equal(st.by_reason[IG_VIDEO_UNREADABLE], 1);
    assert_int_equal(st.by_reason[IG_VIDEO_NOT_VIDEO], 2);
    assert_int_equal(st.by_reason[IG_VIDEO_TRUNCATED], 1);
    assert_int_equal(st.by_reason[IG_VIDEO_TOO_SHORT], 1);
    assert_int_equal(st.by_reason[IG_VIDEO_CORRUPT], 1);
    ig_video_stats_clear(&st);
    char *rep = igt_read(vp("s4.report.csv"), NULL);
    assert_non_null(strstr(rep, "line,path,status,reason,clips,frames,decode_seconds,message\n"));
    assert_non_null(strstr(rep, "/missing.mp4,skipped,missing,0,0,"));
    assert_non_null(strstr(rep, "/corrupt.mp4,skipped,corrupt,0,0,"));
    assert_non_null(strstr(rep, "/b.webm,ok,ok,1,8,"));
    free(rep);
    assert_int_equal(ig_video_shard_verify(NULL, vp("s4"), &err), IG_OK);
    /* strict: the first bad video stops the run, which leaves nothing behind */
    o.strict = 1;
    assert_int_equal(run(vp("m4.csv"), vp("s5"), &o, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "missing.mp4: missing"));
    assert_false(ig_file_exists(vp("s5.json")));
    assert_false(ig_file_exists(vp("s5.frames")));
    assert_false(ig_file_exists(vp("s5.incomplete")));
    /* a per-file time limit too short for anything: all skipped as timeouts */
    o.strict = 0;
    o.timeout_s = 1e-9;
    assert_int_equal(run(vp("m1.csv"), vp("s6"), &o, &st, &err), IG_OK);
    assert_int_equal(st.by_reason[IG_VIDEO_TIMEOUT], 2);
    ig_video_stats_clear(&st);
}

/* A video's RGB clips are written while it decodes (chunks of about 2 MiB: 3 frames of 360x640);
 * a video that fails after some of them went out leaves nothing: the shard is byte for byte the
 * one where that row was skipped before decoding, and verifies. Each worker count, so that the
 * failing row is written ahead (one worker: the writer waits on it) and so that it may not be.
 * A first row, which goes straight to the writer. Then rows whose clip buffers are reused. */
static void test_failure_after_write_ahead(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    const char *bad[] = {"a.mp4", "big_corrupt.mp4", "big.mp4"};
    const char *ref[] = {"a.mp4", "missing.mp4", "big.mp4"};
    write_manifest(vp("m_bad.csv"), bad, 3);
    write_manifest(vp("m_ref.csv"), ref, 3);
    ig_video_opts o = ig_video_opts_default();
    o.frames = 24;
    o.height = 360;
    o.width = 640;
    o.max_video_memory = (uint64_t)1 << 30;
    o.overwrite = 1;
    ig_video_stats st = {0};
    ig_err err = {0};
    assert_int_equal(run(vp("m_ref.csv"), vp("wa_ref"), &o, &st, &err), IG_OK);
    assert_int_equal(st.used, 2);
    ig_video_stats_clear(&st);
    for (int workers = 1; workers <= 2; workers++) {
        o.workers = workers;
        const char *out = vp(igt_fmt("wa%d", workers));
        assert_int_equal(run(vp("m_bad.csv"), out, &o, &st, &err), IG_OK);
        assert_int_equal(st.used, 2);
        assert_int_equal(st.by_reason[IG_VIDEO_CORRUPT], 1);
        ig_video_stats_clear(&st);
        char *rep = igt_read(igt_fmt("%s.report.csv", out), NULL);
        assert_non_null(strstr(rep, "/big_corrupt.mp4,skipped,corrupt,0,0,"));
        free(rep);
        same_file(vp("wa_ref.frames"), igt_fmt("%s.frames", out));
        assert_int_equal(ig_video_shard_verify(NULL, out, &err), IG_OK);
    }
    /* the first row goes straight to the writer, chunk by chunk (never whole in memory): its
     * clips are the decoder's frames; failing half-way, it leaves an empty shard */
    o.workers = 1;
    o.clips_per_video = 2;
    o.frames = 9;
    write_manifest(vp("m_one.csv"), bad + 2, 1);
    assert_int_equal(run(vp("m_one.csv"), vp("wa_one"), &o, &st, &err), IG_OK);
    assert_int_equal(st.clips, 2);
    ig_video_stats_clear(&st);
    check_clips_match_decoder(vp("wa_one"), 360, 640);
    o.frames = 24;
    o.clips_per_video = 1;
    write_manifest(vp("m_one_bad.csv"), bad + 1, 1);
    assert_int_equal(run(vp("m_one_bad.csv"), vp("wa_one_bad"), &o, &st, &err), IG_OK);
    assert_int_equal(st.by_reason[IG_VIDEO_CORRUPT], 1);
    ig_video_stats_clear(&st);
    size_t nf = 1;
    free(igt_read(vp("wa_one_bad.frames"), &nf));
    assert_int_equal(nf, 0);
    assert_int_equal(ig_video_shard_verify(NULL, vp("wa_one_bad"), &err), IG_OK);
    /* rows after rows: their clip buffers come back from the writer's pool (two clips a row,
     * one row failing half-way) and every clip is still the decoder's frames */
    const char *many[] = {"big.mp4", "a.mp4",           "big.mp4", "big.mp4",
                          "a.mp4",   "big_corrupt.mp4", "big.mp4", "big.mp4"};
    write_manifest(vp("m_many.csv"), many, 8);
    o.workers = 2;
    o.frames = 6;
    o.clips_per_video = 2;
    assert_int_equal(run(vp("m_many.csv"), vp("wa_many"), &o, &st, &err), IG_OK);
    assert_int_equal(st.used, 7);
    ig_video_stats_clear(&st);
    check_clips_match_decoder(vp("wa_many"), 360, 640);
}

static void test_lifecycle_and_probe(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    ig_video_opts o = ig_video_opts_default();
    o.frames = 2;
    ig_err err = {0};
    assert_int_equal(run(vp("m1.csv"), vp("s7"), &o, NULL, &err), IG_OK);
    assert_int_equal(run(vp("m1.csv"), vp("s7"), &o, NULL, &err), IG_ERR_EXISTS);
    assert_string_equal(err.fix_option, "overwrite");
    o.overwrite = 1;
    o.frames = 3;
    assert_int_equal(run(vp("m1.csv"), vp("s7"), &o, NULL, &err), IG_OK);
    ig_video_shard *s = NULL;
    assert_int_equal(ig_video_shard_open(&s, NULL, vp("s7"), &err), IG_OK);
    assert_int_equal(ig_video_shard_clip(s, 0).frames, 3);
    ig_video_shard_close(s);
    /* a killed run's marker: refused by readers, cleaned up by the next run */
    assert_int_equal(ig_run_marker_create(vp("s7"), &err), IG_OK);
    assert_int_equal(ig_video_shard_open(&s, NULL, vp("s7"), &err), IG_ERR_FORMAT);
    o.overwrite = 0;
    assert_int_equal(run(vp("m1.csv"), vp("s7"), &o, NULL, &err), IG_OK);
    assert_int_equal(ig_video_shard_verify(NULL, vp("s7"), &err), IG_OK);
    /* probing only: the info CSV, no shard */
    o.probe_only = 1;
    ig_video_stats st = {0};
    assert_int_equal(run(vp("m4.csv"), vp("p"), &o, &st, &err), IG_OK);
    assert_int_equal(st.used, 4);
    ig_video_stats_clear(&st);
    char *info = igt_read(vp("p.info.csv"), NULL);
    assert_non_null(strstr(info, "path,text,num_frames,height,width,aspect_ratio,resolution,fps,"));
    assert_non_null(strstr(info, "/a.mp4,caption 0,25,48,64,0.75,3072,25,1,0,0,h264,yuv420p,ok\n"));
    assert_non_null(strstr(info, "/cut.mp4,caption 6,0,0,0,0,0,0,0,0,0,,,truncated\n"));
    free(info);
    assert_false(ig_file_exists(vp("p.frames")));
    assert_int_equal(run(vp("m4.csv"), vp("p"), &o, NULL, &err), IG_ERR_EXISTS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_manifest_csv),
        cmocka_unit_test(test_manifest_jsonl),
        cmocka_unit_test(test_manifest_nul),
        cmocka_unit_test(test_bucket_tables),
        cmocka_unit_test(test_bucket_assign),
        cmocka_unit_test(test_bucket_files_refused),
        cmocka_unit_test(test_clips_by_stride),
        cmocka_unit_test(test_clips_by_time_vfr),
        cmocka_unit_test(test_any_worker_count),
        cmocka_unit_test(test_bad_files_skipped),
        cmocka_unit_test(test_lifecycle_and_probe),
        cmocka_unit_test(test_manifest_labels),
        cmocka_unit_test(test_clips_carry_labels),
        cmocka_unit_test(test_failure_after_write_ahead),
    };
    if (getenv("IGT_FILTER")) cmocka_set_test_filter(getenv("IGT_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
