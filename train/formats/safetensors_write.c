/* safetensors_write.c - the safetensors writer (see safetensors.h).
 *
 * The header comes first in the file and names every tensor's offsets, so tensors are declared
 * first (name, dtype, shape and where their bytes come from) and written at commit, in the order
 * declared and back to back. The header is built by hand rather than with jansson so that it is
 * byte-identical to the reference library's (serde_json's compact form and string escapes: only
 * '"', '\\' and control characters are escaped, \u00xx in lowercase; jansson writes uppercase
 * hex), with "__metadata__" first as the reference writes it. Every byte goes through
 * ig_atomic_file and an xxh3 stream at once, so the checksum the checkpoint manifest records is
 * that of the bytes written, without reading the file back.
 */
#include "safetensors.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "safetensors_internal.h"

#define FILL_CHUNK (1u << 20) /* bytes per fill callback */

typedef struct wtensor {
    char *name;
    ig_st_dtype dtype;
    int ndim;
    uint64_t shape[IG_ST_MAX_DIMS];
    uint64_t bytes;
    const void *data;   /* or: */
    ig_st_fill_fn fill; /* with user */
    void *user;
} wtensor;

struct ig_st_writer {
    ig_ctx *ctx;
    ig_atomic_file *af;
    char *path;
    wtensor *t;
    size_t n, cap;
    char **meta; /* key, value pairs */
    size_t n_meta, cap_meta;
    uint64_t data_bytes; /* sum of the declared tensors' bytes */
};

static void *w_alloc(ig_ctx *ctx, size_t n) {
    return ctx ? ig_alloc(ctx, n ? n : 1) : malloc(n ? n : 1);
}

static void *w_realloc(ig_ctx *ctx, void *p, size_t n) {
    return ctx ? ig_realloc(ctx, p, n) : realloc(p, n);
}

static void w_free(ig_ctx *ctx, void *p) {
    if (ctx)
        ig_free(ctx, p);
    else
        free(p);
}

static char *w_strdup(ig_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = w_alloc(ctx, n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Grows an array of `size`-byte items until it has room for index n (*cap > n); 0 when out of
 * memory. */
static int grow(ig_ctx *ctx, void **arr, size_t *cap, size_t n, size_t size) {
    if (n < *cap) return 1;
    size_t c = *cap ? 2 * *cap : 16;
    void *p = w_realloc(ctx, *arr, c * size);
    if (!p) return 0;
    *arr = p;
    *cap = c;
    return 1;
}

/* 1 when s is valid UTF-8 (no surrogates, no overlong forms). */
static int utf8_valid(const char *s) {
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    utf8proc_ssize_t n = (utf8proc_ssize_t)strlen(s);
    for (utf8proc_ssize_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, n - i, &cp);
        if (k <= 0) return 0;
        i += k;
    }
    return 1;
}

static void free_writer(ig_st_writer *w) {
    ig_ctx *ctx = w->ctx;
    for (size_t i = 0; i < w->n; i++) w_free(ctx, w->t[i].name);
    for (size_t i = 0; i < 2 * w->n_meta; i++) w_free(ctx, w->meta[i]);
    w_free(ctx, w->t);
    w_free(ctx, w->meta);
    w_free(ctx, w->path);
    w_free(ctx, w);
}

void ig_st_writer_abort(ig_st_writer *w) {
    if (!w) return;
    ig_atomic_file_abort(w->af);
    free_writer(w);
}

ig_status ig_st_writer_create(ig_st_writer **out, ig_ctx *ctx, const char *path, int overwrite,
                              ig_err *err) {
    *out = NULL;
    ig_st_writer *w = w_alloc(ctx, sizeof *w);
    if (!w) return ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", path);
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->path = w_strdup(ctx, path);
    if (!w->path) {
        free_writer(w);
        return ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", path);
    }
    ig_status st = ig_atomic_file_create(&w->af, path, overwrite, err);
    if (st != IG_OK) {
        free_writer(w);
        return st;
    }
    *out = w;
    return IG_OK;
}

static ig_status add(ig_st_writer *w, const char *name, ig_st_dtype dtype, const uint64_t *shape,
                     int ndim, const void *data, ig_st_fill_fn fill, void *user, ig_err *err) {
    const char *path = w->path;
    if (!name || !name[0] || !utf8_valid(name))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: a tensor name must be non-empty UTF-8",
                          path);
    if (strcmp(name, "__metadata__") == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: \"__metadata__\" is reserved and cannot name a tensor", path);
    if (!ig_st_dtype_name(dtype))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: tensor '%s': dtype %d is not a dtype", path,
                          name, (int)dtype);
    if (ndim < 0 || ndim > IG_ST_MAX_DIMS || (ndim > 0 && !shape))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: tensor '%s': %d dimensions (0 to %d, with a shape array)", path,
                          name, ndim, IG_ST_MAX_DIMS);
    wtensor t = {.dtype = dtype, .ndim = ndim, .data = data, .fill = fill, .user = user};
    if (ndim) memcpy(t.shape, shape, (size_t)ndim * sizeof *shape);
    uint64_t numel;
    char sh[256];
    switch (ig_st_tensor_size(dtype, t.shape, ndim, &numel, &t.bytes)) {
    case IG_ST_SIZE_OVERFLOW:
        ig_st_format_shape(sh, sizeof sh, t.shape, ndim);
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: tensor '%s': shape %s of %s overflows",
                          path, name, sh, ig_st_dtype_name(dtype));
    case IG_ST_SIZE_PARTIAL_BYTE:
        ig_st_format_shape(sh, sizeof sh, t.shape, ndim);
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: tensor '%s': shape %s of %s is not a whole number of bytes", path,
                          name, sh, ig_st_dtype_name(dtype));
    default:
        break;
    }
    if (t.bytes > UINT64_MAX - w->data_bytes || (uint64_t)(size_t)t.bytes != t.bytes)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: tensor '%s': the file would be too large",
                          path, name);
    if (!data && !fill && t.bytes)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: tensor '%s': no data for %" PRIu64 " bytes",
                          path, name, t.bytes);
    if (!grow(w->ctx, (void **)&w->t, &w->cap, w->n, sizeof *w->t) ||
        !(t.name = w_strdup(w->ctx, name)))
        return ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", path);
    w->t[w->n++] = t;
    w->data_bytes += t.bytes;
    return IG_OK;
}

