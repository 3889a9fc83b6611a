/* gpt_index.c - Megatron-Core's GPTDataset indices in C (DESIGN 4).
 *
 * Given the sequence lengths of an indexed dataset, a range of sequences (a split), seq_len,
 * num_samples and a seed, this builds exactly the three arrays of Megatron-Core's
 * GPTDataset._build_document_sample_shuffle_indices:
 *   - document index: the sequence ids of the range repeated num_epochs times and shuffled by
 *     numpy.random.RandomState(seed); when the last epoch is needed only partly (fewer samples
 *     from it than 80% of an epoch), the first E-1 epochs and the last one are shuffled apart
 *     ("separate_final_epoch") so the partial epoch does not skew the mix;
 *   - sample index: [position in the document index, offset] where each sample of seq_len + 1
 *     tokens starts (helpers.cpp build_sample_idx; consecutive samples share one token);
 *   - shuffle index: a permutation of the samples, again drawn by the same generator, the samples
 *     of a separate final epoch shuffled among themselves after the others.
 * A sample i is then read through shuffle[i] and two consecutive rows of the sample index.
 *
 * Speed: the shuffles and the walk over the shuffled document index are random memory accesses,
 * so both prefetch a fixed distance ahead; the arrays get transparent huge pages.
 */
#include "sampling_internal.h"

#include <stdlib.h>
#include <string.h>

#define GPT_INDEX_FORMAT 1 /* bump when the layout or the semantics of the cache change */
#define GPT_KIND         "gpt"
#define LENGTH_PREFETCH  32 /* documents ahead of the sample-index walk */

enum {
    META_SEQ_LEN,
    META_REQUESTED,
    META_SEED,
    META_BEGIN,
    META_END,
    META_EPOCHS,
    META_TOKENS,
    META_SEPARATE,
    META_SAMPLES
};

struct ig_gpt_index {
    ig_ctx *ctx;
    uint32_t seq_len, seed;
    uint64_t requested, num_samples, epochs, tokens_per_epoch;
    uint64_t seq_begin, seq_end;
    int separate, from_cache;
    uint64_t key;
    int32_t *lengths; /* lengths[s - seq_begin] for s in the range (owned copy) */
    const int32_t *doc;
    uint64_t n_doc;
    const int64_t *sample; /* [num_samples + 1][2] */
    const int64_t *shuffle;
    void *heap_doc, *heap_sample, *heap_shuffle; /* when built here */
    ig_icache_entry cache;                       /* when loaded */
    double t_doc, t_sample, t_shuffle;
};

ig_gpt_index_opts ig_gpt_index_opts_default(void) {
    ig_gpt_index_opts o;
    memset(&o, 0, sizeof o);
    o.seq_len = 2048;
    o.num_samples = 1;
    o.seed = 1234;
    return o;
}

uint64_t ig_gpt_num_epochs(uint64_t tokens_per_epoch, uint32_t seq_len, uint64_t num_samples) {
    uint64_t requested = num_samples * seq_len + 1;
    return (requested + tokens_per_epoch - 1) / tokens_per_epoch; /* >= 1 as requested >= 1 */
}

uint64_t ig_gpt_sample_count(uint64_t tokens_per_epoch, uint32_t seq_len, uint64_t epochs) {
    return (epochs * tokens_per_epoch - 1) / seq_len;
}

