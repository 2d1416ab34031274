/* ptc gc: remove pack files no committed version references. */
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
    ptc_cli_store cs = {0};
    bool json = false;
    const ptc_cli_opt opts[] = {PTC_CLI_OPT_STORE(&cs.dir), PTC_CLI_OPT_JSON(&json),
                                PTC_CLI_OPT_LOCK_TIMEOUT(&cs), PTC_CLI_OPT_END};
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_gc_help, 0, NULL);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_OPEN, 0);
    if (ret)
        return ret;
    ptc_store_gc_stats st = {0};
    int rc = ptc_store_gc(cs.s, &st);
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
    ptc_cli_store_close(&cs, ret != PTC_CLI_OK);
    return ret;
}
