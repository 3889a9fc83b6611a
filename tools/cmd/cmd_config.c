/* cmd_config.c - `ingot config`: checks a YAML config against a command's schema and prints the
 * resolved configuration (defaults, then the file, then --set overrides), each value annotated
 * with where it came from. Useful before a long run: a typo fails here in a second, with the file
 * and line, instead of after an hour. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "cmd_schemas.h"

const char ig_usage_config[] =
    "usage: ingot config show [--schema NAME] [FILE] [--set KEY=VALUE]...\n"
    "       ingot config check [--schema NAME] FILE [--set KEY=VALUE]...\n"
    "\n"
    "show   prints the resolved configuration as YAML: the schema's defaults, overridden by FILE,\n"
    "       overridden by each --set in order; each value is followed by a comment naming where\n"
    "       it came from (default, FILE:LINE or --set).\n"
    "check  validates FILE (and the overrides) and prints 'FILE: ok'. Unknown keys, values of\n"
    "       the wrong type and YAML syntax errors are reported with FILE:LINE; exit status 1.\n"
    "\n"
    "options:\n"
    "  --schema NAME       the key schema to check against (default: preprocess)\n"
    "  --set KEY=VALUE     override one key by its dotted path; may be repeated\n"
    "\n"
    "schemas: preprocess, train\n"
    "\n"
    "examples:\n"
    "  ingot config show\n"
    "  ingot config show configs/preprocess_tinyshakespeare.yaml --set threads=8\n"
    "  ingot config check configs/preprocess_tinyshakespeare.yaml\n"
    "  ingot config check --schema preprocess my.yaml --set preprocess.on_error=skip\n";

/* Returns the value of an option given as "--opt VALUE" or "--opt=VALUE", advancing *i; NULL
 * (after printing a usage error into *rc) when the value is missing. */
static const char *option_value(const ig_command *cmd, int argc, char **argv, int *i,
                                const char *opt, int *rc) {
    size_t n = strlen(opt);
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (*i + 1 >= argc) {
        *rc = ig_cmd_usage_error(cmd, "%s needs a value", opt);
        return NULL;
    }
    return argv[++*i];
}

static int is_option(const char *arg, const char *opt) {
    size_t n = strlen(opt);
    return strncmp(arg, opt, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

int ig_cmd_config(const ig_command *cmd, int argc, char **argv) {
    if (argc < 2) return ig_cmd_usage_error(cmd, "expected a subcommand: show or check");
    const char *sub = argv[1];
    int show = strcmp(sub, "show") == 0;
    if (!show && strcmp(sub, "check") != 0) {
        if (sub[0] == '-') return ig_cmd_usage_error(cmd, "unknown option '%s'", sub);
        return ig_cmd_usage_error(cmd, "unknown subcommand '%s' (expected show or check)", sub);
    }

    const char *schema_name = "preprocess", *file = NULL;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    if (!sets) return ig_cmd_failf("out of memory");
    int n_sets = 0, rc = -1, options_done = 0;
    for (int i = 2; i < argc && rc < 0; i++) {
        const char *a = argv[i];
        if (!options_done && strcmp(a, "--") == 0) {
            options_done = 1;
        } else if (!options_done && is_option(a, "--set")) {
            const char *v = option_value(cmd, argc, argv, &i, "--set", &rc);
            if (v) sets[n_sets++] = v;
        } else if (!options_done && is_option(a, "--schema")) {
            const char *v = option_value(cmd, argc, argv, &i, "--schema", &rc);
            if (v) schema_name = v;
        } else if (!options_done && a[0] == '-' && a[1] != '\0') {
            rc = ig_cmd_usage_error(cmd, "unknown option '%s'", a);
        } else if (file) {
            rc = ig_cmd_usage_error(cmd, "expected one FILE, got '%s' and '%s'", file, a);
        } else {
            file = a;
        }
    }
    if (rc < 0 && !show && !file) rc = ig_cmd_usage_error(cmd, "check needs a FILE");
    ig_schema sch;
    const ig_schema *schema = rc < 0 && ig_schema_get(schema_name, &sch) ? &sch : NULL;
    if (rc < 0 && !schema) {
        char names[256] = "";
        size_t n = 0;
        for (size_t s = 0; ig_schema_names[s] && n < sizeof names; s++) {
            int w =
                snprintf(names + n, sizeof names - n, "%s%s", s ? ", " : "", ig_schema_names[s]);
            n += w > 0 ? (size_t)w : 0;
        }
        rc = ig_cmd_usage_error(cmd, "unknown schema '%s' (known: %s)", schema_name, names);
    }
    if (rc >= 0) {
        free(sets);
        return rc;
    }

    ig_err err = {0};
    ig_config *cfg = NULL;
    ig_status st = ig_schema_config(schema, &cfg, &err);
    if (st == IG_OK && file) st = ig_config_load_file(cfg, file, &err);
    for (int s = 0; st == IG_OK && s < n_sets; s++) st = ig_config_set(cfg, sets[s], &err);
    if (st == IG_OK) {
        if (show) {
            printf("# schema: %s%s%s\n", schema->name, file ? ", file: " : "", file ? file : "");
            st = ig_config_dump_origins(cfg, stdout, &err);
        } else {
            printf("%s: ok (schema %s)\n", file, schema->name);
        }
    }
    ig_config_free(cfg);
    free(sets);
    return st == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
}
