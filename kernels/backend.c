/* backend.c - the public face of the compute backends: creating one of the kind asked for,
 * checking each call's arguments once for every backend, and dispatching it through the
 * backend's ops table (backend_internal.h). Also what the NVIDIA driver reports to this build
 * (ig_cuda_query), in words, for `ingot --version`.
 *
 * Kernels return nothing (on a GPU they are queued): a shape that cannot be right (a negative
 * size, C not a multiple of NH, a NULL tensor) or an operation the backend lacks is a programmer
 * error and asserts here; an error a kernel meets while it runs (an allocation, a library call)
 * is kept by the backend and returned by the next ig_backend_sync. Every ig_kernel_* goes through
 * one frame (KERNEL_BEGIN / KERNEL_END): the check that the backend has the operation, and the
 * per-kernel trace when one is set. Every buffer handed out and released is recorded for the
 * memory accounting (backend_memory.c).
 */
#include "backend.h"

#include <assert.h>
#include <limits.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend_internal.h"

ig_backend_opts ig_backend_opts_default(void) {
    ig_backend_opts o;
    memset(&o, 0, sizeof o);
    o.kind = IG_BACKEND_CPU;
    o.act_type = IG_ACT_F32;
    return o;
}

ig_status ig_backend_create(ig_backend **out, ig_ctx *ctx, const ig_backend_opts *opts,
                            ig_err *err) {
    *out = NULL;
    ig_backend_opts o = opts ? *opts : ig_backend_opts_default();
    if (o.kind != IG_BACKEND_CPU && o.kind != IG_BACKEND_CUDA)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown compute backend kind %d", (int)o.kind);
    if (o.act_type != IG_ACT_F32 && o.act_type != IG_ACT_BF16)
        return ig_err_set(err, IG_ERR_INVALID_ARG, "unknown activation type %d", (int)o.act_type);
    ig_backend *be = ig_calloc(ctx, 1, sizeof *be);
    if (!be) return ig_err_set(err, IG_ERR_NOMEM, "out of memory creating a compute backend");
    be->ctx = ctx;
    be->opts = o;
    be->pending = IG_OK;
    ig_backend_memory_init(be); /* before create: a backend's workspace is counted from the start */
    ig_status st =
        o.kind == IG_BACKEND_CPU ? ig_cpu_backend_create(be, err) : ig_cuda_backend_create(be, err);
    if (st != IG_OK) {
        ig_backend_memory_fini(be);
        ig_free(ctx, be);
        return st;
    }
    *out = be;
    return IG_OK;
}

void ig_backend_free(ig_backend *be) {
    if (!be) return;
    if (be->ops && be->ops->destroy) be->ops->destroy(be);
    ig_backend_memory_fini(be);
    ig_free(be->ctx, be);
}

const char *ig_backend_name(const ig_backend *be) {
    return be->name;
}

ig_backend_kind ig_backend_kind_of(const ig_backend *be) {
    return be->opts.kind;
}

ig_act_type ig_backend_act_type(const ig_backend *be) {
    return be->act_type;
}

size_t ig_backend_act_size(const ig_backend *be) {
    return be->act_type == IG_ACT_BF16 ? 2 : 4;
}

void ig_backend_raise(ig_backend *be, ig_status status, const char *fmt, ...) {
    if (be->pending != IG_OK) return;
    be->pending = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->pending_msg, sizeof be->pending_msg, fmt, ap);
    va_end(ap);
}

/* ---- memory ---------------------------------------------------------------------------------- */

ig_status ig_backend_alloc(ig_backend *be, size_t bytes, void **out, ig_err *err) {
    *out = NULL;
    ig_status st = be->ops->alloc(be, bytes, out, err);
    if (st != IG_OK || ig_backend_track(be, *out, bytes, IG_MEM_BUFFER)) return st;
    be->ops->release(be, *out);
    *out = NULL;
    return ig_err_set(err, IG_ERR_NOMEM, "out of memory recording a buffer of %zu bytes", bytes);
}

void ig_backend_release(ig_backend *be, void *p) {
    if (!p) return;
    ig_backend_untrack(be, p);
    be->ops->release(be, p);
}

static ig_status check_copy(const void *dst, const void *src, size_t bytes, const char *what,
                            ig_err *err) {
    if (bytes && (!dst || !src))
        return ig_err_set(err, IG_ERR_INVALID_ARG, "%s of %zu bytes with a NULL %s", what, bytes,
                          dst ? "source" : "destination");
    return IG_OK;
}

ig_status ig_backend_upload(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err) {
    ig_status st = check_copy(dst, src, bytes, "upload", err);
    return st != IG_OK || !bytes ? st : be->ops->upload(be, dst, src, bytes, err);
}

ig_status ig_backend_download(ig_backend *be, void *dst, const void *src, size_t bytes,
                              ig_err *err) {
    ig_status st = check_copy(dst, src, bytes, "download", err);
    return st != IG_OK || !bytes ? st : be->ops->download(be, dst, src, bytes, err);
}

ig_status ig_backend_copy(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err) {
    ig_status st = check_copy(dst, src, bytes, "copy", err);
    return st != IG_OK || !bytes || dst == src ? st : be->ops->copy(be, dst, src, bytes, err);
}

ig_status ig_backend_copy2d(ig_backend *be, void *dst, size_t dpitch, const void *src,
                            size_t spitch, size_t width, size_t rows, ig_err *err) {
    ig_status st = check_copy(dst, src, width * rows, "copy2d", err);
    if (st == IG_OK && rows > 1 && (dpitch < width || spitch < width))
        st = ig_err_set(err, IG_ERR_INVALID_ARG, "copy2d: pitches %zu and %zu under a width of %zu",
                        dpitch, spitch, width);
    if (st != IG_OK || !width || !rows) return st;
    return be->ops->copy2d(be, dst, dpitch, src, spitch, width, rows, err);
}