ig_status ig_gpt_build_sample_index(const int32_t *lengths, const int32_t *doc_index,
                                    uint64_t n_doc, uint32_t seq_len, uint64_t n_samples,
                                    int64_t *out, ig_err *err) {
    int64_t d = 0;   /* position in the document index */
    int64_t off = 0; /* offset in that document */
    const int64_t last = (int64_t)n_doc - 1;
    /* lengths[doc_index[d]] is a random read (the document index is shuffled): prefetch it a
     * fixed distance ahead of the walk. */
    for (int64_t p = 0; p < LENGTH_PREFETCH && p <= last; p++)
        __builtin_prefetch(&lengths[doc_index[p]], 0, 0);
    out[0] = 0;
    out[1] = 0;
    for (uint64_t k = 1; k <= n_samples; k++) {
        int64_t remaining = (int64_t)seq_len + 1;
        for (;;) {
            int64_t len = (int64_t)lengths[doc_index[d]] - off;
            remaining -= len;
            if (remaining <= 0) {
                off += remaining + len - 1; /* the sample's last token starts the next one */
                break;
            }
            if (d == last) { /* out of documents: only possible for the final, partial sample */
                if (k != n_samples)
                    return ig_err_set(err, IG_ERR_INTERNAL,
                                      "sample index: documents ran out at sample %llu of %llu",
                                      (unsigned long long)k, (unsigned long long)n_samples);
                off = (int64_t)lengths[doc_index[d]] - 1;
                break;
            }
            d++;
            off = 0;
            if (d + LENGTH_PREFETCH <= last)
                __builtin_prefetch(&lengths[doc_index[d + LENGTH_PREFETCH]], 0, 0);
        }
        out[2 * k] = d;
        out[2 * k + 1] = off;
    }
    return IG_OK;
}

uint64_t ig_gpt_index_compute_key(const int32_t *lengths, uint64_t begin, uint64_t end,
                                  uint32_t seq_len, uint64_t num_samples, uint32_t seed) {
    static const char tag[] = "ingot gpt index";
    uint64_t words[7] = {GPT_INDEX_FORMAT, seq_len, num_samples, seed, begin, end, 1 /* +1 */};
    ig_xxh3_stream *s = ig_xxh3_stream_create();
    if (!s) return 0;
    ig_xxh3_stream_update(s, tag, sizeof tag);
    ig_xxh3_stream_update(s, words, sizeof words);
    ig_xxh3_stream_update(s, lengths + begin, (end - begin) * sizeof *lengths);
    uint64_t h = ig_xxh3_stream_digest(s);
    ig_xxh3_stream_free(s);
    return h;
}

/* ---- building ------------------------------------------------------------------------------ */

typedef struct build_job {
    ig_gpt_index *idx;
    ig_mt19937 *mt;
    const int32_t *all_lengths;
    uint64_t shuffle_first; /* size of the first shuffle range */
    ig_status st;
    ig_err err;
} build_job;

/* Phase 1, item 0: the document index, shuffled by the seeded generator; item 1 meanwhile
 * touches the sample and shuffle arrays (first-touch page faults off the critical path) and
 * fills the shuffle index with the identity. */
static void build_phase1(void *arg, size_t part, int worker) {
    (void)worker;
    build_job *job = arg;
    ig_gpt_index *idx = job->idx;
    double t0 = ig_now();
    if (part == 0) {
        const uint64_t n_docs = idx->seq_end - idx->seq_begin, E = idx->epochs;
        int32_t *doc = idx->heap_doc;
        for (uint64_t e = 0; e < E; e++)
            for (uint64_t k = 0; k < n_docs; k++)
                doc[e * n_docs + k] = (int32_t)(idx->seq_begin + k);
        if (idx->separate) {
            ig_mt19937_shuffle_i32(job->mt, doc, (E - 1) * n_docs);
            ig_mt19937_shuffle_i32(job->mt, doc + (E - 1) * n_docs, n_docs);
        } else {
            ig_mt19937_shuffle_i32(job->mt, doc, idx->n_doc);
        }
        idx->t_doc = ig_now() - t0;
    } else {
        memset(idx->heap_sample, 0, (idx->num_samples + 1) * 2 * sizeof(int64_t));
        int64_t *sh = idx->heap_shuffle;
        for (uint64_t i = 0; i < idx->num_samples; i++) sh[i] = (int64_t)i;
        idx->t_shuffle = ig_now() - t0;
    }
}

