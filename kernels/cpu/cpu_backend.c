/* cpu_backend.c - the CPU backend: memory is host memory from the context's allocator, kernels
 * run synchronously on the calling thread and the context's pool. Two ops tables share the
 * memory functions: "cpu" (the fast kernels) and "cpu-reference" (the plain ones, opts.reference);
 * with bf16 act tensors (opts.act_type), cpu_bf16.c's table runs over either.
 * The GEMM library's threads are never used (cpu_gemm.c): the pool is the only source of threads,
 * so a kernel's chunks, and with them its bits, depend on the sizes alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* Buffers are 256-byte aligned, as backend.h promises (the GPU's alignment, and 4 cache lines). */
#define CPU_ALIGN 256

static void cpu_destroy(ig_backend *be) {
    ig_cpu_impl *impl = be->impl;
    if (!impl) return;
    ig_cpu_bf16_free(be);
    ig_cpu_conv_cache_free(be);
    ig_free(be->ctx, impl);
    be->impl = NULL;
}

static ig_status cpu_alloc(ig_backend *be, size_t bytes, void **out, ig_err *err) {
    void *p = ig_alloc_aligned(be->ctx, bytes ? bytes : 1, CPU_ALIGN);
    if (!p) {
        char buf[32];
        return ig_err_set(err, IG_ERR_NOMEM, "cpu backend: cannot allocate %s (%zu bytes)",
                          ig_format_bytes((double)bytes, buf, sizeof buf), bytes);
    }
    memset(p, 0, bytes);
    *out = p;
    return IG_OK;
}

static void cpu_release(ig_backend *be, void *p) {
    ig_free(be->ctx, p);
}

static ig_status cpu_copy(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err) {
    (void)be, (void)err;
    memmove(dst, src, bytes);
    return IG_OK;
}

