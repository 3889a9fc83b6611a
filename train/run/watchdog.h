/* watchdog.h - private to train/: no rank waits forever for another (watchdog.c). A run's pulse
 * counts its progress (a collective started, a micro-batch done); a watchdog thread per rank
 * writes heartbeats and ends the job when no rank makes progress for parallel.timeout seconds.
 */
#ifndef INGOT_TRAIN_WATCHDOG_H
#define INGOT_TRAIN_WATCHDOG_H

#include <stdatomic.h>

#include "core/core.h"

/* A run's progress: what its collectives, micro-batches and checkpoint writes report, and what
 * its watchdog reads (from its own thread). One per run: two trainers in a process do not mix. */
typedef struct ig_pulse {
    _Atomic uint64_t ticks;
    _Atomic int busy;
} ig_pulse;

/* One unit of progress (any thread; p NULL: nothing). */
static inline void ig_pulse_tick(ig_pulse *p) {
    if (p) atomic_fetch_add_explicit(&p->ticks, 1, memory_order_relaxed);
}
/* This process works alone for a while (writing its checkpoint files, building the data's index:
 * no collective to tick): busy 1 before, 0 after. Its heartbeat says so, and neither its watchdog
 * nor the others' end the job meanwhile (for at most 4 timeouts: a write that never returns still
 * ends it). */
static inline void ig_pulse_busy(ig_pulse *p, int busy) {
    if (!p) return;
    atomic_fetch_add_explicit(&p->ticks, 1, memory_order_relaxed);
    atomic_store_explicit(&p->busy, busy != 0, memory_order_relaxed);
}

typedef struct ig_watchdog ig_watchdog;
/* Starts this rank's watchdog thread over pulse (which must outlive it) and its heartbeats in
 * RUN_DIR/.heartbeat/. */
ig_status ig_watchdog_start(ig_watchdog **out, ig_ctx *ctx, ig_pulse *pulse, const char *run_dir,
                            int rank, int world, double timeout, ig_err *err);
/* Between arm and disarm, timeout seconds without progress - here and on every rank whose
 * heartbeat this one reads - end the process (status 3) with a message naming the rank(s) that
 * stopped or fell behind. A rank still making progress (a slow checkpoint write elsewhere) keeps
 * the others waiting. step -1: the run's start (opening the data, creating the model). */
void ig_watchdog_arm(ig_watchdog *w, int64_t step);
void ig_watchdog_disarm(ig_watchdog *w);
void ig_watchdog_stop(ig_watchdog *w); /* NULL is a no-op */

#endif
