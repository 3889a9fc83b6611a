/* test_shard.c - token shards (dataset/shard_*.c): writer/reader round trips, the golden .idx made
 * independently by tests/data/golden/make_small.py (as Megatron's IndexedDatasetBuilder writes it),
 * every corruption the reader must name, verify, atomicity of the writer, and merge. */
#include "testutil.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <stdatomic.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset/dataset.h"
#include "dataset/shard_internal.h"

/* The documents of tests/data/golden/make_small.py (GPT-2 ids). */
static const int32_t G_D0[] = {15496, 995, 0};
static const int32_t G_D1A[] = {464, 3797, 3332, 13};
static const int32_t G_D1B[] = {1550, 262, 2603, 13};
static const int32_t G_D2[] = {50256};
static const int32_t G_D3[] = {198, 0};

static ig_ctx *new_ctx(void) {
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 1;
    o.log_level = IG_LOG_ERROR;
    ig_ctx *ctx = NULL;
    ig_err err = {0};
    assert_int_equal(ig_ctx_create(&ctx, &o, &err), IG_OK);
    return ctx;
}

static void write_golden_docs(ig_ctx *ctx, const char *prefix, int overwrite,
                              const ig_manifest *meta) {
    ig_err err = {0};
    ig_shard_writer *w;
    ig_shard_writer_opts o = ig_shard_writer_opts_default();
    o.overwrite = overwrite;
    assert_int_equal(ig_shard_writer_create(&w, ctx, prefix, &o, &err), IG_OK);
    assert_int_equal(ig_shard_writer_add_document(w, G_D0, 3, &err), IG_OK);
    assert_int_equal(ig_shard_writer_add_sequence(w, G_D1A, 4, &err), IG_OK);
    assert_int_equal(ig_shard_writer_add_sequence(w, G_D1B, 4, &err), IG_OK);
    assert_int_equal(ig_shard_writer_end_document(w, &err), IG_OK);
    assert_int_equal(ig_shard_writer_add_document(w, G_D2, 1, &err), IG_OK);
    assert_int_equal(ig_shard_writer_add_document(w, G_D3, 2, &err), IG_OK);
    assert_int_equal(ig_shard_writer_documents(w), 4);
    assert_int_equal(ig_shard_writer_bin_bytes(w), 28);
    if (ig_shard_writer_finish(w, meta, &err) != IG_OK) fail_msg("%s", err.msg);
}

static void check_golden_contents(ig_shard *s) {
    assert_int_equal(ig_shard_dtype(s), IG_DTYPE_U16);
    assert_int_equal(ig_shard_sequences(s), 5);
    assert_int_equal(ig_shard_documents(s), 4);
    assert_int_equal(ig_shard_tokens(s), 14);
    assert_int_equal(ig_shard_bin_bytes(s), 28);
    const int32_t lens[] = {3, 4, 4, 1, 2};
    const int64_t ptrs[] = {0, 6, 14, 22, 24};
    const int64_t docs[] = {0, 1, 3, 4, 5};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ig_shard_seq_length(s, i), lens[i]);
        assert_int_equal(ig_shard_seq_pointer(s, i), ptrs[i]);
    }
    for (int d = 0; d < 5; d++) assert_int_equal(ig_shard_doc_index(s, d), docs[d]);
    int32_t out[4];
    ig_err err = {0};
    assert_int_equal(ig_shard_read_tokens(s, 2, 0, 4, out, &err), IG_OK);
    assert_memory_equal(out, G_D1B, sizeof G_D1B);
    assert_int_equal(ig_shard_read_tokens(s, 3, 0, 1, out, &err), IG_OK);
    assert_int_equal(out[0], 50256);
    assert_int_equal(ig_shard_read_tokens(s, 0, 1, 2, out, &err), IG_OK);
    assert_int_equal(out[0], 995);
    assert_int_equal(out[1], 0);
    assert_int_equal(ig_shard_read_tokens(s, 0, 2, 2, out, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_shard_read_tokens(s, 5, 0, 1, out, &err), IG_ERR_INVALID_ARG);
}

