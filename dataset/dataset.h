/* dataset.h - the public API of ingot's datasets: Megatron-compatible token shards
 * (PREFIX.bin + PREFIX.idx, DESIGN 3.1) with ingot's manifest (PREFIX.json), their writer,
 * reader, verifier and merger; and (below) the GPT sample index, splits and weighted blends.
 */
#ifndef INGOT_DATASET_H
#define INGOT_DATASET_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== token shards ========================================================================== */
/* In this section ctx may be NULL (plain malloc, no logging). Writers, readers, merge and verify
 * allocate what they own through ctx; manifests (ig_manifest's sources) and shard lists are plain
 * malloc'd results, freed by ig_manifest_clear and ig_shard_list_free. */

/* Megatron's dtype codes. */
typedef enum ig_dtype {
    IG_DTYPE_U8 = 1,
    IG_DTYPE_I8 = 2,
    IG_DTYPE_I16 = 3,
    IG_DTYPE_I32 = 4,
    IG_DTYPE_I64 = 5,
    IG_DTYPE_F64 = 6,
    IG_DTYPE_F32 = 7,
    IG_DTYPE_U16 = 8,
} ig_dtype;

size_t ig_dtype_size(ig_dtype dt);      /* 0 for an unknown code */
const char *ig_dtype_name(ig_dtype dt); /* "uint16", "int32", ...; "unknown" */
/* The token dtype Megatron picks for a vocabulary: u16 when vocab_size < 65500, else i32. */
ig_dtype ig_dtype_for_vocab(size_t vocab_size);

/* ingot's manifest (PREFIX.json) beside a shard: who made it and checksums of both files. */
typedef struct ig_manifest {
    char tokenizer[64];        /* ig_tokenizer_name, e.g. "gpt2"; "" when unknown */
    char tokenizer_path[1024]; /* the --tokenizer given to preprocess, for --decode; may be "" */
    uint64_t tokenizer_hash;   /* ig_tokenizer_hash; 0 when unknown */
    uint64_t vocab_size;
    int64_t eod_id; /* -1 when none */
    ig_dtype dtype;
    uint64_t documents, sequences, tokens;
    uint64_t bin_bytes, idx_bytes;
    uint64_t bin_xxh3, idx_xxh3;
    char **sources; /* input files (owned; ig_manifest_clear frees) */
    size_t n_sources;
    char json_key[64]; /* the JSON key the text came from ("" for .txt) */
    /* The preprocess output this shard belongs to: a file-name prefix in the shard's directory
     * ("" for shards not written by preprocess). While OUTPUT.incomplete exists beside it, the
     * run writing that output has not finished, and the shard is refused (ig_shard_open). */
    char output[256];
    char tool_version[32];
} ig_manifest;

void ig_manifest_clear(ig_manifest *m); /* frees sources and zeroes m */
ig_status ig_manifest_add_source(ig_manifest *m, const char *source, ig_err *err);
/* PREFIX.json <-> manifest (JSON with "format": "ingot-token-shard", "format_version": 1; hashes
 * as 16 hex digits). read: IG_ERR_NOT_FOUND for a missing manifest, IG_ERR_FORMAT naming
 * file:line:column or the bad field for a malformed one. write is atomic. */
ig_status ig_manifest_read(ig_manifest *m, const char *prefix, ig_err *err);
ig_status ig_manifest_write(const ig_manifest *m, const char *prefix, int overwrite, ig_err *err);

/* --- writer --- */

/* Streams documents into PREFIX.bin / PREFIX.idx under temporary names. Memory does not grow with
 * the number of documents (sequence lengths spill to a temporary file). finish commits .bin, then
 * .idx, then the manifest (last, so that a killed run never leaves a manifest over incomplete
 * data); abort removes every temporary. With overwrite, an existing manifest is removed first. */
typedef struct ig_shard_writer ig_shard_writer;

typedef struct ig_shard_writer_opts {
    ig_dtype dtype; /* token dtype; default IG_DTYPE_U16 */
    int overwrite;  /* 0: IG_ERR_EXISTS when PREFIX.bin/.idx/.json exist */
} ig_shard_writer_opts;

ig_shard_writer_opts ig_shard_writer_opts_default(void);
ig_status ig_shard_writer_create(ig_shard_writer **out, ig_ctx *ctx, const char *prefix,
                                 const ig_shard_writer_opts *opts, ig_err *err);
/* Appends one sequence (Megatron "sentence"); ids out of the dtype's range are an error. */
ig_status ig_shard_writer_add_sequence(ig_shard_writer *w, const int32_t *ids, size_t n,
                                       ig_err *err);
/* Ends the current document (after one or more sequences). */
ig_status ig_shard_writer_end_document(ig_shard_writer *w, ig_err *err);
/* add_sequence + end_document. */
ig_status ig_shard_writer_add_document(ig_shard_writer *w, const int32_t *ids, size_t n,
                                       ig_err *err);
/* Appends the raw bytes of whole documents (already in the writer's dtype) with their sequence
 * lengths; used by merge to copy without decoding. */
ig_status ig_shard_writer_add_raw(ig_shard_writer *w, const void *tokens, size_t n_tokens,
                                  const int32_t *seq_lengths, size_t n_seqs,
                                  const int64_t *doc_seq_counts, size_t n_docs, ig_err *err);
uint64_t ig_shard_writer_bin_bytes(const ig_shard_writer *w);
uint64_t ig_shard_writer_documents(const ig_shard_writer *w);
/* Commits the files. meta supplies tokenizer/sources fields of the manifest (may be NULL); the
 * counts, sizes and checksums are filled in by the writer. Frees w (also on failure). */
ig_status ig_shard_writer_finish(ig_shard_writer *w, const ig_manifest *meta, ig_err *err);
/* Like finish, but commits only .bin and .idx and returns the complete manifest in *out (the
 * caller writes it later with ig_manifest_write, e.g. once every shard of a run is done, so
 * that a killed run leaves no shard that verify accepts). Frees w (also on failure). */
ig_status ig_shard_writer_finish_data(ig_shard_writer *w, const ig_manifest *meta, ig_manifest *out,
                                      ig_err *err);
void ig_shard_writer_abort(ig_shard_writer *w); /* NULL is a no-op */

/* --- reader --- */

/* A shard opened read-only: both files mapped, zero-copy. Validated on open: magic, version,
 * dtype, counts against file sizes, lengths >= 0, pointers monotone, contiguous and in bounds,
 * document_indices starting at 0, non-decreasing and ending at N. Errors name the file and
 * field. The manifest is read when present (has_manifest). Safe to share between threads. */
typedef struct ig_shard ig_shard;

ig_status ig_shard_open(ig_shard **out, ig_ctx *ctx, const char *prefix, ig_err *err);
void ig_shard_close(ig_shard *s); /* NULL is a no-op */

const char *ig_shard_prefix(const ig_shard *s);
ig_dtype ig_shard_dtype(const ig_shard *s);
uint64_t ig_shard_sequences(const ig_shard *s); /* N */
uint64_t ig_shard_documents(const ig_shard *s); /* D - 1 */
uint64_t ig_shard_tokens(const ig_shard *s);
/* Length in tokens and byte offset in .bin of sequence i (i < N). */
int32_t ig_shard_seq_length(const ig_shard *s, uint64_t i);
int64_t ig_shard_seq_pointer(const ig_shard *s, uint64_t i);
/* document_indices[d] (d <= D-1): first sequence of document d. */
int64_t ig_shard_doc_index(const ig_shard *s, uint64_t d);
/* The raw token bytes of the whole .bin. */
const void *ig_shard_bin(const ig_shard *s);
uint64_t ig_shard_bin_bytes(const ig_shard *s);
/* Copies tokens [off, off+n) of sequence i as int32 into out (bounds are checked). */
ig_status ig_shard_read_tokens(const ig_shard *s, uint64_t i, uint64_t off, uint64_t n,
                               int32_t *out, ig_err *err);
