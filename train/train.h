/* train.h - the public API of ingot's trainer: models of any family (train/models/: the decoder
 * language models GPT-2 and Llama, the video DiT, Stable Diffusion's VAE) over a compute backend
 * (kernels/backend.h), their configuration, the training loop on the distributed loader, AdamW,
 * learning-rate schedules, checkpoints that resume bit for bit, Hugging Face export and import,
 * evaluation and sampling.
 *
 * A frozen text encoder (T5, train/models/t5/) is a family too, used through ig_text_encoder and
 * never trained.
 *
 * A model is a list of named global tensors, described by its family (train/models/FAMILY/); every
 * tensor's initial values are drawn by (seed, name, element index) with a counter-based generator,
 * so every layout and every backend starts from the same model. The trainer itself - the loop,
 * the 1F1B schedule, the optimizer, the checkpoints - never names a family: it works on the
 * tensors' tags (layer, pipeline placement, tensor-parallel split, decay) and on the stage
 * operations the family provides. Parameters and gradients each live in one backend allocation
 * with per-tensor views; the AdamW moments belong to the optimizer.
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

/* ==== model families and their configuration ================================================= */

/* The model architectures this build knows (model.arch), each a preset of a model family
 * (train/models/: the decoder's gpt2 and llama, dit, t5, vae): {"gpt2", "llama", "dit", "t5",
 * "vae", NULL}, in the order of the one list (train/models/families.c); ig_model_config.arch
 * indexes it. */
extern const char *const ig_model_archs[];

enum { IG_MODEL_OWN_BYTES = 512 };

/* A model's shape: the fields every family has, then the family's own configuration (its model.*
 * keys: model.n_kv_heads, model.patch, ...), which only the family reads; bind a configuration
 * into it with ig_train_config_resolve, or make one with ig_model_config_parse. A plain value:
 * copy it freely (a checked shape holds no pointer). */
typedef struct ig_model_config {
    int arch; /* index into ig_model_archs (model.arch) */
    int n_layer, n_head, d_model;
    int seq_len;      /* the longest sequence (a diffusion model: the tokens of its largest clip) */
    int vocab_size;   /* ids 0 .. vocab_size - 1 (0: a family that reads no tokens) */
    int padded_vocab; /* filled by ig_model_config_check (the family's padding) */
    double norm_eps;  /* the norms' epsilon; 0: the family's default */
    /* the family's own fields, in a struct only it reads (train/family.h) */
    _Alignas(8) unsigned char own[IG_MODEL_OWN_BYTES];
} ig_model_config;

/* A shape from model.* keys written as YAML ("arch: llama, n_layer: 2, n_kv_heads: 1" or a block
 * mapping; the keys without their "model." prefix), every other key at its default as a
 * configuration file would have it, then checked (ig_model_config_check). Errors name the key. */
ig_status ig_model_config_parse(ig_model_config *out, const char *yaml, ig_err *err);
/* The first model.* key whose value differs between two shapes ("model.arch", "model.n_layer",
 * ... then the family's own), or "" when none: how a checkpoint or a Hugging Face directory is
 * matched against a configuration. A family that computes positions for any length (dit) does not
 * compare seq_len. */
const char *ig_model_config_differs(const ig_model_config *a, const ig_model_config *b);

/* What a generative model can be conditioned on when it samples (ingot sample --label, --prompt):
 * IG_COND_* bits, 0 for none. */
enum { IG_COND_LABEL = 1, IG_COND_TEXT = 2 };
int ig_model_conditions(const ig_model_config *c);
/* What a model trains for and reads, as its objective says (train/objective.h): the objective
 * ("next-token": cross-entropy over token ids; "rectified-flow": a diffusion model over clips), the
 * data it reads ("tokens": token shards; "clips": clip shards), what a micro-batch is counted in
 * ("samples", "clips") and what sampling it makes ("text", "video"; NULL: none). */
typedef struct ig_model_io {
    const char *objective, *input, *units, *sampler;
} ig_model_io;
ig_model_io ig_model_io_of(const ig_model_config *c);

/* Fills the family's defaults and derived fields (padded_vocab, ...) and checks the shape (every
 * field positive, heads dividing d_model, kv heads dividing heads, ...); errors name the key. */
ig_status ig_model_config_check(ig_model_config *c, ig_err *err);
/* Parameters of the model (the padded vocabulary rows included). */
uint64_t ig_model_num_params(const ig_model_config *c);
/* Forward FLOPs per token at sequence length T (matmuls and attention, as PaLM's 6N + 12 L T C
 * accounting counts them: a training step costs 3x). */
double ig_model_flops_per_token(const ig_model_config *c, int T);
/* One line describing the shape ("gpt2: 4 layers, 4 heads, d_model 128, ..."). Returns buf. */
char *ig_model_describe(const ig_model_config *c, char *buf, size_t cap);

typedef enum ig_lr_schedule {
    IG_LR_COSINE = 0,
    IG_LR_LINEAR,
    IG_LR_CONSTANT,
    IG_LR_WSD /* warmup, stable, then a linear decay over the last optim.decay_fraction */
} ig_lr_schedule;

/* Activation recomputation (train.recompute): none keeps every activation of a micro-batch for
 * its backward; selective recomputes the attention core (keeping the GEMM outputs, Korthikanti et
 * al.); full keeps only each layer's input and runs the layer's forward again in the backward
 * (Megatron's full recomputation, OpenDiT's grad_checkpoint). Losses and weights are the same bits
 * whichever is chosen. */
typedef enum ig_recompute {
    IG_RECOMPUTE_NONE = 0,
    IG_RECOMPUTE_SELECTIVE,
    IG_RECOMPUTE_FULL
} ig_recompute;

/* Everything a run is: the keys of a training config (the tables of ig_train_key_tables: model,
 * data, train, optim, eval, ckpt, log, parallel), bound into this struct. Strings point into the
 * ig_config they came from. */
