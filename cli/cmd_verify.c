/* ptc verify: re-check every block checksum a version references. */
#include <getopt.h>
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
    static const struct option opts[] = {
        {"store", required_argument, NULL, 's'}, {"version", required_argument, NULL, 'v'},
        {"all", no_argument, NULL, 'a'},         {"json", no_argument, NULL, 'j'},
        {"dataset", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *store = NULL, *dataset = NULL;
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
        case 'd': dataset = optarg; break;
        case 'j': json = true; break;
        case 'h': ptc_cli_help(ptc_cmd_verify_help); return PTC_CLI_OK;
        default: return ptc_cli_bad_option(argv);
        }
    }
    if (optind < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[optind]);
    if ((all && version) || (dataset && (all || version)))
        return ptc_cli_usage_error("--all, --version and --dataset exclude each other");
    if (!store)
        return ptc_cli_usage_error("--store DIR is required");
    /* the page structure of the metadata first, whatever its size */
    ptc_store *s = NULL;
    ptc_store_options so = {.flags = PTC_STORE_CHECK};
    int ret = PTC_CLI_OK, rc0 = ptc_store_open_ex(&s, store, &so);
    if (rc0)
        return ptc_cli_lib_error(rc0);
    uint64_t latest = 0;
    unsigned fmt = 0;
    int rc = ptc_store_format(s, &fmt);
    if (rc == PTC_OK)
        rc = ptc_store_latest(s, &latest);
    if (rc == PTC_OK && latest == 0 && !all && !dataset)
        rc = ptc_error_set(PTC_E_NOTFOUND, "store %s holds no version (--all checks its datasets)",
                           store);
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
    ptc_store_close(s);
    return ret;
}
