/* test_safetensors.c - safetensors files (train/safetensors*.c): writer/reader round trips of
 * every dtype and shape (0-d scalars, zero-size tensors, 8 dimensions, tensors filled by a
 * callback), the byte-exact output of the reference library (vectors from its own unit tests, and
 * golden files made from the specification by tests/data/golden/safetensors/
 * make_safetensors_golden.py), every malformed header the reader must refuse with its message,
 * the fp32 <-> bf16/f16 conversions against PyTorch (make_rounding.py), atomic commits and
 * allocation failures. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/formats/safetensors.h"

static const char *golden(const char *name) {
    return igt_fmt("%s/tests/data/golden/safetensors/%s", igt_source_dir(), name);
}

/* The byte pattern of the golden files' other tensors: (13 * i + strlen(name)) & 0xFF. */
static void pattern(uint8_t *dst, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)((13 * i + strlen(name)) & 0xFF);
}

static ig_st_file *open_ok(const char *path) {
    ig_st_file *f = NULL;
    ig_err err = {0};
    if (ig_st_file_open(&f, NULL, path, &err) != IG_OK) fail_msg("%s", err.msg);
    return f;
}

static void expect_shape(const ig_st_tensor *t, int ndim, const uint64_t *shape) {
    assert_non_null(t);
    assert_int_equal(ig_st_tensor_ndim(t), ndim);
    for (int i = 0; i < ndim; i++) assert_int_equal(ig_st_tensor_shape(t)[i], shape[i]);
}

/* ---- dtypes and conversions ------------------------------------------------------------------ */

static void test_dtypes(void **state) {
    (void)state;
    for (int i = 0; i < IG_ST_DTYPE_COUNT; i++) {
        ig_st_dtype d;
        assert_int_equal(ig_st_dtype_parse(ig_st_dtype_name((ig_st_dtype)i), &d), IG_OK);
        assert_int_equal(d, i);
        unsigned bits = ig_st_dtype_bits(d);
        assert_true(bits == 4 || bits == 6 || bits == 8 || bits == 16 || bits == 32 || bits == 64);
    }
    ig_st_dtype d;
    assert_int_equal(ig_st_dtype_parse("f32", &d), IG_ERR_NOT_FOUND);
    assert_int_equal(ig_st_dtype_parse("", &d), IG_ERR_NOT_FOUND);
    assert_null(ig_st_dtype_name(IG_ST_DTYPE_COUNT));
    assert_int_equal(ig_st_dtype_bits(IG_ST_DTYPE_COUNT), 0);
    assert_string_equal(ig_st_dtype_name(IG_ST_BF16), "BF16");
    assert_int_equal(ig_st_dtype_bits(IG_ST_C64), 64);
    assert_int_equal(ig_st_dtype_bits(IG_ST_F4), 4);
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* PyTorch's conversions of 18382 values (tests/data/golden/safetensors/make_rounding.py). */
static void test_rounding_matches_pytorch(void **state) {
    (void)state;
    size_t len;
    uint8_t *b = (uint8_t *)igt_read(golden("rounding.bin"), &len);
    assert_int_equal(len % 8, 0);
    assert_true(len / 8 > 18000);
    size_t bad = 0;
    for (size_t i = 0; i < len; i += 8) {
        uint32_t x = (uint32_t)b[i] | (uint32_t)b[i + 1] << 8 | (uint32_t)b[i + 2] << 16 |
                     (uint32_t)b[i + 3] << 24;
        uint16_t bf = (uint16_t)(b[i + 4] | b[i + 5] << 8);
        uint16_t h = (uint16_t)(b[i + 6] | b[i + 7] << 8);
        if (ig_f32_to_bf16(float_of(x)) != bf || ig_f32_to_f16(float_of(x)) != h) {
            if (bad++ < 5)
                print_message("x=%08x: bf16 %04x (torch %04x), f16 %04x (torch %04x)\n", x,
                              ig_f32_to_bf16(float_of(x)), bf, ig_f32_to_f16(float_of(x)), h);
        }
    }
    assert_int_equal(bad, 0);
    free(b);
}

static void test_conversions(void **state) {
    (void)state;
    /* every half and every bf16 goes to fp32 exactly and back unchanged (NaN stays NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ig_f16_to_f32((uint16_t)h);
        float g = ig_bf16_to_f32((uint16_t)h);
        assert_int_equal(bits_of(g), h << 16);
        int nan16 = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
        assert_int_equal(isnan(f) != 0, nan16);
        if (!nan16) {
            assert_int_equal(ig_f32_to_f16(f), h);
            /* the value: (-1)^s 2^(e-15) (1 + m/1024), or 2^-14 m/1024 for subnormals */
            int e = (h >> 10) & 31, m = h & 1023;
            double v = e == 31 ? INFINITY : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
            assert_true((double)f == ((h & 0x8000) ? -v : v));
        }
        if (!isnan(g)) assert_int_equal(ig_f32_to_bf16(g), h);
    }
    /* NaN: quiet, sign kept for f16; bf16 gives PyTorch's scalar 0x7FC0 */
    assert_int_equal(ig_f32_to_f16(NAN), 0x7E00);
    assert_int_equal(ig_f32_to_f16(float_of(0xFF800001u)), 0xFE00);
    assert_int_equal(ig_f32_to_bf16(NAN), 0x7FC0);
    assert_int_equal(ig_f32_to_bf16(float_of(0x7F800001u)), 0x7FC0); /* would round to inf */
    /* ties to even, by hand */
    assert_int_equal(ig_f32_to_bf16(float_of(0x3F808000u)), 0x3F80); /* tie, even below */
    assert_int_equal(ig_f32_to_bf16(float_of(0x3F818000u)), 0x3F82); /* tie, odd below: up */
    assert_int_equal(ig_f32_to_bf16(float_of(0x3F808001u)), 0x3F81);
    assert_int_equal(ig_f32_to_bf16(float_of(0x7F7FFFFFu)), 0x7F80); /* past the max: inf */
    assert_int_equal(ig_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(ig_f32_to_f16(65519.99f), 0x7BFF);
    assert_int_equal(ig_f32_to_f16(65520.0f), 0x7C00);
    assert_int_equal(ig_f32_to_f16(-1e10f), 0xFC00);
    assert_int_equal(ig_f32_to_f16(ldexpf(1, -25)), 0x0000); /* tie with 0: even */
    assert_int_equal(ig_f32_to_f16(ldexpf(3, -25)), 0x0002); /* 1.5 ulp: tie, up to even */
    assert_int_equal(ig_f32_to_f16(ldexpf(1, -14)), 0x0400); /* smallest normal */
    assert_int_equal(ig_f32_to_f16(-0.0f), 0x8000);

    /* against an oracle: the nearest of the neighbouring halves, ties to the even one */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 200000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float x = float_of((uint32_t)s);
        if (isnan(x)) continue;
        uint16_t h = ig_f32_to_f16(x);
        double hv = ig_f16_to_f32(h);
        if (isinf(hv)) {
            assert_true(fabs((double)x) >= 65520.0);
            continue;
        }
        for (int d = -1; d <= 1; d += 2) {
            uint16_t n = (uint16_t)(h + d);
            if (((h & 0x7FFF) == 0 && d < 0) || (n & 0x7C00) == 0x7C00) continue;
            double nv = ig_f16_to_f32(n);
            double dh = fabs(hv - x), dn = fabs(nv - x);
            assert_true(dh < dn || (dh == dn && (h & 1) == 0));
        }
        uint16_t b = ig_f32_to_bf16(x);
        double bv = ig_bf16_to_f32(b);
        if (!isinf(bv)) {
            double lo = ig_bf16_to_f32((uint16_t)(b - 1)), hi = ig_bf16_to_f32((uint16_t)(b + 1));
            if ((b & 0x7FFF) != 0 && !isnan(lo))
                assert_true(fabs(bv - x) < fabs(lo - x) ||
                            (fabs(bv - x) == fabs(lo - x) && !(b & 1)));
            if (!isnan(hi) && !isinf(hi))
                assert_true(fabs(bv - x) < fabs(hi - x) ||
                            (fabs(bv - x) == fabs(hi - x) && !(b & 1)));
        }
    }
    float src[3] = {1.0f, -2.5f, 65504.0f};
    uint16_t dst[3];
    ig_f32_to_bf16_n(src, dst, 3);
    assert_int_equal(dst[0], 0x3F80);
    assert_int_equal(dst[1], 0xC020);
    ig_f32_to_f16_n(src, dst, 3);
    assert_int_equal(dst[0], 0x3C00);
    assert_int_equal(dst[2], 0x7BFF);
}

