/* cmd_preprocess.c - `ingot preprocess text`: corpora to Megatron-compatible token shards.
 *
 * Thin over ig_preprocess_text. Under mpirun each rank takes its share of the input files and
 * writes its own shards; rank 0 then writes OUT.shards.json, one manifest over all of them. */
#include <getopt.h>
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
    "manifest (OUT.json). The output is byte-identical for any --workers.\n"
    "\n"
    "inputs:\n"
    "  --input PATH...         .jsonl, .jsonl.zst, .txt files, directories, globs, or - (stdin,\n"
    "                          JSONL); may be repeated; extra arguments are inputs too\n"
    "  --json-key K            the JSON field holding the text (default text); repeat it for\n"
    "                          several fields: one output OUT_K per field, as Megatron does\n"
    "  --txt-mode doc|lines    a .txt file is one document (doc, default) or one per line\n"
    "tokenizer:\n"
    "  --tokenizer T           tokenizer.json, a directory with it or vocab.json+merges.txt,\n"
    "                          or a .tiktoken file\n"
    "  --tiktoken-encoding E   r50k_base|gpt2|cl100k_base|o200k_base (default: from file name)\n"
    "  --append-eod            end every document with the end-of-document token\n"
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
    "  --workers N             tokenizing threads (default: all cores)\n"
    "  --quiet, --verbose      less or more output; no progress bar with --quiet\n"
    "\n"
    "Under mpirun -np K, the K ranks split the input files, each writes OUT_rRRRR shards, and\n"
    "rank 0 writes OUT.shards.json listing them all.\n"
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

enum {
    OPT_INPUT = 256,
    OPT_TOKENIZER,
    OPT_TIKTOKEN,
    OPT_OUTPUT,
    OPT_JSON_KEY,
    OPT_APPEND_EOD,
    OPT_ALLOW_SPECIAL,
    OPT_TXT_MODE,
    OPT_WORKERS,
    OPT_SHARD_SIZE,
    OPT_DEDUP,
    OPT_ON_ERROR,
    OPT_FORCE,
    OPT_QUIET,
    OPT_VERBOSE,
    OPT_CONFIG,
    OPT_SET,
};

static const struct option long_opts[] = {
    {"input", required_argument, NULL, OPT_INPUT},
    {"tokenizer", required_argument, NULL, OPT_TOKENIZER},
    {"tiktoken-encoding", required_argument, NULL, OPT_TIKTOKEN},
    {"output-prefix", required_argument, NULL, OPT_OUTPUT},
    {"json-key", required_argument, NULL, OPT_JSON_KEY},
    {"append-eod", no_argument, NULL, OPT_APPEND_EOD},
    {"allow-special", no_argument, NULL, OPT_ALLOW_SPECIAL},
    {"txt-mode", required_argument, NULL, OPT_TXT_MODE},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"shard-size", required_argument, NULL, OPT_SHARD_SIZE},
    {"dedup", required_argument, NULL, OPT_DEDUP},
    {"on-error", required_argument, NULL, OPT_ON_ERROR},
    {"force", no_argument, NULL, OPT_FORCE},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"set", required_argument, NULL, OPT_SET},
    {NULL, 0, NULL, 0},
};

/* Everything the command parsed; arrays point into argv. */
typedef struct pp_args {
    const char **inputs;
    size_t n_inputs;
    const char *keys[IG_MAX_JSON_KEYS];
    size_t n_keys;
    const char *tokenizer, *tiktoken, *output;
    ig_preprocess_opts o;
    ig_common_flags flags;
    const char *config;
    const char **sets;
    size_t n_sets;
    char given[OPT_SET + 1]; /* which options the command line set */
    ig_config *cfg;          /* from --config / --set, or NULL */
} pp_args;

