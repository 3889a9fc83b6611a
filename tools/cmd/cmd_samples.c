/* cmd_samples.c - `ingot samples`: the micro-batches a data-parallel rank would see, one line each
 * (step, rank, micro-batch, global sample ids, xxh3 of the tokens), for debugging and tests of
 * the distributed proxy sampler and of resume. Thin over ig_data_stream + ig_loader
 * (loader.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_data_args.h"

const char ig_usage_samples[] =
    "usage: ingot samples --seq-len L --samples N --dp D --rank R --micro-batch B\n"
    "                     [--grad-accum A] [--start STEP] [--steps K] [--tokens|--hash]\n"
    "                     [options] W1 P1 [W2 P2 ...] | P\n"
    "\n"
    "Prints the micro-batches data-parallel rank R of D would get from the loader, starting at\n"
    "global step STEP (as a run resumed there would): one line per micro-batch,\n"
    "  step=S rank=R micro=M ids=G1,G2,... xxh3=HASH [tokens=...]\n"
    "where G are global sample ids of the infinite stream (past the end of the blend it continues\n"
    "with a reshuffled block) and HASH is the xxh3 of the micro-batch's int32 tokens [B, L+1].\n"
    "Per step, the union over ranks of (micro, rank) in order is samples [S*G, (S+1)*G),\n"
    "G = B * D * A, whatever D is.\n"
    "\n" IG_DATA_USAGE "batches:\n"
    "  --dp D                  data-parallel size (default 1)\n"
    "  --rank R                the rank, < D, or 'all' for every rank in order (default 0)\n"
    "  --micro-batch B         samples per micro-batch (default 1)\n"
    "  --grad-accum A          micro-batches per step and rank (default 1)\n"
    "  --start STEP            first step (default 0)\n"
    "  --steps K               steps to print (default 1)\n"
    "  --hash                  print the xxh3 of each micro-batch (default)\n"
    "  --tokens                also print the tokens (rows separated by '|')\n"
    "  --prefetch N            loader threads (default 2; 0: none)\n"
    "\n"
    "examples:\n"
    "  ingot samples --seq-len 128 --samples 1000 --dp 2 --rank 1 --micro-batch 4 \\\n"
    "      --start 0 --steps 3 out/shakespeare\n"
    "  ingot samples --seq-len 2048 --samples 100000 --dp 8 --rank all --micro-batch 2 \\\n"
    "      --grad-accum 4 --start 100 --steps 2 0.7 out/web 0.3 out/code\n"
    "  ingot samples --seq-len 16 --samples 10 --micro-batch 1 --tokens out/shakespeare\n";

typedef struct samples_args {
    uint64_t dp, micro_batch, grad_accum, start, steps;
    int prefetch, tokens, hash;
    const char *rank; /* a number, or "all" */
} samples_args;

static const ig_cfg_key samples_keys[] = {
    IG_KEY_INT("samples.dp", samples_args, dp, "0", 0, 65536,
               "data-parallel size; 0: 1, or the number of processes under mpirun"),
    IG_KEY_STRING("samples.rank", samples_args, rank, "0", "the rank, < dp, or all"),
    IG_KEY_INT("samples.micro_batch", samples_args, micro_batch, "1", 1, 1048576,
               "samples per micro-batch"),
    IG_KEY_INT("samples.grad_accum", samples_args, grad_accum, "1", 1, 1048576,
               "micro-batches per step and rank"),
    IG_KEY_INT("samples.start", samples_args, start, "0", 0, 0, "first step"),
    IG_KEY_INT("samples.steps", samples_args, steps, "1", 0, 0, "steps to print"),
    IG_KEY_BOOL("samples.tokens", samples_args, tokens, "false", "also print the tokens"),
    IG_KEY_BOOL("samples.hash", samples_args, hash, "true",
                "print the xxh3 of each micro-batch (always done)"),
    IG_KEY_INT("samples.prefetch", samples_args, prefetch, "2", 0, 64,
               "loader threads per rank (0: none)"),
};

static void print_batch(const ig_batch *b, int tokens) {
    printf("step=%llu rank=%u micro=%u ids=", (unsigned long long)b->step, b->rank, b->micro);
    for (uint32_t j = 0; j < b->micro_batch; j++)
        printf("%s%llu", j ? "," : "", (unsigned long long)b->sample_ids[j]);
    size_t row = (size_t)b->seq_len + 1;
    char hex[17];
    ig_hash64_hex(ig_xxh3_64(b->tokens, (size_t)b->micro_batch * row * sizeof(int32_t)), hex);
    printf(" xxh3=%s", hex);
    if (tokens) {
        printf(" tokens=");
        for (uint32_t j = 0; j < b->micro_batch; j++) {
            if (j) putchar('|');
            for (size_t t = 0; t < row; t++)
                printf("%s%d", t ? " " : "", (int)b->tokens[j * row + t]);
        }
    }
    putchar('\n');
}

