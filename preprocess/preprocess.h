/* preprocess.h - the public API of ingot's preprocessing: tokenizers (byte-level BPE and
 * SentencePiece), document
 * readers for .jsonl / .jsonl.zst / .txt inputs, and the text pipeline that turns inputs into
 * token shards; the video pipeline (FFmpeg) that turns videos into frame shards, and writers of
 * videos for people (MP4, PNG, contact sheets).
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

/* A growable vector of token ids. Zero-initialise (ids then come from malloc), or set ctx to grow
 * it through that context's allocator; free with ig_tokens_free (which keeps ctx). */
typedef struct ig_tokens {
    int32_t *ids;
    size_t n, cap;
    ig_ctx *ctx; /* NULL: malloc */
} ig_tokens;

ig_status ig_tokens_push(ig_tokens *t, int32_t id); /* IG_ERR_NOMEM on failure */
ig_status ig_tokens_reserve(ig_tokens *t, size_t cap);
void ig_tokens_free(ig_tokens *t);

/* ---- tokenizers ---------------------------------------------------------------------------- */

/* Two families, each exactly as its reference encodes:
 * - Byte-level BPE, as GPT-2 (Hugging Face / encoder.py) and tiktoken: from a Hugging Face
 *   tokenizer.json (BPE model, ByteLevel pre-tokenizer), from vocab.json + merges.txt, or from a
 *   .tiktoken rank file (r50k_base/gpt2, cl100k_base, o200k_base).
 * - SentencePiece (T5, Llama 2, ...), as SentencePiece's own encoder: from a SentencePiece
 *   .model file (unigram or BPE model; its normaliser, user-defined and control symbols, unknown
 *   pieces and byte fallback as the file says), or from a Hugging Face tokenizer.json whose model
 *   is Unigram (T5's), which gives the same ids as the .model it was converted from. Text is
 *   normalised first (NFKC and the like, white space as U+2581, a dummy prefix), so decoding gives
 *   the normalised text back, not always the original bytes.
 * An ig_tokenizer is immutable after loading and may be shared by threads; each thread encodes
 * through its own ig_encoder (which holds a cache or scratch space). */
typedef struct ig_tokenizer ig_tokenizer;

typedef struct ig_tokenizer_opts {
    /* For .tiktoken files: "r50k_base", "gpt2", "cl100k_base" or "o200k_base". NULL: taken from
     * the file name (e.g. cl100k_base.tiktoken). */
    const char *tiktoken_encoding;
} ig_tokenizer_opts;

ig_tokenizer_opts ig_tokenizer_opts_default(void);

/* path: a tokenizer.json, a .tiktoken file, a SentencePiece model (recognised by its contents,
 * whatever its name: spiece.model, tokenizer.model, ...), or a directory holding spiece.model or
 * tokenizer.model (taken first), tokenizer.json, or vocab.json + merges.txt. Errors name the file
 * and what was expected; a malformed .model file's name the byte offset. */
ig_status ig_tokenizer_load(ig_tokenizer **out, ig_ctx *ctx, const char *path,
                            const ig_tokenizer_opts *opts, ig_err *err);
void ig_tokenizer_free(ig_tokenizer *tok); /* NULL is a no-op */

/* Number of ids (including special tokens): the smallest n with every id < n. */
size_t ig_tokenizer_vocab_size(const ig_tokenizer *tok);
/* The end-of-document id (<|endoftext|>; a SentencePiece model's end-of-sequence piece </s>), or
 * -1 when the tokenizer has none. */
int32_t ig_tokenizer_eod(const ig_tokenizer *tok);
/* The end-of-sequence id an encoder's input ends with (T5's </s>, id 1): for SentencePiece models
 * the control piece named by the model's eos_piece ("</s>"), for byte-level BPE <|endoftext|>;
 * -1 when there is none. The same id as ig_tokenizer_eod. */
int32_t ig_tokenizer_eos(const ig_tokenizer *tok);
/* "gpt2", "cl100k_base", "o200k_base", "sentencepiece-unigram", "sentencepiece-bpe": the
 * pre-tokenization scheme and vocabulary name. */
const char *ig_tokenizer_name(const ig_tokenizer *tok);
/* What the ids mean: xxh3 over every id's bytes and which ids are special (not the merges or
 * the pre-tokenization). Tokenizers whose ids mean the same bytes have the same hash, so shards
 * made with GPT-2's tokenizer.json, its vocab.json + merges.txt and r50k_base.tiktoken can be
 * merged and blended together; manifests record it. A SentencePiece model's hash covers its pieces
 * with their scores and types and its normaliser: a .model and the tokenizer.json converted from
 * it hash alike. */
uint64_t ig_tokenizer_hash(const ig_tokenizer *tok);

