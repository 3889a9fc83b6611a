/* family.h - private to train/: what a model family provides (as Megatron-Core's schedule takes a
 * model and a forward-step function): its config keys, its shape checks, its tensor table with
 * tags, its layout checks, FLOPs and memory, the stage operations of the 1F1B schedule, and
 * optionally Hugging Face import/export and generation. A family is one folder,
 * train/models/FAMILY/, with a model file (the table and the checks), a pass file (forward and
 * backward) and its kernels in kernels/; registry.c lists the families. The trainer's loop,
 * schedule, optimizer and checkpoint code call these and never name a family.
 */
#ifndef INGOT_TRAIN_FAMILY_H
#define INGOT_TRAIN_FAMILY_H

#include <jansson.h>

#include <stddef.h>

#include "model.h"
#include "safetensors.h"

/* A model.* key of a family, bound into ig_train_config's model (config file or --set only). */
#define IG_MODEL_KEY(p, ty, F, def, lo, hi, h)                                                     \
    {                                                                                              \
        .path = (p), .type = (ty), .default_val = (def), .help = (h), .flag = "",                  \
        .offset = offsetof(ig_train_config, model.F),                                              \
        .size = sizeof(((ig_train_config *)0)->model.F), .is_signed = 1, .min = (lo), .max = (hi)  \
    }

/* What crosses a pipeline stage boundary for a slot: up to 4 act-typed tensors (a language
 * model's residual stream; a diffusion model's tokens and conditioning). The schedule receives
 * into in[i] before a forward and sends out[i] after it; before a backward it receives the
 * gradient of out[i] into grad[i], and after it sends grad[i], which then holds the gradient of
 * in[i] (one buffer for both, shared by the slots). */
typedef struct ig_stage_io {
    int n;
    void *in[4], *out[4], *grad[4];
    uint64_t elems[4];
} ig_stage_io;

/* ---- activation places: what a family's plan keeps per slot and what it recomputes ------------
 * A plan gives each activation of a layer a place: an offset within the slot (kept from the
 * forward to the backward), or, tagged IG_ACT_SCRATCH, an offset within the scratch the slots
 * share, in a region of one layer's worth that every layer reuses (what the backward recomputes
 * under train.recompute; ig_part.recompute). Which one depends on the activation's kind:
 *   IG_ACT_BOUNDARY  a layer's output, the next layer's input: always kept
 *   IG_ACT_LAYER     anything else a layer computes (GEMM outputs, norms, statistics): kept
 *                    unless full, which runs the layer's forward again from its kept input
 *   IG_ACT_CORE      the attention core's output and its log-sum-exp: kept only with none
 *                    (selective recomputes them from the kept q|k|v, Korthikanti et al. 2022)
 * Every offset, kept or not, is a multiple of IG_ACT_ALIGN elements (256 bytes of bf16), so that
 * every act-typed buffer is 256-byte aligned whatever the mode: cuBLASLt picks its algorithm by
 * the operands' alignment (cuda_matmul.cu), and a GEMM must pick the same one in every mode for
 * the modes to give the same bits. */
#define IG_ACT_SCRATCH ((uint64_t)1 << 63)
#define IG_ACT_ALIGN   128

typedef enum ig_act_kind { IG_ACT_BOUNDARY = 0, IG_ACT_LAYER, IG_ACT_CORE } ig_act_kind;

/* A plan being laid out: the slot's elements so far (act type, fp32), and the recomputed region's
 * for the layer being laid out, and its largest over the layers. */
typedef struct ig_act_plan {
    int recompute; /* ig_recompute */
    uint64_t act, f32;
    uint64_t layer_act, layer_f32;
    uint64_t region_act, region_f32;
} ig_act_plan;

