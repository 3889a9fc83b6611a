/* core.h - the public API of ingot's core: status codes and error buffers, the context (logger,
 * allocator, thread pool, rank), read-only mapped files, atomic file writes, JSON files read
 * whole, xxh3 hashing, the progress bar, YAML configuration and the loading of ingot's own modules
 * (libingot_cuda.so).
 *
 * Every library function that can fail returns an ig_status and, when it fails, fills the ig_err
 * the caller passed with a message that names the file, the line or byte offset, what was
 * expected and how to fix it. The library never exits or aborts on bad input.
 */
#ifndef INGOT_CORE_H
#define INGOT_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IG_VERSION_STRING "0.1.0"

#if defined(__GNUC__)
#define IG_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define IG_PRINTF(fmt_idx, arg_idx)
#endif

/* ---- status and errors ------------------------------------------------------------------- */

typedef enum ig_status {
    IG_OK = 0,
    IG_ERR_INVALID_ARG, /* a caller passed a bad argument or option value */
    IG_ERR_IO,          /* the operating system refused a read, write, open, rename, ... */
    IG_ERR_NOMEM,       /* an allocation failed */
    IG_ERR_FORMAT,      /* input data is malformed (JSON, UTF-8, shard structure, ...) */
    IG_ERR_CHECKSUM,    /* a stored checksum does not match the data */
    IG_ERR_EXISTS,      /* an output exists and --force was not given */
    IG_ERR_NOT_FOUND,   /* a file, key or entry does not exist */
    IG_ERR_CONFIG,      /* a configuration file or override is wrong */
    IG_ERR_UNSUPPORTED, /* valid, but not supported by this build or version */
    IG_ERR_CANCELLED,   /* the operation was interrupted on request */
    IG_ERR_INTERNAL,    /* a bug in ingot: please report it */
    IG_STATUS_COUNT
} ig_status;

/* Short constant name of a status ("invalid argument", "I/O error", ...). Never NULL. */
const char *ig_status_str(ig_status status);

#define IG_ERR_MSG_MAX 1024

/* An error buffer: the status of the failure and a message with its context. Zero-initialise it
 * (`ig_err err = {0};`); pass NULL to a function when you do not want the message.
 *
 * A failure that a setting would avoid names it in fix_option, by its option name ("on_error",
 * "overwrite", "allow_mixed"), and the value to give it in fix_value (NULL for a switch to turn
 * on): the library never names a command-line flag, and each front end says it in its own terms
 * (`--on-error skip` on the command line, `on_error: skip` in a config file). */
typedef struct ig_err {
    ig_status status;
    char msg[IG_ERR_MSG_MAX];
    const char *fix_option; /* static string, or NULL */
    const char *fix_value;  /* static string, or NULL */
} ig_err;

/* Records a failure in err (which may be NULL) and returns status, so that a function can say
 * `return ig_err_set(err, IG_ERR_FORMAT, "%s:%zu: expected ...", path, line);`. */
ig_status ig_err_set(ig_err *err, ig_status status, const char *fmt, ...) IG_PRINTF(3, 4);
ig_status ig_err_setv(ig_err *err, ig_status status, const char *fmt, va_list ap);

/* Like ig_err_set, and appends ": " and strerror(errno_value). */
ig_status ig_err_errno(ig_err *err, int errno_value, const char *fmt, ...) IG_PRINTF(3, 4);

/* Prepends context and ": " to the message already in err ("reading shard X" gives "reading
 * shard X: <message>"), and returns status (which err keeps), so that a caller can say
 * `if (st != IG_OK) return ig_err_prefix(err, st, "reading shard %s", path);`. With err NULL it
 * only returns status. */
ig_status ig_err_prefix(ig_err *err, ig_status status, const char *fmt, ...) IG_PRINTF(3, 4);

/* Clears err back to IG_OK with an empty message. */
void ig_err_clear(ig_err *err);

/* Records the option (and value) that would avoid the failure in err (see ig_err); returns
 * err's status (IG_ERR_INTERNAL when err is NULL, which callers should not rely on). The strings
 * must be static. ig_err_set and ig_err_errno clear them; ig_err_prefix keeps them. */
ig_status ig_err_fix(ig_err *err, const char *option, const char *value);

/* ---- allocator ----------------------------------------------------------------------------- */

/* A pluggable allocator: ingot's library memory comes from it, so tests inject failing
 * allocators through it. alloc returns size bytes aligned to align (a power of two, at least 16;
 * kernels ask for 64) or NULL; realloc behaves as realloc(3) for blocks allocated with align 16;
 * free(NULL) is a no-op.
 *
 * What goes through it: everything a handle made with a context owns (shard writers and readers,
 * the text pipeline and its record readers, encoders, token vectors given a context, loaders,
 * models, ...). What does not: plain result structs that the caller frees without a context
 * (ig_manifest's sources, shard and input lists, ig_preprocess_stats' shard names: malloc'd, as
 * their headers say), core's file and hashing helpers, and third-party libraries' own memory (zstd,
 * jansson, libfyaml, FFmpeg, stdio). */
