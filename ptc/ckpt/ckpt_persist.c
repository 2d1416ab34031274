/* The persistent tier of a store spread over hosts (docs/checkpoint.md
 * "Tiers"): a committed version across hosts copied into an ordinary
 * single-directory store that every process reaches. Each process reads
 * its own ranks' shards from its own host's part (its host always holds
 * them: ckpt_hosts.c's view_mark), then the processes save them as one
 * ordinary version (ckpt_collective.c's begin, write and commit), so the
 * persistent store's previous versions stay as they were until the commit.
 * The caller (ptc train --persist) runs this on a thread of its own while
 * training goes on; the steps are named for the test build's
 * PTC_FAULT_KILL ("persist.read", "persist.written"). */
#include <string.h>

#include "ptc/ckpt/ckpt_internal.h"
#include "base/util_internal.h"

/* This process's ranks' buffers, read from its host's part @p lv. */
static int read_part(ptc_store *local, uint64_t lv, const ptc_layout *l, const int *ranks,
                     size_t nranks, const ptc_ckpt_options *opts, void **bufs,
                     ptc_ckpt_record *rec)
{
    size_t nt = ptc_layout_count(l);
    for (size_t i = 0; i < nranks; i++)
        for (size_t t = 0; t < nt; t++) {
            size_t b;
            PTC_TRY(ptc_ckpt_local_bytes(l, t, ranks[i], &b));
            if (b && !(bufs[i * nt + t] = ptc_malloc(b)))
                return ptc_error_set(PTC_E_NOMEM, "persist: no memory for rank %d's shards "
                                     "(%zu bytes)", ranks[i], b);
        }
    return ptc_ckpt_load_local(local, lv, l, ranks, nranks, bufs, opts, rec, NULL);
}

int ptc_ckpt_hosts_persist_over(const ptc_transport *t, ptc_store *local, uint64_t version,
                                ptc_store *persist, const ptc_layout *l, const ptc_rules *rules,
                                const int *ranks, size_t nranks, const ptc_ckpt_options *opts,
                                uint64_t *persisted)
{
    if (!t || !local || !persist || !l || (nranks && !ranks))
        return ptc_error_set(PTC_E_INVAL, "persist: transport, stores, layout and ranks are "
                                          "required");
    ptc_ckpt_options co;
    if (opts)
        co = *opts;
    else
        ptc_ckpt_options_init(&co);
    co.stream = NULL;
    size_t nt = ptc_layout_count(l);
    void **bufs = ptc_calloc(nranks * nt + 1, sizeof *bufs);
    ptc_ckpt_record rec;
    memset(&rec, 0, sizeof rec);
    uint64_t lv = 0;
    int rc = bufs ? ptc_ckpt_hosts_local_version(local, version, &lv) : PTC_E_NOMEM;
    if (rc == PTC_OK)
        rc = read_part(local, lv, l, ranks, nranks, &co, bufs, &rec);
    ptc_fault_step("persist.read", version);
    ptc_ckpt_saving sv = {0};
    rc = ptc_ckpt_save_begin(t, persist, l, rules, t->rank == 0 ? &rec : NULL, &co, rc, &sv);
    if (rc == PTC_OK) {
        rc = ptc_ckpt_write_local_io(persist, sv.version, sv.parent, l, ranks, nranks,
                                     (const void *const *)bufs, &co, NULL, &sv.desc, &sv.dlen);
        if (rc == PTC_OK)
            ptc_fault_step("persist.written", version);
        rc = ptc_ckpt_save_finish(t, rc, t->rank == 0 ? &rec : NULL, &sv, persisted);
    }
    if (rc < 0)
        rc = ptc_error_set(rc, "persist of version %llu: %s", (unsigned long long)version,
                           ptc_last_error());
    for (size_t i = 0; bufs && i < nranks * nt; i++)
        ptc_free(bufs[i]);
    ptc_free(bufs);
    ptc_ckpt_record_free(&rec);
    return rc;
}
