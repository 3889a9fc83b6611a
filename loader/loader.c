/* loader.c - the infinite prefetching loader with the distributed proxy sampler layout (see
 * loader.h for the semantics).
 *
 * Threads and ownership. One mutex guards the ring of slots, the counters and the block cache;
 * three condition variables wake whoever waits: workers (a slot became free, or stop), the
 * consumer (a slot became ready) and block users (a block was built or released). A worker claims
 * the next micro-batch index under the lock, fills its slot without the lock (the slot belongs to
 * it until it publishes it as READY under the lock) and wakes the consumer. The consumer holds the
 * slot it returned until its next call, so the ring keeps at most `depth` slots in use:
 * [next_out - held, next_claim).
 *
 * Blocks are built on demand by whichever thread first needs them (outside the lock; others
 * needing the same block wait), kept in a small cache with reference counts and evicted least
 * recently used. Each thread holds (keeps a reference to) at most one block at a time, also
 * between batches, so a cache of threads + 2 entries always has one to evict.
 */
#include "loader/loader.h"

#include <pthread.h>
#include <string.h>

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_READY, SLOT_ERROR };
enum { BLOCK_EMPTY = 0, BLOCK_BUILDING, BLOCK_READY };

typedef struct slot {
    int state;
    uint64_t k;    /* micro-batch index it holds */
    uint8_t *data; /* [B][row bytes] */
    uint64_t *ids; /* [B] */
    ig_err err;    /* when SLOT_ERROR */
} slot;

typedef struct block_entry {
    int state;
    int refs;
    uint64_t block;
    uint64_t last_use;
    ig_sample_source src;
} block_entry;

struct ig_loader {
    ig_ctx *ctx;
    ig_loader_opts o;
    uint32_t seq_len;
    size_t row; /* bytes of a sample: (seq_len + 1) tokens, or the source's sample_bytes */
    int tokens; /* the samples are tokens (get), not bytes (get_bytes) */
    uint64_t block_size;
    uint64_t key;
    uint64_t per_micro; /* B * dp */

    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready, cv_block;
    int sync_init; /* the mutex and conditions are initialised */

    slot *slots;
    int depth;
    uint64_t next_claim;  /* next micro-batch index a worker will fill */
    uint64_t next_out;    /* next micro-batch index the consumer will get */
    uint64_t end;         /* micro-batches of the stream: their samples are all below 2^64 - 1 */
    int held;             /* the consumer holds slot next_out - 1 */
    int stop;             /* ig_loader_free was called */
    int failed;           /* a worker failed: claim nothing more */
    int idle_workers;     /* workers waiting on cv_work */
    int consumer_waiting; /* the consumer waits on cv_ready for slot next_out */
    int wake_at;          /* free slots that wake idle workers: half the ring */
    ig_status sticky;     /* the error the consumer got (returned again) */
    ig_err sticky_err;

    block_entry *blocks;
    block_entry *sync_held; /* the block the consumer holds in synchronous mode */
    int n_blocks;
    uint64_t use_clock;

    pthread_t *threads;
    int n_threads;
};

ig_loader_opts ig_loader_opts_default(void) {
    return (ig_loader_opts){.micro_batch = 1,
                            .grad_accum = 1,
                            .dp = 1,
                            .rank = 0,
                            .prefetch_threads = 2,
                            .prefetch_depth = 4};
}

uint64_t ig_loader_sample_id(uint32_t micro_batch, uint32_t grad_accum, uint32_t dp, uint32_t rank,
                             uint64_t step, uint32_t micro, uint32_t j) {
    uint64_t k = step * grad_accum + micro;
    return k * micro_batch * dp + (uint64_t)rank * micro_batch + j;
}

/* ---- block cache ----------------------------------------------------------------------------- */

static void free_source(ig_sample_source *s) {
    if (s->free) s->free(s->self);
    memset(s, 0, sizeof *s);
}