typedef struct ig_allocator {
    void *(*alloc)(void *user, size_t size, size_t align);
    void *(*realloc)(void *user, void *ptr, size_t size);
    void (*free)(void *user, void *ptr);
    void *user;
} ig_allocator;

#define IG_ALIGN_DEFAULT 16 /* what ig_alloc gives */
#define IG_ALIGN_KERNEL  64 /* a cache line: what compute buffers get */

/* ---- context ------------------------------------------------------------------------------- */

typedef enum ig_log_level {
    IG_LOG_DEBUG = 0,
    IG_LOG_INFO,
    IG_LOG_WARN,
    IG_LOG_ERROR,
    IG_LOG_OFF
} ig_log_level;

/* A log sink. Called with the formatted message (no trailing newline). May be called from any
 * thread; the context serialises calls. */
typedef void (*ig_log_fn)(void *user, ig_log_level level, const char *msg);

typedef struct ig_ctx_opts {
    ig_log_level log_level;        /* messages below this level are dropped; default INFO */
    ig_log_fn log_fn;              /* NULL: write "ingot: LEVEL: msg" lines to stderr */
    void *log_user;                /* passed to log_fn */
    const ig_allocator *allocator; /* NULL: malloc/realloc/free; copied, must outlive nothing */
    int threads;                   /* threads of the pool, the caller's included; 0: online CPUs */
    int spin_us; /* how long idle pool threads spin before sleeping; default 50; 0 with more
                    threads than cores (oversubscribed mpirun) */
    int rank;    /* this process's rank among `world` (0 when alone) */
    int world;   /* number of processes (1 when alone) */
} ig_ctx_opts;

ig_ctx_opts ig_ctx_opts_default(void);

/* The context: logger, allocator, thread pool and rank. Everything that would otherwise be a global
 * lives here, so two contexts in one process never collide. A context may be shared by threads
 * for logging, allocation and parallel loops. */
typedef struct ig_ctx ig_ctx;

ig_status ig_ctx_create(ig_ctx **out, const ig_ctx_opts *opts, ig_err *err);
void ig_ctx_free(ig_ctx *ctx); /* NULL is a no-op */

int ig_ctx_rank(const ig_ctx *ctx);
int ig_ctx_world(const ig_ctx *ctx);
int ig_ctx_threads(const ig_ctx *ctx);
ig_log_level ig_ctx_log_level(const ig_ctx *ctx);
void ig_ctx_set_log_level(ig_ctx *ctx, ig_log_level level);

void ig_log(ig_ctx *ctx, ig_log_level level, const char *fmt, ...) IG_PRINTF(3, 4);
#define ig_debug(ctx, ...) ig_log((ctx), IG_LOG_DEBUG, __VA_ARGS__)
#define ig_info(ctx, ...)  ig_log((ctx), IG_LOG_INFO, __VA_ARGS__)
#define ig_warn(ctx, ...)  ig_log((ctx), IG_LOG_WARN, __VA_ARGS__)

/* Allocation through the context's allocator. ig_alloc/ig_calloc/ig_realloc return NULL on
 * failure (the caller reports IG_ERR_NOMEM); ig_free(ctx, NULL) is a no-op. ig_calloc checks
 * n*size for overflow. ig_alloc_aligned aligns to align (a power of two >= 16; IG_ALIGN_KERNEL
 * for compute buffers); such a block must not be passed to ig_realloc. ctx may be NULL: then
 * malloc, posix_memalign, realloc and free (for library code whose context is optional). */
void *ig_alloc(ig_ctx *ctx, size_t size);
void *ig_alloc_aligned(ig_ctx *ctx, size_t size, size_t align);
void *ig_calloc(ig_ctx *ctx, size_t n, size_t size);
void *ig_realloc(ig_ctx *ctx, void *ptr, size_t size);
void ig_free(ig_ctx *ctx, void *ptr);
char *ig_strdup(ig_ctx *ctx, const char *s);
/* A formatted string allocated through ctx (NULL when out of memory). */
char *ig_asprintf(ig_ctx *ctx, const char *fmt, ...) IG_PRINTF(2, 3);

/* Runs fn(arg, begin, end, worker) over [0, n) cut into chunks of grain items ([0, grain),
 * [grain, 2*grain), ...; the last may be shorter) on the context's pool, the calling thread
 * included, and returns when all are done. The chunks depend on n and grain only, never on the
 * thread count, so work that keeps one result per chunk is the same for any thread count.
 * `worker` is in [0, ig_ctx_threads(ctx)) and unique among the threads running this call's
 * chunks: it can index per-thread scratch. Several threads may call at once (the calls share the
 * pool); a call from inside a chunk runs inline. Overhead: about a microsecond per call while the
 * pool is busy (tools/bench/bench_pool). */
