/* make_small_json.c - writes tests/data/golden/small.json, ingot's manifest for the small.bin /
 * small.idx that make_small.py built: checksums of those exact files, and the tokenizer fields
 * (name, hash, path) of the bundled GPT-2 tokenizer in data/gpt2.
 * Not part of the build; see tests/data/README.md for the command. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"
#include "preprocess/preprocess.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: make_small_json PREFIX TOKENIZER_DIR\n");
        return 2;
    }
    const char *prefix = argv[1];
    ig_err err = {0};
    ig_shard *s;
    if (ig_shard_open(&s, NULL, prefix, &err) != IG_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    ig_manifest m = {0};
    snprintf(m.tokenizer, sizeof m.tokenizer, "gpt2");
    /* relative paths in a manifest are resolved against the shard's directory */
    snprintf(m.tokenizer_path, sizeof m.tokenizer_path, "../../../data/gpt2");
    snprintf(m.json_key, sizeof m.json_key, "text");
    snprintf(m.tool_version, sizeof m.tool_version, "ingot %s", IG_VERSION_STRING);
    ig_ctx *ctx = NULL;
    ig_tokenizer *tok = NULL;
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 1;
    if (ig_ctx_create(&ctx, &co, &err) != IG_OK ||
        ig_tokenizer_load(&tok, ctx, argv[2], NULL, &err) != IG_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    m.tokenizer_hash = ig_tokenizer_hash(tok);
    ig_tokenizer_free(tok);
    ig_ctx_free(ctx);
    m.vocab_size = 50257;
    m.eod_id = 50256;
    m.dtype = ig_shard_dtype(s);
    m.documents = ig_shard_documents(s);
    m.sequences = ig_shard_sequences(s);
    m.tokens = ig_shard_tokens(s);
    m.bin_bytes = ig_shard_bin_bytes(s);
    ig_shard_close(s);
    char path[4096];
    snprintf(path, sizeof path, "%s.idx", prefix);
    ig_status st = ig_file_xxh3(path, &m.idx_xxh3, &err);
    FILE *f = fopen(path, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        m.idx_bytes = (uint64_t)ftell(f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s.bin", prefix);
    if (st == IG_OK) st = ig_file_xxh3(path, &m.bin_xxh3, &err);
    if (st == IG_OK) st = ig_manifest_add_source(&m, "tests/data/golden/make_small.py", &err);
    if (st == IG_OK) st = ig_manifest_write(&m, prefix, 1, &err);
    ig_manifest_clear(&m);
    if (st != IG_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}
