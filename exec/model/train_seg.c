/* One configuration's running state of a training job (a segment): the
 * model (CPU or CUDA) or fake compute of this process's stages, its data
 * source, the pipeline runtime over the active processes, and the layout
 * and buffers its state is saved, loaded and moved under. */
#include <string.h>

#include "exec/model/train_internal.h"

static void seg_close(train_seg *g)
{
    ptc_free(g->losses);
    ptc_free(g->all);
    train_data_close(&g->ds);
    ptc_free(g->ranks);
    ptc_free(g->bufs);
    ptc_layout_destroy(g->layout);
    ptc_rules_destroy(g->rules);
    ptc_exec_destroy(g->e);
    ptc_exec_model_destroy(g->model);
    ptc_exec_model_cuda_destroy(g->gmodel);
    ptc_exec_fake_destroy(g->fake);
    ptc_sched_sim_destroy(g->sim);
    ptc_sched_destroy(g->sched);
    if (g->comm != MPI_COMM_NULL)
        MPI_Comm_free(&g->comm);
    memset(g, 0, sizeof *g);
    g->comm = MPI_COMM_NULL;
    g->ds.group = MPI_COMM_NULL;
}

train_seg *train_seg_new(void)
{
    train_seg *g = ptc_calloc(1, sizeof *g);
    if (g) {
        g->comm = MPI_COMM_NULL;
        g->ds.group = MPI_COMM_NULL;
    }
    return g;
}

void train_seg_free(train_seg *g)
{
    if (!g)
        return;
    seg_close(g);
    ptc_free(g);
}

/* Fake compute: each action sleeps its simulated cost. */
static int open_fake(train_seg *g, const ptc_train_opts *o, ptc_exec_stage *fns)
{
    ptc_sched_costs costs;
    ptc_sched_costs_init(&costs);
    costs.f = o->cost_f;
    costs.b = o->cost_b;
    costs.w = o->cost_w;
    PTC_TRY(ptc_exec_fake_create(&g->fake, g->sched, g->pp_i, &costs, o->unit_ms * 1e-3,
                                 o->act_bytes));
    PTC_TRY(ptc_sched_simulate(g->sched, &costs, &g->sim));
    ptc_exec_fake_stage(g->fake, fns);
    return PTC_OK;
}

/* The model (CPU or CUDA) of this process's stages and its data source.
 * Collective over the active processes (the replicas' data groups). */
static int open_model(train_seg *g, const ptc_train_opts *o, ptc_store *store, int rc,
                      ptc_exec_stage *fns)
{
    int drc = train_data_open(&g->ds, o, store, g->comm, g->dp_i);
    rc = train_agree(g->comm, rc == PTC_OK ? drc : rc);
    if (rc != PTC_OK)
        return rc;
    ptc_exec_model_cfg mc = o->model;
    mc.tp = o->cfg.tp;
    mc.tp_rank = g->tp_i;
    mc.zero = o->cfg.zero;
    mc.dp = o->cfg.dp;
    mc.dp_rank = g->dp_i;
    mc.stage_layers = o->cfg.layers;
    mc.nstage_layers = o->cfg.nlayers;
    int64_t base = (int64_t)g->dp_i * o->microbatches;
    if (o->cuda) {
        PTC_TRY(ptc_exec_model_cuda_create(&g->gmodel, &mc, g->sched, g->pp_i, base, g->G,
                                           train_data_fn, &g->ds));
        ptc_exec_model_cuda_stage(g->gmodel, fns);
    } else {
        PTC_TRY(ptc_exec_model_create(&g->model, &mc, g->sched, g->pp_i, base, g->G,
                                      train_data_fn, &g->ds));
        ptc_exec_model_stage(g->model, fns);
    }
    return PTC_OK;
}

/* The runtime over the active processes. Collective: all or none. */
static int open_runtime(train_seg *g, const ptc_train_opts *o, const ptc_exec_stage *fns)
{
    ptc_exec_opts eo;
    ptc_exec_opts_init(&eo);
    eo.act_bytes = o->fake ? o->act_bytes : ptc_exec_model_act_bytes(&o->model);
    eo.device = o->cuda ? PTC_EXEC_DEVICE_CUDA : PTC_EXEC_DEVICE_HOST;
    eo.timeout = o->timeout;
    eo.jitter = o->jitter_ms * 1e-3;
    eo.jitter_seed = o->model.seed;
    eo.prepost = o->prepost;
    eo.overlap_reduce = o->overlap_reduce;
    PTC_TRY(ptc_exec_create(&g->e, g->sched, &o->cfg, g->comm, fns, &eo));
    if (g->model)
        return ptc_exec_model_set_comms(g->model, ptc_exec_tp_comm(g->e),
                                        ptc_exec_reduce_comm(g->e));
    return PTC_OK;
}

int train_seg_open(train_seg *g, const ptc_train_opts *o, ptc_sched *sched, ptc_store *store,
                   MPI_Comm world, int wrank, bool state, int rc)
{
    memset(g, 0, sizeof *g);
    g->comm = MPI_COMM_NULL;
    g->ds.group = MPI_COMM_NULL;
    g->cfg = o->cfg;
    g->sched = sched;
    g->active = wrank < ptc_config_world(&o->cfg);
    int mrc = MPI_Comm_split(world, g->active ? 0 : MPI_UNDEFINED, wrank, &g->comm);
    if (mrc != MPI_SUCCESS)
        return ptc_mpi_error(mrc, "MPI_Comm_split of the active processes");
    if (g->active) {
        g->rank = wrank;
        ptc_config_coords(&o->cfg, wrank, &g->pp_i, &g->dp_i, &g->tp_i);
        g->G = o->microbatches * o->cfg.dp;
        g->losses = ptc_calloc((size_t)g->G, sizeof *g->losses);
        g->all = ptc_calloc((size_t)g->G, sizeof *g->all);
        if (rc == PTC_OK && (!g->losses || !g->all))
            rc = PTC_E_NOMEM;
        ptc_exec_stage fns;
        memset(&fns, 0, sizeof fns);
        if (o->fake)
            rc = rc == PTC_OK ? open_fake(g, o, &fns) : rc;
        else
            rc = open_model(g, o, store, rc, &fns);
        rc = train_agree(g->comm, rc); /* ptc_exec_create is collective: all or none */
        if (rc == PTC_OK)
            rc = open_runtime(g, o, &fns);
    }
    if (rc == PTC_OK && state)
        rc = train_ckpt_layout(o, sched, &g->layout, &g->rules);
    /* the state's buffers are host arrays: the CPU model's own, or the host
     * mirror of the CUDA model (pulled from and pushed to the device around
     * a save, a load and a move) */
    if (rc == PTC_OK && state && (g->model || g->gmodel))
        rc = train_ckpt_buffers(o, sched,
                                g->model ? g->model : ptc_exec_model_cuda_host(g->gmodel),
                                g->layout, g->pp_i, g->dp_i, g->tp_i, &g->ranks, &g->nranks,
                                &g->bufs);
    return train_agree(world, rc);
}

