/* test_kernels.c - unit tests of the compute backends (kernels/): the backend's memory and its
 * refusals, the ops table (names, absent operations, the per-kernel trace), every fast CPU kernel
 * against its reference on random inputs at odd shapes (several chunks, ragged edges), every
 * backward against central finite differences of its forward, attention's head layouts
 * (multi-head, grouped-query, multi-query; causal or not) and document masking, the KV-cache
 * attention against the training attention, RoPE against a direct formula, cross-entropy's padded
 * columns, AdamW against torch.optim.AdamW (tests/data/golden/kernels/), and the same bits for 1,
 * 2, 3 and 8 pool threads.
 *
 * Tolerances (max |fast - ref| over max |ref| of the tensor, "relative to the tensor's scale"):
 *   bit-identical: encoder forward and backward, bias gradients, scale, the fused residual adds,
 *   grouped-query attention's forward against multi-head attention with repeated key/value heads
 *   1e-6: RoPE, SwiGLU (elementwise fp32 against double)
 *   1e-5: fp32 elementwise and row kernels (LayerNorm, RMSNorm, GeLU, cross-entropy), AdamW fast
 *         vs ref
 *   1e-5: GEMMs (fp32 sums of <= 300 terms against double) and attention (fp32 online softmax
 *         against a double three-pass softmax)
 *   1e-12 (relative): sum of squares (double sums in other orders)
 *   finite differences (central, h = 1e-2 on fp32 forwards, loss summed in double): 2e-3 of the
 *   gradient's scale, plus 2e-3 absolute; in double (h = 1e-6 on a double forward written here:
 *   RMSNorm, SwiGLU): 1e-5
 *   AdamW against torch: 2e-6 relative per element (torch fuses some multiply-adds)
 *
 * The backend's memory accounting: buffers and the kernels' scratch (workspace) counted exactly,
 * peaks and their reset, a table of a thousand blocks released in any order.
 *
 * The CPU backend's memory is host memory: the tests allocate through the backend and then read
 * and write the buffers directly.
 */
#include "testutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "kernels/backend.h"
#include "kernels/backend_internal.h"
#include "kernels/cpu/cpu_internal.h" /* ig_cpu_eps */
#include "tests/kernels_fixture.h"

/* ---- backend and memory ---------------------------------------------------------------------- */

static void test_backend_basics(void **state) {
    fixture *f = *state;
    assert_string_equal(ig_backend_name(FAST(f)), "cpu");
    assert_string_equal(ig_backend_name(f->ref), "cpu-reference");
    assert_int_equal(ig_backend_kind_of(FAST(f)), IG_BACKEND_CPU);
    assert_int_equal(ig_backend_act_type(FAST(f)), IG_ACT_F32);
    assert_int_equal(ig_backend_act_size(FAST(f)), 4);

    ig_err err = {0};
    void *p = NULL;
    assert_int_equal(ig_backend_alloc(FAST(f), 1000, &p, &err), IG_OK);
    assert_true(((uintptr_t)p & 255) == 0);
    for (int i = 0; i < 1000; i++) assert_int_equal(((unsigned char *)p)[i], 0);
    float src[5] = {1, 2, 3, 4, 5}, dst[5] = {0};
    assert_int_equal(ig_backend_upload_f32(FAST(f), p, src, 5, &err), IG_OK);
    assert_int_equal(ig_backend_download(FAST(f), dst, p, sizeof dst, &err), IG_OK);
    assert_memory_equal(src, dst, sizeof src);
    assert_int_equal(ig_backend_zero(FAST(f), p, 2 * sizeof(float), &err), IG_OK);
    assert_int_equal(ig_backend_download_f32(FAST(f), dst, p, 5, &err), IG_OK);
    assert_true(dst[0] == 0 && dst[1] == 0 && dst[2] == 3);
    /* backend memory to backend memory (a group of one rank's collectives) */
    assert_int_equal(
        ig_backend_copy(FAST(f), p, (char *)p + 2 * sizeof(float), 2 * sizeof(float), &err), IG_OK);
    assert_int_equal(ig_backend_copy(FAST(f), p, p, 5 * sizeof(float), &err), IG_OK);
    assert_int_equal(ig_backend_download_f32(FAST(f), dst, p, 5, &err), IG_OK);
    assert_true(dst[0] == 3 && dst[1] == 4 && dst[2] == 3 && dst[4] == 5);
    assert_int_equal(ig_backend_copy(FAST(f), NULL, p, 4, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_backend_upload(FAST(f), p, NULL, 4, &err), IG_ERR_INVALID_ARG);
    assert_int_equal(ig_backend_sync(FAST(f), &err), IG_OK);
    int queue = 0; /* another queue: nothing to order on the CPU, but a NULL one is a mistake */
    assert_int_equal(ig_backend_fence(FAST(f), &queue, &err), IG_OK);
    assert_int_equal(ig_backend_fence(FAST(f), NULL, &err), IG_ERR_INVALID_ARG);
    ig_backend_release(FAST(f), p);
    ig_backend_release(FAST(f), NULL);
    ig_backend_free(NULL);

    /* what this build cannot run is refused with a reason */
    ig_backend *be = NULL;
    ig_backend_opts o = ig_backend_opts_default();
    o.kind = IG_BACKEND_CUDA;
    assert_int_equal(ig_backend_create(&be, f->ctx[0], &o, &err), IG_ERR_UNSUPPORTED);
    assert_null(be);
    assert_non_null(strstr(err.msg, "CUDA"));
    /* bf16 act tensors on the CPU: 2 bytes each, host fp32 rounded to nearest even on the way in
     * (1 + 2^-8 is half-way: to 1; 1 + 3 2^-8 to 1 + 2^-6, the even one) and widened exactly out */
    o = ig_backend_opts_default();
    o.act_type = IG_ACT_BF16;
    assert_int_equal(ig_backend_create(&be, f->ctx[0], &o, &err), IG_OK);
    assert_int_equal(ig_backend_act_type(be), IG_ACT_BF16);
    assert_int_equal(ig_backend_act_size(be), 2);
    float in[3] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f}, back[3];
    uint16_t raw[3];
    void *d = NULL;
    assert_int_equal(ig_backend_alloc(be, sizeof raw, &d, &err), IG_OK);
    assert_int_equal(ig_backend_upload_f32(be, d, in, 3, &err), IG_OK);
    assert_int_equal(ig_backend_download(be, raw, d, sizeof raw, &err), IG_OK);
    assert_int_equal(raw[0], 0x3f80);
    assert_int_equal(raw[1], 0x3f82);
    assert_int_equal(raw[2], 0xc020);
    assert_int_equal(ig_backend_download_f32(be, back, d, 3, &err), IG_OK);
    assert_true(back[0] == 1.0f && back[1] == 1.0f + 0x1p-6f && back[2] == -2.5f);
    ig_backend_release(be, d);
    ig_backend_free(be);
    be = NULL;
    char buf[256];
    assert_non_null(strstr(ig_cuda_describe(buf, sizeof buf), "CUDA"));
}

/* the table seam: every operation named and present on the CPU; an entry left NULL is absent */
typedef struct trace_log {
    int calls;
    ig_op ops[8];
    double seconds;
} trace_log;

static void trace_hook(void *user, ig_op op, double seconds) {
    trace_log *t = user;
    if (t->calls < 8) t->ops[t->calls] = op;
    t->calls++;
    t->seconds += seconds;
    assert_true(seconds >= 0);
}

static void test_backend_table(void **state) {
    fixture *f = *state;
    for (int op = 0; op < IG_OP_COUNT; op++) {
        const char *name = ig_op_name((ig_op)op);
        assert_non_null(name);
        for (int o2 = 0; o2 < op; o2++) assert_string_not_equal(name, ig_op_name((ig_op)o2));
        assert_true(ig_backend_supports(FAST(f), (ig_op)op));
        assert_true(ig_backend_supports(f->ref, (ig_op)op));
    }
    assert_string_equal(ig_op_name(IG_OP_ATTENTION_FORWARD), "attention_forward");
    assert_null(ig_op_name(IG_OP_COUNT));
    assert_false(ig_backend_supports(FAST(f), IG_OP_COUNT));

    /* a backend whose table lacks an operation says so */
    ig_backend *be = NULL;
    ig_err err = {0};
    assert_int_equal(ig_backend_create(&be, f->ctx[0], NULL, &err), IG_OK);
    const ig_backend_ops *keep = be->ops;
    ig_backend_ops partial = *keep;
    partial.scale = NULL;
    be->ops = &partial;
    assert_false(ig_backend_supports(be, IG_OP_SCALE));
    assert_true(ig_backend_supports(be, IG_OP_ADD));
#ifdef NDEBUG /* a release build refuses the call at the next sync (a debug build asserts) */
    float one = 1;
    ig_kernel_scale(be, &one, 1, 2.0f);
    assert_true(one == 1);
    assert_int_equal(ig_backend_sync(be, &err), IG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "scale"));
#endif
    be->ops = keep;

    /* the trace: one report per call, in call order, then silence once it is off */
    trace_log log = {0};
    ig_backend_set_trace(be, trace_hook, &log);
    size_t n = 1000;
    float *x = talloc(f, n), *y = talloc(f, n);
    fill(x, n, 1, -1, 1);
    ig_kernel_add(be, y, x, x, n);
    ig_kernel_scale(be, y, n, 0.5f);
    ig_kernel_scale(be, y, 0, 0.5f); /* nothing to do is still a call */
    double ss = ig_kernel_sum_squares(be, y, n);
    assert_true(ss == ig_kernel_sum_squares(FAST(f), x, n)); /* y = x, traced or not */
    assert_int_equal(log.calls, 4);
    assert_int_equal(log.ops[0], IG_OP_ADD);
    assert_int_equal(log.ops[1], IG_OP_SCALE);
    assert_int_equal(log.ops[2], IG_OP_SCALE);
    assert_int_equal(log.ops[3], IG_OP_SUM_SQUARES);
    ig_backend_set_trace(be, NULL, NULL);
    ig_kernel_add(be, y, x, x, n);
    assert_int_equal(log.calls, 4);
    tfree(f, x), tfree(f, y);
    ig_backend_free(be);
}

/* an allocator that fails on demand */
typedef struct flaky {
    int fail;
} flaky;

static void *flaky_alloc(void *user, size_t size, size_t align) {
    void *p = NULL;
    if (((flaky *)user)->fail) return NULL;
    return posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size) ? NULL : p;
}

static void *flaky_realloc(void *user, void *ptr, size_t size) {
    return ((flaky *)user)->fail ? NULL : realloc(ptr, size);
}

static void flaky_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

/* a kernel that cannot get scratch memory writes nothing and says so at the next sync */
static void test_backend_nomem(void **state) {
    (void)state;
    flaky fl = {0};
    ig_allocator a = {flaky_alloc, flaky_realloc, flaky_free, &fl};
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 2;
    o.allocator = &a;
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_err err = {0};
    assert_int_equal(ig_ctx_create(&ctx, &o, &err), IG_OK);
    assert_int_equal(ig_backend_create(&be, ctx, NULL, &err), IG_OK);
    int B = 1, T = 5, C = 8, NH = 2;
    ig_attention_shape sh = {
        .B = B, .T = T, .n_head = NH, .n_kv_head = NH, .head_size = C / NH, .causal = 1};
    void *qkv = NULL, *out = NULL, *lse = NULL, *big = NULL;
    assert_int_equal(ig_backend_alloc(be, (size_t)T * 3 * C * 4, &qkv, &err), IG_OK);
    assert_int_equal(ig_backend_alloc(be, (size_t)T * C * 4, &out, &err), IG_OK);
    assert_int_equal(ig_backend_alloc(be, (size_t)NH * T * 4, &lse, &err), IG_OK);
    fl.fail = 1;
    assert_int_equal(ig_backend_alloc(be, 1 << 20, &big, &err), IG_ERR_NOMEM);
    assert_null(big);
    ig_kernel_attention_forward(be, out, lse, qkv, NULL, &sh);
    fl.fail = 0;
    assert_int_equal(ig_backend_sync(be, &err), IG_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "attention_forward"));
    assert_int_equal(ig_backend_sync(be, &err), IG_OK); /* reported once */
    ig_kernel_attention_forward(be, out, lse, qkv, NULL, &sh);
    assert_int_equal(ig_backend_sync(be, &err), IG_OK);
    ig_backend_release(be, qkv), ig_backend_release(be, out), ig_backend_release(be, lse);
    ig_backend_free(be);
    ig_ctx_free(ctx);
}

/* the accounting: every buffer counted at its size until released, the kernels' scratch as
 * workspace, the peaks and their reset, a table that grows and shrinks in any order, a failed
 * allocation not counted, and the CPU's memory as the process may take it */
