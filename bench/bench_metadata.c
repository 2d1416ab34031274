/* Metadata benchmark: import of a safetensors file whose __metadata__ has
 * many keys, at N and 2N keys. The cost must grow linearly (up to the
 * n log n of sorting the keys when the version record is written): the
 * ratio of the two import times (best of 5, CPU and wall) is printed and
 * should stay at or below 2 (plus noise). A store that scans the earlier keys
 * for every key shows about 4. Baseline, measured in the same run: jansson
 * parsing and freeing the same headers alone (no store), the way the import
 * read __metadata__ until it got its own reader (ptc/safetensors_meta.c):
 * jansson's hash table outgrows the caches, so that ratio exceeds 2 here
 * (2.6-2.9), and the import of 2N keys is compared with it too.
 *
 * usage: bench_metadata [--quick] [--keys N] [--dir DIR] [--json]
 *   (default N = 200000; --quick: 50000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ptc/ptc.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_metadata: %s: %s\n", what, rc ? ptc_last_error() : "failed");
    exit(1);
}

static void rm_rf(const char *path)
{
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_metadata: could not remove %s\n", path);
}

/* One small tensor and @p n metadata keys in random-looking order. */
static void make_file(const char *path, size_t n)
{
    ptc_st_kv *kv = calloc(n, sizeof *kv);
    char *text = malloc(n * 48);
    if (!kv || !text)
        die("out of memory", 0);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        char *k = text + i * 48;
        snprintf(k, 21, "key.%016llx", (unsigned long long)((s >> 1) ^ i));
        snprintf(k + 21, 27, "value-%zu", i);
        kv[i].key = k;
        kv[i].value = k + 21;
    }
    float data[4] = {1, 2, 3, 4};
    ptc_st_tensor t = {.name = "w", .dtype = PTC_DTYPE_F32, .ndim = 1, .shape = {4}};
    ptc_st_writer *w;
    int rc = ptc_st_writer_create(&w, path, &t, 1, kv, n);
    if (rc || (rc = ptc_st_writer_write(w, data, sizeof data)) || (rc = ptc_st_writer_finish(w)))
        die("write the file", rc);
    free(kv);
    free(text);
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct timing {
    double wall, cpu; /* best seen */
} timing;

/* Import @p file into a new store once, in a child process as `ptc import`
 * runs (a fresh heap each time: what one import left in the allocator must
 * not speed up or slow down the next); keep the best wall and CPU time. */
static void import_once(const char *base, const char *file, timing *best)
{
    char store[4200];
    snprintf(store, sizeof store, "%s/store", base);
    rm_rf(store);
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe", 0);
    pid_t pid = fork();
    if (pid < 0)
        die("fork", 0);
    if (pid == 0) {
        close(fds[0]);
        ptc_config cfg;
        ptc_rules *rules;
        if (ptc_config_parse(&cfg, "dp=1,tp=1,pp=1"))
            die("config", 1);
        if (ptc_rules_load(&rules, "none"))
            die("rules", 1);
        ptc_store *s;
        if (ptc_store_open(&s, store, PTC_STORE_CREATE))
            die("open store", 1);
        const char *inputs[] = {file};
        double t0 = now(), c0 = cpu_now();
        int rc = ptc_import(s, inputs, 1, &cfg, rules, NULL, NULL);
        timing t = {now() - t0, cpu_now() - c0};
        if (rc)
            die("import", rc);
        ptc_store_close(s);
        ptc_rules_destroy(rules);
        if (write(fds[1], &t, sizeof t) != (ssize_t)sizeof t)
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    timing t;
    ssize_t got = read(fds[0], &t, sizeof t);
    close(fds[0]);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        got != (ssize_t)sizeof t)
        die("import in a child process", 0);
    if (best->wall == 0 || t.wall < best->wall)
        best->wall = t.wall;
    if (best->cpu == 0 || t.cpu < best->cpu)
        best->cpu = t.cpu;
}

/* The baseline: jansson alone parsing and freeing the header of @p file
 * (what reading any such file costs before the store does anything). */