/* Checks that a block built by the factory fits the stream. */
static ig_status check_block(const ig_loader *ld, uint64_t b, const ig_sample_source *s,
                             ig_err *err) {
    if (!s->num_samples || !(ld->tokens ? s->get != NULL : s->get_bytes != NULL))
        return ig_err_set(err, IG_ERR_INTERNAL, "block %llu: the sample source has no %s",
                          (unsigned long long)b, s->num_samples ? "get" : "num_samples");
    if (ld->tokens ? s->sample_bytes != 0 : s->sample_bytes != ld->row)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "block %llu of the sample stream has samples of %zu bytes, block 0 %zu",
                          (unsigned long long)b, s->sample_bytes, ld->tokens ? 0 : ld->row);
    if (s->seq_len != ld->seq_len)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "block %llu of the sample stream has seq_len %u, block 0 has %u",
                          (unsigned long long)b, s->seq_len, ld->seq_len);
    uint64_t n = s->num_samples(s->self);
    if (n < ld->block_size)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "block %llu of the sample stream has %llu samples, fewer than block 0's "
                          "%llu",
                          (unsigned long long)b, (unsigned long long)n,
                          (unsigned long long)ld->block_size);
    return IG_OK;
}

/* Returns the entry of block b with a reference taken (building the block when needed), or an
 * error (IG_ERR_CANCELLED when the loader is stopping). */
static ig_status block_acquire(ig_loader *ld, uint64_t b, block_entry **out, ig_err *err) {
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        if (ld->stop) {
            pthread_mutex_unlock(&ld->mu);
            return ig_err_set(err, IG_ERR_CANCELLED, "the loader is shutting down");
        }
        block_entry *e = NULL, *victim = NULL;
        for (int i = 0; i < ld->n_blocks; i++) {
            block_entry *c = &ld->blocks[i];
            if (c->state != BLOCK_EMPTY && c->block == b) e = c;
        }
        if (e && e->state == BLOCK_READY) {
            e->refs++;
            e->last_use = ++ld->use_clock;
            pthread_mutex_unlock(&ld->mu);
            *out = e;
            return IG_OK;
        }
        if (e) { /* another thread is building it */
            pthread_cond_wait(&ld->cv_block, &ld->mu);
            continue;
        }
        for (int i = 0; i < ld->n_blocks; i++) {
            block_entry *c = &ld->blocks[i];
            if (c->state == BLOCK_EMPTY) {
                victim = c;
                break;
            }
            if (c->state == BLOCK_READY && c->refs == 0 &&
                (!victim || c->last_use < victim->last_use))
                victim = c;
        }
        if (!victim) {
            pthread_cond_wait(&ld->cv_block, &ld->mu);
            continue;
        }
        if (victim->state == BLOCK_READY) free_source(&victim->src);
        victim->state = BLOCK_BUILDING;
        victim->block = b;
        pthread_mutex_unlock(&ld->mu);

        ig_sample_source src = {0};
        ig_status st = ld->o.make_block(ld->o.block_user, b, &src, err);
        if (st == IG_OK) {
            st = check_block(ld, b, &src, err);
            if (st != IG_OK) free_source(&src);
        } else {
            ig_err_prefix(err, st, "building block %llu of the sample stream",
                          (unsigned long long)b);
        }

        pthread_mutex_lock(&ld->mu);
        if (st == IG_OK) {
            victim->src = src;
            victim->state = BLOCK_READY;
            victim->refs = 1;
            victim->last_use = ++ld->use_clock;
        } else {
            victim->state = BLOCK_EMPTY;
        }
        pthread_cond_broadcast(&ld->cv_block);
        pthread_mutex_unlock(&ld->mu);
        *out = victim;
        return st;
    }
}

static void block_release(ig_loader *ld, block_entry *e) {
    pthread_mutex_lock(&ld->mu);
    e->refs--;
    pthread_cond_broadcast(&ld->cv_block);
    pthread_mutex_unlock(&ld->mu);
}

/* ---- filling a micro-batch ------------------------------------------------------------------- */

/* Fills micro-batch k of this rank into data/ids. Runs without the lock, apart from the block
 * cache. *held is the block this thread keeps a reference to between batches (NULL at first), so
 * that the common case - the same block as the last batch - takes no lock. */