typedef struct ig_train_config {
    /* model */
    ig_model_config model; /* vocab_size 0: from the shards' manifest */
    const char *init_from; /* "": random init; else a Hugging Face model directory or file */
    uint64_t seed;         /* initial weights */
    /* data (the loader module's keys) */
    ig_data_config data;
    /* train */
    int micro_batch;
    int global_batch; /* samples per step over all data-parallel ranks */
    int64_t steps;
    const char *run_dir;
    int device;            /* 0: cpu, 1: cuda (ig_backend_kind) */
    int dtype;             /* 0: auto (bf16 on cuda, fp32 on cpu), 1: fp32, 2: bf16 */
    int eod_mask_loss;     /* no loss where the input token is end-of-document (as Megatron) */
    int doc_attention;     /* attention does not cross end-of-document tokens */
    int recompute;         /* ig_recompute: what the backward recomputes instead of keeping */
    uint64_t memory_limit; /* bytes a rank may use (0: its device's): a run whose plan needs more
                              is refused before it allocates */
    /* optim */
    double lr, min_lr;
    int64_t warmup;
    int schedule; /* ig_lr_schedule */
    double decay_fraction;
    double beta1, beta2, eps, weight_decay, grad_clip;
    /* ema: an exponential moving average of the weights, updated after every step (0: none;
     * -1: the family's default, 0.9999 for dit and none for the language models) */
    double ema_decay;
    /* the rectified-flow objective's (objectives/flow.c): the shift of the logit-normal times,
     * t' = s t / (1 + (s - 1) t) (diffusion.shift), and the times of the validation grid,
     * (k + 0.5) / n (eval.timesteps) */
    double flow_shift;
    int eval_timesteps;
    /* and model.clip, the clips' [frames, height, width] the run is planned for (ingot plan sizes
     * it without --clip; ingot train reads the shapes from the shards); [] none */
    const char **clip_list;
    size_t n_clip_list;
    /* the VAE objective's (objectives/vae.c): the KL term's weight in its loss (vae.kl_weight) */
    double vae_kl_weight;
    /* and data.caption_features: the caption-feature shards of the clips (a prefix or a list,
     * ingot preprocess captions' output), which a caption-conditioned DiT attends to instead of
     * learning an embedding of the captions' tokens; "" none */
    const char *caption_features;
    /* eval */
    int64_t eval_every, eval_batches;
    /* ckpt */
    int64_t ckpt_every, ckpt_keep;
    /* log */
    int64_t log_every;
    int tensorboard;
    int comm_stats;   /* bytes sent per group in each step line */
    int memory_stats; /* every rank's estimated and measured memory in metrics.jsonl */
    /* parallel (the processes come from the launcher: world = tp x pp x dp) */
    int tp, pp, dp; /* dp 0: world / (tp x pp) */
    int sp;         /* sequence parallelism inside the tensor-parallel group */
    int sp_mode;    /* 0: megatron (sp within tp), 1: ulysses (sp_size ranks) */
    int sp_size;    /* ulysses: the ranks a sequence is cut among */
    int zero; /* 0, 1 (optimizer state sharded over dp), 2 (gradients too), 3 (parameters too) */
    int prefetch; /* ZeRO-3: the next layer's all-gather started while this one computes */
    const char **pipeline_layers; /* layers per stage ([] : n_layer / pp each) */
    size_t n_pipeline_layers;
    uint64_t bucket_bytes; /* gradients are reduced in buckets of about this size */
    /* Open-Sora's and OpenDiT's spelling of the layout (ColossalAI's booster plugins): plugin
     * none, ddp, zero1, zero2 or hybrid, with plugin_config {tp_size, pp_size, sp_size,
     * zero_stage}; ig_train_config_resolve turns them into the parallel.* fields above */
    int plugin;
    int pc_tp, pc_pp, pc_sp, pc_zero;
    double timeout; /* seconds without progress before every rank gives up */
} ig_train_config;

/* The keys of a training config, as tables: the trainer's own (model.arch and the keys every
 * family has, train, optim, eval, ckpt, log, parallel), then each family's own model.* keys and
 * its objective's keys (diffusion.shift, ...). Fills up to cap tables (tables[i] has counts[i]
 * keys; binds[i] 1 when the table binds into an ig_train_config, 0 for a family's own keys, which
 * ig_train_config_resolve binds into the shape) and returns how many there are. */
size_t ig_train_key_tables(const ig_cfg_key **tables, size_t *counts, int *binds, size_t cap);
/* The most tables ig_train_key_tables gives (the trainer's, and two per family: its own keys and
 * its objective's): what a caller's arrays hold. */
enum { IG_TRAIN_KEY_TABLES = 16 };

/* Binds model.arch's own keys from cfg into t->model (a family's fields, which only it reads;
 * cfg NULL: t->model keeps them as given) and resolves the alternative spellings of a
 * configuration (plugin / plugin_config into parallel.*, refusing a value given twice
 * differently, naming both keys). ig_train_run calls it on its own copy; cfg (may be NULL) says
 * which keys were set. */
ig_status ig_train_config_resolve(ig_train_config *t, const ig_config *cfg, ig_err *err);

/* Checks what the keys cannot check alone (heads dividing d_model, global_batch a multiple of
 * micro_batch, min_lr <= lr, a schedule's warmup within the steps, a key of another family than
 * model.arch's, ...); errors name the key and, through cfg, where its value came from
 * (file:line). cfg may be NULL. */
ig_status ig_train_config_check(const ig_train_config *t, const ig_config *cfg, ig_err *err);

/* Every check of t that ingot train makes before it starts and that needs neither the data nor
 * the processes (ingot config check --schema train): ig_train_config_resolve and _check on a
 * copy, the model's shape (a vocabulary or a clip's tokens that the data gives are assumed to
 * fit), and the layout over the fewest processes it runs on, tp x pp x sp_size (x parallel.dp
 * when given), which *world (may be NULL) receives. Errors as ig_train_run's. */
ig_status ig_train_config_validate(ig_ctx *ctx, const ig_train_config *t, const ig_config *cfg,
                                   int *world, ig_err *err);

/* Whether the configuration gives model.clip (dit): *given 1 and the clip's *F x *H x *W, or
 * *given 0 (model.clip: [], the default). A model.clip that is not three whole numbers in
 * [1, 65536] is IG_ERR_CONFIG, naming the key. */
ig_status ig_train_config_clip(const ig_train_config *t, int *given, int *F, int *H, int *W,
                               ig_err *err);

/* The learning rate at step (0-based) of a run of t->steps steps. */
double ig_train_lr(const ig_train_config *t, int64_t step);

/* ==== a model on one process ================================================================= */

typedef struct ig_model ig_model;

/* A whole model on a backend: parameters (initialised from (seed, name, index)), gradients and
 * activations for micro-batches of B x T (T <= seq_len). No optimizer state (ig_optimizer). */
ig_status ig_model_create(ig_model **out, ig_ctx *ctx, ig_backend *be, const ig_model_config *c,
                          int B, int T, uint64_t seed, ig_err *err);
void ig_model_free(ig_model *m); /* NULL is a no-op */
/* ig_model_create whose backward recomputes activations instead of keeping them (recompute:
 * ig_recompute, as train.recompute): the same losses, gradients and weights, bit for bit, with
 * less activation memory (ig_model_act_memory) for more compute. */
ig_status ig_model_create_recompute(ig_model **out, ig_ctx *ctx, ig_backend *be,
                                    const ig_model_config *c, int B, int T, uint64_t seed,
                                    int recompute, ig_err *err);

/* The activation memory a model allocated, in bytes: what one micro-batch keeps from its forward
 * to its backward (a slot: its act-typed tensors, fp32 statistics and losses, int32 ids; a
 * pipeline stage holds several), and the scratch the micro-batches share (the backward's
 * gradients, and the layer a recomputation runs again). */