static void test_backend_memory(void **state) {
    (void)state;
    flaky fl = {0};
    ig_allocator a = {flaky_alloc, flaky_realloc, flaky_free, &fl};
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = 2;
    o.allocator = &a;
    ig_ctx *ctx = NULL;
    ig_backend *be = NULL;
    ig_err err = {0};
    assert_int_equal(ig_ctx_create(&ctx, &o, &err), IG_OK);
    assert_int_equal(ig_backend_create(&be, ctx, NULL, &err), IG_OK);
    ig_backend_memory m;
    ig_backend_memory_info(be, &m);
    assert_true(m.buffers == 0 && m.workspace == 0 && m.peak == 0 && m.blocks == 0);
    assert_true(m.device_limit > 0 && m.device_free > 0 && m.device_free <= m.device_limit);
    assert_true(*m.device_what);

    enum { N = 1000 };
    void **p = calloc(N, sizeof *p);
    assert_non_null(p);
    uint64_t want = 0;
    for (int i = 0; i < N; i++) {
        size_t bytes = 1 + (size_t)(i * 37 % 4096);
        assert_int_equal(ig_backend_alloc(be, bytes, &p[i], &err), IG_OK);
        want += bytes;
    }
    ig_backend_memory_info(be, &m);
    assert_true(m.buffers == want && m.buffers_peak == want && m.peak == want && m.blocks == N);
    /* release every third in a scattered order: the table forgets exactly those */
    uint64_t freed = 0;
    for (int k = 0; k < N; k++) {
        int i = (k * 617) % N;
        if (i % 3) continue;
        freed += 1 + (size_t)(i * 37 % 4096);
        ig_backend_release(be, p[i]);
        p[i] = NULL;
    }
    ig_backend_release(be, NULL);
    ig_backend_memory_info(be, &m);
    assert_true(m.buffers == want - freed && m.peak == want && m.buffers_peak == want);
    ig_backend_memory_reset_peak(be);
    ig_backend_memory_info(be, &m);
    assert_true(m.peak == want - freed && m.buffers_peak == want - freed);

    /* a failed allocation counts nothing */
    void *big = NULL;
    fl.fail = 1;
    assert_int_equal(ig_backend_alloc(be, 1 << 20, &big, &err), IG_ERR_NOMEM);
    fl.fail = 0;
    ig_backend_memory_info(be, &m);
    assert_true(m.buffers == want - freed && m.peak == want - freed);

    /* attention's scratch is workspace, held during the call only */
    int B = 2, T = 33, C = 16, NH = 2;
    ig_attention_shape sh = {
        .B = B, .T = T, .n_head = NH, .n_kv_head = NH, .head_size = C / NH, .causal = 1};
    void *qkv = NULL, *out = NULL, *lse = NULL;
    assert_int_equal(ig_backend_alloc(be, (size_t)B * T * 3 * C * 4, &qkv, &err), IG_OK);
    assert_int_equal(ig_backend_alloc(be, (size_t)B * T * C * 4, &out, &err), IG_OK);
    assert_int_equal(ig_backend_alloc(be, (size_t)B * NH * T * 4, &lse, &err), IG_OK);
    uint64_t held = want - freed + (uint64_t)B * T * (3 * C + C + NH) * 4;
    ig_backend_memory_reset_peak(be);
    ig_kernel_attention_forward(be, out, lse, qkv, NULL, &sh);
    assert_int_equal(ig_backend_sync(be, &err), IG_OK);
    ig_backend_memory_info(be, &m);
    assert_true(m.buffers == held && m.workspace == 0 && m.workspace_peak > 0);
    assert_true(m.peak == held + m.workspace_peak);

    for (int i = 0; i < N; i++) ig_backend_release(be, p[i]);
    ig_backend_release(be, qkv), ig_backend_release(be, out), ig_backend_release(be, lse);
    ig_backend_memory_info(be, &m);
    assert_true(m.buffers == 0 && m.workspace == 0 && m.blocks == 0);
    free(p);
    ig_backend_free(be);
    ig_ctx_free(ctx);
}

/* ---- encoder --------------------------------------------------------------------------------- */

static void test_encoder(void **state) {
    fixture *f = *state;
    int B = 3, T = 37, C = 35, V = 11; /* few tokens: many repeated rows in dwte */
    size_t N = (size_t)B * T;
    int32_t *tok = ialloc(f, N);
    for (size_t i = 0; i < N; i++) tok[i] = (int32_t)((i * 7 + i / 5) % V);
    float *wte = talloc(f, (size_t)V * C), *wpe = talloc(f, (size_t)T * C);
    fill(wte, (size_t)V * C, 1, -1, 1);
    fill(wpe, (size_t)T * C, 2, -1, 1);
    float *o1 = talloc(f, N * C), *o2 = talloc(f, N * C);
    ig_kernel_encoder_forward(f->ref, o1, tok, wte, wpe, B, T, C);
    ig_kernel_encoder_forward(FAST(f), o2, tok, wte, wpe, B, T, C);
    check_same(o1, o2, N * C * 4, "encoder_forward");
    assert_true(o1[(size_t)(1 * T + 3) * C + 4] ==
                wte[(size_t)tok[T + 3] * C + 4] + wpe[(size_t)3 * C + 4]);

    float *dout = talloc(f, N * C);
    fill(dout, N * C, 3, -1, 1);
    float *dte1 = talloc(f, (size_t)V * C), *dpe1 = talloc(f, (size_t)T * C);
    fill(dte1, (size_t)V * C, 4, -1, 1); /* gradients accumulate: start from something */
    fill(dpe1, (size_t)T * C, 5, -1, 1);
    float *dte2 = tdup(f, dte1, (size_t)V * C), *dpe2 = tdup(f, dpe1, (size_t)T * C);
    ig_kernel_encoder_backward(f->ref, dte1, dpe1, dout, tok, B, T, C);
    ig_kernel_encoder_backward(FAST(f), dte2, dpe2, dout, tok, B, T, C);
    check_same(dte1, dte2, (size_t)V * C * 4, "encoder_backward dwte");
    check_same(dpe1, dpe2, (size_t)T * C * 4, "encoder_backward dwpe");
    for (int i = 0; i < NTHREADS; i++) {
        float *d3 = tdup(f, dte1, (size_t)V * C), *d4 = tdup(f, dpe1, (size_t)T * C);
        float *d5 = tdup(f, dte1, (size_t)V * C), *d6 = tdup(f, dpe1, (size_t)T * C);
        ig_kernel_encoder_backward(f->ref, d3, d4, dout, tok, B, T, C);
        ig_kernel_encoder_backward(f->fast[i], d5, d6, dout, tok, B, T, C);
        check_same(d3, d5, (size_t)V * C * 4, "encoder_backward dwte, threads");
        check_same(d4, d6, (size_t)T * C * 4, "encoder_backward dwpe, threads");
        tfree(f, d3), tfree(f, d4), tfree(f, d5), tfree(f, d6);
    }
    /* finite differences: L = sum(out * dout) is linear, so dL/dwte[v, c] = sum over tokens v */
    double g = 0;
    for (size_t i = 0; i < N; i++)
        if (tok[i] == 2) g += dout[i * C + 5];
    float *z1 = talloc(f, (size_t)V * C), *z2 = talloc(f, (size_t)T * C);
    ig_kernel_encoder_backward(f->ref, z1, z2, dout, tok, B, T, C);
    assert_true(fabs(z1[2 * C + 5] - g) < 1e-5);
    /* without learned positions (dwpe NULL, Llama's): the same dwte, nothing else written */
    float *z3 = talloc(f, (size_t)V * C), *z4 = talloc(f, (size_t)V * C);
    ig_kernel_encoder_backward(f->ref, z3, NULL, dout, tok, B, T, C);
    ig_kernel_encoder_backward(FAST(f), z4, NULL, dout, tok, B, T, C);
    check_same(z1, z3, (size_t)V * C * 4, "encoder_backward without dwpe (reference)");
    check_same(z1, z4, (size_t)V * C * 4, "encoder_backward without dwpe (fast)");
    tfree(f, z1), tfree(f, z2), tfree(f, z3), tfree(f, z4);
    tfree(f, tok), tfree(f, wte), tfree(f, wpe), tfree(f, o1), tfree(f, o2), tfree(f, dout);
    tfree(f, dte1), tfree(f, dpe1), tfree(f, dte2), tfree(f, dpe2);
}

/* ---- LayerNorm ------------------------------------------------------------------------------- */

static void test_layernorm(void **state) {
    fixture *f = *state;
    int N = 37, C = 101;
    size_t n = (size_t)N * C;
    float *x = talloc(f, n), *w = talloc(f, C), *b = talloc(f, C), *a2 = talloc(f, n);
    fill(x, n, 10, -2, 3);
    fill(a2, n, 11, -1, 1);
    fill(w, C, 12, 0.5f, 1.5f);
    fill(b, C, 13, -0.5f, 0.5f);
    float *o1 = talloc(f, n), *o2 = talloc(f, n), *m1 = talloc(f, N), *m2 = talloc(f, N);
    float *r1 = talloc(f, N), *r2 = talloc(f, N);
    ig_kernel_layernorm_forward(f->ref, o1, m1, r1, x, w, b, N, C, 1e-5f);
    ig_kernel_layernorm_forward(FAST(f), o2, m2, r2, x, w, b, N, C, 1e-5f);
    check_close(o2, o1, n, 1e-5, "layernorm_forward out");
    check_close(m2, m1, N, 1e-5, "layernorm_forward mean");
    check_close(r2, r1, N, 1e-5, "layernorm_forward rstd");
    /* what torch.nn.LayerNorm gives for a row [1, 2, 3, 4], w = 1, b = 0 (biased variance) */
    {
        float row[4] = {1, 2, 3, 4}, one[4] = {1, 1, 1, 1}, zero[4] = {0}, out[4], mu, rs;
        float *dr = tdup(f, row, 4), *dw1 = tdup(f, one, 4), *db0 = tdup(f, zero, 4);
        float *dout4 = talloc(f, 4), *dm = talloc(f, 1), *drs = talloc(f, 1);
        ig_kernel_layernorm_forward(FAST(f), dout4, dm, drs, dr, dw1, db0, 1, 4, 1e-5f);
        memcpy(out, dout4, sizeof out), mu = *dm, rs = *drs;
        assert_true(fabs(mu - 2.5) < 1e-6 && fabs(rs - 1.0 / sqrt(1.25 + 1e-5)) < 1e-6);
        assert_true(fabs(out[0] + 1.3416355) < 1e-5 && fabs(out[3] - 1.3416355) < 1e-5);
        tfree(f, dr), tfree(f, dw1), tfree(f, db0), tfree(f, dout4), tfree(f, dm), tfree(f, drs);
    }

    /* the eps is the model's: another one is added where the default was */
    {
        float row[4] = {1, 2, 3, 4}, one[4] = {1, 1, 1, 1}, zero[4] = {0};
        float *dr = tdup(f, row, 4), *dw1 = tdup(f, one, 4), *db0 = tdup(f, zero, 4);
        float *o4 = talloc(f, 4), *dm = talloc(f, 1), *drs = talloc(f, 1);
        for (int fast = 0; fast < 2; fast++) {
            ig_kernel_layernorm_forward(fast ? FAST(f) : f->ref, o4, dm, drs, dr, dw1, db0, 1, 4,
                                        0.25f);
            assert_true(fabs(*drs - 1.0 / sqrt(1.25 + 0.25)) < 1e-6);
        }
        tfree(f, dr), tfree(f, dw1), tfree(f, db0), tfree(f, o4), tfree(f, dm), tfree(f, drs);
    }
    ig_kernel_layernorm_forward(f->ref, o1, m1, r1, x, w, b, N, C, 1e-2f);
    ig_kernel_layernorm_forward(FAST(f), o2, m2, r2, x, w, b, N, C, 1e-2f);
    check_close(o2, o1, n, 1e-5, "layernorm_forward out, eps 1e-2");
    check_close(r2, r1, N, 1e-5, "layernorm_forward rstd, eps 1e-2");
    /* the double sums add the decimal a config wrote: GPT-2's 1e-5f is 1e-5, as it always was */
    assert_true(ig_cpu_eps(1e-5f) == 1e-5);
    assert_true(ig_cpu_eps(1e-6f) == 1e-6);
    assert_true(ig_cpu_eps(0.1f) == 0.1);
    float odd[3] = {0x1p-15f, 1.2345679e-7f, 3.0f}; /* and always a double of the same float */
    for (int i = 0; i < 3; i++) assert_true((float)ig_cpu_eps(odd[i]) == odd[i]);

    /* residual fused: residual = x + a2, then LayerNorm(residual) */
    float *res1 = talloc(f, n), *res2 = talloc(f, n);
    ig_kernel_residual_layernorm_forward(f->ref, res1, o1, m1, r1, x, a2, w, b, N, C, 1e-5f);
    ig_kernel_residual_layernorm_forward(FAST(f), res2, o2, m2, r2, x, a2, w, b, N, C, 1e-5f);
    check_same(res1, res2, n * 4, "residual_layernorm_forward residual");
    for (size_t i = 0; i < n; i++) assert_true(res1[i] == x[i] + a2[i]);
    check_close(o2, o1, n, 1e-5, "residual_layernorm_forward out");
    float *o3 = talloc(f, n);
    ig_kernel_layernorm_forward(FAST(f), o3, m2, r2, res2, w, b, N, C, 1e-5f);
    check_same(o2, o3, n * 4, "residual_layernorm_forward = add then layernorm");
    /* in place (residual == a: the residual stream updated where it lies) */
    float *inplace = tdup(f, x, n);
    ig_kernel_residual_layernorm_forward(FAST(f), inplace, o3, m2, r2, inplace, a2, w, b, N, C,
                                         1e-5f);
    check_same(inplace, res2, n * 4, "residual_layernorm_forward in place");
    check_same(o3, o2, n * 4, "residual_layernorm_forward in place, out");
    tfree(f, inplace);

    /* backward: fast vs reference, accumulating into nonzero gradients */
    float *dout = talloc(f, n);
    fill(dout, n, 14, -1, 1);
    ig_kernel_layernorm_forward(f->ref, o1, m1, r1, x, w, b, N, C, 1e-5f);
    float *di1 = talloc(f, n), *dw1 = talloc(f, C), *db1 = talloc(f, C);
    fill(di1, n, 15, -1, 1);
    fill(dw1, C, 16, -1, 1);
    fill(db1, C, 17, -1, 1);
    float *di2 = tdup(f, di1, n), *dw2 = tdup(f, dw1, C), *db2 = tdup(f, db1, C);
    ig_kernel_layernorm_backward(f->ref, di1, dw1, db1, dout, x, w, m1, r1, N, C);
    ig_kernel_layernorm_backward(FAST(f), di2, dw2, db2, dout, x, w, m1, r1, N, C);
    check_close(di2, di1, n, 1e-5, "layernorm_backward dinp");
    check_close(dw2, dw1, C, 1e-5, "layernorm_backward dw");
    check_close(db2, db1, C, 1e-5, "layernorm_backward db");

    /* finite differences of L = sum(LayerNorm(x) * dout) on a small shape */
    int n2 = 3, c2 = 7;
    size_t s2 = (size_t)n2 * c2;
    float *gi = talloc(f, s2), *gw = talloc(f, c2), *gb = talloc(f, c2), *o = talloc(f, s2);
    ig_kernel_layernorm_forward(f->ref, o, m1, r1, x, w, b, n2, c2, 1e-5f);
    ig_kernel_layernorm_backward(f->ref, gi, gw, gb, dout, x, w, m1, r1, n2, c2);
    float *targets[3] = {x, w, b}, *grads[3] = {gi, gw, gb};
    size_t sizes[3] = {s2, (size_t)c2, (size_t)c2};
    const char *names[3] = {"layernorm dinp", "layernorm dw", "layernorm db"};
    for (int t = 0; t < 3; t++) {
        double scale = max_abs(grads[t], sizes[t]);
        for (size_t i = 0; i < sizes[t]; i++) {
            float keep = targets[t][i];
            targets[t][i] = keep + FD_H;
            ig_kernel_layernorm_forward(f->ref, o, m2, r2, x, w, b, n2, c2, 1e-5f);
            double lp = dot_d(o, dout, s2);
            targets[t][i] = keep - FD_H;
            ig_kernel_layernorm_forward(f->ref, o, m2, r2, x, w, b, n2, c2, 1e-5f);
            double lm = dot_d(o, dout, s2);
            targets[t][i] = keep;
            check_fd(grads[t][i], (lp - lm) / (2 * FD_H), scale, names[t], i);
        }
    }
    float *all[] = {x,  w,    b,   a2,  o1,  o2,  m1,  m2,  r1, r2, res1, res2,
                    o3, dout, di1, dw1, db1, di2, dw2, db2, gi, gw, gb,   o};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

/* ---- RMSNorm --------------------------------------------------------------------------------- */

/* L = sum(RMSNorm(x) * dout) in double, for the finite differences */
static double rms_loss_d(const double *x, const double *w, const float *dout, int N, int C,
                         double eps) {
    double L = 0;
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += x[(size_t)n * C + c] * x[(size_t)n * C + c];
        double r = 1 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) L += x[(size_t)n * C + c] * r * w[c] * dout[(size_t)n * C + c];
    }
    return L;
}

