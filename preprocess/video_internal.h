/* video_internal.h - private to preprocess/: the FFmpeg side of the video pipeline. The opened
 * video (ig_video) is shared by video_probe.c (open, one scan of packets) and video_decode.c
 * (seek, decode, convert); video_log.c routes FFmpeg's log into per-file sinks; video_write.c
 * writes videos out (MP4, contact sheets).
 */
#ifndef INGOT_VIDEO_INTERNAL_H
#define INGOT_VIDEO_INTERNAL_H

#include <pthread.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>

#include "preprocess/preprocess.h"

/* ---- the log sink of one file (video_log.c) ---- */

typedef struct ig_vlog {
    ig_ctx *ctx;           /* debug lines go here; may be NULL */
    const char *path;      /* the file, for those lines */
    pthread_mutex_t mu;    /* FFmpeg's decoder threads may log at once */
    unsigned n;            /* messages at warning level or worse */
    char first_error[256]; /* the first error message, trimmed */
} ig_vlog;

void ig_vlog_init(ig_vlog *s, ig_ctx *ctx, const char *path);
void ig_vlog_destroy(ig_vlog *s);
/* Makes s the sink of messages FFmpeg logs from this thread without a context of ours (NULL:
 * none); returns the previous one. */
ig_vlog *ig_vlog_enter(ig_vlog *s);
/* The first error, or "" */
const char *ig_vlog_detail(ig_vlog *s, char *buf, size_t cap);

/* ---- the opened video ---- */

/* One packet of the video stream, in decode (file) order. */
typedef struct ig_vpacket {
    int64_t pts, dts; /* AV_NOPTS_VALUE when absent */
    int key;
} ig_vpacket;

struct ig_video {
    ig_ctx *ctx;
    char *path;
    ig_video_open_opts o;
    ig_vlog log;
    double deadline; /* ig_now() after which everything fails with a timeout; 0: none */

    AVFormatContext *fc;
    AVCodecContext *cc;
    AVStream *st;
    int vs; /* stream index */
    AVPacket *pkt;
    AVPacket *held; /* a packet the decoder had no room for when a read ended (holding) */
    int holding;
    AVFrame *frame;
    AVFrame *turned; /* a rotated frame (ig_video_read) */
    struct SwsContext *sws;
    int sws_key[8]; /* what sws was made for: src w, h, fmt, dst w, h, colorspace, range, - */
    uint8_t *tmp;   /* scaled frame before rotation, [tmp_cap] */
    size_t tmp_cap;

    ig_video_info info;
    ig_vpacket *pk; /* [n_pk] decode order */
    size_t n_pk;
    int64_t *pts;   /* [info.frames] presentation order, distinct, ascending */
    uint32_t *kidx; /* [info.frames] the packet (decode order) to seek to for frame i */
    int has_ts;     /* every packet has a timestamp: frames are found by pts */

    /* decoder position */
    int live;             /* packets were sent since the last seek */
    size_t sent;          /* decode-order index of the last packet sent (when known) */
    int64_t last_out_pts; /* pts of the last frame the decoder gave */
    uint64_t out_count;   /* frames the decoder gave since the start (no-timestamp mode) */
    int eof;              /* the demuxer reached the end since the last seek */
    int drained;          /* the end was sent to the decoder: it gives what it holds, then EOF */
    unsigned seeks;       /* seeks so far (tests count them) */
};

/* A decoded frame that a read wants: slot j of the read (see ig_video_read_frames). */
typedef ig_status (*ig_vframe_fn)(void *arg, ig_video *v, const AVFrame *f, uint32_t j,
                                  ig_err *err);

/* Decodes frames idx[0..n) (presentation order, non-decreasing) and calls fn once per slot j
 * with the decoded frame (repeated frames are given again). One seek to the keyframe before
 * idx[0] (none when the decoder is already before it), decoding forward; a seek that overshoots
 * (the first frame out is past idx[0]) is retried from an earlier keyframe, then from the start.
 * Used by ig_video_read (RGB) and by tests (the native frames). */
ig_status ig_video_read_frames(ig_video *v, const uint64_t *idx, uint32_t n, ig_vframe_fn fn,
                               void *arg, ig_video_reason *why, ig_err *err);

/* Fails with a reason: sets *why (when why), fills err with "PATH: what" plus FFmpeg's first
 * error when there is one, returns the status that goes with the reason. */
ig_status ig_video_fail(ig_video *v, ig_video_reason reason, ig_video_reason *why, ig_err *err,
                        const char *fmt, ...) IG_PRINTF(5, 6);

