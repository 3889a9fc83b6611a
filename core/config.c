/* config.c - typed, schema-checked configuration from YAML files and `--set a.b=c` overrides.
 *
 * The program declares every key it knows (dotted path, type, default) in an ig_cfg_key table.
 * Nested YAML mappings map onto dotted paths ("model: {n_layer: 12}" sets "model.n_layer"; a
 * dotted key "model.n_layer: 12" works too). Anything the schema does not know is an error rather
 * than silently ignored, because a misspelt key in a training config otherwise costs a run.
 *
 * Every error names where it came from: "FILE:LINE: PATH: expected an integer, got 'abc'", or
 * "--set 'a.b=c': ...". YAML syntax errors come from libfyaml's diagnostics, which are collected
 * (never printed) and turned into "FILE:LINE:COLUMN: ..." messages.
 *
 * A load either applies completely or not at all: values are parsed into a pending set first and
 * copied into the configuration only when the whole document checked out. */
#include "core/core.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct cfg_val {
    int64_t i;
    double f;
    int b;
    char *s; /* IG_CFG_STRING only; heap */
} cfg_val;

struct ig_config {
    const ig_cfg_key *keys; /* borrowed; outlives the config */
    size_t n;
    cfg_val *vals;  /* [n] */
    char **origins; /* [n] heap strings: "default", "FILE:LINE", "--set" */
};

/* ---- schema lookups ------------------------------------------------------------------------ */

/* Lengths are compared first: path may hold a NUL (a quoted YAML key), and a schema path is
 * never read past its end. */
static long find_key(const ig_config *cfg, const char *path, size_t len) {
    for (size_t i = 0; i < cfg->n; i++)
        if (strlen(cfg->keys[i].path) == len && memcmp(cfg->keys[i].path, path, len) == 0)
            return (long)i;
    return -1;
}

/* 1 when some key lives under "prefix." (prefix of length len). */
static int is_group(const ig_config *cfg, const char *prefix, size_t len) {
    if (len == 0) return 1;
    for (size_t i = 0; i < cfg->n; i++) {
        const char *p = cfg->keys[i].path;
        if (strlen(p) > len && p[len] == '.' && memcmp(p, prefix, len) == 0) return 1;
    }
    return 0;
}

/* Length of the longest group prefix of path (0 for the top level). */
static size_t enclosing_group(const ig_config *cfg, const char *path) {
    size_t best = 0;
    for (const char *d = strchr(path, '.'); d; d = strchr(d + 1, '.'))
        if (is_group(cfg, path, (size_t)(d - path))) best = (size_t)(d - path);
    return best;
}

/* Whether key i lies under the group prefix[0..plen) (plen 0: the top level) and is the first
 * key, in schema order, of its direct child there; *c and *clen name that child. */
static int first_of_child(const ig_config *cfg, size_t i, const char *prefix, size_t plen,
                          const char **c, size_t *clen) {
    size_t skip = plen ? plen + 1 : 0;
    const char *p = cfg->keys[i].path;
    if (plen && (strncmp(p, prefix, plen) != 0 || p[plen] != '.')) return 0;
    *c = p + skip;
    *clen = strcspn(*c, ".");
    for (size_t j = 0; j < i; j++) {
        const char *q = cfg->keys[j].path;
        if (plen && (strncmp(q, prefix, plen) != 0 || q[plen] != '.')) continue;
        if (strncmp(q + skip, *c, *clen) == 0 && (q[skip + *clen] == '.' || !q[skip + *clen]))
            return 0;
    }
    return 1;
}

/* Writes the direct children of a group ("n_layer, n_head, optim") into buf. */
static void list_children(const ig_config *cfg, const char *prefix, size_t plen, char *buf,
                          size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < cfg->n; i++) {
        const char *c;
        size_t clen;
        if (!first_of_child(cfg, i, prefix, plen, &c, &clen)) continue;
        int w = snprintf(buf + n, cap - n, "%s%.*s", n ? ", " : "", (int)clen, c);
        if (w < 0 || (size_t)w >= cap - n) {
            if (cap > 5) strcpy(buf + cap - 5, ", ..");
            return;
        }
        n += (size_t)w;
    }
}

