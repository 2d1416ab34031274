/* libFuzzer target: the safetensors header parser on arbitrary bytes, as a
 * whole file (file size = input size) and as a prefix of a larger file. Any
 * accepted header must describe tensors that lie inside the data buffer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const ptc_st_header *h, uint64_t file_size)
{
    uint64_t start = ptc_st_header_data_start(h), pos = start;
    for (size_t i = 0; i < ptc_st_header_count(h); i++) {
        const ptc_st_tensor *t = ptc_st_header_tensor(h, i);
        if (t->offset != pos || t->offset + t->nbytes > file_size || t->ndim > PTC_ST_MAX_DIMS)
            abort();
        pos += t->nbytes;
        size_t k;
        if (ptc_st_header_find(h, t->name, &k) != PTC_OK)
            abort();
    }
    if (pos != file_size)
        abort();
    for (size_t i = 0; i < ptc_st_header_metadata_count(h); i++) {
        ptc_st_kv kv = ptc_st_header_metadata_at(h, i);
        if (ptc_st_header_metadata_get(h, kv.key) == NULL)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_st_header *h;
    if (ptc_st_parse_header(data, size, size, &h) == PTC_OK) {
        check(h, size);
        ptc_st_header_destroy(h);
    }
    if (size >= 8) {
        uint64_t claimed = 8 + (size > 16 ? size : 16) + data[size - 1];
        if (ptc_st_parse_header(data, size, claimed, &h) == PTC_OK) {
            check(h, claimed);
            ptc_st_header_destroy(h);
        }
    }
    return 0;
}
