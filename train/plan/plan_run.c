/* plan_run.c - the trainer's side of the plan (plan.h): before a run allocates, every rank sizes
 * its own part as `ingot plan` would and the run is refused on every rank when one of them would
 * not fit, naming it, its estimate by buffer and the fastest layouts of the same processes that
 * fit; at the start the estimate is printed beside what the backend holds, and after each step
 * every rank's estimate and the backend's peak can go to metrics.jsonl (log.memory_stats), so that
 * the estimate is checked, not assumed (tests/mpi/train_plan.sh).
 */
#include "plan.h"

#include <stdio.h>
#include <string.h>

#include "family/family.h"

enum { NV = 9 }; /* per rank: need, avail, then the estimate by buffer and its total */

/* What this rank may use and what of its estimate is still to be allocated (on a device the
 * CUDA context, NCCL's communicators and cuBLASLt's workspace already are), and in words. */
static void budget(const ig_plan_check_in *in, const ig_plan_memory *mem, int local, uint64_t *need,
                   uint64_t *avail, char *what, size_t cap) {
    ig_backend_memory mi;
    ig_backend_memory_info(in->be, &mi);
    char a[32], b[32];
    if (in->t->memory_limit) {
        *need = mem->total;
        *avail = in->t->memory_limit;
        snprintf(what, cap, "train.memory_limit");
    } else if (in->device) {
        *need = mem->params + mem->grads + mem->optim + mem->acts;
        *avail = mi.device_free;
        snprintf(what, cap,
                 "free on its CUDA device of %s once the CUDA context, NCCL and cuBLASLt have "
                 "theirs, which the estimate's %s count",
                 ig_format_bytes((double)mi.device_limit, a, sizeof a),
                 ig_format_bytes((double)(mem->comm + mem->workspace), b, sizeof b));
    } else {
        *need = mem->total;
        *avail = mi.device_free / (uint64_t)(local > 0 ? local : 1);
        snprintf(what, cap, "%s available to the process (%s) less a tenth%s",
                 ig_format_bytes((double)mi.device_limit, b, sizeof b), mi.device_what,
                 local > 1 ? ", shared by the node's ranks" : "");
    }
    if (!in->t->memory_limit && mi.device_limit == 0) /* not known (cudaMemGetInfo failed): */
        *avail = UINT64_MAX;                          /* nothing to hold the run to */
}

/* The refusal: the rank that does not fit, its estimate by buffer, the layouts that would. */
static ig_status refuse(const ig_plan_check_in *in, const uint64_t *all, int bad, int local,
                        const char *what, ig_err *err) {
    const ig_layout *lo = in->lo;
    const uint64_t *v = all + (size_t)bad * NV;
    char s[8][32];
    const char *fmt[] = {
        "parameters", "gradients", "optimizer state", "activations", "communication buffers",
        "workspace"};
    char parts[400] = "";
    size_t at = 0;
    for (int k = 0; k < 6; k++)
        if (v[2 + k] && at < sizeof parts)
            at += (size_t)snprintf(parts + at, sizeof parts - at, "%s%s %s", at ? ", " : "", fmt[k],
                                   ig_format_bytes((double)v[2 + k], s[k], sizeof s[k]));
    /* the layouts of as many processes that fit what the tightest rank may use */
    uint64_t least = UINT64_MAX;
    for (int r = 0; r < lo->world; r++)
        if (all[(size_t)r * NV + 1] < least) least = all[(size_t)r * NV + 1];
    ig_plan_world w = {.gpus = lo->world, .gpus_per_node = local > 0 ? local : 1};
    ig_plan_world_gpu(&w, in->device ? "h100" : "cpu", NULL);
    w.memory = in->t->memory_limit ? in->t->memory_limit
                                   : least + (in->device ? v[6] + v[7] : 0); /* as plan counts */
    ig_train_config t = *in->t;
    t.model = *in->shape;
    t.micro_batch = in->B;
    t.global_batch = in->t->global_batch ? in->t->global_batch : in->t->micro_batch;
    ig_plan *p = NULL;
    char fits[700] = "";
    int named = 0;
    if (ig_plan_create(&p, in->ctx, &t, &w, 0, NULL) == IG_OK)
        named = ig_plan_suggest(p, 3, fits, sizeof fits);
    ig_plan_free(p);
    ig_err_set(err, IG_ERR_CONFIG,
               "the run does not fit: rank %d (pipeline stage %d of %d) needs %s (%s) and may use "
               "%s (%s); %s%s\n  all of them: ingot plan %s --gpus %d%s --gpu-memory %llu "
               "(with this run's --set)",
               bad, bad / (lo->tp * lo->usp * lo->dp), lo->pp,
               ig_format_bytes((double)v[0], s[6], sizeof s[6]), parts,
               ig_format_bytes((double)v[1], s[7], sizeof s[7]), what,
               named ? "the fastest layouts of as many processes that fit (--set):\n"
                     : "no layout of as many processes fits: start more",
               fits, in->config_path ? in->config_path : "CONFIG", lo->world,
               in->device ? "" : " --gpu cpu", (unsigned long long)w.memory);
    return IG_ERR_CONFIG;
}

