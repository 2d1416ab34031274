/* The device executor in a build without NCCL: every call says so. Built
 * instead of reshard_nccl.c, so that include/ptc/reshard.h is the same in
 * every build. */
#include "ptc/reshard.h"

int ptc_reshard_nccl_create(ptc_reshard_nccl **out, MPI_Comm comm)
{
    (void)comm;
    if (out)
        *out = NULL;
    return ptc_error_set(PTC_E_UNSUPPORTED, "ptc was built without NCCL");
}

void ptc_reshard_nccl_destroy(ptc_reshard_nccl *ctx)
{
    (void)ctx;
}

int ptc_reshard_device(const ptc_plan *p, ptc_reshard_nccl *ctx, const void *const *src,
                       void *const *dst, void *stream)
{
    (void)p, (void)ctx, (void)src, (void)dst, (void)stream;
    return ptc_error_set(PTC_E_UNSUPPORTED, "ptc was built without NCCL");
}
