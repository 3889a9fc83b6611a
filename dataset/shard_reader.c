/* shard_reader.c - opens a Megatron-compatible token shard (PREFIX.bin + PREFIX.idx) read-only.
 *
 * Both files are mapped, and the whole index is validated on open (ig_shard_validate_idx), so
 * that every accessor afterwards can trust the arrays. The arrays start at byte 34 of the .idx and
 * are therefore unaligned: every load goes through the little-endian helpers (memcpy-safe).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "shard_internal.h"

struct ig_shard {
    ig_ctx *ctx;
    char *prefix;
    ig_mapped_file idx, bin;
    ig_idx_layout layout;
    ig_manifest manifest;
    int has_manifest;
};

void ig_shard_close(ig_shard *s) {
    if (!s) return;
    ig_mapped_file_close(&s->idx);
    ig_mapped_file_close(&s->bin);
    ig_manifest_clear(&s->manifest);
    ig_free(s->ctx, s->prefix);
    ig_free(s->ctx, s);
}

ig_status ig_shard_open(ig_shard **out, ig_ctx *ctx, const char *prefix, ig_err *err) {
    ig_err local = {0};
    if (!err) err = &local;
    *out = NULL;
    ig_shard *s = ig_alloc(ctx, sizeof *s);
    if (!s) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->prefix = ig_strdup(ctx, prefix);
    char *idx_path = ig_shard_path(ctx, prefix, ".idx"),
         *bin_path = ig_shard_path(ctx, prefix, ".bin");
    ig_status st = IG_OK;
    if (!s->prefix || !idx_path || !bin_path) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (!ig_file_exists(idx_path) || !ig_file_exists(bin_path)) {
        st = ig_err_set(err, IG_ERR_NOT_FOUND,
                        "%s: no such shard (%s is missing; a shard is PREFIX.bin + PREFIX.idx, "
                        "give the PREFIX without extension)",
                        prefix, ig_file_exists(idx_path) ? bin_path : idx_path);
        goto done;
    }
    if ((st = ig_mapped_file_open(&s->idx, idx_path, err)) != IG_OK) goto done;
    if ((st = ig_mapped_file_open(&s->bin, bin_path, err)) != IG_OK) goto done;
    st = ig_shard_validate_idx(s->idx.data, s->idx.size, s->bin.size, idx_path, bin_path,
                               &s->layout, err);
    if (st != IG_OK) goto done;
    char *json_path = ig_shard_path(ctx, prefix, ".json");
    if (!json_path) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        goto done;
    }
    int has_json = ig_file_exists(json_path);
    ig_free(ctx, json_path);
    if (has_json) {
        if ((st = ig_manifest_read(&s->manifest, prefix, err)) != IG_OK) goto done;
        s->has_manifest = 1;
    }
    {
        /* the shards of a run that has not finished (killed, or still going) are refused, also
         * before their manifests exist: the run's marker is named after the command's output
         * prefix, which the shard name extends (OUT[_KEY][_rRRRR][_NNNNN]) */
        char base[4096] = "";
        int covered = ig_run_marker_covering(prefix, base, sizeof base);
        if (!covered && s->has_manifest && s->manifest.output[0]) {
            const char *slash = strrchr(prefix, '/');
            int dl = slash ? (int)(slash - prefix) + 1 : 0;
            snprintf(base, sizeof base, "%.*s%s", dl, prefix, s->manifest.output);
            covered = ig_run_marker_exists(base);
        }
        if (covered) {
            st = ig_err_set(err, IG_ERR_FORMAT,
                            "%s belongs to the output %s of an unfinished preprocess run "
                            "(%s.incomplete exists): the run was killed or is still going; "
                            "rerun it",
                            prefix, base, base);
            goto done;
        }
    }
    /* a manifest that is there must describe these files */
    st = ig_shard_check_manifest(s, err);
done:
    ig_free(ctx, idx_path);
    ig_free(ctx, bin_path);
    if (st != IG_OK) {
        ig_shard_close(s);
        return st;
    }
    *out = s;
    return IG_OK;
}

