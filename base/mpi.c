/* MPI: the transport of include/ptc/transport.h over a communicator, and
 * the helpers of mpi_internal.h. A file of its own, so that a program that
 * never talks MPI (the light `ptc`) links none of it. */
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

#include "ptc/transport.h"
#include "base/mpi_internal.h"
#include "base/util_internal.h"

int ptc_mpi_error(int err, const char *call)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
        len = 0;
    return ptc_error_set(PTC_E_MPI, "%s failed: %.*s", call, len, msg);
}

/* ---- waits that leave the cores to processes with work ---------------------------- */

double ptc_mpi_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ptc_mpi_idle(long spins, double start)
{
    if (spins < PTC_MPI_SPINS)
        return;
    if (ptc_mpi_clock() - start > PTC_MPI_YIELD_S) {
        struct timespec ts = {0, (long)(PTC_MPI_NAP_S * 1e9)};
        nanosleep(&ts, NULL);
    } else {
        sched_yield();
    }
}

int ptc_mpi_waitall(int n, MPI_Request *req)
{
    double start = ptc_mpi_clock();
    for (long spins = 0;; spins++) {
        int done = 0, err = MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (err != MPI_SUCCESS || done)
            return err;
        ptc_mpi_idle(spins, start);
    }
}

int ptc_mpi_waitsome(int n, MPI_Request *req, int *outcount, int *indices)
{
    double start = ptc_mpi_clock();
    for (long spins = 0;; spins++) {
        int err = MPI_Testsome(n, req, outcount, indices, MPI_STATUSES_IGNORE);
        if (err != MPI_SUCCESS || *outcount != 0) /* some, or MPI_UNDEFINED: none active */
            return err;
        ptc_mpi_idle(spins, start);
    }
}

/* The nonblocking call @p post (its request: r), then the wait. */
#define POST_WAIT(post)                                                  \
    do {                                                                 \
        MPI_Request r;                                                   \
        int err_ = (post);                                               \
        return err_ != MPI_SUCCESS ? err_ : ptc_mpi_waitall(1, &r);      \
    } while (0)

int ptc_mpi_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm)
{
    POST_WAIT(MPI_Ibcast(buf, count, type, root, comm, &r));
}

int ptc_mpi_allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op,
                      MPI_Comm comm)
{
    POST_WAIT(MPI_Iallreduce(in, out, count, type, op, comm, &r));
}

int ptc_mpi_reduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, int root,
                   MPI_Comm comm)
{
    POST_WAIT(MPI_Ireduce(in, out, count, type, op, root, comm, &r));
}

int ptc_mpi_allgather(const void *in, int scount, MPI_Datatype stype, void *out, int rcount,
                      MPI_Datatype rtype, MPI_Comm comm)
{
    POST_WAIT(MPI_Iallgather(in, scount, stype, out, rcount, rtype, comm, &r));
}

int ptc_mpi_allgatherv(const void *in, int scount, MPI_Datatype stype, void *out,
                       const int *rcounts, const int *displs, MPI_Datatype rtype, MPI_Comm comm)
{
    POST_WAIT(MPI_Iallgatherv(in, scount, stype, out, rcounts, displs, rtype, comm, &r));
}

int ptc_mpi_gather(const void *in, int scount, MPI_Datatype stype, void *out, int rcount,
                   MPI_Datatype rtype, int root, MPI_Comm comm)
{
    POST_WAIT(MPI_Igather(in, scount, stype, out, rcount, rtype, root, comm, &r));
}

int ptc_mpi_barrier(MPI_Comm comm)
{
    POST_WAIT(MPI_Ibarrier(comm, &r));
}

/* ---- the transport over a communicator ------------------------------------------- */

/* The communicator travels in the transport's user pointer by its Fortran
 * handle (an integer whatever MPI_Comm is). */
static MPI_Comm comm_of(void *user)
{
    return MPI_Comm_f2c((MPI_Fint)(intptr_t)user);
}

static int mpi_allgather(void *user, const void *in, size_t n, void *out)
{
    if (n > INT_MAX)
        return ptc_error_set(PTC_E_RANGE, "all-gather of %zu bytes per process", n);
    PTC_MPI_TRY(ptc_mpi_allgather(in, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE, comm_of(user)));
    return PTC_OK;
}

