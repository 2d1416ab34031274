/* A training job whose hosts share no filesystem (ptc train --replicas K):
 * the job's side of reshard/'s load across hosts (ptc_reshard_hosts_load):
 * hosts named by their MPI processor names, the load over the job's
 * communicator. */
#include <stdio.h>
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

int train_hosts_names(MPI_Comm comm, char **names)
{
    char mine[TRAIN_HOST_NAME];
    int len = 0, size = 0;
    memset(mine, 0, sizeof mine);
    *names = NULL;
    ptc_transport t;
    PTC_TRY(ptc_transport_mpi(&t, comm));
    PTC_MPI_TRY(MPI_Comm_size(comm, &size));
    int rc = MPI_Get_processor_name(mine, &len) == MPI_SUCCESS
                 ? PTC_OK
                 : ptc_error_set(PTC_E_MPI, "MPI_Get_processor_name failed");
    if (rc == PTC_OK && !(*names = ptc_calloc((size_t)size, TRAIN_HOST_NAME)))
        rc = ptc_error_set(PTC_E_NOMEM, "no memory for the names of %d hosts", size);
    if ((rc = ptc_transport_agree(&t, rc, "host names")) == PTC_OK)
        rc = ptc_transport_agree(&t, t.allgather(t.user, mine, sizeof mine, *names),
                                 "host names");
    if (rc < 0) {
        ptc_free(*names);
        *names = NULL;
    }
    return rc;
}

int train_hosts_count(const char *names, int n, char *buf, size_t cap)
{
    enum { SHOWN = 4 };
    int hosts = 0;
    size_t at = 0;
    if (cap)
        buf[0] = 0;
    for (int p = 0; p < n; p++) {
        const char *name = names + (size_t)p * TRAIN_HOST_NAME;
        bool seen = false;
        for (int q = 0; q < p && !seen; q++)
            seen = !strcmp(names + (size_t)q * TRAIN_HOST_NAME, name);
        if (seen)
            continue;
        if (hosts < SHOWN && at < cap)
            at += (size_t)snprintf(buf + at, cap - at, "%s%s", hosts ? ", " : "", name);
        hosts++;
    }
    if (hosts > SHOWN && at < cap)
        snprintf(buf + at, cap - at, ", ... (%d hosts)", hosts);
    return hosts;
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
