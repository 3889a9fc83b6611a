/* plan.c - the layouts a configuration can train under on given machines (train.h's ig_plan):
 * each candidate is checked as ig_layout_create checks it (layout_check.c), every pipeline stage's
 * rank is sized by ig_model_memory and ig_optim_estimate - the buffers ig_model_create_part and
 * ig_optim_create allocate, with the 1F1B schedule's micro-batches in flight (ig_sched_slots: the
 * first stage holds pp of them) - and what it sends per step comes from plan_comm.c. The memory the
 * trainer does not allocate itself is an allowance on a device: the CUDA context (512 MiB),
 * cuBLASLt's workspace (32 MiB, kernels/cuda/backend_cuda.cu's) and NCCL's buffers (128 MiB for
 * each communicator of more than one rank).
 *
 * The step time, per data-parallel replica (the slowest pipeline stage sets it):
 *   compute  = FLOPs / GEMM rate: 3x the forward's (the family's flops_per_token, per stage by
 *              layers, the head on the last stage), plus each layer's forward again under full
 *              recomputation or its attention core's under selective, over tp x Ulysses ranks
 *   bubble   = compute x (pp - 1) / micro-batches (1F1B's fill and drain)
 *   tp, sp   = their bytes / the link's ring bandwidth (in the node, or across when the group
 *              spans nodes): on the critical path, not overlapped
 *   pp, emb  = their bytes / the link's bandwidth
 *   dp       = what of the gradients' all-reduce outlasts the last micro-batch's backward (it
 *              starts bucket by bucket as the backward finishes them), ZeRO-2's reduce-scatters
 *              beyond each backward, ZeRO-3's gathers beyond each micro-batch's compute (they are
 *              prefetched a layer ahead), and ZeRO's parameter all-gather after the update (whole)
 *   step     = the sum; tokens/s = the global batch's tokens / step.
 * The optimizer's update and the kernels outside GEMMs are left out: the estimate ranks layouts,
 * it does not promise a time.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include "family/family.h"
#include "optim/optimizer.h"
#include "parallel/schedule.h"

#define MiB ((uint64_t)1 << 20)

const char *const ig_plan_group_names[] = {"tp", "pp", "dp", "emb", "sp", NULL};

/* ---- the machines ---------------------------------------------------------------------------- */

const char *const ig_plan_gpus[] = {"h100", "a100", "h200", "cpu", NULL};

ig_status ig_plan_world_gpu(ig_plan_world *w, const char *gpu, ig_err *err) {
    static const struct {
        const char *name;
        uint64_t memory;
        double flops, intra, inter;
    } presets[] = {
        {"h100", 81559 * MiB, 700e12, 360e9, 45e9}, /* the totals nvidia-smi shows */
        {"a100", 81920 * MiB, 280e12, 230e9, 22e9},
        {"h200", 143771 * MiB, 700e12, 360e9, 45e9},
        {"cpu", 0, 100e9, 5e9, 1e9},
    };
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(presets[i].name, gpu) != 0) continue;
        w->device = presets[i].memory != 0;
        w->memory = presets[i].memory ? presets[i].memory : ig_memory_limit(NULL);
        w->flops = presets[i].flops;
        w->intra_bw = presets[i].intra;
        w->inter_bw = presets[i].inter;
        return IG_OK;
    }
    return ig_err_set(err, IG_ERR_INVALID_ARG,
                      "unknown GPU \"%s\": the presets are h100, a100, "
                      "h200 and cpu (or give --gpu-memory, --gpu-flops and the bandwidths)",
                      gpu);
}

/* ---- one rank -------------------------------------------------------------------------------- */

