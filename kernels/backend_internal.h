/* backend_internal.h - private to kernels/: what a compute backend fills in. backend.c owns the
 * ig_backend struct, checks arguments, and dispatches every public ig_backend_* and ig_kernel_*
 * call through the ops table below; a backend (kernels/cpu/, kernels/cuda/) provides the table
 * and its own state. Nothing outside kernels/ sees this header, so the table can change without
 * touching the trainer.
 */
#ifndef INGOT_KERNELS_BACKEND_INTERNAL_H
#define INGOT_KERNELS_BACKEND_INTERNAL_H

#include <pthread.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The operations of a backend, one entry per public function of backend.h (same parameters, the
 * backend first). The memory entries (destroy .. fence) are always set; a kernel entry may be
 * NULL, an operation this backend does not have (ig_backend_supports says 0, and backend.c never
 * calls it). Fill a table with designated initializers (.attention_forward = ...), so that adding
 * an entry never shifts the others. backend.c has checked the arguments that it can (shapes,
 * NULL pointers) before it calls one. */
typedef struct ig_backend_ops {
    void (*destroy)(ig_backend *be); /* frees be->impl (not be) */

    ig_status (*alloc)(ig_backend *be, size_t bytes, void **out, ig_err *err);
    void (*release)(ig_backend *be, void *p);
    ig_status (*upload)(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err);
    ig_status (*download)(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err);
    ig_status (*zero)(ig_backend *be, void *p, size_t bytes, ig_err *err);
    ig_status (*copy)(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err);
    ig_status (*copy2d)(ig_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch,
                        size_t width, size_t rows, ig_err *err);
    ig_status (*upload_f32)(ig_backend *be, void *dst, const float *src, size_t n, ig_err *err);
    ig_status (*download_f32)(ig_backend *be, float *dst, const void *src, size_t n, ig_err *err);
    ig_status (*sync)(ig_backend *be, ig_err *err);
    ig_status (*fence)(ig_backend *be, void *stream, ig_err *err);
    /* The device's memory: *limit what it has for this process (CUDA: the device's total; CPU:
     * what the process may take now), *free what is free now. May be NULL (both then 0). */
    void (*mem_info)(ig_backend *be, uint64_t *limit, uint64_t *free_bytes, const char **what);

    void (*encoder_forward)(ig_backend *be, void *out, const int32_t *tokens, const void *wte,
                            const void *wpe, int B, int T, int C);
    void (*encoder_backward)(ig_backend *be, void *dwte, void *dwpe, const void *dout,
                             const int32_t *tokens, int B, int T, int C);
    void (*layernorm_forward)(ig_backend *be, void *out, float *mean, float *rstd, const void *inp,
                              const void *w, const void *b, int N, int C, float eps);
    void (*residual_layernorm_forward)(ig_backend *be, void *residual, void *out, float *mean,
                                       float *rstd, const void *a, const void *b_in, const void *w,
                                       const void *b, int N, int C, float eps);
    void (*layernorm_backward)(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                               const void *inp, const void *w, const float *mean, const float *rstd,
                               int N, int C);
    void (*rmsnorm_forward)(ig_backend *be, void *out, float *rstd, const void *inp, const void *w,
                            int N, int C, float eps);
    void (*residual_rmsnorm_forward)(ig_backend *be, void *residual, void *out, float *rstd,
                                     const void *a, const void *b, const void *w, int N, int C,
                                     float eps);
    void (*rmsnorm_backward)(ig_backend *be, void *dinp, void *dw, const void *dout,
                             const void *inp, const void *w, const float *rstd, int N, int C);
    void (*matmul_forward)(ig_backend *be, void *out, const void *inp, const void *w,
                           ig_w_layout layout, const void *bias, int N, int C, int OC);
    void (*matmul_backward)(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                            const void *inp, const void *w, ig_w_layout layout, int N, int C,
                            int OC);
    void (*gelu_bias_forward)(ig_backend *be, void *out, const void *inp, const void *bias, int N,
                              int C);
    void (*gelu_bias_backward)(ig_backend *be, void *dinp, void *dbias, const void *dout,
                               const void *inp, const void *bias, int N, int C);
    void (*swiglu_forward)(ig_backend *be, void *out, const void *gate, const void *up, int N,
                           int F);
    void (*swiglu_backward)(ig_backend *be, void *dgate, void *dup, const void *dout,
                            const void *gate, const void *up, int N, int F);
    void (*rope_forward)(ig_backend *be, void *qkv, int B, int T, int n_head, int n_kv_head, int hs,
                         int pos0, float theta);
    void (*rope_backward)(ig_backend *be, void *dqkv, int B, int T, int n_head, int n_kv_head,
                          int hs, int pos0, float theta);
    void (*attention_forward)(ig_backend *be, void *out, float *lse, const void *qkv,
                              const int32_t *doc, const ig_attention_shape *s);
    void (*attention_backward)(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                               const void *out, const float *lse, const int32_t *doc,
                               const ig_attention_shape *s);
    void (*attention_cached)(ig_backend *be, void *out, const void *q, const void *k, const void *v,
                             int pos0, int Tmax, const ig_attention_shape *s);
    void (*crossentropy)(ig_backend *be, float *losses, void *logits, const int32_t *targets,
                         const float *dloss, int N, int V, int Vp);
    void (*ce_max)(ig_backend *be, float *rowmax, const void *logits, int N, int Vvalid, int Vl);
    void (*ce_sums)(ig_backend *be, float *stats, const void *logits, const float *rowmax,
                    const int32_t *targets, int N, int Vvalid, int Vl);
    void (*ce_finish)(ig_backend *be, float *losses, void *logits, const float *rowmax,
                      const float *stats, const int32_t *targets, const float *dloss, int N,
                      int Vvalid, int Vl);
    void (*layernorm_modulate_forward)(ig_backend *be, void *out, float *mean, float *rstd,
                                       const void *inp, const void *shift, const void *scale,
                                       int ld, int N, int C, int row0, int rows_per_sample,
                                       float eps);
    void (*layernorm_modulate_backward)(ig_backend *be, void *dinp, void *dshift, void *dscale,
                                        const void *dout, const void *inp, const void *scale,
                                        int ld, const float *mean, const float *rstd, int N, int C,
                                        int row0, int rows_per_sample);
    void (*gate_residual_forward)(ig_backend *be, void *out, const void *res, const void *x,
                                  const void *gate, int ld, int N, int C, int row0,
                                  int rows_per_sample);
    void (*gate_residual_backward)(ig_backend *be, void *dx, void *dgate, const void *dout,
                                   const void *x, const void *gate, int ld, int N, int C, int row0,
                                   int rows_per_sample);
    void (*silu_forward)(ig_backend *be, void *out, const void *inp, size_t n);
    void (*silu_backward)(ig_backend *be, void *dinp, const void *dout, const void *inp, size_t n);
    void (*relu_forward)(ig_backend *be, void *out, const void *inp, size_t n);
    void (*mse)(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
                int N, int K, float grad_scale);
    void (*add)(ig_backend *be, void *out, const void *a, const void *b, size_t n);
    void (*adamw)(ig_backend *be, void *params, float *master, const void *grads, float *m,
                  float *v, size_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, float grad_scale, int step);
    double (*sum_squares)(ig_backend *be, const void *x, size_t n);
    void (*scale)(ig_backend *be, void *x, size_t n, float s);
    void (*ema)(ig_backend *be, float *ema, const float *master, const void *params, size_t n,
                float decay);
    void (*conv2d_forward)(ig_backend *be, void *out, const void *inp, const void *w,
                           const void *bias, const ig_conv2d_shape *s);
    void (*conv2d_backward)(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                            const void *inp, const void *w, const ig_conv2d_shape *s);
    void (*groupnorm_forward)(ig_backend *be, void *out, float *mean, float *rstd, const void *inp,
                              const void *w, const void *b, int N, int HW, int C, int G, float eps,
                              int silu);
    void (*groupnorm_backward)(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                               const void *inp, const void *w, const void *b, const float *mean,
                               const float *rstd, int N, int HW, int C, int G, int silu);
    void (*upsample2x_forward)(ig_backend *be, void *out, const void *inp, int N, int H, int W,
                               int C);
    void (*upsample2x_backward)(ig_backend *be, void *dinp, const void *dout, int N, int H, int W,
                                int C);
    void (*geglu_forward)(ig_backend *be, void *out, const void *gate, const void *up, int N,
                          int F);
    void (*geglu_backward)(ig_backend *be, void *dgate, void *dup, const void *dout,
                           const void *gate, const void *up, int N, int F);
    void (*t5_position_bias)(ig_backend *be, void *bias, const void *table, int T, int n_head,
                             int num_buckets, int max_distance, int bidirectional);
    void (*attention_bias_forward)(ig_backend *be, void *out, float *lse, const void *qkv,
                                   const void *bias, const int32_t *klen,
                                   const ig_attention_shape *s);
    void (*cross_attention_forward)(ig_backend *be, void *out, float *lse, const void *q,
                                    const void *kv, const int32_t *klen, int N, int row0,
                                    int rows_per_sample, int Tk, int n_head, int head_size);
    void (*cross_attention_backward)(ig_backend *be, void *dq, void *dkv, const void *dout,
                                     const void *q, const void *kv, const void *out,
                                     const float *lse, const int32_t *klen, int N, int row0,
                                     int rows_per_sample, int Tk, int n_head, int head_size);
    void (*l1)(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
               int N, int K, float grad_scale);
    void (*posterior_forward)(ig_backend *be, void *z, float *kl, const void *moments,
                              const void *eps, int N, int C);
    void (*posterior_backward)(ig_backend *be, void *dmoments, const void *dz, const void *moments,
                               const void *eps, int N, int C, float kl_scale);
} ig_backend_ops;

