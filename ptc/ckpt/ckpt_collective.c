/* The collective checkpoint protocol: ckpt.c's steps over a transport
 * (include/ptc/transport.h), the one implementation that the C API (over
 * MPI) and the Python package (over torch.distributed) both run. Every step
 * ends in an agreement, so a failure on one process reaches every other one
 * as an error carrying the failing process's message, and no process waits
 * in a collective the others skipped. Process 0 begins, commits or aborts. */
#include <stdio.h>
#include <string.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"

/* Process 0's @p n u64 values to every process. */
static int bcast_u64(const ptc_transport *t, uint64_t *v, size_t n)
{
    uint8_t wire[16];
    for (size_t i = 0; i < n; i++)
        ptc_put_le64(wire + 8 * i, v[i]);
    PTC_TRY(t->broadcast(t->user, wire, 8 * n, 0));
    for (size_t i = 0; i < n; i++)
        v[i] = ptc_get_le64(wire + 8 * i);
    return PTC_OK;
}

int ptc_ckpt_save_begin(const ptc_transport *t, ptc_store *s, const ptc_layout *l,
                        const ptc_rules *rules, const ptc_ckpt_record *rec,
                        const ptc_ckpt_options *opts, int rc, ptc_ckpt_saving *sv)
{
    static const char what[] = "checkpoint save";
    uint64_t vp[2] = {0, 0};
    /* process 0: check the record before anyone writes, then begin */
    if (t->rank == 0 && rc == PTC_OK) {
        char *json = NULL;
        if (rec)
            rc = ptc_ckpt_record_to_json(rec, &json);
        ptc_store_free(json);
        if (rc == PTC_OK)
            rc = ptc_ckpt_begin(&sv->txn, s, l, rules, opts);
        if (rc == PTC_OK) {
            vp[0] = ptc_ckpt_txn_version(sv->txn);
            vp[1] = ptc_ckpt_txn_parent(sv->txn);
        }
    }
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out_abort;
    if ((rc = bcast_u64(t, vp, 2)) < 0) {
        rc = ptc_ckpt_lost(rc, what, "broadcast of the version");
        goto out_abort;
    }
    sv->version = vp[0];
    sv->parent = vp[1];
    return PTC_OK;
out_abort:
    ptc_ckpt_saving_free(sv);
    return rc;
}

void ptc_ckpt_saving_free(ptc_ckpt_saving *sv)
{
    /* after a failed agreement every process is past its writes, so the
     * version's pack files can go */
    ptc_ckpt_abort(sv->txn);
    ptc_store_free(sv->desc);
    memset(sv, 0, sizeof *sv);
}

int ptc_ckpt_save_finish(const ptc_transport *t, int rc, const ptc_ckpt_record *rec,
                         ptc_ckpt_saving *sv, uint64_t *version)
{
    static const char what[] = "checkpoint save";
    void *all = NULL;
    size_t *lens = NULL;
    const void **descs = NULL;
    if (rc == PTC_OK && !(lens = ptc_calloc((size_t)t->size, sizeof *lens)))
        rc = PTC_E_NOMEM;
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out_free;

    /* the descriptors to process 0, which commits them */
    if ((rc = ptc_transport_gatherv(t, sv->desc, sv->dlen, 0, &all, lens)) < 0) {
        rc = ptc_ckpt_lost(rc, what, "gather of the shard descriptors");
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
            rc = ptc_ckpt_commit(sv->txn, descs, lens, (size_t)t->size, rec, &committed);
            sv->txn = NULL; /* consumed either way */
        }
    }
    if ((rc = ptc_transport_agree(t, rc, what)) < 0)
        goto out_free;
    if ((rc = bcast_u64(t, &committed, 1)) < 0) {
        rc = ptc_ckpt_lost(rc, what, "broadcast of the committed version");
        goto out_free;
    }
    if (version)
        *version = committed;
out_free:
    ptc_ckpt_saving_free(sv);
    ptc_transport_free(all);
    ptc_free(lens);
    ptc_free(descs);
    return rc;
}

/* The save, with this process's outcome so far (@p rc) in its first
 * agreement. */
static int save_run(const ptc_transport *t, ptc_store *s, const ptc_layout *l,
                    const ptc_rules *rules, const int *ranks, size_t nranks,
                    const void *const *bufs, const ptc_ckpt_record *rec,
                    const ptc_ckpt_options *opts, const ptc_ckpt_io *io, int rc,
                    uint64_t *version)
{
    ptc_ckpt_saving sv = {0};
    PTC_TRY(ptc_ckpt_save_begin(t, s, l, rules, rec, opts, rc, &sv));
    rc = ptc_ckpt_write_local_io(s, sv.version, sv.parent, l, ranks, nranks, bufs, opts, io,
                                 &sv.desc, &sv.dlen);
    return ptc_ckpt_save_finish(t, rc, rec, &sv, version);
}

