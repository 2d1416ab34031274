/* A training job whose hosts share no filesystem (ptc train --replicas K):
 * the job's side of reshard/'s load across hosts (ptc_reshard_hosts_load):
 * hosts named by their MPI processor names, the load over the job's
 * communicator. */
#include <string.h>

#include "ptc/reshard.h"
#include "exec/model/train_internal.h"

int train_hosts_index(MPI_Comm comm, int *host, int *nhosts)
{
    char name[MPI_MAX_PROCESSOR_NAME + 1];
    int len = 0;
    memset(name, 0, sizeof name);
    ptc_transport t;
    PTC_TRY(ptc_transport_mpi(&t, comm));
    int rc = MPI_Get_processor_name(name, &len) == MPI_SUCCESS
                 ? PTC_OK
                 : ptc_error_set(PTC_E_MPI, "MPI_Get_processor_name failed");
    if (rc < 0)
        return ptc_transport_agree(&t, rc, "host numbering");
    return ptc_reshard_hosts_index(&t, name, host, nhosts);
}

int train_hosts_load(MPI_Comm comm, ptc_store *s, uint64_t version, const ptc_layout *dst,
                     const int *ranks, size_t nranks, void *const *bufs, ptc_plan_stats *stats)
{
    ptc_transport t;
    int host, nhosts;
    PTC_TRY(ptc_transport_mpi(&t, comm));
    PTC_TRY(train_hosts_index(comm, &host, &nhosts));
    ptc_reshard_hosts_result res;
    PTC_TRY(ptc_reshard_hosts_load(&t, host, s, version, dst, ranks, nranks, bufs, &res));
    if (stats)
        *stats = res.plan;
    return PTC_OK;
}
