/* Float casts: the reference against an independent oracle (nearest value
 * by search over every finite encoding), exhaustive round trips of every
 * F16/BF16/F8 pattern, hand-picked rounding cases, the optimized CPU path
 * (ptc_dtype_convert) against the reference, and, where a GPU exists, the
 * CUDA kernel against the reference. PTC_REQUIRE_GPU=1 turns the GPU skip
 * into a failure (tests/gpu/test_cast_gpu.sh). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cast.h"
#include "kernels/cast_fast.h"
#include "ptc/build_config.h"
#include "ptc/convert.h"

#if PTC_WITH_CUDA
#include <cuda_runtime.h>
#endif

static uint32_t fbits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static float bitsf(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* ---- format descriptions for the oracle -------------------------------- */

typedef struct fmt {
    const char *name;
    ptc_dtype dt;
    int ebits, mbits;
    bool fn; /* e4m3fn */
    uint32_t (*dec)(uint32_t);
    uint32_t (*enc)(uint32_t);
    uint32_t (*fdec)(uint32_t);
    uint32_t (*fenc)(uint32_t);
} fmt;

static uint32_t d_f16(uint32_t v) { return ptc_cast_ref_f16_to_f32((uint16_t)v); }
static uint32_t e_f16(uint32_t f) { return ptc_cast_ref_f32_to_f16(f); }
static uint32_t d_bf16(uint32_t v) { return ptc_cast_ref_bf16_to_f32((uint16_t)v); }
static uint32_t e_bf16(uint32_t f) { return ptc_cast_ref_f32_to_bf16(f); }
static uint32_t d_e4(uint32_t v) { return ptc_cast_ref_e4m3_to_f32((uint8_t)v); }
static uint32_t e_e4(uint32_t f) { return ptc_cast_ref_f32_to_e4m3(f); }
static uint32_t d_e5(uint32_t v) { return ptc_cast_ref_e5m2_to_f32((uint8_t)v); }
static uint32_t e_e5(uint32_t f) { return ptc_cast_ref_f32_to_e5m2(f); }
static uint32_t fd_f16(uint32_t v) { return ptc_fast_f16_to_f32((uint16_t)v); }
static uint32_t fe_f16(uint32_t f) { return ptc_fast_f32_to_f16(f); }
static uint32_t fd_bf16(uint32_t v) { return ptc_fast_bf16_to_f32((uint16_t)v); }
static uint32_t fe_bf16(uint32_t f) { return ptc_fast_f32_to_bf16(f); }
static uint32_t fd_e4(uint32_t v) { return ptc_fast_e4m3_to_f32((uint8_t)v); }
static uint32_t fe_e4(uint32_t f) { return ptc_fast_f32_to_e4m3(f); }
static uint32_t fd_e5(uint32_t v) { return ptc_fast_e5m2_to_f32((uint8_t)v); }
static uint32_t fe_e5(uint32_t f) { return ptc_fast_f32_to_e5m2(f); }

static const fmt FMTS[] = {
    {"F16", PTC_DTYPE_F16, 5, 10, false, d_f16, e_f16, fd_f16, fe_f16},
    {"BF16", PTC_DTYPE_BF16, 8, 7, false, d_bf16, e_bf16, fd_bf16, fe_bf16},
    {"F8_E4M3", PTC_DTYPE_F8_E4M3, 4, 3, true, d_e4, e_e4, fd_e4, fe_e4},
    {"F8_E5M2", PTC_DTYPE_F8_E5M2, 5, 2, false, d_e5, e_e5, fd_e5, fe_e5},
};

static uint32_t npatterns(const fmt *F)
{
    return 1u << (1 + F->ebits + F->mbits);
}

/* Value of an encoding by the textbook formula, in double; NaN/inf flagged. */
static double formula(const fmt *F, uint32_t v, int *kind /* 0 finite 1 inf 2 nan */)
{
    int M = F->mbits, E = F->ebits, B = (1 << (E - 1)) - 1;
    uint32_t s = (v >> (E + M)) & 1, e = (v >> M) & ((1u << E) - 1), m = v & ((1u << M) - 1);
    *kind = 0;
    if (!F->fn && e == (1u << E) - 1) {
        *kind = m ? 2 : 1;
        return 0;
    }
    if (F->fn && e == (1u << E) - 1 && m == (1u << M) - 1) {
        *kind = 2;
        return 0;
    }
    double mag = e ? ldexp(1.0 + ldexp((double)m, -M), (int)e - B) : ldexp((double)m, 1 - B - M);
    return s ? -mag : mag;
}

