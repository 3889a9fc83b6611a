/* video_decode.c - reading frames of an opened video: one seek per read to the keyframe before
 * the first frame it needs (none when the decoder is already before it), decoding forward, and
 * frames chosen by presentation timestamp, so B-frames and variable frame rates give the right
 * frames. A seek that lands past the keyframe asked for is noticed (the first frame out comes
 * after the first frame wanted) and redone from an earlier keyframe, then from the start.
 *
 * Frames become RGB24 through one swscale pass that crops (Open-Sora's cover-and-centre-crop,
 * done on the source as a crop rectangle) and scales with the file's colour matrix and range;
 * rotation from the display matrix is applied to the small result.
 */
#include "video_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>

#define SEEK_ATTEMPTS 3 /* the keyframe, the one before it, the start */

/* ---- positioning ---------------------------------------------------------------------------- */

static int64_t seek_ts(const ig_vpacket *p) {
    if (p->pts == AV_NOPTS_VALUE) return p->dts;
    if (p->dts == AV_NOPTS_VALUE) return p->pts;
    return p->pts < p->dts ? p->pts : p->dts;
}

/* The keyframe before packet k in decode order (k itself when there is none). */
static size_t key_before(const ig_video *v, size_t k) {
    for (size_t d = k; d-- > 0;)
        if (v->pk[d].key) return d;
    return k;
}

/* Seeks to packet k (a keyframe; SIZE_MAX: the start) and resets the decoder. */
static ig_status seek_to(ig_video *v, size_t k, ig_video_reason *why, ig_err *err) {
    int e;
    if (k == SIZE_MAX || !v->has_ts || k == 0) {
        int64_t t0 = v->has_ts ? seek_ts(&v->pk[0]) : 0;
        e = avformat_seek_file(v->fc, v->vs, INT64_MIN, t0, t0, 0);
        if (e < 0) e = av_seek_frame(v->fc, v->vs, t0, AVSEEK_FLAG_BACKWARD);
        if (e < 0) e = avio_seek(v->fc->pb, 0, SEEK_SET) < 0 ? -1 : 0;
    } else {
        e = av_seek_frame(v->fc, v->vs, seek_ts(&v->pk[k]), AVSEEK_FLAG_BACKWARD);
    }
    if (e < 0) {
        char eb[128];
        av_strerror(e, eb, sizeof eb);
        return ig_video_fail(v, IG_VIDEO_CORRUPT, why, err, "cannot seek: %s", eb);
    }
    avcodec_flush_buffers(v->cc);
    v->seeks++;
    av_packet_unref(v->held);
    v->holding = 0;
    v->live = 0;
    v->eof = 0;
    v->drained = 0;
    v->sent = SIZE_MAX;
    v->last_out_pts = INT64_MIN;
    v->out_count = 0;
    return IG_OK;
}

/* Where packet p is in decode order, given the last known position (SIZE_MAX: unknown). */
static size_t locate(const ig_video *v, const AVPacket *p, size_t after, size_t near) {
    size_t lo = after != SIZE_MAX ? after + 1 : (near > 64 ? near - 64 : 0);
    size_t hi = after != SIZE_MAX ? after + 2 : near + 64;
    for (size_t d = lo; d < hi && d < v->n_pk; d++)
        if (v->pk[d].pts == p->pts && v->pk[d].dts == p->dts) return d;
    return SIZE_MAX;
}

/* ---- one read ------------------------------------------------------------------------------- */

typedef struct read_job {
    const uint64_t *idx;
    uint32_t n, j; /* next slot to fill */
    ig_vframe_fn fn;
    void *arg;
    int check_overshoot; /* the next frame out is the first since a seek */
    int overshot;
} read_job;

static int64_t want_ts(const ig_video *v, const read_job *r) {
    return v->pts[r->idx[r->j]];
}

