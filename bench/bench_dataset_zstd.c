/* Step files of a zstd dataset through `ptc mount`, against the same
 * records stored uncompressed, in one run on the same machine.
 *
 * One store holds the same text-like records twice: "raw" (no codec) and
 * "zst" (--compress zstd:3). Each round mounts the store afresh (so the
 * view's decoded-block cache starts empty) and, in an order rotated per
 * round, reads for each dataset:
 *  - epoch 1: every step file of one epoch (dp=1, batch of B records,
 *    1 MiB read() calls), the first pass over the data since the mount:
 *    every block of "zst" is decompressed here;
 *  - epoch 2: the same with another seed (new step files, so no kernel
 *    page cache): the decoded blocks are reused while the cache holds them;
 *  - samples: random samples/<ID> (open, read, close), one thread.
 * Prints records/s per figure (medians of the rounds) and the ratios
 * zst ÷ raw; the goal (docs/dataset.md) is a ratio of at least 0.5 for step
 * files. Exit 1 if a ratio of step files is below 0.5 with --check.
 *
 * usage: bench_dataset_zstd [MiB, default 128] [record KiB, default 16]
 *                           [rounds, default 5] [cache MiB, default 256; 0: none]
 *                           [--check]
 * Needs /dev/fuse. */
#include <errno.h>
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

#include "ptc/build_config.h"
#include "ptc/dataset.h"
#include "ptc/mount.h"
#include "ptc/store.h"
#include "ptc/view.h"
#include "bench_util.h"

#if PTC_WITH_FUSE

#define MIB (1u << 20)
#define MAX_ROUNDS 32
#define NSAMPLES 2000

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static uint64_t cache_bytes;

static int ready(void *user)
{
    return ptc_view_store_attach(user, NULL, false);
}

static pid_t mount_store(const char *mnt, const char *store)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        /* 1 byte: less than a block, no cache */
        ptc_view_store_options vo = {.block_cache = cache_bytes ? cache_bytes : 1};
        ptc_view_store *vs;
        if (ptc_view_store_create(&vs, store, &vo) != PTC_OK)
            _exit(3);
        ptc_mount_options o = {.foreground = true, .ready = ready, .user = vs};
        int rc = ptc_mount_run(ptc_view_store_view(vs), mnt, &o);
        ptc_store_block_cache_stats st;
        ptc_view_store_block_cache_stats(vs, &st);
        fprintf(stderr, "  cache: peak %llu MiB, %llu hits, %llu decodes (%llu ahead), "
                        "%llu bypassed\n",
                (unsigned long long)(st.peak_bytes >> 20), (unsigned long long)st.hits,
                (unsigned long long)st.decodes, (unsigned long long)st.decoded_ahead,
                (unsigned long long)st.bypassed);
        ptc_view_store_destroy(vs);
        _exit(rc == PTC_OK ? 0 : 3);
    }
    return bench_wait_mount(pid, mnt, "bench_dataset_zstd");
}

static uint8_t *iobuf;

static uint64_t read_file(const char *path)
{
    return bench_read_file(path, iobuf, MIB);
}

/* Records/s of one epoch's step files of dataset @p name. */
static double epoch_rate(const char *mnt, const char *name, uint64_t seed, uint64_t nrec,
                         uint64_t B, uint64_t rec)
{
    char path[4400];
    uint64_t steps = (nrec + B - 1) / B, bytes = 0;
    double t0 = bench_now();
    ptc_dataset_step st = {.seed = seed, .batch = B, .dp = 1};
    char rel[PTC_DATASET_STEP_PATH_MAX];
    for (st.step = 0; st.step < steps; st.step++) {
        CHECK(ptc_dataset_step_format(&st, PTC_DATASET_STEP_LEVEL_FILE, rel, sizeof rel));
        snprintf(path, sizeof path, "%s/datasets/%s/%s", mnt, name, rel);
        bytes += read_file(path);
    }
    double dt = bench_now() - t0;
    if (bytes != nrec * rec) {
        fprintf(stderr, "%s: read %llu bytes, want %llu\n", name, (unsigned long long)bytes,
                (unsigned long long)(nrec * rec));
        exit(1);
    }
    return nrec / dt;
}

