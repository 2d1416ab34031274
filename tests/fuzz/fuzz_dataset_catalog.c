/* Fuzz the decoder of dataset catalog records (untrusted bytes of a
 * possibly corrupt store) and of the blob records inside them. */
#include <stdint.h>
#include <stdlib.h>

#include "ptc/store/store_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_store_dataset_rec_check(data, size);
    const uint8_t *p = data;
    size_t n = size;
    ptc_blob_rec b;
    if (ptc_blob_rec_decode(&b, &p, &n) == PTC_OK)
        ptc_blob_rec_free(&b);
    return 0;
}
