/* test_tokenizer.c - the byte-level BPE tokenizers: exact ids against the references of
 * ../shared/data (every document of the five corpora; GPT-2 through tokenizer.json, through
 * vocab.json + merges.txt and through r50k_base.tiktoken; cl100k_base and o200k_base through their
 * .tiktoken files), round trips, special tokens, characters premerged before the merge loop
 * (bpe_premerge.c) against merging their bytes, and errors for bad tokenizer files.
 *
 * Without ../shared the exact tests still run on the subset in tests/data/tokenizer/ (edge_cases
 * with its gpt2/cl100k/o200k references, tinyshakespeare's gpt2 reference, cl100k_base.tiktoken)
 * with the bundled data/gpt2 files.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preprocess/preprocess.h"
#include "preprocess/tokenizer_internal.h"
#include "script_chars.h"
#include "testutil.h"

static ig_tokenizer *load(const char *path, const char *encoding) {
    ig_tokenizer_opts o = ig_tokenizer_opts_default();
    o.tiktoken_encoding = encoding;
    ig_tokenizer *t = NULL;
    ig_err err = {0};
    ig_status st = ig_tokenizer_load(&t, NULL, path, &o, &err);
    if (st != IG_OK) fail_msg("loading %s: %s", path, err.msg);
    return t;
}

/* A directory holding only vocab.json + merges.txt (symlinks to gpt2_dir's). */
static char *vocab_merges_dir(const char *gpt2_dir) {
    char *d = igt_mkdtemp();
    assert_int_equal(symlink(igt_fmt("%s/vocab.json", gpt2_dir), igt_fmt("%s/vocab.json", d)), 0);
    assert_int_equal(symlink(igt_fmt("%s/merges.txt", gpt2_dir), igt_fmt("%s/merges.txt", d)), 0);
    return d;
}

