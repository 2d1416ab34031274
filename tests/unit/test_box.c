/* Boxes, the split rule and flat-range decomposition, checked against closed
 * forms and brute force over small shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ptc/box.h"

static void test_split_closed_form(void **state)
{
    (void)state;
    for (int64_t S = 0; S <= 40; S++)
        for (int64_t n = 1; n <= 12; n++) {
            int64_t c = (S + n - 1) / n, prev = 0;
            for (int64_t i = 0; i < n; i++) {
                int64_t lo, hi;
                ptc_split(S, n, i, &lo, &hi);
                int64_t elo = i * c < S ? i * c : S;
                int64_t ehi = (i + 1) * c < S ? (i + 1) * c : S;
                assert_int_equal(lo, elo);
                assert_int_equal(hi, ehi);
                assert_int_equal(lo, prev); /* parts tile [0, S) in order */
                prev = hi;
            }
            assert_int_equal(prev, S);
        }
}

static void test_split_examples(void **state)
{
    (void)state;
    int64_t lo, hi;
    /* torch.chunk(5, 4): sizes 2, 2, 1, 0 */
    ptc_split(5, 4, 0, &lo, &hi);
    assert_true(lo == 0 && hi == 2);
    ptc_split(5, 4, 2, &lo, &hi);
    assert_true(lo == 4 && hi == 5);
    ptc_split(5, 4, 3, &lo, &hi);
    assert_true(lo == 5 && hi == 5);
    /* 6 into 4: c=2 -> 2,2,2,0 (an empty part although 6 >= 4) */
    ptc_split(6, 4, 3, &lo, &hi);
    assert_true(lo == 6 && hi == 6);
    /* 1 into 3: 1,0,0 */
    ptc_split(1, 3, 1, &lo, &hi);
    assert_true(lo == 1 && hi == 1);
    /* 0 into anything: all empty */
    ptc_split(0, 7, 6, &lo, &hi);
    assert_true(lo == 0 && hi == 0);
}

static void test_split_huge(void **state)
{
    (void)state;
    int64_t S = INT64_MAX, lo, hi, prev = 0;
    for (int64_t i = 0; i < 3; i++) {
        ptc_split(S, 3, i, &lo, &hi);
        assert_int_equal(lo, prev);
        assert_true(hi >= lo && hi <= S);
        prev = hi;
    }
    assert_int_equal(prev, S);
    ptc_split(S - 1, 2, 1, &lo, &hi);
    assert_int_equal(lo, (S - 1) / 2 + ((S - 1) % 2 != 0));
    assert_int_equal(hi, S - 1);
}

static void test_box_basics(void **state)
{
    (void)state;
    int64_t shape[3] = {2, 3, 4};
    ptc_box full, b, r;
    ptc_box_full(&full, 3, shape);
    assert_int_equal(ptc_box_volume(&full), 24);
    assert_false(ptc_box_is_empty(&full));
    b = full;
    b.lo[1] = 1;
    b.hi[2] = 2;
    assert_int_equal(ptc_box_volume(&b), 2 * 2 * 2);
    assert_true(ptc_box_intersect(&r, &full, &b));
    assert_true(ptc_box_equal(&r, &b));
    ptc_box c = full;
    c.lo[2] = 2;
    assert_false(ptc_box_intersect(&r, &b, &c));
    assert_true(ptc_box_is_empty(&r));
    assert_int_equal(ptc_box_volume(&r), 0);
    /* scalars: volume 1, never empty, intersect with themselves */
    ptc_box s0;
    ptc_box_full(&s0, 0, NULL);
    assert_int_equal(ptc_box_volume(&s0), 1);
    assert_false(ptc_box_is_empty(&s0));
    assert_true(ptc_box_intersect(&r, &s0, &s0));
    /* different ranks never intersect nor compare equal */
    assert_false(ptc_box_intersect(&r, &s0, &full));
    assert_false(ptc_box_equal(&s0, &full));
    int64_t st[3];
    ptc_strides_row_major(3, shape, st);
    assert_true(st[0] == 12 && st[1] == 4 && st[2] == 1);
}

static void test_piece_index_restrict(void **state)
{
    (void)state;
    ptc_piece p;
    memset(&p, 0, sizeof p);
    p.box.ndim = 2;
    p.box.lo[0] = 4;
    p.box.hi[0] = 8;
    p.box.lo[1] = 2;
    p.box.hi[1] = 5;
    p.local_offset = 10;
    p.local_stride[0] = 7;
    p.local_stride[1] = 1;
    int64_t g[2] = {6, 3};
    assert_int_equal(ptc_piece_local_index(&p, g), 10 + 2 * 7 + 1);
    ptc_box sub = p.box;
    sub.lo[0] = 5;
    sub.lo[1] = 4;
    ptc_piece q;
    ptc_piece_restrict(&q, &p, &sub);
    assert_true(ptc_box_equal(&q.box, &sub));
    assert_int_equal(q.local_offset, 10 + 7 + 2);
    int64_t g2[2] = {7, 4};
    assert_int_equal(ptc_piece_local_index(&q, g2), ptc_piece_local_index(&p, g2));
}

/* ---- flat decomposition, brute force ---------------------------------------- */

static int64_t flat_of(int nd, const int64_t *st, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < nd; d++)
        f += idx[d] * st[d];
    return f;
}

static void unflat(int nd, const int64_t *st, int64_t f, int64_t *idx)
{
    for (int d = 0; d < nd; d++) {
        idx[d] = f / st[d];
        f %= st[d];
    }
}

