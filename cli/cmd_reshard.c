/* ptc reshard: write a stored version under another configuration as a new
 * version (threads on one host, or MPI processes with --mpi).
 *
 * Built into both commands (CMakeLists.txt): the light `ptc` (PTC_CLI_LIGHT)
 * runs the threads on one host itself and hands --mpi to ptc-full, so that a
 * reshard without MPI maps no MPI library. */
#include <getopt.h>
#include <sys/resource.h>
#ifndef PTC_CLI_LIGHT
#include <mpi.h>
#endif
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "ptc/reshard.h"

const char ptc_cmd_reshard_help[] =
    "reshard a stored version to another configuration (a new version)\n"
    "\n"
    "usage: ptc reshard --store DIR [--version V] --to CFG [--threads N] [--step N]\n"
    "                   [--dtype F32|BF16|F16] [--compress zstd[:L]] [--hosts H] [--json]\n"
    "       mpirun -np N ptc reshard --mpi [--mpi-budget BYTES] --store DIR --to CFG ...\n"
    "\n"
    "  --to CFG       target configuration (dp=D,tp=T,pp=P[,zero=1][,layers=...])\n"
    "  --threads N    worker threads, each writing its own target ranks' pack files\n"
    "                 (default: one per core)\n"
    "  --step N       step label of the new version (default: the source's)\n"
    "  --dtype T      convert floating-point tensors to F32, BF16 or F16 on the way\n"
    "  --compress zstd[:L]  compress the written blocks with zstd\n"
    "  --hosts H      ranks per host for the printed plan figures (see ptc plan)\n"
    "  --mpi          one process per group of target ranks under mpirun: each reads\n"
    "                 the source boxes the plan assigns it, exchanges the rest over\n"
    "                 MPI and writes its own pack files; process 0 commits\n"
    "  --mpi-budget BYTES  with --mpi: the most network bytes one process sends\n"
    "                 plus receives per round (default 268435456 = 256 MiB); the\n"
    "                 tensors are exchanged and written in rounds of consecutive\n"
    "                 tensors within it (a larger tensor is a round of its own)\n"
    "  --json         print one JSON object: version, parent, written/reused/aliased\n"
    "                 shards, bytes_written, seconds, the plan figures and (--mpi)\n"
    "                 rounds and max_round_bytes; peak_rss_bytes: the largest peak\n"
    "                 resident memory of a process\n"
    "Unchanged shards are referenced, replicas aliased; the new version becomes\n"
    "visible only when every byte is on disk and checksummed. Prints the version.\n";

static int print_result(const ptc_reshard_result *res, unsigned long long peak, bool json)
{
    const ptc_plan_stats *st = &res->plan;
    const struct {
        const char *k;
        uint64_t v;
    } kv[] = {
        {"parent", res->parent},
        {"bytes_written", res->bytes_written},
        {"shards_written", res->shards_written},
        {"shards_reused", res->shards_reused},
        {"shards_aliased", res->shards_aliased},
        {"bytes_total", st->bytes_total},
        {"bytes_reused", st->bytes_reused},
        {"bytes_local_copy", st->bytes_local_copy},
        {"bytes_network", st->bytes_network},
        {"bytes_network_lower_bound", st->bytes_network_lower_bound},
        {"max_rank_send", st->max_rank_send},
        {"max_rank_recv", st->max_rank_recv},
        {"transfers", st->transfers},
    };
    size_t n = sizeof kv / sizeof kv[0];
    if (!json) {
        printf("version %llu\n", (unsigned long long)res->version);
        for (size_t i = 0; i < n; i++)
            printf("  %-26s %llu\n", kv[i].k, (unsigned long long)kv[i].v);
        printf("  %-26s %.3f\n", "seconds", res->seconds);
        return PTC_CLI_OK;
    }
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer((json_int_t)res->version));
    for (size_t i = 0; i < n; i++)
        json_object_set_new(o, kv[i].k, json_integer((json_int_t)kv[i].v));
    json_object_set_new(o, "hosts", json_integer(st->hosts));
    if (res->rounds) {
        json_object_set_new(o, "rounds", json_integer((json_int_t)res->rounds));
        json_object_set_new(o, "max_round_bytes", json_integer((json_int_t)res->max_round_bytes));
    }
    json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)peak));
    json_object_set_new(o, "seconds", json_real(res->seconds));
    char *txt = json_dumps(o, JSON_COMPACT);
    if (txt)
        printf("%s\n", txt);
    free(txt);
    json_decref(o);
    return PTC_CLI_OK;
}

