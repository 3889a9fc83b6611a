/* test_tb_events.c - TensorBoard event files (train/run/tb_events.c), read back by an independent
 * reader written here (its own bit-by-bit CRC32C and its own protobuf decoding: TFRecord framing,
 * both CRCs, the file_version record, every tag, step, value and wall time), compared byte for
 * byte with a golden file made from the specification by
 * tests/data/golden/tb_events/make_tb_golden.py, and checked for its failures (bad tags, a
 * directory that cannot be made, a write that fails mid-run). */
#include "testutil.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "train/run/tb_events.h"

/* ---- an independent reader ------------------------------------------------------------------- */

static uint32_t crc32c_bitwise(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static uint32_t masked(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

typedef struct event {
    double wall_time;
    int64_t step;
    int has_version, has_summary, has_value;
    char version[32];
    char tag[512];
    float value;
} event;

/* A cursor over protobuf bytes. */
typedef struct pb {
    const uint8_t *p, *end;
} pb;

static uint64_t pb_varint(pb *c) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        assert_true(c->p < c->end);
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return v;
    }
    fail_msg("varint longer than 10 bytes");
    return 0;
}

static pb pb_sub(pb *c) {
    uint64_t n = pb_varint(c);
    assert_true(n <= (uint64_t)(c->end - c->p));
    pb s = {c->p, c->p + n};
    c->p += n;
    return s;
}

static void decode_value(pb c, event *e) {
    while (c.p < c.end) {
        uint64_t key = pb_varint(&c);
        if (key == ((1 << 3) | 2)) {
            pb s = pb_sub(&c);
            size_t n = (size_t)(s.end - s.p);
            assert_true(n < sizeof e->tag);
            memcpy(e->tag, s.p, n);
            e->tag[n] = '\0';
        } else if (key == ((2 << 3) | 5)) {
            assert_true(c.end - c.p >= 4);
            uint32_t u = (uint32_t)le(c.p, 4);
            memcpy(&e->value, &u, 4);
            c.p += 4;
            e->has_value = 1;
        } else {
            fail_msg("unexpected Summary.Value field key %llu", (unsigned long long)key);
        }
    }
}

static void decode_event(pb c, event *e) {
    memset(e, 0, sizeof *e);
    int last_field = 0;
    while (c.p < c.end) {
        uint64_t key = pb_varint(&c);
        int field = (int)(key >> 3);
        assert_true(field > last_field); /* fields in number order, each once */
        last_field = field;
        if (key == ((1 << 3) | 1)) {
            assert_true(c.end - c.p >= 8);
            uint64_t u = le(c.p, 8);
            memcpy(&e->wall_time, &u, 8);
            c.p += 8;
        } else if (key == ((2 << 3) | 0)) {
            e->step = (int64_t)pb_varint(&c);
        } else if (key == ((3 << 3) | 2)) {
            pb s = pb_sub(&c);
            size_t n = (size_t)(s.end - s.p);
            assert_true(n < sizeof e->version);
            memcpy(e->version, s.p, n);
            e->has_version = 1;
        } else if (key == ((5 << 3) | 2)) {
            pb summary = pb_sub(&c);
            e->has_summary = 1;
            int values = 0;
            while (summary.p < summary.end) {
                assert_int_equal(pb_varint(&summary), (1 << 3) | 2);
                decode_value(pb_sub(&summary), e);
                values++;
            }
            assert_int_equal(values, 1);
        } else {
            fail_msg("unexpected Event field key %llu", (unsigned long long)key);
        }
    }
}

/* Reads every record of an event file, checking the framing and both CRCs of each; returns the
 * number of events (at most cap) decoded into out. */
