/* cuda_conv.cu - 2-D convolution forward and backward on the GPU through cuDNN (backend.h: NHWC
 * activations, OHWI weights = cuDNN's NHWC filter layout "KRSC", padding per side, any stride).
 *
 * cuDNN's convolution API (cudnnConvolutionForward, ...BackwardData, ...BackwardFilter: kept in
 * cuDNN 9 beside the graph API, and enough for a plain convolution) with NHWC tensor and filter
 * descriptors: no transposition on our side. fp32 runs without TF32 (CUDNN_FMA_MATH, as the
 * GEMMs run cuBLASLt without it), bf16 on the tensor cores with fp32 accumulation. The
 * algorithms come from cuDNN's heuristics (cudnnGet*Algorithm_v7: a function of the shape, never
 * a timing, so a run picks the same ones every time), the first that needs at most CONV_WS_MAX of
 * workspace and, for the backward, is deterministic (the backend's promise: the same bits on
 * every run).
 *
 * cuDNN's padding is symmetric. An asymmetric one (the VAE's downsample pads only the bottom and
 * the right) is done by hand: the input copied into a zero-padded buffer in scratch (pad_kernel)
 * and convolved without padding; the input gradient is computed into such a buffer and its
 * interior copied out (crop_kernel).
 *
 * The forward's bias is added by bias_kernel after the convolution (the output rounded to the act
 * type once by cuDNN, once more with the bias: bf16 within its tolerance). The backward: dinp =
 * BackwardData (beta 0: overwritten), dw += BackwardFilter (beta 1: added in fp32 to what dw
 * holds), dbias += the deterministic column sums of dout (cu_column_sums_add).
 *
 * The handle is made at the first convolution (cudnnCreate loads cuDNN's libraries) and bound to
 * the backend's stream; descriptors are made per call (cheap host objects).
 */
#include <cudnn.h>

#include "cuda_internal.h"

#define CONV_WS_MAX ((size_t)512 << 20) /* workspace an algorithm may take at most */

/* ---- errors and the handle ------------------------------------------------------------------- */

static int dnn_ok(ig_backend *be, cudnnStatus_t s, const char *what) {
    if (s == CUDNN_STATUS_SUCCESS) return 1;
    ig_backend_raise(be, s == CUDNN_STATUS_ALLOC_FAILED ? IG_ERR_NOMEM : IG_ERR_INTERNAL,
                     "%s: cuDNN: %s", what, cudnnGetErrorString(s));
    return 0;
}

static cudnnHandle_t handle_of(ig_backend *be, const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    if (cu->cudnn) return (cudnnHandle_t)cu->cudnn;
    cudnnHandle_t h = NULL;
    if (!dnn_ok(be, cudnnCreate(&h), what)) return NULL;
    if (!dnn_ok(be, cudnnSetStream(h, cu->stream), what)) {
        cudnnDestroy(h);
        return NULL;
    }
    cu->cudnn = h;
    return h;
}

void cu_conv_free(cu_impl *cu) {
    if (cu->cudnn) cudnnDestroy((cudnnHandle_t)cu->cudnn);
    cu->cudnn = NULL;
}

/* ---- padding by hand ------------------------------------------------------------------------- */

/* xp [N, Hp, Wp, C] = x [N, H, W, C] placed at (pt, pl), zeros around it */
template <typename T>
__global__ void pad_kernel(T *xp, const T *x, int N, int H, int W, int C, int pt, int pl, int Hp,
                           int Wp) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * Hp * Wp * C) return;
    int c = (int)(i % C);
    size_t r = i / C;
    int xw = (int)(r % Wp) - pl, yh = (int)(r / Wp % Hp) - pt, n = (int)(r / Wp / Hp);
    xp[i] = yh >= 0 && yh < H && xw >= 0 && xw < W ? x[(((size_t)n * H + yh) * W + xw) * C + c]
                                                   : from_f<T>(0.0f);
}

/* x [N, H, W, C] = the interior of xp [N, Hp, Wp, C] at (pt, pl) */
template <typename T>
__global__ void crop_kernel(T *x, const T *xp, int N, int H, int W, int C, int pt, int pl, int Hp,
                            int Wp) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * H * W * C) return;
    int c = (int)(i % C);
    size_t r = i / C;
    int xw = (int)(r % W), yh = (int)(r / W % H), n = (int)(r / W / H);
    x[i] = xp[(((size_t)n * Hp + yh + pt) * Wp + xw + pl) * C + c];
}

/* out[i] += bias[i % OC], in fp32, rounded once */
template <typename T> __global__ void bias_kernel(T *out, const T *bias, size_t n, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = from_f<T>(to_f(out[i]) + to_f(bias[i % (size_t)OC]));
}

/* ---- descriptors ----------------------------------------------------------------------------- */

/* A call's descriptors: input x (padded by hand when asym), filter w, output y, convolution. */
typedef struct conv_desc {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    int asym;   /* the padding is done by hand: x is [N, Hp, Wp, C] */
    int Hp, Wp; /* the input's size as cuDNN sees it */
    int OH, OW;
} conv_desc;