ig_status ig_backend_zero(ig_backend *be, void *p, size_t bytes, ig_err *err) {
    ig_status st = check_copy(p, p, bytes, "zero", err);
    return st != IG_OK || !bytes ? st : be->ops->zero(be, p, bytes, err);
}

ig_status ig_backend_upload_f32(ig_backend *be, void *dst, const float *src, size_t n,
                                ig_err *err) {
    ig_status st = check_copy(dst, src, n, "upload_f32", err);
    return st != IG_OK || !n ? st : be->ops->upload_f32(be, dst, src, n, err);
}

ig_status ig_backend_download_f32(ig_backend *be, float *dst, const void *src, size_t n,
                                  ig_err *err) {
    ig_status st = check_copy(dst, src, n, "download_f32", err);
    return st != IG_OK || !n ? st : be->ops->download_f32(be, dst, src, n, err);
}

ig_status ig_backend_sync(ig_backend *be, ig_err *err) {
    ig_status st = be->ops->sync(be, err);
    if (st != IG_OK) return st;
    if (be->pending != IG_OK) {
        st = be->pending;
        ig_err_set(err, st, "%s backend: %s", be->name, be->pending_msg);
        be->pending = IG_OK;
        be->pending_msg[0] = 0;
    }
    return st;
}

ig_status ig_backend_fence(ig_backend *be, void *stream, ig_err *err) {
    if (!stream) return ig_err_set(err, IG_ERR_INVALID_ARG, "a fence for a NULL stream");
    return be->ops->fence(be, stream, err);
}

/* ---- the operations table: names, what a backend has, the trace ----------------------------- */

/* Every operation: its enum value and its entry in ig_backend_ops, whose name is the operation's
 * (one line per operation: the names and the lookups below come from this list). */
#define IG_OPS(X)                                                                                  \
    X(IG_OP_ENCODER_FORWARD, encoder_forward)                                                      \
    X(IG_OP_ENCODER_BACKWARD, encoder_backward)                                                    \
    X(IG_OP_LAYERNORM_FORWARD, layernorm_forward)                                                  \
    X(IG_OP_RESIDUAL_LAYERNORM_FORWARD, residual_layernorm_forward)                                \
    X(IG_OP_LAYERNORM_BACKWARD, layernorm_backward)                                                \
    X(IG_OP_RMSNORM_FORWARD, rmsnorm_forward)                                                      \
    X(IG_OP_RESIDUAL_RMSNORM_FORWARD, residual_rmsnorm_forward)                                    \
    X(IG_OP_RMSNORM_BACKWARD, rmsnorm_backward)                                                    \
    X(IG_OP_MATMUL_FORWARD, matmul_forward)                                                        \
    X(IG_OP_MATMUL_BACKWARD, matmul_backward)                                                      \
    X(IG_OP_GELU_BIAS_FORWARD, gelu_bias_forward)                                                  \
    X(IG_OP_GELU_BIAS_BACKWARD, gelu_bias_backward)                                                \
    X(IG_OP_SWIGLU_FORWARD, swiglu_forward)                                                        \
    X(IG_OP_SWIGLU_BACKWARD, swiglu_backward)                                                      \
    X(IG_OP_ROPE_FORWARD, rope_forward)                                                            \
    X(IG_OP_ROPE_BACKWARD, rope_backward)                                                          \
    X(IG_OP_ATTENTION_FORWARD, attention_forward)                                                  \
    X(IG_OP_ATTENTION_BACKWARD, attention_backward)                                                \
    X(IG_OP_ATTENTION_CACHED, attention_cached)                                                    \
    X(IG_OP_CROSSENTROPY, crossentropy)                                                            \
    X(IG_OP_CE_MAX, ce_max)                                                                        \
    X(IG_OP_CE_SUMS, ce_sums)                                                                      \
    X(IG_OP_CE_FINISH, ce_finish)                                                                  \
    X(IG_OP_LAYERNORM_MODULATE_FORWARD, layernorm_modulate_forward)                                \
    X(IG_OP_LAYERNORM_MODULATE_BACKWARD, layernorm_modulate_backward)                              \
    X(IG_OP_GATE_RESIDUAL_FORWARD, gate_residual_forward)                                          \
    X(IG_OP_GATE_RESIDUAL_BACKWARD, gate_residual_backward)                                        \
    X(IG_OP_SILU_FORWARD, silu_forward)                                                            \
    X(IG_OP_SILU_BACKWARD, silu_backward)                                                          \
    X(IG_OP_MSE, mse)                                                                              \
    X(IG_OP_ADD, add)                                                                              \
    X(IG_OP_ADAMW, adamw)                                                                          \
    X(IG_OP_SUM_SQUARES, sum_squares)                                                              \
    X(IG_OP_SCALE, scale)                                                                          \
    X(IG_OP_EMA, ema)                                                                              \
    X(IG_OP_CONV2D_FORWARD, conv2d_forward)                                                        \
    X(IG_OP_CONV2D_BACKWARD, conv2d_backward)                                                      \
    X(IG_OP_GROUPNORM_FORWARD, groupnorm_forward)                                                  \
    X(IG_OP_GROUPNORM_BACKWARD, groupnorm_backward)                                                \
    X(IG_OP_UPSAMPLE2X_FORWARD, upsample2x_forward)                                                \
    X(IG_OP_UPSAMPLE2X_BACKWARD, upsample2x_backward)                                              \
    X(IG_OP_GEGLU_FORWARD, geglu_forward)                                                          \
    X(IG_OP_GEGLU_BACKWARD, geglu_backward)                                                        \
    X(IG_OP_T5_POSITION_BIAS, t5_position_bias)                                                    \
    X(IG_OP_ATTENTION_BIAS_FORWARD, attention_bias_forward)                                        \
    X(IG_OP_RELU_FORWARD, relu_forward)                                                            \
    X(IG_OP_CROSS_ATTENTION_FORWARD, cross_attention_forward)                                      \
    X(IG_OP_CROSS_ATTENTION_BACKWARD, cross_attention_backward)                                    \
    X(IG_OP_L1, l1)                                                                                \
    X(IG_OP_POSTERIOR_FORWARD, posterior_forward)                                                  \
    X(IG_OP_POSTERIOR_BACKWARD, posterior_backward)

