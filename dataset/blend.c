/* blend.c - weighted blends `W1 P1 W2 P2 ...` as Megatron-Core's BlendedMegatronDatasetBuilder
 * and BlendedDataset make them (DESIGN 4).
 *
 * The weights are normalized with numpy's float64 arithmetic (so that the greedy choice below,
 * which compares float products, ties and breaks exactly as Megatron's). For N requested samples,
 * source d's GPT index is built for ceil(ceil(N * w[d]) * (1 + surplus)) samples, and the blend
 * holds sum_d ceil(N * w[d]) samples: sample s comes from the source whose achieved count lags its
 * target w[d] * max(s, 1) the most (first maximum wins), and is that source's next sample.
 */
#include "sampling_internal.h"

#include <math.h>
#include <string.h>

#define BLEND_FORMAT      1
#define BLEND_KIND        "blend"
#define BLEND_MAX_SOURCES 32767 /* Megatron's dataset index is int16 */

void ig_blend_build_indices(const double *weights, size_t n, uint64_t size, int64_t *used,
                            int16_t *source, int64_t *sample) {
    memset(used, 0, n * sizeof *used);
    for (uint64_t s = 0; s < size; s++) {
        double sd = s > 1 ? (double)s : 1.0; /* max(s, 1) */
        size_t best = 0;
        double best_err = weights[0] * sd - (double)used[0];
        for (size_t d = 1; d < n; d++) {
            double e = weights[d] * sd - (double)used[d];
            if (e > best_err) {
                best_err = e;
                best = d;
            }
        }
        source[s] = (int16_t)best;
        sample[s] = used[best]++;
    }
}

/* ---- the blend ------------------------------------------------------------------------------ */

struct ig_blend {
    ig_ctx *ctx;
    size_t n;
    uint32_t seq_len;
    uint64_t size, key;
    ig_gpt_index **index;       /* [n] */
    const ig_dataset **dataset; /* [n], borrowed */
    ig_blend_source_info *info; /* [n] */
    const int16_t *source;      /* [size] */
    const int64_t *sample;      /* [size] */
    void *heap_source, *heap_sample;
    ig_icache_entry cache;
};

ig_blend_opts ig_blend_opts_default(void) {
    ig_blend_opts o;
    memset(&o, 0, sizeof o);
    o.seq_len = 2048;
    o.num_samples = 1;
    o.seed = 1234;
    o.split = ig_split_default();
    o.part = IG_SPLIT_TRAIN;
    o.surplus = 0.005;
    return o;
}

void ig_blend_free(ig_blend *b) {
    if (!b) return;
    ig_ctx *ctx = b->ctx;
    if (b->index)
        for (size_t k = 0; k < b->n; k++) ig_gpt_index_free(b->index[k]);
    ig_icache_entry_close(&b->cache);
    ig_free(ctx, b->heap_source);
    ig_free(ctx, b->heap_sample);
    ig_free(ctx, b->index);
    ig_free(ctx, (void *)b->dataset);
    ig_free(ctx, b->info);
    ig_free(ctx, b);
}

static uint64_t blend_key(const ig_blend *b, double surplus) {
    static const char tag[] = "ingot blend";
    uint64_t words[4] = {BLEND_FORMAT, b->n, b->size, 0};
    memcpy(&words[3], &surplus, 8);
    ig_xxh3_stream *s = ig_xxh3_stream_create();
    if (!s) return 0;
    ig_xxh3_stream_update(s, tag, sizeof tag);
    ig_xxh3_stream_update(s, words, sizeof words);
    for (size_t k = 0; k < b->n; k++) {
        uint64_t w[3] = {ig_gpt_index_key(b->index[k]), 0, b->info[k].target};
        memcpy(&w[1], &b->info[k].weight, 8);
        ig_xxh3_stream_update(s, w, sizeof w);
    }
    uint64_t h = ig_xxh3_stream_digest(s);
    ig_xxh3_stream_free(s);
    return h;
}

