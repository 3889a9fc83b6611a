/* cmd_inspect.c - `ingot inspect PREFIX`: what a token shard holds (documents, sequences, tokens,
 * dtype, file sizes, tokenizer from the manifest, document length statistics), or one document's
 * ids or text. Thin over dataset.h (and preprocess.h for --decode). */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd.h"
#include "dataset/dataset.h"
#include "preprocess/preprocess.h"

const char ig_usage_inspect[] =
    "usage: ingot inspect PREFIX [--json] [--threads N]\n"
    "       ingot inspect PREFIX --doc N [--decode [--tokenizer T]] [--json]\n"
    "\n"
    "Shows what the token shard PREFIX.bin + PREFIX.idx holds (or every shard of the shard list\n"
    "PREFIX.shards.json): documents, sequences, tokens, dtype, file sizes, the tokenizer\n"
    "recorded in the manifest PREFIX.json (name, hash, path) and the minimum, mean and maximum\n"
    "document length in tokens. The index is validated first.\n"
    "\n"
    "options:\n"
    "  --json           print JSON instead of text\n"
    "  --doc N          print document N (0-based): its token ids, one line per sequence\n"
    "  --decode         with --doc: print the document's text instead of its ids\n"
    "  --tokenizer T    with --decode: the tokenizer (tokenizer.json, a directory, a\n"
    "                   .tiktoken or a SentencePiece .model file); default: the manifest's\n"
    "                   tokenizer_path (a relative path is tried from the current\n"
    "                   directory, then from the shard's)\n"
    "  --threads N      threads in all (default: one per CPU) computing the document length\n"
    "                   statistics, a piece of the documents each; the figures are the same\n"
    "                   for any N\n"
    "\n"
    "examples:\n"
    "  ingot inspect out/corpus_text_document\n"
    "  ingot inspect out/corpus_text_document --json\n"
    "  ingot inspect out/web --threads 4\n"
    "  ingot inspect out/corpus_text_document --doc 0\n"
    "  ingot inspect out/corpus_text_document --doc 12 --decode --tokenizer data/gpt2\n"
    "\n"
    "Frame shards (from 'ingot preprocess video'):\n"
    "  ingot inspect OUT [--json]            clips, frames, buckets, bytes\n"
    "  ingot inspect OUT --clip N [--json]   its source, size, source frames, timestamps, caption\n"
    "      [--raw FILE]                      its frames as raw RGB24 (T x H x W x 3 bytes)\n"
    "      [--png SHEET.png]                 a contact sheet of its frames with the caption\n"
    "      [--force]                         replace --raw/--png files that exist (never what is\n"
    "                                        not a regular file: a device, a pipe, a directory)\n"
    "\n"
    "Latent shards (from 'ingot preprocess latents'):\n"
    "  ingot inspect OUT [--json]            clips, latent shapes, dtype, the VAE, captions\n"
    "  ingot inspect OUT --clip N [--json]   its latent and pixel shape, source clip, label...\n"
    "      [--raw FILE] [--force]            its mean | logvar as float32 [F, h, w, 2C]\n"
    "\n"
    "Caption-feature shards (from 'ingot preprocess captions'):\n"
    "  ingot inspect OUT [--json]            clips, captions, tokens, the encoder, bytes\n"
    "  ingot inspect OUT --clip K [--json]   its caption's tokens L (0: none, the null caption)\n"
    "      [--features FILE]                 its features as raw float32 [L, D] (little-endian,\n"
    "                                        no header; bf16 shards widened), --force to replace\n";

typedef struct doc_stats {
    uint64_t min, max;
    double mean;
} doc_stats;

/* Document lengths are summed over pieces of STATS_GRAIN documents on the context's pool; each
 * piece keeps its own minimum, maximum and total, combined in order: the same for any thread
 * count. */
#define STATS_GRAIN ((size_t)1 << 16)

typedef struct stats_piece {
    uint64_t min, max, total;
} stats_piece;

typedef struct stats_job {
    const ig_shard *s;
    stats_piece *piece;
} stats_job;

static void stats_range(void *arg, size_t begin, size_t end, int worker) {
    (void)worker;
    const stats_job *j = arg;
    stats_piece p = {UINT64_MAX, 0, 0};
    for (size_t d = begin; d < end; d++) {
        uint64_t len = 0;
        uint64_t a = (uint64_t)ig_shard_doc_index(j->s, d);
        uint64_t b = (uint64_t)ig_shard_doc_index(j->s, d + 1);
        for (uint64_t i = a; i < b; i++) len += (uint64_t)ig_shard_seq_length(j->s, i);
        if (len < p.min) p.min = len;
        if (len > p.max) p.max = len;
        p.total += len;
    }
    j->piece[begin / STATS_GRAIN] = p;
}

