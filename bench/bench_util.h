/* Helpers the benchmarks share: a monotonic clock, a /proc/self/status
 * figure, a library call that must succeed, whole-file reads, and a FUSE
 * server in a child process (wait for its mount, unmount it). Benchmarks
 * only; everything here exits the process on failure. */
#ifndef PTC_BENCH_UTIL_H
#define PTC_BENCH_UTIL_H

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ptc/error.h"

/* Seconds on the monotonic clock. */
static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The figure of /proc/self/status line @p key ("VmHWM:", "RssAnon:"), in
 * KiB; -1 when absent. */
static inline long bench_status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)))
            v = atol(line + strlen(key) + 1);
    if (f)
        fclose(f);
    return v;
}

/* A library call that must succeed: else its error on stderr and exit 1. */
#define CHECK(x)                                                                          \
    do {                                                                                  \
        int rc_ = (x);                                                                    \
        if (rc_) {                                                                        \
            fprintf(stderr, "%s: %s (%s)\n", #x, ptc_strerror(rc_), ptc_last_error());    \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

/* Read all of @p path with read() calls of @p cap bytes into @p buf;
 * returns the bytes read (exits on an error). */
static inline uint64_t bench_read_file(const char *path, void *buf, size_t cap)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    uint64_t total = 0;
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n < 0) {
            perror(path);
            exit(1);
        }
        if (n == 0)
            break;
        total += (uint64_t)n;
    }
    close(fd);
    return total;
}

/* Whether a file system is mounted on @p mnt (another device than its
 * parent's). */
static inline bool bench_mounted(const char *mnt)
{
    struct stat a, b;
    char up[4200];
    snprintf(up, sizeof up, "%s/..", mnt);
    return stat(mnt, &a) == 0 && stat(up, &b) == 0 && a.st_dev != b.st_dev;
}

/* Wait (up to 10 s) until the server in child @p pid has mounted @p mnt;
 * returns @p pid. When the child ends first (no FUSE here) the benchmark
 * @p who exits 77 (skipped); when the mount never comes, 1. */
static inline pid_t bench_wait_mount(pid_t pid, const char *mnt, const char *who)
{
    for (int i = 0; i < 1000; i++) {
        if (bench_mounted(mnt))
            return pid;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "%s: cannot mount %s (no FUSE here?)\n", who, mnt);
            exit(77);
        }
        usleep(10000);
    }
    fprintf(stderr, "%s: %s did not mount\n", who, mnt);
    exit(1);
}

/* Unmount @p mnt (fusermount3; SIGTERM to @p pid when that fails) and reap
 * the server. */
static inline void bench_unmount(const char *mnt, pid_t pid)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "fusermount3 -u '%s'", mnt);
    if (system(cmd) != 0)
        kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

#endif