/* A frame out of the decoder. */
static ig_status take_frame(ig_video *v, read_job *r, ig_video_reason *why, ig_err *err) {
    AVFrame *f = v->frame;
    int64_t ts;
    if (v->has_ts) {
        ts = f->pts != AV_NOPTS_VALUE ? f->pts : f->best_effort_timestamp;
    } else {
        ts = (int64_t)v->out_count++;
    }
    if (r->j < r->n && r->check_overshoot && ts > want_ts(v, r)) {
        r->overshot = 1;
        return IG_OK;
    }
    r->check_overshoot = 0;
    int damaged = f->decode_error_flags || (f->flags & AV_FRAME_FLAG_CORRUPT);
    while (r->j < r->n && ts == want_ts(v, r)) {
        if (damaged)
            return ig_video_fail(v, IG_VIDEO_CORRUPT, why, err, "frame %llu decodes with errors",
                                 (unsigned long long)r->idx[r->j]);
        ig_status st = r->fn(r->arg, v, f, r->j, err);
        if (st != IG_OK) {
            if (why) *why = st == IG_ERR_NOMEM ? IG_VIDEO_NO_MEMORY : IG_VIDEO_ERROR;
            return st;
        }
        r->j++;
    }
    if (r->j < r->n && ts > want_ts(v, r))
        return ig_video_fail(v, IG_VIDEO_CORRUPT, why, err,
                             "frame %llu (pts %lld) is not produced by the decoder",
                             (unsigned long long)r->idx[r->j], (long long)want_ts(v, r));
    if (ts > v->last_out_pts) v->last_out_pts = ts;
    return IG_OK;
}

/* Takes the frames the decoder has ready, up to the one that fills the read's last slot: later
 * ones stay in the decoder for the next read, so that reading a clip in chunks (the pipeline
 * hands each chunk to its writer) decodes on without a seek back. */
static ig_status receive_all(ig_video *v, read_job *r, ig_video_reason *why, ig_err *err) {
    while (r->j < r->n) {
        int e = avcodec_receive_frame(v->cc, v->frame);
        if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return IG_OK;
        if (e < 0) {
            char eb[128];
            av_strerror(e, eb, sizeof eb);
            return ig_video_fail(v, e == AVERROR(ENOMEM) ? IG_VIDEO_NO_MEMORY : IG_VIDEO_CORRUPT,
                                 why, err, "decoding: %s", eb);
        }
        ig_status st = take_frame(v, r, why, err);
        av_frame_unref(v->frame);
        if (st != IG_OK || r->overshot) return st;
    }
    return IG_OK;
}

/* Sends v->pkt to the decoder (and unrefs it), taking frames while it is full. When the read's
 * last slot fills before the decoder takes the packet, the packet is held for the next read. */
static ig_status send_packet(ig_video *v, read_job *r, ig_video_reason *why, ig_err *err) {
    char eb[128];
    int e = avcodec_send_packet(v->cc, v->pkt);
    while (e == AVERROR(EAGAIN)) {
        ig_status st = receive_all(v, r, why, err);
        if (st != IG_OK || r->overshot) {
            av_packet_unref(v->pkt);
            return st;
        }
        if (r->j >= r->n) {
            av_packet_move_ref(v->held, v->pkt);
            v->holding = 1;
            return IG_OK;
        }
        e = avcodec_send_packet(v->cc, v->pkt);
    }
    av_packet_unref(v->pkt);
    if (e < 0)
        return ig_video_fail(v, e == AVERROR(ENOMEM) ? IG_VIDEO_NO_MEMORY : IG_VIDEO_CORRUPT, why,
                             err, "decoding a packet: %s", (av_strerror(e, eb, sizeof eb), eb));
    return receive_all(v, r, why, err);
}

