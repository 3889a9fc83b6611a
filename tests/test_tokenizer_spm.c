/* test_tokenizer_spm.c - SentencePiece tokenizers: ids exactly as SentencePiece's own (spm_encode
 * and python3-sentencepiece, which agree) for the models of tests/data/spm/ (unigram with
 * nmt_nfkc and user-defined and control symbols, with byte fallback and nmt_nfkc_cf, with identity
 * normalisation, T5's layout with 32000 pieces, a BPE model, a model with its own normalisation
 * and denormalisation rules, two with some pieces made UNUSED), and a Hugging Face tokenizer.json
 * converted from one of them; text
 * decoded as SentencePiece decodes it; the API around them (eos, --append-eos, special strings,
 * streaming decode, hashes, directories).
 *
 * Always: tests/data/spm/sample.txt (hard lines) and sample_docs.jsonl against the references in
 * tests/data/spm/ref/. With ../shared (IG_SHARED_DATA): every line of the five corpora against the
 * per-line checks of ref/MODEL.corpora.bin.zst (see tests/data/spm/make_spm.py, which made all of
 * them); a mismatch names the first line that differs. Bad files are in test_tokenizer_spm_bad.c.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "preprocess/preprocess.h"
#include "testutil.h"

static const char *k_models[] = {
    "unigram_nfkc_8k", "unigram_bytefb_4k", "unigram_identity_4k", "unigram_t5_32k",
    "bpe_4k",          "unigram_rules_300", "unigram_unused_4k",   "bpe_unused_4k"};
#define N_CORPUS_MDL 5 /* the first five have references for the shared corpora */

static const char *spm_dir(void) {
    return igt_fmt("%s/tests/data/spm", igt_source_dir());
}

static ig_tokenizer *load(const char *path) {
    ig_tokenizer *t = NULL;
    ig_err err = {0};
    if (ig_tokenizer_load(&t, NULL, path, NULL, &err) != IG_OK)
        fail_msg("loading %s: %s", path, err.msg);
    return t;
}

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j) fail_msg("%s:%d: %s", path, je.line, je.text);
    return j;
}

/* The text as a C string for messages: escapes, at most 80 bytes. */
static const char *show(const char *s, size_t n) {
    static char buf[400];
    size_t o = 0;
    for (size_t i = 0; i < n && i < 80 && o < sizeof buf - 8; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, sizeof buf - o, "\\x%02x", c);
    }
    buf[o] = '\0';
    return buf;
}

