/* preprocess.h - the public API of ingot's preprocessing: byte-level BPE tokenizers, document
 * readers for .jsonl / .jsonl.zst / .txt inputs, and the text pipeline that turns inputs into
 * token shards.
 */
#ifndef INGOT_PREPROCESS_H
#define INGOT_PREPROCESS_H

#include "core/core.h"
#include "comm/comm.h"
#include "dataset/dataset.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- token vectors ------------------------------------------------------------------------- */

/* A growable vector of token ids. Zero-initialise; free with ig_tokens_free. */
typedef struct ig_tokens {
    int32_t *ids;
    size_t n, cap;
} ig_tokens;

ig_status ig_tokens_push(ig_tokens *t, int32_t id); /* IG_ERR_NOMEM on failure */
ig_status ig_tokens_reserve(ig_tokens *t, size_t cap);
void ig_tokens_free(ig_tokens *t);

/* ---- tokenizers ---------------------------------------------------------------------------- */

/* Byte-level BPE, exactly as GPT-2 (Hugging Face / encoder.py) and tiktoken encode. Loaded from a
 * Hugging Face tokenizer.json (BPE model, ByteLevel pre-tokenizer), from vocab.json + merges.txt,
 * or from a .tiktoken rank file (r50k_base/gpt2, cl100k_base, o200k_base). An ig_tokenizer is
 * immutable after loading and may be shared by threads; each thread encodes through its own
 * ig_encoder (which holds a cache). */
typedef struct ig_tokenizer ig_tokenizer;

typedef struct ig_tokenizer_opts {
    /* For .tiktoken files: "r50k_base", "gpt2", "cl100k_base" or "o200k_base". NULL: taken from
     * the file name (e.g. cl100k_base.tiktoken). */
    const char *tiktoken_encoding;
} ig_tokenizer_opts;

ig_tokenizer_opts ig_tokenizer_opts_default(void);

/* path: a tokenizer.json, a directory holding tokenizer.json or vocab.json + merges.txt, or a
 * .tiktoken file. Errors name the file and what was expected. */
ig_status ig_tokenizer_load(ig_tokenizer **out, ig_ctx *ctx, const char *path,
                            const ig_tokenizer_opts *opts, ig_err *err);
void ig_tokenizer_free(ig_tokenizer *tok); /* NULL is a no-op */

/* Number of ids (including special tokens): the smallest n with every id < n. */
size_t ig_tokenizer_vocab_size(const ig_tokenizer *tok);
/* The end-of-document id (<|endoftext|>), or -1 when the tokenizer has none. */
int32_t ig_tokenizer_eod(const ig_tokenizer *tok);
/* "gpt2", "cl100k_base", "o200k_base", ...: the pre-tokenization scheme and vocabulary name. */
const char *ig_tokenizer_name(const ig_tokenizer *tok);
/* What the ids mean: xxh3 over every id's bytes and which ids are special (not the merges or
 * the pre-tokenization). Tokenizers whose ids mean the same bytes have the same hash, so shards
 * made with GPT-2's tokenizer.json, its vocab.json + merges.txt and r50k_base.tiktoken can be
 * merged and blended together; manifests record it. */
uint64_t ig_tokenizer_hash(const ig_tokenizer *tok);

typedef struct ig_encoder ig_encoder;
ig_status ig_encoder_create(ig_encoder **out, const ig_tokenizer *tok, ig_err *err);
void ig_encoder_free(ig_encoder *enc);

enum { IG_ENCODE_ALLOW_SPECIAL = 1 }; /* flags: treat "<|endoftext|>" etc. as special tokens */

/* Appends the ids of text[0..len) to out. Any bytes are accepted (invalid UTF-8 is encoded
 * byte-wise); without IG_ENCODE_ALLOW_SPECIAL special-token strings are plain text. */
ig_status ig_encoder_encode(ig_encoder *enc, const char *text, size_t len, int flags,
                            ig_tokens *out, ig_err *err);

/* Appends the bytes of ids to *buf (a malloc'd buffer of *len bytes and *cap capacity; start with
 * all zero). An id outside the vocabulary is an IG_ERR_INVALID_ARG error naming it. */
ig_status ig_tokenizer_decode(const ig_tokenizer *tok, const int32_t *ids, size_t n, char **buf,
                              size_t *len, size_t *cap, ig_err *err);

/* ---- document readers ---------------------------------------------------------------------- */

typedef enum ig_input_kind {
    IG_INPUT_JSONL,     /* .jsonl / .json lines, also "-" (stdin) */
    IG_INPUT_JSONL_ZST, /* .jsonl.zst, .zst: streamed through libzstd */
    IG_INPUT_TXT,       /* .txt: the whole file is one document */
    IG_INPUT_TXT_LINES, /* .txt with txt_lines: each non-empty line is one document */
} ig_input_kind;

