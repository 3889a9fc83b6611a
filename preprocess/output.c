/* output.c - the life of a preprocess command's output (output_internal.h): finding what an
 * earlier run left, preparing the way under the run marker, committing, and the same across the
 * ranks of a communicator. Used by every pipeline that writes shards. */
#include "output_internal.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void ig_output_stem(const ig_output_spec *o, size_t k, char *buf, size_t cap) {
    if (o->n_keys > 1)
        snprintf(buf, cap, "%s_%s", o->prefix, o->keys[k]);
    else
        snprintf(buf, cap, "%s", o->prefix);
}

/* What a file in the output's directory is to stem S: S[_rRRRR][_NNNNN] followed by a manifest
 * (.json, .shards.json) or data extension, or a temporary of one of those, of the run marker or
 * of the shard writer's length spill (... .tmp.*; for long names a shortened one, see
 * short_temp_of). Matched literally: a prefix may hold glob characters. */
enum { OUT_MANIFEST = 1, OUT_DATA = 2, OUT_TEMP = 4 };

/* 1 when rest is ext exactly, 2 when it is a temporary of it (ext.tmp.*), else 0. */
static int match_ext(const char *rest, const char *ext) {
    size_t el = strlen(ext);
    if (strncmp(rest, ext, el) != 0) return 0;
    if (rest[el] == '\0') return 1;
    return strncmp(rest + el, ".tmp.", 5) == 0 ? 2 : 0;
}

/* A temporary whose name was shortened because the file it stands for has a long name
 * (ig_temp_path: "<start of the name>.~<16 hex>.SUFFIX") and whose visible start is stem's, or a
 * long start of it. */
static int short_temp_of(const char *name, const char *stem) {
    const char *t = strstr(name, ".~");
    if (!t || strspn(t + 2, "0123456789abcdef") != 16 || t[18] != '.' || !strstr(t + 18, ".tmp."))
        return 0;
    size_t visible = (size_t)(t - name), sl = strlen(stem);
    if (visible >= sl) return strncmp(name, stem, sl) == 0;
    return visible >= 200 && strncmp(name, stem, visible) == 0;
}

static int output_kind(const ig_output_spec *o, const char *name, const char *stem) {
    size_t sl = strlen(stem);
    if (short_temp_of(name, stem)) return OUT_TEMP;
    if (strncmp(name, stem, sl) != 0) return 0;
    const char *rest = name + sl;
    if (rest[0] == '_' && rest[1] == 'r' && strspn(rest + 2, "0123456789") == 4) rest += 6;
    if (rest[0] == '_' && strspn(rest + 1, "0123456789") == 5) rest += 6;
    static const struct {
        const char *ext;
        int kind;
    } fixed[] = {{".shards.json", OUT_MANIFEST},
                 {".json", OUT_MANIFEST},
                 {".incomplete", 0},
                 {".spill", 0}}; /* the shard writer's length spill (unlinked once open) */
    for (size_t e = 0; e < sizeof fixed / sizeof fixed[0]; e++) {
        int m = match_ext(rest, fixed[e].ext);
        if (m) return m == 1 ? fixed[e].kind : OUT_TEMP;
    }
    for (size_t e = 0; o->data_exts && o->data_exts[e]; e++) {
        int m = match_ext(rest, o->data_exts[e]);
        if (m) return m == 1 ? OUT_DATA : OUT_TEMP;
    }
    return 0;
}

typedef struct scan {
    ig_ctx *ctx;
    int n;            /* matches seen */
    char first[1024]; /* the first of them */
} scan;

static void note_match(const char *path, void *arg) {
    scan *s = arg;
    /* a path longer than the buffer is shown cut short (the precision says so to -Wformat) */
    if (s->n++ == 0) snprintf(s->first, sizeof s->first, "%.*s", (int)sizeof s->first - 1, path);
}

static void remove_file(const char *path, void *arg) {
    scan *s = arg;
    /* temporaries carry the writer's pid: leave those of a live process alone */
    const char *t = strstr(path, ".tmp.");
    if (t) {
        /* "...tmp.PID.N" (an atomic writer's); other temporaries (mkstemp's) name no process */
        char *end = NULL;
        long pid = strtol(t + 5, &end, 10);
        int named = end != t + 5 && *end == '.';
        if (named && pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) return;
    }
    if (unlink(path) == 0) ig_debug(s->ctx, "removed %s", path);
}

/* Calls fn on every file of stem whose kind is in kinds. */
static void for_each_output(const ig_output_spec *o, const char *stem, int kinds,
                            void (*fn)(const char *, void *), void *arg) {
    const char *slash = strrchr(stem, '/');
    char dir[4096];
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - stem) + 1, stem);
    else
        snprintf(dir, sizeof dir, "./");
    const char *base = slash ? slash + 1 : stem;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!(output_kind(o, e->d_name, base) & kinds)) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s%s", slash ? dir : "", e->d_name);
        fn(path, arg);
    }
    closedir(d);
}