/* The manifest, or NULL when PREFIX.json is absent. */
const ig_manifest *ig_shard_manifest(const ig_shard *s);

/* Checks a shard completely: structure (as open), the manifest present and consistent (counts,
 * sizes), and the xxh3 checksums of .bin and .idx. IG_OK, or the exact problem in err:
 * IG_ERR_FORMAT (structure, or a manifest describing other data), IG_ERR_NOT_FOUND (a missing
 * file or manifest), IG_ERR_CHECKSUM (a file changed since it was written). With a context of
 * several threads, one hashes the .bin while the others check its token ids in 1 MiB pieces
 * (on the context's pool); the result and the message are those of one thread. */
ig_status ig_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err);

/* Concatenates shards into out_prefix (as Megatron's merge_datasets.py), streaming, with 64-bit
 * pointers. Every input is opened (validated) before anything is written, and the output is
 * written like any shard (atomically, manifest last). With a context of several threads, windows
 * of 64 inputs are opened, checked against their manifests' checksums and copied to their
 * precomputed offsets in the output at once, the output's checksum and index written beside
 * them: the output is the same bytes, and a failure the same message, for any thread count. Shards
 * made with different tokenizers (by their manifests' hashes) are refused unless allow_mixed;
 * different dtypes, or an output that is also an input, always (IG_ERR_INVALID_ARG). */
typedef struct ig_merge_opts {
    int overwrite;
    int allow_mixed; /* --force: merge shards of different tokenizers */
} ig_merge_opts;
ig_status ig_shard_merge(ig_ctx *ctx, const char *const *inputs, size_t n_inputs,
                         const char *out_prefix, const ig_merge_opts *opts, ig_err *err);

/* An output prefix is the start of file names (PREFIX.bin, ...): IG_ERR_INVALID_ARG when its last
 * part is empty ("dir/", which would write the hidden files dir/.bin ...), "." or "..". */
ig_status ig_output_prefix_check(const char *prefix, ig_err *err);

/* Removes a shard's files, manifest first (so that nothing is left that verifies). Missing files
 * are not an error; neither are others: this is cleanup after a failure. */
void ig_shard_remove(const char *prefix);

/* --- run markers --- */

/* A preprocess run writes OUT.incomplete (OUT: its --output-prefix) before it commits any file
 * and removes it once every shard, manifest and shard list of it is written: the one commit
 * point of an output made of several files (keys, shards, ranks). A marker left behind means a
 * killed run: its files are refused by ig_shard_open / ig_shard_list_expand, and the next run
 * may remove them. The marker records the writer's pid and host. */
ig_status ig_run_marker_create(const char *base, ig_err *err);
ig_status ig_run_marker_remove(const char *base, ig_err *err);
int ig_run_marker_exists(const char *base);
/* Whether BASE's marker belongs to a run still going: the pid of the process holding it (-1 when
 * it is held but names no pid yet), or of a live process on this host that wrote it without
 * holding it; else 0. */
long ig_run_marker_live(const char *base);

/* A marker held by this process: a run holds its marker, open and locked, from before it writes
 * anything until it commits, so that of two runs started at the same moment on one output only
 * one goes ahead, and the other touches nothing. The lock goes with the process: a killed run's
 * marker can be taken over. */
typedef struct ig_run_marker ig_run_marker;
/* Creates BASE.incomplete (naming this pid and host, fsync'd) and holds it; or takes over one
 * that a killed run left (*had_old = 1: its files are the caller's to remove). IG_ERR_EXISTS when
 * a run still going holds it or wrote it. */
ig_status ig_run_marker_acquire(ig_run_marker **out, const char *base, int *had_old, ig_err *err);
/* Lets the marker go and frees m: with remove, BASE.incomplete is deleted first (the output is
 * complete, or nothing of the run is left); without, it stays (the output is unfinished). NULL is
 * a no-op. */
ig_status ig_run_marker_release(ig_run_marker *m, int remove, ig_err *err);
/* 1 when a marker covers the shard or list prefix: PREFIX itself, or PREFIX with up to four
 * trailing "_PART"s removed, has one; its base goes to base[cap]. */
int ig_run_marker_covering(const char *prefix, char *base, size_t cap);

/* --- shard lists --- */

/* A shard list, PREFIX.shards.json, is one manifest over several shards that live in the same
 * directory (the output of a sharded or multi-process preprocess run): their names, documents,
 * tokens and the checksums of their manifests' data. Wherever ingot takes a shard prefix it also
 * takes a list's prefix, which stands for all of its shards in order. */

/* Writes PREFIX.shards.json over the given shard prefixes (each must have its manifest, and all
 * must share PREFIX's directory). Atomic. */
ig_status ig_shard_list_write(const char *prefix, const char *const *shards, size_t n,
                              int overwrite, ig_err *err);
/* Expands prefix into shard prefixes: the list's shards when PREFIX.shards.json exists (checked:
 * format, version, entries), else prefix itself. *out is malloc'd strings; free with
 * ig_shard_list_free. */
ig_status ig_shard_list_expand(const char *prefix, char ***out, size_t *n, ig_err *err);
void ig_shard_list_free(char **list, size_t n);
/* Verifies every shard of a list (ig_shard_verify) and that each still matches what the list
 * recorded (documents, tokens, .bin checksum). For a plain prefix, ig_shard_verify. *n_shards
 * is set to the number of shards checked (that passed, before the first failure). With a context
 * of several threads, several shards are verified at once; the result is the same. */
ig_status ig_shard_list_verify(ig_ctx *ctx, const char *prefix, size_t *n_shards, ig_err *err);

/* ==== GPT sample index, splits and blends (DESIGN 4) ======================================== */
/* Megatron-Core semantics, exactly: for the same sequence lengths, seq_len, num_samples and seed,
 * the document, sample and shuffle indices are those of Megatron-Core's GPTDataset, and a blend's
 * indices those of its BlendedDataset (helpers.cpp build_blending_indices). As in Megatron, the
 * unit that is shuffled and packed is the *sequence* of the indexed dataset (GPTDataset is "split
 * by sequence"); shards written with one sequence per document (ingot's preprocess) make the two
 * the same. A sample is seq_len + 1 tokens; consecutive samples of the unshuffled order share one
 * token. */

/* --- one or many shard prefixes opened as one dataset --- */

/* The sequences of several shards back to back (shard 0's first), as one dataset: global
 * sequence g of shard k is local sequence g - first(k). Shards must share a token dtype. Read-only
 * and safe to share between threads. A prefix with a shard list (PREFIX.shards.json) stands for
 * all of its shards, in order. */
typedef struct ig_dataset ig_dataset;

ig_status ig_dataset_open(ig_dataset **out, ig_ctx *ctx, const char *const *prefixes, size_t n,
                          ig_err *err);
void ig_dataset_close(ig_dataset *ds); /* NULL is a no-op */

