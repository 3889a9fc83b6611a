/* cmd_plan.c - `ingot plan CONFIG.yaml --gpus N [--nodes K] [--gpu-memory 80GB] [--json]`: the
 * layouts a training configuration can run under on N GPUs (tp, pp, dp, sequence parallelism,
 * ZeRO stage, recomputation, micro-batch), each with the memory of its largest rank by buffer, the
 * bytes its ranks send per step and group, and an estimated step time; the fastest that fit
 * first. Thin over ig_plan_create (train/plan/plan.c), which sizes every rank as the trainer does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cmd.h"
#include "dataset/dataset.h"
#include "train/train.h"

const char ig_usage_plan[] =
    "usage: ingot plan CONFIG.yaml --gpus N [--nodes K] [--gpu h100|a100|h200|cpu]\n"
    "                  [--gpu-memory SIZE] [--gpu-tflops F] [--intra-bw GBs] [--inter-bw GBs]\n"
    "                  [--clip FxHxW] [--top N] [--all] [--configured] [--json]\n"
    "                  [--set KEY=VALUE]...\n"
    "\n"
    "Lists the layouts CONFIG.yaml can train under on N GPUs - tensor parallel tp (within a\n"
    "node), pipeline stages pp, data parallel dp, Megatron's sequence parallelism (sp, with\n"
    "tp > 1) or Ulysses' sp_size (dit), ZeRO stage, train.recompute and train.micro_batch (the\n"
    "configured one and its divisors; the global batch is kept) - as ingot train would accept\n"
    "them, and for each the memory of its largest rank split into parameters (with fp32 master\n"
    "weights), gradients, optimizer state (AdamW moments, EMA), activations (the 1F1B schedule's\n"
    "peak: the first stage holds pp micro-batches), communication buffers and workspace, the\n"
    "bytes a rank sends per step in each group (tp, sp, pp, dp, emb: what --comm-stats\n"
    "measures), and an estimated step time. Those that fit are listed first, fastest first.\n"
    "\n"
    "The memory is the trainer's own sizing of every pipeline stage's rank (the tensor table,\n"
    "the family's activation plan, ZeRO's pieces), plus on GPUs an allowance for what libraries\n"
    "take: the CUDA context (512 MiB), cuBLASLt's workspace (32 MiB) and NCCL's buffers (128 MiB\n"
    "per communicator of more than one rank). ingot train prints the same estimate for its own\n"
    "layout and refuses, before it allocates, a run that does not fit.\n"
    "\n"
    "The step time is a model, for ranking layouts: compute = the FLOPs (3x the forward's, plus\n"
    "the forward again under full recomputation or the attention core under selective) at the\n"
    "GEMM rate, over tp x sp ranks, on the slowest stage; bubble = compute x (pp - 1) / micro-\n"
    "batches; tp and sp collectives = their bytes / the link's ring bandwidth (NVLink in a node,\n"
    "the network across nodes), on the critical path; pp and emb = their bytes / the link; dp =\n"
    "what of the gradients' reduction outlasts the backward that overlaps it (ZeRO-2: each\n"
    "micro-batch's; ZeRO-3's gathers: each micro-batch's compute), plus ZeRO's all-gather of\n"
    "the parameters after the update. tok/s = the global batch's tokens / step. The optimizer's\n"
    "update and the kernels outside GEMMs are left out: the figures rank layouts, as good as the\n"
    "GEMM rate and bandwidths given; they do not promise a time.\n"
    "\n"
    "options:\n"
    "  --gpus N          the processes, one GPU each (required)\n"
    "  --nodes K         the nodes they are on (default: 8 GPUs to a node)\n"
    "  --gpu NAME        the figures of a GPU (default h100): h100 85.5 GB (81559 MiB), 700\n"
    "                    TFLOP/s bf16 GEMMs, 360 GB/s NVLink, 45 GB/s InfiniBand per GPU; a100\n"
    "                    85.9 GB, 280, 230, 22; h200 150.8 GB, as h100 otherwise (what cuBLAS\n"
    "                    and NCCL reach, not the datasheets'); cpu: CPU ranks (fp32, the memory\n"
    "                    this process may take, shared by a node's ranks)\n"
    "  --gpu-memory SIZE a GPU's memory, e.g. 80GB (10^9 bytes) or 80GiB\n"
    "  --gpu-tflops F    the GEMM rate a GPU reaches, TFLOP/s (ingot train's MFU is against\n"
    "                    the rate it measures at the start: model FLOPs / step / that rate)\n"
    "  --intra-bw B      GB/s a rank's ring collectives reach within a node\n"
    "  --inter-bw B      GB/s across nodes\n"
    "  --clip FxHxW      dit: the clips' frames x height x width (default: the config's\n"
    "                    model.clip; ingot train reads them from the shards; or --set\n"
    "                    model.seq_len=TOKENS)\n"
    "  --top N           the layouts shown (default 20; 0: all)\n"
    "  --all             also those that do not fit\n"
    "  --configured      only the layout the configuration gives (parallel.*, train.micro_batch,\n"
    "                    train.recompute), with every pipeline stage's rank\n"
    "  --json            JSON for scripts, on one line: bytes as integers, times in seconds\n"
    "  --set KEY=VALUE   override a key of CONFIG.yaml (as ingot train takes it)\n"
    "  --threads N, --quiet, --verbose\n"
    "\n"
    "A language model needs model.vocab_size: from the config, or from the manifests of the\n"
    "data.path shards when they exist. Exit status 1 when no layout fits (the list then shows\n"
    "the smallest).\n"
    "\n"
    "examples:\n"
    "  ingot plan configs/llama-7b.yaml --gpus 8\n"
    "  ingot plan configs/llama-7b.yaml --gpus 64 --nodes 8 --gpu-memory 80GB --top 10\n"
    "  ingot plan configs/stdit-xl.yaml --gpus 8 --gpu a100 --json\n"
    "  ingot plan configs/gpt-tiny.yaml --gpus 4 --gpu cpu --configured --set parallel.tp=2\n";

typedef struct plan_args {
    int gpus, nodes, gpu, top, all, configured, json;
    uint64_t memory;
    double tflops, intra, inter;
    const char *clip;
} plan_args;

static const ig_cfg_key plan_keys[] = {
    IG_KEY_INT("plan.gpus", plan_args, gpus, "0", 0, 1048576, "the processes, one GPU each"),
    IG_KEY_INT("plan.nodes", plan_args, nodes, "0", 0, 1048576,
               "the nodes they are on (not given: 8 GPUs to a node)"),
    IG_KEY_ENUM("plan.gpu", plan_args, gpu, "h100", ig_plan_gpus, "the figures of a GPU"),
    IG_KEY_SIZE("plan.gpu_memory", plan_args, memory, "0",
                "a GPU's memory (not given: the --gpu's)"),
    IG_KEY_FLOAT("plan.gpu_tflops", plan_args, tflops, "0", 0, 1e9,
                 "the GEMM rate a GPU reaches, TFLOP/s (not given: the --gpu's)"),
    IG_KEY_FLOAT("plan.intra_bw", plan_args, intra, "0", 0, 1e9,
                 "GB/s of ring collectives within a node (not given: the --gpu's)"),
    IG_KEY_FLOAT("plan.inter_bw", plan_args, inter, "0", 0, 1e9,
                 "GB/s of ring collectives across nodes (not given: the --gpu's)"),
    IG_KEY_STRING("plan.clip", plan_args, clip, "", "dit: the clips' FRAMESxHEIGHTxWIDTH"),
    IG_KEY_INT("plan.top", plan_args, top, "20", 0, 1e9, "the layouts shown (0: all)"),
    IG_KEY_BOOL("plan.all", plan_args, all, "false", "also the layouts that do not fit"),
    IG_KEY_BOOL("plan.configured", plan_args, configured, "false",
                "only the layout the configuration gives"),
    IG_KEY_BOOL("plan.json", plan_args, json, "false", "JSON for scripts"),
};

static const char *const recomputes[] = {"none", "selective", "full"};

static const char *sp_name(const ig_plan_layout *l) {
    return l->usp > 1 ? "ulysses" : l->sp ? "megatron" : "none";
}

/* A language model's vocabulary from the manifests of its data.path shards (0: none readable). */
static int shards_vocab(const ig_data_config *d) {
    uint64_t v = 0;
    for (size_t i = 0; i < d->n_path; i++) {
        char *end = NULL;
        strtod(d->path[i], &end);
        if (end && *end == '\0') continue; /* a blend's weight */
        ig_manifest m;
        memset(&m, 0, sizeof m);
        if (ig_manifest_read(&m, d->path[i], NULL) == IG_OK && m.vocab_size > v) v = m.vocab_size;
        ig_manifest_clear(&m);
    }
    return v <= 1073741824 ? (int)v : 0;
}

