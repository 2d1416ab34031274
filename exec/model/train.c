/* The run of a training job of `ptc train` (include/ptc/train.h): the step
 * loop, and at each step boundary process 0's decision — go on, save, stop,
 * resize — carried out by every process. Preparing the job is
 * train_prepare.c's, the running configuration's model, data and runtime
 * train_seg.c's, its state in the store train_ckpt.c's, resizes and the
 * control file train_resize.c's. Printing is the caller's (cli/cmd_train.c). */
#include <string.h>

#include "exec/model/train_internal.h"

/* ---- a step --------------------------------------------------------------------------- */

/* The run's state on this process, shared by the steps of the loop. */
typedef struct run {
    const ptc_train_opts *o; /* as prepared */
    ptc_train_opts jo;       /* the running configuration, data seed and position */
    ptc_sched *sched0;       /* the prepared schedule (borrowed) */
    MPI_Comm world;
    int wrank, wsize;
    ptc_store *store;
    ptc_store *persist; /* --persist: the persistent tier */
    ptc_store *from;    /* --resume-from: the store resumed from */
    int64_t steps;      /* the steps this run takes (--until-step: after the resume) */
    train_seg *g;
    int64_t first, k;        /* the first step of this run; the next step */
    int next_resize;         /* the next planned resize (o->resize_step) */
    train_control control;   /* process 0: its look at the control file */
    train_watch *watch;      /* the waits outside the runtime's step (NULL: none) */
    bool has_loss;
    double last_loss;
    ptc_train_step_fn on_step;
    void *user;
    ptc_train_result *res;
    train_async as;          /* --save-async: the save in flight */
    train_persist pers;      /* --persist: the copy in flight */
    bool noted_blocking;     /* the notice that --save-async blocks was given */
    char *hosts;             /* --replicas and resizes: the host names (train_hosts_names) */
} run;

/* The step's figures, reduced to process 0 and reported there (on_step's
 * code returned; a failed reduce sets res->failed_step). */
static int report_step(run *r, int64_t k, bool have_model)
{
    train_seg *g = r->g;
    ptc_exec_stats st;
    ptc_exec_get_stats(g->e, &st);
    double mx[4] = {st.step_seconds, st.actions_seconds, st.reduce_seconds,
                    (double)st.peak_buffers},
           mxo[4];
    double sm[2] = {st.compute_seconds, (double)st.messages}, smo[2];
    int mrc = ptc_mpi_reduce(g->losses, g->all, g->G, MPI_DOUBLE, MPI_SUM, 0, g->comm);
    if (mrc == MPI_SUCCESS)
        mrc = ptc_mpi_reduce(mx, mxo, 4, MPI_DOUBLE, MPI_MAX, 0, g->comm);
    if (mrc == MPI_SUCCESS)
        mrc = ptc_mpi_reduce(sm, smo, 2, MPI_DOUBLE, MPI_SUM, 0, g->comm);
    if (mrc != MPI_SUCCESS) {
        r->res->failed_step = k;
        return ptc_mpi_error(mrc, "MPI_Reduce of the step's figures");
    }
    if (g->rank != 0)
        return PTC_OK;
    ptc_train_step sr = {.step = k, .has_loss = have_model,
                         .step_ms = mxo[0] * 1e3, .actions_ms = mxo[1] * 1e3,
                         .reduce_ms = mxo[2] * 1e3, .compute_ms = smo[0] * 1e3,
                         .messages = (long)smo[1], .peak_buffers = (long)mxo[3]};
    for (int i = 0; i < g->G; i++)
        sr.loss += g->all[i];
    sr.loss /= g->G;
    if (g->sim)
        sr.predicted_ms = ptc_sched_sim_makespan(g->sim) * r->jo.unit_ms;
    r->has_loss = have_model;
    r->last_loss = sr.loss;
    return r->on_step ? r->on_step(&sr, r->user) : PTC_OK;
}

/* Run step @p k on the active processes and report it on process 0. A
 * failure of the step itself sets res->failed_step (the caller returns at
 * once: other processes may be blocked); on_step's code does not. */
