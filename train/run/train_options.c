/* train_options.c - the keys of a training config (model, train, optim, eval, ckpt, log,
 * parallel; data comes from the loader module's keys, and each model family adds its own model.*
 * keys), bound to ig_train_config, the checks the keys cannot make alone, and the learning-rate
 * schedules. The key names are part of ingot's interface: configs in the wild depend on them. */
#include "train/train.h"

#include "family/family.h"
#include "parallel/parallel.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *const schedules[] = {"cosine", "linear", "constant", "wsd", NULL};
static const char *const devices[] = {"cpu", "cuda", NULL}; /* = ig_backend_kind */
static const char *const dtypes[] = {"auto", "fp32", "bf16", NULL};
static const char *const recomputes[] = {"none", "selective", "full", NULL}; /* ig_recompute */
static const char *const sp_modes[] = {"megatron", "ulysses", NULL};
static const char *const plugins[] = {"none", "ddp", "zero1", "zero2", "hybrid", NULL};
enum { PLUGIN_NONE, PLUGIN_DDP, PLUGIN_ZERO1, PLUGIN_ZERO2, PLUGIN_HYBRID };

/* The training keys take no command-line flags of their own (`--set optim.lr=3e-4`, or the config
 * file): dozens of them would crowd the flags and collide ("every", "seed"). */
#define K(p, ty, F, def, lo, hi, h)                                                                \
    {                                                                                              \
        .path = (p), .type = (ty), .default_val = (def), .help = (h), .flag = "",                  \
        .offset = offsetof(ig_train_config, F), .size = sizeof(((ig_train_config *)0)->F),         \
        .is_signed = IG_CFG_SIGNED_(ig_train_config, F), .min = (lo), .max = (hi)                  \
    }
#define KE(p, F, def, ch, h)                                                                       \
    {                                                                                              \
        .path = (p), .type = IG_CFG_ENUM, .default_val = (def), .help = (h), .flag = "",           \
        .offset = offsetof(ig_train_config, F), .size = sizeof(((ig_train_config *)0)->F),         \
        .is_signed = 1, .choices = (ch)                                                            \
    }