static void test_rmsnorm(void **state) {
    fixture *f = *state;
    int N = 37, C = 101;
    size_t n = (size_t)N * C;
    float *x = talloc(f, n), *w = talloc(f, C), *a2 = talloc(f, n);
    fill(x, n, 130, -2, 3);
    fill(a2, n, 131, -1, 1);
    fill(w, C, 132, 0.5f, 1.5f);
    float *o1 = talloc(f, n), *o2 = talloc(f, n), *r1 = talloc(f, N), *r2 = talloc(f, N);
    for (int e = 0; e < 2; e++) {
        float eps = e ? 1e-2f : 1e-6f;
        ig_kernel_rmsnorm_forward(f->ref, o1, r1, x, w, N, C, eps);
        ig_kernel_rmsnorm_forward(FAST(f), o2, r2, x, w, N, C, eps);
        check_close(o2, o1, n, 1e-5, "rmsnorm_forward out");
        check_close(r2, r1, N, 1e-5, "rmsnorm_forward rstd");
    }
    /* by hand: [1, 2, 3, 4], w = [1, 2, 1, 1], eps 1e-6 (mean of squares 7.5) */
    {
        float row[4] = {1, 2, 3, 4}, wt[4] = {1, 2, 1, 1};
        float *dr = tdup(f, row, 4), *dw = tdup(f, wt, 4), *o = talloc(f, 4), *rs = talloc(f, 1);
        for (int fast = 0; fast < 2; fast++) {
            ig_kernel_rmsnorm_forward(fast ? FAST(f) : f->ref, o, rs, dr, dw, 1, 4, 1e-6f);
            double r = 1 / sqrt(7.5 + 1e-6);
            assert_true(fabs(*rs - r) < 1e-7);
            for (int c = 0; c < 4; c++) assert_true(fabs(o[c] - row[c] * r * wt[c]) < 1e-6);
        }
        tfree(f, dr), tfree(f, dw), tfree(f, o), tfree(f, rs);
    }

    /* residual fused: residual = x + a2, then RMSNorm(residual); in place too */
    float *res1 = talloc(f, n), *res2 = talloc(f, n), *o3 = talloc(f, n);
    ig_kernel_residual_rmsnorm_forward(f->ref, res1, o1, r1, x, a2, w, N, C, 1e-5f);
    ig_kernel_residual_rmsnorm_forward(FAST(f), res2, o2, r2, x, a2, w, N, C, 1e-5f);
    check_same(res1, res2, n * 4, "residual_rmsnorm_forward residual");
    for (size_t i = 0; i < n; i++) assert_true(res1[i] == x[i] + a2[i]);
    check_close(o2, o1, n, 1e-5, "residual_rmsnorm_forward out");
    ig_kernel_rmsnorm_forward(FAST(f), o3, r1, res2, w, N, C, 1e-5f);
    check_same(o2, o3, n * 4, "residual_rmsnorm_forward = add then rmsnorm");
    float *inplace = tdup(f, x, n);
    ig_kernel_residual_rmsnorm_forward(FAST(f), inplace, o3, r1, inplace, a2, w, N, C, 1e-5f);
    check_same(inplace, res2, n * 4, "residual_rmsnorm_forward in place");
    check_same(o3, o2, n * 4, "residual_rmsnorm_forward in place, out");

    /* backward: fast vs reference, accumulating into nonzero gradients */
    float *dout = talloc(f, n);
    fill(dout, n, 133, -1, 1);
    ig_kernel_rmsnorm_forward(f->ref, o1, r1, x, w, N, C, 1e-5f);
    float *di1 = talloc(f, n), *dw1 = talloc(f, C);
    fill(di1, n, 134, -1, 1);
    fill(dw1, C, 135, -1, 1);
    float *di2 = tdup(f, di1, n), *dw2 = tdup(f, dw1, C);
    float *di0 = tdup(f, di1, n), *dw0 = tdup(f, dw1, C);
    ig_kernel_rmsnorm_backward(f->ref, di1, dw1, dout, x, w, r1, N, C);
    ig_kernel_rmsnorm_backward(FAST(f), di2, dw2, dout, x, w, r1, N, C);
    check_close(di2, di1, n, 1e-5, "rmsnorm_backward dinp");
    check_close(dw2, dw1, C, 1e-5, "rmsnorm_backward dw");

    /* the same bits on any thread count */
    for (int t = 0; t < NTHREADS; t++) {
        float *o4 = talloc(f, n), *r4 = talloc(f, N), *res4 = talloc(f, n);
        float *di4 = tdup(f, di0, n), *dw4 = tdup(f, dw0, C);
        ig_kernel_rmsnorm_forward(f->fast[t], o4, r4, x, w, N, C, 1e-5f);
        ig_kernel_rmsnorm_forward(FAST(f), o3, r2, x, w, N, C, 1e-5f);
        check_same(o4, o3, n * 4, "rmsnorm_forward threads");
        check_same(r4, r2, (size_t)N * 4, "rmsnorm_forward rstd threads");
        ig_kernel_residual_rmsnorm_forward(f->fast[t], res4, o4, r4, x, a2, w, N, C, 1e-5f);
        check_same(res4, res2, n * 4, "residual_rmsnorm_forward threads");
        ig_kernel_rmsnorm_backward(f->fast[t], di4, dw4, dout, x, w, r1, N, C);
        check_same(di4, di2, n * 4, "rmsnorm_backward dinp threads");
        check_same(dw4, dw2, (size_t)C * 4, "rmsnorm_backward dw threads");
        tfree(f, o4), tfree(f, r4), tfree(f, res4), tfree(f, di4), tfree(f, dw4);
    }

    /* finite differences in double of L = sum(RMSNorm(x) * dout) on a small shape */
    int n2 = 3, c2 = 7;
    size_t s2 = (size_t)n2 * c2;
    double xd[21], wd[7], eps = 1e-2; /* a large eps, so that its part shows */
    for (size_t i = 0; i < s2; i++) xd[i] = x[i];
    for (int c = 0; c < c2; c++) wd[c] = w[c];
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *gi = talloc(f, s2), *gw = talloc(f, c2), *o = talloc(f, s2), *rs = talloc(f, n2);
        ig_kernel_rmsnorm_forward(be, o, rs, x, w, n2, c2, (float)eps);
        ig_kernel_rmsnorm_backward(be, gi, gw, dout, x, w, rs, n2, c2);
        double *targets[2] = {xd, wd};
        float *grads[2] = {gi, gw};
        size_t sizes[2] = {s2, (size_t)c2};
        for (int t = 0; t < 2; t++) {
            double scale = max_abs(grads[t], sizes[t]);
            for (size_t i = 0; i < sizes[t]; i++) {
                double keep = targets[t][i], h = 1e-6;
                targets[t][i] = keep + h;
                double lp = rms_loss_d(xd, wd, dout, n2, c2, (double)(float)eps);
                targets[t][i] = keep - h;
                double lm = rms_loss_d(xd, wd, dout, n2, c2, (double)(float)eps);
                targets[t][i] = keep;
                double num = (lp - lm) / (2 * h);
                if (fabs(grads[t][i] - num) > 1e-5 * scale + 1e-6)
                    fail_msg("rmsnorm %s[%zu]: backward %.9g, finite differences %.9g",
                             t ? "dw" : "dinp", i, grads[t][i], num);
            }
        }
        tfree(f, gi), tfree(f, gw), tfree(f, o), tfree(f, rs);
    }
    float *all[] = {x,  w,    a2,  o1,  o2,  r1,  r2,  res1, res2,
                    o3, dout, di1, dw1, di2, dw2, di0, dw0,  inplace};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

/* ---- matmul ---------------------------------------------------------------------------------- */

