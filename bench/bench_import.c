/* Import benchmark: `ptc import` of a large safetensors file against its
 * baseline, copying the same bytes with read/write + fsync (what `cp` then
 * `sync` costs), measured in the same run on the same file. Also samples the
 * peak anonymous memory (RssAnon) during the import: streaming must keep it
 * bounded whatever the model size.
 *
 * usage: bench_import [--quick] [--size-mb N] [--dir DIR] [--config CFG] [--json]
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ptc/ptc.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long rss_anon_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static atomic_long peak_kb;
static atomic_int sampling;

static void *sampler(void *arg)
{
    (void)arg;
    while (atomic_load(&sampling)) {
        long kb = rss_anon_kb();
        if (kb > atomic_load(&peak_kb))
            atomic_store(&peak_kb, kb);
        usleep(2000);
    }
    return NULL;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_import: %s: %s\n", what, rc ? ptc_last_error() : "failed");
    exit(1);
}

/* A Llama-style MLP stack: L layers of gate/up/down projections. */
static void make_model(const char *path, int layers, int64_t hidden)
{
    int64_t inter = hidden * 11 / 4;
    int n = layers * 3;
    ptc_st_tensor *t = calloc((size_t)n, sizeof *t);
    char **names = calloc((size_t)n, sizeof *names);
    static const char *const kinds[] = {"down_proj", "gate_proj", "up_proj"};
    for (int l = 0, k = 0; l < layers; l++)
        for (int j = 0; j < 3; j++, k++) {
            names[k] = malloc(96);
            snprintf(names[k], 96, "model.layers.%d.mlp.%s.weight", l, kinds[j]);
            t[k].name = names[k];
            t[k].dtype = PTC_DTYPE_F32;
            t[k].ndim = 2;
            t[k].shape[0] = j == 0 ? hidden : inter;
            t[k].shape[1] = j == 0 ? inter : hidden;
        }
    ptc_st_writer *w;
    int rc = ptc_st_writer_create(&w, path, t, (size_t)n, NULL, 0);
    if (rc)
        die("create model", rc);
    enum { CH = 1 << 22 };
    uint64_t *buf = malloc(CH * 8);
    uint64_t s = 42;
    for (uint64_t left = ptc_st_writer_remaining(w); left > 0;) {
        size_t k = left < CH * 8 ? (size_t)left : CH * 8;
        for (size_t i = 0; i < (k + 7) / 8; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = (s >> 33) * 0x3f80000100000001ull; /* finite-looking floats */
        }
        if ((rc = ptc_st_writer_write(w, buf, k)))
            die("write model", rc);
        left -= k;
    }
    if ((rc = ptc_st_writer_finish(w)))
        die("finish model", rc);
    free(buf);
    for (int k = 0; k < n; k++)
        free(names[k]);
    free(names);
    free(t);
}

/* The baseline: read the file and write a copy, then fsync it. */
static double copy_fsync(const char *src, const char *dst)
{
    double t0 = now();
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0)
        die("open for copy", 0);
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(in, buf, cap)) > 0)
        if (write(out, buf, (size_t)r) != r)
            die("copy write", 0);
    fsync(out);
    close(in);
    close(out);
    free(buf);
    return now() - t0;
}

static void rm_rf(const char *path)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_import: could not remove %s\n", path);
}

int main(int argc, char **argv)
{
    int size_mb = 1100;
    const char *dir = NULL, *cfg_text = "dp=1,tp=1,pp=1";
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            size_mb = 96;
        else if (!strcmp(argv[i], "--size-mb") && i + 1 < argc)
            size_mb = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            cfg_text = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else {
            fprintf(stderr, "usage: bench_import [--quick] [--size-mb N] [--dir DIR] "
                            "[--config CFG] [--json]\n");
            return 2;
        }
    }
    char base[4096];
    snprintf(base, sizeof base, "%s/ptc-bench-import.XXXXXX", dir ? dir : ".");
    if (!mkdtemp(base))
        die("mkdtemp", 0);
    char model[4200], copy[4200], store[4200];
    snprintf(model, sizeof model, "%s/model.safetensors", base);
    snprintf(copy, sizeof copy, "%s/copy.safetensors", base);
    snprintf(store, sizeof store, "%s/store", base);

    int64_t hidden = 1024;
    int64_t per_layer = 3 * hidden * (hidden * 11 / 4) * 4;
    int layers = (int)(((int64_t)size_mb << 20) / per_layer);
    if (layers < 1)
        layers = 1;
    make_model(model, layers, hidden);
    struct stat st;
    stat(model, &st);
    double gib = (double)st.st_size / (1u << 30);

    ptc_config cfg;
    ptc_rules *rules;
    if (ptc_config_parse(&cfg, cfg_text))
        die("config", 1);
    if (ptc_rules_load(&rules, "llama"))
        die("rules", 1);

    /* warm the page cache equally for both, then alternate */
    double t_copy = copy_fsync(model, copy);
    unlink(copy);
    t_copy = copy_fsync(model, copy);
    unlink(copy);

    ptc_store *s;
    if (ptc_store_open(&s, store, PTC_STORE_CREATE))
        die("open store", 1);
    atomic_store(&peak_kb, rss_anon_kb());
    long before_kb = atomic_load(&peak_kb);
    atomic_store(&sampling, 1);
    pthread_t th;
    pthread_create(&th, NULL, sampler, NULL);
    const char *inputs[] = {model};
    double t0 = now();
    int rc = ptc_import(s, inputs, 1, &cfg, rules, NULL, NULL);
    double t_import = now() - t0;
    atomic_store(&sampling, 0);
    pthread_join(th, NULL);
    if (rc)
        die("import", rc);
    ptc_store_close(s);
    ptc_rules_destroy(rules);

    double ratio = t_import / t_copy;
    long peak = atomic_load(&peak_kb);
    if (json) {
        printf("{\"bytes\":%lld,\"config\":\"%s\",\"copy_fsync_s\":%.3f,\"import_s\":%.3f,"
               "\"ratio\":%.3f,\"peak_rss_anon_mib\":%.1f,\"rss_anon_before_mib\":%.1f}\n",
               (long long)st.st_size, cfg_text, t_copy, t_import, ratio, peak / 1024.0,
               before_kb / 1024.0);
    } else {
        printf("model: %.2f GiB, %d layers, import under %s\n", gib, layers, cfg_text);
        printf("baseline read+write+fsync: %.3f s (%.0f MiB/s)\n", t_copy,
               st.st_size / t_copy / (1 << 20));
        printf("ptc import:                %.3f s (%.0f MiB/s)\n", t_import,
               st.st_size / t_import / (1 << 20));
        printf("ratio import / baseline:   %.2fx  (goal <= 1.30x)\n", ratio);
        printf("peak RssAnon during import: %.1f MiB (before: %.1f MiB; goal <= 128 MiB)\n",
               peak / 1024.0, before_kb / 1024.0);
    }
    rm_rf(base);
    return 0;
}
