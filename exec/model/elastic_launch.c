/* One launch of an elastic job: mpirun started in a process group of its
 * own with its output on pipes, the lines it writes, where its ranks land,
 * and the small files it is given (hostfile, control file). No MPI here:
 * the supervisor only starts mpirun. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec/model/elastic_internal.h"
#include "base/util_internal.h"

extern char **environ;

bool elastic_lines_drain(int fd, elastic_lines *b, elastic_line_fn fn, void *ctx)
{
    size_t cap = sizeof b->buf;
    ssize_t n = read(fd, b->buf + b->len, cap - 1 - b->len);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR;
    if (n == 0) {
        if (b->len) { /* a last line without a newline */
            b->buf[b->len] = 0;
            fn(ctx, b->buf);
            b->len = 0;
        }
        return false;
    }
    b->len += (size_t)n;
    char *start = b->buf, *nl;
    while ((nl = memchr(start, '\n', b->len - (size_t)(start - b->buf)))) {
        *nl = 0;
        fn(ctx, start);
        start = nl + 1;
    }
    size_t rest = b->len - (size_t)(start - b->buf);
    memmove(b->buf, start, rest);
    b->len = rest;
    if (b->len == cap - 1) { /* an overlong line: pass it on in pieces */
        b->buf[b->len] = 0;
        fn(ctx, b->buf);
        b->len = 0;
    }
    return true;
}

int elastic_placement(const int *usable, int nh, int world, int *at, int *count)
{
    int n = 0;
    for (int i = 0; i < nh && world > 0; i++) {
        int take = usable[i] < world ? usable[i] : world;
        if (take > 0) {
            at[n] = i;
            count[n++] = take;
            world -= take;
        }
    }
    return n;
}

int elastic_replicas_fit(const int *usable, const char *const *names, int nh, const char *cfg,
                         int world, int replicas)
{
    int h[ELASTIC_MAX_HOSTS], c[ELASTIC_MAX_HOSTS];
    if (replicas <= 0)
        return PTC_OK;
    int n = elastic_placement(usable, nh, world, h, c);
    if (n > replicas)
        return PTC_OK;
    char list[512] = "";
    size_t at = 0;
    for (int i = 0; i < n && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", names[h[i]]);
    return ptc_error_set(PTC_E_CONFIG,
                         "%s runs on %d host%s (%s), and --replicas %d needs %d or more", cfg, n,
                         n == 1 ? "" : "s", list, replicas, replicas + 1);
}

/* Open MPI tears a job that lost a process down with SIGTERM to the others,
 * then SIGKILL after odls_base_sigkill_timeout seconds (default 1), which
 * the controller would wait out on every failure: the job can save nothing
 * then (a stop that saves goes through the control file), so its processes
 * are killed at once. A value the environment sets is kept. */
static const char SIGKILL_NOW[] = "OMPI_MCA_odls_base_sigkill_timeout=0";

/* environ, with SIGKILL_NOW unless it names that parameter: NULL-ended, in
 * *@p out (free it; NULL if no memory, and environ is used). */
static char **spawn_env(char ***out)
{
    size_t n = 0, key = (size_t)(strchr(SIGKILL_NOW, '=') - SIGKILL_NOW) + 1;
    bool set = false;
    for (; environ[n]; n++)
        set |= strncmp(environ[n], SIGKILL_NOW, key) == 0;
    *out = set ? NULL : ptc_calloc(n + 2, sizeof **out);
    if (!*out)
        return environ;
    memcpy(*out, environ, n * sizeof **out);
    (*out)[n] = (char *)SIGKILL_NOW;
    return *out;
}

/* Start @p argv (found on PATH) with environment @p env in a process group of
 * its own (to stop together; the supervisor's signal handlers do not
 * survive the exec): stdout and stderr on @p out and @p err, or with @p out
 * < 0 all three standard streams on /dev/null. Returns 0 or an errno. */
static int spawn_group(const char *const *argv, int out, int err, char *const *env, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int e = posix_spawn_file_actions_init(&fa);
    if (e != 0)
        return e;
    if ((e = posix_spawnattr_init(&at)) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        return e;
    }
    if (out >= 0) {
        posix_spawn_file_actions_adddup2(&fa, out, STDOUT_FILENO);
        posix_spawn_file_actions_adddup2(&fa, err, STDERR_FILENO);
    } else {
        posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
    }
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&at, 0);
    e = posix_spawnp(pid, argv[0], &fa, &at, (char *const *)argv, env);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    return e;
}