static const ig_cfg_key train_keys[] = {
    KE("model.arch", model.arch, "gpt2", ig_model_archs,
       "the model: gpt2 (learned positions, LayerNorm, GeLU, tied embeddings), llama (RMSNorm, "
       "rotary positions, SwiGLU, grouped-query attention) - presets of the decoder family -, "
       "dit (a video diffusion transformer over clip shards) or vae (Stable Diffusion's "
       "AutoencoderKL over the frames of clip shards)"),
    K("model.n_layer", IG_CFG_INT, model.n_layer, "12", 1, 1024, "transformer blocks"),
    K("model.n_head", IG_CFG_INT, model.n_head, "12", 1, 4096, "attention heads"),
    K("model.d_model", IG_CFG_INT, model.d_model, "768", 1, 65536, "model width (C)"),
    K("model.seq_len", IG_CFG_INT, model.seq_len, "1024", 2, 1048576,
      "tokens per sample, and the positions"),
    K("model.vocab_size", IG_CFG_INT, model.vocab_size, "0", 0, 1073741824,
      "vocabulary size; 0: from the shards' manifest"),
    K("model.norm_eps", IG_CFG_FLOAT, model.norm_eps, "0", 0, 0.1,
      "the epsilon of the LayerNorms (gpt2, dit) or RMSNorms (llama); 0: the family's (1e-5, "
      "dit's 1e-6)"),
    K("model.init_from", IG_CFG_STRING, init_from, "", 0, 0,
      "a Hugging Face model directory (config.json + model.safetensors) of model.arch's family "
      "to start from"),
    K("model.seed", IG_CFG_INT, seed, "1234", 0, 9.2e18,
      "seed of the initial weights (each tensor keyed by its name)"),
    K("train.micro_batch", IG_CFG_INT, micro_batch, "4", 1, 1048576,
      "samples per micro-batch (on each data-parallel rank)"),
    K("train.global_batch", IG_CFG_INT, global_batch, "0", 0, 1073741824,
      "samples per step over all ranks; 0: micro_batch (no accumulation)"),
    K("train.steps", IG_CFG_INT, steps, "1000", 1, 1e15, "optimizer steps"),
    K("train.run_dir", IG_CFG_STRING, run_dir, "out/run", 0, 0,
      "where checkpoints, metrics.jsonl and tb/ go"),
    KE("train.device", device, "cpu", devices,
       "the compute backend: cpu, or cuda (one GPU per process: the local rank's)"),
    KE("train.dtype", dtype, "auto", dtypes,
       "parameters, gradients and activations: bf16 (with fp32 master weights, optimizer "
       "state, norms and losses) or fp32, on either device; auto: bf16 on cuda, fp32 on cpu"),
    K("train.eod_mask_loss", IG_CFG_BOOL, eod_mask_loss, "false", 0, 0,
      "no loss on positions whose input token is end-of-document (Megatron's)"),
    K("train.doc_attention", IG_CFG_BOOL, doc_attention, "false", 0, 0,
      "attention does not cross end-of-document tokens"),
    KE("train.recompute", recompute, "none", recomputes,
       "activation recomputation: none; selective (the attention core again in the backward, the "
       "GEMM outputs kept); full (only each layer's input kept, the layer run again in the "
       "backward); the same losses and weights, less activation memory for more compute"),
    {.path = "train.memory_limit",
     .type = IG_CFG_SIZE,
     .default_val = "0",
     .help = "bytes each rank may use, e.g. 70GB; 0: its device's (a GPU's memory, or what the "
             "process may take on the CPU, shared by the node's ranks); a run whose estimate "
             "(ingot plan) needs more is refused before it allocates, naming layouts that fit",
     .flag = "",
     .offset = offsetof(ig_train_config, memory_limit),
     .size = sizeof(((ig_train_config *)0)->memory_limit)},
    K("optim.lr", IG_CFG_FLOAT, lr, "6e-4", 0, 10, "peak learning rate"),
    K("optim.min_lr", IG_CFG_FLOAT, min_lr, "6e-5", 0, 10, "the learning rate the decay ends at"),
    K("optim.warmup", IG_CFG_INT, warmup, "0", 0, 1e15, "steps of linear warmup from 0 to lr"),
    KE("optim.schedule", schedule, "cosine", schedules,
       "after warmup: cosine or linear decay to min_lr, constant, or wsd (constant, "
       "then a linear decay over the last decay_fraction of the steps)"),
    K("optim.decay_fraction", IG_CFG_FLOAT, decay_fraction, "0.2", 0, 1,
      "wsd: the final fraction of the steps that decays"),
    K("optim.beta1", IG_CFG_FLOAT, beta1, "0.9", 0, 1, "AdamW beta1, in [0, 1)"),
    K("optim.beta2", IG_CFG_FLOAT, beta2, "0.95", 0, 1, "AdamW beta2, in [0, 1)"),
    K("optim.eps", IG_CFG_FLOAT, eps, "1e-8", 0, 1, "AdamW epsilon, > 0"),
    K("optim.weight_decay", IG_CFG_FLOAT, weight_decay, "0.1", 0, 10,
      "decoupled weight decay on matrices and embeddings (not biases, LayerNorm)"),
    K("optim.grad_clip", IG_CFG_FLOAT, grad_clip, "1.0", 0, 1e30,
      "clip the global gradient norm to this; 0: no clipping"),
    K("ema.decay", IG_CFG_FLOAT, ema_decay, "-1", -1, 1,
      "an exponential moving average of the weights, ema = decay ema + (1 - decay) w after every "
      "step (kept with ZeRO's partitions; in checkpoints; what sample and ckpt export take); "
      "in [0, 1); 0: none; -1: the family's (0.9999 for dit, none for gpt2 and llama)"),
    K("eval.every", IG_CFG_INT, eval_every, "0", 0, 1e15,
      "validate every this many steps (and at the end); 0: never"),
    K("eval.batches", IG_CFG_INT, eval_batches, "8", 1, 1e15,
      "micro-batches of the validation split per evaluation"),
    K("ckpt.every", IG_CFG_INT, ckpt_every, "0", 0, 1e15,
      "checkpoint every this many steps (and at the end); 0: only at the end"),
    K("ckpt.keep", IG_CFG_INT, ckpt_keep, "2", 1, 1e15, "checkpoints kept"),
    K("log.every", IG_CFG_INT, log_every, "1", 1, 1e15, "print a step line every this many steps"),
    K("log.tensorboard", IG_CFG_BOOL, tensorboard, "false", 0, 0,
      "also write TensorBoard event files under RUN_DIR/tb/"),
    {.path = "log.comm_stats",
     .type = IG_CFG_BOOL,
     .default_val = "false",
     .help = "add the bytes each rank sent per group (tp, pp, dp, emb) to every step line and to "
             "metrics.jsonl",
     .flag = "comm-stats",
     .offset = offsetof(ig_train_config, comm_stats),
     .size = sizeof(((ig_train_config *)0)->comm_stats),
     .is_signed = 1},
    {.path = "log.memory_stats",
     .type = IG_CFG_BOOL,
     .default_val = "false",
     .help = "add every rank's estimated memory and the peak its backend held to each step's "
             "line of metrics.jsonl",
     .flag = "memory-stats",
     .offset = offsetof(ig_train_config, memory_stats),
     .size = sizeof(((ig_train_config *)0)->memory_stats),
     .is_signed = 1},
    K("parallel.tp", IG_CFG_INT, tp, "1", 1, 4096,
      "tensor-parallel ranks (heads, MLP columns and the vocabulary split between them)"),
    K("parallel.pp", IG_CFG_INT, pp, "1", 1, 4096, "pipeline stages (layers split between them)"),
    K("parallel.dp", IG_CFG_INT, dp, "0", 0, 1048576,
      "data-parallel replicas; 0: processes / (tp x pp), and a value given must equal that"),
    K("parallel.sp", IG_CFG_BOOL, sp, "false", 0, 0,
      "sequence parallelism: LayerNorms and residuals sharded along the tokens over the tp ranks"),
    KE("parallel.sp_mode", sp_mode, "megatron", sp_modes,
       "sequence parallelism: megatron (parallel.sp: the tp ranks shard the norms and residuals) "
       "or ulysses (parallel.sp_size ranks hold a sequence's shards; all-to-alls to head shards "
       "around attention; dit)"),
    K("parallel.sp_size", IG_CFG_INT, sp_size, "1", 1, 4096,
      "ulysses: the ranks one sequence is cut among (heads divisible by tp x sp_size)"),
    K("parallel.zero", IG_CFG_INT, zero, "0", 0, 3,
      "ZeRO stage: 1 shards the optimizer state over the dp ranks (the AdamW moments and the fp32 "
      "master weights), 2 the gradients too, 3 the parameters too (each layer all-gathered "
      "before its forward and its backward; FSDP's full sharding)"),
    K("parallel.prefetch", IG_CFG_BOOL, prefetch, "true", 0, 0,
      "ZeRO-3: all-gather the next layer's parameters while this one computes"),
    {.path = "parallel.pipeline_layers",
     .type = IG_CFG_LIST,
     .default_val = "",
     .help = "layers of each pipeline stage, e.g. [3, 5, 5, 3]; empty: n_layer / pp each",
     .flag = "",
     .offset = offsetof(ig_train_config, pipeline_layers),
     .size = sizeof(((ig_train_config *)0)->pipeline_layers),
     .count_offset = offsetof(ig_train_config, n_pipeline_layers)},
    {.path = "parallel.bucket_size",
     .type = IG_CFG_SIZE,
     .default_val = "25MB",
     .help = "data-parallel gradients are reduced in buckets of about this size, each started "
             "as soon as backward has finished it",
     .flag = "",
     .offset = offsetof(ig_train_config, bucket_bytes),
     .size = sizeof(((ig_train_config *)0)->bucket_bytes)},
    K("parallel.timeout", IG_CFG_FLOAT, timeout, "300", 1, 1e9,
      "seconds a rank may wait for another (a dead or hung rank) before every rank stops"),
    KE("plugin", plugin, "none", plugins,
       "Open-Sora's / OpenDiT's layout spelling (ColossalAI's booster plugins): ddp, zero1, "
       "zero2 (parallel.zero 0, 1, 2), or hybrid with plugin_config; another spelling of "
       "parallel.*"),
    K("plugin_config.tp_size", IG_CFG_INT, pc_tp, "1", 1, 4096, "plugin hybrid: parallel.tp"),
    K("plugin_config.pp_size", IG_CFG_INT, pc_pp, "1", 1, 4096, "plugin hybrid: parallel.pp"),
    K("plugin_config.sp_size", IG_CFG_INT, pc_sp, "1", 1, 4096,
      "plugin hybrid: parallel.sp_size with parallel.sp_mode ulysses (the all-to-all sequence "
      "parallelism)"),
    K("plugin_config.zero_stage", IG_CFG_INT, pc_zero, "0", 0, 2, "plugin hybrid: parallel.zero"),
};

