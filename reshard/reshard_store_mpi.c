/* The store resharder over MPI processes (ptc_reshard_store_mpi): each
 * process writes the target ranks of its group; the exchange runs in
 * rounds under a network budget. The setup, the shard filling and the
 * figures are the thread executor's (reshard_store.c). */
#include <mpi.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "kernels/pack.h"
#include "base/mpi_internal.h"
#include "base/util_internal.h"
#include "reshard/reshard_internal.h"
#include "reshard/reshard_store_internal.h"

/* NETWORK bytes of transfer @p x. */
static size_t net_bytes(const rs_ctx *c, const ptc_transfer *x)
{
    return (size_t)ptc_box_volume(&x->box) *
           ptc_dtype_size(ptc_layout_tensor(c->lt, x->tensor)->dtype);
}

/* What this process sends plus receives over the network per target
 * tensor (its per-process plan holds exactly those transfers), for the
 * rounds every process then agrees on (ptc_plan_rounds). */
static void own_round_bytes(const rs_ctx *c, int me, uint64_t *bytes)
{
    for (size_t i = 0; i < c->nxf; i++) {
        const ptc_transfer *x = &c->xf[i];
        if (x->kind != PTC_TRANSFER_NETWORK)
            continue;
        size_t b = net_bytes(c, x);
        if (ptc_plan_src_host(c->plan, x->src_rank) == me)
            bytes[x->tensor] += b;
        if (ptc_plan_dst_host(c->plan, x->dst_rank) == me)
            bytes[x->tensor] += b;
    }
}

static void free_bufs(uint8_t **bufs, int np)
{
    if (bufs)
        for (int p = 0; p < 2 * np; p++)
            ptc_free(bufs[p]);
    ptc_free(bufs);
}

/* Read what this process sends for the tensors [c->t_lo, c->t_hi),
 * exchange, and point c->net at what it got. Every process calls it for
 * the same range. */
static int exchange(rs_ctx *c, MPI_Comm comm, int me, int np, uint8_t ***bufs_out)
{
    size_t *out_len = ptc_calloc((size_t)np, sizeof *out_len);
    size_t *in_len = ptc_calloc((size_t)np, sizeof *in_len);
    uint8_t **out = ptc_calloc((size_t)np * 2, sizeof *out);
    *bufs_out = out;
    int rc = PTC_OK;
    size_t *at_out = NULL;
    MPI_Request *req = NULL;
    size_t nreq = 0, capreq = 0;
    size_t x0 = rs_first(c, c->t_lo, 0), x1 = rs_first(c, c->t_hi, 0);
    if (!out_len || !in_len || !out) {
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory for the reshard exchange");
        goto out_agree;
    }
    for (size_t i = x0; i < x1; i++) {
        const ptc_transfer *x = &c->xf[i];
        if (x->kind != PTC_TRANSFER_NETWORK)
            continue;
        size_t b = net_bytes(c, x);
        int sp = ptc_plan_src_host(c->plan, x->src_rank), dp = ptc_plan_dst_host(c->plan, x->dst_rank);
        if (sp == me)
            out_len[dp] += b;
        if (dp == me)
            in_len[sp] += b;
    }
    size_t nmsg = 0;
    for (int p = 0; p < np && rc == PTC_OK; p++) {
        out[p] = ptc_malloc(out_len[p] + 1);
        out[np + p] = ptc_malloc(in_len[p] + 1);
        if (!out[p] || !out[np + p])
            rc = PTC_E_NOMEM;
        nmsg += (in_len[p] + PTC_MPI_MSG_MAX - 1) / PTC_MPI_MSG_MAX +
                (out_len[p] + PTC_MPI_MSG_MAX - 1) / PTC_MPI_MSG_MAX;
    }
    if (rc == PTC_OK && !(at_out = ptc_calloc((size_t)np * 2, sizeof *at_out)))
        rc = PTC_E_NOMEM;
    /* every request slot up front, so posting cannot fail half way */
    if (rc == PTC_OK)
        rc = ptc_grow((void **)&req, &capreq, nmsg + 1, sizeof *req);
out_agree:
    /* every process posts its whole exchange, or none does */
    rc = ptc_mpi_agree(comm, rc, "reshard");
    if (rc != PTC_OK)
        goto out_free;
    /* read the boxes this process sends, in plan order */
    size_t *at_in = at_out + np;
    for (size_t i = x0; i < x1; i++) {
        const ptc_transfer *x = &c->xf[i];
        if (x->kind != PTC_TRANSFER_NETWORK)
            continue;
        size_t b = net_bytes(c, x);
        int sp = ptc_plan_src_host(c->plan, x->src_rank), dp = ptc_plan_dst_host(c->plan, x->dst_rank);
        if (sp == me) {
            if (rc == PTC_OK)
                rc = ptc_store_reader_read_box(c->rd, x->tensor, &x->box, out[dp] + at_out[dp],
                                               NULL);
            at_out[dp] += b;
        }
        if (dp == me) {
            c->net[i] = out[np + sp] + at_in[sp];
            at_in[sp] += b;
        }
    }
    /* exchange even after a read failure, so no peer waits forever */
    int prc = PTC_OK;
    for (int p = 0; p < np && prc == PTC_OK; p++) {
        if (p == me)
            continue;
        prc = ptc_mpi_post(&req, &nreq, &capreq, out[np + p], in_len[p], p, 0, comm, false);
        if (prc == PTC_OK)
            prc = ptc_mpi_post(&req, &nreq, &capreq, out[p], out_len[p], p, 0, comm, true);
    }
    if (nreq && ptc_mpi_waitall((int)nreq, req) != MPI_SUCCESS && prc == PTC_OK)
        prc = ptc_error_set(PTC_E_MPI, "MPI_Waitall failed in the reshard exchange");
    if (rc == PTC_OK)
        rc = prc;
out_free:
    ptc_free(req);
    ptc_free(at_out);
    ptc_free(out_len);
    ptc_free(in_len);
    return rc;
}

