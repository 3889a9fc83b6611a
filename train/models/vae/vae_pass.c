/* vae_pass.c - the VAE's forward and backward passes over one micro-batch of frames as calls of the
 * backend's operation table, piece by piece (vae.h's layers) for the stage driver.
 *
 * A ResnetBlock2D: n1 = GN+SiLU(x) (one fused kernel), c1 = conv1(n1), n2 = GN+SiLU(c1), out =
 * conv2(n2) + (conv_shortcut(x) or x). The mid block's attention: g = GroupNorm(x), q | k | v =
 * Linear(g), a = softmax(q k^T / sqrt(C)) v over a frame's h w positions (the attention kernel with
 * one head of C channels, not causal, the frames as its batch), out = x + to_out(a). The
 * downsample: a 3x3 convolution of stride 2 over the frame padded by one at the bottom and the
 * right only; the upsample: nearest 2x, then a 3x3 convolution. The encoder ends in GN+SiLU,
 * conv_out to 2 latent channels x 2 and quant_conv: the moments, whose sample z (ig_kernel_
 * posterior_forward) is the decoder's input; the decoder ends in GN+SiLU and conv_out to RGB, and
 * the head's loss is the mean absolute error against the frames (ig_kernel_l1), whose gradient
 * replaces the prediction.
 *
 * The backward walks each layer's pieces in reverse. The gradient flowing back lives in one of two
 * scratch buffers (vae_state.g says which): a piece reads its output's gradient there and writes
 * its input's into the other, and the two swap; the shortcut's gradient and GroupNorm's
 * (which adds to its input's gradient) meet in that buffer. Three more scratch buffers hold what a
 * piece needs inside (a convolution's input gradient before GroupNorm's backward, q|k|v's). The
 * encoder's mid layer adds the KL term's gradient where the sample's backward meets it (its scale:
 * the loss scale x vae.kl_weight over the latent's elements).
 *
 * Recomputation (the places of vae_net.c): with full, the stage driver runs a layer's forward again
 * from its kept input before its backward; with selective, the attention's backward first runs its
 * core again from the kept q|k|v. Both give the forward's bits: the same kernels on the same
 * inputs.
 */
#include "vae.h"

#include <string.h>

#define A(off)     ig_model_at(m, off)
#define S(off)     ig_model_scratch(m, off)
#define F(off)     ig_model_at_f32(m, off)
#define PRM(i)     ig_model_param(m, (size_t)(i))
#define GRD(i)     ig_model_grad(m, (size_t)(i))
#define NET(m)     (&vae_of(m)->net)
#define ZERO(p, n) ig_backend_zero(m->be, (p), (size_t)(n)*m->as, NULL)

/* the slot's frames and their size at a level */
typedef struct geo {
    int N, h, w;
} geo;

static geo at_level(const ig_model *m, int level) {
    const vae_state *x = vae_of(m);
    return (geo){x->frames[m->slot], x->H[m->slot] >> level, x->W[m->slot] >> level};
}

static size_t pixels(geo g) {
    return (size_t)g.N * (size_t)g.h * (size_t)g.w;
}

/* ---- the gradient's two buffers ----------------------------------------------------------------
 */

static void *gcur(const ig_model *m) {
    return ig_model_scratch(m, NET(m)->ga[vae_of(m)->g]);
}
static void *gnext(const ig_model *m) {
    return ig_model_scratch(m, NET(m)->ga[1 - vae_of(m)->g]);
}
static void gswap(ig_model *m) {
    vae_of(m)->g ^= 1;
}

/* ---- the pieces --------------------------------------------------------------------------------
 */

static ig_conv2d_shape conv_shape(const vae_conv *v, geo g) {
    int lo = v->pad_end ? 0 : v->k / 2, hi = v->pad_end ? 1 : v->k / 2;
    return (ig_conv2d_shape){.N = g.N,
                             .H = g.h,
                             .W = g.w,
                             .C = v->cin,
                             .OC = v->cout,
                             .KH = v->k,
                             .KW = v->k,
                             .stride = v->stride,
                             .pad_top = lo,
                             .pad_left = lo,
                             .pad_bottom = hi,
                             .pad_right = hi};
}

