/* bench_index.c - how fast ingot builds Megatron-Core's GPT sample index (document, sample and
 * shuffle indices) for 10^8 samples, related to the memcpy bandwidth measured in the same run
 * (DESIGN 7: these machines are noisy, so a figure is a ratio against a physical limit).
 *
 *   bench_index [samples=100000000] [seq_len=2048] [sequences=20000000] [threads=2]
 *
 * The data is synthetic: `sequences` lengths uniform in [1, 2000] (mean ~1000 tokens), so 10^8
 * samples of 2048 tokens need about 11 epochs. Prints each phase's time and the index bytes it
 * wrote per second as a fraction of memcpy bandwidth. The shuffles make one random swap per
 * element, so they are bound by memory latency rather than bandwidth; the ratio shows how far
 * from streaming speed that is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dataset/dataset.h"

/* Best-of-3 memcpy bandwidth over 1 GiB buffers, in bytes/s (counting bytes written). */
static double memcpy_bandwidth(void) {
    const size_t n = (size_t)1 << 30;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = ig_now();
        memcpy(b, a, n);
        double dt = ig_now() - t0;
        if (dt > 0 && n / dt > best) best = n / dt;
        a[r] = b[n - 1 - r]; /* keep the copies observable */
    }
    free(a);
    free(b);
    return best;
}

/* Bandwidth of memset into freshly allocated memory (first touch: page faults and the kernel's
 * zeroing included), in bytes/s. The index arrays are fresh memory too, so this bounds them. */
static double fresh_memset_bandwidth(void) {
    const size_t n = (size_t)1 << 30;
    char *a = malloc(n);
    if (!a) return 0;
    void *(*volatile set)(void *, int, size_t) = memset; /* not elided by the compiler */
    double t0 = ig_now();
    set(a, 3, n);
    double dt = ig_now() - t0;
    free(a);
    return dt > 0 ? n / dt : 0;
}

int main(int argc, char **argv) {
    uint64_t samples = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000000ull;
    uint32_t seq_len = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 2048;
    uint64_t n_seqs = argc > 3 ? strtoull(argv[3], NULL, 10) : 20000000ull;
    int threads = argc > 4 ? atoi(argv[4]) : 2;

    ig_ctx *ctx = NULL;
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = threads;
    if (ig_ctx_create(&ctx, &co, &err) != IG_OK) {
        fprintf(stderr, "bench_index: %s\n", err.msg);
        return 1;
    }
    int32_t *lengths = malloc(n_seqs * sizeof *lengths);
    if (!lengths) {
        fprintf(stderr, "bench_index: out of memory\n");
        return 1;
    }
    /* As ig_dataset_open's array of lengths: huge pages for the random reads of the walk. */
    ig_advise_hugepages(lengths, n_seqs * sizeof *lengths);
    ig_rng_key key = ig_rng_key_make(42, "bench_index lengths");
    for (uint64_t i = 0; i < n_seqs; i++) {
        uint32_t w[4];
        ig_rng_u32x4(key, i, w);
        lengths[i] = (int32_t)(1 + w[0] % 2000);
    }

    double bw = memcpy_bandwidth();
    double fresh = fresh_memset_bandwidth();

    ig_gpt_index_opts o = ig_gpt_index_opts_default();
    o.seq_len = seq_len;
    o.num_samples = samples;
    o.seed = 1234;
    ig_gpt_index *idx = NULL;
    double t0 = ig_now();
    if (ig_gpt_index_build(&idx, ctx, lengths, n_seqs, &o, &err) != IG_OK) {
        fprintf(stderr, "bench_index: %s\n", err.msg);
        return 1;
    }
    double total = ig_now() - t0;
    double t_doc, t_sample, t_shuffle;
    ig_gpt_index_timings(idx, &t_doc, &t_sample, &t_shuffle);
    uint64_t n_doc, rows, n_shuffle;
    ig_gpt_index_document_index(idx, &n_doc);
    ig_gpt_index_sample_index(idx, &rows);
    ig_gpt_index_shuffle_index(idx, &n_shuffle);
    double b_doc = (double)n_doc * 4, b_sample = (double)rows * 16,
           b_shuffle = (double)n_shuffle * 8;

    printf("GPT index: %llu samples requested, %llu built, seq_len %u, %llu sequences, "
           "%llu epochs, separate_final_epoch %d, %d threads\n",
           (unsigned long long)samples, (unsigned long long)ig_gpt_index_num_samples(idx), seq_len,
           (unsigned long long)n_seqs, (unsigned long long)ig_gpt_index_num_epochs(idx),
           ig_gpt_index_separate_final_epoch(idx), threads);
    printf("memcpy bandwidth (same run, warm buffers): %.2f GB/s; memset into fresh memory "
           "(page faults included): %.2f GB/s\n",
           bw / 1e9, fresh / 1e9);
    printf("%-16s %9s %10s %10s %10s %12s\n", "phase", "seconds", "MB", "GB/s", "x memcpy",
           "x fresh mem");
    struct {
        const char *name;
        double t, bytes;
    } rows_out[] = {{"document index", t_doc, b_doc},
                    {"sample index", t_sample, b_sample},
                    {"shuffle index", t_shuffle, b_shuffle},
                    {"total (wall)", total, b_doc + b_sample + b_shuffle}};
    for (size_t k = 0; k < sizeof rows_out / sizeof rows_out[0]; k++) {
        double gbs = rows_out[k].t > 0 ? rows_out[k].bytes / rows_out[k].t / 1e9 : 0;
        printf("%-16s %9.3f %10.1f %10.3f %10.4f %12.4f\n", rows_out[k].name, rows_out[k].t,
               rows_out[k].bytes / 1e6, gbs, bw > 0 ? gbs * 1e9 / bw : 0,
               fresh > 0 ? gbs * 1e9 / fresh : 0);
    }
    printf("samples indexed per second: %.3g (total wall %.2f s for %.3g samples)\n",
           (double)ig_gpt_index_num_samples(idx) / total, total,
           (double)ig_gpt_index_num_samples(idx));
    ig_gpt_index_free(idx);
    free(lengths);
    ig_ctx_free(ctx);
    return 0;
}