static const struct {
    const char *name;
    size_t offset; /* of the entry in ig_backend_ops */
} op_table[IG_OP_COUNT] = {
#define OP_ROW(op, entry) [op] = {#entry, offsetof(ig_backend_ops, entry)},
    IG_OPS(OP_ROW)
#undef OP_ROW
};

const char *ig_op_name(ig_op op) {
    return (int)op >= 0 && op < IG_OP_COUNT ? op_table[op].name : NULL;
}

int ig_backend_supports(const ig_backend *be, ig_op op) {
    if ((int)op < 0 || op >= IG_OP_COUNT) return 0;
    /* the entry, whatever its parameters (every function pointer has the same representation) */
    void (*fn)(void);
    memcpy(&fn, (const char *)be->ops + op_table[op].offset, sizeof fn);
    return fn != NULL;
}

void ig_backend_set_trace(ig_backend *be, ig_backend_trace_fn fn, void *user) {
    be->trace = fn;
    be->trace_user = fn ? user : NULL;
}

/* The queue drained (a no-op on the CPU), so that a trace times one kernel; an error the wait
 * meets is kept for the next ig_backend_sync like a kernel's. */
static double trace_clock(ig_backend *be) {
    ig_err err = {0};
    if (be->ops->sync(be, &err) != IG_OK) ig_backend_raise(be, err.status, "%s", err.msg);
    return ig_now();
}

/* An operation the backend lacks: a programmer error (model code asks ig_backend_supports). */
static int unsupported(ig_backend *be, ig_op op) {
    assert(!"the backend lacks this operation: check ig_backend_supports first");
    ig_backend_raise(be, IG_ERR_UNSUPPORTED, "the %s backend has no %s operation", be->name,
                     ig_op_name(op));
    return 1;
}

/* The frame of every ig_kernel_*: BEGIN refuses an operation the backend lacks and starts the
 * trace's clock; END reports the time. Between them, the call through the table. */
#define KERNEL_BEGIN(be, op, entry)                                                                \
    if (!(be)->ops->entry && unsupported(be, op)) return;                                          \
    double trace_t0_ = (be)->trace ? trace_clock(be) : 0.0
#define KERNEL_END(be, op)                                                                         \
    if ((be)->trace) (be)->trace((be)->trace_user, op, trace_clock(be) - trace_t0_)

/* ---- operations: argument checks, then the backend's kernel ---------------------------------- */

void ig_kernel_encoder_forward(ig_backend *be, void *out, const int32_t *tokens, const void *wte,
                               const void *wpe, int B, int T, int C) {
    assert(out && tokens && wte && B >= 0 && T >= 0 && C >= 0);
    KERNEL_BEGIN(be, IG_OP_ENCODER_FORWARD, encoder_forward);
    be->ops->encoder_forward(be, out, tokens, wte, wpe, B, T, C);
    KERNEL_END(be, IG_OP_ENCODER_FORWARD);
}

void ig_kernel_encoder_backward(ig_backend *be, void *dwte, void *dwpe, const void *dout,
                                const int32_t *tokens, int B, int T, int C) {
    assert(dwte && dout && tokens && B >= 0 && T >= 0 && C >= 0);
    KERNEL_BEGIN(be, IG_OP_ENCODER_BACKWARD, encoder_backward);
    be->ops->encoder_backward(be, dwte, dwpe, dout, tokens, B, T, C);
    KERNEL_END(be, IG_OP_ENCODER_BACKWARD);
}

void ig_kernel_layernorm_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                 const void *inp, const void *w, const void *b, int N, int C,
                                 float eps) {
    assert(out && mean && rstd && inp && w && b && N >= 0 && C > 0 && eps > 0);
    KERNEL_BEGIN(be, IG_OP_LAYERNORM_FORWARD, layernorm_forward);
    be->ops->layernorm_forward(be, out, mean, rstd, inp, w, b, N, C, eps);
    KERNEL_END(be, IG_OP_LAYERNORM_FORWARD);
}

void ig_kernel_residual_layernorm_forward(ig_backend *be, void *residual, void *out, float *mean,
                                          float *rstd, const void *a, const void *b_in,
                                          const void *w, const void *b, int N, int C, float eps) {
    assert(residual && out && mean && rstd && a && b_in && w && b && N >= 0 && C > 0 && eps > 0);
    KERNEL_BEGIN(be, IG_OP_RESIDUAL_LAYERNORM_FORWARD, residual_layernorm_forward);
    be->ops->residual_layernorm_forward(be, residual, out, mean, rstd, a, b_in, w, b, N, C, eps);
    KERNEL_END(be, IG_OP_RESIDUAL_LAYERNORM_FORWARD);
}

