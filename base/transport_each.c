/* ptc_transport_exchange_each (base/transport_internal.h): the messages of
 * an exchange handed to the caller as each arrives — over MPI (a transport
 * ptc_transport_mpi made) as MPI_Waitsome completes them, elsewhere after
 * the transport's whole exchange. Apart from transport.c, which base/mpi.c
 * calls (its agreement), as this file calls base/mpi.c. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "ptc/transport.h"
#include "base/mpi_internal.h"
#include "base/transport_internal.h"
#include "base/util_internal.h"

/* The tag of ptc_transport_mpi's exchange (base/mpi.c): the same messages. */
#define EACH_TAG 27000

/* @p t is a transport ptc_transport_mpi made: its communicator into *comm. */
static bool mpi_comm_of(const ptc_transport *t, MPI_Comm *comm)
{
    int up = 0, down = 0;
    ptc_transport probe;
    if (!t->exchange || MPI_Initialized(&up) != MPI_SUCCESS || !up ||
        MPI_Finalized(&down) != MPI_SUCCESS || down ||
        ptc_transport_mpi(&probe, MPI_COMM_SELF) != PTC_OK || probe.exchange != t->exchange)
        return false;
    *comm = MPI_Comm_f2c((MPI_Fint)(intptr_t)t->user);
    return true;
}

/* Requests of a message of @p len bytes (ptc_mpi_post's parts). */
static size_t parts(size_t len)
{
    return (len + PTC_MPI_MSG_MAX - 1) / PTC_MPI_MSG_MAX;
}

/* The exchange over MPI, each receive handed to @p arrived when its last
 * part completes. Allocated with malloc, sized before posting (ptc_mpi_post
 * never grows it): after the agreement nothing may fail on one process
 * alone, an injected failure included, or its peers would wait. */
static int each_mpi(MPI_Comm comm, size_t nsend, const int *to, const void *const *sbuf,
                    const size_t *slen, size_t nrecv, const int *from, void *const *rbuf,
                    const size_t *rlen, int (*arrived)(void *user, size_t j), void *user)
{
    size_t total = 0, nreq = 0;
    for (size_t j = 0; j < nrecv; j++)
        total += parts(rlen[j]);
    size_t nr = total; /* requests [0, nr) receive */
    for (size_t i = 0; i < nsend; i++)
        total += parts(slen[i]);
    /* left[j]: parts of receive j still to come; owner[k]: receive of request k */
    MPI_Request *req = malloc(sizeof *req * (total + 1));
    size_t *left = calloc(nrecv + 1, sizeof *left), *owner = malloc(sizeof *owner * (nr + 1));
    int *done = malloc(sizeof *done * (total + 1));
    if (!req || !left || !owner || !done) {
        free(req), free(left), free(owner), free(done);
        return ptc_error_set(PTC_E_NOMEM, "exchange: no memory for %zu requests", total);
    }
    size_t cap = total + 1;
    int rc = PTC_OK, crc = PTC_OK; /* the messages', arrived's */
    for (size_t j = 0; j < nrecv && rc == PTC_OK; j++) {
        size_t before = nreq;
        rc = ptc_mpi_post(&req, &nreq, &cap, rbuf[j], rlen[j], from[j], EACH_TAG, comm, false);
        for (size_t k = before; k < nreq; k++)
            owner[k] = j;
        left[j] = nreq - before;
    }
    for (size_t i = 0; i < nsend && rc == PTC_OK; i++)
        rc = ptc_mpi_post(&req, &nreq, &cap, (void *)sbuf[i], slen[i], to[i], EACH_TAG, comm,
                          true);
    for (size_t j = 0; j < nrecv && rc == PTC_OK && crc == PTC_OK; j++)
        if (!rlen[j]) /* an empty message: nothing comes */
            crc = arrived(user, j);
    /* what was posted completes, whatever failed */
    for (;;) {
        int n = 0, err = ptc_mpi_waitsome((int)nreq, req, &n, done);
        if (err != MPI_SUCCESS && rc == PTC_OK)
            rc = ptc_mpi_error(err, "MPI_Waitsome");
        if (err != MPI_SUCCESS || n == MPI_UNDEFINED)
            break;
        for (int k = 0; k < n; k++) {
            size_t q = (size_t)done[k];
            if (q < nr && --left[owner[q]] == 0 && rc == PTC_OK && crc == PTC_OK)
                crc = arrived(user, owner[q]);
        }
    }
    free(req), free(left), free(owner), free(done);
    return rc < 0 ? rc : crc;
}

int ptc_transport_exchange_each(const ptc_transport *t, int rc, const char *what, size_t nsend,
                                const int *to, const void *const *sbuf, const size_t *slen,
                                size_t nrecv, const int *from, void *const *rbuf,
                                const size_t *rlen, int (*arrived)(void *user, size_t j),
                                void *user)
{
    MPI_Comm comm;
    if (!mpi_comm_of(t, &comm)) {
        PTC_TRY(ptc_transport_exchange_after(t, rc, what, nsend, to, sbuf, slen, nrecv, from, rbuf,
                                             rlen));
        for (size_t j = 0; j < nrecv; j++)
            PTC_TRY(arrived(user, j));
        return PTC_OK;
    }
    /* agreed before the messages: a process leaving alone would hang the others */
    PTC_TRY(ptc_transport_agree(t, ptc_transport_check_peers(t, rc, nsend, to, nrecv, from), what));
    return each_mpi(comm, nsend, to, sbuf, slen, nrecv, from, rbuf, rlen, arrived, user);
}
