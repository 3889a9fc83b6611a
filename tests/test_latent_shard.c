/* test_latent_shard.c - latent shards (dataset/latent_shard_*.c) and the latent pipeline
 * (preprocess/latents.c): a written shard reads back exactly (fp32; bf16 rounded to nearest even),
 * with its frame table, provenance and manifest, and verifies; every damage is refused with a
 * message naming the file - a truncated index or data file, a bad magic, a newer or older version,
 * a damaged record, a changed byte (checksum), a manifest of other data, a run marker over it;
 * lists of latent shards; and ig_preprocess_latents with the golden VAE (tests/data/golden/vae/a)
 * over clips of two shapes stores, for every clip, exactly what ig_vae_encoder_encode gives for
 * its frames, each clip in its own latent shape, and refuses a clip whose sides the VAE's
 * downsampling does not divide, leaving nothing. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"
#include "dataset/latent_shard_internal.h"
#include "preprocess/preprocess.h"
#include "train/train.h"

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

/* clip c: 1 + c % 3 frames of (2 + c % 2) x 3 latents, from 4x the pixels */
static ig_latent_info clip_of(uint32_t c) {
    return (ig_latent_info){.frames = 1 + c % 3,
                            .h = 2 + c % 2,
                            .w = 3,
                            .height = 4 * (2 + c % 2),
                            .width = 12,
                            .fps_num = 8,
                            .fps_den = 1,
                            .source = c % 2,
                            .caption = IG_CLIP_NONE,
                            .bucket = c % 2,
                            .label = c == 1 ? IG_CLIP_NONE : 5 + c,
                            .tb_num = 1,
                            .tb_den = 1000,
                            .start_pts = 100 * c,
                            .source_clip = 10 + c};
}

static float value_of(uint32_t c, size_t i) {
    return sinf((float)(i * 7 + c * 131)) * 3.0f + (float)c * 0.001f;
}

