/* shard_writer.c - streams documents into a Megatron-compatible token shard (DESIGN 3.1).
 *
 * Tokens go straight to a temporary PREFIX.bin (ig_atomic_file). The index cannot be written
 * until the sequence count is known (its header comes first), so the sequence lengths and the
 * document ends spill to two anonymous temporary files in the output directory (created and
 * unlinked at once: a killed run leaves nothing behind). Memory therefore does not grow with the
 * number of documents. finish streams the spills into a temporary PREFIX.idx, then commits .bin,
 * .idx and finally the manifest: a manifest only ever describes complete data.
 */
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "shard_internal.h"

#define CHUNK_ITEMS 65536 /* tokens / lengths converted per chunk */

struct ig_shard_writer {
    ig_ctx *ctx;
    char *prefix, *bin_path, *idx_path, *json_path;
    ig_dtype dtype;
    size_t itemsize;
    int overwrite;
    ig_atomic_file *bin;
    ig_xxh3_stream *bin_hash;
    FILE *lens;         /* spill: i32 LE per sequence */
    FILE *docs;         /* spill: i64 LE per document end (document_indices[1..]) */
    char *spill_buf[2]; /* their stdio buffers (setvbuf with NULL keeps glibc's 4 KiB) */
    uint64_t n_seqs, n_docs, n_tokens, bin_bytes;
    uint64_t last_doc_end; /* sequence count at the last end_document */
    int failed;            /* a write failed: the shard can only be aborted */
    uint8_t *buf;          /* CHUNK_ITEMS * 8 bytes of conversion space */
};

ig_shard_writer_opts ig_shard_writer_opts_default(void) {
    return (ig_shard_writer_opts){.dtype = IG_DTYPE_U16, .overwrite = 0};
}

#define SPILL_BUFFER ((size_t)1 << 18)

/* An anonymous temporary file beside the output: created, then unlinked while open (its name
 * matches the PREFIX.*.tmp.* pattern that preprocess clears after a killed run). */