ig_status ig_st_writer_add(ig_st_writer *w, const char *name, ig_st_dtype dtype,
                           const uint64_t *shape, int ndim, const void *data, ig_err *err) {
    return add(w, name, dtype, shape, ndim, data, NULL, NULL, err);
}

ig_status ig_st_writer_add_fill(ig_st_writer *w, const char *name, ig_st_dtype dtype,
                                const uint64_t *shape, int ndim, ig_st_fill_fn fill, void *user,
                                ig_err *err) {
    if (!fill)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: tensor '%s': no fill function", w->path,
                          name ? name : "");
    return add(w, name, dtype, shape, ndim, NULL, fill, user, err);
}

ig_status ig_st_writer_set_metadata(ig_st_writer *w, const char *key, const char *value,
                                    ig_err *err) {
    if (!key || !value || !utf8_valid(key) || !utf8_valid(value))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: metadata keys and values must be UTF-8",
                          w->path);
    char *v = w_strdup(w->ctx, value);
    if (!v) return ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", w->path);
    for (size_t i = 0; i < w->n_meta; i++) {
        if (strcmp(w->meta[2 * i], key) == 0) {
            w_free(w->ctx, w->meta[2 * i + 1]);
            w->meta[2 * i + 1] = v;
            return IG_OK;
        }
    }
    char *k = w_strdup(w->ctx, key);
    /* room for two more pointers: the key and the value */
    if (!k || !grow(w->ctx, (void **)&w->meta, &w->cap_meta, 2 * w->n_meta + 1, sizeof *w->meta)) {
        w_free(w->ctx, k);
        w_free(w->ctx, v);
        return ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", w->path);
    }
    w->meta[2 * w->n_meta] = k;
    w->meta[2 * w->n_meta + 1] = v;
    w->n_meta++;
    return IG_OK;
}

/* ---- the header ------------------------------------------------------------------------------ */

typedef struct sbuf {
    ig_ctx *ctx;
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->len + n + 1) c *= 2;
        char *p = w_realloc(b->ctx, b->p, c);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void puts_(sbuf *b, const char *s) {
    put(b, s, strlen(s));
}

static void put_u64(sbuf *b, uint64_t v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    put(b, tmp, (size_t)n);
}

/* A JSON string as serde_json writes it. */
static void put_json_string(sbuf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    put(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = NULL;
        char u[7];
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        default:
            if (c < 0x20) {
                memcpy(u, "\\u00", 4);
                u[4] = hex[c >> 4];
                u[5] = hex[c & 15];
                u[6] = '\0';
                esc = u;
            }
        }
        if (esc) {
            put(b, run, (size_t)(s - run));
            puts_(b, esc);
            run = s + 1;
        }
    }
    put(b, run, (size_t)(s - run));
    put(b, "\"", 1);
}

