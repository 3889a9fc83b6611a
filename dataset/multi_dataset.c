/* multi_dataset.c - one or many shard prefixes opened as one dataset: their sequences back to
 * back, in the order given. Each shard is opened (and so validated) by ig_shard_open; this file
 * adds the global numbering and an aligned copy of all sequence lengths, which the GPT index
 * reads (the .idx arrays themselves are unaligned).
 */
#include "sampling_internal.h"

#include <stdlib.h>
#include <string.h>

struct ig_dataset {
    ig_ctx *ctx;
    size_t n;
    ig_shard **shards; /* [n] */
    uint64_t *first;   /* [n + 1]: global id of each shard's first sequence; first[n] = total */
    uint64_t documents, tokens;
    int32_t *lengths; /* [first[n]] */
};

void ig_dataset_close(ig_dataset *ds) {
    if (!ds) return;
    ig_ctx *ctx = ds->ctx;
    if (ds->shards)
        for (size_t k = 0; k < ds->n; k++) ig_shard_close(ds->shards[k]);
    ig_free(ctx, ds->shards);
    ig_free(ctx, ds->first);
    ig_free(ctx, ds->lengths);
    ig_free(ctx, ds);
}

static ig_status open_shards(ig_dataset **out, ig_ctx *ctx, const char *const *prefixes, size_t n,
                             ig_err *err);

/* Expands shard lists (PREFIX.shards.json) into their shards, then opens them all as one. */
ig_status ig_dataset_open(ig_dataset **out, ig_ctx *ctx, const char *const *prefixes, size_t n,
                          ig_err *err) {
    *out = NULL;
    if (n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "no shard prefixes given");
    char **all = NULL;
    size_t n_all = 0;
    ig_status st = IG_OK;
    for (size_t k = 0; k < n && st == IG_OK; k++) {
        char **list = NULL;
        size_t m = 0;
        if ((st = ig_shard_list_expand(prefixes[k], &list, &m, err)) != IG_OK) break;
        char **grown = realloc(all, (n_all + m) * sizeof *grown);
        if (!grown) {
            ig_shard_list_free(list, m);
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            break;
        }
        all = grown;
        memcpy(all + n_all, list, m * sizeof *list);
        n_all += m;
        free(list);
    }
    if (st == IG_OK) st = open_shards(out, ctx, (const char *const *)all, n_all, err);
    ig_shard_list_free(all, n_all);
    return st;
}

static ig_status open_shards(ig_dataset **out, ig_ctx *ctx, const char *const *prefixes, size_t n,
                             ig_err *err) {
    ig_dataset *ds = ig_calloc(ctx, 1, sizeof *ds);
    if (!ds) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ds->ctx = ctx;
    ds->n = n;
    ds->shards = ig_calloc(ctx, n, sizeof *ds->shards);
    ds->first = ig_calloc(ctx, n + 1, sizeof *ds->first);
    ig_status st = IG_OK;
    if (!ds->shards || !ds->first) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t k = 0; k < n; k++) {
        st = ig_shard_open(&ds->shards[k], ctx, prefixes[k], err);
        if (st != IG_OK) goto fail;
        if (k > 0 && ig_shard_dtype(ds->shards[k]) != ig_shard_dtype(ds->shards[0])) {
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "shard %s has token dtype %s but %s has %s: shards opened as one "
                            "dataset must share a dtype (merge or re-preprocess them)",
                            prefixes[k], ig_dtype_name(ig_shard_dtype(ds->shards[k])), prefixes[0],
                            ig_dtype_name(ig_shard_dtype(ds->shards[0])));
            goto fail;
        }
        ds->first[k + 1] = ds->first[k] + ig_shard_sequences(ds->shards[k]);
        ds->documents += ig_shard_documents(ds->shards[k]);
        ds->tokens += ig_shard_tokens(ds->shards[k]);
    }
    ds->lengths = ig_alloc(ctx, (ds->first[n] ? ds->first[n] : 1) * sizeof(int32_t));
    if (!ds->lengths) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory for %llu sequence lengths",
                        (unsigned long long)ds->first[n]);
        goto fail;
    }
    ig_advise_hugepages(ds->lengths, ds->first[n] * sizeof(int32_t));
    for (size_t k = 0; k < n; k++) {
        const ig_shard *s = ds->shards[k];
        int32_t *dst = ds->lengths + ds->first[k];
        uint64_t m = ig_shard_sequences(s);
        for (uint64_t i = 0; i < m; i++) dst[i] = ig_shard_seq_length(s, i);
    }
    *out = ds;
    return IG_OK;
fail:
    ig_dataset_close(ds);
    return st;
}

size_t ig_dataset_num_shards(const ig_dataset *ds) {
    return ds->n;
}
const ig_shard *ig_dataset_shard(const ig_dataset *ds, size_t k) {
    return k < ds->n ? ds->shards[k] : NULL;
}
uint64_t ig_dataset_sequences(const ig_dataset *ds) {
    return ds->first[ds->n];
}
uint64_t ig_dataset_documents(const ig_dataset *ds) {
    return ds->documents;
}
uint64_t ig_dataset_tokens(const ig_dataset *ds) {
    return ds->tokens;
}
const int32_t *ig_dataset_seq_lengths(const ig_dataset *ds) {
    return ds->lengths;
}

ig_status ig_dataset_read_tokens(const ig_dataset *ds, uint64_t seq, uint64_t off, uint64_t n,
                                 int32_t *out, ig_err *err) {
    if (seq >= ds->first[ds->n])
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "sequence %llu is out of range: the dataset has %llu",
                          (unsigned long long)seq, (unsigned long long)ds->first[ds->n]);
    /* The shard holding seq: the last k with first[k] <= seq (few shards: binary search). */
    size_t lo = 0, hi = ds->n - 1;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (ds->first[mid] <= seq)
            lo = mid;
        else
            hi = mid - 1;
    }
    return ig_shard_read_tokens(ds->shards[lo], seq - ds->first[lo], off, n, out, err);
}