static ig_status spill_open(FILE **out, char **buf, ig_ctx *ctx, const char *prefix, ig_err *err) {
    char *tmpl = ig_temp_path(prefix, "spill.tmp.XXXXXX");
    if (!tmpl) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    int fd = mkstemp(tmpl);
    if (fd < 0) {
        ig_status st = ig_err_errno(err, errno, "cannot create a temporary file beside %s", prefix);
        free(tmpl);
        return st;
    }
    unlink(tmpl);
    free(tmpl);
    *out = fdopen(fd, "w+b");
    if (!*out) {
        close(fd);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    if (!(*buf = ig_alloc(ctx, SPILL_BUFFER)))
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    setvbuf(*out, *buf, _IOFBF, SPILL_BUFFER);
    return IG_OK;
}

void ig_shard_writer_abort(ig_shard_writer *w) {
    if (!w) return;
    ig_atomic_file_abort(w->bin);
    ig_xxh3_stream_free(w->bin_hash);
    if (w->lens) fclose(w->lens);
    if (w->docs) fclose(w->docs);
    ig_free(w->ctx, w->spill_buf[0]); /* after the streams that used them */
    ig_free(w->ctx, w->spill_buf[1]);
    ig_free(w->ctx, w->prefix);
    ig_free(w->ctx, w->bin_path);
    ig_free(w->ctx, w->idx_path);
    ig_free(w->ctx, w->json_path);
    ig_free(w->ctx, w->buf);
    ig_free(w->ctx, w);
}

ig_status ig_shard_writer_create(ig_shard_writer **out, ig_ctx *ctx, const char *prefix,
                                 const ig_shard_writer_opts *opts, ig_err *err) {
    *out = NULL;
    ig_shard_writer_opts o = opts ? *opts : ig_shard_writer_opts_default();
    if (!prefix || !*prefix)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "empty output prefix for a token shard");
    ig_status pst = ig_output_prefix_check(prefix, err);
    if (pst != IG_OK) return pst;
    /* all three names must fit (.json is the longest), before anything is written */
    const char *slash = strrchr(prefix, '/');
    if (strlen(slash ? slash + 1 : prefix) + 5 > NAME_MAX)
        return ig_err_errno(err, ENAMETOOLONG, "cannot create %s.json", prefix);
    if (ig_dtype_size(o.dtype) == 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "dtype code %d is not a Megatron dtype (1..8)",
                          (int)o.dtype);
    ig_shard_writer *w = ig_alloc(ctx, sizeof *w);
    if (!w) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(w, 0, sizeof *w);
    w->ctx = ctx;
    w->dtype = o.dtype;
    w->itemsize = ig_dtype_size(o.dtype);
    w->overwrite = o.overwrite;
    w->prefix = ig_strdup(ctx, prefix);
    w->bin_path = ig_shard_path(ctx, prefix, ".bin");
    w->idx_path = ig_shard_path(ctx, prefix, ".idx");
    w->json_path = ig_shard_path(ctx, prefix, ".json");
    w->buf = ig_alloc(ctx, CHUNK_ITEMS * 8);
    w->bin_hash = ig_xxh3_stream_create();
    if (!w->prefix || !w->bin_path || !w->idx_path || !w->json_path || !w->buf || !w->bin_hash) {
        ig_shard_writer_abort(w);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    if (!o.overwrite) {
        const char *paths[3] = {w->bin_path, w->idx_path, w->json_path};
        for (int i = 0; i < 3; i++) {
            if (ig_file_exists(paths[i])) {
                ig_err_set(err, IG_ERR_EXISTS, "%s already exists", paths[i]);
                ig_status st = ig_err_fix(err, "overwrite", NULL);
                ig_shard_writer_abort(w);
                return st;
            }
        }
    }
    ig_status st = ig_atomic_file_create(&w->bin, w->bin_path, o.overwrite, err);
    if (st == IG_OK) st = spill_open(&w->lens, &w->spill_buf[0], ctx, prefix, err);
    if (st == IG_OK) st = spill_open(&w->docs, &w->spill_buf[1], ctx, prefix, err);
    if (st != IG_OK) {
        ig_shard_writer_abort(w);
        return st;
    }
    *out = w;
    return IG_OK;
}

uint64_t ig_shard_writer_bin_bytes(const ig_shard_writer *w) {
    return w->bin_bytes;
}

uint64_t ig_shard_writer_documents(const ig_shard_writer *w) {
    return w->n_docs;
}

static ig_status writer_failed(ig_shard_writer *w, ig_err *err) {
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "the writer of %s failed earlier; it can only be aborted", w->prefix);
}

ig_status ig_shard_writer_put_bytes(ig_shard_writer *w, const void *data, size_t len, ig_err *err) {
    if (w->failed) return writer_failed(w, err);
    ig_status st = ig_atomic_file_write(w->bin, data, len, err);
    if (st != IG_OK) {
        w->failed = 1;
        return st;
    }
    ig_xxh3_stream_update(w->bin_hash, data, len);
    w->bin_bytes += len;
    return IG_OK;
}

ig_status ig_shard_writer_reserve(ig_shard_writer *w, uint64_t len, uint64_t *offset, ig_err *err) {
    if (w->failed) return writer_failed(w, err);
    ig_status st = ig_atomic_file_reserve(w->bin, len, offset, err);
    if (st != IG_OK) {
        w->failed = 1;
        return st;
    }
    w->bin_bytes += len;
    return IG_OK;
}

ig_status ig_shard_writer_put_at(ig_shard_writer *w, uint64_t offset, const void *data, size_t len,
                                 ig_err *err) {
    return ig_atomic_file_write_at(w->bin, data, len, offset, err);
}

void ig_shard_writer_hash_bin(ig_shard_writer *w, const void *data, size_t len) {
    ig_xxh3_stream_update(w->bin_hash, data, len);
}

void ig_shard_writer_set_failed(ig_shard_writer *w) {
    w->failed = 1;
}

ig_status ig_shard_writer_put_length(ig_shard_writer *w, int32_t length, ig_err *err) {
    if (w->failed) return writer_failed(w, err);
    uint8_t b[4];
    ig_put_le_u32(b, (uint32_t)length);
    if (fwrite(b, 1, 4, w->lens) != 4) {
        w->failed = 1;
        return ig_err_errno(err, errno, "cannot write the temporary lengths of %s", w->prefix);
    }
    w->n_seqs++;
    w->n_tokens += (uint64_t)length;
    return IG_OK;
}