/* An encoder's memory (its caches and merge scratch: 6 MB written when it is made, up to 22 MB as
 * its cache of merged pieces fills) comes from the context the tokenizer was loaded with
 * (ig_tokenizer_load's ctx), which must outlive it. */
typedef struct ig_encoder ig_encoder;
ig_status ig_encoder_create(ig_encoder **out, const ig_tokenizer *tok, ig_err *err);
void ig_encoder_free(ig_encoder *enc);

/* Merged pieces shared by the encoders of several threads: an encoder given one (ig_encoder_share)
 * looks a piece it must merge up there first and adds what it merges, so that with T threads a
 * piece is merged once, not T times. Safe for any number of threads at once; bounded: it holds
 * max_pieces pieces (0: IG_PIECE_CACHE_DEFAULT, about 18 MB), then only answers, each encoder's
 * own cache taking the rest. The same ids with it as without. It must outlive the encoders that
 * use it; its memory comes from the tokenizer's context. */
typedef struct ig_piece_cache ig_piece_cache;
#define IG_PIECE_CACHE_DEFAULT 131072
ig_status ig_piece_cache_create(ig_piece_cache **out, const ig_tokenizer *tok, size_t max_pieces,
                                ig_err *err);
void ig_piece_cache_free(ig_piece_cache *cache); /* NULL is a no-op */
/* Makes enc use cache (NULL: none); an IG_ERR_INVALID_ARG error when cache was made for another
 * tokenizer. A SentencePiece model's encoder ignores it. */
ig_status ig_encoder_share(ig_encoder *enc, ig_piece_cache *cache, ig_err *err);

/* flags of ig_encoder_encode */
enum {
    /* treat "<|endoftext|>" etc. as special tokens; for SentencePiece models the strings of the
     * control and unknown pieces ("</s>", "<unk>"), the text between them encoded piece by piece */
    IG_ENCODE_ALLOW_SPECIAL = 1,
    /* append the end-of-sequence id (ig_tokenizer_eos; an encoder's input, e.g. T5's): an
     * IG_ERR_INVALID_ARG error when the tokenizer has none */
    IG_ENCODE_APPEND_EOS = 2,
};

/* Appends the ids of text[0..len) to out. Any bytes are accepted (byte-level BPE encodes invalid
 * UTF-8 byte-wise; SentencePiece reads each invalid byte as U+FFFD, as it does); without
 * IG_ENCODE_ALLOW_SPECIAL special-token strings are plain text (SentencePiece never makes a control
 * id from text). */
ig_status ig_encoder_encode(ig_encoder *enc, const char *text, size_t len, int flags,
                            ig_tokens *out, ig_err *err);

/* Appends the bytes of ids to *buf (a malloc'd buffer of *len bytes and *cap capacity; start with
 * all zero). An id outside the vocabulary is an IG_ERR_INVALID_ARG error naming it. SentencePiece
 * models decode as SentencePiece's DecodeIds: U+2581 as a space, the leading space of the text
 * dropped (the dummy prefix), control ids as nothing, <unk> as " \u2047 ", byte pieces joined into
 * UTF-8 (an invalid sequence as U+FFFD). */
ig_status ig_tokenizer_decode(const ig_tokenizer *tok, const int32_t *ids, size_t n, char **buf,
                              size_t *len, size_t *cap, ig_err *err);
/* As ig_tokenizer_decode, for ids that continue a text decoded before (text printed as it is
 * generated): a SentencePiece piece's leading U+2581 is a space, and byte pieces are copied as they
 * are (a character whose bytes come in several calls arrives whole). */
ig_status ig_tokenizer_decode_next(const ig_tokenizer *tok, const int32_t *ids, size_t n,
                                   char **buf, size_t *len, size_t *cap, ig_err *err);

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
 * does not grow with the file, only with the longest record. The reader's memory comes from ctx
 * (NULL: malloc), which must outlive it; zstd's decoder allocates its own. Not thread-safe: one
 * thread at a time. Close with ig_record_reader_close (NULL is a no-op). */