/* a convolution of input of geometry g */
static void conv_fwd(ig_model *m, const vae_conv *v, void *out, const void *in, geo g) {
    ig_conv2d_shape s = conv_shape(v, g);
    ig_kernel_conv2d_forward(m->be, out, in, PRM(v->w), PRM(v->b), &s);
}
static void conv_bwd(ig_model *m, const vae_conv *v, void *din, const void *dout, const void *in,
                     geo g) {
    ig_conv2d_shape s = conv_shape(v, g);
    ig_kernel_conv2d_backward(m->be, din, GRD(v->w), GRD(v->b), dout, in, PRM(v->w), &s);
}

static void gn_fwd(ig_model *m, const vae_norm *n, void *out, uint64_t f_m, uint64_t f_r,
                   const void *in, geo g, int C, int silu) {
    ig_kernel_groupnorm_forward(m->be, out, F(f_m), F(f_r), in, PRM(n->w), PRM(n->b), g.N,
                                g.h * g.w, C, NET(m)->G, (float)VAE_EPS, silu);
}
/* din += the gradient of GroupNorm(+SiLU) from dout */
static void gn_bwd(ig_model *m, const vae_norm *n, void *din, const void *dout, uint64_t f_m,
                   uint64_t f_r, const void *in, geo g, int C, int silu) {
    ig_kernel_groupnorm_backward(m->be, din, GRD(n->w), GRD(n->b), dout, in, PRM(n->w), PRM(n->b),
                                 F(f_m), F(f_r), g.N, g.h * g.w, C, NET(m)->G, silu);
}

static void resnet_fwd(ig_model *m, const vae_resnet *r, const void *in, geo g) {
    size_t P = pixels(g);
    gn_fwd(m, &r->n1, A(r->n1a), r->f_m1, r->f_r1, in, g, r->cin, 1);
    conv_fwd(m, &r->c1, A(r->c1a), A(r->n1a), g);
    gn_fwd(m, &r->n2, A(r->n2a), r->f_m2, r->f_r2, A(r->c1a), g, r->cout, 1);
    conv_fwd(m, &r->c2, A(r->outa), A(r->n2a), g);
    const void *skip = in;
    if (r->sc.w >= 0) { /* the shortcut's output: in the piece's region for inference */
        void *sc = m->part.inference ? A(r->sca) : S(NET(m)->t1);
        conv_fwd(m, &r->sc, sc, in, g);
        skip = sc;
    }
    ig_kernel_add(m->be, A(r->outa), A(r->outa), skip, P * (size_t)r->cout);
}

/* from the output's gradient (gcur) to the input's (gcur after the swap) */
static void resnet_bwd(ig_model *m, const vae_resnet *r, const void *in, geo g) {
    const vae_net *n = NET(m);
    size_t P = pixels(g);
    void *dout = gcur(m), *din = gnext(m), *t1 = S(n->t1), *t2 = S(n->t2);
    conv_bwd(m, &r->c2, t1, dout, A(r->n2a), g);
    ZERO(t2, P * (size_t)r->cout);
    gn_bwd(m, &r->n2, t2, t1, r->f_m2, r->f_r2, A(r->c1a), g, r->cout, 1);
    conv_bwd(m, &r->c1, t1, t2, A(r->n1a), g);
    if (r->sc.w >= 0)
        conv_bwd(m, &r->sc, din, dout, in, g);
    else
        ig_backend_copy(m->be, din, dout, P * (size_t)r->cout * m->as, NULL);
    gn_bwd(m, &r->n1, din, t1, r->f_m1, r->f_r1, in, g, r->cin, 1);
    gswap(m);
}

