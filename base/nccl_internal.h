/* NCCL helpers of the modules built with NCCL (their *_nccl.c files): the
 * error text of a failed NCCL or CUDA call, and a communicator over an MPI
 * communicator. Only files built with NCCL include this. Never installed. */
#ifndef PTC_NCCL_INTERNAL_H
#define PTC_NCCL_INTERNAL_H

#include <cuda_runtime.h>
#include <mpi.h>
/* nccl.h declares a few functions without prototypes. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

/* Set "WHAT: <NCCL's text of @p r>" as the detail; returns PTC_E_NCCL. */
int ptc_nccl_error(ncclResult_t r, const char *what);

/* Set "WHAT: <CUDA's text of @p e>" as the detail; returns PTC_E_CUDA. */
int ptc_cuda_error(cudaError_t e, const char *what);

/* An NCCL communicator over all of @p comm (collective over @p comm): process
 * 0 makes the ncclUniqueId, the processes agree that it did (a failure is
 * every process's PTC_E_NCCL with process 0's message, so none waits in the
 * broadcast), then it is broadcast over MPI and each process joins.
 * Returns PTC_OK, PTC_E_MPI or PTC_E_NCCL (*out NULL). Destroy with
 * ncclCommDestroy. */
int ptc_nccl_comm_create(ncclComm_t *out, MPI_Comm comm);

#endif