ig_status ig_record_reader_open(ig_record_reader **out, ig_ctx *ctx, const char *path,
                                ig_input_kind kind, ig_err *err);
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
    int threads; /* threads the run may use, the calling thread among them: 1 reads, tokenizes
                    and writes on the calling thread; N >= 2 starts N - 1 threads, and each of
                    the N reads a batch and tokenizes it (the calling thread also writes);
                    0: the context's thread count */
    int readers; /* R, inputs read at once (with threads >= 2), each by one thread at a time:
                    0: one per 16 threads; never more than the units there are to read (files,
                    and ranges of large files) */
    /* with R >= 2, a regular .jsonl or line-mode .txt file larger than this is read as byte
     * ranges of this size, several at once (ranges split at lines, so any size gives the same
     * output); 0: 8 MiB */
    uint64_t split_size;
    uint64_t shard_size; /* .bin bytes per shard (split at documents); 0: one shard */
    int dedup_exact;     /* drop documents whose text's XXH3-128 was seen before */
    /* bad records: fail (default) or skip and count; with skip, a file the reader cannot go on
     * with (a corrupt .zst, a record over 1 GiB) is skipped from there and counted as one */
    ig_on_error on_error;
    int overwrite; /* replace an existing complete output */
    int progress;  /* show a progress bar on stderr */
    ig_comm *comm; /* NULL: this process alone. With several ranks, each takes a share of the
                      input files (by size, largest first to the least loaded rank), writes
                      shards named OUT..._rRRRR..., and rank 0 writes one shard list over all of
                      them; every rank must call with the same options */
} ig_preprocess_opts;

ig_preprocess_opts ig_preprocess_opts_default(void);

/* The configuration keys of the fields above (section "preprocess:"; see ig_cfg_key), to bind a
 * YAML config, --set overrides and flags into an ig_preprocess_opts (ig_config_bind). The
 * tokenizer, comm, progress and workers are the caller's. */
extern const ig_cfg_key ig_preprocess_keys[];
extern const size_t ig_preprocess_n_keys;

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
    char **shard_prefixes; /* the shards written, in order (malloc'd; ig_preprocess_stats_clear) */
    size_t n_shard_prefixes;
} ig_preprocess_stats;

void ig_preprocess_stats_clear(ig_preprocess_stats *st);

/* Reads, tokenizes and writes the inputs as token shards. Output names: OUT when one key and
 * one shard; OUT_KEY with several keys; OUT[_KEY]_NNNNN with shard_size, plus the shard list
 * OUT[_KEY].shards.json naming them all; "_rRRRR" before NNNNN with several ranks (rank 0 then
 * writes one shard list over all of them). The output bytes are identical for any worker count.
 * Memory stays bounded (batches in flight are limited; only the dedup set grows, 16 bytes per
 * document) and comes from ctx's allocator (the tokenizer's context for the encoders): an
 * allocation that fails stops the run with IG_ERR_NOMEM and removes what it wrote.
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

/* ==== caption features: a frozen text encoder's, for a DiT to attend to ====================== */

/* What encodes captions: a frozen text encoder the caller opened (ingot's is train.h's
 * ig_text_encoder, which this module does not name: the caller passes its encoding as a function,
 * as ingot preprocess does). encode writes caption i's features, fp32 [lens[i], id.width], to
 * out[i]; a caption's features may not depend on the other captions of the call. to_bf16 is the
 * rounding the shards' bf16 takes (the compute backend's; NULL: fp32 shards only). */
typedef struct ig_caption_encoder {
    ig_feature_encoder id; /* recorded in the shards: its line, width, weights' and tokenizer's */
    int max_batch;         /* captions one call takes (>= 1) */
    int max_len;           /* the most tokens a caption may have (>= the caption length) */
    ig_status (*encode)(void *user, size_t n, const int32_t *const *ids, const int *lens,
                        float *const *out, ig_err *err);
    void (*to_bf16)(uint16_t *dst, const float *src, size_t n);
    void *user;
} ig_caption_encoder;

/* How captions become features: tokenized by the encoder's tokenizer with its end-of-sequence id
 * appended (IG_ENCODE_APPEND_EOS, as T5 is fed), cut to caption_len tokens keeping the EOS (the
 * first caption_len - 1 ids and the EOS, as Hugging Face's tokenizers truncate with
 * add_special_tokens), encoded caption_len at most, stored in dtype. A clip without a caption (an
 * empty text) gets none: a DiT trains it with its null caption. */
typedef struct ig_caption_features_opts {
    const ig_caption_encoder *encoder; /* borrowed */
    const ig_tokenizer *tokenizer;     /* the encoder's; borrowed */
    int caption_len;                   /* default 120 (PixArt-alpha's; 300 Open-Sora 1.2's) */
    ig_feature_dtype dtype;            /* default fp32 */
} ig_caption_features_opts;

ig_caption_features_opts ig_caption_features_opts_default(void);

/* A caption's ids as the features are made of them: text[0..len) through enc with the
 * end-of-sequence id appended, cut to caption_len keeping it (*cut 1 when it was cut; may be
 * NULL), into out (emptied first). A prompt is encoded the same way, so that it is a caption the
 * model saw. */
ig_status ig_caption_ids(ig_encoder *enc, const char *text, size_t len, int caption_len,
                         ig_tokens *out, int *cut, ig_err *err);

