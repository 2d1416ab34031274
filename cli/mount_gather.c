/* ptc mount --across-hosts (cli/mount_gather.h): gathers a part's version
 * whole by an MPI job the mount starts, then serves the copy. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/mount_gather.h"
#include "ptc/ckpt.h"
#include "ptc/error.h"

extern char **environ;

int ptc_cli_gather_init(ptc_cli_gather *g, const char *launcher, const char *store,
                        const char *dir)
{
    memset(g, 0, sizeof *g);
    g->launcher = launcher;
    if (!realpath(store, g->store))
        return ptc_error_set(PTC_E_IO, "--store %s: %s", store, strerror(errno));
    ssize_t n = readlink("/proc/self/exe", g->self, sizeof g->self - 1);
    if (n <= 0)
        return ptc_error_set(PTC_E_IO, "cannot find this ptc binary: %s", strerror(errno));
    g->self[n] = 0;
    if (dir) {
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return ptc_error_set(PTC_E_IO, "--gather-dir %s: %s", dir, strerror(errno));
        if (!realpath(dir, g->dir))
            return ptc_error_set(PTC_E_IO, "--gather-dir %s: %s", dir, strerror(errno));
        return PTC_OK;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(g->dir, sizeof g->dir, "%s/ptc-gathered.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g->dir))
        return ptc_error_set(PTC_E_IO, "cannot make %s: %s", g->dir, strerror(errno));
    g->own_dir = true;
    /* a store is made in it by the first gather (ptc reshard --out makes one
     * where none is): an empty directory is not a store yet */
    return PTC_OK;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

void ptc_cli_gather_fini(ptc_cli_gather *g)
{
    if (g->whole)
        ptc_store_close(g->whole);
    g->whole = NULL;
    free(g->map);
    g->map = NULL;
    g->n = g->cap = 0;
    if (g->own_dir && g->dir[0]) {
        char log[PATH_MAX + 16];
        snprintf(log, sizeof log, "%s.log", g->dir);
        nftw(g->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        unlink(log);
    }
}

/* Run the gather of version @p G across hosts under configuration @p cfg:
 * its standard output (its JSON report last) into @p out, its errors appended
 * to DIR2.log. PTC_OK when it exited 0. */
static int run(ptc_cli_gather *g, uint64_t G, const char *cfg, char *out, size_t cap)
{
    char ver[32], script[4096], log[PATH_MAX + 16];
    snprintf(ver, sizeof ver, "%llu", (unsigned long long)G);
    snprintf(log, sizeof log, "%s.log", g->dir);
    if ((size_t)snprintf(script, sizeof script, "exec %s \"$@\"", g->launcher) >= sizeof script)
        return ptc_error_set(PTC_E_INVAL, "--across-hosts: the launcher is too long");
    const char *argv[] = {"/bin/sh", "-c", script, "ptc-gather", g->self, "reshard", "--mpi",
                          "--across-hosts", "--store", g->store, "--version", ver, "--to", cfg,
                          "--out", g->dir, "--json", NULL};
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return ptc_error_set(PTC_E_IO, "pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log, O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    /* not the mount's /dev/fuse clones: a job holding them would keep the
     * mount alive after an unmount */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    pid_t pid;
    int err = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (err != 0) {
        close(p[0]);
        return ptc_error_set(PTC_E_IO, "cannot run /bin/sh: %s", strerror(err));
    }
    /* read to the end (a job blocked on a full pipe would never exit), keeping
     * the last half buffer: the report is the last line */
    size_t got = 0;
    ssize_t n;
    while ((n = read(p[0], out + got, cap - 1 - got)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0 && (got += (size_t)n) == cap - 1) {
            memmove(out, out + got - cap / 2, cap / 2);
            got = cap / 2;
        }
    out[got] = 0;
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return ptc_error_set(PTC_E_IO, "gathering version %llu across hosts failed (%s %d; "
                             "its errors: %s)", (unsigned long long)G,
                             WIFEXITED(st) ? "exit" : "signal",
                             WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), log);
    return PTC_OK;
}

int ptc_cli_gather_source(void *user, ptc_store *store, uint64_t version, ptc_store **from,
                          uint64_t *as)
{
    ptc_cli_gather *g = user;
    for (size_t i = 0; i < g->n; i++)
        if (g->map[i].part == version) {
            *from = g->whole;
            *as = g->map[i].as;
            return PTC_OK;
        }
    ptc_store_reader *r;
    int rc = ptc_store_reader_open(&r, store, version);
    if (rc < 0)
        return rc;
    const ptc_version_info *vi = ptc_store_reader_version(r);
    uint64_t G = ptc_ckpt_hosts_part_of(vi);
    char cfg[256];
    snprintf(cfg, sizeof cfg, "%s", vi->config ? vi->config : "");
    ptc_store_reader_close(r);
    if (G == 0) { /* an ordinary version: its own bytes */
        *from = store;
        *as = version;
        return PTC_OK;
    }
    if (!cfg[0])
        return ptc_error_set(PTC_E_INVAL, "version %llu (part of version %llu across hosts) has "
                             "an explicit layout: gather it with `ptc reshard --mpi "
                             "--across-hosts --to CFG --out DIR`",
                             (unsigned long long)version, (unsigned long long)G);
    if (g->n == g->cap) {
        size_t nc = g->cap ? 2 * g->cap : 8;
        void *m = realloc(g->map, nc * sizeof *g->map);
        if (!m)
            return ptc_error_set(PTC_E_NOMEM, "out of memory");
        g->map = m;
        g->cap = nc;
    }
    char out[8192];
    if ((rc = run(g, G, cfg, out, sizeof out)) < 0)
        return rc;
    /* its report: the last line that starts a JSON object (mpirun may say more) */
    const char *line = NULL;
    for (const char *p = out; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (*p == '{')
            line = p;
    json_t *o = line ? json_loads(line, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    json_t *w = json_object_get(o, "version");
    uint64_t written = json_is_integer(w) ? (uint64_t)json_integer_value(w) : 0;
    json_decref(o);
    if (!written)
        return ptc_error_set(PTC_E_IO, "gathering version %llu across hosts: no version in its "
                             "report '%.200s'", (unsigned long long)G, out);
    if (!g->whole && (rc = ptc_store_open(&g->whole, g->dir, 0)) < 0)
        return ptc_error_set(rc, "the gathered store %s: %s (was process 0 of `%s` on this "
                             "host?)", g->dir, ptc_last_error(), g->launcher);
    g->map[g->n++] = (struct ptc_cli_gathered){.part = version, .as = written};
    *from = g->whole;
    *as = written;
    return PTC_OK;
}
