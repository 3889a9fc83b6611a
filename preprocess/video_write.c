/* video_write.c - videos for people, from frames in memory (a model's samples): an H.264 MP4
 * through libavcodec and libavformat, and a contact sheet PNG of several videos (through
 * ig_video_write_png: one PNG encoder in the tree). Both are written under a temporary name beside
 * the target and renamed when complete (ig_atomic_file), so a killed run never leaves half a file
 * under the final name.
 *
 * The MP4 is reproducible: one encoder thread, FFmpeg's bit-exact flags (no version strings, no
 * creation time), and a fixed colour conversion, so the same frames give the same bytes.
 */
#include "video_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/avstring.h>
#include <libavutil/opt.h>

#define DEFAULT_CRF 18
#define MAX_CRF     51    /* x264's scale */
#define MAX_SIDE    16384 /* pixels a side: past H.264's largest level already */
#define SHEET_GAP   2     /* the gutter between cells of a contact sheet, in pixels */
#define SHEET_DARK  24    /* its grey level */
#define SHEET_MAX   32768 /* pixels per side of a contact sheet */

/* ---- the encoder ---- */

/* The encoders tried, in order (encoder NULL), or only the one named. */
static int encoder_candidates(const char *encoder, const AVCodec **out) {
    int n = 0;
    if (encoder) {
        out[n++] = avcodec_find_encoder_by_name(encoder);
        return n;
    }
    out[n] = avcodec_find_encoder_by_name("libx264");
    if (out[n]) n++;
    const AVCodec *h264 = avcodec_find_encoder(AV_CODEC_ID_H264);
    if (h264 && (!n || h264 != out[0])) out[n++] = h264;
    out[n] = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    if (out[n]) n++;
    return n;
}

static int takes_yuv420p(const AVCodec *c) {
    if (!c->pix_fmts) return 1;
    for (const enum AVPixelFormat *p = c->pix_fmts; *p != AV_PIX_FMT_NONE; p++)
        if (*p == AV_PIX_FMT_YUV420P) return 1;
    return 0;
}

/* Opens codec for frames of h x w at time base tb, or returns NULL (FFmpeg's reason is in the
 * log sink). */
static AVCodecContext *open_encoder(const AVCodec *codec, uint32_t h, uint32_t w, AVRational tb,
                                    int crf, int global_header, ig_vlog *log) {
    if (!takes_yuv420p(codec)) return NULL;
    AVCodecContext *cc = avcodec_alloc_context3(codec);
    if (!cc) return NULL;
    cc->opaque = log;
    cc->width = (int)w;
    cc->height = (int)h;
    cc->pix_fmt = AV_PIX_FMT_YUV420P;
    cc->time_base = tb;
    cc->framerate = av_inv_q(tb);
    cc->sample_aspect_ratio = (AVRational){1, 1};
    cc->thread_count = 1; /* reproducible bytes: x264's threads split the work differently */
    cc->flags |= AV_CODEC_FLAG_BITEXACT;
    if (global_header) cc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    cc->color_range = AVCOL_RANGE_MPEG;
    cc->colorspace = AVCOL_SPC_BT709;
    cc->color_primaries = AVCOL_PRI_BT709;
    cc->color_trc = AVCOL_TRC_BT709;
    if (!strcmp(codec->name, "libx264")) {
        char v[16];
        snprintf(v, sizeof v, "%d", crf);
        av_opt_set(cc->priv_data, "crf", v, 0);
    } else if (codec->id == AV_CODEC_ID_MPEG4) {
        /* no crf: a fixed quantizer, 2 (best) to 31, as near as a scale goes to crf's */
        int q = 2 + crf / 6;
        cc->flags |= AV_CODEC_FLAG_QSCALE;
        cc->global_quality = FF_QP2LAMBDA * q;
    }
    if (avcodec_open2(cc, codec, NULL) < 0) avcodec_free_context(&cc);
    return cc;
}

/* ---- the MP4 ---- */