typedef struct ig_captions_opts {
    const char *const
        *clips; /* the clip shards (prefixes or lists), [n_clips], as training reads */
    size_t n_clips;
    const char *output_prefix; /* OUT */
    const ig_caption_features_opts *features;
    int overwrite; /* replace an existing complete output */
    int progress;  /* a progress bar on stderr */
    ig_comm *comm; /* NULL: alone; with several ranks each takes an equal run of the clips and
                      writes OUT_rRRRR, and rank 0 writes the list OUT.shards.json */
} ig_captions_opts;

typedef struct ig_captions_stats {
    uint64_t clips;     /* clips this rank wrote features for */
    uint64_t captioned; /* of them with a caption */
    uint64_t encoded;   /* captions encoded (the clips of one video share its caption) */
    uint64_t cut;       /* captions longer than caption_len, cut */
    uint64_t tokens;    /* tokens of the captions encoded */
    double seconds;
    char **shard_prefixes; /* the shard this rank wrote (owned; ig_captions_stats_clear) */
    size_t n_shard_prefixes;
} ig_captions_stats;

void ig_captions_stats_clear(ig_captions_stats *st);

/* The features of the captions of clip shards (their texts: ig_clip_dataset_text) as a caption-
 * feature shard OUT (OUT.feat, OUT.fidx, OUT.json: dataset.h), clip for clip in the clips' order,
 * whose manifest names the encoder. The captions are encoded max_batch at a time; on the CPU the
 * features are the same bits for any batch and thread count. The output's life is the other
 * commands': the run marker OUT.incomplete, a live run's or an existing output refused (without
 * overwrite), a killed run's files removed by the next run, and under several ranks one commit for
 * all (OUT_rRRRR shards and the list OUT.shards.json). Clip shards made before frame shards kept
 * their captions' text are refused, naming the shard. */
ig_status ig_preprocess_captions(ig_ctx *ctx, const ig_captions_opts *opts,
                                 ig_captions_stats *stats, ig_err *err);

/* ==== video (FFmpeg) ========================================================================== */

/* Why a video was skipped (or IG_VIDEO_OK). The report and the summary name them by
 * ig_video_reason_str. */
typedef enum ig_video_reason {
    IG_VIDEO_OK = 0,
    IG_VIDEO_MISSING,       /* no such file */
    IG_VIDEO_UNREADABLE,    /* the file cannot be opened or read (permissions, a directory) */
    IG_VIDEO_EMPTY,         /* zero bytes */
    IG_VIDEO_NOT_VIDEO,     /* not a container FFmpeg knows, no video stream, or no decoder */
    IG_VIDEO_TRUNCATED,     /* a known container whose header or packets end early */
    IG_VIDEO_CORRUPT,       /* the bitstream does not decode (errors, or frames missing) */
    IG_VIDEO_ZERO_DURATION, /* a video stream without frames */
    IG_VIDEO_TOO_SHORT,     /* fewer frames (or seconds) than one clip needs */
    IG_VIDEO_NO_BUCKET,     /* no bucket of the config takes the video (as Open-Sora drops it) */
    IG_VIDEO_TIMEOUT,       /* the per-file time limit ran out */
    IG_VIDEO_TOO_LARGE,     /* decoding it would take more memory than the per-video limit */
    IG_VIDEO_NO_MEMORY,     /* an allocation for this video failed (the run goes on) */
    IG_VIDEO_ERROR,         /* anything else (a write error, a bug): never skipped */
    IG_VIDEO_REASON_COUNT
} ig_video_reason;

/* "ok", "missing", "unreadable", "empty", "not_video", "truncated", "corrupt", "zero_duration",
 * "too_short", "no_bucket", "timeout", "too_large", "out_of_memory", "error". */
const char *ig_video_reason_str(ig_video_reason reason);

/* FFmpeg keeps one log callback for the whole process (av_log_set_callback). Every video
 * function calls this first; it installs ingot's callback exactly once (pthread_once) and never
 * changes it again. The callback hands each message to the sink of the file it concerns (found
 * through the FFmpeg context's `opaque`, or the calling thread's current file), which keeps the
 * first error as the reason's detail and logs a few lines per file at debug level: a corrupt
 * file gives one line, not thousands. Messages of no ingot file are dropped. An application that
 * wants FFmpeg's log for itself installs its own callback after its first ingot video call. */
void ig_video_log_setup(void);