static void matmul_case(fixture *f, int N, int C, int OC, ig_w_layout layout, int with_bias,
                        int with_dinp) {
    char what[96];
    snprintf(what, sizeof what, "matmul N=%d C=%d OC=%d %s%s%s", N, C, OC,
             layout == IG_W_IN_OUT ? "in_out" : "out_in", with_bias ? " bias" : "",
             with_dinp ? "" : " no-dinp");
    size_t ni = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
    float *x = talloc(f, ni), *w = talloc(f, nw), *bias = talloc(f, OC);
    fill(x, ni, 20, -1, 1);
    fill(w, nw, 21, -1, 1);
    fill(bias, OC, 22, -1, 1);
    float *o1 = talloc(f, no), *o2 = talloc(f, no);
    ig_kernel_matmul_forward(f->ref, o1, x, w, layout, with_bias ? bias : NULL, N, C, OC);
    ig_kernel_matmul_forward(FAST(f), o2, x, w, layout, with_bias ? bias : NULL, N, C, OC);
    check_close(o2, o1, no, 1e-5, what);

    float *dout = talloc(f, no);
    fill(dout, no, 23, -1, 1);
    float *di1 = talloc(f, ni), *dw1 = talloc(f, nw), *db1 = talloc(f, OC);
    fill(di1, ni, 24, -1, 1); /* overwritten */
    fill(dw1, nw, 25, -1, 1); /* accumulated */
    fill(db1, OC, 26, -1, 1);
    float *di2 = tdup(f, di1, ni), *dw2 = tdup(f, dw1, nw), *db2 = tdup(f, db1, OC);
    float *dw0 = tdup(f, dw1, nw), *di0 = tdup(f, di1, ni);
    ig_kernel_matmul_backward(f->ref, with_dinp ? di1 : NULL, dw1, with_bias ? db1 : NULL, dout, x,
                              w, layout, N, C, OC);
    ig_kernel_matmul_backward(FAST(f), with_dinp ? di2 : NULL, dw2, with_bias ? db2 : NULL, dout, x,
                              w, layout, N, C, OC);
    check_close(di2, di1, ni, 1e-5, what);
    check_close(dw2, dw1, nw, 1e-5, what);
    check_same(db2, db1, (size_t)OC * 4, what);
    if (!with_dinp) check_same(di2, di0, ni * 4, "matmul_backward left dinp alone");
    /* dW accumulated: the difference from the starting gradient is inp^T dout */
    int pc = C > 2 ? 2 : 0, po = OC > 3 ? 3 : 0;
    size_t probe = layout == IG_W_IN_OUT ? (size_t)pc * OC + po : (size_t)po * C + pc;
    double g = 0;
    for (int n = 0; n < N; n++) g += (double)x[(size_t)n * C + pc] * dout[(size_t)n * OC + po];
    assert_true(fabs((dw2[probe] - dw0[probe]) - g) < 1e-4 * (1 + fabs(g)));

    /* determinism over thread counts */
    float *o3 = talloc(f, no), *di3 = talloc(f, ni), *dw3 = talloc(f, nw), *db3 = talloc(f, OC);
    for (int t = 0; t < NTHREADS; t++) {
        ig_kernel_matmul_forward(f->fast[t], o3, x, w, layout, with_bias ? bias : NULL, N, C, OC);
        check_same(o3, o2, no * 4, what);
        memcpy(dw3, dw0, nw * 4);
        memcpy(db3, db1, (size_t)OC * 4);
        ig_kernel_matmul_backward(f->fast[t], with_dinp ? di3 : NULL, dw3, NULL, dout, x, w, layout,
                                  N, C, OC);
        if (with_dinp) check_same(di3, di2, ni * 4, what);
        check_same(dw3, dw2, nw * 4, what);
    }
    float *all[] = {x,   w,   bias, o1,  o2,  dout, di1, dw1, db1,
                    di2, dw2, db2,  dw0, di0, o3,   di3, dw3, db3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static void test_matmul(void **state) {
    fixture *f = *state;
    matmul_case(f, 67, 45, 131, IG_W_IN_OUT, 1, 1);
    matmul_case(f, 67, 45, 131, IG_W_OUT_IN, 0, 1);
    matmul_case(f, 150, 33, 20, IG_W_IN_OUT, 1, 0); /* rows cut into chunks */
    matmul_case(f, 5, 70, 300, IG_W_OUT_IN, 1, 1);  /* an lm-head-like shape */
    matmul_case(f, 1, 1, 1, IG_W_IN_OUT, 1, 1);
}

static void test_matmul_fd(void **state) {
    fixture *f = *state;
    int N = 4, C = 5, OC = 6;
    for (int lay = 0; lay < 2; lay++) {
        ig_w_layout layout = lay ? IG_W_OUT_IN : IG_W_IN_OUT;
        float *x = talloc(f, N * C), *w = talloc(f, C * OC), *bias = talloc(f, OC);
        float *dout = talloc(f, N * OC), *o = talloc(f, N * OC);
        fill(x, N * C, 30, -1, 1), fill(w, C * OC, 31, -1, 1), fill(bias, OC, 32, -1, 1);
        fill(dout, N * OC, 33, -1, 1);
        float *gi = talloc(f, N * C), *gw = talloc(f, C * OC), *gb = talloc(f, OC);
        ig_kernel_matmul_backward(FAST(f), gi, gw, gb, dout, x, w, layout, N, C, OC);
        float *targets[3] = {x, w, bias}, *grads[3] = {gi, gw, gb};
        size_t sizes[3] = {(size_t)N * C, (size_t)C * OC, (size_t)OC};
        for (int t = 0; t < 3; t++)
            for (size_t i = 0; i < sizes[t]; i++) {
                float keep = targets[t][i];
                targets[t][i] = keep + FD_H;
                ig_kernel_matmul_forward(FAST(f), o, x, w, layout, bias, N, C, OC);
                double lp = dot_d(o, dout, (size_t)N * OC);
                targets[t][i] = keep - FD_H;
                ig_kernel_matmul_forward(FAST(f), o, x, w, layout, bias, N, C, OC);
                double lm = dot_d(o, dout, (size_t)N * OC);
                targets[t][i] = keep;
                check_fd(grads[t][i], (lp - lm) / (2 * FD_H), max_abs(grads[t], sizes[t]), "matmul",
                         i);
            }
        float *all[] = {x, w, bias, dout, o, gi, gw, gb};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    }
}

/* ---- GeLU ------------------------------------------------------------------------------------ */

static void test_gelu(void **state) {
    fixture *f = *state;
    int N = 29, C = 203;
    size_t n = (size_t)N * C;
    float *x = talloc(f, n), *bias = talloc(f, C), *o1 = talloc(f, n), *o2 = talloc(f, n);
    fill(x, n, 40, -5, 5);
    fill(bias, C, 41, -1, 1);
    ig_kernel_gelu_bias_forward(f->ref, o1, x, bias, N, C);
    ig_kernel_gelu_bias_forward(FAST(f), o2, x, bias, N, C);
    check_close(o2, o1, n, 1e-5, "gelu_bias_forward");
    { /* torch.nn.functional.gelu(torch.tensor([1.0, -0.5]), approximate="tanh") */
        float one[2] = {1.0f, -0.5f}, zero[2] = {0, 0};
        float *dx = tdup(f, one, 2), *db = tdup(f, zero, 2), *dy = talloc(f, 2);
        ig_kernel_gelu_bias_forward(FAST(f), dy, dx, db, 1, 2);
        assert_true(fabs(dy[0] - 0.8411920071) < 1e-6 && fabs(dy[1] + 0.1542859972) < 1e-6);
        tfree(f, dx), tfree(f, db), tfree(f, dy);
    }
    float *dout = talloc(f, n), *di1 = talloc(f, n), *di2 = talloc(f, n);
    float *db1 = talloc(f, C);
    fill(dout, n, 42, -1, 1);
    fill(db1, C, 43, -1, 1);
    float *db2 = tdup(f, db1, C);
    ig_kernel_gelu_bias_backward(f->ref, di1, db1, dout, x, bias, N, C);
    ig_kernel_gelu_bias_backward(FAST(f), di2, db2, dout, x, bias, N, C);
    check_close(di2, di1, n, 1e-5, "gelu_bias_backward dinp");
    check_close(db2, db1, C, 1e-5, "gelu_bias_backward dbias");
    /* in place (dinp == dout), as a trainer may call it */
    float *io = tdup(f, dout, n), *db3 = talloc(f, C);
    ig_kernel_gelu_bias_backward(FAST(f), io, db3, io, x, bias, N, C);
    check_same(io, di2, n * 4, "gelu_bias_backward in place");
    /* threads */
    for (int t = 0; t < NTHREADS; t++) {
        memset(db3, 0, (size_t)C * 4);
        float *db4 = talloc(f, C);
        ig_kernel_gelu_bias_forward(f->fast[t], o1, x, bias, N, C);
        check_same(o1, o2, n * 4, "gelu_bias_forward threads");
        ig_kernel_gelu_bias_backward(f->fast[t], io, db3, dout, x, bias, N, C);
        ig_kernel_gelu_bias_backward(FAST(f), di1, db4, dout, x, bias, N, C);
        check_same(io, di2, n * 4, "gelu_bias_backward threads");
        check_same(db3, db4, (size_t)C * 4, "gelu_bias_backward dbias threads");
        tfree(f, db4);
    }
    /* finite differences on a few elements */
    int n2 = 2, c2 = 9;
    float *gi = talloc(f, n2 * c2), *gb = talloc(f, c2), *o = talloc(f, n2 * c2);
    ig_kernel_gelu_bias_backward(f->ref, gi, gb, dout, x, bias, n2, c2);
    float *targets[2] = {x, bias}, *grads[2] = {gi, gb};
    size_t sizes[2] = {(size_t)n2 * c2, (size_t)c2};
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < sizes[t]; i++) {
            float keep = targets[t][i];
            targets[t][i] = keep + FD_H;
            ig_kernel_gelu_bias_forward(f->ref, o, x, bias, n2, c2);
            double lp = dot_d(o, dout, sizes[0]);
            targets[t][i] = keep - FD_H;
            ig_kernel_gelu_bias_forward(f->ref, o, x, bias, n2, c2);
            double lm = dot_d(o, dout, sizes[0]);
            targets[t][i] = keep;
            check_fd(grads[t][i], (lp - lm) / (2 * FD_H), max_abs(grads[t], sizes[t]), "gelu", i);
        }
    float *all[] = {x, bias, o1, o2, dout, di1, di2, db1, db2, io, db3, gi, gb, o};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

/* ---- SwiGLU ---------------------------------------------------------------------------------- */

static void test_swiglu(void **state) {
    fixture *f = *state;
    int N = 29, F = 203;
    size_t n = (size_t)N * F;
    float *gate = talloc(f, n), *up = talloc(f, n), *o1 = talloc(f, n), *o2 = talloc(f, n);
    fill(gate, n, 140, -6, 6);
    fill(up, n, 141, -2, 2);
    gate[0] = 95, gate[1] = -95, gate[2] = 200, gate[3] = -200; /* past expf's range */
    ig_kernel_swiglu_forward(f->ref, o1, gate, up, N, F);
    ig_kernel_swiglu_forward(FAST(f), o2, gate, up, N, F);
    check_close(o2, o1, n, 1e-6, "swiglu_forward");
    { /* torch.nn.functional.silu(torch.tensor([1.0, -2.0])) * torch.tensor([2.0, 3.0]) */
        float g2[2] = {1.0f, -2.0f}, u2[2] = {2.0f, 3.0f};
        float *dg = tdup(f, g2, 2), *du = tdup(f, u2, 2), *dy = talloc(f, 2);
        for (int fast = 0; fast < 2; fast++) {
            ig_kernel_swiglu_forward(fast ? FAST(f) : f->ref, dy, dg, du, 1, 2);
            assert_true(fabs(dy[0] - 1.4621171572) < 1e-6 && fabs(dy[1] + 0.7152175320) < 1e-6);
        }
        tfree(f, dg), tfree(f, du), tfree(f, dy);
    }
    float *dout = talloc(f, n), *dg1 = talloc(f, n), *du1 = talloc(f, n);
    float *dg2 = talloc(f, n), *du2 = talloc(f, n);
    fill(dout, n, 142, -1, 1);
    fill(dg2, n, 143, -1, 1); /* overwritten */
    ig_kernel_swiglu_backward(f->ref, dg1, du1, dout, gate, up, N, F);
    ig_kernel_swiglu_backward(FAST(f), dg2, du2, dout, gate, up, N, F);
    check_close(dg2, dg1, n, 1e-6, "swiglu_backward dgate");
    check_close(du2, du1, n, 1e-6, "swiglu_backward dup");
    for (size_t i = 0; i < n; i++) assert_false(isnan(dg2[i]) || isnan(du2[i]));
    /* in place: dgate, or dup, is dout */
    float *io = tdup(f, dout, n), *other = talloc(f, n);
    ig_kernel_swiglu_backward(FAST(f), io, other, io, gate, up, N, F);
    check_same(io, dg2, n * 4, "swiglu_backward dgate in place");
    check_same(other, du2, n * 4, "swiglu_backward dgate in place, dup");
    memcpy(io, dout, n * 4);
    ig_kernel_swiglu_backward(FAST(f), other, io, io, gate, up, N, F);
    check_same(io, du2, n * 4, "swiglu_backward dup in place");
    check_same(other, dg2, n * 4, "swiglu_backward dup in place, dgate");
    memcpy(io, dout, n * 4);
    ig_kernel_swiglu_backward(f->ref, io, other, io, gate, up, N, F);
    check_same(io, dg1, n * 4, "swiglu_backward (reference) in place");
    /* threads */
    for (int t = 0; t < NTHREADS; t++) {
        float *o3 = talloc(f, n), *dg3 = talloc(f, n), *du3 = talloc(f, n);
        ig_kernel_swiglu_forward(f->fast[t], o3, gate, up, N, F);
        check_same(o3, o2, n * 4, "swiglu_forward threads");
        ig_kernel_swiglu_backward(f->fast[t], dg3, du3, dout, gate, up, N, F);
        check_same(dg3, dg2, n * 4, "swiglu_backward dgate threads");
        check_same(du3, du2, n * 4, "swiglu_backward dup threads");
        tfree(f, o3), tfree(f, dg3), tfree(f, du3);
    }
    /* finite differences in double of L = sum(silu(gate) * up * dout) */
    for (size_t i = 0; i < 64; i++) {
        size_t at = 4 + i * 37; /* away from the extremes */
        for (int which = 0; which < 2; which++) {
            double g = gate[at], u = up[at], h = 1e-6, d = dout[at];
            double gp = which ? g : g + h, gm = which ? g : g - h;
            double up_ = which ? u + h : u, um = which ? u - h : u;
            double lp = gp / (1 + exp(-gp)) * up_ * d, lm = gm / (1 + exp(-gm)) * um * d;
            double num = (lp - lm) / (2 * h);
            for (int fast = 0; fast < 2; fast++) {
                double got = which ? (fast ? du2 : du1)[at] : (fast ? dg2 : dg1)[at];
                if (fabs(got - num) > 1e-5 * (1 + fabs(num)))
                    fail_msg("swiglu %s[%zu] (%s): backward %.9g, finite differences %.9g",
                             which ? "dup" : "dgate", at, fast ? "fast" : "reference", got, num);
            }
        }
    }
    float *all[] = {gate, up, o1, o2, dout, dg1, du1, dg2, du2, io, other};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

/* ---- RoPE ------------------------------------------------------------------------------------ */

static void rope_case(fixture *f, int B, int T, int NH, int NKV, int hs, int pos0, float theta) {
    char what[128];
    snprintf(what, sizeof what, "rope B=%d T=%d NH=%d NKV=%d hs=%d pos0=%d theta=%g", B, T, NH, NKV,
             hs, pos0, (double)theta);
    size_t R = (size_t)(NH + 2 * NKV) * hs, n = (size_t)B * T * R;
    size_t qk = (size_t)(NH + NKV) * hs; /* the rotated part of a row */
    float *x = talloc(f, n);
    fill(x, n, 150, -2, 2);
    float *x1 = tdup(f, x, n), *x2 = tdup(f, x, n);
    ig_kernel_rope_forward(f->ref, x1, B, T, NH, NKV, hs, pos0, theta);
    ig_kernel_rope_forward(FAST(f), x2, B, T, NH, NKV, hs, pos0, theta);
    check_close(x2, x1, n, 1e-6, what);
    for (size_t r = 0; r < (size_t)B * T; r++) /* the value heads are left alone */
        check_same(x2 + r * R + qk, x + r * R + qk, (R - qk) * 4, "rope leaves v alone");
    /* a rotation keeps each pair's length */
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int h = 0; h < NH + NKV; h++)
            for (int i = 0; i < hs / 2; i++) {
                const float *a = x + r * R + (size_t)h * hs, *b = x2 + r * R + (size_t)h * hs;
                double l0 = (double)a[i] * a[i] + (double)a[i + hs / 2] * a[i + hs / 2];
                double l1 = (double)b[i] * b[i] + (double)b[i + hs / 2] * b[i + hs / 2];
                assert_true(fabs(l0 - l1) < 1e-5 * (1 + l0));
            }
    /* backward: the transpose, fast vs reference; after the forward it gives x back */
    float *g1 = tdup(f, x2, n), *g2 = tdup(f, x2, n);
    ig_kernel_rope_backward(f->ref, g1, B, T, NH, NKV, hs, pos0, theta);
    ig_kernel_rope_backward(FAST(f), g2, B, T, NH, NKV, hs, pos0, theta);
    check_close(g2, g1, n, 1e-6, what);
    check_close(g2, x, n, 1e-6, "rope backward after forward = identity");
    /* threads */
    for (int t = 0; t < NTHREADS; t++) {
        float *x3 = tdup(f, x, n);
        ig_kernel_rope_forward(f->fast[t], x3, B, T, NH, NKV, hs, pos0, theta);
        check_same(x3, x2, n * 4, "rope_forward threads");
        ig_kernel_rope_backward(f->fast[t], x3, B, T, NH, NKV, hs, pos0, theta);
        check_same(x3, g2, n * 4, "rope_backward threads");
        tfree(f, x3);
    }
    tfree(f, x), tfree(f, x1), tfree(f, x2), tfree(f, g1), tfree(f, g2);
}

static void test_rope(void **state) {
    fixture *f = *state;
    rope_case(f, 2, 37, 4, 2, 64, 0, 10000.0f);
    rope_case(f, 3, 5, 3, 3, 6, 1000, 500000.0f); /* far positions, Llama 3's theta */
    rope_case(f, 1, 130, 2, 1, 128, 7, 10000.0f);
    rope_case(f, 2, 9, 6, 1, 2, 3, 10.0f);

    /* a direct formula: hs 8, theta 10000: inv_freq = 1, 0.1, 0.01, 0.001; the row of position
     * pos0 + t = 3 rotates pair i by 3 inv_freq_i */
    int NH = 1, NKV = 1, hs = 8, B = 1, T = 2, pos0 = 2;
    size_t R = (size_t)(NH + 2 * NKV) * hs;
    float *x = talloc(f, (size_t)B * T * R), *y = talloc(f, (size_t)B * T * R);
    fill(x, (size_t)B * T * R, 151, -1, 1);
    for (int fast = 0; fast < 2; fast++) {
        memcpy(y, x, (size_t)B * T * R * 4);
        ig_kernel_rope_forward(fast ? FAST(f) : f->ref, y, B, T, NH, NKV, hs, pos0, 10000.0f);
        const float *in = x + R, *out = y + R; /* t = 1: position 3 */
        double inv[4] = {1, 0.1, 0.01, 0.001};
        for (int h = 0; h < 2; h++) /* the query head and the key head */
            for (int i = 0; i < 4; i++) {
                double c = cos(3 * inv[i]), s = sin(3 * inv[i]);
                double a = in[h * hs + i], d = in[h * hs + i + 4];
                assert_true(fabs(out[h * hs + i] - (a * c - d * s)) < 1e-6);
                assert_true(fabs(out[h * hs + i + 4] - (d * c + a * s)) < 1e-6);
            }
        /* t = 0, position 2: the key head's pair 1 by 0.2 radians */
        assert_true(fabs(y[hs + 1] - (x[hs + 1] * cos(0.2) - x[hs + 5] * sin(0.2))) < 1e-6);
    }
    /* the angles are transformers' fp32 ones: theta ** (float(2i) / hs), then 1 / that */
    float inv[64];
    ig_backend_rope_inv_freq(inv, 128, 500000.0f);
    for (int i = 0; i < 64; i++)
        assert_true(inv[i] == 1.0f / powf(500000.0f, (float)(2 * i) / 128));
    assert_true(inv[0] == 1.0f);

    /* the backward is the gradient: <rope(x), dout> = <x, rope_backward(dout)> in double, and
     * central finite differences of the forward */
    int B2 = 2, T2 = 3, NH2 = 2, NKV2 = 1, hs2 = 4;
    size_t n2 = (size_t)B2 * T2 * (NH2 + 2 * NKV2) * hs2;
    float *a = talloc(f, n2), *dout = talloc(f, n2), *ra = talloc(f, n2), *g = talloc(f, n2);
    fill(a, n2, 152, -1, 1);
    fill(dout, n2, 153, -1, 1);
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        memcpy(ra, a, n2 * 4), memcpy(g, dout, n2 * 4);
        ig_kernel_rope_forward(be, ra, B2, T2, NH2, NKV2, hs2, 5, 10000.0f);
        ig_kernel_rope_backward(be, g, B2, T2, NH2, NKV2, hs2, 5, 10000.0f);
        assert_true(fabs(dot_d(ra, dout, n2) - dot_d(a, g, n2)) < 1e-5);
        for (size_t i = 0; i < n2; i++) {
            float keep = a[i];
            memcpy(ra, a, n2 * 4);
            ra[i] = keep + FD_H;
            ig_kernel_rope_forward(be, ra, B2, T2, NH2, NKV2, hs2, 5, 10000.0f);
            double lp = dot_d(ra, dout, n2);
            memcpy(ra, a, n2 * 4);
            ra[i] = keep - FD_H;
            ig_kernel_rope_forward(be, ra, B2, T2, NH2, NKV2, hs2, 5, 10000.0f);
            double lm = dot_d(ra, dout, n2);
            check_fd(g[i], (lp - lm) / (2 * FD_H), max_abs(g, n2), "rope", i);
        }
    }
    tfree(f, x), tfree(f, y), tfree(f, a), tfree(f, dout), tfree(f, ra), tfree(f, g);
}

/* ---- attention ------------------------------------------------------------------------------- */

/* the shape of an attention call: NH query heads, NKV key/value heads of hs */
static ig_attention_shape att_shape(int B, int T, int NH, int NKV, int hs, int causal) {
    ig_attention_shape s = {
        .B = B, .T = T, .n_head = NH, .n_kv_head = NKV, .head_size = hs, .causal = causal};
    return s;
}

/* elements of packed qkv [B, T, (NH + 2 NKV) hs], of out [B, T, NH hs], of lse [B, NH, T] */
static size_t att_nqkv(const ig_attention_shape *s) {
    return (size_t)s->B * s->T * (s->n_head + 2 * s->n_kv_head) * s->head_size;
}
static size_t att_nout(const ig_attention_shape *s) {
    return (size_t)s->B * s->T * s->n_head * s->head_size;
}
static size_t att_nlse(const ig_attention_shape *s) {
    return (size_t)s->B * s->n_head * s->T;
}

/* Documents of uneven lengths: sequence b's boundaries at odd places, shifted by b. */
static void att_docs(int32_t *doc, int B, int T) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            doc[(size_t)b * T + t] = t < T / 3 + b       ? 10
                                     : t < T / 3 + b + 1 ? 11
                                     : t < 3 * T / 4     ? 12
                                                         : 13;
}

