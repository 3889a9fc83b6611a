/* bench_cuda.c - the CUDA backend on the device it finds (`make bench-cuda`): training steps of
 * GPT-2 small (124M) at micro-batch 16 x 1024 tokens in bf16, under each attention path
 * (IG_CUDA_ATTENTION fused and gemm), as tokens per second and MFU; the two attention paths alone
 * at 1024 tokens; and a step of the video DiT with DiT-S/2's blocks (12 of width 384, 6 heads,
 * patch 1x2x2, 1000 classes; rectified flow with label dropout) on 8-frame 32 x 32 clips, the
 * model tools/bench/train_peer_dit.py trains in PyTorch, as clips per second and MFU. Each step is
 * then traced kernel by kernel once (the backend's trace hook: every kernel timed between two
 * synchronisations, so the sum exceeds the untraced step) and its heaviest operations printed:
 * where the time goes. Every figure is a ratio against a reference measured in the same run: MFU
 * is the model's FLOPs per second (ig_model_flops_per_token, 3x for a training step) over the
 * bf16 GEMM throughput that cuBLASLt reaches on the same device (an 8192^3 matmul through the same
 * backend), and attention is FLOP/s over that same GEMM peak. Memory: what the model and the step
 * took on the device (the device's free memory before and after, ig_backend_memory_info). Last,
 * LayerNorm's forward and backward alone at the GPT step's rows, against a device copy of the
 * backward's bytes.
 * Without a device it prints "skipped: no CUDA device" and exits 0.
 *
 * Usage: bench_cuda [--micro-batch B] [--seq T] [--steps N] [--layers L] [--dit-batch B]
 * The last line is one `cuda_summary key=value ...` line for scripts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/backend.h"
#include "train/train.h"

typedef struct args {
    int B, T, steps, layers, dit_B;
} args;

/* What the device has in use now (the backend asks the CUDA runtime: cudaMemGetInfo). */
static size_t device_used(ig_backend *be) {
    ig_backend_memory m;
    ig_backend_memory_info(be, &m);
    return (size_t)(m.device_limit - m.device_free);
}

static void die(const char *what, const ig_err *err) {
    fprintf(stderr, "bench_cuda: %s: %s\n", what, err->msg);
    exit(1);
}

static ig_backend *cuda_backend(ig_ctx *ctx, const char *attention) {
    ig_backend_opts o = ig_backend_opts_default();
    o.kind = IG_BACKEND_CUDA;
    o.act_type = IG_ACT_BF16;
    ig_backend *be = NULL;
    ig_err err = {0};
    if (attention) setenv("IG_CUDA_ATTENTION", attention, 1);
    ig_status st = ig_backend_create(&be, ctx, &o, &err);
    if (attention) unsetenv("IG_CUDA_ATTENTION");
    if (st != IG_OK) die("creating the CUDA backend", &err);
    return be;
}

static void *dev_alloc(ig_backend *be, size_t bytes) {
    void *p = NULL;
    ig_err err = {0};
    if (ig_backend_alloc(be, bytes, &p, &err) != IG_OK) die("allocating", &err);
    return p;
}

static void sync_or_die(ig_backend *be) {
    ig_err err = {0};
    if (ig_backend_sync(be, &err) != IG_OK) die("a kernel", &err);
}

/* Random bf16 values in [-1, 1) into a device buffer of n act elements. */
static void fill_random(ig_backend *be, void *dst, size_t n, uint64_t seed) {
    float *h = malloc(n * sizeof *h);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        h[i] = (float)((double)((s * 0x2545F4914F6CDD1Dull) >> 11) / 9007199254740992.0 * 2 - 1);
    }
    ig_err err = {0};
    if (ig_backend_upload_f32(be, dst, h, n, &err) != IG_OK) die("uploading", &err);
    free(h);
}

/* The bf16 GEMM throughput of the backend (cuBLASLt): an n^3 matmul, FLOP/s. */
static double gemm_peak(ig_backend *be, int n) {
    size_t e = (size_t)n * n, as = ig_backend_act_size(be);
    void *a = dev_alloc(be, e * as), *w = dev_alloc(be, e * as), *o = dev_alloc(be, e * as);
    fill_random(be, a, e, 1);
    fill_random(be, w, e, 2);
    for (int i = 0; i < 3; i++) ig_kernel_matmul_forward(be, o, a, w, IG_W_IN_OUT, NULL, n, n, n);
    sync_or_die(be);
    int reps = 20;
    double t0 = ig_now();
    for (int i = 0; i < reps; i++)
        ig_kernel_matmul_forward(be, o, a, w, IG_W_IN_OUT, NULL, n, n, n);
    sync_or_die(be);
    double dt = ig_now() - t0;
    ig_backend_release(be, a), ig_backend_release(be, w), ig_backend_release(be, o);
    return 2.0 * n * (double)n * n * reps / dt;
}

