/* The collective checkpoint calls: ckpt.c's steps over an MPI
 * communicator. Every step ends in an agreement (agree()), so a failure on
 * one process reaches every other one as an error carrying the failing
 * process's message, and no process waits in a collective the others
 * skipped. Process 0 begins, commits or aborts. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "ptc/ckpt.h"
#include "base/util_internal.h"

/* Text of a failure sent from the failing process to the others. */
typedef struct failure {
    int code;
    char msg[1000];
} failure;

/* Every process learns whether any failed; if so, the lowest failing
 * process sends its code and message, and every process returns them. */
static int agree(MPI_Comm comm, int me, int rc, const char *what)
{
    struct {
        int ok;
        int rank;
    } in = {rc == PTC_OK ? 1 : 0, me}, out = {1, 0};
    if (MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MINLOC, comm) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "%s: MPI_Allreduce failed", what);
    if (out.ok)
        return PTC_OK;
    failure f;
    memset(&f, 0, sizeof f);
    if (me == out.rank) {
        f.code = rc;
        snprintf(f.msg, sizeof f.msg, "%s", ptc_last_error()[0] ? ptc_last_error() : ptc_strerror(rc));
    }
    if (MPI_Bcast(&f, (int)sizeof f, MPI_BYTE, out.rank, comm) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "%s: MPI_Bcast of a failure failed", what);
    f.msg[sizeof f.msg - 1] = 0;
    return ptc_error_set(f.code < 0 ? f.code : PTC_E_MPI, "%s failed on process %d: %s", what,
                         out.rank, f.msg);
}

