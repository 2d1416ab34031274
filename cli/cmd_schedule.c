/* ptc schedule: generate, validate, simulate and draw pipeline schedules. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ptc/sched.h"

const char ptc_cmd_schedule_help[] =
    "generate, validate, simulate and convert pipeline-parallel schedules\n"
    "\n"
    "usage:\n"
    "  ptc schedule --kind K --stages P --microbatches M [--chunks V] [--k K | --adaptive]\n"
    "               [--cost-f F] [--cost-b B] [--cost-w W] [--comm-latency A]\n"
    "               [--bandwidth X --act-bytes Y] [--bw-trace FILE] [--mem-limit N]\n"
    "               [--emit | --to torch|torch-comms | --json] [--svg F] [--trace F]\n"
    "  ptc schedule --file S.txt [--validate] [--emit | --to torch|torch-comms | --json]\n"
    "  ptc schedule --from torch FILE.csv [--microbatches M] [--validate]\n"
    "               [--emit | --to torch|torch-comms | --json]\n"
    "\n"
    "kinds: gpipe 1f1b interleaved kfkb chimera zb-h1 zb-h2 zb-v zb-interleaved\n"
    "       looped-bfs dualpipev dualpipe\n"
    "  --stages P        pipeline ranks; --chunks V model chunks per rank (interleaved,\n"
    "                    zb-interleaved, looped-bfs; zb-v and dualpipev use 2)\n"
    "  --k K             kfkb group size (1 = 1F1B, M = GPipe); --adaptive picks k by\n"
    "                    simulation under the given links and --mem-limit\n"
    "  --cost-f/-b/-w    forward, full backward, weight-gradient part of a whole stage\n"
    "                    (defaults 1, 2, 0; I = B - W; a chunk costs 1/V of them)\n"
    "  --comm-latency A  per message; --bandwidth X bytes per time unit with\n"
    "                    --act-bytes Y bytes per message; --bw-trace FILE time-varying\n"
    "                    bandwidth (lines 'TIME BYTES_PER_TIME', docs/schedule-format.md).\n"
    "                    The zero-bubble kinds, dualpipe(v) and chimera plan for them\n"
    "  --mem-limit N     largest activation count a rank may hold (whole-stage units)\n"
    "  --emit            print the schedule in the text format (docs/schedule-format.md)\n"
    "  --to torch        print it as torch.distributed.pipelining's action lists (CSV,\n"
    "                    one line per rank, compute actions; its runtime's _load_csv);\n"
    "                    torch-comms adds the sends, receives, waits and gradient\n"
    "                    reductions (format=\"compute_comms\")\n"
    "  --json            print one JSON object (makespan, bubble_fraction,\n"
    "                    peak_activations, ...)\n"
    "  --svg F / --trace F   timeline picture / Chrome-Perfetto trace JSON\n"
    "  --file S.txt      a schedule in the text format; --from torch FILE torch's action\n"
    "                    lists (either form; --microbatches M when the last micro-batches\n"
    "                    have no action). Both are validated (dependencies,\n"
    "                    deadlock-freedom); without --validate also simulated\n"
    "exit status: 0 ok, 1 invalid schedule or failure, 2 usage error\n";

typedef struct opts {
    const char *kind, *file, *svg, *trace, *bw_trace, *from, *to;
    int stages, mbs, chunks, k;
    bool adaptive, emit, json, validate, have_chunks, have_k;
    double mem_limit;
    ptc_sched_costs costs;
} opts;

static int read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ptc_cli_error("cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (n < cap)
            break;
        if (cap >= (size_t)1 << 30) {
            free(buf);
            fclose(f);
            return ptc_cli_error("%s: file too large", path);
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return ptc_cli_error("cannot read %s", path);
    }
    *out = buf;
    *len = n;
    return 0;
}

static int write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return ptc_cli_error("cannot create %s: %s", path, strerror(errno));
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok)
        return ptc_cli_error("cannot write %s", path);
    return 0;
}

static json_t *num(double v)
{
    if (v == floor(v) && fabs(v) < 9e15)
        return json_integer((json_int_t)v);
    return json_real(v);
}

/* Write the picture @p render makes of @p s to @p path (NULL: none asked
 * for). Returns an exit status. */
