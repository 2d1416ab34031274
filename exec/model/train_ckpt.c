/* The training job's state in its store: the layout it saves and loads
 * under, which of its buffers hold which layout rank's shards, and the
 * collective steps that open the store, save a version and resume from one.
 *
 * A job of D replicas, T tensor-parallel shards and a schedule of S stages
 * per pipe (P pipeline ranks; S = P·chunks for interleaved and V-shaped
 * schedules; two pipes for Chimera) stores its state under the rules preset
 * ptc-mlp and the configuration dp = D·pipes, tp = T, pp = S (zero as the
 * job's): every chunk of every process is one layout rank, so each process
 * saves and loads the ranks of its chunks. The layout's data-parallel index
 * of a chunk is its replica index (ptc_exec_model_replica: the
 * data-parallel index, and for Chimera the replica pair's order), so that
 * under zero=1 a chunk's AdamW ranges are the layout's flat ranges. Any
 * other job — other D, T, P, schedule or zero — loads the same version into
 * its own layout: the stored layout is only how it was written. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "ptc/reshard.h"
#include "exec/model/model_internal.h"
#include "exec/model/train_internal.h"

int train_ckpt_layout(const ptc_train_opts *o, const ptc_sched *s, ptc_layout **layout,
                      ptc_rules **rules)
{
    *layout = NULL;
    *rules = NULL;
    ptc_tensor_info *t = NULL;
    size_t n = 0;
    PTC_TRY(ptc_exec_model_tensors(&o->model, true, &t, &n));
    ptc_config c;
    ptc_config_init(&c);
    c.dp = o->cfg.dp * ptc_sched_pipes(s);
    c.tp = o->cfg.tp;
    c.pp = ptc_sched_stages(s);
    c.zero = o->cfg.zero;
    c.nlayers = o->cfg.nlayers; /* the model checked they fit its stages */
    memcpy(c.layers, o->cfg.layers, sizeof c.layers);
    int rc = ptc_rules_load(rules, "ptc-mlp");
    if (rc == PTC_OK)
        rc = ptc_layout_create(layout, t, n, *rules, &c);
    ptc_exec_model_tensors_free(t, n);
    if (rc != PTC_OK) {
        ptc_rules_destroy(*rules);
        *rules = NULL;
    }
    return rc;
}

/* The layout rank of chunk (pipe, stage) of this process. */
static int chunk_rank(const ptc_train_opts *o, const ptc_sched *s, int pp_i, int dp_i, int tp_i,
                      int pipe, int stage)
{
    int rep, nrep;
    ptc_exec_model_replica(ptc_sched_pipes(s), ptc_sched_ranks(s), o->cfg.dp, pp_i, dp_i, pipe,
                           stage, &rep, &nrep);
    return (stage * nrep + rep) * o->cfg.tp + tp_i;
}

int train_ckpt_buffers(const ptc_train_opts *o, const ptc_sched *s, const ptc_exec_model *m,
                       const ptc_layout *l, int pp_i, int dp_i, int tp_i, int **ranks_out,
                       size_t *nranks_out, void ***bufs_out)
{
    *ranks_out = NULL;
    *bufs_out = NULL;
    *nranks_out = 0;
    size_t np = 0, nt = ptc_layout_count(l);
    const ptc_exec_param *p = ptc_exec_model_params(m, &np);
    int nch = ptc_sched_chunks(s, pp_i);
    int *ranks = ptc_calloc((size_t)(nch > 0 ? nch : 1), sizeof *ranks);
    void **bufs = ptc_calloc((size_t)(nch > 0 ? nch : 1) * (nt ? nt : 1), sizeof *bufs);
    if (!ranks || !bufs) {
        ptc_free(ranks);
        ptc_free(bufs);
        return PTC_E_NOMEM;
    }
    for (int c = 0; c < nch; c++) {
        int pipe, stage;
        ptc_sched_stage_of(s, pp_i, c, &pipe, &stage);
        ranks[c] = chunk_rank(o, s, pp_i, dp_i, tp_i, pipe, stage);
        for (size_t i = 0; i < np; i++) {
            if (p[i].chunk != c)
                continue;
            size_t nl = strlen(p[i].name);
            for (size_t t = 0; t < nt; t++) {
                const char *tn = ptc_layout_tensor(l, t)->name;
                if (strncmp(tn, p[i].name, nl) != 0)
                    continue;
                if (!tn[nl])
                    bufs[(size_t)c * nt + t] = p[i].data;
                else if (!strcmp(tn + nl, ".exp_avg"))
                    bufs[(size_t)c * nt + t] = p[i].exp_avg;
                else if (!strcmp(tn + nl, ".exp_avg_sq"))
                    bufs[(size_t)c * nt + t] = p[i].exp_avg_sq;
            }
        }
    }
    *ranks_out = ranks;
    *bufs_out = bufs;
    *nranks_out = (size_t)nch;
    return PTC_OK;
}