int ptc_ckpt_save(ptc_store *s, const ptc_layout *l, const ptc_rules *rules, const int *ranks,
                  size_t nranks, const void *const *bufs, const ptc_ckpt_record *rec,
                  const ptc_ckpt_options *opts, MPI_Comm comm, uint64_t *version)
{
    static const char what[] = "checkpoint save";
    int me, np;
    if (MPI_Comm_rank(comm, &me) != MPI_SUCCESS || MPI_Comm_size(comm, &np) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "%s: not a usable communicator", what);
    ptc_ckpt_txn *txn = NULL;
    void *desc = NULL;
    size_t dlen = 0;
    int *lens = NULL, *displs = NULL;
    uint8_t *all = NULL;
    const void **descs = NULL;
    size_t *dlens = NULL;
    uint64_t vp[2] = {0, 0};
    int rc = PTC_OK;

    /* process 0: check the record before anyone writes, then begin */
    if (me == 0) {
        char *json = NULL;
        if (rec)
            rc = ptc_ckpt_record_to_json(rec, &json);
        ptc_store_free(json);
        if (rc == PTC_OK)
            rc = ptc_ckpt_begin(&txn, s, l, rules, opts);
        if (rc == PTC_OK) {
            vp[0] = ptc_ckpt_txn_version(txn);
            vp[1] = ptc_ckpt_txn_parent(txn);
        }
    }
    if ((rc = agree(comm, me, rc, what)) < 0)
        goto out_free;
    if (MPI_Bcast(vp, 2, MPI_UINT64_T, 0, comm) != MPI_SUCCESS) {
        rc = ptc_error_set(PTC_E_MPI, "%s: MPI_Bcast of the version failed", what);
        goto out_free;
    }

    /* every process: its ranks' shards */
    rc = ptc_ckpt_write_local(s, vp[0], vp[1], l, ranks, nranks, bufs, opts, &desc, &dlen);
    if (rc == PTC_OK && dlen > INT_MAX)
        rc = ptc_error_set(PTC_E_RANGE, "%s: %zu bytes of shard descriptors", what, dlen);
    if ((rc = agree(comm, me, rc, what)) < 0)
        goto out_free;

    /* the descriptors to process 0 */
    int mine = (int)dlen;
    if (me == 0 && !(lens = ptc_calloc((size_t)np, sizeof *lens)))
        rc = PTC_E_NOMEM;
    if ((rc = agree(comm, me, rc, what)) < 0)
        goto out_free;
    if (MPI_Gather(&mine, 1, MPI_INT, lens, 1, MPI_INT, 0, comm) != MPI_SUCCESS) {
        rc = ptc_error_set(PTC_E_MPI, "%s: MPI_Gather of descriptor sizes failed", what);
        goto out_free;
    }
    if (me == 0) {
        displs = ptc_calloc((size_t)np, sizeof *displs);
        descs = ptc_calloc((size_t)np, sizeof *descs);
        dlens = ptc_calloc((size_t)np, sizeof *dlens);
        long long total = 0;
        for (int p = 0; p < np; p++) {
            if (displs)
                displs[p] = (int)PTC_MIN(total, INT_MAX);
            total += lens[p];
        }
        if (!displs || !descs || !dlens)
            rc = PTC_E_NOMEM;
        else if (total > INT_MAX)
            rc = ptc_error_set(PTC_E_RANGE, "%s: %lld bytes of shard descriptors", what, total);
        else if (!(all = ptc_malloc((size_t)total + 1)))
            rc = PTC_E_NOMEM;
        for (int p = 0; rc == PTC_OK && p < np; p++) {
            descs[p] = all + displs[p];
            dlens[p] = (size_t)lens[p];
        }
    }
    if ((rc = agree(comm, me, rc, what)) < 0)
        goto out_free;
    if (MPI_Gatherv(desc, mine, MPI_BYTE, all, lens, displs, MPI_BYTE, 0, comm) != MPI_SUCCESS) {
        rc = ptc_error_set(PTC_E_MPI, "%s: MPI_Gatherv of descriptors failed", what);
        goto out_free;
    }

    /* process 0 commits (the transaction is consumed either way) */
    uint64_t committed = 0;
    if (me == 0) {
        rc = ptc_ckpt_commit(txn, descs, dlens, (size_t)np, rec, &committed);
        txn = NULL;
    }
    if ((rc = agree(comm, me, rc, what)) < 0)
        goto out_free;
    if (MPI_Bcast(&committed, 1, MPI_UINT64_T, 0, comm) != MPI_SUCCESS) {
        rc = ptc_error_set(PTC_E_MPI, "%s: MPI_Bcast of the committed version failed", what);
        goto out_free;
    }
    if (version)
        *version = committed;
out_free:
    /* after a failed agreement every process is past its writes, so the
     * version's pack files can go */
    ptc_ckpt_abort(txn);
    ptc_store_free(desc);
    ptc_free(lens);
    ptc_free(displs);
    ptc_free(all);
    ptc_free(descs);
    ptc_free(dlens);
    return rc;
}

int ptc_ckpt_load(ptc_store *s, uint64_t version, const ptc_layout *l, const int *ranks,
                  size_t nranks, void *const *bufs, const ptc_ckpt_options *opts, MPI_Comm comm,
                  ptc_ckpt_record *rec, uint64_t *loaded)
{
    static const char what[] = "checkpoint load";
    if (rec)
        memset(rec, 0, sizeof *rec);
    int me;
    if (MPI_Comm_rank(comm, &me) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "%s: not a usable communicator", what);
    uint64_t v = version;
    int rc = PTC_OK;
    /* one version for all, even if another job commits meanwhile */
    if (me == 0 && v == 0) {
        rc = ptc_store_latest(s, &v);
        if (rc == PTC_OK && v == 0)
            rc = ptc_error_set(PTC_E_NOTFOUND, "store %s has no versions", ptc_store_dir(s));
    }
    PTC_TRY(agree(comm, me, rc, what));
    if (MPI_Bcast(&v, 1, MPI_UINT64_T, 0, comm) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "%s: MPI_Bcast of the version failed", what);
    rc = ptc_ckpt_load_local(s, v, l, ranks, nranks, bufs, opts, rec, loaded);
    rc = agree(comm, me, rc, what);
    if (rc < 0 && rec)
        ptc_ckpt_record_free(rec);
    return rc;
}
