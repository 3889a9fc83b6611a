/* backend_cuda.cu - the CUDA backend: creating it on a device (its stream, cuBLASLt handle and
 * workspace), its memory (cudaMalloc, never managed memory; IG_ERR_NOMEM names the bytes asked
 * for and what the device has free), copies and fp32 <-> bf16 conversions through host staging,
 * the scratch buffer the kernels share, error checks, and the ops table that backend.c dispatches
 * through. The kernels themselves are in one .cu per family of operations.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* cuBLASLt workspace: Hopper's kernels use up to 32 MiB */
#define LT_WORKSPACE   ((size_t)32 << 20)
#define STAGING_FLOATS ((size_t)1 << 22) /* host staging for conversions: 16 MiB of fp32 */

/* ---- errors ---------------------------------------------------------------------------------- */

ig_status cu_status(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return IG_OK;
    case cudaErrorMemoryAllocation:
        return IG_ERR_NOMEM;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidDeviceFunction:
        return IG_ERR_INTERNAL;
    default:
        return IG_ERR_IO;
    }
}

int cu_ok(ig_backend *be, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    ig_backend_raise(be, cu_status(e), "%s: %s (%s)", what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
    return 0;
}

int cu_launched(ig_backend *be, const char *what) {
    return cu_ok(be, cudaGetLastError(), what);
}

int cu_blas_ok(ig_backend *be, cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return 1;
    ig_backend_raise(be, s == CUBLAS_STATUS_ALLOC_FAILED ? IG_ERR_NOMEM : IG_ERR_INTERNAL,
                     "%s: cuBLASLt: %s (%s)", what, cublasLtGetStatusString(s),
                     cublasLtGetStatusName(s));
    return 0;
}

/* An error of a call that returns an ig_status (memory operations), with err filled. */
static ig_status cu_fail(ig_err *err, cudaError_t e, const char *what) {
    return ig_err_set(err, cu_status(e), "cuda backend: %s: %s (%s)", what, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

cu_impl *cu_enter(ig_backend *be) {
    cu_impl *cu = (cu_impl *)be->impl;
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != cu->device)
        cu_ok(be, cudaSetDevice(cu->device), "cudaSetDevice");
    return cu;
}

cudaDataType_t cu_act_type(const ig_backend *be) {
    return be->act_type == IG_ACT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* ---- memory ---------------------------------------------------------------------------------- */

/* cudaMalloc of bytes for what; IG_ERR_NOMEM names the bytes and the device's free memory. */
static ig_status device_alloc(cu_impl *cu, size_t bytes, const char *what, void **out,
                              ig_err *err) {
    *out = NULL;
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e == cudaSuccess) return IG_OK;
    *out = NULL;
    cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) free_b = total_b = 0, cudaGetLastError();
    (void)cu;
    if (e == cudaErrorMemoryAllocation)
        return ig_device_nomem(err, "cuda", what, bytes, free_b, total_b, cudaGetErrorString(e));
    return cu_fail(err, e, "cudaMalloc");
}

static ig_status cu_alloc(ig_backend *be, size_t bytes, void **out, ig_err *err) {
    cu_impl *cu = cu_enter(be);
    ig_status st = device_alloc(cu, bytes, "a buffer", out, err);
    if (st != IG_OK) return st;
    cudaError_t e = cudaMemsetAsync(*out, 0, bytes, cu->stream);
    if (e != cudaSuccess) {
        cudaFree(*out);
        *out = NULL;
        return cu_fail(err, e, "cudaMemsetAsync");
    }
    return IG_OK;
}

static void cu_release(ig_backend *be, void *p) {
    cu_impl *cu = cu_enter(be);
    /* kernels queued on the stream may still use p: wait for them first */
    cu_ok(be, cudaStreamSynchronize(cu->stream), "cudaStreamSynchronize (release)");
    cu_ok(be, cudaFree(p), "cudaFree");
}

static ig_status copy(ig_backend *be, void *dst, const void *src, size_t bytes, cudaMemcpyKind k,
                      ig_err *err) {
    cu_impl *cu = cu_enter(be);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, cu->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cu->stream);
    return e == cudaSuccess ? IG_OK
                            : cu_fail(err, e, k == cudaMemcpyHostToDevice ? "upload" : "download");
}

static ig_status cu_upload(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err) {
    return copy(be, dst, src, bytes, cudaMemcpyHostToDevice, err);
}

static ig_status cu_download(ig_backend *be, void *dst, const void *src, size_t bytes,
                             ig_err *err) {
    return copy(be, dst, src, bytes, cudaMemcpyDeviceToHost, err);
}