/* The writer's .idx and .bin are byte-identical to those built by the independent script. */
static void test_golden_idx(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_ctx *ctx = new_ctx();
    const char *prefix = igt_fmt("%s/small", dir);
    write_golden_docs(ctx, prefix, 0, NULL);
    size_t a_len, b_len;
    char *a = igt_read(igt_fmt("%s.idx", prefix), &a_len);
    char *b = igt_read(igt_fmt("%s/tests/data/golden/small.idx", igt_source_dir()), &b_len);
    assert_int_equal(a_len, b_len);
    assert_int_equal(a_len, 34 + 5 * 12 + 5 * 8);
    assert_memory_equal(a, b, a_len);
    free(a);
    free(b);
    a = igt_read(igt_fmt("%s.bin", prefix), &a_len);
    b = igt_read(igt_fmt("%s/tests/data/golden/small.bin", igt_source_dir()), &b_len);
    assert_int_equal(a_len, b_len);
    assert_memory_equal(a, b, a_len);
    free(a);
    free(b);
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

/* Reads the .bin/.idx written the way Megatron's preprocess_data.py writes them (no manifest). */
static void test_read_megatron_golden(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *src = igt_fmt("%s/tests/data/golden/small", igt_source_dir());
    for (int k = 0; k < 2; k++) {
        const char *ext = k ? ".bin" : ".idx";
        size_t len;
        char *data = igt_read(igt_fmt("%s%s", src, ext), &len);
        igt_write(igt_fmt("%s/meg%s", dir, ext), data, len);
        free(data);
    }
    ig_shard *s;
    ig_err err = {0};
    if (ig_shard_open(&s, NULL, igt_fmt("%s/meg", dir), &err) != IG_OK) fail_msg("%s", err.msg);
    check_golden_contents(s);
    assert_null(ig_shard_manifest(s));
    ig_shard_close(s);
    /* without a manifest, verify names the missing file */
    assert_int_equal(ig_shard_verify(NULL, igt_fmt("%s/meg", dir), &err), IG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "meg.json"));
    assert_non_null(strstr(err.msg, "manifest missing"));
    /* the committed golden shard, with the manifest ingot wrote for it, verifies */
    if (ig_shard_verify(NULL, src, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_shard_open(&s, NULL, src, &err), IG_OK);
    assert_non_null(ig_shard_manifest(s));
    assert_string_equal(ig_shard_manifest(s)->tokenizer, "gpt2");
    ig_shard_close(s);
    igt_rmtree(dir);
    free(dir);
}

static void test_roundtrip_u16(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_ctx *ctx = new_ctx();
    const char *prefix = igt_fmt("%s/rt", dir);
    ig_manifest meta = {0};
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "gpt2");
    snprintf(meta.tokenizer_path, sizeof meta.tokenizer_path, "/some/where/gpt2");
    snprintf(meta.json_key, sizeof meta.json_key, "text");
    meta.tokenizer_hash = 0xfedcba9876543210ull;
    meta.vocab_size = 50257;
    meta.eod_id = 50256;
    ig_err err = {0};
    assert_int_equal(ig_manifest_add_source(&meta, "a.jsonl", &err), IG_OK);
    assert_int_equal(ig_manifest_add_source(&meta, "b.jsonl.zst", &err), IG_OK);
    write_golden_docs(ctx, prefix, 0, &meta);
    ig_manifest_clear(&meta);

    ig_shard *s;
    if (ig_shard_open(&s, ctx, prefix, &err) != IG_OK) fail_msg("%s", err.msg);
    check_golden_contents(s);
    const ig_manifest *m = ig_shard_manifest(s);
    assert_non_null(m);
    assert_string_equal(m->tokenizer, "gpt2");
    assert_string_equal(m->tokenizer_path, "/some/where/gpt2");
    assert_string_equal(m->json_key, "text");
    assert_true(m->tokenizer_hash == 0xfedcba9876543210ull);
    assert_int_equal(m->vocab_size, 50257);
    assert_int_equal(m->eod_id, 50256);
    assert_int_equal(m->dtype, IG_DTYPE_U16);
    assert_int_equal(m->documents, 4);
    assert_int_equal(m->sequences, 5);
    assert_int_equal(m->tokens, 14);
    assert_int_equal(m->bin_bytes, 28);
    assert_int_equal(m->idx_bytes, 134);
    assert_int_equal(m->n_sources, 2);
    assert_string_equal(m->sources[1], "b.jsonl.zst");
    ig_shard_close(s);
    if (ig_shard_verify(ctx, prefix, &err) != IG_OK) fail_msg("%s", err.msg);
    /* only the three files remain: no temporaries or spills */
    assert_int_equal(igt_count_entries(dir), 3);

    /* an id that does not fit uint16 is refused and the shard is unchanged */
    ig_shard_writer *w;
    assert_int_equal(ig_shard_writer_create(&w, ctx, igt_fmt("%s/big", dir), NULL, &err), IG_OK);
    int32_t bad[] = {1, 70000};
    assert_int_equal(ig_shard_writer_add_document(w, bad, 2, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "70000"));
    assert_int_equal(ig_shard_writer_bin_bytes(w), 0);
    /* the same in longer documents (converted eight ids at a time), a bad id at every place,
     * and every id from 0 to 65535 written as it is */
    int32_t many[40];
    for (int at = 0; at < 40; at++) {
        for (int k = 0; k < 40; k++) many[k] = 65535 - k * 1000;
        many[at] = at % 2 ? 65536 : -1;
        assert_int_equal(ig_shard_writer_add_document(w, many, 40, &err), IG_ERR_INVALID_ARG);
        assert_int_equal(ig_shard_writer_bin_bytes(w), 0);
    }
    ig_shard_writer_abort(w);
    assert_int_equal(ig_shard_writer_create(&w, ctx, igt_fmt("%s/all", dir), NULL, &err), IG_OK);
    static int32_t every[65536];
    for (int k = 0; k < 65536; k++) every[k] = k;
    assert_int_equal(ig_shard_writer_add_document(w, every, 65536, &err), IG_OK);
    assert_int_equal(ig_shard_writer_add_document(w, every + 65536 - 37, 37, &err), IG_OK);
    assert_int_equal(ig_shard_writer_finish(w, NULL, &err), IG_OK);
    size_t blen;
    uint8_t *bin = (uint8_t *)igt_read(igt_fmt("%s/all.bin", dir), &blen);
    assert_int_equal(blen, 2 * (65536 + 37));
    for (size_t k = 0; k < 65536 + 37; k++) {
        size_t want = k < 65536 ? k : k - 37;
        if (bin[2 * k] != (want & 255) || bin[2 * k + 1] != (want >> 8))
            fail_msg("id %zu was written as %u", k, bin[2 * k] | bin[2 * k + 1] << 8);
    }
    free(bin);
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

/* int32 ids (vocab >= 65500), many documents of several sequences: crosses every chunk size of
 * the writer's spills. */
static void test_roundtrip_i32(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_ctx *ctx = new_ctx();
    const char *prefix = igt_fmt("%s/i32", dir);
    assert_int_equal(ig_dtype_for_vocab(65499), IG_DTYPE_U16);
    assert_int_equal(ig_dtype_for_vocab(65500), IG_DTYPE_I32);
    ig_shard_writer_opts o = ig_shard_writer_opts_default();
    o.dtype = ig_dtype_for_vocab(200000);
    ig_shard_writer *w;
    ig_err err = {0};
    assert_int_equal(ig_shard_writer_create(&w, ctx, prefix, &o, &err), IG_OK);
    const uint64_t n_docs = 70000;
    int32_t ids[8];
    uint64_t n_seqs = 0, n_tok = 0;
    for (uint64_t d = 0; d < n_docs; d++) {
        int seqs = 1 + (int)(d % 3);
        for (int q = 0; q < seqs; q++) {
            size_t len = (d + (uint64_t)q) % 5; /* includes empty sequences */
            for (size_t k = 0; k < len; k++) ids[k] = (int32_t)(d * 7 + (uint64_t)q * 100003 + k);
            assert_int_equal(ig_shard_writer_add_sequence(w, ids, len, &err), IG_OK);
            n_seqs++;
            n_tok += len;
        }
        assert_int_equal(ig_shard_writer_end_document(w, &err), IG_OK);
    }
    if (ig_shard_writer_finish(w, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_shard *s;
    if (ig_shard_open(&s, ctx, prefix, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_shard_dtype(s), IG_DTYPE_I32);
    assert_int_equal(ig_shard_documents(s), n_docs);
    assert_int_equal(ig_shard_sequences(s), n_seqs);
    assert_int_equal(ig_shard_tokens(s), n_tok);
    assert_int_equal(ig_shard_bin_bytes(s), n_tok * 4);
    uint64_t seq = 0;
    for (uint64_t d = 0; d < n_docs; d++) {
        assert_int_equal(ig_shard_doc_index(s, d), seq);
        int seqs = 1 + (int)(d % 3);
        for (int q = 0; q < seqs; q++, seq++) {
            size_t len = (d + (uint64_t)q) % 5;
            assert_int_equal(ig_shard_seq_length(s, seq), len);
            assert_int_equal(ig_shard_read_tokens(s, seq, 0, len, ids, &err), IG_OK);
            for (size_t k = 0; k < len; k++)
                assert_int_equal(ids[k], (int32_t)(d * 7 + (uint64_t)q * 100003 + k));
        }
    }
    assert_int_equal(ig_shard_doc_index(s, n_docs), n_seqs);
    ig_shard_close(s);
    if (ig_shard_verify(ctx, prefix, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

/* ---- corruption: every case is IG_ERR_FORMAT naming the field ---- */

typedef struct corruption {
    const char *name;
    size_t off; /* byte to change (SIZE_MAX: none) */
    int is_u64; /* write `value` as u64 / i64 at off; else as one byte */
    uint64_t value;
    long idx_len;     /* -1: keep; else truncate the .idx to this length */
    long bin_delta;   /* bytes added to (or removed from) the .bin */
    const char *want; /* substring of the message */
} corruption;

/* golden layout: header 34, lengths at 34 (5 x i32), pointers at 54 (5 x i64), doc index at 94 */
static const corruption CORRUPTIONS[] = {
    {"bad magic", 0, 0, 'X', -1, 0, "bad magic"},
    {"version", 9, 1, 2, -1, 0, "version = 2"},
    {"dtype", 17, 0, 9, -1, 0, "dtype = 9"},
    {"dtype zero", 17, 0, 0, -1, 0, "dtype = 0"},
    {"truncated header", SIZE_MAX, 0, 0, 20, 0, "truncated header"},
    {"magic only", SIZE_MAX, 0, 0, 5, 0, "truncated header"},
    {"empty file", SIZE_MAX, 0, 0, 0, 0, "empty file"},
    {"N too large", 18, 1, 1000, -1, 0, "N = 1000"},
    {"N huge", 18, 1, UINT64_MAX / 2, -1, 0, "too large"},
    {"D too large", 26, 1, 1000, -1, 0, "D = 1000"},
    {"D zero", 26, 1, 0, -1, 0, "D = 0"},
    {"trailing bytes", SIZE_MAX, 0, 0, 135, 0, "file size is"},
    {"negative length", 38, 1, 0xffffffffull << 32 | 0xfffffffdull, -1, 0, "lengths[1] = -3"},
    {"pointer start", 54, 1, 2, -1, 0, "pointers[0] = 2 but expected 0"},
    {"non-contiguous pointer", 54 + 2 * 8, 1, 16, -1, 0,
     "pointers[2] = 16 but expected 14 (pointers must be contiguous"},
    {"doc index start", 94, 1, 1, -1, 0, "document_indices[0] = 1 but expected 0"},
    {"doc index decreasing", 94 + 2 * 8, 1, 0, -1, 0, "document_indices[2] = 0 is less than"},
    {"doc index not ending at N", 94 + 4 * 8, 1, 4, -1, 0,
     "document_indices[4] = 4 but expected N = 5"},
    {"doc index beyond N", 94 + 3 * 8, 1, 9, -1, 0, "document_indices[3] = 9 is beyond N"},
    {"bin too long", SIZE_MAX, 0, 0, -1, 2, ".bin size mismatch"},
    {"bin too short", SIZE_MAX, 0, 0, -1, -2, ".bin size mismatch"},
};

static void test_corruptions(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    size_t idx_len, bin_len;
    const char *src = igt_fmt("%s/tests/data/golden/small", igt_source_dir());
    uint8_t *idx0 = (uint8_t *)igt_read(igt_fmt("%s.idx", src), &idx_len);
    uint8_t *bin0 = (uint8_t *)igt_read(igt_fmt("%s.bin", src), &bin_len);
    uint8_t idx[256], bin[64];
    for (size_t c = 0; c < sizeof CORRUPTIONS / sizeof CORRUPTIONS[0]; c++) {
        const corruption *k = &CORRUPTIONS[c];
        memcpy(idx, idx0, idx_len);
        memset(bin, 0, sizeof bin);
        memcpy(bin, bin0, bin_len);
        size_t il = k->idx_len >= 0 ? (size_t)k->idx_len : idx_len;
        size_t bl = (size_t)((long)bin_len + k->bin_delta);
        if (k->off != SIZE_MAX) {
            if (k->is_u64)
                ig_put_le_u64(idx + k->off, k->value);
            else
                idx[k->off] = (uint8_t)k->value;
        }
        const char *prefix = igt_fmt("%s/c%zu", dir, c);
        igt_write(igt_fmt("%s.idx", prefix), idx, il);
        igt_write(igt_fmt("%s.bin", prefix), bin, bl);
        ig_shard *s = NULL;
        ig_err err = {0};
        ig_status st = ig_shard_open(&s, NULL, prefix, &err);
        if (st != IG_ERR_FORMAT || !strstr(err.msg, k->want))
            fail_msg("%s: status %s, message \"%s\" (wanted \"%s\")", k->name, ig_status_str(st),
                     err.msg, k->want);
        assert_null(s);
        /* the file is named in the message */
        assert_non_null(strstr(err.msg, igt_fmt("c%zu.", c)));
        /* the in-memory validator agrees */
        ig_idx_layout lay;
        assert_int_equal(ig_shard_validate_idx(idx, il, bl, "x.idx", "x.bin", &lay, &err),
                         IG_ERR_FORMAT);
        /* and so does verify */
        assert_int_equal(ig_shard_verify(NULL, prefix, &err), IG_ERR_FORMAT);
    }
    /* a missing .bin is not found, naming it */
    ig_shard *s;
    ig_err err = {0};
    igt_write(igt_fmt("%s/lonely.idx", dir), idx0, idx_len);
    assert_int_equal(ig_shard_open(&s, NULL, igt_fmt("%s/lonely", dir), &err), IG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "lonely.bin"));
    free(idx0);
    free(bin0);
    igt_rmtree(dir);
    free(dir);
}

/* The golden message format for a non-contiguous pointer. */
static void test_validator_message(void **state) {
    (void)state;
    /* N = 18 sequences of 3 u16 tokens; pointers[17] = 100 instead of 102 */
    uint8_t buf[34 + 18 * 12 + 2 * 8];
    ig_idx_encode_header(buf, IG_DTYPE_U16, 18, 2);
    for (int i = 0; i < 18; i++) {
        ig_put_le_u32(buf + 34 + 4 * i, 3);
        ig_put_le_u64(buf + 34 + 18 * 4 + 8 * i, (uint64_t)(6 * i));
    }
    ig_put_le_u64(buf + 34 + 18 * 12, 0);
    ig_put_le_u64(buf + 34 + 18 * 12 + 8, 18);
    ig_idx_layout lay;
    ig_err err = {0};
    assert_int_equal(ig_shard_validate_idx(buf, sizeof buf, 108, "x.idx", "x.bin", &lay, &err),
                     IG_OK);
    assert_int_equal(lay.n, 18);
    assert_int_equal(lay.tokens, 54);
    assert_int_equal(lay.max_length, 3);
    ig_put_le_u64(buf + 34 + 18 * 4 + 8 * 17, 100);
    assert_int_equal(ig_shard_validate_idx(buf, sizeof buf, 108, "x.idx", "x.bin", &lay, &err),
                     IG_ERR_FORMAT);
    assert_non_null(
        strstr(err.msg, "x.idx: pointers[17] = 100 but expected 102 (pointers must be contiguous"));
}

/* Pointer arithmetic beyond 4 GiB, without writing 4 GiB. */
static void test_large_pointers(void **state) {
    (void)state;
    int32_t lengths[4] = {INT32_MAX, INT32_MAX, 5, INT32_MAX};
    int64_t ptrs[4];
    uint64_t start = 3ull << 30; /* 3 GiB already written by earlier inputs */
    uint64_t end = ig_idx_fill_pointers(ptrs, lengths, 4, start, 4);
    assert_true(ptrs[0] == (int64_t)start);
    assert_true(ptrs[1] == (int64_t)(start + 4ull * INT32_MAX));
    assert_true(ptrs[2] == (int64_t)(start + 8ull * INT32_MAX));
    assert_true(ptrs[3] == (int64_t)(start + 8ull * INT32_MAX + 20));
    assert_true(end == start + 12ull * INT32_MAX + 20);
    assert_true(end > (1ull << 34));
    uint8_t h[IG_IDX_HEADER_BYTES];
    ig_idx_encode_header(h, IG_DTYPE_I32, 1ull << 33, (1ull << 33) + 1);
    assert_memory_equal(h, "MMIDIDX\0\0\1\0\0\0\0\0\0\0\4", 18);
    assert_true(ig_le_u64(h + 18) == 1ull << 33);
    assert_true(ig_le_u64(h + 26) == (1ull << 33) + 1);
    assert_true(ig_idx_file_size(1ull << 33, 2) == 34 + 12 * (1ull << 33) + 16);
    /* a header claiming 2^33 sequences over a small buffer is refused, not read */
    ig_idx_layout lay;
    ig_err err = {0};
    assert_int_equal(ig_shard_validate_idx(h, sizeof h, 0, "x.idx", "x.bin", &lay, &err),
                     IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "N = 8589934592"));
}

static void test_verify(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_ctx *ctx = new_ctx();
    const char *prefix = igt_fmt("%s/v", dir);
    write_golden_docs(ctx, prefix, 0, NULL);
    ig_err err = {0};
    assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_OK);

    /* flip one byte of .bin: the structure is fine, the checksum is not */
    size_t len;
    char *bin = igt_read(igt_fmt("%s.bin", prefix), &len);
    bin[7] ^= 0x40;
    igt_write(igt_fmt("%s.bin", prefix), bin, len);
    assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_ERR_CHECKSUM);
    assert_non_null(strstr(err.msg, "v.bin: xxh3"));
    bin[7] ^= 0x40;
    igt_write(igt_fmt("%s.bin", prefix), bin, len);
    free(bin);
    assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_OK);

    /* a manifest describing other data */
    char *json = igt_read(igt_fmt("%s.json", prefix), &len);
    char *p = strstr(json, "\"documents\": 4");
    assert_non_null(p);
    p[13] = '7';
    igt_write(igt_fmt("%s.json", prefix), json, len);
    assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "documents = 7"));
    /* a malformed manifest */
    igt_write(igt_fmt("%s.json", prefix), "{\"format\": ", 11);
    assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "v.json:1:"));
    free(json);
    /* a missing manifest */
    unlink(igt_fmt("%s.json", prefix));
    assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "v.json: manifest missing"));
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