static int draw(const char *path, int (*render)(const ptc_sched *, const ptc_sched_sim *, char **),
                const ptc_sched *s, const ptc_sched_sim *sim)
{
    if (!path)
        return 0;
    char *t;
    int rc = render(s, sim, &t);
    if (rc)
        return ptc_cli_lib_error(rc);
    rc = write_text(path, t);
    ptc_sched_text_free(t);
    return rc;
}

/* Pictures and figures shared by both modes. Returns an exit status. */
static int outputs(const opts *o, const ptc_sched *s, const ptc_sched_sim *sim, json_t *j)
{
    int P = ptc_sched_ranks(s);
    int rc = draw(o->svg, ptc_sched_svg, s, sim);
    if (!rc)
        rc = draw(o->trace, ptc_sched_trace_json, s, sim);
    if (rc)
        return rc;
    json_t *peaks = json_array(), *busy = json_array();
    for (int r = 0; r < P; r++) {
        json_array_append_new(peaks, num(ptc_sched_sim_peak(sim, r)));
        json_array_append_new(busy, num(ptc_sched_sim_busy(sim, r)));
    }
    json_object_set_new(j, "makespan", num(ptc_sched_sim_makespan(sim)));
    json_object_set_new(j, "bubble_fraction", json_real(ptc_sched_sim_bubble(sim)));
    json_object_set_new(j, "peak_activations", peaks);
    json_object_set_new(j, "busy", busy);
    json_object_set_new(j, "transfers", json_integer((json_int_t)ptc_sched_sim_messages(sim)));
    return 0;
}

static void print_summary(const json_t *j)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)j, key, v)
    {
        if (json_is_object(v))
            continue;
        printf("%s:", key);
        size_t n = json_is_array(v) ? json_array_size(v) : 1;
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
            char *t = json_dumps(x, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(10));
            printf(" %s", json_is_string(x) ? json_string_value(x) : t ? t : "?");
            free(t);
        }
        printf("\n");
    }
}

static int finish_json(const opts *o, json_t *j)
{
    if (o->json) {
        char *t = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(15));
        if (t) {
            printf("%s\n", t);
            free(t);
        }
    } else if (!o->emit && !o->to) {
        print_summary(j);
    }
    json_decref(j);
    return 0;
}

static int check_mem(const opts *o, const ptc_sched *s, const ptc_sched_sim *sim)
{
    if (o->mem_limit <= 0)
        return 0;
    for (int r = 0; r < ptc_sched_ranks(s); r++)
        if (ptc_sched_sim_peak(sim, r) > o->mem_limit + 1e-9)
            return ptc_cli_error("peak activations %g on rank %d exceed --mem-limit %g",
                                 ptc_sched_sim_peak(sim, r), r, o->mem_limit);
    return 0;
}

static json_t *describe(const ptc_sched *s)
{
    json_t *j = json_object();
    size_t actions = 0;
    for (int r = 0; r < ptc_sched_ranks(s); r++) {
        size_t n;
        ptc_sched_actions(s, r, &n);
        actions += n;
    }
    if (ptc_sched_kind(s)[0])
        json_object_set_new(j, "kind", json_string(ptc_sched_kind(s)));
    json_object_set_new(j, "ranks", json_integer(ptc_sched_ranks(s)));
    json_object_set_new(j, "stages", json_integer(ptc_sched_stages(s)));
    json_object_set_new(j, "pipes", json_integer(ptc_sched_pipes(s)));
    json_object_set_new(j, "microbatches", json_integer(ptc_sched_microbatches(s)));
    json_object_set_new(j, "chunks", json_integer(ptc_sched_chunks(s, 0)));
    if (ptc_sched_k(s))
        json_object_set_new(j, "k", json_integer(ptc_sched_k(s)));
    json_object_set_new(j, "actions", json_integer((json_int_t)actions));
    return j;
}

