/* dit_input.c - a micro-batch of the rectified flow (objectives/flow.c made x_t, its times, the
 * conditioning after dropout and the target) staged into a slot of the DiT's memory: x_t cut into
 * patches (a row per token, in (t, h, w) order, each patch's values channel first, as the
 * convolution's weight [D, C, pt, ph, pw] reads them) and the target into each token's
 * (pt, ph, pw, c) vector, as the final layer predicts it; the tokens' sin-cos positions and the
 * times' 256 frequencies are computed here, in double; the labels and the captions' tokens with
 * the null ones (the tables' last rows), or the captions' features with a mark for the null ones. A
 * rank uploads only what its stage and its rows use. The prediction is put back in the clips'
 * layout the same way.
 */
#include "dit.h"

#include <math.h>
#include <string.h>

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
    for (int j = 0; j < dit_own(c).caption_len; j++) {
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
 * as one token when it has none or it was dropped) at h_labels[b], its tokens (the rest the null
 * token) at h_labels[B + b Tk], B the model's largest micro-batch. */
static void caption_of(ig_model *m, const ig_flow_batch *fb, int b) {
    dit_state *x = dit_of(m);
    int Tk = x->Tk, V = m->cfg.vocab_size, len = fb->caption_lens ? fb->caption_lens[b] : 0;
    int32_t *tok = x->h_labels + m->B + (size_t)b * (size_t)Tk;
    for (int j = 0; j < len; j++) tok[j] = fb->captions[(size_t)b * (size_t)Tk + (size_t)j];
    if (len == 0) tok[0] = V, len = 1; /* the null caption */
    for (int j = len; j < Tk; j++) tok[j] = V;
    x->h_labels[b] = len;
}

/* Sample b's caption features into the host staging: its rows (the rest zeros: never attended,
 * and finite in the weights' gradients), or, for no caption, a mark that the first stage puts the
 * null caption y_embedding in them (dit_caption.c), every row attended; its length at
 * h_labels[b]. */
static void features_of(ig_model *m, const ig_flow_batch *fb, int b) {
    dit_state *x = dit_of(m);
    size_t Tk = (size_t)x->Tk, Dt = (size_t)x->Dt;
    size_t len = fb->caption_lens && fb->features && fb->caption_lens[b] > 0
                     ? (size_t)fb->caption_lens[b]
                     : 0;
    float *f = x->h_feat + (size_t)b * Tk * Dt;
    if (len) memcpy(f, fb->features + (size_t)b * Tk * Dt, len * Dt * sizeof(float));
    memset(f + len * Dt, 0, (Tk - len) * Dt * sizeof(float));
    x->h_null[(size_t)m->slot * (size_t)m->B + (size_t)b] = len == 0;
    x->h_labels[b] = len ? (int32_t)len : x->Tk;
}

