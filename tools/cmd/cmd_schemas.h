/* cmd_schemas.h - private to the ingot program: the configuration schemas (typed key tables) that
 * subcommands load YAML configs against, and a lookup by name for `ingot config --schema`. */
#ifndef INGOT_SCHEMAS_H
#define INGOT_SCHEMAS_H

#include "core/core.h"

typedef struct ig_schema {
    const char *name;       /* "preprocess" */
    const ig_cfg_key *keys; /* the table */
    size_t n_keys;
} ig_schema;

/* The keys of `ingot preprocess` (section "preprocess:"). */
extern const ig_cfg_key ig_schema_preprocess[];
extern const size_t ig_schema_preprocess_n;

/* All schemas, for lookups and for listing them in messages. */
extern const ig_schema ig_schemas[];
extern const size_t ig_n_schemas;

/* The schema called name, or NULL. */
const ig_schema *ig_schema_find(const char *name);

#endif
