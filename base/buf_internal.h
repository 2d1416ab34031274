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

/* A reading cursor over untrusted bytes, the counterpart of ptc_buf's binary
 * appends: @c what names the record in messages. Every read checks the
 * bounds and fails with PTC_E_FORMAT "WHAT: truncated or invalid at byte N
 * (FIELD)" (ptc_rd_fail), leaving the cursor where it was. */
typedef struct ptc_rd {
    const uint8_t *p;
    size_t len, pos;
    const char *what;
} ptc_rd;

int ptc_rd_fail(const ptc_rd *r, const char *field);
int ptc_rd_u32(ptc_rd *r, uint32_t *v, const char *field);
int ptc_rd_u64(ptc_rd *r, uint64_t *v, const char *field);
int ptc_rd_i64(ptc_rd *r, int64_t *v, const char *field);
/* A u32 length, then that many bytes, copied into a NUL-terminated
 * allocation (*out; ptc_free); its length into *out_len (may be NULL). */
int ptc_rd_str(ptc_rd *r, char **out, uint32_t *out_len, const char *field);
/* PTC_E_FORMAT "WHAT: N trailing bytes" unless every byte was read. */
int ptc_rd_end(const ptc_rd *r);

/* A piece (include/ptc/box.h) as docs/format.md §2.4 writes it: u32 ndim,
 * u32 reserved 0, ndim i64 lo, ndim i64 hi, i64 local_offset, ndim i64
 * local strides (16 bytes or more). */
struct ptc_piece;
int ptc_buf_piece(ptc_buf *b, const struct ptc_piece *p);
/* Its counterpart: ndim at most PTC_MAX_DIMS and reserved 0, else
 * PTC_E_FORMAT naming @p field (the values are checked by whoever takes
 * the piece: ptc_piece_check). */
int ptc_rd_piece(ptc_rd *r, struct ptc_piece *p, const char *field);

#endif
