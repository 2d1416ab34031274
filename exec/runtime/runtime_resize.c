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

static int agree(MPI_Comm comm, int rc)
{
    int all = rc;
    if (MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
        return rc != PTC_OK ? rc : ptc_error_set(PTC_E_MPI, "MPI_Allreduce failed");
    if (all != PTC_OK && rc == PTC_OK)
        return ptc_error_set(all, "the resize failed on another process");
    return rc;
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

/* The rounds: consecutive target tensors whose bytes, sent plus received by
 * any one process, stay within the budget (the same on every process: a
 * function of the plan). rounds[i] is the first tensor of round i;
 * rounds[n] the tensor count. Also the figures of the whole move. */
static int make_rounds(const ptc_plan *p, int np, uint64_t budget, size_t **out, size_t *nout,
                       ptc_exec_resize_stats *st)
{
    size_t nt = ptc_layout_count(ptc_plan_target(p)), nx;
    const ptc_transfer *xf = ptc_plan_transfers(p, &nx);
    uint64_t *cur = ptc_calloc((size_t)np, sizeof *cur), *tot = ptc_calloc((size_t)np, sizeof *tot);
    uint64_t *tin = ptc_calloc((size_t)np, sizeof *tin);
    size_t *r = ptc_calloc(nt + 2, sizeof *r);
    /* the transfers bucketed by target tensor (a counting sort): each
     * tensor's transfers are visited once, not found by a scan per tensor */
    size_t *first = ptc_calloc(nt + 1, sizeof *first), *by = ptc_calloc(nx + 1, sizeof *by);
    if (!cur || !tot || !tin || !r || !first || !by) {
        ptc_free(cur), ptc_free(tot), ptc_free(tin), ptc_free(r), ptc_free(first), ptc_free(by);
        return PTC_E_NOMEM;
    }
    for (size_t i = 0; i < nx; i++)
        first[xf[i].tensor + 1]++;
    for (size_t t = 0; t < nt; t++)
        first[t + 1] += first[t];
    for (size_t i = 0; i < nx; i++)
        by[first[xf[i].tensor]++] = i;
    for (size_t t = nt; t > 0; t--) /* undo the advance: first[t] starts tensor t again */
        first[t] = first[t - 1];
    first[0] = 0;
    size_t n = 0;
    r[n++] = 0;
    uint64_t round_max = 0;
    for (size_t t = 0; t < nt; t++) {
        /* this tensor's bytes per process */
        memset(tin, 0, (size_t)np * sizeof *tin);
        for (size_t e = first[t]; e < first[t + 1]; e++) {
            const ptc_transfer *x = &xf[by[e]];
            if (x->src_rank == x->dst_rank)
                continue;
            uint64_t b = xbytes(p, x);
            if (x->src_rank < np)
                tin[x->src_rank] += b;
            if (x->dst_rank < np)
                tin[x->dst_rank] += b;
            st->bytes_moved += b;
        }
        bool over = false;
        for (int q = 0; q < np; q++)
            over |= cur[q] > 0 && cur[q] + tin[q] > budget;
        if (over) {
            r[n++] = t;
            memset(cur, 0, (size_t)np * sizeof *cur);
        }
        for (int q = 0; q < np; q++) {
            cur[q] += tin[q];
            tot[q] += tin[q];
            if (cur[q] > round_max)
                round_max = cur[q];
        }
    }
    r[n] = nt;
    for (int q = 0; q < np; q++)
        if (tot[q] > st->max_process_bytes)
            st->max_process_bytes = tot[q];
    st->rounds = nt ? n : 0;
    st->max_round_bytes = round_max;
    ptc_free(cur), ptc_free(tot), ptc_free(tin), ptc_free(first), ptc_free(by);
    *out = r;
    *nout = n;
    return PTC_OK;
}

int ptc_exec_resize(const ptc_layout *from, const void *const *src, const ptc_layout *to,
                    void *const *dst, MPI_Comm world, const ptc_exec_resize_options *opts,
                    ptc_exec_groups *groups, ptc_exec_resize_stats *stats)
{
    ptc_exec_resize_stats st;
    memset(&st, 0, sizeof st);
    if (groups) {
        memset(groups, 0, sizeof *groups);
        groups->active_comm = groups->pipe = groups->dp = groups->tp = MPI_COMM_NULL;
    }
    int me, np;
    if (MPI_Comm_rank(world, &me) != MPI_SUCCESS || MPI_Comm_size(world, &np) != MPI_SUCCESS)
        return ptc_error_set(PTC_E_MPI, "MPI_Comm_rank/size failed");
    uint64_t budget = opts && opts->budget ? opts->budget : RESIZE_BUDGET;
    ptc_plan_options po = {.hosts = opts ? opts->hosts : 0};
    double t0 = now_s();
    ptc_plan *plan = NULL;
    size_t *rounds = NULL, nrounds = 0;
    int rc = ptc_plan_create(&plan, from, to, &po);
    if (rc == PTC_OK)
        rc = make_rounds(plan, np, budget, &rounds, &nrounds, &st);
    rc = agree(world, rc);
    double t1 = now_s();
    size_t nt = ptc_layout_count(to), ns = ptc_layout_count(from);
    const void **nosrc = ptc_calloc(ns ? ns : 1, sizeof *nosrc);
    void **nodst = ptc_calloc(nt ? nt : 1, sizeof *nodst);
    rc = agree(world, rc == PTC_OK && (!nosrc || !nodst) ? PTC_E_NOMEM : rc);
    for (size_t i = 0; rc == PTC_OK && i < nrounds; i++) {
        rc = ptc_reshard_host_range(plan, world, rounds[i], rounds[i + 1], src ? src : nosrc,
                                    dst ? dst : nodst);
        rc = agree(world, rc);
    }
    double t2 = now_s();
    if (rc == PTC_OK) {
        ptc_plan_stats ps;
        ptc_plan_stats_get(plan, &ps);
        st.bytes_total = ps.bytes_total;
    }
    if (rc == PTC_OK && groups)
        rc = agree(world, ptc_exec_groups_create(groups, ptc_layout_config(to), world));
    double t3 = now_s();
    st.plan_seconds = t1 - t0;
    st.move_seconds = t2 - t1;
    st.groups_seconds = t3 - t2;
    ptc_free(nosrc);
    ptc_free(nodst);
    ptc_free(rounds);
    ptc_plan_destroy(plan);
    if (stats)
        *stats = st;
    return rc;
}
