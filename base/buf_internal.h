/* The growable byte buffer every module uses: binary records (little-endian
 * integers, length-prefixed strings) and text. Never installed. */
#ifndef PTC_BUF_INTERNAL_H
#define PTC_BUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Zero-initialise; free with ptc_buf_free. The bytes are followed by a NUL
 * once anything was added, so a text buffer is a C string (@c s). Every
 * function returns PTC_OK or an error (PTC_E_NOMEM with its message), and
 * the first error is also kept in @c err: a series of appends can be
 * checked once at the end. An append after an error does nothing. */
typedef struct ptc_buf {
    union {
        uint8_t *p;
        char *s;
    };
    size_t len, cap;
    int err;
} ptc_buf;

int ptc_buf_put(ptc_buf *b, const void *data, size_t n);
int ptc_buf_u32(ptc_buf *b, uint32_t v);
int ptc_buf_u64(ptc_buf *b, uint64_t v);
/* A u32 length, then the @p n bytes (PTC_E_INVAL beyond 4 GiB). */
int ptc_buf_str(ptc_buf *b, const char *s, size_t n);
/* Text: a NUL-terminated string, or printf-formatted text. */
int ptc_buf_puts(ptc_buf *b, const char *s);
int ptc_buf_printf(ptc_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Free the bytes and zero the buffer. */
void ptc_buf_free(ptc_buf *b);

#endif
