/* cmd.h - private to the ingot program: the subcommand table entry and the helpers every
 * subcommand shares (usage errors, runtime errors, the context from common flags).
 *
 * Exit codes: 0 success, 1 runtime error ("ingot: error: ..."), 2 usage error (one line, and
 * where the help is), 3 a rank of a multi-process run made no progress for parallel.timeout (the
 * watchdog ends it), 4 `ingot train` stopped on a signal (SIGINT, SIGTERM) after writing a
 * checkpoint: not finished, resume it. */
#ifndef INGOT_CMD_H
#define INGOT_CMD_H

#include "core/core.h"

enum { IG_EXIT_OK = 0, IG_EXIT_FAIL = 1, IG_EXIT_USAGE = 2, IG_EXIT_HUNG = 3, IG_EXIT_STOPPED = 4 };

typedef struct ig_command {
    const char *name;    /* "preprocess" */
    const char *summary; /* one line for `ingot --help` */
    const char *usage;   /* full help: synopsis, options, examples */
    int (*run)(const struct ig_command *cmd, int argc, char **argv);
} ig_command;

/* The table, in tools/ingot.c. */
extern const ig_command ig_commands[];
extern const size_t ig_n_commands;
const ig_command *ig_command_find(const char *name);

/* Prints cmd's usage to stdout (for --help) and returns 0. */
int ig_cmd_help(const ig_command *cmd);
/* Prints "ingot CMD: MESSAGE" and "see `ingot CMD --help`" to stderr; returns 2. */
int ig_cmd_usage_error(const ig_command *cmd, const char *fmt, ...) IG_PRINTF(2, 3);
/* Prints "ingot: error: MESSAGE" (the message of err, and "(use --FLAG VALUE)" when err names
 * an option that would avoid the failure) to stderr; returns 1. */
int ig_cmd_fail(const ig_err *err);
int ig_cmd_failf(const char *fmt, ...) IG_PRINTF(1, 2);

/* Flags every command accepts: --threads N, --quiet, --verbose (keys threads, quiet, verbose:
 * ig_cmd_common_keys). */
typedef struct ig_common_flags {
    int threads;
    int quiet;
    int verbose;
} ig_common_flags;

extern const ig_cfg_key ig_cmd_common_keys[];
extern const size_t ig_cmd_n_common_keys;

/* A command's options: tables of configuration keys, each bound into a struct (dst; NULL: not
 * bound), whose flags make the command line (see cmd_options.c). */
typedef struct ig_cmd_table {
    const ig_cfg_key *keys;
    size_t n;
    void *dst;
} ig_cmd_table;

typedef struct ig_cmd_spec {
    const ig_cmd_table *tables;
    size_t n_tables;
    const char *const (*aliases)[2]; /* {"workers", "threads"}: --workers means --threads */
    size_t n_aliases;
    int config; /* --config FILE and --set KEY=VALUE are accepted */
} ig_cmd_spec;

/* Parses argv (argv[0] is the command's name) against spec: the --config file first, then the
 * flags and --set in order; then binds every table into its struct. On success returns -1 with
 * *cfg (which the bound strings point into: free it after them) and *first_positional (the index
 * of the first non-option argument; getopt moved them all to the end). Otherwise prints why
 * (usage error 2 for a bad flag; 1 for a bad config file or --set) and returns the exit code. */
int ig_cmd_parse(const ig_command *cmd, int argc, char **argv, const ig_cmd_spec *spec,
                 ig_config **cfg, int *first_positional);

/* `CMD CONFIG.yaml [options]` (ingot train, ingot plan): the config file is the first argument;
 * parsed with the training config's keys into t (its data keys into t->data), the common flags
 * into flags and the command's own table (own, n_own) into own_dst. A second positional argument
 * is a usage error. Returns as ig_cmd_parse, *cfg likewise (cmd_train.c). */
struct ig_train_config;
int ig_cmd_parse_train(const ig_command *cmd, int argc, char **argv, struct ig_train_config *t,
                       ig_common_flags *flags, const ig_cfg_key *own, size_t n_own, void *own_dst,
                       ig_config **cfg);

/* A multi-process command watched before MPI starts (cmd_start_guard.c): armed as soon as the
 * configuration is read, it ends the process with status 3 and a message naming what this rank
 * waited for (and the ranks that never started) unless disarmed within timeout seconds. NULL (a
 * no-op for the others) in one process, with timeout <= 0, or when it cannot start. */
typedef struct ig_start_guard ig_start_guard;
ig_start_guard *ig_start_guard_arm(double timeout, const char *run_dir);
/* What this rank waits for now (a string that outlives the guard), for the message. */
void ig_start_guard_phase(ig_start_guard *g, const char *what);
/* The trainer's watchdog has taken over: the guard stands down (any thread). */
void ig_start_guard_disarm(ig_start_guard *g);
/* Stops the thread and removes this rank's start mark. */
void ig_start_guard_free(ig_start_guard *g);

/* Creates the context from the common flags (and the MPI rank when run under mpirun). */
ig_status ig_cmd_ctx(ig_ctx **out, const ig_common_flags *flags, ig_err *err);

/* getopt_long, except that a required value which is the next word and starts with "--" is
 * reported as missing (':'), with argv[optind - 1] naming the option: "--output --force" must not
 * write a file called "--force". */
struct option;
int ig_cmd_getopt(int argc, char **argv, const char *optstring, const struct option *longopts);

