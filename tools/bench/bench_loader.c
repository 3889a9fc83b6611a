/* bench_loader.c - loader throughput against memcpy bandwidth measured in the same run.
 *
 * Writes a synthetic token shard (u16, random document lengths; ~256 MB by default) once, opens
 * it (mmap), and drains a prefetching loader of micro-batches [B, seq_len+1] int32 from it for a
 * few seconds. The figure is the loader's output rate in bytes of int32 tokens per second over
 * the memcpy rate of one thread copying a buffer larger than the caches (bytes copied per second),
 * both measured now (these machines are noisy). Goal: >= 0.5.
 *
 * usage: bench_loader [--dir D] [--size-mb 256] [--seq-len 2048] [--micro-batch 8]
 *                     [--threads 2] [--depth 8] [--seconds 3] [--source gpt|windows]
 * The shard is kept in D (default $TMPDIR or /tmp) as bench_loader_<size>mb and reused.
 * --source gpt (default) reads through the GPT sample index (ig_data_stream: Megatron's document,
 * sample and shuffle indices, documents packed across sample boundaries); --source windows reads
 * shuffled fixed windows of the .bin (no index: the upper bound of the copy itself).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dataset/dataset.h"
#include "loader/loader.h"

typedef struct bench_opts {
    const char *dir;
    uint64_t size_mb;
    uint32_t seq_len;
    uint32_t micro_batch;
    int threads;
    int depth;
    double seconds;
    const char *source;
} bench_opts;

static uint64_t rng_next(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Writes PREFIX (u16 tokens, documents of 50 .. 8000 tokens) unless it is already there. */
static ig_status make_shard(ig_ctx *ctx, const char *prefix, uint64_t tokens, ig_err *err) {
    ig_shard *s = NULL;
    if (ig_shard_open(&s, ctx, prefix, NULL) == IG_OK) {
        uint64_t have = ig_shard_tokens(s);
        ig_shard_close(s);
        if (have >= tokens) return IG_OK;
    }
    fprintf(stderr, "bench_loader: writing %s (%llu tokens)\n", prefix, (unsigned long long)tokens);
    ig_shard_writer_opts wo = ig_shard_writer_opts_default();
    wo.dtype = IG_DTYPE_U16;
    wo.overwrite = 1;
    ig_shard_writer *w = NULL;
    ig_status st = ig_shard_writer_create(&w, ctx, prefix, &wo, err);
    if (st != IG_OK) return st;
    int32_t *doc = malloc(8000 * sizeof *doc);
    if (!doc) {
        ig_shard_writer_abort(w);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    uint64_t x = 12345, written = 0;
    while (written < tokens && st == IG_OK) {
        size_t n = 50 + rng_next(&x) % 7951;
        for (size_t i = 0; i < n; i++) doc[i] = (int32_t)(rng_next(&x) % 50257);
        st = ig_shard_writer_add_document(w, doc, n, err);
        written += n;
    }
    free(doc);
    if (st != IG_OK) {
        ig_shard_writer_abort(w);
        return st;
    }
    return ig_shard_writer_finish(w, NULL, err);
}

/* ---- the "windows" source: sample i is the token window [p*L, p*L + L + 1) of the whole .bin,
 * p = a seeded permutation of i (no index needed; a stand-in for the GPT index) ---- */

typedef struct windows {
    const uint16_t *bin;
    uint64_t n;
    uint32_t seq_len;
    uint64_t *perm;
} windows;

static uint64_t win_num(void *self) {
    return ((windows *)self)->n;
}

static ig_status win_get(void *self, uint64_t i, int32_t *out, ig_err *err) {
    (void)err;
    const windows *w = self;
    const uint32_t n = w->seq_len + 1; /* a local bound lets the compiler vectorise */
    const uint16_t *restrict p = w->bin + w->perm[i] * w->seq_len;
    int32_t *restrict o = out;
    for (uint32_t t = 0; t < n; t++) o[t] = p[t];
    return IG_OK;
}

static void win_free(void *self) {
    windows *w = self;
    free(w->perm);
    free(w);
}

typedef struct win_user {
    ig_shard *shard;
    uint32_t seq_len;
} win_user;

static ig_status win_make(void *user, uint64_t block, ig_sample_source *out, ig_err *err) {
    win_user *u = user;
    windows *w = calloc(1, sizeof *w);
    if (!w) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    w->bin = ig_shard_bin(u->shard);
    w->seq_len = u->seq_len;
    w->n = (ig_shard_tokens(u->shard) - 1) / u->seq_len;
    w->perm = malloc(w->n * sizeof *w->perm);
    if (!w->perm) {
        free(w);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < w->n; i++) w->perm[i] = i;
    uint64_t x = 1234 + block;
    for (uint64_t i = w->n - 1; i > 0; i--) {
        uint64_t j = rng_next(&x) % (i + 1), t = w->perm[i];
        w->perm[i] = w->perm[j];
        w->perm[j] = t;
    }
    *out = (ig_sample_source){.num_samples = win_num,
                              .get = win_get,
                              .free = win_free,
                              .self = w,
                              .seq_len = u->seq_len,
                              .key = 1};
    return IG_OK;
}

/* ---- measurements ---------------------------------------------------------------------------- */

/* Bytes per second memcpy moves between two buffers of `bytes` (best of several passes). */
static double memcpy_rate(size_t bytes, double seconds) {
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a);
        free(b);
        return 0;
    }
    memset(a, 1, bytes);
    memset(b, 2, bytes);
    double best = 0, t_end = ig_now() + seconds;
    while (ig_now() < t_end) {
        double t0 = ig_now();
        memcpy(b, a, bytes);
        double dt = ig_now() - t0;
        if (dt > 0 && bytes / dt > best) best = bytes / dt;
        a[bytes / 2] ^= b[bytes / 3]; /* keep the copies observable */
    }
    volatile char sink = b[bytes - 1];
    (void)sink;
    free(a);
    free(b);
    return best;
}

