/* The safetensors reader's private parts shared by its files
 * (safetensors.c, safetensors_meta.c, safetensors_index.c) and its tests.
 * Never installed. */
#ifndef PTC_FORMATS_INTERNAL_H
#define PTC_FORMATS_INTERNAL_H

#include <stddef.h>
#include <string.h>

#include "ptc/safetensors.h"

/* A safetensors header's __metadata__ object read apart from jansson
 * (safetensors_meta.c): its byte span [begin, end) in the header text and
 * its entries in file order, the strings in @c text. */
typedef struct ptc_st_meta {
    size_t begin, end;
    ptc_st_kv *kv;
    size_t n;
    char *text;
} ptc_st_meta;

/* 1: @p out holds the object of the header text @p text (@p n bytes), which
 * jansson would accept with the same entries; 0: no such object read (none,
 * smaller than @p min_bytes, or anything this reader does not take: parse
 * the header with jansson alone); PTC_E_NOMEM. */
int ptc_st_meta_scan(const char *text, size_t n, size_t min_bytes, ptc_st_meta *out);
void ptc_st_meta_free(ptc_st_meta *m);

/* The smallest __metadata__ object (bytes of its text) ptc_st_parse_header
 * reads apart: below it jansson's table stays in the caches, and the scan
 * and the copy of the header would cost more than they save. */
#define PTC_ST_META_APART_MIN ((size_t)64 << 10)

/* ptc_st_parse_header reading __metadata__ apart when its text has at least
 * @p apart_min bytes (0: always; SIZE_MAX: never, jansson reads the whole
 * header — the reference the fast path is checked against). */
int ptc_st_parse_header_with(const void *buf, size_t len, uint64_t file_size, size_t apart_min,
                             ptc_st_header **out);

/* Quote a tensor name for a message (one line, bounded). */
#define QNAME(buf, s) ptc_quote_name((buf), sizeof(buf), (s), strlen(s))

/* json_object_set_new that takes @p v (NULL: out of memory) and says
 * PTC_E_NOMEM. */
struct json_t;
int ptc_st_json_put(struct json_t *obj, const char *key, struct json_t *v);

#endif
