/* Training-state checkpoints under mpirun, against plain file I/O by the
 * same processes in the same run:
 *
 *  1. save: ptc_ckpt_save of fp32 parameters + two AdamW moments (llama
 *     naming, zero=1 so the moments are split over dp), every process
 *     writing its own ranks, vs each process pwrite()+fsync() of exactly
 *     the bytes it stores into a plain file. Goal: ratio <= 1.3. Also a save
 *     with a parent whose shards all changed (the usual training step: the
 *     reuse check stops at the first block) and one with nothing changed
 *     (everything referenced, each extent read back and checked first; the
 *     check alone is timed beside it: every process reading back its
 *     shards of the parent).
 *  2. resume under other configurations: ptc_ckpt_load vs each process
 *     pread() of as many bytes as its destination buffers hold, both cold
 *     (the pack files and the plain files dropped from the page cache with
 *     posix_fadvise(DONTNEED) after an fsync) and warm. Goal: ratio <= 1.5.
 *     Peak RSS of the load (VmHWM after resetting it through
 *     /proc/self/clear_refs) vs the destination buffers + 64 MiB, and the
 *     bytes the load read (rchar of /proc/self/io) vs what it needed.
 *
 *   mpirun -np 4 bench_ckpt [--dir D] [--layers L] [--hidden H] [--ffn F]
 *       [--vocab V] [--save-config CFG] [--load-config CFG]... [--reps N]
 *       [--threads N]
 *
 * Ranks go to processes in contiguous blocks. Figures are medians over the
 * repetitions (alternating which of the pair runs first); wall times are
 * from a barrier before to a barrier after. Exits 1 on a failure only: the
 * goals depend on the disk and are reported, not enforced. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "bench_model.h"
#include "bench_util.h"

#include "ptc/ckpt.h"

#define IO_CHUNK ((size_t)8 << 20)

static int me, np;

static void die(const char *what)
{
    fprintf(stderr, "error: process %d: %s: %s\n", me, what, ptc_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static long long io_rchar(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[256];
    long long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "rchar:", 6))
            v = atoll(line + 6);
    if (f)
        fclose(f);
    return v;
}

/* Reset VmHWM to the current RSS (Linux >= 4.0). */
static void reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

/* Drop a file's clean pages from the page cache. */
static void drop_file(const char *p)
{
    int fd = open(p, O_RDONLY);
    if (fd >= 0) {
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static void drop_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode))
            drop_tree(p);
        else
            drop_file(p);
    }
    if (d)
        closedir(d);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- the model -------------------------------------------------------------- */

/* The ranks of this process under @p l: a contiguous block. */
static size_t my_ranks(const ptc_layout *l, int *ranks)
{
    int world = ptc_config_world(ptc_layout_config(l));
    size_t n = 0;
    for (int r = 0; r < world; r++)
        if ((int)((int64_t)r * np / world) == me)
            ranks[n++] = r;
    return n;
}

typedef struct bufset {
    size_t n;
    uint8_t **b;
    size_t *len;
    size_t total; /* bytes of all buffers */
    size_t owned; /* bytes of the shards this process stores (owner ranks) */
} bufset;

static void bufs_alloc(bufset *s, const ptc_layout *l, const int *ranks, size_t nranks, bool fill)
{
    size_t nt = ptc_layout_count(l);
    s->n = nranks * nt;
    s->b = calloc(s->n + 1, sizeof *s->b);
    s->len = calloc(s->n + 1, sizeof *s->len);
    s->total = s->owned = 0;
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    for (size_t i = 0; i < nranks; i++)
        for (size_t t = 0; t < nt; t++) {
            size_t bytes;
            ptc_shard sh;
            if (ptc_ckpt_local_bytes(l, t, ranks[i], &bytes) ||
                ptc_layout_shard(l, t, ranks[i], &sh))
                die("layout");
            if (!bytes)
                continue;
            uint8_t *p = malloc(bytes);
            if (!p)
                die("out of memory");
            if (fill) {
                uint64_t *w = (uint64_t *)p;
                for (size_t k = 0; k < bytes / 8; k++) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    w[k] = x;
                }
            }
            s->b[i * nt + t] = p;
            s->len[i * nt + t] = bytes;
            s->total += bytes;
            if (sh.owner == ranks[i])
                s->owned += bytes;
        }
}

static void bufs_free(bufset *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->b[i]);
    free(s->b);
    free(s->len);
}

static double barrier_time(double t0)
{
    MPI_Barrier(MPI_COMM_WORLD);
    return bench_now() - t0;
}

/* ---- the baselines ------------------------------------------------------------- */

