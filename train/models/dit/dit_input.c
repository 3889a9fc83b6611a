/* dit_input.c - a micro-batch of clips staged into a slot of the DiT's memory (rectified flow, as
 * SD3 and Open-Sora 2.0 train): x0 = clip / 127.5 - 1, x_t = (1 - t) x0 + t eps, the target
 * eps - x0; t logit-normal (the sigmoid of a standard normal) and shifted, eps standard normal,
 * and the label dropped to the null class with probability model.class_dropout, each from a
 * counter-based generator keyed by (seed, key, sample), so that any layout and any resume draw
 * the same. x_t is cut into patches (a row per token, in (t, h, w) order, each patch's values
 * channel first, as the convolution's weight [D, 3, pt, ph, pw] reads them) and the target into
 * each token's (pt, ph, pw, c) vector, as the final layer predicts it; the tokens' sin-cos
 * positions and the times' 256 frequencies are computed here too, in double. A rank uploads only
 * what its stage and its rows use.
 */
#include "dit.h"

#include <math.h>
#include <string.h>

/* the draws of sample b: a key of their own per (seed, key, b) and purpose */
static ig_rng_key sample_key(const ig_clip_input *in, int b, const char *what) {
    uint64_t k[3] = {in->seed, in->key, (uint64_t)b};
    return ig_rng_key_make(ig_xxh3_64(k, sizeof k), what);
}

/* sincos(n, p) of DiT's 1-D table added into out[n]: [sin(p w_k) | cos(p w_k)], k < n / 2,
 * w_k = 10000^(-k / (n / 2)) */
static void sincos_add(double *out, int n, double p) {
    int h = n / 2;
    for (int k = 0; k < h; k++) {
        double w = pow(10000.0, -(double)k / (double)h);
        out[k] += sin(p * w);
        out[h + k] += cos(p * w);
    }
}

/* The positions of a clip's T tokens, [T, C]: the 2-D table over (h, w) - the first half of the
 * channels from the column, the second from the row - plus the 1-D table over the frames. */
static void positions(const ig_model_config *c, int Fp, int Hp, int Wp, double *row, float *out) {
    int C = c->d_model;
    for (int ti = 0; ti < Fp; ti++)
        for (int hi = 0; hi < Hp; hi++)
            for (int wi = 0; wi < Wp; wi++) {
                memset(row, 0, (size_t)C * sizeof row[0]);
                sincos_add(row, C / 2, wi);
                sincos_add(row + C / 2, C / 2, hi);
                sincos_add(row, C, ti);
                float *o = out + ((size_t)(ti * Hp + hi) * (size_t)Wp + (size_t)wi) * (size_t)C;
                for (int k = 0; k < C; k++) o[k] = (float)row[k];
            }
}

void dit_caption_positions(const ig_model_config *c, double *row, float *out) {
    int C = c->d_model;
    for (int j = 0; j < c->caption_len; j++) {
        memset(row, 0, (size_t)C * sizeof row[0]);
        sincos_add(row, C, j);
        for (int k = 0; k < C; k++) out[(size_t)j * (size_t)C + (size_t)k] = (float)row[k];
    }
}

/* DiT's TimestepEmbedder: [cos(1000 t f_k) | sin(1000 t f_k)], f_k = exp(-ln(10000) k / 128) */
static void frequencies(float t, float *out) {
    int h = DIT_FREQ / 2;
    for (int k = 0; k < h; k++) {
        double f = exp(-log(10000.0) * (double)k / (double)h), a = 1000.0 * (double)t * f;
        out[k] = (float)cos(a);
        out[h + k] = (float)sin(a);
    }
}

/* Uploads rows [row0, row0 + n) of the micro-batch's per-token values (T rows per sample, the
 * same for every sample: the positions) from table [T, C] into dst. */
