/* latent_shard_meta.c - a latent shard's manifest, PREFIX.json ("format": "ingot-latent-shard"):
 * counts, dtype, sizes and xxh3 of both files, the VAE that encoded it (its path, shape, the xxh3
 * of its weights, its latent channels, downsampling and the scaling and shift factors a latent
 * model applies), the source videos, the bucket table, the caption shard, the source clips and
 * the preprocess output it belongs to; and the lists of latent shards.
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>

#include "json_fields.h"
#include "latent_shard_internal.h"

void ig_latent_shard_meta_clear(ig_latent_shard_meta *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_sources; i++) free(m->sources[i]);
    free(m->sources);
    free(m->buckets);
    memset(m, 0, sizeof *m);
}

static json_t *vae_json(const ig_latent_vae *v) {
    return json_pack("{s:s,s:s,s:o,s:I,s:I,s:f,s:f}", "path", v->path, "describe", v->describe,
                     "weights_xxh3", ig_json_hex64(v->weights_xxh3), "latent_channels",
                     (json_int_t)v->latent_channels, "downsample", (json_int_t)v->downsample,
                     "scaling_factor", v->scaling_factor, "shift_factor", v->shift_factor);
}

ig_status ig_latent_shard_meta_write(const ig_latent_shard_meta *m, const char *prefix,
                                     int overwrite, ig_err *err) {
    json_t *o = json_object(), *src = json_array(), *bk = json_array(), *vae = vae_json(&m->vae);
    int bad = !o || !src || !bk || !vae;
    for (size_t i = 0; !bad && i < m->n_sources; i++)
        bad |= json_array_append_new(src, json_string(m->sources[i]));
    for (size_t i = 0; !bad && i < m->n_buckets; i++) {
        const ig_clip_bucket *b = &m->buckets[i];
        bad |= json_array_append_new(
            bk, json_pack("{s:s,s:I,s:I,s:I,s:I}", "name", b->name, "frames", (json_int_t)b->frames,
                          "height", (json_int_t)b->height, "width", (json_int_t)b->width,
                          "batch_size", (json_int_t)b->batch_size));
    }
    if (!bad) {
        bad |= json_object_set_new(o, "format", json_string(IG_LATENT_MANIFEST_FORMAT));
        bad |= json_object_set_new(o, "format_version", json_integer(IG_LATENT_MANIFEST_VERSION));
        bad |= json_object_set_new(o, "index_version", json_integer(IG_LAT_VERSION));
        bad |= json_object_set_new(o, "clips", json_integer((json_int_t)m->clips));
        bad |= json_object_set_new(o, "frames", json_integer((json_int_t)m->frames));
        bad |= json_object_set_new(o, "dtype", json_string(ig_latent_dtype_name(m->dtype)));
        bad |= json_object_set_new(o, "channels", json_integer(m->channels));
        bad |= json_object_set_new(o, "data_bytes", json_integer((json_int_t)m->data_bytes));
        bad |= json_object_set_new(o, "index_bytes", json_integer((json_int_t)m->index_bytes));
        bad |= json_object_set_new(o, "data_xxh3", ig_json_hex64(m->data_xxh3));
        bad |= json_object_set_new(o, "index_xxh3", ig_json_hex64(m->index_xxh3));
        bad |= json_object_set_new(o, "vae", vae);
        vae = NULL;
        bad |= json_object_set_new(o, "captions", json_string(m->captions));
        bad |= json_object_set_new(o, "caption_documents",
                                   json_integer((json_int_t)m->caption_documents));
        bad |= json_object_set_new(o, "clips_source", json_string(m->clips_source));
        bad |= json_object_set_new(o, "buckets", bk);
        bk = NULL;
        bad |= json_object_set_new(o, "sources", src);
        src = NULL;
        if (m->output[0]) bad |= json_object_set_new(o, "output", json_string(m->output));
        bad |= json_object_set_new(o, "tool_version", json_string(m->tool_version));
    }
    ig_status st =
        bad ? ig_err_set(err, IG_ERR_NOMEM, "out of memory writing the manifest of %s", prefix)
            : ig_json_write_manifest(o, prefix, overwrite, err);
    json_decref(o);
    json_decref(src);
    json_decref(bk);
    json_decref(vae);
    return st;
}

/* ---- reading ---- */

static ig_status get_real(json_t *o, const char *path, const char *key, double *out, ig_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return ig_json_missing(path, key, "a number", err);
    *out = json_number_value(v);
    return IG_OK;
}

