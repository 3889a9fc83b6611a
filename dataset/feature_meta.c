/* feature_meta.c - a caption-feature shard's manifest, PREFIX.json ("format":
 * "ingot-caption-features": the encoder that made the features, the clips they cover, counts,
 * sizes and xxh3 of both files), the encoders compared, the lists of feature shards (list_json.c's
 * with their entries) and the feature dataset: the shards of one or more prefixes as the features
 * of one clip data, checked to cover it in order.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>

#include "feature_shard_internal.h"
#include "json_fields.h"
#include "list_internal.h"

static const ig_list_kind feature_list = {IG_FEAT_LIST_FORMAT, IG_FEAT_LIST_VERSION, "feat_xxh3"};

const char *ig_feature_dtype_name(ig_feature_dtype d) {
    return d == IG_FEATURES_F32 ? "fp32" : d == IG_FEATURES_BF16 ? "bf16" : "unknown";
}

void ig_feature_meta_clear(ig_feature_meta *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_sources; i++) free(m->sources[i]);
    free(m->sources);
    memset(m, 0, sizeof *m);
}

const char *ig_feature_encoder_differs(const ig_feature_encoder *a, const ig_feature_encoder *b,
                                       char *buf, size_t cap) {
    char wa[17], wb[17], ta[17], tb[17];
    ig_hash64_hex(a->weights_xxh3, wa);
    ig_hash64_hex(b->weights_xxh3, wb);
    ig_hash64_hex(a->tokenizer_hash, ta);
    ig_hash64_hex(b->tokenizer_hash, tb);
    if (a->width != b->width)
        snprintf(buf, cap, "the width of their features (%u and %u)", a->width, b->width);
    else if (strcmp(a->describe, b->describe))
        snprintf(buf, cap, "their shapes (\"%s\" and \"%s\")", a->describe, b->describe);
    else if (a->weights_xxh3 && b->weights_xxh3 && a->weights_xxh3 != b->weights_xxh3)
        snprintf(buf, cap, "their weights (xxh3 %s and %s)", wa, wb);
    else if (a->tokenizer_hash && b->tokenizer_hash && a->tokenizer_hash != b->tokenizer_hash)
        snprintf(buf, cap, "their tokenizers (%s %s and %s %s)", a->tokenizer, ta, b->tokenizer,
                 tb);
    else
        return NULL;
    return buf;
}

/* ---- the manifest -----------------------------------------------------------------------------
 */

