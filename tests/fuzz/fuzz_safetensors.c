/* libFuzzer target: the safetensors header parser on arbitrary bytes, as a
 * whole file (file size = input size) and as a prefix of a larger file. Any
 * accepted header must describe tensors that lie inside the data buffer, and
 * reading __metadata__ apart from jansson must change nothing: same result,
 * message, tensors and metadata as jansson parsing the whole header. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptc/formats_internal.h"
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

/* The header read with __metadata__ apart (safetensors_meta.c) and by
 * jansson alone: the same result, message, tensors and metadata. */
static void same_as_reference(const uint8_t *data, size_t size)
{
    ptc_st_header *h, *r;
    int rc = ptc_st_parse_header(data, size, size, &h);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc ? ptc_last_error() : "");
    int rr = ptc_st_parse_header_reference(data, size, size, &r);
    if (rc != rr || (rc && strcmp(msg, ptc_last_error())))
        abort();
    if (rc)
        return;
    if (ptc_st_header_count(h) != ptc_st_header_count(r) ||
        ptc_st_header_metadata_count(h) != ptc_st_header_metadata_count(r))
        abort();
    for (size_t i = 0; i < ptc_st_header_count(h); i++)
        if (strcmp(ptc_st_header_tensor(h, i)->name, ptc_st_header_tensor(r, i)->name) ||
            ptc_st_header_tensor(h, i)->offset != ptc_st_header_tensor(r, i)->offset)
            abort();
    for (size_t i = 0; i < ptc_st_header_metadata_count(h); i++) {
        ptc_st_kv a = ptc_st_header_metadata_at(h, i), b = ptc_st_header_metadata_at(r, i);
        if (strcmp(a.key, b.key) || strcmp(a.value, b.value))
            abort();
    }
    ptc_st_header_destroy(h);
    ptc_st_header_destroy(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_st_header *h;
    if (ptc_st_parse_header(data, size, size, &h) == PTC_OK) {
        check(h, size);
        ptc_st_header_destroy(h);
    }
    same_as_reference(data, size);
    if (size >= 8) {
        uint64_t claimed = 8 + (size > 16 ? size : 16) + data[size - 1];
        if (ptc_st_parse_header(data, size, claimed, &h) == PTC_OK) {
            check(h, claimed);
            ptc_st_header_destroy(h);
        }
    }
    return 0;
}
