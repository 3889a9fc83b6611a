/* bench_vae.c - the VAE's encoder on the CPU backend at Stable Diffusion's shape, against PyTorch's
 * in the same run (tools/bench/vae_peer_torch.py, which writes the weights, the frames and its
 * moments of the first frame into DIR; run.sh runs the two side by side): the diffusers directory
 * DIR opened for inference (model.arch vae from its config.json), frames of SIZE x SIZE encoded to
 * the posterior's moments (ig_model_vae_encode) BATCH at a time after a warm-up batch:
 *   - frames/s;
 *   - the peak RSS while it encodes (sampled every millisecond from /proc/self/statm by a thread,
 *     as the peer samples its own; the weights included), and the backend's peak (its buffers and
 *     workspace: what ingot allocates itself);
 *   - the largest difference of the first frame's moments from PyTorch's, over their largest
 *     magnitude (the same model computed).
 *
 *   bench_vae DIR [--threads 2] [--size 256] [--frames 2] [--batch 1] [--reference]
 *
 * With --train [--steps 3]: training steps instead (the peer's --train writes the noise): the
 * model made with its gradients, the loss of BATCH frames (mean |decode(z) - x| + 1e-6 x the
 * mean KL term) forward and backward, and AdamW (lr 1e-4, no weight decay), after a first step
 * whose loss is compared with the peer's: the step time and the peak RSS.
 *
 * Ends with one machine-readable line "vae_bench k=v ...".
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "kernels/backend.h"
#include "train/train.h"

static void die(const char *what, const ig_err *err) {
    fprintf(stderr, "bench_vae: %s: %s\n", what, err ? err->msg : "");
    exit(1);
}

static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (f && fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
    if (f) fclose(f);
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

typedef struct sampler {
    atomic_int running;
    _Atomic uint64_t peak;
} sampler;

static void *sample(void *arg) {
    sampler *s = arg;
    while (atomic_load(&s->running)) {
        uint64_t r = rss_bytes();
        if (r > atomic_load(&s->peak)) atomic_store(&s->peak, r);
        usleep(1000);
    }
    return NULL;
}

static void *read_file(const char *dir, const char *name, size_t bytes) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    void *p = malloc(bytes ? bytes : 1);
    FILE *f = fopen(path, "rb");
    if (!p || !f || fread(p, 1, bytes, f) != bytes) die(path, NULL);
    fclose(f);
    return p;
}

/* --train: steps of the loss's forward and backward and AdamW, timed after a first one */
static int train_steps(ig_ctx *ctx, ig_backend *be, const char *dir, int threads, int S, int B,
                       int steps) {
    ig_err err = {0};
    ig_model_config shape;
    int32_t eod;
    ig_model *m = NULL;
    ig_optimizer *opt = NULL;
    if (ig_hf_read_config(ctx, dir, &shape, &eod, &err) != IG_OK) die(dir, &err);
    if (ig_model_create(&m, ctx, be, &shape, B, S * S, 1, &err) != IG_OK) die("model", &err);
    if (ig_hf_load(ctx, m, dir, &err) != IG_OK) die(dir, &err);
    if (ig_optimizer_create(&opt, ctx, m, &err) != IG_OK) die("optimizer", &err);
    int h = 0, w = 0, C = 0;
    if (ig_model_vae_latent_shape(&shape, S, S, &h, &w, &C, &err) != IG_OK) die("latent", &err);
    size_t per = (size_t)S * S * 3, lat = (size_t)h * w * C;
    uint8_t *frames = read_file(dir, "frames.bin", (size_t)B * per);
    float *noise = read_file(dir, "noise.bin", (size_t)B * lat * sizeof(float));
    ig_vae_input in = {
        .frames = frames, .B = B, .F = 1, .H = S, .W = S, .noise = noise, .kl_weight = 1e-6};
    ig_adamw_hparams hp = {.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    ig_vae_terms t, first = {0};
    sampler s = {.running = 1, .peak = rss_bytes()};
    pthread_t th;
    double t0 = 0;
    for (int k = 0; k <= steps; k++) {
        if (k == 1) { /* the first step was the warm-up */
            pthread_create(&th, NULL, sample, &s);
            t0 = ig_now();
        }
        if (ig_model_zero_grads(m, &err) != IG_OK || ig_model_vae_loss(m, &in, 1.0f, &t, &err) ||
            ig_optimizer_step(opt, k + 1, &hp, 1.0f, &err) != IG_OK)
            die("step", &err);
        if (k == 0) first = t;
    }
    double dt = (ig_now() - t0) / steps;
    atomic_store(&s.running, 0);
    pthread_join(th, NULL);
    printf("vae_bench train=1 threads=%d size=%d batch=%d params=%llu step_s=%.4f loss1=%.9f "
           "rss_peak_mib=%.1f\n",
           threads, S, B, (unsigned long long)ig_model_num_params(&shape), dt, first.loss,
           (double)atomic_load(&s.peak) / 1048576.0);
    free(frames);
    free(noise);
    ig_optimizer_free(opt);
    ig_model_free(m);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: bench_vae DIR [--threads N] [--size S] [--frames N] [--batch B]\n");
        return 2;
    }
    const char *dir = argv[1];
    int threads = 2, S = 256, N = 2, B = 1, reference = 0, train = 0, steps = 3;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--reference") || !strcmp(argv[i], "--train")) {
            reference |= !strcmp(argv[i], "--reference");
            train |= !strcmp(argv[i], "--train");
            continue;
        }
        int v = i + 1 < argc ? atoi(argv[++i]) : 0;
        if (!strcmp(argv[i - 1], "--threads"))
            threads = v;
        else if (!strcmp(argv[i - 1], "--size"))
            S = v;
        else if (!strcmp(argv[i - 1], "--frames"))
            N = v;
        else if (!strcmp(argv[i - 1], "--batch"))
            B = v;
    }
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_model *m = NULL;
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = threads;
    if (ig_ctx_create(&ctx, &co, &err) != IG_OK) die("context", &err);
    ig_backend_opts bo = ig_backend_opts_default();
    bo.reference = reference;
    if (ig_backend_create(&be, ctx, &bo, &err) != IG_OK) die("backend", &err);
    if (train) return train_steps(ctx, be, dir, threads, S, B, steps);
    if (ig_model_open(&m, ctx, be, dir, B, S * S, NULL, &err) != IG_OK) die(dir, &err);
    int h = 0, w = 0, C = 0;
    if (ig_model_vae_latent_shape(ig_model_shape(m), S, S, &h, &w, &C, &err) != IG_OK)
        die("the latent", &err);
    size_t per = (size_t)S * S * 3, lat = (size_t)h * w * 2 * C;
    uint8_t *frames = malloc((size_t)N * per);
    float *mo = malloc((size_t)N * lat * sizeof *mo), *want = malloc(lat * sizeof *want);
    char path[4200];
    snprintf(path, sizeof path, "%s/frames.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f || fread(frames, 1, (size_t)N * per, f) != (size_t)N * per) die(path, NULL);
    fclose(f);
    snprintf(path, sizeof path, "%s/moments.bin", dir);
    f = fopen(path, "rb");
    if (!f || fread(want, sizeof *want, lat, f) != lat) die(path, NULL);
    fclose(f);
    /* warm-up: the primitives made, the pages touched */
    if (ig_model_vae_encode(m, frames, B, S, S, mo, &err) != IG_OK) die("encode", &err);
    ig_backend_memory_reset_peak(be);
    sampler s = {.running = 1, .peak = rss_bytes()};
    uint64_t before = rss_bytes();
    pthread_t th;
    pthread_create(&th, NULL, sample, &s);
    double t0 = ig_now();
    for (int i = 0; i < N; i += B) {
        int k = N - i < B ? N - i : B;
        if (ig_model_vae_encode(m, frames + (size_t)i * per, k, S, S, mo + (size_t)i * lat, &err) !=
            IG_OK)
            die("encode", &err);
    }
    double dt = ig_now() - t0;
    atomic_store(&s.running, 0);
    pthread_join(th, NULL);
    ig_backend_memory bm;
    ig_backend_memory_info(be, &bm);
    double diff = 0, scale = 0;
    for (size_t i = 0; i < lat; i++) {
        diff = fmax(diff, fabs((double)mo[i] - want[i]));
        scale = fmax(scale, fabs(want[i]));
    }
    printf("vae_bench threads=%d size=%d frames=%d batch=%d params=%llu frames_s=%.4f "
           "rss_peak_mib=%.1f rss_before_mib=%.1f backend_peak_mib=%.1f moments_max_rel=%.3g\n",
           threads, S, N, B, (unsigned long long)ig_model_num_params(ig_model_shape(m)),
           (double)N / dt, (double)atomic_load(&s.peak) / 1048576.0, (double)before / 1048576.0,
           (double)bm.peak / 1048576.0, diff / scale);
    free(frames);
    free(mo);
    free(want);
    ig_model_free(m);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    return 0;
}