/* Forward and backward of one attention path at B x T, C = 768, 12 heads: seconds per call. */
static void attention_times(ig_ctx *ctx, const char *path, int B, int T, double *fwd, double *bwd,
                            size_t *mem) {
    ig_backend *be = cuda_backend(ctx, path);
    int C = 768, NH = 12;
    size_t as = ig_backend_act_size(be), n3 = (size_t)B * T * 3 * C, n1 = (size_t)B * T * C;
    void *qkv = dev_alloc(be, n3 * as), *out = dev_alloc(be, n1 * as);
    void *dout = dev_alloc(be, n1 * as), *dqkv = dev_alloc(be, n3 * as);
    float *lse = dev_alloc(be, (size_t)B * NH * T * sizeof(float));
    fill_random(be, qkv, n3, 3);
    fill_random(be, dout, n1, 4);
    size_t before = device_used(be);
    ig_kernel_attention_forward(
        be, out, lse, qkv, NULL,
        &(ig_attention_shape){
            .B = B, .T = T, .n_head = NH, .n_kv_head = NH, .head_size = C / NH, .causal = 1});
    ig_kernel_attention_backward(
        be, dqkv, dout, qkv, out, lse, NULL,
        &(ig_attention_shape){
            .B = B, .T = T, .n_head = NH, .n_kv_head = NH, .head_size = C / NH, .causal = 1});
    sync_or_die(be);
    *mem = device_used(be) - before; /* the scratch the path needed */
    int reps = 10;
    double t0 = ig_now();
    for (int i = 0; i < reps; i++)
        ig_kernel_attention_forward(
            be, out, lse, qkv, NULL,
            &(ig_attention_shape){
                .B = B, .T = T, .n_head = NH, .n_kv_head = NH, .head_size = C / NH, .causal = 1});
    sync_or_die(be);
    *fwd = (ig_now() - t0) / reps;
    t0 = ig_now();
    for (int i = 0; i < reps; i++)
        ig_kernel_attention_backward(
            be, dqkv, dout, qkv, out, lse, NULL,
            &(ig_attention_shape){
                .B = B, .T = T, .n_head = NH, .n_kv_head = NH, .head_size = C / NH, .causal = 1});
    sync_or_die(be);
    *bwd = (ig_now() - t0) / reps;
    void *bufs[] = {qkv, out, dout, dqkv, lse};
    for (size_t i = 0; i < 5; i++) ig_backend_release(be, bufs[i]);
    ig_backend_free(be);
}

/* LayerNorm forward and backward at N x C alone: seconds per call, against a device-to-device
 * copy of the backward's bytes (dout, inp and dinp read, dinp written) in the same run. */
static void layernorm_times(ig_ctx *ctx, int N, int C, double *fwd, double *bwd, double *copy) {
    ig_backend *be = cuda_backend(ctx, NULL);
    size_t as = ig_backend_act_size(be), n = (size_t)N * C;
    void *x = dev_alloc(be, n * as), *y = dev_alloc(be, n * as), *dy = dev_alloc(be, n * as);
    void *dx = dev_alloc(be, n * as), *w = dev_alloc(be, (size_t)C * as);
    void *b = dev_alloc(be, (size_t)C * as), *dw = dev_alloc(be, (size_t)C * as);
    void *db = dev_alloc(be, (size_t)C * as);
    float *mean = dev_alloc(be, (size_t)N * sizeof(float));
    float *rstd = dev_alloc(be, (size_t)N * sizeof(float));
    fill_random(be, x, n, 5);
    fill_random(be, dy, n, 6);
    fill_random(be, w, (size_t)C, 7);
    fill_random(be, b, (size_t)C, 8);
    int reps = 20;
    for (int pass = 0; pass < 2; pass++) { /* warm-up, then timed */
        double t0 = ig_now();
        for (int i = 0; i < reps; i++)
            ig_kernel_layernorm_forward(be, y, mean, rstd, x, w, b, N, C, 1e-5f);
        sync_or_die(be);
        *fwd = (ig_now() - t0) / reps;
        t0 = ig_now();
        for (int i = 0; i < reps; i++)
            ig_kernel_layernorm_backward(be, dx, dw, db, dy, x, w, mean, rstd, N, C);
        sync_or_die(be);
        *bwd = (ig_now() - t0) / reps;
    }
    *copy = 0;
    size_t bytes = 2 * n * as; /* a copy of 2 n reads and writes 4 n: the backward's traffic */
    void *c0 = dev_alloc(be, bytes), *c1 = dev_alloc(be, bytes);
    for (int pass = 0; pass < 2; pass++) {
        ig_err err = {0};
        sync_or_die(be);
        double t0 = ig_now();
        for (int i = 0; i < reps; i++)
            if (ig_backend_copy(be, c1, c0, bytes, &err) != IG_OK) die("ig_backend_copy", &err);
        sync_or_die(be);
        *copy = (ig_now() - t0) / reps;
    }
    ig_backend_release(be, c0), ig_backend_release(be, c1);
    void *bufs[] = {x, y, dy, dx, w, b, dw, db, mean, rstd};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ig_backend_release(be, bufs[i]);
    ig_backend_free(be);
}

