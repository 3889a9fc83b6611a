/* cpu_internal.h - private to kernels/cpu/: the CPU backend's kernels, two of each operation.
 *
 * ig_cpu_ref_*: the reference kernels. Plain loops in the order the maths is written, double
 * accumulation for every sum, single-threaded, no library: obviously correct and slow. They are
 * what the fast kernels (and later the CUDA ones) are checked against.
 *
 * ig_cpu_*: the fast kernels. Threaded through the context's pool (ig_parallel_range) over
 * chunks that depend on the sizes only, each output element computed by exactly one chunk in an
 * order fixed by the sizes, and partial results combined in a fixed order: the same bits for any
 * thread count. GEMMs go to oneDNN (cpu_gemm.c), called single-threaded on each chunk.
 *
 * Each has the signature of its entry in ig_backend_ops (backend_internal.h); act tensors are
 * fp32 on the CPU.
 */
#ifndef INGOT_KERNELS_CPU_INTERNAL_H
#define INGOT_KERNELS_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../backend_internal.h"

/* Hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time (GCC's
 * target_clones). Floating-point contraction is off (ISO C mode) and no loop below is a
 * vectorised reduction, so every clone gives the same bits. Not under the sanitizers: their
 * runtimes are not up yet when the dynamic loader runs the clones' resolvers. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) &&                             \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define IG_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define IG_CPU_CLONES
#endif

/* ---- helpers (cpu_backend.c, cpu_gemm.c) ------------------------------------------------------
 */

/* Scratch for one kernel call: bytes from the context's allocator (64-byte aligned), or NULL
 * after raising IG_ERR_NOMEM on the backend (the kernel then returns without writing). */
void *ig_cpu_scratch(ig_backend *be, size_t bytes, const char *what);
void ig_cpu_scratch_free(ig_backend *be, void *p);

/* The chunk size that cuts n items into about `parts` chunks, a multiple of `align` and at least
 * `align`: a function of n alone, so the chunks never depend on the thread count. */
size_t ig_cpu_chunk(size_t n, size_t parts, size_t align);

/* C[M, N] = op(A) @ op(B) + beta * C, row-major, on the calling thread only (oneDNN's sgemm with
 * one OpenMP thread, see cpu_gemm.c). ta: A is stored [K, M] (op = transpose), else [M, K]; tb: B
 * is stored [N, K], else [K, N]. Returns 0, or -1 when the library refused the call. */
int ig_cpu_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc);
/* The library's name and version, e.g. "oneDNN 2.6.3". */
const char *ig_cpu_gemm_library(char *buf, size_t cap);

/* ---- kernels: reference (ig_cpu_ref_*) and fast (ig_cpu_*) ----------------------------------- */

#define IG_CPU_DECLARE(name, ...)                                                                  \
    void ig_cpu_ref_##name(ig_backend *be, __VA_ARGS__);                                           \
    void ig_cpu_##name(ig_backend *be, __VA_ARGS__);

IG_CPU_DECLARE(encoder_forward, void *out, const int32_t *tokens, const void *wte, const void *wpe,
               int B, int T, int C)
IG_CPU_DECLARE(encoder_backward, void *dwte, void *dwpe, const void *dout, const int32_t *tokens,
               int B, int T, int C)
IG_CPU_DECLARE(layernorm_forward, void *out, float *mean, float *rstd, const void *inp,
               const void *w, const void *b, int N, int C)
IG_CPU_DECLARE(residual_layernorm_forward, void *residual, void *out, float *mean, float *rstd,
               const void *a, const void *b_in, const void *w, const void *b, int N, int C)
IG_CPU_DECLARE(layernorm_backward, void *dinp, void *dw, void *db, const void *dout,
               const void *inp, const void *w, const float *mean, const float *rstd, int N, int C)
IG_CPU_DECLARE(matmul_forward, void *out, const void *inp, const void *w, ig_w_layout layout,
               const void *bias, int N, int C, int OC)
IG_CPU_DECLARE(matmul_backward, void *dinp, void *dw, void *dbias, const void *dout,
               const void *inp, const void *w, ig_w_layout layout, int N, int C, int OC)
IG_CPU_DECLARE(gelu_bias_forward, void *out, const void *inp, const void *bias, int N, int C)
IG_CPU_DECLARE(gelu_bias_backward, void *dinp, void *dbias, const void *dout, const void *inp,
               const void *bias, int N, int C)
IG_CPU_DECLARE(attention_forward, void *out, float *lse, const void *qkv, const int32_t *doc, int B,
               int T, int C, int NH)
IG_CPU_DECLARE(attention_backward, void *dqkv, const void *dout, const void *qkv, const void *out,
               const float *lse, const int32_t *doc, int B, int T, int C, int NH)
IG_CPU_DECLARE(attention_cached, void *out, const void *q, const void *k, const void *v, int B,
               int Tq, int pos0, int Tmax, int C, int NH)
IG_CPU_DECLARE(crossentropy, float *losses, void *logits, const int32_t *targets,
               const float *dloss, int N, int V, int Vp)
IG_CPU_DECLARE(adamw, void *params, float *master, const void *grads, float *m, float *v, size_t n,
               float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
               int step)
IG_CPU_DECLARE(scale, void *x, size_t n, float s)

double ig_cpu_ref_sum_squares(ig_backend *be, const void *x, size_t n);
double ig_cpu_sum_squares(ig_backend *be, const void *x, size_t n);

/* Column sums of x [N, C] added to acc [C] (acc[c] += sum over rows in row order, in double),
 * threaded over chunks of columns: shared by the bias gradients. */
void ig_cpu_column_sums_add(ig_backend *be, float *acc, const float *x, int N, int C);

#endif /* INGOT_KERNELS_CPU_INTERNAL_H */
