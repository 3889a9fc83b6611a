/* model.h - private to train/: a model as the trainer sees it, whatever its family - the family
 * (family.h), the part of the whole model this rank holds, the tensor table with its tags, and
 * its parameter store (store.h: the parameters, gradients, master weights, buckets and ZeRO's
 * pieces, reached through its functions). Also the activation memory the family lays out (per
 * micro-batch slot, then scratch) and the micro-batch staging every token family shares.
 *
 * A model is one rank's part of the whole: with tensor parallelism (tp ranks) it holds a slice of
 * each split tensor and the whole of the others; with pipeline parallelism only the layers
 * [l0, l1) of its stage, the first stage's tensors (embeddings) on the first stage and the last
 * stage's (the head) on the last, a tied tensor on both. Sequence parallelism shards the norm and
 * residual activations along the B * T token rows. One process training alone is the part tp 1,
 * layers [0, n_layer), first and last.
 *
 * Who uses what: the families (models/FAMILY/) fill the table and run the passes over the
 * buffers; the optimizer reduces and updates the store's buckets; the checkpoint code reads and
 * writes the tensors by their tags; none of them needs the others' internals.
 */
#ifndef INGOT_TRAIN_MODEL_H
#define INGOT_TRAIN_MODEL_H

#include "store.h"
#include "train/train.h"

typedef struct ig_family ig_family;

/* Which part of the whole model a model holds. */
struct ig_part {
    int tp, tp_rank; /* tensor parallelism */
    int sp;          /* sequence parallelism (tp > 1) */
    /* Ulysses' sequence parallelism (a family with ulysses): the micro-batch's token rows cut
     * into usp equal parts, part usp_rank here; all-to-alls over uspg around attention */
    int usp, usp_rank;
    ig_group *uspg;
    int l0, l1;      /* the layers held */
    int first, last; /* holds the first stage's tensors / the last stage's */
    int slots;       /* micro-batches whose activations are kept at once (1F1B: up to pp) */
    ig_group *tpg;   /* the tensor-parallel group (used when tp > 1) */
    /* data parallelism: the gradients are reduced in buckets of about bucket_elems elements,
     * each padded to a multiple of dp; with zero >= 1 a rank keeps the AdamW moments of its
     * 1/dp piece of each bucket only */
    int dp, dp_rank, zero;
    /* ZeRO-3 (zero 3, dp > 1): the parameters are sharded over dpg too, each layer all-gathered
     * before use (ig_store_use_layer); prefetch: the next layer's gather is started while this
     * one computes */
    ig_group *dpg;
    int prefetch;
    int pp; /* stages: a tied tensor is summed between the first and the last */
    uint64_t bucket_elems;
    int inference; /* forward passes only: no gradients, no fp32 master weights are kept */
    int recompute; /* ig_recompute: what the backward recomputes (the family's plan and passes) */
};

/* How a tensor's initial values are drawn: element i of the global tensor NAME from (seed, NAME,
 * i), whatever part of it a rank holds. */
typedef enum ig_init {
    IG_INIT_ZERO = 0,
    IG_INIT_ONE,
    IG_INIT_NORMAL,      /* normal(0, std) */
    IG_INIT_NORMAL_ROWS, /* normal(0, std) on the first init_rows rows, 0 on the others (the
                            padded vocabulary) */
    IG_INIT_UNIFORM,     /* uniform(-std, std) (Xavier's, std its bound) */
} ig_init;

/* A family's description of one tensor (its tags): what the trainer needs to place, split,
 * initialise, bucket, decay and save it. */
typedef struct ig_tensor_spec {
    char name[96];
    int ndim;
    int64_t shape[2]; /* global ([n] for a vector: shape[1] unused) */
    ig_place place;
    int layer;     /* IG_PLACE_LAYER: the global layer */
    int split_dim; /* -1: replicated over tp */
    int n_blocks;  /* 0 or 1: one block; else the blocks along split_dim, cut each into tp slices */
    int64_t block[IG_MAX_BLOCKS];
    int decay;
    ig_init init;
    float std;
    int64_t init_rows;
    int sp_partial; /* replicated, and its gradient is partial per tp rank under sp */
} ig_tensor_spec;

