/* bench_t5.c - captions per second of ingot's T5 encoder (train.h's ig_text_encoder, CPU backend,
 * fp32), for run.sh to set against PyTorch's T5 encoder (t5_peer_torch.py: the goldens' model,
 * tests/data/golden/t5/make_t5_goldens.py) on the same weights, captions, batch and threads
 * (DESIGN section 7: a figure is a ratio against a peer measured in the same run).
 *
 * usage: bench_t5 [--threads N] [--shape base|small] [--captions K] [--batch B] [--seconds S]
 *                 --dir DIR
 *
 * A T5 v1.1 of the shape (base: d_model 768, 12 layers, 12 heads of 64, d_ff 2048; small: 512,
 * 8 layers, 6 heads of 64, d_ff 1024; vocabulary 32128 both) with random weights
 * (ig_model_create) is exported to DIR as a Hugging Face directory (the peer loads the same
 * file); K captions (default 16) of 40 to 120 tokens (PixArt-alpha's caption length, 120, at
 * most), random ids ending with eos, written to DIR/captions.txt (one caption's ids a line); the
 * encoder opened for batches of B (default 8) encodes all K, repeated for about S seconds (default
 * 3), the best pass counted; caption 0's features go to DIR/features0.f32 for the peer to compare.
 * Output: a line for people, and `t5_bench threads=N shape=... captions_per_s=X tokens_per_s=Y
 * gflops=Z` for run.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train.h"

static const char *shape_yaml(const char *s) {
    if (!strcmp(s, "small"))
        return "arch: t5, n_layer: 8, n_head: 6, d_model: 512, d_kv: 64, d_ff: 1024, "
               "vocab_size: 32128";
    return "arch: t5, n_layer: 12, n_head: 12, d_model: 768, d_kv: 64, d_ff: 2048, "
           "vocab_size: 32128";
}

static int fail(const ig_err *err) {
    fprintf(stderr, "bench_t5: %s\n", err->msg);
    return 1;
}

int main(int argc, char **argv) {
    int threads = 2, K = 16, B = 8;
    double seconds = 3;
    const char *shape = "base", *dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--shape"))
            shape = argv[i + 1];
        else if (!strcmp(argv[i], "--captions"))
            K = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
    }
    if (!dir || threads < 1 || K < 1 || B < 1) {
        fprintf(stderr, "usage: bench_t5 [--threads N] [--shape base|small] [--captions K] "
                        "[--batch B] [--seconds S] --dir DIR\n");
        return 2;
    }
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = threads;
    ig_backend_opts bo = ig_backend_opts_default();
    if (ig_ctx_create(&ctx, &co, &err) || ig_backend_create(&be, ctx, &bo, &err)) return fail(&err);
    /* the weights, made here and exported for both */
    ig_model_config c;
    ig_model *m = NULL;
    if (ig_model_config_parse(&c, shape_yaml(shape), &err) ||
        ig_model_create(&m, ctx, be, &c, 1, 1, 1234, &err) || ig_hf_export(ctx, m, 1, dir, 1, &err))
        return fail(&err);
    ig_model_free(m);
    /* the captions */
    int32_t **ids = calloc((size_t)K, sizeof *ids);
    int *lens = calloc((size_t)K, sizeof *lens);
    float **out = calloc((size_t)K, sizeof *out);
    uint64_t x = 88172645463325252ULL, tokens = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/captions.txt", dir);
    FILE *f = fopen(path, "w");
    if (!ids || !lens || !out || !f) {
        fprintf(stderr, "bench_t5: out of memory, or cannot write %s\n", path);
        return 1;
    }
    for (int k = 0; k < K; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        lens[k] = 40 + (int)(x % 81);
        tokens += (uint64_t)lens[k];
        ids[k] = malloc((size_t)lens[k] * sizeof(int32_t));
        out[k] = malloc((size_t)lens[k] * (size_t)c.d_model * sizeof(float));
        for (int t = 0; t < lens[k]; t++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            ids[k][t] = t + 1 == lens[k] ? 1 : 3 + (int32_t)(x % 32000);
            fprintf(f, "%s%d", t ? " " : "", (int)ids[k][t]);
        }
        fprintf(f, "\n");
    }
    fclose(f);
    /* the encoder, timed */
    ig_text_encoder *enc = NULL;
    ig_text_encoder_opts o = ig_text_encoder_opts_default();
    o.max_batch = B, o.max_len = 120;
    if (ig_text_encoder_open(&enc, ctx, be, dir, &o, &err)) return fail(&err);
    double best = 1e30, start = ig_now();
    for (int pass = 0; pass < 2 || ig_now() - start < seconds; pass++) {
        double t0 = ig_now();
        if (ig_text_encoder_encode(enc, (size_t)K, (const int32_t *const *)ids, lens, out, &err))
            return fail(&err);
        double dt = ig_now() - t0;
        best = dt < best ? dt : best;
    }
    snprintf(path, sizeof path, "%s/features0.f32", dir);
    if (ig_write_file_atomic(path, out[0], (size_t)lens[0] * (size_t)c.d_model * sizeof(float), 1,
                             &err))
        return fail(&err);
    double flops = 0;
    for (int k = 0; k < K; k++) flops += ig_model_flops_per_token(&c, lens[k]) * lens[k];
    char what[256];
    printf("ingot T5 encoder (%s), %d captions of 40-120 tokens (%llu), batches of %d, %d threads: "
           "%.2f captions/s, %.0f tokens/s, %.1f GFLOP/s\n",
           ig_model_describe(&c, what, sizeof what), K, (unsigned long long)tokens, B, threads,
           K / best, (double)tokens / best, flops / best / 1e9);
    printf("t5_bench threads=%d shape=%s captions_per_s=%.3f tokens_per_s=%.1f gflops=%.2f\n",
           threads, shape, K / best, (double)tokens / best, flops / best / 1e9);
    for (int k = 0; k < K; k++) free(ids[k]), free(out[k]);
    free(ids), free(lens), free(out);
    ig_text_encoder_free(enc);
    ig_backend_free(be);
    ig_ctx_free(ctx);
    return 0;
}
