/* cmd_text_encoder.c - a frozen text encoder for the commands (cmd_text_encoder.h): train.h's
 * ig_text_encoder and its tokenizer, what it takes said first, wrapped as the preprocess module's
 * ig_caption_encoder (its encoding a call of ig_text_encoder_encode, the bf16 rounding the
 * backend's). */
#include "cmd_text_encoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ig_status encode(void *user, size_t n, const int32_t *const *ids, const int *lens,
                        float *const *out, ig_err *err) {
    return ig_text_encoder_encode(user, n, ids, lens, out, err);
}

static void to_bf16(uint16_t *dst, const float *src, size_t n) {
    ig_backend_bf16_from_f32_n(dst, src, n);
}

ig_status ig_cmd_text_encoder_open(ig_cmd_text_encoder *t, ig_ctx *ctx, const char *dir,
                                   const char *tokenizer, int device, int batch, int caption_len,
                                   ig_feature_dtype dtype, int quiet, ig_err *err) {
    memset(t, 0, sizeof *t);
    ig_backend_opts bo = ig_backend_opts_default();
    if (device == 1) bo.kind = IG_BACKEND_CUDA, bo.act_type = IG_ACT_BF16;
    ig_text_encoder_opts eo = ig_text_encoder_opts_default();
    eo.max_batch = batch;
    eo.max_len = caption_len;
    ig_text_encoder_memory mem;
    ig_model_config shape;
    ig_status st =
        ig_tokenizer_load(&t->tok, ctx, tokenizer && *tokenizer ? tokenizer : dir, NULL, err);
    if (st == IG_OK)
        st = ig_text_encoder_plan(ctx, dir, &eo, device == 1 ? 2 : 4, &mem, &shape, err);
    char what[sizeof t->ce.id.describe] = ""; /* the line the shards record */
    if (st == IG_OK) ig_model_describe(&shape, what, sizeof what);
    if (st == IG_OK && !quiet) {
        char all[32], w[32], acts[32], load[32], feat[32];
        ig_format_bytes((double)(mem.device + mem.host), all, sizeof all);
        ig_format_bytes((double)mem.weights, w, sizeof w);
        ig_format_bytes((double)mem.acts, acts, sizeof acts);
        ig_format_bytes((double)mem.host, load, sizeof load);
        ig_format_bytes((double)batch * caption_len * shape.d_model * 4, feat, sizeof feat);
        printf("text encoder %s: %s\n  takes %s: weights %s (%s), activations %s for %d captions "
               "of %d tokens, %s more while loading; their features %s\n",
               dir, what, all, w, device == 1 ? "bf16 on the GPU" : "fp32", acts, batch,
               caption_len, load, feat);
        fflush(stdout); /* before what the command prints on stderr next */
    }
    if (st == IG_OK) st = ig_backend_create(&t->be, ctx, &bo, err);
    if (st == IG_OK) st = ig_text_encoder_open(&t->enc, ctx, t->be, dir, &eo, err);
    uint64_t h = 0;
    if (st == IG_OK) st = ig_text_encoder_identity(t->enc, &h, err);
    if (st != IG_OK) {
        ig_cmd_text_encoder_close(t);
        return st;
    }
    ig_feature_encoder *id = &t->ce.id;
    snprintf(id->describe, sizeof id->describe, "%s", what);
    id->width = (uint32_t)ig_text_encoder_width(t->enc);
    id->weights_xxh3 = h;
    snprintf(id->tokenizer, sizeof id->tokenizer, "%s", ig_tokenizer_name(t->tok));
    id->tokenizer_hash = ig_tokenizer_hash(t->tok);
    t->ce.max_batch = batch;
    t->ce.max_len = caption_len;
    t->ce.encode = encode;
    t->ce.to_bf16 = to_bf16;
    t->ce.user = t->enc;
    t->fo = ig_caption_features_opts_default();
    t->fo.encoder = &t->ce;
    t->fo.tokenizer = t->tok;
    t->fo.caption_len = caption_len;
    t->fo.dtype = dtype;
    return IG_OK;
}

void ig_cmd_text_encoder_close(ig_cmd_text_encoder *t) {
    ig_text_encoder_free(t->enc);
    ig_backend_free(t->be);
    ig_tokenizer_free(t->tok);
    memset(t, 0, sizeof *t);
}

ig_status ig_cmd_text_encoder_features(ig_cmd_text_encoder *t, const char *text, float **feat,
                                       int *len, ig_err *err) {
    *feat = NULL;
    *len = 0;
    ig_encoder *enc = NULL;
    ig_tokens ids = {0};
    ig_status st = ig_encoder_create(&enc, t->tok, err);
    if (st == IG_OK)
        st = ig_caption_ids(enc, text, strlen(text), t->fo.caption_len, &ids, NULL, err);
    size_t D = (size_t)t->ce.id.width;
    if (st == IG_OK && !(*feat = malloc(ids.n * D * sizeof **feat)))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    int n = (int)ids.n;
    const int32_t *p = ids.ids;
    if (st == IG_OK) st = ig_text_encoder_encode(t->enc, 1, &p, &n, feat, err);
    if (st == IG_OK) *len = n;
    if (st != IG_OK) free(*feat), *feat = NULL;
    ig_tokens_free(&ids);
    ig_encoder_free(enc);
    return st;
}
