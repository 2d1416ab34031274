/* ptc reshard --mpi in ptc-full: one process per group of target ranks
 * under mpirun (cli/cli_reshard.h). */
#include <mpi.h>

#include "cli/cli_reshard.h"

int ptc_cli_reshard_handoff(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return PTC_CLI_CONTINUE; /* ptc-full runs every reshard itself */
}

/* --across-hosts: number the hosts by MPI processor name, reshard, print. */
static int across_hosts(ptc_cli_reshard *a, int me)
{
    char name[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    int len = 0, host = 0, nhosts = 0;
    ptc_transport t;
    int rc = ptc_transport_mpi(&t, MPI_COMM_WORLD);
    if (rc == PTC_OK && MPI_Get_processor_name(name, &len) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Get_processor_name failed");
    rc = rc == PTC_OK ? ptc_reshard_hosts_index(&t, name, &host, &nhosts)
                      : ptc_transport_agree(&t, rc, "host numbering");
    ptc_reshard_hosts_options ho = {.out = a->out, .replicas = a->replicas};
    ptc_reshard_hosts_result res;
    uint64_t written = 0;
    if (rc == PTC_OK)
        rc = ptc_reshard_hosts_store_mpi(a->cs.s, host, a->version, &a->cfg, MPI_COMM_WORLD, &ho,
                                         &written, &res);
    unsigned long long peak = ptc_cli_peak_rss(), top = peak;
    MPI_Reduce(&peak, &top, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rc != PTC_OK)
        return me == 0 ? ptc_cli_lib_error(rc) : PTC_CLI_FAIL;
    return me == 0 ? ptc_cli_reshard_hosts_print(&res, written, a->out, top, a->json)
                   : PTC_CLI_OK;
}

int ptc_cli_reshard_mpi(ptc_cli_reshard *a, int argc, char **argv)
{
    int provided, me = 0;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return ptc_cli_error("MPI_Init failed");
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    /* across hosts, a fresh host's store may be missing: made (it keeps an
     * empty journal, as a fresh host's in ptc train --replicas) */
    int ret = ptc_cli_store_open(&a->cs, a->across_hosts ? PTC_CLI_STORE_NEW : PTC_CLI_STORE_OPEN,
                                 0);
    /* every process must reach the executor's collectives, or none */
    int worst = ret;
    MPI_Allreduce(&ret, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (worst != PTC_CLI_OK && ret == PTC_CLI_OK) {
        ret = me == 0 ? ptc_cli_error("the store could not be opened on another process")
                      : PTC_CLI_FAIL;
        ptc_cli_store_close(&a->cs, false);
    }
    if (ret == PTC_CLI_OK && a->across_hosts) {
        ret = across_hosts(a, me);
        ptc_cli_store_close(&a->cs, ret != PTC_CLI_OK);
    } else if (ret == PTC_CLI_OK) {
        ptc_reshard_result res;
        int rc = ptc_reshard_store_mpi(a->cs.s, a->version, &a->cfg, MPI_COMM_WORLD, &a->opts,
                                       &res);
        /* peak resident memory, the largest over the processes (the executor
         * returns the same code on every process; every process reduces, so
         * none waits) */
        unsigned long long peak = ptc_cli_peak_rss(), top = peak;
        MPI_Reduce(&peak, &top, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rc != PTC_OK)
            ret = me == 0 ? ptc_cli_lib_error(rc) : PTC_CLI_FAIL;
        else if (me == 0)
            ret = ptc_cli_reshard_print(&res, top, a->json);
        ptc_cli_store_close(&a->cs, ret != PTC_CLI_OK);
    }
    MPI_Finalize();
    return ret;
}