typedef void (*ig_range_fn)(void *arg, size_t begin, size_t end, int worker);
void ig_parallel_range(ig_ctx *ctx, size_t n, size_t grain, ig_range_fn fn, void *arg);

/* ig_parallel_range with chunks of one item: fn(arg, i, worker) for each i in [0, n). */
typedef void (*ig_parallel_fn)(void *arg, size_t i, int worker);
void ig_parallel_for(ig_ctx *ctx, size_t n, ig_parallel_fn fn, void *arg);

/* ---- counter-based random numbers (rng.c) ------------------------------------------------ */

/* Philox4x32-10, as Random123 and cuRAND define it: four 32-bit words from a 128-bit counter and a
 * 64-bit key. Stateless and thread-safe. */
void ig_philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Random numbers keyed by (seed, name) and indexed by element: element i of the tensor NAME draws
 * from counter i (normals: pair i/2) under the key, so any slice of any tensor can be drawn by any
 * rank or thread, alone, with the same bits. Nothing is stateful: there is no generator to save. */
typedef struct ig_rng_key {
    uint32_t k[2];
} ig_rng_key;

/* The key of (seed, name): xxh3 of both (name may be NULL). */
ig_rng_key ig_rng_key_make(uint64_t seed, const char *name);
/* The four words of counter i. */
void ig_rng_u32x4(ig_rng_key key, uint64_t i, uint32_t out[4]);
/* A uniform double in [0, 1) (53 bits) for element i. */
double ig_rng_uniform(ig_rng_key key, uint64_t i);
/* A standard normal for element i: Box-Muller on counter i/2, cos for even i, sin for odd. */
double ig_rng_normal(ig_rng_key key, uint64_t i);
/* out[k] = mean + std * ig_rng_normal(key, first + k) for k < n, in float, on the context's pool
 * (ctx may be NULL: this thread). Any split of [first, first + n) gives the same numbers. */
void ig_rng_fill_normal(ig_ctx *ctx, ig_rng_key key, uint64_t first, size_t n, float mean,
                        float std, float *out);

/* ---- bf16 ---------------------------------------------------------------------------------- */

/* fp32 -> bf16 rounded to nearest, ties to even (as torch's .to(torch.bfloat16)); a value that
 * rounds past the largest bf16 becomes infinity; every NaN becomes the quiet NaN 0x7FC0. bf16 ->
 * fp32 is exact. The one definition of the rounding, inline so that loops over it vectorise: the
 * backends' conversions (kernels/), the CPU's bf16 kernels and MPI's bf16 sum use it, and the
 * CUDA kernels give the same bits. */
static inline uint16_t ig_bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : r);
}
static inline float ig_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- hashing (xxHash) ---------------------------------------------------------------------- */

typedef struct ig_hash128 {
    uint64_t lo, hi;
} ig_hash128;

uint64_t ig_xxh3_64(const void *data, size_t len);
ig_hash128 ig_xxh3_128(const void *data, size_t len);

/* Streaming XXH3-64; create/free pair. */
typedef struct ig_xxh3_stream ig_xxh3_stream;
ig_xxh3_stream *ig_xxh3_stream_create(void); /* NULL when out of memory */
void ig_xxh3_stream_update(ig_xxh3_stream *s, const void *data, size_t len);
uint64_t ig_xxh3_stream_digest(const ig_xxh3_stream *s);
/* Makes dst's state src's (a mark to go back to: data hashed ahead and then dropped). */
void ig_xxh3_stream_copy(ig_xxh3_stream *dst, const ig_xxh3_stream *src);
void ig_xxh3_stream_free(ig_xxh3_stream *s);

/* Hex form of a 64-bit digest: 16 lowercase hex digits and a NUL. */
void ig_hash64_hex(uint64_t h, char out[17]);

/* XXH3-64 of a whole file, read in streaming fashion. */
ig_status ig_file_xxh3(const char *path, uint64_t *out, ig_err *err);

/* ---- files --------------------------------------------------------------------------------- */

/* A read-only memory map of a whole file. An empty file maps to data == NULL, size == 0. */
typedef struct ig_mapped_file {
    const uint8_t *data;
    size_t size;
    char *path; /* owned copy of the path, for messages */
} ig_mapped_file;

ig_status ig_mapped_file_open(ig_mapped_file *mf, const char *path, ig_err *err);
void ig_mapped_file_close(ig_mapped_file *mf); /* safe on a zeroed or closed struct */

