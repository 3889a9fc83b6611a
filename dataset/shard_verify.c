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

/* The error for token i of the .bin (at byte `byte`) found outside the vocabulary. */
static ig_status bad_token(const ig_shard *s, const ig_manifest *m, uint64_t byte, int64_t v,
                           ig_err *err) {
    size_t isz = ig_dtype_size(ig_shard_dtype(s));
    uint64_t seq = sequence_of(s, byte);
    uint64_t pos = (byte - (uint64_t)ig_shard_seq_pointer(s, seq)) / isz;
    if (m->vocab_size)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s.bin: token %" PRIu64 " (sequence %" PRIu64 ", position %" PRIu64
                          ") is %" PRId64 " but the vocabulary (%s) has ids 0..%" PRIu64
                          ": these are not this tokenizer's ids; rebuild the shard",
                          ig_shard_prefix(s), byte / isz, seq, pos, v,
                          m->tokenizer[0] ? m->tokenizer : "vocab_size in the manifest",
                          m->vocab_size - 1);
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s.bin: token %" PRIu64 " (sequence %" PRIu64 ", position %" PRIu64
                      ") is %" PRId64 ", not a token id; rebuild the shard",
                      ig_shard_prefix(s), byte / isz, seq, pos, v);
}

/* The ids' limit: the manifest's vocabulary, or any non-negative id when it is unknown. */
static uint64_t id_limit(const ig_manifest *m) {
    return m->vocab_size ? m->vocab_size : (uint64_t)INT64_MAX;
}

/* One thread: hashes the .bin and checks every token id, one chunk at a time so that each is
 * read from memory once. */
static ig_status check_bin_serial(const ig_shard *s, const ig_manifest *m, uint64_t *hash,
                                  ig_err *err) {
    const uint8_t *bin = ig_shard_bin(s);
    uint64_t size = ig_shard_bin_bytes(s);
    ig_dtype dt = ig_shard_dtype(s);
    size_t isz = ig_dtype_size(dt);
    ig_xxh3_stream *h = ig_xxh3_stream_create();
    if (!h) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = IG_OK;
    /* the hash goes to the end past a bad id: a file that matches its checksum is reported
     * for its ids, not as changed */
    for (uint64_t off = 0; off < size; off += VERIFY_CHUNK) {
        size_t k = size - off < VERIFY_CHUNK ? (size_t)(size - off) : VERIFY_CHUNK;
        ig_xxh3_stream_update(h, bin + off, k);
        int64_t v = 0;
        uint64_t i = st == IG_OK ? first_bad_token(bin + off, k, dt, id_limit(m), &v) : k / isz;
        if (i < k / isz) st = bad_token(s, m, off + i * isz, v, err);
    }
    *hash = ig_xxh3_stream_digest(h);
    ig_xxh3_stream_free(h);
    return st;
}

/* Several threads: task 0 hashes the whole .bin (xxh3 is a stream: one thread), the others check
 * the ids of one chunk each, which is most of the work; each chunk keeps its first bad id, and
 * the first of them is the one a single thread would have found. */
typedef struct par_check {
    const ig_shard *s;
    const ig_manifest *m;
    uint64_t hash;
    uint64_t *bad_at; /* [chunks] byte of the chunk's first bad id, UINT64_MAX: none */
    int64_t *bad_val; /* [chunks] */
} par_check;

static void par_check_task(void *arg, size_t t, int worker) {
    (void)worker;
    par_check *pc = arg;
    const uint8_t *bin = ig_shard_bin(pc->s);
    uint64_t size = ig_shard_bin_bytes(pc->s);
    if (t == 0) {
        pc->hash = ig_xxh3_64(bin, size);
        return;
    }
    uint64_t off = (uint64_t)(t - 1) * VERIFY_CHUNK;
    size_t k = size - off < VERIFY_CHUNK ? (size_t)(size - off) : VERIFY_CHUNK;
    ig_dtype dt = ig_shard_dtype(pc->s);
    size_t isz = ig_dtype_size(dt);
    int64_t v = 0;
    uint64_t i = first_bad_token(bin + off, k, dt, id_limit(pc->m), &v);
    pc->bad_at[t - 1] = i < k / isz ? off + i * isz : UINT64_MAX;
    pc->bad_val[t - 1] = v;
}

