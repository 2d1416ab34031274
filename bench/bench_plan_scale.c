/* Planner scale: plan time and peak memory from 512 to 131,072 ranks.
 *
 *   bench_plan_scale [--max-ranks N] [--ref-max N] [--proc-max N]
 *
 * Models: a 1T-parameter GPT (gpt:layers=128,hidden=25600,heads=160,
 * vocab=51200,seq=2048; 1,541 BF16 tensors) from dp=6,tp=8,pp=64 (3,072
 * ranks) to tp=8,pp=32 with dp 2..512 (512..131,072 ranks) and to
 * dp=12,tp=8,pp=32; and an MoE-shaped model of many small tensors (96
 * layers x 64 experts x 3 matrices, hidden 2048, expert width 1408; 18,915
 * tensors) from dp=4,tp=8,pp=32 to the same targets. Ranks are packed 8 per
 * host. Each case runs in a child process (fork), so its peak RSS is its
 * own (layouts, plan, everything); the plan keeps the figures only, as
 * `ptc plan` does. Prints per case the plan's CPU time (the planner runs on
 * one thread: its time on one core, robust to a loaded machine), its wall
 * time and the peak RSS; then per model the exponent of CPU time ~ ranks^k
 * fitted (least squares on logs) over the cases from 8,192 ranks up.
 * Goals: k <= 1.15, and the 1T model to ~100k ranks (98,304 and 131,072)
 * in <= 2 s of CPU and <= 1 GiB.
 *
 * --ref-max N (default 2048): also time the all-pairs planner the library
 * had before (tests/unit/plan_ref.h) on the cases up to N ranks, in the
 * same run, and check it gives the same figures.
 *
 * Per-process plans (the online resize simulated in one process: every
 * rank its own process, all on one host, as ptc_exec_resize plans by
 * default): the 1T model from dp=D,tp=8,pp=64 to dp=2D for D = 1..128
 * (1,024 .. 131,072 ranks); what one process computes before the resize's
 * all-reduce (its per-process plan and the bytes it moves per tensor; the
 * median over processes 0, W/2 and W-1) should stay flat as W grows. The
 * whole plan's time (what every process paid before) is printed beside it.
 * --proc-max N bounds that world (default 131072).
 *
 * Exits 1 if a goal is missed. Numbers from a shared machine are noisy:
 * run it three times. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ptc/plan.h"
#include "ptc/search_store.h"
#include "tests/unit/plan_ref.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of this thread: the time on one core, whatever else runs on
 * the machine (the goals are per core; wall time is printed too). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the models ----------------------------------------------------------------- */

typedef struct model {
    ptc_tensor_info *t;
    size_t n;
    const ptc_rules *rules;
    ptc_rules *own_rules;
    ptc_search_tensors *st;
    char *names;
} model;

static int gpt_1t(model *m)
{
    memset(m, 0, sizeof *m);
    ptc_search_spec spec;
    ptc_cost_model *cm;
    if (ptc_search_spec_parse(&spec, "gpt:layers=128,hidden=25600,heads=160,vocab=51200,"
                                     "seq=2048") != PTC_OK ||
        ptc_cost_model_from_spec(&cm, &spec) != PTC_OK)
        return -1;
    int rc = ptc_search_tensors_create(&m->st, cm, false);
    ptc_cost_model_destroy(cm);
    if (rc != PTC_OK)
        return -1;
    m->t = (ptc_tensor_info *)ptc_search_tensors_list(m->st, &m->n);
    m->rules = ptc_search_tensors_rules(m->st);
    return 0;
}

static const char moe_rules[] =
    "layer layers.{L}.\n"
    "match embed tp=split(0) pp=first\n"
    "match head tp=split(0) pp=last\n"
    "match final_norm tp=replicate pp=last\n"
    "match *.qkv tp=split(0,blocks=3)\n"
    "match *.proj tp=split(1)\n"
    "match *.norm1 tp=replicate\n"
    "match *.norm2 tp=replicate\n"
    "match *.router tp=replicate\n"
    "match *.w1 tp=split(0)\n"
    "match *.w3 tp=split(0)\n"
    "match *.w2 tp=split(1)\n";