/* Expands inputs (files, directories searched recursively for .jsonl/.jsonl.zst/.zst/.txt,
 * globs, "-") into a de-duplicated list of files. Arguments keep their order; the files one
 * directory or glob yields are sorted bytewise (strcmp), so the order is the same on every machine.
 * Hidden entries ('.' names) and symlinked directories are skipped inside directories; an explicit
 * file is taken whatever its name. A file named twice (by any spelling) is kept at its first
 * position. *out is a malloc'd array of malloc'd strings; free with ig_input_list_free. An input
 * that yields no file is IG_ERR_NOT_FOUND naming it. */
ig_status ig_expand_inputs(const char *const *inputs, size_t n_inputs, char ***out, size_t *n_out,
                           ig_err *err);
void ig_input_list_free(char **list, size_t n);

/* The kind of an input file from its name (txt_lines selects IG_INPUT_TXT_LINES for .txt). */
ig_input_kind ig_input_kind_of(const char *path, int txt_lines);

/* A record is the raw bytes of one document before parsing: one JSON line, or a whole .txt file,
 * or one .txt line. Records are produced in file order by one thread; parsing is thread-safe and
 * is done by the pipeline's workers.
 * - Every kind: a UTF-8 byte order mark (EF BB BF) at the start of the input is dropped: it marks
 *   the encoding and is not text (byte offsets stay those of the file).
 * - JSONL: one record per line without its '\n' (a '\r' before it stays: JSON whitespace); lines
 *   that are empty or only spaces/tabs/'\r' are skipped; a last line without '\n' counts.
 * - TXT_LINES: each line without "\n" or "\r\n"; empty lines are skipped, others kept as they are.
 * - TXT: one record, the whole file (an empty file is one empty record), line 1, offset 0.
 * Line numbers count every line of the input, skipped ones included. */
typedef struct ig_record {
    const char *data; /* valid until the next ig_record_reader_next call */
    size_t len;
    uint64_t line;        /* 1-based line number in the (decompressed) input */
    uint64_t byte_offset; /* offset of the record in the (decompressed) input */
} ig_record;

typedef struct ig_record_reader ig_record_reader;

/* Opens path ("-" is stdin, read as JSONL) of the given kind. Reads through 1 MiB buffers: memory
 * does not grow with the file, only with the longest record. Not thread-safe (one reader per
 * thread). Close with ig_record_reader_close (NULL is a no-op). */
ig_status ig_record_reader_open(ig_record_reader **out, const char *path, ig_input_kind kind,
                                ig_err *err);
/* Next record: IG_OK and *has = 1, or IG_OK and *has = 0 at the end. A truncated or corrupt .zst
 * is IG_ERR_FORMAT naming the file and the compressed byte offset. A record longer than 1 GiB is
 * IG_ERR_FORMAT naming file:line. */
ig_status ig_record_reader_next(ig_record_reader *r, ig_record *rec, int *has, ig_err *err);
/* Compressed bytes consumed so far (for progress against the file size). */
uint64_t ig_record_reader_bytes_in(const ig_record_reader *r);
/* The size the file must have (e.g. its size when a run started and planned its work). By
 * default a regular file's size when it was opened: a file that ends before it or grows past it
 * is IG_ERR_IO ("the file changed while it was read") instead of a quietly shorter input. */
void ig_record_reader_expect_size(ig_record_reader *r, uint64_t size);
void ig_record_reader_close(ig_record_reader *r);

#define IG_MAX_JSON_KEYS 8

/* One parsed document: per JSON key, its text (valid UTF-8). */
typedef struct ig_doc {
    size_t n_texts;
    const char *text[IG_MAX_JSON_KEYS];
    size_t len[IG_MAX_JSON_KEYS];
    void *owner_; /* private: what the texts point into */
} ig_doc;

/* Parses a record of kind into doc, decoding JSON escapes exactly (surrogate pairs included;
 * \u0000 is kept as a NUL byte, so use doc->len) and checking UTF-8. For JSONL, doc->n_texts ==
 * n_keys and text[k] is the value of json_keys[k] (1..IG_MAX_JSON_KEYS keys), owned by doc. For
 * the txt kinds json_keys is ignored, n_texts == 1 and text[0] points into rec->data (valid as
 * long as the record is). A bad record is IG_ERR_FORMAT with a message such as
 *   "PATH:LINE:COLUMN: malformed JSON: ...", "PATH:LINE: missing key 'text' (keys present: ...)",
 *   "PATH:LINE: key 'text' is a number, expected a string",
 *   "PATH:LINE: invalid UTF-8 at byte N of the line" (N 1-based), or for a whole .txt file
 *   "PATH: invalid UTF-8 at byte offset N" (N 0-based in the file).
 * Thread-safe. Release with ig_doc_release (also safe on a doc a failed parse left zeroed). */
