/* backend.h - the public API of ingot's compute backends (kernels/): a small table of operations
 * over memory the backend owns, which the trainer's model code calls and never looks behind
 * (ggml's backend interface in spirit). kernels/cpu/ fills it with a plain reference kernel and a
 * fast kernel per operation; kernels/cuda/ fills it on the GPU and is checked against the CPU
 * reference. Model code includes this header only.
 *
 * Operations, by model family: GPT-2 uses the encoder, LayerNorm, matmul, bias + GeLU, attention
 * (multi-head, causal) and cross-entropy; Llama uses RMSNorm, matmul without bias, SwiGLU, RoPE
 * and grouped-query causal attention; DiT (adaLN-Zero) uses LayerNorm without affine parameters
 * fused with its per-sample modulation, the gated residual, SiLU on the conditioning, matmul, bias
 * + GeLU, non-causal attention (the same kernel with causal 0) and the MSE loss; a
 * text-conditioned DiT (PixArt-alpha) adds cross-attention from its image tokens to its caption's.
 * Stable Diffusion's VAE (AutoencoderKL, applied per frame) uses 2-D convolution, GroupNorm fused
 * with SiLU, nearest 2x upsampling, the add and (in its mid block) single-head attention, and to
 * train it the posterior's sample with its KL term and the L1 loss; a T5
 * v1.1 encoder uses RMSNorm (T5's layer norm is the same computation), matmul, gated tanh-GeLU
 * (GeGLU; T5 v1.0: ReLU) and attention without scaling plus a bucketed relative position bias and
 * a key mask.
 * A backend may lack an operation: ig_backend_supports says which it has (ig_op names each).
 *
 * Memory. Tensors live in buffers from ig_backend_alloc and are named by device pointers: on the
 * CPU they are host addresses, on a GPU device addresses. Model code does arithmetic on them
 * (offsets in elements of the backend's types, see ig_backend_act_size) but never dereferences
 * them; ig_backend_upload / ig_backend_download copy between host and backend memory.
 *
 * Types. Parameters, gradients and activations ("act" tensors, void *) have the backend's
 * activation type: fp32 or bf16 (the CPU's bf16 kernels widen their tensors to fp32 for the fp32
 * kernels and round each output once: the CUDA backend's rounding points, kernels/cpu/cpu_bf16.c).
 * Normalisation statistics (mean, rstd), attention's lse, losses, the optimizer's moments and
 * master weights are always fp32 (float *). Token and document ids are int32. Kernels compute in
 * fp32 (or wider) whatever the act type and round each output once.
 *
 * Layouts (row-major, as Hugging Face stores them):
 *   a Conv1D weight is [in, out] and y = x @ W + b (IG_W_IN_OUT); an nn.Linear weight, and the
 *   tied embedding used as the output layer ([Vp, C]), is [out, in] and y = x @ W^T (IG_W_OUT_IN);
 *   packed attention rows, qkv [B, T, (n_head + 2 n_kv_head) hs]: the n_head query heads, then
 *   the n_kv_head key heads, then the n_kv_head value heads, each hs contiguous (GPT-2: n_kv_head
 *   = n_head, the [B, T, 3C] of q, k, v); attention's output [B, T, n_head hs];
 *   N = B * T rows wherever a kernel works per token.
 *
 * Accumulation. Parameter gradients (dW, db, dwte, dwpe, LayerNorm and RMSNorm dw/db) are added
 * to (+=), so micro-batches accumulate; each kernel says whether an input gradient is overwritten
 * or added (the normalisations add: dinp is the residual stream's gradient).
 *
 * Determinism. For the same inputs every kernel gives the same bits whatever the thread count and
 * on every run: reductions are split by fixed chunks and combined in a fixed order, never by
 * atomics (grouped-query attention sums a key/value head's gradient over its query heads in head
 * order). The CPU and CUDA backends agree to a tolerance, not to the bit.
 *
 * Thread-safety. One thread drives a backend; the CPU backend parallelises inside each kernel
 * through the context's pool. Kernels may run asynchronously (a GPU queue): ig_backend_sync waits
 * and reports an error raised meanwhile. The CPU backend runs synchronously.
 */
#ifndef INGOT_KERNELS_BACKEND_H
#define INGOT_KERNELS_BACKEND_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== backends ============================================================================== */

typedef enum ig_backend_kind { IG_BACKEND_CPU = 0, IG_BACKEND_CUDA } ig_backend_kind;

typedef enum ig_act_type { IG_ACT_F32 = 0, IG_ACT_BF16 } ig_act_type;

typedef struct ig_backend_opts {
    ig_backend_kind kind; /* default IG_BACKEND_CPU */
    int reference;        /* CPU: the plain reference kernels instead of the fast ones */
    ig_act_type act_type; /* default IG_ACT_F32 */
    int device;           /* CUDA: the device ordinal */
} ig_backend_opts;

ig_backend_opts ig_backend_opts_default(void);

typedef struct ig_backend ig_backend;

/* IG_ERR_UNSUPPORTED for a kind this build or machine cannot run (CUDA without nvcc or device),
 * naming why. The CPU backend threads through ctx's pool. */
ig_status ig_backend_create(ig_backend **out, ig_ctx *ctx, const ig_backend_opts *opts,
                            ig_err *err);
void ig_backend_free(ig_backend *be); /* NULL is a no-op */

const char *ig_backend_name(const ig_backend *be); /* "cpu", "cpu-reference", "cuda" */
ig_backend_kind ig_backend_kind_of(const ig_backend *be);
ig_act_type ig_backend_act_type(const ig_backend *be);
size_t ig_backend_act_size(const ig_backend *be); /* bytes per act element: 4 or 2 */

/* ==== memory ================================================================================ */

/* A zeroed buffer of bytes, aligned to 256 bytes. IG_ERR_NOMEM names the bytes asked for and,
 * where the backend knows it, what is free. */
ig_status ig_backend_alloc(ig_backend *be, size_t bytes, void **out, ig_err *err);
void ig_backend_release(ig_backend *be, void *p); /* NULL is a no-op */
ig_status ig_backend_upload(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err);
ig_status ig_backend_download(ig_backend *be, void *dst, const void *src, size_t bytes,
                              ig_err *err);
ig_status ig_backend_zero(ig_backend *be, void *p, size_t bytes, ig_err *err);
/* Backend memory to backend memory, queued like a kernel (dst == src is a no-op; other overlaps
 * are not allowed). */
