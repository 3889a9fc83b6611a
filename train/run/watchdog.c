/* watchdog.c - no rank waits forever for another. A rank that dies is seen by the launcher, which
 * ends the job (mpirun names the rank and its signal); a rank that hangs - stopped, stuck in I/O,
 * deadlocked, its node gone quiet - leaves the others blocked in a collective, which MPI never
 * times out. So each rank runs a watchdog thread: while a step is under way, a step that makes no
 * progress (no collective started, no micro-batch done) for parallel.timeout seconds ends this
 * process with exit status 3 and a message, and the launcher then ends the others.
 *
 * To name the culprit, every watchdog writes a heartbeat each second into
 * RUN_DIR/.heartbeat/rank-NNNNN (its progress counter and step, when it last made progress, when
 * it wrote): the rank that times out reads them all and names the ranks whose heartbeat stopped
 * (stopped or dead processes, unreachable nodes) or, failing that, the ranks furthest behind (a
 * hang in computation or I/O). Run directories are shared between nodes in multi-node training
 * (checkpoints need that); where one is not, a watchdog sees its own node's ranks only and says
 * so.
 *
 * A rank that has made no progress itself only ends the job when no other rank has either: while
 * another rank's heartbeat is fresh and shows progress within the timeout, or says it is busy
 * alone (writing its checkpoint files), the waiting ranks keep waiting. So the watchdog can stay
 * armed through everything between two steps (the checkpoint, the stop check) however long a
 * checkpoint takes to write.
 */