static int run(const bench_opts *bo) {
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 1;
    if (ig_ctx_create(&ctx, &co, &err) != IG_OK) goto fail;
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/bench_loader_%llumb", bo->dir,
             (unsigned long long)bo->size_mb);
    if (make_shard(ctx, prefix, bo->size_mb * 1000000 / 2, &err) != IG_OK) goto fail;
    ig_shard *shard = NULL;
    if (ig_shard_open(&shard, ctx, prefix, &err) != IG_OK) goto fail;

    /* Warm the page cache: the figure is about the loader, not the disk. */
    {
        const uint8_t *p = ig_shard_bin(shard);
        uint64_t n = ig_shard_bin_bytes(shard), sum = 0;
        for (uint64_t i = 0; i < n; i += 4096) sum += p[i];
        volatile uint64_t sink = sum;
        (void)sink;
    }

    win_user wu = {.shard = shard, .seq_len = bo->seq_len};
    ig_data_stream *ds = NULL;
    ig_loader_opts lo = ig_loader_opts_default();
    lo.make_block = win_make;
    lo.block_user = &wu;
    if (strcmp(bo->source, "gpt") == 0) { /* the real thing: Megatron's GPT index */
        const char *pre[1] = {prefix};
        ig_data_opts dopts = ig_data_opts_default();
        dopts.prefixes = pre;
        dopts.n = 1;
        dopts.seq_len = bo->seq_len;
        dopts.num_samples = ig_shard_tokens(shard) / bo->seq_len;
        double tb = ig_now();
        if (ig_data_stream_open(&ds, ctx, &dopts, &err) != IG_OK) goto fail;
        fprintf(stderr, "bench_loader: GPT index of %llu samples built in %.2f s\n",
                (unsigned long long)ig_data_stream_num_samples(ds), ig_now() - tb);
        lo.make_block = ig_data_stream_make_block;
        lo.block_user = ds;
    }
    lo.micro_batch = bo->micro_batch;
    lo.prefetch_threads = bo->threads;
    lo.prefetch_depth = bo->depth;
    ig_loader *ld = NULL;
    if (ig_loader_create(&ld, ctx, &lo, NULL, &err) != IG_OK) goto fail;
    /* Rounds of memcpy then loader, back to back, so that each ratio compares two figures taken
     * under the same load; the median ratio is reported. */
    enum { ROUNDS = 5 };
    double ratios[ROUNDS], mc_sum = 0, rate_sum = 0, samples_sum = 0;
    uint64_t check = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double mc = memcpy_rate((size_t)256 << 20, 0.4);
        ig_batch b;
        uint64_t batches = 0;
        double t0 = ig_now(), t = t0;
        while (t - t0 < bo->seconds / ROUNDS) {
            if (ig_loader_next(ld, &b, &err) != IG_OK) goto fail;
            for (uint32_t j = 0; j < b.micro_batch; j++)
                check += (uint64_t)b.tokens[(size_t)j * (b.seq_len + 1) + b.seq_len];
            batches++;
            t = ig_now();
        }
        double samples = (double)batches * bo->micro_batch / (t - t0);
        double rate = samples * (bo->seq_len + 1) * sizeof(int32_t);
        ratios[r] = rate / mc;
        mc_sum += mc;
        rate_sum += rate;
        samples_sum += samples;
    }
    ig_loader_free(ld);
    ig_data_stream_close(ds);
    for (int i = 1; i < ROUNDS; i++) /* insertion sort for the median */
        for (int j = i; j > 0 && ratios[j] < ratios[j - 1]; j--) {
            double x = ratios[j];
            ratios[j] = ratios[j - 1];
            ratios[j - 1] = x;
        }
    printf("bench_loader: source=%s seq_len=%u micro_batch=%u threads=%d depth=%d shard=%s "
           "(%.0f MB)\n",
           bo->source, bo->seq_len, bo->micro_batch, bo->threads, bo->depth, prefix,
           ig_shard_bin_bytes(shard) / 1e6);
    printf("  loader : %.0f samples/s, %.2f GB/s of int32 tokens out (%.2f GB/s of u16 read)\n",
           samples_sum / ROUNDS, rate_sum / ROUNDS / 1e9, rate_sum / ROUNDS / 2e9);
    printf("  memcpy : %.2f GB/s (one thread, 256 MiB buffers)\n", mc_sum / ROUNDS / 1e9);
    printf("  ratio  : %.2f median of %d rounds (min %.2f, max %.2f; loader out / memcpy; goal >= "
           "0.5)   [checksum %llu]\n",
           ratios[ROUNDS / 2], ROUNDS, ratios[0], ratios[ROUNDS - 1], (unsigned long long)check);
    ig_shard_close(shard);
    ig_ctx_free(ctx);
    return 0;