int ptc_ckpt_save_over(const ptc_transport *t, ptc_store *s, const ptc_layout *l,
                       const ptc_rules *rules, const int *ranks, size_t nranks,
                       const void *const *bufs, const ptc_ckpt_record *rec,
                       const ptc_ckpt_options *opts, uint64_t *version)
{
    return save_run(t, s, l, rules, ranks, nranks, bufs, rec, opts, NULL, PTC_OK, version);
}

int ptc_ckpt_bind_save(const ptc_layout *l, const int *ranks, size_t nranks,
                       const ptc_ckpt_local *locals, size_t n, void ***bufs)
{
    *bufs = NULL;
    for (size_t k = 0; k < ptc_layout_count(l); k++)
        PTC_TRY(ptc_layout_check_cover(l, k)); /* an explicit layout must hold everything */
    return ptc_ckpt_bind(l, ranks, nranks, locals, n, "the layout", false, bufs);
}

int ptc_ckpt_save_locals_over(const ptc_transport *t, int rc, ptc_store *s, const int *ranks,
                              size_t nranks, const ptc_ckpt_local *locals, size_t n,
                              const ptc_config *cfg, const ptc_rules *rules,
                              const ptc_ckpt_record *rec, const ptc_ckpt_options *opts,
                              uint64_t *version)
{
    static const char what[] = "checkpoint save";
    ptc_layout *l = NULL;
    void **bufs = NULL;
    uint8_t *tab = NULL;
    ptc_ckpt_io io = {0};
    PTC_TRY(ptc_ckpt_collect(t, what, rc, ranks, nranks, locals, n, cfg, rules, &l));
    /* a local tensor that does not fit is agreed with process 0's begin */
    rc = ptc_ckpt_bind_save(l, ranks, nranks, locals, n, &bufs);
    if (rc == PTC_OK)
        rc = ptc_ckpt_io_bind(&io, &tab, l, ranks, nranks, locals, n,
                              opts ? opts->stream : NULL, true);
    rc = save_run(t, s, l, rules, ranks, nranks, (const void *const *)bufs, rec, opts, &io, rc,
                  version);
    ptc_free(tab);
    ptc_free(bufs);
    ptc_layout_destroy(l);
    return rc;
}

/* Process 0 resolves the version (0: the newest) for every process, even if
 * another job commits meanwhile; @p rc, this process's outcome so far, is
 * agreed with it. */
static int resolve_version(const ptc_transport *t, ptc_store *s, int rc, uint64_t *version)
{
    static const char what[] = "checkpoint load";
    uint64_t v = *version;
    if (t->rank == 0 && rc == PTC_OK && v == 0) {
        rc = ptc_store_latest(s, &v);
        if (rc == PTC_OK && v == 0)
            rc = ptc_error_set(PTC_E_NOTFOUND, "store %s has no versions", ptc_store_dir(s));
    }
    PTC_TRY(ptc_transport_agree(t, rc, what));
    if ((rc = bcast_u64(t, &v, 1)) < 0)
        return ptc_ckpt_lost(rc, what, "broadcast of the version");
    *version = v;
    return PTC_OK;
}

int ptc_ckpt_load_over(const ptc_transport *t, ptc_store *s, uint64_t version,
                       const ptc_layout *l, const int *ranks, size_t nranks, void *const *bufs,
                       const ptc_ckpt_options *opts, ptc_ckpt_record *rec, uint64_t *loaded)
{
    if (rec)
        memset(rec, 0, sizeof *rec);
    PTC_TRY(resolve_version(t, s, PTC_OK, &version));
    int rc = ptc_ckpt_load_local(s, version, l, ranks, nranks, bufs, opts, rec, loaded);
    rc = ptc_transport_agree(t, rc, "checkpoint load");
    if (rc < 0 && rec)
        ptc_ckpt_record_free(rec);
    return rc;
}

/* This process's part of a load of described tensors: the layout of
 * @p version under @p cfg (NULL: the explicit layout the processes
 * describe, @p l), the check of the tensors against it, the reads. */
static int load_locals(ptc_store *s, uint64_t version, const int *ranks, size_t nranks,
                       const ptc_ckpt_local *locals, size_t n, const ptc_config *cfg,
                       const ptc_layout *given, const ptc_ckpt_options *opts,
                       ptc_ckpt_record *rec, uint64_t *loaded)
{
    ptc_store_reader *rd = NULL;
    ptc_layout *l = NULL;
    void **bufs = NULL;
    uint8_t *tab = NULL;
    ptc_ckpt_io io = {0};
    char where[48];
    snprintf(where, sizeof where, "version %llu", (unsigned long long)version);
    int rc = PTC_OK;
    if (!given) {
        rc = ptc_store_reader_open(&rd, s, version);
        if (rc == PTC_OK)
            rc = ptc_layout_of_version_rules(&l, rd, cfg, opts ? opts->rules : NULL);
        ptc_store_reader_close(rd);
        given = l;
    }
    if (rc == PTC_OK)
        rc = ptc_ckpt_bind(given, ranks, nranks, locals, n, where, true, &bufs);
    if (rc == PTC_OK)
        rc = ptc_ckpt_io_bind(&io, &tab, given, ranks, nranks, locals, n,
                              opts ? opts->stream : NULL, false);
    if (rc == PTC_OK)
        rc = ptc_ckpt_load_local_io(s, version, given, ranks, nranks, bufs, opts, &io, rec,
                                    loaded);
    ptc_free(tab);
    ptc_free(bufs);
    ptc_layout_destroy(l);
    return rc;
}