/* Replaces the first `from` in the file at path with `to` (the test fails when it is absent). */
static void replace_in_file(const char *path, const char *from, const char *to) {
    size_t len;
    char *text = igt_read(path, &len);
    char *at = strstr(text, from);
    if (!at) fail_msg("%s: '%s' not found", path, from);
    size_t fl = strlen(from), tl = strlen(to);
    char *out = malloc(len - fl + tl);
    assert_non_null(out);
    size_t head = (size_t)(at - text);
    memcpy(out, text, head);
    memcpy(out + head, to, tl);
    memcpy(out + head + tl, at + fl, len - head - fl);
    igt_write(path, out, len - fl + tl);
    free(out);
    free(text);
}

/* A manifest must say which ids the .bin may hold (vocab_size, eod_id, a dtype that holds them),
 * and verify reads every token anyway: ids outside the vocabulary are refused, even when the
 * manifest's checksums were recomputed over the changed .bin. */
static void test_verify_vocab_and_ids(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_ctx *ctx = new_ctx();
    const char *prefix = strdup(igt_fmt("%s/g", dir));
    char *json = strdup(igt_fmt("%s.json", prefix)), *bin = strdup(igt_fmt("%s.bin", prefix));
    ig_manifest meta = {0};
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "gpt2");
    meta.tokenizer_hash = 0x1234;
    meta.vocab_size = 50257;
    meta.eod_id = 50256;
    write_golden_docs(ctx, prefix, 0, &meta);
    ig_err err = {0};
    assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_OK);
    size_t len;
    char *good = igt_read(json, &len);

    const struct {
        const char *from, *to, *says;
    } bad[] = {
        {"\"vocab_size\": 50257", "\"vocab_size\": 0", "vocab_size = 0 but the manifest names"},
        {"\"vocab_size\": 50257", "\"vocab_size\": 4611686018427387904",
         "vocab_size = 4611686018427387904 but dtype uint16 holds only ids below 65536"},
        {"\"vocab_size\": 50257", "\"vocab_size\": 65537", "holds only ids below 65536"},
        {"\"eod_id\": 50256", "\"eod_id\": 1099511627776", "eod_id = 1099511627776 is not an id"},
        {"\"eod_id\": 50256", "\"eod_id\": 50257", "eod_id = 50257 is not an id"},
        {"\"eod_id\": 50256", "\"eod_id\": -2", "eod_id = -2 is not an id"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        igt_write(json, good, len);
        replace_in_file(json, bad[i].from, bad[i].to);
        assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_ERR_FORMAT);
        if (!strstr(err.msg, bad[i].says)) fail_msg("'%s' not in: %s", bad[i].says, err.msg);
        ig_shard *s = NULL; /* refused on open too: every command */
        assert_int_equal(ig_shard_open(&s, ctx, prefix, &err), IG_ERR_FORMAT);
    }
    igt_write(json, good, len);
    /* an unknown vocabulary is allowed only without a tokenizer (a merge of several) */
    replace_in_file(json, "\"vocab_size\": 50257", "\"vocab_size\": 0");
    replace_in_file(json, "\"tokenizer\": \"gpt2\"", "\"tokenizer\": \"\"");
    replace_in_file(json, "\"tokenizer_hash\": \"0000000000001234\"",
                    "\"tokenizer_hash\": \"0000000000000000\"");
    assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_OK);
    igt_write(json, good, len);

    /* the writer refuses to write such a manifest, and leaves nothing */
    const char *w2 = igt_fmt("%s/w", dir);
    meta.vocab_size = 0;
    ig_shard_writer *w = NULL;
    ig_shard_writer_opts wo = ig_shard_writer_opts_default();
    assert_int_equal(ig_shard_writer_create(&w, ctx, w2, &wo, &err), IG_OK);
    assert_int_equal(ig_shard_writer_add_document(w, G_D0, 3, &err), IG_OK);
    assert_int_equal(ig_shard_writer_finish(w, &meta, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "vocab_size = 0"));
    assert_int_equal(igt_count_entries(dir), 3); /* g.bin, g.idx, g.json */

    /* 65535 in place of token 5 (sequence 1, position 2), the manifest re-signed: the checksums
     * pass, the id does not */
    size_t blen;
    char *b = igt_read(bin, &blen);
    b[10] = (char)0xff, b[11] = (char)0xff;
    igt_write(bin, b, blen);
    char old_hex[17], new_hex[17];
    ig_shard_verify(ctx, prefix, &err); /* the checksum message names the old one */
    assert_int_equal(err.status, IG_ERR_CHECKSUM);
    ig_manifest m = {0};
    assert_int_equal(ig_manifest_read(&m, prefix, &err), IG_OK);
    ig_hash64_hex(m.bin_xxh3, old_hex);
    ig_hash64_hex(ig_xxh3_64(b, blen), new_hex);
    ig_manifest_clear(&m);
    replace_in_file(json, old_hex, new_hex);
    assert_int_equal(ig_shard_verify(ctx, prefix, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "g.bin: token 5 (sequence 1, position 2) is 65535 but the "
                                    "vocabulary (gpt2) has ids 0..50256"));
    free(b);
    free(good);
    free(json);
    free(bin);
    free((char *)prefix);
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