/* Removes the files of every stem whose kind is in kinds, manifests and lists first. */
static void remove_outputs(ig_ctx *ctx, const ig_output_spec *o, int temps) {
    char stem[4096];
    scan s = {.ctx = ctx};
    for (size_t k = 0; k < o->n_keys; k++) {
        ig_output_stem(o, k, stem, sizeof stem);
        for_each_output(o, stem, OUT_MANIFEST, remove_file, &s);
        for_each_output(o, stem, OUT_DATA, remove_file, &s);
        if (temps) for_each_output(o, stem, OUT_TEMP, remove_file, &s);
    }
    if (temps) for_each_output(o, o->prefix, OUT_TEMP, remove_file, &s); /* the marker's own */
}

/* The first complete output file of o (manifest or data) into found; 0 when there is none. */
static int find_outputs(ig_ctx *ctx, const ig_output_spec *o, scan *found) {
    char stem[4096];
    *found = (scan){.ctx = ctx};
    for (size_t k = 0; k < o->n_keys; k++) {
        ig_output_stem(o, k, stem, sizeof stem);
        for_each_output(o, stem, OUT_MANIFEST | OUT_DATA, note_match, found);
    }
    return found->n;
}

/* A file of the output that is not a regular file (a device, a pipe, a link...): never removed
 * or replaced, even with --force (the first is kept in bad). */
typedef struct irregular {
    char path[1024];
    unsigned mode;
    int n;
} irregular;

static void note_irregular(const char *path, void *arg) {
    irregular *b = arg;
    struct stat sb;
    if (lstat(path, &sb) != 0 || S_ISREG(sb.st_mode) || b->n++) return;
    snprintf(b->path, sizeof b->path, "%.*s", (int)sizeof b->path - 1, path);
    b->mode = (unsigned)sb.st_mode;
}

static ig_status check_regular(const ig_output_spec *o, ig_err *err) {
    irregular bad = {.n = 0};
    char stem[4096];
    for (size_t k = 0; k < o->n_keys; k++) {
        ig_output_stem(o, k, stem, sizeof stem);
        for_each_output(o, stem, OUT_MANIFEST | OUT_DATA | OUT_TEMP, note_irregular, &bad);
    }
    if (!bad.n) return IG_OK;
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "%s is not a regular file (it is a %s): ingot never replaces or removes one, "
                      "even with --force (a shard's files are written together, never through a "
                      "link); move it away or give another --output-prefix",
                      bad.path, ig_file_kind(bad.mode));
}

static ig_status exists_error(const scan *found, ig_err *err) {
    ig_err_set(err, IG_ERR_EXISTS, "%s exists: an output is already there", found->first);
    return ig_err_fix(err, "overwrite", NULL);
}

ig_status ig_output_prepare(ig_ctx *ctx, ig_output_spec *o, ig_err *err) {
    const char *out = o->prefix;
    o->marker = NULL;
    ig_status pst = ig_output_prefix_check(out, err);
    if (pst == IG_OK) pst = check_regular(o, err);
    if (pst != IG_OK) return pst;
    /* a complete output is refused before the marker is touched (the common case: a rerun
     * without --force), so that its readers never see a marker appear over it */
    scan found;
    if (!o->overwrite && !ig_run_marker_exists(out) && find_outputs(ctx, o, &found))
        return exists_error(&found, err);
    /* the one place two runs on one output meet: whoever holds the marker goes ahead, the other
     * is refused here, before it has touched anything */
    int unfinished = 0;
    ig_status st = ig_run_marker_acquire(&o->marker, out, &unfinished, err);
    if (st != IG_OK) return st;
    /* another run may have completed the output since the check above */
    if (!unfinished && !o->overwrite && find_outputs(ctx, o, &found)) {
        ig_run_marker_release(o->marker, 1, NULL);
        o->marker = NULL;
        return exists_error(&found, err);
    }
    if (unfinished)
        ig_warn(ctx, "removing the output of an unfinished earlier run (%s.incomplete)", out);
    remove_outputs(ctx, o, 1);
    return IG_OK;
}

ig_status ig_output_commit(ig_output_spec *o, ig_err *err) {
    ig_status st = ig_run_marker_release(o->marker, 1, err);
    o->marker = NULL;
    return st;
}

void ig_output_discard(ig_ctx *ctx, ig_output_spec *o) {
    if (!o->marker) return; /* not prepared (or already committed): nothing here is this run's */
    remove_outputs(ctx, o, 0);
    ig_run_marker_release(o->marker, 1, NULL);
    o->marker = NULL;
}

/* ---- across ranks ---------------------------------------------------------------------------- */