/* --emit / --to: the schedule itself on stdout. Returns an exit status. */
static int print_schedule(const opts *o, const ptc_sched *s)
{
    if (!o->emit && !o->to)
        return 0;
    char *t;
    int rc = o->emit ? ptc_sched_format(s, &t, NULL)
                     : ptc_sched_to_torch(s, strcmp(o->to, "torch") ? PTC_SCHED_TORCH_COMMS
                                                                   : PTC_SCHED_TORCH_COMPUTE,
                                          &t, NULL);
    if (rc)
        return ptc_cli_lib_error(rc);
    fputs(t, stdout);
    ptc_sched_text_free(t);
    return 0;
}

/* Simulate a valid schedule @p s and write what the options ask for: the
 * pictures, the --mem-limit check, the schedule (--emit/--to), the figures
 * (@p j, with the description already in it). Takes @p s and @p j.
 * Returns an exit status. */
static int simulate_and_print(const opts *o, ptc_sched *s, json_t *j)
{
    ptc_sched_sim *sim;
    int rc = ptc_sched_simulate(s, &o->costs, &sim);
    if (rc) {
        json_decref(j);
        ptc_sched_destroy(s);
        return ptc_cli_lib_error(rc);
    }
    int st = outputs(o, s, sim, j);
    if (!st)
        st = check_mem(o, s, sim);
    if (!st)
        st = print_schedule(o, s);
    if (!st)
        st = finish_json(o, j);
    else
        json_decref(j);
    ptc_sched_sim_destroy(sim);
    ptc_sched_destroy(s);
    return st;
}

static int run_file(const opts *o)
{
    char *text;
    size_t len;
    int rc = read_file(o->file, &text, &len);
    if (rc)
        return rc;
    ptc_sched *s;
    size_t skipped = 0;
    bool torch = o->from && !strcmp(o->from, "torch");
    rc = torch ? ptc_sched_from_torch(&s, text, len, o->mbs, &skipped)
               : ptc_sched_parse(&s, text, len);
    free(text);
    if (rc)
        return rc == PTC_E_NOMEM ? ptc_cli_lib_error(rc)
                                 : ptc_cli_error("%s: %s", o->file, ptc_last_error());
    ptc_sched_report rep;
    rc = ptc_sched_validate(s, &rep);
    if (rc) {
        int st;
        if (o->json) {
            json_t *j = json_pack("{s:b, s:s, s:s, s:i, s:i}", "valid", 0, "error", rep.message,
                                  "problem", rc == PTC_E_DEADLOCK ? "deadlock" : "dependency",
                                  "rank", rep.rank, "step", rep.step);
            if (rep.grid)
                json_object_set_new(j, "grid", json_string(rep.grid));
            char *t = json_dumps(j, JSON_COMPACT);
            if (t)
                printf("%s\n", t);
            free(t);
            json_decref(j);
        } else if (rep.grid) {
            fputs(rep.grid, stdout);
        }
        st = rc == PTC_E_NOMEM ? ptc_cli_lib_error(rc)
                               : ptc_cli_error("%s: %s", o->file, rep.message);
        ptc_sched_report_clear(&rep);
        ptc_sched_destroy(s);
        return st;
    }
    json_t *j = describe(s);
    json_object_set_new(j, "valid", json_true());
    json_object_set_new(j, "messages", json_integer((json_int_t)rep.messages));
    if (torch) {
        json_object_set_new(j, "source", json_string("torch"));
        json_object_set_new(j, "skipped_actions", json_integer((json_int_t)skipped));
    }
    ptc_sched_report_clear(&rep);
    return simulate_and_print(o, s, j);
}

