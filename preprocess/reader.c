/* reader.c - streaming record readers for .jsonl, .jsonl.zst / .zst and .txt inputs.
 *
 * Memory stays bounded whatever the input size: the file is read through a 1 MiB buffer (and, for
 * zstd, decompressed into another 1 MiB buffer with ZSTD_decompressStream), and a line is handed
 * out in place when it lies inside the current buffer. Only a line that straddles buffers is
 * copied into a growing line buffer, which is capped at the record limit (1 GiB) and released
 * after an unusually long line, so one huge line does not pin its memory for the rest of the run.
 *
 * Line numbers count every '\n' of the (decompressed) input, blank lines included, so that a
 * message "FILE:LINE" points at the line an editor shows. Offsets are in decompressed bytes.
 */
#include "reader_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define READ_BUF_SIZE ((size_t)1 << 20)
#define LINE_BUF_KEEP ((size_t)64 << 20) /* a line buffer above this is freed after its record */

struct ig_record_reader {
    ig_ctx *ctx; /* allocates the reader's memory (NULL: malloc) */
    char *path;  /* for messages */
    ig_input_kind kind;
    size_t max_record;

    /* raw source: a file descriptor or a memory buffer */
    int fd;     /* -1 for a memory source */
    int own_fd; /* close fd on free (not for stdin) */
    const uint8_t *mem;
    size_t mem_len;
    int raw_eof;             /* no more raw bytes */
    uint8_t *in;             /* raw read buffer (file sources) */
    size_t in_len;           /* valid bytes in the current raw chunk */
    size_t in_pos;           /* consumed bytes of the current raw chunk (zstd) */
    const uint8_t *in_chunk; /* the current raw chunk: in, or mem */
    uint64_t bytes_in;       /* raw bytes fully consumed before the current chunk */
    uint64_t expect_size;    /* the file's size when the run started (UINT64_MAX: unknown) */

    /* zstd */
    ZSTD_DCtx *zd;
    uint8_t *out;
    size_t last_ret;  /* last ZSTD_decompressStream result: 0 when a frame has just ended */
    int out_was_full; /* last call filled the output: the decoder may hold more */

    /* decompressed window: the bytes not yet split into lines */
    const uint8_t *win;
    size_t win_len, win_pos;
    uint64_t win_off; /* decompressed offset of win[0] */
    int eof;          /* decompressed stream ended */

    uint64_t line; /* lines completed */
    char *lbuf;    /* line buffer for lines that straddle windows */
    size_t llen, lcap;
    int txt_done; /* IG_INPUT_TXT: the single record was returned */

    /* a byte range of a file (ig_record_reader_open_range): the lines that start in it */
    uint64_t range_end;   /* no line starting at or past this offset is read (UINT64_MAX) */
    int skip_partial;     /* the range starts inside a line: skip to the first '\n' first */
    uint64_t range_first; /* where the range's first line starts (0: at the file's start) */
    int64_t lines_before; /* the file's lines before range_first; -1: not counted yet */
};

static ig_status reader_alloc(ig_record_reader **out, ig_ctx *ctx, const char *name,
                              ig_input_kind kind, ig_err *err) {
    ig_record_reader *r = ig_calloc(ctx, 1, sizeof *r);
    if (!r) return ig_err_set(err, IG_ERR_NOMEM, "out of memory opening %s", name);
    r->ctx = ctx;
    r->fd = -1;
    r->expect_size = UINT64_MAX;
    r->kind = kind;
    r->max_record = IG_RECORD_MAX_DEFAULT;
    r->last_ret = 1; /* nothing decoded yet: an empty .zst is truncated, not empty */
    r->range_end = UINT64_MAX;
    r->lines_before = -1;
    r->path = ig_strdup(ctx, name);
    if (!r->path) goto nomem;
    if (kind == IG_INPUT_JSONL_ZST) {
        r->zd = ZSTD_createDCtx();
        r->out = ig_alloc(ctx, READ_BUF_SIZE);
        if (!r->zd || !r->out) goto nomem;
    }
    *out = r;
    return IG_OK;
nomem:
    ig_record_reader_close(r);
    return ig_err_set(err, IG_ERR_NOMEM, "out of memory opening %s", name);
}