/* Decodes forward until every slot is filled, the end, an error or an overshoot. */
static ig_status decode_forward(ig_video *v, read_job *r, size_t near, ig_video_reason *why,
                                ig_err *err) {
    char eb[128];
    while (r->j < r->n) {
        if (ig_video_expired(v)) return ig_video_fail(v, IG_VIDEO_TIMEOUT, why, err, "decoding");
        if (v->drained) { /* the end was sent: what the decoder still holds is all there is */
            ig_status st = receive_all(v, r, why, err);
            if (st != IG_OK || r->overshot) return st;
            if (r->j < r->n)
                return ig_video_fail(v, IG_VIDEO_TRUNCATED, why, err,
                                     "the stream ends before frame %llu",
                                     (unsigned long long)r->idx[r->j]);
            return IG_OK;
        }
        if (v->holding) { /* the packet the decoder could not take at the end of the last read */
            av_packet_move_ref(v->pkt, v->held);
            v->holding = 0;
            ig_status st = send_packet(v, r, why, err);
            if (st != IG_OK || r->overshot) return st;
            continue;
        }
        int e = av_read_frame(v->fc, v->pkt);
        if (e == AVERROR_EOF) {
            v->eof = 1;
            v->live = 0; /* a drained decoder must be flushed (a seek) before more packets */
            e = avcodec_send_packet(v->cc, NULL);
            if (e < 0 && e != AVERROR_EOF) { /* (as before: nothing more comes out) */
                if (r->j < r->n)
                    return ig_video_fail(v, IG_VIDEO_TRUNCATED, why, err,
                                         "the stream ends before frame %llu",
                                         (unsigned long long)r->idx[r->j]);
                return IG_OK;
            }
            v->drained = 1; /* the frames it holds past this read are the next read's */
            continue;
        }
        if (e < 0)
            return ig_video_fail(v, ig_video_expired(v) ? IG_VIDEO_TIMEOUT : IG_VIDEO_TRUNCATED,
                                 why, err, "reading packets: %s",
                                 (av_strerror(e, eb, sizeof eb), eb));
        if (v->pkt->stream_index != v->vs) {
            av_packet_unref(v->pkt);
            continue;
        }
        if (v->has_ts) v->sent = locate(v, v->pkt, v->live ? v->sent : SIZE_MAX, near);
        v->live = 1;
        ig_status st = send_packet(v, r, why, err);
        if (st != IG_OK || r->overshot) return st;
    }
    return IG_OK;
}

ig_status ig_video_read_frames(ig_video *v, const uint64_t *idx, uint32_t n, ig_vframe_fn fn,
                               void *arg, ig_video_reason *why, ig_err *err) {
    if (why) *why = IG_VIDEO_OK;
    if (n == 0) return IG_OK;
    for (uint32_t j = 0; j < n; j++)
        if (idx[j] >= v->info.frames || (j > 0 && idx[j] < idx[j - 1]))
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "%s: frame %llu: frames must be < %llu and non-decreasing", v->path,
                              (unsigned long long)idx[j], (unsigned long long)v->info.frames);
    ig_vlog *prev = ig_vlog_enter(&v->log);
    read_job r = {.idx = idx, .n = n, .fn = fn, .arg = arg};
    size_t key = v->kidx[idx[0]];
    ig_status st = IG_OK;
    /* already before the first frame with its keyframe sent: decode on, no seek */
    int go_on =
        ((v->live && !v->eof) || v->drained) &&
        (v->has_ts ? v->sent != SIZE_MAX && key <= v->sent && v->pts[idx[0]] > v->last_out_pts
                   : v->out_count <= idx[0]);
    for (int attempt = 0; st == IG_OK && attempt < SEEK_ATTEMPTS; attempt++) {
        if (!go_on) {
            size_t target = attempt == 0 ? key : attempt == 1 ? key_before(v, key) : SIZE_MAX;
            if (attempt == 1 && target == key) target = SIZE_MAX;
            if ((st = seek_to(v, target, why, err)) != IG_OK) break;
            r.check_overshoot = target != SIZE_MAX;
        }
        go_on = 0;
        r.overshot = 0;
        st = decode_forward(v, &r, key, why, err);
        if (st != IG_OK || !r.overshot) break;
        ig_debug(v->ctx, "%s: the seek for frame %llu overshot; seeking further back", v->path,
                 (unsigned long long)idx[0]);
        if (attempt == SEEK_ATTEMPTS - 1)
            st = ig_video_fail(v, IG_VIDEO_CORRUPT, why, err, "cannot reach frame %llu",
                               (unsigned long long)idx[0]);
    }
    if (st != IG_OK) v->live = 0, v->drained = 0;
    ig_vlog_enter(prev);
    return st;
}