ig_status ig_feature_meta_write(const ig_feature_meta *m, const char *prefix, int overwrite,
                                ig_err *err) {
    json_t *o = json_object(), *src = ig_json_sources(m->sources, m->n_sources);
    json_t *enc = json_object();
    int bad = !o || !src || !enc;
    if (!bad) {
        const ig_feature_encoder *e = &m->encoder;
        bad |= json_object_set_new(enc, "describe", json_string(e->describe));
        bad |= json_object_set_new(enc, "width", json_integer(e->width));
        bad |= json_object_set_new(enc, "weights_xxh3", ig_json_hex64(e->weights_xxh3));
        bad |= json_object_set_new(enc, "tokenizer", json_string(e->tokenizer));
        bad |= json_object_set_new(enc, "tokenizer_hash", ig_json_hex64(e->tokenizer_hash));
        struct {
            const char *key;
            uint64_t v;
        } counts[] = {{"clips", m->clips},
                      {"first_clip", m->first_clip},
                      {"data_clips", m->data_clips},
                      {"captioned", m->captioned},
                      {"tokens", m->tokens},
                      {"cut", m->cut},
                      {"caption_len", m->caption_len},
                      {"width", m->width},
                      {"feat_bytes", m->feat_bytes},
                      {"fidx_bytes", m->fidx_bytes}};
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
            bad |= json_object_set_new(o, counts[i].key, json_integer((json_int_t)counts[i].v));
        bad |= json_object_set_new(o, "format", json_string(IG_FEAT_MANIFEST_FORMAT));
        bad |= json_object_set_new(o, "format_version", json_integer(IG_FEAT_MANIFEST_VERSION));
        bad |= json_object_set_new(o, "clip_key", ig_json_hex64(m->clip_key));
        bad |= json_object_set_new(o, "dtype", json_string(ig_feature_dtype_name(m->dtype)));
        bad |= json_object_set_new(o, "feat_xxh3", ig_json_hex64(m->feat_xxh3));
        bad |= json_object_set_new(o, "fidx_xxh3", ig_json_hex64(m->fidx_xxh3));
        bad |= json_object_set_new(o, "encoder", enc);
        enc = NULL;
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
    json_decref(enc);
    return st;
}

static ig_status encoder_from_json(ig_feature_encoder *e, json_t *o, const char *path,
                                   ig_err *err) {
    char where[4200];
    snprintf(where, sizeof where, "%s (encoder)", path);
    if (!json_is_object(o)) return ig_json_missing(path, "encoder", "an object", err);
    ig_status st;
    if ((st = ig_json_get_str(o, where, "describe", e->describe, sizeof e->describe, err)) ||
        (st = ig_json_get_u32(o, where, "width", &e->width, err)) ||
        (st = ig_json_get_hex(o, where, "weights_xxh3", &e->weights_xxh3, err)) ||
        (st = ig_json_get_str(o, where, "tokenizer", e->tokenizer, sizeof e->tokenizer, err)) ||
        (st = ig_json_get_hex(o, where, "tokenizer_hash", &e->tokenizer_hash, err)))
        return st;
    return IG_OK;
}

static ig_status from_json(ig_feature_meta *m, json_t *o, const char *path, ig_err *err) {
    char dtype[16];
    ig_status st =
        ig_json_check_format(o, path, IG_FEAT_MANIFEST_FORMAT, IG_FEAT_MANIFEST_VERSION, err);
    if (st || (st = ig_json_get_u64(o, path, "clips", &m->clips, err)) ||
        (st = ig_json_get_u64(o, path, "first_clip", &m->first_clip, err)) ||
        (st = ig_json_get_u64(o, path, "data_clips", &m->data_clips, err)) ||
        (st = ig_json_get_hex(o, path, "clip_key", &m->clip_key, err)) ||
        (st = ig_json_get_u64(o, path, "captioned", &m->captioned, err)) ||
        (st = ig_json_get_u64(o, path, "tokens", &m->tokens, err)) ||
        (st = ig_json_get_u64(o, path, "cut", &m->cut, err)) ||
        (st = ig_json_get_u32(o, path, "caption_len", &m->caption_len, err)) ||
        (st = ig_json_get_u32(o, path, "width", &m->width, err)) ||
        (st = ig_json_get_str(o, path, "dtype", dtype, sizeof dtype, err)) ||
        (st = ig_json_get_u64(o, path, "feat_bytes", &m->feat_bytes, err)) ||
        (st = ig_json_get_u64(o, path, "fidx_bytes", &m->fidx_bytes, err)) ||
        (st = ig_json_get_hex(o, path, "feat_xxh3", &m->feat_xxh3, err)) ||
        (st = ig_json_get_hex(o, path, "fidx_xxh3", &m->fidx_xxh3, err)) ||
        (st = ig_json_get_str(o, path, "tool_version", m->tool_version, sizeof m->tool_version,
                              err)) ||
        (st = encoder_from_json(&m->encoder, json_object_get(o, "encoder"), path, err)))
        return st;
    m->dtype = !strcmp(dtype, "fp32")   ? IG_FEATURES_F32
               : !strcmp(dtype, "bf16") ? IG_FEATURES_BF16
                                        : (ig_feature_dtype)0;
    if (!m->dtype)
        return ig_err_set(err, IG_ERR_FORMAT, "%s: dtype = \"%s\": expected fp32 or bf16", path,
                          dtype);
    if ((st = ig_json_get_output(o, path, m->output, sizeof m->output, err)) != IG_OK) return st;
    return ig_json_get_sources(o, path, &m->sources, &m->n_sources, err);
}

ig_status ig_feature_meta_read(ig_feature_meta *m, const char *prefix, ig_err *err) {
    memset(m, 0, sizeof *m);
    json_t *o = NULL;
    char *path = NULL;
    ig_status st = ig_json_load_manifest(prefix, &o, &path, err);
    if (st == IG_OK) st = from_json(m, o, path, err);
    json_decref(o);
    if (st != IG_OK) ig_feature_meta_clear(m);
    free(path);
    return st;
}

int ig_feature_shard_is(const char *prefix) {
    char *fidx = ig_shard_path(NULL, prefix, ".fidx");
    int yes = fidx && ig_file_exists(fidx);
    free(fidx);
    return yes || ig_list_is(&feature_list, prefix);
}

/* ---- lists ------------------------------------------------------------------------------------
 */

ig_status ig_feature_list_write(const char *prefix, const char *const *shards, size_t n,
                                int overwrite, ig_err *err) {
    if (n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "a shard list needs shards");
    size_t dl = ig_list_dir_len(prefix);
    json_t *arr = json_array();
    uint64_t clips = 0;
    ig_status st = arr ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        if ((st = ig_list_check_member(prefix, shards[i], err)) != IG_OK) break;
        ig_feature_meta m;
        if ((st = ig_feature_meta_read(&m, shards[i], err)) != IG_OK) break;
        clips += m.clips;
        char fx[17], ix[17];
        ig_hash64_hex(m.feat_xxh3, fx);
        ig_hash64_hex(m.fidx_xxh3, ix);
        json_array_append_new(arr,
                              json_pack("{s:s,s:I,s:I,s:s,s:s}", "prefix", shards[i] + dl, "clips",
                                        (json_int_t)m.clips, "first_clip", (json_int_t)m.first_clip,
                                        "feat_xxh3", fx, "fidx_xxh3", ix));
        ig_feature_meta_clear(&m);
    }
    if (st != IG_OK) {
        json_decref(arr);
        return st;
    }
    return ig_list_write(&feature_list, prefix, json_pack("{s:I}", "clips", (json_int_t)clips), arr,
                         overwrite, err);
}

