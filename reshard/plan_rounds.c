/* The rounds of an exchange in bounded memory, agreed by every process from
 * its own bytes alone (its per-process plan is all it has): one all-reduce
 * of the per-tensor maxima, a cut that every process computes alike, and
 * one all-reduce of the fullest round. */
#include <string.h>

#include "base/mpi_internal.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

int ptc_plan_rounds(MPI_Comm comm, const uint64_t *bytes, size_t nt, uint64_t budget,
                    size_t *s, size_t *nrounds, uint64_t *max_round_bytes,
                    uint64_t *max_total_bytes)
{
    *nrounds = 0;
    if (nt > (size_t)INT32_MAX - 1)
        return ptc_error_set(PTC_E_RANGE, "%zu tensors are too many to agree on in one message",
                             nt);
    /* m[t]: the most any process moves of tensor t; m[nt]: of all tensors */
    uint64_t *m = ptc_malloc(sizeof *m * (nt + 1));
    /* every process reaches each collective, whatever failed before it */
    int rc = ptc_mpi_agree(comm, m ? PTC_OK : PTC_E_NOMEM, "cutting the rounds");
    if (rc != PTC_OK) {
        ptc_free(m);
        return rc;
    }
    uint64_t total = 0;
    for (size_t t = 0; t < nt; t++) {
        m[t] = bytes[t];
        total += bytes[t];
    }
    m[nt] = total;
    int mrc = ptc_mpi_allreduce(MPI_IN_PLACE, m, (int)(nt + 1), MPI_UINT64_T, MPI_MAX, comm);
    if (mrc != MPI_SUCCESS) {
        ptc_free(m);
        return ptc_mpi_error(mrc, "MPI_Allreduce of the rounds' bytes");
    }
    /* a round closes before the tensor that would take its fullest
     * process over the budget (bounded by the sum of the maxima) */
    size_t n = 0;
    uint64_t cur = 0, mine = 0, round_max = 0;
    if (nt)
        s[n++] = 0;
    for (size_t t = 0; t < nt; t++) {
        if (cur > 0 && cur + m[t] > budget) {
            s[n++] = t;
            cur = 0;
            mine = 0;
        }
        cur += m[t];
        mine += bytes[t];
        round_max = PTC_MAX(round_max, mine);
    }
    s[n] = nt;
    if (max_total_bytes)
        *max_total_bytes = m[nt];
    ptc_free(m);
    uint64_t top = 0;
    PTC_MPI_TRY(ptc_mpi_allreduce(&round_max, &top, 1, MPI_UINT64_T, MPI_MAX, comm));
    if (max_round_bytes)
        *max_round_bytes = top;
    *nrounds = n;
    return PTC_OK;
}
