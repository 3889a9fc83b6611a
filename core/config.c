/* config.c - typed, schema-checked configuration from YAML files, `--set a.b=c` overrides and
 * command-line flags (values, binding and output are in config_value.c).
 *
 * Each module declares the keys it knows (dotted path, type, default, flag, bound field) in an
 * ig_cfg_key table beside its options struct; a configuration holds one or more such tables.
 * Nested YAML mappings map onto dotted paths ("model: {n_layer: 12}" sets "model.n_layer"; a
 * dotted key "model.n_layer: 12" works too). Anything the schema does not know is an error rather
 * than silently ignored, because a misspelt key in a training config otherwise costs a run.
 *
 * Every error names where it came from: "FILE:LINE: PATH: expected an integer, got 'abc'", or
 * "--set 'a.b=c': ...". The YAML itself is read by ig_yaml_load_string (config_yaml.c), which
 * refuses what a config has no use for (NUL bytes, several documents, anchors and aliases,
 * duplicate keys) with "FILE:LINE:COLUMN: ..." messages.
 *
 * A load either applies completely or not at all: values are parsed into a pending set first and
 * copied into the configuration only when the whole document checked out. */
#include "config_internal.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- schema lookups ------------------------------------------------------------------------ */

/* Lengths are compared first: path may hold a NUL (a quoted YAML key), and a schema path is
 * never read past its end. */
static long find_key(const ig_config *cfg, const char *path, size_t len) {
    for (size_t i = 0; i < cfg->n; i++)
        if (strlen(cfg->keys[i]->path) == len && memcmp(cfg->keys[i]->path, path, len) == 0)
            return (long)i;
    return -1;
}