/* The activation memory a family asks for (elements): per micro-batch slot, and scratch shared by
 * the slots; act-typed, fp32, and int32 (token ids, targets, document ids). The losses of a slot
 * are fp32 io: [io_f32] per slot (a token family: per-row losses, then their gradients). */
typedef struct ig_act_sizes {
    uint64_t act, f32, i32, io_f32; /* per slot */
    uint64_t scratch_act, scratch_f32;
} ig_act_sizes;

struct ig_model {
    ig_ctx *ctx;
    ig_backend *be;
    const ig_family *fam;
    ig_model_config cfg;
    ig_part part;
    int B, T;  /* the largest micro-batch the activations hold */
    size_t as; /* bytes per act element */
    /* the tensor table, in the order of the parameter buffer */
    ig_model_tensor *tensors;
    ig_tensor_spec *specs;
    size_t n_tensors;
    ig_store *st; /* the parameters, gradients, master weights (store.h) */
    /* bytes of the store's buffers as the backend counted them when they were allocated */
    uint64_t store_bytes;
    /* activations */
    ig_act_sizes acts;
    void *act;            /* [slots * acts.act + acts.scratch_act] */
    float *f32;           /* [slots * (acts.f32 + acts.io_f32) + acts.scratch_f32] */
    int32_t *i32;         /* [slots * acts.i32] */
    int32_t *h_i32;       /* host staging: [slots * acts.i32] */
    float *h_f32;         /* host staging: [slots * acts.io_f32] */
    int slot;             /* the slot the pass works on */
    int *slot_B, *slot_T; /* [slots]: the shape of the micro-batch staged in each slot */
    int doc_attention;    /* of the staged micro-batches */
    void *fs;             /* the family's own state (family.h's create) */
    void *os;             /* what its objective keeps between micro-batches (objective.h) */
    /* who hears of final gradients during a backward (the optimizer's bucket launcher) */
    ig_ready_fn ready;
    void *ready_user;
};

/* Creates the part of the model a rank holds (part NULL: the whole model on one process). */
ig_status ig_model_create_part(ig_model **out, ig_ctx *ctx, ig_backend *be,
                               const ig_model_config *cfg, int B, int T, uint64_t seed,
                               const ig_part *part, ig_err *err);

/* What a part takes on its backend, in bytes, by what ig_model_create_part and ig_optim_create
 * allocate for it. */
typedef struct ig_part_memory {
    uint64_t params;    /* the parameters (act type) */
    uint64_t master;    /* fp32 master weights (act type bf16), else 0 */
    uint64_t grads;     /* the gradients (ZeRO-2: its working slots, and the reduced pieces) */
    uint64_t optim;     /* the AdamW moments, and the EMA when kept */
    uint64_t acts;      /* activations: every slot's, the scratch, the fp32 statistics, the ids */
    uint64_t acts_slot; /* of them, one micro-batch slot's */
} ig_part_memory;

/* The host side of the part (NULL: the whole model on one process) of cfg for micro-batches of
 * B x T with act_size bytes per act element (4: fp32; 2: bf16 with fp32 master weights): its
 * tensor table, its store's layout and the family's activation plan, allocating nothing on a
 * backend (zstd's ZSTD_estimateCCtxSize habit), for ig_model_memory (and the optimizer's
 * ig_optim_estimate); freed with ig_model_free. Errors as ig_model_create_part's. */
ig_status ig_model_plan(ig_model **out, ig_ctx *ctx, const ig_model_config *cfg, int B, int T,
                        const ig_part *part, size_t act_size, ig_err *err);
