/* record_parse.c - turns records into documents: JSON lines through an exact fast path or
 * jansson, text records through a UTF-8 check.
 *
 * Every JSON line is first checked as UTF-8 as a whole, so that a bad byte is reported with its
 * exact position (jansson would only say "unable to decode byte"). Then the fast path handles
 * what nearly every corpus line is: a flat object whose requested values are strings and whose
 * other values are strings, short numbers, true, false or null. It decodes escapes (surrogate
 * pairs included) straight into one buffer per document. Whenever it meets anything else
 * (nesting, a malformed or unusual token, a lone surrogate, a missing or duplicated requested key,
 * a key with escapes, a number jansson might reject as too large) it declines, and jansson parses
 * the line and produces the error message. So the fast path only ever accepts lines jansson
 * accepts, and decodes them to the same bytes; tests/test_reader.c and the fuzz target check this
 * against jansson.
 */
#include "reader_internal.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

/* What a document's texts point into: jansson's tree, or the fast path's decoded bytes. */
typedef struct doc_owner {
    json_t *root; /* NULL for the fast path */
    char data[];
} doc_owner;

static pthread_once_t g_seed_once = PTHREAD_ONCE_INIT;

/* jansson seeds its hash function on first use; do it once, up front, so that concurrent first
 * parses from worker threads never race on it (jansson >= 2.8 is safe anyway). */
static void seed_jansson(void) {
    json_object_seed(0);
}

/* ---- helpers ----------------------------------------------------------------------------- */

static void hex_bytes(const char *s, size_t len, size_t at, char *out, size_t cap) {
    size_t o = 0;
    out[0] = 0;
    for (size_t i = at; i < len && i < at + 4 && o + 6 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s0x%02X", i > at ? " " : "",
                              (unsigned)(unsigned char)s[i]);
}

static ig_status bad_utf8(const ig_record *rec, ig_input_kind kind, const char *path, size_t bad,
                          ig_err *err) {
    char bytes[48];
    hex_bytes(rec->data, rec->len, bad, bytes, sizeof bytes);
    if (kind == IG_INPUT_TXT)
        return ig_err_set(
            err, IG_ERR_FORMAT,
            "%s: invalid UTF-8 at byte offset %llu (bytes from there: %s); re-encode the file as "
            "UTF-8",
            path, (unsigned long long)(rec->byte_offset + bad), bytes);
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s:%llu: invalid UTF-8 at byte %zu of the line (bytes from there: %s); "
                      "re-encode the input as UTF-8",
                      path, (unsigned long long)rec->line, bad + 1, bytes);
}

static const char *type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "an unknown value";
}

/* ---- the fast path ----------------------------------------------------------------------- */

#define ONES  0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Nonzero when one of the 8 bytes of v is '"', '\\' or a control character (< 0x20). */
static inline uint64_t special_bytes(uint64_t v) {
    uint64_t q = v ^ (ONES * '"'), b = v ^ (ONES * '\\');
    return (((q - ONES) & ~q) | ((b - ONES) & ~b) | ((v - ONES * 0x20) & ~v)) & HIGHS;
}

static inline const char *skip_ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static int hex4(const char *p, const char *e, uint32_t *out) {
    if (e - p < 4) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return 0;
        v = v << 4 | d;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        if (o) o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        if (o) o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        if (o)
            o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
            o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (o)
        o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

#ifdef HAVE_AVX2_PATH
/* scan_plain's loop 32 bytes at a time: where the CPU has AVX2, a document's text is scanned at
 * about 4x the 8-byte loop's speed (which took 4% of a one-worker preprocess run). */
__attribute__((target("avx2"))) static const char *scan_plain_avx2(const char *p, const char *e) {
    const __m256i quote = _mm256_set1_epi8('"'), backslash = _mm256_set1_epi8('\\'),
                  control = _mm256_set1_epi8(0x1F);
    while (e - p >= 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)p);
        __m256i hit = _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash));
        hit = _mm256_or_si256(hit, _mm256_cmpeq_epi8(_mm256_min_epu8(v, control), v)); /* < 0x20 */
        unsigned m = (unsigned)_mm256_movemask_epi8(hit);
        if (m) return p + __builtin_ctz(m);
        p += 32;
    }
    return p;
}
#endif