/* ---- RGB ------------------------------------------------------------------------------------ */

typedef struct rgb_job {
    const uint64_t *idx;
    uint8_t *out;
    uint32_t th, tw; /* output, as displayed */
    size_t frame_bytes;
} rgb_job;

static int is_jpeg_range_fmt(enum AVPixelFormat f) {
    return f == AV_PIX_FMT_YUVJ420P || f == AV_PIX_FMT_YUVJ422P || f == AV_PIX_FMT_YUVJ444P ||
           f == AV_PIX_FMT_YUVJ440P || f == AV_PIX_FMT_YUVJ411P;
}

/* The source rectangle (coded orientation) that cover-and-centre-crop keeps for a th x tw output
 * of a frame fw x fh shown rotated by rot. */
static void crop_rect(int fw, int fh, int rot, uint32_t th, uint32_t tw, int *cx, int *cy, int *cw,
                      int *ch) {
    int swap = rot == 90 || rot == 270;
    int dw = swap ? fh : fw, dh = swap ? fw : fh; /* displayed */
    int dx = 0, dy = 0, dcw = dw, dch = dh;
    if ((uint64_t)th * (uint64_t)dw > (uint64_t)tw * (uint64_t)dh) { /* height binds: crop width */
        dcw = (int)(((uint64_t)tw * (uint64_t)dh * 2 + th) / (2 * (uint64_t)th));
        if (dcw < 1) dcw = 1;
        if (dcw > dw) dcw = dw;
        dx = (dw - dcw) / 2;
    } else if ((uint64_t)th * (uint64_t)dw < (uint64_t)tw * (uint64_t)dh) { /* crop height */
        dch = (int)(((uint64_t)th * (uint64_t)dw * 2 + tw) / (2 * (uint64_t)tw));
        if (dch < 1) dch = 1;
        if (dch > dh) dch = dh;
        dy = (dh - dch) / 2;
    }
    switch (rot) {
    case 90:
        *cx = dy, *cw = dch, *cy = fh - dx - dcw, *ch = dcw;
        break;
    case 180:
        *cx = fw - dx - dcw, *cw = dcw, *cy = fh - dy - dch, *ch = dch;
        break;
    case 270:
        *cx = fw - dy - dch, *cw = dch, *cy = dx, *ch = dcw;
        break;
    default:
        *cx = dx, *cw = dcw, *cy = dy, *ch = dch;
    }
}

static ig_status ensure_sws(ig_video *v, int cw, int ch, enum AVPixelFormat fmt, int ow, int oh,
                            const AVFrame *f, ig_err *err) {
    int range = f->color_range == AVCOL_RANGE_JPEG || is_jpeg_range_fmt(fmt);
    int key[8] = {cw, ch, (int)fmt, ow, oh, (int)f->colorspace, range, 0};
    if (v->sws && !memcmp(key, v->sws_key, sizeof key)) return IG_OK;
    sws_freeContext(v->sws);
    v->sws = sws_getContext(cw, ch, fmt, ow, oh, AV_PIX_FMT_RGB24, SWS_BICUBIC, NULL, NULL, NULL);
    if (!v->sws)
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: swscale cannot convert %s %dx%d to RGB24",
                          v->path, av_get_pix_fmt_name(fmt), cw, ch);
    /* the file's matrix (unspecified: BT.601, as swscale's default) and range, to full-range RGB */
    const int *coef = sws_getCoefficients(f->colorspace);
    sws_setColorspaceDetails(v->sws, coef, range, sws_getCoefficients(SWS_CS_DEFAULT), 1, 0,
                             1 << 16, 1 << 16);
    memcpy(v->sws_key, key, sizeof key);
    return IG_OK;
}

/* Whether a frame of this format can be turned plane by plane (planar, or packed without chroma
 * subsampling; a quarter turn must keep the subsampling, as 4:2:0 and 4:4:4 do). */