/* Reads a reference .bin of little-endian u16 or u32 ids. */
static uint32_t *read_ids(const char *path, int width, size_t *n) {
    size_t len;
    uint8_t *b = (uint8_t *)igt_read(path, &len);
    *n = len / (size_t)width;
    uint32_t *ids = malloc((*n + 1) * sizeof *ids);
    for (size_t i = 0; i < *n; i++)
        ids[i] = width == 2 ? (uint32_t)(b[2 * i] | b[2 * i + 1] << 8)
                            : (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                                  (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24;
    free(b);
    return ids;
}

/* Encodes every document of jsonl, appends the end-of-text id, compares with ref; decodes back.
 * Twice with the same encoder: the second pass takes most pieces from the encoder's caches
 * (filled by the first), which must give the same ids as computing them. */
static void check_corpus(ig_tokenizer *tok, const char *jsonl, const char *ref, int width) {
    size_t n_ref, jlen;
    uint32_t *want = read_ids(ref, width, &n_ref);
    char *data = igt_read(jsonl, &jlen);
    ig_encoder *enc = NULL;
    ig_err err = {0};
    assert_int_equal(ig_encoder_create(&enc, tok, &err), IG_OK);
    ig_tokens out = {0};
    char *buf = NULL;
    size_t blen = 0, bcap = 0, pos = 0, doc = 0, bad = 0;
    int32_t eod = ig_tokenizer_eod(tok);
    assert_true(eod >= 0);
    for (int pass = 0; pass < 2; pass++, pos = 0, doc = 0)
        for (char *line = data; line < data + jlen; doc++) {
            char *nl = memchr(line, '\n', (size_t)(data + jlen - line));
            size_t ll = nl ? (size_t)(nl - line) : (size_t)(data + jlen - line);
            json_error_t je;
            json_t *j = json_loadb(line, ll, JSON_ALLOW_NUL, &je);
            if (!j) fail_msg("%s:%zu: %s", jsonl, doc + 1, je.text);
            json_t *text = json_object_get(j, "text");
            const char *s = json_string_value(text);
            size_t slen = json_string_length(text);
            out.n = 0;
            assert_int_equal(ig_encoder_encode(enc, s, slen, 0, &out, &err), IG_OK);
            assert_int_equal(ig_tokens_push(&out, eod), IG_OK);
            size_t k = 0;
            while (k < out.n && pos + k < n_ref && (uint32_t)out.ids[k] == want[pos + k]) k++;
            if (k != out.n && bad++ < 3) {
                print_message("%s: %s doc %zu: id %zu of %zu differs: got %d, want %u\n",
                              ig_tokenizer_name(tok), jsonl, doc, k, out.n,
                              k < out.n ? out.ids[k] : -1, pos + k < n_ref ? want[pos + k] : 0);
            }
            /* resynchronise on the reference's end of document so later docs are still checked */
            size_t e = pos;
            while (e < n_ref && want[e] != (uint32_t)eod) e++;
            pos = e + 1;
            blen = 0;
            assert_int_equal(ig_tokenizer_decode(tok, out.ids, out.n - 1, &buf, &blen, &bcap, &err),
                             IG_OK);
            if (blen != slen || (slen && memcmp(buf, s, slen) != 0)) {
                print_message("%s doc %zu: decode(encode(x)) != x\n", jsonl, doc);
                bad++;
            }
            json_decref(j);
            line = nl ? nl + 1 : data + jlen;
            if (line == data + jlen) assert_int_equal(pos, n_ref);
        }
    if (bad)
        fail_msg("%s with %s: %zu documents differ from %s", jsonl, ig_tokenizer_name(tok), bad,
                 ref);
    ig_tokens_free(&out);
    free(buf);
    ig_encoder_free(enc);
    free(data);
    free(want);
}

static const char *k_corpora[] = {"tinyshakespeare", "udhr_multilingual", "c_code", "emoji_test",
                                  "edge_cases"};

static void check_all_corpora(ig_tokenizer *tok, const char *ref_kind, int width) {
    const char *sd = igt_shared_data();
    for (size_t i = 0; i < 5; i++)
        check_corpus(tok, igt_fmt("%s/text/%s.jsonl", sd, k_corpora[i]),
                     igt_fmt("%s/tokens/%s.%s", sd, k_corpora[i], ref_kind), width);
}

/* ---- without ../shared: the bundled GPT-2 files and the tests/data subset ---- */

static void test_bundled_gpt2(void **state) {
    (void)state;
    const char *src = igt_source_dir();
    const char *td = igt_fmt("%s/tests/data/tokenizer", src);
    ig_tokenizer *a = load(igt_fmt("%s/data/gpt2/tokenizer.json", src), NULL);
    char *vm = vocab_merges_dir(igt_fmt("%s/data/gpt2", src));
    ig_tokenizer *b = load(vm, NULL);
    assert_int_equal(ig_tokenizer_vocab_size(a), 50257);
    assert_int_equal(ig_tokenizer_eod(a), 50256);
    assert_int_equal(ig_tokenizer_eod(b), 50256);
    assert_string_equal(ig_tokenizer_name(a), "gpt2");
    assert_true(ig_tokenizer_hash(a) == ig_tokenizer_hash(b));
    char tds[1024];
    snprintf(tds, sizeof tds, "%s", td);
    check_corpus(a, igt_fmt("%s/edge_cases.jsonl", tds), igt_fmt("%s/edge_cases.gpt2.u16.bin", tds),
                 2);
    check_corpus(b, igt_fmt("%s/edge_cases.jsonl", tds), igt_fmt("%s/edge_cases.gpt2.u16.bin", tds),
                 2);
    check_corpus(a, igt_fmt("%s/data/tinyshakespeare.jsonl", src),
                 igt_fmt("%s/tinyshakespeare.gpt2.u16.bin", tds), 2);
    ig_tokenizer_free(a);
    ig_tokenizer_free(b);
    igt_rmtree(vm);
    free(vm);
}

static void test_bundled_cl100k(void **state) {
    (void)state;
    const char *td = igt_fmt("%s/tests/data/tokenizer", igt_source_dir());
    char tds[1024];
    snprintf(tds, sizeof tds, "%s", td);
    ig_tokenizer *t = load(igt_fmt("%s/cl100k_base.tiktoken", tds), NULL);
    assert_int_equal(ig_tokenizer_eod(t), 100257);
    assert_int_equal(ig_tokenizer_vocab_size(t), 100277);
    check_corpus(t, igt_fmt("%s/edge_cases.jsonl", tds),
                 igt_fmt("%s/edge_cases.cl100k.u32.bin", tds), 4);
    ig_tokenizer_free(t);
}

/* ---- with ../shared: every corpus ---- */

static void test_shared_gpt2_json(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    ig_tokenizer *t = load(igt_fmt("%s/gpt2/tokenizer.json", igt_shared_data()), NULL);
    check_all_corpora(t, "gpt2.u16.bin", 2);
    ig_tokenizer_free(t);
}

static void test_shared_gpt2_vocab_merges(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    char *vm = vocab_merges_dir(igt_fmt("%s/gpt2", igt_shared_data()));
    ig_tokenizer *t = load(vm, NULL);
    check_all_corpora(t, "gpt2.u16.bin", 2);
    ig_tokenizer_free(t);
    igt_rmtree(vm);
    free(vm);
}

static void test_shared_r50k(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    ig_tokenizer *t = load(igt_fmt("%s/tiktoken/r50k_base.tiktoken", igt_shared_data()), NULL);
    assert_int_equal(ig_tokenizer_eod(t), 50256);
    check_all_corpora(t, "gpt2.u16.bin", 2);
    /* the same ids as GPT-2's tokenizer.json: the same identity (shards merge and blend); a
     * different vocabulary: another */
    ig_tokenizer *json = load(igt_fmt("%s/data/gpt2/tokenizer.json", igt_source_dir()), NULL);
    assert_true(ig_tokenizer_hash(t) == ig_tokenizer_hash(json));
    ig_tokenizer *cl =
        load(igt_fmt("%s/tests/data/tokenizer/cl100k_base.tiktoken", igt_source_dir()), NULL);
    assert_true(ig_tokenizer_hash(cl) != ig_tokenizer_hash(json));
    ig_tokenizer_free(cl);
    ig_tokenizer_free(json);
    ig_tokenizer_free(t);
}

static void test_shared_cl100k(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    ig_tokenizer *t = load(igt_fmt("%s/tiktoken/cl100k_base.tiktoken", igt_shared_data()), NULL);
    check_all_corpora(t, "cl100k.u32.bin", 4);
    ig_tokenizer_free(t);
}

static void test_shared_o200k(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    ig_tokenizer *t = load(igt_fmt("%s/tiktoken/o200k_base.tiktoken", igt_shared_data()), NULL);
    assert_int_equal(ig_tokenizer_eod(t), 199999);
    check_all_corpora(t, "o200k.u32.bin", 4);
    ig_tokenizer_free(t);
}

static void test_shared_whole_file(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    const char *sd = igt_shared_data();
    ig_tokenizer *t = load(igt_fmt("%s/gpt2/tokenizer.json", sd), NULL);
    size_t len, n_ref;
    char *text = igt_read(igt_fmt("%s/text/tinyshakespeare.txt", sd), &len);
    uint32_t *want = read_ids(igt_fmt("%s/tokens/tinyshakespeare.txt.gpt2.u16.bin", sd), 2, &n_ref);
    ig_encoder *enc = NULL;
    ig_err err = {0};
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    ig_tokens out = {0};
    assert_int_equal(ig_encoder_encode(enc, text, len, 0, &out, &err), IG_OK);
    assert_int_equal(out.n, n_ref);
    for (size_t i = 0; i < n_ref; i++)
        if ((uint32_t)out.ids[i] != want[i])
            fail_msg("id %zu: got %d, want %u", i, out.ids[i], want[i]);
    ig_tokens_free(&out);
    ig_encoder_free(enc);
    free(want);
    free(text);
    ig_tokenizer_free(t);
}

/* ---- special tokens, odd bytes, long pieces ---- */

static void encode(ig_tokenizer *t, const char *s, size_t n, int flags, ig_tokens *out) {
    ig_encoder *enc = NULL;
    ig_err err = {0};
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    out->n = 0;
    assert_int_equal(ig_encoder_encode(enc, s, n, flags, out, &err), IG_OK);
    ig_encoder_free(enc);
}

static void roundtrip(ig_tokenizer *t, const char *s, size_t n) {
    ig_tokens out = {0};
    encode(t, s, n, 0, &out);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    ig_err err = {0};
    assert_int_equal(ig_tokenizer_decode(t, out.ids, out.n, &buf, &len, &cap, &err), IG_OK);
    assert_int_equal(len, n);
    if (n) assert_memory_equal(buf, s, n);
    free(buf);
    ig_tokens_free(&out);
}

static void test_special_tokens(void **state) {
    (void)state;
    ig_tokenizer *t = load(igt_fmt("%s/data/gpt2/tokenizer.json", igt_source_dir()), NULL);
    const char *s = "Hello<|endoftext|> world<|endoftext|>";
    ig_tokens out = {0};
    encode(t, s, strlen(s), 0, &out);
    for (size_t i = 0; i < out.n; i++) assert_int_not_equal(out.ids[i], 50256);
    size_t plain = out.n;
    encode(t, s, strlen(s), IG_ENCODE_ALLOW_SPECIAL, &out);
    /* "Hello" <eot> " world" <eot> */
    assert_int_equal(out.n, 4);
    assert_int_equal(out.ids[0], 15496);
    assert_int_equal(out.ids[1], 50256);
    assert_int_equal(out.ids[2], 995);
    assert_int_equal(out.ids[3], 50256);
    assert_true(plain > 4);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    ig_err err = {0};
    assert_int_equal(ig_tokenizer_decode(t, out.ids, out.n, &buf, &len, &cap, &err), IG_OK);
    assert_int_equal(len, strlen(s));
    assert_memory_equal(buf, s, len);
    int32_t bad = 50257;
    assert_int_equal(ig_tokenizer_decode(t, &bad, 1, &buf, &len, &cap, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "50257"));
    free(buf);
    ig_tokens_free(&out);
    ig_tokenizer_free(t);
}

static void test_odd_bytes_and_long_pieces(void **state) {
    (void)state;
    ig_tokenizer *t = load(igt_fmt("%s/data/gpt2/tokenizer.json", igt_source_dir()), NULL);
    uint64_t x = 88172645463325252ull;
    char buf[4096];
    for (int round = 0; round < 200; round++) { /* random bytes, invalid UTF-8 included */
        size_t n = (size_t)(round * 37 % 4000) + 1;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            static const char alphabet[] = " aZ'\t\n\xc3\xa9\xe2\x80\x8b"
                                           "1.";
            buf[i] = round % 2 ? (char)x : alphabet[x % 14];
        }
        roundtrip(t, buf, n);
    }
    /* long pieces take the heap merge path; they must equal the array path's result */
    memset(buf, '*', sizeof buf);
    roundtrip(t, buf, sizeof buf);
    ig_tokens a = {0}, b = {0};
    encode(t, buf, 4000, 0, &a);
    encode(t, buf, 80, 0, &b); /* 80 = 50 x 80/50: the same pattern, short path */
    assert_true(a.n > 0 && b.n > 0);
    assert_int_equal(a.ids[0], b.ids[0]);
    ig_tokens_free(&a);
    ig_tokens_free(&b);
    roundtrip(t, "", 0);
    ig_tokenizer_free(t);
}

/* Text of random fragments that stress the pre-tokenizer and the encoder's caches: runs of one
 * character, digits, white space of every kind, invalid UTF-8, emoji, mixed scripts, NULs (a
 * short piece is keyed by its bytes zero-padded: "ab" and "ab\0" must differ), contractions. */
static size_t adversarial_text(char *buf, size_t cap, uint64_t *x) {
#define F(lit)                                                                                     \
    { lit, sizeof lit - 1 }
    static const struct {
        const char *s;
        size_t n;
    } frag[] = {F("a"),
                F("ab"),
                F("ab\0"),
                F("\0"),
                F(" "),
                F("  "),
                F("\t"),
                F("\r\n"),
                F("\n\n"),
                F("\xc2\xa0"),
                F("\xe3\x80\x80"),
                F("'s"),
                F("'S"),
                F("'ll"),
                F("\xc5\xbf"),
                F("1"),
                F("12"),
                F("123"),
                F("1234567"),
                F("\xd9\xa3"),
                F(" the"),
                F("The"),
                F("\xff"),
                F("\xc3"),
                F("\xe2\x82"),
                F("\xed\xa0\x80"),
                F("\xf4\x90\x80\x80"),
                F("\xf0\x9f\x98\x8d"),
                F("\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb"),
                F("\xf0\x9f\x87\xab\xf0\x9f\x87\xb7"),
                F("\xd0\xbf\xd1\x80\xd0\xb8"),
                F("\xe4\xb8\xad\xe6\x96\x87"),
                F("\xe0\xb8\x81\xe0\xb8\xb2"),
                F("\xd8\xa7\xd9\x84"),
                F("x\xcc\x81"),
                F("HTTPServer"),
                F("/"),
                F("//"),
                F("{"),
                F("};"),
                F("->"),
                F("..."),
                F("==")};
#undef F
    size_t n = 0;
    while (n + 64 < cap) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        const char *f = frag[*x % (sizeof frag / sizeof frag[0])].s;
        size_t fl = frag[*x % (sizeof frag / sizeof frag[0])].n;
        size_t rep = (*x >> 32) % 16 == 0 ? 1 + (*x >> 40) % 40 : 1; /* sometimes a long run */
        for (size_t r = 0; r < rep && n + fl < cap; r++, n += fl) memcpy(buf + n, f, fl);
    }
    return n;
}

