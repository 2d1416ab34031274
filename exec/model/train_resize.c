/* Step boundaries of a training job: what process 0 decides (a planned
 * resize, the control file's request, a stop), the word to the processes
 * that wait outside the running configuration, and the online resize that
 * moves the job's state to another configuration in memory. */
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "exec/model/train_internal.h"

#define TAG_DECISION 7002
#define CONTROL_FILE_MAX ((size_t)1 << 20)

/* ---- the decision at a step boundary -------------------------------------------------- */

/* Process 0: the control file's request, if any (the file is removed). */
static int read_control(const char *path, train_decision *d)
{
    char *txt = NULL;
    size_t len = 0;
    int rc = ptc_file_read(path, CONTROL_FILE_MAX, &txt, &len);
    if (rc == PTC_E_NOTFOUND)
        return PTC_OK; /* no request */
    PTC_TRY(rc);
    unlink(path);
    char *p = txt;
    while (*p == ' ' || *p == '\t')
        p++;
    char *end = p + strcspn(p, "\r\n");
    *end = 0;
    if (!strncmp(p, "resize ", 7)) {
        ptc_config c;
        rc = ptc_config_parse(&c, p + 7);
        if (rc == PTC_OK) {
            d->action = TRAIN_RESIZE;
            snprintf(d->reason, sizeof d->reason, "control");
            ptc_config_format(&c, PTC_CONFIG_STYLE_KEYS, d->cfg, sizeof d->cfg);
        }
    } else if (!strcmp(p, "stop")) {
        d->action = TRAIN_STOP;
        snprintf(d->reason, sizeof d->reason, "stop");
    } else {
        rc = ptc_error_set(PTC_E_INVAL, "control file %s: expected 'resize CFG' or 'stop', "
                                        "got '%.64s'", path, p);
    }
    ptc_free(txt);
    return rc;
}

void train_decide(const ptc_train_opts *o, int64_t k, int next_resize, train_decision *d)
{
    if (next_resize < o->nresize && o->resize_step[next_resize] == k) {
        d->action = TRAIN_RESIZE;
        snprintf(d->reason, sizeof d->reason, "planned");
        ptc_config_format(&o->resize_cfg[next_resize], PTC_CONFIG_STYLE_KEYS, d->cfg,
                          sizeof d->cfg);
    } else if (o->stop && *o->stop) {
        d->action = TRAIN_STOP;
        snprintf(d->reason, sizeof d->reason, "stop");
    } else if (o->control) {
        d->rc = read_control(o->control, d);
    }
}

int train_tell_waiting(MPI_Comm world, int nactive, const train_decision *d)
{
    int n;
    PTC_MPI_TRY(MPI_Comm_size(world, &n));
    for (int r = nactive; r < n; r++)
        PTC_MPI_TRY(MPI_Send(d, (int)sizeof *d, MPI_BYTE, r, TAG_DECISION, world));
    return PTC_OK;
}

/* Without spinning a core: test, then nap. */
int train_wait_word(MPI_Comm world, train_decision *d)
{
    MPI_Request rq;
    PTC_MPI_TRY(MPI_Irecv(d, (int)sizeof *d, MPI_BYTE, 0, TAG_DECISION, world, &rq));
    for (;;) {
        int done = 0;
        PTC_MPI_TRY(MPI_Test(&rq, &done, MPI_STATUS_IGNORE));
        if (done)
            return PTC_OK;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
}

/* ---- the online resize ---------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Who holds each rank of a segment's layout: the world rank of the process
 * of each chunk, and that chunk's tensor array on this process. */
typedef struct seg_owners {
    int *owner;
    void ***bufs;
} seg_owners;

static void seg_owners_free(seg_owners *o)
{
    ptc_free(o->owner);
    ptc_free(o->bufs);
    memset(o, 0, sizeof *o);
}

static int seg_owners_get(const train_seg *g, MPI_Comm world, int wrank, seg_owners *o)
{
    memset(o, 0, sizeof *o);
    int w = ptc_config_world(ptc_layout_config(g->layout));
    size_t nt = ptc_layout_count(g->layout);
    o->owner = ptc_malloc((size_t)w * sizeof *o->owner);
    o->bufs = ptc_calloc((size_t)w, sizeof *o->bufs);
    int rc = o->owner && o->bufs ? PTC_OK : PTC_E_NOMEM;
    for (int r = 0; o->owner && r < w; r++)
        o->owner[r] = -1;
    for (size_t k = 0; rc == PTC_OK && k < g->nranks; k++) {
        int r = g->ranks[k];
        if (r < 0 || r >= w)
            rc = ptc_error_set(PTC_E_INVAL, "chunk rank %d outside the layout's %d", r, w);
        else {
            o->owner[r] = wrank;
            o->bufs[r] = g->bufs + k * nt;
        }
    }
    /* every process learns the others' ranks (same code on all: collective) */
    int bad = rc != PTC_OK;
    int mrc = MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, world);
    if (mrc != MPI_SUCCESS)
        bad = 1, rc = rc != PTC_OK ? rc : ptc_mpi_error(mrc, "MPI_Allreduce of the owners");
    if (!bad && (mrc = MPI_Allreduce(MPI_IN_PLACE, o->owner, w, MPI_INT, MPI_MAX, world)) !=
                    MPI_SUCCESS)
        rc = ptc_mpi_error(mrc, "MPI_Allreduce of the owners");
    else if (bad && rc == PTC_OK)
        rc = ptc_error_set(PTC_E_INVAL, "the layout ranks failed on another process");
    for (int r = 0; rc == PTC_OK && r < w; r++)
        if (o->owner[r] < 0)
            rc = ptc_error_set(PTC_E_INVAL, "layout rank %d is held by no process", r);
    if (rc != PTC_OK)
        seg_owners_free(o);
    return rc;
}