/* Phase 2: the sample index (a walk over the shuffled documents, item 0) and the shuffle index
 * (the rest of the random stream, item 1) depend only on the document index: built at once. */
static void build_phase2(void *arg, size_t part, int worker) {
    (void)worker;
    build_job *job = arg;
    ig_gpt_index *idx = job->idx;
    double t0 = ig_now();
    if (part == 0) {
        job->st = ig_gpt_build_sample_index(job->all_lengths, idx->doc, idx->n_doc, idx->seq_len,
                                            idx->num_samples, idx->heap_sample, &job->err);
        idx->t_sample = ig_now() - t0;
    } else {
        int64_t *sh = idx->heap_shuffle;
        ig_mt19937_shuffle_i64(job->mt, sh, job->shuffle_first);
        ig_mt19937_shuffle_i64(job->mt, sh + job->shuffle_first,
                               idx->num_samples - job->shuffle_first);
        idx->t_shuffle += ig_now() - t0;
    }
}

/* 1 when the document, sample and shuffle indices of E epochs over n_docs sequences and ns
 * samples have sizes that 64-bit (and size_t) arithmetic can hold: an absurd num_samples must be
 * an error, never a wrapped, too-short allocation. */
static int index_fits(uint64_t E, uint64_t n_docs, uint64_t ns) {
    uint64_t n_doc, doc_bytes, sample_bytes, shuffle_bytes;
    return !__builtin_mul_overflow(E, n_docs, &n_doc) &&
           !__builtin_mul_overflow(n_doc, (uint64_t)sizeof(int32_t), &doc_bytes) &&
           ns < UINT64_MAX &&
           !__builtin_mul_overflow(ns + 1, (uint64_t)2 * sizeof(int64_t), &sample_bytes) &&
           !__builtin_mul_overflow(ns, (uint64_t)sizeof(int64_t), &shuffle_bytes) &&
           doc_bytes <= SIZE_MAX && sample_bytes <= SIZE_MAX && shuffle_bytes <= SIZE_MAX;
}

static ig_status build_arrays(ig_gpt_index *idx, const int32_t *all_lengths, ig_err *err) {
    const uint64_t n_docs = idx->seq_end - idx->seq_begin;
    const uint64_t E = idx->epochs, T = idx->tokens_per_epoch;
    uint64_t sans = 0;
    idx->separate = 0;
    if (E > 1) {
        sans = ig_gpt_sample_count(T, idx->seq_len, E - 1);
        uint64_t per_epoch = (T - 1) / idx->seq_len;
        uint64_t from_final = idx->requested - sans; /* >= 0 by the choice of E */
        idx->separate = (int64_t)from_final < (int64_t)(0.80 * (double)per_epoch);
    }
    idx->n_doc = E * n_docs; /* checked by index_fits */
    idx->heap_doc = ig_alloc(idx->ctx, idx->n_doc * sizeof(int32_t));
    idx->heap_sample = ig_alloc(idx->ctx, (idx->num_samples + 1) * 2 * sizeof(int64_t));
    idx->heap_shuffle = ig_alloc(idx->ctx, (idx->num_samples ? idx->num_samples : 1) * 8);
    if (!idx->heap_doc || !idx->heap_sample || !idx->heap_shuffle)
        return ig_err_set(err, IG_ERR_NOMEM,
                          "out of memory for a GPT index of %llu samples (%llu documents)",
                          (unsigned long long)idx->num_samples, (unsigned long long)idx->n_doc);
    ig_advise_hugepages(idx->heap_doc, idx->n_doc * sizeof(int32_t));
    ig_advise_hugepages(idx->heap_sample, (idx->num_samples + 1) * 2 * sizeof(int64_t));
    ig_advise_hugepages(idx->heap_shuffle, idx->num_samples * sizeof(int64_t));
    idx->doc = idx->heap_doc;
    idx->sample = idx->heap_sample;
    idx->shuffle = idx->heap_shuffle;

    ig_mt19937 mt;
    ig_mt19937_seed(&mt, idx->seed);
    build_job job = {.idx = idx, .mt = &mt, .all_lengths = all_lengths, .st = IG_OK};
    job.shuffle_first = idx->separate ? sans : idx->num_samples;
    ig_parallel_for(idx->ctx, 2, build_phase1, &job);
    ig_parallel_for(idx->ctx, 2, build_phase2, &job);
    if (job.st != IG_OK) {
        if (err) *err = job.err;
        return job.st;
    }
    return IG_OK;
}

