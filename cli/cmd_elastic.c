/* ptc elastic: keep a `ptc train` job running under mpirun on the slots that
 * are available (docs/elastic.md). The supervisor is the library's
 * (include/ptc/elastic.h, exec/model/elastic_supervisor.c: it starts mpirun
 * and talks no MPI, so the light `ptc` runs it); this command parses the
 * options and the train command, and prints the job's output and the
 * supervisor's events. */
#include <getopt.h>
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
    e->o.total_steps = (int64_t)u;
    targ(e, "--save-every", &present);
    if (!present)
        return ptc_cli_usage_error("elastic: the train command needs --save-every K (the "
                                   "versions a failure restarts from)");
    targ(e, "--timeout", &e->o.train_timeout);
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
    ptc_elastic_opts_init(&e->o);
    int c;
    optind = 1;
    /* '+': stop at the first non-option, so the train command stays untouched */
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            ptc_cli_help(ptc_cmd_elastic_help);
            exit(0);
        case OPT_STORE:
            e->o.store = optarg;
            break;
        case OPT_SLOTS:
            e->slots_arg = optarg;
            e->o.slots_file = NULL;
            if (!ptc_cli_parse_int(optarg, 0, PTC_CONFIG_MAX_WORLD, &e->o.slots)) {
                e->o.slots = -1;
                e->o.slots_file = optarg;
                if ((optarg[0] >= '0' && optarg[0] <= '9' && access(optarg, F_OK)) ||
                    optarg[0] == '-' || !optarg[0])
                    return ptc_cli_usage_error("--slots: expected a number of slots or a file");
            }
            break;
        case OPT_HOSTFILE:
            e->o.hostfile = optarg;
            break;
        case OPT_MIN:
            if (!ptc_cli_parse_int(optarg, 1, PTC_CONFIG_MAX_WORLD, &e->o.min_slots))
                return ptc_cli_usage_error("--min-slots: expected a positive number");
            break;
        case OPT_TP:
        case OPT_PP:
            if (!parse_degree(optarg, c == OPT_TP ? &e->o.want.tp : &e->o.want.pp))
                return ptc_cli_usage_error("--%s: expected a positive number or auto",
                                           c == OPT_TP ? "tp" : "pp");
            break;
        case OPT_ZERO:
            e->o.want.zero = true;
            break;
        case OPT_WATCH: {
            char *end;
            e->o.watchdog = strtod(optarg, &end);
            if (end == optarg || *end || !isfinite(e->o.watchdog) || e->o.watchdog <= 0)
                return ptc_cli_usage_error("--watchdog: expected seconds > 0");
            break;
        }
        case OPT_MAXR:
            if (!ptc_cli_parse_int(optarg, 0, 1 << 20, &e->o.max_restarts))
                return ptc_cli_usage_error("--max-restarts: expected a number >= 0");
            break;
        case OPT_MPIRUN:
            e->o.mpirun = optarg;
            break;
        case OPT_JSON:
            e->json = true;
            break;
        case OPT_ONLINE:
            e->o.online = true;
            break;
        case OPT_CHOOSE:
            if (strcmp(optarg, "rule") && strcmp(optarg, "search"))
                return ptc_cli_usage_error("--choose: expected rule or search, got '%s'", optarg);
            e->o.search = !strcmp(optarg, "search");
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
                e->o.cluster.flops = d * 1e12;
            else if (c == OPT_MEM)
                e->o.cluster.mem_bytes = d * (double)(1ull << 30);
            else if (c == OPT_INTRA_BW)
                e->o.cluster.intra_bw = d * 1e9;
            else
                e->o.cluster.inter_bw = d * 1e9;
            break;
        }
        default:
            return ptc_cli_bad_option(argv);
        }
    }
    if (!e->o.store || !*e->o.store)
        return ptc_cli_usage_error("elastic: --store DIR is required");
    if (!e->slots_arg && !e->o.hostfile)
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
    e->o.prog = prog;
    e->targs = argv + optind + 2;
    e->ntargs = argc - optind - 2;
    struct stat sb;
    if (stat(e->o.store, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ptc_cli_usage_error("elastic: --store %s: no such store (ingest the job's dataset "
                                   "or import a model first)", e->o.store);
    return check_train_args(e);
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
        log_json(o);
        return;
    }
    char how[96];
    if (v->online)
        snprintf(how, sizeof how, "online (in memory)");
    else
        snprintf(how, sizeof how, "resumed version %llu (step %lld)",
                 (unsigned long long)v->version, (long long)v->resumed_step);
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
        if (e->json)
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
    if (rc != PTC_CLI_OK)
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
