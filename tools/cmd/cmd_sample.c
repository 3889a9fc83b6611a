/* cmd_sample.c - `ingot sample MODEL --tokenizer T --prompt TEXT --tokens N`: text from a model,
 * one token at a time with a KV cache, printed as it comes. Thin over ig_model_open and
 * ig_model_generate; the draws are keyed by --seed, so a seed gives the same text every time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "preprocess/preprocess.h"
#include "train/train.h"

const char ig_usage_sample[] =
    "usage: ingot sample MODEL --tokenizer T --prompt TEXT [--tokens N] [--temperature X]\n"
    "                    [--top-k K] [--top-p P] [--seed S]\n"
    "\n"
    "Generates up to N tokens after TEXT and prints the prompt and the text as it comes. The\n"
    "prompt goes through the model at once, then each token alone over a cache of keys and\n"
    "values. Generation stops at the end-of-document token or at the model's last position.\n"
    "MODEL is a checkpoint directory (or a run directory: its latest), a Hugging Face GPT-2 or\n"
    "Llama directory, or a model.safetensors with its config.json beside it. A model whose\n"
    "weights are not finite (NaN, infinity) is refused.\n"
    "\n"
    "options:\n"
    "  --tokenizer T       the tokenizer the model was trained with (as for ingot tokenize)\n"
    "  --prompt TEXT       the text to continue\n"
    "  --tokens N          tokens to generate (default 64)\n"
    "  --temperature X     softmax temperature; 0: always the most likely token (default 1)\n"
    "  --top-k K           draw among the K most likely tokens only (default 0: all)\n"
    "  --top-p P           draw among the most likely tokens whose probabilities add up to P\n"
    "                      (default 1: all; 0: the most likely token alone)\n"
    "  --seed S            the draws' seed (default 1234)\n"
    "  --threads N, --quiet, --verbose\n"
    "\n"
    "examples:\n"
    "  ingot sample out/gpt-tiny --tokenizer data/gpt2 --prompt 'ROMEO:' --tokens 100\n"
    "  ingot sample out/gpt-tiny-hf --tokenizer data/gpt2 --prompt 'To be' --temperature 0.8 \\\n"
    "      --top-k 40 --seed 7\n";

typedef struct sample_args {
    const char *tokenizer, *prompt;
    int tokens, top_k;
    double temperature, top_p;
    uint64_t seed;
    ig_common_flags flags;
} sample_args;

static const ig_cfg_key sample_keys[] = {
    IG_KEY_STRING("sample.tokenizer", sample_args, tokenizer, "", "the tokenizer"),
    IG_KEY_STRING("sample.prompt", sample_args, prompt, "", "the text to continue"),
    IG_KEY_INT("sample.tokens", sample_args, tokens, "64", 0, 1048576, "tokens to generate"),
    IG_KEY_FLOAT("sample.temperature", sample_args, temperature, "1", 0, 100,
                 "softmax temperature (0: greedy)"),
    IG_KEY_INT("sample.top_k", sample_args, top_k, "0", 0, 1073741824, "top-k (0: off)"),
    IG_KEY_FLOAT("sample.top_p", sample_args, top_p, "1", 0, 1,
                 "nucleus (1: off; 0: the most likely token)"),
    IG_KEY_INT("sample.seed", sample_args, seed, "1234", 0, 9.2e18, "seed of the draws"),
};

typedef struct emit_state {
    const ig_tokenizer *tok;
    char *buf;
    size_t len, cap;
    int failed;
} emit_state;

static int emit(void *user, int32_t id) {
    emit_state *e = user;
    e->len = 0;
    if (ig_tokenizer_decode(e->tok, &id, 1, &e->buf, &e->len, &e->cap, NULL) != IG_OK) return 0;
    if (fwrite(e->buf, 1, e->len, stdout) != e->len || fflush(stdout) != 0) e->failed = 1;
    return e->failed;
}

int ig_cmd_sample(const ig_command *cmd, int argc, char **argv) {
    sample_args a = {0};
    ig_cmd_table tables[] = {{ig_cmd_common_keys, ig_cmd_n_common_keys, &a.flags},
                             {sample_keys, sizeof sample_keys / sizeof sample_keys[0], &a}};
    ig_cmd_spec spec = {tables, 2, NULL, 0, 0};
    ig_config *cfg = NULL;
    int first = 0;
    int rc = ig_cmd_parse(cmd, argc, argv, &spec, &cfg, &first);
    if (rc < 0 && argc - first != 1) rc = ig_cmd_usage_error(cmd, "expected one MODEL");
    if (rc < 0 && !*a.tokenizer) rc = ig_cmd_usage_error(cmd, "--tokenizer T is required");
    if (rc < 0 && !*a.prompt) rc = ig_cmd_usage_error(cmd, "--prompt TEXT is required");
    if (rc >= 0) {
        ig_config_free(cfg);
        return rc;
    }
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_model *m = NULL;
    ig_tokenizer *tok = NULL;
    ig_encoder *enc = NULL;
    ig_tokens ids = {0};
    emit_state es = {0};
    int32_t eod = -1;
    ig_backend_opts bo = ig_backend_opts_default();
    ig_status st = ig_cmd_ctx(&ctx, &a.flags, &err);
    if (st == IG_OK) st = ig_tokenizer_load(&tok, ctx, a.tokenizer, NULL, &err);
    if (st == IG_OK) st = ig_encoder_create(&enc, tok, &err);
    if (st == IG_OK) st = ig_encoder_encode(enc, a.prompt, strlen(a.prompt), 0, &ids, &err);
    if (st == IG_OK) st = ig_backend_create(&be, ctx, &bo, &err);
    if (st == IG_OK) st = ig_model_open(&m, ctx, be, argv[first], 1, 1, &eod, &err);
    if (st == IG_OK && (st = ig_model_check_finite(m, &err)) != IG_OK)
        ig_err_prefix(&err, st, "%s: its weights are not finite", argv[first]);
    if (st == IG_OK) {
        ig_sample_opts so = ig_sample_opts_default();
        so.max_tokens = a.tokens;
        so.temperature = (float)a.temperature;
        so.top_k = a.top_k;
        so.top_p = (float)a.top_p;
        so.seed = a.seed;
        so.stop_id = eod >= 0 ? eod : ig_tokenizer_eod(tok);
        es.tok = tok;
        fputs(a.prompt, stdout);
        size_t n = 0;
        st = ig_model_generate(m, ctx, ids.ids, ids.n, &so, emit, &es, &n, &err);
        fputc('\n', stdout);
        fflush(stdout);
        if (st == IG_OK && es.failed) st = ig_err_set(&err, IG_ERR_IO, "writing stdout failed");
        if (st == IG_OK && !a.flags.quiet)
            fprintf(stderr, "ingot: %zu prompt tokens, %zu generated\n", ids.n, n);
    }
    rc = st == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    free(es.buf);
    ig_tokens_free(&ids);
    ig_encoder_free(enc);
    ig_tokenizer_free(tok);
    ig_model_free(m);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    ig_config_free(cfg);
    return rc;
}
