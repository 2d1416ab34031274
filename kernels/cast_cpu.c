/* ptc_dtype_convert: the optimized CPU path of the float casts.
 *
 * Same results as kernels/cast_ref.c bit for bit (tests/unit/test_cast.c
 * checks it exhaustively where the domain is small). Each source/target pair
 * gets its own loop so the inline bit routines specialize. */
#include <string.h>

#include "kernels/cast.h"
#include "kernels/cast_fast.h"
#include "ptc/convert.h"
#include "base/util_internal.h"

static uint16_t load_u16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Widen n elements of st into F32 bits at dst. */
static void widen(uint32_t *dst, const unsigned char *src, ptc_dtype st, size_t n)
{
    size_t i;
    switch (st) {
    case PTC_DTYPE_F16:
        for (i = 0; i < n; i++)
            dst[i] = ptc_fast_f16_to_f32(load_u16(src + 2 * i));
        break;
    case PTC_DTYPE_BF16:
        for (i = 0; i < n; i++)
            dst[i] = ptc_fast_bf16_to_f32(load_u16(src + 2 * i));
        break;
    case PTC_DTYPE_F8_E4M3:
        for (i = 0; i < n; i++)
            dst[i] = ptc_fast_e4m3_to_f32(src[i]);
        break;
    case PTC_DTYPE_F8_E5M2:
        for (i = 0; i < n; i++)
            dst[i] = ptc_fast_e5m2_to_f32(src[i]);
        break;
    case PTC_DTYPE_F64:
        for (i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            float f = (float)d;
            memcpy(&dst[i], &f, 4);
        }
        break;
    default:
        memcpy(dst, src, n * 4);
        break;
    }
}

/* Narrow n F32 bit patterns into dt at dst. */
static void narrow(unsigned char *dst, ptc_dtype dt, const uint32_t *src, size_t n)
{
    size_t i;
    switch (dt) {
    case PTC_DTYPE_F16:
        for (i = 0; i < n; i++) {
            uint16_t h = ptc_fast_f32_to_f16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        break;
    case PTC_DTYPE_BF16:
        for (i = 0; i < n; i++) {
            uint16_t h = ptc_fast_f32_to_bf16(src[i]);
            memcpy(dst + 2 * i, &h, 2);
        }
        break;
    case PTC_DTYPE_F8_E4M3:
        for (i = 0; i < n; i++)
            dst[i] = ptc_fast_f32_to_e4m3(src[i]);
        break;
    case PTC_DTYPE_F8_E5M2:
        for (i = 0; i < n; i++)
            dst[i] = ptc_fast_f32_to_e5m2(src[i]);
        break;
    case PTC_DTYPE_F64:
        for (i = 0; i < n; i++) {
            float f;
            memcpy(&f, &src[i], 4);
            double d = f;
            memcpy(dst + 8 * i, &d, 8);
        }
        break;
    default:
        memcpy(dst, src, n * 4);
        break;
    }
}

int ptc_dtype_convert(void *dst, ptc_dtype dt, const void *src, ptc_dtype st, size_t n)
{
    if (!ptc_cast_supported(dt, st))
        return ptc_error_set(PTC_E_UNSUPPORTED, "cannot convert %s to %s",
                             ptc_dtype_name(st), ptc_dtype_name(dt));
    if (n == 0)
        return PTC_OK;
    if (dt == st) {
        memcpy(dst, src, n * ptc_dtype_size(dt));
        return PTC_OK;
    }
    /* via F32 bits in cache-sized blocks; F32 itself is a plain copy */
    const unsigned char *s = src;
    unsigned char *d = dst;
    uint32_t buf[1024];
    for (size_t i = 0; i < n; i += PTC_ARRAY_LEN(buf)) {
        size_t k = PTC_MIN(n - i, PTC_ARRAY_LEN(buf));
        widen(buf, s + ptc_dtype_size(st) * i, st, k);
        narrow(d + ptc_dtype_size(dt) * i, dt, buf, k);
    }
    return PTC_OK;
}
