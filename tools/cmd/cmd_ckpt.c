/* cmd_ckpt.c - `ingot ckpt export|verify|diff`: a training checkpoint as a Hugging Face directory
 * of its family (GPT2LMHeadModel, LlamaForCausalLM), the check of every file a checkpoint lists,
 * and the comparison of two models' weights (runs under two layouts, a checkpoint and its export).
 * CKPT is a checkpoint directory (RUN_DIR/ckpt/step_NNNNNNNN) or a run directory (its latest
 * checkpoint). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "train/train.h"

const char ig_usage_ckpt[] =
    "usage: ingot ckpt export CKPT --output DIR [--weights ema|raw] [--force]\n"
    "       ingot ckpt verify CKPT\n"
    "       ingot ckpt diff MODEL_A MODEL_B [--tolerance X] [--weights ema|raw]\n"
    "\n"
    "export  writes DIR/model.safetensors and DIR/config.json in the Hugging Face layout of the\n"
    "        model's family: GPT2LMHeadModel (the tied lm_head not stored) or LlamaForCausalLM\n"
    "        (q, k and v as three tensors; lm_head unless tied), the padded vocabulary rows\n"
    "        dropped, which transformers' from_pretrained(DIR) loads; or a DiT's state_dict\n"
    "        (facebookresearch/DiT's names) with config.json model_type ingot-dit; or a VAE as\n"
    "        diffusers' AutoencoderKL: DIR/config.json and "
    "DIR/diffusion_pytorch_model.safetensors\n"
    "        (convolutions [out, in, kh, kw]), which AutoencoderKL.from_pretrained(DIR) loads.\n"
    "        --weights: the EMA of the weights (the default when the run kept one, ema.decay)\n"
    "        or the weights as trained (raw)\n"
    "verify  checks the checkpoint's manifest and the size and xxh3 of every file it lists;\n"
    "        exit 1 naming the first file that is missing, truncated or altered\n"
    "diff    compares the weights of two models of the same shape, tensor by tensor (saved\n"
    "        under any tp / pp layout: each is merged first); prints the largest difference\n"
    "        and exits 1 when a tensor differs by more than X (default 1e-5) times its\n"
    "        largest magnitude (magnitudes below 1 count as 1); --weights as for export\n"
    "\n"
    "CKPT is a checkpoint directory (RUN_DIR/ckpt/step_NNNNNNNN) or a run directory, which\n"
    "stands for its latest checkpoint; a MODEL is a CKPT or a Hugging Face directory.\n"
    "\n"
    "examples:\n"
    "  ingot ckpt export out/gpt-tiny --output out/gpt-tiny-hf\n"
    "  ingot ckpt export out/llama-tiny --output out/llama-tiny-hf\n"
    "  ingot ckpt export out/dit-tiny --output out/dit-tiny-raw --weights raw\n"
    "  ingot ckpt export out/vae-tiny --output out/vae-tiny-diffusers\n"
    "  ingot ckpt verify out/gpt-tiny/ckpt/step_00000200\n"
    "  ingot ckpt diff out/run-1gpu out/run-tp2pp2 --tolerance 1e-5\n";

typedef struct ckpt_args {
    const char *output;
    int force;
    int weights; /* ig_weights */
    double tolerance;
    ig_common_flags flags;
} ckpt_args;

static const ig_cfg_key ckpt_keys[] = {
    IG_KEY_STRING("ckpt.output", ckpt_args, output, "", "the export's directory"),
    IG_KEY_BOOL("ckpt.force", ckpt_args, force, "false", "replace an existing export"),
    IG_KEY_ENUM("ckpt.weights", ckpt_args, weights, "default", ig_weights_names,
                "a checkpoint's weights: ema (its EMA, ema.decay) or raw; default: the EMA when "
                "it holds one"),
};
static const ig_cfg_key diff_keys[] = {
    IG_KEY_FLOAT("ckpt.tolerance", ckpt_args, tolerance, "1e-5", 0, 1,
                 "largest difference allowed, relative to each tensor's largest magnitude"),
    IG_KEY_ENUM("ckpt.weights", ckpt_args, weights, "default", ig_weights_names,
                "a checkpoint's weights: ema (its EMA, ema.decay) or raw; default: the EMA when "
                "it holds one"),
};

