/* tb_events.c - the TensorBoard event-file writer (see tb_events.h): TFRecord framing with
 * masked CRC32C, and tensorflow.Event messages encoded by hand.
 *
 * Why by hand: the two messages need a dozen lines of varints and fixed-width fields, while
 * protobuf-c would need TensorFlow's .proto files and generated code in the tree. CRC32C comes
 * from ISA-L (libisal-dev: Intel's maintained library, hardware-accelerated; Debian 12 has no
 * package of Google's crc32c). Records are built in one memory buffer and written with write(2),
 * so that every write's result is seen (stdio would defer errors to an fclose nobody checks).
 */
#include "tb_events.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <isa-l/crc.h>
#include <utf8proc.h>

#define FLUSH_AT       (64u << 10) /* pending bytes that trigger a write */
#define FILE_VERSION   "brain.Event:2"
#define MAX_NAME_TRIES 100

struct ig_tb_writer {
    ig_ctx *ctx;
    char *path;
    int fd;
    uint8_t *buf; /* pending records */
    size_t len, cap;
    int write_errno; /* errno of the first failed write (sticky), 0 while none */
};

/* ---- memory ---------------------------------------------------------------------------------- */

static void *tb_alloc(ig_ctx *ctx, size_t n) {
    return ctx ? ig_alloc(ctx, n ? n : 1) : malloc(n ? n : 1);
}

static void *tb_realloc(ig_ctx *ctx, void *p, size_t n) {
    return ctx ? ig_realloc(ctx, p, n) : realloc(p, n);
}

static void tb_free(ig_ctx *ctx, void *p) {
    if (ctx)
        ig_free(ctx, p);
    else
        free(p);
}

/* ---- CRC and encoding ------------------------------------------------------------------------ */

uint32_t ig_crc32c(const void *data, size_t len) {
    /* crc32_iscsi is the raw reflected CRC (no inversion) over an int length: start from ~0,
     * feed pieces under 1 GiB, invert at the end */
    const unsigned char *p = data;
    unsigned int crc = 0xFFFFFFFFu;
    while (len > 0) {
        size_t n = len < (1u << 30) ? len : (1u << 30);
        crc = crc32_iscsi((unsigned char *)p, (int)n, crc);
        p += n;
        len -= n;
    }
    return ~crc;
}

uint32_t ig_tb_mask_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint64_t double_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Protobuf tags: (field << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32). */
enum {
    EVENT_WALL_TIME = (1 << 3) | 1,
    EVENT_STEP = (2 << 3) | 0,
    EVENT_FILE_VERSION = (3 << 3) | 2,
    EVENT_SUMMARY = (5 << 3) | 2,
    SUMMARY_VALUE = (1 << 3) | 2,
    VALUE_TAG = (1 << 3) | 2,
    VALUE_SIMPLE_VALUE = (2 << 3) | 5,
};

/* One event: wall_time and step, then file_version (when version) or a summary of one scalar
 * value (tag, value). Returns its encoded size, and encodes it at out when out is not NULL. */
static size_t encode_event(uint8_t *out, double wall_time, int64_t step, const char *version,
                           const char *tag, float value) {
    uint64_t wall = double_bits(wall_time);
    uint64_t ustep = (uint64_t)step; /* int64 varints are two's complement, 10 bytes if < 0 */
    size_t head = (wall ? 9 : 0) + (ustep ? 1 + varint_len(ustep) : 0);
    size_t body, tag_len = 0, value_len = 0, summary_len = 0;
    if (version) {
        body = 1 + varint_len(strlen(version)) + strlen(version);
    } else {
        tag_len = strlen(tag);
        value_len = 1 + varint_len(tag_len) + tag_len + 5;
        summary_len = 1 + varint_len(value_len) + value_len;
        body = 1 + varint_len(summary_len) + summary_len;
    }
    if (!out) return head + body;

    uint8_t *p = out;
    /* proto3 fields without presence are not written at their default (bitwise zero) */
    if (wall) {
        *p++ = EVENT_WALL_TIME;
        p = put_le(p, wall, 8);
    }
    if (ustep) {
        *p++ = EVENT_STEP;
        p = put_varint(p, ustep);
    }
    if (version) {
        *p++ = EVENT_FILE_VERSION;
        p = put_varint(p, strlen(version));
        memcpy(p, version, strlen(version));
        p += strlen(version);
    } else {
        *p++ = EVENT_SUMMARY;
        p = put_varint(p, summary_len);
        *p++ = SUMMARY_VALUE;
        p = put_varint(p, value_len);
        *p++ = VALUE_TAG;
        p = put_varint(p, tag_len);
        memcpy(p, tag, tag_len);
        p += tag_len;
        /* a oneof member has presence: written even when 0 */
        *p++ = VALUE_SIMPLE_VALUE;
        p = put_le(p, float_bits(value), 4);
    }
    return (size_t)(p - out);
}

/* ---- the file -------------------------------------------------------------------------------- */

/* Writes the pending records. */
static ig_status write_pending(ig_tb_writer *w, ig_err *err) {
    if (w->write_errno)
        return ig_err_errno(err, w->write_errno, "cannot write %s (an earlier write failed)",
                            w->path);
    size_t off = 0;
    while (off < w->len) {
        ssize_t k = write(w->fd, w->buf + off, w->len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            w->write_errno = k < 0 ? errno : EIO;
            return ig_err_errno(err, w->write_errno, "cannot write %s", w->path);
        }
        off += (size_t)k;
    }
    w->len = 0;
    return IG_OK;
}

