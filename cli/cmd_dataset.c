/* ptc dataset: ingest records into the store, list and describe datasets,
 * and audit the served-count map (exactly-once). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "ptc/dataset.h"
#include "ptc/store.h"

const char ptc_cmd_dataset_help[] =
    "ingest, list, describe and audit datasets in a store\n"
    "\n"
    "usage: ptc dataset ingest --store DIR --name NAME --format FMT [--compress zstd[:L]]\n"
    "                          [--replace] [--json] [--lock-timeout S] INPUT...\n"
    "       ptc dataset ls     --store DIR [--json]\n"
    "       ptc dataset info   --store DIR --name NAME [--json]\n"
    "       ptc dataset audit  --store DIR --name NAME --seed S --epoch E [--json]\n"
    "                          [--policy P --batch B --dp D [--start X]]\n"
    "\n"
    "  --format FMT   lines | jsonl | files | tokens:u16:LEN | tokens:u32:LEN | npy | tfrecord\n"
    "  --compress zstd[:L]  compress each 1 MiB block with zstd (level L)\n"
    "  --replace      replace an existing dataset of that name (atomically; its\n"
    "                 served counts are cleared; `ptc gc` removes the old file)\n"
    "  --lock-timeout S  wait at most S seconds for the store's writer lock (default\n"
    "                 60, or PTC_LOCK_TIMEOUT; 0: fail at once if it is held)\n"
    "ingest stores the records (a name that exists is an error without --replace)\n"
    "and prints the number of records. audit prints\n"
    "{\"samples\":N,\"once\":..,\"repeated\":..,\"missing\":..} for (seed, epoch): how many\n"
    "records step files of the mounted store served once, more than once, never.\n"
    "  --policy P     the epoch was read under batch policy P (drop-last, equal,\n"
    "                 drop-last+equal or none) from batch-B/start-X/dp-D/policy-P:\n"
    "                 the records it drops count as \"dropped\" (a JSON key\n"
    "                 added with --policy), not as missing; --start defaults to 0\n"
    "Exit 0 on success, 1 on failure, 2 on a usage error.\n";

/* What the command line says. */
typedef struct dataset_args {
    const char *sub;
    bool ingest, ls, info, audit;
    ptc_cli_store cs;
    const char *name, *format, *policy_text;
    bool json, replace, have_seed, have_epoch, have_batch, have_dp, have_start;
    uint64_t seed, epoch;
    ptc_dataset_batch_policy pol;
    ptc_cli_compress z;
    int next;                /* the first INPUT */
} dataset_args;

static int print_json(json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return ptc_cli_error("out of memory formatting JSON");
    ptc_cli_print_json(s);
    free(s);
    return PTC_CLI_OK;
}