/* The memory ig_model_create_part allocates for a part, by buffer (optim: 0, the optimizer's). */
void ig_model_memory(const ig_model *m, ig_part_memory *out);

/* Calls fn(user, global, local, n) for each contiguous run of t's part: n elements at element
 * `global` of the whole tensor (row-major in global_shape) are at element `local` of the part. */
typedef void (*ig_tensor_run_fn)(void *user, uint64_t global, uint64_t local, uint64_t n);
void ig_tensor_runs(const ig_model_tensor *t, ig_tensor_run_fn fn, void *user);

/* Draws tensor i's initial values into out[numel] (fp32). */
void ig_model_init_tensor(const ig_model *m, ig_ctx *ctx, uint64_t seed, size_t i, float *out);

/* The stage a tensor lives on in a layout of pp stages whose stage s holds layers
 * [stage_layers[s], stage_layers[s + 1]) (a tied tensor: the first). */
int ig_tensor_stage(const ig_model_tensor *t, const int *stage_layers, int pp);

/* ---- for the families' passes --------------------------------------------------------------- */

/* Backend pointers of tensor t's parameters and gradients. */
static inline void *ig_model_param(const ig_model *m, size_t t) {
    return ig_store_param(m->st, t);
}
static inline void *ig_model_grad(const ig_model *m, size_t t) {
    return ig_store_grad(m->st, t);
}
/* The slot's activations (offsets within the slot), scratch (absolute), fp32 likewise. */
static inline void *ig_model_act(const ig_model *m, uint64_t off) {
    return (char *)m->act + ((uint64_t)m->slot * m->acts.act + off) * m->as;
}
static inline void *ig_model_scratch(const ig_model *m, uint64_t off) {
    return (char *)m->act + ((uint64_t)m->part.slots * m->acts.act + off) * m->as;
}
static inline float *ig_model_f32(const ig_model *m, uint64_t off) {
    return m->f32 + (uint64_t)m->slot * m->acts.f32 + off;
}
static inline float *ig_model_scratch_f32(const ig_model *m, uint64_t off) {
    return m->f32 + (uint64_t)m->part.slots * (m->acts.f32 + m->acts.io_f32) + off;
}
/* the slot's io fp32 (losses ...) and int32 memory */
static inline float *ig_model_io_f32(const ig_model *m, uint64_t off) {
    return m->f32 + (uint64_t)m->part.slots * m->acts.f32 + (uint64_t)m->slot * m->acts.io_f32 +
           off;
}
static inline int32_t *ig_model_i32(const ig_model *m, uint64_t off) {
    return m->i32 + (uint64_t)m->slot * m->acts.i32 + off;
}

/* Tells the listener (ig_model.ready) that the gradients of a group are final in this backward:
 * a layer (its global index), the head (IG_GRADS_HEAD: the last stage's tensors, and a tied
 * tensor there when this stage is not also the first) or the embedding (IG_GRADS_EMBEDDING: the
 * first stage's, and a tied tensor here). */
ig_status ig_model_ready(ig_model *m, int group, ig_err *err);

/* The element type of the model's act-typed memory in a collective: fp32, or bf16 (which only
 * NCCL reduces: bf16 is a device backend's). */
static inline ig_comm_type ig_model_comm_type(const ig_model *m) {
    return m->as == 2 ? IG_COMM_BF16 : IG_COMM_F32;
}

/* ---- building a family's tensor table ------------------------------------------------------- */

/* The specs a family's `tensors` hook writes: up to cap into out (out NULL: only counted). */
typedef struct ig_spec_list {
    ig_tensor_spec *out;
    size_t n, cap;
} ig_spec_list;

/* Appends the spec tmpl with its name from fmt and layer (snprintf(fmt, layer)) and its layer set;
 * returns the spec written, or NULL when only counting (or past cap). */
ig_tensor_spec *ig_spec_add(ig_spec_list *l, const char *fmt, int layer,
                            const ig_tensor_spec *tmpl);

#endif
