/* cmd_preprocess.c - `ingot preprocess text`: corpora to Megatron-compatible token shards.
 *
 * Thin over ig_preprocess_text. Under mpirun each rank takes its share of the input files and
 * writes its own shards; rank 0 then writes OUT.shards.json, one manifest over all of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "cmd_schemas.h"
#include "dataset/dataset.h"
#include "comm/comm.h"
#include "preprocess/preprocess.h"

const char ig_usage_preprocess[] =
    "usage: ingot preprocess text --input PATH... --tokenizer T --output-prefix OUT [options]\n"
    "\n"
    "Tokenizes documents into Megatron-compatible token shards (OUT.bin + OUT.idx) with a\n"
    "manifest (OUT.json). The output is byte-identical for any --workers and --readers.\n"
    "\n"
    "inputs:\n"
    "  --input PATH...         .jsonl, .jsonl.zst, .txt files, directories, globs, or - (stdin,\n"
    "                          JSONL); may be repeated; extra arguments are inputs too\n"
    "  --json-key K            the JSON field holding the text (default text); repeat it for\n"
    "                          several fields: one output OUT_K per field, as Megatron does\n"
    "  --txt-mode doc|lines    a .txt file is one document (doc, default) or one per line\n"
    "tokenizer:\n"
    "  --tokenizer T           tokenizer.json, a directory with it or vocab.json+merges.txt,\n"
    "                          a .tiktoken file, or a SentencePiece .model file (or a\n"
    "                          directory with spiece.model or tokenizer.model)\n"
    "  --tiktoken-encoding E   r50k_base|gpt2|cl100k_base|o200k_base (default: from file name)\n"
    "  --append-eod            end every document with the end-of-document token (a\n"
    "                          SentencePiece model's end-of-sequence piece, </s>)\n"
    "  --allow-special         treat <|endoftext|> etc. in the text as special tokens\n"
    "output:\n"
    "  --output-prefix OUT     where to write (directories must exist)\n"
    "  --shard-size SIZE       split into OUT_00000, OUT_00001, ... of about SIZE (.bin bytes,\n"
    "                          e.g. 1GB), at document boundaries\n"
    "  --dedup exact|none      drop documents whose text was seen before (XXH3-128)\n"
    "  --on-error fail|skip    bad documents stop the run (default) or are skipped and counted\n"
    "                          (with skip, a corrupt .zst is skipped from where it breaks)\n"
    "  --force                 replace an existing complete output\n"
    "config:\n"
    "  --config FILE           take settings from a YAML file (section preprocess:, see\n"
    "                          'ingot config show'); options on the command line win\n"
    "  --set KEY=VALUE         override one config key, e.g. --set preprocess.workers=2\n"
    "run:\n"
    "  --workers N             threads, all together (alias --threads; default: all cores):\n"
    "                          each reads a batch of documents and tokenizes it, and the\n"
    "                          calling thread also writes; N = 1: all on one thread\n"
    "  --readers R             inputs read at once (default: one per 16 threads, at most one\n"
    "                          per file or range): R files, or ranges of a large .jsonl /\n"
    "                          line-mode .txt, each read by one thread at a time\n"
    "  --split-size SIZE       with R >= 2, .jsonl and line-mode .txt files over SIZE are read\n"
    "                          as ranges of SIZE, split at lines (default 8MB)\n"
    "  --quiet, --verbose      less or more output; no progress bar with --quiet\n"
    "\n"
    "Under mpirun -np K, the K ranks split the input files, each writes OUT_rRRRR shards, and\n"
    "rank 0 writes OUT.shards.json listing them all.\n"
    "\n"
    "Videos to frame shards: 'ingot preprocess video --manifest M.csv --output-prefix OUT\n"
    "--frames T ...'; 'ingot preprocess video' alone shows its options. The clips' captions to\n"
    "a frozen T5's features: 'ingot preprocess captions --clips OUT --text-encoder DIR\n"
    "--output-prefix FEATURES'. Clips to latent shards through a VAE: 'ingot preprocess latents\n"
    "--clips CLIPS --vae DIR --output-prefix OUT'; 'ingot help preprocess latents' shows its\n"
    "options.\n"
    "\n"
    "examples:\n"
    "  ingot preprocess text --input data/tinyshakespeare.jsonl --tokenizer data/gpt2 \\\n"
    "      --output-prefix out/shakespeare --append-eod\n"
    "  ingot preprocess text --input 'corpus/*.jsonl.zst' --tokenizer cl100k_base.tiktoken \\\n"
    "      --output-prefix out/web --append-eod --shard-size 1GB --dedup exact --on-error skip\n"
    "  ingot preprocess text --config configs/preprocess_tinyshakespeare.yaml \\\n"
    "      --set preprocess.output_prefix=out/ts\n"
    "  mpirun -np 4 ingot preprocess text --input corpus/ --tokenizer data/gpt2 \\\n"
    "      --output-prefix out/web --append-eod\n";

/* Everything the command parsed: the pipeline's options (bound by the preprocess module's keys),
 * the tokenizer to load and the common flags. Strings point into cfg. */