/* ---- a training step and where its time goes ---------------------------------------------- */

/* The micro-batch of a step: tokens [B, T + 1] of a language model, or clips of a DiT. */
typedef struct step_input {
    const int32_t *tokens;
    ig_clip_input *clips;
    int B, T;
} step_input;

typedef struct step_result {
    double step_s, loss;
    size_t mem;
} step_result;

/* The trace of a step: each operation's calls and seconds. */
typedef struct trace {
    int calls[IG_OP_COUNT];
    double seconds[IG_OP_COUNT];
} trace;

static void on_kernel(void *user, ig_op op, double seconds) {
    trace *t = user;
    t->calls[op]++;
    t->seconds[op] += seconds;
}

/* One training step (zero grads, forward + backward, norm, AdamW) as the trainer does it. */
static double one_step(ig_model *m, ig_optimizer *opt, const step_input *in, int step) {
    ig_err err = {0};
    double loss = 0, norm = 0;
    ig_status st = ig_model_zero_grads(m, &err);
    if (st == IG_OK && in->clips) {
        in->clips->key = (uint64_t)step; /* the noise, times and label dropout of this step */
        st = ig_model_clips_loss(m, in->clips, 1.0f, &loss, &err);
    } else if (st == IG_OK) {
        st = ig_model_forward_backward(m, in->tokens, in->B, in->T, NULL, 1.0f, &loss, NULL, &err);
    }
    ig_adamw_hparams h = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    if (st != IG_OK || ig_model_grad_norm(m, &norm, &err) != IG_OK ||
        ig_optimizer_step(opt, step, &h, norm > 1 ? (float)(1 / norm) : 1, &err) != IG_OK)
        die("a training step", &err);
    return loss;
}

/* `steps` timed steps of model c after 2 warm-up ones on a backend of the attention path
 * (NULL: the default); with `traced`, instead one warm-up step and one traced step, whose
 * heaviest operations are printed. */
static step_result step_bench(ig_ctx *ctx, const char *attention, const ig_model_config *c,
                              const step_input *in, int steps, int traced) {
    ig_backend *be = cuda_backend(ctx, attention);
    ig_err err = {0};
    size_t used0 = device_used(be);
    ig_model *m = NULL;
    ig_optimizer *opt = NULL;
    if (ig_model_create(&m, ctx, be, c, in->B, in->T, 1234, &err) != IG_OK ||
        ig_optimizer_create(&opt, ctx, m, &err) != IG_OK)
        die("the model", &err);
    step_result r = {0};
    int warm = traced ? 1 : 2;
    for (int s = 1; s <= warm + steps; s++) {
        trace t = {0};
        if (s > warm && traced) ig_backend_set_trace(be, on_kernel, &t);
        sync_or_die(be);
        double t0 = ig_now();
        r.loss = one_step(m, opt, in, s);
        sync_or_die(be);
        if (s > warm) r.step_s += ig_now() - t0;
        ig_backend_set_trace(be, NULL, NULL);
        if (s <= warm || !traced) continue;
        double total = 0;
        for (int op = 0; op < IG_OP_COUNT; op++) total += t.seconds[op];
        printf("  where the time goes (%s, one step traced kernel by kernel: %.1f ms):\n",
               attention ? attention : "default attention", total * 1e3);
        for (int k = 0; k < 10; k++) { /* the ten heaviest */
            int top = -1;
            for (int op = 0; op < IG_OP_COUNT; op++)
                if (t.calls[op] && (top < 0 || t.seconds[op] > t.seconds[top])) top = op;
            if (top < 0) break;
            printf("    %-26s %5d calls %9.2f ms %5.1f%%\n", ig_op_name((ig_op)top),
                   t.calls[top], t.seconds[top] * 1e3, 100 * t.seconds[top] / total);
            t.calls[top] = 0;
        }
    }
    r.step_s /= steps;
    r.mem = device_used(be) - used0;
    ig_optimizer_free(opt);
    ig_model_free(m);
    ig_backend_free(be);
    return r;
}