/* Edit distance between two short strings (longer ones are never "close"). */
static size_t edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 127 || lb > 127) return (size_t)-1;
    size_t row[128];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The declared key closest to a misspelt path, or NULL. A key whose last component equals the
 * path's last component also counts (a key given at the wrong nesting level). */
static const char *did_you_mean(const ig_config *cfg, const char *path) {
    const char *best = NULL;
    size_t best_d = (size_t)-1, len = strlen(path);
    size_t limit = len / 4 > 2 ? len / 4 : 2;
    const char *last = strrchr(path, '.');
    last = last ? last + 1 : path;
    for (size_t i = 0; i < cfg->n; i++) {
        const char *k = cfg->keys[i].path;
        const char *klast = strrchr(k, '.');
        klast = klast ? klast + 1 : k;
        size_t d = strcmp(klast, last) == 0 ? 1 : edit_distance(path, k);
        if (d <= limit && d < best_d) best = k, best_d = d;
    }
    return best;
}

/* "unknown key 'X' (did you mean 'Y'? known keys under 'G': a, b)" into buf. */
static void unknown_key_msg(const ig_config *cfg, const char *path, char *buf, size_t cap) {
    char children[400];
    size_t g = enclosing_group(cfg, path);
    list_children(cfg, path, g, children, sizeof children);
    const char *dym = did_you_mean(cfg, path);
    char hint[200] = "";
    if (dym) snprintf(hint, sizeof hint, "did you mean '%s'? ", dym);
    if (g)
        snprintf(buf, cap, "unknown key '%s' (%sknown keys under '%.*s': %s)", path, hint, (int)g,
                 path, children);
    else
        snprintf(buf, cap, "unknown key '%s' (%sknown top-level keys: %s)", path, hint, children);
}

/* ---- values -------------------------------------------------------------------------------- */