ig_status ig_plan_check_run(const ig_plan_check_in *in, ig_plan_memory *mem, ig_err *err) {
    ig_layout *lo = in->lo;
    ig_plan_rank_in ri = {.shape = in->shape,
                          .lo = lo,
                          .B = in->B,
                          .T = in->T,
                          .act_size = ig_backend_act_size(in->be),
                          .recompute = in->t->recompute,
                          .ema = in->ema,
                          .bucket_bytes = in->t->bucket_bytes,
                          .device = in->device};
    ig_status st = ig_plan_rank(in->ctx, &ri, mem, NULL, err);
    if ((st = ig_all_ranks_ok(in->world, st, "estimating the memory", err)) != IG_OK) return st;
    int local = 1;
    if (in->world) { /* the ranks of this node share its memory (CPU) */
        ig_comm *node = NULL;
        st = ig_comm_split_local(in->world, &node, err);
        if (st == IG_OK) local = ig_comm_size(node);
        ig_comm_free(node);
        if ((st = ig_all_ranks_ok(in->world, st, "finding the node's ranks", err)) != IG_OK)
            return st;
    }
    uint64_t mine[NV];
    char what[400];
    budget(in, mem, local, &mine[0], &mine[1], what, sizeof what);
    const uint64_t parts[] = {mem->params, mem->grads,     mem->optim, mem->acts,
                              mem->comm,   mem->workspace, mem->total};
    memcpy(mine + 2, parts, sizeof parts);
    uint64_t *all = ig_calloc(in->ctx, (size_t)lo->world * NV, sizeof *all);
    if (!all) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    st = ig_group_allgather(&lo->world_g, mine, all, NV, IG_COMM_U64, err);
    int bad = -1;
    for (int r = 0; st == IG_OK && r < lo->world; r++) {
        const uint64_t *v = all + (size_t)r * NV;
        if (v[0] > v[1] && (bad < 0 || v[0] - v[1] > all[(size_t)bad * NV] - all[bad * NV + 1]))
            bad = r;
    }
    /* every rank knows the same figures: each refuses alike, with the words of the rank that
     * does not fit when it is this one (what differs between ranks is only said there) */
    if (st == IG_OK && bad >= 0)
        st = refuse(in, all, bad, local, bad == lo->rank ? what : "that rank's message says why",
                    err);
    ig_free(in->ctx, all);
    return st;
}

void ig_plan_print_run(FILE *log, const ig_plan_memory *m, ig_backend *be, int world) {
    ig_backend_memory mi;
    ig_backend_memory_info(be, &mi);
    char b[8][32];
    fprintf(log,
            "memory estimate%s, as ingot plan sizes it: parameters %s, gradients %s, optimizer "
            "%s, activations %s, comm %s, workspace %s: %s; the backend holds %s now\n",
            world > 1 ? " of rank 0" : "", ig_format_bytes((double)m->params, b[0], 32),
            ig_format_bytes((double)m->grads, b[1], 32),
            ig_format_bytes((double)m->optim, b[2], 32), ig_format_bytes((double)m->acts, b[3], 32),
            ig_format_bytes((double)m->comm, b[4], 32),
            ig_format_bytes((double)m->workspace, b[5], 32),
            ig_format_bytes((double)m->total, b[6], 32),
            ig_format_bytes((double)(mi.buffers + mi.workspace), b[7], 32));
}

ig_status ig_plan_memory_stats(ig_layout *lo, ig_backend *be, const ig_plan_memory *m,
                               uint64_t state, int device, char *json, size_t jcap, char *line,
                               size_t lcap, ig_err *err) {
    enum { K = 3 }; /* per rank: the estimate, the peak, the model state */
    static const char *const keys[K] = {"estimate", "peak", "state"};
    ig_backend_memory mi;
    ig_backend_memory_info(be, &mi);
    uint64_t mine[K] = {ig_plan_backend_bytes(m, device), mi.peak, state};
    int W = lo->world;
    uint64_t *all = ig_calloc(lo->ctx, (size_t)W * K, sizeof *all);
    if (!all) return ig_err_set(err, IG_ERR_NOMEM, "out of memory");
    ig_status st = ig_group_allgather(&lo->world_g, mine, all, K, IG_COMM_U64, err);
    size_t jn = 0;
    if (json && jcap) {
        json[0] = '\0';
        for (int k = 0; k < K && st == IG_OK; k++) {
            jn += (size_t)snprintf(json + jn, jcap > jn ? jcap - jn : 0, "%s\"%s\":[",
                                   k ? "," : ",\"memory\":{", keys[k]);
            for (int r = 0; r < W; r++)
                jn += (size_t)snprintf(json + jn, jcap > jn ? jcap - jn : 0, "%s%llu", r ? "," : "",
                                       (unsigned long long)all[(size_t)r * K + (size_t)k]);
            jn += (size_t)snprintf(json + jn, jcap > jn ? jcap - jn : 0, "]");
        }
        if (st == IG_OK && jn < jcap) snprintf(json + jn, jcap - jn, "}");
    }
    if (line && lcap) { /* the rank furthest from its estimate, and the range of the ratios */
        int far = 0;
        double lo_r = 1e300, hi_r = 0;
        for (int r = 0; r < W; r++) {
            double q = all[K * r] ? (double)all[K * r + 1] / (double)all[K * r] : 0;
            double f = all[K * far] ? (double)all[K * far + 1] / (double)all[K * far] : 0;
            if (q < lo_r) lo_r = q;
            if (q > hi_r) hi_r = q;
            if ((q > 1 ? q - 1 : 1 - q) > (f > 1 ? f - 1 : 1 - f)) far = r;
        }
        char pk[32], es[32];
        snprintf(line, lcap,
                 "memory in the step: the backend's peak on rank %d is %s, %.3f of its estimate "
                 "%s (every rank: %.3f .. %.3f)",
                 far, ig_format_bytes((double)all[K * far + 1], pk, sizeof pk),
                 all[K * far] ? (double)all[K * far + 1] / (double)all[K * far] : 0.0,
                 ig_format_bytes((double)all[K * far], es, sizeof es), lo_r, hi_r);
    }
    ig_free(lo->ctx, all);
    return st;
}
