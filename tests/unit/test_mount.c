/* Mount an in-memory dataset for real (where /dev/fuse works) and check the
 * tree with ordinary syscalls; mount-point errors. Skips without FUSE. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "fuse/view_internal.h"
#include "ptc/build_config.h"
#include "ptc/mount.h"
#include "ptc/view.h"

#define PTC_MIN_SZ(a, b) ((a) < (b) ? (a) : (b))

#define N 5000

static uint64_t rec_len(uint64_t id)
{
    return 1 + id % 300;
}

static int mem_size(void *user, uint64_t id, uint64_t *size)
{
    (void)user;
    *size = rec_len(id);
    return PTC_OK;
}

static int mem_read(void *user, uint64_t id, uint64_t off, void *buf, size_t len)
{
    (void)user;
    for (size_t j = 0; j < len; j++)
        ((uint8_t *)buf)[j] = (uint8_t)(id * 7 + off + j);
    return PTC_OK;
}

/* Dataset "slow": each record-size call (one per samples/<ID> lookup)
 * counts how many run at once, in memory shared with the mount's process,
 * and waits until two have run at once: a barrier, not a guess at how long
 * the other lookups take to arrive. If the kernel serialises the lookups,
 * the second never arrives while the first waits: each call then gives up
 * at a deadline shared by all (5 s after the first call), and `most` stays 1. */
struct overlap {
    atomic_int now, most;
    atomic_llong deadline_ns; /* CLOCK_MONOTONIC; 0: no call yet */
};
static struct overlap *overlap;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int slow_size(void *user, uint64_t id, uint64_t *size)
{
    long long zero = 0;
    atomic_compare_exchange_strong(&overlap->deadline_ns, &zero, now_ns() + 5000000000LL);
    int n = atomic_fetch_add(&overlap->now, 1) + 1;
    for (int m = atomic_load(&overlap->most); n > m;)
        if (atomic_compare_exchange_weak(&overlap->most, &m, n))
            break;
    while (atomic_load(&overlap->most) < 2 && now_ns() < atomic_load(&overlap->deadline_ns)) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    atomic_fetch_sub(&overlap->now, 1);
    return mem_size(user, id, size);
}

static int mem_open(void *user, const char *name, ptc_view_dataset *ds)
{
    bool slow = strcmp(name, "slow") == 0;
    if (strcmp(name, "toy") != 0 && !slow)
        return ptc_error_set(PTC_E_NOTFOUND, "no dataset %s", name);
    memset(ds, 0, sizeof *ds);
    ds->n = N;
    ds->user = user;
    ds->record_size = slow ? slow_size : mem_size;
    ds->record_read = mem_read;
    return PTC_OK;
}

static int ticks;
static void on_tick(void *user)
{
    (void)user;
    ticks++;
}

static char mnt[256];
static pid_t child;

static bool is_mounted(void)
{
    struct stat a, b;
    char up[300];
    snprintf(up, sizeof up, "%s/..", mnt);
    return stat(mnt, &a) == 0 && stat(up, &b) == 0 && a.st_dev != b.st_dev;
}

