/* bench_train.c - the trainer's step on the CPU backend for a model family: GPT-2 small (12
 * layers, 12 heads, 768 wide, 1024 positions, vocabulary 50257 padded to 50304), or with --arch
 * llama a Llama of the same width and depth (12 query heads over 4 key/value heads, a SwiGLU MLP of
 * 2048, an untied output layer), trained on micro-batches of random valid tokens; or with --arch
 * dit a video DiT with DiT-S/2's blocks (12 of width 384, 6 heads; patch 1x2x2, 1000 classes)
 * trained on micro-batches of random clips (--shape BxFxHxW; rectified flow, drawn noise and
 * times, label dropout; with --latents C on a VAE's latents of C channels instead, each clip's
 * latent drawn from its posterior each step), as tools/bench/train_peer_dit.py trains PyTorch's;
 * with every figure a ratio against a reference measured in the same run (DESIGN 7):
 *   - the step (zero gradients, forward + backward, gradient norm, AdamW with clipping, the
 *     hyperparameters of configs/gpt2-small.yaml at a constant learning rate): median time of
 *     several steps after warm-up ones, its phases, tokens/s, model FLOP/s
 *     (ig_model_flops_per_token x 3 per token) and MFU: that over the GEMM peak of the same backend
 *     at the same thread count (a 2048^3 sgemm through ig_kernel_matmul_forward), measured just
 *     after each step (the machine is shared: the load changes from one step to the next), and
 *     also over oneDNN's own sgemm with its own threads on the same matrices (the backend cuts
 *     every GEMM into single-threaded chunks, which costs a square GEMM more than the trainer's);
 *     the peak resident memory (getrusage);
 *   - where the step's time goes: the real step traced kernel by kernel (the backend's trace hook,
 *     ig_backend_set_trace: every call of the family's pass and of the optimizer, timed), each
 *     operation's calls and milliseconds per step, its share, the GEMMs' and attention's FLOP/s
 *     over the GEMM peak, and each operation's speed-up over one thread.
 *   - the activation memory a micro-batch keeps (train.recompute: --recompute none, the default,
 *     selective or full), as the model allocated it (a slot's act-typed, fp32 and int32 buffers;
 *     the scratch the micro-batches share beside it) and as counted by hand from the family's
 *     tensors per layer and token (Korthikanti et al. 2022's accounting; written here apart from
 *     the families' plans);
 *   - with --recompute all, instead of the above: the three modes one after the other on the same
 *     micro-batches, each one's activation memory (allocated and by hand), its median step time
 *     and its ratio to none's, and whether its losses are none's to the bit.
 *   - with --dtype bf16: each shape in fp32 as above, then in bf16 (a backend of act type bf16:
 *     parameters, gradients and activations in bf16, fp32 master weights and moments; the GEMMs
 *     in oneDNN's bf16 GEMM), its MFU over the bf16 GEMM peak of the same backend at the same
 *     threads (the same 2048^3 GEMM on a bf16 backend, and oneDNN's own bf16 GEMM with its own
 *     threads, measured just after each step beside the fp32 peak) and over the fp32 peak, its
 *     tokens/s, MFU and peak memory against the fp32 run's, and its breakdown operation by
 *     operation against the fp32 run's (the non-GEMM kernels widen to fp32 and round back:
 *     kernels/cpu/cpu_bf16.c); then both models in one process, their steps taking turns, for
 *     bf16's speed-up measured under the same load. --recompute all is fp32 only.
 * Each micro-batch shape runs in a child process of its own, so that its peak memory is its own;
 * the parent measures the GEMM peaks when the child asks, between its steps, so that the peak's
 * buffers are not in the child's memory.
 *
 *   bench_train [threads=2] [--arch gpt2|llama|dit] [--shape BxT | BxFxHxW]... [--steps 5]
 *               [--warmup 2] [--replays 3] [--no-breakdown] [--no-scaling]
 *               [--recompute none|selective|full|all] [--latents C] [--dtype fp32|bf16]
 *
 * Ends with one machine-readable line "train_summary k=v ..." (tools/bench/run.sh reads it to print
 * the ratios to PyTorch's and llm.c's steps).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "kernels/backend.h"
#include "train/train.h"

#define MAX_SHAPES 8
#define PEAK_SIZE  2048 /* the square sgemm of the GEMM peak (as bench_kernels) */
#define PEAK_REPS  3    /* sgemms per measurement of the peak (median) */

/* configs/gpt2-small.yaml's optimizer, at a constant learning rate */
#define LR           6.0e-4f
#define BETA1        0.9f
#define BETA2        0.95f
#define EPS          1.0e-8f
#define WEIGHT_DECAY 0.1f
#define GRAD_CLIP    1.0

#define RECOMPUTE_ALL -1 /* --recompute all: the three modes compared */

static const char *const recompute_names[] = {"none", "selective", "full"};

typedef struct bench_opts {
    int threads, warmup, steps, replays, breakdown, scaling;
    int arch;      /* ig_model_arch */
    int recompute; /* ig_recompute, or RECOMPUTE_ALL */
    int bf16;      /* --dtype bf16: each shape in bf16 after its fp32 reference */
    int n_shapes, B[MAX_SHAPES], T[MAX_SHAPES];
    int F[MAX_SHAPES], H[MAX_SHAPES], W[MAX_SHAPES]; /* dit: the clips (T: their tokens) */
} bench_opts;

/* A micro-batch: B x T tokens (a language model) or clips (a diffusion model). */
typedef struct batch {
    const int32_t *tokens;
    ig_clip_input *clips;
    int B, T;
} batch;

/* What a child sends back for the summary line. */
typedef struct shape_result {
    int ok, B, T;
    double step_s, tok_s, model_gflops, peak_gflops, mfu, rss_mib;
    double lib_gflops, mfu_lib; /* oneDNN's own sgemm peak; MFU over the higher peak */
    /* --recompute all, by mode: a slot's MiB allocated and by hand, the median step */
    double rc_slot_mib[3], rc_hand_mib[3], rc_step_s[3];
    double rc_ratio[3]; /* the median over the turns of a step's time over none's in its turn */
    int rc_same;        /* selective's and full's losses are none's, bit for bit */
    /* --dtype bf16, the run taking turns: the median over the turns of the fp32 step's time over
     * the bf16 step's (bf16's speed-up), and the median steps */
    double turn_x, turn_step32, turn_step16;
    /* --dtype bf16, in the bf16 run: the bf16 GEMM peaks (the backend's, oneDNN's own) and MFU
     * over the backend's bf16 peak (mfu: over its fp32 peak), measured just after each step */
    double peak16_gflops, lib16_gflops, mfu16;
    /* the breakdown's traced step: each operation's calls and seconds (0 without it) */
    int op_calls[IG_OP_COUNT];
    double op_s[IG_OP_COUNT];
} shape_result;

static void die(const char *what, const ig_err *err) {
    fprintf(stderr, "bench_train: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    exit(1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of x[n] (x is sorted in place). */
static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* The resident memory now (MiB; 0 when /proc/self/statm cannot be read). */
static double rss_now_mib(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

static double loadavg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static ig_ctx *make_ctx(int threads) {
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = threads;
    ig_ctx *ctx = NULL;
    ig_err err = {0};
    if (ig_ctx_create(&ctx, &o, &err) != IG_OK) die("context", &err);
    return ctx;
}

static ig_backend *make_backend(ig_ctx *ctx, ig_act_type act) {
    ig_backend *be = NULL;
    ig_err err = {0};
    ig_backend_opts o = ig_backend_opts_default();
    o.act_type = act;
    if (ig_backend_create(&be, ctx, &o, &err) != IG_OK) die("backend", &err);
    return be;
}

static void *balloc(ig_backend *be, size_t bytes) {
    void *p = NULL;
    ig_err err = {0};
    if (ig_backend_alloc(be, bytes, &p, &err) != IG_OK) die("allocation", &err);
    return p;
}

/* Fills n floats with values in [-1, 1) from a seeded LCG. */
static void fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / 8388608.0 - 1.0);
    }
}

