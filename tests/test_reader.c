/* test_reader.c - the document readers: input expansion, .jsonl / .jsonl.zst / .txt record
 * readers, JSON line parsing (fast path and jansson agree), UTF-8 validation, and every kind of
 * bad input with its exact file:line message. The shared corpora are checked when present; the
 * inline fixtures always run. */
#include "testutil.h"

#include "preprocess/preprocess.h"
#include "preprocess/reader_internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

static const char *const KEY_TEXT[] = {"text"};
static const char *const CORPORA[] = {"tinyshakespeare", "udhr_multilingual", "c_code",
                                      "emoji_test", "edge_cases"};

/* ---- helpers ----------------------------------------------------------------------------- */

typedef struct docs {
    size_t n, cap;
    char **text; /* copies (NUL-terminated; may hold NULs) */
    size_t *len;
    uint64_t *line;
} docs;

static void docs_push(docs *d, const char *t, size_t len, uint64_t line) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 64;
        d->text = realloc(d->text, d->cap * sizeof *d->text);
        d->len = realloc(d->len, d->cap * sizeof *d->len);
        d->line = realloc(d->line, d->cap * sizeof *d->line);
        assert_non_null(d->text);
        assert_non_null(d->len);
        assert_non_null(d->line);
    }
    char *c = malloc(len + 1);
    assert_non_null(c);
    if (len) memcpy(c, t, len);
    c[len] = 0;
    d->text[d->n] = c;
    d->len[d->n] = len;
    d->line[d->n] = line;
    d->n++;
}

static void docs_free(docs *d) {
    for (size_t i = 0; i < d->n; i++) free(d->text[i]);
    free(d->text);
    free(d->len);
    free(d->line);
    memset(d, 0, sizeof *d);
}

/* Reads and parses every record of an open reader (key: keys[key_index]). Stops at the first
 * error and returns it (err filled); *bytes_in gets the reader's count at the end. */
static ig_status drain(ig_record_reader *r, const char *name, ig_input_kind kind,
                       const char *const *keys, size_t nk, size_t key_index, docs *out,
                       ig_err *err) {
    for (;;) {
        ig_record rec;
        int has = 0;
        ig_status st = ig_record_reader_next(r, &rec, &has, err);
        if (st != IG_OK) return st;
        if (!has) return IG_OK;
        ig_doc doc;
        st = ig_record_parse(&rec, kind, name, keys, nk, &doc, err);
        if (st != IG_OK) return st;
        docs_push(out, doc.text[key_index], doc.len[key_index], rec.line);
        ig_doc_release(&doc);
    }
}

static ig_status read_docs(const char *path, ig_input_kind kind, docs *out, ig_err *err) {
    ig_record_reader *r = NULL;
    ig_status st = ig_record_reader_open(&r, NULL, path, kind, err);
    if (st != IG_OK) return st;
    st = drain(r, path, kind, KEY_TEXT, 1, 0, out, err);
    ig_record_reader_close(r);
    return st;
}

/* Expects reading path to fail with status and a message starting with prefix and containing
 * `contains` (either may be NULL). */
static void expect_fail(const char *path, ig_input_kind kind, ig_status status, const char *prefix,
                        const char *contains) {
    docs d = {0};
    ig_err err = {0};
    ig_status st = read_docs(path, kind, &d, &err);
    docs_free(&d);
    if (st != status) fail_msg("%s: expected status %d, got %d (%s)", path, status, st, err.msg);
    if (prefix && strncmp(err.msg, prefix, strlen(prefix)) != 0)
        fail_msg("message \"%s\" does not start with \"%s\"", err.msg, prefix);
    if (contains && !strstr(err.msg, contains))
        fail_msg("message \"%s\" does not contain \"%s\"", err.msg, contains);
}

static void write_str(const char *path, const char *s) {
    igt_write(path, s, strlen(s));
}

static void *zstd_compress(const void *src, size_t n, size_t *out_len) {
    size_t cap = ZSTD_compressBound(n);
    void *dst = malloc(cap);
    assert_non_null(dst);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    assert_non_null(cc);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3);
    size_t z = ZSTD_compress2(cc, dst, cap, src, n);
    assert_false(ZSTD_isError(z));
    ZSTD_freeCCtx(cc);
    *out_len = z;
    return dst;
}

/* ---- shared corpora ---------------------------------------------------------------------- */

static size_t num_docs_of(const char *name) {
    const char *p = igt_fmt("%s/tokens/%s.gpt2.json", igt_shared_data(), name);
    json_error_t je;
    json_t *j = json_load_file(p, 0, &je);
    if (!j) fail_msg("%s: %s", p, je.text);
    json_t *v = json_object_get(j, "num_docs");
    assert_true(json_is_integer(v));
    size_t n = (size_t)json_integer_value(v);
    json_decref(j);
    return n;
}

static void test_corpora_jsonl_zst_txt(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    for (size_t c = 0; c < sizeof CORPORA / sizeof *CORPORA; c++) {
        const char *base = igt_fmt("%s/text/%s", igt_shared_data(), CORPORA[c]);
        char *jsonl = strdup(igt_fmt("%s.jsonl", base));
        char *zst = strdup(igt_fmt("%s.jsonl.zst", base));
        char *txt = strdup(igt_fmt("%s.txt", base));
        docs a = {0}, b = {0};
        ig_err err = {0};
        if (read_docs(jsonl, ig_input_kind_of(jsonl, 0), &a, &err) != IG_OK)
            fail_msg("%s", err.msg);
        if (read_docs(zst, ig_input_kind_of(zst, 0), &b, &err) != IG_OK) fail_msg("%s", err.msg);
        assert_int_equal(a.n, num_docs_of(CORPORA[c]));
        assert_int_equal(a.n, b.n);
        size_t total = 0;
        for (size_t i = 0; i < a.n; i++) {
            assert_int_equal(a.len[i], b.len[i]);
            assert_memory_equal(a.text[i], b.text[i], a.len[i] ? a.len[i] : 1);
            assert_int_equal(a.line[i], i + 1); /* one document per line, no blank lines */
            size_t bad;
            assert_true(ig_utf8_valid(a.text[i], a.len[i], &bad));
            total += a.len[i] + (i ? 2 : 0);
        }
        /* NAME.txt is the documents joined with "\n\n" */
        size_t tlen;
        char *t = igt_read(txt, &tlen);
        assert_int_equal(total, tlen);
        size_t o = 0;
        for (size_t i = 0; i < a.n; i++) {
            if (i) {
                assert_memory_equal(t + o, "\n\n", 2);
                o += 2;
            }
            if (a.len[i]) assert_memory_equal(t + o, a.text[i], a.len[i]);
            o += a.len[i];
        }
        /* and read as a whole-file .txt document it is exactly those bytes */
        docs w = {0};
        if (read_docs(txt, IG_INPUT_TXT, &w, &err) != IG_OK) fail_msg("%s", err.msg);
        assert_int_equal(w.n, 1);
        assert_int_equal(w.len[0], tlen);
        assert_memory_equal(w.text[0], t, tlen);
        free(t);
        docs_free(&w);
        docs_free(&a);
        docs_free(&b);
        free(jsonl);
        free(zst);
        free(txt);
    }
}

