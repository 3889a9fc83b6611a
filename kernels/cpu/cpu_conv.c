/* cpu_conv.c - 2-D convolution forward and backward on the CPU (backend.h: NHWC activations, OHWI
 * weights [OC, KH, KW, C], padding per side, any stride): the reference loops, and the fast path
 * through oneDNN's convolution primitives (the library of cpu_gemm.c, made for this).
 *
 * Reference: the sums as backend.h writes them, one output element at a time, in double, rounded
 * once (the input gradient gathers, for each input element, the outputs whose windows hold it).
 *
 * Fast. Threads as for the GEMMs: oneDNN is called with one OpenMP thread from chunks of the
 * context's pool, never with threads of its own, and its primitives are created inside the same
 * frame (a primitive fixes its thread count and its split of the work when it is created), so
 * each chunk is one single-threaded library call whose shape depends on the sizes only: the bits
 * are the same for any thread count. The chunks:
 *   forward: bands of output rows of one sample. A band is a convolution of its own over the input
 *     rows its windows read, with the padding of its place (the top band's pad_top, the bottom
 *     band's pad_bottom, none between), writing its rows of out in place.
 *   backward data: bands of input rows of one sample. The output rows whose windows reach the band
 *     are convolved back into a slab of scratch (the band and its halo: the rows the windows also
 *     reach, which the neighbouring bands own), and the band's rows are copied out of it.
 *   backward weights: blocks of output channels. A block's columns of dout are copied into a dense
 *     buffer, the library computes the block's filters' gradient over every pixel, and it is
 *     reordered to OHWI and added to dw: each element of dw is one chunk's, no partial sums.
 *   bias gradient: the column sums of dout (ig_cpu_column_sums_add, in double, in row order).
 * The weights go to the primitives in the format the library picks for them (blocked, for its JIT
 * kernels), reordered once per call; activations stay NHWC, which its kernels take as they are.
 * Primitive descriptors and primitives are kept by shape in the backend's state (ig_cpu_impl),
 * made on the thread that drives the backend before a call's chunks run: the bands of a call
 * share a few shapes, and a training step's convolutions are made once. Their scratchpads are
 * ours (user mode, one per worker), which makes one primitive safe to run on several threads at
 * once.
 *
 * fp32 act tensors; in bf16 the backend widens them for it (cpu_bf16.c).
 */
#include <stdatomic.h>

#include <oneapi/dnnl/dnnl.h>

#include "cpu_internal.h"

/* About CONV_PARTS chunks per call; bands of at least CONV_MIN_ROWS rows (a backward band's halo
 * is KH - 1 rows); weight-gradient blocks of a multiple of CONV_OC_ALIGN output channels; the
 * cache keeps CONV_CACHE primitives, the least recently used going first (a call holds at most
 * 2 CONV_PARTS + 4 at once). */
#define CONV_PARTS    16
#define CONV_MIN_ROWS 8
#define CONV_OC_ALIGN 16
#define CONV_CACHE    64

/* ---- reference ------------------------------------------------------------------------------- */

/* element offsets in inp / out / w */
static size_t at_in(const ig_conv2d_shape *s, int n, int y, int x, int c) {
    return (((size_t)n * s->H + y) * s->W + x) * s->C + c;
}
static size_t at_w(const ig_conv2d_shape *s, int o, int kh, int kw, int c) {
    return (((size_t)o * s->KH + kh) * s->KW + kw) * s->C + c;
}