static void store_cache(ig_gpt_index *idx, const char *dir) {
    ig_err err = {0};
    uint64_t meta[IG_ICACHE_META] = {0};
    meta[META_SEQ_LEN] = idx->seq_len;
    meta[META_REQUESTED] = idx->requested;
    meta[META_SEED] = idx->seed;
    meta[META_BEGIN] = idx->seq_begin;
    meta[META_END] = idx->seq_end;
    meta[META_EPOCHS] = idx->epochs;
    meta[META_TOKENS] = idx->tokens_per_epoch;
    meta[META_SEPARATE] = (uint64_t)idx->separate;
    meta[META_SAMPLES] = idx->num_samples;
    const void *arrays[3] = {idx->doc, idx->sample, idx->shuffle};
    uint64_t counts[3] = {idx->n_doc, 2 * (idx->num_samples + 1), idx->num_samples};
    uint32_t sizes[3] = {4, 8, 8};
    if (ig_icache_store(dir, GPT_KIND, idx->key, meta, 3, arrays, counts, sizes, &err) != IG_OK)
        ig_warn(idx->ctx, "could not save the GPT index to the cache (continuing): %s", err.msg);
}

/* Uses a validated cache entry when its parameters are ours. */
static int adopt_cache(ig_gpt_index *idx, ig_icache_entry *e) {
    const uint64_t *m = e->meta;
    uint64_t n_doc = idx->epochs * (idx->seq_end - idx->seq_begin);
    if (m[META_SEQ_LEN] != idx->seq_len || m[META_REQUESTED] != idx->requested ||
        m[META_SEED] != idx->seed || m[META_BEGIN] != idx->seq_begin ||
        m[META_END] != idx->seq_end || m[META_EPOCHS] != idx->epochs ||
        m[META_TOKENS] != idx->tokens_per_epoch || m[META_SAMPLES] != idx->num_samples ||
        e->n_arrays != 3 || e->count[0] != n_doc || e->elem_size[0] != 4 ||
        e->count[1] != 2 * (idx->num_samples + 1) || e->elem_size[1] != 8 ||
        e->count[2] != idx->num_samples || e->elem_size[2] != 8)
        return 0;
    idx->cache = *e;
    idx->separate = (int)m[META_SEPARATE];
    idx->n_doc = n_doc;
    idx->doc = e->array[0];
    idx->sample = e->array[1];
    idx->shuffle = e->array[2];
    idx->from_cache = 1;
    return 1;
}

static int try_cache(ig_gpt_index *idx, const char *dir, int log_damage) {
    ig_icache_entry e;
    ig_err err = {0};
    ig_status st = ig_icache_load(&e, dir, GPT_KIND, idx->key, &err);
    if (st == IG_OK) {
        if (adopt_cache(idx, &e)) return 1;
        ig_icache_entry_close(&e);
        if (log_damage) ig_warn(idx->ctx, "GPT index cache entry has other parameters: rebuilding");
    } else if (st != IG_ERR_NOT_FOUND && log_damage) {
        ig_warn(idx->ctx, "%s", err.msg);
    }
    return 0;
}