/* 1 when some key lives under "prefix." (prefix of length len). */
static int is_group(const ig_config *cfg, const char *prefix, size_t len) {
    if (len == 0) return 1;
    for (size_t i = 0; i < cfg->n; i++) {
        const char *p = cfg->keys[i]->path;
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
    const char *p = cfg->keys[i]->path;
    if (plen && (strncmp(p, prefix, plen) != 0 || p[plen] != '.')) return 0;
    *c = p + skip;
    *clen = strcspn(*c, ".");
    for (size_t j = 0; j < i; j++) {
        const char *q = cfg->keys[j]->path;
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

size_t ig_edit_distance(const char *a, const char *b) {
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
        const char *k = cfg->keys[i]->path;
        const char *klast = strrchr(k, '.');
        klast = klast ? klast + 1 : k;
        size_t d = strcmp(klast, last) == 0 ? 1 : ig_edit_distance(path, k);
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

/* ---- create / free / getters --------------------------------------------------------------- */

ig_status ig_config_create(ig_config **out, const ig_cfg_key *keys, size_t n_keys, ig_err *err) {
    *out = NULL;
    ig_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a configuration");
    ig_status st = ig_config_add_keys(cfg, keys, n_keys, err);
    if (st != IG_OK) {
        ig_config_free(cfg);
        return st;
    }
    *out = cfg;
    return IG_OK;
}

/* A flag name of key k into buf, or NULL when it has none. */
const char *ig_config_flag_name(const ig_cfg_key *k, char *buf, size_t cap) {
    if (k->flag && !*k->flag) return NULL;
    const char *f = k->flag;
    if (!f) {
        const char *dot = strrchr(k->path, '.');
        f = dot ? dot + 1 : k->path;
    }
    snprintf(buf, cap, "%s", f);
    for (char *p = buf; *p; p++)
        if (*p == '_') *p = '-';
    return buf;
}

ig_status ig_config_add_keys(ig_config *cfg, const ig_cfg_key *keys, size_t n_keys, ig_err *err) {
    size_t n0 = cfg->n, n = n0 + n_keys;
    const ig_cfg_key **nk = realloc(cfg->keys, (n ? n : 1) * sizeof *nk);
    if (nk) cfg->keys = nk;
    cfg_val *nv = nk ? realloc(cfg->vals, (n ? n : 1) * sizeof *nv) : NULL;
    if (nv) cfg->vals = nv;
    char **no = nv ? realloc(cfg->origins, (n ? n : 1) * sizeof *no) : NULL;
    if (no) cfg->origins = no;
    if (!nk || !nv || !no)
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a configuration");
    for (size_t i = 0; i < n_keys; i++) {
        cfg->keys[n0 + i] = &keys[i];
        memset(&cfg->vals[n0 + i], 0, sizeof cfg->vals[0]);
        cfg->origins[n0 + i] = NULL;
    }
    cfg->n = n;
    ig_status st = IG_OK;
    for (size_t i = n0; i < n && st == IG_OK; i++) {
        const ig_cfg_key *k = cfg->keys[i];
        char why[512], fa[128], fb[128];
        if (!k->path || !*k->path || k->path[0] == '.' || k->path[strlen(k->path) - 1] == '.' ||
            strstr(k->path, "..") || find_key(cfg, k->path, strlen(k->path)) != (long)i ||
            is_group(cfg, k->path, strlen(k->path))) {
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "configuration schema: key %zu ('%s') is empty, malformed, "
                            "duplicated or also used as a group",
                            i, k->path ? k->path : "(null)");
        } else if ((k->type == IG_CFG_ENUM && (!k->choices || !k->choices[0])) ||
                   (k->type == IG_CFG_LIST && k->size && k->count_offset == k->offset)) {
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "configuration schema: '%s' lacks its choices or its count", k->path);
        } else if (!ig_cfg_parse_default(k, &cfg->vals[i], why, sizeof why)) {
            st = ig_err_set(err, IG_ERR_INVALID_ARG, "configuration schema: default of '%s': %s",
                            k->path, why);
        } else if (!(cfg->origins[i] = strdup("default"))) {
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a configuration");
        }
        /* two keys with one flag would make the command line ambiguous */
        const char *f = st == IG_OK ? ig_config_flag_name(k, fa, sizeof fa) : NULL;
        for (size_t j = 0; f && j < i && st == IG_OK; j++) {
            const char *g = ig_config_flag_name(cfg->keys[j], fb, sizeof fb);
            if (g && !strcmp(f, g))
                st = ig_err_set(err, IG_ERR_INVALID_ARG,
                                "configuration schema: '%s' and '%s' both have the flag --%s",
                                cfg->keys[j]->path, k->path, f);
        }
    }
    if (st != IG_OK) { /* the config stays as it was */
        for (size_t i = n0; i < n; i++) {
            ig_cfg_val_free(&cfg->vals[i]);
            free(cfg->origins[i]);
        }
        cfg->n = n0;
    }
    return st;
}

void ig_config_free(ig_config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; cfg->vals && i < cfg->n; i++) ig_cfg_val_free(&cfg->vals[i]);
    for (size_t i = 0; cfg->origins && i < cfg->n; i++) free(cfg->origins[i]);
    free(cfg->keys);
    free(cfg->vals);
    free(cfg->origins);
    free(cfg);
}

size_t ig_config_n_keys(const ig_config *cfg) {
    return cfg->n;
}

const ig_cfg_key *ig_config_key(const ig_config *cfg, size_t i) {
    return i < cfg->n ? cfg->keys[i] : NULL;
}

const ig_cfg_key *ig_config_key_of_flag(const ig_config *cfg, const char *flag) {
    char buf[128];
    for (size_t i = 0; i < cfg->n; i++) {
        const char *f = ig_config_flag_name(cfg->keys[i], buf, sizeof buf);
        if (f && !strcmp(f, flag)) return cfg->keys[i];
    }
    return NULL;
}

/* Replaces key i's value and origin (takes ownership of both). */
static void assign(ig_config *cfg, size_t i, cfg_val *v, char *origin) {
    ig_cfg_val_free(&cfg->vals[i]);
    cfg->vals[i] = *v;
    free(cfg->origins[i]);
    cfg->origins[i] = origin;
}

static const cfg_val *lookup(const ig_config *cfg, const char *path, ig_cfg_type type) {
    long i = cfg ? find_key(cfg, path, strlen(path)) : -1;
    assert(i >= 0 && "ig_config: unknown key");
    if (i < 0 || cfg->keys[i]->type != type) {
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

int ig_config_enum(const ig_config *cfg, const char *path) {
    const cfg_val *v = lookup(cfg, path, IG_CFG_ENUM);
    return v ? (int)v->i : 0;
}

uint64_t ig_config_size(const ig_config *cfg, const char *path) {
    const cfg_val *v = lookup(cfg, path, IG_CFG_SIZE);
    return v ? v->u : 0;
}

const char *const *ig_config_list(const ig_config *cfg, const char *path, size_t *n) {
    const cfg_val *v = lookup(cfg, path, IG_CFG_LIST);
    *n = v ? v->n_items : 0;
    return v ? (const char *const *)v->items : NULL;
}

const char *ig_config_origin(const ig_config *cfg, const char *path) {
    long i = cfg ? find_key(cfg, path, strlen(path)) : -1;
    assert(i >= 0 && "ig_config: unknown key");
    return i >= 0 ? cfg->origins[i] : "unknown";
}

int ig_config_is_set(const ig_config *cfg, const char *path) {
    return strcmp(ig_config_origin(cfg, path), "default") != 0;
}

/* ---- YAML loading -------------------------------------------------------------------------- */

/* Values parsed from one document, applied only when all of it is valid. */
typedef struct pending {
    cfg_val *vals;  /* [n] */
    char **origins; /* [n]; NULL: key not set by this document */
} pending;

static void pending_free(pending *pd, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (pd->origins && pd->origins[i]) ig_cfg_val_free(&pd->vals[i]);
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

/* Parses the YAML node val (NULL: an empty value) as key k's value: a scalar, or for a list a
 * sequence of scalars. 1 on success, 0 with why filled, -1 out of memory. */
static int parse_node(const ig_cfg_key *k, struct fy_node *val, cfg_val *out, char *why,
                      size_t cap) {
    char tn[256];
    if (val && fy_node_is_sequence(val) && k->type == IG_CFG_LIST) {
        size_t n = (size_t)fy_node_sequence_item_count(val), i = 0;
        const char **items = calloc(n ? n : 1, sizeof *items);
        if (!items) return -1;
        void *it = NULL;
        struct fy_node *item;
        int ok = 1;
        while ((item = fy_node_sequence_iterate(val, &it)) && ok) {
            if (!fy_node_is_scalar(item)) {
                snprintf(why, cap, "expected a list of strings, got %s in it", node_kind(item));
                ok = 0;
            } else if (!(items[i++] = fy_node_get_scalar0(item))) {
                ok = -1;
            }
        }
        if (ok == 1) ok = ig_cfg_parse_items(k, items, i, out, why, cap);
        free(items);
        return ok;
    }
    if (val && !fy_node_is_scalar(val)) {
        snprintf(why, cap, "expected %s, got %s", ig_cfg_type_name(k, tn, sizeof tn),
                 node_kind(val));
        return 0;
    }
    const char *text = val ? fy_node_get_scalar0(val) : "";
    if (!text) return -1;
    return ig_cfg_parse_value(k, text, out, why, cap);
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
            const ig_cfg_key *k = cfg->keys[idx];
            int vline = val && fy_node_is_scalar(val) ? node_line(val) : 0;
            where(loc, sizeof loc, name, vline ? vline : kline);
            char why[512];
            cfg_val v;
            int r = parse_node(k, val, &v, why, sizeof why);
            if (r < 0) {
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
            } else if (r == 0) {
                st = ig_err_set(err, IG_ERR_CONFIG, "%s: %s: %s", loc, full, why);
            } else {
                char *origin = strdup(loc);
                if (!origin) {
                    ig_cfg_val_free(&v);
                    st = ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
                } else {
                    if (pd->origins[idx]) ig_cfg_val_free(&pd->vals[idx]);
                    free(pd->origins[idx]);
                    pd->vals[idx] = v;
                    pd->origins[idx] = origin;
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

ig_status ig_config_load_string(ig_config *cfg, const char *text, size_t len, const char *name,
                                ig_err *err) {
    if (!name) name = "<config>";
    struct fy_document *fyd = NULL;
    ig_status st = ig_yaml_load_string(&fyd, text, len, name, err);
    if (st != IG_OK || !fyd) return st; /* an empty file sets nothing */
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
    return st;
}

ig_status ig_config_load_file(ig_config *cfg, const char *path, ig_err *err) {
    char *text;
    size_t len;
    /* a config is a few KB: a cap stops the wrong file (/dev/zero, a FIFO: refused) early */
    ig_status st = ig_read_file_max(path, IG_YAML_FILE_MAX, &text, &len, err);
    if (st != IG_OK) return st;
    st = ig_config_load_string(cfg, text, len, path, err);
    free(text);
    return st;
}

/* ---- overrides ----------------------------------------------------------------------------- */

/* A list value given inline ("[a, b]", YAML flow syntax) parsed through libfyaml, as strictly
 * as a file (no aliases: "[&a [x, x], *a, ...]" would expand). */
static int parse_flow_list(const ig_cfg_key *k, const char *text, cfg_val *out, char *why,
                           size_t cap) {
    struct fy_document *fyd = NULL;
    ig_err yerr = {0};
    ig_status st = ig_yaml_load_string(&fyd, text, strlen(text), "the list", &yerr);
    if (st == IG_ERR_NOMEM) return -1;
    int r = 0;
    struct fy_node *root = fyd ? fy_document_root(fyd) : NULL;
    if (st != IG_OK)
        snprintf(why, cap, "expected a list like [a, b], got '%.60s' (%.400s)", text, yerr.msg);
    else if (root && fy_node_is_sequence(root))
        r = parse_node(k, root, out, why, cap);
    else
        snprintf(why, cap, "expected a list like [a, b], got '%.60s'", text);
    fy_document_destroy(fyd);
    return r;
}

/* Finds key path (an error naming origin when it is unknown or a group). */
static long key_for(const ig_config *cfg, const char *path, size_t len, const char *origin,
                    ig_err *err) {
    long idx = find_key(cfg, path, len);
    if (idx >= 0) return idx;
    char why[900];
    if (is_group(cfg, path, len)) {
        list_children(cfg, path, len, why, sizeof why);
        ig_err_set(err, IG_ERR_CONFIG,
                   "%s: '%.*s' is a group of keys, not a key (keys under it: %s)", origin, (int)len,
                   path, why);
    } else {
        char *p = strndup(path, len);
        unknown_key_msg(cfg, p ? p : "", why, sizeof why);
        free(p);
        ig_err_set(err, IG_ERR_CONFIG, "%s: %s", origin, why);
    }
    return -1;
}

/* Parses text for key idx (lists: inline "[a, b]" or one item; with append, onto the items
 * already there) and assigns it with origin. */
static ig_status set_key(ig_config *cfg, size_t idx, const char *text, const char *origin,
                         const char *where, int append, ig_err *err) {
    const ig_cfg_key *k = cfg->keys[idx];
    char why[900];
    cfg_val v;
    int r;
    if (k->type == IG_CFG_LIST && !append && text[0] == '[') {
        r = parse_flow_list(k, text, &v, why, sizeof why);
    } else if (k->type == IG_CFG_LIST && append && cfg->origins[idx][0] == '-' &&
               strcmp(cfg->origins[idx], "--set") != 0) {
        /* a repeated flag: this item after the ones the earlier flags gave */
        const cfg_val *cur = &cfg->vals[idx];
        const char **items = calloc(cur->n_items + 1, sizeof *items);
        if (!items) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < cur->n_items; i++) items[i] = cur->items[i];
        items[cur->n_items] = text;
        r = ig_cfg_parse_items(k, items, cur->n_items + 1, &v, why, sizeof why);
        free(items);
    } else {
        r = ig_cfg_parse_value(k, text, &v, why, sizeof why);
    }
    if (r < 0) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (r == 0) return ig_err_set(err, IG_ERR_CONFIG, "%s: %s: %s", where, k->path, why);
    char *o = strdup(origin);
    if (!o) {
        ig_cfg_val_free(&v);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    assign(cfg, idx, &v, o);
    return IG_OK;
}

ig_status ig_config_set(ig_config *cfg, const char *assignment, ig_err *err) {
    const char *eq = strchr(assignment, '=');
    char where[600];
    snprintf(where, sizeof where, "--set '%.500s'", assignment);
    if (!eq)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s: expected KEY=VALUE (e.g. --set preprocess.workers=8)", where);
    const char *k0 = assignment, *k1 = eq;
    while (k0 < k1 && isspace((unsigned char)*k0)) k0++;
    while (k1 > k0 && isspace((unsigned char)k1[-1])) k1--;
    size_t klen = (size_t)(k1 - k0);
    if (klen == 0) return ig_err_set(err, IG_ERR_CONFIG, "%s: the key before '=' is empty", where);
    const char *v0 = eq + 1, *v1 = eq + 1 + strlen(eq + 1);
    while (v0 < v1 && isspace((unsigned char)*v0)) v0++;
    while (v1 > v0 && isspace((unsigned char)v1[-1])) v1--;
    /* a quoted value is a YAML quoted scalar: drop the quotes */
    if (v1 - v0 >= 2 && (*v0 == '"' || *v0 == '\'') && v1[-1] == *v0) v0++, v1--;
    long idx = key_for(cfg, k0, klen, where, err);
    if (idx < 0) return IG_ERR_CONFIG;
    char *text = strndup(v0, (size_t)(v1 - v0));
    if (!text) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = set_key(cfg, (size_t)idx, text, "--set", where, 0, err);
    free(text);
    return st;
}

ig_status ig_config_set_text(ig_config *cfg, const char *path, const char *text, const char *origin,
                             int append, ig_err *err) {
    long idx = key_for(cfg, path, strlen(path), origin, err);
    if (idx < 0) return IG_ERR_CONFIG;
    return set_key(cfg, (size_t)idx, text, origin, origin, append, err);
}

/* ---- dump ---------------------------------------------------------------------------------- */

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
            const char *p = cfg->keys[i]->path;
            dump_group(cfg, out, origins, p, (size_t)(c - p) + clen, depth + 1);
            continue;
        }
        int w = fprintf(out, "%*s%.*s: ", depth * 2, "", (int)clen, c);
        size_t col = (w > 0 ? (size_t)w : 0) + ig_cfg_put_value(out, cfg, i);
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

uint64_t ig_config_hash(const ig_config *cfg) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return 0;
    dump_group(cfg, f, 0, "", 0, 0);
    fclose(f);
    uint64_t h = ig_xxh3_64(buf, len);
    free(buf);
    return h;
}
