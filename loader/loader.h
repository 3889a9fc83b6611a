/* loader.h - the public API of ingot's loaders: an infinite, prefetching, resumable loader of
 * micro-batches for one data-parallel rank, over any sample source (the GPT sample index, a
 * weighted blend, later video clips).
 *
 * The sample stream. A source holds `num_samples` samples of `seq_len + 1` int32 tokens. The loader
 * sees an infinite stream of global samples g = 0, 1, 2, ...: it is cut into blocks of
 * `block_size` samples (the size of block 0), and g is sample g % block_size of block
 * g / block_size. Block 0 is the source as built (for the GPT index: exactly Megatron-Core's
 * order); block b >= 1 is made by the caller's factory with an order derived from the seed and b
 * (for the GPT index: the same index rebuilt with a seed derived from the seed and b), so the
 * loader never runs out of data and never repeats an order.
 *
 * The distributed proxy sampler (Megatron's MegatronPretrainingSampler layout). Let
 * B = micro_batch, dp = data-parallel size, A = grad_accum and G = B * dp * A (the global batch).
 * Micro-batch k of the whole job (k = 0, 1, ...) covers the global samples [k*B*dp, (k+1)*B*dp);
 * rank r takes its slice [k*B*dp + r*B, k*B*dp + (r+1)*B). Step s is made of micro-batches
 * k = s*A .. s*A + A - 1 (micro index m = k % A). Hence the union over ranks and micro-batches of
 * step s is exactly the samples [s*G, (s+1)*G) in order, whatever dp is: changing dp (with G
 * fixed) keeps the data order.
 *
 * Resume. The loader's whole state is the number of global samples consumed plus the identity of
 * the index (a 64-bit key). After a rank has taken micro-batch k, consumed = (k+1)*B*dp: every
 * rank agrees on it. A loader created from that state yields exactly the batches an uninterrupted
 * loader would; a loader with another dp (and the same G) can resume from any step boundary.
 *
 * Prefetch. `prefetch_threads` background threads fill a ring of `prefetch_depth` micro-batches
 * ahead of the consumer, in order (condition variables, no busy waiting). An error from the
 * source is returned by the ig_loader_next that would have returned that batch, and from then on
 * by every call. ig_loader_free stops the threads at any time (the threads finish the sample they
 * are reading) and joins them.
 */
#ifndef INGOT_LOADER_H
#define INGOT_LOADER_H

#include "core/core.h"
#include "dataset/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== sample sources ======================================================================== */

/* A read-only random-access collection of samples of seq_len + 1 int32 tokens. `get` must be
 * safe to call from several threads at once. `free` (may be NULL) releases self; the loader
 * calls it for the blocks it made once it no longer needs them. */
typedef struct ig_sample_source {
    uint64_t (*num_samples)(void *self);
    /* Writes sample i (i < num_samples) to out[0 .. seq_len]. */
    ig_status (*get)(void *self, uint64_t i, int32_t *out, ig_err *err);
    /* Optional (may be NULL): writes samples i .. i + n - 1 (i + n <= num_samples) to n consecutive
     * rows of seq_len + 1 tokens at out, exactly as n calls of get would; faster when the source
     * can read ahead. On an error the loader reads the rows again with get to tell which failed. */
    ig_status (*get_rows)(void *self, uint64_t i, uint32_t n, int32_t *out, ig_err *err);
    void (*free)(void *self);
    void *self;
    uint32_t seq_len; /* tokens per sample, minus the one shared with the next sample */
    uint64_t key;     /* identity of the index behind it (e.g. the index cache key); 0: unknown */
    /* Samples of bytes instead of tokens (e.g. a micro-batch of video clips, the clip loader's):
     * sample_bytes > 0 and get_bytes in place of get (and get_rows): writes sample i, at most
     * sample_bytes bytes, to out. seq_len is then free for the source's own use. */
    size_t sample_bytes;
    ig_status (*get_bytes)(void *self, uint64_t i, void *out, ig_err *err);
} ig_sample_source;

/* Builds block `block` of the infinite stream into *out (block 0: the source as built). Must be
 * deterministic in (its user data, block), and safe to call from several threads at once (for
 * different blocks). Every block must have the seq_len of block 0 and at least as many samples. */
typedef ig_status (*ig_block_fn)(void *user, uint64_t block, ig_sample_source *out, ig_err *err);

