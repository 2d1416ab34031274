/* The elastic supervisor (include/ptc/elastic.h, docs/elastic.md): keeps a
 * `ptc train` job running under mpirun on the slots that are available,
 * restarting it from the newest committed version after a failure and
 * relaunching it under a new configuration when the slots change. It reads
 * the job's output lines (steps, resume and stop reports, mpirun's notice
 * of a dead process), watches the slots file and the hostfile, and asks the
 * job to stop (or to resize) through its --control file. It talks no MPI:
 * it starts mpirun (elastic_launch.c). Printing is the caller's. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ptc/ckpt.h"
#include "ptc/elastic.h"
#include "ptc/store.h"
#include "exec/model/elastic_internal.h"
#include "base/buf_internal.h"
#include "base/util_internal.h"

#define MAX_HOSTS ELASTIC_MAX_HOSTS
#define MAX_ARGS 256
/* how long a host has to run a probe after a launch failed (probe_lost) */
#define PROBE_TIMEOUT_S 10.0

typedef struct host {
    char name[256];
    int slots;  /* as the inputs say */
    int failed; /* slots dropped after failures */
} host;
_Static_assert(sizeof ((host *)0)->name == sizeof ((ptc_elastic_host *)0)->name, "host names");

/* What one launch of the job showed on its output. */
typedef struct launch {
    pid_t pid;
    int out_fd, err_fd;
    elastic_lines out, err;
    double t_launch, t_last_step, t_first_err, t_stop_asked, t_exit;
    int64_t last_step;       /* the last `step K` seen (-1: none) */
    int64_t first_step;      /* the first one */
    double first_step_ms;
    double load_ms;          /* `resumed from ... load X ms` */
    bool stopped;            /* `stopped at step K (...), saved version V` */
    uint64_t stop_version;
    int64_t stop_step;
    /* node-local stores: what the job says of the versions it resumed and saved */
    bool resumed;            /* `resumed from version V at step S, ...` */
    uint64_t resumed_version;
    int64_t resumed_step;
    bool saved;              /* its last save: `saved version V (step S)` */
    uint64_t saved_version;
    int64_t saved_step;
    char dead_node[256];     /* mpirun's notice of a dead process */
    bool host_lost;          /* ... of a lost host (its daemon) */
    char first_error[512];   /* the first `ptc: error:` line */
    bool stop_requested, killed;
    bool resize_asked;       /* online: `resize CFG` written, its report awaited */
    bool resize_refused;     /* ... and the job said it ignores it */
    char kill_reason[128];
} launch;

/* A reconfiguration waiting for the new job's first step (its downtime). */
typedef struct pending {
    bool active;
    char reason[32], from[128], to[128];
    int64_t at_step, resumed_step, steps_lost;
    uint64_t version;
    int slots;
    double t_start, detect, save, plan, t_launch;
    bool from_persist;       /* node-local stores: the launch resumes from --persist */
} pending;

struct ptc_elastic {
    ptc_elastic_opts o;
    host hosts[MAX_HOSTS];
    int nhosts;
    char inputs[16384];                  /* the watched inputs' text, to see changes */
    char dir[PATH_MAX], ctl[PATH_MAX + 16], hf[PATH_MAX + 16];
    int failures, reconfigs;
    /* the running job's processes: how many on each host, in rank order */
    struct {
        char name[256];
        int n;
    } run[MAX_HOSTS];
    int nrun;
    pending pend;                        /* a restart awaiting the new job's first step */
    pending opend;                       /* an in-memory resize awaiting its report */
    launch l;                            /* the running job */
    ptc_config cfg;                      /* its configuration */
    int usable[MAX_HOSTS];               /* its slots per host */
    int nslots;
    char scale_reason[32];               /* why the running job was asked to stop */
    char said[512];                      /* the inputs' last problem, said once */
    /* node-local stores (o.replicas >= 0): the controller reads no store */
    uint64_t known_version;              /* the newest version the job reported */
    int64_t known_step;                  /* ... and its step */
    bool from_persist;                   /* the next launch resumes from o.persist */
};