/* The first '"', '\\' or control character at or after p, or e. */
static inline const char *scan_plain(const char *p, const char *e) {
#ifdef HAVE_AVX2_PATH
    if (e - p >= 32 && __builtin_cpu_supports("avx2")) p = scan_plain_avx2(p, e);
#endif
    while (e - p >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        if (special_bytes(v)) break;
        p += 8;
    }
    while (p < e && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
    return p;
}

/* A string body from p (just after the opening quote). Decodes into out unless out is NULL and
 * stores the decoded length. Returns the position after the closing quote, or NULL to decline.
 * The line is already known to be valid UTF-8, so only '"', '\\' and controls need a look. */
static const char *fast_string(const char *p, const char *e, char *out, size_t *out_len) {
    size_t o = 0;
    for (;;) {
        const char *run = p;
        p = scan_plain(p, e);
        if (out && p > run) memcpy(out + o, run, (size_t)(p - run));
        o += (size_t)(p - run);
        if (p >= e || (unsigned char)*p < 0x20) return NULL;
        if (*p == '"') {
            *out_len = o;
            return p + 1;
        }
        if (e - p < 2) return NULL;
        char x = p[1], c;
        p += 2;
        switch (x) {
        case '"':
            c = '"';
            break;
        case '\\':
            c = '\\';
            break;
        case '/':
            c = '/';
            break;
        case 'b':
            c = '\b';
            break;
        case 'f':
            c = '\f';
            break;
        case 'n':
            c = '\n';
            break;
        case 'r':
            c = '\r';
            break;
        case 't':
            c = '\t';
            break;
        case 'u': {
            uint32_t cp, lo;
            if (!hex4(p, e, &cp)) return NULL;
            p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return NULL; /* lone low surrogate */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, e, &lo)) return NULL;
                if (lo < 0xDC00 || lo > 0xDFFF) return NULL;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            o += put_utf8(out ? out + o : NULL, cp);
            continue;
        }
        default:
            return NULL;
        }
        if (out) out[o] = c;
        o++;
    }
}

static inline int is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* A JSON number that jansson is sure to accept: integers of at most 18 digits (they fit in
 * json_int_t) and reals far from overflow. Returns the position after it, or NULL to decline. */
static const char *fast_number(const char *p, const char *e) {
    if (p < e && *p == '-') p++;
    if (p >= e) return NULL;
    long int_digits = 0, exp = 0;
    int real = 0;
    if (*p == '0') {
        p++;
        int_digits = 1;
        if (p < e && is_digit(*p)) return NULL;
    } else if (*p >= '1' && *p <= '9') {
        while (p < e && is_digit(*p)) p++, int_digits++;
    } else {
        return NULL;
    }
    if (p < e && *p == '.') {
        real = 1;
        const char *f = ++p;
        while (p < e && is_digit(*p)) p++;
        if (p == f) return NULL;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        real = 1;
        p++;
        int neg = 0;
        if (p < e && (*p == '+' || *p == '-')) neg = *p++ == '-';
        const char *d = p;
        while (p < e && is_digit(*p) && p - d < 7) exp = exp * 10 + (*p++ - '0');
        if (p == d || (p < e && is_digit(*p))) return NULL;
        if (neg) exp = -exp;
    }
    if (!real && int_digits > 18) return NULL;
    if (real && int_digits + exp > 300) return NULL;
    return p;
}

static const char *fast_literal(const char *p, const char *e) {
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if ((size_t)(e - p) >= n && memcmp(p, lits[i], n) == 0) return p + n;
    }
    return NULL;
}

