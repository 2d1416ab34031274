/* Saves and loads of described local tensors (ptc_ckpt_local: the Python
 * package's torch.distributed jobs) in a store spread over hosts: the
 * layout and buffers as ptc/ckpt binds them, then the save across hosts
 * (ptc_ckpt_hosts_save_over) or the load across hosts
 * (ptc_reshard_hosts_load). */
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

/* The locals' buffer table against version @p hv: under @p cfg the
 * layout every process has (a host without a part rebuilt it), without
 * one the layout the processes' tensors describe (each host reads its
 * part's tensors: every host must hold one). Agreed. */
static int bind_load(const ptc_transport *t, ptc_store *s, const ptc_reshard_hosts_version *hv,
                     uint64_t version, const int *ranks, size_t nranks,
                     const ptc_ckpt_local *locals, size_t n, const ptc_config *cfg,
                     const ptc_rules *rules, ptc_layout **l, void ***bufs)
{
    *l = NULL;
    if (cfg)
        return ptc_ckpt_bind_locals_to(t, PTC_OK, hv->layout, ranks, nranks, locals, n, bufs);
    int rc = hv->all ? PTC_OK
                     : ptc_error_set(PTC_E_UNSUPPORTED, "a host holds no part of version %llu: "
                                     "a load into it without a configuration needs a part on "
                                     "every host (give the configuration)",
                                     (unsigned long long)version);
    return ptc_ckpt_bind_locals_over(t, rc, s, hv->lv, false, ranks, nranks, locals, n, NULL,
                                     rules, l, bufs);
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
    PTC_TRY(ptc_reshard_hosts_pick(t, host, s, version, &version));
    ptc_reshard_hosts_version hv;
    PTC_TRY(ptc_reshard_hosts_version_open(t, s, version, cfg, rules, rec != NULL, &hv));
    ptc_layout *l = NULL;
    void **bufs = NULL;
    rc = bind_load(t, s, &hv, version, ranks, nranks, locals, n, cfg, rules, &l, &bufs);
    if (rc == PTC_OK)
        rc = ptc_reshard_hosts_load(t, host, s, version, l ? l : hv.layout, ranks, nranks, bufs,
                                    res);
    if (rc == PTC_OK && rec && hv.has_rec) {
        *rec = hv.rec; /* the caller frees it */
        hv.has_rec = false;
    }
    ptc_reshard_hosts_version_close(&hv);
    ptc_store_free(bufs);
    ptc_layout_destroy(l);
    return rc;
}