ig_status ig_output_prepare_ranks(ig_ctx *ctx, ig_comm *comm, ig_output_spec *o, ig_err *err) {
    ig_status st = IG_OK;
    if (ig_comm_rank(comm) == 0) st = ig_output_prepare(ctx, o, err);
    int32_t ok = st == IG_OK;
    ig_err cerr = {0};
    ig_status cs = ig_comm_bcast(comm, &ok, 1, IG_COMM_I32, 0, &cerr);
    if (st != IG_OK) return st;
    if (cs != IG_OK) {
        if (err) *err = cerr;
        return cs;
    }
    if (!ok) return ig_err_set(err, IG_ERR_CANCELLED, "rank 0 could not prepare the output");
    return IG_OK;
}

/* Rank 0: one shard list per stem over the shards of all ranks (STEM_rRRRR...), whose names
 * arrived newline-separated in all[0..len). */
static ig_status write_lists(ig_ctx *ctx, const ig_output_spec *o, char *all, size_t len,
                             ig_err *err) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += all[i] == '\n';
    const char **names = ig_calloc(ctx, n ? n : 1, sizeof *names);
    const char **mine = ig_calloc(ctx, n ? n : 1, sizeof *mine);
    ig_status st = IG_OK;
    if (!names || !mine) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    size_t m = 0;
    for (size_t i = 0, at = 0; st == IG_OK && i < len; i++)
        if (all[i] == '\n') {
            all[i] = '\0';
            names[m++] = all + at;
            at = i + 1;
        }
    for (size_t k = 0; st == IG_OK && k < o->n_keys; k++) {
        char stem[4096], lead[4200];
        ig_output_stem(o, k, stem, sizeof stem);
        snprintf(lead, sizeof lead, "%s_r", stem);
        size_t ll = strlen(lead), c = 0;
        for (size_t i = 0; i < m; i++)
            if (!strncmp(names[i], lead, ll) &&
                strspn(names[i] + ll, "0123456789_") == strlen(names[i] + ll))
                mine[c++] = names[i];
        if (c == 0) {
            st = ig_err_set(err, IG_ERR_INTERNAL, "no rank wrote a shard of %s", stem);
            break;
        }
        st = (o->write_list ? o->write_list : ig_shard_list_write)(stem, mine, c, 0,
                                                                   err); /* prepare cleared it */
    }
    ig_free(ctx, names);
    ig_free(ctx, mine);
    return st;
}

static void remove_lists(const ig_output_spec *o) {
    char stem[4096], path[4200];
    for (size_t k = 0; k < o->n_keys; k++) {
        ig_output_stem(o, k, stem, sizeof stem);
        snprintf(path, sizeof path, "%s.shards.json", stem);
        remove(path);
    }
}

ig_status ig_output_commit_ranks(ig_ctx *ctx, ig_comm *comm, ig_output_spec *o, int ok,
                                 const char *const *shards, size_t n, ig_err *err) {
    int rank = ig_comm_rank(comm), all_ok = 0;
    ig_err cerr = {0};
    ig_status st = IG_OK;
    /* the shard names, newline-separated, from every rank to rank 0 */
    size_t len = 0;
    for (size_t i = 0; ok && i < n; i++) len += strlen(shards[i]) + 1;
    char *mine = ig_alloc(ctx, len + 1), *p = mine;
    if (!mine) ok = 0, len = 0;
    for (size_t i = 0; mine && ok && i < n; i++) p += sprintf(p, "%s\n", shards[i]);
    void *all = NULL;
    size_t all_len = 0;
    ig_status cs = ig_comm_all_ok(comm, ok, &all_ok, &cerr);
    if (cs == IG_OK) cs = ig_comm_gather_bytes(comm, mine, len, 0, &all, &all_len, NULL, &cerr);
    ig_free(ctx, mine);
    if (cs == IG_OK && rank == 0 && all_ok) st = write_lists(ctx, o, all, all_len, err);
    ig_free(ctx, all);
    /* the output is complete once the lists exist: only then does the marker go */
    int listed = 0;
    if (cs == IG_OK) cs = ig_comm_all_ok(comm, all_ok && st == IG_OK, &listed, &cerr);
    void (*remove_shard)(const char *) = o->remove_shard ? o->remove_shard : ig_shard_remove;
    if (cs == IG_OK && !listed) /* all or nothing: no rank's shards stay complete */
        for (size_t i = 0; i < n; i++) remove_shard(shards[i]);
    if (cs == IG_OK) cs = ig_comm_barrier(comm, &cerr);
    if (cs == IG_OK && rank == 0) {
        if (listed) {
            st = ig_output_commit(o, err);
        } else {
            remove_lists(o);
            ig_run_marker_release(o->marker, 1, NULL); /* nothing of the run is left */
            o->marker = NULL;
        }
    }
    if (cs != IG_OK) {
        for (size_t i = 0; i < n; i++) remove_shard(shards[i]);
        if (err) *err = cerr;
        return cs;
    }
    if (st == IG_OK && !listed)
        st = ig_err_set(err, IG_ERR_CANCELLED, "another rank failed; see its message");
    return st;
}
