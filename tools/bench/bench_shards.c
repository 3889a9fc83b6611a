/* bench_shards.c - `verify` and `merge` on 2 threads against 1, measured in the same run.
 *
 * The shards are the shared corpora: the five of ../shared/data/text tokenized with GPT-2 into
 * one shard each, then merged into BIG shards of about --shard-mb MB each by repeating them (the
 * same documents: what matters here is bytes). Then, alternating the thread counts run by run:
 *   verify one shard      ig_shard_verify (xxh3 of the .bin on one thread, the token ids checked
 *                         in 1 MiB pieces by the others)
 *   verify the list       ig_shard_list_verify over all of them (several shards at once)
 *   merge                 ig_shard_merge of all of them into one (copies at their offsets, input
 *                         checksums and the index beside them; the output is written, fsync'd
 *                         and renamed in both cases, which the ratio includes)
 * and prints per operation the best and median seconds and GB/s per thread count and the
 * speedup of 2 threads over 1 (median over median). The files are in the page cache (written
 * just before), so this is the CPU and memory side, not the disk's read speed.
 *
 * usage: bench_shards [--data DIR] [--tokenizer T] [--shards N] [--shard-mb M] [--runs R]
 * Lines starting with "RESULT" are for tools/bench/run.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"
#include "preprocess/preprocess.h"

static ig_ctx *make_ctx(int threads) {
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = threads;
    o.log_level = IG_LOG_WARN;
    ig_ctx *ctx = NULL;
    ig_err err = {0};
    if (ig_ctx_create(&ctx, &o, &err) != IG_OK) {
        fprintf(stderr, "bench_shards: %s\n", err.msg);
        exit(1);
    }
    return ctx;
}

static void die(const ig_err *err) {
    fprintf(stderr, "bench_shards: %s\n", err->msg);
    exit(1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef enum { OP_VERIFY_ONE, OP_VERIFY_LIST, OP_MERGE, N_OPS } op;
static const char *const op_names[N_OPS] = {"verify one shard", "verify the list", "merge"};

int main(int argc, char **argv) {
    const char *data = getenv("IG_SHARED_DATA");
    char default_data[4096], default_tok[4096];
    snprintf(default_data, sizeof default_data, "%s/../shared/data", IG_SOURCE_DIR);
    snprintf(default_tok, sizeof default_tok, "%s/data/gpt2", IG_SOURCE_DIR);
    if (!data) data = default_data;
    const char *tok_path = default_tok;
    int n_big = 4, runs = 5;
    double shard_mb = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            tok_path = argv[++i];
        else if (!strcmp(argv[i], "--shards") && i + 1 < argc)
            n_big = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shard-mb") && i + 1 < argc)
            shard_mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_shards [--data DIR] [--tokenizer T] [--shards N] "
                            "[--shard-mb M] [--runs R]\n");
            return 2;
        }
    }
    if (n_big < 2) n_big = 2;
    if (runs < 1) runs = 1;
    char tmpl[] = "/tmp/ingot-bench-shards-XXXXXX";
    char *dir = mkdtemp(tmpl);
    if (!dir) return 1;
    ig_err err = {0};
    ig_ctx *one = make_ctx(1), *two = make_ctx(2);
    ig_tokenizer *tok = NULL;
    if (ig_tokenizer_load(&tok, two, tok_path, NULL, &err) != IG_OK) die(&err);

    /* the corpora, one shard each */
    const char *names[] = {"tinyshakespeare", "udhr_multilingual", "c_code", "emoji_test",
                           "edge_cases"};
    char corpus[5][4200];
    const char *corpus_p[5];
    uint64_t corpus_bytes = 0;
    for (int c = 0; c < 5; c++) {
        char in[4200];
        snprintf(in, sizeof in, "%s/text/%s.jsonl", data, names[c]);
        snprintf(corpus[c], sizeof corpus[c], "%s/%s", dir, names[c]);
        corpus_p[c] = corpus[c];
        ig_preprocess_opts o = ig_preprocess_opts_default();
        const char *inputs[] = {in};
        o.inputs = inputs;
        o.n_inputs = 1;
        o.output_prefix = corpus[c];
        o.tokenizer = tok;
        o.append_eod = 1;
        o.threads = 2;
        if (ig_preprocess_text(two, &o, NULL, &err) != IG_OK) die(&err);
        ig_shard *s = NULL;
        if (ig_shard_open(&s, one, corpus[c], &err) != IG_OK) die(&err);
        corpus_bytes += ig_shard_bin_bytes(s);
        ig_shard_close(s);
    }
    /* BIG shards of about shard_mb MB: the corpora repeated */
    size_t reps = (size_t)(shard_mb * 1e6 / (double)corpus_bytes) + 1;
    const char **rep = calloc(reps * 5, sizeof *rep);
    char(*big)[4200] = calloc((size_t)n_big, sizeof *big);
    const char **big_p = calloc((size_t)n_big, sizeof *big_p);
    if (!rep || !big || !big_p) return 1;
    for (size_t r = 0; r < reps * 5; r++) rep[r] = corpus_p[r % 5];
    ig_merge_opts mo = {.overwrite = 1};
    uint64_t total = 0;
    for (int k = 0; k < n_big; k++) {
        snprintf(big[k], sizeof big[k], "%s/big_%05d", dir, k);
        big_p[k] = big[k];
        if (ig_shard_merge(two, rep, reps * 5, big[k], &mo, &err) != IG_OK) die(&err);
        ig_shard *s = NULL;
        if (ig_shard_open(&s, one, big[k], &err) != IG_OK) die(&err);
        total += ig_shard_bin_bytes(s);
        ig_shard_close(s);
    }
    char list[4200], out[4200];
    snprintf(list, sizeof list, "%s/big", dir);
    snprintf(out, sizeof out, "%s/merged", dir);
    if (ig_shard_list_write(list, big_p, (size_t)n_big, 1, &err) != IG_OK) die(&err);
    printf("shards: %d of %.1f MB (the five corpora, GPT-2 ids, %zu times each), %.1f MB in all\n",
           n_big, (double)total / n_big / 1e6, reps, (double)total / 1e6);

    double *secs[N_OPS][3];
    for (int o = 0; o < N_OPS; o++)
        for (int t = 1; t <= 2; t++) secs[o][t] = calloc((size_t)runs, sizeof(double));
    for (int r = 0; r < runs; r++)
        for (int i = 0; i < 2; i++) {
            int t = (r + i) % 2 + 1; /* alternate which thread count goes first */
            ig_ctx *ctx = t == 1 ? one : two;
            for (int o = 0; o < N_OPS; o++) {
                size_t n = 0;
                double t0 = ig_now();
                ig_status st = o == OP_VERIFY_ONE ? ig_shard_verify(ctx, big[0], &err)
                               : o == OP_VERIFY_LIST
                                   ? ig_shard_list_verify(ctx, list, &n, &err)
                                   : ig_shard_merge(ctx, big_p, (size_t)n_big, out, &mo, &err);
                if (st != IG_OK) die(&err);
                secs[o][t][r] = ig_now() - t0;
            }
        }
    for (int o = 0; o < N_OPS; o++) {
        double bytes = o == OP_VERIFY_ONE ? (double)total / n_big : (double)total;
        double med[3] = {0};
        for (int t = 1; t <= 2; t++) {
            qsort(secs[o][t], (size_t)runs, sizeof(double), cmp_double);
            med[t] = secs[o][t][runs / 2];
            printf("%-17s %d thread%s: best %.3f s, median %.3f s (%.2f GB/s)\n", op_names[o], t,
                   t > 1 ? "s" : " ", secs[o][t][0], med[t], bytes / med[t] / 1e9);
        }
        printf("%-17s speedup of 2 threads over 1: %.2fx (medians), %.2fx (best)\n", op_names[o],
               med[1] / med[2], secs[o][1][0] / secs[o][2][0]);
        const char *key = o == OP_VERIFY_ONE    ? "verify_one"
                          : o == OP_VERIFY_LIST ? "verify_list"
                                                : "merge";
        printf("RESULT %s_speedup_t2=%.3f\n", key, med[1] / med[2]);
        for (int t = 1; t <= 2; t++) free(secs[o][t]);
    }
    free(rep);
    free(big);
    free(big_p);
    ig_tokenizer_free(tok);
    ig_ctx_free(one);
    ig_ctx_free(two);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "bench_shards: could not remove %s\n", dir);
    return 0;
}