static ig_status vae_from_json(ig_latent_vae *v, json_t *o, const char *path, ig_err *err) {
    char where[1100];
    snprintf(where, sizeof where, "%s (vae)", path);
    if (!json_is_object(o)) return ig_json_missing(path, "vae", "an object", err);
    ig_status st;
    if ((st = ig_json_get_str(o, where, "path", v->path, sizeof v->path, err)) ||
        (st = ig_json_get_str(o, where, "describe", v->describe, sizeof v->describe, err)) ||
        (st = ig_json_get_hex(o, where, "weights_xxh3", &v->weights_xxh3, err)) ||
        (st = ig_json_get_u32(o, where, "latent_channels", &v->latent_channels, err)) ||
        (st = ig_json_get_u32(o, where, "downsample", &v->downsample, err)) ||
        (st = get_real(o, where, "scaling_factor", &v->scaling_factor, err)) ||
        (st = get_real(o, where, "shift_factor", &v->shift_factor, err)))
        return st;
    if (!v->latent_channels || !v->downsample)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: latent_channels or downsample of zero", where);
    return IG_OK;
}

static ig_status from_json(ig_latent_shard_meta *m, json_t *o, const char *path, ig_err *err) {
    if (!json_is_object(o))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: expected a JSON object", path);
    char format[64], dtype[16];
    uint64_t version = 0;
    ig_status st = ig_json_get_str(o, path, "format", format, sizeof format, err);
    if (st == IG_OK && strcmp(format, IG_LATENT_MANIFEST_FORMAT) != 0)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: format = \"%s\" but expected \"%s\"", path,
                          format, IG_LATENT_MANIFEST_FORMAT);
    if (st == IG_OK) st = ig_json_get_u64(o, path, "format_version", &version, err);
    if (st == IG_OK && version != IG_LATENT_MANIFEST_VERSION)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "%s: format_version = %" PRIu64 " but this ingot reads version %d "
                          "(upgrade ingot)",
                          path, version, IG_LATENT_MANIFEST_VERSION);
    if (st || (st = ig_json_get_u64(o, path, "clips", &m->clips, err)) ||
        (st = ig_json_get_u64(o, path, "frames", &m->frames, err)) ||
        (st = ig_json_get_str(o, path, "dtype", dtype, sizeof dtype, err)) ||
        (st = ig_json_get_u32(o, path, "channels", &m->channels, err)) ||
        (st = ig_json_get_u64(o, path, "data_bytes", &m->data_bytes, err)) ||
        (st = ig_json_get_u64(o, path, "index_bytes", &m->index_bytes, err)) ||
        (st = ig_json_get_hex(o, path, "data_xxh3", &m->data_xxh3, err)) ||
        (st = ig_json_get_hex(o, path, "index_xxh3", &m->index_xxh3, err)) ||
        (st = vae_from_json(&m->vae, json_object_get(o, "vae"), path, err)) ||
        (st = ig_json_get_str(o, path, "captions", m->captions, sizeof m->captions, err)) ||
        (st = ig_json_get_u64(o, path, "caption_documents", &m->caption_documents, err)) ||
        (st = ig_json_get_str(o, path, "clips_source", m->clips_source, sizeof m->clips_source,
                              err)) ||
        (st = ig_json_get_str(o, path, "tool_version", m->tool_version, sizeof m->tool_version,
                              err)))
        return st;
    m->dtype = !strcmp(dtype, "fp32") ? IG_LATENT_F32 : !strcmp(dtype, "bf16") ? IG_LATENT_BF16 : 0;
    if (!m->dtype)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: dtype = \"%s\": expected fp32 or bf16", path,
                          dtype);
    if (m->channels != 2 * m->vae.latent_channels)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: channels = %u but the VAE's latent_channels are %u (2C expected)",
                          path, m->channels, m->vae.latent_channels);
    if (strchr(m->captions, '/'))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: captions must be a file-name prefix", path);
    json_t *out = json_object_get(o, "output");
    if (out) {
        if (!json_is_string(out) || strchr(json_string_value(out), '/') ||
            strlen(json_string_value(out)) >= sizeof m->output)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: output must be a file-name prefix", path);
        snprintf(m->output, sizeof m->output, "%s", json_string_value(out));
    }
    json_t *src = json_object_get(o, "sources"), *bk = json_object_get(o, "buckets");
    if (!json_is_array(src)) return ig_json_missing(path, "sources", "an array of strings", err);
    if (!json_is_array(bk)) return ig_json_missing(path, "buckets", "an array", err);
    size_t ns = json_array_size(src), nb = json_array_size(bk);
    m->sources = calloc(ns ? ns : 1, sizeof *m->sources);
    m->buckets = calloc(nb ? nb : 1, sizeof *m->buckets);
    if (!m->sources || !m->buckets) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < ns; i++) {
        json_t *s = json_array_get(src, i);
        if (!json_is_string(s))
            return ig_err_set(err, IG_ERR_FORMAT, "%s: sources[%zu] is not a string", path, i);
        if (!(m->sources[i] = strdup(json_string_value(s))))
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        m->n_sources++;
    }
    for (size_t i = 0; i < nb; i++) {
        json_t *b = json_array_get(bk, i);
        ig_clip_bucket *d = &m->buckets[i];
        char where[64];
        snprintf(where, sizeof where, "%s (buckets[%zu])", path, i);
        if ((st = ig_json_get_str(b, where, "name", d->name, sizeof d->name, err)) ||
            (st = ig_json_get_u32(b, where, "frames", &d->frames, err)) ||
            (st = ig_json_get_u32(b, where, "height", &d->height, err)) ||
            (st = ig_json_get_u32(b, where, "width", &d->width, err)) ||
            (st = ig_json_get_u32(b, where, "batch_size", &d->batch_size, err)))
            return st;
        if (!d->frames || !d->height || !d->width || !d->batch_size)
            return ig_err_set(err, IG_ERR_FORMAT, "%s: a size of zero", where);
        m->n_buckets++;
    }
    return IG_OK;
}