static double samples_rate(const char *mnt, const char *name, const uint64_t *ids, size_t n,
                           uint64_t rec)
{
    char path[4400];
    double t0 = bench_now();
    for (size_t i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/datasets/%s/samples/%llu", mnt, name,
                 (unsigned long long)ids[i]);
        if (read_file(path) != rec) {
            fprintf(stderr, "%s: short sample\n", path);
            exit(1);
        }
    }
    return n / (bench_now() - t0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n)
{
    double s[MAX_ROUNDS];
    memcpy(s, v, (size_t)n * sizeof *v);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void show(const char *what, const double *v, int n, const char *unit)
{
    double s[MAX_ROUNDS];
    memcpy(s, v, (size_t)n * sizeof *v);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    printf("%-34s median %10.2f %s  (min %.2f, max %.2f)\n", what, median(v, n), unit, s[0],
           s[n - 1]);
}

/* Text-like bytes: words of a small vocabulary, skewed choice (zstd:3
 * stores them in about a third). */
static void write_text(const char *path, uint64_t bytes)
{
    static char vocab[512][12];
    uint32_t x = 2463534242u;
    for (int w = 0; w < 512; w++) {
        int len = 2 + w % 9;
        for (int c = 0; c < len; c++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            vocab[w][c] = (char)('a' + x % 26);
        }
        vocab[w][len] = 0;
    }
    FILE *f = fopen(path, "wb");
    if (!f)
        die(path);
    uint64_t n = 0;
    while (n < bytes) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        /* the low words far more often than the high ones */
        unsigned w = (x & 511) * ((x >> 9) & 511) / 512;
        const char *s = vocab[w];
        size_t l = strlen(s);
        for (size_t c = 0; c < l && n < bytes; c++, n++)
            fputc(s[c], f);
        if (n < bytes) {
            fputc((x >> 20) % 13 ? ' ' : '\n', f);
            n++;
        }
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    bool check = false;
    int na = 0;
    const char *pos[4] = {NULL};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0)
            check = true;
        else if (na < 4)
            pos[na++] = argv[i];
    }
    uint64_t mib = pos[0] ? strtoull(pos[0], NULL, 10) : 128;
    uint64_t rec_kib = pos[1] ? strtoull(pos[1], NULL, 10) : 16;
    int rounds = pos[2] ? atoi(pos[2]) : 5;
    cache_bytes = (pos[3] ? strtoull(pos[3], NULL, 10) : 256) * MIB;
    if (mib == 0 || rec_kib == 0 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: bench_dataset_zstd [MiB] [record KiB] [rounds 1..%d] [cache MiB]"
                        " [--check]\n", MAX_ROUNDS);
        return 2;
    }
    if (access("/dev/fuse", R_OK | W_OK) != 0) {
        printf("bench_dataset_zstd: skipped (no /dev/fuse)\n");
        return 77;
    }
    iobuf = malloc(MIB);
    char dir[] = "/tmp/ptc_bench_zstd_XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp");
    char store[512], mnt[512], text[512], fmt[64];
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(mnt, sizeof mnt, "%s/mnt", dir);
    snprintf(text, sizeof text, "%s/text.bin", dir);
    mkdir(mnt, 0755);
    const uint64_t rec = rec_kib * 1024, nrec = mib * MIB / rec;
    const uint64_t B = 64; /* records per step file */
    write_text(text, nrec * rec);
    snprintf(fmt, sizeof fmt, "tokens:u16:%llu", (unsigned long long)(rec / 2));
    ptc_store *s;
    CHECK(ptc_store_open(&s, store, PTC_STORE_CREATE));
    const char *in[] = {text};
    ptc_dataset_ingest_options zo = {.codec = PTC_STORE_CODEC_ZSTD, .level = 3};
    CHECK(ptc_dataset_ingest(s, "raw", fmt, in, 1, NULL, NULL));
    CHECK(ptc_dataset_ingest(s, "zst", fmt, in, 1, &zo, NULL));
    ptc_store_dataset_info ir, iz;
    CHECK(ptc_store_dataset_stat(s, "raw", &ir));
    CHECK(ptc_store_dataset_stat(s, "zst", &iz));
    ptc_store_close(s);
    unlink(text);
    printf("%llu records of %llu KiB (%llu MiB), steps of %llu records; zstd:3 stores %.1f%%; "
           "cache %llu MiB; %d rounds\n",
           (unsigned long long)nrec, (unsigned long long)rec_kib, (unsigned long long)mib,
           (unsigned long long)B, 100.0 * (double)iz.stored_bytes / (double)iz.bytes,
           (unsigned long long)(cache_bytes / MIB), rounds);

    uint64_t *ids = malloc(NSAMPLES * sizeof *ids);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < NSAMPLES; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = x % nrec;
    }
    static const char *names[2] = {"raw", "zst"};
    double e1[2][MAX_ROUNDS], e2[2][MAX_ROUNDS], sm[2][MAX_ROUNDS];
    double q1[MAX_ROUNDS], q2[MAX_ROUNDS], qs[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        pid_t pid = mount_store(mnt, store);
        for (int j = 0; j < 2; j++) {
            int d = (j + r) % 2; /* rotate which dataset goes first */
            uint64_t seed = 100 + 2 * (uint64_t)r;
            e1[d][r] = epoch_rate(mnt, names[d], seed, nrec, B, rec);
            e2[d][r] = epoch_rate(mnt, names[d], seed + 1, nrec, B, rec);
            sm[d][r] = samples_rate(mnt, names[d], ids, NSAMPLES, rec);
        }
        bench_unmount(mnt, pid);
        q1[r] = e1[1][r] / e1[0][r];
        q2[r] = e2[1][r] / e2[0][r];
        qs[r] = sm[1][r] / sm[0][r];
        fprintf(stderr, "round %d: epoch 1 %.0f/%.0f, epoch 2 %.0f/%.0f, samples %.0f/%.0f\n",
                r + 1, e1[1][r], e1[0][r], e2[1][r], e2[0][r], sm[1][r], sm[0][r]);
    }
    for (int d = 0; d < 2; d++) {
        char what[64];
        snprintf(what, sizeof what, "step files, epoch 1, %s", names[d]);
        show(what, e1[d], rounds, "rec/s");
        snprintf(what, sizeof what, "step files, epoch 2, %s", names[d]);
        show(what, e2[d], rounds, "rec/s");
        snprintf(what, sizeof what, "samples/<ID>, 1 thread, %s", names[d]);
        show(what, sm[d], rounds, "rec/s");
    }
    show("ratio zst/raw, epoch 1 (goal >= 0.5)", q1, rounds, "");
    show("ratio zst/raw, epoch 2 (goal >= 0.5)", q2, rounds, "");
    show("ratio zst/raw, samples", qs, rounds, "");
    printf("{\"rounds\":%d,\"records\":%llu,\"record_bytes\":%llu,\"cache_mib\":%llu,"
           "\"raw_epoch1\":%.0f,\"zst_epoch1\":%.0f,\"raw_epoch2\":%.0f,\"zst_epoch2\":%.0f,"
           "\"raw_samples\":%.0f,\"zst_samples\":%.0f,"
           "\"ratio_epoch1\":%.3f,\"ratio_epoch2\":%.3f,\"ratio_samples\":%.3f}\n",
           rounds, (unsigned long long)nrec, (unsigned long long)rec,
           (unsigned long long)(cache_bytes / MIB), median(e1[0], rounds), median(e1[1], rounds),
           median(e2[0], rounds), median(e2[1], rounds), median(sm[0], rounds),
           median(sm[1], rounds), median(q1, rounds), median(q2, rounds), median(qs, rounds));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_dataset_zstd: could not remove %s\n", dir);
    free(ids);
    free(iobuf);
    if (check && (median(q1, rounds) < 0.5 || median(q2, rounds) < 0.5)) {
        printf("FAIL: compressed step files below 0.5 of uncompressed\n");
        return 1;
    }
    return 0;
}
#else
int main(void)
{
    printf("bench_dataset_zstd: skipped (built without libfuse3)\n");
    return 0;
}
#endif
