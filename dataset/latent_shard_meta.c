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
#include "list_internal.h"

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
    json_t *o = json_object(), *src = ig_json_sources(m->sources, m->n_sources),
           *bk = ig_json_buckets(m->buckets, m->n_buckets), *vae = vae_json(&m->vae);
    int bad = !o || !src || !bk || !vae;
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
        bad |= json_object_set_new(o, "clips_key", ig_json_hex64(m->clips_key));
        bad |= json_object_set_new(o, "source_clips", json_integer((json_int_t)m->source_clips));
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
    char dtype[16];
    ig_status st =
        ig_json_check_format(o, path, IG_LATENT_MANIFEST_FORMAT, IG_LATENT_MANIFEST_VERSION, err);
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
    /* the source clips' key and count: absent from shards made before they were kept */
    if (json_object_get(o, "clips_key") &&
        ((st = ig_json_get_hex(o, path, "clips_key", &m->clips_key, err)) ||
         (st = ig_json_get_u64(o, path, "source_clips", &m->source_clips, err))))
        return st;
    if ((st = ig_json_get_output(o, path, m->output, sizeof m->output, err)) != IG_OK) return st;
    if ((st = ig_json_get_sources(o, path, &m->sources, &m->n_sources, err)) != IG_OK) return st;
    return ig_json_get_buckets(o, path, &m->buckets, &m->n_buckets, err);
}

ig_status ig_latent_shard_meta_read(ig_latent_shard_meta *m, const char *prefix, ig_err *err) {
    memset(m, 0, sizeof *m);
    json_t *o = NULL;
    char *path = NULL;
    ig_status st = ig_json_load_manifest(prefix, &o, &path, err);
    if (st == IG_OK) st = from_json(m, o, path, err);
    json_decref(o);
    if (st != IG_OK) ig_latent_shard_meta_clear(m);
    free(path);
    return st;
}

/* ---- lists (list_json.c's, with the latent shards' entries) --------------------------------- */

static const ig_list_kind latent_list = {"ingot-latent-shard-list", 1, "data_xxh3"};

ig_status ig_latent_list_write(const char *prefix, const char *const *shards, size_t n,
                               int overwrite, ig_err *err) {
    if (n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "a shard list needs shards");
    size_t dl = ig_list_dir_len(prefix);
    json_t *arr = json_array();
    uint64_t clips = 0, frames = 0;
    ig_status st = arr ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        if ((st = ig_list_check_member(prefix, shards[i], err)) != IG_OK) break;
        ig_latent_shard_meta m;
        if ((st = ig_latent_shard_meta_read(&m, shards[i], err)) != IG_OK) break;
        clips += m.clips;
        frames += m.frames;
        char dx[17], ix[17];
        ig_hash64_hex(m.data_xxh3, dx);
        ig_hash64_hex(m.index_xxh3, ix);
        json_array_append_new(arr,
                              json_pack("{s:s,s:I,s:I,s:s,s:s}", "prefix", shards[i] + dl, "clips",
                                        (json_int_t)m.clips, "frames", (json_int_t)m.frames,
                                        "data_xxh3", dx, "index_xxh3", ix));
        ig_latent_shard_meta_clear(&m);
    }
    if (st != IG_OK) {
        json_decref(arr);
        return st;
    }
    json_t *totals =
        json_pack("{s:I,s:I}", "clips", (json_int_t)clips, "frames", (json_int_t)frames);
    return ig_list_write(&latent_list, prefix, totals, arr, overwrite, err);
}

ig_status ig_latent_list_expand(const char *prefix, char ***out, size_t *n, ig_err *err) {
    return ig_list_expand(&latent_list, prefix, out, n, err);
}

static ig_status latent_entry(const char *shard, uint64_t *clips, uint64_t *sum, ig_err *err) {
    ig_latent_shard_meta m;
    ig_status st = ig_latent_shard_meta_read(&m, shard, err);
    if (st != IG_OK) return st;
    *clips = m.clips;
    *sum = m.data_xxh3;
    ig_latent_shard_meta_clear(&m);
    return IG_OK;
}

ig_status ig_latent_list_verify(ig_ctx *ctx, const char *prefix, size_t *n_shards, ig_err *err) {
    return ig_list_verify(&latent_list, ctx, prefix, ig_latent_shard_verify, latent_entry, n_shards,
                          err);
}

int ig_latent_shard_is(const char *prefix) {
    char *idx = ig_shard_path(NULL, prefix, ".lclips");
    int yes = idx && ig_file_exists(idx);
    free(idx);
    return yes || ig_list_is(&latent_list, prefix);
}
