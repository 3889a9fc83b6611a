/* gpt_internal.h - private to train/: the GPT model's state (tensor table, backend buffers, the
 * layout of a micro-batch's activations), shared by gpt_model.c (table, memory, init), gpt_pass.c
 * (forward and backward) and the trainer's parallel parts.
 *
 * A model is one rank's part of the whole: with tensor parallelism (tp ranks) it holds a slice of
 * each split tensor (c_attn by columns in its q, k and v blocks, c_fc by columns, the two c_proj
 * by rows, wte by vocabulary rows) and the whole of the others; with pipeline parallelism only
 * the layers [l0, l1) of its stage, the embedding on the first stage and the head (ln_f and the
 * tied wte again) on the last. Sequence parallelism shards the LayerNorm and residual
 * activations along the B * T token rows. One process training alone is the part tp 1, layers
 * [0, n_layer), first and last.
 */
#ifndef INGOT_GPT_INTERNAL_H
#define INGOT_GPT_INTERNAL_H

#include "parallel.h"
#include "train/train.h"

typedef enum ig_gpt_init {
    IG_INIT_ZERO = 0,
    IG_INIT_ONE,
    IG_INIT_NORMAL,    /* normal(0, 0.02) */
    IG_INIT_RESIDUAL,  /* normal(0, 0.02 / sqrt(2 n_layer)) */
    IG_INIT_EMBEDDING, /* normal(0, 0.02) on the vocabulary's rows, 0 on the padded ones */
} ig_gpt_init;

typedef struct ig_gpt_param_info {
    char name[64];
    ig_gpt_init init;
} ig_gpt_param_info;

/* The tensors of a layer, in Hugging Face's order. */
enum {
    L_LN1W,
    L_LN1B,
    L_QKVW,
    L_QKVB,
    L_PROJW,
    L_PROJB,
    L_LN2W,
    L_LN2B,
    L_FCW,
    L_FCB,
    L_FCPW,
    L_FCPB,
    L_COUNT
};

/* Which part of the whole model a model holds. */
typedef struct ig_gpt_part {
    int tp, tp_rank; /* tensor parallelism */
    int sp;          /* sequence parallelism (tp > 1) */
    int l0, l1;      /* the layers held */
    int first, last; /* holds the embedding / the head */
    int slots;       /* micro-batches whose activations are kept at once (1F1B: up to pp) */
    ig_group *tpg;   /* the tensor-parallel group (used when tp > 1) */
    /* data parallelism: the gradients are reduced in buckets of about bucket_elems elements,
     * each padded to a multiple of dp; with zero >= 1 this rank keeps the AdamW moments of its
     * 1/dp piece of each bucket only */
    int dp, dp_rank, zero;
    int pp; /* stages: the tied embedding is summed between the first and the last */
    uint64_t bucket_elems;
} ig_gpt_part;

/* A run of tensors whose gradients are reduced over the data-parallel group together. */
typedef struct ig_gpt_bucket {
    size_t t0, t1;   /* table indices [t0, t1) */
    uint64_t off, n; /* elements [off, off + n) of the flat buffers; n a multiple of dp */
    uint64_t moff;   /* ZeRO: where this rank's piece (n / dp elements) sits in the moments */
    int emb;         /* the tied embedding, summed between the first and the last stage too */
} ig_gpt_bucket;

/* Offsets (in elements) of one layer's activations within a slot: act type for the tensors, fp32
 * for the LayerNorm statistics and the log-sum-exp of attention. N = B * T rows; Nl = N / tp
 * rows with sequence parallelism (else N); Cl = C / tp. */