static int run_step(run *r, int64_t k)
{
    train_seg *g = r->g;
    if (g->model)
        ptc_exec_model_set_step(g->model, k);
    if (g->gmodel)
        ptc_exec_model_cuda_set_step(g->gmodel, k);
    train_watch_enter(r->watch, "reading the step's data", k);
    int rc = train_data_next(&g->ds);
    if (rc != PTC_OK)
        goto out_failed;
    train_watch_leave(r->watch); /* the runtime watches its step */
    if ((rc = ptc_exec_step(g->e)) != PTC_OK)
        goto out_failed;
    train_watch_enter(r->watch, "gathering the step's losses and figures", k);
    bool have_model = g->model || g->gmodel;
    memset(g->losses, 0, (size_t)g->G * sizeof *g->losses);
    if (have_model) {
        int nl = 0;
        const double *l = NULL;
        if (g->model)
            l = ptc_exec_model_losses(g->model, &nl);
        else if ((rc = ptc_exec_model_cuda_losses(g->gmodel, &l, &nl)) != PTC_OK)
            goto out_failed;
        for (int i = 0; g->tp_i == 0 && i < nl; i++) /* one copy per replica */
            g->losses[g->dp_i * r->jo.microbatches + i] = l[i];
    }
    train_data_done(&g->ds);
    /* The records this step served are durable before process 0 learns of the
     * step (the reduces below wait for every process): a job killed later
     * has them counted, so the audit shows the steps a restart runs again. */
    if ((rc = train_data_flush(&g->ds)) != PTC_OK)
        goto out_failed;
    return report_step(r, k, have_model);
out_failed:
    r->res->failed_step = k;
    return rc;
}

/* ---- the step boundary ---------------------------------------------------------------- */

/* A committed save: the run's last version; every --persist-every-th one
 * goes to the persistent tier in the background (after the previous copy).
 * Collective over the active processes. */
static int saved(run *r, uint64_t v)
{
    /* the records served up to this version are durable already: run_step
     * flushes them after every step */
    r->res->last_version = v;
    r->res->saves++;
    if (!r->persist || v % (uint64_t)r->o->persist_every)
        return PTC_OK;
    return train_persist_start(&r->pers, r->store, r->persist, r->g, v);
}

/* Commit the background save in flight: now (@p wait) or where every active
 * process's writes are done. Collective over the active processes. */
static int finish_save(run *r, bool wait)
{
    uint64_t v = 0;
    int rc = train_state_finish(&r->as, r->g->comm, wait, &v);
    if (rc == PTC_OK && v)
        rc = saved(r, v);
    return rc;
}

/* Whether this save goes to the background: --save-async, and with
 * --replicas only where MPI runs with MPI_THREAD_MULTIPLE (else it blocks,
 * with one notice). */
static bool save_in_background(run *r, bool last, bool stopping)
{
    if (!r->o->save_async || last || stopping)
        return false;
    if (r->o->replicas < 0 || train_mpi_threads())
        return true;
    if (!r->noted_blocking && r->wrank == 0)
        ptc_log(PTC_LOG_WARN, "--save-async with --replicas needs MPI_THREAD_MULTIPLE, which "
                              "this MPI does not provide: the saves block");
    r->noted_blocking = true;
    return false;
}

/* Save the state after step r->k - 1 when the options say so: every
 * save_every steps, after the last, and at a stop whenever there is a
 * store; with save_async, the saves before the last in the background (the
 * one in flight first committed). Collective over the active processes. */
static int maybe_save(run *r, bool last, bool stopping)
{
    const ptc_train_opts *o = r->o;
    int64_t done = r->k - r->first;
    bool saving = o->save_every >= 0;
    if (!(stopping ? r->store != NULL
                   : saving && (last || (o->save_every > 0 && done % o->save_every == 0))))
        return finish_save(r, false);
    train_seg *g = r->g;
    train_watch_enter(r->watch, "saving the state", r->k); /* the previous save's end too */
    int rc = finish_save(r, true);
    uint64_t v = 0;
    if (rc == PTC_OK && g->gmodel) /* every active process has one: the agreement is collective */
        rc = train_agree(g->comm, ptc_exec_model_cuda_pull_state(g->gmodel));
    if (rc != PTC_OK)
        return rc;
    if (save_in_background(r, last, stopping))
        return train_state_save_async(&r->jo, r->store, r->pers.version, g, r->k, r->has_loss,
                                      r->last_loss, &r->as);
    rc = train_state_save(&r->jo, r->store, r->pers.version, g, r->k, r->has_loss,
                          r->last_loss, last || stopping, &v);
    if (rc == PTC_OK)
        rc = saved(r, v);
    return rc;
}

/* An active process: run step r->k, then learn process 0's decision, save
 * when due, and pass the word to the waiting processes. */
