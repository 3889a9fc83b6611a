/* ingot.c - the ingot program: a table of subcommands, each a short file in tools/cmd/ over the
 * public library API. This file only dispatches. */
#include <stdio.h>
#include <string.h>

#include "cmd.h"

const ig_command ig_commands[] = {
    {"tokenize", "print the token ids of text on stdin", ig_usage_tokenize, ig_cmd_tokenize},
    {"detokenize", "print the text of token ids on stdin", ig_usage_detokenize, ig_cmd_detokenize},
    {"preprocess", "tokenize text into token shards (Megatron's), or cut videos into clip shards",
     ig_usage_preprocess, ig_cmd_preprocess},
    {"inspect", "show what a token or clip shard holds, or one document or clip", ig_usage_inspect,
     ig_cmd_inspect},
    {"verify", "check token or clip shards: structure, manifest and checksums", ig_usage_verify,
     ig_cmd_verify},
    {"merge", "concatenate token shards into one", ig_usage_merge, ig_cmd_merge},
    {"blend", "show what a weighted blend of shards draws from each source", ig_usage_blend,
     ig_cmd_blend},
    {"samples", "print the micro-batches a data-parallel rank would get", ig_usage_samples,
     ig_cmd_samples},
    {"train", "train a model (GPT-2, Llama, DiT, VAE) on token or clip shards", ig_usage_train,
     ig_cmd_train},
    {"plan", "list the layouts a training config fits on N GPUs, with memory and step time",
     ig_usage_plan, ig_cmd_plan},
    {"ckpt",
     "export a checkpoint (GPT-2, Llama, DiT, VAE) as Hugging Face or diffusers files, verify or "
     "diff it",
     ig_usage_ckpt, ig_cmd_ckpt},
    {"eval", "the mean loss of a model over token shards, or of a DiT or VAE over clip shards",
     ig_usage_eval, ig_cmd_eval},
    {"sample", "generate text from a language model, or videos from a DiT", ig_usage_sample,
     ig_cmd_sample},
    {"encode-text", "the features of a text from a frozen text encoder (a T5 directory)",
     ig_usage_encode_text, ig_cmd_encode_text},
    {"config", "check a YAML config and print it with overrides applied", ig_usage_config,
     ig_cmd_config},
    {"help", "show help for ingot or one command", ig_usage_help, ig_cmd_help_cmd},
    {"version", "print the version", ig_usage_version, ig_cmd_version},
};
const size_t ig_n_commands = sizeof ig_commands / sizeof ig_commands[0];

const ig_command *ig_command_find(const char *name) {
    for (size_t i = 0; i < ig_n_commands; i++)
        if (strcmp(ig_commands[i].name, name) == 0) return &ig_commands[i];
    return NULL;
}

static void print_main_usage(FILE *out) {
    fprintf(out, "usage: ingot [--help] [--version] COMMAND [ARGS...]\n\n"
                 "ingot builds token shards from text corpora and clip shards from videos, blends\n"
                 "them into deterministic, resumable sample streams, and trains models on them\n"
                 "(GPT-2 and Llama on tokens, a video DiT and a VAE on clips).\n\ncommands:\n");
    for (size_t i = 0; i < ig_n_commands; i++)
        fprintf(out, "  %-12s %s\n", ig_commands[i].name, ig_commands[i].summary);
    fprintf(out, "\nRun 'ingot help COMMAND' or 'ingot COMMAND --help' for a command's options.\n");
}

/* "ingot: unknown command 'trian' (did you mean 'train'?)" and where the list is; returns 2. */
static int unknown_command(const char *name) {
    const char *best = NULL;
    size_t best_d = (size_t)-1, limit = strlen(name) / 4 > 2 ? strlen(name) / 4 : 2;
    for (size_t i = 0; i < ig_n_commands; i++) {
        size_t d = ig_edit_distance(name, ig_commands[i].name);
        if (d <= limit && d < best_d) best = ig_commands[i].name, best_d = d;
    }
    if (best)
        fprintf(stderr, "ingot: unknown command '%s' (did you mean '%s'?)\n", name, best);
    else
        fprintf(stderr, "ingot: unknown command '%s'\n", name);
    fprintf(stderr, "see `ingot --help` for the commands\n");
    return IG_EXIT_USAGE;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_main_usage(stderr);
        return IG_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        print_main_usage(stdout);
        return IG_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) name = "version";
    const ig_command *cmd = ig_command_find(name);
    if (!cmd) return unknown_command(name);
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return ig_cmd_help(cmd->run == ig_cmd_preprocess
                                   ? ig_cmd_preprocess_help(cmd, argc - 1, argv + 1)
                                   : cmd);
    }
    return cmd->run(cmd, argc - 1, argv + 1);
}

/* `ingot help [COMMAND]` lives here, beside the table it reads. */
const char ig_usage_help[] = "usage: ingot help [COMMAND]\n\n"
                             "Shows the list of commands, or one command's usage.\n\n"
                             "examples:\n"
                             "  ingot help\n"
                             "  ingot help preprocess\n"
                             "  ingot help preprocess video\n";

int ig_cmd_help_cmd(const ig_command *self, int argc, char **argv) {
    if (argc < 2) {
        print_main_usage(stdout);
        return IG_EXIT_OK;
    }
    const ig_command *cmd = ig_command_find(argv[1]);
    if (!cmd) return unknown_command(argv[1]);
    /* `ingot help preprocess video` */
    if (argc == 3 && cmd->run == ig_cmd_preprocess &&
        (!strcmp(argv[2], "video") || !strcmp(argv[2], "text")))
        return ig_cmd_help(ig_cmd_preprocess_help(cmd, argc - 1, argv + 1));
    if (argc > 2) return ig_cmd_usage_error(self, "expected one command name");
    return ig_cmd_help(cmd);
}
