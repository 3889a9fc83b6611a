/* testutil.c - helpers shared by the cmocka tests. */
#include "testutil.h"

#include "dataset/dataset.h"
#include "dataset/shard_internal.h"

#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

const char *igt_source_dir(void) {
    const char *s = getenv("IG_SOURCE_DIR");
    return s && *s ? s : IG_SOURCE_DIR;
}

const char *igt_shared_data(void) {
    const char *s = getenv("IG_SHARED_DATA");
    return s && *s ? s : NULL;
}

const char *igt_ingot(void) {
    const char *s = getenv("IG_INGOT");
    return s && *s ? s : NULL;
}

char *igt_mkdtemp(void) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    char *p = NULL;
    if (asprintf(&p, "%s/ingot-test-XXXXXX", base) < 0) fail_msg("out of memory");
    if (!mkdtemp(p)) fail_msg("mkdtemp %s failed", p);
    return p;
}

void igt_rmtree(const char *path) {
    if (!path) return;
    char *cmd = NULL;
    if (asprintf(&cmd, "rm -rf '%s'", path) < 0) return;
    if (system(cmd) != 0) print_message("warning: could not remove %s\n", path);
    free(cmd);
}

const char *igt_fmt(const char *fmt, ...) {
    static char bufs[64][4096];
    static int slot;
    char *b = bufs[slot++ & 63];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, 4096, fmt, ap);
    va_end(ap);
    return b;
}

char *igt_read(const char *path, size_t *len) {
    char *buf = NULL;
    ig_err err = {0};
    if (ig_read_file(path, &buf, len, &err) != IG_OK) fail_msg("%s", err.msg);
    return buf;
}

void igt_write(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    if (len && fwrite(data, 1, len, f) != len) fail_msg("cannot write %s", path);
    fclose(f);
}

int igt_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) fail_msg("cannot open %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

int igt_run(const char *cmd, char **out) {
    char *full = NULL;
    if (asprintf(&full, "%s 2>&1", cmd) < 0) return -1;
    FILE *p = popen(full, "r");
    free(full);
    if (!p) return -1;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    int rc = pclose(p);
    if (buf) buf[len] = '\0';
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

void igt_write_tiny_shard(const char *prefix, const uint16_t *ids, size_t n) {
    uint8_t idx[IG_IDX_HEADER_BYTES + 12 + 16], bin[2 * 64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++) {
        bin[2 * i] = (uint8_t)ids[i];
        bin[2 * i + 1] = (uint8_t)(ids[i] >> 8);
    }
    ig_idx_encode_header(idx, IG_DTYPE_U16, 1, 2);
    ig_put_le_u32(idx + 34, (uint32_t)n); /* lengths[0] */
    ig_put_le_u64(idx + 38, 0);           /* pointers[0] */
    ig_put_le_u64(idx + 46, 0);           /* document_indices = [0, 1] */
    ig_put_le_u64(idx + 54, 1);
    igt_write(igt_fmt("%s.bin", prefix), bin, 2 * n);
    igt_write(igt_fmt("%s.idx", prefix), idx, sizeof idx);
    char bx[17], ix[17];
    ig_hash64_hex(ig_xxh3_64(bin, 2 * n), bx);
    ig_hash64_hex(ig_xxh3_64(idx, sizeof idx), ix);
    const char *json = igt_fmt(
        "{\"format\": \"ingot-token-shard\", \"format_version\": 1, \"tokenizer\": \"\", "
        "\"tokenizer_path\": \"\", \"tokenizer_hash\": \"0000000000000000\", \"vocab_size\": "
        "65536, \"eod_id\": -1, \"dtype\": \"uint16\", \"dtype_code\": 8, \"documents\": 1, "
        "\"sequences\": 1, \"tokens\": %zu, \"bin_bytes\": %zu, \"idx_bytes\": %zu, "
        "\"bin_xxh3\": \"%s\", \"idx_xxh3\": \"%s\", \"sources\": [], \"json_key\": \"\", "
        "\"tool_version\": \"test\"}",
        n, 2 * n, sizeof idx, bx, ix);
    igt_write(igt_fmt("%s.json", prefix), json, strlen(json));
}

/* ---- the failing allocator ---------------------------------------------------------------- */

static int flaky_turn(igt_flaky *f) {
    long n = atomic_fetch_add(&f->calls, 1) + 1;
    if (f->fail_at > 0 && n == f->fail_at) {
        atomic_fetch_add(&f->failed, 1);
        return 0;
    }
    return 1;
}

static void *flaky_alloc(void *user, size_t size, size_t align) {
    if (!flaky_turn(user)) return NULL;
    void *p = NULL;
    if (align < sizeof(void *)) align = sizeof(void *);
    return posix_memalign(&p, align, size ? size : 1) == 0 ? p : NULL;
}

static void *flaky_realloc(void *user, void *ptr, size_t size) {
    if (!flaky_turn(user)) return NULL;
    return realloc(ptr, size ? size : 1);
}

static void flaky_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

ig_allocator igt_flaky_allocator(igt_flaky *f) {
    return (ig_allocator){flaky_alloc, flaky_realloc, flaky_free, f};
}

void igt_flaky_arm(igt_flaky *f, long fail_at) {
    f->fail_at = fail_at;
    atomic_store(&f->calls, 0);
    atomic_store(&f->failed, 0);
}

ig_ctx *igt_flaky_ctx(igt_flaky *f, int threads) {
    igt_flaky_arm(f, 0);
    ig_allocator a = igt_flaky_allocator(f);
    ig_ctx_opts o = ig_ctx_opts_default();
    o.allocator = &a;
    o.threads = threads;
    o.log_level = IG_LOG_ERROR;
    ig_ctx *ctx = NULL;
    ig_err err = {0};
    if (ig_ctx_create(&ctx, &o, &err) != IG_OK) fail_msg("%s", err.msg);
    return ctx;
}

void igt_write_clip_shard(const char *prefix, const uint8_t *frames, int B, int F, int H, int W,
                          const uint32_t *labels) {
    ig_err err = {0};
    ig_video_shard_writer *w = NULL;
    ig_video_shard_writer_opts o = {.overwrite = 1};
    assert_int_equal(ig_video_shard_writer_create(&w, NULL, prefix, &o, &err), IG_OK);
    size_t per = (size_t)F * H * W * 3;
    for (int b = 0; b < B; b++) {
        ig_clip_info ci = {.frames = (uint32_t)F,
                           .height = (uint32_t)H,
                           .width = (uint32_t)W,
                           .fps_num = 8,
                           .fps_den = 1,
                           .caption = IG_CLIP_NONE,
                           .bucket = IG_CLIP_NONE,
                           .label = labels ? labels[b] : IG_CLIP_NONE,
                           .tb_num = 1,
                           .tb_den = 8};
        ig_clip_frame fr[64];
        assert_true(F <= 64);
        for (int f = 0; f < F; f++) fr[f] = (ig_clip_frame){f, (uint64_t)f};
        assert_int_equal(ig_video_shard_writer_add(w, &ci, fr, frames + (size_t)b * per, per, &err),
                         IG_OK);
    }
    char *sources[] = {"golden.mp4"};
    ig_video_shard_meta meta = {.sources = sources, .n_sources = 1};
    ig_video_shard_meta done;
    assert_int_equal(ig_video_shard_writer_finish(w, &meta, &done, &err), IG_OK);
    assert_int_equal(ig_video_shard_meta_write(&done, prefix, 1, &err), IG_OK);
    ig_video_shard_meta_clear(&done);
}