/* ==== loader ================================================================================ */

typedef struct ig_loader_opts {
    ig_block_fn make_block; /* required */
    void *block_user;       /* passed to make_block; must outlive the loader */
    uint32_t micro_batch;   /* B: samples per micro-batch on one rank; default 1 */
    uint32_t grad_accum;    /* A: micro-batches per step on one rank; default 1 */
    uint32_t dp;            /* data-parallel size; default 1 */
    uint32_t rank;          /* this loader's data-parallel rank, < dp; default 0 */
    int prefetch_threads;   /* background threads; 0: fill batches in ig_loader_next; default 2 */
    int prefetch_depth;     /* micro-batches filled ahead (ring size, >= 1); default 4 */
} ig_loader_opts;

ig_loader_opts ig_loader_opts_default(void);

/* The whole state of a loader: what to save in a checkpoint. */
typedef struct ig_loader_state {
    uint64_t consumed_samples; /* global samples consumed by all ranks together */
    uint64_t index_key;        /* ig_sample_source.key of block 0 */
} ig_loader_state;

/* One micro-batch, owned by the loader: valid until the next ig_loader_next or ig_loader_free. */
typedef struct ig_batch {
    const int32_t *tokens;      /* [micro_batch, seq_len + 1], row-major; NULL for byte samples */
    const void *data;           /* the rows as bytes: [micro_batch][sample_bytes] */
    size_t sample_bytes;        /* bytes of a row */
    const uint64_t *sample_ids; /* [micro_batch] global sample ids g (block = g / block_size) */
    uint64_t step;              /* global step s */
    uint64_t micro_index;       /* k: micro-batch of the whole job (step * A + micro) */
    uint32_t micro;             /* m: micro-batch within the step, < grad_accum */
    uint32_t rank;
    uint32_t micro_batch; /* rows */
    uint32_t seq_len;     /* a row holds seq_len + 1 tokens */
} ig_batch;

typedef struct ig_loader ig_loader;

/* Creates a loader. Builds block 0 at once (in the calling thread) to learn seq_len, the block
 * size and the index key. start (may be NULL: from the beginning) is a saved state: its key must
 * match block 0's and consumed_samples must be a multiple of micro_batch * dp (a step boundary,
 * consumed = s * G, always is). Starts the prefetch threads. Not thread-safe: one consumer. */
ig_status ig_loader_create(ig_loader **out, ig_ctx *ctx, const ig_loader_opts *opts,
                           const ig_loader_state *start, ig_err *err);
/* Stops the threads (at any time, also while they are filling batches), frees every block the
 * loader made and the loader. NULL is a no-op. */
void ig_loader_free(ig_loader *ld);

/* The next micro-batch of this rank. Blocks until it is ready. On error (from the source or a
 * block factory) returns it, and returns it again on every later call. */
ig_status ig_loader_next(ig_loader *ld, ig_batch *out, ig_err *err);

/* The state after the batches returned so far (resuming from it yields the next one). */
ig_loader_state ig_loader_state_get(const ig_loader *ld);

uint32_t ig_loader_seq_len(const ig_loader *ld);
uint64_t ig_loader_block_size(const ig_loader *ld);   /* samples per block */
uint64_t ig_loader_global_batch(const ig_loader *ld); /* G = B * dp * A */

/* The global sample id of row j of rank `rank`'s micro-batch `micro` of step `step` (the layout
 * above, without a loader). */
uint64_t ig_loader_sample_id(uint32_t micro_batch, uint32_t grad_accum, uint32_t dp, uint32_t rank,
                             uint64_t step, uint32_t micro, uint32_t j);

/* ==== the GPT data stream: weighted shard prefixes as an infinite sample stream =============== */

/* What `ingot blend`, `ingot samples` and the trainer call the data arguments: Megatron's
 * --data-path (`W1 P1 W2 P2 ...`, or one prefix alone), --seq-length, the number of samples,
 * --seed and --split. */
