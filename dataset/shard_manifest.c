/* shard_manifest.c - ingot's manifest beside a token shard (PREFIX.json, DESIGN 3.1): who made
 * the shard (tokenizer identity and hash, sources, tool version), what it holds (counts, dtype,
 * sizes) and the xxh3 of both files, so that `ingot verify` can tell a complete shard from a
 * damaged one. Megatron ignores this file.
 *
 * 64-bit hashes are stored as 16 hex digits (JSON numbers lose precision past 2^53).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>

#include "json_fields.h"
#include "shard_internal.h"

void ig_manifest_clear(ig_manifest *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_sources; i++) free(m->sources[i]);
    free(m->sources);
    memset(m, 0, sizeof *m);
}

ig_status ig_manifest_add_source(ig_manifest *m, const char *source, ig_err *err) {
    char *copy = strdup(source);
    char **grown = copy ? realloc(m->sources, (m->n_sources + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(copy);
        return ig_err_set(err, IG_ERR_NOMEM, "out of memory adding manifest source %s", source);
    }
    m->sources = grown;
    m->sources[m->n_sources++] = copy;
    return IG_OK;
}

static json_t *manifest_to_json(const ig_manifest *m) {
    json_t *o = json_object(), *src = json_array();
    if (!o || !src) {
        json_decref(o);
        json_decref(src);
        return NULL;
    }
    for (size_t i = 0; i < m->n_sources; i++)
        json_array_append_new(src, json_string(m->sources[i]));
    int bad = 0;
    bad |= json_object_set_new(o, "format", json_string(IG_MANIFEST_FORMAT));
    bad |= json_object_set_new(o, "format_version", json_integer(IG_MANIFEST_VERSION));
    bad |= json_object_set_new(o, "tokenizer", json_string(m->tokenizer));
    bad |= json_object_set_new(o, "tokenizer_path", json_string(m->tokenizer_path));
    bad |= json_object_set_new(o, "tokenizer_hash", ig_json_hex64(m->tokenizer_hash));
    bad |= json_object_set_new(o, "vocab_size", json_integer((json_int_t)m->vocab_size));
    bad |= json_object_set_new(o, "eod_id", json_integer((json_int_t)m->eod_id));
    bad |= json_object_set_new(o, "dtype", json_string(ig_dtype_name(m->dtype)));
    bad |= json_object_set_new(o, "dtype_code", json_integer((json_int_t)m->dtype));
    bad |= json_object_set_new(o, "documents", json_integer((json_int_t)m->documents));
    bad |= json_object_set_new(o, "sequences", json_integer((json_int_t)m->sequences));
    bad |= json_object_set_new(o, "tokens", json_integer((json_int_t)m->tokens));
    bad |= json_object_set_new(o, "bin_bytes", json_integer((json_int_t)m->bin_bytes));
    bad |= json_object_set_new(o, "idx_bytes", json_integer((json_int_t)m->idx_bytes));
    bad |= json_object_set_new(o, "bin_xxh3", ig_json_hex64(m->bin_xxh3));
    bad |= json_object_set_new(o, "idx_xxh3", ig_json_hex64(m->idx_xxh3));
    bad |= json_object_set_new(o, "sources", src);
    bad |= json_object_set_new(o, "json_key", json_string(m->json_key));
    if (m->output[0]) bad |= json_object_set_new(o, "output", json_string(m->output));
    bad |= json_object_set_new(o, "tool_version", json_string(m->tool_version));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

ig_status ig_manifest_write(const ig_manifest *m, const char *prefix, int overwrite, ig_err *err) {
    json_t *o = manifest_to_json(m);
    ig_status st = ig_json_write_manifest(o, prefix, overwrite, err);
    json_decref(o);
    return st;
}

/* ---- reading ---- */

/* The number of token ids a dtype can hold from 0 up (ids are int32 wherever ingot reads them). */
static uint64_t dtype_ids(ig_dtype dt) {
    switch (dt) {
    case IG_DTYPE_U8:
        return 256;
    case IG_DTYPE_I8:
        return 128;
    case IG_DTYPE_I16:
        return 32768;
    case IG_DTYPE_U16:
        return 65536;
    case IG_DTYPE_F32:
        return (uint64_t)1 << 24; /* exact integers */
    default:
        return (uint64_t)INT32_MAX + 1;
    }
}

ig_status ig_manifest_check_vocab(const ig_manifest *m, const char *path, ig_err *err) {
    int known_tok = m->tokenizer[0] || m->tokenizer_hash;
    if (m->vocab_size == 0 && known_tok)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: vocab_size = 0 but the manifest names a tokenizer (\"%s\"): the "
                          "manifest is damaged; rebuild the shard",
                          path, m->tokenizer);
    if (m->vocab_size > dtype_ids(m->dtype))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: vocab_size = %" PRIu64 " but dtype %s holds only ids below %" PRIu64
                          ": the manifest is damaged; rebuild the shard",
                          path, m->vocab_size, ig_dtype_name(m->dtype), dtype_ids(m->dtype));
    if (m->eod_id < -1 || m->eod_id > INT32_MAX ||
        (m->vocab_size && m->eod_id >= 0 && (uint64_t)m->eod_id >= m->vocab_size))
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: eod_id = %" PRId64 " is not an id of the vocabulary (-1 for none, "
                          "else below vocab_size = %" PRIu64 "): the manifest is damaged; rebuild "
                          "the shard",
                          path, m->eod_id, m->vocab_size);
    return IG_OK;
}