static int blend_from_cache(ig_blend *b, const char *dir) {
    ig_icache_entry e;
    ig_err err = {0};
    ig_status st = ig_icache_load(&e, dir, BLEND_KIND, b->key, &err);
    if (st != IG_OK) {
        if (st != IG_ERR_NOT_FOUND) ig_warn(b->ctx, "%s", err.msg);
        return 0;
    }
    if (e.n_arrays != 2 || e.meta[0] != b->size || e.meta[1] != b->n || e.count[0] != b->size ||
        e.elem_size[0] != 2 || e.count[1] != b->size || e.elem_size[1] != 8) {
        ig_icache_entry_close(&e);
        return 0;
    }
    const int16_t *src = e.array[0];
    for (uint64_t s = 0; s < b->size; s++)
        if (src[s] < 0 || (size_t)src[s] >= b->n) {
            ig_icache_entry_close(&e);
            return 0;
        }
    b->cache = e;
    b->source = e.array[0];
    b->sample = e.array[1];
    return 1;
}

static ig_status blend_indices(ig_blend *b, const double *w, const char *dir, ig_err *err) {
    int fd = -1;
    if (dir && *dir) {
        if (blend_from_cache(b, dir)) return IG_OK;
        ig_status st = ig_icache_lock(dir, BLEND_KIND, b->key, &fd, err);
        if (st != IG_OK) return st;
        if (blend_from_cache(b, dir)) {
            ig_icache_unlock(fd);
            return IG_OK;
        }
    }
    if (b->size > (SIZE_MAX - 1) / sizeof(int64_t)) {
        ig_icache_unlock(fd);
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a blend of %llu samples is larger than memory can address: ask for "
                          "fewer samples",
                          (unsigned long long)b->size);
    }
    b->heap_source = ig_alloc(b->ctx, b->size * sizeof(int16_t) + 1);
    b->heap_sample = ig_alloc(b->ctx, b->size * sizeof(int64_t) + 1);
    int64_t *used = ig_alloc(b->ctx, b->n * sizeof(int64_t));
    if (!b->heap_source || !b->heap_sample || !used) {
        ig_free(b->ctx, used);
        ig_icache_unlock(fd);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory for a blend of %llu samples",
                          (unsigned long long)b->size);
    }
    ig_blend_build_indices(w, b->n, b->size, used, b->heap_source, b->heap_sample);
    ig_free(b->ctx, used);
    b->source = b->heap_source;
    b->sample = b->heap_sample;
    if (fd >= 0) {
        ig_err e2 = {0};
        uint64_t meta[IG_ICACHE_META] = {b->size, b->n};
        const void *arrays[2] = {b->source, b->sample};
        uint64_t counts[2] = {b->size, b->size};
        uint32_t sizes[2] = {2, 8};
        if (ig_icache_store(dir, BLEND_KIND, b->key, meta, 2, arrays, counts, sizes, &e2) != IG_OK)
            ig_warn(b->ctx, "could not save the blend to the cache (continuing): %s", e2.msg);
        ig_icache_unlock(fd);
    }
    return IG_OK;
}

typedef struct build_one {
    ig_ctx *ctx;
    const int32_t *lengths;
    uint64_t n_seqs;
    ig_gpt_index_opts go;
    ig_gpt_index **out;
    ig_status st;
    ig_err err;
} build_one;

static void build_source(void *arg, size_t k, int worker) {
    (void)worker;
    build_one *j = (build_one *)arg + k;
    j->st = ig_gpt_index_build(j->out, j->ctx, j->lengths, j->n_seqs, &j->go, &j->err);
}

