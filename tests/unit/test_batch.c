/* Batch policies (ptc_batch_*_policy): exact figures for the cases users
 * meet (5 records over 4 ranks, B not dividing N, D not dividing B) and an
 * exhaustive cross-check of parts, steps and dropped positions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ptc/dataset.h"

enum { DL = PTC_BATCH_POLICY_DROP_LAST, EQ = PTC_BATCH_POLICY_EQUAL };

static uint64_t part_len(uint64_t n, uint64_t b, uint64_t x, uint64_t d, uint64_t r,
                         uint64_t k, unsigned pol)
{
    uint64_t lo, hi;
    assert_int_equal(ptc_batch_part_policy(n, b, x, d, r, k, pol, &lo, &hi), PTC_OK);
    return hi - lo;
}

static uint64_t dropped(uint64_t n, uint64_t b, uint64_t x, uint64_t d, unsigned pol)
{
    uint64_t c = 99;
    assert_int_equal(ptc_batch_dropped(n, b, x, d, pol, &c), PTC_OK);
    return c;
}

static void test_names(void **state)
{
    (void)state;
    unsigned p = 99;
    assert_int_equal(ptc_batch_policy_parse("none", &p), PTC_OK);
    assert_int_equal(p, 0);
    assert_int_equal(ptc_batch_policy_parse("drop-last", &p), PTC_OK);
    assert_int_equal(p, DL);
    assert_int_equal(ptc_batch_policy_parse("equal", &p), PTC_OK);
    assert_int_equal(p, EQ);
    assert_int_equal(ptc_batch_policy_parse("drop-last+equal", &p), PTC_OK);
    assert_int_equal(p, DL | EQ);
    const char *bad[] = {"", "equal+drop-last", "Drop-last", "drop_last", "drop-last+",
                         "equal ", "policy-equal", "drop-last+equal+equal"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(ptc_batch_policy_parse(bad[i], &p), PTC_E_INVAL);
    assert_string_equal(ptc_batch_policy_name(0), "none");
    assert_string_equal(ptc_batch_policy_name(DL), "drop-last");
    assert_string_equal(ptc_batch_policy_name(EQ), "equal");
    assert_string_equal(ptc_batch_policy_name(DL | EQ), "drop-last+equal");
    assert_null(ptc_batch_policy_name(4));
    uint64_t s, lo, hi;
    assert_int_equal(ptc_batch_steps_policy(10, 3, 0, 4, &s), PTC_E_INVAL);
    assert_int_equal(ptc_batch_part_policy(10, 3, 0, 2, 0, 0, 8, &lo, &hi), PTC_E_INVAL);
    assert_int_equal(ptc_batch_dropped(10, 3, 0, 2, 4, &s), PTC_E_INVAL);
}

/* 5 records, batch 5, 4 ranks: the split rule gives 2, 2, 1, 0. */
static void test_five_over_four(void **state)
{
    (void)state;
    const uint64_t none[] = {2, 2, 1, 0};
    for (uint64_t r = 0; r < 4; r++) {
        assert_int_equal(part_len(5, 5, 0, 4, r, 0, 0), none[r]);
        /* equal: floor(5/4) = 1 each, positions 0,1,2,3; position 4 dropped */
        uint64_t lo, hi;
        assert_int_equal(ptc_batch_part_policy(5, 5, 0, 4, r, 0, EQ, &lo, &hi), PTC_OK);
        assert_int_equal(lo, r);
        assert_int_equal(hi, r + 1);
    }
    assert_int_equal(dropped(5, 5, 0, 4, 0), 0);
    assert_int_equal(dropped(5, 5, 0, 4, EQ), 1);
    bool d;
    assert_int_equal(ptc_batch_is_dropped(5, 5, 0, 4, EQ, 4, &d), PTC_OK);
    assert_true(d);
    assert_int_equal(ptc_batch_is_dropped(5, 5, 0, 4, EQ, 3, &d), PTC_OK);
    assert_false(d);
    /* the only batch is full: drop-last drops nothing */
    uint64_t s;
    assert_int_equal(ptc_batch_steps_policy(5, 5, 0, DL, &s), PTC_OK);
    assert_int_equal(s, 1);
    assert_int_equal(dropped(5, 5, 0, 4, DL), 0);
    /* batch 4 over 4 ranks: steps 0 (4 records) and a partial step 1 (1) */
    assert_int_equal(ptc_batch_steps_policy(5, 4, 0, 0, &s), PTC_OK);
    assert_int_equal(s, 2);
    assert_int_equal(ptc_batch_steps_policy(5, 4, 0, DL, &s), PTC_OK);
    assert_int_equal(s, 1);
    uint64_t lo, hi;
    assert_int_equal(ptc_batch_part_policy(5, 4, 0, 4, 0, 1, DL, &lo, &hi), PTC_E_NOTFOUND);
    assert_int_equal(ptc_batch_part_policy(5, 4, 0, 4, 0, 1, 0, &lo, &hi), PTC_OK);
    assert_int_equal(hi - lo, 1);
    /* equal: step 1 exists and every rank gets floor(1/4) = 0 */
    for (uint64_t r = 0; r < 4; r++)
        assert_int_equal(part_len(5, 4, 0, 4, r, 1, EQ), 0);
    assert_int_equal(dropped(5, 4, 0, 4, DL), 1);
    assert_int_equal(dropped(5, 4, 0, 4, EQ), 1);
    assert_int_equal(dropped(5, 4, 0, 4, DL | EQ), 1);
}