static ig_status upload_tokens(ig_model *m, void *dst, const float *table, int T, int C, int row0,
                               int n, ig_err *err) {
    ig_status st = IG_OK;
    for (int r = row0; st == IG_OK && r < row0 + n;) {
        int t = r % T, run = T - t < row0 + n - r ? T - t : row0 + n - r;
        st = ig_backend_upload_f32(m->be, (char *)dst + (size_t)(r - row0) * (size_t)C * m->as,
                                   table + (size_t)t * (size_t)C, (size_t)run * (size_t)C, err);
        r += run;
    }
    return st;
}

/* Sample b's caption into the host staging: its length (the null caption, the table's last row,
 * as one token when it has none or it is dropped) at h_labels[b], its tokens (cut to caption_len,
 * the rest the null token) at h_labels[B + b Tk], B the model's largest micro-batch. */
static ig_status caption_of(ig_model *m, const ig_clip_input *in, int b, ig_err *err) {
    dit_state *x = dit_of(m);
    const ig_model_config *c = &m->cfg;
    int Tk = x->Tk, V = c->vocab_size, len = 0;
    int32_t *tok = x->h_labels + m->B + (size_t)b * (size_t)Tk;
    if (in->captions && in->caption_lens) {
        len = in->caption_lens[b] < 0 ? 0 : in->caption_lens[b] > Tk ? Tk : in->caption_lens[b];
        for (int j = 0; j < len; j++) {
            int32_t id = in->captions[(size_t)b * (size_t)Tk + (size_t)j];
            if (id < 0 || id >= V)
                return ig_err_set(err, IG_ERR_INVALID_ARG,
                                  "caption token %d of clip %d is outside the model's vocabulary "
                                  "of %d",
                                  id, b, V);
            tok[j] = id;
        }
    }
    if (in->drop_labels && c->caption_dropout > 0 &&
        ig_rng_uniform(sample_key(in, b, "ingot flow caption"), 0) < c->caption_dropout)
        len = 0;
    if (len == 0) tok[0] = V, len = 1; /* the null caption */
    for (int j = len; j < Tk; j++) tok[j] = V;
    x->h_labels[b] = len;
    return IG_OK;
}

