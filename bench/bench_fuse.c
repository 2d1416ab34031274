/* FUSE throughput of `ptc mount`, against its baselines, in one run:
 *
 *  - step files (dp=1, large batch) read sequentially through the mount
 *    (1 MiB reads) versus the same bytes read directly from the store's
 *    pack file (pread per record, page cache);
 *  - the ceiling of FUSE itself: a minimal read-only libfuse3 server in
 *    this program answering each read with one pread of a backing file that
 *    holds the same bytes (first reads, same mount options);
 *  - re-reads of the (immutable, kernel-cached) step files versus plain
 *    page-cache reads of the backing file;
 *  - random samples/<ID> (open, read, close of distinct ids) with 1 and 8
 *    threads.
 *
 * usage: bench_fuse [MiB of step data, default 256] [record KiB, default 16]
 * Prints one line per figure and a JSON summary line. Needs /dev/fuse. */
#define FUSE_USE_VERSION 31

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ptc/build_config.h"
#include "ptc/dataset.h"
#include "ptc/mount.h"
#include "ptc/store.h"
#include "ptc/view.h"

#if PTC_WITH_FUSE
#include <fuse.h>

#define MIB (1u << 20)
#define REPS 3

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define CHECK(x)                                                                          \
    do {                                                                                  \
        int rc_ = (x);                                                                    \
        if (rc_) {                                                                        \
            fprintf(stderr, "%s: %s (%s)\n", #x, ptc_strerror(rc_), ptc_last_error());    \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

static void die(const char *what)
{
    perror(what);
    exit(1);
}

/* ---- the ceiling: a minimal read-only FUSE server ------------------------------------ */

static int backing_fd = -1;
static off_t backing_size;

static int min_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    (void)fi;
    memset(st, 0, sizeof *st);
    if (strcmp(path, "/") == 0) {
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
        return 0;
    }
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    if (strncmp(path, "/s", 2) == 0) { /* small files for the open+read+close ceiling */
        st->st_size = 64;
        return 0;
    }
    if (strncmp(path, "/data", 5) != 0)
        return -ENOENT;
    st->st_size = backing_size;
    return 0;
}

static int min_open(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    fi->keep_cache = 1;
    return 0;
}

static int min_read(const char *path, char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)fi;
    if (path && path[1] == 's') {
        size_t n = off >= 64 ? 0 : 64 - (size_t)off < size ? 64 - (size_t)off : size;
        memset(buf, 'x', n);
        return (int)n;
    }
    ssize_t n = pread(backing_fd, buf, size, off);
    return n < 0 ? -errno : (int)n;
}

static void *min_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    cfg->kernel_cache = 1;
    cfg->entry_timeout = cfg->attr_timeout = 86400;
    conn->max_readahead = MIB;
    conn->max_write = MIB;
    conn->max_read = MIB;
    conn->want |= FUSE_CAP_ASYNC_READ & conn->capable;
    return NULL;
}

static const struct fuse_operations min_ops = {
    .init = min_init, .getattr = min_getattr, .open = min_open, .read = min_read,
};

/* As fuse/mount_fuse3.c: raise the mount's readahead to 1 MiB (the device
 * number from /proc/self/mountinfo, never a stat of our own mount). */
static void raise_readahead(const char *mnt)
{
    FILE *f = fopen("/proc/self/mountinfo", "r");
    char line[4608], mp[4096], p[96];
    unsigned a, b, maj = 0, mnr = 0;
    bool found = false;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, mp) == 3 && !strcmp(mp, mnt)) {
            maj = a;
            mnr = b;
            found = true;
        }
    if (f)
        fclose(f);
    snprintf(p, sizeof p, "/sys/class/bdi/%u:%u/read_ahead_kb", maj, mnr);
    int fd = found ? open(p, O_WRONLY) : -1;
    if (fd >= 0) {
        if (write(fd, "1024", 4) != 4)
            fprintf(stderr, "ceiling: cannot raise readahead\n");
        close(fd);
    }
}

static void run_ceiling(const char *mnt, const char *backing)
{
    backing_fd = open(backing, O_RDONLY);
    if (backing_fd < 0)
        die(backing);
    backing_size = lseek(backing_fd, 0, SEEK_END);
    char o[128];
    snprintf(o, sizeof o, "ro,fsname=ceiling,max_read=%u", MIB);
    char *argv[] = {"ceiling", "-o", o, NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, argv);
    struct fuse *f = fuse_new(&args, &min_ops, sizeof min_ops, NULL);
    if (!f || fuse_mount(f, mnt) != 0)
        _exit(3);
    raise_readahead(mnt); /* as ptc mount does: 1 MiB requests */
    fuse_set_signal_handlers(fuse_get_session(f));
    fuse_loop_mt(f, 0);
    fuse_remove_signal_handlers(fuse_get_session(f));
    fuse_unmount(f);
    fuse_destroy(f);
    _exit(0);
}

