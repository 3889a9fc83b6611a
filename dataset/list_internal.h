/* list_internal.h - private to dataset/: the lists of shards of ingot's own formats (frame shards,
 * latent shards, caption-feature shards), PREFIX.shards.json: {"format": F, "version": V,
 * totals..., "shards":
 * [{"prefix": a file name beside the list, "clips": N, CHECKSUM: "16 hex digits", ...}]}. A list
 * is written over shards of one directory, expanded into their prefixes in order, and verified:
 * each shard checked whole and found to be the one the list recorded. (Token shards' lists,
 * shard_list.c, are Megatron's world and have their own fields.)
 */
#ifndef INGOT_LIST_INTERNAL_H
#define INGOT_LIST_INTERNAL_H

#include <jansson.h>

#include "shard_internal.h"

/* What kind of list: its format name and version, and the checksum each entry carries. */
typedef struct ig_list_kind {
    const char *format;
    int version;
    const char *checksum; /* the entry key of the shard's data checksum ("frames_xxh3") */
} ig_list_kind;

/* What a shard of the list says of itself: its clips and its data checksum. */
typedef ig_status (*ig_list_entry_fn)(const char *shard, uint64_t *clips, uint64_t *checksum,
                                      ig_err *err);
/* A shard checked whole (its format's verify). */
typedef ig_status (*ig_list_verify_fn)(ig_ctx *ctx, const char *shard, ig_err *err);

/* The directory part of path ("dir/" of "dir/name"; 0 without one). */
size_t ig_list_dir_len(const char *path);
/* Writes PREFIX.shards.json atomically: the format and version, every member of totals (taken:
 * the caller's reference is stolen) and entries as "shards" (stolen too). Each entry's prefix
 * must already be a name in PREFIX's directory. */
ig_status ig_list_write(const ig_list_kind *k, const char *prefix, json_t *totals, json_t *entries,
                        int overwrite, ig_err *err);
/* 1 when PREFIX.shards.json exists and is a list of kind k (its "format"), else 0. */
int ig_list_is(const ig_list_kind *k, const char *prefix);
/* Refuses a shard outside the directory of the list prefix. */
ig_status ig_list_check_member(const char *prefix, const char *shard, ig_err *err);
/* The list's shards as prefixes (beside the list), or PREFIX itself when there is no list;
 * refused while a run marker covers PREFIX. Free with ig_shard_list_free. */
ig_status ig_list_expand(const ig_list_kind *k, const char *prefix, char ***out, size_t *n,
                         ig_err *err);
/* Verifies every shard (verify) and, with a list, that each still has the clips and checksum the
 * list recorded (entry). *n_shards: the shards that passed before the first failure. */
ig_status ig_list_verify(const ig_list_kind *k, ig_ctx *ctx, const char *prefix,
                         ig_list_verify_fn verify, ig_list_entry_fn entry, size_t *n_shards,
                         ig_err *err);

#endif