ig_status ig_shard_writer_put_doc_end(ig_shard_writer *w, ig_err *err) {
    if (w->failed) return writer_failed(w, err);
    uint8_t b[8];
    ig_put_le_u64(b, w->n_seqs);
    if (fwrite(b, 1, 8, w->docs) != 8) {
        w->failed = 1;
        return ig_err_errno(err, errno, "cannot write the temporary index of %s", w->prefix);
    }
    w->n_docs++;
    w->last_doc_end = w->n_seqs;
    return IG_OK;
}

/* The smallest and largest token id the writer's dtype holds exactly. */
static void dtype_range(ig_dtype dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case IG_DTYPE_U8:
        *lo = 0, *hi = 255;
        return;
    case IG_DTYPE_I8:
        *lo = -128, *hi = 127;
        return;
    case IG_DTYPE_I16:
        *lo = -32768, *hi = 32767;
        return;
    case IG_DTYPE_U16:
        *lo = 0, *hi = 65535;
        return;
    case IG_DTYPE_F32:
        *lo = -(1 << 24), *hi = 1 << 24;
        return;
    default:
        *lo = INT32_MIN, *hi = INT32_MAX;
        return;
    }
}

static void encode_tokens(uint8_t *out, const int32_t *ids, size_t n, ig_dtype dt) {
    switch (dt) {
    case IG_DTYPE_U8:
    case IG_DTYPE_I8:
        for (size_t i = 0; i < n; i++) out[i] = (uint8_t)ids[i];
        break;
    case IG_DTYPE_I16:
    case IG_DTYPE_U16:
        for (size_t i = 0; i < n; i++) {
            uint16_t v = (uint16_t)ids[i];
            out[2 * i] = (uint8_t)v;
            out[2 * i + 1] = (uint8_t)(v >> 8);
        }
        break;
    case IG_DTYPE_I32:
        for (size_t i = 0; i < n; i++) ig_put_le_u32(out + 4 * i, (uint32_t)ids[i]);
        break;
    case IG_DTYPE_I64:
        for (size_t i = 0; i < n; i++) ig_put_le_u64(out + 8 * i, (uint64_t)(int64_t)ids[i]);
        break;
    case IG_DTYPE_F32:
        for (size_t i = 0; i < n; i++) {
            float f = (float)ids[i];
            uint32_t u;
            memcpy(&u, &f, 4);
            ig_put_le_u32(out + 4 * i, u);
        }
        break;
    case IG_DTYPE_F64:
        for (size_t i = 0; i < n; i++) {
            double f = (double)ids[i];
            uint64_t u;
            memcpy(&u, &f, 8);
            ig_put_le_u64(out + 8 * i, u);
        }
        break;
    }
}

