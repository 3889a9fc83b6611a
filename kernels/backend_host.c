/* backend_host.c - host-side pieces of the accelerator backends that need no accelerator: the
 * fp32 <-> bf16 conversions (round to nearest even, as torch and CUDA's __float2bfloat16_rn do)
 * behind ig_backend_upload_f32 / download_f32 of a bf16 backend, the out-of-memory message of a
 * device allocation, the choice of attention path, and T5's relative position buckets. Plain C in
 * every build, so the CPU tests check them even where no GPU is.
 *
 * The bf16 rounding is core's ig_bf16_from_f32, the only one on the host (safetensors', the CPU's
 * bf16 kernels' and MPI's bf16 sum use it too), and the CUDA kernels' device helper
 * (cuda_internal.h, bf16_from_f) gives the same bits, NaN included: every NaN becomes 0x7FC0,
 * PyTorch's quiet NaN (c10::BFloat16).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_internal.h"

uint16_t ig_backend_bf16_from_f32(float x) {
    return ig_bf16_from_f32(x);
}

float ig_backend_bf16_to_f32(uint16_t h) {
    return ig_bf16_to_f32(h);
}

void ig_backend_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ig_backend_bf16_from_f32(src[i]);
}

void ig_backend_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ig_backend_bf16_to_f32(src[i]);
}

void ig_backend_rope_inv_freq(float *inv, int hs, float theta) {
    for (int i = 0; i < hs / 2; i++) inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)hs);
}

ig_status ig_device_nomem(ig_err *err, const char *backend, const char *what, size_t bytes,
                          size_t free_bytes, size_t total_bytes, const char *why) {
    char need[32], avail[32], total[32];
    ig_format_bytes((double)bytes, need, sizeof need);
    if (!total_bytes)
        return ig_err_set(err, IG_ERR_NOMEM,
                          "%s backend: cannot allocate %s (%zu bytes) for %s: %s", backend, need,
                          bytes, what, why ? why : "out of memory");
    ig_format_bytes((double)free_bytes, avail, sizeof avail);
    ig_format_bytes((double)total_bytes, total, sizeof total);
    return ig_err_set(err, IG_ERR_NOMEM,
                      "%s backend: cannot allocate %s (%zu bytes) for %s: %s free of %s on the "
                      "device (%s); use a smaller micro-batch (train.micro_batch) or sequence, or "
                      "a device with more memory",
                      backend, need, bytes, what, avail, total, why ? why : "out of memory");
}

ig_attention_path ig_attention_path_from_env(const char *value, int *ok) {
    *ok = 1;
    if (!value || !*value || strcmp(value, "fused") == 0) return IG_ATTENTION_FUSED;
    if (strcmp(value, "gemm") == 0) return IG_ATTENTION_GEMM;
    *ok = 0;
    return IG_ATTENTION_FUSED;
}

ig_status ig_attention_path_check(ig_attention_path *out, ig_err *err) {
    int ok = 1;
    const char *env = getenv("IG_CUDA_ATTENTION");
    *out = ig_attention_path_from_env(env, &ok);
    if (!ok)
        return ig_err_set(
            err, IG_ERR_INVALID_ARG,
            "IG_CUDA_ATTENTION=%s: the CUDA attention path is \"fused\" (the default) "
            "or \"gemm\"",
            env);
    return IG_OK;
}

/* As transformers' T5Attention._relative_position_bucket, operation by operation in the types it
 * computes in: integer halving and comparisons; the log-spaced part in fp32 (torch.log of a float
 * tensor, divided by the Python float math.log(max_distance / max_exact) rounded to fp32, times an
 * integer, truncated by .to(torch.long)). glibc's logf gives torch's buckets for every distance
 * of the configurations tests/test_kernels_t5.c checks against torch's own (its goldens). */
int ig_t5_relative_position_bucket(int relative_position, int bidirectional, int num_buckets,
                                   int max_distance) {
    int bucket = 0, n = num_buckets, d;
    if (bidirectional) {
        n /= 2;
        if (relative_position > 0) bucket += n;
        d = relative_position < 0 ? -relative_position : relative_position;
    } else {
        d = relative_position < 0 ? -relative_position : 0;
    }
    int max_exact = n / 2;
    if (d < max_exact) return bucket + d;
    float r = (float)d / (float)max_exact;
    float span = (float)log((double)max_distance / (double)max_exact);
    float v = logf(r) / span * (float)(n - max_exact);
    long large = max_exact + (long)v;
    return bucket + (int)(large < n - 1 ? large : n - 1);
}
