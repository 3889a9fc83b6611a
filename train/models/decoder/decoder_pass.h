/* decoder_pass.h - private to train/models/decoder/: one layer's forward, which the training
 * passes (decoder_pass.c) and generation (decoder_gen.c) share, over buffers of either. */
#ifndef INGOT_DECODER_PASS_H
#define INGOT_DECODER_PASS_H

#include "decoder.h"

/* The buffers of one layer's forward (the fields of dec_layer_acts, as pointers). */
typedef struct dec_bufs {
    void *n1, *n1_full, *qkv, *atty, *attproj, *res2, *n2, *n2_full, *mlp[3], *mlp_out, *res3;
    float *mean1, *rstd1, *lse, *mean2, *rstd2; /* mean*: LayerNorm only */
} dec_bufs;

/* How attention runs: over the micro-batch (kc NULL; docs: document ids or NULL), or the n new
 * rows at positions pos0.. over the layer's caches kc, vc [Tmax, NKV hs] (q: [n, NH hs] scratch). */
typedef struct dec_attn {
    const int32_t *docs;
    void *kc, *vc, *q;
    int pos0, Tmax;
} dec_attn;

/* Layer l of the slot's activations. */
dec_bufs dec_slot_bufs(const ig_model *m, int l);
/* Layer l on B x T rows: res_in is prev's res3 (the fused residual add writes it) or, for the
 * stage's first layer (prev NULL), input. */
ig_status dec_layer_forward(ig_model *m, int l, const dec_bufs *y, const dec_bufs *prev,
                            void *input, const dec_attn *ac, int B, int T, ig_err *err);
/* The preset's norm of rows rows of in (mean: LayerNorm only), and with the residual add fused:
 * res = a + x, out = norm(res). */
void dec_norm(ig_model *m, void *out, float *mean, float *rstd, const void *in, const void *w,
              const void *b, int rows);
void dec_norm_residual(ig_model *m, void *res, void *out, float *mean, float *rstd, const void *a,
                       const void *x, const void *w, const void *b, int rows);

#endif
