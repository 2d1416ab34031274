/* The configuration rule of ptc elastic (include/ptc/elastic.h). A rule, not
 * the configuration search: a restart wants a choice that is predictable
 * from the slots alone and keeps what the user fixed (docs/elastic.md). */
#include <string.h>

#include "ptc/elastic.h"

static int usable_slots(const int *slots, size_t n, int tp, int *usable)
{
    int total = 0;
    for (size_t i = 0; i < n; i++) {
        int u = slots[i] / tp * tp;
        if (usable)
            usable[i] = u;
        total += u;
    }
    return total;
}

int ptc_elastic_pick(ptc_config *out, int *usable, const int *slots, size_t nhosts,
                     const ptc_elastic_want *w)
{
    if (!out || !slots || !w || nhosts == 0)
        return ptc_error_set(PTC_E_INVAL, "elastic: no hosts");
    if (w->layers < 1 || w->tp < 0 || w->pp < 0 || w->hidden < 0 || w->microbatches < 0)
        return ptc_error_set(PTC_E_INVAL, "elastic: layers >= 1 and degrees >= 0 expected");
    long total = 0;
    for (size_t i = 0; i < nhosts; i++) {
        if (slots[i] < 0 || slots[i] > PTC_CONFIG_MAX_WORLD)
            return ptc_error_set(PTC_E_INVAL, "elastic: host %zu has %d slots", i, slots[i]);
        total += slots[i];
    }
    if (total == 0)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: no slot is available");
    if (total > PTC_CONFIG_MAX_WORLD)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: %ld slots is over %d", total,
                             PTC_CONFIG_MAX_WORLD);
    /* 1. tp within a host */
    int tp = w->tp;
    if (tp == 0) {
        int pmin = w->pp > 0 ? w->pp : 1;
        for (tp = 8; tp > 1; tp /= 2) {
            bool ok = w->hidden == 0 || w->hidden % tp == 0;
            for (size_t i = 0; ok && i < nhosts; i++)
                ok = slots[i] % tp == 0;
            if (ok && (long)usable_slots(slots, nhosts, tp, NULL) >= (long)tp * pmin)
                break;
        }
    }
    int S = usable_slots(slots, nhosts, tp, usable);
    if (S == 0)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: tp=%d is more than the slots "
                                           "of every host (%ld slots in all)", tp, total);
    /* 2. pp divides the layers */
    int pp = w->pp;
    if (pp > w->layers)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: pp=%d is more than the "
                                           "model's %d layers", pp, w->layers);
    if (pp == 0) {
        /* the divisor that leaves the fewest slots idle; on a tie the larger */
        int best_used = -1;
        pp = 1;
        for (int p = 1; p <= w->layers; p++) {
            if (w->layers % p || (w->microbatches > 0 && p > w->microbatches) ||
                (long)tp * p > S)
                continue;
            int used = S / (tp * p) * (tp * p);
            if (used >= best_used) {
                best_used = used;
                pp = p;
            }
        }
    }
    if ((long)tp * pp > S)
        return ptc_error_set(PTC_E_CONFIG, "no configuration fits: one replica needs tp*pp = "
                                           "%d slots, %d usable of %ld (tp groups stay within "
                                           "a host)", tp * pp, S, total);
    /* 3. the rest is dp */
    memset(out, 0, sizeof *out);
    out->tp = tp;
    out->pp = pp;
    out->dp = S / (tp * pp);
    out->zero = w->zero;
    return PTC_OK;
}