/* What a scan of the packets tells about a video, without decoding a frame. */
typedef struct ig_video_info {
    char container[32]; /* "mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", ... (FFmpeg's name) */
    char codec[32];     /* "h264", "vp9", ... */
    char pix_fmt[32];   /* "yuv420p", "yuv420p10le", ... */
    uint32_t coded_width, coded_height; /* decoded frames */
    uint32_t width, height;             /* as displayed: rotated by `rotation` */
    uint32_t rotation;                  /* clockwise degrees applied to frames: 0, 90, 180, 270 */
    uint64_t frames;                    /* frames, in presentation order */
    double fps;                         /* average rate: (frames - 1) / (last pts - first pts) */
    double duration;                    /* seconds, first frame to the end of the last */
    int vfr;                            /* frame intervals differ by more than 1% */
    int tb_num, tb_den;                 /* the stream's time base */
    int64_t start_pts;                  /* pts of the first frame (presentation order) */
    int stream_index;                   /* the video stream FFmpeg calls best */
} ig_video_info;

typedef struct ig_video_open_opts {
    int threads;         /* decoder threads (frame + slice threading); 0: 1 */
    double timeout_s;    /* time limit for everything done with the file; 0: none */
    int autorotate;      /* apply the display matrix (default 1) */
    uint64_t max_pixels; /* larger frames are not decoded (FFmpeg's max_pixels); 0: FFmpeg's */
} ig_video_open_opts;

ig_video_open_opts ig_video_open_opts_default(void);

/* An opened video: its best video stream found and every packet of it scanned once (timestamps
 * and keyframes; no decoding), so that frames are addressed by presentation order and each read
 * seeks once to the keyframe before the first frame it needs. Not thread-safe: one thread at a
 * time (open several for parallel reads). */
typedef struct ig_video ig_video;

/* Opens path. A file that is not a usable video is IG_ERR_FORMAT (IG_ERR_NOT_FOUND when
 * missing, IG_ERR_IO when unreadable) with *why saying which kind (why may be NULL) and err
 * naming the file and FFmpeg's first complaint. ctx may be NULL. */
ig_status ig_video_open(ig_video **out, ig_ctx *ctx, const char *path,
                        const ig_video_open_opts *opts, ig_video_reason *why, ig_err *err);
void ig_video_close(ig_video *v); /* NULL is a no-op */

const ig_video_info *ig_video_get_info(const ig_video *v);
/* pts (stream time base) of frame i in presentation order (i < frames). */
int64_t ig_video_frame_pts(const ig_video *v, uint64_t i);
/* The frame shown at time t seconds after the first frame: the last with pts <= t (rounded to
 * the time base). */
uint64_t ig_video_frame_at(const ig_video *v, double t);

/* Decodes frames idx[0..n) (presentation order, non-decreasing; repeats allowed) as RGB24 into
 * out[n][height][width][3]. height == width == 0: the display size, unscaled (bit-exact colour
 * conversion of the decoded frames). Otherwise Open-Sora's cover-and-centre-crop: the largest
 * centred region of the target's aspect ratio, scaled to height x width (bicubic) in one
 * swscale pass, with the file's colour matrix and range; then rotation. A decoding error, or a
 * frame the decoder does not produce, is IG_ERR_FORMAT with *why IG_VIDEO_CORRUPT (or
 * TRUNCATED, TIMEOUT). */
ig_status ig_video_read(ig_video *v, const uint64_t *idx, uint32_t n, uint32_t height,
                        uint32_t width, uint8_t *out, ig_video_reason *why, ig_err *err);

/* Writes an RGB24 image as a PNG file through FFmpeg's PNG encoder (atomically). */
ig_status ig_video_write_png(const char *path, const uint8_t *rgb, uint32_t height, uint32_t width,
                             int overwrite, ig_err *err);

/* A contact sheet of n frames (each height x width RGB24, back to back): a grid of up to `cols`
 * columns, 4 pixels apart, with `caption` (ASCII shown; other bytes as '?') in a strip below,
 * wrapped. *out is malloc'd RGB24 of *out_h x *out_w. */
ig_status ig_video_contact_sheet(const uint8_t *frames, uint32_t n, uint32_t height, uint32_t width,
                                 uint32_t cols, const char *caption, uint8_t **out, uint32_t *out_h,
                                 uint32_t *out_w, ig_err *err);

/* ---- writing videos out (a model's samples) ------------------------------------------------ */

