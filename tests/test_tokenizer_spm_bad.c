/* test_tokenizer_spm_bad.c - SentencePiece model files built here byte by byte (a small protobuf
 * writer), good and bad: a tiny model with a hand-made precompiled character map; truncated files,
 * wrong wire types, huge lengths, varints that do not end, character maps that point out of range,
 * and models SentencePiece itself refuses (no unknown piece, duplicates, byte pieces without byte
 * fallback, ...), each refused with a message that names the file and, for a malformed protobuf or
 * character map, the byte offset; and Unigram tokenizer.json files in the forms transformers has
 * written over the years, equal to the .model they describe.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preprocess/preprocess.h"
#include "testutil.h"

/* ---- a protobuf writer ----------------------------------------------------------------------- */

typedef struct pbw {
    uint8_t p[1 << 16];
    size_t n;
} pbw;

static void put_varint(pbw *w, uint64_t v) {
    do {
        assert_true(w->n < sizeof w->p);
        w->p[w->n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
}
static void put_tag(pbw *w, uint32_t field, int wt) {
    put_varint(w, (uint64_t)field << 3 | (uint64_t)wt);
}
static void put_bytes(pbw *w, uint32_t field, const void *d, size_t n) {
    put_tag(w, field, 2);
    put_varint(w, n);
    assert_true(w->n + n <= sizeof w->p);
    memcpy(w->p + w->n, d, n);
    w->n += n;
}
static void put_str(pbw *w, uint32_t field, const char *s) {
    put_bytes(w, field, s, strlen(s));
}
static void put_uint(pbw *w, uint32_t field, uint64_t v) {
    put_tag(w, field, 0);
    put_varint(w, v);
}
static void put_float(pbw *w, uint32_t field, float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    put_tag(w, field, 5);
    for (int i = 0; i < 4; i++) w->p[w->n++] = (uint8_t)(b >> (8 * i));
}
static void put_msg(pbw *w, uint32_t field, const pbw *m) {
    put_bytes(w, field, m->p, m->n);
}

/* ---- a tiny model ---------------------------------------------------------------------------- */

typedef struct piece {
    const char *s;
    float score;
    int type;
} piece;

static const piece k_tiny[] = {
    {"<unk>", 0, 2},
    {"<s>", 0, 3},
    {"</s>", 0, 3},
    {"\xE2\x96\x81", -1, 1},
    {"a", -2, 1},
    {"b", -2, 1},
    {"ab", -1.5f, 1},
    {"\xE2\x96\x81"
     "a",
     -1.2f, 1},
    {"<sep>", 0, 4},
};
#define N_TINY (sizeof k_tiny / sizeof k_tiny[0])

/* A character map with the rules A -> "a", B -> "b" (a darts-clone array: the root's offset 256,
 * each child's leaf beside it), and where the mutations below break it. */
typedef struct charsmap {
    uint8_t b[4 + 512 * 4 + 8];
    size_t n;
} charsmap;

static void set_unit(charsmap *c, size_t i, uint32_t u) {
    for (int k = 0; k < 4; k++) c->b[4 + 4 * i + (size_t)k] = (uint8_t)(u >> (8 * k));
}

static charsmap make_charsmap(void) {
    charsmap c;
    memset(&c, 0, sizeof c);
    uint32_t tsize = 512 * 4;
    for (int k = 0; k < 4; k++) c.b[k] = (uint8_t)(tsize >> (8 * k));
    set_unit(&c, 0, 256u << 10);                   /* the root: children at 256 ^ byte */
    const char rules[2][2] = {{'A', 0}, {'B', 2}}; /* byte, offset of its replacement */
    for (int r = 0; r < 2; r++) {
        uint32_t idx = 256u ^ (uint8_t)rules[r][0];
        set_unit(&c, idx, (uint8_t)rules[r][0] | 1u << 8 | 1u << 10); /* label, leaf, offset 1 */
        set_unit(&c, idx ^ 1u, 0x80000000u | (uint32_t)rules[r][1]);
    }
    memcpy(c.b + 4 + tsize, "a\0b\0", 4);
    c.n = 4 + tsize + 4;
    return c;
}

typedef struct model_opts {
    const piece *pieces;
    size_t n_pieces;
    int model_type, byte_fallback;
    const charsmap *cm;
} model_opts;

static pbw *build(const model_opts *o) {
    pbw *w = calloc(1, sizeof *w), *sub = calloc(1, sizeof *sub);
    for (size_t i = 0; i < o->n_pieces; i++) {
        sub->n = 0;
        put_str(sub, 1, o->pieces[i].s);
        put_float(sub, 2, o->pieces[i].score);
        put_uint(sub, 3, (uint64_t)o->pieces[i].type);
        put_msg(w, 1, sub);
    }
    sub->n = 0;
    put_str(sub, 1, "corpus.txt"); /* input: skipped */
    put_uint(sub, 3, (uint64_t)o->model_type);
    put_uint(sub, 35, (uint64_t)o->byte_fallback);
    put_uint(sub, 40, 0);
    put_uint(sub, 43, (uint64_t)-1); /* pad_id -1: a 10-byte varint */
    put_msg(w, 2, sub);
    sub->n = 0;
    put_str(sub, 1, "custom");
    if (o->cm) put_bytes(sub, 2, o->cm->b, o->cm->n);
    put_uint(sub, 3, 1);
    put_uint(sub, 4, 1);
    put_uint(sub, 5, 1);
    put_msg(w, 3, sub);
    free(sub);
    return w;
}

static model_opts tiny_opts(const charsmap *cm) {
    model_opts o = {k_tiny, N_TINY, 1, 0, cm};
    return o;
}

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

/* Writes data as DIR/name and loads it: the status, the message in err. */
static ig_status try_load(const char *name, const void *data, size_t n, ig_tokenizer **out,
                          ig_err *err) {
    const char *path = igt_fmt("%s/%s", g_dir, name);
    igt_write(path, data, n);
    ig_tokenizer *t = NULL;
    memset(err, 0, sizeof *err);
    ig_status st = ig_tokenizer_load(&t, NULL, path, NULL, err);
    assert_true((st == IG_OK) == (t != NULL));
    if (st != IG_OK) {
        assert_non_null(strstr(err->msg, name)); /* the message names the file */
        print_message("  %s: %s\n", name, err->msg);
    }
    if (out)
        *out = t;
    else
        ig_tokenizer_free(t);
    return st;
}

static void expect_error(const char *name, const void *data, size_t n, ig_status want,
                         const char *text) {
    ig_err err;
    ig_status st = try_load(name, data, n, NULL, &err);
    if (st != want || !strstr(err.msg, text))
        fail_msg("%s: status %s, message '%s'; expected %s with '%s'", name, ig_status_str(st),
                 err.msg, ig_status_str(want), text);
}

static void encode_ids(ig_tokenizer *t, const char *s, ig_tokens *out) {
    ig_encoder *enc = NULL;
    ig_err err = {0};
    assert_int_equal(ig_encoder_create(&enc, t, &err), IG_OK);
    out->n = 0;
    assert_int_equal(ig_encoder_encode(enc, s, strlen(s), 0, out, &err), IG_OK);
    ig_encoder_free(enc);
}

/* The tiny model works: its character map, its user-defined symbol, unknown characters. */
static void test_tiny(void **state) {
    (void)state;
    charsmap cm = make_charsmap();
    model_opts o = tiny_opts(&cm);
    pbw *w = build(&o);
    ig_tokenizer *t = NULL;
    ig_err err;
    assert_int_equal(try_load("tiny.model", w->p, w->n, &t, &err), IG_OK);
    assert_int_equal(ig_tokenizer_vocab_size(t), N_TINY);
    assert_int_equal(ig_tokenizer_eos(t), 2);
    ig_tokens ids = {0};
    /* "AB" -> "ab" by the map; "  " collapsed; <sep> kept whole; "c" and "cc" unknown (merged) */
    encode_ids(t, "  AB  ab<sep>c cc", &ids);
    int32_t want[] = {3, 6, 3, 6, 8, 0, 3, 0};
    assert_int_equal(ids.n, sizeof want / sizeof want[0]);
    assert_memory_equal(ids.ids, want, sizeof want);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    assert_int_equal(ig_tokenizer_decode(t, ids.ids, ids.n, &buf, &len, &cap, &err), IG_OK);
    const char *text = "ab ab<sep> \xE2\x81\x87   \xE2\x81\x87 ";
    assert_int_equal(len, strlen(text));
    assert_memory_equal(buf, text, len);
    free(buf);
    ig_tokens_free(&ids);
    ig_tokenizer_free(t);
    free(w);
}

/* Every prefix of a good file: loaded or refused, never a crash (ASan checks the reads). */
static void test_truncated(void **state) {
    (void)state;
    charsmap cm = make_charsmap();
    model_opts o = tiny_opts(&cm);
    pbw *w = build(&o);
    int refused = 0;
    for (size_t n = 0; n < w->n; n++) {
        ig_tokenizer *t = NULL;
        ig_err err = {0};
        const char *path = igt_fmt("%s/cut.model", g_dir);
        igt_write(path, w->p, n);
        if (ig_tokenizer_load(&t, NULL, path, NULL, &err) != IG_OK) {
            assert_non_null(strstr(err.msg, "cut.model"));
            refused++;
        }
        ig_tokenizer_free(t);
    }
    assert_true(refused > (int)w->n / 2);
    /* in the middle of the first piece */
    expect_error("cut_piece.model", w->p, 7, IG_ERR_FORMAT, "byte offset 1: field pieces says it");
    expect_error("cut_charsmap.model", w->p, w->n - 20, IG_ERR_FORMAT,
                 "field normalizer_spec says it is");
    expect_error("empty.model", w->p, 0, IG_ERR_FORMAT, "the file is empty");
    free(w);
}

static void test_malformed_protobuf(void **state) {
    (void)state;
    pbw w = {{0}, 0};
    /* pieces as a varint */
    put_uint(&w, 1, 5);
    expect_error("wiretype.model", w.p, w.n, IG_ERR_FORMAT,
                 "byte offset 0: ModelProto field 1 (pieces) has wire type 0 (varint), expected 2 "
                 "(length-delimited)");
    /* a length of 2^40 */
    w.n = 0;
    put_tag(&w, 1, 2);
    put_varint(&w, (uint64_t)1 << 40);
    w.p[w.n++] = 0x0A;
    expect_error("huge.model", w.p, w.n, IG_ERR_FORMAT,
                 "field pieces says it is 1099511627776 bytes long, but only 1 bytes");
    /* a varint that does not end */
    w.n = 0;
    put_tag(&w, 2, 2);
    for (int i = 0; i < 12; i++) w.p[w.n++] = 0xFF;
    expect_error("varint.model", w.p, w.n, IG_ERR_FORMAT,
                 "byte offset 1: expected a varint of at most 10 bytes");
    /* a start-group field */
    w.n = 0;
    put_tag(&w, 9, 3);
    expect_error("group.model", w.p, w.n, IG_ERR_FORMAT, "wire type 3 (start group)");
    /* field number 0 */
    w.n = 0;
    w.p[w.n++] = 0x02;
    expect_error("field0.model", w.p, w.n, IG_ERR_FORMAT, "expected a field tag");
    /* a piece's score as a varint, inside the piece: the offset is the file's */
    pbw sub = {{0}, 0};
    put_str(&sub, 1, "<unk>");
    put_uint(&sub, 2, 7);
    w.n = 0;
    put_msg(&w, 1, &sub);
    expect_error("score.model", w.p, w.n, IG_ERR_FORMAT,
                 "byte offset 9: SentencePiece field 2 (score) has wire type 0");
    /* a piece type that does not exist */
    sub.n = 0;
    put_str(&sub, 1, "<unk>");
    put_uint(&sub, 3, 9);
    w.n = 0;
    put_msg(&w, 1, &sub);
    expect_error("type.model", w.p, w.n, IG_ERR_FORMAT, "piece 0 has type 9");
    /* a JSON file that starts with a newline (0x0A, as a ModelProto does) under another name:
     * a tokenizer.json, not a model */
    size_t jn;
    char *json = igt_read(igt_fmt("%s/data/gpt2/tokenizer.json", igt_source_dir()), &jn);
    char *lead = malloc(jn + 2);
    memcpy(lead, "\n", 1);
    memcpy(lead + 1, json, jn);
    ig_tokenizer *t = NULL;
    ig_err err;
    assert_int_equal(try_load("lead.bin", lead, jn + 1, &t, &err), IG_OK);
    assert_string_equal(ig_tokenizer_name(t), "gpt2");
    ig_tokenizer_free(t);
    free(lead);
    free(json);
    /* text that is not a model, named .model */
    const char *text = "this is not a model\n";
    expect_error("text.model", text, strlen(text), IG_ERR_FORMAT, "text.model: byte offset");
}

static void test_bad_charsmap(void **state) {
    (void)state;
    charsmap cm = make_charsmap();
    model_opts o = tiny_opts(&cm);
    pbw *w;
    /* a leaf whose replacement is past the strings */
    cm = make_charsmap();
    set_unit(&cm, (256u ^ 'A') ^ 1u, 0x80000000u | 1000u);
    w = build(&o);
    expect_error("value.model", w->p, w->n, IG_ERR_FORMAT,
                 "rule points to byte 1000 of the 4 bytes of replacement strings, past their end");
    free(w);
    /* a leaf past the units */
    cm = make_charsmap();
    set_unit(&cm, 256u ^ 'B', 'B' | 1u << 8 | 4095u << 10);
    w = build(&o);
    expect_error("leaf.model", w->p, w->n, IG_ERR_FORMAT, "past the 512 units of the trie");
    free(w);
    /* a child past the units: not a rule, not an error (the lookup stops there) */
    cm = make_charsmap();
    set_unit(&cm, 0, 4096u << 10);
    w = build(&o);
    ig_err err;
    assert_int_equal(try_load("far.model", w->p, w->n, NULL, &err), IG_OK);
    free(w);
    /* strings without a terminating NUL */
    cm = make_charsmap();
    cm.b[cm.n - 1] = 'x';
    w = build(&o);
    expect_error("nul.model", w->p, w->n, IG_ERR_FORMAT, "has no terminating NUL");
    free(w);
    /* a trie size larger than the map; and a map too short to have one */
    cm = make_charsmap();
    cm.b[2] = 0x7F;
    w = build(&o);
    expect_error("tsize.model", w->p, w->n, IG_ERR_FORMAT, "the trie size is");
    free(w);
    cm = make_charsmap();
    cm.n = 3;
    w = build(&o);
    expect_error("short.model", w->p, w->n, IG_ERR_FORMAT,
                 "expected a 4-byte trie size, the trie and its strings");
    /* the offset is the file's: the map starts past the pieces and the trainer spec */
    assert_non_null(strstr(g_dir, "/"));
    free(w);
}

/* Models SentencePiece refuses to load, refused here too. */
static void test_refused_models(void **state) {
    (void)state;
    piece p[N_TINY + 260];
    model_opts o = {p, N_TINY, 1, 0, NULL};
    pbw *w;
#define CASE(name, status, text)                                                                   \
    do {                                                                                           \
        w = build(&o);                                                                             \
        expect_error(name, w->p, w->n, status, text);                                              \
        free(w);                                                                                   \
    } while (0)
    memcpy(p, k_tiny, sizeof k_tiny);
    p[0].type = 1;
    CASE("nounk.model", IG_ERR_FORMAT, "no piece has type UNKNOWN");
    memcpy(p, k_tiny, sizeof k_tiny);
    p[1].type = 2;
    CASE("twounk.model", IG_ERR_FORMAT, "pieces 0 and 1 are both of type UNKNOWN");
    memcpy(p, k_tiny, sizeof k_tiny);
    p[5].s = "a";
    CASE("dup.model", IG_ERR_FORMAT, "pieces 4 and 5 are the same string");
    memcpy(p, k_tiny, sizeof k_tiny);
    p[4].s = "";
    CASE("emptypiece.model", IG_ERR_FORMAT, "piece 4 is empty");
    memcpy(p, k_tiny, sizeof k_tiny);
    p[4] = (piece){"<0x41>", 0, 6};
    CASE("byte.model", IG_ERR_FORMAT, "is a BYTE piece, but the trainer spec says byte_fallback");
    o.byte_fallback = 1;
    CASE("bytes.model", IG_ERR_FORMAT, "there is no BYTE piece <0x00>");
    p[4] = (piece){"<0x4g>", 0, 6};
    CASE("badbyte.model", IG_ERR_FORMAT, "expected <0x00> .. <0xFF>");
    o.byte_fallback = 0;
    memcpy(p, k_tiny, sizeof k_tiny);
    o.model_type = 3;
    CASE("word.model", IG_ERR_UNSUPPORTED, "a SentencePiece model of type WORD");
    o.model_type = 7;
    CASE("type7.model", IG_ERR_FORMAT, "TrainerSpec.model_type is 7");
    o.model_type = 1;
    for (size_t i = 3; i < N_TINY; i++) p[i].type = 3;
    CASE("nonormal.model", IG_ERR_FORMAT, "no NORMAL, USER_DEFINED or UNUSED piece");
#undef CASE
    /* a BPE model of the same pieces, and one with byte fallback: both load */
    memcpy(p, k_tiny, sizeof k_tiny);
    o.model_type = 2;
    w = build(&o);
    ig_tokenizer *t = NULL;
    ig_err err;
    assert_int_equal(try_load("bpe.model", w->p, w->n, &t, &err), IG_OK);
    assert_string_equal(ig_tokenizer_name(t), "sentencepiece-bpe");
    ig_tokens ids = {0};
    encode_ids(t, "ab b", &ids); /* "▁ab▁b": ▁a (-1.2) merges first, then nothing else */
    int32_t want[] = {7, 5, 3, 5};
    assert_int_equal(ids.n, 4);
    assert_memory_equal(ids.ids, want, sizeof want);
    ig_tokens_free(&ids);
    ig_tokenizer_free(t);
    free(w);
    static char names[256][8];
    o.byte_fallback = 1;
    for (int b = 0; b < 256; b++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        p[N_TINY + (size_t)b] = (piece){names[b], 0, 6};
    }
    o.n_pieces = N_TINY + 256;
    w = build(&o);
    assert_int_equal(try_load("bytefb.model", w->p, w->n, &t, &err), IG_OK);
    encode_ids(t, "c", &ids); /* "▁c": ▁, then c as its byte */
    assert_int_equal(ids.n, 2);
    assert_int_equal(ids.ids[1], (int32_t)N_TINY + 'c');
    ig_tokens_free(&ids);
    ig_tokenizer_free(t);
    free(w);
}

/* ---- tokenizer.json (Unigram) ---------------------------------------------------------------- */

static char *b64(const uint8_t *d, size_t n) {
    static const char *k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(4 * (n / 3 + 1) + 1), *q = o;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        *q++ = k[v >> 18 & 63];
        *q++ = k[v >> 12 & 63];
        *q++ = i + 1 < n ? k[v >> 6 & 63] : '=';
        *q++ = i + 2 < n ? k[v & 63] : '=';
    }
    *q = '\0';
    return o;
}

/* The tiny model as a tokenizer.json; form 0: transformers' current converter (Sequence of
 * Precompiled, Strip, Replace; Metaspace with prepend_scheme), 1: T5's first tokenizer.json
 * (Precompiled; WhitespaceSplit + Metaspace with add_prefix_space) with 2 extra ids. */
static char *tiny_json(int form, const charsmap *cm) {
    json_t *root = json_object(), *vocab = json_array(), *added = json_array();
    for (size_t i = 0; i < N_TINY; i++) {
        json_array_append_new(vocab, json_pack("[s,f]", k_tiny[i].s, (double)k_tiny[i].score));
        if (k_tiny[i].type != 1)
            json_array_append_new(added, json_pack("{s:I,s:s,s:b}", "id", (json_int_t)i, "content",
                                                   k_tiny[i].s, "special", k_tiny[i].type != 4));
    }
    if (form == 1)
        for (int x = 1; x >= 0; x--) {
            char s[32];
            snprintf(s, sizeof s, "<extra_id_%d>", x);
            json_array_append_new(vocab, json_pack("[s,f]", s, 0.0));
            json_array_append_new(added, json_pack("{s:I,s:s,s:b}", "id",
                                                   (json_int_t)json_array_size(vocab) - 1,
                                                   "content", s, "special", 1));
        }
    char *cms = b64(cm->b, cm->n);
    json_t *pre = json_pack("{s:s,s:s}", "type", "Precompiled", "precompiled_charsmap", cms);
    if (form == 0) {
        json_object_set_new(root, "normalizer",
                            json_pack("{s:s,s:[o,{s:s,s:b,s:b},{s:s,s:{s:s},s:s}]}", "type",
                                      "Sequence", "normalizers", pre, "type", "Strip", "strip_left",
                                      0, "strip_right", 1, "type", "Replace", "pattern", "Regex",
                                      " {2,}", "content", "\xE2\x96\x81"));
        json_object_set_new(root, "pre_tokenizer",
                            json_pack("{s:s,s:s,s:s,s:b}", "type", "Metaspace", "replacement",
                                      "\xE2\x96\x81", "prepend_scheme", "always", "split", 1));
    } else {
        json_object_set_new(root, "normalizer", pre);
        json_object_set_new(root, "pre_tokenizer",
                            json_pack("{s:s,s:[{s:s},{s:s,s:s,s:b}]}", "type", "Sequence",
                                      "pretokenizers", "type", "WhitespaceSplit", "type",
                                      "Metaspace", "replacement", "\xE2\x96\x81",
                                      "add_prefix_space", 1));
    }
    json_object_set_new(root, "added_tokens", added);
    json_object_set_new(root, "model",
                        json_pack("{s:s,s:i,s:o,s:b}", "type", "Unigram", "unk_id", 0, "vocab",
                                  vocab, "byte_fallback", 0));
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    free(cms);
    return s;
}

static void test_json_forms(void **state) {
    (void)state;
    charsmap cm = make_charsmap();
    model_opts o = tiny_opts(&cm);
    pbw *w = build(&o);
    ig_tokenizer *m = NULL, *j0 = NULL, *j1 = NULL;
    ig_err err;
    assert_int_equal(try_load("m.model", w->p, w->n, &m, &err), IG_OK);
    char *s0 = tiny_json(0, &cm), *s1 = tiny_json(1, &cm);
    assert_int_equal(try_load("t0.json", s0, strlen(s0), &j0, &err), IG_OK);
    assert_int_equal(try_load("t1.json", s1, strlen(s1), &j1, &err), IG_OK);
    assert_true(ig_tokenizer_hash(m) == ig_tokenizer_hash(j0)); /* the same model */
    assert_int_equal(ig_tokenizer_vocab_size(j1), N_TINY + 2);
    const char *texts[] = {"  AB  ab<sep>c cc ", "a\tb", "", "   ", "<extra_id_0></s>"};
    for (size_t k = 0; k < 5; k++) {
        ig_tokens a = {0}, b = {0}, c = {0};
        encode_ids(m, texts[k], &a);
        encode_ids(j0, texts[k], &b);
        encode_ids(j1, texts[k], &c);
        assert_int_equal(a.n, b.n);
        assert_int_equal(a.n, c.n);
        assert_memory_equal(a.ids, b.ids, a.n * sizeof *a.ids);
        assert_memory_equal(a.ids, c.ids, a.n * sizeof *a.ids);
        ig_tokens_free(&a), ig_tokens_free(&b), ig_tokens_free(&c);
    }
    ig_tokenizer_free(m), ig_tokenizer_free(j0), ig_tokenizer_free(j1);
    free(s0), free(s1), free(w);
}

static void test_json_refused(void **state) {
    (void)state;
    charsmap cm = make_charsmap();
    char *s = tiny_json(0, &cm);
    json_error_t je;
    struct {
        const char *name, *path, *value, *text;
        ig_status st;
    } cases[] = {
        {"unk.json", "unk_id", "null", "model.unk_id must be the id of a piece", IG_ERR_FORMAT},
        {"vocab.json", "vocab", "[[\"a\"]]", "model.vocab[0]: expected [piece, score]",
         IG_ERR_FORMAT},
        {"rep.json", "pre_tokenizer", "{\"type\":\"Metaspace\",\"replacement\":\"_\"}",
         "Metaspace has replacement \"_\"", IG_ERR_UNSUPPORTED},
        {"bl.json", "pre_tokenizer", "{\"type\":\"ByteLevel\"}", "pre_tokenizer ByteLevel",
         IG_ERR_UNSUPPORTED},
        {"nopre.json", "pre_tokenizer", "null", "needs a Metaspace pre_tokenizer",
         IG_ERR_UNSUPPORTED},
        {"lower.json", "normalizer", "{\"type\":\"Lowercase\"}", "normalizer Lowercase",
         IG_ERR_UNSUPPORTED},
        {"b64.json", "normalizer", "{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"a!==\"}",
         "not valid base64", IG_ERR_FORMAT},
        {"added.json", "added_tokens", "[{\"id\":1,\"content\":\"<x>\",\"special\":true}]",
         "added_tokens[0] \"<x>\" (id 1) is not piece 1", IG_ERR_UNSUPPORTED},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        json_t *root = json_loads(s, 0, &je);
        json_t *val = json_loads(cases[k].value, JSON_DECODE_ANY, &je);
        assert_non_null(val);
        if (!strcmp(cases[k].path, "unk_id") || !strcmp(cases[k].path, "vocab"))
            json_object_set_new(json_object_get(root, "model"), cases[k].path, val);
        else
            json_object_set_new(root, cases[k].path, val);
        char *t = json_dumps(root, JSON_COMPACT);
        expect_error(cases[k].name, t, strlen(t), cases[k].st, cases[k].text);
        free(t);
        json_decref(root);
    }
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_malformed_protobuf),
        cmocka_unit_test(test_bad_charsmap),
        cmocka_unit_test(test_refused_models),
        cmocka_unit_test(test_json_forms),
        cmocka_unit_test(test_json_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
