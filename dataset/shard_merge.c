/* shard_merge.c - concatenates token shards into one (as Megatron's merge_datasets.py): the .bin
 * files back to back, the lengths in order, the pointers recomputed as 64-bit running offsets and
 * the document indices shifted by the sequences before them. Streaming: tokens are copied from
 * the mapped inputs in chunks, the index goes through the writer's spills, so memory stays small
 * whatever the size of the inputs (> 4 GiB is fine).
 *
 * Every input is opened (and so validated) before anything is written, one at a time, and again
 * while it is copied, so that merging tens of thousands of shards holds the mappings of one.
 * Shards of different dtypes cannot be concatenated; shards of different tokenizers (by their
 * manifests' hashes) are refused unless allow_mixed, since their ids mean different things.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

#include "shard_internal.h"

#define COPY_CHUNK (16u << 20)

/* What merge learns of its inputs in its first pass, one shard open at a time (a merge of tens of
 * thousands of shards must not hold two mappings for each: the kernel caps a process's maps). */
typedef struct merge_scan {
    ig_dtype dtype;
    char first_prefix[4096]; /* the first input, for messages */
    int have_tok;            /* an input with a tokenizer hash was seen: tok is its manifest's */
    ig_manifest tok;         /* (its sources are not copied) */
    char tok_prefix[4096];
    int have_meta, mixed; /* an input with a manifest was seen; they differ in tokenizer or key */
    int all_vocab;        /* every input has a manifest with a vocabulary size */
    uint64_t vocab;       /* the largest of them */
    size_t unknown;       /* inputs without a tokenizer hash (one warning for all) */
    char unknown_prefix[4096];
    size_t no_manifest; /* inputs without a manifest (one warning for all) */
    char no_manifest_prefix[4096];
} merge_scan;

/* Checks input i (open as s) against the ones before it and notes what the output's manifest
 * needs. */
static ig_status scan_input(ig_ctx *ctx, merge_scan *sc, size_t i, const ig_shard *s,
                            const ig_merge_opts *o, const char *out_prefix, ig_err *err) {
    const char *p = ig_shard_prefix(s);
    if (strcmp(p, out_prefix) == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "the output %s is also an input; choose another output prefix", p);
    if (i == 0) {
        sc->dtype = ig_shard_dtype(s);
        snprintf(sc->first_prefix, sizeof sc->first_prefix, "%s", p);
        sc->all_vocab = 1;
    } else if (ig_shard_dtype(s) != sc->dtype) {
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "cannot merge %s (dtype %s) with %s (dtype %s): shards of "
                          "different dtypes cannot be concatenated",
                          sc->first_prefix, ig_dtype_name(sc->dtype), p,
                          ig_dtype_name(ig_shard_dtype(s)));
    }
    const ig_manifest *m = ig_shard_manifest(s);
    sc->all_vocab &= m && m->vocab_size;
    if (m) {
        if (m->vocab_size > sc->vocab) sc->vocab = m->vocab_size;
        if (!sc->have_meta) {
            sc->have_meta = 1;
            sc->tok = *m; /* the fields merged_meta takes; sources stay the shard's */
            sc->tok.sources = NULL;
            sc->tok.n_sources = 0;
            snprintf(sc->tok_prefix, sizeof sc->tok_prefix, "%s", p);
        } else if (m->tokenizer_hash != sc->tok.tokenizer_hash ||
                   strcmp(m->json_key, sc->tok.json_key) != 0) {
            sc->mixed = 1;
        }
    } else if (sc->no_manifest++ == 0) {
        snprintf(sc->no_manifest_prefix, sizeof sc->no_manifest_prefix, "%s", p);
    }
    if (!m) return IG_OK; /* said once for all such inputs (ig_shard_merge) */
    if (m->tokenizer_hash == 0) {
        if (sc->unknown++ == 0) snprintf(sc->unknown_prefix, sizeof sc->unknown_prefix, "%s", p);
        return IG_OK;
    }
    if (!sc->have_tok) {
        sc->have_tok = 1;
        if (strcmp(sc->tok_prefix, p) != 0) { /* the first manifest had no tokenizer hash */
            sc->tok = *m;
            sc->tok.sources = NULL;
            sc->tok.n_sources = 0;
            snprintf(sc->tok_prefix, sizeof sc->tok_prefix, "%s", p);
        }
    } else if (m->tokenizer_hash != sc->tok.tokenizer_hash && !o->allow_mixed) {
        char a[17], b[17];
        ig_hash64_hex(sc->tok.tokenizer_hash, a);
        ig_hash64_hex(m->tokenizer_hash, b);
        ig_err_set(err, IG_ERR_INVALID_ARG,
                   "%s was made with tokenizer \"%s\" (hash %s) but %s with \"%s\" (hash "
                   "%s): refusing to mix tokenizers",
                   sc->tok_prefix, sc->tok.tokenizer, a, p, m->tokenizer, b);
        return ig_err_fix(err, "allow_mixed", NULL);
    }
    return IG_OK;
}

