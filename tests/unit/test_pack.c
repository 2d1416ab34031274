/* The optimized strided copy must produce exactly the reference's bytes on
 * random shapes, strides (permuted, padded, negative, broadcast) and element
 * sizes; plus fixed cases with known outcomes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/pack.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static int64_t rnd_in(int64_t lo, int64_t hi) /* [lo, hi] */
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* Strides of a layout that stores the box in a permuted dim order, padded:
 * injective, so usable as a destination. */
static void make_layout(int ndim, const int64_t *ext, int64_t *st, bool negate)
{
    int perm[PTC_MAX_DIMS];
    for (int d = 0; d < ndim; d++)
        perm[d] = d;
    for (int d = ndim - 1; d > 0; d--) {
        int j = (int)rnd_in(0, d);
        int t = perm[d];
        perm[d] = perm[j];
        perm[j] = t;
    }
    int64_t s = rnd_in(1, 2);
    for (int k = ndim - 1; k >= 0; k--) {
        int d = perm[k];
        st[d] = s;
        s *= ext[d] + rnd_in(0, 2);
    }
    if (negate)
        for (int d = 0; d < ndim; d++)
            if (rnd() % 4 == 0)
                st[d] = -st[d];
}

/* Extent of memory touched, in elements: [min, max]. */
static void span(int ndim, const int64_t *ext, const int64_t *st, int64_t *mn, int64_t *mx)
{
    *mn = *mx = 0;
    for (int d = 0; d < ndim; d++) {
        if (ext[d] == 0)
            continue;
        int64_t v = (ext[d] - 1) * st[d];
        if (v < 0)
            *mn += v;
        else
            *mx += v;
    }
}

static void test_random_vs_reference(void **state)
{
    (void)state;
    static const size_t sizes[] = {1, 2, 4, 8, 3, 16};
    for (int iter = 0; iter < 3000; iter++) {
        int ndim = (int)rnd_in(0, 6);
        int64_t ext[PTC_MAX_DIMS], ds[PTC_MAX_DIMS], ss[PTC_MAX_DIMS];
        for (int d = 0; d < ndim; d++)
            ext[d] = rnd() % 20 == 0 ? 0 : rnd_in(1, ndim > 3 ? 4 : 9);
        size_t es = sizes[rnd() % (sizeof sizes / sizeof sizes[0])];
        make_layout(ndim, ext, ds, rnd() % 3 == 0);
        make_layout(ndim, ext, ss, rnd() % 3 == 0);
        for (int d = 0; d < ndim; d++)
            if (rnd() % 10 == 0)
                ss[d] = 0; /* broadcast source */
        bool null_dst = rnd() % 5 == 0, null_src = rnd() % 5 == 0;
        int64_t dmn, dmx, smn, smx, rm[PTC_MAX_DIMS];
        int64_t s = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            rm[d] = s;
            s *= ext[d] ? ext[d] : 1;
        }
        span(ndim, ext, null_dst ? rm : ds, &dmn, &dmx);
        span(ndim, ext, null_src ? rm : ss, &smn, &smx);
        size_t dn = (size_t)(dmx - dmn + 1) * es, sn = (size_t)(smx - smn + 1) * es;
        unsigned char *src = malloc(sn), *d1 = malloc(dn), *d2 = malloc(dn);
        assert_non_null(src);
        assert_non_null(d1);
        assert_non_null(d2);
        for (size_t i = 0; i < sn; i++)
            src[i] = (unsigned char)rnd();
        for (size_t i = 0; i < dn; i++)
            d1[i] = d2[i] = (unsigned char)rnd();
        unsigned char *sb = src - smn * (int64_t)es;
        assert_int_equal(ptc_pack_copy_ref(d1 - dmn * (int64_t)es, null_dst ? NULL : ds, sb,
                                           null_src ? NULL : ss, ext, ndim, es),
                         PTC_OK);
        assert_int_equal(ptc_pack_copy(d2 - dmn * (int64_t)es, null_dst ? NULL : ds, sb,
                                       null_src ? NULL : ss, ext, ndim, es),
                         PTC_OK);
        if (memcmp(d1, d2, dn) != 0) {
            for (size_t i = 0; i < dn; i++)
                if (d1[i] != d2[i]) {
                    print_error("iter %d: first mismatch at byte %zu: ref %u opt %u "
                                "(ndim %d es %zu)\n",
                                iter, i, d1[i], d2[i], ndim, es);
                    break;
                }
            fail();
        }
        free(src);
        free(d1);
        free(d2);
    }
}