typedef struct ig_gpt_layer_acts {
    uint64_t ln1, ln1_mean, ln1_rstd; /* [Nl, C], [Nl], [Nl] */
    uint64_t ln1_full;                /* [N, C] sp: ln1 gathered over the group */
    uint64_t qkv;                     /* [N, 3 Cl] */
    uint64_t atty;                    /* [N, Cl] attention output, heads concatenated */
    uint64_t lse;                     /* [B, NH / tp, T] */
    uint64_t attproj;                 /* [Nl, C] */
    uint64_t res2;                    /* [Nl, C] residual after attention */
    uint64_t ln2, ln2_mean, ln2_rstd; /* [Nl, C], [Nl], [Nl] */
    uint64_t ln2_full;                /* [N, C] sp */
    uint64_t fch;                     /* [N, 4 Cl] MLP pre-activation, without its bias */
    uint64_t fch_gelu;                /* [N, 4 Cl] */
    uint64_t fcproj;                  /* [Nl, C] */
    uint64_t res3;                    /* [Nl, C] residual after the MLP (the layer's output) */
} ig_gpt_layer_acts;

typedef struct ig_gpt_acts {
    /* per slot (offsets within the slot) */
    uint64_t encoded; /* [Nl, C] the stage's input: embeddings, or the previous stage's output */
    ig_gpt_layer_acts *layer;         /* [l1 - l0] */
    uint64_t output;                  /* [Nl, C] a middle stage's output (the last layer's res3) */
    uint64_t lnf, lnf_mean, lnf_rstd; /* [Nl, C], [Nl], [Nl] */
    uint64_t lnf_full;                /* [N, C] sp */
    uint64_t logits;        /* [N, Vp / tp]; the backward overwrites them with their grads */
    uint64_t losses, dloss; /* [N] fp32 */
    uint64_t n_act, n_f32;  /* per slot */
    /* scratch shared by the slots (absolute offsets, after the slots) */
    uint64_t dres, dres_full, dln, dpartial, datty, dqkv, dfcg, dfch, partial; /* act */
    uint64_t rowmax, stats;                                                    /* fp32 */
    uint64_t act_total, f32_total;
} ig_gpt_acts;

struct ig_gpt {
    ig_ctx *ctx;
    ig_backend *be;
    ig_gpt_config cfg;
    ig_gpt_part part;
    int B, T;          /* the largest micro-batch the activations hold */
    int N, Nl, Cl, Vl; /* rows, rows held (sp), channels and vocabulary rows of this rank */
    ig_gpt_tensor *tensors;
    ig_gpt_param_info *info;
    size_t n_tensors;
    uint64_t n_params;
    int t_wte, t_wpe, t_layer0, t_lnf; /* table indices; -1 when not held */
    ig_gpt_bucket *buckets;            /* in the order the backward finishes them */
    size_t n_buckets;
    int doc_attention; /* of the staged micro-batches */
    /* Where each tensor's gradient is (elements into grads): its offset, except with ZeRO-2,
     * where the gradients are sharded: a bucket's gradients of one micro-batch are kept only
     * until they are reduce-scattered, in one of two working slots of the largest bucket's size
     * that the buckets take turns in (gslot[b]; -1: the tied embedding, whose gradient the head
     * starts before its turn, in a region of its own at the start). */
    uint64_t *goff;
    int *gslot;          /* per bucket: 0, 1, or -1 */
    uint64_t slot_elems; /* elements of a working slot */
    uint64_t n_grads;    /* elements of grads */
    /* backend buffers */
    void *params, *grads; /* [n_params] act type */
    float *master;        /* [n_params] fp32 master weights when the act type is bf16, else NULL */
    float *adam_m, *adam_v;
    uint64_t n_moments; /* elements of adam_m / adam_v (n_params, or this rank's ZeRO share) */
    void *act;          /* [acts.act_total] act type */
    float *f32;         /* [acts.f32_total] */
    int32_t *i32;       /* per slot: tokens [N], targets [N], document ids [N] (this rank's ids) */
    ig_gpt_acts acts;
    size_t as;            /* bytes per act element */
    int slot;             /* the slot the pass works on */
    int *slot_B, *slot_T; /* [slots]: the shape of the micro-batch staged in each slot */
    int32_t *h_i32;       /* [slots][3N] host staging */
    float *h_f32;         /* [slots][2N]: losses, then the mask of counted rows */
};