static int moe(model *m)
{
    memset(m, 0, sizeof *m);
    const int L = 96, E = 64;
    const int64_t H = 2048, F = 1408, V = 32000;
    size_t cap = (size_t)L * (5 + 3 * E) + 3;
    m->t = calloc(cap, sizeof *m->t);
    m->names = malloc(cap * 48);
    if (!m->t || !m->names)
        return -1;
#define ADD(nd, a, b, ...)                                                                    \
    do {                                                                                      \
        char *nm = m->names + m->n * 48;                                                      \
        snprintf(nm, 48, __VA_ARGS__);                                                        \
        m->t[m->n] = (ptc_tensor_info){.name = nm, .dtype = PTC_DTYPE_BF16, .ndim = nd,        \
                                       .shape = {a, b}};                                      \
        m->n++;                                                                               \
    } while (0)
    ADD(2, V, H, "embed");
    for (int l = 0; l < L; l++) {
        ADD(1, H, 0, "layers.%d.norm1", l);
        ADD(2, 3 * H, H, "layers.%d.qkv", l);
        ADD(2, H, H, "layers.%d.proj", l);
        ADD(1, H, 0, "layers.%d.norm2", l);
        ADD(2, E, H, "layers.%d.router", l);
        for (int e = 0; e < E; e++) {
            ADD(2, F, H, "layers.%d.experts.%d.w1", l, e);
            ADD(2, H, F, "layers.%d.experts.%d.w2", l, e);
            ADD(2, F, H, "layers.%d.experts.%d.w3", l, e);
        }
    }
    ADD(1, H, 0, "final_norm");
    ADD(2, V, H, "head");
#undef ADD
    if (ptc_rules_parse(&m->own_rules, moe_rules, strlen(moe_rules), "moe") != PTC_OK)
        return -1;
    m->rules = m->own_rules;
    return 0;
}

static void model_free(model *m)
{
    if (m->st)
        ptc_search_tensors_destroy(m->st);
    else
        free(m->t);
    free(m->names);
    ptc_rules_destroy(m->own_rules);
}

/* ---- one case in a child process ---------------------------------------------------- */

typedef struct result {
    int ok;
    double seconds, ref_seconds, cpu, ref_cpu;
    int ref_same;         /* 1 same figures, 0 differ, -1 not run */
    ptc_plan_stats st;
    long rss_kb, ref_rss_kb;
} result;

static void same_figures(const ptc_plan_stats *a, const ptc_plan_stats *b, int *same)
{
    const uint64_t x[] = {a->bytes_total, a->bytes_reused, a->bytes_local_copy, a->bytes_network,
                          a->bytes_network_lower_bound, a->max_rank_send, a->max_rank_recv,
                          a->bytes_host_copy, a->bytes_fanout, a->tensors, a->shards,
                          a->shards_reused, a->transfers, (uint64_t)a->hosts};
    const uint64_t y[] = {b->bytes_total, b->bytes_reused, b->bytes_local_copy, b->bytes_network,
                          b->bytes_network_lower_bound, b->max_rank_send, b->max_rank_recv,
                          b->bytes_host_copy, b->bytes_fanout, b->tensors, b->shards,
                          b->shards_reused, b->transfers, (uint64_t)b->hosts};
    *same = memcmp(x, y, sizeof x) == 0;
}

/* The plan (or with @p ref the all-pairs planner's) of one case. */
static void child(const model *m, const char *from, const char *to, bool ref, int fd)
{
    result r = {.ref_same = -1};
    ptc_config a, b;
    ptc_layout *ls = NULL, *lt = NULL;
    ptc_plan *p = NULL;
    ptc_plan_options o = {.hosts = 8, .figures_only = true};
    if (ptc_config_parse(&a, from) == PTC_OK && ptc_config_parse(&b, to) == PTC_OK &&
        ptc_layout_create(&ls, m->t, m->n, m->rules, &a) == PTC_OK &&
        ptc_layout_create(&lt, m->t, m->n, m->rules, &b) == PTC_OK) {
        double t0 = now_s(), c0 = cpu_s();
        ref_plan *q;
        ptc_plan_options ro = {.hosts = 8};
        if (ref && ref_plan_create(&q, ls, lt, &ro) == PTC_OK) {
            r.seconds = now_s() - t0;
            r.cpu = cpu_s() - c0;
            ref_plan_stats_get(q, &r.st);
            ref_plan_destroy(q);
            r.ok = 1;
        } else if (!ref && ptc_plan_create(&p, ls, lt, &o) == PTC_OK) {
            r.seconds = now_s() - t0;
            r.cpu = cpu_s() - c0;
            ptc_plan_stats_get(p, &r.st);
            r.ok = 1;
        }
    }
    if (!r.ok)
        fprintf(stderr, "%s -> %s: %s\n", from, to, ptc_last_error());
    ptc_plan_destroy(p);
    ptc_layout_destroy(ls);
    ptc_layout_destroy(lt);
    if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(2);
    _exit(0);
}