ig_status ig_record_reader_open(ig_record_reader **out, ig_ctx *ctx, const char *path,
                                ig_input_kind kind, ig_err *err) {
    *out = NULL;
    if (!path || (unsigned)kind > IG_INPUT_TXT_LINES)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "ig_record_reader_open: bad path or kind");
    ig_record_reader *r = NULL;
    ig_status st = reader_alloc(&r, ctx, path, kind, err);
    if (st != IG_OK) return st;
    r->in = ig_alloc(ctx, READ_BUF_SIZE);
    if (!r->in) {
        ig_record_reader_close(r);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory opening %s", path);
    }
    if (strcmp(path, "-") == 0) {
        r->fd = STDIN_FILENO;
        ig_free(ctx, r->path);
        r->path = ig_strdup(ctx, "<stdin>");
        if (!r->path) {
            ig_record_reader_close(r);
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory opening stdin");
        }
    } else {
        r->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (r->fd < 0) {
            int e = errno;
            ig_record_reader_close(r);
            return ig_err_errno(err, e, "cannot open input %s", path);
        }
        r->own_fd = 1;
        /* a regular file's size is known now: a file that shrinks or grows while it is read
         * (rewritten, or still being written) is an error at its end, not a quiet part of it */
        struct stat sb;
        if (fstat(r->fd, &sb) == 0 && S_ISREG(sb.st_mode)) r->expect_size = (uint64_t)sb.st_size;
    }
    *out = r;
    return IG_OK;
}

ig_status ig_record_reader_open_range(ig_record_reader **out, ig_ctx *ctx, const char *path,
                                      ig_input_kind kind, uint64_t begin, uint64_t end,
                                      ig_err *err) {
    *out = NULL;
    if (kind != IG_INPUT_JSONL && kind != IG_INPUT_TXT_LINES)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: only .jsonl and line-mode .txt files can be read by byte ranges",
                          path);
    if (!strcmp(path, "-") || begin > end)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: no byte range %llu..%llu to read", path,
                          (unsigned long long)begin, (unsigned long long)end);
    ig_record_reader *r = NULL;
    ig_status st = ig_record_reader_open(&r, ctx, path, kind, err);
    if (st != IG_OK) return st;
    r->range_end = end;
    if (begin > 0) {
        /* the range's first line starts at begin when a line ends just before it */
        unsigned char before = 0;
        ssize_t n;
        while ((n = pread(r->fd, &before, 1, (off_t)(begin - 1))) < 0 && errno == EINTR) {
        }
        if (n < 0)
            st = ig_err_errno(err, errno, "%s: read failed at byte offset %llu", path,
                              (unsigned long long)(begin - 1));
        if (st == IG_OK && lseek(r->fd, (off_t)begin, SEEK_SET) < 0)
            st = ig_err_errno(err, errno, "%s: cannot seek to byte offset %llu", path,
                              (unsigned long long)begin);
        if (st != IG_OK) {
            ig_record_reader_close(r);
            return st;
        }
        /* n == 0: the file is shorter than the range's start; the first read says so */
        r->skip_partial = n == 1 && before != '\n';
        r->bytes_in = r->win_off = r->range_first = begin;
    }
    *out = r;
    return IG_OK;
}

uint64_t ig_record_reader_lines(const ig_record_reader *r) {
    return r->line;
}

void ig_record_reader_expect_size(ig_record_reader *r, uint64_t size) {
    r->expect_size = size;
}

ig_status ig_record_reader_open_mem(ig_record_reader **out, ig_ctx *ctx, const char *name,
                                    const void *data, size_t len, ig_input_kind kind, ig_err *err) {
    *out = NULL;
    if (!name || (!data && len) || (unsigned)kind > IG_INPUT_TXT_LINES)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "ig_record_reader_open_mem: bad arguments");
    ig_record_reader *r = NULL;
    ig_status st = reader_alloc(&r, ctx, name, kind, err);
    if (st != IG_OK) return st;
    r->mem = data;
    r->mem_len = len;
    *out = r;
    return IG_OK;
}

void ig_record_reader_set_max_record(ig_record_reader *r, size_t max_bytes) {
    r->max_record = max_bytes;
}

uint64_t ig_record_reader_bytes_in(const ig_record_reader *r) {
    return r->bytes_in + r->in_pos;
}

