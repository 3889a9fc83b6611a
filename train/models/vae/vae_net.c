/* vae_net.c - the VAE as a list of its pieces (vae.h's vae_net): one walk over diffusers'
 * AutoencoderKL gives each convolution, GroupNorm and attention its tensors in the table's order
 * (the parameter buffer's: the encoder's conv_in, the blocks as the stage driver's layers, the
 * decoder's head) with diffusers' names and PyTorch's default initialisation, and a second walk
 * gives each activation its place, so the tensor table, the memory plan and the passes read one
 * description.
 *
 * Initial values as torch.nn's defaults (what diffusers' AutoencoderKL() starts from): a
 * convolution's or a linear layer's weight and bias uniform in +-1/sqrt(fan_in) (kaiming_uniform
 * with a = sqrt(5) gives that bound for the weight), GroupNorm's weight 1 and bias 0. AdamW's
 * weight decay applies to the convolutions' and linear layers' weights, not to biases and norms.
 *
 * Activations of a micro-batch of B clips of T pixels (P0 = B T pixels at full resolution, P_k =
 * P0 / 4^k at level k; the frames' sides are multiples of 2^(nb-1), so each level's count is
 * exact): kept per slot the frames, the noise, conv_in's output, every layer's output (the
 * boundary: the next layer's input) and the head's; a layer's inner activations are IG_ACT_LAYER
 * (kept unless train.recompute is full), the attention's output and log-sum-exp IG_ACT_CORE (kept
 * only without recomputation: selective recomputes the attention core). A model opened for
 * inference places everything but the boundaries as full recomputation does: one layer's worth,
 * reused. GroupNorm statistics are [frames, groups] with at most P_lat frames (a frame has a
 * latent pixel at least). Unless the model is for inference, the scratch holds the backward's
 * gradient twice and three temporaries (one a shortcut's output in the forward), each the size of
 * the largest activation.
 */
#include "vae.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- the walk over the tensors --------------------------------------------------------------- */

typedef struct walk {
    vae_net *n;
    ig_spec_list *tb; /* NULL: indices only */
    ig_place place;
    int layer;
} walk;

enum { T_CONV_W, T_BIAS, T_NORM_W, T_NORM_B, T_LINEAR_W };

enum { NAME_CAP = 96 }; /* ig_tensor_spec.name's */

/* prefix.tail into name[NAME_CAP] (diffusers' names are far shorter) */
static void sub(char *name, const char *prefix, const char *tail) {
    if (snprintf(name, NAME_CAP, "%s.%s", prefix, tail) >= NAME_CAP) name[NAME_CAP - 1] = '\0';
}

/* the next tensor: its index; a spec when tb is given (fan_in: its initialisation's) */
static int tensor(walk *w, const char *name, int kind, int64_t rows, int64_t cols, int64_t fan_in) {
    int i = w->n->n_tensors++;
    if (!w->tb) return i;
    ig_tensor_spec s = {.ndim = kind == T_CONV_W || kind == T_LINEAR_W ? 2 : 1,
                        .shape = {rows, cols},
                        .place = w->place,
                        .split_dim = -1,
                        .decay = kind == T_CONV_W || kind == T_LINEAR_W,
                        .init = kind == T_NORM_W   ? IG_INIT_ONE
                                : kind == T_NORM_B ? IG_INIT_ZERO
                                                   : IG_INIT_UNIFORM,
                        .std = (float)(1.0 / sqrt((double)fan_in))};
    ig_spec_add(w->tb, name, w->layer, &s); /* the name holds no '%' */
    return i;
}

static void conv(walk *w, vae_conv *c, const char *prefix, int cin, int cout, int k, int stride,
                 int pad_end) {
    char name[NAME_CAP];
    *c = (vae_conv){.cin = cin, .cout = cout, .k = k, .stride = stride, .pad_end = pad_end};
    sub(name, prefix, "weight");
    c->w = tensor(w, name, T_CONV_W, cout, (int64_t)k * k * cin, (int64_t)k * k * cin);
    sub(name, prefix, "bias");
    c->b = tensor(w, name, T_BIAS, cout, 1, (int64_t)k * k * cin);
}