static void write_latents(const char *prefix, uint32_t n, uint32_t dtype) {
    ig_err err = {0};
    ig_latent_shard_writer *w = NULL;
    ig_latent_shard_writer_opts o = {.dtype = dtype, .channels = 8, .overwrite = 1};
    assert_int_equal(ig_latent_shard_writer_create(&w, NULL, prefix, &o, &err), IG_OK);
    for (uint32_t c = 0; c < n; c++) {
        ig_latent_info li = clip_of(c);
        size_t nv = (size_t)li.frames * li.h * li.w * 8;
        float *m = malloc(nv * sizeof *m);
        for (size_t i = 0; i < nv; i++) m[i] = value_of(c, i);
        ig_clip_frame fr[3];
        for (uint32_t f = 0; f < li.frames; f++)
            fr[f] = (ig_clip_frame){.pts = 100 * c + 10 * f, .index = 3 * f};
        if (ig_latent_shard_writer_add(w, &li, fr, m, &err) != IG_OK) fail_msg("%s", err.msg);
        free(m);
    }
    static char src0[] = "a.mp4", src1[] = "b.mp4";
    char *sources[] = {src0, src1};
    ig_clip_bucket buckets[2] = {
        {.name = "small", .frames = 3, .height = 8, .width = 12, .batch_size = 2},
        {.name = "tall", .frames = 3, .height = 12, .width = 12, .batch_size = 1}};
    ig_latent_shard_meta meta = {
        .sources = sources, .n_sources = 2, .buckets = buckets, .n_buckets = 2};
    meta.vae = (ig_latent_vae){.path = "vae",
                               .describe = "vae: test",
                               .weights_xxh3 = 0x1234,
                               .latent_channels = 4,
                               .downsample = 4,
                               .scaling_factor = 0.18215,
                               .shift_factor = 0};
    snprintf(meta.clips_source, sizeof meta.clips_source, "clips");
    ig_latent_shard_meta done;
    if (ig_latent_shard_writer_finish(w, &meta, &done, &err) != IG_OK) fail_msg("%s", err.msg);
    if (ig_latent_shard_meta_write(&done, prefix, 1, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_latent_shard_meta_clear(&done);
}

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
    memcpy(&x, &u, sizeof x);
    return x;
}

static void check_reads(const char *prefix, uint32_t n, uint32_t dtype) {
    ig_err err = {0};
    ig_latent_shard *s = NULL;
    if (ig_latent_shard_open(&s, NULL, prefix, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_latent_shard_clips(s), n);
    assert_int_equal(ig_latent_shard_dtype(s), dtype);
    assert_int_equal(ig_latent_shard_channels(s), 8);
    const ig_latent_shard_meta *m = ig_latent_shard_meta_get(s);
    assert_non_null(m);
    assert_string_equal(m->vae.describe, "vae: test");
    assert_true(m->vae.weights_xxh3 == 0x1234 && m->vae.downsample == 4);
    assert_true(fabs(m->vae.scaling_factor - 0.18215) < 1e-12);
    assert_int_equal(m->n_buckets, 2);
    assert_string_equal(m->buckets[1].name, "tall");
    assert_string_equal(m->sources[1], "b.mp4");
    for (uint32_t c = 0; c < n; c++) {
        ig_latent_info want = clip_of(c), got = ig_latent_shard_clip(s, c);
        assert_int_equal(got.frames, want.frames);
        assert_int_equal(got.h, want.h);
        assert_int_equal(got.height, want.height);
        assert_int_equal(got.label, want.label);
        assert_int_equal(got.bucket, want.bucket);
        assert_int_equal(got.source_clip, want.source_clip);
        assert_int_equal(got.start_pts, want.start_pts);
        ig_clip_frame fr[3];
        ig_latent_shard_clip_frames(s, c, fr);
        assert_int_equal(fr[want.frames - 1].index, 3 * (want.frames - 1));
        size_t nv = ig_latent_shard_clip_values(s, c);
        assert_int_equal(nv, (size_t)want.frames * want.h * want.w * 8);
        float *v = malloc(nv * sizeof *v);
        if (ig_latent_shard_read(s, c, v, nv, 1, &err) != IG_OK) fail_msg("%s", err.msg);
        for (size_t i = 0; i < nv; i++) {
            float e = dtype == IG_LATENT_F32 ? value_of(c, i) : bf16_round(value_of(c, i));
            assert_memory_equal(&v[i], &e, sizeof e);
        }
        assert_int_equal(ig_latent_shard_read(s, c, v, nv - 1, 0, &err), IG_ERR_INVALID_ARG);
        free(v);
    }
    ig_latent_shard_close(s);
    if (ig_latent_shard_verify(NULL, prefix, &err) != IG_OK) fail_msg("%s", err.msg);
}

static void test_round_trip(void **state) {
    (void)state;
    const char *p32 = igt_fmt("%s/l32", g_dir);
    write_latents(p32, 7, IG_LATENT_F32);
    check_reads(p32, 7, IG_LATENT_F32);
    assert_true(ig_latent_shard_is(p32));
    const char *p16 = igt_fmt("%s/l16", g_dir);
    write_latents(p16, 7, IG_LATENT_BF16);
    check_reads(p16, 7, IG_LATENT_BF16);
    /* an empty shard is a shard */
    const char *p0 = igt_fmt("%s/l0", g_dir);
    write_latents(p0, 0, IG_LATENT_F32);
    check_reads(p0, 0, IG_LATENT_F32);
    /* a writer refuses an existing shard without overwrite, and bad options */
    ig_err err = {0};
    ig_latent_shard_writer *w = NULL;
    ig_latent_shard_writer_opts o = {.channels = 8};
    assert_int_equal(ig_latent_shard_writer_create(&w, NULL, p32, &o, &err), IG_ERR_EXISTS);
    o.channels = 7;
    assert_int_equal(ig_latent_shard_writer_create(&w, NULL, igt_fmt("%s/x", g_dir), &o, &err),
                     IG_ERR_INVALID_ARG);
}

/* A copy of file ext of prefix at dst with what done to its bytes. */
static void damaged(const char *prefix, const char *dst, const char *ext,
                    void (*what)(uint8_t *, size_t *)) {
    const char *exts[] = {".latents", ".lclips", ".json"};
    for (int k = 0; k < 3; k++) {
        size_t len = 0;
        uint8_t *b = (uint8_t *)igt_read(igt_fmt("%s%s", prefix, exts[k]), &len);
        if (!strcmp(exts[k], ext)) what(b, &len); /* the manifest stays the good one's */
        igt_write(igt_fmt("%s%s", dst, exts[k]), b, len);
        free(b);
    }
}

static void truncate_last(uint8_t *b, size_t *len) {
    (void)b;
    *len -= 1;
}
static void bad_magic(uint8_t *b, size_t *len) {
    (void)len;
    b[0] = 'X';
}
static void newer(uint8_t *b, size_t *len) {
    (void)len;
    ig_put_le_u32(b + 8, IG_LAT_VERSION + 1);
}
static void older(uint8_t *b, size_t *len) {
    (void)len;
    ig_put_le_u32(b + 8, 0);
}
static void bad_offset(uint8_t *b, size_t *len) {
    (void)len;
    ig_put_le_u64(b + IG_LAT_HEADER_BYTES + IG_LAT_RECORD_BYTES, 5); /* clip 1's offset */
}
static void bad_reserved(uint8_t *b, size_t *len) {
    (void)len;
    b[IG_LAT_HEADER_BYTES + 104] = 1;
}
static void bad_dtype(uint8_t *b, size_t *len) {
    (void)len;
    ig_put_le_u32(b + 40, 3);
}
static void flip(uint8_t *b, size_t *len) {
    b[*len / 2] ^= 0x40;
}

static void expect_open(const char *prefix, ig_status want, const char *says) {
    ig_err err = {0};
    ig_latent_shard *s = NULL;
    ig_status st = ig_latent_shard_open(&s, NULL, prefix, &err);
    ig_latent_shard_close(s);
    if (st != want) fail_msg("%s: status %d, want %d: %s", prefix, st, want, err.msg);
    if (says && !strstr(err.msg, says)) fail_msg("'%s' does not say '%s'", err.msg, says);
}

static void test_damage(void **state) {
    (void)state;
    /* copies: igt_fmt's buffers are reused */
    char *p = strdup(igt_fmt("%s/good", g_dir)), *d = strdup(igt_fmt("%s/bad", g_dir));
    write_latents(p, 5, IG_LATENT_F32);
    damaged(p, d, ".lclips", truncate_last);
    expect_open(d, IG_ERR_FORMAT, "truncated");
    damaged(p, d, ".latents", truncate_last);
    expect_open(d, IG_ERR_FORMAT, "bad.lclips: the index describes");
    damaged(p, d, ".lclips", bad_magic);
    expect_open(d, IG_ERR_FORMAT, "bad magic");
    damaged(p, d, ".lclips", newer);
    expect_open(d, IG_ERR_UNSUPPORTED, "upgrade ingot");
    damaged(p, d, ".lclips", older);
    expect_open(d, IG_ERR_FORMAT, "index version 0");
    damaged(p, d, ".lclips", bad_offset);
    expect_open(d, IG_ERR_FORMAT, "clip 1: offset");
    damaged(p, d, ".lclips", bad_reserved);
    expect_open(d, IG_ERR_FORMAT, "reserved");
    damaged(p, d, ".lclips", bad_dtype);
    expect_open(d, IG_ERR_FORMAT, "dtype 3");
    /* a changed byte of the data: opens (the index is whole), verify and a checked read refuse */
    damaged(p, d, ".latents", flip);
    expect_open(d, IG_OK, NULL);
    ig_err err = {0};
    assert_int_equal(ig_latent_shard_verify(NULL, d, &err), IG_ERR_CHECKSUM);
    assert_non_null(strstr(err.msg, "bad.latents"));
    ig_latent_shard *s = NULL;
    assert_int_equal(ig_latent_shard_open(&s, NULL, d, &err), IG_OK);
    float v[4096];
    ig_status st = IG_OK;
    for (uint64_t c = 0; c < ig_latent_shard_clips(s) && st == IG_OK; c++)
        st = ig_latent_shard_read(s, c, v, 4096, 1, &err);
    assert_int_equal(st, IG_ERR_CHECKSUM);
    ig_latent_shard_close(s);
    /* a manifest that is not JSON, and the manifest of another shard */
    char *q = strdup(igt_fmt("%s/other", g_dir));
    write_latents(q, 4, IG_LATENT_F32);
    damaged(p, d, ".none", truncate_last); /* an intact copy */
    igt_write(igt_fmt("%s.json", d), "{", 1);
    expect_open(d, IG_ERR_FORMAT, NULL);
    size_t len = 0;
    char *other = igt_read(igt_fmt("%s.json", q), &len);
    free(q);
    igt_write(igt_fmt("%s.json", d), other, len);
    free(other);
    expect_open(d, IG_ERR_FORMAT, "does not match");
    /* a missing file, and a run marker over the shard */
    expect_open(igt_fmt("%s/none", g_dir), IG_ERR_NOT_FOUND, "no such latent shard");
    assert_int_equal(ig_run_marker_create(p, &err), IG_OK);
    expect_open(p, IG_ERR_FORMAT, "unfinished");
    assert_int_equal(ig_run_marker_remove(p, &err), IG_OK);
    expect_open(p, IG_OK, NULL);
    free(p);
    free(d);
}

static void test_lists(void **state) {
    (void)state;
    const char *a = igt_fmt("%s/set_r0000", g_dir);
    char *a2 = strdup(a);
    write_latents(a2, 3, IG_LATENT_F32);
    const char *b = igt_fmt("%s/set_r0001", g_dir);
    char *b2 = strdup(b);
    write_latents(b2, 2, IG_LATENT_BF16);
    const char *shards[] = {a2, b2};
    char *list = strdup(igt_fmt("%s/set", g_dir));
    ig_err err = {0};
    if (ig_latent_list_write(list, shards, 2, 0, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_true(ig_latent_shard_is(list));
    char **got = NULL;
    size_t n = 0;
    assert_int_equal(ig_latent_list_expand(list, &got, &n, &err), IG_OK);
    assert_int_equal(n, 2);
    assert_string_equal(got[1], b2);
    ig_shard_list_free(got, n);
    if (ig_latent_list_verify(NULL, list, &n, &err) != IG_OK) fail_msg("%s", err.msg);
    /* a shard replaced after the list was written */
    write_latents(b2, 1, IG_LATENT_BF16);
    assert_int_equal(ig_latent_list_verify(NULL, list, &n, &err), IG_ERR_CHECKSUM);
    /* a frame shard list is not a latent list */
    assert_int_equal(ig_video_list_expand(list, &got, &n, &err), IG_ERR_FORMAT);
    free(a2);
    free(b2);
    free(list);
}

/* ---- the pipeline with the golden VAE ----------------------------------------------------------
 */

typedef struct enc_user {
    ig_ctx *ctx;
    ig_backend *be;
    ig_vae_encoder *e;
    int opened;
} enc_user;

static const char *vae_dir(void) {
    return igt_fmt("%s/tests/data/golden/vae/a", igt_source_dir());
}

static ig_status enc_open(void *user, uint32_t H, uint32_t W, uint64_t buffers, ig_latent_vae *v,
                          ig_err *err) {
    (void)buffers;
    enc_user *u = user;
    ig_vae_encoder_opts o = {.batch = 3, .height = (int)H, .width = (int)W};
    ig_status st = ig_vae_encoder_open(&u->e, u->ctx, u->be, vae_dir(), &o, err);
    if (st == IG_OK) st = ig_vae_encoder_identity(u->e, &v->weights_xxh3, err);
    int C = 0, f = 0;
    if (st == IG_OK) ig_vae_encoder_factors(u->e, &C, &f, &v->scaling_factor, &v->shift_factor);
    v->latent_channels = (uint32_t)C;
    v->downsample = (uint32_t)f;
    u->opened++;
    return st;
}

static ig_status enc_encode(void *user, const uint8_t *frames, uint32_t N, uint32_t H, uint32_t W,
                            float *out, ig_err *err) {
    enc_user *u = user;
    return ig_vae_encoder_encode(u->e, frames, (int)N, (int)H, (int)W, out, err);
}

static void test_pipeline(void **state) {
    (void)state;
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 2;
    assert_int_equal(ig_ctx_create(&ctx, &co, &err), IG_OK);
    ig_backend *be = NULL;
    ig_backend_opts bo = ig_backend_opts_default();
    assert_int_equal(ig_backend_create(&be, ctx, &bo, &err), IG_OK);
    /* two clip shards of two shapes, listed as one: 2 clips of 3 x 8x12, 1 of 2 x 16x16 */
    uint8_t a[2 * 3 * 8 * 12 * 3], b[1 * 2 * 16 * 16 * 3];
    for (size_t i = 0; i < sizeof a; i++) a[i] = (uint8_t)(i * 37 + (i >> 5));
    for (size_t i = 0; i < sizeof b; i++) b[i] = (uint8_t)(i * 11 + 3);
    char *sa = strdup(igt_fmt("%s/clips_r0000", g_dir)),
         *sb = strdup(igt_fmt("%s/clips_r0001", g_dir));
    char *clips = strdup(igt_fmt("%s/clips", g_dir)), *out = strdup(igt_fmt("%s/lat", g_dir));
    const uint32_t labels[2] = {4, 9};
    igt_write_clip_shard(sa, a, 2, 3, 8, 12, labels);
    igt_write_clip_shard(sb, b, 1, 2, 16, 16, NULL);
    const char *list[] = {sa, sb};
    if (ig_video_list_write(clips, list, 2, 0, &err) != IG_OK) fail_msg("%s", err.msg);

    enc_user u = {.ctx = ctx, .be = be};
    ig_latent_encoder enc = {.user = &u, .open = enc_open, .encode = enc_encode};
    ig_latent_opts o = {
        .clips = clips, .output_prefix = out, .vae_path = "golden-a", .encoder = &enc};
    ig_latent_stats st;
    if (ig_preprocess_latents(ctx, &o, &st, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(st.clips, 3);
    assert_int_equal(st.frames, 8);
    ig_latent_stats_clear(&st);
    if (ig_latent_shard_verify(ctx, out, &err) != IG_OK) fail_msg("%s", err.msg);

    /* every clip: exactly what the encoder gives for its frames, in its own shape */
    ig_latent_shard *s = NULL;
    assert_int_equal(ig_latent_shard_open(&s, NULL, out, &err), IG_OK);
    assert_int_equal(ig_latent_shard_clips(s), 3);
    assert_int_equal(ig_latent_shard_channels(s), 8);
    const ig_latent_shard_meta *m = ig_latent_shard_meta_get(s);
    assert_string_equal(m->vae.path, "golden-a");
    assert_int_equal(m->vae.downsample, 2);
    assert_int_equal(m->n_sources, 2); /* one a clip shard */
    const uint8_t *frames[3] = {a, a + 3 * 8 * 12 * 3, b};
    const uint32_t F[3] = {3, 3, 2}, H[3] = {8, 8, 16}, W[3] = {12, 12, 16};
    for (uint32_t c = 0; c < 3; c++) {
        ig_latent_info li = ig_latent_shard_clip(s, c);
        assert_int_equal(li.frames, F[c]);
        assert_int_equal(li.h, H[c] / 2);
        assert_int_equal(li.w, W[c] / 2);
        assert_int_equal(li.source_clip, c);
        assert_int_equal(li.label, c < 2 ? labels[c] : IG_CLIP_NONE);
        assert_int_equal(li.source, c < 2 ? 0 : 1);
        size_t nv = ig_latent_shard_clip_values(s, c);
        float *got = malloc(nv * sizeof *got), *want = malloc(nv * sizeof *want);
        assert_int_equal(ig_latent_shard_read(s, c, got, nv, 1, &err), IG_OK);
        if (ig_vae_encoder_encode(u.e, frames[c], (int)F[c], (int)H[c], (int)W[c], want, &err) !=
            IG_OK)
            fail_msg("%s", err.msg);
        assert_memory_equal(got, want, nv * sizeof *got);
        free(got);
        free(want);
    }
    ig_latent_shard_close(s);

    /* a rerun without overwrite is refused; with it, the same bytes */
    ig_vae_encoder_free(u.e);
    u.e = NULL;
    size_t l1 = 0, l2 = 0;
    char *before = igt_read(igt_fmt("%s.latents", out), &l1);
    assert_int_equal(ig_preprocess_latents(ctx, &o, &st, &err), IG_ERR_EXISTS);
    ig_vae_encoder_free(u.e);
    u.e = NULL;
    o.overwrite = 1;
    if (ig_preprocess_latents(ctx, &o, &st, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_latent_stats_clear(&st);
    char *after = igt_read(igt_fmt("%s.latents", out), &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(before, after, l1);
    free(before);
    free(after);
    ig_vae_encoder_free(u.e);
    u.e = NULL;

    /* a clip whose sides the downsampling does not divide, beside one it does: refused, naming
     * it, and nothing of the output is left */
    char *so = strdup(igt_fmt("%s/odd_r0000", g_dir)), *odd = strdup(igt_fmt("%s/odd", g_dir));
    char *lo = strdup(igt_fmt("%s/lodd", g_dir));
    uint8_t c[2 * 9 * 12 * 3] = {0};
    igt_write_clip_shard(so, c, 1, 2, 9, 12, NULL);
    const char *olist[] = {sb, so};
    if (ig_video_list_write(odd, olist, 2, 0, &err) != IG_OK) fail_msg("%s", err.msg);
    o.clips = odd;
    o.output_prefix = lo;
    assert_int_equal(ig_preprocess_latents(ctx, &o, &st, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "clip 1 is 9x12, which the VAE's downsampling by 2"));
    assert_false(ig_file_exists(igt_fmt("%s.json", lo)));
    assert_false(ig_file_exists(igt_fmt("%s.latents", lo)));
    assert_false(ig_file_exists(igt_fmt("%s.incomplete", lo)));
    ig_latent_stats_clear(&st);
    ig_vae_encoder_free(u.e);
    free(so);
    free(odd);
    free(lo);
    free(sa);
    free(sb);
    free(clips);
    free(out);
    ig_backend_free(be);
    ig_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lists, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipeline, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
