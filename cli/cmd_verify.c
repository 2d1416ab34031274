/* ptc verify: re-check every block checksum a version references. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "ptc/store.h"

const char ptc_cmd_verify_help[] =
    "re-check every stored block checksum of a version (or all versions)\n"
    "\n"
    "usage: ptc verify --store DIR [--version V | --all | --dataset NAME] [--json]\n"
    "Reads every block a version references (its own and shared extents),\n"
    "decompresses it and compares its XXH3-64, and checks the version's metadata\n"
    "records against their checksums. --all checks every version and every\n"
    "dataset (its records, its index); --dataset one dataset. The page structure\n"
    "of the metadata file (meta/data.mdb) is checked first. Exit 1 names the\n"
    "first bad block, record or page.\n"
    "--json prints {\"ok\":true,\"version\":V}, with --dataset\n"
    "{\"ok\":true,\"dataset\":NAME}, or with --all\n"
    "{\"ok\":true,\"versions\":[V,...],\"datasets\":[NAME,...]} (all checked);\n"
    "\"metadata_checked\":false marks a store of format 1, whose metadata has no\n"
    "checksums yet (its next write adds them).\n";

/* {"ok":true,"versions":[V,...],"datasets":[NAME,...]}: every one checked */
static int print_all_json(ptc_store *s, const char *unchecked)
{
    ptc_version_info *v = NULL;
    ptc_store_dataset_info *d = NULL;
    size_t nv = 0, nd = 0;
    int rc = ptc_store_versions(s, &v, &nv);
    if (rc == PTC_OK)
        rc = ptc_store_datasets(s, &d, &nd);
    json_t *vs = json_array(), *ds = json_array();
    for (size_t i = 0; rc == PTC_OK && i < nv; i++)
        json_array_append_new(vs, json_integer((json_int_t)v[i].version));
    for (size_t i = 0; rc == PTC_OK && i < nd; i++)
        json_array_append_new(ds, json_string(d[i].name));
    json_t *j = json_pack("{s:b, s:o, s:o}", "ok", 1, "versions", vs, "datasets", ds);
    char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (rc == PTC_OK && t)
        printf("%.*s%s}\n", (int)strlen(t) - 1, t, unchecked);
    free(t);
    json_decref(j);
    ptc_store_versions_free(v, nv);
    ptc_store_free(d);
    if (rc)
        return ptc_cli_lib_error(rc);
    return t ? PTC_CLI_OK : ptc_cli_error("out of memory formatting JSON");
}

int ptc_cmd_verify(int argc, char **argv)
{
    ptc_cli_store cs = {.flags = PTC_STORE_CHECK}; /* data.mdb's pages first, whatever its size */
    uint64_t version = 0;
    bool json = false, all = false;
    const char *dataset = NULL;
    const ptc_cli_opt opts[] = {PTC_CLI_OPT_STORE(&cs.dir),       PTC_CLI_OPT_VERSION(&version),
                                PTC_CLI_OPT_FLAG("all", &all),     PTC_CLI_OPT_JSON(&json),
                                PTC_CLI_OPT_STR("dataset", &dataset), PTC_CLI_OPT_END};
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_verify_help, 0, NULL);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if ((all && version) || (dataset && (all || version)))
        return ptc_cli_usage_error("--all, --version and --dataset exclude each other");
    ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_OPEN, 0);
    if (ret)
        return ret;
    ptc_store *s = cs.s;
    uint64_t latest = 0;
    unsigned fmt = 0;
    int rc = ptc_store_format(s, &fmt);
    if (rc == PTC_OK)
        rc = ptc_store_latest(s, &latest);
    if (rc == PTC_OK && latest == 0 && !all && !dataset)
        rc = ptc_error_set(PTC_E_NOTFOUND, "store %s holds no version (--all checks its datasets)",
                           cs.dir);
    if (rc == PTC_OK && dataset)
        rc = ptc_store_dataset_verify(s, dataset, ptc_cli_progress, NULL);
    else if (rc == PTC_OK)
        rc = ptc_store_verify(s, all ? PTC_STORE_ALL_VERSIONS : version, ptc_cli_progress, NULL);
    ptc_cli_progress_done();
    const char *unchecked = fmt < 2 ? ",\"metadata_checked\":false" : "";
    if (rc) {
        ret = ptc_cli_lib_error(rc);
    } else if (json && all) {
        ret = print_all_json(s, unchecked);
    } else if (json && dataset) {
        json_t *j = json_pack("{s:b, s:s}", "ok", 1, "dataset", dataset);
        char *t = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (t)
            printf("%.*s%s}\n", (int)strlen(t) - 1, t, unchecked);
        free(t);
        json_decref(j);
    } else if (json) {
        printf("{\"ok\":true,\"version\":%llu%s}\n",
               (unsigned long long)(version ? version : latest), unchecked);
    } else if (dataset) {
        printf("dataset %s verified\n", dataset);
    } else if (all) {
        printf("all versions and datasets verified\n");
    } else {
        printf("version %llu verified\n", (unsigned long long)(version ? version : latest));
    }
    if (rc == PTC_OK && !json && fmt < 2)
        printf("note: store format 1: its metadata has no checksums yet (the next write adds "
               "them)\n");
    ptc_cli_store_close(&cs, ret != PTC_CLI_OK);
    return ret;
}
