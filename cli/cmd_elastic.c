/* ptc elastic: keep a `ptc train` job running under mpirun on the slots that
 * are available (docs/elastic.md). The supervisor is the library's
 * (include/ptc/elastic.h, exec/model/elastic_supervisor.c: it starts mpirun
 * and talks no MPI, so the light `ptc` runs it); this command parses the
 * options and the train command, and prints the job's output and the
 * supervisor's events. */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ptc/elastic.h"
#include "ptc/exec_model.h"

const char ptc_cmd_elastic_help[] =
    "keep a ptc train job running on the available slots (restart, rescale)\n"
    "\n"
    "usage: ptc elastic --store DIR (--slots N|FILE | --hostfile F) [--min-slots M]\n"
    "         [--max-slots N] [--tp T|auto] [--pp P|auto] [--zero] [--choose rule|search]\n"
    "         [--tflops X] [--mem GIB] [--intra-bw GBPS] [--inter-bw GBPS]\n"
    "         [--watchdog SEC] [--max-restarts N] [--mpirun PATH] [--online] [--json]\n"
    "         -- ptc train ARGS\n"
    "\n"
    "  --store DIR     the job's store (it must exist: ingest the dataset first); the\n"
    "                  job saves there and every relaunch resumes from its newest\n"
    "                  version\n"
    "  --slots N|FILE  slots (processes) available: a number, or a file holding one\n"
    "                  line with a number that is watched; with --hostfile, at most\n"
    "                  this many of its slots\n"
    "  --hostfile F    Open MPI hostfile (`host slots=N` lines), watched; without it\n"
    "                  every slot is on this host\n"
    "                  Change a watched file by rename (echo 8 > F.tmp && mv F.tmp F):\n"
    "                  a file without its final newline is being written and is read\n"
    "                  again later; one that is not a regular file, or not valid, is\n"
    "                  refused at the start and, while the job runs, said and ignored\n"
    "  --min-slots M   fail when fewer than M slots remain (default 1)\n"
    "  --max-slots N   the most slots a launch uses (default: without --hostfile 8 per\n"
    "                  CPU of this host and at least 64; with it, its slots); more\n"
    "                  slots given is an error\n"
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
    "and --control, so ARGS must not give them, nor --resize, --json, --resume-any,\n"
    "--resume-from or --until-step.\n"
    "With --replicas K in ARGS (a store on each host, at the --store path) the\n"
    "controller reads no store: each launch runs --until-step N --resume\n"
    "--resume-any and the hosts agree on the version; when every copy of some\n"
    "shards is lost the job's error names them, and with --persist DIR in ARGS\n"
    "the job is relaunched from that tier (--resume-from DIR), else the run ends;\n"
    "--online resizes such a job in memory too (its saves then span the hosts of\n"
    "the running ranks).\n"
    "A failure (a process dies, mpirun fails) restarts from the newest version on\n"
    "the slots left (a dead process's slot is dropped until the slots file or\n"
    "hostfile changes; a lost host's all of them; after a launch that fails before\n"
    "its first step naming no process, every host that cannot run `PTC --version`\n"
    "through --mpirun within 10 s); a change of the slots file or hostfile stops\n"
    "the job at the next step boundary (it saves) and relaunches it under the new\n"
    "configuration.\n"
    "Every reconfiguration is one line `elastic: REASON at step K: OLD -> NEW ...`\n"
    "with the version resumed from, the steps lost and the downtime split into\n"
    "detect, save, plan, load and restart seconds (with --online, an in-memory\n"
    "resize: detect, plan, move and restart = the rebuild of the groups).\n";

#define MAX_ARGS 256

typedef struct elastic {
    ptc_elastic_opts o;
    const char *slots_arg;               /* --slots N|FILE */
    bool json;
    char self[PATH_MAX];
    char **targs;                        /* ARGS after `ptc train` */
    int ntargs;
} elastic;