static const char *type_name(ig_cfg_type t) {
    switch (t) {
    case IG_CFG_INT:
        return "an integer";
    case IG_CFG_FLOAT:
        return "a number";
    case IG_CFG_BOOL:
        return "a boolean (true/false)";
    case IG_CFG_STRING:
        return "a string";
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

/* Offset of the first byte of s[0..n) that is not part of well-formed UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF), or -1 when s is all UTF-8. */
static long utf8_bad_offset(const char *s, size_t n) {
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

/* Parses text as key k's type into *out (a string value is a fresh heap copy). On failure writes
 * "expected TYPE, got 'TEXT'" into why and returns 0. */
static int parse_value(const ig_cfg_key *k, const char *text, cfg_val *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    int ok = 0;
    switch (k->type) {
    case IG_CFG_INT: {
        if (!*text || isspace((unsigned char)*text)) break;
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (*end) break;
        if (errno == ERANGE) {
            snprintf(why, cap, "integer '%.60s' is out of range", text);
            return 0;
        }
        out->i = v;
        ok = 1;
        break;
    }
    case IG_CFG_FLOAT:
        ok = parse_float(text, &out->f);
        break;
    case IG_CFG_BOOL:
        ok = parse_bool(text, &out->b);
        break;
    case IG_CFG_STRING: {
        /* YAML is UTF-8: a value a document could not hold (from --set) would make a dump that
         * does not load again */
        long bad = utf8_bad_offset(text, strlen(text));
        if (bad >= 0) {
            snprintf(why, cap, "expected a UTF-8 string, got byte 0x%02X at offset %ld",
                     (unsigned)(unsigned char)text[bad], bad);
            return 0;
        }
        out->s = strdup(text);
        if (!out->s) {
            snprintf(why, cap, "out of memory");
            return 0;
        }
        ok = 1;
        break;
    }
    }
    if (!ok) {
        if (*text)
            snprintf(why, cap, "expected %s, got '%.60s%s'", type_name(k->type), text,
                     strlen(text) > 60 ? "..." : "");
        else
            snprintf(why, cap, "expected %s, got an empty value", type_name(k->type));
    }
    return ok;
}

/* ---- create / free / getters --------------------------------------------------------------- */

ig_status ig_config_create(ig_config **out, const ig_cfg_key *keys, size_t n_keys, ig_err *err) {
    *out = NULL;
    ig_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a configuration");
    cfg->keys = keys;
    cfg->n = n_keys;
    cfg->vals = calloc(n_keys ? n_keys : 1, sizeof *cfg->vals);
    cfg->origins = calloc(n_keys ? n_keys : 1, sizeof *cfg->origins);
    if (!cfg->vals || !cfg->origins) {
        ig_config_free(cfg);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a configuration");
    }
    for (size_t i = 0; i < n_keys; i++) {
        const ig_cfg_key *k = &keys[i];
        if (!k->path || !*k->path || k->path[0] == '.' || k->path[strlen(k->path) - 1] == '.' ||
            strstr(k->path, "..") || find_key(cfg, k->path, strlen(k->path)) != (long)i ||
            is_group(cfg, k->path, strlen(k->path))) {
            ig_config_free(cfg);
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "configuration schema: key %zu ('%s') is empty, malformed, "
                              "duplicated or also used as a group",
                              i, k->path ? k->path : "(null)");
        }
        char why[256];
        if (!parse_value(k, k->default_val ? k->default_val : (k->type == IG_CFG_STRING ? "" : "0"),
                         &cfg->vals[i], why, sizeof why)) {
            ig_config_free(cfg);
            return ig_err_set(err, IG_ERR_INVALID_ARG, "configuration schema: default of '%s': %s",
                              k->path, why);
        }
        cfg->origins[i] = strdup("default");
        if (!cfg->origins[i]) {
            ig_config_free(cfg);
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a configuration");
        }
    }
    *out = cfg;
    return IG_OK;
}

void ig_config_free(ig_config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; cfg->vals && i < cfg->n; i++) free(cfg->vals[i].s);
    for (size_t i = 0; cfg->origins && i < cfg->n; i++) free(cfg->origins[i]);
    free(cfg->vals);
    free(cfg->origins);
    free(cfg);
}

/* Replaces key i's value and origin (takes ownership of v->s and origin). */
static void assign(ig_config *cfg, size_t i, cfg_val *v, char *origin) {
    free(cfg->vals[i].s);
    cfg->vals[i] = *v;
    free(cfg->origins[i]);
    cfg->origins[i] = origin;
}

static const cfg_val *lookup(const ig_config *cfg, const char *path, ig_cfg_type type) {
    long i = cfg ? find_key(cfg, path, strlen(path)) : -1;
    assert(i >= 0 && "ig_config: unknown key");
    if (i < 0 || cfg->keys[i].type != type) {
        assert(0 && "ig_config: key read with the wrong type");
        return NULL;
    }
    return &cfg->vals[i];
}

int64_t ig_config_int(const ig_config *cfg, const char *path) {
    const cfg_val *v = lookup(cfg, path, IG_CFG_INT);
    return v ? v->i : 0;
}

double ig_config_float(const ig_config *cfg, const char *path) {
    const cfg_val *v = lookup(cfg, path, IG_CFG_FLOAT);
    return v ? v->f : 0.0;
}

int ig_config_bool(const ig_config *cfg, const char *path) {
    const cfg_val *v = lookup(cfg, path, IG_CFG_BOOL);
    return v ? v->b : 0;
}

const char *ig_config_string(const ig_config *cfg, const char *path) {
    const cfg_val *v = lookup(cfg, path, IG_CFG_STRING);
    return v && v->s ? v->s : "";
}

const char *ig_config_origin(const ig_config *cfg, const char *path) {
    long i = cfg ? find_key(cfg, path, strlen(path)) : -1;
    assert(i >= 0 && "ig_config: unknown key");
    return i >= 0 ? cfg->origins[i] : "unknown";
}

/* ---- YAML loading -------------------------------------------------------------------------- */

/* Values parsed from one document, applied only when all of it is valid. */
typedef struct pending {
    cfg_val *vals;  /* [n] */
    char **origins; /* [n]; NULL: key not set by this document */
} pending;

static void pending_free(pending *pd, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (pd->origins && pd->origins[i]) free(pd->vals[i].s);
        if (pd->origins) free(pd->origins[i]);
    }
    free(pd->vals);
    free(pd->origins);
}

