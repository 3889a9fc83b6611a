/* train.h - the public API of ingot's trainer: GPT-2 models over a compute backend
 * (kernels/backend.h), their configuration, the training loop on the distributed loader, AdamW,
 * learning-rate schedules, checkpoints that resume bit for bit, Hugging Face export and import,
 * evaluation and sampling.
 *
 * A model is a list of named global tensors (Hugging Face GPT-2 names); every tensor's initial
 * values are drawn by (seed, name, element index) with a counter-based generator, so every
 * layout and every backend starts from the same model. Parameters, gradients and the optimizer's
 * moments each live in one backend allocation, with per-tensor views.
 */
#ifndef INGOT_TRAIN_H
#define INGOT_TRAIN_H

#include "comm/comm.h"
#include "core/core.h"
#include "kernels/backend.h"
#include "loader/loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== configuration ========================================================================== */

/* GPT-2's shape. */
typedef struct ig_gpt_config {
    int n_layer, n_head, d_model;
    int seq_len;      /* the longest sequence: the number of learned positions */
    int vocab_size;   /* ids 0 .. vocab_size - 1 */
    int padded_vocab; /* vocab_size rounded up to a multiple of 128 (rows of wte) */
} ig_gpt_config;

/* Checks the shape (every field positive, heads dividing d_model, ...) and fills padded_vocab;
 * errors name the field. */
ig_status ig_gpt_config_check(ig_gpt_config *c, ig_err *err);
/* Parameters of the model (the padded vocabulary rows included). */
uint64_t ig_gpt_num_params(const ig_gpt_config *c);
/* Forward FLOPs per token (matmuls and attention, as PaLM's 6N + 12 L T C accounting counts them:
 * a training step costs 3x). */
double ig_gpt_flops_per_token(const ig_gpt_config *c, int T);

typedef enum ig_lr_schedule {
    IG_LR_COSINE = 0,
    IG_LR_LINEAR,
    IG_LR_CONSTANT,
    IG_LR_WSD /* warmup, stable, then a linear decay over the last optim.decay_fraction */
} ig_lr_schedule;

/* Everything a run is: the keys of a training config (ig_train_keys: model, data, train, optim,
 * eval, ckpt, log), bound into this struct. Strings point into the ig_config they came from. */
typedef struct ig_train_config {
    /* model */
    int n_layer, n_head, d_model, seq_len;
    int vocab_size;        /* 0: from the shards' manifest */
    const char *init_from; /* "": random init; else a Hugging Face GPT-2 model.safetensors */
    uint64_t seed;         /* initial weights */
    /* data (the loader module's keys) */
    ig_data_config data;
    /* train */
    int micro_batch;
    int global_batch; /* samples per step over all data-parallel ranks */
    int64_t steps;
    const char *run_dir;
    int device;        /* 0: cpu, 1: cuda (ig_backend_kind) */
    int dtype;         /* 0: auto (bf16 on cuda, fp32 on cpu), 1: fp32, 2: bf16 */
    int eod_mask_loss; /* no loss where the input token is end-of-document (as Megatron) */
    int doc_attention; /* attention does not cross end-of-document tokens */
    /* optim */
    double lr, min_lr;
    int64_t warmup;
    int schedule; /* ig_lr_schedule */
    double decay_fraction;
    double beta1, beta2, eps, weight_decay, grad_clip;
    /* eval */
    int64_t eval_every, eval_batches;
    /* ckpt */
    int64_t ckpt_every, ckpt_keep;
    /* log */
    int64_t log_every;
    int tensorboard;
    int comm_stats; /* bytes sent per group in each step line */
    /* parallel (the processes come from the launcher: world = tp x pp x dp) */
    int tp, pp, dp;               /* dp 0: world / (tp x pp) */
    int sp;                       /* sequence parallelism inside the tensor-parallel group */
    int zero;                     /* 0, 1 (optimizer state sharded over dp) or 2 (gradients too) */
    const char **pipeline_layers; /* layers per stage ([] : n_layer / pp each) */
    size_t n_pipeline_layers;
    uint64_t bucket_bytes; /* gradients are reduced in buckets of about this size */
    double timeout;        /* seconds without progress before every rank gives up */
} ig_train_config;