static doc_stats document_stats(ig_ctx *ctx, const ig_shard *s) {
    doc_stats st = {0, 0, 0.0};
    uint64_t docs = ig_shard_documents(s), total = 0;
    if (docs == 0) return st;
    size_t pieces = (size_t)((docs + STATS_GRAIN - 1) / STATS_GRAIN);
    stats_job j = {s, calloc(pieces, sizeof(stats_piece))};
    if (!j.piece) { /* no room for the pieces: one thread */
        stats_piece one[1];
        j.piece = one;
        stats_range(&j, 0, (size_t)docs, 0);
        return (doc_stats){one[0].min, one[0].max, (double)one[0].total / (double)docs};
    }
    ig_parallel_range(ctx, (size_t)docs, STATS_GRAIN, stats_range, &j);
    st.min = UINT64_MAX;
    for (size_t k = 0; k < pieces; k++) {
        if (j.piece[k].min < st.min) st.min = j.piece[k].min;
        if (j.piece[k].max > st.max) st.max = j.piece[k].max;
        total += j.piece[k].total;
    }
    free(j.piece);
    st.mean = (double)total / (double)docs;
    return st;
}

static uint64_t file_size(const char *prefix, const char *ext) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s", prefix, ext);
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

static void print_summary_text(ig_ctx *ctx, const ig_shard *s) {
    const char *p = ig_shard_prefix(s);
    const ig_manifest *m = ig_shard_manifest(s);
    doc_stats ds = document_stats(ctx, s);
    char b1[32], b2[32];
    printf("shard:       %s\n", p);
    printf("documents:   %" PRIu64 "\n", ig_shard_documents(s));
    printf("sequences:   %" PRIu64 "\n", ig_shard_sequences(s));
    printf("tokens:      %" PRIu64 "\n", ig_shard_tokens(s));
    printf("dtype:       %s (code %d)\n", ig_dtype_name(ig_shard_dtype(s)), (int)ig_shard_dtype(s));
    printf("files:       %s.bin %s, %s.idx %s\n", p,
           ig_format_bytes((double)ig_shard_bin_bytes(s), b1, sizeof b1), p,
           ig_format_bytes((double)file_size(p, ".idx"), b2, sizeof b2));
    if (m) {
        char hex[17];
        ig_hash64_hex(m->tokenizer_hash, hex);
        printf("tokenizer:   %s (hash %s, vocab %" PRIu64 ", eod %" PRId64 ")\n",
               m->tokenizer[0] ? m->tokenizer : "unknown", hex, m->vocab_size, m->eod_id);
        printf("tokenizer path: %s\n", m->tokenizer_path[0] ? m->tokenizer_path : "(none)");
        printf("made by:     %s from %zu source%s\n", m->tool_version, m->n_sources,
               m->n_sources == 1 ? "" : "s");
    } else {
        printf("tokenizer:   unknown (no manifest %s.json)\n", p);
    }
    printf("doc length:  min %" PRIu64 ", mean %.2f, max %" PRIu64 " tokens\n", ds.min, ds.mean,
           ds.max);
}

static int print_json(json_t *o) {
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!text) return ig_cmd_failf("out of memory");
    printf("%s\n", text);
    free(text);
    return IG_EXIT_OK;
}

static json_t *summary_json(ig_ctx *ctx, const ig_shard *s) {
    const char *p = ig_shard_prefix(s);
    const ig_manifest *m = ig_shard_manifest(s);
    doc_stats ds = document_stats(ctx, s);
    json_t *o = json_object();
    json_object_set_new(o, "prefix", json_string(p));
    json_object_set_new(o, "documents", json_integer((json_int_t)ig_shard_documents(s)));
    json_object_set_new(o, "sequences", json_integer((json_int_t)ig_shard_sequences(s)));
    json_object_set_new(o, "tokens", json_integer((json_int_t)ig_shard_tokens(s)));
    json_object_set_new(o, "dtype", json_string(ig_dtype_name(ig_shard_dtype(s))));
    json_object_set_new(o, "dtype_code", json_integer((json_int_t)ig_shard_dtype(s)));
    json_object_set_new(o, "bin_bytes", json_integer((json_int_t)ig_shard_bin_bytes(s)));
    json_object_set_new(o, "idx_bytes", json_integer((json_int_t)file_size(p, ".idx")));
    if (m) {
        char hex[17];
        ig_hash64_hex(m->tokenizer_hash, hex);
        json_t *t = json_object();
        json_object_set_new(t, "name", json_string(m->tokenizer));
        json_object_set_new(t, "hash", json_string(hex));
        json_object_set_new(t, "path", json_string(m->tokenizer_path));
        json_object_set_new(t, "vocab_size", json_integer((json_int_t)m->vocab_size));
        json_object_set_new(t, "eod_id", json_integer((json_int_t)m->eod_id));
        json_object_set_new(o, "tokenizer", t);
        json_object_set_new(o, "tool_version", json_string(m->tool_version));
    } else {
        json_object_set_new(o, "tokenizer", json_null());
    }
    json_t *dl = json_object();
    json_object_set_new(dl, "min", json_integer((json_int_t)ds.min));
    json_object_set_new(dl, "mean", json_real(ds.mean));
    json_object_set_new(dl, "max", json_integer((json_int_t)ds.max));
    json_object_set_new(o, "document_length", dl);
    return o;
}