static void test_abort_leaves_nothing(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_shard_writer *w;
    ig_err err = {0};
    assert_int_equal(ig_shard_writer_create(&w, NULL, igt_fmt("%s/a", dir), NULL, &err), IG_OK);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(ig_shard_writer_add_document(w, G_D1A, 4, &err), IG_OK);
    /* while writing, only the temporary .bin is visible (the spills are unlinked) */
    assert_int_equal(igt_count_entries(dir), 1);
    ig_shard_writer_abort(w);
    assert_int_equal(igt_count_entries(dir), 0);
    ig_shard_writer_abort(NULL);
    /* an empty shard is a valid shard */
    assert_int_equal(ig_shard_writer_create(&w, NULL, igt_fmt("%s/e", dir), NULL, &err), IG_OK);
    assert_int_equal(ig_shard_writer_finish(w, NULL, &err), IG_OK);
    assert_int_equal(ig_shard_verify(NULL, igt_fmt("%s/e", dir), &err), IG_OK);
    igt_rmtree(dir);
    free(dir);
}

static void test_no_overwrite(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *prefix = igt_fmt("%s/o", dir);
    write_golden_docs(NULL, prefix, 0, NULL);
    ig_shard_writer *w = NULL;
    ig_err err = {0};
    assert_int_equal(ig_shard_writer_create(&w, NULL, prefix, NULL, &err), IG_ERR_EXISTS);
    assert_null(w);
    assert_string_equal(err.fix_option, "overwrite");
    /* only a manifest left over is enough to refuse */
    unlink(igt_fmt("%s.bin", prefix));
    unlink(igt_fmt("%s.idx", prefix));
    assert_int_equal(ig_shard_writer_create(&w, NULL, prefix, NULL, &err), IG_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "o.json"));
    /* with overwrite: replaced, and the old manifest never outlives the old data */
    ig_shard_writer_opts o = ig_shard_writer_opts_default();
    o.overwrite = 1;
    assert_int_equal(ig_shard_writer_create(&w, NULL, prefix, &o, &err), IG_OK);
    assert_int_equal(ig_shard_writer_add_document(w, G_D3, 2, &err), IG_OK);
    assert_int_equal(ig_shard_writer_finish(w, NULL, &err), IG_OK);
    ig_shard *s;
    assert_int_equal(ig_shard_open(&s, NULL, prefix, &err), IG_OK);
    assert_int_equal(ig_shard_documents(s), 1);
    assert_int_equal(ig_shard_manifest(s)->documents, 1);
    ig_shard_close(s);
    assert_int_equal(ig_shard_verify(NULL, prefix, &err), IG_OK);
    assert_int_equal(igt_count_entries(dir), 3);
    igt_rmtree(dir);
    free(dir);
}