typedef struct ig_data_opts {
    const char *const *prefixes; /* shard prefixes (PREFIX.bin + PREFIX.idx), [n] */
    const double *weights;       /* [n], > 0; NULL: one prefix used alone (n must be 1) */
    size_t n;
    uint32_t seq_len;      /* tokens per sample, plus one; required */
    uint64_t num_samples;  /* N: samples of block 0; required */
    uint32_t seed;         /* numpy RandomState seed of block 0; default 1234 */
    ig_split split;        /* default "1,0,0" */
    ig_split_part part;    /* default train */
    double surplus;        /* blend surplus; default 0.005 */
    const char *cache_dir; /* NULL: indices are built in memory */
    int allow_mixed;       /* 1: allow shards made with different tokenizers (by manifest) */
} ig_data_opts;

ig_data_opts ig_data_opts_default(void);

/* The data options as configuration keys ("data:": path, seed, split, split_index, surplus,
 * cache_dir, allow_mixed; see ig_cfg_key), in the text form a config file or a command line gives;
 * ig_data_config_resolve turns them into ig_data_opts. */
typedef struct ig_data_config {
    const char *const *path; /* "P", or "W1", "P1", "W2", "P2", ... */
    size_t n_path;
    uint32_t seed;
    const char *split; /* "969,30,1" */
    int part;          /* ig_split_part */
    double surplus;
    const char *cache_dir; /* "" for none */
    int allow_mixed;
} ig_data_config;

extern const ig_cfg_key ig_data_keys[];
extern const size_t ig_data_n_keys;

/* ig_data_opts from a data config (whose strings it points into), with their arrays. */
typedef struct ig_data_resolved {
    ig_data_opts opts;
    int weighted;          /* the path had weights (a blend), even of one source */
    const char **prefixes; /* owned */
    double *weights;       /* owned */
} ig_data_resolved;

/* Parses the path (ig_data_parse_paths) and the split; seq_len and num_samples come from the
 * caller (a command line, or the trainer's model and steps). Errors name what is wrong. Free the
 * result with ig_data_resolved_free. */
ig_status ig_data_config_resolve(const ig_data_config *c, uint32_t seq_len, uint64_t num_samples,
                                 ig_data_resolved *out, ig_err *err);
void ig_data_resolved_free(ig_data_resolved *r);

/* Parses Megatron's --data-path list: `P` (one prefix alone: *weighted = 0) or `W1 P1 W2 P2 ...`
 * (weights are numbers; *weighted = 1). prefixes and weights must have room for n entries; the
 * prefixes point into args. Errors name the offending argument. */
ig_status ig_data_parse_paths(char *const *args, size_t n, const char **prefixes, double *weights,
                              size_t *n_sources, int *weighted, ig_err *err);

/* The seed of block b of a stream whose block 0 has seed `seed`: seed itself for b = 0, else a
 * 32-bit hash of (seed, b). */
uint32_t ig_data_block_seed(uint32_t seed, uint64_t block);

/* The shards opened once and block 0 built (a Megatron-Core GPTDataset for one prefix alone, else
 * a BlendedDataset over one GPTDataset per prefix). Block b >= 1 is the same built with
 * ig_data_block_seed(seed, b). Read-only after open: safe to share between threads. */
typedef struct ig_data_stream ig_data_stream;

/* Errors: no prefixes, a shard that does not open, shards of different tokenizers (unless
 * allow_mixed), and every index or blend error (a split that leaves a part empty, data shorter
 * than one sample, a weight <= 0, ...), each naming the source. */
ig_status ig_data_stream_open(ig_data_stream **out, ig_ctx *ctx, const ig_data_opts *opts,
                              ig_err *err);
void ig_data_stream_close(ig_data_stream *ds); /* NULL is a no-op */

/* The block factory for ig_loader_opts.make_block; pass the stream as block_user. Block 0 is
 * served from the stream (not rebuilt); other blocks are built on each call. */
ig_status ig_data_stream_make_block(void *stream, uint64_t block, ig_sample_source *out,
                                    ig_err *err);

/* Block 0: its blend (NULL for a prefix alone) or its GPT index (NULL for a blend), its key and
 * size. */
const ig_blend *ig_data_stream_blend(const ig_data_stream *ds);
const ig_gpt_index *ig_data_stream_index(const ig_data_stream *ds);
uint64_t ig_data_stream_key(const ig_data_stream *ds);
uint64_t ig_data_stream_num_samples(const ig_data_stream *ds);
size_t ig_data_stream_num_sources(const ig_data_stream *ds);
const ig_dataset *ig_data_stream_dataset(const ig_data_stream *ds, size_t k);