fail:
    fprintf(stderr, "bench_loader: error: %s\n", err.msg);
    ig_ctx_free(ctx);
    return 1;
}

int main(int argc, char **argv) {
    const char *tmp = getenv("TMPDIR");
    bench_opts bo = {.dir = tmp && *tmp ? tmp : "/tmp",
                     .size_mb = 256,
                     .seq_len = 2048,
                     .micro_batch = 8,
                     .threads = 2,
                     .depth = 8,
                     .seconds = 3,
                     .source = "gpt"};
    static const struct option longopts[] = {
        {"dir", required_argument, 0, 'd'},     {"size-mb", required_argument, 0, 'm'},
        {"seq-len", required_argument, 0, 'l'}, {"micro-batch", required_argument, 0, 'b'},
        {"threads", required_argument, 0, 't'}, {"depth", required_argument, 0, 'q'},
        {"seconds", required_argument, 0, 's'}, {"source", required_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd':
            bo.dir = optarg;
            break;
        case 'm':
            bo.size_mb = strtoull(optarg, NULL, 10);
            break;
        case 'l':
            bo.seq_len = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'b':
            bo.micro_batch = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 't':
            bo.threads = atoi(optarg);
            break;
        case 'q':
            bo.depth = atoi(optarg);
            break;
        case 's':
            bo.seconds = atof(optarg);
            break;
        case 'S':
            bo.source = optarg;
            break;
        case 'h':
            printf("usage: bench_loader [--dir D] [--size-mb 256] [--seq-len 2048] "
                   "[--micro-batch 8] [--threads 2] [--depth 8] [--seconds 3] "
                   "[--source gpt|windows]\n");
            return 0;
        default:
            return 2;
        }
    }
    if (bo.size_mb < 1 || bo.seq_len < 1 || bo.micro_batch < 1) {
        fprintf(stderr, "bench_loader: --size-mb, --seq-len and --micro-batch must be >= 1\n");
        return 2;
    }
    return run(&bo);
}