static int run_generate(const opts *o)
{
    ptc_sched_kind_id kind;
    if (ptc_sched_kind_parse(o->kind, &kind))
        return ptc_cli_usage_error("%s", ptc_last_error());
    bool looped = kind == PTC_SCHED_INTERLEAVED || kind == PTC_SCHED_ZBI ||
                  kind == PTC_SCHED_LOOPED_BFS;
    bool vshape = kind == PTC_SCHED_ZBV || kind == PTC_SCHED_DUALPIPEV;
    if (o->have_chunks && !looped && o->chunks != (vshape ? 2 : 1))
        return ptc_cli_usage_error("--chunks applies to interleaved, zb-interleaved and "
                                   "looped-bfs (zb-v and dualpipev always use 2)");
    if ((o->have_k || o->adaptive) && kind != PTC_SCHED_KFKB)
        return ptc_cli_usage_error("--k and --adaptive apply to --kind kfkb");
    ptc_sched *s = NULL;
    ptc_sched_adaptive ad = {0};
    int rc;
    if (o->adaptive) {
        ad.ranks = o->stages;
        ad.microbatches = o->mbs;
        ad.mem_limit = o->mem_limit;
        rc = ptc_sched_adapt_kfkb(&s, &ad, &o->costs);
    } else {
        ptc_sched_gen g = {kind, o->stages, o->mbs, o->have_chunks ? o->chunks : 1,
                           o->have_k ? o->k : 1, o->costs.f, o->costs.b, o->costs.w};
        if (kind == PTC_SCHED_KFKB && !o->have_k)
            g.k = 1;
        rc = ptc_sched_generate_costed(&s, &g, &o->costs);
    }
    if (rc)
        return rc == PTC_E_NOMEM ? ptc_cli_lib_error(rc) : ptc_cli_error("%s", ptc_last_error());
    ptc_sched_report rep;
    rc = ptc_sched_validate(s, &rep);
    if (rc) {
        int st = ptc_cli_error("generated schedule is invalid: %s", rep.message);
        ptc_sched_report_clear(&rep);
        ptc_sched_destroy(s);
        return st;
    }
    json_t *j = describe(s);
    json_object_set_new(j, "valid", json_true());
    json_object_set_new(j, "messages", json_integer((json_int_t)rep.messages));
    ptc_sched_report_clear(&rep);
    if (o->adaptive) {
        json_object_set_new(j, "adaptive", json_true());
        json_object_set_new(j, "candidates", json_integer(ad.candidates));
    }
    if (o->mem_limit > 0)
        json_object_set_new(j, "mem_limit", num(o->mem_limit));
    return simulate_and_print(o, s, j);
}

static int opt_from(const char *v, void *dest)
{
    if (strcmp(v, "torch") && strcmp(v, "ptc"))
        return ptc_cli_usage_error("schedule: bad value '%s' for --from (torch or ptc)", v);
    *(const char **)dest = v;
    return PTC_CLI_OK;
}

static int opt_to(const char *v, void *dest)
{
    if (strcmp(v, "torch") && strcmp(v, "torch-comms"))
        return ptc_cli_usage_error("schedule: bad value '%s' for --to (torch or torch-comms)", v);
    *(const char **)dest = v;
    return PTC_CLI_OK;
}

#define BAD(opt) "schedule: bad value '%s' for --" opt

