/* comm_ranks.c - the communicator under mpirun (run by tests/mpi/comm.sh): every collective and
 * point-to-point operation (all-to-all included: every element's sender, receiver and index, int32
 * and float), blocking and not, on the world and on groups split from it, checked against what
 * each rank can compute alone. Prints "comm_ranks: N checks passed" on rank 0 and
 * exits 1 on the first failure (naming the rank and the check). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

static int failures;

/* The value element i of the part that world rank src sends to rank dst of a group carries in the
 * all-to-all checks: it encodes all three (ranks < 100, i < 100), exact in int32 and float. */
static int32_t a2a_value(int src, int dst, size_t i) {
    return 10000 * src + 100 * dst + (int32_t)i;
}

/* An all-to-all over c of count int32 and count float per peer, and its non-blocking form; world
 * is this process's world rank and members[q] the world rank of c's rank q. Every element of
 * recv must be what its sender put there for this rank. Returns the number of failures. */
static int check_alltoall(ig_comm *c, int world, const int *members, size_t count, int *checks) {
    int rank = world, n = ig_comm_size(c), me = ig_comm_rank(c), bad = 0;
    size_t total = (size_t)n * count;
    int32_t *si = calloc(total + 1, sizeof *si), *ri = calloc(total + 1, sizeof *ri);
    float *sf = calloc(total + 1, sizeof *sf), *rf = calloc(total + 1, sizeof *rf);
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++) {
            si[(size_t)p * count + i] = a2a_value(world, p, i);
            sf[(size_t)p * count + i] = -(float)a2a_value(world, p, i) - 0.5f;
        }
    ig_err err = {0};
    for (int form = 0; form < 2; form++) { /* blocking, then non-blocking */
        memset(ri, 0xff, (total + 1) * sizeof *ri);
        memset(rf, 0, (total + 1) * sizeof *rf);
        ig_comm_req *q1 = NULL, *q2 = NULL;
        ig_status s1, s2;
        if (form == 0) {
            s1 = ig_comm_alltoall(c, si, ri, count, IG_COMM_I32, &err);
            s2 = s1 == IG_OK ? ig_comm_alltoall(c, sf, rf, count, IG_COMM_F32, &err) : s1;
        } else {
            s1 = ig_comm_ialltoall(c, si, ri, count, IG_COMM_I32, &q1, &err);
            s2 = s1 == IG_OK ? ig_comm_ialltoall(c, sf, rf, count, IG_COMM_F32, &q2, &err) : s1;
            if (s2 == IG_OK) s2 = ig_comm_wait(q2, &err);
            if (s1 == IG_OK) s1 = ig_comm_wait(q1, &err);
        }
        (*checks)++;
        if (s1 != IG_OK || s2 != IG_OK) {
            fprintf(stderr, "rank %d: FAIL all-to-all (form %d, %zu per peer): %s\n", rank, form,
                    count, err.msg);
            bad++;
            continue;
        }
        for (int q = 0; q < n; q++)
            for (size_t i = 0; i < count; i++) {
                size_t at = (size_t)q * count + i;
                int32_t want = a2a_value(members[q], me, i);
                if (ri[at] != want || rf[at] != -(float)want - 0.5f) {
                    fprintf(stderr,
                            "rank %d: FAIL all-to-all (form %d, group of %d): from rank %d, "
                            "element %zu: int32 %d, float %g; expected %d\n",
                            rank, form, n, q, i, ri[at], (double)rf[at], want);
                    bad++;
                    q = n;
                    break;
                }
            }
        (*checks)++;
        if (ri[total] != -1 || rf[total] != 0.0f) { /* nothing written past [size][count] */
            fprintf(stderr, "rank %d: FAIL all-to-all wrote past its receive buffer\n", rank);
            bad++;
        }
    }
    free(si);
    free(ri);
    free(sf);
    free(rf);
    return bad;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__);                    \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static int checks;
#define OK(call) CHECK(((void)checks++, (call) == IG_OK), "%s: %s", #call, err.msg)