void ig_cpu_ref_conv2d_forward(ig_backend *be, void *out_, const void *inp_, const void *w_,
                               const void *bias_, const ig_conv2d_shape *s) {
    (void)be;
    float *out = out_;
    const float *inp = inp_, *w = w_, *bias = bias_;
    int OH = ig_conv2d_out_h(s), OW = ig_conv2d_out_w(s);
    for (int n = 0; n < s->N; n++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                for (int o = 0; o < s->OC; o++) {
                    double acc = bias ? bias[o] : 0.0;
                    for (int kh = 0; kh < s->KH; kh++) {
                        int y = oh * s->stride - s->pad_top + kh;
                        if (y < 0 || y >= s->H) continue;
                        for (int kw = 0; kw < s->KW; kw++) {
                            int x = ow * s->stride - s->pad_left + kw;
                            if (x < 0 || x >= s->W) continue;
                            const float *xi = inp + at_in(s, n, y, x, 0);
                            const float *wi = w + at_w(s, o, kh, kw, 0);
                            for (int c = 0; c < s->C; c++) acc += (double)xi[c] * wi[c];
                        }
                    }
                    out[(((size_t)n * OH + oh) * OW + ow) * s->OC + o] = (float)acc;
                }
}

/* the output position whose window holds input position p at kernel tap k, or -1 */
static int out_of(int p, int k, int pad, int stride, int nout) {
    int t = p + pad - k;
    if (t < 0 || t % stride) return -1;
    t /= stride;
    return t < nout ? t : -1;
}

void ig_cpu_ref_conv2d_backward(ig_backend *be, void *dinp_, void *dw_, void *dbias_,
                                const void *dout_, const void *inp_, const void *w_,
                                const ig_conv2d_shape *s) {
    (void)be;
    float *dinp = dinp_, *dw = dw_, *dbias = dbias_;
    const float *dout = dout_, *inp = inp_, *w = w_;
    int OH = ig_conv2d_out_h(s), OW = ig_conv2d_out_w(s), OC = s->OC;
    if (dinp)
        for (int n = 0; n < s->N; n++)
            for (int y = 0; y < s->H; y++)
                for (int x = 0; x < s->W; x++)
                    for (int c = 0; c < s->C; c++) {
                        double acc = 0;
                        for (int kh = 0; kh < s->KH; kh++) {
                            int oh = out_of(y, kh, s->pad_top, s->stride, OH);
                            if (oh < 0) continue;
                            for (int kw = 0; kw < s->KW; kw++) {
                                int ow = out_of(x, kw, s->pad_left, s->stride, OW);
                                if (ow < 0) continue;
                                const float *g = dout + (((size_t)n * OH + oh) * OW + ow) * OC;
                                for (int o = 0; o < OC; o++)
                                    acc += (double)g[o] * w[at_w(s, o, kh, kw, c)];
                            }
                        }
                        dinp[at_in(s, n, y, x, c)] = (float)acc;
                    }
    for (int o = 0; o < OC; o++)
        for (int kh = 0; kh < s->KH; kh++)
            for (int kw = 0; kw < s->KW; kw++)
                for (int c = 0; c < s->C; c++) {
                    double acc = 0;
                    for (int n = 0; n < s->N; n++)
                        for (int oh = 0; oh < OH; oh++) {
                            int y = oh * s->stride - s->pad_top + kh;
                            if (y < 0 || y >= s->H) continue;
                            for (int ow = 0; ow < OW; ow++) {
                                int x = ow * s->stride - s->pad_left + kw;
                                if (x < 0 || x >= s->W) continue;
                                acc += (double)dout[(((size_t)n * OH + oh) * OW + ow) * OC + o] *
                                       inp[at_in(s, n, y, x, c)];
                            }
                        }
                    size_t i = at_w(s, o, kh, kw, c);
                    dw[i] = (float)(dw[i] + acc);
                }
    if (dbias)
        for (int o = 0; o < OC; o++) {
            double acc = 0;
            for (size_t r = 0; r < (size_t)s->N * OH * OW; r++) acc += dout[r * OC + o];
            dbias[o] = (float)(dbias[o] + acc);
        }
}

/* ---- fast: oneDNN's primitives, kept by shape ------------------------------------------------ */

enum { P_FWD, P_FWD_BIAS, P_BWD_DATA, P_BWD_W, P_REORDER };

/* A convolution's dims for a primitive: {N, C, IH, W, OC, OH, OW, KH, KW, stride, pad_top,
 * pad_left, pad_bottom, pad_right} */
#define CONV_DIMS 14

typedef struct conv_prim {
    int kind; /* P_*; -1: an empty entry */
    dnnl_dim_t dims[CONV_DIMS];
    dnnl_memory_desc_t md, md2; /* a reorder's source and destination (its key) */
    dnnl_primitive_desc_t pd, hint;
    dnnl_primitive_t prim;
    size_t scratchpad; /* bytes */
    uint64_t used;     /* last use, for eviction */
} conv_prim;

struct ig_cpu_conv_cache {
    dnnl_engine_t engine;
    conv_prim e[CONV_CACHE];
    uint64_t tick;
};

static void prim_clear(conv_prim *p) {
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
    if (p->hint) dnnl_primitive_desc_destroy(p->hint);
    memset(p, 0, sizeof *p);
    p->kind = -1;
}

void ig_cpu_conv_cache_free(ig_backend *be) {
    ig_cpu_impl *impl = be->impl;
    if (!impl || !impl->conv) return;
    for (int i = 0; i < CONV_CACHE; i++) prim_clear(&impl->conv->e[i]);
    if (impl->conv->engine) dnnl_engine_destroy(impl->conv->engine);
    ig_free(be->ctx, impl->conv);
    impl->conv = NULL;
}

static struct ig_cpu_conv_cache *cache_of(ig_backend *be, const char *what) {
    ig_cpu_impl *impl = be->impl;
    if (impl->conv) return impl->conv;
    struct ig_cpu_conv_cache *c = ig_calloc(be->ctx, 1, sizeof *c);
    if (!c) {
        ig_backend_raise(be, IG_ERR_NOMEM, "%s: out of memory for the primitives' cache", what);
        return NULL;
    }
    for (int i = 0; i < CONV_CACHE; i++) c->e[i].kind = -1;
    if (dnnl_engine_create(&c->engine, dnnl_cpu, 0) != dnnl_success) {
        ig_free(be->ctx, c);
        ig_backend_raise(be, IG_ERR_INTERNAL, "%s: oneDNN could not create its CPU engine", what);
        return NULL;
    }
    impl->conv = c;
    return c;
}

static void md_nhwc(dnnl_memory_desc_t *md, dnnl_dim_t n, dnnl_dim_t c, dnnl_dim_t h,
                    dnnl_dim_t w) {
    dnnl_dims_t d = {n, c, h, w};
    dnnl_memory_desc_init_by_tag(md, 4, d, dnnl_f32, dnnl_nhwc);
}

static void md_weights(dnnl_memory_desc_t *md, const dnnl_dim_t *d, dnnl_format_tag_t tag) {
    dnnl_dims_t w = {d[4], d[1], d[7], d[8]}; /* OC, C, KH, KW */
    dnnl_memory_desc_init_by_tag(md, 4, w, dnnl_f32, tag);
}

/* The convolution descriptor of kind over dims, the weights in the format the library picks */
static dnnl_status_t conv_desc(dnnl_convolution_desc_t *cd, int kind, const dnnl_dim_t *d) {
    dnnl_memory_desc_t src, dst, w, bias;
    md_nhwc(&src, d[0], d[1], d[2], d[3]);
    md_nhwc(&dst, d[0], d[4], d[5], d[6]);
    md_weights(&w, d, dnnl_format_tag_any);
    dnnl_dims_t b = {d[4]};
    dnnl_memory_desc_init_by_tag(&bias, 1, b, dnnl_f32, dnnl_a);
    dnnl_dims_t strides = {d[9], d[9]}, pl = {d[10], d[11]}, pr = {d[12], d[13]};
    switch (kind) {
    case P_FWD:
    case P_FWD_BIAS:
        return dnnl_convolution_forward_desc_init(
            cd, dnnl_forward_training, dnnl_convolution_direct, &src, &w,
            kind == P_FWD_BIAS ? &bias : NULL, &dst, strides, pl, pr);
    case P_BWD_DATA:
        return dnnl_convolution_backward_data_desc_init(cd, dnnl_convolution_direct, &src, &w, &dst,
                                                        strides, pl, pr);
    default:
        return dnnl_convolution_backward_weights_desc_init(cd, dnnl_convolution_direct, &src, &w,
                                                           NULL, &dst, strides, pl, pr);
    }
}

/* Makes entry p (kind, and dims or md and md2, filled in): its descriptor, primitive and
 * scratchpad size. */
static dnnl_status_t prim_make(conv_prim *p, dnnl_engine_t engine) {
    dnnl_primitive_attr_t attr = NULL;
    dnnl_status_t st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && p->kind == P_REORDER) {
        st = dnnl_reorder_primitive_desc_create(&p->pd, &p->md, engine, &p->md2, engine, attr);
    } else if (st == dnnl_success) {
        dnnl_convolution_desc_t cd;
        if (p->kind != P_FWD && p->kind != P_FWD_BIAS) { /* the backward needs the forward's */
            st = conv_desc(&cd, P_FWD, p->dims);
            if (st == dnnl_success)
                st = dnnl_primitive_desc_create(&p->hint, &cd, attr, engine, NULL);
        }
        if (st == dnnl_success) st = conv_desc(&cd, p->kind, p->dims);
        if (st == dnnl_success) st = dnnl_primitive_desc_create(&p->pd, &cd, attr, engine, p->hint);
    }
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st == dnnl_success) st = dnnl_primitive_create(&p->prim, p->pd);
    if (st == dnnl_success)
        p->scratchpad = dnnl_memory_desc_get_size(
            dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0));
    return st;
}

