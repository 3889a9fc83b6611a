/* cmd_version.c - `ingot version` / `ingot --version`: the version, and what this build can
 * compute on (the CUDA backend and the device the runtime sees). */
#include <stdio.h>

#include "cmd.h"
#include "kernels/backend.h"

const char ig_usage_version[] =
    "usage: ingot version\n       ingot --version\n\n"
    "Prints ingot's version and, on a second line, whether this build has the CUDA backend\n"
    "and which device the CUDA runtime sees.\n\nexample:\n  ingot --version\n";

int ig_cmd_version(const ig_command *cmd, int argc, char **argv) {
    (void)argv;
    if (argc > 1) return ig_cmd_usage_error(cmd, "takes no arguments");
    char cuda[512];
    printf("ingot %s\n%s\n", IG_VERSION_STRING, ig_cuda_describe(cuda, sizeof cuda));
    return IG_EXIT_OK;
}
