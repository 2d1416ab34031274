/* The collective checkpoint protocol: ckpt.c's steps over a transport
 * (include/ptc/transport.h), the one implementation that the C API (over
 * MPI) and the Python package (over torch.distributed) both run. Every step
 * ends in an agreement, so a failure on one process reaches every other one
 * as an error carrying the failing process's message, and no process waits
 * in a collective the others skipped. Process 0 begins, commits or aborts. */
#include <stdio.h>
#include <string.h>

#include "ptc/ckpt.h"
#include "base/util_internal.h"

/* Bytes of a u64 on the wire (little-endian, as everywhere in the store). */
static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Process 0's @p n u64 values to every process. */
static int bcast_u64(const ptc_transport *t, uint64_t *v, size_t n)
{
    uint8_t wire[16];
    for (size_t i = 0; i < n; i++)
        put_u64(wire + 8 * i, v[i]);
    PTC_TRY(t->broadcast(t->user, wire, 8 * n, 0));
    for (size_t i = 0; i < n; i++)
        v[i] = get_u64(wire + 8 * i);
    return PTC_OK;
}

/* A failure of the transport itself: the group cannot agree any more. */
static int lost(int rc, const char *what, const char *step)
{
    return ptc_error_set(rc, "%s: %s: %s", what, step, ptc_last_error());
}

int ptc_ckpt_save_over(const ptc_transport *t, ptc_store *s, const ptc_layout *l,
                       const ptc_rules *rules, const int *ranks, size_t nranks,
                       const void *const *bufs, const ptc_ckpt_record *rec,
                       const ptc_ckpt_options *opts, uint64_t *version)
{
    static const char what[] = "checkpoint save";
    ptc_ckpt_txn *txn = NULL;
    void *desc = NULL, *all = NULL;
    size_t dlen = 0, *lens = NULL;
    const void **descs = NULL;
    uint64_t vp[2] = {0, 0};
    int rc = PTC_OK;

    /* process 0: check the record before anyone writes, then begin */
    if (t->rank == 0) {
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
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out_free;
    if ((rc = bcast_u64(t, vp, 2)) < 0) {
        rc = lost(rc, what, "broadcast of the version");
        goto out_free;
    }

    /* every process: its ranks' shards */
    rc = ptc_ckpt_write_local(s, vp[0], vp[1], l, ranks, nranks, bufs, opts, &desc, &dlen);
    if (rc == PTC_OK && !(lens = ptc_calloc((size_t)t->size, sizeof *lens)))
        rc = PTC_E_NOMEM;
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out_free;

    /* the descriptors to process 0, which commits them */
    if ((rc = ptc_transport_gatherv(t, desc, dlen, 0, &all, lens)) < 0) {
        rc = lost(rc, what, "gather of the shard descriptors");
        goto out_free;
    }
    uint64_t committed = 0;
    if (t->rank == 0) {
        if (!(descs = ptc_calloc((size_t)t->size, sizeof *descs))) {
            rc = PTC_E_NOMEM;
        } else {
            size_t at = 0;
            for (int p = 0; p < t->size; p++) {
                descs[p] = (const uint8_t *)all + at;
                at += lens[p];
            }
            rc = ptc_ckpt_commit(txn, descs, lens, (size_t)t->size, rec, &committed);
            txn = NULL; /* consumed either way */
        }
    }
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out_free;
    if ((rc = bcast_u64(t, &committed, 1)) < 0) {
        rc = lost(rc, what, "broadcast of the committed version");
        goto out_free;
    }
    if (version)
        *version = committed;
out_free:
    /* after a failed agreement every process is past its writes, so the
     * version's pack files can go */
    ptc_ckpt_abort(txn);
    ptc_store_free(desc);
    ptc_transport_free(all);
    ptc_free(lens);
    ptc_free(descs);
    return rc;
}

int ptc_ckpt_load_over(const ptc_transport *t, ptc_store *s, uint64_t version,
                       const ptc_layout *l, const int *ranks, size_t nranks, void *const *bufs,
                       const ptc_ckpt_options *opts, ptc_ckpt_record *rec, uint64_t *loaded)
{
    static const char what[] = "checkpoint load";
    if (rec)
        memset(rec, 0, sizeof *rec);
    uint64_t v = version;
    int rc = PTC_OK;
    /* one version for all, even if another job commits meanwhile */
    if (t->rank == 0 && v == 0) {
        rc = ptc_store_latest(s, &v);
        if (rc == PTC_OK && v == 0)
            rc = ptc_error_set(PTC_E_NOTFOUND, "store %s has no versions", ptc_store_dir(s));
    }
    PTC_TRY(ptc_transport_agree(t, rc, what));
    if ((rc = bcast_u64(t, &v, 1)) < 0)
        return lost(rc, what, "broadcast of the version");
    rc = ptc_ckpt_load_local(s, v, l, ranks, nranks, bufs, opts, rec, loaded);
    rc = ptc_transport_agree(t, rc, what);
    if (rc < 0 && rec)
        ptc_ckpt_record_free(rec);
    return rc;
}

int ptc_ckpt_save(ptc_store *s, const ptc_layout *l, const ptc_rules *rules, const int *ranks,
                  size_t nranks, const void *const *bufs, const ptc_ckpt_record *rec,
                  const ptc_ckpt_options *opts, MPI_Comm comm, uint64_t *version)
{
    ptc_transport t;
    if (ptc_transport_mpi(&t, comm) < 0)
        return ptc_error_set(PTC_E_MPI, "checkpoint save: not a usable communicator");
    return ptc_ckpt_save_over(&t, s, l, rules, ranks, nranks, bufs, rec, opts, version);
}

int ptc_ckpt_load(ptc_store *s, uint64_t version, const ptc_layout *l, const int *ranks,
                  size_t nranks, void *const *bufs, const ptc_ckpt_options *opts, MPI_Comm comm,
                  ptc_ckpt_record *rec, uint64_t *loaded)
{
    if (rec)
        memset(rec, 0, sizeof *rec);
    ptc_transport t;
    if (ptc_transport_mpi(&t, comm) < 0)
        return ptc_error_set(PTC_E_MPI, "checkpoint load: not a usable communicator");
    return ptc_ckpt_load_over(&t, s, version, l, ranks, nranks, bufs, opts, rec, loaded);
}