ig_part ig_plan_part(const ig_plan_rank_in *in) {
    const ig_layout *lo = in->lo;
    size_t as = in->act_size;
    return (ig_part){.tp = lo->tp,
                     .tp_rank = lo->tp_rank,
                     .sp = lo->sp,
                     .usp = lo->usp,
                     .usp_rank = lo->usp_rank,
                     .l0 = lo->l0,
                     .l1 = lo->l1,
                     .first = ig_layout_first(lo),
                     .last = ig_layout_last(lo),
                     .slots = ig_sched_slots(lo),
                     .dp = lo->dp * lo->usp, /* the ranks its gradients are reduced over */
                     .dp_rank = lo->dp_rank * lo->usp + lo->usp_rank,
                     .zero = lo->zero,
                     .pp = lo->pp,
                     .recompute = in->recompute,
                     .bucket_elems = in->bucket_bytes / as};
}

/* The communicators of more than one rank that the rank at lo's coordinates is in. */
static int communicators(const ig_layout *lo) {
    int first = ig_layout_first(lo), last = ig_layout_last(lo);
    return (lo->tp > 1) + (lo->dp * lo->usp > 1) + (lo->pp > 1) + (lo->pp > 1 && (first || last)) +
           (lo->usp > 1);
}

ig_status ig_plan_rank(ig_ctx *ctx, const ig_plan_rank_in *in, ig_plan_memory *mem,
                       ig_plan_sent *sent, ig_err *err) {
    memset(mem, 0, sizeof *mem);
    ig_part p = ig_plan_part(in);
    ig_part_memory pm;
    ig_model *m = NULL;
    ig_status st = ig_model_plan(&m, ctx, in->shape, in->B, in->T, &p, in->act_size, err);
    if (st != IG_OK) return st;
    ig_model_memory(m, &pm);
    if (!p.inference) ig_optim_estimate(m, in->ema, &pm);
    ig_model_free(m);
    mem->params = pm.params + pm.master;
    mem->master = pm.master;
    mem->grads = pm.grads;
    mem->optim = pm.optim;
    mem->acts = pm.acts;
    mem->acts_slot = pm.acts_slot;
    if (in->device) {
        mem->comm = (uint64_t)communicators(in->lo) * IG_PLAN_NCCL_COMM_MIB * MiB;
        mem->workspace = (uint64_t)(IG_PLAN_CUDA_CONTEXT_MIB + IG_PLAN_CUBLASLT_MIB) * MiB;
    }
    mem->total = mem->params + mem->grads + mem->optim + mem->acts + mem->comm + mem->workspace;
    return sent ? ig_plan_comm(ctx, in, &p, sent, err) : IG_OK;
}

uint64_t ig_plan_backend_bytes(const ig_plan_memory *m, int device) {
    return m->params + m->grads + m->optim + m->acts +
           (device ? (uint64_t)IG_PLAN_CUBLASLT_MIB * MiB : 0);
}

/* ---- the time model -------------------------------------------------------------------------- */

/* The forward FLOPs per token of shape's layers and of the rest (the head, the embeddings), and
 * of each layer's attention core: flops_per_token is linear in the layers and in T. */
typedef struct flops_split {
    double layer, other, attention;
} flops_split;

static flops_split split_flops(const ig_model_config *c, int T) {
    ig_model_config fewer = *c;
    fewer.n_layer = c->n_layer - 1;
    double all = ig_model_flops_per_token(c, T);
    flops_split f;
    f.layer = all - ig_model_flops_per_token(&fewer, T);
    f.other = all - c->n_layer * f.layer;
    f.attention = (all - ig_model_flops_per_token(c, 0)) / c->n_layer;
    return f;
}

static double seconds(uint64_t bytes, double bw) {
    return bw > 0 ? (double)bytes / bw : 0.0;
}

