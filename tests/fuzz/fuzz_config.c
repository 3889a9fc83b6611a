/* fuzz_config.c - libFuzzer target for the YAML configuration loader (core/config.c).
 *
 * The input is loaded as a YAML document against a small schema with nested groups and keys of
 * every type; then each of its first lines is applied as a `--set` override. The configuration
 * is dumped (with and without origins), and the dump is loaded into a fresh configuration, which
 * must dump to the same text: what `ingot config show` prints reads back as the same values. A
 * failed load must leave the configuration untouched (loads apply completely or not at all).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static void check(int ok) {
    if (!ok) abort();
}

static const ig_cfg_key k_keys[] = {
    IG_KEY("name", IG_CFG_STRING, "run", "a top-level string"),
    IG_KEY("model.n_layer", IG_CFG_INT, "12", "an int in a group"),
    IG_KEY("model.dropout", IG_CFG_FLOAT, "0.1", "a float in a group"),
    IG_KEY("model.bias", IG_CFG_BOOL, "true", "a bool in a group"),
    IG_KEY("model.attn.kind", IG_CFG_STRING, "causal", "a string two levels down"),
    IG_KEY("model.attn.heads", IG_CFG_INT, "-4", "an int two levels down"),
    IG_KEY("optim.lr", IG_CFG_FLOAT, "6e-4", "a float"),
    IG_KEY("optim.betas.b1", IG_CFG_FLOAT, ".inf", "a float default of .inf"),
    IG_KEY("optim.fused", IG_CFG_BOOL, "no", "a bool"),
    IG_KEY("data.path", IG_CFG_STRING, "", "an empty default"),
    IG_KEY("steps", IG_CFG_INT, "0", "a top-level int"),
};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

static FILE *g_null;

/* The dump of cfg as a malloc'd string. */
static char *dump_text(const ig_config *cfg, int origins, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    check(f != NULL);
    ig_err err = {0};
    check((origins ? ig_config_dump_origins(cfg, f, &err) : ig_config_dump(cfg, f, &err)) == IG_OK);
    check(fclose(f) == 0);
    return buf;
}

static ig_config *fresh(void) {
    ig_config *cfg = NULL;
    ig_err err = {0};
    check(ig_config_create(&cfg, k_keys, N_KEYS, &err) == IG_OK);
    return cfg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_null) check((g_null = fopen("/dev/null", "w")) != NULL);
    ig_config *cfg = fresh();
    ig_err err = {0};
    size_t before_len, after_len;
    char *before = dump_text(cfg, 1, &before_len);
    ig_status st = ig_config_load_string(cfg, (const char *)data, size, "fuzz.yaml", &err);
    check(st == IG_OK || err.msg[0] != '\0');
    if (st != IG_OK) {
        char *after = dump_text(cfg, 1, &after_len);
        check(after_len == before_len && memcmp(before, after, before_len) == 0);
        free(after);
    }
    free(before);
    /* the first few lines as --set overrides */
    const char *p = (const char *)data, *end = p + size;
    for (int i = 0; i < 4 && p < end; i++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char *line = strndup(p, n);
        check(line != NULL);
        ig_err e2 = {0};
        st = ig_config_set(cfg, line, &e2);
        check(st == IG_OK || e2.msg[0] != '\0');
        free(line);
        p += n + 1;
    }
    for (size_t i = 0; i < N_KEYS; i++) check(ig_config_origin(cfg, k_keys[i].path) != NULL);
    check(ig_config_dump(cfg, g_null, &err) == IG_OK);
    check(ig_config_dump_origins(cfg, g_null, &err) == IG_OK);
    /* the dump reads back as the same configuration */
    size_t len1, len2;
    char *d1 = dump_text(cfg, 0, &len1);
    ig_config *again = fresh();
    ig_err e3 = {0};
    if (ig_config_load_string(again, d1, len1, "dump.yaml", &e3) != IG_OK) {
        fprintf(stderr, "dump does not load: %s\n---\n%s---\n", e3.msg, d1);
        abort();
    }
    char *d2 = dump_text(again, 0, &len2);
    if (len1 != len2 || memcmp(d1, d2, len1) != 0) {
        fprintf(stderr, "dump changes on reload:\n---\n%s---\n%s---\n", d1, d2);
        abort();
    }
    free(d1);
    free(d2);
    ig_config_free(again);
    ig_config_free(cfg);
    return 0;
}