/* A backend. backend.c allocates it from the context and frees it; the kind's create hook fills
 * ops, name, act_type and impl. */
struct ig_backend {
    const ig_backend_ops *ops;
    ig_ctx *ctx; /* borrowed: must outlive the backend; its pool runs the CPU kernels */
    ig_backend_opts opts;
    const char *name;     /* static: "cpu", "cpu-reference", "cuda" */
    ig_act_type act_type; /* the type of act tensors */
    void *impl;           /* the backend's own state, freed by ops->destroy */
    /* The first error a kernel raised since the last ig_backend_sync (kernels return nothing):
     * set only by the thread that drives the backend, after a parallel loop has returned. */
    ig_status pending;
    char pending_msg[IG_ERR_MSG_MAX];
    ig_backend_trace_fn trace; /* ig_backend_set_trace: NULL when off */
    void *trace_user;
    /* Memory accounting (backend_memory.c): every live block by address, a buffer handed out by
     * ig_backend_alloc or the backend's own workspace (ig_backend_track), and the bytes held of
     * each kind now and at their peak. A lock: a backend's memory is asked for by the thread that
     * drives it, but the figures may be read from another. */
    pthread_mutex_t mem_lock;
    struct ig_mem_block *mem_tab; /* open addressing, mem_cap a power of two (0: none yet) */
    size_t mem_cap, mem_n;
    uint64_t mem_held[2], mem_peak[2]; /* by ig_mem_kind */
    uint64_t mem_peak_all;             /* the most held of both kinds together */
};

