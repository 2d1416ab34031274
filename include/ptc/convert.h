/**
 * @file convert.h
 * @brief Element-type conversion of arrays (kernels/cast_cpu.c, the fast
 *        CPU path of the casts whose specification is kernels/cast_ref.c).
 *
 * The dtypes themselves (names, sizes) are base's, in ptc/dtype.h.
 *
 * @note Thread safety: pure functions, safe from any thread.
 */
#ifndef PTC_CONVERT_H
#define PTC_CONVERT_H

#include <stddef.h>

#include "ptc/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Convert @p n elements from @p st to @p dt (both little-endian, not
 * overlapping). Supported: identity for every dtype; between F32, F16, BF16,
 * F8_E4M3, F8_E5M2 and F64 in any direction (round to nearest even; F8_E4M3
 * saturates to ±448 and has no infinity, NaN stays NaN).
 * @return PTC_OK or PTC_E_UNSUPPORTED.
 */
PTC_API int ptc_dtype_convert(void *dst, ptc_dtype dt, const void *src,
                              ptc_dtype st, size_t n);

#ifdef __cplusplus
}
#endif
#endif