static int active_boundary(run *r, train_decision *d)
{
    const ptc_train_opts *o = r->o;
    train_seg *g = r->g;
    int rc = run_step(r, r->k);
    if (r->res->failed_step >= 0)
        return rc;
    r->k++;
    int64_t end = r->first + r->steps;
    train_watch_enter(r->watch, "deciding at the step boundary", r->k);
    if (g->rank == 0) {
        d->rc = rc;
        d->step = r->k;
        if (rc == PTC_OK && r->k < end)
            train_decide(o, r->wsize, r->hosts, r->k, r->next_resize, &r->control, d);
    }
    int mrc = ptc_mpi_bcast(d, (int)sizeof *d, MPI_BYTE, 0, g->comm);
    if (mrc != MPI_SUCCESS) {
        r->res->failed_step = r->k - 1;
        return ptc_mpi_error(mrc, "MPI_Bcast of the step boundary's decision");
    }
    rc = d->rc;
    bool last = r->k == end, stopping = d->action == TRAIN_STOP;
    if (rc == PTC_OK)
        rc = maybe_save(r, last, stopping);
    if (rc != PTC_OK || (last && !stopping))
        d->action = TRAIN_FINISH;
    if (g->rank == 0 && d->action != TRAIN_GO) {
        train_decision w = *d;
        w.rc = rc;
        train_tell_waiting(r->world, ptc_config_world(&g->cfg), &w);
    }
    return rc;
}

/* Process 0's word to resize: checked by every process, then carried out. */
static int do_resize(run *r, const train_decision *d)
{
    ptc_config to;
    train_watch_enter(r->watch, "resizing online", r->k); /* the segment's save first */
    int rc = r->g->active ? finish_save(r, true) : PTC_OK;
    /* with --replicas the background save and the persistent tier's copy
     * run over duplicates of the segment's communicator, and the copy reads
     * the segment: it ends here, and both are duplicated again from the new
     * segment's communicator at their next use */
    if (rc == PTC_OK && r->g->active)
        rc = train_persist_wait(&r->pers);
    rc = train_agree(r->world, rc);
    if (rc == PTC_OK) {
        train_persist_free(&r->pers);
        train_state_drop(&r->as);
    }
    if (rc == PTC_OK)
        rc = ptc_config_parse(&to, d->cfg);
    if (rc == PTC_OK)
        rc = train_check_resize(r->o, &to, r->wsize, r->hosts);
    rc = train_agree(r->world, rc);
    ptc_train_resize rep = {.step = r->k, .reason = d->reason};
    if (rc == PTC_OK)
        rc = train_resize(&r->jo, &r->g, &to, r->store, r->world, r->wrank, &rep);
    if (rc == PTC_OK && !strcmp(d->reason, "planned"))
        r->next_resize++;
    if (rc == PTC_OK && r->wrank == 0 && r->o->on_resize)
        r->o->on_resize(&rep, r->user);
    return rc;
}

static void report_stop(run *r)
{
    r->res->stopped = true;
    if (r->wrank != 0 || !r->o->on_resize)
        return;
    ptc_train_resize rep = {.step = r->k, .reason = "stop", .version = r->res->last_version};
    ptc_config_format(&r->g->cfg, PTC_CONFIG_STYLE_KEYS, rep.from, sizeof rep.from);
    r->o->on_resize(&rep, r->user);
}

/* ---- the run -------------------------------------------------------------------------- */

/* The newest committed version of the job's store(s) (0: none), the same on
 * every process: with a store on each host, the hosts' recovery decides it.
 * Collective; @p rc: this process's outcome so far. */
static int newest_version(run *r, int rc, uint64_t *newest)
{
    *newest = 0;
    rc = train_agree(r->world, rc);
    if (rc == PTC_OK && r->o->replicas >= 0) {
        ptc_transport t;
        int host, nhosts;
        PTC_TRY(ptc_transport_mpi(&t, r->world));
        PTC_TRY(train_agree(r->world, train_hosts_index(r->world, &host, &nhosts)));
        return ptc_ckpt_hosts_recover_over(&t, host, r->store, newest);
    }
    if (rc == PTC_OK && r->wrank == 0)
        rc = ptc_store_latest(r->store, newest);
    int64_t msg[2] = {rc, (int64_t)*newest};
    PTC_MPI_TRY(ptc_mpi_bcast(msg, 2, MPI_INT64_T, 0, r->world));
    *newest = (uint64_t)msg[1];
    return rc != PTC_OK ? rc : (int)msg[0];
}