/* Every corpus line: the fast path handles it, and jansson decodes it to the same bytes. */
static void test_corpora_fast_path_matches_jansson(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    for (size_t c = 0; c < sizeof CORPORA / sizeof *CORPORA; c++) {
        const char *path = igt_fmt("%s/text/%s.jsonl", igt_shared_data(), CORPORA[c]);
        ig_record_reader *r;
        ig_err err = {0};
        assert_int_equal(ig_record_reader_open(&r, NULL, path, IG_INPUT_JSONL, &err), IG_OK);
        size_t n = 0;
        for (;;) {
            ig_record rec;
            int has;
            assert_int_equal(ig_record_reader_next(r, &rec, &has, &err), IG_OK);
            if (!has) break;
            ig_doc f, j;
            if (ig_record_parse_json(&rec, path, KEY_TEXT, 1, IG_JSON_FAST_ONLY, &f, &err))
                fail_msg("%s", err.msg);
            if (ig_record_parse_json(&rec, path, KEY_TEXT, 1, IG_JSON_JANSSON, &j, &err))
                fail_msg("%s", err.msg);
            assert_int_equal(f.len[0], j.len[0]);
            if (f.len[0]) assert_memory_equal(f.text[0], j.text[0], f.len[0]);
            ig_doc_release(&f);
            ig_doc_release(&j);
            n++;
        }
        assert_int_equal(n, num_docs_of(CORPORA[c]));
        ig_record_reader_close(r);
    }
}

/* ---- inline fixtures --------------------------------------------------------------------- */

static char *g_dir;

static int setup(void **state) {
    (void)state;
    g_dir = igt_mkdtemp();
    return 0;
}

static int teardown(void **state) {
    (void)state;
    igt_rmtree(g_dir);
    free(g_dir);
    return 0;
}