/* Fills every setting the command line left unset from the config (--config, --set). */
static int apply_config(const ig_command *cmd, pp_args *a) {
    if (!a->config && !a->n_sets) return -1;
    ig_err err = {0};
    ig_status s = ig_config_create(&a->cfg, ig_schema_preprocess, ig_schema_preprocess_n, &err);
    if (s == IG_OK && a->config) s = ig_config_load_file(a->cfg, a->config, &err);
    for (size_t i = 0; s == IG_OK && i < a->n_sets; i++)
        s = ig_config_set(a->cfg, a->sets[i], &err);
    if (s != IG_OK) return ig_cmd_fail(&err);
    const ig_config *c = a->cfg;
    const char *v;
    if (!a->n_inputs && *(v = ig_config_string(c, "preprocess.input")))
        a->inputs[a->n_inputs++] = v;
    /* an empty string in the config means unset: the checks after this report what is missing */
    if (!a->given[OPT_TOKENIZER] && *(v = ig_config_string(c, "preprocess.tokenizer")))
        a->tokenizer = v;
    if (!a->given[OPT_OUTPUT] && *(v = ig_config_string(c, "preprocess.output_prefix")))
        a->output = v;
    if (!a->given[OPT_JSON_KEY]) {
        a->keys[0] = ig_config_string(c, "preprocess.json_key");
        a->n_keys = 1;
        if (!*a->keys[0])
            return ig_cmd_failf("%s: preprocess.json_key is empty: name the JSON field of the text",
                                ig_config_origin(c, "preprocess.json_key"));
    }
    if (!a->given[OPT_APPEND_EOD]) a->o.append_eod = ig_config_bool(c, "preprocess.append_eod");
    if (!a->given[OPT_ALLOW_SPECIAL])
        a->o.allow_special = ig_config_bool(c, "preprocess.allow_special");
    if (!a->given[OPT_WORKERS]) {
        int64_t w = ig_config_int(c, "preprocess.workers");
        if (w < 0 || w > 256)
            return ig_cmd_failf("%s: preprocess.workers must be in [0, 256], got %lld",
                                ig_config_origin(c, "preprocess.workers"), (long long)w);
        a->o.workers = (int)w;
    }
    if (!a->given[OPT_SHARD_SIZE] && ig_parse_size(ig_config_string(c, "preprocess.shard_size"),
                                                   &a->o.shard_size, &err) != IG_OK)
        return ig_cmd_failf("%s: preprocess.shard_size: %s",
                            ig_config_origin(c, "preprocess.shard_size"), err.msg);
    struct {
        int opt;
        const char *key, *a, *b;
        int *out;
    } choices[] = {
        {OPT_DEDUP, "preprocess.dedup", "none", "exact", &a->o.dedup_exact},
        {OPT_ON_ERROR, "preprocess.on_error", "fail", "skip", (int *)&a->o.on_error},
        {OPT_TXT_MODE, "preprocess.txt_mode", "doc", "lines", &a->o.txt_lines},
    };
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++) {
        if (a->given[choices[i].opt]) continue;
        v = ig_config_string(c, choices[i].key);
        if (strcmp(v, choices[i].a) && strcmp(v, choices[i].b))
            return ig_cmd_failf("%s: %s must be %s or %s, got '%s'",
                                ig_config_origin(c, choices[i].key), choices[i].key, choices[i].a,
                                choices[i].b, v);
        *choices[i].out = !strcmp(v, choices[i].b);
    }
    (void)cmd;
    return -1;
}

