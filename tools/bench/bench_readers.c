/* bench_readers.c - the ceilings around the tokenizing threads of `preprocess text`: how fast one
 * input is split into records from a .jsonl, and decompressed and split from a .jsonl.zst
 * (nothing else), how fast the writer appends already-tokenized documents, and how fast one
 * thread does the whole run; each ceiling over that rate is the thread count at which the stage
 * saturates. One input read at a time, then R inputs at once (--readers R), each its own file (or
 * byte range of a large .jsonl; a range reads as fast as a file), measured here with R threads
 * at once and projected as R times one. Also the end-to-end run with 1 and 2 threads (and 2
 * threads reading 2 ranges at once).
 * All figures come from one run, in MB/s of .jsonl bytes.
 *
 * usage: bench_readers [--data DIR] [--repeat K] [--readers R] [--runs N]
 *   --data DIR     the shared data (default $IG_SHARED_DATA, else tests/data is too small: skip)
 *   --repeat K     the input is the 5 shared .jsonl corpora concatenated K times (default 8)
 *   --readers R    readers for "after" (default 2: the cores of the machine this was tuned on)
 *   --runs N       timed runs of each measure; the best is reported (default 3)
 * Lines starting with "RESULT" are for tools/bench/run.sh. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "preprocess/preprocess.h"

static const char *const CORPORA[] = {"c_code", "edge_cases", "emoji_test", "tinyshakespeare",
                                      "udhr_multilingual"};

typedef struct read_job {
    const char *path;
    ig_input_kind kind;
    uint64_t bytes; /* record bytes read */
    int ok;
} read_job;

