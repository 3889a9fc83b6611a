/* cmd_blend.c - `ingot blend`: what a blend of shard prefixes (Megatron's --data-path) will draw
 * from each source: target weight, achieved fraction, samples drawn, samples its index was built
 * for, and epochs (a source drawn for more than one epoch is repeated). Thin over
 * ig_data_stream_open (loader.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmd_data_args.h"

const char ig_usage_blend[] =
    "usage: ingot blend --seq-len L --samples N [options] W1 P1 [W2 P2 ...]\n"
    "       ingot blend --seq-len L --samples N [options] P\n"
    "\n"
    "Builds the GPT sample index of each shard prefix and their blend exactly as Megatron-Core\n"
    "(GPTDataset, BlendedDataset), and reports per source the target weight, the achieved\n"
    "fraction, the samples drawn, the samples its index holds and its epochs.\n"
    "\n" IG_DATA_USAGE "output:\n"
    "  --json                  one JSON object instead of the table\n"
    "\n"
    "examples:\n"
    "  ingot blend --seq-len 1024 --samples 100000 out/shakespeare\n"
    "  ingot blend --seq-len 2048 --samples 1000000 --split 969,30,1 0.7 out/web 0.3 out/code\n"
    "  ingot blend --seq-len 2048 --samples 1000000 --cache-dir cache --json 0.7 out/web 0.3 "
    "out/code\n";

typedef struct blend_args {
    int json;
} blend_args;

static const ig_cfg_key blend_keys[] = {
    IG_KEY_BOOL("blend.json", blend_args, json, "false", "one JSON object instead of the table"),
};

typedef struct row {
    const char *prefix;
    ig_blend_source_info info;
} row;

static void print_table(const ig_data_args *a, const ig_data_stream *ds, const row *rows,
                        size_t n) {
    char key[17];
    ig_hash64_hex(ig_data_stream_key(ds), key);
    printf("%s: %llu samples of %u+1 tokens, seed %u, split %s (%s), key %s\n",
           a->r.weighted ? "blend" : "dataset", (unsigned long long)ig_data_stream_num_samples(ds),
           a->r.opts.seq_len, a->r.opts.seed, a->dc.split, ig_data_args_part(a), key);
    printf("%-3s %8s %9s %12s %12s %12s %7s  %s\n", "#", "weight", "achieved", "drawn", "index",
           "sequences", "epochs", "prefix");
    for (size_t k = 0; k < n; k++) {
        const ig_blend_source_info *s = &rows[k].info;
        printf("%-3zu %8.4f %9.4f %12llu %12llu %12llu %7llu  %s%s\n", k, s->weight, s->achieved,
               (unsigned long long)s->drawn, (unsigned long long)s->built,
               (unsigned long long)(s->seq_end - s->seq_begin), (unsigned long long)s->epochs,
               rows[k].prefix, s->epochs > 1 ? "  (repeated)" : "");
    }
}

static int print_json(const ig_data_args *a, const ig_data_stream *ds, const row *rows, size_t n) {
    char key[17];
    ig_hash64_hex(ig_data_stream_key(ds), key);
    json_t *srcs = json_array();
    for (size_t k = 0; k < n; k++) {
        const ig_blend_source_info *s = &rows[k].info;
        json_array_append_new(
            srcs, json_pack("{s:s, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}", "prefix",
                            rows[k].prefix, "weight", s->weight, "achieved", s->achieved, "target",
                            (json_int_t)s->target, "drawn", (json_int_t)s->drawn, "requested",
                            (json_int_t)s->requested, "built", (json_int_t)s->built, "epochs",
                            (json_int_t)s->epochs, "seq_begin", (json_int_t)s->seq_begin, "seq_end",
                            (json_int_t)s->seq_end, "repeated", s->epochs > 1));
    }
    json_t *root = json_pack(
        "{s:b, s:I, s:I, s:I, s:I, s:s, s:s, s:s, s:o}", "blend", a->r.weighted, "seq_len",
        (json_int_t)a->r.opts.seq_len, "samples_requested", (json_int_t)a->r.opts.num_samples,
        "samples", (json_int_t)ig_data_stream_num_samples(ds), "seed", (json_int_t)a->r.opts.seed,
        "split", a->dc.split, "split_part", ig_data_args_part(a), "key", key, "sources", srcs);
    if (!root) return ig_cmd_failf("cannot build the JSON output");
    char *text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (!text) return ig_cmd_failf("out of memory");
    puts(text);
    free(text);
    return IG_EXIT_OK;
}

/* One row per source; a prefix alone (no blend) is described as a blend of one that draws
 * everything. */
static void collect(const ig_data_args *a, const ig_data_stream *ds, row *rows) {
    const ig_blend *b = ig_data_stream_blend(ds);
    for (size_t k = 0; k < a->r.opts.n; k++) {
        rows[k].prefix = a->r.opts.prefixes[k];
        if (b) {
            rows[k].info = ig_blend_source_stats(b, k);
            continue;
        }
        const ig_gpt_index *idx = ig_data_stream_index(ds);
        uint64_t begin, end;
        ig_split_range(&a->r.opts.split, a->r.opts.part,
                       ig_dataset_sequences(ig_data_stream_dataset(ds, 0)), &begin, &end, NULL);
        uint64_t built = ig_gpt_index_num_samples(idx);
        rows[k].info = (ig_blend_source_info){.weight = 1,
                                              .target = a->r.opts.num_samples,
                                              .requested = a->r.opts.num_samples,
                                              .built = built,
                                              .drawn = built,
                                              .achieved = 1,
                                              .epochs = ig_gpt_index_num_epochs(idx),
                                              .seq_begin = begin,
                                              .seq_end = end};
    }
}

int ig_cmd_blend(const ig_command *cmd, int argc, char **argv) {
    ig_data_args a;
    blend_args ba = {0};
    ig_cmd_table own = {blend_keys, sizeof blend_keys / sizeof blend_keys[0], &ba};
    int rc = ig_data_args_parse(cmd, argc, argv, &a, &own, 1);
    if (rc >= 0) {
        ig_data_args_free(&a);
        return rc;
    }
    rc = IG_EXIT_OK;
    ig_err err = {0};
    ig_ctx *ctx = NULL;
    ig_data_stream *ds = NULL;
    row *rows = NULL;
    if (ig_cmd_ctx(&ctx, &a.flags, &err) != IG_OK ||
        ig_data_stream_open(&ds, ctx, &a.r.opts, &err) != IG_OK) {
        rc = ig_cmd_fail(&err);
        goto done;
    }
    rows = calloc(a.r.opts.n, sizeof *rows);
    if (!rows) {
        rc = ig_cmd_failf("out of memory");
        goto done;
    }
    collect(&a, ds, rows);
    if (ba.json) {
        rc = print_json(&a, ds, rows, a.r.opts.n);
    } else {
        print_table(&a, ds, rows, a.r.opts.n);
    }
done:
    free(rows);
    ig_data_stream_close(ds);
    ig_ctx_free(ctx);
    ig_data_args_free(&a);
    return rc;
}