/* ---- round trips ----------------------------------------------------------------------------- */

typedef struct fill_log {
    uint64_t next; /* the offset expected next */
    int calls;
    int fail_at; /* fail on this call (0: never) */
} fill_log;

/* Fills bytes with the pattern of "big" at any offset, checking the writer's promises. */
static ig_status fill_big(void *user, uint64_t offset, void *dst, size_t len, ig_err *err) {
    fill_log *l = user;
    l->calls++;
    assert_int_equal(offset, l->next);
    assert_true(len > 0 && len <= (1u << 20));
    assert_int_equal(offset % 64, 0);
    if (l->fail_at && l->calls == l->fail_at)
        return ig_err_set(err, IG_ERR_IO, "device read failed at %llu", (unsigned long long)offset);
    uint8_t *d = dst;
    for (size_t i = 0; i < len; i++) d[i] = (uint8_t)(((offset + i) * 7 + 3) & 0xFF);
    l->next = offset + len;
    return IG_OK;
}

/* Every dtype, a scalar, zero-size tensors, 8 dimensions, a callback-filled tensor of several
 * MiB pieces, and metadata: write, read back, compare everything. */
static void test_round_trip(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *path = igt_fmt("%s/model.safetensors", dir);
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 1;
    ig_ctx *ctx;
    ig_err err = {0};
    assert_int_equal(ig_ctx_create(&ctx, &o, &err), IG_OK);

    ig_st_writer *w;
    assert_int_equal(ig_st_writer_create(&w, ctx, path, 0, &err), IG_OK);
    const uint64_t shape24[] = {2, 4}; /* 8 elements: whole bytes for F4 and F6 too */
    static uint8_t data[IG_ST_DTYPE_COUNT][64];
    char names[IG_ST_DTYPE_COUNT][32];
    /* declared in reverse dtype order: the writer keeps the order of declaration */
    for (int i = IG_ST_DTYPE_COUNT - 1; i >= 0; i--) {
        snprintf(names[i], sizeof names[i], "t.%s", ig_st_dtype_name((ig_st_dtype)i));
        pattern(data[i], sizeof data[i], names[i]);
        assert_int_equal(ig_st_writer_add(w, names[i], (ig_st_dtype)i, shape24, 2, data[i], &err),
                         IG_OK);
    }
    float scalar = 3.25f;
    assert_int_equal(ig_st_writer_add(w, "scalar", IG_ST_F32, NULL, 0, &scalar, &err), IG_OK);
    const uint64_t zero1[] = {0}, zero3[] = {3, 0, 2};
    assert_int_equal(ig_st_writer_add(w, "zero", IG_ST_BF16, zero1, 1, NULL, &err), IG_OK);
    assert_int_equal(ig_st_writer_add(w, "zero3", IG_ST_I64, zero3, 3, NULL, &err), IG_OK);
    const uint64_t dims8[] = {1, 2, 1, 2, 1, 2, 1, 3};
    int64_t eight[24];
    for (int i = 0; i < 24; i++) eight[i] = -1000000000000LL * i;
    assert_int_equal(ig_st_writer_add(w, "dims8", IG_ST_I64, dims8, 8, eight, &err), IG_OK);
    const uint64_t big_shape[] = {3 * 1024 * 1024 + 40}; /* 3 MiB + 40 of U8: 4 pieces */
    fill_log log = {0};
    assert_int_equal(ig_st_writer_add_fill(w, "big", IG_ST_U8, big_shape, 1, fill_big, &log, &err),
                     IG_OK);
    assert_int_equal(ig_st_writer_set_metadata(w, "format", "pt", &err), IG_OK);
    assert_int_equal(ig_st_writer_set_metadata(w, "step", "100", &err), IG_OK);
    assert_int_equal(ig_st_writer_set_metadata(w, "format", "ingot", &err), IG_OK); /* replaces */
    assert_int_equal(ig_st_writer_set_metadata(w, "note", "\"quoted\"\n\xc3\xa9", &err), IG_OK);
    uint64_t h = 0;
    if (ig_st_writer_commit(w, &h, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_int_equal(log.calls, 4);
    assert_int_equal(log.next, big_shape[0]);
    assert_int_equal(igt_count_entries(dir), 1); /* no temporary left */

    /* the checksum is that of the file as written */
    uint64_t file_h;
    assert_int_equal(ig_file_xxh3(path, &file_h, &err), IG_OK);
    assert_int_equal(h, file_h);

    ig_st_file *f;
    if (ig_st_file_open(&f, ctx, path, &err) != IG_OK) fail_msg("%s", err.msg);
    assert_string_equal(ig_st_file_path(f), path);
    assert_int_equal(ig_st_file_header_len(f) % 8, 0);
    size_t n = IG_ST_DTYPE_COUNT + 5;
    assert_int_equal(ig_st_file_count(f), n);
    /* file order is declaration order; offsets ascend back to back */
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const ig_st_tensor *t = ig_st_file_tensor(f, i);
        assert_int_equal(ig_st_tensor_offset(t), at);
        at += ig_st_tensor_bytes(t);
        assert_ptr_equal(ig_st_file_find(f, ig_st_tensor_name(t)), t);
        /* data is 8-byte aligned (header padded, page-aligned map) */
        assert_int_equal((uintptr_t)ig_st_tensor_data(t) % 8 == 0, ig_st_tensor_offset(t) % 8 == 0);
        if (i < IG_ST_DTYPE_COUNT) {
            int d = IG_ST_DTYPE_COUNT - 1 - (int)i;
            assert_string_equal(ig_st_tensor_name(t), names[d]);
            assert_int_equal(ig_st_tensor_dtype(t), d);
            expect_shape(t, 2, shape24);
            assert_int_equal(ig_st_tensor_numel(t), 8);
            assert_int_equal(ig_st_tensor_bytes(t), 8 * ig_st_dtype_bits((ig_st_dtype)d) / 8);
            assert_memory_equal(ig_st_tensor_data(t), data[d], ig_st_tensor_bytes(t));
        }
    }
    assert_null(ig_st_file_tensor(f, n));
    const ig_st_tensor *t = ig_st_file_find(f, "scalar");
    assert_int_equal(ig_st_tensor_ndim(t), 0);
    assert_int_equal(ig_st_tensor_numel(t), 1);
    assert_int_equal(ig_st_tensor_bytes(t), 4);
    float back;
    assert_int_equal(ig_st_tensor_to_f32(t, &back, 1, &err), IG_OK);
    assert_true(back == 3.25f);
    t = ig_st_file_find(f, "zero");
    expect_shape(t, 1, zero1);
    assert_int_equal(ig_st_tensor_numel(t), 0);
    assert_int_equal(ig_st_tensor_bytes(t), 0);
    assert_int_equal(ig_st_tensor_to_f32(t, &back, 0, &err), IG_OK);
    t = ig_st_file_find(f, "zero3");
    expect_shape(t, 3, zero3);
    assert_int_equal(ig_st_tensor_bytes(t), 0);
    t = ig_st_file_find(f, "dims8");
    expect_shape(t, 8, dims8);
    assert_memory_equal(ig_st_tensor_data(t), eight, sizeof eight);
    t = ig_st_file_find(f, "big");
    assert_int_equal(ig_st_tensor_bytes(t), big_shape[0]);
    const uint8_t *bytes = ig_st_tensor_data(t);
    for (uint64_t i = 0; i < big_shape[0]; i += 4093)
        assert_int_equal(bytes[i], (uint8_t)((i * 7 + 3) & 0xFF));
    assert_int_equal(bytes[big_shape[0] - 1], (uint8_t)(((big_shape[0] - 1) * 7 + 3) & 0xFF));
    assert_null(ig_st_file_find(f, "nope"));
    assert_null(ig_st_file_find(f, ""));

    assert_int_equal(ig_st_file_metadata_count(f), 3);
    assert_string_equal(ig_st_file_metadata(f, "format"), "ingot");
    assert_string_equal(ig_st_file_metadata(f, "step"), "100");
    assert_string_equal(ig_st_file_metadata(f, "note"), "\"quoted\"\n\xc3\xa9");
    assert_null(ig_st_file_metadata(f, "missing"));
    const char *k, *v;
    ig_st_file_metadata_at(f, 1, &k, &v);
    assert_string_equal(k, "step");
    assert_string_equal(v, "100");
    ig_st_file_metadata_at(f, 3, &k, &v);
    assert_null(k);
    ig_st_file_free(f);
    ig_st_file_free(NULL);

    /* no overwrite unless asked */
    assert_int_equal(ig_st_writer_create(&w, ctx, path, 0, &err), IG_ERR_EXISTS);
    assert_null(w);
    assert_string_equal(err.fix_option, "overwrite");
    assert_int_equal(ig_st_writer_create(&w, ctx, path, 1, &err), IG_OK);
    assert_int_equal(ig_st_writer_commit(w, NULL, &err), IG_OK);
    f = open_ok(path);
    assert_int_equal(ig_st_file_count(f), 0);
    assert_int_equal(ig_st_file_metadata_count(f), 0);
    ig_st_file_free(f);
    assert_int_equal(igt_count_entries(dir), 1);

    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

/* The writer refuses what would make a bad file, and abort or a failed commit leaves nothing. */
static void test_writer_refusals(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *path = igt_fmt("%s/x.safetensors", dir);
    ig_err err = {0};
    ig_st_writer *w;
    assert_int_equal(ig_st_writer_create(&w, NULL, path, 0, &err), IG_OK);
    float x[4] = {0};
    const uint64_t s4[] = {4}, s3[] = {3}, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    const uint64_t huge[] = {1ull << 32, 1ull << 32};
    assert_int_equal(ig_st_writer_add(w, "", IG_ST_F32, s4, 1, x, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_st_writer_add(w, NULL, IG_ST_F32, s4, 1, x, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_st_writer_add(w, "bad\xff", IG_ST_F32, s4, 1, x, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "UTF-8"));
    assert_int_equal(ig_st_writer_add(w, "sur\xed\xa0\x80", IG_ST_F32, s4, 1, x, &err),
                     IG_ERR_INVALID_ARG); /* a UTF-16 surrogate */
    assert_int_equal(ig_st_writer_add(w, "__metadata__", IG_ST_F32, s4, 1, x, &err),
                     IG_ERR_INVALID_ARG);
    assert_int_equal(ig_st_writer_add(w, "t", IG_ST_DTYPE_COUNT, s4, 1, x, &err),
                     IG_ERR_INVALID_ARG);
    assert_int_equal(ig_st_writer_add(w, "t", IG_ST_F32, s9, 9, x, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_st_writer_add(w, "t", IG_ST_F32, NULL, 1, x, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_st_writer_add(w, "t", IG_ST_F32, huge, 2, x, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "overflows"));
    assert_int_equal(ig_st_writer_add(w, "t", IG_ST_F4, s3, 1, x, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "whole number of bytes"));
    assert_int_equal(ig_st_writer_add(w, "t", IG_ST_F32, s4, 1, NULL, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_st_writer_add_fill(w, "t", IG_ST_F32, s4, 1, NULL, NULL, &err),
                     IG_ERR_INVALID_ARG);
    assert_int_equal(ig_st_writer_set_metadata(w, "k", "\xc0\x80", &err), IG_ERR_INVALID_ARG);
    assert_int_equal(igt_count_entries(dir), 1); /* the temporary */
    ig_st_writer_abort(w);
    assert_int_equal(igt_count_entries(dir), 0);
    ig_st_writer_abort(NULL);

    /* a name declared twice: refused at commit, nothing written */
    assert_int_equal(ig_st_writer_create(&w, NULL, path, 0, &err), IG_OK);
    assert_int_equal(ig_st_writer_add(w, "a", IG_ST_F32, s4, 1, x, &err), IG_OK);
    assert_int_equal(ig_st_writer_add(w, "b", IG_ST_F32, s4, 1, x, &err), IG_OK);
    assert_int_equal(ig_st_writer_add(w, "a", IG_ST_F32, s4, 1, x, &err), IG_OK);
    assert_int_equal(ig_st_writer_commit(w, NULL, &err), IG_ERR_INVALID_ARG);
    assert_string_equal(err.msg, igt_fmt("%s: tensor 'a' is declared twice", path));
    assert_int_equal(igt_count_entries(dir), 0);

    /* a fill callback that fails: its error, prefixed with the tensor, and nothing written */
    assert_int_equal(ig_st_writer_create(&w, NULL, path, 0, &err), IG_OK);
    const uint64_t big[] = {5u << 20};
    fill_log log = {.fail_at = 3};
    assert_int_equal(ig_st_writer_add_fill(w, "w.big", IG_ST_U8, big, 1, fill_big, &log, &err),
                     IG_OK);
    assert_int_equal(ig_st_writer_commit(w, NULL, &err), IG_ERR_IO);
    assert_string_equal(err.msg,
                        igt_fmt("%s: tensor 'w.big': device read failed at 2097152", path));
    assert_int_equal(igt_count_entries(dir), 0);

    /* a missing directory fails at create */
    assert_int_equal(
        ig_st_writer_create(&w, NULL, igt_fmt("%s/no/such/x.safetensors", dir), 0, &err),
        IG_ERR_NOT_FOUND);
    igt_rmtree(dir);
    free(dir);
}

/* ---- byte-exact against the reference -------------------------------------------------------- */

/* Writes tensors (F32 data each) through ig_st_writer and returns the file's bytes. */
static char *write_to_bytes(const char *path, const char *const *names, const ig_st_dtype *dt,
                            const uint64_t *const *shapes, const int *ndims,
                            const void *const *data, int n, const char *meta_key,
                            const char *meta_value, size_t *len) {
    ig_err err = {0};
    ig_st_writer *w;
    assert_int_equal(ig_st_writer_create(&w, NULL, path, 1, &err), IG_OK);
    if (meta_key) assert_int_equal(ig_st_writer_set_metadata(w, meta_key, meta_value, &err), IG_OK);
    for (int i = 0; i < n; i++)
        assert_int_equal(ig_st_writer_add(w, names[i], dt[i], shapes[i], ndims[i], data[i], &err),
                         IG_OK);
    if (ig_st_writer_commit(w, NULL, &err) != IG_OK) fail_msg("%s", err.msg);
    return igt_read(path, len);
}

/* The outputs that the reference library's own unit tests assert (huggingface/safetensors,
 * safetensors/src/tensor.rs: test_serialization, test_serialization_forced_alignement,
 * test_empty): ingot's writer gives the same bytes, and its reader accepts them. */
static void test_reference_vectors(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *path = igt_fmt("%s/ref.safetensors", dir);
    const float v[6] = {0, 1, 2, 3, 4, 5};
    const void *data[] = {v};
    const ig_st_dtype f32[] = {IG_ST_F32};
    size_t len;

    const uint64_t s123[] = {1, 2, 3};
    const uint64_t *sh1[] = {s123};
    const int nd3[] = {3};
    const char *n1[] = {"attn.0"};
    static const char h1[] =
        "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}";
    char *got = write_to_bytes(path, n1, f32, sh1, nd3, data, 1, NULL, NULL, &len);
    assert_int_equal(len, 8 + 64 + 24);
    assert_int_equal((uint8_t)got[0], 64);
    assert_memory_equal(got + 1, "\0\0\0\0\0\0\0", 7);
    assert_memory_equal(got + 8, h1, 64);
    assert_memory_equal(got + 72, v, 24);
    ig_st_file_free(open_ok(path));
    free(got);

    const uint64_t s1123[] = {1, 1, 2, 3};
    const uint64_t *sh2[] = {s1123};
    const int nd4[] = {4};
    const char *n2[] = {"attn0"};
    static const char h2[] = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":"
                             "[0,24]}}       ";
    got = write_to_bytes(path, n2, f32, sh2, nd4, data, 1, NULL, NULL, &len);
    assert_int_equal(len, 8 + 72 + 24);
    assert_int_equal((uint8_t)got[0], 72);
    assert_memory_equal(got + 8, h2, 72);
    assert_memory_equal(got + 80, v, 24);
    ig_st_file_free(open_ok(path));
    free(got);

    got = write_to_bytes(path, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, &len);
    assert_int_equal(len, 16);
    assert_memory_equal(got, "\x08\0\0\0\0\0\0\0{}      ", 16);
    free(got);
    got = write_to_bytes(path, NULL, NULL, NULL, NULL, NULL, 0, "framework", "pt", &len);
    assert_int_equal(len, 48);
    assert_memory_equal(got, "\x28\0\0\0\0\0\0\0{\"__metadata__\":{\"framework\":\"pt\"}}     ",
                        48);
    ig_st_file *f = open_ok(path);
    assert_string_equal(ig_st_file_metadata(f, "framework"), "pt");
    ig_st_file_free(f);
    free(got);
    igt_rmtree(dir);
    free(dir);
}

/* tests/data/golden/safetensors/mixed.safetensors, in the reference writer's order (descending
 * dtype, then name): the same tensors written by ingot in that order give the same bytes. */
typedef struct gtensor {
    const char *name;
    ig_st_dtype dtype;
    int ndim;
    uint64_t shape[2];
} gtensor;

static const gtensor MIXED[] = {
    {"u64", IG_ST_U64, 2, {1, 1}},
    {"ids", IG_ST_I64, 1, {3}},
    {"none", IG_ST_I64, 1, {0}},
    {"f64", IG_ST_F64, 1, {2}},
    {"c64", IG_ST_C64, 1, {2}},
    {"empty", IG_ST_F32, 2, {0, 3}},
    {"h.0.attn.c_attn.weight", IG_ST_F32, 2, {2, 6}},
    {"scalar", IG_ST_F32, 0, {0}},
    {"wte", IG_ST_F32, 2, {2, 3}},
    {"u32", IG_ST_U32, 1, {3}},
    {"i32", IG_ST_I32, 2, {2, 2}},
    {"wte.bf16", IG_ST_BF16, 2, {2, 3}},
    {"wte.f16", IG_ST_F16, 2, {3, 2}},
    {"u16", IG_ST_U16, 1, {1}},
    {"i16", IG_ST_I16, 1, {4}},
    {"f8e", IG_ST_F8_E5M2FNUZ, 1, {1}},
    {"f8d", IG_ST_F8_E4M3FNUZ, 1, {1}},
    {"f8c", IG_ST_F8_E8M0, 1, {1}},
    {"f8b", IG_ST_F8_E4M3, 1, {2}},
    {"f8a", IG_ST_F8_E5M2, 1, {2}},
    {"i8", IG_ST_I8, 1, {5}},
    {"u8", IG_ST_U8, 1, {7}},
    {"we\"ird\\name\n\t\x01\x7f/\xc3\xa9", IG_ST_U8, 1, {2}},
    {"f6b", IG_ST_F6_E3M2, 1, {8}},
    {"f6a", IG_ST_F6_E2M3, 1, {4}},
    {"f4", IG_ST_F4, 2, {2, 3}},
    {"mask", IG_ST_BOOL, 1, {3}},
};
#define N_MIXED (sizeof MIXED / sizeof MIXED[0])

static const float VALUES[6] = {-1.5f, -0.5f, 0.0f, 0.25f, 1.0f, 2.75f};

/* The bytes of a golden tensor, as make_safetensors_golden.py makes them. */
static size_t golden_bytes(const gtensor *g, uint8_t *out) {
    uint64_t numel = 1;
    for (int i = 0; i < g->ndim; i++) numel *= g->shape[i];
    size_t n = (size_t)(numel * ig_st_dtype_bits(g->dtype) / 8);
    if (strcmp(g->name, "wte") == 0) {
        memcpy(out, VALUES, sizeof VALUES);
    } else if (strcmp(g->name, "wte.bf16") == 0 || strcmp(g->name, "wte.f16") == 0) {
        for (int i = 0; i < 6; i++) {
            uint16_t h =
                g->dtype == IG_ST_BF16 ? ig_f32_to_bf16(VALUES[i]) : ig_f32_to_f16(VALUES[i]);
            memcpy(out + 2 * i, &h, 2);
        }
    } else if (strcmp(g->name, "scalar") == 0) {
        float s = 3.25f;
        memcpy(out, &s, 4);
    } else if (strcmp(g->name, "f64") == 0) {
        double d[2] = {1e-300, -2.5};
        memcpy(out, d, 16);
    } else if (strcmp(g->name, "h.0.attn.c_attn.weight") == 0) {
        for (int i = 0; i < 12; i++) {
            float x = 0.5f * (float)i - 2;
            memcpy(out + 4 * i, &x, 4);
        }
    } else {
        pattern(out, n, g->name);
    }
    return n;
}

static void test_golden_mixed(void **state) {
    (void)state;
    size_t glen;
    char *want = igt_read(golden("mixed.safetensors"), &glen);
    char *dir = igt_mkdtemp();
    const char *path = igt_fmt("%s/mixed.safetensors", dir);
    static uint8_t bufs[N_MIXED][64];
    ig_err err = {0};
    ig_st_writer *w;
    assert_int_equal(ig_st_writer_create(&w, NULL, path, 0, &err), IG_OK);
    assert_int_equal(ig_st_writer_set_metadata(w, "format", "pt", &err), IG_OK);
    for (size_t i = 0; i < N_MIXED; i++) {
        golden_bytes(&MIXED[i], bufs[i]);
        assert_int_equal(ig_st_writer_add(w, MIXED[i].name, MIXED[i].dtype, MIXED[i].shape,
                                          MIXED[i].ndim, bufs[i], &err),
                         IG_OK);
    }
    uint64_t h;
    assert_int_equal(ig_st_writer_commit(w, &h, &err), IG_OK);
    size_t len;
    char *got = igt_read(path, &len);
    assert_int_equal(len, glen);
    assert_memory_equal(got, want, len);
    assert_int_equal(h, ig_xxh3_64(want, glen));

    /* and the reader sees in the golden file exactly what make_safetensors_golden.py put there */
    ig_st_file *f = open_ok(golden("mixed.safetensors"));
    assert_int_equal(ig_st_file_count(f), N_MIXED);
    assert_int_equal(ig_st_file_metadata_count(f), 1);
    assert_string_equal(ig_st_file_metadata(f, "format"), "pt");
    for (size_t i = 0; i < N_MIXED; i++) {
        const ig_st_tensor *t = ig_st_file_tensor(f, i);
        assert_string_equal(ig_st_tensor_name(t), MIXED[i].name);
        assert_int_equal(ig_st_tensor_dtype(t), MIXED[i].dtype);
        expect_shape(t, MIXED[i].ndim, MIXED[i].shape);
        uint8_t b[64];
        size_t n = golden_bytes(&MIXED[i], b);
        assert_int_equal(ig_st_tensor_bytes(t), n);
        assert_memory_equal(ig_st_tensor_data(t), b, n);
    }
    /* to fp32 from F32, BF16 and F16 */
    const char *conv[] = {"wte", "wte.bf16", "wte.f16"};
    for (int c = 0; c < 3; c++) {
        float out[6];
        const ig_st_tensor *t = ig_st_file_find(f, conv[c]);
        assert_int_equal(ig_st_tensor_to_f32(t, out, 6, &err), IG_OK);
        assert_memory_equal(out, VALUES, sizeof VALUES);
        assert_int_equal(ig_st_tensor_to_f32(t, out, 5, &err), IG_ERR_INVALID_ARG);
    }
    float out[3];
    assert_int_equal(ig_st_tensor_to_f32(ig_st_file_find(f, "ids"), out, 3, &err),
                     IG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "tensor 'ids' is I64"));
    ig_st_file_free(f);

    f = open_ok(golden("empty.safetensors"));
    assert_int_equal(ig_st_file_count(f), 0);
    ig_st_file_free(f);
    free(got);
    free(want);
    igt_rmtree(dir);
    free(dir);
}

/* ---- malformed files ------------------------------------------------------------------------- */

/* u64 LE length + header + data_len bytes of zeros, opened from memory as "x.safetensors". */
static ig_status open_header(const char *header, size_t header_len, uint64_t declared,
                             size_t data_len, ig_err *err) {
    size_t n = 8 + header_len + data_len;
    uint8_t *buf = calloc(1, n);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(declared >> (8 * i));
    memcpy(buf + 8, header, header_len);
    ig_st_file *f = NULL;
    ig_status st = ig_st_file_open_memory(&f, NULL, buf, n, "x.safetensors", err);
    if (st == IG_OK) assert_non_null(f);
    ig_st_file_free(f);
    free(buf);
    return st;
}

typedef struct bad_case {
    const char *header;
    size_t data_len;
    ig_status status;
    const char *msg; /* the whole message after "x.safetensors: " when it starts with '=',
                        else a part of it */
} bad_case;

#define T(name, dt, shape, b, e)                                                                   \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

/* zero-size tensors at the start, between two tensors and at the end: accepted */
/* clang-format off */
#define ZERO_SIZES                                                                                 \
    "{" T("z0", "F32", "[0]", 0, 0) "," T("a", "U8", "[2]", 0, 2) ","                              \
    T("z1", "BF16", "[0, 9]", 2, 2) "," T("b", "U8", "[]", 2, 3) "," T("z2", "I8", "[0]", 3, 3) "}"
/* clang-format on */

static const bad_case BAD[] = {
    {"[1]", 0, IG_ERR_FORMAT, "the header does not start with '{'"},
    {"{\"a\":", 0, IG_ERR_FORMAT, "header is not valid JSON"},
    {"{\"a\":{}} x", 0, IG_ERR_FORMAT, "header is not valid JSON"},
    {"{\"a\xff\":1}", 0, IG_ERR_FORMAT, "header is not valid JSON"},
    {"{\"a\":1}", 0, IG_ERR_FORMAT,
     "=tensor 'a': expected an object with dtype, shape and data_offsets, got an integer"},
    {"{" T("a", "F32", "[4]", 0, 16) "," T("b", "F32", "[4]", 8, 24) "}", 24, IG_ERR_FORMAT,
     "=tensor 'b': data_offsets [8, 24] overlap tensor 'a' [0, 16]"},
    {"{" T("a", "F32", "[4]", 0, 16) "," T("b", "F32", "[4]", 0, 16) "}", 16, IG_ERR_FORMAT,
     "=tensor 'b': data_offsets [0, 16] overlap tensor 'a' [0, 16]"},
    {"{" T("a", "F32", "[4]", 0, 16) "," T("z", "F32", "[0]", 8, 8) "}", 16, IG_ERR_FORMAT,
     "=tensor 'z': data_offsets [8, 8] overlap tensor 'a' [0, 16]"},
    {"{" T("b", "F32", "[4]", 20, 36) "," T("a", "F32", "[4]", 0, 16) "}", 36, IG_ERR_FORMAT,
     "=tensor 'b': data_offsets [20, 36] leave bytes [16, 20) after tensor 'a' to no tensor "
     "(safetensors data is contiguous)"},
    {"{" T("a", "F32", "[4]", 8, 24) "}", 24, IG_ERR_FORMAT,
     "=tensor 'a': data_offsets [8, 24] leave bytes [0, 8) of the data to no tensor (safetensors "
     "data is contiguous)"},
    {"{" T("a", "F32", "[4]", 0, 16) "}", 20, IG_ERR_FORMAT,
     "=the last 4 bytes of the file belong to no tensor (the tensors end at data offset 16 of 20)"},
    {"{\"__metadata__\":{\"k\":\"v\"}}", 3, IG_ERR_FORMAT,
     "=the last 3 bytes of the file belong to no tensor (the tensors end at data offset 0 of 3)"},
    {"{" T("h.0.attn.c_attn.weight", "F32", "[768, 2304]", 0, 7077884) "}", 0, IG_ERR_FORMAT,
     "=tensor 'h.0.attn.c_attn.weight': shape [768, 2304] is 7077888 bytes of F32 but "
     "data_offsets span 7077884"},
    {"{" T("a", "F32", "[4]", 0, 16) "}", 8, IG_ERR_FORMAT,
     "=tensor 'a': data_offsets [0, 16] go past the end of the data (8 bytes after the header): "
     "the file is truncated"},
    {"{" T("a", "F33", "[4]", 0, 16) "}", 16, IG_ERR_UNSUPPORTED,
     "tensor 'a': unknown dtype \"F33\""},
    {"{" T("a", "f32", "[4]", 0, 16) "}", 16, IG_ERR_UNSUPPORTED, "unknown dtype \"f32\""},
    {"{" T("a", "F32", "[4]", 16, 0) "}", 16, IG_ERR_FORMAT,
     "=tensor 'a': data_offsets [16, 0] end before they begin"},
    {"{" T("a", "F32", "[-4]", 0, 16) "}", 16, IG_ERR_FORMAT,
     "=tensor 'a': shape dimension 0 is -4, not a non-negative integer"},
    {"{" T("a", "F32", "[2.0]", 0, 8) "}", 8, IG_ERR_FORMAT,
     "shape dimension 0 is a number with a fraction or exponent"},
    {"{" T("a", "F32", "[\"2\"]", 0, 8) "}", 8, IG_ERR_FORMAT, "shape dimension 0 is a string"},
    {"{" T("a", "F32", "4", 0, 16) "}", 16, IG_ERR_FORMAT,
     "shape must be an array, got an integer"},
    {"{" T("a", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, IG_ERR_UNSUPPORTED,
     "shape has 9 dimensions; at most 8 are supported"},
    {"{" T("a", "F32", "[4294967296, 4294967296]", 0, 0) "}", 0, IG_ERR_FORMAT,
     "=tensor 'a': shape [4294967296, 4294967296] of F32 overflows 64 bits"},
    {"{" T("a", "F32", "[4294967296, 4294967296, 0]", 0, 0) "}", 0, IG_ERR_FORMAT,
     "overflows 64 bits"},
    {"{" T("a", "F4", "[3]", 0, 1) "}", 1, IG_ERR_FORMAT,
     "=tensor 'a': shape [3] of F4 is not a whole number of bytes"},
    {"{" T("a", "F4", "[4]", 0, 2) "}", 2, IG_OK, NULL},
    {"{" T("a", "F32", "[4]", 0, 16) "," T("a", "F32", "[4]", 16, 32) "}", 32, IG_ERR_FORMAT,
     "a name appears twice"},
    {"{\"__metadata__\":{\"k\":1}}", 0, IG_ERR_FORMAT,
     "=__metadata__ \"k\" must be a string, got an integer"},
    {"{\"__metadata__\":\"x\"}", 0, IG_ERR_FORMAT, "__metadata__ must be an object of strings"},
    {"{\"__metadata__\":null}", 0, IG_ERR_FORMAT, "__metadata__ must be an object of strings"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4],\"extra\":1}}", 4,
     IG_ERR_FORMAT, "tensor 'a': unknown field \"extra\""},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[]}}", 4, IG_ERR_FORMAT,
     "=tensor 'a': no \"data_offsets\""},
    {"{\"a\":{\"shape\":[],\"data_offsets\":[0,4]}}", 4, IG_ERR_FORMAT, "no \"dtype\""},
    {"{\"a\":{\"dtype\":7,\"shape\":[],\"data_offsets\":[0,4]}}", 4, IG_ERR_FORMAT,
     "dtype must be a string, got an integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0]}}", 4, IG_ERR_FORMAT,
     "data_offsets must be [begin, end]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,-4]}}", 4, IG_ERR_FORMAT,
     "data_offsets must be [begin, end]"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,99999999999999999999]}}", 4,
     IG_ERR_FORMAT, "header is not valid JSON"},
    /* accepted: the smallest valid files, a whitespace-padded header, zero-size tensors */
    {"{}", 0, IG_OK, NULL},
    {"{}\n \t\r", 0, IG_OK, NULL},
    {ZERO_SIZES, 3, IG_OK, NULL},
};