typedef struct ig_act_memory {
    uint64_t slot_act, slot_f32, slot_i32; /* bytes of each type, per micro-batch slot */
    uint64_t slot;                         /* their sum */
    uint64_t scratch;                      /* act-typed and fp32 */
} ig_act_memory;
void ig_model_act_memory(const ig_model *m, ig_act_memory *out);

const ig_model_config *ig_model_shape(const ig_model *m);
ig_backend *ig_model_backend(const ig_model *m);

/* Where a tensor's pipeline stage is: a layer's, the first stage's (embeddings), the last's (the
 * head), or both the first's and the last's (a tied embedding, its two gradients summed). */
typedef enum ig_place {
    IG_PLACE_LAYER = 0,
    IG_PLACE_FIRST = 1,
    IG_PLACE_LAST = 2,
    IG_PLACE_TIED = 3
} ig_place;

#define IG_MAX_BLOCKS 4

/* The parameters as named tensors (the family's names: Hugging Face GPT-2's for gpt2, e.g.
 * "transformer.h.0.attn.c_attn.weight" [in, out]; Llama's with q|k|v fused into one
 * "model.layers.0.self_attn.qkv_proj.weight"). */
typedef struct ig_model_tensor {
    const char *name;
    int ndim;
    int64_t shape[2]; /* the part this model holds */
    uint64_t offset;  /* in elements, in the parameter (and gradient) buffers */
    uint64_t numel;
    int decay;      /* AdamW weight decay applies (matrices and embeddings, not biases, norms) */
    ig_place place; /* its pipeline stage */
    int layer;      /* IG_PLACE_LAYER: the (global) layer */
    /* Where the part sits in the global tensor (tensor parallelism): split_dim is the dimension
     * tensor parallelism cuts (-1: none, the tensor is replicated); along it the tensor is
     * n_blocks blocks of block[k] elements (c_attn's q, k, v: 3 equal blocks; grouped-query
     * attention's q, k, v: unequal ones; else 1), and each block is cut into `parts` equal slices,
     * of which this part holds slice `part` of every block. */
    int64_t global_shape[2];
    int split_dim, part, parts;
    int n_blocks;
    int64_t block[IG_MAX_BLOCKS];
    /* a replicated tensor whose gradient each tensor-parallel rank holds a share of (the norms
     * under sequence parallelism): summed over the group before the optimizer */
    int tp_partial;
} ig_model_tensor;

size_t ig_model_num_tensors(const ig_model *m);
const ig_model_tensor *ig_model_tensor_at(const ig_model *m, size_t i);
const ig_model_tensor *ig_model_tensor_find(const ig_model *m, const char *name);

/* Host copies of the parameters or gradients (fp32, every tensor at its offset: a buffer of
 * ig_model_buffer_elems elements, the gaps between tensors 0). */
typedef enum ig_model_buffer { IG_MODEL_PARAMS = 0, IG_MODEL_GRADS } ig_model_buffer;
uint64_t ig_model_buffer_elems(const ig_model *m);
ig_status ig_model_read(ig_model *m, ig_model_buffer which, float *out, ig_err *err);
ig_status ig_model_write(ig_model *m, ig_model_buffer which, const float *in, ig_err *err);

/* IG_OK when every parameter the model holds is finite; else IG_ERR_FORMAT naming the first
 * tensor that holds a NaN or an infinity (one pass over the parameters). */
ig_status ig_model_check_finite(ig_model *m, ig_err *err);
/* The identity of its weights: xxh3 of every parameter as fp32, in the model's order (the same
 * weights give the same identity whether they came from a checkpoint or an export). */
ig_status ig_model_params_xxh3(ig_model *m, uint64_t *xxh3, ig_err *err);

/* One micro-batch of a language model: tokens [B, T + 1] in host memory (inputs are [:, :T],
 * targets [:, 1:]). Forward computes the mean loss over the counted positions (all, or with
 * eod_mask_loss those whose input is not eod_id); with backward (grad_scale > 0), the gradient of
 * grad_scale * loss is added to the gradients. doc_attention: attention stays within documents
 * ended by eod_id. Returns the loss in *loss; *counted receives the positions counted. */
typedef struct ig_batch_opts {
    int eod_mask_loss;
    int doc_attention;
    int32_t eod_id; /* -1: none */
} ig_batch_opts;

ig_status ig_model_forward(ig_model *m, const int32_t *tokens, int B, int T, const ig_batch_opts *o,
                           double *loss, uint64_t *counted, ig_err *err);
/* forward + backward of the loss scaled by grad_scale (e.g. 1 / micro-batches per step). */
ig_status ig_model_forward_backward(ig_model *m, const int32_t *tokens, int B, int T,
                                    const ig_batch_opts *o, float grad_scale, double *loss,
                                    uint64_t *counted, ig_err *err);
/* One micro-batch of a diffusion model (model.arch dit): video clips, with the draws of
 * rectified flow. x0 = frames / 127.5 - 1; x_t = (1 - t) x0 + t eps; the model predicts the
 * velocity eps - x0 and the loss is the mean squared error over every element. eps and t are
 * given, or drawn: sample b's from (seed, key, b) with a counter-based generator (t logit-normal,
 * shifted), so every layout and every resume draws the same. */
typedef struct ig_clip_input {
    const uint8_t *frames; /* [B, F, H, W, 3] RGB24 (NULL with xt or latents) */
    /* or a model of latents (ig_model_latents): the clips' posterior moments [B, F, H, W, 2C]
     * (latent shards' values: the C means, then the C log-variances; F, H, W in latent
     * positions). x0 = latent_scale (z - latent_shift), z = mean + exp(logvar / 2) eps' with eps'
     * drawn from (seed, key, b), or z = mean with latent_mean (validation, evaluation) */
    const float *latents;
    double latent_scale, latent_shift;
    int latent_mean;
    int B, F, H, W;
    const uint32_t *labels; /* [B] class ids (a class-conditional model); IG_CLIP_NONE or the
                               number of classes is the null class, a larger label an error; NULL:
                               all null */
    /* a caption-conditioned model: [B, its caption length] token ids, of which the first
     * caption_lens[b] are the caption (0: none, the null caption); NULL: every caption the null
     * one */
    const int32_t *captions, *caption_lens;
    /* a model conditioned on caption features (ig_model_caption_features): [B, its caption
     * length, D] fp32, of which the first caption_lens[b] rows are caption b's (0: the null
     * caption), in place of captions */
    const float *features;
    int drop_labels;    /* each label (caption) becomes the null one with the model's dropout
                           probability while training, drawn from (seed, key, b) */
    const float *noise; /* [B, F, H, W, C] eps (C: 3, or a model of latents' C), or NULL: drawn */
    const float *t;     /* [B] times in [0, 1], or NULL: drawn */
    const float *xt;    /* sampling: x_t itself [B, F, H, W, C] (no frames, noise, loss) */
    uint64_t seed, key; /* the draws' keys */
    double shift;       /* of the drawn times (1: none) */
} ig_clip_input;

