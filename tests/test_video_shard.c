/* test_video_shard.c - frame shards (dataset/video_shard_*.c, DESIGN 3.2): a written shard reads
 * back exactly (raw and zstd, labels included), verifies, and is refused with a message naming
 * the file and field when any header or record field is damaged, a clip's bytes change, the
 * manifest describes other data or a run marker covers it; a version-1 index (before labels)
 * still reads, with no labels; shard lists; the clip dataset over several shards with
 * captions. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"
#include "dataset/video_shard_internal.h"

static char *g_dir;

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

/* Deterministic pixels of clip c. */
static void fill_clip(uint8_t *p, size_t n, uint32_t c) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 31 + c * 7 + (i >> 9));
}

/* Clip c's label in write_shard: 10 + c, none for every third, the largest class id for clip 3. */
static uint32_t label_of(uint32_t c) {
    return c == 3 ? IG_CLIP_LABEL_MAX : c % 3 == 2 ? IG_CLIP_NONE : 10 + c;
}

/* Writes a shard of n clips (clip c: 2 + c % 3 frames of 8 x (6 + c) pixels, label label_of(c))
 * with 2 sources and 2 buckets; captions: caption_docs documents (0: none). */
static void write_shard(const char *prefix, uint32_t n, int zstd, uint64_t caption_docs) {
    ig_err err = {0};
    ig_video_shard_writer *w = NULL;
    ig_video_shard_writer_opts o = {.zstd = zstd, .overwrite = 1};
    assert_int_equal(ig_video_shard_writer_create(&w, NULL, prefix, &o, &err), IG_OK);
    for (uint32_t c = 0; c < n; c++) {
        ig_clip_info ci = {.frames = 2 + c % 3,
                           .height = 8,
                           .width = 6 + c,
                           .fps_num = 25,
                           .fps_den = 1,
                           .source = c % 2,
                           .caption = caption_docs ? c % (uint32_t)caption_docs : IG_CLIP_NONE,
                           .bucket = c % 2,
                           .label = label_of(c),
                           .start_pts = 1000 * c,
                           .tb_num = 1,
                           .tb_den = 1000};
        size_t raw = (size_t)ci.frames * ci.height * ci.width * 3;
        uint8_t *px = malloc(raw);
        fill_clip(px, raw, c);
        ig_clip_frame fr[8];
        for (uint32_t f = 0; f < ci.frames; f++) fr[f] = (ig_clip_frame){1000 * c + 40 * f, 3 * f};
        void *data = px;
        size_t bytes = raw;
        if (zstd) assert_int_equal(ig_clip_compress(px, raw, 3, &data, &bytes, &err), IG_OK);
        assert_int_equal(ig_video_shard_writer_add(w, &ci, fr, data, bytes, &err), IG_OK);
        if (zstd) free(data);
        free(px);
    }
    char *sources[] = {"a.mp4", "b.mp4"};
    ig_video_shard_meta meta = {.sources = sources, .n_sources = 2, .n_buckets = 2};
    ig_clip_bucket buckets[2] = {{"256px/16/1:1", 16, 256, 256, 4},
                                 {"360p/8/16:9", 8, 368, 640, 2}};
    meta.buckets = buckets;
    meta.caption_documents = caption_docs;
    if (caption_docs) {
        const char *slash = strrchr(prefix, '/');
        snprintf(meta.captions, sizeof meta.captions, "%s.captions", slash ? slash + 1 : prefix);
        ig_shard_writer *cw = NULL;
        ig_shard_writer_opts co = ig_shard_writer_opts_default();
        co.overwrite = 1;
        const char *cp = igt_fmt("%s.captions", prefix);
        assert_int_equal(ig_shard_writer_create(&cw, NULL, cp, &co, &err), IG_OK);
        for (uint64_t d = 0; d < caption_docs; d++) {
            int32_t ids[3] = {(int32_t)d, 7, 9};
            assert_int_equal(ig_shard_writer_add_document(cw, ids, 1 + d % 3, &err), IG_OK);
        }
        assert_int_equal(ig_shard_writer_finish(cw, NULL, &err), IG_OK);
    }
    snprintf(meta.sampling, sizeof meta.sampling, "frames=2..4");
    ig_video_shard_meta done;
    assert_int_equal(ig_video_shard_writer_finish(w, &meta, &done, &err), IG_OK);
    assert_int_equal(ig_video_shard_meta_write(&done, prefix, 1, &err), IG_OK);
    ig_video_shard_meta_clear(&done);
}