/* Reads a whole regular file of at most max bytes into a NUL-terminated heap buffer (free with
 * free()). A device, pipe or directory is IG_ERR_INVALID_ARG (never read: /dev/zero would fill
 * memory, a FIFO hang), as is a file larger than max: give each kind of file its cap. */
ig_status ig_read_file_max(const char *path, size_t max, char **out, size_t *out_len, ig_err *err);
/* ig_read_file_max without a size cap, for files the program itself chose (benchmarks, tests). */
ig_status ig_read_file(const char *path, char **out, size_t *out_len, ig_err *err);

/* A JSON file read whole (manifests, shard lists, tokenizer files), the one way ingot reads one:
 * a regular file of at most max_bytes (as ig_read_file_max: a FIFO, a device, a directory or a
 * larger file is IG_ERR_INVALID_ARG, never read), parsed with duplicate keys and "\u0000"
 * refused: a parse error is IG_ERR_FORMAT "PATH:LINE:COLUMN: malformed JSON in WHAT: ..." (what
 * names the kind of file, e.g. "a shard manifest"; NULL: "this file"). On IG_OK *out is the
 * root (json_decref it); on failure NULL. Thread-safe. */
struct json_t; /* jansson's json_t */
ig_status ig_json_load_file(const char *path, size_t max_bytes, const char *what,
                            struct json_t **out, ig_err *err);

/* A temporary's path beside path: "PATH.SUFFIX", or, when that name would be longer than a file
 * name may be (NAME_MAX) though PATH's own fits, "DIR/<start of PATH's name>.~<xxh3 of the
 * name>.SUFFIX". malloc'd; NULL when out of memory. */
char *ig_temp_path(const char *path, const char *suffix);

/* The one check of an output path before anything is written there (ig_atomic_file_create runs
 * it, so every writer does): a path that does not exist is IG_OK; an existing regular file is
 * IG_OK with overwrite (--force) and IG_ERR_EXISTS without; anything else - a directory, a pipe,
 * a device, a socket, a symbolic link to one of those or to nothing - is IG_ERR_INVALID_ARG naming
 * what it is, whatever overwrite says: ingot never replaces what is not a regular file. A symbolic
 * link to a regular file is written through: the file it names is replaced, the link stays. */
ig_status ig_output_check(const char *path, int overwrite, ig_err *err);
/* Refuses two outputs of one command that name the same file by any spelling ("a/../x" and "x",
 * a link and the file it names): IG_ERR_INVALID_ARG naming both. NULL and "" entries are skipped.
 */
ig_status ig_outputs_distinct(const char *const *paths, size_t n, ig_err *err);
/* What a file of st_mode mode is, for messages: "regular file", "directory", "pipe",
 * "character device", "block device", "socket", "symbolic link". */
const char *ig_file_kind(unsigned mode);

/* An atomic file writer: writes go to a temporary (ig_temp_path(PATH, "tmp.<pid>.<n>")) in the
 * same directory, and messages name PATH, never the temporary; commit flushes,
 * fsyncs, renames over PATH and fsyncs the directory, so a crash leaves either no PATH (or the
 * old one) or the complete new one. abort (or free without commit) removes the temporary. PATH is
 * judged by ig_output_check at create and again before the rename: with overwrite == 0 an
 * existing PATH is IG_ERR_EXISTS; what is not a regular file is never replaced; a link to a
 * regular file is written through (the temporary sits beside the file it names). Not
 * thread-safe. */
typedef struct ig_atomic_file ig_atomic_file;

ig_status ig_atomic_file_create(ig_atomic_file **out, const char *path, int overwrite, ig_err *err);
ig_status ig_atomic_file_write(ig_atomic_file *af, const void *data, size_t len, ig_err *err);
/* Reserves the next len bytes of the file for ig_atomic_file_write_at (they count as written:
 * later writes go after them) and returns their offset. The caller must write all of them before
 * commit; unwritten bytes read as zeros. */
ig_status ig_atomic_file_reserve(ig_atomic_file *af, uint64_t len, uint64_t *offset, ig_err *err);
/* Writes data at offset, inside a range reserved before (pwrite, past the stream's buffer).
 * Thread-safe for disjoint ranges, alongside no other call on af. */
ig_status ig_atomic_file_write_at(ig_atomic_file *af, const void *data, size_t len, uint64_t offset,
                                  ig_err *err);
FILE *ig_atomic_file_stream(ig_atomic_file *af); /* the stdio stream of the temporary */
const char *ig_atomic_file_temp_path(const ig_atomic_file *af);
uint64_t ig_atomic_file_size(const ig_atomic_file *af); /* bytes written so far */
/* Cuts the file back to its first size bytes (size <= ig_atomic_file_size): bytes written and then
 * found not to belong (a video that failed half-way through its clip) go, later writes follow
 * them. Not with reserved ranges still to write past size. */
