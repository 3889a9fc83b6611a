/* vae_input.c - the VAE's side of its objective (objectives/vae_model.h): a micro-batch of frames
 * and noise staged into a slot (the frames [B F, H, W, 3] are already the passes' NHWC rows, the
 * noise [B F, h, w, C] the sample's), the loss's sums read back from the slot's rows, the
 * reconstruction, and on a whole model the posterior of frames (the encoder alone) and the frames
 * of latents (the decoder alone), as many frames at a time as the model was opened for.
 */
#include "vae.h"

#include <string.h>

ig_status vae_latent_shape(const ig_model_config *c, int H, int W, int *h, int *w, int *C,
                           ig_err *err) {
    const vae_shape d = vae_own(c);
    int f = 1 << (d.nb - 1);
    if (H < 1 || W < 1 || H % f || W % f)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "frames of %dx%d: the VAE's %d downsamplings (model.block_out_channels "
                          "has %d blocks) need a height and a width that are multiples of %d",
                          H, W, d.nb - 1, d.nb, f);
    if ((int64_t)H * W > (1 << 26))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "frames of %dx%d: too large", H, W);
    *h = H / f, *w = W / f, *C = d.latent;
    return IG_OK;
}

/* the slot's shape, checked against what the model holds */
static ig_status take_slot(ig_model *m, int slot, int frames, int H, int W, int has_target,
                           ig_err *err) {
    vae_state *x = vae_of(m);
    int h = 0, w = 0, C = 0;
    ig_status st = vae_latent_shape(&m->cfg, H, W, &h, &w, &C, err);
    if (st != IG_OK) return st;
    if (frames < 1 || slot < 0 || slot >= m->part.slots || slot >= 64 ||
        (uint64_t)frames * (uint64_t)H * (uint64_t)W > (uint64_t)m->B * (uint64_t)m->T)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "%d frames of %dx%d do not fit the model's micro-batch of %d x %d pixels",
                          frames, H, W, m->B, m->T);
    m->slot = slot;
    x->frames[slot] = frames, x->H[slot] = H, x->W[slot] = W;
    x->has_target[slot] = has_target;
    return IG_OK;
}

ig_status vae_stage_batch(ig_model *m, int slot, const ig_vae_batch *b, ig_err *err) {
    vae_state *x = vae_of(m);
    const vae_net *n = &x->net;
    int h = 0, w = 0, C = 0;
    ig_status st = vae_latent_shape(&m->cfg, b->H, b->W, &h, &w, &C, err);
    if (st == IG_OK && (b->B < 1 || b->F < 1 || b->B > 1 << 20 || b->F > 1 << 20))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "%d clips of %d frames", b->B, b->F);
    if (st == IG_OK) st = take_slot(m, slot, b->B * b->F, b->H, b->W, 1, err);
    if (st != IG_OK) return st;
    m->slot_B[slot] = b->B;
    m->slot_T[slot] = b->F * b->H * b->W;
    x->grad_scale[slot] = b->grad_scale;
    x->kl_weight[slot] = b->kl_weight;
    size_t frames = (size_t)b->B * (size_t)b->F;
    st = ig_backend_upload_f32(m->be, ig_model_act(m, n->xa), b->x,
                               frames * (size_t)b->H * (size_t)b->W * 3, err);
    if (st == IG_OK)
        st = ig_backend_upload_f32(m->be, ig_model_act(m, n->epsa), b->eps,
                                   frames * (size_t)h * (size_t)w * (size_t)C, err);
    return st;
}

ig_status vae_sums(ig_model *m, int slot, ig_vae_sums *out, ig_err *err) {
    const vae_state *x = vae_of(m);
    m->slot = slot;
    uint64_t P0 = (uint64_t)x->frames[slot] * (uint64_t)x->H[slot] * (uint64_t)x->W[slot];
    uint64_t Pl = P0 >> (2 * (x->net.nb - 1)), kl0 = (uint64_t)m->B * (uint64_t)m->T;
    float *host = m->h_f32 + (uint64_t)slot * m->acts.io_f32;
    ig_status st =
        ig_backend_download(m->be, host, ig_model_io_f32(m, 0), (size_t)P0 * sizeof(float), err);
    if (st == IG_OK)
        st = ig_backend_download(m->be, host + P0, ig_model_io_f32(m, kl0),
                                 (size_t)Pl * sizeof(float), err);
    if (st != IG_OK) return st;
    double l1 = 0, kl = 0;
    for (uint64_t i = 0; i < P0; i++) l1 += host[i];
    for (uint64_t i = 0; i < Pl; i++) kl += host[P0 + i];
    *out = (ig_vae_sums){.l1 = l1,
                         .l1_count = (double)P0 * 3.0,
                         .kl = kl,
                         .kl_count = (double)Pl * (double)x->net.lat};
    return IG_OK;
}

