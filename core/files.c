/* files.c - read-only mapped files, whole-file reads, atomic writes and size parsing.
 *
 * Atomic writes: data goes to a temporary beside the target, which is fsync'd and renamed over
 * it, and the directory is fsync'd so that the rename itself survives a crash. A writer that is
 * aborted (or a process that dies) never leaves a file under the target name. Every output path
 * is judged by ig_output_check first: a rename replaces whatever has the name, so a device node,
 * a pipe or a socket there (as root: /dev/null itself) would be lost; only regular files are ever
 * replaced, and only when asked to. */
#include "core/core.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

ig_status ig_mapped_file_open(ig_mapped_file *mf, const char *path, ig_err *err) {
    memset(mf, 0, sizeof *mf);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
    if (fd < 0) return ig_err_errno(err, errno, "cannot open %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ig_err_errno(err, e, "cannot stat %s", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ig_err_set(err, IG_ERR_IO, "%s is not a regular file", path);
    }
    mf->path = strdup(path);
    if (!mf->path) {
        close(fd);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory opening %s", path);
    }
    mf->size = (size_t)st.st_size;
    if (mf->size > 0) {
        void *p = mmap(NULL, mf->size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(mf->path);
            memset(mf, 0, sizeof *mf);
            return ig_err_errno(err, e, "cannot map %s", path);
        }
        mf->data = p;
    }
    close(fd);
    return IG_OK;
}

void ig_mapped_file_close(ig_mapped_file *mf) {
    if (!mf) return;
    if (mf->data) munmap((void *)mf->data, mf->size);
    free(mf->path);
    memset(mf, 0, sizeof *mf);
}

/* Opens path for reading without blocking on a FIFO (whose open waits for a writer) and checks
 * that it is a regular file: *fd and *size, or an error. */
static ig_status open_regular(const char *path, int *fd, uint64_t *size, ig_err *err) {
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) return ig_err_errno(err, errno, "cannot open %s", path);
    struct stat st;
    if (fstat(*fd, &st) != 0) {
        int e = errno;
        close(*fd);
        return ig_err_errno(err, e, "cannot stat %s", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(*fd);
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s is not a regular file (it is a %s): give the path of a file", path,
                          S_ISDIR(st.st_mode)                          ? "directory"
                          : S_ISFIFO(st.st_mode)                       ? "pipe"
                          : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "device"
                                                                       : "socket");
    }
    *size = (uint64_t)st.st_size;
    return IG_OK;
}

ig_status ig_read_file_max(const char *path, size_t max, char **out, size_t *out_len, ig_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    uint64_t size = 0;
    int fd = -1;
    ig_status st = open_regular(path, &fd, &size, err);
    if (st != IG_OK) return st;
    char big[32], cap[32];
    if (size > max) {
        close(fd);
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s is %s, more than the %s ingot reads of such a file: is it the right "
                          "file?",
                          path, ig_format_bytes((double)size, big, sizeof big),
                          ig_format_bytes((double)max, cap, sizeof cap));
    }
    /* the size can change while the file is read: read up to max + 1 bytes, growing as needed */
    size_t len = 0, room = (size_t)size + 1;
    char *buf = malloc(room + 1);
    while (buf) {
        if (len == room) {
            if (room > max) {
                st = ig_err_set(err, IG_ERR_INVALID_ARG,
                                "%s grew past %s while it was read: is it the right file?", path,
                                ig_format_bytes((double)max, cap, sizeof cap));
                break;
            }
            size_t next = room > max / 2 ? max + 1 : room * 2;
            char *nb = realloc(buf, next + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            room = next;
        }
        ssize_t n = read(fd, buf + len, room - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            st = ig_err_errno(err, errno, "cannot read %s", path);
            break;
        }
        if (n == 0) break;
        len += (size_t)n;
    }
    close(fd);
    if (!buf) return ig_err_set(err, IG_ERR_NOMEM, "out of memory reading %s", path);
    if (st != IG_OK) {
        free(buf);
        return st;
    }
    buf[len] = '\0';
    *out = buf;
    if (out_len) *out_len = len;
    return IG_OK;
}

ig_status ig_read_file(const char *path, char **out, size_t *out_len, ig_err *err) {
    return ig_read_file_max(path, SIZE_MAX - 1, out, out_len, err);
}

int ig_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

const char *ig_file_kind(unsigned mode) {
    mode_t m = (mode_t)mode;
    return S_ISREG(m)    ? "regular file"
           : S_ISDIR(m)  ? "directory"
           : S_ISFIFO(m) ? "pipe"
           : S_ISCHR(m)  ? "character device"
           : S_ISBLK(m)  ? "block device"
           : S_ISSOCK(m) ? "socket"
           : S_ISLNK(m)  ? "symbolic link"
                         : "special file";
}