ig_status dit_stage_batch(ig_model *m, int slot, const ig_stage_input *si, float grad_scale,
                          uint64_t *counted, ig_err *err) {
    const ig_clip_input *in = si->clips;
    const ig_model_config *c = &m->cfg;
    dit_state *x = dit_of(m);
    const ig_part *p = &m->part;
    if (!in || (!in->frames && !in->xt))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "dit models read clips: none given");
    int B = in->B, T = 0;
    ig_status st = dit_clip_tokens(c, in->F, in->H, in->W, &T, err);
    if (st != IG_OK) return st;
    if (B < 1 || B > m->B || T > m->T || slot < 0 || slot >= p->slots || slot >= 64)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a micro-batch of %d clips of %d tokens does not fit the model's %d x %d",
                          B, T, m->B, m->T);
    int N = B * T, tp = p->tp;
    int parts = p->sp ? tp : p->usp > 1 ? p->usp : 1;
    if (N % parts)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "sequence parallelism: %d clips of %d tokens do not split into %d equal "
                          "parts",
                          B, T, parts);
    int Nl = N / parts, row0 = (p->sp ? p->tp_rank : p->usp_rank) * Nl;
    m->slot = slot;
    m->slot_B[slot] = B;
    m->slot_T[slot] = T;
    x->grad_scale[slot] = grad_scale;
    x->has_target[slot] = in->xt == NULL;
    x->shape[slot][0] = in->F, x->shape[slot][1] = in->H, x->shape[slot][2] = in->W;
    if (counted) *counted = (uint64_t)N;
    const int *pa = c->patch;
    int Fp = in->F / pa[0], Hp = in->H / pa[1], Wp = in->W / pa[2], P = x->P, C = c->d_model;
    size_t per = (size_t)in->F * (size_t)in->H * (size_t)in->W * 3; /* values of a clip */
    int null = c->num_classes;
    /* each sample's time, label and noise */
    for (int b = 0; b < B; b++) {
        float t;
        if (in->t) {
            t = in->t[b];
            if (!(t >= 0 && t <= 1))
                return ig_err_set(err, IG_ERR_INVALID_ARG, "time %g of clip %d is not in [0, 1]",
                                  (double)t, b);
        } else {
            double z = ig_rng_normal(sample_key(in, b, "ingot flow time"), 0);
            double u = 1.0 / (1.0 + exp(-z)), s = in->shift > 0 ? in->shift : 1.0;
            t = (float)(s * u / (1.0 + (s - 1.0) * u));
        }
        frequencies(t, x->h_freq + (size_t)b * DIT_FREQ);
        x->h_t[b] = t;
        int32_t y = null;
        /* the data's labels were checked at the start (ig_clip_labels_check); num_classes is
         * the null class's own row (DiT's), a label past it is not a null class to train in
         * silence */
        if (c->cond == IG_COND_CLASS && in->labels && in->labels[b] != IG_CLIP_NONE) {
            if (in->labels[b] > (uint32_t)c->num_classes)
                return ig_err_set(err, IG_ERR_INVALID_ARG,
                                  "clip %d has label %u, and model.num_classes %d takes labels "
                                  "0 .. %d (%d: the null class)",
                                  b, in->labels[b], c->num_classes, c->num_classes - 1,
                                  c->num_classes);
            y = (int32_t)in->labels[b];
        }
        if (in->drop_labels && c->class_dropout > 0 &&
            ig_rng_uniform(sample_key(in, b, "ingot flow label"), 0) < c->class_dropout)
            y = null;
        x->h_labels[b] = y;
        if (c->cond == IG_COND_CAPTION && (st = caption_of(m, in, b, err)) != IG_OK) return st;
        if (!in->xt && !in->noise)
            ig_rng_fill_normal(m->ctx, sample_key(in, b, "ingot flow noise"), 0, per, 0.0f, 1.0f,
                               x->h_noise + (size_t)b * per);
    }
    /* the patches of x_t and the targets, by token */
    const float *noise = in->noise ? in->noise : x->h_noise;
    for (int b = 0; b < B; b++) {
        float t = x->h_t[b];
        for (int ti = 0; ti < Fp; ti++)
            for (int hi = 0; hi < Hp; hi++)
                for (int wi = 0; wi < Wp; wi++) {
                    size_t r = (size_t)b * (size_t)T + (size_t)((ti * Hp + hi) * Wp + wi);
                    float *pt = x->h_patches + r * (size_t)P, *tg = x->h_target + r * (size_t)P;
                    for (int i = 0; i < pa[0]; i++)
                        for (int j = 0; j < pa[1]; j++)
                            for (int k = 0; k < pa[2]; k++) {
                                size_t f = (size_t)(ti * pa[0] + i), yy = (size_t)(hi * pa[1] + j),
                                       xx = (size_t)(wi * pa[2] + k);
                                size_t px = (size_t)b * per +
                                            ((f * (size_t)in->H + yy) * (size_t)in->W + xx) * 3;
                                int q = (i * pa[1] + j) * pa[2] + k;
                                for (int ch = 0; ch < 3; ch++) {
                                    float v;
                                    if (in->xt) {
                                        v = in->xt[px + (size_t)ch];
                                    } else {
                                        float x0 = (float)in->frames[px + (size_t)ch] / 127.5f -
                                                   1.0f,
                                              e = noise[px + (size_t)ch];
                                        v = (1.0f - t) * x0 + t * e;
                                        tg[q * 3 + ch] = e - x0;
                                    }
                                    pt[((ch * pa[0] + i) * pa[1] + j) * pa[2] + k] = v;
                                }
                            }
                }
    }
    if (p->first) {
        if (x->pos_F != in->F || x->pos_H != in->H || x->pos_W != in->W) {
            positions(c, Fp, Hp, Wp, x->h_row, x->h_pos);
            x->pos_F = in->F, x->pos_H = in->H, x->pos_W = in->W;
        }
        st = ig_backend_upload_f32(m->be, ig_model_act(m, x->patches),
                                   x->h_patches + (size_t)row0 * (size_t)P, (size_t)Nl * (size_t)P,
                                   err);
        if (st == IG_OK)
            st = upload_tokens(m, ig_model_act(m, x->pos), x->h_pos, T, C, row0, Nl, err);
        if (st == IG_OK)
            st = ig_backend_upload_f32(m->be, ig_model_act(m, x->freq), x->h_freq,
                                       (size_t)B * DIT_FREQ, err);
        if (st == IG_OK && c->cond == IG_COND_CLASS)
            st = ig_backend_upload(m->be, ig_model_i32(m, 0), x->h_labels,
                                   (size_t)B * sizeof(int32_t), err);
        /* the caption's tokens and their positions (the first stage embeds them) */
        if (st == IG_OK && x->Tk)
            st = ig_backend_upload(m->be, ig_model_i32(m, (uint64_t)m->B), x->h_labels + m->B,
                                   (size_t)B * (size_t)x->Tk * sizeof(int32_t), err);
        if (st == IG_OK && x->Tk)
            st = ig_backend_upload_f32(m->be, ig_model_act(m, x->cappos), x->h_cappos,
                                       (size_t)x->Tk * (size_t)C, err);
    }
    /* every stage's cross-attention reads the captions' lengths */
    if (st == IG_OK && x->Tk)
        st = ig_backend_upload(m->be, ig_model_i32(m, 0), x->h_labels, (size_t)B * sizeof(int32_t),
                               err);
    if (st == IG_OK && p->last && !in->xt)
        st = ig_backend_upload_f32(m->be, ig_model_act(m, x->target),
                                   x->h_target + (size_t)row0 * (size_t)P, (size_t)Nl * (size_t)P,
                                   err);
    return st;
}