static ig_status cpu_copy2d(ig_backend *be, void *dst, size_t dpitch, const void *src,
                            size_t spitch, size_t width, size_t rows, ig_err *err) {
    (void)be, (void)err;
    for (size_t r = 0; r < rows; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return IG_OK;
}

static ig_status cpu_zero(ig_backend *be, void *p, size_t bytes, ig_err *err) {
    (void)be, (void)err;
    memset(p, 0, bytes);
    return IG_OK;
}

/* act tensors are fp32 here: the conversions are copies */
static ig_status cpu_upload_f32(ig_backend *be, void *dst, const float *src, size_t n,
                                ig_err *err) {
    return cpu_copy(be, dst, src, n * sizeof(float), err);
}

static ig_status cpu_download_f32(ig_backend *be, float *dst, const void *src, size_t n,
                                  ig_err *err) {
    return cpu_copy(be, dst, src, n * sizeof(float), err);
}

static ig_status cpu_sync(ig_backend *be, ig_err *err) {
    (void)be, (void)err;
    return IG_OK; /* synchronous: backend.c returns what a kernel raised */
}

static ig_status cpu_fence(ig_backend *be, void *stream, ig_err *err) {
    (void)be, (void)stream, (void)err;
    return IG_OK; /* every kernel has finished when it returns */
}

/* The CPU's memory is what this process may take now (core's MemAvailable, cgroup, ulimit). */
static void cpu_mem_info(ig_backend *be, uint64_t *limit, uint64_t *free_bytes, const char **what) {
    (void)be;
    ig_memory_info mi;
    ig_memory_query(&mi);
    *limit = mi.available;
    *free_bytes = mi.usable;
    *what = mi.source;
}

#define CPU_MEMORY_OPS                                                                             \
    .destroy = cpu_destroy, .alloc = cpu_alloc, .release = cpu_release, .upload = cpu_copy,        \
    .download = cpu_copy, .zero = cpu_zero, .copy = cpu_copy, .copy2d = cpu_copy2d,                \
    .upload_f32 = cpu_upload_f32, .download_f32 = cpu_download_f32, .sync = cpu_sync,              \
    .fence = cpu_fence, .mem_info = cpu_mem_info

#define CPU_KERNEL_OPS(prefix)                                                                     \
    .encoder_forward = prefix##encoder_forward, .encoder_backward = prefix##encoder_backward,      \
    .layernorm_forward = prefix##layernorm_forward,                                                \
    .residual_layernorm_forward = prefix##residual_layernorm_forward,                              \
    .layernorm_backward = prefix##layernorm_backward, .rmsnorm_forward = prefix##rmsnorm_forward,  \
    .residual_rmsnorm_forward = prefix##residual_rmsnorm_forward,                                  \
    .rmsnorm_backward = prefix##rmsnorm_backward, .matmul_forward = prefix##matmul_forward,        \
    .matmul_backward = prefix##matmul_backward, .gelu_bias_forward = prefix##gelu_bias_forward,    \
    .gelu_bias_backward = prefix##gelu_bias_backward, .swiglu_forward = prefix##swiglu_forward,    \
    .swiglu_backward = prefix##swiglu_backward, .rope_forward = prefix##rope_forward,              \
    .rope_backward = prefix##rope_backward, .attention_forward = prefix##attention_forward,        \
    .attention_backward = prefix##attention_backward,                                              \
    .attention_cached = prefix##attention_cached, .crossentropy = prefix##crossentropy,            \
    .ce_max = prefix##ce_max, .ce_sums = prefix##ce_sums, .ce_finish = prefix##ce_finish,          \
    .layernorm_modulate_forward = prefix##layernorm_modulate_forward,                              \
    .layernorm_modulate_backward = prefix##layernorm_modulate_backward,                            \
    .gate_residual_forward = prefix##gate_residual_forward,                                        \
    .gate_residual_backward = prefix##gate_residual_backward,                                      \
    .silu_forward = prefix##silu_forward, .silu_backward = prefix##silu_backward,                  \
    .relu_forward = prefix##relu_forward, .mse = prefix##mse, .add = prefix##add,                  \
    .adamw = prefix##adamw, .sum_squares = prefix##sum_squares, .scale = prefix##scale,            \
    .ema = prefix##ema, .conv2d_forward = prefix##conv2d_forward,                                  \
    .conv2d_backward = prefix##conv2d_backward, .groupnorm_forward = prefix##groupnorm_forward,    \
    .groupnorm_backward = prefix##groupnorm_backward,                                              \
    .upsample2x_forward = prefix##upsample2x_forward,                                              \
    .upsample2x_backward = prefix##upsample2x_backward, .geglu_forward = prefix##geglu_forward,    \
    .geglu_backward = prefix##geglu_backward, .t5_position_bias = prefix##t5_position_bias,        \
    .attention_bias_forward = prefix##attention_bias_forward,                                      \
    .cross_attention_forward = prefix##cross_attention_forward,                                    \
    .cross_attention_backward = prefix##cross_attention_backward, .l1 = prefix##l1,                \
    .posterior_forward = prefix##posterior_forward,                                                \
    .posterior_backward = prefix##posterior_backward

static const ig_backend_ops cpu_fast_ops = {CPU_MEMORY_OPS, CPU_KERNEL_OPS(ig_cpu_)};
static const ig_backend_ops cpu_reference_ops = {CPU_MEMORY_OPS, CPU_KERNEL_OPS(ig_cpu_ref_)};

ig_status ig_cpu_backend_create(ig_backend *be, ig_err *err) {
    be->ops = be->opts.reference ? &cpu_reference_ops : &cpu_fast_ops;
    be->name = be->opts.reference ? "cpu-reference" : "cpu";
    be->act_type = be->opts.act_type == IG_ACT_BF16 ? IG_ACT_BF16 : IG_ACT_F32;
    be->impl = NULL;
    /* the fast kernels keep state between calls (the convolutions'), and bf16 its table */
    if (!be->opts.reference || be->act_type == IG_ACT_BF16) {
        be->impl = ig_calloc(be->ctx, 1, sizeof(ig_cpu_impl));
        if (!be->impl)
            return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating the CPU backend");
    }
    ig_status st = be->act_type == IG_ACT_BF16 ? ig_cpu_bf16_setup(be, be->ops, err) : IG_OK;
    if (st != IG_OK) cpu_destroy(be);
    return st;
}

/* Scratch is the backend's workspace in the memory accounting (backend_memory.c). */
void *ig_cpu_scratch(ig_backend *be, size_t bytes, const char *what) {
    void *p = ig_alloc_aligned(be->ctx, bytes ? bytes : 1, IG_ALIGN_KERNEL);
    if (p && !ig_backend_track(be, p, bytes, IG_MEM_WORKSPACE)) {
        ig_free(be->ctx, p);
        p = NULL;
    }
    if (!p)
        ig_backend_raise(be, IG_ERR_NOMEM, "%s: cannot allocate %zu bytes of scratch memory", what,
                         bytes);
    return p;
}

void ig_cpu_scratch_free(ig_backend *be, void *p) {
    ig_backend_untrack(be, p);
    ig_free(be->ctx, p);
}

double ig_cpu_eps(float eps) {
    char buf[32];
    for (int digits = 1; digits <= 9; digits++) { /* 9 significant digits always read back */
        snprintf(buf, sizeof buf, "%.*g", digits, (double)eps);
        if (strtof(buf, NULL) == eps) return strtod(buf, NULL);
    }
    return eps;
}

size_t ig_cpu_chunk(size_t n, size_t parts, size_t align) {
    size_t c = (n + parts - 1) / parts;
    c = (c + align - 1) / align * align;
    return c ? c : align;
}
