/* cuda_host.c - the CUDA backend's side in the program, in a build with CUDA: the backend itself
 * (kernels/cuda/) is in the CUDA module, libingot_cuda.so, loaded when a CUDA backend is first
 * created, so that the commands that never use the GPU (`ingot --help`, `tokenize`, `inspect`,
 * every CPU test) do not load the CUDA runtime, cuBLASLt and cuDNN nor run their initialisers
 * (0.36 s of CPU at every start when they were linked into the program).
 *
 * What the machine has (ig_cuda_query: driver, devices) is asked of the NVIDIA driver itself,
 * libcuda.so.1, loaded here by name and called through its C API (the handful of calls below),
 * so that `ingot --version` reports the device without loading the module. The driver is not
 * one of the libraries the module brings: it is the machine's, and the module's runtime loads
 * the same one. */
#include "../backend.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "../backend_internal.h"

#ifndef IG_CUDA_ARCHS
#define IG_CUDA_ARCHS "unknown"
#endif

/* ---- the driver ------------------------------------------------------------------------------ */

/* The driver's functions that ig_cuda_query calls (cuda.h's prototypes; cuDeviceTotalMem is the
 * _v2 symbol, as cuda.h names it). */
typedef struct driver_api {
    CUresult (*init)(unsigned int flags);
    CUresult (*driver_version)(int *v);
    CUresult (*device_count)(int *n);
    CUresult (*device_get)(CUdevice *d, int ordinal);
    CUresult (*device_name)(char *name, int len, CUdevice d);
    CUresult (*device_attribute)(int *v, CUdevice_attribute a, CUdevice d);
    CUresult (*device_total_mem)(size_t *bytes, CUdevice d);
    CUresult (*error_string)(CUresult e, const char **s);
} driver_api;

/* The driver's functions, from libcuda.so.1 (loaded once by the dynamic loader, never closed:
 * the CUDA runtime of the module uses the same copy). 0 when there is no driver. */
static int driver_open(driver_api *d) {
    memset(d, 0, sizeof *d);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    /* dlsym returns functions as void *: POSIX guarantees the conversion */
    *(void **)&d->init = dlsym(h, "cuInit");
    *(void **)&d->driver_version = dlsym(h, "cuDriverGetVersion");
    *(void **)&d->device_count = dlsym(h, "cuDeviceGetCount");
    *(void **)&d->device_get = dlsym(h, "cuDeviceGet");
    *(void **)&d->device_name = dlsym(h, "cuDeviceGetName");
    *(void **)&d->device_attribute = dlsym(h, "cuDeviceGetAttribute");
    *(void **)&d->device_total_mem = dlsym(h, "cuDeviceTotalMem_v2");
    *(void **)&d->error_string = dlsym(h, "cuGetErrorString");
    return d->init && d->driver_version && d->device_count && d->device_get && d->device_name &&
           d->device_attribute && d->device_total_mem && d->error_string;
}

static const char *driver_error(const driver_api *d, CUresult e) {
    const char *s = NULL;
    return d->error_string(e, &s) == CUDA_SUCCESS && s ? s : "unknown driver error";
}

void ig_cuda_query(ig_cuda_info *out) {
    memset(out, 0, sizeof *out);
    out->compiled = 1;
    snprintf(out->archs, sizeof out->archs, "%s", IG_CUDA_ARCHS);
    out->runtime_version = CUDA_VERSION; /* the toolkit's: the module carries its runtime */
    driver_api d;
    if (!driver_open(&d)) {
        snprintf(out->why, sizeof out->why,
                 "no NVIDIA driver is installed on this machine (libcuda.so.1 is not found)");
        return;
    }
    d.driver_version(&out->driver_version);
    /* the runtime's rule and words: a driver of an older major version cannot run it */
    if (out->driver_version / 1000 < out->runtime_version / 1000) {
        snprintf(out->why, sizeof out->why,
                 "CUDA driver version is insufficient for CUDA runtime version");
        return;
    }
    int n = 0;
    CUresult e = d.init(0);
    if (e == CUDA_SUCCESS) e = d.device_count(&n);
    if (e != CUDA_SUCCESS || n <= 0) {
        snprintf(out->why, sizeof out->why, "%s",
                 e != CUDA_SUCCESS ? driver_error(&d, e) : "no device");
        return;
    }
    out->devices = n;
    CUdevice dev;
    size_t bytes = 0;
    if (d.device_get(&dev, 0) != CUDA_SUCCESS) return;
    if (d.device_name(out->name, (int)sizeof out->name, dev) != CUDA_SUCCESS) out->name[0] = '\0';
    d.device_attribute(&out->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    d.device_attribute(&out->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    if (d.device_total_mem(&bytes, dev) == CUDA_SUCCESS) out->memory_bytes = (uint64_t)bytes;
}

/* ---- the module ------------------------------------------------------------------------------ */

/* The module's backend entry, checked against this build's tables; what: for the messages. */
static ig_status module_entry(const ig_cuda_backend_module **out, const char *what, ig_err *err) {
    return ig_module_entry("cuda", IG_CUDA_BACKEND_ENTRY, what, sizeof(ig_backend_ops),
                           sizeof(struct ig_backend), (const void **)out, err);
}

ig_status ig_cuda_backend_create(ig_backend *be, ig_err *err) {
    be->impl = NULL;
    /* the refusals that need neither the module nor a device come first, as they always did */
    ig_attention_path path;
    ig_status st = ig_attention_path_check(&path, err);
    if (st != IG_OK) return st;
    ig_cuda_info ci;
    ig_cuda_query(&ci);
    if (ci.devices <= 0)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "no CUDA device: %s (use the CPU backend, train.device: cpu)", ci.why);
    const ig_cuda_backend_module *m = NULL;
    if ((st = module_entry(&m, "the CUDA backend", err)) != IG_OK) return st;
    return m->create(be, err);
}

ig_status ig_cuda_load(char *buf, size_t cap, ig_err *err) {
    const ig_cuda_backend_module *m = NULL;
    ig_status st = module_entry(&m, "the CUDA backend", err);
    if (st != IG_OK) return st;
    char libs[512];
    m->describe(libs, sizeof libs);
    /* the file the loader took, however it was found (a directory of ours or the library path) */
    Dl_info where;
    int known = dladdr(m, &where) && where.dli_fname && *where.dli_fname;
    snprintf(buf, cap, "%s: %s", known ? where.dli_fname : "libingot_cuda.so", libs);
    return IG_OK;
}