ig_status ig_feature_list_expand(const char *prefix, char ***out, size_t *n, ig_err *err) {
    return ig_list_expand(&feature_list, prefix, out, n, err);
}

static ig_status feature_entry(const char *shard, uint64_t *clips, uint64_t *sum, ig_err *err) {
    ig_feature_meta m;
    ig_status st = ig_feature_meta_read(&m, shard, err);
    *clips = m.clips;
    *sum = m.feat_xxh3;
    ig_feature_meta_clear(&m);
    return st;
}

ig_status ig_feature_list_verify(ig_ctx *ctx, const char *prefix, size_t *n_shards, ig_err *err) {
    return ig_list_verify(&feature_list, ctx, prefix, ig_feature_shard_verify, feature_entry,
                          n_shards, err);
}

/* ---- the feature dataset ----------------------------------------------------------------------
 */

struct ig_feature_dataset {
    ig_ctx *ctx;
    ig_feature_shard **shards;
    uint64_t *first; /* [n + 1] global index of each shard's first clip */
    size_t n;
};

void ig_feature_dataset_close(ig_feature_dataset *ds) {
    if (!ds) return;
    for (size_t i = 0; i < ds->n; i++) ig_feature_shard_close(ds->shards[i]);
    free(ds->shards);
    free(ds->first);
    ig_free(ds->ctx, ds);
}

/* Shard k against the first: one encoder, width, dtype, caption length and clip data, and its
 * clips where the shards before it end. */
static ig_status check_member(const ig_feature_dataset *ds, size_t k, ig_err *err) {
    const ig_feature_shard *s = ds->shards[k];
    const ig_feature_meta *m = ig_feature_shard_meta(s), *m0 = ig_feature_shard_meta(ds->shards[0]);
    const char *p = ig_feature_shard_prefix(s), *p0 = ig_feature_shard_prefix(ds->shards[0]);
    if (!m)
        return ig_err_set(err, IG_ERR_NOT_FOUND,
                          "%s.json: missing (features are read from complete shards)", p);
    char why[600];
    if (ig_feature_encoder_differs(&m->encoder, &m0->encoder, why, sizeof why))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s and %s were made by different encoders (%s): one run reads the "
                          "features of one encoder",
                          p, p0, why);
    if (m->dtype != m0->dtype || m->caption_len != m0->caption_len || m->clip_key != m0->clip_key ||
        m->data_clips != m0->data_clips)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%s and %s are features of different clip data or made with another "
                          "dtype or caption length: give the shards of one ingot preprocess "
                          "captions output",
                          p, p0);
    if (m->first_clip != ds->first[k])
        return ig_err_set(
            err, IG_ERR_INVALID_ARG,
            "%s holds the features of clips %" PRIu64 " .. %" PRIu64
            ", but the shards before it end at clip %" PRIu64
            ": give every shard of the output, in order (its list, PREFIX.shards.json, "
            "does)",
            p, m->first_clip, m->first_clip + m->clips - 1, ds->first[k]);
    return IG_OK;
}

