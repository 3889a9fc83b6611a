/* reader_internal.h - private entry points of the document readers, for tests and fuzz targets.
 * Not part of the public API: only preprocess/ sources, tests/ and tests/fuzz/ include it. */
#ifndef INGOT_READER_INTERNAL_H
#define INGOT_READER_INTERNAL_H

#include "preprocess/preprocess.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest record the readers accept by default: 1 GiB. */
#define IG_RECORD_MAX_DEFAULT ((size_t)1 << 30)

/* Opens a reader over data[0..len) instead of a file. data is not copied and must outlive the
 * reader; name is used in messages (copied). Kinds and behaviour are those of
 * ig_record_reader_open, including zstd decompression for IG_INPUT_JSONL_ZST. */
ig_status ig_record_reader_open_mem(ig_record_reader **out, ig_ctx *ctx, const char *name,
                                    const void *data, size_t len, ig_input_kind kind, ig_err *err);

/* Opens a reader over the lines of path that start in the byte range [begin, end) (end
 * UINT64_MAX: to the end of the file), for reading one large .jsonl or line-mode .txt file with
 * several readers at once: a line belongs to the range its first byte is in, so the ranges of a
 * file together give every line once, in order, whatever the boundaries (one inside a line,
 * between '\r' and '\n', or ranges holding no line start at all). Records' line numbers count
 * from the range's first line (ig_record_reader_lines gives how many it read, so the caller can
 * add those of the ranges before); byte offsets are the file's. The reader's own messages (a
 * record over the size limit) name the file's line: it counts the lines before the range then,
 * and only then. Reads end at the same 1 MiB boundaries of the file as a reader from the start,
 * so errors name the same offsets and stop at the same byte. JSONL and TXT_LINES only; not
 * stdin. */
ig_status ig_record_reader_open_range(ig_record_reader **out, ig_ctx *ctx, const char *path,
                                      ig_input_kind kind, uint64_t begin, uint64_t end,
                                      ig_err *err);
/* Lines read so far (every '\n' consumed, blank lines included, and a last line without one). */
uint64_t ig_record_reader_lines(const ig_record_reader *r);

/* Lowers (or raises) the record size limit, so tests can exercise it without 1 GiB lines. */
void ig_record_reader_set_max_record(ig_record_reader *r, size_t max_bytes);

/* How ig_record_parse handles JSON lines. AUTO tries the exact fast path for flat objects and
 * falls back to jansson for anything else (nesting, errors, unusual keys). JANSSON always uses
 * jansson. FAST_ONLY never falls back: it returns IG_ERR_UNSUPPORTED when the fast path declines,
 * so that tests and the fuzz target can compare both paths. */
typedef enum ig_json_mode { IG_JSON_AUTO = 0, IG_JSON_JANSSON, IG_JSON_FAST_ONLY } ig_json_mode;

ig_status ig_record_parse_json(const ig_record *rec, const char *path, const char *const *json_keys,
                               size_t n_keys, ig_json_mode mode, ig_doc *doc, ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_READER_INTERNAL_H */