ig_status ig_shard_writer_add_sequence(ig_shard_writer *w, const int32_t *ids, size_t n,
                                       ig_err *err) {
    if (w->failed) return writer_failed(w, err);
    if (n > INT32_MAX)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a sequence of %zu tokens is longer than Megatron's limit of %d "
                          "(lengths are int32)",
                          n, INT32_MAX);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (w->dtype == IG_DTYPE_U16 && n <= CHUNK_ITEMS) {
        /* the usual case (GPT-2-sized vocabularies, documents of one chunk): check and convert in
         * one pass; nothing is written unless every id fits */
        uint32_t any = 0;
        size_t i = 0;
#if defined(__SSE2__)
        /* 8 ids a step: each less 0x8000 fits a signed 16-bit pack exactly when it fits u16 */
        __m128i anyv = _mm_setzero_si128();
        const __m128i half = _mm_set1_epi32(0x8000), flip = _mm_set1_epi16((short)0x8000);
        for (; i + 8 <= n; i += 8) {
            __m128i a = _mm_loadu_si128((const __m128i *)(ids + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(ids + i + 4));
            anyv = _mm_or_si128(anyv, _mm_or_si128(a, b));
            __m128i p = _mm_packs_epi32(_mm_sub_epi32(a, half), _mm_sub_epi32(b, half));
            _mm_storeu_si128((__m128i *)(w->buf + 2 * i), _mm_xor_si128(p, flip));
        }
        uint32_t lanes[4];
        _mm_storeu_si128((__m128i *)lanes, anyv);
        any = lanes[0] | lanes[1] | lanes[2] | lanes[3];
#endif
        for (; i < n; i++) {
            uint32_t v = (uint32_t)ids[i];
            uint16_t v16 = (uint16_t)v;
            any |= v;
            memcpy(w->buf + 2 * i, &v16, 2);
        }
        if ((any >> 16) == 0) {
            ig_status st = ig_shard_writer_put_bytes(w, w->buf, 2 * n, err);
            if (st != IG_OK) return st;
            return ig_shard_writer_put_length(w, (int32_t)n, err);
        }
    }
    if (w->dtype == IG_DTYPE_I32) { /* every id fits, and its bytes are already the file's */
        ig_status st = ig_shard_writer_put_bytes(w, ids, 4 * n, err);
        if (st != IG_OK) return st;
        return ig_shard_writer_put_length(w, (int32_t)n, err);
    }
#endif
    int64_t lo, hi;
    dtype_range(w->dtype, &lo, &hi);
    /* check everything first: a rejected sequence leaves the shard unchanged */
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < lo || ids[i] > hi)
            return ig_err_set(
                err, IG_ERR_INVALID_ARG,
                "%s: token id %" PRId32 " (position %zu of sequence %" PRIu64
                ") does not fit dtype %s [%" PRId64 ", %" PRId64 "]%s",
                w->prefix, ids[i], i, w->n_seqs, ig_dtype_name(w->dtype), lo, hi,
                w->dtype == IG_DTYPE_U16 ? " (vocabularies of 65500 or more need int32)" : "");
    }
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CHUNK_ITEMS ? n - done : CHUNK_ITEMS;
        encode_tokens(w->buf, ids + done, k, w->dtype);
        ig_status st = ig_shard_writer_put_bytes(w, w->buf, k * w->itemsize, err);
        if (st != IG_OK) return st;
        done += k;
    }
    return ig_shard_writer_put_length(w, (int32_t)n, err);
}

ig_status ig_shard_writer_end_document(ig_shard_writer *w, ig_err *err) {
    return ig_shard_writer_put_doc_end(w, err);
}

ig_status ig_shard_writer_add_document(ig_shard_writer *w, const int32_t *ids, size_t n,
                                       ig_err *err) {
    ig_status st = ig_shard_writer_add_sequence(w, ids, n, err);
    if (st != IG_OK) return st;
    return ig_shard_writer_end_document(w, err);
}

ig_status ig_shard_writer_add_raw(ig_shard_writer *w, const void *tokens, size_t n_tokens,
                                  const int32_t *seq_lengths, size_t n_seqs,
                                  const int64_t *doc_seq_counts, size_t n_docs, ig_err *err) {
    if (w->failed) return writer_failed(w, err);
    uint64_t sum = 0, seqs = 0;
    for (size_t i = 0; i < n_seqs; i++) {
        if (seq_lengths[i] < 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG, "seq_lengths[%zu] = %" PRId32 " is negative",
                              i, seq_lengths[i]);
        sum += (uint64_t)seq_lengths[i];
    }
    for (size_t d = 0; d < n_docs; d++) {
        if (doc_seq_counts[d] < 0)
            return ig_err_set(err, IG_ERR_INVALID_ARG,
                              "doc_seq_counts[%zu] = %" PRId64 " is negative", d,
                              doc_seq_counts[d]);
        seqs += (uint64_t)doc_seq_counts[d];
    }
    if (sum != n_tokens || seqs != n_seqs)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "add_raw: the sequence lengths sum to %" PRIu64 " tokens (given %zu) "
                          "and the documents hold %" PRIu64 " sequences (given %zu)",
                          sum, n_tokens, seqs, n_seqs);
    ig_status st = ig_shard_writer_put_bytes(w, tokens, n_tokens * w->itemsize, err);
    size_t s = 0;
    for (size_t d = 0; d < n_docs && st == IG_OK; d++) {
        for (int64_t k = 0; k < doc_seq_counts[d] && st == IG_OK; k++)
            st = ig_shard_writer_put_length(w, seq_lengths[s++], err);
        if (st == IG_OK) st = ig_shard_writer_put_doc_end(w, err);
    }
    return st;
}

