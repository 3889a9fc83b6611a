/* cmd_tokenize.c - `ingot tokenize` (text on stdin -> ids on stdout) and `ingot detokenize` (ids on
 * stdin -> text bytes on stdout): thin wrappers over ig_tokenizer_load / ig_encoder_encode /
 * ig_tokenizer_decode, handy for checking a tokenizer by hand or from scripts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "preprocess/preprocess.h"

const char ig_usage_tokenize[] =
    "usage: ingot tokenize --tokenizer PATH [--tiktoken-encoding NAME] [--allow-special]\n"
    "                      [--append-eod | --append-eos] [--json]\n\n"
    "Reads text on stdin and prints its token ids, separated by spaces, with a newline at the "
    "end.\n"
    "The whole input is one text (a SentencePiece model sees its newlines as white space).\n\n"
    "options:\n"
    "  --tokenizer PATH          tokenizer.json, a directory holding tokenizer.json or\n"
    "                            vocab.json + merges.txt, a .tiktoken file, or a SentencePiece\n"
    "                            .model file (T5's spiece.model, Llama 2's tokenizer.model) or\n"
    "                            a directory holding one\n"
    "  --tiktoken-encoding NAME  r50k_base (gpt2), cl100k_base or o200k_base; default: from\n"
    "                            the .tiktoken file name\n"
    "  --allow-special           encode special-token strings (<|endoftext|>; a SentencePiece\n"
    "                            model's control pieces such as </s>) as their ids; by default\n"
    "                            they are plain text\n"
    "  --append-eod              append the end-of-document id\n"
    "  --append-eos              append the end-of-sequence id, as a text encoder's input ends\n"
    "                            (T5: </s>, id 1); an error when the tokenizer has none\n"
    "  --json                    print a JSON array of ids instead\n\n"
    "examples:\n"
    "  echo 'Hello world' | ingot tokenize --tokenizer data/gpt2\n"
    "  ingot tokenize --tokenizer cl100k_base.tiktoken --append-eod < doc.txt\n"
    "  echo 'A red fox.' | ingot tokenize --tokenizer tests/data/spm/unigram_t5_32k.model \\\n"
    "      --append-eos\n";

const char ig_usage_detokenize[] =
    "usage: ingot detokenize --tokenizer PATH [--tiktoken-encoding NAME]\n\n"
    "Reads token ids (decimal, separated by white space) on stdin and writes the bytes they\n"
    "stand for to stdout. An id outside the vocabulary is an error (exit 1).\n\n"
    "options:\n"
    "  --tokenizer PATH          as for ingot tokenize (the ids of a SentencePiece .model\n"
    "                            decode as SentencePiece decodes them: the normalised text)\n"
    "  --tiktoken-encoding NAME  as for ingot tokenize\n\n"
    "examples:\n"
    "  echo '15496 995' | ingot detokenize --tokenizer data/gpt2\n"
    "  ingot tokenize --tokenizer data/gpt2 < a.txt | ingot detokenize --tokenizer data/gpt2\n";

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) free(buf);
            buf = nb, cap *= 2;
        }
    }
    *len = n;
    return buf;
}

typedef struct tok_args {
    const char *tokenizer, *encoding;
    int allow_special, append_eod, append_eos, json;
    ig_common_flags flags;
    ig_config *cfg; /* the strings point into it */
} tok_args;

/* tokenize's keys; detokenize takes the first two */
static const ig_cfg_key tok_keys[] = {
    {"tokenizer.path", IG_CFG_STRING, "",
     "tokenizer.json, a directory with it or vocab.json + merges.txt, a .tiktoken file, or a "
     "SentencePiece .model file",
     "tokenizer", IG_CFG_FIELD_(tok_args, tokenizer), 0, 0, NULL, 0, 0},
    {"tokenizer.tiktoken_encoding", IG_CFG_STRING, "",
     "r50k_base (gpt2), cl100k_base or o200k_base (default: from the .tiktoken file name)",
     "tiktoken-encoding", IG_CFG_FIELD_(tok_args, encoding), 0, 0, NULL, 0, 0},
    IG_KEY_BOOL("tokenizer.allow_special", tok_args, allow_special, "false",
                "encode special-token strings (<|endoftext|>) as their ids"),
    IG_KEY_BOOL("tokenizer.append_eod", tok_args, append_eod, "false",
                "append the end-of-document id"),
    IG_KEY_BOOL("tokenizer.append_eos", tok_args, append_eos, "false",
                "append the end-of-sequence id (a text encoder's input: T5's </s>)"),
    IG_KEY_BOOL("tokenizer.json", tok_args, json, "false", "print a JSON array of ids"),
};

static int parse(const ig_command *cmd, int argc, char **argv, tok_args *a, int full) {
    memset(a, 0, sizeof *a);
    ig_cmd_table t[] = {{ig_cmd_common_keys, ig_cmd_n_common_keys, &a->flags},
                        {tok_keys, full ? sizeof tok_keys / sizeof tok_keys[0] : 2, a}};
    ig_cmd_spec spec = {t, 2, NULL, 0, 0};
    int first = 0;
    int rc = ig_cmd_parse(cmd, argc, argv, &spec, &a->cfg, &first);
    if (rc >= 0) return rc;
    if (first < argc) return ig_cmd_usage_error(cmd, "unexpected argument '%s'", argv[first]);
    if (!*a->tokenizer) return ig_cmd_usage_error(cmd, "--tokenizer PATH is required");
    if (a->append_eod && a->append_eos)
        return ig_cmd_usage_error(cmd, "give one of --append-eod and --append-eos");
    return -1;
}

