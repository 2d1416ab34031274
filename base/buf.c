/* The growable byte buffer (buf_internal.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