/* fast vs reference, forward and backward, and the same bits on 1, 2, 3 and 8 threads */
static void attention_case(fixture *f, int B, int T, int NH, int NKV, int hs, int causal,
                           int docs) {
    ig_attention_shape s = att_shape(B, T, NH, NKV, hs, causal);
    char what[128];
    snprintf(what, sizeof what, "attention B=%d T=%d NH=%d NKV=%d hs=%d%s%s", B, T, NH, NKV, hs,
             causal ? " causal" : "", docs ? " documents" : "");
    size_t nqkv = att_nqkv(&s), no = att_nout(&s), nl = att_nlse(&s);
    float *qkv = talloc(f, nqkv), *o1 = talloc(f, no), *o2 = talloc(f, no);
    float *l1 = talloc(f, nl), *l2 = talloc(f, nl);
    int32_t *doc = docs ? ialloc(f, (size_t)B * T) : NULL;
    if (doc) att_docs(doc, B, T);
    fill(qkv, nqkv, 50, -2, 2);
    ig_kernel_attention_forward(f->ref, o1, l1, qkv, doc, &s);
    ig_kernel_attention_forward(FAST(f), o2, l2, qkv, doc, &s);
    check_close(o2, o1, no, 1e-5, what);
    check_close(l2, l1, nl, 1e-5, what);
    if (causal) { /* the first query sees only itself: its output is its kv head's v */
        size_t C = (size_t)NH * hs;
        for (int h = 0; h < NH; h++)
            for (int c = 0; c < hs; c++)
                assert_true(fabs(o2[(size_t)h * hs + c] -
                                 qkv[C + (size_t)(NKV + h / (NH / NKV)) * hs + c]) < 1e-6);
    }

    float *dout = talloc(f, no), *d1 = talloc(f, nqkv), *d2 = talloc(f, nqkv);
    fill(dout, no, 51, -1, 1);
    fill(d2, nqkv, 52, -1, 1); /* overwritten */
    ig_kernel_attention_backward(f->ref, d1, dout, qkv, o1, l1, doc, &s);
    ig_kernel_attention_backward(FAST(f), d2, dout, qkv, o2, l2, doc, &s);
    check_close(d2, d1, nqkv, 1e-5, what);

    for (int t = 0; t < NTHREADS; t++) {
        float *o3 = talloc(f, no), *l3 = talloc(f, nl), *d3 = talloc(f, nqkv);
        ig_kernel_attention_forward(f->fast[t], o3, l3, qkv, doc, &s);
        check_same(o3, o2, no * 4, "attention_forward threads");
        check_same(l3, l2, nl * 4, "attention_forward lse threads");
        ig_kernel_attention_backward(f->fast[t], d3, dout, qkv, o2, l2, doc, &s);
        check_same(d3, d2, nqkv * 4, "attention_backward threads");
        tfree(f, o3), tfree(f, l3), tfree(f, d3);
    }
    float *all[] = {qkv, o1, o2, l1, l2, dout, d1, d2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    tfree(f, doc);
}

static void test_attention(void **state) {
    fixture *f = *state;
    /* multi-head, causal (GPT-2) */
    attention_case(f, 2, 70, 3, 3, 8, 1, 0);   /* head size 8: the plain loops; a ragged block */
    attention_case(f, 1, 130, 2, 2, 64, 1, 0); /* head size 64: the register-blocked loops */
    /* grouped-query: groups of 2 and of n_head (multi-query), causal or not, with documents */
    attention_case(f, 2, 70, 4, 2, 8, 1, 0);
    attention_case(f, 2, 67, 4, 1, 8, 1, 1);
    attention_case(f, 3, 100, 6, 3, 64, 1, 1);
    attention_case(f, 2, 129, 4, 2, 64, 0, 0); /* non-causal: every query sees 3 key blocks */
    attention_case(f, 2, 70, 4, 4, 8, 0, 1);
    attention_case(f, 2, 45, 6, 1, 64, 0, 1);
    attention_case(f, 2, 33, 6, 2, 7, 1, 1); /* an odd head size */
    attention_case(f, 2, 33, 6, 3, 7, 0, 0);
}

/* Grouped-query attention is multi-head attention with each key/value head repeated for its
 * query heads: the same outputs (the same bits: the same numbers meet in the same order), and
 * the gradient of a key/value head is the sum of its copies' gradients. */
static void test_attention_gqa(void **state) {
    fixture *f = *state;
    int B = 2, T = 75, NH = 6, NKV = 2, hs = 16, g = NH / NKV;
    for (int causal = 0; causal < 2; causal++) {
        ig_attention_shape sg = att_shape(B, T, NH, NKV, hs, causal);
        ig_attention_shape sm = att_shape(B, T, NH, NH, hs, causal);
        size_t C = (size_t)NH * hs, Rg = C + 2 * (size_t)NKV * hs, Rm = 3 * C;
        float *qg = talloc(f, att_nqkv(&sg)), *qm = talloc(f, att_nqkv(&sm));
        fill(qg, att_nqkv(&sg), 55, -2, 2);
        for (size_t r = 0; r < (size_t)B * T; r++) {
            memcpy(qm + r * Rm, qg + r * Rg, C * 4); /* queries */
            for (int h = 0; h < NH; h++)
                for (int part = 1; part < 3; part++) /* keys, values: kv head h / g */
                    memcpy(qm + r * Rm + part * C + (size_t)h * hs,
                           qg + r * Rg + C + (size_t)(part - 1) * NKV * hs + (size_t)(h / g) * hs,
                           (size_t)hs * 4);
        }
        size_t no = att_nout(&sg), nl = att_nlse(&sg);
        float *og = talloc(f, no), *om = talloc(f, no), *lg = talloc(f, nl), *lm = talloc(f, nl);
        float *dout = talloc(f, no), *dg = talloc(f, att_nqkv(&sg)), *dm = talloc(f, att_nqkv(&sm));
        fill(dout, no, 56, -1, 1);
        for (int fast = 0; fast < 2; fast++) {
            ig_backend *be = fast ? FAST(f) : f->ref;
            ig_kernel_attention_forward(be, og, lg, qg, NULL, &sg);
            ig_kernel_attention_forward(be, om, lm, qm, NULL, &sm);
            check_same(og, om, no * 4, "grouped-query = repeated heads: out");
            check_same(lg, lm, nl * 4, "grouped-query = repeated heads: lse");
            ig_kernel_attention_backward(be, dg, dout, qg, og, lg, NULL, &sg);
            ig_kernel_attention_backward(be, dm, dout, qm, om, lm, NULL, &sm);
            /* dq the same; dk, dv of a kv head: the sum over its query heads' copies */
            float *want = talloc(f, att_nqkv(&sg));
            for (size_t r = 0; r < (size_t)B * T; r++) {
                memcpy(want + r * Rg, dm + r * Rm, C * 4);
                for (int part = 1; part < 3; part++)
                    for (int j = 0; j < NKV; j++)
                        for (int c = 0; c < hs; c++) {
                            double sum = 0;
                            for (int h = j * g; h < (j + 1) * g; h++)
                                sum += dm[r * Rm + part * C + (size_t)h * hs + c];
                            want[r * Rg + C + (size_t)(part - 1) * NKV * hs + (size_t)j * hs + c] =
                                (float)sum;
                        }
            }
            check_close(dg, want, att_nqkv(&sg), 1e-5, "grouped-query gradient = summed copies");
            tfree(f, want);
        }
        float *all[] = {qg, qm, og, om, lg, lm, dout, dg, dm};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    }
}

/* Non-causal attention by hand: each query's softmax over every key of the sequence, in double. */
static void test_attention_noncausal(void **state) {
    fixture *f = *state;
    int B = 2, T = 11, NH = 4, NKV = 2, hs = 5;
    ig_attention_shape s = att_shape(B, T, NH, NKV, hs, 0);
    size_t C = (size_t)NH * hs, R = C + 2 * (size_t)NKV * hs;
    float *qkv = talloc(f, att_nqkv(&s)), *o = talloc(f, att_nout(&s)),
          *l = talloc(f, att_nlse(&s));
    fill(qkv, att_nqkv(&s), 57, -2, 2);
    for (int fast = 0; fast < 2; fast++) {
        ig_kernel_attention_forward(fast ? FAST(f) : f->ref, o, l, qkv, NULL, &s);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    const float *q = qkv + ((size_t)b * T + t) * R + (size_t)h * hs;
                    double sc[11], m = -INFINITY, z = 0;
                    for (int u = 0; u < T; u++) {
                        const float *k = qkv + ((size_t)b * T + u) * R + C + (size_t)(h / 2) * hs;
                        sc[u] = dot_d(q, k, (size_t)hs) / sqrt((double)hs);
                        m = fmax(m, sc[u]);
                    }
                    for (int u = 0; u < T; u++) z += exp(sc[u] - m);
                    assert_true(fabs(l[((size_t)b * NH + h) * T + t] - (m + log(z))) < 1e-5);
                    for (int c = 0; c < hs; c++) {
                        double want = 0;
                        for (int u = 0; u < T; u++)
                            want +=
                                exp(sc[u] - m) / z *
                                qkv[((size_t)b * T + u) * R + C + (size_t)(NKV + h / 2) * hs + c];
                        assert_true(fabs(o[((size_t)b * T + t) * C + (size_t)h * hs + c] - want) <
                                    1e-5);
                    }
                }
    }
    tfree(f, qkv), tfree(f, o), tfree(f, l);
}