static ig_status check_bin_parallel(ig_ctx *ctx, const ig_shard *s, const ig_manifest *m,
                                    uint64_t *hash, ig_err *err) {
    uint64_t size = ig_shard_bin_bytes(s);
    size_t chunks = (size_t)((size + VERIFY_CHUNK - 1) / VERIFY_CHUNK);
    par_check pc = {.s = s, .m = m};
    pc.bad_at = ig_calloc(ctx, chunks ? chunks : 1, sizeof *pc.bad_at);
    pc.bad_val = ig_calloc(ctx, chunks ? chunks : 1, sizeof *pc.bad_val);
    ig_status st = IG_OK;
    if (!pc.bad_at || !pc.bad_val) {
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    } else {
        ig_parallel_for(ctx, 1 + chunks, par_check_task, &pc);
        *hash = pc.hash;
        for (size_t c = 0; c < chunks && st == IG_OK; c++)
            if (pc.bad_at[c] != UINT64_MAX) st = bad_token(s, m, pc.bad_at[c], pc.bad_val[c], err);
    }
    ig_free(ctx, pc.bad_at);
    ig_free(ctx, pc.bad_val);
    return st;
}

/* Hashes the .bin and checks every token id against the manifest's vocabulary (any non-negative
 * id the dtype holds when the vocabulary is unknown): on the context's pool when it has more than
 * one thread, with the same result. */
static ig_status check_bin(ig_ctx *ctx, const ig_shard *s, const ig_manifest *m, int split,
                           ig_err *err) {
    uint64_t got = 0;
    ig_status st = split && ctx && ig_ctx_threads(ctx) > 1 && ig_shard_bin_bytes(s) > VERIFY_CHUNK
                       ? check_bin_parallel(ctx, s, m, &got, err)
                       : check_bin_serial(s, m, &got, err);
    if (st == IG_ERR_NOMEM) return st;
    /* a changed file is reported as such, before what the change did to its ids */
    if (got != m->bin_xxh3)
        return checksum_error(err, ig_shard_prefix(s), ".bin", got, m->bin_xxh3);
    return st;
}

/* The complete check of one shard; split: its .bin is checked on the pool (not from inside a
 * pool task, where that would run inline in two passes). */
static ig_status verify_one(ig_ctx *ctx, const char *prefix, int split, ig_err *err) {
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
    st = check_bin(ctx, s, m, split, err);
    ig_shard_close(s);
    return st;
}

ig_status ig_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err) {
    return verify_one(ctx, prefix, 1, err);
}

/* Several shards at once, a window at a time (each task maps one shard). */
#define VERIFY_WINDOW 64

typedef struct verify_window {
    ig_ctx *ctx;
    char *const *names;
    ig_status *st; /* [n] */
    ig_err *err;   /* [n] */
} verify_window;

static void verify_task(void *arg, size_t i, int worker) {
    (void)worker;
    verify_window *vw = arg;
    vw->st[i] = verify_one(vw->ctx, vw->names[i], 0, &vw->err[i]);
}

ig_status ig_shard_verify_many(ig_ctx *ctx, char *const *prefixes, size_t n, size_t *n_ok,
                               ig_err *err) {
    *n_ok = 0;
    if (!ctx || ig_ctx_threads(ctx) < 2 || n < 2) {
        for (size_t i = 0; i < n; i++) {
            ig_status st = ig_shard_verify(ctx, prefixes[i], err);
            if (st != IG_OK) return st;
            *n_ok = i + 1;
        }
        return IG_OK;
    }
    size_t cap = n < VERIFY_WINDOW ? n : VERIFY_WINDOW;
    verify_window vw = {.ctx = ctx};
    vw.st = ig_calloc(ctx, cap, sizeof *vw.st);
    vw.err = ig_calloc(ctx, cap, sizeof *vw.err);
    ig_status st = IG_OK;
    if (!vw.st || !vw.err) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i0 = 0; i0 < n && st == IG_OK; i0 += cap) {
        size_t k = n - i0 < cap ? n - i0 : cap;
        vw.names = prefixes + i0;
        ig_parallel_for(ctx, k, verify_task, &vw);
        /* the first failure in order: what one shard after another would report */
        for (size_t i = 0; i < k && st == IG_OK; i++) {
            if ((st = vw.st[i]) != IG_OK) {
                if (err) *err = vw.err[i];
            } else {
                *n_ok = i0 + i + 1;
            }
        }
    }
    ig_free(ctx, vw.st);
    ig_free(ctx, vw.err);
    return st;
}