/* Appends the record of one event to the pending buffer. */
static ig_status append_event(ig_tb_writer *w, double wall_time, int64_t step, const char *version,
                              const char *tag, float value, ig_err *err) {
    if (w->write_errno)
        return ig_err_errno(err, w->write_errno, "cannot write %s (an earlier write failed)",
                            w->path);
    size_t n = encode_event(NULL, wall_time, step, version, tag, value);
    size_t need = 12 + n + 4;
    if (need > SIZE_MAX - w->len)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: event too large", w->path);
    if (w->len + need > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + need) cap *= 2;
        uint8_t *b = tb_realloc(w->ctx, w->buf, cap);
        if (!b) return ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", w->path);
        w->buf = b;
        w->cap = cap;
    }
    uint8_t *rec = w->buf + w->len;
    put_le(rec, n, 8);
    put_le(rec + 8, ig_tb_mask_crc(ig_crc32c(rec, 8)), 4);
    encode_event(rec + 12, wall_time, step, version, tag, value);
    put_le(rec + 12 + n, ig_tb_mask_crc(ig_crc32c(rec + 12, n)), 4);
    w->len += need;
    return w->len >= FLUSH_AT ? write_pending(w, err) : IG_OK;
}

ig_tb_writer_opts ig_tb_writer_opts_default(void) {
    return (ig_tb_writer_opts){.start_time = 0, .hostname = NULL};
}

double ig_tb_wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *ig_tb_writer_path(const ig_tb_writer *w) {
    return w->path;
}

static void free_writer(ig_tb_writer *w) {
    tb_free(w->ctx, w->buf);
    tb_free(w->ctx, w->path);
    tb_free(w->ctx, w);
}

/* Creates the event file: the first free name of base, base.1, base.2, ... */
static ig_status create_file(ig_tb_writer *w, const char *dir, double start, const char *host,
                             ig_err *err) {
    char hostbuf[HOST_NAME_MAX + 1];
    if (!host) {
        if (gethostname(hostbuf, sizeof hostbuf) != 0)
            snprintf(hostbuf, sizeof hostbuf, "localhost");
        hostbuf[sizeof hostbuf - 1] = '\0';
        host = hostbuf;
    }
    size_t cap = strlen(dir) + strlen(host) + 64;
    w->path = tb_alloc(w->ctx, cap);
    if (!w->path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    long long secs = (long long)floor(start);
    for (int k = 0; k < MAX_NAME_TRIES; k++) {
        int len = snprintf(w->path, cap, "%s/events.out.tfevents.%lld.%s", dir, secs, host);
        if (k) snprintf(w->path + len, cap - (size_t)len, ".%d", k);
        /* a '/' in a host name would put the file in another directory */
        for (char *s = w->path + strlen(dir) + 1; *s; s++)
            if (*s == '/') *s = '_';
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (w->fd >= 0) return IG_OK;
        if (errno != EEXIST) return ig_err_errno(err, errno, "cannot create %s", w->path);
    }
    return ig_err_set(err, IG_ERR_EXISTS, "%s: %d event files of this second and host exist",
                      w->path, MAX_NAME_TRIES);
}

ig_status ig_tb_writer_create(ig_tb_writer **out, ig_ctx *ctx, const char *dir,
                              const ig_tb_writer_opts *opts, ig_err *err) {
    *out = NULL;
    ig_tb_writer_opts o = opts ? *opts : ig_tb_writer_opts_default();
    double start = o.start_time > 0 ? o.start_time : ig_tb_wall_time();
    if (!dir || !dir[0])
        return ig_err_set(err, IG_ERR_INVALID_ARG, "the event file directory must be named");
    ig_status st = ig_mkdir_p(dir, err);
    if (st != IG_OK) return st;
    ig_tb_writer *w = tb_alloc(ctx, sizeof *w);
    if (!w) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->fd = -1;
    st = create_file(w, dir, start, o.hostname, err);
    if (st == IG_OK) st = append_event(w, start, 0, FILE_VERSION, NULL, 0, err);
    if (st == IG_OK) st = write_pending(w, err);
    if (st != IG_OK) {
        if (w->fd >= 0) {
            close(w->fd);
            unlink(w->path); /* ours: created with O_EXCL just now */
        }
        free_writer(w);
        return st;
    }
    *out = w;
    return IG_OK;
}

ig_status ig_tb_writer_add_scalar(ig_tb_writer *w, const char *tag, int64_t step, float value,
                                  double wall_time, ig_err *err) {
    int ok = tag && tag[0];
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)tag;
    utf8proc_ssize_t n = ok ? (utf8proc_ssize_t)strlen(tag) : 0;
    for (utf8proc_ssize_t i = 0; ok && i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, n - i, &cp);
        ok = k > 0;
        i += k > 0 ? k : 0;
    }
    if (!ok)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: a scalar's tag must be non-empty UTF-8",
                          w->path);
    return append_event(w, wall_time, step, NULL, tag, value, err);
}

ig_status ig_tb_writer_flush(ig_tb_writer *w, ig_err *err) {
    return write_pending(w, err);
}

ig_status ig_tb_writer_close(ig_tb_writer *w, ig_err *err) {
    if (!w) return IG_OK;
    ig_status st = write_pending(w, err);
    if (st == IG_OK && fsync(w->fd) != 0) st = ig_err_errno(err, errno, "cannot fsync %s", w->path);
    if (close(w->fd) != 0 && st == IG_OK) st = ig_err_errno(err, errno, "cannot close %s", w->path);
    free_writer(w);
    return st;
}