typedef struct mp4_out {
    const char *path;
    ig_vlog log;
    ig_atomic_file *af; /* the temporary (written by FFmpeg through its own handle) */
    AVFormatContext *fc;
    AVStream *st;
    AVCodecContext *cc;
    struct SwsContext *sws;
    AVFrame *rgbf;  /* the caller's frame, copied: RGB24, eh x ew, FFmpeg's padding after rows */
    AVFrame *frame; /* yuv420p, eh x ew */
    AVPacket *pkt;
} mp4_out;

/* "PATH: what (FFmpeg: its first error)". */
static ig_status mp4_fail(mp4_out *m, ig_status st, ig_err *err, const char *what, int e) {
    char detail[256], eb[128] = "";
    ig_vlog_detail(&m->log, detail, sizeof detail);
    if (e < 0 && av_strerror(e, eb, sizeof eb) < 0) snprintf(eb, sizeof eb, "error %d", e);
    if (detail[0]) return ig_err_set(err, st, "%s: %s (FFmpeg: %s)", m->path, what, detail);
    if (eb[0]) return ig_err_set(err, st, "%s: %s: %s", m->path, what, eb);
    return ig_err_set(err, st, "%s: %s", m->path, what);
}

/* Sends frame (NULL: the end) and writes the packets the encoder gives. */
static ig_status mp4_encode(mp4_out *m, AVFrame *frame, ig_err *err) {
    int e = avcodec_send_frame(m->cc, frame);
    if (e < 0) return mp4_fail(m, IG_ERR_INTERNAL, err, "the encoder refused a frame", e);
    for (;;) {
        e = avcodec_receive_packet(m->cc, m->pkt);
        if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return IG_OK;
        if (e < 0) return mp4_fail(m, IG_ERR_INTERNAL, err, "the encoder failed", e);
        if (m->pkt->duration <= 0) m->pkt->duration = 1; /* one frame of the codec's time base */
        av_packet_rescale_ts(m->pkt, m->cc->time_base, m->st->time_base);
        m->pkt->stream_index = m->st->index;
        e = av_interleaved_write_frame(m->fc, m->pkt); /* takes the packet's reference */
        if (e < 0) return mp4_fail(m, IG_ERR_IO, err, "cannot write the video", e);
    }
}

/* Zeros a frame's buffers, padding included: swscale and x264 read bytes past a row's end (their
 * SIMD loads, x264's edge extension of frames smaller than a macroblock), and what they hold must
 * not reach the output, or the bytes would differ from run to run. */
static void zero_frame(AVFrame *f) {
    for (int i = 0; i < AV_NUM_DATA_POINTERS && f->buf[i]; i++)
        memset(f->buf[i]->data, 0, f->buf[i]->size);
}

/* Gives f a new buffer of fmt, h x w, zeroed (f's colour tags: BT.709, limited range). */
static int new_buffer(AVFrame *f, enum AVPixelFormat fmt, uint32_t h, uint32_t w) {
    av_frame_unref(f);
    f->format = fmt;
    f->width = (int)w;
    f->height = (int)h;
    f->color_range = AVCOL_RANGE_MPEG;
    f->colorspace = AVCOL_SPC_BT709;
    f->color_primaries = AVCOL_PRI_BT709;
    f->color_trc = AVCOL_TRC_BT709;
    int e = av_frame_get_buffer(f, 0);
    if (e >= 0) zero_frame(f);
    return e;
}

/* A frame of rgb (h x w) into m->frame (yuv420p, eh x ew: h, w rounded up to even, the last row
 * and column repeated). Through a copy in an FFmpeg frame: swscale's SIMD reads past the end of a
 * row (16 bytes at a time), which the caller's buffer need not allow (valgrind sees it). */
