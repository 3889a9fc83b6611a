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
        if (st == IG_OK && got != m->bin_xxh3) {
            char a[17], b[17];
            ig_hash64_hex(got, a);
            ig_hash64_hex(m->bin_xxh3, b);
            return ig_err_set(err, IG_ERR_CHECKSUM,
                              "%s.bin: xxh3 is %s but the manifest records %s (the file was "
                              "modified or is corrupt; nothing was written: rebuild or remove "
                              "this input)",
                              ig_shard_prefix(s), a, b);
        }
    }
    uint64_t docs = ig_shard_documents(s);
    for (uint64_t d = 0; d < docs && st == IG_OK; d++) {
        uint64_t a = (uint64_t)ig_shard_doc_index(s, d), b = (uint64_t)ig_shard_doc_index(s, d + 1);
        for (uint64_t i = a; i < b && st == IG_OK; i++)
            st = ig_shard_writer_put_length(w, ig_shard_seq_length(s, i), err);
        if (st == IG_OK) st = ig_shard_writer_put_doc_end(w, err);
    }
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
    /* second pass: each input opened again (and so validated again) while it is copied */
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