/* the backward against central finite differences of the forward, on both kernels */
static void test_attention_fd(void **state) {
    fixture *f = *state;
    int cfg[4][3] = {{2, 2, 1}, {4, 2, 0}, {4, 1, 1}, {3, 3, 0}}; /* NH, NKV, causal */
    int B = 2, T = 9, hs = 4;
    int32_t *doc = ialloc(f, (size_t)B * T);
    int32_t ids[18] = {0, 0, 0, 0, 1, 1, 1, 2, 2, 5, 5, 6, 6, 6, 6, 6, 6, 7};
    memcpy(doc, ids, sizeof ids);
    for (int k = 0; k < 4; k++) {
        ig_attention_shape s = att_shape(B, T, cfg[k][0], cfg[k][1], hs, cfg[k][2]);
        size_t nqkv = att_nqkv(&s), no = att_nout(&s), nl = att_nlse(&s);
        float *qkv = talloc(f, nqkv), *o = talloc(f, no), *lse = talloc(f, nl);
        float *dout = talloc(f, no), *g = talloc(f, nqkv);
        fill(qkv, nqkv, 53, -1, 1);
        fill(dout, no, 54, -1, 1);
        for (int masked = 0; masked < 2; masked++) {
            const int32_t *dd = masked ? doc : NULL;
            for (int fast = 0; fast < 2; fast++) {
                ig_backend *be = fast ? FAST(f) : f->ref;
                ig_kernel_attention_forward(be, o, lse, qkv, dd, &s);
                ig_kernel_attention_backward(be, g, dout, qkv, o, lse, dd, &s);
                double scale = max_abs(g, nqkv);
                for (size_t i = 0; i < nqkv; i++) {
                    float keep = qkv[i];
                    qkv[i] = keep + FD_H;
                    ig_kernel_attention_forward(be, o, lse, qkv, dd, &s);
                    double lp = dot_d(o, dout, no);
                    qkv[i] = keep - FD_H;
                    ig_kernel_attention_forward(be, o, lse, qkv, dd, &s);
                    double lm = dot_d(o, dout, no);
                    qkv[i] = keep;
                    check_fd(g[i], (lp - lm) / (2 * FD_H), scale,
                             fast ? "attention (fast)" : "attention (reference)", i);
                }
            }
        }
        float *all[] = {qkv, o, lse, dout, g};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    }
    tfree(f, doc);
}