static ig_status cu_zero(ig_backend *be, void *p, size_t bytes, ig_err *err) {
    cu_impl *cu = cu_enter(be);
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, cu->stream);
    return e == cudaSuccess ? IG_OK : cu_fail(err, e, "cudaMemsetAsync");
}

static ig_status cu_copy(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err) {
    cu_impl *cu = cu_enter(be);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu->stream);
    return e == cudaSuccess ? IG_OK : cu_fail(err, e, "cudaMemcpyAsync (device to device)");
}

static ig_status cu_copy2d(ig_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                           size_t width, size_t rows, ig_err *err) {
    cu_impl *cu = cu_enter(be);
    cudaError_t e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows,
                                      cudaMemcpyDeviceToDevice, cu->stream);
    return e == cudaSuccess ? IG_OK : cu_fail(err, e, "cudaMemcpy2DAsync (device to device)");
}

/* The device's memory: its total and what is free now (cudaMemGetInfo). */
static void cu_mem_info(ig_backend *be, uint64_t *limit, uint64_t *free_bytes, const char **what) {
    cu_enter(be);
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) f = t = 0, cudaGetLastError();
    *limit = t;
    *free_bytes = f;
    *what = "the CUDA device's memory";
}

static ig_status cu_fence(ig_backend *be, void *stream, ig_err *err) {
    cu_impl *cu = cu_enter(be);
    cudaEvent_t ev = NULL;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, cu->stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)stream, ev, 0);
    if (ev) cudaEventDestroy(ev); /* released once the wait has been met */
    return e == cudaSuccess ? IG_OK : cu_fail(err, e, "a fence between streams");
}

/* The host staging buffer (STAGING_FLOATS * 2 bytes of bf16) for conversions. */
static uint16_t *staging(ig_backend *be, ig_err *err) {
    cu_impl *cu = (cu_impl *)be->impl;
    if (!cu->host) {
        cu->host = ig_alloc_aligned(be->ctx, STAGING_FLOATS * sizeof(uint16_t), IG_ALIGN_KERNEL);
        if (!cu->host) {
            ig_err_set(err, IG_ERR_NOMEM,
                       "cuda backend: out of host memory for %zu bytes of staging",
                       STAGING_FLOATS * sizeof(uint16_t));
            return NULL;
        }
        cu->host_bytes = STAGING_FLOATS * sizeof(uint16_t);
    }
    return (uint16_t *)cu->host;
}

static ig_status cu_upload_f32(ig_backend *be, void *dst, const float *src, size_t n, ig_err *err) {
    if (be->act_type == IG_ACT_F32) return cu_upload(be, dst, src, n * sizeof(float), err);
    uint16_t *h = staging(be, err);
    if (!h) return IG_ERR_NOMEM;
    for (size_t at = 0; at < n; at += STAGING_FLOATS) { /* convert a piece, copy it, next */
        size_t k = n - at < STAGING_FLOATS ? n - at : STAGING_FLOATS;
        ig_backend_bf16_from_f32_n(h, src + at, k);
        ig_status st = cu_upload(be, (uint16_t *)dst + at, h, k * sizeof(uint16_t), err);
        if (st != IG_OK) return st;
    }
    return IG_OK;
}

static ig_status cu_download_f32(ig_backend *be, float *dst, const void *src, size_t n,
                                 ig_err *err) {
    if (be->act_type == IG_ACT_F32) return cu_download(be, dst, src, n * sizeof(float), err);
    uint16_t *h = staging(be, err);
    if (!h) return IG_ERR_NOMEM;
    for (size_t at = 0; at < n; at += STAGING_FLOATS) {
        size_t k = n - at < STAGING_FLOATS ? n - at : STAGING_FLOATS;
        ig_status st = cu_download(be, h, (const uint16_t *)src + at, k * sizeof(uint16_t), err);
        if (st != IG_OK) return st;
        ig_backend_bf16_to_f32_n(dst + at, h, k);
    }
    return IG_OK;
}

static ig_status cu_sync(ig_backend *be, ig_err *err) {
    cu_impl *cu = cu_enter(be);
    cudaError_t e = cudaStreamSynchronize(cu->stream);
    return e == cudaSuccess ? IG_OK : cu_fail(err, e, "a queued kernel failed");
}

