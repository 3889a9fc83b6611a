/* store.h - private to train/: the parameter store of a model part (store.c) - one backend buffer
 * of parameters, one of gradients, fp32 master weights for bf16 parameters, the gradient buckets of
 * data parallelism, ZeRO-2's gradient slots and ZeRO-3's pieces and windows - planned from the
 * part's tensor table and its layout, and reached only through these functions: the model (its
 * passes, its host copies), the optimizer and the checkpoints share them, and the ZeRO stage is
 * held here alone.
 *
 * The flat layout numbers every element of the part, bucket padding included (its elements
 * `flat`); a tensor's ig_model_tensor.offset and a bucket's off are in it. Without ZeRO-3 the
 * parameter buffer is that layout. With ZeRO-3 (FSDP's full sharding) it holds: the buckets of the
 * first and the last stage's tensors whole (embeddings, head: as FSDP's root unit, which stays
 * gathered through the step); then this rank's piece of each layer's bucket (one bucket per
 * layer); then two windows, into which a layer's pieces are all-gathered before its forward and
 * its backward (ig_store_use_layer), the next layer's while this one computes. A tensor's
 * parameters are at ig_store_param, in a window while its layer is gathered there (NULL when it
 * is not).
 *
 * The fp32 master weights (bf16 parameters): under any ZeRO stage over more than one data-parallel
 * rank they are this rank's pieces only, at the moments' offsets (the ZeRO paper's optimizer
 * state, DeepSpeed's stages 1-3, Megatron's distributed optimizer): the optimizer updates its
 * piece of the master weights, rounds it into its piece of the parameters, and the pieces are
 * all-gathered (ZeRO-1/2: into the parameters whole). Otherwise they are the flat layout whole.
 *
 * The gradients: each tensor's at its offset, except with ZeRO-2, where a bucket's gradients of
 * one micro-batch are kept only until they are reduce-scattered, in one of two working slots of
 * the largest bucket's size that the buckets take turns in (ig_store_grad_region; -1: a tied
 * tensor's bucket, whose gradient the head starts before its turn, in a region of its own).
 */
#ifndef INGOT_TRAIN_STORE_H
#define INGOT_TRAIN_STORE_H

#include "parallel/parallel.h"

typedef struct ig_part ig_part;
typedef struct ig_store ig_store;

/* A run of tensors whose gradients are reduced over the data-parallel group together. */
typedef struct ig_bucket {
    size_t t0, t1;   /* table indices [t0, t1) */
    uint64_t off, n; /* elements [off, off + n) of the flat layout; n a multiple of dp */
    uint64_t moff;   /* ZeRO: where this rank's piece (n / dp elements) sits in the moments */
    int tied;        /* a tied tensor, summed between the first and the last stage too */
    /* ZeRO-3: the layer whose tensors the bucket holds (-1: the first and the last stage's
     * tensors, kept whole on every rank), and where in the parameter buffer this rank's piece
     * of it is (elements) */
    int layer;
    uint64_t whole; /* where the whole bucket is in the parameter buffer (UINT64_MAX: nowhere) */
    uint64_t poff;
} ig_bucket;

/* Groups of tensors whose gradients become final together in a backward. */
typedef enum ig_grad_group { IG_GRADS_HEAD = -1, IG_GRADS_EMBEDDING = -2 } ig_grad_group;
/* Called with table indices [t0, t1) of a group. */
typedef ig_status (*ig_ready_fn)(void *user, size_t t0, size_t t1, ig_err *err);

/* Plans the store of a part's table (tensors[n]: each tensor's offset in the flat layout is set
 * here) with act_size bytes per act element: the buckets, ZeRO's pieces and windows. Nothing is on
 * a backend yet (ig_store_alloc). */
ig_status ig_store_plan(ig_store **out, ig_ctx *ctx, ig_model_tensor *tensors, size_t n,
                        const ig_part *p, size_t act_size, ig_err *err);
/* Its buffers on be (no gradients for a part opened for inference). */
ig_status ig_store_alloc(ig_store *s, ig_backend *be, ig_err *err);
void ig_store_free(ig_store *s); /* NULL is a no-op; waits for gathers in flight */

/* Elements of: the flat layout, the parameter buffer, the fp32 master weights, the gradients, and
 * the AdamW moments (the flat layout's, or this rank's ZeRO pieces). */
typedef struct ig_store_sizes {
    uint64_t flat, params, master, grads, moments;
} ig_store_sizes;
void ig_store_sizes_of(const ig_store *s, ig_store_sizes *out);
/* The ZeRO stage (parallel.zero; what shards over the data-parallel ranks when there are several)
 * and whether the parameters themselves are sharded (ZeRO-3 over more than one rank). */
