/* json_fields.h - private to dataset/: the JSON fields of ingot's manifests (token shards, frame
 * shards), read with the file's name and the key in every message, and written whole. 64-bit
 * hashes are 16 lowercase hex digits (JSON numbers lose precision past 2^53). */
#ifndef INGOT_DATASET_JSON_FIELDS_H
#define INGOT_DATASET_JSON_FIELDS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "dataset.h"

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

/* The fields the manifests of clip-like shards (frame, latent and caption-feature shards) share:
 * "sources", the videos or shards they were made from, an array of strings; "buckets", the
 * bucket table (name, frames, height, width, batch_size, none of the sizes zero); "output", the
 * preprocess output they belong to, a file-name prefix (optional). Reading fills *out with a
 * calloc'd array and counts *n up as entries are filled, so the caller's clear frees a partial
 * read; writing gives a new array (NULL: out of memory). */
json_t *ig_json_sources(char *const *sources, size_t n);
json_t *ig_json_buckets(const ig_clip_bucket *buckets, size_t n);
ig_status ig_json_get_sources(json_t *o, const char *path, char ***out, size_t *n, ig_err *err);
ig_status ig_json_get_buckets(json_t *o, const char *path, ig_clip_bucket **out, size_t *n,
                              ig_err *err);
ig_status ig_json_get_output(json_t *o, const char *path, char *out, size_t cap, ig_err *err);

/* A manifest's head: o is an object whose "format" is format and "format_version" version (a
 * newer one is IG_ERR_UNSUPPORTED, saying to upgrade ingot). */
ig_status ig_json_check_format(json_t *o, const char *path, const char *format, int version,
                               ig_err *err);

/* JSON files are read whole with ig_json_load_file (core.h), at most IG_JSON_FILE_MAX bytes.
 * ig_json_load_manifest reads PREFIX.json, a shard's manifest, into *o, with its path in *path
 * (free both, also on failure); a missing one is IG_ERR_NOT_FOUND saying the shard was not
 * finished. */
ig_status ig_json_load_manifest(const char *prefix, json_t **o, char **path, ig_err *err);

/* o as indented JSON ending in a newline, written atomically to PREFIX.json (overwrite: replace
 * an existing file). Does not take o. */
ig_status ig_json_write_manifest(json_t *o, const char *prefix, int overwrite, ig_err *err);

#endif
