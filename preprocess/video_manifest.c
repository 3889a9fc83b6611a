/* video_manifest.c - the list of videos to preprocess, as Open-Sora keeps it: a CSV with a header
 * row (path,text[,start,end,label,num_frames,fps,...]; RFC 4180 quoting, so captions may hold
 * commas, quotes and newlines) or the same as JSON lines. Relative paths are relative to the
 * manifest's directory, so a dataset directory can be moved whole. A label is a class id for
 * class-conditioned models, carried to every clip of the video.
 */
#include "preprocess/preprocess.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ig_video_manifest_clear(ig_video_manifest *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->entries[i].path);
        free(m->entries[i].text);
    }
    free(m->entries);
    memset(m, 0, sizeof *m);
}

/* Seconds from "12.5", "01:02.5" or "1:02:03.25"; -1 when s is not a time. */
static double parse_time(const char *s) {
    double parts[3] = {0}, v;
    int n = 0;
    const char *p = s;
    while (*p == ' ') p++;
    for (;;) {
        char *end;
        errno = 0;
        if (*p == '-' || *p == '+' || *p == ' ') return -1;
        v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || v < 0 || n == 3) return -1;
        parts[n++] = v;
        p = end;
        if (*p != ':') break;
        p++;
    }
    while (*p == ' ') p++;
    if (*p) return -1;
    double t = 0;
    for (int i = 0; i < n; i++) t = t * 60 + parts[i];
    return t;
}

static char *join_dir(const char *manifest, const char *path) {
    const char *slash = strrchr(manifest, '/');
    char *out = NULL;
    if (path[0] == '/' || !slash) return strdup(path);
    if (asprintf(&out, "%.*s/%s", (int)(slash - manifest), manifest, path) < 0) return NULL;
    return out;
}

static ig_status add_entry(ig_video_manifest *m, size_t *cap, const char *manifest,
                           const char *path, const char *text, double start, double end,
                           uint32_t label, uint64_t line, ig_err *err) {
    if (m->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        ig_video_entry *ne = realloc(m->entries, nc * sizeof *ne);
        if (!ne) return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", manifest);
        m->entries = ne;
        *cap = nc;
    }
    ig_video_entry *e = &m->entries[m->n];
    e->path = join_dir(manifest, path);
    e->text = strdup(text ? text : "");
    e->start = start;
    e->end = end;
    e->label = label;
    e->line = line;
    if (!e->path || !e->text) {
        free(e->path);
        free(e->text);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", manifest);
    }
    m->n++;
    return IG_OK;
}

/* Checks an entry's fields: a path, start/end times that make sense. */
static ig_status check_times(const char *manifest, uint64_t line, const char *col, double v,
                             ig_err *err) {
    if (v < 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s:%llu: column '%s' is not a time (seconds, or [HH:]MM:SS[.fff])",
                          manifest, (unsigned long long)line, col);
    return IG_OK;
}

/* A class id from a manifest field: digits only (spaces around them allowed), at most
 * IG_CLIP_LABEL_MAX; "" is no label. */
static ig_status parse_label(const char *s, uint32_t *out, const char *manifest, uint64_t line,
                             ig_err *err) {
    const char *p = s, *end;
    while (*p == ' ' || *p == '\t') p++;
    *out = IG_CLIP_NONE;
    if (!*p) return IG_OK;
    uint64_t v = 0;
    for (end = p; *end >= '0' && *end <= '9'; end++)
        if ((v = v * 10 + (uint64_t)(*end - '0')) > IG_CLIP_LABEL_MAX) break;
    const char *q = end;
    while (*q == ' ' || *q == '\t') q++;
    if (end == p || *q || v > IG_CLIP_LABEL_MAX)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s:%llu: label '%.64s' is not a class id: expected an integer from 0 "
                          "to %u (or an empty field for none)",
                          manifest, (unsigned long long)line, s, IG_CLIP_LABEL_MAX);
    *out = (uint32_t)v;
    return IG_OK;
}

/* ---- CSV ------------------------------------------------------------------------------------ */

typedef struct csv {
    const char *p, *end;
    uint64_t line; /* of the current position */
    char *buf;     /* the current field */
    size_t len, cap;
    uint64_t nul_line; /* the line of a NUL byte in the current field; 0: none */
} csv;

/* Reads one field into c->buf. *last: the record ended after it. 0, or -1 on a stray quote
 * (with c->line where it happened). */
