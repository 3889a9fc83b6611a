/* backend_cuda.cu - the CUDA backend's create hook. Its kernels are a later issue: until then it
 * answers IG_ERR_UNSUPPORTED, so a trainer asking for CUDA stops with a clear message instead of
 * running something half made. ig_cuda_query (device.cu) works meanwhile. */
#include "../backend.h"
#include "../backend_internal.h"

extern "C" ig_status ig_cuda_backend_create(ig_backend *be, ig_err *err) {
    (void)be;
    return ig_err_set(err, IG_ERR_UNSUPPORTED,
                      "the CUDA backend's kernels are not written yet (this build has the CUDA "
                      "device query only); use the CPU backend");
}