/* The width D of the caption features a model is conditioned on, and (enc, may be NULL) the
 * encoder that made the ones it was trained on (its line, width and hashes, as caption-feature
 * shards record it); 0 for a model that reads no caption features (caption tokens, or none). */
int ig_model_caption_features(const ig_model_config *c, ig_feature_encoder *enc);
/* The caption tokens (or feature rows) a model conditioned on captions attends to, its
 * model.caption_len; 0 for a model that reads no captions. */
int ig_model_caption_len(const ig_model_config *c);

/* The tokens of a clip of F x H x W for a model that reads clips (its objective's): a diffusion
 * model's patches, a VAE's pixels (refused with the numbers when the model cannot take it). */
ig_status ig_model_clip_tokens(const ig_model_config *c, int F, int H, int W, int *tokens,
                               ig_err *err);
/* Forward (grad_scale 0) or forward and backward of a diffusion model's micro-batch; *loss the
 * mean squared error. The whole model on one process. */
ig_status ig_model_clips_loss(ig_model *m, const ig_clip_input *in, float grad_scale, double *loss,
                              ig_err *err);
/* The model's velocity for x_t (in->xt, in->t, in->labels): v [B, F, H, W, 3]. */
ig_status ig_model_clips_predict(ig_model *m, const ig_clip_input *in, float *v, ig_err *err);

/* One micro-batch of a VAE (model.arch vae: Stable Diffusion's AutoencoderKL, each frame of a
 * clip on its own): x = frames / 127.5 - 1 is encoded, the posterior's sample z = mean +
 * exp(logvar / 2) eps (logvar clamped to [-30, 20]) decoded, and the loss is the mean absolute
 * error of the reconstruction plus kl_weight x the mean of 0.5 (mean^2 + exp(logvar) - 1 - logvar),
 * the means over every element. eps is given, or drawn: clip b's from (seed, key, b) with a
 * counter-based generator, so every layout and every resume draws the same. */
typedef struct ig_vae_input {
    const uint8_t *frames; /* [B, F, H, W, 3] RGB24 */
    int B, F, H, W;
    const float *noise; /* [B, F, h, w, C] eps (ig_model_vae_latent_shape), or NULL: drawn */
    uint64_t seed, key; /* the draws' keys */
    double kl_weight;   /* the KL term's weight (vae.kl_weight; 1e-6 by default) */
} ig_vae_input;

/* A VAE's loss on a micro-batch: its two terms (means) and loss = reconstruction + kl_weight kl. */
typedef struct ig_vae_terms {
    double reconstruction, kl, loss;
} ig_vae_terms;

/* The latent of a VAE's frame of H x W: h x w x C (refused with the numbers when the frame's sides
 * are not multiples of the downsampling's). */
ig_status ig_model_vae_latent_shape(const ig_model_config *c, int H, int W, int *h, int *w, int *C,
                                    ig_err *err);
/* Forward (grad_scale 0) or forward and backward of a VAE's micro-batch (the whole model on one
 * process): its terms in *out. */
ig_status ig_model_vae_loss(ig_model *m, const ig_vae_input *in, float grad_scale,
                            ig_vae_terms *out, ig_err *err);
/* The last ig_model_vae_loss's reconstruction [B, F, H, W, 3] (the decoder's output in [-1, 1]
 * before any clamp; after a forward only: a backward overwrites it with its gradient). */
ig_status ig_model_vae_reconstruction(ig_model *m, float *out, ig_err *err);
/* The encoder alone: N frames [N, H, W, 3] RGB24 to the posterior's moments [N, h, w, 2C] (C
 * means, then C log-variances, unclamped), as many frames a pass as the model was opened for (B x
 * T pixels). */
ig_status ig_model_vae_encode(ig_model *m, const uint8_t *frames, int N, int H, int W,
                              float *moments, ig_err *err);
/* The decoder alone: latents z [N, h, w, C] to frames [N, H, W, 3] (in [-1, 1] when trained;
 * not clamped). */
ig_status ig_model_vae_decode(ig_model *m, const float *z, int N, int h, int w, float *out,
                              ig_err *err);
/* A latent diffusion model's output to video: N frames (of one clip or many) of H x W pixels
 * from their latents x0 [N, h, w, C] (ig_model_vae_latent_shape) as x0 = scaling (z - shift) of
 * this VAE, z decoded as many frames a pass as the model was opened for, into rgb [N, H, W, 3]
 * RGB24 (the decoder's [-1, 1] to 0 .. 255, rounded and clamped). */
ig_status ig_model_vae_decode_rgb(ig_model *m, const float *x0, int N, int H, int W, double scaling,
                                  double shift, uint8_t *rgb, ig_err *err);

ig_status ig_model_zero_grads(ig_model *m, ig_err *err);
/* The global gradient norm (sqrt of the sum of squares over every gradient). */
ig_status ig_model_grad_norm(ig_model *m, double *norm, ig_err *err);

/* ==== AdamW ================================================================================== */

/* The optimizer of a model on one process: the AdamW moments (fp32, the model's buffer layout)
 * and the update, as torch.optim.AdamW (weight decay on the tensors marked decay). Under a
 * parallel layout the trainer makes its own (with the gradient reductions and ZeRO). */
typedef struct ig_optimizer ig_optimizer;
ig_status ig_optimizer_create(ig_optimizer **out, ig_ctx *ctx, ig_model *m, ig_err *err);
void ig_optimizer_free(ig_optimizer *o); /* NULL is a no-op */

typedef struct ig_adamw_hparams {
    float lr, beta1, beta2, eps, weight_decay;
} ig_adamw_hparams;

/* One AdamW step (t = step >= 1), gradients scaled by grad_scale (clipping). */
ig_status ig_optimizer_step(ig_optimizer *o, int step, const ig_adamw_hparams *h, float grad_scale,
                            ig_err *err);
/* Host copies of the moments (exp_avg, exp_avg_sq), as ig_model_read lays them out. */
typedef enum ig_moment { IG_MOMENT_EXP_AVG = 0, IG_MOMENT_EXP_AVG_SQ } ig_moment;
ig_status ig_optimizer_read(ig_optimizer *o, ig_moment which, float *out, ig_err *err);
ig_status ig_optimizer_write(ig_optimizer *o, ig_moment which, const float *in, ig_err *err);

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
    /* Called (may be NULL) once this rank's watchdog is armed, which from then on ends a run
     * that makes no progress for parallel.timeout: a guard of the start before it (the
     * program's, through MPI_Init) may stand down. */
    void (*watched)(void *user);
    void *watched_user;
    const char *config_path; /* the config file (may be NULL: "CONFIG"), for the messages that
                                give a command to run next (resume with: ingot train PATH ...) */
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

