/* The store's writer lock (docs/format.md §6): STORE/lock, flock(LOCK_EX)
 * held from a writer's begin to its commit, by gc and by version deletion.
 *
 * Writers queue instead of failing: a writer first takes the turnstile (an
 * open-file-description lock on byte 0 of the same file), then the flock,
 * then lets the turnstile go. A holder that works in slices (gc) sees a
 * queued writer as a held turnstile and hands the flock over between two
 * slices; since the next slice must pass the turnstile too, the queued
 * writer always gets the flock first. Both waits poll (LOCK_NB / F_OFD_SETLK
 * with short sleeps), so a wait has a bound and needs no signal. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "ptc/store/store_internal.h"
#include "base/util_internal.h"

/* Polls: the turnstile backs off to 8 ms; the writer first in line polls the
 * flock every millisecond (its wait after a slice ends is what a save pays). */
#define TURNSTILE_POLL_MAX_NS 8000000L
#define FLOCK_POLL_NS 1000000L

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

int64_t ptc_store_lock_timeout_resolve(int64_t opt_ms)
{
    if (opt_ms < 0)
        return 0;
    if (opt_ms > 0)
        return opt_ms;
    /* the environment speaks for every writer of the process (ptc train,
     * Python) that has no option of its own */
    const char *e = getenv("PTC_LOCK_TIMEOUT");
    if (e && *e) {
        char *end;
        errno = 0;
        double sec = strtod(e, &end);
        if (!errno && *end == '\0' && sec >= 0 && sec <= 1e9)
            return (int64_t)(sec * 1000.0 + 0.5);
        ptc_log(PTC_LOG_WARN, "PTC_LOCK_TIMEOUT='%.40s' is not a number of seconds; using %d s",
                e, PTC_STORE_LOCK_TIMEOUT_DEFAULT_MS / 1000);
    }
    return PTC_STORE_LOCK_TIMEOUT_DEFAULT_MS;
}

int ptc_store_set_lock_timeout(ptc_store *s, int64_t ms)
{
    if (!s || ms < 0)
        return ptc_error_set(PTC_E_INVAL, "lock timeout must be >= 0 ms");
    s->lock_wait_ms = ms;
    return PTC_OK;
}

/* ---- who holds it ------------------------------------------------------------------- */

static bool pid_alive(long pid)
{
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* A live process other than this one with a descriptor open on the file of
 * @p st: the holder when the pid the kernel or the file names has exited
 * (a child it forked inherited the descriptor, and with it the lock). */
static long fd_owner(const struct stat *st)
{
    DIR *proc = opendir("/proc");
    if (!proc)
        return 0;
    long found = 0;
    struct dirent *e;
    while (!found && (e = readdir(proc))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid())
            continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/fd", pid);
        DIR *fds = opendir(path);
        if (!fds)
            continue;
        struct dirent *f;
        while (!found && (f = readdir(fds))) {
            char p[300];
            struct stat fs;
            snprintf(p, sizeof p, "/proc/%ld/fd/%s", pid, f->d_name);
            if (f->d_name[0] != '.' && stat(p, &fs) == 0 && fs.st_ino == st->st_ino &&
                fs.st_dev == st->st_dev)
                found = pid;
        }
        closedir(fds);
    }
    closedir(proc);
    return found;
}

/* The pid of the process holding the flock on lock file @p fd (stat @p st):
 * the kernel's lock table first (/proc/locks names the holder even when it
 * has not written its pid yet), else the pid the holder wrote into the file
 * (read a few times: it writes right after taking the lock). A pid that
 * names no live process is never reported: the lock then lives in a child
 * that inherited it, found by its open descriptor. 0: unknown. */
static long lock_holder(int fd, const struct stat *st)
{
    long pid = 0;
    FILE *f = fopen("/proc/locks", "re");
    char line[256];
    while (f && pid == 0 && fgets(line, sizeof line, f)) {
        long p;
        unsigned maj, min;
        unsigned long long ino;
        char type[16], mode[16];
        /* "1: FLOCK  ADVISORY  WRITE 481 fe:00:10953123 0 EOF"; waiters
         * ("1: -> FLOCK ...") do not hold it */
        if (sscanf(line, "%*d: %15s %*s %15s %ld %x:%x:%llu", type, mode, &p, &maj, &min,
                   &ino) == 6 &&
            strcmp(type, "FLOCK") == 0 && strcmp(mode, "WRITE") == 0 &&
            ino == (unsigned long long)st->st_ino && maj == major(st->st_dev) &&
            min == minor(st->st_dev))
            pid = p;
    }
    if (f)
        fclose(f);
    for (int i = 0; pid <= 0 && i < 50; i++) {
        char txt[32] = {0};
        ssize_t n = pread(fd, txt, sizeof txt - 1, 0);
        char *end;
        long p = n > 0 ? strtol(txt, &end, 10) : 0;
        if (n > 0 && end != txt && (*end == '\n' || *end == '\0') && p > 0)
            pid = p;
        else
            usleep(1000);
    }
    if (pid > 0 && !pid_alive(pid))
        pid = fd_owner(st);
    return pid;
}

