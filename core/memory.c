/* memory.c - how much memory this process can take now, so that a request that cannot fit (a
 * blend's indices, a loader's batches, a video's frames) is refused with the figures before it is
 * allocated, instead of growing until the kernel's OOM killer ends the run.
 *
 * What counts is what is free, not what is installed: a blend that needs 23 GB started on a
 * 24 GB machine with 21 GB available. The figures are the kernel's estimate of what can be
 * allocated without swapping (MemAvailable of /proc/meminfo), what the process's cgroup still
 * allows (its limit less its usage, at every level up to the root: cgroup v2 memory.max and
 * memory.current, or v1 memory.limit_in_bytes and memory.usage_in_bytes), and what the
 * address-space limit still allows (ulimit -v: RLIMIT_AS less the VmSize of /proc/self/status).
 * The smallest, less a margin of a tenth, is what one request may take.
 *
 * Test hook (as the IG_FAULT_* hooks of train/): IG_FAULT_MEMORY_ROOT=DIR reads every one of
 * those files under DIR instead of / (DIR/proc/meminfo, DIR/sys/fs/cgroup/...), so that tests
 * see the figures they wrote. It is read by this file only.
 */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define NONE UINT64_MAX

/* root + path into buf (root: the test hook's directory, or ""). */
static const char *at(char *buf, size_t cap, const char *root, const char *path) {
    snprintf(buf, cap, "%s%s", root, path);
    return buf;
}

/* The first number of a one-line file (a cgroup's "max" is NONE); NONE when absent. */
static uint64_t read_number(const char *path) {
    FILE *f = fopen(path, "re");
    if (!f) return NONE;
    char buf[64] = "";
    uint64_t v = NONE;
    if (fgets(buf, sizeof buf, f) && buf[0] >= '0' && buf[0] <= '9') v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

/* "KEY:  N kB" of a /proc file in bytes; NONE when absent. */
static uint64_t read_kb(const char *path, const char *key) {
    FILE *f = fopen(path, "re");
    if (!f) return NONE;
    char line[256];
    size_t klen = strlen(key);
    uint64_t v = NONE;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            v = strtoull(line + klen + 1, NULL, 10) * 1024;
            break;
        }
    fclose(f);
    return v;
}

/* The cgroup path of this process for controller (v1: "memory") or the unified hierarchy (v2:
 * NULL), from /proc/self/cgroup, into out; 0 when it has none. */
static int cgroup_path(const char *root, const char *controller, char *out, size_t cap) {
    char p[4096];
    FILE *f = fopen(at(p, sizeof p, root, "/proc/self/cgroup"), "re");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = '\0'; /* "ID:CONTROLLERS:PATH" */
        const char *ctrls = c1 + 1;
        if (controller) { /* "cpu,memory" holds "memory" */
            size_t n = strlen(controller);
            for (const char *c = ctrls; *c; c += strcspn(c, ",") + (c[strcspn(c, ",")] != 0))
                if (!strncmp(c, controller, n) && (c[n] == ',' || !c[n])) found = 1;
        } else {
            found = !strcmp(line, "0") && !*ctrls;
        }
        if (found) snprintf(out, cap, "%s", c2 + 1);
    }
    fclose(f);
    return found;
}

/* The least a cgroup hierarchy mounted at mount allows this process, from its directory up to the
 * mount (a limit at any level binds; a container sees its own cgroup as the mount): *limit and
 * *usage of the level that leaves the least. 1 when some level has a limit. */
static int cgroup_room(const char *root, const char *mount, const char *path, const char *max_file,
                       const char *cur_file, uint64_t *limit, uint64_t *usage) {
    char dir[4096], p[4200];
    snprintf(dir, sizeof dir, "%s%s%s", root, mount, path);
    size_t base = strlen(root) + strlen(mount);
    uint64_t best = NONE;
    for (;;) {
        uint64_t lim = read_number(at(p, sizeof p, dir, max_file));
        if (lim < ((uint64_t)1 << 60)) { /* v1 writes "no limit" as a page-rounded 2^63 */
            uint64_t cur = read_number(at(p, sizeof p, dir, cur_file));
            if (cur == NONE) cur = 0;
            uint64_t room = cur < lim ? lim - cur : 0;
            if (room < best) best = room, *limit = lim, *usage = cur;
        }
        char *slash = strrchr(dir + base, '/');
        if (!slash) break;
        *slash = '\0'; /* the parent; the mount itself last */
    }
    return best != NONE;
}