/* What a tracked block of backend memory is: a buffer of ig_backend_alloc, or the backend's own
 * workspace (the CPU kernels' transient scratch; CUDA's cuBLASLt workspace and kernel scratch). */
typedef enum ig_mem_kind { IG_MEM_BUFFER = 0, IG_MEM_WORKSPACE = 1 } ig_mem_kind;

/* The accounting's life (backend.c: before the kind's create hook, after its destroy). */
void ig_backend_memory_init(ig_backend *be);
void ig_backend_memory_fini(ig_backend *be);
/* Records the block p of bytes (0 when the accounting itself could not grow: the caller frees p
 * and reports IG_ERR_NOMEM), and forgets it (an untracked p is ignored). Any thread. */
int ig_backend_track(ig_backend *be, const void *p, size_t bytes, ig_mem_kind kind);
void ig_backend_untrack(ig_backend *be, const void *p);

/* Records a kernel's error for the next ig_backend_sync (the first one wins). Called only from
 * the thread that drives the backend. */
void ig_backend_raise(ig_backend *be, ig_status status, const char *fmt, ...) IG_PRINTF(3, 4);

/* The backends' create hooks: fill be (ops, name, act_type, impl) from be->opts, or fail with
 * err set (be->impl then NULL). The CPU one is kernels/cpu/cpu_backend.c. The CUDA one is
 * kernels/cudahost/cuda_host.c when nvcc built the backend (it loads the CUDA module and calls
 * the module's create, below), else kernels/nocuda/cuda_absent.c (unsupported). */
