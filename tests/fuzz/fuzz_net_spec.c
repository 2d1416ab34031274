/* Fuzz ptc_search_net_parse (the --net links of ptc plan): any input parses
 * or fails cleanly with a message, leaves the cluster untouched on failure,
 * and a parsed result has positive finite bandwidths and non-negative
 * finite latencies. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/search_store.h"

static void check(bool ok)
{
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    ptc_search_cluster c, before;
    ptc_search_cluster_init(&c);
    before = c;
    if (ptc_search_net_parse(&c, s) == PTC_OK) {
        check(c.intra_bw > 0 && isfinite(c.intra_bw) && c.inter_bw > 0 && isfinite(c.inter_bw));
        check(c.intra_lat >= 0 && isfinite(c.intra_lat) && c.inter_lat >= 0 &&
              isfinite(c.inter_lat));
        check(c.gpus == before.gpus && c.gpus_per_host == before.gpus_per_host);
    } else {
        check(memcmp(&c, &before, sizeof c) == 0);
        check(ptc_last_error()[0] != '\0');
    }
    free(s);
    return 0;
}
