/* config_value.c - the values of a configuration: parsing text into each key type (with range and
 * choice checks that name what was expected), writing them back as YAML, and binding them into
 * the options struct a key table describes (offsetof + sizeof of each field).
 */
#include "config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *ig_cfg_type_name(const ig_cfg_key *k, char *buf, size_t cap) {
    switch (k->type) {
    case IG_CFG_INT:
        return "an integer";
    case IG_CFG_FLOAT:
        return "a number";
    case IG_CFG_BOOL:
        return "a boolean (true/false)";
    case IG_CFG_STRING:
        return "a string";
    case IG_CFG_SIZE:
        return "a size (e.g. 4096, 1GB, 512MiB)";
    case IG_CFG_LIST:
        return "a list of strings";
    case IG_CFG_ENUM: {
        size_t n = (size_t)snprintf(buf, cap, "one of ");
        for (size_t i = 0; k->choices && k->choices[i] && n < cap; i++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", k->choices[i]);
        return buf;
    }
    }
    return "a value";
}

static int parse_bool(const char *s, int *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = 1, 1;
        if (strcasecmp(s, no[i]) == 0) return *out = 0, 1;
    }
    return 0;
}

static int parse_float(const char *s, double *out) {
    const char *p = s;
    double sign = 1;
    if (*p == '+' || *p == '-') sign = *p++ == '-' ? -1 : 1;
    if (strcasecmp(p, ".inf") == 0) return *out = sign * INFINITY, 1;
    if (strcasecmp(s, ".nan") == 0) return *out = NAN, 1;
    if (!*s || isspace((unsigned char)*s)) return 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE) return 0;
    *out = v;
    return 1;
}

long ig_cfg_utf8_bad_offset(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t m = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (m == 0 || m > n - i) return (long)i;
        for (size_t k = 1; k < m; k++)
            if ((p[i + k] & 0xC0) != 0x80) return (long)i;
        if ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] > 0x9F) ||
            (c == 0xF0 && p[i + 1] < 0x90) || (c == 0xF4 && p[i + 1] > 0x8F))
            return (long)i;
        i += m;
    }
    return -1;
}

/* A UTF-8 string: YAML is UTF-8, and a value a document could not hold (from --set or a flag)
 * would make a dump that does not load again. */
static int utf8_ok(const char *text, char *why, size_t cap) {
    long bad = ig_cfg_utf8_bad_offset(text, strlen(text));
    if (bad < 0) return 1;
    snprintf(why, cap, "expected a UTF-8 string, got byte 0x%02X at offset %ld",
             (unsigned)(unsigned char)text[bad], bad);
    return 0;
}

static int has_range(const ig_cfg_key *k) {
    return k->min < k->max;
}

static int out_of_range(const ig_cfg_key *k, double v, const char *text, char *why, size_t cap) {
    if (!has_range(k) || (v >= k->min && v <= k->max)) return 0;
    snprintf(why, cap, "must be in [%.15g, %.15g], got %.60s", k->min, k->max, text);
    return 1;
}

void ig_cfg_val_free(cfg_val *v) {
    free(v->s);
    for (size_t i = 0; i < v->n_items; i++) free(v->items[i]);
    free(v->items);
    memset(v, 0, sizeof *v);
}

int ig_cfg_parse_items(const ig_cfg_key *k, const char *const *items, size_t n, cfg_val *out,
                       char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    out->items = calloc(n ? n : 1, sizeof *out->items);
    if (!out->items) {
        snprintf(why, cap, "out of memory");
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (!utf8_ok(items[i], why, cap) || !(out->items[i] = strdup(items[i]))) {
            if (out->items[i] == NULL && !why[0]) snprintf(why, cap, "out of memory");
            out->n_items = i;
            ig_cfg_val_free(out);
            return 0;
        }
        out->n_items = i + 1;
    }
    (void)k;
    return 1;
}

/* A default list "a,b,c" (empty text: no items). */
static int parse_default_list(const ig_cfg_key *k, const char *text, cfg_val *out, char *why,
                              size_t cap) {
    char *copy = strdup(text);
    const char *items[64];
    size_t n = 0;
    if (!copy) return snprintf(why, cap, "out of memory"), 0;
    for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && n < 64;
         t = strtok_r(NULL, ",", &save))
        items[n++] = t;
    int ok = ig_cfg_parse_items(k, items, n, out, why, cap);
    free(copy);
    return ok;
}