/* ---- finish: the .idx from the spills, then the commits ---- */

typedef struct idx_out {
    ig_atomic_file *af;
    ig_xxh3_stream *hash;
} idx_out;

static ig_status idx_write(idx_out *o, const void *data, size_t len, ig_err *err) {
    ig_xxh3_stream_update(o->hash, data, len);
    return ig_atomic_file_write(o->af, data, len, err);
}

static ig_status spill_rewind(FILE *f, const char *prefix, ig_err *err) {
    if (fflush(f) != 0 || ferror(f) || fseeko(f, 0, SEEK_SET) != 0)
        return ig_err_errno(err, errno, "cannot read back the temporary index of %s", prefix);
    return IG_OK;
}

/* Reads exactly len bytes of a spill (which must hold them). */
static ig_status spill_read(FILE *f, void *buf, size_t len, const char *prefix, ig_err *err) {
    if (fread(buf, 1, len, f) != len)
        return ig_err_set(err, IG_ERR_IO, "%s: the temporary index was truncated while writing",
                          prefix);
    return IG_OK;
}

static ig_status write_idx(ig_shard_writer *w, idx_out *o, ig_err *err) {
    uint8_t header[IG_IDX_HEADER_BYTES];
    ig_idx_encode_header(header, w->dtype, w->n_seqs, w->n_docs + 1);
    ig_status st = idx_write(o, header, sizeof header, err);
    /* lengths: the spill holds them already in their on-disk form */
    if (st == IG_OK) st = spill_rewind(w->lens, w->prefix, err);
    for (uint64_t done = 0; st == IG_OK && done < w->n_seqs;) {
        size_t k = w->n_seqs - done < CHUNK_ITEMS ? (size_t)(w->n_seqs - done) : CHUNK_ITEMS;
        st = spill_read(w->lens, w->buf, k * 4, w->prefix, err);
        if (st == IG_OK) st = idx_write(o, w->buf, k * 4, err);
        done += k;
    }
    /* pointers: a second pass over the lengths, 64-bit running byte offsets */
    if (st == IG_OK) st = spill_rewind(w->lens, w->prefix, err);
    int32_t lengths[4096];
    int64_t pointers[4096];
    uint64_t off = 0;
    for (uint64_t done = 0; st == IG_OK && done < w->n_seqs;) {
        size_t cap = 4096;
        size_t k = w->n_seqs - done < cap ? (size_t)(w->n_seqs - done) : cap;
        st = spill_read(w->lens, w->buf, k * 4, w->prefix, err);
        if (st != IG_OK) break;
        for (size_t i = 0; i < k; i++) lengths[i] = ig_le_i32(w->buf + 4 * i);
        off = ig_idx_fill_pointers(pointers, lengths, k, off, w->itemsize);
        for (size_t i = 0; i < k; i++) ig_put_le_u64(w->buf + 8 * i, (uint64_t)pointers[i]);
        st = idx_write(o, w->buf, k * 8, err);
        done += k;
    }
    if (st == IG_OK && off != w->bin_bytes)
        st = ig_err_set(err, IG_ERR_INTERNAL,
                        "%s: the sequence lengths cover %" PRIu64 " bytes but %" PRIu64
                        " were written (a bug in ingot: please report it)",
                        w->prefix, off, w->bin_bytes);
    /* document_indices: 0, then every document end */
    uint8_t zero[8] = {0};
    if (st == IG_OK) st = idx_write(o, zero, 8, err);
    if (st == IG_OK) st = spill_rewind(w->docs, w->prefix, err);
    for (uint64_t done = 0; st == IG_OK && done < w->n_docs;) {
        size_t k = w->n_docs - done < CHUNK_ITEMS ? (size_t)(w->n_docs - done) : CHUNK_ITEMS;
        st = spill_read(w->docs, w->buf, k * 8, w->prefix, err);
        if (st == IG_OK) st = idx_write(o, w->buf, k * 8, err);
        done += k;
    }
    return st;
}

