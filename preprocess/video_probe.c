/* video_probe.c - opening a video: the checks a bad file fails (missing, unreadable, empty, not a
 * video, truncated), the best video stream (not stream 0: audio often comes first), its decoder
 * with frame and slice threads, and one scan of the stream's packets - timestamps and keyframes,
 * no decoding - from which frames are addressed by presentation time and each keyframe to seek to
 * is known before any frame is decoded.
 */
#include "video_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libavutil/display.h>
#include <libavutil/pixdesc.h>

static const char *const reason_names[IG_VIDEO_REASON_COUNT] = {
    "ok",        "missing",   "unreadable",    "empty",     "not_video",
    "truncated", "corrupt",   "zero_duration", "too_short", "no_bucket",
    "timeout",   "too_large", "out_of_memory", "error"};

const char *ig_video_reason_str(ig_video_reason reason) {
    return reason >= 0 && reason < IG_VIDEO_REASON_COUNT ? reason_names[reason] : "?";
}

ig_video_open_opts ig_video_open_opts_default(void) {
    return (ig_video_open_opts){.threads = 1, .timeout_s = 0, .autorotate = 1};
}

int ig_video_expired(const ig_video *v) {
    return v->deadline > 0 && ig_now() > v->deadline;
}

ig_status ig_video_fail(ig_video *v, ig_video_reason reason, ig_video_reason *why, ig_err *err,
                        const char *fmt, ...) {
    if (why) *why = reason;
    if (ig_video_expired(v)) {
        reason = IG_VIDEO_TIMEOUT;
        if (why) *why = reason;
    }
    char what[512], detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ig_vlog_detail(&v->log, detail, sizeof detail);
    ig_status st = reason == IG_VIDEO_MISSING      ? IG_ERR_NOT_FOUND
                   : reason == IG_VIDEO_UNREADABLE ? IG_ERR_IO
                   : reason == IG_VIDEO_ERROR      ? IG_ERR_INTERNAL
                   : reason == IG_VIDEO_NO_MEMORY  ? IG_ERR_NOMEM
                                                   : IG_ERR_FORMAT;
    if (reason == IG_VIDEO_TIMEOUT)
        return ig_err_set(err, st, "%s: %s: time limit of %.0f s reached (%s)", v->path,
                          reason_names[reason], v->o.timeout_s, what);
    if (detail[0] && !strstr(what, detail))
        return ig_err_set(err, st, "%s: %s: %s (FFmpeg: %s)", v->path, reason_names[reason], what,
                          detail);
    return ig_err_set(err, st, "%s: %s: %s", v->path, reason_names[reason], what);
}

static int interrupt_cb(void *arg) {
    return ig_video_expired(arg);
}

static const char *av_error(int e, char *buf, size_t cap) {
    if (av_strerror(e, buf, cap) < 0) snprintf(buf, cap, "error %d", e);
    return buf;
}

/* ---- file checks ------------------------------------------------------------------------------
 */

static ig_status check_file(ig_video *v, ig_video_reason *why, ig_err *err) {
    struct stat sb;
    if (stat(v->path, &sb) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return ig_video_fail(v, IG_VIDEO_MISSING, why, err, "no such file");
        return ig_video_fail(v, IG_VIDEO_UNREADABLE, why, err, "%s", strerror(errno));
    }
    if (!S_ISREG(sb.st_mode))
        return ig_video_fail(v, IG_VIDEO_UNREADABLE, why, err, "not a regular file");
    int fd = open(v->path, O_RDONLY);
    if (fd < 0) return ig_video_fail(v, IG_VIDEO_UNREADABLE, why, err, "%s", strerror(errno));
    close(fd);
    if (sb.st_size == 0) return ig_video_fail(v, IG_VIDEO_EMPTY, why, err, "the file is empty");
    return IG_OK;
}

/* After avformat_open_input failed: is it a container FFmpeg knows (so the file is damaged), or
 * not a video file at all? */
static int format_known(const char *path) {
    AVIOContext *pb = NULL;
    const AVInputFormat *fmt = NULL;
    AVDictionary *o = NULL;
    av_dict_set(&o, "protocol_whitelist", "file", 0);
    int known = 0;
    if (avio_open2(&pb, path, AVIO_FLAG_READ, NULL, &o) >= 0) {
        known = av_probe_input_buffer2(pb, &fmt, path, NULL, 0, 0) >= 25 && fmt != NULL;
        avio_closep(&pb);
    }
    av_dict_free(&o);
    return known;
}

