/* device.cu - what the CUDA module loaded, in words: the CUDA runtime it carries (linked
 * statically), and the versions of the cuBLASLt and cuDNN that the loader found for it
 * (`ingot version --cuda`). The device itself is the driver's answer, asked by the program
 * without the module (kernels/cudahost/cuda_host.c), so that `ingot --version` stays fast. */
#include <stdio.h>

#include "cuda_internal.h"

#ifdef IG_HAVE_CUDNN
#include <cudnn.h>
#endif

/* MAJOR.MINOR.PATCH of a version number written as MAJOR * 10000 + MINOR * 100 + PATCH (the form
 * of cublasLtGetVersion and cudnnGetVersion since cuDNN 9). */
static void triple(char *buf, size_t cap, size_t v) {
    snprintf(buf, cap, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
}

void cu_describe_libraries(char *buf, size_t cap) {
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    char lt[32], dnn[32] = "not in this build";
    triple(lt, sizeof lt, cublasLtGetVersion());
#ifdef IG_HAVE_CUDNN
    triple(dnn, sizeof dnn, cudnnGetVersion());
#endif
    snprintf(buf, cap, "CUDA runtime %d.%d (static), cuBLASLt %s, cuDNN %s", rt / 1000,
             rt % 1000 / 10, lt, dnn);
}
