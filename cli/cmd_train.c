/* ptc train: run the pipeline runtime on the demo model (or fake compute). */
#include <signal.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "ptc/train.h"

const char ptc_cmd_train_help[] =
    "train the demo model with a pipeline schedule (under mpirun, or alone)\n"
    "\n"
    "usage: [mpirun -np N] ptc train --config dp=D,tp=T,pp=P[,zero=1] --schedule KIND|FILE\n"
    "         --microbatches M --steps S [--chunks V] [--k K]\n"
    "         [--model mlp:layers=L,hidden=H,vocab=V[,tokens=N]] [--seed X]\n"
    "         [--data synthetic|tokens:FILE|dataset:NAME|mount:MNT/datasets/NAME]\n"
    "         [--store DIR [--save-every N [--save-async]] [--resume [--version V|--resume-any]]\n"
    "          [--resume-from DIR] [--until-step N]\n"
    "          [--replicas K [--persist DIR [--persist-every N]] [--keep-local M]]]\n"
    "         [--resize STEP:CFG[,STEP:CFG...]] [--control FILE]\n"
    "         [--device cpu|cuda] [--lr LR]\n"
    "         [--timeout SEC] [--fake-compute [--unit-ms U] [--cost-f F]\n"
    "         [--cost-b B] [--cost-w W] [--act-bytes N]] [--jitter MS]\n"
    "         [--prepost N] [--overlap-reduce] [--json]\n"
    "\n"
    "  KIND         1f1b gpipe interleaved kfkb zb-h1 zb-h2 zb-v zb-interleaved\n"
    "               looped-bfs dualpipev dualpipe chimera; or a schedule text file\n"
    "               (docs/schedule-format.md; torch's: ptc schedule --from torch\n"
    "               F.csv --emit), validated before any process communicates\n"
    "  --config     tp > 1: Megatron-style tensor parallelism (up_proj column-,\n"
    "               down_proj row-parallel; the rules preset ptc-mlp); zero=1: AdamW\n"
    "               moments sharded over the data-parallel replicas\n"
    "  --microbatches M  per data-parallel replica; a step trains on D*M of them\n"
    "               (the global batch, in sequences)\n"
    "  --model      default mlp:layers=4,hidden=16,vocab=32,tokens=8\n"
    "  --data       synthetic (default; from --seed), tokens:FILE (little-endian\n"
    "               u16 tokens, windows of tokens+1), dataset:NAME (a dataset of\n"
    "               --store: step k reads this replica's part of global batch k of\n"
    "               the epoch order of seed --seed, one record per micro-batch:\n"
    "               tokens:u16:LEN windows with LEN = tokens+1, or byte records\n"
    "               (lines, jsonl, ...) read one byte per token, vocab >= 256) or\n"
    "               mount:MNT/datasets/NAME (the same through a ptc mount's step\n"
    "               files). A partial last batch of an epoch is skipped\n"
    "  --store DIR  the job's store: its datasets, checkpoints, the version to resume\n"
    "  --save-every N  save the whole training state to --store every N steps and\n"
    "               after the last (0: after the last only): parameters, AdamW\n"
    "               moments and the training-state record (step, configuration,\n"
    "               seed, epoch and sample position), each process writing its own\n"
    "               shards under the ptc-mlp rules (docs/checkpoint.md); the final\n"
    "               parameters as one file: --save-every 0, then ptc export --store\n"
    "               DIR --out FILE --params-only\n"
    "  --save-async   the --save-every saves before the last in the background: a\n"
    "               step waits only for a copy of the state, the version commits at\n"
    "               the first step boundary after its writes (at the latest before\n"
    "               the next save, a resize or the end); with --replicas the whole\n"
    "               cross-host save runs in the background (MPI_THREAD_MULTIPLE;\n"
    "               without it the saves block) and commits before the next\n"
    "               save begins\n"
    "  --resize STEP:CFG[,STEP:CFG...]  online resizes: at the start of step STEP\n"
    "               the job moves to CFG in memory (parameters, AdamW moments, step,\n"
    "               data position) by the minimal plan; start it with processes for\n"
    "               its largest configuration (the others wait); one stage per\n"
    "               process (1f1b, gpipe, kfkb, zb-h1)\n"
    "  --control FILE  read at every step boundary by rank 0: a line `resize CFG`\n"
    "               resizes online at the next step, `stop` saves (with --store) and\n"
    "               ends the job; the file is removed once read. Write it by rename\n"
    "               (echo stop > FILE.tmp && mv FILE.tmp FILE): a file without its\n"
    "               final newline is looked at again at the next step; a request\n"
    "               the job cannot do, garbage, or what is no regular file is said\n"
    "               and ignored. SIGUSR1 (which mpirun forwards) does what `stop`\n"
    "               does\n"
    "  --resume     start from the newest version of --store (--version V: that one),\n"
    "               whatever configuration saved it: parameters and moments are read\n"
    "               for this job's configuration; the step count and the data seed\n"
    "               and position continue (the next unseen sample, for any --config\n"
    "               and global batch); --steps more steps are run\n"
    "  --resume-any  with --resume: stores without a version yet are no error (the\n"
    "               job starts at step 0); ptc elastic resumes node-local stores so\n"
    "  --resume-from DIR  resume from the ordinary store DIR (a --persist tier) and\n"
    "               go on saving into --store (ptc elastic's fallback when every copy\n"
    "               of a shard is lost)\n"
    "  --until-step N  instead of --steps: run until step N (a resume at step S runs\n"
    "               N - S steps; none when it is there)\n"
    "  --replicas K  --store DIR names a store on each host (the same path, each\n"
    "               host's own disk; no shared filesystem): each host saves its\n"
    "               ranks' shards there, and copies on the next K hosts (host h's\n"
    "               on hosts h+1..h+K mod H; K < H; 0: no copies); a version is\n"
    "               committed on every host or none; --resume takes what a host\n"
    "               lacks from the others over MPI (docs/checkpoint.md); after an\n"
    "               online resize the saves span the hosts of the running ranks\n"
    "               (more than K of them: a resize to K or fewer hosts is refused)\n"
    "  --persist DIR  with --replicas: also save every N-th version (--persist-every,\n"
    "               default 1) into DIR, one store every host reaches (a shared or\n"
    "               persistent filesystem), as an ordinary store, copied from the\n"
    "               hosts' stores in the background once the version commits (the\n"
    "               next copy waits for it; --keep-local keeps the version read)\n"
    "  --keep-local M  with --replicas: each host keeps the newest M versions\n"
    "               (default 0: all)\n"
    "  --device     cpu (default) or cuda: the model on GPU local-rank mod count,\n"
    "               boundary tensors over NCCL (needs a CUDA+NCCL build and a GPU);\n"
    "               tp=1, zero=0; saves, resumes and resizes through the model's\n"
    "               host copy\n"
    "  --timeout    watchdog: a rank that makes no progress for SEC seconds prints\n"
    "               where it is (in a step: which transfers are pending; between\n"
    "               steps: the data, the decision, a save, a resize...), then\n"
    "               exits 1; set it above the longest save or load\n"
    "  --fake-compute  no model: each action sleeps its simulator cost times U ms\n"
    "               (default 1) and checks that its inputs came from the right place\n"
    "  --jitter MS  extra random sleep in [0, MS) ms before every compute action\n"
    "  --json       one JSON object with per-step records and timings\n"
    "Prints `step K loss X` per step (rank 0). Single process = the reference run.\n";