static ig_status mp4_convert(mp4_out *m, const uint8_t *rgb, uint32_t h, uint32_t w, uint32_t eh,
                             uint32_t ew, ig_err *err) {
    size_t row = (size_t)w * 3;
    for (uint32_t y = 0; y < eh; y++) {
        uint8_t *d = m->rgbf->data[0] + (size_t)y * (size_t)m->rgbf->linesize[0];
        memcpy(d, rgb + (size_t)(y < h ? y : h - 1) * row, row);
        if (ew > w) memcpy(d + row, d + row - 3, 3);
    }
    if (!av_frame_is_writable(m->frame)) { /* the encoder still holds the last one */
        int e = new_buffer(m->frame, AV_PIX_FMT_YUV420P, eh, ew);
        if (e < 0) return mp4_fail(m, IG_ERR_NOMEM, err, "out of memory for a frame", e);
    }
    if (sws_scale(m->sws, (const uint8_t *const *)m->rgbf->data, m->rgbf->linesize, 0, (int)eh,
                  m->frame->data, m->frame->linesize) != (int)eh)
        return mp4_fail(m, IG_ERR_INTERNAL, err, "swscale failed converting RGB24 to yuv420p", 0);
    return IG_OK;
}

static void mp4_free(mp4_out *m) {
    if (m->fc) avio_closep(&m->fc->pb);
    avformat_free_context(m->fc);
    avcodec_free_context(&m->cc);
    sws_freeContext(m->sws);
    av_frame_free(&m->rgbf);
    av_frame_free(&m->frame);
    av_packet_free(&m->pkt);
    ig_atomic_file_abort(m->af); /* NULL after a commit; else removes the temporary */
}

static ig_status check_args(const char *path, const void *rgb, uint32_t frames, uint32_t height,
                            uint32_t width, ig_err *err) {
    if (!path || !path[0])
        return ig_err_set(err, IG_ERR_INVALID_ARG, "no path given for the video to write");
    if (!frames) return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: no frames to write", path);
    if (!height || !width || height > MAX_SIDE || width > MAX_SIDE)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: frames of %ux%u (height x width): each side must be 1 to %d pixels",
                          path, height, width, MAX_SIDE);
    if (!rgb) return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: no frames given (rgb is NULL)", path);
    if ((uint64_t)frames * height * width * 3 > SIZE_MAX)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: %u frames of %ux%u do not fit in memory",
                          path, frames, height, width);
    return IG_OK;
}