typedef struct pp_args {
    ig_preprocess_opts o;
    const char *tokenizer, *tiktoken;
    ig_common_flags flags;
    const char **inputs; /* the configured inputs, then the positional arguments (owned array) */
    ig_config *cfg;
} pp_args;

const ig_cfg_key ig_preprocess_cli_keys[] = {
    IG_KEY_STRING("preprocess.tokenizer", pp_args, tokenizer, "",
                  "tokenizer.json, a directory with it or vocab.json + merges.txt, a .tiktoken "
                  "file, or a SentencePiece .model file"),
    IG_KEY_STRING("preprocess.tiktoken_encoding", pp_args, tiktoken, "",
                  "r50k_base|gpt2|cl100k_base|o200k_base for a .tiktoken file (default: its name)"),
};
const size_t ig_preprocess_n_cli_keys =
    sizeof ig_preprocess_cli_keys / sizeof ig_preprocess_cli_keys[0];

static const char *const aliases[][2] = {{"workers", "threads"}};

static int parse_args(const ig_command *cmd, int argc, char **argv, pp_args *a) {
    a->o = ig_preprocess_opts_default();
    ig_cmd_table tables[] = {
        {ig_cmd_common_keys, ig_cmd_n_common_keys, &a->flags},
        {ig_preprocess_keys, ig_preprocess_n_keys, &a->o},
        {ig_preprocess_cli_keys, ig_preprocess_n_cli_keys, a},
    };
    ig_cmd_spec spec = {tables, 3, aliases, 1, 1};
    int first = 0;
    int rc = ig_cmd_parse(cmd, argc, argv, &spec, &a->cfg, &first);
    if (rc >= 0) return rc;
    /* arguments after the options are inputs too */
    size_t n = a->o.n_inputs + (size_t)(argc - first);
    a->inputs = calloc(n ? n : 1, sizeof *a->inputs);
    if (!a->inputs) return ig_cmd_failf("out of memory");
    for (size_t i = 0; i < a->o.n_inputs; i++) a->inputs[i] = a->o.inputs[i];
    for (int i = first; i < argc; i++) a->inputs[a->o.n_inputs++] = argv[i];
    a->o.inputs = a->inputs;
    if (a->o.n_inputs == 0) return ig_cmd_usage_error(cmd, "no input: give --input PATH");
    if (!*a->tokenizer) return ig_cmd_usage_error(cmd, "no tokenizer: give --tokenizer T");
    if (!*a->o.output_prefix) return ig_cmd_usage_error(cmd, "no output: give --output-prefix OUT");
    if (a->o.n_keys == 0) return ig_cmd_usage_error(cmd, "no JSON key: give --json-key K");
    if (a->o.n_keys > IG_MAX_JSON_KEYS)
        return ig_cmd_usage_error(cmd, "at most %d --json-key values", IG_MAX_JSON_KEYS);
    for (size_t i = 0; i < a->o.n_keys; i++) {
        if (!*a->o.json_keys[i]) return ig_cmd_usage_error(cmd, "--json-key is empty");
        for (size_t j = 0; j < i; j++)
            if (!strcmp(a->o.json_keys[i], a->o.json_keys[j]))
                return ig_cmd_usage_error(cmd, "--json-key '%s' is given twice", a->o.json_keys[i]);
    }
    return -1;
}