static void test_malformed(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const bad_case *c = &BAD[i];
        ig_err err = {0};
        size_t hl = strlen(c->header);
        ig_status st = open_header(c->header, hl, hl, c->data_len, &err);
        if (st != c->status)
            fail_msg("case %zu (%s): status %s, want %s: %s", i, c->header, ig_status_str(st),
                     ig_status_str(c->status), err.msg);
        if (!c->msg) continue;
        assert_int_equal(err.status, c->status);
        assert_memory_equal(err.msg, "x.safetensors: ", 15);
        int whole = c->msg[0] == '=';
        if (whole ? strcmp(err.msg + 15, c->msg + 1) != 0 : !strstr(err.msg, c->msg))
            fail_msg("case %zu: message\n  %s\nwant %s\n  %s", i, err.msg,
                     whole ? "exactly" : "a part", c->msg + whole);
    }

    /* the length prefix itself */
    ig_err err = {0};
    ig_st_file *f = NULL;
    assert_int_equal(ig_st_file_open_memory(&f, NULL, "\x02\0\0\0\0", 5, "x.safetensors", &err),
                     IG_ERR_FORMAT);
    assert_string_equal(err.msg, "x.safetensors: 5 bytes is too short for a safetensors file (it "
                                 "starts with an 8-byte header length)");
    assert_null(f);
    assert_int_equal(open_header("{}", 2, 100, 10, &err), IG_ERR_FORMAT);
    assert_string_equal(err.msg, "x.safetensors: header length 100 goes past the end of the file "
                                 "(20 bytes): the file is truncated or not safetensors");
    assert_int_equal(open_header("{}", 2, UINT64_MAX, 10, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "is over the 100000000-byte limit"));
    assert_int_equal(open_header("{}", 2, 100000001, 10, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "is over the 100000000-byte limit"));
    assert_int_equal(open_header("", 0, 0, 0, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "does not start with '{'"));
    assert_int_equal(open_header("{}", 2, 1, 0, &err), IG_ERR_FORMAT); /* "{" alone */
    assert_non_null(strstr(err.msg, "not valid JSON"));
}