void ig_kernel_layernorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                                  const void *inp, const void *w, const float *mean,
                                  const float *rstd, int N, int C) {
    assert(dinp && dw && db && dout && inp && w && mean && rstd && N >= 0 && C > 0);
    KERNEL_BEGIN(be, IG_OP_LAYERNORM_BACKWARD, layernorm_backward);
    be->ops->layernorm_backward(be, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    KERNEL_END(be, IG_OP_LAYERNORM_BACKWARD);
}

void ig_kernel_rmsnorm_forward(ig_backend *be, void *out, float *rstd, const void *inp,
                               const void *w, int N, int C, float eps) {
    assert(out && rstd && inp && w && N >= 0 && C > 0 && eps > 0);
    KERNEL_BEGIN(be, IG_OP_RMSNORM_FORWARD, rmsnorm_forward);
    be->ops->rmsnorm_forward(be, out, rstd, inp, w, N, C, eps);
    KERNEL_END(be, IG_OP_RMSNORM_FORWARD);
}

void ig_kernel_residual_rmsnorm_forward(ig_backend *be, void *residual, void *out, float *rstd,
                                        const void *a, const void *b, const void *w, int N, int C,
                                        float eps) {
    assert(residual && out && rstd && a && b && w && N >= 0 && C > 0 && eps > 0);
    KERNEL_BEGIN(be, IG_OP_RESIDUAL_RMSNORM_FORWARD, residual_rmsnorm_forward);
    be->ops->residual_rmsnorm_forward(be, residual, out, rstd, a, b, w, N, C, eps);
    KERNEL_END(be, IG_OP_RESIDUAL_RMSNORM_FORWARD);
}

void ig_kernel_rmsnorm_backward(ig_backend *be, void *dinp, void *dw, const void *dout,
                                const void *inp, const void *w, const float *rstd, int N, int C) {
    assert(dinp && dw && dout && inp && w && rstd && N >= 0 && C > 0);
    KERNEL_BEGIN(be, IG_OP_RMSNORM_BACKWARD, rmsnorm_backward);
    be->ops->rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd, N, C);
    KERNEL_END(be, IG_OP_RMSNORM_BACKWARD);
}

void ig_kernel_matmul_forward(ig_backend *be, void *out, const void *inp, const void *w,
                              ig_w_layout layout, const void *bias, int N, int C, int OC) {
    assert(out && inp && w && N >= 0 && C >= 0 && OC >= 0);
    assert(layout == IG_W_IN_OUT || layout == IG_W_OUT_IN);
    KERNEL_BEGIN(be, IG_OP_MATMUL_FORWARD, matmul_forward);
    be->ops->matmul_forward(be, out, inp, w, layout, bias, N, C, OC);
    KERNEL_END(be, IG_OP_MATMUL_FORWARD);
}

void ig_kernel_matmul_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                               const void *inp, const void *w, ig_w_layout layout, int N, int C,
                               int OC) {
    assert(dw && dout && inp && w && N >= 0 && C >= 0 && OC >= 0);
    assert(layout == IG_W_IN_OUT || layout == IG_W_OUT_IN);
    KERNEL_BEGIN(be, IG_OP_MATMUL_BACKWARD, matmul_backward);
    be->ops->matmul_backward(be, dinp, dw, dbias, dout, inp, w, layout, N, C, OC);
    KERNEL_END(be, IG_OP_MATMUL_BACKWARD);
}

void ig_kernel_gelu_bias_forward(ig_backend *be, void *out, const void *inp, const void *bias,
                                 int N, int C) {
    assert(out && inp && bias && N >= 0 && C >= 0);
    KERNEL_BEGIN(be, IG_OP_GELU_BIAS_FORWARD, gelu_bias_forward);
    be->ops->gelu_bias_forward(be, out, inp, bias, N, C);
    KERNEL_END(be, IG_OP_GELU_BIAS_FORWARD);
}

void ig_kernel_gelu_bias_backward(ig_backend *be, void *dinp, void *dbias, const void *dout,
                                  const void *inp, const void *bias, int N, int C) {
    assert(dinp && dbias && dout && inp && bias && N >= 0 && C >= 0);
    KERNEL_BEGIN(be, IG_OP_GELU_BIAS_BACKWARD, gelu_bias_backward);
    be->ops->gelu_bias_backward(be, dinp, dbias, dout, inp, bias, N, C);
    KERNEL_END(be, IG_OP_GELU_BIAS_BACKWARD);
}

void ig_kernel_swiglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N,
                              int F) {
    assert(out && gate && up && N >= 0 && F >= 0);
    KERNEL_BEGIN(be, IG_OP_SWIGLU_FORWARD, swiglu_forward);
    be->ops->swiglu_forward(be, out, gate, up, N, F);
    KERNEL_END(be, IG_OP_SWIGLU_FORWARD);
}

void ig_kernel_swiglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout,
                               const void *gate, const void *up, int N, int F) {
    assert(dgate && dup && dout && gate && up && N >= 0 && F >= 0 && dgate != dup);
    KERNEL_BEGIN(be, IG_OP_SWIGLU_BACKWARD, swiglu_backward);
    be->ops->swiglu_backward(be, dgate, dup, dout, gate, up, N, F);
    KERNEL_END(be, IG_OP_SWIGLU_BACKWARD);
}

void ig_kernel_rope_forward(ig_backend *be, void *qkv, int B, int T, int n_head, int n_kv_head,
                            int hs, int pos0, float theta) {
    assert(qkv && B >= 0 && T >= 0 && n_head > 0 && n_kv_head > 0 && hs > 0 && hs % 2 == 0);
    assert(pos0 >= 0 && theta > 0);
    KERNEL_BEGIN(be, IG_OP_ROPE_FORWARD, rope_forward);
    be->ops->rope_forward(be, qkv, B, T, n_head, n_kv_head, hs, pos0, theta);
    KERNEL_END(be, IG_OP_ROPE_FORWARD);
}

void ig_kernel_rope_backward(ig_backend *be, void *dqkv, int B, int T, int n_head, int n_kv_head,
                             int hs, int pos0, float theta) {
    assert(dqkv && B >= 0 && T >= 0 && n_head > 0 && n_kv_head > 0 && hs > 0 && hs % 2 == 0);
    assert(pos0 >= 0 && theta > 0);
    KERNEL_BEGIN(be, IG_OP_ROPE_BACKWARD, rope_backward);
    be->ops->rope_backward(be, dqkv, B, T, n_head, n_kv_head, hs, pos0, theta);
    KERNEL_END(be, IG_OP_ROPE_BACKWARD);
}