size_t ig_train_key_tables(const ig_cfg_key **tables, size_t *counts, int *binds, size_t cap) {
    size_t n = 0;
    const ig_cfg_key *seen[32];
    size_t n_seen = 0;
#define ADD(k, c, b)                                                                               \
    do {                                                                                           \
        int dup = 0;                                                                               \
        for (size_t s_ = 0; s_ < n_seen; s_++) dup |= seen[s_] == (k);                             \
        if ((c) == 0 || dup) break;                                                                \
        if (n_seen < 32) seen[n_seen++] = (k);                                                     \
        if (n < cap) tables[n] = (k), counts[n] = (c), binds[n] = (b);                             \
        n++;                                                                                       \
    } while (0)
    ADD(train_keys, sizeof train_keys / sizeof train_keys[0], 1);
    for (int a = 0; ig_family_of(a); a++) {
        const ig_family *f = ig_family_of(a);
        ADD(f->keys, f->n_keys, 0);
        ADD(f->objective->keys, f->objective->n_keys, 1);
    }
#undef ADD
    return n;
}

/* "FILE:LINE: key" or "key" when the value is a default or cfg is unknown. */
static void where(const ig_config *cfg, const char *key, char *buf, size_t cap) {
    const char *o = cfg ? ig_config_origin(cfg, key) : "default";
    if (strcmp(o, "default") == 0)
        snprintf(buf, cap, "%s", key);
    else
        snprintf(buf, cap, "%s: %s", o, key);
}

