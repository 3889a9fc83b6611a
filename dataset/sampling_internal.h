/* sampling_internal.h - private to dataset/: the pieces behind the GPT sample index, splits and
 * blends (DESIGN 4): numpy's legacy MT19937 generator and its shuffle, the Megatron-Core index
 * builders, numpy's float64 sum, and the on-disk index cache. Tests include it to check each
 * piece against numpy; no other module may.
 */
#ifndef INGOT_SAMPLING_INTERNAL_H
#define INGOT_SAMPLING_INTERNAL_H

#include "dataset/dataset.h"

/* ---- numpy.random.RandomState (legacy MT19937) -------------------------------------------- */

#define IG_MT_N 624

typedef struct ig_mt19937 {
    uint32_t key[IG_MT_N];
    int pos;
} ig_mt19937;

/* As numpy.random.RandomState(seed) for an int seed in [0, 2^32). */
void ig_mt19937_seed(ig_mt19937 *mt, uint32_t seed);
/* The next raw 32-bit output (RandomState._bit_generator.random_raw()). */
uint32_t ig_mt19937_next32(ig_mt19937 *mt);
/* numpy's next_uint64 for MT19937: the first 32-bit output is the high half. */
uint64_t ig_mt19937_next64(ig_mt19937 *mt);
/* numpy's random_interval(max): uniform in [0, max] by masked rejection (32-bit draws when
 * max < 2^32, 64-bit draws otherwise). */
uint64_t ig_mt19937_interval(ig_mt19937 *mt, uint64_t max);
/* RandomState.shuffle on a 1-d array: for i = n-1 .. 1, swap a[i] with a[random_interval(i)]. */
void ig_mt19937_shuffle_i32(ig_mt19937 *mt, int32_t *a, uint64_t n);
void ig_mt19937_shuffle_i64(ig_mt19937 *mt, int64_t *a, uint64_t n);

/* ---- numpy arithmetic -------------------------------------------------------------------- */

/* numpy.sum of a float64 array (pairwise summation, as numpy's reduction does). */
double ig_numpy_sum_f64(const double *a, size_t n);
/* Megatron's utils.normalize: w / numpy.sum(w). */
void ig_normalize_weights(const double *w, size_t n, double *out);

/* ---- Megatron-Core index builders (gpt_dataset.py, helpers.cpp) ------------------------------ */

/* Smallest E >= 1 with E * tokens_per_epoch >= num_samples * seq_len + 1. */
uint64_t ig_gpt_num_epochs(uint64_t tokens_per_epoch, uint32_t seq_len, uint64_t num_samples);

/* Rows - 1 of the sample index: (epochs * tokens_per_epoch - 1) / seq_len. */
uint64_t ig_gpt_sample_count(uint64_t tokens_per_epoch, uint32_t seq_len, uint64_t epochs);

/* build_sample_idx (drop_last_partial_sequence, add_extra_token_to_sequence): fills
 * out[2 * (n_samples + 1)] with [document_index position, offset] pairs. IG_ERR_INTERNAL when the
 * documents run out before n_samples (cannot happen for a consistent n_samples). */
ig_status ig_gpt_build_sample_index(const int32_t *lengths, const int32_t *doc_index,
                                    uint64_t n_doc, uint32_t seq_len, uint64_t n_samples,
                                    int64_t *out, ig_err *err);

/* build_blending_indices: for each s < size, the source d maximizing w[d]*max(s,1) - used[d]
 * (first maximum wins) and the count of d's samples used before s. used[n] is scratch. */
void ig_blend_build_indices(const double *weights, size_t n, uint64_t size, int64_t *used,
                            int16_t *source, int64_t *sample);

/* ---- the index cache (index_cache.c) ----------------------------------------------------- */

#define IG_ICACHE_META   16 /* u64 words of parameters stored in the header */
#define IG_ICACHE_ARRAYS 4  /* arrays per file, at most */

/* One cache file: "<dir>/<kind>-<key hex>.igx". Arrays are 64-byte aligned in the file, so a
 * mapped entry can be used in place. */
typedef struct ig_icache_entry {
    ig_mapped_file mf; /* the mapping (data == NULL when not loaded) */
    uint64_t meta[IG_ICACHE_META];
    const void *array[IG_ICACHE_ARRAYS];
    uint64_t count[IG_ICACHE_ARRAYS];
    uint32_t elem_size[IG_ICACHE_ARRAYS];
    uint32_t n_arrays;
} ig_icache_entry;

/* Path of the cache file (and, with suffix ".lock", of its lock file) into buf. */
ig_status ig_icache_path(char *buf, size_t cap, const char *dir, const char *kind, uint64_t key,
                         const char *suffix, ig_err *err);
/* Maps and validates a cache file (magic, version, kind, key, sizes, xxh3 of the payload).
 * IG_ERR_NOT_FOUND when absent; IG_ERR_FORMAT / IG_ERR_CHECKSUM when damaged. */
ig_status ig_icache_load(ig_icache_entry *e, const char *dir, const char *kind, uint64_t key,
                         ig_err *err);
void ig_icache_entry_close(ig_icache_entry *e);
/* Writes a cache file atomically (temporary, fsync, rename). */
ig_status ig_icache_store(const char *dir, const char *kind, uint64_t key,
                          const uint64_t meta[IG_ICACHE_META], uint32_t n_arrays,
                          const void *const *arrays, const uint64_t *counts,
                          const uint32_t *elem_sizes, ig_err *err);
/* Creates dir (and parents) when missing, takes an exclusive flock(2) on its lock file for
 * (kind, key), blocking while another process holds it. *fd_out is the lock; release it with
 * ig_icache_unlock. */
ig_status ig_icache_lock(const char *dir, const char *kind, uint64_t key, int *fd_out, ig_err *err);
void ig_icache_unlock(int fd);

/* ---- helpers shared by gpt_index.c and blend.c ------------------------------------------- */

/* What building a GPT index with these options means, found before anything is allocated: the
 * checks of ig_gpt_index_build (with its messages), the range, tokens, epochs and samples, and
 * the bytes of heap its build takes. */
typedef struct ig_gpt_plan {
    uint64_t begin, end, tokens, epochs, num_samples, bytes;
} ig_gpt_plan;
ig_status ig_gpt_index_plan(const int32_t *seq_lengths, uint64_t n_seqs,
                            const ig_gpt_index_opts *opts, ig_gpt_plan *out, ig_err *err);

/* The xxh3 of what determines a GPT index (see ig_gpt_index_key). */
uint64_t ig_gpt_index_compute_key(const int32_t *lengths, uint64_t begin, uint64_t end,
                                  uint32_t seq_len, uint64_t num_samples, uint32_t seed);

#endif /* INGOT_SAMPLING_INTERNAL_H */
