/* bench_pool.c - the context's thread pool (ig_parallel_range): what a call costs, and how a
 * memory-bound and a compute-bound loop scale with threads. Figures are ratios against references
 * measured in the same run (DESIGN 7):
 *   - overhead: microseconds per call of an empty loop with one chunk per thread, against
 *     starting and joining the same number of threads (what a loop without a pool would pay);
 *   - memory-bound: a triad a = b + s*c over 3 x 64 MiB, speed-up of T threads over one;
 *   - compute-bound: a chain of 512 multiply-adds per element, speed-up of T threads over one.
 *
 *   bench_pool [threads=all cores] [calls=200000]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static void empty_fn(void *arg, size_t b, size_t e, int worker) {
    (void)arg, (void)b, (void)e, (void)worker;
}

static void *empty_thread(void *arg) {
    return arg;
}

typedef struct triad {
    float *a;
    const float *b, *c;
    float s;
} triad;

static void triad_fn(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    triad *t = arg;
    for (size_t i = b; i < e; i++) t->a[i] = t->b[i] + t->s * t->c[i];
}

typedef struct chain {
    float *x;
} chain;

static void chain_fn(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    chain *c = arg;
    for (size_t i = b; i < e; i++) {
        float v = c->x[i];
        for (int k = 0; k < 512; k++) v = v * 0.999f + 0.001f;
        c->x[i] = v;
    }
}

static ig_ctx *make_ctx(int threads) {
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = threads;
    ig_ctx *ctx = NULL;
    ig_err err = {0};
    if (ig_ctx_create(&ctx, &o, &err) != IG_OK) {
        fprintf(stderr, "bench_pool: %s\n", err.msg);
        exit(1);
    }
    return ctx;
}

/* Best of 5 of a loop, in seconds. */
static double best_of(ig_ctx *ctx, size_t n, size_t grain, ig_range_fn fn, void *arg) {
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = ig_now();
        ig_parallel_range(ctx, n, grain, fn, arg);
        double dt = ig_now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

int main(int argc, char **argv) {
    ig_ctx *probe = make_ctx(0);
    int threads = argc > 1 ? atoi(argv[1]) : ig_ctx_threads(probe);
    long calls = argc > 2 ? atol(argv[2]) : 200000;
    ig_ctx_free(probe);
    if (threads < 2) threads = 2;

    ig_ctx *ctx = make_ctx(threads);
    /* overhead: back-to-back calls, one chunk per thread */
    for (long i = 0; i < 1000; i++) ig_parallel_range(ctx, (size_t)threads, 1, empty_fn, NULL);
    double t0 = ig_now();
    for (long i = 0; i < calls; i++) ig_parallel_range(ctx, (size_t)threads, 1, empty_fn, NULL);
    double per_call = (ig_now() - t0) / (double)calls;
    /* the reference: start and join threads - 1 threads per loop */
    long spawns = calls / 20 > 100 ? calls / 20 : 100;
    t0 = ig_now();
    for (long i = 0; i < spawns; i++) {
        pthread_t t[64];
        int k = threads - 1 < 64 ? threads - 1 : 64;
        for (int j = 0; j < k; j++) pthread_create(&t[j], NULL, empty_thread, NULL);
        for (int j = 0; j < k; j++) pthread_join(t[j], NULL);
    }
    double per_spawn = (ig_now() - t0) / (double)spawns;
    printf("pool overhead, %d threads: %.2f us per call; starting and joining %d threads: %.2f us "
           "(%.1fx the pool's)\n",
           threads, per_call * 1e6, threads - 1, per_spawn * 1e6, per_spawn / per_call);

    /* memory-bound: triad over 3 x 64 MiB */
    size_t n = (size_t)16 << 20;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (!a || !b || !c) return 1;
    for (size_t i = 0; i < n; i++) a[i] = 0, b[i] = (float)(i & 1023), c[i] = 1.0f;
    triad tr = {a, b, c, 0.5f};
    ig_ctx *one = make_ctx(1);
    double m1 = best_of(one, n, 1 << 16, triad_fn, &tr);
    double mt = best_of(ctx, n, 1 << 16, triad_fn, &tr);
    double gbs = 3.0 * (double)n * sizeof(float) / 1e9;
    printf("memory-bound triad, 192 MiB: 1 thread %.1f GB/s, %d threads %.1f GB/s: %.2fx\n",
           gbs / m1, threads, gbs / mt, m1 / mt);

    /* compute-bound: 512 dependent multiply-adds per element */
    size_t cn = (size_t)1 << 20;
    chain ch = {a};
    double c1 = best_of(one, cn, 1 << 12, chain_fn, &ch);
    double ct = best_of(ctx, cn, 1 << 12, chain_fn, &ch);
    printf("compute-bound chain, 2^20 x 512 FMA: 1 thread %.1f ms, %d threads %.1f ms: %.2fx "
           "(ideal %dx)\n",
           c1 * 1e3, threads, ct * 1e3, c1 / ct, threads);
    printf("pool_call_us=%.3f spawn_ratio=%.1f triad_scaling=%.2f chain_scaling=%.2f\n",
           per_call * 1e6, per_spawn / per_call, m1 / mt, c1 / ct);
    ig_ctx_free(one);
    ig_ctx_free(ctx);
    free(a);
    free(b);
    free(c);
    return 0;
}