/* ---- stream and decoder -----------------------------------------------------------------------
 */

static int rotation_of(const AVStream *st) {
    size_t size = 0;
    const uint8_t *m = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (!m || size < 9 * sizeof(int32_t)) return 0;
    /* as the ffmpeg CLI's autorotate (fftools get_rotation): clockwise degrees to apply */
    double theta = -round(av_display_rotation_get((const int32_t *)m));
    theta -= 360 * floor(theta / 360 + 0.9 / 360);
    int r = (int)lround(theta);
    if (abs(r - 90) < 2) return 90;
    if (abs(r - 180) < 2) return 180;
    if (abs(r - 270) < 2) return 270;
    return 0;
}

static ig_status open_decoder(ig_video *v, ig_video_reason *why, ig_err *err) {
    char eb[128];
    const AVCodec *dec = NULL;
    int vs = av_find_best_stream(v->fc, AVMEDIA_TYPE_VIDEO, -1, -1, &dec, 0);
    if (vs == AVERROR_STREAM_NOT_FOUND)
        return ig_video_fail(v, IG_VIDEO_NOT_VIDEO, why, err, "no video stream");
    if (vs < 0 || !dec)
        return ig_video_fail(v, IG_VIDEO_NOT_VIDEO, why, err, "no decoder for the video stream");
    v->vs = vs;
    v->st = v->fc->streams[vs];
    for (unsigned i = 0; i < v->fc->nb_streams; i++)
        v->fc->streams[i]->discard = (int)i == vs ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    v->cc = avcodec_alloc_context3(dec);
    if (!v->cc) return ig_video_fail(v, IG_VIDEO_NO_MEMORY, why, err, "out of memory");
    int e = avcodec_parameters_to_context(v->cc, v->st->codecpar);
    if (e < 0)
        return ig_video_fail(v, IG_VIDEO_NOT_VIDEO, why, err, "codec parameters: %s",
                             av_error(e, eb, sizeof eb));
    v->cc->opaque = &v->log;
    v->cc->pkt_timebase = v->st->time_base;
    v->cc->thread_count = v->o.threads > 0 ? v->o.threads : 1;
    v->cc->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
    if (v->o.max_pixels > 0) /* frames larger than the header said are not decoded either */
        v->cc->max_pixels = v->o.max_pixels < INT64_MAX ? (int64_t)v->o.max_pixels : INT64_MAX;
    if ((e = avcodec_open2(v->cc, dec, NULL)) < 0)
        return ig_video_fail(v, IG_VIDEO_NOT_VIDEO, why, err, "cannot open the %s decoder: %s",
                             dec->name, av_error(e, eb, sizeof eb));
    return IG_OK;
}

/* A video stream without a size after FFmpeg read the streams. Under a per-video memory limit
 * FFmpeg refuses to decode a first frame of more than max_pixels (a memory ulimit makes the
 * limit small), and the stream is then left without a size: that video is too large, not "not a
 * video". FFmpeg's refusal (libavutil's av_image_check_size2) names the frame's size. */
static ig_status no_size(ig_video *v, ig_video_reason *why, ig_err *err) {
    char detail[256];
    ig_vlog_detail(&v->log, detail, sizeof detail);
    const char *at = strstr(detail, "Picture size ");
    unsigned w = 0, h = 0;
    if (v->o.max_pixels > 0 && at && strstr(at, "exceeds specified max pixel count") &&
        sscanf(at, "Picture size %ux%u", &w, &h) == 2)
        return ig_video_fail(v, IG_VIDEO_TOO_LARGE, why, err,
                             "its frames are %ux%u (%llu pixels), more than the per-video memory "
                             "limit lets the decoder hold (%llu pixels a frame): raise it with "
                             "--max-video-memory",
                             w, h, (unsigned long long)w * h, (unsigned long long)v->o.max_pixels);
    return ig_video_fail(v, IG_VIDEO_NOT_VIDEO, why, err, "the video stream has no size");
}

/* ---- the scan ----------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t ts_of(const ig_vpacket *p) {
    return p->pts != AV_NOPTS_VALUE ? p->pts : p->dts;
}

/* Reads every packet of the stream once: timestamps, keyframes. Then the frames in presentation
 * order (distinct timestamps, ascending) and, for each, the keyframe to seek to: the last
 * keyframe at or before the frame's packet in decode order whose own pts is not after the frame
 * (so that an open GOP's leading pictures seek one keyframe further back). */
