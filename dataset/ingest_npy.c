/* npy ingest: one record per row (index of the first dimension) of a 2-D or
 * higher C-order array. The header is parsed by the shared npy reader
 * (ptc/npy.c); the data is streamed through the ingest window. */
#include <stdio.h>
#include <string.h>

#include "dataset/ingest_internal.h"
#include "ptc/npy.h"
#include "base/util_internal.h"

/* An npy header is at most 12 + 2^32 bytes by format; we accept up to this. */
#define NPY_MAX_HEADER ((size_t)64 << 20)

struct npy_state {
    uint64_t rows, row_bytes;
};

void ptc_ingest_npy_reset(ptc_ingest *r)
{
    ptc_free(r->npy);
    r->npy = NULL;
}

static int npy_start(ptc_ingest *r)
{
    struct ingest_src *s = &r->src;
    PTC_TRY(ptc_ingest_src_fill(s, 12));
    size_t avail = s->end - s->pos;
    const uint8_t *b = s->data + s->pos;
    size_t need = 10;
    if (avail >= 10 && memcmp(b, "\x93NUMPY", 6) == 0) {
        need = b[6] == 1 ? 10 + ((size_t)b[8] | (size_t)b[9] << 8)
                         : avail >= 12 ? 12 + ((size_t)b[8] | (size_t)b[9] << 8 |
                                               (size_t)b[10] << 16 | (size_t)b[11] << 24)
                                       : 12;
    }
    if (need > NPY_MAX_HEADER)
        return ptc_error_set(PTC_E_FORMAT, "%s: npy header of %zu bytes is too large", s->name,
                             need);
    PTC_TRY(ptc_ingest_src_fill(s, need));
    ptc_npy_info info;
    int rc = ptc_npy_parse_header(s->data + s->pos, s->end - s->pos, &info);
    if (rc < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", ptc_last_error());
        return ptc_error_set(rc, "%s: %s", s->name, why);
    }
    if (info.ndim < 2)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: npy ingest needs an array of 2 or more dimensions, not %d",
                             s->name, info.ndim);
    /* the header's claims against the input's real size, before any row:
     * the shape's data must be in the file, and a record costs at least one
     * input byte even when its rows are empty (shape (n, 0)), so a small
     * file cannot make the ingest store 2^40 empty records (trailing bytes
     * are found after the last row) */
    uint64_t input = r->mem ? s->end : s->size, at = s->base + s->pos;
    uint64_t have = input > at + info.data_offset ? input - at - info.data_offset : 0;
    uint64_t rows = (uint64_t)info.shape[0];
    if (info.nbytes > have)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: truncated npy data: the shape needs %llu data bytes, the file "
                             "has %llu",
                             s->name, (unsigned long long)info.nbytes, (unsigned long long)have);
    if (info.nbytes == 0 && rows > input)
        return ptc_error_set(PTC_E_FORMAT,
                             "%s: npy shape claims %llu rows of 0 bytes in a file of %llu bytes "
                             "(at most one empty record per input byte)",
                             s->name, (unsigned long long)rows, (unsigned long long)input);
    struct npy_state *st = ptc_calloc(1, sizeof *st);
    if (!st)
        return PTC_E_NOMEM;
    st->rows = rows;
    st->row_bytes = st->rows ? info.nbytes / st->rows : 0;
    if (st->row_bytes > PTC_INGEST_MAX_RECORD) {
        ptc_free(st);
        return ptc_error_set(PTC_E_FORMAT, "%s: rows of %llu bytes are over %llu bytes", s->name,
                             (unsigned long long)(info.nbytes / rows),
                             (unsigned long long)PTC_INGEST_MAX_RECORD);
    }
    s->pos += (size_t)info.data_offset;
    r->npy = st;
    return PTC_OK;
}

int ptc_ingest_npy_next(ptc_ingest *r, const uint8_t **data, size_t *len, bool *got)
{
    struct ingest_src *s = &r->src;
    if (!r->npy)
        PTC_TRY(npy_start(r));
    struct npy_state *st = r->npy;
    if (r->in_record == st->rows) {
        PTC_TRY(ptc_ingest_src_fill(s, 1));
        if (s->end > s->pos)
            return ptc_error_set(PTC_E_FORMAT, "%s: data longer than the npy shape says",
                                 s->name);
        *got = false;
        return PTC_OK;
    }
    size_t n = (size_t)st->row_bytes;
    PTC_TRY(ptc_ingest_src_fill(s, n));
    if (s->end - s->pos < n)
        return ptc_error_set(PTC_E_FORMAT, "%s: truncated npy data at row %llu of %llu", s->name,
                             (unsigned long long)r->in_record, (unsigned long long)st->rows);
    *data = s->data + s->pos;
    *len = n;
    s->pos += n;
    *got = true;
    return PTC_OK;
}
