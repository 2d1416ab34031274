/* ptc elastic: keep a `ptc train` job running under mpirun on the slots that
 * are available, restarting it from the newest committed version after a
 * failure and relaunching it under a new configuration when the slots change
 * (docs/elastic.md). The controller is a plain process: it forks mpirun,
 * reads the job's output lines (steps, resume and stop reports, mpirun's
 * notice of a dead process), watches the slots file and the hostfile, and
 * asks the job to stop through its --control file. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ptc/ckpt.h"
#include "ptc/elastic.h"
#include "ptc/exec_model.h"
#include "ptc/store.h"

const char ptc_cmd_elastic_help[] =
    "keep a ptc train job running on the available slots (restart, rescale)\n"
    "\n"
    "usage: ptc elastic --store DIR (--slots N|FILE | --hostfile F) [--min-slots M]\n"
    "         [--tp T|auto] [--pp P|auto] [--zero] [--choose rule|search]\n"
    "         [--tflops X] [--mem GIB] [--intra-bw GBPS] [--inter-bw GBPS]\n"
    "         [--watchdog SEC] [--max-restarts N] [--mpirun PATH] [--online] [--json]\n"
    "         -- ptc train ARGS\n"
    "\n"
    "  --store DIR     the job's store (it must exist: ingest the dataset first); the\n"
    "                  job saves there and every relaunch resumes from its newest\n"
    "                  version\n"
    "  --slots N|FILE  slots (processes) available: a number, or a file holding one\n"
    "                  that is watched; with --hostfile, at most this many of its slots\n"
    "  --hostfile F    Open MPI hostfile (`host slots=N` lines), watched; without it\n"
    "                  every slot is on this host\n"
    "  --min-slots M   fail when fewer than M slots remain (default 1)\n"
    "  --tp, --pp      fixed degrees, or auto (the default): the rule picks them\n"
    "                  (docs/elastic.md): tp within a host (the largest of 8,4,2,1\n"
    "                  dividing every host's slots and the hidden width), then the\n"
    "                  largest pp dividing the layers (at most the micro-batches),\n"
    "                  then dp = the rest; slots left over stay idle. A job with\n"
    "                  --device cuda runs tp=1 (auto means 1; more is refused)\n"
    "  --zero          zero=1 in every configuration (not with --device cuda)\n"
    "  --choose        rule (the default: the order above) or search: among the\n"
    "                  configurations the rule allows, the one of highest predicted\n"
    "                  throughput (sequences/s) by the configuration search's cost\n"
    "                  model of the demo model (docs/search.md) on a cluster of\n"
    "                  --tflops per GPU (default 150), --mem GiB per GPU (80), links\n"
    "                  of --intra-bw inside a host (300) and --inter-bw between\n"
    "                  hosts (25 GB/s)\n"
    "  --watchdog SEC  a job with no step for SEC seconds, or that does not stop within\n"
    "                  SEC seconds when asked, is killed and counted as a failure\n"
    "                  (default 120); also the job's --timeout unless it sets one\n"
    "  --max-restarts N  give up after N failures (default 10)\n"
    "  --mpirun PATH   the launcher (default mpirun; --bind-to none and the hostfile\n"
    "                  of the slots in use are passed)\n"
    "  --online        a change that the job's running processes can take (fewer\n"
    "                  slots, or back up to as many as it was launched with, on the\n"
    "                  same hosts) resizes the job in memory (`resize CFG` on its\n"
    "                  control file) instead of stopping it: nothing is saved or\n"
    "                  reloaded, but the processes beyond the new world stay (idle)\n"
    "                  on their slots until the next relaunch\n"
    "  --json          the log as one JSON object per line on stdout (the job's own\n"
    "                  output then goes to stderr)\n"
    "\n"
    "The train ARGS must include --steps N (the job's total: a relaunch runs N minus\n"
    "the step of the version it resumes from) and --save-every K (the versions a\n"
    "failure restarts from); ptc elastic adds --config, --store, --steps, --resume\n"
    "and --control, so ARGS must not give them, nor --resize or --json.\n"
    "A failure (a process dies, mpirun fails) restarts from the newest version on\n"
    "the slots left (a dead process's slot is dropped until the slots file or\n"
    "hostfile changes); a change of the slots file or hostfile stops the job at the\n"
    "next step boundary (it saves) and relaunches it under the new configuration.\n"
    "Every reconfiguration is one line `elastic: REASON at step K: OLD -> NEW ...`\n"
    "with the version resumed from, the steps lost and the downtime split into\n"
    "detect, save, plan, load and restart seconds (with --online, an in-memory\n"
    "resize: detect, plan, move and restart = the rebuild of the groups).\n";

#define MAX_HOSTS 256
#define MAX_ARGS 256

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
    char out_buf[8192], err_buf[8192];
    size_t out_len, err_len;
    double t_launch, t_last_step, t_first_err, t_stop_asked, t_exit;
    int64_t last_step;       /* the last `step K` seen (-1: none) */
    int64_t first_step;      /* the first one */
    double first_step_ms;
    double load_ms;          /* `resumed from ... load X ms` */
    bool stopped;            /* `stopped at step K (...), saved version V` */
    uint64_t stop_version;
    char dead_node[256];     /* mpirun's notice of a dead process */
    bool host_lost;          /* ... of a lost host (its daemon) */
    char first_error[512];   /* the first `ptc: error:` line */
    bool stop_requested, killed;
    bool resize_asked;       /* --online: `resize CFG` written, its report awaited */
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
} pending;

