/* Internal helpers over a ptc_transport (include/ptc/transport.h). */
#ifndef PTC_BASE_TRANSPORT_INTERNAL_H
#define PTC_BASE_TRANSPORT_INTERNAL_H

#include "ptc/transport.h"

/* ptc_transport_exchange after the caller's own step: the processes agree
 * on @p rc (the caller's outcome so far) together with the messages'
 * checks in one round, and exchange only if every process is PTC_OK.
 * Saves the agreement a caller would otherwise make just before. Same
 * thread-safety as ptc_transport_exchange. */
int ptc_transport_exchange_after(const ptc_transport *t, int rc, const char *what, size_t nsend,
                                 const int *to, const void *const *sbuf, const size_t *slen,
                                 size_t nrecv, const int *from, void *const *rbuf,
                                 const size_t *rlen);

/* PTC_OK when every destination @p to and source @p from names a process
 * of @p t, else PTC_E_INVAL naming it; @p rc returned where it fails. */
int ptc_transport_check_peers(const ptc_transport *t, int rc, size_t nsend, const int *to,
                              size_t nrecv, const int *from);

/* ptc_transport_exchange_after that hands over each received message as
 * it arrives: @p arrived(@p user, j) runs on the calling thread once
 * rbuf[j] holds its bytes — as each message completes where the transport
 * is ptc_transport_mpi's (MPI_Waitsome; the same messages and tags as its
 * exchange), after the whole exchange elsewhere. A failure of @p arrived
 * stops the calls (the messages still complete) and is returned, NOT
 * agreed (the caller agrees it). */
int ptc_transport_exchange_each(const ptc_transport *t, int rc, const char *what, size_t nsend,
                                const int *to, const void *const *sbuf, const size_t *slen,
                                size_t nrecv, const int *from, void *const *rbuf,
                                const size_t *rlen, int (*arrived)(void *user, size_t j),
                                void *user);

#endif