/* Whether table (n keys) has a key of this path. */
static int has_key(const ig_cfg_key *table, size_t n, const char *path) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(table[i].path, path)) return 1;
    return 0;
}

/* A key of another family (or of its objective) than model.arch's, set in the configuration, is
 * refused: it would be silently ignored. */
static ig_status foreign_keys(const ig_train_config *t, const ig_config *cfg, ig_err *err) {
    const ig_family *mine = ig_family_of(t->model.arch);
    for (int a = 0; cfg && mine && ig_family_of(a); a++) {
        const ig_family *f = ig_family_of(a);
        const ig_cfg_key *tabs[2] = {f->keys, f->objective->keys};
        size_t ns[2] = {f->n_keys, f->objective->n_keys};
        for (int k = 0; f != mine && k < 2; k++)
            for (size_t i = 0; i < ns[k]; i++) {
                const char *path = tabs[k][i].path;
                if (has_key(mine->keys, mine->n_keys, path) ||
                    has_key(mine->objective->keys, mine->objective->n_keys, path) ||
                    !ig_config_is_set(cfg, path))
                    continue;
                char w[600];
                where(cfg, path, w, sizeof w);
                return ig_err_set(err, IG_ERR_CONFIG,
                                  "%s is a key of model.arch %s, and this configuration's "
                                  "model.arch is %s: remove it, or set model.arch: %s",
                                  w, f->arch, mine->arch, f->arch);
            }
    }
    return IG_OK;
}

