/* libFuzzer target for the schedule text format and bandwidth traces:
 * parse; if accepted, print and re-parse (must be equal), validate, and
 * simulate valid schedules. */
#include <stdint.h>
#include <stdlib.h>

#include "ptc/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_sched_bw_trace *tr = NULL;
    if (ptc_sched_bw_trace_parse(&tr, (const char *)data, size) == PTC_OK)
        ptc_sched_bw_trace_destroy(tr);
    ptc_sched *s;
    if (ptc_sched_parse(&s, (const char *)data, size) != PTC_OK)
        return 0;
    char *t;
    size_t n;
    if (ptc_sched_format(s, &t, &n) == PTC_OK) {
        ptc_sched *p;
        if (ptc_sched_parse(&p, t, n) != PTC_OK || !ptc_sched_equal(s, p))
            abort(); /* print/parse must round-trip */
        ptc_sched_destroy(p);
        ptc_sched_text_free(t);
    }
    ptc_sched_report rep;
    if (ptc_sched_validate(s, &rep) == PTC_OK) {
        ptc_sched_costs c;
        ptc_sched_costs_init(&c);
        c.latency = 0.5;
        ptc_sched_sim *sim;
        if (ptc_sched_simulate(s, &c, &sim) == PTC_OK) {
            char *svg;
            if (ptc_sched_svg(s, sim, &svg) == PTC_OK)
                ptc_sched_text_free(svg);
            ptc_sched_sim_destroy(sim);
        }
    }
    ptc_sched_report_clear(&rep);
    ptc_sched_destroy(s);
    return 0;
}
