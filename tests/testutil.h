/* testutil.h - helpers shared by the cmocka tests: where the test data is, scratch directories,
 * and skipping with a reason. */
#ifndef INGOT_TESTUTIL_H
#define INGOT_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/core.h"

/* The checkout (IG_SOURCE_DIR, or the compile-time source dir). */
const char *igt_source_dir(void);
/* ../shared/data when present (IG_SHARED_DATA), else NULL. */
const char *igt_shared_data(void);
/* The ingot program (IG_INGOT), or NULL. */
const char *igt_ingot(void);

/* Skips the current test, printing why, when ../shared/data is absent. Use at the top of a test. */
#define IGT_REQUIRE_SHARED()                                                                       \
    do {                                                                                           \
        if (!igt_shared_data()) {                                                                  \
            print_message("skipped: ../shared/data is not present beside the checkout\n");         \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* A fresh empty directory under $TMPDIR (or /tmp); returns a heap path. Remove it with
 * igt_rmtree and free it. */
char *igt_mkdtemp(void);
void igt_rmtree(const char *path);

/* snprintf into a static rotating buffer (64 slots: a result is overwritten 64 calls later, so
 * strdup what must live longer): handy for building paths in tests. */
const char *igt_fmt(const char *fmt, ...) IG_PRINTF(1, 2);

/* Reads a whole file (test fails when it cannot). Caller frees. */
char *igt_read(const char *path, size_t *len);
/* Writes a whole file (test fails when it cannot). */
void igt_write(const char *path, const void *data, size_t len);
/* Number of entries in a directory other than . and .. (test fails when it cannot open it). */
int igt_count_entries(const char *dir);
/* Writes PREFIX.bin/.idx/.json of a uint16 shard holding one document of n tokens (vocabulary
 * 65536, no tokenizer), straight to the files: no fsyncs, so hundreds of shards take a moment
 * (through the shard writer, seconds). */
void igt_write_tiny_shard(const char *prefix, const uint16_t *ids, size_t n);
/* Writes the clip shard PREFIX of B clips of F frames of H x W (frames: [B, F, H, W, 3] RGB24,
 * 8 fps), clip b with label labels[b] (labels NULL: none), no captions, from one source
 * "golden.mp4" (test fails when it cannot). */
void igt_write_clip_shard(const char *prefix, const uint8_t *frames, int B, int F, int H, int W,
                          const uint32_t *labels);
/* Runs a shell command, returns its exit status (or -1); stdout+stderr go to *out when out. */
int igt_run(const char *cmd, char **out);

/* An allocator that fails one chosen allocation: it counts every alloc and realloc call (from any
 * thread), and when fail_at > 0 the fail_at-th of them (1-based) returns NULL; the others succeed.
 * Tests count the allocations of a run with fail_at = 0, then fail each in turn. */
typedef struct igt_flaky {
    _Atomic long calls;   /* allocations asked for since the last igt_flaky_arm */
    _Atomic long fail_at; /* the one to fail; 0: none */
    _Atomic int failed;   /* how many were failed */
} igt_flaky;

/* The allocator over f (f must outlive every context made with it). */
ig_allocator igt_flaky_allocator(igt_flaky *f);
/* Restarts the count and fails allocation fail_at from now on (0: none). */
void igt_flaky_arm(igt_flaky *f, long fail_at);
/* A context (log level error) whose allocator is f's, with threads threads. */
ig_ctx *igt_flaky_ctx(igt_flaky *f, int threads);

#endif
