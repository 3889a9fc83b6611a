/* dit_caption.c - the caption features' side of the DiT (model.cond caption with
 * data.caption_features, PixArt-alpha's way): the caption embedder's passes on the first stage,
 * the fit of a shape to the data's features, and the encoder the model records.
 *
 * A frozen text encoder (a T5's) made each caption's features [L, D_text] offline; the first stage
 * projects them with PixArt's CaptionEmbedder, y = fc2(gelu_tanh(fc1(features))), into the
 * caption rows [B Tk, C] that the token path's embedding table makes otherwise: from there the
 * blocks' cross-attention, the pipeline's hand-over and the gradient's sum over the
 * tensor-parallel ranks are the token path's (dit_pass.c). A sample whose caption was dropped, or
 * that has none, gets the learned null caption y_embedding [Tk, D_text] in its feature rows, all
 * Tk of them attended; its gradient is the gradient of those rows. The rows past a caption's
 * length are zeros that no query attends to (their gradients are zero).
 *
 * The encoder is part of the shape (its width, its line, its weights' and tokenizer's hashes), so
 * that a checkpoint, an export and ingot sample know which encoder's features the model reads.
 */
#include "dit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/hf.h"

#define A(off) ig_model_act(m, off)
#define S(off) ig_model_scratch(m, off)

static void *fparam(const ig_model *m, int which) {
    return ig_model_param(m, dit_ft(m, which));
}
static void *fgrad(const ig_model *m, int which) {
    return ig_model_grad(m, dit_ft(m, which));
}
/* whether sample b of the slot has the null caption (dit_input.c marks it) */
static int is_null(const ig_model *m, int b) {
    return dit_of(m)->h_null[(size_t)m->slot * (size_t)m->B + (size_t)b];
}

ig_status dit_caption_embed_forward(ig_model *m, int B, ig_err *err) {
    ig_backend *be = m->be;
    const dit_state *x = dit_of(m);
    int C = m->cfg.d_model, BK = B * x->Tk;
    size_t row = (size_t)x->Tk * (size_t)x->Dt * m->as; /* a sample's feature rows, in bytes */
    ig_status st = IG_OK;
    for (int b = 0; b < B && st == IG_OK; b++)
        if (is_null(m, b))
            st = ig_backend_copy(be, (char *)A(x->cfeat) + (size_t)b * row, fparam(m, DIT_YEMB),
                                 row, err);
    if (st != IG_OK) return st;
    ig_kernel_matmul_forward(be, A(x->cfc1), A(x->cfeat), fparam(m, DIT_YF1_W), IG_W_OUT_IN, NULL,
                             BK, x->Dt, C);
    ig_kernel_gelu_bias_forward(be, A(x->cgelu), A(x->cfc1), fparam(m, DIT_YF1_B), BK, C);
    ig_kernel_matmul_forward(be, A(x->ycap), A(x->cgelu), fparam(m, DIT_YF2_W), IG_W_OUT_IN,
                             fparam(m, DIT_YF2_B), BK, C, C);
    return IG_OK;
}

/* From dycap, the caption rows' whole gradient (dit_backward_end summed it): y_proj's gradients,
 * and the null samples' feature rows' into y_embedding's. dyl and dytmp are free by now. */
void dit_caption_embed_backward(ig_model *m, int B) {
    ig_backend *be = m->be;
    const dit_state *x = dit_of(m);
    int C = m->cfg.d_model, BK = B * x->Tk, nulls = 0;
    for (int b = 0; b < B; b++) nulls += is_null(m, b);
    ig_kernel_matmul_backward(be, S(x->dytmp), fgrad(m, DIT_YF2_W), fgrad(m, DIT_YF2_B),
                              A(x->dycap), A(x->cgelu), fparam(m, DIT_YF2_W), IG_W_OUT_IN, BK, C,
                              C);
    ig_kernel_gelu_bias_backward(be, S(x->dyl), fgrad(m, DIT_YF1_B), S(x->dytmp), A(x->cfc1),
                                 fparam(m, DIT_YF1_B), BK, C);
    ig_kernel_matmul_backward(be, nulls ? S(x->dcfeat) : NULL, fgrad(m, DIT_YF1_W), NULL, S(x->dyl),
                              A(x->cfeat), fparam(m, DIT_YF1_W), IG_W_OUT_IN, BK, x->Dt, C);
    size_t per = (size_t)x->Tk * (size_t)x->Dt;
    for (int b = 0; b < B; b++)
        if (is_null(m, b))
            ig_kernel_add(be, fgrad(m, DIT_YEMB), fgrad(m, DIT_YEMB),
                          (char *)S(x->dcfeat) + (size_t)b * per * m->as, per);
}

/* ---- the shape's encoder --------------------------------------------------------------------- */

int dit_caption_features(const ig_model_config *c, ig_feature_encoder *enc) {
    dit_shape d = dit_own(c);
    if (d.cond != DIT_COND_CAPTION || d.caption_channels <= 0) return 0;
    if (enc) {
        memset(enc, 0, sizeof *enc);
        snprintf(enc->describe, sizeof enc->describe, "%s", d.enc_describe);
        enc->width = (uint32_t)d.caption_channels;
        enc->weights_xxh3 = d.enc_weights;
        enc->tokenizer_hash = d.enc_tokenizer;
    }
    return d.caption_channels;
}