static ig_status fill(ig_loader *ld, uint64_t k, uint8_t *data, uint64_t *ids, block_entry **held,
                      ig_err *err) {
    const uint32_t B = ld->o.micro_batch;
    const uint64_t base = k * ld->per_micro + (uint64_t)ld->o.rank * B;
    for (uint32_t j = 0; j < B; j++) ids[j] = base + j;
    uint32_t j = 0;
    while (j < B) {
        uint64_t g = base + j;
        uint64_t b = g / ld->block_size, i = g % ld->block_size;
        uint64_t left = ld->block_size - i;
        uint32_t n = (uint64_t)(B - j) < left ? B - j : (uint32_t)left;
        if (!*held || (*held)->block != b) {
            if (*held) block_release(ld, *held);
            *held = NULL;
            ig_status st = block_acquire(ld, b, held, err);
            if (st != IG_OK) {
                *held = NULL;
                return st;
            }
        }
        const ig_sample_source *src = &(*held)->src;
        int32_t *rows = (int32_t *)(data + (size_t)j * ld->row);
        if (ld->tokens && src->get_rows && src->get_rows(src->self, i, n, rows, err) == IG_OK) {
            j += n;
            continue;
        }
        ig_err_clear(err); /* get_rows failed (or is absent): get tells which sample fails */
        for (uint32_t t = 0; t < n; t++) {
            void *row = data + (size_t)(j + t) * ld->row;
            ig_status st = ld->tokens ? src->get(src->self, i + t, row, err)
                                      : src->get_bytes(src->self, i + t, row, err);
            if (st != IG_OK)
                return ig_err_prefix(err, st,
                                     "reading global sample %llu (block %llu, sample %llu)",
                                     (unsigned long long)(g + t), (unsigned long long)b,
                                     (unsigned long long)(i + t));
        }
        j += n;
    }
    return IG_OK;
}

/* Whether the waiting consumer should wake up (call with the lock held). It sleeps until the
 * batch it needs and the wake_at - 1 after it are filled, or the loader failed, rather than until
 * the one batch: when the consumer is faster than the workers (a wake-up per batch costs two
 * context switches, as long as filling a batch) it then wakes once per several batches, while
 * the workers keep filling the rest of the ring. Those batches do come: while the consumer waits
 * it holds no slot, and it has woken idle workers unless fewer than wake_at slots are free, i.e.
 * unless at least wake_at batches are already being filled. */
static int consumer_may_go(const ig_loader *ld) {
    const uint64_t depth = (uint64_t)ld->depth;
    for (uint64_t t = 0; t < (uint64_t)ld->wake_at; t++) {
        uint64_t k = ld->next_out + t;
        if (k >= ld->end) return 1; /* none come after the end of the stream */
        const slot *s = &ld->slots[k % depth];
        if (k >= ld->next_claim || s->k != k || s->state == SLOT_FILLING)
            return t > 0 && ld->failed;
        if (s->state == SLOT_ERROR) return 1;
    }
    return 1;
}

static void *worker_main(void *arg) {
    ig_loader *ld = arg;
    block_entry *held = NULL;
    pthread_mutex_lock(&ld->mu);
    while (!ld->stop) {
        uint64_t floor = ld->next_out - (uint64_t)ld->held;
        if (ld->failed || ld->next_claim - floor >= (uint64_t)ld->depth ||
            ld->next_claim >= ld->end) {
            ld->idle_workers++;
            pthread_cond_wait(&ld->cv_work, &ld->mu);
            ld->idle_workers--;
            continue;
        }
        uint64_t k = ld->next_claim++;
        slot *s = &ld->slots[k % (uint64_t)ld->depth];
        s->state = SLOT_FILLING;
        s->k = k;
        pthread_mutex_unlock(&ld->mu);

        ig_err_clear(&s->err);
        ig_status st = fill(ld, k, s->data, s->ids, &held, &s->err);

        pthread_mutex_lock(&ld->mu);
        if (st == IG_OK) {
            s->state = SLOT_READY;
        } else {
            s->state = SLOT_ERROR;
            s->err.status = st;
            ld->failed = 1;
        }
        if (ld->consumer_waiting && consumer_may_go(ld)) pthread_cond_signal(&ld->cv_ready);
    }
    pthread_mutex_unlock(&ld->mu);
    if (held) block_release(ld, held);
    return NULL;
}

/* ---- create / free --------------------------------------------------------------------------- */