static ig_status manifest_from_json(ig_manifest *m, json_t *o, const char *path, ig_err *err) {
    if (!json_is_object(o))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: expected a JSON object", path);
    char format[64];
    ig_status st = ig_json_get_str(o, path, "format", format, sizeof format, err);
    if (st != IG_OK) return st;
    if (strcmp(format, IG_MANIFEST_FORMAT) != 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: format = \"%s\" but expected \"%s\"", path,
                          format, IG_MANIFEST_FORMAT);
    uint64_t version = 0, dtype = 0;
    if ((st = ig_json_get_u64(o, path, "format_version", &version, err)) != IG_OK) return st;
    if (version != IG_MANIFEST_VERSION)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: format_version = %" PRIu64 " but this ingot reads version %d "
                          "(upgrade ingot)",
                          path, version, IG_MANIFEST_VERSION);
    json_t *eod = json_object_get(o, "eod_id");
    if (!json_is_integer(eod)) return ig_json_missing(path, "eod_id", "an integer", err);
    m->eod_id = (int64_t)json_integer_value(eod);
    if ((st = ig_json_get_str(o, path, "tokenizer", m->tokenizer, sizeof m->tokenizer, err)) ||
        (st = ig_json_get_str(o, path, "tokenizer_path", m->tokenizer_path,
                              sizeof m->tokenizer_path, err)) ||
        (st = ig_json_get_hex(o, path, "tokenizer_hash", &m->tokenizer_hash, err)) ||
        (st = ig_json_get_u64(o, path, "vocab_size", &m->vocab_size, err)) ||
        (st = ig_json_get_u64(o, path, "dtype_code", &dtype, err)) ||
        (st = ig_json_get_u64(o, path, "documents", &m->documents, err)) ||
        (st = ig_json_get_u64(o, path, "sequences", &m->sequences, err)) ||
        (st = ig_json_get_u64(o, path, "tokens", &m->tokens, err)) ||
        (st = ig_json_get_u64(o, path, "bin_bytes", &m->bin_bytes, err)) ||
        (st = ig_json_get_u64(o, path, "idx_bytes", &m->idx_bytes, err)) ||
        (st = ig_json_get_hex(o, path, "bin_xxh3", &m->bin_xxh3, err)) ||
        (st = ig_json_get_hex(o, path, "idx_xxh3", &m->idx_xxh3, err)) ||
        (st = ig_json_get_str(o, path, "json_key", m->json_key, sizeof m->json_key, err)) ||
        (st = ig_json_get_str(o, path, "tool_version", m->tool_version, sizeof m->tool_version,
                              err)))
        return st;
    if (dtype > 255 || ig_dtype_size((ig_dtype)dtype) == 0)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: dtype_code = %" PRIu64 " is not a known dtype code (1..8)", path,
                          dtype);
    m->dtype = (ig_dtype)dtype;
    if ((st = ig_manifest_check_vocab(m, path, err)) != IG_OK) return st;
    json_t *output = json_object_get(o, "output"); /* optional */
    if (output) {
        if (!json_is_string(output) || strchr(json_string_value(output), '/') ||
            strlen(json_string_value(output)) >= sizeof m->output)
            return ig_err_set(err, IG_ERR_FORMAT,
                              "%s: output must be a file-name prefix (no '/', < %zu bytes)", path,
                              sizeof m->output);
        snprintf(m->output, sizeof m->output, "%s", json_string_value(output));
    }
    json_t *src = json_object_get(o, "sources");
    if (!json_is_array(src)) return ig_json_missing(path, "sources", "an array of strings", err);
    for (size_t i = 0; i < json_array_size(src); i++) {
        json_t *s = json_array_get(src, i);
        if (!json_is_string(s))
            return ig_err_set(err, IG_ERR_FORMAT, "%s: sources[%zu] is not a string", path, i);
        if ((st = ig_manifest_add_source(m, json_string_value(s), err)) != IG_OK) return st;
    }
    return IG_OK;
}

ig_status ig_manifest_read(ig_manifest *m, const char *prefix, ig_err *err) {
    memset(m, 0, sizeof *m);
    char *path = ig_shard_path(NULL, prefix, ".json");
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st;
    if (!ig_file_exists(path)) {
        st = ig_err_set(err, IG_ERR_NOT_FOUND,
                        "%s: manifest missing (the shard was not finished, or was not made by "
                        "ingot; `ingot merge` or a rerun of preprocess recreates it)",
                        path);
        free(path);
        return st;
    }
    json_t *o = NULL;
    st = ig_json_load_file(path, IG_JSON_FILE_MAX, "a shard manifest", &o, err);
    if (st == IG_OK) st = manifest_from_json(m, o, path, err);
    json_decref(o);
    if (st != IG_OK) ig_manifest_clear(m);
    free(path);
    return st;
}