/* Datasets of up to this many shards keep them open (mapped) from ig_dataset_open on; larger
 * ones open a shard when it is read, keeping this many open, since every open shard holds two of
 * the process's mappings (vm.max_map_count, 65530 by default). */
#define IG_DATASET_OPEN_MAX 256

size_t ig_dataset_num_shards(const ig_dataset *ds);
/* Shard k, owned by ds; NULL when the dataset has more than IG_DATASET_OPEN_MAX shards (then its
 * shards are open only while read: use the functions below and ig_dataset_read_tokens). */
const ig_shard *ig_dataset_shard(const ig_dataset *ds, size_t k);
const char *ig_dataset_shard_prefix(const ig_dataset *ds, size_t k); /* owned by ds */
/* The tokenizer shard k's manifest records (*name owned by ds): 1, or 0 without a manifest. */
int ig_dataset_shard_tokenizer(const ig_dataset *ds, size_t k, const char **name, uint64_t *hash);
ig_dtype ig_dataset_dtype(const ig_dataset *ds); /* the token dtype all its shards share */
uint64_t ig_dataset_sequences(const ig_dataset *ds);
uint64_t ig_dataset_documents(const ig_dataset *ds);
uint64_t ig_dataset_tokens(const ig_dataset *ds);
/* All sequence lengths, [ig_dataset_sequences], aligned, owned by ds. */
const int32_t *ig_dataset_seq_lengths(const ig_dataset *ds);
/* Copies tokens [off, off+n) of global sequence seq as int32 into out (bounds checked). */
ig_status ig_dataset_read_tokens(const ig_dataset *ds, uint64_t seq, uint64_t off, uint64_t n,
                                 int32_t *out, ig_err *err);

/* --- splits "969,30,1" --- */

typedef enum ig_split_part {
    IG_SPLIT_TRAIN = 0,
    IG_SPLIT_VALID = 1,
    IG_SPLIT_TEST = 2
} ig_split_part;

/* Normalized split weights (Megatron's parse_and_normalize_split: missing parts are 0). */
typedef struct ig_split {
    double weights[3];
} ig_split;

ig_split ig_split_default(void); /* "1,0,0": everything in train */
/* Parses "969,30,1" (1 to 3 numbers >= 0, not all 0). */
ig_status ig_split_parse(ig_split *out, const char *text, ig_err *err);
/* The contiguous range [*begin, *end) of n sequences that `part` gets (Megatron's split matrix:
 * bookends int(round(cumulative weight * n)), round half to even). IG_ERR_INVALID_ARG naming the
 * part, the split and n when the part is empty. */
ig_status ig_split_range(const ig_split *split, ig_split_part part, uint64_t n, uint64_t *begin,
                         uint64_t *end, ig_err *err);
const char *ig_split_part_name(ig_split_part part); /* "train", "valid", "test" */

/* --- the GPT sample index --- */

/* One piece of a sample: tokens [offset, offset + length) of global sequence seq. */
typedef struct ig_token_span {
    uint64_t seq;
    uint64_t offset;
    uint64_t length;
} ig_token_span;

typedef struct ig_gpt_index_opts {
    uint32_t seq_len;      /* Megatron sequence_length (> 1); a sample holds seq_len + 1 tokens */
    uint64_t num_samples;  /* samples requested (>= 1); the index holds whole epochs, so more */
    uint32_t seed;         /* numpy RandomState seed (Megatron random_seed); default 1234 */
    uint64_t seq_begin;    /* the sequences used: [seq_begin, seq_end), e.g. a split range; */
    uint64_t seq_end;      /*   seq_end == 0: up to the last sequence */
    const char *cache_dir; /* NULL: build in memory; else reuse / save there (created if needed) */
    const char *name;      /* for messages, e.g. the prefix; may be NULL */
} ig_gpt_index_opts;

ig_gpt_index_opts ig_gpt_index_opts_default(void);

/* The document (sequence) index, sample index and shuffle index of Megatron-Core's GPTDataset.
 * Immutable once built: safe to share between threads. */
typedef struct ig_gpt_index ig_gpt_index;

/* Builds (or, with cache_dir, loads) the index over seq_lengths[0 .. n_seqs) restricted to
 * [seq_begin, seq_end). The lengths are read during the call only. With a cache directory, many
 * processes may call this at once: one builds under a lock, the others wait and map its file.
 * Errors (IG_ERR_INVALID_ARG): seq_len < 2, num_samples 0, an empty range or no tokens in it,
 * fewer tokens than seq_len + 1 (the data is shorter than one sample). */
ig_status ig_gpt_index_build(ig_gpt_index **out, ig_ctx *ctx, const int32_t *seq_lengths,
                             uint64_t n_seqs, const ig_gpt_index_opts *opts, ig_err *err);
/* The same over an opened dataset's sequences. ds need not outlive the index. */
ig_status ig_gpt_index_build_dataset(ig_gpt_index **out, ig_ctx *ctx, const ig_dataset *ds,
                                     const ig_gpt_index_opts *opts, ig_err *err);
void ig_gpt_index_free(ig_gpt_index *idx); /* NULL is a no-op */

uint64_t ig_gpt_index_num_samples(const ig_gpt_index *idx); /* samples held (>= requested) */
uint64_t ig_gpt_index_requested(const ig_gpt_index *idx);   /* opts.num_samples */
uint32_t ig_gpt_index_seq_len(const ig_gpt_index *idx);
uint64_t ig_gpt_index_num_epochs(const ig_gpt_index *idx);
uint64_t ig_gpt_index_tokens_per_epoch(const ig_gpt_index *idx);
int ig_gpt_index_separate_final_epoch(const ig_gpt_index *idx);
/* xxh3 of everything that determines the index (the lengths of the sequences used, their range,
 * seq_len, num_samples, seed, format version): the cache key, and the loader's index identity. */
uint64_t ig_gpt_index_key(const ig_gpt_index *idx);
int ig_gpt_index_from_cache(const ig_gpt_index *idx); /* 1 when loaded from the cache */
/* Seconds spent building the document, sample and shuffle indices (0 when loaded). */
void ig_gpt_index_timings(const ig_gpt_index *idx, double *doc_s, double *sample_s,
                          double *shuffle_s);

/* The raw Megatron arrays (owned by idx): document_index [*n] of sequence ids, sample_index
 * [*rows][2] of (document_index position, offset), shuffle_index [*n]. */
const int32_t *ig_gpt_index_document_index(const ig_gpt_index *idx, uint64_t *n);
const int64_t *ig_gpt_index_sample_index(const ig_gpt_index *idx, uint64_t *rows);
const int64_t *ig_gpt_index_shuffle_index(const ig_gpt_index *idx, uint64_t *n);

/* The spans that make sample i (i < num_samples; after the shuffle, as GPTDataset.__getitem__):
 * writes up to cap spans (empty sequences are skipped) and returns how many there are in all.
 * Their lengths add up to seq_len + 1. */
size_t ig_gpt_index_sample(const ig_gpt_index *idx, uint64_t i, ig_token_span *spans, size_t cap);
/* Reads sample i's seq_len + 1 tokens from ds (the dataset the index was built over) into out.
 * Thread-safe. */
ig_status ig_gpt_index_read(const ig_gpt_index *idx, const ig_dataset *ds, uint64_t i, int32_t *out,
                            ig_err *err);

/* --- weighted blends: `W1 P1 W2 P2 ...` --- */

