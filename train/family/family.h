/* family.h - private to train/, the interface of a model family (as Megatron-Core's schedule takes
 * a model and a forward-step function). A family is one folder, train/models/FAMILY/: its shape
 * (its own model.* keys and the struct they bind into, ig_model_config.own, which only it reads;
 * checks; comparison; manifest and Hugging Face fields), its tensor table with tags, its layout
 * checks, FLOPs, memory and bytes sent, its activations, the per-layer pieces the stage driver
 * (stage.c) runs, and what its objective (objective.h) asks of it; optionally Hugging Face import
 * and export and generation. train/models/families.c is the one list of them. The trainer's loop,
 * schedule, optimizer, checkpoints and planner call these and never name a family, and a family
 * folder includes only the headers meant for it, by room (family/: this one, act_plan.h,
 * objective.h, lm.h, tp_layers.h; formats/hf.h, parallel/stage.h, feed/feed.h and what they
 * include): the build's include wall (IG_TRAIN_FAMILY_API in CMakeLists.txt). Adding one:
 * docs/adding-a-family.md.
 */
#ifndef INGOT_TRAIN_FAMILY_H
#define INGOT_TRAIN_FAMILY_H

#include <jansson.h>

#include <stddef.h>
#include <string.h>

#include "act_plan.h"
#include "objective.h"
#include "formats/safetensors.h"

/* A family's own model.* key, bound into its own struct S (stored in ig_model_config.own): the
 * configuration file or --set only, no flag. */
#define IG_OWN_KEY(p, ty, S, F, def, lo, hi, h)                                                    \
    {                                                                                              \
        .path = (p), .type = (ty), .default_val = (def), .help = (h), .flag = "",                  \
        .offset = offsetof(S, F), .size = sizeof(((S *)0)->F), .is_signed = 1, .min = (lo),        \
        .max = (hi)                                                                                \
    }

/* A family's own struct in a shape, by value (get) and back (set): a copy, never a pointer into
 * ig_model_config.own. */
#define IG_OWN_GET(S, c) ig_own_get_##S(c)
#define IG_DEFINE_OWN(S)                                                                           \
    _Static_assert(sizeof(S) <= IG_MODEL_OWN_BYTES, #S " does not fit ig_model_config.own");       \
    static inline S ig_own_get_##S(const ig_model_config *c) {                                     \
        S s;                                                                                       \
        memcpy(&s, c->own, sizeof s);                                                              \
        return s;                                                                                  \
    }                                                                                              \
    static inline void ig_own_set_##S(ig_model_config *c, const S *s) {                            \
        memcpy(c->own, s, sizeof *s);                                                              \
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
    /* perm 1: the file's dimensions in another order than the tensor's (with ndim and shape, the
     * file's): the tensor holds them in the order order[0], order[1], ... (a convolution's weight
     * [out, in, kh, kw] in a file, [out, kh, kw, in] in ingot: order {0, 2, 3, 1}); import and
     * export transpose */
    int perm;
    int order[5];
} ig_hf_piece;

/* What one micro-batch of a part sends per group (plan_comm.c's accounting, parallel.h's ring
 * bytes): tp, sp (Ulysses) and pp, for micro-batches of B x T with e bytes per act element. */
typedef struct ig_comm_micro {
    uint64_t tp, sp, pp;
} ig_comm_micro;

struct ig_family {
    const char *arch; /* model.arch (the one list's name for it) */
    const char *what; /* one line: "GPT-2: learned positions, LayerNorm, GeLU, tied embeddings" */
    const ig_objective *objective; /* what it trains for (objective.h) */
    const void *for_objective;     /* what that objective asks of it (objective.h's ig_*_model) */
    const void *preset; /* the options this model.arch fixes (the family's own business) */
    /* positions are computed for any length (T may exceed seq_len; dit's sin-cos tables) */
    int any_length;
    /* the passes run Ulysses' sequence parallelism (ig_part.usp > 1) */
    int ulysses;
    double ema_default; /* ema.decay when the configuration leaves it to the family */
    /* its own model.* keys (beyond those every family has), bound into its own struct in
     * ig_model_config.own */
    const ig_cfg_key *keys;
    size_t n_keys;
    /* the backend operations its passes call (a backend without one is refused at creation) */
    const ig_op *ops;
    size_t n_ops;

    /* Fills the defaults and derived fields of c (padded_vocab, its own, ...) and checks the
     * shape; errors name the key. A checked shape holds no pointer (a list key is parsed). */
    ig_status (*check)(ig_model_config *c, ig_err *err);
    /* The first of its own keys whose value differs between two of its shapes ("" when none). */
    const char *(*differs)(const ig_model_config *a, const ig_model_config *b);
    /* Completes c from what the data says (a vocabulary left 0, the captions' tokenizer) and
     * checks it against the data; NULL: nothing to take. */
    ig_status (*fit)(ig_model_config *c, const ig_data_facts *f, ig_err *err);
    /* What a sample can be conditioned on (IG_COND_* of train.h; NULL: nothing). */
    int (*conditions)(const ig_model_config *c);
    /* Refuses a tensor-parallel size the shape does not allow (heads, kv heads, vocabulary), with
     * the numbers. */
    ig_status (*check_layout)(const ig_model_config *c, int tp, ig_err *err);
    uint64_t (*num_params)(const ig_model_config *c);
    /* the family's part of ig_model_describe's line (after the layers, heads and width) */
    void (*describe)(const ig_model_config *c, char *buf, size_t cap);
    double (*flops_per_token)(const ig_model_config *c, int T);
    /* What its passes send per micro-batch of B x T tokens on part p with e bytes an element
     * (recompute: ig_recompute): tensor-parallel, Ulysses' and pipeline bytes as its layers call
     * the collectives (plan_comm.c adds the data-parallel ones, which the optimizer sends). */
    ig_comm_micro (*comm_micro)(const ig_model_config *c, const ig_part *p, int B, int T,
                                uint64_t e, int recompute);

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

    /* the passes, piece by piece (the stage driver runs them) */
    const ig_stage_hooks *stage;
    /* the slot's mean loss after its forward (the last stage's; the objective's loss as the head
     * computed it) */
    ig_status (*loss)(ig_model *m, int slot, double *loss, ig_err *err);
    void (*stage_io)(ig_model *m, int slot, ig_stage_io *io);

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
    /* a diffusers model's config.json has no model_type: its "_class_name" names the family
     * (NULL: none), and the weights in a directory are hf_weights (NULL: model.safetensors) */
    const char *hf_class_name;
    const char *hf_weights;
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

/* The one list (train/models/families.c): the families by index (ig_model_config.arch; NULL past
 * the last), by model.arch, and by a Hugging Face config.json's model_type (NULL: unknown). */
const ig_family *ig_family_of(int arch);
const ig_family *ig_family_find(const char *arch);
const ig_family *ig_family_of_hf(const char *model_type);
int ig_family_index(const ig_family *f);

#endif
