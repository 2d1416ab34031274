/* The pipeline runtime's face: options, create (communicators, the plan,
 * the buffer pool), a step (host engine in runtime.c or device engine in
 * runtime_nccl.c), destroy, accessors. */
#include <string.h>

#include "exec/runtime/runtime_internal.h"

void ptc_exec_opts_init(ptc_exec_opts *o)
{
    memset(o, 0, sizeof *o);
    o->device = PTC_EXEC_DEVICE_HOST;
}

/* ---- create / destroy ------------------------------------------------------------ */

static int split(MPI_Comm world, const ptc_config *c, int rank, ptc_exec_group_kind k,
                 MPI_Comm *out)
{
    int color, key;
    PTC_TRY(ptc_exec_group_color(c, rank, k, &color, &key));
    int mrc = MPI_Comm_split(world, color, key, out);
    if (mrc != MPI_SUCCESS)
        return ptc_mpi_error(mrc, "MPI_Comm_split");
    return PTC_OK;
}

static void free_comm(MPI_Comm *c)
{
    if (*c != MPI_COMM_NULL)
        MPI_Comm_free(c);
    *c = MPI_COMM_NULL;
}

void ptc_exec_destroy(ptc_exec *e)
{
    if (!e)
        return;
    if (e->slots) {
        size_t ns = (size_t)e->plan.nchunks * (size_t)e->plan.mbs * RT_NSLOT;
        for (size_t i = 0; i < ns; i++)
            if (e->slots[i])
                rt_pool_free_one(e, e->slots[i]);
    }
    for (size_t i = 0; i < e->npool; i++)
        rt_pool_free_one(e, e->pool[i]);
    if (e->o.device == PTC_EXEC_DEVICE_CUDA)
        rt_dev_close(e);
    free_comm(&e->pipe);
    free_comm(&e->dp);
    free_comm(&e->tp);
    free_comm(&e->pair);
    rt_plan_free(&e->plan);
    ptc_free(e->pool);
    ptc_free(e->slots);
    ptc_free(e->req);
    ptc_free(e->state);
    ptc_free(e->pending_sends);
    ptc_free(e->tm);
    ptc_free(e->chunk_bwd_left);
    ptc_free(e->red_req);
    ptc_free(e->red_posted);
    ptc_sched_destroy(e->sched);
    ptc_free(e);
}

int ptc_exec_create(ptc_exec **out, const ptc_sched *s, const ptc_config *c,
                    MPI_Comm world, const ptc_exec_stage *fns, const ptc_exec_opts *o)
{
    *out = NULL;
    int wsize = 0, wrank = 0, rc;
    MPI_Comm_size(world, &wsize);
    MPI_Comm_rank(world, &wrank);
    if (ptc_config_world(c) != wsize)
        return ptc_error_set(PTC_E_INVAL, "configuration needs %d processes, world has %d",
                             ptc_config_world(c), wsize);
    if (ptc_sched_ranks(s) != c->pp)
        return ptc_error_set(PTC_E_INVAL, "schedule has %d ranks, pp=%d",
                             ptc_sched_ranks(s), c->pp);
    if (!o || o->act_bytes == 0)
        return ptc_error_set(PTC_E_INVAL, "act_bytes must be > 0");
    if (o->act_bytes > (size_t)INT32_MAX)
        return ptc_error_set(PTC_E_RANGE, "act_bytes %zu over INT_MAX", o->act_bytes);
    if (!fns || !fns->forward)
        return ptc_error_set(PTC_E_INVAL, "the forward callback is required");
    ptc_exec *e = ptc_calloc(1, sizeof *e);
    if (!e)
        return ptc_error_set(PTC_E_NOMEM, "runtime");
    e->pipe = e->dp = e->tp = e->pair = MPI_COMM_NULL;
    e->cfg = *c;
    e->fns = *fns;
    e->o = *o;
    e->world = world;
    e->world_rank = wrank;
    ptc_config_coords(c, wrank, &e->pp_i, &e->dp_i, &e->tp_i);
    e->rng = o->jitter_seed * 0x9E3779B97F4A7C15ull + (uint64_t)wrank + 1;
    rc = ptc_sched_clone(&e->sched, s);
    if (rc != PTC_OK)
        goto out_destroy;
    rc = ptc_sched_infer_comm(e->sched);
    if (rc != PTC_OK)
        goto out_destroy;
    /* Communicators, always in this order on every rank. */
    if ((rc = split(world, c, wrank, PTC_EXEC_GROUP_PIPE, &e->pipe)) != PTC_OK ||
        (rc = split(world, c, wrank, PTC_EXEC_GROUP_DP, &e->dp)) != PTC_OK ||
        (rc = split(world, c, wrank, PTC_EXEC_GROUP_TP, &e->tp)) != PTC_OK ||
        (rc = split(world, c, wrank, PTC_EXEC_GROUP_PAIR, &e->pair)) != PTC_OK)
        goto out_destroy;
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(world, MPI_TAG_UB, &ub, &flag);
    rc = rt_plan_build(&e->plan, e->sched, e->pp_i, flag && ub ? *ub : 32767);
    if (rc != PTC_OK)
        goto out_destroy;
    /* Callbacks the list needs. */
    for (size_t i = 0; i < e->plan.n; i++) {
        int op = e->plan.ops[i].a.op;
        if ((op == PTC_SCHED_B && !fns->backward) ||
            (op == PTC_SCHED_I && !fns->backward_input) ||
            (op == PTC_SCHED_W && !fns->backward_weight)) {
            rc = ptc_error_set(PTC_E_INVAL, "the schedule needs the %s callback",
                               op == PTC_SCHED_B   ? "backward"
                               : op == PTC_SCHED_I ? "backward_input"
                                                   : "backward_weight");
            goto out_destroy;
        }
    }
    size_t n = e->plan.n ? e->plan.n : 1;
    size_t ns = (size_t)e->plan.nchunks * (size_t)e->plan.mbs * RT_NSLOT;
    int nch = e->plan.nchunks;
    e->slots = ptc_calloc(ns, sizeof *e->slots);
    e->req = ptc_malloc(n * sizeof *e->req);
    e->state = ptc_calloc(n, 1);
    e->pending_sends = ptc_malloc(n * sizeof *e->pending_sends);
    e->tm = ptc_calloc(n, sizeof *e->tm);
    e->chunk_bwd_left = ptc_calloc((size_t)nch, sizeof *e->chunk_bwd_left);
    e->red_req = ptc_malloc((size_t)nch * sizeof *e->red_req);
    e->red_posted = ptc_calloc((size_t)nch, sizeof *e->red_posted);
    if (!e->slots || !e->req || !e->state || !e->pending_sends || !e->tm ||
        !e->chunk_bwd_left || !e->red_req || !e->red_posted) {
        rc = ptc_error_set(PTC_E_NOMEM, "runtime tables");
        goto out_destroy;
    }
    if (o->device == PTC_EXEC_DEVICE_CUDA && (rc = rt_dev_open(e)) != PTC_OK)
        goto out_destroy;
    /* Preallocate what the dry run says is live at once. */
    rc = rt_pool_reserve(e, e->plan.peak + 1);
    if (rc != PTC_OK)
        goto out_destroy;
    for (size_t i = 0; i < e->plan.peak; i++) {
        void *b;
        if ((rc = rt_pool_alloc_one(e, &b)) != PTC_OK)
            goto out_destroy;
        e->pool[e->npool++] = b;
        e->allocated++;
    }
    *out = e;
    return PTC_OK;
out_destroy:
    ptc_exec_destroy(e);
    return rc;
}