ig_status ig_record_parse(const ig_record *rec, ig_input_kind kind, const char *path,
                          const char *const *json_keys, size_t n_keys, ig_doc *doc, ig_err *err);
void ig_doc_release(ig_doc *doc);

/* 1 when s[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF); otherwise 0 and
 * *bad_offset is the offset of the first bad byte. */
int ig_utf8_valid(const char *s, size_t len, size_t *bad_offset);

/* ---- the text pipeline --------------------------------------------------------------------- */

typedef enum ig_on_error { IG_ON_ERROR_FAIL = 0, IG_ON_ERROR_SKIP } ig_on_error;

#define IG_PREPROCESS_MAX_REPORTED 10

typedef struct ig_preprocess_opts {
    const char *const *inputs; /* files, directories, globs, "-" (see ig_expand_inputs) */
    size_t n_inputs;
    const char *output_prefix;    /* OUT: writes OUT.bin/.idx/.json (see below for names) */
    const char *const *json_keys; /* default {"text"}; several keys give one output per key */
    size_t n_keys;
    const ig_tokenizer *tokenizer; /* borrowed */
    const char *tokenizer_path;    /* recorded in the manifests (for inspect --decode) */
    int append_eod;                /* append the tokenizer's end-of-document id */
    int allow_special;             /* special-token strings in the text are special tokens */
    int txt_lines;                 /* .txt: a document per line instead of per file */
    int workers;                   /* tokenizing threads; 0: the context's thread count */
    uint64_t shard_size;           /* .bin bytes per shard (split at documents); 0: one shard */
    int dedup_exact;               /* drop documents whose text's XXH3-128 was seen before */
    /* bad records: fail (default) or skip and count; with skip, a file the reader cannot go on
     * with (a corrupt .zst, a record over 1 GiB) is skipped from there and counted as one */
    ig_on_error on_error;
    int overwrite; /* --force */
    int progress;  /* show a progress bar on stderr */
    ig_comm *comm; /* NULL: this process alone. With several ranks, each takes a share of the
                      input files (by size, largest first to the least loaded rank), writes
                      shards named OUT..._rRRRR..., and rank 0 writes one shard list over all of
                      them; every rank must call with the same options */
} ig_preprocess_opts;

ig_preprocess_opts ig_preprocess_opts_default(void);

typedef struct ig_preprocess_stats {
    uint64_t files;
    uint64_t docs_read, docs_written, docs_skipped, docs_duplicate;
    uint64_t tokens;     /* written, all keys */
    uint64_t bytes_in;   /* input bytes consumed (compressed size for .zst) */
    uint64_t text_bytes; /* UTF-8 bytes of the documents' text */
    uint64_t shards;     /* shard files written (per key) */
    double seconds;
    size_t n_reported; /* the first bad records, as "file:line: problem" */
    char reported[IG_PREPROCESS_MAX_REPORTED][512];
    char **shard_prefixes; /* the shards written, in order (owned; ig_preprocess_stats_clear) */
    size_t n_shard_prefixes;
} ig_preprocess_stats;

void ig_preprocess_stats_clear(ig_preprocess_stats *st);

/* Reads, tokenizes and writes the inputs as token shards. Output names: OUT when one key and
 * one shard; OUT_KEY with several keys; OUT[_KEY]_NNNNN with shard_size, plus the shard list
 * OUT[_KEY].shards.json naming them all; "_rRRRR" before NNNNN with several ranks (rank 0 then
 * writes one shard list over all of them). The output bytes are identical for any worker count.
 * Memory stays bounded (batches in flight are limited; only the dedup set grows, 16 bytes per
 * document).
 *
 * The run commits through one marker, OUT.incomplete, written before any file and removed once
 * all shards, manifests and shard lists of every key (and rank) are written, so a run killed at
 * any moment leaves an output that ig_shard_open and verify refuse. Before it starts, a run still
 * going on the same output is refused (IG_ERR_EXISTS; the marker is held locked from before
 * anything is written, so of two runs started together one is refused), as is a complete output
 * unless opts.overwrite (with it, the old output is removed whole: every key and rank); the files
 * of an unfinished earlier run are removed. An error stops the run and removes everything it wrote,
 * on every rank. */
ig_status ig_preprocess_text(ig_ctx *ctx, const ig_preprocess_opts *opts,
                             ig_preprocess_stats *stats, ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_PREPROCESS_H */
