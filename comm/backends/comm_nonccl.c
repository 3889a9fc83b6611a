/* comm_nonccl.c - the NCCL backend's entry points in a build without it (no CUDA, NCCL or MPI at
 * configure time): they answer that there is no NCCL, so callers need not know how ingot was
 * built. */
#include "../comm_internal.h"

int ig_comm_nccl_available(void) {
    return 0;
}

ig_status ig_comm_nccl_create(ig_comm **out, ig_comm *world, ig_err *err) {
    (void)world;
    *out = NULL;
    return ig_err_set(err, IG_ERR_UNSUPPORTED,
                      "this ingot was built without NCCL (it needs CUDA, NCCL and MPI at configure "
                      "time); use the MPI communicator with host buffers");
}
