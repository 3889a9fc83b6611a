/* cuda_absent.c - the CUDA backend's entry points in a build without nvcc: they answer that
 * there is no CUDA, so nothing else needs to know how ingot was built. */
#include "../backend.h"

#include <string.h>

#include "../backend_internal.h"

void ig_cuda_query(ig_cuda_info *out) {
    memset(out, 0, sizeof *out);
}

ig_status ig_cuda_backend_create(ig_backend *be, ig_err *err) {
    (void)be;
    return ig_err_set(err, IG_ERR_UNSUPPORTED,
                      "the CUDA backend is not in this build (nvcc was not found when ingot was "
                      "configured); use the CPU backend, or install the CUDA Toolkit and "
                      "reconfigure");
}

ig_status ig_cuda_load(char *buf, size_t cap, ig_err *err) {
    if (cap) buf[0] = '\0';
    return ig_err_set(err, IG_ERR_UNSUPPORTED,
                      "the CUDA backend is not in this build (nvcc was not found when ingot was "
                      "configured)");
}
