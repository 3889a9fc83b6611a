/* shard_verify.c - what is checked of a token shard, and when.
 *
 * On every open (ig_shard_open: inspect, blend, samples, the loader, merge's inputs), beside the
 * .idx structure: a manifest that is present must describe these files (dtype, counts, sizes)
 * and match the .idx's xxh3. Hashing the .idx costs little next to validating it, and it means
 * that an index or a manifest edited by hand is refused before anything reads tokens through it.
 *
 * The complete check behind `ingot verify` (ig_shard_verify) adds what needs every token read:
 * the manifest present, the xxh3 of the .bin, and every token id inside the vocabulary the
 * manifest records. A shard that passes is complete and unchanged since it was written.
 */
#include <inttypes.h>
#include <stdio.h>

#include "shard_internal.h"

static ig_status mismatch(ig_err *err, const char *prefix, const char *field, uint64_t manifest,
                          uint64_t actual, const char *where) {
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s.json: %s = %" PRIu64 " but %s%s has %" PRIu64
                      " (the manifest does not describe these files; rebuild the shard)",
                      prefix, field, manifest, prefix, where, actual);
}

static ig_status checksum_error(ig_err *err, const char *prefix, const char *ext, uint64_t got,
                                uint64_t want) {
    char a[17], b[17];
    ig_hash64_hex(got, a);
    ig_hash64_hex(want, b);
    return ig_err_set(err, IG_ERR_CHECKSUM,
                      "%s%s: xxh3 is %s but the manifest records %s (the file was modified or "
                      "is corrupt; rebuild the shard)",
                      prefix, ext, a, b);
}

ig_status ig_shard_check_manifest(const ig_shard *s, ig_err *err) {
    const ig_manifest *m = ig_shard_manifest(s);
    if (!m) return IG_OK;
    const char *prefix = ig_shard_prefix(s);
    size_t idx_len;
    const uint8_t *idx = ig_shard_idx_data(s, &idx_len);
    if (m->dtype != ig_shard_dtype(s))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s.json: dtype = %s but %s.idx has %s (the manifest does not describe "
                          "these files; rebuild the shard)",
                          prefix, ig_dtype_name(m->dtype), prefix,
                          ig_dtype_name(ig_shard_dtype(s)));
    if (m->documents != ig_shard_documents(s))
        return mismatch(err, prefix, "documents", m->documents, ig_shard_documents(s), ".idx");
    if (m->sequences != ig_shard_sequences(s))
        return mismatch(err, prefix, "sequences", m->sequences, ig_shard_sequences(s), ".idx");
    if (m->tokens != ig_shard_tokens(s))
        return mismatch(err, prefix, "tokens", m->tokens, ig_shard_tokens(s), ".idx");
    if (m->bin_bytes != ig_shard_bin_bytes(s))
        return mismatch(err, prefix, "bin_bytes", m->bin_bytes, ig_shard_bin_bytes(s), ".bin");
    if (m->idx_bytes != idx_len)
        return mismatch(err, prefix, "idx_bytes", m->idx_bytes, idx_len, ".idx");
    uint64_t got = ig_xxh3_64(idx, idx_len);
    if (got != m->idx_xxh3) return checksum_error(err, prefix, ".idx", got, m->idx_xxh3);
    return IG_OK;
}

/* The token at p as a signed id; a float that is not a whole number in range gives -1. */
static int64_t token_at(const uint8_t *p, ig_dtype dt) {
    double f;
    switch (dt) {
    case IG_DTYPE_U8:
        return p[0];
    case IG_DTYPE_I8:
        return (int8_t)p[0];
    case IG_DTYPE_U16:
        return (int64_t)(p[0] | p[1] << 8);
    case IG_DTYPE_I16:
        return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case IG_DTYPE_I32:
        return ig_le_i32(p);
    case IG_DTYPE_I64:
        return ig_le_i64(p);
    case IG_DTYPE_F32: {
        uint32_t u = ig_le_u32(p);
        float g;
        memcpy(&g, &u, 4);
        f = g;
        break;
    }
    default: {
        uint64_t u = ig_le_u64(p);
        memcpy(&f, &u, 8);
        break;
    }
    }
    return f >= 0 && f < 9e18 && f == (double)(int64_t)f ? (int64_t)f : -1;
}

/* The index of the first token of chunk[0..len) outside [0, limit) (*value gets it), or
 * len / itemsize when there is none. u16 and i32, the dtypes of token shards, are scanned first
 * with plain loops the compiler vectorizes. */