static ig_status check_opts(const ig_loader_opts *o, ig_err *err) {
    if (!o->make_block)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "loader: make_block is required");
    if (o->micro_batch < 1 || o->grad_accum < 1 || o->dp < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "loader: micro_batch (%u), grad_accum (%u) and dp (%u) must be >= 1",
                          o->micro_batch, o->grad_accum, o->dp);
    if (o->rank >= o->dp)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "loader: rank %u is out of range for a data-parallel size of %u", o->rank,
                          o->dp);
    if (o->prefetch_threads < 0 || o->prefetch_threads > 256)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "loader: prefetch_threads is %d; expected 0 .. 256", o->prefetch_threads);
    if (o->prefetch_depth < 1 || o->prefetch_depth > 4096)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "loader: prefetch_depth is %d; expected 1 .. 4096", o->prefetch_depth);
    return IG_OK;
}

ig_status ig_loader_create(ig_loader **out, ig_ctx *ctx, const ig_loader_opts *opts,
                           const ig_loader_state *start, ig_err *err) {
    *out = NULL;
    ig_loader_opts o = opts ? *opts : ig_loader_opts_default();
    ig_status st = check_opts(&o, err);
    if (st != IG_OK) return st;

    ig_sample_source b0 = {0};
    st = o.make_block(o.block_user, 0, &b0, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "building block 0 of the sample stream");
    if (!b0.num_samples || !(b0.sample_bytes ? b0.get_bytes != NULL : b0.get != NULL)) {
        free_source(&b0);
        return ig_err_set(err, IG_ERR_INTERNAL, "loader: block 0 has no num_samples or get");
    }
    uint64_t bs = b0.num_samples(b0.self);
    if (bs == 0) {
        free_source(&b0);
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "loader: the sample source is empty (0 samples); check the data "
                          "prefixes, the split and the number of samples");
    }
    uint64_t per_micro = (uint64_t)o.micro_batch * o.dp;
    if (start) {
        if (start->index_key != b0.key) {
            uint64_t key = b0.key; /* free_source clears it */
            free_source(&b0);
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "loader: the saved state belongs to another index (key %016llx, "
                              "this index is %016llx): the data, split, seq_len, number of "
                              "samples (a trainer's train.steps x global batch) or seed changed "
                              "since it was saved",
                              (unsigned long long)start->index_key, (unsigned long long)key);
        }
        if (start->consumed_samples % per_micro != 0) {
            free_source(&b0);
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "loader: cannot resume at %llu consumed samples: not a multiple of "
                              "micro_batch * dp = %llu; resume at a step boundary",
                              (unsigned long long)start->consumed_samples,
                              (unsigned long long)per_micro);
        }
    }

    /* the ring of micro-batches, before it is allocated: a batch that cannot fit is refused with
     * the figures (--seq-len 200000 --micro-batch 10000 grew to 20 GB) */
    {
        int depth = o.prefetch_threads > 0 ? o.prefetch_depth : 1;
        uint64_t row = (uint64_t)b0.seq_len + 1, per_batch, need;
        if (__builtin_mul_overflow(row * 4 + 8, (uint64_t)o.micro_batch, &per_batch) ||
            __builtin_mul_overflow(per_batch, (uint64_t)depth, &need))
            need = UINT64_MAX;
        char what[256];
        snprintf(what, sizeof what, "loader: %d micro-batches of %u samples of %llu tokens", depth,
                 o.micro_batch, (unsigned long long)row);
        ig_status ms = ig_memory_check(need, what,
                                       "use a smaller micro_batch or seq_len, or fewer batches "
                                       "in flight",
                                       err);
        if (ms != IG_OK) {
            free_source(&b0);
            return ms;
        }
    }

    ig_loader *ld = ig_calloc(ctx, 1, sizeof *ld);
    if (!ld) {
        free_source(&b0);
        return ig_err_set(err, IG_ERR_NOMEM, "loader: out of memory");
    }
    ld->ctx = ctx;
    ld->o = o;
    ld->seq_len = b0.seq_len;
    ld->tokens = b0.sample_bytes == 0;
    ld->row = ld->tokens ? ((size_t)b0.seq_len + 1) * sizeof(int32_t) : b0.sample_bytes;
    ld->block_size = bs;
    ld->key = b0.key;
    ld->per_micro = per_micro;
    ld->depth = o.prefetch_threads > 0 ? o.prefetch_depth : 1;
    ld->wake_at = (ld->depth + 1) / 2;
    ld->next_out = ld->next_claim = start ? start->consumed_samples / per_micro : 0;
    /* sample ids are 64-bit: the stream ends before micro-batch indices (and the workers' claims
     * on them) could wrap around, which deadlocked a loader resumed near 2^64 samples */
    ld->end = UINT64_MAX / per_micro;

    pthread_mutex_init(&ld->mu, NULL);
    pthread_cond_init(&ld->cv_work, NULL);
    pthread_cond_init(&ld->cv_ready, NULL);
    pthread_cond_init(&ld->cv_block, NULL);
    ld->sync_init = 1;

    ld->n_blocks = (o.prefetch_threads > 0 ? o.prefetch_threads : 1) + 2;
    ld->blocks = ig_calloc(ctx, (size_t)ld->n_blocks, sizeof *ld->blocks);
    ld->slots = ig_calloc(ctx, (size_t)ld->depth, sizeof *ld->slots);
    if (!ld->blocks || !ld->slots) {
        free_source(&b0);
        ig_loader_free(ld);
        return ig_err_set(err, IG_ERR_NOMEM, "loader: out of memory");
    }
    ld->blocks[0] = (block_entry){.state = BLOCK_READY, .block = 0, .src = b0};
    for (int i = 0; i < ld->depth; i++) {
        /* 64-byte aligned rows start: kernels and video frames read them as they are */
        ld->slots[i].data = ig_alloc_aligned(ctx, (size_t)o.micro_batch * ld->row, IG_ALIGN_KERNEL);
        ld->slots[i].ids = ig_calloc(ctx, o.micro_batch, sizeof(uint64_t));
        if (!ld->slots[i].data || !ld->slots[i].ids) {
            int depth = ld->depth;
            size_t row = ld->row; /* read before ld goes */
            ig_loader_free(ld);
            return ig_err_set(err, IG_ERR_NOMEM,
                              "loader: out of memory for %d batches of %u x %zu bytes", depth,
                              o.micro_batch, row);
        }
    }
    if (o.prefetch_threads > 0) {
        ld->threads = ig_calloc(ctx, (size_t)o.prefetch_threads, sizeof *ld->threads);
        if (!ld->threads) {
            ig_loader_free(ld);
            return ig_err_set(err, IG_ERR_NOMEM, "loader: out of memory");
        }
        for (int i = 0; i < o.prefetch_threads; i++) {
            int rc = ig_thread_start(&ld->threads[i], worker_main, ld);
            if (rc != 0) {
                ig_loader_free(ld);
                return ig_err_errno(err, rc, "loader: cannot start prefetch thread %d", i);
            }
            ld->n_threads++;
        }
    }
    *out = ld;
    return IG_OK;
}