/* Mostly ASCII, as prose and code are (kind 0 and 1), or mostly white space (kind 2): letters,
 * spaces, digits, punctuation and every ASCII white-space character; unless kind 0, also
 * apostrophes, controls, and now and then a character that is not ASCII (among them the white
 * space U+0085 and U+00A0, and a stray byte). */
static size_t ascii_text(char *buf, size_t cap, uint64_t *x, int kind) {
    static const char *const other[] = {"\xc2\x85",     "\xc2\xa0", "\xc3\xa9",
                                        "\xe4\xb8\xad", "\xff",     "\xf0\x9f\x98\x8d"};
    static const char *const spacey[] = {" ",  " ",  " ",    " ",        " ",       " ", "\r", "\n",
                                         "\n", "\t", "\v",   "\f",       "a",       "b", "Z",  "q",
                                         "e",  ".",  ",",    "(",        "1",       "2", "0",  "x",
                                         "-",  "'",  "\r\n", "\xc2\x85", "\xc2\xa0"};
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    size_t n = 0, want = 64 + (size_t)(*x % (cap - 72));
    while (n < want) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        unsigned r = (unsigned)(*x % (kind == 0 ? 88 : 100)), c = (unsigned)(*x >> 32);
        const char *o = NULL;
        if (kind == 2)
            o = spacey[*x % (sizeof spacey / sizeof spacey[0])];
        else if (r < 40)
            buf[n++] = (char)((c & 1 ? 'a' : 'A') + c % 26);
        else if (r < 60)
            buf[n++] = ' ';
        else if (r < 68)
            buf[n++] = (char)('0' + c % 10);
        else if (r < 80)
            buf[n++] = ".,;:!?-_()[]{}<>/\\\"#$%&*+=@^`|~"[c % 32];
        else if (r < 88)
            buf[n++] = "\t\n\v\f\r\n\n "[c % 8];
        else if (r < 93)
            buf[n++] = '\'';
        else if (r < 96)
            buf[n++] = (char)(c % 2 ? c % 9 : 0x7f - c % 5); /* controls, DEL */
        else
            o = other[c % 6];
        if (o) {
            size_t l = strlen(o);
            if (n + l > cap) break;
            memcpy(buf + n, o, l);
            n += l;
        }
    }
    return n;
}