/* Minimal number of flat-contiguous boxes covering [p, b): DP over p. */
static int min_cover(int nd, const int64_t *shape, int64_t a, int64_t b)
{
    int64_t st[PTC_MAX_DIMS];
    ptc_strides_row_major(nd, shape, st);
    int best[256];
    best[b - a] = 0;
    for (int64_t p = b - 1; p >= a; p--) {
        int64_t lo[PTC_MAX_DIMS], hi[PTC_MAX_DIMS];
        unflat(nd, st, p, lo);
        for (int d = 0; d < nd; d++)
            hi[d] = lo[d] + 1;
        int m = 1 << 20;
        for (;;) {
            int64_t vol = 1, last[PTC_MAX_DIMS];
            for (int d = 0; d < nd; d++) {
                vol *= hi[d] - lo[d];
                last[d] = hi[d] - 1;
            }
            int64_t q = p + vol;
            if (flat_of(nd, st, last) - p + 1 == vol && q <= b && best[q - a] + 1 < m)
                m = best[q - a] + 1;
            int d = nd - 1;
            while (d >= 0 && hi[d] == shape[d]) {
                hi[d] = lo[d] + 1;
                d--;
            }
            if (d < 0)
                break;
            hi[d]++;
        }
        best[p - a] = m;
    }
    return best[0];
}

static void check_flat(int nd, const int64_t *shape)
{
    int64_t vol = 1, st[PTC_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        vol *= shape[d];
    ptc_strides_row_major(nd, shape, st);
    for (int64_t a = 0; a <= vol; a++)
        for (int64_t b = a; b <= vol; b++) {
            ptc_box out[2 * PTC_MAX_DIMS];
            size_t n = 99;
            assert_int_equal(ptc_flat_to_boxes(out, &n, nd, shape, a, b), PTC_OK);
            if (a == b) {
                assert_int_equal(n, 0);
                continue;
            }
            assert_true(n <= (size_t)(nd ? 2 * nd - 1 : 1));
            /* boxes are contiguous, in order, and tile [a, b) exactly */
            int64_t p = a;
            for (size_t i = 0; i < n; i++) {
                assert_int_equal(out[i].ndim, nd);
                int64_t v = ptc_box_volume(&out[i]), last[PTC_MAX_DIMS];
                assert_true(v > 0);
                for (int d = 0; d < nd; d++) {
                    assert_true(out[i].lo[d] >= 0 && out[i].hi[d] <= shape[d]);
                    last[d] = out[i].hi[d] - 1;
                }
                assert_int_equal(flat_of(nd, st, out[i].lo), p);
                assert_int_equal(flat_of(nd, st, last), p + v - 1);
                p += v;
            }
            assert_int_equal(p, b);
            if (nd > 0)
                assert_int_equal((int)n, min_cover(nd, shape, a, b));
        }
}

static void test_flat_bruteforce(void **state)
{
    (void)state;
    int64_t sh[PTC_MAX_DIMS] = {0};
    check_flat(0, sh);
    for (int64_t x = 0; x <= 6; x++) {
        sh[0] = x;
        check_flat(1, sh);
    }
    for (int64_t x = 0; x <= 4; x++)
        for (int64_t y = 0; y <= 4; y++) {
            sh[0] = x;
            sh[1] = y;
            check_flat(2, sh);
        }
    for (int64_t x = 1; x <= 3; x++)
        for (int64_t y = 1; y <= 3; y++)
            for (int64_t z = 1; z <= 3; z++) {
                sh[0] = x;
                sh[1] = y;
                sh[2] = z;
                check_flat(3, sh);
            }
    for (int d = 0; d < 4; d++)
        sh[d] = 2;
    check_flat(4, sh);
    sh[1] = 3;
    check_flat(4, sh);
}

static void test_flat_examples(void **state)
{
    (void)state;
    /* [3,4], range [2, 11): row 0 cols 2..4, row 1, row 2 cols 0..3 */
    int64_t sh[2] = {3, 4};
    ptc_box out[2 * PTC_MAX_DIMS];
    size_t n;
    assert_int_equal(ptc_flat_to_boxes(out, &n, 2, sh, 2, 11), PTC_OK);
    assert_int_equal(n, 3);
    assert_true(out[0].lo[0] == 0 && out[0].hi[0] == 1 && out[0].lo[1] == 2 && out[0].hi[1] == 4);
    assert_true(out[1].lo[0] == 1 && out[1].hi[0] == 2 && out[1].lo[1] == 0 && out[1].hi[1] == 4);
    assert_true(out[2].lo[0] == 2 && out[2].hi[0] == 3 && out[2].lo[1] == 0 && out[2].hi[1] == 3);
    /* a whole tensor is one box */
    assert_int_equal(ptc_flat_to_boxes(out, &n, 2, sh, 0, 12), PTC_OK);
    assert_int_equal(n, 1);
    /* out of range */
    assert_int_equal(ptc_flat_to_boxes(out, &n, 2, sh, 0, 13), PTC_E_RANGE);
    assert_int_equal(ptc_flat_to_boxes(out, &n, 2, sh, 5, 4), PTC_E_RANGE);
    assert_int_equal(ptc_flat_to_boxes(out, &n, 2, sh, -1, 4), PTC_E_RANGE);
    /* a large tensor: worst case 2*ndim-1 boxes */
    int64_t big[4] = {1000, 1000, 1000, 1000};
    assert_int_equal(ptc_flat_to_boxes(out, &n, 4, big, 1, (int64_t)1000000000000 - 1), PTC_OK);
    assert_int_equal(n, 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_closed_form),
        cmocka_unit_test(test_split_examples),
        cmocka_unit_test(test_split_huge),
        cmocka_unit_test(test_box_basics),
        cmocka_unit_test(test_piece_index_restrict),
        cmocka_unit_test(test_flat_bruteforce),
        cmocka_unit_test(test_flat_examples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
