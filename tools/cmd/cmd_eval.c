/* cmd_eval.c - `ingot eval MODEL --data PREFIX --seq-len L --batches K [--micro-batch B]`: the mean
 * loss of a model (a checkpoint, a Hugging Face export directory, or a model.safetensors) over K
 * micro-batches of a token shard's samples, from the start of the stream; of a diffusion model,
 * over clip shards at a grid of times (or with a noise file's noise and times): whatever the
 * model's objective measures. Thin over ig_model_evaluate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "train/train.h"

const char ig_usage_eval[] =
    "usage: ingot eval MODEL --data PREFIX --seq-len L --batches K [--micro-batch B]\n"
    "       ingot eval DIT_MODEL --data CLIPS [--batches K] [--micro-batch B] [--timesteps N]\n"
    "                  [--seed S] [--noise FILE.safetensors] [--weights ema|raw]\n"
    "                  [--caption-features FEATURES]\n"
    "       ingot eval VAE_MODEL --data CLIPS [--batches K] [--micro-batch B] [--seed S]\n"
    "                  [--noise FILE.safetensors]\n"
    "\n"
    "Prints the mean loss of MODEL over K micro-batches of B samples of L tokens read from\n"
    "PREFIX (a token shard or shard list; --data W1 P1 --data W2 ... for a blend), from the\n"
    "start of its sample stream. The first line says which weights (a checkpoint's EMA or raw\n"
    "ones, or an export's), the last is 'loss X.XXXXXX'. MODEL is a checkpoint\n"
    "directory, a Hugging Face GPT-2 or Llama directory or a DiT export (ingot ckpt export) or a\n"
    "model.safetensors with its config.json beside it. A model whose weights are not finite\n"
    "(NaN, infinity) is refused.\n"
    "\n"
    "options:\n"
    "  --data ITEM        the data: a prefix, or weights and prefixes (repeat the option)\n"
    "  --seq-len L        tokens per sample (at most the model's positions; default: them)\n"
    "  --batches K        micro-batches (default 8)\n"
    "  --micro-batch B    samples per micro-batch (default 4)\n"
    "  --seed S, --split A,B,C, --split-index P   as for ingot samples (default: all of it)\n"
    "  --threads N, --quiet, --verbose\n"
    "\n"
    "A diffusion model (model.arch dit) is evaluated on clip shards (ingot preprocess video),\n"
    "or, a model trained on latents, on latent shards (ingot preprocess latents; each clip the\n"
    "mean of its posterior, x0 = scaling (mean - shift) of the VAE, which must be the model's):\n"
    "K micro-batches of B clips (a bucket's batch with buckets) from the first clip on, each\n"
    "at the times (k + 0.5) / N, k < N, with noise keyed by --seed (the trainer's data.seed:\n"
    "the trainer's validation loss, with --weights raw); one line per time, then 'loss X'.\n"
    "  --timesteps N      the grid's times (default 5)\n"
    "  --noise FILE       evaluate clips 0 .. N-1 (ingot inspect --clip's numbers) with the\n"
    "                     file's noise F32 [N, F, H, W, C] and times t F32 [N] instead (C: 3,\n"
    "                     or the latent channels, F H W then in latent positions), as a\n"
    "                     PyTorch implementation of the same weights would\n"
    "  --weights W        a checkpoint's weights: ema (its EMA, the default when it holds one)\n"
    "                     or raw\n"
    "  --caption-features FEATURES  a DiT trained on caption features (data.caption_features):\n"
    "                     those of the clips of --data (ingot preprocess captions' output), made\n"
    "                     by the encoder it was trained with\n"
    "\n"
    "A VAE (model.arch vae; a checkpoint, an export or a diffusers AutoencoderKL directory) is\n"
    "evaluated on clip shards too: K micro-batches from the first clip, each frame encoded, the\n"
    "posterior's sample (noise keyed by --seed, the trainer's data.seed) decoded; it prints the\n"
    "lines 'reconstruction' (the mean |x' - x|), 'kl' (the mean KL term) and 'psnr' (of the\n"
    "reconstructions against the clips, 8-bit scale), then 'loss' (reconstruction + 1e-6 kl,\n"
    "vae.kl_weight's default). --noise FILE (noise F32 [N, F, h, w, C], the latents' shape)\n"
    "evaluates clips 0 .. N-1 with exactly that noise.\n"
    "\n"
    "examples:\n"
    "  ingot eval out/gpt-tiny --data out/quickstart/shakespeare --seq-len 128 --batches 16\n"
    "  ingot eval out/gpt-tiny-hf --data out/shakespeare --batches 4 --micro-batch 8\n"
    "  ingot eval out/dit-tiny --data out/quickstart-video/clips --batches 4 --weights raw\n"
    "  ingot eval out/dit-tiny-latent --data out/quickstart-video/latents --batches 6\n"
    "  ingot eval out/vae-tiny-diffusers --data out/vae-clips --batches 2 --seed 1234\n";

typedef struct eval_args {
    const char *const *data;
    size_t n_data;
    int seq_len, batches, micro_batch, timesteps, weights;
    const char *noise, *features;
    ig_common_flags flags;
} eval_args;

static const ig_cfg_key eval_keys[] = {
    IG_KEY_LIST("eval.data", eval_args, data, n_data, "", "the data"),
    IG_KEY_INT("eval.seq_len", eval_args, seq_len, "0", 0, 1048576,
               "tokens per sample (not given: the model's positions)"),
    IG_KEY_INT("eval.batches", eval_args, batches, "8", 1, 1e9, "micro-batches"),
    IG_KEY_INT("eval.micro_batch", eval_args, micro_batch, "4", 1, 1048576,
               "samples per micro-batch"),
    IG_KEY_INT("eval.timesteps", eval_args, timesteps, "5", 1, IG_EVAL_MAX_TIMES,
               "a diffusion model: the grid's times"),
    IG_KEY_STRING("eval.noise", eval_args, noise, "",
                  "a diffusion model: a safetensors file of noise [N, F, H, W, C] and t [N]"),
    IG_KEY_STRING("eval.caption_features", eval_args, features, "",
                  "a DiT of caption features: those of the clips of --data (ingot preprocess "
                  "captions' output)"),
    IG_KEY_ENUM("eval.weights", eval_args, weights, "default", ig_weights_names,
                "a checkpoint's weights: ema or raw (default: the EMA when it holds one)"),
};

/* "weights: ..." - which weights of path the loss is of (the first line eval prints): a
 * checkpoint's EMA (the default when it holds one) or its trained weights, or an export's. */
