/* run_marker.c - run markers: OUT.incomplete, written by a preprocess run before it commits any
 * file of its output and removed once the last manifest and shard list is in place (dataset.h).
 * The readers (shard open, shard lists) consult them; the writers create and remove them.
 *
 * A run holds its marker open with an open-file-description lock (F_OFD_SETLK) from before it
 * touches the output until it commits: the lock is what makes two runs started at the same
 * moment on one output exclusive (a marker that is only a file lets both see "no marker", both
 * write one and both go ahead), and the kernel drops it when the run dies, so a killed run's
 * marker is told from a live one's without trusting a pid. Markers without a lock (written by
 * ig_run_marker_create, by an older ingot, or on a file system without such locks) still count
 * as live while their pid is alive on this host.
 */
#include "dataset/dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *marker_path(const char *base) {
    size_t n = strlen(base) + sizeof ".incomplete";
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s.incomplete", base);
    return p;
}

static void this_host(char *buf, size_t cap) {
    if (gethostname(buf, cap) != 0) snprintf(buf, cap, "?");
    buf[cap - 1] = '\0';
}

/* The marker's text: this process's pid and host. NULL when out of memory; free() it. */
static char *marker_text(void) {
    char host[256];
    this_host(host, sizeof host);
    json_t *o = json_pack("{s:s,s:I,s:s}", "format", "ingot-run-marker", "pid",
                          (json_int_t)getpid(), "host", host);
    char *text = o ? json_dumps(o, JSON_SORT_KEYS) : NULL;
    json_decref(o);
    return text;
}

ig_status ig_run_marker_create(const char *base, ig_err *err) {
    char *path = marker_path(base);
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    char *text = marker_text();
    ig_status st = text ? ig_write_file_atomic(path, text, strlen(text), 1, err)
                        : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    free(text);
    free(path);
    return st;
}

/* A marker's text parsed as every JSON file of ingot is (core's json_file.c): duplicate keys
 * refused, so that a marker with two pids names none (NULL) rather than jansson's last one. */
static json_t *parse(const char *text) {
    return text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;
}

/* The pid a marker's text names when it is a live process on this host other than this one,
 * else 0. */
static long text_live_pid(const char *text) {
    json_t *o = parse(text);
    long pid = 0;
    char host[256];
    this_host(host, sizeof host);
    json_t *jp = json_object_get(o, "pid"), *jh = json_object_get(o, "host");
    if (json_is_integer(jp) && json_is_string(jh) && strcmp(json_string_value(jh), host) == 0) {
        pid = (long)json_integer_value(jp);
        if (pid <= 0 || pid == (long)getpid() || (kill((pid_t)pid, 0) != 0 && errno != EPERM))
            pid = 0;
    }
    json_decref(o);
    return pid;
}

/* The pid a marker's text names, whatever its state (0 when it names none). */
static long text_pid(const char *text) {
    json_t *o = parse(text);
    json_t *jp = json_object_get(o, "pid");
    long pid = json_is_integer(jp) ? (long)json_integer_value(jp) : 0;
    json_decref(o);
    return pid;
}

/* Up to cap - 1 bytes of fd's file from its start, NUL-terminated. */
static void read_text(int fd, char *buf, size_t cap) {
    ssize_t n = pread(fd, buf, cap - 1, 0);
    buf[n > 0 ? (size_t)n : 0] = '\0';
}

/* 1 when another open file description holds a lock on fd's file. */
static int locked_elsewhere(int fd) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return 0;
    return fl.l_type != F_UNLCK;
}

long ig_run_marker_live(const char *base) {
    char *path = marker_path(base);
    if (!path) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block */
    free(path);
    if (fd < 0) return 0;
    char text[1024];
    read_text(fd, text, sizeof text);
    long pid = 0;
    if (locked_elsewhere(fd)) {
        pid = text_pid(text);
        if (pid <= 0) pid = -1; /* held, but its text is not written yet */
    } else {
        pid = text_live_pid(text);
    }
    close(fd);
    return pid;
}

struct ig_run_marker {
    char *path;
    int fd;
};

static ig_status live_error(ig_err *err, const char *base, long pid) {
    if (pid > 0)
        return ig_err_set(err, IG_ERR_EXISTS,
                          "a preprocess run (pid %ld) is writing %s right now (%s.incomplete); "
                          "wait for it or stop it",
                          pid, base, base);
    return ig_err_set(err, IG_ERR_EXISTS,
                      "another preprocess run is writing %s right now (%s.incomplete); wait for "
                      "it or stop it",
                      base, base);
}