/* A shape the attention kernels can take (asserted: a bad one is a programmer error). Used only
 * in asserts, which NDEBUG removes: marked unused so that clang's -Wunused-function (make fuzz,
 * -Werror) accepts the release build. */
__attribute__((unused)) static inline int attention_shape_ok(const ig_attention_shape *s) {
    return s && s->B >= 0 && s->T >= 0 && s->n_head > 0 && s->n_kv_head > 0 &&
           s->n_head % s->n_kv_head == 0 && s->head_size > 0 &&
           (s->causal == 0 || s->causal == 1) &&
           s->scale - s->scale == 0.0f; /* finite (0: the default) */
}

void ig_kernel_attention_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                                 const int32_t *doc, const ig_attention_shape *s) {
    assert(out && lse && qkv && attention_shape_ok(s));
    KERNEL_BEGIN(be, IG_OP_ATTENTION_FORWARD, attention_forward);
    be->ops->attention_forward(be, out, lse, qkv, doc, s);
    KERNEL_END(be, IG_OP_ATTENTION_FORWARD);
}

void ig_kernel_attention_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                                  const void *out, const float *lse, const int32_t *doc,
                                  const ig_attention_shape *s) {
    assert(dqkv && dout && qkv && out && lse && attention_shape_ok(s));
    KERNEL_BEGIN(be, IG_OP_ATTENTION_BACKWARD, attention_backward);
    be->ops->attention_backward(be, dqkv, dout, qkv, out, lse, doc, s);
    KERNEL_END(be, IG_OP_ATTENTION_BACKWARD);
}

void ig_kernel_attention_cached(ig_backend *be, void *out, const void *q, const void *k,
                                const void *v, int pos0, int Tmax, const ig_attention_shape *s) {
    assert(out && q && k && v && attention_shape_ok(s) && s->causal == 1);
    assert(pos0 >= 0 && pos0 + s->T <= Tmax);
    KERNEL_BEGIN(be, IG_OP_ATTENTION_CACHED, attention_cached);
    be->ops->attention_cached(be, out, q, k, v, pos0, Tmax, s);
    KERNEL_END(be, IG_OP_ATTENTION_CACHED);
}

void ig_kernel_crossentropy(ig_backend *be, float *losses, void *logits, const int32_t *targets,
                            const float *dloss, int N, int V, int Vp) {
    assert(losses && logits && targets && N >= 0 && V > 0 && Vp >= V);
    KERNEL_BEGIN(be, IG_OP_CROSSENTROPY, crossentropy);
    be->ops->crossentropy(be, losses, logits, targets, dloss, N, V, Vp);
    KERNEL_END(be, IG_OP_CROSSENTROPY);
}

void ig_kernel_ce_max(ig_backend *be, float *rowmax, const void *logits, int N, int Vvalid,
                      int Vl) {
    assert(rowmax && logits && N >= 0 && Vvalid >= 0 && Vl >= Vvalid && Vl > 0);
    KERNEL_BEGIN(be, IG_OP_CE_MAX, ce_max);
    be->ops->ce_max(be, rowmax, logits, N, Vvalid, Vl);
    KERNEL_END(be, IG_OP_CE_MAX);
}

void ig_kernel_ce_sums(ig_backend *be, float *stats, const void *logits, const float *rowmax,
                       const int32_t *targets, int N, int Vvalid, int Vl) {
    assert(stats && logits && rowmax && targets && N >= 0 && Vvalid >= 0 && Vl >= Vvalid && Vl > 0);
    KERNEL_BEGIN(be, IG_OP_CE_SUMS, ce_sums);
    be->ops->ce_sums(be, stats, logits, rowmax, targets, N, Vvalid, Vl);
    KERNEL_END(be, IG_OP_CE_SUMS);
}

void ig_kernel_ce_finish(ig_backend *be, float *losses, void *logits, const float *rowmax,
                         const float *stats, const int32_t *targets, const float *dloss, int N,
                         int Vvalid, int Vl) {
    assert(losses && logits && rowmax && stats && targets && N >= 0 && Vvalid >= 0 &&
           Vl >= Vvalid && Vl > 0);
    KERNEL_BEGIN(be, IG_OP_CE_FINISH, ce_finish);
    be->ops->ce_finish(be, losses, logits, rowmax, stats, targets, dloss, N, Vvalid, Vl);
    KERNEL_END(be, IG_OP_CE_FINISH);
}

/* DiT's per-sample row layout: rows row0 .. row0 + N - 1 of samples of rows_per_sample rows, the
 * per-sample vectors ld >= C apart; the global row index stays within int */
static inline int sample_rows_ok(int N, int C, int ld, int row0, int rows_per_sample) {
    return N >= 0 && C > 0 && ld >= C && row0 >= 0 && rows_per_sample > 0 &&
           (long long)row0 + N <= INT_MAX;
}

void ig_kernel_layernorm_modulate_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                          const void *inp, const void *shift, const void *scale,
                                          int ld, int N, int C, int row0, int rows_per_sample,
                                          float eps) {
    assert(out && mean && rstd && inp && shift && scale && eps > 0);
    assert(sample_rows_ok(N, C, ld, row0, rows_per_sample));
    KERNEL_BEGIN(be, IG_OP_LAYERNORM_MODULATE_FORWARD, layernorm_modulate_forward);
    if (N) {
        be->ops->layernorm_modulate_forward(be, out, mean, rstd, inp, shift, scale, ld, N, C, row0,
                                            rows_per_sample, eps);
    }
    KERNEL_END(be, IG_OP_LAYERNORM_MODULATE_FORWARD);
}