static void desc_free(conv_desc *d) {
    if (d->x) cudnnDestroyTensorDescriptor(d->x);
    if (d->y) cudnnDestroyTensorDescriptor(d->y);
    if (d->w) cudnnDestroyFilterDescriptor(d->w);
    if (d->conv) cudnnDestroyConvolutionDescriptor(d->conv);
}

/* 1, or 0 after raising (d is then freed) */
static int desc_make(ig_backend *be, conv_desc *d, const ig_conv2d_shape *s, const char *what) {
    memset(d, 0, sizeof *d);
    cudnnDataType_t t = be->act_type == IG_ACT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    d->asym = s->pad_top != s->pad_bottom || s->pad_left != s->pad_right;
    d->Hp = d->asym ? s->H + s->pad_top + s->pad_bottom : s->H;
    d->Wp = d->asym ? s->W + s->pad_left + s->pad_right : s->W;
    d->OH = ig_conv2d_out_h(s), d->OW = ig_conv2d_out_w(s);
    int ph = d->asym ? 0 : s->pad_top, pw = d->asym ? 0 : s->pad_left;
    int ok =
        dnn_ok(be, cudnnCreateTensorDescriptor(&d->x), what) &&
        dnn_ok(be, cudnnCreateTensorDescriptor(&d->y), what) &&
        dnn_ok(be, cudnnCreateFilterDescriptor(&d->w), what) &&
        dnn_ok(be, cudnnCreateConvolutionDescriptor(&d->conv), what) &&
        dnn_ok(be, cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NHWC, t, s->N, s->C, d->Hp, d->Wp),
               what) &&
        dnn_ok(be,
               cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NHWC, t, s->N, s->OC, d->OH, d->OW),
               what) &&
        dnn_ok(be,
               cudnnSetFilter4dDescriptor(d->w, t, CUDNN_TENSOR_NHWC, s->OC, s->C, s->KH, s->KW),
               what) &&
        dnn_ok(be,
               cudnnSetConvolution2dDescriptor(d->conv, ph, pw, s->stride, s->stride, 1, 1,
                                               CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
               what) &&
        dnn_ok(be,
               cudnnSetConvolutionMathType(
                   d->conv, be->act_type == IG_ACT_BF16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
               what);
    if (!ok) desc_free(d);
    return ok;
}

/* The scratch of a call: the padded input and its gradient (asym) and the workspace. */
typedef struct conv_scratch {
    void *xp, *dxp, *ws;
} conv_scratch;

static int carve(ig_backend *be, conv_scratch *sc, const conv_desc *d, const ig_conv2d_shape *s,
                 int padded, int dpadded, size_t ws, const char *what) {
    size_t pb = cu_round256((size_t)s->N * d->Hp * d->Wp * s->C * ig_backend_act_size(be));
    size_t total = (padded ? pb : 0) + (dpadded ? pb : 0) + cu_round256(ws) + 256;
    char *p = (char *)cu_scratch(be, total, what);
    if (!p) return 0;
    sc->xp = padded ? p : NULL, p += padded ? pb : 0;
    sc->dxp = dpadded ? p : NULL, p += dpadded ? pb : 0;
    sc->ws = p;
    return 1;
}

/* x padded into sc->xp (when d->asym); returns the input cuDNN reads */
static const void *padded_input(ig_backend *be, const conv_desc *d, const conv_scratch *sc,
                                const void *x, const ig_conv2d_shape *s, const char *what) {
    if (!d->asym) return x;
    cu_impl *cu = (cu_impl *)be->impl;
    size_t n = (size_t)s->N * d->Hp * d->Wp * s->C;
    if (be->act_type == IG_ACT_BF16)
        pad_kernel<bf16><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (bf16 *)sc->xp, (const bf16 *)x, s->N, s->H, s->W, s->C, s->pad_top, s->pad_left, d->Hp,
            d->Wp);
    else
        pad_kernel<float><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
            (float *)sc->xp, (const float *)x, s->N, s->H, s->W, s->C, s->pad_top, s->pad_left,
            d->Hp, d->Wp);
    return cu_launched(be, what) ? sc->xp : NULL;
}

/* ---- forward --------------------------------------------------------------------------------- */

