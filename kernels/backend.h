/* backend.h - the public API of ingot's compute backends (kernels/). The trainer's operation
 * table grows here; for now it answers what this build and machine can compute on: whether the
 * CUDA backend is compiled in and which device the CUDA runtime sees.
 *
 * Model code includes this header only, never a backend's: kernels/cpu/ and kernels/cuda/ sit
 * behind it, and the CUDA one is built only when nvcc is found (kernels/nocuda/ stands in). */
#ifndef INGOT_KERNELS_BACKEND_H
#define INGOT_KERNELS_BACKEND_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the CUDA runtime reports. Filled by ig_cuda_query; never fails. */
typedef struct ig_cuda_info {
    int compiled;        /* 1 when this build has the CUDA backend */
    char archs[64];      /* the architectures compiled for, e.g. "sm_80 sm_90" */
    int runtime_version; /* CUDA runtime, e.g. 13000; 0 when not compiled */
    int driver_version;  /* 0 when no driver is installed */
    int devices;         /* devices visible to this process */
    char name[256];      /* device 0, when devices > 0 */
    int cc_major, cc_minor;
    uint64_t memory_bytes;
    char why[256]; /* devices == 0: the runtime's reason ("no CUDA-capable device is detected") */
} ig_cuda_info;

void ig_cuda_query(ig_cuda_info *out);

/* One line for `ingot --version`: "CUDA: ..." (what ig_cuda_query found). Returns buf. */
char *ig_cuda_describe(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* INGOT_KERNELS_BACKEND_H */