extern const ig_cfg_key ig_train_keys[];
extern const size_t ig_train_n_keys;

/* Checks what the keys cannot check alone (heads dividing d_model, global_batch a multiple of
 * micro_batch, min_lr <= lr, a schedule's warmup within the steps, ...); errors name the key and,
 * through cfg, where its value came from (file:line). cfg may be NULL. */
ig_status ig_train_config_check(const ig_train_config *t, const ig_config *cfg, ig_err *err);

/* The learning rate at step (0-based) of a run of t->steps steps. */
double ig_train_lr(const ig_train_config *t, int64_t step);

/* ==== the model ============================================================================== */

typedef struct ig_gpt ig_gpt;

/* A model on a backend: parameters (initialised from (seed, name, index)), gradients, AdamW
 * moments, and activations for micro-batches of B x T (T <= seq_len). */
ig_status ig_gpt_create(ig_gpt **out, ig_ctx *ctx, ig_backend *be, const ig_gpt_config *c, int B,
                        int T, uint64_t seed, ig_err *err);
void ig_gpt_free(ig_gpt *m); /* NULL is a no-op */

const ig_gpt_config *ig_gpt_shape(const ig_gpt *m);

/* The parameters as named tensors (Hugging Face names, e.g. "transformer.h.0.attn.c_attn.weight",
 * shapes as Hugging Face stores them; wte is [padded_vocab, C]). */
typedef struct ig_gpt_tensor {
    const char *name;
    int ndim;
    int64_t shape[2]; /* the part this model holds */
    uint64_t offset;  /* in elements, in the parameter (and gradient, moment) buffers */
    uint64_t numel;
    int decay; /* AdamW weight decay applies (matrices and embeddings, not biases or LayerNorm) */
    /* Where the part sits in the global tensor (tensor parallelism): split_dim is the dimension
     * tensor parallelism cuts (-1: none, the tensor is replicated), into `blocks` equal blocks (3
     * for c_attn's q, k, v; else 1) and each block into `parts` equal slices (1 on one rank), of
     * which this part holds slice `part` of every block. */
    int64_t global_shape[2];
    int split_dim, blocks, part, parts;
    /* a replicated tensor whose gradient each tensor-parallel rank holds a share of (the
     * LayerNorms under sequence parallelism): summed over the group before the optimizer */
    int tp_partial;
} ig_gpt_tensor;

size_t ig_gpt_num_tensors(const ig_gpt *m);
const ig_gpt_tensor *ig_gpt_tensor_at(const ig_gpt *m, size_t i);
const ig_gpt_tensor *ig_gpt_tensor_find(const ig_gpt *m, const char *name);

/* Host copies of the parameters, gradients or moments (fp32, every tensor back to back in the
 * order of the table: ig_gpt_num_params elements). */
typedef enum ig_gpt_buffer {
    IG_GPT_PARAMS = 0,
    IG_GPT_GRADS,
    IG_GPT_ADAM_M,
    IG_GPT_ADAM_V
} ig_gpt_buffer;
ig_status ig_gpt_read(ig_gpt *m, ig_gpt_buffer which, float *out, ig_err *err);
ig_status ig_gpt_write(ig_gpt *m, ig_gpt_buffer which, const float *in, ig_err *err);

/* One micro-batch: tokens [B, T + 1] in host memory (inputs are [:, :T], targets [:, 1:]).
 * Forward computes the mean loss over the counted positions (all, or with eod_mask_loss those
 * whose input is not eod_id); with backward (grad_scale > 0), the gradient of grad_scale * loss
 * is added to the gradients. doc_attention: attention stays within documents ended by eod_id.
 * Returns the loss in *loss; *counted receives the positions counted. */