void cu_conv2d_forward(ig_backend *be, void *out, const void *inp, const void *w, const void *bias,
                       const ig_conv2d_shape *s) {
    cu_impl *cu = cu_enter(be);
    const char *what = "conv2d_forward";
    cudnnHandle_t h = handle_of(be, what);
    conv_desc d;
    if (!h || !desc_make(be, &d, s, what)) return;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int got = 0, pick = -1;
    if (dnn_ok(be,
               cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf),
               what))
        for (int i = 0; i < got && pick < 0; i++)
            if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= CONV_WS_MAX) pick = i;
    conv_scratch sc;
    if (pick < 0) { /* (an error of the query itself was raised first, and is kept) */
        ig_backend_raise(be, IG_ERR_UNSUPPORTED, "%s: cuDNN has no algorithm for this shape", what);
    } else if (carve(be, &sc, &d, s, d.asym, 0, perf[pick].memory, what)) {
        const void *x = padded_input(be, &d, &sc, inp, s, what);
        float one = 1.0f, zero = 0.0f;
        if (x &&
            dnn_ok(be,
                   cudnnConvolutionForward(h, &one, d.x, x, d.w, w, d.conv, perf[pick].algo, sc.ws,
                                           perf[pick].memory, &zero, d.y, out),
                   what) &&
            bias) {
            size_t n = (size_t)s->N * d.OH * d.OW * s->OC;
            if (be->act_type == IG_ACT_BF16)
                bias_kernel<bf16><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
                    (bf16 *)out, (const bf16 *)bias, n, s->OC);
            else
                bias_kernel<float><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
                    (float *)out, (const float *)bias, n, s->OC);
            cu_launched(be, what);
        }
    }
    desc_free(&d);
}

/* ---- backward -------------------------------------------------------------------------------- */

void cu_conv2d_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, const ig_conv2d_shape *s) {
    cu_impl *cu = cu_enter(be);
    const char *what = "conv2d_backward";
    cudnnHandle_t h = handle_of(be, what);
    conv_desc d;
    if (!h || !desc_make(be, &d, s, what)) return;
    cudnnConvolutionBwdDataAlgoPerf_t dp[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t fp[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int gd = 0, gf = 0, pd = -1, pf = -1;
    if (dinp &&
        dnn_ok(be,
               cudnnGetConvolutionBackwardDataAlgorithm_v7(
                   h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &gd, dp),
               what))
        for (int i = 0; i < gd && pd < 0; i++)
            if (dp[i].status == CUDNN_STATUS_SUCCESS && dp[i].determinism == CUDNN_DETERMINISTIC &&
                dp[i].memory <= CONV_WS_MAX)
                pd = i;
    if (dnn_ok(be,
               cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                   h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &gf, fp),
               what))
        for (int i = 0; i < gf && pf < 0; i++)
            if (fp[i].status == CUDNN_STATUS_SUCCESS && fp[i].determinism == CUDNN_DETERMINISTIC &&
                fp[i].memory <= CONV_WS_MAX)
                pf = i;
    if ((dinp && pd < 0) || pf < 0) {
        ig_backend_raise(be, IG_ERR_UNSUPPORTED,
                         "%s: cuDNN has no deterministic algorithm for this shape (%s)", what,
                         pf < 0 ? "weight gradient" : "input gradient");
        desc_free(&d);
        return;
    }
    size_t ws = fp[pf].memory;
    if (dinp && dp[pd].memory > ws) ws = dp[pd].memory;
    conv_scratch sc;
    float one = 1.0f, zero = 0.0f;
    if (!carve(be, &sc, &d, s, d.asym, d.asym && dinp, ws, what)) {
        desc_free(&d);
        return;
    }
    if (dinp) { /* overwritten: beta 0 (into the padded buffer when the padding is by hand) */
        void *dx = d.asym ? sc.dxp : dinp;
        if (!dnn_ok(be,
                    cudnnConvolutionBackwardData(h, &one, d.w, w, d.y, dout, d.conv, dp[pd].algo,
                                                 sc.ws, dp[pd].memory, &zero, d.x, dx),
                    what)) {
            desc_free(&d);
            return;
        }
        if (d.asym) {
            size_t n = (size_t)s->N * s->H * s->W * s->C;
            if (be->act_type == IG_ACT_BF16)
                crop_kernel<bf16><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
                    (bf16 *)dinp, (const bf16 *)sc.dxp, s->N, s->H, s->W, s->C, s->pad_top,
                    s->pad_left, d.Hp, d.Wp);
            else
                crop_kernel<float><<<cu_blocks(n, 256), 256, 0, cu->stream>>>(
                    (float *)dinp, (const float *)sc.dxp, s->N, s->H, s->W, s->C, s->pad_top,
                    s->pad_left, d.Hp, d.Wp);
            if (!cu_launched(be, what)) {
                desc_free(&d);
                return;
            }
        }
    }
    const void *x = padded_input(be, &d, &sc, inp, s, what);
    /* added: beta 1 */
    if (!x ||
        !dnn_ok(be,
                cudnnConvolutionBackwardFilter(h, &one, d.x, x, d.y, dout, d.conv, fp[pf].algo,
                                               sc.ws, fp[pf].memory, &one, d.w, dw),
                what)) {
        desc_free(&d);
        return;
    }
    desc_free(&d);
    if (dbias)
        cu_column_sums_add(be, dbias, dout, s->N * ig_conv2d_out_h(s) * ig_conv2d_out_w(s), s->OC,
                           "conv2d_backward (dbias)");
}