/* --clip FxHxW into the tokens of a clip (model.seq_len). 0 with a usage error printed. */
static int clip_tokens(const ig_command *cmd, const char *clip, ig_model_config *shape) {
    int F = 0, H = 0, W = 0, used = 0;
    if (sscanf(clip, "%dx%dx%d%n", &F, &H, &W, &used) != 3 || clip[used] || F < 1 || H < 1 ||
        W < 1) {
        ig_cmd_usage_error(cmd, "--clip %s: expected FRAMESxHEIGHTxWIDTH, e.g. 16x256x256", clip);
        return 0;
    }
    ig_model_config c = *shape;
    ig_err err = {0};
    int tokens = 0;
    ig_status st = ig_model_config_check(&c, &err);
    if (st == IG_OK) st = ig_model_clip_tokens(&c, F, H, W, &tokens, &err);
    if (st != IG_OK) {
        ig_cmd_usage_error(cmd, "--clip %s: %s", clip, err.msg);
        return 0;
    }
    shape->seq_len = tokens;
    return 1;
}

/* ---- text ------------------------------------------------------------------------------------ */

static double gb(uint64_t bytes) {
    return (double)bytes / 1e9;
}

static void print_columns(void) {
    printf("   tp  pp  dp  sp          zero  recompute  mb  acc |  params   grads   optim    acts  "
           " comm   work   total GB | tp      sp      pp      dp      emb GB/step |  step s     "
           "tok/s  fits\n");
}

