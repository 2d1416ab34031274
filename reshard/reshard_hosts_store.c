/* A store spread over hosts resharded over MPI (ptc_reshard_hosts_store_mpi):
 * the target ranks' state is loaded across hosts by the minimal plan
 * (reshard_hosts.c), then saved as a new version across hosts or into one
 * ordinary store on process 0's host. */
#include <string.h>

#include "ptc/ckpt.h"
#include "base/mpi_internal.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"

/* What the writers hold: the target layout, rules, record, ranks, buffers. */
typedef struct hs_state {
    ptc_layout *lt;
    ptc_rules *rules;
    ptc_ckpt_record rec;
    const char *rec_config; /* the record's own (freed with it) */
    bool has_rec;
    char cfg[PTC_CONFIG_MAX_STAGES * 11 + 64];
    int *ranks;
    size_t nranks;
    void **bufs; /* nranks x ntensors */
    ptc_reshard_hosts_version src; /* the version under its own layout: the load's source */
} hs_state;

static void hs_free(hs_state *h)
{
    size_t nt = h->lt ? ptc_layout_count(h->lt) : 0;
    for (size_t i = 0; h->bufs && i < h->nranks * nt; i++)
        ptc_free(h->bufs[i]);
    ptc_free(h->bufs);
    ptc_free(h->ranks);
    ptc_reshard_hosts_version_close(&h->src);
    if (h->has_rec) {
        h->rec.config = h->rec_config;
        ptc_ckpt_record_free(&h->rec);
    }
    ptc_rules_destroy(h->rules);
    ptc_layout_destroy(h->lt);
}

/* The layout of @p to, the rules and the record of @p version: from this
 * host's part, or from a host holding one (a fresh host). Collective. */
static int hs_open(hs_state *h, const ptc_transport *t, ptc_store *s, uint64_t version,
                   const ptc_config *to)
{
    ptc_reshard_hosts_version hv;
    PTC_TRY(ptc_reshard_hosts_version_open(t, s, version, to, NULL, true, &hv));
    h->lt = hv.layout;
    h->rules = hv.rules;
    h->has_rec = hv.has_rec;
    if (hv.has_rec) {
        h->rec = hv.rec;
        h->rec_config = h->rec.config;
    }
    hv.layout = NULL;
    hv.rules = NULL;
    hv.has_rec = false;
    ptc_reshard_hosts_version_close(&hv);
    int rc = ptc_config_format(to, PTC_CONFIG_STYLE_KEYS, h->cfg, sizeof h->cfg);
    if (rc == PTC_OK)
        h->rec.config = h->cfg;
    return rc;
}

/* This process's target ranks: rank r to the writer floor(r * K / W) of the
 * K writers (processes with @p writes set), and their buffers. */
static int hs_ranks(hs_state *h, const ptc_transport *t, bool writes)
{
    int *w = ptc_malloc(sizeof(int) * (size_t)t->size);
    int wr = writes, me_w = -1, k = 0;
    int rc = w ? PTC_OK : PTC_E_NOMEM;
    PTC_TRY(ptc_transport_agree(t, rc, "reshard across hosts"));
    rc = t->size > 1 ? t->allgather(t->user, &wr, sizeof wr, w) : PTC_OK;
    if (t->size <= 1)
        w[0] = wr;
    for (int p = 0; rc == PTC_OK && p < t->size; p++)
        if (w[p]) {
            if (p == t->rank)
                me_w = k;
            k++;
        }
    ptc_free(w);
    PTC_TRY(rc);
    int world = ptc_layout_world(h->lt);
    size_t nt = ptc_layout_count(h->lt);
    if (!(h->ranks = ptc_malloc(sizeof(int) * ((size_t)world + 1))))
        return PTC_E_NOMEM;
    for (int r = 0; me_w >= 0 && r < world; r++)
        if ((int)((int64_t)r * k / world) == me_w)
            h->ranks[h->nranks++] = r;
    if (!(h->bufs = ptc_calloc(h->nranks * nt + 1, sizeof *h->bufs)))
        return PTC_E_NOMEM;
    for (size_t i = 0; i < h->nranks; i++)
        for (size_t t2 = 0; t2 < nt; t2++) {
            size_t b = 0;
            PTC_TRY(ptc_ckpt_local_bytes(h->lt, t2, h->ranks[i], &b));
            if (b && !(h->bufs[i * nt + t2] = ptc_malloc(b)))
                return ptc_error_set(PTC_E_NOMEM, "no memory for rank %d's state (%zu bytes)",
                                     h->ranks[i], b);
        }
    return PTC_OK;
}

/* Save into the ordinary store @p dir on process 0's host: its processes
 * (@p sub, MPI_COMM_NULL elsewhere) open it, the first creating it. */