/* The explicit layout of the processes' local tensors, to load @p version
 * into (collective). */
static int collect_target(const ptc_transport *t, ptc_store *s, uint64_t version,
                          const int *ranks, size_t nranks, const ptc_ckpt_local *locals,
                          size_t n, ptc_layout **out)
{
    ptc_store_reader *rd = NULL;
    int rc = ptc_store_reader_open(&rd, s, version);
    /* a process that cannot open the version says so in the collection */
    rc = rc == PTC_OK ? ptc_ckpt_collect_load(t, "checkpoint load", ranks, nranks, locals, n,
                                              rd, out)
                      : ptc_ckpt_collect(t, "checkpoint load", rc, ranks, nranks, locals, n,
                                         NULL, NULL, out);
    ptc_store_reader_close(rd);
    return rc;
}

/* Streamed locals are refused by the binds of host buffers. */
static int host_locals(const ptc_ckpt_local *locals, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (locals[i].streamed)
            return ptc_error_set(PTC_E_UNSUPPORTED, "tensor '%.200s' is not in host memory "
                                 "(streamed): this call binds host buffers only",
                                 locals[i].name);
    return PTC_OK;
}

int ptc_ckpt_bind_locals_over(const ptc_transport *t, int rc, ptc_store *s, uint64_t version,
                              bool save, const int *ranks, size_t nranks,
                              const ptc_ckpt_local *locals, size_t n, const ptc_config *cfg,
                              const ptc_rules *rules, ptc_layout **layout, void ***bufs)
{
    const char *what = save ? "checkpoint save" : "checkpoint load";
    *layout = NULL;
    *bufs = NULL;
    if (rc == PTC_OK)
        rc = host_locals(locals, n);
    ptc_layout *l = NULL;
    if (save) {
        PTC_TRY(ptc_ckpt_collect(t, what, rc, ranks, nranks, locals, n, cfg, rules, &l));
        rc = ptc_ckpt_bind_save(l, ranks, nranks, locals, n, bufs);
    } else if (!cfg) {
        PTC_TRY(ptc_transport_agree(t, rc, what));
        PTC_TRY(collect_target(t, s, version, ranks, nranks, locals, n, &l));
        rc = ptc_ckpt_bind(l, ranks, nranks, locals, n, "the version", true, bufs);
    } else {
        ptc_store_reader *rd = NULL;
        if (rc == PTC_OK && (rc = ptc_store_reader_open(&rd, s, version)) == PTC_OK)
            rc = ptc_layout_of_version_rules(&l, rd, cfg, rules);
        ptc_store_reader_close(rd);
        if (rc == PTC_OK)
            rc = ptc_ckpt_bind(l, ranks, nranks, locals, n, "the version", true, bufs);
    }
    if ((rc = ptc_transport_agree(t, rc, what)) < 0) {
        ptc_free(*bufs);
        *bufs = NULL;
        ptc_layout_destroy(l);
        return rc;
    }
    *layout = l;
    return PTC_OK;
}

int ptc_ckpt_bind_locals_to(const ptc_transport *t, int rc, const ptc_layout *l,
                            const int *ranks, size_t nranks, const ptc_ckpt_local *locals,
                            size_t n, void ***bufs)
{
    *bufs = NULL;
    if (rc == PTC_OK)
        rc = host_locals(locals, n);
    if (rc == PTC_OK)
        rc = ptc_ckpt_bind(l, ranks, nranks, locals, n, "the version", true, bufs);
    if ((rc = ptc_transport_agree(t, rc, "checkpoint load")) < 0) {
        ptc_free(*bufs);
        *bufs = NULL;
    }
    return rc;
}

int ptc_ckpt_load_locals_over(const ptc_transport *t, int rc, ptc_store *s, uint64_t version,
                              const int *ranks, size_t nranks, const ptc_ckpt_local *locals,
                              size_t n, const ptc_config *cfg, const ptc_ckpt_options *opts,
                              ptc_ckpt_record *rec, uint64_t *loaded)
{
    if (rec)
        memset(rec, 0, sizeof *rec);
    PTC_TRY(resolve_version(t, s, rc, &version));
    ptc_layout *l = NULL;
    if (!cfg)
        PTC_TRY(collect_target(t, s, version, ranks, nranks, locals, n, &l));
    rc = load_locals(s, version, ranks, nranks, locals, n, cfg, l, opts, rec, loaded);
    ptc_layout_destroy(l);
    rc = ptc_transport_agree(t, rc, "checkpoint load");
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
