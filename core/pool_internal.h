/* pool_internal.h - private to core/: the thread pool behind ig_parallel_range (pool.c). The
 * context owns one; nothing outside core/ sees it. */
#ifndef INGOT_POOL_INTERNAL_H
#define INGOT_POOL_INTERNAL_H

#include "core/core.h"

typedef struct ig_pool ig_pool;

/* A pool of threads - 1 workers (the caller of ig_pool_run is the other); spin_us: how long idle
 * workers spin before they sleep. ctx is only remembered; a is the allocator of its memory. */
ig_status ig_pool_create(ig_pool **out, const ig_ctx *ctx, int threads, int spin_us,
                         const ig_allocator *a, ig_err *err);
void ig_pool_free(ig_pool *p, const ig_allocator *a); /* NULL is a no-op */
/* ig_parallel_range on this pool. */
void ig_pool_run(ig_pool *p, size_t n, size_t grain, ig_range_fn fn, void *arg);

#endif
