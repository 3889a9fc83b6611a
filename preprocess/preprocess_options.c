/* preprocess_options.c - the configuration keys of the text pipeline, bound to the fields of
 * ig_preprocess_opts: the one place that says what `preprocess.on_error: skip` in a config file,
 * `--on-error skip` on the command line and `--set preprocess.on_error=skip` mean. */
#include "preprocess/preprocess.h"

#include <stddef.h>

static const char *const txt_modes[] = {"doc", "lines", NULL};
static const char *const dedup_modes[] = {"none", "exact", NULL};
static const char *const on_error_modes[] = {"fail", "skip", NULL}; /* = ig_on_error */

const ig_cfg_key ig_preprocess_keys[] = {
    IG_KEY_LIST("preprocess.input", ig_preprocess_opts, inputs, n_inputs, "",
                "inputs: .jsonl, .jsonl.zst, .txt files, directories, globs, - (stdin)"),
    IG_KEY_STRING("preprocess.output_prefix", ig_preprocess_opts, output_prefix, "",
                  "writes OUT.bin, OUT.idx, OUT.json (directories must exist)"),
    IG_KEY_LIST("preprocess.json_key", ig_preprocess_opts, json_keys, n_keys, "text",
                "the JSON field(s) holding the text; several give one output OUT_KEY each"),
    IG_KEY_BOOL("preprocess.append_eod", ig_preprocess_opts, append_eod, "false",
                "end every document with the end-of-document token"),
    IG_KEY_BOOL("preprocess.allow_special", ig_preprocess_opts, allow_special, "false",
                "encode special-token text (e.g. <|endoftext|>) as the special token"),
    IG_KEY_ENUM("preprocess.txt_mode", ig_preprocess_opts, txt_lines, "doc", txt_modes,
                ".txt inputs: doc (a file is one document) or lines (one per line)"),
    IG_KEY_SIZE("preprocess.shard_size", ig_preprocess_opts, shard_size, "0",
                "split the output into shards of about this many .bin bytes (e.g. 1GB); 0: one"),
    IG_KEY_ENUM("preprocess.dedup", ig_preprocess_opts, dedup_exact, "none", dedup_modes,
                "drop documents whose text was seen before: none or exact (XXH3-128)"),
    IG_KEY_ENUM("preprocess.on_error", ig_preprocess_opts, on_error, "fail", on_error_modes,
                "bad documents stop the run (fail) or are counted and skipped (skip)"),
    IG_KEY_INT("preprocess.readers", ig_preprocess_opts, readers, "0", 0, 256,
               "inputs read at once (files, and ranges of large files), each by one thread at a "
               "time; 0: one per 16 threads"),
    IG_KEY_SIZE("preprocess.split_size", ig_preprocess_opts, split_size, "8MB",
                "with several readers, .jsonl and line-mode .txt files larger than this are read "
                "as ranges of this size"),
    {"preprocess.overwrite", IG_CFG_BOOL, "false", "replace an existing complete output", "force",
     IG_CFG_FIELD_(ig_preprocess_opts, overwrite), 1, 0, NULL, 0, 0},
};
const size_t ig_preprocess_n_keys = sizeof ig_preprocess_keys / sizeof ig_preprocess_keys[0];