/* Judges path as an output (ig_output_check); with target, *target is the file to replace: path,
 * or the regular file a symbolic link at path names (malloc'd; NULL when out of memory). */
static ig_status output_target(const char *path, int overwrite, char **target, ig_err *err) {
    if (target) *target = NULL;
    struct stat ls, st;
    if (lstat(path, &ls) != 0) {
        if (errno != ENOENT) return ig_err_errno(err, errno, "cannot look at %s", path);
        if (target && !(*target = strdup(path)))
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        return IG_OK;
    }
    int link = S_ISLNK(ls.st_mode);
    if (link && stat(path, &st) != 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s is a symbolic link to nothing (%s): ingot writes through a link "
                          "only to an existing regular file; remove the link or give another path",
                          path, strerror(errno));
    if (!link) st = ls;
    if (!S_ISREG(st.st_mode))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s is not a regular file (it is a %s%s): ingot never replaces one, "
                          "even with --force; give the path of a file",
                          path, link ? "symbolic link to a " : "", ig_file_kind(st.st_mode));
    if (!overwrite) {
        ig_err_set(err, IG_ERR_EXISTS, "%s already exists", path);
        return ig_err_fix(err, "overwrite", NULL);
    }
    if (target) {
        *target = link ? realpath(path, NULL) : strdup(path);
        if (!*target)
            return link ? ig_err_errno(err, errno, "cannot resolve the link %s", path)
                        : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    return IG_OK;
}

ig_status ig_output_check(const char *path, int overwrite, ig_err *err) {
    return output_target(path, overwrite, NULL, err);
}

/* The file a path names, canonically: the real path of an existing one (a link resolved), else
 * that of its directory and its own name. malloc'd; NULL when its directory does not exist. */
static char *canonical_output(const char *path) {
    char *r = realpath(path, NULL);
    if (r) return r;
    char *copy = strdup(path), *copy2 = strdup(path);
    char *dir = copy ? realpath(dirname(copy), NULL) : NULL;
    const char *base = copy2 ? basename(copy2) : NULL;
    char *out = NULL;
    if (dir && base) {
        size_t n = strlen(dir) + strlen(base) + 2;
        if ((out = malloc(n))) snprintf(out, n, "%s/%s", dir, base);
    }
    free(dir);
    free(copy);
    free(copy2);
    return out;
}

ig_status ig_outputs_distinct(const char *const *paths, size_t n, ig_err *err) {
    ig_status st = IG_OK;
    char **c = calloc(n ? n : 1, sizeof *c);
    if (!c) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && st == IG_OK; i++) {
        if (!paths[i] || !*paths[i]) continue;
        c[i] = canonical_output(paths[i]);
        for (size_t j = 0; j < i && st == IG_OK; j++) {
            if (!paths[j] || !*paths[j]) continue;
            int same = c[i] && c[j] ? strcmp(c[i], c[j]) == 0 : strcmp(paths[i], paths[j]) == 0;
            if (same)
                st = ig_err_set(err, IG_ERR_INVALID_ARG,
                                "%s and %s are the same file: give each output its own path",
                                paths[j], paths[i]);
        }
    }
    for (size_t i = 0; i < n; i++) free(c[i]);
    free(c);
    return st;
}

ig_status ig_fsync_parent_dir(const char *path, ig_err *err) {
    char *copy = strdup(path);
    if (!copy) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        ig_status st = ig_err_errno(err, errno, "cannot open directory %s", dir);
        free(copy);
        return st;
    }
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* some file systems refuse fsync on directories; that is not an error worth failing for */
    if (rc != 0 && e != EINVAL && e != EROFS) {
        ig_status st = ig_err_errno(err, e, "cannot fsync directory %s", dir);
        free(copy);
        return st;
    }
    free(copy);
    return IG_OK;
}

struct ig_atomic_file {
    char *path;   /* as given, for messages */
    char *target; /* the file replaced: path, or the regular file a link at path names */
    char *tmp;
    FILE *f;
    char *iobuf; /* f's buffer: glibc's setvbuf with a NULL buffer keeps the 4 KiB default */
    int overwrite;
    uint64_t size;
    uint64_t written_back; /* the file's bytes below this have been handed to write-back */
};

static atomic_uint tmp_counter;

#define ATOMIC_FILE_BUFFER ((size_t)1 << 20)
/* Every this many bytes written, the kernel is asked to start writing them to the device (and
 * not to wait): the commit's fsync then waits for the last few MB only, where it would wait for
 * the whole file (34 ms of a 0.57 s preprocess run writing 79 MB; the run's fsyncs, .idx,
 * manifest and directories included, take 3-4 ms with steps of 2 MB, 5-9 ms with 8 MB). */
