/* fuzz_manifest.c - libFuzzer target for the shard manifest reader (dataset/shard_manifest.c) and
 * the shard list expander (dataset/shard_list.c).
 *
 * The input is written as PREFIX.json and read with ig_manifest_read, and as LIST.shards.json and
 * expanded with ig_shard_list_expand (both files in one temp directory made once per process).
 * A manifest that reads must hold NUL-terminated strings and a known dtype; an expanded list must
 * name shards in the list's directory. Anything else aborts (a crash for libFuzzer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/dataset.h"

static void check(int ok) {
    if (!ok) abort();
}

static char g_dir[64];

static void cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_manifest: could not remove %s\n", g_dir);
}

static void put(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    check(f != NULL);
    check(fwrite(data, 1, n, f) == n || n == 0);
    check(fclose(f) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/ig_fuzz_man_XXXXXX");
        check(mkdtemp(g_dir) != NULL);
        atexit(cleanup);
    }
    char prefix[128], path[160];
    ig_err err = {0};

    snprintf(prefix, sizeof prefix, "%s/shard", g_dir);
    snprintf(path, sizeof path, "%s.json", prefix);
    put(path, data, size);
    ig_manifest m;
    ig_status st = ig_manifest_read(&m, prefix, &err);
    check(st == IG_OK || err.msg[0] != '\0');
    if (st == IG_OK) {
        check(memchr(m.tokenizer, 0, sizeof m.tokenizer) &&
              memchr(m.json_key, 0, sizeof m.json_key));
        check(memchr(m.output, 0, sizeof m.output) && !strchr(m.output, '/'));
        check(ig_dtype_size(m.dtype) > 0);
        for (size_t i = 0; i < m.n_sources; i++) check(m.sources[i] != NULL);
    }
    ig_manifest_clear(&m);

    snprintf(prefix, sizeof prefix, "%s/list", g_dir);
    snprintf(path, sizeof path, "%s.shards.json", prefix);
    put(path, data, size);
    char **list = NULL;
    size_t n = 0;
    err.msg[0] = '\0';
    st = ig_shard_list_expand(prefix, &list, &n, &err);
    check(st == IG_OK || err.msg[0] != '\0');
    if (st == IG_OK) {
        check(n >= 1 && list != NULL);
        size_t dl = strlen(g_dir) + 1;
        for (size_t i = 0; i < n; i++)
            check(strncmp(list[i], prefix, dl) == 0 && !strchr(list[i] + dl, '/') && list[i][dl]);
    }
    ig_shard_list_free(list, n);
    return 0;
}