/* A family's list key whose default has values (model.patch) given as an empty list would
 * quietly mean the default: refused, with the values it takes. */
static ig_status empty_lists(const ig_train_config *t, const ig_config *cfg, ig_err *err) {
    const ig_family *mine = ig_family_of(t->model.arch);
    for (size_t i = 0; cfg && mine && i < mine->n_keys; i++) {
        const ig_cfg_key *k = &mine->keys[i];
        size_t n = 0;
        if (k->type != IG_CFG_LIST || !k->default_val || !*k->default_val ||
            !ig_config_is_set(cfg, k->path))
            continue;
        ig_config_list(cfg, k->path, &n);
        if (n) continue;
        char w[600];
        where(cfg, k->path, w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s: an empty list: give its values, e.g. [%s] (the default; %s)", w,
                          k->default_val, k->help);
    }
    return IG_OK;
}

/* An alias's value into the field of key, refused when key was set to something else. */
static ig_status alias(const ig_config *cfg, const char *from, const char *key, int *field,
                       int value, ig_err *err) {
    if (*field == value) return IG_OK;
    if (cfg && ig_config_is_set(cfg, key)) {
        char a[600], b[600];
        where(cfg, from, a, sizeof a);
        where(cfg, key, b, sizeof b);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s says %s %d, and %s is %d: give the layout in one spelling (plugin "
                          "and plugin_config are Open-Sora's for parallel.*)",
                          a, key, value, b, *field);
    }
    *field = value;
    return IG_OK;
}

ig_status ig_train_config_resolve(ig_train_config *t, const ig_config *cfg, ig_err *err) {
    /* model.arch's own keys, into its own part of the shape */
    const ig_family *f = ig_family_of(t->model.arch);
    if (cfg && f && f->n_keys) {
        memset(t->model.own, 0, sizeof t->model.own);
        ig_status bs = ig_config_bind(cfg, f->keys, f->n_keys, t->model.own, err);
        if (bs != IG_OK) return bs;
    }
    ig_status fs = foreign_keys(t, cfg, err);
    if (fs != IG_OK) return fs;
    int p = t->plugin;
    int pc_set = cfg && (ig_config_is_set(cfg, "plugin_config.tp_size") ||
                         ig_config_is_set(cfg, "plugin_config.pp_size") ||
                         ig_config_is_set(cfg, "plugin_config.sp_size") ||
                         ig_config_is_set(cfg, "plugin_config.zero_stage"));
    if (pc_set && p != PLUGIN_HYBRID) {
        char w[600];
        where(cfg, "plugin", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "plugin_config applies to plugin: hybrid (%s is %s): the zero plugins "
                          "take no sizes",
                          w, plugins[p]);
    }
    ig_status st = IG_OK;
    if (p == PLUGIN_DDP || p == PLUGIN_ZERO1 || p == PLUGIN_ZERO2)
        st = alias(cfg, "plugin", "parallel.zero", &t->zero, p - PLUGIN_DDP, err);
    if (p != PLUGIN_HYBRID) return st;
    if (st == IG_OK) st = alias(cfg, "plugin_config.tp_size", "parallel.tp", &t->tp, t->pc_tp, err);
    if (st == IG_OK) st = alias(cfg, "plugin_config.pp_size", "parallel.pp", &t->pp, t->pc_pp, err);
    if (st == IG_OK)
        st = alias(cfg, "plugin_config.zero_stage", "parallel.zero", &t->zero, t->pc_zero, err);
    if (st == IG_OK && t->pc_sp > 1) {
        st = alias(cfg, "plugin_config.sp_size", "parallel.sp_size", &t->sp_size, t->pc_sp, err);
        if (st == IG_OK)
            st = alias(cfg, "plugin_config.sp_size", "parallel.sp_mode", &t->sp_mode, 1, err);
    }
    return st;
}