static ig_status add_shard(ig_feature_dataset *ds, const char *prefix, ig_err *err) {
    size_t k = ds->n;
    ig_feature_shard **ns = realloc(ds->shards, (k + 1) * sizeof *ns);
    if (ns) ds->shards = ns;
    uint64_t *nf = realloc(ds->first, (k + 2) * sizeof *nf);
    if (nf) ds->first = nf;
    if (!ns || !nf) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = ig_feature_shard_open(&ds->shards[k], ds->ctx, prefix, err);
    if (st != IG_OK) return st;
    ds->n++;
    if ((st = check_member(ds, k, err)) != IG_OK) return st;
    ds->first[k + 1] = ds->first[k] + ig_feature_shard_clips(ds->shards[k]);
    return IG_OK;
}

ig_status ig_feature_dataset_open(ig_feature_dataset **out, ig_ctx *ctx,
                                  const char *const *prefixes, size_t n, ig_err *err) {
    *out = NULL;
    if (n == 0) return ig_err_set(err, IG_ERR_INVALID_ARG, "no caption-feature shards given");
    ig_feature_dataset *ds = ig_alloc(ctx, sizeof *ds);
    if (!ds) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    memset(ds, 0, sizeof *ds);
    ds->ctx = ctx;
    ds->first = calloc(1, sizeof *ds->first);
    ig_status st = ds->first ? IG_OK : ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; st == IG_OK && i < n; i++) {
        char **list = NULL;
        size_t cnt = 0;
        st = ig_feature_list_expand(prefixes[i], &list, &cnt, err);
        for (size_t j = 0; st == IG_OK && j < cnt; j++) st = add_shard(ds, list[j], err);
        ig_shard_list_free(list, cnt);
    }
    const ig_feature_meta *m0 = st == IG_OK ? ig_feature_shard_meta(ds->shards[0]) : NULL;
    if (st == IG_OK && ds->first[ds->n] != m0->data_clips)
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "%s: the shards given hold the features of %" PRIu64
                        " clips, their clip data has %" PRIu64
                        ": give every shard of the output (its list, PREFIX.shards.json, does)",
                        prefixes[0], ds->first[ds->n], m0->data_clips);
    if (st != IG_OK) {
        ig_feature_dataset_close(ds);
        return st;
    }
    *out = ds;
    return IG_OK;
}

uint64_t ig_feature_dataset_clips(const ig_feature_dataset *ds) {
    return ds->first[ds->n];
}

const ig_feature_meta *ig_feature_dataset_meta(const ig_feature_dataset *ds) {
    return ig_feature_shard_meta(ds->shards[0]);
}

ig_status ig_feature_dataset_clip(const ig_feature_dataset *ds, uint64_t g, const void **values,
                                  uint32_t *len, ig_err *err) {
    size_t lo = 0, hi = ds->n; /* the last shard k with first[k] <= g */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (ds->first[mid] <= g)
            lo = mid;
        else
            hi = mid;
    }
    return ig_feature_shard_clip(ds->shards[lo], g - ds->first[lo], values, len, 0, err);
}

ig_status ig_feature_dataset_match(const ig_feature_dataset *ds, const ig_clip_dataset *clips,
                                   const char *features_name, const char *clips_name, ig_err *err) {
    const ig_feature_meta *m = ig_feature_dataset_meta(ds);
    /* latents: the features of the clips they were made of (read by each one's source clip) */
    if (m->clip_key == ig_clip_dataset_source_key(clips) &&
        m->data_clips == ig_clip_dataset_source_clips(clips))
        return IG_OK;
    if (ig_clip_dataset_vae(clips) && !ig_clip_dataset_source_key(clips))
        return ig_err_set(err, IG_ERR_CONFIG,
                          "the latent shards %s were made of several clip datasets, or do not "
                          "record the clips they were made of (made by an ingot before they did): "
                          "caption features serve the latents of one clip dataset, made by ingot "
                          "preprocess latents (features %s)",
                          clips_name, features_name);
    char made[1200] = "";
    for (size_t i = 0; i < m->n_sources && strlen(made) < sizeof made - 300; i++)
        snprintf(made + strlen(made), sizeof made - strlen(made), "%s%s", i ? ", " : "",
                 m->sources[i]);
    return ig_err_set(err, IG_ERR_CONFIG,
                      "the caption features %s were made from other clips than %s (%" PRIu64
                      " clips, made from %s; %s holds %" PRIu64
                      " clips%s): make them from these clips (ingot preprocess captions --clips "
                      "%s ...), or give the clips they were made from",
                      features_name, clips_name, m->data_clips, made[0] ? made : "?", clips_name,
                      ig_clip_dataset_source_clips(clips),
                      m->data_clips == ig_clip_dataset_source_clips(clips) ? ", other frames" : "",
                      clips_name);
}