void ig_memory_query(ig_memory_info *m) {
    const char *root = getenv("IG_FAULT_MEMORY_ROOT");
    if (!root) root = "";
    char p[4096], cg[3000];
    memset(m, 0, sizeof *m);
    m->mem_available = read_kb(at(p, sizeof p, root, "/proc/meminfo"), "MemAvailable");
    if (m->mem_available == NONE) { /* no meminfo (or a kernel before 3.14): physical memory */
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) m->mem_available = (uint64_t)pages * (uint64_t)page;
    }
    m->cgroup_limit = m->cgroup_usage = NONE;
    if (!((cgroup_path(root, NULL, cg, sizeof cg) &&
           cgroup_room(root, "/sys/fs/cgroup", cg, "/memory.max", "/memory.current",
                       &m->cgroup_limit, &m->cgroup_usage)) ||
          (cgroup_path(root, "memory", cg, sizeof cg) &&
           cgroup_room(root, "/sys/fs/cgroup/memory", cg, "/memory.limit_in_bytes",
                       "/memory.usage_in_bytes", &m->cgroup_limit, &m->cgroup_usage))))
        m->cgroup_limit = m->cgroup_usage = NONE;
    m->as_limit = m->as_used = NONE;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        m->as_limit = (uint64_t)rl.rlim_cur;
        m->as_used = read_kb(at(p, sizeof p, root, "/proc/self/status"), "VmSize");
        if (m->as_used == NONE) m->as_used = 0;
    }
    m->available = m->mem_available;
    m->source = "available memory (MemAvailable)";
    if (m->cgroup_limit != NONE) {
        uint64_t room = m->cgroup_usage < m->cgroup_limit ? m->cgroup_limit - m->cgroup_usage : 0;
        if (room < m->available) m->available = room, m->source = "the cgroup's memory limit";
    }
    if (m->as_limit != NONE) {
        uint64_t room = m->as_used < m->as_limit ? m->as_limit - m->as_used : 0;
        if (room < m->available) m->available = room, m->source = "the address-space limit";
    }
    m->usable = m->available == NONE ? NONE : m->available - m->available / 10;
}

/* The figures of m into buf: "MemAvailable 21.00 GB; cgroup limit 30.00 GB with 25.00 GB used:
 * 5.00 GB left; ulimit -v 3.00 GB with 1.20 GB mapped: 1.80 GB left". */
static void figures(const ig_memory_info *m, char *buf, size_t cap) {
    char a[32], b[32], c[32];
    size_t n = 0;
    buf[0] = '\0';
    if (m->mem_available != NONE)
        n += (size_t)snprintf(buf + n, cap - n, "MemAvailable %s",
                              ig_format_bytes((double)m->mem_available, a, sizeof a));
    if (m->cgroup_limit != NONE && n < cap) {
        uint64_t left = m->cgroup_usage < m->cgroup_limit ? m->cgroup_limit - m->cgroup_usage : 0;
        n += (size_t)snprintf(buf + n, cap - n, "%scgroup limit %s with %s used: %s left",
                              n ? "; " : "", ig_format_bytes((double)m->cgroup_limit, a, sizeof a),
                              ig_format_bytes((double)m->cgroup_usage, b, sizeof b),
                              ig_format_bytes((double)left, c, sizeof c));
    }
    if (m->as_limit != NONE && n < cap) {
        uint64_t left = m->as_used < m->as_limit ? m->as_limit - m->as_used : 0;
        snprintf(buf + n, cap - n, "%sulimit -v %s with %s mapped: %s left", n ? "; " : "",
                 ig_format_bytes((double)m->as_limit, a, sizeof a),
                 ig_format_bytes((double)m->as_used, b, sizeof b),
                 ig_format_bytes((double)left, c, sizeof c));
    }
}

uint64_t ig_memory_limit(const char **what) {
    ig_memory_info m;
    ig_memory_query(&m);
    if (what) *what = m.source;
    return m.usable;
}

ig_status ig_memory_check(uint64_t need, const char *what, const char *fix, ig_err *err) {
    ig_memory_info m;
    ig_memory_query(&m);
    if (need <= m.usable) return IG_OK;
    char a[32], b[32], f[400];
    figures(&m, f, sizeof f);
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "%s needs %s of memory, more than the %s this process can take now (%s; "
                      "the least of these, less a tenth kept free)%s%s",
                      what, ig_format_bytes((double)need, a, sizeof a),
                      ig_format_bytes((double)m.usable, b, sizeof b), f, fix ? ": " : "",
                      fix ? fix : "");
}
