/* ptc mount: the store as a read-only FUSE filesystem (models and datasets
 * computed on read), with the served-count map made durable every half
 * second and on unmount. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/mount_gather.h"
#include "ptc/mount.h"
#include "ptc/store.h"
#include "ptc/view.h"

const char ptc_cmd_mount_help[] =
    "mount a store read-only: models for any configuration, dataset step files\n"
    "\n"
    "usage: ptc mount --store DIR MOUNTPOINT [-f] [--allow-other] [--debug] [--flush-ms MS]\n"
    "                 [--cache-mib N] [--across-hosts LAUNCHER [--gather-dir DIR2]]\n"
    "\n"
    "  -f, --foreground  stay in the foreground (default: detach once mounted)\n"
    "  --allow-other     let other users read (needs user_allow_other in /etc/fuse.conf)\n"
    "  --debug           libfuse debug output (implies -f)\n"
    "  --flush-ms MS     save the served counts every MS milliseconds (default 500)\n"
    "  --cache-mib N     memory for decompressed blocks of zstd datasets, shared by all\n"
    "                    readers (default 256; 0: none, every read decompresses)\n"
    "  --across-hosts LAUNCHER  DIR is this host's part of a store spread over hosts\n"
    "                    (ptc train --replicas): a version's model files are served\n"
    "                    from a whole copy gathered at its first opening by the MPI\n"
    "                    job `LAUNCHER ptc reshard --mpi --across-hosts --store DIR\n"
    "                    --version G --to CFG --out DIR2` (LAUNCHER: shell text, e.g.\n"
    "                    \"mpirun --hostfile H -np 3\", process 0 on this host)\n"
    "  --gather-dir DIR2 the store the copies go to (default: a new directory in\n"
    "                    $TMPDIR, removed at unmount); the gathers' errors: DIR2.log\n"
    "Tree (see MOUNTPOINT/README.txt):\n"
    "  models/<V>/info.json, models/<V>/model.safetensors,\n"
    "  models/<V>/<CFG>/rank-<R>.safetensors   (CFG listed dp2-tp4-pp1[-zero1]; any\n"
    "                    --config spelling opens it too: tp4-dp2, dp=2,tp=4)\n"
    "  datasets/<NAME>/info.json, datasets/<NAME>/samples/<ID>,\n"
    "  datasets/<NAME>/seed-<S>/epoch-<E>/batch-<B>/start-<X>/dp-<D>/rank-<R>/step-<K>[.idx]\n"
    "Records served through step files are counted for `ptc dataset audit`\n"
    "(durable every --flush-ms, when a program fsyncs any file or directory of\n"
    "the mount, e.g. `sync MOUNTPOINT`, and on unmount). Unmount with\n"
    "`fusermount3 -u MOUNTPOINT` (or SIGINT/SIGTERM to the foreground process).\n"
    "Versions: besides those being read, at most 8 idle versions (holding at most a\n"
    "quarter of the open-file limit in pack files) stay open; a version deleted from\n"
    "the store is let go within a tick once no file of it is open, so gc frees it.\n"
    "A damaged block is a read error (EIO); a program that maps a file (mmap,\n"
    "np.memmap, safetensors.safe_open) gets SIGBUS instead: read with read() or run\n"
    "ptc verify first.\n"
    "Exit 0 after a clean unmount (or once detached and serving), 1 on failure\n"
    "(missing or busy mount point, no /dev/fuse, bad store, a detached start that\n"
    "failed: its error is printed), 2 on a usage error.\n";

static int on_ready(void *user)
{
    return ptc_view_store_attach(user, NULL, true);
}

static void on_tick(void *user)
{
    /* a failure keeps the counts buffered for the next tick */
    if (ptc_view_store_flush(user) < 0)
        fprintf(stderr, "ptc: warning: cannot save served counts: %s\n", ptc_last_error());
}

/* fsync of any file or directory of the mount: the counts durable now */
static int on_sync(void *user)
{
    return ptc_view_store_flush(user);
}