ig_status ig_backend_copy(ig_backend *be, void *dst, const void *src, size_t bytes, ig_err *err);
/* A 2-D copy in backend memory, queued like a kernel: `rows` rows of `width` bytes, row r from
 * src + r spitch to dst + r dpitch (pitches >= width; the regions must not overlap): the
 * gathers and scatters of columns that all-to-alls need. */
ig_status ig_backend_copy2d(ig_backend *be, void *dst, size_t dpitch, const void *src,
                            size_t spitch, size_t width, size_t rows, ig_err *err);
/* Host fp32 <-> backend act type (a copy, or a conversion to bf16 with round-to-nearest-even). */
ig_status ig_backend_upload_f32(ig_backend *be, void *dst, const float *src, size_t n, ig_err *err);
ig_status ig_backend_download_f32(ig_backend *be, float *dst, const void *src, size_t n,
                                  ig_err *err);
/* Waits for queued kernels; returns an error a kernel raised meanwhile. */
ig_status ig_backend_sync(ig_backend *be, ig_err *err);
/* Makes another queue of the device - stream, a cudaStream_t of be's device (NCCL's) - wait for
 * every kernel queued on be so far, without the host waiting: what that queue runs next sees
 * their results while be goes on with the kernels after them. Nothing to do on the CPU. */
ig_status ig_backend_fence(ig_backend *be, void *stream, ig_err *err);

/* ==== memory accounting ====================================================================== */

/* What a backend holds, counted as it hands memory out (kernels/backend_memory.c): the buffers of
 * ig_backend_alloc not yet released, and its own workspace - the CPU kernels' scratch (in bf16 also
 * the fp32 arena its kernels widen into, kept between calls at the largest call's size),
 * the CUDA backend's cuBLASLt workspace and kernel scratch - each now and at its peak, and the most
 * of both held at once; and the device's memory. Memory that libraries take for themselves (the
 * CUDA context, NCCL's buffers, oneDNN's scratchpad, the host's staging) is not counted. */
typedef struct ig_backend_memory {
    uint64_t buffers, buffers_peak;     /* bytes of ig_backend_alloc's live buffers */
    uint64_t workspace, workspace_peak; /* bytes of the backend's own workspace */
    uint64_t peak;                      /* the most buffers + workspace held at once */
    uint64_t blocks;                    /* live blocks of both kinds */
    /* The device's memory: limit is what it has for this process (CUDA: the device's total; CPU:
     * what the process may take now: MemAvailable, the cgroup's limit, ulimit -v, the smallest)
     * and free what is free now (CUDA: cudaMemGetInfo's; CPU: the limit less a tenth kept free);
     * what names the figure ("the cgroup's memory limit", "CUDA device 0"). 0: unknown. */
    uint64_t device_limit, device_free;
    const char *device_what;
} ig_backend_memory;

/* The figures now. Any thread. */
void ig_backend_memory_info(ig_backend *be, ig_backend_memory *out);
/* The peaks start again from what is held now (to measure one phase, a training step). */
void ig_backend_memory_reset_peak(ig_backend *be);

/* ==== the operations table ================================================================== */

/* The operations of ig_kernel_*, one each, for asking what a backend has and for naming an
 * operation (a trace, a message). A backend may lack an operation (an entry of its table left
 * empty): calling it is a programmer error (it asserts, and in a release build raises
 * IG_ERR_UNSUPPORTED for the next ig_backend_sync and does nothing), so model code that needs an
 * operation asks ig_backend_supports first, when it is built. The CPU backend has every
 * operation, and so has the CUDA backend where its toolkit has cuDNN (built without it, it lacks
 * conv2d_forward and conv2d_backward). The values are not stable across versions: store names,
 * not numbers. */
typedef enum ig_op {
    IG_OP_ENCODER_FORWARD = 0,
    IG_OP_ENCODER_BACKWARD,
    IG_OP_LAYERNORM_FORWARD,
    IG_OP_RESIDUAL_LAYERNORM_FORWARD,
    IG_OP_LAYERNORM_BACKWARD,
    IG_OP_RMSNORM_FORWARD,
    IG_OP_RESIDUAL_RMSNORM_FORWARD,
    IG_OP_RMSNORM_BACKWARD,
    IG_OP_MATMUL_FORWARD,
    IG_OP_MATMUL_BACKWARD,
    IG_OP_GELU_BIAS_FORWARD,
    IG_OP_GELU_BIAS_BACKWARD,
    IG_OP_SWIGLU_FORWARD,
    IG_OP_SWIGLU_BACKWARD,
    IG_OP_ROPE_FORWARD,
    IG_OP_ROPE_BACKWARD,
    IG_OP_ATTENTION_FORWARD,
    IG_OP_ATTENTION_BACKWARD,
    IG_OP_ATTENTION_CACHED,
    IG_OP_CROSSENTROPY,
    IG_OP_CE_MAX,
    IG_OP_CE_SUMS,
    IG_OP_CE_FINISH,
    IG_OP_LAYERNORM_MODULATE_FORWARD,
    IG_OP_LAYERNORM_MODULATE_BACKWARD,
    IG_OP_GATE_RESIDUAL_FORWARD,
    IG_OP_GATE_RESIDUAL_BACKWARD,
    IG_OP_SILU_FORWARD,
    IG_OP_SILU_BACKWARD,
    IG_OP_MSE,
    IG_OP_ADD,
    IG_OP_ADAMW,
    IG_OP_SUM_SQUARES,
    IG_OP_SCALE,
    IG_OP_EMA,
    IG_OP_CONV2D_FORWARD,
    IG_OP_CONV2D_BACKWARD,
    IG_OP_GROUPNORM_FORWARD,
    IG_OP_GROUPNORM_BACKWARD,
    IG_OP_UPSAMPLE2X_FORWARD,
    IG_OP_UPSAMPLE2X_BACKWARD,
    IG_OP_GEGLU_FORWARD,
    IG_OP_GEGLU_BACKWARD,
    IG_OP_T5_POSITION_BIAS,
    IG_OP_ATTENTION_BIAS_FORWARD,
    IG_OP_RELU_FORWARD,
    IG_OP_CROSS_ATTENTION_FORWARD,
    IG_OP_CROSS_ATTENTION_BACKWARD,
    IG_OP_L1,
    IG_OP_POSTERIOR_FORWARD,
    IG_OP_POSTERIOR_BACKWARD,
    IG_OP_COUNT
} ig_op;