void ig_loader_free(ig_loader *ld) {
    if (!ld) return;
    if (ld->sync_init) {
        pthread_mutex_lock(&ld->mu);
        ld->stop = 1;
        pthread_cond_broadcast(&ld->cv_work);
        pthread_cond_broadcast(&ld->cv_ready);
        pthread_cond_broadcast(&ld->cv_block);
        pthread_mutex_unlock(&ld->mu);
    }
    for (int i = 0; i < ld->n_threads; i++) pthread_join(ld->threads[i], NULL);
    ig_free(ld->ctx, ld->threads);
    if (ld->blocks)
        for (int i = 0; i < ld->n_blocks; i++)
            if (ld->blocks[i].state == BLOCK_READY) free_source(&ld->blocks[i].src);
    ig_free(ld->ctx, ld->blocks);
    if (ld->slots)
        for (int i = 0; i < ld->depth; i++) {
            ig_free(ld->ctx, ld->slots[i].data);
            ig_free(ld->ctx, ld->slots[i].ids);
        }
    ig_free(ld->ctx, ld->slots);
    if (ld->sync_init) {
        pthread_cond_destroy(&ld->cv_block);
        pthread_cond_destroy(&ld->cv_ready);
        pthread_cond_destroy(&ld->cv_work);
        pthread_mutex_destroy(&ld->mu);
    }
    ig_free(ld->ctx, ld);
}

