/* multi_dataset.c - one or many shard prefixes opened as one dataset: their sequences back to
 * back, in the order given. Each shard is opened (and so validated) by ig_shard_open; this file
 * adds the global numbering and an aligned copy of all sequence lengths, which the GPT index
 * reads (the .idx arrays themselves are unaligned).
 *
 * Mappings: a shard open holds two (its .bin and .idx), and the kernel caps a process's mappings
 * (vm.max_map_count, 65530 by default), so a dataset of many shards cannot keep them all open: a
 * shard list of 60,000 entries failed with "cannot map ...: Cannot allocate memory". Up to
 * IG_DATASET_OPEN_MAX shards stay open from ig_dataset_open on, as before; beyond that every
 * shard is opened once to check it and copy its lengths, then closed, and reads open the shard
 * they need, keeping the IG_DATASET_OPEN_MAX most recently used open (a reader holds a reference
 * while it copies, so a shard is never closed under it).
 */
#include "sampling_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct shard_slot {
    char *prefix;
    ig_shard *open; /* NULL while closed (lazy datasets) */
    uint32_t refs;  /* readers copying from it */
    uint64_t used;  /* the dataset's clock at its last use */
    int has_manifest;
    char tokenizer[64];
    uint64_t tokenizer_hash;
} shard_slot;

struct ig_dataset {
    ig_ctx *ctx;
    size_t n;
    shard_slot *slot; /* [n] */
    uint64_t *first;  /* [n + 1]: global id of each shard's first sequence; first[n] = total */
    uint64_t documents, tokens;
    int32_t *lengths; /* [first[n]] */
    ig_dtype dtype;
    int lazy; /* more shards than IG_DATASET_OPEN_MAX: opened on demand */
    pthread_mutex_t mu;
    size_t n_open;
    uint64_t clock;
};

void ig_dataset_close(ig_dataset *ds) {
    if (!ds) return;
    ig_ctx *ctx = ds->ctx;
    if (ds->slot)
        for (size_t k = 0; k < ds->n; k++) {
            ig_shard_close(ds->slot[k].open);
            ig_free(ctx, ds->slot[k].prefix);
        }
    if (ds->lazy) pthread_mutex_destroy(&ds->mu);
    ig_free(ctx, ds->slot);
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

/* Checks shard k (open as s) against the first and records what the dataset keeps of it. */
static ig_status note_shard(ig_dataset *ds, size_t k, const ig_shard *s, ig_err *err) {
    if (k == 0) ds->dtype = ig_shard_dtype(s);
    if (ig_shard_dtype(s) != ds->dtype)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "shard %s has token dtype %s but %s has %s: shards opened as one "
                          "dataset must share a dtype (merge or re-preprocess them)",
                          ds->slot[k].prefix, ig_dtype_name(ig_shard_dtype(s)), ds->slot[0].prefix,
                          ig_dtype_name(ds->dtype));
    const ig_manifest *m = ig_shard_manifest(s);
    shard_slot *sl = &ds->slot[k];
    if (m) {
        sl->has_manifest = 1;
        memcpy(sl->tokenizer, m->tokenizer, sizeof sl->tokenizer);
        sl->tokenizer_hash = m->tokenizer_hash;
    }
    ds->first[k + 1] = ds->first[k] + ig_shard_sequences(s);
    ds->documents += ig_shard_documents(s);
    ds->tokens += ig_shard_tokens(s);
    return IG_OK;
}

