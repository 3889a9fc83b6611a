/* device.cu - the CUDA runtime's view of this machine: devices, driver and runtime versions.
 * The first CUDA source of ingot; CI compiles it for sm_80 and sm_90 next to the C sources, so a
 * build break in the CUDA toolchain shows at once. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <string.h>

#include "../backend.h"

#ifndef IG_CUDA_ARCHS
#define IG_CUDA_ARCHS "unknown"
#endif

extern "C" void ig_cuda_query(ig_cuda_info *out) {
    memset(out, 0, sizeof *out);
    out->compiled = 1;
    snprintf(out->archs, sizeof out->archs, "%s", IG_CUDA_ARCHS);
    cudaRuntimeGetVersion(&out->runtime_version);
    cudaDriverGetVersion(&out->driver_version);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        snprintf(out->why, sizeof out->why, "%s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        cudaGetLastError(); /* clear the sticky error for later callers */
        return;
    }
    out->devices = n;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess) {
        snprintf(out->name, sizeof out->name, "%s", p.name);
        out->cc_major = p.major;
        out->cc_minor = p.minor;
        out->memory_bytes = (uint64_t)p.totalGlobalMem;
    }
}
