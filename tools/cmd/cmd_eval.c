/* cmd_eval.c - `ingot eval MODEL --data PREFIX --seq-len L --batches K [--micro-batch B]`: the mean
 * loss of a model (a checkpoint, a Hugging Face export directory, or a model.safetensors) over K
 * micro-batches of a token shard's samples, from the start of the stream; of a diffusion model,
 * over clip shards at a grid of times (or with a noise file's noise and times). Thin over
 * ig_model_open, ig_model_eval and ig_model_eval_clips. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "train/train.h"

const char ig_usage_eval[] =
    "usage: ingot eval MODEL --data PREFIX --seq-len L --batches K [--micro-batch B]\n"
    "       ingot eval DIT_MODEL --data CLIPS [--batches K] [--micro-batch B] [--timesteps N]\n"
    "                  [--seed S] [--noise FILE.safetensors] [--weights ema|raw]\n"
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
    "A diffusion model (model.arch dit) is evaluated on clip shards (ingot preprocess video):\n"
    "K micro-batches of B clips (a bucket's batch with buckets) from the first clip on, each\n"
    "at the times (k + 0.5) / N, k < N, with noise keyed by --seed (the trainer's data.seed:\n"
    "the trainer's validation loss, with --weights raw); one line per time, then 'loss X'.\n"
    "  --timesteps N      the grid's times (default 5)\n"
    "  --noise FILE       evaluate clips 0 .. N-1 (ingot inspect --clip's numbers) with the\n"
    "                     file's noise F32 [N, F, H, W, 3] and times t F32 [N] instead, as a\n"
    "                     PyTorch implementation of the same weights would\n"
    "  --weights W        a checkpoint's weights: ema (its EMA, the default when it holds one)\n"
    "                     or raw\n"
    "\n"
    "examples:\n"
    "  ingot eval out/gpt-tiny --data out/quickstart/shakespeare --seq-len 128 --batches 16\n"
    "  ingot eval out/gpt-tiny-hf --data out/shakespeare --batches 4 --micro-batch 8\n"
    "  ingot eval out/dit-tiny --data out/quickstart-video/clips --batches 4 --weights raw\n";

typedef struct eval_args {
    const char *const *data;
    size_t n_data;
    int seq_len, batches, micro_batch, timesteps, weights;
    const char *noise;
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
                  "a diffusion model: a safetensors file of noise [N, F, H, W, 3] and t [N]"),
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

/* A diffusion model's loss on clip shards. */
static ig_status eval_clips(ig_ctx *ctx, ig_backend *be, const char *path, const eval_args *a,
                            uint64_t seed, ig_err *err) {
    ig_model_config shape;
    ig_model *m = NULL;
    ig_status st = ig_model_read_shape(ctx, path, &shape, err);
    /* room for the largest micro-batch and clip of the shards */
    int B = a->micro_batch, T = 1;
    ig_clip_dataset *ds = NULL;
    if (st == IG_OK) st = ig_clip_dataset_open(&ds, ctx, a->data, a->n_data, err);
    size_t nb = 0;
    const ig_clip_bucket *bk = ds ? ig_clip_dataset_buckets(ds, &nb) : NULL;
    for (uint64_t g = 0; st == IG_OK && g < ig_clip_dataset_clips(ds); g++) {
        ig_clip_info c = ig_clip_dataset_info(ds, g, NULL, NULL);
        int tok = 0;
        if (c.bucket != IG_CLIP_NONE && c.bucket < nb && (int)bk[c.bucket].batch_size > B)
            B = (int)bk[c.bucket].batch_size;
        st = ig_model_clip_tokens(&shape, (int)c.frames, (int)c.height, (int)c.width, &tok, err);
        if (st != IG_OK) ig_err_prefix(err, st, "clip %llu", (unsigned long long)g);
        if (tok > T) T = tok;
    }
    ig_clip_dataset_close(ds);
    if (st == IG_OK)
        st = ig_model_open_weights(&m, ctx, be, path, B, T, (ig_weights)a->weights, NULL, err);
    if (st == IG_OK && (st = ig_model_check_finite(m, err)) != IG_OK)
        ig_err_prefix(err, st, "%s: its weights are not finite", path);
    ig_clip_eval_opts o = {.prefixes = a->data,
                           .n = a->n_data,
                           .micro_batch = a->micro_batch,
                           .batches = a->batches,
                           .timesteps = a->timesteps,
                           .seed = seed,
                           .noise_file = a->noise};
    ig_clip_eval_result *r = st == IG_OK ? calloc(1, sizeof *r) : NULL;
    if (st == IG_OK && !r) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    if (st == IG_OK) st = ig_model_eval_clips(m, ctx, &o, r, err);
    if (st == IG_OK) {
        if (!a->flags.quiet && r->n_times)
            printf("%llu clips, each at %d times\n", (unsigned long long)r->clips, r->n_times);
        else if (!a->flags.quiet)
            printf("%llu clips with the noise and times of %s\n", (unsigned long long)r->clips,
                   a->noise);
        for (int k = 0; k < r->n_times; k++)
            printf("t %.4f loss %.6f\n", (k + 0.5) / r->n_times, r->loss_at[k]);
        printf("loss %.6f\n", r->loss);
    }
    free(r);
    ig_model_free(m);
    return st;
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
    ig_model *m = NULL;
    ig_data_resolved dr = {0};
    double loss = 0;
    int32_t eod = -1;
    ig_backend_opts bo = ig_backend_opts_default();
    ig_status st = ig_cmd_ctx(&ctx, &a.flags, &err);
    if (st == IG_OK) st = ig_backend_create(&be, ctx, &bo, &err);
    ig_model_config shape = {0};
    if (st == IG_OK) st = ig_model_read_shape(ctx, argv[first], &shape, &err);
    if (st == IG_OK && !a.flags.quiet) print_weights(ctx, argv[first], (ig_weights)a.weights);
    if (st == IG_OK && ig_model_reads_clips(&shape)) {
        st = eval_clips(ctx, be, argv[first], &a, dc.seed, &err);
        goto done;
    }
    if (st == IG_OK && (*a.noise || a.weights == IG_WEIGHTS_EMA))
        st = ig_err_set(&err, IG_ERR_INVALID_ARG,
                        "--noise and --weights ema are for a diffusion model's clips");
    if (st == IG_OK)
        st = ig_model_open_weights(&m, ctx, be, argv[first], a.micro_batch, a.seq_len,
                                   (ig_weights)a.weights, &eod, &err);
    if (st == IG_OK && (st = ig_model_check_finite(m, &err)) != IG_OK)
        ig_err_prefix(&err, st, "%s: its weights are not finite", argv[first]);
    int T = m ? ig_model_shape(m)->seq_len : 0;
    if (st == IG_OK && a.seq_len > T)
        st = ig_err_set(&err, IG_ERR_INVALID_ARG,
                        "--seq-len %d is more than the model's %d "
                        "positions",
                        a.seq_len, T);
    if (st == IG_OK) {
        uint32_t L = (uint32_t)(a.seq_len ? a.seq_len : T);
        st = ig_data_config_resolve(&dc, L, (uint64_t)a.batches * (uint64_t)a.micro_batch, &dr,
                                    &err);
    }
    if (st == IG_OK) st = ig_model_eval(m, ctx, &dr.opts, a.micro_batch, a.batches, &loss, &err);
    if (st == IG_OK) {
        if (!a.flags.quiet)
            printf("%d micro-batches of %d x %u tokens\n", a.batches, a.micro_batch,
                   dr.opts.seq_len);
        printf("loss %.6f\n", loss);
    }
done:
    rc = st == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
    ig_data_resolved_free(&dr);
    ig_model_free(m);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    ig_config_free(cfg);
    return rc;
}