#define NFMTS (sizeof FMTS / sizeof FMTS[0])

/* ---- decode: formula, round trip, fast == ref (exhaustive) -------------- */

static void test_decode_exhaustive(void **state)
{
    (void)state;
    for (size_t k = 0; k < NFMTS; k++) {
        const fmt *F = &FMTS[k];
        uint32_t bad = 0;
        for (uint32_t v = 0; v < npatterns(F); v++) {
            int kind;
            double want = formula(F, v, &kind);
            uint32_t got = F->dec(v);
            float g = bitsf(got);
            bool ok;
            if (kind == 2)
                ok = isnan(g) && (got >> 31) == (v >> (F->ebits + F->mbits));
            else if (kind == 1)
                ok = isinf(g) && ((g < 0) == ((v >> (F->ebits + F->mbits)) & 1));
            else
                ok = (double)g == want && !!signbit(g) == !!signbit(want) &&
                     ((v >> (F->ebits + F->mbits)) & 1) == (got >> 31);
            /* round trip through F32 is bit-exact for every pattern */
            ok = ok && F->enc(got) == v;
            /* the fast path agrees with the reference */
            ok = ok && F->fdec(v) == got && F->fenc(got) == v;
            if (!ok && bad++ < 5)
                print_error("%s pattern 0x%x: f32 0x%08x (fast 0x%08x) back 0x%x (fast 0x%x)\n",
                            F->name, v, got, F->fdec(v), F->enc(got), F->fenc(got));
        }
        assert_int_equal(bad, 0);
    }
}

static void test_known_values(void **state)
{
    (void)state;
    assert_int_equal(ptc_cast_ref_f16_to_f32(0x3C00), fbits(1.0f));
    assert_int_equal(ptc_cast_ref_f16_to_f32(0x7BFF), fbits(65504.0f));
    assert_int_equal(ptc_cast_ref_f16_to_f32(0x0001), fbits(ldexpf(1, -24)));
    assert_int_equal(ptc_cast_ref_f16_to_f32(0x8000), 0x80000000u);
    assert_int_equal(ptc_cast_ref_f16_to_f32(0xFC00), fbits(-INFINITY));
    assert_int_equal(ptc_cast_ref_bf16_to_f32(0x3F80), fbits(1.0f));
    assert_int_equal(ptc_cast_ref_bf16_to_f32(0x7F7F), 0x7F7F0000u);
    assert_int_equal(ptc_cast_ref_e4m3_to_f32(0x7E), fbits(448.0f));
    assert_int_equal(ptc_cast_ref_e4m3_to_f32(0x38), fbits(1.0f));
    assert_int_equal(ptc_cast_ref_e4m3_to_f32(0x01), fbits(ldexpf(1, -9)));
    assert_int_equal(ptc_cast_ref_e4m3_to_f32(0x08), fbits(ldexpf(1, -6)));
    assert_int_equal(ptc_cast_ref_e4m3_to_f32(0x78), fbits(256.0f)); /* exp 15 is finite */
    assert_true(isnan(bitsf(ptc_cast_ref_e4m3_to_f32(0x7F))));
    assert_true(isnan(bitsf(ptc_cast_ref_e4m3_to_f32(0xFF))));
    assert_int_equal(ptc_cast_ref_e5m2_to_f32(0x7B), fbits(57344.0f));
    assert_int_equal(ptc_cast_ref_e5m2_to_f32(0x3C), fbits(1.0f));
    assert_int_equal(ptc_cast_ref_e5m2_to_f32(0x01), fbits(ldexpf(1, -16)));
    assert_int_equal(ptc_cast_ref_e5m2_to_f32(0x7C), fbits(INFINITY));
    assert_true(isnan(bitsf(ptc_cast_ref_e5m2_to_f32(0x7D))));
}

