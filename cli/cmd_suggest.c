/* ptc suggest: predict step time and memory of parallel configurations and
 * print the best ones (the library's configuration search). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ptc/search.h"
#include "ptc/search_store.h"
#include "ptc/store.h"

const char ptc_cmd_suggest_help[] =
    "suggest a parallel configuration (dp, tp, pp, zero, schedule, micro-batches)\n"
    "\n"
    "usage: ptc suggest (--store DIR [--version V] | --model SPEC) --gpus N\n"
    "         [--gpus-per-host G] [--mem GIB] [--tflops X]\n"
    "         [--intra-bw GBPS --intra-lat US] [--inter-bw GBPS --inter-lat US]\n"
    "         --global-batch B [--top K] [--exhaustive] [--from CFG [--amortize N]]\n"
    "         [--json]\n"
    "\n"
    "  --model SPEC     gpt:layers=L,hidden=H,heads=A,vocab=V,seq=S[,kv_heads=K][,ffn=F]\n"
    "                   [,recompute=selective|none|full], or the demo model of `ptc train`:\n"
    "                   mlp:layers=L,hidden=H,vocab=V[,tokens=N]\n"
    "  --store DIR      describe the model from a stored version (tensors, dtypes and\n"
    "                   placement rules); --version V (default: the newest)\n"
    "  --gpus N         GPUs to use, all of them: dp*tp*pp = N\n"
    "  --gpus-per-host G  consecutive ranks per host (default 8)\n"
    "  --mem GIB        memory per GPU for the job (default 80)\n"
    "  --tflops X       achievable TFLOP/s per GPU (default 150)\n"
    "  --intra-bw/--intra-lat  link inside a host, GB/s and us (default 300, 2)\n"
    "  --inter-bw/--inter-lat  link between hosts per GPU, GB/s and us (default 25, 5)\n"
    "  --global-batch B sequences per optimizer step (gpt) or micro-batches of N tokens\n"
    "                   per step (mlp: a step of `ptc train` trains dp*M of them)\n"
    "  --top K          configurations printed (default 5)\n"
    "  --exhaustive     cost every valid configuration instead of coordinate descent\n"
    "  --from CFG       the job's configuration now: rank by step time plus the move from\n"
    "                   CFG (its whole state, optimizer included) amortised over --amortize\n"
    "                   steps, the move planned from shapes and timed on the links above\n"
    "  --amortize N     steps the new configuration runs for (default 1000)\n"
    "  --json           one JSON object: configs (best first: dp, tp, pp, zero, schedule,\n"
    "                   microbatches, mb_size, step_time_s, memory_bytes, breakdown, ...;\n"
    "                   with --from also move_seconds, move_bytes_network, score_s),\n"
    "                   rejected_for_memory, no_fit, search\n"
    "Prints the best configurations with predicted step time, its breakdown (compute,\n"
    "bubble, tp/dp/pp communication) and memory per GPU, and the faster ones that were\n"
    "rejected for memory. Formulas and assumptions: docs/search.md.\n"
    "exit status: 0 ok, 1 failure or no configuration fits, 2 usage error\n";

/* Candidates the search keeps when --from re-ranks them by the move. */
#define FROM_CANDIDATES 64

static const double GIB = 1073741824.0;

static const char *link_name(bool inter) { return inter ? "inter" : "intra"; }