/* The merged manifest's tokenizer fields: those of the inputs when they all agree; with
 * tokenizers mixed, none, but the ids are still below the largest vocabulary. */
static ig_status merged_meta(const merge_scan *sc, const char *const *inputs, size_t n,
                             ig_manifest *meta, ig_err *err) {
    memset(meta, 0, sizeof *meta);
    meta->eod_id = -1;
    if (sc->all_vocab) meta->vocab_size = sc->vocab;
    if (sc->have_meta && !sc->mixed) {
        memcpy(meta->tokenizer, sc->tok.tokenizer, sizeof meta->tokenizer);
        memcpy(meta->tokenizer_path, sc->tok.tokenizer_path, sizeof meta->tokenizer_path);
        memcpy(meta->json_key, sc->tok.json_key, sizeof meta->json_key);
        meta->tokenizer_hash = sc->tok.tokenizer_hash;
        meta->vocab_size = sc->tok.vocab_size;
        meta->eod_id = sc->tok.eod_id;
    }
    for (size_t i = 0; i < n; i++) {
        ig_status st = ig_manifest_add_source(meta, inputs[i], err);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}

/* Appends s's lengths and document ends to w's index. */
static ig_status index_of(ig_shard_writer *w, const ig_shard *s, ig_err *err) {
    ig_status st = IG_OK;
    uint64_t docs = ig_shard_documents(s);
    for (uint64_t d = 0; d < docs && st == IG_OK; d++) {
        uint64_t a = (uint64_t)ig_shard_doc_index(s, d), b = (uint64_t)ig_shard_doc_index(s, d + 1);
        for (uint64_t i = a; i < b && st == IG_OK; i++)
            st = ig_shard_writer_put_length(w, ig_shard_seq_length(s, i), err);
        if (st == IG_OK) st = ig_shard_writer_put_doc_end(w, err);
    }
    return st;
}

/* An input whose .bin does not match its manifest's checksum. */
static ig_status checksum_refused(const ig_shard *s, uint64_t got, ig_err *err) {
    char a[17], b[17];
    ig_hash64_hex(got, a);
    ig_hash64_hex(ig_shard_manifest(s)->bin_xxh3, b);
    return ig_err_set(err, IG_ERR_CHECKSUM,
                      "%s.bin: xxh3 is %s but the manifest records %s (the file was modified or "
                      "is corrupt; nothing was written: rebuild or remove this input)",
                      ig_shard_prefix(s), a, b);
}

/* Copies s's tokens and index into w. The .bin is hashed as it is copied and checked against the
 * manifest (open already checked the .idx), so that a damaged input is refused instead of being
 * laundered into an output with fresh checksums. */
static ig_status append_shard(ig_shard_writer *w, const ig_shard *s, ig_err *err) {
    const uint8_t *bin = ig_shard_bin(s);
    uint64_t size = ig_shard_bin_bytes(s);
    const ig_manifest *m = ig_shard_manifest(s);
    ig_xxh3_stream *h = m ? ig_xxh3_stream_create() : NULL;
    if (m && !h) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = IG_OK;
    for (uint64_t off = 0; off < size && st == IG_OK; off += COPY_CHUNK) {
        size_t k = size - off < COPY_CHUNK ? (size_t)(size - off) : COPY_CHUNK;
        if (h) ig_xxh3_stream_update(h, bin + off, k);
        st = ig_shard_writer_put_bytes(w, bin + off, k, err);
    }
    if (h) {
        uint64_t got = ig_xxh3_stream_digest(h);
        ig_xxh3_stream_free(h);
        if (st == IG_OK && got != m->bin_xxh3) return checksum_refused(s, got, err);
    }
    return st == IG_OK ? index_of(w, s, err) : st;
}

/* ---- the second pass on several threads ---------------------------------------------------- */

#define WINDOW_INPUTS 64                /* inputs mapped at once (two mappings each) */
#define TASK_BYTES    ((size_t)4 << 20) /* bytes copied per task */

/* A window of inputs copied at once. Tasks (ig_parallel_range items): 0 feeds the output's
 * checksum with every input's bytes in order, 1 writes the index (lengths and document ends) in
 * order, 2 .. 2 + n - 1 hash each input's .bin for its manifest, and the rest copy TASK_BYTES
 * pieces to their precomputed offsets in the output. Writes to one file do not run in parallel in
 * the kernel, so the copies are the floor; the hashes and the index run beside them. */
typedef struct window {
    ig_ctx *ctx;
    ig_shard_writer *w;
    const char *const *names;
    size_t n;
    ig_shard **s;       /* [n] */
    uint64_t *offset;   /* [n] of each input's bytes in the output */
    uint64_t *hash;     /* [n] each input's .bin xxh3 */
    size_t *first_task; /* [n + 1] copy tasks of input j: first_task[j] .. first_task[j + 1] - 1 */
    ig_status *open_st; /* [n] */
    ig_err *open_err;   /* [n] */
    pthread_mutex_t mu; /* guards the copy failure below */
    size_t copy_fail;   /* the first copy task that failed (SIZE_MAX: none) */
    ig_err copy_err;
    size_t index_fail; /* the input whose index could not be written (SIZE_MAX: none) */
    ig_err index_err;
} window;

static void open_one(void *arg, size_t j, int worker) {
    (void)worker;
    window *wd = arg;
    wd->open_st[j] = ig_shard_open(&wd->s[j], wd->ctx, wd->names[j], &wd->open_err[j]);
}

static void window_task(void *arg, size_t t, int worker) {
    (void)worker;
    window *wd = arg;
    if (t == 0) {
        for (size_t j = 0; j < wd->n; j++)
            ig_shard_writer_hash_bin(wd->w, ig_shard_bin(wd->s[j]), ig_shard_bin_bytes(wd->s[j]));
        return;
    }
    if (t == 1) {
        for (size_t j = 0; j < wd->n; j++)
            if (index_of(wd->w, wd->s[j], &wd->index_err) != IG_OK) {
                wd->index_fail = j;
                return;
            }
        return;
    }
    if (t < 2 + wd->n) {
        size_t j = t - 2;
        if (ig_shard_manifest(wd->s[j]))
            wd->hash[j] = ig_xxh3_64(ig_shard_bin(wd->s[j]), ig_shard_bin_bytes(wd->s[j]));
        return;
    }
    /* the input whose tasks hold c: the last with first_task <= c (inputs without bytes have
     * none) */
    size_t c = t - 2 - wd->n, lo = 0, hi = wd->n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (wd->first_task[mid] <= c)
            lo = mid;
        else
            hi = mid;
    }
    const ig_shard *s = wd->s[lo];
    uint64_t at = (uint64_t)(c - wd->first_task[lo]) * TASK_BYTES, size = ig_shard_bin_bytes(s);
    size_t k = size - at < TASK_BYTES ? (size_t)(size - at) : TASK_BYTES;
    ig_err e = {0};
    const uint8_t *bin = ig_shard_bin(s);
    if (ig_shard_writer_put_at(wd->w, wd->offset[lo] + at, bin + at, k, &e) != IG_OK) {
        pthread_mutex_lock(&wd->mu);
        if (c < wd->copy_fail) {
            wd->copy_fail = c;
            wd->copy_err = e;
        }
        pthread_mutex_unlock(&wd->mu);
    }
}

