/* cpu_gemm.c - the one door to the GEMM library: oneDNN's sgemm (libdnnl), row-major.
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
 * cost well under 1% of a chunk's time.
 */
#include <signal.h>
#include <stdio.h>

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
    sigset_t block, old;
    sigfillset(&block);
    /* faults raised by the call itself cannot wait: they stay deliverable (and are fatal) */
    sigdelset(&block, SIGSEGV);
    sigdelset(&block, SIGBUS);
    sigdelset(&block, SIGFPE);
    sigdelset(&block, SIGILL);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int prev = omp_get_max_threads();
    if (prev != 1) omp_set_num_threads(1);
    dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    if (prev != 1) omp_set_num_threads(prev);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return st == dnnl_success ? 0 : -1;
}

/* The same frame for oneDNN's primitives (cpu_conv.c): one OpenMP thread for the calling thread,
 * the asynchronous signals blocked (the JIT kernels of the convolutions are the GEMM's kin). */
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