/* Writes frames as an H.264 MP4 at path: rgb is RGB24 [frames][height][width][3] (borrowed, read
 * only during the call), shown at fps_num/fps_den frames per second (each 1 to INT_MAX).
 *   Encoder: libx264 when this FFmpeg has it (Debian 12's libavcodec59 does), with crf (0 best,
 *   51 worst; negative: 18, about visually lossless), preset medium; else FFmpeg's default H.264
 *   encoder (a hardware one, where the machine has it: crf does not apply); else MPEG-4 part 2
 *   (FFmpeg's own mpeg4, always built in: a fixed quantizer 2 + crf/6; plays in fewer players).
 *   None of them: IG_ERR_UNSUPPORTED naming what was tried.
 *   Colour: full-range RGB to BT.709 limited-range yuv420p, tagged so in the stream.
 *   Size: yuv420p needs an even height and width, so an odd one is padded by one row (column)
 *   repeating the last: the video is (height + height % 2) x (width + width % 2), the added row
 *   and column a copy of their neighbours. Each side 1 to 16384 pixels.
 *   Reproducible: one encoder thread and FFmpeg's bit-exact flags (no version string or creation
 *   time in the file), so the same frames give the same bytes with the same FFmpeg build.
 *   The index (moov) is at the front (+faststart), for players that stream.
 * The file is written under a temporary name beside path (PATH.tmp.PID.N), fsync'd and renamed
 * over path, replacing a regular file there (never anything else: ig_output_check refuses a
 * device, a pipe, a directory): a run killed midway leaves no partial file at path (the
 * temporary may remain). Errors name path and what was wrong: IG_ERR_INVALID_ARG for zero frames,
 * sizes, frame rate or crf; IG_ERR_IO for a path that cannot be written (IG_ERR_NOT_FOUND when its
 * directory does not exist), with the system's reason; IG_ERR_UNSUPPORTED for no encoder. Nothing
 * is left at path or beside it after an error; a message ends with the first error FFmpeg logged,
 * if any. Thread-safe for different paths (FFmpeg's log goes through ig_video_log_setup's
 * callback to this call's own sink). */
ig_status ig_video_write_mp4(const char *path, const uint8_t *rgb, uint32_t frames, uint32_t height,
                             uint32_t width, uint32_t fps_num, uint32_t fps_den, int crf,
                             ig_err *err);

/* Writes one PNG at path showing num_videos videos, rgb RGB24
 * [num_videos][frames][height][width][3] (borrowed): row v is video v, and its cols = min(max_cols,
 * frames) columns (max_cols 0: every frame) show the frames floor(c (frames - 1) / (cols - 1) +
 * 1/2) for c = 0 .. cols - 1, evenly spaced with the first and the last included (one column:
 * frame 0). Cells are 2 pixels apart, the gutter dark grey (RGB 24,24,24), no border: the image is
 *   height' = num_videos * (height + 2) - 2,  width' = cols * (width + 2) - 2,
 * and cell (v, c) has its top-left pixel at (v * (height + 2), c * (width + 2)), the source frame
 * exactly (PNG is lossless). At most 32768 pixels a side (IG_ERR_INVALID_ARG, saying to take
 * fewer videos or columns). Written as ig_video_write_mp4's file is (temporary, rename, replacing a
 * file at path; the same errors for sizes and paths), through ig_video_write_png. Unlike
 * ig_video_contact_sheet (one clip's frames, wrapped, with its caption, in memory), it compares
 * videos: one a row, the same frames of each in a column. */
ig_status ig_video_write_contact_sheet(const char *path, const uint8_t *rgb, uint32_t num_videos,
                                       uint32_t frames, uint32_t height, uint32_t width,
                                       uint32_t max_cols, ig_err *err);

/* ---- the video manifest: Open-Sora's CSV (path,text[,start,end,label,num_frames,fps,...]) - */

typedef struct ig_video_entry {
    char *path;     /* as resolved: a relative path is relative to the manifest's directory */
    char *text;     /* the caption ("" when the column is absent or empty) */
    double start;   /* seconds after the first frame where clips may start; default 0 */
    double end;     /* seconds after the first frame where clips must end; < 0: the end */
    uint32_t label; /* class id from the label column (0 .. IG_CLIP_LABEL_MAX), or IG_CLIP_NONE */
    uint64_t line;  /* 1-based line of the manifest */
} ig_video_entry;

typedef struct ig_video_manifest {
    ig_video_entry *entries;
    size_t n;
} ig_video_manifest;

/* Reads a .csv (RFC 4180: a header row naming the columns, quoted fields with "" escapes and
 * newlines) or a .jsonl (one object per line) manifest. Required: path; optional: text, start,
 * end (seconds, or [HH:]MM:SS[.fff]), label (a class id: an integer 0 .. IG_CLIP_LABEL_MAX; an
 * empty field, JSON null or no such column: IG_CLIP_NONE); other columns (num_frames, fps, ...)
 * are ignored: ingot probes every file itself. Errors name file:line, the column and the value. */
ig_status ig_video_manifest_read(ig_video_manifest *m, const char *path, ig_err *err);
ig_status ig_video_manifest_parse(ig_video_manifest *m, const char *text, size_t len, int jsonl,
                                  const char *path, ig_err *err); /* path: for messages, dirs */
void ig_video_manifest_clear(ig_video_manifest *m);

/* ---- buckets: Open-Sora's resolution x frame-count buckets ------------------------------- */