/* 1 when the time limit has run out. */
int ig_video_expired(const ig_video *v);

/* ---- writing videos (video_write.c) ---- */

/* ig_video_write_mp4 with the encoder named (FFmpeg's name: "libx264", "mpeg4", ...) instead of
 * the first of libx264, the default H.264 encoder and mpeg4 that opens (encoder NULL): tests write
 * through the fallback this way. */
ig_status ig_video_write_mp4_with(const char *path, const uint8_t *rgb, uint32_t frames,
                                  uint32_t height, uint32_t width, uint32_t fps_num,
                                  uint32_t fps_den, int crf, const char *encoder, ig_err *err);

/* ---- one manifest row's work (video_job.c), done by a pipeline worker ---- */

/* A clip ready for the shard writer (source and caption are set by the writer). */
typedef struct ig_vclip {
    ig_clip_info info;
    ig_clip_frame *frames; /* [info.frames] */
    void *data;            /* RGB24, or zstd of it */
    size_t bytes;
    int hashed;    /* xxh3 holds the hash of data (RGB24: hashed as it was decoded) */
    uint64_t xxh3; /* when hashed */
} ig_vclip;

/* How a worker shows the writer a row's RGB clips while it decodes them: after each chunk of
 * frames, ready(arg, clip, data, made, bytes) with clip's buffer, the bytes of it made so far and
 * its size. What was shown stays as it is until ig_vjob_clear (also the buffer of a clip that
 * failed half-way), so the writer may read it without a lock and write it ahead. */
/* Chunks of a row going straight to the writer that may be in flight: the worker decodes on while
 * the writer, on a busy machine, waits for a core (8 x ~2 MiB). */
#define IG_VJOB_CHUNKS 8

typedef struct ig_vjob_feed {
    void (*ready)(void *arg, uint32_t clip, const uint8_t *data, size_t made, size_t bytes);
    /* A buffer for a clip's RGB (NULL when out of memory): one of a pool the writer keeps of the
     * buffers of rows it wrote, whose pages are in memory already (a new 207 MB buffer costs
     * 50,000 page faults), or malloc'd; free() frees it. */
    void *(*alloc)(void *arg, size_t bytes);
    /* 1 when the row is the next the writer writes: its RGB clips then go straight to the
     * writer chunk by chunk (put) and are never held whole. */
    int (*through)(void *arg);
    /* Hands the writer the row's next chunk and returns once fewer than IG_VJOB_CHUNKS chunks
     * are waiting to be written (data stays as it is until IG_VJOB_CHUNKS - 1 more puts
     * returned, or drain); IG_ERR_CANCELLED when the run stops. drain returns once every chunk
     * put is written (or the run stopped). */
    ig_status (*put)(void *arg, const uint8_t *data, size_t len, ig_err *err);
    void (*drain)(void *arg);
    void *arg;
} ig_vjob_feed;

typedef struct ig_vjob {
    ig_video_reason why; /* IG_VIDEO_OK, or why the row is skipped (msg says more) */
    char msg[IG_ERR_MSG_MAX];
    ig_vclip *clips;
    uint32_t n_clips;
    uint64_t frames;
    int32_t *caption; /* token ids of the row's text (with a tokenizer) */
    size_t caption_len;
    double seconds; /* opening, scanning, decoding, converting */
    char *info_row; /* probe_only: the row of OUT.info.csv */
    void *partial;  /* the buffer of a clip that failed half-way (with a feed: it was shown) */
    size_t partial_bytes;
} ig_vjob;

/* Does row `row` (its index in the whole manifest: the key of its random draws) of the manifest:
 * probes the video, plans its clips, decodes and converts them (compresses, tokenizes the
 * caption), or with probe_only formats its info row. A bad video is not an error: job->why says
 * why it is skipped. The status is an error only for what must stop the run (out of memory).
 * feed (or NULL): RGB clips (not compressed ones) are shown to it chunk by chunk as they are
 * decoded; a row skipped then keeps its memory until ig_vjob_clear (without a feed a skipped row
 * keeps nothing). */
ig_status ig_vjob_run(ig_ctx *ctx, const ig_video_opts *o, const ig_video_entry *e, uint64_t row,
                      int decoder_threads, ig_encoder *enc, const ig_vjob_feed *feed, ig_vjob *job,
                      ig_err *err);
void ig_vjob_clear(ig_vjob *job);

/* The header of OUT.info.csv (probe_only), with its newline. */
extern const char ig_vjob_info_header[];
/* Appends s to a CSV line as one field (quoted when it holds a comma, quote or newline). */
void ig_csv_field(FILE *f, const char *s);

#endif