/* 1 when be has op, else 0 (also 0 for a value outside the enum). */
int ig_backend_supports(const ig_backend *be, ig_op op);
/* The operation's name, its function's without ig_kernel_ ("attention_forward"), static; NULL
 * for a value outside the enum. */
const char *ig_op_name(ig_op op);

/* A per-kernel trace, as ggml's eval callback: with fn set, every ig_kernel_* call on be is timed
 * and fn(user, op, seconds) is called once per call, on the thread that drives be, after the call
 * has finished. On an asynchronous backend (a GPU) the queue is waited for before and after the
 * call, so the time is the kernel's own (and the trace slows a run down: it is for benchmarks
 * and profiles). fn NULL (the default) turns it off; off it costs one branch per call. */
typedef void (*ig_backend_trace_fn)(void *user, ig_op op, double seconds);
void ig_backend_set_trace(ig_backend *be, ig_backend_trace_fn fn, void *user);

/* ==== bf16 on the host ======================================================================= */

/* fp32 -> bf16 rounded to nearest, ties to even (as torch's .to(torch.bfloat16)); a value that
 * rounds past the largest bf16 becomes infinity; every NaN becomes the quiet NaN 0x7FC0. bf16 ->
 * fp32 is exact. Core's ig_bf16_from_f32 / ig_bf16_to_f32, the one definition of the rounding:
 * the CUDA kernels give the same bits. The _n forms convert n elements. Thread-safe. */
uint16_t ig_backend_bf16_from_f32(float x);
float ig_backend_bf16_to_f32(uint16_t h);
void ig_backend_bf16_from_f32_n(uint16_t *dst, const float *src, size_t n);
void ig_backend_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);

/* ==== operations ============================================================================= */

typedef enum ig_w_layout {
    IG_W_IN_OUT = 0, /* W is [in, out]: y = x @ W (Hugging Face Conv1D) */
    IG_W_OUT_IN      /* W is [out, in]: y = x @ W^T (nn.Linear, the tied embedding as lm head) */
} ig_w_layout;

/* out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]. tokens: [B, T] in backend memory. For the
 * vocabulary-parallel embedding, a token < 0 (another rank's) adds no wte row, and wpe may be NULL
 * (the positions are added by another rank): rows can come out as 0. */
void ig_kernel_encoder_forward(ig_backend *be, void *out, const int32_t *tokens, const void *wte,
                               const void *wpe, int B, int T, int C);
/* dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += sum_b dout[b,t,:] (dwpe NULL: a model without
 * learned positions, Llama's). Deterministic: rows of dwte hit by several tokens are summed in
 * (b, t) order. Tokens < 0 are skipped (for dwte). */
void ig_kernel_encoder_backward(ig_backend *be, void *dwte, void *dwpe, const void *dout,
                                const int32_t *tokens, int B, int T, int C);

/* out = (inp - mean) * rstd * w + b per row of C, rstd = 1 / sqrt(var + eps) (biased variance,
 * as torch.nn.LayerNorm); mean and rstd [N] saved for backward. eps > 0 is the model's
 * (GPT-2's layer_norm_epsilon: 1e-5f). */
void ig_kernel_layernorm_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                 const void *inp, const void *w, const void *b, int N, int C,
                                 float eps);
/* residual = a + b_in, then out = LayerNorm(residual): the residual add fused into the next
 * LayerNorm. residual, mean, rstd are kept for backward. */
void ig_kernel_residual_layernorm_forward(ig_backend *be, void *residual, void *out, float *mean,
                                          float *rstd, const void *a, const void *b_in,
                                          const void *w, const void *b, int N, int C, float eps);
/* dinp += d LayerNorm / d inp (added: dinp is the residual stream's gradient), dw += , db += . */
void ig_kernel_layernorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                                  const void *inp, const void *w, const float *mean,
                                  const float *rstd, int N, int C);

/* RMSNorm (Llama's): out = inp * rstd * w per row of C, rstd[i] = 1 / sqrt(mean_j inp[i,j]^2 +
 * eps) saved for the backward (no mean taken out, no bias). Computed in fp32 whatever the act
 * type, out rounded once. eps > 0 is the model's (a config's rms_norm_eps). */
void ig_kernel_rmsnorm_forward(ig_backend *be, void *out, float *rstd, const void *inp,
                               const void *w, int N, int C, float eps);
/* residual = a + b, then out = RMSNorm(residual): the residual add fused in, as for LayerNorm
 * (the norm is of residual as stored, in the act type). residual and rstd are kept for the
 * backward. */
void ig_kernel_residual_rmsnorm_forward(ig_backend *be, void *residual, void *out, float *rstd,
                                        const void *a, const void *b, const void *w, int N, int C,
                                        float eps);
/* dinp += d RMSNorm / d inp (added: dinp is the residual stream's gradient), dw += sum over the
 * rows of dout * inp * rstd. inp is the forward's input (residual for the fused form). */
void ig_kernel_rmsnorm_backward(ig_backend *be, void *dinp, void *dw, const void *dout,
                                const void *inp, const void *w, const float *rstd, int N, int C);

/* out[N, OC] = inp[N, C] @ W (+ bias[OC] when bias is not NULL); W as layout says. */
void ig_kernel_matmul_forward(ig_backend *be, void *out, const void *inp, const void *w,
                              ig_w_layout layout, const void *bias, int N, int C, int OC);
/* dinp[N, C] = dout @ W^T (overwritten; skipped when dinp is NULL); dw += inp^T @ dout (in W's
 * layout); dbias += column sums of dout (skipped when dbias is NULL). */
void ig_kernel_matmul_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                               const void *inp, const void *w, ig_w_layout layout, int N, int C,
                               int OC);

/* out = gelu(inp + bias), GeLU with the tanh approximation (GPT-2's "gelu_new"). inp is kept (the
 * backward recomputes gelu from it). */
void ig_kernel_gelu_bias_forward(ig_backend *be, void *out, const void *inp, const void *bias,
                                 int N, int C);
/* dinp = dout * gelu'(inp + bias) (overwritten); dbias += column sums of dinp. */
void ig_kernel_gelu_bias_backward(ig_backend *be, void *dinp, void *dbias, const void *dout,
                                  const void *inp, const void *bias, int N, int C);

