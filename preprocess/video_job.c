/* video_job.c - what a pipeline worker does for one manifest row: open and scan the video, plan
 * its clips (the frame range the row's start/end allow, the bucket, K clip starts drawn from
 * (seed, row), each clip's frames by stride or by presentation time), decode them as RGB24 at
 * their size, compress them, tokenize the caption; or, probing only, one row of the info CSV.
 */
#include "video_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libavutil/imgutils.h>

const char ig_vjob_info_header[] = "path,text,num_frames,height,width,aspect_ratio,resolution,"
                                   "fps,duration,rotation,vfr,codec,pix_fmt,decode_status\n";

void ig_csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void ig_vjob_clear(ig_vjob *job) {
    for (uint32_t i = 0; job->clips && i < job->n_clips; i++) {
        free(job->clips[i].frames);
        free(job->clips[i].data);
    }
    free(job->clips);
    free(job->caption);
    free(job->info_row);
    free(job->partial);
    memset(job, 0, sizeof *job);
}

/* ---- planning ------------------------------------------------------------------------------- */

typedef struct plan {
    uint32_t T, H, W;
    uint32_t bucket; /* IG_CLIP_NONE without buckets */
    uint64_t lo, hi; /* the frames the row allows */
    uint32_t n;      /* clips */
    uint64_t start[64];
} plan;

#define MAX_CLIPS 64

static double t_of(const ig_video *v, uint64_t i) {
    const ig_video_info *in = ig_video_get_info(v);
    if (in->tb_den <= 0) return (double)i / (in->fps > 0 ? in->fps : 25);
    return (double)(ig_video_frame_pts(v, i) - in->start_pts) * in->tb_num / in->tb_den;
}

static int skip(ig_vjob *job, ig_video_reason why, const char *path, const char *fmt, ...)
    IG_PRINTF(4, 5);