/* ---- ptc mount in a child --------------------------------------------------------------- */

static int ready(void *user)
{
    return ptc_view_store_attach(user, NULL, true);
}

static void tick(void *user)
{
    ptc_view_store_flush(user);
}

static void run_ptc(const char *mnt, const char *store)
{
    ptc_view_store *vs;
    if (ptc_view_store_create(&vs, store, NULL) != PTC_OK)
        _exit(3);
    ptc_mount_options o = {.foreground = true, .ready = ready, .tick = tick, .user = vs};
    int rc = ptc_mount_run(ptc_view_store_view(vs), mnt, &o);
    ptc_view_store_destroy(vs);
    _exit(rc == PTC_OK ? 0 : 3);
}

static bool mounted(const char *mnt)
{
    struct stat a, b;
    char up[4200];
    snprintf(up, sizeof up, "%s/..", mnt);
    return stat(mnt, &a) == 0 && stat(up, &b) == 0 && a.st_dev != b.st_dev;
}

static pid_t spawn(void (*fn)(const char *, const char *), const char *mnt, const char *arg)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0)
        fn(mnt, arg);
    for (int i = 0; i < 1000; i++) {
        if (mounted(mnt))
            return pid;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "bench_fuse: cannot mount %s (no FUSE here?)\n", mnt);
            exit(77);
        }
        usleep(10000);
    }
    fprintf(stderr, "bench_fuse: %s did not mount\n", mnt);
    exit(1);
}

static void unmount(const char *mnt, pid_t pid)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "fusermount3 -u '%s'", mnt);
    if (system(cmd) != 0)
        kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

/* ---- readers -------------------------------------------------------------------------------- */

static uint8_t *iobuf;

/* Read a file with 1 MiB read() calls; returns bytes. */
static uint64_t read_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die(path);
    uint64_t total = 0;
    for (;;) {
        ssize_t n = read(fd, iobuf, MIB);
        if (n < 0)
            die(path);
        if (n == 0)
            break;
        total += (uint64_t)n;
    }
    close(fd);
    return total;
}

struct sample_job {
    const char *fmt;
    const char *mnt;
    const uint64_t *ids;
    size_t n;
    atomic_int *errors;
};

static void *sample_worker(void *p)
{
    struct sample_job *j = p;
    char path[4400], buf[4096];
    for (size_t i = 0; i < j->n; i++) {
        snprintf(path, sizeof path, j->fmt, j->mnt, (unsigned long long)j->ids[i]);
        int fd = open(path, O_RDONLY);
        if (fd < 0 || read(fd, buf, sizeof buf) <= 0)
            atomic_fetch_add(j->errors, 1);
        if (fd >= 0)
            close(fd);
    }
    return NULL;
}

static double samples_per_s(const char *fmt, const char *mnt, const uint64_t *ids, size_t n,
                            int threads)
{
    pthread_t th[64];
    struct sample_job jobs[64];
    atomic_int errors = 0;
    double t0 = now();
    for (int t = 0; t < threads; t++) {
        jobs[t] = (struct sample_job){fmt, mnt, ids + n / threads * t, n / threads, &errors};
        pthread_create(&th[t], NULL, sample_worker, &jobs[t]);
    }
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    double dt = now() - t0;
    if (errors)
        fprintf(stderr, "bench_fuse: %d sample reads failed\n", (int)errors);
    return (double)(n / threads * threads) / dt;
}

