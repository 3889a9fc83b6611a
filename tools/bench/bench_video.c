/* bench_video.c - video decoding throughput against the ffmpeg CLI measured in the same run on the
 * same files, and the memory of the video pipeline over many videos.
 *
 *   1. every frame needed: ingot decodes every frame of each file to RGB24 (ig_video_read, in
 *      chunks, N decoder threads) vs `ffmpeg -threads N -i FILE -f null -` (which decodes and
 *      does not convert); frames/s of both and their ratio.
 *   2. 16-frame clips from long videos: ingot opens each file (one scan of its packets), seeks
 *      and decodes one clip of 16 frames at a random place, K times per file, vs decoding the
 *      whole file (ffmpeg's time from 1, and ingot's own): the speed-up.
 *   3. memory: the peak RSS of `preprocess video` over a manifest of 1,000 videos against one
 *      of 100 (the same small file; a flat pipeline gives a ratio near 1).
 *
 * The test videos are made with the ffmpeg CLI in a temporary directory (libx264, B-frames,
 * a keyframe every 2 s). usage: bench_video [--threads N] [--seconds S] [--files F] [--keep]
 * Lines starting with "RESULT" are for tools/bench/run.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preprocess/preprocess.h"

static long vm_hwm_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

static int reset_hwm(void) { /* VmHWM back to the current RSS (Linux >= 4.0) */
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int sh(const char *cmd) {
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "bench_video: failed (%d): %s\n", rc, cmd);
    return rc;
}

static double run_ffmpeg(const char *path, int threads) {
    char *cmd = NULL;
    if (asprintf(&cmd,
                 "ffmpeg -nostdin -hide_banner -loglevel error -threads %d -i %s -map 0:v:0 "
                 "-f null -",
                 threads, path) < 0)
        return -1;
    double t0 = ig_now();
    int rc = sh(cmd);
    free(cmd);
    return rc != 0 ? -1 : ig_now() - t0;
}

/* Every frame of path to RGB24, in chunks of 32 frames; returns seconds (or -1), *frames. */
static double ingot_all(const char *path, int threads, uint64_t *frames) {
    ig_video_open_opts o = ig_video_open_opts_default();
    o.threads = threads;
    ig_video *v = NULL;
    ig_err err = {0};
    double t0 = ig_now();
    if (ig_video_open(&v, NULL, path, &o, NULL, &err) != IG_OK) {
        fprintf(stderr, "bench_video: %s\n", err.msg);
        return -1;
    }
    const ig_video_info *in = ig_video_get_info(v);
    uint64_t n = in->frames, idx[32];
    uint8_t *buf = malloc((size_t)32 * in->width * in->height * 3);
    for (uint64_t at = 0; buf && at < n; at += 32) {
        uint32_t c = (uint32_t)(n - at < 32 ? n - at : 32);
        for (uint32_t j = 0; j < c; j++) idx[j] = at + j;
        if (ig_video_read(v, idx, c, 0, 0, buf, NULL, &err) != IG_OK) {
            fprintf(stderr, "bench_video: %s\n", err.msg);
            break;
        }
    }
    *frames = n;
    free(buf);
    ig_video_close(v);
    return ig_now() - t0;
}

/* k clips of 16 frames at random places (a fixed sequence), each from a fresh open: what a
 * pipeline sampling clips from many videos does. */
static double ingot_clips(const char *path, int threads, int k, uint64_t *seed) {
    double t0 = ig_now();
    for (int i = 0; i < k; i++) {
        ig_video_open_opts o = ig_video_open_opts_default();
        o.threads = threads;
        ig_video *v = NULL;
        ig_err err = {0};
        if (ig_video_open(&v, NULL, path, &o, NULL, &err) != IG_OK) return -1;
        const ig_video_info *in = ig_video_get_info(v);
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t start = (*seed >> 33) % (in->frames - 16), idx[16];
        for (int j = 0; j < 16; j++) idx[j] = start + (uint64_t)j;
        uint8_t *buf = malloc((size_t)16 * in->width * in->height * 3);
        ig_status st = buf ? ig_video_read(v, idx, 16, 0, 0, buf, NULL, &err) : IG_ERR_NOMEM;
        free(buf);
        ig_video_close(v);
        if (st != IG_OK) return -1;
    }
    return ig_now() - t0;
}

static long pipeline_peak_kb(ig_ctx *ctx, const char *dir, const char *video, int rows) {
    char man[1024], out[1024];
    snprintf(man, sizeof man, "%s/m%d.csv", dir, rows);
    snprintf(out, sizeof out, "%s/p%d", dir, rows);
    FILE *f = fopen(man, "w");
    if (!f) return -1;
    fprintf(f, "path,text\n");
    for (int i = 0; i < rows; i++) fprintf(f, "%s,video number %d\n", video, i);
    fclose(f);
    ig_video_opts o = ig_video_opts_default();
    o.manifest = man;
    o.output_prefix = out;
    o.frames = 8;
    o.stride = 2;
    o.height = o.width = 64;
    o.workers = 2;
    o.overwrite = 1;
    ig_video_stats st = {0};
    ig_err err = {0};
    if (reset_hwm() != 0) return -1;
    if (ig_preprocess_video(ctx, &o, &st, &err) != IG_OK) {
        fprintf(stderr, "bench_video: %s\n", err.msg);
        return -1;
    }
    ig_video_stats_clear(&st);
    return vm_hwm_kb();
}