/* Where a resume reads (*@p rs, @p ro): the job's store(s), or with
 * --resume-from an ordinary store every process opens. *@p resume: false
 * when --resume-any finds no version. Collective. */
static int resume_source(run *r, int rc, ptc_train_opts *ro, ptc_store **rs, bool *resume)
{
    const ptc_train_opts *o = r->o;
    *ro = *o;
    *rs = r->store;
    *resume = o->resume || o->resume_from;
    if (o->resume_from) {
        ro->store = o->resume_from;
        ro->replicas = -1;
        if (rc == PTC_OK)
            rc = train_state_open(ro, false, r->world, r->wrank, &r->from);
        *rs = r->from;
        return rc;
    }
    if (*resume && o->resume_any) {
        uint64_t newest = 0;
        rc = newest_version(r, rc, &newest);
        *resume = rc != PTC_OK || newest != 0;
    }
    return rc;
}

/* The world fits the job, the store is open, a resume's record is read, the
 * first segment is open and a resume's state loaded. Collective. */
static int run_begin(run *r)
{
    const ptc_train_opts *o = r->o;
    /* the world holds the largest configuration; without resizes, exactly it */
    int need = ptc_config_world(&o->cfg);
    for (int i = 0; i < o->nresize; i++)
        if (ptc_config_world(&o->resize_cfg[i]) > need)
            need = ptc_config_world(&o->resize_cfg[i]);
    bool elastic = o->nresize > 0 || o->control;
    if (elastic ? need > r->wsize : need != r->wsize)
        return ptc_error_set(PTC_E_CONFIG, "--config needs %d processes, started with %d "
                                           "(mpirun -np)", need, r->wsize);
    /* with a store on each host, a resize must leave more hosts than copies */
    if (elastic && o->replicas >= 0)
        PTC_TRY(train_hosts_names(r->world, &r->hosts));
    /* a planned resize the job could not carry out fails it now, not at its step */
    for (int i = 0; i < o->nresize; i++)
        if (train_check_resize(o, &o->resize_cfg[i], r->wsize, r->hosts) != PTC_OK)
            return ptc_error_set(PTC_E_CONFIG, "--resize at step %lld: %s",
                                 (long long)o->resize_step[i], ptc_last_error());
    bool saving = o->save_every >= 0, state = saving || o->resume || o->resume_from || elastic;
    int rc = PTC_OK;
    train_watch_enter(r->watch, "opening the job's store", r->first);
    /* a job that saves (or may be told to stop) makes its store if there is
     * none */
    if (o->store)
        rc = train_state_open(o, saving || o->control, r->world, r->wrank, &r->store);
    if (o->persist && saving && rc == PTC_OK) {
        ptc_train_opts po = *o; /* the persistent tier: one store every process opens */
        po.store = o->persist;
        po.replicas = -1;
        rc = train_state_open(&po, true, r->world, r->wrank, &r->persist);
    }
    ptc_ckpt_record rec;
    memset(&rec, 0, sizeof rec);
    uint64_t from = 0;
    ptc_train_opts ro;
    ptc_store *rs = NULL;
    bool resume = false;
    if (o->resume || o->resume_from) {
        train_watch_enter(r->watch, "reading the record to resume from", r->first);
        rc = resume_source(r, rc, &ro, &rs, &resume);
    }
    if (resume) {
        rc = train_state_resume_record(rs, &ro, r->world, r->wrank, rc, &rec, &from);
        /* the steps are counted in an int64_t: every process reads the same record */
        if (rc == PTC_OK && rec.step > (uint64_t)(INT64_MAX - o->steps))
            rc = ptc_error_set(PTC_E_RANGE, "version %llu was saved after step %llu: %d more "
                                            "steps would pass step %lld, the last a job counts",
                               (unsigned long long)from, (unsigned long long)rec.step,
                               o->steps, (long long)INT64_MAX);
        if (rc == PTC_OK) {
            r->jo.data_seed = rec.seed;
            r->jo.data_epoch = rec.epoch;
            r->jo.data_position = rec.sample;
            r->first = (int64_t)rec.step;
        }
    }
    ptc_ckpt_record_free(&rec);
    ptc_sched *s0 = NULL;
    if (rc == PTC_OK)
        rc = ptc_sched_clone(&s0, r->sched0);
    train_watch_enter(r->watch, "building the first configuration", r->first);
    r->g = train_seg_new();
    if (train_agree(r->world, r->g ? PTC_OK : PTC_E_NOMEM) != PTC_OK) {
        ptc_sched_destroy(s0);
        return rc != PTC_OK ? rc : PTC_E_NOMEM;
    }
    rc = train_seg_open(r->g, &r->jo, s0, r->store, r->world, r->wrank, state, rc);
    if (rc == PTC_OK && resume) {
        double t0 = MPI_Wtime();
        train_watch_enter(r->watch, "loading the version to resume from", r->first);
        ptc_plan_stats moved;
        memset(&moved, 0, sizeof moved);
        rc = train_state_load(&ro, rs, from, r->g, r->world, &moved);
        r->res->resumed_from = from;
        r->res->load_seconds = MPI_Wtime() - t0;
        r->res->load_bytes_network = moved.bytes_network;
        r->res->load_bytes_network_lower_bound = moved.bytes_network_lower_bound;
    }
    r->res->first_step = r->first;
    r->k = r->first;
    r->steps = o->steps;
    if (o->until_step > 0) /* --until-step: the steps left after the resume */
        r->steps = o->until_step > r->first ? o->until_step - r->first : 0;
    while (r->next_resize < o->nresize && o->resize_step[r->next_resize] <= r->first)
        r->next_resize++;
    return rc;
}