static void check_roundtrip(int zstd) {
    const char *p = igt_fmt("%s/rt%d", g_dir, zstd);
    write_shard(p, 5, zstd, 2);
    ig_err err = {0};
    ig_video_shard *s = NULL;
    if (ig_video_shard_open(&s, NULL, p, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_video_shard_clips(s), 5);
    assert_int_equal(ig_video_shard_zstd(s), zstd);
    uint64_t frames = 0;
    for (uint32_t c = 0; c < 5; c++) {
        ig_clip_info ci = ig_video_shard_clip(s, c);
        assert_int_equal(ci.frames, 2 + c % 3);
        assert_int_equal(ci.width, 6 + c);
        assert_int_equal(ci.start_pts, 1000 * c);
        assert_int_equal(ci.label, label_of(c));
        assert_int_equal(ci.first_frame, frames);
        frames += ci.frames;
        size_t raw = ig_video_shard_clip_bytes(s, c);
        uint8_t *got = malloc(raw), *want = malloc(raw);
        fill_clip(want, raw, c);
        assert_int_equal(ig_video_shard_read(s, c, got, raw, 1, &err), IG_OK);
        assert_memory_equal(got, want, raw);
        ig_clip_frame fr[8];
        ig_video_shard_clip_frames(s, c, fr);
        assert_int_equal(fr[1].pts, 1000 * c + 40);
        assert_int_equal(fr[1].index, 3);
        /* a buffer too small is refused */
        assert_int_equal(ig_video_shard_read(s, c, got, raw - 1, 0, &err), IG_ERR_INVALID_ARG);
        free(got);
        free(want);
    }
    assert_int_equal(ig_video_shard_frames(s), frames);
    const ig_video_shard_meta *m = ig_video_shard_meta_get(s);
    assert_non_null(m);
    assert_int_equal(m->n_buckets, 2);
    assert_string_equal(m->buckets[1].name, "360p/8/16:9");
    assert_string_equal(m->sources[1], "b.mp4");
    assert_int_equal(m->clips_version, IG_CLIPS_VERSION);
    ig_video_shard_close(s);
    assert_int_equal(ig_video_shard_verify(NULL, p, &err), IG_OK);
    assert_true(ig_video_shard_is(p));
}

static void test_roundtrip_raw(void **state) {
    (void)state;
    check_roundtrip(0);
}

static void test_roundtrip_zstd(void **state) {
    (void)state;
    check_roundtrip(1);
}

/* Every damaged field of the index is refused on open, naming the file. */
static void test_damaged_index(void **state) {
    (void)state;
    const char *p = igt_fmt("%s/dmg", g_dir);
    write_shard(p, 4, 0, 0);
    const char *cp = igt_fmt("%s/dmg.clips", g_dir);
    size_t len;
    uint8_t *good = (uint8_t *)igt_read(cp, &len);
    /* header fields, every checked field of record 1, and the frame table: set to a bad value */
    size_t rec = IG_CLIPS_HEADER_BYTES + IG_CLIPS_RECORD_BYTES;
    size_t table = IG_CLIPS_HEADER_BYTES + 4 * IG_CLIPS_RECORD_BYTES;
    const struct {
        size_t at;
        uint64_t value;
        int bytes;
    } muts[] = {
        {0, 'X', 1},                  /* magic */
        {8, 3, 4},                    /* version: newer */
        {8, 0, 4},                    /* version: older than the first */
        {12, 95, 4},                  /* record size */
        {16, 5, 8},                   /* clips */
        {24, 99, 8},                  /* frame entries */
        {32, 1, 8},                   /* data bytes */
        {40, 2, 4},                   /* compression */
        {44, 7, 4},                   /* sources (against the manifest) */
        {48, 9, 4},                   /* buckets (against the manifest) */
        {56, 1, 8},                   /* reserved */
        {rec + 0, 1, 8},              /* offset */
        {rec + 8, 7, 8},              /* stored bytes */
        {rec + 16, 0, 4},             /* frames */
        {rec + 20, 0, 4},             /* height */
        {rec + 24, 20000, 4},         /* width */
        {rec + 28, 0, 4},             /* fps_num */
        {rec + 32, 0, 4},             /* fps_den */
        {rec + 36, 2, 4},             /* source */
        {rec + 40, 0, 4},             /* caption (the shard has none) */
        {rec + 44, 2, 4},             /* bucket */
        {rec + 56, 0, 4},             /* tb_num */
        {rec + 60, 0, 4},             /* tb_den */
        {rec + 64, 1, 8},             /* first frame */
        {rec + 80, 0x7fffffff, 4},    /* label: past IG_CLIP_LABEL_MAX */
        {rec + 84, 1, 4},             /* reserved */
        {rec + 88, 1, 8},             /* reserved */
        {table + 16, (uint64_t)-5, 8} /* frame 1 of clip 0 before frame 0 */
    };
    for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
        uint8_t *bad = malloc(len);
        memcpy(bad, good, len);
        for (int b = 0; b < muts[i].bytes; b++)
            bad[muts[i].at + b] = (uint8_t)(muts[i].value >> (8 * b));
        igt_write(cp, bad, len);
        ig_video_shard *s = NULL;
        ig_err err = {0};
        ig_status st = ig_video_shard_open(&s, NULL, p, &err);
        if (st == IG_OK) fail_msg("a bad value at byte %zu of the index was accepted", muts[i].at);
        assert_non_null(strstr(err.msg, "dmg"));
        free(bad);
    }
    /* truncated */
    igt_write(cp, good, len - 16);
    ig_video_shard *s = NULL;
    ig_err err = {0};
    assert_int_not_equal(ig_video_shard_open(&s, NULL, p, &err), IG_OK);
    igt_write(cp, good, len);
    assert_int_equal(ig_video_shard_verify(NULL, p, &err), IG_OK);
    free(good);
}