ig_status ig_gpt_index_plan(const int32_t *seq_lengths, uint64_t n_seqs,
                            const ig_gpt_index_opts *opts, ig_gpt_plan *out, ig_err *err) {
    memset(out, 0, sizeof *out);
    const char *name = opts->name ? opts->name : "dataset";
    uint64_t begin = opts->seq_begin, end = opts->seq_end ? opts->seq_end : n_seqs;
    if (opts->seq_len < 2)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: seq_len %u is too small: samples need seq_len >= 2", name,
                          opts->seq_len);
    if (opts->num_samples == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: num_samples is 0: ask for at least one sample", name);
    if (n_seqs == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: the dataset is empty (no sequences): nothing to sample", name);
    if (end > n_seqs || begin >= end)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: sequence range [%llu, %llu) is empty or outside the %llu "
                          "sequences of the dataset",
                          name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)n_seqs);
    if (n_seqs > (uint64_t)INT32_MAX)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: %llu sequences: Megatron's int32 document index holds at most "
                          "2^31-1; split the dataset into several blend sources",
                          name, (unsigned long long)n_seqs);
    uint64_t tokens = 0;
    for (uint64_t s = begin; s < end; s++) {
        if (seq_lengths[s] < 0)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: sequence %llu has negative length %d", name,
                              (unsigned long long)s, seq_lengths[s]);
        tokens += (uint64_t)seq_lengths[s];
    }
    if (tokens == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: the dataset is empty: sequences [%llu, %llu) hold no tokens", name,
                          (unsigned long long)begin, (unsigned long long)end);
    if (tokens < (uint64_t)opts->seq_len + 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: seq_len %u is longer than the data: sequences [%llu, %llu) hold "
                          "only %llu tokens, one sample needs %llu; use a smaller seq_len or "
                          "more data",
                          name, opts->seq_len, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)tokens, (unsigned long long)opts->seq_len + 1);
    if (opts->num_samples > (UINT64_MAX / 4) / opts->seq_len)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: num_samples %llu is too large", name,
                          (unsigned long long)opts->num_samples);
    uint64_t epochs = ig_gpt_num_epochs(tokens, opts->seq_len, opts->num_samples);
    uint64_t ns = ig_gpt_sample_count(tokens, opts->seq_len, epochs);
    if (!index_fits(epochs, end - begin, ns))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: %llu samples over %llu sequences (%llu epochs) need an "
                          "index larger than memory can address: ask for fewer samples",
                          name, (unsigned long long)ns, (unsigned long long)(end - begin),
                          (unsigned long long)epochs);
    *out = (ig_gpt_plan){.begin = begin,
                         .end = end,
                         .tokens = tokens,
                         .epochs = epochs,
                         .num_samples = ns,
                         /* what build_arrays allocates, and the copy of the lengths; these
                          * cannot overflow: index_fits checked each */
                         .bytes = epochs * (end - begin) * 4 + (ns + 1) * 16 + ns * 8 +
                                  (end - begin) * 4};
    return IG_OK;
}

/* The plan's memory, against what the machine has: refused with both figures before anything is
 * allocated (a blend of 10^9 samples at seq_len 16 was killed by the OOM killer at 24 GB). */
static ig_status check_memory(const ig_gpt_plan *pl, const char *name, ig_err *err) {
    char what[512];
    snprintf(what, sizeof what, "%s: a GPT index of %llu samples over %llu sequences (%llu epochs)",
             name, (unsigned long long)pl->num_samples, (unsigned long long)(pl->end - pl->begin),
             (unsigned long long)pl->epochs);
    return ig_memory_check(pl->bytes, what,
                           "ask for fewer samples or a longer seq_len, or run where there is "
                           "more memory",
                           err);
}