ig_status vae_reconstruction(ig_model *m, int slot, float *out, ig_err *err) {
    const vae_state *x = vae_of(m);
    m->slot = slot;
    size_t n = (size_t)x->frames[slot] * (size_t)x->H[slot] * (size_t)x->W[slot] * 3;
    return ig_backend_download_f32(m->be, out, ig_model_act(m, x->net.preda), n, err);
}

/* ---- a whole model: the encoder or the decoder alone ------------------------------------------
 */

static ig_status need_whole(const ig_model *m, ig_err *err) {
    if (m->part.first && m->part.last && m->part.tp == 1 && !m->part.dpg) return IG_OK;
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "the VAE's encoder and decoder run alone on a whole model (one process)");
}

/* frames of H x W a pass takes at most */
static int frames_per_pass(const ig_model *m, int H, int W) {
    uint64_t f = (uint64_t)m->B * (uint64_t)m->T / ((uint64_t)H * (uint64_t)W);
    return f > (1u << 20) ? 1 << 20 : (int)f;
}

/* layers [l0, l1) forward on slot 0, as the stage driver runs them */
static ig_status run_layers(ig_model *m, int l0, int l1, ig_err *err) {
    ig_status st = IG_OK;
    for (int l = l0; st == IG_OK && l < l1; l++) {
        st = ig_store_use_layer(m->st, l, l + 1 < l1 ? l + 1 : -1, err);
        if (st == IG_OK) st = vae_layer_fwd(m, l, err);
    }
    return st;
}

ig_status vae_encode(ig_model *m, const float *x, int N, int H, int W, float *moments,
                     ig_err *err) {
    vae_state *s = vae_of(m);
    const vae_net *n = &s->net;
    int h = 0, w = 0, C = 0, per = frames_per_pass(m, H, W);
    ig_status st = need_whole(m, err);
    if (st == IG_OK) st = vae_latent_shape(&m->cfg, H, W, &h, &w, &C, err);
    if (st == IG_OK && per < 1)
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "a frame of %dx%d does not fit the model's micro-batch of %d x %d pixels",
                        H, W, m->B, m->T);
    size_t in_frame = (size_t)H * (size_t)W * 3, out_frame = (size_t)h * (size_t)w * 2 * (size_t)C;
    for (int f0 = 0; st == IG_OK && f0 < N; f0 += per) {
        int k = N - f0 < per ? N - f0 : per;
        if ((st = take_slot(m, 0, k, H, W, 0, err)) != IG_OK) break;
        st = ig_backend_upload_f32(m->be, ig_model_act(m, n->xa), x + (size_t)f0 * in_frame,
                                   (size_t)k * in_frame, err);
        if (st == IG_OK)
            st = ig_backend_zero(m->be, ig_model_act(m, n->epsa),
                                 (size_t)k * (size_t)h * (size_t)w * (size_t)C * m->as, err);
        if (st == IG_OK) st = vae_embed_fwd(m, err);
        if (st == IG_OK) st = run_layers(m, 0, n->nb + 1, err);
        if (st == IG_OK)
            st = ig_backend_download_f32(m->be, moments + (size_t)f0 * out_frame,
                                         ig_model_at(m, n->layer[n->nb].momenta),
                                         (size_t)k * out_frame, err);
    }
    return st;
}

ig_status vae_decode(ig_model *m, const float *z, int N, int h, int w, float *out, ig_err *err) {
    vae_state *s = vae_of(m);
    const vae_net *n = &s->net;
    int H = h << (n->nb - 1), W = w << (n->nb - 1), per = frames_per_pass(m, H, W);
    ig_status st = need_whole(m, err);
    if (st == IG_OK && (h < 1 || w < 1 || h > 1 << 16 || w > 1 << 16))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "latents of %dx%d", h, w);
    if (st == IG_OK && per < 1)
        st = ig_err_set(err, IG_ERR_INVALID_ARG,
                        "a frame of %dx%d does not fit the model's micro-batch of %d x %d pixels",
                        H, W, m->B, m->T);
    size_t in_frame = (size_t)h * (size_t)w * (size_t)n->lat, out_frame = (size_t)H * (size_t)W * 3;
    for (int f0 = 0; st == IG_OK && f0 < N; f0 += per) {
        int k = N - f0 < per ? N - f0 : per;
        if ((st = take_slot(m, 0, k, H, W, 0, err)) != IG_OK) break;
        st = ig_backend_upload_f32(m->be, ig_model_act(m, n->layer[n->nb].outa),
                                   z + (size_t)f0 * in_frame, (size_t)k * in_frame, err);
        if (st == IG_OK) st = run_layers(m, n->nb + 1, n->L, err);
        if (st == IG_OK) vae_head_only(m);
        if (st == IG_OK)
            st = ig_backend_download_f32(m->be, out + (size_t)f0 * out_frame,
                                         ig_model_act(m, n->preda), (size_t)k * out_frame, err);
    }
    return st;
}