/* The weights of a and b, tensor by tensor: the largest |a - b| over max(1, max |a|). */
static ig_status diff_models(ig_ctx *ctx, const char *pa, const char *pb, double tol,
                             ig_weights weights, int quiet, int *differ, ig_err *err) {
    *differ = 0;
    ig_backend *be = NULL;
    ig_model *ma = NULL, *mb = NULL;
    float *ha = NULL, *hb = NULL;
    ig_backend_opts bo = ig_backend_opts_default();
    ig_status st = ig_backend_create(&be, ctx, &bo, err);
    if (st == IG_OK) st = ig_model_open_weights(&ma, ctx, be, pa, 1, 1, weights, NULL, err);
    if (st == IG_OK) st = ig_model_open_weights(&mb, ctx, be, pb, 1, 1, weights, NULL, err);
    if (st == IG_OK) {
        const ig_model_config *a = ig_model_shape(ma), *b = ig_model_shape(mb);
        const char *d = ig_model_config_differs(a, b);
        if (*d)
            st = ig_err_set(err, IG_ERR_INVALID_ARG,
                            "%s and %s are models of different shapes (%s differs: %d x %d, "
                            "vocabulary %d; %d x %d, vocabulary %d)",
                            pa, pb, d, a->n_layer, a->d_model, a->vocab_size, b->n_layer,
                            b->d_model, b->vocab_size);
    }
    uint64_t na = st == IG_OK ? ig_model_buffer_elems(ma) : 0;
    uint64_t nb = st == IG_OK ? ig_model_buffer_elems(mb) : 0;
    if (st == IG_OK && (!(ha = malloc(na * sizeof *ha + 1)) || !(hb = malloc(nb * sizeof *hb + 1))))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) st = ig_model_read(ma, IG_MODEL_PARAMS, ha, err);
    if (st == IG_OK) st = ig_model_read(mb, IG_MODEL_PARAMS, hb, err);
    double worst = 0;
    const char *worst_name = "";
    for (size_t i = 0; st == IG_OK && i < ig_model_num_tensors(ma); i++) {
        const ig_model_tensor *t = ig_model_tensor_at(ma, i);
        const ig_model_tensor *u = ig_model_tensor_find(mb, t->name);
        if (!u || u->numel != t->numel) {
            st = ig_err_set(err, IG_ERR_INVALID_ARG, "%s has no tensor %s of %s's shape", pb,
                            t->name, pa);
            break;
        }
        double mag = 0, d = 0;
        for (uint64_t k = 0; k < t->numel; k++) {
            double x = ha[t->offset + k], y = hb[u->offset + k];
            mag = fmax(mag, fabs(x));
            double e = fabs(x - y);
            if (!(e <= d)) d = e; /* NaN counts */
        }
        double rel = d / fmax(1.0, mag);
        if (!(rel <= tol)) {
            (*differ)++;
            if (!quiet) printf("%s: differs by %.3g (largest magnitude %.3g)\n", t->name, d, mag);
        }
        if (!(rel <= worst)) worst = rel, worst_name = t->name;
    }
    if (st == IG_OK && !quiet)
        printf("%s%zu tensors compared; largest difference %.3g (%s): %s tolerance %g\n",
               *differ ? "" : "same: ", ig_model_num_tensors(ma), worst, worst_name,
               *differ ? "above" : "within", tol);
    free(ha);
    free(hb);
    ig_model_free(ma);
    ig_model_free(mb);
    ig_backend_free(be);
    return st;
}

int ig_cmd_ckpt(const ig_command *cmd, int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-')
        return ig_cmd_usage_error(cmd, "expected a subcommand: export, verify or diff");
    int export = !strcmp(argv[1], "export"), diff = !strcmp(argv[1], "diff");
    if (!export && !diff && strcmp(argv[1], "verify"))
        return ig_cmd_usage_error(cmd, "unknown subcommand '%s' (expected export, verify or diff)",
                                  argv[1]);
    ckpt_args a = {0};
    ig_cmd_table tables[] = {{ig_cmd_common_keys, ig_cmd_n_common_keys, &a.flags},
                             {diff ? diff_keys : ckpt_keys,
                              export ? 3
                              : diff ? 2
                                     : 0,
                              &a}};
    ig_cmd_spec spec = {tables, 2, NULL, 0, 0};
    ig_config *cfg = NULL;
    int first = 0;
    int rc = ig_cmd_parse(cmd, argc - 1, argv + 1, &spec, &cfg, &first);
    if (rc < 0 && diff && argc - 1 - first != 2)
        rc = ig_cmd_usage_error(cmd, "expected two models (checkpoints, run directories or "
                                     "Hugging Face directories)");
    else if (rc < 0 && !diff && argc - 1 - first != 1)
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
    int differ = 0;
    if (st == IG_OK && diff) {
        st = diff_models(ctx, arg, argv[2 + first], a.tolerance, (ig_weights)a.weights,
                         a.flags.quiet, &differ, &err);
        rc = st != IG_OK ? ig_cmd_fail(&err) : differ ? IG_EXIT_FAIL : IG_EXIT_OK;
        ig_ctx_free(ctx);
        ig_config_free(cfg);
        return rc;
    }
    if (st == IG_OK) st = ig_ckpt_resolve(arg, dir, sizeof dir, &err);
    if (st == IG_OK && export) {
        st = ig_ckpt_export(ctx, dir, a.output, a.force, (ig_weights)a.weights, &err);
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