#define MAX_RESIZES 64

typedef struct cli_train {
    ptc_train_opts o;
    const char *device;
    bool json;
    json_t *steps, *resizes;
    const ptc_train_result *res; /* filled by ptc_train_run before the first step */
    int64_t resize_step[MAX_RESIZES];
    ptc_config resize_cfg[MAX_RESIZES];
} cli_train;

/* --resize STEP:CFG[,STEP:CFG...]; a CFG's own commas are inside it, so a
 * new item starts only at ",<digits>:". */
static int parse_resizes(cli_train *ct, const char *arg)
{
    const char *p = arg;
    int n = 0;
    while (*p) {
        /* STEP: decimal digits, 1..INT64_MAX (the steps of a job are int64_t) */
        size_t nd = strspn(p, "0123456789");
        if (nd == 0 || p[nd] != ':')
            return ptc_cli_usage_error("--resize: expected STEP:CFG[,STEP:CFG...] at '%s'", p);
        char digits[32];
        uint64_t u = 0;
        if (nd >= sizeof digits)
            u = UINT64_MAX;
        else {
            memcpy(digits, p, nd);
            digits[nd] = 0;
            if (!ptc_cli_parse_u64(digits, &u))
                u = UINT64_MAX;
        }
        if (u < 1 || u > INT64_MAX)
            return ptc_cli_usage_error("--resize: step %.*s%s is out of range (1..%lld)",
                                       nd > 24 ? 24 : (int)nd, p, nd > 24 ? "..." : "",
                                       (long long)INT64_MAX);
        int64_t step = (int64_t)u;
        const char *cfg = p + nd + 1, *end = cfg;
        for (;;) {
            end = strchr(end, ',');
            if (!end)
                break;
            const char *q = end + 1;
            while (*q >= '0' && *q <= '9')
                q++;
            if (q > end + 1 && *q == ':')
                break;
            end++;
        }
        size_t len = end ? (size_t)(end - cfg) : strlen(cfg);
        char buf[256];
        if (n >= MAX_RESIZES || len == 0 || len >= sizeof buf)
            return ptc_cli_usage_error("--resize: at most %d items of a sane length", MAX_RESIZES);
        memcpy(buf, cfg, len);
        buf[len] = 0;
        if (ptc_config_parse(&ct->resize_cfg[n], buf) != PTC_OK)
            return ptc_cli_usage_error("--resize: %s", ptc_last_error());
        if (n && step <= ct->resize_step[n - 1])
            return ptc_cli_usage_error("--resize: steps must increase");
        ct->resize_step[n++] = step;
        p = end ? end + 1 : cfg + len;
    }
    ct->o.resize_step = ct->resize_step;
    ct->o.resize_cfg = ct->resize_cfg;
    ct->o.nresize = n;
    return PTC_CLI_OK;
}

