/* video_log.c - FFmpeg's log, routed to the file it concerns.
 *
 * FFmpeg has one log callback per process (av_log_set_callback), so this is the one place with
 * process-wide state, and it is written once: ig_video_log_setup installs the callback under
 * pthread_once and nothing changes it afterwards. The callback holds no state of its own. It
 * finds the sink of the message's file:
 *   - from the logging context: an AVFormatContext or AVCodecContext of ours carries its file's
 *     sink in `opaque` (this covers FFmpeg's decoder threads, which log through the codec
 *     context from threads ingot does not own);
 *   - else from the calling thread's current sink, a thread-local pointer that a worker sets
 *     while it works on a file (messages of swscale or a demuxer's private context);
 *   - else nowhere: the message is dropped (it concerns no file of ours).
 * A sink counts messages and keeps the first error; at most a few lines per file reach the
 * context's logger, at debug level, so a corrupt file never floods the terminal.
 */
#include "video_internal.h"

#include <stdio.h>
#include <string.h>

#include <libavutil/log.h>

#define LINES_PER_FILE 5 /* debug lines per file; the rest are only counted */

static _Thread_local ig_vlog *tls_sink; /* this thread's current file, or NULL */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

void ig_vlog_init(ig_vlog *s, ig_ctx *ctx, const char *path) {
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->path = path;
    pthread_mutex_init(&s->mu, NULL);
}

void ig_vlog_destroy(ig_vlog *s) {
    pthread_mutex_destroy(&s->mu);
}

ig_vlog *ig_vlog_enter(ig_vlog *s) {
    ig_vlog *prev = tls_sink;
    tls_sink = s;
    return prev;
}

const char *ig_vlog_detail(ig_vlog *s, char *buf, size_t cap) {
    pthread_mutex_lock(&s->mu);
    snprintf(buf, cap, "%s", s->first_error);
    pthread_mutex_unlock(&s->mu);
    return buf;
}

static ig_vlog *sink_of(void *avcl) {
    if (avcl) {
        const AVClass *cls = *(const AVClass **)avcl;
        if (cls == avformat_get_class()) {
            ig_vlog *s = ((AVFormatContext *)avcl)->opaque;
            if (s) return s;
        } else if (cls == avcodec_get_class()) {
            ig_vlog *s = ((AVCodecContext *)avcl)->opaque;
            if (s) return s;
        }
    }
    return tls_sink;
}

static void callback(void *avcl, int level, const char *fmt, va_list vl) {
    if (level > AV_LOG_WARNING) return; /* info, verbose, debug: never wanted */
    ig_vlog *s = sink_of(avcl);
    if (!s) return;
    char line[512];
    int print_prefix = 0;
    av_log_format_line2(avcl, level, fmt, vl, line, sizeof line, &print_prefix);
    size_t len = strlen(line);
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
        line[--len] = '\0';
    if (!len) return;
    pthread_mutex_lock(&s->mu);
    unsigned n = s->n++;
    if (level <= AV_LOG_ERROR && !s->first_error[0]) {
        size_t keep = len < sizeof s->first_error ? len : sizeof s->first_error - 1;
        memcpy(s->first_error, line, keep);
        s->first_error[keep] = '\0';
    }
    pthread_mutex_unlock(&s->mu);
    if (s->ctx && n < LINES_PER_FILE)
        ig_debug(s->ctx, "ffmpeg: %s: %s%s", s->path ? s->path : "?", line,
                 n + 1 == LINES_PER_FILE ? " (further messages of this file are not shown)" : "");
}

static void install(void) {
    av_log_set_callback(callback);
}

void ig_video_log_setup(void) {
    pthread_once(&log_once, install);
}