static void print_row(const ig_plan_entry *e);

/* --configured when the configured layout does not fit: the fastest layouts of as many GPUs that
 * do (plan `others`, every layout), as --set options. */
static void print_others(const ig_plan *p, const ig_plan *others, const char *config) {
    char need[32], have[32];
    const ig_plan_world *w = &p->world;
    printf("\nthe configured layout does not fit in %s: it needs %s a rank; %zu other layouts of "
           "%d %s fit, the fastest:\n\n",
           ig_format_bytes((double)w->memory, have, sizeof have),
           ig_format_bytes((double)p->entries[0].mem.total, need, sizeof need), others->n_fit,
           w->gpus, w->device ? "GPUs" : "CPU ranks");
    print_columns();
    size_t n = others->n_fit < 3 ? others->n_fit : 3;
    for (size_t i = 0; i < n; i++) print_row(&others->entries[i]);
    const ig_plan_layout *l = &others->entries[0].layout;
    char sp[96] = "";
    if (l->usp > 1)
        snprintf(sp, sizeof sp, " --set parallel.sp_mode=ulysses --set parallel.sp_size=%d",
                 l->usp);
    else if (l->sp)
        snprintf(sp, sizeof sp, " --set parallel.sp=true");
    printf("\n  the fastest as options: --set parallel.tp=%d --set parallel.pp=%d --set "
           "parallel.zero=%d --set train.micro_batch=%d --set train.recompute=%s%s\n"
           "  all of them: ingot plan %s --gpus %d (with this run's --set)\n",
           l->tp, l->pp, l->zero, l->micro_batch, recomputes[l->recompute], sp, config, w->gpus);
}

