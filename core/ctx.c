/* ctx.c - the context: logger, allocator, thread pool (pool.c) and rank. Everything that would
 * otherwise be process-global state lives in an ig_ctx. */
#include "core/core.h"
#include "pool_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct ig_ctx {
    ig_ctx_opts opts;
    ig_allocator allocator;
    pthread_mutex_t log_mu;
    int threads;
    ig_pool *pool;
};

static void *default_alloc(void *user, size_t size, size_t align) {
    (void)user;
    if (align <= 16) return malloc(size ? size : 1);
    void *p = NULL;
    return posix_memalign(&p, align, size ? size : 1) == 0 ? p : NULL;
}
static void *default_realloc(void *user, void *ptr, size_t size) {
    (void)user;
    return realloc(ptr, size ? size : 1);
}
static void default_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

ig_ctx_opts ig_ctx_opts_default(void) {
    return (ig_ctx_opts){
        .log_level = IG_LOG_INFO, .threads = 0, .spin_us = 50, .rank = 0, .world = 1};
}

static long online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

ig_status ig_ctx_create(ig_ctx **out, const ig_ctx_opts *opts, ig_err *err) {
    *out = NULL;
    ig_ctx_opts o = opts ? *opts : ig_ctx_opts_default();
    if (o.threads < 0 || o.threads > 1024)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "threads must be in [0, 1024], got %d",
                          o.threads);
    if (o.spin_us < 0 || o.spin_us > 1000000)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "spin_us must be in [0, 10^6], got %d",
                          o.spin_us);
    if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "rank %d is not in a world of %d", o.rank,
                          o.world);
    ig_allocator a = o.allocator
                         ? *o.allocator
                         : (ig_allocator){default_alloc, default_realloc, default_free, NULL};
    ig_ctx *ctx = a.alloc(a.user, sizeof *ctx, 64);
    if (!ctx) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the context");
    memset(ctx, 0, sizeof *ctx);
    ctx->opts = o;
    ctx->opts.allocator = NULL;
    ctx->allocator = a;
    ctx->threads = o.threads ? o.threads : (int)online_cpus();
    pthread_mutex_init(&ctx->log_mu, NULL);
    ig_status st = ig_pool_create(&ctx->pool, ctx, ctx->threads, o.spin_us, &ctx->allocator, err);
    if (st != IG_OK) {
        ig_ctx_free(ctx);
        return st;
    }
    *out = ctx;
    return IG_OK;
}

void ig_ctx_free(ig_ctx *ctx) {
    if (!ctx) return;
    ig_pool_free(ctx->pool, &ctx->allocator);
    pthread_mutex_destroy(&ctx->log_mu);
    ig_allocator a = ctx->allocator;
    a.free(a.user, ctx);
}

int ig_ctx_rank(const ig_ctx *ctx) {
    return ctx->opts.rank;
}
int ig_ctx_world(const ig_ctx *ctx) {
    return ctx->opts.world;
}
int ig_ctx_threads(const ig_ctx *ctx) {
    return ctx->threads;
}
ig_log_level ig_ctx_log_level(const ig_ctx *ctx) {
    return ctx->opts.log_level;
}
void ig_ctx_set_log_level(ig_ctx *ctx, ig_log_level level) {
    ctx->opts.log_level = level;
}

static const char *level_name(ig_log_level level) {
    switch (level) {
    case IG_LOG_DEBUG:
        return "debug";
    case IG_LOG_INFO:
        return "info";
    case IG_LOG_WARN:
        return "warning";
    case IG_LOG_ERROR:
        return "error";
    default:
        return "log";
    }
}

void ig_log(ig_ctx *ctx, ig_log_level level, const char *fmt, ...) {
    if (!ctx || level < ctx->opts.log_level || level >= IG_LOG_OFF) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&ctx->log_mu);
    if (ctx->opts.log_fn) {
        ctx->opts.log_fn(ctx->opts.log_user, level, msg);
    } else if (ctx->opts.world > 1) {
        fprintf(stderr, "ingot[%d]: %s: %s\n", ctx->opts.rank, level_name(level), msg);
    } else {
        fprintf(stderr, "ingot: %s: %s\n", level_name(level), msg);
    }
    pthread_mutex_unlock(&ctx->log_mu);
}

/* Without a context: the default allocator's functions, user NULL. */
static const ig_allocator *allocator_of(const ig_ctx *ctx) {
    static const ig_allocator plain = {default_alloc, default_realloc, default_free, NULL};
    return ctx ? &ctx->allocator : &plain;
}

void *ig_alloc(ig_ctx *ctx, size_t size) {
    const ig_allocator *a = allocator_of(ctx);
    return a->alloc(a->user, size, IG_ALIGN_DEFAULT);
}

void *ig_alloc_aligned(ig_ctx *ctx, size_t size, size_t align) {
    if (align < IG_ALIGN_DEFAULT) align = IG_ALIGN_DEFAULT;
    if (align & (align - 1)) return NULL;
    const ig_allocator *a = allocator_of(ctx);
    return a->alloc(a->user, size, align);
}

void *ig_calloc(ig_ctx *ctx, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = ig_alloc(ctx, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

void *ig_realloc(ig_ctx *ctx, void *ptr, size_t size) {
    const ig_allocator *a = allocator_of(ctx);
    return a->realloc(a->user, ptr, size);
}

void ig_free(ig_ctx *ctx, void *ptr) {
    if (!ptr) return;
    const ig_allocator *a = allocator_of(ctx);
    a->free(a->user, ptr);
}

char *ig_strdup(ig_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ig_alloc(ctx, n);
    if (p) memcpy(p, s, n);
    return p;
}

char *ig_asprintf(ig_ctx *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *p = ig_alloc(ctx, (size_t)n + 1);
    if (!p) return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void ig_parallel_range(ig_ctx *ctx, size_t n, size_t grain, ig_range_fn fn, void *arg) {
    ig_pool_run(ctx->pool, n, grain, fn, arg);
}

typedef struct for_each {
    ig_parallel_fn fn;
    void *arg;
} for_each;

static void for_each_range(void *arg, size_t begin, size_t end, int worker) {
    const for_each *f = arg;
    for (size_t i = begin; i < end; i++) f->fn(f->arg, i, worker);
}

void ig_parallel_for(ig_ctx *ctx, size_t n, ig_parallel_fn fn, void *arg) {
    for_each f = {fn, arg};
    ig_parallel_range(ctx, n, 1, for_each_range, &f);
}

double ig_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