void ig_kernel_layernorm_modulate_backward(ig_backend *be, void *dinp, void *dshift, void *dscale,
                                           const void *dout, const void *inp, const void *scale,
                                           int ld, const float *mean, const float *rstd, int N,
                                           int C, int row0, int rows_per_sample) {
    assert(dinp && dshift && dscale && dout && inp && scale && mean && rstd);
    assert(sample_rows_ok(N, C, ld, row0, rows_per_sample));
    KERNEL_BEGIN(be, IG_OP_LAYERNORM_MODULATE_BACKWARD, layernorm_modulate_backward);
    if (N) {
        be->ops->layernorm_modulate_backward(be, dinp, dshift, dscale, dout, inp, scale, ld, mean,
                                             rstd, N, C, row0, rows_per_sample);
    }
    KERNEL_END(be, IG_OP_LAYERNORM_MODULATE_BACKWARD);
}

void ig_kernel_gate_residual_forward(ig_backend *be, void *out, const void *res, const void *x,
                                     const void *gate, int ld, int N, int C, int row0,
                                     int rows_per_sample) {
    assert(out && res && x && gate && sample_rows_ok(N, C, ld, row0, rows_per_sample));
    KERNEL_BEGIN(be, IG_OP_GATE_RESIDUAL_FORWARD, gate_residual_forward);
    if (N) be->ops->gate_residual_forward(be, out, res, x, gate, ld, N, C, row0, rows_per_sample);
    KERNEL_END(be, IG_OP_GATE_RESIDUAL_FORWARD);
}

void ig_kernel_gate_residual_backward(ig_backend *be, void *dx, void *dgate, const void *dout,
                                      const void *x, const void *gate, int ld, int N, int C,
                                      int row0, int rows_per_sample) {
    assert(dx && dgate && dout && x && gate && sample_rows_ok(N, C, ld, row0, rows_per_sample));
    KERNEL_BEGIN(be, IG_OP_GATE_RESIDUAL_BACKWARD, gate_residual_backward);
    if (N) {
        be->ops->gate_residual_backward(be, dx, dgate, dout, x, gate, ld, N, C, row0,
                                        rows_per_sample);
    }
    KERNEL_END(be, IG_OP_GATE_RESIDUAL_BACKWARD);
}

void ig_kernel_silu_forward(ig_backend *be, void *out, const void *inp, size_t n) {
    assert((out && inp) || n == 0);
    KERNEL_BEGIN(be, IG_OP_SILU_FORWARD, silu_forward);
    if (n) be->ops->silu_forward(be, out, inp, n);
    KERNEL_END(be, IG_OP_SILU_FORWARD);
}

void ig_kernel_relu_forward(ig_backend *be, void *out, const void *inp, size_t n) {
    assert((out && inp) || n == 0);
    KERNEL_BEGIN(be, IG_OP_RELU_FORWARD, relu_forward);
    if (n) be->ops->relu_forward(be, out, inp, n);
    KERNEL_END(be, IG_OP_RELU_FORWARD);
}

void ig_kernel_silu_backward(ig_backend *be, void *dinp, const void *dout, const void *inp,
                             size_t n) {
    assert((dinp && dout && inp) || n == 0);
    KERNEL_BEGIN(be, IG_OP_SILU_BACKWARD, silu_backward);
    if (n) be->ops->silu_backward(be, dinp, dout, inp, n);
    KERNEL_END(be, IG_OP_SILU_BACKWARD);
}

void ig_kernel_mse(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
                   int N, int K, float grad_scale) {
    assert(losses && pred && target && N >= 0 && K > 0);
    KERNEL_BEGIN(be, IG_OP_MSE, mse);
    if (N) be->ops->mse(be, losses, dpred, pred, target, N, K, grad_scale);
    KERNEL_END(be, IG_OP_MSE);
}

void ig_kernel_add(ig_backend *be, void *out, const void *a, const void *b, size_t n) {
    assert((out && a && b) || n == 0);
    KERNEL_BEGIN(be, IG_OP_ADD, add);
    if (n) be->ops->add(be, out, a, b, n);
    KERNEL_END(be, IG_OP_ADD);
}

void ig_kernel_adamw(ig_backend *be, void *params, float *master, const void *grads, float *m,
                     float *v, size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, float grad_scale, int step) {
    assert(params && grads && m && v && step >= 1);
    KERNEL_BEGIN(be, IG_OP_ADAMW, adamw);
    be->ops->adamw(be, params, master, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
                   grad_scale, step);
    KERNEL_END(be, IG_OP_ADAMW);
}

double ig_kernel_sum_squares(ig_backend *be, const void *x, size_t n) {
    assert(x || n == 0);
    if (!be->ops->sum_squares && unsupported(be, IG_OP_SUM_SQUARES)) return 0.0;
    double trace_t0_ = be->trace ? trace_clock(be) : 0.0;
    double r = n ? be->ops->sum_squares(be, x, n) : 0.0;
    KERNEL_END(be, IG_OP_SUM_SQUARES);
    return r;
}

void ig_kernel_scale(ig_backend *be, void *x, size_t n, float s) {
    assert(x || n == 0);
    KERNEL_BEGIN(be, IG_OP_SCALE, scale);
    if (n) be->ops->scale(be, x, n, s);
    KERNEL_END(be, IG_OP_SCALE);
}

void ig_kernel_ema(ig_backend *be, float *ema, const float *master, const void *params, size_t n,
                   float decay) {
    assert((ema && (master || params)) || n == 0);
    KERNEL_BEGIN(be, IG_OP_EMA, ema);
    if (n) be->ops->ema(be, ema, master, params, n, decay);
    KERNEL_END(be, IG_OP_EMA);
}

/* Cross-attention's shape: DiT's rows (sample_rows_ok, the channels n_head * head_size) and Tk
 * keys per sample; the sizes of a sample's [Tk, 2C] keys and values stay within int. Used only
 * in asserts (marked unused as attention_shape_ok). */