static size_t read_events(const char *path, event *out, size_t cap) {
    size_t len;
    uint8_t *b = (uint8_t *)igt_read(path, &len);
    size_t n = 0, at = 0;
    while (at < len) {
        assert_true(len - at >= 12);
        uint64_t size = le(b + at, 8);
        assert_int_equal(le(b + at + 8, 4), masked(crc32c_bitwise(b + at, 8)));
        assert_true(size <= len - at - 16);
        const uint8_t *data = b + at + 12;
        assert_int_equal(le(data + size, 4), masked(crc32c_bitwise(data, (size_t)size)));
        assert_true(n < cap);
        decode_event((pb){data, data + size}, &out[n++]);
        at += 12 + size + 4;
    }
    assert_int_equal(at, len);
    free(b);
    return n;
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_crc(void **state) {
    (void)state;
    assert_int_equal(ig_crc32c("123456789", 9), 0xE3069283u); /* the CRC-32C check value */
    assert_int_equal(ig_crc32c("", 0), 0);
    uint8_t buf[1000];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(i * 131 + 7);
    for (size_t n = 0; n <= sizeof buf; n += 37)
        for (size_t off = 0; off < 8; off += 3)
            assert_int_equal(ig_crc32c(buf + off, n - (n > off ? off : n)),
                             crc32c_bitwise(buf + off, n - (n > off ? off : n)));
    for (uint32_t c = 1; c < 0xF0000000u; c += 0x0F0F0F0Fu)
        assert_int_equal(ig_tb_mask_crc(c), masked(c));
}

typedef struct scalar {
    const char *tag;
    int64_t step;
    float value;
    double wall;
} scalar;

/* The events of make_tb_golden.py. */
static void golden_scalars(scalar *s) {
    static char long_tag[201];
    memset(long_tag, 'x', 200);
    s[0] = (scalar){"train/loss", 1, 2.5f, 1700000001.25};
    s[1] = (scalar){"train/loss", 2, 0.0f, 1700000002.5};
    s[2] = (scalar){"train/lr", 0, (float)6e-4, 1700000002.5};
    s[3] = (scalar){"eval/loss", -3, (float)-1.0e30, 1700000003.0};
    s[4] = (scalar){"g\xc3\xbcltig/\xc3\xa9t\xc3\xa9", (int64_t)1 << 40, (float)1e-45, 0.0};
    s[5] = (scalar){"nan", 5, NAN, 1700000004.0};
    s[6] = (scalar){long_tag, 300, INFINITY, 1700000005.0};
}

/* The writer's file is byte-identical to the golden one, and the independent reader reads both. */
static void test_golden(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_tb_writer_opts o = ig_tb_writer_opts_default();
    o.start_time = 1700000000.0;
    o.hostname = "golden";
    ig_tb_writer *w;
    ig_err err = {0};
    assert_int_equal(ig_tb_writer_create(&w, NULL, dir, &o, &err), IG_OK);
    assert_string_equal(ig_tb_writer_path(w),
                        igt_fmt("%s/events.out.tfevents.1700000000.golden", dir));
    char *path = strdup(ig_tb_writer_path(w));
    scalar s[7];
    golden_scalars(s);
    for (int i = 0; i < 7; i++)
        assert_int_equal(
            ig_tb_writer_add_scalar(w, s[i].tag, s[i].step, s[i].value, s[i].wall, &err), IG_OK);
    assert_int_equal(ig_tb_writer_close(w, &err), IG_OK);

    const char *gpath = igt_fmt(
        "%s/tests/data/golden/tb_events/events.out.tfevents.1700000000.golden", igt_source_dir());
    size_t glen, len;
    char *want = igt_read(gpath, &glen);
    char *got = igt_read(path, &len);
    assert_int_equal(len, glen);
    assert_memory_equal(got, want, len);

    event e[16];
    assert_int_equal(read_events(gpath, e, 16), 8);
    assert_true(e[0].has_version && !e[0].has_summary);
    assert_string_equal(e[0].version, "brain.Event:2");
    assert_true(e[0].wall_time == 1700000000.0);
    assert_int_equal(e[0].step, 0);
    for (int i = 0; i < 7; i++) {
        const event *x = &e[i + 1];
        assert_true(x->has_summary && x->has_value && !x->has_version);
        assert_string_equal(x->tag, s[i].tag);
        assert_int_equal(x->step, s[i].step);
        assert_true(x->wall_time == s[i].wall);
        if (isnan(s[i].value))
            assert_true(isnan(x->value));
        else
            assert_true(x->value == s[i].value);
    }
    free(got);
    free(want);
    free(path);
    igt_rmtree(dir);
    free(dir);
}

/* Many scalars into a directory that does not exist yet: the default name, the file_version
 * record on disk at once, the automatic write at 64 KiB, and every event read back. */
static void test_many_scalars(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    const char *sub = igt_fmt("%s/runs/a/b/", dir);
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 1;
    ig_ctx *ctx;
    ig_err err = {0};
    assert_int_equal(ig_ctx_create(&ctx, &co, &err), IG_OK);
    double before = ig_tb_wall_time();
    ig_tb_writer *w;
    assert_int_equal(ig_tb_writer_create(&w, ctx, sub, NULL, &err), IG_OK);
    double after = ig_tb_wall_time();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    const char *path = ig_tb_writer_path(w);
    long long secs = 0;
    char name_host[256] = "";
    assert_int_equal(
        sscanf(strrchr(path, '/') + 1, "events.out.tfevents.%lld.%255s", &secs, name_host), 2);
    assert_string_equal(name_host, host);
    assert_true(secs >= (long long)before && secs <= (long long)after);
    assert_non_null(strstr(path, "/runs/a/b/"));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 12 + 24 + 4); /* the file_version record is there already */

    enum { N = 3000 };
    for (int i = 0; i < N; i++) {
        const char *tag = i % 3 == 0 ? "train/loss" : i % 3 == 1 ? "train/lr" : "perf/tokens_per_s";
        assert_int_equal(
            ig_tb_writer_add_scalar(w, tag, i / 3, (float)i * 0.125f - 7, 1.8e9 + i * 0.5, &err),
            IG_OK);
    }
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 64 * 1024); /* written without a flush: 64 KiB were pending */
    assert_int_equal(ig_tb_writer_flush(w, &err), IG_OK);
    char *copy = strdup(path);
    assert_int_equal(ig_tb_writer_close(w, &err), IG_OK);
    assert_int_equal(ig_tb_writer_close(NULL, &err), IG_OK);

    event *e = calloc(N + 1, sizeof *e);
    assert_int_equal(read_events(copy, e, N + 1), N + 1);
    assert_true(e[0].has_version);
    assert_true(e[0].wall_time >= before && e[0].wall_time <= after);
    for (int i = 0; i < N; i++) {
        const event *x = &e[i + 1];
        assert_string_equal(x->tag, i % 3 == 0   ? "train/loss"
                                    : i % 3 == 1 ? "train/lr"
                                                 : "perf/tokens_per_s");
        assert_int_equal(x->step, i / 3);
        assert_true(x->value == (float)i * 0.125f - 7);
        assert_true(x->wall_time == 1.8e9 + i * 0.5);
    }
    free(e);
    free(copy);
    ig_ctx_free(ctx);
    igt_rmtree(dir);
    free(dir);
}