static int skip(ig_vjob *job, ig_video_reason why, const char *path, const char *fmt, ...) {
    job->why = why;
    char what[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(job->msg, sizeof job->msg, "%s: %s: %s", path, ig_video_reason_str(why), what);
    return -1;
}

/* The frames the sampling can take from [lo, hi]: by stride, or at fps by time. */
static uint64_t available(const ig_video *v, const ig_video_opts *o, uint64_t lo, uint64_t hi) {
    if (o->fps > 0) return (uint64_t)floor((t_of(v, hi) - t_of(v, lo)) * o->fps + 1e-6) + 1;
    return (hi - lo) / o->stride + 1;
}

static int make_plan(const ig_video *v, const ig_video_opts *o, const ig_video_entry *e,
                     uint64_t row, plan *p, ig_vjob *job) {
    const ig_video_info *in = ig_video_get_info(v);
    uint64_t n = in->frames;
    memset(p, 0, sizeof *p);
    p->lo = 0;
    p->hi = n - 1;
    if (e->start > 0) {
        p->lo = ig_video_frame_at(v, e->start);
        if (t_of(v, p->lo) < e->start - 1e-9) p->lo++;
    }
    if (e->end >= 0) {
        p->hi = ig_video_frame_at(v, e->end);
        while (p->hi > 0 && t_of(v, p->hi) >= e->end - 1e-9) p->hi--;
        if (t_of(v, p->hi) >= e->end - 1e-9) p->lo = n; /* nothing before end */
    }
    if (p->lo >= n || p->lo > p->hi)
        return skip(job, IG_VIDEO_TOO_SHORT, e->path, "no frame between start %g s and end %g s",
                    e->start, e->end);
    uint64_t avail = available(v, o, p->lo, p->hi);
    p->bucket = IG_CLIP_NONE;
    if (o->buckets) {
        int64_t b = ig_video_buckets_assign(o->buckets, avail, in->height, in->width, o->seed, row);
        if (b < 0)
            return skip(job, IG_VIDEO_NO_BUCKET, e->path,
                        "%llu usable frames of %ux%u fit no bucket", (unsigned long long)avail,
                        in->height, in->width);
        const ig_video_bucket *bk = ig_video_buckets_get(o->buckets, (size_t)b);
        p->bucket = (uint32_t)b;
        p->T = bk->frames, p->H = bk->height, p->W = bk->width;
    } else {
        p->T = o->frames;
        p->H = o->height ? o->height : in->height;
        p->W = o->width ? o->width : in->width;
    }
    if (avail < p->T)
        return skip(job, IG_VIDEO_TOO_SHORT, e->path, "a clip needs %u frames, %llu are usable",
                    p->T, (unsigned long long)avail);
    /* the clip starts that leave room for T frames: [lo, last] */
    uint64_t last;
    if (o->fps > 0) {
        double need = (double)(p->T - 1) / o->fps, end = t_of(v, p->hi);
        last = p->hi;
        while (last > p->lo && t_of(v, last) + need > end + 1e-6) last--;
    } else {
        last = p->hi - (uint64_t)(p->T - 1) * o->stride;
    }
    uint64_t c = last - p->lo + 1;
    uint32_t k = o->clips_per_video < MAX_CLIPS ? o->clips_per_video : MAX_CLIPS;
    p->n = c < k ? (uint32_t)c : k;
    /* clip i starts in the i-th of n equal parts of the range, where (seed, row, i) draws */
    ig_rng_key key = ig_rng_key_make(o->seed, "ingot-video-clip");
    for (uint32_t i = 0; i < p->n; i++) {
        uint64_t a = p->lo + c * i / p->n, b = p->lo + c * (i + 1) / p->n;
        uint64_t off = (uint64_t)(ig_rng_uniform(key, row * MAX_CLIPS + i) * (double)(b - a));
        p->start[i] = a + (off < b - a ? off : b - a - 1);
    }
    return 0;
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* What decoding the plan takes, estimated before anything is allocated: the clips as RGB (with
 * zstd, one raw clip and the compressed ones, at most as large), and the decoder's frames at the
 * file's size and pixel format with one converted frame. A decoder holds a frame per thread and
 * its reference frames: DECODER_FRAMES of them, whatever the thread count, so that the same
 * limit skips the same videos for any --workers and --decoder-threads (the output stays
 * byte-identical). */
#define DECODER_FRAMES 8

typedef struct need {
    uint64_t clips, decode, total;
} need;

static need estimate(const ig_video *v, const ig_video_opts *o, const plan *p) {
    const ig_video_info *in = ig_video_get_info(v);
    need n;
    uint64_t raw = (uint64_t)p->T * p->H * p->W * 3;
    n.clips = raw * (p->n + (o->zstd_level > 0 ? 1 : 0));
    int size = av_image_get_buffer_size((enum AVPixelFormat)v->st->codecpar->format,
                                        (int)in->coded_width, (int)in->coded_height, 1);
    uint64_t native = size > 0 ? (uint64_t)size : (uint64_t)in->coded_width * in->coded_height * 4;
    n.decode = native * DECODER_FRAMES + (uint64_t)p->H * p->W * 3;
    n.total = n.clips + n.decode;
    return n;
}

/* The largest frame (in pixels) FFmpeg may decode under a per-video limit: at least the size of
 * any frame of a video that passes the estimate, so that it only stops a file whose frames
 * outgrow what its header says. */
static uint64_t max_pixels(uint64_t limit) {
    return limit / DECODER_FRAMES;
}

static int too_large(const ig_video_opts *o, const ig_video_entry *e, const ig_video *v,
                     const plan *p, const need *n, ig_vjob *job) {
    const ig_video_info *in = ig_video_get_info(v);
    char a[32], b[32], c[32], d[32];
    return skip(job, IG_VIDEO_TOO_LARGE, e->path,
                "decoding it needs about %s: %u clip%s of %u frames of %ux%u RGB (%s) and "
                "frames of %ux%u in the decoder (%s); the per-video memory limit is %s "
                "(max_video_memory: raise it, or take smaller or fewer clips)",
                ig_format_bytes((double)n->total, a, sizeof a), p->n, p->n == 1 ? "" : "s", p->T,
                p->H, p->W, ig_format_bytes((double)n->clips, b, sizeof b), in->coded_width,
                in->coded_height, ig_format_bytes((double)n->decode, c, sizeof c),
                ig_format_bytes((double)o->max_video_memory, d, sizeof d));
}

/* The source frames of a clip starting at frame s. */
static void clip_frames(const ig_video *v, const ig_video_opts *o, const plan *p, uint64_t s,
                        uint64_t *idx) {
    for (uint32_t j = 0; j < p->T; j++)
        idx[j] = o->fps > 0 ? ig_video_frame_at(v, t_of(v, s) + (double)j / o->fps)
                            : s + (uint64_t)j * o->stride;
}

static void rate(double fps, uint32_t *num, uint32_t *den) {
    uint64_t n = (uint64_t)llround(fps * 1000), d = 1000;
    if (n == 0) n = 1;
    uint64_t a = n, b = d;
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    *num = (uint32_t)(n / a > UINT32_MAX ? UINT32_MAX : n / a);
    *den = (uint32_t)(d / a);
}

/* ---- the row -------------------------------------------------------------------------------- */

static void info_row(ig_vjob *job, const ig_video_entry *e, const ig_video_info *in) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return;
    ig_csv_field(f, e->path);
    fputc(',', f);
    ig_csv_field(f, e->text);
    if (in)
        fprintf(f, ",%llu,%u,%u,%.6g,%llu,%.6g,%.6g,%u,%d,%s,%s,ok\n",
                (unsigned long long)in->frames, in->height, in->width,
                (double)in->height / in->width, (unsigned long long)in->height * in->width, in->fps,
                in->duration, in->rotation, in->vfr, in->codec, in->pix_fmt);
    else
        fprintf(f, ",0,0,0,0,0,0,0,0,0,,,%s\n", ig_video_reason_str(job->why));
    fclose(f);
    job->info_row = buf;
}

/* Frames a read takes at a time: a chunk is shown to the feed (the writer writes it while the
 * next one decodes) and hashed while it is still in cache. */
#define CHUNK_BYTES ((size_t)2 << 20)

/* The chunk buffers of a row that goes straight to the writer (ig_vjob_feed.put): one decodes
 * while the writer writes the others. */
typedef struct through {
    uint8_t *buf[IG_VJOB_CHUNKS];
    size_t cap[IG_VJOB_CHUNKS];
    unsigned next;
} through;

/* Decodes the clip of frames idx[0..T) chunk by chunk, each chunk hashed into h (or NULL): into
 * buf, each chunk shown to feed (or NULL); or, with t, into t's buffers, each chunk put to feed. */
static ig_status read_clip(ig_video *v, const plan *p, const uint64_t *idx, uint8_t *buf,
                           uint32_t clip, ig_xxh3_stream *h, const ig_vjob_feed *feed, through *t,
                           ig_video_reason *why, ig_err *err) {
    size_t fb = (size_t)p->H * p->W * 3, raw = fb * p->T;
    uint32_t step = fb >= CHUNK_BYTES ? 1 : (uint32_t)(CHUNK_BYTES / fb);
    for (uint32_t at = 0; at < p->T;) {
        uint32_t n = p->T - at < step ? p->T - at : step;
        /* a repeated frame (--fps above the source's) is read with the one it repeats */
        while (at + n < p->T && idx[at + n] == idx[at + n - 1]) n++;
        uint8_t *dst = buf ? buf + at * fb : NULL;
        if (t) { /* (the buffer of IG_VJOB_CHUNKS chunks ago: written, put said so) */
            unsigned k = t->next;
            if (t->cap[k] < n * fb) {
                uint8_t *b = realloc(t->buf[k], n * fb);
                if (!b) return ig_err_set(err, IG_ERR_NOMEM, "out of memory for a chunk");
                t->buf[k] = b, t->cap[k] = n * fb;
            }
            dst = t->buf[k];
        }
        ig_status st = ig_video_read(v, idx + at, n, p->H, p->W, dst, why, err);
        if (st != IG_OK) return st;
        if (h) ig_xxh3_stream_update(h, dst, n * fb);
        at += n;
        if (t) {
            if ((st = feed->put(feed->arg, dst, n * fb, err)) != IG_OK) return st;
            t->next = (t->next + 1) % IG_VJOB_CHUNKS;
        } else if (feed) {
            feed->ready(feed->arg, clip, buf, at * fb, raw);
        }
    }
    return IG_OK;
}

static ig_status decode_clips(ig_video *v, const ig_video_opts *o, const plan *p,
                              const ig_vjob_feed *feed, ig_vjob *job, ig_err *err) {
    const ig_video_info *in = ig_video_get_info(v);
    size_t raw = (size_t)p->T * p->H * p->W * 3;
    int packed = o->zstd_level > 0;
    if (packed) feed = NULL; /* the writer takes compressed clips whole */
    through tb = {0}, *t = feed && feed->through(feed->arg) ? &tb : NULL;
    job->clips = calloc(p->n, sizeof *job->clips);
    uint64_t *idx = malloc(p->T * sizeof *idx);
    uint8_t *buf = t ? NULL : feed ? feed->alloc(feed->arg, raw) : malloc(raw);
    ig_xxh3_stream *h = packed ? NULL : ig_xxh3_stream_create();
    ig_status st =
        job->clips && idx && (buf || t) && (packed || h)
            ? IG_OK
            : ig_err_set(err, IG_ERR_NOMEM, "out of memory for a clip of %u frames of %ux%u", p->T,
                         p->H, p->W);
    for (uint32_t i = 0; st == IG_OK && i < p->n; i++) {
        clip_frames(v, o, p, p->start[i], idx);
        ig_err derr = {0};
        ig_video_reason why = IG_VIDEO_OK;
        ig_xxh3_stream_free(h);
        h = NULL;
        if (!packed && !(h = ig_xxh3_stream_create())) {
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            break;
        }
        ig_status ds = read_clip(v, p, idx, buf, i, h, feed, t, &why, &derr);
        if (ds != IG_OK) {
            if (why == IG_VIDEO_ERROR || why == IG_VIDEO_OK) { /* not the file's fault */
                *err = derr;
                st = ds;
            } else {
                job->why = why;
                snprintf(job->msg, sizeof job->msg, "%s", derr.msg);
            }
            break;
        }
        ig_vclip *c = &job->clips[job->n_clips];
        c->info = (ig_clip_info){.frames = p->T,
                                 .height = p->H,
                                 .width = p->W,
                                 .bucket = p->bucket,
                                 .start_pts = ig_video_frame_pts(v, idx[0]),
                                 .tb_num = in->tb_num > 0 ? (uint32_t)in->tb_num : 1,
                                 .tb_den = in->tb_den > 0 ? (uint32_t)in->tb_den : 1};
        rate(o->fps > 0 ? o->fps : in->fps / o->stride, &c->info.fps_num, &c->info.fps_den);
        c->frames = malloc(p->T * sizeof *c->frames);
        if (!c->frames) {
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            break;
        }
        for (uint32_t j = 0; j < p->T; j++)
            c->frames[j] = (ig_clip_frame){ig_video_frame_pts(v, idx[j]), idx[j]};
        if (packed) {
            st = ig_clip_compress(buf, raw, o->zstd_level, &c->data, &c->bytes, err);
        } else {
            c->data = buf; /* NULL straight to the writer: it has every byte */
            c->bytes = raw;
            c->hashed = 1;
            c->xxh3 = ig_xxh3_stream_digest(h);
            buf = i + 1 >= p->n || t ? NULL : feed ? feed->alloc(feed->arg, raw) : malloc(raw);
            if (!buf && !t && i + 1 < p->n) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        }
        if (st == IG_OK) {
            job->n_clips++;
            job->frames += p->T;
        } else {
            free(c->frames);
            c->frames = NULL;
        }
    }
    ig_xxh3_stream_free(h);
    free(idx);
    if (t) { /* the writer may be writing the last chunk */
        feed->drain(feed->arg);
        for (int k = 0; k < IG_VJOB_CHUNKS; k++) free(tb.buf[k]);
    }
    if (feed) { /* it may have been shown: it stays until the writer is done */
        job->partial = buf;
        job->partial_bytes = raw;
    } else {
        free(buf);
    }
    return st;
}

ig_status ig_vjob_run(ig_ctx *ctx, const ig_video_opts *o, const ig_video_entry *e, uint64_t row,
                      int decoder_threads, ig_encoder *enc, const ig_vjob_feed *feed, ig_vjob *job,
                      ig_err *err) {
    memset(job, 0, sizeof *job);
    double t0 = ig_now();
    ig_video_open_opts vo = ig_video_open_opts_default();
    vo.threads = decoder_threads;
    vo.timeout_s = o->timeout_s;
    if (o->max_video_memory > 0 && !o->probe_only) vo.max_pixels = max_pixels(o->max_video_memory);
    ig_video *v = NULL;
    ig_err verr = {0};
    ig_video_reason why = IG_VIDEO_OK;
    ig_status st = IG_OK;
    if (ig_video_open(&v, ctx, e->path, &vo, &why, &verr) != IG_OK) {
        if (why == IG_VIDEO_ERROR) {
            *err = verr;
            st = verr.status ? verr.status : IG_ERR_INTERNAL;
        }
        job->why = why;
        snprintf(job->msg, sizeof job->msg, "%s", verr.msg);
    }
    plan p;
    if (st == IG_OK && o->probe_only) {
        info_row(job, e, v ? ig_video_get_info(v) : NULL);
        if (!job->info_row) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else if (st == IG_OK && v && make_plan(v, o, e, row, &p, job) == 0) {
        need n = estimate(v, o, &p);
        if (o->max_video_memory > 0 && n.total > o->max_video_memory)
            too_large(o, e, v, &p, &n, job);
        else
            st = decode_clips(v, o, &p, feed, job, err);
        if (st == IG_OK && job->why == IG_VIDEO_OK && enc) {
            ig_tokens t = {0};
            st = ig_encoder_encode(enc, e->text, strlen(e->text), 0, &t, err);
            job->caption = t.ids;
            job->caption_len = t.n;
        }
    }
    ig_video_close(v);
    if (st == IG_ERR_NOMEM) { /* this video's allocation: skipped (or, strict, the run stops) */
        skip(job, IG_VIDEO_NO_MEMORY, e->path, "%s", err->msg);
        ig_err_clear(err);
        st = IG_OK;
    }
    /* a skipped row keeps nothing, but what a feed was shown stays until the writer is done */
    if (job->why != IG_VIDEO_OK && !o->probe_only && !feed) {
        char msg[sizeof job->msg];
        ig_video_reason w = job->why;
        memcpy(msg, job->msg, sizeof msg);
        ig_vjob_clear(job);
        job->why = w;
        memcpy(job->msg, msg, sizeof msg);
    }
    job->seconds = ig_now() - t0;
    return st;
}
