/* backend_memory.c - the memory accounting of every backend (backend.h's ig_backend_memory):
 * backend.c records each buffer it hands out and forgets it on release, the backends record their
 * own workspace (ig_backend_track), and the bytes held of each kind are kept now and at their
 * peak. The sizes live in a table keyed by address (open addressing, linear probing, deletion by
 * backward shift), because release is given a pointer only; the table grows at half full.
 *
 * The figures are what `ingot train` prints beside the plan's estimate and what the estimate is
 * checked against (tests/mpi/train_plan.sh), so they count exactly what went through the backend:
 * no rounding to pages, no library's own memory.
 */
#include <stdint.h>
#include <string.h>

#include "backend_internal.h"

struct ig_mem_block {
    uintptr_t p; /* 0: empty */
    uint64_t bytes;
    int kind; /* ig_mem_kind */
};

static size_t slot_of(uintptr_t p, size_t cap) {
    uint64_t h = (uint64_t)p >> 4; /* blocks are at least 16-byte aligned */
    h *= 0x9E3779B97F4A7C15ull;    /* Fibonacci hashing: the high bits spread the addresses */
    return (size_t)(h >> 32) & (cap - 1);
}

void ig_backend_memory_init(ig_backend *be) {
    pthread_mutex_init(&be->mem_lock, NULL);
    be->mem_tab = NULL;
    be->mem_cap = be->mem_n = 0;
    memset(be->mem_held, 0, sizeof be->mem_held);
    memset(be->mem_peak, 0, sizeof be->mem_peak);
    be->mem_peak_all = 0;
}

void ig_backend_memory_fini(ig_backend *be) {
    ig_free(be->ctx, be->mem_tab);
    be->mem_tab = NULL;
    be->mem_cap = be->mem_n = 0;
    pthread_mutex_destroy(&be->mem_lock);
}

static void insert(struct ig_mem_block *tab, size_t cap, struct ig_mem_block b) {
    size_t i = slot_of(b.p, cap);
    while (tab[i].p) i = (i + 1) & (cap - 1);
    tab[i] = b;
}

/* Doubles the table (mem_lock held); 0 when out of memory. */
static int grow(ig_backend *be) {
    size_t cap = be->mem_cap ? 2 * be->mem_cap : 64;
    struct ig_mem_block *tab = ig_calloc(be->ctx, cap, sizeof *tab);
    if (!tab) return 0;
    for (size_t i = 0; i < be->mem_cap; i++)
        if (be->mem_tab[i].p) insert(tab, cap, be->mem_tab[i]);
    ig_free(be->ctx, be->mem_tab);
    be->mem_tab = tab;
    be->mem_cap = cap;
    return 1;
}

int ig_backend_track(ig_backend *be, const void *p, size_t bytes, ig_mem_kind kind) {
    if (!p) return 1;
    pthread_mutex_lock(&be->mem_lock);
    int ok = 2 * (be->mem_n + 1) <= be->mem_cap || grow(be);
    if (ok) {
        insert(be->mem_tab, be->mem_cap, (struct ig_mem_block){(uintptr_t)p, bytes, (int)kind});
        be->mem_n++;
        be->mem_held[kind] += bytes;
        if (be->mem_held[kind] > be->mem_peak[kind]) be->mem_peak[kind] = be->mem_held[kind];
        uint64_t all = be->mem_held[0] + be->mem_held[1];
        if (all > be->mem_peak_all) be->mem_peak_all = all;
    }
    pthread_mutex_unlock(&be->mem_lock);
    return ok;
}

void ig_backend_untrack(ig_backend *be, const void *p) {
    if (!p) return;
    pthread_mutex_lock(&be->mem_lock);
    size_t cap = be->mem_cap, i = cap ? slot_of((uintptr_t)p, cap) : 0;
    while (cap && be->mem_tab[i].p && be->mem_tab[i].p != (uintptr_t)p) i = (i + 1) & (cap - 1);
    if (cap && be->mem_tab[i].p) {
        be->mem_held[be->mem_tab[i].kind] -= be->mem_tab[i].bytes;
        be->mem_n--;
        /* backward shift: every later block of the run whose home is not between the hole and
         * itself moves into the hole, so that lookups never meet a gap before their block */
        size_t hole = i, j = i;
        for (;;) {
            j = (j + 1) & (cap - 1);
            if (!be->mem_tab[j].p) break;
            size_t home = slot_of(be->mem_tab[j].p, cap);
            int stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
            if (stays) continue;
            be->mem_tab[hole] = be->mem_tab[j];
            hole = j;
        }
        be->mem_tab[hole] = (struct ig_mem_block){0};
    }
    pthread_mutex_unlock(&be->mem_lock);
}

void ig_backend_memory_info(ig_backend *be, ig_backend_memory *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&be->mem_lock);
    out->buffers = be->mem_held[IG_MEM_BUFFER];
    out->buffers_peak = be->mem_peak[IG_MEM_BUFFER];
    out->workspace = be->mem_held[IG_MEM_WORKSPACE];
    out->workspace_peak = be->mem_peak[IG_MEM_WORKSPACE];
    out->peak = be->mem_peak_all;
    out->blocks = be->mem_n;
    pthread_mutex_unlock(&be->mem_lock);
    out->device_what = "";
    if (be->ops->mem_info)
        be->ops->mem_info(be, &out->device_limit, &out->device_free, &out->device_what);
}

void ig_backend_memory_reset_peak(ig_backend *be) {
    pthread_mutex_lock(&be->mem_lock);
    for (int k = 0; k < 2; k++) be->mem_peak[k] = be->mem_held[k];
    be->mem_peak_all = be->mem_held[0] + be->mem_held[1];
    pthread_mutex_unlock(&be->mem_lock);
}
