/* inputs.c - expanding --input arguments into files, and telling their kinds apart.
 *
 * Each argument is a file, a directory, a glob pattern or "-" (stdin). Arguments keep the order
 * the user gave them; what one directory or glob expands to is sorted bytewise (strcmp, not the
 * locale), so the same tree gives the same order, and so the same shards, on every machine.
 * Directories are searched recursively for .jsonl, .jsonl.zst, .zst and .txt files (not .json:
 * a directory often holds manifests or dataset_info.json beside the data); entries
 * whose names start with '.' (editor and rsync temporaries) and symbolic links to directories
 * (which could loop) are skipped. A file named twice, by the same or another spelling, is kept
 * once, at its first position. An argument that yields no file is an error naming it.
 */
#include "preprocess/preprocess.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef struct str_list {
    char **v;
    size_t n, cap;
} str_list;

static int list_push(str_list *l, char *s) { /* takes s; frees it on failure */
    if (!s) return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **nv = realloc(l->v, cap * sizeof *nv);
        if (!nv) {
            free(s);
            return 0;
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return 1;
}

static void list_free(str_list *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

static int is_input_name(const char *name) {
    return ends_with(name, ".jsonl") || ends_with(name, ".zst") || ends_with(name, ".txt");
}

ig_input_kind ig_input_kind_of(const char *path, int txt_lines) {
    if (!path || strcmp(path, "-") == 0) return IG_INPUT_JSONL;
    if (ends_with(path, ".zst")) return IG_INPUT_JSONL_ZST;
    if (ends_with(path, ".txt")) return txt_lines ? IG_INPUT_TXT_LINES : IG_INPUT_TXT;
    return IG_INPUT_JSONL;
}

static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t o = a;
    if (a == 0 || dir[a - 1] != '/') p[o++] = '/';
    memcpy(p + o, name, b + 1);
    return p;
}

/* Appends the input files under dir (recursively, unsorted) to out. */
static ig_status walk_dir(const char *dir, int depth, str_list *out, ig_err *err) {
    if (depth > 64)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: directories nested too deeply", dir);
    DIR *d = opendir(dir);
    if (!d) return ig_err_errno(err, errno, "cannot open input directory %s", dir);
    ig_status st = IG_OK;
    struct dirent *e;
    while (st == IG_OK && (errno = 0, e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ., .. and hidden files */
        char *p = join_path(dir, e->d_name);
        if (!p) {
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory listing %s", dir);
            break;
        }
        struct stat ls, s;
        if (lstat(p, &ls) != 0 || stat(p, &s) != 0) { /* a dangling link or a race: skip it */
            free(p);
            continue;
        }
        if (S_ISDIR(s.st_mode)) {
            if (!S_ISLNK(ls.st_mode)) st = walk_dir(p, depth + 1, out, err);
            free(p);
        } else if (S_ISREG(s.st_mode) && is_input_name(e->d_name)) {
            if (!list_push(out, p)) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        } else {
            free(p);
        }
    }
    if (st == IG_OK && errno != 0) st = ig_err_errno(err, errno, "cannot read directory %s", dir);
    closedir(d);
    return st;
}

/* Expands one existing path (file or directory) into out, sorting a directory's files. */
static ig_status expand_path(const char *path, const struct stat *s, str_list *out, ig_err *err) {
    if (!S_ISDIR(s->st_mode)) {
        if (!list_push(out, strdup(path))) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        return IG_OK;
    }
    size_t first = out->n;
    ig_status st = walk_dir(path, 0, out, err);
    if (st != IG_OK) return st;
    if (out->n - first > 1) qsort(out->v + first, out->n - first, sizeof *out->v, cmp_str);
    return IG_OK;
}

static int has_glob_chars(const char *s) {
    return strpbrk(s, "*?[") != NULL;
}

static ig_status expand_one(const char *in, str_list *out, ig_err *err) {
    size_t first = out->n;
    struct stat s;
    if (strcmp(in, "-") == 0) {
        if (!list_push(out, strdup(in))) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        return IG_OK;
    }
    if (stat(in, &s) == 0) {
        ig_status st = expand_path(in, &s, out, err);
        if (st != IG_OK) return st;
        if (out->n == first)
            return ig_err_set(err, IG_ERR_NOT_FOUND,
                              "input directory %s holds no .jsonl, .jsonl.zst, .zst or .txt "
                              "files",
                              in);
        return IG_OK;
    }
    int e = errno;
    if (!has_glob_chars(in)) {
        if (e == ENOENT || e == ENOTDIR)
            return ig_err_set(err, IG_ERR_NOT_FOUND, "input %s: no such file or directory", in);
        return ig_err_errno(err, e, "input %s", in);
    }
    glob_t g;
    int rc = glob(in, GLOB_NOSORT, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        globfree(&g);
        return ig_err_set(err, IG_ERR_NOT_FOUND, "input pattern %s matches no file", in);
    }
    if (rc != 0) {
        globfree(&g);
        return ig_err_set(err, rc == GLOB_NOSPACE ? IG_ERR_NOMEM : IG_ERR_IO,
                          "input pattern %s: cannot expand it (%s)", in,
                          rc == GLOB_NOSPACE ? "out of memory" : "read error");
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, cmp_str);
    ig_status st = IG_OK;
    for (size_t i = 0; i < g.gl_pathc && st == IG_OK; i++) {
        if (stat(g.gl_pathv[i], &s) != 0) continue;
        if (S_ISDIR(s.st_mode) || S_ISREG(s.st_mode)) st = expand_path(g.gl_pathv[i], &s, out, err);
    }
    globfree(&g);
    if (st == IG_OK && out->n == first)
        st = ig_err_set(err, IG_ERR_NOT_FOUND, "input pattern %s matches no input file", in);
    return st;
}

/* A file's identity for de-duplication (its canonical path) and its position in the list. */
typedef struct keyed {
    char *key;
    size_t pos;
} keyed;

static int cmp_keyed(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* Drops later duplicates: the same spelling, or another spelling of the same file. */
static ig_status dedup(str_list *l, ig_err *err) {
    size_t n = l->n;
    keyed *a = calloc(n ? n : 1, sizeof *a);
    ig_status st = IG_OK;
    if (!a) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char *rp = strcmp(l->v[i], "-") == 0 ? NULL : realpath(l->v[i], NULL);
        a[i].key = rp ? rp : strdup(l->v[i]);
        a[i].pos = i;
        if (!a[i].key) {
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    if (n > 1) qsort(a, n, sizeof *a, cmp_keyed);
    for (size_t i = 1; i < n; i++)
        if (strcmp(a[i].key, a[i - 1].key) == 0) {
            free(l->v[a[i].pos]);
            l->v[a[i].pos] = NULL;
        }
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        if (l->v[i]) l->v[o++] = l->v[i];
    l->n = o;
done:
    for (size_t i = 0; i < n; i++) free(a[i].key);
    free(a);
    return st;
}

ig_status ig_expand_inputs(const char *const *inputs, size_t n_inputs, char ***out, size_t *n_out,
                           ig_err *err) {
    *out = NULL;
    *n_out = 0;
    if (n_inputs == 0 || !inputs) return ig_err_set(err, IG_ERR_INVALID_ARG, "no inputs given");
    str_list l = {0};
    for (size_t i = 0; i < n_inputs; i++) {
        if (!inputs[i] || !*inputs[i]) {
            list_free(&l);
            return ig_err_set(err, IG_ERR_INVALID_ARG, "input %zu is empty", i + 1);
        }
        ig_status st = expand_one(inputs[i], &l, err);
        if (st != IG_OK) {
            list_free(&l);
            return st;
        }
    }
    ig_status st = dedup(&l, err);
    if (st != IG_OK) {
        list_free(&l);
        return st;
    }
    *out = l.v;
    *n_out = l.n;
    return IG_OK;
}

void ig_input_list_free(char **list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) free(list[i]);
    free(list);
}