/* pwrite + fsync of @p want bytes taken from the buffers into one file. */
static double plain_write(const char *path, const bufset *s, const ptc_layout *l,
                          const int *ranks, size_t nranks)
{
    size_t nt = ptc_layout_count(l);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        die(path);
    uint64_t off = 0;
    for (size_t i = 0; i < nranks; i++)
        for (size_t t = 0; t < nt; t++) {
            ptc_shard sh;
            ptc_layout_shard(l, t, ranks[i], &sh);
            size_t len = s->len[i * nt + t];
            if (!len || sh.owner != ranks[i])
                continue; /* a replica: stored once, by its owner */
            for (size_t a = 0; a < len; a += IO_CHUNK) {
                size_t n = len - a < IO_CHUNK ? len - a : IO_CHUNK;
                if (pwrite(fd, s->b[i * nt + t] + a, n, (off_t)off) != (ssize_t)n)
                    die("pwrite");
                off += n;
            }
        }
    if (fsync(fd) != 0)
        die("fsync");
    close(fd);
    return barrier_time(t0);
}

/* pread of @p want bytes of a plain file into the buffers, in order. */
static double plain_read(const char *path, const bufset *s)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        die(path);
    uint64_t off = 0;
    for (size_t i = 0; i < s->n; i++)
        for (size_t a = 0; a < s->len[i]; a += IO_CHUNK) {
            size_t n = s->len[i] - a < IO_CHUNK ? s->len[i] - a : IO_CHUNK;
            if (pread(fd, s->b[i] + a, n, (off_t)off) != (ssize_t)n)
                die("pread");
            off += n;
        }
    close(fd);
    return barrier_time(t0);
}

/* ---- main ------------------------------------------------------------------------- */

