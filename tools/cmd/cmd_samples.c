/* cmd_samples.c - `ingot samples`: the micro-batches a data-parallel rank would see, one line each
 * (step, rank, micro-batch, global sample ids, xxh3 of the tokens), for debugging and tests of
 * the distributed proxy sampler and of resume. Thin over ig_data_stream + ig_loader
 * (loader.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd_data_args.h"
#include "comm/comm.h"

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
    "G = B * D * A, whatever D is. Under mpirun -np D each process is one rank (--dp and --rank\n"
    "come from the launcher) and rank 0 prints every rank's lines in (step, micro, rank) order.\n"
    "\n" IG_DATA_USAGE "batches:\n"
    "  --dp D                  data-parallel size (default 1; under mpirun: the processes)\n"
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
    "  ingot samples --seq-len 16 --samples 10 --micro-batch 1 --tokens out/shakespeare\n"
    "  mpirun -np 4 ingot samples --seq-len 128 --samples 1000 --micro-batch 2 --steps 3 \\\n"
    "      0.7 out/web 0.3 out/code\n";

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
    IG_KEY_INT("samples.start", samples_args, start, "0", 0, 1.8446744073709552e19, "first step"),
    IG_KEY_INT("samples.steps", samples_args, steps, "1", 0, 9.2e18, "steps to print"),
    IG_KEY_BOOL("samples.tokens", samples_args, tokens, "false", "also print the tokens"),
    IG_KEY_BOOL("samples.hash", samples_args, hash, "true",
                "print the xxh3 of each micro-batch (always done)"),
    IG_KEY_INT("samples.prefetch", samples_args, prefetch, "2", 0, 64,
               "loader threads per rank (0: none)"),
};

static void print_batch(FILE *out, const ig_batch *b, int tokens) {
    fprintf(out, "step=%llu rank=%u micro=%u ids=", (unsigned long long)b->step, b->rank, b->micro);
    for (uint32_t j = 0; j < b->micro_batch; j++)
        fprintf(out, "%s%llu", j ? "," : "", (unsigned long long)b->sample_ids[j]);
    size_t row = (size_t)b->seq_len + 1;
    char hex[17];
    ig_hash64_hex(ig_xxh3_64(b->tokens, (size_t)b->micro_batch * row * sizeof(int32_t)), hex);
    fprintf(out, " xxh3=%s", hex);
    if (tokens) {
        fprintf(out, " tokens=");
        for (uint32_t j = 0; j < b->micro_batch; j++) {
            if (j) fputc('|', out);
            for (size_t t = 0; t < row; t++)
                fprintf(out, "%s%d", t ? " " : "", (int)b->tokens[j * row + t]);
        }
    }
    fputc('\n', out);
}

/* Under a launcher: this rank's micro-batches of one step (A lines) go to rank 0, which prints
 * every rank's in (micro, rank) order, as --rank all does in one process. */
static ig_status gather_step(ig_comm *comm, ig_ctx *ctx, const char *lines, size_t len,
                             uint64_t grad_accum, ig_err *err) {
    int world = ig_comm_size(comm);
    size_t *lens = calloc((size_t)world, sizeof *lens);
    void *all = NULL;
    size_t all_len = 0;
    if (!lens) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = ig_comm_gather_bytes(comm, lines, len, 0, &all, &all_len, lens, err);
    if (st == IG_OK && ig_comm_rank(comm) == 0) {
        const char **at = calloc((size_t)world, sizeof *at);
        if (!at) st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        for (int r = 0, off = 0; at && r < world; off += (int)lens[r], r++)
            at[r] = (const char *)all + off;
        for (uint64_t m = 0; at && m < grad_accum; m++)
            for (int r = 0; r < world; r++) {
                const char *nl = memchr(at[r], '\n', (size_t)((const char *)all + all_len - at[r]));
                if (!nl) continue;
                fwrite(at[r], 1, (size_t)(nl - at[r]) + 1, stdout);
                at[r] = nl + 1;
            }
        free(at);
    }
    ig_free(ctx, all);
    free(lens);
    return st;
}

