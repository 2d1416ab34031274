/* Saves and loads of described local tensors (ptc_ckpt_local: the Python
 * package's torch.distributed jobs) in a store spread over hosts: the
 * layout and buffers as ptc/ckpt binds them, then the save across hosts
 * (ptc_ckpt_hosts_save_over) or the load across hosts
 * (ptc_reshard_hosts_load_open: the version opened once, by the pick
 * where it opened it to choose). */
#include <string.h>

#include "ptc/ckpt.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

/* Process 0's record on every process (@p own: NULL elsewhere; *out to
 * free with ptc_ckpt_record_free when *have). */
static int share_record(const ptc_transport *t, const ptc_ckpt_record *own, ptc_ckpt_record *out,
                        bool *have)
{
    char *json = NULL;
    int rc = t->rank == 0 && own ? ptc_ckpt_record_to_json(own, &json) : PTC_OK;
    PTC_TRY(ptc_transport_agree(t, rc, "checkpoint save"));
    void *all = NULL;
    size_t *lens = ptc_calloc((size_t)t->size, sizeof *lens);
    rc = lens ? PTC_OK : PTC_E_NOMEM;
    if ((rc = ptc_transport_agree(t, rc, "checkpoint save")) == PTC_OK)
        rc = ptc_transport_allgatherv(t, json, t->rank == 0 && json ? strlen(json) : 0, &all,
                                      lens);
    ptc_store_free(json);
    *have = false;
    if (rc == PTC_OK && lens[0] > 0) {
        rc = ptc_ckpt_record_from_json(all, lens[0], out);
        *have = rc == PTC_OK;
    }
    ptc_transport_free(all);
    ptc_free(lens);
    return ptc_transport_agree(t, rc, "checkpoint save");
}

int ptc_reshard_hosts_save_locals(const ptc_transport *t, int rc, const char *host_name,
                                  ptc_store *s, const int *ranks, size_t nranks,
                                  const ptc_ckpt_local *locals, size_t n, const ptc_config *cfg,
                                  const ptc_rules *rules, const ptc_ckpt_record *rec,
                                  const ptc_ckpt_options *opts,
                                  const ptc_ckpt_hosts_options *hopts, uint64_t *version)
{
    int host = 0, nhosts = 0;
    PTC_TRY(ptc_transport_agree(t, rc, "checkpoint save"));
    PTC_TRY(ptc_reshard_hosts_index(t, host_name, &host, &nhosts));
    ptc_layout *l = NULL;
    void **bufs = NULL;
    PTC_TRY(ptc_ckpt_bind_locals_over(t, PTC_OK, s, 0, true, ranks, nranks, locals, n, cfg, rules,
                                      &l, &bufs));
    ptc_ckpt_record r;
    memset(&r, 0, sizeof r);
    bool have = false;
    rc = share_record(t, rec, &r, &have);
    if (rc == PTC_OK)
        rc = ptc_ckpt_hosts_save_over(t, host, s, l, rules, ranks, nranks,
                                      (const void *const *)bufs, have ? &r : NULL, opts, hopts,
                                      version);
    if (have)
        ptc_ckpt_record_free(&r);
    ptc_store_free(bufs);
    ptc_layout_destroy(l);
    return rc;
}

/* The locals of a load without a configuration in the order of the
 * version's tensors (@p vl; names it lacks last, in their order), so that
 * the layout they describe — its tensors in the order each name first
 * appears, process 0's locals first — has the version's order, which the
 * load across hosts takes (ptc_reshard_hosts_load). Into a fresh @p out. */