/* The tokenizer path for --decode: --tokenizer, else the manifest's (relative paths are tried
 * from the current directory, then from the shard's directory). Returns a malloc'd path or NULL
 * with a message printed. */
static char *decode_tokenizer_path(const ig_shard *s, const char *given) {
    if (given) return strdup(given);
    const ig_manifest *m = ig_shard_manifest(s);
    if (!m || !m->tokenizer_path[0]) {
        ig_cmd_failf("%s: the manifest records no tokenizer path; pass --tokenizer",
                     ig_shard_prefix(s));
        return NULL;
    }
    struct stat sb;
    if (m->tokenizer_path[0] == '/' || stat(m->tokenizer_path, &sb) == 0)
        return strdup(m->tokenizer_path);
    char *copy = strdup(ig_shard_prefix(s)), *out = NULL;
    if (copy && asprintf(&out, "%s/%s", dirname(copy), m->tokenizer_path) < 0) out = NULL;
    free(copy);
    return out;
}

static int print_document(const ig_command *cmd, ig_ctx *ctx, const ig_shard *s, uint64_t doc,
                          int decode, const char *tok_path, int as_json) {
    (void)cmd;
    if (doc >= ig_shard_documents(s))
        return ig_cmd_failf("%s: document %" PRIu64 " does not exist (the shard has %" PRIu64
                            " documents, numbered from 0)",
                            ig_shard_prefix(s), doc, ig_shard_documents(s));
    uint64_t a = (uint64_t)ig_shard_doc_index(s, doc), b = (uint64_t)ig_shard_doc_index(s, doc + 1);
    ig_err err = {0};
    ig_tokenizer *tok = NULL;
    if (decode) {
        char *path = decode_tokenizer_path(s, tok_path);
        if (!path) return IG_EXIT_FAIL;
        ig_tokenizer_opts to = ig_tokenizer_opts_default();
        const ig_manifest *m = ig_shard_manifest(s);
        size_t pl = strlen(path);
        if (m && m->tokenizer[0] && pl > 9 && strcmp(path + pl - 9, ".tiktoken") == 0)
            to.tiktoken_encoding = m->tokenizer;
        ig_status st = ig_tokenizer_load(&tok, ctx, path, &to, &err);
        free(path);
        if (st != IG_OK) return ig_cmd_fail(&err);
        if (m && m->tokenizer_hash && ig_tokenizer_hash(tok) != m->tokenizer_hash)
            ig_warn(ctx,
                    "the tokenizer differs from the one recorded in %s.json (%s); the text "
                    "may be wrong",
                    ig_shard_prefix(s), m->tokenizer);
    }
    json_t *seqs = as_json && !decode ? json_array() : NULL;
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;
    int32_t *ids = NULL;
    int rc = IG_EXIT_OK;
    for (uint64_t i = a; i < b && rc == IG_EXIT_OK; i++) {
        uint64_t n = (uint64_t)ig_shard_seq_length(s, i);
        int32_t *grown = realloc(ids, (n ? n : 1) * sizeof *ids);
        if (!grown) {
            rc = ig_cmd_failf("out of memory");
            break;
        }
        ids = grown;
        if (ig_shard_read_tokens(s, i, 0, n, ids, &err) != IG_OK) {
            rc = ig_cmd_fail(&err);
            break;
        }
        if (decode) {
            if (ig_tokenizer_decode(tok, ids, n, &text, &text_len, &text_cap, &err) != IG_OK)
                rc = ig_cmd_fail(&err);
        } else if (seqs) {
            json_t *arr = json_array();
            for (uint64_t k = 0; k < n; k++) json_array_append_new(arr, json_integer(ids[k]));
            json_array_append_new(seqs, arr);
        } else {
            for (uint64_t k = 0; k < n; k++) printf(k ? " %" PRId32 : "%" PRId32, ids[k]);
            printf("\n");
        }
    }
    if (rc == IG_EXIT_OK && as_json) {
        json_t *o = json_object();
        json_object_set_new(o, "document", json_integer((json_int_t)doc));
        if (decode)
            json_object_set_new(o, "text", json_stringn(text ? text : "", text_len));
        else
            json_object_set_new(o, "sequences", seqs), seqs = NULL;
        rc = print_json(o);
    } else if (rc == IG_EXIT_OK && decode) {
        if (text_len) fwrite(text, 1, text_len, stdout);
        if (!text_len || text[text_len - 1] != '\n') putchar('\n');
    }
    json_decref(seqs);
    free(ids);
    free(text);
    ig_tokenizer_free(tok);
    return rc;
}