typedef struct ig_blend_source {
    double weight;              /* > 0; normalized over the sources */
    const ig_dataset *dataset;  /* borrowed, must outlive the blend; or NULL and ... */
    const int32_t *seq_lengths; /* ... bare sequence lengths (no token reads), e.g. for tests */
    uint64_t n_seqs;
    const char *name; /* for messages, e.g. the prefix; may be NULL */
} ig_blend_source;

typedef struct ig_blend_opts {
    uint32_t seq_len;
    uint64_t num_samples;  /* N: samples the blend must provide */
    uint32_t seed;         /* default 1234, the same for every source (as Megatron) */
    ig_split split;        /* applied to each source; default "1,0,0" */
    ig_split_part part;    /* which part of it; default IG_SPLIT_TRAIN */
    double surplus;        /* Megatron mid_level_dataset_surplus; default 0.005 */
    const char *cache_dir; /* as ig_gpt_index_opts */
    int quiet;             /* no warnings about the blend's shape (a rebuild with another seed) */
} ig_blend_opts;

ig_blend_opts ig_blend_opts_default(void);

/* Megatron's BlendedDataset over one GPT index per source: weights w = normalize(W); source d's
 * index is built for ceil(ceil(N*w[d]) * (1 + surplus)) samples; the blend holds
 * sum_d ceil(N*w[d]) samples, interleaved greedily (sample s goes to the d maximizing
 * w[d]*max(s,1) - used[d], first maximum wins). Immutable once built: safe to share. */
typedef struct ig_blend ig_blend;

/* Errors: no sources, a weight <= 0 or not finite (naming the source), more than 32767 sources,
 * any GPT index error (prefixed with the source), a source whose index holds fewer samples than
 * the blend draws from it (raise the surplus). Logs a warning for each source the blend repeats
 * for more than one epoch. */
ig_status ig_blend_build(ig_blend **out, ig_ctx *ctx, const ig_blend_source *sources, size_t n,
                         const ig_blend_opts *opts, ig_err *err);
void ig_blend_free(ig_blend *b); /* NULL is a no-op */

uint64_t ig_blend_num_samples(const ig_blend *b);
size_t ig_blend_num_sources(const ig_blend *b);
uint32_t ig_blend_seq_len(const ig_blend *b);
uint64_t ig_blend_key(const ig_blend *b); /* xxh3 of the sources' keys, weights, sizes */

typedef struct ig_blend_source_info {
    double weight;      /* normalized */
    uint64_t target;    /* ceil(N * weight) */
    uint64_t requested; /* ceil(target * (1 + surplus)): its GPT index was built for this */
    uint64_t built;     /* samples in its GPT index */
    uint64_t drawn;     /* samples the blend takes from it */
    double achieved;    /* drawn / blend size */
    uint64_t epochs;    /* epochs of its GPT index; > 1: the source is repeated */
    uint64_t seq_begin, seq_end; /* its split range */
} ig_blend_source_info;

ig_blend_source_info ig_blend_source_stats(const ig_blend *b, size_t k);
const ig_gpt_index *ig_blend_source_index(const ig_blend *b, size_t k); /* owned by b */

/* Global sample i (< num_samples) is sample *sample_in_source of source *source's GPT index. */
void ig_blend_lookup(const ig_blend *b, uint64_t i, uint32_t *source, uint64_t *sample_in_source);
/* The raw Megatron arrays [num_samples] (owned by b). */
const int16_t *ig_blend_dataset_index(const ig_blend *b);
const int64_t *ig_blend_dataset_sample_index(const ig_blend *b);
/* Reads global sample i's seq_len + 1 tokens (the sources must have datasets). Thread-safe. */
ig_status ig_blend_read(const ig_blend *b, uint64_t i, int32_t *out, ig_err *err);

/* ==== video frame shards (DESIGN 3.2) ====================================================== */
/* A frame shard is PREFIX.frames (clips back to back: T x H x W x 3 bytes of RGB24 each, raw or
 * one zstd frame per clip), PREFIX.clips (the index: a header, one fixed-size record per clip
 * and a table of the source frames each clip holds; little-endian, packed), PREFIX.json (the
 * manifest: counts, sources, buckets, checksums), the caption text PREFIX.texts (a shard of
 * DESIGN 3.1 of bytes, dtype uint8: one document per source, its caption's UTF-8, empty for
 * none; shards made before it have none) and, with a tokenizer, the caption token shard
 * PREFIX.captions (DESIGN 3.1: one document per source). In this section ctx may be NULL. */

#define IG_CLIP_NONE      0xffffffffu /* no caption / no bucket / no label */
#define IG_CLIP_LABEL_MAX 0x7ffffffeu /* the largest class id a clip may carry (2^31 - 2) */

/* One clip of a shard (a record of PREFIX.clips). */
typedef struct ig_clip_info {
    uint64_t offset;       /* of its bytes in PREFIX.frames */
    uint64_t stored_bytes; /* as stored (compressed or not) */
    uint32_t frames, height, width;
    uint32_t fps_num, fps_den; /* the rate of its frames (the source's, or the sampling rate) */
    uint32_t source;           /* index into the manifest's sources */
    uint32_t caption;          /* document of PREFIX.captions, or IG_CLIP_NONE */
    uint32_t bucket;           /* index into the manifest's buckets, or IG_CLIP_NONE */
    uint32_t label;            /* class id from the manifest's label column, or IG_CLIP_NONE */
    int64_t start_pts;         /* pts of its first frame, in tb_num/tb_den seconds */
    uint32_t tb_num, tb_den;   /* the source stream's time base */
    uint64_t first_frame;      /* its first entry of the frame table */
    uint64_t xxh3;             /* of its stored bytes */
} ig_clip_info;

/* One frame of a clip: where it came from. */
typedef struct ig_clip_frame {
    int64_t pts;    /* in the clip's time base */
    uint64_t index; /* the source frame, in presentation order */
} ig_clip_frame;

/* A bucket of the shard's bucket table (Open-Sora's resolution x frames x aspect shapes). */
typedef struct ig_clip_bucket {
    char name[64];
    uint32_t frames, height, width, batch_size;
} ig_clip_bucket;

/* The manifest, PREFIX.json ("format": "ingot-video-shard"). */
typedef struct ig_video_shard_meta {
    uint64_t clips, frames; /* clips; frames of all clips */
    uint64_t raw_bytes;     /* frame bytes before compression */
    uint64_t frames_bytes, clips_bytes;
    uint64_t frames_xxh3, clips_xxh3;
    uint32_t clips_version; /* of PREFIX.clips ("clips_version"; 0: not recorded, before 2) */
    int zstd;               /* clips are zstd-compressed */
    char **sources;         /* the videos clips come from (owned) */
    size_t n_sources;
    ig_clip_bucket *buckets; /* (owned) */
    size_t n_buckets;
    char captions[256]; /* the caption shard's prefix relative to this one's directory, or "" */
    uint64_t caption_documents;
    /* the caption text shard's prefix relative to this one's directory ("texts"; a document per
     * source), or "" (a shard made before the texts were kept) */
    char texts[256];
    char sampling[256]; /* how clips were taken, for people: "frames=16 stride=2 size=256x256" */
    char output[256];   /* the preprocess output this shard belongs to (see ig_manifest) */
    char tool_version[32];
} ig_video_shard_meta;