static ig_status scan(ig_video *v, ig_video_reason *why, ig_err *err) {
    char eb[128];
    size_t cap = 1024;
    v->pk = malloc(cap * sizeof *v->pk);
    if (!v->pk) return ig_video_fail(v, IG_VIDEO_NO_MEMORY, why, err, "out of memory");
    int e, corrupt = 0;
    while ((e = av_read_frame(v->fc, v->pkt)) >= 0) {
        if (v->pkt->stream_index == v->vs) {
            if (v->n_pk == cap) {
                ig_vpacket *np = realloc(v->pk, 2 * cap * sizeof *np);
                if (!np) {
                    av_packet_unref(v->pkt);
                    return ig_video_fail(v, IG_VIDEO_NO_MEMORY, why, err, "out of memory");
                }
                v->pk = np;
                cap *= 2;
            }
            v->pk[v->n_pk++] = (ig_vpacket){.pts = v->pkt->pts,
                                            .dts = v->pkt->dts,
                                            .key = (v->pkt->flags & AV_PKT_FLAG_KEY) != 0};
            corrupt |= (v->pkt->flags & AV_PKT_FLAG_CORRUPT) != 0;
        }
        av_packet_unref(v->pkt);
    }
    if (ig_video_expired(v)) return ig_video_fail(v, IG_VIDEO_TIMEOUT, why, err, "reading packets");
    if (e != AVERROR_EOF)
        return ig_video_fail(v, IG_VIDEO_TRUNCATED, why, err, "reading packets: %s",
                             av_error(e, eb, sizeof eb));
    if (v->n_pk == 0)
        return ig_video_fail(v, IG_VIDEO_ZERO_DURATION, why, err, "the video stream has no frames");
    if (corrupt)
        return ig_video_fail(v, IG_VIDEO_TRUNCATED, why, err,
                             "a packet is cut short (the file ends early)");
    if (v->st->nb_frames > 0 && (uint64_t)v->st->nb_frames > v->n_pk)
        return ig_video_fail(v, IG_VIDEO_TRUNCATED, why, err,
                             "the index lists %lld frames, the file holds %zu",
                             (long long)v->st->nb_frames, v->n_pk);

    v->has_ts = 1;
    for (size_t i = 0; i < v->n_pk; i++)
        if (ts_of(&v->pk[i]) == AV_NOPTS_VALUE) v->has_ts = 0;
    size_t n = v->n_pk;
    v->pts = malloc(n * sizeof *v->pts);
    v->kidx = malloc(n * sizeof *v->kidx);
    if (!v->pts || !v->kidx) return ig_video_fail(v, IG_VIDEO_NO_MEMORY, why, err, "out of memory");
    if (!v->has_ts) { /* frames in decoder output order; reads decode from the start */
        for (size_t i = 0; i < n; i++) v->pts[i] = (int64_t)i, v->kidx[i] = 0;
        v->info.frames = n;
        return IG_OK;
    }
    for (size_t i = 0; i < n; i++) v->pts[i] = ts_of(&v->pk[i]);
    qsort(v->pts, n, sizeof *v->pts, cmp_i64);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || v->pts[i] != v->pts[m - 1]) v->pts[m++] = v->pts[i];
    v->info.frames = m;
    /* keyframe per frame: walk decode order; the frame of packet d is found by its pts */
    for (size_t i = 0; i < m; i++) v->kidx[i] = 0;
    size_t *keys = malloc(n * sizeof *keys), nk = 0;
    if (!keys) return ig_video_fail(v, IG_VIDEO_NO_MEMORY, why, err, "out of memory");
    for (size_t d = 0; d < n; d++) {
        if (v->pk[d].key) keys[nk++] = d;
        int64_t t = ts_of(&v->pk[d]);
        int64_t *hit = bsearch(&t, v->pts, m, sizeof *v->pts, cmp_i64);
        size_t f = (size_t)(hit - v->pts);
        size_t k = nk;
        while (k > 0 && ts_of(&v->pk[keys[k - 1]]) > t) k--;
        v->kidx[f] = k > 0 ? (uint32_t)keys[k - 1] : 0;
    }
    free(keys);
    return IG_OK;
}

