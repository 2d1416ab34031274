/**
 * @file crc32c.h
 * @brief CRC32C checksums (kernels/crc32c.c).
 *
 * @note Thread safety: pure functions, safe from any thread.
 */
#ifndef PTC_CRC32C_H
#define PTC_CRC32C_H

#include <stddef.h>
#include <stdint.h>
#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and
 * final xor 0xFFFFFFFF) of @p len bytes, continuing from @p crc (0 to start).
 */
PTC_API uint32_t ptc_crc32c(uint32_t crc, const void *data, size_t len);

/** TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
PTC_API uint32_t ptc_crc32c_mask(uint32_t crc);

#ifdef __cplusplus
}
#endif
#endif
