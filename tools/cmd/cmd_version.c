/* cmd_version.c - `ingot version` / `ingot --version`: the version, and what this build can
 * compute on (the CUDA backend and the device the driver sees). It asks the driver, not the CUDA
 * module, so that it starts as fast as any command; `--cuda` loads the module as the first CUDA
 * backend would and says which libraries it found. */
#include <stdio.h>
#include <string.h>

#include "cmd.h"
#include "kernels/backend.h"

const char ig_usage_version[] =
    "usage: ingot version [--cuda]\n       ingot --version\n\n"
    "Prints ingot's version and, on a second line, whether this build has the CUDA backend\n"
    "and which device the NVIDIA driver sees (or that no driver is installed, or why it sees\n"
    "no device).\n\n"
    "  --cuda   also load the CUDA module (libingot_cuda.so: the CUDA backend and the NCCL\n"
    "           communicator, which other commands load only when they use the GPU) and print\n"
    "           where it was found and the CUDA runtime, cuBLASLt and cuDNN it brought; exit 1\n"
    "           with what is missing when it cannot be loaded\n\n"
    "examples:\n  ingot --version\n  ingot version --cuda\n";

int ig_cmd_version(const ig_command *cmd, int argc, char **argv) {
    int libraries = argc == 2 && strcmp(argv[1], "--cuda") == 0;
    if (argc > 1 && !libraries) return ig_cmd_usage_error(cmd, "takes no arguments but --cuda");
    char cuda[768];
    ig_cuda_info ci;
    ig_cuda_query(&ci);
    if (ci.compiled && ci.devices == 0 && ci.driver_version == 0)
        /* said in full: no GPU can be used at all */
        snprintf(cuda, sizeof cuda,
                 "CUDA: built for %s (runtime %d.%d); no NVIDIA driver is installed on this "
                 "machine (libcuda.so.1 is not found), so no GPU can be used: ingot runs on the "
                 "CPU (train.device cpu)",
                 ci.archs, ci.runtime_version / 1000, ci.runtime_version % 1000 / 10);
    else
        ig_cuda_describe(cuda, sizeof cuda);
    printf("ingot %s\n%s\n", IG_VERSION_STRING, cuda);
    if (!libraries) return IG_EXIT_OK;
    char line[4608];
    ig_err err = {0};
    if (ig_cuda_load(line, sizeof line, &err) != IG_OK) {
        printf("CUDA module: not loaded\n");
        fflush(stdout);
        return ig_cmd_fail(&err);
    }
    printf("CUDA module: %s\n", line);
    return IG_EXIT_OK;
}