static int parse(const ig_command *cmd, int argc, char **argv, ig_data_args *a, samples_args *s,
                 int *all_ranks, uint64_t *rank) {
    memset(s, 0, sizeof *s);
    ig_cmd_table own = {samples_keys, sizeof samples_keys / sizeof samples_keys[0], s};
    int rc = ig_data_args_parse(cmd, argc, argv, a, &own, 1);
    if (rc >= 0) return rc;
    if (s->dp == 0) s->dp = 1;
    *all_ranks = !strcmp(s->rank, "all");
    if (!*all_ranks && !ig_cmd_parse_u64(cmd, "--rank", s->rank, rank)) return IG_EXIT_USAGE;
    if (!*all_ranks && *rank >= s->dp)
        return ig_cmd_usage_error(cmd, "--rank %llu is out of range for --dp %llu",
                                  (unsigned long long)*rank, (unsigned long long)s->dp);
    if (*all_ranks && s->dp > 256)
        return ig_cmd_usage_error(cmd, "--rank all supports --dp up to 256");
    return -1;
}

int ig_cmd_samples(const ig_command *cmd, int argc, char **argv) {
    ig_data_args a;
    samples_args s;
    int all_ranks = 0;
    uint64_t rank = 0;
    int rc = parse(cmd, argc, argv, &a, &s, &all_ranks, &rank);
    if (rc >= 0) {
        ig_data_args_free(&a);
        return rc;
    }
    uint64_t G_check, start_samples, span;
    if (__builtin_mul_overflow((uint64_t)s.micro_batch * s.dp, (uint64_t)s.grad_accum, &G_check) ||
        __builtin_mul_overflow(s.start, G_check, &start_samples) ||
        __builtin_mul_overflow((uint64_t)s.steps, G_check, &span) ||
        __builtin_add_overflow(start_samples, span, &start_samples)) {
        ig_data_args_free(&a);
        return ig_cmd_usage_error(cmd,
                                  "--start %llu with a global batch of %llu samples is "
                                  "past 2^64 samples",
                                  (unsigned long long)s.start, (unsigned long long)G_check);
    }
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_data_stream *ds = NULL;
    uint32_t n_loaders = all_ranks ? (uint32_t)s.dp : 1;
    ig_loader **lds = calloc(n_loaders, sizeof *lds);
    if (!lds) {
        ig_data_args_free(&a);
        return ig_cmd_failf("out of memory");
    }
    if (ig_cmd_ctx(&ctx, &a.flags, &err) != IG_OK ||
        ig_data_stream_open(&ds, ctx, &a.r.opts, &err) != IG_OK)
        goto fail;
    uint64_t G = s.micro_batch * s.dp * s.grad_accum;
    ig_loader_state start = {.consumed_samples = s.start * G, .index_key = ig_data_stream_key(ds)};
    for (uint32_t i = 0; i < n_loaders; i++) {
        ig_loader_opts lo = ig_loader_opts_default();
        lo.make_block = ig_data_stream_make_block;
        lo.block_user = ds;
        lo.micro_batch = (uint32_t)s.micro_batch;
        lo.grad_accum = (uint32_t)s.grad_accum;
        lo.dp = (uint32_t)s.dp;
        lo.rank = all_ranks ? i : (uint32_t)rank;
        lo.prefetch_threads = s.prefetch;
        lo.prefetch_depth = 4;
        if (ig_loader_create(&lds[i], ctx, &lo, &start, &err) != IG_OK) goto fail;
    }
    for (uint64_t step = 0; step < s.steps; step++)
        for (uint64_t m = 0; m < s.grad_accum; m++)
            for (uint32_t i = 0; i < n_loaders; i++) {
                ig_batch b;
                if (ig_loader_next(lds[i], &b, &err) != IG_OK) goto fail;
                print_batch(&b, s.tokens);
            }
    if (fflush(stdout) != 0) {
        ig_err_errno(&err, errno, "writing the output");
        goto fail;
    }
    rc = IG_EXIT_OK;
    goto done;
fail:
    rc = ig_cmd_fail(&err);
done:
    for (uint32_t i = 0; i < n_loaders; i++) ig_loader_free(lds[i]);
    free(lds);
    ig_data_stream_close(ds);
    ig_ctx_free(ctx);
    ig_data_args_free(&a);
    return rc;
}