/* 1-based line of a node (its first scalar), or 0 when libfyaml does not know it. */
static int node_line(struct fy_node *fyn) {
    if (!fyn) return 0;
    if (fy_node_is_scalar(fyn)) {
        const struct fy_mark *m = fy_token_start_mark(fy_node_get_scalar_token(fyn));
        return m ? m->line + 1 : 0;
    }
    void *it = NULL;
    if (fy_node_is_mapping(fyn)) {
        struct fy_node_pair *p = fy_node_mapping_iterate(fyn, &it);
        return p ? node_line(fy_node_pair_key(p)) : 0;
    }
    if (fy_node_is_sequence(fyn)) return node_line(fy_node_sequence_iterate(fyn, &it));
    return 0;
}

static const char *node_kind(struct fy_node *fyn) {
    return fy_node_is_mapping(fyn) ? "a mapping" : fy_node_is_sequence(fyn) ? "a list" : "a value";
}

/* "NAME:LINE: " (or "NAME: " when the line is unknown) into buf. */
static void where(char *buf, size_t cap, const char *name, int line) {
    if (line > 0)
        snprintf(buf, cap, "%s:%d", name, line);
    else
        snprintf(buf, cap, "%s", name);
}

/* Checks one mapping whose keys live under prefix (length plen, "" at the top level) and records
 * the values it sets in pd. */
