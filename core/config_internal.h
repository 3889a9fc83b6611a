/* config_internal.h - private to core/: the configuration's values and the pieces config.c (schema,
 * YAML, overrides) and config_value.c (parsing values, binding, dumping) share. */
#ifndef INGOT_CONFIG_INTERNAL_H
#define INGOT_CONFIG_INTERNAL_H

#include "core/core.h"

/* One key's value. */
typedef struct cfg_val {
    int64_t i;    /* IG_CFG_INT, IG_CFG_ENUM (the choice's index) */
    uint64_t u;   /* IG_CFG_SIZE */
    double f;     /* IG_CFG_FLOAT */
    int b;        /* IG_CFG_BOOL */
    char *s;      /* IG_CFG_STRING (heap) */
    char **items; /* IG_CFG_LIST (heap array of heap strings) */
    size_t n_items;
} cfg_val;

struct ig_config {
    const ig_cfg_key **keys; /* [n] borrowed keys of every table added; they outlive the config */
    size_t n;
    cfg_val *vals;  /* [n] */
    char **origins; /* [n] heap strings: "default", "FILE:LINE", "--set", "--flag" */
};

/* Parses text as key k's type into *out (strings and list items are fresh heap copies; a list
 * given as one scalar is a list of one). On failure writes why ("expected TYPE, got 'TEXT'", "must
 * be in [a, b]") and returns 0. */
int ig_cfg_parse_value(const ig_cfg_key *k, const char *text, cfg_val *out, char *why, size_t cap);
/* Parses a list value from its items. */
int ig_cfg_parse_items(const ig_cfg_key *k, const char *const *items, size_t n, cfg_val *out,
                       char *why, size_t cap);
/* Parses key k's default (lists: "a,b"). */
int ig_cfg_parse_default(const ig_cfg_key *k, cfg_val *out, char *why, size_t cap);
void ig_cfg_val_free(cfg_val *v);
/* "an integer", "a number", ... for messages. */
const char *ig_cfg_type_name(const ig_cfg_key *k, char *buf, size_t cap);
/* Offset of the first byte of s[0..n) that is not well-formed UTF-8, or -1. */
long ig_cfg_utf8_bad_offset(const char *s, size_t n);
/* Writes key i's value as YAML; returns the characters written. */
size_t ig_cfg_put_value(FILE *out, const ig_config *cfg, size_t i);

#endif