/* The job's watchdog saw a wait outside a step that does not end: this
 * process cannot go on (it may be blocked in MPI or in I/O). */
static void on_timeout(const char *where, void *user)
{
    (void)user;
    fflush(stdout);
    fprintf(stderr, "ptc: error: %s\n", where);
    fflush(stderr);
    sleep(1); /* let the other ranks' watchdogs report too */
    _exit(PTC_CLI_FAIL);
}

static volatile int stop_requested;
static void on_sigusr1(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* ---- the options: what the table cannot say itself ---------------------------------- */

static int opt_config(const char *v, void *dest)
{
    cli_train *ct = dest;
    if (ptc_config_parse(&ct->o.cfg, v) != PTC_OK)
        return ptc_cli_usage_error("--config: %s", ptc_last_error());
    return PTC_CLI_OK;
}

static int opt_model(const char *v, void *dest)
{
    if (ptc_exec_model_parse(dest, v) != PTC_OK)
        return ptc_cli_usage_error("--model: %s", ptc_last_error());
    return PTC_CLI_OK;
}

/* --seed: the model's and the data's */
static int opt_seed(const char *v, void *dest)
{
    ptc_train_opts *o = dest;
    uint64_t u;
    if (!ptc_cli_parse_u64(v, &u))
        return ptc_cli_usage_error("--seed: expected a non-negative integer");
    o->model.seed = u;
    o->data_seed = u;
    return PTC_CLI_OK;
}

static int opt_resize(const char *v, void *dest)
{
    return parse_resizes(dest, v) == PTC_CLI_OK ? PTC_CLI_OK : PTC_CLI_USAGE;
}

static int opt_device(const char *v, void *dest)
{
    cli_train *ct = dest;
    if (strcmp(v, "cpu") && strcmp(v, "cuda"))
        return ptc_cli_usage_error("--device: expected cpu or cuda");
    ct->device = v;
    ct->o.cuda = !strcmp(v, "cuda");
    return PTC_CLI_OK;
}

static int opt_act_bytes(const char *v, void *dest)
{
    uint64_t u;
    if (!ptc_cli_parse_u64(v, &u) || u < 32 || u > (1u << 30))
        return ptc_cli_usage_error("--act-bytes: expected 32..2^30");
    *(size_t *)dest = (size_t)u;
    return PTC_CLI_OK;
}

static int opt_lr(const char *v, void *dest)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !isfinite(d) || d < 0 || d > FLT_MAX)
        return ptc_cli_usage_error("--lr: expected a number >= 0 (a float)");
    *(float *)dest = (float)d;
    return PTC_CLI_OK;
}

static int opt_save(const char *v, void *dest)
{
    (void)v;
    (void)dest;
    return ptc_cli_usage_error("--save was removed: use --store DIR --save-every 0 and then "
                               "ptc export --store DIR --out FILE --params-only");
}

/* bounded, so that the sleeps they make (fake compute: cost x unit, the
 * jitter) convert to a timespec without overflow */
#define SLEEP_MAX_MS 1000000
#define COST_MAX 1000000
#define COST_BAD "--cost-*: expected a number, 0..1e6"

