/* libFuzzer target: the .npy header parser on arbitrary bytes. An accepted
 * header must describe a consistent array, and rebuilding a header from it
 * must parse back to the same description. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_npy_info info;
    if (ptc_npy_parse_header(data, size, &info) != PTC_OK)
        return 0;
    if (info.data_offset > size || info.ndim < 0 || info.ndim > PTC_NPY_MAX_DIMS)
        abort();
    void *hdr;
    size_t len;
    if (ptc_npy_header_build(info.dtype, info.ndim, info.shape, &hdr, &len) != PTC_OK)
        abort();
    ptc_npy_info again;
    if (ptc_npy_parse_header(hdr, len, &again) != PTC_OK || again.dtype != info.dtype ||
        again.ndim != info.ndim || again.nbytes != info.nbytes ||
        memcmp(again.shape, info.shape, sizeof info.shape) != 0)
        abort();
    free(hdr);
    return 0;
}