int main(void) {
    ig_ctx *ctx;
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 1;
    if (ig_ctx_create(&ctx, &co, &err) != IG_OK) return 1;
    ig_comm *w = NULL;
    if (ig_comm_world(&w, ctx, "comm_ranks", &err) != IG_OK) {
        fprintf(stderr, "comm_ranks: %s\n", err.msg);
        return 1;
    }
    int rank = ig_comm_rank(w), size = ig_comm_size(w);

    /* all-reduce: sum, max, min, in place and not, int and float */
    double d[3] = {rank, -rank, 1.5 * rank}, r[3];
    OK(ig_comm_allreduce(w, d, r, 3, IG_COMM_F64, IG_COMM_SUM, &err));
    CHECK(r[0] == size * (size - 1) / 2.0 && r[1] == -r[0], "sum %g %g", r[0], r[1]);
    int64_t mx = rank;
    OK(ig_comm_allreduce(w, &mx, &mx, 1, IG_COMM_I64, IG_COMM_MAX, &err));
    CHECK(mx == size - 1, "max %lld", (long long)mx);
    float mn = 10.0f + (float)rank;
    OK(ig_comm_allreduce(w, &mn, &mn, 1, IG_COMM_F32, IG_COMM_MIN, &err));
    CHECK(mn == 10.0f, "min %g", mn);

    /* broadcast from the last rank */
    uint64_t b[4] = {0, 0, 0, 0};
    if (rank == size - 1) b[0] = 7, b[3] = 99;
    OK(ig_comm_bcast(w, b, 4, IG_COMM_U64, size - 1, &err));
    CHECK(b[0] == 7 && b[3] == 99, "bcast %llu %llu", (unsigned long long)b[0],
          (unsigned long long)b[3]);

    /* all-gather and reduce-scatter */
    int32_t mine[2] = {rank, 100 + rank}, *all = calloc((size_t)size * 2, sizeof *all);
    OK(ig_comm_allgather(w, mine, all, 2, IG_COMM_I32, &err));
    for (int q = 0; q < size; q++)
        CHECK(all[2 * q] == q && all[2 * q + 1] == 100 + q, "allgather[%d]", q);
    /* in place: each rank's part already in its own place of the result */
    memset(all, 0, (size_t)size * 2 * sizeof *all);
    all[2 * rank] = rank, all[2 * rank + 1] = 100 + rank;
    OK(ig_comm_allgather(w, all + 2 * rank, all, 2, IG_COMM_I32, &err));
    for (int q = 0; q < size; q++)
        CHECK(all[2 * q] == q && all[2 * q + 1] == 100 + q, "allgather in place[%d]", q);
    ig_comm_req *qa = NULL;
    memset(all, 0, (size_t)size * 2 * sizeof *all);
    all[2 * rank] = 7 * rank, all[2 * rank + 1] = -rank;
    OK(ig_comm_iallgather(w, all + 2 * rank, all, 2, IG_COMM_I32, &qa, &err));
    OK(ig_comm_wait(qa, &err));
    for (int q = 0; q < size; q++)
        CHECK(all[2 * q] == 7 * q && all[2 * q + 1] == -q, "iallgather in place[%d]", q);
    float *rs = calloc((size_t)size * 2, sizeof *rs), got[2];
    for (int i = 0; i < 2 * size; i++) rs[i] = (float)(i + rank);
    OK(ig_comm_reduce_scatter(w, rs, got, 2, IG_COMM_F32, IG_COMM_SUM, &err));
    for (int j = 0; j < 2; j++) {
        float want = 0;
        for (int q = 0; q < size; q++) want += (float)(2 * rank + j + q);
        CHECK(got[j] == want, "reduce-scatter[%d] %g != %g", j, got[j], want);
    }

    /* all-to-all: every element names its sender, its receiver and its index; int32 and float,
     * 1 and 3 elements per peer, nothing (0), blocking and not; overlapping buffers refused */
    int *everyone = calloc((size_t)size, sizeof *everyone);
    for (int q = 0; q < size; q++) everyone[q] = q;
    failures += check_alltoall(w, rank, everyone, 1, &checks);
    failures += check_alltoall(w, rank, everyone, 3, &checks);
    OK(ig_comm_alltoall(w, NULL, NULL, 0, IG_COMM_F32, &err));
    int32_t *ab = calloc((size_t)size * 4, sizeof *ab);
    checks++;
    CHECK(ig_comm_alltoall(w, ab, ab, 2, IG_COMM_I32, &err) == IG_ERR_INVALID_ARG &&
              strstr(err.msg, "overlap"),
          "an in-place all-to-all was accepted: %s", err.msg);
    checks++;
    CHECK(ig_comm_alltoall(w, ab, ab + 1, 2, IG_COMM_I32, &err) == IG_ERR_INVALID_ARG,
          "overlapping all-to-all buffers were accepted");
    OK(ig_comm_group_begin(w, &err));
    checks++;
    CHECK(ig_comm_alltoall(w, ab, ab + 2 * size, 1, IG_COMM_I32, &err) == IG_ERR_INVALID_ARG,
          "a blocking all-to-all inside a group");
    OK(ig_comm_group_end(w, &err));
    free(ab);

    /* point to point: a ring, blocking and not */
    if (size > 1) {
        int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        int32_t out[3] = {rank, rank * 2, rank * 3}, in[3] = {-1, -1, -1};
        ig_comm_req *rq = NULL, *sq = NULL;
        OK(ig_comm_irecv(w, in, 3, IG_COMM_I32, prev, 5, &rq, &err));
        OK(ig_comm_isend(w, out, 3, IG_COMM_I32, next, 5, &sq, &err));
        OK(ig_comm_wait(sq, &err));
        OK(ig_comm_wait(rq, &err));
        CHECK(in[0] == prev && in[2] == prev * 3, "ring got %d", in[0]);
        /* blocking, ordered to avoid a deadlock: even ranks send first */
        int32_t x = rank * 10, y = -1;
        if (rank % 2 == 0) {
            OK(ig_comm_send(w, &x, 1, IG_COMM_I32, next, 6, &err));
            OK(ig_comm_recv(w, &y, 1, IG_COMM_I32, prev, 6, &err));
        } else {
            OK(ig_comm_recv(w, &y, 1, IG_COMM_I32, prev, 6, &err));
            OK(ig_comm_send(w, &x, 1, IG_COMM_I32, next, 6, &err));
        }
        CHECK(y == prev * 10, "blocking ring got %d", y);
        /* a receive of the wrong size is an error, not a silent truncation */
        if (rank == 0) {
            int32_t two[2] = {1, 2};
            OK(ig_comm_send(w, two, 2, IG_COMM_I32, 1, 7, &err));
        } else if (rank == 1) {
            int32_t three[3];
            checks++;
            CHECK(ig_comm_recv(w, three, 3, IG_COMM_I32, 0, 7, &err) != IG_OK,
                  "a short message was accepted");
        }
    }

    /* non-blocking collectives */
    ig_comm_req *q1 = NULL, *q2 = NULL;
    double s1 = rank + 1, t1 = 0;
    int32_t g1 = rank, *ga = calloc((size_t)size, sizeof *ga);
    OK(ig_comm_iallreduce(w, &s1, &t1, 1, IG_COMM_F64, IG_COMM_SUM, &q1, &err));
    OK(ig_comm_iallgather(w, &g1, ga, 1, IG_COMM_I32, &q2, &err));
    int done = 0;
    OK(ig_comm_test(q1, &done, &err));
    OK(ig_comm_wait(q1, &err));
    OK(ig_comm_wait(q2, &err));
    CHECK(t1 == size * (size + 1) / 2.0, "iallreduce %g", t1);
    for (int q = 0; q < size; q++) CHECK(ga[q] == q, "iallgather[%d]", q);
    float *ir = calloc((size_t)size, sizeof *ir), ig1 = 0;
    for (int i = 0; i < size; i++) ir[i] = (float)(rank * size + i);
    OK(ig_comm_ireduce_scatter(w, ir, &ig1, 1, IG_COMM_F32, IG_COMM_SUM, &q1, &err));
    OK(ig_comm_wait(q1, &err));
    float want_rs = 0;
    for (int q = 0; q < size; q++) want_rs += (float)(q * size + rank);
    CHECK(ig1 == want_rs, "ireduce-scatter %g != %g", ig1, want_rs);

    /* groups: even and odd ranks, ordered by descending world rank */
    ig_comm *g = NULL;
    OK(ig_comm_split(w, rank % 2, -rank, &g, &err));
    if (g) {
        int gs = size / 2 + (rank % 2 == 0 ? size % 2 : 0);
        CHECK(ig_comm_size(g) == gs, "group size %d != %d", ig_comm_size(g), gs);
        int64_t v = rank, vs = 0;
        OK(ig_comm_allreduce(g, &v, &vs, 1, IG_COMM_I64, IG_COMM_SUM, &err));
        int64_t want = 0;
        for (int q = rank % 2; q < size; q += 2) want += q;
        CHECK(vs == want, "group sum %lld != %lld", (long long)vs, (long long)want);
        /* rank 0 of the group is its highest world rank (key -rank) */
        int64_t top = rank;
        OK(ig_comm_bcast(g, &top, 1, IG_COMM_I64, 0, &err));
        int hi = size - 1 - ((size - 1) % 2 != rank % 2);
        CHECK(top == hi, "group root %lld != %d", (long long)top, hi);
        /* all-to-all in the group: its rank q is world rank hi - 2q */
        int *members = calloc((size_t)gs, sizeof *members);
        for (int q = 0; q < gs; q++) members[q] = hi - 2 * q;
        failures += check_alltoall(g, rank, members, 2, &checks);
        free(members);
    }
    ig_comm_free(g);

    /* the node-local group: every process of this test runs on one machine */
    OK(ig_comm_split_local(w, &g, &err));
    CHECK(g && ig_comm_size(g) == size && ig_comm_rank(g) == rank, "local group");
    ig_comm_free(g);
    /* groups are no-ops here, but blocking calls inside one are refused */
    OK(ig_comm_group_begin(w, &err));
    CHECK(ig_comm_barrier(w, &err) == IG_ERR_INVALID_ARG, "a barrier inside a group");
    OK(ig_comm_group_end(w, &err));
    /* bf16 sums, each pair added in fp32 and rounded to nearest even: 1 + 2^-7 on rank 0 and 1 on
     * the others is exactly 1 + 2^-7 alone, and for 2 ranks 2 + 2^-7, half-way between 2 and its
     * next bf16: 2 (the even one); every larger sum rounds to the number of ranks as well */
    uint16_t h16[3] = {0x3f80, 0x4000, (uint16_t)(rank == 0 ? 0x3f81 : 0x3f80)}, r16[3];
    OK(ig_comm_allreduce(w, h16, r16, 3, IG_COMM_BF16, IG_COMM_SUM, &err));
    uint16_t n16 = ig_bf16_from_f32((float)size), n2 = ig_bf16_from_f32(2.0f * (float)size);
    CHECK(r16[0] == n16 && r16[1] == n2 && r16[2] == (size == 1 ? 0x3f81 : n16),
          "bf16 all-reduce: %04x %04x %04x", r16[0], r16[1], r16[2]);
    uint16_t rs16[2] = {0x3f80, 0x3f80}, *rsend = calloc(2 * (size_t)size, sizeof *rsend);
    for (int q = 0; q < 2 * size; q++) rsend[q] = 0x3f80; /* 1.0 everywhere */
    OK(ig_comm_reduce_scatter(w, rsend, rs16, 2, IG_COMM_BF16, IG_COMM_SUM, &err));
    CHECK(rs16[0] == n16 && rs16[1] == n16, "bf16 reduce-scatter: %04x %04x", rs16[0], rs16[1]);
    free(rsend);
    CHECK(ig_comm_allreduce(w, h16, r16, 1, IG_COMM_BF16, IG_COMM_MAX, &err) ==
              (size == 1 ? IG_OK : IG_ERR_UNSUPPORTED),
          "bf16 max");
    uint16_t *all16 = calloc(2 * (size_t)size, sizeof *all16);
    OK(ig_comm_allgather(w, h16, all16, 2, IG_COMM_BF16, &err));
    CHECK(all16[2 * (size - 1) + 1] == 0x4000, "bf16 all-gather");
    free(all16);

    /* gather of bytes of different lengths, and agreement */
    char msg[32];
    int len = snprintf(msg, sizeof msg, "r%d:", rank);
    void *gathered = NULL;
    size_t glen = 0, *lens = calloc((size_t)size, sizeof *lens);
    OK(ig_comm_gather_bytes(w, msg, (size_t)len, 0, &gathered, &glen, lens, &err));
    if (rank == 0) {
        char want[4096] = "";
        for (int q = 0; q < size; q++) snprintf(want + strlen(want), 64, "r%d:", q);
        CHECK(glen == strlen(want) && memcmp(gathered, want, glen) == 0, "gather");
    } else {
        CHECK(gathered == NULL, "gather on a non-root");
    }
    ig_free(ctx, gathered);
    int all_ok = -1;
    OK(ig_comm_all_ok(w, rank != size - 1, &all_ok, &err));
    CHECK(all_ok == 0, "all_ok with one rank saying no");
    OK(ig_comm_all_ok(w, 1, &all_ok, &err));
    CHECK(all_ok == 1, "all_ok");

    /* argument checks: a bad root or peer is an error, not a crash */
    checks++;
    CHECK(ig_comm_bcast(w, b, 1, IG_COMM_U64, size, &err) == IG_ERR_INVALID_ARG, "bad root");
    checks++;
    CHECK(ig_comm_send(w, b, 1, IG_COMM_U64, rank, 0, &err) == IG_ERR_INVALID_ARG, "self send");

    int fails = failures, total = 0;
    ig_comm_allreduce(w, &fails, &total, 1, IG_COMM_I32, IG_COMM_SUM, NULL);
    if (rank == 0) printf("comm_ranks: %d ranks, %d checks each, %d failed\n", size, checks, total);
    free(all);
    free(rs);
    free(ga);
    free(ir);
    free(lens);
    free(everyone);
    ig_comm_free(w);
    ig_ctx_free(ctx);
    return total ? 1 : 0;
}