static int parse_args(int argc, char **argv, cli_train *ct)
{
    memset(ct, 0, sizeof *ct);
    ptc_train_opts *o = &ct->o;
    ptc_train_opts_init(o);
    ct->device = "cpu";
    bool have_cfg = false;
    int until = 0;
    const ptc_cli_opt opts[] = {
        {.name = "config", .kind = PTC_CLI_CALL, .call = opt_config, .dest = ct,
         .given = &have_cfg},
        PTC_CLI_OPT_STR("schedule", &o->schedule),
        PTC_CLI_OPT_INT("chunks", &o->chunks, 1, 1024, "--chunks: expected 1..1024"),
        PTC_CLI_OPT_INT("k", &o->k, 1, 1 << 20, "--k: expected a positive integer"),
        PTC_CLI_OPT_INT("microbatches", &o->microbatches, 1, 1 << 16,
                        "--microbatches: expected 1..65536"),
        PTC_CLI_OPT_INT("steps", &o->steps, 1, 1 << 24, "--steps: expected a positive integer"),
        PTC_CLI_OPT_CALL("model", opt_model, &o->model),
        PTC_CLI_OPT_CALL("seed", opt_seed, o),
        PTC_CLI_OPT_STR("data", &o->data),
        PTC_CLI_OPT_CALL("device", opt_device, ct),
        PTC_CLI_OPT_DOUBLE("timeout", &o->timeout, 0, "--timeout: expected seconds >= 0"),
        PTC_CLI_OPT_FLAG("fake-compute", &o->fake),
        PTC_CLI_OPT_DOUBLE_MAX("jitter", &o->jitter_ms, 0, SLEEP_MAX_MS,
                               "--jitter: expected milliseconds, 0..1e6"),
        PTC_CLI_OPT_JSON(&ct->json),
        PTC_CLI_OPT_CALL("save", opt_save, NULL),
        PTC_CLI_OPT_DOUBLE_MAX("unit-ms", &o->unit_ms, 0, SLEEP_MAX_MS,
                               "--unit-ms: expected milliseconds, 0..1e6"),
        PTC_CLI_OPT_DOUBLE_MAX("cost-f", &o->cost_f, 0, COST_MAX, COST_BAD),
        PTC_CLI_OPT_DOUBLE_MAX("cost-b", &o->cost_b, 0, COST_MAX, COST_BAD),
        PTC_CLI_OPT_DOUBLE_MAX("cost-w", &o->cost_w, 0, COST_MAX, COST_BAD),
        PTC_CLI_OPT_CALL("act-bytes", opt_act_bytes, &o->act_bytes),
        PTC_CLI_OPT_INT("prepost", &o->prepost, 0, 1 << 20,
                        "--prepost: expected a non-negative integer"),
        PTC_CLI_OPT_FLAG("overlap-reduce", &o->overlap_reduce),
        PTC_CLI_OPT_CALL("lr", opt_lr, &o->model.lr),
        PTC_CLI_OPT_STR("store", &o->store),
        PTC_CLI_OPT_STR("persist", &o->persist),
        PTC_CLI_OPT_INT("save-every", &o->save_every, 0, 1 << 30,
                        "--save-every: expected a number of steps >= 0"),
        PTC_CLI_OPT_FLAG("save-async", &o->save_async),
        PTC_CLI_OPT_FLAG("resume", &o->resume),
        PTC_CLI_OPT_FLAG("resume-any", &o->resume_any),
        PTC_CLI_OPT_STR("resume-from", &o->resume_from),
        PTC_CLI_OPT_INT("until-step", &until, 1, 1 << 24,
                        "--until-step: expected a step 1..2^24"),
        PTC_CLI_OPT_INT("replicas", &o->replicas, 0, 1 << 20,
                        "--replicas: expected a number of copies >= 0"),
        PTC_CLI_OPT_INT("persist-every", &o->persist_every, 1, 1 << 30,
                        "--persist-every: expected a number of versions >= 1"),
        PTC_CLI_OPT_INT("keep-local", &o->keep_local, 0, 1 << 30,
                        "--keep-local: expected a number of versions >= 0"),
        {.name = "version", .kind = PTC_CLI_VERSION, .dest = &o->resume_version,
         .bad = "--version: expected a version number >= 1"},
        PTC_CLI_OPT_CALL("resize", opt_resize, ct),
        PTC_CLI_OPT_STR("control", &o->control),
        PTC_CLI_OPT_END};
    int next;
    int rc = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_train_help, PTC_CLI_ARGS, &next);
    if (rc != PTC_CLI_CONTINUE)
        return rc;
    if (next < argc)
        return ptc_cli_usage_error("train: unexpected argument '%s'", argv[next]);
    if (until > 0 && o->steps)
        return ptc_cli_usage_error("train: --steps and --until-step: give one");
    if (until > 0) {
        o->until_step = until;
        o->steps = until; /* its bound: a resume runs until - S */
    }
    if (o->resume_any && !o->resume)
        return ptc_cli_usage_error("train: --resume-any goes with --resume");
    if (!have_cfg || !o->schedule || !o->microbatches || !o->steps)
        return ptc_cli_usage_error("train: --config, --schedule, --microbatches and --steps "
                                   "are required");
    if (o->resume_version && !o->resume)
        return ptc_cli_usage_error("train: --version is the version --resume starts from");
    return PTC_CLI_CONTINUE;
}