/* ig_pretok_split (which takes ASCII text 64 bytes at a time from bit masks) gives the pieces the
 * general scanner gives one at a time, for the three patterns, on mostly ASCII text, on mostly
 * white space and on the adversarial mix above, whatever the room for ends. */
static void test_pretok_split_matches_scanner(void **state) {
    (void)state;
    static char buf[2048];
    size_t ends[300];
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int pat = IG_PAT_GPT2; pat <= IG_PAT_O200K; pat++) {
        ig_pretok pt;
        ig_err err = {0};
        assert_int_equal(ig_pretok_init(&pt, (ig_pattern)pat, &err), IG_OK);
        /* a run of spaces that goes on in a non-ASCII white space (or stops at an apostrophe)
         * at every place around the end of the 64-byte window */
        static const char *const tails[] = {"\xc2\xa0"
                                            "abc",
                                            "\xc2\x85"
                                            "abc",
                                            "'s and more",
                                            "\xe3\x80\x80x",
                                            "\n\xc2\xa0 y",
                                            ".\n\nabc",
                                            "12345 x",
                                            " \n y",
                                            "\t\n x",
                                            "\n \t\n z"};
        for (size_t k = 0; k < 80; k++) {
            for (size_t t = 0; t < sizeof tails / sizeof tails[0]; t++) {
                for (size_t spaces = 0; spaces <= 3; spaces++) {
                    size_t n = 0;
                    for (size_t j = 0; j < k; j++) buf[n++] = j % 7 == 3 ? ' ' : 'q';
                    for (size_t j = 0; j < spaces; j++) buf[n++] = ' ';
                    n += (size_t)sprintf(buf + n,
                                         "%s and then some more plain words that "
                                         "run on past the window's end.",
                                         tails[t]);
                    const uint8_t *s = (const uint8_t *)buf;
                    size_t got = ig_pretok_split(&pt, s, 0, n, ends, 300), want = 0;
                    for (size_t q = 0; q < got; q++) {
                        want = ig_pretok_next(&pt, s, want, n);
                        if (ends[q] != want)
                            fail_msg("pattern %d, tail %zu after %zu bytes: a piece ends at %zu, "
                                     "the scanner says %zu",
                                     pat, t, k, ends[q], want);
                    }
                }
            }
        }
        for (int round = 0; round < 8000; round++) {
            /* plain ASCII (no apostrophe), mostly ASCII, mostly white space, and the
             * adversarial mix */
            size_t n = round % 4 ? ascii_text(buf, sizeof buf, &x, round % 4 - 1)
                                 : adversarial_text(buf, 64 + (size_t)(x % 1000), &x);
            const uint8_t *s = (const uint8_t *)buf;
            size_t room = round % 5 == 0 ? 1 + (size_t)(x % 7) : sizeof ends / sizeof ends[0];
            size_t i = 0, want = 0;
            while (i < n) {
                size_t got = ig_pretok_split(&pt, s, i, n, ends, room);
                assert_true(got >= 1 && got <= room);
                for (size_t k = 0; k < got; k++) {
                    want = ig_pretok_next(&pt, s, want, n);
                    if (ends[k] != want)
                        fail_msg("pattern %d, round %d: a piece ends at %zu, the scanner says %zu "
                                 "(text of %zu bytes)",
                                 pat, round, ends[k], want, n);
                }
                i = ends[got - 1];
            }
        }
        ig_pretok_free(&pt);
    }
}

/* The encoder's caches give what computing the ids gives: an encoder that has first seen a lot
 * of other text (its caches full of pieces, some in the slots the text's pieces map to) and a
 * fresh one agree on every text, for the three encodings; and the ids decode back. */
static void test_caches_match_computing(void **state) {
    (void)state;
    const char *td = igt_fmt("%s/tests/data/tokenizer", igt_source_dir());
    char paths[2][1024];
    snprintf(paths[0], sizeof paths[0], "%s/data/gpt2/tokenizer.json", igt_source_dir());
    snprintf(paths[1], sizeof paths[1], "%s/cl100k_base.tiktoken", td);
    static char buf[1 << 16], primer[1 << 20];
    for (int k = 0; k < 2; k++) {
        ig_tokenizer *t = load(paths[k], NULL);
        ig_encoder *warm = NULL;
        ig_err err = {0};
        assert_int_equal(ig_encoder_create(&warm, t, &err), IG_OK);
        uint64_t x = 0x9E3779B97F4A7C15ull;
        ig_tokens a = {0}, b = {0};
        size_t pn = adversarial_text(primer, sizeof primer, &x);
        assert_int_equal(ig_encoder_encode(warm, primer, pn, 0, &a, &err), IG_OK);
        for (int round = 0; round < 20; round++) {
            size_t n = adversarial_text(buf, (size_t)(round * 3217 % (sizeof buf - 100)) + 100, &x);
            a.n = 0;
            assert_int_equal(ig_encoder_encode(warm, buf, n, 0, &a, &err), IG_OK);
            encode(t, buf, n, 0, &b);
            assert_int_equal(a.n, b.n);
            assert_memory_equal(a.ids, b.ids, a.n * sizeof a.ids[0]);
            roundtrip(t, buf, n);
        }
        ig_tokens_free(&a);
        ig_tokens_free(&b);
        ig_encoder_free(warm);
        ig_tokenizer_free(t);
    }
}

/* A cache of merged pieces shared by encoders (bpe_encode.c): an encoder that shares it gives
 * the ids of a plain one, and one that comes after another has merged the same text merges
 * nothing; a cache too small for the text fills, and encoders go on merging (and giving the same
 * ids) past it; a cache of another tokenizer is refused. GPT-2 and cl100k_base. */