static void *read_all(void *arg) {
    read_job *j = arg;
    ig_record_reader *r = NULL;
    ig_err err = {0};
    j->ok = 0;
    j->bytes = 0;
    if (ig_record_reader_open(&r, NULL, j->path, j->kind, &err) != IG_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    ig_record rec;
    int has = 0;
    while (ig_record_reader_next(r, &rec, &has, &err) == IG_OK && has) j->bytes += rec.len + 1;
    j->ok = err.msg[0] == 0;
    ig_record_reader_close(r);
    return NULL;
}

/* R readers at once, each over its own file: the best aggregate MB/s of runs, counting
 * plain_bytes (the .jsonl size) per file. */
static double readers_mbps(char **paths, int n, ig_input_kind kind, uint64_t plain_bytes,
                           int runs) {
    double best = 1e30;
    for (int run = 0; run < runs; run++) {
        pthread_t th[64];
        read_job jobs[64];
        double t0 = ig_now();
        for (int i = 0; i < n; i++) {
            jobs[i] = (read_job){.path = paths[i], .kind = kind};
            if (pthread_create(&th[i], NULL, read_all, &jobs[i]) != 0) return 0;
        }
        for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
        double dt = ig_now() - t0;
        for (int i = 0; i < n; i++)
            if (!jobs[i].ok) return 0;
        if (dt < best) best = dt;
    }
    return (double)plain_bytes * n / 1e6 / best;
}

/* The writer alone: n_docs documents of the run's mean length appended to a shard, with the
 * commit (checksums, fsync) and, in *append_mbps, without it. */
static double writer_mbps(ig_ctx *ctx, const char *prefix, uint64_t n_docs, uint64_t tokens,
                          uint64_t plain_bytes, int runs, double *append_mbps) {
    size_t per = n_docs ? (size_t)(tokens / n_docs) : 1;
    int32_t *ids = malloc((per + 1) * sizeof *ids);
    if (!ids) return 0;
    for (size_t i = 0; i <= per; i++) ids[i] = (int32_t)((i * 7919) % 50000);
    double best = 1e30, best_add = 1e30;
    for (int run = 0; run < runs; run++) {
        ig_shard_writer *w = NULL;
        ig_err err = {0};
        ig_shard_writer_opts wo = ig_shard_writer_opts_default();
        wo.dtype = IG_DTYPE_U16;
        wo.overwrite = 1;
        double t0 = ig_now();
        if (ig_shard_writer_create(&w, ctx, prefix, &wo, &err) != IG_OK) break;
        for (uint64_t d = 0; d < n_docs; d++)
            if (ig_shard_writer_add_document(w, ids, per, &err) != IG_OK) break;
        double t_add = ig_now() - t0;
        if (ig_shard_writer_finish(w, NULL, &err) != IG_OK) break;
        double dt = ig_now() - t0;
        if (dt < best) best = dt;
        if (t_add < best_add) best_add = t_add;
    }
    free(ids);
    *append_mbps = best_add < 1e30 ? (double)plain_bytes / 1e6 / best_add : 0;
    return best < 1e30 ? (double)plain_bytes / 1e6 / best : 0;
}

/* The reference for the writer: the same number of bytes as its shard (the .bin's u16 tokens and
 * the .idx's 12 bytes per document) written with write() in 1 MiB blocks to a file beside it, as
 * MB/s of plain_bytes like the writer's figure; *sync_mbps with an fsync at the end, like its
 * commit. The writer cannot beat the file system: its figure over this one is its efficiency. */
static double raw_write_mbps(const char *path, uint64_t bytes, uint64_t plain_bytes, int runs,
                             double *sync_mbps) {
    size_t block = (size_t)1 << 20;
    char *buf = malloc(block);
    if (!buf) return 0;
    memset(buf, 0x2a, block);
    double best = 1e30, best_sync = 1e30;
    for (int run = 0; run < runs; run++) {
        FILE *f = fopen(path, "wb");
        if (!f) break;
        int fd = fileno(f), ok = 1;
        double t0 = ig_now();
        for (uint64_t done = 0; ok && done < bytes;) {
            size_t k = bytes - done < block ? (size_t)(bytes - done) : block;
            ok = write(fd, buf, k) == (ssize_t)k;
            done += k;
        }
        double t_write = ig_now() - t0;
        ok = ok && fsync(fd) == 0;
        double dt = ig_now() - t0;
        fclose(f);
        unlink(path);
        if (!ok) break;
        if (t_write < best) best = t_write;
        if (dt < best_sync) best_sync = dt;
    }
    free(buf);
    *sync_mbps = best_sync < 1e30 ? (double)plain_bytes / 1e6 / best_sync : 0;
    return best < 1e30 ? (double)plain_bytes / 1e6 / best : 0;
}

static int preprocess(ig_ctx *ctx, const ig_tokenizer *tok, const char *in, const char *out,
                      int threads, int readers, ig_preprocess_stats *st) {
    ig_preprocess_opts o = ig_preprocess_opts_default();
    o.inputs = &in;
    o.n_inputs = 1;
    o.output_prefix = out;
    o.tokenizer = tok;
    o.append_eod = 1;
    o.threads = threads;
    o.readers = readers;
    o.overwrite = 1;
    ig_err err = {0};
    memset(st, 0, sizeof *st);
    if (ig_preprocess_text(ctx, &o, st, &err) != IG_OK) {
        fprintf(stderr, "bench_readers: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static double best_run_mbps(ig_ctx *ctx, const ig_tokenizer *tok, const char *in, const char *out,
                            int threads, int readers, int runs, ig_preprocess_stats *keep) {
    double best = 0;
    for (int r = 0; r < runs; r++) {
        ig_preprocess_stats st;
        if (preprocess(ctx, tok, in, out, threads, readers, &st) != 0) return 0;
        double mbps = (double)st.bytes_in / 1e6 / st.seconds;
        if (mbps > best) best = mbps;
        if (keep && r == 0)
            *keep = st;
        else
            ig_preprocess_stats_clear(&st);
    }
    return best;
}

int main(int argc, char **argv) {
    const char *data = getenv("IG_SHARED_DATA");
    int repeat = 8, readers = 2, runs = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--readers") && i + 1 < argc)
            readers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_readers [--data DIR] [--repeat K] [--readers R] "
                            "[--runs N]\n");
            return 2;
        }
    }
    if (readers < 1 || readers > 64 || repeat < 1 || runs < 1) return 2;
    if (!data || !*data) {
        printf("bench_readers: skipped: no shared corpora (set IG_SHARED_DATA)\n");
        return 0;
    }
    char dir[] = "/tmp/ingot-bench-readers-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    /* readers copies of the corpus (.jsonl and .jsonl.zst), so that R readers read R files */
    char *jsonl[64], *zst[64];
    uint64_t plain = 0;
    for (int c = 0; c < readers; c++) {
        char path[512], cmd[1400];
        snprintf(path, sizeof path, "%s/corpus%d.jsonl", dir, c);
        jsonl[c] = strdup(path);
        snprintf(path, sizeof path, "%s/corpus%d.jsonl.zst", dir, c);
        zst[c] = strdup(path);
        if (c == 0) {
            FILE *out = fopen(jsonl[0], "wb");
            if (!out) return 1;
            for (int k = 0; k < repeat; k++)
                for (size_t i = 0; i < sizeof CORPORA / sizeof *CORPORA; i++) {
                    char in[512], buf[1 << 16];
                    snprintf(in, sizeof in, "%s/text/%s.jsonl", data, CORPORA[i]);
                    FILE *f = fopen(in, "rb");
                    size_t n;
                    if (!f) return 1;
                    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, out);
                    fclose(f);
                }
            if (fclose(out) != 0) return 1;
            snprintf(cmd, sizeof cmd, "zstd -q -3 -f '%s' -o '%s'", jsonl[0], zst[0]);
        } else {
            snprintf(cmd, sizeof cmd, "cp '%s' '%s' && cp '%s' '%s'", jsonl[0], jsonl[c], zst[0],
                     zst[c]);
        }
        if (system(cmd) != 0) {
            printf("bench_readers: skipped: needs the zstd program\n");
            return 0;
        }
    }
    struct stat sb;
    if (stat(jsonl[0], &sb) != 0) return 1;
    plain = (uint64_t)sb.st_size;

    ig_ctx *ctx = NULL;
    ig_tokenizer *tok = NULL;
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    co.log_level = IG_LOG_ERROR;
    if (ig_ctx_create(&ctx, &co, &err) != IG_OK ||
        ig_tokenizer_load(&tok, ctx, IG_SOURCE_DIR "/data/gpt2", NULL, &err) != IG_OK) {
        fprintf(stderr, "bench_readers: %s\n", err.msg);
        return 1;
    }
    printf("input: %.1f MB of JSON lines (the 5 shared corpora x %d); %d reader(s) after\n",
           (double)plain / 1e6, repeat, readers);

    double rd_jsonl = readers_mbps(jsonl, 1, IG_INPUT_JSONL, plain, runs);
    double rd_zst = readers_mbps(zst, 1, IG_INPUT_JSONL_ZST, plain, runs);
    double rdR_jsonl = readers_mbps(jsonl, readers, IG_INPUT_JSONL, plain, runs);
    double rdR_zst = readers_mbps(zst, readers, IG_INPUT_JSONL_ZST, plain, runs);

    char out[600];
    snprintf(out, sizeof out, "%s/out", dir);
    ig_preprocess_stats st1;
    double w1 = best_run_mbps(ctx, tok, jsonl[0], out, 1, 0, runs, &st1);
    double w2 = best_run_mbps(ctx, tok, jsonl[0], out, 2, 1, runs, NULL);
    double w2r = best_run_mbps(ctx, tok, jsonl[0], out, 2, 2, runs, NULL); /* 2 ranges at once */
    snprintf(out, sizeof out, "%s/writer", dir);
    double wr_add = 0;
    double wr = writer_mbps(ctx, out, st1.docs_written, st1.tokens, plain, runs, &wr_add);
    snprintf(out, sizeof out, "%s/raw", dir);
    double raw_sync = 0;
    double raw =
        raw_write_mbps(out, st1.tokens * 2 + st1.docs_written * 12, plain, runs, &raw_sync);
    ig_preprocess_stats_clear(&st1);

    printf("one input alone:        .jsonl %8.0f MB/s   .jsonl.zst %8.0f MB/s\n", rd_jsonl, rd_zst);
    printf("%d inputs at once:       .jsonl %8.0f MB/s   .jsonl.zst %8.0f MB/s (measured here, "
           "%d files)\n",
           readers, rdR_jsonl, rdR_zst, readers);
    printf("writer alone:           %8.0f MB/s (the run's documents and tokens, with the commit: "
           "checksums, fsync); appending only: %.0f MB/s\n",
           wr, wr_add);
    printf("the same bytes with write() in 1 MiB blocks: %.0f MB/s, with fsync %.0f MB/s: the "
           "writer is %.2f of the file system's rate appending, %.2f with its commit\n",
           raw, raw_sync, raw > 0 ? wr_add / raw : 0, raw_sync > 0 ? wr / raw_sync : 0);
    printf("1 thread (end to end: read, tokenize, write): %.1f MB/s\n", w1);
    printf("2 threads: %.1f MB/s = %.2fx of 1 thread; reading 2 ranges at once: %.1f MB/s (%.2fx; "
           "this machine has %ld cores)\n",
           w2, w2 / w1, w2r, w2r / w1, sysconf(_SC_NPROCESSORS_ONLN));
    printf("saturation (ceiling / one thread's rate):\n");
    printf("  1 input at a time:  .jsonl %.0f threads, .jsonl.zst %.0f threads\n", rd_jsonl / w1,
           rd_zst / w1);
    printf("  %d inputs at once:   .jsonl %.0f threads, .jsonl.zst %.0f threads (%d x one input; "
           "measured at once: %.0f and %.0f)\n",
           readers, readers * rd_jsonl / w1, readers * rd_zst / w1, readers, rdR_jsonl / w1,
           rdR_zst / w1);
    printf("  writer:             %.0f threads with its commit, %.0f appending only\n", wr / w1,
           wr_add / w1);
    printf("RESULT reader_jsonl_mbps=%.0f reader_zst_mbps=%.0f readers=%d readers_jsonl_mbps=%.0f "
           "readers_zst_mbps=%.0f writer_mbps=%.0f writer_append_mbps=%.0f thread_mbps=%.1f "
           "w2_mbps=%.1f w2_r2_mbps=%.1f sat_before_jsonl=%.0f sat_before_zst=%.0f "
           "sat_after_jsonl=%.0f sat_after_zst=%.0f sat_writer=%.0f raw_write_mbps=%.0f "
           "raw_write_sync_mbps=%.0f\n",
           rd_jsonl, rd_zst, readers, rdR_jsonl, rdR_zst, wr, wr_add, w1, w2, w2r, rd_jsonl / w1,
           rd_zst / w1, readers * rd_jsonl / w1, readers * rd_zst / w1, wr / w1, raw, raw_sync);
    ig_tokenizer_free(tok);
    ig_ctx_free(ctx);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
    for (int c = 0; c < readers; c++) {
        free(jsonl[c]);
        free(zst[c]);
    }
    return 0;
}
