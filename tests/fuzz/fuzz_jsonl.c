/* Fuzz target: the jsonl ingest reader over arbitrary bytes. */
#include <stddef.h>
#include <stdint.h>

#include "ptc/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_ingest *r;
    if (ptc_ingest_open_buffer(&r, "jsonl", data, size) != PTC_OK)
        return 0;
    uint64_t bytes = 0;
    for (;;) {
        const uint8_t *d;
        size_t len;
        bool end;
        if (ptc_ingest_next(r, &d, &len, &end) != PTC_OK || end)
            break;
        /* records lie inside the input */
        if (len > size || (len && (d < data || d + len > data + size)))
            __builtin_trap();
        bytes += len;
    }
    if (bytes > size)
        __builtin_trap();
    ptc_ingest_destroy(r);
    return 0;
}