int ig_cmd_inspect(const ig_command *cmd, int argc, char **argv) {
    if (ig_cmd_video_target(argc, argv)) return ig_cmd_inspect_video(cmd, argc, argv);
    if (ig_cmd_latent_target(argc, argv)) return ig_cmd_inspect_latents(cmd, argc, argv);
    if (ig_cmd_features_target(argc, argv)) return ig_cmd_inspect_features(cmd, argc, argv);
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},          {"doc", required_argument, NULL, 'd'},
        {"decode", no_argument, NULL, 'D'},        {"tokenizer", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},         {"verbose", no_argument, NULL, 'v'},
        {"threads", required_argument, NULL, 'T'}, {NULL, 0, NULL, 0},
    };
    int as_json = 0, decode = 0, have_doc = 0;
    uint64_t doc = 0;
    const char *tok_path = NULL;
    ig_common_flags flags = {.threads = 0};
    opterr = 0;
    optind = 1;
    int c;
    /* ":" reports a missing value as ':'; GNU getopt lets options follow the PREFIX */
    while ((c = ig_cmd_getopt(argc, argv, ":", longopts)) != -1) {
        switch (c) {
        case 'j':
            as_json = 1;
            break;
        case 'd':
            if (!ig_cmd_parse_u64(cmd, "--doc", optarg, &doc)) return IG_EXIT_USAGE;
            have_doc = 1;
            break;
        case 'D':
            decode = 1;
            break;
        case 't':
            tok_path = optarg;
            break;
        case 'q':
            flags.quiet = 1;
            break;
        case 'v':
            flags.verbose = 1;
            break;
        case 'T':
            if (!ig_cmd_parse_threads(cmd, optarg, &flags)) return IG_EXIT_USAGE;
            break;
        default:
            return ig_cmd_bad_option(cmd, c, argv);
        }
    }
    if (argc - optind > 1)
        return ig_cmd_usage_error(cmd, "expected one PREFIX, got '%s' and '%s'", argv[optind],
                                  argv[optind + 1]);
    const char *prefix = optind < argc ? argv[optind] : NULL;
    if (!prefix) return ig_cmd_usage_error(cmd, "expected a shard PREFIX");
    if (decode && !have_doc) return ig_cmd_usage_error(cmd, "--decode needs --doc N");
    if (tok_path && !decode) return ig_cmd_usage_error(cmd, "--tokenizer needs --decode");

    ig_err err = {0};
    ig_ctx *ctx = NULL;
    if (ig_cmd_ctx(&ctx, &flags, &err) != IG_OK) return ig_cmd_fail(&err);
    /* a shard list (PREFIX.shards.json) shows every shard; --doc N counts across them */
    char **list = NULL;
    size_t n_list = 0;
    int rc = IG_EXIT_OK;
    if (ig_shard_list_expand(prefix, &list, &n_list, &err) != IG_OK) rc = ig_cmd_fail(&err);
    json_t *all = as_json && n_list > 1 ? json_array() : NULL;
    for (size_t k = 0; rc == IG_EXIT_OK && k < n_list; k++) {
        ig_shard *s = NULL;
        if (ig_shard_open(&s, ctx, list[k], &err) != IG_OK) {
            rc = ig_cmd_fail(&err);
        } else if (have_doc) {
            uint64_t docs = ig_shard_documents(s);
            if (doc < docs || k + 1 == n_list) {
                rc = print_document(cmd, ctx, s, doc, decode, tok_path, as_json);
                k = n_list; /* printed (or out of range in the last shard) */
            } else {
                doc -= docs;
            }
        } else if (all) {
            json_array_append_new(all, summary_json(ctx, s));
        } else if (as_json) {
            rc = print_json(summary_json(ctx, s));
        } else {
            if (k) printf("\n");
            print_summary_text(ctx, s);
        }
        ig_shard_close(s);
    }
    if (all && rc == IG_EXIT_OK)
        rc = print_json(all);
    else
        json_decref(all);
    ig_shard_list_free(list, n_list);
    ig_ctx_free(ctx);
    return rc;
}