static int turnable(const AVPixFmtDescriptor *d, int rot) {
    if (d->flags & (AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_HWACCEL))
        return 0;
    if (!(d->flags & AV_PIX_FMT_FLAG_PLANAR) && (d->log2_chroma_w || d->log2_chroma_h)) return 0;
    return rot == 180 || d->log2_chroma_w == d->log2_chroma_h;
}

/* f turned clockwise by rot into v->turned (the frame as displayed), as the ffmpeg CLI's
 * autorotate does before any other filter: scaling after the turn keeps swscale's asymmetric
 * chroma handling (horizontal vs vertical) where the CLI has it. */
static ig_status turn(ig_video *v, const AVFrame *f, int rot, const AVPixFmtDescriptor *d,
                      const AVFrame **out, ig_err *err) {
    int swap = rot != 180;
    int w = swap ? f->height : f->width, h = swap ? f->width : f->height;
    AVFrame *t = v->turned;
    if (!t || t->width != w || t->height != h || t->format != f->format) {
        av_frame_free(&v->turned);
        t = v->turned = av_frame_alloc();
        if (t) {
            t->width = w;
            t->height = h;
            t->format = f->format;
        }
        if (!t || av_frame_get_buffer(t, 0) < 0)
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory turning frames of %s", v->path);
    }
    av_frame_copy_props(t, f);
    int steps[4];
    av_image_fill_max_pixsteps(steps, NULL, d);
    for (int p = 0; p < 4 && f->data[p]; p++) {
        int chroma = p == 1 || p == 2;
        int sw = chroma ? AV_CEIL_RSHIFT(f->width, d->log2_chroma_w) : f->width;
        int sh = chroma ? AV_CEIL_RSHIFT(f->height, d->log2_chroma_h) : f->height;
        int dw = swap ? sh : sw, dh = swap ? sw : sh, st = steps[p];
        const uint8_t *src = f->data[p];
        uint8_t *dst = t->data[p];
        ptrdiff_t sl = f->linesize[p], dl = t->linesize[p];
        /* each case copies pixels of a constant size: the copies inline to loads and stores */
#define TURN(STEP)                                                                                 \
    for (int y = 0; y < dh; y++) {                                                                 \
        uint8_t *row = dst + y * dl;                                                               \
        if (rot == 90)                                                                             \
            for (int x = 0; x < dw; x++)                                                           \
                memcpy(row + x * STEP, src + (sh - 1 - x) * sl + y * STEP, STEP);                  \
        else if (rot == 180)                                                                       \
            for (int x = 0; x < dw; x++)                                                           \
                memcpy(row + x * STEP, src + (sh - 1 - y) * sl + (sw - 1 - x) * STEP, STEP);       \
        else                                                                                       \
            for (int x = 0; x < dw; x++)                                                           \
                memcpy(row + x * STEP, src + x * sl + (sw - 1 - y) * STEP, STEP);                  \
    }
        switch (st) {
        case 1:
            TURN(1);
            break;
        case 2:
            TURN(2);
            break;
        case 3:
            TURN(3);
            break;
        case 4:
            TURN(4);
            break;
        case 6:
            TURN(6);
            break;
        case 8:
            TURN(8);
            break;
        default:
            TURN((size_t)st);
        }
#undef TURN
    }
    *out = t;
    return IG_OK;
}