static bool node_local(const ptc_elastic *e)
{
    return e->o.replicas >= 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void cfg_text(const ptc_config *c, char *buf, size_t n)
{
    ptc_config_format(c, PTC_CONFIG_STYLE_KEYS, buf, n);
}

static bool stop_asked(const ptc_elastic *e)
{
    return e->o.stop && *e->o.stop;
}

/* ---- the watched inputs ------------------------------------------------------- */

/* The inputs are files another program edits while the job runs: read
 * without ever blocking (a FIFO or a device is refused, not opened), whole
 * and bounded, and only once complete (a final newline); a problem while
 * the job runs is said once and the job goes on as it is. */
#define SLOTS_FILE_MAX 255
#define HOSTFILE_MAX 8191

/* Parse the inputs into hosts; @p text receives what they said (to see a
 * change). PTC_E_INVAL or PTC_E_CONFIG name the problem; PTC_E_BUSY: an
 * input is being written. */
static int parse_inputs(const ptc_elastic *e, host *hs, int *nh, char *text, size_t textcap)
{
    char sbuf[SLOTS_FILE_MAX + 1] = "", hbuf[HOSTFILE_MAX + 1] = "";
    int total = -1;
    *nh = 0;
    PTC_TRY(elastic_read_slots(&e->o, sbuf, sizeof sbuf, &total));
    char src[PATH_MAX + 32] = "--slots";
    if (e->o.slots_file)
        snprintf(src, sizeof src, "the slots file %s", e->o.slots_file);
    if (e->o.max_slots > 0 && total > e->o.max_slots)
        return ptc_error_set(PTC_E_CONFIG, "%s gives %d slots, more than --max-slots %d", src,
                             total, e->o.max_slots);
    if (e->o.hostfile) {
        PTC_TRY(elastic_read_input("hostfile", e->o.hostfile, hbuf, sizeof hbuf));
        static ptc_elastic_host ph[MAX_HOSTS];
        size_t np = 0;
        if (ptc_elastic_hostfile_parse(hbuf, ph, MAX_HOSTS, &np) != PTC_OK)
            return ptc_error_set(PTC_E_INVAL, "%s: %s", e->o.hostfile, ptc_last_error());
        int64_t cap = 0;
        for (size_t i = 0; i < np; i++) {
            memcpy(hs[i].name, ph[i].name, sizeof hs[i].name);
            hs[i].slots = ph[i].slots;
            hs[i].failed = 0;
            cap += ph[i].slots;
        }
        int most = e->o.max_slots > 0 ? e->o.max_slots : PTC_CONFIG_MAX_WORLD;
        if (cap > most && (total < 0 || total > most))
            return ptc_error_set(PTC_E_CONFIG, "the hostfile %s gives %lld slots, more than %s "
                                 "%d", e->o.hostfile, (long long)cap,
                                 e->o.max_slots > 0 ? "--max-slots" : "a job's most", most);
        *nh = (int)np;
        /* the slots cap the hostfile's capacity, taken from the hosts in order */
        for (int i = 0; total >= 0 && i < *nh; i++) {
            if (hs[i].slots > total)
                hs[i].slots = total;
            total -= hs[i].slots;
        }
    } else {
        int most = elastic_local_max_slots(&e->o);
        if (total > most)
            return ptc_error_set(PTC_E_CONFIG, "%s gives %d slots, more than this host runs: at "
                                 "most %d (%s; give --hostfile for several hosts)", src, total,
                                 most, e->o.max_slots > 0 ? "--max-slots"
                                                          : "8 per CPU and at least 64, or "
                                                            "--max-slots");
        snprintf(hs[0].name, sizeof hs[0].name, "localhost");
        hs[0].slots = total;
        hs[0].failed = 0;
        *nh = 1;
    }
    snprintf(text, textcap, "%s\n--\n%s", sbuf, hbuf);
    return PTC_OK;
}

/* Free slots per host after failures; returns the total. */
static int free_slots(const ptc_elastic *e, int *slots)
{
    int total = 0;
    for (int i = 0; i < e->nhosts; i++) {
        int s = e->hosts[i].slots - e->hosts[i].failed;
        slots[i] = s > 0 ? s : 0;
        total += slots[i];
    }
    return total;
}

/* With --replicas K the ranks must run on more than K hosts (a host never
 * holds a copy of its own shards): no configuration that does not. */
static int replicas_fit(const ptc_elastic *e, const ptc_config *cfg, const int *usable)
{
    const char *names[MAX_HOSTS];
    char ct[128];
    for (int i = 0; i < e->nhosts; i++)
        names[i] = e->hosts[i].name;
    cfg_text(cfg, ct, sizeof ct);
    return node_local(e) ? elastic_replicas_fit(usable, names, e->nhosts, ct,
                                                ptc_config_world(cfg), e->o.replicas)
                         : PTC_OK;
}

/* Pick the configuration for the free slots. usable: per host. */
static int plan(const ptc_elastic *e, ptc_config *cfg, int *usable, int *nslots)
{
    int slots[MAX_HOSTS];
    int total = free_slots(e, slots);
    *nslots = total;
    if (total < e->o.min_slots)
        return ptc_error_set(PTC_E_CONFIG, "%d slots available, --min-slots is %d", total,
                             e->o.min_slots);
    if (e->o.search)
        PTC_TRY(ptc_elastic_search(cfg, usable, slots, (size_t)e->nhosts, &e->o.want,
                                   &e->o.cluster, NULL));
    else
        PTC_TRY(ptc_elastic_pick(cfg, usable, slots, (size_t)e->nhosts, &e->o.want));
    return replicas_fit(e, cfg, usable);
}

/* ---- the store ------------------------------------------------------------------- */

/* The newest version and its step (0, 0: none). */
static int newest(const ptc_elastic *e, uint64_t *version, int64_t *step)
{
    ptc_store *s = NULL;
    *version = 0;
    *step = 0;
    if (node_local(e)) { /* the hosts' stores: what the job reported */
        *version = e->known_version;
        *step = e->known_step;
        return PTC_OK;
    }
    /* an empty directory: the job's first save makes the store there */
    char meta[PATH_MAX + 8];
    snprintf(meta, sizeof meta, "%s/meta", e->o.store);
    if (access(meta, F_OK) != 0 && errno == ENOENT)
        return PTC_OK;
    int rc = ptc_store_open(&s, e->o.store, PTC_STORE_READONLY);
    if (rc == PTC_OK)
        rc = ptc_store_latest(s, version);
    if (rc == PTC_OK && *version) {
        ptc_ckpt_record rec;
        memset(&rec, 0, sizeof rec);
        rc = ptc_ckpt_read_record(s, *version, &rec);
        if (rc == PTC_OK)
            *step = (int64_t)rec.step;
        ptc_ckpt_record_free(&rec);
    }
    ptc_store_close(s);
    return rc;
}

/* ---- events ----------------------------------------------------------------------- */

static void emit(const ptc_elastic *e, ptc_elastic_event *ev)
{
    ev->total_steps = e->o.total_steps;
    if (e->o.on_event)
        e->o.on_event(ev, e->o.user);
}

/* One reconfiguration: the restart path names the version it resumed from
 * and loads it; the online path moves the state in memory. The parts add up
 * to the downtime. */
static void emit_reconfig(const ptc_elastic *e, const pending *p, bool online, double save,
                          double plan_s, double move, double load, double restart)
{
    ptc_elastic_event ev = {.kind = PTC_ELASTIC_RECONFIGURE, .slots = p->slots,
                            .version = online ? 0 : p->version, .step = p->at_step,
                            .online = online, .resumed_step = p->resumed_step,
                            .steps_lost = p->steps_lost, .detect = p->detect, .save = save,
                            .plan = plan_s, .move = move, .load = load, .restart = restart};
    ev.downtime = p->detect + save + plan_s + move + load + restart;
    snprintf(ev.config, sizeof ev.config, "%s", p->to);
    snprintf(ev.from, sizeof ev.from, "%s", p->from);
    snprintf(ev.reason, sizeof ev.reason, "%s", p->reason);
    ev.from_persist = p->from_persist;
    ev.persist = p->from_persist ? e->o.persist : NULL;
    emit(e, &ev);
}

/* A restart took effect: the new job made its first step at @p t_end (or
 * ended before). */
static void emit_pending(ptc_elastic *e, pending *p, const launch *l, double t_end)
{
    if (!p->active)
        return;
    p->active = false;
    if (node_local(e)) { /* the version is the one the new job says it resumed */
        p->version = l->resumed ? l->resumed_version : 0;
        p->resumed_step = l->resumed ? l->resumed_step : l->first_step >= 0 ? l->first_step : 0;
        p->steps_lost = p->at_step > p->resumed_step ? p->at_step - p->resumed_step : 0;
    }
    double load = l->load_ms / 1e3;
    double restart = t_end - p->t_launch - load;
    if (l->last_step >= 0)
        restart -= l->first_step_ms / 1e3;
    if (restart < 0)
        restart = 0;
    emit_reconfig(e, p, false, p->save, p->plan, 0, load, restart);
}

/* An in-memory resize, from the job's `resize at step K (control): ...` line. */
static void emit_online(ptc_elastic *e, pending *p, int64_t step, double plan_s, double move,
                        double rebuild)
{
    if (!p->active)
        return;
    p->active = false;
    e->reconfigs++;
    p->at_step = p->resumed_step = step;
    p->steps_lost = 0;
    emit_reconfig(e, p, true, 0, plan_s, move, 0, rebuild);
}

/* ---- the job's output --------------------------------------------------------------- */

static void on_out_line(void *ctx, char *line)
{
    ptc_elastic *e = ctx;
    launch *l = &e->l;
    if (e->o.on_output)
        e->o.on_output(line, false, e->o.user);
    long long k;
    double ms, pl, mv, rb;
    unsigned long long v;
    if (sscanf(line, "step %lld loss %*s time %lf ms", &k, &ms) == 2 ||
        sscanf(line, "step %lld time %lf ms", &k, &ms) == 2) {
        double t = now();
        if (l->last_step < 0) {
            l->first_step = k;
            l->first_step_ms = ms;
            emit_pending(e, &e->pend, l, t);
            e->from_persist = false; /* it saves into the hosts' stores from now on */
        }
        l->last_step = k;
        l->t_last_step = t;
        l->t_first_err = 0;
    } else if (sscanf(line, "resumed from version %llu at step %lld, load %lf ms", &v, &k,
                      &ms) == 3) {
        l->load_ms = ms;
        l->resumed = true;
        l->resumed_version = v;
        l->resumed_step = k;
        if (node_local(e)) {
            e->known_version = v;
            e->known_step = k;
        }
    } else if (sscanf(line, "saved version %llu (step %lld)", &v, &k) == 2) {
        l->saved = true;
        l->saved_version = v;
        l->saved_step = k;
    } else if (l->resize_asked && sscanf(line, "resize at step %lld (control): %*s -> %*s "
                                             "plan %lf ms, move %lf ms, rebuild %lf ms",
                                             &k, &pl, &mv, &rb) == 4) {
        l->resize_asked = false;
        emit_online(e, &e->opend, k, pl / 1e3, mv / 1e3, rb / 1e3);
    } else if (!strncmp(line, "stopped at step ", 16)) {
        l->stopped = true;
        const char *sv = strstr(line, "saved version ");
        l->stop_version = sv ? strtoull(sv + 14, NULL, 10) : 0;
        l->stop_step = strtoll(line + 16, NULL, 10);
    }
}

static void on_err_line(void *ctx, char *line)
{
    ptc_elastic *e = ctx;
    launch *l = &e->l;
    if (e->o.on_output)
        e->o.on_output(line, true, e->o.user);
    /* the job's warnings are no failure: a control request it ignores says
     * so (`ptc: warning: control file ...; ignored, the job goes on`) */
    bool warning = !strncmp(line, "ptc: warning: ", 14);
    if (warning && l->resize_asked && strstr(line, " control file ") && strstr(line, "ignored"))
        l->resize_refused = true;
    if (!l->t_first_err && line[0] && line[0] != '-' && !warning)
        l->t_first_err = now();
    if (!l->first_error[0] && !strncmp(line, "ptc: error: ", 12))
        snprintf(l->first_error, sizeof l->first_error, "%s", line + 12);
    /* Open MPI: "mpirun noticed that process rank R with PID P on node N exited on
     * signal S" (or "... exited"); a lost host: "... Remote daemon: [[..]] on node N" */
    const char *p = strstr(line, "noticed that process rank");
    bool daemon = false;
    if (!p)
        daemon = (p = strstr(line, "Remote daemon:")) != NULL;
    if (p && !l->dead_node[0]) {
        const char *n = strstr(p, " on node ");
        if (n && sscanf(n + 9, "%255[^ ,\n]", l->dead_node) == 1)
            l->host_lost = daemon;
    }
}

/* ---- launching ---------------------------------------------------------------------- */

/* online: can the running processes take configuration @p next on the
 * hosts' usable slots @p nu? Its ranks must be running already, each on the
 * host the new hostfile would put it on (ranks 0..W-1 of the launch). */
static bool online_fits(const ptc_elastic *e, const ptc_config *next, const int *nu)
{
    int W = ptc_config_world(next), h[MAX_HOSTS], c[MAX_HOSTS];
    int n = elastic_placement(nu, e->nhosts, W, h, c), left = W, k = 0;
    for (int i = 0; i < e->nrun && left > 0; i++) {
        int take = e->run[i].n < left ? e->run[i].n : left;
        if (k >= n || c[k] != take || strcmp(e->hosts[h[k]].name, e->run[i].name))
            return false;
        k++;
        left -= take;
    }
    return left == 0 && k == n;
}

/* The hostfile of the slots in use; where the ranks will run. */
static int write_hostfile(ptc_elastic *e)
{
    int h[MAX_HOSTS], c[MAX_HOSTS];
    e->nrun = elastic_placement(e->usable, e->nhosts, ptc_config_world(&e->cfg), h, c);
    for (int i = 0; i < e->nrun; i++) {
        snprintf(e->run[i].name, sizeof e->run[i].name, "%s", e->hosts[h[i]].name);
        e->run[i].n = c[i];
    }
    ptc_buf hf = {0};
    ptc_buf_puts(&hf, ""); /* no hosts: an empty file */
    for (int i = 0; i < e->nhosts; i++)
        if (e->usable[i] > 0)
            ptc_buf_printf(&hf, "%s slots=%d\n", e->hosts[i].name, e->usable[i]);
    int rc = hf.err ? hf.err : elastic_write_file(e->hf, hf.s);
    ptc_buf_free(&hf);
    return rc;
}

/* Launch the job for @p steps more steps on e->cfg and e->usable. */
static int start_job(ptc_elastic *e, int64_t steps, bool resume)
{
    PTC_TRY(write_hostfile(e));
    unlink(e->ctl);
    char cfgs[128], np[32], st[32], to[32];
    cfg_text(&e->cfg, cfgs, sizeof cfgs);
    snprintf(np, sizeof np, "%d", ptc_config_world(&e->cfg));
    /* node-local stores: the job learns its version from the hosts, so it
     * is given the total and resumes whatever they hold */
    snprintf(st, sizeof st, "%lld", (long long)(node_local(e) ? e->o.total_steps : steps));
    snprintf(to, sizeof to, "%g", e->o.watchdog);
    const char *argv[MAX_ARGS + 32];
    int n = 0;
    argv[n++] = e->o.mpirun;
    if (geteuid() == 0)
        argv[n++] = "--allow-run-as-root";
    argv[n++] = "--bind-to";
    argv[n++] = "none";
    argv[n++] = "--hostfile";
    argv[n++] = e->hf;
    argv[n++] = "-np";
    argv[n++] = np;
    argv[n++] = e->o.prog;
    argv[n++] = "train";
    for (int i = 0; i < e->o.ntrain_args; i++)
        argv[n++] = e->o.train_args[i];
    const char *tail[] = {"--config", cfgs, "--store", e->o.store,
                          node_local(e) ? "--until-step" : "--steps", st, "--control", e->ctl};
    for (size_t i = 0; i < PTC_ARRAY_LEN(tail); i++)
        argv[n++] = tail[i];
    if (!e->o.train_timeout) {
        argv[n++] = "--timeout";
        argv[n++] = to;
    }
    if (node_local(e) && e->from_persist) {
        argv[n++] = "--resume-from";
        argv[n++] = e->o.persist;
    } else if (node_local(e)) {
        argv[n++] = "--resume";
        argv[n++] = "--resume-any";
    } else if (resume) {
        argv[n++] = "--resume";
    }
    argv[n] = NULL;
    launch *l = &e->l;
    memset(l, 0, sizeof *l);
    PTC_TRY(elastic_spawn(argv, &l->pid, &l->out_fd, &l->err_fd));
    l->t_launch = now();
    l->t_last_step = l->t_launch;
    l->last_step = -1;
    l->first_step = -1;
    return PTC_OK;
}

static void kill_job(launch *l, const char *why)
{
    if (l->killed)
        return;
    l->killed = true;
    snprintf(l->kill_reason, sizeof l->kill_reason, "%s", why);
    kill(-l->pid, SIGTERM);
}

/* Ask the job to stop at its next step boundary (it saves). */
static void ask_stop(ptc_elastic *e, double t, double *t_kill)
{
    e->l.stop_requested = true;
    e->l.t_stop_asked = t;
    if (elastic_write_file(e->ctl, "stop\n") != PTC_OK) {
        *t_kill = t;
        kill_job(&e->l, "cannot write the control file");
    }
}

/* ---- a change of the watched inputs ------------------------------------------------ */

/* The newest modification time of the watched inputs (0: unknown). */
static double inputs_mtime(const ptc_elastic *e)
{
    double mt = 0;
    struct stat sb;
    if (e->o.slots_file && stat(e->o.slots_file, &sb) == 0)
        mt = (double)sb.st_mtim.tv_sec + (double)sb.st_mtim.tv_nsec * 1e-9;
    if (e->o.hostfile && stat(e->o.hostfile, &sb) == 0) {
        double m2 = (double)sb.st_mtim.tv_sec + (double)sb.st_mtim.tv_nsec * 1e-9;
        mt = m2 > mt ? m2 : mt;
    }
    return mt;
}

/* Look at the inputs while the job runs (not while a resize or a stop is on
 * its way): a change that moves the configuration resizes the job in memory
 * (online, when its processes can take it) or asks it to stop, to be
 * relaunched. */
static void watch_inputs(ptc_elastic *e, double t, double *t_kill)
{
    host hs[MAX_HOSTS];
    int nh;
    char text[sizeof e->inputs];
    int rc = parse_inputs(e, hs, &nh, text, sizeof text);
    if (rc == PTC_E_BUSY)
        return; /* being written: look again */
    if (rc != PTC_OK) {
        char msg[sizeof e->said];
        snprintf(msg, sizeof msg, "%s; ignored, the job goes on as it is", ptc_last_error());
        ptc_log_changed(e->said, sizeof e->said, PTC_LOG_WARN, msg);
        return;
    }
    ptc_log_changed(e->said, sizeof e->said, PTC_LOG_WARN, NULL);
    if (!strcmp(text, e->inputs))
        return; /* unchanged */
    int old_total = 0, new_total = 0;
    for (int i = 0; i < e->nhosts; i++)
        old_total += e->hosts[i].slots - e->hosts[i].failed;
    for (int i = 0; i < nh; i++)
        new_total += hs[i].slots;
    memcpy(e->hosts, hs, sizeof hs[0] * (size_t)nh);
    e->nhosts = nh;
    snprintf(e->inputs, sizeof e->inputs, "%s", text);
    ptc_config next;
    int nu[MAX_HOSTS], ns;
    int prc = plan(e, &next, nu, &ns);
    if (prc == PTC_OK && ptc_config_equal(&next, &e->cfg) &&
        !memcmp(nu, e->usable, sizeof nu[0] * (size_t)nh))
        return;
    /* when the mtime of the changed input is the event, detect is our lag */
    double mt = inputs_mtime(e);
    snprintf(e->scale_reason, sizeof e->scale_reason, "%s",
             new_total > old_total   ? "scale-out"
             : new_total < old_total ? "scale-in"
                                     : "hosts-changed");
    if (e->o.online && prc == PTC_OK && online_fits(e, &next, nu)) {
        /* the processes are there: resize in memory at the next step */
        char ns_text[128], req[160];
        cfg_text(&next, ns_text, sizeof ns_text);
        snprintf(req, sizeof req, "resize %s\n", ns_text);
        pending op = {.active = true, .slots = ns, .t_start = t};
        snprintf(op.reason, sizeof op.reason, "%s", e->scale_reason);
        cfg_text(&e->cfg, op.from, sizeof op.from);
        snprintf(op.to, sizeof op.to, "%s", ns_text);
        op.detect = mt > 0 && t > mt ? t - mt : 0;
        if (elastic_write_file(e->ctl, req) != PTC_OK) {
            *t_kill = t;
            kill_job(&e->l, "cannot write the control file");
            return;
        }
        e->opend = op;
        e->l.resize_asked = true;
        e->cfg = next;
        memcpy(e->usable, nu, sizeof nu[0] * (size_t)nh);
        return;
    }
    e->pend.detect = mt > 0 && t > mt ? t - mt : 0;
    ask_stop(e, t, t_kill);
}

/* ---- one launch, until it ends ------------------------------------------------------- */

/* Follow the running job: relay and read its output, reap it, and act on
 * the watchdog, a stop request and the inputs. Returns its wait status. */
static int follow_job(ptc_elastic *e, bool *by_signal)
{
    launch *l = &e->l;
    bool out_open = true, err_open = true, exited = false;
    int status = 0;
    double t_kill = 0;
    while (out_open || err_open || !exited) {
        struct pollfd pf[2];
        int n = 0;
        if (out_open)
            pf[n++] = (struct pollfd){.fd = l->out_fd, .events = POLLIN};
        if (err_open)
            pf[n++] = (struct pollfd){.fd = l->err_fd, .events = POLLIN};
        poll(pf, (nfds_t)n, n ? 100 : 2); /* no pipe open: mpirun is exiting, reap it soon */
        for (int i = 0; i < n; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            bool is_out = pf[i].fd == l->out_fd;
            if (elastic_lines_drain(pf[i].fd, is_out ? &l->out : &l->err,
                                    is_out ? on_out_line : on_err_line, e))
                continue;
            close(pf[i].fd);
            *(is_out ? &out_open : &err_open) = false;
        }
        double t = now();
        if (!exited && waitpid(l->pid, &status, WNOHANG) == l->pid) {
            exited = true;
            l->t_exit = t;
        }
        if (exited) {
            /* ranks left behind could hold the pipes open: do not wait for them long */
            if (t - l->t_exit > 5) {
                kill(-l->pid, SIGKILL);
                if (out_open)
                    close(l->out_fd);
                if (err_open)
                    close(l->err_fd);
                out_open = err_open = false;
            }
            continue;
        }
        if (l->killed) {
            if (t - t_kill > 5)
                kill(-l->pid, SIGKILL);
            continue;
        }
        /* the watchdog */
        if (l->stop_requested && t - l->t_stop_asked > e->o.watchdog) {
            t_kill = t;
            kill_job(l, "did not stop when asked");
        } else if (!l->stop_requested && t - l->t_last_step > e->o.watchdog) {
            t_kill = t;
            char why[128];
            snprintf(why, sizeof why, "made no step for %g s", e->o.watchdog);
            kill_job(l, why);
        } else if (stop_asked(e) && !l->stop_requested) {
            *by_signal = true;
            l->stop_requested = true;
            l->t_stop_asked = t;
            elastic_write_file(e->ctl, "stop\n");
        } else if (l->resize_refused && !l->stop_requested) {
            /* the running processes cannot take it: the restart path */
            l->resize_asked = l->resize_refused = false;
            e->opend.active = false;
            ptc_config_parse(&e->cfg, e->opend.from); /* still running it */
            e->pend.detect = e->opend.detect;
            ask_stop(e, t, &t_kill);
        } else if (!l->stop_requested && !l->resize_asked) {
            watch_inputs(e, t, &t_kill);
        }
    }
    return status;
}

/* ---- what comes after a launch ended --------------------------------------------------- */

/* A launch that failed before its first step naming no process: did a host
 * go? mpirun starts a daemon on every host of the hostfile, and one that
 * cannot call back fails the launch unnamed (a host cut off the network is
 * not always named before the job ends either). Probes those hosts and
 * drops every slot of each that cannot run a process (unless none can: then
 * the launcher or the program is at fault); how many were dropped. */
static int probe_lost(ptc_elastic *e, double *took)
{
    double t0 = now();
    const char *names[MAX_HOSTS];
    bool up[MAX_HOSTS];
    int at[MAX_HOSTS], n = 0, lost = 0;
    for (int h = 0; h < e->nhosts; h++)
        if (e->usable[h] > 0) {
            at[n] = h;
            names[n++] = e->hosts[h].name;
        }
    if (e->nhosts < 2 || elastic_probe(e->o.mpirun, e->o.prog, e->dir, names, n,
                                       PROBE_TIMEOUT_S, up) != PTC_OK)
        return 0;
    *took = now() - t0;
    for (int i = 0; i < n; i++)
        lost += !up[i];
    if (lost == n) /* no host runs anything: the launcher or the program, not the hosts */
        return 0;
    for (int i = 0; i < n; i++)
        if (!up[i]) {
            e->hosts[at[i]].failed = e->hosts[at[i]].slots;
            char line[400];
            snprintf(line, sizeof line, "ptc: warning: elastic: host %s cannot run a process "
                     "(probed after the launch failed): its slots are dropped", names[i]);
            if (e->o.on_output)
                e->o.on_output(line, true, e->o.user);
        }
    return lost;
}

/* A failure: drop the dead process's slot (its host's, by name), count it,
 * and fill the reconfiguration's reason and detection. PTC_OK to restart. */
static int after_failure(ptc_elastic *e, int status, double t_end, pending *np)
{
    launch *l = &e->l;
    double probe = 0;
    e->failures++;
    const char *diag = l->killed ? l->kill_reason
                       : l->first_error[0] ? l->first_error
                       : WIFSIGNALED(status) ? "mpirun was killed by a signal"
                                             : "a process of the job failed";
    if (l->dead_node[0]) {
        int h = -1;
        for (int i = 0; i < e->nhosts; i++)
            if (!strcmp(e->hosts[i].name, l->dead_node))
                h = i;
        if (h < 0 && e->nhosts == 1)
            h = 0; /* mpirun names the host by its own name, not "localhost" */
        if (h >= 0) /* a lost host loses all its slots, a dead process one */
            e->hosts[h].failed = l->host_lost ? e->hosts[h].slots : e->hosts[h].failed + 1;
    } else if (l->last_step < 0 && !l->killed && !probe_lost(e, &probe)) {
        /* failed alike before any step, no process died, every host answers:
         * a bad job, not a fault */
        return ptc_error_set(PTC_E_IO, "the job failed before its first step: %s", diag);
    }
    if (e->failures > e->o.max_restarts)
        return ptc_error_set(PTC_E_IO, "giving up after %d failures (--max-restarts %d); the "
                                       "last: %s", e->failures, e->o.max_restarts, diag);
    snprintf(np->reason, sizeof np->reason, "%s", "failure");
    double t0 = l->t_first_err && l->t_first_err < t_end ? l->t_first_err : t_end;
    if (l->killed)
        t0 = l->t_last_step; /* the watchdog's wait is the detection */
    np->detect = t_end - t0 + probe;
    if (l->stop_requested && l->t_stop_asked < t0)
        np->save = t0 - l->t_stop_asked;
    return PTC_OK;
}

/* Node-local stores: the job failed before its first step because no host
 * present holds any copy of some shards (its error names them). */
static bool lost_every_copy(const ptc_elastic *e)
{
    return node_local(e) && e->l.last_step < 0 && !e->l.killed &&
           strstr(e->l.first_error, "lost with every copy") != NULL;
}

/* That failure: with a persistent tier, relaunch on the same slots from it
 * (the reconfiguration under way stays pending: its downtime goes on);
 * without one, or when the tier was the source already, the run ends. */
static int fall_back(ptc_elastic *e, bool *go)
{
    const char *why = e->l.first_error;
    if (!e->o.persist)
        return ptc_error_set(PTC_E_IO, "%s; no persistent tier to fall back to (give --persist "
                                       "DIR in the train command)", why);
    if (e->from_persist)
        return ptc_error_set(PTC_E_IO, "%s (resuming from the persistent tier %s)", why,
                             e->o.persist);
    if (++e->failures > e->o.max_restarts)
        return ptc_error_set(PTC_E_IO, "giving up after %d failures (--max-restarts %d); the "
                                       "last: %s", e->failures, e->o.max_restarts, why);
    ptc_elastic_event ev = {.kind = PTC_ELASTIC_FALLBACK, .slots = e->nslots,
                            .persist = e->o.persist};
    snprintf(ev.detail, sizeof ev.detail, "%s", why);
    cfg_text(&e->cfg, ev.config, sizeof ev.config);
    emit(e, &ev);
    e->from_persist = true;
    if (!e->pend.active) { /* the first launch: a reconfiguration of its own */
        e->pend = (pending){.active = true, .t_start = e->l.t_exit, .slots = e->nslots};
        snprintf(e->pend.reason, sizeof e->pend.reason, "failure");
        cfg_text(&e->cfg, e->pend.from, sizeof e->pend.from);
        cfg_text(&e->cfg, e->pend.to, sizeof e->pend.to);
        e->reconfigs++;
    }
    e->pend.from_persist = true;
    *go = true;
    return PTC_OK;
}

/* The job ended with wait status @p status: done, stopped, or plan the
 * relaunch (e->cfg, e->usable and e->pend for the next launch). *@p go: a
 * relaunch follows. */
static int after_job(ptc_elastic *e, int status, bool by_signal, uint64_t *version,
                     int64_t *done, bool *go, ptc_elastic_result *res)
{
    launch *l = &e->l;
    *go = false;
    double t_end = l->t_exit;
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !l->killed;
    if (!ok && !by_signal && !stop_asked(e) && lost_every_copy(e)) /* the pending goes on */
        return fall_back(e, go);
    emit_pending(e, &e->pend, l, t_end); /* a job that ended before its first step */
    int64_t at = l->last_step >= 0 ? l->last_step + 1 : *done;
    if (node_local(e) && l->saved) { /* its last save (after its last step) */
        e->known_version = l->saved_version;
        e->known_step = l->saved_step;
    }
    if (node_local(e) && l->stopped && l->stop_version) {
        e->known_version = l->stop_version;
        e->known_step = l->stop_step;
    }
    if (node_local(e) && ok && !l->stop_requested && !l->stopped) /* ran --until-step */
        e->known_step = PTC_MAX(e->known_step, e->o.total_steps);
    uint64_t nv;
    int64_t nd;
    PTC_TRY(newest(e, &nv, &nd));
    if (ok && nd >= e->o.total_steps) { /* also a job that finished before it saw a stop */
        *version = nv;
        *done = nd;
        return PTC_OK;
    }
    if (by_signal || stop_asked(e)) {
        res->stopped = res->stopped_job = true;
        res->at_step = at;
        *version = nv;
        *done = nd;
        return PTC_OK;
    }
    pending np = {.active = true, .t_start = t_end};
    if (ok && l->stop_requested) {
        snprintf(np.reason, sizeof np.reason, "%s", e->scale_reason);
        np.detect = e->pend.detect;
        np.save = t_end - l->t_stop_asked;
    } else {
        PTC_TRY(after_failure(e, status, t_end, &np));
    }
    double t_plan = now();
    ptc_config next;
    int nslots;
    int rc = plan(e, &next, e->usable, &nslots);
    if (rc != PTC_OK)
        return ptc_error_set(rc, "cannot go on after %s at step %lld: %s", np.reason,
                             (long long)at, ptc_last_error());
    np.plan = now() - t_plan;
    np.at_step = at;
    np.version = nv;
    np.resumed_step = nd;
    np.steps_lost = at > nd ? at - nd : 0;
    np.slots = nslots;
    cfg_text(&e->cfg, np.from, sizeof np.from);
    cfg_text(&next, np.to, sizeof np.to);
    e->pend = np;
    e->cfg = next;
    *version = nv;
    *done = nd;
    e->reconfigs++;
    if (*done >= e->o.total_steps)
        emit_pending(e, &e->pend, l, now());
    else
        *go = true;
    return PTC_OK;
}

/* ---- the supervisor --------------------------------------------------------------------- */

void ptc_elastic_opts_init(ptc_elastic_opts *o)
{
    memset(o, 0, sizeof *o);
    o->slots = -1;
    o->min_slots = 1;
    o->max_restarts = 10;
    o->watchdog = 120;
    o->mpirun = "mpirun";
    o->replicas = -1;
    o->want.schedule = PTC_SCHED_1F1B;
    ptc_search_cluster_init(&o->cluster);
}

int ptc_elastic_create(ptc_elastic **out, const ptc_elastic_opts *o)
{
    *out = NULL;
    if (!o->store || !*o->store || !o->prog || o->total_steps < 1 || o->ntrain_args < 0 ||
        o->ntrain_args > MAX_ARGS || o->min_slots < 1 || !(o->watchdog > 0))
        return ptc_error_set(PTC_E_INVAL, "supervisor options: a store, the program, total "
                                          "steps >= 1, at most %d train arguments, min_slots "
                                          ">= 1 and a watchdog > 0 are needed", MAX_ARGS);
    if (o->slots < 0 && !o->slots_file && !o->hostfile)
        return ptc_error_set(PTC_E_INVAL, "no slots: give --slots N|FILE or --hostfile F");
    ptc_elastic *e = ptc_calloc(1, sizeof *e);
    if (!e)
        return PTC_E_NOMEM;
    e->o = *o;
    if (!e->o.mpirun)
        e->o.mpirun = "mpirun";
    char text[sizeof e->inputs];
    int rc = parse_inputs(e, e->hosts, &e->nhosts, text, sizeof text);
    if (rc == PTC_E_BUSY) /* at the start, a file without its newline is a bad one */
        rc = ptc_error_set(PTC_E_INVAL, "%s (write it as a line)", ptc_last_error());
    if (rc == PTC_OK) {
        snprintf(e->inputs, sizeof e->inputs, "%s", text);
        rc = plan(e, &e->cfg, e->usable, &e->nslots);
    }
    if (rc != PTC_OK) {
        ptc_free(e);
        return rc;
    }
    *out = e;
    return PTC_OK;
}

/* The directory of the control file and the hostfile, beside the store
 * (shared with rank 0's host). */
static int make_dir(ptc_elastic *e)
{
    size_t sl = strlen(e->o.store);
    while (sl > 1 && e->o.store[sl - 1] == '/')
        sl--;
    snprintf(e->dir, sizeof e->dir, "%.*s.elastic.XXXXXX", (int)sl, e->o.store);
    if (!mkdtemp(e->dir)) {
        int rc = ptc_error_sys(PTC_E_IO, "cannot make a directory beside the store (%s)",
                               e->dir);
        e->dir[0] = 0;
        return rc;
    }
    snprintf(e->ctl, sizeof e->ctl, "%s/control", e->dir);
    snprintf(e->hf, sizeof e->hf, "%s/hostfile", e->dir);
    return PTC_OK;
}

/* Launch, follow and relaunch until the newest version is at the total. */
static int supervise(ptc_elastic *e, uint64_t *version, int64_t *done, ptc_elastic_result *res)
{
    while (*done < e->o.total_steps) {
        if (stop_asked(e)) {
            res->stopped = true;
            return PTC_OK;
        }
        PTC_TRY(start_job(e, e->o.total_steps - *done, *version != 0));
        if (e->pend.active && !e->pend.t_launch) /* a fallback's relaunch: the first one's */
            e->pend.t_launch = e->l.t_launch;
        e->scale_reason[0] = 0;
        bool by_signal = false, go = false;
        int status = follow_job(e, &by_signal);
        PTC_TRY(after_job(e, status, by_signal, version, done, &go, res));
        if (!go)
            break;
    }
    return PTC_OK;
}

int ptc_elastic_run(ptc_elastic *e, ptc_elastic_result *res)
{
    ptc_elastic_result dummy;
    if (!res)
        res = &dummy;
    memset(res, 0, sizeof *res);
    uint64_t version;
    int64_t done;
    PTC_TRY(newest(e, &version, &done));
    PTC_TRY(make_dir(e));
    ptc_elastic_event ev = {.kind = PTC_ELASTIC_START, .slots = e->nslots, .version = version,
                            .step = done, .node_local = node_local(e)};
    cfg_text(&e->cfg, ev.config, sizeof ev.config);
    emit(e, &ev);
    int rc = supervise(e, &version, &done, res);
    res->version = version;
    res->step = done;
    res->reconfigurations = e->reconfigs;
    res->failures = e->failures;
    if (rc == PTC_OK && !res->stopped) {
        ptc_elastic_event end = {.kind = PTC_ELASTIC_DONE, .version = version, .step = done,
                                 .reconfigurations = e->reconfigs, .failures = e->failures};
        cfg_text(&e->cfg, end.config, sizeof end.config);
        emit(e, &end);
    }
    unlink(e->ctl);
    unlink(e->hf);
    rmdir(e->dir);
    return rc;
}

void ptc_elastic_destroy(ptc_elastic *e)
{
    ptc_free(e);
}
