/* index_cache.c - the on-disk cache of built sample indices (GPT indices and blends).
 *
 * One file per index: "<dir>/<kind>-<key>.igx", where key is the xxh3 of everything that
 * determines the index, so a changed input, seq_len, sample count, seed, split or weight simply
 * names another file. The file defends itself (DESIGN 6): a header with magic, version, kind,
 * key, file size, up to 16 parameter words and an array table, then the arrays at 64-byte aligned
 * offsets (so a mapped file is used in place), all covered by one xxh3 checked on every load.
 * Files are written atomically (temporary + fsync + rename): a reader sees the old file, none, or
 * the complete new one. Concurrent builders serialize on an flock(2) of "<name>.lock": the first
 * builds, the others block on the lock, then find and map its file.
 *
 * The arrays are stored in host byte order; ingot supports little-endian hosts only.
 */
#include "sampling_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define ICACHE_MAGIC   "IGSMPIDX"
#define ICACHE_VERSION 1u
#define ICACHE_ALIGN   64u
#define ICACHE_HEADER  320u

/* Header layout (little-endian). */
#define OFF_MAGIC     0
#define OFF_VERSION   8
#define OFF_NARRAYS   12
#define OFF_KIND      16 /* 16 bytes, NUL padded */
#define OFF_KEY       32
#define OFF_FILE_SIZE 40
#define OFF_META      48                              /* 16 x u64 */
#define OFF_ARRAYS    (OFF_META + 8 * IG_ICACHE_META) /* 4 x {offset, count, elem_size} */
#define OFF_CHECKSUM  (OFF_ARRAYS + 24 * IG_ICACHE_ARRAYS)

static uint64_t get_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static uint32_t get_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void put_u64(uint8_t *p, uint64_t v) {
    memcpy(p, &v, 8);
}

static void put_u32(uint8_t *p, uint32_t v) {
    memcpy(p, &v, 4);
}

ig_status ig_icache_path(char *buf, size_t cap, const char *dir, const char *kind, uint64_t key,
                         const char *suffix, ig_err *err) {
    char hex[17];
    ig_hash64_hex(key, hex);
    int n = snprintf(buf, cap, "%s/%s-%s.igx%s", dir, kind, hex, suffix ? suffix : "");
    if (n < 0 || (size_t)n >= cap)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "index cache directory path too long: %s", dir);
    return IG_OK;
}

/* The checksum: xxh3 of the header before the checksum field, then of the payload. */
static uint64_t file_checksum(const uint8_t *header, const uint8_t *payload, size_t payload_len) {
    ig_xxh3_stream *s = ig_xxh3_stream_create();
    if (!s) return 0;
    ig_xxh3_stream_update(s, header, OFF_CHECKSUM);
    ig_xxh3_stream_update(s, payload, payload_len);
    uint64_t h = ig_xxh3_stream_digest(s);
    ig_xxh3_stream_free(s);
    return h;
}

void ig_icache_entry_close(ig_icache_entry *e) {
    if (!e) return;
    ig_mapped_file_close(&e->mf);
    memset(e, 0, sizeof *e);
}

ig_status ig_icache_load(ig_icache_entry *e, const char *dir, const char *kind, uint64_t key,
                         ig_err *err) {
    char path[4096];
    memset(e, 0, sizeof *e);
    ig_status st = ig_icache_path(path, sizeof path, dir, kind, key, NULL, err);
    if (st != IG_OK) return st;
    if (!ig_file_exists(path))
        return ig_err_set(err, IG_ERR_NOT_FOUND, "index cache %s: not built yet", path);
    st = ig_mapped_file_open(&e->mf, path, err);
    if (st != IG_OK) return st;
    const uint8_t *d = e->mf.data;
    size_t size = e->mf.size;
    const char *why = NULL;
    char kind16[16] = {0};
    strncpy(kind16, kind, sizeof kind16 - 1);
    if (size < ICACHE_HEADER || memcmp(d + OFF_MAGIC, ICACHE_MAGIC, 8) != 0)
        why = "bad magic or truncated header (not an ingot index cache file)";
    else if (get_u32(d + OFF_VERSION) != ICACHE_VERSION)
        why = "unsupported format version";
    else if (memcmp(d + OFF_KIND, kind16, 16) != 0)
        why = "wrong kind of index";
    else if (get_u64(d + OFF_KEY) != key)
        why = "key in the header does not match the file name";
    else if (get_u64(d + OFF_FILE_SIZE) != size)
        why = "file size differs from the size recorded in the header (truncated or extended)";
    else if (get_u32(d + OFF_NARRAYS) > IG_ICACHE_ARRAYS)
        why = "too many arrays";
    if (!why) {
        e->n_arrays = get_u32(d + OFF_NARRAYS);
        for (uint32_t a = 0; a < e->n_arrays && !why; a++) {
            const uint8_t *t = d + OFF_ARRAYS + 24 * a;
            uint64_t off = get_u64(t), count = get_u64(t + 8), es = get_u64(t + 16);
            if (es == 0 || es > 8 || off % ICACHE_ALIGN != 0 || off < ICACHE_HEADER || off > size ||
                count > (size - off) / es) {
                why = "array table entry out of bounds";
                break;
            }
            e->array[a] = d + off;
            e->count[a] = count;
            e->elem_size[a] = (uint32_t)es;
        }
    }
    if (!why) {
        for (int m = 0; m < IG_ICACHE_META; m++) e->meta[m] = get_u64(d + OFF_META + 8 * m);
        uint64_t sum = file_checksum(d, d + ICACHE_HEADER, size - ICACHE_HEADER);
        if (sum != get_u64(d + OFF_CHECKSUM)) {
            ig_icache_entry_close(e);
            return ig_err_set(err, IG_ERR_CHECKSUM,
                              "index cache %s: checksum mismatch (the file is damaged); it will "
                              "be rebuilt, or delete it",
                              path);
        }
        return IG_OK;
    }
    ig_icache_entry_close(e);
    return ig_err_set(err, IG_ERR_FORMAT, "index cache %s: %s; it will be rebuilt, or delete it",
                      path, why);
}