static void test_shared_piece_cache(void **state) {
    (void)state;
    char paths[2][1024];
    snprintf(paths[0], sizeof paths[0], "%s/data/gpt2/tokenizer.json", igt_source_dir());
    snprintf(paths[1], sizeof paths[1], "%s/tests/data/tokenizer/cl100k_base.tiktoken",
             igt_source_dir());
    static char buf[1 << 17];
    ig_tokenizer *ts[2];
    for (int k = 0; k < 2; k++) ts[k] = load(paths[k], NULL);
    for (int k = 0; k < 2; k++) {
        ig_tokenizer *t = ts[k];
        uint64_t x = 0x2545F4914F6CDD1Dull + (uint64_t)k;
        size_t n = adversarial_text(buf, sizeof buf, &x);
        ig_tokens want = {0}, got = {0};
        encode(t, buf, n, 0, &want);
        ig_err err = {0};
        /* pieces over 128 bytes are merged every time (no cache keeps them): a plain encoder's
         * merges the second time over the text */
        ig_encoder *plain = NULL;
        assert_int_equal(ig_encoder_create(&plain, t, &err), IG_OK);
        assert_int_equal(ig_encoder_encode(plain, buf, n, 0, &got, &err), IG_OK);
        size_t first = ig_encoder_merges(plain);
        assert_int_equal(ig_encoder_encode(plain, buf, n, 0, &got, &err), IG_OK);
        size_t uncached = ig_encoder_merges(plain) - first;
        ig_encoder_free(plain);
        for (size_t cap = 0; cap <= 64; cap += 64) { /* the default size; 64 pieces */
            ig_piece_cache *pc = NULL;
            assert_int_equal(ig_piece_cache_create(&pc, t, cap, &err), IG_OK);
            size_t merges[3];
            for (int e = 0; e < 3; e++) {
                ig_encoder *enc = NULL;
                assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
                assert_int_equal(ig_encoder_share(enc, pc, &err), IG_OK);
                got.n = 0;
                assert_int_equal(ig_encoder_encode(enc, buf, n, 0, &got, &err), IG_OK);
                assert_int_equal(got.n, want.n);
                assert_memory_equal(got.ids, want.ids, want.n * sizeof want.ids[0]);
                merges[e] = ig_encoder_merges(enc);
                ig_encoder_free(enc);
            }
            assert_int_equal(merges[0], first);
            assert_true(merges[0] > uncached + 1000); /* the text needs merging */
            if (cap == 0) {                           /* all of it cached by the first */
                assert_int_equal(merges[1], uncached);
                assert_int_equal(merges[2], uncached);
            } else { /* 64 pieces cached: the rest merged again (each encoder's own cache) */
                assert_true(merges[1] + 64 >= merges[0] && merges[1] < merges[0]);
                assert_int_equal(merges[2], merges[1]);
            }
            /* the other tokenizer's encoder refuses it */
            ig_encoder *other = NULL;
            assert_int_equal(ig_encoder_create(&other, ts[1 - k], &err), IG_OK);
            assert_int_equal(ig_encoder_share(other, pc, &err), IG_ERR_INVALID_ARG);
            assert_non_null(strstr(err.msg, "another tokenizer"));
            ig_encoder_free(other);
            ig_piece_cache_free(pc);
        }
        ig_tokens_free(&want);
        ig_tokens_free(&got);
    }
    ig_piece_cache *pc = NULL;
    ig_err err = {0};
    assert_int_equal(ig_piece_cache_create(&pc, ts[0], (size_t)1 << 30, &err), IG_ERR_INVALID_ARG);
    assert_null(pc);
    for (int k = 0; k < 2; k++) ig_tokenizer_free(ts[k]);
}

/* An encoder's own cache of merged pieces empties itself when full (131072 pieces) and goes on:
 * after 140,000 distinct words, the first 1,000 of them are merged again (as by a fresh encoder),
 * with the same ids. The words are longer than the short pieces' table takes (16 bytes). */
static void test_own_cache_fills(void **state) {
    (void)state;
    ig_tokenizer *t = load(igt_fmt("%s/data/gpt2/tokenizer.json", igt_source_dir()), NULL);
    enum { WORDS = 140000, AGAIN = 1000, LEN = 19 }; /* " " and 18 letters */
    char *text = malloc((size_t)WORDS * LEN);
    assert_non_null(text);
    uint64_t x = 0x5851F42D4C957F2Dull;
    for (size_t w = 0; w < WORDS; w++) {
        text[w * LEN] = ' ';
        for (int k = 1; k < LEN; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            text[w * LEN + k] = (char)('a' + x % 26);
        }
    }
    ig_err err = {0};
    ig_encoder *fresh = NULL, *enc = NULL;
    ig_tokens want = {0}, got = {0};
    assert_int_equal(ig_encoder_create(&fresh, t, &err), IG_OK);
    assert_int_equal(ig_encoder_encode(fresh, text, (size_t)AGAIN * LEN, 0, &want, &err), IG_OK);
    size_t merged = ig_encoder_merges(fresh);
    assert_true(merged > AGAIN / 2); /* most random words need merging */
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    assert_int_equal(ig_encoder_encode(enc, text, (size_t)WORDS * LEN, 0, &got, &err), IG_OK);
    size_t before = ig_encoder_merges(enc);
    assert_true(before > 131072); /* past the cache's size */
    got.n = 0;
    assert_int_equal(ig_encoder_encode(enc, text, (size_t)AGAIN * LEN, 0, &got, &err), IG_OK);
    assert_int_equal(ig_encoder_merges(enc) - before, merged);
    assert_int_equal(got.n, want.n);
    assert_memory_equal(got.ids, want.ids, want.n * sizeof want.ids[0]);
    ig_tokens_free(&want);
    ig_tokens_free(&got);
    ig_encoder_free(fresh);
    ig_encoder_free(enc);
    free(text);
    ig_tokenizer_free(t);
}

/* ---- characters merged before the merge loop (bpe_premerge.c) ---- */

/* ig_bpe_merge of s[0..n) as the encoder runs it (characters premerged where exact) and from its
 * bytes alone (segments off): the same ids. Returns their count; the ids are left in *ids. */
static size_t merge_both(ig_tokenizer *t, ig_bpe_scratch *sc, const void *s, size_t n,
                         uint32_t *ids) {
    const uint32_t *a, *b;
    size_t na = ig_bpe_merge(t, sc, s, n, &a);
    assert_true(na > 0);
    memcpy(ids, a, na * sizeof *ids);
    struct ig_seg_table *segs = t->segs;
    t->segs = NULL;
    size_t nb = ig_bpe_merge(t, sc, s, n, &b);
    t->segs = segs;
    assert_int_equal(na, nb);
    assert_memory_equal(ids, b, na * sizeof *ids);
    return na;
}

/* A rank tokenizer of the 256 bytes (ids 0-255) and the given tokens (ids 256 on, in order). */
static ig_tokenizer *tiny_ranks(const char *const *extra, size_t n_extra) {
    ig_tokenizer *t = NULL;
    ig_err err = {0};
    assert_int_equal(ig_tok_begin(&t, NULL, IG_PAT_O200K, 1, &err), IG_OK);
    for (uint32_t b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        assert_int_equal(ig_tok_set(t, b, &byte, 1, 0, "tiny", &err), IG_OK);
    }
    for (size_t i = 0; i < n_extra; i++)
        assert_int_equal(
            ig_tok_set(t, (uint32_t)(256 + i), extra[i], strlen(extra[i]), 0, "tiny", &err), IG_OK);
    assert_int_equal(ig_tok_index(t, "tiny", &err), IG_OK);
    assert_int_equal(ig_tok_pairs_from_ranks(t, &err), IG_OK);
    assert_int_equal(ig_tok_finish(t, "tiny", &err), IG_OK);
    assert_non_null(t->segs);
    return t;
}