ig_status ig_train_config_check(const ig_train_config *t, const ig_config *cfg, ig_err *err) {
    char w[600];
    if (!ig_family_of(t->model.arch))
        return ig_err_set(err, IG_ERR_CONFIG, "model.arch %d is not a known family", t->model.arch);
    /* a family used frozen (a text encoder): its objective has nothing to train */
    const ig_family *fam = ig_family_of(t->model.arch);
    if (!fam->objective->stage) {
        where(cfg, "model.arch", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG, "%s: %s is used frozen (%s): ingot does not train it",
                          w, fam->arch, fam->what);
    }
    ig_status st = foreign_keys(t, cfg, err);
    if (st != IG_OK) return st;
    if (t->model.n_head < 1 || t->model.d_model % t->model.n_head) {
        where(cfg, "model.n_head", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s: %d heads do not divide model.d_model %d (each head gets d_model / "
                          "n_head channels)",
                          w, t->model.n_head, t->model.d_model);
    }
    const struct {
        const char *key;
        double v;
    } unit[] = {{"optim.beta1", t->beta1}, {"optim.beta2", t->beta2}};
    for (size_t i = 0; i < 2; i++)
        if (!(unit[i].v >= 0 && unit[i].v < 1)) {
            where(cfg, unit[i].key, w, sizeof w);
            return ig_err_set(err, IG_ERR_CONFIG,
                              "%s: %g: must be in [0, 1) (at 1 AdamW's bias correction divides by "
                              "0 and the weights turn NaN)",
                              w, unit[i].v);
        }
    /* -1 exactly is the family's default; another negative value is not a decay */
    if (!(t->ema_decay == -1 || (t->ema_decay >= 0 && t->ema_decay < 1))) {
        where(cfg, "ema.decay", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s: %g: must be in [0, 1) (0: no EMA), or -1 for the family's default",
                          w, t->ema_decay);
    }
    if ((st = empty_lists(t, cfg, err)) != IG_OK) return st;
    if (!(t->eps > 0)) {
        where(cfg, "optim.eps", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s: %g: must be > 0 (AdamW divides by sqrt(v) + eps, and v can be 0)", w,
                          t->eps);
    }
    int gb = t->global_batch ? t->global_batch : t->micro_batch;
    if (gb % t->micro_batch) {
        where(cfg, "train.global_batch", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s: %d is not a multiple of train.micro_batch %d (a step is a whole "
                          "number of micro-batches)",
                          w, gb, t->micro_batch);
    }
    if (t->min_lr > t->lr && t->schedule != IG_LR_CONSTANT) {
        where(cfg, "optim.min_lr", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG, "%s: %g is above optim.lr %g", w, t->min_lr, t->lr);
    }
    if (t->warmup > t->steps) {
        where(cfg, "optim.warmup", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG, "%s: %lld warmup steps, but train.steps is %lld", w,
                          (long long)t->warmup, (long long)t->steps);
    }
    if (!t->run_dir || !*t->run_dir) {
        where(cfg, "train.run_dir", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG, "%s: a run directory is needed", w);
    }
    if (t->data.n_path == 0) {
        where(cfg, "data.path", w, sizeof w);
        return ig_err_set(err, IG_ERR_CONFIG,
                          "%s: no data: give a shard prefix, or weights and prefixes "
                          "[W1, P1, W2, P2, ...]",
                          w);
    }
    return IG_OK;
}

ig_status ig_train_config_validate(ig_ctx *ctx, const ig_train_config *cfg_t, const ig_config *cfg,
                                   int *world, ig_err *err) {
    ig_train_config t = *cfg_t;
    ig_status st = ig_train_config_resolve(&t, cfg, err);
    if (st == IG_OK) st = ig_train_config_check(&t, cfg, err);
    if (st != IG_OK) return st;
    /* the model's shape, as the trainer checks it once the data has given what it gives: a
     * vocabulary (0 in the config: the shards') and a clip's tokens (dit: the clips') */
    ig_model_config shape = t.model;
    if (shape.vocab_size == 0 && !strcmp(ig_model_io_of(&shape).input, "tokens"))
        shape.vocab_size = 128;
    if ((st = ig_model_config_check(&shape, err)) != IG_OK) return st;
    int clip = 0, F = 0, H = 0, W = 0, tokens = 0;
    if ((st = ig_train_config_clip(&t, &clip, &F, &H, &W, err)) != IG_OK) return st;
    if (clip && (st = ig_model_clip_tokens(&shape, F, H, W, &tokens, err)) != IG_OK)
        return ig_err_prefix(err, st, "model.clip");
    /* the layout over the fewest processes it can run on (tp x pp x sp_size, times dp when
     * given), with ig_layout_create's checks and messages */
    int usp = t.sp_mode == 1 && t.sp_size > 1 ? t.sp_size : 1;
    int64_t n =
        (int64_t)(t.tp > 0 ? t.tp : 1) * (t.pp > 0 ? t.pp : 1) * usp * (t.dp > 0 ? t.dp : 1);
    if (n > INT32_MAX)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "parallel.tp %d x parallel.pp %d x parallel.sp_size %d x parallel.dp %d "
                          "is past 2^31 processes",
                          t.tp, t.pp, usp, t.dp);
    ig_layout lo = {.ctx = ctx, .world = (int)n};
    st = ig_layout_check(&lo, &t, &shape, err);
    ig_layout_free(&lo);
    if (world) *world = (int)n;
    return st;
}

ig_status ig_train_config_clip(const ig_train_config *t, int *given, int *F, int *H, int *W,
                               ig_err *err) {
    *given = 0;
    if (t->n_clip_list == 0) return IG_OK;
    int v[3] = {0, 0, 0};
    for (size_t k = 0; k < 3 && k < t->n_clip_list; k++) {
        char *end = NULL;
        long x = strtol(t->clip_list[k], &end, 10);
        if (!end || end == t->clip_list[k] || *end || x < 1 || x > 65536)
            return ig_err_set(err, IG_ERR_CONFIG,
                              "model.clip: \"%s\" is not a whole number in [1, 65536]",
                              t->clip_list[k]);
        v[k] = (int)x;
    }
    if (t->n_clip_list != 3)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.clip: %zu values; give three, [frames, height, width]",
                          t->n_clip_list);
    *given = 1, *F = v[0], *H = v[1], *W = v[2];
    return IG_OK;
}

double ig_train_lr(const ig_train_config *t, int64_t step) {
    double lr = t->lr, lo = t->min_lr;
    if (step < t->warmup) return lr * (double)(step + 1) / (double)t->warmup;
    int64_t decay_steps = t->steps - t->warmup;
    double p = decay_steps > 0 ? (double)(step - t->warmup) / (double)decay_steps : 1.0;
    if (p > 1) p = 1;
    switch ((ig_lr_schedule)t->schedule) {
    case IG_LR_CONSTANT:
        return lr;
    case IG_LR_LINEAR:
        return lr + (lo - lr) * p;
    case IG_LR_WSD: {
        int64_t decay = (int64_t)ceil(t->decay_fraction * (double)t->steps);
        int64_t start = t->steps - decay;
        if (step < start || decay <= 0) return lr;
        return lr + (lo - lr) * (double)(step - start + 1) / (double)decay;
    }
    case IG_LR_COSINE:
    default:
        return lo + 0.5 * (lr - lo) * (1.0 + cos(3.14159265358979323846 * p));
    }
}
