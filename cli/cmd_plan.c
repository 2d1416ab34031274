/* ptc plan: the resharding plan's figures between two configurations of a
 * stored version or of a model described by a spec (shapes only), and the
 * move time the link model predicts. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "ptc/layout.h"
#include "ptc/plan.h"
#include "ptc/search_store.h"
#include "ptc/store.h"

const char ptc_cmd_plan_help[] =
    "plan resharding to another configuration (figures only, no data moved)\n"
    "\n"
    "usage: ptc plan --store DIR [--version V] [--from CFG] --to CFG [--hosts H]\n"
    "                [--net SPEC] [--json]\n"
    "       ptc plan --model SPEC [--optim] --from CFG --to CFG [--hosts H]\n"
    "                [--net SPEC] [--json]\n"
    "\n"
    "  --store DIR   a stored version's tensors, rules and configuration (its shapes:\n"
    "                no data is read); --version V (default: the newest)\n"
    "  --model SPEC  a model described by the specs of ptc suggest instead of a store:\n"
    "                gpt:layers=L,hidden=H,heads=A,vocab=V,seq=S[,kv_heads=K][,ffn=F]\n"
    "                or mlp:layers=L,hidden=H,vocab=V[,tokens=N]\n"
    "  --optim       with --model: add the optimizer state (Adam in fp32: master and\n"
    "                moments for gpt, moments for mlp), as a training job moves it\n"
    "  --from CFG    source configuration (required with --model; with --store it\n"
    "                replaces the stored configuration)\n"
    "  --to CFG      target configuration (dp=D,tp=T,pp=P[,zero=1][,layers=...])\n"
    "  --hosts H     ranks per host, packed in rank order for source and target\n"
    "                alike (default: every rank on one host)\n"
    "  --net SPEC    links for the predicted move time: intra-bw=GBPS,inter-bw=GBPS,\n"
    "                intra-lat=US,inter-lat=US, per GPU (default 300, 25, 2, 5 as\n"
    "                ptc suggest)\n"
    "Figures (bytes; docs/reshard.md defines each): bytes_total (every target\n"
    "rank's local tensors, replicas included), bytes_reused (identical shards on\n"
    "the same rank), bytes_local_copy (copied within a rank or host),\n"
    "bytes_network (crossing hosts), bytes_network_lower_bound (sum over hosts of\n"
    "the bytes the host needs and does not have), max_rank_send, max_rank_recv;\n"
    "predicted_move_seconds (the busiest host's network bytes over its links, then\n"
    "its copies inside the host: docs/search.md).\n";

typedef struct plan_args {
    ptc_cli_store cs; /* cs.dir: --store */
    const char *model, *from, *to, *net;
    uint64_t version;
    int hosts;
    bool json, optim;
} plan_args;

/* Returns PTC_CLI_CONTINUE, or the exit status (after the help or an error). */
static int parse_args(int argc, char **argv, plan_args *a)
{
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STORE(&a->cs.dir),
        PTC_CLI_OPT_VERSION(&a->version),
        PTC_CLI_OPT_STR("to", &a->to),
        PTC_CLI_OPT_INT("hosts", &a->hosts, 1, PTC_CONFIG_MAX_WORLD,
                        "--hosts: '%s' is not a positive number"),
        PTC_CLI_OPT_JSON(&a->json),
        PTC_CLI_OPT_STR("model", &a->model),
        PTC_CLI_OPT_FLAG("optim", &a->optim),
        PTC_CLI_OPT_STR("from", &a->from),
        PTC_CLI_OPT_STR("net", &a->net),
        PTC_CLI_OPT_END};
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_plan_help, 0, NULL);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (!a->to)
        return ptc_cli_usage_error("--to CFG is required");
    if (!!a->cs.dir == !!a->model)
        return ptc_cli_usage_error("give either --store DIR or --model SPEC");
    if (a->model && !a->from)
        return ptc_cli_usage_error("--model needs --from CFG");
    if (a->optim && !a->model)
        return ptc_cli_usage_error("--optim applies to --model (a store plans what it holds)");
    if (a->version && !a->cs.dir)
        return ptc_cli_usage_error("--version applies to --store");
    return PTC_CLI_CONTINUE;
}