ig_status ig_gpt_index_build(ig_gpt_index **out, ig_ctx *ctx, const int32_t *seq_lengths,
                             uint64_t n_seqs, const ig_gpt_index_opts *opts, ig_err *err) {
    *out = NULL;
    const char *name = opts->name ? opts->name : "dataset";
    ig_gpt_plan plan;
    ig_status pst = ig_gpt_index_plan(seq_lengths, n_seqs, opts, &plan, err);
    if (pst != IG_OK) return pst;
    uint64_t begin = plan.begin, end = plan.end;

    ig_gpt_index *idx = ig_calloc(ctx, 1, sizeof *idx);
    if (!idx) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    idx->ctx = ctx;
    idx->seq_len = opts->seq_len;
    idx->seed = opts->seed;
    idx->requested = opts->num_samples;
    idx->seq_begin = begin;
    idx->seq_end = end;
    idx->tokens_per_epoch = plan.tokens;
    idx->epochs = plan.epochs;
    idx->num_samples = plan.num_samples;
    idx->key = ig_gpt_index_compute_key(seq_lengths, begin, end, opts->seq_len, opts->num_samples,
                                        opts->seed);
    idx->lengths = ig_alloc(ctx, (end - begin) * sizeof(int32_t));
    ig_status st = IG_OK;
    if (!idx->lengths) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    memcpy(idx->lengths, seq_lengths + begin, (end - begin) * sizeof(int32_t));

    if (opts->cache_dir && *opts->cache_dir) {
        if (try_cache(idx, opts->cache_dir, 0)) goto done;
        int fd = -1;
        st = ig_icache_lock(opts->cache_dir, GPT_KIND, idx->key, &fd, err);
        if (st != IG_OK) goto fail;
        if (!try_cache(idx, opts->cache_dir, 1)) {
            st = check_memory(&plan, name, err);
            if (st == IG_OK) st = build_arrays(idx, seq_lengths, err);
            if (st == IG_OK) store_cache(idx, opts->cache_dir);
        }
        ig_icache_unlock(fd);
        if (st != IG_OK) goto fail;
    } else {
        st = check_memory(&plan, name, err);
        if (st == IG_OK) st = build_arrays(idx, seq_lengths, err);
        if (st != IG_OK) goto fail;
    }
done:
    *out = idx;
    return IG_OK;
fail:
    ig_gpt_index_free(idx);
    return st;
}

ig_status ig_gpt_index_build_dataset(ig_gpt_index **out, ig_ctx *ctx, const ig_dataset *ds,
                                     const ig_gpt_index_opts *opts, ig_err *err) {
    ig_gpt_index_opts o = *opts;
    if (!o.name && ig_dataset_num_shards(ds) > 0) o.name = ig_dataset_shard_prefix(ds, 0);
    return ig_gpt_index_build(out, ctx, ig_dataset_seq_lengths(ds), ig_dataset_sequences(ds), &o,
                              err);
}

void ig_gpt_index_free(ig_gpt_index *idx) {
    if (!idx) return;
    ig_ctx *ctx = idx->ctx;
    ig_icache_entry_close(&idx->cache);
    ig_free(ctx, idx->heap_doc);
    ig_free(ctx, idx->heap_sample);
    ig_free(ctx, idx->heap_shuffle);
    ig_free(ctx, idx->lengths);
    ig_free(ctx, idx);
}

/* ---- accessors ------------------------------------------------------------------------------ */

uint64_t ig_gpt_index_num_samples(const ig_gpt_index *idx) {
    return idx->num_samples;
}
uint64_t ig_gpt_index_requested(const ig_gpt_index *idx) {
    return idx->requested;
}
uint32_t ig_gpt_index_seq_len(const ig_gpt_index *idx) {
    return idx->seq_len;
}
uint64_t ig_gpt_index_num_epochs(const ig_gpt_index *idx) {
    return idx->epochs;
}
uint64_t ig_gpt_index_tokens_per_epoch(const ig_gpt_index *idx) {
    return idx->tokens_per_epoch;
}
int ig_gpt_index_separate_final_epoch(const ig_gpt_index *idx) {
    return idx->separate;
}
uint64_t ig_gpt_index_key(const ig_gpt_index *idx) {
    return idx->key;
}
int ig_gpt_index_from_cache(const ig_gpt_index *idx) {
    return idx->from_cache;
}

