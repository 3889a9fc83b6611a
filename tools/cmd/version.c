/* version.c - `ingot version` / `ingot --version`. */
#include <stdio.h>

#include "cmd.h"

const char ig_usage_version[] = "usage: ingot version\n       ingot --version\n\n"
                                "Prints ingot's version.\n\nexample:\n  ingot --version\n";

int ig_cmd_version(const ig_command *cmd, int argc, char **argv) {
    (void)argv;
    if (argc > 1) return ig_cmd_usage_error(cmd, "takes no arguments");
    printf("ingot %s\n", IG_VERSION_STRING);
    return IG_EXIT_OK;
}