static ig_status open_shards(ig_dataset **out, ig_ctx *ctx, const char *const *prefixes, size_t n,
                             ig_err *err) {
    ig_dataset *ds = ig_calloc(ctx, 1, sizeof *ds);
    if (!ds) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ds->ctx = ctx;
    ds->n = n;
    ds->slot = ig_calloc(ctx, n, sizeof *ds->slot);
    ds->first = ig_calloc(ctx, n + 1, sizeof *ds->first);
    ig_status st = IG_OK;
    if (!ds->slot || !ds->first) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t k = 0; k < n; k++)
        if (!(ds->slot[k].prefix = ig_strdup(ctx, prefixes[k]))) {
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
            goto fail;
        }
    ds->lazy = n > IG_DATASET_OPEN_MAX;
    if (ds->lazy) pthread_mutex_init(&ds->mu, NULL);
    /* every shard opened (validated) once; a lazy dataset closes each before the next, so its
     * lengths are copied as it goes */
    for (size_t k = 0; k < n; k++) {
        ig_shard *s = NULL;
        if ((st = ig_shard_open(&s, ctx, prefixes[k], err)) != IG_OK) goto fail;
        if ((st = note_shard(ds, k, s, err)) != IG_OK) {
            ig_shard_close(s);
            goto fail;
        }
        if (ds->lazy) {
            uint64_t m = ig_shard_sequences(s), have = ds->first[k];
            int32_t *grown = ig_realloc(ctx, ds->lengths, (have + m ? have + m : 1) * 4);
            if (!grown) {
                ig_shard_close(s);
                st = ig_err_set(err, IG_ERR_NOMEM, "out of memory for %llu sequence lengths",
                                (unsigned long long)(have + m));
                goto fail;
            }
            ds->lengths = grown;
            for (uint64_t i = 0; i < m; i++) ds->lengths[have + i] = ig_shard_seq_length(s, i);
            ig_shard_close(s);
        } else {
            ds->slot[k].open = s;
        }
    }
    if (!ds->lazy) {
        ds->lengths = ig_alloc(ctx, (ds->first[n] ? ds->first[n] : 1) * sizeof(int32_t));
        if (!ds->lengths) {
            st = ig_err_set(err, IG_ERR_NOMEM, "out of memory for %llu sequence lengths",
                            (unsigned long long)ds->first[n]);
            goto fail;
        }
        ig_advise_hugepages(ds->lengths, ds->first[n] * sizeof(int32_t));
        for (size_t k = 0; k < n; k++) {
            const ig_shard *s = ds->slot[k].open;
            int32_t *dst = ds->lengths + ds->first[k];
            uint64_t m = ig_shard_sequences(s);
            for (uint64_t i = 0; i < m; i++) dst[i] = ig_shard_seq_length(s, i);
        }
        ds->n_open = n;
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
    return k < ds->n && !ds->lazy ? ds->slot[k].open : NULL;
}
const char *ig_dataset_shard_prefix(const ig_dataset *ds, size_t k) {
    return k < ds->n ? ds->slot[k].prefix : NULL;
}
int ig_dataset_shard_tokenizer(const ig_dataset *ds, size_t k, const char **name, uint64_t *hash) {
    if (k >= ds->n || !ds->slot[k].has_manifest) return 0;
    if (name) *name = ds->slot[k].tokenizer;
    if (hash) *hash = ds->slot[k].tokenizer_hash;
    return 1;
}
ig_dtype ig_dataset_dtype(const ig_dataset *ds) {
    return ds->dtype;
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

/* Lazy datasets: shard k open and referenced (the least recently used unreferenced shard is
 * closed first when IG_DATASET_OPEN_MAX are open). Release with put_shard. */
static ig_status get_shard(ig_dataset *ds, size_t k, ig_shard **out, ig_err *err) {
    pthread_mutex_lock(&ds->mu);
    shard_slot *sl = &ds->slot[k];
    ig_status st = IG_OK;
    if (!sl->open) {
        if (ds->n_open >= IG_DATASET_OPEN_MAX) {
            size_t victim = ds->n;
            for (size_t j = 0; j < ds->n; j++) /* n_open is small; n is scanned only on a miss */
                if (ds->slot[j].open && !ds->slot[j].refs &&
                    (victim == ds->n || ds->slot[j].used < ds->slot[victim].used))
                    victim = j;
            if (victim < ds->n) {
                ig_shard_close(ds->slot[victim].open);
                ds->slot[victim].open = NULL;
                ds->n_open--;
            }
        }
        ig_shard *s = NULL;
        st = ig_shard_open(&s, ds->ctx, sl->prefix, err);
        /* the shard must still be the one that was opened first (its lengths are copied) */
        if (st == IG_OK && (ig_shard_dtype(s) != ds->dtype ||
                            ig_shard_sequences(s) != ds->first[k + 1] - ds->first[k])) {
            ig_shard_close(s);
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s changed while it was in use (its sequences or dtype differ from "
                            "when the dataset was opened)",
                            sl->prefix);
        }
        if (st == IG_OK) {
            sl->open = s;
            ds->n_open++;
        }
    }
    if (st == IG_OK) {
        sl->refs++;
        sl->used = ++ds->clock;
        *out = sl->open;
    }
    pthread_mutex_unlock(&ds->mu);
    return st;
}

static void put_shard(ig_dataset *ds, size_t k) {
    pthread_mutex_lock(&ds->mu);
    ds->slot[k].refs--;
    pthread_mutex_unlock(&ds->mu);
}

ig_status ig_dataset_read_tokens(const ig_dataset *ds, uint64_t seq, uint64_t off, uint64_t n,
                                 int32_t *out, ig_err *err) {
    if (seq >= ds->first[ds->n])
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "sequence %llu is out of range: the dataset has %llu",
                          (unsigned long long)seq, (unsigned long long)ds->first[ds->n]);
    /* The shard holding seq: the last k with first[k] <= seq (binary search). */
    size_t lo = 0, hi = ds->n - 1;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (ds->first[mid] <= seq)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (!ds->lazy)
        return ig_shard_read_tokens(ds->slot[lo].open, seq - ds->first[lo], off, n, out, err);
    /* the dataset is shared read-only; what changes is which shards are open, under its lock */
    ig_dataset *mut = (ig_dataset *)ds;
    ig_shard *s = NULL;
    ig_status st = get_shard(mut, lo, &s, err);
    if (st != IG_OK) return st;
    st = ig_shard_read_tokens(s, seq - ds->first[lo], off, n, out, err);
    put_shard(mut, lo);
    return st;
}