/* The data's features against the shape: their width is model.caption_channels (taken when 0),
 * and their encoder becomes the shape's (a resumed run's is compared with the checkpoint's). */
ig_status dit_fit_features(ig_model_config *c, dit_shape *d, const ig_data_facts *f, ig_err *err) {
    const ig_feature_encoder *e = f->caption_encoder;
    if (!e)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.caption_channels %d: the model attends to caption features and "
                          "the data gives none: give the features of its clips (ingot preprocess "
                          "captions' output) as data.caption_features (ingot eval: "
                          "--caption-features), or set model.caption_channels 0 for caption "
                          "tokens",
                          d->caption_channels);
    if (d->caption_channels && (uint32_t)d->caption_channels != e->width)
        return ig_err_set(err, IG_ERR_CONFIG,
                          "model.caption_channels %d, and data.caption_features are %u wide (%s): "
                          "set model.caption_channels %u, or 0 to take the features' width",
                          d->caption_channels, e->width, e->describe, e->width);
    if (f->caption_features_len > d->caption_len && f->ctx)
        ig_warn(f->ctx,
                "data.caption_features keep up to %d tokens a caption, model.caption_len %d: "
                "longer captions are cut to their first %d",
                f->caption_features_len, d->caption_len, d->caption_len);
    d->caption_channels = (int)e->width;
    d->enc_weights = e->weights_xxh3;
    d->enc_tokenizer = e->tokenizer_hash;
    /* the line cut to what the shape holds (and compared so cut) */
    memcpy(d->enc_describe, e->describe, sizeof d->enc_describe - 1);
    d->enc_describe[sizeof d->enc_describe - 1] = 0;
    c->vocab_size = 0;
    ig_own_set_dit_shape(c, d);
    return IG_OK;
}

/* ---- in a checkpoint's and an export's config ------------------------------------------------ */

static json_t *hex64(uint64_t v) {
    char h[17];
    ig_hash64_hex(v, h);
    return json_string(h);
}

static ig_status get_hex64(json_t *o, const char *file, const char *key, uint64_t *out,
                           ig_err *err) {
    json_t *v = json_object_get(o, key);
    const char *s = json_string_value(v);
    char *end = NULL;
    *out = 0;
    if (!v) return IG_OK;
    if (s && strlen(s) == 16 && strspn(s, "0123456789abcdef") == 16) {
        *out = strtoull(s, &end, 16);
        return IG_OK;
    }
    return ig_err_set(err, IG_ERR_FORMAT,
                      "%s: \"text_encoder\".\"%s\" must be 16 lowercase hex digits", file, key);
}

/* "caption_channels" (PixArt's name for the features' width) and "text_encoder": {"describe",
 * "weights_xxh3", "tokenizer_hash"}; nothing for a model of caption tokens. */
ig_status dit_encoder_to_json(const dit_shape *d, json_t *o) {
    if (d->cond != DIT_COND_CAPTION || d->caption_channels <= 0) return IG_OK;
    json_t *e = json_object();
    if (!e) return IG_ERR_NOMEM;
    json_object_set_new(e, "describe", json_string(d->enc_describe));
    json_object_set_new(e, "weights_xxh3", hex64(d->enc_weights));
    json_object_set_new(e, "tokenizer_hash", hex64(d->enc_tokenizer));
    json_object_set_new(o, "caption_channels", json_integer(d->caption_channels));
    json_object_set_new(o, "text_encoder", e);
    return IG_OK;
}

ig_status dit_encoder_from_json(json_t *o, const char *file, dit_shape *d, ig_err *err) {
    int64_t ch = 0;
    ig_status st = ig_hf_get_int(o, file, "caption_channels", NULL, 0, 65536, 0, 0, &ch, err);
    if (st != IG_OK) return st;
    d->caption_channels = (int)ch;
    d->enc_weights = d->enc_tokenizer = 0;
    memset(d->enc_describe, 0, sizeof d->enc_describe);
    json_t *e = json_object_get(o, "text_encoder");
    if (!e || json_is_null(e)) return IG_OK;
    if (!json_is_object(e) || !ch)
        return ig_err_set(err, IG_ERR_FORMAT,
                          "%s: \"text_encoder\" must be an object, beside \"caption_channels\"",
                          file);
    json_t *s = json_object_get(e, "describe");
    if (s && !json_is_string(s))
        return ig_err_set(err, IG_ERR_FORMAT, "%s: \"text_encoder\".\"describe\" must be a string",
                          file);
    if (s) strncpy(d->enc_describe, json_string_value(s), sizeof d->enc_describe - 1);
    if ((st = get_hex64(e, file, "weights_xxh3", &d->enc_weights, err)) != IG_OK) return st;
    return get_hex64(e, file, "tokenizer_hash", &d->enc_tokenizer, err);
}
