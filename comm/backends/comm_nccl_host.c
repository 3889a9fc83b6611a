/* comm_nccl_host.c - the NCCL communicator's side in the program, in a build with NCCL: the
 * backend itself (comm_nccl.c) is in ingot's CUDA module, libingot_cuda.so, loaded here at the
 * first ig_comm_nccl_create, so that a process that never asks for NCCL loads neither NCCL nor
 * the CUDA runtime (every rank of every launch paid their start-up before). Once created, the
 * communicator's operations go through its ops table, which lives in the module. */
#include "../comm_internal.h"

#include <string.h>

int ig_comm_nccl_available(void) {
    return 1;
}

/* The module's communicator entry, checked against this build's tables. */
static ig_status module_entry(const ig_comm_nccl_module **out, ig_err *err) {
    return ig_module_entry("cuda", IG_COMM_NCCL_ENTRY, "the NCCL communicator", sizeof(ig_comm_ops),
                           sizeof(struct ig_comm), (const void **)out, err);
}

ig_status ig_comm_nccl_create(ig_comm **out, ig_comm *world, ig_err *err) {
    *out = NULL;
    const ig_comm_nccl_module *m = NULL;
    ig_status st = module_entry(&m, err);
    /* every rank learns whether all have the module, as the module's own bootstrap does: a rank
     * that cannot load it must not leave the others waiting in the bootstrap's broadcast */
    int all = 0;
    ig_err agree = {0};
    ig_status ast = ig_comm_all_ok(world, st == IG_OK, &all, &agree);
    if (ast != IG_OK) {
        if (err) *err = agree;
        return ast;
    }
    if (st != IG_OK) return st;
    if (!all)
        return ig_err_set(err, IG_ERR_UNSUPPORTED,
                          "NCCL communicator: another rank could not load the CUDA module (its "
                          "error says why)");
    return m->create(out, world, err);
}
