/* shard_format.c - the byte layout of Megatron's indexed dataset (.idx, DESIGN 3.1): dtype codes,
 * header encoding, pointer arithmetic, and the validator that every .idx passes before use.
 *
 * The validator works on an in-memory buffer so that the reader (on a mapped file) and the fuzz
 * target (on arbitrary bytes) share it. It checks every invariant Megatron's IndexedDataset relies
 * on, and its messages name the file, the field and the index of the first bad entry, because a
 * shard that is "a bit wrong" silently trains a model on the wrong tokens. Also: removing a
 * shard's files in a safe order.
 */
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "shard_internal.h"

size_t ig_dtype_size(ig_dtype dt) {
    switch (dt) {
    case IG_DTYPE_U8:
    case IG_DTYPE_I8:
        return 1;
    case IG_DTYPE_I16:
    case IG_DTYPE_U16:
        return 2;
    case IG_DTYPE_I32:
    case IG_DTYPE_F32:
        return 4;
    case IG_DTYPE_I64:
    case IG_DTYPE_F64:
        return 8;
    }
    return 0;
}

const char *ig_dtype_name(ig_dtype dt) {
    switch (dt) {
    case IG_DTYPE_U8:
        return "uint8";
    case IG_DTYPE_I8:
        return "int8";
    case IG_DTYPE_I16:
        return "int16";
    case IG_DTYPE_I32:
        return "int32";
    case IG_DTYPE_I64:
        return "int64";
    case IG_DTYPE_F64:
        return "float64";
    case IG_DTYPE_F32:
        return "float32";
    case IG_DTYPE_U16:
        return "uint16";
    }
    return "unknown";
}

ig_dtype ig_dtype_for_vocab(size_t vocab_size) {
    return vocab_size < 65500 ? IG_DTYPE_U16 : IG_DTYPE_I32;
}

char *ig_shard_path(ig_ctx *ctx, const char *prefix, const char *suffix) {
    size_t a = strlen(prefix), b = strlen(suffix);
    char *p = ig_alloc(ctx, a + b + 1);
    if (!p) return NULL;
    memcpy(p, prefix, a);
    memcpy(p + a, suffix, b + 1);
    return p;
}

void ig_idx_encode_header(uint8_t out[IG_IDX_HEADER_BYTES], ig_dtype dtype, uint64_t n,
                          uint64_t d) {
    memcpy(out, IG_IDX_MAGIC, IG_IDX_MAGIC_LEN);
    ig_put_le_u64(out + 9, IG_IDX_VERSION);
    out[17] = (uint8_t)dtype;
    ig_put_le_u64(out + 18, n);
    ig_put_le_u64(out + 26, d);
}

uint64_t ig_idx_fill_pointers(int64_t *pointers, const int32_t *lengths, size_t n, uint64_t start,
                              size_t itemsize) {
    uint64_t off = start;
    for (size_t i = 0; i < n; i++) {
        pointers[i] = (int64_t)off;
        off += (uint64_t)(uint32_t)lengths[i] * itemsize;
    }
    return off;
}

uint64_t ig_idx_file_size(uint64_t n, uint64_t d) {
    return IG_IDX_HEADER_BYTES + n * 12 + d * 8;
}

