/* fuzz_tokenizer.c - libFuzzer target for the tokenizer loaders (preprocess/tokenizer_load.c and
 * tokenizer_hf.c): .tiktoken rank files, Hugging Face tokenizer.json, and GPT-2's vocab.json +
 * merges.txt.
 *
 * The first byte picks the form (its low two bits) and a variant (the next bit); the rest is the
 * file's contents, written into one temp directory made once per process (files are rewritten
 * per input, so an input costs a few small writes):
 *   0: cl100k_base.tiktoken (a valid one needs 100256 ranks, so most inputs fail early);
 *      variant: x.tiktoken loaded with tiktoken_encoding "cl100k_base"
 *   1: r50k_base.tiktoken; variant: x.tiktoken loaded with tiktoken_encoding "gpt2"
 *   2: tokenizer.json, loaded by its path; variant: by its directory (a Unigram model here is a
 *      SentencePiece model: its text is normalised, so it is not checked to round-trip)
 *   3: vocab.json, a NUL byte, then merges.txt (no NUL: merges.txt is empty), loaded by directory
 * When a tokenizer loads, a few strings (and the input itself) are encoded with and without
 * special tokens and decoded again: the bytes must come back unchanged, and every id must be in
 * the vocabulary. Anything else aborts, which libFuzzer reports as a crash. IG_FUZZ_VERBOSE=1 in
 * the environment prints each load's status.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preprocess/preprocess.h"

static void check(int ok) {
    if (!ok) abort();
}

/* made once per process; the files in it are rewritten by every input */
static char g_dir[64];
static ig_ctx *g_ctx;

static void cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_tokenizer: could not remove %s\n", g_dir);
}

static void setup(void) {
    if (g_dir[0]) return;
    snprintf(g_dir, sizeof g_dir, "/tmp/ig_fuzz_tok_XXXXXX");
    check(mkdtemp(g_dir) != NULL);
    atexit(cleanup);
    char p[128];
    snprintf(p, sizeof p, "%s/json", g_dir);
    check(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/pair", g_dir);
    check(mkdir(p, 0700) == 0);
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 1;
    o.log_level = IG_LOG_OFF;
    check(ig_ctx_create(&g_ctx, &o, NULL) == IG_OK);
}

static void put(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    check(f != NULL);
    check(fwrite(data, 1, n, f) == n || n == 0);
    check(fclose(f) == 0);
}

/* Encodes text[0..n) and decodes it back: the bytes must round-trip. */
static void round_trip(const ig_tokenizer *tok, ig_encoder *enc, const char *text, size_t n,
                       int flags) {
    ig_tokens ids = {0};
    ig_err err = {0};
    check(ig_encoder_encode(enc, text, n, flags, &ids, &err) == IG_OK);
    size_t vs = ig_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < ids.n; i++) check(ids.ids[i] >= 0 && (size_t)ids.ids[i] < vs);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    check(ig_tokenizer_decode(tok, ids.ids, ids.n, &buf, &len, &cap, &err) == IG_OK);
    /* a Unigram tokenizer.json is a SentencePiece model: it normalises, so no byte round trip
     * (fuzz_spm checks those) */
    if (strncmp(ig_tokenizer_name(tok), "sentencepiece", 13) != 0)
        check(len == n && (n == 0 || memcmp(buf, text, n) == 0));
    free(buf);
    ig_tokens_free(&ids);
}

static void exercise(const ig_tokenizer *tok, const uint8_t *data, size_t size) {
    static const char *const texts[] = {
        "",
        "Hello, world! It's 2024.",
        "  indented\n\ttabs\r\n<|endoftext|>x<|endoftext|>",
        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \xff\xfe bad utf-8 \xc3",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 123456789",
    };
    check(ig_tokenizer_vocab_size(tok) >= 256 ||
          strncmp(ig_tokenizer_name(tok), "sentencepiece", 13) == 0);
    int32_t eod = ig_tokenizer_eod(tok);
    check(eod == -1 || (eod >= 0 && (size_t)eod < ig_tokenizer_vocab_size(tok)));
    check(ig_tokenizer_name(tok) != NULL);
    ig_encoder *enc = NULL;
    ig_err err = {0};
    check(ig_encoder_create(&enc, tok, &err) == IG_OK);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (int flags = 0; flags <= IG_ENCODE_ALLOW_SPECIAL; flags++)
            round_trip(tok, enc, texts[i], strlen(texts[i]), flags);
    size_t n = size < 4096 ? size : 4096;
    round_trip(tok, enc, (const char *)data, n, 0);
    round_trip(tok, enc, (const char *)data, n, IG_ENCODE_ALLOW_SPECIAL);
    ig_encoder_free(enc);
    /* an id outside the vocabulary is an error, not a read past the tables */
    int32_t bad[2] = {(int32_t)ig_tokenizer_vocab_size(tok), -1};
    char *buf = NULL;
    size_t len = 0, cap = 0;
    check(ig_tokenizer_decode(tok, bad, 1, &buf, &len, &cap, &err) == IG_ERR_INVALID_ARG);
    check(ig_tokenizer_decode(tok, bad + 1, 1, &buf, &len, &cap, &err) == IG_ERR_INVALID_ARG);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    setup();
    int mode = data[0] & 3, variant = (data[0] >> 2) & 1;
    data++, size--;
    char path[192], a[192];
    ig_tokenizer_opts opts = ig_tokenizer_opts_default();
    switch (mode) {
    case 0:
    case 1:
        snprintf(path, sizeof path, "%s/%s.tiktoken", g_dir,
                 variant     ? "x"
                 : mode == 0 ? "cl100k_base"
                             : "r50k_base");
        if (variant) opts.tiktoken_encoding = mode == 0 ? "cl100k_base" : "gpt2";
        put(path, data, size);
        break;
    case 2:
        snprintf(path, sizeof path, "%s/json/tokenizer.json", g_dir);
        put(path, data, size);
        if (variant) snprintf(path, sizeof path, "%s/json", g_dir);
        break;
    default: {
        const uint8_t *nul = memchr(data, 0, size);
        size_t vlen = nul ? (size_t)(nul - data) : size;
        snprintf(a, sizeof a, "%s/pair/vocab.json", g_dir);
        put(a, data, vlen);
        snprintf(a, sizeof a, "%s/pair/merges.txt", g_dir);
        put(a, nul ? nul + 1 : data, nul ? size - vlen - 1 : 0);
        snprintf(path, sizeof path, "%s/pair", g_dir);
        break;
    }
    }
    ig_tokenizer *tok = NULL;
    ig_err err = {0};
    ig_status st = ig_tokenizer_load(&tok, g_ctx, path, &opts, &err);
    check((st == IG_OK) == (tok != NULL));
    check(st == IG_OK || err.msg[0] != '\0');
    if (getenv("IG_FUZZ_VERBOSE")) /* to see what the seeds reach */
        fprintf(stderr, "mode %d: %s %s\n", mode, ig_status_str(st), err.msg);
    if (st == IG_OK) exercise(tok, data, size);
    ig_tokenizer_free(tok);
    return 0;
}