static void sync_or_die(ig_backend *be) {
    ig_err err = {0};
    if (ig_backend_sync(be, &err) != IG_OK) die("kernel", &err);
}

/* ---- references: the GEMM peak and memcpy bandwidth ------------------------------------------ */

/* The GEMM peak is measured by the parent process, between the child's steps: the child asks
 * (a byte 'p' on its request pipe) and waits for the answer (GFLOP/s), so the peak is taken under
 * the load the step just ran under, on the same thread count, and its buffers are not in the
 * child's memory. At the end the child sends 'r' and its shape_result. */
typedef struct peak_link {
    int req, rep; /* the child's ends: requests out, answers in */
} peak_link;

static int read_full(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t k = read(fd, c, n);
        if (k <= 0) return -1;
        c += k, n -= (size_t)k;
    }
    return 0;
}

static int write_full(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k <= 0) return -1;
        c += k, n -= (size_t)k;
    }
    return 0;
}

/* GFLOP/s of the PEAK_SIZE^3 sgemm through the backend, and through the GEMM library itself with
 * its own threads (0 when it could not be loaded); with --dtype bf16 also the same GEMM in bf16
 * (bf16 operands, fp32 sums) through a bf16 backend and through the library's bf16 GEMM. */
typedef struct peak_pair {
    double be, lib;
    double be16, lib16; /* 0 unless asked for */
} peak_pair;

static double peak_best(peak_pair p) {
    return p.lib > p.be ? p.lib : p.be;
}

/* In the child: the GEMM peaks now, measured by the parent ('b': the bf16 ones too). */
static peak_pair peak_now(const peak_link *l, int bf16) {
    char c = bf16 ? 'b' : 'p';
    peak_pair g = {0};
    if (write_full(l->req, &c, 1) != 0 || read_full(l->rep, &g, sizeof g) != 0)
        die("the parent process does not answer", NULL);
    return g;
}

/* oneDNN's sgemm (the backend's GEMM library, kernels/cpu/cpu_gemm.c), loaded with dlopen as
 * bench_kernels does, and the OpenMP thread count it runs with */
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                             const float *, int64_t, float, float *, int64_t);
/* oneDNN's bf16 GEMM: bf16 A and B, fp32 C (dnnl_gemm_bf16bf16f32) */
typedef int (*dnnl_gemm_bf16_fn)(char, char, int64_t, int64_t, int64_t, float, const uint16_t *,
                                 int64_t, const uint16_t *, int64_t, float, float *, int64_t);

/* In the parent: the PEAK_SIZE^3 sgemm through the backend's matmul and through the library with
 * its own threads, each the median GFLOP/s of PEAK_REPS. */
typedef struct peak_ref {
    int threads;
    ig_backend *be, *be16; /* be16: a bf16 backend (--dtype bf16), or NULL */
    float *a, *b, *c;
    uint16_t *a16, *b16, *c16; /* be16's operands and output, the same values rounded */
    void *lib;
    dnnl_sgemm_fn sgemm;
    dnnl_gemm_bf16_fn gemm16;
    void (*set_threads)(int);
} peak_ref;

/* The median GFLOP/s of PEAK_REPS of the square matmul through a backend. */
static double peak_backend(ig_backend *be, void *c, const void *a, const void *b) {
    double g[PEAK_REPS], S = PEAK_SIZE, f = 2.0 * S * S * S / 1e9;
    for (int r = 0; r < PEAK_REPS; r++) {
        double t0 = ig_now();
        ig_kernel_matmul_forward(be, c, a, b, IG_W_IN_OUT, NULL, PEAK_SIZE, PEAK_SIZE, PEAK_SIZE);
        sync_or_die(be);
        g[r] = f / (ig_now() - t0);
    }
    return median(g, PEAK_REPS);
}

static peak_pair peak_measure(peak_ref *p, int bf16) {
    double h[PEAK_REPS], S = PEAK_SIZE, f = 2.0 * S * S * S / 1e9;
    peak_pair out = {peak_backend(p->be, p->c, p->a, p->b), 0, 0, 0};
    if (p->sgemm) {
        p->set_threads(p->threads);
        for (int r = 0; r < PEAK_REPS; r++) {
            double t0 = ig_now();
            p->sgemm('N', 'N', PEAK_SIZE, PEAK_SIZE, PEAK_SIZE, 1.0f, p->a, PEAK_SIZE, p->b,
                     PEAK_SIZE, 0.0f, p->c, PEAK_SIZE);
            h[r] = f / (ig_now() - t0);
        }
        p->set_threads(1); /* idle OpenMP threads must not spin into the child's next step */
        out.lib = median(h, PEAK_REPS);
    }
    if (bf16 && p->be16) {
        out.be16 = peak_backend(p->be16, p->c16, p->a16, p->b16);
        if (p->gemm16) {
            p->set_threads(p->threads);
            for (int r = 0; r < PEAK_REPS; r++) {
                double t0 = ig_now();
                p->gemm16('N', 'N', PEAK_SIZE, PEAK_SIZE, PEAK_SIZE, 1.0f, p->a16, PEAK_SIZE,
                          p->b16, PEAK_SIZE, 0.0f, p->c, PEAK_SIZE);
                h[r] = f / (ig_now() - t0);
            }
            p->set_threads(1);
            out.lib16 = median(h, PEAK_REPS);
        }
    }
    return out;
}

/* In the parent: answers the child's requests until it sends its result or dies (bf16: with a
 * bf16 backend beside the fp32 one, for the requests 'b'). */
static int peak_serve(int threads, int bf16, int req, int rep, shape_result *res) {
    ig_ctx *ctx = make_ctx(threads);
    peak_ref p = {.threads = threads, .be = make_backend(ctx, IG_ACT_F32)};
    size_t n = (size_t)PEAK_SIZE * PEAK_SIZE;
    p.a = balloc(p.be, n * 4), p.b = balloc(p.be, n * 4), p.c = balloc(p.be, n * 4);
    fill(p.a, n, 1), fill(p.b, n, 2);
    if (bf16) {
        p.be16 = make_backend(ctx, IG_ACT_BF16);
        p.a16 = balloc(p.be16, n * 2), p.b16 = balloc(p.be16, n * 2), p.c16 = balloc(p.be16, n * 2);
        for (size_t i = 0; i < n; i++)
            p.a16[i] = ig_bf16_from_f32(p.a[i]), p.b16[i] = ig_bf16_from_f32(p.b[i]);
    }
    static const char *const names[] = {"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names && !p.lib; i++)
        p.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (p.lib) {
        p.sgemm = (dnnl_sgemm_fn)dlsym(p.lib, "dnnl_sgemm");
        p.gemm16 = (dnnl_gemm_bf16_fn)dlsym(p.lib, "dnnl_gemm_bf16bf16f32");
        p.set_threads = (void (*)(int))dlsym(p.lib, "omp_set_num_threads");
        if (!p.set_threads) p.sgemm = NULL, p.gemm16 = NULL;
    }
    peak_measure(&p, bf16); /* warm-up */
    int ok = 0;
    char c;
    while (read_full(req, &c, 1) == 0) {
        if (c == 'p' || c == 'b') {
            peak_pair g = peak_measure(&p, c == 'b');
            if (write_full(rep, &g, sizeof g) != 0) break;
        } else {
            ok = c == 'r' && read_full(req, res, sizeof *res) == 0;
            break;
        }
    }
    ig_backend_release(p.be, p.a), ig_backend_release(p.be, p.b), ig_backend_release(p.be, p.c);
    if (p.be16) {
        ig_backend_release(p.be16, p.a16), ig_backend_release(p.be16, p.b16);
        ig_backend_release(p.be16, p.c16);
    }
    ig_backend_free(p.be16);
    ig_backend_free(p.be);
    ig_ctx_free(ctx);
    if (p.lib) dlclose(p.lib);
    return ok;
}

typedef struct copy_arg {
    char *dst;
    const char *src;
} copy_arg;

static void copy_chunk(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    copy_arg *c = arg;
    memcpy(c->dst + b, c->src + b, e - b);
}

/* GB/s of a memcpy of 256 MiB on the pool, counting bytes read plus bytes written (median of 5) */
static double memcpy_gbs(ig_ctx *ctx) {
    size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) die("out of memory for the memcpy reference", NULL);
    memset(a, 1, n), memset(b, 2, n);
    copy_arg c = {b, a};
    double g[5];
    for (int r = 0; r < 5; r++) {
        double t0 = ig_now();
        ig_parallel_range(ctx, n, (n + 15) / 16, copy_chunk, &c);
        g[r] = 2.0 * (double)n / (ig_now() - t0) / 1e9;
    }
    free(a), free(b);
    return median(g, 5);
}