static void print_weights(ig_ctx *ctx, const char *path, ig_weights w) {
    char dir[4096], man[4200];
    ig_ckpt_info info;
    if (ig_ckpt_resolve(path, dir, sizeof dir, NULL) != IG_OK) return;
    snprintf(man, sizeof man, "%s/manifest.json", dir);
    if (!ig_file_exists(man)) {
        printf("weights: %s, an exported model (its one set of weights)\n", dir);
    } else if (ig_ckpt_read_info(ctx, dir, 0, &info, NULL) == IG_OK) {
        if (w != IG_WEIGHTS_RAW && info.ema_decay > 0)
            printf("weights: EMA (ema.decay %g) of %s, step %lld%s\n", info.ema_decay, dir,
                   (long long)info.step,
                   w == IG_WEIGHTS_EMA ? "" : " (--weights raw: the trained ones)");
        else
            printf("weights: raw (the trained parameters) of %s, step %lld%s\n", dir,
                   (long long)info.step, info.ema_decay > 0 ? "" : " (it keeps no EMA)");
    }
    fflush(stdout);
}

int ig_cmd_eval(const ig_command *cmd, int argc, char **argv) {
    eval_args a = {0};
    ig_data_config dc;
    memset(&dc, 0, sizeof dc);
    /* the data keys without data.path (--data is this command's) */
    ig_cmd_table tables[] = {{ig_cmd_common_keys, ig_cmd_n_common_keys, &a.flags},
                             {eval_keys, sizeof eval_keys / sizeof eval_keys[0], &a},
                             {ig_data_keys + 1, ig_data_n_keys - 1, &dc}};
    ig_cmd_spec spec = {tables, 3, NULL, 0, 0};
    ig_config *cfg = NULL;
    int first = 0;
    int rc = ig_cmd_parse(cmd, argc, argv, &spec, &cfg, &first);
    if (rc < 0 && argc - first != 1) rc = ig_cmd_usage_error(cmd, "expected one MODEL");
    if (rc < 0 && a.n_data == 0) rc = ig_cmd_usage_error(cmd, "--data PREFIX is required");
    if (rc < 0 && a.seq_len == 0 && ig_config_is_set(cfg, "eval.seq_len"))
        rc = ig_cmd_usage_error(cmd, "--seq-len 0: must be in [1, the model's positions] (leave "
                                     "it out for the model's positions)");
    if (rc >= 0) {
        ig_config_free(cfg);
        return rc;
    }
    dc.path = a.data;
    dc.n_path = a.n_data;
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_backend_opts bo = ig_backend_opts_default();
    ig_eval_opts eo = {.data = &dc,
                       .micro_batch = a.micro_batch,
                       .batches = a.batches,
                       .seq_len = a.seq_len,
                       .timesteps = a.timesteps,
                       .noise_file = a.noise,
                       .caption_features = a.features,
                       .weights = (ig_weights)a.weights};
    ig_eval_result *res = calloc(1, sizeof *res);
    ig_status st =
        res ? ig_cmd_ctx(&ctx, &a.flags, &err) : ig_err_set(&err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) st = ig_backend_create(&be, ctx, &bo, &err);
    if (st == IG_OK && !a.flags.quiet) print_weights(ctx, argv[first], (ig_weights)a.weights);
    if (st == IG_OK) st = ig_model_evaluate(ctx, be, argv[first], &eo, res, &err);
    if (st == IG_OK) {
        if (!a.flags.quiet) printf("%s\n", res->what);
        for (size_t k = 0; k < res->n_lines; k++) printf("%s\n", res->lines[k]);
        printf("loss %.6f\n", res->loss);
    }
    rc = st == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    free(res);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    ig_config_free(cfg);
    return rc;
}
