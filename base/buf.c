/* The growable byte buffer (buf_internal.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ptc/box.h"
#include "base/buf_internal.h"
#include "base/util_internal.h"

/* Room for @p n more bytes and the NUL after them. */
static int reserve(ptc_buf *b, size_t n)
{
    if (b->err)
        return b->err;
    int rc;
    if (n > SIZE_MAX - 1 - b->len)
        rc = ptc_error_set(PTC_E_NOMEM, "buffer too large");
    else
        rc = ptc_grow((void **)&b->p, &b->cap, b->len + n + 1, 1);
    b->err = rc;
    return rc;
}

int ptc_buf_put(ptc_buf *b, const void *data, size_t n)
{
    PTC_TRY(reserve(b, n));
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return PTC_OK;
}

int ptc_buf_u32(ptc_buf *b, uint32_t v)
{
    uint8_t x[4];
    for (int i = 0; i < 4; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    return ptc_buf_put(b, x, 4);
}

int ptc_buf_u64(ptc_buf *b, uint64_t v)
{
    uint8_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    return ptc_buf_put(b, x, 8);
}

int ptc_buf_str(ptc_buf *b, const char *s, size_t n)
{
    if (b->err)
        return b->err;
    if (n > UINT32_MAX)
        return b->err = ptc_error_set(PTC_E_INVAL, "string too long (%zu bytes)", n);
    PTC_TRY(ptc_buf_u32(b, (uint32_t)n));
    return ptc_buf_put(b, s, n);
}

int ptc_buf_puts(ptc_buf *b, const char *s)
{
    return ptc_buf_put(b, s, strlen(s));
}

int ptc_buf_printf(ptc_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->err)
        return b->err;
    if (k < 0)
        return b->err = ptc_error_set(PTC_E_INVAL, "cannot format '%.60s'", fmt);
    PTC_TRY(reserve(b, (size_t)k));
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)k;
    return PTC_OK;
}

void ptc_buf_free(ptc_buf *b)
{
    ptc_free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- the reading cursor --------------------------------------------------------- */

int ptc_rd_fail(const ptc_rd *r, const char *field)
{
    return ptc_error_set(PTC_E_FORMAT, "%s: truncated or invalid at byte %zu (%s)", r->what,
                         r->pos, field);
}

int ptc_rd_u32(ptc_rd *r, uint32_t *v, const char *field)
{
    if (r->len - r->pos < 4)
        return ptc_rd_fail(r, field);
    uint32_t x = 0;
    for (int i = 3; i >= 0; i--)
        x = (x << 8) | r->p[r->pos + (size_t)i];
    r->pos += 4;
    *v = x;
    return PTC_OK;
}

int ptc_rd_u64(ptc_rd *r, uint64_t *v, const char *field)
{
    if (r->len - r->pos < 8)
        return ptc_rd_fail(r, field);
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = (x << 8) | r->p[r->pos + (size_t)i];
    r->pos += 8;
    *v = x;
    return PTC_OK;
}

int ptc_rd_i64(ptc_rd *r, int64_t *v, const char *field)
{
    uint64_t u = 0;
    PTC_TRY(ptc_rd_u64(r, &u, field));
    *v = (int64_t)u;
    return PTC_OK;
}

int ptc_rd_str(ptc_rd *r, char **out, uint32_t *out_len, const char *field)
{
    size_t at = r->pos;
    uint32_t n;
    PTC_TRY(ptc_rd_u32(r, &n, field));
    if (r->len - r->pos < n) {
        r->pos = at;
        return ptc_rd_fail(r, field);
    }
    char *s = ptc_strndup((const char *)r->p + r->pos, n);
    if (!s) {
        r->pos = at;
        return ptc_error_set(PTC_E_NOMEM, "%s: no memory for %s", r->what, field);
    }
    r->pos += n;
    *out = s;
    if (out_len)
        *out_len = n;
    return PTC_OK;
}

int ptc_rd_end(const ptc_rd *r)
{
    if (r->pos != r->len)
        return ptc_error_set(PTC_E_FORMAT, "%s: %zu trailing bytes", r->what, r->len - r->pos);
    return PTC_OK;
}

int ptc_buf_piece(ptc_buf *b, const ptc_piece *p)
{
    ptc_buf_u32(b, (uint32_t)p->box.ndim);
    ptc_buf_u32(b, 0);
    for (int d = 0; d < p->box.ndim; d++)
        ptc_buf_u64(b, (uint64_t)p->box.lo[d]);
    for (int d = 0; d < p->box.ndim; d++)
        ptc_buf_u64(b, (uint64_t)p->box.hi[d]);
    ptc_buf_u64(b, (uint64_t)p->local_offset);
    for (int d = 0; d < p->box.ndim; d++)
        ptc_buf_u64(b, (uint64_t)p->local_stride[d]);
    return b->err;
}

int ptc_rd_piece(ptc_rd *r, ptc_piece *p, const char *field)
{
    size_t at = r->pos;
    uint32_t nd = 0, reserved = 0;
    memset(p, 0, sizeof *p);
    int rc = ptc_rd_u32(r, &nd, field);
    if (rc == PTC_OK && nd > PTC_MAX_DIMS)
        rc = ptc_rd_fail(r, field);
    if (rc == PTC_OK && (rc = ptc_rd_u32(r, &reserved, field)) == PTC_OK && reserved)
        rc = ptc_rd_fail(r, field);
    p->box.ndim = (int)nd;
    for (uint32_t d = 0; rc == PTC_OK && d < nd; d++)
        rc = ptc_rd_i64(r, &p->box.lo[d], field);
    for (uint32_t d = 0; rc == PTC_OK && d < nd; d++)
        rc = ptc_rd_i64(r, &p->box.hi[d], field);
    if (rc == PTC_OK)
        rc = ptc_rd_i64(r, &p->local_offset, field);
    for (uint32_t d = 0; rc == PTC_OK && d < nd; d++)
        rc = ptc_rd_i64(r, &p->local_stride[d], field);
    if (rc < 0)
        r->pos = at;
    return rc;
}