static ig_status walk(const ig_config *cfg, struct fy_node *map, const char *prefix, size_t plen,
                      const char *name, pending *pd, ig_err *err) {
    void *it = NULL;
    struct fy_node_pair *pair;
    char loc[1100];
    while ((pair = fy_node_mapping_iterate(map, &it))) {
        struct fy_node *key = fy_node_pair_key(pair), *val = fy_node_pair_value(pair);
        int kline = node_line(key);
        where(loc, sizeof loc, name, kline);
        size_t klen = 0;
        const char *ktext = key && fy_node_is_scalar(key) ? fy_node_get_scalar(key, &klen) : NULL;
        if (!ktext || klen == 0 || memchr(ktext, '\0', klen))
            return ig_err_set(err, IG_ERR_CONFIG, "%s: keys must be plain names%s%.*s%s", loc,
                              plen ? " (under '" : "", (int)plen, prefix, plen ? "')" : "");
        size_t flen = plen + (plen ? 1 : 0) + klen;
        char *full = malloc(flen + 1);
        if (!full) return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
        snprintf(full, flen + 1, "%.*s%s%.*s", (int)plen, prefix, plen ? "." : "", (int)klen,
                 ktext);
        long idx = find_key(cfg, full, flen);
        ig_status st = IG_OK;
        if (idx >= 0) {
            const ig_cfg_key *k = &cfg->keys[idx];
            int vline = val && fy_node_is_scalar(val) ? node_line(val) : 0;
            where(loc, sizeof loc, name, vline ? vline : kline);
            if (val && !fy_node_is_scalar(val)) {
                st = ig_err_set(err, IG_ERR_CONFIG, "%s: %s: expected %s, got %s", loc, full,
                                type_name(k->type), node_kind(val));
            } else {
                const char *text = val ? fy_node_get_scalar0(val) : "";
                char why[256];
                cfg_val v;
                if (!text) {
                    st = ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
                } else if (!parse_value(k, text, &v, why, sizeof why)) {
                    st = ig_err_set(err, IG_ERR_CONFIG, "%s: %s: %s", loc, full, why);
                } else {
                    char *origin = strdup(loc);
                    if (!origin) {
                        free(v.s);
                        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
                    } else {
                        if (pd->origins[idx]) free(pd->vals[idx].s);
                        free(pd->origins[idx]);
                        pd->vals[idx] = v;
                        pd->origins[idx] = origin;
                    }
                }
            }
        } else if (is_group(cfg, full, flen)) {
            if (val && fy_node_is_mapping(val)) {
                st = walk(cfg, val, full, flen, name, pd, err);
            } else if (val &&
                       !(fy_node_is_scalar(val) && fy_node_get_scalar(val, &klen) && klen == 0)) {
                char children[400];
                list_children(cfg, full, flen, children, sizeof children);
                const char *text = fy_node_is_scalar(val) ? fy_node_get_scalar0(val) : NULL;
                st = ig_err_set(
                    err, IG_ERR_CONFIG,
                    "%s: '%s' is a group of keys (%s) and needs a mapping, got %s%.60s%s", loc,
                    full, children, text ? "'" : node_kind(val), text ? text : "", text ? "'" : "");
            }
        } else {
            char msg[900];
            unknown_key_msg(cfg, full, msg, sizeof msg);
            st = ig_err_set(err, IG_ERR_CONFIG, "%s: %s", loc, msg);
        }
        free(full);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}

/* libfyaml's diagnostics: errors are collected (see fy_diag_set_collect_errors); anything it
 * still writes (a final "failed" line) lands here instead of on stderr. */
typedef struct diag_sink {
    char text[512];
    size_t len;
} diag_sink;

static void diag_output(struct fy_diag *diag, void *user, const char *buf, size_t len) {
    (void)diag;
    diag_sink *s = user;
    size_t room = sizeof s->text - 1 - s->len;
    if (len > room) len = room;
    memcpy(s->text + s->len, buf, len);
    s->len += len;
    s->text[s->len] = '\0';
}

/* 1 when text holds only blank lines, comments and document markers (an empty config). */
static int is_blank_yaml(const char *text, size_t len) {
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) j++;
        size_t e = j;
        while (e < len && text[e] != '\n') e++;
        size_t n = e - j;
        int ok = n == 0 || text[j] == '#' ||
                 (n >= 3 && strncmp(text + j, "---", 3) == 0 && (n == 3 || text[j + 3] == ' ')) ||
                 (n == 3 && strncmp(text + j, "...", 3) == 0);
        if (!ok) return 0;
        i = e + 1;
    }
    return 1;
}