int ig_store_zero(const ig_store *s);
int ig_store_zero3(const ig_store *s);
/* Whether no rank keeps the parameters' values whole, only its ZeRO pieces: ZeRO-3, or any ZeRO
 * stage over several ranks with bf16 parameters, whose fp32 master weights are the values and are
 * sharded with the moments. ig_store_read refuses them then; ig_store_read_pieces gives them. */
int ig_store_pieces_only(const ig_store *s);
/* The element type of the act-typed buffers in a collective. */
ig_comm_type ig_store_comm_type(const ig_store *s);

/* The buckets, in the order the backward finishes them (the head, the layers from the last, the
 * embeddings). */
size_t ig_store_n_buckets(const ig_store *s);
const ig_bucket *ig_store_bucket(const ig_store *s, size_t b);
/* Calls fn(user, t0, t1) for the runs of consecutive tensors of group g (a layer, IG_GRADS_HEAD:
 * the last stage's and a tied one there when not also first, IG_GRADS_EMBEDDING: the first
 * stage's and a tied one), in the order their gradients become final. */
ig_status ig_store_group_runs(const ig_store *s, int g, ig_ready_fn fn, void *user, ig_err *err);

/* Where things are (backend memory): tensor t's parameters (NULL: a ZeRO-3 layer not gathered)
 * and its gradient; the parameter and gradient buffers' element e of the flat layout (without
 * ZeRO-3 and ZeRO-2 respectively); the master weights' (NULL: none; kept whole: neither ZeRO nor
 * more than one data-parallel rank); this rank's piece of bucket b's parameters and master
 * weights. */
void *ig_store_param(const ig_store *s, size_t t);
void *ig_store_grad(const ig_store *s, size_t t);
void *ig_store_params_at(const ig_store *s, uint64_t e);
void *ig_store_grads_at(const ig_store *s, uint64_t e);
float *ig_store_master_at(const ig_store *s, uint64_t e);
void *ig_store_param_piece(const ig_store *s, const ig_bucket *b);
float *ig_store_master_piece(const ig_store *s, const ig_bucket *b);
/* ZeRO-2: bucket b's working region (0, 1: the slots; -1: the tied tensors') and a slot's
 * elements; 0 elements without ZeRO-2. */
int ig_store_grad_region(const ig_store *s, size_t b);
uint64_t ig_store_slot_elems(const ig_store *s);

/* ZeRO-3: layer l is about to be used (the stage driver's order; next: the layer after it, -1:
 * none): waits for its all-gather (starting it when it is not under way) and starts next's; a
 * no-op otherwise. */
ig_status ig_store_use_layer(ig_store *s, int l, int next, ig_err *err);
/* The parameters changed (the optimizer's update, a load): the windows are stale. */
ig_status ig_store_params_changed(ig_store *s, ig_err *err);
/* Seconds waited for ZeRO-3's gathers since the last call (which resets it). */
double ig_store_take_gather_wait(ig_store *s);

/* ZeRO-3's choice of windows, apart from the gathers (ig_store_use_layer follows it; the planner
 * counts the gathers of a step with it): win[w] the layer window w holds (-1: none), *last the
 * window the layer used last took. Layer l goes to the window that holds it or, when neither does,
 * is gathered into the one *last did not take (fetch[0] = that window, else -1); with prefetch,
 * next is then gathered into the other unless it holds it already (fetch[1], else -1). Updates win
 * and *last as the gathers leave them; returns l's window. */
int ig_zero3_windows(int win[2], int *last, int l, int next, int prefetch, int fetch[2]);

/* Host copies (fp32): tensor t's values from a host copy of the tensor alone (flat 0) or of the
 * flat layout (flat 1) into what this rank keeps of it (the parameters and the master weights);
 * the whole flat buffers (IG_MODEL_PARAMS: the master weights when there are; a read refused when
 * ig_store_pieces_only, a write keeps what this rank keeps); this rank's pieces of every bucket
 * in the moments' order (ZeRO: of the master weights when there are, else of the parameters). */
ig_status ig_store_upload_tensor(ig_store *s, size_t t, const float *f, int flat, ig_err *err);
ig_status ig_store_read(ig_store *s, ig_model_buffer which, float *out, ig_err *err);
ig_status ig_store_write(ig_store *s, ig_model_buffer which, const float *in, ig_err *err);
ig_status ig_store_read_pieces(ig_store *s, float *out, ig_err *err);
/* The sum of squares of what this rank keeps of tensor t's parameters; of all the gradients.
 * Queued on the backend (synchronise before trusting it). */
double ig_store_sum_squares(ig_store *s, size_t t);
double ig_store_grad_sum_squares(ig_store *s);
ig_status ig_store_zero_grads(ig_store *s, ig_err *err);

#endif