/* ==== planning a layout (plan.c) ============================================================= */

/* The layouts a configuration can train under on a given set of machines, each with the memory of
 * its largest rank, the bytes its ranks send per step and group, and an estimated step time, as
 * `ingot plan` prints them and `ingot train` checks its own layout before it allocates.
 *
 * Memory comes from the trainer's own sizing (ig_model_memory, ig_optim_estimate: the tensor table,
 * the family's activation plan, the optimizer's buffers, ZeRO's pieces, the 1F1B schedule's
 * micro-batches in flight), for every pipeline stage, never from a formula of the planner's. The
 * bytes sent are the passes' and the optimizer's collectives as parallel.h's ring accounting counts
 * them (what log.comm_stats measures). The time is a model, stated in plan.c's header and `ingot
 * plan
 * --help`: the FLOPs at the GEMM rate, the pipeline's bubble, the tensor- and sequence-parallel
 * collectives on the critical path, and the data-parallel reductions where the backward does not
 * hide them. */

/* The groups of a layout, as log.comm_stats names them: {"tp", "pp", "dp", "emb", "sp", NULL}. */
typedef enum ig_plan_group {
    IG_PLAN_TP = 0,
    IG_PLAN_PP,
    IG_PLAN_DP,
    IG_PLAN_EMB,
    IG_PLAN_SP,
    IG_PLAN_GROUPS
} ig_plan_group;
extern const char *const ig_plan_group_names[];

/* The machines: gpus processes (one device each), gpus_per_node of them to a node. */
typedef struct ig_plan_world {
    int gpus, gpus_per_node;
    int device; /* 1: CUDA devices (bf16 by default; a context, cuBLASLt, NCCL); 0: CPU ranks */
    uint64_t memory; /* bytes one rank may use (a device's) */
    double flops;    /* the GEMM rate one device reaches in the run's act type (FLOP/s) */
    double intra_bw; /* bytes/s a rank's ring collective moves within a node (NVLink) */
    double inter_bw; /* bytes/s across nodes (the rank's network link) */
} ig_plan_world;

/* The presets, by name: "h100", "a100", "h200" (SXM), "cpu"; see ig_plan_world_gpu. */
extern const char *const ig_plan_gpus[];
/* The figures of a preset into w (gpus and gpus_per_node are left as they are): its memory (the
 * total nvidia-smi shows: H100 81559 MiB, A100 81920 MiB, H200 143771 MiB), the GEMM rate cuBLAS
 * reaches on large bf16 matrices and the ring bandwidths NCCL reaches rather than the datasheets'
 * (H100 and H200 700 TFLOP/s, 360 GB/s NVLink, 45 GB/s InfiniBand per GPU; A100 280 TFLOP/s,
 * 230 GB/s, 22 GB/s); cpu: CPU ranks, 100 GFLOP/s, 5 GB/s, 1 GB/s and the memory this process
 * may take. IG_ERR_INVALID_ARG naming the presets for another name. */
ig_status ig_plan_world_gpu(ig_plan_world *w, const char *gpu, ig_err *err);

/* A layout: the parallel.* keys and the train.* keys the planner varies. */
typedef struct ig_plan_layout {
    int tp, pp, dp;
    int sp;  /* Megatron's sequence parallelism (parallel.sp) */
    int usp; /* Ulysses' sequence ranks (parallel.sp_size with sp_mode ulysses; 1: none) */
    int zero;
    int recompute;   /* ig_recompute */
    int micro_batch; /* train.micro_batch */
    int accum;       /* micro-batches per step on each data-parallel rank */
} ig_plan_layout;

/* One rank's memory in bytes, by what holds it. */
typedef struct ig_plan_memory {
    uint64_t params;    /* the parameters (and fp32 master weights with bf16) */
    uint64_t master;    /* of them, the fp32 master weights */
    uint64_t grads;     /* gradients (ZeRO-2: the working slots and the reduced pieces) */
    uint64_t optim;     /* the AdamW moments, and the EMA when kept */
    uint64_t acts;      /* activations: every micro-batch in flight, and the scratch */
    uint64_t acts_slot; /* of them, one micro-batch's */
    uint64_t comm;      /* NCCL's buffers: an allowance per communicator (device runs) */
    uint64_t workspace; /* the CUDA context and cuBLASLt's workspace (device runs) */
    uint64_t total;
} ig_plan_memory;

/* The step time's parts in seconds (plan.c states the model). */
typedef struct ig_plan_time {
    double step;    /* the sum of the others */
    double compute; /* the slowest stage's FLOPs (recomputation's included) at the GEMM rate */
    double bubble;  /* the pipeline's fill and drain: compute x (pp - 1) / accum */
    double tp, sp;  /* tensor- and sequence-parallel collectives (on the critical path) */
    double pp;      /* the stage boundaries' sends */
    double dp;      /* the data-parallel reductions the backward does not hide, ZeRO's gathers */
    double emb;     /* the tied embedding's sum between the first and last stage */
} ig_plan_time;

typedef struct ig_plan_entry {
    ig_plan_layout layout;
    ig_plan_memory mem;            /* the rank that needs the most */
    int worst_stage;               /* its pipeline stage */
    uint64_t sent[IG_PLAN_GROUPS]; /* per step and group, the most any rank sends */
    ig_plan_time time;
    double tokens_per_s; /* the global batch's tokens over the step time */
    int fits;            /* mem.total <= the world's memory */
    /* per pipeline stage [pp]: its rank's memory and what it sends per step */
    ig_plan_memory *stage_mem;
    uint64_t (*stage_sent)[IG_PLAN_GROUPS];
} ig_plan_entry;

/* A plan: the layouts, those that fit first, each part by step time. */
typedef struct ig_plan {
    ig_plan_world world;
    ig_model_config shape; /* checked */
    int B, T;              /* the configured micro-batch: samples (clips) of T tokens */
    int global_batch;
    size_t act_size;        /* bytes per act element */
    uint64_t params;        /* the model's parameters */
    double flops_per_token; /* forward, at T */
    ig_plan_entry *entries; /* [n] */
    size_t n, n_fit;
    size_t n_refused;             /* candidates the layout checks refused */
    char refused[IG_ERR_MSG_MAX]; /* configured_only: why the configured layout was refused */
} ig_plan;

/* Plans cfg's training on w: every layout ingot train would accept (ig_layout_create's checks)
 * among tp in the divisors of a node's GPUs, pp in those of the layers, Megatron's sp on and off,
 * Ulysses' sp_size (a family that has it), ZeRO 0 .. parallel.zero's largest, every
 * train.recompute, and train.micro_batch and its divisors that keep train.global_batch; or with
 * configured_only, the one layout cfg's keys give (refused: p->n 0 and p->refused says why).
 * cfg's model must be complete: vocab_size set (a language model), seq_len the tokens of a clip
 * (dit). *out is a plain result, malloc'd (not through ctx's allocator): ig_plan_free. */