/* ==== the clip loader: frame shards as bucketed micro-batches =============================== */

/* Micro-batches of video clips in which every clip has one shape - Open-Sora's variable video
 * batch sampler over a clip dataset (frame shards), driven by the loader above.
 *
 * Clips are grouped by shape: by bucket when the shards were made with buckets (a bucket's
 * micro-batch holds its batch_size clips), else by (frames, height, width) with batch_size clips
 * each. An epoch (a block of the stream) shuffles each group, pads it to a whole number of
 * micro-batches with its first clips (or drops the rest, drop_last), cuts it into micro-batches
 * and shuffles the micro-batches of all groups together, all from (seed, epoch). Each
 * micro-batch is one sample of the loader's stream, so the distributed proxy sampler deals whole
 * micro-batches to ranks: the union over ranks of step s is micro-batches [s*G, (s+1)*G) with
 * G = dp * grad_accum, whatever dp is, and the state to resume from is the number of micro-batches
 * consumed by all ranks (ig_loader_state.consumed_samples counts micro-batches here). */
typedef struct ig_clip_loader_opts {
    const ig_clip_dataset *dataset; /* required; borrowed, must outlive the loader */
    uint64_t seed;                  /* default 1234 */
    uint32_t batch_size;            /* clips per micro-batch without buckets; default 1 */
    int shuffle;                    /* default 1; 0: groups and clips in dataset order */
    int drop_last;                 /* 1: drop a group's last partial micro-batch (default 0: pad) */
    uint32_t dp, rank, grad_accum; /* as ig_loader_opts (defaults 1, 0, 1) */
    int prefetch_threads, prefetch_depth; /* as ig_loader_opts (defaults 2, 4) */
} ig_clip_loader_opts;

ig_clip_loader_opts ig_clip_loader_opts_default(void);

/* One micro-batch of clips, owned by the loader: valid until the next call or free. Labels and
 * caption documents are the clips' records (ig_clip_info.label, .caption); a caption document
 * numbers the caption shard of the clip's own frame shard (ig_clip_dataset_caption(ds,
 * clips[k]) reads its tokens). */
typedef struct ig_clip_batch {
    const uint8_t *frames; /* [n][frames_per_clip][height][width][3] RGB24, 64-byte aligned
                              (NULL: latents) */
    /* or, over latent shards (ig_clip_dataset_open_any), the posterior's moments
     * [n][frames_per_clip][height][width][channels] fp32 (the C means, then the C log-variances;
     * height and width in latent positions), 64-byte aligned */
    const float *latents;
    uint32_t channels;        /* values per position: 3 (RGB), or 2C (latents) */
    const uint64_t *clips;    /* [n] the clips' indices in the dataset */
    const uint32_t *labels;   /* [n] each clip's label (IG_CLIP_NONE without) */
    const uint32_t *captions; /* [n] each clip's caption document, or IG_CLIP_NONE */
    uint32_t n;               /* clips: the group's batch size */
    uint32_t frames_per_clip, height, width;
    uint32_t bucket; /* the bucket (index into the dataset's table), or IG_CLIP_NONE */
    uint64_t unit;   /* the micro-batch's index in the stream (global sample id) */
    uint64_t step, micro_index;
    uint32_t micro, rank;
} ig_clip_batch;

typedef struct ig_clip_loader ig_clip_loader;

/* Builds epoch 0 to learn the stream's size and identity; start (may be NULL) resumes from a
 * saved state (as ig_loader_create: a multiple of dp micro-batches, and the same key). Errors:
 * an empty dataset, a group with fewer clips than its batch size under drop_last. */
ig_status ig_clip_loader_create(ig_clip_loader **out, ig_ctx *ctx, const ig_clip_loader_opts *opts,
                                const ig_loader_state *start, ig_err *err);
void ig_clip_loader_free(ig_clip_loader *l); /* NULL is a no-op */
ig_status ig_clip_loader_next(ig_clip_loader *l, ig_clip_batch *out, ig_err *err);
ig_loader_state ig_clip_loader_state(const ig_clip_loader *l);
uint64_t ig_clip_loader_epoch_batches(const ig_clip_loader *l); /* micro-batches per epoch */

#ifdef __cplusplus
}
#endif

#endif /* INGOT_LOADER_H */
