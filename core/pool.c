/* pool.c - the context's thread pool: parallel loops over ranges for kernels and index builders.
 *
 * A call splits [0, n) into chunks of `grain` items (the split depends on n and grain only, never
 * on the thread count, so a kernel that reduces per chunk is deterministic) and publishes a job;
 * the caller and the pool's threads claim chunks with one atomic add each, and the caller returns
 * when every chunk is done and no thread still looks at the job (which lives on its stack).
 *
 * Several threads may call at once: jobs sit in a list and idle workers join whichever has chunks
 * left. A call from inside a chunk (of this pool) runs inline. Idle workers spin for a short while
 * (opts.spin_us) before they sleep on a condition variable, so back-to-back calls (a kernel's
 * layers) cost a few hundred nanoseconds instead of a wake-up each; with more threads than cores
 * (mpirun --oversubscribe), set spin_us to 0. The threads start on the first call that can use
 * them: a program that never runs a parallel loop never starts one.
 */
#include "core/core.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pool_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

typedef struct pool_job {
    ig_range_fn fn;
    void *arg;
    size_t n, grain, chunks;
    atomic_size_t next; /* next chunk to claim */
    atomic_size_t done; /* chunks finished */
    atomic_int refs;    /* pool threads attached to the job */
    struct pool_job *next_job;
} pool_job;

struct ig_pool {
    const ig_ctx *ctx; /* for the nesting check */
    int threads;       /* including the caller's: pool threads are 1 .. threads - 1 */
    int spin_us;
    pthread_t *tids;
    int started;         /* pool threads running (1 .. started) */
    atomic_int launched; /* the threads were started (or starting them failed) */
    pthread_mutex_t mu;
    pthread_cond_t cv_work; /* a job was published, or stop */
    pthread_cond_t cv_done; /* a job lost its last attached thread */
    pool_job *jobs;         /* the published jobs with chunks left, newest first */
    atomic_uint epoch;      /* bumped on every publish: what spinning workers watch */
    int sleepers;           /* workers waiting on cv_work */
    int stop;
};

/* The pool (and worker id) whose chunk this thread is running, if any: a nested call from inside
 * a chunk runs inline on the same worker id. Thread-local: each thread has its own. */
static _Thread_local const ig_pool *tl_pool;
static _Thread_local int tl_worker;

static double now_us(void) {
    return ig_now() * 1e6;
}

static void run_chunks(ig_pool *p, pool_job *job, int worker) {
    const ig_pool *outer = tl_pool;
    int outer_worker = tl_worker;
    tl_pool = p;
    tl_worker = worker;
    for (;;) {
        size_t c = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (c >= job->chunks) break;
        size_t b = c * job->grain, e = b + job->grain;
        job->fn(job->arg, b, e < job->n ? e : job->n, worker);
        atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
    }
    tl_pool = outer;
    tl_worker = outer_worker;
}

/* A published job with chunks left, attached (refs + 1), or NULL. Called with mu held. */
static pool_job *attach_locked(ig_pool *p) {
    for (pool_job *j = p->jobs; j; j = j->next_job)
        if (atomic_load_explicit(&j->next, memory_order_relaxed) < j->chunks) {
            atomic_fetch_add_explicit(&j->refs, 1, memory_order_relaxed);
            return j;
        }
    return NULL;
}

static void detach(ig_pool *p, pool_job *job) {
    /* the job may be gone the moment refs reaches 0: nothing of it is touched after this */
    if (atomic_fetch_sub_explicit(&job->refs, 1, memory_order_acq_rel) == 1) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_done);
        pthread_mutex_unlock(&p->mu);
    }
}

