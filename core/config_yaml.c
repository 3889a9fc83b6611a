/* config_yaml.c - the one way ingot reads a YAML file of settings (configs, `--set` lists, video
 * buckets): libfyaml parses it, after ingot has refused what a settings file has no use for and
 * what would cost unbounded memory or time, so that no file is silently cut short or blown up.
 *
 * Before libfyaml builds anything, the text is checked and its events are scanned once (a stream,
 * no tree) for:
 *   - a NUL byte: libfyaml stops reading there and drops the rest of the file without a word;
 *     and an escaped one in a double-quoted string ("95\x00,5,0", \0, \u0000), which would end
 *     the value there as C strings end (the split "95");
 *   - bytes that are not UTF-8 (libfyaml 0.7 loops forever on some);
 *   - a second document ('---'): it would be ignored;
 *   - anchors and aliases (&a, *a): the tree libfyaml resolves them into can be exponentially
 *     larger than the file (a 318-byte "billion laughs" took 1.77 GB);
 *   - more than IG_YAML_MAX_NODES keys, values and items: libfyaml takes about 330 bytes per node
 *     (16 MB of "- 1" lines took 1.4 GB);
 *   - single-quoted strings with two escaped quotes in a row ('a''''b'): libfyaml 0.7.12 reads
 *     them wrongly ("a'''") or fails and leaks (its issue #233, tests/fuzz/libfyaml_leak.c).
 * The tree is then built without libfyaml's duplicate-key check, which compares every key with
 * every other (20,000 keys took 28 s), and ingot refuses duplicate keys itself with a hash set
 * per mapping, so that parsing time grows linearly with the file.
 */
#include "config_internal.h"

#include <libfyaml.h>
#include <stdlib.h>
#include <string.h>

/* 1-based line and column (in bytes) of offset off of text. */
static void position(const char *text, size_t off, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        (*col)++;
        if (text[i] == '\n') (*line)++, *col = 1;
    }
}

/* libfyaml's diagnostics, collected (fy_diag_set_collect_errors) rather than printed; anything it
 * still writes (a final "failed" line) lands in the sink. */
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

static struct fy_diag *diag_create(diag_sink *sink) {
    struct fy_diag_cfg dcfg;
    fy_diag_cfg_default(&dcfg);
    dcfg.fp = NULL;
    dcfg.output_fn = diag_output;
    dcfg.user = sink;
    dcfg.colorize = false;
    dcfg.level = FYET_ERROR;
    struct fy_diag *diag = fy_diag_create(&dcfg);
    if (diag) fy_diag_set_collect_errors(diag, true);
    return diag;
}