/* A truncated or missing file, opened by path: the message names the path. */
static void test_truncated_file(void **state) {
    (void)state;
    size_t len;
    char *bytes = igt_read(golden("mixed.safetensors"), &len);
    char *dir = igt_mkdtemp();
    const char *path = igt_fmt("%s/cut.safetensors", dir);
    igt_write(path, bytes, len - 1);
    ig_err err = {0};
    ig_st_file *f = NULL;
    assert_int_equal(ig_st_file_open(&f, NULL, path, &err), IG_ERR_FORMAT);
    assert_null(f);
    assert_string_equal(err.msg, igt_fmt("%s: tensor 'mask': data_offsets [235, 238] go past the "
                                         "end of the data (237 bytes after the header): the file "
                                         "is truncated",
                                         path));
    igt_write(path, bytes, 100);
    assert_int_equal(ig_st_file_open(&f, NULL, path, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "goes past the end of the file (100 bytes)"));
    igt_write(path, bytes, 0);
    assert_int_equal(ig_st_file_open(&f, NULL, path, &err), IG_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "0 bytes is too short"));
    assert_int_equal(ig_st_file_open(&f, NULL, igt_fmt("%s/missing", dir), &err), IG_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "missing"));
    free(bytes);
    igt_rmtree(dir);
    free(dir);
}

