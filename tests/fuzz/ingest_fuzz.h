/* Shared body of the ingest-reader fuzz targets: read every record of an
 * arbitrary buffer in format @p fmt; records must lie inside the input and
 * add up to at most its size. */
#ifndef PTC_INGEST_FUZZ_H
#define PTC_INGEST_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/dataset.h"

static inline int ingest_fuzz(const char *fmt, const uint8_t *data, size_t size)
{
    ptc_ingest *r;
    if (ptc_ingest_open_buffer(&r, fmt, data, size) != PTC_OK)
        return 0;
    uint64_t bytes = 0;
    for (;;) {
        const uint8_t *d;
        size_t len;
        bool end;
        if (ptc_ingest_next(r, &d, &len, &end) != PTC_OK || end)
            break;
        if (len > size || (len && (d < data || d + len > data + size)))
            __builtin_trap();
        bytes += len;
    }
    if (bytes > size)
        __builtin_trap();
    ptc_ingest_destroy(r);
    return 0;
}

#endif