ig_status ig_atomic_file_truncate(ig_atomic_file *af, uint64_t size, ig_err *err);
/* Commits and frees af (also on failure, after removing the temporary). */
ig_status ig_atomic_file_commit(ig_atomic_file *af, ig_err *err);
/* Commits afs[0..n) in order, as that many ig_atomic_file_commit calls would (each file is in
 * place, its directory synced, before the next is moved), and frees them all (also on failure):
 * the files' fsyncs overlap, every one's write-back started before the first waits, and none is
 * moved before all are synced. On failure: when a file cannot be written or synced, none is in
 * place; when one cannot be moved into place, those before it are; the rest are removed. */
ig_status ig_atomic_files_commit(ig_atomic_file *const *afs, size_t n, ig_err *err);
/* Removes the temporary and frees af. NULL is a no-op. */
void ig_atomic_file_abort(ig_atomic_file *af);

/* Writes a whole buffer to path atomically. */
ig_status ig_write_file_atomic(const char *path, const void *data, size_t len, int overwrite,
                               ig_err *err);

/* fsyncs the directory holding path (after a rename into it). */
ig_status ig_fsync_parent_dir(const char *path, ig_err *err);

int ig_file_exists(const char *path);

/* Removes path: a file, or a directory and everything under it (symbolic links are removed, never
 * followed). A path that does not exist is IG_OK; the first entry that cannot be removed is an
 * error naming it. */
ig_status ig_remove_tree(const char *path, ig_err *err);

/* mkdir -p: creates path and every missing directory above it (mode 0755). A directory that
 * exists is IG_OK; a file in the way is an error naming it. */
ig_status ig_mkdir_p(const char *path, ig_err *err);

/* Parses sizes such as "1GB", "512MiB", "4096", "1.5G" into bytes. K/M/G/T are powers of 1000,
 * Ki/Mi/Gi/Ti powers of 1024; a trailing B is optional. */
ig_status ig_parse_size(const char *s, uint64_t *out, ig_err *err);
/* Formats bytes as "1.23 GB" into buf. Returns buf. */
char *ig_format_bytes(double bytes, char *buf, size_t cap);
/* The edit distance (insertions, deletions, substitutions) between two strings of at most 127
 * bytes each (longer: SIZE_MAX, never "close"), for did-you-mean suggestions. */
size_t ig_edit_distance(const char *a, const char *b);

/* madvise(MADV_HUGEPAGE) over the whole pages of a large array that will be written and read at
 * random (fewer TLB misses and page faults): a hint, ignored where unsupported and for arrays
 * under 4 MiB. Call it before the first touch. */
void ig_advise_hugepages(void *p, size_t n);

/* pthread_create for the library's own threads (pool, loader, pipeline): the new thread starts
 * with every asynchronous signal blocked, so that SIGINT, SIGTERM and the like reach the program's
 * main thread and its handlers, never a worker in the middle of a system call. Returns
 * pthread_create's result. */
int ig_thread_start(void *thread, void *(*fn)(void *), void *arg); /* thread: a pthread_t * */

/* The memory this process can take now (core/memory.c): what is free, not what is installed. */
typedef struct ig_memory_info {
    uint64_t usable;        /* what one request may take: available less a tenth */
    uint64_t available;     /* the smallest of the figures below */
    const char *source;     /* which figure that is, e.g. "the cgroup's memory limit" (static) */
    uint64_t mem_available; /* MemAvailable of /proc/meminfo (else physical memory) */
    uint64_t cgroup_limit;  /* the binding cgroup level's limit (v2 memory.max, v1
                               memory.limit_in_bytes), UINT64_MAX: none */
    uint64_t cgroup_usage;  /* and its usage (memory.current, memory.usage_in_bytes) */
    uint64_t as_limit;      /* RLIMIT_AS (ulimit -v); UINT64_MAX: none */
    uint64_t as_used;       /* and the address space mapped now (VmSize) */
} ig_memory_info;

/* Reads the figures now. Test hook: with IG_FAULT_MEMORY_ROOT=DIR in the environment, the files
 * are read under DIR (DIR/proc/meminfo, DIR/proc/self/cgroup, DIR/proc/self/status,
 * DIR/sys/fs/cgroup/...) instead of /, so that a test controls what it sees. Thread-safe. */
void ig_memory_query(ig_memory_info *out);
/* ig_memory_query's usable figure; *what (may be NULL) names its source. */
uint64_t ig_memory_limit(const char **what);
/* Before allocating something large: IG_OK when need bytes fit in what this process can take
 * now (ig_memory_info.usable), else IG_ERR_INVALID_ARG "WHAT needs N GB of memory, more than the
 * M GB this process can take now (MemAvailable ...; cgroup: ...; ulimit -v: ..., bound by ...,
 * less a tenth kept free): FIX" (fix may be NULL), so that a request that cannot fit is refused
 * with the figures instead of ending in the kernel's OOM killer. */
