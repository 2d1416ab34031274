/* ptc gc: remove pack files no committed version references. */
#include <getopt.h>

#include "cli/cli.h"
#include "ptc/store.h"

const char ptc_cmd_gc_help[] =
    "delete pack files that no committed version references\n"
    "\n"
    "usage: ptc gc --store DIR [--json] [--lock-timeout SECONDS]\n"
    "Removes the debris of interrupted imports and reshards and the files of\n"
    "deleted versions; never a file a committed version references. It holds the\n"
    "store's writer lock in slices: a writer that queues (a training job's save)\n"
    "gets the lock after the file gc is removing, then gc goes on.\n"
    "  --lock-timeout S  wait at most S seconds for the writer lock (default 60, or\n"
    "                    PTC_LOCK_TIMEOUT; 0: fail at once if it is held)\n";

int ptc_cmd_gc(int argc, char **argv)
{
    static const struct option opts[] = {
        {"store", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"lock-timeout", required_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *store = NULL, *lock_timeout = NULL;
    bool json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 's': store = optarg; break;
        case 'j': json = true; break;
        case 'L': lock_timeout = optarg; break;
        case 'h': ptc_cli_help(ptc_cmd_gc_help); return PTC_CLI_OK;
        default: return ptc_cli_bad_option(argv);
        }
    }
    if (optind < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[optind]);
    ptc_store *s = NULL;
    int ret = ptc_cli_open_store(store, false, &s);
    if (ret)
        return ret;
    if ((ret = ptc_cli_lock_timeout(s, lock_timeout))) {
        ptc_store_close(s);
        return ret;
    }
    ptc_store_gc_stats st = {0};
    int rc = ptc_store_gc(s, &st);
    if (rc)
        ret = ptc_cli_lib_error(rc);
    else if (json)
        printf("{\"files_removed\":%llu,\"dirs_removed\":%llu,\"bytes_removed\":%llu}\n",
               (unsigned long long)st.files_removed, (unsigned long long)st.dirs_removed,
               (unsigned long long)st.bytes_removed);
    else
        printf("removed %llu files, %llu directories, %llu bytes\n",
               (unsigned long long)st.files_removed, (unsigned long long)st.dirs_removed,
               (unsigned long long)st.bytes_removed);
    ptc_store_close(s);
    return ret;
}
