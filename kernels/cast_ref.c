/* Reference casts: the specification of every float conversion in PTC.
 *
 * Written for clarity, not speed: one generic decoder and one generic
 * round-to-nearest-even encoder, parameterized by the small format's
 * exponent and mantissa widths. The optimized paths (cast_fast.h, cast.cu)
 * are tested bit for bit against these. */
#include <string.h>

#include "kernels/cast.h"

/* A binary floating-point format narrower than (or as wide as) F32. */
typedef struct small_fmt {
    int ebits;        /* exponent field width */
    int mbits;        /* mantissa field width */
    bool has_inf;     /* IEEE-style: all-ones exponent is inf/NaN */
    uint32_t max_bits; /* largest finite magnitude, as an encoding */
} small_fmt;

static const small_fmt FMT_F16 = {5, 10, true, 0x7BFF};
static const small_fmt FMT_BF16 = {8, 7, true, 0x7F7F};
static const small_fmt FMT_E5M2 = {5, 2, true, 0x7B};
/* e4m3fn: exponent 15 is a normal binade except mantissa 7 (NaN). */
static const small_fmt FMT_E4M3 = {4, 3, false, 0x7E};

static int bias_of(const small_fmt *F)
{
    return (1 << (F->ebits - 1)) - 1;
}

static uint32_t f32_quiet_nan(uint32_t sign)
{
    return (sign << 31) | 0x7FC00000u;
}

/* Decode an encoding of F into F32 bits (every value is exact in F32). */
static uint32_t decode(uint32_t v, const small_fmt *F)
{
    int M = F->mbits, B = bias_of(F);
    uint32_t sign = (v >> (F->ebits + M)) & 1;
    uint32_t e = (v >> M) & ((1u << F->ebits) - 1);
    uint32_t m = v & ((1u << M) - 1);
    uint32_t emax = (1u << F->ebits) - 1;
    if (F->has_inf && e == emax) {
        if (m == 0)
            return (sign << 31) | 0x7F800000u;
        /* NaN: keep the payload in the top mantissa bits */
        return (sign << 31) | 0x7F800000u | (m << (23 - M));
    }
    if (!F->has_inf && e == emax && m == (1u << M) - 1)
        return f32_quiet_nan(sign);
    if (e == 0 && m == 0)
        return sign << 31;
    /* value = sig * 2^exp2 with sig an integer */
    uint32_t sig;
    int exp2;
    if (e == 0) {
        sig = m;
        exp2 = 1 - B - M;
    } else {
        sig = m | (1u << M);
        exp2 = (int)e - B - M;
    }
    /* normalize sig to 24 bits (1.xxx * 2^23) */
    while (sig < (1u << 23)) {
        sig <<= 1;
        exp2--;
    }
    /* F32 value = sig * 2^exp2, sig in [2^23, 2^24): biased exponent */
    int e32 = exp2 + 23 + 127;
    if (e32 <= 0) {
        /* F32 subnormal (only possible for formats wider than F32's range;
         * none here, but keep the spec total) */
        int sh = 1 - e32;
        return (sign << 31) | (sh < 32 ? (sig >> sh) : 0);
    }
    return (sign << 31) | ((uint32_t)e32 << 23) | (sig & 0x7FFFFFu);
}