typedef struct worker_arg {
    ig_pool *p;
    int id;
} worker_arg;

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    ig_pool *p = wa.p;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->stop) break;
        pool_job *job = attach_locked(p);
        if (job) {
            pthread_mutex_unlock(&p->mu);
            run_chunks(p, job, wa.id);
            detach(p, job);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        /* nothing to do: spin a little on the publish counter, then sleep */
        unsigned seen = atomic_load_explicit(&p->epoch, memory_order_acquire);
        pthread_mutex_unlock(&p->mu);
        int woke = 0;
        if (p->spin_us > 0) {
            double until = now_us() + p->spin_us;
            for (unsigned i = 0;; i++) {
                if (atomic_load_explicit(&p->epoch, memory_order_acquire) != seen) {
                    woke = 1;
                    break;
                }
                cpu_relax();
                if ((i & 255) == 255 && now_us() > until) break;
            }
        }
        pthread_mutex_lock(&p->mu);
        if (woke) continue;
        /* a publish between the spin and here bumped epoch under mu: checked before sleeping */
        if (!p->stop && atomic_load_explicit(&p->epoch, memory_order_relaxed) == seen) {
            p->sleepers++;
            pthread_cond_wait(&p->cv_work, &p->mu);
            p->sleepers--;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

ig_status ig_pool_create(ig_pool **out, const ig_ctx *ctx, int threads, int spin_us,
                         const ig_allocator *a, ig_err *err) {
    *out = NULL;
    ig_pool *p = a->alloc(a->user, sizeof *p, 64);
    if (!p) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the thread pool");
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->threads = threads;
    p->spin_us = spin_us;
    atomic_init(&p->epoch, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->launched, threads <= 1);
    *out = p;
    if (threads <= 1) return IG_OK;
    p->tids = a->alloc(a->user, sizeof(pthread_t) * (size_t)threads, 16);
    if (!p->tids) {
        ig_pool_free(p, a);
        *out = NULL;
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the thread pool");
    }
    return IG_OK;
}

/* Starts the pool threads on first use. When the system refuses a thread, the pool runs with
 * those it has (the caller's work never depends on how many there are). */
static void launch(ig_pool *p) {
    pthread_mutex_lock(&p->mu);
    if (!atomic_load_explicit(&p->launched, memory_order_relaxed)) {
        for (int i = 1; i < p->threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (!wa) break;
            *wa = (worker_arg){p, i};
            if (ig_thread_start(&p->tids[i], worker_main, wa) != 0) {
                free(wa);
                break;
            }
            p->started = i;
        }
        atomic_store_explicit(&p->launched, 1, memory_order_release);
    }
    pthread_mutex_unlock(&p->mu);
}

void ig_pool_free(ig_pool *p, const ig_allocator *a) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i <= p->started; i++) pthread_join(p->tids[i], NULL);
    if (p->tids) a->free(a->user, p->tids);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    a->free(a->user, p);
}

void ig_pool_run(ig_pool *p, size_t n, size_t grain, ig_range_fn fn, void *arg) {
    if (n == 0) return;
    if (grain == 0) grain = 1;
    size_t chunks = n / grain + (n % grain != 0);
    if (tl_pool == p) { /* inside one of this pool's chunks: inline, same worker */
        for (size_t c = 0; c < chunks; c++) {
            size_t b = c * grain, e = b + grain;
            fn(arg, b, e < n ? e : n, tl_worker);
        }
        return;
    }
    if (!atomic_load_explicit(&p->launched, memory_order_acquire)) launch(p);
    if (p->started == 0 || chunks == 1) {
        const ig_pool *outer = tl_pool;
        int outer_worker = tl_worker;
        tl_pool = p;
        tl_worker = 0;
        for (size_t c = 0; c < chunks; c++) {
            size_t b = c * grain, e = b + grain;
            fn(arg, b, e < n ? e : n, 0);
        }
        tl_pool = outer;
        tl_worker = outer_worker;
        return;
    }
    pool_job job = {.fn = fn, .arg = arg, .n = n, .grain = grain, .chunks = chunks};
    atomic_init(&job.next, 0);
    atomic_init(&job.done, 0);
    atomic_init(&job.refs, 0);
    pthread_mutex_lock(&p->mu);
    job.next_job = p->jobs;
    p->jobs = &job;
    atomic_fetch_add_explicit(&p->epoch, 1, memory_order_release);
    if (p->sleepers) pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    run_chunks(p, &job, 0);

    /* every chunk is claimed: wait until they are done and no worker holds the job */
    int spins = 0;
    while (atomic_load_explicit(&job.done, memory_order_acquire) < chunks ||
           atomic_load_explicit(&job.refs, memory_order_acquire) > 0) {
        if (++spins < 4096) {
            cpu_relax();
            continue;
        }
        pthread_mutex_lock(&p->mu);
        while (atomic_load_explicit(&job.done, memory_order_acquire) < chunks ||
               atomic_load_explicit(&job.refs, memory_order_acquire) > 0)
            pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    /* a worker may have attached after the checks above: attach_locked read job.next before the
     * last chunk was claimed and took its reference after they saw none (both under mu, which the
     * checks above do not hold). It finds no chunk left and detaches at once; the job leaves the
     * list (and this stack) only after that, and nobody attaches while mu is held here. */
    while (atomic_load_explicit(&job.refs, memory_order_acquire) > 0)
        pthread_cond_wait(&p->cv_done, &p->mu);
    for (pool_job **pj = &p->jobs; *pj; pj = &(*pj)->next_job)
        if (*pj == &job) {
            *pj = job.next_job;
            break;
        }
    pthread_mutex_unlock(&p->mu);
}

int ig_thread_start(void *thread, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create((pthread_t *)thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