static void norm(walk *w, vae_norm *g, const char *prefix, int C) {
    char name[NAME_CAP];
    sub(name, prefix, "weight");
    g->w = tensor(w, name, T_NORM_W, C, 1, 1);
    sub(name, prefix, "bias");
    g->b = tensor(w, name, T_NORM_B, C, 1, 1);
}

static void resnet(walk *w, vae_resnet *r, const char *prefix, int cin, int cout) {
    char name[NAME_CAP];
    r->cin = cin, r->cout = cout;
    sub(name, prefix, "norm1");
    norm(w, &r->n1, name, cin);
    sub(name, prefix, "conv1");
    conv(w, &r->c1, name, cin, cout, 3, 1, 0);
    sub(name, prefix, "norm2");
    norm(w, &r->n2, name, cout);
    sub(name, prefix, "conv2");
    conv(w, &r->c2, name, cout, cout, 3, 1, 0);
    r->sc.w = r->sc.b = -1;
    sub(name, prefix, "conv_shortcut");
    if (cin != cout) conv(w, &r->sc, name, cin, cout, 1, 1, 0);
}

static void attention(walk *w, vae_attn *a, const char *prefix, int C) {
    char name[NAME_CAP];
    a->C = C;
    sub(name, prefix, "group_norm");
    norm(w, &a->gn, name, C);
    sub(name, prefix, "to_qkv.weight"); /* to_q | to_k | to_v (vae_hf.c) */
    a->qkv_w = tensor(w, name, T_LINEAR_W, 3 * (int64_t)C, C, C);
    sub(name, prefix, "to_qkv.bias");
    a->qkv_b = tensor(w, name, T_BIAS, 3 * (int64_t)C, 1, C);
    sub(name, prefix, "to_out.0.weight");
    a->out_w = tensor(w, name, T_LINEAR_W, C, C, C);
    sub(name, prefix, "to_out.0.bias");
    a->out_b = tensor(w, name, T_BIAS, C, 1, C);
}

/* the mid block (resnet, attention, resnet) of the encoder or the decoder */
static void mid(walk *w, vae_layer *y, const char *side, int C) {
    char name[NAME_CAP];
    y->nres = 2;
    snprintf(name, sizeof name, "%s.mid_block.resnets.0", side);
    resnet(w, &y->res[0], name, C, C);
    snprintf(name, sizeof name, "%s.mid_block.attentions.0", side);
    attention(w, &y->attn, name, C);
    snprintf(name, sizeof name, "%s.mid_block.resnets.1", side);
    resnet(w, &y->res[1], name, C, C);
}