/* ---- the step -------------------------------------------------------------------------------- */

/* One training step as the trainer does it (one micro-batch per step); the seconds of its phases
 * (zero grads, forward + backward, grad norm, AdamW) go to phase[4]. */
static double train_step(ig_model *m, ig_optimizer *opt, const batch *bt, int step, double *loss,
                         double phase[4]) {
    ig_err err = {0};
    uint64_t counted = 0;
    double norm = 0, t[5];
    ig_batch_opts bo = {0, 0, -1};
    t[0] = ig_now();
    if (ig_model_zero_grads(m, &err) != IG_OK) die("zero grads", &err);
    t[1] = ig_now();
    ig_status st;
    if (bt->clips) {
        bt->clips->key = (uint64_t)step; /* the noise, times and label dropout of this step */
        st = ig_model_clips_loss(m, bt->clips, 1.0f, loss, &err);
    } else {
        st =
            ig_model_forward_backward(m, bt->tokens, bt->B, bt->T, &bo, 1.0f, loss, &counted, &err);
    }
    if (st != IG_OK) die("forward+backward", &err);
    t[2] = ig_now();
    if (ig_model_grad_norm(m, &norm, &err) != IG_OK) die("grad norm", &err);
    t[3] = ig_now();
    float clip = norm > GRAD_CLIP ? (float)(GRAD_CLIP / norm) : 1.0f;
    ig_adamw_hparams h = {LR, BETA1, BETA2, EPS, WEIGHT_DECAY};
    if (ig_optimizer_step(opt, step, &h, clip, &err) != IG_OK) die("AdamW", &err);
    t[4] = ig_now();
    for (int i = 0; i < 4; i++) phase[i] = t[i + 1] - t[i];
    return norm;
}

/* ---- where the time goes: the step traced kernel by kernel --------------------------------- */

/* The trace of one step: each operation's calls and seconds. */
typedef struct trace {
    int calls[IG_OP_COUNT];
    double seconds[IG_OP_COUNT];
} trace;

static void on_kernel(void *user, ig_op op, double seconds) {
    trace *t = user;
    t->calls[op]++;
    t->seconds[op] += seconds;
}

/* model.arch's index of a name ("gpt2", "llama", "dit"). */
static int arch_of(const char *name) {
    for (int k = 0; ig_model_archs[k]; k++)
        if (!strcmp(ig_model_archs[k], name)) return k;
    return -1;
}
#define IS(arch, name) ((arch) == arch_of(name))

/* What the benchmark set beyond the common fields (the hand count below reads these, not the
 * family's fields). */
typedef struct bench_dims {
    int kv_heads, ffn, patch[3], caption;
} bench_dims;

/* --latents C: the DiT on a VAE's latents of C channels (0: pixels) */
static int g_latents;

/* DiT-S/2 on latents: its shape as an export's config.json says it (in_channels and the VAE it
 * was trained on, a made-up identity), read from a scratch directory. */
static ig_model_config latent_dit_shape(int T) {
    char dir[] = "/tmp/bench_train_dit_XXXXXX";
    if (!mkdtemp(dir)) die("mkdtemp", NULL);
    char path[64];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) die("config.json", NULL);
    fprintf(f,
            "{\"model_type\": \"ingot-dit\", \"hidden_size\": 384, \"depth\": 12, "
            "\"num_heads\": 6, \"patch_size\": [1, 2, 2], \"in_channels\": %d, \"num_classes\": "
            "1000, \"class_dropout_prob\": 0.1, \"max_tokens\": %d, \"vae\": {\"describe\": "
            "\"bench\", \"weights_xxh3\": \"0123456789abcdef\", \"latent_channels\": %d, "
            "\"downsample\": 8, \"scaling_factor\": 0.18215, \"shift_factor\": 0}}\n",
            g_latents, T > 1 ? T : 2, g_latents);
    fclose(f);
    ig_model_config c;
    int32_t eod;
    ig_err err = {0};
    ig_status st = ig_hf_read_config(NULL, dir, &c, &eod, &err);
    unlink(path);
    rmdir(dir);
    if (st != IG_OK) die("the latent DiT's config", &err);
    return c;
}

/* The model of the benchmark: GPT-2 small, a Llama of its width and depth, or DiT-S/2's blocks
 * (a 1 x 2 x 2 patch, ImageNet's classes; on pixels, or with --latents on latents). */
static ig_model_config bench_shape(int arch, int T, bench_dims *d) {
    ig_model_config c;
    ig_err err = {0};
    const char *text = "arch: gpt2, n_layer: 12, n_head: 12, d_model: 768, seq_len: 1024, "
                       "vocab_size: 50257";
    *d = (bench_dims){.kv_heads = 12, .ffn = 4 * 768, .patch = {1, 2, 2}};
    char dit[256];
    if (IS(arch, "llama")) {
        text = "arch: llama, n_layer: 12, n_head: 12, d_model: 768, seq_len: 1024, "
               "vocab_size: 50257, n_kv_heads: 4, ffn_hidden: 2048";
        d->kv_heads = 4, d->ffn = 2048;
    }
    if (IS(arch, "dit")) { /* T 0: asked before the clips' tokens are known; 2, the least
                            * seq_len the config takes */
        snprintf(dit, sizeof dit,
                 "arch: dit, n_layer: 12, n_head: 6, d_model: 384, seq_len: %d, patch: [1, 2, 2], "
                 "cond: class, num_classes: 1000, class_dropout: 0.1",
                 T > 1 ? T : 2);
        text = dit;
        if (g_latents) return latent_dit_shape(T);
    }
    if (ig_model_config_parse(&c, text, &err) != IG_OK) die("model", &err);
    return c;
}

static void make_model(ig_ctx *ctx, ig_backend *be, int arch, int recompute, int B, int T,
                       ig_model **m, ig_optimizer **opt) {
    bench_dims d;
    ig_model_config c = bench_shape(arch, T, &d);
    ig_err err = {0};
    if (ig_model_create_recompute(m, ctx, be, &c, B, T, 1234, recompute, &err) != IG_OK ||
        ig_optimizer_create(opt, ctx, *m, &err) != IG_OK)
        die("model", &err);
}

/* ---- activation memory by hand --------------------------------------------------------------- */

/* What a micro-batch of B x T keeps from its forward to its backward under recompute mode r, in
 * values (act-typed, fp32, int32), counted from the family's tensors (Korthikanti et al. 2022's
 * accounting, per layer and token; the attention is fused, so no T x T scores or softmax are kept,
 * and there is no dropout): independent of the families' plans, which the allocation comes from.
 * per_layer: the act-typed and fp32 values a layer keeps per token (a DiT's per-clip modulation
 * spread over its T tokens). Returns 0 where not counted (a DiT with captions). */