/* Process 0 gathers every other process's shard descriptors and imports
 * them into the committing writer. */
static int gather_descriptors(rs_ctx *c, MPI_Comm comm, int me, int np, int rc_in)
{
    void *buf = NULL;
    size_t len = 0;
    int rc = rc_in;
    if (me != 0 && rc == PTC_OK && c->w)
        rc = ptc_store_writer_export(c->w, &buf, &len);
    if (rc == PTC_OK && len > INT_MAX)
        rc = ptc_error_set(PTC_E_RANGE, "shard descriptors of %zu bytes exceed one MPI message",
                           len);
    unsigned long long l = len;
    unsigned long long *lens = NULL;
    if (me == 0 && rc == PTC_OK && !(lens = ptc_calloc((size_t)np, sizeof *lens)))
        rc = PTC_E_NOMEM;
    rc = ptc_mpi_agree(comm, rc, "reshard");
    if (rc != PTC_OK)
        goto out_free;
    if (ptc_mpi_gather(&l, 1, MPI_UNSIGNED_LONG_LONG, lens, 1, MPI_UNSIGNED_LONG_LONG, 0, comm) !=
        MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Gather of descriptor sizes failed");
    /* the root holds a buffer for every message before anyone sends */
    uint8_t **bufs = NULL;
    if (me == 0 && rc == PTC_OK) {
        bufs = ptc_calloc((size_t)np, sizeof *bufs);
        for (int p = 1; bufs && p < np && rc == PTC_OK; p++)
            if (lens[p] && !(bufs[p] = ptc_malloc(lens[p])))
                rc = PTC_E_NOMEM;
        if (!bufs)
            rc = PTC_E_NOMEM;
    }
    rc = ptc_mpi_agree(comm, rc, "reshard");
    if (rc == PTC_OK && me != 0 && len &&
        MPI_Send(buf, (int)len, MPI_BYTE, 0, 0, comm) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Send of shard descriptors failed");
    /* once agreed, every message is received, even after a failed import,
     * so no sender blocks forever */
    bool receiving = rc == PTC_OK && me == 0;
    for (int p = 1; receiving && p < np; p++) {
        if (!lens[p])
            continue;
        if (MPI_Recv(bufs[p], (int)lens[p], MPI_BYTE, p, 0, comm, MPI_STATUS_IGNORE) !=
            MPI_SUCCESS) {
            if (rc == PTC_OK)
                rc = ptc_error_set(PTC_E_MPI, "MPI_Recv of shard descriptors failed");
        } else if (rc == PTC_OK) {
            rc = ptc_store_writer_import(c->w, bufs[p], lens[p]);
        }
    }
    for (int p = 1; bufs && p < np; p++)
        ptc_free(bufs[p]);
    ptc_free(bufs);
out_free:
    ptc_free(lens);
    ptc_store_free(buf);
    return rc;
}

int ptc_reshard_store_mpi(ptc_store *s, uint64_t version, const ptc_config *to, MPI_Comm comm,
                          const ptc_reshard_options *opts, ptc_reshard_result *res)
{
    double t0 = rs_now_s();
    int me, np;
    PTC_MPI_TRY(MPI_Comm_rank(comm, &me));
    PTC_MPI_TRY(MPI_Comm_size(comm, &np));
    rs_ctx c = {0};
    int *src_host = NULL, *dst_host = NULL, *mine = NULL;
    uint8_t **bufs = NULL;
    size_t *starts = NULL, nr = 0;
    uint64_t *round_bytes = NULL;
    uint64_t max_round = 0;
    int rc = PTC_OK;
    /* the host maps need the world sizes: read them from the layouts first */
    {
        ptc_store_reader *rd = NULL;
        ptc_layout *ls = NULL, *lt = NULL;
        rc = ptc_store_reader_open(&rd, s, version);
        if (rc == PTC_OK)
            rc = ptc_layout_of_version(&ls, rd, NULL);
        if (rc == PTC_OK)
            rc = ptc_layout_of_version(&lt, rd, to);
        if (rc == PTC_OK) {
            int ws = ptc_config_world(ptc_layout_config(ls));
            int wt = ptc_config_world(ptc_layout_config(lt));
            src_host = ptc_malloc(sizeof(int) * (size_t)ws);
            dst_host = ptc_malloc(sizeof(int) * (size_t)wt);
            mine = ptc_malloc(sizeof(int) * (size_t)wt);
            if (!src_host || !dst_host || !mine)
                rc = PTC_E_NOMEM;
            for (int r = 0; rc == PTC_OK && r < ws; r++)
                src_host[r] = (int)((int64_t)r * np / ws);
            for (int r = 0; rc == PTC_OK && r < wt; r++)
                dst_host[r] = (int)((int64_t)r * np / wt);
        }
        ptc_layout_destroy(ls);
        ptc_layout_destroy(lt);
        ptc_store_reader_close(rd);
    }
    if (rc == PTC_OK)
        rc = rs_ctx_open(&c, s, version, to, opts, src_host, dst_host, me);
    /* the figures now, so nothing can fail on one process after the commit */
    ptc_reshard_result fig = {0};
    if (rc == PTC_OK)
        rc = rs_figures(&c, res ? &fig : NULL);
    if ((rc = ptc_mpi_agree(comm, rc, "reshard")) != PTC_OK)
        goto out_close;
    for (int r = 0; r < c.wt; r++)
        if (dst_host[r] == me)
            mine[c.nmy++] = r;
    c.my_ranks = mine;
    /* process 0 allocates the version; the others write pack files for it */
    char cfg[PTC_CONFIG_MAX_STAGES * 11 + 64];
    ptc_store_write_options wo;
    unsigned long long v = 0;
    rc = rs_write_options(&c, &wo, cfg, sizeof cfg);
    if (me == 0 && rc == PTC_OK && (rc = ptc_store_writer_begin(&c.w, s, &wo)) == PTC_OK)
        v = ptc_store_writer_version(c.w);
    if ((rc = ptc_mpi_agree(comm, rc, "reshard")) != PTC_OK)
        goto out_close;
    if (ptc_mpi_bcast(&v, 1, MPI_UNSIGNED_LONG_LONG, 0, comm) != MPI_SUCCESS) {
        rc = ptc_error_set(PTC_E_MPI, "MPI_Bcast of the version failed");
        goto out_close;
    }
    if (me != 0 && c.nmy) {
        uint32_t *r32 = ptc_malloc(sizeof(uint32_t) * c.nmy);
        rc = r32 ? PTC_OK : PTC_E_NOMEM;
        for (size_t i = 0; rc == PTC_OK && i < c.nmy; i++)
            r32[i] = (uint32_t)mine[i];
        if (rc == PTC_OK)
            rc = ptc_store_writer_begin_pack(&c.w, s, v, &wo, r32, c.nmy);
        ptc_free(r32);
    }
    if (rc == PTC_OK && c.w)
        rc = rs_add_tensors(&c, me == 0);
    if (rc == PTC_OK && (!(round_bytes = ptc_calloc(c.nt + 1, sizeof *round_bytes)) ||
                         !(starts = ptc_malloc(sizeof *starts * (c.nt + 1)))))
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory for the reshard rounds");
    if (rc == PTC_OK)
        own_round_bytes(&c, me, round_bytes);
    if (rc == PTC_OK && !(c.net = ptc_calloc(c.nxf + 1, sizeof *c.net)))
        rc = ptc_error_set(PTC_E_NOMEM, "out of memory for the reshard exchange");
    if ((rc = ptc_mpi_agree(comm, rc, "reshard")) != PTC_OK)
        goto out_close;
    /* the same rounds on every process, from what each one moves */
    rc = ptc_plan_rounds(comm, round_bytes, c.nt,
                         c.o.mpi_budget ? c.o.mpi_budget : PTC_RESHARD_MPI_BUDGET, starts, &nr,
                         &max_round, NULL);
    if ((rc = ptc_mpi_agree(comm, rc, "reshard")) != PTC_OK)
        goto out_close;
    /* per range of tensors: exchange, write this process's ranks' shards of
     * it (each rank's pack continues in tensor order), free */
    for (size_t k = 0; k < nr; k++) {
        c.t_lo = starts[k];
        c.t_hi = starts[k + 1];
        rc = exchange(&c, comm, me, np, &bufs);
        if ((rc = ptc_mpi_agree(comm, rc, "reshard")) == PTC_OK && c.nmy)
            rc = rs_run_pool(&c);
        free_bufs(bufs, np);
        bufs = NULL;
        memset((void *)c.net, 0, sizeof *c.net * (c.nxf + 1));
        if ((rc = ptc_mpi_agree(comm, rc, "reshard")) != PTC_OK)
            goto out_close;
    }
    rc = gather_descriptors(&c, comm, me, np, rc);
    uint64_t committed = 0;
    if (me == 0 && rc == PTC_OK)
        rc = ptc_store_writer_commit(c.w, &committed);
    if ((rc = ptc_mpi_agree(comm, rc, "reshard")) != PTC_OK)
        goto out_close;
    unsigned long long cv = committed;
    ptc_mpi_bcast(&cv, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
    /* totals over all processes */
    unsigned long long mine_st[4] = {atomic_load(&c.bytes_written), atomic_load(&c.shards_written),
                                     atomic_load(&c.shards_reused), atomic_load(&c.shards_aliased)},
                       all_st[4];
    ptc_mpi_allreduce(mine_st, all_st, 4, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
    rs_fill_result(&c, res, cv, t0);
    if (res) {
        res->bytes_written = all_st[0];
        res->shards_written = all_st[1];
        res->shards_reused = all_st[2];
        res->shards_aliased = all_st[3];
        res->rounds = nr;
        res->max_round_bytes = max_round;
        res->plan = fig.plan;
    }
    rc = PTC_OK;
out_close:
    free_bufs(bufs, np);
    ptc_free(starts);
    ptc_free(round_bytes);
    ptc_free((void *)c.net);
    ptc_free(src_host);
    ptc_free(dst_host);
    ptc_free(mine);
    rs_ctx_close(&c);
    return rc;
}