ig_status ig_memory_check(uint64_t need, const char *what, const char *fix, ig_err *err);

/* Monotonic time in seconds. */
double ig_now(void);

/* ---- progress ------------------------------------------------------------------------------ */

/* A progress reporter for long work. On a TTY it redraws one line in place with the count, rate
 * and ETA (when the total is known); on anything else it prints a plain line at most every
 * `interval` seconds (default 5). Thread-safe: ig_progress_add may be called from any thread. */
typedef struct ig_progress ig_progress;

typedef struct ig_progress_opts {
    const char *label; /* e.g. "preprocess" */
    const char *unit;  /* e.g. "docs" */
    uint64_t total;    /* 0 when unknown: no percentage and no ETA */
    int bytes;         /* 1: count is bytes, shown as MB and MB/s */
    FILE *out;         /* default stderr */
    int force_tty;     /* -1: detect with isatty; 0: plain lines; 1: redraw in place */
    double interval;   /* seconds between plain lines; default 5 */
    int disabled;      /* 1: print nothing (--quiet) */
} ig_progress_opts;

ig_progress_opts ig_progress_opts_default(void);
ig_status ig_progress_create(ig_progress **out, const ig_progress_opts *opts, ig_err *err);
void ig_progress_add(ig_progress *p, uint64_t n);
/* Sets an extra text shown after the rate, e.g. "12.3 Mtok/s". Thread-safe. */
void ig_progress_set_extra(ig_progress *p, const char *text);
/* Prints the final line (with a newline on a TTY) and frees p. NULL is a no-op. */
void ig_progress_finish(ig_progress *p);

/* ---- configuration (YAML via libfyaml) ----------------------------------------------------- */

/* A typed configuration schema, declared once per module beside the options struct it fills: each
 * key has a dotted path (its YAML key, also what `--set path=value` names), a type, a default and
 * a line of help, and may name a command-line flag and a field of the struct. A YAML file, `--set`
 * overrides and the flags then all fill the same field through the one table: an option is
 * written once. An unknown key, a wrong type or a value out of range is reported with file:line
 * (or the flag) and the key's dotted path, with a did-you-mean. */
typedef enum ig_cfg_type {
    IG_CFG_INT,
    IG_CFG_FLOAT,
    IG_CFG_BOOL,
    IG_CFG_STRING,
    IG_CFG_ENUM, /* one of `choices` by name; bound as an int holding its index */
    IG_CFG_SIZE, /* a byte size: "1GB" (10^9), "512MiB" (2^29), "4096"; bound as a uint64_t */
    IG_CFG_LIST  /* strings: a YAML sequence (or one scalar), or `--set k=[a, b]`; bound as a
                    const char *const * with a size_t count; a repeated flag appends */
} ig_cfg_type;

typedef struct ig_cfg_key {
    const char *path; /* dotted path, e.g. "model.n_layer" */
    ig_cfg_type type;
    const char *default_val; /* text, parsed as if it came from --set (lists: "a,b"; "" empty) */
    const char *help;        /* one line */
    /* The command-line flag, without dashes: NULL gives the path's last component with '_' as
     * '-' ("n_layer" -> --n-layer); "" means no flag (config only). */
    const char *flag;
    /* The field the value is bound to (ig_config_bind): size 0 means not bound. */
    size_t offset, size;
    int is_signed;              /* an integer field's signedness */
    size_t count_offset;        /* IG_CFG_LIST: the size_t count beside the array */
    const char *const *choices; /* IG_CFG_ENUM: the names, NULL-terminated */
    double min, max;            /* IG_CFG_INT/FLOAT/SIZE: allowed range when min < max */
} ig_cfg_key;

/* A key bound to nothing (read with the getters below). */
#define IG_KEY(p, t, d, h)                                                                         \
    { .path = (p), .type = (t), .default_val = (d), .help = (h) }

/* Key declarations bound to field F of struct T (_Generic reads the field's signedness). */
#define IG_CFG_FIELD_(T, F) offsetof(T, F), sizeof(((T *)0)->F)
#define IG_CFG_SIGNED_(T, F)                                                                       \
    _Generic((((T *)0)->F), unsigned char : 0, unsigned short : 0, unsigned int : 0,               \
             unsigned long : 0, unsigned long long : 0, default : 1)
#define IG_KEY_INT(path, T, F, def, lo, hi, help)                                                  \
    {                                                                                              \
        path, IG_CFG_INT, def, help, NULL, IG_CFG_FIELD_(T, F), IG_CFG_SIGNED_(T, F), 0, NULL, lo, \
            hi                                                                                     \
    }