/* N = 10, B = 4 (does not divide N), D = 3 (does not divide B). */
static void test_ten_four_three(void **state)
{
    (void)state;
    uint64_t s;
    assert_int_equal(ptc_batch_steps_policy(10, 4, 0, 0, &s), PTC_OK);
    assert_int_equal(s, 3);
    assert_int_equal(ptc_batch_steps_policy(10, 4, 0, EQ, &s), PTC_OK);
    assert_int_equal(s, 3);
    assert_int_equal(ptc_batch_steps_policy(10, 4, 0, DL, &s), PTC_OK);
    assert_int_equal(s, 2);
    assert_int_equal(ptc_batch_steps_policy(10, 4, 0, DL | EQ, &s), PTC_OK);
    assert_int_equal(s, 2);
    /* none (split rule, c = ceil(4/3) = 2): 2,2,0 | 2,2,0 | 1,1,0 */
    const uint64_t none[3][3] = {{2, 2, 0}, {2, 2, 0}, {1, 1, 0}};
    for (uint64_t k = 0; k < 3; k++)
        for (uint64_t r = 0; r < 3; r++) {
            assert_int_equal(part_len(10, 4, 0, 3, r, k, 0), none[k][r]);
            assert_int_equal(part_len(10, 4, 0, 3, r, k, EQ), k < 2 ? 1 : 0);
            if (k < 2)
                assert_int_equal(part_len(10, 4, 0, 3, r, k, DL), none[k][r]);
        }
    /* equal, step 1: positions 4, 5, 6 (7 dropped) */
    uint64_t lo, hi;
    assert_int_equal(ptc_batch_part_policy(10, 4, 0, 3, 2, 1, EQ, &lo, &hi), PTC_OK);
    assert_int_equal(lo, 6);
    assert_int_equal(hi, 7);
    assert_int_equal(ptc_batch_part_policy(10, 4, 0, 3, 0, 2, DL, &lo, &hi), PTC_E_NOTFOUND);
    assert_int_equal(ptc_batch_part_policy(10, 4, 0, 3, 0, 3, EQ, &lo, &hi), PTC_E_NOTFOUND);
    assert_int_equal(dropped(10, 4, 0, 3, 0), 0);
    assert_int_equal(dropped(10, 4, 0, 3, DL), 2);          /* positions 8, 9 */
    assert_int_equal(dropped(10, 4, 0, 3, EQ), 1 + 1 + 2);   /* 3, 7, 8, 9 */
    assert_int_equal(dropped(10, 4, 0, 3, DL | EQ), 1 + 1 + 2);
    /* from start 2: batches [2,6) [6,10), both full */
    assert_int_equal(dropped(10, 4, 2, 3, DL), 0);
    assert_int_equal(dropped(10, 4, 2, 3, EQ), 2);
    assert_int_equal(dropped(10, 4, 10, 3, EQ), 0);
    assert_int_equal(dropped(10, 4, 11, 3, EQ), 0);
    /* 1000 records, batch 64 over dp 3: 15 full batches + 40 */
    assert_int_equal(dropped(1000, 64, 0, 3, DL), 40);
    assert_int_equal(dropped(1000, 64, 0, 3, EQ), 15 * 1 + 1);
    assert_int_equal(dropped(1000, 64, 0, 3, DL | EQ), 15 + 40);
}

