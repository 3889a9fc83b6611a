/* shard_merge.c - concatenates token shards into one (as Megatron's merge_datasets.py): the .bin
 * files back to back, the lengths in order, the pointers recomputed as 64-bit running offsets and
 * the document indices shifted by the sequences before them. Streaming: tokens are copied from
 * the mapped inputs in chunks, the index goes through the writer's spills, so memory stays small
 * whatever the size of the inputs (> 4 GiB is fine).
 *
 * Every input is opened (and so validated) before anything is written. Shards of different
 * dtypes cannot be concatenated; shards of different tokenizers (by their manifests' hashes) are
 * refused unless allow_mixed, since their ids mean different things.
 */
#include <inttypes.h>
#include <stdio.h>

#include "shard_internal.h"

#define COPY_CHUNK (16u << 20)

static ig_status check_inputs(ig_ctx *ctx, ig_shard **in, size_t n, const ig_merge_opts *o,
                              const char *out_prefix, ig_err *err) {
    const ig_manifest *first = NULL;
    size_t first_i = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = ig_shard_prefix(in[i]);
        if (strcmp(p, out_prefix) == 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "the output %s is also an input; choose another output prefix", p);
        if (ig_shard_dtype(in[i]) != ig_shard_dtype(in[0]))
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "cannot merge %s (dtype %s) with %s (dtype %s): shards of "
                              "different dtypes cannot be concatenated",
                              ig_shard_prefix(in[0]), ig_dtype_name(ig_shard_dtype(in[0])), p,
                              ig_dtype_name(ig_shard_dtype(in[i])));
        const ig_manifest *m = ig_shard_manifest(in[i]);
        if (!m)
            ig_warn(ctx,
                    "%s: no manifest (not made by ingot?): its structure is checked, but there "
                    "is no checksum to check its tokens against",
                    p);
        if (!m || m->tokenizer_hash == 0) {
            ig_warn(ctx,
                    "%s: no manifest with a tokenizer hash; cannot check that it was made "
                    "with the same tokenizer as the other inputs",
                    p);
            continue;
        }
        if (!first) {
            first = m;
            first_i = i;
        } else if (m->tokenizer_hash != first->tokenizer_hash && !o->allow_mixed) {
            char a[17], b[17];
            ig_hash64_hex(first->tokenizer_hash, a);
            ig_hash64_hex(m->tokenizer_hash, b);
            ig_err_set(err, IG_ERR_INVALID_ARG,
                       "%s was made with tokenizer \"%s\" (hash %s) but %s with \"%s\" (hash "
                       "%s): refusing to mix tokenizers",
                       ig_shard_prefix(in[first_i]), first->tokenizer, a, p, m->tokenizer, b);
            return ig_err_fix(err, "allow_mixed", NULL);
        }
    }
    return IG_OK;
}

/* The merged manifest's tokenizer fields: those of the inputs when they all agree. */
static ig_status merged_meta(ig_shard **in, size_t n, ig_manifest *meta, ig_err *err) {
    memset(meta, 0, sizeof *meta);
    meta->eod_id = -1;
    const ig_manifest *first = NULL;
    int mixed = 0, all = 1;
    uint64_t vocab = 0;
    for (size_t i = 0; i < n; i++) {
        const ig_manifest *m = ig_shard_manifest(in[i]);
        all &= m && m->vocab_size;
        if (!m) continue;
        if (m->vocab_size > vocab) vocab = m->vocab_size;
        if (!first)
            first = m;
        else if (m->tokenizer_hash != first->tokenizer_hash ||
                 strcmp(m->json_key, first->json_key) != 0)
            mixed = 1;
    }
    /* tokenizers mixed: no tokenizer, but the ids are still below the largest vocabulary */
    if (all) meta->vocab_size = vocab;
    if (first && !mixed) {
        memcpy(meta->tokenizer, first->tokenizer, sizeof meta->tokenizer);
        memcpy(meta->tokenizer_path, first->tokenizer_path, sizeof meta->tokenizer_path);
        memcpy(meta->json_key, first->json_key, sizeof meta->json_key);
        meta->tokenizer_hash = first->tokenizer_hash;
        meta->vocab_size = first->vocab_size;
        meta->eod_id = first->eod_id;
    }
    for (size_t i = 0; i < n; i++) {
        ig_status st = ig_manifest_add_source(meta, ig_shard_prefix(in[i]), err);
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
    ig_shard **in = calloc(n_inputs, sizeof *in);
    if (!in) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = IG_OK;
    for (size_t i = 0; i < n_inputs && st == IG_OK; i++)
        st = ig_shard_open(&in[i], ctx, inputs[i], err);
    if (st == IG_OK) st = check_inputs(ctx, in, n_inputs, &o, out_prefix, err);

    ig_manifest meta = {0};
    if (st == IG_OK) st = merged_meta(in, n_inputs, &meta, err);
    ig_shard_writer *w = NULL;
    if (st == IG_OK) {
        ig_shard_writer_opts wo = ig_shard_writer_opts_default();
        wo.dtype = ig_shard_dtype(in[0]);
        wo.overwrite = o.overwrite;
        st = ig_shard_writer_create(&w, ctx, out_prefix, &wo, err);
    }
    for (size_t i = 0; i < n_inputs && st == IG_OK; i++) {
        st = append_shard(w, in[i], err);
        if (st != IG_OK) ig_err_prefix(err, st, "merging %s into %s", inputs[i], out_prefix);
    }
    if (st == IG_OK) {
        st = ig_shard_writer_finish(w, &meta, err);
    } else {
        ig_shard_writer_abort(w);
    }
    ig_manifest_clear(&meta);
    for (size_t i = 0; i < n_inputs; i++) ig_shard_close(in[i]);
    free(in);
    return st;
}
