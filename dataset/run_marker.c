/* run_marker.c - run markers: OUT.incomplete, written by a preprocess run before it commits any
 * file of its output and removed once the last manifest and shard list is in place (dataset.h).
 * The readers (shard open, shard lists) consult them; the writers create and remove them.
 */
#include "dataset/dataset.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

ig_status ig_run_marker_create(const char *base, ig_err *err) {
    char *path = marker_path(base);
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    char host[256];
    this_host(host, sizeof host);
    json_t *o = json_pack("{s:s,s:I,s:s}", "format", "ingot-run-marker", "pid",
                          (json_int_t)getpid(), "host", host);
    char *text = o ? json_dumps(o, JSON_SORT_KEYS) : NULL;
    ig_status st = text ? ig_write_file_atomic(path, text, strlen(text), 1, err)
                        : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    free(text);
    json_decref(o);
    free(path);
    return st;
}

long ig_run_marker_live(const char *base) {
    char *path = marker_path(base);
    if (!path) return 0;
    json_t *o = json_load_file(path, 0, NULL);
    free(path);
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