typedef struct hand_count {
    double act, f32, i32;
    double per_layer;
} hand_count;

static int hand_acts(const ig_model_config *c, const bench_dims *d, int B, int T, int r,
                     hand_count *out) {
    double N = (double)B * T, C = c->d_model, L = c->n_layer, NH = c->n_head, hs = C / NH;
    double Vp = c->padded_vocab, act = 0, f32 = 0; /* per layer and token */
    memset(out, 0, sizeof *out);
    if (IS(c->arch, "gpt2")) {
        /* ln1 C, qkv 3C, attention's output C, attproj C, res2 C, ln2 C, fc 4C, gelu 4C, fcproj
         * C, res3 C = 18C; fp32: two LayerNorms' mean and rstd, attention's lse (one per head) */
        act = r == 0 ? 18 * C : r == 1 ? 17 * C : C;
        f32 = r == 0 ? 4 + NH : r == 1 ? 4 : 0;
        /* the stage's input (C), ln_f (C; mean, rstd), the logits (Vp); losses and their
         * gradients; input ids, targets, document ids */
        out->act = N * (L * act + 2 * C + Vp);
        out->f32 = N * (L * f32 + 2 + 2);
        out->i32 = 3 * N;
    } else if (IS(c->arch, "llama")) {
        double Q = (NH + 2.0 * d->kv_heads) * hs, H = NH * hs, F = d->ffn;
        /* h1 C, qkv Q, attention's output H, attproj C, res2 C, h2 C, gate F, up F, silu(gate)
         * up F, down C, res3 C; fp32: two rstd, lse */
        act = r == 0 ? 6 * C + Q + H + 3 * F : r == 1 ? 6 * C + Q + 3 * F : C;
        f32 = r == 0 ? 2 + NH : r == 1 ? 2 : 0;
        out->act = N * (L * act + 2 * C + Vp); /* input, the final norm, logits */
        out->f32 = N * (L * f32 + 1 + 2);
        out->i32 = 3 * N;
    } else if (IS(c->arch, "dit")) {
        if (d->caption) return 0;
        double P = (g_latents ? g_latents : 3.0) * d->patch[0] * d->patch[1] * d->patch[2];
        /* per token: h1 C, qkv 3C, attention's output C, attproj C, res2 C, h2 C, fc1 4C, gelu
         * 4C, fc2 C, res3 C = 18C; per clip: the modulation 6C; fp32: two LayerNorms' mean and
         * rstd, lse */
        act = r == 0 ? 18 * C : r == 1 ? 17 * C : C;
        double mod = r == 2 ? 0 : 6 * C;
        f32 = r == 0 ? 4 + NH : r == 1 ? 4 : 0;
        /* per token: patches P, positions C, the tokens C, the final layer's LN C, prediction P
         * and target P; per clip: frequencies 256, time MLP C + C, label C, c, its gradient and
         * SiLU(c) 3C, the final modulation 2C */
        out->act = N * (L * act + 3 * C + 3 * P) + B * (L * mod + 256 + 8 * C);
        out->f32 = N * (L * f32 + 2 + 1); /* final LN's mean, rstd; squared errors */
        out->i32 = B;                     /* labels */
        out->per_layer = act + mod / T + f32;
        return 1;
    } else {
        return 0;
    }
    out->per_layer = act + f32;
    return 1;
}

/* "X MiB (act a, fp32 f, int32 i)" of a model's slot, and its scratch. */
static void print_act_memory(const ig_model *m, int B, int T, int r, double as) {
    ig_act_memory am;
    ig_model_act_memory(m, &am);
    hand_count h;
    bench_dims d;
    bench_shape(ig_model_shape(m)->arch, T, &d);
    const double MiB = 1048576.0;
    printf("  activations per micro-batch (recompute %s): %.1f MiB allocated (act %.1f, fp32 %.1f, "
           "int32 %.2f), scratch beside it %.1f MiB",
           recompute_names[r], (double)am.slot / MiB, (double)am.slot_act / MiB,
           (double)am.slot_f32 / MiB, (double)am.slot_i32 / MiB, (double)am.scratch / MiB);
    if (hand_acts(ig_model_shape(m), &d, B, T, r, &h)) {
        double hb = h.act * as + (h.f32 + h.i32) * 4;
        printf("; by hand %.1f MiB (%.0f values per layer and token): allocated / by hand %.4f",
               hb / MiB, h.per_layer, (double)am.slot / hb);
    }
    printf("\n");
}

/* Median per operation of `reps` traced steps of m (step numbers from `step`). */
static void traced_steps(ig_model *m, ig_optimizer *opt, const batch *bt, int step, int reps,
                         trace *out) {
    double sec[IG_OP_COUNT][16];
    ig_backend *be = ig_model_backend(m);
    for (int i = 0; i < reps; i++) {
        trace t = {0};
        double loss, ph[4];
        ig_backend_set_trace(be, on_kernel, &t);
        train_step(m, opt, bt, step + i, &loss, ph);
        ig_backend_set_trace(be, NULL, NULL);
        for (int k = 0; k < IG_OP_COUNT; k++) sec[k][i] = t.seconds[k];
        if (i == 0) memcpy(out->calls, t.calls, sizeof t.calls);
    }
    for (int k = 0; k < IG_OP_COUNT; k++) out->seconds[k] = median(sec[k], reps);
}

/* The breakdown of m's step; bf16: m is on a bf16 backend, its FLOP/s are over the bf16 GEMM
 * peak and each operation's time is set against the fp32 run's (ref, that shape's result, when
 * it has a breakdown). The traced step goes to res. */