int ptc_cmd_schedule(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    ptc_sched_costs_init(&o.costs);
    bool have_bw = false, have_bytes = false;
    const ptc_cli_opt table[] = {
        PTC_CLI_OPT_STR("kind", &o.kind),
        PTC_CLI_OPT_INT("stages", &o.stages, 1, 1 << 14, BAD("stages")),
        PTC_CLI_OPT_INT("microbatches", &o.mbs, 1, 1 << 20, BAD("microbatches")),
        {.name = "chunks", .kind = PTC_CLI_INT, .dest = &o.chunks, .lo = 1, .hi = 1 << 12,
         .bad = BAD("chunks"), .given = &o.have_chunks},
        {.name = "k", .kind = PTC_CLI_INT, .dest = &o.k, .lo = 1, .hi = 1 << 20,
         .bad = BAD("k"), .given = &o.have_k},
        PTC_CLI_OPT_FLAG("adaptive", &o.adaptive),
        PTC_CLI_OPT_DOUBLE("cost-f", &o.costs.f, 0, BAD("cost-f")),
        PTC_CLI_OPT_DOUBLE("cost-b", &o.costs.b, 0, BAD("cost-b")),
        PTC_CLI_OPT_DOUBLE("cost-w", &o.costs.w, 0, BAD("cost-w")),
        PTC_CLI_OPT_DOUBLE("comm-latency", &o.costs.latency, 0, BAD("comm-latency")),
        {.name = "bandwidth", .kind = PTC_CLI_POSITIVE, .dest = &o.costs.bandwidth,
         .bad = BAD("bandwidth"), .given = &have_bw},
        {.name = "act-bytes", .kind = PTC_CLI_DOUBLE, .dest = &o.costs.act_bytes,
         .bad = BAD("act-bytes"), .given = &have_bytes},
        PTC_CLI_OPT_STR("bw-trace", &o.bw_trace),
        PTC_CLI_OPT_POSITIVE("mem-limit", &o.mem_limit, 0, BAD("mem-limit")),
        PTC_CLI_OPT_FLAG("emit", &o.emit),
        PTC_CLI_OPT_CALL("to", opt_to, &o.to),
        PTC_CLI_OPT_JSON(&o.json),
        PTC_CLI_OPT_STR("svg", &o.svg),
        PTC_CLI_OPT_STR("trace", &o.trace),
        PTC_CLI_OPT_STR("file", &o.file),
        PTC_CLI_OPT_FLAG("validate", &o.validate),
        PTC_CLI_OPT_CALL("from", opt_from, &o.from),
        PTC_CLI_OPT_END};
    int next;
    int ret = ptc_cli_parse(argc, argv, 1, table, ptc_cmd_schedule_help, PTC_CLI_ARGS, &next);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (next < argc && o.from && !o.file) /* --from FORMAT FILE */
        o.file = argv[next++];
    if (next < argc)
        return ptc_cli_usage_error("schedule: unexpected argument '%s'", argv[next]);
    if (o.costs.w > o.costs.b)
        return ptc_cli_usage_error("schedule: --cost-w must not exceed --cost-b");
    if ((have_bw || o.bw_trace) && !have_bytes)
        return ptc_cli_usage_error("schedule: --bandwidth and --bw-trace need --act-bytes");
    if (have_bw && o.bw_trace)
        return ptc_cli_usage_error("schedule: give --bandwidth or --bw-trace, not both");
    if ((o.emit != 0) + (o.json != 0) + (o.to != NULL) > 1)
        return ptc_cli_usage_error("schedule: --emit, --to and --json all write stdout; pick one");
    if (o.have_k && o.adaptive)
        return ptc_cli_usage_error("schedule: give --k or --adaptive, not both");
    if (o.from && !o.file)
        return ptc_cli_usage_error("schedule: --from %s needs a FILE", o.from);
    if (o.file) {
        bool torch = o.from && !strcmp(o.from, "torch");
        if (o.kind || o.stages || (o.mbs && !torch) || o.have_chunks || o.have_k || o.adaptive)
            return ptc_cli_usage_error("schedule: --file and --from do not combine with --kind, "
                                       "--stages, --chunks, --k or --adaptive (--microbatches "
                                       "only with --from torch)");
    } else {
        if (o.validate)
            return ptc_cli_usage_error("schedule: --validate needs --file");
        if (!o.kind || !o.stages || !o.mbs)
            return ptc_cli_usage_error("schedule: --kind, --stages and --microbatches are "
                                       "required (or --file)");
    }
    ptc_sched_bw_trace *tr = NULL;
    if (o.bw_trace) {
        char *text;
        size_t len;
        int rc = read_file(o.bw_trace, &text, &len);
        if (rc)
            return rc;
        rc = ptc_sched_bw_trace_parse(&tr, text, len);
        free(text);
        if (rc)
            return ptc_cli_error("%s: %s", o.bw_trace, ptc_last_error());
        o.costs.trace = tr;
    }
    int st = o.file ? run_file(&o) : run_generate(&o);
    ptc_sched_bw_trace_destroy(tr);
    return st;
}
