/* fuzz_spm.c - libFuzzer target for the SentencePiece model reader (preprocess/
 * tokenizer_spm_proto.c: the protobuf ModelProto; tokenizer_spm_norm.c: the precompiled character
 * map, a darts-clone double array whose every index comes from the file; tokenizer_spm.c: the
 * model's checks, tries and decoding; tokenizer_spm_encode.c: the unigram and BPE encoders).
 *
 * The input is a .model file, written to one temp file per process and loaded by its name (the
 * first byte's low bit set: under a name without .model, so the loader recognises it by its
 * contents, or refuses it as another kind). A load either fails with a message or gives a
 * tokenizer, with which a few strings and the input itself are encoded (plain, with special
 * strings, with the end-of-sequence id): every id must be in the vocabulary; ids are decoded
 * (whole and one at a time), and ids out of range must be refused. Anything else aborts, which
 * libFuzzer reports as a crash. IG_FUZZ_VERBOSE=1 prints each load's status.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preprocess/preprocess.h"

static void check(int ok) {
    if (!ok) abort();
}

static char g_dir[64];
static ig_ctx *g_ctx;

static void cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_spm: could not remove %s\n", g_dir);
}

static void setup(void) {
    if (g_dir[0]) return;
    snprintf(g_dir, sizeof g_dir, "/tmp/ig_fuzz_spm_XXXXXX");
    check(mkdtemp(g_dir) != NULL);
    atexit(cleanup);
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 1;
    o.log_level = IG_LOG_OFF;
    check(ig_ctx_create(&g_ctx, &o, NULL) == IG_OK);
}

static void encode(const ig_tokenizer *tok, ig_encoder *enc, const char *text, size_t n,
                   int flags) {
    ig_tokens ids = {0};
    ig_err err = {0};
    ig_status st = ig_encoder_encode(enc, text, n, flags, &ids, &err);
    /* only APPEND_EOS without an end-of-sequence id may fail */
    check(st == IG_OK || ((flags & IG_ENCODE_APPEND_EOS) && ig_tokenizer_eos(tok) < 0 &&
                          st == IG_ERR_INVALID_ARG));
    size_t vs = ig_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < ids.n; i++) check(ids.ids[i] >= 0 && (size_t)ids.ids[i] < vs);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    check(ig_tokenizer_decode(tok, ids.ids, ids.n, &buf, &len, &cap, &err) == IG_OK);
    for (size_t i = 0; i < ids.n; i++)
        check(ig_tokenizer_decode_next(tok, ids.ids + i, 1, &buf, &len, &cap, &err) == IG_OK);
    free(buf);
    ig_tokens_free(&ids);
}

static void exercise(const ig_tokenizer *tok, const uint8_t *data, size_t size) {
    static const char *const texts[] = {
        "",
        "Hello, world! It's 2024.",
        "  indented\n\ttabs\r\n</s><unk>x<s>  \xE2\x96\x81 end  ",
        "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \xff\xfe bad utf-8 \xc3",
        ("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA \xef\xbc\xa1 \xe2\x85\xa0 "
         "123456789"),
    };
    size_t vs = ig_tokenizer_vocab_size(tok);
    check(vs >= 1);
    int32_t eos = ig_tokenizer_eos(tok);
    check(eos == -1 || (eos >= 0 && (size_t)eos < vs));
    check(ig_tokenizer_name(tok) != NULL);
    ig_encoder *enc = NULL;
    ig_err err = {0};
    check(ig_encoder_create(&enc, tok, &err) == IG_OK);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (int flags = 0; flags <= 3; flags++)
            encode(tok, enc, texts[i], strlen(texts[i]), flags);
    size_t n = size < 1024 ? size : 1024;
    encode(tok, enc, (const char *)data + size - n, n, 0);
    encode(tok, enc, (const char *)data + size - n, n, IG_ENCODE_ALLOW_SPECIAL);
    ig_encoder_free(enc);
    /* any ids in range decode; ids out of range are refused */
    int32_t ids[64];
    size_t k = 0;
    for (; k < 64 && k < size; k++) ids[k] = (int32_t)(data[k] % vs);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    check(ig_tokenizer_decode(tok, ids, k, &buf, &len, &cap, &err) == IG_OK);
    int32_t bad[2] = {(int32_t)vs, -1};
    check(ig_tokenizer_decode(tok, bad, 1, &buf, &len, &cap, &err) == IG_ERR_INVALID_ARG);
    check(ig_tokenizer_decode(tok, bad + 1, 1, &buf, &len, &cap, &err) == IG_ERR_INVALID_ARG);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    setup();
    int by_contents = data[0] & 1;
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, by_contents ? "weights" : "x.model");
    FILE *f = fopen(path, "wb");
    check(f != NULL);
    check(size == 1 || fwrite(data + 1, 1, size - 1, f) == size - 1);
    check(fclose(f) == 0);
    ig_tokenizer *tok = NULL;
    ig_err err = {0};
    ig_status st = ig_tokenizer_load(&tok, g_ctx, path, NULL, &err);
    check((st == IG_OK) == (tok != NULL));
    check(st == IG_OK || err.msg[0] != '\0');
    if (getenv("IG_FUZZ_VERBOSE")) fprintf(stderr, "%s: %s\n", ig_status_str(st), err.msg);
    if (st == IG_OK && strncmp(ig_tokenizer_name(tok), "sentencepiece", 13) == 0)
        exercise(tok, data + 1, size - 1);
    ig_tokenizer_free(tok);
    unlink(path);
    return 0;
}