typedef struct ig_gpt_batch_opts {
    int eod_mask_loss;
    int doc_attention;
    int32_t eod_id; /* -1: none */
} ig_gpt_batch_opts;

ig_status ig_gpt_forward(ig_gpt *m, const int32_t *tokens, int B, int T, const ig_gpt_batch_opts *o,
                         double *loss, uint64_t *counted, ig_err *err);
/* forward + backward of the loss scaled by grad_scale (e.g. 1 / micro-batches per step). */
ig_status ig_gpt_forward_backward(ig_gpt *m, const int32_t *tokens, int B, int T,
                                  const ig_gpt_batch_opts *o, float grad_scale, double *loss,
                                  uint64_t *counted, ig_err *err);
ig_status ig_gpt_zero_grads(ig_gpt *m, ig_err *err);
/* The global gradient norm (sqrt of the sum of squares over every gradient). */
ig_status ig_gpt_grad_norm(ig_gpt *m, double *norm, ig_err *err);
/* One AdamW step (t = step >= 1) at lr, gradients scaled by grad_scale (clipping); weight decay
 * on the tensors marked decay. */
ig_status ig_gpt_adamw(ig_gpt *m, int step, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_scale, ig_err *err);

/* ==== training ============================================================================== */

typedef struct ig_train_opts {
    const ig_train_config *cfg; /* bound from config */
    const ig_config *config;    /* the configuration (recorded in checkpoints; names origins) */
    int resume;                 /* continue from the latest checkpoint in cfg->run_dir */
    int overwrite; /* a fresh run into a run directory that holds an earlier run's checkpoints
                      and metrics removes them (without it, that is IG_ERR_EXISTS) */
    /* Set (by a signal handler) to stop: the step in progress finishes, a checkpoint is written,
     * and ig_train_run returns IG_OK with stopped set. May be NULL. */
    const volatile int *stop;
    FILE *log; /* step lines; NULL: stdout */
    int quiet; /* no step lines (metrics.jsonl is still written) */
} ig_train_opts;

typedef struct ig_train_result {
    int64_t step;          /* steps done (the next step to run) */
    double loss;           /* the last step's training loss */
    double val_loss;       /* the last validation loss (NAN when none) */
    int stopped;           /* stopped on request before the last step */
    char checkpoint[4096]; /* the last checkpoint written, "" when none */
} ig_train_result;

/* Trains as cfg says: data from the loader (blend, split, exact resume), gradient accumulation to
 * the global batch, AdamW with the schedule and clipping, validation every eval.every steps,
 * checkpoints every ckpt.every steps and at the end, a step line on opts->log and the same as JSON
 * in RUN_DIR/metrics.jsonl (and TensorBoard scalars with log.tensorboard). A loss or gradient
 * norm that is NaN or infinite stops the run with IG_ERR_FORMAT naming the step. A run resumed
 * from a checkpoint gives the same losses, bit for bit, as the run that was never stopped. */
ig_status ig_train_run(ig_ctx *ctx, ig_comm *comm, const ig_train_opts *opts,
                       ig_train_result *result, ig_err *err);

/* ==== checkpoints (checkpoint.c) ============================================================= */

#define IG_CKPT_FORMAT  "ingot-checkpoint"
#define IG_CKPT_VERSION 1

/* What a checkpoint says about itself (its manifest.json). */
typedef struct ig_ckpt_info {
    int64_t step;           /* steps done */
    ig_loader_state loader; /* consumed samples and the index key */
    ig_gpt_config model;    /* the model's shape */
    uint64_t seed;          /* the initial weights' seed */
    int32_t eod_id;         /* the data's end-of-document id (-1: none) */
    uint64_t config_hash;   /* ig_config_hash of the run's configuration */
    int tp, pp, dp;         /* the layout it was saved under */
    double loss;            /* the loss of its last step */
} ig_ckpt_info;