static ig_attention_shape attn_shape(const vae_attn *t, geo g) {
    return (ig_attention_shape){
        .B = g.N, .T = g.h * g.w, .n_head = 1, .n_kv_head = 1, .head_size = t->C, .causal = 0};
}

static void attn_core(ig_model *m, const vae_attn *t, geo g) {
    ig_attention_shape s = attn_shape(t, g);
    ig_kernel_attention_forward(m->be, A(t->atta), F(t->f_lse), A(t->qkva), NULL, &s);
}

static void attn_fwd(ig_model *m, const vae_attn *t, const void *in, geo g) {
    int P = (int)pixels(g), C = t->C;
    gn_fwd(m, &t->gn, A(t->gna), t->f_m, t->f_r, in, g, C, 0);
    ig_kernel_matmul_forward(m->be, A(t->qkva), A(t->gna), PRM(t->qkv_w), IG_W_OUT_IN,
                             PRM(t->qkv_b), P, C, 3 * C);
    attn_core(m, t, g);
    ig_kernel_matmul_forward(m->be, A(t->outa), A(t->atta), PRM(t->out_w), IG_W_OUT_IN,
                             PRM(t->out_b), P, C, C);
    ig_kernel_add(m->be, A(t->outa), A(t->outa), in, (size_t)P * (size_t)C);
}

static void attn_bwd(ig_model *m, const vae_attn *t, const void *in, geo g) {
    const vae_net *n = NET(m);
    int P = (int)pixels(g), C = t->C;
    ig_attention_shape s = attn_shape(t, g);
    void *dout = gcur(m), *din = gnext(m), *t1 = S(n->t1), *t2 = S(n->t2), *t3 = S(n->t3);
    if (m->part.recompute == IG_RECOMPUTE_SELECTIVE) attn_core(m, t, g);
    ig_kernel_matmul_backward(m->be, t1, GRD(t->out_w), GRD(t->out_b), dout, A(t->atta),
                              PRM(t->out_w), IG_W_OUT_IN, P, C, C);
    ig_kernel_attention_backward(m->be, t3, t1, A(t->qkva), A(t->atta), F(t->f_lse), NULL, &s);
    ig_kernel_matmul_backward(m->be, t2, GRD(t->qkv_w), GRD(t->qkv_b), t3, A(t->gna), PRM(t->qkv_w),
                              IG_W_OUT_IN, P, C, 3 * C);
    ig_backend_copy(m->be, din, dout, (size_t)P * (size_t)C * m->as, NULL);
    gn_bwd(m, &t->gn, din, t2, t->f_m, t->f_r, in, g, C, 0);
    gswap(m);
}

/* ---- the layers --------------------------------------------------------------------------------
 */

/* layer l's input: the previous layer's output, or conv_in's */
static const void *layer_input(const ig_model *m, int l) {
    const vae_net *n = NET(m);
    return l ? ig_model_at(m, n->layer[l - 1].outa) : ig_model_at(m, n->e0a);
}

/* the resnets of a down or up block, each from the one before */
static void resnets_fwd(ig_model *m, const vae_layer *y, const void *in, geo g) {
    for (int j = 0; j < y->nres; j++) resnet_fwd(m, &y->res[j], j ? A(y->res[j - 1].outa) : in, g);
}
static void resnets_bwd(ig_model *m, const vae_layer *y, const void *in, geo g) {
    for (int j = y->nres - 1; j >= 0; j--)
        resnet_bwd(m, &y->res[j], j ? A(y->res[j - 1].outa) : in, g);
}

/* the mid block from its input */
static void mid_fwd(ig_model *m, const vae_layer *y, const void *in, geo g) {
    resnet_fwd(m, &y->res[0], in, g);
    attn_fwd(m, &y->attn, A(y->res[0].outa), g);
    resnet_fwd(m, &y->res[1], A(y->attn.outa), g);
}
static void mid_bwd(ig_model *m, const vae_layer *y, const void *in, geo g) {
    resnet_bwd(m, &y->res[1], A(y->attn.outa), g);
    attn_bwd(m, &y->attn, A(y->res[0].outa), g);
    resnet_bwd(m, &y->res[0], in, g);
}

