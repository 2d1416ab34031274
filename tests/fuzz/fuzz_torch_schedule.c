/* libFuzzer target for torch.distributed.pipelining's action lists
 * (ptc_sched_from_torch): parse; if accepted, validate; a valid schedule
 * written back in either form (compute only, compute and communication)
 * must read back equal, and is simulated. */
#include <stdint.h>
#include <stdlib.h>

#include "ptc/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void roundtrip(const ptc_sched *s, int form)
{
    char *t;
    size_t n, skipped;
    if (ptc_sched_to_torch(s, form, &t, &n) != PTC_OK)
        return;
    ptc_sched *p;
    if (ptc_sched_from_torch(&p, t, n, 0, &skipped) != PTC_OK || !ptc_sched_equal(s, p))
        abort(); /* write/read must round-trip */
    if ((form == PTC_SCHED_TORCH_COMPUTE) != (skipped == 0))
        abort(); /* only the communication form (REDUCE_GRAD...) has actions to skip */
    ptc_sched_destroy(p);
    ptc_sched_text_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_sched *s;
    size_t skipped;
    if (ptc_sched_from_torch(&s, (const char *)data, size, 0, &skipped) != PTC_OK)
        return 0;
    if (ptc_sched_validate(s, NULL) == PTC_OK) {
        roundtrip(s, PTC_SCHED_TORCH_COMPUTE);
        roundtrip(s, PTC_SCHED_TORCH_COMMS);
        ptc_sched_costs c;
        ptc_sched_costs_init(&c);
        c.latency = 0.5;
        ptc_sched_sim *sim;
        if (ptc_sched_simulate(s, &c, &sim) == PTC_OK)
            ptc_sched_sim_destroy(sim);
    }
    ptc_sched_destroy(s);
    return 0;
}