static int csv_field(csv *c, int *last) {
    c->len = 0;
    c->nul_line = 0;
    int quoted = c->p < c->end && *c->p == '"';
    if (quoted) c->p++;
    for (;;) {
        if (c->p >= c->end) {
            if (quoted) return -1; /* an unterminated quote */
            *last = 1;
            break;
        }
        char ch = *c->p;
        if (quoted && ch == '"') {
            if (c->p + 1 < c->end && c->p[1] == '"') {
                c->p += 2;
                ch = '"';
            } else {
                c->p++;
                quoted = 0;
                if (c->p < c->end && *c->p != ',' && *c->p != '\n' && *c->p != '\r') return -1;
                continue;
            }
        } else if (!quoted && ch == ',') {
            c->p++;
            *last = 0;
            break;
        } else if (!quoted && (ch == '\n' || ch == '\r')) {
            if (ch == '\r' && c->p + 1 < c->end && c->p[1] == '\n') c->p++;
            c->p++;
            c->line++;
            *last = 1;
            break;
        } else {
            if (ch == '\n') c->line++;
            if (ch == '\0' && !c->nul_line) c->nul_line = c->line;
            c->p++;
        }
        if (c->len + 2 > c->cap) {
            size_t nc = c->cap ? c->cap * 2 : 256;
            char *nb = realloc(c->buf, nc);
            if (!nb) return -2;
            c->buf = nb;
            c->cap = nc;
        }
        c->buf[c->len++] = ch;
    }
    if (!c->buf && !(c->buf = malloc(c->cap = 256))) return -2;
    c->buf[c->len] = '\0';
    return 0;
}

enum { COL_PATH, COL_TEXT, COL_START, COL_END, COL_LABEL, N_COLS };
static const char *const col_names[N_COLS] = {"path", "text", "start", "end", "label"};

static ig_status parse_csv(ig_video_manifest *m, const char *text, size_t len, const char *path,
                           ig_err *err) {
    csv c = {.p = text, .end = text + len, .line = 1};
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) c.p += 3;
    int cols[N_COLS] = {-1, -1, -1, -1, -1};
    int ncol = 0, last = 0, rc;
    ig_status st = IG_OK;
    /* the header */
    do {
        if ((rc = csv_field(&c, &last)) != 0) break;
        if (c.nul_line) {
            free(c.buf);
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s:1: the header holds a NUL byte (0x00): a manifest is text", path);
        }
        for (int k = 0; k < N_COLS; k++)
            if (!strcmp(c.buf, col_names[k])) {
                if (cols[k] >= 0) {
                    free(c.buf);
                    return ig_err_set(err, IG_ERR_FORMAT, "%s:1: column '%s' is named twice", path,
                                      col_names[k]);
                }
                cols[k] = ncol;
            }
        ncol++;
    } while (!last);
    if (rc == 0 && cols[COL_PATH] < 0)
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s:1: the header has no 'path' column (an Open-Sora manifest starts "
                        "with path,text,...)",
                        path);
    size_t cap = 0;
    char **row = calloc((size_t)ncol + 1, sizeof *row);
    if (!row) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    while (st == IG_OK && rc == 0 && c.p < c.end) {
        uint64_t line = c.line;
        int n = 0;
        last = 0;
        while (!last && (rc = csv_field(&c, &last)) == 0) {
            /* a NUL would end the field where C strings end: the caption (or path) cut short */
            if (c.nul_line && st == IG_OK) {
                const char *name = "";
                for (int k = 0; k < N_COLS; k++)
                    if (cols[k] == n) name = col_names[k];
                st = ig_err_set(err, IG_ERR_FORMAT,
                                "%s:%llu: field %d%s%s%s holds a NUL byte (0x00), which would cut "
                                "it short: a manifest is text; remove the byte",
                                path, (unsigned long long)c.nul_line, n + 1, *name ? " ('" : "",
                                name, *name ? "')" : "");
            }
            if (n < ncol && !(row[n] = strdup(c.buf))) rc = -2;
            n++;
        }
        if (rc != 0 || st != IG_OK) break;
        if (n == 1 && !row[0][0]) { /* an empty line */
            free(row[0]);
            row[0] = NULL;
            continue;
        }
        if (n != ncol)
            st = ig_err_set(err, IG_ERR_FORMAT, "%s:%llu: %d fields, the header has %d", path,
                            (unsigned long long)line, n, ncol);
        const char *vp = st == IG_OK ? row[cols[COL_PATH]] : "";
        if (st == IG_OK && !vp[0])
            st = ig_err_set(err, IG_ERR_FORMAT, "%s:%llu: the path is empty", path,
                            (unsigned long long)line);
        double t[2] = {0, -1};
        for (int k = 0; st == IG_OK && k < 2; k++) {
            int col = cols[COL_START + k];
            if (col >= 0 && row[col][0]) {
                t[k] = parse_time(row[col]);
                st = check_times(path, line, col_names[COL_START + k], t[k], err);
            }
        }
        uint32_t label = IG_CLIP_NONE;
        if (st == IG_OK && cols[COL_LABEL] >= 0)
            st = parse_label(row[cols[COL_LABEL]], &label, path, line, err);
        if (st == IG_OK)
            st = add_entry(m, &cap, path, vp, cols[COL_TEXT] >= 0 ? row[cols[COL_TEXT]] : "", t[0],
                           t[1], label, line, err);
        for (int k = 0; k < ncol; k++) {
            free(row[k]);
            row[k] = NULL;
        }
    }
    if (st == IG_OK && rc == -1)
        st = ig_err_set(err, IG_ERR_FORMAT,
                        "%s:%llu: a quoted field is not closed, or a quote is followed by "
                        "something other than a comma or the end of the line",
                        path, (unsigned long long)c.line);
    if (st == IG_OK && rc == -2) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (int k = 0; row && k < ncol; k++) free(row[k]); /* a row cut short by an error */
    free(row);
    free(c.buf);
    return st;
}

