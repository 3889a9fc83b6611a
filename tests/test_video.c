/* test_video.c - the FFmpeg decoder (preprocess/video_*.c): frames bit-exact against the framemd5
 * files of ../shared/data/video (made by the ffmpeg CLI), random access by seeking equal to
 * sequential decoding, every kind of test video the ffmpeg CLI makes (B-frames, VP9, MPEG-4/AVI,
 * HEVC, odd sizes, 10-bit, variable frame rate, rotations, a non-zero start, audio first)
 * against the CLI's own RGB output, unscaled and cover-cropped + scaled (PSNR >= 40 dB), and bad
 * files (missing, empty, unreadable, not video, truncated, corrupt, timeout) failing with their
 * reason. Under the ASan build (make test) LeakSanitizer checks that none of it leaks.
 *
 * The test videos are made at test time by the ffmpeg CLI in a temp dir; without the CLI the
 * tests that need it are skipped with the reason printed. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libavutil/imgutils.h>
#include <libavutil/md5.h>

#include "preprocess/video_internal.h"

static char *g_dir; /* the generated videos */
static int g_have_ffmpeg;

#define FF           "ffmpeg -nostdin -hide_banner -loglevel error -y "
#define SRC(sz, dur) "-f lavfi -i testsrc2=size=" sz ":rate=25:duration=" dur " "

/* name, ffmpeg arguments after the input (output path appended) */
static const char *const gen[][2] = {
    {"bframes.mp4", SRC("64x48", "0.8") "-c:v libx264 -bf 2 -g 8"},
    {"vp9.webm", SRC("64x48", "0.4") "-c:v libvpx-vp9 -deadline realtime -cpu-used 8"},
    {"mpeg4.avi", SRC("64x48", "0.4") "-c:v mpeg4"},
    {"hevc.mp4", SRC("64x48", "0.4") "-c:v libx265 -x265-params log-level=error"},
    {"odd.mp4", SRC("63x47", "0.4") "-c:v libx264 -pix_fmt yuv444p"},
    {"ten_bit.mp4", SRC("64x48", "0.4") "-c:v libx264 -pix_fmt yuv420p10le"},
    {"vfr.mp4", SRC("64x48", "0.48") "-vf setpts='N/25/TB+if(gte(N\\,5)\\,0.3/TB\\,0)+if(gte(N\\,"
                                     "8)\\,0.11/TB\\,0)' -fps_mode passthrough -c:v libx264 -bf 2"},
    {"start5.mkv", SRC("64x48", "0.4") "-c:v libx264 -output_ts_offset 5"},
    {"audio_first.mp4", "-f lavfi -i sine=frequency=440:duration=0.4 " SRC(
                            "64x48", "0.4") "-map 0:a -map 1:v -c:v libx264 -c:a aac"},
    {"plain.mp4", SRC("64x48", "1.2") "-c:v libx264 -g 10 -movflags +faststart"},
    {"moov_end.mp4", SRC("64x48", "1.2") "-c:v libx264 -g 10"},
    {"plain.webm", SRC("64x48", "1.2") "-c:v libvpx-vp9 -deadline realtime -cpu-used 8"},
    {"audio.wav", "-f lavfi -i sine=frequency=440:duration=0.2"},
};
#define N_GEN (sizeof gen / sizeof gen[0])

static const char *vpath(const char *name) {
    return igt_fmt("%s/%s", g_dir, name);
}

static void truncate_copy(const char *from, const char *to, double keep) {
    size_t n;
    char *d = igt_read(vpath(from), &n);
    igt_write(vpath(to), d, (size_t)((double)n * keep));
    free(d);
}

