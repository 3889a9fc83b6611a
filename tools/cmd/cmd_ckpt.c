/* cmd_ckpt.c - `ingot ckpt export|verify`: a training checkpoint as a Hugging Face GPT-2 directory,
 * and the check of every file a checkpoint lists. CKPT is a checkpoint directory
 * (RUN_DIR/ckpt/step_NNNNNNNN) or a run directory (its latest checkpoint). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "train/train.h"

const char ig_usage_ckpt[] =
    "usage: ingot ckpt export CKPT --output DIR [--force]\n"
    "       ingot ckpt verify CKPT\n"
    "\n"
    "export  writes DIR/model.safetensors and DIR/config.json in Hugging Face GPT-2 layout\n"
    "        (transformers' GPT2LMHeadModel.from_pretrained(DIR) loads it; the tied lm_head is\n"
    "        not stored, the padded vocabulary rows are dropped)\n"
    "verify  checks the checkpoint's manifest and the size and xxh3 of every file it lists;\n"
    "        exit 1 naming the first file that is missing, truncated or altered\n"
    "\n"
    "CKPT is a checkpoint directory (RUN_DIR/ckpt/step_NNNNNNNN) or a run directory, which\n"
    "stands for its latest checkpoint.\n"
    "\n"
    "examples:\n"
    "  ingot ckpt export out/gpt-tiny --output out/gpt-tiny-hf\n"
    "  ingot ckpt verify out/gpt-tiny/ckpt/step_00000200\n";

typedef struct ckpt_args {
    const char *output;
    int force;
    ig_common_flags flags;
} ckpt_args;

static const ig_cfg_key ckpt_keys[] = {
    IG_KEY_STRING("ckpt.output", ckpt_args, output, "", "the export's directory"),
    IG_KEY_BOOL("ckpt.force", ckpt_args, force, "false", "replace an existing export"),
};

int ig_cmd_ckpt(const ig_command *cmd, int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-')
        return ig_cmd_usage_error(cmd, "expected a subcommand: export or verify");
    int export = !strcmp(argv[1], "export");
    if (!export && strcmp(argv[1], "verify"))
        return ig_cmd_usage_error(cmd, "unknown subcommand '%s' (expected export or verify)",
                                  argv[1]);
    ckpt_args a = {0};
    ig_cmd_table tables[] = {{ig_cmd_common_keys, ig_cmd_n_common_keys, &a.flags},
                             {ckpt_keys, export ? 2 : 0, &a}};
    ig_cmd_spec spec = {tables, 2, NULL, 0, 0};
    ig_config *cfg = NULL;
    int first = 0;
    int rc = ig_cmd_parse(cmd, argc - 1, argv + 1, &spec, &cfg, &first);
    if (rc < 0 && argc - 1 - first != 1)
        rc = ig_cmd_usage_error(cmd, "expected one CKPT (a checkpoint or run directory)");
    if (rc < 0 && export && !*a.output) rc = ig_cmd_usage_error(cmd, "--output DIR is required");
    if (rc >= 0) {
        ig_config_free(cfg);
        return rc;
    }
    const char *arg = argv[1 + first];
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    char dir[4300];
    ig_status st = ig_cmd_ctx(&ctx, &a.flags, &err);
    if (st == IG_OK) st = ig_ckpt_resolve(arg, dir, sizeof dir, &err);
    if (st == IG_OK && export) {
        st = ig_ckpt_export(ctx, dir, a.output, a.force, &err);
        if (st == IG_OK && !a.flags.quiet) printf("exported %s to %s\n", dir, a.output);
    } else if (st == IG_OK) {
        ig_ckpt_info info;
        st = ig_ckpt_read_info(ctx, dir, 1, &info, &err);
        if (st == IG_OK)
            printf("%s: ok (step %lld, %llu samples consumed, %d layers x %d, vocabulary %d)\n",
                   dir, (long long)info.step, (unsigned long long)info.loader.consumed_samples,
                   info.model.n_layer, info.model.d_model, info.model.vocab_size);
    }
    rc = st == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    ig_ctx_free(ctx);
    ig_config_free(cfg);
    return rc;
}