static void build(const ig_model_config *c, vae_net *n, ig_spec_list *tb) {
    const vae_shape d = vae_own(c);
    memset(n, 0, sizeof *n);
    int nb = d.nb, top = nb - 1, C = d.ch[top], lat = d.latent;
    n->nb = nb, n->L = 2 * nb + 2, n->lat = lat, n->G = d.groups;
    walk w = {n, tb, IG_PLACE_FIRST, 0};
    char name[NAME_CAP];
    conv(&w, &n->conv_in, "encoder.conv_in", 3, d.ch[0], 3, 1, 0);
    w.place = IG_PLACE_LAYER;
    for (int l = 0; l < nb; l++) { /* the encoder's down blocks */
        vae_layer *y = &n->layer[l];
        w.layer = l;
        y->kind = VAE_DOWN, y->level = l, y->out_level = l < top ? l + 1 : l;
        y->cin = l ? d.ch[l - 1] : d.ch[0], y->cout = d.ch[l], y->nres = d.layers;
        for (int j = 0; j < d.layers; j++) {
            snprintf(name, sizeof name, "encoder.down_blocks.%d.resnets.%d", l, j);
            resnet(&w, &y->res[j], name, j ? y->cout : y->cin, y->cout);
        }
        y->resample.w = y->resample.b = -1;
        snprintf(name, sizeof name, "encoder.down_blocks.%d.downsamplers.0.conv", l);
        if (l < top) conv(&w, &y->resample, name, y->cout, y->cout, 3, 2, 1);
    }
    vae_layer *em = &n->layer[nb], *dm = &n->layer[nb + 1];
    w.layer = nb;
    em->kind = VAE_ENC_MID, em->level = em->out_level = top, em->cin = C, em->cout = lat;
    mid(&w, em, "encoder", C);
    norm(&w, &em->nout, "encoder.conv_norm_out", C);
    conv(&w, &em->conv_out, "encoder.conv_out", C, 2 * lat, 3, 1, 0);
    conv(&w, &em->quant, "quant_conv", 2 * lat, 2 * lat, 1, 1, 0);
    em->resample.w = em->resample.b = -1;
    w.layer = nb + 1;
    dm->kind = VAE_DEC_MID, dm->level = dm->out_level = top, dm->cin = lat, dm->cout = C;
    conv(&w, &dm->post_quant, "post_quant_conv", lat, lat, 1, 1, 0);
    conv(&w, &dm->conv_in, "decoder.conv_in", lat, C, 3, 1, 0);
    mid(&w, dm, "decoder", C);
    dm->resample.w = dm->resample.b = -1;
    for (int i = 0; i < nb; i++) { /* the decoder's up blocks, channels reversed */
        vae_layer *y = &n->layer[nb + 2 + i];
        w.layer = nb + 2 + i;
        int rc = d.ch[top - i], prev = i ? d.ch[top - i + 1] : rc;
        y->kind = VAE_UP, y->level = top - i, y->out_level = i < top ? top - i - 1 : 0;
        y->cin = prev, y->cout = rc, y->nres = d.layers + 1;
        for (int j = 0; j < y->nres; j++) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.resnets.%d", i, j);
            resnet(&w, &y->res[j], name, j ? rc : prev, rc);
        }
        y->resample.w = y->resample.b = -1;
        snprintf(name, sizeof name, "decoder.up_blocks.%d.upsamplers.0.conv", i);
        if (i < top) conv(&w, &y->resample, name, rc, rc, 3, 1, 0);
    }
    w.place = IG_PLACE_LAST, w.layer = 0;
    norm(&w, &n->head_norm, "decoder.conv_norm_out", d.ch[0]);
    conv(&w, &n->head_conv, "decoder.conv_out", d.ch[0], 3, 3, 1, 0);
}

void vae_net_build(const ig_model_config *c, vae_net *n) {
    build(c, n, NULL);
}

size_t vae_net_tensors(const ig_model_config *c, const ig_part *p, ig_tensor_spec *out,
                       size_t cap) {
    (void)p; /* a whole model: check_layout refuses any split */
    vae_net n;
    ig_spec_list tb = {out, 0, cap};
    build(c, &n, &tb);
    return tb.n;
}

/* ---- FLOPs ----------------------------------------------------------------------------------- */

/* 2 per multiply-add of a convolution at its output's pixels (level), per input pixel */
static double conv_flops(const vae_conv *v, int level) {
    if (v->w < 0) return 0;
    return 2.0 * v->k * v->k * v->cin * v->cout / pow(4.0, level);
}

static double resnet_flops(const vae_resnet *r, int level) {
    return conv_flops(&r->c1, level) + conv_flops(&r->c2, level) + conv_flops(&r->sc, level);
}

/* the convolutions and the attention's projections (q | k | v and out: 4 C^2 multiply-adds a
 * position); its scores and weighted sum (4 h w C a position) depend on the frame's size, which
 * a pixel count does not say, and are left out (at 256x256 frames of SD's VAE, 1.3% of the
 * encoder's FLOPs) */
double vae_net_flops(const ig_model_config *c) {
    vae_net n;
    build(c, &n, NULL);
    double f = conv_flops(&n.conv_in, 0) + conv_flops(&n.head_conv, 0);
    for (int l = 0; l < n.L; l++) {
        const vae_layer *y = &n.layer[l];
        for (int j = 0; j < y->nres; j++) f += resnet_flops(&y->res[j], y->level);
        if (y->kind == VAE_ENC_MID || y->kind == VAE_DEC_MID)
            f += 8.0 * y->attn.C * y->attn.C / pow(4.0, y->level);
        if (y->kind == VAE_ENC_MID)
            f += conv_flops(&y->conv_out, y->level) + conv_flops(&y->quant, y->level);
        if (y->kind == VAE_DEC_MID)
            f += conv_flops(&y->post_quant, y->level) + conv_flops(&y->conv_in, y->level);
        f += conv_flops(&y->resample, y->out_level);
    }
    return f;
}

/* ---- the activations ------------------------------------------------------------------------- */