#define WRITE_BACK_STEP ((uint64_t)2 << 20)

char *ig_temp_path(const char *path, const char *suffix) {
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0, base = strlen(path) - dir;
    size_t sl = strlen(suffix), n = strlen(path) + sl + 64;
    char *out = malloc(n);
    if (!out) return NULL;
    if (base + 1 + sl <= NAME_MAX) {
        snprintf(out, n, "%s.%s", path, suffix);
        return out;
    }
    /* the target's name fits but not with the suffix: keep its start, and tell it apart from
     * other long names by the hash of the whole name */
    char hex[17];
    ig_hash64_hex(ig_xxh3_64(path + dir, base), hex);
    size_t keep = NAME_MAX - (2 + 16 + 1 + sl); /* ".~" HEX "." SUFFIX */
    if (keep > base) keep = base;
    snprintf(out, n, "%.*s%.*s.~%s.%s", (int)dir, path, (int)keep, path + dir, hex, suffix);
    return out;
}

ig_status ig_atomic_file_create(ig_atomic_file **out, const char *path, int overwrite,
                                ig_err *err) {
    *out = NULL;
    const char *slash = strrchr(path, '/');
    if (strlen(slash ? slash + 1 : path) > NAME_MAX) /* refused now, not after writing it all */
        return ig_err_errno(err, ENAMETOOLONG, "cannot create %s", path);
    char *target = NULL;
    ig_status cst = output_target(path, overwrite, &target, err);
    if (cst != IG_OK) return cst;
    ig_atomic_file *af = calloc(1, sizeof *af);
    if (!af) {
        free(target);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    af->overwrite = overwrite;
    af->path = strdup(path);
    af->target = target;
    char suffix[64];
    snprintf(suffix, sizeof suffix, "tmp.%ld.%u", (long)getpid(),
             atomic_fetch_add(&tmp_counter, 1));
    af->tmp = target ? ig_temp_path(target, suffix) : NULL;
    if (!af->path || !af->tmp) {
        ig_atomic_file_abort(af);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    int fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) { /* messages name the file being written, never the temporary */
        ig_status st = ig_err_errno(err, errno, "cannot create %s", path);
        free(af->tmp);
        af->tmp = NULL;
        ig_atomic_file_abort(af);
        return st;
    }
    af->f = fdopen(fd, "wb");
    if (!af->f) {
        close(fd);
        ig_atomic_file_abort(af);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    }
    /* writes of 1 MiB: 4 KiB ones cost the writer of a token shard 8x the system time */
    af->iobuf = malloc(ATOMIC_FILE_BUFFER);
    if (af->iobuf) setvbuf(af->f, af->iobuf, _IOFBF, ATOMIC_FILE_BUFFER);
    *out = af;
    return IG_OK;
}

/* Asks the kernel to start writing the file's bytes [written_back, end) to the device, not
 * waiting (a hint: a file system without it writes back as before). They must be the kernel's,
 * out of the stream's buffer. */
static void write_back(ig_atomic_file *af, uint64_t end) {
#ifdef SYNC_FILE_RANGE_WRITE
    if (end > af->written_back)
        (void)sync_file_range(fileno(af->f), (off_t)af->written_back,
                              (off_t)(end - af->written_back), SYNC_FILE_RANGE_WRITE);
#endif
    af->written_back = end;
}

ig_status ig_atomic_file_write(ig_atomic_file *af, const void *data, size_t len, ig_err *err) {
    if (len && fwrite(data, 1, len, af->f) != len)
        return ig_err_errno(err, errno, "cannot write %s", af->path);
    af->size += len;
    /* the stream holds at most its buffer: what lies before that is the kernel's */
    if (af->size >= af->written_back + WRITE_BACK_STEP + ATOMIC_FILE_BUFFER)
        write_back(af, af->size - ATOMIC_FILE_BUFFER);
    return IG_OK;
}

ig_status ig_atomic_file_reserve(ig_atomic_file *af, uint64_t len, uint64_t *offset, ig_err *err) {
    /* what the stream holds goes first; later stream writes go after the reserved range */
    if (fflush(af->f) != 0 || ferror(af->f))
        return ig_err_errno(err, errno, "cannot write %s", af->path);
    if (len > (uint64_t)INT64_MAX - af->size)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: a file of more than 2^63 bytes", af->path);
    if (fseeko(af->f, (off_t)(af->size + len), SEEK_SET) != 0)
        return ig_err_errno(err, errno, "cannot write %s", af->path);
    *offset = af->size;
    af->size += len;
    return IG_OK;
}

ig_status ig_atomic_file_write_at(ig_atomic_file *af, const void *data, size_t len, uint64_t offset,
                                  ig_err *err) {
    int fd = fileno(af->f);
    const char *p = data;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)offset);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return ig_err_errno(err, n < 0 ? errno : ENOSPC, "cannot write %s at byte offset %llu",
                                af->path, (unsigned long long)offset);
        p += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return IG_OK;
}