/* n elements at *at (rounded up to IG_ACT_ALIGN); returns where they start. */
static inline uint64_t ig_act_take(uint64_t *at, uint64_t n) {
    uint64_t o = *at;
    *at += (n + IG_ACT_ALIGN - 1) / IG_ACT_ALIGN * IG_ACT_ALIGN;
    return o;
}
/* whether an activation of kind k is kept per slot under recompute r */
static inline int ig_act_kept(int r, ig_act_kind k) {
    return k == IG_ACT_BOUNDARY || r == IG_RECOMPUTE_NONE ||
           (r == IG_RECOMPUTE_SELECTIVE && k == IG_ACT_LAYER);
}
/* The place of a layer's activation of n act elements (fp32: ig_act_place_f32) of kind k. */
static inline uint64_t ig_act_place(ig_act_plan *pl, ig_act_kind k, uint64_t n) {
    if (ig_act_kept(pl->recompute, k)) return ig_act_take(&pl->act, n);
    uint64_t o = ig_act_take(&pl->layer_act, n);
    if (pl->layer_act > pl->region_act) pl->region_act = pl->layer_act;
    return o | IG_ACT_SCRATCH;
}
static inline uint64_t ig_act_place_f32(ig_act_plan *pl, ig_act_kind k, uint64_t n) {
    if (ig_act_kept(pl->recompute, k)) return ig_act_take(&pl->f32, n);
    uint64_t o = ig_act_take(&pl->layer_f32, n);
    if (pl->layer_f32 > pl->region_f32) pl->region_f32 = pl->layer_f32;
    return o | IG_ACT_SCRATCH;
}
/* The next layer's recomputed activations start over at the region's start. */
static inline void ig_act_next_layer(ig_act_plan *pl) {
    pl->layer_act = pl->layer_f32 = 0;
}
/* The backend pointer of a place: the slot's (m->slot) or the scratch's. */
static inline void *ig_model_at(const ig_model *m, uint64_t place) {
    return place & IG_ACT_SCRATCH ? ig_model_scratch(m, place & ~IG_ACT_SCRATCH)
                                  : ig_model_act(m, place);
}
static inline float *ig_model_at_f32(const ig_model *m, uint64_t place) {
    return place & IG_ACT_SCRATCH ? ig_model_scratch_f32(m, place & ~IG_ACT_SCRATCH)
                                  : ig_model_f32(m, place);
}

/* What a family reads: token sequences (a language model) or video clips (a diffusion model). */
typedef enum ig_input_kind { IG_INPUT_TOKENS = 0, IG_INPUT_CLIPS } ig_input_kind;

/* One micro-batch, as a family's stage_batch receives it: tokens [B, T + 1] with their options,
 * or clips. */
typedef struct ig_stage_input {
    const int32_t *tokens;
    int B, T;
    const ig_batch_opts *bo;
    const ig_clip_input *clips;
} ig_stage_input;

/* What a family computes for one micro-batch's pass over its part, piece by piece: the stage
 * driver (stage.c) calls these in its one order - the loop over the layers, ZeRO-3's gathers,
 * full recomputation's rerun and the gradient-ready groups are the driver's, never a hook's. Every
 * hook works on the slot m->slot (the driver sets it) and reads the micro-batch's shape from
 * m->slot_B / m->slot_T. NULL where marked optional. */
typedef struct ig_stage_hooks {
    /* forward */
    ig_status (*embed_forward)(ig_model *m, ig_err *err); /* the first stage's input */
    /* after the embedding, on every stage, before the layers (optional) */
    ig_status (*begin)(ig_model *m, ig_err *err);
    ig_status (*layer_forward)(ig_model *m, int l, ig_err *err); /* layer l (global index) */
    /* a middle stage: what crosses the boundary (optional) */
    ig_status (*stage_output)(ig_model *m, ig_err *err);
    /* the last stage: the head and the loss (with_grad: and the loss's gradient) */
    ig_status (*head_forward)(ig_model *m, int with_grad, ig_err *err);
    /* backward */
    ig_status (*backward_begin)(ig_model *m, ig_err *err); /* optional */
    ig_status (*head_backward)(ig_model *m, ig_err *err);  /* the last stage */
    /* full recomputation: layer l's forward again from its kept input, up to what its backward
     * reads */
    ig_status (*layer_recompute)(ig_model *m, int l, ig_err *err);
    /* layer l's backward (selective recomputation is the layer's own business) */
    ig_status (*layer_backward)(ig_model *m, int l, ig_err *err);
    /* after the layers, before the embedding (optional) */
    ig_status (*backward_end)(ig_model *m, ig_err *err);
    ig_status (*embed_backward)(ig_model *m, ig_err *err); /* the first stage */
} ig_stage_hooks;

/* A piece of a tensor in a Hugging Face file (hf_pieces). */
typedef struct ig_hf_piece {
    char name[128], alt[128];
    int64_t row0, rows;
    /* the file's shape when it is not [rows, cols] (0: it is), e.g. a convolution's weight
     * [D, 3, pt, ph, pw] for a linear layer's [D, 3 pt ph pw]: the same elements in order */
    int ndim;
    int64_t shape[5];
} ig_hf_piece;