void ig_video_shard_meta_clear(ig_video_shard_meta *m);
ig_status ig_video_shard_meta_read(ig_video_shard_meta *m, const char *prefix, ig_err *err);
ig_status ig_video_shard_meta_write(const ig_video_shard_meta *m, const char *prefix, int overwrite,
                                    ig_err *err);
/* 1 when PREFIX is a frame shard (PREFIX.clips exists) or a list of them, else 0. */
int ig_video_shard_is(const char *prefix);

/* --- writer --- */

typedef struct ig_video_shard_writer ig_video_shard_writer;

typedef struct ig_video_shard_writer_opts {
    int zstd;      /* clips are given compressed (ig_clip_compress) */
    int overwrite; /* 0: IG_ERR_EXISTS when the shard's files exist */
} ig_video_shard_writer_opts;

/* Streams clips into PREFIX.frames / PREFIX.clips under temporary names; memory does not grow
 * with the clips (records spill to a temporary file). Not thread-safe. */
ig_status ig_video_shard_writer_create(ig_video_shard_writer **out, ig_ctx *ctx, const char *prefix,
                                       const ig_video_shard_writer_opts *opts, ig_err *err);
/* Appends a clip: c (offset, stored_bytes, first_frame and xxh3 are filled in), its
 * frames[c->frames] and its data: raw RGB24 (c->frames x height x width x 3 bytes), or with zstd
 * what ig_clip_compress made of it. */
ig_status ig_video_shard_writer_add(ig_video_shard_writer *w, const ig_clip_info *c,
                                    const ig_clip_frame *frames, const void *data, size_t bytes,
                                    ig_err *err);
/* ig_video_shard_writer_add with the xxh3 of the clip's stored bytes given (its maker hashed them
 * as they were made, while they were in cache) instead of computed here; data may be NULL when
 * every byte of the clip was written ahead. */
ig_status ig_video_shard_writer_add_hashed(ig_video_shard_writer *w, const ig_clip_info *c,
                                           const ig_clip_frame *frames, const void *data,
                                           size_t bytes, uint64_t xxh3, ig_err *err);
/* Writing ahead: the bytes of clips not added yet can go to PREFIX.frames while the clips are
 * still being made (a video's frames while it decodes), in order. The adds that follow take the
 * bytes written ahead as the first bytes of their data (those bytes must be the same: the caller's
 * promise, not checked) and write only the rest; drop_ahead cuts what was written ahead and not
 * added yet back out (a video that failed half-way; only while no add has taken some of them: else
 * IG_ERR_INVALID_ARG). The shard's checksums come out as if the
 * clips had been added whole. */
ig_status ig_video_shard_writer_write_ahead(ig_video_shard_writer *w, const void *data, size_t len,
                                            ig_err *err);
ig_status ig_video_shard_writer_drop_ahead(ig_video_shard_writer *w, ig_err *err);
uint64_t ig_video_shard_writer_ahead(const ig_video_shard_writer *w); /* bytes written ahead */
uint64_t ig_video_shard_writer_clips(const ig_video_shard_writer *w);
uint64_t ig_video_shard_writer_bytes(const ig_video_shard_writer *w); /* of PREFIX.frames */
/* Commits .frames and .clips (IG_ERR_INVALID_ARG with bytes written ahead and not added) and fills
 * *out with the complete manifest: meta's sources,
 * buckets, captions and sampling, the counts, sizes and checksums (the caller writes it, last,
 * with ig_video_shard_meta_write). The counts of sources, buckets and captions in meta bound the
 * records' fields. Frees w (also on failure). */
ig_status ig_video_shard_writer_finish(ig_video_shard_writer *w, const ig_video_shard_meta *meta,
                                       ig_video_shard_meta *out, ig_err *err);
void ig_video_shard_writer_abort(ig_video_shard_writer *w); /* NULL is a no-op */

/* zstd of a clip's raw bytes at level (>= 1): *out is malloc'd, *out_bytes long. */
ig_status ig_clip_compress(const void *raw, size_t raw_bytes, int level, void **out,
                           size_t *out_bytes, ig_err *err);

/* --- reader --- */

/* A frame shard opened read-only, both files mapped. Validated on open: magic, version, sizes,
 * every record (frames, sizes, rates, offsets contiguous and in bounds, source, caption and
 * bucket in range, frame table contiguous and ordered) and the manifest when present; a shard of
 * an unfinished run is refused. Safe to share between threads. */
typedef struct ig_video_shard ig_video_shard;

ig_status ig_video_shard_open(ig_video_shard **out, ig_ctx *ctx, const char *prefix, ig_err *err);
void ig_video_shard_close(ig_video_shard *s); /* NULL is a no-op */

const char *ig_video_shard_prefix(const ig_video_shard *s);
uint64_t ig_video_shard_clips(const ig_video_shard *s);
uint64_t ig_video_shard_frames(const ig_video_shard *s);
uint64_t ig_video_shard_bytes(const ig_video_shard *s); /* of PREFIX.frames */
int ig_video_shard_zstd(const ig_video_shard *s);
ig_clip_info ig_video_shard_clip(const ig_video_shard *s, uint64_t i); /* i < clips */
/* The frame table of clip i: writes its frames entries to out. */
void ig_video_shard_clip_frames(const ig_video_shard *s, uint64_t i, ig_clip_frame *out);
/* Bytes of clip i once decoded: frames x height x width x 3. */
uint64_t ig_video_shard_clip_bytes(const ig_video_shard *s, uint64_t i);
/* Copies (or decompresses) clip i into out[cap] (cap >= ig_video_shard_clip_bytes). Checks the
 * clip's xxh3 when verify is set. Thread-safe. */
ig_status ig_video_shard_read(const ig_video_shard *s, uint64_t i, void *out, size_t cap,
                              int verify, ig_err *err);
/* The manifest, or NULL when PREFIX.json is absent. */
const ig_video_shard_meta *ig_video_shard_meta_get(const ig_video_shard *s);

/* Checks a frame shard completely: structure (as open), the manifest present and consistent,
 * the xxh3 of both files and of every clip, and its caption shard (ig_shard_verify). */
ig_status ig_video_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err);

/* Removes a frame shard's files (manifest first) and its caption shard. Cleanup: never fails. */
void ig_video_shard_remove(const char *prefix);

/* --- lists of frame shards (PREFIX.shards.json, "format": "ingot-video-shard-list") --- */

ig_status ig_video_list_write(const char *prefix, const char *const *shards, size_t n,
                              int overwrite, ig_err *err);
/* The list's shards, or PREFIX itself when there is no list; refused while a run marker covers
 * PREFIX. Free with ig_shard_list_free. */
ig_status ig_video_list_expand(const char *prefix, char ***out, size_t *n, ig_err *err);
/* Verifies every shard of the list (or PREFIX alone) and that each is the one the list names. */
ig_status ig_video_list_verify(ig_ctx *ctx, const char *prefix, size_t *n_shards, ig_err *err);

/* --- clip datasets: frame shards opened as one collection --- */

/* The clips of several frame shards back to back (shard 0's first); a prefix with a list stands
 * for its shards. Every shard must have the same bucket table (or none). Read-only: safe to
 * share between threads. A latent shard is refused, saying so. */
typedef struct ig_clip_dataset ig_clip_dataset;
typedef struct ig_latent_vae ig_latent_vae; /* below, with latent shards */

ig_status ig_clip_dataset_open(ig_clip_dataset **out, ig_ctx *ctx, const char *const *prefixes,
                               size_t n, ig_err *err);