static ig_status write_zeros(ig_atomic_file *af, size_t n, ig_err *err) {
    static const uint8_t zeros[ICACHE_ALIGN];
    return n ? ig_atomic_file_write(af, zeros, n, err) : IG_OK;
}

ig_status ig_icache_store(const char *dir, const char *kind, uint64_t key,
                          const uint64_t meta[IG_ICACHE_META], uint32_t n_arrays,
                          const void *const *arrays, const uint64_t *counts,
                          const uint32_t *elem_sizes, ig_err *err) {
    char path[4096];
    uint8_t hdr[ICACHE_HEADER];
    uint64_t offs[IG_ICACHE_ARRAYS] = {0};
    static const uint8_t zeros[ICACHE_ALIGN];
    if (n_arrays > IG_ICACHE_ARRAYS)
        return ig_err_set(err, IG_ERR_INTERNAL, "index cache: too many arrays");
    ig_status st = ig_icache_path(path, sizeof path, dir, kind, key, NULL, err);
    if (st != IG_OK) return st;

    memset(hdr, 0, sizeof hdr);
    memcpy(hdr + OFF_MAGIC, ICACHE_MAGIC, 8);
    put_u32(hdr + OFF_VERSION, ICACHE_VERSION);
    put_u32(hdr + OFF_NARRAYS, n_arrays);
    strncpy((char *)hdr + OFF_KIND, kind, 15);
    put_u64(hdr + OFF_KEY, key);
    for (int m = 0; m < IG_ICACHE_META; m++) put_u64(hdr + OFF_META + 8 * m, meta[m]);
    uint64_t pos = ICACHE_HEADER;
    for (uint32_t a = 0; a < n_arrays; a++) {
        pos = (pos + ICACHE_ALIGN - 1) / ICACHE_ALIGN * ICACHE_ALIGN;
        offs[a] = pos;
        put_u64(hdr + OFF_ARRAYS + 24 * a, pos);
        put_u64(hdr + OFF_ARRAYS + 24 * a + 8, counts[a]);
        put_u64(hdr + OFF_ARRAYS + 24 * a + 16, elem_sizes[a]);
        pos += counts[a] * elem_sizes[a];
    }
    put_u64(hdr + OFF_FILE_SIZE, pos);

    /* Checksum over the header prefix and the payload exactly as it will be laid out. */
    ig_xxh3_stream *hs = ig_xxh3_stream_create();
    if (!hs) return ig_err_set(err, IG_ERR_NOMEM, "index cache: out of memory");
    ig_xxh3_stream_update(hs, hdr, OFF_CHECKSUM);
    uint64_t at = ICACHE_HEADER;
    for (uint32_t a = 0; a < n_arrays; a++) {
        if (offs[a] > at) ig_xxh3_stream_update(hs, zeros, offs[a] - at);
        size_t len = counts[a] * elem_sizes[a];
        ig_xxh3_stream_update(hs, arrays[a], len);
        at = offs[a] + len;
    }
    put_u64(hdr + OFF_CHECKSUM, ig_xxh3_stream_digest(hs));
    ig_xxh3_stream_free(hs);

    ig_atomic_file *af = NULL;
    st = ig_atomic_file_create(&af, path, 1, err);
    if (st != IG_OK) return st;
    st = ig_atomic_file_write(af, hdr, sizeof hdr, err);
    at = ICACHE_HEADER;
    for (uint32_t a = 0; a < n_arrays && st == IG_OK; a++) {
        st = write_zeros(af, offs[a] - at, err);
        size_t len = counts[a] * elem_sizes[a];
        if (st == IG_OK && len) st = ig_atomic_file_write(af, arrays[a], len, err);
        at = offs[a] + len;
    }
    if (st != IG_OK) {
        ig_atomic_file_abort(af);
        return ig_err_prefix(err, st, "writing index cache %s", path);
    }
    st = ig_atomic_file_commit(af, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "writing index cache %s", path);
    return IG_OK;
}

ig_status ig_icache_lock(const char *dir, const char *kind, uint64_t key, int *fd_out,
                         ig_err *err) {
    char path[4096];
    *fd_out = -1;
    ig_status st = ig_mkdir_p(dir, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "the index cache directory");
    st = ig_icache_path(path, sizeof path, dir, kind, key, ".lock", err);
    if (st != IG_OK) return st;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return ig_err_errno(err, errno, "cannot open index cache lock %s", path);
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        int e = errno;
        close(fd);
        return ig_err_errno(err, e, "cannot lock index cache lock %s", path);
    }
    *fd_out = fd;
    return IG_OK;
}

void ig_icache_unlock(int fd) {
    if (fd < 0) return;
    flock(fd, LOCK_UN);
    close(fd);
}