/* 1: parsed into doc; 0: declined; -1: out of memory. */
static int fast_parse(const char *s, size_t n, const char *const *keys, size_t n_keys,
                      ig_doc *doc) {
    const char *p = s, *e = s + n;
    p = skip_ws(p, e);
    if (p >= e || *p != '{') return 0;
    p = skip_ws(p + 1, e);
    if (p >= e || *p == '}') return 0; /* an empty object lacks every key */
    size_t key_len[IG_MAX_JSON_KEYS];
    for (size_t k = 0; k < n_keys; k++) key_len[k] = strlen(keys[k]);
    doc_owner *own = NULL;
    size_t used = 0;
    unsigned found = 0;
    for (;;) {
        if (p >= e || *p != '"') goto decline;
        const char *ks = ++p;
        while (p < e && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
        if (p >= e || *p != '"') goto decline; /* escapes or controls in a key: let jansson */
        size_t klen = (size_t)(p - ks);
        p = skip_ws(p + 1, e);
        if (p >= e || *p != ':') goto decline;
        p = skip_ws(p + 1, e);
        if (p >= e) goto decline;
        int idx = -1;
        for (size_t k = 0; k < n_keys; k++)
            if (key_len[k] == klen && memcmp(keys[k], ks, klen) == 0) idx = (int)k;
        if (*p == '"') {
            size_t len;
            if (idx >= 0) {
                if (found & (1u << idx)) goto decline; /* duplicate: jansson keeps the last */
                if (!own) {
                    own = malloc(sizeof *own + n + IG_MAX_JSON_KEYS);
                    if (!own) return -1;
                    own->root = NULL;
                }
                char *dst = own->data + used;
                if (!(p = fast_string(p + 1, e, dst, &len))) goto decline;
                dst[len] = 0;
                doc->text[idx] = dst;
                doc->len[idx] = len;
                used += len + 1;
                found |= 1u << idx;
            } else if (!(p = fast_string(p + 1, e, NULL, &len))) {
                goto decline;
            }
        } else if (idx >= 0) {
            goto decline; /* not a string: jansson names the type */
        } else if (*p == '-' || is_digit(*p)) {
            if (!(p = fast_number(p, e))) goto decline;
        } else if (!(p = fast_literal(p, e))) {
            goto decline; /* objects, arrays, anything malformed */
        }
        p = skip_ws(p, e);
        if (p < e && *p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}') break;
        goto decline;
    }
    p = skip_ws(p + 1, e);
    if (p != e || found != (1u << n_keys) - 1) goto decline;
    doc->n_texts = n_keys;
    doc->owner_ = own;
    return 1;
decline:
    free(own);
    memset(doc, 0, sizeof *doc);
    return 0;
}

/* "'a', 'b', ..." (or "none"): the keys of an object, for a missing-key message. */
static void list_keys(json_t *obj, char *buf, size_t cap) {
    size_t o = 0;
    const char *name;
    json_t *val;
    buf[0] = 0;
    json_object_foreach(obj, name, val) {
        (void)val;
        const char *sep = o ? ", " : "";
        if (o + strlen(sep) + strlen(name) + 2 + 5 >= cap) { /* room for the key and ", ..." */
            snprintf(buf + o, cap - o, "%s...", sep);
            return;
        }
        o += (size_t)snprintf(buf + o, cap - o, "%s'%s'", sep, name);
    }
    if (o == 0) snprintf(buf, cap, "none");
}

/* ---- jansson ----------------------------------------------------------------------------- */

static ig_status jansson_parse(const ig_record *rec, const char *path, const char *const *keys,
                               size_t n_keys, ig_doc *doc, ig_err *err) {
    json_error_t je;
    json_t *root = json_loadb(rec->data, rec->len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!root) {
        /* a raw NUL byte is never JSON (inside strings it must be \u0000); jansson reports it as
         * "end of file" ("end of file expected near end of file"), which misleads */
        const char *nul = memchr(rec->data, '\0', rec->len);
        if (nul)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s:%llu:%zu: malformed JSON: a NUL byte (0x00), which JSON text "
                              "never holds (a file padded or overwritten with zero bytes?)",
                              path, (unsigned long long)rec->line, (size_t)(nul - rec->data) + 1);
        return ig_err_set(err, IG_ERR_FORMAT, "%s:%llu:%d: malformed JSON: %s", path,
                          (unsigned long long)rec->line, je.column > 0 ? je.column : 1, je.text);
    }
    ig_status st = IG_OK;
    if (!json_is_object(root)) {
        st = ig_err_set(err, IG_ERR_FORMAT, "%s:%llu: expected a JSON object per line, got %s",
                        path, (unsigned long long)rec->line, type_name(root));
        goto fail;
    }
    for (size_t k = 0; k < n_keys; k++) {
        json_t *v = json_object_get(root, keys[k]);
        if (!v) {
            char present[256];
            list_keys(root, present, sizeof present);
            st = ig_err_set(err, IG_ERR_FORMAT, "%s:%llu: missing key '%s' (keys present: %s)",
                            path, (unsigned long long)rec->line, keys[k], present);
            goto fail;
        }
        if (!json_is_string(v)) {
            st = ig_err_set(err, IG_ERR_FORMAT, "%s:%llu: key '%s' is %s, expected a string", path,
                            (unsigned long long)rec->line, keys[k], type_name(v));
            goto fail;
        }
        doc->text[k] = json_string_value(v);
        doc->len[k] = json_string_length(v);
    }
    doc_owner *own = malloc(sizeof *own);
    if (!own) {
        st = ig_err_set(err, IG_ERR_NOMEM, "%s:%llu: out of memory", path,
                        (unsigned long long)rec->line);
        goto fail;
    }
    own->root = root;
    doc->n_texts = n_keys;
    doc->owner_ = own;
    return IG_OK;
fail:
    json_decref(root);
    memset(doc, 0, sizeof *doc);
    return st;
}