/* Two writers of the same second and host: the second gets another name, neither is touched. */
static void test_name_collision(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_tb_writer_opts o = ig_tb_writer_opts_default();
    o.start_time = 1234.75;
    o.hostname = "h/x"; /* a '/' cannot make a subdirectory */
    ig_tb_writer *a, *b;
    ig_err err = {0};
    assert_int_equal(ig_tb_writer_create(&a, NULL, dir, &o, &err), IG_OK);
    assert_int_equal(ig_tb_writer_create(&b, NULL, dir, &o, &err), IG_OK);
    assert_string_equal(ig_tb_writer_path(a), igt_fmt("%s/events.out.tfevents.1234.h_x", dir));
    assert_string_equal(ig_tb_writer_path(b), igt_fmt("%s/events.out.tfevents.1234.h_x.1", dir));
    assert_int_equal(ig_tb_writer_add_scalar(a, "a", 1, 1, 1, &err), IG_OK);
    assert_int_equal(ig_tb_writer_add_scalar(b, "b", 2, 2, 2, &err), IG_OK);
    char *pa = strdup(ig_tb_writer_path(a)), *pb_ = strdup(ig_tb_writer_path(b));
    assert_int_equal(ig_tb_writer_close(a, &err), IG_OK);
    assert_int_equal(ig_tb_writer_close(b, &err), IG_OK);
    event e[4];
    assert_int_equal(read_events(pa, e, 4), 2);
    assert_string_equal(e[1].tag, "a");
    assert_true(e[0].wall_time == 1234.75);
    assert_int_equal(read_events(pb_, e, 4), 2);
    assert_string_equal(e[1].tag, "b");
    free(pa);
    free(pb_);
    igt_rmtree(dir);
    free(dir);
}