void ig_gpt_index_timings(const ig_gpt_index *idx, double *doc_s, double *sample_s,
                          double *shuffle_s) {
    if (doc_s) *doc_s = idx->t_doc;
    if (sample_s) *sample_s = idx->t_sample;
    if (shuffle_s) *shuffle_s = idx->t_shuffle;
}

const int32_t *ig_gpt_index_document_index(const ig_gpt_index *idx, uint64_t *n) {
    if (n) *n = idx->n_doc;
    return idx->doc;
}

const int64_t *ig_gpt_index_sample_index(const ig_gpt_index *idx, uint64_t *rows) {
    if (rows) *rows = idx->num_samples + 1;
    return idx->sample;
}

const int64_t *ig_gpt_index_shuffle_index(const ig_gpt_index *idx, uint64_t *n) {
    if (n) *n = idx->num_samples;
    return idx->shuffle;
}

/* ---- samples -------------------------------------------------------------------------------- */

/* Walks the spans of one sample, as GPTDataset._query_document_sample_shuffle_indices. */
typedef struct span_iter {
    const ig_gpt_index *idx;
    int64_t d, d_end, off_beg, off_end;
} span_iter;

static void span_begin(span_iter *it, const ig_gpt_index *idx, uint64_t i) {
    int64_t j = idx->shuffle[i];
    it->idx = idx;
    it->d = idx->sample[2 * j];
    it->off_beg = idx->sample[2 * j + 1];
    it->d_end = idx->sample[2 * j + 2];
    it->off_end = idx->sample[2 * j + 3];
}

/* Next non-empty span; 0 when done. */
static int span_next(span_iter *it, ig_token_span *sp) {
    const ig_gpt_index *idx = it->idx;
    while (it->d <= it->d_end) {
        int64_t d = it->d++;
        uint64_t seq = (uint64_t)idx->doc[d];
        int64_t first = it->off_beg; /* only for the first span */
        it->off_beg = 0;
        int64_t len;
        if (d == it->d_end)
            len = it->off_end - first + 1;
        else
            len = (int64_t)idx->lengths[seq - idx->seq_begin] - first;
        if (len <= 0) continue;
        sp->seq = seq;
        sp->offset = (uint64_t)first;
        sp->length = (uint64_t)len;
        return 1;
    }
    return 0;
}

size_t ig_gpt_index_sample(const ig_gpt_index *idx, uint64_t i, ig_token_span *spans, size_t cap) {
    span_iter it;
    ig_token_span sp;
    size_t n = 0;
    span_begin(&it, idx, i);
    while (span_next(&it, &sp)) {
        if (n < cap) spans[n] = sp;
        n++;
    }
    return n;
}

ig_status ig_gpt_index_read(const ig_gpt_index *idx, const ig_dataset *ds, uint64_t i, int32_t *out,
                            ig_err *err) {
    if (i >= idx->num_samples)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "sample %llu is out of range (index holds %llu)",
                          (unsigned long long)i, (unsigned long long)idx->num_samples);
    span_iter it;
    ig_token_span sp;
    uint64_t pos = 0, want = (uint64_t)idx->seq_len + 1;
    span_begin(&it, idx, i);
    while (span_next(&it, &sp)) {
        if (pos + sp.length > want)
            return ig_err_set(err, IG_ERR_INTERNAL, "sample %llu spans more than %llu tokens",
                              (unsigned long long)i, (unsigned long long)want);
        ig_status st = ig_dataset_read_tokens(ds, sp.seq, sp.offset, sp.length, out + pos, err);
        if (st != IG_OK) return st;
        pos += sp.length;
    }
    if (pos != want)
        return ig_err_set(err, IG_ERR_INTERNAL, "sample %llu has %llu tokens, expected %llu",
                          (unsigned long long)i, (unsigned long long)pos, (unsigned long long)want);
    return IG_OK;
}
