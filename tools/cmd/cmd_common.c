/* cmd_common.c - helpers shared by the subcommands: error printing, the context from common flags,
 * option value parsing. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

int ig_cmd_help(const ig_command *cmd) {
    fputs(cmd->usage, stdout);
    return IG_EXIT_OK;
}

int ig_cmd_usage_error(const ig_command *cmd, const char *fmt, ...) {
    /* the one line that says what is wrong, and where the whole help is (printed in full, it
     * buried the line under a screen of options) */
    char line[2048];
    int n = snprintf(line, sizeof line, "ingot %s: ", cmd->name);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\nsee `ingot %s --help`\n", line, cmd->name);
    return IG_EXIT_USAGE;
}

/* The flag of a library option (ig_err.fix_option): "on_error" is --on-error, except where a
 * command's flag has another name. */
static void option_flag(const char *option, char *buf, size_t cap) {
    static const char *const renamed[][2] = {{"overwrite", "force"}};
    for (size_t i = 0; i < sizeof renamed / sizeof renamed[0]; i++)
        if (!strcmp(option, renamed[i][0])) option = renamed[i][1];
    size_t n = (size_t)snprintf(buf, cap, "--%s", option);
    for (size_t i = 2; i < n && i < cap; i++)
        if (buf[i] == '_') buf[i] = '-';
}

static int env_int(const char *name, int dflt);

/* "ingot: error: " and, in a job of several processes, "rank R: ": the line is written with one
 * call, so that the lines of several ranks merged by the launcher stay whole. */
static size_t error_prefix(char *buf, size_t cap) {
    int world = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1));
    int rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMI_RANK", 0));
    int n = world > 1 ? snprintf(buf, cap, "ingot: error: rank %d: ", rank)
                      : snprintf(buf, cap, "ingot: error: ");
    return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

int ig_cmd_fail(const ig_err *err) {
    char line[IG_ERR_MSG_MAX + 512];
    size_t n = error_prefix(line, sizeof line);
    n += (size_t)snprintf(line + n, sizeof line - n, "%s",
                          err->msg[0] ? err->msg : ig_status_str(err->status));
    if (err->fix_option && n < sizeof line) {
        char flag[128];
        option_flag(err->fix_option, flag, sizeof flag);
        n += (size_t)snprintf(line + n, sizeof line - n, " (use %s%s%s)", flag,
                              err->fix_value ? " " : "", err->fix_value ? err->fix_value : "");
    }
    if (n >= sizeof line - 1) n = sizeof line - 2;
    line[n] = '\n', line[n + 1] = '\0';
    fputs(line, stderr);
    return IG_EXIT_FAIL;
}

int ig_cmd_failf(const char *fmt, ...) {
    char line[IG_ERR_MSG_MAX + 512];
    size_t n = error_prefix(line, sizeof line);
    va_list ap;
    va_start(ap, fmt);
    n += (size_t)vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (n >= sizeof line - 1) n = sizeof line - 2;
    line[n] = '\n', line[n + 1] = '\0';
    fputs(line, stderr);
    return IG_EXIT_FAIL;
}

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}

ig_status ig_cmd_ctx(ig_ctx **out, const ig_common_flags *flags, ig_err *err) {
    ig_ctx_opts o = ig_ctx_opts_default();
    o.threads = flags ? flags->threads : 0;
    if (flags && flags->quiet) o.log_level = IG_LOG_WARN;
    if (flags && flags->verbose) o.log_level = IG_LOG_DEBUG;
    /* Under mpirun (OpenMPI or a PMI launcher) each process learns its place from the
     * environment, so that commands which do not need MPI messaging still split their work. */
    o.world = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1));
    o.rank = env_int("OMPI_COMM_WORLD_RANK", env_int("PMI_RANK", 0));
    if (o.world < 1 || o.rank < 0 || o.rank >= o.world) o.world = 1, o.rank = 0;
    return ig_ctx_create(out, &o, err);
}

int ig_cmd_getopt(int argc, char **argv, const char *optstring, const struct option *longopts) {
    int c = getopt_long(argc, argv, optstring, longopts, NULL);
    /* a value given as the next word that is itself an option ("--output --force") is a
     * missing value, not a file named "--force"; "--output=--force" still means it */
    if (c != -1 && c != '?' && c != ':' && optarg && optind >= 1 && optarg == argv[optind - 1] &&
        strncmp(optarg, "--", 2) == 0) {
        optind--; /* argv[optind - 1] names the option whose value is missing */
        return ':';
    }
    return c;
}

int ig_cmd_bad_option(const ig_command *cmd, int c, char **argv) {
    if (c == ':') return ig_cmd_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
    if (c == '?' && optopt && optopt < 256)
        return ig_cmd_usage_error(cmd, "unknown option '-%c'", optopt);
    return ig_cmd_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
}

int ig_cmd_parse_u64(const ig_command *cmd, const char *opt, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-' || *s == '+' || isspace((unsigned char)*s)) goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) goto bad;
    *out = v;
    return 1;
bad:
    ig_cmd_usage_error(cmd, "%s expects a non-negative integer, got '%s'", opt, s ? s : "");
    return 0;
}

int ig_cmd_parse_threads(const ig_command *cmd, const char *value, ig_common_flags *flags) {
    ig_config *cfg = NULL;
    ig_err err = {0};
    ig_status st = ig_config_create(&cfg, ig_cmd_common_keys, ig_cmd_n_common_keys, &err);
    if (st == IG_OK) st = ig_config_set_text(cfg, "threads", value, "--threads", 0, &err);
    if (st == IG_OK) flags->threads = (int)ig_config_int(cfg, "threads");
    ig_config_free(cfg);
    if (st == IG_OK) return 1;
    ig_cmd_usage_error(cmd, "%s", err.msg);
    return 0;
}
