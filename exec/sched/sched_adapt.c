/* Adaptive kFkB: k chosen by simulating the candidates under the given
 * costs and links (docs/schedule-format.md). */
#include <math.h>

#include "exec/sched/sched_internal.h"

int ptc_sched_adapt_kfkb(ptc_sched **out, ptc_sched_adaptive *a, const ptc_sched_costs *c)
{
    *out = NULL;
    PTC_TRY(sched_costs_check(c));
    int M = a->microbatches;
    if (M < 1 || a->ranks < 1)
        return ptc_error_set(PTC_E_INVAL, "adaptive kfkb needs ranks and microbatches >= 1");
    ptc_sched *best = NULL;
    double best_t = INFINITY, best_peak = INFINITY;
    a->candidates = 0;
    a->chosen_k = 0;
    int last = 0;
    for (int step = 0;; step++) {
        /* 1..8, then powers of two, then M: increasing, no repeats. */
        int k = step < 8 ? step + 1 : 1 << (step - 4);
        if (k >= M || step > 40)
            k = M;
        if (k <= last)
            break;
        last = k;
        ptc_sched_gen g = {.kind = PTC_SCHED_KFKB, .ranks = a->ranks, .microbatches = M,
                           .chunks = 1, .k = k};
        ptc_sched *s;
        ptc_sched_sim *sim;
        int rc = ptc_sched_generate(&s, &g);
        if (rc) {
            ptc_sched_destroy(best);
            return rc;
        }
        if ((rc = ptc_sched_simulate(s, c, &sim))) {
            ptc_sched_destroy(s);
            ptc_sched_destroy(best);
            return rc;
        }
        a->candidates++;
        double peak = 0;
        for (int r = 0; r < a->ranks; r++)
            peak = fmax(peak, ptc_sched_sim_peak(sim, r));
        double t = ptc_sched_sim_makespan(sim);
        ptc_sched_sim_destroy(sim);
        bool fits = a->mem_limit <= 0 || peak <= a->mem_limit + 1e-9;
        /* Strictly better by a relative margin, so ties keep the smaller k. */
        if (fits && t < best_t * (1 - 1e-12)) {
            ptc_sched_destroy(best);
            best = s;
            best_t = t;
            best_peak = peak;
            a->chosen_k = k;
        } else {
            ptc_sched_destroy(s);
        }
        if (k == M)
            break;
    }
    (void)best_peak;
    if (!best)
        return ptc_error_set(PTC_E_RANGE, "no k fits the memory limit %g", a->mem_limit);
    a->makespan = best_t;
    *out = best;
    return PTC_OK;
}
