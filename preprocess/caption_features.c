/* caption_features.c - the feature stage (captions_internal.h): runs of clips sharing a caption,
 * tokenized with the end-of-sequence id, cut to the caption length keeping it, encoded max_batch
 * captions at a time by the caller's encoder, and written in the clips' order into a caption-
 * feature shard (each video's caption stored once, its other clips repeating it).
 */
#include "captions_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a run of clips waiting to be written: its caption's slot among the waiting captions (-1: none) */
typedef struct waiting {
    int slot;
    uint64_t clips;
} waiting;

struct ig_feature_stage {
    ig_ctx *ctx;
    ig_caption_features_opts o;
    char *prefix;
    ig_encoder *tok;
    ig_feature_shard_writer *w;
    uint64_t first_clip;
    int D, B;       /* the features' width, captions per encode call */
    ig_tokens *ids; /* [B] the waiting captions' ids */
    float *feat;    /* [B, caption_len, D] their features */
    uint16_t *half; /* [caption_len, D] one caption's in bf16 */
    waiting *runs;  /* the runs waiting, in order */
    size_t n_runs, cap_runs;
    int n_captions; /* captions waiting (slots 0 .. n_captions - 1) */
    ig_captions_stats counts;
};

ig_caption_features_opts ig_caption_features_opts_default(void) {
    return (ig_caption_features_opts){.caption_len = 120, .dtype = IG_FEATURES_F32};
}

ig_status ig_caption_ids(ig_encoder *enc, const char *text, size_t len, int caption_len,
                         ig_tokens *out, int *cut, ig_err *err) {
    out->n = 0;
    if (cut) *cut = 0;
    ig_status st = ig_encoder_encode(enc, text, len, IG_ENCODE_APPEND_EOS, out, err);
    /* the cut keeps the end-of-sequence id, as Hugging Face's tokenizers truncate */
    if (st == IG_OK && caption_len > 0 && out->n > (size_t)caption_len) {
        out->ids[caption_len - 1] = out->ids[out->n - 1];
        out->n = (size_t)caption_len;
        if (cut) *cut = 1;
    }
    return st;
}

ig_status ig_caption_features_check(const ig_caption_features_opts *o, ig_err *err) {
    const ig_caption_encoder *e = o->encoder;
    if (!e || !e->encode || !o->tokenizer)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "caption features need an encoder and its "
                          "tokenizer");
    if (ig_tokenizer_eos(o->tokenizer) < 0)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "the tokenizer %s has no end-of-sequence id to end a caption with, as "
                          "T5 is fed: give the encoder's own (its directory's spiece.model)",
                          ig_tokenizer_name(o->tokenizer));
    if (o->caption_len < 1 || o->caption_len > e->max_len || o->caption_len > 65536)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a caption length of %d tokens: the encoder was opened for 1 to %d",
                          o->caption_len, e->max_len);
    if (e->max_batch < 1 || e->max_batch > 4096 || e->id.width < 1)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "an encoder of %d captions at once, width %u",
                          e->max_batch, e->id.width);
    if (o->dtype != IG_FEATURES_F32 && !(o->dtype == IG_FEATURES_BF16 && e->to_bf16))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "features are stored as fp32 or bf16");
    return IG_OK;
}

void ig_feature_stage_free(ig_feature_stage *s) {
    if (!s) return;
    if (s->w) {
        ig_feature_shard_writer_abort(s->w);
        ig_feature_shard_remove(s->prefix);
    }
    ig_encoder_free(s->tok);
    for (int i = 0; s->ids && i < s->B; i++) ig_tokens_free(&s->ids[i]);
    ig_free(s->ctx, s->ids);
    ig_free(s->ctx, s->feat);
    ig_free(s->ctx, s->half);
    ig_free(s->ctx, s->runs);
    free(s->prefix);
    ig_free(s->ctx, s);
}

ig_status ig_feature_stage_create(ig_feature_stage **out, ig_ctx *ctx,
                                  const ig_caption_features_opts *o, const char *prefix,
                                  uint64_t first_clip, uint64_t data_clips, uint64_t clip_key,
                                  ig_err *err) {
    *out = NULL;
    ig_status st = ig_caption_features_check(o, err);
    if (st != IG_OK) return st;
    ig_feature_stage *s = ig_calloc(ctx, 1, sizeof *s);
    if (!s) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    s->ctx = ctx;
    s->o = *o;
    s->first_clip = first_clip;
    s->D = (int)o->encoder->id.width;
    s->B = o->encoder->max_batch;
    size_t per = (size_t)o->caption_len * (size_t)s->D;
    s->prefix = strdup(prefix);
    s->ids = ig_calloc(ctx, (size_t)s->B, sizeof *s->ids);
    s->feat = ig_alloc(ctx, (size_t)s->B * per * sizeof *s->feat);
    s->half = ig_alloc(ctx, per * sizeof *s->half);
    if (!s->prefix || !s->ids || !s->feat || !s->half)
        st = ig_err_set(err, IG_ERR_NOMEM,
                        "out of memory for the features of %d captions of %d tokens of %d", s->B,
                        o->caption_len, s->D);
    for (int i = 0; st == IG_OK && i < s->B; i++) s->ids[i].ctx = ctx;
    if (st == IG_OK) st = ig_encoder_create(&s->tok, o->tokenizer, err);
    ig_feature_shard_writer_opts wo = {.dtype = o->dtype,
                                       .width = (uint32_t)s->D,
                                       .caption_len = (uint32_t)o->caption_len,
                                       .first_clip = first_clip,
                                       .data_clips = data_clips,
                                       .clip_key = clip_key,
                                       .overwrite = 0};
    if (st == IG_OK) st = ig_feature_shard_writer_create(&s->w, ctx, prefix, &wo, err);
    if (st != IG_OK) {
        ig_feature_stage_free(s);
        return st;
    }
    *out = s;
    return IG_OK;
}

