/**
 * @file transport.h
 * @brief The collective steps libptc needs from a group of processes, as a
 * small interface: an all-gather and a broadcast of bytes and a barrier.
 *
 * libptc's collective protocols (training-state checkpoints, ptc/ckpt.h) run
 * over any transport: ptc_transport_mpi() makes one over an MPI communicator;
 * the Python package passes one over torch.distributed (uint8 tensors). A
 * transport is a value: the caller owns it and whatever @c user points to.
 *
 * Every process of the group calls the same collective functions in the
 * same order with the same sizes, as with MPI. A callback returns PTC_OK or
 * a PTC_E_* code with its message set (ptc_error_set); a failed collective
 * leaves the group in an undefined state (the job is over).
 *
 * @note Thread safety: one collective call at a time per transport, made
 * by every process of it.
 */
#ifndef PTC_TRANSPORT_H
#define PTC_TRANSPORT_H

#include <stddef.h>

#include <mpi.h>

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A group of processes and its collectives. */
typedef struct ptc_transport {
    int rank; /**< this process, 0 <= rank < size */
    int size; /**< processes in the group (1: no communication happens) */
    /** Every process contributes @p n bytes at @p in; @p out (size × n
     * bytes) receives process p's at offset p × n. */
    int (*allgather)(void *user, const void *in, size_t n, void *out);
    /** Optional (NULL: the all-gather serves): every process contributes
     * @p n bytes at @p in; only process @p root's @p out (size × n bytes)
     * receives them, process p's at offset p × n (@p out is NULL elsewhere). */
    int (*gather)(void *user, const void *in, size_t n, void *out, int root);
    /** @p n bytes at @p buf of process @p root into every process's @p buf. */
    int (*broadcast)(void *user, void *buf, size_t n, int root);
    /** Wait for every process. */
    int (*barrier)(void *user);
    void *user; /**< passed to the callbacks */
    /** Optional (NULL: ptc_transport_exchange sends the messages through the
     * all-gather, so every process receives every message): point-to-point
     * messages, collectively. This process sends @p nsend messages
     * (@p sbuf[i], @p slen[i] bytes, to process @p to[i]) and receives
     * @p nrecv (@p rlen[j] bytes from process @p from[j] into @p rbuf[j]);
     * the messages from one process to another are matched in the order
     * both give them. Every process calls it, with no messages if it has
     * none. */
    int (*exchange)(void *user, size_t nsend, const int *to, const void *const *sbuf,
                    const size_t *slen, size_t nrecv, const int *from, void *const *rbuf,
                    const size_t *rlen);
} ptc_transport;

/**
 * The transport of this process alone (rank 0, size 1): every collective
 * returns at once.
 */
PTC_API void ptc_transport_self(ptc_transport *t);

/**
 * A transport over an MPI communicator (@p comm is used as is, not
 * duplicated: it must outlive the transport).
 * @return PTC_OK or PTC_E_MPI (not a usable communicator).
 */
PTC_API int ptc_transport_mpi(ptc_transport *t, MPI_Comm comm);

/**
 * Agree on an outcome: every process passes its @p rc; when all are PTC_OK
 * every process returns PTC_OK. Otherwise every process returns the code of
 * the lowest-numbered failing process with the message "WHAT failed on
 * process P: its message". No process is left waiting in a collective the
 * others skipped.
 * @return PTC_OK, the failing process's code, or the transport's error.
 */
PTC_API int ptc_transport_agree(const ptc_transport *t, int rc, const char *what);

/**
 * Gather bytes of any length from every process to every process.
 * @param in,n     this process's bytes
 * @param out      receives one buffer holding every process's bytes, in
 *                 process order (release with ptc_transport_free)
 * @param lens     size entries: receives each process's byte count
 * @return PTC_OK, PTC_E_NOMEM, or the transport's error.
 */
PTC_API int ptc_transport_allgatherv(const ptc_transport *t, const void *in, size_t n,
                                     void **out, size_t *lens);

/**
 * Gather bytes of any length from every process to process @p root only
 * (the transport's gather, or its all-gather where it has none).
 * @param out   on @p root: receives every process's bytes in process order
 *              (ptc_transport_free); elsewhere: set to NULL
 * @param lens  size entries (on every process): each process's byte count
 * @return PTC_OK, PTC_E_NOMEM, or the transport's error.
 */
PTC_API int ptc_transport_gatherv(const ptc_transport *t, const void *in, size_t n, int root,
                                  void **out, size_t *lens);

/**
 * Point-to-point messages between the processes, collectively (the
 * transport's exchange, or two all-gathers where it has none: the messages'
 * sizes, then their bytes). Arguments as ptc_transport.exchange.
 * @return PTC_OK; PTC_E_INVAL (a message expected from a process that did
 *   not send it, or of another size; the same outcome on the processes
 *   concerned only: agree on it); PTC_E_NOMEM; the transport's error.
 */
PTC_API int ptc_transport_exchange(const ptc_transport *t, size_t nsend, const int *to,
                                   const void *const *sbuf, const size_t *slen, size_t nrecv,
                                   const int *from, void *const *rbuf, const size_t *rlen);

/** Free a buffer of ptc_transport_allgatherv / _gatherv (NULL: no-op). */
PTC_API void ptc_transport_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