/* One bucket shape: a resolution, a frame count and an aspect ratio of its resolution table. */
typedef struct ig_video_bucket {
    char name[64]; /* "256px/33/16:9" */
    uint32_t frames, height, width;
    uint32_t batch_size;
} ig_video_bucket;

typedef struct ig_video_buckets ig_video_buckets;

/* Reads a bucket config: YAML mapping resolution name -> {frames: [p, batch_size]} (optionally
 * under a top-level `bucket_config:`), where p is a keep probability or a pair [keep, q].
 * Resolution names are Open-Sora 2.0's: "256px" (256*256 pixels), "360p" (360*640), optionally
 * with "_max" or "_arW:H"; each gets Open-Sora 2.0's aspect-ratio table of heights and widths in
 * multiples of 16. q follows Open-Sora 2.0: the probability of skipping to the next shorter
 * frame count (in Open-Sora 1.x the same slot meant the opposite, the probability of keeping
 * it). Errors name file:line. */
ig_status ig_video_buckets_load(ig_video_buckets **out, const char *path, ig_err *err);
ig_status ig_video_buckets_parse(ig_video_buckets **out, const char *yaml, size_t len,
                                 const char *name, ig_err *err);
void ig_video_buckets_free(ig_video_buckets *b); /* NULL is a no-op */
size_t ig_video_buckets_count(const ig_video_buckets *b);
const ig_video_bucket *ig_video_buckets_get(const ig_video_buckets *b, size_t i);
/* Open-Sora 2.0's Bucket.get_bucket_id for a clip source of `frames` usable frames and a display
 * size height x width: resolutions from the largest, those below 0.8 of their pixel count
 * skipped; frame counts from the longest that fits; the aspect ratio closest to height/width.
 * The random draws are a pure function of (seed, key). Returns the bucket index, or -1 when
 * none takes the video. */
int64_t ig_video_buckets_assign(const ig_video_buckets *b, uint64_t frames, uint32_t height,
                                uint32_t width, uint64_t seed, uint64_t key);

/* ---- the video pipeline ------------------------------------------------------------------ */

typedef struct ig_video_opts {
    const char *manifest;      /* .csv or .jsonl (ig_video_manifest_read) */
    const char *output_prefix; /* OUT */
    uint32_t frames;           /* T, frames per clip (>= 1); with buckets: 0 (the bucket's) */
    uint32_t stride;           /* take every stride-th frame; default 1 */
    double fps;                /* > 0: take frames at this rate by presentation time instead */
    uint32_t height, width;    /* cover-crop and scale to this; 0: each video's own size */
    const ig_video_buckets *buckets; /* or NULL; borrowed */
    uint32_t clips_per_video;        /* K; default 1 */
    int zstd_level;                  /* > 0: compress each clip with zstd at this level */
    const ig_tokenizer *tokenizer;   /* or NULL: no caption shard; borrowed */
    const char *tokenizer_path;      /* recorded in the caption manifest */
    /* or NULL: the captions' features too, OUT.features (a caption-feature shard of the clips;
     * under several ranks OUT_rRRRR.features and the list OUT.features.shards.json), as
     * ig_preprocess_captions would make them from the output, in the same run */
    const ig_caption_features_opts *features;
    int workers;         /* videos decoded at once; 0: the context's threads */
    int decoder_threads; /* threads per decoder; 0: threads / min(workers, videos) (>= 1) */
    double timeout_s;    /* per-file time limit; default 120; 0: none */
    int strict;          /* the first bad file stops the run */
    uint64_t seed;       /* clip starts and bucket draws; default 1234 */
    int overwrite;       /* replace an existing complete output */
    int progress;        /* progress bar on stderr */
    int probe_only;      /* write OUT.info.csv only (Open-Sora's info columns) */
    ig_comm *comm; /* NULL: alone. With several ranks, each takes a share of the manifest, writes
                      OUT_rRRRR, and rank 0 writes OUT.shards.json and OUT.report.csv */
    /* The memory one video may take while it is decoded (its clips as RGB, plus 8 of the
     * decoder's frames at the file's size): a video whose estimate is larger is skipped as
     * too_large, with the figures. 0: the memory this process can take at the start
     * (ig_memory_query) shared by the videos that can be in memory at once (two per worker). */
    uint64_t max_video_memory;
} ig_video_opts;

ig_video_opts ig_video_opts_default(void);

typedef struct ig_video_stats {
    uint64_t videos;  /* manifest rows this rank took */
    uint64_t used;    /* videos that gave clips */
    uint64_t skipped; /* videos skipped (sum of by_reason) */
    uint64_t by_reason[IG_VIDEO_REASON_COUNT];
    uint64_t clips, frames;
    uint64_t bytes;            /* frame data written (stored, after compression) */
    double seconds;            /* wall time of the run */
    double decode_seconds;     /* summed over videos (all workers) */
    uint64_t max_video_memory; /* the per-video memory limit of the run (given or default) */
    uint64_t captions_encoded, captions_cut; /* with features: captions encoded, and cut */
    char **shard_prefixes;                   /* shards written (owned; ig_video_stats_clear) */
    size_t n_shard_prefixes;
} ig_video_stats;