ig_status ig_run_marker_acquire(ig_run_marker **out, const char *base, int *had_old, ig_err *err) {
    *out = NULL;
    *had_old = 0;
    ig_run_marker *m = calloc(1, sizeof *m);
    char *path = marker_path(base);
    char *text = marker_text();
    ig_status st = IG_OK;
    if (!m || !path || !text) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    m->path = path;
    m->fd = -1;
    for (int attempt = 0;; attempt++) {
        /* the marker as it is now: made by us (created), or another's that we may take over */
        int created = 1;
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) {
            created = 0;
            fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
            if (fd < 0 && errno == ENOENT && attempt < 100) continue; /* removed meanwhile */
        }
        if (fd < 0) {
            st = ig_err_errno(err, errno, "cannot create %s", path);
            goto fail;
        }
        struct stat sb;
        if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            close(fd);
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "%s is not a regular file: remove it (it is not a run marker)", path);
            goto fail;
        }
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        /* a file system without such locks (EINVAL, ENOLCK, ...) leaves the pid check below */
        if (fcntl(fd, F_OFD_SETLK, &fl) != 0 && (errno == EAGAIN || errno == EACCES)) {
            char old[1024];
            read_text(fd, old, sizeof old);
            close(fd);
            st = live_error(err, base, text_pid(old));
            goto fail;
        }
        /* locked; but the file may have been removed (its run committed) or replaced between
         * the open and the lock: then the lock guards nothing, start again */
        struct stat a, b;
        if (fstat(fd, &a) != 0 || stat(path, &b) != 0 || a.st_dev != b.st_dev ||
            a.st_ino != b.st_ino) {
            close(fd);
            if (attempt < 100) continue;
            st = ig_err_set(err, IG_ERR_IO, "%s keeps changing: is another run starting?", path);
            goto fail;
        }
        if (!created) {
            char old[1024];
            read_text(fd, old, sizeof old);
            long pid = text_live_pid(old); /* a marker without a lock, of a live process */
            if (pid) {
                close(fd);
                st = live_error(err, base, pid);
                goto fail;
            }
            *had_old = 1;
        }
        m->fd = fd;
        break;
    }
    size_t len = strlen(text);
    if (ftruncate(m->fd, 0) != 0 || pwrite(m->fd, text, len, 0) != (ssize_t)len ||
        fsync(m->fd) != 0) {
        st = ig_err_errno(err, errno, "cannot write %s", path);
        unlink(path);
        goto fail;
    }
    if ((st = ig_fsync_parent_dir(path, err)) != IG_OK) {
        unlink(path);
        goto fail;
    }
    free(text);
    *out = m;
    return IG_OK;
fail:
    if (m && m->fd >= 0) close(m->fd);
    free(m);
    free(path);
    free(text);
    return st;
}

ig_status ig_run_marker_release(ig_run_marker *m, int remove, ig_err *err) {
    if (!m) return IG_OK;
    ig_status st = IG_OK;
    if (remove) { /* still holding the lock: no other run can have taken the marker */
        if (unlink(m->path) != 0 && errno != ENOENT)
            st = ig_err_errno(err, errno, "cannot remove %s", m->path);
        else
            st = ig_fsync_parent_dir(m->path, err);
    }
    close(m->fd);
    free(m->path);
    free(m);
    return st;
}

int ig_run_marker_covering(const char *prefix, char *base, size_t cap) {
    char cand[4096];
    snprintf(cand, sizeof cand, "%s", prefix);
    const char *slash = strrchr(cand, '/');
    size_t stem_at = slash ? (size_t)(slash - cand) + 1 : 0;
    for (int strip = 0; strip <= 4; strip++) {
        if (ig_run_marker_exists(cand)) {
            snprintf(base, cap, "%s", cand);
            return 1;
        }
        char *us = strrchr(cand + stem_at, '_');
        if (!us || us == cand + stem_at) break;
        *us = '\0';
    }
    return 0;
}

ig_status ig_run_marker_remove(const char *base, ig_err *err) {
    char *path = marker_path(base);
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = IG_OK;
    if (unlink(path) != 0 && errno != ENOENT)
        st = ig_err_errno(err, errno, "cannot remove %s", path);
    else
        st = ig_fsync_parent_dir(path, err);
    free(path);
    return st;
}

int ig_run_marker_exists(const char *base) {
    char *path = marker_path(base);
    int yes = path && ig_file_exists(path);
    free(path);
    return yes;
}