/* Checks that piece merges to exactly the tokens want (a NULL-terminated list of their bytes). */
static void expect_merge(ig_tokenizer *t, ig_bpe_scratch *sc, const char *piece,
                         const char *const *want) {
    uint32_t ids[64];
    size_t n = merge_both(t, sc, piece, strlen(piece), ids), k = 0;
    for (; want[k]; k++) {
        assert_true(k < n);
        assert_int_equal(ids[k], ig_tok_lookup(t, (const uint8_t *)want[k], strlen(want[k])));
    }
    assert_int_equal(n, k);
}

/* Each condition of bpe_premerge.c's argument, on a vocabulary made so that merging a character
 * first, where its condition fails, would give other ids: a merge across the character's left
 * edge (with the byte before it) or right edge (with the byte after it) ranked before the merge
 * inside it; one joining its merged token to a neighbour that BPE grows first; a leading space.
 * And characters that do start merged (fewer elements than bytes), whole or after their first
 * merge. */
static void test_premerge_conditions(void **state) {
    (void)state;
    static const char *const extra[] = {
        "x\xd0",         /* 256: before 'а' (D0 B0): x joins the lead byte first */
        "\xd0\xb0",      /* 257 */
        "\xb1y",         /* 258: after 'б' (D0 B1): the continuation joins y first */
        "\xd0\xb1",      /* 259 */
        "\xd0\xb2y",     /* 260: 'в' + y, ranked before y + z and before 'в' itself */
        "yz",            /* 261 */
        "\xd0\xb2",      /* 262 */
        "v\xd0\xb3",     /* 263: v + 'г', before u + v and before 'г' */
        "uv",            /* 264 */
        "\xd0\xb3",      /* 265 */
        " \xd0",         /* 266: a leading space joins the lead byte of 'д' first */
        "\xd0\xb4",      /* 267 */
        "\xd0\xb5",      /* 268: 'е', free to start merged anywhere */
        "\xe0\xa4",      /* 269 */
        "\xe0\xa4\x95w", /* 270: KA + w, before KA itself: KA starts half merged before w */
        "\xe0\xa4\x95",  /* 271: Devanagari KA, three bytes in two merges */
        "\xe0\xa6\x95",  /* 272: Bengali KA, its second merge ranked before its first ... */
        "\xe0\xa6\x95j", /* 273: ... KA + j before j + k: started half merged, KA would take j */
        "jk",            /* 274 */
        "\xe0\xa6",      /* 275 */
        "\x96v",         /* 276: after a Devanagari character (E0 A5 96) that merges its last two */
        "\xa5\x96",      /* 277: bytes first, the last byte joins v before them */
        "\xe0\xa5\x96",  /* 278 */
    };
    ig_tokenizer *t = tiny_ranks(extra, sizeof extra / sizeof extra[0]);
    ig_bpe_scratch sc = {0};
    expect_merge(t, &sc, "x\xd0\xb0", (const char *const[]){"x\xd0", "\xb0", NULL});
    expect_merge(t, &sc, "\xd0\xb1y", (const char *const[]){"\xd0", "\xb1y", NULL});
    expect_merge(t, &sc, "\xd0\xb2yz", (const char *const[]){"\xd0\xb2", "yz", NULL});
    expect_merge(t, &sc, "uv\xd0\xb3", (const char *const[]){"uv", "\xd0\xb3", NULL});
    expect_merge(t, &sc, " \xd0\xb4", (const char *const[]){" \xd0", "\xb4", NULL});
    expect_merge(t, &sc, "a\xd0\xb4", (const char *const[]){"a", "\xd0\xb4", NULL});
    expect_merge(t, &sc, "q\xd0\xb5q", (const char *const[]){"q", "\xd0\xb5", "q", NULL});
    expect_merge(t, &sc, "\xe0\xa4\x95\xd0\xb5",
                 (const char *const[]){"\xe0\xa4\x95", "\xd0\xb5", NULL});
    /* where nothing stands against it, a character starts merged */
    uint32_t ids[16];
    assert_int_equal(ig_bpe_premerge(t, (const uint8_t *)"q\xd0\xb5q", 4, ids, NULL), 3);
    assert_int_equal(ids[1], 268);
    assert_int_equal(ig_bpe_premerge(t, (const uint8_t *)"a\xe0\xa4\x95", 4, ids, NULL), 2);
    assert_int_equal(ids[1], 271);
    /* ... or after its first merge only, where only its whole merge is ruled out */
    expect_merge(t, &sc, "\xe0\xa4\x95w", (const char *const[]){"\xe0\xa4\x95w", NULL});
    assert_int_equal(ig_bpe_premerge(t, (const uint8_t *)"\xe0\xa4\x95w", 4, ids, NULL), 3);
    assert_int_equal(ids[0], 269);
    /* ... but not when its second merge ranks before its first, nor when a merge across the edge
     * of its first merge's state ranks before that merge */
    expect_merge(t, &sc, "\xe0\xa6\x95jk", (const char *const[]){"\xe0\xa6\x95", "jk", NULL});
    expect_merge(t, &sc, "\xe0\xa5\x96v", (const char *const[]){"\xe0", "\xa5", "\x96v", NULL});
    expect_merge(t, &sc, "a\xe0\xa5\x96", (const char *const[]){"a", "\xe0\xa5\x96", NULL});
    /* ... and where something does, it starts as bytes */
    assert_int_equal(ig_bpe_premerge(t, (const uint8_t *)"x\xd0\xb0", 3, ids, NULL), 3);
    assert_int_equal(ig_bpe_premerge(t, (const uint8_t *)"\xd0\xb2y", 3, ids, NULL), 3);
    assert_int_equal(ig_bpe_premerge(t, (const uint8_t *)"v\xd0\xb3", 3, ids, NULL), 3);
    ig_bpe_scratch_free(&sc);
    ig_tokenizer_free(t);
}

/* Pieces of characters of many scripts, spaces, ASCII and bytes that are not UTF-8 (lone lead and
 * continuation bytes, overlong forms), short (the array merge) and long (the heap merge): starting
 * from premerged characters gives the ids merging the bytes gives, for GPT-2 and cl100k_base and,
 * with ../shared, o200k_base. */