/* The entry's time from its stages' FLOPs and its bytes (plan.c's header states the model). */
static void estimate_time(const ig_plan *p, const ig_layout *lo, const ig_plan_sent *sent,
                          ig_plan_entry *e) {
    const ig_plan_world *w = &p->world;
    const ig_plan_layout *L = &e->layout;
    flops_split f = split_flops(&p->shape, p->T);
    double tokens = (double)p->global_batch / lo->dp * p->T / (lo->tp * lo->usp);
    double slowest = 0, bwd_share = 2.0 / 3.0;
    for (int s = 0; s < lo->pp; s++) {
        double nl = lo->stage_layers[s + 1] - lo->stage_layers[s];
        double fwd = nl * f.layer + (s == lo->pp - 1 ? f.other : 0);
        double extra = L->recompute == IG_RECOMPUTE_FULL        ? nl * f.layer
                       : L->recompute == IG_RECOMPUTE_SELECTIVE ? nl * f.attention
                                                                : 0;
        double t = tokens * (3 * fwd + extra) / w->flops;
        if (t > slowest) slowest = t, bwd_share = (2 * fwd + extra) / (3 * fwd + extra);
    }
    ig_plan_time *tm = &e->time;
    int m = lo->accum, gpn = w->gpus_per_node;
    int span_tp = lo->tp, span_sp = span_tp * lo->usp, span_dp = span_sp * lo->dp;
    int span_pp = span_dp * lo->pp;
    double bw_tp = span_tp <= gpn ? w->intra_bw : w->inter_bw;
    double bw_sp = span_sp <= gpn ? w->intra_bw : w->inter_bw;
    double bw_dp = span_dp <= gpn ? w->intra_bw : w->inter_bw;
    double bw_pp = span_pp <= gpn ? w->intra_bw : w->inter_bw;
    tm->compute = slowest;
    tm->bubble = slowest * (lo->pp - 1) / m;
    tm->tp = seconds(e->sent[IG_PLAN_TP], bw_tp);
    tm->sp = seconds(e->sent[IG_PLAN_SP], bw_sp);
    tm->pp = seconds(e->sent[IG_PLAN_PP], bw_pp);
    tm->emb = seconds(e->sent[IG_PLAN_EMB], bw_pp);
    /* the data-parallel reductions: hidden behind the backward (ZeRO-2: each micro-batch's;
     * ZeRO-3's gathers behind each micro-batch's compute) as far as it lasts */
    double mb = slowest / m, window = L->zero >= 3 ? mb : mb * bwd_share;
    double reduce = seconds(sent->dp_reduce, bw_dp) - mb * bwd_share;
    double micro = seconds(sent->dp_micro + sent->dp_layers / (uint64_t)m, bw_dp) - window;
    tm->dp =
        (reduce > 0 ? reduce : 0) + m * (micro > 0 ? micro : 0) + seconds(sent->dp_gather, bw_dp);
    tm->step = tm->compute + tm->bubble + tm->tp + tm->sp + tm->pp + tm->emb + tm->dp;
    e->tokens_per_s = tm->step > 0 ? (double)p->global_batch * p->T / tm->step : 0;
}

/* ---- the candidates -------------------------------------------------------------------------- */

typedef struct planner {
    ig_ctx *ctx;
    ig_plan *p;
    const ig_train_config *t;
    int ema;
    size_t cap;
} planner;

/* The rank of stage s: its memory and bytes, from the stages evaluated before when one of them
 * holds the same (first, last, layers and micro-batches in flight are all that differ). */
typedef struct stage_key {
    int first, last, layers, slots;
} stage_key;

