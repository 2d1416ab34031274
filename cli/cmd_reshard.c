/* ptc reshard: write a stored version under another configuration as a new
 * version (threads on one host, or MPI processes with --mpi).
 *
 * Built into both commands (CMakeLists.txt). The run with --mpi is
 * ptc_cli_reshard_mpi: cli/reshard_light.c in the light `ptc` hands it to
 * ptc-full, cli/reshard_full.c in ptc-full runs it, so that a reshard
 * without MPI maps no MPI library. */
#include <string.h>

#include "cli/cli_reshard.h"

const char ptc_cmd_reshard_help[] =
    "reshard a stored version to another configuration (a new version)\n"
    "\n"
    "usage: ptc reshard --store DIR [--version V] --to CFG [--threads N] [--step N]\n"
    "                   [--dtype F32|BF16|F16] [--compress zstd[:L]] [--hosts H] [--json]\n"
    "       mpirun -np N ptc reshard --mpi [--mpi-budget BYTES] --store DIR --to CFG ...\n"
    "       mpirun -np N ptc reshard --mpi --across-hosts --store DIR [--version G] --to CFG\n"
    "                   [--out DIR2 | --replicas K] [--json]\n"
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
    "  --across-hosts with --mpi: DIR is a store spread over hosts (ptc train\n"
    "                 --replicas; the same path on every host, each host its own\n"
    "                 disk): version G across hosts (default: the newest committed\n"
    "                 one the hosts present hold whole, after a recovery; as ptc\n"
    "                 train --resume) is read by the processes of the hosts that\n"
    "                 hold each rank and every missing byte moves over MPI by the\n"
    "                 minimal plan; a host whose store is empty or missing (a\n"
    "                 fresh or replaced host) takes the version's layout from a\n"
    "                 host holding a part and receives every byte it writes; the\n"
    "                 target ranks' state is held in memory\n"
    "                 (--threads, --step, --dtype, --compress, --hosts and\n"
    "                 --mpi-budget do not apply)\n"
    "  --out DIR2     with --across-hosts: write CFG as a version of the ordinary\n"
    "                 store DIR2 on process 0's host (made if needed; mount or\n"
    "                 export it there); default: a new version across hosts of DIR\n"
    "  --replicas K   with --across-hosts and no --out: copies of each host's\n"
    "                 shards on the next K hosts (default: the source's)\n"
    "  --json         print one JSON object: version, parent, written/reused/aliased\n"
    "                 shards, bytes_written, seconds, the plan figures and (--mpi)\n"
    "                 rounds and max_round_bytes; peak_rss_bytes: the largest peak\n"
    "                 resident memory of a process\n"
    "                 (--across-hosts: version, out, hosts, source_version,\n"
    "                 bytes_network = bytes moved between hosts, its lower bound,\n"
    "                 max_host_bytes = the busiest host's, bytes_read, load_seconds)\n"
    "Unchanged shards are referenced, replicas aliased; the new version becomes\n"
    "visible only when every byte is on disk and checksummed. Prints the version.\n";

/* --dtype (dest: ptc_dtype *). */
static int parse_dtype(const char *v, void *dest)
{
    ptc_dtype *dt = dest;
    if (!strcmp(v, "F32"))
        *dt = PTC_DTYPE_F32;
    else if (!strcmp(v, "BF16"))
        *dt = PTC_DTYPE_BF16;
    else if (!strcmp(v, "F16"))
        *dt = PTC_DTYPE_F16;
    else
        return ptc_cli_usage_error("--dtype must be F32, BF16 or F16, not '%s'", v);
    return PTC_CLI_OK;
}

int ptc_cmd_reshard(int argc, char **argv)
{
    int ret = ptc_cli_reshard_handoff(argc, argv);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    ptc_cli_reshard a = {.replicas = -1};
    const char *to = NULL;
    bool mpi = false;
    ptc_cli_compress z = {0};
    ptc_reshard_options *o = &a.opts;
    ptc_reshard_options_init(o);
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STORE(&a.cs.dir), PTC_CLI_OPT_VERSION(&a.version),
        PTC_CLI_OPT_STR("to", &to),
        PTC_CLI_OPT_INT("threads", &o->threads, 1, 4096, "--threads: '%s' is not 1..4096"),
        PTC_CLI_OPT_CALL("step", ptc_cli_opt_step, &o->step),
        PTC_CLI_OPT_CALL("dtype", parse_dtype, &o->dtype), PTC_CLI_OPT_COMPRESS(&z),
        PTC_CLI_OPT_INT("hosts", &o->hosts, 1, PTC_CONFIG_MAX_WORLD,
                        "--hosts: '%s' is not a positive number"),
        PTC_CLI_OPT_FLAG("mpi", &mpi), PTC_CLI_OPT_JSON(&a.json),
        PTC_CLI_OPT_FLAG("across-hosts", &a.across_hosts), PTC_CLI_OPT_STR("out", &a.out),
        PTC_CLI_OPT_INT("replicas", &a.replicas, 0, PTC_CONFIG_MAX_WORLD,
                        "--replicas: '%s' is not a count of hosts"),
        PTC_CLI_OPT_U64("mpi-budget", &o->mpi_budget, 1, 0,
                        "--mpi-budget: '%s' is not a positive byte count"),
        PTC_CLI_OPT_END};
    ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_reshard_help, 0, NULL);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (z.codec) {
        o->codec = z.codec;
        o->level = z.level;
    }
    if (!to)
        return ptc_cli_usage_error("--to CFG is required");
    if (ptc_config_parse(&a.cfg, to) != PTC_OK)
        return ptc_cli_usage_error("--to: %s", ptc_last_error());
    if (a.across_hosts && !mpi)
        return ptc_cli_usage_error("--across-hosts needs --mpi (one process per host or more "
                                   "under mpirun)");
    if (a.across_hosts) { /* the load across hosts and the checkpoint save take none of these */
        const char *no = o->step ? "step" : o->dtype != PTC_RESHARD_DTYPE_KEEP ? "dtype"
                       : z.codec ? "compress" : o->threads ? "threads" : o->hosts ? "hosts"
                       : o->mpi_budget ? "mpi-budget" : NULL;
        if (no)
            return ptc_cli_usage_error("--%s does not apply to --across-hosts", no);
    }
    if (!a.across_hosts && (a.out || a.replicas >= 0))
        return ptc_cli_usage_error("--%s applies to --across-hosts", a.out ? "out" : "replicas");
    if (a.out && a.replicas >= 0)
        return ptc_cli_usage_error("--replicas applies to a version across hosts, not to --out");
    if (mpi)
        return ptc_cli_reshard_mpi(&a, argc, argv);
    ret = ptc_cli_store_open(&a.cs, PTC_CLI_STORE_OPEN, 0);
    if (ret)
        return ret;
    ptc_reshard_result res;
    int rc = ptc_reshard_store(a.cs.s, a.version, &a.cfg, o, &res);
    if (rc != PTC_OK)
        ret = ptc_cli_lib_error(rc);
    else
        ret = ptc_cli_reshard_print(&res, ptc_cli_peak_rss(), a.json);
    ptc_cli_store_close(&a.cs, ret != PTC_CLI_OK);
    return ret;
}
