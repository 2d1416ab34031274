/* libFuzzer target: the safetensors header parser on arbitrary bytes, as a
 * whole file (file size = input size) and as a prefix of a larger file. Any
 * accepted header must describe tensors that lie inside the data buffer, and
 * reading __metadata__ apart from jansson must change nothing: same result,
 * message, tensors and metadata as jansson parsing the whole header. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ptc/formats/formats_internal.h"
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

/* The header read with __metadata__ apart (safetensors_meta.c, whatever its
 * size) and by jansson alone: the same result, message, tensors and
 * metadata. */
static void same_as_reference(const uint8_t *data, size_t size)
{
    ptc_st_header *h, *r;
    int rc = ptc_st_parse_header_with(data, size, size, 0, &h);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", rc ? ptc_last_error() : "");
    int rr = ptc_st_parse_header_with(data, size, size, SIZE_MAX, &r);
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

/* Whatever the tensors (a bad layout fails both paths alike and would hide
 * it): what the reader takes is jansson's __metadata__ of the whole header,
 * and if jansson refuses the whole header it refuses it cut to {} too. */
static void meta_as_jansson(const uint8_t *data, size_t size)
{
    if (size < 8)
        return;
    const char *text = (const char *)data + 8;
    size_t n = size - 8;
    ptc_st_meta m;
    if (ptc_st_meta_scan(text, n, 0, &m) != 1)
        return;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, NULL);
    if (!root) {
        char *cut = malloc(n);
        if (!cut)
            abort();
        memcpy(cut, text, m.begin);
        memcpy(cut + m.begin, "{}", 2);
        memcpy(cut + m.begin + 2, text + m.end, n - m.end);
        json_t *c = json_loadb(cut, m.begin + 2 + (n - m.end), JSON_REJECT_DUPLICATES, NULL);
        if (c)
            abort();
        free(cut);
        ptc_st_meta_free(&m);
        return;
    }
    json_t *o = json_object_get(root, "__metadata__");
    if (!json_is_object(o) || json_object_size(o) != m.n)
        abort();
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (!json_is_string(v) || strcmp(key, m.kv[i].key) ||
            strlen(m.kv[i].value) != json_string_length(v) ||
            strcmp(json_string_value(v), m.kv[i].value))
            abort();
        i++;
    }
    json_decref(root);
    ptc_st_meta_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ptc_st_header *h;
    if (ptc_st_parse_header(data, size, size, &h) == PTC_OK) {
        check(h, size);
        ptc_st_header_destroy(h);
    }
    same_as_reference(data, size);
    meta_as_jansson(data, size);
    if (size >= 8) {
        uint64_t claimed = 8 + (size > 16 ? size : 16) + data[size - 1];
        if (ptc_st_parse_header(data, size, claimed, &h) == PTC_OK) {
            check(h, claimed);
            ptc_st_header_destroy(h);
        }
    }
    return 0;
}