ig_status ig_plan_create(ig_plan **out, ig_ctx *ctx, const ig_train_config *cfg,
                         const ig_plan_world *w, int configured_only, ig_err *err);
void ig_plan_free(ig_plan *p); /* NULL is a no-op */

/* ==== checkpoints (checkpoint.c) ============================================================= */

#define IG_CKPT_FORMAT "ingot-checkpoint"
#define IG_CKPT_VERSION                                                                            \
    2 /* 2: model.arch and the tensors' placements; version 1 (GPT-2) is read                      \
       */

/* What a checkpoint says about itself (its manifest.json). */
typedef struct ig_ckpt_info {
    int version;            /* of its manifest */
    int64_t step;           /* steps done */
    ig_loader_state loader; /* consumed samples and the index key */
    uint64_t train_samples; /* the samples the data's index was built for (0: unknown, version 1) */
    int64_t global_batch;   /* the run's train.global_batch (0: not recorded, before issue 26) */
    ig_model_config model;  /* the model's family and shape */
    uint64_t seed;          /* the initial weights' seed */
    int32_t eod_id;         /* the data's end-of-document id (-1: none) */
    uint64_t config_hash;   /* ig_config_hash of the run's configuration */
    int tp, pp, dp;         /* the layout it was saved under */
    double loss;            /* the loss of its last step */
    double ema_decay;       /* the EMA of the weights it holds (ema.decay; 0: none) */
} ig_ckpt_info;

/* Writes the state after info->step steps (the model's parameters, the optimizer's moments when
 * o is not NULL, the loader's state, the configuration) into RUN_DIR/ckpt/step_NNNNNNNN: under a
 * temporary name, every file checksummed in manifest.json, fsync'd, renamed into place; then only
 * the newest `keep` checkpoints stay. The directory's path goes to path[cap]. One process. */
ig_status ig_ckpt_save(ig_ctx *ctx, ig_model *m, ig_optimizer *o, const ig_ckpt_info *info,
                       const ig_config *cfg, const char *run_dir, int64_t keep, char *path,
                       size_t cap, ig_err *err);
/* A checkpoint directory from a path: path itself when it holds a manifest.json, the newest
 * checkpoint of a run directory (one with a ckpt/ folder), else path unchanged. */
ig_status ig_ckpt_resolve(const char *path, char *out, size_t cap, ig_err *err);
/* The newest complete checkpoint under RUN_DIR/ckpt (by step), or IG_ERR_NOT_FOUND. */
ig_status ig_ckpt_latest(const char *run_dir, char *path, size_t cap, ig_err *err);
/* Reads and checks a checkpoint's manifest (format, version, every listed file present with its
 * size; with verify, every file's xxh3). Errors name the file. */
ig_status ig_ckpt_read_info(ig_ctx *ctx, const char *dir, int verify, ig_ckpt_info *info,
                            ig_err *err);
/* Which weights of a checkpoint a model takes: its parameters, or the EMA of them (ema.decay).
 * IG_WEIGHTS_DEFAULT: the EMA when the checkpoint holds one, else the parameters. */
typedef enum ig_weights { IG_WEIGHTS_DEFAULT = 0, IG_WEIGHTS_RAW, IG_WEIGHTS_EMA } ig_weights;
extern const char *const ig_weights_names[]; /* {"default", "raw", "ema", NULL} */

/* Loads a checkpoint into m (whose family and shape must match): parameters and, when o is not
 * NULL, the optimizer's state (the AdamW moments, and the EMA when both keep one). Checksums are
 * verified first. */
ig_status ig_ckpt_load(ig_ctx *ctx, const char *dir, ig_model *m, ig_optimizer *o,
                       ig_ckpt_info *info, ig_err *err);

/* Writes a checkpoint as a Hugging Face directory of its family: model.safetensors with the
 * family's names (transformers' for gpt2 and llama, the padded vocabulary rows dropped),
 * __metadata__ {"format": "pt"}, and config.json as the family writes it (GPT2LMHeadModel for
 * gpt2, LlamaForCausalLM for llama, model_type "ingot-dit" with DiT's constructor arguments for
 * dit). The checkpoint is verified first. */
ig_status ig_ckpt_export(ig_ctx *ctx, const char *ckpt_dir, const char *out_dir, int overwrite,
                         ig_weights weights, ig_err *err);

/* ==== Hugging Face files (the family's) ===================================================== */

/* Reads the shape of a Hugging Face model directory (config.json + model.safetensors) or
 * model.safetensors file: the family from config.json's model_type, its eos_token_id into *eod
 * (-1 when none). */
ig_status ig_hf_read_config(ig_ctx *ctx, const char *path, ig_model_config *out, int32_t *eod,
                            ig_err *err);
/* Loads a Hugging Face model.safetensors of m's family into m's parameters: every tensor of the
 * model must be there with its shape, and every tensor of the file must be used; errors name the
 * tensor. */
ig_status ig_hf_load(ig_ctx *ctx, ig_model *m, const char *path, ig_err *err);
/* Writes m as a Hugging Face directory of its family (see ig_ckpt_export). */
ig_status ig_hf_export(ig_ctx *ctx, ig_model *m, int32_t eod_id, const char *dir, int overwrite,
                       ig_err *err);

/* ==== using a model (inference.c) ============================================================ */

/* Opens a model for inference on be from a checkpoint directory, a Hugging Face directory
 * (config.json + model.safetensors, as ig_ckpt_export writes) or a model.safetensors file (with
 * config.json beside it, or ingot's own metadata). B x T: the largest micro-batch it will run
 * (T <= its positions; 0: all). *eod_id: the end-of-document id when the model says (-1
 * otherwise). */
ig_status ig_model_open(ig_model **out, ig_ctx *ctx, ig_backend *be, const char *path, int B, int T,
                        int32_t *eod_id, ig_err *err);
/* The same with the checkpoint's weights chosen (a Hugging Face directory has one set: weights
 * must be IG_WEIGHTS_DEFAULT there). */
ig_status ig_model_open_weights(ig_model **out, ig_ctx *ctx, ig_backend *be, const char *path,
                                int B, int T, ig_weights weights, int32_t *eod_id, ig_err *err);

/* The mean loss of a model over `batches` micro-batches of B samples of data (read from the
 * start of the stream, as a validation pass does). */
ig_status ig_model_eval(ig_model *m, ig_ctx *ctx, const ig_data_opts *data, int B, int batches,
                        double *loss, ig_err *err);

