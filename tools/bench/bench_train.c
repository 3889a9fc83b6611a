/* bench_train.c - the GPT-2 trainer's step on the CPU backend (issue 9, section 7): GPT-2 small
 * (12 layers, 12 heads, 768 wide, 1024 positions, vocabulary 50257 padded to 50304) trained on
 * micro-batches of random valid tokens, with every figure a ratio against a reference measured in
 * the same run (DESIGN 7):
 *   - the step (zero gradients, forward + backward, gradient norm, AdamW with clipping, the
 *     hyperparameters of configs/gpt2-small.yaml at a constant learning rate): median time of
 *     several steps after warm-up ones, its phases, tokens/s, model FLOP/s
 *     (ig_model_flops_per_token x 3 per token) and MFU: that over the GEMM peak of the same backend
 *     at the same thread count (a 2048^3 sgemm through ig_kernel_matmul_forward), measured just
 *     after each step (the machine is shared: the load changes from one step to the next), and
 *     also over oneDNN's own sgemm with its own threads on the same matrices (the backend cuts
 *     every GEMM into single-threaded chunks, which costs a square GEMM more than the trainer's);
 *     the peak resident memory (getrusage);
 *   - where the step's time goes: the pass's kernels replayed one by one at the step's shapes on
 *     buffers of the same sizes (the calls of train/gpt_pass.c and ig_gpt_adamw, in their order),
 *     each family's milliseconds per step, share, GFLOP/s over the GEMM peak or GB/s over memcpy,
 *     and its speed-up over one thread; then every GEMM of the step alone (forward, input
 *     gradient, weight gradient) against the peak.
 * Each micro-batch shape runs in a child process of its own, so that its peak memory is its own;
 * the parent measures the GEMM peaks when the child asks, between its steps, so that the peak's
 * buffers are not in the child's memory.
 *
 *   bench_train [threads=2] [--shape BxT]... [--steps 5] [--warmup 2] [--replays 3]
 *               [--no-breakdown] [--no-scaling]
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

typedef struct bench_opts {
    int threads, warmup, steps, replays, breakdown, scaling;
    int n_shapes, B[MAX_SHAPES], T[MAX_SHAPES];
} bench_opts;

/* What a child sends back for the summary line. */
typedef struct shape_result {
    int ok, B, T;
    double step_s, tok_s, model_gflops, peak_gflops, mfu, rss_mib;
    double lib_gflops, mfu_lib; /* oneDNN's own sgemm peak; MFU over the higher peak */
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

static ig_backend *make_backend(ig_ctx *ctx) {
    ig_backend *be = NULL;
    ig_err err = {0};
    ig_backend_opts o = ig_backend_opts_default();
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
 * its own threads (0 when it could not be loaded). */
typedef struct peak_pair {
    double be, lib;
} peak_pair;

static double peak_best(peak_pair p) {
    return p.lib > p.be ? p.lib : p.be;
}

/* In the child: the GEMM peaks now, measured by the parent. */
static peak_pair peak_now(const peak_link *l) {
    char c = 'p';
    peak_pair g = {0, 0};
    if (write_full(l->req, &c, 1) != 0 || read_full(l->rep, &g, sizeof g) != 0)
        die("the parent process does not answer", NULL);
    return g;
}

/* oneDNN's sgemm (the backend's GEMM library, kernels/cpu/cpu_gemm.c), loaded with dlopen as
 * bench_kernels does, and the OpenMP thread count it runs with */
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t,
                             const float *, int64_t, float, float *, int64_t);

/* In the parent: the PEAK_SIZE^3 sgemm through the backend's matmul and through the library with
 * its own threads, each the median GFLOP/s of PEAK_REPS. */
typedef struct peak_ref {
    int threads;
    ig_backend *be;
    float *a, *b, *c;
    void *lib;
    dnnl_sgemm_fn sgemm;
    void (*set_threads)(int);
} peak_ref;

static peak_pair peak_measure(peak_ref *p) {
    double g[PEAK_REPS], h[PEAK_REPS], S = PEAK_SIZE, f = 2.0 * S * S * S / 1e9;
    for (int r = 0; r < PEAK_REPS; r++) {
        double t0 = ig_now();
        ig_kernel_matmul_forward(p->be, p->c, p->a, p->b, IG_W_IN_OUT, NULL, PEAK_SIZE, PEAK_SIZE,
                                 PEAK_SIZE);
        sync_or_die(p->be);
        g[r] = f / (ig_now() - t0);
    }
    peak_pair out = {median(g, PEAK_REPS), 0};
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
    return out;
}

/* In the parent: answers the child's requests until it sends its result or dies. */
static int peak_serve(int threads, int req, int rep, shape_result *res) {
    ig_ctx *ctx = make_ctx(threads);
    peak_ref p = {.threads = threads, .be = make_backend(ctx)};
    size_t n = (size_t)PEAK_SIZE * PEAK_SIZE;
    p.a = balloc(p.be, n * 4), p.b = balloc(p.be, n * 4), p.c = balloc(p.be, n * 4);
    fill(p.a, n, 1), fill(p.b, n, 2);
    static const char *const names[] = {"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names && !p.lib; i++)
        p.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (p.lib) {
        p.sgemm = (dnnl_sgemm_fn)dlsym(p.lib, "dnnl_sgemm");
        p.set_threads = (void (*)(int))dlsym(p.lib, "omp_set_num_threads");
        if (!p.set_threads) p.sgemm = NULL;
    }
    peak_measure(&p); /* warm-up */
    int ok = 0;
    char c;
    while (read_full(req, &c, 1) == 0) {
        if (c == 'p') {
            peak_pair g = peak_measure(&p);
            if (write_full(rep, &g, sizeof g) != 0) break;
        } else {
            ok = c == 'r' && read_full(req, res, sizeof *res) == 0;
            break;
        }
    }
    ig_backend_release(p.be, p.a), ig_backend_release(p.be, p.b), ig_backend_release(p.be, p.c);
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
static double train_step(ig_model *m, ig_optimizer *opt, const int32_t *tokens, int B, int T,
                         int step, double *loss, double phase[4]) {
    ig_err err = {0};
    uint64_t counted = 0;
    double norm = 0, t[5];
    ig_batch_opts bo = {0, 0, -1};
    t[0] = ig_now();
    if (ig_model_zero_grads(m, &err) != IG_OK) die("zero grads", &err);
    t[1] = ig_now();
    if (ig_model_forward_backward(m, tokens, B, T, &bo, 1.0f, loss, &counted, &err) != IG_OK)
        die("forward+backward", &err);
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

/* ---- the step replayed kernel by kernel ------------------------------------------------------ */

enum {
    W_LN1W,
    W_LN1B,
    W_QKVW,
    W_QKVB,
    W_PROJW,
    W_PROJB,
    W_LN2W,
    W_LN2B,
    W_FCW,
    W_FCB,
    W_FCPW,
    W_FCPB,
    W_PER_LAYER
};

/* Kernel families of the breakdown. */
enum {
    K_MM_F_QKV,
    K_MM_F_PROJ,
    K_MM_F_FC,
    K_MM_F_FCP,
    K_MM_F_HEAD,
    K_MM_B_QKV,
    K_MM_B_PROJ,
    K_MM_B_FC,
    K_MM_B_FCP,
    K_MM_B_HEAD,
    K_ATT_F,
    K_ATT_B,
    K_LN_F,
    K_LN_B,
    K_GELU_F,
    K_GELU_B,
    K_CE,
    K_ENC_F,
    K_ENC_B,
    K_ZERO,
    K_NORM,
    K_ADAMW,
    K_COUNT
};

static const char *const k_names[K_COUNT] = {
    "matmul fwd  qkv (C -> 3C)",
    "matmul fwd  attn proj (C -> C)",
    "matmul fwd  fc (C -> 4C)",
    "matmul fwd  fc proj (4C -> C)",
    "matmul fwd  lm head (C -> Vp)",
    "matmul bwd  qkv",
    "matmul bwd  attn proj",
    "matmul bwd  fc",
    "matmul bwd  fc proj",
    "matmul bwd  lm head",
    "attention fwd",
    "attention bwd",
    "layernorm fwd (+residual)",
    "layernorm bwd",
    "bias+gelu fwd",
    "bias+gelu bwd",
    "crossentropy fwd+bwd",
    "encoder fwd",
    "encoder bwd",
    "zero grads and dres",
    "grad norm (sum of squares)",
    "adamw",
};

/* A run of consecutive tensors with the same weight decay: one AdamW call (as ig_gpt_adamw). */
typedef struct adam_run {
    uint64_t off, n;
    int decay;
} adam_run;

typedef struct layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *attproj, *res2, *ln2, *ln2_mean,
        *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
} layer_acts;

/* Buffers of the same sizes as the model's, and where each tensor lies in them. */
typedef struct replay {
    int B, T, C, NH, L, V, Vp, N;
    uint64_t n_params;
    float *params, *grads, *m, *v;
    uint64_t off_wte, off_wpe, off_lnfw, off_lnfb;
    uint64_t (*off)[W_PER_LAYER]; /* [L][W_PER_LAYER] */
    adam_run *runs;
    size_t n_runs;
    float *act; /* one allocation for every activation below */
    layer_acts *layer;
    float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *dres, *dln, *datty, *dqkv, *dfcg, *dfch,
        *losses, *dloss;
    int32_t *tok; /* inputs [N], targets [N] */
    double t[K_COUNT];
} replay;

static float *P(const replay *r, int l, int w) {
    return r->params + r->off[l][w];
}
static float *G(const replay *r, int l, int w) {
    return r->grads + r->off[l][w];
}

static uint64_t tensor_off(const ig_model *m, const char *name) {
    const ig_model_tensor *t = ig_model_tensor_find(m, name);
    if (!t) die(name, NULL);
    return t->offset;
}

/* Lays out the replay from the model (its tensor table, its parameters' values) and the tokens. */
static void replay_create(replay *r, ig_backend *be, ig_model *model, const int32_t *tokens, int B,
                          int T) {
    static const char *const wn[W_PER_LAYER] = {
        "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
        "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
    const ig_model_config *c = ig_model_shape(model);
    memset(r, 0, sizeof *r);
    r->B = B, r->T = T, r->C = c->d_model, r->NH = c->n_head, r->L = c->n_layer;
    r->V = c->vocab_size, r->Vp = c->padded_vocab, r->N = B * T;
    r->n_params = ig_model_num_params(c);
    r->off = calloc((size_t)r->L, sizeof *r->off);
    r->layer = calloc((size_t)r->L, sizeof *r->layer);
    r->runs = calloc(ig_model_num_tensors(model), sizeof *r->runs);
    if (!r->off || !r->layer || !r->runs) die("out of memory", NULL);
    r->off_wte = tensor_off(model, "transformer.wte.weight");
    r->off_wpe = tensor_off(model, "transformer.wpe.weight");
    r->off_lnfw = tensor_off(model, "transformer.ln_f.weight");
    r->off_lnfb = tensor_off(model, "transformer.ln_f.bias");
    for (int l = 0; l < r->L; l++)
        for (int w = 0; w < W_PER_LAYER; w++) {
            char name[128];
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, wn[w]);
            r->off[l][w] = tensor_off(model, name);
        }
    size_t nt = ig_model_num_tensors(model);
    for (size_t i = 0; i < nt;) {
        size_t j = i;
        const ig_model_tensor *ti = ig_model_tensor_at(model, i);
        while (j + 1 < nt && ig_model_tensor_at(model, j + 1)->decay == ti->decay) j++;
        const ig_model_tensor *tj = ig_model_tensor_at(model, j);
        r->runs[r->n_runs++] =
            (adam_run){ti->offset, tj->offset + tj->numel - ti->offset, ti->decay};
        i = j + 1;
    }

    size_t np = (size_t)r->n_params * 4;
    r->params = balloc(be, np), r->grads = balloc(be, np);
    r->m = balloc(be, np), r->v = balloc(be, np);
    ig_err err = {0};
    float *host = malloc(np);
    if (!host) die("out of memory", NULL);
    if (ig_model_read(model, IG_MODEL_PARAMS, host, &err) != IG_OK ||
        ig_backend_upload_f32(be, r->params, host, r->n_params, &err) != IG_OK)
        die("parameters", &err);
    free(host);

    /* the activations as train/gpt_model.c lays them out */
    size_t N = (size_t)r->N, C = (size_t)r->C, NH = (size_t)r->NH;
    size_t per_layer = N * C * 18 + N * 4 + N * NH; /* 1+3+1+1+1+1+4+4+1+1 N C, stats, lse */
    size_t total =
        N * C + (size_t)r->L * per_layer + N * C + 2 * N + N * (size_t)r->Vp + N * C * 14 + 2 * N;
    float *p = r->act = balloc(be, total * 4);
#define TAKE(x, n) (x = p, p += (n))
    TAKE(r->encoded, N * C);
    for (int l = 0; l < r->L; l++) {
        layer_acts *y = &r->layer[l];
        TAKE(y->ln1, N * C), TAKE(y->ln1_mean, N), TAKE(y->ln1_rstd, N);
        TAKE(y->qkv, 3 * N * C), TAKE(y->atty, N * C), TAKE(y->lse, N * NH);
        TAKE(y->attproj, N * C), TAKE(y->res2, N * C);
        TAKE(y->ln2, N * C), TAKE(y->ln2_mean, N), TAKE(y->ln2_rstd, N);
        TAKE(y->fch, 4 * N * C), TAKE(y->fch_gelu, 4 * N * C);
        TAKE(y->fcproj, N * C), TAKE(y->res3, N * C);
    }
    TAKE(r->lnf, N * C), TAKE(r->lnf_mean, N), TAKE(r->lnf_rstd, N);
    TAKE(r->logits, N * (size_t)r->Vp);
    TAKE(r->dres, N * C), TAKE(r->dln, N * C), TAKE(r->datty, N * C);
    TAKE(r->dqkv, 3 * N * C), TAKE(r->dfcg, 4 * N * C), TAKE(r->dfch, 4 * N * C);
    TAKE(r->losses, N), TAKE(r->dloss, N);
#undef TAKE
    if ((size_t)(p - r->act) != total) die("replay layout", NULL);
    for (size_t i = 0; i < N; i++) r->dloss[i] = 1.0f / (float)N;
    r->tok = balloc(be, 2 * N * sizeof(int32_t));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            r->tok[b * T + t] = tokens[b * (T + 1) + t];
            r->tok[N + (size_t)(b * T + t)] = tokens[b * (T + 1) + t + 1];
        }
}

static void replay_free(replay *r, ig_backend *be) {
    float *bufs[] = {r->params, r->grads, r->m, r->v, r->act};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ig_backend_release(be, bufs[i]);
    ig_backend_release(be, r->tok);
    free(r->off), free(r->layer), free(r->runs);
}

/* Times one call into r->t[k] (the backend is synchronised first and after: on a queue the time
 * is the kernel's). */
#define TIMED(r, be, k, call)                                                                      \
    do {                                                                                           \
        double t0_ = ig_now();                                                                     \
        call;                                                                                      \
        sync_or_die(be);                                                                           \
        (r)->t[k] += ig_now() - t0_;                                                               \
    } while (0)

/* One step, the calls of train/gpt_pass.c in their order, each timed into its family. */
static void replay_step(replay *r, ig_backend *be, int step) {
    int B = r->B, T = r->T, N = r->N, C = r->C, NH = r->NH, L = r->L;
    const int32_t *in = r->tok, *tg = r->tok + N;
    float *wte = r->params + r->off_wte, *wpe = r->params + r->off_wpe;
    memset(r->t, 0, sizeof r->t);
    sync_or_die(be);
    TIMED(r, be, K_ZERO, ig_backend_zero(be, r->grads, r->n_params * 4, NULL));
    /* forward */
    TIMED(r, be, K_ENC_F, ig_kernel_encoder_forward(be, r->encoded, in, wte, wpe, B, T, C));
    for (int l = 0; l < L; l++) {
        layer_acts *y = &r->layer[l];
        if (l == 0) {
            TIMED(r, be, K_LN_F,
                  ig_kernel_layernorm_forward(be, y->ln1, y->ln1_mean, y->ln1_rstd, r->encoded,
                                              P(r, l, W_LN1W), P(r, l, W_LN1B), N, C, 1e-5f));
        } else {
            layer_acts *p = &r->layer[l - 1];
            TIMED(r, be, K_LN_F,
                  ig_kernel_residual_layernorm_forward(
                      be, p->res3, y->ln1, y->ln1_mean, y->ln1_rstd, p->res2, p->fcproj,
                      P(r, l, W_LN1W), P(r, l, W_LN1B), N, C, 1e-5f));
        }
        TIMED(r, be, K_MM_F_QKV,
              ig_kernel_matmul_forward(be, y->qkv, y->ln1, P(r, l, W_QKVW), IG_W_IN_OUT,
                                       P(r, l, W_QKVB), N, C, 3 * C));
        TIMED(r, be, K_ATT_F,
              ig_kernel_attention_forward(be, y->atty, y->lse, y->qkv, NULL,
                                          &(ig_attention_shape){.B = B,
                                                                .T = T,
                                                                .n_head = NH,
                                                                .n_kv_head = NH,
                                                                .head_size = C / NH,
                                                                .causal = 1}));
        TIMED(r, be, K_MM_F_PROJ,
              ig_kernel_matmul_forward(be, y->attproj, y->atty, P(r, l, W_PROJW), IG_W_IN_OUT,
                                       P(r, l, W_PROJB), N, C, C));
        float *res = l == 0 ? r->encoded : r->layer[l - 1].res3;
        TIMED(r, be, K_LN_F,
              ig_kernel_residual_layernorm_forward(be, y->res2, y->ln2, y->ln2_mean, y->ln2_rstd,
                                                   res, y->attproj, P(r, l, W_LN2W),
                                                   P(r, l, W_LN2B), N, C, 1e-5f));
        TIMED(r, be, K_MM_F_FC,
              ig_kernel_matmul_forward(be, y->fch, y->ln2, P(r, l, W_FCW), IG_W_IN_OUT, NULL, N, C,
                                       4 * C));
        TIMED(r, be, K_GELU_F,
              ig_kernel_gelu_bias_forward(be, y->fch_gelu, y->fch, P(r, l, W_FCB), N, 4 * C));
        TIMED(r, be, K_MM_F_FCP,
              ig_kernel_matmul_forward(be, y->fcproj, y->fch_gelu, P(r, l, W_FCPW), IG_W_IN_OUT,
                                       P(r, l, W_FCPB), N, 4 * C, C));
    }
    layer_acts *last = &r->layer[L - 1];
    float *lnfw = r->params + r->off_lnfw, *lnfb = r->params + r->off_lnfb;
    TIMED(r, be, K_LN_F,
          ig_kernel_residual_layernorm_forward(be, last->res3, r->lnf, r->lnf_mean, r->lnf_rstd,
                                               last->res2, last->fcproj, lnfw, lnfb, N, C, 1e-5f));
    TIMED(r, be, K_MM_F_HEAD,
          ig_kernel_matmul_forward(be, r->logits, r->lnf, wte, IG_W_OUT_IN, NULL, N, C, r->Vp));
    TIMED(r, be, K_CE,
          ig_kernel_crossentropy(be, r->losses, r->logits, tg, r->dloss, N, r->V, r->Vp));
    /* backward */
    TIMED(r, be, K_MM_B_HEAD,
          ig_kernel_matmul_backward(be, r->dln, r->grads + r->off_wte, NULL, r->logits, r->lnf, wte,
                                    IG_W_OUT_IN, N, C, r->Vp));
    TIMED(r, be, K_ZERO, ig_backend_zero(be, r->dres, (size_t)N * (size_t)C * 4, NULL));
    TIMED(r, be, K_LN_B,
          ig_kernel_layernorm_backward(be, r->dres, r->grads + r->off_lnfw, r->grads + r->off_lnfb,
                                       r->dln, last->res3, lnfw, r->lnf_mean, r->lnf_rstd, N, C));
    for (int l = L - 1; l >= 0; l--) {
        layer_acts *y = &r->layer[l];
        float *res = l == 0 ? r->encoded : r->layer[l - 1].res3;
        TIMED(r, be, K_MM_B_FCP,
              ig_kernel_matmul_backward(be, r->dfcg, G(r, l, W_FCPW), G(r, l, W_FCPB), r->dres,
                                        y->fch_gelu, P(r, l, W_FCPW), IG_W_IN_OUT, N, 4 * C, C));
        TIMED(r, be, K_GELU_B,
              ig_kernel_gelu_bias_backward(be, r->dfch, G(r, l, W_FCB), r->dfcg, y->fch,
                                           P(r, l, W_FCB), N, 4 * C));
        TIMED(r, be, K_MM_B_FC,
              ig_kernel_matmul_backward(be, r->dln, G(r, l, W_FCW), NULL, r->dfch, y->ln2,
                                        P(r, l, W_FCW), IG_W_IN_OUT, N, C, 4 * C));
        TIMED(r, be, K_LN_B,
              ig_kernel_layernorm_backward(be, r->dres, G(r, l, W_LN2W), G(r, l, W_LN2B), r->dln,
                                           y->res2, P(r, l, W_LN2W), y->ln2_mean, y->ln2_rstd, N,
                                           C));
        TIMED(r, be, K_MM_B_PROJ,
              ig_kernel_matmul_backward(be, r->datty, G(r, l, W_PROJW), G(r, l, W_PROJB), r->dres,
                                        y->atty, P(r, l, W_PROJW), IG_W_IN_OUT, N, C, C));
        TIMED(r, be, K_ATT_B,
              ig_kernel_attention_backward(be, r->dqkv, r->datty, y->qkv, y->atty, y->lse, NULL,
                                           &(ig_attention_shape){.B = B,
                                                                 .T = T,
                                                                 .n_head = NH,
                                                                 .n_kv_head = NH,
                                                                 .head_size = C / NH,
                                                                 .causal = 1}));
        TIMED(r, be, K_MM_B_QKV,
              ig_kernel_matmul_backward(be, r->dln, G(r, l, W_QKVW), G(r, l, W_QKVB), r->dqkv,
                                        y->ln1, P(r, l, W_QKVW), IG_W_IN_OUT, N, C, 3 * C));
        TIMED(r, be, K_LN_B,
              ig_kernel_layernorm_backward(be, r->dres, G(r, l, W_LN1W), G(r, l, W_LN1B), r->dln,
                                           res, P(r, l, W_LN1W), y->ln1_mean, y->ln1_rstd, N, C));
    }
    TIMED(r, be, K_ENC_B,
          ig_kernel_encoder_backward(be, r->grads + r->off_wte, r->grads + r->off_wpe, r->dres, in,
                                     B, T, C));
    /* gradient norm and AdamW */
    double ss = 0;
    TIMED(r, be, K_NORM, ss = ig_kernel_sum_squares(be, r->grads, r->n_params));
    float clip = sqrt(ss) > GRAD_CLIP ? (float)(GRAD_CLIP / sqrt(ss)) : 1.0f;
    for (size_t i = 0; i < r->n_runs; i++) {
        const adam_run *a = &r->runs[i];
        TIMED(r, be, K_ADAMW,
              ig_kernel_adamw(be, r->params + a->off, NULL, r->grads + a->off, r->m + a->off,
                              r->v + a->off, a->n, LR, BETA1, BETA2, EPS,
                              a->decay ? WEIGHT_DECAY : 0.0f, clip, step));
    }
}

/* Per family: calls per step, FLOPs (GEMMs and attention: what they compute; attention counted
 * causal, its backward with the recomputed scores) or bytes it must move (the others). */
static void family_costs(const replay *r, int calls[K_COUNT], double flops[K_COUNT],
                         double bytes[K_COUNT]) {
    double N = r->N, C = r->C, L = r->L, Vp = r->Vp, n = (double)r->n_params;
    double att = (double)r->B * r->NH * (double)r->T * r->T * (r->C / r->NH);
    double gemm[5] = {N * C * 3 * C, N * C * C, N * C * 4 * C, N * 4 * C * C, N * C * Vp};
    for (int i = 0; i < 5; i++) {
        calls[K_MM_F_QKV + i] = calls[K_MM_B_QKV + i] = i == 4 ? 1 : r->L;
        flops[K_MM_F_QKV + i] = 2 * gemm[i] * calls[K_MM_F_QKV + i];
        flops[K_MM_B_QKV + i] = 4 * gemm[i] * calls[K_MM_B_QKV + i];
    }
    calls[K_ATT_F] = calls[K_ATT_B] = r->L;
    flops[K_ATT_F] = 2 * att * L, flops[K_ATT_B] = 5 * att * L;
    calls[K_LN_F] = 2 * r->L + 1, calls[K_LN_B] = 2 * r->L + 1;
    bytes[K_LN_F] = (2 + 4 * (2 * L)) * N * C * 4; /* plain: in + out; fused: a, b, res, out */
    bytes[K_LN_B] = 4 * N * C * 4 * calls[K_LN_B];
    calls[K_GELU_F] = calls[K_GELU_B] = r->L;
    bytes[K_GELU_F] = 2 * N * 4 * C * 4 * L, bytes[K_GELU_B] = 3 * N * 4 * C * 4 * L;
    calls[K_CE] = 1, bytes[K_CE] = 2 * N * Vp * 4;
    calls[K_ENC_F] = calls[K_ENC_B] = 1;
    bytes[K_ENC_F] = 3 * N * C * 4, bytes[K_ENC_B] = 5 * N * C * 4;
    calls[K_ZERO] = 2, bytes[K_ZERO] = (n + N * C) * 4;
    calls[K_NORM] = 1, bytes[K_NORM] = n * 4;
    calls[K_ADAMW] = (int)r->n_runs, bytes[K_ADAMW] = 7 * n * 4;
}

/* ---- every GEMM of the step alone ------------------------------------------------------------ */

typedef struct gemm_shape {
    const char *name;
    int in, out, count, head;
} gemm_shape;

/* Median seconds of `reps` runs of one GEMM of the step: which 0 = forward, 1 = input gradient
 * (dout @ W^T: the forward matmul with the weight's other layout, the same product), 2 = weight
 * gradient (matmul_backward without dinp and dbias). */
static double gemm_alone(replay *r, ig_backend *be, const gemm_shape *s, int which, int reps) {
    int N = r->N, in = s->in, out = s->out;
    ig_w_layout lay = s->head ? IG_W_OUT_IN : IG_W_IN_OUT,
                flip = s->head ? IG_W_IN_OUT : IG_W_OUT_IN;
    float *w = s->head ? r->params + r->off_wte : r->params + r->off[0][W_FCW];
    float *dw = s->head ? r->grads + r->off_wte : r->grads + r->off[0][W_FCW];
    /* inputs and outputs big enough for any shape: the MLP's [N, 4C] tensors and the logits */
    float *x = s->head ? r->lnf : r->layer[0].fch, *y = s->head ? r->logits : r->layer[0].fch_gelu;
    double t[16];
    if (reps > 16) reps = 16;
    for (int k = -1; k < reps; k++) { /* k = -1: warm-up */
        double t0 = ig_now();
        if (which == 0)
            ig_kernel_matmul_forward(be, y, x, w, lay, NULL, N, in, out);
        else if (which == 1)
            ig_kernel_matmul_forward(be, x, y, w, flip, NULL, N, out, in);
        else
            ig_kernel_matmul_backward(be, NULL, dw, NULL, y, x, w, lay, N, in, out);
        sync_or_die(be);
        if (k >= 0) t[k] = ig_now() - t0;
    }
    return median(t, reps);
}

/* ---- one micro-batch shape, in a child process ----------------------------------------------- */

static void run_breakdown(replay *r, ig_backend *be, ig_backend *be1, const bench_opts *o,
                          const peak_link *pl, double step_s, double bw) {
    int calls[K_COUNT] = {0};
    double flops[K_COUNT] = {0}, bytes[K_COUNT] = {0};
    family_costs(r, calls, flops, bytes);
    double tk[K_COUNT][16], t1[K_COUNT][16], med[K_COUNT], med1[K_COUNT], peaks[16];
    int reps = o->replays < 1 ? 1 : o->replays > 16 ? 16 : o->replays;
    replay_step(r, be, 1); /* warm-up */
    for (int i = 0; i < reps; i++) {
        replay_step(r, be, 2 + i);
        peaks[i] = peak_best(peak_now(pl));
        for (int k = 0; k < K_COUNT; k++) tk[k][i] = r->t[k];
    }
    double peak = median(peaks, reps);
    if (o->scaling && o->threads > 1) {
        for (int i = 0; i < reps; i++) {
            replay_step(r, be1, 2 + reps + i);
            for (int k = 0; k < K_COUNT; k++) t1[k][i] = r->t[k];
        }
    }
    double sum = 0, sum1 = 0, gemm_t = 0, gemm_f = 0;
    for (int k = 0; k < K_COUNT; k++) {
        med[k] = median(tk[k], reps), sum += med[k];
        med1[k] = o->scaling && o->threads > 1 ? median(t1[k], reps) : 0, sum1 += med1[k];
        if (k <= K_MM_B_HEAD) gemm_t += med[k], gemm_f += flops[k];
    }
    printf("\n  where the time goes: the step's kernels replayed one by one (median of %d "
           "replays), %d threads%s; GEMM peak (the higher of the two) %.1f GFLOP/s after them\n",
           reps, o->threads, o->scaling && o->threads > 1 ? "; speed-up over 1 thread" : "", peak);
    printf("  %-32s %5s %9s %6s %9s %8s %7s\n", "kernel family", "calls", "ms/step", "share",
           "GFLOP/s", "of peak", o->scaling && o->threads > 1 ? "x 1 thr" : "");
    for (int k = 0; k < K_COUNT; k++) {
        char speed[64] = "", up[32] = "";
        if (flops[k] > 0)
            snprintf(speed, sizeof speed, "%9.1f %8.3f", flops[k] / med[k] / 1e9,
                     flops[k] / med[k] / 1e9 / peak);
        else
            snprintf(speed, sizeof speed, "%6.1f GB/s %4.2f cp", bytes[k] / med[k] / 1e9,
                     bytes[k] / med[k] / 1e9 / bw);
        if (med1[k] > 0) snprintf(up, sizeof up, "%6.2fx", med1[k] / med[k]);
        printf("  %-32s %5d %9.1f %5.1f%% %s %7s\n", k_names[k], calls[k], med[k] * 1e3,
               100 * med[k] / sum, speed, up);
    }
    printf("  sum of the kernels %.3f s (the timed steps' median: %.3f s; the step also stages the "
           "tokens and reads the losses back)\n",
           sum, step_s);
    if (sum1 > 0)
        printf("  on 1 thread the same kernels take %.3f s: %.2fx for %d threads\n", sum1,
               sum1 / sum, o->threads);
    printf("  GEMMs %.3f s (%.1f%%) at %.1f GFLOP/s = %.3f of the peak; everything else %.3f s\n",
           gemm_t, 100 * gemm_t / sum, gemm_f / gemm_t / 1e9, gemm_f / gemm_t / 1e9 / peak,
           sum - gemm_t);
    printf("  (GB/s: the bytes a kernel must move over the time; \"cp\": over memcpy's %.1f GB/s "
           "on the same threads)\n",
           bw);

    /* every GEMM of the step alone */
    int C = r->C;
    gemm_shape shapes[] = {{"qkv", C, 3 * C, r->L, 0},
                           {"attn proj", C, C, r->L, 0},
                           {"fc", C, 4 * C, r->L, 0},
                           {"fc proj", 4 * C, C, r->L, 0},
                           {"lm head", C, r->Vp, 1, 1}};
    printf(
        "\n  every GEMM of the step alone (median of %d), GFLOP/s and [fraction of the higher GEMM "
        "peak measured after the row]%s:\n",
        reps, o->scaling && o->threads > 1 ? ", speed-up over 1 thread" : "");
    printf("  %-10s %-22s %5s %24s %24s %24s\n", "GEMM", "N x in -> out", "count", "forward",
           "input grad (dout W^T)", "weight grad (x^T dout)");
    double alone_t = 0, alone_f = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        char dims[64];
        snprintf(dims, sizeof dims, "%d x %d -> %d", r->N, shapes[s].in, shapes[s].out);
        printf("  %-10s %-22s %5d", shapes[s].name, dims, shapes[s].count);
        double f = 2.0 * r->N * (double)shapes[s].in * shapes[s].out, t[3], up[3] = {0};
        for (int w = 0; w < 3; w++) {
            t[w] = gemm_alone(r, be, &shapes[s], w, reps);
            alone_t += t[w] * shapes[s].count, alone_f += f * shapes[s].count;
            if (o->scaling && o->threads > 1)
                up[w] = gemm_alone(r, be1, &shapes[s], w, reps) / t[w];
        }
        double row_peak = peak_best(peak_now(pl));
        for (int w = 0; w < 3; w++) {
            char ups[32] = "";
            if (up[w] > 0) snprintf(ups, sizeof ups, " %4.2fx", up[w]);
            printf(" %8.1f [%5.3f]%s", f / t[w] / 1e9, f / t[w] / 1e9 / row_peak, ups);
        }
        printf("  (peak %.1f)\n", row_peak);
    }
    printf("  the step's GEMMs alone: %.3f s at %.1f GFLOP/s = %.3f of the peak (the MFU if "
           "nothing else took time, less the attention FLOPs)\n",
           alone_t, alone_f / alone_t / 1e9, alone_f / alone_t / 1e9 / peak);
    replay_free(r, be);
}

static shape_result run_shape(const bench_opts *o, const peak_link *pl, int B, int T) {
    shape_result res = {0};
    res.B = B, res.T = T;
    double load0 = loadavg();
    ig_ctx *ctx = make_ctx(o->threads), *ctx1 = make_ctx(1);
    ig_backend *be = make_backend(ctx), *be1 = make_backend(ctx1);
    ig_model_config c = {
        .n_layer = 12, .n_head = 12, .d_model = 768, .seq_len = 1024, .vocab_size = 50257};
    ig_model *m = NULL;
    ig_err err = {0};
    double t0 = ig_now();
    ig_optimizer *opt = NULL;
    if (ig_model_create(&m, ctx, be, &c, B, T, 1234, &err) != IG_OK ||
        ig_optimizer_create(&opt, ctx, m, &err) != IG_OK)
        die("model", &err);
    double create_s = ig_now() - t0, rss_built = peak_rss_mib(), rss_built_now = rss_now_mib();
    const ig_model_config *mc = ig_model_shape(m);
    int32_t *tokens = malloc((size_t)B * (size_t)(T + 1) * sizeof *tokens);
    if (!tokens) die("out of memory", NULL);
    uint64_t s = 0x1234567ull;
    for (int i = 0; i < B * (T + 1); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = (int32_t)((s >> 33) % (uint64_t)mc->vocab_size);
    }

    /* warm-up steps, then timed ones, each followed by the GEMM peak (measured by the parent) */
    int n = o->steps < 1 ? 1 : o->steps > 64 ? 64 : o->steps;
    double fpt = ig_model_flops_per_token(mc, T), tokens_per_step = (double)B * T;
    double step_flops = 3.0 * fpt * tokens_per_step;
    double times[64], peaks[64], libs[64], mfus[64], mfus_lib[64], phases[4][64];
    double loss = 0, first_loss = 0, norm = 0;
    int have_lib = 1;
    for (int i = 0; i < o->warmup + n; i++) {
        double ts = ig_now(), ph[4];
        norm = train_step(m, opt, tokens, B, T, i + 1, &loss, ph);
        double dt = ig_now() - ts;
        if (i == 0) first_loss = loss;
        if (i < o->warmup) continue;
        int j = i - o->warmup;
        times[j] = dt;
        peak_pair g = peak_now(pl);
        peaks[j] = g.be, libs[j] = g.lib, have_lib &= g.lib > 0;
        mfus[j] = step_flops / dt / 1e9 / g.be;
        mfus_lib[j] = step_flops / dt / 1e9 / peak_best(g);
        for (int k = 0; k < 4; k++) phases[k][j] = ph[k];
    }
    double rss = peak_rss_mib(), rss_end_now = rss_now_mib(), load1 = loadavg();
    double sorted[64];
    memcpy(sorted, times, (size_t)n * sizeof *times);
    double step_s = median(sorted, n), peak = median(peaks, n), mfu = median(mfus, n);
    double lib = have_lib ? median(libs, n) : 0, mfu_lib = median(mfus_lib, n);
    double model_gflops = step_flops / step_s / 1e9;
    double mb = (double)ig_model_num_params(mc) * 4 / 1048576.0;

    printf("\n== GPT-2 small, B=%d T=%d (%d tokens per step), %d thread%s, load %.1f -> %.1f\n", B,
           T, B * T, o->threads, o->threads > 1 ? "s" : "", load0, load1);
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
           "steps (target >= 0.65)",
           mfu);
    if (have_lib) printf("; %.3f over the higher of the two peaks", mfu_lib);
    printf("\n");
    printf("  peak RSS %.0f MiB (%.0f MiB once the model was built, when %.0f MiB were resident; "
           "%.0f MiB resident after the steps); parameters, gradients and AdamW moments are 4 x "
           "%.0f MiB\n",
           rss, rss_built, rss_built_now, rss_end_now, mb);
    fflush(stdout);

    if (o->breakdown) { /* the replay's buffers take the model's place */
        double bw = memcpy_gbs(ctx);
        replay r;
        replay_create(&r, be, m, tokens, B, T);
        ig_optimizer_free(opt);
        opt = NULL;
        ig_model_free(m);
        m = NULL;
        run_breakdown(&r, be, be1, o, pl, step_s, bw);
    }
    ig_optimizer_free(opt);
    ig_model_free(m);
    free(tokens);
    ig_backend_free(be), ig_backend_free(be1);
    ig_ctx_free(ctx), ig_ctx_free(ctx1);

    res.ok = 1;
    res.step_s = step_s, res.tok_s = tokens_per_step / step_s;
    res.model_gflops = model_gflops, res.peak_gflops = peak, res.mfu = mfu;
    res.lib_gflops = lib, res.mfu_lib = mfu_lib;
    res.rss_mib = rss;
    return res;
}