static json_t *entry_json(const ptc_search_entry *e)
{
    const ptc_search_config *c = &e->config;
    const ptc_cost_result *r = &e->cost;
    char cfg[96];
    snprintf(cfg, sizeof cfg, "dp=%d,tp=%d,pp=%d,zero=%d", c->dp, c->tp, c->pp, c->zero);
    json_t *j = json_object();
    json_object_set_new(j, "dp", json_integer(c->dp));
    json_object_set_new(j, "tp", json_integer(c->tp));
    json_object_set_new(j, "pp", json_integer(c->pp));
    json_object_set_new(j, "zero", json_integer(c->zero));
    json_object_set_new(j, "schedule", json_string(ptc_sched_kind_name(c->schedule)));
    json_object_set_new(j, "microbatches", json_integer(c->microbatches));
    json_object_set_new(j, "mb_size", json_integer(c->mb_size));
    json_object_set_new(j, "chunks", json_integer(c->chunks));
    if (c->schedule == PTC_SCHED_KFKB)
        json_object_set_new(j, "k", json_integer(c->k));
    json_object_set_new(j, "config", json_string(cfg));
    json_object_set_new(j, "step_time_s", json_real(r->step_time));
    json_object_set_new(j, "memory_bytes", json_integer((json_int_t)llround(r->mem)));
    json_object_set_new(j, "fits", json_boolean(r->fits));
    if (!r->fits)
        json_object_set_new(j, "shortfall_bytes", json_integer((json_int_t)llround(r->shortfall)));
    json_object_set_new(j, "breakdown",
                        json_pack("{s:f, s:f, s:f, s:f, s:f}", "compute_s", r->compute,
                                  "bubble_s", r->bubble, "tp_comm_s", r->tp_comm, "dp_comm_s",
                                  r->dp_comm, "pp_comm_s", r->pp_comm));
    json_object_set_new(j, "memory",
                        json_pack("{s:I, s:I, s:I, s:I, s:i}", "params_bytes",
                                  (json_int_t)llround(r->mem_params), "grads_bytes",
                                  (json_int_t)llround(r->mem_grads), "optim_bytes",
                                  (json_int_t)llround(r->mem_optim), "activations_bytes",
                                  (json_int_t)llround(r->mem_act), "pipeline_rank",
                                  r->mem_rank));
    json_object_set_new(j, "peak_activations", json_real(r->peak_activations));
    json_object_set_new(j, "stage_costs_s", json_pack("{s:f, s:f, s:f}", "f", r->stage_f, "b",
                                                      r->stage_b, "w", r->stage_w));
    json_object_set_new(j, "links", json_pack("{s:s, s:s, s:s}", "tp", link_name(r->tp_inter),
                                              "dp", link_name(r->dp_inter), "pp",
                                              link_name(r->pp_inter)));
    return j;
}

static void entry_text(const ptc_search_entry *e, int rank)
{
    const ptc_search_config *c = &e->config;
    const ptc_cost_result *r = &e->cost;
    char sched[32];
    if (c->schedule == PTC_SCHED_INTERLEAVED || c->schedule == PTC_SCHED_ZBI ||
        c->schedule == PTC_SCHED_LOOPED_BFS)
        snprintf(sched, sizeof sched, "%s/%d", ptc_sched_kind_name(c->schedule), c->chunks);
    else if (c->schedule == PTC_SCHED_KFKB)
        snprintf(sched, sizeof sched, "kfkb/%d", c->k);
    else
        snprintf(sched, sizeof sched, "%s", ptc_sched_kind_name(c->schedule));
    char num[16] = "";
    if (rank > 0)
        snprintf(num, sizeof num, "%d", rank);
    printf("%3s %5d %3d %4d %4d  %-14s %6d %4d  %9.4g  %8.3g %8.3g %8.3g %8.3g %8.3g  %8.2f",
           num, c->dp, c->tp, c->pp, c->zero, sched, c->microbatches, c->mb_size, r->step_time,
           r->compute, r->bubble, r->tp_comm, r->dp_comm, r->pp_comm, r->mem / GIB);
    if (!r->fits)
        printf("  (short %.2f GiB)", r->shortfall / GIB);
    printf("\n");
}

static void header(void)
{
    printf("%3s %5s %3s %4s %4s  %-14s %6s %4s  %9s  %8s %8s %8s %8s %8s  %8s\n", "#", "dp",
           "tp", "pp", "zero", "schedule", "M", "mb", "step(s)", "compute", "bubble", "tp",
           "dp", "pp", "mem(GiB)");
}

/* --from: the search's candidates ranked by step time plus the move from
 * the job's configuration (ptc_search_rank_moves). */
