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

enum {
    OPT_DP = IG_DATA_OPT_END,
    OPT_RANK,
    OPT_MICRO_BATCH,
    OPT_GRAD_ACCUM,
    OPT_START,
    OPT_STEPS,
    OPT_HASH,
    OPT_TOKENS,
    OPT_PREFETCH,
};

static const struct option long_opts[] = {
    IG_DATA_LONG_OPTS,
    {"dp", required_argument, NULL, OPT_DP},
    {"rank", required_argument, NULL, OPT_RANK},
    {"micro-batch", required_argument, NULL, OPT_MICRO_BATCH},
    {"grad-accum", required_argument, NULL, OPT_GRAD_ACCUM},
    {"start", required_argument, NULL, OPT_START},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"hash", no_argument, NULL, OPT_HASH},
    {"tokens", no_argument, NULL, OPT_TOKENS},
    {"prefetch", required_argument, NULL, OPT_PREFETCH},
    {NULL, 0, NULL, 0},
};

typedef struct samples_args {
    uint64_t dp, rank, micro_batch, grad_accum, start, steps, prefetch;
    int all_ranks, tokens;
} samples_args;

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

static int parse(const ig_command *cmd, int argc, char **argv, ig_data_args *a, samples_args *s) {
    *s = (samples_args){.dp = 1, .micro_batch = 1, .grad_accum = 1, .steps = 1, .prefetch = 2};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = ig_cmd_getopt(argc, argv, ":", long_opts)) != -1) {
        int r = ig_data_args_option(cmd, a, c, optarg);
        if (r == 1) continue;
        if (r != 0) return r;
        uint64_t *dst = NULL;
        const char *name = NULL;
        switch (c) {
        case OPT_DP:
            dst = &s->dp, name = "--dp";
            break;
        case OPT_MICRO_BATCH:
            dst = &s->micro_batch, name = "--micro-batch";
            break;
        case OPT_GRAD_ACCUM:
            dst = &s->grad_accum, name = "--grad-accum";
            break;
        case OPT_START:
            dst = &s->start, name = "--start";
            break;
        case OPT_STEPS:
            dst = &s->steps, name = "--steps";
            break;
        case OPT_PREFETCH:
            dst = &s->prefetch, name = "--prefetch";
            break;
        case OPT_RANK:
            if (!strcmp(optarg, "all")) {
                s->all_ranks = 1;
                continue;
            }
            s->all_ranks = 0;
            dst = &s->rank, name = "--rank";
            break;
        case OPT_HASH:
            s->tokens = 0;
            continue;
        case OPT_TOKENS:
            s->tokens = 1;
            continue;
        default:
            return ig_cmd_bad_option(cmd, c, argv);
        }
        if (!ig_cmd_parse_u64(cmd, name, optarg, dst)) return IG_EXIT_USAGE;
    }
    if (s->dp < 1 || s->dp > 65536) return ig_cmd_usage_error(cmd, "--dp must be in [1, 65536]");
    if (s->rank >= s->dp)
        return ig_cmd_usage_error(cmd, "--rank %llu is out of range for --dp %llu",
                                  (unsigned long long)s->rank, (unsigned long long)s->dp);
    if (s->micro_batch < 1 || s->micro_batch > (1u << 20))
        return ig_cmd_usage_error(cmd, "--micro-batch must be in [1, 2^20]");
    if (s->grad_accum < 1 || s->grad_accum > (1u << 20))
        return ig_cmd_usage_error(cmd, "--grad-accum must be in [1, 2^20]");
    if (s->prefetch > 64) return ig_cmd_usage_error(cmd, "--prefetch must be <= 64");
    if (s->all_ranks && s->dp > 256)
        return ig_cmd_usage_error(cmd, "--rank all supports --dp up to 256");
    return ig_data_args_finish(cmd, a, argc - optind, argv + optind);
}

int ig_cmd_samples(const ig_command *cmd, int argc, char **argv) {
    ig_data_args a;
    samples_args s;
    ig_data_args_init(&a);
    int rc = parse(cmd, argc, argv, &a, &s);
    if (rc != 0) {
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
    uint32_t n_loaders = s.all_ranks ? (uint32_t)s.dp : 1;
    ig_loader **lds = calloc(n_loaders, sizeof *lds);
    if (!lds) {
        ig_data_args_free(&a);
        return ig_cmd_failf("out of memory");
    }
    if (ig_cmd_ctx(&ctx, &a.flags, &err) != IG_OK ||
        ig_data_stream_open(&ds, ctx, &a.o, &err) != IG_OK)
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
        lo.rank = s.all_ranks ? i : (uint32_t)s.rank;
        lo.prefetch_threads = (int)s.prefetch;
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