#define IG_KEY_FLOAT(path, T, F, def, lo, hi, help)                                                \
    { path, IG_CFG_FLOAT, def, help, NULL, IG_CFG_FIELD_(T, F), 1, 0, NULL, lo, hi }
#define IG_KEY_BOOL(path, T, F, def, help)                                                         \
    { path, IG_CFG_BOOL, def, help, NULL, IG_CFG_FIELD_(T, F), 1, 0, NULL, 0, 0 }
#define IG_KEY_STRING(path, T, F, def, help)                                                       \
    { path, IG_CFG_STRING, def, help, NULL, IG_CFG_FIELD_(T, F), 0, 0, NULL, 0, 0 }
#define IG_KEY_ENUM(path, T, F, def, choices, help)                                                \
    { path, IG_CFG_ENUM, def, help, NULL, IG_CFG_FIELD_(T, F), 1, 0, choices, 0, 0 }
#define IG_KEY_SIZE(path, T, F, def, help)                                                         \
    { path, IG_CFG_SIZE, def, help, NULL, IG_CFG_FIELD_(T, F), 0, 0, NULL, 0, 0 }
#define IG_KEY_LIST(path, T, F, N, def, help)                                                      \
    { path, IG_CFG_LIST, def, help, NULL, IG_CFG_FIELD_(T, F), 0, offsetof(T, N), NULL, 0, 0 }

typedef struct ig_config ig_config;

/* Creates a configuration with every key at its default. keys must outlive the config. */
ig_status ig_config_create(ig_config **out, const ig_cfg_key *keys, size_t n_keys, ig_err *err);
/* Adds another table of keys (another module's, or a program's own) at their defaults: one
 * configuration over several schemas. The same checks as create. */
ig_status ig_config_add_keys(ig_config *cfg, const ig_cfg_key *keys, size_t n_keys, ig_err *err);
void ig_config_free(ig_config *cfg);
/* Loads a YAML file of nested mappings over the current values: a regular file of at most
 * IG_YAML_FILE_MAX bytes, read as ig_yaml_load_string reads it. */
ig_status ig_config_load_file(ig_config *cfg, const char *path, ig_err *err);
/* Loads YAML text (name is used in messages in place of a file name). */
ig_status ig_config_load_string(ig_config *cfg, const char *text, size_t len, const char *name,
                                ig_err *err);
/* Applies one "a.b=c" override (the value is parsed as a YAML scalar of the key's type; a list
 * takes a flow sequence "[a, b]" or one item). */
ig_status ig_config_set(ig_config *cfg, const char *assignment, ig_err *err);
/* Sets key `path` from text, recording origin (e.g. "--workers") for messages and
 * ig_config_origin; with append, a list key gets the item appended (the first append after the
 * default or a file replaces the list: flags given on the command line are the list). */
ig_status ig_config_set_text(ig_config *cfg, const char *path, const char *text, const char *origin,
                             int append, ig_err *err);

/* ---- YAML settings files ---- */

/* The most a settings file (a config, video buckets) may be: a config is a few KB. */
#define IG_YAML_FILE_MAX ((size_t)16 << 20)
/* The most keys, values and list items one settings file may hold (configs hold hundreds). */
#define IG_YAML_MAX_NODES 200000

struct fy_document; /* libfyaml's */

/* Parses text as a settings file, the one way ingot reads YAML. Refused with
 * "NAME:LINE:COLUMN: what, how to fix" (IG_ERR_CONFIG): a NUL byte, bytes that are not UTF-8, a
 * YAML syntax error, a second document, anchors and aliases (never expanded), more than
 * IG_YAML_MAX_NODES nodes, a key that is not a scalar, a key given twice in one mapping, and the
 * single-quoted strings libfyaml 0.7 misreads (two escaped quotes in a row). Time and memory grow
 * linearly with the text. On IG_OK, *out is the document (free it with fy_document_destroy; it
 * refers to text, which must outlive it), or NULL for an empty file (blank lines, comments).
 * Thread-safe. */
ig_status ig_yaml_load_string(struct fy_document **out, const char *text, size_t len,
                              const char *name, ig_err *err);

/* Writes every key of table (one given to create or add_keys) that is bound into the struct at
 * dst. Strings and lists point into cfg: it must outlive their use. */
ig_status ig_config_bind(const ig_config *cfg, const ig_cfg_key *table, size_t n, void *dst,
                         ig_err *err);

/* The keys, in the order they were declared (every table's). */
size_t ig_config_n_keys(const ig_config *cfg);
const ig_cfg_key *ig_config_key(const ig_config *cfg, size_t i);
/* The key of a command-line flag (without dashes), or NULL. */
const ig_cfg_key *ig_config_key_of_flag(const ig_config *cfg, const char *flag);
/* A key's flag ("n-layer" for model.n_layer unless declared otherwise), or NULL when it has
 * none; written into buf. */