/* ---- the command ---------------------------------------------------------------- */

static int on_step(const ptc_train_step *r, void *user)
{
    cli_train *c = user;
    json_t *rec = json_pack("{s:I, s:f, s:f, s:f, s:f, s:i, s:i}", "step",
                            (json_int_t)r->step, "step_ms",
                            r->step_ms, "actions_ms", r->actions_ms, "reduce_ms", r->reduce_ms,
                            "compute_ms", r->compute_ms, "messages", (json_int_t)r->messages,
                            "peak_buffers", (json_int_t)r->peak_buffers);
    if (!rec)
        return ptc_error_set(PTC_E_NOMEM, "out of memory");
    if (r->has_loss)
        json_object_set_new(rec, "loss", json_real(r->loss));
    if (c->o.fake)
        json_object_set_new(rec, "predicted_ms", json_real(r->predicted_ms));
    json_array_append_new(c->steps, rec);
    if (!c->json && c->res && c->res->resumed_from && r->step == c->res->first_step)
        printf("resumed from version %llu at step %lld, load %.3f ms\n",
               (unsigned long long)c->res->resumed_from, (long long)c->res->first_step,
               c->res->load_seconds * 1e3);
    if (!c->json && c->res && c->res->resumed_from && r->step == c->res->first_step &&
        c->o.replicas >= 0)
        printf("resume moved %llu bytes between hosts (lower bound %llu)\n",
               (unsigned long long)c->res->load_bytes_network,
               (unsigned long long)c->res->load_bytes_network_lower_bound);
    if (!c->json) {
        if (r->has_loss)
            printf("step %lld loss %.9g time %.3f ms\n", (long long)r->step, r->loss,
                   r->step_ms);
        else
            printf("step %lld time %.3f ms (actions %.3f ms, predicted %.3f ms)\n",
                   (long long)r->step, r->step_ms, r->actions_ms, r->predicted_ms);
        fflush(stdout);
    }
    return PTC_OK;
}

static void on_resize(const ptc_train_resize *r, void *user)
{
    cli_train *c = user;
    json_t *rec = json_pack("{s:I, s:s, s:s, s:s, s:f, s:f, s:f, s:I, s:I, s:I, s:I}", "step",
                            (json_int_t)r->step, "reason", r->reason, "from", r->from, "to",
                            r->to, "plan_s", r->plan_seconds, "move_s", r->move_seconds,
                            "rebuild_s", r->rebuild_seconds, "bytes_moved",
                            (json_int_t)r->bytes_moved, "max_process_bytes",
                            (json_int_t)r->max_process_bytes, "peak_rss_bytes",
                            (json_int_t)r->peak_rss_bytes, "version", (json_int_t)r->version);
    if (rec)
        json_array_append_new(c->resizes, rec);
    if (c->json)
        return;
    if (!strcmp(r->reason, "stop"))
        printf("stopped at step %lld (%s)%s", (long long)r->step, r->from,
               r->version ? "" : ", nothing saved\n");
    else
        printf("resize at step %lld (%s): %s -> %s, plan %.3f ms, move %.3f ms, rebuild %.3f "
               "ms, %llu bytes moved (busiest process %llu)\n",
               (long long)r->step, r->reason, r->from, r->to, r->plan_seconds * 1e3,
               r->move_seconds * 1e3, r->rebuild_seconds * 1e3,
               (unsigned long long)r->bytes_moved, (unsigned long long)r->max_process_bytes);
    if (!strcmp(r->reason, "stop") && r->version)
        printf(", saved version %llu\n", (unsigned long long)r->version);
    fflush(stdout);
}

