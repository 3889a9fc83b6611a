/* json_fields.h - private to dataset/: the JSON fields of ingot's manifests (token shards, frame
 * shards), read with the file's name and the key in every message, and written whole. 64-bit
 * hashes are 16 lowercase hex digits (JSON numbers lose precision past 2^53). */
#ifndef INGOT_DATASET_JSON_FIELDS_H
#define INGOT_DATASET_JSON_FIELDS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

json_t *ig_json_hex64(uint64_t v); /* "0123456789abcdef" */

/* IG_ERR_FORMAT "PATH: field "KEY" is missing or not TYPE" */
ig_status ig_json_missing(const char *path, const char *key, const char *type, ig_err *err);
/* o[key] into *out, or IG_ERR_FORMAT "PATH: field "KEY" is missing or not ..." */
ig_status ig_json_get_u64(json_t *o, const char *path, const char *key, uint64_t *out, ig_err *err);
ig_status ig_json_get_u32(json_t *o, const char *path, const char *key, uint32_t *out, ig_err *err);
/* a string of fewer than cap bytes, copied into out[cap] */
ig_status ig_json_get_str(json_t *o, const char *path, const char *key, char *out, size_t cap,
                          ig_err *err);
/* exactly 16 lowercase hex digits, as ig_json_hex64 writes them */
ig_status ig_json_get_hex(json_t *o, const char *path, const char *key, uint64_t *out, ig_err *err);

/* JSON files are read whole with ig_json_load_file (core.h), at most IG_JSON_FILE_MAX bytes. */

/* o as indented JSON ending in a newline, written atomically to PREFIX.json (overwrite: replace
 * an existing file). Does not take o. */
ig_status ig_json_write_manifest(json_t *o, const char *prefix, int overwrite, ig_err *err);

#endif