static int load(const tok_args *a, ig_tokenizer **tok) {
    ig_err err = {0};
    ig_tokenizer_opts o = ig_tokenizer_opts_default();
    o.tiktoken_encoding = *a->encoding ? a->encoding : NULL;
    if (ig_tokenizer_load(tok, NULL, a->tokenizer, &o, &err) != IG_OK) return ig_cmd_fail(&err);
    return -1;
}

int ig_cmd_tokenize(const ig_command *cmd, int argc, char **argv) {
    tok_args a;
    int rc = parse(cmd, argc, argv, &a, 1);
    ig_tokenizer *tok = NULL;
    if (rc < 0) rc = load(&a, &tok);
    if (rc >= 0) {
        ig_config_free(a.cfg);
        return rc;
    }
    size_t len;
    char *text = read_stdin(&len);
    ig_err err = {0};
    ig_encoder *enc = NULL;
    ig_tokens out = {0};
    rc = IG_EXIT_OK;
    if (!text) {
        rc = ig_cmd_failf("out of memory reading stdin");
    } else if (a.append_eos && ig_tokenizer_eos(tok) < 0) {
        rc = ig_cmd_failf("%s has no end-of-sequence token for --append-eos", a.tokenizer);
    } else if (ig_encoder_create(&enc, tok, &err) != IG_OK ||
               ig_encoder_encode(enc, text, len,
                                 (a.allow_special ? IG_ENCODE_ALLOW_SPECIAL : 0) |
                                     (a.append_eos ? IG_ENCODE_APPEND_EOS : 0),
                                 &out, &err) != IG_OK) {
        rc = ig_cmd_fail(&err);
    } else if (a.append_eod && ig_tokenizer_eod(tok) < 0) {
        rc = ig_cmd_failf("%s has no end-of-document token for --append-eod", a.tokenizer);
    } else {
        if (a.append_eod && ig_tokens_push(&out, ig_tokenizer_eod(tok)) != IG_OK)
            rc = ig_cmd_failf("out of memory");
        if (a.json) putchar('[');
        for (size_t i = 0; i < out.n && rc == IG_EXIT_OK; i++)
            printf(a.json ? "%s%d" : "%s%d", i ? (a.json ? "," : " ") : "", out.ids[i]);
        printf(a.json ? "]\n" : "\n");
        if (fflush(stdout) != 0) rc = ig_cmd_failf("writing stdout failed");
    }
    ig_tokens_free(&out);
    ig_encoder_free(enc);
    free(text);
    ig_tokenizer_free(tok);
    ig_config_free(a.cfg);
    return rc;
}

int ig_cmd_detokenize(const ig_command *cmd, int argc, char **argv) {
    tok_args a;
    int rc = parse(cmd, argc, argv, &a, 0);
    ig_tokenizer *tok = NULL;
    if (rc < 0) rc = load(&a, &tok);
    if (rc >= 0) {
        ig_config_free(a.cfg);
        return rc;
    }
    size_t len;
    char *text = read_stdin(&len);
    ig_tokens ids = {0};
    rc = IG_EXIT_OK;
    if (!text) rc = ig_cmd_failf("out of memory reading stdin");
    for (size_t i = 0; text && i < len && rc == IG_EXIT_OK;) {
        if (strchr(" \t\r\n\f\v", text[i])) {
            i++;
            continue;
        }
        size_t j = i;
        long long v = 0;
        while (j < len && text[j] >= '0' && text[j] <= '9' && v <= INT32_MAX)
            v = v * 10 + (text[j++] - '0');
        if (j == i || v > INT32_MAX || (j < len && !strchr(" \t\r\n\f\v", text[j]))) {
            size_t e = i;
            while (e < len && !strchr(" \t\r\n\f\v", text[e]) && e - i < 40) e++;
            rc = ig_cmd_failf("stdin: expected a token id (a decimal number), got '%.*s'",
                              (int)(e - i), text + i);
        } else if (ig_tokens_push(&ids, (int32_t)v) != IG_OK) {
            rc = ig_cmd_failf("out of memory");
        }
        i = j;
    }
    char *buf = NULL;
    size_t blen = 0, bcap = 0;
    ig_err err = {0};
    if (rc == IG_EXIT_OK) {
        if (ig_tokenizer_decode(tok, ids.ids, ids.n, &buf, &blen, &bcap, &err) != IG_OK)
            rc = ig_cmd_fail(&err);
        else if (fwrite(buf, 1, blen, stdout) != blen || fflush(stdout) != 0)
            rc = ig_cmd_failf("writing stdout failed");
    }
    free(buf);
    ig_tokens_free(&ids);
    free(text);
    ig_tokenizer_free(tok);
    ig_config_free(a.cfg);
    return rc;
}
