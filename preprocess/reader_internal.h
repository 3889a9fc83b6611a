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