void ig_record_reader_close(ig_record_reader *r) {
    if (!r) return;
    if (r->own_fd && r->fd >= 0) close(r->fd);
    ZSTD_freeDCtx(r->zd);
    ig_free(r->ctx, r->out);
    ig_free(r->ctx, r->in);
    ig_free(r->ctx, r->lbuf);
    ig_free(r->ctx, r->path);
    ig_free(r->ctx, r);
}

/* Makes the next raw chunk current: in_chunk[0..in_len). Sets raw_eof when there is none. */
static ig_status raw_next(ig_record_reader *r, ig_err *err) {
    r->bytes_in += r->in_len;
    r->in_len = r->in_pos = 0;
    if (r->fd < 0) { /* memory: the whole buffer is one chunk */
        if (r->mem && r->bytes_in == 0 && r->mem_len > 0) {
            r->in_chunk = r->mem;
            r->in_len = r->mem_len;
        } else {
            r->raw_eof = 1;
        }
        return IG_OK;
    }
    /* reads end at multiples of the buffer size in the file, wherever reading started: a range
     * reader meets the same chunks (and so reports the same offsets) as one from the start */
    size_t want = READ_BUF_SIZE - (size_t)(r->bytes_in % READ_BUF_SIZE);
    for (;;) {
        ssize_t n = read(r->fd, r->in, want);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return ig_err_errno(err, errno, "%s: read failed at byte offset %llu", r->path,
                                (unsigned long long)r->bytes_in);
        uint64_t total = r->bytes_in + (uint64_t)n;
        if (r->expect_size != UINT64_MAX &&
            (total > r->expect_size || (n == 0 && total != r->expect_size)))
            return ig_err_set(err, IG_ERR_IO,
                              "%s: the file changed while it was read: it had %llu bytes when the "
                              "run started, but %s%llu were read (was it rewritten, or still being "
                              "written? rerun once it is complete)",
                              r->path, (unsigned long long)r->expect_size,
                              total > r->expect_size ? "at least " : "only ",
                              (unsigned long long)total);
        if (n == 0) r->raw_eof = 1;
        r->in_chunk = r->in;
        r->in_len = (size_t)n;
        return IG_OK;
    }
}

/* zstd reports damage when it decodes the block holding it, so the offset is where decoding
 * stopped; the range of compressed bytes it was reading and the decompressed bytes already
 * produced locate the damage more closely. */
static ig_status zstd_error(ig_record_reader *r, const char *why, ig_err *err) {
    unsigned long long at = r->bytes_in + r->in_pos, end = r->bytes_in + r->in_len;
    unsigned long long good = r->win_off + r->win_len;
    if (end > at)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: corrupt or truncated zstd data at compressed byte offset %llu "
                          "(in the bytes %llu..%llu being decoded; %llu bytes decompressed "
                          "intact before it): %s (check the file with `zstd -t`; re-download or "
                          "re-compress it)",
                          r->path, at, at, end, good, why);
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s: corrupt or truncated zstd data at compressed byte offset %llu (%llu "
                      "bytes decompressed intact before it): %s (check the file with `zstd -t`; "
                      "re-download or re-compress it)",
                      r->path, at, good, why);
}

/* Refills the decompressed window (win_pos == win_len on entry). Sets eof at the end. */
static ig_status fill_window(ig_record_reader *r, ig_err *err) {
    r->win_off += r->win_len;
    r->win = NULL;
    r->win_len = r->win_pos = 0;
    ig_status st;
    if (r->kind != IG_INPUT_JSONL_ZST) {
        r->in_pos = r->in_len; /* the previous chunk is consumed in full */
        if ((st = raw_next(r, err)) != IG_OK) return st;
        if (r->raw_eof) {
            r->eof = 1;
        } else {
            r->win = r->in_chunk;
            r->win_len = r->in_len;
            r->in_pos = r->in_len;
        }
        return IG_OK;
    }
    for (;;) {
        if (r->in_pos == r->in_len && !r->out_was_full) {
            if (!r->raw_eof && (st = raw_next(r, err)) != IG_OK) return st;
            if (r->raw_eof) {
                if (r->last_ret != 0)
                    return zstd_error(r, "the input ends inside a zstd frame", err);
                r->eof = 1;
                return IG_OK;
            }
        }
        ZSTD_inBuffer zin = {r->in_chunk, r->in_len, r->in_pos};
        /* about one zstd block per call, so that on damage in_pos is near the bad block */
        ZSTD_outBuffer zout = {r->out, ZSTD_DStreamOutSize(), 0};
        size_t ret = ZSTD_decompressStream(r->zd, &zout, &zin);
        if (ZSTD_isError(ret)) {
            r->in_pos = zin.pos;
            return zstd_error(r, ZSTD_getErrorName(ret), err);
        }
        /* A call that neither read nor wrote anything tells nothing new: after a frame ended
         * exactly at the end of a full output buffer, the extra call made to drain the decoder
         * returns the header size of a next frame, which must not make the input look cut off
         * inside a frame. */
        if (zin.pos != r->in_pos || zout.pos > 0) r->last_ret = ret;
        r->in_pos = zin.pos;
        /* a full output may leave data in the decoder, unless the frame is complete (0) */
        r->out_was_full = zout.pos == zout.size && ret != 0;
        if (zout.pos > 0) {
            r->win = r->out;
            r->win_len = zout.pos;
            return IG_OK;
        }
    }
}

