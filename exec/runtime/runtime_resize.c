/* Elastic resize for training loops: a live job's state moves between the
 * processes of a world from one layout to another by the minimal plan, in
 * rounds of tensors under a byte budget, and the new configuration's groups
 * are built (docs/runtime.md, "Online resize"). */
#include <string.h>
#include <time.h>

#include "exec/runtime/runtime_internal.h"
#include "ptc/plan.h"
#include "ptc/reshard.h"

#define RESIZE_BUDGET ((uint64_t)256 << 20)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void free_comm(MPI_Comm *c)
{
    if (*c != MPI_COMM_NULL)
        MPI_Comm_free(c);
    *c = MPI_COMM_NULL;
}

void ptc_exec_groups_free(ptc_exec_groups *g)
{
    if (!g)
        return;
    free_comm(&g->pipe);
    free_comm(&g->dp);
    free_comm(&g->tp);
    free_comm(&g->active_comm);
}

int ptc_exec_groups_create(ptc_exec_groups *g, const ptc_config *c, MPI_Comm world)
{
    memset(g, 0, sizeof *g);
    g->cfg = *c;
    g->rank = -1;
    g->active_comm = g->pipe = g->dp = g->tp = MPI_COMM_NULL;
    int me, n;
    if (MPI_Comm_rank(world, &me) != MPI_SUCCESS || MPI_Comm_size(world, &n) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Comm_rank/size failed");
    if (ptc_config_world(c) > n)
        return ptc_error_set(PTC_E_CONFIG, "the configuration needs %d processes, the world "
                                           "has %d", ptc_config_world(c), n);
    g->active = me < ptc_config_world(c);
    int rc = PTC_OK;
    if (MPI_Comm_split(world, g->active ? 0 : MPI_UNDEFINED, me, &g->active_comm) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Comm_split failed");
    if (rc == PTC_OK && g->active) {
        g->rank = me;
        static const ptc_exec_group_kind kinds[3] = {PTC_EXEC_GROUP_PIPE, PTC_EXEC_GROUP_DP,
                                                     PTC_EXEC_GROUP_TP};
        MPI_Comm *out[3] = {&g->pipe, &g->dp, &g->tp};
        for (int k = 0; rc == PTC_OK && k < 3; k++) {
            int color, key;
            rc = ptc_exec_group_color(c, me, kinds[k], &color, &key);
            if (rc == PTC_OK && MPI_Comm_split(g->active_comm, color, key, out[k]) != MPI_SUCCESS)
                rc = ptc_error_set(PTC_E_MPI, "MPI_Comm_split failed");
        }
    }
    if (rc != PTC_OK)
        ptc_exec_groups_free(g);
    return rc;
}

static uint64_t xbytes(const ptc_plan *p, const ptc_transfer *x)
{
    return (uint64_t)ptc_box_volume(&x->box) *
           ptc_dtype_size(ptc_layout_tensor(ptc_plan_target(p), x->tensor)->dtype);
}

/* This process's part of the move, from its per-process plan: per target
 * tensor the bytes it sends plus receives (tin), and what it sends
 * (*moved). Reused shards whose two ranks are on different processes
 * travel whole. */
static int own_bytes(const ptc_plan *p, int me, const int *sown, const int *down, uint64_t *tin,
                     uint64_t *moved)
{
    const ptc_layout *lt = ptc_plan_target(p);
    size_t nt = ptc_layout_count(lt), nx;
    /* a shard is reused only by a rank of both layouts */
    int wt = ptc_config_world(ptc_layout_config(lt)),
        ws = ptc_config_world(ptc_layout_config(ptc_plan_source(p))), wb = PTC_MIN(ws, wt);
    const ptc_transfer *xf = ptc_plan_transfers(p, &nx);
    for (size_t i = 0; i < nx; i++) {
        const ptc_transfer *x = &xf[i];
        int from = x->kind == PTC_TRANSFER_FANOUT ? down[x->src_rank] : sown[x->src_rank];
        int to = down[x->dst_rank];
        if (from == to)
            continue;
        uint64_t b = xbytes(p, x);
        tin[x->tensor] += b;
        if (from == me)
            *moved += b;
    }
    for (int q = 0; q < wb; q++) {
        if (sown[q] == down[q] || (sown[q] != me && down[q] != me))
            continue;
        for (size_t t = 0; t < nt; t++) {
            if (!ptc_plan_reused(p, t, q))
                continue;
            ptc_shard sh;
            PTC_TRY(ptc_layout_shard(lt, t, q, &sh));
            uint64_t b = ptc_dtype_size(ptc_layout_tensor(lt, t)->dtype);
            for (int d = 0; d < sh.ndim; d++)
                b *= (uint64_t)sh.shape[d];
            tin[t] += b;
            if (sown[q] == me)
                *moved += b;
        }
    }
    return PTC_OK;
}

/* Every rank's owner within 0..np-1. */
static int check_owners(const ptc_layout *l, const int *own, int np, const char *what)
{
    int w = ptc_config_world(ptc_layout_config(l));
    for (int r = 0; r < w; r++)
        if (own[r] < 0 || own[r] >= np)
            return ptc_error_set(PTC_E_CONFIG, "%s rank %d is held by process %d, the world "
                                               "has %d", what, r, own[r], np);
    return PTC_OK;
}

int ptc_exec_resize_owned(const ptc_layout *from, const int *from_owner,
                          const void *const *const *src, const ptc_layout *to,
                          const int *to_owner, void *const *const *dst, MPI_Comm world,
                          const ptc_exec_resize_options *opts, ptc_exec_resize_stats *stats)
{
    ptc_exec_resize_stats st;
    memset(&st, 0, sizeof st);
    int me, np;
    if (MPI_Comm_rank(world, &me) != MPI_SUCCESS || MPI_Comm_size(world, &np) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Comm_rank/size failed");
    uint64_t budget = opts && opts->budget ? opts->budget : RESIZE_BUDGET;
    /* each process plans only what it sends or receives (plan.h) */
    ptc_plan_options po = {.hosts = opts ? opts->hosts : 0, .src_proc = from_owner,
                           .dst_proc = to_owner, .proc = me};
    double t0 = now_s();
    ptc_plan *plan = NULL;
    size_t nt = ptc_layout_count(to), *rounds = NULL, nrounds = 0;
    uint64_t *tin = ptc_calloc(nt + 1, sizeof *tin), mine[2] = {0, 0}, all[2] = {0, 0};
    int rc = tin ? PTC_OK : PTC_E_NOMEM;
    rounds = ptc_malloc(sizeof *rounds * (nt + 1));
    if (rc == PTC_OK && !rounds)
        rc = PTC_E_NOMEM;
    if (rc == PTC_OK)
        rc = check_owners(from, from_owner, np, "source");
    if (rc == PTC_OK)
        rc = check_owners(to, to_owner, np, "target");
    if (rc == PTC_OK)
        rc = ptc_plan_create(&plan, from, to, &po);
    if (rc == PTC_OK)
        rc = own_bytes(plan, me, from_owner, to_owner, tin, &mine[0]);
    if (rc == PTC_OK) {
        ptc_plan_stats ps;
        ptc_plan_stats_get(plan, &ps);
        mine[1] = ps.bytes_total; /* of this process's target ranks */
    }
    rc = ptc_mpi_agree(world, rc, "resize");
    /* the rounds and the totals, the same on every process */
    if (rc == PTC_OK)
        rc = ptc_mpi_agree(world,
                           ptc_plan_rounds(world, tin, nt, budget, rounds, &nrounds,
                                           &st.max_round_bytes, &st.max_process_bytes),
                           "resize");
    int mrc = rc == PTC_OK ? ptc_mpi_allreduce(mine, all, 2, MPI_UINT64_T, MPI_SUM, world)
                           : MPI_SUCCESS;
    if (mrc != MPI_SUCCESS)
        rc = ptc_mpi_error(mrc, "MPI_Allreduce of the resize totals");
    st.rounds = nrounds;
    st.bytes_moved = all[0];
    double t1 = now_s();
    for (size_t i = 0; rc == PTC_OK && i < nrounds; i++) {
        rc = ptc_reshard_host_owned_range(plan, world, rounds[i], rounds[i + 1], from_owner, src,
                                          to_owner, dst);
        rc = ptc_mpi_agree(world, rc, "resize");
    }
    double t2 = now_s();
    if (rc == PTC_OK)
        st.bytes_total = all[1];
    st.plan_seconds = t1 - t0;
    st.move_seconds = t2 - t1;
    ptc_free(rounds);
    ptc_free(tin);
    ptc_plan_destroy(plan);
    if (stats)
        *stats = st;
    return rc;
}

int ptc_exec_resize(const ptc_layout *from, const void *const *src, const ptc_layout *to,
                    void *const *dst, MPI_Comm world, const ptc_exec_resize_options *opts,
                    ptc_exec_groups *groups, ptc_exec_resize_stats *stats)
{
    if (groups) {
        memset(groups, 0, sizeof *groups);
        groups->active_comm = groups->pipe = groups->dp = groups->tp = MPI_COMM_NULL;
    }
    int me, np;
    if (MPI_Comm_rank(world, &me) != MPI_SUCCESS || MPI_Comm_size(world, &np) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Comm_rank/size failed");
    int ws = ptc_config_world(ptc_layout_config(from)), wt = ptc_config_world(ptc_layout_config(to));
    int rc = PTC_OK;
    if (ws > np || wt > np)
        rc = ptc_error_set(PTC_E_CONFIG, "the resize needs %d processes (source %d, target %d "
                                         "ranks), the world has %d",
                           ws > wt ? ws : wt, ws, wt, np);
    /* process i is rank i of both layouts */
    int n = ws > wt ? ws : wt;
    int *own = ptc_malloc((size_t)(n ? n : 1) * sizeof *own);
    const void *const **sb = ptc_calloc((size_t)(n ? n : 1), sizeof *sb);
    void *const **db = ptc_calloc((size_t)(n ? n : 1), sizeof *db);
    size_t nt = ptc_layout_count(to), ns = ptc_layout_count(from);
    const void **nosrc = ptc_calloc(ns ? ns : 1, sizeof *nosrc);
    void **nodst = ptc_calloc(nt ? nt : 1, sizeof *nodst);
    if (rc == PTC_OK && (!own || !sb || !db || !nosrc || !nodst))
        rc = PTC_E_NOMEM;
    rc = ptc_mpi_agree(world, rc, "resize");
    ptc_exec_resize_stats st;
    memset(&st, 0, sizeof st);
    if (rc == PTC_OK) {
        for (int r = 0; r < n; r++)
            own[r] = r;
        if (me < ws)
            sb[me] = src ? src : nosrc;
        if (me < wt)
            db[me] = dst ? dst : nodst;
        rc = ptc_exec_resize_owned(from, own, sb, to, own, db, world, opts, &st);
    }
    double t2 = now_s();
    if (rc == PTC_OK && groups)
        rc = ptc_mpi_agree(world, ptc_exec_groups_create(groups, ptc_layout_config(to), world),
                           "resize");
    st.groups_seconds = now_s() - t2;
    ptc_free(own);
    ptc_free(sb);
    ptc_free(db);
    ptc_free(nosrc);
    ptc_free(nodst);
    if (stats)
        *stats = st;
    return rc;
}