static void test_refusals(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    ig_err err = {0};
    ig_tb_writer *w;
    /* a file where a directory should be */
    const char *file = igt_fmt("%s/file", dir);
    igt_write(file, "x", 1);
    assert_int_equal(ig_tb_writer_create(&w, NULL, igt_fmt("%s/sub", file), NULL, &err), IG_ERR_IO);
    assert_null(w);
    assert_non_null(strstr(err.msg, file));
    assert_int_equal(ig_tb_writer_create(&w, NULL, file, NULL, &err), IG_ERR_IO);
    assert_non_null(strstr(err.msg, "a file is in the way"));
    assert_int_equal(ig_tb_writer_create(&w, NULL, "", NULL, &err), IG_ERR_INVALID_ARG);

    assert_int_equal(ig_tb_writer_create(&w, NULL, dir, NULL, &err), IG_OK);
    assert_int_equal(ig_tb_writer_add_scalar(w, "", 1, 1, 1, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_tb_writer_add_scalar(w, NULL, 1, 1, 1, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_tb_writer_add_scalar(w, "bad\xff", 1, 1, 1, &err), IG_ERR_INVALID_ARG);
    assert_non_null(strstr(err.msg, "UTF-8"));
    assert_int_equal(ig_tb_writer_add_scalar(w, "ok", 1, 1, 1, &err), IG_OK);
    assert_int_equal(ig_tb_writer_close(w, &err), IG_OK);
    igt_rmtree(dir);
    free(dir);
}

/* The scenario of test_write_error, in a child process (it lowers RLIMIT_FSIZE): returns the
 * number of the first failed expectation, 0 when all hold. */
static int write_error_child(const char *dir) {
    signal(SIGXFSZ, SIG_IGN); /* writes past the limit fail with EFBIG instead of killing us */
    struct rlimit rl = {16 * 1024, 16 * 1024};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 1;
    ig_err err = {0};
    ig_tb_writer *w;
    if (ig_tb_writer_create(&w, NULL, dir, NULL, &err) != IG_OK) return 2;
    ig_status st = IG_OK;
    int i;
    for (i = 0; i < 10000 && st == IG_OK; i++)
        st = ig_tb_writer_add_scalar(w, "loss", i, 1, 1, &err);
    if (st != IG_ERR_IO || !strstr(err.msg, "cannot write") || !strstr(err.msg, "File too large"))
        return 3;
    if (i < 1000) return 4; /* it failed at the first write (64 KiB pending), not before */
    /* sticky: later records, flush and close all report it */
    if (ig_tb_writer_add_scalar(w, "loss", 1, 1, 1, &err) != IG_ERR_IO ||
        !strstr(err.msg, "an earlier write failed"))
        return 5;
    if (ig_tb_writer_flush(w, &err) != IG_ERR_IO) return 6;
    if (ig_tb_writer_close(w, &err) != IG_ERR_IO) return 7;
    return 0;
}

/* A write that fails (a file-size limit here; a full disk in life) is reported, not ignored. */
static void test_write_error(void **state) {
    (void)state;
    char *dir = igt_mkdtemp();
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) _exit(write_error_child(dir));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fail_msg("expectation %d failed in the child", WEXITSTATUS(status));
    igt_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc),          cmocka_unit_test(test_golden),
        cmocka_unit_test(test_many_scalars), cmocka_unit_test(test_name_collision),
        cmocka_unit_test(test_refusals),     cmocka_unit_test(test_write_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
