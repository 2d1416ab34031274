/* Saves beside maintenance (issue 33): the latency of a save (writer begin,
 * one shard, commit with its fsyncs) alone, beside a `ptc gc` loop with
 * nothing to remove, and beside a gc loop that removes debris all the time
 * (each round plants D aborted versions' pack files first), in the same
 * run. With the lock wait the saves all succeed; the same loops with no
 * wait (PTC_STORE_LOCK_NOWAIT, the behaviour before) count the saves that
 * would have failed.
 *
 *   bench_lock [--dir D] [--saves N] [--mib M] [--debris D]
 *
 * Prints p50 / p90 / p99 / max of the save latency per case, the saves that
 * failed, and how many gc rounds ran. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ptc/store.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Plant @p n pack directories of aborted writers for gc to remove. */
static void plant(const char *dir, int n, int *next)
{
    for (int i = 0; i < n; i++, (*next)++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/packs/v%d", dir, 1000000 + *next);
        if (mkdir(p, 0755) != 0)
            continue;
        snprintf(p, sizeof p, "%s/packs/v%d/rank-0.pack", dir, 1000000 + *next);
        int fd = open(p, O_CREAT | O_WRONLY, 0644);
        if (fd >= 0) {
            (void)!ftruncate(fd, 1 << 20);
            close(fd);
        }
    }
}

/* A child running gc rounds until killed; with @p debris, each round first
 * plants that many aborted versions. Writes the rounds it ran to @p out. */
static pid_t gc_loop(const char *dir, int debris, int out)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    ptc_store *s;
    if (ptc_store_open(&s, dir, 0))
        _exit(2);
    long rounds = 0;
    int next = 0;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    for (;;) {
        struct timespec zero = {0, 0};
        if (sigtimedwait(&set, NULL, &zero) == SIGTERM)
            break;
        if (debris)
            plant(dir, debris, &next);
        ptc_store_gc_stats st;
        if (ptc_store_gc(s, &st) == PTC_OK)
            rounds++;
    }
    (void)!write(out, &rounds, sizeof rounds);
    ptc_store_close(s);
    _exit(0);
}

static int save(ptc_store *s, const void *buf, size_t bytes)
{
    ptc_store_write_options o = {.world_size = 1, .config = "dp=1,tp=1,pp=1"};
    ptc_store_writer *w;
    int rc = ptc_store_writer_begin(&w, s, &o);
    if (rc)
        return rc;
    int64_t shape[1] = {(int64_t)(bytes / 4)};
    uint32_t idx;
    ptc_piece p = {.box = {.ndim = 1, .lo = {0}, .hi = {shape[0]}}, .local_stride = {1}};
    if ((rc = ptc_store_writer_add_tensor(w, "w", 1, PTC_DTYPE_F32, 1, shape, "", &idx)) == 0 &&
        (rc = ptc_store_shard_put(w, idx, 0, 1, shape, &p, 1, buf, bytes)) == 0)
        rc = ptc_store_writer_commit(w, NULL);
    ptc_store_writer_destroy(w);
    return rc;
}

static void run_case(const char *name, const char *dir, int saves, const void *buf, size_t bytes,
                     int gc, int debris, int64_t wait_ms)
{
    ptc_store *s;
    if (ptc_store_open(&s, dir, 0)) {
        fprintf(stderr, "error: %s\n", ptc_last_error());
        exit(1);
    }
    ptc_store_set_lock_timeout(s, wait_ms);
    int p[2];
    if (pipe(p) != 0)
        exit(1);
    pid_t pid = gc ? gc_loop(dir, debris, p[1]) : 0;
    usleep(50000);
    double *lat = calloc((size_t)saves, sizeof *lat);
    int failed = 0, ok = 0;
    for (int i = 0; i < saves; i++) {
        double t0 = now_s();
        int rc = save(s, buf, bytes);
        double t = now_s() - t0;
        if (rc == PTC_OK)
            lat[ok++] = t;
        else if (rc == PTC_E_BUSY)
            failed++;
        else {
            fprintf(stderr, "error: %s\n", ptc_last_error());
            exit(1);
        }
        uint64_t v;
        if (rc == PTC_OK && ptc_store_latest(s, &v) == PTC_OK && v > 2)
            ptc_store_version_delete(s, v - 1); /* keep the first and the newest */
    }
    long rounds = 0;
    if (pid) {
        kill(pid, SIGTERM);
        if (read(p[0], &rounds, sizeof rounds) != sizeof rounds)
            rounds = -1;
        waitpid(pid, NULL, 0);
    }
    close(p[0]);
    close(p[1]);
    qsort(lat, (size_t)ok, sizeof *lat, cmp_d);
    double p50 = ok ? lat[ok / 2] : 0, p90 = ok ? lat[ok * 9 / 10] : 0;
    double p99 = ok ? lat[(ok * 99) / 100 < ok ? (ok * 99) / 100 : ok - 1] : 0;
    double max = ok ? lat[ok - 1] : 0;
    printf("%-34s p50 %7.2f ms  p90 %7.2f ms  p99 %7.2f ms  max %7.2f ms  failed %3d/%d",
           name, 1e3 * p50, 1e3 * p90, 1e3 * p99, 1e3 * max, failed, saves);
    if (gc)
        printf("  gc rounds %ld", rounds);
    printf("\n");
    free(lat);
    ptc_store_gc_stats st;
    ptc_store_set_lock_timeout(s, 60000);
    ptc_store_gc(s, &st);
    ptc_store_close(s);
}

int main(int argc, char **argv)
{
    const char *dir = "/tmp";
    int saves = 100, debris = 20;
    size_t mib = 4;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--saves"))
            saves = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mib"))
            mib = (size_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--debris"))
            debris = atoi(argv[i + 1]);
    }
    char st[4096];
    snprintf(st, sizeof st, "%s/bench_lock.%d", dir, (int)getpid());
    ptc_store *s;
    if (ptc_store_open(&s, st, PTC_STORE_CREATE)) {
        fprintf(stderr, "error: %s\n", ptc_last_error());
        return 1;
    }
    size_t bytes = mib << 20;
    float *buf = malloc(bytes);
    for (size_t i = 0; i < bytes / 4; i++)
        buf[i] = (float)i;
    save(s, buf, bytes);
    ptc_store_close(s);
    printf("saves of %zu MiB (begin, shard, commit with fsync), %d per case, %d debris "
           "versions per gc round\n",
           mib, saves, debris);
    run_case("alone", st, saves, buf, bytes, 0, 0, 60000);
    run_case("beside gc (nothing to remove)", st, saves, buf, bytes, 1, 0, 60000);
    run_case("beside gc (removing debris)", st, saves, buf, bytes, 1, debris, 60000);
    run_case("no wait, beside gc (before)", st, saves, buf, bytes, 1, 0, 0);
    run_case("no wait, beside gc+debris (before)", st, saves, buf, bytes, 1, debris, 0);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", st);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", st);
    free(buf);
    return 0;
}