#include "watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct ig_watchdog {
    ig_ctx *ctx;
    ig_pulse *pulse;
    char dir[4200];
    int rank, world;
    double timeout;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int quit;
    int armed;         /* from a step's start to the next step's */
    int64_t step;      /* the step under way (or just done) */
    uint64_t seen;     /* the counter at the last change */
    double seen_at;    /* wall time of the last change */
    int busy_on;       /* ig_pulse_busy(1) is in force */
    double busy_since; /* since when */
    int busy;          /* and counts as progress (for at most 4 timeouts) */
};

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void write_heartbeat(ig_watchdog *w, double now) {
    char path[4400], tmp[4500];
    snprintf(path, sizeof path, "%s/rank-%05d", w->dir, w->rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    fprintf(f, "%d %ld %s %lld %llu %.3f %.3f %d\n", w->rank, (long)getpid(), host,
            (long long)w->step, (unsigned long long)w->seen, w->seen_at, now, w->busy);
    if (fclose(f) == 0) rename(tmp, path);
}

/* One rank's heartbeat file; 0 when it cannot be read. */
typedef struct heartbeat {
    int rank, busy;
    long pid;
    char host[256];
    long long step;
    unsigned long long ticks;
    double at, wrote; /* its last progress; when it wrote this */
} heartbeat;

static int read_heartbeat(const ig_watchdog *w, int r, heartbeat *h) {
    char path[4400];
    snprintf(path, sizeof path, "%s/rank-%05d", w->dir, r);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int ok = fscanf(f, "%d %ld %255s %lld %llu %lf %lf %d", &h->rank, &h->pid, h->host, &h->step,
                    &h->ticks, &h->at, &h->wrote, &h->busy) == 8;
    fclose(f);
    return ok;
}

/* Whether a heartbeat was written recently (its watchdog thread runs: the process is not stopped
 * or dead) and shows progress within the timeout, or work of its own under way. */
static int still_moving(const ig_watchdog *w, const heartbeat *h, double now) {
    return now - h->wrote <= 5.0 && (h->busy || now - h->at <= w->timeout);
}

/* Whether some other rank is still moving: then this one's wait is theirs, not a hang. */
static int others_moving(const ig_watchdog *w, double now) {
    for (int r = 0; r < w->world; r++) {
        heartbeat h;
        if (r != w->rank && read_heartbeat(w, r, &h) && still_moving(w, &h, now)) return 1;
    }
    return 0;
}

/* Reads every rank's heartbeat and writes the suspects into msg. */
static void suspects(ig_watchdog *w, double now, char *msg, size_t cap) {
    size_t n = 0;
    int found = 0, stale = 0;
    uint64_t least = UINT64_MAX;
    int least_rank = -1;
    int64_t least_step = 0;
    for (int r = 0; r < w->world; r++) {
        heartbeat h;
        if (!read_heartbeat(w, r, &h)) continue;
        found++;
        if (now - h.wrote > 5.0) { /* the watchdog thread itself stopped writing */
            stale++;
            n += (size_t)snprintf(msg + n, n < cap ? cap - n : 0,
                                  "%srank %d (pid %ld on %s) has been silent for %.0f s: it is "
                                  "stopped or dead, or its node is unreachable",
                                  stale > 1 ? "; " : "", h.rank, h.pid, h.host, now - h.wrote);
        }
        if (h.ticks < least) least = h.ticks, least_rank = h.rank, least_step = h.step;
    }
    if (!stale && least_rank >= 0)
        n += (size_t)snprintf(msg + n, n < cap ? cap - n : 0,
                              "rank %d is the furthest behind (step %lld): it hangs in "
                              "computation or I/O",
                              least_rank, (long long)least_step);
    if (found < w->world)
        snprintf(msg + n, n < cap ? cap - n : 0,
                 "%s(%d of %d ranks' heartbeats are not visible from here: the run directory is "
                 "not shared between the nodes)",
                 n ? " " : "", w->world - found, w->world);
}

static void *watchdog_main(void *arg) {
    ig_watchdog *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->quit) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&w->cv, &w->mu, &until);
        if (w->quit) break;
        double now = wall();
        uint64_t t = atomic_load_explicit(&w->pulse->ticks, memory_order_relaxed);
        if (t != w->seen) w->seen = t, w->seen_at = now;
        int busy = atomic_load_explicit(&w->pulse->busy, memory_order_relaxed);
        if (busy && !w->busy_on) w->busy_since = now;
        w->busy_on = busy;
        w->busy = busy && now - w->busy_since <= 4 * w->timeout;
        if (w->busy) w->seen_at = now;
        write_heartbeat(w, now);
        if (w->armed && now - w->seen_at > w->timeout && !others_moving(w, now)) {
            char msg[4096] = "";
            suspects(w, now, msg, sizeof msg);
            char when[64];
            if (w->step < 0)
                snprintf(when, sizeof when, "while starting (the data, the model, the checkpoint)");
            else
                snprintf(when, sizeof when, "at step %lld", (long long)w->step + 1);
            fprintf(stderr,
                    "ingot: error: rank %d: no progress for %.0f s %s (parallel.timeout %g): %s. "
                    "Stopping every rank; resume from the last checkpoint\n",
                    w->rank, now - w->seen_at, when, w->timeout,
                    msg[0] ? msg : "no other rank's heartbeat is readable");
            fflush(stderr);
            _exit(3); /* the launcher ends the other ranks */
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

ig_status ig_watchdog_start(ig_watchdog **out, ig_ctx *ctx, ig_pulse *pulse, const char *run_dir,
                            int rank, int world, double timeout, ig_err *err) {
    *out = NULL;
    ig_watchdog *w = ig_calloc(ctx, 1, sizeof *w);
    if (!w) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    w->ctx = ctx, w->pulse = pulse, w->rank = rank, w->world = world, w->timeout = timeout;
    w->seen_at = wall();
    snprintf(w->dir, sizeof w->dir, "%s/.heartbeat", run_dir);
    ig_status st = ig_mkdir_p(w->dir, err);
    if (st != IG_OK) {
        ig_free(ctx, w);
        return ig_err_prefix(err, st, "the watchdog's heartbeats");
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    /* the first heartbeat before training starts: a rank stopped within its first second is
     * still named (the thread writes the next ones) */
    write_heartbeat(w, w->seen_at);
    int rc = ig_thread_start(&w->thread, watchdog_main, w);
    if (rc != 0) {
        ig_watchdog_stop(w);
        return ig_err_errno(err, rc, "cannot start the watchdog thread");
    }
    w->started = 1;
    *out = w;
    return IG_OK;
}

void ig_watchdog_arm(ig_watchdog *w, int64_t step) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->armed = 1;
    w->step = step;
    w->seen = atomic_load_explicit(&w->pulse->ticks, memory_order_relaxed);
    w->seen_at = wall();
    pthread_mutex_unlock(&w->mu);
}

void ig_watchdog_disarm(ig_watchdog *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->armed = 0;
    pthread_mutex_unlock(&w->mu);
}

void ig_watchdog_stop(ig_watchdog *w) {
    if (!w) return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->quit = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    char path[4400];
    snprintf(path, sizeof path, "%s/rank-%05d", w->dir, w->rank);
    unlink(path);
    rmdir(w->dir); /* the last rank out removes the folder */
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    ig_free(w->ctx, w);
}
