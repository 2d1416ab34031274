/* NCCL helpers shared by the device executors (reshard, exec/runtime).
 * Built only with NCCL (file name *_nccl.c). */
#include <string.h>

#include "base/mpi_internal.h"
#include "base/nccl_internal.h"
#include "ptc/error.h"

int ptc_nccl_error(ncclResult_t r, const char *what)
{
    return ptc_error_set(PTC_E_NCCL, "%s: %s", what, ncclGetErrorString(r));
}

int ptc_cuda_error(cudaError_t e, const char *what)
{
    return ptc_error_set(PTC_E_CUDA, "%s: %s", what, cudaGetErrorString(e));
}

int ptc_nccl_comm_create(ncclComm_t *out, MPI_Comm comm)
{
    *out = NULL;
    int me, np;
    PTC_MPI_TRY(MPI_Comm_rank(comm, &me));
    PTC_MPI_TRY(MPI_Comm_size(comm, &np));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t nr = me == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    PTC_TRY(ptc_mpi_agree(comm, nr == ncclSuccess ? PTC_OK : ptc_nccl_error(nr, "ncclGetUniqueId"),
                          "NCCL setup"));
    PTC_MPI_TRY(ptc_mpi_bcast(&id, (int)sizeof id, MPI_BYTE, 0, comm));
    ncclComm_t c;
    nr = ncclCommInitRank(&c, np, id, me);
    if (nr != ncclSuccess)
        return ptc_nccl_error(nr, "ncclCommInitRank");
    *out = c;
    return PTC_OK;
}
