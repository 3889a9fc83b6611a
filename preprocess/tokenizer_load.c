/* tokenizer_load.c - choosing the loader from a path (a Hugging Face tokenizer.json, a directory
 * with it or with vocab.json + merges.txt, a .tiktoken file, a SentencePiece .model file or a
 * directory with one), and the tokenizer's accessors.
 *
 * A SentencePiece model is recognised by its contents (a protobuf ModelProto starts with its
 * first piece), or by a name ending in .model, whose loader then says what is wrong with it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer_internal.h"
#include "tokenizer_spm_internal.h"

/* ---- public -------------------------------------------------------------------------------- */

ig_tokenizer_opts ig_tokenizer_opts_default(void) {
    ig_tokenizer_opts o = {0};
    return o;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Whether the regular file at path starts as a SentencePiece model does. */
static int looks_like_spm(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    uint8_t head[64];
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    return ig_spm_sniff(head, n);
}

ig_status ig_tokenizer_load(ig_tokenizer **out, ig_ctx *ctx, const char *path,
                            const ig_tokenizer_opts *opts, ig_err *err) {
    *out = NULL;
    if (!path || !*path) return ig_err_set(err, IG_ERR_INVALID_ARG, "no tokenizer path given");
    const char *encoding = opts ? opts->tiktoken_encoding : NULL;
    struct stat stt;
    if (stat(path, &stt) != 0)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "tokenizer %s: %s: expected a tokenizer.json, a directory holding "
                          "tokenizer.json or vocab.json + merges.txt, a .tiktoken file or a "
                          "SentencePiece .model file",
                          path, strerror(errno));
    if (is_dir(path)) {
        char a[4096], b[4096];
        static const char *const spm_names[] = {"spiece.model", "tokenizer.model"};
        for (int k = 0; k < 2; k++) {
            snprintf(a, sizeof a, "%s/%s", path, spm_names[k]);
            if (ig_file_exists(a)) return ig_tok_load_spm(out, ctx, a, err);
        }
        snprintf(a, sizeof a, "%s/tokenizer.json", path);
        if (ig_file_exists(a)) return ig_tok_load_hf_json(out, ctx, a, err);
        snprintf(a, sizeof a, "%s/vocab.json", path);
        snprintf(b, sizeof b, "%s/merges.txt", path);
        if (ig_file_exists(a) && ig_file_exists(b))
            return ig_tok_load_vocab_merges(out, ctx, a, b, err);
        if (ig_file_exists(a) || ig_file_exists(b))
            return ig_err_set(err, IG_ERR_NOT_FOUND,
                              "tokenizer directory %s: %s is missing "
                              "(vocab.json and merges.txt go together)",
                              path, ig_file_exists(a) ? "merges.txt" : "vocab.json");
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "tokenizer directory %s holds neither tokenizer.json nor vocab.json + "
                          "merges.txt, nor a SentencePiece spiece.model or tokenizer.model",
                          path);
    }
    if (!encoding &&
        (ends_with(path, ".model") || (!ends_with(path, ".json") && !ends_with(path, ".tiktoken") &&
                                       S_ISREG(stt.st_mode) && looks_like_spm(path))))
        return ig_tok_load_spm(out, ctx, path, err);
    if (encoding || ends_with(path, ".tiktoken"))
        return ig_tok_load_tiktoken(out, ctx, path, encoding, err);
    return ig_tok_load_hf_json(out, ctx, path, err);
}

size_t ig_tokenizer_vocab_size(const ig_tokenizer *t) {
    return t->vocab_size;
}
int32_t ig_tokenizer_eod(const ig_tokenizer *t) {
    return t->eod;
}
int32_t ig_tokenizer_eos(const ig_tokenizer *t) {
    return t->eod;
}
const char *ig_tokenizer_name(const ig_tokenizer *t) {
    return t->name;
}
uint64_t ig_tokenizer_hash(const ig_tokenizer *t) {
    return t->hash;
}