ig_status ig_config_load_string(ig_config *cfg, const char *text, size_t len, const char *name,
                                ig_err *err) {
    if (!name) name = "<config>";
    /* YAML is UTF-8, and libfyaml 0.7 loops forever on some invalid bytes (e.g. "%\xC3", a
     * directive cut short): check before parsing */
    long bad = utf8_bad_offset(text, len);
    if (bad >= 0) {
        int line = 1, col = 1;
        for (long i = 0; i < bad; i++) {
            col++;
            if (text[i] == '\n') line++, col = 1;
        }
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s:%d:%d: not UTF-8 text (byte 0x%02X): save the file as UTF-8", name,
                          line, col, (unsigned)(unsigned char)text[bad]);
    }
    diag_sink sink = {.len = 0};
    struct fy_diag_cfg dcfg;
    fy_diag_cfg_default(&dcfg);
    dcfg.fp = NULL;
    dcfg.output_fn = diag_output;
    dcfg.user = &sink;
    dcfg.colorize = false;
    dcfg.level = FYET_ERROR;
    struct fy_diag *diag = fy_diag_create(&dcfg);
    if (!diag) return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
    fy_diag_set_collect_errors(diag, true);
    struct fy_parse_cfg pcfg = {.flags = FYPCF_QUIET | FYPCF_RESOLVE_DOCUMENT | FYPCF_JSON_NONE,
                                .diag = diag};
    struct fy_document *fyd = fy_document_build_from_string(&pcfg, text, len);
    ig_status st = IG_OK;
    if (!fyd) {
        void *it = NULL;
        struct fy_diag_error *e = fy_diag_errors_iterate(diag, &it);
        if (e)
            st = ig_err_set(err, IG_ERR_CONFIG, "%s:%d:%d: YAML syntax error: %s", name, e->line,
                            e->column, e->msg ? e->msg : "invalid YAML");
        else if (!is_blank_yaml(text, len))
            st = ig_err_set(err, IG_ERR_CONFIG, "%s: cannot parse YAML%s%.*s", name,
                            sink.len ? ": " : "", (int)strcspn(sink.text, "\n"), sink.text);
        fy_diag_destroy(diag);
        return st;
    }
    struct fy_node *root = fy_document_root(fyd);
    size_t rlen = 0;
    pending pd = {calloc(cfg->n ? cfg->n : 1, sizeof *pd.vals),
                  calloc(cfg->n ? cfg->n : 1, sizeof *pd.origins)};
    if (!pd.vals || !pd.origins) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
    } else if (root && fy_node_is_mapping(root)) {
        st = walk(cfg, root, "", 0, name, &pd, err);
    } else if (root && !(fy_node_is_scalar(root) && fy_node_get_scalar(root, &rlen) && rlen == 0)) {
        char loc[1100];
        where(loc, sizeof loc, name, node_line(root));
        const char *t = fy_node_is_scalar(root) ? fy_node_get_scalar0(root) : NULL;
        st = ig_err_set(err, IG_ERR_CONFIG,
                        "%s: expected a mapping of keys at the top level (e.g. 'section:' lines), "
                        "got %s%.60s%s",
                        loc, t ? "'" : node_kind(root), t ? t : "", t ? "'" : "");
    }
    if (st == IG_OK) {
        for (size_t i = 0; i < cfg->n; i++) {
            if (!pd.origins[i]) continue;
            assign(cfg, i, &pd.vals[i], pd.origins[i]);
            pd.origins[i] = NULL; /* ownership moved */
        }
    }
    pending_free(&pd, cfg->n);
    fy_document_destroy(fyd);
    fy_diag_destroy(diag);
    return st;
}

ig_status ig_config_load_file(ig_config *cfg, const char *path, ig_err *err) {
    char *text;
    size_t len;
    /* a config is a few KB: a cap stops the wrong file (/dev/zero, a FIFO: refused) early */
    ig_status st = ig_read_file_max(path, (size_t)16 << 20, &text, &len, err);
    if (st != IG_OK) return st;
    st = ig_config_load_string(cfg, text, len, path, err);
    free(text);
    return st;
}

/* ---- overrides ----------------------------------------------------------------------------- */