/* SwiGLU (Llama's MLP): out = silu(gate) * up, silu(x) = x / (1 + exp(-x)); gate, up, out
 * [N, F] (F the MLP's hidden size). gate and up are kept (the backward recomputes from them). */
void ig_kernel_swiglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N,
                              int F);
/* dgate = dout * up * silu'(gate), dup = dout * silu(gate), both [N, F] and overwritten; either
 * may be the same buffer as dout (each element is read before it is written). */
void ig_kernel_swiglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout,
                               const void *gate, const void *up, int N, int F);

/* The shape of an attention call. Multi-head attention (GPT-2) is n_kv_head == n_head;
 * grouped-query attention (Llama) shares each key/value head among g = n_head / n_kv_head query
 * heads: kv head j serves the consecutive query heads j*g .. j*g+g-1 (multi-query: n_kv_head 1).
 * With C = n_head * head_size and Ckv = n_kv_head * head_size, a packed qkv row is
 * [C + 2 Ckv]: the n_head query heads, then the n_kv_head key heads, then the n_kv_head value
 * heads, each head_size contiguous (GPT-2's [3C] rows: q, k, v). */
typedef struct ig_attention_shape {
    int B, T;      /* micro-batch and sequence length (Tq, the new queries, for the cached form) */
    int n_head;    /* query heads */
    int n_kv_head; /* key/value heads: divides n_head */
    int head_size; /* hs */
    int causal;    /* 1: query t attends keys s <= t; 0: every key of the sequence (DiT) */
    /* The scores' scale: 0 (the default, what a designated initializer leaves) is 1/sqrt(hs),
     * computed as before this field existed (the same bits); T5 gives 1.0f (no scaling). Any
     * other finite value multiplies q.k instead. */
    float scale;
} ig_attention_shape;

/* Rotary position embedding (RoPE) in Hugging Face's rotate-half convention, in place on the
 * query and key heads of packed qkv rows [B, T, (n_head + 2 n_kv_head) hs] (the layout above;
 * the value heads are left alone). Row (b, t) is at position pos = pos0 + t. For i < hs / 2,
 * computed as transformers computes it, in fp32: inv_freq_i = 1 / theta^(float(2i) / hs) and
 * angle = (float)pos * inv_freq_i; then each head's pair (x_i, x_{i + hs/2}) becomes
 * (x_i cos - x_{i + hs/2} sin, x_{i + hs/2} cos + x_i sin). hs is even; theta > 0 is the model's
 * rope_theta (10000 for Llama 2, 500000 for Llama 3). */
void ig_kernel_rope_forward(ig_backend *be, void *qkv, int B, int T, int n_head, int n_kv_head,
                            int hs, int pos0, float theta);
/* The transposed rotation, the gradient of the forward: (g_i, g_{i + hs/2}) becomes
 * (g_i cos + g_{i + hs/2} sin, g_{i + hs/2} cos - g_i sin), in place on the query and key heads of
 * packed dqkv rows (the value heads' gradient is left alone). */
void ig_kernel_rope_backward(ig_backend *be, void *dqkv, int B, int T, int n_head, int n_kv_head,
                             int hs, int pos0, float theta);

/* Self-attention with the scale (1/sqrt(hs), or s->scale), masks and softmax fused: out [B, T, C]
 * (heads concatenated) from qkv [B, T, C + 2 Ckv]. Tiled with an online softmax: no [T, T] matrix
 * is stored. lse [B, n_head, T] (log-sum-exp of each query's scaled scores) is kept for backward.
 * doc: NULL, or [B, T] document ids in backend memory: query t attends key s only when
 * doc[b,s] == doc[b,t] (attention does not cross end-of-document tokens), and, when causal,
 * s <= t; without causality a query attends every key of its own document. Every query sees at
 * least itself. */
void ig_kernel_attention_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                                 const int32_t *doc, const ig_attention_shape *s);
/* dqkv [B, T, C + 2 Ckv] (overwritten) from dout [B, T, C], recomputing the probabilities from
 * qkv and lse; out is the forward's output, doc and s the forward's. The gradient of a key/value
 * head is the sum over its g query heads, added in one fixed order (the same bits for any thread
 * count). */
void ig_kernel_attention_backward(ig_backend *be, void *dqkv, const void *dout, const void *qkv,
                                  const void *out, const float *lse, const int32_t *doc,
                                  const ig_attention_shape *s);
/* Attention of s->T new queries over a cache of keys and values (sampling with a KV cache): q
 * [B, Tq, C] at positions pos0 .. pos0 + Tq - 1, k and v [B, Tmax, Ckv] (n_kv_head heads of
 * head_size per position) holding positions 0 .. pos0 + Tq - 1; query i attends positions
 * 0 .. pos0 + i (s->causal must be 1). out [B, Tq, C]. */
void ig_kernel_attention_cached(ig_backend *be, void *out, const void *q, const void *k,
                                const void *v, int pos0, int Tmax, const ig_attention_shape *s);

/* Softmax and cross-entropy over the first V of Vp logit columns (the padded columns are
 * ignored), forward and backward in one pass over each row, no probability tensor: losses[i] =
 * -log softmax(logits[i, :V])[targets[i]]. When dloss is not NULL the logits are overwritten by
 * their gradient: dloss[i] * (softmax - onehot(targets[i])) on the first V columns, 0 on the
 * padded ones (dloss[i] = 0 masks row i). targets[i] in [0, V). */
void ig_kernel_crossentropy(ig_backend *be, float *losses, void *logits, const int32_t *targets,
                            const float *dloss, int N, int V, int Vp);

/* Vocabulary-parallel cross-entropy (Megatron's): each of the tensor-parallel ranks holds logits
 * [N, Vl], its slice of the vocabulary's columns, of which the first Vvalid (0 <= Vvalid <= Vl)
 * are real and the rest padding. Three kernels around two all-reduces over the group:
 *   ig_kernel_ce_max     rowmax[i] = the max of row i's valid columns (-inf when it has none);
 *                        then an all-reduce MAX of rowmax [N];
 *   ig_kernel_ce_sums    stats[2i] = sum over the valid j of exp(logits[i,j] - rowmax[i]) and
 *                        stats[2i+1] = logits[i, targets[i]] (0 when targets[i] < 0: the target
 *                        is another rank's column); then an all-reduce SUM of stats [2N];
 *   ig_kernel_ce_finish  losses[i] = log(stats[2i]) + rowmax[i] - stats[2i+1] and, when dloss is
 *                        not NULL, the logits overwritten by their gradient dloss[i] * (softmax -
 *                        onehot) on the valid columns, 0 on the padding.
 * targets [N]: the target's column in this slice, or -1. With one rank this is
 * ig_kernel_crossentropy in three passes. */