int ptc_cmd_reshard(int argc, char **argv)
{
    static const struct option opts[] = {
        {"store", required_argument, NULL, 's'},   {"version", required_argument, NULL, 'v'},
        {"to", required_argument, NULL, 't'},      {"threads", required_argument, NULL, 'n'},
        {"step", required_argument, NULL, 'S'},    {"dtype", required_argument, NULL, 'd'},
        {"compress", required_argument, NULL, 'z'}, {"hosts", required_argument, NULL, 'H'},
        {"mpi", no_argument, NULL, 'm'},           {"json", no_argument, NULL, 'j'},
        {"mpi-budget", required_argument, NULL, 'B'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
#ifdef PTC_CLI_LIGHT
    /* --mpi (and --mpi-budget, or an abbreviation of either): ptc-full */
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strncmp(argv[i], "--mp", 4))
            return ptc_cli_run_full();
#endif
    const char *store = NULL, *to = NULL;
    uint64_t version = 0;
    bool json = false, mpi = false;
    ptc_reshard_options o;
    ptc_reshard_options_init(&o);
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
        case 'n':
            if (!ptc_cli_parse_int(optarg, 1, 4096, &o.threads))
                return ptc_cli_usage_error("--threads: '%s' is not 1..4096", optarg);
            break;
        case 'S': {
            uint64_t v;
            if (!ptc_cli_parse_u64(optarg, &v))
                return ptc_cli_usage_error("--step: '%s' is not a non-negative integer", optarg);
            o.step = optarg;
            break;
        }
        case 'd':
            if (!strcmp(optarg, "F32"))
                o.dtype = PTC_DTYPE_F32;
            else if (!strcmp(optarg, "BF16"))
                o.dtype = PTC_DTYPE_BF16;
            else if (!strcmp(optarg, "F16"))
                o.dtype = PTC_DTYPE_F16;
            else
                return ptc_cli_usage_error("--dtype must be F32, BF16 or F16, not '%s'", optarg);
            break;
        case 'z':
            if (ptc_cli_parse_compress(optarg, &o.codec, &o.level))
                return PTC_CLI_USAGE;
            break;
        case 'H':
            if (!ptc_cli_parse_int(optarg, 1, PTC_CONFIG_MAX_WORLD, &o.hosts))
                return ptc_cli_usage_error("--hosts: '%s' is not a positive number", optarg);
            break;
        case 'm': mpi = true; break;
        case 'B':
            if (!ptc_cli_parse_u64(optarg, &o.mpi_budget) || o.mpi_budget == 0)
                return ptc_cli_usage_error("--mpi-budget: '%s' is not a positive byte count",
                                           optarg);
            break;
        case 'j': json = true; break;
        case 'h': ptc_cli_help(ptc_cmd_reshard_help); return PTC_CLI_OK;
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
    int me = 0;
#ifdef PTC_CLI_LIGHT
    if (mpi)
        return ptc_cli_error("--mpi: run by ptc-full"); /* not reached: handed over above */
#else
    if (mpi) {
        int provided;
        if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return ptc_cli_error("MPI_Init failed");
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
    }
#endif
    ptc_store *s = NULL;
    int ret = ptc_cli_open_store(store, false, &s);
#ifndef PTC_CLI_LIGHT
    if (mpi) {
        /* every process must reach the executor's collectives, or none */
        int worst = ret;
        MPI_Allreduce(&ret, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (worst != PTC_CLI_OK && ret == PTC_CLI_OK) {
            ret = me == 0 ? ptc_cli_error("the store could not be opened on another process")
                          : PTC_CLI_FAIL;
            ptc_store_close(s);
            s = NULL;
        }
    }
#endif
    if (ret == PTC_CLI_OK) {
        ptc_reshard_result res;
#ifdef PTC_CLI_LIGHT
        int rc = ptc_reshard_store(s, version, &cfg, &o, &res);
#else
        int rc = mpi ? ptc_reshard_store_mpi(s, version, &cfg, MPI_COMM_WORLD, &o, &res)
                     : ptc_reshard_store(s, version, &cfg, &o, &res);
#endif
        /* peak resident memory, the largest over the processes (the
         * executor returns the same code on every process) */
        struct rusage ru;
        unsigned long long peak = 0, top = 0;
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            peak = (unsigned long long)ru.ru_maxrss * 1024; /* Linux: KiB */
        top = peak;
#ifndef PTC_CLI_LIGHT
        if (mpi) /* every process, whatever its code, so none waits */
            MPI_Reduce(&peak, &top, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
#endif
        if (rc != PTC_OK)
            ret = me == 0 ? ptc_cli_lib_error(rc) : PTC_CLI_FAIL;
        else if (me == 0)
            ret = print_result(&res, top, json);
        ptc_store_close(s);
    }
#ifndef PTC_CLI_LIGHT
    if (mpi)
        MPI_Finalize();
#endif
    return ret;
}