/* The file's line number of the line being read, for a message. A range reader counts its lines
 * from the range's first line; the lines before it are counted here, once, only when a message
 * needs them (a pass over the file up to the range; when that read fails, the count so far). */
static unsigned long long message_line(ig_record_reader *r) {
    if (r->lines_before < 0) {
        uint64_t count = 0, at = 0;
        char buf[16384];
        while (r->fd >= 0 && at < r->range_first) {
            size_t want =
                r->range_first - at < sizeof buf ? (size_t)(r->range_first - at) : sizeof buf;
            ssize_t n = pread(r->fd, buf, want, (off_t)at);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            for (const char *q = buf, *e = buf + n; (q = memchr(q, '\n', (size_t)(e - q))); q++)
                count++;
            at += (uint64_t)n;
        }
        r->lines_before = (int64_t)count;
    }
    return (unsigned long long)((uint64_t)r->lines_before + r->line + 1);
}

static ig_status too_long(ig_record_reader *r, ig_err *err) {
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s:%llu: record longer than %zu bytes (is this really %s? a record must "
                      "fit in %zu bytes)",
                      r->path, message_line(r), r->max_record,
                      r->kind == IG_INPUT_TXT ? "a text document" : "one JSON document per line",
                      r->max_record);
}

/* Appends bytes to the line buffer, growing it geometrically up to the record limit. */
static ig_status lbuf_append(ig_record_reader *r, const uint8_t *p, size_t n, ig_err *err) {
    if (n > r->max_record - r->llen) return too_long(r, err);
    if (r->llen + n > r->lcap) {
        size_t cap = r->lcap ? r->lcap : 4096;
        while (cap < r->llen + n) cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
        char *nb = ig_realloc(r->ctx, r->lbuf, cap);
        if (!nb)
            return ig_err_set(err, IG_ERR_NOMEM, "%s:%llu: out of memory for a %zu-byte line",
                              r->path, message_line(r), r->llen + n);
        r->lbuf = nb;
        r->lcap = cap;
    }
    memcpy(r->lbuf + r->llen, p, n);
    r->llen += n;
    return IG_OK;
}

/* A range that starts inside a line: skips to just past the end of that line (which belongs to
 * the range before), without buffering it or counting it. */
static ig_status skip_partial_line(ig_record_reader *r, ig_err *err) {
    ig_status st;
    for (;;) {
        if (r->win_pos == r->win_len) {
            if (r->eof) break;
            if ((st = fill_window(r, err)) != IG_OK) return st;
            continue;
        }
        const uint8_t *p = r->win + r->win_pos;
        const uint8_t *nl = memchr(p, '\n', r->win_len - r->win_pos);
        if (nl) {
            r->win_pos += (size_t)(nl - p) + 1;
            break;
        }
        r->win_pos = r->win_len;
    }
    r->skip_partial = 0;
    r->range_first = r->win_off + r->win_pos;
    return IG_OK;
}

/* The next physical line, without its '\n'. *has = 0 at the end of the input (or of the range:
 * no line starting at or past range_end). */