static int busy_error(ptc_store *s, int fd, const struct stat *st, int64_t waited_ms)
{
    long pid = lock_holder(fd, st);
    char who[48], waited[64] = "";
    if (pid > 0)
        snprintf(who, sizeof who, "pid %ld", pid);
    else
        snprintf(who, sizeof who, "its pid is unknown");
    if (waited_ms > 0)
        snprintf(waited, sizeof waited, "; waited %.1f s (lock timeout)", waited_ms / 1000.0);
    return ptc_error_set(PTC_E_BUSY, "store %s is locked by another process (%s)%s", s->dir,
                         who, waited);
}

/* ---- the turnstile ------------------------------------------------------------------ */

static struct flock turnstile(short type)
{
    struct flock l;
    memset(&l, 0, sizeof l);
    l.l_type = type;
    l.l_whence = SEEK_SET;
    l.l_start = 0;
    l.l_len = 1;
    return l;
}

/* 1 taken, 0 held by another, < 0 error. */
static int turnstile_try(int fd)
{
    struct flock l = turnstile(F_WRLCK);
    if (fcntl(fd, F_OFD_SETLK, &l) == 0)
        return 1;
    if (errno == EAGAIN || errno == EACCES || errno == EINTR)
        return 0;
    return -1;
}

static void turnstile_release(int fd)
{
    struct flock l = turnstile(F_UNLCK);
    fcntl(fd, F_OFD_SETLK, &l);
}

bool ptc_store_lock_wanted(int fd)
{
    if (fd < 0)
        return false;
    struct flock l = turnstile(F_WRLCK);
    return fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

/* ---- taking and releasing ---------------------------------------------------------- */

/* Queue for the flock of @p fd for at most @p wait_ms: PTC_OK (held),
 * PTC_E_BUSY (timed out), PTC_E_IO. */
static int acquire(ptc_store *s, int fd, const struct stat *st, const char *path,
                   int64_t wait_ms)
{
    int64_t start = now_ms(), deadline = start + wait_ms;
    long backoff = 250000L;
    int t;
    /* first in line: the turnstile (an older ptc without one still meets the flock) */
    while ((t = turnstile_try(fd)) == 0) {
        if (now_ms() >= deadline)
            return busy_error(s, fd, st, wait_ms);
        nap(backoff);
        backoff = PTC_MIN(backoff * 2, TURNSTILE_POLL_MAX_NS);
    }
    if (t < 0 && errno != EINVAL) /* EINVAL: no OFD locks here, queue without */
        return ptc_error_sys(PTC_E_IO, "lock %s", path);
    int rc = PTC_OK;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            rc = ptc_error_sys(PTC_E_IO, "lock %s", path);
            break;
        }
        if (now_ms() >= deadline) {
            rc = busy_error(s, fd, st, wait_ms);
            break;
        }
        nap(FLOCK_POLL_NS);
    }
    if (t > 0)
        turnstile_release(fd);
    return rc;
}

static int lock_open(ptc_store *s, const char *path, int *out_fd);

int ptc_store_lock(ptc_store *s, int *out_fd)
{
    *out_fd = -1;
    if (s->readonly)
        return ptc_error_set(PTC_E_INVAL, "store %s is open read-only", s->dir);
    char path[4096];
    if (snprintf(path, sizeof path, "%s/lock", s->dir) >= (int)sizeof path)
        return ptc_error_set(PTC_E_INVAL, "store path too long: %s", s->dir);
    /* one store handle per process: a second writer of it would wait for
     * itself */
    int free_ = 0;
    if (!atomic_compare_exchange_strong(&s->locks_held, &free_, 1))
        return ptc_error_set(PTC_E_BUSY,
                             "store %s is locked by another writer of this process (pid %ld)",
                             s->dir, (long)getpid());
    int rc = lock_open(s, path, out_fd);
    if (rc < 0)
        atomic_store(&s->locks_held, 0);
    return rc;
}

static int lock_open(ptc_store *s, const char *path, int *out_fd)
{
    int fd = openat(s->rootfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == ELOOP)
            return ptc_store_foreign(s, s->rootfd, "", "lock");
        return ptc_error_sys(PTC_E_IO, "open %s", path);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
        close(fd);
        return ptc_store_foreign(s, s->rootfd, "", "lock");
    }
    int rc = acquire(s, fd, &st, path, s->lock_wait_ms);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    /* the pid over the old text, then cut what is left of it: the file is
     * never empty while locked, so a loser never reads "no pid". Best
     * effort: on a full disk the lock is held all the same (the kernel's
     * lock table names the holder; a stale pid is checked for life). */
    char txt[32];
    int n = snprintf(txt, sizeof txt, "%ld\n", (long)getpid());
    if (pwrite(fd, txt, (size_t)n, 0) == n)
        (void)!ftruncate(fd, n);
    *out_fd = fd;
    return PTC_OK;
}

void ptc_store_unlock(ptc_store *s, int fd)
{
    if (fd < 0)
        return;
    atomic_store(&s->locks_held, 0);
    /* unlocked explicitly: a child forked meanwhile shares this open file
     * and would otherwise keep the lock after our close */
    flock(fd, LOCK_UN);
    close(fd);
}

int ptc_store_relock(ptc_store *s, int *fd)
{
    ptc_store_unlock(s, *fd);
    *fd = -1;
    return ptc_store_lock(s, fd);
}
