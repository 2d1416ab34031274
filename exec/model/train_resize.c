/* Step boundaries of a training job: what process 0 decides (a planned
 * resize, the control file's request, a stop), the word to the processes
 * that wait outside the running configuration, and the online resize that
 * moves the job's state to another configuration in memory. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "exec/model/train_internal.h"

#define TAG_DECISION 7002
/* A request is one short line ("resize " and a configuration's text). */
#define CONTROL_FILE_MAX 4096

/* ---- the decision at a step boundary -------------------------------------------------- */

int train_check_resize(const ptc_train_opts *o, const ptc_config *to, int wsize,
                       const char *hosts)
{
    char txt[256];
    ptc_config_format(to, PTC_CONFIG_STYLE_KEYS, txt, sizeof txt);
    int w = ptc_config_world(to);
    if (w > wsize)
        return ptc_error_set(PTC_E_CONFIG, "resize to %s needs %d processes, the job has %d",
                             txt, w, wsize);
    if (hosts && o->replicas >= 0) { /* each host's part needs K other hosts for its copies */
        char names[512];
        int n = train_hosts_count(hosts, w, names, sizeof names);
        if (o->replicas >= n)
            return ptc_error_set(PTC_E_CONFIG, "resize to %s: its %d process%s run%s on %d "
                                 "host%s (%s), and --replicas %d needs %d or more",
                                 txt, w, w == 1 ? "" : "es", w == 1 ? "s" : "", n,
                                 n == 1 ? "" : "s", names, o->replicas, o->replicas + 1);
    }
    if (o->cuda && (to->tp > 1 || to->zero))
        return ptc_error_set(PTC_E_UNSUPPORTED, "resize to %s: the cuda model runs tp=1 and "
                                                "zero=0", txt);
    /* what train_resize builds for it, alone: the schedule, the model's
     * stages, the layout of the state */
    ptc_train_opts no = *o;
    no.cfg = *to;
    ptc_sched *s = NULL;
    int rc = train_make_schedule(&no, &s);
    if (rc == PTC_OK && to->zero && ptc_sched_pipes(s) == 2 && ptc_sched_ranks(s) % 2)
        rc = ptc_error_set(PTC_E_CONFIG, "zero=1 with a two-pipe schedule needs an even number "
                                         "of pipeline ranks");
    if (rc == PTC_OK) {
        ptc_config pc;
        ptc_config_init(&pc);
        pc.pp = ptc_sched_stages(s);
        pc.nlayers = to->nlayers;
        memcpy(pc.layers, to->layers, sizeof pc.layers);
        rc = ptc_config_check_layers(&pc, o->model.layers);
    }
    ptc_layout *l = NULL;
    ptc_rules *r = NULL;
    if (rc == PTC_OK)
        rc = train_ckpt_layout(&no, s, &l, &r);
    ptc_layout_destroy(l);
    ptc_rules_destroy(r);
    ptc_sched_destroy(s);
    if (rc != PTC_OK && !strstr(ptc_last_error(), txt))
        rc = ptc_error_set(rc, "resize to %s: %s", txt, ptc_last_error());
    return rc;
}

int train_request_parse(const char *text, int *action, ptc_config *cfg)
{
    *action = TRAIN_GO;
    const char *p = text + strspn(text, " \t");
    const char *eol = p + strcspn(p, "\n"), *end = eol;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r'))
        end--;
    size_t n = (size_t)(end - p);
    char q[128];
    ptc_quote_name(q, sizeof q, p, n);
    const char *rest = eol + (*eol == '\n');
    if (rest[strspn(rest, " \t\r\n")])
        return ptc_error_set(PTC_E_INVAL, "'%s' and more lines: one request per file", q);
    if (n == 4 && !memcmp(p, "stop", 4)) {
        *action = TRAIN_STOP;
        return PTC_OK;
    }
    char line[CONTROL_FILE_MAX];
    if (n < 8 || memcmp(p, "resize ", 7) || n >= sizeof line)
        return ptc_error_set(PTC_E_INVAL, "'%s' is not a request ('resize CFG' or 'stop')", q);
    memcpy(line, p + 7, n - 7);
    line[n - 7] = 0;
    int rc = ptc_config_parse(cfg, line);
    if (rc != PTC_OK)
        return ptc_error_set(rc, "'%s': %s", q, ptc_last_error());
    *action = TRAIN_RESIZE;
    return PTC_OK;
}

