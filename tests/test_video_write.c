/* test_video_write.c - writing videos out (preprocess/video_write.c): an MP4 read back through
 * ingot's own decoder (ig_video_open / ig_video_read) has the frames, size and rate written, its
 * frames close to the input (lossy: mean absolute error of a smooth moving pattern) and in order,
 * flat colours within 3 levels (converted with the colour matrix the stream is tagged with); the
 * same frames give the same bytes; an odd size comes back padded to even with the last row and
 * column repeated; crf is honoured; frames ending at the caller's last readable byte are read no
 * further; the MPEG-4 fallback encoder writes a readable file too; ffprobe (when installed, else
 * skipped saying so) agrees on frames, size and rate; every refusal (no frames, sizes, rate, crf,
 * no encoder, a path that cannot be written) names the file and leaves nothing behind. Contact
 * sheets (read back through the same decoder): exact size, each cell bit-identical to its source
 * frame (which frames: first and last included), dark gutters. Under the ASan build (make
 * test-asan) LeakSanitizer checks that none of it leaks; valgrind finds nothing either. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preprocess/video_internal.h"

static char *g_dir;

static const char *tp(const char *name) {
    return igt_fmt("%s/%s", g_dir, name);
}

static int setup(void **state) {
    (void)state;
    ig_video_log_setup();
    g_dir = igt_mkdtemp();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    igt_rmtree(g_dir);
    free(g_dir);
    return 0;
}

/* A fresh scratch directory per test (so that "nothing left behind" can count entries). */
static const char *scratch(const char *name) {
    const char *d = tp(name);
    igt_rmtree(d);
    if (mkdir(d, 0755) != 0) fail_msg("mkdir %s", d);
    return d;
}

/* A smooth pattern moving 3 pixels a frame to the right and 2 down: [frames][h][w][3]. */
static uint8_t *pattern(uint32_t frames, uint32_t h, uint32_t w) {
    uint8_t *p = malloc((size_t)frames * h * w * 3);
    const double tau = 6.283185307179586;
    for (uint32_t t = 0; t < frames; t++)
        for (uint32_t y = 0; y < h; y++)
            for (uint32_t x = 0; x < w; x++) {
                uint8_t *q = p + (((size_t)t * h + y) * w + x) * 3;
                q[0] = (uint8_t)lround(128 + 90 * sin(tau * (x + 3.0 * t) / 40));
                q[1] = (uint8_t)lround(128 + 90 * cos(tau * (y + 2.0 * t) / 30));
                q[2] = (uint8_t)lround(128 + 60 * sin(tau * ((double)x + y - 4.0 * t) / 60));
            }
    return p;
}

/* Mean absolute difference over the top-left h x w of frames a (aw wide) and b (bw wide). */
static double mae(const uint8_t *a, uint32_t aw, const uint8_t *b, uint32_t bw, uint32_t h,
                  uint32_t w) {
    double s = 0;
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w * 3; x++)
            s += fabs((double)a[(size_t)y * aw * 3 + x] - b[(size_t)y * bw * 3 + x]);
    return s / ((double)h * w * 3);
}