static void print_summary(const ig_preprocess_stats *st, int rank, int world) {
    char in[32], text[32];
    ig_format_bytes((double)st->bytes_in, in, sizeof in);
    ig_format_bytes((double)st->text_bytes, text, sizeof text);
    double secs = st->seconds > 1e-9 ? st->seconds : 1e-9;
    char who[32] = "";
    if (world > 1) snprintf(who, sizeof who, "rank %d: ", rank);
    printf("%spreprocessed %llu files in %.2f s: %llu documents read, %llu written, %llu skipped, "
           "%llu duplicate\n",
           who, (unsigned long long)st->files, st->seconds, (unsigned long long)st->docs_read,
           (unsigned long long)st->docs_written, (unsigned long long)st->docs_skipped,
           (unsigned long long)st->docs_duplicate);
    printf("%s%llu tokens from %s of text (%s read): %.1f MB/s, %.2f Mtokens/s; %llu shard%s\n",
           who, (unsigned long long)st->tokens, text, in, (double)st->text_bytes / 1e6 / secs,
           (double)st->tokens / 1e6 / secs, (unsigned long long)st->shards,
           st->shards == 1 ? "" : "s");
    for (size_t i = 0; i < st->n_shard_prefixes; i++)
        printf("%s  %s\n", who, st->shard_prefixes[i]);
    if (st->n_reported) {
        fprintf(stderr, "ingot: warning: %llu bad documents skipped; the first %zu:\n",
                (unsigned long long)st->docs_skipped, st->n_reported);
        for (size_t i = 0; i < st->n_reported; i++) fprintf(stderr, "  %s\n", st->reported[i]);
    }
}

const ig_command *ig_cmd_preprocess_help(const ig_command *cmd, int argc, char **argv) {
    static const ig_command video = {"preprocess video", "", ig_usage_preprocess_video,
                                     ig_cmd_preprocess_video};
    static const ig_command latents = {"preprocess latents", "", ig_usage_preprocess_latents,
                                       ig_cmd_preprocess_latents};
    if (argc >= 2 && strcmp(argv[1], "latents") == 0) return &latents;
    static const ig_command captions = {"preprocess captions", "", ig_usage_preprocess_captions,
                                        ig_cmd_preprocess_captions};
    if (argc >= 2 && strcmp(argv[1], "captions") == 0) return &captions;
    return argc >= 2 && strcmp(argv[1], "video") == 0 ? &video : cmd;
}

int ig_cmd_preprocess(const ig_command *cmd, int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-')
        return ig_cmd_usage_error(cmd, "expected a kind of input: 'ingot preprocess text ...', "
                                       "'ingot preprocess video ...' or 'ingot preprocess "
                                       "captions ...'");
    if (strcmp(argv[1], "video") == 0) return ig_cmd_preprocess_video(cmd, argc - 1, argv + 1);
    if (strcmp(argv[1], "latents") == 0) return ig_cmd_preprocess_latents(cmd, argc - 1, argv + 1);
    if (strcmp(argv[1], "captions") == 0)
        return ig_cmd_preprocess_captions(cmd, argc - 1, argv + 1);
    if (strcmp(argv[1], "text") != 0)
        return ig_cmd_usage_error(
            cmd, "unknown input kind '%s' (known: text, video, captions, latents)", argv[1]);
    pp_args a = {0};
    int rc = parse_args(cmd, argc - 1, argv + 1, &a);
    if (rc >= 0) {
        free(a.inputs);
        ig_config_free(a.cfg);
        return rc;
    }
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_comm *comm = NULL;
    ig_tokenizer *tok = NULL;
    ig_preprocess_stats st = {0};
    ig_status s = ig_cmd_ctx(&ctx, &a.flags, &err);
    /* under a launcher (mpirun, srun) the ranks split the inputs; alone, comm has one rank */
    if (s == IG_OK) s = ig_comm_world(&comm, ctx, "preprocess text", &err);
    int world = comm ? ig_comm_size(comm) : 1, rank = comm ? ig_comm_rank(comm) : 0;
    if (s == IG_OK) {
        ig_tokenizer_opts to = ig_tokenizer_opts_default();
        to.tiktoken_encoding = *a.tiktoken ? a.tiktoken : NULL;
        s = ig_tokenizer_load(&tok, ctx, a.tokenizer, &to, &err);
    }
    if (s == IG_OK) {
        a.o.tokenizer = tok;
        a.o.tokenizer_path = a.tokenizer;
        a.o.progress = !a.flags.quiet;
        a.o.comm = comm;
        s = ig_preprocess_text(ctx, &a.o, &st, &err);
    }
    if (s == IG_OK && !a.flags.quiet) print_summary(&st, rank, world);
    ig_preprocess_stats_clear(&st);
    ig_tokenizer_free(tok);
    free(a.inputs);
    ig_config_free(a.cfg);
    /* report before the communicator goes: mpirun may end the other processes once one exits
     * non-zero */
    rc = s == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    fflush(stdout);
    fflush(stderr);
    ig_comm_free(comm);
    ig_ctx_free(ctx);
    return rc;
}