void *cu_scratch(ig_backend *be, size_t bytes, const char *what) {
    cu_impl *cu = (cu_impl *)be->impl;
    if (bytes <= cu->scratch_bytes && cu->scratch) return cu->scratch;
    /* grow: the old buffer may be in use by queued kernels */
    if (cu->scratch) {
        if (!cu_ok(be, cudaStreamSynchronize(cu->stream), "cudaStreamSynchronize (scratch)"))
            return NULL;
        ig_backend_untrack(be, cu->scratch);
        cudaFree(cu->scratch);
        cu->scratch = NULL;
        cu->scratch_bytes = 0;
    }
    size_t want = cu_round256(bytes + bytes / 8); /* some headroom against regrowing */
    ig_err err = {};
    if (device_alloc(cu, want, what, &cu->scratch, &err) != IG_OK) {
        ig_backend_raise(be, err.status, "%s: scratch memory: %s", what, err.msg);
        return NULL;
    }
    if (!ig_backend_track(be, cu->scratch, want, IG_MEM_WORKSPACE)) {
        cudaFree(cu->scratch);
        cu->scratch = NULL;
        ig_backend_raise(be, IG_ERR_NOMEM, "%s: out of memory recording the scratch", what);
        return NULL;
    }
    cu->scratch_bytes = want;
    return cu->scratch;
}

/* ---- the backend ----------------------------------------------------------------------------- */

static void cu_destroy(ig_backend *be) {
    cu_impl *cu = (cu_impl *)be->impl;
    if (!cu) return;
    cudaSetDevice(cu->device);
    if (cu->stream) cudaStreamSynchronize(cu->stream);
    if (cu->lt) cublasLtDestroy(cu->lt);
#ifdef IG_HAVE_CUDNN
    cu_conv_free(cu);
#endif
    ig_backend_untrack(be, cu->lt_ws);
    ig_backend_untrack(be, cu->scratch);
    cudaFree(cu->lt_ws);
    cudaFree(cu->scratch);
    if (cu->stream) cudaStreamDestroy(cu->stream);
    ig_free(be->ctx, cu->host);
    ig_free(be->ctx, cu);
    be->impl = NULL;
}

static void attention_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                              const int32_t *doc, const ig_attention_shape *s) {
    cu_impl *cu = cu_enter(be);
    if (cu->attention == IG_ATTENTION_GEMM || s->head_size > CU_FUSED_HEAD_MAX)
        cu_attention_gemm_forward(be, out, lse, qkv, doc, s);
    else
        cu_attention_forward(be, out, lse, qkv, doc, s);
}

static void attention_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                               const void *out, const float *lse, const int32_t *doc,
                               const ig_attention_shape *s) {
    cu_impl *cu = cu_enter(be);
    if (cu->attention == IG_ATTENTION_GEMM || s->head_size > CU_FUSED_HEAD_MAX)
        cu_attention_gemm_backward(be, dqkv, dout, qkv, out, lse, doc, s);
    else
        cu_attention_backward(be, dqkv, dout, qkv, out, lse, doc, s);
}

/* Designated initializers (C++20, in the table's declaration order): adding an operation to the
 * table never shifts the others, and one left out is NULL (absent). */
static const ig_backend_ops cuda_ops = {
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .release = cu_release,
    .upload = cu_upload,
    .download = cu_download,
    .zero = cu_zero,
    .copy = cu_copy,
    .copy2d = cu_copy2d,
    .upload_f32 = cu_upload_f32,
    .download_f32 = cu_download_f32,
    .sync = cu_sync,
    .fence = cu_fence,
    .mem_info = cu_mem_info,
    .encoder_forward = cu_encoder_forward,
    .encoder_backward = cu_encoder_backward,
    .layernorm_forward = cu_layernorm_forward,
    .residual_layernorm_forward = cu_residual_layernorm_forward,
    .layernorm_backward = cu_layernorm_backward,
    .rmsnorm_forward = cu_rmsnorm_forward,
    .residual_rmsnorm_forward = cu_residual_rmsnorm_forward,
    .rmsnorm_backward = cu_rmsnorm_backward,
    .matmul_forward = cu_matmul_forward,
    .matmul_backward = cu_matmul_backward,
    .gelu_bias_forward = cu_gelu_bias_forward,
    .gelu_bias_backward = cu_gelu_bias_backward,
    .swiglu_forward = cu_swiglu_forward,
    .swiglu_backward = cu_swiglu_backward,
    .rope_forward = cu_rope_forward,
    .rope_backward = cu_rope_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attention_cached = cu_attention_cached,
    .crossentropy = cu_crossentropy,
    .ce_max = cu_ce_max,
    .ce_sums = cu_ce_sums,
    .ce_finish = cu_ce_finish,
    .layernorm_modulate_forward = cu_layernorm_modulate_forward,
    .layernorm_modulate_backward = cu_layernorm_modulate_backward,
    .gate_residual_forward = cu_gate_residual_forward,
    .gate_residual_backward = cu_gate_residual_backward,
    .silu_forward = cu_silu_forward,
    .silu_backward = cu_silu_backward,
    .relu_forward = cu_relu_forward,
    .mse = cu_mse,
    .add = cu_add,
    .adamw = cu_adamw,
    .sum_squares = cu_sum_squares,
    .scale = cu_scale,
    .ema = cu_ema,
#ifdef IG_HAVE_CUDNN
    .conv2d_forward = cu_conv2d_forward,
    .conv2d_backward = cu_conv2d_backward,
#else /* no cuDNN in this toolkit: the backend has no convolution (ig_backend_supports says so) */
    .conv2d_forward = NULL,
    .conv2d_backward = NULL,
#endif
    .groupnorm_forward = cu_groupnorm_forward,
    .groupnorm_backward = cu_groupnorm_backward,
    .upsample2x_forward = cu_upsample2x_forward,
    .upsample2x_backward = cu_upsample2x_backward,
    .geglu_forward = cu_geglu_forward,
    .geglu_backward = cu_geglu_backward,
    .t5_position_bias = cu_t5_position_bias,
    .attention_bias_forward = cu_attention_bias_forward,
    .cross_attention_forward = cu_cross_attention_forward,
    .cross_attention_backward = cu_cross_attention_backward,
    .l1 = cu_l1,
    .posterior_forward = cu_posterior_forward,
    .posterior_backward = cu_posterior_backward,
};