static void parse_once(const char *file, timing *best)
{
    FILE *f = fopen(file, "rb");
    unsigned char len8[8];
    if (!f || fread(len8, 1, 8, f) != 8)
        die("read the header length", 0);
    size_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | len8[i];
    char *h = malloc(n);
    if (!h || fread(h, 1, n, f) != n)
        die("read the header", 0);
    fclose(f);
    double t0 = now(), c0 = cpu_now();
    json_error_t e;
    json_t *j = json_loadb(h, n, JSON_REJECT_DUPLICATES, &e);
    if (!j)
        die("parse the header", 0);
    json_decref(j);
    double t = now() - t0, c = cpu_now() - c0;
    free(h);
    if (best->wall == 0 || t < best->wall)
        best->wall = t;
    if (best->cpu == 0 || c < best->cpu)
        best->cpu = c;
}

int main(int argc, char **argv)
{
    size_t keys = 200000;
    const char *dir = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            keys = 50000;
        else if (!strcmp(argv[i], "--keys") && i + 1 < argc)
            keys = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else {
            fprintf(stderr, "usage: bench_metadata [--quick] [--keys N] [--dir DIR] [--json]\n");
            return 2;
        }
    }
    if (keys < 1000)
        keys = 1000;
    char base[4096];
    snprintf(base, sizeof base, "%s/ptc-bench-metadata.XXXXXX", dir ? dir : ".");
    if (!mkdtemp(base))
        die("mkdtemp", 0);
    char f1[4200], f2[4200];
    snprintf(f1, sizeof f1, "%s/n.safetensors", base);
    snprintf(f2, sizeof f2, "%s/2n.safetensors", base);
    make_file(f1, keys);
    make_file(f2, 2 * keys);
    /* alternate the two sizes so a busy machine slows both alike; best of
     * several, on CPU time (what the import computes) and wall time */
    timing t1 = {0}, t2 = {0}, p1 = {0}, p2 = {0};
    for (int r = 0; r < 5; r++) {
        import_once(base, f1, &t1);
        import_once(base, f2, &t2);
    }
    /* the baseline after the imports: freeing jansson's million small
     * objects leaves the heap in a state that slows the next big mallocs */
    for (int r = 0; r < 5; r++) {
        parse_once(f1, &p1);
        parse_once(f2, &p2);
    }
    double ratio = t2.cpu / t1.cpu, wall_ratio = t2.wall / t1.wall;
    double base_ratio = p2.cpu / p1.cpu, vs_jansson = t2.cpu / p2.cpu;
    if (json)
        printf("{\"keys\":%zu,\"cpu_seconds\":%.4f,\"seconds\":%.4f,\"keys_2x\":%zu,"
               "\"cpu_seconds_2x\":%.4f,\"seconds_2x\":%.4f,\"ratio\":%.3f,"
               "\"wall_ratio\":%.3f,\"baseline_parse_cpu_seconds\":%.4f,"
               "\"baseline_parse_cpu_seconds_2x\":%.4f,\"baseline_ratio\":%.3f,"
               "\"import_2x_over_jansson_parse_2x\":%.3f}\n",
               keys, t1.cpu, t1.wall, 2 * keys, t2.cpu, t2.wall, ratio, wall_ratio, p1.cpu,
               p2.cpu, base_ratio, vs_jansson);
    else
        printf("import with %7zu metadata keys   cpu %8.3f s   wall %8.3f s\n"
               "import with %7zu metadata keys   cpu %8.3f s   wall %8.3f s\n"
               "ratio 2N/N (goal <= 2: linear)      cpu %8.2f     wall %8.2f\n"
               "baseline: jansson parse+free of the header alone, cpu %.3f s / %.3f s, "
               "ratio %.2f\n"
               "import of 2N keys / jansson parse of its header alone: %.2f\n",
               keys, t1.cpu, t1.wall, 2 * keys, t2.cpu, t2.wall, ratio, wall_ratio, p1.cpu,
               p2.cpu, base_ratio, vs_jansson);
    rm_rf(base);
    return 0;
}
