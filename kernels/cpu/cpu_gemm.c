/* cpu_gemm.c - the one door to the GEMM library: oneDNN's sgemm (libdnnl), row-major, and its bf16
 * GEMM (bf16 operands, fp32 accumulation and output) through the matmul primitive.
 *
 * Why oneDNN: at the trainer's shapes (GPT-2 small, N = 4 x 64 and 4 x 256 rows, 2 threads) it
 * ran at about 2x OpenBLAS 0.3.21 and 5-20x BLIS 0.9 on the development machine, whose OpenBLAS
 * must run its Haswell (AVX2) kernels (OPENBLAS_CORETYPE) while oneDNN picks AVX-512 itself
 * (tools/bench/bench_kernels measures all three in one run). OpenBLAS with its own threads also
 * gave different bits on 1 and 2 threads.
 *
 * Threads: the library is always called with one thread, from the chunks of the context's pool
 * (cpu_matmul.c cuts every GEMM into chunks that depend on its sizes only), so the result is the
 * same for any thread count and the pool is the only place threads come from. oneDNN threads
 * through OpenMP, whose thread count (nthreads-var) is a per-thread setting: each call sets it to
 * 1 for the calling thread and puts the old value back, so nothing process-wide is changed and
 * another user of OpenMP in the process is not affected.
 *
 * Signals: oneDNN's JIT GEMM kernels (2.7, Debian 12's) point the stack pointer at their heap
 * workspace while they run (upstream oneDNN issue 4845, fixed in 2026), so a signal delivered to
 * the thread at that moment writes its frame into the heap: `ingot train` stopped by Ctrl-C died
 * with "corrupted size vs. prev_size" about one time in three. Every call therefore runs with the
 * asynchronous signals blocked; one that arrives meanwhile is delivered when the call returns
 * (tests/test_kernels.c sends a stream of signals at GEMMs). Two sigprocmask calls per GEMM chunk
 * cost well under 1% of a chunk's time. ig_cpu_dnnl_enter / ig_cpu_dnnl_leave are that frame,
 * around the sgemm, the bf16 GEMM and the convolutions' primitives alike.
 *
 * bf16: oneDNN 2.6's C API has no bf16 gemm function, so the bf16 GEMM is its matmul primitive
 * (bf16 source and weights, fp32 destination, described by strides so that a transposed operand
 * is read in place). A primitive is made for one shape, strides and beta, on the thread that
 * drives the backend and inside the frame (one OpenMP thread: a primitive fixes its thread count
 * and its split of the work when it is made, so a shape always gives the same bits), and kept in
 * the backend's state (ig_cpu_impl) like the convolutions'; its scratchpad is the caller's, which
 * lets the chunks of a call run one primitive on several threads at once. beta 1 is the
 * primitive's sum post-op (C = A B + C in fp32).
 */
#include <signal.h>
#include <stdio.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <oneapi/dnnl/dnnl.h>

#include "cpu_internal.h"

/* libgomp's, which libdnnl is linked against (declared here rather than through <omp.h>, which
 * another compiler would map to its own OpenMP runtime) */
extern int omp_get_max_threads(void);
extern void omp_set_num_threads(int n);

int ig_cpu_sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                 int ldb, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return 0;
    if (K <= 0) { /* C = beta * C: no library call for an empty sum */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta ? beta * C[(size_t)i * ldc + j] : 0;
        return 0;
    }
    ig_cpu_dnnl_frame f;
    ig_cpu_dnnl_enter(&f);
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    ig_cpu_dnnl_leave(&f);
    return st == dnnl_success ? 0 : -1;
}

/* The frame around every call into oneDNN: one OpenMP thread for the calling thread, the
 * asynchronous signals blocked (the JIT kernels of the primitives are the GEMM's kin). */
void ig_cpu_dnnl_enter(ig_cpu_dnnl_frame *f) {
    sigset_t block;
    sigfillset(&block);
    sigdelset(&block, SIGSEGV);
    sigdelset(&block, SIGBUS);
    sigdelset(&block, SIGFPE);
    sigdelset(&block, SIGILL);
    pthread_sigmask(SIG_BLOCK, &block, &f->old);
    f->threads = omp_get_max_threads();
    if (f->threads != 1) omp_set_num_threads(1);
}

void ig_cpu_dnnl_leave(ig_cpu_dnnl_frame *f) {
    if (f->threads != 1) omp_set_num_threads(f->threads);
    pthread_sigmask(SIG_SETMASK, &f->old, NULL);
}

