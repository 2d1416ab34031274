/* Fast float casts as inline bit manipulation, shared by the optimized CPU
 * path (kernels/cast_cpu.c) and the CUDA kernel (kernels/cast.cu). Internal;
 * behaviour is defined by kernels/cast_ref.c and tested against it.
 *
 * The narrowing routine handles one IEEE-like target in four ranges:
 * NaN/inf, overflow (by an F32 threshold), normal (rebias the exponent and
 * round with the add-half-minus-one-plus-lsb trick) and subnormal (an integer
 * shift with explicit ties-to-even). */
#ifndef PTC_KERNELS_CAST_FAST_H
#define PTC_KERNELS_CAST_FAST_H

#include <stdint.h>

#ifdef __CUDACC__
#define PTC_CAST_FN static __host__ __device__ __forceinline__
#else
#define PTC_CAST_FN static inline
#endif

/* Narrow F32 bits to a format with M mantissa bits and exponent bias B.
 * ovf: smallest F32 magnitude (bits) that overflows after rounding;
 * ovf_enc: the encoding (without sign) returned on overflow and for inf;
 * nan_fixed: if nonzero, every NaN becomes this encoding (e4m3fn). */
PTC_CAST_FN uint32_t ptc_fast_narrow(uint32_t x, int M, int B, int E, uint32_t ovf,
                                     uint32_t ovf_enc, uint32_t nan_fixed)
{
    uint32_t sbit = (x >> 31) << (E + M);
    uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) {
        if (nan_fixed)
            return sbit | nan_fixed;
        uint32_t p = (a & 0x7FFFFFu) >> (23 - M);
        return sbit | (((1u << E) - 1) << M) | (p ? p : (1u << (M - 1)));
    }
    if (a >= ovf)
        return sbit | ovf_enc;
    uint32_t min_normal = (uint32_t)(127 - B + 1) << 23;
    if (a >= min_normal) {
        uint32_t r = a - ((uint32_t)(127 - B) << 23);
        int sh = 23 - M;
        r += (1u << (sh - 1)) - 1 + ((r >> sh) & 1);
        return sbit | (r >> sh);
    }
    /* subnormal target: n = value / 2^(1-B-M), value = m * 2^(e-150) */
    uint32_t e = a >> 23;
    if (e == 0)
        return sbit; /* F32 subnormals are far below every target's range */
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    int sh = 150 - (B - 1 + M) - (int)e;
    if (sh > 24)
        return sbit;
    uint32_t q = m >> sh;
    uint32_t rem = m & ((1u << sh) - 1);
    uint32_t half = 1u << (sh - 1);
    q += (rem > half || (rem == half && (q & 1))) ? 1u : 0u;
    return sbit | q;
}

/* Widen a format's encoding to F32 bits. nan_e4m3: the e4m3fn rule (no inf,
 * only S.1111.111 is NaN) instead of the IEEE one. */
PTC_CAST_FN uint32_t ptc_fast_widen(uint32_t v, int M, int B, int E, int nan_e4m3)
{
    uint32_t sign = (v >> (E + M)) & 1u;
    uint32_t e = (v >> M) & ((1u << E) - 1);
    uint32_t m = v & ((1u << M) - 1);
    uint32_t s32 = sign << 31;
    if (nan_e4m3) {
        if (e == (1u << E) - 1 && m == (1u << M) - 1)
            return s32 | 0x7FC00000u;
    } else if (e == (1u << E) - 1) {
        return s32 | 0x7F800000u | (m << (23 - M));
    }
    if (e != 0)
        return s32 | ((e + (uint32_t)(127 - B)) << 23) | (m << (23 - M));
    if (m == 0)
        return s32;
    /* subnormal: normalize the mantissa */
    int lz = 0;
    while (!(m & (1u << M))) {
        m <<= 1;
        lz++;
    }
    return s32 | ((uint32_t)(127 - B + 1 - lz) << 23) | ((m & ((1u << M) - 1)) << (23 - M));
}

PTC_CAST_FN uint16_t ptc_fast_f32_to_f16(uint32_t x)
{
    /* overflow at 65520 = 0x477FF000 */
    return (uint16_t)ptc_fast_narrow(x, 10, 15, 5, 0x477FF000u, 0x7C00u, 0);
}
PTC_CAST_FN uint32_t ptc_fast_f16_to_f32(uint16_t h)
{
    return ptc_fast_widen(h, 10, 15, 5, 0);
}
PTC_CAST_FN uint16_t ptc_fast_f32_to_bf16(uint32_t x)
{
    uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) {
        uint32_t p = (x >> 16) & 0x7Fu;
        return (uint16_t)((x >> 16) | (p ? 0u : 0x40u));
    }
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
PTC_CAST_FN uint32_t ptc_fast_bf16_to_f32(uint16_t b)
{
    return (uint32_t)b << 16;
}
PTC_CAST_FN uint8_t ptc_fast_f32_to_e5m2(uint32_t x)
{
    /* max 57344; overflow from the midpoint 61440 = 0x47700000 */
    return (uint8_t)ptc_fast_narrow(x, 2, 15, 5, 0x47700000u, 0x7Cu, 0);
}
PTC_CAST_FN uint32_t ptc_fast_e5m2_to_f32(uint8_t v)
{
    return ptc_fast_widen(v, 2, 15, 5, 0);
}
PTC_CAST_FN uint8_t ptc_fast_f32_to_e4m3(uint32_t x)
{
    /* saturating: anything above 448 (0x43E00000), inf included, is 448;
     * values in (448, 464] would round to 448 anyway */
    return (uint8_t)ptc_fast_narrow(x, 3, 7, 4, 0x43E00001u, 0x7Eu, 0x7Fu);
}
PTC_CAST_FN uint32_t ptc_fast_e4m3_to_f32(uint8_t v)
{
    return ptc_fast_widen(v, 3, 7, 4, 1);
}

#endif