/* After the last step: fake compute's figures (summed to process 0) and the
 * size of process 0's action list. */
static int run_end(run *r)
{
    train_seg *g = r->g;
    train_watch_enter(r->watch, "gathering the job's last figures", r->k);
    if (g->fake) {
        unsigned long chk = (unsigned long)ptc_exec_fake_checked(g->fake), tot = 0;
        int mrc = ptc_mpi_reduce(&chk, &tot, 1, MPI_UNSIGNED_LONG, MPI_SUM, 0, g->comm);
        if (mrc != MPI_SUCCESS)
            return ptc_mpi_error(mrc, "MPI_Reduce");
        r->res->fake_checked = tot;
    }
    if (g->e)
        ptc_exec_actions(g->e, &r->res->actions_rank0);
    return PTC_OK;
}

int ptc_train_run(ptc_train *t, MPI_Comm world, ptc_train_step_fn on_step, void *user,
                  ptc_train_result *res)
{
    ptc_train_result dummy;
    run r = {.o = &t->o, .jo = t->o, .sched0 = t->sched, .world = world, .on_step = on_step,
             .user = user, .res = res ? res : &dummy};
    r.as.bg = MPI_COMM_NULL;
    r.pers.comm = MPI_COMM_NULL;
    memset(r.res, 0, sizeof *r.res);
    r.res->failed_step = -1;
    PTC_MPI_TRY(MPI_Comm_rank(world, &r.wrank));
    PTC_MPI_TRY(MPI_Comm_size(world, &r.wsize));
    if (train_watch_start(&r.watch, t->o.timeout, r.wrank, t->o.on_timeout, user) != PTC_OK)
        ptc_log(PTC_LOG_WARN, "rank %d: %s: the job runs without it", r.wrank, ptc_last_error());
    int rc = run_begin(&r);
    while (rc == PTC_OK && r.k < r.first + r.steps) {
        train_decision d = {0};
        if (r.g->active) {
            rc = active_boundary(&r, &d);
            if (r.res->failed_step >= 0)
                goto out;
        } else {
            train_watch_leave(r.watch); /* waits as long as the others train */
            rc = train_wait_word(world, &d);
            if (rc == PTC_OK && d.rc != PTC_OK)
                rc = ptc_error_set(d.rc, "the job failed");
            r.k = d.step;
        }
        if (rc != PTC_OK || d.action == TRAIN_FINISH || d.action == TRAIN_STOP) {
            if (d.action == TRAIN_STOP)
                report_stop(&r);
            break;
        }
        if (d.action == TRAIN_RESIZE)
            rc = do_resize(&r, &d);
    }
    if (r.g)
        r.res->last_step = r.k;
    if (rc == PTC_OK && r.g)
        rc = run_end(&r);
    if (rc == PTC_OK) /* the last copy to the persistent tier */
        rc = train_persist_wait(&r.pers);
out:
    train_state_drop(&r.as); /* none in flight unless the job failed */
    train_persist_free(&r.pers);
    train_watch_stop(r.watch);
    train_seg_free(r.g);
    ptc_store_close(r.store);
    ptc_store_close(r.persist);
    ptc_store_close(r.from);
    ptc_free(r.hosts);
    return rc;
}