static void print_header(const ig_plan *p, const char *config, size_t shown, int configured) {
    char shape[512];
    const ig_plan_world *w = &p->world;
    int nodes = w->gpus / w->gpus_per_node, big = p->params >= 1000000000;
    printf("%s: %s\n", config, ig_model_describe(&p->shape, shape, sizeof shape));
    printf("  %.3g%s parameters; %d %s of %d tokens per step (micro-batch %d), %s; %.3g GFLOP per "
           "token forward\n",
           (double)p->params / (big ? 1e9 : 1e6), big ? "B" : "M", p->global_batch,
           ig_model_io_of(&p->shape).units, p->T, p->B,
           p->act_size == 2 ? "bf16 (fp32 master weights and AdamW)" : "fp32",
           p->flops_per_token / 1e9);
    printf("  %d %s on %d node%s of %d: %.1f GB each, %.3g TFLOP/s GEMM, %.3g GB/s in a node, "
           "%.3g GB/s between nodes\n",
           w->gpus, w->device ? "GPUs" : "CPU ranks", nodes, nodes == 1 ? "" : "s",
           w->gpus_per_node, gb(w->memory), w->flops / 1e12, w->intra_bw / 1e9, w->inter_bw / 1e9);
    if (configured)
        printf("  the configured layout %s\n\n", p->n_fit ? "fits" : "does not fit");
    else
        printf("  %zu layouts the trainer accepts (%zu more refused by its checks), %zu fit%s\n\n",
               p->n, p->n_refused, p->n_fit,
               !p->n_fit          ? ": the smallest first"
               : shown < p->n_fit ? ": the fastest first"
                                  : "");
    print_columns();
}

/* A volume of bytes in GB to three digits, whole GB from 1000 on (not 4.23e+03) into buf[16]. */
static const char *vol(char *buf, uint64_t bytes) {
    double g = gb(bytes);
    snprintf(buf, 16, g < 1000 ? "%.3g" : "%.0f", g);
    return buf;
}

static void print_row(const ig_plan_entry *e) {
    const ig_plan_layout *l = &e->layout;
    const ig_plan_memory *m = &e->mem;
    char sp[32], v[5][16];
    if (l->usp > 1)
        snprintf(sp, sizeof sp, "ulysses %d", l->usp);
    else
        snprintf(sp, sizeof sp, "%s", l->sp ? "megatron" : "-");
    printf("  %3d %3d %3d  %-10s  %4d  %-9s %3d %4d | %7.2f %7.2f %7.2f %7.2f %6.2f %6.2f %7.2f    "
           "| %-7s %-7s %-7s %-7s %-7s       | %7.3f %9.0f  %s\n",
           l->tp, l->pp, l->dp, sp, l->zero, recomputes[l->recompute], l->micro_batch, l->accum,
           gb(m->params), gb(m->grads), gb(m->optim), gb(m->acts), gb(m->comm), gb(m->workspace),
           gb(m->total), vol(v[0], e->sent[IG_PLAN_TP]), vol(v[1], e->sent[IG_PLAN_SP]),
           vol(v[2], e->sent[IG_PLAN_PP]), vol(v[3], e->sent[IG_PLAN_DP]),
           vol(v[4], e->sent[IG_PLAN_EMB]), e->time.step, e->tokens_per_s, e->fits ? "yes" : "no");
}