static volatile int got_signal;
static void on_signal(int sig)
{
    got_signal = sig;
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
                                        "--control", "--resize", "--json", "--resume-any",
                                        "--resume-from", "--until-step"};
    bool present;
    for (size_t i = 0; i < sizeof owned / sizeof *owned; i++) {
        targ(e, owned[i], &present);
        if (present)
            return ptc_cli_usage_error("elastic: the train command must not give %s "
                                       "(ptc elastic sets it)", owned[i]);
    }
    const char *v = targ(e, "--steps", &present);
    uint64_t u;
    if (!present || !ptc_cli_parse_u64(v, &u) || u < 1 || u > (1u << 24))
        return ptc_cli_usage_error("elastic: the train command needs --steps N (the job's total "
                                   "steps, 1..2^24 as ptc train takes)");
    e->o.total_steps = (int64_t)u;
    targ(e, "--save-every", &present);
    if (!present)
        return ptc_cli_usage_error("elastic: the train command needs --save-every K (the "
                                   "versions a failure restarts from)");
    targ(e, "--timeout", &e->o.train_timeout);
    /* --replicas K: a store on each host, which the controller cannot read */
    v = targ(e, "--replicas", &present);
    int k = -1;
    if (present && (!v || !ptc_cli_parse_int(v, 0, 1 << 20, &k)))
        return ptc_cli_usage_error("elastic: --replicas: expected a number of copies >= 0");
    e->o.replicas = k;
    v = targ(e, "--persist", &present);
    if (present && (!v || !*v))
        return ptc_cli_usage_error("elastic: --persist: expected a directory");
    e->o.persist = present ? v : NULL;
    ptc_exec_model_cfg m = {.layers = 4, .hidden = 16, .vocab = 32, .tokens = 8};
    v = targ(e, "--model", &present);
    if (present && (!v || ptc_exec_model_parse(&m, v) != PTC_OK))
        return ptc_cli_usage_error("elastic: --model: %s", ptc_last_error());
    e->o.want.layers = m.layers;
    e->o.want.hidden = m.hidden;
    e->o.want.vocab = m.vocab;
    e->o.want.tokens = m.tokens;
    v = targ(e, "--schedule", &present);
    ptc_sched_kind_id kind;
    bool is_kind = present && v && ptc_sched_kind_parse(v, &kind) == PTC_OK;
    if (is_kind)
        e->o.want.schedule = kind;

    /* the CUDA model runs tp=1 and zero=0: auto means tp=1 for it */
    v = targ(e, "--device", &present);
    if (present && v && !strcmp(v, "cuda")) {
        if (e->o.want.tp > 1)
            return ptc_cli_usage_error("elastic: --tp %d: the cuda model (--device cuda) runs "
                                       "tp=1", e->o.want.tp);
        if (e->o.want.zero)
            return ptc_cli_usage_error("elastic: --zero: the cuda model (--device cuda) runs "
                                       "zero=0");
        e->o.want.tp = 1;
    }
    v = targ(e, "--microbatches", &present);
    int mb = 0;
    if (present && (!v || !ptc_cli_parse_int(v, 1, 1 << 16, &mb)))
        return ptc_cli_usage_error("elastic: --microbatches: expected 1..65536");
    e->o.want.microbatches = mb;
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

static int opt_slots(const char *v, void *dest)
{
    elastic *e = dest;
    e->slots_arg = v;
    e->o.slots_file = NULL;
    if (ptc_cli_parse_int(v, 0, PTC_CONFIG_MAX_WORLD, &e->o.slots))
        return PTC_CLI_OK;
    e->o.slots = -1;
    e->o.slots_file = v;
    if ((v[0] >= '0' && v[0] <= '9' && access(v, F_OK)) || v[0] == '-' || !v[0])
        return ptc_cli_usage_error("--slots: expected a number of slots or a file");
    return PTC_CLI_OK;
}