struct ig_family {
    const char *arch; /* model.arch */
    ig_model_arch id;
    const char *what; /* one line: "GPT-2: learned positions, LayerNorm, GeLU, tied embeddings" */
    ig_input_kind input;
    /* positions are computed for any length (T may exceed seq_len; dit's sin-cos tables) */
    int any_length;
    /* the passes run Ulysses' sequence parallelism (ig_part.usp > 1) */
    int ulysses;
    double ema_default; /* ema.decay when the configuration leaves it to the family */
    /* its own model.* keys (beyond those every family has), bound into ig_train_config */
    const ig_cfg_key *keys;
    size_t n_keys;
    /* the backend operations its passes call (a backend without one is refused at creation) */
    const ig_op *ops;
    size_t n_ops;

    /* Fills the defaults and derived fields of c (padded_vocab, ...) and checks the shape;
     * errors name the key. */
    ig_status (*check)(ig_model_config *c, ig_err *err);
    /* Refuses a tensor-parallel size the shape does not allow (heads, kv heads, vocabulary), with
     * the numbers. */
    ig_status (*check_layout)(const ig_model_config *c, int tp, ig_err *err);
    uint64_t (*num_params)(const ig_model_config *c);
    /* the family's part of ig_model_describe's line (after the keys every family has); NULL: none
     */
    void (*describe)(const ig_model_config *c, char *buf, size_t cap);
    double (*flops_per_token)(const ig_model_config *c, int T);

    /* The tensor table of a part, in the order of the parameter buffer (embeddings, the layers in
     * order, the head): writes up to cap specs into out (out NULL: only counts), returns the
     * count. The backward must finish the groups in the reverse order (head, layers from the
     * last, embeddings), which is what the gradient buckets follow. */
    size_t (*tensors)(const ig_model_config *c, const ig_part *p, ig_tensor_spec *out, size_t cap);
    /* The activation memory of micro-batches of B x T on part p, and (create) the family's own
     * state m->fs: the offsets the passes use. plan must not allocate: it is the memory estimate
     * as well. */
    void (*plan)(const ig_model_config *c, const ig_part *p, int B, int T, ig_act_sizes *out);
    ig_status (*create)(ig_model *m, ig_err *err);
    void (*destroy)(ig_model *m);

    /* The stage operations on a slot (ig_model.slot is set by them). */
    ig_status (*stage_batch)(ig_model *m, int slot, const ig_stage_input *in, float grad_scale,
                             uint64_t *counted, ig_err *err);
    /* the passes, piece by piece (the stage driver runs them) */
    const ig_stage_hooks *stage;
    ig_status (*loss)(ig_model *m, int slot, double *loss, ig_err *err);
    void (*stage_io)(ig_model *m, int slot, ig_stage_io *io);
    /* Clips: the tokens of a clip of F x H x W (refused with the numbers when the patches do not
     * divide it), and the last forward's prediction downloaded as [B, F, H, W, 3] (NULL: none). */
    ig_status (*clip_tokens)(const ig_model_config *c, int F, int H, int W, int *tokens,
                             ig_err *err);
    ig_status (*output)(ig_model *m, int slot, float *out, ig_err *err);

    /* The family's own fields of c in a checkpoint manifest's "model" object (n_layer, n_head,
     * d_model, seq_len, vocab_size and arch are written by the checkpoint code), and back. */
    ig_status (*to_json)(const ig_model_config *c, json_t *model, ig_err *err);
    ig_status (*from_json)(json_t *model, ig_model_config *c, const char *file, ig_err *err);