static int version_order(const ptc_layout *vl, const ptc_ckpt_local *locals, size_t n,
                         ptc_ckpt_local **out)
{
    size_t nt = ptc_layout_count(vl), k = 0;
    if (!(*out = ptc_malloc(sizeof **out * (n + 1))))
        return ptc_error_set(PTC_E_NOMEM, "no memory for %zu local tensors", n);
    bool *taken = ptc_calloc(n + 1, sizeof *taken);
    if (!taken) {
        ptc_free(*out);
        *out = NULL;
        return ptc_error_set(PTC_E_NOMEM, "no memory for %zu local tensors", n);
    }
    for (size_t t = 0; t < nt; t++)
        for (size_t i = 0; i < n; i++)
            if (!taken[i] && !strcmp(locals[i].name, ptc_layout_tensor(vl, t)->name)) {
                (*out)[k++] = locals[i];
                taken[i] = true;
            }
    for (size_t i = 0; i < n; i++)
        if (!taken[i])
            (*out)[k++] = locals[i];
    ptc_free(taken);
    return PTC_OK;
}

/* The target layout of a load with configuration @p cfg: the version's
 * tensors (those of its own layout @p vl) under @p rules (NULL: the
 * version's, @p vrules) — what ptc_reshard_hosts_version_open would have
 * built under @p cfg. */
static int target_layout(const ptc_layout *vl, const ptc_rules *vrules, const ptc_config *cfg,
                         const ptc_rules *rules, ptc_layout **out)
{
    size_t nt = ptc_layout_count(vl);
    ptc_tensor_info *ti = ptc_malloc(sizeof *ti * (nt + 1));
    if (!ti)
        return ptc_error_set(PTC_E_NOMEM, "no memory for %zu tensors", nt);
    for (size_t t = 0; t < nt; t++)
        ti[t] = *ptc_layout_tensor(vl, t);
    int rc = ptc_layout_create(out, ti, nt, rules ? rules : vrules, cfg);
    ptc_free(ti);
    return rc;
}

int ptc_reshard_hosts_load_locals(const ptc_transport *t, int rc, const char *host_name,
                                  ptc_store *s, uint64_t version, const int *ranks,
                                  size_t nranks, const ptc_ckpt_local *locals, size_t n,
                                  const ptc_config *cfg, const ptc_rules *rules,
                                  ptc_ckpt_record *rec, ptc_reshard_hosts_result *res)
{
    int host = 0, nhosts = 0;
    if (rec)
        memset(rec, 0, sizeof *rec);
    PTC_TRY(ptc_transport_agree(t, rc, "load across hosts"));
    PTC_TRY(ptc_reshard_hosts_index(t, host_name, &host, &nhosts));
    /* opened once, as the load's source: the version's own layout (by the
     * pick where it opened it to choose: an explicit layout) */
    ptc_reshard_hosts_version hv;
    PTC_TRY(ptc_reshard_hosts_pick_open(t, host, s, version, rec != NULL, &version, &hv));
    if ((rc = ptc_reshard_hosts_version_ensure(t, s, version, rec != NULL, &hv)) < 0)
        return rc;
    ptc_layout *l = NULL, *target = NULL;
    void **bufs = NULL;
    /* under @p cfg the version's tensors under it, alike on every process (a
     * host without a part has them from the description); without one the
     * layout the processes' tensors describe (the version's dtypes for
     * raw-bit buffers) */
    ptc_ckpt_local *ordered = NULL;
    rc = cfg ? target_layout(hv.layout, hv.rules, cfg, rules, &target)
             : version_order(hv.layout, locals, n, &ordered);
    rc = ptc_ckpt_bind_locals_to(t, rc, cfg ? target : hv.layout, !cfg, ranks, nranks,
                                 ordered ? ordered : locals, n, &l, &bufs);
    ptc_free(ordered);
    if (rc == PTC_OK)
        rc = ptc_reshard_hosts_load_open(t, host, s, version, &hv, l ? l : target, ranks, nranks,
                                         bufs, res);
    if (rc == PTC_OK && rec && hv.has_rec) {
        *rec = hv.rec; /* the caller frees it */
        hv.has_rec = false;
    }
    ptc_reshard_hosts_version_close(&hv);
    ptc_store_free(bufs);
    ptc_layout_destroy(l);
    ptc_layout_destroy(target);
    return rc;
}
