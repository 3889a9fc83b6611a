/* cmd_schemas.h - private to the ingot program: the configuration schemas of the commands that
 * take a --config file (each a list of key tables: the common flags, the library module's keys,
 * the command's own), by name, for `ingot config show|check --schema NAME`. */
#ifndef INGOT_SCHEMAS_H
#define INGOT_SCHEMAS_H

#include "cmd.h"
#include "train/train.h"

#define IG_SCHEMA_MAX_TABLES (IG_TRAIN_KEY_TABLES + 2)

typedef struct ig_schema {
    const char *name; /* "preprocess" */
    ig_cmd_table tables[IG_SCHEMA_MAX_TABLES];
    size_t n_tables;
} ig_schema;

/* The keys of `ingot preprocess text` that are the command's own (tools/cmd/cmd_preprocess.c). */
extern const ig_cfg_key ig_preprocess_cli_keys[];
extern const size_t ig_preprocess_n_cli_keys;

/* The names of all schemas, NULL-terminated, for listing them in messages. */
extern const char *const ig_schema_names[];

/* Fills *out with the schema called name; 0 when there is none. */
int ig_schema_get(const char *name, ig_schema *out);

/* A configuration over every table of the schema, at the defaults. */
ig_status ig_schema_config(const ig_schema *s, ig_config **out, ig_err *err);

#endif