void ig_kernel_ce_max(ig_backend *be, float *rowmax, const void *logits, int N, int Vvalid, int Vl);
void ig_kernel_ce_sums(ig_backend *be, float *stats, const void *logits, const float *rowmax,
                       const int32_t *targets, int N, int Vvalid, int Vl);
void ig_kernel_ce_finish(ig_backend *be, float *losses, void *logits, const float *rowmax,
                         const float *stats, const int32_t *targets, const float *dloss, int N,
                         int Vvalid, int Vl);

/* ---- DiT (adaLN-Zero) ----
 * A DiT block modulates its two LayerNorms (no affine parameters) and gates its two branches with
 * six per-sample vectors computed from the conditioning c (timestep + class embeddings, [B, C]):
 *   mod = Linear(SiLU(c)), [B, 6C]: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp;
 *   x = x + gate_msa * Attention(LN(x) * (1 + scale_msa) + shift_msa);
 *   x = x + gate_mlp * MLP(LN(x) * (1 + scale_mlp) + shift_mlp);
 *   the final layer: [B, 2C] shift, scale, then Linear(LN(x) * (1 + scale) + shift);
 *   the loss: the mean squared error of the prediction (the noise).
 * The kernels: ig_kernel_silu_forward/backward (on c, and in the timestep embedder's MLP),
 * ig_kernel_layernorm_modulate_forward/backward (the LayerNorm and the modulation in one pass),
 * ig_kernel_gate_residual_forward/backward (the gated residual add) and ig_kernel_mse; the rest is
 * matmul, bias + GeLU and non-causal attention.
 *
 * Rows are tokens: N rows of C channels (act type). Row r belongs to sample
 * b = (row0 + r) / rows_per_sample: the rows of a sample are contiguous, and a rank may hold a
 * slice of the rows whose first is the global row row0 (it may start and end in the middle of a
 * sample). The per-sample vectors (shift, scale, gate and their gradients) are rows of a [B, *]
 * act matrix with leading dimension ld >= C: sample b's vector is the C elements at p + b * ld,
 * so the pointers into mod [B, 6C] are mod + k * C with ld = 6C. Only the samples of the rows
 * given are read or written. The per-sample gradients (dshift, dscale, dgate) are added to (+=),
 * each a sum over the sample's rows of this slice taken in a fixed order (rows in order within a
 * fixed chunk of rows, the chunks' partial sums in chunk order; on the GPU the same with tiles),
 * in fp32 or wider: the same bits for any thread count, wherever a sample starts or ends. */

/* out = LN(inp) * (1 + scale[b]) + shift[b] per row (b the row's sample), LN(x) = (x - mean) *
 * rstd without affine parameters, rstd = 1 / sqrt(var + eps) (biased variance); mean and rstd
 * [N] (fp32) are kept for the backward, as is inp. eps > 0 is the model's (DiT: 1e-6f).
 * shift and scale: [B, ld] as above. */
void ig_kernel_layernorm_modulate_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                          const void *inp, const void *shift, const void *scale,
                                          int ld, int N, int C, int row0, int rows_per_sample,
                                          float eps);
/* The backward of the above, from dout [N, C] and the forward's inp, scale, mean and rstd:
 * dinp += d out / d inp (added: dinp is the residual stream's gradient); dshift[b] += the sum
 * over b's rows of dout; dscale[b] += the sum over b's rows of dout * LN(inp). dshift and dscale
 * have leading dimension ld, like shift and scale (pointers into one [B, 6C] gradient of mod). */
void ig_kernel_layernorm_modulate_backward(ig_backend *be, void *dinp, void *dshift, void *dscale,
                                           const void *dout, const void *inp, const void *scale,
                                           int ld, const float *mean, const float *rstd, int N,
                                           int C, int row0, int rows_per_sample);

/* The gated residual add: out = res + gate[b] * x per row (b the row's sample; gate [B, ld]).
 * out may be res (the residual stream updated in place); x is kept for the backward. */
void ig_kernel_gate_residual_forward(ig_backend *be, void *out, const void *res, const void *x,
                                     const void *gate, int ld, int N, int C, int row0,
                                     int rows_per_sample);
/* dx = dout * gate[b] (overwritten; a buffer of its own: dout is res's gradient, which the
 * caller keeps as it is); dgate[b] += the sum over b's rows of dout * x (leading dimension ld). */
void ig_kernel_gate_residual_backward(ig_backend *be, void *dx, void *dgate, const void *dout,
                                      const void *x, const void *gate, int ld, int N, int C,
                                      int row0, int rows_per_sample);

/* SiLU over n act elements: out = inp / (1 + exp(-inp)). Not in place: the backward reads inp,
 * so out is a buffer of its own. */
void ig_kernel_silu_forward(ig_backend *be, void *out, const void *inp, size_t n);
/* dinp = dout * silu'(inp), silu'(x) = s (1 + x (1 - s)) with s = 1 / (1 + exp(-x)); overwritten,
 * and dinp may be dout (each element is read before it is written). */
void ig_kernel_silu_backward(ig_backend *be, void *dinp, const void *dout, const void *inp,
                             size_t n);

/* Squared error per row of K (DiT's loss on the predicted noise): losses[i] (fp32) = the sum over
 * row i of (pred - target)^2, summed in double and rounded once. When dpred is not NULL it is
 * overwritten by grad_scale * 2 * (pred - target) (act type): with grad_scale = the loss scale /
 * (N * K), the gradient of that scale times the mean of the squared errors. dpred may be pred
 * (each element is read before it is written). pred, target, dpred [N, K]; losses [N]. */
void ig_kernel_mse(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
                   int N, int K, float grad_scale);

/* ---- DiT: cross-attention to the caption (PixArt-alpha) ----
 * A text-conditioned DiT block attends from its image tokens to its sample's caption tokens
 * between self-attention and the MLP: q = Linear(x) [N, C] per image token, kv = Linear(y)
 * [B, Tk, 2C] from the text encoder's output y (the key and value projections in one GEMM),
 * x = x + Linear(CrossAttention(q, kv)). The rows are DiT's (above): a sample's rows are
 * contiguous and a rank may hold a slice of them. Captions are padded to Tk tokens, of which
 * klen[b] are real: the padding is masked out of the keys. */

