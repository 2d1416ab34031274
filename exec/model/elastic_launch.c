/* One launch of an elastic job: mpirun started in a process group of its
 * own with its output on pipes, the lines it writes, where its ranks land,
 * and the small files it is given (hostfile, control file). No MPI here:
 * the supervisor only starts mpirun. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
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
    /* the job and its ranks: one process group, to stop together; the
     * supervisor's signal handlers do not survive the exec */
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    int err = posix_spawn_file_actions_init(&fa);
    if (err == 0 && (err = posix_spawnattr_init(&at)) != 0)
        posix_spawn_file_actions_destroy(&fa);
    if (err == 0) {
        posix_spawn_file_actions_adddup2(&fa, po[1], STDOUT_FILENO);
        posix_spawn_file_actions_adddup2(&fa, pe[1], STDERR_FILENO);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(&at, 0);
        err = posix_spawnp(pid, argv[0], &fa, &at, (char *const *)argv, environ);
        posix_spawnattr_destroy(&at);
        posix_spawn_file_actions_destroy(&fa);
    }
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