ig_status dit_flow_stage(ig_model *m, int slot, const ig_flow_batch *fb, ig_err *err) {
    const ig_model_config *c = &m->cfg;
    dit_shape d = dit_own(c);
    dit_state *x = dit_of(m);
    const ig_part *p = &m->part;
    int B = fb->B, T = 0;
    ig_status st = dit_clip_tokens(c, fb->F, fb->H, fb->W, &T, err);
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
    x->grad_scale[slot] = fb->grad_scale;
    x->has_target[slot] = fb->target != NULL;
    x->shape[slot][0] = fb->F, x->shape[slot][1] = fb->H, x->shape[slot][2] = fb->W;
    const int *pa = d.patch;
    int Fp = fb->F / pa[0], Hp = fb->H / pa[1], Wp = fb->W / pa[2], P = x->P, C = c->d_model;
    int V = dit_channels(c);                                                /* a position's */
    size_t per = (size_t)fb->F * (size_t)fb->H * (size_t)fb->W * (size_t)V; /* a clip's values */
    /* each sample's time's frequencies, label and caption */
    for (int b = 0; b < B; b++) {
        frequencies(fb->t[b], x->h_freq + (size_t)b * DIT_FREQ);
        x->h_labels[b] = fb->labels[b];
        if (x->Dt)
            features_of(m, fb, b);
        else if (d.cond == DIT_COND_CAPTION)
            caption_of(m, fb, b);
    }
    /* the patches of x_t and the targets, by token */
    for (int b = 0; b < B; b++)
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
                                size_t px =
                                    (size_t)b * per +
                                    ((f * (size_t)fb->H + yy) * (size_t)fb->W + xx) * (size_t)V;
                                int q = (i * pa[1] + j) * pa[2] + k;
                                for (int ch = 0; ch < V; ch++) {
                                    pt[((ch * pa[0] + i) * pa[1] + j) * pa[2] + k] =
                                        fb->xt[px + (size_t)ch];
                                    if (fb->target) tg[q * V + ch] = fb->target[px + (size_t)ch];
                                }
                            }
                }
    if (p->first) {
        if (x->pos_F != fb->F || x->pos_H != fb->H || x->pos_W != fb->W) {
            positions(c, Fp, Hp, Wp, x->h_row, x->h_pos);
            x->pos_F = fb->F, x->pos_H = fb->H, x->pos_W = fb->W;
        }
        st = ig_backend_upload_f32(m->be, ig_model_act(m, x->patches),
                                   x->h_patches + (size_t)row0 * (size_t)P, (size_t)Nl * (size_t)P,
                                   err);
        if (st == IG_OK)
            st = upload_tokens(m, ig_model_act(m, x->pos), x->h_pos, T, C, row0, Nl, err);
        if (st == IG_OK)
            st = ig_backend_upload_f32(m->be, ig_model_act(m, x->freq), x->h_freq,
                                       (size_t)B * DIT_FREQ, err);
        if (st == IG_OK && d.cond == DIT_COND_CLASS)
            st = ig_backend_upload(m->be, ig_model_i32(m, 0), x->h_labels,
                                   (size_t)B * sizeof(int32_t), err);
        /* the caption's features (the first stage projects them), or its tokens and their
         * positions (the first stage embeds them) */
        if (st == IG_OK && x->Dt)
            st = ig_backend_upload_f32(m->be, ig_model_act(m, x->cfeat), x->h_feat,
                                       (size_t)B * (size_t)x->Tk * (size_t)x->Dt, err);
        if (st == IG_OK && x->Tk && !x->Dt)
            st = ig_backend_upload(m->be, ig_model_i32(m, (uint64_t)m->B), x->h_labels + m->B,
                                   (size_t)B * (size_t)x->Tk * sizeof(int32_t), err);
        if (st == IG_OK && x->Tk && !x->Dt)
            st = ig_backend_upload_f32(m->be, ig_model_act(m, x->cappos), x->h_cappos,
                                       (size_t)x->Tk * (size_t)C, err);
    }
    /* every stage's cross-attention reads the captions' lengths */
    if (st == IG_OK && x->Tk)
        st = ig_backend_upload(m->be, ig_model_i32(m, 0), x->h_labels, (size_t)B * sizeof(int32_t),
                               err);
    if (st == IG_OK && p->last && fb->target)
        st = ig_backend_upload_f32(m->be, ig_model_act(m, x->target),
                                   x->h_target + (size_t)row0 * (size_t)P, (size_t)Nl * (size_t)P,
                                   err);
    return st;
}

/* The prediction of the slot's last forward, per token's (pt, ph, pw, c) vector, put back in
 * place: [B, F, H, W, C]. */
ig_status dit_output(ig_model *m, int slot, float *out, ig_err *err) {
    m->slot = slot;
    dit_state *x = dit_of(m);
    dit_shape d = dit_own(&m->cfg);
    const int *pa = d.patch;
    int B = m->slot_B[slot], T = m->slot_T[slot], P = x->P;
    int F = x->shape[slot][0], H = x->shape[slot][1], W = x->shape[slot][2];
    int Fp = F / pa[0], Hp = H / pa[1], Wp = W / pa[2];
    ig_status st = ig_backend_download_f32(m->be, x->h_target, ig_model_act(m, x->pred),
                                           (size_t)B * (size_t)T * (size_t)P, err);
    if (st != IG_OK) return st;
    int V = dit_channels(&m->cfg);
    size_t per = (size_t)F * (size_t)H * (size_t)W * (size_t)V;
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
                                           ((f * (size_t)H + yy) * (size_t)W + xx) * (size_t)V;
                                int q = (i * pa[1] + j) * pa[2] + k;
                                for (int ch = 0; ch < V; ch++) o[ch] = v[q * V + ch];
                            }
                }
    return IG_OK;
}