/* ---- names: the safetensors spellings, bound to sizes and values -------- */

/* Every name parses to its dtype and back, with its size; the float names
 * decode a known bit pattern to 1.0 through ptc_dtype_convert, so a name
 * bound to the wrong format (F8_E4M3 and F8_E5M2 swapped) fails here even
 * though every round trip through the same table would still agree. */
static void test_names(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        ptc_dtype dt;
        size_t size;
        uint64_t one; /* the bits of 1.0, for float types */
    } want[] = {
        {"BOOL", PTC_DTYPE_BOOL, 1, 0},        {"U8", PTC_DTYPE_U8, 1, 0},
        {"I8", PTC_DTYPE_I8, 1, 0},            {"I16", PTC_DTYPE_I16, 2, 0},
        {"U16", PTC_DTYPE_U16, 2, 0},          {"I32", PTC_DTYPE_I32, 4, 0},
        {"U32", PTC_DTYPE_U32, 4, 0},          {"I64", PTC_DTYPE_I64, 8, 0},
        {"U64", PTC_DTYPE_U64, 8, 0},          {"F16", PTC_DTYPE_F16, 2, 0x3C00},
        {"BF16", PTC_DTYPE_BF16, 2, 0x3F80},   {"F32", PTC_DTYPE_F32, 4, 0x3F800000},
        {"F64", PTC_DTYPE_F64, 8, 0x3FF0000000000000ull},
        {"F8_E4M3", PTC_DTYPE_F8_E4M3, 1, 0x38}, {"F8_E5M2", PTC_DTYPE_F8_E5M2, 1, 0x3C},
    };
    assert_int_equal(sizeof want / sizeof want[0], PTC_DTYPE_COUNT);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ptc_dtype dt;
        assert_int_equal(ptc_dtype_parse(want[i].name, strlen(want[i].name), &dt), PTC_OK);
        assert_int_equal(dt, want[i].dt);
        assert_string_equal(ptc_dtype_name(dt), want[i].name);
        assert_int_equal(ptc_dtype_size(dt), want[i].size);
        assert_int_equal(ptc_dtype_is_float(dt), want[i].one != 0);
        if (want[i].one) {
            uint8_t src[8];
            for (size_t k = 0; k < want[i].size; k++) /* stored little-endian */
                src[k] = (uint8_t)(want[i].one >> (8 * k));
            float f = 0;
            assert_int_equal(ptc_dtype_convert(&f, PTC_DTYPE_F32, src, dt, 1), PTC_OK);
            assert_true(f == 1.0f);
        }
    }
    ptc_dtype dt;
    assert_int_equal(ptc_dtype_parse("f32", 3, &dt), PTC_E_FORMAT);
    assert_int_equal(ptc_dtype_parse("F3", 2, &dt), PTC_E_FORMAT);
    assert_int_equal(ptc_dtype_parse("F32 ", 4, &dt), PTC_E_FORMAT);
    assert_int_equal(ptc_dtype_parse("F8_E4M3FN", 9, &dt), PTC_E_FORMAT);
}

/* ---- encode: hand-picked rounding cases --------------------------------- */

typedef struct rcase {
    int fmt; /* index into FMTS */
    float in;
    uint32_t want;
} rcase;