ig_status ig_cpu_backend_create(ig_backend *be, ig_err *err);
ig_status ig_cuda_backend_create(ig_backend *be, ig_err *err);

/* ---- the CUDA module's side of the backend -------------------------------------------------- */

/* kernels/cuda/ is built into the CUDA module, libingot_cuda.so (with the NCCL communicator),
 * which the program loads when a CUDA backend is first created (core's ig_module_symbol), so that
 * the CUDA runtime, cuBLASLt and cuDNN are loaded only by the processes that use the GPU. The
 * module exports one object of this type, IG_CUDA_BACKEND_ENTRY; the sizes and version let
 * cuda_host.c refuse a module of another build, whose tables would not match these. */
#define IG_CUDA_BACKEND_ENTRY "ig_cuda_backend_entry"
typedef struct ig_cuda_backend_module {
    ig_module_stamp stamp; /* its build: ops_size sizeof(ig_backend_ops), obj_size sizeof(struct
                              ig_backend) */
    /* ig_cuda_backend_create's work, the device known to exist (cuda_host.c asked the driver) */
    ig_status (*create)(ig_backend *be, ig_err *err);
    /* The libraries the module loaded, in words ("CUDA runtime 13.0, cuBLASLt 13.0.2, cuDNN
     * 9.13.0") into buf. Never fails. */
    void (*describe)(char *buf, size_t cap);
} ig_cuda_backend_module;

/* ---- host-side helpers of the accelerator backends (backend_host.c, plain C in every build) -- */

/* RoPE's inverse frequencies, inv[i] = 1 / theta^(float(2i) / hs) for i < hs / 2, in fp32 as
 * transformers computes them: the one computation the fast CPU kernel and the CUDA kernels share
 * (so that they rotate by the same angles). */
void ig_backend_rope_inv_freq(float *inv, int hs, float theta);

/* Sets err to IG_ERR_NOMEM for a device allocation of `bytes` for `what` that failed, naming what
 * the device has free and in all (total_bytes 0: unknown) and `why` (the runtime's words). */
ig_status ig_device_nomem(ig_err *err, const char *backend, const char *what, size_t bytes,
                          size_t free_bytes, size_t total_bytes, const char *why);

/* The CUDA backend's attention path, from the environment variable IG_CUDA_ATTENTION (read once
 * when the backend is created): "fused" (default, or unset: the tiled online-softmax kernels, no
 * [T, T] matrix) or "gemm" (cuBLAS batched GEMMs around a fused scale-mask-softmax, [T, T]
 * scores in scratch memory: for comparison in bench_cuda). *ok is 0 for any other value. */
typedef enum ig_attention_path { IG_ATTENTION_FUSED = 0, IG_ATTENTION_GEMM } ig_attention_path;
ig_attention_path ig_attention_path_from_env(const char *value, int *ok);
/* The path IG_CUDA_ATTENTION asks for into *out, or IG_ERR_INVALID_ARG naming the choices (the
 * CUDA backend's refusal, given before it looks for a device). */
ig_status ig_attention_path_check(ig_attention_path *out, ig_err *err);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_KERNELS_BACKEND_INTERNAL_H */