/* The primitive of kind over dims (a convolution: the weights in the library's format), or the
 * reorder from md to md2 (kind P_REORDER, dims NULL), from the cache or made now; NULL after
 * raising. Call inside a dnnl frame, on the thread that drives the backend. */
static conv_prim *prim_get(ig_backend *be, int kind, const dnnl_dim_t *dims,
                           const dnnl_memory_desc_t *md, const dnnl_memory_desc_t *md2,
                           const char *what) {
    struct ig_cpu_conv_cache *c = cache_of(be, what);
    if (!c) return NULL;
    conv_prim *victim = &c->e[0];
    for (int i = 0; i < CONV_CACHE; i++) {
        conv_prim *p = &c->e[i];
        if (p->kind == kind && (kind == P_REORDER ? dnnl_memory_desc_equal(&p->md, md) &&
                                                        dnnl_memory_desc_equal(&p->md2, md2)
                                                  : !memcmp(p->dims, dims, sizeof p->dims))) {
            p->used = ++c->tick;
            return p;
        }
        if (p->kind < 0 || p->used < victim->used) victim = p;
    }
    prim_clear(victim);
    victim->kind = kind;
    if (dims) memcpy(victim->dims, dims, sizeof victim->dims);
    if (md) victim->md = *md;
    if (md2) victim->md2 = *md2;
    dnnl_status_t st = prim_make(victim, c->engine);
    if (st != dnnl_success) {
        prim_clear(victim);
        ig_backend_raise(be, IG_ERR_INTERNAL,
                         "%s: oneDNN could not make a primitive (kind %d, %lldx%lldx%lldx%lld -> "
                         "%lld channels, %lldx%lld kernel, stride %lld): status %d",
                         what, kind, (long long)(dims ? dims[0] : 0),
                         (long long)(dims ? dims[2] : 0), (long long)(dims ? dims[3] : 0),
                         (long long)(dims ? dims[1] : 0), (long long)(dims ? dims[4] : 0),
                         (long long)(dims ? dims[7] : 0), (long long)(dims ? dims[8] : 0),
                         (long long)(dims ? dims[9] : 0), (int)st);
        return NULL;
    }
    victim->used = ++c->tick;
    return victim;
}