/* A layout being made. For inference (a forward only) the pieces - a resnet, the attention, a
 * resampling conv, the encoder's tail, the decoder's conv_in, the head - are what the region is
 * reused by: each piece's insides start over at the region's start, and its output goes to one of
 * two stream buffers in turn (its input is in the other), so a forward holds two streams and the
 * largest piece's insides instead of every layer's output and the largest layer's insides. */
typedef struct lay {
    ig_act_plan pl;
    uint64_t P0, frames; /* pixels at level 0; the most frames (the statistics' rows) */
    int G;
    uint64_t big;
    int infer;          /* the inference layout */
    uint64_t stream[2]; /* its two stream buffers (slot places) */
    int par;            /* the one the last output went to */
    uint64_t smax;      /* the largest output (the streams' size) */
} lay;

static uint64_t px(const lay *a, int level) {
    return a->P0 >> (2 * level);
}

static uint64_t act(lay *a, ig_act_kind k, uint64_t n) {
    if (n > a->big) a->big = n;
    return ig_act_place(&a->pl, k, n);
}

/* a piece's output: of kind k (training), or the next stream (inference) */
static uint64_t out_act(lay *a, ig_act_kind k, uint64_t n) {
    if (!a->infer) return act(a, k, n);
    if (n > a->big) a->big = n;
    if (n > a->smax) a->smax = n;
    a->par ^= 1;
    return a->stream[a->par];
}

/* the next piece of a forward for inference: its insides from the region's start */
static void piece(lay *a) {
    if (a->infer) ig_act_next_layer(&a->pl);
}

static uint64_t stat(lay *a, ig_act_kind k) {
    return ig_act_place_f32(&a->pl, k, a->frames * (uint64_t)a->G);
}

/* a resnet's activations; its output of kind ko (the layer's boundary, or inside the layer) */
static void place_resnet(lay *a, vae_resnet *r, int level, ig_act_kind ko) {
    uint64_t P = px(a, level);
    const ig_act_kind K = IG_ACT_LAYER;
    piece(a);
    r->n1a = act(a, K, P * (uint64_t)r->cin);
    r->f_m1 = stat(a, K), r->f_r1 = stat(a, K);
    r->c1a = act(a, K, P * (uint64_t)r->cout);
    r->n2a = act(a, K, P * (uint64_t)r->cout);
    r->f_m2 = stat(a, K), r->f_r2 = stat(a, K);
    r->sca = a->infer && r->sc.w >= 0 ? act(a, K, P * (uint64_t)r->cout) : 0;
    r->outa = out_act(a, ko, P * (uint64_t)r->cout);
}

static void place_attn(lay *a, vae_attn *t, int level) {
    uint64_t P = px(a, level), C = (uint64_t)t->C;
    const ig_act_kind K = IG_ACT_LAYER;
    piece(a);
    t->gna = act(a, K, P * C);
    t->f_m = stat(a, K), t->f_r = stat(a, K);
    t->qkva = act(a, K, 3 * P * C);
    t->atta = act(a, IG_ACT_CORE, P * C);
    t->f_lse = ig_act_place_f32(&a->pl, IG_ACT_CORE, P); /* one head: a value per position */
    t->outa = out_act(a, K, P * C);
}

