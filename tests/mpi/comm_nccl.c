/* comm_nccl.c - the NCCL communicator under mpirun (run by tests/mpi/nccl.sh): device buffers
 * from a CUDA backend, and every operation checked against what each rank can compute alone:
 * all-reduce (fp32, bf16), all-gather, reduce-scatter, all-to-all (int32 blocking, fp32
 * non-blocking inside a group), a ring of sends and receives in a group,
 * a non-blocking all-reduce, a barrier and a split. Prints "comm_nccl: N checks passed" on rank 0;
 * exits 1 on a failure, 77 (skipped, with the reason) without NCCL or a GPU per rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/backend.h"

static int failures, checks, rank;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__);                    \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)
#define OK(call) CHECK((call) == IG_OK, "%s: %s", #call, err.msg)

static void *dev(ig_backend *be, size_t bytes) {
    void *p = NULL;
    ig_err err = {0};
    if (ig_backend_alloc(be, bytes, &p, &err) != IG_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        exit(1);
    }
    return p;
}

int main(void) {
    ig_ctx *ctx;
    ig_err err = {0};
    ig_ctx_opts co = ig_ctx_opts_default();
    co.threads = 1;
    if (ig_ctx_create(&ctx, &co, &err) != IG_OK) return 1;
    ig_comm *world = NULL, *nc = NULL;
    if (ig_comm_world(&world, ctx, "comm_nccl", &err) != IG_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    rank = ig_comm_rank(world);
    int P = ig_comm_size(world);
    ig_cuda_info ci;
    ig_cuda_query(&ci);
    if (!ig_comm_nccl_available() || ci.devices == 0) {
        if (rank == 0)
            printf("skipped: %s\n",
                   !ig_comm_nccl_available() ? "no NCCL in this build" : "no CUDA device");
        ig_comm_free(world);
        ig_ctx_free(ctx);
        return 77;
    }
    if (ig_comm_nccl_create(&nc, world, &err) != IG_OK) {
        if (rank == 0) printf("skipped: %s\n", err.msg);
        ig_comm_free(world);
        ig_ctx_free(ctx);
        return err.status == IG_ERR_UNSUPPORTED ? 77 : 1;
    }
    CHECK(strcmp(ig_comm_backend(nc), "nccl") == 0, "backend %s", ig_comm_backend(nc));
    CHECK(ig_comm_rank(nc) == rank && ig_comm_size(nc) == P, "rank/size");
    ig_backend_opts bo = ig_backend_opts_default();
    bo.kind = IG_BACKEND_CUDA;
    bo.act_type = IG_ACT_BF16;
    bo.device = ig_comm_nccl_device(nc);
    ig_backend *be = NULL;
    if (ig_backend_create(&be, ctx, &bo, &err) != IG_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
        return 1;
    }
    enum { N = 1000 };
    float h[N], g[N];
    /* all-reduce, fp32 */
    float *x = dev(be, N * 4);
    for (int i = 0; i < N; i++) h[i] = (float)rank + 0.5f * (float)i;
    OK(ig_backend_upload(be, x, h, sizeof h, &err));
    OK(ig_comm_allreduce(nc, x, x, N, IG_COMM_F32, IG_COMM_SUM, &err));
    OK(ig_backend_download(be, g, x, sizeof g, &err));
    for (int i = 0; i < N; i++)
        if (g[i] != (float)(P * (P - 1) / 2) + (float)P * 0.5f * (float)i) {
            CHECK(0, "fp32 all-reduce [%d] = %g", i, g[i]);
            break;
        }
    /* all-reduce, bf16 (act tensors of the backend) */
    void *y = dev(be, N * 2);
    for (int i = 0; i < N; i++) h[i] = (float)(rank + 1);
    OK(ig_backend_upload_f32(be, y, h, N, &err));
    OK(ig_comm_allreduce(nc, y, y, N, IG_COMM_BF16, IG_COMM_SUM, &err));
    OK(ig_backend_download_f32(be, g, y, N, &err));
    CHECK(g[0] == (float)(P * (P + 1) / 2) && g[N - 1] == g[0], "bf16 all-reduce %g", g[0]);
    /* the trainer's order: a kernel still queued on the backend writes the buffer, NCCL's stream
     * waits for it on the device (ig_backend_fence), and the all-reduce sums what it wrote */
    CHECK(ig_comm_nccl_stream(nc) != NULL, "the NCCL communicator's stream");
    OK(ig_backend_upload_f32(be, y, h, N, &err));
    ig_kernel_add(be, y, y, y, N); /* 2 (rank + 1), queued */
    OK(ig_backend_fence(be, ig_comm_nccl_stream(nc), &err));
    OK(ig_comm_allreduce(nc, y, y, N, IG_COMM_BF16, IG_COMM_SUM, &err));
    OK(ig_backend_download_f32(be, g, y, N, &err));
    CHECK(g[0] == (float)(P * (P + 1)) && g[N - 1] == g[0], "fenced all-reduce %g", g[0]);
    /* all-gather, int32 */
    int32_t mine[4], all[4 * 64];
    int32_t *a = dev(be, 4 * 4), *b = dev(be, (size_t)4 * 4 * P);
    for (int i = 0; i < 4; i++) mine[i] = rank * 10 + i;
    OK(ig_backend_upload(be, a, mine, sizeof mine, &err));
    OK(ig_comm_allgather(nc, a, b, 4, IG_COMM_I32, &err));
    OK(ig_backend_download(be, all, b, (size_t)4 * 4 * P, &err));
    for (int r = 0; r < P && r < 64; r++)
        CHECK(all[4 * r + 3] == r * 10 + 3, "all-gather from rank %d: %d", r, all[4 * r + 3]);
    /* reduce-scatter, fp32: element j of every rank is j + rank */
    float *s = dev(be, (size_t)3 * P * 4), *t = dev(be, 3 * 4);
    for (int j = 0; j < 3 * P; j++) h[j] = (float)(j + rank);
    OK(ig_backend_upload(be, s, h, (size_t)3 * P * 4, &err));
    OK(ig_comm_reduce_scatter(nc, s, t, 3, IG_COMM_F32, IG_COMM_SUM, &err));
    OK(ig_backend_download(be, g, t, 3 * 4, &err));
    for (int k = 0; k < 3; k++) {
        int j = rank * 3 + k;
        CHECK(g[k] == (float)(P * j + P * (P - 1) / 2), "reduce-scatter [%d] = %g", k, g[k]);
    }
    /* all-to-all: element i of the part rank r sends to rank p is 10000 r + 100 p + i, int32
     * blocking, then fp32 (negated) non-blocking inside a group (a group nested in NCCL's own) */
    {
        enum { C = 3 };
        size_t n = (size_t)C * P;
        int32_t *hs = calloc(n, sizeof *hs), *hr = calloc(n, sizeof *hr);
        float *fs = calloc(n, sizeof *fs), *fr = calloc(n, sizeof *fr);
        for (int p = 0; p < P; p++)
            for (int i = 0; i < C; i++) {
                hs[p * C + i] = 10000 * rank + 100 * p + i;
                fs[p * C + i] = -(float)hs[p * C + i];
            }
        int32_t *sa = dev(be, n * 4), *ra = dev(be, n * 4);
        float *sf = dev(be, n * 4), *rf = dev(be, n * 4);
        OK(ig_backend_upload(be, sa, hs, n * 4, &err));
        OK(ig_backend_upload(be, sf, fs, n * 4, &err));
        OK(ig_comm_alltoall(nc, sa, ra, C, IG_COMM_I32, &err));
        OK(ig_backend_download(be, hr, ra, n * 4, &err));
        ig_comm_req *q = NULL;
        OK(ig_comm_group_begin(nc, &err));
        OK(ig_comm_ialltoall(nc, sf, rf, C, IG_COMM_F32, &q, &err));
        OK(ig_comm_group_end(nc, &err));
        OK(ig_comm_wait(q, &err));
        OK(ig_backend_download(be, fr, rf, n * 4, &err));
        int wrong = 0;
        for (int p = 0; p < P && !wrong; p++)
            for (int i = 0; i < C && !wrong; i++) {
                int32_t want = 10000 * p + 100 * rank + i;
                if (hr[p * C + i] != want || fr[p * C + i] != -(float)want) {
                    CHECK(0, "all-to-all from rank %d [%d]: %d, %g; expected %d", p, i,
                          hr[p * C + i], (double)fr[p * C + i], want);
                    wrong = 1;
                }
            }
        CHECK(ig_comm_alltoall(nc, sa, sa, C, IG_COMM_I32, &err) == IG_ERR_INVALID_ARG,
              "an in-place all-to-all was accepted");
        ig_backend_release(be, sa), ig_backend_release(be, ra);
        ig_backend_release(be, sf), ig_backend_release(be, rf);
        free(hs), free(hr), free(fs), free(fr);
    }
    /* a ring in a group: send to the right, receive from the left */
    if (P > 1) {
        float *out = dev(be, 4 * 4), *in = dev(be, 4 * 4);
        for (int i = 0; i < 4; i++) h[i] = (float)(100 * rank + i);
        OK(ig_backend_upload(be, out, h, 4 * 4, &err));
        ig_comm_req *rs = NULL, *rr = NULL;
        OK(ig_comm_group_begin(nc, &err));
        CHECK(ig_comm_barrier(nc, &err) == IG_ERR_INVALID_ARG, "a blocking call in a group");
        OK(ig_comm_isend(nc, out, 4, IG_COMM_F32, (rank + 1) % P, 0, &rs, &err));
        OK(ig_comm_irecv(nc, in, 4, IG_COMM_F32, (rank + P - 1) % P, 0, &rr, &err));
        OK(ig_comm_group_end(nc, &err));
        OK(ig_comm_wait(rs, &err));
        OK(ig_comm_wait(rr, &err));
        OK(ig_backend_download(be, g, in, 4 * 4, &err));
        CHECK(g[2] == (float)(100 * ((rank + P - 1) % P) + 2), "ring: got %g", g[2]);
        ig_backend_release(be, out), ig_backend_release(be, in);
    }
    /* non-blocking all-reduce */
    ig_comm_req *req = NULL;
    for (int i = 0; i < N; i++) h[i] = 1.0f;
    OK(ig_backend_upload(be, x, h, sizeof h, &err));
    OK(ig_comm_iallreduce(nc, x, x, N, IG_COMM_F32, IG_COMM_SUM, &req, &err));
    int done = 0;
    OK(ig_comm_test(req, &done, &err));
    OK(ig_comm_wait(req, &err));
    OK(ig_backend_download(be, g, x, sizeof g, &err));
    CHECK(g[N - 1] == (float)P, "non-blocking all-reduce %g", g[N - 1]);
    OK(ig_comm_barrier(nc, &err));
    /* a split: even and odd ranks */
    ig_comm *half = NULL;
    OK(ig_comm_split(nc, rank % 2, rank, &half, &err));
    if (half) {
        CHECK(ig_comm_size(half) == (P + 1 - rank % 2) / 2, "split size %d", ig_comm_size(half));
        OK(ig_comm_allreduce(half, x, x, 1, IG_COMM_F32, IG_COMM_SUM, &err));
        ig_comm_free(half);
    }
    void *bufs[] = {x, y, a, b, s, t};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ig_backend_release(be, bufs[i]);
    ig_backend_free(be);
    ig_comm_free(nc);
    int all_ok = 0;
    ig_comm_all_ok(world, failures == 0, &all_ok, &err);
    if (rank == 0 && all_ok) printf("comm_nccl: %d ranks, %d checks passed\n", P, checks);
    ig_comm_free(world);
    ig_ctx_free(ctx);
    return all_ok ? 0 : 1;
}