FILE *ig_atomic_file_stream(ig_atomic_file *af) {
    return af->f;
}

const char *ig_atomic_file_temp_path(const ig_atomic_file *af) {
    return af->tmp;
}

uint64_t ig_atomic_file_size(const ig_atomic_file *af) {
    return af->size;
}

ig_status ig_atomic_file_truncate(ig_atomic_file *af, uint64_t size, ig_err *err) {
    if (size > af->size)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s: cannot cut %llu bytes back to %llu",
                          af->path, (unsigned long long)af->size, (unsigned long long)size);
    if (fflush(af->f) != 0 || ftruncate(fileno(af->f), (off_t)size) != 0 ||
        fseeko(af->f, (off_t)size, SEEK_SET) != 0)
        return ig_err_errno(err, errno, "cannot cut %s back to %llu bytes", af->path,
                            (unsigned long long)size);
    af->size = size;
    if (af->written_back > size) af->written_back = size;
    return IG_OK;
}

/* Flushes af, starts the write-back of what it holds (not waiting), and closes nothing yet. */
static ig_status commit_flush(ig_atomic_file *af, ig_err *err) {
    if (fflush(af->f) != 0 || ferror(af->f))
        return ig_err_errno(err, errno, "cannot write %s", af->path);
    write_back(af, af->size); /* the fsyncs of several files then overlap */
    return IG_OK;
}

/* Waits for af's bytes to reach the device and closes it. */
static ig_status commit_sync(ig_atomic_file *af, ig_err *err) {
    ig_status st = IG_OK;
    if (fsync(fileno(af->f)) != 0) st = ig_err_errno(err, errno, "cannot fsync %s", af->path);
    if (fclose(af->f) != 0 && st == IG_OK)
        st = ig_err_errno(err, errno, "cannot write %s", af->path);
    af->f = NULL;
    return st;
}

/* Moves the (synced, closed) temporary to the target. */
static ig_status commit_place(ig_atomic_file *af, ig_err *err) {
    ig_status st = IG_OK;
    /* what is at the target now (it may have changed since create) is judged again: a rename
     * replaces anything */
    if (af->overwrite) st = output_target(af->target, 1, NULL, err);
    if (st == IG_OK && !af->overwrite) {
        /* never clobber unless asked to overwrite, even a target that appeared meanwhile: link()
         * fails on an existing name; where hard links are not supported, renameat2's NOREPLACE */
        if (link(af->tmp, af->target) != 0) {
            int e = errno;
            if (e != EEXIST &&
                renameat2(AT_FDCWD, af->tmp, AT_FDCWD, af->target, RENAME_NOREPLACE) == 0)
                e = 0;
            else if (e != EEXIST)
                e = errno;
            if (e == EEXIST) {
                ig_err_set(err, IG_ERR_EXISTS, "%s already exists", af->path);
                st = ig_err_fix(err, "overwrite", NULL);
            } else if (e != 0 && e != EPERM && e != ENOSYS && e != EINVAL && e != EOPNOTSUPP) {
                st = ig_err_errno(err, e, "cannot create %s", af->path);
            } else if (e != 0) {
                ig_err_errno(err, e,
                             "cannot create %s without replacing it (this file system supports "
                             "neither link nor RENAME_NOREPLACE)",
                             af->path);
                st = ig_err_fix(err, "overwrite", NULL);
            }
        }
    } else if (st == IG_OK && rename(af->tmp, af->target) != 0) {
        st = ig_err_errno(err, errno, "cannot move the new %s into place", af->path);
    }
    return st;
}

ig_status ig_atomic_files_commit(ig_atomic_file *const *afs, size_t n, ig_err *err) {
    ig_status st = IG_OK;
    /* every file's write-back is started before the first fsync waits, so that they overlap */
    for (size_t i = 0; i < n && st == IG_OK; i++) st = commit_flush(afs[i], err);
    for (size_t i = 0; i < n && st == IG_OK; i++) st = commit_sync(afs[i], err);
    for (size_t i = 0; i < n && st == IG_OK; i++) {
        ig_atomic_file *af = afs[i];
        st = commit_place(af, err);
        unlink(af->tmp); /* the name the file was written under (after link(), a second one) */
        free(af->tmp);
        af->tmp = NULL;
        /* the directory is synced before the next file is placed: a crash never leaves a later
         * file (an index) in place without an earlier one (its data) */
        if (st == IG_OK) st = ig_fsync_parent_dir(af->target, err);
    }
    for (size_t i = 0; i < n; i++) ig_atomic_file_abort(afs[i]); /* removes what was not placed */
    return st;
}