static void run_breakdown(ig_model *m, ig_optimizer *opt, const batch *bt, const bench_opts *o,
                          const peak_link *pl, double step_s, double bw, const shape_result *ref,
                          shape_result *res) {
    int B = bt->B, T = bt->T;
    int bf16 = ig_backend_act_type(ig_model_backend(m)) == IG_ACT_BF16;
    int reps = o->replays < 1 ? 1 : o->replays > 16 ? 16 : o->replays;
    const ig_model_config *c = ig_model_shape(m);
    trace tr, t1 = {0};
    double loss, ph[4];
    train_step(m, opt, bt, 100, &loss, ph); /* warm-up */
    traced_steps(m, opt, bt, 101, reps, &tr);
    peak_pair pp = peak_now(pl, bf16);
    double peak = bf16 ? (pp.lib16 > pp.be16 ? pp.lib16 : pp.be16) : peak_best(pp);
    int have_ref = 0;
    for (int k = 0; ref && k < IG_OP_COUNT; k++) have_ref |= ref->op_s[k] > 0;
    for (int k = 0; k < IG_OP_COUNT; k++)
        res->op_calls[k] = tr.calls[k], res->op_s[k] = tr.seconds[k];
    int scaling = o->scaling && o->threads > 1;
    if (scaling) { /* the same step on one thread: a model of its own */
        ig_ctx *ctx1 = make_ctx(1);
        ig_backend *be1 = make_backend(ctx1, ig_backend_act_type(ig_model_backend(m)));
        ig_model *m1 = NULL;
        ig_optimizer *o1 = NULL;
        make_model(ctx1, be1, o->arch, o->recompute, B, T, &m1, &o1);
        train_step(m1, o1, bt, 1, &loss, ph);
        traced_steps(m1, o1, bt, 2, reps, &t1);
        ig_optimizer_free(o1);
        ig_model_free(m1);
        ig_backend_free(be1);
        ig_ctx_free(ctx1);
    }
    /* the FLOPs the GEMMs and attention compute: the family's count per token, the matmuls' part
     * at T = 0 (forward 1x, backward 2x); attention's backward recomputes its scores (2.5x) */
    double tokens_step = (double)B * T;
    double mm = ig_model_flops_per_token(c, 0) * tokens_step;
    double att = (ig_model_flops_per_token(c, T) - ig_model_flops_per_token(c, 0)) * tokens_step;
    double flops[IG_OP_COUNT] = {0};
    flops[IG_OP_MATMUL_FORWARD] = mm, flops[IG_OP_MATMUL_BACKWARD] = 2 * mm;
    flops[IG_OP_ATTENTION_FORWARD] = att, flops[IG_OP_ATTENTION_BACKWARD] = 2.5 * att;
    double sum = 0, sum1 = 0;
    for (int k = 0; k < IG_OP_COUNT; k++) sum += tr.seconds[k], sum1 += t1.seconds[k];
    printf("\n  where the time goes: the step traced kernel by kernel (median of %d traced "
           "steps), %d threads%s; %sGEMM peak (the higher of the two) %.1f GFLOP/s after them%s\n",
           reps, o->threads, scaling ? "; speed-up over 1 thread" : "", bf16 ? "bf16 " : "", peak,
           have_ref ? "; fp32 ms: the fp32 run's (x fp32: this time over it)" : "");
    printf("  %-28s %6s %9s %6s %9s %8s %7s", "operation", "calls", "ms/step", "share", "GFLOP/s",
           "of peak", scaling ? "x 1 thr" : "");
    if (have_ref) printf(" %9s %7s", "fp32 ms", "x fp32");
    printf("\n");
    for (int k = 0; k < IG_OP_COUNT; k++) {
        if (!tr.calls[k]) continue;
        char speed[64] = "", up[32] = "";
        if (flops[k] > 0)
            snprintf(speed, sizeof speed, "%9.1f %8.3f", flops[k] / tr.seconds[k] / 1e9,
                     flops[k] / tr.seconds[k] / 1e9 / peak);
        else
            snprintf(speed, sizeof speed, "%9s %8s", "", "");
        if (t1.seconds[k] > 0) snprintf(up, sizeof up, "%6.2fx", t1.seconds[k] / tr.seconds[k]);
        printf("  %-28s %6d %9.1f %5.1f%% %s %7s", ig_op_name((ig_op)k), tr.calls[k],
               tr.seconds[k] * 1e3, 100 * tr.seconds[k] / sum, speed, up);
        if (have_ref && ref->op_s[k] > 0)
            printf(" %9.1f %6.2fx", ref->op_s[k] * 1e3, tr.seconds[k] / ref->op_s[k]);
        printf("\n");
    }
    double gemm_t = tr.seconds[IG_OP_MATMUL_FORWARD] + tr.seconds[IG_OP_MATMUL_BACKWARD];
    printf("  sum of the kernels %.3f s (the timed steps' median: %.3f s; the step also stages the "
           "tokens and reads the losses back)\n",
           sum, step_s);
    if (sum1 > 0)
        printf("  on 1 thread the same kernels take %.3f s: %.2fx for %d threads\n", sum1,
               sum1 / sum, o->threads);
    printf("  GEMMs %.3f s (%.1f%%) at %.1f GFLOP/s = %.3f of the peak; everything else %.3f s; "
           "memcpy %.1f GB/s on the same threads\n",
           gemm_t, 100 * gemm_t / sum, 3 * mm / gemm_t / 1e9, 3 * mm / gemm_t / 1e9 / peak,
           sum - gemm_t, bw);
    if (have_ref) {
        double rsum = 0, rgemm = ref->op_s[IG_OP_MATMUL_FORWARD] + ref->op_s[IG_OP_MATMUL_BACKWARD];
        for (int k = 0; k < IG_OP_COUNT; k++) rsum += ref->op_s[k];
        printf("  against the fp32 run's kernels: GEMMs %.3f s -> %.3f s (%.2fx), everything else "
               "%.3f s -> %.3f s (%.2fx; the widening to fp32 and rounding back is there), all "
               "%.2fx\n",
               rgemm, gemm_t, gemm_t / rgemm, rsum - rgemm, sum - gemm_t,
               (sum - gemm_t) / (rsum - rgemm), sum / rsum);
    }
}

/* ---- one micro-batch shape, in a child process ----------------------------------------------- */

/* The micro-batch of a shape: random valid tokens, or random clips with labels. */
typedef struct bench_input {
    int32_t *tokens;
    uint8_t *frames;
    float *moments; /* --latents: [B, F, H, W, 2C] the posterior's means and log-variances */
    uint32_t labels[MAX_SHAPES * 64];
    ig_clip_input clips;
} bench_input;

static batch make_batch(const bench_opts *o, int i_shape, const ig_model_config *mc,
                        bench_input *in) {
    int B = o->B[i_shape], T = o->T[i_shape], dit = o->arch == arch_of("dit");
    size_t per = dit ? (size_t)o->F[i_shape] * o->H[i_shape] * o->W[i_shape] * 3 : 0;
    size_t n_in = dit ? (size_t)B * per : (size_t)B * (size_t)(T + 1);
    in->tokens = malloc(n_in * sizeof *in->tokens);
    in->frames = malloc(n_in);
    if (!in->tokens || !in->frames || B > MAX_SHAPES * 64) die("out of memory", NULL);
    uint64_t s = 0x1234567ull;
    for (size_t i = 0; i < n_in; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if (dit)
            in->frames[i] = (uint8_t)(s >> 56);
        else
            in->tokens[i] = (int32_t)((s >> 33) % (uint64_t)mc->vocab_size);
    }
    for (int b = 0; b < B; b++) in->labels[b] = (uint32_t)((b * 7919) % 1000);
    in->moments = NULL;
    if (dit && g_latents) { /* means of a latent's scale, log-variances near -8 */
        size_t nm = (size_t)B * (size_t)o->F[i_shape] * o->H[i_shape] * o->W[i_shape] *
                    (size_t)(2 * g_latents);
        if (!(in->moments = malloc(nm * sizeof *in->moments))) die("out of memory", NULL);
        for (size_t i = 0; i < nm; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)(s >> 40) / (float)(1 << 24) - 0.5f;
            in->moments[i] = (i / (size_t)g_latents) % 2 ? u - 8.0f : 10.0f * u;
        }
    }
    in->clips = (ig_clip_input){.frames = in->moments ? NULL : in->frames,
                                .latents = in->moments,
                                .latent_scale = 0.18215,
                                .B = B,
                                .F = o->F[i_shape],
                                .H = o->H[i_shape],
                                .W = o->W[i_shape],
                                .labels = in->labels,
                                .drop_labels = 1,
                                .seed = 1,
                                .shift = 1};
    return (batch){dit ? NULL : in->tokens, dit ? &in->clips : NULL, B, T};
}

static void free_input(bench_input *in) {
    free(in->tokens);
    free(in->frames);
    free(in->moments);
}

/* --recompute all: the three modes on the same micro-batches, each its own model built from the
 * same seed, all three held at once (3x the parameters, gradients and moments) so that their steps
 * can take turns: step i of none, of selective, of full, then step i + 1 (the machine's load
 * changes from one second to the next; the ratios compare steps run side by side). Their
 * activation memory, median step and losses. */