static void print_stages(const ig_plan_entry *e) {
    printf("\n  stage  params   grads   optim    acts   comm   work   total GB | tp      sp      "
           "pp      dp      emb GB/step\n");
    for (int s = 0; s < e->layout.pp; s++) {
        const ig_plan_memory *m = &e->stage_mem[s];
        const uint64_t *b = e->stage_sent[s];
        char v[5][16];
        printf("  %5d %7.2f %7.2f %7.2f %7.2f %6.2f %6.2f %7.2f    | %-7s %-7s %-7s %-7s %-7s\n", s,
               gb(m->params), gb(m->grads), gb(m->optim), gb(m->acts), gb(m->comm),
               gb(m->workspace), gb(m->total), vol(v[0], b[IG_PLAN_TP]), vol(v[1], b[IG_PLAN_SP]),
               vol(v[2], b[IG_PLAN_PP]), vol(v[3], b[IG_PLAN_DP]), vol(v[4], b[IG_PLAN_EMB]));
    }
    const ig_plan_time *t = &e->time;
    printf("\n  step %.4g s = compute %.4g + bubble %.4g + tp %.4g + sp %.4g + pp %.4g + emb %.4g "
           "+ dp %.4g\n",
           t->step, t->compute, t->bubble, t->tp, t->sp, t->pp, t->emb, t->dp);
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static json_t *json_memory(const ig_plan_memory *m) {
    json_t *o = json_object();
    json_object_set_new(o, "params", json_integer((json_int_t)m->params));
    json_object_set_new(o, "master", json_integer((json_int_t)m->master));
    json_object_set_new(o, "grads", json_integer((json_int_t)m->grads));
    json_object_set_new(o, "optim", json_integer((json_int_t)m->optim));
    json_object_set_new(o, "activations", json_integer((json_int_t)m->acts));
    json_object_set_new(o, "activations_per_micro_batch", json_integer((json_int_t)m->acts_slot));
    json_object_set_new(o, "comm", json_integer((json_int_t)m->comm));
    json_object_set_new(o, "workspace", json_integer((json_int_t)m->workspace));
    json_object_set_new(o, "total", json_integer((json_int_t)m->total));
    return o;
}

static json_t *json_sent(const uint64_t *b) {
    json_t *o = json_object();
    for (int g = 0; g < IG_PLAN_GROUPS; g++)
        json_object_set_new(o, ig_plan_group_names[g], json_integer((json_int_t)b[g]));
    return o;
}

static json_t *json_entry(const ig_plan_entry *e, int stages) {
    const ig_plan_layout *l = &e->layout;
    json_t *o = json_object();
    json_object_set_new(o, "tp", json_integer(l->tp));
    json_object_set_new(o, "pp", json_integer(l->pp));
    json_object_set_new(o, "dp", json_integer(l->dp));
    json_object_set_new(o, "sp", json_string(sp_name(l)));
    json_object_set_new(o, "sp_size", json_integer(l->usp));
    json_object_set_new(o, "zero", json_integer(l->zero));
    json_object_set_new(o, "recompute", json_string(recomputes[l->recompute]));
    json_object_set_new(o, "micro_batch", json_integer(l->micro_batch));
    json_object_set_new(o, "accum", json_integer(l->accum));
    json_object_set_new(o, "fits", json_boolean(e->fits));
    json_t *mem = json_memory(&e->mem);
    json_object_set_new(mem, "stage", json_integer(e->worst_stage));
    json_object_set_new(o, "memory", mem);
    json_object_set_new(o, "sent", json_sent(e->sent));
    const ig_plan_time *t = &e->time;
    json_t *tm = json_object();
    const struct {
        const char *k;
        double v;
    } parts[] = {{"step", t->step}, {"compute", t->compute}, {"bubble", t->bubble}, {"tp", t->tp},
                 {"sp", t->sp},     {"pp", t->pp},           {"emb", t->emb},       {"dp", t->dp}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        json_object_set_new(tm, parts[i].k, json_real(parts[i].v));
    json_object_set_new(o, "time", tm);
    json_object_set_new(o, "tokens_per_s", json_real(e->tokens_per_s));
    if (stages) {
        json_t *a = json_array();
        for (int s = 0; s < l->pp; s++) {
            json_t *so = json_object();
            json_object_set_new(so, "stage", json_integer(s));
            json_object_set_new(so, "memory", json_memory(&e->stage_mem[s]));
            json_object_set_new(so, "sent", json_sent(e->stage_sent[s]));
            json_array_append_new(a, so);
        }
        json_object_set_new(o, "stages", a);
    }
    return o;
}

static int print_json(const ig_plan *p, const char *config, size_t shown, int stages) {
    const ig_plan_world *w = &p->world;
    json_t *root = json_object(), *model = json_object(), *world = json_object();
    char shape[512];
    json_object_set_new(root, "config", json_string(config));
    json_object_set_new(model, "arch", json_string(ig_model_archs[p->shape.arch]));
    json_object_set_new(model, "describe",
                        json_string(ig_model_describe(&p->shape, shape, sizeof shape)));
    json_object_set_new(model, "params", json_integer((json_int_t)p->params));
    json_object_set_new(model, "tokens_per_sample", json_integer(p->T));
    json_object_set_new(model, "micro_batch", json_integer(p->B));
    json_object_set_new(model, "global_batch", json_integer(p->global_batch));
    json_object_set_new(model, "act_bytes", json_integer((json_int_t)p->act_size));
    json_object_set_new(model, "flops_per_token", json_real(p->flops_per_token));
    json_object_set_new(root, "model", model);
    json_object_set_new(world, "gpus", json_integer(w->gpus));
    json_object_set_new(world, "gpus_per_node", json_integer(w->gpus_per_node));
    json_object_set_new(world, "device", json_string(w->device ? "cuda" : "cpu"));
    json_object_set_new(world, "memory", json_integer((json_int_t)w->memory));
    json_object_set_new(world, "gemm_flops", json_real(w->flops));
    json_object_set_new(world, "intra_bw", json_real(w->intra_bw));
    json_object_set_new(world, "inter_bw", json_real(w->inter_bw));
    json_object_set_new(root, "world", world);
    json_object_set_new(root, "accepted", json_integer((json_int_t)p->n));
    json_object_set_new(root, "refused", json_integer((json_int_t)p->n_refused));
    json_object_set_new(root, "fit", json_integer((json_int_t)p->n_fit));
    json_t *a = json_array();
    for (size_t i = 0; i < shown; i++) json_array_append_new(a, json_entry(&p->entries[i], stages));
    json_object_set_new(root, "layouts", a);
    int rc = json_dumpf(root, stdout, JSON_COMPACT | JSON_REAL_PRECISION(6)) == 0 ? 0 : -1;
    putchar('\n');
    json_decref(root);
    return rc;
}

/* ---- the command ----------------------------------------------------------------------------- */

static int by_memory(const void *a, const void *b) {
    const ig_plan_entry *x = a, *y = b;
    if (x->mem.total != y->mem.total) return x->mem.total < y->mem.total ? -1 : 1;
    return x->time.step < y->time.step ? -1 : x->time.step > y->time.step;
}

int ig_cmd_plan(const ig_command *cmd, int argc, char **argv) {
    /* `ingot plan CONFIG ...`: the config file is the first argument, as for ingot train */
    if (argc < 2)
        return ig_cmd_usage_error(cmd, "a CONFIG is missing: ingot plan CONFIG.yaml --gpus N "
                                       "(e.g. configs/llama-7b.yaml)");
    const char *config = argc > 1 && argv[1][0] != '-' ? argv[1] : "(no config)";
    ig_train_config t;
    ig_common_flags flags = {0};
    plan_args a = {0};
    ig_config *cfg = NULL;
    int rc = ig_cmd_parse_train(cmd, argc, argv, &t, &flags, plan_keys,
                                sizeof plan_keys / sizeof plan_keys[0], &a, &cfg);
    if (rc < 0 && a.gpus < 1) rc = ig_cmd_usage_error(cmd, "--gpus N is required (N >= 1)");
    /* left out, each takes the --gpu's figure (or 8 GPUs to a node); given, 0 is no figure */
    static const struct {
        const char *key, *flag, *range, *left_out;
    } given[] = {{"plan.nodes", "--nodes", "a whole number in [1, --gpus]", "8 GPUs to a node"},
                 {"plan.gpu_memory", "--gpu-memory", "a size > 0, e.g. 80GB", "the --gpu's"},
                 {"plan.gpu_tflops", "--gpu-tflops", "TFLOP/s in (0, 1e9]", "the --gpu's"},
                 {"plan.intra_bw", "--intra-bw", "GB/s in (0, 1e9]", "the --gpu's"},
                 {"plan.inter_bw", "--inter-bw", "GB/s in (0, 1e9]", "the --gpu's"}};
    const double value[] = {a.nodes, (double)a.memory, a.tflops, a.intra, a.inter};
    for (size_t i = 0; rc < 0 && i < sizeof given / sizeof given[0]; i++)
        if (value[i] == 0 && ig_config_is_set(cfg, given[i].key))
            rc = ig_cmd_usage_error(cmd, "%s 0: must be %s (left out: %s)", given[i].flag,
                                    given[i].range, given[i].left_out);
    int nodes = a.nodes ? a.nodes : (a.gpus + 7) / 8;
    if (rc < 0 && (nodes > a.gpus || a.gpus % nodes))
        rc = ig_cmd_usage_error(cmd, "--nodes %d: %d GPUs do not split evenly over %d nodes", nodes,
                                a.gpus, nodes);
    ig_plan_world w = {.gpus = a.gpus, .gpus_per_node = nodes ? a.gpus / nodes : 1};
    ig_err err = {0};
    if (rc < 0 && ig_plan_world_gpu(&w, ig_plan_gpus[a.gpu], &err) != IG_OK) rc = ig_cmd_fail(&err);
    if (rc < 0 && ig_train_config_resolve(&t, cfg, &err) != IG_OK) rc = ig_cmd_fail(&err);
    int clips = rc < 0 && !strcmp(ig_model_io_of(&t.model).input, "clips");
    /* a clip's shape: --clip, else the config's model.clip */
    char from_config[64] = "";
    int has_clip = 0, F = 0, H = 0, W = 0;
    if (clips && !*a.clip && ig_train_config_clip(&t, &has_clip, &F, &H, &W, &err) != IG_OK)
        rc = ig_cmd_fail(&err);
    if (has_clip) snprintf(from_config, sizeof from_config, "%dx%dx%d", F, H, W);
    const char *clip = *a.clip ? a.clip : from_config;
    if (rc < 0 && clips && *clip && !clip_tokens(cmd, clip, &t.model)) rc = IG_EXIT_USAGE;
    if (rc < 0 && clips && !*clip && !ig_config_is_set(cfg, "model.seq_len"))
        rc = ig_cmd_usage_error(cmd,
                                "model.arch %s: the tokens of a clip come from the shards "
                                "in ingot train: give the config a model.clip: [FRAMES, HEIGHT, "
                                "WIDTH], or --clip FRAMESxHEIGHTxWIDTH (or --set "
                                "model.seq_len=TOKENS)",
                                ig_model_archs[t.model.arch]);
    if (rc >= 0) {
        ig_config_free(cfg);
        return rc;
    }
    /* CPU ranks on a node share what this process may take, as ingot train divides it */
    if (!w.device && !a.memory && w.gpus_per_node > 1) w.memory /= (uint64_t)w.gpus_per_node;
    if (a.memory) w.memory = a.memory;
    if (a.tflops > 0) w.flops = a.tflops * 1e12;
    if (a.intra > 0) w.intra_bw = a.intra * 1e9;
    if (a.inter > 0) w.inter_bw = a.inter * 1e9;
    if (!clips && t.model.vocab_size == 0) t.model.vocab_size = shards_vocab(&t.data);

    ig_ctx *ctx = NULL;
    ig_plan *p = NULL;
    ig_status st = ig_cmd_ctx(&ctx, &flags, &err);
    if (st == IG_OK) st = ig_plan_create(&p, ctx, &t, &w, a.configured, &err);
    /* the configured layout does not fit: which others do */
    ig_plan *others = NULL;
    if (st == IG_OK && a.configured && p->n && !p->n_fit && !a.json)
        st = ig_plan_create(&others, ctx, &t, &w, 0, &err);
    if (st != IG_OK) {
        rc = ig_cmd_fail(&err);
    } else if (a.configured && p->n == 0) {
        rc = ig_cmd_failf("the configured layout is refused: %s", p->refused);
    } else {
        size_t avail = a.all || p->n_fit == 0 ? p->n : p->n_fit;
        size_t shown = a.top && (size_t)a.top < avail ? (size_t)a.top : avail;
        if (p->n_fit == 0) /* nothing fits: the smallest first, to see by how much */
            qsort(p->entries, p->n, sizeof *p->entries, by_memory);
        if (a.json) {
            if (print_json(p, config, shown, a.configured) != 0)
                rc = ig_cmd_failf("writing the JSON to stdout failed");
        } else {
            print_header(p, config, shown, a.configured);
            for (size_t i = 0; i < shown; i++) print_row(&p->entries[i]);
            if (a.configured && shown == 1) print_stages(&p->entries[0]);
            if (p->n == 0) {
                printf("\nno layout of %d GPUs is accepted; the last refused: %s\n", w.gpus,
                       p->refused);
            } else if (p->n_fit == 0 && a.configured && others && others->n_fit) {
                print_others(p, others, config);
            } else if (p->n_fit == 0) {
                char need[32], have[32];
                printf("\nnothing fits in %s: the smallest needs %s a rank (--all lists every "
                       "layout, --gpus more GPUs)\n",
                       ig_format_bytes((double)w.memory, have, sizeof have),
                       ig_format_bytes((double)p->entries[0].mem.total, need, sizeof need));
            }
        }
        if (rc < 0) rc = p->n_fit ? IG_EXIT_OK : IG_EXIT_FAIL;
    }
    fflush(stdout);
    ig_plan_free(others);
    ig_plan_free(p);
    ig_ctx_free(ctx);
    ig_config_free(cfg);
    return rc;
}
