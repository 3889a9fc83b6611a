/* output_internal.h - private to preprocess/: the life of a preprocess command's output, shared
 * by the text and video pipelines. An output is everything one command writes under its
 * --output-prefix OUT: for each stem (OUT, or OUT_KEY with several JSON keys) the shards
 * STEM[_rRRRR][_NNNNN] (data files and a manifest each) and shard lists STEM.shards.json.
 *
 * One commit point: OUT.incomplete, the run marker, is written before any file (prepare) and
 * removed after the last manifest and shard list (commit). Under several ranks rank 0 prepares
 * and commits for all of them, and the shard lists name every rank's shards. */
#ifndef INGOT_OUTPUT_INTERNAL_H
#define INGOT_OUTPUT_INTERNAL_H

#include "comm/comm.h"
#include "dataset/dataset.h"

typedef struct ig_output_spec {
    const char *prefix;           /* OUT */
    const char *const *keys;      /* the stems' keys (n_keys > 1: OUT_KEY) */
    size_t n_keys;                /* >= 1 */
    const char *const *data_exts; /* the shards' data files, e.g. {".bin", ".idx", NULL} */
    int overwrite;                /* --force: an existing complete output is replaced */
    /* Shards of another format than token shards (NULL: ig_shard_list_write, ig_shard_remove):
     * the list over several ranks' shards, and removal after a failure */
    ig_status (*write_list)(const char *prefix, const char *const *shards, size_t n, int overwrite,
                            ig_err *err);
    void (*remove_shard)(const char *prefix);
    ig_run_marker *marker; /* held from prepare to commit (rank 0 alone); NULL otherwise */
} ig_output_spec;

/* Stem k of the output: OUT, or OUT_KEY when there are several keys. */
void ig_output_stem(const ig_output_spec *o, size_t k, char *buf, size_t cap);

/* Takes the marker (o->marker) and clears the way. A run still going on the same output (it holds
 * the marker) is refused before anything is touched, also when both start at the same moment; a
 * complete output is refused without overwrite (with it, removed whole: manifests and lists
 * first); the files of an unfinished earlier run and dead temporaries are removed. */
ig_status ig_output_prepare(ig_ctx *ctx, ig_output_spec *o, ig_err *err);
/* Removes and lets go of the marker: from now on the output counts as complete. */
ig_status ig_output_commit(ig_output_spec *o, ig_err *err);
/* After a failure of a run that prepared the output (holds the marker): removes every file of
 * the output and the marker. Does nothing when the marker is not held. */
void ig_output_discard(ig_ctx *ctx, ig_output_spec *o);

/* The same across the ranks of comm (collective): rank 0 prepares for all and tells the others
 * whether it could. A failure on rank 0 is an error on every rank. */
ig_status ig_output_prepare_ranks(ig_ctx *ctx, ig_comm *comm, ig_output_spec *o, ig_err *err);

/* After every rank wrote its shards (or failed: ok == 0), collectively: rank 0 writes one shard
 * list per stem over every rank's shards (named STEM_rRRRR...), and removes the marker once every
 * rank succeeded and the lists exist. If any rank failed, every rank removes the shards it wrote,
 * rank 0 the lists and the marker, and the call fails on every rank ("another rank failed" where
 * this one did not). shards[n] are this rank's shard prefixes. */
ig_status ig_output_commit_ranks(ig_ctx *ctx, ig_comm *comm, ig_output_spec *o, int ok,
                                 const char *const *shards, size_t n, ig_err *err);

#endif