int ig_cfg_parse_value(const ig_cfg_key *k, const char *text, cfg_val *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    why[0] = '\0';
    int ok = 0;
    char tn[256];
    switch (k->type) {
    case IG_CFG_INT: {
        if (!*text || isspace((unsigned char)*text)) break;
        char *end;
        errno = 0;
        if (!k->is_signed && k->size == 8 && text[0] == '-') {
            snprintf(why, cap, "must be >= 0, got %.60s", text);
            return 0;
        }
        if (!k->is_signed && k->size == 8) { /* a uint64_t: all of its range */
            unsigned long long u = strtoull(text, &end, 10);
            if (*end) break;
            if (errno == ERANGE) {
                snprintf(why, cap, "integer '%.60s' is out of range", text);
                return 0;
            }
            if (out_of_range(k, (double)u, text, why, cap)) return 0;
            out->i = (int64_t)u;
            ok = 1;
            break;
        }
        long long v = strtoll(text, &end, 10);
        if (*end) break;
        if (errno == ERANGE) {
            snprintf(why, cap, "integer '%.60s' is out of range", text);
            return 0;
        }
        if (out_of_range(k, (double)v, text, why, cap)) return 0;
        out->i = v;
        ok = 1;
        break;
    }
    case IG_CFG_FLOAT:
        ok = parse_float(text, &out->f);
        if (ok && (isnan(out->f) ? has_range(k) : out_of_range(k, out->f, text, why, cap))) {
            if (!why[0])
                snprintf(why, cap, "must be a number in [%g, %g], got .nan", k->min, k->max);
            return 0;
        }
        break;
    case IG_CFG_BOOL:
        ok = parse_bool(text, &out->b);
        break;
    case IG_CFG_SIZE: {
        ig_err e = {0};
        if (!*text) break;
        if (ig_parse_size(text, &out->u, &e) != IG_OK) {
            snprintf(why, cap, "expected a size (e.g. 4096, 1GB, 512MiB), got '%.60s'", text);
            return 0;
        }
        if (out_of_range(k, (double)out->u, text, why, cap)) return 0;
        ok = 1;
        break;
    }
    case IG_CFG_ENUM:
        for (size_t c = 0; k->choices && k->choices[c]; c++)
            if (strcmp(text, k->choices[c]) == 0) {
                out->i = (int64_t)c;
                ok = 1;
            }
        if (!ok) {
            snprintf(why, cap, "expected %s, got '%.60s'", ig_cfg_type_name(k, tn, sizeof tn),
                     text);
            return 0;
        }
        break;
    case IG_CFG_STRING:
        if (!utf8_ok(text, why, cap)) return 0;
        out->s = strdup(text);
        if (!out->s) {
            snprintf(why, cap, "out of memory");
            return 0;
        }
        ok = 1;
        break;
    case IG_CFG_LIST: {
        /* one scalar is a list of one; "" is the empty list */
        const char *one[1] = {text};
        return ig_cfg_parse_items(k, one, *text ? 1 : 0, out, why, cap);
    }
    }
    if (!ok) {
        if (*text)
            snprintf(why, cap, "expected %s, got '%.60s%s'", ig_cfg_type_name(k, tn, sizeof tn),
                     text, strlen(text) > 60 ? "..." : "");
        else
            snprintf(why, cap, "expected %s, got an empty value",
                     ig_cfg_type_name(k, tn, sizeof tn));
    }
    return ok;
}

/* The default of key k, parsed. */
int ig_cfg_parse_default(const ig_cfg_key *k, cfg_val *out, char *why, size_t cap) {
    const char *d = k->default_val;
    if (k->type == IG_CFG_LIST) return parse_default_list(k, d ? d : "", out, why, cap);
    if (!d) d = k->type == IG_CFG_STRING ? "" : k->type == IG_CFG_ENUM ? "" : "0";
    if (k->type == IG_CFG_ENUM && !*d && k->choices && k->choices[0]) d = k->choices[0];
    return ig_cfg_parse_value(k, d, out, why, cap);
}

/* ---- YAML output --------------------------------------------------------------------------- */

/* Writes s as a YAML double-quoted scalar; returns the number of characters written. */
static size_t put_quoted(FILE *out, const char *s) {
    size_t n = 1;
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            n += (size_t)fprintf(out, "\\\"");
            break;
        case '\\':
            n += (size_t)fprintf(out, "\\\\");
            break;
        case '\n':
            n += (size_t)fprintf(out, "\\n");
            break;
        case '\t':
            n += (size_t)fprintf(out, "\\t");
            break;
        case '\r':
            n += (size_t)fprintf(out, "\\r");
            break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                n += (size_t)fprintf(out, "\\x%02x", *p);
            else
                fputc(*p, out), n++;
        }
    }
    fputc('"', out);
    return n + 1;
}