static void test_rounding_cases(void **state)
{
    (void)state;
    const rcase cases[] = {
        /* F16: ties to even, subnormals, overflow */
        {0, 1.0f, 0x3C00},
        {0, 1.0f + 0x1p-11f, 0x3C00},             /* tie, even stays */
        {0, 1.0f + 3 * 0x1p-11f, 0x3C02},         /* tie, odd rounds up */
        {0, 1.0f + 0x1p-11f + 0x1p-23f, 0x3C01},  /* just above the tie */
        {0, 0x1p-25f, 0x0000},                    /* half the smallest subnormal */
        {0, 0x1p-25f * 1.0000001f, 0x0001},
        {0, 3 * 0x1p-25f, 0x0002},                /* subnormal tie to even */
        {0, 5 * 0x1p-25f, 0x0002},
        {0, 0x1p-24f, 0x0001},
        {0, (1023.5f) * 0x1p-24f, 0x0400},        /* largest subnormal tie -> min normal */
        {0, 0x1p-14f, 0x0400},
        {0, 0x1p-149f, 0x0000},                   /* F32 subnormal */
        {0, -0.0f, 0x8000},
        {0, 65504.0f, 0x7BFF},
        {0, 65519.99f, 0x7BFF},
        {0, 65520.0f, 0x7C00},                    /* tie with "65536" -> inf */
        {0, 1e10f, 0x7C00},
        {0, -1e10f, 0xFC00},
        {0, INFINITY, 0x7C00},
        /* BF16 */
        {1, 1.0f + 0x1p-8f, 0x3F80},
        {1, 1.0f + 3 * 0x1p-8f, 0x3F82},
        {1, 0x1p-133f, 0x0001},                   /* smallest BF16 subnormal */
        {1, 0x1p-134f, 0x0000},                   /* tie to even zero */
        {1, 3 * 0x1p-134f, 0x0002},
        {1, 3.4028235e38f, 0x7F80},               /* FLT_MAX rounds to inf */
        {1, -INFINITY, 0xFF80},
        /* F8_E4M3 (fn): saturation, no inf */
        {2, 448.0f, 0x7E},
        {2, 464.0f, 0x7E},                        /* tie between 448 and 480 */
        {2, 470.0f, 0x7E},                        /* saturates */
        {2, 1e10f, 0x7E},
        {2, INFINITY, 0x7E},
        {2, -INFINITY, 0xFE},
        {2, -500.0f, 0xFE},
        {2, 0x1p-10f, 0x00},                      /* half the smallest subnormal */
        {2, 0x1p-10f * 1.01f, 0x01},
        {2, 3 * 0x1p-10f, 0x02},
        {2, 1.0625f, 0x38},                       /* 1 + 1/16: tie, even */
        {2, 1.1875f, 0x3A},                       /* 1 + 3/16: tie, odd up */
        {2, 240.0f, 0x77},
        {2, 256.0f, 0x78},
        /* F8_E5M2: IEEE, overflow to inf */
        {3, 57344.0f, 0x7B},
        {3, 61439.0f, 0x7B},
        {3, 61440.0f, 0x7C},                      /* tie -> even -> inf */
        {3, 0x1p-17f, 0x00},
        {3, 3 * 0x1p-17f, 0x02},
        {3, 1.125f, 0x3C},                        /* 1 + 1/8: tie, even */
        {3, 1.375f, 0x3E},                        /* 1 + 3/8: tie, odd up */
        {3, -INFINITY, 0xFC},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const fmt *F = &FMTS[cases[i].fmt];
        uint32_t in = fbits(cases[i].in);
        uint32_t r = F->enc(in), f = F->fenc(in);
        if (r != cases[i].want || f != cases[i].want) {
            print_error("%s(%a): want 0x%x, ref 0x%x, fast 0x%x\n", F->name,
                        (double)cases[i].in, cases[i].want, r, f);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

static void test_nan_cases(void **state)
{
    (void)state;
    const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u,
                             0x7FFFFFFFu, 0x7FA00000u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        for (size_t k = 0; k < NFMTS; k++) {
            const fmt *F = &FMTS[k];
            uint32_t e = F->enc(nans[i]);
            assert_int_equal(e, F->fenc(nans[i]));
            assert_true(isnan(bitsf(F->dec(e))));
            assert_int_equal(e >> (F->ebits + F->mbits), nans[i] >> 31);
        }
    }
    /* sign-only payloads become quiet NaNs, never infinity */
    assert_int_equal(ptc_cast_ref_f32_to_f16(0x7F800001u), 0x7E00);
    assert_int_equal(ptc_cast_ref_f32_to_bf16(0x7F800001u), 0x7FC0);
    assert_int_equal(ptc_cast_ref_f32_to_e4m3(0xFFC00000u), 0xFF);
    assert_int_equal(ptc_cast_ref_f32_to_e5m2(0x7F800001u), 0x7E);
}

/* ---- encode: reference vs an independent nearest-value oracle ---------- */

typedef struct entry {
    double v;
    uint32_t enc;
} entry;

static int cmp_entry(const void *a, const void *b)
{
    double x = ((const entry *)a)->v, y = ((const entry *)b)->v;
    return x < y ? -1 : x > y;
}

/* Sorted non-negative finite values of F. */
static entry *finite_table(const fmt *F, size_t *n)
{
    entry *t = malloc(sizeof *t * npatterns(F));
    size_t k = 0;
    uint32_t half = npatterns(F) / 2;
    for (uint32_t v = 0; v < half; v++) {
        int kind;
        double x = formula(F, v, &kind);
        if (kind == 0)
            t[k++] = (entry){x, v};
    }
    qsort(t, k, sizeof *t, cmp_entry);
    *n = k;
    return t;
}

static uint32_t oracle(const fmt *F, const entry *t, size_t n, uint32_t in)
{
    float x = bitsf(in);
    uint32_t sbit = (in >> 31) << (F->ebits + F->mbits);
    uint32_t inf = ((1u << F->ebits) - 1) << F->mbits;
    double a = fabs((double)x);
    double max = t[n - 1].v;
    if (F->fn) {
        if (a >= max)
            return sbit | t[n - 1].enc;
    } else {
        double next = ldexp(1.0, (1 << (F->ebits - 1))); /* 2^(emax+1) */
        if (isinf(a) || a >= (max + next) / 2)
            return sbit | inf;
    }
    size_t lo = 0, hi = n - 1; /* t[lo].v <= a < t[hi].v */
    if (a >= max)
        return sbit | t[n - 1].enc;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (t[mid].v <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dl = a - t[lo].v, dh = t[hi].v - a;
    if (dl < dh)
        return sbit | t[lo].enc;
    if (dh < dl)
        return sbit | t[hi].enc;
    return sbit | ((t[lo].enc & 1) ? t[hi].enc : t[lo].enc);
}

static void test_encode_oracle(void **state)
{
    (void)state;
    for (size_t k = 0; k < NFMTS; k++) {
        const fmt *F = &FMTS[k];
        size_t n;
        entry *t = finite_table(F, &n);
        int bad = 0;
        /* every midpoint and neighbour of consecutive values, and random bits */
        for (size_t i = 0; i + 1 < n && bad < 5; i++) {
            float mid = (float)((t[i].v + t[i + 1].v) / 2); /* exact in F32 */
            uint32_t mb = fbits(mid);
            const uint32_t probes[] = {mb, mb - 1, mb + 1, fbits((float)t[i].v),
                                       mb | 0x80000000u};
            for (size_t p = 0; p < 5; p++) {
                uint32_t want = oracle(F, t, n, probes[p]);
                uint32_t r = F->enc(probes[p]), f = F->fenc(probes[p]);
                if (r != want || f != want) {
                    if (bad++ < 5)
                        print_error("%s(0x%08x): oracle 0x%x ref 0x%x fast 0x%x\n", F->name,
                                    probes[p], want, r, f);
                }
            }
        }
        for (int i = 0; i < 400000; i++) {
            uint32_t x = rnd32();
            if ((x & 0x7FFFFFFFu) > 0x7F800000u)
                continue;
            uint32_t want = oracle(F, t, n, x);
            uint32_t r = F->enc(x), f = F->fenc(x);
            if ((r != want || f != want) && bad++ < 5)
                print_error("%s(0x%08x): oracle 0x%x ref 0x%x fast 0x%x\n", F->name, x, want,
                            r, f);
        }
        free(t);
        assert_int_equal(bad, 0);
    }
}

/* ---- ptc_dtype_convert (optimized) vs ptc_cast_ref ---------------------- */

static const ptc_dtype FLOATS[] = {PTC_DTYPE_F16, PTC_DTYPE_BF16, PTC_DTYPE_F32,
                                   PTC_DTYPE_F64, PTC_DTYPE_F8_E4M3, PTC_DTYPE_F8_E5M2};
#define NFLOATS (sizeof FLOATS / sizeof FLOATS[0])

/* Random source bits; F32/F64 sources get mostly in-range values so that the
 * narrow formats see all their binades. */
static void fill_source(unsigned char *buf, ptc_dtype st, size_t n)
{
    size_t es = ptc_dtype_size(st);
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rnd32();
        if (st == PTC_DTYPE_F32) {
            uint32_t b = (i % 3) ? ((r & 0x80FFFFFFu) | ((uint32_t)(96 + rnd32() % 64) << 23)) : r;
            memcpy(buf + 4 * i, &b, 4);
        } else if (st == PTC_DTYPE_F64) {
            double d = (i % 5 == 4) ? NAN : ldexp((double)r - 2147483648.0, (int)(rnd32() % 80) - 60);
            if (i % 7 == 6) {
                uint64_t u = ((uint64_t)r << 32) | rnd32();
                memcpy(&d, &u, 8);
            }
            memcpy(buf + 8 * i, &d, 8);
        } else {
            memcpy(buf + es * i, &r, es);
        }
    }
}

static void test_convert_matches_ref(void **state)
{
    (void)state;
    enum { N = 20000 };
    unsigned char *src = malloc(N * 8), *a = malloc(N * 8 + 2), *b = malloc(N * 8 + 2);
    for (size_t i = 0; i < NFLOATS; i++) {
        for (size_t j = 0; j < NFLOATS; j++) {
            ptc_dtype st = FLOATS[i], dt = FLOATS[j];
            fill_source(src, st, N);
            memset(a, 0xAB, N * 8 + 2);
            memset(b, 0xCD, N * 8 + 2);
            /* unaligned destination on purpose */
            assert_int_equal(ptc_dtype_convert(a + 1, dt, src, st, N), PTC_OK);
            assert_int_equal(ptc_cast_ref(b + 1, dt, src, st, N), PTC_OK);
            size_t bytes = N * ptc_dtype_size(dt);
            if (memcmp(a + 1, b + 1, bytes) != 0) {
                size_t es = ptc_dtype_size(dt);
                for (size_t e = 0, shown = 0; e < N && shown < 5; e++)
                    if (memcmp(a + 1 + e * es, b + 1 + e * es, es) != 0) {
                        print_error("%s->%s element %zu differs\n", ptc_dtype_name(st),
                                    ptc_dtype_name(dt), e);
                        shown++;
                    }
                fail();
            }
            assert_int_equal(a[1 + bytes], 0xAB); /* nothing written past the end */
        }
    }
    free(src);
    free(a);
    free(b);
}

static void test_convert_identity_and_unsupported(void **state)
{
    (void)state;
    int32_t in[5] = {1, -2, 3, 0x7FFFFFFF, -7}, out[5] = {0};
    assert_int_equal(ptc_dtype_convert(out, PTC_DTYPE_I32, in, PTC_DTYPE_I32, 5), PTC_OK);
    assert_memory_equal(in, out, sizeof in);
    float f[5];
    assert_int_equal(ptc_dtype_convert(f, PTC_DTYPE_F32, in, PTC_DTYPE_I32, 5), PTC_E_UNSUPPORTED);
    assert_non_null(strstr(ptc_last_error(), "I32"));
    assert_int_equal(ptc_cast_ref(f, PTC_DTYPE_U8, in, PTC_DTYPE_F32, 5), PTC_E_UNSUPPORTED);
    assert_int_equal(ptc_dtype_convert(f, PTC_DTYPE_F32, in, (ptc_dtype)99, 1), PTC_E_UNSUPPORTED);
    assert_int_equal(ptc_dtype_convert(NULL, PTC_DTYPE_F16, NULL, PTC_DTYPE_F32, 0), PTC_OK);
    /* F64 <-> F32 is the C conversion; F64 -> F16 goes through F32 */
    double d[3] = {1.0 / 3.0, -1e300, 65504.0};
    float g[3];
    uint16_t h[3];
    assert_int_equal(ptc_dtype_convert(g, PTC_DTYPE_F32, d, PTC_DTYPE_F64, 3), PTC_OK);
    assert_true(g[0] == (float)(1.0 / 3.0) && isinf(g[1]) && g[1] < 0 && g[2] == 65504.0f);
    assert_int_equal(ptc_dtype_convert(h, PTC_DTYPE_F16, d, PTC_DTYPE_F64, 3), PTC_OK);
    assert_int_equal(h[0], 0x3555);
    assert_int_equal(h[1], 0xFC00);
    assert_int_equal(h[2], 0x7BFF);
}

/* ---- CUDA kernel vs reference (only where a GPU exists) ----------------- */

#if PTC_WITH_CUDA
static int gpu_present(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static void gpu_compare(ptc_dtype dt, ptc_dtype st, const unsigned char *src, size_t n)
{
    size_t sb = n * ptc_dtype_size(st), db = n * ptc_dtype_size(dt);
    void *dsrc = NULL, *ddst = NULL;
    assert_int_equal(cudaMalloc(&dsrc, sb), cudaSuccess);
    assert_int_equal(cudaMalloc(&ddst, db), cudaSuccess);
    assert_int_equal(cudaMemcpy(dsrc, src, sb, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(ptc_cast_cuda(ddst, dt, dsrc, st, n, 0), PTC_OK);
    unsigned char *got = malloc(db), *want = malloc(db);
    assert_int_equal(cudaMemcpy(got, ddst, db, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(ptc_cast_ref(want, dt, src, st, n), PTC_OK);
    if (memcmp(got, want, db) != 0) {
        size_t es = ptc_dtype_size(dt);
        for (size_t e = 0, shown = 0; e < n && shown < 5; e++)
            if (memcmp(got + e * es, want + e * es, es) != 0) {
                print_error("gpu %s->%s element %zu differs\n", ptc_dtype_name(st),
                            ptc_dtype_name(dt), e);
                shown++;
            }
        fail();
    }
    free(got);
    free(want);
    cudaFree(dsrc);
    cudaFree(ddst);
}

static void test_cuda_matches_ref(void **state)
{
    (void)state;
    if (!gpu_present()) {
        const char *req = getenv("PTC_REQUIRE_GPU");
        if (req && strcmp(req, "1") == 0)
            fail_msg("PTC_REQUIRE_GPU=1 but no CUDA device is usable");
        skip();
    }
    /* every F16/BF16 pattern and every F8 pattern to F32 and back */
    unsigned char *buf = malloc(65536 * 2);
    for (uint32_t v = 0; v < 65536; v++) {
        uint16_t h = (uint16_t)v;
        memcpy(buf + 2 * v, &h, 2);
    }
    gpu_compare(PTC_DTYPE_F32, PTC_DTYPE_F16, buf, 65536);
    gpu_compare(PTC_DTYPE_F32, PTC_DTYPE_BF16, buf, 65536);
    gpu_compare(PTC_DTYPE_F32, PTC_DTYPE_F8_E4M3, buf, 256);
    gpu_compare(PTC_DTYPE_F32, PTC_DTYPE_F8_E5M2, buf, 256);
    free(buf);
    enum { N = 1 << 20 };
    unsigned char *src = malloc((size_t)N * 8);
    for (size_t i = 0; i < NFLOATS; i++)
        for (size_t j = 0; j < NFLOATS; j++) {
            fill_source(src, FLOATS[i], N);
            gpu_compare(FLOATS[j], FLOATS[i], src, N);
        }
    free(src);
    assert_int_equal(ptc_cast_cuda(NULL, PTC_DTYPE_F32, NULL, PTC_DTYPE_I32, 1, 0),
                     PTC_E_UNSUPPORTED);
}
#else
static void test_cuda_matches_ref(void **state)
{
    (void)state;
    const char *req = getenv("PTC_REQUIRE_GPU");
    if (req && strcmp(req, "1") == 0)
        fail_msg("PTC_REQUIRE_GPU=1 but this build has no CUDA");
    skip();
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_exhaustive),
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_rounding_cases),
        cmocka_unit_test(test_nan_cases),
        cmocka_unit_test(test_encode_oracle),
        cmocka_unit_test(test_convert_matches_ref),
        cmocka_unit_test(test_convert_identity_and_unsupported),
        cmocka_unit_test(test_cuda_matches_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