static int setup(void **state)
{
    (void)state;
    snprintf(mnt, sizeof mnt, "/tmp/ptc mount_XXXXXX");
    if (!mkdtemp(mnt))
        return -1;
    overlap = mmap(NULL, sizeof *overlap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    if (overlap == MAP_FAILED)
        return -1;
    child = fork();
    if (child == 0) {
        static const ptc_view_ops ops = {.dataset_open = mem_open};
        ptc_view *v;
        if (ptc_view_create(&v, &ops, NULL) != PTC_OK)
            _exit(3);
        ptc_mount_options o = {.foreground = true, .tick = on_tick, .tick_ms = 50};
        /* a mount point relative to the working directory, with a space
         * (escaped as \040 in /proc/self/mountinfo) */
        if (chdir("/tmp") != 0)
            _exit(1);
        int rc = ptc_mount_run(v, mnt + strlen("/tmp/"), &o);
        ptc_view_destroy(v);
        if (rc == PTC_E_UNSUPPORTED || rc == PTC_E_IO)
            _exit(77);
        _exit(rc == PTC_OK && ticks > 0 ? 0 : 1);
    }
    for (int i = 0; i < 500; i++) {
        if (is_mounted())
            return 0;
        int st;
        if (waitpid(child, &st, WNOHANG) == child) {
            child = 0;
            /* skipped only where FUSE cannot work: a build without
             * libfuse3, or no usable /dev/fuse outside CI */
            bool ci = getenv("CI") && strcmp(getenv("CI"), "true") == 0;
            if (!PTC_WITH_FUSE || (access("/dev/fuse", R_OK | W_OK) != 0 && !ci))
                return 0;
            fprintf(stderr, "the mount failed (child status %d) where FUSE should work\n", st);
            return -1;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int st = 0, rc = 0;
    if (child > 0) {
        kill(child, SIGTERM);
        waitpid(child, &st, 0);
        rc = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
        if (rc)
            fprintf(stderr, "mount child ended with status %d\n", st);
    }
    if (is_mounted())
        rc = -1;
    rmdir(mnt);
    return rc;
}

#define NEED_MOUNT()                         \
    do {                                     \
        if (child <= 0) {                    \
            print_message("no FUSE here\n"); \
            skip();                          \
        }                                    \
    } while (0)

static ssize_t slurp(const char *rel, uint8_t *buf, size_t cap, size_t chunk)
{
    char p[512];
    snprintf(p, sizeof p, "%s%s", mnt, rel);
    int fd = open(p, O_RDONLY);
    if (fd < 0)
        return -errno;
    size_t n = 0;
    for (;;) {
        ssize_t k = read(fd, buf + n, PTC_MIN_SZ(chunk, cap - n));
        if (k < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        if (k == 0)
            break;
        n += (size_t)k;
    }
    close(fd);
    return (ssize_t)n;
}

static void test_tree(void **state)
{
    (void)state;
    NEED_MOUNT();
    static uint8_t buf[1 << 20];
    ssize_t n = slurp("/README.txt", buf, sizeof buf, 4096);
    assert_true(n > 100);
    assert_memory_equal(buf, "PTC mount", 9);
    n = slurp("/datasets/toy/info.json", buf, sizeof buf, 4096);
    assert_int_equal(n, strlen("{\"name\":\"toy\",\"samples\":5000}\n"));
    assert_memory_equal(buf, "{\"name\":\"toy\",\"samples\":5000}\n", (size_t)n);

    /* a step file equals its plan's records */
    static const ptc_view_ops ops = {.dataset_open = mem_open};
    ptc_view_dataset ds;
    mem_open(NULL, "toy", &ds);
    ptc_view_step *s;
    assert_int_equal(ptc_view_step_plan(&ds, &(ptc_dataset_step){11, 2, 256, 100, 3, 1, 4, 0}, &s),
                     PTC_OK);
    n = slurp("/datasets/toy/seed-11/epoch-2/batch-256/start-100/dp-3/rank-1/step-4", buf,
              sizeof buf, 1 << 20);
    assert_int_equal(n, s->offsets[s->n]);
    for (uint64_t i = 0; i < s->n; i++)
        for (uint64_t j = 0; j < rec_len(s->ids[i]); j++)
            assert_int_equal(buf[s->offsets[i] + j], (uint8_t)(s->ids[i] * 7 + j));
    n = slurp("/datasets/toy/seed-11/epoch-2/batch-256/start-100/dp-3/rank-1/step-4.idx", buf,
              sizeof buf, 5);
    assert_int_equal(n, 8 * (s->n + 1));
    assert_memory_equal(buf, s->offsets, (size_t)n);
    ptc_view_step_destroy(s);
    (void)ops;

    /* errors */
    char p[512];
    struct stat st;
    const char *missing[] = {
        "/nope", "/datasets/nope", "/datasets/toy/samples/5000",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-9",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-abc",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-1250",
        "/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-0",
        "/datasets/toy/seed-01"};
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        snprintf(p, sizeof p, "%s%s", mnt, missing[i]);
        errno = 0;
        assert_int_equal(stat(p, &st), -1);
        if (errno != ENOENT)
            fail_msg("%s: errno %d", missing[i], errno);
    }
    snprintf(p, sizeof p, "%s/datasets/toy/seed-99999999999999999999", mnt);
    assert_int_equal(stat(p, &st), -1);
    assert_int_equal(errno, EINVAL);
    snprintf(p, sizeof p, "%s/datasets/toy/seed-1/epoch-1/batch-4/start-0/dp-4/rank-0/step-1249", mnt);
    assert_int_equal(stat(p, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(open(p, O_WRONLY), -1);
    assert_true(errno == EROFS || errno == EACCES);
    snprintf(p, sizeof p, "%s/x", mnt);
    assert_int_equal(mkdir(p, 0755), -1);

    /* listing */
    DIR *d = opendir(mnt);
    assert_non_null(d);
    int names = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        names += strcmp(e->d_name, "README.txt") == 0 || strcmp(e->d_name, "datasets") == 0 ||
                 strcmp(e->d_name, "models") == 0;
    closedir(d);
    assert_int_equal(names, 3);

    /* the mount point is busy now */
    ptc_view *v;
    assert_int_equal(ptc_view_create(&v, &ops, NULL), PTC_OK);
    assert_int_equal(ptc_mount_run(v, mnt, NULL), PTC_E_BUSY);
    ptc_view_destroy(v);
}

struct targ {
    int t, bad;
};

static void *reader(void *p)
{
    struct targ *a = p;
    static __thread uint8_t buf[1 << 16];
    char rel[256];
    ptc_view_dataset ds;
    mem_open(NULL, "toy", &ds);
    for (int it = 0; it < 60; it++) {
        int r = a->t < 4 ? it % 4 : a->t - 4, k = it % 20;
        snprintf(rel, sizeof rel, "/datasets/toy/seed-3/epoch-0/batch-64/start-0/dp-4/rank-%d/step-%d",
                 r, k);
        ssize_t n = slurp(rel, buf, sizeof buf, 1000 + (size_t)it);
        ptc_view_step *s;
        if (ptc_view_step_plan(&ds,
                               &(ptc_dataset_step){3, 0, 64, 0, 4, (uint64_t)r, (uint64_t)k, 0},
                               &s) != PTC_OK) {
            a->bad++;
            continue;
        }
        if (n != (ssize_t)s->offsets[s->n])
            a->bad++;
        for (uint64_t i = 0; n > 0 && i < s->n; i++)
            for (uint64_t j = 0; j < rec_len(s->ids[i]); j++)
                a->bad += buf[s->offsets[i] + j] != (uint8_t)(s->ids[i] * 7 + j);
        ptc_view_step_destroy(s);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    NEED_MOUNT();
    pthread_t th[8];
    struct targ a[8];
    for (int t = 0; t < 8; t++) {
        a[t] = (struct targ){.t = t};
        assert_int_equal(pthread_create(&th[t], NULL, reader, &a[t]), 0);
    }
    for (int t = 0; t < 8; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(a[t].bad, 0);
    }
}

/* Lookups of names in one directory run in parallel: the mount asks the
 * kernel for parallel directory operations (libfuse 3.14 does not; see
 * fuse/fuse_tune.h), without which the kernel serialises them on the
 * directory's lock and a random samples/<ID> read waits for every other. */
static void *stat_sample(void *p)
{
    char path[512];
    snprintf(path, sizeof path, "%s/datasets/slow/samples/%d", mnt, (int)(intptr_t)p);
    struct stat st;
    uint64_t id = (uint64_t)(intptr_t)p;
    return (void *)(intptr_t)(stat(path, &st) == 0 && st.st_size == (off_t)rec_len(id));
}

static void test_parallel_lookups(void **state)
{
    (void)state;
    NEED_MOUNT();
    struct stat st;
    char path[512];
    snprintf(path, sizeof path, "%s/datasets/slow/samples", mnt);
    assert_int_equal(stat(path, &st), 0);
    pthread_t th[8];
    for (intptr_t t = 0; t < 8; t++)
        assert_int_equal(pthread_create(&th[t], NULL, stat_sample, (void *)(t + 100)), 0);
    for (int t = 0; t < 8; t++) {
        void *ok;
        pthread_join(th[t], &ok);
        assert_true(ok);
    }
    /* serialised, one at a time: each waited for a second until the deadline */
    print_message("most lookups at once: %d of 8\n", atomic_load(&overlap->most));
    assert_true(atomic_load(&overlap->most) >= 2);
}

/* The mount raises its readahead (PTC_FUSE_READAHEAD_KIB, fuse/fuse_tune.h)
 * so sequential reads reach it as 1 MiB requests, two in flight; the kernel
 * default would send 128 KiB ones. Needs root (sysfs). */
static void test_readahead(void **state)
{
    (void)state;
    NEED_MOUNT();
    if (geteuid() != 0) {
        print_message("not root: the readahead cannot be raised\n");
        skip();
    }
    struct stat st;
    assert_int_equal(stat(mnt, &st), 0);
    char p[96], v[32] = {0};
    snprintf(p, sizeof p, "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
             minor(st.st_dev));
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    assert_true(read(fd, v, sizeof v - 1) > 0);
    close(fd);
    assert_int_equal(atoi(v), 2048);
}

static void test_mountpoint_errors(void **state)
{
    (void)state;
    ptc_view *v;
    assert_int_equal(ptc_view_create(&v, NULL, NULL), PTC_OK);
    int want_missing = PTC_WITH_FUSE ? PTC_E_NOTFOUND : PTC_E_UNSUPPORTED;
    assert_int_equal(ptc_mount_run(v, "/tmp/ptc-no-such-dir/x", NULL), want_missing);
    if (PTC_WITH_FUSE)
        assert_int_equal(ptc_mount_run(v, "/etc/hostname", NULL), PTC_E_INVAL);
    ptc_view_destroy(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_parallel_lookups),
        cmocka_unit_test(test_readahead),
        cmocka_unit_test(test_mountpoint_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