static void place_layer(lay *a, vae_layer *y, int lat) {
    const ig_act_kind K = IG_ACT_LAYER, BOUND = IG_ACT_BOUNDARY;
    uint64_t P = px(a, y->level);
    ig_act_next_layer(&a->pl);
    switch (y->kind) {
    case VAE_DOWN:
        for (int j = 0; j < y->nres; j++)
            place_resnet(a, &y->res[j], y->level,
                         j == y->nres - 1 && y->resample.w < 0 ? BOUND : K);
        piece(a);
        y->outa = y->resample.w < 0 ? y->res[y->nres - 1].outa
                                    : out_act(a, BOUND, px(a, y->out_level) * (uint64_t)y->cout);
        break;
    case VAE_ENC_MID:
        place_resnet(a, &y->res[0], y->level, K);
        place_attn(a, &y->attn, y->level);
        place_resnet(a, &y->res[1], y->level, K);
        piece(a);
        y->nouta = act(a, K, P * (uint64_t)y->attn.C);
        y->f_mo = stat(a, K), y->f_ro = stat(a, K);
        y->coa = act(a, K, P * 2 * (uint64_t)lat);
        y->momenta = act(a, K, P * 2 * (uint64_t)lat);
        y->outa = out_act(a, BOUND, P * (uint64_t)lat); /* z */
        break;
    case VAE_DEC_MID:
        piece(a);
        y->pqa = act(a, K, P * (uint64_t)lat);
        y->cia = out_act(a, K, P * (uint64_t)y->cout); /* the mid block's input */
        place_resnet(a, &y->res[0], y->level, K);
        place_attn(a, &y->attn, y->level);
        place_resnet(a, &y->res[1], y->level, BOUND);
        y->outa = y->res[1].outa;
        break;
    default: /* VAE_UP */
        for (int j = 0; j < y->nres; j++)
            place_resnet(a, &y->res[j], y->level,
                         j == y->nres - 1 && y->resample.w < 0 ? BOUND : K);
        if (y->resample.w >= 0) {
            uint64_t P4 = px(a, y->out_level) * (uint64_t)y->cout;
            piece(a);
            y->upa = act(a, K, P4);
            y->outa = out_act(a, BOUND, P4);
        } else {
            y->outa = y->res[y->nres - 1].outa;
        }
    }
}

/* every place of n into a (whose plan starts empty), the slot's inputs first */
static void place_all(const ig_model_config *c, vae_net *n, lay *a) {
    int top = n->nb - 1, lat = n->lat, C0 = vae_own(c).ch[0];
    uint64_t P0 = a->P0, *s = &a->pl.act;
    n->xa = ig_act_take(s, P0 * 3);
    n->epsa = ig_act_take(s, px(a, top) * (uint64_t)lat);
    if (a->infer) a->stream[0] = ig_act_take(s, a->smax), a->stream[1] = ig_act_take(s, a->smax);
    n->e0a = out_act(a, IG_ACT_BOUNDARY, P0 * (uint64_t)C0);
    for (int l = 0; l < n->L; l++) place_layer(a, &n->layer[l], lat);
    ig_act_next_layer(&a->pl);
    if (a->infer) { /* the head's insides in the region too */
        n->hna = act(a, IG_ACT_LAYER, P0 * (uint64_t)C0);
        n->f_hm = stat(a, IG_ACT_LAYER), n->f_hr = stat(a, IG_ACT_LAYER);
    } else {
        n->hna = ig_act_take(s, P0 * (uint64_t)C0);
        n->f_hm = ig_act_take(&a->pl.f32, a->frames * (uint64_t)a->G);
        n->f_hr = ig_act_take(&a->pl.f32, a->frames * (uint64_t)a->G);
    }
    n->preda = ig_act_take(s, P0 * 3);
    if (P0 * 3 > a->big) a->big = P0 * 3;
}

void vae_net_layout(const ig_model_config *c, const ig_part *p, int B, int T, vae_net *n,
                    ig_act_sizes *out) {
    vae_net_build(c, n);
    lay a = {.pl = {.recompute = p->inference ? IG_RECOMPUTE_FULL : p->recompute},
             .P0 = (uint64_t)B * (uint64_t)T,
             .G = n->G,
             .infer = p->inference};
    a.frames = px(&a, n->nb - 1) ? px(&a, n->nb - 1) : 1;
    lay first = a;
    if (a.infer) { /* the streams' size first: the largest output */
        place_all(c, n, &first);
        a.smax = first.smax;
    }
    place_all(c, n, &a);
    n->big = a.big;
    out->act = a.pl.act;
    out->f32 = a.pl.f32;
    out->i32 = 0;
    out->io_f32 = a.P0 + px(&a, n->nb - 1); /* the L1 term's rows (pixels), then the KL term's */
    /* the backward's buffers, and t1 (a shortcut's output in a training forward) */
    uint64_t sa = a.pl.region_act, bw = p->inference ? 0 : a.big;
    n->t1 = ig_act_take(&sa, bw);
    n->ga[0] = ig_act_take(&sa, bw);
    n->ga[1] = ig_act_take(&sa, bw);
    n->t2 = ig_act_take(&sa, bw);
    n->t3 = ig_act_take(&sa, bw);
    out->scratch_act = sa;
    out->scratch_f32 = a.pl.region_f32;
}