static int parse(const ig_command *cmd, int argc, char **argv, ig_data_args *a, samples_args *s,
                 int *all_ranks, uint64_t *rank) {
    memset(s, 0, sizeof *s);
    ig_cmd_table own = {samples_keys, sizeof samples_keys / sizeof samples_keys[0], s};
    int rc = ig_data_args_parse(cmd, argc, argv, a, &own, 1);
    if (rc >= 0) return rc;
    uint64_t dp = s->dp ? s->dp : 1;
    *all_ranks = !strcmp(s->rank, "all");
    if (!*all_ranks && !ig_cmd_parse_u64(cmd, "--rank", s->rank, rank)) return IG_EXIT_USAGE;
    if (!*all_ranks && *rank >= dp)
        return ig_cmd_usage_error(cmd, "--rank %llu is out of range for --dp %llu",
                                  (unsigned long long)*rank, (unsigned long long)dp);
    if (*all_ranks && dp > 256)
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
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_data_stream *ds = NULL;
    uint32_t n_loaders = 0;
    ig_loader **lds = NULL;
    ig_comm *comm = NULL;
    if (ig_cmd_ctx(&ctx, &a.flags, &err) != IG_OK ||
        ig_comm_world(&comm, ctx, "samples", &err) != IG_OK)
        goto fail;
    /* under a launcher each process is one data-parallel rank, and rank 0 prints them all */
    int multi = ig_comm_size(comm) > 1;
    if (multi) {
        if ((s.dp && s.dp != (uint64_t)ig_comm_size(comm)) ||
            ig_config_is_set(a.cfg, "samples.rank")) {
            ig_err_set(&err, IG_ERR_INVALID_ARG,
                       "under a launcher the %d processes are the data-parallel ranks: give "
                       "neither --rank nor a --dp other than %d",
                       ig_comm_size(comm), ig_comm_size(comm));
            goto fail;
        }
        s.dp = (uint64_t)ig_comm_size(comm);
        rank = (uint64_t)ig_comm_rank(comm);
    }
    if (s.dp == 0) s.dp = 1;
    uint64_t G_check, start_samples, span;
    if (__builtin_mul_overflow((uint64_t)s.micro_batch * s.dp, (uint64_t)s.grad_accum, &G_check) ||
        __builtin_mul_overflow(s.start, G_check, &start_samples) ||
        __builtin_mul_overflow((uint64_t)s.steps, G_check, &span) ||
        __builtin_add_overflow(start_samples, span, &start_samples)) {
        rc = ig_cmd_usage_error(cmd,
                                "--start %llu with a global batch of %llu samples is past 2^64 "
                                "samples",
                                (unsigned long long)s.start, (unsigned long long)G_check);
        goto done;
    }
    n_loaders = all_ranks ? (uint32_t)s.dp : 1;
    lds = calloc(n_loaders, sizeof *lds);
    if (!lds) {
        ig_err_set(&err, IG_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (ig_data_stream_open(&ds, ctx, &a.r.opts, &err) != IG_OK) goto fail;
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
    for (uint64_t step = 0; step < s.steps; step++) {
        char *lines = NULL;
        size_t len = 0;
        FILE *out = multi ? open_memstream(&lines, &len) : stdout;
        ig_status st = out ? IG_OK : ig_err_set(&err, IG_ERR_NOMEM, "out of memory");
        for (uint64_t m = 0; st == IG_OK && m < s.grad_accum; m++)
            for (uint32_t i = 0; st == IG_OK && i < n_loaders; i++) {
                ig_batch b;
                if ((st = ig_loader_next(lds[i], &b, &err)) == IG_OK)
                    print_batch(out, &b, s.tokens);
            }
        if (multi && out) fclose(out);
        if (multi) {
            int all_ok = 0;
            ig_err cerr = {0};
            if (ig_comm_all_ok(comm, st == IG_OK, &all_ok, &cerr) != IG_OK && st == IG_OK)
                st = IG_ERR_IO, err = cerr;
            if (st == IG_OK && !all_ok)
                st = ig_err_set(&err, IG_ERR_CANCELLED, "another rank failed; see its message");
            if (st == IG_OK) st = gather_step(comm, ctx, lines, len, s.grad_accum, &err);
        }
        free(lines);
        if (st != IG_OK) goto fail;
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
    for (uint32_t i = 0; lds && i < n_loaders; i++) ig_loader_free(lds[i]);
    free(lds);
    ig_data_stream_close(ds);
    fflush(stdout);
    ig_comm_free(comm);
    ig_ctx_free(ctx);
    ig_data_args_free(&a);
    return rc;
}