static shape_result run_recompute(const bench_opts *o, int i_shape) {
    int B = o->B[i_shape], T = o->T[i_shape];
    shape_result res = {0};
    res.B = B, res.T = T, res.rc_same = 1;
    int n = o->steps < 1 ? 1 : o->steps > 64 ? 64 : o->steps;
    int w = o->warmup < 0 ? 0 : o->warmup > 16 ? 16 : o->warmup;
    double times[3][64], load0 = loadavg();
    const double MiB = 1048576.0;
    char shape[256];
    ig_ctx *ctx = make_ctx(o->threads);
    ig_backend *be = make_backend(ctx, IG_ACT_F32);
    ig_model *m[3] = {NULL};
    ig_optimizer *opt[3] = {NULL};
    for (int r = 0; r < 3; r++) make_model(ctx, be, o->arch, r, B, T, &m[r], &opt[r]);
    const ig_model_config *mc = ig_model_shape(m[0]);
    printf("\n== %s, B=%d T=%d, %d thread%s: activation recomputation (train.recompute), the "
           "three modes' steps taking turns\n",
           ig_model_describe(mc, shape, sizeof shape), B, T, o->threads, o->threads > 1 ? "s" : "");
    bench_input in;
    batch bt = make_batch(o, i_shape, mc, &in);
    for (int i = 0; i < w + n; i++) {
        double loss[3], ph[4];
        for (int r = 0; r < 3; r++) {
            double ts = ig_now();
            train_step(m[r], opt[r], &bt, i + 1, &loss[r], ph);
            if (i >= w) times[r][i - w] = ig_now() - ts;
        }
        if (memcmp(&loss[1], &loss[0], sizeof(double)) ||
            memcmp(&loss[2], &loss[0], sizeof(double)))
            res.rc_same = 0;
    }
    double as = (double)ig_backend_act_size(be);
    /* the ratio to none: the median of each turn's (a turn's steps ran side by side) */
    double ratios[3][64];
    for (int r = 0; r < 3; r++)
        for (int i = 0; i < n; i++) ratios[r][i] = times[r][i] / times[0][i];
    for (int r = 0; r < 3; r++) res.rc_ratio[r] = median(ratios[r], n);
    for (int r = 0; r < 3; r++) {
        res.rc_step_s[r] = median(times[r], n);
        ig_act_memory am;
        ig_model_act_memory(m[r], &am);
        hand_count h;
        bench_dims d;
        bench_shape(mc->arch, T, &d);
        res.rc_slot_mib[r] = (double)am.slot / MiB;
        res.rc_hand_mib[r] =
            hand_acts(mc, &d, B, T, r, &h) ? (h.act * as + (h.f32 + h.i32) * 4) / MiB : 0;
        print_act_memory(m[r], B, T, r, as);
    }
    printf("  %d steps each after %d warm-up; losses of selective and full %s; load %.1f -> %.1f; "
           "peak RSS %.0f MiB\n",
           n, w, res.rc_same ? "none's to the bit" : "DIFFER from none's", load0, loadavg(),
           peak_rss_mib());
    printf("  %-10s %12s %12s %9s %10s %9s  (step: the median; x none: the median of each turn's "
           "ratio)\n",
           "recompute", "slot MiB", "by hand MiB", "x none", "step s", "x none");
    for (int r = 0; r < 3; r++)
        printf("  %-10s %12.1f %12.1f %9.3f %10.3f %9.3f\n", recompute_names[r], res.rc_slot_mib[r],
               res.rc_hand_mib[r], res.rc_slot_mib[r] / res.rc_slot_mib[0], res.rc_step_s[r],
               res.rc_ratio[r]);
    fflush(stdout);
    for (int r = 0; r < 3; r++) {
        ig_optimizer_free(opt[r]);
        ig_model_free(m[r]);
    }
    free_input(&in);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    res.ok = 1;
    res.step_s = res.rc_step_s[0];
    res.rss_mib = peak_rss_mib();
    return res;
}

/* --dtype bf16: an fp32 model and a bf16 one of the same seed in one process, their steps taking
 * turns (fp32's step i, then bf16's; the machine's load changes from one second to the next, and
 * two runs in processes of their own may see different loads): bf16's speed-up as the median of
 * each turn's ratio. Its memory is not either run's (both models are held at once). */
static shape_result run_turns(const bench_opts *o, int i_shape) {
    int B = o->B[i_shape], T = o->T[i_shape];
    shape_result res = {0};
    res.B = B, res.T = T;
    int n = o->steps < 1 ? 1 : o->steps > 64 ? 64 : o->steps;
    double times[2][64], ratios[64], load0 = loadavg();
    ig_ctx *ctx = make_ctx(o->threads);
    ig_backend *be[2] = {make_backend(ctx, IG_ACT_F32), make_backend(ctx, IG_ACT_BF16)};
    ig_model *m[2] = {NULL};
    ig_optimizer *opt[2] = {NULL};
    for (int r = 0; r < 2; r++) make_model(ctx, be[r], o->arch, o->recompute, B, T, &m[r], &opt[r]);
    bench_input in;
    batch bt = make_batch(o, i_shape, ig_model_shape(m[0]), &in);
    for (int i = 0; i < 1 + n; i++) { /* one warm-up turn */
        for (int r = 0; r < 2; r++) {
            double loss, ph[4], ts = ig_now();
            train_step(m[r], opt[r], &bt, i + 1, &loss, ph);
            if (i >= 1) times[r][i - 1] = ig_now() - ts;
        }
        if (i >= 1) ratios[i - 1] = times[0][i - 1] / times[1][i - 1];
    }
    res.turn_x = median(ratios, n);
    res.turn_step32 = median(times[0], n), res.turn_step16 = median(times[1], n);
    printf(
        "\n  fp32 and bf16 taking turns in one process (B=%d T=%d, %d turns after 1, load %.1f -> "
        "%.1f): step %.3f s in fp32, %.3f s in bf16; bf16 %.2fx faster (the median of each "
        "turn's ratio)\n",
        B, T, n, load0, loadavg(), res.turn_step32, res.turn_step16, res.turn_x);
    fflush(stdout);
    for (int r = 0; r < 2; r++) {
        ig_optimizer_free(opt[r]);
        ig_model_free(m[r]);
        ig_backend_free(be[r]);
    }
    free_input(&in);
    ig_ctx_free(ctx);
    res.ok = 1;
    return res;
}

/* One shape's steps on a backend of act type act; ref: the fp32 run's result for the same shape
 * (bf16: the breakdown compares each operation with it), or NULL. */
