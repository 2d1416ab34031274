/**
 * @file dtype.h
 * @brief Element types (safetensors names), their sizes and names.
 *
 * Converting arrays between dtypes is the kernels module's:
 * ptc_dtype_convert() in ptc/convert.h.
 * @note Thread safety: all functions are pure and safe from any thread.
 */
#ifndef PTC_DTYPE_H
#define PTC_DTYPE_H

#include "ptc/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Element types, named as in safetensors. Little-endian storage. */
typedef enum ptc_dtype {
    PTC_DTYPE_BOOL = 0,
    PTC_DTYPE_U8,
    PTC_DTYPE_I8,
    PTC_DTYPE_I16,
    PTC_DTYPE_U16,
    PTC_DTYPE_I32,
    PTC_DTYPE_U32,
    PTC_DTYPE_I64,
    PTC_DTYPE_U64,
    PTC_DTYPE_F16,
    PTC_DTYPE_BF16,
    PTC_DTYPE_F32,
    PTC_DTYPE_F64,
    PTC_DTYPE_F8_E4M3,
    PTC_DTYPE_F8_E5M2,
    PTC_DTYPE_COUNT
} ptc_dtype;

/** "Keep each tensor's stored dtype", where a function takes a target dtype
 * (exports, views, reshards). */
#define PTC_DTYPE_KEEP PTC_DTYPE_COUNT

/** @return bytes per element (1, 2, 4 or 8); 0 for an invalid value. */
PTC_API size_t ptc_dtype_size(ptc_dtype dt);

/** @return the safetensors name ("F32"), static; "?" for an invalid value. */
PTC_API const char *ptc_dtype_name(ptc_dtype dt);

/** Parse a safetensors dtype name of @p len bytes (exact, case-sensitive).
 * @return PTC_OK, or PTC_E_FORMAT naming the unknown dtype. */
PTC_API int ptc_dtype_parse(const char *s, size_t len, ptc_dtype *out);

/** @return true for F16, BF16, F32, F64 and the F8 types. */
PTC_API bool ptc_dtype_is_float(ptc_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
