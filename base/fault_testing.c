/* Fault injection, in the test build only. The allocator (alloc.c), the
 * write wrappers (file.c) and the pipeline runtime's sends
 * (exec/runtime/runtime.c) ask these counters whether the N-th call fails,
 * so that every clean-up path can run in a test.
 *
 * cmake/modules.cmake links *_testing.c files only into the test build
 * (build/test-hooks/: libptc.so, libptc.a, ptc, ptc-full; the test
 * programs); the shipped library links fault_no_testing.c instead, whose
 * hooks never fire and which exports nothing. The setters are declared in
 * base/fault_testing.h, which is never installed.
 *
 * When the test build's library loads it applies the environment:
 *   PTC_FAULT_ALLOC=N            the N-th allocation fails;
 *   PTC_FAULT_WRITE=N[:ENOSPC]   the N-th write or fsync fails (EIO, or ENOSPC);
 *   PTC_FAULT_SEND=N             the N-th message the runtime sends is never
 *                                posted (its receiver waits: the watchdog's test);
 *   PTC_FAULT_KILL=POINT[:N]     the process kills itself (SIGKILL, as kill -9)
 *                                the N-th time (default 1) any thread passes
 *                                protocol step POINT (ptc_fault_step);
 *   PTC_FAULT_TRACE=PREFIX       every step passed is appended, "POINT VERSION SECONDS"
 *                                (CLOCK_MONOTONIC),
 *                                to the file PREFIX.<pid> (write(2), no fsync:
 *                                it survives a kill of the process, which is
 *                                what a test reads it for).
 * Counted per process, on every thread, from the moment the library loads. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/fault_testing.h"
#include "base/util_internal.h"

static atomic_long alloc_fail_at, alloc_count;
static atomic_long write_fail_at, write_count;
static atomic_int write_fail_errno;
static atomic_long send_fail_at, send_count;

void ptc_fault_alloc_at(long n)
{
    atomic_store(&alloc_count, 0);
    atomic_store(&alloc_fail_at, n);
}

void ptc_fault_write_at(long n, int err)
{
    atomic_store(&write_count, 0);
    atomic_store(&write_fail_errno, err ? err : EIO);
    atomic_store(&write_fail_at, n);
}

void ptc_fault_send_at(long n)
{
    atomic_store(&send_count, 0);
    atomic_store(&send_fail_at, n);
}

long ptc_fault_alloc_count(void)
{
    return atomic_load(&alloc_count);
}

long ptc_fault_write_count(void)
{
    return atomic_load(&write_count);
}

static bool hit(atomic_long *count, atomic_long *at)
{
    long c = atomic_fetch_add(count, 1) + 1;
    long n = atomic_load(at);
    return n > 0 && c == n;
}

bool ptc_fault_alloc_hit(void)
{
    return hit(&alloc_count, &alloc_fail_at);
}

/* Returns the errno to fail with, or 0. */
int ptc_fault_write_hit(void)
{
    return hit(&write_count, &write_fail_at) ? atomic_load(&write_fail_errno) : 0;
}

bool ptc_fault_send_hit(void)
{
    return hit(&send_count, &send_fail_at);
}

__attribute__((constructor)) static void fault_from_environment(void)
{
    const char *a = getenv("PTC_FAULT_ALLOC");
    if (a && *a)
        ptc_fault_alloc_at(strtol(a, NULL, 10));
    const char *w = getenv("PTC_FAULT_WRITE");
    if (w && *w) {
        char *end;
        long n = strtol(w, &end, 10);
        ptc_fault_write_at(n, *end == ':' && !strcmp(end + 1, "ENOSPC") ? ENOSPC : EIO);
    }
    const char *s = getenv("PTC_FAULT_SEND");
    if (s && *s)
        ptc_fault_send_at(strtol(s, NULL, 10));
}

/* ---- protocol steps: kill -9 at one, a trace of all ------------------------------------- */

static char kill_point[64];
static atomic_long kill_at, kill_count;
static int trace_fd = -1;

__attribute__((constructor)) static void steps_from_environment(void)
{
    const char *k = getenv("PTC_FAULT_KILL");
    if (k && *k) {
        snprintf(kill_point, sizeof kill_point, "%s", k);
        char *colon = strchr(kill_point, ':');
        long n = 1;
        if (colon) {
            *colon = '\0';
            n = strtol(colon + 1, NULL, 10);
        }
        atomic_store(&kill_at, n > 0 ? n : 1);
    }
    const char *t = getenv("PTC_FAULT_TRACE");
    if (t && *t) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%ld", t, (long)getpid());
        trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
}

bool ptc_fault_mpi_single(void)
{
    const char *m = getenv("PTC_FAULT_MPI_SINGLE");
    return m && !strcmp(m, "1");
}

bool ptc_fault_no_map(void)
{
    const char *m = getenv("PTC_FAULT_NO_MAP");
    return m && !strcmp(m, "1");
}

void ptc_fault_step(const char *point, uint64_t version)
{
    if (trace_fd >= 0) {
        char line[128];
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int n = snprintf(line, sizeof line, "%s %llu %lld.%09ld\n", point,
                         (unsigned long long)version, (long long)ts.tv_sec, ts.tv_nsec);
        if (n > 0 && write(trace_fd, line, (size_t)PTC_MIN(n, (int)sizeof line - 1)) < 0)
            errno = 0; /* a trace is best effort */
    }
    if (kill_point[0] && !strcmp(kill_point, point) &&
        atomic_fetch_add(&kill_count, 1) + 1 == atomic_load(&kill_at))
        kill(getpid(), SIGKILL);
}

/* The armed crash point of this thread (a name of at most 63 bytes). */
static _Thread_local char crash_point[64];

void ptc_fault_crash_at(const char *point)
{
    crash_point[0] = '\0';
    if (point) {
        strncpy(crash_point, point, sizeof crash_point - 1);
        crash_point[sizeof crash_point - 1] = '\0';
    }
}

bool ptc_fault_crash_hit(const char *point)
{
    if (!crash_point[0] || strcmp(crash_point, point))
        return false;
    crash_point[0] = '\0';
    return true;
}