static shape_result run_shape(const bench_opts *o, const peak_link *pl, int i_shape,
                              ig_act_type act, const shape_result *ref) {
    int B = o->B[i_shape], T = o->T[i_shape];
    shape_result res = {0};
    res.B = B, res.T = T;
    double load0 = loadavg();
    ig_ctx *ctx = make_ctx(o->threads);
    ig_backend *be = make_backend(ctx, act);
    ig_model *m = NULL;
    ig_optimizer *opt = NULL;
    double t0 = ig_now();
    make_model(ctx, be, o->arch, o->recompute, B, T, &m, &opt);
    double create_s = ig_now() - t0, rss_built = peak_rss_mib(), rss_built_now = rss_now_mib();
    const ig_model_config *mc = ig_model_shape(m);
    int dit = o->arch == arch_of("dit");
    bench_input in;
    batch bt = make_batch(o, i_shape, mc, &in);

    /* warm-up steps, then timed ones, each followed by the GEMM peak (measured by the parent) */
    int n = o->steps < 1 ? 1 : o->steps > 64 ? 64 : o->steps;
    double fpt = ig_model_flops_per_token(mc, T), tokens_per_step = (double)B * T;
    double step_flops = 3.0 * fpt * tokens_per_step;
    double times[64], peaks[64], libs[64], mfus[64], mfus_lib[64], phases[4][64];
    double peaks16[64], libs16[64], mfus16[64];
    double loss = 0, first_loss = 0, norm = 0;
    int have_lib = 1, bf16 = act == IG_ACT_BF16;
    for (int i = 0; i < o->warmup + n; i++) {
        double ts = ig_now(), ph[4];
        norm = train_step(m, opt, &bt, i + 1, &loss, ph);
        double dt = ig_now() - ts;
        if (i == 0) first_loss = loss;
        if (i < o->warmup) continue;
        int j = i - o->warmup;
        times[j] = dt;
        peak_pair g = peak_now(pl, bf16);
        peaks[j] = g.be, libs[j] = g.lib, have_lib &= g.lib > 0;
        mfus[j] = step_flops / dt / 1e9 / g.be;
        mfus_lib[j] = step_flops / dt / 1e9 / peak_best(g);
        peaks16[j] = g.be16, libs16[j] = g.lib16;
        mfus16[j] = bf16 ? step_flops / dt / 1e9 / g.be16 : 0;
        for (int k = 0; k < 4; k++) phases[k][j] = ph[k];
    }
    double rss = peak_rss_mib(), rss_end_now = rss_now_mib(), load1 = loadavg();
    double sorted[64];
    memcpy(sorted, times, (size_t)n * sizeof *times);
    double step_s = median(sorted, n), peak = median(peaks, n), mfu = median(mfus, n);
    double lib = have_lib ? median(libs, n) : 0, mfu_lib = median(mfus_lib, n);
    double peak16 = median(peaks16, n), lib16 = median(libs16, n), mfu16 = median(mfus16, n);
    double model_gflops = step_flops / step_s / 1e9;
    double mb = (double)ig_model_num_params(mc) * 4 / 1048576.0;
    char shape[256];

    printf("\n== %s, B=%d T=%d (%d tokens per step), %d thread%s, %s, load %.1f -> %.1f\n",
           ig_model_describe(mc, shape, sizeof shape), B, T, B * T, o->threads,
           o->threads > 1 ? "s" : "",
           bf16 ? "bf16 (act tensors in bf16, fp32 master weights)" : "fp32", load0, load1);
    if (dit)
        printf("  %.1fM parameters; clips of %d frames of %dx%d, %d tokens each; model built in "
               "%.1f s\n",
               (double)ig_model_num_params(mc) / 1e6, o->F[i_shape], o->H[i_shape], o->W[i_shape],
               T, create_s);
    else
        printf("  %.1fM parameters (vocabulary padded to %d); model built in %.1f s\n",
               (double)ig_model_num_params(mc) / 1e6, mc->padded_vocab, create_s);
    printf("  step (zero grads, forward+backward, grad norm, clip, AdamW): median %.3f s of %d "
           "(min %.3f, max %.3f) after %d warm-up; loss %.3f -> %.3f, grad norm %.3f\n",
           step_s, n, sorted[0], sorted[n - 1], o->warmup, first_loss, loss, norm);
    printf("  its phases (medians): zero grads %.3f s, forward+backward %.3f s, grad norm %.3f s, "
           "AdamW %.3f s\n",
           median(phases[0], n), median(phases[1], n), median(phases[2], n), median(phases[3], n));
    printf("  %.1f tokens/s; model %.1f GFLOP/s (%.1f MFLOP per token forward, x3 for training)\n",
           tokens_per_step / step_s, model_gflops, fpt / 1e6);
    printf("  GEMM peak, a %d^3 sgemm on %d threads measured just after each step: through the "
           "backend's matmul %.1f GFLOP/s (median; %.1f-%.1f)",
           PEAK_SIZE, o->threads, peak, peaks[0], peaks[n - 1]);
    if (have_lib)
        printf(", oneDNN's own sgemm with its own threads %.1f (%.1f-%.1f)\n", lib, libs[0],
               libs[n - 1]);
    else
        printf("; oneDNN could not be loaded for its own figure\n");
    printf("  MFU %.3f: a step's model FLOP/s over the backend's peak just after it, median of the "
           "steps %s",
           mfu, bf16 ? "(the fp32 peak; the bf16 one below)" : "(target >= 0.65)");
    if (have_lib) printf("; %.3f over the higher of the two peaks", mfu_lib);
    printf("\n");
    if (bf16) {
        printf("  bf16 GEMM peak, the same %d^3 GEMM in bf16 (fp32 sums) just after each step: "
               "through the bf16 backend's matmul %.1f GFLOP/s (%.1f-%.1f; %.2fx the fp32 one)",
               PEAK_SIZE, peak16, peaks16[0], peaks16[n - 1], peak16 / peak);
        if (lib16 > 0)
            printf(", oneDNN's own bf16 GEMM with its own threads %.1f (%.1f-%.1f)", lib16,
                   libs16[0], libs16[n - 1]);
        printf("\n  bf16 MFU %.3f: over the backend's bf16 peak just after each step (median); "
               "%.3f over the fp32 peak (above)\n",
               mfu16, mfu);
        if (ref && ref->ok)
            printf("  against the fp32 run of this shape: %.2fx its tokens/s (%.1f vs %.1f), "
                   "%.2fx its MFU over the fp32 peak (the load-corrected ratio), peak RSS %.0f vs "
                   "%.0f MiB = %.2fx\n",
                   tokens_per_step / step_s / ref->tok_s, tokens_per_step / step_s, ref->tok_s,
                   mfu / ref->mfu, rss, ref->rss_mib, rss / ref->rss_mib);
    }
    printf("  peak RSS %.0f MiB (%.0f MiB once the model was built, when %.0f MiB were resident; "
           "%.0f MiB resident after the steps); parameters, gradients and AdamW moments are 4 x "
           "%.0f MiB\n",
           rss, rss_built, rss_built_now, rss_end_now, mb);
    print_act_memory(m, B, T, o->recompute, (double)ig_backend_act_size(be));
    fflush(stdout);

    if (o->breakdown) run_breakdown(m, opt, &bt, o, pl, step_s, memcpy_gbs(ctx), ref, &res);
    ig_optimizer_free(opt);
    ig_model_free(m);
    free_input(&in);
    ig_backend_free(be);
    ig_ctx_free(ctx);

    res.ok = 1;
    res.step_s = step_s, res.tok_s = tokens_per_step / step_s;
    res.model_gflops = model_gflops, res.peak_gflops = peak, res.mfu = mfu;
    res.lib_gflops = lib, res.mfu_lib = mfu_lib;
    res.peak16_gflops = peak16, res.lib16_gflops = lib16, res.mfu16 = mfu16;
    res.rss_mib = rss;
    return res;
}

/* Runs one shape in a child process on a backend of act type act, serving its requests for the
 * GEMM peak, and returns what it sent back (ok = 0 when it failed); ref as run_shape's. */