int elastic_spawn(const char *const *argv, pid_t *pid, int *out_fd, int *err_fd)
{
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0)
        return ptc_error_sys(PTC_E_IO, "pipe");
    if (pipe2(pe, O_CLOEXEC) != 0) {
        int rc = ptc_error_sys(PTC_E_IO, "pipe");
        close(po[0]);
        close(po[1]);
        return rc;
    }
    char **own = NULL;
    int err = spawn_group(argv, po[1], pe[1], spawn_env(&own), pid);
    ptc_free(own);
    close(po[1]);
    close(pe[1]);
    if (err != 0) {
        close(po[0]);
        close(pe[0]);
        errno = err;
        return ptc_error_sys(PTC_E_IO, "cannot run %s", argv[0]);
    }
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    *out_fd = po[0];
    *err_fd = pe[0];
    return PTC_OK;
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Hosts probed at once: a wave of mpiruns (each starting a daemon over ssh,
 * say) should not swamp the controller's host. */
#define PROBE_WAVE 32

/* One probe: PROG --version on host @p name alone, output to /dev/null. */
static int probe_start(const char *mpirun, const char *prog, const char *dir, const char *name,
                       int i, pid_t *pid)
{
    char hf[4096], text[300];
    snprintf(hf, sizeof hf, "%s/probe.%d", dir, i);
    snprintf(text, sizeof text, "%s slots=1\n", name);
    PTC_TRY(elastic_write_file(hf, text));
    const char *argv[10];
    int n = 0;
    argv[n++] = mpirun;
    if (geteuid() == 0)
        argv[n++] = "--allow-run-as-root";
    const char *rest[] = {"--hostfile", hf, "-np", "1", prog, "--version", NULL};
    memcpy(argv + n, rest, sizeof rest);
    int err = spawn_group(argv, -1, -1, environ, pid);
    if (err != 0) {
        errno = err;
        return ptc_error_sys(PTC_E_IO, "cannot run %s", mpirun);
    }
    return PTC_OK;
}

/* Probes of hosts names[0..n-1] (n <= PROBE_WAVE) at once (up[i] set for
 * each that answered; the caller cleared them), hostfiles
 * probe.<i> in @p dir. */
static int probe_wave(const char *mpirun, const char *prog, const char *dir,
                      const char *const *names, int n, double timeout, bool *up)
{
    pid_t pid[PROBE_WAVE];
    bool done[PROBE_WAVE] = {0};
    int rc = PTC_OK, started = 0;
    while (started < n && rc == PTC_OK)
        if ((rc = probe_start(mpirun, prog, dir, names[started], started, &pid[started])) ==
            PTC_OK)
            started++;
    int left = started;
    double end = mono() + timeout;
    while (left > 0) {
        for (int i = 0; i < started; i++) {
            int status;
            if (done[i] || waitpid(pid[i], &status, WNOHANG) != pid[i])
                continue;
            done[i] = true;
            left--;
            up[i] = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        }
        if (left > 0 && mono() > end) { /* the rest did not answer in time */
            for (int i = 0; i < started; i++)
                if (!done[i]) {
                    kill(-pid[i], SIGKILL);
                    waitpid(pid[i], NULL, 0);
                }
            left = 0;
        }
        if (left > 0)
            usleep(20000);
    }
    for (int i = 0; i < n; i++) { /* a failed start's too */
        char hf[4096];
        snprintf(hf, sizeof hf, "%s/probe.%d", dir, i);
        unlink(hf);
    }
    return rc;
}

int elastic_probe(const char *mpirun, const char *prog, const char *dir,
                  const char *const *names, int n, double timeout, bool *up)
{
    for (int i = 0; i < n; i++)
        up[i] = false;
    for (int at = 0; at < n; at += PROBE_WAVE)
        PTC_TRY(probe_wave(mpirun, prog, dir, names + at, PTC_MIN(PROBE_WAVE, n - at), timeout,
                           up + at));
    return PTC_OK;
}

int elastic_write_file(const char *path, const char *text)
{
    char *tmp = NULL;
    int fd = -1;
    PTC_TRY(ptc_tmpfile_create(path, &tmp, &fd));
    int rc = ptc_write_all(fd, text, strlen(text), tmp);
    if (rc != PTC_OK) {
        ptc_tmpfile_discard(fd, tmp);
        return rc;
    }
    return ptc_tmpfile_commit(fd, tmp, path);
}
