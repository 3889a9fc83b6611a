/* shard_internal.h - private to dataset/: the byte layout of Megatron's .idx (DESIGN 3.1), the
 * in-memory validator the reader and the fuzz target share, little-endian loads and stores, and
 * the writer's low-level primitives that merge uses to copy without decoding.
 */
#ifndef INGOT_SHARD_INTERNAL_H
#define INGOT_SHARD_INTERNAL_H

#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"

#define IG_IDX_MAGIC     "MMIDIDX\0\0"
#define IG_IDX_MAGIC_LEN 9
#define IG_IDX_VERSION   1
/* magic (9) + version (8) + dtype (1) + N (8) + D (8) */
#define IG_IDX_HEADER_BYTES 34

/* The manifest's format name and version (PREFIX.json "format"/"format_version"). */
#define IG_MANIFEST_FORMAT  "ingot-token-shard"
#define IG_MANIFEST_VERSION 1

/* The largest manifest or shard list read: a list of a million shards is about 200 MB; the cap
 * stops the wrong file (/dev/zero, a disk image) early. */
#define IG_JSON_FILE_MAX ((size_t)1 << 30)

/* Where the arrays of a validated .idx are, and what it describes. */
typedef struct ig_idx_layout {
    ig_dtype dtype;
    size_t itemsize;
    uint64_t n;           /* sequences */
    uint64_t d;           /* entries of document_indices (documents + 1) */
    uint64_t tokens;      /* sum of lengths */
    uint64_t max_length;  /* longest sequence */
    size_t lengths_off;   /* byte offset of i32 lengths[N] */
    size_t pointers_off;  /* byte offset of i64 pointers[N] */
    size_t doc_index_off; /* byte offset of i64 document_indices[D] */
} ig_idx_layout;

/* Checks a whole .idx held in memory against the size of its .bin: magic, version, dtype code,
 * header counts against the buffer size, lengths >= 0, pointers starting at 0 and contiguous,
 * the last sequence ending exactly at bin_len, document_indices starting at 0, non-decreasing and
 * ending at N. idx_name / bin_name are used in messages (e.g. "x.idx"). Never reads outside
 * idx[0..idx_len). IG_OK and *out filled, or IG_ERR_FORMAT naming the file, field and index. */
ig_status ig_shard_validate_idx(const uint8_t *idx, size_t idx_len, uint64_t bin_len,
                                const char *idx_name, const char *bin_name, ig_idx_layout *out,
                                ig_err *err);

/* Encodes the 34-byte header. */
void ig_idx_encode_header(uint8_t out[IG_IDX_HEADER_BYTES], ig_dtype dtype, uint64_t n, uint64_t d);
/* Fills pointers[i] with the byte offsets of n sequences of the given lengths that start at byte
 * `start` (the running offset of earlier sequences): pointers[i] = start + itemsize * sum of
 * lengths[0..i). Returns the offset just past the last sequence. 64-bit throughout, so shards
 * beyond 4 GiB are fine. */
uint64_t ig_idx_fill_pointers(int64_t *pointers, const int32_t *lengths, size_t n, uint64_t start,
                              size_t itemsize);
/* Total size of an .idx with n sequences and d document indices. */
uint64_t ig_idx_file_size(uint64_t n, uint64_t d);

/* ---- little-endian, unaligned-safe loads and stores ---- */

static inline uint64_t ig_le_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint32_t ig_le_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline int32_t ig_le_i32(const uint8_t *p) {
    uint32_t u = ig_le_u32(p);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}
static inline int64_t ig_le_i64(const uint8_t *p) {
    uint64_t u = ig_le_u64(p);
    int64_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}
static inline void ig_put_le_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ig_put_le_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- writer primitives (shard_writer.c) used by merge ---- */

/* Appends raw token bytes (already in the writer's dtype, little-endian; a multiple of the item
 * size) to .bin without starting a sequence. */
ig_status ig_shard_writer_put_bytes(ig_shard_writer *w, const void *data, size_t len, ig_err *err);
/* For copying into .bin from several threads: reserve takes the next len bytes of .bin (they
 * count as put, at *offset), put_at writes a part of a reserved range (thread-safe for disjoint
 * parts, alongside no other call on w), and hash_bin feeds the reserved bytes to the .bin's
 * checksum, all of them, in order (one thread). Every reserved byte must be written and hashed
 * before finish. */
ig_status ig_shard_writer_reserve(ig_shard_writer *w, uint64_t len, uint64_t *offset, ig_err *err);
ig_status ig_shard_writer_put_at(ig_shard_writer *w, uint64_t offset, const void *data, size_t len,
                                 ig_err *err);
void ig_shard_writer_hash_bin(ig_shard_writer *w, const void *data, size_t len);
/* Marks w failed (after a put_at failed): it can only be aborted. */
void ig_shard_writer_set_failed(ig_shard_writer *w);
/* Records one sequence of `length` tokens whose bytes were put with put_bytes. */
ig_status ig_shard_writer_put_length(ig_shard_writer *w, int32_t length, ig_err *err);
/* Ends a document at the current sequence count (as ig_shard_writer_end_document, which also
 * accepts documents with no sequence). */
ig_status ig_shard_writer_put_doc_end(ig_shard_writer *w, ig_err *err);

/* A manifest's vocab_size and eod_id make sense and its dtype holds every id, so that it says
 * which ids the .bin may hold (verify checks them): vocab_size 0 means "unknown", which only a
 * manifest naming no tokenizer may say (a merge of different tokenizers); eod_id is -1 or an id.
 * path names the manifest in messages. Manifests are checked when read and before written. */
ig_status ig_manifest_check_vocab(const ig_manifest *m, const char *path, ig_err *err);

/* Checks an open shard's manifest (when it has one) against its files: dtype, documents,
 * sequences, tokens, the sizes of both files and the .idx's xxh3. IG_ERR_FORMAT naming the field,
 * or IG_ERR_CHECKSUM. ig_shard_open calls it. */
ig_status ig_shard_check_manifest(const ig_shard *s, ig_err *err);

/* Verifies prefixes[0 .. n) (ig_shard_verify each), several at once on ctx's pool: IG_OK, or
 * the first failure in order with *n_ok the shards before it (as one after another). */
ig_status ig_shard_verify_many(ig_ctx *ctx, char *const *prefixes, size_t n, size_t *n_ok,
                               ig_err *err);

/* The raw bytes of an open shard's .idx (for verify's checksum). */
const uint8_t *ig_shard_idx_data(const ig_shard *s, size_t *len);

/* "PREFIX" + suffix, allocated through ctx (NULL: malloc); NULL when out of memory. */
char *ig_shard_path(ig_ctx *ctx, const char *prefix, const char *suffix);

#endif
