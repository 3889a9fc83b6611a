/* bench_tokenizer.c - single-thread encode throughput of the byte-level BPE tokenizers on the
 * shared corpora, reported against memcpy bandwidth measured in the same run (DESIGN section 7).
 *
 * usage: bench_tokenizer [SHARED_DATA_DIR] [--seconds S] [--only-tokenizer NAME] [--only-corpus
 * NAME] SHARED_DATA_DIR defaults to $IG_SHARED_DATA, else ../shared/data beside the checkout. Each
 * corpus's .txt is encoded as one text, repeatedly for about S seconds (default 1) per tokenizer.
 * Output: one line per tokenizer and corpus, then one JSON line per tokenizer with the overall MB/s
 * for tools/bench/run.sh. Compare with tools/bench/tiktoken_bench.mjs on the same files for the
 * ratio against tiktoken.
 *
 * Two figures per corpus: "cold" encodes each round with a fresh encoder (an empty cache of
 * merged pieces: what a single pass over new text sees, and the honest comparison with
 * tiktoken, which has no such cache); "warm" reuses one encoder, so repeated rounds hit the cache.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preprocess/preprocess.h"

static double memcpy_mbps(size_t size, double seconds) {
    char *a = malloc(size), *b = malloc(size);
    if (!a || !b) return 0;
    memset(a, 1, size);
    memset(b, 2, size);
    double t0 = ig_now(), t;
    size_t bytes = 0;
    do {
        memcpy(b, a, size);
        a[bytes % size] ^= b[(bytes + 7) % size]; /* keep the copies from being elided */
        bytes += size;
    } while ((t = ig_now() - t0) < seconds);
    volatile char sink = b[size / 2];
    (void)sink;
    free(a);
    free(b);
    return (double)bytes / t / 1e6;
}

int main(int argc, char **argv) {
    const char *dir = getenv("IG_SHARED_DATA");
    double seconds = 1.0;
    const char *only_tok = NULL, *only_corpus = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--only-tokenizer") == 0 && i + 1 < argc)
            only_tok = argv[++i];
        else if (strcmp(argv[i], "--only-corpus") == 0 && i + 1 < argc)
            only_corpus = argv[++i];
        else
            dir = argv[i];
    }
    if (!dir) dir = IG_SOURCE_DIR "/../shared/data";
    static const struct {
        const char *name, *file, *encoding;
    } toks[] = {
        {"gpt2 (tokenizer.json)", "gpt2/tokenizer.json", NULL},
        {"cl100k_base", "tiktoken/cl100k_base.tiktoken", NULL},
        {"o200k_base", "tiktoken/o200k_base.tiktoken", NULL},
    };
    static const char *corpora[] = {"tinyshakespeare", "udhr_multilingual", "c_code", "emoji_test",
                                    "edge_cases"};
    char path[4096];
    ig_err err = {0};
    double mc = memcpy_mbps(1 << 20, seconds / 2);
    printf("memcpy (1 MiB blocks, in cache): %.0f MB/s\n", mc);
    printf("%-22s %-18s %10s %10s %12s %14s\n", "tokenizer", "corpus", "cold MB/s", "warm MB/s",
           "Mtokens/s", "memcpy/encode");
    for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
        if (only_tok && !strstr(toks[k].name, only_tok)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, toks[k].file);
        ig_tokenizer_opts o = ig_tokenizer_opts_default();
        o.tiktoken_encoding = toks[k].encoding;
        ig_tokenizer *tok = NULL;
        double t0 = ig_now();
        if (ig_tokenizer_load(&tok, NULL, path, &o, &err) != IG_OK) {
            fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
            return 1;
        }
        double load_s = ig_now() - t0;
        ig_encoder *enc = NULL;
        if (ig_encoder_create(&enc, tok, &err) != IG_OK) return 1;
        double all_bytes = 0, all_secs = 0, all_tokens = 0;
        for (size_t c = 0; c < sizeof corpora / sizeof corpora[0]; c++) {
            if (only_corpus && strcmp(corpora[c], only_corpus) != 0) continue;
            snprintf(path, sizeof path, "%s/text/%s.txt", dir, corpora[c]);
            char *text;
            size_t len;
            if (ig_read_file(path, &text, &len, &err) != IG_OK) {
                fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
                return 1;
            }
            ig_tokens out = {0};
            size_t rounds = 0, tokens = 0;
            double cold_secs = 0;
            do {
                ig_encoder *fresh = NULL;
                if (ig_encoder_create(&fresh, tok, &err) != IG_OK) return 1;
                out.n = 0;
                double c0 = ig_now();
                if (ig_encoder_encode(fresh, text, len, 0, &out, &err) != IG_OK) return 1;
                cold_secs += ig_now() - c0;
                ig_encoder_free(fresh);
                rounds++;
            } while (cold_secs < seconds / 5);
            double cold = (double)len * (double)rounds / cold_secs / 1e6;
            rounds = 0;
            double start = ig_now(), el;
            do {
                out.n = 0;
                if (ig_encoder_encode(enc, text, len, 0, &out, &err) != IG_OK) return 1;
                tokens += out.n;
                rounds++;
            } while ((el = ig_now() - start) < seconds / 5);
            double mbps = (double)len * (double)rounds / el / 1e6;
            printf("%-22s %-18s %10.1f %10.1f %12.2f %14.1f\n", toks[k].name, corpora[c], cold,
                   mbps, (double)tokens / el / 1e6, mc / mbps);
            all_bytes += (double)len * (double)rounds;
            all_secs += el;
            all_tokens += (double)tokens;
            ig_tokens_free(&out);
            free(text);
        }
        double mbps = all_bytes / all_secs / 1e6;
        printf("{\"bench\":\"tokenizer\",\"tokenizer\":\"%s\",\"threads\":1,\"mb_per_s\":%.2f,"
               "\"tokens_per_s\":%.0f,\"memcpy_mb_per_s\":%.0f,\"memcpy_over_encode\":%.1f,"
               "\"load_s\":%.3f}\n",
               ig_tokenizer_name(tok), mbps, all_tokens / all_secs, mc, mc / mbps, load_s);
        ig_encoder_free(enc);
        ig_tokenizer_free(tok);
    }
    return 0;
}
