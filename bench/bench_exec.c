/* Pipeline runtime benchmark (run under mpirun, e.g. -np 4):
 *  1. overhead per action with zero-cost fake compute (goal <= 20 us);
 *  2. measured step time vs the simulator's prediction with fake compute
 *     costs of a few ms (goal within 10 % for 1F1B, interleaved, kFkB).
 * usage: mpirun -np P bench_exec [--quick] [--unit-ms U] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/exec.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Run `steps` steps; return the median over steps of the largest (over
 * ranks) time from the step's barrier to the end of the last action. */
static int run(ptc_sched *s, const ptc_sched_costs *c, double unit, int steps, double *median,
               size_t *actions, size_t *computes)
{
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    ptc_config cfg;
    ptc_config_init(&cfg);
    cfg.pp = world;
    ptc_exec_fake *f = NULL;
    ptc_exec *e = NULL;
    ptc_exec_stage fns;
    ptc_exec_opts o;
    ptc_exec_opts_init(&o);
    o.act_bytes = 64;
    o.timeout = 60;
    int rc = ptc_exec_fake_create(&f, s, rank, c, unit, o.act_bytes);
    if (rc == PTC_OK) {
        ptc_exec_fake_stage(f, &fns);
        rc = ptc_exec_create(&e, s, &cfg, MPI_COMM_WORLD, &fns, &o);
    }
    if (rc != PTC_OK) {
        fprintf(stderr, "bench_exec: %s\n", ptc_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double *t = calloc((size_t)steps, sizeof *t);
    for (int k = 0; k < steps; k++) {
        if ((rc = ptc_exec_step(e)) != PTC_OK) {
            fprintf(stderr, "bench_exec: %s\n", ptc_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        ptc_exec_stats st;
        ptc_exec_get_stats(e, &st);
        MPI_Allreduce(&st.actions_seconds, &t[k], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    qsort(t, (size_t)steps, sizeof *t, cmp_d);
    *median = t[steps / 2];
    size_t n;
    const ptc_sched_action *a = ptc_exec_actions(e, &n);
    *actions = n;
    *computes = 0;
    for (size_t i = 0; i < n; i++)
        *computes += a[i].op <= PTC_SCHED_W;
    free(t);
    ptc_exec_destroy(e);
    ptc_exec_fake_destroy(f);
    return PTC_OK;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    bool quick = false;
    double unit_ms = 2.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--unit-ms") && i + 1 < argc)
            unit_ms = atof(argv[++i]);
    }
    int P = world;
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);

    /* 1. overhead */
    {
        ptc_sched *s = NULL;
        ptc_sched_gen g = {.kind = PTC_SCHED_1F1B, .ranks = P, .microbatches = 64};
        ptc_sched_generate(&s, &g);
        double med;
        size_t n, nc;
        run(s, &c, 0.0, quick ? 20 : 200, &med, &n, &nc);
        if (rank == 0)
            printf("overhead  1f1b P=%d M=64 zero-cost compute: step %.3f ms, %zu actions "
                   "(%zu compute) per rank: %.2f us per action, %.2f us per compute action\n",
                   P, med * 1e3, n, nc, med * 1e6 / (double)n, med * 1e6 / (double)nc);
        ptc_sched_destroy(s);
    }

    /* 2. measured vs simulated */
    struct {
        ptc_sched_kind_id kind;
        int chunks, k;
        const char *name;
    } kinds[] = {{PTC_SCHED_1F1B, 1, 1, "1f1b"},
                 {PTC_SCHED_INTERLEAVED, 2, 1, "interleaved V=2"},
                 {PTC_SCHED_KFKB, 1, 2, "kfkb k=2"},
                 {PTC_SCHED_GPIPE, 1, 1, "gpipe"},
                 {PTC_SCHED_ZBH1, 1, 1, "zb-h1"},
                 {PTC_SCHED_CHIMERA, 1, 1, "chimera"}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        if (kinds[i].kind == PTC_SCHED_CHIMERA && P < 2)
            continue;
        ptc_sched_costs cc = c;
        if (kinds[i].kind == PTC_SCHED_ZBH1)
            cc.w = 1;
        ptc_sched *s = NULL;
        ptc_sched_gen g = {.kind = kinds[i].kind, .ranks = P, .microbatches = 2 * P,
                           .chunks = kinds[i].chunks, .k = kinds[i].k, .cost_f = cc.f,
                           .cost_b = cc.b, .cost_w = cc.w};
        if (ptc_sched_generate(&s, &g) != PTC_OK)
            continue;
        ptc_sched_sim *sim = NULL;
        ptc_sched_simulate(s, &cc, &sim);
        double pred = ptc_sched_sim_makespan(sim) * unit_ms * 1e-3, med;
        size_t n, nc;
        run(s, &cc, unit_ms * 1e-3, quick ? 3 : 7, &med, &n, &nc);
        if (rank == 0)
            printf("timing    %-16s P=%d M=%d unit %.1f ms: measured %.2f ms, simulated "
                   "%.2f ms, ratio %.3f\n",
                   kinds[i].name, P, 2 * P, unit_ms, med * 1e3, pred * 1e3, med / pred);
        ptc_sched_sim_destroy(sim);
        ptc_sched_destroy(s);
    }
    MPI_Finalize();
    return 0;
}
