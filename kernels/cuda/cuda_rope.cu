/* cuda_rope.cu - rotary position embedding (RoPE, Hugging Face's rotate-half convention) on the
 * GPU, forward and its transpose (the backward), in place on the query and key heads of packed
 * qkv rows; the value heads are left alone.
 *
 * The inverse frequencies are computed on the host by the code the CPU kernels use
 * (ig_backend_rope_inv_freq: 1 / theta^(float(2i) / hs) in fp32, as transformers) and passed by
 * value to the kernel, so both backends rotate by the same fp32 angles (float)pos * inv_i; the
 * cosine and sine of an angle are taken in double and rounded to fp32, as the fast CPU kernel
 * does (a device powf or sincosf would move the angles of far positions by far more than the
 * fp32 tolerance). A thread per (row, i < hs / 2) computes its cosine and sine once and rotates
 * the pair (x_i, x_{i + hs/2}) of every query and key head of the row, in fp32:
 *   forward:  (a, d) -> (a c - d s, d c + a s);  backward: the same with s negated.
 * Elementwise: deterministic.
 *
 * Shapes: qkv, dqkv [B, T, (n_head + 2 n_kv_head) hs]; hs even, at most 2 * ROPE_MAX_HALF.
 */
#include "cuda_internal.h"

#define ROPE_MAX_HALF 128 /* head sizes up to 256 */

/* the inverse frequencies, by value (a kernel parameter: no device buffer, no copy) */
typedef struct rope_freqs {
    float inv[ROPE_MAX_HALF];
} rope_freqs;

template <typename T>
__global__ void rope_kernel(T *x, rope_freqs f, size_t rows, int T_, int heads, int hs, size_t R,
                            int pos0, float dir) {
    int half = hs / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * half) return;
    int i = (int)(idx % half);
    size_t r = idx / half;
    float angle = (float)(pos0 + (int)(r % (size_t)T_)) * f.inv[i];
    double sd, cd;
    sincos((double)angle, &sd, &cd);
    float c = (float)cd, s = (float)sd * dir;
    T *row = x + r * R;
    for (int h = 0; h < heads; h++) {
        T *p = row + (size_t)h * hs + i;
        float a = to_f(p[0]), d = to_f(p[half]);
        p[0] = from_f<T>(a * c - d * s);
        p[half] = from_f<T>(d * c + a * s);
    }
}

static void rope(ig_backend *be, void *x, int B, int T, int NH, int NKV, int hs, int pos0,
                 float theta, float dir, const char *what) {
    cu_impl *cu = cu_enter(be);
    size_t rows = (size_t)B * T, n = rows * (size_t)(hs / 2);
    if (n == 0) return;
    if (hs / 2 > ROPE_MAX_HALF) {
        ig_backend_raise(be, IG_ERR_UNSUPPORTED,
                         "%s: head size %d: the CUDA RoPE supports head sizes up to %d", what, hs,
                         2 * ROPE_MAX_HALF);
        return;
    }
    rope_freqs f;
    ig_backend_rope_inv_freq(f.inv, hs, theta);
    size_t R = (size_t)(NH + 2 * NKV) * hs;
    if (be->act_type == IG_ACT_BF16)
        rope_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((bf16 *)x, f, rows, T, NH + NKV, hs,
                                                               R, pos0, dir);
    else
        rope_kernel<<<cu_blocks(n, 256), 256, 0, cu->stream>>>((float *)x, f, rows, T, NH + NKV, hs,
                                                               R, pos0, dir);
    cu_launched(be, what);
}

void cu_rope_forward(ig_backend *be, void *qkv, int B, int T, int n_head, int n_kv_head, int hs,
                     int pos0, float theta) {
    rope(be, qkv, B, T, n_head, n_kv_head, hs, pos0, theta, 1.0f, "rope_forward");
}

void cu_rope_backward(ig_backend *be, void *dqkv, int B, int T, int n_head, int n_kv_head, int hs,
                      int pos0, float theta) {
    rope(be, dqkv, B, T, n_head, n_kv_head, hs, pos0, theta, -1.0f, "rope_backward");
}