static void write_shard(const char *prefix, ig_dtype dt, uint64_t hash, int n_docs, int base) {
    ig_shard_writer_opts o = ig_shard_writer_opts_default();
    o.dtype = dt;
    ig_shard_writer *w;
    ig_err err = {0};
    assert_int_equal(ig_shard_writer_create(&w, NULL, prefix, &o, &err), IG_OK);
    for (int d = 0; d < n_docs; d++) {
        int32_t ids[3] = {base + d, base + d + 1, base + d + 2};
        assert_int_equal(ig_shard_writer_add_sequence(w, ids, 1 + (size_t)(d % 3), &err), IG_OK);
        if (d % 2) assert_int_equal(ig_shard_writer_add_sequence(w, ids, 2, &err), IG_OK);
        assert_int_equal(ig_shard_writer_end_document(w, &err), IG_OK);
    }
    ig_manifest meta = {0};
    snprintf(meta.tokenizer, sizeof meta.tokenizer, hash == 1 ? "gpt2" : "cl100k_base");
    meta.tokenizer_hash = hash;
    meta.vocab_size = 1000;
    meta.eod_id = -1;
    assert_int_equal(ig_shard_writer_finish(w, &meta, &err), IG_OK);
}

static void test_merge(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_ctx *ctx = new_ctx();
    char a[512], b[512], c[512], out[512];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(c, sizeof c, "%s/c", dir);
    snprintf(out, sizeof out, "%s/m", dir);
    write_shard(a, IG_DTYPE_U16, 1, 3, 100);
    write_shard(b, IG_DTYPE_U16, 1, 4, 200);
    const char *ins[3] = {a, b, c};
    ig_err err = {0};
    ig_merge_opts mo = {0};
    if (ig_shard_merge(ctx, ins, 2, out, &mo, &err) != IG_OK) fail_msg("%s", err.msg);
    if (ig_shard_verify(ctx, out, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_shard *sa, *sb, *sm;
    assert_int_equal(ig_shard_open(&sa, ctx, a, &err), IG_OK);
    assert_int_equal(ig_shard_open(&sb, ctx, b, &err), IG_OK);
    assert_int_equal(ig_shard_open(&sm, ctx, out, &err), IG_OK);
    uint64_t na = ig_shard_sequences(sa), nb = ig_shard_sequences(sb);
    assert_int_equal(ig_shard_documents(sm), 7);
    assert_int_equal(ig_shard_sequences(sm), na + nb);
    assert_int_equal(ig_shard_tokens(sm), ig_shard_tokens(sa) + ig_shard_tokens(sb));
    /* document indices of b are shifted by a's sequences */
    for (uint64_t d = 0; d <= 3; d++)
        assert_int_equal(ig_shard_doc_index(sm, d), ig_shard_doc_index(sa, d));
    for (uint64_t d = 0; d <= 4; d++)
        assert_int_equal(ig_shard_doc_index(sm, 3 + d), na + (uint64_t)ig_shard_doc_index(sb, d));
    /* contents and pointers */
    for (uint64_t i = 0; i < na + nb; i++) {
        ig_shard *src = i < na ? sa : sb;
        uint64_t j = i < na ? i : i - na;
        int32_t x[4], y[4];
        int32_t len = ig_shard_seq_length(sm, i);
        assert_int_equal(len, ig_shard_seq_length(src, j));
        assert_int_equal(ig_shard_read_tokens(sm, i, 0, (uint64_t)len, x, &err), IG_OK);
        assert_int_equal(ig_shard_read_tokens(src, j, 0, (uint64_t)len, y, &err), IG_OK);
        assert_memory_equal(x, y, (size_t)len * sizeof x[0]);
        int64_t base = i < na ? 0 : (int64_t)ig_shard_bin_bytes(sa);
        assert_int_equal(ig_shard_seq_pointer(sm, i), base + ig_shard_seq_pointer(src, j));
    }
    const ig_manifest *m = ig_shard_manifest(sm);
    assert_string_equal(m->tokenizer, "gpt2");
    assert_int_equal(m->tokenizer_hash, 1);
    assert_int_equal(m->n_sources, 2);
    ig_shard_close(sa);
    ig_shard_close(sb);
    ig_shard_close(sm);

    /* the output exists: refused without overwrite, replaced with it */
    assert_int_equal(ig_shard_merge(ctx, ins, 2, out, &mo, &err), IG_ERR_EXISTS);
    mo.overwrite = 1;
    assert_int_equal(ig_shard_merge(ctx, ins, 1, out, &mo, &err), IG_OK);
    assert_int_equal(ig_shard_open(&sm, ctx, out, &err), IG_OK);
    assert_int_equal(ig_shard_documents(sm), 3);
    ig_shard_close(sm);
    /* an output that is also an input */
    assert_int_equal(ig_shard_merge(ctx, ins, 2, a, &mo, &err), IG_ERR_INVALID_ARG);

    /* mixed tokenizers: refused, unless allowed */
    write_shard(c, IG_DTYPE_U16, 2, 2, 300);
    mo.overwrite = 1;
    assert_int_equal(ig_shard_merge(ctx, ins, 3, out, &mo, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "refusing to mix tokenizers"));
    assert_string_equal(err.fix_option, "allow_mixed");
    assert_int_equal(ig_shard_verify(ctx, out, &err), IG_OK); /* the old output is intact */
    mo.allow_mixed = 1;
    if (ig_shard_merge(ctx, ins, 3, out, &mo, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(ig_shard_open(&sm, ctx, out, &err), IG_OK);
    assert_int_equal(ig_shard_documents(sm), 9);
    assert_string_equal(ig_shard_manifest(sm)->tokenizer, "");
    assert_int_equal(ig_shard_manifest(sm)->tokenizer_hash, 0);
    ig_shard_close(sm);

    /* different dtypes: always refused */
    unlink(igt_fmt("%s.bin", c));
    unlink(igt_fmt("%s.idx", c));
    unlink(igt_fmt("%s.json", c));
    write_shard(c, IG_DTYPE_I32, 1, 2, 300);
    assert_int_equal(ig_shard_merge(ctx, ins, 3, out, &mo, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "different dtypes"));
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

static void test_dtype_names(void **state) {
    (void)state;
    static const struct {
        ig_dtype dt;
        size_t size;
        const char *name;
    } t[] = {{IG_DTYPE_U8, 1, "uint8"},    {IG_DTYPE_I8, 1, "int8"},   {IG_DTYPE_I16, 2, "int16"},
             {IG_DTYPE_I32, 4, "int32"},   {IG_DTYPE_I64, 8, "int64"}, {IG_DTYPE_F64, 8, "float64"},
             {IG_DTYPE_F32, 4, "float32"}, {IG_DTYPE_U16, 2, "uint16"}};
    for (size_t i = 0; i < 8; i++) {
        assert_int_equal(t[i].dt, (int)i + 1);
        assert_int_equal(ig_dtype_size(t[i].dt), t[i].size);
        assert_string_equal(ig_dtype_name(t[i].dt), t[i].name);
    }
    assert_int_equal(ig_dtype_size((ig_dtype)9), 0);
    assert_string_equal(ig_dtype_name((ig_dtype)0), "unknown");
}

/* every dtype round-trips through writer and reader */
static void test_all_dtypes(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    int32_t ids[] = {0, 1, 7, 100, 120};
    for (int dt = 1; dt <= 8; dt++) {
        const char *prefix = igt_fmt("%s/d%d", dir, dt);
        ig_shard_writer_opts o = ig_shard_writer_opts_default();
        o.dtype = (ig_dtype)dt;
        ig_shard_writer *w;
        ig_err err = {0};
        assert_int_equal(ig_shard_writer_create(&w, NULL, prefix, &o, &err), IG_OK);
        assert_int_equal(ig_shard_writer_add_document(w, ids, 5, &err), IG_OK);
        assert_int_equal(ig_shard_writer_finish(w, NULL, &err), IG_OK);
        ig_shard *s;
        assert_int_equal(ig_shard_open(&s, NULL, prefix, &err), IG_OK);
        int32_t out[5];
        assert_int_equal(ig_shard_read_tokens(s, 0, 0, 5, out, &err), IG_OK);
        assert_memory_equal(out, ids, sizeof ids);
        assert_int_equal(ig_shard_bin_bytes(s), 5 * ig_dtype_size((ig_dtype)dt));
        ig_shard_close(s);
    }
    igt_rmtree(dir);
    free(dir);
}

/* Manifest checksums are exactly 16 lowercase hex digits: no sign, spaces or 0x. */
static void test_manifest_hex_strict(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    size_t len;
    char *text = igt_read(igt_fmt("%s/tests/data/golden/small.json", igt_source_dir()), &len);
    char *at = strstr(text, "\"bin_xxh3\": \"");
    assert_non_null(at);
    at += strlen("\"bin_xxh3\": \"");
    const char *bad[] = {" -00000000000001", "0x00000000000ff0", "00000000000000FF"};
    for (int i = 0; i < 3; i++) {
        memcpy(at, bad[i], 16);
        igt_write(igt_fmt("%s/m.json", dir), text, len);
        ig_manifest m = {0};
        ig_err err = {0};
        assert_int_equal(ig_manifest_read(&m, igt_fmt("%s/m", dir), &err), IG_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "16 hex digits"));
        ig_manifest_clear(&m);
    }
    free(text);
    igt_rmtree(dir);
    free(dir);
}

/* A shard list names several shards by one prefix: expand gives them in order, verify checks
 * each and that none was replaced; a plain prefix expands to itself; a bad list is an error. */
static void test_shard_list(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    char a[512], b[512], list[512];
    snprintf(a, sizeof a, "%s/out_00000", dir);
    snprintf(b, sizeof b, "%s/out_00001", dir);
    snprintf(list, sizeof list, "%s/out", dir);
    write_shard(a, IG_DTYPE_U16, 1, 5, 10);
    write_shard(b, IG_DTYPE_U16, 1, 7, 20);
    const char *shards[] = {a, b};
    ig_err err = {0};
    assert_int_equal(ig_shard_list_write(list, shards, 2, 0, &err), IG_OK);
    assert_int_equal(ig_shard_list_write(list, shards, 2, 0, &err), IG_ERR_EXISTS);
    char **names = NULL;
    size_t n = 0;
    assert_int_equal(ig_shard_list_expand(list, &names, &n, &err), IG_OK);
    assert_int_equal(n, 2);
    assert_string_equal(names[0], a);
    assert_string_equal(names[1], b);
    ig_shard_list_free(names, n);
    size_t checked = 0;
    assert_int_equal(ig_shard_list_verify(NULL, list, &checked, &err), IG_OK);
    assert_int_equal(checked, 2);
    /* a plain prefix stands for itself */
    assert_int_equal(ig_shard_list_expand(a, &names, &n, &err), IG_OK);
    assert_int_equal(n, 1);
    assert_string_equal(names[0], a);
    ig_shard_list_free(names, n);
    /* a shard outside the list's directory is refused */
    const char *outside[] = {"/tmp/elsewhere"};
    assert_int_equal(ig_shard_list_write(list, outside, 1, 1, &err), IG_ERR_INVALID_ARG);
    /* a shard replaced after the list was written: its own checks pass, the list's do not */
    const char *exts[] = {".bin", ".idx", ".json"};
    for (int e = 0; e < 3; e++) {
        char path[600];
        snprintf(path, sizeof path, "%s%s", b, exts[e]);
        assert_int_equal(unlink(path), 0);
    }
    write_shard(b, IG_DTYPE_U16, 1, 3, 90);
    assert_int_equal(ig_shard_verify(NULL, b, &err), IG_OK);
    assert_int_equal(ig_shard_list_verify(NULL, list, &checked, &err), IG_ERR_CHECKSUM);
    assert_non_null(strstr(err.msg, "replaced"));
    /* a malformed list names itself */
    char lpath[600];
    snprintf(lpath, sizeof lpath, "%s.shards.json", list);
    igt_write(lpath, "{\"format\": \"ingot-shard-list\", \"version\": 1, \"shards\": []}", 58);
    assert_int_equal(ig_shard_list_expand(list, &names, &n, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "shards.json"));
    igt_write(lpath, "{\"format\": \"x\"", 15);
    assert_int_equal(ig_shard_list_expand(list, &names, &n, &err), IG_ERR_FORMAT);
    igt_rmtree(dir);
    free(dir);
}

/* Mappings the process has now (lines of /proc/self/maps), or -1. */
static long count_maps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    long n = 0;
    int c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

/* Leaves only `room` of the process's mappings free (vm.max_map_count): a region of pages whose
 * protections alternate, each page its own mapping. Returns the region (unmap it with *len), or
 * NULL when the limit cannot be read. */
static void *use_up_maps(long room, size_t *len) {
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    long max = 0;
    if (!f || fscanf(f, "%ld", &max) != 1) max = 0;
    if (f) fclose(f);
    long now = count_maps();
    if (max <= 0 || now < 0 || max - now <= room) return NULL;
    long pages = (max - now - room); /* each page becomes one mapping */
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    *len = (size_t)pages * pg;
    uint8_t *p = mmap(NULL, *len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    for (long i = 1; i < pages; i += 2) mprotect(p + (size_t)i * pg, pg, PROT_READ);
    return p;
}

/* A shard list of more shards than a process can hold mapped two at a time: merge opens one at a
 * time, a dataset keeps at most IG_DATASET_OPEN_MAX open and reads the rest on demand (60,000
 * shards used to fail with "cannot map ...: Cannot allocate memory"). The test leaves the process
 * fewer free mappings than two per shard. */
static void test_many_shards(void **state) {
    (void)state;
    enum { N = IG_DATASET_OPEN_MAX + 300 };
    char *dir = igt_mkdtemp();
    ig_ctx *ctx = new_ctx();
    char **names = calloc(N, sizeof *names);
    assert_non_null(names);
    for (int k = 0; k < N; k++) {
        names[k] = strdup(igt_fmt("%s/s_%05d", dir, k));
        /* shard k: one document of 1 + k % 3 tokens */
        uint16_t ids[3] = {(uint16_t)(k % 1000), 7, (uint16_t)((k * 13) % 1000)};
        igt_write_tiny_shard(names[k], ids, 1 + (size_t)(k % 3));
    }
    const char *list = strdup(igt_fmt("%s/s", dir));
    ig_err err = {0};
    assert_int_equal(ig_shard_list_write(list, (const char *const *)names, N, 0, &err), IG_OK);
    char **inputs = NULL;
    size_t n_inputs = 0;
    assert_int_equal(ig_shard_list_expand(list, &inputs, &n_inputs, &err), IG_OK);
    assert_int_equal(n_inputs, N);
    size_t len = 0;
    /* room for the shards a dataset keeps open and some to spare, but not for all of them */
    void *hog = use_up_maps(2 * IG_DATASET_OPEN_MAX + 200, &len);
    if (!hog) print_message("note: vm.max_map_count unreadable: the map pressure is left out\n");

    ig_merge_opts mo = {0};
    const char *out = igt_fmt("%s/merged", dir);
    if (ig_shard_merge(ctx, (const char *const *)inputs, n_inputs, out, &mo, &err) != IG_OK)
        fail_msg("merge: %s", err.msg);
    ig_shard_list_free(inputs, n_inputs);
    ig_dataset *ds = NULL;
    if (ig_dataset_open(&ds, ctx, &list, 1, &err) != IG_OK) fail_msg("dataset: %s", err.msg);
    assert_int_equal(ig_dataset_num_shards(ds), N);
    assert_null(ig_dataset_shard(ds, 0)); /* opened on demand */
    assert_string_equal(ig_dataset_shard_prefix(ds, N - 1), names[N - 1]);
    /* every sequence, in an order that cycles through the shards several times */
    uint64_t n_seqs = ig_dataset_sequences(ds);
    assert_int_equal(n_seqs, N);
    for (int pass = 0; pass < 3; pass++)
        for (uint64_t j = 0; j < n_seqs; j++) {
            uint64_t k = (j * 7919 + (uint64_t)pass) % n_seqs;
            int32_t got[3];
            size_t want_n = 1 + k % 3;
            if (ig_dataset_read_tokens(ds, k, 0, want_n, got, &err) != IG_OK)
                fail_msg("read %llu: %s", (unsigned long long)k, err.msg);
            assert_int_equal(got[0], (int32_t)(k % 1000));
            if (want_n == 3) assert_int_equal(got[2], (int32_t)((k * 13) % 1000));
        }
    ig_dataset_close(ds);
    size_t checked = 0;
    if (ig_shard_list_verify(ctx, list, &checked, &err) != IG_OK) fail_msg("verify: %s", err.msg);
    assert_int_equal(checked, N);
    if (hog) munmap(hog, len);
    if (ig_shard_verify(ctx, out, &err) != IG_OK) fail_msg("%s", err.msg);
    ig_shard *m = NULL;
    assert_int_equal(ig_shard_open(&m, ctx, out, &err), IG_OK);
    assert_int_equal(ig_shard_documents(m), N);
    ig_shard_close(m);
    for (int k = 0; k < N; k++) free(names[k]);
    free(names);
    free((char *)list);
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

static ig_ctx *threads_ctx(int threads) {
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = threads;
    o.log_level = IG_LOG_ERROR;
    ig_ctx *ctx = NULL;
    assert_int_equal(ig_ctx_create(&ctx, &o, NULL), IG_OK);
    return ctx;
}

/* Writes a u16 shard of `docs` documents (several MB, so that verify and merge split it into many
 * pieces), vocabulary 50000, ids from seed. */
static void write_big_shard(const char *prefix, int docs, uint64_t seed) {
    ig_shard_writer *w = NULL;
    ig_shard_writer_opts o = ig_shard_writer_opts_default();
    ig_err err = {0};
    assert_int_equal(ig_shard_writer_create(&w, NULL, prefix, &o, &err), IG_OK);
    int32_t ids[3000];
    uint64_t x = seed;
    for (int d = 0; d < docs; d++) {
        size_t n = 1000 + (size_t)(x % 2000);
        for (size_t i = 0; i < n; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            ids[i] = (int32_t)((x >> 33) % 50000);
        }
        assert_int_equal(ig_shard_writer_add_document(w, ids, n, &err), IG_OK);
    }
    ig_manifest meta = {0};
    snprintf(meta.tokenizer, sizeof meta.tokenizer, "gpt2");
    meta.tokenizer_hash = 1;
    meta.vocab_size = 50000;
    meta.eod_id = -1;
    if (ig_shard_writer_finish(w, &meta, &err) != IG_OK) fail_msg("%s", err.msg);
}

/* Rewrites PREFIX.json's bin_xxh3 to the .bin's own: damage the checksum does not catch. */
static void resign_bin(const char *prefix) {
    size_t blen;
    char *b = igt_read(igt_fmt("%s.bin", prefix), &blen);
    ig_manifest m = {0};
    assert_int_equal(ig_manifest_read(&m, prefix, NULL), IG_OK);
    char old_hex[17], new_hex[17];
    ig_hash64_hex(m.bin_xxh3, old_hex);
    ig_hash64_hex(ig_xxh3_64(b, blen), new_hex);
    ig_manifest_clear(&m);
    replace_in_file(igt_fmt("%s.json", prefix), old_hex, new_hex);
    free(b);
}

/* verify and merge on 1, 2 and 3 threads: the same verdicts, messages and output bytes, for many
 * inputs (more than a window) and for large ones; a bad id in the middle of a large .bin whose
 * checksum matches is named, not reported as a changed file. */
static void test_threads_same_result(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_ctx *ctx[4] = {NULL, threads_ctx(1), threads_ctx(2), threads_ctx(3)};
    enum { SMALL = 150 };
    const char *ins[SMALL + 2];
    char *names[SMALL + 2];
    for (int k = 0; k < SMALL + 2; k++) {
        names[k] = strdup(igt_fmt("%s/in_%03d", dir, k));
        ins[k] = names[k];
        if (k == 3 || k == 100) { /* two large ones among them */
            write_big_shard(names[k], 1500 + k, (uint64_t)k + 1);
        } else {
            uint16_t ids[3] = {(uint16_t)k, 7, (uint16_t)(k * 13 % 1000)};
            igt_write_tiny_shard(names[k], ids, 1 + (size_t)(k % 3));
        }
    }
    ig_err err = {0};
    ig_merge_opts mo = {.overwrite = 1};
    for (int t = 1; t <= 3; t++) {
        const char *out = igt_fmt("%s/m%d", dir, t);
        if (ig_shard_merge(ctx[t], ins, SMALL + 2, out, &mo, &err) != IG_OK)
            fail_msg("threads %d: %s", t, err.msg);
        if (ig_shard_verify(ctx[t], out, &err) != IG_OK) fail_msg("threads %d: %s", t, err.msg);
        if (t > 1)
            for (int e = 0; e < 2; e++) {
                const char *ext = e ? ".idx" : ".bin";
                size_t la, lb;
                char *a = igt_read(igt_fmt("%s/m1%s", dir, ext), &la);
                char *b = igt_read(igt_fmt("%s/m%d%s", dir, t, ext), &lb);
                assert_int_equal(la, lb);
                assert_memory_equal(a, b, la);
                free(a);
                free(b);
            }
    }

    /* a bad id near the middle of the large input, the checksum re-signed; and then a byte
     * changed behind the checksum's back in another input */
    const char *big = names[100];
    char *bin = strdup(igt_fmt("%s.bin", big));
    size_t blen;
    char *b = igt_read(bin, &blen);
    assert_true(blen > 4 * ((size_t)1 << 20));
    size_t at = blen / 4 * 2 + 1234 * 2; /* even: a whole token */
    b[at] = (char)0xf0, b[at + 1] = (char)0xff;
    igt_write(bin, b, blen);
    resign_bin(big);
    char msg[3][IG_ERR_MSG_MAX];
    for (int t = 1; t <= 3; t++) {
        assert_int_equal(ig_shard_verify(ctx[t], big, &err), IG_ERR_FORMAT);
        snprintf(msg[t - 1], sizeof msg[0], "%s", err.msg);
    }
    assert_non_null(strstr(msg[0], igt_fmt("token %zu", at / 2)));
    if (!strstr(msg[0], "is 65520 but the vocabulary (gpt2) has ids 0..49999"))
        fail_msg("%s", msg[0]);
    assert_string_equal(msg[0], msg[1]);
    assert_string_equal(msg[0], msg[2]);
    const char *damaged = names[3];
    char *dbin = strdup(igt_fmt("%s.bin", damaged));
    char *d = igt_read(dbin, &blen);
    d[blen - 3] ^= 1;
    igt_write(dbin, d, blen);
    char mmsg[3][IG_ERR_MSG_MAX];
    char *out = strdup(igt_fmt("%s/bad", dir));
    for (int t = 1; t <= 3; t++) {
        assert_int_equal(ig_shard_verify(ctx[t], damaged, &err), IG_ERR_CHECKSUM);
        snprintf(msg[t - 1], sizeof msg[0], "%s", err.msg);
        /* merge refuses the first damaged input, with the same message, and writes nothing */
        assert_int_equal(ig_shard_merge(ctx[t], ins, SMALL + 2, out, &mo, &err), IG_ERR_CHECKSUM);
        snprintf(mmsg[t - 1], sizeof mmsg[0], "%s", err.msg);
        assert_false(ig_file_exists(igt_fmt("%s.bin", out)));
        assert_false(ig_file_exists(igt_fmt("%s.json", out)));
    }
    /* a list of the small ones (one tokenizer), one of them damaged: the first bad shard in
     * order, after the same number of good ones */
    const char *small[SMALL];
    size_t n_small = 0;
    for (int k = 0; k < SMALL + 2; k++)
        if (k != 3 && k != 100) small[n_small++] = names[k];
    char *list = strdup(igt_fmt("%s/list", dir));
    assert_int_equal(ig_shard_list_write(list, small, n_small, 0, &err), IG_OK);
    char *sbin = strdup(igt_fmt("%s.bin", names[70]));
    char *sb = igt_read(sbin, &blen);
    sb[0] ^= 1;
    igt_write(sbin, sb, blen);
    free(sb);
    free(sbin);
    char lmsg[3][IG_ERR_MSG_MAX];
    for (int t = 1; t <= 3; t++) {
        size_t checked = 99;
        if (ig_shard_list_verify(ctx[t], list, &checked, &err) != IG_ERR_CHECKSUM)
            fail_msg("%s", err.msg);
        assert_int_equal(checked, 69); /* in_000 .. in_069 less in_003 */
        snprintf(lmsg[t - 1], sizeof lmsg[0], "%s", err.msg);
        assert_string_equal(lmsg[0], lmsg[t - 1]);
    }
    assert_non_null(strstr(lmsg[0], "in_070.bin: xxh3 is"));
    free(list);
    free(out);
    assert_non_null(strstr(mmsg[0], "merging"));
    assert_non_null(strstr(mmsg[0], "in_003 into"));
    for (int t = 1; t < 3; t++) {
        assert_string_equal(msg[0], msg[t]);
        assert_string_equal(mmsg[0], mmsg[t]);
    }
    free(d);
    free(dbin);
    free(b);
    free(bin);
    for (int k = 0; k < SMALL + 2; k++) free(names[k]);
    for (int t = 1; t <= 3; t++) ig_ctx_free(ctx[t]);
    igt_rmtree(dir);
    free(dir);
}

/* The steps of test_allocation_failures: two shards written through ctx, merged, the merge
 * verified and read. Returns the first failure. */
static ig_status shard_steps(ig_ctx *ctx, const char *dir, ig_err *err) {
    const char *names[2] = {"a", "b"};
    char prefixes[3][600];
    for (int k = 0; k < 3; k++)
        snprintf(prefixes[k], sizeof prefixes[k], "%s/%s", dir, k < 2 ? names[k] : "m");
    ig_status st = IG_OK;
    for (int k = 0; k < 2 && st == IG_OK; k++) {
        ig_shard_writer *w = NULL;
        ig_shard_writer_opts o = ig_shard_writer_opts_default();
        if ((st = ig_shard_writer_create(&w, ctx, prefixes[k], &o, err)) != IG_OK) break;
        for (int d = 0; d < 50 && st == IG_OK; d++) {
            int32_t ids[5] = {d, d + 1, d + 2 + k, 7, 9};
            st = ig_shard_writer_add_document(w, ids, 1 + (size_t)(d % 5), err);
        }
        ig_manifest meta = {0};
        snprintf(meta.tokenizer, sizeof meta.tokenizer, "gpt2");
        meta.tokenizer_hash = 1;
        meta.vocab_size = 1000;
        meta.eod_id = -1;
        if (st == IG_OK)
            st = ig_shard_writer_finish(w, &meta, err);
        else
            ig_shard_writer_abort(w);
    }
    const char *ins[2] = {prefixes[0], prefixes[1]};
    ig_merge_opts mo = {0};
    if (st == IG_OK) st = ig_shard_merge(ctx, ins, 2, prefixes[2], &mo, err);
    if (st == IG_OK) st = ig_shard_verify(ctx, prefixes[2], err);
    ig_shard *s = NULL;
    if (st == IG_OK) st = ig_shard_open(&s, ctx, prefixes[2], err);
    int32_t got[5];
    for (uint64_t i = 0; st == IG_OK && i < ig_shard_sequences(s); i++)
        st = ig_shard_read_tokens(s, i, 0, (uint64_t)ig_shard_seq_length(s, i), got, err);
    ig_shard_close(s);
    return st;
}

/* Every allocation of the writer, the reader, merge and verify failing in turn (the k-th alone,
 * for every k up to the number the steps make), with 1 and 2 threads: each step succeeds or
 * fails with IG_ERR_NOMEM, nothing leaks (ASan), no shard is left half-made (a shard is either
 * complete, with a manifest that verifies, or has no file at all), and whatever succeeds writes
 * the same bytes. */
static void test_allocation_failures(void **state) {
    (void)state;
    char *root = igt_mkdtemp();
    igt_flaky fl;
    for (int threads = 1; threads <= 2; threads++) {
        ig_ctx *ctx = igt_flaky_ctx(&fl, threads);
        ig_ctx *plain = new_ctx();
        char *ref = strdup(igt_fmt("%s/ref%d", root, threads));
        assert_int_equal(mkdir(ref, 0755), 0);
        ig_err err = {0};
        if (shard_steps(ctx, ref, &err) != IG_OK) fail_msg("%s", err.msg);
        long calls = atomic_load(&fl.calls);
        assert_true(calls > 10);
        int nomem = 0;
        for (long k = 1; k <= calls + 5; k++) {
            char *dir = strdup(igt_fmt("%s/k%ld_%d", root, k, threads));
            assert_int_equal(mkdir(dir, 0755), 0);
            igt_flaky_arm(&fl, k);
            ig_status st = shard_steps(ctx, dir, &err);
            if (st != IG_OK && st != IG_ERR_NOMEM) fail_msg("allocation %ld: %s", k, err.msg);
            nomem += st == IG_ERR_NOMEM;
            igt_flaky_arm(&fl, 0);
            const char *names[3] = {"a", "b", "m"};
            int complete = 0;
            for (int n = 0; n < 3; n++) {
                const char *p = igt_fmt("%s/%s", dir, names[n]);
                if (ig_file_exists(igt_fmt("%s.json", p))) {
                    complete++;
                    if (ig_shard_verify(plain, p, &err) != IG_OK)
                        fail_msg("allocation %ld: %s: %s", k, p, err.msg);
                    for (int e = 0; e < 2; e++) {
                        const char *ext = e ? ".idx" : ".bin";
                        size_t la, lb;
                        char *x = igt_read(igt_fmt("%s/%s%s", ref, names[n], ext), &la);
                        char *y = igt_read(igt_fmt("%s%s", p, ext), &lb);
                        assert_int_equal(la, lb);
                        assert_memory_equal(x, y, la);
                        free(x);
                        free(y);
                    }
                } else if (ig_file_exists(igt_fmt("%s.bin", p)) ||
                           ig_file_exists(igt_fmt("%s.idx", p))) {
                    fail_msg("allocation %ld: %s has data without a manifest", k, p);
                }
            }
            if (igt_count_entries(dir) != 3 * complete)
                fail_msg("allocation %ld: temporaries left in %s", k, dir);
            igt_rmtree(dir);
            free(dir);
        }
        assert_true(nomem >= calls / 2);
        print_message("threads %d: %ld allocations, %d failed cleanly\n", threads, calls, nomem);
        free(ref);
        ig_ctx_free(plain);
        ig_ctx_free(ctx);
    }
    igt_rmtree(root);
    free(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_idx),           cmocka_unit_test(test_read_megatron_golden),
        cmocka_unit_test(test_roundtrip_u16),        cmocka_unit_test(test_roundtrip_i32),
        cmocka_unit_test(test_corruptions),          cmocka_unit_test(test_validator_message),
        cmocka_unit_test(test_large_pointers),       cmocka_unit_test(test_verify),
        cmocka_unit_test(test_verify_vocab_and_ids), cmocka_unit_test(test_abort_leaves_nothing),
        cmocka_unit_test(test_no_overwrite),         cmocka_unit_test(test_merge),
        cmocka_unit_test(test_dtype_names),          cmocka_unit_test(test_all_dtypes),
        cmocka_unit_test(test_shard_list),           cmocka_unit_test(test_many_shards),
        cmocka_unit_test(test_manifest_hex_strict),  cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_threads_same_result),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