/* The family and shape of a model on disk (a checkpoint, a run directory, a Hugging Face
 * directory or model.safetensors), without loading it. */
ig_status ig_model_read_shape(ig_ctx *ctx, const char *path, ig_model_config *out, ig_err *err);

/* A diffusion model's loss on clips (ingot eval): either eval.batches micro-batches of clips from
 * the start of the shards in dataset order, each at every time of the grid (k + 0.5) / timesteps
 * with noise keyed by seed - what the trainer's validation computes with data.seed - or, with a
 * noise file (safetensors: noise F32 [N, F, H, W, 3] and t F32 [N]), clips 0 .. N - 1 of the
 * shards (ingot inspect --clip's numbering) with exactly that noise at those times. Labels come
 * from the shards, never dropped. */
typedef struct ig_clip_eval_opts {
    const char *const *prefixes; /* clip shard prefixes, [n] */
    size_t n;
    int micro_batch; /* clips per micro-batch (a bucket's batch size with buckets) */
    int batches;     /* micro-batches (without a noise file) */
    int timesteps;   /* the grid's times */
    uint64_t seed;   /* of the noise (the trainer's data.seed) */
    const char *noise_file;
    const char *caption_features; /* the clips' caption features (a model that reads them) */
} ig_clip_eval_opts;

enum { IG_EVAL_MAX_TIMES = 1000 };
typedef struct ig_clip_eval_result {
    double loss;                       /* the mean squared error over everything evaluated */
    uint64_t clips;                    /* clips evaluated (each at every time of the grid) */
    int n_times;                       /* the grid's times (0 with a noise file) */
    double loss_at[IG_EVAL_MAX_TIMES]; /* the mean at time (k + 0.5) / n_times */
} ig_clip_eval_result;

ig_status ig_model_eval_clips(ig_model *m, ig_ctx *ctx, const ig_clip_eval_opts *o,
                              ig_clip_eval_result *res, ig_err *err);

/* What ingot eval measures: a model on disk evaluated as its objective says, on data of the kind
 * it reads - a next-token model over token shards (data, seq_len), a rectified-flow model over
 * clip shards at the grid's times with keyed noise, or with a noise file (timesteps, seed,
 * noise_file). An option that does not apply to the model is refused, naming it. */
typedef struct ig_eval_opts {
    const ig_data_config *data; /* the shards: data->path and the data keys (split, seed, ...) */
    int micro_batch, batches;
    int seq_len;            /* tokens: per sample (0: the model's positions) */
    int timesteps;          /* clips: the grid's times */
    const char *noise_file; /* clips: "" or NULL: none */
    ig_weights weights;
    const char *caption_features; /* clips: their caption features (a model of them); "": none */
} ig_eval_opts;

enum { IG_EVAL_MAX_LINES = IG_EVAL_MAX_TIMES + 2, IG_EVAL_LINE = 96 };
typedef struct ig_eval_result {
    char what[256]; /* what was evaluated, one line ("4 micro-batches of 2 x 32 tokens") */
    size_t n_lines; /* labelled values, one a line, before the loss ("t 0.1000 loss 0.123456") */
    char lines[IG_EVAL_MAX_LINES][IG_EVAL_LINE];
    double loss; /* the objective's mean loss ('loss X' is the last line ingot eval prints) */
} ig_eval_result;

/* Opens the model at path on be with room for the data's largest micro-batch, refuses weights that
 * are not finite, and evaluates it (res is large: allocate it). */
ig_status ig_model_evaluate(ig_ctx *ctx, ig_backend *be, const char *path, const ig_eval_opts *o,
                            ig_eval_result *res, ig_err *err);

/* Videos from a diffusion model: Euler steps of the flow from t = 1 (noise drawn from (seed,
 * video)) to 0 on the grid t_i = 1 - i / steps (shifted as diffusion.shift shifts the training
 * times), with classifier-free guidance v = v_null + cfg (v_label - v_null) when cfg != 1 and the
 * model is class-conditional. out: [num, F, H, W, 3] RGB24. Deterministic for a seed. */
typedef struct ig_video_sample_opts {
    int num, frames, height, width;
    int steps;
    float cfg;
    int64_t label;         /* the class, or -1: the null class (unconditional) */
    const int32_t *prompt; /* model.cond caption: the caption's token ids (NULL: the null one) */
    int prompt_len;
    /* or a model of caption features: the prompt's features [prompt_len, D] fp32 (the encoder's
     * the model was trained on: ig_model_caption_features), in place of prompt */
    const float *prompt_features;
    uint64_t seed;
    double shift;
    /* called after each step (may be NULL) */
    void (*progress)(void *user, int step, int steps);
    void *user;
} ig_video_sample_opts;

ig_video_sample_opts ig_video_sample_opts_default(void);
/* A model of pixels' videos; a model of latents is refused (it needs its VAE's decoder). */
ig_status ig_model_sample_video(ig_model *m, ig_ctx *ctx, const ig_video_sample_opts *o,
                                uint8_t *out, ig_err *err);
/* The same steps, x0 as the model makes it: out [num, F, H, W, C] fp32 (a model of latents: F, H,
 * W in latent positions, x0 = scaling (z - shift) of its VAE: ig_model_latents). */
ig_status ig_model_sample_values(ig_model *m, ig_ctx *ctx, const ig_video_sample_opts *o,
                                 float *out, ig_err *err);

/* The values of a clip's position a diffusion model reads (3 of RGB pixels; a VAE's latent
 * channels) and whether it was trained on a VAE's latents, with that VAE (vae may be NULL: its
 * identity, scaling and shift factors, downsampling and line; path empty). 0 and 0 for other
 * models. */
int ig_model_clip_channels(const ig_model_config *c);
int ig_model_latents(const ig_model_config *c, ig_latent_vae *vae);

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
ig_status ig_model_generate(ig_model *m, ig_ctx *ctx, const int32_t *prompt, size_t n_prompt,
                            const ig_sample_opts *o, int (*emit)(void *user, int32_t id),
                            void *user, size_t *n_out, ig_err *err);

/* ==== a VAE's encoder used frozen (ingot preprocess latents; objectives/vae_encoder.c) ======== */

/* A VAE (model.arch vae) opened for its encoder alone, to turn clips into their posterior's
 * moments once (latent shards): from a run directory, a checkpoint or a diffusers / ingot export,
 * as ig_model_open takes them. */
typedef struct ig_vae_encoder ig_vae_encoder;

typedef struct ig_vae_encoder_opts {
    int batch;         /* frames a pass encodes (>= 1; default 4) */
    int height, width; /* the largest frame it will encode */
} ig_vae_encoder_opts;

/* What opening it takes, in bytes: its weights in the act type and the activations of a pass of
 * batch frames of height x width on the backend (device = weights + acts), and on the host while
 * loading, the largest tensor twice in fp32, and once open a copy of the parameters in fp32 for
 * their checksum (host). */