/* ---- JSONL ---------------------------------------------------------------------------------- */

static ig_status json_time(json_t *o, const char *key, double *out, const char *path, uint64_t line,
                           ig_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return IG_OK;
    if (json_is_number(v))
        *out = json_number_value(v) >= 0 ? json_number_value(v) : -1;
    else if (json_is_string(v))
        *out = parse_time(json_string_value(v));
    else
        *out = -1;
    return check_times(path, line, key, *out, err);
}

/* "label": a JSON integer 0 .. IG_CLIP_LABEL_MAX; absent or null: none. */
static ig_status json_label(json_t *o, uint32_t *out, const char *path, uint64_t line,
                            ig_err *err) {
    json_t *v = json_object_get(o, "label");
    *out = IG_CLIP_NONE;
    if (!v || json_is_null(v)) return IG_OK;
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) <= (json_int_t)IG_CLIP_LABEL_MAX) {
        *out = (uint32_t)json_integer_value(v);
        return IG_OK;
    }
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    ig_status st = ig_err_set(err, IG_ERR_FORMAT,
                              "%s:%llu: \"label\" %.64s is not a class id: expected an integer "
                              "from 0 to %u (or null for none)",
                              path, (unsigned long long)line, text ? text : "?", IG_CLIP_LABEL_MAX);
    free(text);
    return st;
}

static ig_status parse_jsonl(ig_video_manifest *m, const char *text, size_t len, const char *path,
                             ig_err *err) {
    size_t cap = 0;
    uint64_t line = 0;
    ig_status st = IG_OK;
    for (const char *p = text, *end = text + len; st == IG_OK && p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line++;
        size_t n = (size_t)(le - p);
        const char *q = p;
        p = nl ? nl + 1 : end;
        if (strspn(q, " \t\r") >= n) continue;
        json_error_t je;
        json_t *o = json_loadb(q, n, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(o)) {
            st = ig_err_set(err, IG_ERR_FORMAT, "%s:%llu:%d: expected a JSON object%s%s", path,
                            (unsigned long long)line, o ? 1 : je.column, o ? "" : ": ",
                            o ? "" : je.text);
        } else {
            json_t *vp = json_object_get(o, "path"), *vt = json_object_get(o, "text");
            double t[2] = {0, -1};
            uint32_t label = IG_CLIP_NONE;
            if (!json_is_string(vp) || !json_string_value(vp)[0])
                st = ig_err_set(err, IG_ERR_FORMAT, "%s:%llu: \"path\" is missing or not a string",
                                path, (unsigned long long)line);
            else if (vt && !json_is_string(vt) && !json_is_null(vt))
                st = ig_err_set(err, IG_ERR_FORMAT, "%s:%llu: \"text\" is not a string", path,
                                (unsigned long long)line);
            if (st == IG_OK) st = json_time(o, "start", &t[0], path, line, err);
            if (st == IG_OK) st = json_time(o, "end", &t[1], path, line, err);
            if (st == IG_OK) st = json_label(o, &label, path, line, err);
            if (st == IG_OK)
                st = add_entry(m, &cap, path, json_string_value(vp),
                               json_is_string(vt) ? json_string_value(vt) : "", t[0], t[1], label,
                               line, err);
        }
        json_decref(o);
    }
    return st;
}

ig_status ig_video_manifest_parse(ig_video_manifest *m, const char *text, size_t len, int jsonl,
                                  const char *path, ig_err *err) {
    memset(m, 0, sizeof *m);
    ig_status st =
        jsonl ? parse_jsonl(m, text, len, path, err) : parse_csv(m, text, len, path, err);
    for (size_t i = 0; st == IG_OK && i < m->n; i++) {
        const ig_video_entry *e = &m->entries[i];
        if (e->end >= 0 && e->end <= e->start)
            st = ig_err_set(err, IG_ERR_FORMAT, "%s:%llu: end (%g s) is not after start (%g s)",
                            path, (unsigned long long)e->line, e->end, e->start);
    }
    if (st == IG_OK && m->n == 0)
        st = ig_err_set(err, IG_ERR_FORMAT, "%s: the manifest lists no videos", path);
    if (st != IG_OK) ig_video_manifest_clear(m);
    return st;
}

ig_status ig_video_manifest_read(ig_video_manifest *m, const char *path, ig_err *err) {
    memset(m, 0, sizeof *m);
    char *text = NULL;
    size_t len = 0;
    ig_status st = ig_read_file(path, &text, &len, err);
    if (st != IG_OK) return st;
    size_t pl = strlen(path);
    int jsonl =
        (pl > 6 && !strcmp(path + pl - 6, ".jsonl")) || (pl > 5 && !strcmp(path + pl - 5, ".json"));
    st = ig_video_manifest_parse(m, text, len, jsonl, path, err);
    free(text);
    return st;
}