ig_status vae_layer_fwd(ig_model *m, int l, ig_err *err) {
    (void)err;
    const vae_net *n = NET(m);
    const vae_layer *y = &n->layer[l];
    const void *in = layer_input(m, l);
    geo g = at_level(m, y->level);
    size_t P = pixels(g);
    switch (y->kind) {
    case VAE_DOWN:
        resnets_fwd(m, y, in, g);
        if (y->resample.w >= 0)
            conv_fwd(m, &y->resample, A(y->outa), A(y->res[y->nres - 1].outa), g);
        break;
    case VAE_ENC_MID:
        mid_fwd(m, y, in, g);
        gn_fwd(m, &y->nout, A(y->nouta), y->f_mo, y->f_ro, A(y->res[1].outa), g, y->attn.C, 1);
        conv_fwd(m, &y->conv_out, A(y->coa), A(y->nouta), g);
        conv_fwd(m, &y->quant, A(y->momenta), A(y->coa), g);
        /* z, and the KL term's rows after the L1 term's (the plan's P0 of them) */
        ig_kernel_posterior_forward(m->be, A(y->outa),
                                    ig_model_io_f32(m, (uint64_t)m->B * (uint64_t)m->T),
                                    A(y->momenta), A(n->epsa), (int)P, n->lat);
        break;
    case VAE_DEC_MID:
        conv_fwd(m, &y->post_quant, A(y->pqa), in, g);
        conv_fwd(m, &y->conv_in, A(y->cia), A(y->pqa), g);
        mid_fwd(m, y, A(y->cia), g);
        break;
    default: /* VAE_UP */
        resnets_fwd(m, y, in, g);
        if (y->resample.w >= 0) {
            ig_kernel_upsample2x_forward(m->be, A(y->upa), A(y->res[y->nres - 1].outa), g.N, g.h,
                                         g.w, y->cout);
            conv_fwd(m, &y->resample, A(y->outa), A(y->upa), (geo){g.N, 2 * g.h, 2 * g.w});
        }
    }
    return IG_OK;
}

static ig_status vae_layer_bwd(ig_model *m, int l, ig_err *err) {
    (void)err;
    const vae_net *n = NET(m);
    const vae_state *x = vae_of(m);
    const vae_layer *y = &n->layer[l];
    const void *in = layer_input(m, l);
    geo g = at_level(m, y->level);
    size_t P = pixels(g);
    void *t1 = S(n->t1), *t2 = S(n->t2);
    switch (y->kind) {
    case VAE_DOWN:
        if (y->resample.w >= 0) {
            conv_bwd(m, &y->resample, gnext(m), gcur(m), A(y->res[y->nres - 1].outa), g);
            gswap(m);
        }
        resnets_bwd(m, y, in, g);
        break;
    case VAE_ENC_MID: {
        /* the KL term's gradient: the loss scale x its weight over the latent's elements */
        float ks = (float)((double)x->grad_scale[m->slot] * x->kl_weight[m->slot] /
                           ((double)P * (double)n->lat));
        ig_kernel_posterior_backward(m->be, t1, gcur(m), A(y->momenta), A(n->epsa), (int)P, n->lat,
                                     ks);
        conv_bwd(m, &y->quant, t2, t1, A(y->coa), g);
        conv_bwd(m, &y->conv_out, t1, t2, A(y->nouta), g);
        ZERO(gnext(m), P * (size_t)y->attn.C);
        gn_bwd(m, &y->nout, gnext(m), t1, y->f_mo, y->f_ro, A(y->res[1].outa), g, y->attn.C, 1);
        gswap(m);
        mid_bwd(m, y, in, g);
        break;
    }
    case VAE_DEC_MID:
        mid_bwd(m, y, A(y->cia), g);
        conv_bwd(m, &y->conv_in, gnext(m), gcur(m), A(y->pqa), g);
        gswap(m);
        conv_bwd(m, &y->post_quant, gnext(m), gcur(m), in, g);
        gswap(m);
        break;
    default: /* VAE_UP */
        if (y->resample.w >= 0) {
            conv_bwd(m, &y->resample, t1, gcur(m), A(y->upa), (geo){g.N, 2 * g.h, 2 * g.w});
            ig_kernel_upsample2x_backward(m->be, gnext(m), t1, g.N, g.h, g.w, y->cout);
            gswap(m);
        }
        resnets_bwd(m, y, in, g);
    }
    return IG_OK;
}

