/* comm_nompi.c - the MPI backend's entry points in a build without MPI: ig_comm_world then
 * refuses a launcher's multi-process job with a message instead of running it as N copies. */
#include "../comm_internal.h"

int ig_comm_mpi_available(void) {
    return 0;
}

ig_status ig_comm_mpi_world(ig_comm **out, ig_ctx *ctx, ig_err *err) {
    (void)ctx;
    *out = NULL;
    return ig_err_set(err, IG_ERR_UNSUPPORTED, "this ingot was built without MPI");
}