static result run_one(const model *m, const char *from, const char *to, bool ref)
{
    result r = {0};
    int fds[2];
    if (pipe(fds) != 0)
        return r;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        child(m, from, to, ref, fds[1]);
    }
    close(fds[1]);
    if (read(fds[0], &r, sizeof r) != (ssize_t)sizeof r)
        r.ok = 0;
    close(fds[0]);
    int status;
    struct rusage ru;
    if (pid > 0 && wait4(pid, &status, 0, &ru) == pid)
        r.rss_kb = ru.ru_maxrss;
    return r;
}

/* The case with this planner, and with the all-pairs one when @p ref (in
 * a process of its own, so each peak RSS is its own). */
static result run_case(const model *m, const char *from, const char *to, bool ref)
{
    result r = run_one(m, from, to, false);
    r.ref_same = -1;
    if (r.ok && ref) {
        result q = run_one(m, from, to, true);
        if (q.ok) {
            r.ref_seconds = q.seconds;
            r.ref_cpu = q.cpu;
            r.ref_rss_kb = q.rss_kb;
            same_figures(&q.st, &r.st, &r.ref_same);
        }
    }
    return r;
}

/* ---- fits and cases -------------------------------------------------------------------- */

/* least-squares slope of log(y) over log(x) */
static double exponent(const double *x, const double *y, int n)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double a = log(x[i]), b = log(y[i]);
        sx += a;
        sy += b;
        sxx += a * a;
        sxy += a * b;
    }
    return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

static int sweep(const char *title, const model *m, const char *from, int max_ranks, int ref_max)
{
    static const int dps[] = {2, 8, 12, 32, 128, 384, 512};
    double xs[16], ys[16];
    int nfit = 0, fails = 0;
    printf("\n%s: %zu tensors, from %s, 8 ranks per host\n", title, m->n, from);
    printf("%-20s %7s %8s %8s %8s %14s %15s %9s %9s %10s %s\n", "to", "ranks", "cpu_s",
           "wall_s", "peak_MiB", "bytes_network", "max_rank_send", "before_s", "before_cpu",
           "before_MiB", "goal");
    for (size_t i = 0; i < sizeof dps / sizeof dps[0]; i++) {
        char to[64];
        int ranks = dps[i] * 8 * 32;
        if (ranks > max_ranks)
            break;
        snprintf(to, sizeof to, "dp=%d,tp=8,pp=32", dps[i]);
        result r = run_case(m, from, to, ranks <= ref_max);
        if (!r.ok) {
            printf("%-22s %8d  failed\n", to, ranks);
            fails++;
            continue;
        }
        bool big = ranks >= 98304 && m->st;
        bool ok = !big || (r.cpu <= 2.0 && r.rss_kb <= 1024 * 1024);
        if (r.ref_same == 0)
            ok = false;
        fails += !ok;
        char before[32] = "-", before_cpu[32] = "-", before_mib[32] = "-";
        if (r.ref_same >= 0) {
            snprintf(before, sizeof before, "%.3f%s", r.ref_seconds, r.ref_same ? "" : "!");
            snprintf(before_cpu, sizeof before_cpu, "%.3f", r.ref_cpu);
            snprintf(before_mib, sizeof before_mib, "%.1f", r.ref_rss_kb / 1024.0);
        }
        printf("%-20s %7d %8.3f %8.3f %8.1f %14llu %15llu %9s %9s %10s %s\n", to, ranks, r.cpu,
               r.seconds, r.rss_kb / 1024.0, (unsigned long long)r.st.bytes_network,
               (unsigned long long)r.st.max_rank_send, before, before_cpu, before_mib,
               big ? (ok ? "PASS (<= 2 s, <= 1 GiB)" : "FAIL (<= 2 s, <= 1 GiB)")
                   : (r.ref_same == 0 ? "FAIL (figures differ)" : ""));
        if (ranks >= 8192 && dps[i] != 12) {
            xs[nfit] = ranks;
            ys[nfit] = r.cpu;
            nfit++;
        }
    }
    if (nfit >= 2) {
        double k = exponent(xs, ys, nfit);
        bool ok = k <= 1.15;
        fails += !ok;
        printf("fitted exponent (cpu time ~ ranks^k, %d cases from 8192 ranks): k = %.3f  %s\n",
               nfit, k, ok ? "PASS (<= 1.15)" : "FAIL (> 1.15)");
    }
    return fails;
}

/* ---- per-process plans ------------------------------------------------------------------ */

/* What ptc_exec_resize_owned computes on one process before its one
 * all-reduce: its per-process plan and what it moves per tensor. */