/* Frame shards as above, or latent shards (all of one kind): the same clips in latent positions.
 * Of latents, a clip's record (ig_clip_info) gives its latent [frames, h, w] as frames, height and
 * width; the bucket table is in latent positions (the pixel buckets over the VAE's
 * downsampling); ig_clip_dataset_read gives its posterior's moments, fp32 [F, h, w, 2C] (the C
 * means, then the C log-variances); its captions are the source clips'. Every shard must come
 * from the same VAE (and have the same bucket table). */
ig_status ig_clip_dataset_open_any(ig_clip_dataset **out, ig_ctx *ctx, const char *const *prefixes,
                                   size_t n, ig_err *err);
void ig_clip_dataset_close(ig_clip_dataset *ds); /* NULL is a no-op */
uint64_t ig_clip_dataset_clips(const ig_clip_dataset *ds);
size_t ig_clip_dataset_num_shards(const ig_clip_dataset *ds);
/* Frame shard k (NULL in a dataset of latents). */
const ig_video_shard *ig_clip_dataset_shard(const ig_clip_dataset *ds, size_t k);
const char *ig_clip_dataset_shard_prefix(const ig_clip_dataset *ds, size_t k);
uint64_t ig_clip_dataset_shard_clips(const ig_clip_dataset *ds, size_t k);
/* The VAE whose latents the dataset holds (NULL: frames). */
const ig_latent_vae *ig_clip_dataset_vae(const ig_clip_dataset *ds);
/* Values per position: 3 (RGB24 bytes) for frames, 2C (fp32) for latents; and the bytes
 * ig_clip_dataset_read writes for a clip of that record shape. */
uint32_t ig_clip_dataset_channels(const ig_clip_dataset *ds);
uint64_t ig_clip_dataset_clip_bytes(const ig_clip_dataset *ds, uint32_t frames, uint32_t height,
                                    uint32_t width);
/* The clips the dataset's clips are (frames: itself; latents: the frame shards they were made
 * of): their key (ig_clip_dataset_key; 0 when latent shards do not record it, or were made of
 * several clip datasets) and count, and which of them clip g is. Caption features made of the
 * source clips serve the latents. */
uint64_t ig_clip_dataset_source_key(const ig_clip_dataset *ds);
uint64_t ig_clip_dataset_source_clips(const ig_clip_dataset *ds);
uint64_t ig_clip_dataset_source_clip(const ig_clip_dataset *ds, uint64_t g);
/* Clip g (< clips): its record, and (each may be NULL) its shard and index in that shard. */
ig_clip_info ig_clip_dataset_info(const ig_clip_dataset *ds, uint64_t g, size_t *shard,
                                  uint64_t *local);
/* The bucket table shared by the shards (n may be 0). */
const ig_clip_bucket *ig_clip_dataset_buckets(const ig_clip_dataset *ds, size_t *n);
/* Reads clip g's frames (of latents: its moments, fp32) into out[cap] bytes. Thread-safe. */
ig_status ig_clip_dataset_read(const ig_clip_dataset *ds, uint64_t g, void *out, size_t cap,
                               ig_err *err);
/* Clip g's caption token ids: writes up to cap ids to out, returns the caption's length (0
 * without captions). Thread-safe. */
ig_status ig_clip_dataset_caption(const ig_clip_dataset *ds, uint64_t g, int32_t *out, size_t cap,
                                  size_t *len, ig_err *err);
/* Clip g's caption text, its source's (the manifest's text column), as UTF-8 bytes in the text
 * shard's mapping: *text (not NUL-terminated, valid while ds is open) and *len (0: no caption).
 * IG_ERR_NOT_FOUND naming the shard when it keeps no caption text (made before the texts were
 * kept). Thread-safe. */
ig_status ig_clip_dataset_text(const ig_clip_dataset *ds, uint64_t g, const char **text,
                               size_t *len, ig_err *err);
/* xxh3 of every shard's checksums and clip count: the identity of the data. */
uint64_t ig_clip_dataset_key(const ig_clip_dataset *ds);
/* The vocabulary of the caption shards' tokenizer (the largest, from their manifests; 0 without
 * captions or manifests). */
uint64_t ig_clip_dataset_caption_vocab(const ig_clip_dataset *ds);

/* ==== latent shards (DESIGN 3.2, docs/reference.md) ========================================== */
/* A latent shard holds a VAE's posterior of every clip of frame shards (ingot preprocess
 * latents): PREFIX.latents (per clip [F, h, w, 2C] values, the C means then the C log-variances of
 * each latent position, fp32 or bf16, clips back to back), PREFIX.lclips (the index: a header, one
 * fixed-size record per clip - its latent and pixel shape and everything the source clip carried:
 * source, caption, bucket, label, rates, start, the source frames - and the frame table),
 * PREFIX.json (the manifest: counts, checksums, the VAE that encoded it, sources, buckets) and,
 * when the clips had captions, the token shard PREFIX.captions. In this section ctx may be NULL. */

typedef enum ig_latent_dtype { IG_LATENT_F32 = 1, IG_LATENT_BF16 = 2 } ig_latent_dtype;

/* One clip of a latent shard (a record of PREFIX.lclips). */
typedef struct ig_latent_info {
    uint64_t offset;           /* of its values in PREFIX.latents */
    uint64_t stored_bytes;     /* frames x h x w x channels x the dtype's size */
    uint32_t frames, h, w;     /* the latent's [F, h, w] */
    uint32_t height, width;    /* the source clip's frames, in pixels */
    uint32_t fps_num, fps_den; /* as the source clip's */
    uint32_t source;           /* index into the manifest's sources */
    uint32_t caption;          /* document of PREFIX.captions, or IG_CLIP_NONE */
    uint32_t bucket;           /* index into the manifest's buckets (pixel shapes), or none */
    uint32_t label;            /* class id, or IG_CLIP_NONE */
    uint32_t tb_num, tb_den;   /* the source stream's time base */
    int64_t start_pts;         /* pts of its first frame */
    uint64_t first_frame;      /* its first entry of the frame table */
    uint64_t source_clip;      /* its clip in the source clips (ingot inspect CLIPS --clip K) */
    uint64_t xxh3;             /* of its stored bytes */
} ig_latent_info;

/* The VAE that encoded a latent shard (the manifest's "vae"). */
typedef struct ig_latent_vae {
    char path[1024];       /* as given to --vae */
    char describe[512];    /* its shape (ig_model_describe) */
    uint64_t weights_xxh3; /* of its fp32 parameters: its identity, whatever file held them */
    uint32_t latent_channels, downsample; /* C, and pixels per latent position along a side */
    double scaling_factor, shift_factor;
} ig_latent_vae;

/* The manifest, PREFIX.json ("format": "ingot-latent-shard"). */
typedef struct ig_latent_shard_meta {
    uint64_t clips, frames;
    uint32_t dtype;    /* ig_latent_dtype */
    uint32_t channels; /* 2C */
    uint64_t data_bytes, index_bytes, data_xxh3, index_xxh3;
    ig_latent_vae vae;
    char **sources; /* the videos (owned) */
    size_t n_sources;
    ig_clip_bucket *buckets; /* the source clips' bucket table, in pixels (owned) */
    size_t n_buckets;
    char captions[256]; /* the caption shard's prefix relative to this one's directory, or "" */
    uint64_t caption_documents;
    char clips_source[1024]; /* the source clips' prefix, as given */
    /* the source clips' identity (ig_clip_dataset_key) and count: a latent shard's clip g is
     * source clip g (its record's source_clip); 0 and 0 in shards made before they were kept */
    uint64_t clips_key, source_clips;
    char output[256]; /* the preprocess output this shard belongs to */
    char tool_version[32];
} ig_latent_shard_meta;