static int mpi_gather(void *user, const void *in, size_t n, void *out, int root)
{
    if (n > INT_MAX)
        return ptc_error_set(PTC_E_RANGE, "gather of %zu bytes per process", n);
    PTC_MPI_TRY(ptc_mpi_gather(in, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE, root, comm_of(user)));
    return PTC_OK;
}

static int mpi_broadcast(void *user, void *buf, size_t n, int root)
{
    MPI_Comm comm = comm_of(user);
    /* MPI counts are int: more bytes go as several broadcasts */
    for (size_t off = 0; off < n; off += PTC_MPI_MSG_MAX) {
        size_t k = PTC_MIN(PTC_MPI_MSG_MAX, n - off);
        PTC_MPI_TRY(ptc_mpi_bcast((uint8_t *)buf + off, (int)k, MPI_BYTE, root, comm));
    }
    return PTC_OK;
}

static int mpi_barrier(void *user)
{
    PTC_MPI_TRY(ptc_mpi_barrier(comm_of(user)));
    return PTC_OK;
}

/* The tag of the exchange's messages (and tag + k for the k-th part of one
 * over PTC_MPI_MSG_MAX bytes); between two processes MPI keeps their order. */
#define EXCHANGE_TAG 27000

static int mpi_exchange(void *user, size_t nsend, const int *to, const void *const *sbuf,
                        const size_t *slen, size_t nrecv, const int *from, void *const *rbuf,
                        const size_t *rlen)
{
    MPI_Comm comm = comm_of(user);
    MPI_Request *req = NULL;
    size_t nreq = 0, cap = 0;
    int rc = PTC_OK;
    for (size_t j = 0; j < nrecv && rc == PTC_OK; j++)
        rc = ptc_mpi_post(&req, &nreq, &cap, rbuf[j], rlen[j], from[j], EXCHANGE_TAG, comm,
                          false);
    for (size_t i = 0; i < nsend && rc == PTC_OK; i++)
        rc = ptc_mpi_post(&req, &nreq, &cap, (void *)sbuf[i], slen[i], to[i], EXCHANGE_TAG,
                          comm, true);
    if (nreq) {
        int err = ptc_mpi_waitall((int)nreq, req);
        if (rc == PTC_OK && err != MPI_SUCCESS)
            rc = ptc_mpi_error(err, "MPI_Waitall");
    }
    ptc_free(req);
    return rc;
}

int ptc_transport_mpi(ptc_transport *t, MPI_Comm comm)
{
    int me, np;
    if (comm == MPI_COMM_NULL || MPI_Comm_rank(comm, &me) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &np) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "not a usable MPI communicator");
    *t = (ptc_transport){.rank = me, .size = np, .allgather = mpi_allgather,
                         .gather = mpi_gather, .broadcast = mpi_broadcast, .barrier = mpi_barrier,
                         .user = (void *)(intptr_t)MPI_Comm_c2f(comm), .exchange = mpi_exchange};
    return PTC_OK;
}

int ptc_mpi_agree(MPI_Comm comm, int rc, const char *what)
{
    ptc_transport t;
    PTC_TRY(ptc_transport_mpi(&t, comm));
    return ptc_transport_agree(&t, rc, what);
}

int ptc_mpi_post(MPI_Request **req, size_t *nreq, size_t *cap, void *buf, size_t len, int peer,
                 int tag0, MPI_Comm comm, bool send)
{
    size_t nmsg = len ? (len + PTC_MPI_MSG_MAX - 1) / PTC_MPI_MSG_MAX : 0;
    for (size_t k = 0; k < nmsg; k++) {
        PTC_TRY(ptc_grow((void **)req, cap, *nreq + 1, sizeof **req));
        size_t off = k * PTC_MPI_MSG_MAX, n = PTC_MIN(PTC_MPI_MSG_MAX, len - off);
        uint8_t *p = (uint8_t *)buf + off;
        if (send)
            PTC_MPI_TRY(MPI_Isend(p, (int)n, MPI_BYTE, peer, tag0 + (int)k, comm, &(*req)[*nreq]));
        else
            PTC_MPI_TRY(MPI_Irecv(p, (int)n, MPI_BYTE, peer, tag0 + (int)k, comm, &(*req)[*nreq]));
        (*nreq)++;
    }
    return PTC_OK;
}
