/* cmd_train.c - `ingot train CONFIG.yaml [--set KEY=VALUE]... [--resume RUN_DIR]`: trains a model
 * of any family (model.arch) as the config says (the tables of ig_train_key_tables and the
 * loader's data keys). Thin over
 * ig_train_run. SIGINT or SIGTERM finishes the step in progress, writes a checkpoint and exits 4
 * with the command that resumes; a second one stops at once. */
#include <math.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "cmd_schemas.h"
#include "train/train.h"

const char ig_usage_train[] =
    "usage: ingot train CONFIG.yaml [--set KEY=VALUE]... [--resume RUN_DIR | --force] [--threads "
    "N]\n"
    "\n"
    "Trains a model as CONFIG.yaml says: model.arch gpt2 or llama on token shards, or dit (a\n"
    "video diffusion transformer: on clip shards, or on latent shards of a VAE's latents) or vae\n"
    "(Stable Diffusion's AutoencoderKL, per frame) on clip shards (see configs/gpt-tiny.yaml,\n"
    "configs/llama-tiny.yaml, configs/dit-tiny.yaml, configs/dit-tiny-latent.yaml,\n"
    "configs/vae-tiny.yaml and 'ingot config show --schema train' for every key with its\n"
    "default): data from the\n"
    "loader (Megatron's blends and splits, exact resume), gradient accumulation to the global\n"
    "batch, AdamW with a learning-rate schedule and gradient clipping, validation and\n"
    "checkpoints. Each step prints a line (loss, learning rate, gradient norm, tokens/s, MFU,\n"
    "ETA) and appends the same as JSON to RUN_DIR/metrics.jsonl.\n"
    "\n"
    "options:\n"
    "  --set KEY=VALUE     override one key, e.g. --set optim.lr=3e-4 --set train.steps=200\n"
    "  --resume RUN_DIR    continue the run in RUN_DIR from its latest checkpoint; the losses\n"
    "                      are the same, bit for bit, as those of a run never stopped\n"
    "  --force             start over in a run directory that holds an earlier run (removes\n"
    "                      its checkpoints, metrics.jsonl and tb/; without it that is an error)\n"
    "  --data-path ITEM    the data (repeated: W1 P1 W2 P2 ...); also --split, --seed,\n"
    "                      --cache-dir (data.* keys)\n"
    "  --comm-stats        add the bytes each rank sent per group (tp, pp, dp, emb) to every\n"
    "                      step line (the largest over the ranks) and metrics.jsonl (every rank)\n"
    "  --threads N         threads (default: all cores)\n"
    "  --quiet, --verbose  less or more output\n"
    "\n"
    "Ctrl-C (or SIGTERM) finishes the current step, writes a checkpoint and exits with status 4\n"
    "(stopped, not finished: a scheduler can tell it from 0, done); a second Ctrl-C stops at\n"
    "once. Exit status 3: a rank of a multi-process run hung past parallel.timeout.\n"
    "\n"
    "Under mpirun (or srun) every process is one rank of a tp x pp x dp layout: parallel.tp\n"
    "(tensor parallel; parallel.sp for sequence parallel), parallel.pp (pipeline stages, 1F1B),\n"
    "dp = processes / (tp x pp), parallel.zero 1, 2 or 3; a dit also takes Ulysses' sequence\n"
    "parallelism (parallel.sp_mode ulysses, parallel.sp_size) and Open-Sora's plugin /\n"
    "plugin_config spelling; the losses are those of one process within rounding. A rank\n"
    "that dies or hangs past parallel.timeout ends every rank.\n"
    "\n"
    "Memory: train.recompute selective recomputes the attention core in the backward, full\n"
    "each layer from its input (the losses and weights are the same bits as with none);\n"
    "parallel.zero 3 shards the parameters too. Before it allocates, every rank sizes its\n"
    "part as 'ingot plan' does and prints the estimate; a run that does not fit (a GPU's\n"
    "free memory, what the process may take, or train.memory_limit) is refused with the\n"
    "layouts that would. log.memory_stats adds every rank's estimate and peak to\n"
    "metrics.jsonl.\n"
    "\n"
    "examples:\n"
    "  ingot train configs/gpt-tiny.yaml\n"
    "  ingot train configs/gpt-tiny.yaml --set train.steps=50 --set train.run_dir=out/try\n"
    "  ingot train configs/gpt-tiny.yaml --resume out/gpt-tiny\n"
    "  ingot train configs/gpt2-small.yaml --set data.path=[0.7,out/web,0.3,out/code]\n"
    "  mpirun -np 8 ingot train configs/gpt-3d.yaml --comm-stats\n"
    "  ingot train configs/gpt-tiny.yaml --set train.recompute=full --set train.memory_limit=2GB\n"
    "  ingot train configs/dit-tiny.yaml --set data.path=[out/quickstart-video/clips]\n"
    "  ingot train configs/vae-tiny.yaml --set vae.kl_weight=1e-5\n";

/* The stop request of SIGINT / SIGTERM: the one piece of process state a signal handler may
 * touch. The handler is installed with SA_RESETHAND, so a second signal kills the process. */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
    static const char msg[] =
        "\ningot: stopping after this step and writing a checkpoint (again to abort)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
}

/* The trainer's watchdog runs: the guard of the start stands down. */
static void stand_down(void *guard) {
    ig_start_guard_disarm(guard);
}

typedef struct train_cli {
    const char *resume;
    int force;
} train_cli;

