/* ctx.c - the context: logger, allocator, thread pool, rank and RNG. Everything that would
 * otherwise be process-global state lives in an ig_ctx. */
#include "core/core.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct pool_job {
    ig_parallel_fn fn;
    void *arg;
    size_t n;
    size_t next; /* next index to hand out; guarded by the pool mutex */
    size_t done; /* indices finished */
    unsigned long generation;
} pool_job;

struct ig_ctx {
    ig_ctx_opts opts;
    ig_allocator allocator;
    pthread_mutex_t log_mu;

    /* thread pool: workers 1..threads-1; the caller of ig_parallel_for is worker 0 */
    int threads;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    pthread_cond_t done_cv;
    pthread_mutex_t run_mu; /* one ig_parallel_for at a time */
    pool_job job;
    int stop;

    uint64_t rng[4];
};

static void *default_alloc(void *user, size_t size) {
    (void)user;
    return malloc(size ? size : 1);
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
        .log_level = IG_LOG_INFO, .threads = 0, .rank = 0, .world = 1, .seed = 1234};
}

/* The pool (and worker id) whose job item this thread is running, if any: a nested
 * ig_parallel_for from inside an item runs inline on the same worker id. Thread-local, not
 * global: each thread has its own, and it only ever names a context while inside one of its
 * items. */
static _Thread_local const ig_ctx *tl_pool;
static _Thread_local int tl_worker;

/* Runs job items until none are left. Called with ctx->mu held; returns with it held. */
static void pool_drain(ig_ctx *ctx, int worker) {
    pool_job *job = &ctx->job;
    while (job->fn && job->next < job->n) {
        size_t i = job->next++;
        pthread_mutex_unlock(&ctx->mu);
        const ig_ctx *outer = tl_pool;
        int outer_worker = tl_worker;
        tl_pool = ctx;
        tl_worker = worker;
        job->fn(job->arg, i, worker);
        tl_pool = outer;
        tl_worker = outer_worker;
        pthread_mutex_lock(&ctx->mu);
        if (++job->done == job->n) pthread_cond_broadcast(&ctx->done_cv);
    }
}

typedef struct worker_arg {
    ig_ctx *ctx;
    int id;
} worker_arg;

static void *pool_worker(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    ig_ctx *ctx = wa.ctx;
    unsigned long seen = 0;
    pthread_mutex_lock(&ctx->mu);
    for (;;) {
        while (!ctx->stop && (ctx->job.generation == seen || ctx->job.next >= ctx->job.n))
            pthread_cond_wait(&ctx->work_cv, &ctx->mu);
        if (ctx->stop) break;
        seen = ctx->job.generation;
        pool_drain(ctx, wa.id);
    }
    pthread_mutex_unlock(&ctx->mu);
    return NULL;
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
    if (o.world < 1 || o.rank < 0 || o.rank >= o.world)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "rank %d is not in a world of %d", o.rank,
                          o.world);
    ig_allocator a = o.allocator
                         ? *o.allocator
                         : (ig_allocator){default_alloc, default_realloc, default_free, NULL};
    ig_ctx *ctx = a.alloc(a.user, sizeof *ctx);
    if (!ctx) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the context");
    memset(ctx, 0, sizeof *ctx);
    ctx->opts = o;
    ctx->opts.allocator = NULL;
    ctx->allocator = a;
    ctx->threads = o.threads ? o.threads : (int)online_cpus();
    pthread_mutex_init(&ctx->log_mu, NULL);
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_mutex_init(&ctx->run_mu, NULL);
    pthread_cond_init(&ctx->work_cv, NULL);
    pthread_cond_init(&ctx->done_cv, NULL);

    /* splitmix64 expands the seed into the xoshiro state */
    uint64_t z = o.seed;
    for (int i = 0; i < 4; i++) {
        z += 0x9e3779b97f4a7c15ULL;
        uint64_t x = z;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
        ctx->rng[i] = x ^ (x >> 31);
    }

    if (ctx->threads > 1) {
        ctx->workers = a.alloc(a.user, sizeof(pthread_t) * (size_t)ctx->threads);
        if (!ctx->workers) {
            ig_ctx_free(ctx);
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the thread pool");
        }
        for (int i = 1; i < ctx->threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) {
                ctx->threads = i;
                ig_ctx_free(ctx);
                return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the thread pool");
            }
            *wa = (worker_arg){ctx, i};
            if (pthread_create(&ctx->workers[i], NULL, pool_worker, wa) != 0) {
                free(wa);
                ctx->threads = i;
                ig_ctx_free(ctx);
                return ig_err_set(err, IG_ERR_IO, "cannot start pool thread %d", i);
            }
        }
    }
    *out = ctx;
    return IG_OK;
}

void ig_ctx_free(ig_ctx *ctx) {
    if (!ctx) return;
    if (ctx->workers) {
        pthread_mutex_lock(&ctx->mu);
        ctx->stop = 1;
        pthread_cond_broadcast(&ctx->work_cv);
        pthread_mutex_unlock(&ctx->mu);
        for (int i = 1; i < ctx->threads; i++) pthread_join(ctx->workers[i], NULL);
        ctx->allocator.free(ctx->allocator.user, ctx->workers);
    }
    pthread_mutex_destroy(&ctx->log_mu);
    pthread_mutex_destroy(&ctx->mu);
    pthread_mutex_destroy(&ctx->run_mu);
    pthread_cond_destroy(&ctx->work_cv);
    pthread_cond_destroy(&ctx->done_cv);
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

void *ig_alloc(ig_ctx *ctx, size_t size) {
    return ctx->allocator.alloc(ctx->allocator.user, size);
}

void *ig_calloc(ig_ctx *ctx, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = ig_alloc(ctx, n * size);
    if (p) memset(p, 0, n * size);
    return p;
}

void *ig_realloc(ig_ctx *ctx, void *ptr, size_t size) {
    return ctx->allocator.realloc(ctx->allocator.user, ptr, size);
}

void ig_free(ig_ctx *ctx, void *ptr) {
    if (ptr) ctx->allocator.free(ctx->allocator.user, ptr);
}

char *ig_strdup(ig_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ig_alloc(ctx, n);
    if (p) memcpy(p, s, n);
    return p;
}

void ig_parallel_for(ig_ctx *ctx, size_t n, ig_parallel_fn fn, void *arg) {
    if (n == 0) return;
    if (tl_pool == ctx) { /* called from inside one of this pool's items: inline, same worker */
        for (size_t i = 0; i < n; i++) fn(arg, i, tl_worker);
        return;
    }
    if (ctx->threads <= 1 || n == 1) {
        for (size_t i = 0; i < n; i++) fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&ctx->run_mu);
    pthread_mutex_lock(&ctx->mu);
    unsigned long gen = ctx->job.generation + 1;
    ctx->job = (pool_job){.fn = fn, .arg = arg, .n = n, .generation = gen};
    pthread_cond_broadcast(&ctx->work_cv);
    pool_drain(ctx, 0);
    while (ctx->job.done < ctx->job.n) pthread_cond_wait(&ctx->done_cv, &ctx->mu);
    ctx->job.fn = NULL;
    pthread_mutex_unlock(&ctx->mu);
    pthread_mutex_unlock(&ctx->run_mu);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t ig_ctx_rand_u64(ig_ctx *ctx) {
    uint64_t *s = ctx->rng;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double ig_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