/* --tp, --pp: a degree or auto (0) */
static int opt_degree(const char *v, int *out, const char *name)
{
    if (!strcmp(v, "auto")) {
        *out = 0;
        return PTC_CLI_OK;
    }
    if (!ptc_cli_parse_int(v, 1, PTC_CONFIG_MAX_WORLD, out))
        return ptc_cli_usage_error("--%s: expected a positive number or auto", name);
    return PTC_CLI_OK;
}
static int opt_tp(const char *v, void *dest) { return opt_degree(v, dest, "tp"); }
static int opt_pp(const char *v, void *dest) { return opt_degree(v, dest, "pp"); }

static int opt_watchdog(const char *v, void *dest)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !isfinite(d) || d <= 0)
        return ptc_cli_usage_error("--watchdog: expected seconds > 0");
    *(double *)dest = d;
    return PTC_CLI_OK;
}

static int opt_choose(const char *v, void *dest)
{
    if (strcmp(v, "rule") && strcmp(v, "search"))
        return ptc_cli_usage_error("--choose: expected rule or search, got '%s'", v);
    *(bool *)dest = !strcmp(v, "search");
    return PTC_CLI_OK;
}

/* A figure of the cluster (--tflops, --mem, --intra-bw, --inter-bw): a
 * positive number up to 1e12 in the option's unit. */
static int opt_figure(const char *v, double *dest, const char *name, double unit)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !isfinite(d) || d <= 0 || d > 1e12)
        return ptc_cli_usage_error("--%s: expected a positive number, got '%s'", name, v);
    *dest = d * unit;
    return PTC_CLI_OK;
}
static int opt_tflops(const char *v, void *dest) { return opt_figure(v, dest, "tflops", 1e12); }
static int opt_mem(const char *v, void *dest)
{
    return opt_figure(v, dest, "mem", (double)(1ull << 30));
}
static int opt_intra(const char *v, void *dest) { return opt_figure(v, dest, "intra-bw", 1e9); }
static int opt_inter(const char *v, void *dest) { return opt_figure(v, dest, "inter-bw", 1e9); }

