/* cmd_config.c - `ingot config`: checks a YAML config against a command's schema and prints the
 * resolved configuration (defaults, then the file, then --set overrides), each value annotated
 * with where it came from. Useful before a long run: a typo fails here in a second, with the file
 * and line, instead of after an hour. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "cmd_schemas.h"
#include "train/train.h"

const char ig_usage_config[] =
    "usage: ingot config show [--schema NAME] [FILE] [--set KEY=VALUE]...\n"
    "       ingot config check [--schema NAME] FILE [--set KEY=VALUE]...\n"
    "\n"
    "show   prints the resolved configuration as YAML: the schema's defaults, overridden by FILE,\n"
    "       overridden by each --set in order; each value is followed by a comment naming where\n"
    "       it came from (default, FILE:LINE or --set).\n"
    "check  validates FILE (and the overrides) and prints 'FILE: ok'. Unknown keys, values of\n"
    "       the wrong type and YAML syntax errors are reported with FILE:LINE; exit status 1.\n"
    "       With the train schema, every check ingot train makes before it starts that needs\n"
    "       neither the data nor the processes: values that depend on each other (optim.beta1\n"
    "       in [0, 1), heads dividing d_model, ...), the model's shape and the layout on\n"
    "       parallel.tp x pp x sp_size (x dp when given) processes.\n"
    "\n"
    "options:\n"
    "  --schema NAME       the key schema to check against (default: train when FILE has a\n"
    "                      top-level key only training configs have, such as model: or\n"
    "                      train:; else preprocess)\n"
    "  --set KEY=VALUE     override one key by its dotted path; may be repeated\n"
    "\n"
    "schemas: preprocess, train\n"
    "\n"
    "examples:\n"
    "  ingot config show\n"
    "  ingot config show configs/preprocess_tinyshakespeare.yaml --set threads=8\n"
    "  ingot config check configs/preprocess_tinyshakespeare.yaml\n"
    "  ingot config check --schema preprocess my.yaml --set preprocess.on_error=skip\n"
    "  ingot config check configs/gpt-tiny.yaml --set optim.beta1=0.99\n";

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

/* Whether schema s has a key at path or under it. */
static int schema_has(const ig_schema *s, const char *path, size_t len) {
    for (size_t t = 0; t < s->n_tables; t++)
        for (size_t i = 0; i < s->tables[t].n; i++) {
            const char *k = s->tables[t].keys[i].path;
            if (!strncmp(k, path, len) && (k[len] == '\0' || k[len] == '.')) return 1;
        }
    return 0;
}

/* The schema a FILE given without --schema is read with: train when one of its top-level keys
 * (a line "KEY:" at column 0) is only the train schema's (model:, train:, optim:, ...), else
 * preprocess (the default). *why names the key that chose train. */
static const char *guess_schema(const char *file, char *why, size_t cap) {
    char *text = NULL;
    size_t len = 0;
    ig_schema pre, train;
    if (!ig_schema_get("preprocess", &pre) || !ig_schema_get("train", &train) ||
        ig_read_file_max(file, IG_YAML_FILE_MAX, &text, &len, NULL) != IG_OK)
        return "preprocess";
    const char *name = "preprocess";
    for (size_t at = 0; at < len;) {
        const char *line = text + at, *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at, k = 0;
        while (k < n && (line[k] == '_' || (line[k] >= 'a' && line[k] <= 'z') ||
                         (line[k] >= '0' && line[k] <= '9')))
            k++;
        if (k && k < n && line[k] == ':' && schema_has(&train, line, k) &&
            !schema_has(&pre, line, k)) {
            snprintf(why, cap, "%.*s", (int)k, line);
            name = "train";
            break;
        }
        at += n + 1;
    }
    free(text);
    return name;
}

/* The train schema's own checks, beyond the keys': every check ingot train makes before it starts
 * that needs neither the data nor the processes (ig_train_config_validate). */
static ig_status check_train(const ig_config *cfg, int *world, ig_err *err) {
    ig_train_config t;
    memset(&t, 0, sizeof t);
    const ig_cfg_key *keys[IG_SCHEMA_MAX_TABLES];
    size_t counts[IG_SCHEMA_MAX_TABLES];
    int binds[IG_SCHEMA_MAX_TABLES];
    size_t n = ig_train_key_tables(keys, counts, binds, IG_SCHEMA_MAX_TABLES);
    ig_status st = IG_OK;
    /* a family's own keys are bound into the shape by ig_train_config_resolve (validate's) */
    for (size_t i = 0; i < n && st == IG_OK; i++)
        if (binds[i]) st = ig_config_bind(cfg, keys[i], counts[i], &t, err);
    if (st == IG_OK) st = ig_config_bind(cfg, ig_data_keys, ig_data_n_keys, &t.data, err);
    if (st == IG_OK) st = ig_train_config_validate(NULL, &t, cfg, world, err);
    return st;
}

int ig_cmd_config(const ig_command *cmd, int argc, char **argv) {
    if (argc < 2) return ig_cmd_usage_error(cmd, "expected a subcommand: show or check");
    const char *sub = argv[1];
    int show = strcmp(sub, "show") == 0;
    if (!show && strcmp(sub, "check") != 0) {
        if (sub[0] == '-') return ig_cmd_usage_error(cmd, "unknown option '%s'", sub);
        return ig_cmd_usage_error(cmd, "unknown subcommand '%s' (expected show or check)", sub);
    }

    const char *schema_name = NULL, *file = NULL;
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
    char chosen_by[64] = "";
    if (rc < 0 && !schema_name)
        schema_name = file ? guess_schema(file, chosen_by, sizeof chosen_by) : "preprocess";
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
    int world = 0, train = strcmp(schema->name, "train") == 0;
    if (st == IG_OK && train && !show) st = check_train(cfg, &world, &err);
    if (st == IG_OK) {
        char how[160] = "";
        if (*chosen_by) snprintf(how, sizeof how, ", chosen by its top-level '%s:'", chosen_by);
        if (show) {
            printf("# schema: %s%s%s%s\n", schema->name, how, file ? ", file: " : "",
                   file ? file : "");
            st = ig_config_dump_origins(cfg, stdout, &err);
        } else if (train) {
            printf("%s: ok (schema %s%s; the layout checked on %d process%s, as ingot train "
                   "checks it before it starts; the data is checked when train reads it)\n",
                   file, schema->name, how, world, world == 1 ? "" : "es");
        } else {
            printf("%s: ok (schema %s%s)\n", file, schema->name, how);
        }
    }
    ig_config_free(cfg);
    free(sets);
    char key[64] = "";
    if (st != IG_OK && !train && file && !strcmp(guess_schema(file, key, sizeof key), "train"))
        return ig_cmd_failf("%s (its top-level '%s:' is a training key: --schema train)", err.msg,
                            key);
    return st == IG_OK ? IG_EXIT_OK : ig_cmd_fail(&err);
}