static int setup(void **state) {
    (void)state;
    ig_video_log_setup();
    g_dir = igt_mkdtemp();
    char *out = NULL;
    g_have_ffmpeg = igt_run("ffmpeg -version", NULL) == 0;
    free(out);
    if (!g_have_ffmpeg) return 0;
    for (size_t i = 0; i < N_GEN; i++) {
        char *log = NULL;
        int rc = igt_run(igt_fmt(FF "%s %s/%s", gen[i][1], g_dir, gen[i][0]), &log);
        if (rc != 0) {
            fprintf(stderr, "ffmpeg failed making %s: %s\n", gen[i][0], log ? log : "");
            free(log);
            return -1;
        }
        free(log);
    }
    /* rotations are display-matrix metadata on the same frames */
    const int rot[] = {90, 180, 270};
    for (int i = 0; i < 3; i++)
        if (igt_run(igt_fmt(FF "-i %s/bframes.mp4 -c copy -metadata:s:v:0 rotate=%d %s/rot%d.mp4",
                            g_dir, rot[i], g_dir, rot[i]),
                    NULL) != 0)
            return -1;
    truncate_copy("plain.mp4", "cut.mp4", 0.6);
    truncate_copy("moov_end.mp4", "cut_moov.mp4", 0.6);
    truncate_copy("plain.webm", "cut.webm", 0.6);
    /* corrupt in the middle: a fifth of the frames' data (which comes first: moov is at the end)
     * overwritten, so that NAL lengths and headers are hit whatever the encoder made */
    size_t n;
    uint8_t *d = (uint8_t *)igt_read(vpath("moov_end.mp4"), &n);
    for (size_t i = n / 3; i < n / 3 + n / 5; i++) d[i] = (uint8_t)(0xff - (i & 0x0f));
    igt_write(vpath("corrupt.mp4"), d, n);
    free(d);
    igt_write(vpath("empty.mp4"), "", 0);
    igt_write(vpath("text.mp4"), "this is not a video\n", 20);
    mkdir(vpath("dir.mp4"), 0755);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    igt_rmtree(g_dir);
    free(g_dir);
    return 0;
}