static int rank_from(const ptc_search_result *res, const ptc_cost_model *m, const char *store,
                     uint64_t version, const ptc_config *from, const ptc_search_cluster *cl,
                     double amortize, ptc_search_moved **moved, size_t *nmoved)
{
    ptc_search_tensors *t = NULL;
    int rc;
    if (store) {
        ptc_cli_store cs = {.dir = store};
        if ((rc = ptc_cli_store_open(&cs, PTC_CLI_STORE_OPEN, 0)) != PTC_CLI_OK)
            return rc;
        rc = ptc_search_tensors_from_store(&t, cs.s, version);
        ptc_cli_store_close(&cs, false);
    } else {
        rc = ptc_search_tensors_create(&t, m, true);
    }
    if (rc == PTC_OK)
        rc = ptc_search_rank_moves(res, t, from, cl, amortize, moved, nmoved);
    ptc_search_tensors_destroy(t);
    return rc == PTC_OK ? PTC_CLI_OK : ptc_cli_lib_error(rc);
}

static json_t *moved_json(const ptc_search_moved *x)
{
    json_t *j = entry_json(&x->entry);
    json_object_set_new(j, "move_seconds", json_real(x->move.seconds));
    json_object_set_new(j, "move_bytes_network", json_integer((json_int_t)x->move_bytes_network));
    json_object_set_new(j, "score_s", json_real(x->score));
    return j;
}

static void moved_text(const ptc_search_moved *m, size_t n, const char *from, double amortize)
{
    printf("\nranked with the move from %s amortised over %.4g steps (seconds):\n", from,
           amortize);
    printf("%3s %5s %3s %4s %4s  %-14s %9s %9s %12s %9s\n", "#", "dp", "tp", "pp", "zero",
           "schedule", "step", "move", "network_GB", "score");
    for (size_t i = 0; i < n; i++) {
        const ptc_search_config *c = &m[i].entry.config;
        printf("%3zu %5d %3d %4d %4d  %-14s %9.4g %9.4g %12.4g %9.4g\n", i + 1, c->dp, c->tp,
               c->pp, c->zero, ptc_sched_kind_name(c->schedule), m[i].entry.cost.step_time,
               m[i].move.seconds, (double)m[i].move_bytes_network / 1e9, m[i].score);
    }
}

/* What the command line asks for. */
typedef struct suggest_args {
    ptc_cli_store cs; /* cs.dir: --store */
    const char *model;
    uint64_t version;
    bool json, have_from;
    ptc_config from;
    double amortize;
    ptc_search_cluster cl;
    ptc_search_job job;
    ptc_search_opts so;
} suggest_args;

#define NOT_POSITIVE(opt) "--" opt ": expected a positive number, got '%s'"
#define UNIT_MAX 1000000000000ull /* 1e12 of any unit */