int ptc_cmd_mount(int argc, char **argv)
{
    ptc_cli_store cs = {0};
    ptc_mount_options mo = {0};
    bool debug = false, have_cache = false;
    uint64_t flush_ms = 500, cache_mib = 0;
    const char *launcher = NULL, *gather_dir = NULL;
    const ptc_cli_opt opts[] = {
        PTC_CLI_OPT_STORE(&cs.dir),
        {.name = "foreground", .short_name = 'f', .kind = PTC_CLI_FLAG, .dest = &mo.foreground},
        PTC_CLI_OPT_FLAG("allow-other", &mo.allow_other), PTC_CLI_OPT_FLAG("debug", &debug),
        PTC_CLI_OPT_U64("flush-ms", &flush_ms, 1, 86400000,
                        "--flush-ms needs 1 to 86400000, not '%s'"),
        {.name = "cache-mib", .kind = PTC_CLI_U64, .dest = &cache_mib, .hi = (uint64_t)1 << 30,
         .given = &have_cache, .bad = "--cache-mib needs 0 to 1073741824, not '%s'"},
        PTC_CLI_OPT_STR("across-hosts", &launcher), PTC_CLI_OPT_STR("gather-dir", &gather_dir),
        PTC_CLI_OPT_END};
    int next;
    int ret = ptc_cli_parse(argc, argv, 1, opts, ptc_cmd_mount_help, PTC_CLI_ARGS, &next);
    if (ret != PTC_CLI_CONTINUE)
        return ret;
    if (debug)
        mo.debug = mo.foreground = true;
    ptc_view_store_options vo = {0};
    if (have_cache)
        vo.block_cache = cache_mib ? cache_mib << 20 : 1; /* 1 byte: less than a block, none */
    if (!cs.dir)
        return ptc_cli_usage_error("mount needs --store");
    if (next >= argc)
        return ptc_cli_usage_error("mount needs a MOUNTPOINT");
    if (next + 1 < argc)
        return ptc_cli_usage_error("unexpected argument '%s'", argv[next + 1]);
    if (gather_dir && !launcher)
        return ptc_cli_usage_error("--gather-dir applies to --across-hosts");
    if (launcher && !*launcher)
        return ptc_cli_usage_error("--across-hosts needs the command that starts the MPI job");
    /* an absolute store path: the mounted process changes its directory to /
     * (ptc_mount_run resolves the mount point itself) */
    char store_abs[PATH_MAX];
    const char *mnt = argv[next];
    if (realpath(cs.dir, store_abs))
        cs.dir = store_abs;

    /* check the store now, so a bad one is an error before anything mounts;
     * the mounted process opens it again after detaching (LMDB must not
     * cross a fork) */
    ret = ptc_cli_store_open(&cs, PTC_CLI_STORE_OPEN, 0);
    if (ret)
        return ret;
    ptc_cli_store_close(&cs, false);

    static ptc_cli_gather g;
    if (launcher) {
        int grc = ptc_cli_gather_init(&g, launcher, cs.dir, gather_dir);
        if (grc < 0)
            return ptc_cli_lib_error(grc);
        vo.source = ptc_cli_gather_source;
        vo.source_user = &g;
    }
    ptc_view_store *vs = NULL;
    int rc = ptc_view_store_create(&vs, cs.dir, &vo);
    if (rc) {
        if (launcher)
            ptc_cli_gather_fini(&g);
        return ptc_cli_lib_error(rc);
    }
    mo.ready = on_ready;
    mo.tick = on_tick;
    mo.tick_ms = (unsigned)flush_ms;
    mo.sync = on_sync;
    mo.user = vs;
    rc = ptc_mount_run(ptc_view_store_view(vs), mnt, &mo);
    ret = rc ? ptc_cli_lib_error(rc) : PTC_CLI_OK;
    ptc_view_store_destroy(vs);
    if (launcher) /* after the view: its readers of the gathered store are closed */
        ptc_cli_gather_fini(&g);
    return ret;
}