static void parse(int argc, char **argv, args *a) {
    a->B = 16, a->T = 1024, a->steps = 10, a->layers = 12, a->dit_B = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (v <= 0) {
            fprintf(stderr, "bench_cuda: %s needs a positive number\n", argv[i]);
            exit(2);
        }
        if (!strcmp(argv[i], "--micro-batch"))
            a->B = v;
        else if (!strcmp(argv[i], "--seq"))
            a->T = v;
        else if (!strcmp(argv[i], "--steps"))
            a->steps = v;
        else if (!strcmp(argv[i], "--layers"))
            a->layers = v;
        else if (!strcmp(argv[i], "--dit-batch"))
            a->dit_B = v;
        else {
            fprintf(stderr, "usage: bench_cuda [--micro-batch B] [--seq T] [--steps N] "
                            "[--layers L] [--dit-batch B]\n");
            exit(2);
        }
    }
}

int main(int argc, char **argv) {
    args a;
    parse(argc, argv, &a);
    ig_cuda_info ci;
    ig_cuda_query(&ci);
    if (!ci.compiled || ci.devices == 0) {
        printf("skipped: no CUDA device (%s)\n",
               ci.compiled ? ci.why : "CUDA is not in this build");
        return 0;
    }
    char line[512];
    printf("%s\n", ig_cuda_describe(line, sizeof line));
    ig_ctx *ctx = NULL;
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    if (ig_ctx_create(&ctx, &co, &err) != IG_OK) die("context", &err);
    ig_backend *be = cuda_backend(ctx, NULL);

    double peak = gemm_peak(be, 8192);
    printf("bf16 GEMM (cuBLASLt, 8192^3): %.1f TFLOP/s\n", peak / 1e12);
    ig_backend_free(be);

    /* GPT-2 small: training steps under each attention path, the faster one traced */
    ig_model_config c = {
        .n_layer = a.layers, .n_head = 12, .d_model = 768, .seq_len = a.T, .vocab_size = 50257};
    if (ig_model_config_check(&c, &err) != IG_OK) die("model", &err);
    int32_t *tokens = malloc((size_t)a.B * (a.T + 1) * sizeof *tokens);
    for (size_t i = 0; i < (size_t)a.B * (a.T + 1); i++) tokens[i] = (int32_t)(i * 7919 % 50257);
    step_input gin = {.tokens = tokens, .B = a.B, .T = a.T};
    step_result g[2];
    const char *paths[2] = {"fused", "gemm"};
    for (int p = 0; p < 2; p++) {
        g[p] = step_bench(ctx, paths[p], &c, &gin, a.steps, 0);
        double tok_s = (double)a.B * a.T / g[p].step_s;
        double flops = 3.0 * ig_model_flops_per_token(&c, a.T) * tok_s;
        printf("GPT-2 %dL d768, micro-batch %d x %d, bf16, attention %s: %.1f ms/step, %.0f "
               "tokens/s, MFU %.1f%% of the GEMM peak (%.1f TFLOP/s), loss %.3f\n",
               a.layers, a.B, a.T, paths[p], g[p].step_s * 1e3, tok_s, 100 * flops / peak,
               flops / 1e12, g[p].loss);
        if (g[p].mem)
            printf("  device memory taken by the model and its step: %.2f GiB (%llu bytes)\n",
                   (double)g[p].mem / (1u << 30), (unsigned long long)g[p].mem);
    }
    int best = g[1].step_s < g[0].step_s;
    step_bench(ctx, paths[best], &c, &gin, 1, 1);
    double tok_s = (double)a.B * a.T / g[best].step_s;
    double mfu = 3.0 * ig_model_flops_per_token(&c, a.T) * tok_s / peak;
    free(tokens);

    /* the video DiT (DiT-S/2's blocks) on 8-frame 32 x 32 clips: one step a micro-batch */
    ig_model_config dc;
    int F = 8, H = 32, W = 32, dT = 0;
    if (ig_model_config_parse(&dc,
                              "arch: dit, n_layer: 12, n_head: 6, d_model: 384, seq_len: 2048, "
                              "patch: [1, 2, 2], cond: class, num_classes: 1000, "
                              "class_dropout: 0.1",
                              &err) != IG_OK ||
        ig_model_clip_tokens(&dc, F, H, W, &dT, &err) != IG_OK)
        die("the DiT", &err);
    size_t nf = (size_t)a.dit_B * F * H * W * 3;
    uint8_t *frames = malloc(nf);
    uint32_t *labels = malloc((size_t)a.dit_B * sizeof *labels);
    uint64_t s = 0x1234567ull;
    for (size_t i = 0; i < nf; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        frames[i] = (uint8_t)(s >> 56);
    }
    for (int b = 0; b < a.dit_B; b++) labels[b] = (uint32_t)((b * 7919) % 1000);
    ig_clip_input clips = {.frames = frames, .B = a.dit_B, .F = F, .H = H, .W = W,
                           .labels = labels, .drop_labels = 1, .seed = 1, .shift = 1};
    step_input din = {.clips = &clips, .B = a.dit_B, .T = dT};
    step_result d = step_bench(ctx, paths[best], &dc, &din, a.steps, 0);
    double clip_s = a.dit_B / d.step_s;
    double dit_mfu = 3.0 * ig_model_flops_per_token(&dc, dT) * clip_s * dT / peak;
    printf("DiT-S/2 12L d384, micro-batch %d clips of %dx%dx%d (%d tokens), bf16: %.1f ms/step, "
           "%.1f clips/s, MFU %.1f%% of the GEMM peak, loss %.4f (attention %s)\n",
           a.dit_B, F, H, W, dT, d.step_s * 1e3, clip_s, 100 * dit_mfu, d.loss, paths[best]);
    step_bench(ctx, paths[best], &dc, &din, 1, 1);
    free(frames), free(labels);

    /* attention at 1024 tokens: the fused kernels against the GEMM + softmax path; causal FLOPs
     * 2 B T^2 C forward, 2.5x that backward (the flash-attention convention) */
    double att[2][2];
    size_t att_mem[2];
    int T = 1024;
    for (int p = 0; p < 2; p++) {
        attention_times(ctx, paths[p], a.B, T, &att[p][0], &att[p][1], &att_mem[p]);
        double f = 2.0 * a.B * (double)T * T * 768;
        printf("attention %-5s B=%d T=%d C=768 NH=12: forward %.2f ms (%.2f of the GEMM peak), "
               "backward %.2f ms (%.2f), scratch %.0f MiB\n",
               paths[p], a.B, T, att[p][0] * 1e3, f / att[p][0] / peak, att[p][1] * 1e3,
               2.5 * f / att[p][1] / peak, (double)att_mem[p] / (1u << 20));
    }
    double ln_f, ln_b, ln_c;
    layernorm_times(ctx, a.B * a.T, 768, &ln_f, &ln_b, &ln_c);
    printf("layernorm %d x 768 bf16 alone: forward %.3f ms, backward %.3f ms; a device copy of the "
           "backward's bytes %.3f ms\n",
           a.B * a.T, ln_f * 1e3, ln_b * 1e3, ln_c * 1e3);
    printf("cuda_summary tokens_per_s=%.0f mfu=%.4f gemm_tflops=%.1f step_ms=%.2f mem_bytes=%zu "
           "attention=%s step_fused_ms=%.2f step_gemm_ms=%.2f "
           "att_fused_fwd_ms=%.3f att_fused_bwd_ms=%.3f att_gemm_fwd_ms=%.3f "
           "att_gemm_bwd_ms=%.3f dit_batch=%d dit_clips_per_s=%.2f dit_step_ms=%.2f "
           "dit_mfu=%.4f ln_fwd_ms=%.3f ln_bwd_ms=%.3f ln_copy_ms=%.3f\n",
           tok_s, mfu, peak / 1e12, g[best].step_s * 1e3, g[best].mem, paths[best],
           g[0].step_s * 1e3, g[1].step_s * 1e3, att[0][0] * 1e3, att[0][1] * 1e3,
           att[1][0] * 1e3, att[1][1] * 1e3, a.dit_B, clip_s, d.step_s * 1e3, dit_mfu,
           ln_f * 1e3, ln_b * 1e3, ln_c * 1e3);
    ig_ctx_free(ctx);
    return 0;
}