ig_status ig_video_write_mp4_with(const char *path, const uint8_t *rgb, uint32_t frames,
                                  uint32_t height, uint32_t width, uint32_t fps_num,
                                  uint32_t fps_den, int crf, const char *encoder, ig_err *err) {
    ig_video_log_setup();
    ig_status st = check_args(path, rgb, frames, height, width, err);
    if (st != IG_OK) return st;
    if (!fps_num || !fps_den || fps_num > INT_MAX || fps_den > INT_MAX)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: a frame rate of %u/%u: both must be 1 to %d", path, fps_num, fps_den,
                          INT_MAX);
    if (crf > MAX_CRF)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: crf %d: 0 (best) to %d, or negative for the default %d", path, crf,
                          MAX_CRF, DEFAULT_CRF);
    if (crf < 0) crf = DEFAULT_CRF;
    uint32_t eh = height + (height & 1), ew = width + (width & 1);
    AVRational tb;
    av_reduce(&tb.num, &tb.den, fps_den, fps_num, INT_MAX);

    mp4_out m = {.path = path};
    ig_vlog_init(&m.log, NULL, path);
    ig_vlog *prev = ig_vlog_enter(&m.log); /* swscale's and the muxer's messages */
    const AVOutputFormat *of = av_guess_format("mp4", NULL, NULL);
    if (!of) {
        st = ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: this FFmpeg has no MP4 muxer", path);
        goto done;
    }
    const AVCodec *cand[4];
    int n_cand = encoder_candidates(encoder, cand);
    char tried[256] = "";
    size_t at = 0;
    for (int i = 0; i < n_cand && !m.cc; i++) {
        if (!cand[i]) continue;
        m.cc = open_encoder(cand[i], eh, ew, tb, crf, !!(of->flags & AVFMT_GLOBALHEADER), &m.log);
        if (!m.cc && at < sizeof tried)
            at += (size_t)snprintf(tried + at, sizeof tried - at, "%s%s%s", at ? ", " : "",
                                   cand[i]->name, takes_yuv420p(cand[i]) ? "" : " (no yuv420p)");
    }
    if (!m.cc) {
        char detail[256];
        ig_vlog_detail(&m.log, detail, sizeof detail);
        if (encoder && !cand[0])
            st = ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: this FFmpeg has no encoder named %s",
                            path, encoder);
        else
            st = ig_err_set(err, IG_ERR_UNSUPPORTED,
                            "%s: no video encoder of this FFmpeg could be opened (tried %s%s%s): "
                            "install an FFmpeg whose libavcodec has libx264 (Debian: libavcodec59)",
                            path, tried[0] ? tried : "libx264, H.264, MPEG-4: none is built in",
                            detail[0] ? "; FFmpeg: " : "", detail);
        goto done;
    }

    m.sws = sws_getContext((int)ew, (int)eh, AV_PIX_FMT_RGB24, (int)ew, (int)eh, AV_PIX_FMT_YUV420P,
                           SWS_BICUBIC | SWS_ACCURATE_RND, NULL, NULL, NULL);
    m.rgbf = av_frame_alloc();
    m.frame = av_frame_alloc();
    m.pkt = av_packet_alloc();
    if (!m.sws || !m.rgbf || !m.frame || !m.pkt) {
        st = ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    /* full-range RGB to BT.709 limited range, as the stream says (decoders convert back with it) */
    sws_setColorspaceDetails(m.sws, sws_getCoefficients(SWS_CS_ITU709), 1,
                             sws_getCoefficients(SWS_CS_ITU709), 0, 0, 1 << 16, 1 << 16);
    if (new_buffer(m.frame, AV_PIX_FMT_YUV420P, eh, ew) < 0 ||
        new_buffer(m.rgbf, AV_PIX_FMT_RGB24, eh, ew) < 0) {
        st = ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory for a frame", path);
        goto done;
    }

    /* the temporary: made (and later renamed, fsync'd) by core; FFmpeg writes it by name, as
     * +faststart reopens it to move the index to the front */
    st = ig_atomic_file_create(&m.af, path, 1, err);
    if (st != IG_OK) goto done;
    char *url = av_asprintf("file:%s", ig_atomic_file_temp_path(m.af));
    int e = url ? avformat_alloc_output_context2(&m.fc, of, NULL, url) : AVERROR(ENOMEM);
    av_free(url);
    if (e < 0 || !m.fc) {
        st = mp4_fail(&m, IG_ERR_NOMEM, err, "cannot set up the MP4 muxer", e);
        goto done;
    }
    m.fc->opaque = &m.log;
    m.fc->flags |= AVFMT_FLAG_BITEXACT;           /* no version string, no creation time */
    m.fc->protocol_whitelist = av_strdup("file"); /* also for +faststart's reopening */
    m.st = avformat_new_stream(m.fc, NULL);
    if (!m.fc->protocol_whitelist || !m.st ||
        avcodec_parameters_from_context(m.st->codecpar, m.cc) < 0) {
        st = ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    m.st->time_base = tb;
    m.st->avg_frame_rate = m.cc->framerate;
    m.st->sample_aspect_ratio = m.cc->sample_aspect_ratio;
    AVDictionary *io = NULL;
    av_dict_set(&io, "protocol_whitelist", "file", 0);
    e = avio_open2(&m.fc->pb, m.fc->url, AVIO_FLAG_WRITE, NULL, &io);
    av_dict_free(&io);
    if (e < 0) {
        st = mp4_fail(&m, IG_ERR_IO, err, "cannot open the temporary file", e);
        goto done;
    }
    AVDictionary *mux = NULL;
    av_dict_set(&mux, "movflags", "+faststart", 0);
    e = avformat_write_header(m.fc, &mux);
    av_dict_free(&mux);
    if (e < 0) {
        st = mp4_fail(&m, IG_ERR_IO, err, "cannot write the MP4 header", e);
        goto done;
    }
    size_t frame_bytes = (size_t)height * width * 3;
    for (uint32_t i = 0; st == IG_OK && i < frames; i++) {
        st = mp4_convert(&m, rgb + i * frame_bytes, height, width, eh, ew, err);
        m.frame->pts = i;
        m.frame->quality = m.cc->global_quality; /* mpeg4's quantizer is taken from each frame */
        if (st == IG_OK) st = mp4_encode(&m, m.frame, err);
    }
    if (st == IG_OK) st = mp4_encode(&m, NULL, err);
    if (st != IG_OK) goto done;
    e = av_write_trailer(m.fc);
    if (e >= 0 && m.fc->pb->error < 0) e = m.fc->pb->error;
    if (e < 0) {
        st = mp4_fail(&m, IG_ERR_IO, err, "cannot write the MP4 index", e);
        goto done;
    }
    e = avio_closep(&m.fc->pb);
    if (e < 0) {
        st = mp4_fail(&m, IG_ERR_IO, err, "cannot write the video", e);
        goto done;
    }
    ig_atomic_file *af = m.af;
    m.af = NULL;
    st = ig_atomic_file_commit(af, err); /* fsync (the same file), rename, fsync the directory */
done:
    mp4_free(&m);
    ig_vlog_enter(prev);
    ig_vlog_destroy(&m.log);
    return st;
}

ig_status ig_video_write_mp4(const char *path, const uint8_t *rgb, uint32_t frames, uint32_t height,
                             uint32_t width, uint32_t fps_num, uint32_t fps_den, int crf,
                             ig_err *err) {
    return ig_video_write_mp4_with(path, rgb, frames, height, width, fps_num, fps_den, crf, NULL,
                                   err);
}

/* ---- the contact sheet ---- */

static uint32_t sheet_frame(uint32_t frames, uint32_t cols, uint32_t c) {
    if (cols <= 1) return 0;
    /* c (frames - 1) / (cols - 1), rounded half up */
    return (uint32_t)(((uint64_t)c * (frames - 1) * 2 + (cols - 1)) / (2 * (uint64_t)(cols - 1)));
}

ig_status ig_video_write_contact_sheet(const char *path, const uint8_t *rgb, uint32_t num_videos,
                                       uint32_t frames, uint32_t height, uint32_t width,
                                       uint32_t max_cols, ig_err *err) {
    ig_status st = check_args(path, rgb, frames, height, width, err);
    if (st != IG_OK) return st;
    if (!num_videos) return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: no videos to show", path);
    if ((uint64_t)frames * height * width * 3 > SIZE_MAX / num_videos)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: %u videos of %u frames do not fit in memory", path, num_videos,
                          frames);
    uint32_t cols = !max_cols || max_cols > frames ? frames : max_cols;
    uint64_t sh = (uint64_t)num_videos * (height + SHEET_GAP) - SHEET_GAP;
    uint64_t sw = (uint64_t)cols * (width + SHEET_GAP) - SHEET_GAP;
    if (sh > SHEET_MAX || sw > SHEET_MAX)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: a contact sheet of %llux%llu pixels (height x width) is too large "
                          "(at most %d a side): show fewer videos or columns (max_cols)",
                          path, (unsigned long long)sh, (unsigned long long)sw, SHEET_MAX);
    uint8_t *img = malloc((size_t)(sh * sw * 3));
    if (!img) return ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory for a contact sheet", path);
    memset(img, SHEET_DARK, (size_t)(sh * sw * 3));
    size_t row = (size_t)width * 3, frame_bytes = (size_t)height * row;
    for (uint32_t v = 0; v < num_videos; v++)
        for (uint32_t c = 0; c < cols; c++) {
            const uint8_t *f =
                rgb + ((size_t)v * frames + sheet_frame(frames, cols, c)) * frame_bytes;
            uint8_t *cell =
                img + ((size_t)v * (height + SHEET_GAP) * sw + (size_t)c * (width + SHEET_GAP)) * 3;
            for (uint32_t y = 0; y < height; y++) memcpy(cell + y * sw * 3, f + y * row, row);
        }
    st = ig_video_write_png(path, img, (uint32_t)sh, (uint32_t)sw, 1, err);
    free(img);
    return st;
}