const char *ig_shard_prefix(const ig_shard *s) {
    return s->prefix;
}
ig_dtype ig_shard_dtype(const ig_shard *s) {
    return s->layout.dtype;
}
uint64_t ig_shard_sequences(const ig_shard *s) {
    return s->layout.n;
}
uint64_t ig_shard_documents(const ig_shard *s) {
    return s->layout.d - 1;
}
uint64_t ig_shard_tokens(const ig_shard *s) {
    return s->layout.tokens;
}

int32_t ig_shard_seq_length(const ig_shard *s, uint64_t i) {
    return ig_le_i32(s->idx.data + s->layout.lengths_off + i * 4);
}

int64_t ig_shard_seq_pointer(const ig_shard *s, uint64_t i) {
    return ig_le_i64(s->idx.data + s->layout.pointers_off + i * 8);
}

int64_t ig_shard_doc_index(const ig_shard *s, uint64_t d) {
    return ig_le_i64(s->idx.data + s->layout.doc_index_off + d * 8);
}

const void *ig_shard_bin(const ig_shard *s) {
    return s->bin.data;
}

uint64_t ig_shard_bin_bytes(const ig_shard *s) {
    return s->bin.size;
}

const ig_manifest *ig_shard_manifest(const ig_shard *s) {
    return s->has_manifest ? &s->manifest : NULL;
}

const uint8_t *ig_shard_idx_data(const ig_shard *s, size_t *len) {
    *len = s->idx.size;
    return s->idx.data;
}

ig_status ig_shard_read_tokens(const ig_shard *s, uint64_t i, uint64_t off, uint64_t n,
                               int32_t *out, ig_err *err) {
    if (i >= s->layout.n)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: sequence %" PRIu64 " is out of range (the shard has %" PRIu64 ")",
                          s->prefix, i, s->layout.n);
    uint64_t len = (uint64_t)ig_shard_seq_length(s, i);
    if (off > len || n > len - off)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s: tokens [%" PRIu64 ", %" PRIu64 ") are outside sequence %" PRIu64
                          " of %" PRIu64 " tokens",
                          s->prefix, off, off + n, i, len);
    size_t isz = s->layout.itemsize;
    const uint8_t *p = s->bin.data + (uint64_t)ig_shard_seq_pointer(s, i) + off * isz;
    switch (s->layout.dtype) {
    case IG_DTYPE_U8:
        for (uint64_t k = 0; k < n; k++) out[k] = p[k];
        break;
    case IG_DTYPE_I8:
        for (uint64_t k = 0; k < n; k++) out[k] = (int8_t)p[k];
        break;
    case IG_DTYPE_U16:
        for (uint64_t k = 0; k < n; k++) out[k] = (int32_t)(p[2 * k] | p[2 * k + 1] << 8);
        break;
    case IG_DTYPE_I16:
        for (uint64_t k = 0; k < n; k++) out[k] = (int16_t)(uint16_t)(p[2 * k] | p[2 * k + 1] << 8);
        break;
    case IG_DTYPE_I32:
        for (uint64_t k = 0; k < n; k++) out[k] = ig_le_i32(p + 4 * k);
        break;
    case IG_DTYPE_I64:
        for (uint64_t k = 0; k < n; k++) {
            int64_t v = ig_le_i64(p + 8 * k);
            if (v < INT32_MIN || v > INT32_MAX)
                return ig_err_set(err, IG_ERR_FORMAT,
                                  "%s.bin: token %" PRIu64 " of sequence %" PRIu64 " = %" PRId64
                                  " does not fit int32",
                                  s->prefix, off + k, i, v);
            out[k] = (int32_t)v;
        }
        break;
    case IG_DTYPE_F32:
    case IG_DTYPE_F64:
        for (uint64_t k = 0; k < n; k++) {
            double v;
            if (s->layout.dtype == IG_DTYPE_F32) {
                uint32_t u = ig_le_u32(p + 4 * k);
                float f;
                memcpy(&f, &u, 4);
                v = f;
            } else {
                uint64_t u = ig_le_u64(p + 8 * k);
                memcpy(&v, &u, 8);
            }
            if (!(v >= INT32_MIN && v <= INT32_MAX))
                return ig_err_set(err, IG_ERR_FORMAT,
                                  "%s.bin: token %" PRIu64 " of sequence %" PRIu64
                                  " = %g is not a token id",
                                  s->prefix, off + k, i, v);
            out[k] = (int32_t)v;
        }
        break;
    }
    return IG_OK;
}