static ig_status evaluate(planner *pl, ig_train_config *t, ig_plan_entry *e, int *refused,
                          ig_err *err) {
    ig_plan *p = pl->p;
    ig_layout lo = {.ctx = pl->ctx, .world = p->world.gpus};
    ig_err why = {0};
    *refused = 0;
    ig_status st = ig_layout_check(&lo, t, &p->shape, &why);
    if (st != IG_OK) {
        ig_layout_free(&lo);
        if (st != IG_ERR_CONFIG) {
            if (err) *err = why;
            return st;
        }
        *refused = 1;
        snprintf(p->refused, sizeof p->refused, "%s", why.msg);
        return IG_OK;
    }
    e->layout = (ig_plan_layout){.tp = lo.tp,
                                 .pp = lo.pp,
                                 .dp = lo.dp,
                                 .sp = lo.sp,
                                 .usp = lo.usp,
                                 .zero = lo.zero,
                                 .recompute = t->recompute,
                                 .micro_batch = t->micro_batch,
                                 .accum = lo.accum};
    e->stage_mem = ig_calloc(NULL, (size_t)lo.pp, sizeof *e->stage_mem); /* the plan's: malloc */
    e->stage_sent = ig_calloc(NULL, (size_t)lo.pp, sizeof *e->stage_sent);
    stage_key *keys = ig_calloc(pl->ctx, (size_t)lo.pp, sizeof *keys);
    ig_plan_sent *sents = ig_calloc(pl->ctx, (size_t)lo.pp, sizeof *sents);
    if (!e->stage_mem || !e->stage_sent || !keys || !sents)
        st = ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_plan_sent worst_sent = {0};
    for (int s = 0; st == IG_OK && s < lo.pp; s++) {
        lo.pp_rank = s;
        lo.l0 = lo.stage_layers[s];
        lo.l1 = lo.stage_layers[s + 1];
        keys[s] = (stage_key){ig_layout_first(&lo), ig_layout_last(&lo), lo.l1 - lo.l0,
                              ig_sched_slots(&lo)};
        int same = -1;
        for (int k = 0; k < s && same < 0; k++)
            if (!memcmp(&keys[k], &keys[s], sizeof keys[s])) same = k;
        if (same >= 0) {
            e->stage_mem[s] = e->stage_mem[same];
            sents[s] = sents[same];
        } else {
            ig_plan_rank_in in = {.shape = &p->shape,
                                  .lo = &lo,
                                  .B = t->micro_batch,
                                  .T = p->T,
                                  .act_size = p->act_size,
                                  .recompute = t->recompute,
                                  .ema = pl->ema,
                                  .bucket_bytes = t->bucket_bytes,
                                  .device = p->world.device};
            ig_err cut = {0};
            st = ig_plan_rank(pl->ctx, &in, &e->stage_mem[s], &sents[s], &cut);
            if (st == IG_ERR_INVALID_ARG) { /* a part the family cannot cut (rows tp does not
                                               divide): refused, as the layout checks refuse */
                *refused = 1;
                snprintf(p->refused, sizeof p->refused, "%s", cut.msg);
                st = IG_OK;
                break;
            }
            if (st != IG_OK && err) *err = cut;
        }
        if (st != IG_OK) break;
        memcpy(e->stage_sent[s], sents[s].bytes, sizeof sents[s].bytes);
        if (s == 0 || e->stage_mem[s].total > e->mem.total)
            e->mem = e->stage_mem[s], e->worst_stage = s;
        for (int g = 0; g < IG_PLAN_GROUPS; g++)
            if (sents[s].bytes[g] > e->sent[g]) e->sent[g] = sents[s].bytes[g];
        if (sents[s].dp_reduce > worst_sent.dp_reduce) worst_sent.dp_reduce = sents[s].dp_reduce;
        if (sents[s].dp_gather > worst_sent.dp_gather) worst_sent.dp_gather = sents[s].dp_gather;
        if (sents[s].dp_micro > worst_sent.dp_micro) worst_sent.dp_micro = sents[s].dp_micro;
        if (sents[s].dp_layers > worst_sent.dp_layers) worst_sent.dp_layers = sents[s].dp_layers;
    }
    if (st == IG_OK && !*refused) {
        e->fits = e->mem.total <= p->world.memory;
        estimate_time(p, &lo, &worst_sent, e);
    }
    ig_free(pl->ctx, keys);
    ig_free(pl->ctx, sents);
    ig_layout_free(&lo);
    return st;
}

static ig_status add(planner *pl, ig_train_config *t, ig_err *err) {
    ig_plan *p = pl->p;
    if (p->n == pl->cap) {
        size_t cap = pl->cap ? 2 * pl->cap : 64;
        ig_plan_entry *grown = ig_realloc(NULL, p->entries, cap * sizeof *grown);
        if (!grown) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
        p->entries = grown;
        pl->cap = cap;
    }
    ig_plan_entry *e = &p->entries[p->n];
    memset(e, 0, sizeof *e);
    int refused = 0;
    ig_status st = evaluate(pl, t, e, &refused, err);
    if (st != IG_OK || refused) {
        ig_free(NULL, e->stage_mem);
        ig_free(NULL, e->stage_sent);
        p->n_refused += refused;
        return st;
    }
    p->n++;
    return IG_OK;
}