/* ---- the embedding and the head ----------------------------------------------------------------
 */

ig_status vae_embed_fwd(ig_model *m, ig_err *err) {
    (void)err;
    const vae_net *n = NET(m);
    conv_fwd(m, &n->conv_in, A(n->e0a), A(n->xa), at_level(m, 0));
    return IG_OK;
}

static ig_status vae_embed_bwd(ig_model *m, ig_err *err) {
    (void)err;
    const vae_net *n = NET(m);
    conv_bwd(m, &n->conv_in, NULL, gcur(m), A(n->xa), at_level(m, 0));
    return IG_OK;
}

/* conv_norm_out + SiLU and conv_out: the reconstruction */
void vae_head_only(ig_model *m) {
    const vae_net *n = NET(m);
    geo g = at_level(m, 0);
    int C0 = n->head_conv.cin;
    gn_fwd(m, &n->head_norm, A(n->hna), n->f_hm, n->f_hr, layer_input(m, n->L), g, C0, 1);
    conv_fwd(m, &n->head_conv, A(n->preda), A(n->hna), g);
}

/* the reconstruction and its L1 term per pixel (the io's first P0 rows); with_grad: the gradient
 * of the mean (x the loss scale) replaces the prediction */
static ig_status vae_head_fwd(ig_model *m, int with_grad, ig_err *err) {
    (void)err;
    const vae_net *n = NET(m);
    const vae_state *x = vae_of(m);
    vae_head_only(m);
    if (!x->has_target[m->slot]) return IG_OK;
    int P = (int)pixels(at_level(m, 0));
    float g = with_grad ? x->grad_scale[m->slot] / ((float)P * 3.0f) : 0.0f;
    ig_kernel_l1(m->be, ig_model_io_f32(m, 0), with_grad ? A(n->preda) : NULL, A(n->preda),
                 A(n->xa), P, 3, g);
    return IG_OK;
}

static ig_status vae_head_bwd(ig_model *m, ig_err *err) {
    (void)err;
    const vae_net *n = NET(m);
    geo g = at_level(m, 0);
    int C0 = n->head_conv.cin;
    void *t1 = S(n->t1);
    vae_of(m)->g = 0;
    conv_bwd(m, &n->head_conv, t1, A(n->preda), A(n->hna), g);
    ZERO(gcur(m), pixels(g) * (size_t)C0);
    gn_bwd(m, &n->head_norm, gcur(m), t1, n->f_hm, n->f_hr, layer_input(m, n->L), g, C0, 1);
    return IG_OK;
}

const ig_stage_hooks vae_stage = {.embed_forward = vae_embed_fwd,
                                  .layer_forward = vae_layer_fwd,
                                  .head_forward = vae_head_fwd,
                                  .head_backward = vae_head_bwd,
                                  .layer_recompute = vae_layer_fwd,
                                  .layer_backward = vae_layer_bwd,
                                  .embed_backward = vae_embed_bwd};

/* nothing crosses a stage boundary: the VAE runs on one stage (its objective refuses pipelines) */
void vae_stage_io(ig_model *m, int slot, ig_stage_io *io) {
    m->slot = slot;
    memset(io, 0, sizeof *io);
}