int main(int argc, char **argv) {
    int threads = 2, files = 3, keep = 0;
    double seconds = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--files") && i + 1 < argc)
            files = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else {
            fprintf(stderr,
                    "usage: bench_video [--threads N] [--seconds S] [--files F] [--keep]\n");
            return 2;
        }
    }
    if (system("ffmpeg -version >/dev/null 2>&1") != 0) {
        printf("bench_video: skipped: the ffmpeg CLI is not installed\n");
        return 0;
    }
    char dir[] = "/tmp/ingot-bench-video-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    printf("making %d videos of %.0f s (640x360, 25 fps, h264 with B-frames, GOP 2 s)...\n", files,
           seconds);
    fflush(stdout);
    char cmd[2048], path[16][1024];
    if (files > 16) files = 16;
    for (int i = 0; i < files; i++) {
        snprintf(path[i], sizeof path[i], "%s/v%d.mp4", dir, i);
        snprintf(cmd, sizeof cmd,
                 "ffmpeg -nostdin -hide_banner -loglevel error -f lavfi -i "
                 "testsrc2=size=640x360:rate=25:duration=%g -vf hue=h=%d*t -c:v libx264 "
                 "-preset veryfast -bf 2 -g 50 -pix_fmt yuv420p %s",
                 seconds, 20 + 7 * i, path[i]);
        if (sh(cmd) != 0) return 1;
    }
    ig_video_log_setup();

    /* 1. every frame */
    double ff = 0, ig = 0;
    uint64_t frames = 0;
    for (int rep = 0; rep < 2; rep++) { /* alternate, so both see the same machine */
        for (int i = 0; i < files; i++) {
            uint64_t n = 0;
            double a = run_ffmpeg(path[i], threads), b = ingot_all(path[i], threads, &n);
            if (a < 0 || b < 0) return 1;
            ff += a, ig += b, frames += n;
        }
    }
    printf("every frame, %d threads: ffmpeg -f null %.0f frames/s, ingot to RGB24 %.0f frames/s: "
           "%.2fx (goal >= 0.9)\n",
           threads, (double)frames / ff, (double)frames / ig, ff / ig);
    printf("RESULT video_all_frames_ratio=%.3f\n", ff / ig);

    /* 2. 16-frame clips */
    int k = 4;
    uint64_t seed = 1;
    double clips = 0;
    for (int i = 0; i < files; i++) {
        double t = ingot_clips(path[i], threads, k, &seed);
        if (t < 0) return 1;
        clips += t;
    }
    double whole_ff = ff / 2 / files, whole_ig = ig / 2 / files, per_clip = clips / files / k;
    printf("one 16-frame clip of a %.0f s video (open + scan + seek + decode): %.3f s; the whole "
           "file: ffmpeg %.3f s (%.1fx), ingot %.3f s (%.1fx) (goal >= 3x)\n",
           seconds, per_clip, whole_ff, whole_ff / per_clip, whole_ig, whole_ig / per_clip);
    printf("RESULT video_clip_speedup_vs_ffmpeg=%.2f\n", whole_ff / per_clip);

    /* 3. memory over many videos */
    ig_ctx *ctx = NULL;
    ig_ctx_opts co = ig_ctx_opts_default();
    co.log_level = IG_LOG_ERROR;
    ig_err err = {0};
    if (ig_ctx_create(&ctx, &co, &err) != IG_OK) return 1;
    char small[1100];
    snprintf(small, sizeof small, "%s/small.mp4", dir);
    snprintf(cmd, sizeof cmd,
             "ffmpeg -nostdin -hide_banner -loglevel error -f lavfi -i "
             "testsrc2=size=320x240:rate=25:duration=1 -c:v libx264 -bf 2 %s",
             small);
    if (sh(cmd) != 0) return 1;
    long m100 = pipeline_peak_kb(ctx, dir, small, 100);
    long m1000 = pipeline_peak_kb(ctx, dir, small, 1000);
    printf("preprocess video peak RSS: 100 videos %ld kB, 1000 videos %ld kB: %.2fx (goal: flat)\n",
           m100, m1000, m100 > 0 ? (double)m1000 / (double)m100 : 0);
    printf("RESULT video_memory_ratio_1000_vs_100=%.3f\n",
           m100 > 0 ? (double)m1000 / (double)m100 : 0);
    ig_ctx_free(ctx);
    if (!keep) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        sh(cmd);
    } else {
        printf("kept %s\n", dir);
    }
    return 0;
}