/* The prediction of the slot's last forward, per token's (pt, ph, pw, c) vector, put back in
 * place: [B, F, H, W, 3]. */
ig_status dit_output(ig_model *m, int slot, float *out, ig_err *err) {
    m->slot = slot;
    dit_state *x = dit_of(m);
    const int *pa = m->cfg.patch;
    int B = m->slot_B[slot], T = m->slot_T[slot], P = x->P;
    int F = x->shape[slot][0], H = x->shape[slot][1], W = x->shape[slot][2];
    int Fp = F / pa[0], Hp = H / pa[1], Wp = W / pa[2];
    ig_status st = ig_backend_download_f32(m->be, x->h_target, ig_model_act(m, x->pred),
                                           (size_t)B * (size_t)T * (size_t)P, err);
    if (st != IG_OK) return st;
    size_t per = (size_t)F * (size_t)H * (size_t)W * 3;
    for (int b = 0; b < B; b++)
        for (int ti = 0; ti < Fp; ti++)
            for (int hi = 0; hi < Hp; hi++)
                for (int wi = 0; wi < Wp; wi++) {
                    size_t r = (size_t)b * (size_t)T + (size_t)((ti * Hp + hi) * Wp + wi);
                    const float *v = x->h_target + r * (size_t)P;
                    for (int i = 0; i < pa[0]; i++)
                        for (int j = 0; j < pa[1]; j++)
                            for (int k = 0; k < pa[2]; k++) {
                                size_t f = (size_t)(ti * pa[0] + i), yy = (size_t)(hi * pa[1] + j),
                                       xx = (size_t)(wi * pa[2] + k);
                                float *o = out + (size_t)b * per +
                                           ((f * (size_t)H + yy) * (size_t)W + xx) * 3;
                                int q = (i * pa[1] + j) * pa[2] + k;
                                for (int ch = 0; ch < 3; ch++) o[ch] = v[q * 3 + ch];
                            }
                }
    return IG_OK;
}