static int step_once(ptc_exec *e);

int ptc_exec_step(ptc_exec *e)
{
    if (e->failed)
        return ptc_error_set(PTC_E_INVAL, "a previous step of this executor failed; "
                                          "destroy it (the job should stop)");
    int rc = step_once(e);
    if (rc != PTC_OK)
        rt_abandon(e);
    return rc;
}

static int step_once(ptc_exec *e)
{
    int rc = PTC_OK;
    memset(&e->st, 0, sizeof e->st);
    e->peak_in_use = e->in_use;
    e->npending = 0;
    memset(e->state, 0, e->plan.n ? e->plan.n : 1);
    MPI_Request bar;
    int mrc = MPI_Ibarrier(e->world, &bar);
    if (mrc != MPI_SUCCESS)
        return ptc_mpi_error(mrc, "MPI_Ibarrier");
    e->last_progress = rt_now();
    PTC_TRY(rt_wait(e, &bar, 0, "in the barrier opening the step"));
    e->t0 = rt_now();
    e->last_progress = e->t0;
    if (e->o.device == PTC_EXEC_DEVICE_CUDA)
        rc = rt_dev_step(e);
    else
        rc = rt_step_host(e);
    if (rc != PTC_OK)
        return rc;
    double t_act = rt_now();
    e->st.actions_seconds = t_act - e->t0;
    if (e->o.device != PTC_EXEC_DEVICE_CUDA)
        PTC_TRY(rt_reduce_all(e));
    e->st.reduce_seconds = rt_now() - t_act;
    if (e->fns.optimizer_step)
        PTC_TRY(e->fns.optimizer_step(e->fns.user));
    e->st.step_seconds = rt_now() - e->t0;
    e->st.buffers = e->allocated;
    e->st.peak_buffers = e->peak_in_use;
    return PTC_OK;
}

const ptc_exec_timing *ptc_exec_timings(const ptc_exec *e, size_t *n)
{
    *n = e->plan.n;
    return e->tm;
}

const ptc_sched_action *ptc_exec_actions(const ptc_exec *e, size_t *n)
{
    return ptc_sched_actions(e->sched, e->pp_i, n);
}

void ptc_exec_get_stats(const ptc_exec *e, ptc_exec_stats *st) { *st = e->st; }

void ptc_exec_coords(const ptc_exec *e, int *pp_i, int *dp_i, int *tp_i)
{
    *pp_i = e->pp_i;
    *dp_i = e->dp_i;
    *tp_i = e->tp_i;
}

MPI_Comm ptc_exec_tp_comm(const ptc_exec *e) { return e->tp; }

MPI_Comm ptc_exec_pipe_comm(const ptc_exec *e) { return e->pipe; }

MPI_Comm ptc_exec_reduce_comm(const ptc_exec *e)
{
    return ptc_sched_pipes(e->sched) == 2 ? e->pair : e->dp;
}