static ig_status window_alloc(ig_ctx *ctx, window *wd, size_t n) {
    wd->s = ig_calloc(ctx, n, sizeof *wd->s);
    wd->offset = ig_calloc(ctx, n, sizeof *wd->offset);
    wd->hash = ig_calloc(ctx, n, sizeof *wd->hash);
    wd->first_task = ig_calloc(ctx, n + 1, sizeof *wd->first_task);
    wd->open_st = ig_calloc(ctx, n, sizeof *wd->open_st);
    wd->open_err = ig_calloc(ctx, n, sizeof *wd->open_err);
    return wd->s && wd->offset && wd->hash && wd->first_task && wd->open_st && wd->open_err
               ? IG_OK
               : IG_ERR_NOMEM;
}

static void window_free(ig_ctx *ctx, window *wd) {
    ig_free(ctx, wd->s);
    ig_free(ctx, wd->offset);
    ig_free(ctx, wd->hash);
    ig_free(ctx, wd->first_task);
    ig_free(ctx, wd->open_st);
    ig_free(ctx, wd->open_err);
}

/* Copies inputs[i0 .. i0 + n) into w on the context's pool, with the same checks, errors and
 * bytes as append_shard one input after another. */
static ig_status copy_window(ig_ctx *ctx, window *wd, ig_shard_writer *w, const char *const *inputs,
                             size_t i0, size_t n, ig_dtype dtype, const char *out_prefix,
                             ig_err *err) {
    wd->ctx = ctx;
    wd->w = w;
    wd->names = inputs + i0;
    wd->n = n;
    wd->copy_fail = wd->index_fail = SIZE_MAX;
    ig_parallel_for(ctx, n, open_one, wd);
    ig_status st = IG_OK;
    uint64_t total = 0;
    for (size_t j = 0; j < n && st == IG_OK; j++) {
        if ((st = wd->open_st[j]) != IG_OK)
            *err = wd->open_err[j];
        else if (ig_shard_dtype(wd->s[j]) != dtype)
            st = ig_err_set(err, IG_ERR_INVALID_ARG, "%s changed during the merge", inputs[i0 + j]);
        if (st != IG_OK) {
            ig_err_prefix(err, st, "merging %s into %s", inputs[i0 + j], out_prefix);
            break;
        }
        uint64_t size = ig_shard_bin_bytes(wd->s[j]);
        wd->offset[j] = total;
        total += size;
        wd->first_task[j + 1] = wd->first_task[j] + (size_t)((size + TASK_BYTES - 1) / TASK_BYTES);
    }
    uint64_t base = 0;
    if (st == IG_OK) st = ig_shard_writer_reserve(w, total, &base, err);
    if (st == IG_OK) {
        for (size_t j = 0; j < n; j++) wd->offset[j] += base;
        ig_parallel_for(ctx, 2 + n + wd->first_task[n], window_task, wd);
        /* the first failure in input order, as one input after another would meet it */
        for (size_t j = 0; j < n && st == IG_OK; j++) {
            const ig_manifest *m = ig_shard_manifest(wd->s[j]);
            if (wd->copy_fail < wd->first_task[j + 1]) {
                *err = wd->copy_err;
                st = err->status;
            } else if (m && wd->hash[j] != m->bin_xxh3) {
                st = checksum_refused(wd->s[j], wd->hash[j], err);
            } else if (wd->index_fail == j) {
                *err = wd->index_err;
                st = err->status;
            }
            if (st != IG_OK)
                ig_err_prefix(err, st, "merging %s into %s", inputs[i0 + j], out_prefix);
        }
        if (st != IG_OK) ig_shard_writer_set_failed(w);
    }
    for (size_t j = 0; j < n; j++) {
        ig_shard_close(wd->s[j]);
        wd->s[j] = NULL;
    }
    return st;
}

