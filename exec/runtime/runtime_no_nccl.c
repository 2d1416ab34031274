/* NCCL communicators in a build without NCCL. Built instead of
 * runtime_nccl.c, so that include/ptc/exec.h is the same in every build
 * (the runtime's own device-mode hooks are stubbed in runtime_internal.h). */
#include "ptc/exec.h"

int ptc_exec_nccl_comm_create(void **out, MPI_Comm comm)
{
    (void)comm;
    *out = NULL;
    return ptc_error_set(PTC_E_UNSUPPORTED, "built without nccl");
}

void ptc_exec_nccl_comm_destroy(void *nccl_comm)
{
    (void)nccl_comm;
}
