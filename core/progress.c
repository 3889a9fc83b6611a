/* progress.c - a progress reporter for long jobs (preprocessing, hashing, index building).
 *
 * Two outputs, chosen once at creation: on a terminal one line is redrawn in place ('\r') at most
 * ten times a second; anywhere else (a log file, a pipe, a batch system) a plain line is written
 * at most every `interval` seconds, so that logs stay readable and small, and a summary line is
 * written at the end.
 *
 * ig_progress_add is called from hot loops, possibly millions of times and from many threads, so
 * it only does an atomic add, reads a coarse clock and compares it with the next deadline; the
 * mutex is taken (with trylock, never waiting) only when a line is due. */
#include "core/core.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TTY_PERIOD_NS 100000000ULL /* 10 redraws per second at most */
#define EXTRA_MAX     128

struct ig_progress {
    ig_progress_opts opts; /* label and unit point into the copies below */
    char label[64];
    char unit[32];
    int tty;
    double start;       /* ig_now() at creation */
    uint64_t period_ns; /* minimum time between two lines */
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t due_ns; /* coarse-clock time at which the next line may be printed */
    pthread_mutex_t mu;          /* guards printing and extra */
    char extra[EXTRA_MAX];
};

/* A cheap monotonic clock in nanoseconds: the coarse clock is read from memory without a
 * system call; its few-millisecond resolution is plenty to pace a display. */
static uint64_t coarse_ns(void) {
    struct timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

ig_progress_opts ig_progress_opts_default(void) {
    return (ig_progress_opts){.label = "progress",
                              .unit = "items",
                              .total = 0,
                              .bytes = 0,
                              .out = NULL,
                              .force_tty = -1,
                              .interval = 5.0,
                              .disabled = 0};
}

ig_status ig_progress_create(ig_progress **out, const ig_progress_opts *opts, ig_err *err) {
    *out = NULL;
    ig_progress_opts o = opts ? *opts : ig_progress_opts_default();
    if (isnan(o.interval) || isinf(o.interval))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "progress interval must be a finite number");
    ig_progress *p = calloc(1, sizeof *p);
    if (!p) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a progress reporter");
    if (!o.out) o.out = stderr;
    if (o.interval <= 0) o.interval = 5.0; /* unset (0) in a designated initializer */
    if (o.interval > 1e6) o.interval = 1e6;
    snprintf(p->label, sizeof p->label, "%s", o.label ? o.label : "progress");
    snprintf(p->unit, sizeof p->unit, "%s", o.unit ? o.unit : (o.bytes ? "bytes" : "items"));
    o.label = p->label;
    o.unit = p->unit;
    p->opts = o;
    p->tty = o.force_tty >= 0 ? o.force_tty != 0 : isatty(fileno(o.out));
    p->period_ns = p->tty ? TTY_PERIOD_NS : (uint64_t)(o.interval * 1e9);
    p->start = ig_now();
    atomic_init(&p->count, 0);
    /* a TTY shows the first line at once; a log waits one interval before its first line */
    atomic_init(&p->due_ns, coarse_ns() + (p->tty ? 0 : p->period_ns));
    pthread_mutex_init(&p->mu, NULL);
    *out = p;
    return IG_OK;
}

/* "1:02:03" or "2:03". */
static void format_duration(double s, char *buf, size_t cap) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, cap, "?");
        return;
    }
    unsigned long t = (unsigned long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%lu:%02lu", t / 60, t % 60);
}

/* A rate with an SI suffix: "950", "12.3k", "4.56M". */
static void format_rate(double r, char *buf, size_t cap) {
    if (r >= 1e9)
        snprintf(buf, cap, "%.2fG", r / 1e9);
    else if (r >= 1e6)
        snprintf(buf, cap, "%.2fM", r / 1e6);
    else if (r >= 1e4)
        snprintf(buf, cap, "%.1fk", r / 1e3);
    else
        snprintf(buf, cap, "%.0f", r);
}

/* Formats the status text (without '\r' or newline). Called with p->mu held. */
static void format_line(ig_progress *p, uint64_t count, double now, int final, char *buf,
                        size_t cap) {
    double elapsed = now - p->start;
    if (elapsed < 1e-9) elapsed = 1e-9;
    double rate = (double)count / elapsed;
    size_t n = 0;
#define APPEND(...)                                                                                \
    do {                                                                                           \
        if (n < cap) {                                                                             \
            int w_ = snprintf(buf + n, cap - n, __VA_ARGS__);                                      \
            if (w_ > 0) n += (size_t)w_;                                                           \
        }                                                                                          \
    } while (0)
    APPEND("%s: ", p->label);
    if (final) APPEND("done, ");
    if (p->opts.bytes)
        APPEND("%.1f MB", (double)count / 1e6);
    else
        APPEND("%llu %s", (unsigned long long)count, p->unit);
    if (p->opts.total) {
        double pct = 100.0 * (double)count / (double)p->opts.total;
        if (p->opts.bytes)
            APPEND(" of %.1f MB (%.1f%%)", (double)p->opts.total / 1e6, pct);
        else
            APPEND(" of %llu (%.1f%%)", (unsigned long long)p->opts.total, pct);
    }
    char t[32];
    if (final) {
        format_duration(elapsed, t, sizeof t);
        APPEND(" in %s", t);
    }
    if (p->opts.bytes) {
        APPEND(", %.1f MB/s", rate / 1e6);
    } else {
        format_rate(rate, t, sizeof t);
        APPEND(", %s %s/s", t, p->unit);
    }
    if (!final && p->opts.total && count < p->opts.total && count > 0) {
        format_duration((double)(p->opts.total - count) / rate, t, sizeof t);
        APPEND(", ETA %s", t);
    }
    if (p->extra[0]) APPEND(", %s", p->extra);
#undef APPEND
}

/* Writes one line. Called with p->mu held. */
static void emit(ig_progress *p, int final) {
    char line[512];
    format_line(p, atomic_load(&p->count), ig_now(), final, line, sizeof line);
    if (p->tty) {
        /* "\x1b[K" erases what is left of a longer previous line */
        fprintf(p->opts.out, "\r%s\x1b[K%s", line, final ? "\n" : "");
    } else {
        fprintf(p->opts.out, "%s\n", line);
    }
    fflush(p->opts.out);
}

void ig_progress_add(ig_progress *p, uint64_t n) {
    if (!p) return;
    atomic_fetch_add_explicit(&p->count, n, memory_order_relaxed);
    if (p->opts.disabled) return;
    uint64_t now = coarse_ns();
    if (now < atomic_load_explicit(&p->due_ns, memory_order_relaxed)) return;
    if (pthread_mutex_trylock(&p->mu) != 0) return; /* another thread is printing */
    if (now >= atomic_load_explicit(&p->due_ns, memory_order_relaxed)) {
        atomic_store_explicit(&p->due_ns, now + p->period_ns, memory_order_relaxed);
        emit(p, 0);
    }
    pthread_mutex_unlock(&p->mu);
}

void ig_progress_set_extra(ig_progress *p, const char *text) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    snprintf(p->extra, sizeof p->extra, "%s", text ? text : "");
    pthread_mutex_unlock(&p->mu);
}

void ig_progress_finish(ig_progress *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    if (!p->opts.disabled) emit(p, 1);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