/* document masking: each document attends only to itself, as if run alone (causal or not) */
static void attention_documents_case(fixture *f, int NH, int NKV, int hs, int causal) {
    int B = 2, T = 150;
    ig_attention_shape s = att_shape(B, T, NH, NKV, hs, causal);
    size_t nqkv = att_nqkv(&s), no = att_nout(&s), nl = att_nlse(&s);
    size_t C = (size_t)NH * hs, R = C + 2 * (size_t)NKV * hs;
    int32_t *doc = ialloc(f, (size_t)B * T);
    /* sequence 0: documents of 40, 1, 70, 39 tokens; sequence 1: one document */
    for (int t = 0; t < T; t++) doc[t] = t < 40 ? 5 : t < 41 ? 6 : t < 111 ? 7 : 8;
    for (int t = 0; t < T; t++) doc[T + t] = 3;
    float *qkv = talloc(f, nqkv), *o = talloc(f, no), *lse = talloc(f, nl);
    float *o1 = talloc(f, no), *l1 = talloc(f, nl);
    fill(qkv, nqkv, 60, -2, 2);
    ig_kernel_attention_forward(FAST(f), o, lse, qkv, doc, &s);
    ig_kernel_attention_forward(f->ref, o1, l1, qkv, doc, &s);
    check_close(o, o1, no, 1e-5, "attention_forward with documents");
    check_close(lse, l1, nl, 1e-5, "attention_forward with documents lse");
    int starts[5] = {0, 40, 41, 111, 150};
    for (int d = 0; d < 4; d++) {
        int len = starts[d + 1] - starts[d];
        ig_attention_shape sd = att_shape(1, len, NH, NKV, hs, causal);
        float *sq = tdup(f, qkv + (size_t)starts[d] * R, (size_t)len * R);
        float *so = talloc(f, (size_t)len * C), *sl = talloc(f, (size_t)NH * len);
        ig_kernel_attention_forward(FAST(f), so, sl, sq, NULL, &sd);
        check_close(o + (size_t)starts[d] * C, so, (size_t)len * C, 1e-6,
                    "document alone = document masked");
        tfree(f, sq), tfree(f, so), tfree(f, sl);
    }
    /* the unmasked sequence 1 equals attention without doc */
    float *o2 = talloc(f, no), *l2 = talloc(f, nl);
    ig_kernel_attention_forward(FAST(f), o2, l2, qkv, NULL, &s);
    check_same(o + (size_t)T * C, o2 + (size_t)T * C, (size_t)T * C * 4, "one document = none");
    /* and the masked outputs differ from unmasked ones past the first document (or anywhere,
     * without causality) */
    assert_true(fabs(o[(size_t)60 * C] - o2[(size_t)60 * C]) > 1e-6);
    if (!causal) assert_true(fabs(o[0] - o2[0]) > 1e-6);

    /* backward with documents: fast vs reference; no gradient crosses documents */
    float *dout = talloc(f, no), *d1 = talloc(f, nqkv), *d2 = talloc(f, nqkv);
    fill(dout, no, 61, -1, 1);
    ig_kernel_attention_backward(f->ref, d1, dout, qkv, o1, l1, doc, &s);
    ig_kernel_attention_backward(FAST(f), d2, dout, qkv, o, lse, doc, &s);
    check_close(d2, d1, nqkv, 1e-5, "attention_backward with documents");
    memset(dout, 0, no * 4); /* gradient only on document 7's last query */
    for (size_t c = 0; c < C; c++) dout[(size_t)110 * C + c] = 1;
    ig_kernel_attention_backward(FAST(f), d2, dout, qkv, o, lse, doc, &s);
    for (int t = 0; t < T; t++) {
        double m = max_abs(d2 + (size_t)t * R, R);
        if (t < 41 || t > 110) assert_true(m == 0);
        if (!causal && t > 41 && t < 110) assert_true(m > 0); /* later keys of its document */
    }
    float *all[] = {qkv, o, lse, o1, l1, o2, l2, dout, d1, d2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    tfree(f, doc);
}

static void test_attention_documents(void **state) {
    fixture *f = *state;
    attention_documents_case(f, 2, 2, 8, 1);  /* head size 8 */
    attention_documents_case(f, 2, 2, 64, 1); /* head size 64 */
    attention_documents_case(f, 4, 2, 8, 0);  /* grouped-query, non-causal (DiT's frames) */
    attention_documents_case(f, 4, 1, 64, 0);
}

/* the KV-cache form equals the training attention at the same positions */
static void attention_cached_case(fixture *f, int NH, int NKV) {
    int B = 2, T = 100, hs = 64, Tmax = 128;
    ig_attention_shape s = att_shape(B, T, NH, NKV, hs, 1);
    size_t C = (size_t)NH * hs, Ckv = (size_t)NKV * hs, R = C + 2 * Ckv;
    size_t nqkv = att_nqkv(&s), no = att_nout(&s), nkv = (size_t)B * Tmax * Ckv;
    float *qkv = talloc(f, nqkv), *o = talloc(f, no), *lse = talloc(f, att_nlse(&s));
    fill(qkv, nqkv, 70, -2, 2);
    ig_kernel_attention_forward(FAST(f), o, lse, qkv, NULL, &s);
    float *q = talloc(f, no), *k = talloc(f, nkv), *v = talloc(f, nkv);
    for (size_t i = 0; i < nkv; i++) k[i] = v[i] = NAN; /* never read */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *row = qkv + ((size_t)b * T + t) * R;
            memcpy(q + ((size_t)b * T + t) * C, row, C * 4);
            memcpy(k + ((size_t)b * Tmax + t) * Ckv, row + C, Ckv * 4);
            memcpy(v + ((size_t)b * Tmax + t) * Ckv, row + C + Ckv, Ckv * 4);
        }
    int pos0s[4] = {0, 37, 64, 99}, tqs[4] = {100, 30, 36, 1};
    for (int cse = 0; cse < 4; cse++) {
        int pos0 = pos0s[cse], Tq = tqs[cse];
        ig_attention_shape sq = att_shape(B, Tq, NH, NKV, hs, 1);
        float *qq = talloc(f, (size_t)B * Tq * C), *oc = talloc(f, (size_t)B * Tq * C);
        float * or = talloc(f, (size_t)B * Tq * C), *kk = talloc(f, nkv), *vv = talloc(f, nkv);
        for (size_t i = 0; i < nkv; i++) kk[i] = vv[i] = NAN;
        for (int b = 0; b < B; b++) { /* the cache holds positions 0 .. pos0 + Tq - 1 */
            memcpy(qq + (size_t)b * Tq * C, q + ((size_t)b * T + pos0) * C, (size_t)Tq * C * 4);
            memcpy(kk + (size_t)b * Tmax * Ckv, k + (size_t)b * Tmax * Ckv,
                   (size_t)(pos0 + Tq) * Ckv * 4);
            memcpy(vv + (size_t)b * Tmax * Ckv, v + (size_t)b * Tmax * Ckv,
                   (size_t)(pos0 + Tq) * Ckv * 4);
        }
        ig_kernel_attention_cached(FAST(f), oc, qq, kk, vv, pos0, Tmax, &sq);
        ig_kernel_attention_cached(f->ref, or, qq, kk, vv, pos0, Tmax, &sq);
        check_close(oc, or, (size_t)B * Tq * C, 1e-5, "attention_cached vs reference");
        for (int b = 0; b < B; b++)
            check_close(oc + (size_t)b * Tq * C, o + ((size_t)b * T + pos0) * C, (size_t)Tq * C,
                        1e-6, "attention_cached vs attention_forward");
        tfree(f, qq), tfree(f, oc), tfree(f, or), tfree(f, kk), tfree(f, vv);
    }
    float *all[] = {qkv, o, lse, q, k, v};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static void test_attention_cached(void **state) {
    fixture *f = *state;
    attention_cached_case(f, 2, 2); /* multi-head */
    attention_cached_case(f, 4, 2); /* grouped-query */
    attention_cached_case(f, 3, 1); /* multi-query */
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

static void test_crossentropy(void **state) {
    fixture *f = *state;
    int N = 7, V = 1000, Vp = 1024;
    size_t n = (size_t)N * Vp;
    float *logits = talloc(f, n), *l1 = talloc(f, N), *l2 = talloc(f, N), *dl = talloc(f, N);
    int32_t *tg = ialloc(f, N);
    fill(logits, n, 80, -4, 4);
    for (int i = 0; i < N; i++) {
        tg[i] = (i * 131 + 7) % V;
        dl[i] = i == 3 ? 0.0f : 1.0f / N; /* row 3 masked */
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = j % 2 ? NAN : 1e30f;
    }
    logits[V - 1] = 20; /* a confident row, target not the max */
    float *g1 = tdup(f, logits, n), *g2 = tdup(f, logits, n), *keep = tdup(f, logits, n);
    ig_kernel_crossentropy(f->ref, l1, g1, tg, dl, N, V, Vp);
    ig_kernel_crossentropy(FAST(f), l2, g2, tg, dl, N, V, Vp);
    check_close(l2, l1, N, 1e-5, "crossentropy losses");
    check_close(g2, g1, n, 1e-5, "crossentropy gradient");
    for (int i = 0; i < N; i++) {
        for (int j = V; j < Vp; j++) assert_true(g2[(size_t)i * Vp + j] == 0.0f);
        double s = 0; /* softmax - onehot sums to 0 over a row */
        for (int j = 0; j < V; j++) s += g2[(size_t)i * Vp + j];
        assert_true(fabs(s) < 1e-6);
        if (i == 3)
            for (int j = 0; j < Vp; j++) assert_true(g2[(size_t)i * Vp + j] == 0.0f);
        /* the loss by hand */
        double m = -INFINITY, z = 0;
        for (int j = 0; j < V; j++) m = fmax(m, keep[(size_t)i * Vp + j]);
        for (int j = 0; j < V; j++) z += exp(keep[(size_t)i * Vp + j] - m);
        assert_true(fabs(l2[i] - (m + log(z) - keep[(size_t)i * Vp + tg[i]])) < 1e-5);
    }
    /* without dloss: losses only, logits untouched */
    float *g3 = tdup(f, keep, n);
    ig_kernel_crossentropy(FAST(f), l2, g3, tg, NULL, N, V, Vp);
    check_same(g3, keep, n * 4, "crossentropy without dloss leaves the logits");
    check_close(l2, l1, N, 1e-5, "crossentropy losses without dloss");
    for (int t = 0; t < NTHREADS; t++) {
        memcpy(g3, keep, n * 4);
        float *l3 = talloc(f, N);
        ig_kernel_crossentropy(f->fast[t], l3, g3, tg, dl, N, V, Vp);
        check_same(g3, g2, n * 4, "crossentropy threads");
        check_same(l3, l2, (size_t)N * 4, "crossentropy losses threads");
        tfree(f, l3);
    }
    /* finite differences of the loss on a small row set: d loss_i / d logit = gradient / dloss */
    int n2 = 2, v2 = 6, vp2 = 8;
    float *x = talloc(f, (size_t)n2 * vp2), *g = talloc(f, (size_t)n2 * vp2);
    float *ones = talloc(f, n2), *ls = talloc(f, n2);
    int32_t *tg2 = ialloc(f, n2);
    tg2[0] = 1, tg2[1] = 5;
    fill(x, (size_t)n2 * vp2, 81, -2, 2);
    ones[0] = ones[1] = 1;
    memcpy(g, x, (size_t)n2 * vp2 * 4);
    ig_kernel_crossentropy(f->ref, ls, g, tg2, ones, n2, v2, vp2);
    for (int i = 0; i < n2; i++)
        for (int j = 0; j < v2; j++) {
            float *e = x + (size_t)i * vp2 + j, kp = *e;
            *e = kp + FD_H;
            ig_kernel_crossentropy(f->ref, ls, x, tg2, NULL, n2, v2, vp2);
            double lp = (double)ls[0] + ls[1];
            *e = kp - FD_H;
            ig_kernel_crossentropy(f->ref, ls, x, tg2, NULL, n2, v2, vp2);
            double lm = (double)ls[0] + ls[1];
            *e = kp;
            check_fd(g[(size_t)i * vp2 + j], (lp - lm) / (2 * FD_H), 1.0, "crossentropy",
                     (size_t)i * vp2 + j);
        }
    float *all[] = {logits, l1, l2, dl, g1, g2, keep, g3, x, g, ones, ls};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    tfree(f, tg), tfree(f, tg2);
}

/* The vocabulary-parallel cross-entropy: the columns cut into tp slices (the last ones partly or
 * wholly padding), each slice through ce_max / ce_sums / ce_finish with the all-reduces done by
 * hand, gives the fused kernel's losses and gradient; fast and reference agree. */
static void test_crossentropy_parallel(void **state) {
    fixture *f = *state;
    int N = 37, V = 300, Vp = 384;
    size_t n = (size_t)N * Vp;
    float *logits = talloc(f, n), *want_l = talloc(f, N), *dl = talloc(f, N);
    int32_t *tg = ialloc(f, N);
    fill(logits, n, 90, -4, 4);
    for (int i = 0; i < N; i++) {
        tg[i] = (i * 97 + 11) % V;
        dl[i] = i == 5 ? 0.0f : 1.0f / N;
    }
    float *want_g = tdup(f, logits, n);
    ig_kernel_crossentropy(f->ref, want_l, want_g, tg, dl, N, V, Vp);
    int tps[] = {2, 3, 4, 6};
    for (size_t k = 0; k < sizeof tps / sizeof *tps; k++) {
        for (int fast = 0; fast < 2; fast++) {
            ig_backend *be = fast ? FAST(f) : f->ref;
            int tp = tps[k], Vl = Vp / tp;
            float *slice[6], *mx[6], *st[6], *loss = talloc(f, N);
            int32_t *lt[6];
            float *gmax = talloc(f, N), *gst = talloc(f, 2 * (size_t)N);
            for (int c = 0; c < N; c++) gmax[c] = -INFINITY;
            for (int r = 0; r < tp; r++) {
                int v0 = r * Vl, valid = V - v0 < 0 ? 0 : (V - v0 > Vl ? Vl : V - v0);
                slice[r] = talloc(f, (size_t)N * Vl), mx[r] = talloc(f, N);
                st[r] = talloc(f, 2 * (size_t)N), lt[r] = ialloc(f, N);
                for (int i = 0; i < N; i++) {
                    memcpy(slice[r] + (size_t)i * Vl, logits + (size_t)i * Vp + v0, (size_t)Vl * 4);
                    lt[r][i] = tg[i] >= v0 && tg[i] < v0 + Vl ? tg[i] - v0 : -1;
                }
                ig_kernel_ce_max(be, mx[r], slice[r], N, valid, Vl);
                for (int i = 0; i < N; i++) gmax[i] = fmaxf(gmax[i], mx[r][i]);
            }
            for (int r = 0; r < tp; r++) {
                int v0 = r * Vl, valid = V - v0 < 0 ? 0 : (V - v0 > Vl ? Vl : V - v0);
                ig_kernel_ce_sums(be, st[r], slice[r], gmax, lt[r], N, valid, Vl);
                for (int i = 0; i < 2 * N; i++) gst[i] = (r ? gst[i] : 0.0f) + st[r][i];
            }
            for (int r = 0; r < tp; r++) {
                int v0 = r * Vl, valid = V - v0 < 0 ? 0 : (V - v0 > Vl ? Vl : V - v0);
                ig_kernel_ce_finish(be, loss, slice[r], gmax, gst, lt[r], dl, N, valid, Vl);
                check_close(loss, want_l, N, 1e-5, "parallel crossentropy losses");
                for (int i = 0; i < N; i++)
                    check_close(slice[r] + (size_t)i * Vl, want_g + (size_t)i * Vp + v0, Vl, 1e-5,
                                "parallel crossentropy gradient");
                tfree(f, slice[r]), tfree(f, mx[r]), tfree(f, st[r]), tfree(f, lt[r]);
            }
            tfree(f, loss), tfree(f, gmax), tfree(f, gst);
        }
    }
    tfree(f, logits), tfree(f, want_l), tfree(f, dl), tfree(f, tg), tfree(f, want_g);
}

/* The vocabulary-parallel embedding: token ids shifted into each rank's slice (-1 elsewhere), the
 * positions on one rank only; the slices' outputs add up to the full embedding and the slices'
 * gradients are the full gradient's rows. ig_kernel_add adds. */
static void test_encoder_parallel(void **state) {
    fixture *f = *state;
    int B = 3, T = 17, C = 40, V = 96, tp = 3, Vl = V / tp;
    size_t N = (size_t)B * T;
    float *wte = talloc(f, (size_t)V * C), *wpe = talloc(f, (size_t)T * C);
    float *dout = talloc(f, N * C), *want = talloc(f, N * C);
    float *dwte = talloc(f, (size_t)V * C), *dwpe = talloc(f, (size_t)T * C);
    int32_t *tok = ialloc(f, N), *lt = ialloc(f, N);
    fill(wte, (size_t)V * C, 95, -1, 1), fill(wpe, (size_t)T * C, 96, -1, 1);
    fill(dout, N * C, 97, -1, 1);
    for (size_t i = 0; i < N; i++) tok[i] = (int32_t)((i * 37 + 5) % (size_t)V);
    tok[4] = tok[9] = tok[30]; /* a token several times */
    ig_kernel_encoder_forward(f->ref, want, tok, wte, wpe, B, T, C);
    ig_kernel_encoder_backward(f->ref, dwte, dwpe, dout, tok, B, T, C);
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        float *sum = talloc(f, N * C), *part = talloc(f, N * C);
        float *pw = talloc(f, (size_t)Vl * C), *pdw = talloc(f, (size_t)Vl * C);
        float *pdp = talloc(f, (size_t)T * C);
        for (int r = 0; r < tp; r++) {
            for (size_t i = 0; i < N; i++)
                lt[i] = tok[i] >= r * Vl && tok[i] < (r + 1) * Vl ? tok[i] - r * Vl : -1;
            memcpy(pw, wte + (size_t)r * Vl * C, (size_t)Vl * C * 4);
            ig_kernel_encoder_forward(be, part, lt, pw, r == 0 ? wpe : NULL, B, T, C);
            if (r == 0)
                memcpy(sum, part, N * C * 4);
            else
                ig_kernel_add(be, sum, sum, part, N * C);
            memset(pdw, 0, (size_t)Vl * C * 4), memset(pdp, 0, (size_t)T * C * 4);
            ig_kernel_encoder_backward(be, pdw, pdp, dout, lt, B, T, C);
            check_same(pdw, dwte + (size_t)r * Vl * C, (size_t)Vl * C * 4,
                       "embedding slice gradient");
            check_same(pdp, dwpe, (size_t)T * C * 4, "position gradient on every slice");
        }
        check_close(sum, want, N * C, 1e-6, "embedding slices add up");
        tfree(f, sum), tfree(f, part), tfree(f, pw), tfree(f, pdw), tfree(f, pdp);
    }
    float *all[] = {wte, wpe, dout, want, dwte, dwpe};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    tfree(f, tok), tfree(f, lt);
}

/* ---- optimizer ------------------------------------------------------------------------------- */

#include "tests/data/golden/kernels/adamw_golden.h"

static void adamw_golden_case(fixture *f, ig_backend *be, float wd, const float *gp,
                              const float *gm, const float *gv, int use_master) {
    int n = ADAMW_GOLDEN_N;
    float *p = tdup(f, adamw_golden_p0, n), *m = talloc(f, n), *v = talloc(f, n);
    float *master = use_master ? tdup(f, adamw_golden_p0, n) : NULL;
    for (int s = 0; s < ADAMW_GOLDEN_STEPS; s++) {
        float *g = tdup(f, adamw_golden_grads + (size_t)s * n, n);
        ig_kernel_adamw(be, p, master, g, m, v, (size_t)n, ADAMW_GOLDEN_LR, ADAMW_GOLDEN_B1,
                        ADAMW_GOLDEN_B2, ADAMW_GOLDEN_EPS, wd, ADAMW_GOLDEN_SCALE, s + 1);
        char what[96];
        snprintf(what, sizeof what, "adamw vs torch (%s, wd %g, step %d%s)", ig_backend_name(be),
                 wd, s + 1, use_master ? ", master" : "");
        check_close(p, gp + (size_t)s * n, n, 2e-6, what);
        check_close(m, gm + (size_t)s * n, n, 2e-6, what);
        check_close(v, gv + (size_t)s * n, n, 2e-6, what);
        if (master) check_same(master, p, (size_t)n * 4, "adamw master = params");
        tfree(f, g);
    }
    tfree(f, p), tfree(f, m), tfree(f, v), tfree(f, master);
}

static void test_adamw(void **state) {
    fixture *f = *state;
    for (int fast = 0; fast < 2; fast++) {
        ig_backend *be = fast ? FAST(f) : f->ref;
        adamw_golden_case(f, be, ADAMW_GOLDEN_WD_WD, adamw_golden_wd_p, adamw_golden_wd_m,
                          adamw_golden_wd_v, 0);
        adamw_golden_case(f, be, ADAMW_GOLDEN_WD_NOWD, adamw_golden_nowd_p, adamw_golden_nowd_m,
                          adamw_golden_nowd_v, 0);
        adamw_golden_case(f, be, ADAMW_GOLDEN_WD_WD, adamw_golden_wd_p, adamw_golden_wd_m,
                          adamw_golden_wd_v, 1);
    }
    /* one step by hand: m = 0.1 g, v = 0.001 g^2, so m^ / sqrt(v^) = sign(g) */
    float *p = talloc(f, 2), *g = talloc(f, 2), *m = talloc(f, 2), *v = talloc(f, 2);
    p[0] = 1, p[1] = -2, g[0] = 4, g[1] = -0.25f;
    ig_kernel_adamw(FAST(f), p, NULL, g, m, v, 2, 0.1f, 0.9f, 0.999f, 0.0f, 0.5f, 1.0f, 1);
    assert_true(fabs(p[0] - (1 * (1 - 0.05) - 0.1)) < 1e-6);
    assert_true(fabs(p[1] - (-2 * (1 - 0.05) + 0.1)) < 1e-6);

    /* fast vs reference on many elements, and the same bits on any thread count */
    size_t n = 100003;
    float *p1 = talloc(f, n), *g1 = talloc(f, n), *m1 = talloc(f, n), *v1 = talloc(f, n);
    fill(p1, n, 90, -1, 1), fill(g1, n, 91, -3, 3), fill(m1, n, 92, -0.1f, 0.1f);
    fill(v1, n, 93, 0, 0.01f);
    float *p2 = tdup(f, p1, n), *m2 = tdup(f, m1, n), *v2 = tdup(f, v1, n);
    float *p0 = tdup(f, p1, n), *m0 = tdup(f, m1, n), *v0 = tdup(f, v1, n);
    ig_kernel_adamw(f->ref, p1, NULL, g1, m1, v1, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 7);
    ig_kernel_adamw(FAST(f), p2, NULL, g1, m2, v2, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 7);
    check_close(p2, p1, n, 1e-6, "adamw fast vs reference p");
    check_close(m2, m1, n, 1e-6, "adamw fast vs reference m");
    check_close(v2, v1, n, 1e-6, "adamw fast vs reference v");
    for (int t = 0; t < NTHREADS; t++) {
        float *p3 = tdup(f, p0, n), *m3 = tdup(f, m0, n), *v3 = tdup(f, v0, n);
        ig_kernel_adamw(f->fast[t], p3, NULL, g1, m3, v3, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f,
                        7);
        check_same(p3, p2, n * 4, "adamw threads");
        check_same(v3, v2, n * 4, "adamw threads");
        tfree(f, p3), tfree(f, m3), tfree(f, v3);
    }
    float *all[] = {p, g, m, v, p1, g1, m1, v1, p2, m2, v2, p0, m0, v0};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
}

static void test_sum_squares_scale(void **state) {
    fixture *f = *state;
    size_t n = 300001; /* five chunks of 64 Ki and a ragged one */
    float *x = talloc(f, n);
    fill(x, n, 100, -1, 1);
    double r = ig_kernel_sum_squares(f->ref, x, n);
    double s = ig_kernel_sum_squares(FAST(f), x, n);
    assert_true(fabs(s - r) <= 1e-12 * r);
    assert_true(fabs(r - (double)n / 3) < 0.01 * n); /* E[x^2] = 1/3 */
    for (int t = 0; t < NTHREADS; t++) {
        double u = ig_kernel_sum_squares(f->fast[t], x, n);
        assert_memory_equal(&u, &s, sizeof u);
    }
    assert_true(ig_kernel_sum_squares(FAST(f), x, 0) == 0.0);
    float three[3] = {1, 2, 3};
    float *y = tdup(f, three, 3);
    assert_true(ig_kernel_sum_squares(FAST(f), y, 3) == 14.0);
    float *x1 = tdup(f, x, n), *x2 = tdup(f, x, n);
    ig_kernel_scale(f->ref, x1, n, 0.37f);
    for (int t = 0; t < NTHREADS; t++) {
        memcpy(x2, x, n * 4);
        ig_kernel_scale(f->fast[t], x2, n, 0.37f);
        check_same(x2, x1, n * 4, "scale");
    }
    assert_true(x1[5] == x[5] * 0.37f);
    tfree(f, x), tfree(f, y), tfree(f, x1), tfree(f, x2);
}

/* the row kernels give the same bits on 1, 2, 3 and 8 threads */
static void test_determinism_rows(void **state) {
    fixture *f = *state;
    int N = 300, C = 77, B = 4, T = 75, V = 50;
    size_t n = (size_t)N * C;
    float *x = talloc(f, n), *a = talloc(f, n), *w = talloc(f, C), *b = talloc(f, C);
    float *dout = talloc(f, n), *wte = talloc(f, (size_t)V * C), *wpe = talloc(f, (size_t)T * C);
    int32_t *tok = ialloc(f, n);
    fill(x, n, 110, -2, 2), fill(a, n, 111, -1, 1), fill(w, C, 112, 0, 2), fill(b, C, 113, -1, 1);
    fill(dout, n, 114, -1, 1), fill(wte, (size_t)V * C, 115, -1, 1);
    fill(wpe, (size_t)T * C, 116, -1, 1);
    for (int i = 0; i < B * T; i++) tok[i] = (i * i + 3) % V;
    float *want[7] = {0};
    for (int t = 0; t < NTHREADS; t++) {
        ig_backend *be = f->fast[t];
        float *o = talloc(f, n), *mu = talloc(f, N), *rs = talloc(f, N), *res = talloc(f, n);
        float *di = talloc(f, n), *dw = talloc(f, C), *db = talloc(f, C);
        float *eo = talloc(f, (size_t)B * T * C);
        ig_kernel_residual_layernorm_forward(be, res, o, mu, rs, x, a, w, b, N, C, 1e-5f);
        ig_kernel_layernorm_backward(be, di, dw, db, dout, res, w, mu, rs, N, C);
        ig_kernel_encoder_forward(be, eo, tok, wte, wpe, B, T, C);
        float *got[7] = {o, mu, rs, di, dw, db, eo};
        size_t sizes[7] = {n, (size_t)N, (size_t)N, n, (size_t)C, (size_t)C, (size_t)B * T * C};
        for (int k = 0; k < 7; k++) {
            if (t == 0)
                want[k] = got[k];
            else {
                check_same(got[k], want[k], sizes[k] * 4, "layernorm/encoder threads");
                tfree(f, got[k]);
            }
        }
        tfree(f, res);
    }
    for (int k = 0; k < 7; k++) tfree(f, want[k]);
    float *all[] = {x, a, w, b, dout, wte, wpe};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) tfree(f, all[i]);
    tfree(f, tok);
}

