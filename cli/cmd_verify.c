/* ptc verify: re-check every block checksum a version references. */
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
    ptc_cli_store cs = {0};
    uint64_t version = 0;
    bool json = false, all = false;
    const ptc_cli_opt opts[] = {PTC_CLI_OPT_STORE(&cs.dir), PTC_CLI_OPT_VERSION(&version),
                                PTC_CLI_OPT_FLAG("all", &all), PTC_CLI_OPT_JSON(&json),
                                PTC_CLI_OPT_END};
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_verify_help, 0, NULL);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (all && version)
        return ptc_cli_usage_error("--all and --version exclude each other");
    ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_OPEN, 0);
    if (ret)
        return ret;
    ptc_store *s = cs.s;
    uint64_t latest = 0;
    int rc = ptc_store_latest(s, &latest);
    if (rc == PTC_OK && latest == 0)
        rc = ptc_error_set(PTC_E_NOTFOUND, "store %s holds no version", cs.dir);
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
    ptc_cli_store_close(&cs, ret != PTC_CLI_OK);
    return ret;
}