/* The usage error (exit 2) for what ig_cmd_getopt returned that no option matched: ':' (a value
 * is missing) or anything else (an unknown option). */
int ig_cmd_bad_option(const ig_command *cmd, int c, char **argv);

/* Sets flags->threads from a --threads value through the common key (same checks and messages as
 * the commands parsed from tables); on failure prints a usage error and returns 0. */
int ig_cmd_parse_threads(const ig_command *cmd, const char *value, ig_common_flags *flags);

/* Parses a non-negative integer option value; on failure prints a usage error and returns 0. */
int ig_cmd_parse_u64(const ig_command *cmd, const char *opt, const char *s, uint64_t *out);

/* Subcommands: one file each in tools/cmd/. */
int ig_cmd_version(const ig_command *cmd, int argc, char **argv);
int ig_cmd_help_cmd(const ig_command *cmd, int argc, char **argv);
int ig_cmd_config(const ig_command *cmd, int argc, char **argv);

extern const char ig_usage_version[];
extern const char ig_usage_help[];
extern const char ig_usage_config[];
int ig_cmd_preprocess(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_preprocess[];
/* `ingot preprocess video` (cmd_preprocess_video.c), dispatched by ig_cmd_preprocess. */
int ig_cmd_preprocess_video(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_preprocess_video[];
/* `ingot preprocess latents` (cmd_preprocess_latents.c), dispatched by ig_cmd_preprocess. */
int ig_cmd_preprocess_latents(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_preprocess_latents[];
/* `ingot preprocess captions` (cmd_preprocess_captions.c), dispatched by ig_cmd_preprocess. */
int ig_cmd_preprocess_captions(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_preprocess_captions[];
/* The command whose usage `ingot preprocess KIND ... --help` (argv[0] = "preprocess") and
 * `ingot help preprocess KIND` show: `preprocess video`'s for KIND video, `preprocess captions`'
 * for KIND captions, else cmd's own (text). */
const ig_command *ig_cmd_preprocess_help(const ig_command *cmd, int argc, char **argv);
int ig_cmd_inspect(const ig_command *cmd, int argc, char **argv);
/* The PREFIX an inspect command line names: its first argument that is not an option or an
 * option's value (NULL: none). */
const char *ig_cmd_inspect_target(int argc, char **argv);
/* What a shard kind's inspect command line says (frame, latent and caption-feature shards):
 * --json, --clip K, the files clip K is written to (file[i], the value of option files[i]:
 * "raw", "png", "features"; NULL entries end the list), --tokenizer when tokenizer is set, --force,
 * --quiet, --threads, and the one PREFIX (what: "frame shard" for the usage line). */
typedef struct ig_inspect_args {
    int as_json, have_clip, force;
    uint64_t clip;
    const char *file[2];
    const char *tokenizer;
    const char *prefix;
} ig_inspect_args;
/* Parses argv into *a and judges the output files before anything is read (an existing file
 * needs --force, what is not a regular file is refused, two must be two files): -1 to go on,
 * else the exit code (a usage error or the refusal, said). */
int ig_cmd_inspect_args(const ig_command *cmd, int argc, char **argv, const char *const files[2],
                        int tokenizer, const char *what, ig_inspect_args *a);
/* Frame shards (cmd_inspect_video.c): whether the command's PREFIX is one, inspect and verify. */
int ig_cmd_video_target(int argc, char **argv);
/* Latent shards (cmd_inspect_latents.c): whether the command's PREFIX is one (cmd_inspect_video.c
 * finds the PREFIX), inspect and verify. */
int ig_cmd_latent_target(int argc, char **argv);
int ig_cmd_inspect_latents(const ig_command *cmd, int argc, char **argv);
int ig_cmd_verify_latents(struct ig_ctx *ctx, const char *prefix, int quiet); /* 1: failed */
int ig_cmd_inspect_video(const ig_command *cmd, int argc, char **argv);
struct ig_ctx;
int ig_cmd_verify_video(struct ig_ctx *ctx, const char *prefix, int quiet); /* 1: failed */
/* Caption-feature shards (cmd_inspect_features.c), likewise. */
int ig_cmd_features_target(int argc, char **argv);
int ig_cmd_inspect_features(const ig_command *cmd, int argc, char **argv);
int ig_cmd_verify_features(struct ig_ctx *ctx, const char *prefix, int quiet); /* 1: failed */
int ig_cmd_verify(const ig_command *cmd, int argc, char **argv);
int ig_cmd_merge(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_inspect[];
extern const char ig_usage_verify[];
extern const char ig_usage_merge[];

int ig_cmd_tokenize(const ig_command *cmd, int argc, char **argv);
int ig_cmd_detokenize(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_tokenize[];
extern const char ig_usage_detokenize[];
int ig_cmd_blend(const ig_command *cmd, int argc, char **argv);
int ig_cmd_samples(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_blend[];
extern const char ig_usage_samples[];
int ig_cmd_train(const ig_command *cmd, int argc, char **argv);
int ig_cmd_plan(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_plan[];
int ig_cmd_ckpt(const ig_command *cmd, int argc, char **argv);
int ig_cmd_eval(const ig_command *cmd, int argc, char **argv);
int ig_cmd_sample(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_train[];
extern const char ig_usage_ckpt[];
extern const char ig_usage_eval[];
extern const char ig_usage_sample[];
int ig_cmd_encode_text(const ig_command *cmd, int argc, char **argv);
extern const char ig_usage_encode_text[];

#endif