void ig_video_stats_clear(ig_video_stats *st);

/* Decodes the manifest's videos into a frame shard (DESIGN 3.2): OUT.frames (clips back to
 * back, RGB24 or zstd per clip), OUT.clips (the index), OUT.json (the manifest), the captions'
 * text OUT.texts.{bin,idx,json} (one document per used video, in order), with a caption token
 * shard OUT.captions.{bin,idx,json} (likewise) when a tokenizer is given and the captions'
 * features OUT.features when features are, and OUT.report.csv (a row per manifest row: status,
 * reason, clips, frames, decode seconds). The output is byte-identical for any worker and decoder
 * thread count (given max_video_memory: its default depends on the machine and the workers). Memory
 * is bounded by the videos in flight (two per worker), each by max_video_memory; an allocation that
 * fails for one video skips it (out_of_memory), as any bad video.
 *
 * Bad files are skipped, counted and reported (or, with strict, stop the run with IG_ERR_FORMAT
 * naming the file and the reason). The output lifecycle is the text pipeline's: the run marker
 * OUT.incomplete, refusal of a live run's or an existing output (without overwrite), cleanup
 * after a failure, and under several ranks one commit for all. */
ig_status ig_preprocess_video(ig_ctx *ctx, const ig_video_opts *opts, ig_video_stats *stats,
                              ig_err *err);

/* ---- latent shards: clips through a VAE's encoder ------------------------------------------ */

/* The encoder the latent pipeline runs (ingot preprocess latents gives train.h's ig_vae_encoder:
 * preprocess/ does not depend on train/). */
typedef struct ig_latent_encoder {
    void *user;
    /* Called once on every rank, after the clips are opened and before the output is touched:
     * states and checks the memory of passes of frames up to height x width plus the pipeline's
     * own buffers (bytes), opens the encoder and fills *vae (all but its path). */
    ig_status (*open)(void *user, uint32_t height, uint32_t width, uint64_t buffers,
                      ig_latent_vae *vae, ig_err *err);
    /* N frames [N, H, W, 3] RGB24 to the posterior's moments [N, H / f, W / f, 2C] */
    ig_status (*encode)(void *user, const uint8_t *frames, uint32_t N, uint32_t H, uint32_t W,
                        float *moments, ig_err *err);
} ig_latent_encoder;

typedef struct ig_latent_opts {
    const char *clips;         /* the frame shards: a prefix (a shard or a shard list) */
    const char *output_prefix; /* OUT */
    const char *vae_path;      /* recorded in the manifests */
    const ig_latent_encoder *encoder;
    uint32_t dtype; /* ig_latent_dtype (0: fp32) */
    int overwrite;  /* replace an existing complete output */
    int progress;   /* progress bar on stderr */
    ig_comm *comm;  /* NULL: alone. With several ranks, each encodes a contiguous share of the
                       clips into OUT_rRRRR, and rank 0 writes OUT.shards.json */
} ig_latent_opts;

typedef struct ig_latent_stats {
    uint64_t clips, frames; /* this rank's */
    uint64_t bytes;         /* latent data written */
    /* the posterior means this rank wrote (as stored): their count, sum and sum of squares - a
     * latent model's scaling_factor makes x0 = scaling z about unit-variance */
    double means, mean_sum, mean_sq;
    double seconds;
    ig_latent_vae vae;
    char **shard_prefixes; /* shards written (owned; ig_latent_stats_clear) */
    size_t n_shard_prefixes;
} ig_latent_stats;

void ig_latent_stats_clear(ig_latent_stats *st);

/* Encodes every clip of opts->clips into a latent shard (dataset.h): OUT.latents, OUT.lclips,
 * OUT.json and, when the clips have captions, the caption token shard OUT.captions (the documents
 * the clips name, in order). Each clip keeps its own shape (buckets give several), its frames
 * encoded a clip at a time, so a clip's latents do not depend on the ranks or on the other clips.
 * A clip whose sides the VAE's downsampling does not divide is refused, naming it. The output's
 * lifecycle is the other pipelines' (output.c): the run marker OUT.incomplete, refusal of a live
 * run's or an existing output (without overwrite), the leftovers of a killed run removed, cleanup
 * after a failure, one commit for all ranks. */
ig_status ig_preprocess_latents(ig_ctx *ctx, const ig_latent_opts *opts, ig_latent_stats *stats,
                                ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_PREPROCESS_H */