typedef struct elastic {
    const char *store, *slots_arg, *hostfile, *mpirun;
    bool slots_file;
    int slots_n, min_slots, max_restarts;
    double watchdog;
    bool json;
    ptc_elastic_want want;
    bool search;                         /* --choose search */
    ptc_search_cluster cluster;
    const char *prog;                    /* the ptc binary */
    char self[PATH_MAX];
    char **targs;                        /* ARGS after `ptc train` */
    int ntargs;
    int64_t total_steps;
    bool has_timeout;
    host hosts[MAX_HOSTS];
    int nhosts;
    char inputs[16384];                  /* the watched inputs' text, to see changes */
    char dir[PATH_MAX], ctl[PATH_MAX + 16], hf[PATH_MAX + 16];
    int failures, reconfigs;
    bool online;                         /* --online */
    /* the running job's processes: how many on each host, in rank order */
    struct {
        char name[256];
        int n;
    } run[MAX_HOSTS];
    int nrun;
    pending opend;                       /* an in-memory resize awaiting its report */
} elastic;

static volatile sig_atomic_t got_signal;
static void on_signal(int sig)
{
    got_signal = sig;
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

/* ---- the watched inputs ------------------------------------------------------- */

static bool read_small(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, cap - 1, f);
    bool ok = !ferror(f) && feof(f);
    fclose(f);
    buf[n] = 0;
    return ok;
}