static void build_header(const ig_st_writer *w, sbuf *b) {
    put(b, "{", 1);
    if (w->n_meta) {
        puts_(b, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            if (i) put(b, ",", 1);
            put_json_string(b, w->meta[2 * i]);
            put(b, ":", 1);
            put_json_string(b, w->meta[2 * i + 1]);
        }
        put(b, "}", 1);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        if (i || w->n_meta) put(b, ",", 1);
        put_json_string(b, t->name);
        puts_(b, ":{\"dtype\":\"");
        puts_(b, ig_st_dtype_name(t->dtype));
        puts_(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) put(b, ",", 1);
            put_u64(b, t->shape[d]);
        }
        puts_(b, "],\"data_offsets\":[");
        put_u64(b, off);
        put(b, ",", 1);
        put_u64(b, off + t->bytes);
        puts_(b, "]}");
        off += t->bytes;
    }
    put(b, "}", 1);
    while (b->len % 8) put(b, " ", 1); /* the data starts 8-byte aligned */
}

/* ---- commit ---------------------------------------------------------------------------------- */

static int cmp_name_ptrs(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* IG_ERR_INVALID_ARG naming a tensor declared twice. */
static ig_status check_unique(const ig_st_writer *w, ig_err *err) {
    if (w->n < 2) return IG_OK;
    char **names = w_alloc(w->ctx, w->n * sizeof *names);
    if (!names) return ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", w->path);
    for (size_t i = 0; i < w->n; i++) names[i] = w->t[i].name;
    qsort(names, w->n, sizeof *names, cmp_name_ptrs);
    ig_status st = IG_OK;
    for (size_t i = 1; i < w->n && st == IG_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            st = ig_err_set(err, IG_ERR_INVALID_ARG, "%s: tensor '%s' is declared twice", w->path,
                            names[i]);
    w_free(w->ctx, names);
    return st;
}

static ig_status write_hashed(ig_st_writer *w, ig_xxh3_stream *h, const void *p, size_t n,
                              ig_err *err) {
    ig_xxh3_stream_update(h, p, n);
    return ig_atomic_file_write(w->af, p, n, err);
}

static ig_status write_all(ig_st_writer *w, ig_xxh3_stream *h, ig_err *err) {
    sbuf b = {.ctx = w->ctx};
    build_header(w, &b);
    ig_status st = IG_OK;
    if (b.oom) {
        st = ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory for the header", w->path);
    } else if (b.len > IG_ST_MAX_HEADER) {
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "%s: the header would be %zu bytes, over the %d-byte limit of safetensors "
                        "readers: split the tensors over several files",
                        w->path, b.len, IG_ST_MAX_HEADER);
    } else {
        uint8_t len[8];
        for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)b.len >> (8 * i));
        st = write_hashed(w, h, len, 8, err);
        if (st == IG_OK) st = write_hashed(w, h, b.p, b.len, err);
    }
    w_free(w->ctx, b.p);

    uint8_t *chunk = NULL;
    for (size_t i = 0; i < w->n && st == IG_OK; i++) {
        const wtensor *t = &w->t[i];
        if (!t->fill) {
            st = write_hashed(w, h, t->data, (size_t)t->bytes, err);
            continue;
        }
        if (!chunk && !(chunk = w_alloc(w->ctx, FILL_CHUNK))) {
            st = ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", w->path);
            break;
        }
        for (uint64_t off = 0; off < t->bytes && st == IG_OK;) {
            size_t len = t->bytes - off < FILL_CHUNK ? (size_t)(t->bytes - off) : FILL_CHUNK;
            st = t->fill(t->user, off, chunk, len, err);
            if (st != IG_OK) {
                ig_err_prefix(err, st, "%s: tensor '%s'", w->path, t->name);
                break;
            }
            st = write_hashed(w, h, chunk, len, err);
            off += len;
        }
    }
    w_free(w->ctx, chunk);
    return st;
}

ig_status ig_st_writer_commit(ig_st_writer *w, uint64_t *xxh3, ig_err *err) {
    ig_status st = check_unique(w, err);
    ig_xxh3_stream *h = NULL;
    if (st == IG_OK && !(h = ig_xxh3_stream_create()))
        st = ig_err_set(err, IG_ERR_NOMEM, "%s: out of memory", w->path);
    if (st == IG_OK) st = write_all(w, h, err);
    if (st == IG_OK && xxh3) *xxh3 = ig_xxh3_stream_digest(h);
    ig_xxh3_stream_free(h);
    if (st != IG_OK) {
        ig_st_writer_abort(w);
        return st;
    }
    st = ig_atomic_file_commit(w->af, err); /* frees af, on failure too */
    w->af = NULL;
    free_writer(w);
    return st;
}