static void print_info_text(const ptc_store_dataset_info *d)
{
    time_t t = (time_t)(d->created_unix_ns / 1000000000);
    struct tm tm;
    char when[32] = "";
    if (gmtime_r(&t, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("%-20s %12llu samples %14llu bytes  %-16s %-4s %s\n", d->name,
           (unsigned long long)d->samples, (unsigned long long)d->bytes, d->format,
           d->codec ? "zstd" : "none", when);
}

static int parse_policy(const char *value, void *dest)
{
    dataset_args *d = dest;
    if (ptc_batch_policy_parse(value, &d->pol.policy) != PTC_OK)
        return ptc_cli_usage_error("--policy: '%s' is not a batch policy (drop-last, equal, "
                                   "drop-last+equal, none)", value);
    d->policy_text = value;
    return PTC_CLI_OK;
}

/* The options, and which go with which subcommand. */
static int parse_args(int argc, char **argv, dataset_args *d)
{
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STORE(&d->cs.dir),
        PTC_CLI_OPT_STR("name", &d->name),
        PTC_CLI_OPT_STR("format", &d->format),
        PTC_CLI_OPT_COMPRESS(&d->z),
        PTC_CLI_OPT_FLAG("replace", &d->replace),
        PTC_CLI_OPT_LOCK_TIMEOUT(&d->cs),
        PTC_CLI_OPT_JSON(&d->json),
        {.name = "seed", .kind = PTC_CLI_U64, .dest = &d->seed, .given = &d->have_seed,
         .bad = "--seed: '%s' is not a non-negative integer"},
        {.name = "epoch", .kind = PTC_CLI_U64, .dest = &d->epoch, .given = &d->have_epoch,
         .bad = "--epoch: '%s' is not a non-negative integer"},
        PTC_CLI_OPT_CALL("policy", parse_policy, d),
        {.name = "batch", .kind = PTC_CLI_U64, .dest = &d->pol.batch, .lo = 1,
         .given = &d->have_batch, .bad = "--batch: '%s' is not a positive integer"},
        {.name = "dp", .kind = PTC_CLI_U64, .dest = &d->pol.dp, .lo = 1, .given = &d->have_dp,
         .bad = "--dp: '%s' is not a positive integer"},
        {.name = "start", .kind = PTC_CLI_U64, .dest = &d->pol.start, .given = &d->have_start,
         .bad = "--start: '%s' is not a non-negative integer"},
        PTC_CLI_OPT_END};
    int rc = ptc_cli_parse(argc, argv, 2, opts, ptc_cmd_dataset_help, PTC_CLI_ARGS, &d->next);
    if (rc != PTC_CLI_CONTINUE)
        return rc;
    const char *sub = d->sub;
    bool have_policy = d->policy_text != NULL;
    if (!d->cs.dir)
        return ptc_cli_usage_error("dataset %s needs --store", sub);
    if (!d->ls && !d->name)
        return ptc_cli_usage_error("dataset %s needs --name", sub);
    if (d->name && !ptc_store_dataset_name_ok(d->name))
        return ptc_cli_usage_error("--name: '%s' is not a dataset name (1-255 characters of "
                                   "[A-Za-z0-9._-], not starting with '.')", d->name);
    if (!d->ingest && (d->format || d->z.codec || d->replace || d->cs.lock_timeout_given))
        return ptc_cli_usage_error("--format, --compress, --replace and --lock-timeout are for "
                                   "ingest");
    if (!d->audit && (d->have_seed || d->have_epoch))
        return ptc_cli_usage_error("--seed and --epoch are for audit");
    if (!d->audit && (have_policy || d->have_batch || d->have_dp || d->have_start))
        return ptc_cli_usage_error("--policy, --batch, --dp and --start are for audit");
    if (!have_policy && (d->have_batch || d->have_dp || d->have_start))
        return ptc_cli_usage_error("--batch, --dp and --start need --policy");
    if (have_policy && (!d->have_batch || !d->have_dp))
        return ptc_cli_usage_error("--policy needs --batch and --dp");
    if (d->ingest && !d->format)
        return ptc_cli_usage_error("dataset ingest needs --format");
    if (d->ingest && ptc_ingest_format_check(d->format) != PTC_OK)
        return ptc_cli_usage_error("--format: %s", ptc_last_error());
    if (d->ingest && d->next >= argc)
        return ptc_cli_usage_error("dataset ingest needs at least one INPUT");
    if (!d->ingest && d->next < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[d->next]);
    if (d->audit && (!d->have_seed || !d->have_epoch))
        return ptc_cli_usage_error("dataset audit needs --seed and --epoch");
    return PTC_CLI_CONTINUE;
}

static int run_ingest(const dataset_args *d, char **inputs, size_t n_inputs, int *ret)
{
    ptc_dataset_ingest_options io = {.codec = d->z.codec, .level = d->z.level,
                                     .replace = d->replace, .progress = ptc_cli_progress};
    uint64_t n = 0;
    int rc = ptc_dataset_ingest(d->cs.s, d->name, d->format, (const char *const *)inputs,
                                n_inputs, &io, &n);
    ptc_cli_progress_done();
    if (rc != PTC_OK)
        return rc;
    ptc_store_dataset_info info;
    rc = ptc_store_dataset_stat(d->cs.s, d->name, &info);
    if (rc == PTC_OK && d->json)
        *ret = print_json(ptc_cli_dataset_json(&info));
    else if (rc == PTC_OK)
        printf("dataset %s: %llu records, %llu bytes\n", d->name, (unsigned long long)n,
               (unsigned long long)info.bytes);
    return rc;
}

static int run_ls(const dataset_args *d, int *ret)
{
    ptc_store_dataset_info *v = NULL;
    size_t n = 0;
    int rc = ptc_store_datasets(d->cs.s, &v, &n);
    if (rc == PTC_OK && d->json) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < n; i++)
            json_array_append_new(a, ptc_cli_dataset_json(&v[i]));
        *ret = print_json(json_pack("{s:o}", "datasets", a));
    } else if (rc == PTC_OK) {
        for (size_t i = 0; i < n; i++)
            print_info_text(&v[i]);
    }
    ptc_store_free(v);
    return rc;
}