static int parse_args(int argc, char **argv, elastic *e)
{
    ptc_elastic_opts_init(&e->o);
    ptc_elastic_opts *o = &e->o;
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STORE(&o->store),
        PTC_CLI_OPT_CALL("slots", opt_slots, e),
        PTC_CLI_OPT_STR("hostfile", &o->hostfile),
        PTC_CLI_OPT_INT("min-slots", &o->min_slots, 1, PTC_CONFIG_MAX_WORLD,
                        "--min-slots: expected a positive number"),
        PTC_CLI_OPT_INT("max-slots", &o->max_slots, 1, PTC_CONFIG_MAX_WORLD,
                        "--max-slots: expected a positive number"),
        PTC_CLI_OPT_CALL("tp", opt_tp, &o->want.tp),
        PTC_CLI_OPT_CALL("pp", opt_pp, &o->want.pp),
        PTC_CLI_OPT_FLAG("zero", &o->want.zero),
        PTC_CLI_OPT_CALL("watchdog", opt_watchdog, &o->watchdog),
        PTC_CLI_OPT_INT("max-restarts", &o->max_restarts, 0, 1 << 20,
                        "--max-restarts: expected a number >= 0"),
        PTC_CLI_OPT_STR("mpirun", &o->mpirun),
        PTC_CLI_OPT_JSON(&e->json),
        PTC_CLI_OPT_CALL("choose", opt_choose, &o->search),
        PTC_CLI_OPT_CALL("tflops", opt_tflops, &o->cluster.flops),
        PTC_CLI_OPT_CALL("mem", opt_mem, &o->cluster.mem_bytes),
        PTC_CLI_OPT_CALL("intra-bw", opt_intra, &o->cluster.intra_bw),
        PTC_CLI_OPT_CALL("inter-bw", opt_inter, &o->cluster.inter_bw),
        PTC_CLI_OPT_FLAG("online", &o->online),
        PTC_CLI_OPT_END};
    /* in order: the options stop at the first operand, so the train command
     * stays untouched */
    int next;
    int rc = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_elastic_help,
                           PTC_CLI_ARGS | PTC_CLI_IN_ORDER, &next);
    if (rc != PTC_CLI_CONTINUE)
        return rc;
    if (!e->o.store || !*e->o.store)
        return ptc_cli_usage_error("elastic: --store DIR is required");
    if (!e->slots_arg && !e->o.hostfile)
        return ptc_cli_usage_error("elastic: no slots: give --slots N|FILE or --hostfile F");
    if (next >= argc || strcmp(argv[next - 1], "--"))
        return ptc_cli_usage_error("elastic: expected -- ptc train ARGS after the options");
    if (argc - next < 2 || strcmp(argv[next + 1], "train"))
        return ptc_cli_usage_error("elastic: the command after -- must be `ptc train ARGS`");
    if (argc - next - 2 > MAX_ARGS)
        return ptc_cli_usage_error("elastic: more than %d train arguments", MAX_ARGS);
    const char *prog = argv[next];
    if (!strchr(prog, '/')) {
        /* the same binary as this one, found without PATH */
        ssize_t n = readlink("/proc/self/exe", e->self, sizeof e->self - 1);
        if (n > 0) {
            e->self[n] = 0;
            prog = e->self;
        }
    }
    e->o.prog = prog;
    e->targs = argv + next + 2;
    e->ntargs = argc - next - 2;
    rc = check_train_args(e);
    if (rc != PTC_CLI_OK)
        return rc;
    struct stat sb; /* with --replicas the store is each host's: this one's may not exist */
    if (e->o.replicas < 0 && (stat(e->o.store, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        return ptc_cli_usage_error("elastic: --store %s: no such store (ingest the job's dataset "
                                   "or import a model first)", e->o.store);
    return PTC_CLI_CONTINUE;
}

/* ---- printing ----------------------------------------------------------------------- */

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

/* One reconfiguration: the restart path names the version it resumed from;
 * the parts add up to the downtime. */
static void print_reconfig(const ptc_elastic_event *v, bool json)
{
    if (json) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:s, s:s, s:i, s:I, s:I, s:f, s:f, s:f, s:f, "
                              "s:f, s:f, s:f}",
                              "event", "reconfigure", "reason", v->reason, "path",
                              v->online ? "online" : "restart", "step", (json_int_t)v->step,
                              "from", v->from, "to", v->config, "slots", v->slots,
                              "resumed_step", (json_int_t)v->resumed_step, "steps_lost",
                              (json_int_t)v->steps_lost, "downtime_s", v->downtime, "detect_s",
                              v->detect, "save_s", v->save, "plan_s", v->plan, "move_s",
                              v->move, "load_s", v->load, "restart_s", v->restart);
        if (o && !v->online)
            json_object_set_new(o, "version", json_integer((json_int_t)v->version));
        if (o && v->from_persist)
            json_object_set_new(o, "from_persist", json_string(v->persist));
        log_json(o);
        return;
    }
    char how[PATH_MAX + 96];
    if (v->online)
        snprintf(how, sizeof how, "online (in memory)");
    else
        snprintf(how, sizeof how, "resumed version %llu (step %lld)%s%s",
                 (unsigned long long)v->version, (long long)v->resumed_step,
                 v->from_persist ? " from the persistent tier " : "",
                 v->from_persist ? v->persist : "");
    log_text("%s at step %lld: %s -> %s on %d slots, %s, %lld steps lost, downtime %.3f s "
             "(detect %.3f, save %.3f, plan %.3f, %s %.3f, restart %.3f)",
             v->reason, (long long)v->step, v->from, v->config, v->slots, how,
             (long long)v->steps_lost, v->downtime, v->detect, v->save, v->plan,
             v->online ? "move" : "load", v->online ? v->move : v->load, v->restart);
}