static ig_status next_line(ig_record_reader *r, ig_record *rec, int *has, ig_err *err) {
    ig_status st;
    if (r->skip_partial && (st = skip_partial_line(r, err)) != IG_OK) return st;
    if (r->range_end != UINT64_MAX) {
        while (r->win_pos == r->win_len && !r->eof) /* where the next line starts */
            if ((st = fill_window(r, err)) != IG_OK) return st;
        if (r->win_off + r->win_pos >= r->range_end) {
            *has = 0;
            return IG_OK;
        }
    }
    r->llen = 0;
    uint64_t start = 0;
    int started = 0;
    for (;;) {
        if (r->win_pos == r->win_len) {
            if (r->eof) break;
            if ((st = fill_window(r, err)) != IG_OK) return st;
            continue;
        }
        const uint8_t *p = r->win + r->win_pos;
        size_t avail = r->win_len - r->win_pos;
        if (!started) {
            start = r->win_off + r->win_pos;
            started = 1;
        }
        const uint8_t *nl = memchr(p, '\n', avail);
        if (!nl) {
            if ((st = lbuf_append(r, p, avail, err)) != IG_OK) return st;
            r->win_pos = r->win_len;
            continue;
        }
        size_t seg = (size_t)(nl - p);
        if (r->llen == 0) { /* the whole line is inside the window: hand it out in place */
            if (seg > r->max_record) return too_long(r, err);
            rec->data = (const char *)p;
            rec->len = seg;
        } else {
            if ((st = lbuf_append(r, p, seg, err)) != IG_OK) return st;
            rec->data = r->lbuf;
            rec->len = r->llen;
        }
        r->win_pos += seg + 1;
        r->line++;
        rec->line = r->line;
        rec->byte_offset = start;
        *has = 1;
        return IG_OK;
    }
    if (!started) { /* end of input after a '\n' (or an empty input) */
        *has = 0;
        return IG_OK;
    }
    /* a last line without '\n' */
    r->line++;
    rec->data = r->lbuf ? r->lbuf : "";
    rec->len = r->llen;
    rec->line = r->line;
    rec->byte_offset = start;
    *has = 1;
    return IG_OK;
}

static int json_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

/* IG_INPUT_TXT: the whole input is one record. */
static ig_status next_txt(ig_record_reader *r, ig_record *rec, int *has, ig_err *err) {
    ig_status st;
    if (r->txt_done) {
        *has = 0;
        return IG_OK;
    }
    r->llen = 0;
    for (;;) {
        if (r->win_pos == r->win_len) {
            if (r->eof) break;
            if ((st = fill_window(r, err)) != IG_OK) return st;
            continue;
        }
        if ((st = lbuf_append(r, r->win + r->win_pos, r->win_len - r->win_pos, err)) != IG_OK)
            return st;
        r->win_pos = r->win_len;
    }
    r->txt_done = 1;
    r->line = 1;
    rec->data = r->lbuf ? r->lbuf : "";
    rec->len = r->llen;
    rec->line = 1;
    rec->byte_offset = 0;
    *has = 1;
    return IG_OK;
}

/* A UTF-8 byte order mark at the start of the input marks the encoding; it is not text (nor JSON):
 * dropped from the first record of every kind of input, so that a .txt and a .jsonl with a BOM
 * give the same tokens as without one. Offsets stay those of the file. */
static void strip_bom(ig_record *rec) {
    if (rec->byte_offset == 0 && rec->len >= 3 && memcmp(rec->data, "\xEF\xBB\xBF", 3) == 0) {
        rec->data += 3;
        rec->len -= 3;
        rec->byte_offset = 3;
    }
}

ig_status ig_record_reader_next(ig_record_reader *r, ig_record *rec, int *has, ig_err *err) {
    *has = 0;
    if (r->lcap > LINE_BUF_KEEP) { /* do not pin a huge buffer */
        ig_free(r->ctx, r->lbuf);
        r->lbuf = NULL;
        r->lcap = r->llen = 0;
    }
    if (r->kind == IG_INPUT_TXT) {
        ig_status st = next_txt(r, rec, has, err);
        if (st == IG_OK && *has) strip_bom(rec);
        return st;
    }
    for (;;) {
        ig_status st = next_line(r, rec, has, err);
        if (st != IG_OK || !*has) return st;
        strip_bom(rec);
        if (r->kind == IG_INPUT_TXT_LINES) {
            if (rec->len > 0 && rec->data[rec->len - 1] == '\r') rec->len--; /* CRLF */
            if (rec->len > 0) return IG_OK;
            continue;
        }
        if (!json_blank(rec->data, rec->len)) return IG_OK;
    }
}