/* Runs one shape in a child process, serving its requests for the GEMM peak, and returns what it
 * sent back (ok = 0 when it failed). */
static shape_result run_shape_child(const bench_opts *o, int B, int T) {
    shape_result res = {0};
    int req[2], rep[2];
    fflush(stdout), fflush(stderr);
    if (pipe(req) != 0 || pipe(rep) != 0) die("pipe", NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork", NULL);
    if (pid == 0) {
        close(req[0]), close(rep[1]);
        peak_link pl = {req[1], rep[0]};
        shape_result r = run_shape(o, &pl, B, T);
        fflush(stdout);
        char c = 'r';
        _exit(write_full(pl.req, &c, 1) == 0 && write_full(pl.req, &r, sizeof r) == 0 ? 0 : 1);
    }
    close(req[1]), close(rep[0]);
    int ok = peak_serve(o->threads, req[0], rep[1], &res);
    close(req[0]), close(rep[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) memset(&res, 0, sizeof res);
    return res;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_train [threads=2] [--shape BxT]... [--steps 5] [--warmup 2] "
                    "[--replays 3] [--no-breakdown] [--no-scaling]\n");
    exit(2);
}

int main(int argc, char **argv) {
    bench_opts o = {
        .threads = 2, .warmup = 2, .steps = 5, .replays = 3, .breakdown = 1, .scaling = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--steps") && i + 1 < argc)
            o.steps = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && i + 1 < argc)
            o.warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--replays") && i + 1 < argc)
            o.replays = atoi(argv[++i]);
        else if (!strcmp(a, "--no-breakdown"))
            o.breakdown = 0;
        else if (!strcmp(a, "--no-scaling"))
            o.scaling = 0;
        else if (!strcmp(a, "--shape") && i + 1 < argc && o.n_shapes < MAX_SHAPES) {
            if (sscanf(argv[++i], "%dx%d", &o.B[o.n_shapes], &o.T[o.n_shapes]) != 2) usage();
            o.n_shapes++;
        } else if (a[0] >= '0' && a[0] <= '9')
            o.threads = atoi(a);
        else
            usage();
    }
    if (o.threads < 1 || o.warmup < 0) usage();
    if (o.n_shapes == 0) {
        o.B[0] = 4, o.T[0] = 64, o.B[1] = 4, o.T[1] = 256;
        o.n_shapes = 2;
    }
    for (int i = 0; i < o.n_shapes; i++)
        if (o.B[i] < 1 || o.T[i] < 1 || o.T[i] > 1024) usage();

    printf("GPT-2 small training steps on the CPU backend, %d thread%s; each shape in a process "
           "of its own\n",
           o.threads, o.threads > 1 ? "s" : "");
    shape_result r[MAX_SHAPES];
    for (int i = 0; i < o.n_shapes; i++) r[i] = run_shape_child(&o, o.B[i], o.T[i]);

    printf("\ntrain_summary threads=%d", o.threads);
    int failed = 0;
    for (int i = 0; i < o.n_shapes; i++) {
        if (!r[i].ok) {
            fprintf(stderr, "bench_train: the %dx%d run failed\n", o.B[i], o.T[i]);
            failed = 1;
            continue;
        }
        const char *k = "";
        char key[32];
        snprintf(key, sizeof key, "%dx%d", r[i].B, r[i].T);
        k = key;
        printf(" step_s_%s=%.3f tok_s_%s=%.1f model_gflops_%s=%.1f gemm_peak_%s=%.1f mfu_%s=%.3f "
               "onednn_peak_%s=%.1f mfu_strict_%s=%.3f rss_mib_%s=%.0f",
               k, r[i].step_s, k, r[i].tok_s, k, r[i].model_gflops, k, r[i].peak_gflops, k,
               r[i].mfu, k, r[i].lib_gflops, k, r[i].mfu_lib, k, r[i].rss_mib);
    }
    printf("\n");
    return failed;
}