/* Returns PTC_CLI_CONTINUE, or the exit status (after the help or an error). */
static int parse_args(int argc, char **argv, suggest_args *a)
{
    ptc_search_cluster_init(&a->cl);
    ptc_search_job_init(&a->job);
    ptc_search_opts_init(&a->so);
    a->amortize = 1000;
    /* The options with a unit, as given: memory in GiB, TFLOP/s, GB/s, us. */
    double mem = 0, tflops = 0, intra_bw = 0, intra_lat = 0, inter_bw = 0, inter_lat = 0;
    uint64_t batch = 0;
    const char *from = NULL;
    bool have_gpus = false;
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STORE(&a->cs.dir),
        PTC_CLI_OPT_VERSION(&a->version),
        PTC_CLI_OPT_STR("model", &a->model),
        {.name = "gpus", .kind = PTC_CLI_INT, .dest = &a->cl.gpus, .lo = 1, .hi = 1 << 20,
         .bad = "--gpus: expected an integer from 1 to 2^20, got '%s'", .given = &have_gpus},
        PTC_CLI_OPT_INT("gpus-per-host", &a->cl.gpus_per_host, 1, 1 << 20,
                        "--gpus-per-host: expected a positive integer, got '%s'"),
        PTC_CLI_OPT_POSITIVE("mem", &mem, UNIT_MAX, NOT_POSITIVE("mem")),
        PTC_CLI_OPT_POSITIVE("tflops", &tflops, UNIT_MAX, NOT_POSITIVE("tflops")),
        PTC_CLI_OPT_POSITIVE("intra-bw", &intra_bw, UNIT_MAX, NOT_POSITIVE("intra-bw")),
        PTC_CLI_OPT_POSITIVE("intra-lat", &intra_lat, UNIT_MAX, NOT_POSITIVE("intra-lat")),
        PTC_CLI_OPT_POSITIVE("inter-bw", &inter_bw, UNIT_MAX, NOT_POSITIVE("inter-bw")),
        PTC_CLI_OPT_POSITIVE("inter-lat", &inter_lat, UNIT_MAX, NOT_POSITIVE("inter-lat")),
        PTC_CLI_OPT_U64("global-batch", &batch, 1, 1ull << 40,
                        "--global-batch: expected an integer from 1 to 2^40, got '%s'"),
        PTC_CLI_OPT_INT("top", &a->so.top, 1, 1 << 16,
                        "--top: expected a positive integer, got '%s'"),
        PTC_CLI_OPT_FLAG("exhaustive", &a->so.exhaustive),
        PTC_CLI_OPT_JSON(&a->json),
        PTC_CLI_OPT_STR("from", &from),
        PTC_CLI_OPT_DOUBLE_MAX("amortize", &a->amortize, 1, UNIT_MAX,
                               "--amortize: expected a number of steps >= 1, got '%s'"),
        PTC_CLI_OPT_END};
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_suggest_help, 0, NULL);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    const struct {
        double given, scale, *dest;
    } units[] = {{mem, GIB, &a->cl.mem_bytes},      {tflops, 1e12, &a->cl.flops},
                 {intra_bw, 1e9, &a->cl.intra_bw},  {intra_lat, 1e-6, &a->cl.intra_lat},
                 {inter_bw, 1e9, &a->cl.inter_bw},  {inter_lat, 1e-6, &a->cl.inter_lat}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (units[i].given > 0) /* 0: not given (a given value is positive) */
            *units[i].dest = units[i].given * units[i].scale;
    a->job.global_batch = (int64_t)batch;
    if (from && ptc_config_parse(&a->from, from) != PTC_OK)
        return ptc_cli_usage_error("--from: %s", ptc_last_error());
    a->have_from = from != NULL;
    if (!!a->cs.dir == !!a->model)
        return ptc_cli_usage_error("suggest: give either --store DIR or --model SPEC");
    if (a->version && !a->cs.dir)
        return ptc_cli_usage_error("--version applies to --store");
    if (!have_gpus || !batch)
        return ptc_cli_usage_error("suggest: --gpus and --global-batch are required");
    return PTC_CLI_CONTINUE;
}

/* The cost model of --model or --store; *family: "gpt", "mlp" or "store". */
static int load_model(suggest_args *a, ptc_cost_model **m, const char **family,
                      ptc_search_store_info *sinfo)
{
    memset(sinfo, 0, sizeof *sinfo);
    if (a->model) {
        ptc_search_spec spec;
        if (ptc_search_spec_parse(&spec, a->model) != PTC_OK)
            return ptc_cli_usage_error("--model: %s", ptc_last_error());
        if (ptc_cost_model_from_spec(m, &spec) != PTC_OK)
            return ptc_cli_lib_error(PTC_E_INVAL);
        *family = spec.family == PTC_SEARCH_GPT ? "gpt" : "mlp";
        /* Megatron-style overlapped gradient reduction for GPT; the demo
         * model runs on PTC's runtime, which reduces after the backward. */
        a->job.dp_overlap = spec.family == PTC_SEARCH_GPT;
        return PTC_CLI_OK;
    }
    *family = "store";
    ptc_cli_store cs = a->cs;
    int ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_OPEN, 0);
    if (ret != PTC_CLI_OK)
        return ret;
    int rc = ptc_search_store_model(m, cs.s, a->version, sinfo);
    ptc_cli_store_close(&cs, false);
    if (rc != PTC_OK)
        return ptc_cli_lib_error(rc);
    a->job.dp_overlap = true;
    return PTC_CLI_OK;
}