/* ---- allocation failures --------------------------------------------------------------------- */

typedef struct budget {
    int armed, left, failures;
} budget;

static void *b_alloc(void *user, size_t size, size_t align) {
    budget *b = user;
    if (b->armed && b->left-- <= 0) {
        b->failures++;
        return NULL;
    }
    void *p = NULL;
    return posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1)
               ? NULL
               : p;
}

static void *b_realloc(void *user, void *ptr, size_t size) {
    budget *b = user;
    if (b->armed && b->left-- <= 0) {
        b->failures++;
        return NULL;
    }
    return realloc(ptr, size ? size : 1);
}

static void b_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

/* Every allocation of the writer and the reader failing in turn: IG_ERR_NOMEM and no leak (ASan),
 * no file left behind, until the budget suffices. */
static void test_allocation_failures(void **state) {
    (void)state;
    budget b = {0};
    ig_allocator a = {b_alloc, b_realloc, b_free, &b};
    ig_ctx_opts o = ig_ctx_opts_default();
    o.allocator = &a;
    o.threads = 1;
    ig_ctx *ctx;
    ig_err err = {0};
    assert_int_equal(ig_ctx_create(&ctx, &o, &err), IG_OK);
    char *dir = igt_mkdtemp();
    char *path = strdup(igt_fmt("%s/a.safetensors", dir)); /* igt_fmt's slots rotate below */
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint64_t s8[] = {8};
    int done = 0, nomem = 0;
    for (int budget_n = 0; budget_n < 200 && !done; budget_n++) {
        b = (budget){.armed = 1, .left = budget_n};
        ig_st_writer *w;
        ig_status st = ig_st_writer_create(&w, ctx, path, 1, &err);
        for (int i = 0; i < 20 && st == IG_OK; i++)
            st = ig_st_writer_add(w, igt_fmt("t%d", i), IG_ST_F32, s8, 1, x, &err);
        if (st == IG_OK) st = ig_st_writer_set_metadata(w, "k", "v", &err);
        if (st == IG_OK) {
            st = ig_st_writer_commit(w, NULL, &err);
        } else if (w) {
            ig_st_writer_abort(w);
        }
        if (st != IG_OK) {
            assert_int_equal(st, IG_ERR_NOMEM);
            assert_int_equal(igt_count_entries(dir), 0);
            nomem++;
            continue;
        }
        ig_st_file *f = NULL;
        st = ig_st_file_open(&f, ctx, path, &err);
        unlink(path);
        if (st != IG_OK) {
            if (st != IG_ERR_NOMEM) fail_msg("%s", err.msg);
            nomem++;
            continue;
        }
        assert_int_equal(ig_st_file_count(f), 20);
        ig_st_file_free(f);
        done = 1;
    }
    assert_true(done);
    assert_true(nomem >= 20); /* every tensor's allocations, the header's, the reader's */
    assert_true(b.failures == 0);
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(path);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),          cmocka_unit_test(test_rounding_matches_pytorch),
        cmocka_unit_test(test_conversions),     cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_writer_refusals), cmocka_unit_test(test_reference_vectors),
        cmocka_unit_test(test_golden_mixed),    cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_truncated_file),  cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