/* Every small case: parts under a policy are disjoint, inside [start, n),
 * equal per rank under EQUAL, the same as ptc_batch_part under NONE, and
 * together with the dropped positions cover [start, n) exactly. */
static void test_exhaustive(void **state)
{
    (void)state;
    uint8_t seen[40];
    for (uint64_t n = 0; n <= 23; n++)
        for (uint64_t b = 1; b <= 9; b++)
            for (uint64_t x = 0; x <= n + 1; x += 3)
                for (uint64_t d = 1; d <= 5; d++)
                    for (unsigned pol = 0; pol <= PTC_BATCH_POLICY_ALL; pol++) {
                        memset(seen, 0, sizeof seen);
                        uint64_t steps, base;
                        assert_int_equal(ptc_batch_steps_policy(n, b, x, pol, &steps), PTC_OK);
                        assert_int_equal(ptc_batch_steps(n, b, x, &base), PTC_OK);
                        assert_true(steps == base ||
                                    ((pol & DL) && steps + 1 == base && (n - x) % b));
                        for (uint64_t k = 0; k <= steps; k++) {
                            uint64_t len0 = 0;
                            for (uint64_t r = 0; r < d; r++) {
                                uint64_t lo, hi, plo, phi;
                                int rc = ptc_batch_part_policy(n, b, x, d, r, k, pol, &lo, &hi);
                                if (k == steps) {
                                    assert_int_equal(rc, PTC_E_NOTFOUND);
                                    continue;
                                }
                                assert_int_equal(rc, PTC_OK);
                                assert_true(x + k * b <= lo && lo <= hi && hi <= n);
                                if (pol == 0) {
                                    assert_int_equal(
                                        ptc_batch_part(n, b, x, d, r, k, &plo, &phi), PTC_OK);
                                    assert_int_equal(lo, plo);
                                    assert_int_equal(hi, phi);
                                }
                                if ((pol & EQ) && r == 0)
                                    len0 = hi - lo;
                                if (pol & EQ)
                                    assert_int_equal(hi - lo, len0);
                                for (uint64_t p = lo; p < hi; p++)
                                    seen[p]++;
                            }
                        }
                        uint64_t ndrop = 0;
                        for (uint64_t p = 0; p < n; p++) {
                            bool dr;
                            assert_int_equal(ptc_batch_is_dropped(n, b, x, d, pol, p, &dr),
                                             PTC_OK);
                            if (p < x) {
                                assert_false(dr);
                                assert_int_equal(seen[p], 0);
                                continue;
                            }
                            assert_int_equal(seen[p], dr ? 0 : 1);
                            ndrop += dr;
                        }
                        assert_int_equal(dropped(n, b, x, d, pol), ndrop);
                        if (pol == 0)
                            assert_int_equal(ndrop, 0);
                    }
    bool dr;
    assert_int_equal(ptc_batch_is_dropped(5, 2, 0, 1, 0, 5, &dr), PTC_E_RANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_five_over_four),
        cmocka_unit_test(test_ten_four_three),
        cmocka_unit_test(test_exhaustive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