    /* Hugging Face (hf_model_type NULL: none). The family is chosen by config.json's model_type;
     * hf_config reads the shape from the parsed config.json (strictly: a field ingot cannot
     * honour is refused), hf_write_config makes one; hf_pieces maps a tensor (whole, whatever part
     * a rank holds) to the file's tensors: its global rows [row0, row0 + rows) are the tensor
     * `name` (or `alt`, the name in older files) of [rows, cols] (rows past the last piece are
     * padding: 0 on import, dropped on export); hf_ignored names the file's tensors a model does
     * not use (buffers such as a causal mask). hf_from_tensors (may be NULL) reads the shape of a
     * model.safetensors without a config.json. */
    const char *hf_model_type;
    ig_status (*hf_config)(json_t *config, const char *file, ig_model_config *out, int32_t *eod,
                           ig_err *err);
    json_t *(*hf_write_config)(const ig_model_config *c, int32_t eod);
    size_t (*hf_pieces)(const ig_model_config *c, const ig_tensor_spec *t, ig_hf_piece *out,
                        size_t cap);
    int (*hf_ignored)(const char *name);
    ig_status (*hf_from_tensors)(const ig_st_file *f, const char *file, ig_model_config *out,
                                 ig_err *err);

    /* Generation with a KV cache (NULL: none): a session of up to Tmax positions, into which
     * tokens are fed n at a time from position pos0; after each feed the logits of the last
     * position are in *logits (host, padded_vocab floats, valid until the next call). */
    ig_status (*gen_open)(ig_model *m, int Tmax, void **session, ig_err *err);
    ig_status (*gen_feed)(void *session, const int32_t *tokens, int n, int pos0,
                          const float **logits, ig_err *err);
    void (*gen_close)(void *session);
};

/* ---- what the language-model families share (lm.c) -------------------------------------------
 * A token family's slot holds int32 [N] input ids (this rank's vocabulary slice: another rank's
 * -1), [N] targets (likewise), [N] document ids; its io fp32 [N] per-row losses then [N] their
 * gradients. */

/* Stages tokens [B, T + 1] into slot: ids, targets, document ids, and the gradient of each row's
 * loss (grad_scale / counted rows; 0 for a forward only). *counted: rows counted in the loss. */
ig_status ig_lm_stage_batch(ig_model *m, int slot, const ig_stage_input *in, float grad_scale,
                            uint64_t *counted, ig_err *err);
/* The mean loss over the counted rows of the slot's last forward pass. */
ig_status ig_lm_loss(ig_model *m, int slot, double *loss, ig_err *err);
/* What a decoder's stage passes on: one residual stream of Nl x C (act offsets within the slot,
 * encoded and output; dres in the scratch). */
void ig_lm_stage_io(ig_model *m, int slot, uint64_t encoded, uint64_t output, uint64_t dres,
                    ig_stage_io *io);

/* A generation session's memory: per layer a key and a value cache of Tmax rows (kv_row elements
 * each), the family's activations (act elements, f32 floats), the fed tokens and a host row of
 * logits. A family's session struct starts with one. */
typedef struct ig_lm_gen {
    ig_model *m;
    int Tmax;
    uint64_t kv_row;
    void *kv, *act;
    float *f32, *host;
    int32_t *tok;
    void *logits; /* one row of padded_vocab, after the family's activations */
} ig_lm_gen;

ig_status ig_lm_gen_alloc(ig_lm_gen *g, ig_model *m, int Tmax, uint64_t kv_row, uint64_t act,
                          uint64_t f32, ig_err *err);
void ig_lm_gen_release(ig_lm_gen *g);
/* Layer l's key (v 0) or value (v 1) cache [Tmax, kv_row]. */
void *ig_lm_gen_cache(const ig_lm_gen *g, int l, int v);
/* Uploads the n tokens to feed. */
ig_status ig_lm_gen_tokens(ig_lm_gen *g, const int32_t *tokens, int n, ig_err *err);
/* The n new rows of packed qkv [(NH + 2 NKV) hs each, act type] at positions pos0..: their query
 * heads into q [n, NH hs] and their key and value heads into the caches kc, vc at rows pos0..,
 * queued on the backend (no host round trip). */
ig_status ig_lm_kv_append(ig_model *m, const void *qkv, int n, int pos0,
                          const ig_attention_shape *s, void *q, void *kc, void *vc, ig_err *err);
/* The logits of the last of n normed rows hn [n, C] through the output layer head [Vp, C]: into
 * the host row *logits. */
ig_status ig_lm_gen_logits(ig_lm_gen *g, const void *hn, int n, const void *head,
                           const float **logits, ig_err *err);

/* The families (families.c), by ig_model_arch, and by name (NULL: unknown). */
const ig_family *ig_family_of(int arch);
const ig_family *ig_family_find(const char *arch);
/* The family of a Hugging Face config.json's model_type (NULL: none). */
const ig_family *ig_family_of_hf(const char *model_type);

#endif