const ig_cfg_key ig_train_cli_keys[] = {
    {"run.resume", IG_CFG_STRING, "", "continue the run in this directory from its last checkpoint",
     "resume", IG_CFG_FIELD_(train_cli, resume), 0, 0, NULL, 0, 0},
    {"run.force", IG_CFG_BOOL, "false",
     "start over in a run directory that holds an earlier run (its checkpoints and metrics go)",
     "force", IG_CFG_FIELD_(train_cli, force), 1, 0, NULL, 0, 0},
};
const size_t ig_train_n_cli_keys = sizeof ig_train_cli_keys / sizeof ig_train_cli_keys[0];

int ig_cmd_parse_train(const ig_command *cmd, int argc, char **argv, ig_train_config *t,
                       ig_common_flags *flags, const ig_cfg_key *own, size_t n_own, void *own_dst,
                       ig_config **cfg) {
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) return ig_cmd_failf("out of memory");
    int n = 0;
    args[n++] = argv[0];
    if (argc > 1 && argv[1][0] != '-') {
        args[n++] = "--config";
        args[n++] = argv[1];
        for (int i = 2; i < argc; i++) args[n++] = argv[i];
    } else {
        for (int i = 1; i < argc; i++) args[n++] = argv[i];
    }
    memset(t, 0, sizeof *t);
    ig_cmd_table tables[IG_TRAIN_KEY_TABLES + 3] = {
        {ig_cmd_common_keys, ig_cmd_n_common_keys, flags}};
    const ig_cfg_key *keys[IG_TRAIN_KEY_TABLES];
    size_t counts[IG_TRAIN_KEY_TABLES], n_tables = 1;
    int binds[IG_TRAIN_KEY_TABLES];
    /* a family's own keys are bound into the shape by ig_train_config_resolve (not here) */
    size_t nk = ig_train_key_tables(keys, counts, binds, IG_TRAIN_KEY_TABLES);
    for (size_t i = 0; i < nk && i < IG_TRAIN_KEY_TABLES; i++)
        tables[n_tables++] = (ig_cmd_table){keys[i], counts[i], binds[i] ? t : NULL};
    tables[n_tables++] = (ig_cmd_table){ig_data_keys, ig_data_n_keys, &t->data};
    tables[n_tables++] = (ig_cmd_table){own, n_own, own_dst};
    ig_cmd_spec spec = {tables, n_tables, NULL, 0, 1};
    int first = 0;
    int rc = ig_cmd_parse(cmd, n, args, &spec, cfg, &first);
    if (rc < 0 && first < n)
        rc = ig_cmd_usage_error(cmd, "unexpected argument '%s' (one CONFIG file, then options)",
                                args[first]);
    free(args);
    return rc;
}

int ig_cmd_train(const ig_command *cmd, int argc, char **argv) {
    /* `ingot train CONFIG ...`: the config file is the first argument */
    ig_train_config t;
    ig_common_flags flags = {0};
    train_cli cli = {0};
    ig_config *cfg = NULL;
    if (argc < 2)
        return ig_cmd_usage_error(cmd, "a CONFIG is missing: ingot train CONFIG.yaml [options] "
                                       "(e.g. configs/gpt-tiny.yaml)");
    int rc = ig_cmd_parse_train(cmd, argc, argv, &t, &flags, ig_train_cli_keys, ig_train_n_cli_keys,
                                &cli, &cfg);
    if (rc < 0 && *cli.resume && cli.force)
        rc = ig_cmd_usage_error(cmd, "--resume continues a run and --force starts one over: give "
                                     "one of them");
    if (rc < 0 && !ig_config_is_set(cfg, "data.path") && !*cli.resume)
        rc = ig_cmd_usage_error(cmd, "no data: give a CONFIG with data.path (or --data-path)");
    if (rc >= 0) {
        ig_config_free(cfg);
        return rc;
    }
    if (*cli.resume) t.run_dir = cli.resume;

    /* parallel.timeout holds from the first instant: MPI_Init waits for every rank, before the
     * trainer's watchdog can start (which then takes over) */
    ig_start_guard *guard = ig_start_guard_arm(t.timeout, t.run_dir);
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_comm *comm = NULL;
    ig_train_result res = {0};
    ig_status st = ig_cmd_ctx(&ctx, &flags, &err);
    if (st == IG_OK) st = ig_comm_world(&comm, ctx, "train", &err);
    ig_start_guard_phase(guard, "starting training (until its watchdog runs)");
    if (st == IG_OK) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESETHAND | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        ig_train_opts o = {.cfg = &t,
                           .config = cfg,
                           .resume = *cli.resume != 0,
                           .overwrite = cli.force,
                           .stop = (const volatile int *)&stop_requested,
                           .log = stdout,
                           .quiet = flags.quiet,
                           .watched = stand_down,
                           .watched_user = guard,
                           .config_path = argv[1][0] != '-' ? argv[1] : NULL};
        st = ig_train_run(ctx, comm, &o, &res, &err);
        if (st == IG_OK && !flags.quiet && !res.stopped && ig_comm_rank(comm) == 0) {
            if (isfinite(res.loss))
                printf("done: %lld steps, loss %.6f; checkpoint %s\n", (long long)res.step,
                       res.loss, res.checkpoint);
            else /* nothing ran: a finished run resumed */
                printf("done: %lld steps; checkpoint %s\n", (long long)res.step, res.checkpoint);
        }
    }
    rc = st != IG_OK ? ig_cmd_fail(&err) : res.stopped ? IG_EXIT_STOPPED : IG_EXIT_OK;
    fflush(stdout);
    fflush(stderr);
    ig_start_guard_free(guard);
    ig_comm_free(comm);
    ig_ctx_free(ctx);
    ig_config_free(cfg);
    return rc;
}
