/**
 * @file npy.h
 * @brief NumPy .npy files (format versions 1.0, 2.0, 3.0) for single tensors.
 *
 * Layout: magic "\x93NUMPY", major and minor version bytes, the header length
 * (2 bytes LE in v1, 4 bytes LE in v2/v3), then a Python dict literal
 * {'descr': ..., 'fortran_order': ..., 'shape': (...)} padded with spaces and
 * a final newline, then the raw C-order data.
 *
 * Supported descrs (little-endian or byte-order-free only): '|b1' BOOL,
 * '|u1' U8, '|i1' I8, '<i2' I16, '<u2' U16, '<i4' I32, '<u4' U32, '<i8' I64,
 * '<u8' U64, '<f2' F16, '<f4' F32, '<f8' F64. BF16 and F8 have no numpy
 * descr. Rejected with PTC_E_FORMAT: fortran_order True, big-endian, object,
 * structured or unknown descrs, more than PTC_NPY_MAX_DIMS dims, shape
 * overflow, malformed or truncated headers, data shorter or longer than the
 * shape says.
 *
 * @note Thread safety: all functions are safe from any thread (no shared
 * state); the same output path must not be written concurrently.
 */
#ifndef PTC_NPY_H
#define PTC_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "ptc/dtype.h"
#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most dimensions accepted (the PTC tensor limit). */
#define PTC_NPY_MAX_DIMS 8

/** What a .npy header says. A plain value type. */
typedef struct ptc_npy_info {
    int major, minor;                /**< format version read (1.0, 2.0, 3.0) */
    ptc_dtype dtype;                 /**< element type */
    int ndim;                        /**< 0 to PTC_NPY_MAX_DIMS */
    int64_t shape[PTC_NPY_MAX_DIMS]; /**< extents; entries past ndim are 0 */
    uint64_t data_offset;            /**< where the data starts in the file */
    uint64_t nbytes;                 /**< volume * dtype size */
} ptc_npy_info;

/**
 * Parse and validate a .npy header held in memory (no file needed).
 * @param buf  the file's first bytes (at least the whole header; data may
 *             follow and is not read)
 * @param len  bytes available at @p buf
 * @param info receives the header's contents
 * @return PTC_OK or PTC_E_FORMAT (message names the problem).
 */
PTC_API int ptc_npy_parse_header(const void *buf, size_t len, ptc_npy_info *info);

/**
 * Read a .npy file's header and check that the file holds exactly
 * info->nbytes of data after it.
 * @return PTC_OK; PTC_E_NOTFOUND; PTC_E_IO; PTC_E_FORMAT (message starts with
 * the path).
 */
PTC_API int ptc_npy_read_info(const char *path, ptc_npy_info *info);

/**
 * Read a whole .npy file.
 * @param data receives the data, allocated with malloc (release with free());
 *             NULL on failure (a zero-size array gets a valid 1-byte block)
 * @return the codes of ptc_npy_read_info; PTC_E_NOMEM.
 */
PTC_API int ptc_npy_read(const char *path, ptc_npy_info *info, void **data);

/**
 * Build a .npy header for @p dtype and @p shape: version 1.0, or 2.0 when
 * the dict does not fit in 65535 bytes; total length a multiple of 64.
 * @param bytes receives the header, allocated with malloc (free() it)
 * @return PTC_OK; PTC_E_UNSUPPORTED (BF16, F8: no numpy descr);
 *         PTC_E_INVAL (bad ndim, negative dim, size overflow); PTC_E_NOMEM.
 */
PTC_API int ptc_npy_header_build(ptc_dtype dtype, int ndim, const int64_t *shape,
                                 void **bytes, size_t *len);

/**
 * Write @p data (C order, volume * dtype size bytes) as a .npy file,
 * atomically: a temporary file in the same directory, fsync, rename.
 * @return the codes of ptc_npy_header_build; PTC_E_IO. On failure the target
 * is untouched and no temporary file is left.
 */
PTC_API int ptc_npy_write(const char *path, ptc_dtype dtype, int ndim, const int64_t *shape,
                          const void *data);

#ifdef __cplusplus
}
#endif
#endif