static double max_all(double v)
{
    double m;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static double sum_all(double v)
{
    double m;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return m;
}

/* The reuse check by itself: every process reads back and checks, one
 * shard after another, the shards of version @p v its ranks store (what an
 * unchanged save does before it references them, on one thread). */
static double check_alone(ptc_store *s, uint64_t v, const ptc_layout *l, const int *ranks,
                          size_t nr, const bufset *tmp)
{
    ptc_store_reader *rd;
    if (ptc_store_reader_open(&rd, s, v))
        die("reader");
    size_t nt = ptc_layout_count(l);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = bench_now();
    for (size_t i = 0; i < nr; i++)
        for (size_t t = 0; t < nt; t++) {
            ptc_shard sh;
            size_t idx;
            const char *name = ptc_layout_tensor(l, t)->name;
            if (!tmp->len[i * nt + t] || ptc_layout_shard(l, t, ranks[i], &sh) ||
                sh.owner != ranks[i])
                continue;
            if (ptc_store_reader_find(rd, name, strlen(name), &idx) ||
                ptc_store_reader_read_shard(rd, idx, (uint32_t)ranks[i], tmp->b[i * nt + t],
                                            tmp->len[i * nt + t]))
                die("read back");
        }
    double t = barrier_time(t0);
    ptc_store_reader_close(rd);
    return t;
}

/* Resume version @p v of @p s under @p load_cfg against pread of as many
 * bytes from a plain file, cold and warm, @p reps times alternating; prints
 * the medians, the bytes read and the peak memory (process 0). */
static void bench_resume(ptc_store *s, uint64_t v, const model *m, const ptc_rules *rules,
                         const char *save_cfg, const char *load_cfg, const char *plain,
                         const char *sdir, const ptc_ckpt_options *o, int reps)
{
    ptc_config lc;
    ptc_layout *ll;
    if (ptc_config_parse(&lc, load_cfg) || ptc_layout_create(&ll, m->ti, m->nt, rules, &lc))
        die("load layout");
    int lr[4096];
    size_t nlr = my_ranks(ll, lr);
    bufset dst;
    bufs_alloc(&dst, ll, lr, nlr, false);
    /* the plain file each process reads: as many bytes as it needs */
    {
        int fd = open(plain, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        uint8_t *z = calloc(1, IO_CHUNK);
        for (size_t a = 0; fd >= 0 && z && a < dst.total; a += IO_CHUNK) {
            size_t n = dst.total - a < IO_CHUNK ? dst.total - a : IO_CHUNK;
            memset(z, (int)(a >> 20), n);
            if (pwrite(fd, z, n, (off_t)a) != (ssize_t)n)
                die("pwrite");
        }
        free(z);
        if (fd < 0 || fsync(fd) != 0)
            die("plain file");
        close(fd);
    }
    double need = sum_all((double)dst.total);
    double tl_cold[32], tp_cold[32], tl_warm[32], tp_warm[32], rss = 0, rchar = 0;
    for (int k = 0; k < reps; k++) {
        for (int j = 0; j < 2; j++) {
            if ((j == 0) == (k % 2 == 0)) {
                drop_file(plain);
                tp_cold[k] = plain_read(plain, &dst);
                tp_warm[k] = plain_read(plain, &dst);
            } else {
                if (me == 0)
                    drop_tree(sdir);
                MPI_Barrier(MPI_COMM_WORLD);
                reset_peak();
                long long r0 = io_rchar();
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = bench_now();
                if (ptc_ckpt_load(s, v, ll, lr, nlr, (void *const *)dst.b, o,
                                  MPI_COMM_WORLD, NULL, NULL))
                    die("load");
                tl_cold[k] = barrier_time(t0);
                rchar = (double)(io_rchar() - r0);
                double over = max_all((double)bench_status_kib("VmHWM:") * 1024.0 -
                                      (double)dst.total);
                rss = over > rss ? over : rss;
                t0 = bench_now();
                if (ptc_ckpt_load(s, v, ll, lr, nlr, (void *const *)dst.b, o,
                                  MPI_COMM_WORLD, NULL, NULL))
                    die("load");
                tl_warm[k] = barrier_time(t0);
            }
        }
    }
    double read_all = sum_all(rchar);
    double lc_ = median(tl_cold, reps), pc_ = median(tp_cold, reps);
    double lw_ = median(tl_warm, reps), pw_ = median(tp_warm, reps);
    if (me == 0) {
        printf("resume %s -> %s on %d processes: %.3f GiB of destination buffers\n", save_cfg,
               load_cfg, np, need / (1 << 30));
        printf("  cold: load %.3f s, pread %.3f s, ratio %.3f (goal <= 1.5)\n", lc_, pc_,
               lc_ / pc_);
        printf("  warm: load %.3f s, pread %.3f s, ratio %.3f (page cache)\n", lw_, pw_,
               lw_ / pw_);
        printf("  bytes read by the load: %.3f GiB = %.2f x the bytes needed\n",
               read_all / (1 << 30), read_all / need);
        printf("  peak RSS above the destination buffers (worst process): %.1f MiB "
               "(bound 64 MiB)\n",
               rss / (1 << 20));
    }
    bufs_free(&dst);
    ptc_layout_destroy(ll);
    unlink(plain);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const char *dir = "/tmp", *save_cfg = "dp=2,tp=2,zero=1";
    const char *load_cfgs[8];
    int nload = 0, layers = 6, reps = 3, threads = 0;
    int64_t hidden = 1024, ffn = 4096, vocab = 8192;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--layers"))
            layers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--hidden"))
            hidden = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--ffn"))
            ffn = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--vocab"))
            vocab = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--save-config"))
            save_cfg = argv[i + 1];
        else if (!strcmp(argv[i], "--load-config") && nload < 8)
            load_cfgs[nload++] = argv[i + 1];
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
    }
    if (nload == 0) {
        load_cfgs[nload++] = "dp=4,zero=1";
        load_cfgs[nload++] = "tp=4";
    }
    if (reps < 1 || reps > 32)
        reps = 3;

    char base[4096], sdir[4200], plain[4200];
    snprintf(base, sizeof base, "%s/bench_ckpt.%d", dir, (int)getpid());
    MPI_Bcast(base, sizeof base, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(sdir, sizeof sdir, "%s/store", base);
    snprintf(plain, sizeof plain, "%s/plain-%d", base, me);
    if (me == 0 && mkdir(base, 0755) != 0)
        die(base);
    MPI_Barrier(MPI_COMM_WORLD);

    model *m = calloc(1, sizeof *m);
    model_init(m, layers, hidden, ffn, vocab);
    ptc_rules *rules;
    ptc_config cfg;
    ptc_layout *ls;
    if (ptc_rules_load(&rules, "llama") || ptc_config_parse(&cfg, save_cfg) ||
        ptc_layout_create(&ls, m->ti, m->nt, rules, &cfg))
        die("save layout");
    ptc_store *s;
    if (ptc_store_open(&s, sdir, PTC_STORE_CREATE))
        die("store");
    int ranks[4096];
    size_t nr = my_ranks(ls, ranks);
    bufset src;
    bufs_alloc(&src, ls, ranks, nr, true);
    double state = sum_all((double)src.owned);
    if (me == 0)
        printf("model: %zu tensors (fp32 params + exp_avg + exp_avg_sq), %d layers, hidden %lld;"
               " save config %s on %d processes; %.3f GiB of training state stored\n",
               m->nt, layers, (long long)hidden, save_cfg, np, state / (1 << 30));

    ptc_ckpt_options o;
    ptc_ckpt_options_init(&o);
    o.threads = threads;
    ptc_ckpt_record rec = {.step = 1, .schedule = "1f1b", .seed = 1, .global_batch = 64};

    /* 1. save vs pwrite + fsync */
    double t_save[32], t_plain[32];
    uint64_t v = 0;
    for (int k = 0; k < reps; k++) {
        for (int j = 0; j < 2; j++) {
            if ((j == 0) == (k % 2 == 0)) {
                t_plain[k] = plain_write(plain, &src, ls, ranks, nr);
                drop_file(plain);
                unlink(plain);
            } else {
                o.parent = 0;
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = bench_now();
                if (ptc_ckpt_save(s, ls, rules, ranks, nr, (const void *const *)src.b, &rec, &o,
                                  MPI_COMM_WORLD, &v))
                    die("save");
                t_save[k] = barrier_time(t0);
                if (me == 0 && k + 1 < reps) {
                    if (ptc_store_version_delete(s, v) || ptc_store_gc(s, NULL))
                        die("delete");
                }
                MPI_Barrier(MPI_COMM_WORLD);
            }
        }
    }
    double ms = median(t_save, reps), mp = median(t_plain, reps);
    if (me == 0) {
        printf("save      %8.3f s  %6.2f GB/s   (median of %d)\n", ms, state / ms / 1e9, reps);
        printf("pwrite    %8.3f s  %6.2f GB/s   pwrite+fsync of the same bytes, same processes\n",
               mp, state / mp / 1e9);
        printf("ratio save / pwrite+fsync = %.3f (goal <= 1.3)\n", ms / mp);
    }

    /* a save with the parent: every shard changed (first element), then
     * nothing changed: every shard referenced, each referenced extent read
     * back and checked first (issue 33); medians over the repetitions */
    o.parent = PTC_CKPT_PARENT_LATEST;
    double t_ch[32], t_sm[32], t_ck[32];
    bufset tmp;
    bufs_alloc(&tmp, ls, ranks, nr, false);
    for (int k = 0; k < reps; k++) {
        for (size_t i = 0; i < src.n; i++)
            if (src.len[i])
                src.b[i][0] ^= 0x5a;
        rec.step = 2 + 2 * (uint64_t)k;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = bench_now();
        if (ptc_ckpt_save(s, ls, rules, ranks, nr, (const void *const *)src.b, &rec, &o,
                          MPI_COMM_WORLD, &v))
            die("save with parent");
        t_ch[k] = barrier_time(t0);
        rec.step++;
        t0 = bench_now();
        if (ptc_ckpt_save(s, ls, rules, ranks, nr, (const void *const *)src.b, &rec, &o,
                          MPI_COMM_WORLD, &v))
            die("unchanged save");
        t_sm[k] = barrier_time(t0);
        t_ck[k] = check_alone(s, v - 1, ls, ranks, nr, &tmp); /* the parent it checked */
    }
    bufs_free(&tmp);
    double t_changed = median(t_ch, reps), t_same = median(t_sm, reps);
    double t_check = median(t_ck, reps);
    if (me == 0) {
        ptc_store_reader *rd;
        if (ptc_store_reader_open(&rd, s, v))
            die("reader");
        printf("save, parent given, every shard changed: %.3f s (ratio %.3f to pwrite+fsync)\n",
               t_changed, t_changed / mp);
        printf("save, parent given, nothing changed:     %.3f s, %llu bytes written (all "
               "referenced; %.3f GiB of extents read back and checked, %.2f GB/s)\n",
               t_same, (unsigned long long)ptc_store_reader_version(rd)->stored_bytes,
               state / (1 << 30), state / t_same / 1e9);
        printf("  the reuse check alone (read back and checked, one thread per process): "
               "%.3f s; the unchanged save without it %.3f s; ratio with / without %.2f\n",
               t_check, t_same - t_check, t_same / (t_same - t_check));
        ptc_store_reader_close(rd);
    }
    bufs_free(&src);

    /* 2. resume under other configurations vs pread */
    for (int c = 0; c < nload; c++)
        bench_resume(s, v, m, rules, save_cfg, load_cfgs[c], plain, sdir, &o, reps);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double maxrss = max_all((double)ru.ru_maxrss * 1024.0);
    if (me == 0)
        printf("getrusage peak RSS of the whole run (save buffers included), worst process: "
               "%.1f MiB\n", maxrss / (1 << 20));
    ptc_store_close(s);
    ptc_layout_destroy(ls);
    ptc_rules_destroy(rules);
    free(m);
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) {
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
        if (system(cmd) != 0)
            fprintf(stderr, "warning: could not remove %s\n", base);
    }
    MPI_Finalize();
    return 0;
}
