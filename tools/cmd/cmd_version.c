/* cmd_version.c - `ingot version` / `ingot --version`: the version, and what this build can
 * compute on (the CUDA backend and the device the runtime sees). */
#include <stdio.h>

#include "cmd.h"
#include "kernels/backend.h"

const char ig_usage_version[] =
    "usage: ingot version\n       ingot --version\n\n"
    "Prints ingot's version and, on a second line, whether this build has the CUDA backend\n"
    "and which device the CUDA runtime sees (or that no NVIDIA driver is installed, or why the\n"
    "runtime sees no device).\n\nexample:\n  ingot --version\n";

int ig_cmd_version(const ig_command *cmd, int argc, char **argv) {
    (void)argv;
    if (argc > 1) return ig_cmd_usage_error(cmd, "takes no arguments");
    char cuda[768];
    ig_cuda_info ci;
    ig_cuda_query(&ci);
    if (ci.compiled && ci.devices == 0 && ci.driver_version == 0)
        /* the runtime's own words for this ("CUDA driver version is insufficient for CUDA
         * runtime version") read as if a driver were there, too old */
        snprintf(cuda, sizeof cuda,
                 "CUDA: built for %s (runtime %d.%d); no NVIDIA driver is installed on this "
                 "machine (libcuda.so.1 is not found), so no GPU can be used: ingot runs on the "
                 "CPU (train.device cpu)",
                 ci.archs, ci.runtime_version / 1000, ci.runtime_version % 1000 / 10);
    else
        ig_cuda_describe(cuda, sizeof cuda);
    printf("ingot %s\n%s\n", IG_VERSION_STRING, cuda);
    return IG_EXIT_OK;
}