/* ---- entry points ------------------------------------------------------------------------ */

ig_status ig_record_parse_json(const ig_record *rec, const char *path, const char *const *json_keys,
                               size_t n_keys, ig_json_mode mode, ig_doc *doc, ig_err *err) {
    memset(doc, 0, sizeof *doc);
    if (!path) path = "<input>";
    if (n_keys == 0 || n_keys > IG_MAX_JSON_KEYS || !json_keys)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "between 1 and %d JSON keys are needed, got %zu",
                          IG_MAX_JSON_KEYS, n_keys);
    for (size_t k = 0; k < n_keys; k++)
        if (!json_keys[k]) return ig_err_set(err, IG_ERR_INVALID_ARG, "JSON key %zu is NULL", k);
    size_t bad;
    if (!ig_utf8_valid(rec->data, rec->len, &bad))
        return bad_utf8(rec, IG_INPUT_JSONL, path, bad, err);
    if (mode != IG_JSON_JANSSON) {
        int r = fast_parse(rec->data, rec->len, json_keys, n_keys, doc);
        if (r > 0) return IG_OK;
        if (r < 0)
            return ig_err_set(err, IG_ERR_NOMEM, "%s:%llu: out of memory", path,
                              (unsigned long long)rec->line);
        if (mode == IG_JSON_FAST_ONLY)
            return ig_err_set(err, IG_ERR_UNSUPPORTED, "%s:%llu: the fast path declined", path,
                              (unsigned long long)rec->line);
    }
    pthread_once(&g_seed_once, seed_jansson);
    return jansson_parse(rec, path, json_keys, n_keys, doc, err);
}

ig_status ig_record_parse(const ig_record *rec, ig_input_kind kind, const char *path,
                          const char *const *json_keys, size_t n_keys, ig_doc *doc, ig_err *err) {
    if (kind == IG_INPUT_JSONL || kind == IG_INPUT_JSONL_ZST)
        return ig_record_parse_json(rec, path, json_keys, n_keys, IG_JSON_AUTO, doc, err);
    memset(doc, 0, sizeof *doc);
    if (!path) path = "<input>";
    size_t bad;
    if (!ig_utf8_valid(rec->data, rec->len, &bad)) return bad_utf8(rec, kind, path, bad, err);
    doc->n_texts = 1;
    doc->text[0] = rec->data;
    doc->len[0] = rec->len;
    return IG_OK;
}

void ig_doc_release(ig_doc *doc) {
    if (!doc) return;
    doc_owner *own = doc->owner_;
    if (own) {
        json_decref(own->root); /* NULL-safe */
        free(own);
    }
    memset(doc, 0, sizeof *doc);
}