size_t ig_cfg_put_value(FILE *out, const ig_config *cfg, size_t i) {
    const cfg_val *v = &cfg->vals[i];
    const ig_cfg_key *k = cfg->keys[i];
    switch (k->type) {
    case IG_CFG_INT:
        return (size_t)fprintf(out, "%lld", (long long)v->i);
    case IG_CFG_SIZE:
        return (size_t)fprintf(out, "%llu", (unsigned long long)v->u);
    case IG_CFG_BOOL:
        return (size_t)fprintf(out, "%s", v->b ? "true" : "false");
    case IG_CFG_STRING:
        return put_quoted(out, v->s ? v->s : "");
    case IG_CFG_ENUM:
        return (size_t)fprintf(out, "%s", k->choices[v->i]);
    case IG_CFG_LIST: {
        size_t n = (size_t)fprintf(out, "[");
        for (size_t j = 0; j < v->n_items; j++) {
            if (j) n += (size_t)fprintf(out, ", ");
            n += put_quoted(out, v->items[j]);
        }
        return n + (size_t)fprintf(out, "]");
    }
    case IG_CFG_FLOAT: {
        char buf[64];
        if (isnan(v->f))
            snprintf(buf, sizeof buf, ".nan");
        else if (isinf(v->f))
            snprintf(buf, sizeof buf, "%s.inf", v->f < 0 ? "-" : "");
        else {
            snprintf(buf, sizeof buf, "%.17g", v->f);
            if (!strpbrk(buf, ".eE")) strcat(buf, ".0");
        }
        return (size_t)fprintf(out, "%s", buf);
    }
    }
    return 0;
}

/* ---- binding ------------------------------------------------------------------------------- */

static ig_status bind_int(const ig_cfg_key *k, char *field, int64_t v, ig_err *err) {
    int fits;
    switch (k->size) {
    case 1:
        fits = k->is_signed ? v >= INT8_MIN && v <= INT8_MAX : v >= 0 && v <= UINT8_MAX;
        break;
    case 2:
        fits = k->is_signed ? v >= INT16_MIN && v <= INT16_MAX : v >= 0 && v <= UINT16_MAX;
        break;
    case 4:
        fits = k->is_signed ? v >= INT32_MIN && v <= INT32_MAX : v >= 0 && v <= (int64_t)UINT32_MAX;
        break;
    case 8: /* an unsigned one holds the bits of a value parsed as unsigned (never negative) */
        fits = 1;
        break;
    default:
        return ig_err_set(err, IG_ERR_INTERNAL, "%s: bound to a field of %zu bytes", k->path,
                          k->size);
    }
    if (!fits)
        return ig_err_set(err, IG_ERR_CONFIG, "%s: %lld does not fit (%s%zu-bit)", k->path,
                          (long long)v, k->is_signed ? "signed " : "unsigned ", k->size * 8);
    if (k->size == 1) {
        int8_t x = (int8_t)v;
        memcpy(field, &x, 1);
    } else if (k->size == 2) {
        int16_t x = (int16_t)v;
        memcpy(field, &x, 2);
    } else if (k->size == 4) {
        int32_t x = (int32_t)v;
        memcpy(field, &x, 4);
    } else {
        memcpy(field, &v, 8);
    }
    return IG_OK;
}

ig_status ig_config_bind(const ig_config *cfg, const ig_cfg_key *table, size_t n, void *dst,
                         ig_err *err) {
    char *base = dst;
    for (size_t i = 0; i < cfg->n; i++) {
        const ig_cfg_key *k = cfg->keys[i];
        if (k < table || k >= table + n || k->size == 0) continue;
        const cfg_val *v = &cfg->vals[i];
        char *field = base + k->offset;
        ig_status st = IG_OK;
        switch (k->type) {
        case IG_CFG_INT:
        case IG_CFG_ENUM:
            st = bind_int(k, field, v->i, err);
            break;
        case IG_CFG_BOOL:
            st = bind_int(k, field, v->b, err);
            break;
        case IG_CFG_SIZE:
            if (k->size != sizeof(uint64_t))
                return ig_err_set(err, IG_ERR_INTERNAL, "%s: a size needs a uint64_t", k->path);
            memcpy(field, &v->u, sizeof v->u);
            break;
        case IG_CFG_FLOAT:
            if (k->size == sizeof(double)) {
                memcpy(field, &v->f, sizeof v->f);
            } else if (k->size == sizeof(float)) {
                float f = (float)v->f;
                memcpy(field, &f, sizeof f);
            } else {
                return ig_err_set(err, IG_ERR_INTERNAL, "%s: a number needs a float or double",
                                  k->path);
            }
            break;
        case IG_CFG_STRING: {
            const char *s = v->s ? v->s : "";
            memcpy(field, &s, sizeof s);
            break;
        }
        case IG_CFG_LIST: {
            const char *const *items = (const char *const *)v->items;
            memcpy(field, &items, sizeof items);
            memcpy(base + k->count_offset, &v->n_items, sizeof v->n_items);
            break;
        }
        }
        if (st != IG_OK) return st;
    }
    return IG_OK;
}
