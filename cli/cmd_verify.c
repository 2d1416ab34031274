/* ptc verify: re-check every block checksum a version references. */
#include <getopt.h>

#include "cli/cli.h"
#include "ptc/store.h"

const char ptc_cmd_verify_help[] =
    "re-check every stored block checksum of a version (or all versions)\n"
    "\n"
    "usage: ptc verify --store DIR [--version V | --all] [--json]\n"
    "Reads every block a version references (its own and shared extents),\n"
    "decompresses it and compares its XXH3-64. Exit 1 names the first bad block.\n"
    "--json prints {\"ok\":true,\"version\":V}, or with --all\n"
    "{\"ok\":true,\"versions\":[V,...]} (every version checked).\n";

int ptc_cmd_verify(int argc, char **argv)
{
    static const struct option opts[] = {
        {"store", required_argument, NULL, 's'}, {"version", required_argument, NULL, 'v'},
        {"all", no_argument, NULL, 'a'},         {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *store = NULL;
    uint64_t version = 0;
    bool json = false, all = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': store = optarg; break;
        case 'v':
            if (!ptc_cli_parse_version(optarg, &version))
                return ptc_cli_usage_error("--version: '%s' is not a version number", optarg);
            break;
        case 'a': all = true; break;
        case 'j': json = true; break;
        case 'h': ptc_cli_help(ptc_cmd_verify_help); return PTC_CLI_OK;
        default: return ptc_cli_bad_option(argv);
        }
    }
    if (optind < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (all && version)
        return ptc_cli_usage_error("--all and --version exclude each other");
    ptc_store *s = NULL;
    int ret = ptc_cli_open_store(store, false, &s);
    if (ret)
        return ret;
    uint64_t latest = 0;
    int rc = ptc_store_latest(s, &latest);
    if (rc == PTC_OK && latest == 0)
        rc = ptc_error_set(PTC_E_NOTFOUND, "store %s holds no version", store);
    if (rc == PTC_OK)
        rc = ptc_store_verify(s, all ? PTC_STORE_ALL_VERSIONS : version, ptc_cli_progress, NULL);
    ptc_cli_progress_done();
    if (rc) {
        ret = ptc_cli_lib_error(rc);
    } else if (json && all) {
        /* every version checked, by number (there is no single one to name) */
        ptc_version_info *v = NULL;
        size_t n = 0;
        if ((rc = ptc_store_versions(s, &v, &n)) != PTC_OK) {
            ret = ptc_cli_lib_error(rc);
        } else {
            printf("{\"ok\":true,\"versions\":[");
            for (size_t i = 0; i < n; i++)
                printf("%s%llu", i ? "," : "", (unsigned long long)v[i].version);
            printf("]}\n");
        }
        ptc_store_versions_free(v, n);
    } else if (json) {
        printf("{\"ok\":true,\"version\":%llu}\n",
               (unsigned long long)(version ? version : latest));
    } else if (all) {
        printf("all versions verified\n");
    } else {
        printf("version %llu verified\n", (unsigned long long)(version ? version : latest));
    }
    ptc_store_close(s);
    return ret;
}