static double proc_plan_seconds(const ptc_layout *ls, const ptc_layout *lt, const int *own,
                                int me, uint64_t *moved)
{
    ptc_plan_options o = {.src_proc = own, .dst_proc = own, .proc = me};
    ptc_plan *p;
    double t0 = cpu_s();
    if (ptc_plan_create(&p, ls, lt, &o) != PTC_OK) {
        fprintf(stderr, "per-process plan: %s\n", ptc_last_error());
        return -1;
    }
    size_t nx, nt = ptc_layout_count(lt);
    const ptc_transfer *x = ptc_plan_transfers(p, &nx);
    uint64_t *tin = calloc(nt + 1, sizeof *tin);
    for (size_t i = 0; i < nx; i++)
        if (own[x[i].src_rank] != own[x[i].dst_rank])
            tin[x[i].tensor] += (uint64_t)ptc_box_volume(&x[i].box) *
                                ptc_dtype_size(ptc_layout_tensor(lt, x[i].tensor)->dtype);
    double s = cpu_s() - t0;
    *moved = 0;
    for (size_t t = 0; t < nt; t++)
        *moved += tin[t];
    free(tin);
    ptc_plan_destroy(p);
    return s;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int per_process(const model *m, int max_ranks)
{
    printf("\nper-process plans (the online resize: one process per rank, one host), 1T model\n");
    printf("%-20s %-20s %8s %14s %14s %14s\n", "from", "to", "ranks", "one_proc_cpu_s",
           "moved_GB(p0)", "whole_cpu_s");
    static const int ds[] = {1, 4, 16, 64, 128};
    double first = -1, last = -1;
    for (size_t k = 0; k < sizeof ds / sizeof ds[0] && ds[k] * 2 * 8 * 64 <= max_ranks; k++) {
        int d = ds[k];
        char from[64], to[64];
        snprintf(from, sizeof from, "dp=%d,tp=8,pp=64", d);
        snprintf(to, sizeof to, "dp=%d,tp=8,pp=64", 2 * d);
        ptc_config a, b;
        ptc_layout *ls = NULL, *lt = NULL;
        ptc_config_parse(&a, from);
        ptc_config_parse(&b, to);
        if (ptc_layout_create(&ls, m->t, m->n, m->rules, &a) != PTC_OK ||
            ptc_layout_create(&lt, m->t, m->n, m->rules, &b) != PTC_OK)
            return 1;
        int w = ptc_config_world(&b);
        int *own = malloc(sizeof(int) * (size_t)w);
        for (int r = 0; r < w; r++)
            own[r] = r;
        int procs[3] = {0, w / 2, w - 1};
        double s[3];
        uint64_t moved[3];
        for (int i = 0; i < 3; i++)
            s[i] = proc_plan_seconds(ls, lt, own, procs[i], &moved[i]);
        qsort(s, 3, sizeof *s, cmp_d);
        /* what every process paid before: the whole plan (its figures) */
        ptc_plan *p;
        ptc_plan_options o = {.figures_only = true};
        double t0 = cpu_s();
        if (ptc_plan_create(&p, ls, lt, &o) != PTC_OK)
            return 1;
        double whole = cpu_s() - t0;
        ptc_plan_destroy(p);
        printf("%-20s %-20s %8d %14.4f %14.3f %14.3f\n", from, to, w, s[1], moved[0] / 1e9,
               whole);
        if (first < 0)
            first = s[1];
        last = s[1];
        free(own);
        ptc_layout_destroy(ls);
        ptc_layout_destroy(lt);
    }
    bool flat = last <= 2 * first + 0.01;
    printf("one process, largest world / smallest: %.2fx  %s\n", first > 0 ? last / first : 0,
           flat ? "PASS (flat: <= 2x + 10 ms)" : "FAIL (grows with the world)");
    return !flat;
}

int main(int argc, char **argv)
{
    int max_ranks = 131072, ref_max = 2048, proc_max = 131072;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-ranks"))
            max_ranks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ref-max"))
            ref_max = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--proc-max"))
            proc_max = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_plan_scale [--max-ranks N] [--ref-max N] "
                            "[--proc-max N]\n");
            return 2;
        }
    }
    model g, e;
    if (gpt_1t(&g) || moe(&e)) {
        fprintf(stderr, "models: %s\n", ptc_last_error());
        return 2;
    }
    int fails = sweep("1T GPT", &g, "dp=6,tp=8,pp=64", max_ranks, ref_max);
    fails += sweep("MoE 96 layers x 64 experts", &e, "dp=4,tp=8,pp=32", max_ranks, ref_max);
    fails += per_process(&g, proc_max);
    model_free(&g);
    model_free(&e);
    return fails ? 1 : 0;
}