/* The options of the new configuration @p to: the data continue at the next
 * unseen sample (process 0's position, which every process receives), the
 * schedule is made for it. Collective over @p world. */
static int next_opts(const ptc_train_opts *jo, const train_seg *g, const ptc_config *to,
                     MPI_Comm world, ptc_train_opts *no, ptc_sched **ns)
{
    *no = *jo;
    no->cfg = *to;
    *ns = NULL;
    if (g->active && g->ds.kind >= DATA_DATASET) {
        no->data_epoch = g->ds.pos.epoch;
        no->data_position = g->ds.pos.start + g->ds.pos.steps * (uint64_t)g->ds.per_step;
    }
    uint64_t pos[2] = {no->data_epoch, no->data_position};
    PTC_MPI_TRY(MPI_Bcast(pos, 2, MPI_UINT64_T, 0, world));
    no->data_epoch = pos[0];
    no->data_position = pos[1];
    int rc = train_agree(world, train_make_schedule(no, ns));
    if (rc != PTC_OK) {
        ptc_sched_destroy(*ns);
        *ns = NULL;
    }
    return rc;
}

/* Move the state of @p g into @p ng by the minimal plan, in budgeted rounds;
 * each chunk of a process is a layout rank of its own. Collective. */
static int move_state(const train_seg *g, train_seg *ng, MPI_Comm world, int wrank,
                      ptc_exec_resize_stats *st)
{
    seg_owners so, no;
    int rc = seg_owners_get(g, world, wrank, &so);
    if (rc == PTC_OK)
        rc = seg_owners_get(ng, world, wrank, &no);
    else
        memset(&no, 0, sizeof no);
    rc = train_agree(world, rc);
    if (rc == PTC_OK)
        rc = ptc_exec_resize_owned(g->layout, so.owner, (const void *const *const *)so.bufs,
                                   ng->layout, no.owner, (void *const *const *)no.bufs, world,
                                   NULL, st);
    seg_owners_free(&so);
    seg_owners_free(&no);
    if (rc == PTC_OK && ng->gmodel)
        rc = ptc_exec_model_cuda_push_state(ng->gmodel);
    return train_agree(world, rc);
}

int train_resize(ptc_train_opts *jo, train_seg **gp, const ptc_config *to, ptc_store *store,
                 MPI_Comm world, int wrank, ptc_train_resize *rep)
{
    train_seg *g = *gp;
    double t0 = now_s();
    ptc_train_opts no;
    ptc_sched *ns = NULL;
    PTC_TRY(next_opts(jo, g, to, world, &no, &ns));
    /* a cuda job's state leaves the device before the new layout's model is
     * built on it: the move reads the old model's host arrays, and the
     * device never holds two models (nor the old runtime's buffers) */
    if (jo->cuda) { /* every process, active or not, agrees */
        int rc = train_agree(world, g->gmodel ? ptc_exec_model_cuda_pull_state(g->gmodel)
                                              : PTC_OK);
        if (rc != PTC_OK) {
            ptc_sched_destroy(ns);
            return rc;
        }
        ptc_exec_destroy(g->e);
        g->e = NULL;
        ptc_exec_model_cuda_release_device(g->gmodel);
    }
    /* the new segment lives on the heap: its model's data callback keeps
     * the address of its train_data, so it never moves */
    train_seg *ng = train_seg_new();
    int rc = train_agree(world, ng ? PTC_OK : PTC_E_NOMEM);
    if (rc != PTC_OK) {
        train_seg_free(ng);
        ptc_sched_destroy(ns);
        return rc;
    }
    rc = train_seg_open(ng, &no, ns, store, world, wrank, true, rc);
    if (rc != PTC_OK) {
        train_seg_free(ng);
        return rc;
    }
    double t1 = now_s();
    ptc_exec_resize_stats st;
    rc = move_state(g, ng, world, wrank, &st);
    if (rc != PTC_OK) {
        train_seg_free(ng);
        return rc;
    }
    if (rep) {
        ptc_config_format(&g->cfg, PTC_CONFIG_STYLE_KEYS, rep->from, sizeof rep->from);
        ptc_config_format(to, PTC_CONFIG_STYLE_KEYS, rep->to, sizeof rep->to);
        rep->bytes_moved = st.bytes_moved;
        rep->max_process_bytes = st.max_process_bytes;
        rep->plan_seconds = st.plan_seconds;
        rep->move_seconds = st.move_seconds;
        rep->rebuild_seconds = t1 - t0;
    }
    train_seg_free(g);
    *gp = ng;
    *jo = no;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t rss = (uint64_t)ru.ru_maxrss * 1024, mx = rss;
    MPI_Reduce(&rss, &mx, 1, MPI_UINT64_T, MPI_MAX, 0, world);
    if (rep)
        rep->peak_rss_bytes = mx;
    return PTC_OK;
}