/* Fails the creation: frees what was made, sets err. */
static ig_status create_failed(ig_backend *be, ig_err *err, cudaError_t e, const char *what) {
    cu_destroy(be);
    return cu_fail(err, e, what);
}

/* The create hook behind ig_cuda_backend_create (kernels/cudahost/cuda_host.c, in the program),
 * reached through the module's entry below. */
static ig_status cuda_create(ig_backend *be, ig_err *err) {
    be->impl = NULL;
    ig_attention_path path = IG_ATTENTION_FUSED;
    ig_status ast = ig_attention_path_check(&path, err);
    if (ast != IG_OK) return ast;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        const char *why = e != cudaSuccess ? cudaGetErrorString(e) : "no device is visible";
        cudaGetLastError();
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "no CUDA device: %s (use the CPU backend, train.device: cpu)", why);
    }
    if (be->opts.device < 0 || be->opts.device >= n)
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "CUDA device %d does not exist: this process sees %d device%s (0..%d)",
                          be->opts.device, n, n == 1 ? "" : "s", n - 1);
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, be->opts.device)) != cudaSuccess)
        return cu_fail(err, e, "cudaGetDeviceProperties");
    if (prop.major < 8)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "CUDA device %d (%s) is sm_%d%d: this build needs sm_80 or newer (bf16 "
                          "tensor cores)",
                          be->opts.device, prop.name, prop.major, prop.minor);
    if ((e = cudaSetDevice(be->opts.device)) != cudaSuccess)
        return cu_fail(err, e, "cudaSetDevice");

    cu_impl *cu = (cu_impl *)ig_calloc(be->ctx, 1, sizeof *cu);
    if (!cu) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the CUDA backend");
    be->impl = cu;
    cu->device = be->opts.device;
    cu->sm_count = prop.multiProcessorCount;
    cu->smem_optin = prop.sharedMemPerBlockOptin;
    cu->attention = path;
    if ((e = cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking)) != cudaSuccess)
        return create_failed(be, err, e, "cudaStreamCreate");
    cublasStatus_t s = cublasLtCreate(&cu->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cu->lt = NULL;
        cu_destroy(be);
        return ig_err_set(err, IG_ERR_INTERNAL, "cuda backend: cublasLtCreate: %s (%s)",
                          cublasLtGetStatusString(s), cublasLtGetStatusName(s));
    }
    ig_status st = device_alloc(cu, LT_WORKSPACE, "the cuBLASLt workspace", &cu->lt_ws, err);
    if (st == IG_OK && !ig_backend_track(be, cu->lt_ws, LT_WORKSPACE, IG_MEM_WORKSPACE))
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory recording the cuBLASLt workspace");
    if (st != IG_OK) {
        cu_destroy(be);
        return st;
    }
    cu->lt_ws_bytes = LT_WORKSPACE;
    be->ops = &cuda_ops;
    be->name = "cuda";
    be->act_type = be->opts.act_type;
    return IG_OK;
}

/* The CUDA module's entry for the backend (backend_internal.h): what cuda_host.c finds by name. */
extern "C" __attribute__((visibility("default")))
const ig_cuda_backend_module ig_cuda_backend_entry = {
    .stamp = {IG_VERSION_STRING, sizeof(ig_backend_ops), sizeof(struct ig_backend)},
    .create = cuda_create,
    .describe = cu_describe_libraries,
};