ig_status ig_blend_build(ig_blend **out, ig_ctx *ctx, const ig_blend_source *sources, size_t n,
                         const ig_blend_opts *opts, ig_err *err) {
    *out = NULL;
    if (n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "blend: no sources given");
    if (n > BLEND_MAX_SOURCES)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "blend: %zu sources, at most %d", n,
                          BLEND_MAX_SOURCES);
    if (opts->num_samples == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "blend: num_samples is 0");
    if (!(opts->surplus >= 0) || !isfinite(opts->surplus))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "blend: surplus %g must be >= 0", opts->surplus);
    for (size_t k = 0; k < n; k++) {
        const char *name = sources[k].name ? sources[k].name : "(unnamed)";
        if (!(sources[k].weight > 0) || !isfinite(sources[k].weight))
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "blend: source %zu (%s) has weight %g: weights must be finite and "
                              "> 0 (leave the source out instead of weighting it 0)",
                              k, name, sources[k].weight);
        if (!sources[k].dataset && !sources[k].seq_lengths)
            return ig_err_set(err, IG_ERR_INVALID_ARG, "blend: source %zu (%s) has no data", k,
                              name);
    }

    ig_blend *b = ig_calloc(ctx, 1, sizeof *b);
    double *raw = ig_calloc(ctx, n, sizeof(double));
    double *w = ig_calloc(ctx, n, sizeof(double));
    ig_gpt_index_opts *go = NULL;
    ig_status st = IG_OK;
    if (!b || !raw || !w) {
        ig_free(ctx, b);
        ig_free(ctx, raw);
        ig_free(ctx, w);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    b->ctx = ctx;
    b->n = n;
    b->seq_len = opts->seq_len;
    b->index = ig_calloc(ctx, n, sizeof *b->index);
    b->dataset = ig_calloc(ctx, n, sizeof *b->dataset);
    b->info = ig_calloc(ctx, n, sizeof *b->info);
    if (!b->index || !b->dataset || !b->info) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t k = 0; k < n; k++) raw[k] = sources[k].weight;
    /* normalizing divides by the sum: one that overflows would make every weight 0 (and the
     * blend empty); Megatron's numpy arithmetic would fail the same way */
    if (!isfinite(ig_numpy_sum_f64(raw, n))) {
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "blend: the weights add up to more than a double holds (the first is "
                        "%g); scale them down: only their ratios matter",
                        raw[0]);
        goto fail;
    }
    ig_normalize_weights(raw, n, w);

    /* Per-source sizes and split ranges, and what their GPT indices will take, before any is
     * built: a blend that cannot fit in memory is refused with the figures (it used to end in
     * the OOM killer after minutes of building). */
    const double N = (double)opts->num_samples;
    uint64_t need = 0;
    go = ig_calloc(ctx, n, sizeof *go);
    if (!go) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t k = 0; k < n; k++) {
        ig_blend_source_info *in = &b->info[k];
        const ig_blend_source *src = &sources[k];
        const char *name = src->name ? src->name
                           : src->dataset && ig_dataset_num_shards(src->dataset)
                               ? ig_dataset_shard_prefix(src->dataset, 0)
                               : "(unnamed)";
        const int32_t *lengths =
            src->dataset ? ig_dataset_seq_lengths(src->dataset) : src->seq_lengths;
        uint64_t n_seqs = src->dataset ? ig_dataset_sequences(src->dataset) : src->n_seqs;
        in->weight = w[k];
        double target = ceil(N * w[k]);
        in->target = (uint64_t)target;
        in->requested = (uint64_t)ceil(target * (1.0 + opts->surplus));
        b->size += in->target;
        b->dataset[k] = src->dataset;
        st = ig_split_range(&opts->split, opts->part, n_seqs, &in->seq_begin, &in->seq_end, err);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "blend source %zu (%s)", k, name);
            goto fail;
        }
        go[k] = ig_gpt_index_opts_default();
        go[k].seq_len = opts->seq_len;
        go[k].num_samples = in->requested ? in->requested : 1;
        go[k].seed = opts->seed;
        go[k].seq_begin = in->seq_begin;
        go[k].seq_end = in->seq_end;
        go[k].cache_dir = opts->cache_dir;
        go[k].name = name;
        ig_gpt_plan plan;
        st = ig_gpt_index_plan(lengths, n_seqs, &go[k], &plan, err);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "blend source %zu", k);
            goto fail;
        }
        need += plan.bytes;
    }
    need += b->size * (sizeof(int16_t) + sizeof(int64_t)) + n * sizeof(int64_t);
    if (!(opts->cache_dir && *opts->cache_dir)) { /* cached indices are mapped, not built */
        char what[256];
        snprintf(what, sizeof what,
                 "a blend of %llu samples over %zu sources (with their GPT indices)",
                 (unsigned long long)b->size, n);
        st = ig_memory_check(need, what,
                             "ask for fewer samples or a longer seq_len, or run where there is "
                             "more memory",
                             err);
        if (st != IG_OK) goto fail;
    }
    /* the sources' indices are independent: built at once on the context's pool (one source per
     * thread; errors are reported for the first failing source, in order) */
    build_one *jobs = ig_calloc(ctx, n, sizeof *jobs);
    if (!jobs) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t k = 0; k < n; k++) {
        const ig_blend_source *src = &sources[k];
        jobs[k] = (build_one){
            .ctx = ctx,
            .lengths = src->dataset ? ig_dataset_seq_lengths(src->dataset) : src->seq_lengths,
            .n_seqs = src->dataset ? ig_dataset_sequences(src->dataset) : src->n_seqs,
            .go = go[k],
            .out = &b->index[k]};
    }
    ig_parallel_for(ctx, n, build_source, jobs);
    for (size_t k = 0; k < n && st == IG_OK; k++)
        if (jobs[k].st != IG_OK) {
            if (err) *err = jobs[k].err;
            st = ig_err_prefix(err, jobs[k].st, "blend source %zu", k);
        }
    ig_free(ctx, jobs);
    if (st != IG_OK) goto fail;
    for (size_t k = 0; k < n; k++) {
        b->info[k].built = ig_gpt_index_num_samples(b->index[k]);
        b->info[k].epochs = ig_gpt_index_num_epochs(b->index[k]);
    }
    ig_free(ctx, go);
    go = NULL;

    b->key = blend_key(b, opts->surplus);
    st = blend_indices(b, w, opts->cache_dir, err);
    if (st != IG_OK) goto fail;

    for (uint64_t s = 0; s < b->size; s++) b->info[b->source[s]].drawn++;
    for (size_t k = 0; k < n; k++) {
        ig_blend_source_info *in = &b->info[k];
        const char *name = sources[k].name ? sources[k].name : "(unnamed)";
        in->achieved = b->size ? (double)in->drawn / (double)b->size : 0.0;
        if (in->drawn > in->built) {
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "blend source %zu (%s): the blend draws %llu samples from it but its "
                            "index holds %llu; raise the surplus (now %g)",
                            k, name, (unsigned long long)in->drawn, (unsigned long long)in->built,
                            opts->surplus);
            goto fail;
        }
        if (in->epochs > 1 && !opts->quiet)
            ig_warn(ctx,
                    "blend source %zu (%s): weight %.4f asks for %llu samples, more than one "
                    "epoch of its data: it is repeated over %llu epochs",
                    k, name, in->weight, (unsigned long long)in->requested,
                    (unsigned long long)in->epochs);
    }
    ig_free(ctx, raw);
    ig_free(ctx, w);
    *out = b;
    return IG_OK;