const char *ig_cpu_gemm_library(char *buf, size_t cap) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, cap, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
    return buf;
}

/* ---- bf16: the matmul primitive, kept by shape ---------------------------------------------- */

/* Plans kept, the least recently used going first (a matmul call holds at most 4 at once: its
 * tiles' shapes). */
#define BF16_CACHE 32

enum { K_TA, K_TB, K_M, K_N, K_K, K_LDA, K_LDB, K_LDC, K_BETA, K_COUNT };

struct ig_cpu_gemm_bf16_plan {
    int key[K_COUNT]; /* K_M == 0: an empty entry */
    dnnl_engine_t engine;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    const dnnl_memory_desc_t *md_a, *md_b, *md_c, *md_pad; /* the pd's */
    size_t scratchpad;                                     /* bytes */
    uint64_t used;
};

struct ig_cpu_gemm_cache {
    dnnl_engine_t engine;
    ig_cpu_gemm_bf16_plan e[BF16_CACHE];
    uint64_t tick;
};

static void plan_clear(ig_cpu_gemm_bf16_plan *p) {
    if (p->prim) dnnl_primitive_destroy(p->prim);
    if (p->pd) dnnl_primitive_desc_destroy(p->pd);
    memset(p, 0, sizeof *p);
}

void ig_cpu_gemm_cache_free(ig_backend *be) {
    ig_cpu_impl *impl = be->impl;
    if (!impl || !impl->gemm) return;
    for (int i = 0; i < BF16_CACHE; i++) plan_clear(&impl->gemm->e[i]);
    if (impl->gemm->engine) dnnl_engine_destroy(impl->gemm->engine);
    ig_free(be->ctx, impl->gemm);
    impl->gemm = NULL;
}

/* The primitive for p->key: C[M, N] (fp32, row stride ldc) = op(A) op(B) (+ C), A and B bf16. */
static dnnl_status_t plan_make(ig_cpu_gemm_bf16_plan *p) {
    const int *k = p->key;
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t da = {k[K_M], k[K_K]}, db = {k[K_K], k[K_N]}, dc = {k[K_M], k[K_N]};
    dnnl_dims_t sa = {k[K_LDA], 1}, sb = {k[K_LDB], 1}, sc = {k[K_LDC], 1};
    if (k[K_TA]) sa[0] = 1, sa[1] = k[K_LDA]; /* A stored [K, M] */
    if (k[K_TB]) sb[0] = 1, sb[1] = k[K_LDB]; /* B stored [N, K] */
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb);
    if (st == dnnl_success) st = dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc);
    dnnl_matmul_desc_t md;
    if (st == dnnl_success) st = dnnl_matmul_desc_init(&md, &a, &b, NULL, &c);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (st == dnnl_success) st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && k[K_BETA]) {
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(po, 1.0f);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&p->pd, &md, attr, p->engine, NULL);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (st == dnnl_success) st = dnnl_primitive_create(&p->prim, p->pd);
    if (st != dnnl_success) return st;
    p->md_a = dnnl_primitive_desc_query_md(p->pd, dnnl_query_src_md, 0);
    p->md_b = dnnl_primitive_desc_query_md(p->pd, dnnl_query_weights_md, 0);
    p->md_c = dnnl_primitive_desc_query_md(p->pd, dnnl_query_dst_md, 0);
    p->md_pad = dnnl_primitive_desc_query_md(p->pd, dnnl_query_scratchpad_md, 0);
    p->scratchpad = dnnl_memory_desc_get_size(p->md_pad);
    return dnnl_success;
}