int main(int argc, char **argv)
{
    uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 256;
    uint64_t rec_kib = argc > 2 ? strtoull(argv[2], NULL, 10) : 16;
    if (mib == 0 || rec_kib == 0 || rec_kib > 1024) {
        fprintf(stderr, "usage: bench_fuse [MiB] [record KiB]\n");
        return 2;
    }
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
        printf("bench_fuse: skipped (no /dev/fuse)\n");
        return 0;
    }
    iobuf = malloc(MIB);
    char dir[] = "/tmp/ptc_bench_fuse_XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp");
    char path[8192], store[512], mnt_ptc[512], mnt_min[512], backing[512];
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(mnt_ptc, sizeof mnt_ptc, "%s/ptc", dir);
    snprintf(mnt_min, sizeof mnt_min, "%s/min", dir);
    snprintf(backing, sizeof backing, "%s/backing", dir);
    mkdir(mnt_ptc, 0755);
    mkdir(mnt_min, 0755);

    /* the datasets: token windows of rec_kib KiB, and 200k short lines */
    uint64_t rec = rec_kib * 1024, nrec = mib * MIB / rec;
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    FILE *f = fopen(path, "wb");
    uint32_t x = 12345;
    for (uint64_t i = 0; i < nrec * rec / 4; i++) {
        x = x * 1664525u + 1013904223u;
        fwrite(&x, 4, 1, f);
    }
    fclose(f);
    char lines[4096];
    snprintf(lines, sizeof lines, "%s/lines.txt", dir);
    f = fopen(lines, "w");
    const uint64_t NS = 200000;
    for (uint64_t i = 0; i < NS; i++)
        fprintf(f, "sample %llu: %.*s\n", (unsigned long long)i, (int)(20 + i % 80),
                "the quick brown fox jumps over the lazy dog; the quick brown fox jumps over "
                "the lazy dog.");
    fclose(f);
    ptc_store *s;
    CHECK(ptc_store_open(&s, store, PTC_STORE_CREATE));
    char fmt[64];
    snprintf(fmt, sizeof fmt, "tokens:u32:%llu", (unsigned long long)(rec / 4));
    const char *in1[] = {path}, *in2[] = {lines};
    CHECK(ptc_dataset_ingest(s, "tok", fmt, in1, 1, NULL, NULL));
    CHECK(ptc_dataset_ingest(s, "small", "lines", in2, 1, NULL, NULL));
    ptc_store_dataset_info info;
    CHECK(ptc_store_dataset_stat(s, "tok", &info));
    ptc_store_close(s);
    if (!info.data_raw || info.samples != nrec)
        return fprintf(stderr, "unexpected dataset layout\n"), 1;

    /* direct: the step bytes read from the pack file, record by record (the
     * last pass is timed); and written once to the ceiling's backing file */
    const uint64_t B = nrec / 4 ? nrec / 4 : 1, steps = (nrec + B - 1) / B;
    snprintf(path, sizeof path, "%s/packs/datasets/d%llu.pack", store,
             (unsigned long long)info.id);
    int pack = open(path, O_RDONLY);
    int bfd = open(backing, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (pack < 0 || bfd < 0)
        die("open pack/backing");
    uint8_t *stepbuf = malloc(B * rec);
    double direct_best = 0;
    for (int rep = 0; rep < REPS + 1; rep++) {
        ptc_order o;
        CHECK(ptc_order_init(&o, nrec, (uint64_t)rep + 1, 0));
        double t0 = now();
        for (uint64_t k = 0; k < steps; k++) {
            uint64_t lo = k * B, hi = lo + B < nrec ? lo + B : nrec;
            for (uint64_t p = lo; p < hi; p++) {
                uint64_t id;
                CHECK(ptc_order_sample(&o, p, &id));
                if (pread(pack, stepbuf + (p - lo) * rec, rec, (off_t)(info.data_offset + id * rec)) !=
                    (ssize_t)rec)
                    die("pread pack");
            }
            if (rep == 0 && write(bfd, stepbuf, (hi - lo) * rec) != (ssize_t)((hi - lo) * rec))
                die("write backing");
        }
        double gbs = (double)(nrec * rec) / (now() - t0) / 1e9;
        if (rep > 0 && gbs > direct_best)
            direct_best = gbs;
    }
    close(bfd);
    close(pack);

    pid_t ptc_pid = spawn(run_ptc, mnt_ptc, store);
    pid_t min_pid = spawn(run_ceiling, mnt_min, backing);

    /* first reads: a new seed (new files) per repetition, best of REPS */
    double ptc_first = 0, min_first = 0, ptc_re = 0, page_re = 0;
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = now();
        uint64_t bytes = 0;
        for (uint64_t k = 0; k < steps; k++) {
            snprintf(path, sizeof path,
                     "%s/datasets/tok/seed-%d/epoch-0/batch-%llu/start-0/dp-1/rank-0/step-%llu",
                     mnt_ptc, rep + 1, (unsigned long long)B, (unsigned long long)k);
            bytes += read_file(path);
        }
        double gbs = (double)bytes / (now() - t0) / 1e9;
        if (bytes != nrec * rec)
            return fprintf(stderr, "short step files: %llu bytes\n", (unsigned long long)bytes), 1;
        ptc_first = gbs > ptc_first ? gbs : ptc_first;
        snprintf(path, sizeof path, "%s/data%d", mnt_min, rep);
        t0 = now();
        bytes = read_file(path);
        gbs = (double)bytes / (now() - t0) / 1e9;
        min_first = gbs > min_first ? gbs : min_first;
    }
    /* re-reads (kernel page cache kept) versus direct page-cache reads */
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = now();
        uint64_t bytes = 0;
        for (uint64_t k = 0; k < steps; k++) {
            snprintf(path, sizeof path,
                     "%s/datasets/tok/seed-1/epoch-0/batch-%llu/start-0/dp-1/rank-0/step-%llu",
                     mnt_ptc, (unsigned long long)B, (unsigned long long)k);
            bytes += read_file(path);
        }
        double gbs = (double)bytes / (now() - t0) / 1e9;
        ptc_re = gbs > ptc_re ? gbs : ptc_re;
        t0 = now();
        bytes = read_file(backing);
        gbs = (double)bytes / (now() - t0) / 1e9;
        page_re = gbs > page_re ? gbs : page_re;
    }

    /* random samples/<ID>: distinct ids (never cached), 1 then 8 threads */
    uint64_t *ids = malloc(NS * sizeof *ids);
    ptc_order o;
    CHECK(ptc_order_init(&o, NS, 99, 0));
    for (uint64_t i = 0; i < NS; i++)
        CHECK(ptc_order_sample(&o, i, &ids[i]));
    const char *sfmt = "%s/datasets/small/samples/%llu", *mfmt = "%s/s%llu";
    double s1 = samples_per_s(sfmt, mnt_ptc, ids, 40000, 1);
    double s8 = samples_per_s(sfmt, mnt_ptc, ids + 40000, 160000, 8);
    double m1 = samples_per_s(mfmt, mnt_min, ids, 40000, 1);
    double m8 = samples_per_s(mfmt, mnt_min, ids + 40000, 160000, 8);
    /* the ceiling's re-read (FUSE's own page-cache path) */
    double min_re = 0;
    for (int rep = 0; rep < REPS; rep++) {
        snprintf(path, sizeof path, "%s/data0", mnt_min);
        double t0 = now();
        uint64_t bytes = read_file(path);
        double gbs = (double)bytes / (now() - t0) / 1e9;
        min_re = gbs > min_re ? gbs : min_re;
    }

    unmount(mnt_ptc, ptc_pid);
    unmount(mnt_min, min_pid);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_fuse: could not remove %s\n", dir);

    printf("step files: %llu MiB, %llu records of %llu KiB, %llu steps (dp=1, batch %llu)\n",
           (unsigned long long)mib, (unsigned long long)nrec, (unsigned long long)rec_kib,
           (unsigned long long)steps, (unsigned long long)B);
    printf("first read through ptc mount     %7.2f GB/s\n", ptc_first);
    printf("direct from the pack file        %7.2f GB/s   ratio %.2f (goal >= 0.70)\n",
           direct_best, ptc_first / direct_best);
    printf("ceiling: minimal FUSE + pread    %7.2f GB/s   ratio %.2f (goal >= 0.85)\n",
           min_first, ptc_first / min_first);
    printf("re-read through ptc mount        %7.2f GB/s\n", ptc_re);
    printf("direct page-cache read           %7.2f GB/s   ratio %.2f (goal >= 0.70)\n", page_re,
           ptc_re / page_re);
    printf("re-read through minimal FUSE     %7.2f GB/s   (FUSE's own cached-read ceiling)\n",
           min_re);
    printf("samples/<ID> 1 thread            %9.0f samples/s   minimal FUSE open+read+close %9.0f/s\n",
           s1, m1);
    printf("samples/<ID> 8 threads           %9.0f samples/s   minimal FUSE open+read+close %9.0f/s"
           " (goal >= 50000)\n", s8, m8);
    printf("{\"first_gbs\":%.3f,\"direct_gbs\":%.3f,\"ceiling_gbs\":%.3f,\"reread_gbs\":%.3f,"
           "\"pagecache_gbs\":%.3f,\"ratio_direct\":%.3f,\"ratio_ceiling\":%.3f,"
           "\"ratio_reread\":%.3f,\"ceiling_reread_gbs\":%.3f,\"samples_1\":%.0f,\"samples_8\":%.0f,"
           "\"ceiling_samples_1\":%.0f,\"ceiling_samples_8\":%.0f}\n",
           ptc_first, direct_best, min_first, ptc_re, page_re, ptc_first / direct_best,
           ptc_first / min_first, ptc_re / page_re, min_re, s1, s8, m1, m8);
    free(ids);
    free(stepbuf);
    free(iobuf);
    return 0;
}
#else
int main(void)
{
    printf("bench_fuse: skipped (built without libfuse3)\n");
    return 0;
}
#endif