static shape_result run_shape_child(const bench_opts *o, int i_shape, ig_act_type act,
                                    const shape_result *ref, int turns) {
    shape_result res = {0};
    int req[2], rep[2];
    fflush(stdout), fflush(stderr);
    if (pipe(req) != 0 || pipe(rep) != 0) die("pipe", NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork", NULL);
    if (pid == 0) {
        close(req[0]), close(rep[1]);
        peak_link pl = {req[1], rep[0]};
        shape_result r = turns                           ? run_turns(o, i_shape)
                         : o->recompute == RECOMPUTE_ALL ? run_recompute(o, i_shape)
                                                         : run_shape(o, &pl, i_shape, act, ref);
        fflush(stdout);
        char c = 'r';
        _exit(write_full(pl.req, &c, 1) == 0 && write_full(pl.req, &r, sizeof r) == 0 ? 0 : 1);
    }
    close(req[1]), close(rep[0]);
    int ok = peak_serve(o->threads, act == IG_ACT_BF16, req[0], rep[1], &res);
    close(req[0]), close(rep[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) memset(&res, 0, sizeof res);
    return res;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_train [threads=2] [--arch gpt2|llama|dit] [--shape BxT | "
                    "BxFxHxW]... [--steps 5] [--warmup 2] [--replays 3] [--no-breakdown] "
                    "[--no-scaling] [--recompute none|selective|full|all] [--latents C] "
                    "[--dtype fp32|bf16]\n");
    exit(2);
}

int main(int argc, char **argv) {
    bench_opts o = {
        .threads = 2, .warmup = 2, .steps = 5, .replays = 3, .breakdown = 1, .scaling = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--arch") && i + 1 < argc) {
            const char *v = argv[++i];
            o.arch = -1;
            for (int k = 0; ig_model_archs[k]; k++)
                if (!strcmp(v, ig_model_archs[k])) o.arch = k;
            if (o.arch < 0) usage();
        } else if (!strcmp(a, "--recompute") && i + 1 < argc) {
            const char *v = argv[++i];
            o.recompute = strcmp(v, "all") ? -2 : RECOMPUTE_ALL;
            for (int k = 0; k < 3; k++)
                if (!strcmp(v, recompute_names[k])) o.recompute = k;
            if (o.recompute == -2) usage();
        } else if (!strcmp(a, "--steps") && i + 1 < argc)
            o.steps = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && i + 1 < argc)
            o.warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--replays") && i + 1 < argc)
            o.replays = atoi(argv[++i]);
        else if (!strcmp(a, "--no-breakdown"))
            o.breakdown = 0;
        else if (!strcmp(a, "--no-scaling"))
            o.scaling = 0;
        else if (!strcmp(a, "--dtype") && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "fp32") && strcmp(v, "bf16")) usage();
            o.bf16 = !strcmp(v, "bf16");
        } else if (!strcmp(a, "--latents") && i + 1 < argc)
            g_latents = atoi(argv[++i]);
        else if (!strcmp(a, "--shape") && i + 1 < argc && o.n_shapes < MAX_SHAPES) {
            int k = o.n_shapes,
                got = sscanf(argv[++i], "%dx%dx%dx%d", &o.B[k], &o.T[k], &o.H[k], &o.W[k]);
            if (got == 4) /* clips: BxFxHxW */
                o.F[k] = o.T[k], o.T[k] = 0;
            else if (got != 2)
                usage();
            o.n_shapes++;
        } else if (a[0] >= '0' && a[0] <= '9')
            o.threads = atoi(a);
        else
            usage();
    }
    if (o.threads < 1 || o.warmup < 0 || (o.bf16 && o.recompute == RECOMPUTE_ALL)) usage();
    int dit = o.arch == arch_of("dit");
    if (o.n_shapes == 0 && dit) { /* 2 clips of 8 x 16 x 16 (512 tokens), 1 of 8 x 32 x 32 */
        o.B[0] = 2, o.F[0] = 8, o.H[0] = 16, o.W[0] = 16;
        o.B[1] = 1, o.F[1] = 8, o.H[1] = 32, o.W[1] = 32;
        o.n_shapes = 2;
    } else if (o.n_shapes == 0) {
        o.B[0] = 4, o.T[0] = 64, o.B[1] = 4, o.T[1] = 256;
        o.n_shapes = 2;
    }
    for (int i = 0; i < o.n_shapes; i++) {
        if (dit) {
            bench_dims d;
            ig_model_config c = bench_shape(o.arch, 0, &d);
            ig_err err = {0};
            if (o.F[i] < 1 || ig_model_clip_tokens(&c, o.F[i], o.H[i], o.W[i], &o.T[i], &err))
                usage();
        }
        if (o.B[i] < 1 || o.T[i] < 1 || (!dit && o.T[i] > 1024)) usage();
    }

    printf("%s training steps on the CPU backend, %d thread%s, recompute %s%s; each shape in a "
           "process of its own\n",
           o.arch == arch_of("llama") ? "A Llama of GPT-2 small's size"
           : dit                      ? "A video DiT with DiT-S/2's blocks"
                                      : "GPT-2 small",
           o.threads, o.threads > 1 ? "s" : "",
           o.recompute == RECOMPUTE_ALL ? "none, selective and full compared"
                                        : recompute_names[o.recompute],
           o.bf16 ? "; in fp32, then in bf16 against it" : "");
    shape_result r[MAX_SHAPES], r16[MAX_SHAPES] = {{0}}, rt[MAX_SHAPES] = {{0}};
    for (int i = 0; i < o.n_shapes; i++) {
        r[i] = run_shape_child(&o, i, IG_ACT_F32, NULL, 0);
        if (o.bf16) r16[i] = run_shape_child(&o, i, IG_ACT_BF16, &r[i], 0);
        if (o.bf16) rt[i] = run_shape_child(&o, i, IG_ACT_F32, NULL, 1);
    }

    printf("\ntrain_summary arch=%s threads=%d dtype=%s", ig_model_archs[o.arch], o.threads,
           o.bf16 ? "bf16" : "fp32");
    int failed = 0;
    for (int i = 0; i < o.n_shapes; i++) {
        if (!r[i].ok) {
            fprintf(stderr, "bench_train: the %dx%d run failed\n", o.B[i], o.T[i]);
            failed = 1;
            continue;
        }
        const char *k = "";
        char key[32];
        if (dit)
            snprintf(key, sizeof key, "%dx%dx%dx%d", r[i].B, o.F[i], o.H[i], o.W[i]);
        else
            snprintf(key, sizeof key, "%dx%d", r[i].B, r[i].T);
        k = key;
        if (o.recompute == RECOMPUTE_ALL) {
            if (!r[i].rc_same) {
                fprintf(stderr, "bench_train: %s: the modes' losses differ\n", k);
                failed = 1;
            }
            for (int m = 0; m < 3; m++)
                printf(" slot_mib_%s_%s=%.1f hand_mib_%s_%s=%.1f step_x_%s_%s=%.3f",
                       recompute_names[m], k, r[i].rc_slot_mib[m], recompute_names[m], k,
                       r[i].rc_hand_mib[m], recompute_names[m], k, r[i].rc_ratio[m]);
            continue;
        }
        printf(" step_s_%s=%.3f tok_s_%s=%.1f model_gflops_%s=%.1f gemm_peak_%s=%.1f mfu_%s=%.3f "
               "onednn_peak_%s=%.1f mfu_strict_%s=%.3f rss_mib_%s=%.0f",
               k, r[i].step_s, k, r[i].tok_s, k, r[i].model_gflops, k, r[i].peak_gflops, k,
               r[i].mfu, k, r[i].lib_gflops, k, r[i].mfu_lib, k, r[i].rss_mib);
        if (!o.bf16) continue;
        const shape_result *h = &r16[i];
        if (!h->ok) {
            fprintf(stderr, "bench_train: the %s run in bf16 failed\n", k);
            failed = 1;
            continue;
        }
        /* x_fp32: tokens/s over the fp32 run's; x_fp32_mfu: the same over the fp32 peaks measured
         * after each run's steps (corrects for a load that changed between the two runs);
         * x_fp32_turns: the steps taking turns in one process (the least exposed to the load) */
        printf(" bf16_step_s_%s=%.3f bf16_tok_s_%s=%.1f bf16_model_gflops_%s=%.1f "
               "bf16_gemm_peak_%s=%.1f bf16_onednn_peak_%s=%.1f bf16_mfu_%s=%.3f "
               "bf16_mfu_fp32peak_%s=%.3f bf16_x_fp32_%s=%.3f bf16_x_fp32_mfu_%s=%.3f "
               "bf16_rss_mib_%s=%.0f bf16_rss_x_fp32_%s=%.3f",
               k, h->step_s, k, h->tok_s, k, h->model_gflops, k, h->peak16_gflops, k,
               h->lib16_gflops, k, h->mfu16, k, h->mfu, k, h->tok_s / r[i].tok_s, k,
               h->mfu / r[i].mfu, k, h->rss_mib, k, h->rss_mib / r[i].rss_mib);
        if (rt[i].ok)
            printf(" bf16_x_fp32_turns_%s=%.3f bf16_turn_step_s_%s=%.3f fp32_turn_step_s_%s=%.3f",
                   k, rt[i].turn_x, k, rt[i].turn_step16, k, rt[i].turn_step32);
    }
    printf("\n");
    return failed;
}