/* The md of p's execution argument arg. */
static const dnnl_memory_desc_t *arg_md(const conv_prim *p, int arg) {
    return dnnl_primitive_desc_query_md(p->pd, dnnl_query_exec_arg_md, arg);
}

/* Runs p on the calling thread with up to 4 arguments (arg ids and pointers) and its scratchpad;
 * 0, or -1 when the library failed. Call inside a dnnl frame. */
static int prim_run(const conv_prim *p, dnnl_engine_t engine, int nargs, const int *ids,
                    void *const *ptrs, void *scratchpad) {
    dnnl_exec_arg_t args[5];
    dnnl_memory_t mem[5] = {0};
    dnnl_stream_t stream = NULL;
    int n = 0, ok = 1;
    for (int i = 0; i < nargs && ok; i++, n++) {
        ok = dnnl_memory_create(&mem[n], arg_md(p, ids[i]), engine, ptrs[i]) == dnnl_success;
        args[n].arg = ids[i], args[n].memory = mem[n];
    }
    if (ok && p->scratchpad) {
        ok = dnnl_memory_create(&mem[n], arg_md(p, DNNL_ARG_SCRATCHPAD), engine, scratchpad) ==
             dnnl_success;
        args[n].arg = DNNL_ARG_SCRATCHPAD, args[n].memory = mem[n];
        n++;
    }
    if (ok) ok = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success;
    if (ok) ok = dnnl_primitive_execute(p->prim, stream, n, args) == dnnl_success;
    if (ok) ok = dnnl_stream_wait(stream) == dnnl_success;
    if (stream) dnnl_stream_destroy(stream);
    for (int i = 0; i < n; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    return ok ? 0 : -1;
}

/* Rows per band of `rows`: about CONV_PARTS chunks over the N samples, at least min_rows (a
 * function of the sizes only). */
static int band_rows(int rows, int N, int min_rows) {
    int per_sample = CONV_PARTS / N > 1 ? CONV_PARTS / N : 1;
    int r = (int)ig_cpu_chunk((size_t)rows, (size_t)per_sample, 1);
    r = r < min_rows ? min_rows : r;
    return r < rows ? r : rows;
}

/* The weights w (OHWI) reordered into md in a buffer of scratch (NULL after raising). */
static float *weights_as(ig_backend *be, const float *w, const dnnl_dim_t *dims,
                         const dnnl_memory_desc_t *md, const char *what) {
    dnnl_memory_desc_t plain;
    md_weights(&plain, dims, dnnl_ohwi);
    conv_prim *r = prim_get(be, P_REORDER, NULL, &plain, md, what);
    if (!r) return NULL;
    float *buf = ig_cpu_scratch(be, dnnl_memory_desc_get_size(md) + r->scratchpad, what);
    if (!buf) return NULL;
    int ids[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    void *ptrs[2] = {(void *)w, buf};
    void *pad = (char *)buf + dnnl_memory_desc_get_size(md);
    if (prim_run(r, ((ig_cpu_impl *)be->impl)->conv->engine, 2, ids, ptrs, pad) != 0) {
        ig_backend_raise(be, IG_ERR_INTERNAL, "%s: oneDNN failed to reorder the weights", what);
        ig_cpu_scratch_free(be, buf);
        return NULL;
    }
    return buf;
}

/* The weights in each format the bands' primitives picked (one, or a few: a band of another
 * shape may get another kernel of the library, which wants its own). */
typedef struct conv_weights {
    int n;
    dnnl_memory_desc_t md[CONV_PARTS];
    float *buf[CONV_PARTS];
} conv_weights;

/* the slot of md in ws, added when new */
static int weights_slot(conv_weights *ws, const dnnl_memory_desc_t *md) {
    for (int i = 0; i < ws->n; i++)
        if (dnnl_memory_desc_equal(&ws->md[i], md)) return i;
    ws->md[ws->n] = *md;
    return ws->n++;
}

/* every slot's buffer: w reordered into its format; 0 after raising */
static int weights_fill(ig_backend *be, conv_weights *ws, const float *w, const dnnl_dim_t *dims,
                        const char *what) {
    for (int i = 0; i < ws->n; i++)
        if (!(ws->buf[i] = weights_as(be, w, dims, &ws->md[i], what))) return 0;
    return 1;
}

static void weights_free(ig_backend *be, conv_weights *ws) {
    for (int i = 0; i < ws->n; i++)
        if (ws->buf[i]) ig_cpu_scratch_free(be, ws->buf[i]);
}

/* One band of rows: the window of its primitive (rows of the input, with the padding of its
 * place) and its rows of the output (forward) or of the input gradient (backward data). */
typedef struct conv_band {
    int in0, nin, pt, pb; /* input rows [in0, in0 + nin), the band's own padding */
    int out0, nout;       /* output rows [out0, out0 + nout) */
    int own0, own1;       /* backward data: the input rows the band writes */
    conv_prim *p;         /* NULL: no output row reaches the band (backward data) */
    int wi;               /* its weights' slot in the call's conv_weights */
} conv_band;

/* The window over output rows [o0, o1): the input rows it reads and its padding. */
static void band_window(conv_band *b, const ig_conv2d_shape *s, int o0, int o1) {
    int w0 = o0 * s->stride - s->pad_top, w1 = (o1 - 1) * s->stride - s->pad_top + s->KH;
    b->out0 = o0, b->nout = o1 - o0;
    b->in0 = w0 > 0 ? w0 : 0;
    b->pt = b->in0 - w0;
    int e = w1 < s->H ? w1 : s->H;
    b->nin = e - b->in0;
    b->pb = w1 - e;
}

static void band_dims(dnnl_dim_t *d, const ig_conv2d_shape *s, const conv_band *b, int N, int OC) {
    dnnl_dim_t v[CONV_DIMS] = {
        N,     s->C,  b->nin,    s->W,  OC,          b->nout, ig_conv2d_out_w(s),
        s->KH, s->KW, s->stride, b->pt, s->pad_left, b->pb,   s->pad_right};
    memcpy(d, v, sizeof v);
}

typedef struct conv_job {
    const ig_conv2d_shape *s;
    int OH, OW, nbands;
    conv_band band[CONV_PARTS];
    const float *inp, *bias, *dout;
    float *const *w; /* the weights, by slot (conv_band.wi) */
    float *out, *dinp, *dw;
    dnnl_engine_t engine;
    char *scratch;       /* per worker: worker_bytes */
    size_t worker_bytes; /* slab floats (backward data) then the library's scratchpad */
    size_t slab_bytes;
    int oc_block, nblocks; /* backward weights */
    conv_prim *bw[2];      /* backward weights: a full block, the last (shorter) one */
    conv_prim *bw_out[2];  /* their gradients reordered to OHWI */
    size_t dw_bytes[2];    /* the library's gradient of a block, in its format */
    atomic_int failed;
} conv_job;

static void fwd_chunk(void *arg, size_t b, size_t e, int worker) {
    conv_job *j = arg;
    const ig_conv2d_shape *s = j->s;
    ig_cpu_dnnl_frame f;
    ig_cpu_dnnl_enter(&f);
    for (size_t it = b; it < e; it++) {
        int n = (int)(it / (size_t)j->nbands);
        const conv_band *bd = &j->band[it % (size_t)j->nbands];
        int ids[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
        void *ptrs[4] = {(void *)(j->inp + at_in(s, n, bd->in0, 0, 0)), j->w[bd->wi],
                         j->out + (((size_t)n * j->OH + bd->out0) * j->OW) * s->OC,
                         (void *)j->bias};
        if (prim_run(bd->p, j->engine, j->bias ? 4 : 3, ids, ptrs,
                     j->scratch + (size_t)worker * j->worker_bytes) != 0)
            atomic_store(&j->failed, 1);
    }
    ig_cpu_dnnl_leave(&f);
}

void ig_cpu_conv2d_forward(ig_backend *be, void *out, const void *inp, const void *w,
                           const void *bias, const ig_conv2d_shape *s) {
    const char *what = "conv2d_forward";
    conv_job j = {.s = s,
                  .OH = ig_conv2d_out_h(s),
                  .OW = ig_conv2d_out_w(s),
                  .inp = inp,
                  .bias = bias,
                  .out = out};
    int R = band_rows(j.OH, s->N, 1);
    j.nbands = (j.OH + R - 1) / R;
    ig_cpu_dnnl_frame f;
    ig_cpu_dnnl_enter(&f);
    conv_weights ws = {0};
    size_t pad = 0;
    dnnl_dim_t d[CONV_DIMS];
    for (int i = 0; i < j.nbands; i++) {
        conv_band *bd = &j.band[i];
        band_window(bd, s, i * R, (i + 1) * R < j.OH ? (i + 1) * R : j.OH);
        band_dims(d, s, bd, 1, s->OC);
        bd->p = prim_get(be, bias ? P_FWD_BIAS : P_FWD, d, NULL, NULL, what);
        if (!bd->p) goto done;
        bd->wi = weights_slot(&ws, arg_md(bd->p, DNNL_ARG_WEIGHTS));
        pad = bd->p->scratchpad > pad ? bd->p->scratchpad : pad;
    }
    if (!weights_fill(be, &ws, w, d, what)) goto done;
    j.w = ws.buf;
    j.engine = ((ig_cpu_impl *)be->impl)->conv->engine;
    j.worker_bytes = (pad + 63) / 64 * 64;
    j.scratch = ig_cpu_scratch(be, (size_t)ig_ctx_threads(be->ctx) * j.worker_bytes + 64, what);
    if (!j.scratch) goto done;
    atomic_init(&j.failed, 0);
    ig_cpu_dnnl_leave(&f);
    ig_parallel_range(be->ctx, (size_t)s->N * j.nbands, 1, fwd_chunk, &j);
    ig_cpu_dnnl_enter(&f);
    if (atomic_load(&j.failed))
        ig_backend_raise(be, IG_ERR_INTERNAL, "%s: a oneDNN convolution failed", what);
    ig_cpu_scratch_free(be, j.scratch);
done:
    weights_free(be, &ws);
    ig_cpu_dnnl_leave(&f);
}

/* ---- backward data --------------------------------------------------------------------------- */

static void bwd_data_chunk(void *arg, size_t b, size_t e, int worker) {
    conv_job *j = arg;
    const ig_conv2d_shape *s = j->s;
    size_t row = (size_t)s->W * s->C;
    char *mine = j->scratch + (size_t)worker * j->worker_bytes;
    float *slab = (float *)mine;
    ig_cpu_dnnl_frame f;
    ig_cpu_dnnl_enter(&f);
    for (size_t it = b; it < e; it++) {
        int n = (int)(it / (size_t)j->nbands);
        const conv_band *bd = &j->band[it % (size_t)j->nbands];
        float *dst = j->dinp + at_in(s, n, 0, 0, 0);
        int lo = bd->own0, hi = bd->own1; /* the band's rows that the slab holds */
        if (bd->p) {
            int ids[3] = {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST};
            void *ptrs[3] = {slab, j->w[bd->wi],
                             (void *)(j->dout + (((size_t)n * j->OH + bd->out0) * j->OW) * s->OC)};
            if (prim_run(bd->p, j->engine, 3, ids, ptrs, mine + j->slab_bytes) != 0)
                atomic_store(&j->failed, 1);
            lo = lo > bd->in0 ? lo : bd->in0;
            hi = hi < bd->in0 + bd->nin ? hi : bd->in0 + bd->nin;
            if (hi > lo)
                memcpy(dst + (size_t)lo * row, slab + (size_t)(lo - bd->in0) * row,
                       (size_t)(hi - lo) * row * sizeof *slab);
            else
                lo = hi = bd->own0;
        } else {
            lo = hi = bd->own0;
        }
        /* rows of the band no window reaches: 0 */
        if (lo > bd->own0)
            memset(dst + (size_t)bd->own0 * row, 0, (size_t)(lo - bd->own0) * row * 4);
        if (bd->own1 > hi) memset(dst + (size_t)hi * row, 0, (size_t)(bd->own1 - hi) * row * 4);
    }
    ig_cpu_dnnl_leave(&f);
}

static void conv_backward_data(ig_backend *be, float *dinp, const float *dout, const float *w,
                               const ig_conv2d_shape *s) {
    const char *what = "conv2d_backward (input gradient)";
    conv_job j = {
        .s = s, .OH = ig_conv2d_out_h(s), .OW = ig_conv2d_out_w(s), .dout = dout, .dinp = dinp};
    int R = band_rows(s->H, s->N, CONV_MIN_ROWS);
    j.nbands = (s->H + R - 1) / R;
    ig_cpu_dnnl_frame f;
    ig_cpu_dnnl_enter(&f);
    conv_weights ws = {0};
    int maxrows = 0;
    size_t pad = 0;
    dnnl_dim_t d[CONV_DIMS];
    for (int i = 0; i < j.nbands; i++) {
        conv_band *bd = &j.band[i];
        memset(bd, 0, sizeof *bd);
        bd->own0 = i * R, bd->own1 = (i + 1) * R < s->H ? (i + 1) * R : s->H;
        /* the output rows whose windows reach [own0, own1): oh * stride - pad_top + KH - 1 >= own0
         * and oh * stride - pad_top <= own1 - 1 */
        int t0 = bd->own0 + s->pad_top - s->KH + 1, t1 = bd->own1 - 1 + s->pad_top;
        int o0 = t0 <= 0 ? 0 : (t0 + s->stride - 1) / s->stride;
        int o1 = t1 < 0 ? 0 : t1 / s->stride + 1;
        o1 = o1 < j.OH ? o1 : j.OH;
        if (o0 >= o1) continue; /* nothing reaches it: zeros */
        band_window(bd, s, o0, o1);
        band_dims(d, s, bd, 1, s->OC);
        bd->p = prim_get(be, P_BWD_DATA, d, NULL, NULL, what);
        if (!bd->p) goto done;
        bd->wi = weights_slot(&ws, arg_md(bd->p, DNNL_ARG_WEIGHTS));
        pad = bd->p->scratchpad > pad ? bd->p->scratchpad : pad;
        maxrows = bd->nin > maxrows ? bd->nin : maxrows;
    }
    if (!weights_fill(be, &ws, w, d, what)) goto done;
    j.w = ws.buf;
    j.engine = ((ig_cpu_impl *)be->impl)->conv->engine;
    j.slab_bytes = ((size_t)maxrows * s->W * s->C * sizeof(float) + 63) / 64 * 64;
    j.worker_bytes = j.slab_bytes + (pad + 63) / 64 * 64;
    j.scratch = ig_cpu_scratch(be, (size_t)ig_ctx_threads(be->ctx) * j.worker_bytes + 64, what);
    if (!j.scratch) goto done;
    atomic_init(&j.failed, 0);
    ig_cpu_dnnl_leave(&f);
    ig_parallel_range(be->ctx, (size_t)s->N * j.nbands, 1, bwd_data_chunk, &j);
    ig_cpu_dnnl_enter(&f);
    if (atomic_load(&j.failed))
        ig_backend_raise(be, IG_ERR_INTERNAL, "%s: a oneDNN convolution failed", what);
    ig_cpu_scratch_free(be, j.scratch);
done:
    weights_free(be, &ws);
    ig_cpu_dnnl_leave(&f);
}

/* ---- backward weights ------------------------------------------------------------------------ */

static void bwd_w_chunk(void *arg, size_t b, size_t e, int worker) {
    conv_job *j = arg;
    const ig_conv2d_shape *s = j->s;
    size_t pixels = (size_t)s->N * j->OH * j->OW, filt = (size_t)s->KH * s->KW * s->C;
    ig_cpu_dnnl_frame f;
    ig_cpu_dnnl_enter(&f);
    for (size_t blk = b; blk < e; blk++) {
        int last = blk + 1 == (size_t)j->nblocks && s->OC % j->oc_block;
        int oc0 = (int)blk * j->oc_block, ocn = last ? s->OC % j->oc_block : j->oc_block;
        /* the block's columns of dout, dense; the library's gradient; the same in OHWI */
        char *mine = j->scratch + (size_t)worker * j->worker_bytes;
        float *g = (float *)mine;
        char *dwl = mine + (pixels * (size_t)j->oc_block * 4 + 63) / 64 * 64;
        float *plain = (float *)(dwl + (j->dw_bytes[0] + 63) / 64 * 64);
        char *pad = (char *)plain + ((size_t)j->oc_block * filt * 4 + 63) / 64 * 64;
        for (size_t p = 0; p < pixels; p++)
            memcpy(g + p * ocn, j->dout + p * s->OC + oc0, (size_t)ocn * sizeof *g);
        int ids[3] = {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST};
        void *ptrs[3] = {(void *)j->inp, dwl, g};
        int ro[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
        void *rp[2] = {dwl, plain};
        if (prim_run(j->bw[last], j->engine, 3, ids, ptrs, pad) != 0 ||
            prim_run(j->bw_out[last], j->engine, 2, ro, rp, pad) != 0) {
            atomic_store(&j->failed, 1);
            continue;
        }
        float *dst = j->dw + (size_t)oc0 * filt;
        for (size_t i = 0; i < (size_t)ocn * filt; i++) dst[i] += plain[i];
    }
    ig_cpu_dnnl_leave(&f);
}

static void conv_backward_weights(ig_backend *be, float *dw, const float *dout, const float *inp,
                                  const ig_conv2d_shape *s) {
    const char *what = "conv2d_backward (weight gradient)";
    conv_job j = {.s = s,
                  .OH = ig_conv2d_out_h(s),
                  .OW = ig_conv2d_out_w(s),
                  .dout = dout,
                  .inp = inp,
                  .dw = dw};
    j.oc_block = (int)ig_cpu_chunk((size_t)s->OC, 8, CONV_OC_ALIGN);
    j.oc_block = j.oc_block < s->OC ? j.oc_block : s->OC;
    j.nblocks = (s->OC + j.oc_block - 1) / j.oc_block;
    ig_cpu_dnnl_frame f;
    ig_cpu_dnnl_enter(&f);
    size_t pad = 0, filt = (size_t)s->KH * s->KW * s->C;
    for (int k = 0; k < 1 + (s->OC % j.oc_block != 0); k++) {
        /* every sample at once: the input as it is (rows past the last window are read by none) */
        conv_band whole = {
            .in0 = 0, .nin = s->H, .pt = s->pad_top, .pb = s->pad_bottom, .out0 = 0, .nout = j.OH};
        dnnl_dim_t d[CONV_DIMS];
        band_dims(d, s, &whole, s->N, k ? s->OC % j.oc_block : j.oc_block);
        j.bw[k] = prim_get(be, P_BWD_W, d, NULL, NULL, what);
        if (!j.bw[k]) goto done;
        dnnl_memory_desc_t lib = *arg_md(j.bw[k], DNNL_ARG_DIFF_WEIGHTS), plain;
        md_weights(&plain, d, dnnl_ohwi);
        j.bw_out[k] = prim_get(be, P_REORDER, NULL, &lib, &plain, what);
        if (!j.bw_out[k]) goto done;
        j.dw_bytes[k] = dnnl_memory_desc_get_size(&lib);
        pad = j.bw[k]->scratchpad > pad ? j.bw[k]->scratchpad : pad;
        pad = j.bw_out[k]->scratchpad > pad ? j.bw_out[k]->scratchpad : pad;
    }
    if (j.dw_bytes[1] > j.dw_bytes[0]) j.dw_bytes[0] = j.dw_bytes[1];
    size_t pixels = (size_t)s->N * j.OH * j.OW;
    j.worker_bytes = (pixels * (size_t)j.oc_block * 4 + 63) / 64 * 64 +
                     (j.dw_bytes[0] + 63) / 64 * 64 +
                     ((size_t)j.oc_block * filt * 4 + 63) / 64 * 64 + (pad + 63) / 64 * 64;
    j.engine = ((ig_cpu_impl *)be->impl)->conv->engine;
    j.scratch = ig_cpu_scratch(be, (size_t)ig_ctx_threads(be->ctx) * j.worker_bytes + 64, what);
    if (!j.scratch) goto done;
    atomic_init(&j.failed, 0);
    ig_cpu_dnnl_leave(&f);
    ig_parallel_range(be->ctx, (size_t)j.nblocks, 1, bwd_w_chunk, &j);
    ig_cpu_dnnl_enter(&f);
    if (atomic_load(&j.failed))
        ig_backend_raise(be, IG_ERR_INTERNAL, "%s: a oneDNN convolution failed", what);
    ig_cpu_scratch_free(be, j.scratch);
done:
    ig_cpu_dnnl_leave(&f);
}

void ig_cpu_conv2d_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                            const void *inp, const void *w, const ig_conv2d_shape *s) {
    if (dinp) conv_backward_data(be, dinp, dout, w, s);
    conv_backward_weights(be, dw, dout, inp, s);
    if (dbias)
        ig_cpu_column_sums_add(be, dbias, dout, s->N * ig_conv2d_out_h(s) * ig_conv2d_out_w(s),
                               s->OC);
}