static int hs_save_out(hs_state *h, MPI_Comm sub, const char *dir, uint64_t *written)
{
    if (sub == MPI_COMM_NULL)
        return PTC_OK;
    int lr = 0;
    PTC_MPI_TRY(MPI_Comm_rank(sub, &lr));
    ptc_store *out = NULL;
    int rc = lr == 0 ? ptc_store_open(&out, dir, PTC_STORE_CREATE) : PTC_OK;
    rc = ptc_mpi_agree(sub, rc, "opening the output store");
    if (rc == PTC_OK && lr != 0)
        rc = ptc_store_open(&out, dir, 0);
    rc = ptc_mpi_agree(sub, rc, "opening the output store");
    ptc_ckpt_options co;
    ptc_ckpt_options_init(&co);
    if (rc == PTC_OK)
        rc = ptc_ckpt_save(out, h->lt, h->rules, h->ranks, h->nranks,
                           (const void *const *)h->bufs, &h->rec, &co, sub, written);
    ptc_store_close(out);
    return rc;
}

int ptc_reshard_hosts_store_mpi(ptc_store *s, int host, uint64_t version, const ptc_config *to,
                                MPI_Comm comm, const ptc_reshard_hosts_options *opts,
                                uint64_t *written, ptc_reshard_hosts_result *res)
{
    ptc_transport t;
    PTC_TRY(ptc_transport_mpi(&t, comm));
    ptc_reshard_hosts_options o = {0};
    if (opts)
        o = *opts;
    hs_state h;
    memset(&h, 0, sizeof h);
    *written = 0;
    /* the version first (after a recovery; an explicit layout the pick
     * opened to choose it is the load's source: its records gathered once),
     * then the target layout from the hosts' parts */
    PTC_TRY(ptc_reshard_hosts_pick_open(&t, host, s, version, false, &version, &h.src));
    int rc = hs_open(&h, &t, s, version, to);
    if (rc == PTC_OK && !o.out && o.replicas < 0) { /* the journals' (the same on every host) */
        ptc_ckpt_host_state st;
        if ((rc = ptc_ckpt_host_state_read(s, &st)) == PTC_OK)
            o.replicas = (int)st.replicas;
    }
    int k = o.replicas;
    if (ptc_mpi_allreduce(&k, &o.replicas, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS && rc == PTC_OK)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Allreduce of the replicas failed");
    /* with --out, the writers are the processes of process 0's host */
    int host0 = host;
    if (ptc_mpi_bcast(&host0, 1, MPI_INT, 0, comm) != MPI_SUCCESS && rc == PTC_OK)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Bcast of process 0's host failed");
    bool writes = !o.out || host == host0;
    if ((rc = ptc_transport_agree(&t, rc, "reshard across hosts")) < 0)
        goto out_free;
    if ((rc = ptc_transport_agree(&t, hs_ranks(&h, &t, writes), "reshard across hosts")) < 0)
        goto out_free;
    if ((rc = ptc_reshard_hosts_version_ensure(&t, s, version, false, &h.src)) == PTC_OK)
        rc = ptc_reshard_hosts_load_open(&t, host, s, version, &h.src, h.lt, h.ranks, h.nranks,
                                         h.bufs, res);
    if (rc < 0)
        goto out_free;
    if (o.out) {
        MPI_Comm sub = MPI_COMM_NULL;
        int me = t.rank;
        if (MPI_Comm_split(comm, writes ? 0 : MPI_UNDEFINED, me, &sub) != MPI_SUCCESS)
            rc = ptc_error_set(PTC_E_MPI, "MPI_Comm_split of process 0's host failed");
        if (rc == PTC_OK)
            rc = hs_save_out(&h, sub, o.out, written);
        if (sub != MPI_COMM_NULL)
            MPI_Comm_free(&sub);
        rc = ptc_transport_agree(&t, rc, "reshard across hosts");
        unsigned long long v = *written;
        if (rc == PTC_OK && ptc_mpi_bcast(&v, 1, MPI_UNSIGNED_LONG_LONG, 0, comm) != MPI_SUCCESS)
            rc = ptc_error_set(PTC_E_MPI, "MPI_Bcast of the new version failed");
        *written = v;
        rc = ptc_transport_agree(&t, rc, "reshard across hosts");
    } else {
        ptc_ckpt_options co;
        ptc_ckpt_options_init(&co);
        ptc_ckpt_hosts_options ho;
        ptc_ckpt_hosts_options_init(&ho);
        ho.replicas = o.replicas;
        rc = ptc_ckpt_hosts_save_over(&t, host, s, h.lt, h.rules, h.ranks, h.nranks,
                                      (const void *const *)h.bufs, &h.rec, &co, &ho, written);
    }
out_free:
    hs_free(&h);
    return rc;
}