/* Cross-attention: query row r of N (q, act [N, C], C = n_head * head_size, heads contiguous)
 * belongs to sample b = (row0 + r) / rows_per_sample (the rows of a sample are contiguous; a slice
 * of rows may start and end mid-sample, as for the DiT modulate kernels) and attends, in every
 * head, to the first klen[b] of its sample's Tk keys: kv [B, Tk, 2C] act, each key row its n_head
 * key heads then its n_head value heads (head h at h * head_size and C + h * head_size); klen
 * int32 [B] in backend memory, 1 <= klen[b] <= Tk (only the samples of the rows given are read).
 * Scale 1/sqrt(head_size), no causality. Fused as self-attention is (an online softmax over blocks
 * of keys, no [N, Tk] matrix stored). out [N, C] (act); lse [N, n_head] (fp32: the log-sum-exp of
 * each row's scaled scores per head, row r's at r * n_head + h) kept for the backward. A klen
 * outside 1 .. Tk is a programmer error: the CPU backend raises IG_ERR_INVALID_ARG for the next
 * ig_backend_sync and writes nothing; the CUDA backend (which cannot look) clamps it to 1 .. Tk.
 * N = 0 does nothing. */
void ig_kernel_cross_attention_forward(ig_backend *be, void *out, float *lse, const void *q,
                                       const void *kv, const int32_t *klen, int N, int row0,
                                       int rows_per_sample, int Tk, int n_head, int head_size);
/* The backward, from dout [N, C] and the forward's q, kv, out and lse (klen and the shape as in the
 * forward): dq [N, C] is overwritten; dkv [B, Tk, 2C] is ADDED to (+=: a caption's key and value
 * rows gather the gradient of every image row of the sample, over slices and micro-batches). dkv
 * of sample b += the sum over this call's rows of sample b, in fp32: rows in order within fixed
 * chunks and the chunks' partial sums in chunk order - the same bits for any thread count,
 * wherever a sample's rows start or end. Key rows at or past klen[b], and the samples of no row
 * given, get nothing added. The chunks:
 *   CPU: 64 rows counted from the sample's first (global) row, cut where the slice starts and
 *        ends; each chunk's partial is added to dkv in turn (every addition rounded to fp32), so
 *        two calls on the rows split at a chunk boundary (or a sample's) give the bits of one call
 *        on all of them; split elsewhere, the same within rounding.
 *   CUDA: tiles of rows counted from the sample's first row in the slice (128, or more for a long
 *        sample: at most 8 tiles); dkv's value plus the tiles' partials in tile order, in fp32,
 *        rounded once to the act type. Run to run the same bits. */
void ig_kernel_cross_attention_backward(ig_backend *be, void *dq, void *dkv, const void *dout,
                                        const void *q, const void *kv, const void *out,
                                        const float *lse, const int32_t *klen, int N, int row0,
                                        int rows_per_sample, int Tk, int n_head, int head_size);

/* ---- Stable Diffusion's VAE (AutoencoderKL, per frame) ----
 * Images are NHWC: row-major [N, H, W, C], channels last (the trainer's activations: a frame of
 * H x W pixels is H W rows of C, so the 1x1 convolutions and GroupNorm see rows of channels like
 * every other kernel). A ResNet block is GroupNorm + SiLU (ig_kernel_groupnorm_forward with silu
 * 1), conv 3x3, GroupNorm + SiLU, conv 3x3, a 1x1 conv shortcut where the channels change, and
 * ig_kernel_add; the encoder's downsample pads the bottom and the right by one and runs a 3x3
 * convolution of stride 2 without other padding; the decoder's upsample is ig_kernel_upsample2x
 * then a 3x3 convolution. */

/* A 2-D convolution (cross-correlation, as torch.nn.Conv2d): inp [N, H, W, C] -> out [N, OH, OW,
 * OC] with OH = (H + pad_top + pad_bottom - KH) / stride + 1 (rounded down; likewise OW). The
 * weight is [OC, KH, KW, C] row-major ("OHWI": an output channel's filter is one contiguous row of
 * KH KW C, in the input's channel-last order), the layout oneDNN and cuDNN take for NHWC without a
 * transposition of their own; diffusers' Conv2d.weight is [OC, C, KH, KW]: an importer and an
 * exporter transpose (w[o][kh][kw][c] = torch_w[o][c][kh][kw]). Every size > 0, KH and KW >= 1
 * (1x1 and 3x3 are the VAE's), stride 1 or 2 (>= 1), each padding between 0 and the kernel's size
 * minus one, and at least one output row and column. */
typedef struct ig_conv2d_shape {
    int N, H, W, C; /* the input */
    int OC;         /* output channels */
    int KH, KW;     /* the kernel */
    int stride;     /* both dimensions */
    int pad_top, pad_left, pad_bottom, pad_right;
} ig_conv2d_shape;

/* The output's height and width for s. */
static inline int ig_conv2d_out_h(const ig_conv2d_shape *s) {
    return (s->H + s->pad_top + s->pad_bottom - s->KH) / s->stride + 1;
}
static inline int ig_conv2d_out_w(const ig_conv2d_shape *s) {
    return (s->W + s->pad_left + s->pad_right - s->KW) / s->stride + 1;
}

/* out[n, oh, ow, o] = bias[o] + sum over kh, kw, c of inp[n, oh*stride - pad_top + kh, ow*stride -
 * pad_left + kw, c] * w[o, kh, kw, c] (positions outside the input count as 0); bias [OC] or NULL.
 * inp is kept for the backward. */
void ig_kernel_conv2d_forward(ig_backend *be, void *out, const void *inp, const void *w,
                              const void *bias, const ig_conv2d_shape *s);
/* The backward from dout [N, OH, OW, OC], as ig_kernel_matmul_backward: dinp [N, H, W, C] is
 * overwritten (skipped when dinp is NULL: the first layer); dw [OC, KH, KW, C] += the weight
 * gradient; dbias [OC] += the column sums of dout (skipped when dbias is NULL). inp and w are the
 * forward's. */
void ig_kernel_conv2d_backward(ig_backend *be, void *dinp, void *dw, void *dbias, const void *dout,
                               const void *inp, const void *w, const ig_conv2d_shape *s);