/* the clip of add_small: 1 frame of 8 x 8 x 3, no caption, bucket or label */
static ig_clip_info small_info(void) {
    return (ig_clip_info){.frames = 1,
                          .height = 8,
                          .width = 8,
                          .fps_num = 1,
                          .fps_den = 1,
                          .tb_num = 1,
                          .tb_den = 1,
                          .caption = IG_CLIP_NONE,
                          .bucket = IG_CLIP_NONE,
                          .label = IG_CLIP_NONE};
}

/* A label past the largest class id is refused by the writer. */
static void test_writer_refuses_bad_label(void **state) {
    (void)state;
    ig_err err = {0};
    ig_video_shard_writer *w = NULL;
    ig_video_shard_writer_opts o = {.overwrite = 1};
    assert_int_equal(
        ig_video_shard_writer_create(&w, NULL, igt_fmt("%s/badlabel", g_dir), &o, &err), IG_OK);
    ig_clip_info ci = small_info();
    ci.height = ci.width = 1;
    ci.label = IG_CLIP_LABEL_MAX + 1;
    ig_clip_frame fr = {0, 0};
    uint8_t px[3] = {1, 2, 3};
    assert_int_equal(ig_video_shard_writer_add(w, &ci, &fr, px, 3, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "label 2147483647"));
    ci.label = IG_CLIP_LABEL_MAX;
    assert_int_equal(ig_video_shard_writer_add(w, &ci, &fr, px, 3, &err), IG_OK);
    ig_video_shard_writer_abort(w);
}