/* The stream's duration as the container declares it, in seconds (0: not declared): the
 * stream's own, else its DURATION tag (Matroska), else the file's when it has one stream. */
static double declared_duration(const ig_video *v) {
    if (v->st->duration > 0 && v->st->duration != AV_NOPTS_VALUE)
        return (double)v->st->duration * av_q2d(v->st->time_base);
    const AVDictionaryEntry *t = av_dict_get(v->st->metadata, "DURATION", NULL, 0);
    unsigned h, m;
    double sec;
    if (t && sscanf(t->value, "%u:%u:%lf", &h, &m, &sec) == 3) return h * 3600.0 + m * 60.0 + sec;
    if (v->fc->nb_streams == 1 && v->fc->duration > 0)
        return (double)v->fc->duration / AV_TIME_BASE;
    return 0;
}

static void fill_info(ig_video *v) {
    ig_video_info *in = &v->info;
    const AVCodecParameters *par = v->st->codecpar;
    snprintf(in->container, sizeof in->container, "%s", v->fc->iformat->name);
    snprintf(in->codec, sizeof in->codec, "%s", avcodec_get_name(par->codec_id));
    const char *pf = av_get_pix_fmt_name((enum AVPixelFormat)par->format);
    snprintf(in->pix_fmt, sizeof in->pix_fmt, "%s", pf ? pf : "unknown");
    in->coded_width = (uint32_t)par->width;
    in->coded_height = (uint32_t)par->height;
    in->rotation = v->o.autorotate ? (uint32_t)rotation_of(v->st) : 0;
    int swap = in->rotation == 90 || in->rotation == 270;
    in->width = swap ? in->coded_height : in->coded_width;
    in->height = swap ? in->coded_width : in->coded_height;
    in->tb_num = v->st->time_base.num;
    in->tb_den = v->st->time_base.den;
    in->stream_index = v->vs;
    double tb = av_q2d(v->st->time_base);
    uint64_t n = in->frames;
    AVRational afr = v->st->avg_frame_rate;
    if (!v->has_ts) {
        in->fps = afr.num > 0 && afr.den > 0 ? av_q2d(afr) : 25.0;
        in->duration = (double)n / in->fps;
        return;
    }
    in->start_pts = v->pts[0];
    double span = (double)(v->pts[n - 1] - v->pts[0]) * tb;
    in->fps = n > 1 && span > 0 ? (double)(n - 1) / span : (afr.num > 0 ? av_q2d(afr) : 0);
    in->duration = span + (in->fps > 0 ? 1.0 / in->fps : 0);
    int64_t lo = INT64_MAX, hi = 0;
    for (uint64_t i = 1; i < n; i++) {
        int64_t d = v->pts[i] - v->pts[i - 1];
        if (d < lo) lo = d;
        if (d > hi) hi = d;
    }
    in->vfr = n > 2 && (double)hi > (double)lo * 1.01 + 1;
}