fail:
    ig_free(ctx, go);
    ig_free(ctx, raw);
    ig_free(ctx, w);
    ig_blend_free(b);
    return st;
}

uint64_t ig_blend_num_samples(const ig_blend *b) {
    return b->size;
}
size_t ig_blend_num_sources(const ig_blend *b) {
    return b->n;
}
uint32_t ig_blend_seq_len(const ig_blend *b) {
    return b->seq_len;
}
uint64_t ig_blend_key(const ig_blend *b) {
    return b->key;
}
ig_blend_source_info ig_blend_source_stats(const ig_blend *b, size_t k) {
    return b->info[k];
}
const ig_gpt_index *ig_blend_source_index(const ig_blend *b, size_t k) {
    return b->index[k];
}
const int16_t *ig_blend_dataset_index(const ig_blend *b) {
    return b->source;
}
const int64_t *ig_blend_dataset_sample_index(const ig_blend *b) {
    return b->sample;
}

void ig_blend_lookup(const ig_blend *b, uint64_t i, uint32_t *source, uint64_t *sample_in_source) {
    *source = (uint32_t)b->source[i];
    *sample_in_source = (uint64_t)b->sample[i];
}

ig_status ig_blend_read(const ig_blend *b, uint64_t i, int32_t *out, ig_err *err) {
    if (i >= b->size)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "blend sample %llu is out of range (%llu)",
                          (unsigned long long)i, (unsigned long long)b->size);
    size_t d = (size_t)b->source[i];
    if (!b->dataset[d])
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "blend source %zu was given as bare lengths: it has no tokens", d);
    return ig_gpt_index_read(b->index[d], b->dataset[d], (uint64_t)b->sample[i], out, err);
}
