/* The persistent tier of ptc train --replicas (--persist DIR --persist-every
 * N): every N-th committed version is copied from the hosts' stores into
 * one ordinary store (ptc_ckpt_hosts_persist_over) on a thread of its own
 * while training goes on. The next copy waits for the previous one; the
 * saves meanwhile keep the version being read (ptc_ckpt_hosts_options.pin).
 * The copy's collectives run over a duplicate of the segment's
 * communicator, which needs MPI_THREAD_MULTIPLE; without it the copy runs
 * on the job's thread (as a save would block). */
#include <stdio.h>
#include <string.h>

#include "exec/model/train_internal.h"

static int copy(train_persist *p)
{
    const train_seg *g = p->g;
    return ptc_ckpt_hosts_persist_over(&p->t, p->local, p->version, p->persist, g->layout,
                                       g->rules, g->ranks, g->nranks, NULL, NULL);
}

static void *run(void *arg)
{
    train_persist *p = arg;
    p->rc = copy(p);
    if (p->rc < 0)
        snprintf(p->msg, sizeof p->msg, "%s", ptc_last_error());
    return NULL;
}

int train_persist_wait(train_persist *p)
{
    if (!p->running)
        return PTC_OK;
    pthread_join(p->th, NULL);
    p->running = false;
    p->version = 0;
    return p->rc < 0 ? ptc_error_set(p->rc, "%s", p->msg) : PTC_OK;
}

int train_persist_start(train_persist *p, ptc_store *local, ptc_store *persist,
                        const train_seg *g, uint64_t version)
{
    PTC_TRY(train_persist_wait(p)); /* agreed by the copy itself */
    bool bg = train_mpi_threads();
    int rc = PTC_OK;
    if (bg && p->comm == MPI_COMM_NULL && MPI_Comm_dup(g->comm, &p->comm) != MPI_SUCCESS) {
        p->comm = MPI_COMM_NULL;
        rc = ptc_error_set(PTC_E_MPI, "MPI_Comm_dup for the persistent tier's copy failed");
    }
    if ((rc = train_agree(g->comm, rc)) < 0)
        return rc;
    PTC_TRY(ptc_transport_mpi(&p->t, bg ? p->comm : g->comm));
    p->local = local;
    p->persist = persist;
    p->g = g;
    p->version = version;
    p->rc = PTC_OK;
    if (!bg) {
        rc = copy(p);
        p->version = 0;
        return rc;
    }
    /* a thread that cannot start: the copy here (every process copies,
     * on its thread or this one: the collectives match either way) */
    if (pthread_create(&p->th, NULL, run, p) == 0) {
        p->running = true;
        return PTC_OK;
    }
    rc = copy(p);
    p->version = 0;
    return rc;
}

void train_persist_free(train_persist *p)
{
    (void)train_persist_wait(p);
    if (p->comm != MPI_COMM_NULL)
        MPI_Comm_free(&p->comm);
    p->comm = MPI_COMM_NULL;
}