/* The tensors of --model or --store. */
static int load_tensors(const plan_args *a, ptc_search_tensors **t, uint64_t *version,
                        ptc_config *stored)
{
    if (a->model) {
        ptc_search_spec spec;
        if (ptc_search_spec_parse(&spec, a->model) != PTC_OK)
            return ptc_cli_usage_error("--model: %s", ptc_last_error());
        ptc_cost_model *m = NULL;
        int rc = ptc_cost_model_from_spec(&m, &spec);
        if (rc == PTC_OK)
            rc = ptc_search_tensors_create(t, m, a->optim);
        ptc_cost_model_destroy(m);
        return rc == PTC_OK ? PTC_CLI_OK : ptc_cli_lib_error(rc);
    }
    ptc_cli_store cs = a->cs;
    int ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_READER, a->version);
    if (ret)
        return ret;
    const ptc_version_info *vi = ptc_store_reader_version(cs.r);
    *version = vi->version;
    int rc = ptc_config_parse(stored, vi->config ? vi->config : "");
    if (rc == PTC_OK)
        rc = ptc_search_tensors_from_store(t, cs.s, *version);
    ptc_cli_store_close(&cs, false);
    return rc == PTC_OK ? PTC_CLI_OK : ptc_cli_lib_error(rc);
}