/* GroupNorm (torch.nn.GroupNorm) over NHWC rows: inp [N, HW, C] (HW = H W pixels of sample n),
 * the C channels in G groups of C / G consecutive channels; the statistics of (n, g) are over its
 * HW x C/G elements: mean and rstd = 1 / sqrt(var + eps) (biased variance), computed from sums in
 * double and kept in fp32 [N, G] (mean[n * G + g]) for the backward; y = (x - mean) * rstd * w[c] +
 * b[c] with w, b [C]; out = y, or silu(y) = y / (1 + exp(-y)) when silu is 1 (the ResNet block's
 * GroupNorm + SiLU in one pass). eps > 0 is the model's (the VAE's: 1e-6f). G divides C. */
void ig_kernel_groupnorm_forward(ig_backend *be, void *out, float *mean, float *rstd,
                                 const void *inp, const void *w, const void *b, int N, int HW,
                                 int C, int G, float eps, int silu);
/* The backward from dout [N, HW, C] and the forward's inp, w, b (read only with silu 1, to
 * recompute y), mean, rstd and silu: dinp += d out / d inp (added, as the other normalisations:
 * a ResNet block's input gradient also gets its shortcut's), dw += sum over the rows of dy *
 * xhat, db += sum of dy, dy the gradient of y (dout, or dout * silu'(y)). */
void ig_kernel_groupnorm_backward(ig_backend *be, void *dinp, void *dw, void *db, const void *dout,
                                  const void *inp, const void *w, const void *b, const float *mean,
                                  const float *rstd, int N, int HW, int C, int G, int silu);

/* Nearest-neighbour 2x upsampling (torch.nn.functional.interpolate(scale_factor=2.0,
 * mode="nearest")): inp [N, H, W, C] -> out [N, 2H, 2W, C], out[n, y, x, c] = inp[n, y/2, x/2, c].
 */
void ig_kernel_upsample2x_forward(ig_backend *be, void *out, const void *inp, int N, int H, int W,
                                  int C);
/* dinp [N, H, W, C] (overwritten) = the sum of the four dout [N, 2H, 2W, C] elements each input
 * element was copied to (in the order (0,0), (0,1), (1,0), (1,1)). */
void ig_kernel_upsample2x_backward(ig_backend *be, void *dinp, const void *dout, int N, int H,
                                   int W, int C);

/* The VAE's training loss (Open-Sora's VAE training without its GAN and perceptual terms): the
 * posterior's sample z = mean + exp(logvar / 2) eps with logvar clamped to [-30, 20] (diffusers'
 * DiagonalGaussianDistribution), its KL term 0.5 (mean^2 + exp(logvar) - 1 - logvar) against a
 * standard normal, and the reconstruction's L1 distance. Rows are pixels (NHWC). */

/* Absolute error per row of K (the reconstruction term): losses[i] (fp32) = the sum over row i of
 * |pred - target|, summed in double and rounded once. When dpred is not NULL it is overwritten by
 * grad_scale * sign(pred - target) (act type; 0 where they are equal, as torch's abs' gradient):
 * with grad_scale = the loss scale / (N * K), the gradient of that scale times the mean. dpred may
 * be pred (each element is read before it is written). pred, target, dpred [N, K]; losses [N]. */
void ig_kernel_l1(ig_backend *be, float *losses, void *dpred, const void *pred, const void *target,
                  int N, int K, float grad_scale);

/* The posterior's sample and KL term: moments [N, 2C] (act; a pixel's C means, then its C
 * log-variances, as quant_conv writes them), eps [N, C] (act, standard normal); per element lv =
 * clamp(logvar, -30, 20), z = mean + exp(0.5 lv) eps (fp32: z [N, C], act), and kl[i] (fp32; NULL:
 * not computed) = the sum over row i of 0.5 (mean^2 + exp(lv) - 1 - lv), each term in fp32 as
 * torch computes it (the CPU reference: in double), summed in double and rounded once. */
void ig_kernel_posterior_forward(ig_backend *be, void *z, float *kl, const void *moments,
                                 const void *eps, int N, int C);
/* Its backward from dz [N, C] (the decoder's gradient) plus kl_scale times the gradient of the
 * KL terms' sum (kl_scale: the loss scale x the KL weight / the elements it is the mean over; 0:
 * none): dmean = dz + kl_scale mean; dlogvar = dz eps 0.5 exp(0.5 lv) + kl_scale 0.5 (exp(lv) -
 * 1) where -30 <= logvar <= 20, else 0 (the clamp's gradient, torch's: the bounds pass it).
 * dmoments [N, 2C] (act) is overwritten; moments and eps are the forward's. */
void ig_kernel_posterior_backward(ig_backend *be, void *dmoments, const void *dz,
                                  const void *moments, const void *eps, int N, int C,
                                  float kl_scale);

/* ---- T5 v1.1 encoder ----
 * A T5 block: x + o(Attention(RMSNorm(x))) and x + wo(GeGLU(RMSNorm(x))). T5's layer norm is
 * ig_kernel_rmsnorm_forward (the mean of the squares in fp32 or wider, no mean taken out, no
 * bias; x * rstd * w with eps = layer_norm_epsilon); its attention has no 1/sqrt(d) scaling
 * (ig_attention_shape.scale = 1.0f), a relative position bias shared by every layer (computed
 * once by ig_kernel_t5_position_bias from block 0's relative_attention_bias table) and a key
 * padding mask (klen) for batches of captions of different lengths; its gated FFN is
 * gelu_new(x @ wi_0) * (x @ wi_1): ig_kernel_geglu_forward on the two matmuls' outputs. */

/* T5's relative position bucket (transformers' T5Attention._relative_position_bucket) of
 * relative_position = key position - query position: with bidirectional 1, half the buckets for
 * each direction (the positive distances at num_buckets / 2 and above); in each half, distances
 * below max_exact = buckets / 4 (bidirectional; / 2 otherwise) are their own bucket and the rest
 * log-spaced up to max_distance (the last bucket beyond), computed in fp32 as torch does:
 * max_exact + (int)(logf((float)d / max_exact) / (float)log((double)max_distance / max_exact) *
 * (half - max_exact)). bidirectional 0 (the decoder): only the keys at or before the query, by
 * -min(relative_position, 0). num_buckets >= 4 (even when bidirectional), max_distance >
 * max_exact. Pure, any thread, plain C (the CUDA backend computes its table with it). */
