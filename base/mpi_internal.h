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

#endif
