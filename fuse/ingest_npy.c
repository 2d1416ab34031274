/* npy ingest: one record per row of a 2-D+ array. Waits for the shared npy
 * header reader (include/ptc/npy.h); until then the format is reported as
 * unsupported rather than parsed twice in the tree. */
#include "fuse/ingest_internal.h"
#include "ptc/util_internal.h"

int ptc_ingest_npy_next(ptc_ingest *r, const uint8_t **data, size_t *len, bool *got)
{
    (void)data;
    (void)len;
    (void)got;
    return ptc_error_set(PTC_E_UNSUPPORTED, "%s: npy ingest is not available in this build",
                         r->src.name);
}

void ptc_ingest_npy_reset(ptc_ingest *r)
{
    (void)r;
}