typedef struct ig_vae_encoder_memory {
    uint64_t weights, acts, device, host;
} ig_vae_encoder_memory;

/* The memory of the VAE at path for o with act_size bytes an act element, from its files' shape
 * alone; *shape (may be NULL) its shape. A model that is not a VAE is IG_ERR_INVALID_ARG naming
 * what it is; frames whose sides the downsampling does not divide are refused with the numbers. */
ig_status ig_vae_encoder_plan(ig_ctx *ctx, const char *path, const ig_vae_encoder_opts *o,
                              size_t act_size, ig_vae_encoder_memory *out, ig_model_config *shape,
                              ig_err *err);
/* Opens the VAE at path on be: what it takes (ig_vae_encoder_plan) is held against what is free
 * before anything is loaded (as ig_text_encoder_open does) and refused with the figures when it
 * does not fit; weights that are not finite are refused. One thread at a time uses it. */
ig_status ig_vae_encoder_open(ig_vae_encoder **out, ig_ctx *ctx, ig_backend *be, const char *path,
                              const ig_vae_encoder_opts *o, ig_err *err);
void ig_vae_encoder_free(ig_vae_encoder *e); /* NULL is a no-op */
const ig_model_config *ig_vae_encoder_shape(const ig_vae_encoder *e);
/* What a latent model needs to know of it: C (latent channels), the pixels per latent position
 * along a side, scaling_factor and shift_factor. */
void ig_vae_encoder_factors(const ig_vae_encoder *e, int *C, int *downsample, double *scaling,
                            double *shift);
/* xxh3 of its parameters as fp32 (every tensor in the model's order): the same weights give the
 * same identity whether they came from a checkpoint or an export. */
ig_status ig_vae_encoder_identity(ig_vae_encoder *e, uint64_t *xxh3, ig_err *err);
/* N frames [N, H, W, 3] RGB24 (H x W within the opened size) to the posterior's moments
 * [N, h, w, 2C] (ig_model_vae_encode), batch frames a pass: each frame's result depends on that
 * frame and the pass's size only. */
ig_status ig_vae_encoder_encode(ig_vae_encoder *e, const uint8_t *frames, int N, int H, int W,
                                float *moments, ig_err *err);

/* ==== a frozen text encoder (model.arch t5; objectives/encode.c) ============================= */

/* A text encoder used frozen, as PixArt-alpha and Open-Sora condition on T5 v1.1: caption token
 * ids in, each caption's features [L, D] out (L its tokens, D the encoder's d_model). Opened from
 * a Hugging Face directory: config.json (model_type t5), model.safetensors or the shards of its
 * model.safetensors.index.json (an encoder-decoder T5ForConditionalGeneration file is read for its
 * encoder). Its tokenizer is the same directory's - ig_tokenizer_load (preprocess.h) of the
 * directory takes its spiece.model or tokenizer.json - and a caption's ids end with the
 * tokenizer's end-of-sequence id, as T5 is fed (IG_ENCODE_APPEND_EOS). */
typedef struct ig_text_encoder ig_text_encoder;

typedef struct ig_text_encoder_opts {
    int max_batch; /* captions encoded at once (the activations are sized for them); default 8 */
    int max_len;   /* the most tokens a caption may have; default 512 */
} ig_text_encoder_opts;

ig_text_encoder_opts ig_text_encoder_opts_default(void);

/* What opening an encoder takes, in bytes: its weights in the act type (4 bytes a parameter in
 * fp32: a T5-XXL encoder's 4.76 billion are 19 GB; 9.5 GB in bf16), the activations of max_batch
 * captions of max_len tokens, both on the backend (device = weights + acts), and on the host while
 * loading, the largest tensor twice in fp32 (host). */
typedef struct ig_text_encoder_memory {
    uint64_t weights, acts, device, host;
} ig_text_encoder_memory;

/* The memory of the encoder at path with o (NULL: the defaults) and act_size bytes per act element
 * (4: fp32, 2: bf16), from its config.json alone; *shape (may be NULL) its shape. Errors name the
 * file; a model that is not a text encoder is IG_ERR_INVALID_ARG, naming what it is. */
ig_status ig_text_encoder_plan(ig_ctx *ctx, const char *path, const ig_text_encoder_opts *o,
                               size_t act_size, ig_text_encoder_memory *out, ig_model_config *shape,
                               ig_err *err);

/* Opens the encoder at path on be (o NULL: the defaults). What it takes (ig_text_encoder_plan) is
 * held against what is free before anything is loaded - on the CPU everything against the memory
 * this process can take now (ig_memory_check), on a GPU the weights and activations against the
 * device's free memory and the loading buffers against the host's - and refused with the figures
 * when it does not fit. Then the files are checked (every tensor the encoder needs, with its
 * shape; the decoder's tensors of an encoder-decoder file ignored, any other tensor refused) and
 * loaded, converted from F32, BF16 or F16. One thread at a time uses an encoder. */
ig_status ig_text_encoder_open(ig_text_encoder **out, ig_ctx *ctx, ig_backend *be, const char *path,
                               const ig_text_encoder_opts *o, ig_err *err);
void ig_text_encoder_free(ig_text_encoder *e); /* NULL is a no-op */

/* The encoder's shape (its family and sizes: ig_model_describe names it), and D. */
const ig_model_config *ig_text_encoder_shape(const ig_text_encoder *e);
int ig_text_encoder_width(const ig_text_encoder *e);
/* What tells this encoder from another whose features a model was trained on (caption-feature
 * shards and the DiTs trained on them record it): xxh3 over the tensors of its files that it reads
 * (the decoder of an encoder-decoder file left out), by name - each name, dtype, shape and bytes
 * as stored - so that the same weights in one file or in shards hash alike, and another
 * checkpoint of the same shape (or the same weights in another dtype) does not. One pass over the
 * weights (about a second per 10 GB), computed on the first call. */
ig_status ig_text_encoder_identity(ig_text_encoder *e, uint64_t *weights_xxh3, ig_err *err);

/* Encodes n captions: caption i is lens[i] token ids at ids[i] (1 <= lens[i] <= max_len, every id
 * below the encoder's vocabulary: IG_ERR_INVALID_ARG naming the caption and the id otherwise,
 * before anything is computed); its features, fp32 [lens[i], D] row-major, are written to out[i]
 * (the caller's memory). Captions of different lengths go through together (up to max_batch at a
 * time, padded, the padding masked out of every attention), and each gets the features it gets
 * alone: on the CPU bit for bit, whatever the other captions, their number and the thread count
 * (each caption's rows are their own matrix products); on a GPU, as its kernels' choices allow. */
ig_status ig_text_encoder_encode(ig_text_encoder *e, size_t n, const int32_t *const *ids,
                                 const int *lens, float *const *out, ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_TRAIN_H */
