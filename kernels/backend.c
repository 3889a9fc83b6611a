/* backend.c - what the compute backends of this build can run on, in words. */
#include "backend.h"

#include <stdio.h>

char *ig_cuda_describe(char *buf, size_t cap) {
    ig_cuda_info ci;
    ig_cuda_query(&ci);
    if (!ci.compiled) {
        snprintf(buf, cap, "CUDA: not built (nvcc was not found when ingot was configured)");
    } else if (ci.devices == 0) {
        snprintf(buf, cap, "CUDA: built for %s (runtime %d.%d); no device: %s", ci.archs,
                 ci.runtime_version / 1000, ci.runtime_version % 1000 / 10, ci.why);
    } else {
        snprintf(buf, cap,
                 "CUDA: built for %s (runtime %d.%d, driver %d.%d); %d device%s, 0: %s "
                 "(sm_%d%d, %.1f GiB)",
                 ci.archs, ci.runtime_version / 1000, ci.runtime_version % 1000 / 10,
                 ci.driver_version / 1000, ci.driver_version % 1000 / 10, ci.devices,
                 ci.devices == 1 ? "" : "s", ci.name, ci.cc_major, ci.cc_minor,
                 (double)ci.memory_bytes / (double)(1ull << 30));
    }
    return buf;
}