/* ---- the store: open, resume, save ---------------------------------------------------- */

/* A store on each host: the first process of each host opens (or makes)
 * it, then the others of that host open it. */
static int open_on_hosts(const ptc_train_opts *o, bool create, MPI_Comm world, ptc_store **out)
{
    int host, nhosts, me, rc;
    PTC_MPI_TRY(MPI_Comm_rank(world, &me));
    rc = train_hosts_index(world, &host, &nhosts);
    if (rc == PTC_OK && o->replicas >= nhosts) /* every save would fail: say so before a step */
        rc = ptc_ckpt_hosts_replica_hosts(0, nhosts, o->replicas, NULL);
    MPI_Comm local = MPI_COMM_NULL;
    if (rc == PTC_OK && MPI_Comm_split(world, host, me, &local) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Comm_split by host failed");
    if ((rc = train_agree(world, rc)) < 0)
        return rc;
    int lr = 0;
    MPI_Comm_rank(local, &lr);
    if (lr == 0)
        rc = ptc_store_open(out, o->store, create ? PTC_STORE_CREATE : 0);
    int r0 = rc;
    ptc_mpi_bcast(&r0, 1, MPI_INT, 0, local);
    MPI_Comm_free(&local);
    if (lr != 0)
        rc = r0 == PTC_OK ? ptc_store_open(out, o->store, 0)
                          : ptc_error_set(r0, "opening the store %s on this host failed",
                                          o->store);
    return rc;
}

int train_state_open(const ptc_train_opts *o, bool create, MPI_Comm world, int wrank,
                     ptc_store **out)
{
    *out = NULL;
    int rc = PTC_OK;
    if (o->replicas >= 0)
        return open_on_hosts(o, create, world, out);
    if (wrank == 0)
        rc = ptc_store_open(out, o->store, create ? PTC_STORE_CREATE : 0);
    int r0 = rc;
    int mrc = ptc_mpi_bcast(&r0, 1, MPI_INT, 0, world);
    if (mrc != MPI_SUCCESS)
        r0 = ptc_mpi_error(mrc, "MPI_Bcast of the store's opening");
    if (wrank != 0 && r0 == PTC_OK)
        rc = ptc_store_open(out, o->store, 0);
    else if (wrank != 0)
        rc = ptc_error_set(r0, "opening the store %s failed on process 0", o->store);
    return rc;
}

static void model_spec(const ptc_exec_model_cfg *m, char *buf, size_t cap)
{
    snprintf(buf, cap, "mlp:layers=%d,hidden=%d,vocab=%d,tokens=%d", m->layers, m->hidden,
             m->vocab, m->tokens);
}

/* The record of a version to resume from, each host's own part's: the
 * hosts first agree on the newest committed version (recovery). */
static int check_record(const ptc_train_opts *o, uint64_t from, const ptc_ckpt_record *rec);

/* The record for a host without its part of the version (a fresh store
 * joining, or one that missed it): process @p root's, whose host holds one,
 * as its JSON text. Collective; @p has: this process read its own. */
static int share_record(MPI_Comm world, int root, bool has, ptc_ckpt_record *rec)
{
    int me;
    PTC_MPI_TRY(MPI_Comm_rank(world, &me));
    char *json = NULL;
    int64_t len = 0;
    int rc = me == root ? ptc_ckpt_record_to_json(rec, &json) : PTC_OK;
    if (json)
        len = (int64_t)strlen(json) + 1;
    PTC_TRY(train_agree(world, rc));
    PTC_MPI_TRY(ptc_mpi_bcast(&len, 1, MPI_INT64_T, root, world));
    char *buf = me == root ? json : ptc_malloc((size_t)len);
    rc = buf ? PTC_OK : PTC_E_NOMEM;
    if ((rc = train_agree(world, rc)) == PTC_OK &&
        ptc_mpi_bcast(buf, (int)len, MPI_CHAR, root, world) != MPI_SUCCESS)
        rc = ptc_error_set(PTC_E_MPI, "MPI_Bcast of the record to resume from failed");
    if (rc == PTC_OK && !has)
        rc = ptc_ckpt_record_from_json(buf, (size_t)len - 1, rec);
    if (me != root)
        ptc_free(buf);
    ptc_store_free(json);
    return train_agree(world, rc);
}

static int resume_on_hosts(ptc_store *store, const ptc_train_opts *o, MPI_Comm world, int rc,
                           ptc_ckpt_record *rec, uint64_t *from)
{
    ptc_transport t;
    int host, nhosts;
    PTC_TRY(train_agree(world, rc));
    PTC_TRY(ptc_transport_mpi(&t, world));
    PTC_TRY(train_agree(world, train_hosts_index(world, &host, &nhosts)));
    /* the version every reader across hosts takes (ptc_reshard_hosts_pick:
     * the newest committed one the hosts present hold whole) */
    uint64_t v = 0, lv = 0;
    PTC_TRY(ptc_reshard_hosts_pick(&t, host, store, o->resume_version, &v));
    if ((rc = ptc_ckpt_hosts_local_version(store, v, &lv)) == PTC_E_NOTFOUND) {
        ptc_error_clear(); /* a host without its part: the record comes from another */
        rc = PTC_OK;
    }
    if (rc == PTC_OK && lv)
        rc = ptc_ckpt_read_record(store, lv, rec);
    int me, mine, root;
    PTC_MPI_TRY(MPI_Comm_rank(world, &me));
    mine = lv ? me : INT_MAX;
    PTC_TRY(train_agree(world, rc));
    PTC_MPI_TRY(ptc_mpi_allreduce(&mine, &root, 1, MPI_INT, MPI_MIN, world));
    if (root == INT_MAX)
        rc = ptc_error_set(PTC_E_NOTFOUND, "no host present holds a part of version %llu",
                           (unsigned long long)v);
    else
        rc = share_record(world, root, lv != 0, rec);
    if (rc == PTC_OK)
        rc = check_record(o, v, rec);
    *from = v;
    return train_agree(world, rc);
}

int train_state_resume_record(ptc_store *store, const ptc_train_opts *o, MPI_Comm world,
                              int wrank, int rc, ptc_ckpt_record *rec, uint64_t *from)
{
    uint64_t v = o->resume_version;
    if (o->replicas >= 0)
        return resume_on_hosts(store, o, world, rc, rec, from);
    if (wrank == 0 && rc == PTC_OK && v == 0) {
        rc = ptc_store_latest(store, &v);
        if (rc == PTC_OK && v == 0)
            rc = ptc_error_set(PTC_E_NOTFOUND, "store %s has no version to resume from",
                               o->store);
    }
    int64_t msg[2] = {rc, (int64_t)v};
    PTC_MPI_TRY(ptc_mpi_bcast(msg, 2, MPI_INT64_T, 0, world));
    if (rc == PTC_OK && msg[0] != PTC_OK)
        rc = ptc_error_set((int)msg[0], "resolving the version to resume from failed on "
                                        "process 0");
    *from = (uint64_t)msg[1];
    if (rc != PTC_OK)
        return rc;
    PTC_TRY(ptc_ckpt_read_record(store, *from, rec));
    return check_record(o, *from, rec);
}

static int check_record(const ptc_train_opts *o, uint64_t from, const ptc_ckpt_record *rec)
{
    if (rec->format == 0)
        return ptc_error_set(PTC_E_FORMAT, "version %llu of %s has no training-state record "
                                           "(it was not saved by a training job)",
                             (unsigned long long)from, o->store);
    char want[160];
    model_spec(&o->model, want, sizeof want);
    for (size_t i = 0; i < rec->nextra; i++)
        if (!strcmp(rec->extra[i].key, "model") && strcmp(rec->extra[i].value, want))
            return ptc_error_set(PTC_E_CONFIG, "version %llu holds the model %s, this job "
                                               "trains %s", (unsigned long long)from,
                                 rec->extra[i].value, want);
    return PTC_OK;
}

/* The texts a record points to. */
typedef struct rec_text {
    char cfg[256], model[160], lr[32];
    ptc_ckpt_kv extra[3];
} rec_text;

/* The record of segment @p g's state after @p steps steps. */
static ptc_ckpt_record state_record(const ptc_train_opts *o, const train_seg *g, int64_t steps,
                                    bool has_loss, double loss, rec_text *x)
{
    const train_data *ds = &g->ds;
    ptc_config_format(&o->cfg, PTC_CONFIG_STYLE_KEYS, x->cfg, sizeof x->cfg);
    model_spec(&o->model, x->model, sizeof x->model);
    snprintf(x->lr, sizeof x->lr, "%.9g", (double)o->model.lr);
    x->extra[0] = (ptc_ckpt_kv){"model", x->model};
    x->extra[1] = (ptc_ckpt_kv){"lr", x->lr};
    x->extra[2] = (ptc_ckpt_kv){"data", o->data};
    return (ptc_ckpt_record){.step = (uint64_t)steps, .config = x->cfg,
                             .schedule = ptc_sched_kind(g->sched), .seed = ds->seed,
                             .epoch = ds->pos.epoch,
                             .sample = ds->pos.start + ds->pos.steps * (uint64_t)ds->per_step,
                             .global_batch = (uint64_t)ds->per_step,
                             .dataset = ds->kind >= DATA_DATASET ? ds->name : NULL,
                             .has_loss = has_loss, .loss = loss, .extra = x->extra,
                             .nextra = PTC_ARRAY_LEN(x->extra)};
}

/* The cross-host save's options and this process's host. */
static int hosts_setup(const ptc_train_opts *o, const train_seg *g, uint64_t pin, int *host,
                       ptc_ckpt_hosts_options *ho)
{
    int nhosts;
    PTC_TRY(train_agree(g->comm, train_hosts_index(g->comm, host, &nhosts)));
    ptc_ckpt_hosts_options_init(ho);
    ho->replicas = o->replicas;
    ho->keep = o->keep_local;
    ho->pin = pin;
    return PTC_OK;
}

int train_state_save(const ptc_train_opts *o, ptc_store *store, uint64_t pin, const train_seg *g,
                     int64_t steps, bool has_loss, double loss, bool last, uint64_t *version)
{
    rec_text x;
    ptc_ckpt_record rec = state_record(o, g, steps, has_loss, loss, &x);
    ptc_ckpt_options co;
    ptc_ckpt_options_init(&co);
    if (o->replicas < 0)
        return ptc_ckpt_save(store, g->layout, g->rules, g->ranks, g->nranks,
                             (const void *const *)g->bufs, &rec, &co, g->comm, version);
    ptc_transport t;
    int host;
    ptc_ckpt_hosts_options ho;
    PTC_TRY(ptc_transport_mpi(&t, g->comm));
    PTC_TRY(hosts_setup(o, g, pin, &host, &ho));
    ho.last = last;
    return ptc_ckpt_hosts_save_over(&t, host, store, g->layout, g->rules, g->ranks, g->nranks,
                                    (const void *const *)g->bufs, &rec, &co, &ho, version);
}

bool train_mpi_threads(void)
{
    if (ptc_fault_mpi_single()) /* the test build's stand-in for an MPI without it */
        return false;
    int level = MPI_THREAD_SINGLE;
    return MPI_Query_thread(&level) == MPI_SUCCESS && level >= MPI_THREAD_MULTIPLE;
}

/* exec_model_before_update's: the snapshot of the save in flight is taken. */
static void wait_snapshot(void *user)
{
    const train_async *as = user;
    ptc_ckpt_async_snapshot_wait(as->a);
}

/* What every background save across hosts uses, made at the first one
 * (and again after an online resize, whose train_state_drop clears them):
 * the host index, the communicator of the library's thread, the snapshot
 * area and the transport over it. Collective over the active processes;
 * later saves begin without any collective at the step boundary. */
static int async_hosts_ready(const train_seg *g, train_async *as)
{
    int nhosts, rc = train_agree(g->comm, train_hosts_index(g->comm, &as->host, &nhosts));
    if (rc < 0)
        return rc;
    if (as->bg == MPI_COMM_NULL && MPI_Comm_dup(g->comm, &as->bg) != MPI_SUCCESS) {
        as->bg = MPI_COMM_NULL;
        rc = ptc_error_set(PTC_E_MPI, "MPI_Comm_dup for the background save failed");
    }
    if ((rc = train_agree(g->comm, rc)) < 0)
        return rc;
    if (!as->stage)
        rc = ptc_ckpt_stage_create(&as->stage);
    if (rc == PTC_OK)
        rc = ptc_transport_mpi(&as->t, as->bg);
    if ((rc = train_agree(g->comm, rc)) < 0)
        return rc;
    as->ready = true;
    return PTC_OK;
}

/* The cross-host save in the background: the snapshot (here, or with the
 * CPU model on the library's thread before the next optimizer step), then
 * the whole protocol (exchange, writes, two-phase commit) on that thread
 * over a communicator of its own (MPI_THREAD_MULTIPLE: the job's thread
 * goes on calling MPI). Collective over the active processes the first
 * time (async_hosts_ready); then local until the thread's protocol. */
static int save_async_hosts(const ptc_train_opts *o, ptc_store *store, uint64_t pin,
                            const train_seg *g, ptc_ckpt_record *rec, train_async *as)
{
    ptc_ckpt_options co;
    ptc_ckpt_options_init(&co);
    ptc_ckpt_hosts_options ho;
    ptc_ckpt_hosts_options_init(&ho);
    ho.replicas = o->replicas;
    ho.keep = o->keep_local;
    ho.pin = pin;
    if (!as->ready)
        PTC_TRY(async_hosts_ready(g, as));
    /* the CPU model's optimizer is the first to change the state: the copy
     * runs on the save's thread during the next step's forward and
     * backward, and the optimizer waits for it */
    ptc_ckpt_stage_defer(as->stage, g->model != NULL);
    if (g->model)
        exec_model_before_update(g->model, wait_snapshot, as);
    return ptc_ckpt_hosts_save_async(&as->a, &as->t, as->host, store, g->layout, g->rules,
                                     g->ranks, g->nranks, (const void *const *)g->bufs, rec, &co,
                                     &ho, as->stage);
}

int train_state_save_async(const ptc_train_opts *o, ptc_store *store, uint64_t pin,
                           const train_seg *g, int64_t steps, bool has_loss, double loss,
                           train_async *as)
{
    rec_text x;
    ptc_ckpt_record rec = state_record(o, g, steps, has_loss, loss, &x);
    if (o->replicas >= 0)
        return save_async_hosts(o, store, pin, g, &rec, as);
    ptc_ckpt_options co;
    ptc_ckpt_options_init(&co);
    co.collectives_in_caller = true;
    int rc = PTC_OK;
    if (!as->stage)
        rc = ptc_ckpt_stage_create(&as->stage);
    if (rc == PTC_OK)
        rc = ptc_transport_mpi(&as->t, g->comm);
    /* every process begins, even after a failure here: the begin agrees */
    return ptc_ckpt_save_async(&as->a, &as->t, store, g->layout, g->rules, g->ranks, g->nranks,
                               rc == PTC_OK ? (const void *const *)g->bufs : NULL,
                               g->rank == 0 ? &rec : NULL, &co, rc == PTC_OK ? as->stage : NULL);
}

int train_state_finish(train_async *as, MPI_Comm comm, bool wait, uint64_t *version)
{
    *version = 0;
    if (!as->a)
        return PTC_OK;
    if (!wait) { /* the commit only where nobody would wait for writes */
        int done = ptc_ckpt_async_done(as->a), all = 0;
        PTC_MPI_TRY(ptc_mpi_allreduce(&done, &all, 1, MPI_INT, MPI_MIN, comm));
        if (!all)
            return PTC_OK;
    }
    int rc = ptc_ckpt_async_wait(as->a, version);
    as->a = NULL;
    return rc;
}

void train_state_drop(train_async *as)
{
    ptc_ckpt_async_cancel(as->a);
    ptc_ckpt_stage_destroy(as->stage);
    if (as->bg != MPI_COMM_NULL)
        MPI_Comm_free(&as->bg);
    memset(as, 0, sizeof *as);
    as->bg = MPI_COMM_NULL;
}

int train_state_load(const ptc_train_opts *o, ptc_store *store, uint64_t from, train_seg *g,
                     MPI_Comm world, ptc_plan_stats *moved)
{
    ptc_ckpt_options co;
    ptc_ckpt_options_init(&co);
    int rc = PTC_OK;
    if (g->active && o->replicas >= 0)
        rc = train_hosts_load(g->comm, store, from, g->layout, g->ranks, g->nranks, g->bufs,
                              moved);
    else if (g->active)
        rc = ptc_ckpt_load(store, from, g->layout, g->ranks, g->nranks, g->bufs, &co, g->comm,
                           NULL, NULL);
    if (rc == PTC_OK && g->gmodel)
        rc = ptc_exec_model_cuda_push_state(g->gmodel);
    return train_agree(world, rc);
}
