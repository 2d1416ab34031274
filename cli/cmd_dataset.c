/* ptc dataset: ingest records into the store, list and describe datasets,
 * and audit the served-count map (exactly-once). */
#include <getopt.h>
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

enum { OPT_STORE = 's', OPT_NAME = 'n', OPT_FORMAT = 'f', OPT_COMPRESS = 'z', OPT_REPLACE = 'r',
       OPT_JSON = 'j', OPT_SEED = 'S', OPT_EPOCH = 'E', OPT_HELP = 'h', OPT_POLICY = 'P',
       OPT_BATCH = 'B', OPT_DP = 'D', OPT_START = 'X', OPT_LOCK_TIMEOUT = 'L' };


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

int ptc_cmd_dataset(int argc, char **argv)
{
    static const struct option opts[] = {
        {"store", required_argument, NULL, OPT_STORE},
        {"name", required_argument, NULL, OPT_NAME},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"compress", required_argument, NULL, OPT_COMPRESS},
        {"replace", no_argument, NULL, OPT_REPLACE},
        {"json", no_argument, NULL, OPT_JSON},
        {"seed", required_argument, NULL, OPT_SEED},
        {"epoch", required_argument, NULL, OPT_EPOCH},
        {"policy", required_argument, NULL, OPT_POLICY},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"dp", required_argument, NULL, OPT_DP},
        {"start", required_argument, NULL, OPT_START},
        {"lock-timeout", required_argument, NULL, OPT_LOCK_TIMEOUT},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            ptc_cli_help(ptc_cmd_dataset_help);
            return PTC_CLI_OK;
        }
        return ptc_cli_usage_error("dataset needs a subcommand: ingest, ls, info or audit");
    }
    const char *sub = argv[1];
    bool ingest = !strcmp(sub, "ingest"), ls = !strcmp(sub, "ls"), info = !strcmp(sub, "info"),
         audit = !strcmp(sub, "audit");
    if (!ingest && !ls && !info && !audit)
        return ptc_cli_usage_error("unknown dataset subcommand '%s' (ingest, ls, info, audit)",
                                   sub);
    const char *store = NULL, *name = NULL, *format = NULL, *lock_timeout = NULL;
    bool json = false, have_seed = false, have_epoch = false;
    uint64_t seed = 0, epoch = 0;
    const char *policy_text = NULL;
    bool have_batch = false, have_dp = false, have_start = false;
    ptc_dataset_batch_policy pol = {0};
    ptc_dataset_ingest_options io = {0};
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_STORE: store = optarg; break;
        case OPT_NAME: name = optarg; break;
        case OPT_FORMAT: format = optarg; break;
        case OPT_REPLACE: io.replace = true; break;
        case OPT_JSON: json = true; break;
        case OPT_COMPRESS:
            if (ptc_cli_parse_compress(optarg, &io.codec, &io.level))
                return PTC_CLI_USAGE;
            break;
        case OPT_SEED:
            if (!ptc_cli_parse_u64(optarg, &seed))
                return ptc_cli_usage_error("--seed: '%s' is not a non-negative integer", optarg);
            have_seed = true;
            break;
        case OPT_EPOCH:
            if (!ptc_cli_parse_u64(optarg, &epoch))
                return ptc_cli_usage_error("--epoch: '%s' is not a non-negative integer", optarg);
            have_epoch = true;
            break;
        case OPT_POLICY:
            if (ptc_batch_policy_parse(optarg, &pol.policy) != PTC_OK)
                return ptc_cli_usage_error("--policy: '%s' is not a batch policy (drop-last, "
                                           "equal, drop-last+equal, none)",
                                           optarg);
            policy_text = optarg;
            break;
        case OPT_BATCH:
            if (!ptc_cli_parse_u64(optarg, &pol.batch) || pol.batch == 0)
                return ptc_cli_usage_error("--batch: '%s' is not a positive integer", optarg);
            have_batch = true;
            break;
        case OPT_DP:
            if (!ptc_cli_parse_u64(optarg, &pol.dp) || pol.dp == 0)
                return ptc_cli_usage_error("--dp: '%s' is not a positive integer", optarg);
            have_dp = true;
            break;
        case OPT_START:
            if (!ptc_cli_parse_u64(optarg, &pol.start))
                return ptc_cli_usage_error("--start: '%s' is not a non-negative integer", optarg);
            have_start = true;
            break;
        case OPT_LOCK_TIMEOUT: lock_timeout = optarg; break;
        case OPT_HELP: ptc_cli_help(ptc_cmd_dataset_help); return PTC_CLI_OK;
        default: return ptc_cli_bad_option(argv);
        }
    }
    if (!store)
        return ptc_cli_usage_error("dataset %s needs --store", sub);
    if (!ls && !name)
        return ptc_cli_usage_error("dataset %s needs --name", sub);
    if (name && !ptc_store_dataset_name_ok(name))
        return ptc_cli_usage_error("--name: '%s' is not a dataset name (1-255 characters of "
                                   "[A-Za-z0-9._-], not starting with '.')",
                                   name);
    if (!ingest && (format || io.codec || io.replace || lock_timeout))
        return ptc_cli_usage_error("--format, --compress, --replace and --lock-timeout are for "
                                   "ingest");
    if (!audit && (have_seed || have_epoch))
        return ptc_cli_usage_error("--seed and --epoch are for audit");
    if (!audit && (policy_text || have_batch || have_dp || have_start))
        return ptc_cli_usage_error("--policy, --batch, --dp and --start are for audit");
    if (!policy_text && (have_batch || have_dp || have_start))
        return ptc_cli_usage_error("--batch, --dp and --start need --policy");
    if (policy_text && (!have_batch || !have_dp))
        return ptc_cli_usage_error("--policy needs --batch and --dp");
    if (ingest && !format)
        return ptc_cli_usage_error("dataset ingest needs --format");
    if (ingest && ptc_ingest_format_check(format) != PTC_OK)
        return ptc_cli_usage_error("--format: %s", ptc_last_error());
    if (ingest && optind >= argc)
        return ptc_cli_usage_error("dataset ingest needs at least one INPUT");
    if (!ingest && optind < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[optind]);
    if (audit && (!have_seed || !have_epoch))
        return ptc_cli_usage_error("dataset audit needs --seed and --epoch");

    ptc_store *s = NULL;
    int created = 0;
    int ret = ingest ? ptc_cli_open_store_new(store, &s, &created)
                     : ptc_cli_open_store(store, false, &s);
    if (ret)
        return ret;
    int rc = PTC_OK;
    if (ingest && (ret = ptc_cli_lock_timeout(s, lock_timeout))) {
        ptc_cli_close_store_new(s, store, created, true);
        return ret;
    }
    if (ingest) {
        io.progress = ptc_cli_progress;
        uint64_t n = 0;
        rc = ptc_dataset_ingest(s, name, format, (const char *const *)argv + optind,
                                (size_t)(argc - optind), &io, &n);
        ptc_cli_progress_done();
        if (rc == PTC_OK) {
            ptc_store_dataset_info d;
            rc = ptc_store_dataset_stat(s, name, &d);
            if (rc == PTC_OK && json) {
                ret = print_json(ptc_cli_dataset_json(&d));
            } else if (rc == PTC_OK) {
                printf("dataset %s: %llu records, %llu bytes\n", name, (unsigned long long)n,
                       (unsigned long long)d.bytes);
            }
        }
    } else if (ls) {
        ptc_store_dataset_info *v = NULL;
        size_t n = 0;
        rc = ptc_store_datasets(s, &v, &n);
        if (rc == PTC_OK && json) {
            json_t *a = json_array();
            for (size_t i = 0; a && i < n; i++) {
                json_array_append_new(a, ptc_cli_dataset_json(&v[i]));
            }
            ret = print_json(json_pack("{s:o}", "datasets", a));
        } else if (rc == PTC_OK) {
            for (size_t i = 0; i < n; i++)
                print_info_text(&v[i]);
        }
        ptc_store_free(v);
    } else if (info) {
        ptc_store_dataset_info d;
        rc = ptc_store_dataset_stat(s, name, &d);
        if (rc == PTC_OK && json) {
            ret = print_json(ptc_cli_dataset_json(&d));
        } else if (rc == PTC_OK) {
            print_info_text(&d);
        }
    } else {
        ptc_dataset_audit_result a;
        rc = ptc_dataset_audit_policy(s, name, seed, epoch, policy_text ? &pol : NULL, &a);
        if (rc == PTC_OK && json && policy_text)
            ret = print_json(json_pack("{s:I, s:I, s:I, s:I, s:I}", "samples",
                                       (json_int_t)a.samples, "once", (json_int_t)a.once,
                                       "repeated", (json_int_t)a.repeated, "missing",
                                       (json_int_t)a.missing, "dropped", (json_int_t)a.dropped));
        else if (rc == PTC_OK && json)
            ret = print_json(json_pack("{s:I, s:I, s:I, s:I}", "samples", (json_int_t)a.samples,
                                       "once", (json_int_t)a.once, "repeated",
                                       (json_int_t)a.repeated, "missing",
                                       (json_int_t)a.missing));
        else if (rc == PTC_OK && policy_text)
            printf("dataset %s seed %llu epoch %llu policy %s: %llu samples, %llu served once, "
                   "%llu repeated, %llu missing, %llu dropped\n",
                   name, (unsigned long long)seed, (unsigned long long)epoch, policy_text,
                   (unsigned long long)a.samples, (unsigned long long)a.once,
                   (unsigned long long)a.repeated, (unsigned long long)a.missing,
                   (unsigned long long)a.dropped);
        else if (rc == PTC_OK)
            printf("dataset %s seed %llu epoch %llu: %llu samples, %llu served once, %llu "
                   "repeated, %llu missing\n",
                   name, (unsigned long long)seed, (unsigned long long)epoch,
                   (unsigned long long)a.samples, (unsigned long long)a.once,
                   (unsigned long long)a.repeated, (unsigned long long)a.missing);
    }
    if (rc)
        ret = ptc_cli_lib_error(rc);
    ptc_cli_close_store_new(s, store, created, ret != PTC_CLI_OK);
    return ret;
}
