/* fuzz_hf_config.c - libFuzzer target for the Hugging Face config.json readers
 * (train/formats/hf.c: the family chosen by "model_type" or diffusers' "_class_name"; then that
 * family's hf_config hook: GPT2LMHeadModel's, LlamaForCausalLM's, ingot-dit's, T5's and
 * diffusers' AutoencoderKL's fields, each with its ranges and its refusals).
 *
 * The input is a config.json, written to one temp directory per process and read through
 * ig_hf_read_config, as `ingot eval DIR`, `model.init_from` and `encode-text` read a model
 * directory. A read either fails with a message and one of the statuses a config can earn, or
 * gives a shape that ig_model_config_check accepts (again: the family's own check ran inside),
 * whose family is one of the list and whose end-of-text id is -1 or a token of the vocabulary.
 * Anything else aborts, which libFuzzer reports as a crash. The seed corpus holds the goldens'
 * config.json files of every family (tests/data/golden/) and a few near misses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train.h"

static void check(int ok) {
    if (!ok) abort();
}

static char g_dir[64];
static ig_ctx *g_ctx;

static void cleanup(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/config.json", g_dir);
    unlink(p);
    rmdir(g_dir);
}

static void setup(void) {
    if (g_dir[0]) return;
    snprintf(g_dir, sizeof g_dir, "/tmp/ig_fuzz_hf_XXXXXX");
    check(mkdtemp(g_dir) != NULL);
    atexit(cleanup);
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 1;
    o.log_level = IG_LOG_OFF;
    check(ig_ctx_create(&g_ctx, &o, NULL) == IG_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", g_dir);
    FILE *f = fopen(path, "wb");
    check(f != NULL);
    check(fwrite(data, 1, size, f) == size);
    check(fclose(f) == 0);

    ig_model_config c;
    int32_t eod = 0;
    ig_err err = {0};
    ig_status st = ig_hf_read_config(g_ctx, g_dir, &c, &eod, &err);
    if (getenv("IG_FUZZ_VERBOSE")) fprintf(stderr, "fuzz_hf_config: %d %s\n", (int)st, err.msg);
    check(st == IG_OK || st == IG_ERR_FORMAT || st == IG_ERR_UNSUPPORTED ||
          st == IG_ERR_CONFIG || st == IG_ERR_INVALID_ARG || st == IG_ERR_NOMEM);
    check(st == IG_OK || err.msg[0] != '\0');
    if (st != IG_OK) return 0;
    int n_archs = 0;
    while (ig_model_archs[n_archs]) n_archs++;
    check(c.arch >= 0 && c.arch < n_archs);
    ig_model_config again = c;
    check(ig_model_config_check(&again, &err) == IG_OK);
    check(eod == -1 || (eod >= 0 && eod < c.vocab_size));
    return 0;
}