static void on_event(const ptc_elastic_event *v, void *user)
{
    const elastic *e = user;
    switch (v->kind) {
    case PTC_ELASTIC_START:
        if (e->json && v->node_local)
            log_json(json_pack("{s:s, s:s, s:i, s:n, s:n, s:I, s:b}", "event", "start", "config",
                               v->config, "slots", v->slots, "version", "step", "total_steps",
                               (json_int_t)v->total_steps, "node_local", 1));
        else if (v->node_local)
            log_text("start: %s on %d slots, from the newest version the hosts' stores "
                     "agree on (a store on each host), until step %lld", v->config, v->slots,
                     (long long)v->total_steps);
        else if (e->json)
            log_json(json_pack("{s:s, s:s, s:i, s:I, s:I, s:I}", "event", "start", "config",
                               v->config, "slots", v->slots, "version", (json_int_t)v->version,
                               "step", (json_int_t)v->step, "total_steps",
                               (json_int_t)v->total_steps));
        else
            log_text("start: %s on %d slots, from version %llu (step %lld), %lld of %lld steps "
                     "to run", v->config, v->slots, (unsigned long long)v->version,
                     (long long)v->step,
                     (long long)(v->total_steps - v->step > 0 ? v->total_steps - v->step : 0),
                     (long long)v->total_steps);
        break;
    case PTC_ELASTIC_RECONFIGURE:
        print_reconfig(v, e->json);
        break;
    case PTC_ELASTIC_FALLBACK:
        if (e->json)
            log_json(json_pack("{s:s, s:s, s:s, s:s}", "event", "fallback", "config", v->config,
                               "detail", v->detail, "persist", v->persist));
        else
            log_text("every copy of some shards is lost (%s): resuming from the persistent "
                     "tier %s", v->detail, v->persist);
        break;
    case PTC_ELASTIC_DONE:
        if (e->json)
            log_json(json_pack("{s:s, s:I, s:I, s:s, s:i, s:i}", "event", "done", "step",
                               (json_int_t)v->step, "version", (json_int_t)v->version, "config",
                               v->config, "reconfigurations", v->reconfigurations, "failures",
                               v->failures));
        else
            log_text("done: step %lld, version %llu, %s, %d reconfigurations (%d failures)",
                     (long long)v->step, (unsigned long long)v->version, v->config,
                     v->reconfigurations, v->failures);
        break;
    }
}

/* The job's lines: its stdout on ours (on stderr with --json, which keeps
 * stdout for the events), its stderr on ours. */
static void on_output(const char *line, bool is_stderr, void *user)
{
    const elastic *e = user;
    FILE *to = is_stderr || e->json ? stderr : stdout;
    fprintf(to, "%s\n", line);
    fflush(to);
}

/* ---- the command ---------------------------------------------------------------------- */

int ptc_cmd_elastic(int argc, char **argv)
{
    ptc_cli_init();
    static elastic e;
    memset(&e, 0, sizeof e);
    int rc = parse_args(argc, argv, &e);
    if (rc != PTC_CLI_CONTINUE)
        return rc;
    drop_steps(&e);
    e.o.train_args = (const char *const *)e.targs;
    e.o.ntrain_args = e.ntargs;
    e.o.stop = &got_signal;
    e.o.on_event = on_event;
    e.o.on_output = on_output;
    e.o.user = &e;
    ptc_elastic *sup = NULL;
    rc = ptc_elastic_create(&sup, &e.o);
    if (rc != PTC_OK)
        return rc == PTC_E_INVAL || rc == PTC_E_CONFIG
                   ? ptc_cli_usage_error("elastic: %s", ptc_last_error())
                   : ptc_cli_lib_error(rc);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    ptc_elastic_result res;
    rc = ptc_elastic_run(sup, &res);
    ptc_elastic_destroy(sup);
    if (rc != PTC_OK)
        return ptc_cli_lib_error(rc);
    if (res.stopped && res.stopped_job)
        return ptc_cli_error("stopped by a signal at step %lld; the newest version is %llu "
                             "(step %lld)", (long long)res.at_step,
                             (unsigned long long)res.version, (long long)res.step);
    if (res.stopped)
        return ptc_cli_error("stopped by a signal before the relaunch; the newest version is "
                             "%llu (step %lld)", (unsigned long long)res.version,
                             (long long)res.step);
    return PTC_CLI_OK;
}