static void print_plan(const plan_args *a, const ptc_plan *p, uint64_t version,
                       const char *from_txt, const char *to_txt, const ptc_search_cluster *cl,
                       const ptc_search_move *mv)
{
    ptc_plan_stats st;
    ptc_plan_stats_get(p, &st);
    json_t *o = json_object();
    if (a->cs.dir)
        json_object_set_new(o, "version", json_integer((json_int_t)version));
    else
        json_object_set_new(o, "model", json_string(a->model));
    json_object_set_new(o, "from", json_string(from_txt));
    json_object_set_new(o, "to", json_string(to_txt));
    json_object_set_new(o, "ranks_per_host", json_integer(a->hosts));
    json_object_set_new(o, "hosts", json_integer(st.hosts));
    const struct {
        const char *k;
        uint64_t v;
    } kv[] = {
        {"bytes_total", st.bytes_total},
        {"bytes_reused", st.bytes_reused},
        {"bytes_local_copy", st.bytes_local_copy},
        {"bytes_network", st.bytes_network},
        {"bytes_network_lower_bound", st.bytes_network_lower_bound},
        {"max_rank_send", st.max_rank_send},
        {"max_rank_recv", st.max_rank_recv},
        {"bytes_host_copy", st.bytes_host_copy},
        {"bytes_fanout", st.bytes_fanout},
        {"tensors", st.tensors},
        {"shards", st.shards},
        {"shards_reused", st.shards_reused},
        {"transfers", st.transfers},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        json_object_set_new(o, kv[i].k, json_integer((json_int_t)kv[i].v));
    json_object_set_new(o, "plan_seconds", json_real(st.plan_seconds));
    json_object_set_new(o, "predicted_move_seconds", json_real(mv->seconds));
    json_object_set_new(o, "predicted_network_seconds", json_real(mv->network_seconds));
    json_object_set_new(o, "predicted_copy_seconds", json_real(mv->copy_seconds));
    json_object_set_new(o, "busiest_host", json_integer(mv->busiest_host));
    json_object_set_new(o, "net", json_pack("{s:f, s:f, s:f, s:f}", "intra_bw", cl->intra_bw,
                                            "inter_bw", cl->inter_bw, "intra_lat_s",
                                            cl->intra_lat, "inter_lat_s", cl->inter_lat));
    json_t *ph = json_array();
    for (int h = 0; h < st.hosts; h++) {
        ptc_plan_host_stats hs;
        ptc_plan_host_stats_get(p, h, &hs);
        json_array_append_new(ph, json_pack("{s:i, s:I, s:I, s:I, s:I, s:I}", "host", h,
                                            "bytes_in", (json_int_t)hs.bytes_in, "bytes_out",
                                            (json_int_t)hs.bytes_out, "bytes_need",
                                            (json_int_t)hs.bytes_need, "bytes_have",
                                            (json_int_t)hs.bytes_have, "bytes_copy",
                                            (json_int_t)hs.bytes_copy));
    }
    json_object_set_new(o, "per_host", ph);
    if (a->json) {
        char *txt = json_dumps(o, JSON_COMPACT);
        if (txt)
            printf("%s\n", txt);
        free(txt);
    } else {
        if (a->cs.dir)
            printf("plan: version %llu %s -> %s, %d host%s\n", (unsigned long long)version,
                   from_txt, to_txt, st.hosts, st.hosts == 1 ? "" : "s");
        else
            printf("plan: %s%s %s -> %s, %d host%s\n", a->model, a->optim ? " (with optimizer "
                   "state)" : "", from_txt, to_txt, st.hosts, st.hosts == 1 ? "" : "s");
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
            printf("  %-26s %llu\n", kv[i].k, (unsigned long long)kv[i].v);
        printf("  %-26s %.3f\n", "plan_seconds", st.plan_seconds);
        printf("  %-26s %.4g (network %.4g, copies %.4g; intra %.4g GB/s, inter %.4g GB/s "
               "per GPU)\n", "predicted_move_seconds", mv->seconds, mv->network_seconds,
               mv->copy_seconds, cl->intra_bw / 1e9, cl->inter_bw / 1e9);
    }
    json_decref(o);
}

int ptc_cmd_plan(int argc, char **argv)
{
    plan_args a = {0};
    int ret = parse_args(argc, argv, &a);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    ptc_config from, to;
    if (ptc_config_parse(&to, a.to) != PTC_OK)
        return ptc_cli_usage_error("--to: %s", ptc_last_error());
    if (a.from && ptc_config_parse(&from, a.from) != PTC_OK)
        return ptc_cli_usage_error("--from: %s", ptc_last_error());
    ptc_search_cluster cl;
    ptc_search_cluster_init(&cl);
    if (a.net && ptc_search_net_parse(&cl, a.net) != PTC_OK)
        return ptc_cli_usage_error("--net: %s", ptc_last_error());
    ptc_search_tensors *t = NULL;
    uint64_t version = 0;
    ptc_config stored;
    if ((ret = load_tensors(&a, &t, &version, &stored)) != PTC_CLI_OK)
        return ret;
    if (!a.from)
        from = stored;
    size_t n;
    const ptc_tensor_info *ti = ptc_search_tensors_list(t, &n);
    const ptc_rules *rules = ptc_search_tensors_rules(t);
    ptc_layout *ls = NULL, *lt = NULL;
    ptc_plan *p = NULL;
    ptc_plan_options po = {.hosts = a.hosts, .figures_only = true};
    ptc_search_move mv;
    int rc = ptc_layout_create(&ls, ti, n, rules, &from);
    if (rc == PTC_OK)
        rc = ptc_layout_create(&lt, ti, n, rules, &to);
    if (rc == PTC_OK)
        rc = ptc_plan_create(&p, ls, lt, &po);
    if (rc == PTC_OK)
        rc = ptc_search_move_time(p, &cl, &mv);
    if (rc != PTC_OK) {
        ret = ptc_cli_lib_error(rc);
        goto out_free;
    }
    char from_txt[PTC_CONFIG_MAX_STAGES * 11 + 64], to_txt[sizeof from_txt];
    ptc_config_format(&from, PTC_CONFIG_STYLE_KEYS, from_txt, sizeof from_txt);
    ptc_config_format(&to, PTC_CONFIG_STYLE_KEYS, to_txt, sizeof to_txt);
    print_plan(&a, p, version, from_txt, to_txt, &cl, &mv);
out_free:
    ptc_plan_destroy(p);
    ptc_layout_destroy(ls);
    ptc_layout_destroy(lt);
    ptc_search_tensors_destroy(t);
    return ret;
}