/* Process 0: the request of a complete control file, if it is one the job
 * can carry out; anything else is said and ignored. */
static void take_request(const ptc_train_opts *o, int wsize, const char *hosts, const char *txt,
                         train_decision *d)
{
    int action;
    ptc_config c;
    int rc = train_request_parse(txt, &action, &c);
    if (rc == PTC_OK && action == TRAIN_RESIZE)
        rc = train_check_resize(o, &c, wsize, hosts);
    if (rc != PTC_OK) {
        ptc_log(PTC_LOG_WARN, "control file %s: %s; ignored, the job goes on", o->control,
                ptc_last_error());
        return;
    }
    d->action = action;
    snprintf(d->reason, sizeof d->reason, action == TRAIN_STOP ? "stop" : "control");
    if (action == TRAIN_RESIZE)
        ptc_config_format(&c, PTC_CONFIG_STYLE_KEYS, d->cfg, sizeof d->cfg);
}

/* Process 0: the control file's request, if any. Never blocks (a FIFO or a
 * device at the path is refused before it is opened) and never fails the
 * job: a file being written (no final newline yet) is looked at again at the
 * next boundary; one that cannot be a request (not a regular file, too
 * large, unreadable) is said once and left alone; a complete one is removed
 * once read, whether the job can carry it out or not. */
static void read_control(const ptc_train_opts *o, int wsize, const char *hosts,
                         train_control *c, train_decision *d)
{
    char *txt = NULL;
    int rc = ptc_file_read_text(o->control, CONTROL_FILE_MAX, &txt);
    if (rc == PTC_E_NOTFOUND) {
        ptc_log_changed(c->said, sizeof c->said, PTC_LOG_WARN, NULL);
        return;
    }
    if (rc == PTC_E_BUSY || rc == PTC_E_IO || rc == PTC_E_RANGE || rc == PTC_E_NOMEM) {
        char msg[sizeof c->said];
        snprintf(msg, sizeof msg, "control file %s; %s", ptc_last_error(),
                 rc == PTC_E_BUSY ? "looked at again at the next step (write a request as "
                                    "a line, by rename: docs/runtime.md)"
                                  : "ignored, the job goes on");
        ptc_log_changed(c->said, sizeof c->said, PTC_LOG_WARN, msg);
        return;
    }
    /* taken: the writer may write the next one. A file the job cannot
     * remove would be taken again at every step: its requests are refused */
    if (unlink(o->control) != 0 && errno != ENOENT) {
        char msg[sizeof c->said];
        snprintf(msg, sizeof msg, "control file %s: cannot remove it once read (%s); its "
                 "requests are ignored, the job goes on", o->control, strerror(errno));
        ptc_log_changed(c->said, sizeof c->said, PTC_LOG_WARN, msg);
        ptc_free(txt);
        return;
    }
    ptc_log_changed(c->said, sizeof c->said, PTC_LOG_WARN, NULL);
    if (rc == PTC_OK)
        take_request(o, wsize, hosts, txt, d);
    else
        ptc_log(PTC_LOG_WARN, "control file %s; ignored, the job goes on", ptc_last_error());
    ptc_free(txt);
}

void train_decide(const ptc_train_opts *o, int wsize, const char *hosts, int64_t k,
                  int next_resize, train_control *c, train_decision *d)
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
        read_control(o, wsize, hosts, c, d);
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
    int mrc = ptc_mpi_allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, world);
    if (mrc != MPI_SUCCESS)
        bad = 1, rc = rc != PTC_OK ? rc : ptc_mpi_error(mrc, "MPI_Allreduce of the owners");
    if (!bad && (mrc = ptc_mpi_allreduce(MPI_IN_PLACE, o->owner, w, MPI_INT, MPI_MAX, world)) !=
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
    PTC_MPI_TRY(ptc_mpi_bcast(pos, 2, MPI_UINT64_T, 0, world));
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
    ptc_mpi_reduce(&rss, &mx, 1, MPI_UINT64_T, MPI_MAX, 0, world);
    if (rep)
        rep->peak_rss_bytes = mx;
    return PTC_OK;
}