/* Known outcome: transpose of a 2x3 matrix. */
static void test_transpose(void **state)
{
    (void)state;
    const int32_t a[6] = {1, 2, 3, 4, 5, 6};
    int32_t t1[6] = {0}, t2[6] = {0};
    const int64_t ext[2] = {2, 3}, dst_st[2] = {1, 2};
    assert_int_equal(ptc_pack_copy(t1, dst_st, a, NULL, ext, 2, 4), PTC_OK);
    assert_int_equal(ptc_pack_copy_ref(t2, dst_st, a, NULL, ext, 2, 4), PTC_OK);
    const int32_t want[6] = {1, 4, 2, 5, 3, 6};
    assert_memory_equal(t1, want, sizeof want);
    assert_memory_equal(t2, want, sizeof want);
}

/* A sub-box of a row-major tensor: rows are contiguous runs. */
static void test_subbox_and_scalar(void **state)
{
    (void)state;
    uint16_t m[4][5];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            m[i][j] = (uint16_t)(10 * i + j);
    uint16_t out[2][3];
    const int64_t ext[2] = {2, 3}, src_st[2] = {5, 1};
    assert_int_equal(ptc_pack_copy(out, NULL, &m[1][2], src_st, ext, 2, 2), PTC_OK);
    const uint16_t want[2][3] = {{12, 13, 14}, {22, 23, 24}};
    assert_memory_equal(out, want, sizeof want);
    uint64_t x = 0x1122334455667788ull, y = 0;
    assert_int_equal(ptc_pack_copy(&y, NULL, &x, NULL, NULL, 0, 8), PTC_OK);
    assert_true(x == y);
    assert_int_equal(ptc_pack_copy(&y, NULL, &x, NULL, ext, 9, 8), PTC_E_INVAL);
    assert_int_equal(ptc_pack_copy(&y, NULL, &x, NULL, ext, 2, 0), PTC_E_INVAL);
    const int64_t neg[1] = {-1};
    assert_int_equal(ptc_pack_copy_ref(&y, NULL, &x, NULL, neg, 1, 8), PTC_E_INVAL);
}

/* Simplification collapses a fully contiguous 3-d copy into one run. */
static void test_simplify(void **state)
{
    (void)state;
    int64_t e[PTC_MAX_DIMS], d[PTC_MAX_DIMS], s[PTC_MAX_DIMS];
    int n;
    bool empty;
    const int64_t ext[4] = {3, 1, 4, 5};
    assert_int_equal(ptc_pack_simplify(e, d, s, &n, &empty, NULL, NULL, ext, 4, 4), PTC_OK);
    assert_int_equal(n, 1);
    assert_false(empty);
    assert_int_equal(e[0], 60);
    assert_int_equal(d[0], 1);
    const int64_t st[4] = {40, 99, 5, 1}; /* padded rows: dims 2,3 merge, 0 does not */
    assert_int_equal(ptc_pack_simplify(e, d, s, &n, &empty, st, NULL, ext, 4, 4), PTC_OK);
    assert_int_equal(n, 2);
    assert_int_equal(e[0], 3);
    assert_int_equal(e[1], 20);
    assert_int_equal(d[0], 40);
    assert_int_equal(s[0], 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_vs_reference),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_subbox_and_scalar),
        cmocka_unit_test(test_simplify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