ig_status ig_atomic_file_commit(ig_atomic_file *af, ig_err *err) {
    return ig_atomic_files_commit(&af, 1, err);
}

void ig_atomic_file_abort(ig_atomic_file *af) {
    if (!af) return;
    if (af->f) fclose(af->f);
    free(af->iobuf); /* after the stream that used it */
    if (af->tmp) unlink(af->tmp);
    free(af->tmp);
    free(af->target);
    free(af->path);
    free(af);
}

ig_status ig_write_file_atomic(const char *path, const void *data, size_t len, int overwrite,
                               ig_err *err) {
    ig_atomic_file *af;
    ig_status st = ig_atomic_file_create(&af, path, overwrite, err);
    if (st != IG_OK) return st;
    st = ig_atomic_file_write(af, data, len, err);
    if (st != IG_OK) {
        ig_atomic_file_abort(af);
        return st;
    }
    return ig_atomic_file_commit(af, err);
}

ig_status ig_parse_size(const char *s, uint64_t *out, ig_err *err) {
    const char *p = s;
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno || !(v >= 0) || isinf(v))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "'%s' is not a size (expected e.g. 4096, 512MB, 1GiB)", s);
    while (*end == ' ') end++;
    double mult = 1;
    char u = (char)toupper((unsigned char)*end);
    if (u == 'K' || u == 'M' || u == 'G' || u == 'T') {
        int pow = u == 'K' ? 1 : u == 'M' ? 2 : u == 'G' ? 3 : 4;
        end++;
        double base = 1000;
        if (*end == 'i' || *end == 'I') {
            base = 1024;
            end++;
        }
        for (int i = 0; i < pow; i++) mult *= base;
    }
    if (*end == 'B' || *end == 'b') end++;
    if (*end != '\0')
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "'%s' is not a size (expected e.g. 4096, 512MB, 1GiB)", s);
    double bytes = v * mult;
    if (bytes >= 18446744073709551615.0)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "size '%s' is too large", s);
    *out = (uint64_t)bytes;
    return IG_OK;
}

char *ig_format_bytes(double bytes, char *buf, size_t cap) {
    const char *units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (bytes >= 1000 && u < 5) {
        bytes /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%.0f B", bytes);
    else
        snprintf(buf, cap, "%.2f %s", bytes, units[u]);
    return buf;
}

void ig_advise_hugepages(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    long ps = sysconf(_SC_PAGESIZE);
    if (!p || ps <= 0 || n < ((size_t)1 << 22)) return;
    uintptr_t page = (uintptr_t)ps;
    uintptr_t b = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t e = ((uintptr_t)p + n) & ~(page - 1);
    if (e > b) (void)madvise((void *)b, e - b, MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

static _Thread_local int remove_errno;
static _Thread_local char remove_failed[4096];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)ftw;
    if ((flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT) {
        remove_errno = errno;
        snprintf(remove_failed, sizeof remove_failed, "%s", path);
        return 1;
    }
    return 0;
}

ig_status ig_mkdir_p(const char *path, ig_err *err) {
    size_t n = strlen(path);
    char *p = strdup(path);
    if (n == 0) {
        free(p);
        return ig_err_set(err, IG_ERR_INVALID_ARG, "an empty directory name");
    }
    if (!p) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = IG_OK;
    for (size_t i = 1; i <= n && st == IG_OK; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        struct stat sb;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            st = ig_err_errno(err, errno, "cannot create directory %s", p);
        else if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = ig_err_set(err, IG_ERR_IO, "cannot create directory %s: a file is in the way", p);
        p[i] = c;
    }
    free(p);
    return st;
}

ig_status ig_remove_tree(const char *path, ig_err *err) {
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT) return IG_OK;
        return ig_err_errno(err, errno, "cannot remove %s", path);
    }
    remove_errno = 0;
    if (nftw(path, remove_entry, 32, FTW_DEPTH | FTW_PHYS) != 0) {
        if (remove_errno) return ig_err_errno(err, remove_errno, "cannot remove %s", remove_failed);
        return ig_err_errno(err, errno, "cannot remove %s", path);
    }
    return IG_OK;
}