/* Writes clip c of `clips` (1 frame of 8 x 8 x 3, pixels fill_clip(c)) through w: whole (add), or
 * with `ahead` of its bytes written ahead first and the hash given (add_hashed). */
static void add_small(ig_video_shard_writer *w, uint32_t c, size_t ahead) {
    ig_clip_info ci = small_info();
    ig_clip_frame fr = {c, c};
    uint8_t px[192];
    fill_clip(px, sizeof px, c);
    ig_err err = {0};
    if (!ahead) {
        assert_int_equal(ig_video_shard_writer_add(w, &ci, &fr, px, sizeof px, &err), IG_OK);
        return;
    }
    assert_int_equal(ig_video_shard_writer_write_ahead(w, px, ahead, &err), IG_OK);
    assert_int_equal(ig_video_shard_writer_add_hashed(w, &ci, &fr, px, sizeof px,
                                                      ig_xxh3_64(px, sizeof px), &err),
                     IG_OK);
}

static void finish_small(ig_video_shard_writer *w, const char *prefix) {
    char *sources[] = {"a.mp4"};
    ig_video_shard_meta meta = {.sources = sources, .n_sources = 1}, done;
    ig_err err = {0};
    assert_int_equal(ig_video_shard_writer_finish(w, &meta, &done, &err), IG_OK);
    assert_int_equal(ig_video_shard_meta_write(&done, prefix, 1, &err), IG_OK);
    ig_video_shard_meta_clear(&done);
}

/* Bytes written ahead of their clips (what the video pipeline does while a video decodes): the
 * adds that follow write only the rest, bytes dropped after a failure leave the file and its
 * checksum as if they had never been written, and the shard is byte for byte the one written by
 * whole adds; dropping after an add took some of them, and finishing with bytes that never got
 * their clip, are refused. */