const ig_cpu_gemm_bf16_plan *ig_cpu_gemm_bf16_prepare(ig_backend *be, int ta, int tb, int M, int N,
                                                      int K, int lda, int ldb, int ldc, int beta,
                                                      const char *what) {
    ig_cpu_impl *impl = be->impl;
    if (!impl) {
        ig_backend_raise(be, IG_ERR_UNSUPPORTED,
                         "%s: the bf16 GEMM needs the fast CPU backend (not the reference one)",
                         what);
        return NULL;
    }
    if (M <= 0 || N <= 0 || K <= 0) {
        ig_backend_raise(be, IG_ERR_INTERNAL, "%s: a bf16 GEMM of %dx%dx%d was asked for", what, M,
                         N, K);
        return NULL;
    }
    ig_cpu_dnnl_frame f;
    ig_cpu_dnnl_enter(&f);
    ig_cpu_gemm_bf16_plan *found = NULL;
    struct ig_cpu_gemm_cache *c = impl->gemm;
    if (!c) {
        c = ig_calloc(be->ctx, 1, sizeof *c);
        if (!c) {
            ig_backend_raise(be, IG_ERR_NOMEM, "%s: out of memory for the bf16 GEMM's cache", what);
            goto done;
        }
        if (dnnl_engine_create(&c->engine, dnnl_cpu, 0) != dnnl_success) {
            ig_free(be->ctx, c);
            ig_backend_raise(be, IG_ERR_INTERNAL, "%s: oneDNN could not create its CPU engine",
                             what);
            goto done;
        }
        impl->gemm = c;
    }
    int key[K_COUNT] = {!!ta, !!tb, M, N, K, lda, ldb, ldc, !!beta};
    ig_cpu_gemm_bf16_plan *victim = &c->e[0];
    for (int i = 0; i < BF16_CACHE; i++) {
        ig_cpu_gemm_bf16_plan *p = &c->e[i];
        if (p->key[K_M] && !memcmp(p->key, key, sizeof key)) {
            p->used = ++c->tick;
            found = p;
            goto done;
        }
        if (!p->key[K_M] || p->used < victim->used) victim = p;
    }
    plan_clear(victim);
    memcpy(victim->key, key, sizeof key);
    victim->engine = c->engine;
    dnnl_status_t st = plan_make(victim);
    if (st != dnnl_success) {
        plan_clear(victim);
        ig_backend_raise(be, IG_ERR_INTERNAL,
                         "%s: oneDNN could not make a bf16 matmul of %dx%dx%d (ta %d, tb %d, beta "
                         "%d): status %d; does the CPU have AVX-512?",
                         what, M, N, K, !!ta, !!tb, !!beta, (int)st);
        goto done;
    }
    victim->used = ++c->tick;
    found = victim;
done:
    ig_cpu_dnnl_leave(&f);
    return found;
}

size_t ig_cpu_gemm_bf16_scratchpad(const ig_cpu_gemm_bf16_plan *p) {
    return p->scratchpad;
}

const char *ig_cpu_gemm_bf16_impl(const ig_cpu_gemm_bf16_plan *p) {
    const char *s = NULL;
    if (dnnl_primitive_desc_query(p->pd, dnnl_query_impl_info_str, 0, &s) != dnnl_success || !s)
        return "?";
    return s;
}

int ig_cpu_gemm_bf16(const ig_cpu_gemm_bf16_plan *p, const uint16_t *A, const uint16_t *B, float *C,
                     void *scratchpad) {
    ig_cpu_dnnl_frame f;
    ig_cpu_dnnl_enter(&f);
    dnnl_memory_t mem[4] = {0};
    dnnl_exec_arg_t args[4];
    const dnnl_memory_desc_t *mds[4] = {p->md_a, p->md_b, p->md_c, p->md_pad};
    int ids[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    void *ptrs[4] = {(void *)A, (void *)B, C, scratchpad};
    int n = p->scratchpad ? 4 : 3, ok = 1;
    for (int i = 0; i < n && ok; i++) {
        ok = dnnl_memory_create(&mem[i], mds[i], p->engine, ptrs[i]) == dnnl_success;
        args[i].arg = ids[i], args[i].memory = mem[i];
    }
    dnnl_stream_t stream = NULL;
    if (ok) ok = dnnl_stream_create(&stream, p->engine, dnnl_stream_default_flags) == dnnl_success;
    if (ok) ok = dnnl_primitive_execute(p->prim, stream, n, args) == dnnl_success;
    if (ok) ok = dnnl_stream_wait(stream) == dnnl_success;
    if (stream) dnnl_stream_destroy(stream);
    for (int i = 0; i < n; i++)
        if (mem[i]) dnnl_memory_destroy(mem[i]);
    ig_cpu_dnnl_leave(&f);
    return ok ? 0 : -1;
}

/* ---- the CPU's bf16 instructions ------------------------------------------------------------- */

#if defined(__x86_64__) && defined(__GNUC__)
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

int ig_cpu_has_bf16(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0xE6) != 0xE6) return 0; /* the OS saves SSE, AVX and the AVX-512 state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 16))) return 0; /* AVX512F */
    int amx = (d & (1u << 22)) && (d & (1u << 24)) && (xcr0 & 0x60000) == 0x60000;
    unsigned a1 = 0, b1, c1, d1;
    int avx512_bf16 = a >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) && (a1 & (1u << 5));
    return avx512_bf16 || amx;
}
#else
int ig_cpu_has_bf16(void) {
    return 0;
}
#endif
