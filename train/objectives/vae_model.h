/* vae_model.h - what the VAE objective (vae.c: a reconstruction's L1 distance plus a weighted KL
 * term, Open-Sora's VAE training without its GAN and perceptual terms) asks of a family that it
 * trains: the family's ig_vae_model (its descriptor's for_objective) stages the objective's frames
 * and noise as its passes read them and gives back the loss's sums, its reconstruction, and, on a
 * whole model, the posterior of frames (encode) and the frames of latents (decode). On the
 * families' side of the wall.
 */
#ifndef INGOT_OBJECTIVES_VAE_MODEL_H
#define INGOT_OBJECTIVES_VAE_MODEL_H

#include "family/objective.h"

extern const ig_objective ig_objective_vae;

/* A micro-batch as the objective made it: B clips of F frames of H x W, each frame encoded on its
 * own (a 2-D VAE per frame), the frames x in [-1, 1] (the input and the reconstruction's target),
 * and the posterior's noise eps, standard normal, for z = mean + exp(logvar / 2) eps. */
typedef struct ig_vae_batch {
    int B, F, H, W;
    const float *x;   /* [B, F, H, W, 3] */
    const float *eps; /* [B, F, h, w, C]: the latent's shape (ig_vae_model.latent_shape) */
    float grad_scale; /* 0: a forward only */
    double kl_weight; /* the KL term's weight in the loss (vae.kl_weight) */
} ig_vae_batch;

/* The loss's sums over a micro-batch (every element): sum |reconstruction - x| over B F H W 3
 * values, and sum 0.5 (mean^2 + exp(logvar) - 1 - logvar) over B F h w C latent values. */
typedef struct ig_vae_sums {
    double l1, l1_count, kl, kl_count;
} ig_vae_sums;

typedef struct ig_vae_model {
    /* the latent of a frame of H x W: h x w x C (refused with the numbers when the downsampling
     * does not divide the frame) */
    ig_status (*latent_shape)(const ig_model_config *c, int H, int W, int *h, int *w, int *C,
                              ig_err *err);
    /* scaling_factor and shift_factor (what a latent model multiplies and shifts z by) */
    void (*factors)(const ig_model_config *c, double *scaling, double *shift);
    /* stages the batch into slot (its frames, its noise, the loss's scales) */
    ig_status (*stage)(ig_model *m, int slot, const ig_vae_batch *b, ig_err *err);
    /* the slot's sums after its forward */
    ig_status (*sums)(ig_model *m, int slot, ig_vae_sums *out, ig_err *err);
    /* the slot's reconstruction after its forward, [B, F, H, W, 3] */
    ig_status (*reconstruction)(ig_model *m, int slot, float *out, ig_err *err);
    /* A whole model (one process, no ZeRO): N frames x [N, H, W, 3] in [-1, 1] to the posterior's
     * moments [N, h, w, 2C] (the C means, then the C log-variances, unclamped: quant_conv's
     * output), as many frames at a time as the model was opened for; and latents z [N, h, w, C]
     * to frames [N, H, W, 3] (the decoder's output, not clamped). */
    ig_status (*encode)(ig_model *m, const float *x, int N, int H, int W, float *moments,
                        ig_err *err);
    ig_status (*decode)(ig_model *m, const float *z, int N, int h, int w, float *out, ig_err *err);
} ig_vae_model;

/* The VAE interface of m's family (NULL: it is not trained by the VAE objective). */
const ig_vae_model *ig_vae_model_of(const ig_model *m);

#endif
