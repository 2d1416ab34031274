/* MPI helpers every module that talks MPI uses: the error text of a failed
 * call, agreement on an outcome, and posting a buffer of any size. Never
 * installed. */
#ifndef PTC_MPI_INTERNAL_H
#define PTC_MPI_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include <mpi.h>

/* "CALL failed: <MPI's text of @p err>" as the PTC_E_MPI detail. */
int ptc_mpi_error(int err, const char *call);

/* Return ptc_mpi_error of @p call if it fails. */
#define PTC_MPI_TRY(call)                                  \
    do {                                                   \
        int ptc_mpi_rc_ = (call);                          \
        if (ptc_mpi_rc_ != MPI_SUCCESS)                    \
            return ptc_mpi_error(ptc_mpi_rc_, #call);      \
    } while (0)

/* ptc_transport_agree over @p comm: every process returns PTC_OK, or the
 * code of the lowest failing process with "WHAT failed on process P: its
 * message". */
int ptc_mpi_agree(MPI_Comm comm, int rc, const char *what);

/* The largest single MPI message ptc_mpi_post sends (MPI counts are int). */
#define PTC_MPI_MSG_MAX ((size_t)1 << 30)

/* Post a non-blocking send (or receive) of @p len bytes to (from) @p peer
 * as messages of at most PTC_MPI_MSG_MAX bytes with tags tag0, tag0 + 1,
 * ...; the requests are appended to *req (*nreq of *cap, grown). */
int ptc_mpi_post(MPI_Request **req, size_t *nreq, size_t *cap, void *buf, size_t len, int peer,
                 int tag0, MPI_Comm comm, bool send);

/* ---- waits that leave the cores to processes with work ---------------------------- */

/* Waiting in MPI spins in its progress loop, which on a host with more
 * ranks (or threads: a background save, data loaders) than cores takes the
 * cores from those with work. PTC's own waits test instead, and back off:
 * PTC_MPI_SPINS tests, then yields until PTC_MPI_YIELD_S seconds have
 * passed, then sleeps PTC_MPI_NAP_S between tests. */
#define PTC_MPI_SPINS 64
#define PTC_MPI_YIELD_S 50e-6
#define PTC_MPI_NAP_S 20e-6

/* Seconds of a monotonic clock. */
double ptc_mpi_clock(void);

/* One idle moment of a wait begun at @p start (ptc_mpi_clock) after
 * @p spins tests: nothing, a yield or a nap, as above. */
void ptc_mpi_idle(long spins, double start);

/* MPI_Waitall / MPI_Waitsome (statuses ignored) as such waits; they return
 * MPI's error codes. */
int ptc_mpi_waitall(int n, MPI_Request *req);
int ptc_mpi_waitsome(int n, MPI_Request *req, int *outcount, int *indices);

/* The blocking collectives PTC calls, with MPI's arguments and error codes:
 * the nonblocking collective, then ptc_mpi_waitall. Every process of a
 * communicator must call the same one (a nonblocking collective never
 * matches a blocking one): PTC's code calls only these. */
int ptc_mpi_bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
int ptc_mpi_allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op,
                      MPI_Comm comm);
int ptc_mpi_reduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, int root,
                   MPI_Comm comm);
int ptc_mpi_allgather(const void *in, int scount, MPI_Datatype stype, void *out, int rcount,
                      MPI_Datatype rtype, MPI_Comm comm);
int ptc_mpi_allgatherv(const void *in, int scount, MPI_Datatype stype, void *out,
                       const int *rcounts, const int *displs, MPI_Datatype rtype, MPI_Comm comm);
int ptc_mpi_gather(const void *in, int scount, MPI_Datatype stype, void *out, int rcount,
                   MPI_Datatype rtype, int root, MPI_Comm comm);
int ptc_mpi_barrier(MPI_Comm comm);

#endif