/* Writes the state after info->step steps (parameters, AdamW moments, the loader's state, the
 * configuration) into RUN_DIR/ckpt/step_NNNNNNNN: under a temporary name, every file checksummed
 * in manifest.json, fsync'd, renamed into place; then only the newest `keep` checkpoints stay.
 * The directory's path goes to path[cap]. */
ig_status ig_ckpt_save(ig_ctx *ctx, ig_gpt *m, const ig_ckpt_info *info, const ig_config *cfg,
                       const char *run_dir, int64_t keep, char *path, size_t cap, ig_err *err);
/* A checkpoint directory from a path: path itself when it holds a manifest.json, the newest
 * checkpoint of a run directory (one with a ckpt/ folder), else path unchanged. */
ig_status ig_ckpt_resolve(const char *path, char *out, size_t cap, ig_err *err);
/* The newest complete checkpoint under RUN_DIR/ckpt (by step), or IG_ERR_NOT_FOUND. */
ig_status ig_ckpt_latest(const char *run_dir, char *path, size_t cap, ig_err *err);
/* Reads and checks a checkpoint's manifest (format, version, every listed file present with its
 * size; with verify, every file's xxh3). Errors name the file. */
ig_status ig_ckpt_read_info(ig_ctx *ctx, const char *dir, int verify, ig_ckpt_info *info,
                            ig_err *err);
/* Loads a checkpoint into m (whose shape must match): parameters and, with optimizer, the AdamW
 * moments. Checksums are verified first. */
ig_status ig_ckpt_load(ig_ctx *ctx, const char *dir, ig_gpt *m, int optimizer, ig_ckpt_info *info,
                       ig_err *err);

/* Writes a checkpoint as a Hugging Face GPT-2 directory (hf_io.c): model.safetensors (names as
 * transformers saves GPT2LMHeadModel, the tied lm_head not stored, the padded vocabulary rows
 * dropped, __metadata__ {"format": "pt"}) and config.json. The checkpoint is verified first. */
ig_status ig_ckpt_export(ig_ctx *ctx, const char *ckpt_dir, const char *out_dir, int overwrite,
                         ig_err *err);

/* ==== using a model (inference.c) ============================================================ */

/* Opens a model for inference on be from a checkpoint directory, a Hugging Face directory
 * (config.json + model.safetensors, as ig_ckpt_export writes) or a model.safetensors file (with
 * config.json beside it, or ingot's own metadata). B x T: the largest micro-batch it will run
 * (T <= its positions). *eod_id: the end-of-document id when the model says (-1 otherwise). */
ig_status ig_model_open(ig_gpt **out, ig_ctx *ctx, ig_backend *be, const char *path, int B, int T,
                        int32_t *eod_id, ig_err *err);

/* The mean loss of a model over `batches` micro-batches of B samples of data (read from the
 * start of the stream, as a validation pass does). */
ig_status ig_model_eval(ig_gpt *m, ig_ctx *ctx, const ig_data_opts *data, int B, int batches,
                        double *loss, ig_err *err);

typedef struct ig_sample_opts {
    int max_tokens;    /* tokens to generate */
    float temperature; /* 0: greedy; default 1 */
    int top_k;         /* 0: off */
    float top_p;       /* 1: off */
    uint64_t seed;     /* the draws are keyed by (seed, position): reproducible */
    int32_t stop_id;   /* stop after generating this id (-1: never) */
} ig_sample_opts;

ig_sample_opts ig_sample_opts_default(void);

/* Generates up to o->max_tokens tokens after prompt[n_prompt] with a KV cache (the prompt is
 * processed at once, then one token per step), calling emit(user, id) for each (it may return
 * nonzero to stop). The prompt and the generated tokens must fit the model's positions: the
 * generation stops there. *n_out: tokens generated. */
ig_status ig_model_generate(ig_gpt *m, ig_ctx *ctx, const int32_t *prompt, size_t n_prompt,
                            const ig_sample_opts *o, int (*emit)(void *user, int32_t id),
                            void *user, size_t *n_out, ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_TRAIN_H */
