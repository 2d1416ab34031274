/* ptc plan: the resharding plan's figures between a stored version's
 * configuration and another one. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "ptc/layout.h"
#include "ptc/plan.h"
#include "ptc/store.h"

const char ptc_cmd_plan_help[] =
    "plan resharding a stored version to another configuration (figures only)\n"
    "\n"
    "usage: ptc plan --store DIR [--version V] --to CFG [--hosts H] [--json]\n"
    "\n"
    "  --to CFG     target configuration (dp=D,tp=T,pp=P[,zero=1][,layers=...])\n"
    "  --hosts H    ranks per host, packed in rank order for source and target\n"
    "               alike (default: every rank on one host)\n"
    "Figures (bytes; docs/reshard.md defines each): bytes_total (every target\n"
    "rank's local tensors, replicas included), bytes_reused (identical shards on\n"
    "the same rank), bytes_local_copy (copied within a rank or host),\n"
    "bytes_network (crossing hosts), bytes_network_lower_bound (sum over hosts of\n"
    "the bytes the host needs and does not have), max_rank_send, max_rank_recv.\n";

int ptc_cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {
        {"store", required_argument, NULL, 's'}, {"version", required_argument, NULL, 'v'},
        {"to", required_argument, NULL, 't'},    {"hosts", required_argument, NULL, 'H'},
        {"json", no_argument, NULL, 'j'},        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *store = NULL, *to = NULL;
    uint64_t version = 0;
    int hosts = 0;
    bool json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': store = optarg; break;
        case 't': to = optarg; break;
        case 'v':
            if (!ptc_cli_parse_version(optarg, &version))
                return ptc_cli_usage_error("--version: '%s' is not a version number", optarg);
            break;
        case 'H':
            if (!ptc_cli_parse_int(optarg, 1, PTC_CONFIG_MAX_WORLD, &hosts))
                return ptc_cli_usage_error("--hosts: '%s' is not a positive number", optarg);
            break;
        case 'j': json = true; break;
        case 'h': ptc_cli_help(ptc_cmd_plan_help); return PTC_CLI_OK;
        default: return ptc_cli_bad_option(argv);
        }
    }
    if (optind < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (!to)
        return ptc_cli_usage_error("--to CFG is required");
    ptc_config cfg;
    if (ptc_config_parse(&cfg, to) != PTC_OK)
        return ptc_cli_usage_error("--to: %s", ptc_last_error());
    ptc_store *s = NULL;
    int ret = ptc_cli_open_store(store, false, &s);
    if (ret)
        return ret;
    ptc_store_reader *r = NULL;
    ptc_layout *ls = NULL, *lt = NULL;
    ptc_plan *p = NULL;
    int rc = ptc_store_reader_open(&r, s, version);
    if (rc == PTC_OK)
        rc = ptc_layout_of_version(&ls, r, NULL);
    if (rc == PTC_OK)
        rc = ptc_layout_of_version(&lt, r, &cfg);
    ptc_plan_options po = {.hosts = hosts};
    if (rc == PTC_OK)
        rc = ptc_plan_create(&p, ls, lt, &po);
    if (rc != PTC_OK) {
        ret = ptc_cli_lib_error(rc);
        goto out_close;
    }
    ptc_plan_stats st;
    ptc_plan_stats_get(p, &st);
    char from_txt[PTC_CONFIG_MAX_STAGES * 11 + 64], to_txt[sizeof from_txt];
    ptc_config_format(ptc_layout_config(ls), PTC_CONFIG_STYLE_KEYS, from_txt, sizeof from_txt);
    ptc_config_format(&cfg, PTC_CONFIG_STYLE_KEYS, to_txt, sizeof to_txt);
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer((json_int_t)ptc_store_reader_version(r)->version));
    json_object_set_new(o, "from", json_string(from_txt));
    json_object_set_new(o, "to", json_string(to_txt));
    json_object_set_new(o, "ranks_per_host", json_integer(hosts));
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
    json_t *ph = json_array();
    for (int h = 0; h < st.hosts; h++) {
        ptc_plan_host_stats hs;
        ptc_plan_host_stats_get(p, h, &hs);
        json_t *e = json_object();
        json_object_set_new(e, "host", json_integer(h));
        json_object_set_new(e, "bytes_in", json_integer((json_int_t)hs.bytes_in));
        json_object_set_new(e, "bytes_out", json_integer((json_int_t)hs.bytes_out));
        json_object_set_new(e, "bytes_need", json_integer((json_int_t)hs.bytes_need));
        json_object_set_new(e, "bytes_have", json_integer((json_int_t)hs.bytes_have));
        json_array_append_new(ph, e);
    }
    json_object_set_new(o, "per_host", ph);
    if (json) {
        char *txt = json_dumps(o, JSON_COMPACT);
        if (txt)
            printf("%s\n", txt);
        free(txt);
    } else {
        printf("plan: version %llu %s -> %s, %d host%s\n",
               (unsigned long long)ptc_store_reader_version(r)->version, from_txt, to_txt,
               st.hosts, st.hosts == 1 ? "" : "s");
        for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
            printf("  %-26s %llu\n", kv[i].k, (unsigned long long)kv[i].v);
        printf("  %-26s %.3f\n", "plan_seconds", st.plan_seconds);
    }
    json_decref(o);
out_close:
    ptc_plan_destroy(p);
    ptc_layout_destroy(ls);
    ptc_layout_destroy(lt);
    ptc_store_reader_close(r);
    ptc_store_close(s);
    return ret;
}
