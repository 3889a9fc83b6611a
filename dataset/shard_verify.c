/* shard_verify.c - the complete check of a token shard behind `ingot verify`: structure (as on
 * open), the manifest present and describing exactly these files, and the xxh3 checksums of
 * .bin and .idx. A shard that passes is complete and unchanged since it was written.
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

static ig_status checksum(ig_err *err, const char *prefix, const char *ext, const void *data,
                          size_t len, uint64_t want) {
    uint64_t got = ig_xxh3_64(data, len);
    if (got == want) return IG_OK;
    char a[17], b[17];
    ig_hash64_hex(got, a);
    ig_hash64_hex(want, b);
    return ig_err_set(err, IG_ERR_CHECKSUM,
                      "%s%s: xxh3 is %s but the manifest records %s (the file was modified or "
                      "is corrupt; rebuild the shard)",
                      prefix, ext, a, b);
}

ig_status ig_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    ig_shard *s;
    ig_status st = ig_shard_open(&s, ctx, prefix, err);
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
    size_t idx_len;
    const uint8_t *idx = ig_shard_idx_data(s, &idx_len);
    if (m->dtype != ig_shard_dtype(s))
        st = ig_err_set(err, IG_ERR_FORMAT, "%s.json: dtype = %s but %s.idx has %s", prefix,
                        ig_dtype_name(m->dtype), prefix, ig_dtype_name(ig_shard_dtype(s)));
    else if (m->documents != ig_shard_documents(s))
        st = mismatch(err, prefix, "documents", m->documents, ig_shard_documents(s), ".idx");
    else if (m->sequences != ig_shard_sequences(s))
        st = mismatch(err, prefix, "sequences", m->sequences, ig_shard_sequences(s), ".idx");
    else if (m->tokens != ig_shard_tokens(s))
        st = mismatch(err, prefix, "tokens", m->tokens, ig_shard_tokens(s), ".idx");
    else if (m->bin_bytes != ig_shard_bin_bytes(s))
        st = mismatch(err, prefix, "bin_bytes", m->bin_bytes, ig_shard_bin_bytes(s), ".bin");
    else if (m->idx_bytes != idx_len)
        st = mismatch(err, prefix, "idx_bytes", m->idx_bytes, idx_len, ".idx");
    if (st == IG_OK)
        st = checksum(err, prefix, ".bin", ig_shard_bin(s), ig_shard_bin_bytes(s), m->bin_xxh3);
    if (st == IG_OK) st = checksum(err, prefix, ".idx", idx, idx_len, m->idx_xxh3);
    ig_shard_close(s);
    return st;
}
