/* Benchmark: generate, validate (with communication inference and blocking
 * execution) and simulate an interleaved schedule with P=64, M=1024, V=4.
 * Prints one JSON object; the budget is 1 s in all. */
#include <stdio.h>
#include <time.h>

#include "ptc/sched.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    (void)argv;
    int P = 64, M = 1024, V = 4;
    double t0 = now();
    ptc_sched_gen g = {PTC_SCHED_INTERLEAVED, P, M, V, 1, 1, 2, 0};
    ptc_sched *s;
    if (ptc_sched_generate(&s, &g)) {
        fprintf(stderr, "generate: %s\n", ptc_last_error());
        return 1;
    }
    double t1 = now();
    ptc_sched_report rep;
    if (ptc_sched_validate(s, &rep)) {
        fprintf(stderr, "validate: %s\n", rep.message);
        return 1;
    }
    double t2 = now();
    ptc_sched_costs c;
    ptc_sched_costs_init(&c);
    ptc_sched_sim *sim;
    if (ptc_sched_simulate(s, &c, &sim)) {
        fprintf(stderr, "simulate: %s\n", ptc_last_error());
        return 1;
    }
    double t3 = now();
    double total = t3 - t0;
    printf("{\"bench\":\"schedule\",\"kind\":\"interleaved\",\"ranks\":%d,\"microbatches\":%d,"
           "\"chunks\":%d,\"messages\":%zu,\"generate_s\":%.4f,\"validate_s\":%.4f,"
           "\"simulate_s\":%.4f,\"total_s\":%.4f,\"budget_s\":1.0,\"makespan\":%.6g,"
           "\"bubble_fraction\":%.6f,\"ok\":%s}\n",
           P, M, V, rep.messages, t1 - t0, t2 - t1, t3 - t2, total,
           ptc_sched_sim_makespan(sim), ptc_sched_sim_bubble(sim), total < 1.0 ? "true" : "false");
    ptc_sched_report_clear(&rep);
    ptc_sched_sim_destroy(sim);
    ptc_sched_destroy(s);
    return argc > 1 && total >= 1.0 ? 1 : 0; /* any argument: fail over budget */
}