ig_status ig_shard_validate_idx(const uint8_t *idx, size_t idx_len, uint64_t bin_len,
                                const char *idx_name, const char *bin_name, ig_idx_layout *out,
                                ig_err *err) {
    memset(out, 0, sizeof *out);
    if (idx_len == 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: empty file (expected a Megatron index starting with "
                          "\"MMIDIDX\\0\\0\"); the shard was not written completely, rebuild it",
                          idx_name);
    size_t magic_n = idx_len < IG_IDX_MAGIC_LEN ? idx_len : IG_IDX_MAGIC_LEN;
    if (memcmp(idx, IG_IDX_MAGIC, magic_n) != 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: bad magic (expected \"MMIDIDX\\0\\0\"): not a Megatron mmap "
                          "index file",
                          idx_name);
    if (idx_len < IG_IDX_HEADER_BYTES)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: truncated header: the file has %zu bytes but the header needs %d",
                          idx_name, idx_len, IG_IDX_HEADER_BYTES);
    uint64_t version = ig_le_u64(idx + 9);
    if (version != IG_IDX_VERSION)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: version = %" PRIu64 " but only version 1 is supported", idx_name,
                          version);
    ig_dtype dtype = (ig_dtype)idx[17];
    size_t itemsize = ig_dtype_size(dtype);
    if (itemsize == 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: dtype = %u is not a known dtype code (expected 1..8)", idx_name,
                          (unsigned)idx[17]);
    uint64_t n = ig_le_u64(idx + 18), d = ig_le_u64(idx + 26);
    uint64_t room = idx_len - IG_IDX_HEADER_BYTES;
    /* each sequence takes 12 bytes (i32 length + i64 pointer), each document index 8 */
    if (n > room / 12)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: N = %" PRIu64 " sequences is too large for a file of %zu bytes "
                          "(the lengths and pointers alone need %" PRIu64 "+ bytes)",
                          idx_name, n, idx_len, n > UINT64_MAX / 12 ? UINT64_MAX : n * 12);
    if (d == 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: D = 0 but document_indices must hold at least [0, N]", idx_name);
    if (d > (room - n * 12) / 8)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: D = %" PRIu64 " document indices is too large for a file of %zu "
                          "bytes with N = %" PRIu64,
                          idx_name, d, idx_len, n);
    uint64_t want = ig_idx_file_size(n, d);
    if (want != idx_len)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: file size is %zu bytes but N = %" PRIu64 ", D = %" PRIu64
                          " imply %" PRIu64 " bytes (trailing data or a corrupt header)",
                          idx_name, idx_len, n, d, want);

    const uint8_t *lengths = idx + IG_IDX_HEADER_BYTES;
    const uint8_t *pointers = lengths + n * 4;
    const uint8_t *docs = pointers + n * 8;
    uint64_t expect = 0, tokens = 0, max_len = 0;
    for (uint64_t i = 0; i < n; i++) {
        int32_t len = ig_le_i32(lengths + i * 4);
        if (len < 0)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: lengths[%" PRIu64 "] = %" PRId32 " is negative", idx_name, i,
                              len);
        int64_t p = ig_le_i64(pointers + i * 8);
        if (p < 0 || (uint64_t)p != expect)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: pointers[%" PRIu64 "] = %" PRId64 " but expected %" PRIu64
                              " (%s)",
                              idx_name, i, p, expect,
                              i == 0 ? "pointers must start at 0"
                                     : "pointers must be contiguous: pointers[i+1] = "
                                       "pointers[i] + lengths[i] * itemsize");
        expect += (uint64_t)len * itemsize;
        tokens += (uint64_t)len;
        if ((uint64_t)len > max_len) max_len = (uint64_t)len;
        /* stop early (and keep expect far from overflow) once past the data */
        if (expect > bin_len)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: sequence %" PRIu64 " ends at byte %" PRIu64
                              " but %s has only %" PRIu64 " bytes (.bin size mismatch: the "
                              ".bin is truncated or belongs to another index)",
                              idx_name, i, expect, bin_name, bin_len);
    }
    if (expect != bin_len)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: size is %" PRIu64 " bytes but %s describes %" PRIu64
                          " bytes (%" PRIu64 " tokens of %zu bytes): .bin size mismatch",
                          bin_name, bin_len, idx_name, expect, tokens, itemsize);
    int64_t prev = 0;
    for (uint64_t j = 0; j < d; j++) {
        int64_t v = ig_le_i64(docs + j * 8);
        if (j == 0 && v != 0)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: document_indices[0] = %" PRId64 " but expected 0", idx_name, v);
        if (v < prev)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: document_indices[%" PRIu64 "] = %" PRId64
                              " is less than document_indices[%" PRIu64 "] = %" PRId64
                              " (must be non-decreasing)",
                              idx_name, j, v, j - 1, prev);
        if ((uint64_t)v > n)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: document_indices[%" PRIu64 "] = %" PRId64
                              " is beyond N = %" PRIu64,
                              idx_name, j, v, n);
        prev = v;
    }
    if ((uint64_t)prev != n)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: document_indices[%" PRIu64 "] = %" PRId64
                          " but expected N = %" PRIu64
                          " (the last document index must equal the number of sequences)",
                          idx_name, d - 1, prev, n);

    out->dtype = dtype;
    out->itemsize = itemsize;
    out->n = n;
    out->d = d;
    out->tokens = tokens;
    out->max_length = max_len;
    out->lengths_off = IG_IDX_HEADER_BYTES;
    out->pointers_off = IG_IDX_HEADER_BYTES + (size_t)n * 4;
    out->doc_index_off = out->pointers_off + (size_t)n * 8;
    return IG_OK;
}

ig_status ig_output_prefix_check(const char *prefix, ig_err *err) {
    if (!prefix || !*prefix) return ig_err_set(err, IG_ERR_INVALID_ARG, "no output prefix given");
    const char *slash = strrchr(prefix, '/'), *base = slash ? slash + 1 : prefix;
    if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "output prefix '%s' names a directory, but a prefix is the start of file "
                          "names: give one inside it (e.g. '%s%scorpus' writes %s%scorpus.bin, "
                          ".idx and .json)",
                          prefix, prefix, *base ? "/" : "", prefix, *base ? "/" : "");
    return IG_OK;
}

void ig_shard_remove(const char *prefix) {
    static const char *const exts[] = {".json", ".bin", ".idx"};
    for (int e = 0; e < 3; e++) {
        char path[4096];
        snprintf(path, sizeof path, "%s%s", prefix, exts[e]);
        unlink(path);
    }
}