static void test_premerge_matches_merging(void **state) {
    (void)state;
    const char *const *parts = igt_script_chars;
    const size_t n_parts = IGT_N_SCRIPT_CHARS;
    char paths[3][1024];
    snprintf(paths[0], sizeof paths[0], "%s/data/gpt2/tokenizer.json", igt_source_dir());
    snprintf(paths[1], sizeof paths[1], "%s/tests/data/tokenizer/cl100k_base.tiktoken",
             igt_source_dir());
    int with_shared = igt_shared_data() != NULL;
    if (with_shared)
        snprintf(paths[2], sizeof paths[2], "%s/tiktoken/o200k_base.tiktoken", igt_shared_data());
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int k = 0; k < 2 + with_shared; k++) {
        ig_tokenizer *t = load(paths[k], NULL);
        ig_bpe_scratch sc = {0};
        uint8_t piece[400];
        uint32_t ids[400];
        size_t fewer = 0;
        for (int round = 0; round < 3000; round++) {
            size_t n = 0, want = round % 10 == 0 ? 300 : (size_t)(round % 40) + 1;
            /* mostly one script a piece, as words are, with a leading space at times */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            if (x % 3 == 0) piece[n++] = ' ';
            size_t base = (size_t)(x >> 8) % n_parts;
            while (n < want) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                const char *p = parts[x % 4 ? (base + x % 3) % n_parts : (x >> 5) % n_parts];
                size_t len = strlen(p);
                if (n + len > sizeof piece) break;
                memcpy(piece + n, p, len);
                n += len;
            }
            merge_both(t, &sc, piece, n, ids);
            fewer += ig_bpe_premerge(t, piece, n, ids, NULL) < n;
        }
        assert_true(fewer > 300); /* the premerge is at work, not bypassed */
        ig_bpe_scratch_free(&sc);
        ig_tokenizer_free(t);
    }
    if (!with_shared) print_message("o200k_base part skipped: no ../shared/data\n");
}

/* ---- bad tokenizer files ---- */

static void write_str(const char *path, const char *s) {
    igt_write(path, s, strlen(s));
}

static ig_status try_load(const char *path, const char *encoding, ig_err *err) {
    ig_tokenizer_opts o = ig_tokenizer_opts_default();
    o.tiktoken_encoding = encoding;
    ig_tokenizer *t = NULL;
    ig_err_clear(err);
    ig_status st = ig_tokenizer_load(&t, NULL, path, &o, err);
    assert_true(st != IG_OK || t != NULL);
    ig_tokenizer_free(t);
    return st;
}

/* A character the pre-tokenizer cannot decode is each of its bytes, each "other" (neither letter,
 * number nor white space); a valid one is one character (z below: a letter). cl100k's and o200k's
 * patterns tell the two apart before a letter: `[^\r\n\p{L}\p{N}]?\p{L}+` takes one other character
 * as the word's prefix, so a valid symbol and the letter after it are one piece, while two or more
 * other bytes are a run of punctuation (` ?[^\s\p{L}\p{N}]+`) and the letter starts the next piece.
 */
static void test_pretok_invalid_utf8(void **state) {
    (void)state;
    static const struct {
        const char *s;
        size_t ends[3]; /* the pieces' ends, 0 after the last */
    } cases[] = {
        {"\xed\xa0\x80z", {3, 4}},     /* a surrogate, U+D800 */
        {"\xe0\x80\x80z", {3, 4}},     /* overlong three bytes */
        {"\xe0\x9f\xbfz", {3, 4}},     /* overlong: U+07FF in three bytes */
        {"\xc0\x80z", {2, 3}},         /* overlong two bytes */
        {"\xc1\xbfz", {2, 3}},         /* overlong two bytes */
        {"\xf0\x80\x80\x80z", {4, 5}}, /* overlong four bytes */
        {"\xf0\x8f\xbf\xbfz", {4, 5}}, /* overlong: U+FFFF in four bytes */
        {"\xf4\x90\x80\x80z", {4, 5}}, /* past U+10FFFF */
        {"\xf5\x80\x80\x80z", {4, 5}}, /* a lead byte UTF-8 never uses */
        {"\xe2\x82z", {2, 3}},         /* cut short by a letter */
        {"\xe2\x82\xe2\x82z", {4, 5}}, /* twice */
        {"\xf0\x9f\x98z", {3, 4}},     /* a four-byte character cut short */
        {"\x80\xbfz", {2, 3}},         /* continuation bytes alone */
        {"z\xe2\x82", {1, 3}},         /* cut short by the end */
        {"z\xf0\x9f\x98", {1, 4}},     /* a four-byte one */
        {"\xc2\xa9z", {3}},            /* U+00A9 COPYRIGHT SIGN */
        {"\xe2\x80\x94z", {4}},        /* U+2014 EM DASH */
        {"\xef\xbf\xbdz", {4}},        /* U+FFFD */
        {"\xf0\x9f\x98\x8dz", {5}},    /* U+1F60D */
        {"\xf4\x8f\xbf\xbfz", {5}},    /* U+10FFFF, the last code point */
        {"\xed\x9f\xbfz", {4}},        /* U+D7FF, just below the surrogates */
        {"\xee\x80\x80z", {4}},        /* U+E000, just above them */
    };
    for (int pat = IG_PAT_CL100K; pat <= IG_PAT_O200K; pat++) {
        ig_pretok pt;
        ig_err err = {0};
        assert_int_equal(ig_pretok_init(&pt, (ig_pattern)pat, &err), IG_OK);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const uint8_t *s = (const uint8_t *)cases[c].s;
            size_t n = strlen(cases[c].s), at = 0, k = 0;
            for (; at < n; k++) {
                at = ig_pretok_next(&pt, s, at, n);
                if (k >= 3 || at != cases[c].ends[k])
                    fail_msg("pattern %d, case %zu: piece %zu ends at %zu", pat, c, k, at);
            }
            assert_true(k == 3 || cases[c].ends[k] == 0);
        }
        ig_pretok_free(&pt);
    }
}