static const char *show_ids(const int32_t *ids, size_t n) {
    static char buf[400];
    size_t o = 0;
    for (size_t i = 0; i < n && i < 24 && o < sizeof buf - 16; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%d", i ? " " : "", ids[i]);
    if (n > 24) snprintf(buf + o, sizeof buf - o, " ...");
    return buf;
}

/* Encodes text, compares with want (a JSON array of ids); 0 when equal, else prints why. */
static int check_ids(ig_encoder *enc, const char *what, size_t k, const char *s, size_t n,
                     json_t *want, ig_tokens *out) {
    ig_err err = {0};
    out->n = 0;
    if (ig_encoder_encode(enc, s, n, 0, out, &err) != IG_OK)
        fail_msg("%s %zu: %s", what, k, err.msg);
    size_t wn = json_array_size(want);
    int32_t *w = malloc((wn + 1) * sizeof *w);
    for (size_t i = 0; i < wn; i++) w[i] = (int32_t)json_integer_value(json_array_get(want, i));
    int same = wn == out->n && (wn == 0 || memcmp(w, out->ids, wn * sizeof *w) == 0);
    if (!same) {
        size_t at = 0;
        while (at < wn && at < out->n && w[at] == out->ids[at]) at++;
        print_message("%s %zu \"%s\": differs at id %zu\n   got  %s\n", what, k, show(s, n), at,
                      show_ids(out->ids, out->n));
        print_message("   want %s\n", show_ids(w, wn));
    }
    free(w);
    return same ? 0 : 1;
}

/* Decodes the reference ids, compares with the reference text. */
static int check_decoded(const ig_tokenizer *t, const char *what, size_t k, json_t *ids,
                         json_t *text) {
    size_t n = json_array_size(ids);
    int32_t *v = malloc((n + 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (int32_t)json_integer_value(json_array_get(ids, i));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    ig_err err = {0};
    if (ig_tokenizer_decode(t, v, n, &buf, &len, &cap, &err) != IG_OK)
        fail_msg("%s %zu: decode: %s", what, k, err.msg);
    const char *want = json_string_value(text);
    size_t wl = json_string_length(text);
    int same = len == wl && (wl == 0 || memcmp(buf, want, wl) == 0);
    if (!same) {
        print_message("%s %zu: decoded \"%s\"\n", what, k, show(buf, len));
        print_message("   want \"%s\"\n", show(want, wl));
    }
    free(buf);
    free(v);
    return same ? 0 : 1;
}

/* sample.txt and sample_docs.jsonl with tokenizer t against ref/NAME.sample.json. */
static void check_sample(ig_tokenizer *t, const char *name) {
    json_t *ref = load_json(igt_fmt("%s/ref/%s.sample.json", spm_dir(), name));
    size_t len, dlen;
    char *txt = igt_read(igt_fmt("%s/sample.txt", spm_dir()), &len);
    char *docs = igt_read(igt_fmt("%s/sample_docs.jsonl", spm_dir()), &dlen);
    ig_encoder *enc = NULL;
    ig_err err = {0};
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    ig_tokens out = {0};
    json_t *lines = json_object_get(ref, "lines"), *decoded = json_object_get(ref, "decoded");
    size_t bad = 0, k = 0;
    for (size_t pos = 0; pos < len; k++) { /* lines hold NUL bytes: by length */
        char *nl = memchr(txt + pos, '\n', len - pos);
        assert_non_null(nl);
        assert_true(k < json_array_size(lines));
        bad += check_ids(enc, "sample.txt line", k + 1, txt + pos, (size_t)(nl - (txt + pos)),
                         json_array_get(lines, k), &out);
        bad += check_decoded(t, "sample.txt line", k + 1, json_array_get(lines, k),
                             json_array_get(decoded, k));
        pos = (size_t)(nl - txt) + 1;
    }
    assert_int_equal(k, json_array_size(lines));
    /* documents (newlines inside) */
    json_t *dids = json_object_get(ref, "docs"), *ddec = json_object_get(ref, "docs_decoded");
    k = 0;
    for (char *line = docs; line < docs + dlen; k++) {
        char *nl = memchr(line, '\n', (size_t)(docs + dlen - line));
        assert_non_null(nl);
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)(nl - line), JSON_ALLOW_NUL, &je);
        assert_non_null(j);
        json_t *s = json_object_get(j, "text");
        bad += check_ids(enc, "sample_docs.jsonl doc", k + 1, json_string_value(s),
                         json_string_length(s), json_array_get(dids, k), &out);
        bad += check_decoded(t, "sample_docs.jsonl doc", k + 1, json_array_get(dids, k),
                             json_array_get(ddec, k));
        json_decref(j);
        line = nl + 1;
    }
    assert_int_equal(k, json_array_size(dids));
    if (bad) fail_msg("%s: %zu differences from SentencePiece's ids or text", name, bad);
    ig_tokens_free(&out);
    ig_encoder_free(enc);
    free(txt);
    free(docs);
    json_decref(ref);
}

static void test_sample(void **state) {
    const char *name = *state;
    ig_tokenizer *t = load(igt_fmt("%s/%s.model", spm_dir(), name));
    json_t *ref = load_json(igt_fmt("%s/ref/%s.sample.json", spm_dir(), name));
    assert_int_equal(ig_tokenizer_vocab_size(t),
                     json_integer_value(json_object_get(ref, "vocab_size")));
    assert_int_equal(ig_tokenizer_eos(t), json_integer_value(json_object_get(ref, "eos_id")));
    assert_int_equal(ig_tokenizer_eod(t), ig_tokenizer_eos(t));
    json_decref(ref);
    check_sample(t, name);
    ig_tokenizer_free(t);
}

static int setup_model(void **state, int k) {
    *state = (void *)k_models[k];
    return 0;
}
static int m0(void **s) {
    return setup_model(s, 0);
}
static int m1(void **s) {
    return setup_model(s, 1);
}
static int m2(void **s) {
    return setup_model(s, 2);
}
static int m3(void **s) {
    return setup_model(s, 3);
}
static int m4(void **s) {
    return setup_model(s, 4);
}
static int m5(void **s) {
    return setup_model(s, 5);
}
static int m6(void **s) {
    return setup_model(s, 6);
}
static int m7(void **s) {
    return setup_model(s, 7);
}

/* The tokenizer.json converted from unigram_nfkc_8k.model: the same model (hash, ids, text). */
static void test_tokenizer_json(void **state) {
    (void)state;
    ig_tokenizer *a = load(igt_fmt("%s/unigram_nfkc_8k.model", spm_dir()));
    ig_tokenizer *b = load(igt_fmt("%s/unigram_nfkc_8k.tokenizer.json", spm_dir()));
    assert_string_equal(ig_tokenizer_name(b), "sentencepiece-unigram");
    assert_int_equal(ig_tokenizer_vocab_size(a), ig_tokenizer_vocab_size(b));
    assert_int_equal(ig_tokenizer_eos(a), ig_tokenizer_eos(b));
    assert_true(ig_tokenizer_hash(a) == ig_tokenizer_hash(b));
    check_sample(b, "unigram_nfkc_8k");
    ig_tokenizer_free(a);
    ig_tokenizer_free(b);
}

/* Names, ids, hashes; directories and detection by contents. */
static void test_identity(void **state) {
    (void)state;
    const char *d = spm_dir();
    ig_tokenizer *t5 = load(igt_fmt("%s/unigram_t5_32k.model", d));
    assert_string_equal(ig_tokenizer_name(t5), "sentencepiece-unigram");
    assert_int_equal(ig_tokenizer_vocab_size(t5), 32000);
    assert_int_equal(ig_tokenizer_eos(t5), 1); /* T5: pad 0, eos 1, unk 2 */
    char *buf = NULL;
    size_t len = 0, cap = 0;
    ig_err err = {0};
    int32_t ids[3] = {0, 1, 2};
    assert_int_equal(ig_tokenizer_decode(t5, ids, 3, &buf, &len, &cap, &err), IG_OK);
    assert_int_equal(len, 5); /* <pad> and </s> are invisible, <unk> is " \u2047 " */
    assert_memory_equal(buf, " \xE2\x81\x87 ", 5);
    ig_tokenizer *bpe = load(igt_fmt("%s/bpe_4k.model", d));
    assert_string_equal(ig_tokenizer_name(bpe), "sentencepiece-bpe");
    assert_int_equal(ig_tokenizer_eos(bpe), 2); /* SentencePiece's default: unk 0, bos 1, eos 2 */
    ig_tokenizer *nf = load(igt_fmt("%s/unigram_nfkc_8k.model", d));
    ig_tokenizer *nf2 = load(igt_fmt("%s/unigram_nfkc_8k.model", d));
    assert_true(ig_tokenizer_hash(nf) == ig_tokenizer_hash(nf2));
    assert_true(ig_tokenizer_hash(nf) != ig_tokenizer_hash(t5));
    assert_true(ig_tokenizer_hash(nf) != ig_tokenizer_hash(bpe));
    /* a directory with spiece.model or tokenizer.model; a model under any name */
    char *dir = igt_mkdtemp();
    size_t n;
    char *model = igt_read(igt_fmt("%s/unigram_nfkc_8k.model", d), &n);
    const char *names[] = {"spiece.model", "tokenizer.model", "weights.bin"};
    for (int k = 0; k < 3; k++) {
        char *sub = strdup(igt_fmt("%s/d%d", dir, k));
        assert_int_equal(mkdir(sub, 0755), 0);
        igt_write(igt_fmt("%s/%s", sub, names[k]), model, n);
        if (k < 2) igt_write(igt_fmt("%s/tokenizer.json", sub), "{}", 2); /* the .model wins */
        ig_tokenizer *x = load(k < 2 ? sub : igt_fmt("%s/%s", sub, names[k]));
        assert_true(ig_tokenizer_hash(x) == ig_tokenizer_hash(nf));
        ig_tokenizer_free(x);
        free(sub);
    }
    free(model);
    igt_rmtree(dir);
    free(dir);
    free(buf);
    ig_tokenizer_free(t5);
    ig_tokenizer_free(bpe);
    ig_tokenizer_free(nf);
    ig_tokenizer_free(nf2);
}

static int contains(const ig_tokens *t, int32_t id) {
    for (size_t i = 0; i < t->n; i++)
        if (t->ids[i] == id) return 1;
    return 0;
}

/* IG_ENCODE_APPEND_EOS, IG_ENCODE_ALLOW_SPECIAL, control strings as plain text. */
static void test_flags(void **state) {
    (void)state;
    ig_tokenizer *t = load(igt_fmt("%s/unigram_t5_32k.model", spm_dir()));
    ig_encoder *enc = NULL;
    ig_err err = {0};
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    ig_tokens a = {0}, b = {0};
    const char *s = "A caption.";
    assert_int_equal(ig_encoder_encode(enc, s, strlen(s), 0, &a, &err), IG_OK);
    assert_int_equal(ig_encoder_encode(enc, s, strlen(s), IG_ENCODE_APPEND_EOS, &b, &err), IG_OK);
    assert_int_equal(b.n, a.n + 1);
    assert_memory_equal(a.ids, b.ids, a.n * sizeof *a.ids);
    assert_int_equal(b.ids[a.n], 1);
    /* "</s>" in text: characters, never the control id; with ALLOW_SPECIAL: the id */
    a.n = b.n = 0;
    s = "one</s>two<pad><unk>";
    assert_int_equal(ig_encoder_encode(enc, s, strlen(s), 0, &a, &err), IG_OK);
    assert_false(contains(&a, 1) || contains(&a, 0));
    assert_int_equal(ig_encoder_encode(enc, s, strlen(s), IG_ENCODE_ALLOW_SPECIAL, &b, &err),
                     IG_OK);
    assert_true(contains(&b, 1) && contains(&b, 0) && b.ids[b.n - 1] == 2);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    assert_int_equal(ig_tokenizer_decode(t, b.ids, b.n, &buf, &len, &cap, &err), IG_OK);
    assert_int_equal(len, strlen("one two \xE2\x81\x87 "));
    assert_memory_equal(buf, "one two \xE2\x81\x87 ", len);
    free(buf);
    ig_tokens_free(&a);
    ig_tokens_free(&b);
    ig_encoder_free(enc);
    ig_tokenizer_free(t);
}

/* ig_tokenizer_decode_next: one id at a time, as `ingot sample` prints text. */
static void test_decode_next(void **state) {
    (void)state;
    ig_tokenizer *t = load(igt_fmt("%s/bpe_4k.model", spm_dir()));
    ig_encoder *enc = NULL;
    ig_err err = {0};
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    ig_tokens ids = {0};
    /* emoji and CJK go through byte pieces in this model */
    const char *s = "Streaming \xF0\x9F\x98\x80 text \xE6\x97\xA5\xE6\x9C\xAC and more";
    assert_int_equal(ig_encoder_encode(enc, s, strlen(s), 0, &ids, &err), IG_OK);
    char *whole = NULL, *inc = NULL;
    size_t wl = 0, wc = 0, il = 0, ic = 0;
    assert_int_equal(ig_tokenizer_decode(t, ids.ids, ids.n, &whole, &wl, &wc, &err), IG_OK);
    assert_int_equal(wl, strlen(s));
    assert_memory_equal(whole, s, wl);
    for (size_t i = 0; i < ids.n; i++)
        assert_int_equal(ig_tokenizer_decode_next(t, ids.ids + i, 1, &inc, &il, &ic, &err), IG_OK);
    assert_int_equal(il, wl + 1); /* the dummy prefix's space is kept */
    assert_int_equal(inc[0], ' ');
    assert_memory_equal(inc + 1, s, wl);
    int32_t bad = 4000;
    assert_int_equal(ig_tokenizer_decode(t, &bad, 1, &whole, &wl, &wc, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "4000"));
    free(whole);
    free(inc);
    ig_tokens_free(&ids);
    ig_encoder_free(enc);
    ig_tokenizer_free(t);
}

/* Encoders of one tokenizer in several threads at once give the ids one encoder gives (the
 * tokenizer is shared read-only). */
typedef struct thread_job {
    const ig_tokenizer *tok;
    const char *text;
    size_t len;
    ig_tokens out;
    ig_status st;
} thread_job;

static void *encode_job(void *arg) {
    thread_job *j = arg;
    ig_encoder *enc = NULL;
    ig_err err = {0};
    j->st = ig_encoder_create(&enc, j->tok, &err);
    for (int r = 0; r < 20 && j->st == IG_OK; r++) {
        j->out.n = 0;
        j->st = ig_encoder_encode(enc, j->text, j->len, 0, &j->out, &err);
    }
    ig_encoder_free(enc);
    return NULL;
}

static void test_threads(void **state) {
    (void)state;
    ig_tokenizer *t = load(igt_fmt("%s/unigram_nfkc_8k.model", spm_dir()));
    size_t len;
    char *text = igt_read(igt_fmt("%s/sample.txt", spm_dir()), &len);
    thread_job jobs[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        jobs[k] = (thread_job){t, text, len, {0}, IG_OK};
        assert_int_equal(pthread_create(&th[k], NULL, encode_job, &jobs[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        assert_int_equal(pthread_join(th[k], NULL), 0);
        assert_int_equal(jobs[k].st, IG_OK);
        assert_int_equal(jobs[k].out.n, jobs[0].out.n);
        assert_memory_equal(jobs[k].out.ids, jobs[0].out.ids, jobs[0].out.n * sizeof(int32_t));
    }
    for (int k = 0; k < 4; k++) ig_tokens_free(&jobs[k].out);
    free(text);
    ig_tokenizer_free(t);
}

/* Every allocation of an encoder's work failed in turn: IG_ERR_NOMEM, never a crash or wrong ids.
 */
static void test_failing_allocations(void **state) {
    (void)state;
    igt_flaky f = {0};
    ig_ctx *ctx = igt_flaky_ctx(&f, 1);
    ig_tokenizer *t = NULL;
    ig_err err = {0};
    assert_int_equal(
        ig_tokenizer_load(&t, ctx, igt_fmt("%s/unigram_bytefb_4k.model", spm_dir()), NULL, &err),
        IG_OK);
    const char *s =
        "An allocation that fails is an error, not a crash: \xF0\x93\x80\x80 \xE2\x91\xA0";
    ig_tokens want = {0};
    ig_encoder *enc = NULL;
    igt_flaky_arm(&f, 0);
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    assert_int_equal(ig_encoder_encode(enc, s, strlen(s), 0, &want, &err), IG_OK);
    ig_encoder_free(enc);
    long calls = f.calls;
    for (long k = 1; k <= calls; k++) {
        igt_flaky_arm(&f, k);
        ig_tokens got = {0};
        enc = NULL;
        ig_status st = ig_encoder_create(&enc, t, &err);
        if (st == IG_OK) st = ig_encoder_encode(enc, s, strlen(s), 0, &got, &err);
        if (st == IG_OK) {
            assert_int_equal(got.n, want.n);
            assert_memory_equal(got.ids, want.ids, want.n * sizeof *want.ids);
        } else {
            assert_int_equal(st, IG_ERR_NOMEM);
        }
        ig_tokens_free(&got);
        ig_encoder_free(enc);
    }
    igt_flaky_arm(&f, 0);
    ig_tokens_free(&want);
    ig_tokenizer_free(t);
    ig_ctx_free(ctx);
}

/* ---- the shared corpora ---------------------------------------------------------------------- */

static const char *k_corpora[] = {"tinyshakespeare", "udhr_multilingual", "c_code", "emoji_test",
                                  "edge_cases"};

#define FNV32_BASIS 2166136261u
#define FNV32_PRIME 16777619u
#define FNV64_BASIS 14695981039346656037ull
#define FNV64_PRIME 1099511628211ull

static uint16_t line_check(const int32_t *ids, size_t n) {
    uint32_t h = FNV32_BASIS;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * FNV32_PRIME;
    return (uint16_t)((h ^ (h >> 16)) & 0xFFFF);
}

typedef struct ref_reader {
    const uint8_t *p, *end;
} ref_reader;

static uint64_t rd(ref_reader *r, int bytes) {
    assert_true(r->end - r->p >= bytes);
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    return v;
}

static uint64_t rd_leb(ref_reader *r) {
    uint64_t v = 0;
    for (int s = 0;; s += 7) {
        assert_true(r->p < r->end && s < 64);
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << s;
        if (!(b & 0x80)) return v;
    }
}

static uint8_t *read_zst(const char *path, size_t *n) {
    size_t zn;
    char *z = igt_read(path, &zn);
    unsigned long long sz = ZSTD_getFrameContentSize(z, zn);
    assert_true(sz != ZSTD_CONTENTSIZE_ERROR && sz != ZSTD_CONTENTSIZE_UNKNOWN);
    uint8_t *out = malloc(sz + 1);
    size_t got = ZSTD_decompress(out, sz, z, zn);
    assert_false(ZSTD_isError(got));
    assert_int_equal(got, sz);
    free(z);
    *n = (size_t)sz;
    return out;
}

/* Every line of every corpus (as spm_encode reads them) against ref/NAME.corpora.bin.zst; with
 * round_trip, decode(encode(line)) must be the line again (a lossless model). Returns how many
 * lines differ; prints the first of each corpus. */
static size_t check_corpora(ig_tokenizer *t, const char *name, int round_trip) {
    size_t n;
    uint8_t *blob = read_zst(igt_fmt("%s/ref/%s.corpora.bin.zst", spm_dir(), name), &n);
    ref_reader r = {blob, blob + n};
    assert_true(n >= 16 && memcmp(blob, "IGSPMREF", 8) == 0);
    r.p += 8;
    assert_int_equal(rd(&r, 4), 1);
    size_t nc = (size_t)rd(&r, 4), bad_total = 0;
    ig_encoder *enc = NULL;
    ig_err err = {0};
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    ig_tokens out = {0};
    char *dec = NULL;
    size_t dl = 0, dc = 0;
    for (size_t c = 0; c < nc; c++) {
        size_t nl = (size_t)rd(&r, 1);
        char corpus[64];
        assert_true(nl < sizeof corpus && r.end - r.p >= (long)nl);
        memcpy(corpus, r.p, nl);
        corpus[nl] = '\0';
        r.p += nl;
        assert_string_equal(corpus, k_corpora[c]);
        uint64_t lines = rd(&r, 4), want_total = rd(&r, 8), want_stream = rd(&r, 8);
        size_t len;
        char *txt = igt_read(igt_fmt("%s/text/%s.txt", igt_shared_data(), corpus), &len);
        uint64_t line = 0, total = 0, stream = FNV64_BASIS, bad = 0, rt_bad = 0;
        for (size_t pos = 0; pos < len; line++) {
            char *e = memchr(txt + pos, '\n', len - pos);
            size_t ll = e ? (size_t)(e - (txt + pos)) : len - pos;
            out.n = 0;
            assert_int_equal(ig_encoder_encode(enc, txt + pos, ll, 0, &out, &err), IG_OK);
            assert_true(line < lines);
            uint64_t want_n = rd_leb(&r), want_h = rd(&r, 2);
            if (want_n != out.n || want_h != line_check(out.ids, out.n)) {
                if (bad++ == 0)
                    print_message("%s %s.txt line %llu \"%s\": %zu ids (check %04x), SentencePiece "
                                  "gives %llu (check %04llx); ours: %s\n",
                                  name, corpus, (unsigned long long)line + 1, show(txt + pos, ll),
                                  out.n, line_check(out.ids, out.n), (unsigned long long)want_n,
                                  (unsigned long long)want_h, show_ids(out.ids, out.n));
            }
            for (size_t i = 0; i < out.n; i++)
                stream = (stream ^ (uint32_t)out.ids[i]) * FNV64_PRIME;
            stream = (stream ^ 0xFFFFFFFFu) * FNV64_PRIME;
            total += out.n;
            if (round_trip) {
                dl = 0;
                assert_int_equal(ig_tokenizer_decode(t, out.ids, out.n, &dec, &dl, &dc, &err),
                                 IG_OK);
                if ((dl != ll || memcmp(dec, txt + pos, ll) != 0) && rt_bad++ == 0)
                    print_message("%s %s.txt line %llu: decode(encode(line)) is \"%s\"\n", name,
                                  corpus, (unsigned long long)line + 1, show(dec, dl));
            }
            pos += ll + (e != NULL);
        }
        assert_int_equal(line, lines);
        if (!bad && (total != want_total || stream != want_stream)) {
            print_message("%s %s.txt: every line's check matches but the whole stream's does "
                          "not (a 16-bit collision)\n",
                          name, corpus);
            bad = 1;
        }
        print_message("%s %s: %llu lines, %llu ids: %llu lines differ%s\n", name, corpus,
                      (unsigned long long)lines, (unsigned long long)total, (unsigned long long)bad,
                      round_trip ? ", round trip checked" : "");
        bad_total += bad + rt_bad;
        free(txt);
    }
    assert_true(r.p == r.end);
    free(dec);
    ig_tokens_free(&out);
    ig_encoder_free(enc);
    free(blob);
    return bad_total;
}

static void test_shared_corpora(void **state) {
    (void)state;
    IGT_REQUIRE_SHARED();
    size_t bad = 0;
    for (int k = 0; k < N_CORPUS_MDL; k++) {
        ig_tokenizer *t = load(igt_fmt("%s/%s.model", spm_dir(), k_models[k]));
        /* bpe_4k (identity, byte fallback, spaces kept) loses nothing: decoding gives each line
         * back */
        bad += check_corpora(t, k_models[k], strcmp(k_models[k], "bpe_4k") == 0);
        ig_tokenizer_free(t);
    }
    ig_tokenizer *j = load(igt_fmt("%s/unigram_nfkc_8k.tokenizer.json", spm_dir()));
    bad += check_corpora(j, "unigram_nfkc_8k", 0);
    ig_tokenizer_free(j);
    if (bad) fail_msg("%zu lines differ from SentencePiece's ids", bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_sample, m0),
        cmocka_unit_test_setup(test_sample, m1),
        cmocka_unit_test_setup(test_sample, m2),
        cmocka_unit_test_setup(test_sample, m3),
        cmocka_unit_test_setup(test_sample, m4),
        cmocka_unit_test_setup(test_sample, m5),
        cmocka_unit_test_setup(test_sample, m6),
        cmocka_unit_test_setup(test_sample, m7),
        cmocka_unit_test(test_tokenizer_json),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_decode_next),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_failing_allocations),
        cmocka_unit_test(test_shared_corpora),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