/* Creates the part of the model a rank holds (part NULL: the whole model on one process). */
ig_status ig_gpt_create_part(ig_gpt **out, ig_ctx *ctx, ig_backend *be, const ig_gpt_config *cfg,
                             int B, int T, uint64_t seed, const ig_gpt_part *part, ig_err *err);

/* Draws every held tensor's initial values into host[n_params] (fp32, table order): element i of
 * the global tensor NAME from (seed, NAME, i), whatever part of it this rank holds. */
ig_status ig_gpt_init_host(const ig_gpt *m, ig_ctx *ctx, uint64_t seed, float *host);

/* Calls fn(user, global, local, n) for each contiguous run of t's part: n elements at element
 * `global` of the whole tensor (row-major in global_shape) are at element `local` of the part. */
typedef void (*ig_gpt_run_fn)(void *user, uint64_t global, uint64_t local, uint64_t n);
void ig_gpt_tensor_runs(const ig_gpt_tensor *t, ig_gpt_run_fn fn, void *user);

/* The index of the tensor of layer l (a global layer index) and kind (L_*). */
static inline size_t ig_gpt_lt(const ig_gpt *m, int l, int which) {
    return (size_t)m->t_layer0 + (size_t)(l - m->part.l0) * L_COUNT + (size_t)which;
}

/* ---- pipeline stage passes (gpt_pass.c) --------------------------------------------------- */

/* Stages micro-batch tokens [B, T + 1] into slot: this rank's token ids (for its vocabulary slice),
 * targets, document ids, and the loss gradient of each row (grad_scale / counted rows; 0 for a
 * forward only). *counted: rows counted in the loss. */
ig_status ig_gpt_stage_batch(ig_gpt *m, int slot, const int32_t *tokens, int B, int T,
                             const ig_gpt_batch_opts *o, float grad_scale, uint64_t *counted,
                             ig_err *err);
/* The forward pass of this part on slot: from the embedding (first stage) or the received input
 * (ig_gpt_stage_input), through the layers, to the output (ig_gpt_stage_output) or the head's
 * losses (last stage; with_grad: the logits' gradient too). */
ig_status ig_gpt_stage_forward(ig_gpt *m, int slot, int with_grad, ig_err *err);
/* The backward pass of this part on slot: from the head (last stage) or the received gradient of
 * the output (ig_gpt_stage_dgrad), gradients added to the parameters' ones; the gradient of the
 * stage's input is left in ig_gpt_stage_dgrad. ready (may be NULL) is called with [t0, t1) table
 * indices each time a run of tensors has its final gradient of this pass. */
typedef ig_status (*ig_gpt_ready_fn)(void *user, size_t t0, size_t t1, ig_err *err);
ig_status ig_gpt_stage_backward(ig_gpt *m, int slot, ig_gpt_ready_fn ready, void *user,
                                ig_err *err);
/* Backend buffers of [Nl, C] act elements: a slot's input (to receive into), its output (to send),
 * and the gradient of the output / input (the same buffer: received into before a backward,
 * holding the input's gradient after it). */
void *ig_gpt_stage_input(ig_gpt *m, int slot);
void *ig_gpt_stage_output(ig_gpt *m, int slot);
void *ig_gpt_stage_dgrad(ig_gpt *m);
uint64_t ig_gpt_stage_elems(const ig_gpt *m); /* Nl * C */
/* The mean loss of slot's last forward (last stage). */
ig_status ig_gpt_stage_loss(ig_gpt *m, int slot, double *loss, ig_err *err);

/* The element type of the model's act-typed memory (parameters, gradients, activations) in a
 * collective: fp32, or bf16 (which only NCCL reduces: bf16 is a device backend's). */
static inline ig_comm_type ig_gpt_comm_type(const ig_gpt *m) {
    return m->as == 2 ? IG_COMM_BF16 : IG_COMM_F32;
}

#endif