void ig_latent_shard_meta_clear(ig_latent_shard_meta *m);
ig_status ig_latent_shard_meta_read(ig_latent_shard_meta *m, const char *prefix, ig_err *err);
ig_status ig_latent_shard_meta_write(const ig_latent_shard_meta *m, const char *prefix,
                                     int overwrite, ig_err *err);
/* 1 when PREFIX is a latent shard (PREFIX.lclips exists) or a list of them, else 0. */
int ig_latent_shard_is(const char *prefix);
const char *ig_latent_dtype_name(uint32_t dtype); /* "fp32", "bf16", "?" */

typedef struct ig_latent_shard_writer ig_latent_shard_writer;

typedef struct ig_latent_shard_writer_opts {
    uint32_t dtype;    /* ig_latent_dtype (default fp32) */
    uint32_t channels; /* 2C, >= 2 and even */
    int overwrite;     /* 0: IG_ERR_EXISTS when the shard's manifest exists */
} ig_latent_shard_writer_opts;

/* Streams clips into PREFIX.latents / PREFIX.lclips under temporary names (the frame table spills
 * to a temporary file: memory does not grow with the clips). Not thread-safe. */
ig_status ig_latent_shard_writer_create(ig_latent_shard_writer **out, ig_ctx *ctx,
                                        const char *prefix, const ig_latent_shard_writer_opts *opts,
                                        ig_err *err);
/* Appends a clip: c (offset, stored_bytes, first_frame and xxh3 are filled in), its
 * frames[c->frames] and its moments, fp32 [frames, h, w, channels], stored in the writer's dtype
 * (bf16: rounded to nearest even). */
ig_status ig_latent_shard_writer_add(ig_latent_shard_writer *w, const ig_latent_info *c,
                                     const ig_clip_frame *frames, const float *moments,
                                     ig_err *err);
uint64_t ig_latent_shard_writer_clips(const ig_latent_shard_writer *w);
/* Commits both files and fills *out with the complete manifest (meta's vae, sources, buckets,
 * captions and names; the counts, sizes and checksums): the caller writes it, last, with
 * ig_latent_shard_meta_write. Frees w (also on failure). */
ig_status ig_latent_shard_writer_finish(ig_latent_shard_writer *w, const ig_latent_shard_meta *meta,
                                        ig_latent_shard_meta *out, ig_err *err);
void ig_latent_shard_writer_abort(ig_latent_shard_writer *w); /* NULL is a no-op */

/* A latent shard opened read-only, both files mapped, validated on open (the index whole, the
 * manifest against it when present; a shard of an unfinished run is refused). Safe to share
 * between threads. */
typedef struct ig_latent_shard ig_latent_shard;

ig_status ig_latent_shard_open(ig_latent_shard **out, ig_ctx *ctx, const char *prefix, ig_err *err);
void ig_latent_shard_close(ig_latent_shard *s); /* NULL is a no-op */
const char *ig_latent_shard_prefix(const ig_latent_shard *s);
uint64_t ig_latent_shard_clips(const ig_latent_shard *s);
uint64_t ig_latent_shard_frames(const ig_latent_shard *s);
uint32_t ig_latent_shard_dtype(const ig_latent_shard *s);
uint32_t ig_latent_shard_channels(const ig_latent_shard *s);               /* 2C */
ig_latent_info ig_latent_shard_clip(const ig_latent_shard *s, uint64_t i); /* i < clips */
void ig_latent_shard_clip_frames(const ig_latent_shard *s, uint64_t i, ig_clip_frame *out);
/* Values of clip i: frames x h x w x channels. */
uint64_t ig_latent_shard_clip_values(const ig_latent_shard *s, uint64_t i);
/* Clip i's moments as fp32 [frames, h, w, channels] into out[cap] (cap in floats), checking its
 * xxh3 when verify is set. Thread-safe. */
ig_status ig_latent_shard_read(const ig_latent_shard *s, uint64_t i, float *out, size_t cap,
                               int verify, ig_err *err);
/* The manifest, or NULL when PREFIX.json is absent. */
const ig_latent_shard_meta *ig_latent_shard_meta_get(const ig_latent_shard *s);
/* Checks a latent shard completely: structure (as open), the manifest present and consistent,
 * the xxh3 of both files and of every clip, and its caption shard. */
ig_status ig_latent_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err);
/* Removes a latent shard's files (manifest first) and its caption shard. Never fails. */
void ig_latent_shard_remove(const char *prefix);

/* Lists of latent shards (PREFIX.shards.json, "format": "ingot-latent-shard-list"), as lists of
 * frame shards. */
ig_status ig_latent_list_write(const char *prefix, const char *const *shards, size_t n,
                               int overwrite, ig_err *err);
ig_status ig_latent_list_expand(const char *prefix, char ***out, size_t *n, ig_err *err);
ig_status ig_latent_list_verify(ig_ctx *ctx, const char *prefix, size_t *n_shards, ig_err *err);

/* The key that follows key once the shard whose manifest is m is added to a clip dataset
 * (ig_clip_dataset_key is it over the shards in order, from 0): what a preprocess run computes
 * for shards it has just written, before they can be opened. */
uint64_t ig_clip_key_next(uint64_t key, const ig_video_shard_meta *m);

/* ==== caption-feature shards =============================================================== */
/* The features a frozen text encoder (a T5's) gave the captions of a run of clips, made by ingot
 * preprocess captions for a DiT to attend to (PixArt-alpha's way): PREFIX.feat (each clip's [L, D]
 * values back to back, little-endian fp32 or bf16, no padding; L the caption's tokens, 0 for a clip
 * without one), PREFIX.fidx (the index: a header naming the clip data and the clips it covers, and
 * a fixed-size record per clip with its offset, L and checksum; feature_shard_internal.h) and
 * PREFIX.json (the manifest: the encoder, the counts, the checksums of both files). Several shards
 * (one a rank of a multi-process run) are listed by PREFIX.shards.json and read as one. A shard
 * covers clips first .. first + clips - 1 of its clip data, whose clips and key
 * (ig_clip_dataset_key) it records, so that features are never read against other clips. In this
 * section ctx may be NULL. */

typedef enum ig_feature_dtype { IG_FEATURES_F32 = 1, IG_FEATURES_BF16 = 2 } ig_feature_dtype;
const char *ig_feature_dtype_name(ig_feature_dtype d); /* "fp32", "bf16", "unknown" */

/* The encoder that made the features: its shape's line and width, and enough to tell another
 * encoder from it - the xxh3 of its weights (train.h's ig_text_encoder_identity) and its
 * tokenizer's name and hash (ig_tokenizer_hash). */
typedef struct ig_feature_encoder {
    char describe[256];    /* ig_model_describe's line ("t5: 3 layers, 4 heads, d_model 48, ...") */
    uint32_t width;        /* D */
    uint64_t weights_xxh3; /* 0: unknown */
    char tokenizer[64];
    uint64_t tokenizer_hash;
} ig_feature_encoder;