const char *ig_config_flag_name(const ig_cfg_key *k, char *buf, size_t cap);

/* Getters: the key must be declared with that type (a programmer error otherwise: asserts). */
int64_t ig_config_int(const ig_config *cfg, const char *path);
double ig_config_float(const ig_config *cfg, const char *path);
int ig_config_bool(const ig_config *cfg, const char *path);
const char *ig_config_string(const ig_config *cfg, const char *path); /* owned by cfg */
int ig_config_enum(const ig_config *cfg, const char *path);           /* the choice's index */
uint64_t ig_config_size(const ig_config *cfg, const char *path);
const char *const *ig_config_list(const ig_config *cfg, const char *path, size_t *n);
/* Where the current value came from: "default", "FILE:LINE", "--set" or a flag. Owned by cfg. */
const char *ig_config_origin(const ig_config *cfg, const char *path);
/* 1 when the key is not at its default (set by a file, --set or a flag). */
int ig_config_is_set(const ig_config *cfg, const char *path);
/* xxh3 of the whole configuration as dumped (every value, not the origins): two processes with
 * the same hash run the same configuration. */
uint64_t ig_config_hash(const ig_config *cfg);
/* Writes the whole configuration as YAML (nested mappings) to out. */
ig_status ig_config_dump(const ig_config *cfg, FILE *out, ig_err *err);
/* Like ig_config_dump, with a comment after each value naming its origin ("# default",
 * "# FILE:LINE", "# --set"), as `ingot config show` prints it. */
ig_status ig_config_dump_origins(const ig_config *cfg, FILE *out, ig_err *err);

/* ---- ingot's loadable modules (module.c) ------------------------------------------------- */

/* A module is a part of ingot built as its own shared library, libingot_NAME.so, that the
 * program loads when it is first asked for, so that what it links costs nothing to the commands
 * that never use it. One today: "cuda", the CUDA backend and the NCCL communicator (whose CUDA
 * runtime, cuBLASLt, cuDNN and NCCL took a third of a second to load and initialise at every
 * start, `ingot --help` included). A module calls back into the program that loads it (the
 * program exports those functions: cmake/cuda_module_imports.txt), so it belongs to the build
 * that made the program.
 *
 * Where a module is looked for, first found wins:
 *   1. $IG_MODULE_DIR/libingot_NAME.so, when IG_MODULE_DIR is set (and only there);
 *   2. the program's own directory (of /proc/self/exe): a build directory, or an unpacked tree;
 *   3. the install directory compiled in (IG_MODULE_INSTALL_DIR: PREFIX/lib/ingot);
 *   4. the dynamic loader's search path (LD_LIBRARY_PATH, the program's RUNPATH, ld.so.cache). */

/* Writes where module NAME would be loaded from into buf: a path (return 1), or, when it is in
 * none of the directories above, the places looked in (return 0; step 4 is then still tried by
 * ig_module_symbol). Thread-safe; loads nothing. */
int ig_module_find(const char *name, char *buf, size_t cap);

/* Loads module NAME (once per process: later calls find it loaded) and sets *out to the address
 * of its function or object SYMBOL. what names, for the messages, what needs the module ("the
 * CUDA backend"). Fails with IG_ERR_UNSUPPORTED when the module is not found, or a library it
 * needs is missing or too old ("the CUDA backend needs libcublasLt.so.13, which is not found on
 * this machine (...)"), with the loader's own words and where the module was; IG_ERR_NOT_FOUND
 * when the module has no SYMBOL (a module of another build). A loaded module stays loaded until
 * the process ends (the CUDA libraries cannot be unloaded safely). Thread-safe. */
ig_status ig_module_symbol(const char *name, const char *symbol, const char *what, void **out,
                           ig_err *err);

/* What a module's entry object starts with, so that a program takes only the module of its own
 * build: the version it was built as and the sizes of the tables it fills. */
typedef struct ig_module_stamp {
    const char *version; /* IG_VERSION_STRING of the module's build */
    size_t ops_size;     /* sizeof the operations table the entry fills (ig_backend_ops, ...) */
    size_t obj_size;     /* sizeof the object it makes (struct ig_backend, struct ig_comm) */
} ig_module_stamp;

/* ig_module_symbol of an entry object whose first member is an ig_module_stamp, checked against
 * this build's version and the sizes given: IG_ERR_UNSUPPORTED, naming both versions, for a
 * module of another build. */
ig_status ig_module_entry(const char *name, const char *symbol, const char *what, size_t ops_size,
                          size_t obj_size, const void **out, ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_CORE_H */