__attribute__((unused)) static inline int cross_attention_ok(int N, int row0, int rows_per_sample,
                                                             int Tk, int n_head, int head_size) {
    long long C = (long long)n_head * head_size;
    return n_head > 0 && head_size > 0 && Tk > 0 && C <= INT_MAX / 2 &&
           sample_rows_ok(N, (int)C, (int)C, row0, rows_per_sample);
}

void ig_kernel_cross_attention_forward(ig_backend *be, void *out, float *lse, const void *q,
                                       const void *kv, const int32_t *klen, int N, int row0,
                                       int rows_per_sample, int Tk, int n_head, int head_size) {
    assert(out && lse && q && kv && klen);
    assert(cross_attention_ok(N, row0, rows_per_sample, Tk, n_head, head_size));
    KERNEL_BEGIN(be, IG_OP_CROSS_ATTENTION_FORWARD, cross_attention_forward);
    if (N) {
        be->ops->cross_attention_forward(be, out, lse, q, kv, klen, N, row0, rows_per_sample, Tk,
                                         n_head, head_size);
    }
    KERNEL_END(be, IG_OP_CROSS_ATTENTION_FORWARD);
}

void ig_kernel_cross_attention_backward(ig_backend *be, void *dq, void *dkv, const void *dout,
                                        const void *q, const void *kv, const void *out,
                                        const float *lse, const int32_t *klen, int N, int row0,
                                        int rows_per_sample, int Tk, int n_head, int head_size) {
    assert(dq && dkv && dout && q && kv && out && lse && klen);
    assert(cross_attention_ok(N, row0, rows_per_sample, Tk, n_head, head_size));
    KERNEL_BEGIN(be, IG_OP_CROSS_ATTENTION_BACKWARD, cross_attention_backward);
    if (N) {
        be->ops->cross_attention_backward(be, dq, dkv, dout, q, kv, out, lse, klen, N, row0,
                                          rows_per_sample, Tk, n_head, head_size);
    }
    KERNEL_END(be, IG_OP_CROSS_ATTENTION_BACKWARD);
}

/* ---- Stable Diffusion's VAE ----------------------------------------------------------------- */

/* A convolution the kernels can take (asserted: a bad one is a programmer error). Element counts
 * stay within what size_t indexes; each padding is below its kernel's size. */
__attribute__((unused)) static inline int conv2d_shape_ok(const ig_conv2d_shape *s) {
    return s && s->N >= 0 && s->H > 0 && s->W > 0 && s->C > 0 && s->OC > 0 && s->KH > 0 &&
           s->KW > 0 && s->stride > 0 && s->pad_top >= 0 && s->pad_top < s->KH &&
           s->pad_bottom >= 0 && s->pad_bottom < s->KH && s->pad_left >= 0 && s->pad_left < s->KW &&
           s->pad_right >= 0 && s->pad_right < s->KW &&
           (long long)s->H + s->pad_top + s->pad_bottom >= s->KH &&
           (long long)s->W + s->pad_left + s->pad_right >= s->KW;
}

void ig_kernel_conv2d_forward(ig_backend *be, void *out, const void *inp, const void *w,
                              const void *bias, const ig_conv2d_shape *s) {
    assert(out && inp && w && conv2d_shape_ok(s));
    KERNEL_BEGIN(be, IG_OP_CONV2D_FORWARD, conv2d_forward);
    if (s->N) be->ops->conv2d_forward(be, out, inp, w, bias, s);
    KERNEL_END(be, IG_OP_CONV2D_FORWARD);
}

void ig_kernel_conv2d_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                               const void *inp, const void *w, const ig_conv2d_shape *s) {
    assert(dw && dout && inp && w && conv2d_shape_ok(s));
    KERNEL_BEGIN(be, IG_OP_CONV2D_BACKWARD, conv2d_backward);
    if (s->N) be->ops->conv2d_backward(be, dinp, dw, dbias, dout, inp, w, s);
    KERNEL_END(be, IG_OP_CONV2D_BACKWARD);
}

__attribute__((unused)) static inline int groupnorm_ok(int N, int HW, int C, int G, int silu) {
    return N >= 0 && HW > 0 && C > 0 && G > 0 && C % G == 0 && (silu == 0 || silu == 1);
}

void ig_kernel_groupnorm_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                 const void *inp, const void *w, const void *b, int N, int HW,
                                 int C, int G, float eps, int silu) {
    assert(out && mean && rstd && inp && w && b && eps > 0 && groupnorm_ok(N, HW, C, G, silu));
    KERNEL_BEGIN(be, IG_OP_GROUPNORM_FORWARD, groupnorm_forward);
    if (N) be->ops->groupnorm_forward(be, out, mean, rstd, inp, w, b, N, HW, C, G, eps, silu);
    KERNEL_END(be, IG_OP_GROUPNORM_FORWARD);
}

void ig_kernel_groupnorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                                  const void *inp, const void *w, const void *b, const float *mean,
                                  const float *rstd, int N, int HW, int C, int G, int silu) {
    assert(dinp && dw && db && dout && inp && w && (b || !silu) && mean && rstd);
    assert(groupnorm_ok(N, HW, C, G, silu));
    KERNEL_BEGIN(be, IG_OP_GROUPNORM_BACKWARD, groupnorm_backward);
    if (N)
        be->ops->groupnorm_backward(be, dinp, dw, db, dout, inp, w, b, mean, rstd, N, HW, C, G,
                                    silu);
    KERNEL_END(be, IG_OP_GROUPNORM_BACKWARD);
}

void ig_kernel_upsample2x_forward(ig_backend *be, void *out, const void *inp, int N, int H, int W,
                                  int C) {
    assert(out && inp && N >= 0 && H >= 0 && W >= 0 && C >= 0);
    KERNEL_BEGIN(be, IG_OP_UPSAMPLE2X_FORWARD, upsample2x_forward);
    if (N && H && W && C) be->ops->upsample2x_forward(be, out, inp, N, H, W, C);
    KERNEL_END(be, IG_OP_UPSAMPLE2X_FORWARD);
}