/* The largest value a key of the trainer's tables allows, or the count of its choices (an enum). */
static int key_range(const char *path) {
    const ig_cfg_key *tables[IG_TRAIN_KEY_TABLES];
    size_t counts[IG_TRAIN_KEY_TABLES];
    int binds[IG_TRAIN_KEY_TABLES];
    size_t n = ig_train_key_tables(tables, counts, binds, IG_TRAIN_KEY_TABLES);
    for (size_t i = 0; i < n && i < IG_TRAIN_KEY_TABLES; i++)
        for (size_t k = 0; k < counts[i]; k++) {
            const ig_cfg_key *key = &tables[i][k];
            if (strcmp(key->path, path) != 0) continue;
            if (key->type != IG_CFG_ENUM) return (int)key->max;
            int c = 0;
            while (key->choices[c]) c++;
            return c - 1;
        }
    return 0;
}

/* Every candidate: tp among the divisors of a node's GPUs, Ulysses' sp_size (a family that has
 * it), pp among the divisors of what is left, Megatron's sp on and off, ZeRO 0 .. parallel.zero's
 * largest (stages above 0 only with data parallelism), every train.recompute, train.micro_batch
 * and its divisors. The layout checks refuse what the trainer would. */
static ig_status enumerate(planner *pl, ig_err *err) {
    ig_plan *p = pl->p;
    const ig_family *fam = ig_family_of(p->shape.arch);
    int G = p->world.gpus, zmax = key_range("parallel.zero"), rmax = key_range("train.recompute");
    ig_train_config t = *pl->t;
    t.dp = 0;
    ig_status st = IG_OK;
    for (int tp = 1; tp <= p->world.gpus_per_node && tp <= G; tp++) {
        if (p->world.gpus_per_node % tp || G % tp) continue;
        for (int u = 1; u <= G / tp; u++) {
            if ((G / tp) % u || (u > 1 && !fam->ulysses)) continue;
            for (int pp = 1; pp <= G / (tp * u); pp++) {
                if ((G / (tp * u)) % pp) continue;
                int dp = G / (tp * u * pp);
                for (int sp = 0; sp <= (tp > 1 && u == 1); sp++)
                    for (int z = 0; z <= (dp * u > 1 ? zmax : 0); z++)
                        for (int r = 0; r <= rmax; r++)
                            for (int mb = pl->t->micro_batch; mb >= 1; mb--) {
                                if (pl->t->micro_batch % mb) continue;
                                t.tp = tp, t.pp = pp, t.sp = sp, t.zero = z, t.recompute = r;
                                t.sp_mode = u > 1, t.sp_size = u, t.micro_batch = mb;
                                if ((st = add(pl, &t, err)) != IG_OK) return st;
                            }
            }
        }
    }
    return IG_OK;
}

/* Those that fit first, each part by step time; then by memory, then by the layout's numbers
 * (a total order: the same plan prints the same way). */
static int compare(const void *a, const void *b) {
    const ig_plan_entry *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (x->time.step != y->time.step) return x->time.step < y->time.step ? -1 : 1;
    if (x->mem.total != y->mem.total) return x->mem.total < y->mem.total ? -1 : 1;
    const ig_plan_layout *l = &x->layout, *m = &y->layout;
    int d[] = {l->tp - m->tp,
               l->pp - m->pp,
               l->usp - m->usp,
               l->sp - m->sp,
               l->zero - m->zero,
               l->recompute - m->recompute,
               m->micro_batch - l->micro_batch};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (d[i]) return d[i];
    return 0;
}