static int run_info(const dataset_args *d, int *ret)
{
    ptc_store_dataset_info info;
    int rc = ptc_store_dataset_stat(d->cs.s, d->name, &info);
    if (rc == PTC_OK && d->json)
        *ret = print_json(ptc_cli_dataset_json(&info));
    else if (rc == PTC_OK)
        print_info_text(&info);
    return rc;
}

static int run_audit(const dataset_args *d, int *ret)
{
    ptc_dataset_audit_result a;
    const char *pt = d->policy_text;
    int rc = ptc_dataset_audit_policy(d->cs.s, d->name, d->seed, d->epoch, pt ? &d->pol : NULL,
                                      &a);
    if (rc != PTC_OK)
        return rc;
    if (d->json && pt)
        *ret = print_json(json_pack("{s:I, s:I, s:I, s:I, s:I}", "samples",
                                    (json_int_t)a.samples, "once", (json_int_t)a.once,
                                    "repeated", (json_int_t)a.repeated, "missing",
                                    (json_int_t)a.missing, "dropped", (json_int_t)a.dropped));
    else if (d->json)
        *ret = print_json(json_pack("{s:I, s:I, s:I, s:I}", "samples", (json_int_t)a.samples,
                                    "once", (json_int_t)a.once, "repeated",
                                    (json_int_t)a.repeated, "missing", (json_int_t)a.missing));
    else if (pt)
        printf("dataset %s seed %llu epoch %llu policy %s: %llu samples, %llu served once, "
               "%llu repeated, %llu missing, %llu dropped\n",
               d->name, (unsigned long long)d->seed, (unsigned long long)d->epoch, pt,
               (unsigned long long)a.samples, (unsigned long long)a.once,
               (unsigned long long)a.repeated, (unsigned long long)a.missing,
               (unsigned long long)a.dropped);
    else
        printf("dataset %s seed %llu epoch %llu: %llu samples, %llu served once, %llu "
               "repeated, %llu missing\n",
               d->name, (unsigned long long)d->seed, (unsigned long long)d->epoch,
               (unsigned long long)a.samples, (unsigned long long)a.once,
               (unsigned long long)a.repeated, (unsigned long long)a.missing);
    return PTC_OK;
}

int ptc_cmd_dataset(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            ptc_cli_help(ptc_cmd_dataset_help);
            return PTC_CLI_OK;
        }
        return ptc_cli_usage_error("dataset needs a subcommand: ingest, ls, info or audit");
    }
    dataset_args d = {.sub = argv[1]};
    d.ingest = !strcmp(d.sub, "ingest");
    d.ls = !strcmp(d.sub, "ls");
    d.info = !strcmp(d.sub, "info");
    d.audit = !strcmp(d.sub, "audit");
    if (!d.ingest && !d.ls && !d.info && !d.audit)
        return ptc_cli_usage_error("unknown dataset subcommand '%s' (ingest, ls, info, audit)",
                                   d.sub);
    int ret = parse_args(argc, argv, &d);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    ret = ptc_cli_store_open(&d.cs, d.ingest ? PTC_CLI_STORE_NEW : PTC_CLI_STORE_OPEN, 0);
    if (ret)
        return ret;
    int rc;
    if (d.ingest)
        rc = run_ingest(&d, argv + d.next, (size_t)(argc - d.next), &ret);
    else if (d.ls)
        rc = run_ls(&d, &ret);
    else if (d.info)
        rc = run_info(&d, &ret);
    else
        rc = run_audit(&d, &ret);
    if (rc)
        ret = ptc_cli_lib_error(rc);
    ptc_cli_store_close(&d.cs, ret != PTC_CLI_OK);
    return ret;
}