void ig_kernel_upsample2x_backward(ig_backend *be, void *dinp, const void *dout, int N, int H,
                                   int W, int C) {
    assert(dinp && dout && dinp != dout && N >= 0 && H >= 0 && W >= 0 && C >= 0);
    KERNEL_BEGIN(be, IG_OP_UPSAMPLE2X_BACKWARD, upsample2x_backward);
    if (N && H && W && C) be->ops->upsample2x_backward(be, dinp, dout, N, H, W, C);
    KERNEL_END(be, IG_OP_UPSAMPLE2X_BACKWARD);
}

void ig_kernel_l1(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
                  int N, int K, float grad_scale) {
    assert(losses && pred && target && N >= 0 && K > 0);
    KERNEL_BEGIN(be, IG_OP_L1, l1);
    if (N) be->ops->l1(be, losses, dpred, pred, target, N, K, grad_scale);
    KERNEL_END(be, IG_OP_L1);
}

void ig_kernel_posterior_forward(ig_backend *be, void *z, float *kl, const void *moments,
                                 const void *eps, int N, int C) {
    assert(z && moments && eps && z != moments && N >= 0 && C > 0);
    KERNEL_BEGIN(be, IG_OP_POSTERIOR_FORWARD, posterior_forward);
    if (N) be->ops->posterior_forward(be, z, kl, moments, eps, N, C);
    KERNEL_END(be, IG_OP_POSTERIOR_FORWARD);
}

void ig_kernel_posterior_backward(ig_backend *be, void *dmoments, const void *dz,
                                  const void *moments, const void *eps, int N, int C,
                                  float kl_scale) {
    assert(dmoments && dz && moments && eps && dmoments != dz && dmoments != moments && N >= 0 &&
           C > 0);
    KERNEL_BEGIN(be, IG_OP_POSTERIOR_BACKWARD, posterior_backward);
    if (N) be->ops->posterior_backward(be, dmoments, dz, moments, eps, N, C, kl_scale);
    KERNEL_END(be, IG_OP_POSTERIOR_BACKWARD);
}

/* ---- T5 -------------------------------------------------------------------------------------- */

void ig_kernel_geglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N,
                             int F) {
    assert(out && gate && up && N >= 0 && F >= 0);
    KERNEL_BEGIN(be, IG_OP_GEGLU_FORWARD, geglu_forward);
    if (N && F) be->ops->geglu_forward(be, out, gate, up, N, F);
    KERNEL_END(be, IG_OP_GEGLU_FORWARD);
}

void ig_kernel_geglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout,
                              const void *gate, const void *up, int N, int F) {
    assert(dgate && dup && dout && gate && up && N >= 0 && F >= 0 && dgate != dup);
    KERNEL_BEGIN(be, IG_OP_GEGLU_BACKWARD, geglu_backward);
    if (N && F) be->ops->geglu_backward(be, dgate, dup, dout, gate, up, N, F);
    KERNEL_END(be, IG_OP_GEGLU_BACKWARD);
}

/* buckets that the bucket function can take: each half (or the one direction) has at least one
 * exact bucket, and max_distance lies beyond them (its logarithm divides) */
__attribute__((unused)) static inline int t5_buckets_ok(int num_buckets, int max_distance,
                                                        int bidirectional) {
    int half = bidirectional ? num_buckets / 2 : num_buckets;
    return (bidirectional == 0 || bidirectional == 1) && half >= 2 &&
           (!bidirectional || num_buckets % 2 == 0) && max_distance > half / 2;
}

void ig_kernel_t5_position_bias(ig_backend *be, void *bias, const void *table, int T, int n_head,
                                int num_buckets, int max_distance, int bidirectional) {
    assert(bias && table && T >= 0 && n_head > 0);
    assert(t5_buckets_ok(num_buckets, max_distance, bidirectional));
    KERNEL_BEGIN(be, IG_OP_T5_POSITION_BIAS, t5_position_bias);
    if (T)
        be->ops->t5_position_bias(be, bias, table, T, n_head, num_buckets, max_distance,
                                  bidirectional);
    KERNEL_END(be, IG_OP_T5_POSITION_BIAS);
}

void ig_kernel_attention_bias_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                                      const void *bias, const int32_t *klen,
                                      const ig_attention_shape *s) {
    assert(out && qkv && attention_shape_ok(s));
    KERNEL_BEGIN(be, IG_OP_ATTENTION_BIAS_FORWARD, attention_bias_forward);
    if (s->B && s->T) be->ops->attention_bias_forward(be, out, lse, qkv, bias, klen, s);
    KERNEL_END(be, IG_OP_ATTENTION_BIAS_FORWARD);
}

/* ---- the CUDA runtime, in words -------------------------------------------------------------- */

char *ig_cuda_describe(char *buf, size_t cap) {
    ig_cuda_info ci;
    ig_cuda_query(&ci);
    if (!ci.compiled) {
        snprintf(buf, cap, "CUDA: not built (nvcc was not found when ingot was configured)");
    } else if (ci.devices == 0) {
        snprintf(buf, cap, "CUDA: built for %s (runtime %d.%d); no device: %s", ci.archs,
                 ci.runtime_version / 1000, ci.runtime_version % 1000 / 10, ci.why);
    } else {
        snprintf(buf, cap,
                 "CUDA: built for %s (runtime %d.%d, driver %d.%d); %d device%s, 0: %s "
                 "(sm_%d%d, %.1f GiB)",
                 ci.archs, ci.runtime_version / 1000, ci.runtime_version % 1000 / 10,
                 ci.driver_version / 1000, ci.driver_version % 1000 / 10, ci.devices,
                 ci.devices == 1 ? "" : "s", ci.name, ci.cc_major, ci.cc_minor,
                 (double)ci.memory_bytes / (double)(1ull << 30));
    }
    return buf;
}