static ig_video *open_ok(const char *path) {
    ig_video *v = NULL;
    ig_err err = {0};
    ig_video_open_opts o = ig_video_open_opts_default();
    if (ig_video_open(&v, NULL, path, &o, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    return v;
}

/* Every frame of path at its own size: [frames][height][width][3], malloc'd. */
static uint8_t *read_all(ig_video *v) {
    const ig_video_info *in = ig_video_get_info(v);
    uint64_t *idx = malloc(in->frames * sizeof *idx);
    for (uint64_t i = 0; i < in->frames; i++) idx[i] = i;
    uint8_t *out = malloc(in->frames * in->height * in->width * 3);
    ig_err err = {0};
    if (ig_video_read(v, idx, (uint32_t)in->frames, 0, 0, out, NULL, &err) != IG_OK)
        fail_msg("%s", err.msg);
    free(idx);
    return out;
}

static void write_ok(const char *path, const uint8_t *rgb, uint32_t frames, uint32_t h, uint32_t w,
                     uint32_t num, uint32_t den) {
    ig_err err = {0};
    if (ig_video_write_mp4(path, rgb, frames, h, w, num, den, -1, &err) != IG_OK)
        fail_msg("%s", err.msg);
}

/* Decoded frames (dh x dw) against the source (h x w): each within max_mae, and nearer its own
 * source frame than the next one (the order is kept). */
static void check_frames(const uint8_t *dec, uint32_t dh, uint32_t dw, const uint8_t *src,
                         uint32_t frames, uint32_t h, uint32_t w, double max_mae) {
    size_t db = (size_t)dh * dw * 3, sb = (size_t)h * w * 3;
    double worst = 0;
    for (uint32_t i = 0; i < frames; i++) {
        double e = mae(dec + i * db, dw, src + i * sb, w, h, w);
        if (e > worst) worst = e;
        if (e >= max_mae) fail_msg("frame %u: mean absolute error %.2f", i, e);
        if (i + 1 < frames) {
            double next = mae(dec + i * db, dw, src + (i + 1) * sb, w, h, w);
            if (next <= e)
                fail_msg("frame %u is nearer source frame %u (%.2f <= %.2f)", i, i + 1, next, e);
        }
    }
    print_message("worst mean absolute error of a frame: %.2f\n", worst);
}

/* ---- MP4 ------------------------------------------------------------------------------------- */

static void test_mp4_roundtrip(void **state) {
    (void)state;
    const uint32_t F = 12, H = 34, W = 50;
    uint8_t *src = pattern(F, H, W);
    const char *d = scratch("roundtrip");
    const char *path = igt_fmt("%s/out.mp4", d);
    write_ok(path, src, F, H, W, 8, 1);
    assert_int_equal(igt_count_entries(d), 1); /* no temporary left beside it */
    ig_video *v = open_ok(path);
    const ig_video_info *in = ig_video_get_info(v);
    assert_string_equal(in->codec, "h264"); /* Debian's libavcodec has libx264 */
    assert_string_equal(in->pix_fmt, "yuv420p");
    assert_int_equal(in->frames, F);
    assert_int_equal(in->width, W);
    assert_int_equal(in->height, H);
    assert_int_equal(in->rotation, 0);
    assert_false(in->vfr);
    assert_true(fabs(in->fps - 8.0) < 1e-9);
    assert_true(fabs(in->duration - 1.5) < 1e-9); /* 12 frames of 1/8 s */
    uint8_t *dec = read_all(v);
    check_frames(dec, H, W, src, F, H, W, 8.0);
    free(dec);
    ig_video_close(v);
    /* written again over it: replaced, still one file */
    uint8_t *two = pattern(2, H, W);
    write_ok(path, two, 2, H, W, 8, 1);
    v = open_ok(path);
    assert_int_equal(ig_video_get_info(v)->frames, 2);
    ig_video_close(v);
    assert_int_equal(igt_count_entries(d), 1);
    free(two);
    free(src);
}

static void test_mp4_deterministic(void **state) {
    (void)state;
    const uint32_t F = 12, H = 34, W = 50;
    uint8_t *src = pattern(F, H, W);
    const char *d = scratch("determinism");
    char *a = strdup(igt_fmt("%s/a.mp4", d)), *b = strdup(igt_fmt("%s/b.mp4", d));
    write_ok(a, src, F, H, W, 8, 1);
    write_ok(b, src, F, H, W, 8, 1);
    size_t na, nb;
    char *da = igt_read(a, &na), *db = igt_read(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    /* the index is at the front (+faststart): "ftyp" then "moov" before "mdat" */
    assert_memory_equal(da + 4, "ftyp", 4);
    char *moov = memmem(da, na, "moov", 4), *mdat = memmem(da, na, "mdat", 4);
    assert_non_null(moov);
    assert_non_null(mdat);
    assert_true(moov < mdat);
    /* no FFmpeg version string (bit-exact muxing and encoding) */
    assert_null(memmem(da, na, "Lavf", 4));
    assert_null(memmem(da, na, "Lavc", 4));
    free(da);
    free(db);
    free(a);
    free(b);
    free(src);
}

static void test_mp4_odd_size(void **state) {
    (void)state;
    const uint32_t F = 12, H = 33, W = 49;
    uint8_t *src = pattern(F, H, W);
    const char *path = igt_fmt("%s/odd.mp4", scratch("odd"));
    write_ok(path, src, F, H, W, 8, 1);
    ig_video *v = open_ok(path);
    const ig_video_info *in = ig_video_get_info(v);
    /* yuv420p: padded to even, as the header says */
    assert_int_equal(in->width, W + 1);
    assert_int_equal(in->height, H + 1);
    assert_int_equal(in->frames, F);
    uint8_t *dec = read_all(v);
    check_frames(dec, H + 1, W + 1, src, F, H, W, 8.0);
    /* the added row and column repeat the last ones */
    size_t db = (size_t)(H + 1) * (W + 1) * 3, sb = (size_t)H * W * 3;
    for (uint32_t i = 0; i < F; i++) {
        const uint8_t *f = dec + i * db, *s = src + i * sb;
        double row = 0, col = 0;
        for (uint32_t x = 0; x < W * 3; x++)
            row += fabs((double)f[(size_t)H * (W + 1) * 3 + x] - s[(size_t)(H - 1) * W * 3 + x]);
        for (uint32_t y = 0; y < H; y++)
            for (int c = 0; c < 3; c++)
                col += fabs((double)f[((size_t)y * (W + 1) + W) * 3 + (size_t)c] -
                            s[((size_t)y * W + W - 1) * 3 + (size_t)c]);
        assert_true(row / (W * 3) < 8.0);
        assert_true(col / (H * 3) < 8.0);
    }
    free(dec);
    ig_video_close(v);
    free(src);
}

static void test_mp4_rates(void **state) {
    (void)state;
    const uint32_t F = 6, H = 16, W = 16;
    uint8_t *src = pattern(F, H, W);
    const char *d = scratch("rates");
    const uint32_t num[] = {30000, 25, 24, 60, 1}, den[] = {1001, 1, 1, 2, 2};
    for (int k = 0; k < 5; k++) {
        const char *path = igt_fmt("%s/r%d.mp4", d, k);
        write_ok(path, src, F, H, W, num[k], den[k]);
        ig_video *v = open_ok(path);
        const ig_video_info *in = ig_video_get_info(v);
        assert_int_equal(in->frames, F);
        if (fabs(in->fps - (double)num[k] / den[k]) > 1e-6)
            fail_msg("%u/%u fps: read back as %.9f", num[k], den[k], in->fps);
        ig_video_close(v);
    }
    /* one frame, 1x1 (padded to 2x2), crf 0 and 51 */
    ig_err err = {0};
    assert_int_equal(ig_video_write_mp4(tp("rates/one.mp4"), src, 1, 1, 1, 8, 1, 0, &err), IG_OK);
    ig_video *v = open_ok(tp("rates/one.mp4"));
    assert_int_equal(ig_video_get_info(v)->frames, 1);
    assert_int_equal(ig_video_get_info(v)->width, 2);
    ig_video_close(v);
    assert_int_equal(ig_video_write_mp4(tp("rates/worst.mp4"), src, F, H, W, 8, 1, 51, &err),
                     IG_OK);
    free(src);
}

/* Flat colours come back within 3 levels a channel, with either encoder: the colour matrix and
 * range the frames are converted with are the ones the stream is tagged with (BT.709, limited;
 * a decoder reading them as BT.601 would be 10 or more levels off on these). */
static void test_mp4_colour(void **state) {
    (void)state;
    const uint32_t F = 4, H = 16, W = 16;
    const uint8_t rgb[4][3] = {{200, 50, 100}, {10, 240, 30}, {0, 0, 255}, {255, 255, 0}};
    uint8_t *src = malloc(F * H * W * 3);
    for (uint32_t t = 0; t < F; t++)
        for (uint32_t i = 0; i < H * W; i++) memcpy(src + (t * H * W + i) * 3, rgb[t], 3);
    const char *d = scratch("colour");
    const char *encoders[] = {"libx264", "mpeg4"};
    for (int e = 0; e < 2; e++) {
        const char *path = igt_fmt("%s/%s.mp4", d, encoders[e]);
        ig_err err = {0};
        if (ig_video_write_mp4_with(path, src, F, H, W, 8, 1, -1, encoders[e], &err) != IG_OK)
            fail_msg("%s", err.msg);
        ig_video *v = open_ok(path);
        uint8_t *dec = read_all(v);
        for (size_t i = 0; i < (size_t)F * H * W * 3; i++)
            if (abs((int)dec[i] - (int)src[i]) > 3)
                fail_msg("%s: frame %zu: colour %u,%u,%u: channel %zu is %u", encoders[e],
                         i / (H * W * 3), rgb[i / (H * W * 3)][0], rgb[i / (H * W * 3)][1],
                         rgb[i / (H * W * 3)][2], i % 3, dec[i]);
        free(dec);
        ig_video_close(v);
    }
    free(src);
}

static void test_mp4_mpeg4_fallback(void **state) {
    (void)state;
    const uint32_t F = 12, H = 34, W = 50;
    uint8_t *src = pattern(F, H, W);
    const char *d = scratch("mpeg4");
    const char *path = igt_fmt("%s/m.mp4", d);
    ig_err err = {0};
    if (ig_video_write_mp4_with(path, src, F, H, W, 8, 1, -1, "mpeg4", &err) != IG_OK)
        fail_msg("%s", err.msg);
    ig_video *v = open_ok(path);
    const ig_video_info *in = ig_video_get_info(v);
    assert_string_equal(in->codec, "mpeg4");
    assert_int_equal(in->frames, F);
    assert_int_equal(in->width, W);
    assert_int_equal(in->height, H);
    assert_true(fabs(in->fps - 8.0) < 1e-9);
    uint8_t *dec = read_all(v);
    check_frames(dec, H, W, src, F, H, W, 8.0);
    free(dec);
    ig_video_close(v);
    /* reproducible too */
    char *again = strdup(igt_fmt("%s/m2.mp4", d));
    assert_int_equal(ig_video_write_mp4_with(again, src, F, H, W, 8, 1, -1, "mpeg4", &err), IG_OK);
    size_t na, nb;
    char *da = igt_read(path, &na), *db = igt_read(again, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    free(da);
    free(db);
    free(again);
    free(src);
}

/* Frames that end where the caller's memory ends (a page that cannot be read after them): the
 * writer reads nothing past them (swscale's SIMD loads would, on the caller's buffer). */
static void test_mp4_buffer_end(void **state) {
    (void)state;
    const uint32_t F = 12, H = 34, W = 50;
    size_t bytes = (size_t)F * H * W * 3, page = (size_t)sysconf(_SC_PAGESIZE);
    size_t span = (bytes + page - 1) / page * page;
    uint8_t *map =
        mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + span, page, PROT_NONE), 0);
    uint8_t *src = pattern(F, H, W), *at = map + span - bytes;
    memcpy(at, src, bytes);
    const char *d = scratch("buffer_end");
    write_ok(igt_fmt("%s/a.mp4", d), at, F, H, W, 8, 1);
    write_ok(igt_fmt("%s/b.mp4", d), src, F, H, W, 8, 1);
    size_t na, nb;
    char *da = igt_read(igt_fmt("%s/a.mp4", d), &na), *db = igt_read(igt_fmt("%s/b.mp4", d), &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(da, db, na);
    /* odd sizes too (the padding repeats the last column and row from the caller's memory) */
    const uint32_t OH = 33, OW = 49;
    size_t obytes = (size_t)F * OH * OW * 3;
    uint8_t *osrc = pattern(F, OH, OW);
    memcpy(map + span - obytes, osrc, obytes);
    write_ok(igt_fmt("%s/c.mp4", d), map + span - obytes, F, OH, OW, 8, 1);
    free(osrc);
    free(da);
    free(db);
    free(src);
    munmap(map, span + page);
}

static long file_size(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) fail_msg("stat %s", path);
    return (long)sb.st_size;
}

/* crf is honoured by both encoders: more quality, more bytes (and -1 is 18). */
static void test_mp4_crf(void **state) {
    (void)state;
    const uint32_t F = 12, H = 34, W = 50;
    uint8_t *src = pattern(F, H, W);
    const char *d = scratch("crf");
    const char *encoders[] = {"libx264", "mpeg4"};
    const int crf[] = {0, 18, 51, -1};
    for (int e = 0; e < 2; e++) {
        long size[4];
        for (int k = 0; k < 4; k++) {
            const char *path = igt_fmt("%s/%s_%d.mp4", d, encoders[e], crf[k]);
            ig_err err = {0};
            if (ig_video_write_mp4_with(path, src, F, H, W, 8, 1, crf[k], encoders[e], &err))
                fail_msg("%s", err.msg);
            size[k] = file_size(path);
        }
        print_message("%s: crf 0, 18, 51: %ld, %ld, %ld bytes\n", encoders[e], size[0], size[1],
                      size[2]);
        assert_true(size[0] > size[1]);
        assert_true(size[1] > size[2]);
        assert_int_equal(size[3], size[1]);
    }
    free(src);
}

/* ffprobe's view of the file: frames, size and rate (what other tools will see). */
static void test_mp4_ffprobe(void **state) {
    (void)state;
    if (igt_run("ffprobe -version", NULL) != 0) {
        print_message("skipped: ffprobe is not on PATH (Debian: apt-get install ffmpeg)\n");
        skip();
    }
    const uint32_t F = 12, H = 34, W = 50;
    uint8_t *src = pattern(F, H, W);
    const char *path = igt_fmt("%s/p.mp4", scratch("ffprobe"));
    write_ok(path, src, F, H, W, 8, 1);
    char *out = NULL;
    int rc = igt_run(igt_fmt("ffprobe -v error -select_streams v:0 -count_frames -show_entries "
                             "stream=codec_name,pix_fmt,width,height,r_frame_rate,avg_frame_rate,"
                             "nb_frames,nb_read_frames,color_space,color_range "
                             "-of default=noprint_wrappers=1 '%s'",
                             path),
                     &out);
    if (rc != 0) fail_msg("ffprobe failed: %s", out ? out : "");
    const char *want[] = {"codec_name=h264\n", "pix_fmt=yuv420p\n",   "width=50\n",
                          "height=34\n",       "r_frame_rate=8/1\n",  "avg_frame_rate=8/1\n",
                          "nb_frames=12\n",    "nb_read_frames=12\n", "color_space=bt709\n",
                          "color_range=tv\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(out, want[i])) fail_msg("ffprobe: no %s in:\n%s", want[i], out);
    free(out);
    free(src);
}

static void expect_fail(ig_status got, ig_status want, const ig_err *err, const char *path,
                        const char *words) {
    if (got != want)
        fail_msg("status %s, expected %s (%s)", ig_status_str(got), ig_status_str(want), err->msg);
    if (path && !strstr(err->msg, path))
        fail_msg("the message does not name %s: %s", path, err->msg);
    if (!strstr(err->msg, words)) fail_msg("the message does not say \"%s\": %s", words, err->msg);
}

static void test_mp4_errors(void **state) {
    (void)state;
    const uint32_t F = 4, H = 16, W = 16;
    uint8_t *src = pattern(F, H, W);
    const char *d = scratch("errors");
    char *path = strdup(igt_fmt("%s/e.mp4", d));
    ig_err err = {0};
    expect_fail(ig_video_write_mp4(path, src, 0, H, W, 8, 1, -1, &err), IG_ERR_INVALID_ARG, &err,
                path, "no frames");
    expect_fail(ig_video_write_mp4(path, src, F, 0, W, 8, 1, -1, &err), IG_ERR_INVALID_ARG, &err,
                path, "frames of 0x16");
    expect_fail(ig_video_write_mp4(path, src, F, H, 20000, 8, 1, -1, &err), IG_ERR_INVALID_ARG,
                &err, path, "each side must be 1 to 16384");
    expect_fail(ig_video_write_mp4(path, src, F, H, W, 0, 1, -1, &err), IG_ERR_INVALID_ARG, &err,
                path, "frame rate of 0/1");
    expect_fail(ig_video_write_mp4(path, src, F, H, W, 8, 0, -1, &err), IG_ERR_INVALID_ARG, &err,
                path, "frame rate of 8/0");
    expect_fail(ig_video_write_mp4(path, src, F, H, W, 8, 1, 52, &err), IG_ERR_INVALID_ARG, &err,
                path, "crf 52");
    expect_fail(ig_video_write_mp4(path, NULL, F, H, W, 8, 1, -1, &err), IG_ERR_INVALID_ARG, &err,
                path, "rgb is NULL");
    expect_fail(ig_video_write_mp4(NULL, src, F, H, W, 8, 1, -1, &err), IG_ERR_INVALID_ARG, &err,
                NULL, "no path");
    /* no such encoder; an encoder that cannot take the frames */
    expect_fail(ig_video_write_mp4_with(path, src, F, H, W, 8, 1, -1, "no_such_codec", &err),
                IG_ERR_UNSUPPORTED, &err, path, "no encoder named no_such_codec");
    expect_fail(ig_video_write_mp4_with(path, src, F, H, W, 8, 1, -1, "png", &err),
                IG_ERR_UNSUPPORTED, &err, path, "could be opened (tried png (no yuv420p))");
    assert_non_null(strstr(err.msg, "libx264"));
    /* paths that cannot be written: a missing directory, a file where a directory should be, a
     * directory where the file should be */
    const char *missing = igt_fmt("%s/no/such/dir/e.mp4", d);
    expect_fail(ig_video_write_mp4(missing, src, F, H, W, 8, 1, -1, &err), IG_ERR_NOT_FOUND, &err,
                missing, "No such file or directory");
    igt_write(igt_fmt("%s/file", d), "x", 1);
    const char *under_file = igt_fmt("%s/file/e.mp4", d);
    expect_fail(ig_video_write_mp4(under_file, src, F, H, W, 8, 1, -1, &err), IG_ERR_IO, &err,
                under_file, "Not a directory");
    const char *dir = igt_fmt("%s/dir.mp4", d);
    assert_int_equal(mkdir(dir, 0755), 0);
    expect_fail(ig_video_write_mp4(dir, src, F, H, W, 8, 1, -1, &err), IG_ERR_INVALID_ARG, &err,
                dir, "is not a regular file (it is a directory)");
    if (geteuid() != 0) { /* root writes anywhere */
        const char *ro = igt_fmt("%s/ro", d);
        assert_int_equal(mkdir(ro, 0555), 0);
        const char *in_ro = igt_fmt("%s/e.mp4", ro);
        expect_fail(ig_video_write_mp4(in_ro, src, F, H, W, 8, 1, -1, &err), IG_ERR_IO, &err, in_ro,
                    "Permission denied");
        assert_int_equal(igt_count_entries(ro), 0);
        rmdir(ro);
    }
    /* nothing was left behind: the file, the directory in the way, no temporaries */
    assert_int_equal(igt_count_entries(d), 2);
    assert_int_equal(igt_count_entries(dir), 0);
    free(path);
    free(src);
}

/* ---- contact sheets ------------------------------------------------------------------------- */

/* A PNG read back through ingot's decoder (FFmpeg's PNG demuxer and decoder): h x w RGB24. */
static uint8_t *read_png(const char *path, uint32_t *h, uint32_t *w) {
    size_t n;
    uint8_t *d = (uint8_t *)igt_read(path, &n);
    /* the signature, then IHDR: width, height (big-endian), 8 bits, colour type 2 (RGB) */
    assert_true(n > 33);
    assert_memory_equal(d, "\x89PNG\r\n\x1a\n", 8);
    assert_memory_equal(d + 12, "IHDR", 4);
    uint32_t pw = (uint32_t)d[16] << 24 | (uint32_t)d[17] << 16 | (uint32_t)d[18] << 8 | d[19];
    uint32_t ph = (uint32_t)d[20] << 24 | (uint32_t)d[21] << 16 | (uint32_t)d[22] << 8 | d[23];
    assert_int_equal(d[24], 8);
    assert_int_equal(d[25], 2);
    free(d);
    ig_video *v = open_ok(path);
    const ig_video_info *in = ig_video_get_info(v);
    assert_int_equal(in->frames, 1);
    assert_int_equal(in->width, pw);
    assert_int_equal(in->height, ph);
    uint8_t *img = read_all(v);
    ig_video_close(v);
    *h = ph;
    *w = pw;
    return img;
}

/* V videos of F frames, h x w, every pixel different from frame to frame and video to video. */
static uint8_t *sheet_source(uint32_t V, uint32_t F, uint32_t h, uint32_t w) {
    size_t n = (size_t)V * F * h * w * 3;
    uint8_t *p = malloc(n);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (uint8_t)(s >> 24);
    }
    return p;
}

/* The sheet holds video v's frame frame_of[c] in cell (v, c), and dark gutters between. */
static void check_sheet(const uint8_t *img, uint32_t sh, uint32_t sw, const uint8_t *src,
                        uint32_t V, uint32_t F, uint32_t h, uint32_t w, uint32_t cols,
                        const uint32_t *frame_of) {
    assert_int_equal(sh, V * (h + 2) - 2);
    assert_int_equal(sw, cols * (w + 2) - 2);
    for (uint32_t y = 0; y < sh; y++)
        for (uint32_t x = 0; x < sw; x++) {
            const uint8_t *got = img + ((size_t)y * sw + x) * 3;
            uint32_t v = y / (h + 2), c = x / (w + 2), cy = y % (h + 2), cx = x % (w + 2);
            if (cy >= h || cx >= w) { /* gutter */
                if (got[0] != 24 || got[1] != 24 || got[2] != 24)
                    fail_msg("gutter pixel (%u, %u) is %u,%u,%u", y, x, got[0], got[1], got[2]);
                continue;
            }
            const uint8_t *want = src + ((((size_t)v * F + frame_of[c]) * h + cy) * w + cx) * 3;
            if (memcmp(got, want, 3))
                fail_msg("cell (%u, %u) pixel (%u, %u) differs from video %u frame %u", v, c, cy,
                         cx, v, frame_of[c]);
        }
}

static void test_contact_sheet(void **state) {
    (void)state;
    const uint32_t V = 3, F = 12, H = 10, W = 14;
    uint8_t *src = sheet_source(V, F, H, W);
    const char *d = scratch("sheet");
    const char *path = igt_fmt("%s/s.png", d);
    ig_err err = {0};
    struct {
        uint32_t max_cols, cols;
        uint32_t frame_of[12];
    } cases[] = {
        {4, 4, {0, 4, 7, 11}},    /* 11/3 = 3.67 -> 4, 7.33 -> 7 */
        {2, 2, {0, 11}},          /* the first and the last */
        {5, 5, {0, 3, 6, 8, 11}}, /* 2.75 -> 3, 5.5 -> 6 (half up), 8.25 -> 8 */
        {1, 1, {0}},              /* one column: the first frame */
        {0, 12, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},  /* 0: every frame */
        {99, 12, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}, /* more columns than frames */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (ig_video_write_contact_sheet(path, src, V, F, H, W, cases[k].max_cols, &err) != IG_OK)
            fail_msg("%s", err.msg);
        uint32_t sh, sw;
        uint8_t *img = read_png(path, &sh, &sw);
        check_sheet(img, sh, sw, src, V, F, H, W, cases[k].cols, cases[k].frame_of);
        free(img);
        assert_int_equal(igt_count_entries(d), 1); /* replaced; no temporary left */
    }
    /* one video of one frame: the frame itself, no gutter */
    assert_int_equal(ig_video_write_contact_sheet(path, src, 1, 1, H, W, 8, &err), IG_OK);
    uint32_t sh, sw;
    uint8_t *img = read_png(path, &sh, &sw);
    assert_int_equal(sh, H);
    assert_int_equal(sw, W);
    assert_memory_equal(img, src, (size_t)H * W * 3);
    free(img);
    /* odd sizes are fine in a PNG */
    assert_int_equal(ig_video_write_contact_sheet(path, src, 2, 5, 7, 9, 3, &err), IG_OK);
    img = read_png(path, &sh, &sw);
    const uint32_t three[] = {0, 2, 4};
    check_sheet(img, sh, sw, src, 2, 5, 7, 9, 3, three);
    free(img);
    free(src);
}

static void test_contact_sheet_errors(void **state) {
    (void)state;
    uint8_t px[3 * 64] = {0};
    const char *d = scratch("sheet_errors");
    char *path = strdup(igt_fmt("%s/s.png", d));
    ig_err err = {0};
    expect_fail(ig_video_write_contact_sheet(path, px, 0, 1, 4, 4, 4, &err), IG_ERR_INVALID_ARG,
                &err, path, "no videos");
    expect_fail(ig_video_write_contact_sheet(path, px, 1, 0, 4, 4, 4, &err), IG_ERR_INVALID_ARG,
                &err, path, "no frames");
    expect_fail(ig_video_write_contact_sheet(path, px, 1, 1, 0, 4, 4, &err), IG_ERR_INVALID_ARG,
                &err, path, "frames of 0x4");
    /* too large: 3000 columns of 16 pixels (refused before any frame is read) */
    expect_fail(ig_video_write_contact_sheet(path, px, 1, 3000, 16, 16, 0, &err),
                IG_ERR_INVALID_ARG, &err, path, "too large");
    assert_non_null(strstr(err.msg, "max_cols"));
    const char *missing = igt_fmt("%s/no/dir/s.png", d);
    expect_fail(ig_video_write_contact_sheet(missing, px, 1, 1, 4, 4, 4, &err), IG_ERR_NOT_FOUND,
                &err, missing, "No such file or directory");
    assert_int_equal(igt_count_entries(d), 0);
    free(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mp4_roundtrip),  cmocka_unit_test(test_mp4_deterministic),
        cmocka_unit_test(test_mp4_odd_size),   cmocka_unit_test(test_mp4_rates),
        cmocka_unit_test(test_mp4_colour),     cmocka_unit_test(test_mp4_mpeg4_fallback),
        cmocka_unit_test(test_mp4_buffer_end), cmocka_unit_test(test_mp4_crf),
        cmocka_unit_test(test_mp4_ffprobe),    cmocka_unit_test(test_mp4_errors),
        cmocka_unit_test(test_contact_sheet),  cmocka_unit_test(test_contact_sheet_errors),
    };
    if (getenv("IGT_FILTER")) cmocka_set_test_filter(getenv("IGT_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