static void test_write_ahead(void **state) {
    (void)state;
    ig_err err = {0};
    ig_video_shard_writer_opts o = {.overwrite = 1};
    const char *ref = igt_fmt("%s/ahead_ref", g_dir), *got = igt_fmt("%s/ahead", g_dir);
    char *refp = strdup(ref), *gotp = strdup(got);
    ig_video_shard_writer *w = NULL;
    assert_int_equal(ig_video_shard_writer_create(&w, NULL, refp, &o, &err), IG_OK);
    for (uint32_t c = 0; c < 3; c++) add_small(w, c, 0);
    finish_small(w, refp);

    assert_int_equal(ig_video_shard_writer_create(&w, NULL, gotp, &o, &err), IG_OK);
    add_small(w, 0, 100); /* part of clip 0 ahead, the rest by the add */
    /* a clip that fails half-way: 150 bytes ahead, then dropped */
    uint8_t junk[150];
    memset(junk, 0xab, sizeof junk);
    assert_int_equal(ig_video_shard_writer_write_ahead(w, junk, sizeof junk, &err), IG_OK);
    assert_int_equal(ig_video_shard_writer_ahead(w), 150);
    assert_int_equal(ig_video_shard_writer_drop_ahead(w, &err), IG_OK);
    assert_int_equal(ig_video_shard_writer_ahead(w), 0);
    assert_int_equal(ig_video_shard_writer_bytes(w), 192);
    add_small(w, 1, 192); /* all of clip 1 ahead */
    /* clip 2 and half of a clip 3 ahead at once, clip 2 added: clip 3's bytes cannot be dropped */
    uint8_t two[192 + 96];
    fill_clip(two, 192, 2);
    fill_clip(two + 192, 96, 3);
    assert_int_equal(ig_video_shard_writer_write_ahead(w, two, sizeof two, &err), IG_OK);
    ig_clip_info ci = small_info();
    ig_clip_frame fr = {2, 2};
    /* (data NULL: every byte of the clip went ahead) */
    assert_int_equal(
        ig_video_shard_writer_add_hashed(w, &ci, &fr, NULL, 192, ig_xxh3_64(two, 192), &err),
        IG_OK);
    assert_int_equal(ig_video_shard_writer_ahead(w), 96);
    assert_int_equal(ig_video_shard_writer_drop_ahead(w, &err), IG_ERR_INVALID_ARG);
    ig_video_shard_meta done;
    char *sources[] = {"a.mp4"};
    ig_video_shard_meta meta = {.sources = sources, .n_sources = 1};
    assert_int_equal(ig_video_shard_writer_finish(w, &meta, &done, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "96 bytes were written ahead"));

    /* again without the half clip: the same shard as the whole adds */
    assert_int_equal(ig_video_shard_writer_create(&w, NULL, gotp, &o, &err), IG_OK);
    add_small(w, 0, 100);
    assert_int_equal(ig_video_shard_writer_write_ahead(w, junk, sizeof junk, &err), IG_OK);
    assert_int_equal(ig_video_shard_writer_drop_ahead(w, &err), IG_OK);
    add_small(w, 1, 192);
    assert_int_equal(ig_video_shard_writer_write_ahead(w, two, 192, &err), IG_OK);
    assert_int_equal(
        ig_video_shard_writer_add_hashed(w, &ci, &fr, NULL, 192, ig_xxh3_64(two, 192), &err),
        IG_OK);
    finish_small(w, gotp);
    const char *exts[] = {".frames", ".clips"};
    for (int e = 0; e < 2; e++) {
        size_t na, nb;
        char *a = igt_read(igt_fmt("%s%s", refp, exts[e]), &na);
        char *b = igt_read(igt_fmt("%s%s", gotp, exts[e]), &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        free(a);
        free(b);
    }
    assert_int_equal(ig_video_shard_verify(NULL, gotp, &err), IG_OK);
    free(refp);
    free(gotp);
}

/* The version-1 frame shard of tests/data/video_v1, written by ingot before clip labels: it
 * opens, verifies and reads, and its clips have no label. */
static void test_reads_version_1(void **state) {
    (void)state;
    const char *p = igt_fmt("%s/tests/data/video_v1/v1", igt_source_dir());
    char *pc = strdup(p);
    size_t len;
    uint8_t *raw = (uint8_t *)igt_read(igt_fmt("%s.clips", pc), &len);
    assert_int_equal(ig_le_u32(raw + 8), 1); /* it is a version-1 index */
    free(raw);
    ig_err err = {0};
    ig_video_shard *s = NULL;
    if (ig_video_shard_open(&s, NULL, pc, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_video_shard_clips(s), 2);
    assert_int_equal(ig_video_shard_frames(s), 4);
    assert_int_equal(ig_video_shard_meta_get(s)->clips_version, 0); /* not recorded then */
    for (uint64_t c = 0; c < 2; c++) {
        ig_clip_info ci = ig_video_shard_clip(s, c);
        assert_int_equal(ci.label, IG_CLIP_NONE);
        assert_int_equal(ci.caption, IG_CLIP_NONE);
        assert_int_equal(ci.source, c);
        assert_int_equal(ci.frames, 2);
        assert_int_equal(ci.height, 8);
        assert_int_equal(ci.width, 8);
        uint8_t px[2 * 8 * 8 * 3];
        assert_int_equal(ig_video_shard_read(s, c, px, sizeof px, 1, &err), IG_OK);
    }
    ig_video_shard_close(s);
    assert_int_equal(ig_video_shard_verify(NULL, pc, &err), IG_OK);
    ig_clip_dataset *ds = NULL;
    const char *pre[] = {pc};
    assert_int_equal(ig_clip_dataset_open(&ds, NULL, pre, 1, &err), IG_OK);
    assert_int_equal(ig_clip_dataset_info(ds, 1, NULL, NULL).label, IG_CLIP_NONE);
    ig_clip_dataset_close(ds);
    free(pc);
}

/* Version-1 bytes made from a version-2 shard: the header's version set to 1 and the labels
 * zeroed read with no labels; a version-1 record with bytes in the label's place (reserved then)
 * is refused, and so is a manifest whose clips_version is not the index's. */
static void test_synthesized_version_1(void **state) {
    (void)state;
    const char *p = igt_fmt("%s/old", g_dir);
    char *pc = strdup(p);
    write_shard(pc, 4, 0, 0);
    const char *cp = igt_fmt("%s.clips", pc);
    char *cpc = strdup(cp);
    size_t len;
    uint8_t *b = (uint8_t *)igt_read(cpc, &len);
    assert_int_equal(ig_le_u32(b + 8), IG_CLIPS_VERSION);
    ig_put_le_u32(b + 8, 1);
    for (int c = 0; c < 4; c++)
        ig_put_le_u32(b + IG_CLIPS_HEADER_BYTES + c * IG_CLIPS_RECORD_BYTES + 80, 0);
    igt_write(cpc, b, len);
    ig_err err = {0};
    ig_video_shard *s = NULL;
    /* the manifest says version 2 */
    assert_int_equal(ig_video_shard_open(&s, NULL, pc, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "clips_version"));
    /* without the manifest (its clips_version) the version-1 index reads */
    rename(igt_fmt("%s.json", pc), igt_fmt("%s.json.bak", pc));
    if (ig_video_shard_open(&s, NULL, pc, &err) != IG_OK) fail_msg("%s", err.msg);
    for (uint64_t c = 0; c < 4; c++) {
        ig_clip_info ci = ig_video_shard_clip(s, c);
        assert_int_equal(ci.label, IG_CLIP_NONE);
        assert_int_equal(ci.width, 6 + c);
    }
    ig_video_shard_close(s);
    /* a label in a version-1 record is a reserved byte that is not zero */
    ig_put_le_u32(b + IG_CLIPS_HEADER_BYTES + 2 * IG_CLIPS_RECORD_BYTES + 80, 5);
    igt_write(cpc, b, len);
    assert_int_equal(ig_video_shard_open(&s, NULL, pc, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "clip 2: reserved bytes"));
    free(b);
    free(cpc);
    free(pc);
}

static void test_verify_finds_changes(void **state) {
    (void)state;
    const char *p = igt_fmt("%s/chg", g_dir);
    write_shard(p, 3, 1, 3);
    ig_err err = {0};
    assert_int_equal(ig_video_shard_verify(NULL, p, &err), IG_OK);
    const char *fp = igt_fmt("%s/chg.frames", g_dir);
    size_t len;
    uint8_t *d = (uint8_t *)igt_read(fp, &len);
    d[len / 2] ^= 1;
    igt_write(fp, d, len);
    assert_int_equal(ig_video_shard_verify(NULL, p, &err), IG_ERR_CHECKSUM);
    assert_non_null(strstr(err.msg, "chg.frames"));
    /* reading with verify finds the clip */
    ig_video_shard *s = NULL;
    assert_int_equal(ig_video_shard_open(&s, NULL, p, &err), IG_OK);
    int bad = 0;
    for (uint64_t c = 0; c < 3; c++) {
        uint8_t buf[8 * 9 * 4 * 3];
        bad += ig_video_shard_read(s, c, buf, sizeof buf, 1, &err) != IG_OK;
    }
    assert_int_equal(bad, 1);
    ig_video_shard_close(s);
    d[len / 2] ^= 1;
    igt_write(fp, d, len);
    free(d);
    /* a caption shard that changed */
    const char *cb = igt_fmt("%s/chg.captions.bin", g_dir);
    d = (uint8_t *)igt_read(cb, &len);
    d[0] ^= 1;
    igt_write(cb, d, len);
    assert_int_equal(ig_video_shard_verify(NULL, p, &err), IG_ERR_CHECKSUM);
    d[0] ^= 1;
    igt_write(cb, d, len);
    free(d);
    /* no manifest: opens, does not verify */
    rename(igt_fmt("%s/chg.json", g_dir), igt_fmt("%s/chg.json.bak", g_dir));
    assert_int_equal(ig_video_shard_verify(NULL, p, &err), IG_ERR_NOT_FOUND);
    rename(igt_fmt("%s/chg.json.bak", g_dir), igt_fmt("%s/chg.json", g_dir));
    /* a run marker over it */
    assert_int_equal(ig_run_marker_create(p, &err), IG_OK);
    assert_int_equal(ig_video_shard_open(&s, NULL, p, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "unfinished"));
    assert_int_equal(ig_run_marker_remove(p, &err), IG_OK);
    assert_int_equal(ig_video_shard_verify(NULL, p, &err), IG_OK);
    ig_video_shard_remove(p);
    assert_false(ig_video_shard_is(p));
    assert_false(ig_file_exists(igt_fmt("%s/chg.captions.idx", g_dir)));
}

static void test_list_and_dataset(void **state) {
    (void)state;
    const char *a = igt_fmt("%s/set_r0000", g_dir);
    char *a_copy = strdup(a);
    write_shard(a_copy, 3, 0, 2);
    const char *b = igt_fmt("%s/set_r0001", g_dir);
    char *b_copy = strdup(b);
    write_shard(b_copy, 4, 1, 4);
    const char *list[] = {a_copy, b_copy};
    const char *lp = igt_fmt("%s/set", g_dir);
    char *lp_copy = strdup(lp);
    ig_err err = {0};
    assert_int_equal(ig_video_list_write(lp_copy, list, 2, 0, &err), IG_OK);
    assert_true(ig_video_shard_is(lp_copy));
    size_t n = 0;
    assert_int_equal(ig_video_list_verify(NULL, lp_copy, &n, &err), IG_OK);
    assert_int_equal(n, 2);
    ig_clip_dataset *ds = NULL;
    const char *pre[] = {lp_copy};
    assert_int_equal(ig_clip_dataset_open(&ds, NULL, pre, 1, &err), IG_OK);
    assert_int_equal(ig_clip_dataset_clips(ds), 7);
    size_t k;
    ig_clip_info ci = ig_clip_dataset_info(ds, 4, &k, NULL);
    assert_int_equal(k, 1);
    assert_int_equal(ci.width, 6 + 1);
    size_t raw = (size_t)ci.frames * ci.height * ci.width * 3;
    uint8_t *got = malloc(raw), *want = malloc(raw);
    fill_clip(want, raw, 1);
    assert_int_equal(ig_clip_dataset_read(ds, 4, got, raw, &err), IG_OK);
    assert_memory_equal(got, want, raw);
    free(got);
    free(want);
    int32_t ids[8];
    size_t len = 0;
    assert_int_equal(ig_clip_dataset_caption(ds, 6, ids, 8, &len, &err), IG_OK);
    /* clip 6 is clip 3 of shard b: caption 3 % 4 = 3, a document of 1 + 3 % 3 = 1 id */
    assert_int_equal(len, 1);
    assert_int_equal(ids[0], 3);
    uint64_t key = ig_clip_dataset_key(ds);
    ig_clip_dataset_close(ds);
    /* the same shards named one by one: the same data */
    assert_int_equal(ig_clip_dataset_open(&ds, NULL, list, 2, &err), IG_OK);
    assert_int_equal(ig_clip_dataset_key(ds), key);
    ig_clip_dataset_close(ds);
    /* a replaced shard is noticed by the list */
    write_shard(b_copy, 2, 0, 0);
    assert_int_equal(ig_video_list_verify(NULL, lp_copy, &n, &err), IG_ERR_CHECKSUM);
    free(a_copy);
    free(b_copy);
    free(lp_copy);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_raw),    cmocka_unit_test(test_roundtrip_zstd),
        cmocka_unit_test(test_damaged_index),    cmocka_unit_test(test_verify_finds_changes),
        cmocka_unit_test(test_list_and_dataset), cmocka_unit_test(test_writer_refuses_bad_label),
        cmocka_unit_test(test_reads_version_1),  cmocka_unit_test(test_synthesized_version_1),
        cmocka_unit_test(test_write_ahead),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