/* What ptc suggest found, for the two printers. */
typedef struct suggest_out {
    const suggest_args *a;
    const ptc_cost_model *m;
    const char *family;
    const ptc_search_store_info *sinfo;
    const ptc_search_result *res;
    const ptc_search_moved *moved; /* --from: the re-ranked candidates */
    size_t nmoved;
    const char *from_txt;
    ptc_search_stats st;
    size_t n, nr; /* configurations found; rejected for memory */
} suggest_out;

static void print_json(const suggest_out *o)
{
    const suggest_args *a = o->a;
    const ptc_search_cluster *cl = &a->cl;
    const ptc_search_stats *st = &o->st;
    size_t n = o->n, nr = o->nr;
    const ptc_search_entry *closest = ptc_search_result_closest(o->res);
    json_t *root = json_object();
    json_object_set_new(root, "model",
                        json_pack("{s:s, s:f, s:I}", "source", o->family, "parameters",
                                  ptc_cost_model_params(o->m), "layers",
                                  (json_int_t)ptc_cost_model_layers(o->m)));
    if (a->cs.dir) {
        json_t *mj = json_object_get(root, "model");
        json_object_set_new(mj, "version", json_integer((json_int_t)o->sinfo->version));
        json_object_set_new(mj, "hidden", json_integer(o->sinfo->hidden));
        json_object_set_new(mj, "seq", json_integer(o->sinfo->seq));
        json_object_set_new(mj, "seq_assumed", json_boolean(o->sinfo->seq_assumed));
    }
    json_object_set_new(
        root, "cluster",
        json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "gpus", cl->gpus, "gpus_per_host",
                  cl->gpus_per_host, "mem_bytes", cl->mem_bytes, "flops", cl->flops, "intra_bw",
                  cl->intra_bw, "intra_lat_s", cl->intra_lat, "inter_bw", cl->inter_bw,
                  "inter_lat_s", cl->inter_lat));
    json_object_set_new(root, "global_batch", json_integer((json_int_t)a->job.global_batch));
    json_object_set_new(root, "search",
                        json_pack("{s:s, s:I, s:I, s:I, s:I, s:f}", "method",
                                  st->exhaustive ? "exhaustive" : "descent", "evaluated",
                                  (json_int_t)st->evaluated, "fitting", (json_int_t)st->fitting,
                                  "rejected_for_memory", (json_int_t)st->rejected, "simulations",
                                  (json_int_t)st->simulations, "seconds", st->seconds));
    json_t *arr = json_array(), *rej = json_array();
    for (size_t i = 0; !a->have_from && i < n; i++)
        json_array_append_new(arr, entry_json(ptc_search_result_entry(o->res, i)));
    for (size_t i = 0; i < o->nmoved; i++)
        json_array_append_new(arr, moved_json(&o->moved[i]));
    if (a->have_from) {
        json_object_set_new(root, "from", json_string(o->from_txt));
        json_object_set_new(root, "amortize_steps", json_real(a->amortize));
    }
    for (size_t i = 0; i < nr; i++)
        json_array_append_new(rej, entry_json(ptc_search_result_rejected(o->res, i)));
    json_object_set_new(root, "configs", arr);
    json_object_set_new(root, "rejected_for_memory", rej);
    json_object_set_new(root, "no_fit", closest ? entry_json(closest) : json_null());
    char *t = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(10));
    if (t)
        ptc_cli_print_json(t);
    free(t);
    json_decref(root);
}