/* Signals during GEMMs: a timer interrupts the calling thread every 200 us while matmuls run, and
 * the handler checks that it runs on the thread's stack. oneDNN 2.7's JIT kernels point the stack
 * pointer into their heap workspace, so a signal delivered meanwhile wrote its frame into the heap
 * (`ingot train` stopped by Ctrl-C aborted in free() one time in three) until cpu_gemm.c blocked
 * signals around the call; now every handler runs on the stack and the results stay exact. */
static volatile sig_atomic_t timer_hits, stray_frames;
static uintptr_t stack_lo, stack_hi;

static void on_timer(int sig) {
    (void)sig;
    volatile char here = 0;
    uintptr_t a = (uintptr_t)&here;
    timer_hits++;
    if (a < stack_lo || a >= stack_hi) stray_frames++;
}

static void test_matmul_under_signals(void **state) {
    fixture *f = *state;
    pthread_attr_t attr;
    void *base;
    size_t size;
    assert_int_equal(pthread_getattr_np(pthread_self(), &attr), 0);
    assert_int_equal(pthread_attr_getstack(&attr, &base, &size), 0);
    pthread_attr_destroy(&attr);
    stack_lo = (uintptr_t)base, stack_hi = (uintptr_t)base + size;

    int N = 512, C = 384, OC = 384;
    float *inp = talloc(f, (size_t)N * C), *w = talloc(f, (size_t)C * OC);
    float *want = talloc(f, (size_t)N * OC), *got = talloc(f, (size_t)N * OC);
    fill(inp, (size_t)N * C, 120, -1, 1), fill(w, (size_t)C * OC, 121, -1, 1);
    ig_backend *be = f->fast[0]; /* one thread: every GEMM runs on the signalled thread */
    ig_kernel_matmul_forward(be, want, inp, w, IG_W_IN_OUT, NULL, N, C, OC);
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_timer;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGALRM, &sa, &old_sa), 0);
    struct itimerval it = {{0, 200}, {0, 200}}, off = {{0, 0}, {0, 0}};
    timer_hits = stray_frames = 0;
    assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
    int differ = 0;
    for (int rep = 0; rep < 100; rep++) {
        ig_kernel_matmul_forward(be, got, inp, w, IG_W_IN_OUT, NULL, N, C, OC);
        differ += memcmp(got, want, (size_t)N * OC * sizeof(float)) != 0;
    }
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old_sa, NULL);
    assert_int_equal(stray_frames, 0);
    assert_int_equal(differ, 0);
    assert_true(timer_hits > 10); /* the signals did arrive (between the calls) */
    tfree(f, inp), tfree(f, w), tfree(f, want), tfree(f, got);
}

/* The host side of the accelerator backends (backend_host.c): bf16 rounding, the device
 * out-of-memory message, the attention path's setting. */
static void test_backend_host(void **state) {
    (void)state;
    /* round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 and goes to 1 (even);
     * 1 + 3 * 2^-8 is a tie between 1 + 2^-7 and 1 + 2^-6 and goes up */
    assert_int_equal(ig_backend_bf16_from_f32(1.0f), 0x3f80);
    assert_int_equal(ig_backend_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(ig_backend_bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_int_equal(ig_backend_bf16_from_f32(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(ig_backend_bf16_from_f32(-2.0f), 0xc000);
    assert_int_equal(ig_backend_bf16_from_f32(INFINITY), 0x7f80);
    assert_int_equal(ig_backend_bf16_from_f32(3.4e38f), 0x7f80); /* rounds past the largest */
    /* every NaN (either sign, quiet or signalling) is PyTorch's quiet NaN, as on the device */
    uint32_t nans[4] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u};
    for (int i = 0; i < 4; i++) {
        float x;
        memcpy(&x, &nans[i], sizeof x);
        assert_int_equal(ig_backend_bf16_from_f32(x), 0x7fc0);
    }
    assert_true(isnan(ig_backend_bf16_to_f32(0x7fc0)));
    for (int i = 0; i < 1000; i++) { /* bf16 -> fp32 -> bf16 is the identity on finite values */
        uint16_t h = (uint16_t)(i * 61 + 7);
        if ((h & 0x7f80) == 0x7f80) continue; /* infinities and NaNs */
        assert_int_equal(ig_backend_bf16_from_f32(ig_backend_bf16_to_f32(h)), h);
    }
    float x[3] = {0.1f, -3.5f, 1e-3f}, y[3];
    uint16_t hb[3];
    ig_backend_bf16_from_f32_n(hb, x, 3);
    ig_backend_bf16_to_f32_n(y, hb, 3);
    for (int i = 0; i < 3; i++) assert_true(fabsf(y[i] - x[i]) <= fabsf(x[i]) * 0x1p-9f);

    ig_err err = {0};
    assert_int_equal(ig_device_nomem(&err, "cuda", "activations", (size_t)3 << 30, (size_t)1 << 30,
                                     (size_t)80 << 30, "out of memory"),
                     IG_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "3221225472 bytes"));
    assert_non_null(strstr(err.msg, "activations"));
    assert_non_null(strstr(err.msg, "free of"));
    assert_int_equal(ig_device_nomem(&err, "cuda", "x", 10, 0, 0, NULL), IG_ERR_NOMEM);
    assert_null(strstr(err.msg, "free of"));

    int ok = 0;
    assert_int_equal(ig_attention_path_from_env(NULL, &ok), IG_ATTENTION_FUSED);
    assert_true(ok);
    assert_int_equal(ig_attention_path_from_env("gemm", &ok), IG_ATTENTION_GEMM);
    assert_true(ok);
    assert_int_equal(ig_attention_path_from_env("fused", &ok), IG_ATTENTION_FUSED);
    assert_true(ok);
    ig_attention_path_from_env("flash", &ok);
    assert_false(ok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_basics),
        cmocka_unit_test(test_backend_table),
        cmocka_unit_test(test_backend_nomem),
        cmocka_unit_test(test_backend_memory),
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_fd),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_gqa),
        cmocka_unit_test(test_attention_noncausal),
        cmocka_unit_test(test_attention_fd),
        cmocka_unit_test(test_attention_documents),
        cmocka_unit_test(test_attention_cached),
        cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_crossentropy_parallel),
        cmocka_unit_test(test_encoder_parallel),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sum_squares_scale),
        cmocka_unit_test(test_determinism_rows),
        cmocka_unit_test(test_matmul_under_signals),
        cmocka_unit_test(test_backend_host),
    };
    return cmocka_run_group_tests_name("kernels", tests, setup, teardown);
}
