/* cmd_schemas.c - the configuration schemas of the ingot program. Each is a table of typed keys
 * with defaults; a YAML config or a --set override that names a key not listed here is an error, so
 * adding an option to a command means adding its key here. */
#include <string.h>

#include "cmd_schemas.h"

const ig_cfg_key ig_schema_preprocess[] = {
    {"preprocess.input", IG_CFG_STRING, "", "input files or globs (.jsonl, .jsonl.zst, .txt)"},
    {"preprocess.tokenizer", IG_CFG_STRING, "data/gpt2",
     "tokenizer: a directory or a tokenizer.json / vocab.json / .tiktoken file"},
    {"preprocess.output_prefix", IG_CFG_STRING, "", "writes PREFIX.bin, PREFIX.idx, PREFIX.json"},
    {"preprocess.json_key", IG_CFG_STRING, "text", "the JSON field holding the document text"},
    {"preprocess.append_eod", IG_CFG_BOOL, "false", "append the end-of-document token"},
    {"preprocess.workers", IG_CFG_INT, "0", "tokenizer threads; 0: one per CPU"},
    {"preprocess.shard_size", IG_CFG_STRING, "0", "split output into shards of this size; 0: one"},
    {"preprocess.dedup", IG_CFG_STRING, "none", "drop duplicate documents: none or exact"},
    {"preprocess.on_error", IG_CFG_STRING, "fail", "bad input records: fail or skip"},
    {"preprocess.txt_mode", IG_CFG_STRING, "doc", ".txt inputs: doc (one document) or lines"},
    {"preprocess.allow_special", IG_CFG_BOOL, "false",
     "encode special-token text (e.g. <|endoftext|>) as the special token"},
};
const size_t ig_schema_preprocess_n = sizeof ig_schema_preprocess / sizeof ig_schema_preprocess[0];

const ig_schema ig_schemas[] = {
    {"preprocess", ig_schema_preprocess,
     sizeof ig_schema_preprocess / sizeof ig_schema_preprocess[0]},
};
const size_t ig_n_schemas = sizeof ig_schemas / sizeof ig_schemas[0];

const ig_schema *ig_schema_find(const char *name) {
    for (size_t i = 0; i < ig_n_schemas; i++)
        if (strcmp(ig_schemas[i].name, name) == 0) return &ig_schemas[i];
    return NULL;
}