/* The manifest, PREFIX.json ("format": "ingot-caption-features"). */
typedef struct ig_feature_meta {
    uint64_t clips;       /* clips of this shard */
    uint64_t first_clip;  /* its first clip's index in the clip data */
    uint64_t data_clips;  /* the clip data's clips */
    uint64_t clip_key;    /* the clip data's key (ig_clip_dataset_key) */
    uint64_t captioned;   /* clips with a caption */
    uint64_t tokens;      /* their tokens, summed */
    uint64_t cut;         /* captions longer than caption_len, cut */
    uint32_t caption_len; /* the most tokens a clip's caption keeps (the cut; EOS kept) */
    uint32_t width;       /* D */
    ig_feature_dtype dtype;
    ig_feature_encoder encoder;
    uint64_t feat_bytes, fidx_bytes, feat_xxh3, fidx_xxh3;
    char **sources; /* the clip shards it was made from, as given (owned) */
    size_t n_sources;
    char output[256]; /* the preprocess output it belongs to (see ig_manifest) */
    char tool_version[32];
} ig_feature_meta;

void ig_feature_meta_clear(ig_feature_meta *m);
ig_status ig_feature_meta_read(ig_feature_meta *m, const char *prefix, ig_err *err);
ig_status ig_feature_meta_write(const ig_feature_meta *m, const char *prefix, int overwrite,
                                ig_err *err);
/* 1 when PREFIX is a caption-feature shard (PREFIX.fidx exists) or a list of them, else 0. */
int ig_feature_shard_is(const char *prefix);
/* The first way two encoders differ, as a phrase for a message ("the width: 48 and 64", "the
 * weights (xxh3 0123... and 4567...)"), or NULL when they are the same encoder. A weights or
 * tokenizer hash of 0 (unknown) is not compared. */
const char *ig_feature_encoder_differs(const ig_feature_encoder *a, const ig_feature_encoder *b,
                                       char *buf, size_t cap);

/* --- writer --- */

typedef struct ig_feature_shard_writer ig_feature_shard_writer;

typedef struct ig_feature_shard_writer_opts {
    ig_feature_dtype dtype;
    uint32_t width, caption_len;
    uint64_t first_clip, data_clips, clip_key; /* the clips it covers (the header's) */
    int overwrite;                             /* 0: IG_ERR_EXISTS when the shard's files exist */
} ig_feature_shard_writer_opts;

/* Streams the clips' features into PREFIX.feat under a temporary name; the records stay in memory
 * (24 bytes a clip) until finish. Not thread-safe. */
ig_status ig_feature_shard_writer_create(ig_feature_shard_writer **out, ig_ctx *ctx,
                                         const char *prefix,
                                         const ig_feature_shard_writer_opts *opts, ig_err *err);
/* Appends the next clip: len x width values already in the shard's dtype (len 0: no caption,
 * values unused), or with repeat the previous clip's values again (stored once; values unused). */
ig_status ig_feature_shard_writer_add(ig_feature_shard_writer *w, const void *values, uint32_t len,
                                      int repeat, ig_err *err);
uint64_t ig_feature_shard_writer_clips(const ig_feature_shard_writer *w);
/* Commits .feat, then .fidx (after checking that the clips are the header's), and fills *out:
 * meta's encoder, sources and output with the counts, sizes and checksums (the caller writes it,
 * last, with ig_feature_meta_write). Frees w (also on failure). */
ig_status ig_feature_shard_writer_finish(ig_feature_shard_writer *w, const ig_feature_meta *meta,
                                         ig_feature_meta *out, ig_err *err);
void ig_feature_shard_writer_abort(ig_feature_shard_writer *w); /* NULL is a no-op */

/* --- reader --- */

/* A caption-feature shard opened read-only, both files mapped. Validated on open: the index whole
 * (ig_feat_validate), and the manifest when present (its fields against the index, the index's
 * xxh3); a shard of an unfinished run is refused. Safe to share between threads. */
typedef struct ig_feature_shard ig_feature_shard;

ig_status ig_feature_shard_open(ig_feature_shard **out, ig_ctx *ctx, const char *prefix,
                                ig_err *err);
void ig_feature_shard_close(ig_feature_shard *s); /* NULL is a no-op */
const char *ig_feature_shard_prefix(const ig_feature_shard *s);
uint64_t ig_feature_shard_clips(const ig_feature_shard *s);
uint64_t ig_feature_shard_first_clip(const ig_feature_shard *s);
/* The manifest, or NULL when PREFIX.json is absent. */
const ig_feature_meta *ig_feature_shard_meta(const ig_feature_shard *s);
/* Clip i's (i < clips) tokens and its values in the shard's dtype (*values: into the mapping,
 * *len x width of them; NULL when len is 0). With verify, its checksum is checked first. */
ig_status ig_feature_shard_clip(const ig_feature_shard *s, uint64_t i, const void **values,
                                uint32_t *len, int verify, ig_err *err);
/* Checks a shard completely: structure (as open), the manifest present and consistent, the xxh3
 * of both files and of every clip's values. */
ig_status ig_feature_shard_verify(ig_ctx *ctx, const char *prefix, ig_err *err);
/* Removes a shard's files, manifest first. Cleanup: never fails. */
void ig_feature_shard_remove(const char *prefix);

/* --- lists (PREFIX.shards.json, "format": "ingot-caption-features-list") --- */

ig_status ig_feature_list_write(const char *prefix, const char *const *shards, size_t n,
                                int overwrite, ig_err *err);
/* The list's shards, or PREFIX itself when there is none; refused while a run marker covers
 * PREFIX. Free with ig_shard_list_free. */
ig_status ig_feature_list_expand(const char *prefix, char ***out, size_t *n, ig_err *err);
/* Verifies every shard of the list (or PREFIX alone) and that each is the one the list names. */
ig_status ig_feature_list_verify(ig_ctx *ctx, const char *prefix, size_t *n_shards, ig_err *err);

/* --- feature datasets: the shards of one or more prefixes as the features of one clip data --- */

/* Every shard must have its manifest; they must have one encoder, width, dtype, caption length
 * and clip data, and cover its clips in order, each shard starting where the one before ends,
 * the last ending at the clip data's end (a missing, repeated or reordered shard is refused,
 * naming it). Read-only: safe to share between threads. */
typedef struct ig_feature_dataset ig_feature_dataset;

ig_status ig_feature_dataset_open(ig_feature_dataset **out, ig_ctx *ctx,
                                  const char *const *prefixes, size_t n, ig_err *err);
void ig_feature_dataset_close(ig_feature_dataset *ds); /* NULL is a no-op */
uint64_t ig_feature_dataset_clips(const ig_feature_dataset *ds);
/* The first shard's manifest: the encoder, width, dtype, caption length and clip data of all. */
const ig_feature_meta *ig_feature_dataset_meta(const ig_feature_dataset *ds);
/* Clip g's tokens and values (as ig_feature_shard_clip, without the checksum). Thread-safe. */
ig_status ig_feature_dataset_clip(const ig_feature_dataset *ds, uint64_t g, const void **values,
                                  uint32_t *len, ig_err *err);
/* IG_OK when the features were made from the clips of clips (the same key and clip count; of a
 * dataset of latents, the clips they were made of: read feature ig_clip_dataset_source_clip(g)
 * for clip g), else IG_ERR_CONFIG naming both by the names given (what the features were made
 * from, and how to fix it). */
ig_status ig_feature_dataset_match(const ig_feature_dataset *ds, const ig_clip_dataset *clips,
                                   const char *features_name, const char *clips_name, ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_DATASET_H */
