/* ptc versions: list the committed versions of a store; delete one. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "ptc/store.h"

const char ptc_cmd_versions_help[] =
    "list the committed versions of a store, or delete one\n"
    "\n"
    "usage: ptc versions --store DIR [--json]\n"
    "       ptc versions --store DIR delete V\n"
    "  --json    {\"versions\":[{\"version\",\"parent\",\"step\",\"config\",\"created\",\n"
    "            \"tensors\",\"bytes\",\"stored_bytes\"}...]}\n"
    "  delete V  remove version V's metadata in one transaction (other versions,\n"
    "            including those made from it, stay readable); `ptc gc` then frees\n"
    "            the pack files no committed version references\n";

/* ptc versions ... delete V */
static int delete_version(ptc_cli_store *cs, int argc, char **argv)
{
    if (argc != 2)
        return ptc_cli_usage_error("versions delete takes exactly one version number");
    uint64_t v;
    if (!ptc_cli_parse_version(argv[1], &v))
        return ptc_cli_usage_error("delete: '%s' is not a version number", argv[1]);
    int ret = ptc_cli_store_open(cs, PTC_CLI_STORE_OPEN, 0);
    if (ret)
        return ret;
    int rc = ptc_store_version_delete(cs->s, v);
    if (rc)
        ret = ptc_cli_lib_error(rc);
    else
        printf("deleted version %llu (run ptc gc to free its pack files)\n",
               (unsigned long long)v);
    ptc_cli_store_close(cs, ret != PTC_CLI_OK);
    return ret;
}

int ptc_cmd_versions(int argc, char **argv)
{
    ptc_cli_store cs = {0};
    bool json = false;
    const ptc_cli_opt opts[] = {PTC_CLI_OPT_STORE(&cs.dir), PTC_CLI_OPT_JSON(&json),
                                PTC_CLI_OPT_END};
    int next;
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_versions_help, PTC_CLI_ARGS, &next);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (next < argc && strcmp(argv[next], "delete") == 0) {
        if (json)
            return ptc_cli_usage_error("versions delete takes no --json");
        return delete_version(&cs, argc - next, argv + next);
    }
    if (next < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[next]);
    ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_OPEN, 0);
    if (ret)
        return ret;
    ptc_version_info *v = NULL;
    size_t n = 0;
    int rc = ptc_store_versions(cs.s, &v, &n);
    if (rc) {
        ret = ptc_cli_lib_error(rc);
        goto out_close;
    }
    if (json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(
                arr, json_pack("{s:I,s:I,s:s,s:s,s:I,s:I,s:I,s:I}", "version",
                               (json_int_t)v[i].version, "parent", (json_int_t)v[i].parent,
                               "step", v[i].step ? v[i].step : "", "config", v[i].config,
                               "created_unix_ns", (json_int_t)v[i].created_unix_ns, "tensors",
                               (json_int_t)v[i].tensor_count, "bytes", (json_int_t)v[i].bytes,
                               "stored_bytes", (json_int_t)v[i].stored_bytes));
        json_t *obj = json_pack("{s:o}", "versions", arr);
        char *text = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
        ptc_cli_print_json(text ? text : "{}");
        free(text);
        json_decref(obj);
    } else {
        printf("%-8s %-8s %-10s %-28s %-20s %s\n", "version", "parent", "step", "config",
               "created (UTC)", "bytes");
        for (size_t i = 0; i < n; i++) {
            time_t t = (time_t)(v[i].created_unix_ns / 1000000000);
            struct tm tm;
            char when[32];
            gmtime_r(&t, &tm);
            strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
            printf("%-8llu %-8llu %-10s %-28s %-20s %llu\n", (unsigned long long)v[i].version,
                   (unsigned long long)v[i].parent, v[i].step && *v[i].step ? v[i].step : "-",
                   v[i].config, when, (unsigned long long)v[i].bytes);
        }
    }
    ptc_store_versions_free(v, n);
out_close:
    ptc_cli_store_close(&cs, ret != PTC_CLI_OK);
    return ret;
}