#define REQUIRE_FFMPEG()                                                                           \
    do {                                                                                           \
        if (!g_have_ffmpeg) {                                                                      \
            print_message("skipped: the ffmpeg CLI is not installed (tools/install-deps.sh)\n");   \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static ig_video *open_ok(const char *path, int autorotate) {
    ig_video_open_opts o = ig_video_open_opts_default();
    o.autorotate = autorotate;
    o.threads = 2;
    ig_video *v = NULL;
    ig_err err = {0};
    ig_video_reason why;
    ig_status st = ig_video_open(&v, NULL, path, &o, &why, &err);
    if (st != IG_OK) fail_msg("%s", err.msg);
    return v;
}

static void md5_hex(const uint8_t *data, size_t n, char out[33]) {
    uint8_t d[16];
    av_md5_sum(d, data, (int)n);
    for (int i = 0; i < 16; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

/* The MD5 column of a framemd5 file, one per frame. */
static char **read_framemd5(const char *path, size_t *n) {
    size_t len;
    char *text = igt_read(path, &len);
    char **out = calloc(len / 16 + 1, sizeof *out);
    *n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *last = strrchr(line, ',');
        assert_non_null(last);
        while (*++last == ' ') {
        }
        out[(*n)++] = strdup(last);
    }
    free(text);
    return out;
}

static void free_list(char **l, size_t n) {
    for (size_t i = 0; i < n; i++) free(l[i]);
    free(l);
}

typedef struct md5_job {
    char (*md5)[33];
} md5_job;

static ig_status native_md5(void *arg, ig_video *v, const AVFrame *f, uint32_t j, ig_err *err) {
    (void)v;
    (void)err;
    md5_job *m = arg;
    int size = av_image_get_buffer_size(f->format, f->width, f->height, 1);
    uint8_t *buf = malloc((size_t)size);
    av_image_copy_to_buffer(buf, size, (const uint8_t *const *)f->data, f->linesize, f->format,
                            f->width, f->height, 1);
    md5_hex(buf, (size_t)size, m->md5[j]);
    free(buf);
    return IG_OK;
}

static uint64_t *range_idx(uint64_t first, uint64_t n, uint64_t stride) {
    uint64_t *idx = malloc(n * sizeof *idx);
    for (uint64_t i = 0; i < n; i++) idx[i] = first + i * stride;
    return idx;
}

/* ---- against the shared data's framemd5 files ---------------------------------------------- */

static const char *const shared_videos[] = {"mmcv_test.mp4", "big_buck_bunny_432_433.webm",
                                            "chaplin.mp4", "fire2.mp4"};

static void test_shared_bit_exact(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    for (size_t k = 0; k < 4; k++) {
        const char *path = igt_fmt("%s/video/%s", igt_shared_data(), shared_videos[k]);
        size_t n_yuv, n_rgb;
        char **yuv = read_framemd5(igt_fmt("%s.yuv.framemd5", path), &n_yuv);
        char **rgb = read_framemd5(igt_fmt("%s.rgb24.framemd5", path), &n_rgb);
        ig_video *v = open_ok(path, 0); /* the framemd5 files are of unrotated frames */
        const ig_video_info *in = ig_video_get_info(v);
        assert_int_equal(in->frames, n_yuv);
        uint64_t *idx = range_idx(0, n_yuv, 1);
        char(*got)[33] = calloc(n_yuv, 33);
        md5_job m = {got};
        ig_err err = {0};
        assert_int_equal(ig_video_read_frames(v, idx, (uint32_t)n_yuv, native_md5, &m, NULL, &err),
                         IG_OK);
        for (size_t i = 0; i < n_yuv; i++)
            if (strcmp(got[i], yuv[i])) fail_msg("%s frame %zu: yuv md5 differs", path, i);
        /* RGB24 with the CLI's conversion: also bit-exact */
        size_t fb = (size_t)in->width * in->height * 3;
        uint8_t *out = malloc(n_rgb * fb);
        assert_int_equal(ig_video_read(v, idx, (uint32_t)n_rgb, 0, 0, out, NULL, &err), IG_OK);
        for (size_t i = 0; i < n_rgb; i++) {
            char h[33];
            md5_hex(out + i * fb, fb, h);
            if (strcmp(h, rgb[i])) fail_msg("%s frame %zu: rgb24 md5 differs", path, i);
        }
        free(out);
        /* random access: clips anywhere, with strides, after reads elsewhere */
        const uint64_t starts[] = {n_yuv / 2, 1, n_yuv - 3, 0, n_yuv / 3};
        for (size_t s = 0; s < 5; s++) {
            uint64_t stride = 1 + s % 2, cnt = 3;
            if (starts[s] + (cnt - 1) * stride >= n_yuv) stride = 1;
            uint64_t *cidx = range_idx(starts[s], cnt, stride);
            memset(got, 0, n_yuv * 33);
            assert_int_equal(
                ig_video_read_frames(v, cidx, (uint32_t)cnt, native_md5, &m, NULL, &err), IG_OK);
            for (uint64_t i = 0; i < cnt; i++)
                if (strcmp(got[i], yuv[cidx[i]]))
                    fail_msg("%s: frame %llu read from a seek differs", path,
                             (unsigned long long)cidx[i]);
            free(cidx);
        }
        free(got);
        free(idx);
        ig_video_close(v);
        free_list(yuv, n_yuv);
        free_list(rgb, n_rgb);
    }
}

/* A clip read in chunks, one ig_video_read after another (the pipeline hands each chunk to its
 * writer), gives the bytes of one read of the whole clip, and decodes on from chunk to chunk:
 * the only seek is the first read's (frames the decoder had ready past a chunk, and a packet it
 * had no room for, wait for the next read). Frame threads (2) and none, B-frames and not, a clip
 * by stride and one with repeated frames (a rate above the source's). */
static void test_chunked_reads(void **state) {
    (void)state;
    if (!g_have_ffmpeg) {
        print_message("skipped: the ffmpeg CLI is not installed\n");
        skip();
    }
    const char *names[] = {"bframes.mp4", "plain.mp4", "moov_end.mp4"};
    for (size_t k = 0; k < 3; k++)
        for (int threads = 1; threads <= 2; threads++) {
            ig_video_open_opts o = ig_video_open_opts_default();
            o.threads = threads;
            ig_video *v = NULL;
            ig_err err = {0};
            assert_int_equal(ig_video_open(&v, NULL, vpath(names[k]), &o, NULL, &err), IG_OK);
            uint64_t n = ig_video_get_info(v)->frames;
            /* every frame, each of the first ones twice, then every other one */
            uint64_t idx[64];
            uint32_t m = 0;
            for (uint64_t i = 0; i < n && m < 64; i++) {
                idx[m++] = i;
                if (i < 4 && m < 64) idx[m++] = i;
                if (i >= n / 2) i++;
            }
            size_t fb = (size_t)16 * 24 * 3;
            uint8_t *whole = malloc(m * fb), *parts = malloc(m * fb);
            assert_int_equal(ig_video_read(v, idx, m, 16, 24, whole, NULL, &err), IG_OK);
            ig_video_close(v);
            assert_int_equal(ig_video_open(&v, NULL, vpath(names[k]), &o, NULL, &err), IG_OK);
            for (uint32_t at = 0; at < m;) {
                uint32_t c = m - at < 3 ? m - at : 3;
                while (at + c < m && idx[at + c] == idx[at + c - 1]) c++;
                assert_int_equal(ig_video_read(v, idx + at, c, 16, 24, parts + at * fb, NULL, &err),
                                 IG_OK);
                at += c;
            }
            if (v->seeks != 1)
                fail_msg("%s, %d threads: %u seeks for one clip read in chunks", names[k], threads,
                         v->seeks);
            assert_memory_equal(whole, parts, m * fb);
            ig_video_close(v);
            free(whole);
            free(parts);
        }
}

static void test_shared_info(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    ig_video *v = open_ok(igt_fmt("%s/video/fire2.mp4", igt_shared_data()), 1);
    const ig_video_info *in = ig_video_get_info(v);
    assert_int_equal(in->rotation, 180);
    assert_int_equal(in->width, 1280);
    assert_int_equal(in->height, 720);
    assert_int_equal(in->frames, 25);
    assert_true(in->vfr);
    assert_int_equal(in->tb_den, 90000);
    ig_video_close(v);
    v = open_ok(igt_fmt("%s/video/chaplin.mp4", igt_shared_data()), 1);
    in = ig_video_get_info(v);
    assert_int_equal(in->frames, 241);
    assert_false(in->vfr);
    assert_true(fabs(in->fps - 25.0) < 1e-9);
    assert_string_equal(in->codec, "h264");
    ig_video_close(v);
}

/* ---- generated videos against the ffmpeg CLI ------------------------------------------------- */

static double psnr(const uint8_t *a, const uint8_t *b, size_t n) {
    double se = 0;
    for (size_t i = 0; i < n; i++) se += (double)(a[i] - b[i]) * (a[i] - b[i]);
    return se == 0 ? INFINITY : 10 * log10(255.0 * 255.0 * (double)n / se);
}

/* The crop ingot's cover-and-centre-crop takes of a dw x dh picture for th x tw, as the CLI's
 * crop filter (after its autorotation). */
static const char *crop_filter(uint32_t dw, uint32_t dh, uint32_t th, uint32_t tw) {
    uint32_t cw = dw, ch = dh;
    if ((uint64_t)th * dw > (uint64_t)tw * dh)
        cw = (uint32_t)(((uint64_t)tw * dh * 2 + th) / (2 * (uint64_t)th));
    else
        ch = (uint32_t)(((uint64_t)th * dw * 2 + tw) / (2 * (uint64_t)tw));
    return igt_fmt("-vf crop=%u:%u:%u:%u:exact=1,scale=%u:%u", cw, ch, (dw - cw) / 2, (dh - ch) / 2,
                   tw, th);
}

/* All frames of name, unscaled and cover-cropped to each of the n sizes th[k] x tw[k], against
 * what the CLI makes of them (one CLI run writes every version). */
static void compare_with_cli(const char *name, const uint32_t *th, const uint32_t *tw, int n) {
    ig_video *v = open_ok(vpath(name), 1);
    const ig_video_info *in = ig_video_get_info(v);
    char cmd[4096];
    int at = snprintf(cmd, sizeof cmd, FF "-i %s", vpath(name));
    for (int k = -1; k < n; k++)
        at +=
            snprintf(cmd + at, sizeof cmd - (size_t)at,
                     " -map 0:v:0 -fps_mode passthrough %s -pix_fmt rgb24 -f rawvideo %s/cli%d.rgb",
                     k < 0 ? "" : crop_filter(in->width, in->height, th[k], tw[k]), g_dir, k + 1);
    char *log = NULL;
    if (igt_run(cmd, &log) != 0) fail_msg("ffmpeg on %s: %s", name, log);
    free(log);
    uint64_t frames = in->frames;
    uint64_t *idx = range_idx(0, frames, 1);
    for (int k = -1; k < n; k++) {
        uint32_t h = k < 0 ? 0 : th[k], w = k < 0 ? 0 : tw[k];
        size_t fb = (size_t)(h ? h : in->height) * (w ? w : in->width) * 3, len;
        uint8_t *mine = malloc(frames * fb);
        ig_err err = {0};
        if (ig_video_read(v, idx, (uint32_t)frames, h, w, mine, NULL, &err) != IG_OK)
            fail_msg("%s", err.msg);
        uint8_t *ref = (uint8_t *)igt_read(igt_fmt("%s/cli%d.rgb", g_dir, k + 1), &len);
        if (len != frames * fb)
            fail_msg("%s: the CLI gave %zu bytes, ingot %zu", name, len, frames * fb);
        double p = psnr(mine, ref, len);
        if (p < 40) fail_msg("%s: %ux%u (0: unscaled): PSNR %.1f dB", name, h, w, p);
        free(ref);
        free(mine);
    }
    free(idx);
    ig_video_close(v);
}

static void test_generated_vs_cli(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    const char *names[] = {"bframes.mp4", "vp9.webm",    "mpeg4.avi",  "hevc.mp4",
                           "odd.mp4",     "ten_bit.mp4", "vfr.mp4",    "start5.mkv",
                           "rot90.mp4",   "rot180.mp4",  "rot270.mp4", "audio_first.mp4"};
    /* targets whose crops start on the chroma grid of 64x48 and 48x64 (ingot moves a crop's
     * corner onto it, the crop filter with exact=1 does not) */
    const uint32_t th[] = {24, 16, 40}, tw[] = {24, 32, 20};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        compare_with_cli(names[i], th, tw, 3);
}

static void test_generated_info(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    ig_video *v = open_ok(vpath("rot90.mp4"), 1);
    assert_int_equal(ig_video_get_info(v)->rotation, 270); /* rotate=90 is counterclockwise */
    assert_int_equal(ig_video_get_info(v)->width, 48);
    assert_int_equal(ig_video_get_info(v)->height, 64);
    ig_video_close(v);
    v = open_ok(vpath("audio_first.mp4"), 1);
    assert_int_equal(ig_video_get_info(v)->stream_index, 1);
    ig_video_close(v);
    v = open_ok(vpath("start5.mkv"), 1);
    assert_int_equal(ig_video_get_info(v)->start_pts, 5000);
    assert_int_equal(ig_video_frame_at(v, 0.0), 0);
    assert_int_equal(ig_video_frame_at(v, 0.079), 1);
    ig_video_close(v);
    /* vfr: frames at 0, .04, .08, .12, .16, .48, .52, .56, .72, .76, .80, .84 s */
    v = open_ok(vpath("vfr.mp4"), 1);
    const ig_video_info *in = ig_video_get_info(v);
    assert_int_equal(in->frames, 12);
    assert_true(in->vfr);
    assert_int_equal(ig_video_frame_at(v, 0.16), 4);
    assert_int_equal(ig_video_frame_at(v, 0.47), 4);
    assert_int_equal(ig_video_frame_at(v, 0.48), 5);
    assert_int_equal(ig_video_frame_at(v, 0.70), 7);
    assert_int_equal(ig_video_frame_at(v, 10.0), 11);
    ig_video_close(v);
    v = open_ok(vpath("ten_bit.mp4"), 1);
    assert_string_equal(ig_video_get_info(v)->pix_fmt, "yuv420p10le");
    ig_video_close(v);
}

/* ---- bad files ------------------------------------------------------------------------------- */

static void expect_open_fails(const char *path, ig_video_reason want, double timeout) {
    ig_video_open_opts o = ig_video_open_opts_default();
    o.timeout_s = timeout;
    ig_video *v = NULL;
    ig_err err = {0};
    ig_video_reason why = IG_VIDEO_OK;
    ig_status st = ig_video_open(&v, NULL, path, &o, &why, &err);
    if (st == IG_OK) fail_msg("%s opened; expected %s", path, ig_video_reason_str(want));
    if (why != want)
        fail_msg("%s: reason %s, expected %s (%s)", path, ig_video_reason_str(why),
                 ig_video_reason_str(want), err.msg);
    assert_non_null(strstr(err.msg, path)); /* the message names the file */
    assert_null(v);
}

static void test_bad_files(void **state) {
    (void)state;
    REQUIRE_FFMPEG();
    expect_open_fails(vpath("nope.mp4"), IG_VIDEO_MISSING, 0);
    expect_open_fails(vpath("empty.mp4"), IG_VIDEO_EMPTY, 0);
    expect_open_fails(vpath("dir.mp4"), IG_VIDEO_UNREADABLE, 0);
    expect_open_fails(vpath("text.mp4"), IG_VIDEO_NOT_VIDEO, 0);
    expect_open_fails(vpath("audio.wav"), IG_VIDEO_NOT_VIDEO, 0);
    expect_open_fails(vpath("cut.mp4"), IG_VIDEO_TRUNCATED, 0);
    expect_open_fails(vpath("cut_moov.mp4"), IG_VIDEO_TRUNCATED, 0);
    expect_open_fails(vpath("cut.webm"), IG_VIDEO_TRUNCATED, 0);
    expect_open_fails(vpath("plain.mp4"), IG_VIDEO_TIMEOUT, 1e-9);
    /* corrupt in the middle: opens (the packets are all there), fails where it is decoded */
    ig_video *v = open_ok(vpath("corrupt.mp4"), 1);
    uint64_t n = ig_video_get_info(v)->frames;
    uint64_t *idx = range_idx(0, n, 1);
    uint8_t *out = malloc(n * 64 * 48 * 3);
    ig_err err = {0};
    ig_video_reason why = IG_VIDEO_OK;
    assert_int_equal(ig_video_read(v, idx, (uint32_t)n, 0, 0, out, &why, &err), IG_ERR_FORMAT);
    assert_int_equal(why, IG_VIDEO_CORRUPT);
    /* frames before the damage still read */
    assert_int_equal(ig_video_read(v, idx, 2, 0, 0, out, &why, &err), IG_OK);
    free(out);
    free(idx);
    ig_video_close(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_bit_exact), cmocka_unit_test(test_shared_info),
        cmocka_unit_test(test_chunked_reads),    cmocka_unit_test(test_generated_vs_cli),
        cmocka_unit_test(test_generated_info),   cmocka_unit_test(test_bad_files),
    };
    if (getenv("IGT_FILTER")) cmocka_set_test_filter(getenv("IGT_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