/* Encodes the waiting captions and writes every waiting run, in order. */
static ig_status flush(ig_feature_stage *s, ig_err *err) {
    size_t per = (size_t)s->o.caption_len * (size_t)s->D;
    const int32_t *ids[4096]; /* max_batch at most (ig_caption_features_check) */
    int lens[4096];
    float *outs[4096];
    ig_status st = IG_OK;
    for (int i = 0; i < s->n_captions; i++) {
        ids[i] = s->ids[i].ids;
        lens[i] = (int)s->ids[i].n;
        outs[i] = s->feat + (size_t)i * per;
    }
    if (s->n_captions)
        st = s->o.encoder->encode(s->o.encoder->user, (size_t)s->n_captions, ids, lens, outs, err);
    for (size_t r = 0; st == IG_OK && r < s->n_runs; r++) {
        const waiting *w = &s->runs[r];
        uint32_t L = w->slot < 0 ? 0 : (uint32_t)lens[w->slot];
        const void *v = NULL;
        if (w->slot >= 0 && s->o.dtype == IG_FEATURES_BF16) {
            s->o.encoder->to_bf16(s->half, outs[w->slot], (size_t)L * (size_t)s->D);
            v = s->half;
        } else if (w->slot >= 0) {
            v = outs[w->slot];
        }
        for (uint64_t c = 0; st == IG_OK && c < w->clips; c++)
            st = ig_feature_shard_writer_add(s->w, v, L, L && c > 0, err);
    }
    s->n_runs = 0;
    s->n_captions = 0;
    return st;
}

ig_status ig_feature_stage_add(ig_feature_stage *s, const char *text, size_t len, uint64_t clips,
                               const char *what, ig_err *err) {
    if (clips == 0) return IG_OK;
    if (s->n_runs == s->cap_runs) {
        size_t cap = s->cap_runs ? 2 * s->cap_runs : 64;
        waiting *r = ig_realloc(s->ctx, s->runs, cap * sizeof *r);
        if (!r) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        s->runs = r, s->cap_runs = cap;
    }
    waiting *w = &s->runs[s->n_runs++];
    w->clips = clips;
    w->slot = -1;
    s->counts.clips += clips;
    if (len == 0)
        return s->n_captions ? IG_OK : flush(s, err); /* no caption: nothing to wait for */
    ig_tokens *t = &s->ids[s->n_captions];
    int cut = 0;
    ig_status st = ig_caption_ids(s->tok, text, len, s->o.caption_len, t, &cut, err);
    if (st != IG_OK) return ig_err_prefix(err, st, "%s: its caption", what);
    s->counts.cut += (uint64_t)cut;
    w->slot = s->n_captions++;
    s->counts.captioned += clips;
    s->counts.encoded++;
    s->counts.tokens += t->n;
    return s->n_captions == s->B ? flush(s, err) : IG_OK;
}

ig_status ig_feature_stage_finish(ig_feature_stage *s, const char *const *sources, size_t n_sources,
                                  const char *output, ig_captions_stats *st, ig_err *err) {
    ig_status rc = flush(s, err);
    ig_feature_meta meta = {.encoder = s->o.encoder->id,
                            .cut = s->counts.cut,
                            .sources = (char **)sources,
                            .n_sources = n_sources};
    snprintf(meta.output, sizeof meta.output, "%s", output ? output : "");
    ig_feature_meta done = {0};
    if (rc == IG_OK) {
        rc = ig_feature_shard_writer_finish(s->w, &meta, &done, err);
        s->w = NULL;
        if (rc == IG_OK) rc = ig_feature_meta_write(&done, s->prefix, 0, err);
        if (rc != IG_OK) ig_feature_shard_remove(s->prefix);
    }
    ig_feature_meta_clear(&done);
    if (rc == IG_OK && st) {
        st->clips += s->counts.clips;
        st->captioned += s->counts.captioned;
        st->encoded += s->counts.encoded;
        st->cut += s->counts.cut;
        st->tokens += s->counts.tokens;
    }
    return rc;
}