ig_status ig_shard_writer_finish_data(ig_shard_writer *w, const ig_manifest *meta, ig_manifest *out,
                                      ig_err *err) {
    memset(out, 0, sizeof *out);
    ig_err local = {0};
    if (!err) err = &local;
    if (w->failed) {
        ig_status st = writer_failed(w, err);
        ig_shard_writer_abort(w);
        return st;
    }
    ig_status st = IG_OK;
    /* sequences after the last end_document form a final document */
    if (w->n_seqs > w->last_doc_end) st = ig_shard_writer_put_doc_end(w, err);

    idx_out o = {0};
    if (st == IG_OK) st = ig_atomic_file_create(&o.af, w->idx_path, w->overwrite, err);
    if (st == IG_OK && !(o.hash = ig_xxh3_stream_create()))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) st = write_idx(w, &o, err);

    if (st == IG_OK) {
        if (meta) {
            memcpy(out->tokenizer, meta->tokenizer, sizeof out->tokenizer);
            memcpy(out->tokenizer_path, meta->tokenizer_path, sizeof out->tokenizer_path);
            memcpy(out->json_key, meta->json_key, sizeof out->json_key);
            memcpy(out->output, meta->output, sizeof out->output);
            out->tokenizer_hash = meta->tokenizer_hash;
            out->vocab_size = meta->vocab_size;
            out->eod_id = meta->eod_id;
            for (size_t i = 0; i < meta->n_sources && st == IG_OK; i++)
                st = ig_manifest_add_source(out, meta->sources[i], err);
        } else {
            out->eod_id = -1;
        }
        snprintf(out->tool_version, sizeof out->tool_version, "ingot %s", IG_VERSION_STRING);
        out->dtype = w->dtype;
        out->documents = w->n_docs;
        out->sequences = w->n_seqs;
        out->tokens = w->n_tokens;
        out->bin_bytes = w->bin_bytes;
        out->idx_bytes = ig_atomic_file_size(o.af);
        out->bin_xxh3 = ig_xxh3_stream_digest(w->bin_hash);
        out->idx_xxh3 = ig_xxh3_stream_digest(o.hash);
        st = ig_manifest_check_vocab(out, w->json_path, err); /* before anything is committed */
    }
    /* an old manifest must never sit beside new data, nor an old .idx beside the new .bin, even
     * if we are killed mid-commit: remove both before the new files go in */
    if (st == IG_OK && w->overwrite && unlink(w->json_path) != 0 && errno != ENOENT)
        st = ig_err_errno(err, errno, "cannot remove the old manifest %s", w->json_path);
    if (st == IG_OK && w->overwrite && unlink(w->idx_path) != 0 && errno != ENOENT)
        st = ig_err_errno(err, errno, "cannot remove the old index %s", w->idx_path);
    if (st == IG_OK) { /* .bin, then .idx */
        ig_atomic_file *both[2] = {w->bin, o.af};
        st = ig_atomic_files_commit(both, 2, err);
        w->bin = NULL;
        o.af = NULL;
    }
    if (st != IG_OK) ig_manifest_clear(out);
    ig_atomic_file_abort(o.af);
    ig_xxh3_stream_free(o.hash);
    ig_shard_writer_abort(w);
    return st;
}

ig_status ig_shard_writer_finish(ig_shard_writer *w, const ig_manifest *meta, ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    int overwrite = w->overwrite;
    ig_ctx *ctx = w->ctx;
    /* the names the cleanup below needs are copied before anything is committed: once the data
     * is in place, removing it must not depend on an allocation */
    char *prefix = ig_strdup(ctx, w->prefix), *bin = ig_strdup(ctx, w->bin_path);
    char *idx = ig_strdup(ctx, w->idx_path);
    ig_status st = IG_OK;
    if (!prefix || !bin || !idx) {
        ig_shard_writer_abort(w);
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else {
        ig_manifest m;
        st = ig_shard_writer_finish_data(w, meta, &m, err);
        /* the manifest last: it marks the shard complete; without it, the data just written
         * goes (only that: a manifest in the way is not ours) */
        if (st == IG_OK && (st = ig_manifest_write(&m, prefix, overwrite, err)) != IG_OK) {
            unlink(idx);
            unlink(bin);
        }
        ig_manifest_clear(&m);
    }
    ig_free(ctx, idx);
    ig_free(ctx, bin);
    ig_free(ctx, prefix);
    return st;
}