/* Round sig * 2^-sh (sh >= 0) to an integer, ties to even. */
static uint64_t shift_rne(uint64_t sig, int sh)
{
    if (sh == 0)
        return sig;
    if (sh > 62)
        return 0;
    uint64_t q = sig >> sh;
    uint64_t rem = sig & ((1ull << sh) - 1);
    uint64_t half = 1ull << (sh - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return q;
}

/* Encode F32 bits into F with round-to-nearest-even. */
static uint32_t encode(uint32_t f, const small_fmt *F)
{
    int M = F->mbits, B = bias_of(F);
    uint32_t sign = f >> 31;
    uint32_t sbit = sign << (F->ebits + M);
    uint32_t a = f & 0x7FFFFFFFu;
    uint32_t emax = (1u << F->ebits) - 1;
    uint32_t inf_or_sat = F->has_inf ? (emax << M) : F->max_bits;

    if (a > 0x7F800000u) { /* NaN */
        if (!F->has_inf)
            return sbit | (emax << M) | ((1u << M) - 1);
        uint32_t payload = (a & 0x7FFFFFu) >> (23 - M);
        if (payload == 0)
            payload = 1u << (M - 1);
        return sbit | (emax << M) | payload;
    }
    if (a == 0x7F800000u)
        return sbit | inf_or_sat;
    if (a == 0)
        return sbit;

    /* value = sig * 2^exp2 exactly, and its binade floor(log2 value) */
    uint32_t e32 = a >> 23;
    uint64_t sig;
    int exp2, lg;
    if (e32 == 0) {
        sig = a & 0x7FFFFFu;
        exp2 = -149;
        lg = 31 - __builtin_clz((unsigned)sig) - 149;
    } else {
        sig = (a & 0x7FFFFFu) | 0x800000u;
        exp2 = (int)e32 - 150;
        lg = (int)e32 - 127;
    }
    /* the target binade, clamped to the subnormal range */
    int te = lg < 1 - B ? 1 - B : lg;
    int qe = te - M; /* exponent of one unit in the last place */
    uint64_t n = shift_rne(sig, qe - exp2); /* qe > exp2 for all formats here */
    if (n >= (2ull << M)) { /* rounding carried into the next binade */
        n >>= 1;
        te++;
    }
    uint32_t enc;
    if (n < (1ull << M)) {
        enc = (uint32_t)n; /* subnormal (or zero), exponent field 0 */
    } else {
        int biased = te + B;
        if (biased > (int)emax)
            return sbit | inf_or_sat;
        enc = ((uint32_t)biased << M) | ((uint32_t)n & ((1u << M) - 1));
    }
    if (enc > F->max_bits)
        return sbit | inf_or_sat;
    return sbit | enc;
}

uint32_t ptc_cast_ref_f16_to_f32(uint16_t h) { return decode(h, &FMT_F16); }
uint16_t ptc_cast_ref_f32_to_f16(uint32_t f) { return (uint16_t)encode(f, &FMT_F16); }
uint32_t ptc_cast_ref_bf16_to_f32(uint16_t b) { return decode(b, &FMT_BF16); }
uint16_t ptc_cast_ref_f32_to_bf16(uint32_t f) { return (uint16_t)encode(f, &FMT_BF16); }
uint32_t ptc_cast_ref_e4m3_to_f32(uint8_t v) { return decode(v, &FMT_E4M3); }
uint8_t ptc_cast_ref_f32_to_e4m3(uint32_t f) { return (uint8_t)encode(f, &FMT_E4M3); }
uint32_t ptc_cast_ref_e5m2_to_f32(uint8_t v) { return decode(v, &FMT_E5M2); }
uint8_t ptc_cast_ref_f32_to_e5m2(uint32_t f) { return (uint8_t)encode(f, &FMT_E5M2); }

static bool castable_float(ptc_dtype d)
{
    return d == PTC_DTYPE_F16 || d == PTC_DTYPE_BF16 || d == PTC_DTYPE_F32 ||
           d == PTC_DTYPE_F64 || d == PTC_DTYPE_F8_E4M3 || d == PTC_DTYPE_F8_E5M2;
}

bool ptc_cast_supported(ptc_dtype dt, ptc_dtype st)
{
    if ((unsigned)dt >= PTC_DTYPE_COUNT || (unsigned)st >= PTC_DTYPE_COUNT)
        return false;
    return dt == st || (castable_float(dt) && castable_float(st));
}

/* Load element i of src as F32 bits. */
static uint32_t load_f32(const unsigned char *src, ptc_dtype st, size_t i)
{
    switch (st) {
    case PTC_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        return ptc_cast_ref_f16_to_f32(h);
    }
    case PTC_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        return ptc_cast_ref_bf16_to_f32(h);
    }
    case PTC_DTYPE_F8_E4M3: return ptc_cast_ref_e4m3_to_f32(src[i]);
    case PTC_DTYPE_F8_E5M2: return ptc_cast_ref_e5m2_to_f32(src[i]);
    case PTC_DTYPE_F64: {
        double d;
        float x;
        uint32_t b;
        memcpy(&d, src + 8 * i, 8);
        x = (float)d;
        memcpy(&b, &x, 4);
        return b;
    }
    default: { /* F32 */
        uint32_t b;
        memcpy(&b, src + 4 * i, 4);
        return b;
    }
    }
}

static void store_f32(unsigned char *dst, ptc_dtype dt, size_t i, uint32_t b)
{
    switch (dt) {
    case PTC_DTYPE_F16: {
        uint16_t h = ptc_cast_ref_f32_to_f16(b);
        memcpy(dst + 2 * i, &h, 2);
        break;
    }
    case PTC_DTYPE_BF16: {
        uint16_t h = ptc_cast_ref_f32_to_bf16(b);
        memcpy(dst + 2 * i, &h, 2);
        break;
    }
    case PTC_DTYPE_F8_E4M3: dst[i] = ptc_cast_ref_f32_to_e4m3(b); break;
    case PTC_DTYPE_F8_E5M2: dst[i] = ptc_cast_ref_f32_to_e5m2(b); break;
    case PTC_DTYPE_F64: {
        float x;
        memcpy(&x, &b, 4);
        double d = (double)x;
        memcpy(dst + 8 * i, &d, 8);
        break;
    }
    default: memcpy(dst + 4 * i, &b, 4); break;
    }
}

int ptc_cast_ref(void *dst, ptc_dtype dt, const void *src, ptc_dtype st, size_t n)
{
    if (!ptc_cast_supported(dt, st))
        return ptc_error_set(PTC_E_UNSUPPORTED, "cannot convert %s to %s",
                             ptc_dtype_name(st), ptc_dtype_name(dt));
    if (dt == st) {
        if (n)
            memcpy(dst, src, n * ptc_dtype_size(dt));
        return PTC_OK;
    }
    for (size_t i = 0; i < n; i++)
        store_f32(dst, dt, i, load_f32(src, st, i));
    return PTC_OK;
}