static void print_json(const cli_train *c, const ptc_train *t, int world,
                       const ptc_train_result *res)
{
    char cfgtxt[256];
    ptc_config_format(&c->o.cfg, PTC_CONFIG_STYLE_KEYS, cfgtxt, sizeof cfgtxt);
    json_t *root = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:b, s:O}", "config", cfgtxt,
                             "schedule", ptc_sched_kind(ptc_train_schedule(t)), "device",
                             c->device, "world", world, "microbatches", c->o.microbatches,
                             "actions_rank0", (json_int_t)res->actions_rank0, "fake_compute",
                             c->o.fake, "steps", c->steps);
    json_object_set_new(root, "resumed_from", json_integer((json_int_t)res->resumed_from));
    json_object_set_new(root, "load_s", json_real(res->load_seconds));
    json_object_set_new(root, "load_bytes_network",
                        json_integer((json_int_t)res->load_bytes_network));
    json_object_set_new(root, "load_bytes_network_lower_bound",
                        json_integer((json_int_t)res->load_bytes_network_lower_bound));
    json_object_set_new(root, "saved_version", json_integer((json_int_t)res->last_version));
    json_object_set_new(root, "saves", json_integer((json_int_t)res->saves));
    json_object_set_new(root, "stopped", json_boolean(res->stopped));
    json_object_set_new(root, "last_step", json_integer((json_int_t)res->last_step));
    json_object_set(root, "resizes", c->resizes);
    char *txt = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
    ptc_cli_print_json(txt);
    free(txt);
    json_decref(root);
}

int ptc_cmd_train(int argc, char **argv)
{
    ptc_cli_init();
    cli_train c;
    int rc = parse_args(argc, argv, &c);
    if (rc != PTC_CLI_CONTINUE)
        return rc;
    c.o.stop = &stop_requested;
    c.o.on_resize = on_resize;
    c.o.on_timeout = on_timeout;
    /* Checked before MPI starts: every process fails alike, nothing sent. */
    ptc_train *t = NULL;
    rc = ptc_train_prepare(&t, &c.o);
    if (rc != PTC_OK)
        return rc == PTC_E_INVAL ? ptc_cli_usage_error("%s", ptc_last_error())
                                 : ptc_cli_lib_error(rc);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        /* a background save across hosts and the persistent tier's copy
         * call MPI from a thread of the library: ask for it (the job checks
         * what it got and blocks where it did not) */
        int provided;
        bool threads = c.o.replicas >= 0 && (c.o.save_async || c.o.persist);
        MPI_Init_thread(&argc, &argv, threads ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE,
                        &provided);
    }
    int wrank = 0, wsize = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    c.steps = json_array();
    c.resizes = json_array();
    /* SIGUSR1 (mpirun forwards it to every process): save and stop */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sigaction(SIGUSR1, &sa, NULL);
    ptc_train_result res = {.failed_step = -1};
    c.res = &res;
    rc = c.steps && c.resizes ? ptc_train_run(t, MPI_COMM_WORLD, on_step, &c, &res)
                              : PTC_E_NOMEM;
    if (rc == PTC_E_TIMEOUT) {
        fprintf(stderr, "ptc: error: rank %d: %s\n", wrank, ptc_last_error());
        fflush(stderr);
        sleep(1); /* let the other ranks' watchdogs report too */
        _exit(PTC_CLI_FAIL);
    }
    if (rc != PTC_OK && res.failed_step >= 0) {
        /* a failed step may leave other processes blocked in MPI */
        fprintf(stderr, "ptc: error: rank %d: %s\n", wrank,
                *ptc_last_error() ? ptc_last_error() : ptc_strerror(rc));
        fflush(stdout);
        fflush(stderr);
        if (wsize > 1)
            MPI_Abort(MPI_COMM_WORLD, PTC_CLI_FAIL);
    } else if (rc != PTC_OK) {
        ptc_cli_lib_error(rc); /* every process failed alike */
    } else if (wrank == 0) {
        if (c.o.fake && !c.json)
            printf("fake compute: %lu inputs checked\n", res.fake_checked);
        if (res.saves && !c.json && !res.stopped)
            printf("saved version %llu (step %lld)\n", (unsigned long long)res.last_version,
                   (long long)res.last_step);
        if (c.json)
            print_json(&c, t, wsize, &res);
    }
    json_decref(c.steps);
    json_decref(c.resizes);
    ptc_train_destroy(t);
    MPI_Finalize();
    return rc == PTC_OK ? PTC_CLI_OK : PTC_CLI_FAIL;
}