static void test_escapes_and_surrogates(void **state) {
    (void)state;
    const char *p = igt_fmt("%s/esc.jsonl", g_dir);
    write_str(p, "{\"text\": \"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u0041\\u00e9\\u20AC\\u0000z\"}\n"
                 "{\"text\":\"\\ud83d\\ude0d|\\uD83D\\uDE0D|\\udbff\\udfff\"}\n"
                 "{\"text\":\"raw \xe2\x80\xa8 \xf0\x9f\x98\x8d \x7f\"}\n"
                 "{\"text\":\"\"}\n");
    docs d = {0};
    ig_err err = {0};
    if (read_docs(p, IG_INPUT_JSONL, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(d.n, 4);
    static const char want0[] = "a\"b\\c/d\b\f\n\r\tA\xc3\xa9\xe2\x82\xac\0z";
    assert_int_equal(d.len[0], sizeof want0 - 1);
    assert_memory_equal(d.text[0], want0, sizeof want0 - 1);
    static const char want1[] = "\xf0\x9f\x98\x8d|\xf0\x9f\x98\x8d|\xf4\x8f\xbf\xbf";
    assert_int_equal(d.len[1], sizeof want1 - 1);
    assert_memory_equal(d.text[1], want1, sizeof want1 - 1);
    assert_string_equal(d.text[2], "raw \xe2\x80\xa8 \xf0\x9f\x98\x8d \x7f");
    assert_int_equal(d.len[3], 0);
    docs_free(&d);
}

static void test_bad_json_lines(void **state) {
    (void)state;
    static const struct {
        const char *line2; /* line 1 is always good */
        const char *contains;
    } cases[] = {
        {"{\"text\":\"\\ud83d\"}", "malformed JSON"},        /* lone high surrogate */
        {"{\"text\":\"\\ude0d\"}", "malformed JSON"},        /* lone low surrogate */
        {"{\"text\":\"\\ud83d\\u0041\"}", "malformed JSON"}, /* high + non-low */
        {"{\"text\": \"abc\"", "malformed JSON"},            /* unterminated object */
        {"{\"text\": \"abc\"} x", "malformed JSON"},         /* trailing garbage */
        {"{\"text\": \"a\tb\"}", "malformed JSON"},          /* raw control character */
        {"{\"text\": \"\\x\"}", "malformed JSON"},           /* bad escape */
        {"{\"text\": 'a'}", "malformed JSON"},
        {"{\"text\": 1e999}", "malformed JSON"}, /* jansson: real overflow */
        {"[\"text\"]", "expected a JSON object per line, got an array"},
        {"\"text\"", "expected a JSON object per line, got a string"},
        {"{\"body\":\"x\",\"id\":3}", "missing key 'text' (keys present: 'body', 'id')"},
        {"{}", "missing key 'text' (keys present: none)"},
        {"{\"text\": 12}", "key 'text' is a number, expected a string"},
        {"{\"text\": null}", "key 'text' is null, expected a string"},
        {"{\"text\": [\"a\"]}", "key 'text' is an array, expected a string"},
        {"{\"text\": {\"a\":1}}", "key 'text' is an object, expected a string"},
        {"{\"text\": true}", "key 'text' is a boolean, expected a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *p = igt_fmt("%s/bad%zu.jsonl", g_dir, i);
        char *content = NULL;
        assert_true(
            asprintf(&content, "{\"text\":\"ok\"}\n%s\n{\"text\":\"ok\"}\n", cases[i].line2) > 0);
        write_str(p, content);
        free(content);
        expect_fail(p, IG_INPUT_JSONL, IG_ERR_FORMAT, igt_fmt("%s:2:", p), cases[i].contains);
    }
    /* the column of a JSON syntax error is jansson's (1-based, in characters) */
    const char *p = igt_fmt("%s/col.jsonl", g_dir);
    write_str(p, "\n\n{\"text\": \"abc\",}\n");
    expect_fail(p, IG_INPUT_JSONL, IG_ERR_FORMAT, igt_fmt("%s:3:16: malformed JSON", p), NULL);
}

static void test_invalid_utf8(void **state) {
    (void)state;
    static const struct {
        const char *bytes;
        size_t at; /* 1-based byte of the line: {"text":" is 9 bytes */
    } cases[] = {
        {"\xc0\xaf", 10},         /* overlong '/' */
        {"\xe0\x80\xaf", 10},     /* overlong 3-byte */
        {"\xed\xa0\x80", 10},     /* encoded surrogate U+D800 */
        {"\xf4\x90\x80\x80", 10}, /* above U+10FFFF */
        {"\xe2\x82", 10},         /* truncated sequence (then the quote) */
        {"\x80", 10},             /* stray continuation byte */
        {"\xff", 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *p = igt_fmt("%s/u%zu.jsonl", g_dir, i);
        char *content = NULL;
        assert_true(asprintf(&content, "{\"text\":\"a\"}\n\n{\"text\":\"%s\"}\n", cases[i].bytes) >
                    0);
        write_str(p, content);
        free(content);
        expect_fail(p, IG_INPUT_JSONL, IG_ERR_FORMAT,
                    igt_fmt("%s:3: invalid UTF-8 at byte %zu of the line", p, cases[i].at), NULL);
    }
    /* a whole-file .txt: the byte offset in the file */
    const char *t = igt_fmt("%s/bad.txt", g_dir);
    write_str(t, "hello\nwor\xffld");
    expect_fail(t, IG_INPUT_TXT, IG_ERR_FORMAT, igt_fmt("%s: invalid UTF-8 at byte offset 9", t),
                "0xFF");
    /* .txt lines: the line and the byte within it */
    expect_fail(t, IG_INPUT_TXT_LINES, IG_ERR_FORMAT,
                igt_fmt("%s:2: invalid UTF-8 at byte 4 of the line", t), NULL);
}

static void test_utf8_valid(void **state) {
    (void)state;
    static const struct {
        const char *s;
        int ok;
        size_t bad;
    } cases[] = {
        {"", 1, 0},
        {"plain ascii text that is longer than sixteen bytes", 1, 0},
        {"\xc2\x80\xdf\xbf", 1, 0},
        {"\xe0\xa0\x80\xed\x9f\xbf\xee\x80\x80\xef\xbf\xbf", 1, 0},
        {"\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", 1, 0},
        {"0123456789abcdefghijklmnopqrstuvwxyz0\xc1\xbf", 0, 37},
        {"0123456789abcdefghijklmnopqrstuvwxyz0\xe0\x9f\xbf", 0, 37},
        {"ab\xed\xa0\x80", 0, 2},
        {"ab\xed\xbf\xbf", 0, 2},
        {"\xf4\x90\x80\x80", 0, 0},
        {"\xf5\x80\x80\x80", 0, 0},
        {"\xf0\x8f\xbf\xbf", 0, 0},
        {"abc\xe2\x82", 0, 3},
        {"abc\xf0\x9f\x98", 0, 3},
        {"\xc3\xa9\x80", 0, 2},
        {"\xe2\x28\xa1", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t bad = 999;
        int ok = ig_utf8_valid(cases[i].s, strlen(cases[i].s), &bad);
        if (ok != cases[i].ok) fail_msg("case %zu: got %d", i, ok);
        if (!ok && bad != cases[i].bad) fail_msg("case %zu: bad offset %zu", i, bad);
    }
    /* a NUL is valid UTF-8 */
    size_t bad;
    assert_true(ig_utf8_valid("a\0b", 3, &bad));
}

/* An oracle written apart from utf8.c: decode each character, then judge the code point. 1 when
 * valid, else 0 and *bad = the first byte of the first bad sequence. */
static int oracle_utf8(const unsigned char *s, size_t n, size_t *bad) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t need = c < 0x80         ? 0
                      : (c >> 5) == 6  ? 1
                      : (c >> 4) == 14 ? 2
                      : (c >> 3) == 30 ? 3
                                       : 9;
        uint32_t cp = need == 0 ? c : need == 1 ? c & 0x1F : need == 2 ? c & 0x0F : c & 0x07;
        int ok = need <= 3 && i + need < n + (need == 0);
        for (size_t k = 1; ok && k <= need; k++) {
            if (i + k >= n || (s[i + k] & 0xC0) != 0x80)
                ok = 0;
            else
                cp = cp << 6 | (s[i + k] & 0x3F);
        }
        static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
        if (ok && (cp < least[need] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = 0;
        if (!ok) {
            *bad = i;
            return 0;
        }
        i += need + 1;
    }
    return 1;
}

static void expect_like_oracle(const unsigned char *s, size_t n) {
    size_t want_bad = 0, got_bad = 0;
    int want = oracle_utf8(s, n, &want_bad);
    int got = ig_utf8_valid((const char *)s, n, &got_bad);
    if (got != want || (!want && got_bad != want_bad)) {
        char hex[3 * 80 + 1] = "";
        for (size_t k = 0; k < n && k < 80; k++) snprintf(hex + 3 * k, 4, "%02x ", s[k]);
        fail_msg("%zu bytes [%s]: valid %d at %zu, the oracle says %d at %zu", n, hex, got, got_bad,
                 want, want_bad);
    }
}

/* ig_utf8_valid judges 32 bytes at a time where the CPU has AVX2 (inputs of 64 bytes and more):
 * every sequence of one to four bytes, valid or not, at every place around the 32-byte seams and
 * the end, and random mixes of good and bad characters, against the oracle above. */
static void test_utf8_blocks(void **state) {
    (void)state;
    unsigned char buf[160];
    /* every pair of bytes, and every lead with every second byte and four third and fourth ones,
     * at places across the first seam (31/32), the middle and the end of a 96-byte text; the text
     * around them is ASCII or a valid multi-byte character */
    static const unsigned char thirds[] = {0x00, 0x80, 0xBF, 0xC0};
    static const size_t places[] = {0, 29, 30, 31, 32, 33, 62, 63, 92, 93, 94, 95};
    for (int fill = 0; fill < 2; fill++) {
        for (size_t pl = 0; pl < sizeof places / sizeof *places; pl++) {
            for (unsigned a = 0; a < 256; a++) {
                for (unsigned b = 0; b < 256; b++) {
                    for (size_t t3 = 0; t3 < (a >= 0xE0 ? 4u : 1u); t3++) {
                        size_t n = 96, at = places[pl];
                        for (size_t k = 0; k < n; k++) buf[k] = 'a' + (k % 26);
                        if (fill) /* U+00E9 pairs */
                            for (size_t k = 0; k + 1 < n; k += 2) buf[k] = 0xC3, buf[k + 1] = 0xA9;
                        size_t len = at + 4 <= n ? 4 : n - at;
                        unsigned char seq[4] = {(unsigned char)a, (unsigned char)b, thirds[t3],
                                                thirds[(t3 + 1) % 4]};
                        if (a < 0xE0) seq[2] = fill ? 0xC3 : 'x', seq[3] = fill ? 0xA9 : 'y';
                        memcpy(buf + at, seq, len);
                        expect_like_oracle(buf, n);
                        if (at + 2 < n) expect_like_oracle(buf, at + 2); /* cut after the pair */
                    }
                }
            }
        }
    }
    /* random texts of good characters of every length, with a fault now and then */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int round = 0; round < 20000; round++) {
        size_t n = 0, want = 64 + (size_t)(round % 90);
        while (n < want) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            unsigned kind = (unsigned)(x % 16);
            uint32_t cp = (uint32_t)(x >> 20);
            if (kind < 6) {
                buf[n++] = (unsigned char)(0x20 + cp % 0x5F);
            } else if (kind < 9) {
                cp = 0x80 + cp % 0x780;
                buf[n++] = (unsigned char)(0xC0 | cp >> 6),
                buf[n++] = (unsigned char)(0x80 | (cp & 0x3F));
            } else if (kind < 12) {
                cp = 0x800 + cp % 0xF800;
                if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xE000;
                buf[n++] = (unsigned char)(0xE0 | cp >> 12);
                buf[n++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (unsigned char)(0x80 | (cp & 0x3F));
            } else if (kind < 15) {
                cp = 0x10000 + cp % 0x100000;
                buf[n++] = (unsigned char)(0xF0 | cp >> 18);
                buf[n++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                buf[n++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                buf[n++] = (unsigned char)(0x80 | (cp & 0x3F));
            } else if (round % 4 == 0) {
                buf[n++] = (unsigned char)(x >> 40); /* any byte at all */
            }
        }
        expect_like_oracle(buf, n);
        expect_like_oracle(buf, n - 1); /* perhaps cut inside the last character */
    }
}

static void test_blank_lines_crlf_last_line(void **state) {
    (void)state;
    const char *p = igt_fmt("%s/blank.jsonl", g_dir);
    write_str(p,
              "\xef\xbb\xbf\n  \n{\"text\":\"a\"}\r\n\t\r\n{\"text\":\"b\"}\r\n\n{\"text\":\"c\"}");
    docs d = {0};
    ig_err err = {0};
    if (read_docs(p, IG_INPUT_JSONL, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(d.n, 3);
    assert_string_equal(d.text[0], "a");
    assert_string_equal(d.text[1], "b");
    assert_string_equal(d.text[2], "c");
    assert_int_equal(d.line[0], 3);
    assert_int_equal(d.line[1], 5);
    assert_int_equal(d.line[2], 7);
    docs_free(&d);
    /* byte offsets of the records */
    ig_record_reader *r;
    assert_int_equal(ig_record_reader_open(&r, NULL, p, IG_INPUT_JSONL, &err), IG_OK);
    ig_record rec;
    int has;
    assert_int_equal(ig_record_reader_next(r, &rec, &has, &err), IG_OK);
    assert_int_equal(rec.byte_offset, 7);
    assert_int_equal(rec.len, 13); /* {"text":"a"} and the \r */
    ig_record_reader_close(r);
    /* an empty file has no records */
    const char *e = igt_fmt("%s/empty.jsonl", g_dir);
    write_str(e, "");
    assert_int_equal(read_docs(e, IG_INPUT_JSONL, &d, &err), IG_OK);
    assert_int_equal(d.n, 0);
}

static void test_multiple_keys(void **state) {
    (void)state;
    const char *p = igt_fmt("%s/keys.jsonl", g_dir);
    write_str(p,
              "{\"title\":\"T1\",\"n\":-1.5e3,\"ok\":true,\"x\":null,\"id\":12,\"text\":\"B1\"}\n"
              "{\"text\":\"B2\",\"meta\":{\"a\":[1,2]},\"title\":\"T2\"}\n");
    const char *keys[] = {"text", "title"};
    ig_record_reader *r;
    ig_err err = {0};
    assert_int_equal(ig_record_reader_open(&r, NULL, p, IG_INPUT_JSONL, &err), IG_OK);
    docs t = {0}, ti = {0};
    for (;;) {
        ig_record rec;
        int has;
        assert_int_equal(ig_record_reader_next(r, &rec, &has, &err), IG_OK);
        if (!has) break;
        ig_doc doc;
        if (ig_record_parse(&rec, IG_INPUT_JSONL, p, keys, 2, &doc, &err)) fail_msg("%s", err.msg);
        assert_int_equal(doc.n_texts, 2);
        docs_push(&t, doc.text[0], doc.len[0], rec.line);
        docs_push(&ti, doc.text[1], doc.len[1], rec.line);
        ig_doc_release(&doc);
    }
    ig_record_reader_close(r);
    assert_int_equal(t.n, 2);
    assert_string_equal(t.text[0], "B1");
    assert_string_equal(ti.text[0], "T1");
    assert_string_equal(t.text[1], "B2");
    assert_string_equal(ti.text[1], "T2");
    docs_free(&t);
    docs_free(&ti);
}

/* A 3 MB line straddles the 1 MiB read buffers, plain and compressed. */
static void test_long_line_and_zst(void **state) {
    (void)state;
    size_t n = 3u << 20;
    char *line = malloc(n + 64);
    assert_non_null(line);
    size_t o = (size_t)sprintf(line, "{\"text\":\"");
    size_t body = 0;
    while (o < n) {
        if (body % 1000 == 999) {
            memcpy(line + o, "\\u00e9", 6);
            o += 6;
        } else {
            line[o++] = (char)('a' + body % 26);
        }
        body++;
    }
    o += (size_t)sprintf(line + o, "\"}\n");
    char *file = malloc(3 * o);
    assert_non_null(file);
    memcpy(file, "{\"text\":\"first\"}\n", 17);
    memcpy(file + 17, line, o);
    memcpy(file + 17 + o, "{\"text\":\"last\"}", 15);
    size_t flen = 17 + o + 15;
    const char *p = igt_fmt("%s/long.jsonl", g_dir);
    igt_write(p, file, flen);
    size_t zlen;
    void *z = zstd_compress(file, flen, &zlen);
    char *pz = strdup(igt_fmt("%s/long.jsonl.zst", g_dir));
    igt_write(pz, z, zlen);

    docs a = {0}, b = {0};
    ig_err err = {0};
    if (read_docs(p, IG_INPUT_JSONL, &a, &err) != IG_OK) fail_msg("%s", err.msg);
    if (read_docs(pz, IG_INPUT_JSONL_ZST, &b, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(a.n, 3);
    assert_int_equal(b.n, 3);
    assert_int_equal(a.len[1], body + body / 1000); /* each \u00e9 is two bytes */
    assert_int_equal(a.len[1], b.len[1]);
    assert_memory_equal(a.text[1], b.text[1], a.len[1]);
    assert_memory_equal(a.text[1] + 999, "\xc3\xa9", 2);
    assert_string_equal(a.text[2], "last");
    assert_int_equal(b.line[2], 3);

    /* bytes_in reaches the (compressed) file size */
    ig_record_reader *r;
    assert_int_equal(ig_record_reader_open(&r, NULL, pz, IG_INPUT_JSONL_ZST, &err), IG_OK);
    docs c = {0};
    assert_int_equal(drain(r, pz, IG_INPUT_JSONL_ZST, KEY_TEXT, 1, 0, &c, &err), IG_OK);
    assert_int_equal(ig_record_reader_bytes_in(r), zlen);
    ig_record_reader_close(r);
    docs_free(&c);

    /* a record limit names the line */
    assert_int_equal(ig_record_reader_open(&r, NULL, p, IG_INPUT_JSONL, &err), IG_OK);
    ig_record_reader_set_max_record(r, 1u << 20);
    ig_status st = drain(r, p, IG_INPUT_JSONL, KEY_TEXT, 1, 0, &c, &err);
    assert_int_equal(st, IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, igt_fmt("%s:2: record longer than", p)));
    ig_record_reader_close(r);
    docs_free(&c);

    /* the same bytes from memory */
    assert_int_equal(
        ig_record_reader_open_mem(&r, NULL, "mem.zst", z, zlen, IG_INPUT_JSONL_ZST, &err), IG_OK);
    assert_int_equal(drain(r, "mem", IG_INPUT_JSONL_ZST, KEY_TEXT, 1, 0, &c, &err), IG_OK);
    assert_int_equal(c.n, 3);
    assert_memory_equal(c.text[1], a.text[1], a.len[1]);
    ig_record_reader_close(r);
    docs_free(&c);

    /* truncated: the error names the compressed offset where the data ended */
    const char *pt = igt_fmt("%s/trunc.jsonl.zst", g_dir);
    igt_write(pt, z, zlen - 7);
    expect_fail(pt, IG_INPUT_JSONL_ZST, IG_ERR_FORMAT, pt,
                igt_fmt("truncated zstd data at compressed byte offset %zu", zlen - 7));
    /* corrupt: flipped bytes in the middle */
    unsigned char *zc = z;
    for (size_t i = zlen / 2; i < zlen / 2 + 16; i++) zc[i] ^= 0x5A;
    const char *pc = igt_fmt("%s/corrupt.jsonl.zst", g_dir);
    igt_write(pc, z, zlen);
    expect_fail(pc, IG_INPUT_JSONL_ZST, IG_ERR_FORMAT, pc,
                "corrupt or truncated zstd data at "
                "compressed byte offset");
    /* not zstd at all, and empty */
    const char *pn = igt_fmt("%s/notzstd.zst", g_dir);
    write_str(pn, "{\"text\":\"a\"}\n");
    expect_fail(pn, IG_INPUT_JSONL_ZST, IG_ERR_FORMAT, pn, "offset 0");
    const char *pe = igt_fmt("%s/empty.zst", g_dir);
    write_str(pe, "");
    expect_fail(pe, IG_INPUT_JSONL_ZST, IG_ERR_FORMAT, pe, "offset 0");

    /* two concatenated frames read as one stream */
    size_t z1, z2;
    void *f1 = zstd_compress("{\"text\":\"x\"}\n", 13, &z1);
    void *f2 = zstd_compress("{\"text\":\"y\"}\n", 13, &z2);
    char both[256];
    memcpy(both, f1, z1);
    memcpy(both + z1, f2, z2);
    const char *p2 = igt_fmt("%s/two.zst", g_dir);
    igt_write(p2, both, z1 + z2);
    docs t = {0};
    if (read_docs(p2, IG_INPUT_JSONL_ZST, &t, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(t.n, 2);
    assert_string_equal(t.text[1], "y");
    assert_int_equal(t.line[1], 2);
    docs_free(&t);
    free(f1);
    free(f2);

    docs_free(&a);
    docs_free(&b);
    free(z);
    free(pz);
    free(file);
    free(line);
}

/* JSONL of exactly size bytes: lines {"text":"..."} of varied lengths, the last one padded.
 * *ndocs gets the number of lines, *text the total length of their texts. */
static char *jsonl_of_size(size_t size, size_t *ndocs, size_t *text) {
    char *s = malloc(size + 1);
    assert_non_null(s);
    size_t o = 0, n = 0, t = 0;
    uint32_t x = (uint32_t)size * 2654435761u;
    while (o < size) {
        x = x * 1103515245u + 12345u;
        size_t want = 20 + (x >> 16) % 300, rest = size - o;
        if (rest < want + 40) want = rest; /* the last line takes what is left */
        size_t body = want - 12;           /* {"text":"  "}\n */
        o += (size_t)sprintf(s + o, "{\"text\":\"");
        for (size_t i = 0; i < body; i++) s[o++] = (char)('a' + (x >> (i % 24)) % 26);
        memcpy(s + o, "\"}\n", 3);
        o += 3;
        n++;
        t += body;
    }
    assert_int_equal(o, size);
    *ndocs = n;
    *text = t;
    return s;
}

/* As the zstd command line compresses: streaming, no content size in the header, 128 KiB
 * blocks. */
static void *zstd_compress_streaming(const void *src, size_t n, size_t *out_len) {
    size_t cap = ZSTD_compressBound(n) + 1024;
    uint8_t *dst = malloc(cap);
    assert_non_null(dst);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    assert_non_null(cc);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 1);
    ZSTD_outBuffer out = {dst, cap, 0};
    for (size_t at = 0;;) {
        size_t k = n - at < 65536 ? n - at : 65536;
        ZSTD_inBuffer in = {(const char *)src + at, k, 0};
        ZSTD_EndDirective mode = at + k == n ? ZSTD_e_end : ZSTD_e_continue;
        size_t left;
        do {
            left = ZSTD_compressStream2(cc, &out, &in, mode);
            assert_false(ZSTD_isError(left));
        } while (in.pos < in.size || (mode == ZSTD_e_end && left != 0));
        at += k;
        if (mode == ZSTD_e_end) break;
    }
    ZSTD_freeCCtx(cc);
    *out_len = out.pos;
    return dst;
}

/* Reads path and checks the document count and the total text length. */
static void expect_docs(const char *path, ig_input_kind kind, size_t ndocs, size_t text) {
    docs d = {0};
    ig_err err = {0};
    if (read_docs(path, kind, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    size_t t = 0;
    for (size_t i = 0; i < d.n; i++) t += d.len[i];
    if (d.n != ndocs || t != text)
        fail_msg("%s: %zu documents of %zu bytes, expected %zu of %zu", path, d.n, t, ndocs, text);
    docs_free(&d);
}

static void expect_docs_mem(const void *data, size_t len, size_t ndocs, size_t text) {
    ig_record_reader *r = NULL;
    ig_err err = {0};
    assert_int_equal(
        ig_record_reader_open_mem(&r, NULL, "mem.zst", data, len, IG_INPUT_JSONL_ZST, &err), IG_OK);
    docs d = {0};
    if (drain(r, "mem.zst", IG_INPUT_JSONL_ZST, KEY_TEXT, 1, 0, &d, &err) != IG_OK)
        fail_msg("%s", err.msg);
    ig_record_reader_close(r);
    size_t t = 0;
    for (size_t i = 0; i < d.n; i++) t += d.len[i];
    assert_int_equal(d.n, ndocs);
    assert_int_equal(t, text);
    docs_free(&d);
}

/* Sizes on and around every buffer boundary: the decompressed output (ZSTD_DStreamOutSize,
 * 128 KiB) and the raw read buffer (1 MiB), for plain and zstd inputs, compressed in one shot
 * and as the zstd command line does (a valid file whose decompressed size is a multiple of
 * 128 KiB was refused as truncated). */
static void test_buffer_boundaries(void **state) {
    (void)state;
    const size_t K128 = (size_t)128 << 10, M1 = (size_t)1 << 20;
    const size_t sizes[] = {K128 - 1, K128,      K128 + 1, 2 * K128,   M1 - 1,       M1,
                            M1 + 1,   M1 + K128, 2 * M1,   2 * M1 + 1, 3 * K128 - 1, 3 * K128};
    const char *p = igt_fmt("%s/bound.jsonl", g_dir);
    char *pz = strdup(igt_fmt("%s/bound.jsonl.zst", g_dir));
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t ndocs, text;
        char *s = jsonl_of_size(sizes[i], &ndocs, &text);
        igt_write(p, s, sizes[i]);
        expect_docs(p, IG_INPUT_JSONL, ndocs, text);
        for (int streaming = 0; streaming < 2; streaming++) {
            size_t zl;
            void *z = streaming ? zstd_compress_streaming(s, sizes[i], &zl)
                                : zstd_compress(s, sizes[i], &zl);
            igt_write(pz, z, zl);
            expect_docs(pz, IG_INPUT_JSONL_ZST, ndocs, text);
            expect_docs_mem(z, zl, ndocs, text);
            free(z);
        }
        free(s);
    }

    /* compressed files whose frames end on, before and after the 1 MiB read buffer's end:
     * a skippable frame of the right size in front places the data frame */
    size_t ndocs, text;
    char *s = jsonl_of_size(3 * K128, &ndocs, &text);
    size_t zl;
    void *z = zstd_compress_streaming(s, 3 * K128, &zl);
    uint8_t *f = malloc(2 * M1 + zl);
    assert_non_null(f);
    const long shifts[] = {-1, 0, 1};
    for (int at_start = 0; at_start < 2; at_start++)
        for (size_t j = 0; j < 3; j++) {
            /* the data frame ends (or starts) at M1 + shift */
            size_t target = (size_t)((long)M1 + shifts[j]);
            size_t pad = at_start ? target : target - zl;
            assert_true(pad >= 8);
            f[0] = 0x50, f[1] = 0x2A, f[2] = 0x4D, f[3] = 0x18; /* skippable frame magic */
            uint32_t payload = (uint32_t)(pad - 8);
            for (int b = 0; b < 4; b++) f[4 + b] = (uint8_t)(payload >> (8 * b));
            memset(f + 8, 0xAB, payload);
            memcpy(f + pad, z, zl);
            igt_write(pz, f, pad + zl);
            expect_docs(pz, IG_INPUT_JSONL_ZST, ndocs, text);
            expect_docs_mem(f, pad + zl, ndocs, text);
        }
    free(f);
    free(z);
    free(s);
    free(pz);
}

/* A file that shrinks or grows while it is read is an error naming both sizes, not a quietly
 * shorter (or longer) input; the expected size can also be set from when a run started. */
static void test_file_changed(void **state) {
    (void)state;
    const size_t size = (size_t)3 << 20; /* more than the 1 MiB read buffer */
    size_t ndocs, text;
    char *s = jsonl_of_size(size, &ndocs, &text);
    const char *nl = memchr(s + ((size_t)2 << 20), '\n', size);
    size_t cut = (size_t)(nl - s) + 1; /* a line boundary: what is left still parses */
    const char *p = igt_fmt("%s/changing.jsonl", g_dir);
    for (int grow = 0; grow < 2; grow++) {
        igt_write(p, s, size);
        ig_record_reader *r = NULL;
        ig_err err = {0};
        assert_int_equal(ig_record_reader_open(&r, NULL, p, IG_INPUT_JSONL, &err), IG_OK);
        ig_record rec;
        int has = 0;
        assert_int_equal(ig_record_reader_next(r, &rec, &has, &err), IG_OK);
        if (grow) {
            FILE *f = fopen(p, "ab");
            assert_non_null(f);
            fputs("{\"text\": \"more\"}\n", f);
            fclose(f);
        } else {
            assert_int_equal(truncate(p, (off_t)cut), 0);
        }
        docs d = {0};
        assert_int_equal(drain(r, p, IG_INPUT_JSONL, KEY_TEXT, 1, 0, &d, &err), IG_ERR_IO);
        const char *want =
            grow ? igt_fmt("it had %zu bytes when the run started, but at least", size)
                 : igt_fmt("it had %zu bytes when the run started, but only %zu "
                           "were read",
                           size, cut);
        if (!strstr(err.msg, want) || !strstr(err.msg, "changing.jsonl: the file changed"))
            fail_msg("'%s' not in: %s", want, err.msg);
        docs_free(&d);
        ig_record_reader_close(r);
    }
    /* the size a run saw when it started, before the file was opened */
    igt_write(p, s, cut);
    ig_record_reader *r = NULL;
    ig_err err = {0};
    assert_int_equal(ig_record_reader_open(&r, NULL, p, IG_INPUT_JSONL, &err), IG_OK);
    ig_record_reader_expect_size(r, size);
    docs d = {0};
    assert_int_equal(drain(r, p, IG_INPUT_JSONL, KEY_TEXT, 1, 0, &d, &err), IG_ERR_IO);
    assert_non_null(strstr(err.msg, "the file changed while it was read"));
    docs_free(&d);
    ig_record_reader_close(r);
    free(s);
}

static void test_txt_modes(void **state) {
    (void)state;
    const char *p = igt_fmt("%s/doc.txt", g_dir);
    write_str(p, "first\r\n\nsecond line\n\r\n  \nlast");
    docs d = {0};
    ig_err err = {0};
    if (read_docs(p, IG_INPUT_TXT_LINES, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(d.n, 4);
    assert_string_equal(d.text[0], "first");
    assert_string_equal(d.text[1], "second line");
    assert_string_equal(d.text[2], "  ");
    assert_string_equal(d.text[3], "last");
    assert_int_equal(d.line[0], 1);
    assert_int_equal(d.line[1], 3);
    assert_int_equal(d.line[2], 5);
    assert_int_equal(d.line[3], 6);
    docs_free(&d);
    if (read_docs(p, IG_INPUT_TXT, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.text[0], "first\r\n\nsecond line\n\r\n  \nlast");
    docs_free(&d);
    /* a UTF-8 byte order mark is dropped from .txt as from .jsonl (it was kept as text, so the
     * same words tokenized differently); an invalid byte after it keeps its file offset */
    const char *b = igt_fmt("%s/bom.txt", g_dir);
    write_str(b, "\xEF\xBB\xBFhello\nworld\n");
    if (read_docs(b, IG_INPUT_TXT, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.text[0], "hello\nworld\n");
    docs_free(&d);
    if (read_docs(b, IG_INPUT_TXT_LINES, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.text[0], "hello");
    assert_int_equal(d.line[0], 1);
    docs_free(&d);
    write_str(b, "\xEF\xBB\xBF\n\nx\n"); /* a BOM alone on the first line: an empty line */
    if (read_docs(b, IG_INPUT_TXT_LINES, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.text[0], "x");
    assert_int_equal(d.line[0], 3);
    docs_free(&d);
    write_str(b, "\xEF\xBB\xBFok\xFF");
    expect_fail(b, IG_INPUT_TXT, IG_ERR_FORMAT, b, "invalid UTF-8 at byte offset 5");
    const char *bj = igt_fmt("%s/bom.jsonl", g_dir);
    write_str(bj, "\xEF\xBB\xBF{\"text\": \"hello\\nworld\\n\"}\n");
    if (read_docs(bj, IG_INPUT_JSONL, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_string_equal(d.text[0], "hello\nworld\n"); /* the same text as the .txt's */
    docs_free(&d);
    /* an empty .txt file is one empty document */
    const char *e = igt_fmt("%s/empty.txt", g_dir);
    write_str(e, "");
    if (read_docs(e, IG_INPUT_TXT, &d, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.len[0], 0);
    docs_free(&d);
}

static void test_stdin(void **state) {
    (void)state;
    const char *p = igt_fmt("%s/stdin.jsonl", g_dir);
    write_str(p, "{\"text\":\"from stdin\"}\n{\"text\":\"2\"}\n");
    int saved = dup(0);
    int fd = open(p, O_RDONLY);
    assert_true(saved >= 0 && fd >= 0);
    assert_int_equal(dup2(fd, 0), 0);
    close(fd);
    docs d = {0};
    ig_err err = {0};
    ig_status st = read_docs("-", ig_input_kind_of("-", 0), &d, &err);
    dup2(saved, 0);
    close(saved);
    if (st != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.text[0], "from stdin");
    docs_free(&d);
    expect_fail(igt_fmt("%s/nope.jsonl", g_dir), IG_INPUT_JSONL, IG_ERR_NOT_FOUND,
                "cannot open input", "No such file");
}

static void test_expand_inputs(void **state) {
    (void)state;
    const char *root = igt_fmt("%s/tree", g_dir);
    char *r = strdup(root);
    assert_int_equal(mkdir(r, 0755), 0);
    assert_int_equal(mkdir(igt_fmt("%s/sub", r), 0755), 0);
    assert_int_equal(mkdir(igt_fmt("%s/sub/deeper", r), 0755), 0);
    assert_int_equal(mkdir(igt_fmt("%s/empty", r), 0755), 0);
    const char *files[] = {"b.jsonl",          "a.jsonl", "sub/c.txt",     "sub/b.jsonl.zst",
                           "sub/deeper/z.zst", "x.bin",   ".hidden.jsonl", "sub/notes.md"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        write_str(igt_fmt("%s/%s", r, files[i]), "{}\n");
    char **list;
    size_t n;
    ig_err err = {0};
    const char *in1[] = {r};
    assert_int_equal(ig_expand_inputs(in1, 1, &list, &n, &err), IG_OK);
    assert_int_equal(n, 5);
    assert_string_equal(list[0], igt_fmt("%s/a.jsonl", r));
    assert_string_equal(list[1], igt_fmt("%s/b.jsonl", r));
    assert_string_equal(list[2], igt_fmt("%s/sub/b.jsonl.zst", r));
    assert_string_equal(list[3], igt_fmt("%s/sub/c.txt", r));
    assert_string_equal(list[4], igt_fmt("%s/sub/deeper/z.zst", r));
    ig_input_list_free(list, n);

    /* argument order is kept; duplicates (any spelling) are dropped; "-" passes through */
    char *g = strdup(igt_fmt("%s/sub/*.txt", r));
    char *a2 = strdup(igt_fmt("%s/./a.jsonl", r));
    char *b1 = strdup(igt_fmt("%s/b.jsonl", r));
    char *pat = strdup(igt_fmt("%s/*.jsonl", r));
    const char *in2[] = {b1, g, "-", r, a2, pat};
    assert_int_equal(ig_expand_inputs(in2, 6, &list, &n, &err), IG_OK);
    assert_int_equal(n, 6);
    assert_string_equal(list[0], b1);
    assert_string_equal(list[1], igt_fmt("%s/sub/c.txt", r));
    assert_string_equal(list[2], "-");
    assert_string_equal(list[3], igt_fmt("%s/a.jsonl", r));
    assert_string_equal(list[4], igt_fmt("%s/sub/b.jsonl.zst", r));
    assert_string_equal(list[5], igt_fmt("%s/sub/deeper/z.zst", r));
    ig_input_list_free(list, n);

    /* an explicit file is taken whatever its name */
    const char *in3[] = {igt_fmt("%s/x.bin", r)};
    assert_int_equal(ig_expand_inputs(in3, 1, &list, &n, &err), IG_OK);
    assert_int_equal(n, 1);
    ig_input_list_free(list, n);

    /* inputs that match nothing are named */
    char *missing = strdup(igt_fmt("%s/missing.jsonl", r));
    const char *in4[] = {r, missing};
    assert_int_equal(ig_expand_inputs(in4, 2, &list, &n, &err), IG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, missing));
    assert_null(list);
    char *nomatch = strdup(igt_fmt("%s/*.parquet", r));
    const char *in5[] = {nomatch};
    assert_int_equal(ig_expand_inputs(in5, 1, &list, &n, &err), IG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, nomatch));
    char *empty = strdup(igt_fmt("%s/empty", r));
    const char *in6[] = {empty};
    assert_int_equal(ig_expand_inputs(in6, 1, &list, &n, &err), IG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, empty));

    assert_int_equal(ig_input_kind_of("a.jsonl", 0), IG_INPUT_JSONL);
    assert_int_equal(ig_input_kind_of("a.json", 0), IG_INPUT_JSONL);
    assert_int_equal(ig_input_kind_of("-", 1), IG_INPUT_JSONL);
    assert_int_equal(ig_input_kind_of("a.jsonl.zst", 0), IG_INPUT_JSONL_ZST);
    assert_int_equal(ig_input_kind_of("a.ZST", 0), IG_INPUT_JSONL_ZST);
    assert_int_equal(ig_input_kind_of("a.txt", 0), IG_INPUT_TXT);
    assert_int_equal(ig_input_kind_of("a.txt", 1), IG_INPUT_TXT_LINES);
    free(empty);
    free(nomatch);
    free(missing);
    free(pat);
    free(b1);
    free(a2);
    free(g);
    free(r);
}

/* ---- the fast path against jansson on generated lines ------------------------------------ */

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

static const char *const PIECES[] = {"{",
                                     "}",
                                     "\"text\"",
                                     "\"title\"",
                                     ":",
                                     ",",
                                     " ",
                                     "\"",
                                     "\\",
                                     "\\u",
                                     "d83d",
                                     "\\ude0d",
                                     "\\ud83d",
                                     "\\u0000",
                                     "00e9",
                                     "\\n",
                                     "\\\"",
                                     "\\/",
                                     "\\x",
                                     "abc",
                                     "\xc3\xa9",
                                     "\xf0\x9f\x98\x8d",
                                     "\t",
                                     "\r",
                                     "\n",
                                     "1",
                                     "-0",
                                     "0.5e-3",
                                     "123456789012345678",
                                     "1234567890123456789",
                                     "1e400",
                                     "true",
                                     "null",
                                     "fals",
                                     "[",
                                     "]",
                                     "\x01",
                                     "01",
                                     "\xe2\x80\xa8"};

static void test_fast_path_agrees_with_jansson(void **state) {
    (void)state;
    const char *keys[] = {"text", "title"};
    size_t fast_ok = 0;
    for (int iter = 0; iter < 200000; iter++) {
        char line[512];
        size_t o = 0;
        int mode = rnd(3);
        if (mode == 0) { /* mostly valid objects */
            o += (size_t)snprintf(line, sizeof line, "{\"text\": \"");
            int k = (int)rnd(6);
            for (int i = 0; i < k; i++) {
                const char *s = PIECES[6 + rnd(sizeof PIECES / sizeof *PIECES - 6)];
                if (o + strlen(s) + 40 < sizeof line) o += (size_t)sprintf(line + o, "%s", s);
            }
            o += (size_t)sprintf(line + o, "\", \"n\": %s, \"title\": \"t\"}", PIECES[25 + rnd(9)]);
        } else {
            int k = 1 + (int)rnd(14);
            for (int i = 0; i < k; i++) {
                const char *s = PIECES[rnd(sizeof PIECES / sizeof *PIECES)];
                if (o + strlen(s) + 1 < sizeof line) o += (size_t)sprintf(line + o, "%s", s);
            }
        }
        if (mode == 2 && o > 0) line[rnd((uint32_t)o)] = (char)rnd(256); /* a random byte */
        ig_record rec = {line, o, 1, 0};
        size_t nk = 1 + rnd(2);
        ig_doc f, j;
        ig_err ef = {0}, ej = {0};
        ig_status sf = ig_record_parse_json(&rec, "g", keys, nk, IG_JSON_FAST_ONLY, &f, &ef);
        ig_status sj = ig_record_parse_json(&rec, "g", keys, nk, IG_JSON_JANSSON, &j, &ej);
        if (sf == IG_OK) {
            fast_ok++;
            if (sj != IG_OK) fail_msg("fast path accepted what jansson rejects: %s", ej.msg);
            for (size_t k = 0; k < nk; k++) {
                assert_int_equal(f.len[k], j.len[k]);
                if (f.len[k]) assert_memory_equal(f.text[k], j.text[k], f.len[k]);
            }
        } else if (sf == IG_ERR_FORMAT) { /* invalid UTF-8: reported before either parser */
            assert_int_equal(sj, IG_ERR_FORMAT);
            assert_string_equal(ef.msg, ej.msg);
        } else {
            assert_int_equal(sf, IG_ERR_UNSUPPORTED);
        }
        ig_doc_release(&f);
        ig_doc_release(&j);
        /* the default mode behaves exactly as jansson, messages included */
        ig_doc a;
        ig_err ea = {0};
        ig_status sa = ig_record_parse_json(&rec, "g", keys, nk, IG_JSON_AUTO, &a, &ea);
        assert_int_equal(sa, sj);
        if (sa != IG_OK) assert_string_equal(ea.msg, ej.msg);
        ig_doc_release(&a);
    }
    assert_true(fast_ok > 10000); /* the generator does reach the fast path */
}

/* Parsing is thread-safe: workers parse concurrently (first jansson use included). */
typedef struct par_job {
    const char *buf;
    size_t len;
    int mode;
    uint64_t sum;
} par_job;

static void *parse_all(void *arg) {
    par_job *j = arg;
    ig_record_reader *r;
    ig_err err = {0};
    if (ig_record_reader_open_mem(&r, NULL, "par", j->buf, j->len, IG_INPUT_JSONL, &err))
        return NULL;
    for (;;) {
        ig_record rec;
        int has;
        if (ig_record_reader_next(r, &rec, &has, &err) || !has) break;
        ig_doc doc;
        if (ig_record_parse_json(&rec, "par", KEY_TEXT, 1, (ig_json_mode)j->mode, &doc, &err))
            break;
        j->sum += ig_xxh3_64(doc.text[0], doc.len[0]) ^ rec.line;
        ig_doc_release(&doc);
    }
    ig_record_reader_close(r);
    return NULL;
}

static void test_parallel_parse(void **state) {
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_non_null(m);
    for (int i = 0; i < 3000; i++)
        fprintf(m, "{\"id\": %d, \"text\": \"doc %d \\u00e9\\ud83d\\ude0d %s\"}\n", i, i,
                i % 3 ? "plain" : "more");
    fclose(m);
    par_job jobs[8];
    pthread_t th[8];
    for (int t = 0; t < 8; t++) {
        jobs[t] = (par_job){buf, len, t % 2 ? IG_JSON_JANSSON : IG_JSON_AUTO, 0};
        assert_int_equal(pthread_create(&th[t], NULL, parse_all, &jobs[t]), 0);
    }
    for (int t = 0; t < 8; t++) pthread_join(th[t], NULL);
    assert_true(jobs[0].sum != 0);
    for (int t = 1; t < 8; t++) assert_true(jobs[t].sum == jobs[0].sum);
    free(buf);
}

/* Every record of path read whole, as "line:offset:bytes\n" lines into a growing buffer. */
static void record_lines(ig_record_reader *r, uint64_t line_base, char **buf, size_t *len,
                         size_t *cap) {
    for (;;) {
        ig_record rec;
        int has = 0;
        ig_err err = {0};
        if (ig_record_reader_next(r, &rec, &has, &err) != IG_OK) fail_msg("%s", err.msg);
        if (!has) return;
        size_t need = *len + rec.len + 64;
        if (need > *cap) {
            *cap = need * 2;
            *buf = realloc(*buf, *cap);
            assert_non_null(*buf);
        }
        *len += (size_t)snprintf(*buf + *len, *cap - *len,
                                 "%llu:%llu:", (unsigned long long)(rec.line + line_base),
                                 (unsigned long long)rec.byte_offset);
        memcpy(*buf + *len, rec.data, rec.len);
        *len += rec.len;
        (*buf)[(*len)++] = '\n';
    }
}

/* Reads path whole and then as ranges of each size in sizes[], for both line kinds: the ranges
 * together give the records of the whole file, with the same offsets and, once each range's
 * line numbers are offset by the lines of the ranges before, the same line numbers. */
static void check_ranges(const char *path, size_t n, const size_t *sizes, size_t n_sizes) {
    for (int kind = 0; kind < 2; kind++) {
        ig_input_kind k = kind ? IG_INPUT_TXT_LINES : IG_INPUT_JSONL;
        ig_record_reader *r = NULL;
        ig_err err = {0};
        assert_int_equal(ig_record_reader_open(&r, NULL, path, k, &err), IG_OK);
        char *whole = NULL;
        size_t wlen = 0, wcap = 0;
        record_lines(r, 0, &whole, &wlen, &wcap);
        uint64_t lines = ig_record_reader_lines(r);
        ig_record_reader_close(r);
        for (size_t si = 0; si < n_sizes; si++) {
            size_t rs = sizes[si];
            char *got = NULL;
            size_t glen = 0, gcap = 0;
            uint64_t base = 0;
            for (uint64_t b = 0; b < n; b += rs) {
                uint64_t e = b + rs >= n ? UINT64_MAX : b + rs;
                if (ig_record_reader_open_range(&r, NULL, path, k, b, e, &err) != IG_OK)
                    fail_msg("%s", err.msg);
                record_lines(r, base, &got, &glen, &gcap);
                base += ig_record_reader_lines(r);
                ig_record_reader_close(r);
            }
            if (base != lines)
                fail_msg("kind %d, ranges of %zu bytes: %llu lines, not %llu", kind, rs,
                         (unsigned long long)base, (unsigned long long)lines);
            if (glen != wlen || memcmp(got, whole, wlen) != 0)
                fail_msg("kind %d, ranges of %zu bytes: the records differ", kind, rs);
            free(got);
        }
        free(whole);
    }
}

/* A file read as byte ranges (ig_record_reader_open_range) gives the records of reading it whole:
 * a small file under every range size from 1 byte up, so that boundaries fall everywhere (inside
 * lines and multi-byte UTF-8, between '\r' and '\n', on blank lines, in ranges that start no line
 * at all, at the end), and a file with a 3 MiB line (past a read buffer) under coarser ranges. A
 * record over the size limit in a later range is reported at the file's line. */
static void test_byte_ranges(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *small = igt_fmt("%s/s.jsonl", dir);
    /* lines of many lengths, CRLF ends, blank lines, a BOM, UTF-8, and no '\n' at the end */
    size_t cap = 4u << 20, n = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    n += (size_t)sprintf(text + n, "\xEF\xBB\xBF{\"text\": \"bom\"}\n\n  \r\n");
    for (int i = 0; i < 40; i++) {
        n += (size_t)sprintf(text + n, "{\"text\": \"%d \xC3\xA9\xE2\x82\xAC ", i);
        for (int k = 0; k < (i * 37) % 90; k++) text[n++] = (char)('a' + k % 26);
        n += (size_t)sprintf(text + n, "\"}%s", i % 3 == 0 ? "\r\n" : i % 7 == 0 ? "\n\n" : "\n");
    }
    n += (size_t)sprintf(text + n, "{\"text\": \"last\"}");
    igt_write(small, text, n);
    size_t sizes[80], n_sizes = 0;
    for (size_t rs = 1; rs <= 64; rs++) sizes[n_sizes++] = rs;
    const size_t more[] = {100, 333, 1000, n - 1, n, n + 10};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) sizes[n_sizes++] = more[i];
    check_ranges(small, n, sizes, n_sizes);

    /* the same lines, then one of 3 MiB and one more */
    const char *big = igt_fmt("%s/b.jsonl", dir);
    n -= strlen("{\"text\": \"last\"}");
    n += (size_t)sprintf(text + n, "{\"text\": \"");
    size_t long_at = n;
    memset(text + n, 'x', 3u << 20);
    n += 3u << 20;
    n += (size_t)sprintf(text + n, "\"}\n{\"text\": \"last\"}");
    igt_write(big, text, n);
    const size_t big_sizes[] = {700, 65536, (1u << 20) + 3, long_at, n - 1, n};
    check_ranges(big, n, big_sizes, sizeof big_sizes / sizeof big_sizes[0]);

    /* the long line (from long_at - 10) over a 1 MiB limit, read by a range that starts inside
     * the line before it: the message names the file's line, as a whole-file reader does */
    uint64_t lines_before = 0;
    for (size_t i = 0; i < long_at; i++) lines_before += text[i] == '\n';
    const char *want =
        igt_fmt("%s:%llu: record longer than", big, (unsigned long long)lines_before + 1);
    for (int whole = 0; whole < 2; whole++) {
        ig_record_reader *r = NULL;
        ig_err err = {0};
        if (whole)
            assert_int_equal(ig_record_reader_open(&r, NULL, big, IG_INPUT_JSONL, &err), IG_OK);
        else
            assert_int_equal(ig_record_reader_open_range(&r, NULL, big, IG_INPUT_JSONL,
                                                         long_at - 13, long_at - 9, &err),
                             IG_OK);
        ig_record_reader_set_max_record(r, 1u << 20);
        ig_record rec;
        int has = 1;
        ig_status st;
        while ((st = ig_record_reader_next(r, &rec, &has, &err)) == IG_OK && has) {
        }
        assert_int_equal(st, IG_ERR_FORMAT);
        if (strncmp(err.msg, want, strlen(want)) != 0)
            fail_msg("whole %d: got '%s', want '%s...'", whole, err.msg, want);
        ig_record_reader_close(r);
    }

    /* what cannot be read by ranges */
    ig_record_reader *r = NULL;
    ig_err err = {0};
    assert_int_equal(ig_record_reader_open_range(&r, NULL, big, IG_INPUT_JSONL_ZST, 0, 10, &err),
                     IG_ERR_INVALID_ARG);
    assert_int_equal(ig_record_reader_open_range(&r, NULL, "-", IG_INPUT_JSONL, 0, 10, &err),
                     IG_ERR_INVALID_ARG);
    free(text);
    igt_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpora_jsonl_zst_txt),
        cmocka_unit_test(test_corpora_fast_path_matches_jansson),
        cmocka_unit_test(test_escapes_and_surrogates),
        cmocka_unit_test(test_bad_json_lines),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_utf8_valid),
        cmocka_unit_test(test_utf8_blocks),
        cmocka_unit_test(test_blank_lines_crlf_last_line),
        cmocka_unit_test(test_multiple_keys),
        cmocka_unit_test(test_long_line_and_zst),
        cmocka_unit_test(test_buffer_boundaries),
        cmocka_unit_test(test_file_changed),
        cmocka_unit_test(test_txt_modes),
        cmocka_unit_test(test_stdin),
        cmocka_unit_test(test_expand_inputs),
        cmocka_unit_test(test_fast_path_agrees_with_jansson),
        cmocka_unit_test(test_parallel_parse),
        cmocka_unit_test(test_byte_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