/* The second pass with several threads: windows of inputs, each copied at once. */
static ig_status copy_parallel(ig_ctx *ctx, ig_shard_writer *w, const char *const *inputs,
                               size_t n_inputs, ig_dtype dtype, const char *out_prefix,
                               ig_err *err) {
    window wd = {0};
    size_t cap = n_inputs < WINDOW_INPUTS ? n_inputs : WINDOW_INPUTS;
    if (window_alloc(ctx, &wd, cap) != IG_OK) {
        window_free(ctx, &wd);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&wd.mu, NULL);
    ig_status st = IG_OK;
    for (size_t i0 = 0; i0 < n_inputs && st == IG_OK; i0 += cap) {
        size_t n = n_inputs - i0 < cap ? n_inputs - i0 : cap;
        st = copy_window(ctx, &wd, w, inputs, i0, n, dtype, out_prefix, err);
    }
    pthread_mutex_destroy(&wd.mu);
    window_free(ctx, &wd);
    return st;
}

ig_status ig_shard_merge(ig_ctx *ctx, const char *const *inputs, size_t n_inputs,
                         const char *out_prefix, const ig_merge_opts *opts, ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    ig_merge_opts o = opts ? *opts : (ig_merge_opts){0};
    if (n_inputs == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "merge needs at least one input");
    merge_scan *sc = ig_calloc(ctx, 1, sizeof *sc);
    if (!sc) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    /* first pass: every input opened (validated) and checked before anything is written */
    ig_status st = IG_OK;
    for (size_t i = 0; i < n_inputs && st == IG_OK; i++) {
        ig_shard *s = NULL;
        st = ig_shard_open(&s, ctx, inputs[i], err);
        if (st == IG_OK) st = scan_input(ctx, sc, i, s, &o, out_prefix, err);
        ig_shard_close(s);
    }
    /* one warning for all inputs without a manifest (Megatron-made, say): nothing to check their
     * tokens against, nor (when there are other inputs) their tokenizer */
    if (st == IG_OK && sc->no_manifest)
        ig_warn(ctx,
                "%s%s: no manifest (not made by ingot?): the structure is checked, but there is "
                "no checksum to check the tokens against%s",
                sc->no_manifest_prefix, sc->no_manifest > 1 ? " (and other inputs)" : "",
                n_inputs > 1 ? ", nor a tokenizer to compare with the other inputs" : "");
    /* one warning, and only when there is something to compare with */
    if (st == IG_OK && sc->unknown && n_inputs > 1)
        ig_warn(ctx,
                "%s%s: no manifest with a tokenizer hash; cannot check that %s made with the "
                "same tokenizer as the other inputs",
                sc->unknown_prefix, sc->unknown > 1 ? " (and other inputs)" : "",
                sc->unknown > 1 ? "they were" : "it was");
    ig_manifest meta = {0};
    if (st == IG_OK) st = merged_meta(sc, inputs, n_inputs, &meta, err);
    ig_shard_writer *w = NULL;
    if (st == IG_OK) {
        ig_shard_writer_opts wo = ig_shard_writer_opts_default();
        wo.dtype = sc->dtype;
        wo.overwrite = o.overwrite;
        st = ig_shard_writer_create(&w, ctx, out_prefix, &wo, err);
    }
    /* second pass: each input opened again (and so validated again) while it is copied; with
     * several threads, windows of inputs at once */
    if (st == IG_OK && ctx && ig_ctx_threads(ctx) > 1)
        st = copy_parallel(ctx, w, inputs, n_inputs, sc->dtype, out_prefix, err);
    else
        for (size_t i = 0; i < n_inputs && st == IG_OK; i++) {
            ig_shard *s = NULL;
            st = ig_shard_open(&s, ctx, inputs[i], err);
            if (st == IG_OK && ig_shard_dtype(s) != sc->dtype)
                st = ig_err_set(err, IG_ERR_INVALID_ARG, "%s changed during the merge", inputs[i]);
            if (st == IG_OK) st = append_shard(w, s, err);
            if (st != IG_OK) ig_err_prefix(err, st, "merging %s into %s", inputs[i], out_prefix);
            ig_shard_close(s);
        }
    if (st == IG_OK) {
        st = ig_shard_writer_finish(w, &meta, err);
    } else {
        ig_shard_writer_abort(w);
    }
    ig_manifest_clear(&meta);
    ig_free(ctx, sc);
    return st;
}