static void print_text(const suggest_out *o)
{
    const suggest_args *a = o->a;
    const ptc_search_cluster *cl = &a->cl;
    const ptc_search_stats *st = &o->st;
    size_t n = o->n, nr = o->nr;
    printf("model: %s, %.4g parameters, %lld layers", o->family, ptc_cost_model_params(o->m),
           (long long)ptc_cost_model_layers(o->m));
    if (a->cs.dir)
        printf(" (version %llu, width %lld, seq %lld%s)", (unsigned long long)o->sinfo->version,
               (long long)o->sinfo->hidden, (long long)o->sinfo->seq,
               o->sinfo->seq_assumed ? " assumed" : "");
    printf("\ncluster: %d GPUs, %d per host, %.4g GiB, %.4g TFLOP/s; intra %.4g GB/s %.3g us, "
           "inter %.4g GB/s %.3g us; global batch %lld\n",
           cl->gpus, cl->gpus_per_host, cl->mem_bytes / GIB, cl->flops / 1e12, cl->intra_bw / 1e9,
           cl->intra_lat * 1e6, cl->inter_bw / 1e9, cl->inter_lat * 1e6,
           (long long)a->job.global_batch);
    printf("search: %s, %zu configurations costed, %zu fit, %zu rejected for memory, "
           "%.3f s\n", st->exhaustive ? "exhaustive" : "coordinate descent", st->evaluated,
           st->fitting, st->rejected, st->seconds);
    if (n && !a->have_from) {
        printf("\nbest configurations (times in seconds per step):\n");
        header();
        for (size_t i = 0; i < n; i++)
            entry_text(ptc_search_result_entry(o->res, i), (int)i + 1);
    }
    if (a->have_from) {
        moved_text(o->moved, o->nmoved, o->from_txt, a->amortize);
        printf("\nthe same configurations, details:\n");
        header();
        for (size_t i = 0; i < o->nmoved; i++)
            entry_text(&o->moved[i].entry, (int)i + 1);
    }
    if (nr) {
        printf("\n%s:\n", n ? "faster but rejected for memory" : "rejected for memory");
        header();
        for (size_t i = 0; i < nr; i++)
            entry_text(ptc_search_result_rejected(o->res, i), 0);
    }
}

int ptc_cmd_suggest(int argc, char **argv)
{
    suggest_args a;
    memset(&a, 0, sizeof a);
    int ret = parse_args(argc, argv, &a);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    ptc_cost_model *m = NULL;
    suggest_out o = {.a = &a};
    ptc_search_store_info sinfo;
    if ((ret = load_model(&a, &m, &o.family, &sinfo)) != PTC_CLI_OK)
        return ret;
    o.m = m;
    o.sinfo = &sinfo;
    ptc_search_result *res = NULL;
    int top = a.so.top;
    if (a.have_from) /* candidates for the re-ranking */
        a.so.top = top > FROM_CANDIDATES ? top : FROM_CANDIDATES;
    int rc = ptc_search_run(&res, m, &a.cl, &a.job, &a.so);
    if (rc != PTC_OK) {
        ptc_cost_model_destroy(m);
        return ptc_cli_lib_error(rc);
    }
    o.res = res;
    ptc_search_moved *moved = NULL;
    size_t nmoved = 0;
    char from_txt[PTC_CONFIG_MAX_STAGES * 11 + 64] = "";
    if (a.have_from) {
        ptc_config_format(&a.from, PTC_CONFIG_STYLE_KEYS, from_txt, sizeof from_txt);
        ret = rank_from(res, m, a.cs.dir, a.version, &a.from, &a.cl, a.amortize, &moved,
                        &nmoved);
        if (ret != PTC_CLI_OK) {
            ptc_search_result_destroy(res);
            ptc_cost_model_destroy(m);
            return ret;
        }
        nmoved = nmoved < (size_t)top ? nmoved : (size_t)top;
    }
    o.moved = moved;
    o.nmoved = nmoved;
    o.from_txt = from_txt;
    ptc_search_result_stats(res, &o.st);
    o.n = ptc_search_result_count(res);
    o.nr = ptc_search_result_rejected_count(res);
    if (a.json)
        print_json(&o);
    else
        print_text(&o);
    int status = PTC_CLI_OK;
    const ptc_search_entry *closest = ptc_search_result_closest(res);
    if (!o.n && closest) {
        char cfg[160];
        ptc_search_config_format(&closest->config, cfg, sizeof cfg);
        status = ptc_cli_error("no configuration fits in %.4g GiB per GPU: the smallest "
                               "shortfall is %.3f GiB (%s needs %.3f GiB)",
                               a.cl.mem_bytes / GIB, closest->cost.shortfall / GIB, cfg,
                               closest->cost.mem / GIB);
    }
    ptc_search_moves_free(moved);
    ptc_search_result_destroy(res);
    ptc_cost_model_destroy(m);
    return status;
}