ig_status ig_video_open(ig_video **out, ig_ctx *ctx, const char *path,
                        const ig_video_open_opts *opts, ig_video_reason *why, ig_err *err) {
    ig_video_log_setup();
    *out = NULL;
    if (why) *why = IG_VIDEO_OK;
    ig_video *v = calloc(1, sizeof *v);
    if (!v || !(v->path = strdup(path))) {
        free(v);
        if (why) *why = IG_VIDEO_NO_MEMORY;
        return ig_err_set(err, IG_ERR_NOMEM, "%s: out_of_memory: out of memory opening it", path);
    }
    v->ctx = ctx;
    v->o = opts ? *opts : ig_video_open_opts_default();
    ig_vlog_init(&v->log, ctx, v->path);
    ig_vlog *prev = ig_vlog_enter(&v->log);
    if (v->o.timeout_s > 0) v->deadline = ig_now() + v->o.timeout_s;
    v->last_out_pts = INT64_MIN;

    char eb[128];
    ig_status st = check_file(v, why, err);
    if (st == IG_OK) {
        v->fc = avformat_alloc_context();
        v->pkt = av_packet_alloc();
        v->held = av_packet_alloc();
        v->frame = av_frame_alloc();
        if (!v->fc || !v->pkt || !v->held || !v->frame)
            st = ig_video_fail(v, IG_VIDEO_NO_MEMORY, why, err, "out of memory");
    }
    if (st == IG_OK) {
        v->fc->opaque = &v->log;
        v->fc->interrupt_callback = (AVIOInterruptCB){interrupt_cb, v};
        AVDictionary *o = NULL;
        av_dict_set(&o, "protocol_whitelist", "file", 0); /* never the network, whatever the file */
        int e = avformat_open_input(&v->fc, v->path, NULL, &o);
        av_dict_free(&o);
        if (e < 0) {
            v->fc = NULL; /* freed by the failed open */
            st = ig_video_fail(v, format_known(v->path) ? IG_VIDEO_TRUNCATED : IG_VIDEO_NOT_VIDEO,
                               why, err, "cannot read the container: %s",
                               av_error(e, eb, sizeof eb));
        }
    }
    if (st == IG_OK) {
        /* the frames it decodes to learn the streams are held to max_pixels too */
        AVDictionary **so = v->o.max_pixels > 0 && v->fc->nb_streams > 0
                                ? av_calloc(v->fc->nb_streams, sizeof *so)
                                : NULL;
        for (unsigned i = 0; so && i < v->fc->nb_streams; i++)
            av_dict_set_int(&so[i], "max_pixels",
                            v->o.max_pixels < INT64_MAX ? (int64_t)v->o.max_pixels : INT64_MAX, 0);
        int e = avformat_find_stream_info(v->fc, so);
        for (unsigned i = 0; so && i < v->fc->nb_streams; i++) av_dict_free(&so[i]);
        av_free(so);
        if (e < 0)
            st = ig_video_fail(v, IG_VIDEO_TRUNCATED, why, err, "cannot read the streams: %s",
                               av_error(e, eb, sizeof eb));
    }
    if (st == IG_OK) st = open_decoder(v, why, err);
    /* the packets find_stream_info read are kept and come first: the scan sees them all */
    if (st == IG_OK) st = scan(v, why, err);
    if (st == IG_OK) {
        fill_info(v);
        double declared = declared_duration(v);
        if (v->info.coded_width == 0 || v->info.coded_height == 0) st = no_size(v, why, err);
        /* (a Matroska DURATION tag counts from 0, not from the first frame: take the later end) */
        double end = v->info.duration;
        if (v->has_ts && v->pts[0] > 0) end += (double)v->pts[0] * av_q2d(v->st->time_base);
        if (st == IG_OK && v->has_ts && declared > 0 && end < 0.8 * declared - 0.05)
            st = ig_video_fail(v, IG_VIDEO_TRUNCATED, why, err,
                               "the container declares %.3f s of video, the file holds %.3f s",
                               declared, v->info.duration);
    }
    if (st == IG_OK) {
        /* positioned at the end: the first read seeks */
        v->live = 0;
        v->eof = 1;
    }
    ig_vlog_enter(prev);
    if (st != IG_OK) {
        ig_video_close(v);
        return st;
    }
    *out = v;
    return IG_OK;
}

void ig_video_close(ig_video *v) {
    if (!v) return;
    sws_freeContext(v->sws);
    av_free(v->tmp);
    avcodec_free_context(&v->cc);
    avformat_close_input(&v->fc);
    av_packet_free(&v->pkt);
    av_packet_free(&v->held);
    av_frame_free(&v->frame);
    av_frame_free(&v->turned);
    free(v->pk);
    free(v->pts);
    free(v->kidx);
    ig_vlog_destroy(&v->log);
    free(v->path);
    free(v);
}

const ig_video_info *ig_video_get_info(const ig_video *v) {
    return &v->info;
}

int64_t ig_video_frame_pts(const ig_video *v, uint64_t i) {
    return i < v->info.frames ? v->pts[i] : AV_NOPTS_VALUE;
}

uint64_t ig_video_frame_at(const ig_video *v, double t) {
    uint64_t n = v->info.frames;
    if (!v->has_ts) {
        double f = floor(t * v->info.fps + 1e-6);
        return f <= 0 ? 0 : (uint64_t)f >= n ? n - 1 : (uint64_t)f;
    }
    double tb = av_q2d(v->st->time_base);
    /* the target in ticks, rounded: a frame exactly at t counts as shown at t */
    int64_t target = v->pts[0] + (int64_t)llround(t / tb);
    uint64_t lo = 0, hi = n; /* first frame with pts > target */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (v->pts[mid] <= target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? 0 : lo - 1;
}