ig_status ig_config_set(ig_config *cfg, const char *assignment, ig_err *err) {
    const char *eq = strchr(assignment, '=');
    if (!eq)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "--set '%s': expected KEY=VALUE (e.g. --set preprocess.workers=8)",
                          assignment);
    const char *k0 = assignment, *k1 = eq;
    while (k0 < k1 && isspace((unsigned char)*k0)) k0++;
    while (k1 > k0 && isspace((unsigned char)k1[-1])) k1--;
    size_t klen = (size_t)(k1 - k0);
    if (klen == 0)
        return ig_err_set(err, IG_ERR_CONFIG, "--set '%s': the key before '=' is empty",
                          assignment);
    char *key = strndup(k0, klen);
    const char *v0 = eq + 1, *v1 = eq + 1 + strlen(eq + 1);
    while (v0 < v1 && isspace((unsigned char)*v0)) v0++;
    while (v1 > v0 && isspace((unsigned char)v1[-1])) v1--;
    /* a quoted value is a YAML quoted scalar: drop the quotes */
    if (v1 - v0 >= 2 && (*v0 == '"' || *v0 == '\'') && v1[-1] == *v0) v0++, v1--;
    char *text = strndup(v0, (size_t)(v1 - v0));
    char *origin = strdup("--set");
    ig_status st = IG_OK;
    if (!key || !text || !origin) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else {
        long idx = find_key(cfg, key, klen);
        char why[900];
        cfg_val v;
        if (idx < 0 && is_group(cfg, key, klen)) {
            list_children(cfg, key, klen, why, sizeof why);
            st = ig_err_set(err, IG_ERR_CONFIG,
                            "--set '%s': '%s' is a group of keys, not a key (keys under it: %s)",
                            assignment, key, why);
        } else if (idx < 0) {
            unknown_key_msg(cfg, key, why, sizeof why);
            st = ig_err_set(err, IG_ERR_CONFIG, "--set '%s': %s", assignment, why);
        } else if (!parse_value(&cfg->keys[idx], text, &v, why, sizeof why)) {
            st = ig_err_set(err, IG_ERR_CONFIG, "--set '%s': %s: %s", assignment, key, why);
        } else {
            assign(cfg, (size_t)idx, &v, origin);
            origin = NULL;
        }
    }
    free(key);
    free(text);
    free(origin);
    return st;
}

/* ---- dump ---------------------------------------------------------------------------------- */

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

/* Writes key i's value as YAML; returns the number of characters written. */
static size_t put_value(FILE *out, const ig_config *cfg, size_t i) {
    const cfg_val *v = &cfg->vals[i];
    switch (cfg->keys[i].type) {
    case IG_CFG_INT:
        return (size_t)fprintf(out, "%lld", (long long)v->i);
    case IG_CFG_BOOL:
        return (size_t)fprintf(out, "%s", v->b ? "true" : "false");
    case IG_CFG_STRING:
        return put_quoted(out, v->s ? v->s : "");
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

/* Writes the keys under the group path[0..plen) (plen 0: the top level) at depth `depth`, in the
 * order the schema declares them (a group appears where its first key is declared). */
static void dump_group(const ig_config *cfg, FILE *out, int origins, const char *prefix,
                       size_t plen, int depth) {
    for (size_t i = 0; i < cfg->n; i++) {
        const char *c;
        size_t clen;
        if (!first_of_child(cfg, i, prefix, plen, &c, &clen)) continue;
        if (c[clen] == '.') {
            fprintf(out, "%*s%.*s:\n", depth * 2, "", (int)clen, c);
            const char *p = cfg->keys[i].path;
            dump_group(cfg, out, origins, p, (size_t)(c - p) + clen, depth + 1);
            continue;
        }
        int w = fprintf(out, "%*s%.*s: ", depth * 2, "", (int)clen, c);
        size_t col = (w > 0 ? (size_t)w : 0) + put_value(out, cfg, i);
        if (origins) fprintf(out, "%*s# %s", col < 40 ? (int)(40 - col) : 1, "", cfg->origins[i]);
        fputc('\n', out);
    }
}

static ig_status dump(const ig_config *cfg, FILE *out, int origins, ig_err *err) {
    dump_group(cfg, out, origins, "", 0, 0);
    if (fflush(out) != 0 || ferror(out))
        return ig_err_errno(err, errno, "cannot write the configuration");
    return IG_OK;
}

ig_status ig_config_dump(const ig_config *cfg, FILE *out, ig_err *err) {
    return dump(cfg, out, 0, err);
}

ig_status ig_config_dump_origins(const ig_config *cfg, FILE *out, ig_err *err) {
    return dump(cfg, out, 1, err);
}