int ig_t5_relative_position_bucket(int relative_position, int bidirectional, int num_buckets,
                                   int max_distance);

/* The position bias of T queries over T keys: bias[h, i, j] = table[bucket(j - i), h] for every
 * head h < n_head, bias [n_head, T, T] and table [num_buckets, n_head] (act; HF's
 * relative_attention_bias.weight, an nn.Embedding(num_buckets, n_heads)), bucket as above. */
void ig_kernel_t5_position_bias(ig_backend *be, void *bias, const void *table, int T, int n_head,
                                int num_buckets, int max_distance, int bidirectional);

/* Self-attention with an additive bias and a key padding mask (T5's), forward only (the encoder
 * is used frozen): for query t of sequence b in head h, score(t, s) = scale * q_t . k_s +
 * bias[h, t, s] over the keys s < klen[b] (and s <= t when causal), softmax, the weighted sum of
 * the values. qkv, out and lse as ig_kernel_attention_forward (packed rows; grouped-query heads
 * allowed); s->scale as there (T5: 1.0f). bias: [n_head, T, T] (act), shared by the batch, or
 * NULL (no bias). klen: int32 [B] in backend memory, 1 <= klen[b] <= T, or NULL (every key): a
 * padded query row (t >= klen[b]) still attends the real keys, as T5's does, so its output is
 * finite and the caller ignores it. lse [B, n_head, T] (the log-sum-exp of the biased scores) may
 * be NULL. A klen outside 1 .. T is a programmer error: the CPU backend raises IG_ERR_INVALID_ARG
 * for the next ig_backend_sync and writes nothing; the CUDA backend clamps it to 1 .. T. */
void ig_kernel_attention_bias_forward(ig_backend *be, void *out, float *lse, const void *qkv,
                                      const void *bias, const int32_t *klen,
                                      const ig_attention_shape *s);

/* GeGLU (T5 v1.1's gated FFN, "gated-gelu"): out = gelu(gate) * up with GeLU's tanh approximation
 * ("gelu_new", as ig_kernel_gelu_bias_forward); gate = x @ wi_0, up = x @ wi_1, out [N, F]. */
void ig_kernel_geglu_forward(ig_backend *be, void *out, const void *gate, const void *up, int N,
                             int F);
/* dgate = dout * up * gelu'(gate), dup = dout * gelu(gate), overwritten; either may be dout (each
 * element is read before it is written), not each other. */
void ig_kernel_geglu_backward(ig_backend *be, void *dgate, void *dup, const void *dout,
                              const void *gate, const void *up, int N, int F);

/* ReLU (T5 v1.0's FFN, "relu"): out[i] = max(inp[i], 0) for n act elements, as torch.relu (a NaN
 * stays NaN); out may be inp. Forward only: the encoder that uses it is frozen. */
void ig_kernel_relu_forward(ig_backend *be, void *out, const void *inp, size_t n);

/* out[i] = a[i] + b[i] for n act elements (out may be a or b): the residual stream handed to the
 * next pipeline stage. */
void ig_kernel_add(ig_backend *be, void *out, const void *a, const void *b, size_t n);

/* AdamW on n parameters (one tensor or a run of tensors with the same weight decay), as
 * torch.optim.AdamW: g = grads * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 * p -= lr * (m / (1-b1^t) / (sqrt(v / (1-b2^t)) + eps) + weight_decay * p), with t = step >= 1.
 * master: NULL when params are fp32 (they are updated in place), else the fp32 master copy, which
 * is updated and rounded into params. */
void ig_kernel_adamw(ig_backend *be, void *params, float *master, const void *grads, float *m,
                     float *v, size_t n, float lr, float beta1, float beta2, float eps,
                     float weight_decay, float grad_scale, int step);

/* Sum of squares of n act elements, in double, for the global gradient norm: synchronous, the
 * result on the host. Deterministic (fixed chunks, fixed order). */
double ig_kernel_sum_squares(ig_backend *be, const void *x, size_t n);

/* x[i] *= s for n act elements. */
void ig_kernel_scale(ig_backend *be, void *x, size_t n, float s);

/* The weights' exponential moving average, n elements: ema[i] = decay ema[i] + (1 - decay) w[i]
 * in fp32, w[i] = master[i] (the fp32 master weights) when master is not NULL, else params[i]
 * (act type); decay 0 sets ema to w (whatever ema held). Elementwise: the same bits for any
 * split of the elements. */
void ig_kernel_ema(ig_backend *be, float *ema, const float *master, const void *params, size_t n,
                   float decay);

/* ==== the CUDA device (kernels/cuda/, built when nvcc is found) =============================== */

/* The CUDA backend lives in ingot's CUDA module, libingot_cuda.so, which the program loads (with
 * the CUDA runtime, cuBLASLt and cuDNN it links) only when a CUDA backend is created; what the
 * machine has is asked of the NVIDIA driver directly, without the module. */

/* What the driver reports. Filled by ig_cuda_query, which loads the driver (libcuda.so.1) but
 * not the CUDA module; never fails. */
typedef struct ig_cuda_info {
    int compiled;        /* 1 when this build has the CUDA backend */
    char archs[64];      /* the architectures compiled for, e.g. "sm_80 sm_90" */
    int runtime_version; /* the CUDA runtime the module carries, e.g. 13000; 0 when not compiled */
    int driver_version;  /* 0 when no driver is installed */
    int devices;         /* devices visible to this process */
    char name[256];      /* device 0, when devices > 0 */
    int cc_major, cc_minor;
    uint64_t memory_bytes;
    char why[256]; /* devices == 0: the driver's reason ("no CUDA-capable device is detected") */
} ig_cuda_info;

void ig_cuda_query(ig_cuda_info *out);

/* Loads the CUDA module as the first CUDA backend would (no device needed) and writes where it
 * was found and the libraries it brought ("build/libingot_cuda.so: CUDA runtime 13.0 (static),
 * cuBLASLt 13.0.2, cuDNN 9.13.0") into buf. IG_ERR_UNSUPPORTED, with what is missing, when the
 * module or a library it needs is not found, or the build has no CUDA: `ingot version --cuda`. */
ig_status ig_cuda_load(char *buf, size_t cap, ig_err *err);

/* One line for `ingot --version`: "CUDA: ..." (what ig_cuda_query found). Returns buf. */
char *ig_cuda_describe(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_KERNELS_BACKEND_H */