ig_status ig_plan_create(ig_plan **out, ig_ctx *ctx, const ig_train_config *cfg,
                         const ig_plan_world *w, int configured_only, ig_err *err) {
    *out = NULL;
    if (w->gpus < 1 || w->gpus_per_node < 1 || !(w->flops > 0) || !(w->intra_bw > 0) ||
        !(w->inter_bw > 0))
        return ig_err_set(err, IG_ERR_INVALID_ARG,
                          "a plan needs at least one GPU and positive GEMM rate and bandwidths");
    const ig_family *fam = ig_family_of(cfg->model.arch);
    if (!fam)
        return ig_err_set(err, IG_ERR_CONFIG, "model.arch %d is not a known family",
                          cfg->model.arch);
    ig_status pst = fam->objective->plannable ? fam->objective->plannable(&cfg->model, err) : IG_OK;
    if (pst != IG_OK) return pst;
    ig_plan *p = ig_calloc(NULL, 1, sizeof *p);
    if (!p) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    p->world = *w;
    p->shape = cfg->model;
    ig_status st = ig_model_config_check(&p->shape, err);
    p->B = cfg->micro_batch;
    p->T = p->shape.seq_len;
    p->global_batch = cfg->global_batch ? cfg->global_batch : cfg->micro_batch;
    p->act_size = cfg->dtype == 1 ? 4 : cfg->dtype == 2 ? 2 : w->device ? 2 : 4;
    p->params = ig_model_num_params(&p->shape);
    p->flops_per_token = ig_model_flops_per_token(&p->shape, p->T);
    double ema = cfg->ema_decay < 0 ? fam->ema_default : cfg->ema_decay;
    planner pl = {.ctx = ctx, .p = p, .t = cfg, .ema = ema > 0};
    if (st == IG_OK && configured_only) {
        ig_train_config t = *cfg;
        st = add(&pl, &t, err);
        if (st == IG_OK && p->n == 1) p->refused[0] = '\0';
    } else if (st == IG_OK) {
        st = enumerate(&pl, err);
    }
    if (st != IG_OK) {
        ig_plan_free(p);
        return st;
    }
    qsort(p->entries, p->n, sizeof *p->entries, compare);
    for (size_t i = 0; i < p->n; i++) p->n_fit += p->entries[i].fits;
    *out = p;
    return IG_OK;
}

void ig_plan_free(ig_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) {
        free(p->entries[i].stage_mem);
        free(p->entries[i].stage_sent);
    }
    free(p->entries);
    free(p);
}

/* ---- the suggestion of a refusal ------------------------------------------------------------- */

int ig_plan_suggest(const ig_plan *p, int n, char *buf, size_t cap) {
    static const char *const rec[] = {"none", "selective", "full"};
    size_t at = 0;
    int named = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < p->n && named < n && at < cap; i++) {
        const ig_plan_entry *e = &p->entries[i];
        if (!e->fits) break;
        const ig_plan_layout *l = &e->layout;
        char keys[256], gb[32];
        int k = snprintf(keys, sizeof keys, "parallel.tp=%d parallel.pp=%d", l->tp, l->pp);
        if (l->sp) k += snprintf(keys + k, sizeof keys - (size_t)k, " parallel.sp=true");
        if (l->usp > 1)
            k += snprintf(keys + k, sizeof keys - (size_t)k,
                          " parallel.sp_mode=ulysses parallel.sp_size=%d", l->usp);
        if (l->zero) k += snprintf(keys + k, sizeof keys - (size_t)k, " parallel.zero=%d", l->zero);
        if (l->recompute)
            k += snprintf(keys + k, sizeof keys - (size_t)k, " train.recompute=%s",
                          rec[l->recompute]);
        snprintf(keys + k, sizeof keys - (size_t)k, " train.micro_batch=%d", l->micro_batch);
        int w = snprintf(buf + at, cap - at, "%s  %s (dp %d): %s a rank, %.3g s a step",
                         named ? "\n" : "", keys, l->dp,
                         ig_format_bytes((double)e->mem.total, gb, sizeof gb), e->time.step);
        if (w > 0) at += (size_t)w;
        named++;
    }
    return named;
}