ig_status ig_latent_shard_meta_read(ig_latent_shard_meta *m, const char *prefix, ig_err *err) {
    memset(m, 0, sizeof *m);
    char *path = ig_shard_path(NULL, prefix, ".json");
    if (!path) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st;
    if (!ig_file_exists(path)) {
        st = ig_err_set(err, IG_ERR_NOT_FOUND,
                        "%s: manifest missing (the shard was not finished: rerun the preprocess)",
                        path);
        free(path);
        return st;
    }
    json_t *o = NULL;
    st = ig_json_load_file(path, IG_JSON_FILE_MAX, "a shard manifest", &o, err);
    if (st == IG_OK) st = from_json(m, o, path, err);
    json_decref(o);
    if (st != IG_OK) ig_latent_shard_meta_clear(m);
    free(path);
    return st;
}

/* ---- lists ---------------------------------------------------------------------------------- */

static ig_status latent_entry(const char *shard, uint64_t *clips, uint64_t *frames,
                              uint64_t *data_xxh3, uint64_t *index_xxh3, ig_err *err) {
    ig_latent_shard_meta m;
    ig_status st = ig_latent_shard_meta_read(&m, shard, err);
    if (st != IG_OK) return st;
    *clips = m.clips;
    *frames = m.frames;
    *data_xxh3 = m.data_xxh3;
    *index_xxh3 = m.index_xxh3;
    ig_latent_shard_meta_clear(&m);
    return IG_OK;
}

const ig_clip_list_kind ig_latent_list_kind = {.format = "ingot-latent-shard-list",
                                               .data_key = "data_xxh3",
                                               .index_key = "index_xxh3",
                                               .entry = latent_entry,
                                               .verify = ig_latent_shard_verify};

ig_status ig_latent_list_write(const char *prefix, const char *const *shards, size_t n,
                               int overwrite, ig_err *err) {
    return ig_clip_list_write(&ig_latent_list_kind, prefix, shards, n, overwrite, err);
}

ig_status ig_latent_list_expand(const char *prefix, char ***out, size_t *n, ig_err *err) {
    return ig_clip_list_expand(&ig_latent_list_kind, prefix, out, n, err);
}

ig_status ig_latent_list_verify(ig_ctx *ctx, const char *prefix, size_t *n_shards, ig_err *err) {
    return ig_clip_list_verify(&ig_latent_list_kind, ctx, prefix, n_shards, err);
}

int ig_latent_shard_is(const char *prefix) {
    char *idx = ig_shard_path(NULL, prefix, ".lclips");
    int yes = idx && ig_file_exists(idx);
    free(idx);
    return yes || ig_clip_list_is(&ig_latent_list_kind, prefix);
}