static void test_bad_files(void **state) {
    (void)state;
    char *d = igt_mkdtemp();
    ig_err err = {0};
    char p[1024];
    snprintf(p, sizeof p, "%s/missing.json", d);
    assert_int_equal(try_load(p, NULL, &err), IG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, p));

    /* tokenizer.json options that change the encoding and are not implemented are refused */
    {
        size_t jl;
        char *full = igt_read(igt_fmt("%s/data/gpt2/tokenizer.json", igt_source_dir()), &jl);
        const char *edits[][2] = {
            {"\"dropout\":null", "\"dropout\":0.5"},
            {"\"continuing_subword_prefix\":\"\"", "\"continuing_subword_prefix\":\"##\""},
            {"\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
             "\"trim_offsets\":true}",
             "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
             "\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":\"Removed\",\"invert\":true},"
             "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}]}"},
        };
        for (size_t e = 0; e < 3; e++) {
            char *at = strstr(full, edits[e][0]);
            assert_non_null(at);
            size_t ol = strlen(edits[e][0]), nl = strlen(edits[e][1]), pre = (size_t)(at - full);
            char *edited = malloc(jl + nl + 1);
            memcpy(edited, full, pre);
            memcpy(edited + pre, edits[e][1], nl);
            memcpy(edited + pre + nl, at + ol, jl - pre - ol);
            snprintf(p, sizeof p, "%s/edited.json", d);
            igt_write(p, edited, jl - ol + nl);
            assert_int_equal(try_load(p, NULL, &err), IG_ERR_UNSUPPORTED);
            free(edited);
        }
        unlink(p);
        free(full);
    }

    /* truncated tokenizer.json: file:line:column */
    size_t len;
    char *json = igt_read(igt_fmt("%s/data/gpt2/tokenizer.json", igt_source_dir()), &len);
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    igt_write(p, json, len / 2);
    assert_int_equal(try_load(p, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, p));
    assert_non_null(strstr(err.msg, "malformed JSON"));
    assert_int_equal(try_load(d, NULL, &err), IG_ERR_FORMAT); /* the directory finds it */
    free(json);
    unlink(p);

    /* a directory with vocab.json only */
    char *vocab = igt_read(igt_fmt("%s/data/gpt2/vocab.json", igt_source_dir()), &len);
    igt_write(igt_fmt("%s/vocab.json", d), vocab, len);
    assert_int_equal(try_load(d, NULL, &err), IG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "merges.txt"));

    /* bad merges lines */
    const char *mp = igt_fmt("%s/merges.txt", d);
    char mpath[1024];
    snprintf(mpath, sizeof mpath, "%s", mp);
    write_str(mpath, "#version: 0.2\n\xc4\xa0 t\nthree parts here\n");
    assert_int_equal(try_load(d, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, igt_fmt("%s:3:", mpath)));
    write_str(mpath, "#version: 0.2\n\xc4\xa0 t\nqqqzzz xyzw\n");
    assert_int_equal(try_load(d, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, igt_fmt("%s:3:", mpath)));
    assert_non_null(strstr(err.msg, "not in the vocabulary"));
    /* an id past 2^32 is refused, not narrowed into another valid id */
    write_str(mpath, "#version: 0.2\n\xc4\xa0 t\n");
    char *big = strstr(vocab, "\"<|endoftext|>\": 50256");
    assert_non_null(big);
    size_t head = (size_t)(big - vocab) + strlen("\"<|endoftext|>\": ");
    char *edited = malloc(len + 16);
    memcpy(edited, vocab, head);
    int w = sprintf(edited + head, "4295017552");
    memcpy(edited + head + w, vocab + head + 5, len - head - 5);
    igt_write(igt_fmt("%s/vocab.json", d), edited, len - 5 + (size_t)w);
    assert_int_equal(try_load(d, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "2^24"));
    free(edited);
    free(vocab);

    /* bad base64 and bad rank lines in a .tiktoken file */
    snprintf(p, sizeof p, "%s/cl100k_base.tiktoken", d);
    write_str(p, "IQ== 0\nIg== 1\n!!!! 2\n");
    assert_int_equal(try_load(p, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, igt_fmt("%s:3:", p)));
    write_str(p, "IQ== 0\nIg== x\n");
    assert_int_equal(try_load(p, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, igt_fmt("%s:2:", p)));
    /* valid lines, but far fewer ranks than the encoding has */
    write_str(p, "IQ== 0\nIg== 1\n");
    assert_int_equal(try_load(p, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "2 ranks, but cl100k_base has 100256"));
    /* a real rank file cut at a line boundary, and one given the wrong encoding */
    size_t full_len;
    char *full = igt_read(igt_fmt("%s/tests/data/tokenizer/cl100k_base.tiktoken", igt_source_dir()),
                          &full_len);
    size_t cut = 0;
    for (int lines = 0; lines < 50000; cut++) lines += full[cut] == '\n';
    igt_write(p, full, cut);
    assert_int_equal(try_load(p, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "50000 ranks"));
    assert_non_null(strstr(err.msg, "truncated"));
    snprintf(p, sizeof p, "%s/o200k_base.tiktoken", d);
    igt_write(p, full, full_len);
    assert_int_equal(try_load(p, NULL, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "o200k_base has 199998"));
    free(full);
    /* unknown encoding name */
    snprintf(p, sizeof p, "%s/mystery.tiktoken", d);
    write_str(p, "IQ== 0\n");
    assert_int_equal(try_load(p, NULL, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "mystery"));
    igt_rmtree(d);
    free(d);
}

/* Found by fuzz_tokenizer: one large id in a tokenizer.json (an added token at 1000000000) made
 * the loader allocate its per-id tables for every id up to it, gigabytes from a one-line edit.
 * Ids are limited to [0, 2^24), which holds any real vocabulary. */
static void test_huge_token_id(void **state) {
    (void)state;
    char *d = igt_mkdtemp();
    size_t len;
    char *json = igt_read(igt_fmt("%s/data/gpt2/tokenizer.json", igt_source_dir()), &len);
    const char *from = "\"added_tokens\":[{\"id\":50256";
    char *at = strstr(json, from);
    assert_non_null(at);
    size_t pre = (size_t)(at - json) + strlen(from) - 5;
    const char *ids[] = {"16777216", "1000000000"};
    char p[1024];
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    for (size_t i = 0; i < 2; i++) {
        size_t il = strlen(ids[i]);
        char *edited = malloc(len + il);
        memcpy(edited, json, pre);
        memcpy(edited + pre, ids[i], il);
        memcpy(edited + pre + il, json + pre + 5, len - pre - 5);
        igt_write(p, edited, len - 5 + il);
        ig_err err = {0};
        assert_int_equal(try_load(p, NULL, &err), IG_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "added_tokens[0]"));
        assert_non_null(strstr(err.msg, "2^24"));
        free(edited);
    }
    free(json);
    igt_rmtree(d);
    free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bundled_gpt2),
        cmocka_unit_test(test_bundled_cl100k),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_odd_bytes_and_long_pieces),
        cmocka_unit_test(test_caches_match_computing),
        cmocka_unit_test(test_shared_piece_cache),
        cmocka_unit_test(test_own_cache_fills),
        cmocka_unit_test(test_premerge_conditions),
        cmocka_unit_test(test_premerge_matches_merging),
        cmocka_unit_test(test_pretok_split_matches_scanner),
        cmocka_unit_test(test_pretok_invalid_utf8),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_huge_token_id),
        cmocka_unit_test(test_shared_gpt2_json),
        cmocka_unit_test(test_shared_gpt2_vocab_merges),
        cmocka_unit_test(test_shared_r50k),
        cmocka_unit_test(test_shared_cl100k),
        cmocka_unit_test(test_shared_o200k),
        cmocka_unit_test(test_shared_whole_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