/* "NAME:LINE:COLUMN: YAML syntax error: ..." from the first collected error. */
static ig_status syntax_error(struct fy_diag *diag, const diag_sink *sink, const char *name,
                              ig_err *err) {
    void *it = NULL;
    struct fy_diag_error *e = fy_diag_errors_iterate(diag, &it);
    if (e)
        return ig_err_set(err, IG_ERR_CONFIG, "%s:%d:%d: YAML syntax error: %s", name, e->line,
                          e->column, e->msg ? e->msg : "invalid YAML");
    return ig_err_set(err, IG_ERR_CONFIG, "%s: cannot parse YAML%s%.*s", name,
                      sink->len ? ": " : "", (int)strcspn(sink->text, "\n"), sink->text);
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

/* ---- the event scan ------------------------------------------------------------------------- */

static struct fy_token *anchor_of(struct fy_event *ev) {
    switch (ev->type) {
    case FYET_SCALAR:
        return ev->scalar.anchor;
    case FYET_MAPPING_START:
        return ev->mapping_start.anchor;
    case FYET_SEQUENCE_START:
        return ev->sequence_start.anchor;
    default:
        return NULL;
    }
}

/* 1-based line and column of the '&' or '*' before an anchor's or alias's name (libfyaml's mark
 * is the name's first byte). */
static void at_token(struct fy_token *t, int *line, int *col) {
    const struct fy_mark *m = fy_token_start_mark(t);
    if (m) *line = m->line + 1, *col = m->column > 0 ? m->column : 1;
}

/* 1 when the inside text[a..b) of a single-quoted scalar (libfyaml's marks leave the outer quotes
 * out) holds two escaped quotes in a row, four quotes, which libfyaml 0.7.12 misreads. */
static int quotes_in_a_row(const char *text, size_t a, size_t b) {
    size_t run = 0;
    for (size_t i = a; i < b; i++) {
        run = text[i] == '\'' ? run + 1 : 0;
        if (run == 4) return 1;
    }
    return 0;
}

/* What a settings file may not hold, found from libfyaml's events before any tree is built. */
static ig_status scan(const char *text, size_t len, const char *name, ig_err *err) {
    diag_sink sink = {.len = 0};
    struct fy_diag *diag = diag_create(&sink);
    struct fy_parse_cfg pcfg = {.flags = FYPCF_QUIET | FYPCF_JSON_NONE, .diag = diag};
    struct fy_parser *fyp = diag ? fy_parser_create(&pcfg) : NULL;
    if (!fyp || fy_parser_set_string(fyp, text, len) != 0) {
        fy_parser_destroy(fyp);
        fy_diag_destroy(diag);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
    }
    ig_status st = IG_OK;
    size_t docs = 0, nodes = 0;
    struct fy_event *ev;
    while (st == IG_OK && (ev = fy_parser_parse(fyp))) {
        const struct fy_mark *m = fy_event_start_mark(ev);
        int line = m ? m->line + 1 : 0, col = m ? m->column + 1 : 0;
        struct fy_token *anchor = anchor_of(ev);
        size_t alen = 0;
        const char *atext = NULL;
        if (ev->type == FYET_DOCUMENT_START && ++docs > 1) {
            st = ig_err_set(err, IG_ERR_CONFIG,
                            "%s:%d:%d: a second YAML document starts here: a settings file holds "
                            "one document (remove the '---' line and what follows, or split the "
                            "file)",
                            name, line, col);
        } else if (ev->type == FYET_ALIAS) {
            at_token(ev->alias.anchor, &line, &col);
            atext = fy_token_get_text(ev->alias.anchor, &alen);
            st = ig_err_set(err, IG_ERR_CONFIG,
                            "%s:%d:%d: an alias (*%.*s): ingot's settings files take no anchors or "
                            "aliases: write the value out",
                            name, line, col, atext ? (int)(alen > 60 ? 60 : alen) : 0,
                            atext ? atext : "");
        } else if (anchor) {
            at_token(anchor, &line, &col);
            atext = fy_token_get_text(anchor, &alen);
            st = ig_err_set(err, IG_ERR_CONFIG,
                            "%s:%d:%d: an anchor (&%.*s): ingot's settings files take no anchors "
                            "or aliases: remove it and write values out where they are used",
                            name, line, col, atext ? (int)(alen > 60 ? 60 : alen) : 0,
                            atext ? atext : "");
        } else if ((ev->type == FYET_SCALAR || ev->type == FYET_MAPPING_START ||
                    ev->type == FYET_SEQUENCE_START) &&
                   ++nodes > IG_YAML_MAX_NODES) {
            st = ig_err_set(err, IG_ERR_CONFIG,
                            "%s:%d:%d: more than %d keys, values and list items: a settings file "
                            "holds at most that many (is it the right file?)",
                            name, line, col, IG_YAML_MAX_NODES);
        } else if (ev->type == FYET_SCALAR &&
                   fy_token_scalar_style(ev->scalar.value) == FYSS_DOUBLE_QUOTED &&
                   (atext = fy_token_get_text(ev->scalar.value, &alen)) != NULL &&
                   memchr(atext, '\0', alen) != NULL) {
            col--; /* name the opening quote */
            st = ig_err_set(err, IG_ERR_CONFIG,
                            "%s:%d:%d: an escaped NUL (\\0, \\x00, \\u0000) in a quoted "
                            "string: the value would end there and lose the rest (as a NUL byte "
                            "would): remove it",
                            name, line, col);
        } else if (ev->type == FYET_SCALAR &&
                   fy_token_scalar_style(ev->scalar.value) == FYSS_SINGLE_QUOTED) {
            const struct fy_mark *e = fy_event_end_mark(ev);
            col--; /* the marks are the text inside the quotes: name the opening quote */
            if (m && e && e->input_pos <= len && m->input_pos < e->input_pos &&
                quotes_in_a_row(text, m->input_pos, e->input_pos))
                st = ig_err_set(err, IG_ERR_CONFIG,
                                "%s:%d:%d: a single-quoted string with two escaped quotes in a "
                                "row (''''), which libfyaml 0.7 reads wrongly: write the string "
                                "in double quotes (\"...\")",
                                name, line, col);
        }
        fy_parser_event_free(fyp, ev);
    }
    if (st == IG_OK && fy_parser_get_stream_error(fyp)) st = syntax_error(diag, &sink, name, err);
    fy_parser_destroy(fyp);
    fy_diag_destroy(diag);
    return st;
}

/* ---- duplicate keys ------------------------------------------------------------------------- */

typedef struct key_slot {
    const char *text; /* NULL: empty */
    size_t len;
} key_slot;

/* 1-based line and column of a node: of its first scalar (0, 0 when it has none). */
static void node_pos(struct fy_node *fyn, int *line, int *col) {
    *line = *col = 0;
    while (fyn && !fy_node_is_scalar(fyn)) {
        void *it = NULL;
        if (fy_node_is_mapping(fyn)) {
            struct fy_node_pair *p = fy_node_mapping_iterate(fyn, &it);
            fyn = p ? fy_node_pair_key(p) : NULL;
        } else {
            fyn = fy_node_is_sequence(fyn) ? fy_node_sequence_iterate(fyn, &it) : NULL;
        }
    }
    const struct fy_mark *m = fyn ? fy_token_start_mark(fy_node_get_scalar_token(fyn)) : NULL;
    if (m) *line = m->line + 1, *col = m->column + 1;
    /* a quoted scalar's mark is its first byte inside the quotes: name the opening quote */
    enum fy_node_style style = fy_node_get_style(fyn);
    if (m && (style == FYNS_SINGLE_QUOTED || style == FYNS_DOUBLE_QUOTED) && *col > 1) (*col)--;
}

/* Refuses a key that is not a scalar, and a key given twice in one mapping, in the tree under
 * fyn (an explicit stack: depth is bounded by libfyaml's limit, the stack by the node count). */
static ig_status check_keys(struct fy_node *root, const char *name, ig_err *err) {
    size_t cap = 64, n = 0;
    struct fy_node **stack = malloc(cap * sizeof *stack);
    key_slot *slots = NULL;
    size_t n_slots = 0;
    ig_status st = stack ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
    if (st == IG_OK && root) stack[n++] = root;
    while (st == IG_OK && n > 0) {
        struct fy_node *fyn = stack[--n];
        int is_map = fy_node_is_mapping(fyn);
        if (!is_map && !fy_node_is_sequence(fyn)) continue;
        size_t count =
            (size_t)(is_map ? fy_node_mapping_item_count(fyn) : fy_node_sequence_item_count(fyn));
        if (n + count > cap) { /* every child may go on the stack */
            size_t nc = cap;
            while (nc < n + count) nc *= 2;
            struct fy_node **ns = realloc(stack, nc * sizeof *ns);
            if (!ns) {
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
                break;
            }
            stack = ns;
            cap = nc;
        }
        if (!is_map) {
            void *it = NULL;
            struct fy_node *item;
            while ((item = fy_node_sequence_iterate(fyn, &it))) stack[n++] = item;
            continue;
        }
        /* a table of twice the keys (a power of two), open addressing on xxh3 */
        size_t want = 16;
        while (want < 2 * count) want *= 2;
        if (want > n_slots) {
            free(slots);
            slots = malloc(want * sizeof *slots);
            n_slots = slots ? want : 0;
            if (!slots) {
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
                break;
            }
        }
        memset(slots, 0, want * sizeof *slots);
        void *it = NULL;
        struct fy_node_pair *pair;
        while (st == IG_OK && (pair = fy_node_mapping_iterate(fyn, &it))) {
            struct fy_node *key = fy_node_pair_key(pair), *val = fy_node_pair_value(pair);
            int line, col;
            node_pos(key ? key : fyn, &line, &col);
            size_t klen = 0;
            const char *k = key && fy_node_is_scalar(key) ? fy_node_get_scalar(key, &klen) : NULL;
            if (!k) {
                st = ig_err_set(err, IG_ERR_CONFIG,
                                "%s:%d:%d: a key must be a plain name (not empty, a list or a "
                                "mapping)",
                                name, line, col);
                break;
            }
            size_t h = (size_t)ig_xxh3_64(k, klen) & (want - 1);
            while (slots[h].text && !(slots[h].len == klen && memcmp(slots[h].text, k, klen) == 0))
                h = (h + 1) & (want - 1);
            if (slots[h].text) {
                st = ig_err_set(err, IG_ERR_CONFIG,
                                "%s:%d:%d: the key '%.*s' is given twice in one mapping: keep "
                                "one",
                                name, line, col, (int)(klen > 80 ? 80 : klen), k);
                break;
            }
            slots[h] = (key_slot){k, klen};
            if (val) stack[n++] = val;
        }
    }
    free(slots);
    free(stack);
    return st;
}

/* ---- the document --------------------------------------------------------------------------- */

ig_status ig_yaml_load_string(struct fy_document **out, const char *text, size_t len,
                              const char *name, ig_err *err) {
    *out = NULL;
    if (!name) name = "<config>";
    /* the first of the two faults in the file is the one named */
    const char *nul = memchr(text, '\0', len);
    long bad = ig_cfg_utf8_bad_offset(text, nul ? (size_t)(nul - text) : len);
    int line, col;
    if (nul && bad < 0) {
        position(text, (size_t)(nul - text), &line, &col);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s:%d:%d: a NUL byte (0x00): a settings file is text, and YAML "
                          "would stop reading there and drop the rest: remove it",
                          name, line, col);
    }
    if (bad >= 0) {
        position(text, (size_t)bad, &line, &col);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s:%d:%d: not UTF-8 text (byte 0x%02X): save the file as UTF-8", name,
                          line, col, (unsigned)(unsigned char)text[bad]);
    }
    ig_status st = scan(text, len, name, err);
    if (st != IG_OK) return st;
    diag_sink sink = {.len = 0};
    struct fy_diag *diag = diag_create(&sink);
    if (!diag) return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", name);
    /* no aliases are left to resolve, and duplicate keys are ingot's to find (check_keys) */
    struct fy_parse_cfg pcfg = {.flags = FYPCF_QUIET | FYPCF_JSON_NONE | FYPCF_ALLOW_DUPLICATE_KEYS,
                                .diag = diag};
    struct fy_document *fyd = fy_document_build_from_string(&pcfg, text, len);
    if (!fyd) {
        void *it = NULL;
        if (fy_diag_errors_iterate(diag, &it) || !is_blank_yaml(text, len))
            st = syntax_error(diag, &sink, name, err);
        fy_diag_destroy(diag);
        return st; /* IG_OK and no document: an empty file */
    }
    fy_diag_destroy(diag);
    st = check_keys(fy_document_root(fyd), name, err);
    if (st != IG_OK) {
        fy_document_destroy(fyd);
        return st;
    }
    *out = fyd;
    return IG_OK;
}