static uint64_t first_bad_token(const uint8_t *chunk, size_t len, ig_dtype dt, uint64_t limit,
                                int64_t *value) {
    size_t isz = ig_dtype_size(dt), n = len / isz;
    if (dt == IG_DTYPE_U16 || dt == IG_DTYPE_I32) {
        uint32_t top = 0; /* i32 as unsigned: a negative id is above any limit */
        if (dt == IG_DTYPE_U16)
            for (size_t i = 0; i < n; i++) {
                uint32_t v = (uint32_t)chunk[2 * i] | (uint32_t)chunk[2 * i + 1] << 8;
                top = v > top ? v : top;
            }
        else
            for (size_t i = 0; i < n; i++) {
                uint32_t v = ig_le_u32(chunk + 4 * i);
                top = v > top ? v : top;
            }
        if (top < limit) return n;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t v = token_at(chunk + i * isz, dt);
        if (v < 0 || (uint64_t)v >= limit) {
            *value = v;
            return i;
        }
    }
    return n;
}

/* The sequence whose bytes in .bin hold byte `byte`. */
static uint64_t sequence_of(const ig_shard *s, uint64_t byte) {
    uint64_t lo = 0, hi = ig_shard_sequences(s);
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)ig_shard_seq_pointer(s, mid) <= byte)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

#define VERIFY_CHUNK ((size_t)1 << 20)

/* Hashes the .bin and checks every token id against the manifest's vocabulary (any non-negative
 * id the dtype holds when the vocabulary is unknown), one chunk at a time so that each is read
 * from memory once. */
static ig_status check_bin(const ig_shard *s, const ig_manifest *m, ig_err *err) {
    const char *prefix = ig_shard_prefix(s);
    const uint8_t *bin = ig_shard_bin(s);
    uint64_t size = ig_shard_bin_bytes(s);
    ig_dtype dt = ig_shard_dtype(s);
    size_t isz = ig_dtype_size(dt);
    uint64_t limit = m->vocab_size ? m->vocab_size : (uint64_t)INT64_MAX;
    ig_xxh3_stream *h = ig_xxh3_stream_create();
    if (!h) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = IG_OK;
    for (uint64_t off = 0; off < size && st == IG_OK; off += VERIFY_CHUNK) {
        size_t k = size - off < VERIFY_CHUNK ? (size_t)(size - off) : VERIFY_CHUNK;
        ig_xxh3_stream_update(h, bin + off, k);
        int64_t v = 0;
        uint64_t i = first_bad_token(bin + off, k, dt, limit, &v);
        if (i < k / isz) {
            uint64_t byte = off + i * isz, seq = sequence_of(s, byte);
            uint64_t pos = (byte - (uint64_t)ig_shard_seq_pointer(s, seq)) / isz;
            if (m->vocab_size)
                st = ig_err_set(err, IG_ERR_FORMAT,
                                "%s.bin: token %" PRIu64 " (sequence %" PRIu64 ", position %" PRIu64
                                ") is %" PRId64 " but the vocabulary (%s) has ids 0..%" PRIu64
                                ": these are not this tokenizer's ids; rebuild the shard",
                                prefix, byte / isz, seq, pos, v,
                                m->tokenizer[0] ? m->tokenizer : "vocab_size in the manifest",
                                m->vocab_size - 1);
            else
                st = ig_err_set(err, IG_ERR_FORMAT,
                                "%s.bin: token %" PRIu64 " (sequence %" PRIu64 ", position %" PRIu64
                                ") is %" PRId64 ", not a token id; rebuild the shard",
                                prefix, byte / isz, seq, pos, v);
        }
    }
    uint64_t got = ig_xxh3_stream_digest(h);
    ig_xxh3_stream_free(h);
    /* a changed file is reported as such, before what the change did to its ids */
    if (got != m->bin_xxh3) return checksum_error(err, prefix, ".bin", got, m->bin_xxh3);
    return st;
}

ig_status ig_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    ig_shard *s;
    ig_status st = ig_shard_open(&s, ctx, prefix, err); /* structure, manifest, .idx checksum */
    if (st != IG_OK) return st;
    const ig_manifest *m = ig_shard_manifest(s);
    ig_manifest missing;
    if (!m) {
        st = ig_manifest_read(&missing, prefix, err); /* fills the "manifest missing" message */
        ig_manifest_clear(&missing);
        if (st == IG_OK) st = ig_err_set(err, IG_ERR_NOT_FOUND, "%s.json: missing", prefix);
        ig_shard_close(s);
        return st;
    }
    st = check_bin(s, m, err);
    ig_shard_close(s);
    return st;
}