static int parse_args(const ig_command *cmd, int argc, char **argv, pp_args *a) {
    a->o = ig_preprocess_opts_default();
    a->o.append_eod = 0;
    a->inputs = calloc((size_t)argc + 2, sizeof *a->inputs);
    a->sets = calloc((size_t)argc + 1, sizeof *a->sets);
    if (!a->inputs || !a->sets) return ig_cmd_failf("out of memory");
    opterr = 0;
    optind = 1;
    int c;
    uint64_t v;
    while ((c = ig_cmd_getopt(argc, argv, ":", long_opts)) != -1) {
        if (c > 0 && c <= OPT_SET) a->given[c] = 1;
        switch (c) {
        case OPT_CONFIG:
            a->config = optarg;
            break;
        case OPT_SET:
            a->sets[a->n_sets++] = optarg;
            break;
        case OPT_INPUT:
            a->inputs[a->n_inputs++] = optarg;
            break;
        case OPT_TOKENIZER:
            a->tokenizer = optarg;
            break;
        case OPT_TIKTOKEN:
            a->tiktoken = optarg;
            break;
        case OPT_OUTPUT:
            a->output = optarg;
            break;
        case OPT_JSON_KEY:
            if (a->n_keys == IG_MAX_JSON_KEYS)
                return ig_cmd_usage_error(cmd, "at most %d --json-key values", IG_MAX_JSON_KEYS);
            for (size_t k = 0; k < a->n_keys; k++)
                if (!strcmp(a->keys[k], optarg))
                    return ig_cmd_usage_error(cmd, "--json-key '%s' is given twice", optarg);
            a->keys[a->n_keys++] = optarg;
            break;
        case OPT_APPEND_EOD:
            a->o.append_eod = 1;
            break;
        case OPT_ALLOW_SPECIAL:
            a->o.allow_special = 1;
            break;
        case OPT_TXT_MODE:
            if (strcmp(optarg, "doc") && strcmp(optarg, "lines"))
                return ig_cmd_usage_error(cmd, "--txt-mode expects doc or lines, got '%s'", optarg);
            a->o.txt_lines = !strcmp(optarg, "lines");
            break;
        case OPT_WORKERS:
            if (!ig_cmd_parse_u64(cmd, "--workers", optarg, &v)) return IG_EXIT_USAGE;
            if (v < 1 || v > 256)
                return ig_cmd_usage_error(cmd, "--workers must be in [1, 256], got %s", optarg);
            a->o.workers = (int)v;
            break;
        case OPT_SHARD_SIZE: {
            ig_err e = {0};
            if (ig_parse_size(optarg, &a->o.shard_size, &e) != IG_OK)
                return ig_cmd_usage_error(cmd, "--shard-size: %s", e.msg);
            break;
        }
        case OPT_DEDUP:
            if (strcmp(optarg, "exact") && strcmp(optarg, "none"))
                return ig_cmd_usage_error(cmd, "--dedup expects exact or none, got '%s'", optarg);
            a->o.dedup_exact = !strcmp(optarg, "exact");
            break;
        case OPT_ON_ERROR:
            if (strcmp(optarg, "fail") && strcmp(optarg, "skip"))
                return ig_cmd_usage_error(cmd, "--on-error expects fail or skip, got '%s'", optarg);
            a->o.on_error = !strcmp(optarg, "skip") ? IG_ON_ERROR_SKIP : IG_ON_ERROR_FAIL;
            break;
        case OPT_FORCE:
            a->o.overwrite = 1;
            break;
        case OPT_QUIET:
            a->flags.quiet = 1;
            break;
        case OPT_VERBOSE:
            a->flags.verbose = 1;
            break;
        default:
            return ig_cmd_bad_option(cmd, c, argv);
        }
    }
    for (int i = optind; i < argc; i++) a->inputs[a->n_inputs++] = argv[i];
    int rc = apply_config(cmd, a);
    if (rc >= 0) return rc;
    if (a->n_inputs == 0) return ig_cmd_usage_error(cmd, "no input: give --input PATH");
    if (!a->tokenizer) return ig_cmd_usage_error(cmd, "no tokenizer: give --tokenizer T");
    if (!a->output) return ig_cmd_usage_error(cmd, "no output: give --output-prefix OUT");
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

int ig_cmd_preprocess(const ig_command *cmd, int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-')
        return ig_cmd_usage_error(cmd, "expected a kind of input: 'ingot preprocess text ...'");
    if (strcmp(argv[1], "text") != 0)
        return ig_cmd_usage_error(cmd, "unknown input kind '%s' (known: text)", argv[1]);
    pp_args a = {0};
    int rc = parse_args(cmd, argc - 1, argv + 1, &a);
    if (rc >= 0) {
        free(a.inputs);
        free(a.sets);
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
    if (s == IG_OK) s = ig_comm_world(&comm, ctx, &err);
    int world = comm ? ig_comm_size(comm) : 1, rank = comm ? ig_comm_rank(comm) : 0;
    if (s == IG_OK) {
        ig_tokenizer_opts to = ig_tokenizer_opts_default();
        to.tiktoken_encoding = a.tiktoken;
        s = ig_tokenizer_load(&tok, ctx, a.tokenizer, &to, &err);
    }
    if (s == IG_OK) {
        a.o.output_prefix = a.output;
        if (a.n_keys) {
            a.o.json_keys = a.keys;
            a.o.n_keys = a.n_keys;
        }
        a.o.inputs = a.inputs;
        a.o.n_inputs = a.n_inputs;
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
    free(a.sets);
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
