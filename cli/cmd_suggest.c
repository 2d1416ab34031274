/* ptc suggest: predict step time and memory of parallel configurations and
 * print the best ones (the library's configuration search). */
#include <getopt.h>
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

enum {
    OPT_STORE = 256, OPT_VERSION, OPT_MODEL, OPT_GPUS, OPT_GPH, OPT_MEM, OPT_TFLOPS,
    OPT_INTRA_BW, OPT_INTRA_LAT, OPT_INTER_BW, OPT_INTER_LAT, OPT_BATCH, OPT_TOP,
    OPT_EXHAUSTIVE, OPT_JSON, OPT_FROM, OPT_AMORTIZE,
};

/* Candidates the search keeps when --from re-ranks them by the move. */
#define FROM_CANDIDATES 64

static bool parse_pos(const char *s, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v) || v <= 0)
        return false;
    *out = v;
    return true;
}

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
        ptc_store *st;
        if ((rc = ptc_cli_open_store(store, false, &st)) != PTC_CLI_OK)
            return rc;
        rc = ptc_search_tensors_from_store(&t, st, version);
        ptc_store_close(st);
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

int ptc_cmd_suggest(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"store", 1, 0, OPT_STORE},         {"version", 1, 0, OPT_VERSION},
        {"model", 1, 0, OPT_MODEL},         {"gpus", 1, 0, OPT_GPUS},
        {"gpus-per-host", 1, 0, OPT_GPH},   {"mem", 1, 0, OPT_MEM},
        {"tflops", 1, 0, OPT_TFLOPS},       {"intra-bw", 1, 0, OPT_INTRA_BW},
        {"intra-lat", 1, 0, OPT_INTRA_LAT}, {"inter-bw", 1, 0, OPT_INTER_BW},
        {"inter-lat", 1, 0, OPT_INTER_LAT}, {"global-batch", 1, 0, OPT_BATCH},
        {"top", 1, 0, OPT_TOP},             {"exhaustive", 0, 0, OPT_EXHAUSTIVE},
        {"json", 0, 0, OPT_JSON},           {"help", 0, 0, 'h'},
        {"from", 1, 0, OPT_FROM},           {"amortize", 1, 0, OPT_AMORTIZE},
        {0, 0, 0, 0}};
    ptc_cli_init();
    const char *store = NULL, *model = NULL;
    uint64_t version = 0, u;
    bool json = false, have_gpus = false, have_from = false;
    ptc_config from;
    double amortize = 1000;
    ptc_search_cluster cl;
    ptc_search_cluster_init(&cl);
    ptc_search_job job;
    ptc_search_job_init(&job);
    job.global_batch = 0;
    ptc_search_opts so;
    ptc_search_opts_init(&so);
    int c;
    double d;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            ptc_cli_help(ptc_cmd_suggest_help);
            return PTC_CLI_OK;
        case OPT_STORE:
            store = optarg;
            break;
        case OPT_VERSION:
            if (!ptc_cli_parse_version(optarg, &version))
                return ptc_cli_usage_error("--version: expected a positive integer");
            break;
        case OPT_MODEL:
            model = optarg;
            break;
        case OPT_GPUS:
            if (!ptc_cli_parse_int(optarg, 0, 1 << 20, &cl.gpus))
                return ptc_cli_usage_error("--gpus: expected an integer from 1 to 2^20");
            if (cl.gpus < 1)
                return ptc_cli_usage_error("--gpus must be at least 1, got %s", optarg);
            have_gpus = true;
            break;
        case OPT_GPH:
            if (!ptc_cli_parse_int(optarg, 1, 1 << 20, &cl.gpus_per_host))
                return ptc_cli_usage_error("--gpus-per-host: expected a positive integer");
            break;
        case OPT_BATCH:
            if (!ptc_cli_parse_u64(optarg, &u) || u < 1 || u > (1ull << 40))
                return ptc_cli_usage_error("--global-batch: expected an integer from 1 to 2^40");
            job.global_batch = (int64_t)u;
            break;
        case OPT_TOP:
            if (!ptc_cli_parse_int(optarg, 1, 1 << 16, &so.top))
                return ptc_cli_usage_error("--top: expected a positive integer");
            break;
        case OPT_EXHAUSTIVE:
            so.exhaustive = true;
            break;
        case OPT_JSON:
            json = true;
            break;
        case OPT_FROM:
            if (ptc_config_parse(&from, optarg) != PTC_OK)
                return ptc_cli_usage_error("--from: %s", ptc_last_error());
            have_from = true;
            break;
        case OPT_AMORTIZE:
            if (!parse_pos(optarg, &amortize) || amortize < 1 || amortize > 1e12)
                return ptc_cli_usage_error("--amortize: expected a number of steps >= 1");
            break;
        default:
            if (c == '?' || c == ':')
                return ptc_cli_bad_option(argv);
            /* The numeric options with units. */
            if (c < OPT_MEM || c > OPT_INTER_LAT)
                return ptc_cli_bad_option(argv);
            if (!parse_pos(optarg, &d) || d > 1e12)
                return ptc_cli_usage_error("--%s: expected a positive number, got '%s'",
                                           longopts[c - OPT_STORE].name, optarg);
            switch (c) {
            case OPT_MEM: cl.mem_bytes = d * GIB; break;
            case OPT_TFLOPS: cl.flops = d * 1e12; break;
            case OPT_INTRA_BW: cl.intra_bw = d * 1e9; break;
            case OPT_INTER_BW: cl.inter_bw = d * 1e9; break;
            case OPT_INTRA_LAT: cl.intra_lat = d * 1e-6; break;
            case OPT_INTER_LAT: cl.inter_lat = d * 1e-6; break;
            default: return ptc_cli_bad_option(argv);
            }
        }
    }
    if (optind < argc)
        return ptc_cli_usage_error("suggest: unexpected argument '%s'", argv[optind]);
    if (!!store == !!model)
        return ptc_cli_usage_error("suggest: give either --store DIR or --model SPEC");
    if (version && !store)
        return ptc_cli_usage_error("--version applies to --store");
    if (!have_gpus || !job.global_batch)
        return ptc_cli_usage_error("suggest: --gpus and --global-batch are required");

    ptc_cost_model *m = NULL;
    const char *family = "store";
    ptc_search_store_info sinfo;
    memset(&sinfo, 0, sizeof sinfo);
    if (model) {
        ptc_search_spec spec;
        if (ptc_search_spec_parse(&spec, model) != PTC_OK)
            return ptc_cli_usage_error("--model: %s", ptc_last_error());
        if (ptc_cost_model_from_spec(&m, &spec) != PTC_OK)
            return ptc_cli_lib_error(PTC_E_INVAL);
        family = spec.family == PTC_SEARCH_GPT ? "gpt" : "mlp";
        /* Megatron-style overlapped gradient reduction for GPT; the demo
         * model runs on PTC's runtime, which reduces after the backward. */
        job.dp_overlap = spec.family == PTC_SEARCH_GPT;
    } else {
        ptc_store *st;
        int rc = ptc_cli_open_store(store, false, &st);
        if (rc != PTC_CLI_OK)
            return rc;
        rc = ptc_search_store_model(&m, st, version, &sinfo);
        ptc_store_close(st);
        if (rc != PTC_OK)
            return ptc_cli_lib_error(rc);
        job.dp_overlap = true;
    }
    ptc_search_result *res = NULL;
    int top = so.top;
    if (have_from) /* candidates for the re-ranking */
        so.top = top > FROM_CANDIDATES ? top : FROM_CANDIDATES;
    int rc = ptc_search_run(&res, m, &cl, &job, &so);
    if (rc != PTC_OK) {
        ptc_cost_model_destroy(m);
        return ptc_cli_lib_error(rc);
    }
    ptc_search_moved *moved = NULL;
    size_t nmoved = 0;
    char from_txt[PTC_CONFIG_MAX_STAGES * 11 + 64] = "";
    if (have_from) {
        ptc_config_format(&from, PTC_CONFIG_STYLE_KEYS, from_txt, sizeof from_txt);
        int ret = rank_from(res, m, store, version, &from, &cl, amortize, &moved, &nmoved);
        if (ret != PTC_CLI_OK) {
            ptc_search_result_destroy(res);
            ptc_cost_model_destroy(m);
            return ret;
        }
        nmoved = nmoved < (size_t)top ? nmoved : (size_t)top;
    }
    ptc_search_stats st;
    ptc_search_result_stats(res, &st);
    size_t n = ptc_search_result_count(res), nr = ptc_search_result_rejected_count(res);
    const ptc_search_entry *closest = ptc_search_result_closest(res);
    if (json) {
        json_t *root = json_object();
        json_object_set_new(root, "model",
                            json_pack("{s:s, s:f, s:I}", "source", family, "parameters",
                                      ptc_cost_model_params(m), "layers",
                                      (json_int_t)ptc_cost_model_layers(m)));
        if (store) {
            json_t *mj = json_object_get(root, "model");
            json_object_set_new(mj, "version", json_integer((json_int_t)sinfo.version));
            json_object_set_new(mj, "hidden", json_integer(sinfo.hidden));
            json_object_set_new(mj, "seq", json_integer(sinfo.seq));
            json_object_set_new(mj, "seq_assumed", json_boolean(sinfo.seq_assumed));
        }
        json_object_set_new(
            root, "cluster",
            json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "gpus", cl.gpus,
                      "gpus_per_host", cl.gpus_per_host, "mem_bytes", cl.mem_bytes, "flops",
                      cl.flops, "intra_bw", cl.intra_bw, "intra_lat_s", cl.intra_lat,
                      "inter_bw", cl.inter_bw, "inter_lat_s", cl.inter_lat));
        json_object_set_new(root, "global_batch", json_integer((json_int_t)job.global_batch));
        json_object_set_new(root, "search",
                            json_pack("{s:s, s:I, s:I, s:I, s:I, s:f}", "method",
                                      st.exhaustive ? "exhaustive" : "descent", "evaluated",
                                      (json_int_t)st.evaluated, "fitting",
                                      (json_int_t)st.fitting, "rejected_for_memory",
                                      (json_int_t)st.rejected, "simulations",
                                      (json_int_t)st.simulations, "seconds", st.seconds));
        json_t *arr = json_array(), *rej = json_array();
        for (size_t i = 0; !have_from && i < n; i++)
            json_array_append_new(arr, entry_json(ptc_search_result_entry(res, i)));
        for (size_t i = 0; i < nmoved; i++)
            json_array_append_new(arr, moved_json(&moved[i]));
        if (have_from) {
            json_object_set_new(root, "from", json_string(from_txt));
            json_object_set_new(root, "amortize_steps", json_real(amortize));
        }
        for (size_t i = 0; i < nr; i++)
            json_array_append_new(rej, entry_json(ptc_search_result_rejected(res, i)));
        json_object_set_new(root, "configs", arr);
        json_object_set_new(root, "rejected_for_memory", rej);
        json_object_set_new(root, "no_fit", closest ? entry_json(closest) : json_null());
        char *t = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(10));
        if (t)
            ptc_cli_print_json(t);
        free(t);
        json_decref(root);
    } else {
        printf("model: %s, %.4g parameters, %lld layers", family, ptc_cost_model_params(m),
               (long long)ptc_cost_model_layers(m));
        if (store)
            printf(" (version %llu, width %lld, seq %lld%s)", (unsigned long long)sinfo.version,
                   (long long)sinfo.hidden, (long long)sinfo.seq,
                   sinfo.seq_assumed ? " assumed" : "");
        printf("\ncluster: %d GPUs, %d per host, %.4g GiB, %.4g TFLOP/s; intra %.4g GB/s %.3g us, "
               "inter %.4g GB/s %.3g us; global batch %lld\n",
               cl.gpus, cl.gpus_per_host, cl.mem_bytes / GIB, cl.flops / 1e12, cl.intra_bw / 1e9,
               cl.intra_lat * 1e6, cl.inter_bw / 1e9, cl.inter_lat * 1e6,
               (long long)job.global_batch);
        printf("search: %s, %zu configurations costed, %zu fit, %zu rejected for memory, "
               "%.3f s\n", st.exhaustive ? "exhaustive" : "coordinate descent", st.evaluated,
               st.fitting, st.rejected, st.seconds);
        if (n && !have_from) {
            printf("\nbest configurations (times in seconds per step):\n");
            header();
            for (size_t i = 0; i < n; i++)
                entry_text(ptc_search_result_entry(res, i), (int)i + 1);
        }
        if (have_from) {
            moved_text(moved, nmoved, from_txt, amortize);
            printf("\nthe same configurations, details:\n");
            header();
            for (size_t i = 0; i < nmoved; i++)
                entry_text(&moved[i].entry, (int)i + 1);
        }
        if (nr) {
            printf("\n%s:\n", n ? "faster but rejected for memory" : "rejected for memory");
            header();
            for (size_t i = 0; i < nr; i++)
                entry_text(ptc_search_result_rejected(res, i), 0);
        }
    }
    int status = PTC_CLI_OK;
    if (!n && closest) {
        char cfg[160];
        ptc_search_config_format(&closest->config, cfg, sizeof cfg);
        status = ptc_cli_error("no configuration fits in %.4g GiB per GPU: the smallest "
                               "shortfall is %.3f GiB (%s needs %.3f GiB)",
                               cl.mem_bytes / GIB, closest->cost.shortfall / GIB, cfg,
                               closest->cost.mem / GIB);
    }
    ptc_search_moves_free(moved);
    ptc_search_result_destroy(res);
    ptc_cost_model_destroy(m);
    return status;
}
