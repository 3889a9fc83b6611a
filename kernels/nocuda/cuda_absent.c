/* cuda_absent.c - the CUDA backend's entry points in a build without nvcc: they answer that
 * there is no CUDA, so nothing else needs to know how ingot was built. */
#include "../backend.h"

#include <string.h>

void ig_cuda_query(ig_cuda_info *out) {
    memset(out, 0, sizeof *out);
}