/* Parse the inputs into hosts. *why: the problem (NULL when fine). */
static bool parse_inputs(elastic *e, host *hs, int *nh, const char **why, char *text,
                         size_t textcap)
{
    static char msg[512];
    char sbuf[256] = "", hbuf[8192] = "";
    int total = -1;
    *why = NULL;
    *nh = 0;
    if (e->slots_arg) {
        if (e->slots_file) {
            if (!read_small(e->slots_arg, sbuf, sizeof sbuf)) {
                snprintf(msg, sizeof msg, "cannot read the slots file %s", e->slots_arg);
                *why = msg;
                return false;
            }
            char *end;
            errno = 0;
            long v = strtol(sbuf, &end, 10);
            while (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r')
                end++;
            if (errno || end == sbuf || *end || v < 0 || v > PTC_CONFIG_MAX_WORLD) {
                snprintf(msg, sizeof msg, "the slots file %s does not hold a number of slots",
                         e->slots_arg);
                *why = msg;
                return false;
            }
            total = (int)v;
        } else {
            total = e->slots_n;
        }
    }
    if (e->hostfile) {
        if (!read_small(e->hostfile, hbuf, sizeof hbuf)) {
            snprintf(msg, sizeof msg, "cannot read the hostfile %s", e->hostfile);
            *why = msg;
            return false;
        }
        static ptc_elastic_host ph[MAX_HOSTS];
        size_t np = 0;
        if (ptc_elastic_hostfile_parse(hbuf, ph, MAX_HOSTS, &np) != PTC_OK) {
            snprintf(msg, sizeof msg, "%s: %s", e->hostfile, ptc_last_error());
            *why = msg;
            return false;
        }
        for (size_t i = 0; i < np; i++) {
            memcpy(hs[i].name, ph[i].name, sizeof hs[i].name);
            hs[i].slots = ph[i].slots;
            hs[i].failed = 0;
        }
        *nh = (int)np;
        /* --slots caps the total, taken from the hosts in order */
        for (int i = 0; total >= 0 && i < *nh; i++) {
            if (hs[i].slots > total)
                hs[i].slots = total;
            total -= hs[i].slots;
        }
    } else {
        snprintf(hs[0].name, sizeof hs[0].name, "localhost");
        hs[0].slots = total;
        hs[0].failed = 0;
        *nh = 1;
    }
    snprintf(text, textcap, "%s\n--\n%s", sbuf, hbuf);
    return true;
}

/* Free slots per host after failures; returns the total. */
static int free_slots(const elastic *e, int *slots)
{
    int total = 0;
    for (int i = 0; i < e->nhosts; i++) {
        int s = e->hosts[i].slots - e->hosts[i].failed;
        slots[i] = s > 0 ? s : 0;
        total += slots[i];
    }
    return total;
}

/* ---- the store ------------------------------------------------------------------- */

/* The newest version and its step (0, 0: none). */
static int newest(const elastic *e, uint64_t *version, int64_t *step)
{
    ptc_store *s = NULL;
    *version = 0;
    *step = 0;
    /* an empty directory: the job's first save makes the store there */
    char meta[PATH_MAX + 8];
    snprintf(meta, sizeof meta, "%s/meta", e->store);
    if (access(meta, F_OK) != 0 && errno == ENOENT)
        return PTC_OK;
    int rc = ptc_store_open(&s, e->store, PTC_STORE_READONLY);
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

/* ---- logging ---------------------------------------------------------------------- */

static void log_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_text(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("elastic: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
}

static void log_json(json_t *o)
{
    char *t = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (t)
        printf("%s\n", t);
    free(t);
    json_decref(o);
    fflush(stdout);
}

/* One reconfiguration's line (or JSON object): the restart path names the
 * version it resumed from and loads it; the online path moves the state in
 * memory. The parts add up to the downtime. */
static void log_reconfig(const elastic *e, const pending *p, bool online, double save,
                         double plan, double move, double load, double restart)
{
    double total = p->detect + save + plan + move + load + restart;
    if (e->json) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:s, s:s, s:i, s:I, s:I, s:f, s:f, s:f, s:f, "
                              "s:f, s:f, s:f}",
                              "event", "reconfigure", "reason", p->reason, "path",
                              online ? "online" : "restart", "step", (json_int_t)p->at_step,
                              "from", p->from, "to", p->to, "slots", p->slots, "resumed_step",
                              (json_int_t)p->resumed_step, "steps_lost",
                              (json_int_t)p->steps_lost, "downtime_s", total, "detect_s",
                              p->detect, "save_s", save, "plan_s", plan, "move_s", move,
                              "load_s", load, "restart_s", restart);
        if (o && !online)
            json_object_set_new(o, "version", json_integer((json_int_t)p->version));
        log_json(o);
        return;
    }
    char how[96];
    if (online)
        snprintf(how, sizeof how, "online (in memory)");
    else
        snprintf(how, sizeof how, "resumed version %llu (step %lld)",
                 (unsigned long long)p->version, (long long)p->resumed_step);
    log_text("%s at step %lld: %s -> %s on %d slots, %s, %lld steps lost, downtime %.3f s "
             "(detect %.3f, save %.3f, plan %.3f, %s %.3f, restart %.3f)",
             p->reason, (long long)p->at_step, p->from, p->to, p->slots, how,
             (long long)p->steps_lost, total, p->detect, save, plan, online ? "move" : "load",
             online ? move : load, restart);
}

static void log_pending(elastic *e, pending *p, const launch *l, double t_end)
{
    if (!p->active)
        return;
    p->active = false;
    double load = l->load_ms / 1e3;
    double restart = t_end - p->t_launch - load;
    if (l->last_step >= 0)
        restart -= l->first_step_ms / 1e3;
    if (restart < 0)
        restart = 0;
    log_reconfig(e, p, false, p->save, p->plan, 0, load, restart);
}

/* An in-memory resize, from the job's `resize at step K (control): ...` line. */
static void log_online(elastic *e, pending *p, int64_t step, double plan, double move,
                       double rebuild)
{
    if (!p->active)
        return;
    p->active = false;
    e->reconfigs++;
    p->at_step = p->resumed_step = step;
    p->steps_lost = 0;
    log_reconfig(e, p, true, 0, plan, move, 0, rebuild);
}

/* ---- the job's output --------------------------------------------------------------- */

static void on_out_line(elastic *e, launch *l, pending *p, char *line)
{
    FILE *to = e->json ? stderr : stdout;
    fprintf(to, "%s\n", line);
    fflush(to);
    long long k;
    double ms, pl, mv, rb;
    unsigned long long v;
    if (sscanf(line, "step %lld loss %*s time %lf ms", &k, &ms) == 2 ||
        sscanf(line, "step %lld time %lf ms", &k, &ms) == 2) {
        double t = now();
        if (l->last_step < 0) {
            l->first_step = k;
            l->first_step_ms = ms;
            log_pending(e, p, l, t);
        }
        l->last_step = k;
        l->t_last_step = t;
        l->t_first_err = 0;
    } else if (sscanf(line, "resumed from version %llu at step %lld, load %lf ms", &v, &k,
                      &ms) == 3) {
        l->load_ms = ms;
    } else if (l->resize_asked && sscanf(line, "resize at step %lld (control): %*s -> %*s "
                                             "plan %lf ms, move %lf ms, rebuild %lf ms",
                                             &k, &pl, &mv, &rb) == 4) {
        l->resize_asked = false;
        log_online(e, &e->opend, k, pl / 1e3, mv / 1e3, rb / 1e3);
    } else if (!strncmp(line, "stopped at step ", 16)) {
        l->stopped = true;
        const char *sv = strstr(line, "saved version ");
        l->stop_version = sv ? strtoull(sv + 14, NULL, 10) : 0;
    }
}

static void on_err_line(elastic *e, launch *l, char *line)
{
    (void)e;
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
    if (!l->t_first_err && line[0] && line[0] != '-')
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

/* Read what a pipe holds; call back per complete line. false at EOF. */
static bool drain(elastic *e, launch *l, pending *p, int fd, bool is_out)
{
    char *buf = is_out ? l->out_buf : l->err_buf;
    size_t *len = is_out ? &l->out_len : &l->err_len;
    size_t cap = is_out ? sizeof l->out_buf : sizeof l->err_buf;
    ssize_t n = read(fd, buf + *len, cap - 1 - *len);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR;
    if (n == 0) {
        if (*len) { /* a last line without a newline */
            buf[*len] = 0;
            is_out ? on_out_line(e, l, p, buf) : on_err_line(e, l, buf);
            *len = 0;
        }
        return false;
    }
    *len += (size_t)n;
    char *start = buf, *nl;
    while ((nl = memchr(start, '\n', *len - (size_t)(start - buf)))) {
        *nl = 0;
        is_out ? on_out_line(e, l, p, start) : on_err_line(e, l, start);
        start = nl + 1;
    }
    size_t rest = *len - (size_t)(start - buf);
    memmove(buf, start, rest);
    *len = rest;
    if (*len == cap - 1) { /* an overlong line: pass it on in pieces */
        buf[*len] = 0;
        is_out ? on_out_line(e, l, p, buf) : on_err_line(e, l, buf);
        *len = 0;
    }
    return true;
}

/* ---- launching ---------------------------------------------------------------------- */

static int write_file(const char *path, const char *text)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -1;
    bool ok = fputs(text, f) >= 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Where mpirun puts W ranks given a hostfile of usable[] slots per host: it
 * fills the hosts in file order. Returns the entries (host index, count). */
static int placement(const int *usable, int nh, int world, int *at, int *count)
{
    int n = 0;
    for (int i = 0; i < nh && world > 0; i++) {
        int take = usable[i] < world ? usable[i] : world;
        if (take > 0) {
            at[n] = i;
            count[n++] = take;
            world -= take;
        }
    }
    return n;
}

/* --online: can the running processes take configuration @p next on the
 * hosts' usable slots @p nu? Its ranks must be running already, each on the
 * host the new hostfile would put it on (ranks 0..W-1 of the launch). */
static bool online_fits(const elastic *e, const ptc_config *next, const int *nu)
{
    int W = ptc_config_world(next), h[MAX_HOSTS], c[MAX_HOSTS];
    int n = placement(nu, e->nhosts, W, h, c), left = W, k = 0;
    for (int i = 0; i < e->nrun && left > 0; i++) {
        int take = e->run[i].n < left ? e->run[i].n : left;
        if (k >= n || c[k] != take || strcmp(e->hosts[h[k]].name, e->run[i].name))
            return false;
        k++;
        left -= take;
    }
    return left == 0 && k == n;
}

static int start_job(elastic *e, launch *l, const ptc_config *cfg, const int *usable,
                     int64_t steps, bool resume)
{
    {
        int h[MAX_HOSTS], c[MAX_HOSTS];
        e->nrun = placement(usable, e->nhosts, ptc_config_world(cfg), h, c);
        for (int i = 0; i < e->nrun; i++) {
            snprintf(e->run[i].name, sizeof e->run[i].name, "%s", e->hosts[h[i]].name);
            e->run[i].n = c[i];
        }
    }
    char hf[16384] = "";
    size_t off = 0;
    for (int i = 0; i < e->nhosts; i++)
        if (usable[i] > 0)
            off += (size_t)snprintf(hf + off, sizeof hf - off, "%s slots=%d\n", e->hosts[i].name,
                                    usable[i]);
    if (write_file(e->hf, hf) != 0)
        return ptc_cli_error("cannot write %s: %s", e->hf, strerror(errno));
    unlink(e->ctl);
    char cfgs[128], np[32], st[32], to[32];
    cfg_text(cfg, cfgs, sizeof cfgs);
    snprintf(np, sizeof np, "%d", ptc_config_world(cfg));
    snprintf(st, sizeof st, "%lld", (long long)steps);
    snprintf(to, sizeof to, "%g", e->watchdog);
    const char *argv[MAX_ARGS + 32];
    int n = 0;
    argv[n++] = e->mpirun;
    if (geteuid() == 0)
        argv[n++] = "--allow-run-as-root";
    argv[n++] = "--bind-to";
    argv[n++] = "none";
    argv[n++] = "--hostfile";
    argv[n++] = e->hf;
    argv[n++] = "-np";
    argv[n++] = np;
    argv[n++] = e->prog;
    argv[n++] = "train";
    for (int i = 0; i < e->ntargs; i++)
        argv[n++] = e->targs[i];
    argv[n++] = "--config";
    argv[n++] = cfgs;
    argv[n++] = "--store";
    argv[n++] = e->store;
    argv[n++] = "--steps";
    argv[n++] = st;
    argv[n++] = "--control";
    argv[n++] = e->ctl;
    if (!e->has_timeout) {
        argv[n++] = "--timeout";
        argv[n++] = to;
    }
    if (resume)
        argv[n++] = "--resume";
    argv[n] = NULL;
    int po[2], pe[2];
    if (pipe(po) != 0)
        return ptc_cli_error("pipe: %s", strerror(errno));
    if (pipe(pe) != 0) {
        close(po[0]);
        close(po[1]);
        return ptc_cli_error("pipe: %s", strerror(errno));
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        return ptc_cli_error("fork: %s", strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0); /* the job and its ranks: one group to stop */
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "ptc: error: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(po[1]);
    close(pe[1]);
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    memset(l, 0, sizeof *l);
    l->pid = pid;
    l->out_fd = po[0];
    l->err_fd = pe[0];
    l->t_launch = now();
    l->t_last_step = l->t_launch;
    l->last_step = -1;
    l->first_step = -1;
    return PTC_CLI_OK;
}

static void kill_job(launch *l, const char *why)
{
    if (l->killed)
        return;
    l->killed = true;
    snprintf(l->kill_reason, sizeof l->kill_reason, "%s", why);
    kill(-l->pid, SIGTERM);
}

/* ---- argument checks ------------------------------------------------------------------ */

/* The value of a train option (--name V or --name=V), NULL if absent. */
static const char *targ(const elastic *e, const char *name, bool *present)
{
    size_t n = strlen(name);
    *present = false;
    for (int i = 0; i < e->ntargs; i++) {
        const char *a = e->targs[i];
        if (!strncmp(a, name, n) && (a[n] == 0 || a[n] == '=')) {
            *present = true;
            if (a[n] == '=')
                return a + n + 1;
            return i + 1 < e->ntargs ? e->targs[i + 1] : NULL;
        }
    }
    return NULL;
}

static int check_train_args(elastic *e)
{
    static const char *const owned[] = {"--config", "--store",  "--resume", "--version",
                                        "--control", "--resize", "--json"};
    bool present;
    for (size_t i = 0; i < sizeof owned / sizeof *owned; i++) {
        targ(e, owned[i], &present);
        if (present)
            return ptc_cli_usage_error("elastic: the train command must not give %s "
                                       "(ptc elastic sets it)", owned[i]);
    }
    const char *v = targ(e, "--steps", &present);
    uint64_t u;
    if (!present || !ptc_cli_parse_u64(v, &u) || u < 1 || u > (1u << 30))
        return ptc_cli_usage_error("elastic: the train command needs --steps N (the job's total "
                                   "steps)");
    e->total_steps = (int64_t)u;
    targ(e, "--save-every", &present);
    if (!present)
        return ptc_cli_usage_error("elastic: the train command needs --save-every K (the "
                                   "versions a failure restarts from)");
    targ(e, "--timeout", &e->has_timeout);
    ptc_exec_model_cfg m = {.layers = 4, .hidden = 16, .vocab = 32, .tokens = 8};
    v = targ(e, "--model", &present);
    if (present && (!v || ptc_exec_model_parse(&m, v) != PTC_OK))
        return ptc_cli_usage_error("elastic: --model: %s", ptc_last_error());
    e->want.layers = m.layers;
    e->want.hidden = m.hidden;
    e->want.vocab = m.vocab;
    e->want.tokens = m.tokens;
    v = targ(e, "--schedule", &present);
    ptc_sched_kind_id kind;
    bool is_kind = present && v && ptc_sched_kind_parse(v, &kind) == PTC_OK;
    if (is_kind)
        e->want.schedule = kind;

    /* the CUDA model runs tp=1 and zero=0: auto means tp=1 for it */
    v = targ(e, "--device", &present);
    if (present && v && !strcmp(v, "cuda")) {
        if (e->want.tp > 1)
            return ptc_cli_usage_error("elastic: --tp %d: the cuda model (--device cuda) runs "
                                       "tp=1", e->want.tp);
        if (e->want.zero)
            return ptc_cli_usage_error("elastic: --zero: the cuda model (--device cuda) runs "
                                       "zero=0");
        e->want.tp = 1;
    }
    v = targ(e, "--microbatches", &present);
    int mb = 0;
    if (present && (!v || !ptc_cli_parse_int(v, 1, 1 << 16, &mb)))
        return ptc_cli_usage_error("elastic: --microbatches: expected 1..65536");
    e->want.microbatches = mb;
    return PTC_CLI_OK;
}

/* The remaining train args, with --steps removed (elastic passes the steps left). */
static void drop_steps(elastic *e)
{
    int w = 0;
    for (int i = 0; i < e->ntargs; i++) {
        if (!strcmp(e->targs[i], "--steps")) {
            i++;
            continue;
        }
        if (!strncmp(e->targs[i], "--steps=", 8))
            continue;
        e->targs[w++] = e->targs[i];
    }
    e->ntargs = w;
}

enum { OPT_STORE = 256, OPT_SLOTS, OPT_HOSTFILE, OPT_MIN, OPT_TP, OPT_PP, OPT_ZERO, OPT_WATCH,
       OPT_MAXR, OPT_MPIRUN, OPT_JSON, OPT_CHOOSE, OPT_TFLOPS, OPT_MEM, OPT_INTRA_BW,
       OPT_INTER_BW, OPT_ONLINE };

static bool parse_degree(const char *s, int *out)
{
    if (!strcmp(s, "auto")) {
        *out = 0;
        return true;
    }
    return ptc_cli_parse_int(s, 1, PTC_CONFIG_MAX_WORLD, out);
}

static int parse_args(int argc, char **argv, elastic *e)
{
    static const struct option longopts[] = {
        {"store", 1, 0, OPT_STORE},   {"slots", 1, 0, OPT_SLOTS},
        {"hostfile", 1, 0, OPT_HOSTFILE}, {"min-slots", 1, 0, OPT_MIN},
        {"tp", 1, 0, OPT_TP},         {"pp", 1, 0, OPT_PP},
        {"zero", 0, 0, OPT_ZERO},     {"watchdog", 1, 0, OPT_WATCH},
        {"max-restarts", 1, 0, OPT_MAXR}, {"mpirun", 1, 0, OPT_MPIRUN},
        {"json", 0, 0, OPT_JSON},     {"choose", 1, 0, OPT_CHOOSE},
        {"tflops", 1, 0, OPT_TFLOPS}, {"mem", 1, 0, OPT_MEM},
        {"intra-bw", 1, 0, OPT_INTRA_BW}, {"inter-bw", 1, 0, OPT_INTER_BW},
        {"online", 0, 0, OPT_ONLINE}, {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    ptc_search_cluster_init(&e->cluster);
    e->want.schedule = PTC_SCHED_1F1B;
    e->min_slots = 1;
    e->max_restarts = 10;
    e->watchdog = 120;
    e->mpirun = "mpirun";
    int c;
    optind = 1;
    /* '+': stop at the first non-option, so the train command stays untouched */
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            ptc_cli_help(ptc_cmd_elastic_help);
            exit(0);
        case OPT_STORE:
            e->store = optarg;
            break;
        case OPT_SLOTS:
            e->slots_arg = optarg;
            e->slots_file = !ptc_cli_parse_int(optarg, 0, PTC_CONFIG_MAX_WORLD, &e->slots_n);
            if (e->slots_file && ((optarg[0] >= '0' && optarg[0] <= '9' && access(optarg, F_OK)) ||
                                  optarg[0] == '-' || !optarg[0]))
                return ptc_cli_usage_error("--slots: expected a number of slots or a file");
            break;
        case OPT_HOSTFILE:
            e->hostfile = optarg;
            break;
        case OPT_MIN:
            if (!ptc_cli_parse_int(optarg, 1, PTC_CONFIG_MAX_WORLD, &e->min_slots))
                return ptc_cli_usage_error("--min-slots: expected a positive number");
            break;
        case OPT_TP:
        case OPT_PP:
            if (!parse_degree(optarg, c == OPT_TP ? &e->want.tp : &e->want.pp))
                return ptc_cli_usage_error("--%s: expected a positive number or auto",
                                           c == OPT_TP ? "tp" : "pp");
            break;
        case OPT_ZERO:
            e->want.zero = true;
            break;
        case OPT_WATCH: {
            char *end;
            e->watchdog = strtod(optarg, &end);
            if (end == optarg || *end || !isfinite(e->watchdog) || e->watchdog <= 0)
                return ptc_cli_usage_error("--watchdog: expected seconds > 0");
            break;
        }
        case OPT_MAXR:
            if (!ptc_cli_parse_int(optarg, 0, 1 << 20, &e->max_restarts))
                return ptc_cli_usage_error("--max-restarts: expected a number >= 0");
            break;
        case OPT_MPIRUN:
            e->mpirun = optarg;
            break;
        case OPT_JSON:
            e->json = true;
            break;
        case OPT_ONLINE:
            e->online = true;
            break;
        case OPT_CHOOSE:
            if (strcmp(optarg, "rule") && strcmp(optarg, "search"))
                return ptc_cli_usage_error("--choose: expected rule or search, got '%s'", optarg);
            e->search = !strcmp(optarg, "search");
            break;
        case OPT_TFLOPS:
        case OPT_MEM:
        case OPT_INTRA_BW:
        case OPT_INTER_BW: {
            char *end;
            double d = strtod(optarg, &end);
            if (end == optarg || *end || !isfinite(d) || d <= 0 || d > 1e12)
                return ptc_cli_usage_error("--%s: expected a positive number, got '%s'",
                                           c == OPT_TFLOPS ? "tflops" : c == OPT_MEM ? "mem"
                                           : c == OPT_INTRA_BW ? "intra-bw" : "inter-bw",
                                           optarg);
            if (c == OPT_TFLOPS)
                e->cluster.flops = d * 1e12;
            else if (c == OPT_MEM)
                e->cluster.mem_bytes = d * (double)(1ull << 30);
            else if (c == OPT_INTRA_BW)
                e->cluster.intra_bw = d * 1e9;
            else
                e->cluster.inter_bw = d * 1e9;
            break;
        }
        default:
            return ptc_cli_bad_option(argv);
        }
    }
    if (!e->store || !*e->store)
        return ptc_cli_usage_error("elastic: --store DIR is required");
    if (!e->slots_arg && !e->hostfile)
        return ptc_cli_usage_error("elastic: no slots: give --slots N|FILE or --hostfile F");
    if (optind >= argc || strcmp(argv[optind - 1], "--"))
        return ptc_cli_usage_error("elastic: expected -- ptc train ARGS after the options");
    if (argc - optind < 2 || strcmp(argv[optind + 1], "train"))
        return ptc_cli_usage_error("elastic: the command after -- must be `ptc train ARGS`");
    if (argc - optind - 2 > MAX_ARGS)
        return ptc_cli_usage_error("elastic: more than %d train arguments", MAX_ARGS);
    const char *prog = argv[optind];
    if (!strchr(prog, '/')) {
        /* the same binary as this one, found without PATH */
        ssize_t n = readlink("/proc/self/exe", e->self, sizeof e->self - 1);
        if (n > 0) {
            e->self[n] = 0;
            prog = e->self;
        }
    }
    e->prog = prog;
    e->targs = argv + optind + 2;
    e->ntargs = argc - optind - 2;
    struct stat sb;
    if (stat(e->store, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ptc_cli_usage_error("elastic: --store %s: no such store (ingest the job's dataset "
                                   "or import a model first)", e->store);
    return check_train_args(e);
}

/* ---- the controller ---------------------------------------------------------------------- */

/* Pick the configuration for the free slots. usable: per host. */
static int plan(elastic *e, ptc_config *cfg, int *usable, int *nslots)
{
    int slots[MAX_HOSTS];
    int total = free_slots(e, slots);
    *nslots = total;
    if (total < e->min_slots)
        return ptc_error_set(PTC_E_CONFIG, "%d slots available, --min-slots is %d", total,
                             e->min_slots);
    if (e->search)
        return ptc_elastic_search(cfg, usable, slots, (size_t)e->nhosts, &e->want, &e->cluster,
                                  NULL);
    return ptc_elastic_pick(cfg, usable, slots, (size_t)e->nhosts, &e->want);
}

static void cleanup_dir(elastic *e)
{
    unlink(e->ctl);
    unlink(e->hf);
    rmdir(e->dir);
}

int ptc_cmd_elastic(int argc, char **argv)
{
    ptc_cli_init();
    static elastic e;
    memset(&e, 0, sizeof e);
    int rc = parse_args(argc, argv, &e);
    if (rc != PTC_CLI_OK)
        return rc;
    drop_steps(&e);
    const char *why;
    char text[sizeof e.inputs];
    if (!parse_inputs(&e, e.hosts, &e.nhosts, &why, text, sizeof text))
        return ptc_cli_usage_error("elastic: %s", why);
    snprintf(e.inputs, sizeof e.inputs, "%s", text);
    int usable[MAX_HOSTS], nslots;
    ptc_config cfg;
    if (plan(&e, &cfg, usable, &nslots) != PTC_OK)
        return ptc_cli_usage_error("elastic: %s", ptc_last_error());
    uint64_t version;
    int64_t done;
    if (newest(&e, &version, &done) != PTC_OK)
        return ptc_cli_lib_error(PTC_E_IO);
    /* the control file and hostfile live beside the store (shared with rank 0's host) */
    size_t sl = strlen(e.store);
    while (sl > 1 && e.store[sl - 1] == '/')
        sl--;
    snprintf(e.dir, sizeof e.dir, "%.*s.elastic.XXXXXX", (int)sl, e.store);
    if (!mkdtemp(e.dir))
        return ptc_cli_error("cannot make a directory beside the store (%s): %s", e.dir,
                             strerror(errno));
    snprintf(e.ctl, sizeof e.ctl, "%s/control", e.dir);
    snprintf(e.hf, sizeof e.hf, "%s/hostfile", e.dir);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    char cs[128];
    cfg_text(&cfg, cs, sizeof cs);
    if (e.json)
        log_json(json_pack("{s:s, s:s, s:i, s:I, s:I, s:I}", "event", "start", "config", cs,
                           "slots", nslots, "version", (json_int_t)version, "step",
                           (json_int_t)done, "total_steps", (json_int_t)e.total_steps));
    else
        log_text("start: %s on %d slots, from version %llu (step %lld), %lld of %lld steps to "
                 "run", cs, nslots, (unsigned long long)version, (long long)done,
                 (long long)(e.total_steps - done > 0 ? e.total_steps - done : 0),
                 (long long)e.total_steps);
    pending pend = {0};
    launch l;
    memset(&l, 0, sizeof l);
    int result = PTC_CLI_OK;
    bool by_signal = false;
    while (done < e.total_steps) {
        if (got_signal) {
            result = ptc_cli_error("stopped by a signal before the relaunch; the newest version "
                                   "is %llu (step %lld)", (unsigned long long)version,
                                   (long long)done);
            break;
        }
        if (start_job(&e, &l, &cfg, usable, e.total_steps - done, version != 0) != PTC_CLI_OK) {
            result = PTC_CLI_FAIL;
            break;
        }
        if (pend.active)
            pend.t_launch = l.t_launch;
        bool out_open = true, err_open = true, exited = false;
        int status = 0;
        double t_kill = 0;
        char scale_reason[32] = "";
        while (out_open || err_open || !exited) {
            struct pollfd pf[2];
            int n = 0;
            if (out_open)
                pf[n++] = (struct pollfd){.fd = l.out_fd, .events = POLLIN};
            if (err_open)
                pf[n++] = (struct pollfd){.fd = l.err_fd, .events = POLLIN};
            poll(pf, (nfds_t)n, 100);
            for (int i = 0; i < n; i++)
                if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                    bool is_out = pf[i].fd == l.out_fd;
                    if (!drain(&e, &l, &pend, pf[i].fd, is_out)) {
                        close(pf[i].fd);
                        if (is_out)
                            out_open = false;
                        else
                            err_open = false;
                    }
                }
            double t = now();
            if (!exited) {
                pid_t w = waitpid(l.pid, &status, WNOHANG);
                if (w == l.pid) {
                    exited = true;
                    l.t_exit = t;
                }
            }
            if (exited) {
                /* ranks left behind could hold the pipes open: do not wait for them long */
                if (t - l.t_exit > 5) {
                    kill(-l.pid, SIGKILL);
                    if (out_open)
                        close(l.out_fd);
                    if (err_open)
                        close(l.err_fd);
                    out_open = err_open = false;
                }
                continue;
            }
            if (l.killed) {
                if (t - t_kill > 5)
                    kill(-l.pid, SIGKILL);
                continue;
            }
            /* the watchdog */
            if (l.stop_requested && t - l.t_stop_asked > e.watchdog) {
                t_kill = t;
                kill_job(&l, "did not stop when asked");
                continue;
            }
            if (!l.stop_requested && t - l.t_last_step > e.watchdog) {
                t_kill = t;
                char why_k[128];
                snprintf(why_k, sizeof why_k, "made no step for %g s", e.watchdog);
                kill_job(&l, why_k);
                continue;
            }
            if (got_signal && !l.stop_requested) {
                by_signal = true;
                l.stop_requested = true;
                l.t_stop_asked = t;
                write_file(e.ctl, "stop\n");
                continue;
            }
            /* the watched inputs (not while a resize or a stop is on its way) */
            if (!l.stop_requested && !l.resize_asked) {
                host hs[MAX_HOSTS];
                int nh;
                if (!parse_inputs(&e, hs, &nh, &why, text, sizeof text) ||
                    !strcmp(text, e.inputs))
                    continue; /* unchanged, or being written: look again */
                int old_total = 0, new_total = 0;
                for (int i = 0; i < e.nhosts; i++)
                    old_total += e.hosts[i].slots - e.hosts[i].failed;
                for (int i = 0; i < nh; i++)
                    new_total += hs[i].slots;
                memcpy(e.hosts, hs, sizeof hs[0] * (size_t)nh);
                e.nhosts = nh;
                snprintf(e.inputs, sizeof e.inputs, "%s", text);
                ptc_config next;
                int nu[MAX_HOSTS], ns;
                int prc = plan(&e, &next, nu, &ns);
                bool same_hosts = prc == PTC_OK && ptc_config_equal(&next, &cfg) &&
                                  !memcmp(nu, usable, sizeof nu[0] * (size_t)nh);
                if (same_hosts)
                    continue;
                /* when the mtime of the changed input is the event, detect is our lag */
                double mt = 0;
                struct stat sb;
                if (e.slots_file && stat(e.slots_arg, &sb) == 0)
                    mt = (double)sb.st_mtim.tv_sec + (double)sb.st_mtim.tv_nsec * 1e-9;
                if (e.hostfile && stat(e.hostfile, &sb) == 0) {
                    double m2 = (double)sb.st_mtim.tv_sec + (double)sb.st_mtim.tv_nsec * 1e-9;
                    mt = m2 > mt ? m2 : mt;
                }
                snprintf(scale_reason, sizeof scale_reason, "%s",
                         new_total > old_total   ? "scale-out"
                         : new_total < old_total ? "scale-in"
                                                 : "hosts-changed");
                if (e.online && prc == PTC_OK && online_fits(&e, &next, nu)) {
                    /* the processes are there: resize in memory at the next step */
                    char ns_text[128], req[160];
                    cfg_text(&next, ns_text, sizeof ns_text);
                    snprintf(req, sizeof req, "resize %s\n", ns_text);
                    pending op = {.active = true, .slots = ns, .t_start = t};
                    snprintf(op.reason, sizeof op.reason, "%s", scale_reason);
                    cfg_text(&cfg, op.from, sizeof op.from);
                    snprintf(op.to, sizeof op.to, "%s", ns_text);
                    op.detect = mt > 0 && t > mt ? t - mt : 0;
                    if (write_file(e.ctl, req) != 0) {
                        t_kill = t;
                        kill_job(&l, "cannot write the control file");
                        continue;
                    }
                    e.opend = op;
                    l.resize_asked = true;
                    cfg = next;
                    memcpy(usable, nu, sizeof nu[0] * (size_t)nh);
                    continue;
                }
                pend.detect = mt > 0 && t > mt ? t - mt : 0;
                l.stop_requested = true;
                l.t_stop_asked = t;
                if (write_file(e.ctl, "stop\n") != 0) {
                    t_kill = t;
                    kill_job(&l, "cannot write the control file");
                }
            }
        }
        /* the job ended: why, and what next */
        double t_end = l.t_exit;
        log_pending(&e, &pend, &l, t_end); /* a job that ended before its first step */
        int64_t at = l.last_step >= 0 ? l.last_step + 1 : done;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !l.killed;
        uint64_t nv;
        int64_t nd;
        if (newest(&e, &nv, &nd) != PTC_OK) {
            result = ptc_cli_lib_error(PTC_E_IO);
            break;
        }
        char from[128];
        cfg_text(&cfg, from, sizeof from);
        if (ok && nd >= e.total_steps) { /* also a job that finished before it saw a stop */
            version = nv;
            done = nd;
            break;
        }
        if (by_signal || got_signal) {
            result = ptc_cli_error("stopped by a signal at step %lld; the newest version is %llu "
                                   "(step %lld)", (long long)at, (unsigned long long)nv,
                                   (long long)nd);
            break;
        }
        pending np = {.active = true, .t_start = t_end};
        double t_plan = now();
        if (ok && l.stop_requested) {
            snprintf(np.reason, sizeof np.reason, "%s", scale_reason);
            np.detect = pend.detect;
            np.save = t_end - l.t_stop_asked;
        } else {
            /* a failure: drop the dead process's slot (its host's, by name) */
            e.failures++;
            const char *diag = l.killed ? l.kill_reason
                               : l.first_error[0] ? l.first_error
                               : WIFSIGNALED(status) ? "mpirun was killed by a signal"
                                                     : "a process of the job failed";
            if (l.dead_node[0]) {
                int h = -1;
                for (int i = 0; i < e.nhosts; i++)
                    if (!strcmp(e.hosts[i].name, l.dead_node))
                        h = i;
                if (h < 0 && e.nhosts == 1)
                    h = 0; /* mpirun names the host by its own name, not "localhost" */
                if (h >= 0) /* a lost host loses all its slots, a dead process one */
                    e.hosts[h].failed = l.host_lost ? e.hosts[h].slots : e.hosts[h].failed + 1;
            } else if (l.last_step < 0 && !l.killed) {
                /* failed alike before any step, no process died: a bad job, not a fault */
                result = ptc_cli_error("the job failed before its first step: %s", diag);
                break;
            }
            if (e.failures > e.max_restarts) {
                result = ptc_cli_error("giving up after %d failures (--max-restarts %d); the "
                                       "last: %s", e.failures, e.max_restarts, diag);
                break;
            }
            snprintf(np.reason, sizeof np.reason, "%s", "failure");
            double t0 = l.t_first_err && l.t_first_err < t_end ? l.t_first_err : t_end;
            if (l.killed)
                t0 = l.t_last_step; /* the watchdog's wait is the detection */
            np.detect = t_end - t0;
            if (l.stop_requested && l.t_stop_asked < t0)
                np.save = t0 - l.t_stop_asked;
        }
        int nslots2;
        ptc_config next;
        if (plan(&e, &next, usable, &nslots2) != PTC_OK) {
            result = ptc_cli_error("cannot go on after %s at step %lld: %s", np.reason,
                                   (long long)at, ptc_last_error());
            break;
        }
        np.plan = now() - t_plan;
        np.at_step = at;
        np.version = nv;
        np.resumed_step = nd;
        np.steps_lost = at > nd ? at - nd : 0;
        np.slots = nslots2;
        cfg_text(&cfg, np.from, sizeof np.from);
        cfg_text(&next, np.to, sizeof np.to);
        pend = np;
        cfg = next;
        version = nv;
        done = nd;
        e.reconfigs++;
        if (done >= e.total_steps) {
            log_pending(&e, &pend, &l, now());
            break;
        }
    }
    if (result == PTC_CLI_OK) {
        char fs[128];
        cfg_text(&cfg, fs, sizeof fs);
        if (e.json)
            log_json(json_pack("{s:s, s:I, s:I, s:s, s:i, s:i}", "event", "done", "step",
                               (json_int_t)done, "version", (json_int_t)version, "config", fs,
                               "reconfigurations", e.reconfigs, "failures", e.failures));
        else
            log_text("done: step %lld, version %llu, %s, %d reconfigurations (%d failures)",
                     (long long)done, (unsigned long long)version, fs, e.reconfigs,
                     e.failures);
    }
    cleanup_dir(&e);
    return result;
}