/* ---- consuming ------------------------------------------------------------------------------- */

static void set_batch(const ig_loader *ld, const slot *s, ig_batch *out) {
    uint64_t k = s->k;
    *out = (ig_batch){.tokens = ld->tokens ? (const int32_t *)s->data : NULL,
                      .data = s->data,
                      .sample_bytes = ld->row,
                      .sample_ids = s->ids,
                      .step = k / ld->o.grad_accum,
                      .micro_index = k,
                      .micro = (uint32_t)(k % ld->o.grad_accum),
                      .rank = ld->o.rank,
                      .micro_batch = ld->o.micro_batch,
                      .seq_len = ld->seq_len};
}

static ig_status fail_sticky(ig_loader *ld, ig_status st, const ig_err *e, ig_err *err) {
    ld->sticky = st;
    ld->sticky_err = *e;
    ld->sticky_err.status = st;
    if (err) *err = ld->sticky_err;
    return st;
}

ig_status ig_loader_next(ig_loader *ld, ig_batch *out, ig_err *err) {
    memset(out, 0, sizeof *out);
    if (ld->sticky != IG_OK) {
        if (err) *err = ld->sticky_err;
        return ld->sticky;
    }
    if (ld->next_out >= ld->end) {
        ig_err e;
        ig_err_set(&e, IG_ERR_INVALID_ARG,
                   "loader: the sample stream ends at 2^64 - 1 samples: there is no micro-batch "
                   "after %llu consumed samples",
                   (unsigned long long)(ld->next_out * ld->per_micro));
        return fail_sticky(ld, e.status, &e, err);
    }
    if (ld->n_threads == 0) { /* synchronous: fill the one slot here */
        slot *s = &ld->slots[0];
        ig_err e = {0};
        s->k = ld->next_out;
        ig_status st = fill(ld, s->k, s->data, s->ids, &ld->sync_held, &e);
        if (st != IG_OK) return fail_sticky(ld, st, &e, err);
        ld->next_out++;
        set_batch(ld, s, out);
        return IG_OK;
    }
    pthread_mutex_lock(&ld->mu);
    if (ld->held) {
        ld->slots[(ld->next_out - 1) % (uint64_t)ld->depth].state = SLOT_FREE;
        ld->held = 0;
    }
    /* Idle workers are woken once half the ring is free (or when the consumer would otherwise
     * wait for a batch nobody fills), so that they fill several batches per wake-up. */
    uint64_t in_use = ld->next_claim - ld->next_out;
    if (ld->idle_workers > 0 &&
        (ld->depth - in_use >= (uint64_t)ld->wake_at || ld->next_claim <= ld->next_out))
        pthread_cond_broadcast(&ld->cv_work);
    slot *s = &ld->slots[ld->next_out % (uint64_t)ld->depth];
    if (!(s->k == ld->next_out && (s->state == SLOT_READY || s->state == SLOT_ERROR))) {
        ld->consumer_waiting = 1;
        while (!consumer_may_go(ld)) pthread_cond_wait(&ld->cv_ready, &ld->mu);
        ld->consumer_waiting = 0;
    }
    if (s->state == SLOT_ERROR) {
        ig_status st = s->err.status;
        ig_err e = s->err;
        pthread_mutex_unlock(&ld->mu);
        return fail_sticky(ld, st, &e, err);
    }
    ld->held = 1;
    ld->next_out++;
    pthread_mutex_unlock(&ld->mu);
    set_batch(ld, s, out);
    return IG_OK;
}

ig_loader_state ig_loader_state_get(const ig_loader *ld) {
    return (ig_loader_state){.consumed_samples = ld->next_out * ld->per_micro,
                             .index_key = ld->key};
}

uint32_t ig_loader_seq_len(const ig_loader *ld) {
    return ld->seq_len;
}
uint64_t ig_loader_block_size(const ig_loader *ld) {
    return ld->block_size;
}
uint64_t ig_loader_global_batch(const ig_loader *ld) {
    return ld->per_micro * ld->o.grad_accum;
}