static ig_status to_rgb(void *arg, ig_video *v, const AVFrame *f, uint32_t j, ig_err *err) {
    rgb_job *r = arg;
    uint8_t *dst = r->out + (size_t)j * r->frame_bytes;
    if (j > 0 && r->idx[j] == r->idx[j - 1]) { /* a repeated frame (--fps above the source's) */
        memcpy(dst, dst - r->frame_bytes, r->frame_bytes);
        return IG_OK;
    }
    enum AVPixelFormat fmt = (enum AVPixelFormat)f->format;
    const AVPixFmtDescriptor *desc = av_pix_fmt_desc_get(fmt);
    if (!desc || (desc->flags & (AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_BITSTREAM)))
        return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s: frames in pixel format %s", v->path,
                          desc ? desc->name : "?");
    int rot = (int)v->info.rotation;
    if (rot && turnable(desc, rot)) { /* else: turn the RGB result (packed 4:2:2 and the like) */
        ig_status st = turn(v, f, rot, desc, &f, err);
        if (st != IG_OK) return st;
        rot = 0;
    }
    int swap = rot == 90 || rot == 270;
    int cx, cy, cw, ch;
    crop_rect(f->width, f->height, rot, r->th, r->tw, &cx, &cy, &cw, &ch);
    /* the crop's corner on the chroma grid, as FFmpeg's crop filter does */
    int hs = desc->log2_chroma_w, vs = desc->log2_chroma_h;
    cx &= ~((1 << hs) - 1);
    cy &= ~((1 << vs) - 1);
    int ow = (int)(swap ? r->th : r->tw), oh = (int)(swap ? r->tw : r->th);
    ig_status st = ensure_sws(v, cw, ch, fmt, ow, oh, f, err);
    if (st != IG_OK) return st;
    int steps[4];
    av_image_fill_max_pixsteps(steps, NULL, desc);
    const uint8_t *src[4] = {0};
    for (int p = 0; p < 4 && f->data[p]; p++) {
        int chroma = p == 1 || p == 2;
        src[p] = f->data[p] + (ptrdiff_t)((cy >> (chroma ? vs : 0)) * f->linesize[p]) +
                 (ptrdiff_t)((cx >> (chroma ? hs : 0)) * steps[p]);
    }
    int line = FFALIGN(ow * 3, 64);
    size_t need = (size_t)line * (size_t)oh + 64;
    if (need > v->tmp_cap) {
        av_free(v->tmp);
        v->tmp = av_malloc(need);
        v->tmp_cap = v->tmp ? need : 0;
        if (!v->tmp) return ig_err_set(err, IG_ERR_NOMEM, "out of memory converting frames");
    }
    uint8_t *dp[4] = {v->tmp, NULL, NULL, NULL};
    int dl[4] = {line, 0, 0, 0};
    if (sws_scale(v->sws, src, f->linesize, 0, ch, dp, dl) != oh)
        return ig_err_set(err, IG_ERR_INTERNAL, "%s: swscale gave a short frame", v->path);
    const uint8_t *t = v->tmp;
    size_t tw = r->tw, th = r->th, ls = (size_t)line;
    switch (rot) {
    case 0:
        for (size_t y = 0; y < th; y++) memcpy(dst + y * tw * 3, t + y * ls, tw * 3);
        break;
    case 180:
        for (size_t y = 0; y < th; y++)
            for (size_t x = 0; x < tw; x++)
                memcpy(dst + (y * tw + x) * 3, t + (th - 1 - y) * ls + (tw - 1 - x) * 3, 3);
        break;
    case 90: /* coded (oh = tw rows, ow = th cols) turned clockwise */
        for (size_t y = 0; y < th; y++)
            for (size_t x = 0; x < tw; x++)
                memcpy(dst + (y * tw + x) * 3, t + (tw - 1 - x) * ls + y * 3, 3);
        break;
    default: /* 270 */
        for (size_t y = 0; y < th; y++)
            for (size_t x = 0; x < tw; x++)
                memcpy(dst + (y * tw + x) * 3, t + x * ls + (th - 1 - y) * 3, 3);
    }
    return IG_OK;
}

ig_status ig_video_read(ig_video *v, const uint64_t *idx, uint32_t n, uint32_t height,
                        uint32_t width, uint8_t *out, ig_video_reason *why, ig_err *err) {
    if ((height == 0) != (width == 0))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "give both a height and a width, or neither");
    rgb_job r = {.idx = idx,
                 .out = out,
                 .th = height ? height : v->info.height,
                 .tw = width ? width : v->info.width};
    r.frame_bytes = (size_t)r.th * r.tw * 3;
    return ig_video_read_frames(v, idx, n, to_rgb, &r, why, err);
}
